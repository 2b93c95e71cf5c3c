"""``tdmpc2 dataset-pool``: pool task datasets into one multi-task dataset.

    tdmpc2 dataset-pool --inputs results/datasets/tasks/A.parquet results/datasets/tasks/B.parquet \\
        --out results/datasets/pools/P.parquet

Task i of the pool is the i-th input's task; observations and actions are zero-padded to
the largest dims, and each task keeps its own dims, episode length, action repeat and
discount in the task table (:func:`tdmpc2core.dataset.pool_tasks`); each row keeps its
``seed`` and ``run_id`` (docs/artifacts.md).
"""
from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inputs", required=True, nargs="+", help="single-task datasets, in task-id order")
    p.add_argument("--out", required=True, help="the pooled dataset to write")


def run(args) -> int:
    from ..io.dataset import load_dataset, pool_tasks, save_dataset

    ds = pool_tasks([load_dataset(p) for p in args.inputs])
    size = save_dataset(ds, args.out)
    print(f"tdmpc2 dataset-pool: {args.out}: tasks {ds.task_names}, obs {ds.obs_dim}, action {ds.action_dim} "
          f"(padded), {ds.num_episodes} episodes, {ds.num_transitions} agent steps, {size / 1e6:.1f} MB",
          file=sys.stderr)
    return 0
