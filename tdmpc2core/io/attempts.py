"""Every attempt (session) of a resumable training job, kept beside its checkpoints.

A job stopped by SIGTERM (a time limit, a preemption, Ctrl-C) and resumed by a rerun runs
in several sessions; its ``run.json`` is written by the last one. So that the report can show
every attempt, each session records itself in ``attempts.json`` in the job's checkpoint
folder (which outlives the failed attempts: Snakemake deletes a failed job's outputs, not
its checkpoints)::

    att = attempts.begin(ckdir, unit="agent steps")     # before the folder is opened
    ...                                                 # train
    att.end("stopped by SIGTERM", end_step=3000)        # or "completed", ...
    run_json["attempts"] = att.records()

A record: ``attempt`` (1, 2, ...), ``started_utc``, ``ended_utc``, ``wall_seconds``,
``start_step`` / ``end_step`` (in ``unit``; the step a session resumed from and reached),
``outcome``, ``pid`` and ``compile_seconds`` (per program: init, chunk, eval). A session killed without a word (SIGKILL, out of memory, a node
failure) leaves its record ``running``; the next session marks it ``ended without a record
(killed or crashed)``. A folder whose run had finished (its completion marker present) starts
a new list: a forced rerun is a new run.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional

from . import atomic

FILE = "attempts.json"
#: in a checkpoint folder: the run there finished (tdmpc2core.stages.resumable.COMPLETE_MARKER)
FINISHED_MARKER = "outputs_written.json"
KILLED = "ended without a record (killed or crashed)"


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Attempt:
    """This session's record in a job's attempt list (see the module docstring)."""

    def __init__(self, path: Optional[Path], records: list, unit: str):
        self.path = path
        self._records = records
        self.unit = unit
        self._t0 = time.perf_counter()

    @property
    def record(self) -> dict:
        return self._records[-1]

    def _write(self) -> None:
        if self.path is not None:
            atomic.write_json(self.path, {"attempts": self._records})

    def end(self, outcome: str, end_step: Optional[int] = None, start_step: Optional[int] = None,
            compile_seconds: Optional[dict] = None) -> None:
        """Close this session's record: its outcome, the step it reached (and, if the caller
        learnt it only now, the step it resumed from), and the seconds it spent tracing,
        lowering and compiling each program (``{program: seconds}``)."""
        r = self.record
        r.update(ended_utc=_utc(), wall_seconds=round(time.perf_counter() - self._t0, 3), outcome=str(outcome))
        if compile_seconds is not None:
            r["compile_seconds"] = {k: round(float(v), 3) for k, v in compile_seconds.items()}
        if end_step is not None:
            r["end_step"] = int(end_step)
        if start_step is not None:
            r["start_step"] = int(start_step)
        self._write()

    def discard(self) -> None:
        """Drop this session's record (a session that did not run this folder's run, e.g. one
        refused because the folder holds another run's checkpoints)."""
        self._records.pop()
        self._write()

    def records(self) -> list[dict]:
        """Every attempt of the run so far, oldest first (copies)."""
        return [dict(r) for r in self._records]


def read(ckdir) -> list[dict]:
    """The attempt list of a checkpoint folder ([] if none or unreadable)."""
    try:
        data = json.loads((Path(ckdir) / FILE).read_text())
        return list(data.get("attempts") or [])
    except (OSError, ValueError, AttributeError):
        return []


def begin(ckdir, unit: str, start_step: Optional[int] = None) -> Attempt:
    """Open this session's record in ``ckdir`` (None: no checkpoint folder, a record kept in
    memory only). Call it before the folder is opened for the run, so that a finished run's
    folder (marker present) starts a new list."""
    record = {"started_utc": _utc(), "ended_utc": None, "wall_seconds": None, "start_step": start_step,
              "end_step": None, "unit": unit, "outcome": "running", "pid": os.getpid()}
    if ckdir is None:
        return Attempt(None, [{"attempt": 1, **record}], unit)
    ckdir = Path(ckdir)
    records = [] if (ckdir / FINISHED_MARKER).exists() else read(ckdir)
    for r in records:
        if r.get("outcome") == "running":
            r["outcome"] = KILLED
    records.append({"attempt": len(records) + 1, **record})
    ckdir.mkdir(parents=True, exist_ok=True)
    att = Attempt(ckdir / FILE, records, unit)
    att._write()
    return att


__all__ = ["Attempt", "begin", "read", "FILE", "KILLED"]
