"""``tdmpc2 convert-official-data``: the official mt30 / mt80 chunk files as our episode Parquet pool.

    tdmpc2 convert-official-data --src data/mt30 --out results/datasets/pools/mt30.parquet --tasks mt30

SECURITY: the official chunk files are written with ``torch.save``; loading them unpickles them,
which can run arbitrary code. Run this only on files from a trusted source (the official
release, Hugging Face ``nicklashansen/tdmpc2``), never on files of unknown origin.

Reads every ``*.pt`` file of ``--src`` (sorted by name, as the official offline trainer does),
one at a time, and writes one episode dataset (docs/artifacts.md, "Episode datasets") with the
official task list as its task table, in the official order (task id i of the files is task i
of the table): each task's true obs and action dims, its own episode length (500 agent steps
for dm_control, 100 for Meta-World) and discount, action repeat 2, our env id where we have the
task (``dmc:<name>``, docs/dmcontrol.md; ``mw-<name>``, docs/metaworld.md). Every official episode becomes one episode of ours (501 rows
for mt30, 101 for mt80), truncated at its last row. Every file's integrity is checked before
any is converted (each zip member's CRC-32, with the file's size and SHA-256 in the same read:
:mod:`tdmpc2core.io.integrity`): a damaged file is refused in one line naming it and the damaged
member, and nothing is written. Provenance: the files with their sizes and SHA-256
(``source_files``), the task set, torch and tensordict versions. Needs torch and tensordict
(``pip install torch==2.13.0 && pip install -e '.[official]'``). docs/artifacts.md, "Official
datasets", says which layouts were tested.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

TRUST = ("only run it on files from a trusted source: loading a .pt file unpickles it, which can run "
         "arbitrary code")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Convert the official TD-MPC2 mt30 / mt80 dataset chunks (torch.save'd TensorDicts) into "
                     f"our episode Parquet pool. SECURITY: {TRUST}.")
    p.add_argument("--src", required=True, help="folder of the official chunk files (chunk_0.pt, ...); "
                                                f"trusted files only ({TRUST})")
    p.add_argument("--out", required=True, help="the pooled dataset to write, e.g. results/datasets/pools/mt30.parquet")
    p.add_argument("--tasks", default="mt30", choices=["mt30", "mt80"],
                   help="the official task set of the files (task ids, 501 / 101 rows per episode); default mt30")


def task_table(task_set: str):
    """The official task list as our task table (:class:`tdmpc2core.dataset.TaskInfo`), each
    task's discount from its episode length (spec §1.3)."""
    from ..io.dataset import TaskInfo
    from ..io.official_data import task_set_table
    from ..model.config import TDMPC2Config, discount_from_episode_length

    c = TDMPC2Config()
    return [TaskInfo(name=r["name"], obs_dim=r["obs_dim"], action_dim=r["action_dim"],
                     episode_length=r["episode_length"], action_repeat=r["action_repeat"],
                     discount=discount_from_episode_length(r["episode_length"], c.discount_denom, c.discount_min,
                                                           c.discount_max),
                     env_id=r["env_id"]) for r in task_set_table(task_set)]


def run(args) -> int:
    from ..io import official_data, provenance

    log = lambda msg: print(f"tdmpc2 convert-official-data: {msg}", file=sys.stderr, flush=True)
    out = Path(args.out)
    if out.exists():
        out.unlink()  # a failed conversion leaves no file behind, not even the previous one
    versions = {}
    for mod in ("torch", "tensordict"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            versions[mod] = None
    prov = {"kind": "official", "task_set": args.tasks,
            "source": "TD-MPC2 official multi-task dataset (huggingface.co/datasets/nicklashansen/tdmpc2, "
                      f"{args.tasks}/), converted by tdmpc2 convert-official-data",
            "task_table_source": "tdmpc2core/resources/official_task_sets.csv (tdmpc2core/resources/README.md)",
            "episode_rows": official_data.EPISODE_ROWS[args.tasks], "src": str(args.src),
            "reset_rows": "row 0 of each official episode: action and reward set to NaN (the official trainer "
                          "never reads them)",
            "reader_versions": versions, "code": provenance.collect(".", include_jax=False)}
    try:
        summary = official_data.convert_chunks(args.src, out, task_set=args.tasks, tasks=task_table(args.tasks),
                                               provenance=prov, log=log)
    except ImportError as exc:  # torch / tensordict missing: one line, as the other bad-input errors
        log(f"error: {exc}")
        return 1
    log(f"{out}: {len(summary['files'])} file(s) ({', '.join(summary['layouts'])}), {summary['episodes']} episodes, "
        f"{summary['rows']} rows, {summary['bytes'] / 1e6:.1f} MB; episodes per task: {summary['episodes_per_task']}")
    return 0
