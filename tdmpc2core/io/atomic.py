"""Atomic file writes: write to a temporary name in the same folder, then rename.

A job killed mid-write leaves at most a ``.tmp-*`` file, never a file under the final
name that looks complete. The one implementation in the package (issue 25 item 7): it imports
nothing of ``tdmpc2core``, so any layer the architecture lets import ``io/`` can use it.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ""):
    """Yield a temporary path next to ``path`` (``.tmp-{name}-*{suffix}``, permissions 0o666
    less the umask); when the block ends without an exception, rename it onto ``path``; the
    temporary file is removed either way. ``suffix``: for writers that read the format from
    the name (e.g. ``".png"``). The folder is created if missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}-", suffix=suffix, dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file ordinary permissions
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(path, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically (UTF-8 unless told)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding=encoding)


def write_json(path, obj) -> None:
    """Write ``obj`` as indented JSON with sorted keys (numpy scalars and arrays as numbers
    and lists); raises TypeError naming a type it cannot write."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def write_parquet(path, table) -> None:
    """Write a pyarrow Table (or pandas DataFrame) atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not isinstance(table, pa.Table):
        table = pa.Table.from_pandas(table, preserve_index=False)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
