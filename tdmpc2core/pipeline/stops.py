"""Stopping a local workflow run: the trainers get SIGTERM, and the run ends with what each did.

docs/pipeline.md, "Stopping a local run". Snakemake 9's local executor runs each job's shell
in snakemake's own process group and, on SIGTERM, waits for the running jobs to finish; on
SIGINT it raises ``KeyboardInterrupt`` in its scheduler, which also waits for them. A signal
to the snakemake process alone (a supervisor, a notebook, ``kill``) thus never reached a
training job. :class:`LocalStop`, installed by ``workflow/rules/hooks.smk``'s ``onstart``
handler, changes that: on SIGTERM or SIGINT it sends SIGTERM to every running training
process (``tdmpc2 train-single`` / ``train-multi`` among the descendants; one started in the
next moments is signalled too) and then asks the scheduler for its graceful exit. Each
trainer stops at its next chunk boundary with a checkpoint, exits 143, and writes a stop
record (``"stop"`` in its session's record of ``attempts.json`` in its checkpoint folder,
:mod:`tdmpc2core.io.attempts`); :meth:`LocalStop.lines` reads those records, found through
each trainer's ``--checkpoint-dir``, and says per job where it stopped, its checkpoint and
how to resume. A second SIGINT is passed on as SIGINT (the trainers give up their
checkpoint) and Snakemake's own interrupt follows.

Imports no JAX and no Snakemake; ``psutil`` is imported when processes are looked at.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

from ..io import attempts

#: the ``tdmpc2`` subcommands that train (and stop at a chunk boundary on SIGTERM)
TRAINING_STAGES = ("train-single", "train-multi")


def arg(cmd: Sequence[str], flag: str, n: int = 1):
    """The value after ``flag`` in an argv list (``n`` > 1: a list of up to ``n`` values, those
    before the next ``--option``); None when ``flag`` is absent."""
    if flag not in cmd:
        return None
    i = list(cmd).index(flag) + 1
    vals = []
    while i < len(cmd) and not cmd[i].startswith("--") and len(vals) < n:
        vals.append(cmd[i])
        i += 1
    return vals if n > 1 else (vals[0] if vals else None)


def is_trainer(cmd: Sequence[str]) -> bool:
    """Whether an argv list is a ``tdmpc2 train-single`` / ``train-multi`` process (the
    console script or ``python -m tdmpc2core.cli``; a shell whose ``-c`` string names one is not)."""
    return any(s in cmd for s in TRAINING_STAGES) and any("tdmpc2" in c for c in cmd)


def job_name(cmd: Sequence[str], seed_tag: Callable[[Sequence[str]], str], pixel_tasks=()) -> str:
    """The workflow job a trainer's argv belongs to, as the run's last lines name it:
    ``train_single_seeds_0_1 (task pendulum)`` (``train_single_pixels_...`` for a task of
    ``pixel_tasks``, whose rule is apart) or ``train_multi (pool demo, model size 1)``
    (``seed_tag``: seeds -> the seed group's tag, workflow/rules/common.smk)."""
    if "train-single" in cmd:
        seeds = arg(cmd, "--seeds", n=10**6) or []
        task = arg(cmd, "--task")
        return f"train_single_{'pixels_' if task in pixel_tasks else ''}{seed_tag(seeds)} (task {task})"
    return f"train_multi (pool {arg(cmd, '--pool')}, model size {arg(cmd, '--model-size')})"


@dataclass
class Trainer:
    """A training process this run signalled, as seen when it was signalled."""

    pid: int
    cmd: list
    #: its working directory (a relative ``--checkpoint-dir`` is under it)
    cwd: str
    #: the file its stderr (else stdout) went to, relative to the snakemake process's working
    #: directory when under it; None if it could not be read
    log: Optional[str]

    @property
    def checkpoint_dir(self) -> Optional[str]:
        """Its ``--checkpoint-dir``, absolute; None if the command has none."""
        ck = arg(self.cmd, "--checkpoint-dir")
        return None if ck is None else os.path.normpath(os.path.join(self.cwd, ck))


def describe(process, cmd: Sequence[str], here: Optional[str] = None) -> Trainer:
    """A :class:`Trainer` from a ``psutil.Process`` (or anything with ``pid``, ``cwd()`` and
    ``open_files()``) and its argv; ``here``: the working directory logs are shown relative
    to (default: this process's). What cannot be read (the process ended) falls back to
    ``here`` for the working directory and None for the log."""
    import psutil

    here = here or os.getcwd()
    try:
        cwd = process.cwd()
    except (psutil.Error, OSError):
        cwd = here
    try:
        files = {f.fd: f.path for f in process.open_files()}
    except (psutil.Error, OSError):
        files = {}
    log = files.get(2) or files.get(1)
    if log is not None and os.path.isabs(log) and log.startswith(os.path.join(here, "")):
        log = os.path.relpath(log, here)
    return Trainer(pid=process.pid, cmd=list(cmd), cwd=cwd, log=log)


def find_trainers(processes: Iterable) -> list:
    """``(process, argv)`` of each training process among ``processes`` (``psutil.Process``
    objects, e.g. ``psutil.Process().children(recursive=True)``); processes that ended or
    cannot be read are skipped."""
    import psutil

    found = []
    for p in processes:
        try:
            cmd = p.cmdline()
        except (psutil.Error, OSError):
            continue
        if is_trainer(cmd):
            found.append((p, cmd))
    return found


def session_record(ckdir: Optional[str], pids: Iterable[int], since: Optional[str] = None) -> Optional[dict]:
    """The attempt record (:func:`tdmpc2core.io.attempts.read`) of the session a stop reached
    in checkpoint folder ``ckdir``: the newest whose ``pid`` is one of ``pids``, else (a
    wrapper process was signalled, not the trainer) the newest that ended at or after
    ``since`` (UTC, ``%Y-%m-%dT%H:%M:%SZ``, as the records' times). None: no such record."""
    if ckdir is None:
        return None
    records = attempts.read(ckdir)
    pids = set(pids)
    mine = [r for r in records if r.get("pid") in pids]
    if not mine and since is not None:
        mine = [r for r in records if isinstance(r.get("ended_utc"), str) and r["ended_utc"] >= since]
    return mine[-1] if mine else None


def _at(stop: dict, record: dict) -> str:
    """" at step/total unit" (the stop record's unit, else its session's), or "" without a step."""
    step, total, unit = stop.get("step"), stop.get("total"), stop.get("unit") or record.get("unit") or "steps"
    if step is None:
        return ""
    return f" at {step}/{total} {unit}" if total is not None else f" at {step} {unit}"


def stopped_line(job: str, record: Optional[dict], log: Optional[str]) -> Optional[str]:
    """One end-of-run line for a training job this run signalled, from its session's attempt
    record (None: it left none, or its record is still ``running``: killed before it could
    write). None when the session completed anyway (nothing to say)."""
    see = f"see {log}" if log else "see its log under logs/"
    if record is None or record.get("outcome") in ("running", attempts.KILLED):
        return (f"{job}: stopped without writing a checkpoint on this stop (it left no stop record; {see}); "
                "the same snakemake command resumes it from its newest earlier checkpoint, if any.")
    stop = record.get("stop")
    if not isinstance(stop, dict):
        return None if record.get("outcome") == "completed" else (
            f"{job}: ended ({record.get('outcome')}) without a stop record ({see}); the same snakemake "
            "command resumes it from its newest checkpoint, if any.")
    if stop.get("kind") == "error":
        return (f"{job}: failed{_at(stop, record)}: {stop.get('reason') or 'an error'} ({see}); the same snakemake "
                "command resumes it from its newest checkpoint, if any.")
    if stop.get("checkpoint"):  # a reason beside a checkpoint: e.g. stopped in the final phase (outputs left)
        why = f" ({stop['reason']})" if stop.get("reason") else ""
        return (f"{job}: stopped{_at(stop, record)}{why}, checkpoint {stop['checkpoint']}; run the same snakemake "
                "command to resume from it.")
    why = f" ({stop['reason']})" if stop.get("reason") else ""
    return (f"{job}: stopped{_at(stop, record)} without a checkpoint{why}; the same snakemake command resumes it "
            "from its newest earlier checkpoint, if any.")


def stop_message(signum: int, max_chunk_seconds: float) -> str:
    """What the snakemake process prints (to stderr) when the first stop signal arrives."""
    name = signal.Signals(signum).name
    return (
        f"\nsnakemake received {name}: stopping the training jobs at their next chunk boundary "
        f"(at most max_chunk_seconds = {max_chunk_seconds:g} s of compute, or the evaluation or "
        "seed-phase burst under way), each with a checkpoint; no new job starts. "
        + ("Ctrl-C again stops them without a checkpoint." if signum == signal.SIGINT else "")
        + "\n"
    )


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class LocalStop:
    """The stop handling of one local workflow run (see the module docstring).

    Args:
        seed_tag: seeds -> a seed group's tag (workflow/rules/common.smk), for :func:`job_name`.
        pixel_tasks: the tasks whose training rules are the pixel ones (:func:`job_name`).
        max_chunk_seconds: the config's ``max_chunk_seconds`` (for the message only).
        processes: () -> the processes to look for trainers among (default: this process's
            descendants, ``psutil.Process().children(recursive=True)``).
        write: where the first signal's message goes (default: ``os.write`` to fd 2; a
            signal handler must not wait for a logging lock the main thread may hold).
    """

    def __init__(self, seed_tag: Callable[[Sequence[str]], str], max_chunk_seconds: float,
                 processes: Optional[Callable[[], Iterable]] = None,
                 write: Optional[Callable[[str], None]] = None, pixel_tasks: Iterable[str] = ()):
        self.seed_tag = seed_tag
        self.pixel_tasks = frozenset(pixel_tasks)
        self.max_chunk_seconds = float(max_chunk_seconds)
        self.processes = processes or _descendants
        self.write = write or (lambda text: os.write(2, text.encode()))
        #: the stop signals received, in order
        self.signals: list = []
        #: pid -> :class:`Trainer`, every training process signalled
        self.trainers: dict = {}
        #: UTC time of the first signal (see :func:`session_record`)
        self.since: Optional[str] = None
        self.watcher: Optional[threading.Thread] = None
        self._closed = threading.Event()

    def signal_trainers(self, sig: int, again: bool = False) -> None:
        """Send ``sig`` to each running training process not yet signalled (``again``: to
        every one), and remember it."""
        import psutil

        for p, cmd in find_trainers(self.processes()):
            if p.pid in self.trainers and not again:
                continue
            trainer = self.trainers.get(p.pid) or describe(p, cmd)
            try:
                p.send_signal(sig)
            except (psutil.Error, OSError):  # ended meanwhile, or not ours to signal
                continue
            self.trainers[p.pid] = trainer

    def _watch(self) -> None:
        while not self._closed.wait(0.5):
            try:
                self.signal_trainers(signal.SIGTERM)
            except Exception:  # a watcher that dies must not end the run; the next tick retries
                pass

    def on_signal(self, signum: int, graceful) -> None:
        """The handler's work for one SIGTERM/SIGINT to the snakemake process. ``graceful``:
        the scheduler's own SIGTERM handler (run in a thread: its lock may be held by the
        interrupted main thread), or anything not callable to raise ``KeyboardInterrupt``.

        Raises:
            KeyboardInterrupt: a second SIGINT (after passing it on), or no graceful exit.
        """
        earlier = list(self.signals)
        self.signals.append(signum)
        if self.since is None:
            self.since = _utc(time.time())
        if signum == signal.SIGINT and signal.SIGINT in earlier:
            self.signal_trainers(signal.SIGINT, again=True)  # the trainers' second SIGINT: no checkpoint
            raise KeyboardInterrupt
        self.signal_trainers(signal.SIGTERM)
        if earlier:
            return
        self.write(stop_message(signum, self.max_chunk_seconds))
        self.watcher = threading.Thread(target=self._watch, daemon=True)
        self.watcher.start()
        if callable(graceful):
            threading.Thread(target=graceful, args=(signum, None), daemon=True).start()
        else:
            raise KeyboardInterrupt

    def close(self) -> None:
        """Stop looking for new trainers to signal (the watcher thread started by the first
        signal ends within 0.5 s). The workflow never calls it: its run ends instead."""
        self._closed.set()

    def install(self) -> logging.Filter:
        """Handle SIGTERM and SIGINT in this (main) thread with :meth:`on_signal`; return the
        filter for Snakemake's logger (:class:`StoppedJobErrors`)."""
        graceful = signal.getsignal(signal.SIGTERM)  # the scheduler's: exit once running jobs end
        signal.signal(signal.SIGTERM, lambda signum, frame: self.on_signal(signum, graceful))
        signal.signal(signal.SIGINT, lambda signum, frame: self.on_signal(signum, graceful))
        return StoppedJobErrors(self)

    def stopped(self) -> list:
        """``(job, log, record)`` per training job signalled (trainers sharing a checkpoint
        folder, e.g. a wrapper and its child, are one job), in the order signalled; ``record``:
        :func:`session_record`."""
        jobs: dict = {}
        for t in list(self.trainers.values()):
            key = t.checkpoint_dir or f"pid {t.pid}"
            jobs.setdefault(key, []).append(t)
        out = []
        for ts in jobs.values():
            first = ts[0]
            record = session_record(first.checkpoint_dir, [t.pid for t in ts], self.since)
            log = next((t.log for t in ts if t.log), None)
            out.append((job_name(first.cmd, self.seed_tag, self.pixel_tasks), log, record))
        return out

    def lines(self) -> list:
        """One line per training job this run stopped (:func:`stopped_line`): where it
        stopped, its checkpoint, how to resume."""
        return [line for job, log, record in self.stopped() if (line := stopped_line(job, record, log))]

    def stopped_logs(self) -> list:
        """The logs of the training jobs that stopped on request (their stop record says a
        signal stopped them)."""
        return [log for job, log, record in self.stopped()
                if log and isinstance((record or {}).get("stop"), dict) and record["stop"].get("kind") == "signal"]


class StoppedJobErrors(logging.Filter):
    """Once a stop was asked for: Snakemake's error report of each training job that stopped
    on request (the failed shell command, "Error in rule ...", found by the job's log path)
    is left out; the run's last lines say what happened to each (:meth:`LocalStop.lines`)."""

    def __init__(self, stop: LocalStop):
        super().__init__()
        self.stop = stop

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.stop.signals or record.levelno < logging.ERROR:
            return True
        logs = getattr(record, "log", None)
        where = [str(x) for x in logs] if isinstance(logs, (list, tuple)) else [str(record.msg)]
        return not any(log in w for log in self.stop.stopped_logs() for w in where)


def _descendants() -> list:
    import psutil

    return psutil.Process().children(recursive=True)


__all__ = ["TRAINING_STAGES", "arg", "is_trainer", "job_name", "Trainer", "describe", "find_trainers",
           "session_record", "stopped_line", "stop_message", "LocalStop", "StoppedJobErrors"]
