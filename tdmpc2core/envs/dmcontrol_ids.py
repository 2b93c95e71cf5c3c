"""The dm_control task ids, as plain Python (no JAX, no dm_control): which ``dmc:`` ids are
accepted, which official tasks are refused and why, and the official mt30 task order.

:mod:`tdmpc2core.envs.ids` dispatches ids with these tables, so a machine without JAX or
dm_control (a cluster login node running ``snakemake -n``) can check a configuration that
names dm_control tasks. The environment itself is :mod:`tdmpc2core.envs.dmcontrol_env`.
"""
from __future__ import annotations

from tdmpc2core.envs.suggest import close_ids, shown, unknown_message

#: Official custom tasks defined here, in the official mt30 order.
CUSTOM_TASKS: tuple[str, ...] = (
    "walker-walk-backwards",
    "walker-run-backwards",
    "cheetah-run-backwards",
    "cheetah-run-front",
    "cheetah-run-back",
    "cheetah-jump",
    "hopper-hop-backwards",
    "reacher-three-easy",
    "reacher-three-hard",
    "cup-spin",
    "pendulum-spin",
)

#: Official custom tasks (all of the official task files, not only mt30's) that are not
#: defined here, with the reason.
REFUSED: dict[str, str] = {
    **{f"reacher-four-{lvl}": ("needs the official four-link reacher model, which dm_control does not "
                               "ship and which is in no official task set (mt30, mt80)")
       for lvl in ("easy", "hard")},
    "fish-obstacles": "needs the official fish model with four walls, which dm_control does not ship",
}

PREFIX = "dmc:"

# dm_control 1.0.50 suite.ALL_TASKS without lqr, as (domain, task); checked by tests.
_SUITE_TASKS: tuple[tuple[str, str], ...] = (
    ("acrobot", "swingup"), ("acrobot", "swingup_sparse"), ("ball_in_cup", "catch"),
    ("cartpole", "balance"), ("cartpole", "balance_sparse"), ("cartpole", "swingup"),
    ("cartpole", "swingup_sparse"), ("cartpole", "two_poles"), ("cartpole", "three_poles"),
    ("cheetah", "run"), ("dog", "stand"), ("dog", "walk"), ("dog", "trot"), ("dog", "run"),
    ("dog", "fetch"), ("finger", "spin"), ("finger", "turn_easy"), ("finger", "turn_hard"),
    ("fish", "upright"), ("fish", "swim"), ("hopper", "stand"), ("hopper", "hop"),
    ("humanoid", "stand"), ("humanoid", "walk"), ("humanoid", "run"), ("humanoid", "run_pure_state"),
    ("humanoid_CMU", "stand"), ("humanoid_CMU", "walk"), ("humanoid_CMU", "run"),
    ("manipulator", "bring_ball"), ("manipulator", "bring_peg"), ("manipulator", "insert_ball"),
    ("manipulator", "insert_peg"), ("pendulum", "swingup"), ("point_mass", "easy"),
    ("point_mass", "hard"), ("quadruped", "walk"), ("quadruped", "run"), ("quadruped", "escape"),
    ("quadruped", "fetch"), ("reacher", "easy"), ("reacher", "hard"), ("stacker", "stack_2"),
    ("stacker", "stack_4"), ("swimmer", "swimmer6"), ("swimmer", "swimmer15"), ("walker", "stand"),
    ("walker", "walk"), ("walker", "run"),
)
_ALIAS = {"ball_in_cup": "cup", "point_mass": "pointmass"}
_UNALIAS = {v: k for k, v in _ALIAS.items()}


def official_name(domain: str, task: str) -> str:
    """The official TD-MPC2 name of dm_control suite task (domain, task): ``cup-catch``."""
    return f"{_ALIAS.get(domain, domain)}-{task.replace('_', '-')}"


#: official name -> (domain, task) of the dm_control suite tasks supported.
SUITE_TASKS: dict[str, tuple[str, str]] = {official_name(d, t): (d, t) for d, t in _SUITE_TASKS}

#: Every accepted id: ``dmc:`` + official name (suite tasks, then the custom ones).
DMCONTROL_ENVS: tuple[str, ...] = tuple(PREFIX + n for n in (*SUITE_TASKS, *CUSTOM_TASKS))

#: Refused names (official custom tasks and lqr) -> why.
REFUSED_TASKS: dict[str, str] = {
    **REFUSED,
    "lqr-lqr-2-1": "lqr's model is drawn at random when the environment is built and it has no time limit",
    "lqr-lqr-6-2": "lqr's model is drawn at random when the environment is built and it has no time limit",
}

#: The paper's multi-task set mt30 in the official order (tdmpc2/common/__init__.py, 5f6fade).
MT30_TASKS: tuple[str, ...] = (
    "walker-stand", "walker-walk", "walker-run", "cheetah-run", "reacher-easy",
    "reacher-hard", "acrobot-swingup", "pendulum-swingup", "cartpole-balance", "cartpole-balance-sparse",
    "cartpole-swingup", "cartpole-swingup-sparse", "cup-catch", "finger-spin", "finger-turn-easy",
    "finger-turn-hard", "fish-swim", "hopper-stand", "hopper-hop",
    "walker-walk-backwards", "walker-run-backwards", "cheetah-run-backwards", "cheetah-run-front",
    "cheetah-run-back", "cheetah-jump", "hopper-hop-backwards", "reacher-three-easy",
    "reacher-three-hard", "cup-spin", "pendulum-spin",
)

def dmc_name(env_id: str) -> str:
    """The official task name of a ``dmc:`` id (``"dmc:cup-catch"`` -> ``"cup-catch"``)."""
    return env_id[len(PREFIX):] if env_id.startswith(PREFIX) else env_id


def unknown_id_error(env_id: str) -> ValueError:
    """The error for a ``dmc:`` id that is not accepted, one line of at most 400 characters:
    why (a refused task) or close matches (case and ``-``/``_`` ignored; dm_control's own
    domain names read as the official ones), then the accepted ids closest first (at most 10)
    and the command that lists them all (:func:`.suggest.unknown_message`)."""
    name = dmc_name(str(env_id))
    key = name.lower().replace("_", "-")
    refused = {k.lower(): k for k in REFUSED_TASKS}
    close: list = []
    if key in refused:
        head = f"dm_control task {shown(env_id)} is not available: {REFUSED_TASKS[refused[key]]}."
    else:
        head = f"unknown dm_control task {shown(env_id)}."
        domain = name.split("-", 1)[0].lower()
        guess = name
        if domain in _ALIAS:   # ball_in_cup-catch -> cup-catch
            guess = _ALIAS[domain] + name[len(domain):]
        close = close_ids(PREFIX + guess, DMCONTROL_ENVS, n=3, cutoff=0.6)
    return ValueError(unknown_message(head, PREFIX + name, "dm_control", DMCONTROL_ENVS, close))
