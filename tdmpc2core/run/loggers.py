"""Loggers: where a run's metrics go besides its history (a CSV file today; wandb or
tensorboard are one factory each).

A logger is any object with ``log(step, metrics)`` and ``close()`` (:class:`Logger`). Give
them to an agent's ``train(..., loggers=[...])`` (a :class:`~tdmpc2core.run.driver.RunOptions`
field): the run driver calls ``log`` after each chunk record and after each evaluation:

* ``step``: the run's position in its own unit (agent steps for :class:`~tdmpc2core.TDMPC2`,
  updates for :class:`~tdmpc2core.TDMPC2MultiTask`);
* ``metrics``: ``{"Train/<name>": value}`` for every number of the chunk record (the update
  metrics, ``updates``, ``train_return``, ``chunk_seconds``...; ``Train/env_frames`` where the
  agent knows them), and ``{"Eval/episodic mean reward": value}`` (and what else the agent
  reports, e.g. ``Eval/normalized score``, ``Eval/env_frames``) after an evaluation. A
  per-seed value is logged as its mean over the seeds (NaN-aware).

A logger that raises is reported once as a one-line warning and dropped for the rest of the
call; training goes on. The caller owns its loggers and closes them (the driver never does,
so one logger may serve several ``train`` calls of a run).

New kinds: :func:`register_logger` ``(kind, factory)``, then :func:`make_logger` ``(kind,
**options)``; the built-in kind is ``"csv"`` (:class:`CSVLogger`).
"""
from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path
from typing import Callable, Mapping, Protocol, runtime_checkable

from ..io.atomic import write_text


@runtime_checkable
class Logger(Protocol):
    """What the run driver calls: ``log(step, metrics)`` with the run's position (int) and a
    ``{name: float}`` mapping; ``close()`` when the owner is done with it."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


_KINDS: dict[str, Callable[..., Logger]] = {}


def register_logger(kind: str, factory: Callable[..., Logger]) -> None:
    """Make ``make_logger(kind, **options)`` call ``factory(**options)``.

    Raises:
      ValueError: ``kind`` is empty or already registered (one factory per kind).
      TypeError: ``factory`` is not callable.
    """
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"register_logger: kind must be a non-empty string, got {kind!r}")
    if kind in _KINDS:
        raise ValueError(f"register_logger: a logger kind {kind!r} is already registered")
    if not callable(factory):
        raise TypeError(f"register_logger({kind!r}): factory must be callable, got {type(factory).__name__}")
    _KINDS[kind] = factory


def logger_kinds() -> list:
    """The registered logger kinds, sorted."""
    return sorted(_KINDS)


def make_logger(kind: str, **options) -> Logger:
    """A new logger of ``kind`` built with ``options`` (e.g. ``make_logger("csv", path=...)``).

    Raises:
      ValueError: an unknown kind (the message lists the registered ones).
    """
    factory = _KINDS.get(kind)
    if factory is None:
        raise ValueError(f"unknown logger kind {kind!r}; registered: {logger_kinds()}")
    return factory(**options)


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return repr(float(value)) if isinstance(value, float) else str(value)


class CSVLogger:
    """One CSV file: a ``step`` column, then one column per metric name in the order first
    seen; one row per ``log`` call (empty cells for the metrics a row does not have).

    The header comes from the first record (or from the file, when it exists: a resumed run
    appends to it). A record with new names extends the header: the file is rewritten with
    the new columns (atomically, :func:`tdmpc2core.io.atomic.write_text`; older rows get empty
    cells), then rows are appended again. Each row is flushed as it is written.

    Args:
      path: the CSV file (its folder is created).
    Raises:
      ValueError: the existing file's first column is not ``step``.
    """

    def __init__(self, path):
        self.path = Path(os.fspath(path))
        self.columns: list = []
        if self.path.exists() and self.path.stat().st_size > 0:
            with open(self.path, newline="") as f:
                header = next(csv.reader(f), [])
            if not header or header[0] != "step":
                raise ValueError(f"{self.path}: not a CSVLogger file (its first column is "
                                 f"{header[0] if header else 'missing'!r}, expected 'step')")
            self.columns = header[1:]

    def _rewrite(self, columns: list) -> None:
        rows = []
        if self.path.exists():
            with open(self.path, newline="") as f:
                rows = list(csv.DictReader(f))
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=["step", *columns], restval="", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        write_text(self.path, buf.getvalue())
        self.columns = columns

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Append the row ``step, metrics`` (extending the header first if needed)."""
        new = [k for k in metrics if k not in self.columns]
        if new or not self.path.exists():
            self._rewrite(self.columns + new)
        row = [str(int(step))] + [_cell(metrics.get(k)) for k in self.columns]
        with open(self.path, "a", newline="") as f:
            csv.writer(f, lineterminator="\n").writerow(row)

    def close(self) -> None:
        """Nothing to release (each row is written and closed as it comes)."""


register_logger("csv", CSVLogger)

__all__ = ["Logger", "CSVLogger", "register_logger", "make_logger", "logger_kinds"]
