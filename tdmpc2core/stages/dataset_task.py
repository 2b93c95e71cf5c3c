"""``tdmpc2 dataset-task``: join the seeds' episode datasets of one task into one file.

    tdmpc2 dataset-task --inputs results/single/T/seed0/episodes.parquet ... \\
        --out results/datasets/tasks/T.parquet

Episodes keep their order, seed after seed in the order given, and each row keeps its ``seed``
and ``run_id`` (docs/artifacts.md; an input of format version 1 gets them from its provenance).
"""
from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inputs", required=True, nargs="+", help="episode datasets of one task (one per seed)")
    p.add_argument("--out", required=True, help="the task's dataset to write")


def run(args) -> int:
    from ..io.dataset import concatenate_episodes, load_dataset, save_dataset

    parts = [load_dataset(p) for p in args.inputs]
    ds = concatenate_episodes(parts)
    size = save_dataset(ds, args.out)
    seeds = [r.seed for r in ds.runs]
    print(f"tdmpc2 dataset-task: {args.out}: {len(parts)} input(s), seeds {seeds}, {ds.num_episodes} episodes, "
          f"{ds.num_transitions} agent steps, {size / 1e6:.1f} MB", file=sys.stderr)
    return 0
