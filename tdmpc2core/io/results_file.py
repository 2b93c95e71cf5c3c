"""Reading a benchmark's committed results file (Parquet) for the report: one reader for every
kind (tdmpc2core/io/learning_parity.py, tdmpc2core/io/reproduction.py), each with its own checks."""
from __future__ import annotations

import os
from typing import Callable

import pandas as pd


def read_checked_parquet(path: str | os.PathLike, what: str, check: Callable[[pd.DataFrame, str], pd.DataFrame]
                         ) -> pd.DataFrame:
    """The Parquet file ``path`` read and passed through ``check(df, str(path))``; ``what`` names
    the kind of file in the errors (e.g. "learning-parity results").

    Raises: FileNotFoundError (the path), ValueError (a folder, a file that is not Parquet, or
    what ``check`` refuses: named)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{what} {path!s} do not exist")
    if not os.path.isfile(path):
        raise ValueError(f"{what} {path!s}: a folder, not the Parquet file")
    try:
        df = pd.read_parquet(path)
    except Exception as e:  # noqa: BLE001 (pyarrow's errors of a file that is not Parquet do not name it)
        raise ValueError(f"{what} {path!s}: not a Parquet file ({type(e).__name__}: {e})") from None
    return check(df, str(path))
