"""Packaged data tables, each with its source named (README.md beside this file).

Plain Python (csv, no JAX), importable from every layer: the readers here only parse the
files shipped with the package.
"""
from __future__ import annotations

import csv
import functools
from importlib import resources

#: MuJoCo Playground DM Control task -> the dm_control task name of its published TD-MPC2 curve
#: (the 22 Playground tasks that have one; ../shared/reference README): read by the Playground
#: suite (envs/suites/playground.py) and the report (report/published.py)
PLAYGROUND_TO_DMC: dict[str, str] = {
    "AcrobotSwingup": "acrobot-swingup",
    "BallInCup": "cup-catch",
    "CartpoleBalance": "cartpole-balance",
    "CartpoleBalanceSparse": "cartpole-balance-sparse",
    "CartpoleSwingup": "cartpole-swingup",
    "CartpoleSwingupSparse": "cartpole-swingup-sparse",
    "CheetahRun": "cheetah-run",
    "FingerSpin": "finger-spin",
    "FingerTurnEasy": "finger-turn-easy",
    "FingerTurnHard": "finger-turn-hard",
    "FishSwim": "fish-swim",
    "HopperHop": "hopper-hop",
    "HopperStand": "hopper-stand",
    "HumanoidStand": "humanoid-stand",
    "HumanoidWalk": "humanoid-walk",
    "HumanoidRun": "humanoid-run",
    "PendulumSwingup": "pendulum-swingup",
    "ReacherEasy": "reacher-easy",
    "ReacherHard": "reacher-hard",
    "WalkerRun": "walker-run",
    "WalkerStand": "walker-stand",
    "WalkerWalk": "walker-walk",
}

#: where the official task lists (``official_task_sets.csv``: names and order) come from
OFFICIAL_TASK_SETS_SOURCE = {
    "repository": "nicklashansen/tdmpc2",
    "commit": "5f6fadec0fec78304b4b53e8171d348b58cac486",
    "path": "tdmpc2/common/__init__.py",
    "name": "TASK_SET",
    "file_sha256": "d7714a0f5a5ed2a40542cf5cd69f9504fcd876dc8f9f5cba02e877c435c88e99",
    "note": "task names and order as the official code lists them; a multi-task checkpoint's task index i is "
            "the i-th name (dims, episode lengths and env ids: README.md)",
}
OFFICIAL_TASK_SETS = "official_task_sets.csv"


@functools.lru_cache(maxsize=1)
def official_task_sets() -> dict:
    """``{task set: [row, ...]}`` from ``official_task_sets.csv``, rows in task-id order, each
    a dict: ``task_id``, ``name``, ``domain``, ``obs_dim``, ``action_dim``, ``episode_length``
    (agent steps), ``action_repeat``, ``env_id`` (our ``dmc:`` or ``mw-`` id, or None).

    Raises:
      ValueError: a set whose task ids are not 0..K-1 (a damaged table).
    """
    with resources.files(__name__).joinpath(OFFICIAL_TASK_SETS).open("r", newline="") as fh:
        rows = list(csv.DictReader(fh))
    sets: dict = {}
    for r in rows:
        sets.setdefault(r["task_set"], []).append(
            {"task_id": int(r["task_id"]), "name": r["name"], "domain": r["domain"], "obs_dim": int(r["obs_dim"]),
             "action_dim": int(r["action_dim"]), "episode_length": int(r["episode_length"]),
             "action_repeat": int(r["action_repeat"]), "env_id": r["env_id"] or None})
    for name, table in sets.items():
        table.sort(key=lambda r: r["task_id"])
        if [r["task_id"] for r in table] != list(range(len(table))):
            raise ValueError(f"tdmpc2core/resources/{OFFICIAL_TASK_SETS}: the task ids of {name} are not 0..K-1")
    return sets
