"""``tdmpc2 official-table``: the released checkpoints' returns beside the published final scores.

    tdmpc2 official-table --evals results/official/*/eval.parquet --out results/tables/official_checkpoints.csv

Writes the CSV (:data:`tdmpc2core.report.official.COLUMNS`) and a Markdown copy beside it
(``.md``), atomically.
"""
from __future__ import annotations

import argparse
import os
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--evals", required=True, nargs="+", help="eval.parquet files of tdmpc2 evaluate-official")
    p.add_argument("--out", required=True, help="the CSV to write (the Markdown copy goes beside it)")


def run(args) -> int:
    from ..io import atomic
    from ..report import analysis as A
    from ..report.official import official_markdown, official_table

    for p in args.evals:
        if not os.path.exists(p):
            raise FileNotFoundError(f"{p} does not exist: run tdmpc2 evaluate-official first")
    table = official_table(args.evals)
    atomic.write_text(args.out, table.to_csv(index=False))
    atomic.write_text(os.path.splitext(args.out)[0] + ".md", official_markdown(table))
    print(f"tdmpc2 official-table: {args.out}: {len(table)} row(s) from {len(args.evals)} checkpoint(s)",
          file=sys.stderr)
    return 0
