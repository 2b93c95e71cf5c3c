"""``tdmpc2 dataset-summary``: per-episode summary of every task dataset and pool, and the
return-distribution figure, for the report's dataset section.

    tdmpc2 dataset-summary --tasks results/datasets/tasks/A.parquet ... \\
        --pools results/datasets/pools/P.parquet ... \\
        --out results/datasets/summary.parquet --figure results/figures/datasets.png

``summary.parquet``: one row per episode of each dataset; columns ``dataset`` (the file's
stem), ``kind`` (``task`` or ``pool``), ``task``, ``episode``, ``agent_steps``, ``return``,
``terminated`` (docs/artifacts.md). Only the small columns of the files are read.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks", nargs="*", default=[], help="single-task datasets")
    p.add_argument("--pools", nargs="*", default=[], help="pooled datasets")
    p.add_argument("--out", required=True, help="summary Parquet file")
    p.add_argument("--figure", required=True, help="return-distribution figure (PNG)")


def run(args) -> int:
    import pandas as pd

    from ..io import atomic
    from ..report import figures
    from ..io.dataset import read_episode_summary

    frames = []
    for kind, paths in (("task", args.tasks), ("pool", args.pools)):
        for p in paths:
            df = read_episode_summary(p)
            df.insert(0, "kind", kind)
            df.insert(0, "dataset", Path(p).name.removesuffix(".parquet"))
            frames.append(df)
    if not frames:
        raise ValueError("dataset-summary: no datasets given (--tasks / --pools)")
    summary = pd.concat(frames, ignore_index=True)
    atomic.write_parquet(args.out, summary)
    figures.dataset_returns_figure(summary, args.figure)
    print(f"tdmpc2 dataset-summary: {args.out} ({len(summary)} episodes), {args.figure}", file=sys.stderr)
    return 0
