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
(killed or crashed)``. A training stage's session is written ``completed`` only once its
outputs are all written (its run.json holds the record so, :func:`tdmpc2core.stages.resumable.final_phase`);
a stop in that final phase records ``stopped by SIGTERM`` at the run's last step. A folder whose run had finished (its completion marker present) starts
a new list: a forced rerun is a new run.

A session that ends because it was stopped or failed also gets a ``stop`` record (issue 25,
item 2), so that the end-of-run hook reads what happened instead of parsing log lines; a
completed session has none::

    "stop": {"kind": "signal" | "error",          # stopped on request, or an exception ended it
             "signal": "SIGTERM" | "SIGINT" | None,
             "step": int | None, "total": int | None,  # where it stopped, the run's length (in "unit")
             "unit": "agent steps" | "updates",     # the record's unit
             "checkpoint": str | None,              # the checkpoint written on this stop
             "reason": str | None}                  # why there is no checkpoint, the error's one line, or
                                                    # that the stop came in the final phase (outputs left)

:func:`stop_record` builds one (checked); ``Attempt.end(..., stop=...)`` checks it again.
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
#: the keys of a ``stop`` record, in order, and the values its enumerated keys accept
STOP_KEYS = ("kind", "signal", "step", "total", "unit", "checkpoint", "reason")
STOP_KINDS = ("signal", "error")
STOP_SIGNALS = ("SIGTERM", "SIGINT")
UNITS = ("agent steps", "updates")


def _optional_int(key: str, v) -> Optional[int]:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"attempts stop record: {key}={v!r}; accepted: a non-negative int or None")
    return int(v)


def _optional_str(key: str, v) -> Optional[str]:
    if v is not None and not isinstance(v, str):
        raise ValueError(f"attempts stop record: {key}={v!r}; accepted: a str or None")
    return v


def check_stop(stop: dict, unit: Optional[str] = None) -> dict:
    """A checked copy of a ``stop`` record (module docstring; issue 25 item 2).

    Args:
      stop: the record, exactly the keys :data:`STOP_KEYS`.
      unit: the attempt's unit; when given, ``stop["unit"]`` must equal it.

    Raises:
      ValueError: one line naming the missing or unknown key, or the bad value and what is
        accepted (``kind`` in :data:`STOP_KINDS`; ``signal`` in :data:`STOP_SIGNALS` or None,
        and a name when ``kind`` is "signal"; ``step``/``total`` non-negative ints or None;
        ``unit`` in :data:`UNITS`; ``checkpoint``/``reason`` str or None).
    """
    if not isinstance(stop, dict):
        raise ValueError(f"attempts stop record: {stop!r}; accepted: a dict of the keys {list(STOP_KEYS)}")
    missing, unknown = [k for k in STOP_KEYS if k not in stop], sorted(set(stop) - set(STOP_KEYS))
    if missing or unknown:
        raise ValueError(f"attempts stop record: missing keys {missing}, unknown keys {unknown}; "
                         f"accepted: exactly {list(STOP_KEYS)}")
    if stop["kind"] not in STOP_KINDS:
        raise ValueError(f"attempts stop record: kind={stop['kind']!r}; accepted: {list(STOP_KINDS)}")
    if stop["signal"] not in STOP_SIGNALS + (None,) or (stop["kind"] == "signal" and stop["signal"] is None):
        raise ValueError(f"attempts stop record: signal={stop['signal']!r} with kind={stop['kind']!r}; accepted: "
                         f"{list(STOP_SIGNALS)}, or None when kind is 'error'")
    if stop["unit"] not in UNITS or (unit is not None and stop["unit"] != unit):
        raise ValueError(f"attempts stop record: unit={stop['unit']!r}; accepted: "
                         f"{[unit] if unit is not None else list(UNITS)} (the attempt's unit)")
    return {"kind": stop["kind"], "signal": stop["signal"], "step": _optional_int("step", stop["step"]),
            "total": _optional_int("total", stop["total"]), "unit": stop["unit"],
            "checkpoint": _optional_str("checkpoint", stop["checkpoint"]),
            "reason": _optional_str("reason", stop["reason"])}


def stop_record(kind: str, unit: str, *, signal: Optional[str] = None, step: Optional[int] = None,
                total: Optional[int] = None, checkpoint: Optional[str] = None,
                reason: Optional[str] = None) -> dict:
    """A checked ``stop`` record from keywords (module docstring); raises ValueError as
    :func:`check_stop`. A ``checkpoint`` path-like is stored as ``str``."""
    return check_stop({"kind": kind, "signal": signal, "step": step, "total": total, "unit": unit,
                       "checkpoint": None if checkpoint is None else str(checkpoint), "reason": reason})


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
            compile_seconds: Optional[dict] = None, stop: Optional[dict] = None, write: bool = True) -> None:
        """Close this session's record: its outcome, the step it reached (and, if the caller
        learnt it only now, the step it resumed from), the seconds it spent tracing,
        lowering and compiling each program (``{program: seconds}``) and, for a session
        stopped or failed, its ``stop`` record (module docstring; issue 25 item 2).
        ``write=False``: in memory only (:meth:`records`), until :meth:`save` or a later
        ``end`` (a training stage's "completed", recorded in its run.json before the outputs
        are all written: :func:`tdmpc2core.stages.resumable.final_phase`). A later ``end``
        replaces the outcome (and drops a ``stop`` record when given none).

        Raises:
          ValueError: ``stop`` is not a valid stop record in this attempt's unit
            (:func:`check_stop`), or is given with the outcome "completed". Nothing is written then.
        """
        if stop is not None:
            if outcome == "completed":
                raise ValueError("attempts: outcome 'completed' with a stop record; a completed session has none")
            stop = check_stop(stop, self.unit)
        r = self.record
        r.update(ended_utc=_utc(), wall_seconds=round(time.perf_counter() - self._t0, 3), outcome=str(outcome))
        if compile_seconds is not None:
            r["compile_seconds"] = {k: round(float(v), 3) for k, v in compile_seconds.items()}
        if end_step is not None:
            r["end_step"] = int(end_step)
        if start_step is not None:
            r["start_step"] = int(start_step)
        if stop is not None:
            r["stop"] = stop
        else:
            r.pop("stop", None)
        if write:
            self._write()

    def save(self) -> None:
        """Write the records as they are (after ``end(..., write=False)``)."""
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


__all__ = ["Attempt", "begin", "read", "check_stop", "stop_record", "FILE", "KILLED", "STOP_KEYS", "STOP_KINDS",
           "STOP_SIGNALS", "UNITS"]
