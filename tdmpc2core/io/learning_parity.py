"""The results file of ``benchmarks/learning_parity.py`` (learning beside the official code):
its columns, reading and checking.

One Parquet file, one row per evaluation of each seed: ``implementation`` ("official" or
"ours"), ``task``, ``seed``, ``agent_step`` (agent steps), ``env_frames`` (simulator steps),
``episode_return`` (the mean return of the evaluation's episodes) and, optionally,
``eval_episodes``. Read by the statistics and the report (tdmpc2core/report/learning_parity.py)
and checked at plan time (tdmpc2core/pipeline/config.py, config key ``learning_parity``).
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd

from .results_file import read_checked_parquet

#: The Parquet file's columns (in order) and their dtype kinds; ``eval_episodes`` is optional.
COLUMNS = {"implementation": "O", "task": "O", "seed": "i", "agent_step": "i", "env_frames": "i",
           "episode_return": "f"}
OPTIONAL_COLUMNS = {"eval_episodes": "i"}
#: The two implementations, in the order the tables and figures show them.
IMPLEMENTATIONS = ("official", "ours")


def check_frame(df: pd.DataFrame, source: str = "the results") -> pd.DataFrame:
    """``df`` with its columns checked and typed (see :data:`COLUMNS`).

    Raises:
      ValueError: a missing column or one of the wrong kind (named), no rows, an implementation other
        than :data:`IMPLEMENTATIONS`, a duplicated (implementation, task, seed, agent_step) row.
    """
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{source}: missing column(s) {missing}; expected {list(COLUMNS)}")
    if df.empty:
        raise ValueError(f"{source}: no rows (no evaluation was recorded)")
    for c, kind in {**COLUMNS, **{k: v for k, v in OPTIONAL_COLUMNS.items() if k in df.columns}}.items():
        got = df[c].dtype.kind
        ok = got in ("O", "U", "S") or str(df[c].dtype) in ("string", "str") if kind == "O" else (
            got in "iu" if kind == "i" else got in "fiu")
        if not ok:
            raise ValueError(f"{source}: column {c!r} has dtype {df[c].dtype}, expected kind {kind!r}")
    bad = sorted(set(df["implementation"]) - set(IMPLEMENTATIONS))
    if bad:
        raise ValueError(f"{source}: implementation(s) {bad} unknown; expected {list(IMPLEMENTATIONS)}")
    key = ["implementation", "task", "seed", "agent_step"]
    dup = df.duplicated(key)
    if dup.any():
        row = df[dup].iloc[0]
        raise ValueError(f"{source}: duplicated row {({k: row[k].item() if hasattr(row[k], 'item') else row[k] for k in key})}")
    out = df.copy()
    out["episode_return"] = out["episode_return"].astype(np.float64)
    return out.sort_values(key, kind="stable").reset_index(drop=True)


def read_results(path: str | os.PathLike) -> pd.DataFrame:
    """The benchmark's Parquet file, checked (:func:`check_frame`).

    Raises: FileNotFoundError (the path), ValueError (a folder, a file that is not Parquet, bad
    columns: named)."""
    return read_checked_parquet(path, "learning-parity results", check_frame)
