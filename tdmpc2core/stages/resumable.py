"""What the training stages share to stop on a signal and resume from checkpoints.

* :class:`SignalStop`: SIGTERM / SIGINT set a flag that the library's ``should_stop`` hook
  reads between calls of the compiled program; the stage then exits with 128 + the signal
  number (143 / 130). A second SIGINT raises ``KeyboardInterrupt`` (no checkpoint), which
  Python delivers when the running call returns.
* :func:`open_checkpoint_dir` / :func:`close_checkpoint_dir`: a job's checkpoint folder holds,
  once the job has written its outputs, only the final checkpoint and a marker
  (:data:`COMPLETE_MARKER`); a job that finds the marker is a forced rerun and trains anew.

* :func:`library_log`: the library's ``tdmpc2core`` logger (checkpoints written, resumes)
  into the job's log, once, with the job's prefix.
* :func:`train_session`: one session's training call under :class:`SignalStop`, closing the
  session's attempt record (:mod:`tdmpc2core.io.attempts`) with a ``stop`` record when a
  signal or an exception ends it (issue 25 item 2), and logging the ``stopped by`` line.
* :func:`final_phase`: what follows a completed training call (videos, the outputs, run.json
  last) under the same :class:`SignalStop`: a stop asked then is logged at once and acted on
  once the atomic write under way is done (:meth:`SignalStop.boundary`); the session's record
  says stopped, the outputs are left to the rerun (which resumes from the final checkpoint).

Not a stage itself (``tdmpc2core/cli.py`` lists the stages).
"""
from __future__ import annotations

import argparse

import contextlib
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

#: in a checkpoint folder: the run finished and wrote its outputs (a rerun then starts over)
COMPLETE_MARKER = "outputs_written.json"
#: exit code of a training stage whose checkpoint folder another process holds
#: (tdmpc2core.run.lock): nothing was read or written
FOLDER_IN_USE = 4
#: exit code of a training stage pointed at a checkpoint folder whose finished run is another
#: job's (:func:`check_finished_run`): nothing was read or written
OTHER_JOBS_FOLDER = 5
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def hms(seconds: float) -> str:
    """``h:mm:ss`` (or ``m:ss`` under an hour)."""
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


@contextlib.contextmanager
def library_log(prefix: str):
    """While active, INFO records of the ``tdmpc2core`` logger go to stderr as ``{prefix} message``,
    and only there (not also through a root handler another library may have installed)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{prefix} %(message)s"))
    lib_log = logging.getLogger("tdmpc2core")
    old = lib_log.level, lib_log.propagate
    lib_log.addHandler(handler)
    lib_log.setLevel(logging.INFO)
    lib_log.propagate = False
    try:
        yield
    finally:
        lib_log.removeHandler(handler)
        lib_log.level, lib_log.propagate = old


class FinalPhaseStop(Exception):
    """Raised by :meth:`SignalStop.boundary` in the final phase once a stop was asked."""


def signal_safe_log(prefix: str) -> Callable[[str], None]:
    """A log for a signal handler: ``{prefix} message`` written to file descriptor 2 with one
    ``os.write`` (no buffered stream, so no reentrant call into ``sys.stderr`` when the signal
    lands in the middle of a ``print``)."""
    import os

    def write(msg: str) -> None:
        try:
            os.write(2, (f"{prefix} {msg}\n" if prefix else f"{msg}\n").encode("utf-8", "replace"))
        except OSError:
            pass

    return write


class SignalStop:
    """Context manager: SIGTERM and SIGINT request a stop at the next chunk boundary.

    ``should_stop()`` is the hook for ``train(should_stop=...)``; it logs the signal once.
    ``exit_code`` is 128 + the signal number once one arrived.

    After a completed training call, :meth:`enter_final_phase` (:func:`final_phase`) keeps
    the handlers for the outputs: a signal is then logged at once from the handler (through
    ``log_now``, :func:`signal_safe_log`) and acted on at the next :meth:`boundary` (between
    two atomic writes). As in training, a second SIGINT raises ``KeyboardInterrupt``.
    """

    def __init__(self, log: Callable[[str], None], has_checkpoints: bool,
                 log_now: Optional[Callable[[str], None]] = None):
        self.log = log
        self.log_now = log_now if log_now is not None else signal_safe_log("")
        self.has_checkpoints = has_checkpoints
        self.signum: Optional[int] = None
        self.final = False  # in the final phase (enter_final_phase)
        self.acted = False  # a boundary acted on the stop (FinalPhaseStop raised)
        self._logged = False
        self._old = {}

    def _handler(self, signum, frame):
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: give up the checkpoint
        self.signum = signum  # in training only a flag: logging in a signal handler may re-enter I/O
        if self.final and not self._logged:
            self._logged = True  # the final phase may be in one long call: say it now, through fd 2
            self.log_now(self._final_line(during=True))

    def _final_line(self, during: bool) -> str:
        rest = ("the rerun resumes from the final checkpoint and writes them" if self.has_checkpoints
                else "no --checkpoint-dir: the rerun trains anew")
        if during:
            return (f"received {self.name} during the final phase: finishing the atomic write under way, then "
                    f"exiting ({self.exit_code}); the outputs not written yet are left to the rerun ({rest})")
        return (f"received {self.name} as training ended: exiting ({self.exit_code}) before the outputs are "
                f"written ({rest})")

    def should_stop(self) -> bool:
        if self.signum is not None and not self._logged:
            self._logged = True
            self.log(f"received {self.name}: stopping at this chunk boundary"
                     + (", writing a checkpoint" if self.has_checkpoints
                        else " (no --checkpoint-dir: nothing is saved)"))
        return self.signum is not None

    def enter_final_phase(self) -> None:
        """Training completed: from now on a signal is logged at once and acted on at
        :meth:`boundary`. A signal that arrived after training's last check is logged now."""
        self.final = True
        if self.signum is not None and not self._logged:
            self._logged = True
            self.log(self._final_line(during=False))

    def boundary(self) -> None:
        """Between two atomic writes of the final phase: raise :class:`FinalPhaseStop` once a
        stop was asked."""
        if self.signum is not None:
            self.acted = True
            raise FinalPhaseStop(self.name)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "none"

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum) if self.signum is not None else 1

    def __enter__(self):
        self._old = {s: signal.signal(s, self._handler) for s in STOP_SIGNALS}
        return self

    def __exit__(self, exc_type, *exc):
        finished = self.final and exc_type is None and not self.acted
        for s, old in self._old.items():
            # a finished run keeps a handler to the end of the process: a signal in the last
            # moments (the stage returning, the interpreter shutting down) must not turn a complete
            # job into one killed by it (exit -15 or 143), which a workflow would take for a
            # failure and clean up
            signal.signal(s, self._after_finish if finished else old)
        if finished and self.signum is not None:
            # after the final phase's last boundary: the outputs are complete, the run finished
            self.log(f"received {self.name} once the outputs were complete: the run finished; nothing to stop")
        return False

    def _after_finish(self, signum, frame):
        """The handler of a finished run's last moments: log, then exit 0 at once (every output
        is written and closed; nothing is left to stop)."""
        self.log_now(f"received {signal.Signals(signum).name} after the run finished (every output written): "
                     "nothing to stop; exiting 0")
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed or broken stream: exiting all the same
                pass
        os._exit(0)


class OtherJobsFolderError(ValueError):
    """The checkpoint folder holds the finished run of another job (its task or pool, seeds or
    output folder differ): clearing it, as a forced rerun does, would delete that job's trained
    agent."""


def _same(key: str, ours, theirs) -> bool:
    if key != "outdir":
        return ours == theirs
    a, b = Path(str(ours)), Path(str(theirs))
    return os.path.normpath(a) == os.path.normpath(b) or a.resolve() == b.resolve()


def check_finished_run(ckdir: Optional[Path], job: dict) -> None:
    """Before anything touches ``ckdir``: refuse it when it holds a finished run
    (:data:`COMPLETE_MARKER`) of another job. ``job``: this job's identity, e.g. ``{"task",
    "seeds", "outdir"}`` (train-single) or ``{"pool", "seeds", "outdir"}`` (train-multi); only
    the keys the marker also records are compared. The same job with other settings (another
    ``--spec``, more agent steps) is a forced rerun and may clear it (:func:`open_checkpoint_dir`);
    another job's folder, e.g. a mistyped ``--checkpoint-dir``, would lose that job's trained agent.

    Raises:
      OtherJobsFolderError: naming the folder, each differing key with both values, and what to do.
    """
    import json

    if ckdir is None:
        return
    marker = Path(ckdir) / COMPLETE_MARKER
    if not marker.exists():
        return
    try:
        theirs = json.loads(marker.read_text())
    except (OSError, ValueError):
        return  # an unreadable marker: no identity to protect (the folder is cleared as before)
    if not isinstance(theirs, dict):
        return
    diffs = [f"{k}: {theirs[k]!r} there, {job[k]!r} here" for k in job
             if k in theirs and not _same(k, job[k], theirs[k])]
    if diffs:
        raise OtherJobsFolderError(
            f"the checkpoint folder {ckdir} holds the finished run of another job ({'; '.join(diffs)}); "
            f"its final checkpoint is that job's trained agent and a run here would delete it. Give this "
            "job its own folder (--checkpoint-dir / config key checkpoint_dir), or delete that one "
            f"(rm -r {ckdir}) if its agent is no longer wanted")


def open_checkpoint_dir(ckdir: Optional[Path], log: Callable[[str], None]) -> None:
    """Before training: a folder whose run finished (marker present) is cleared, so that a
    forced rerun trains anew; otherwise say whether the job resumes. Its caller checked first
    that the finished run is this job's (:func:`check_finished_run`)."""
    from ..io import checkpoint

    if ckdir is None:
        return
    marker = ckdir / COMPLETE_MARKER
    if marker.exists():
        removed = checkpoint.clear(ckdir)
        marker.unlink()
        log(f"{ckdir}: the run there had finished and written its outputs; starting over "
            f"(removed {len(removed)} checkpoint(s))")
    elif checkpoint.list_checkpoints(ckdir):
        log(f"{ckdir}: resuming from the newest complete checkpoint")


def close_checkpoint_dir(ckdir: Optional[Path], info: dict) -> None:
    """After the outputs are written: keep only the final checkpoint (the trained agent) and
    write the marker (``info`` plus the final checkpoint's path and the time)."""
    from ..io import atomic, checkpoint

    if ckdir is None:
        return
    checkpoint.prune(ckdir, 1)
    final = checkpoint.list_checkpoints(ckdir)
    atomic.write_json(ckdir / COMPLETE_MARKER, {
        **info, "final_checkpoint": str(final[-1]) if final else None,
        "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})


def mismatch_message(ckdir: Path) -> str:
    return (f"The checkpoint folder {ckdir} cannot be resumed by this run. Delete it (rm -r {ckdir}) to start "
            "over, or give this run another folder (config key checkpoint_dir / --checkpoint-dir).")


def add_checkpoint_arguments(p, unit: str, every_default_help: str) -> None:
    """The checkpoint and stop options of a training stage (``unit``: what ``--checkpoint-every`` counts)."""
    p.add_argument("--checkpoint-dir", default=None,
                   help="folder of this job's checkpoints, outside the outputs (Snakemake deletes a failed "
                        "job's outputs): a rerun resumes from its newest complete checkpoint. Default: none "
                        "(no checkpoints, no resuming)")
    p.add_argument("--checkpoint-every", type=int, default=None,
                   help=f"{unit} between checkpoints (default: {every_default_help})")
    p.add_argument("--keep-checkpoints", type=int, default=2, help="newest checkpoints kept (default 2)")
    p.add_argument("--max-chunk-seconds", type=float, default=30.0,
                   help="wall-time cap of one call of the compiled program, i.e. how soon a SIGTERM/SIGINT is "
                        "acted on (results are unchanged; default 30)")
    p.add_argument("--progress-seconds", type=float, default=60.0,
                   help="at most this many seconds between progress lines (default 60)")


def device_value(text: str):
    """``--devices``: ``auto`` (None), ``all`` or a device count (:func:`tdmpc2core.run.devices.device_list`)."""
    t = str(text).strip().lower()
    if t in ("auto", "all"):
        return None if t == "auto" else "all"
    if t.isdigit() and int(t) >= 1:
        return int(t)
    raise argparse.ArgumentTypeError(f"--devices {text!r}: accepted auto, all or a device count >= 1")


def add_device_arguments(p, processes: bool) -> None:
    """``--devices`` of a training stage and, with ``processes``, the options of a job that spans
    processes (:func:`tdmpc2core.run.devices.initialize_distributed`; under SLURM's ``srun`` none
    is needed: jax.distributed reads the job's environment)."""
    p.add_argument("--devices", type=device_value, default=None,
                   help="devices of this job: auto (default: every visible device when the work divides evenly "
                        "over them, else one), all, or a count (the first N)")
    if not processes:
        return
    p.add_argument("--coordinator", default=None,
                   help="host:port of process 0's jax.distributed coordinator, for a job of several processes "
                        "started by hand (default: from SLURM's environment inside `srun` with several tasks)")
    p.add_argument("--num-processes", type=int, default=None, help="processes of the job (with --coordinator)")
    p.add_argument("--process-id", type=int, default=None, help="this process's index (with --coordinator)")
    p.add_argument("--distributed-timeout", type=int, default=300,
                   help="seconds to wait for every process of the job to join (default 300)")
    p.add_argument("--local-device-count", type=int, default=None,
                   help="fake CPU devices per process (tests of multi-device runs on a CPU; default: the real devices)")


def join_processes(args, log: Callable[[str], None]) -> bool:
    """Join jax.distributed when the job spans processes (before anything touches a device):
    from ``--coordinator`` or SLURM's environment; True in a multi-process job (logged)."""
    from ..run import devices

    coord = getattr(args, "coordinator", None)
    given = [f for f, v in (("--num-processes", getattr(args, "num_processes", None)),
                            ("--process-id", getattr(args, "process_id", None))) if v is not None]
    if given and not coord:
        raise SystemExit(f"error: {' and '.join(given)} without --coordinator: a job of several processes started "
                         "by hand needs --coordinator host:port, --num-processes and --process-id (under srun none "
                         "of them: SLURM's environment gives them)")
    if coord and len(given) < 2:
        raise SystemExit("error: --coordinator needs --num-processes and --process-id")
    if getattr(args, "local_device_count", None) is not None and int(args.local_device_count) < 1:
        raise SystemExit(f"error: --local-device-count {args.local_device_count}: at least 1")
    if getattr(args, "local_device_count", None) and not coord and not devices.in_slurm_step():
        devices.use_fake_cpu_devices(int(args.local_device_count))
    multi = devices.initialize_distributed(devices.DistributedSettings(
        coordinator=getattr(args, "coordinator", None), num_processes=getattr(args, "num_processes", None),
        process_id=getattr(args, "process_id", None),
        initialization_timeout=int(getattr(args, "distributed_timeout", 300) or 300),
        local_device_count=getattr(args, "local_device_count", None)))
    if multi:
        import jax

        log(f"process {jax.process_index()} of {jax.process_count()}: {jax.local_device_count()} local of "
            f"{jax.device_count()} {jax.devices()[0].platform} devices")
    return multi


def add_logger_arguments(p) -> None:
    """The logger options of a training stage (the workflow's top-level ``logger`` block,
    tdmpc2core.pipeline.config.Pipeline.logger_flags); ``--logger`` takes a registered kind
    (:func:`tdmpc2core.io.loggers.logger_kinds`)."""
    from ..io.loggers import logger_kinds

    p.add_argument("--logger", default=None, choices=["none", *logger_kinds()],
                   help="also log the metrics there (tdmpc2core.io.loggers; default or none: nothing): one W&B "
                        "run or TensorBoard folder per seed, or one CSV file of seed means")
    p.add_argument("--logger-dir", default="logs/metrics", help="folder of the log files (default logs/metrics)")
    p.add_argument("--logger-group", default=None,
                   help="the protocol: W&B runs are grouped as {group}/{task} (default: the task alone)")
    p.add_argument("--logger-project", default="tdmpc2", help="W&B project (default tdmpc2)")
    p.add_argument("--logger-entity", default=None, help="W&B entity (default: W&B's)")
    p.add_argument("--logger-mode", default=None, choices=["offline", "online", "disabled"],
                   help="W&B mode (default: WANDB_MODE if set, else offline; upload with `wandb sync`)")


def job_loggers(args, log: Callable[[str], None], where: str, name: str, seeds: list,
                config: Callable[[], dict]) -> list:
    """The loggers of ``--logger`` for one job (none without it), each seed's files under
    ``{--logger-dir}/{where}`` (``where``: ``single/{task}`` or ``multi/{pool}/size{n}``;
    ``name``: the W&B run name, each seed's run ``{name}-seed{S}``; ``config()``: the settings
    attached to each run, asked for only when there is a logger). A logger that cannot be
    built (its package missing, its folder not writable) is one warning line in the job's
    log, and the job trains without it. Where each kind's files go is its registry entry's
    (:attr:`tdmpc2core.io.loggers.LoggerKind.job_options`)."""
    kind = getattr(args, "logger", None)
    if not kind or kind == "none":
        return []
    from ..io import loggers

    root = Path(args.logger_dir)
    target = loggers.LogTarget(
        root=root, where=where, name=name, group=f"{args.logger_group}/{where}" if args.logger_group else where,
        seeds=tuple(seeds), config=config(), project=args.logger_project, entity=args.logger_entity,
        mode=args.logger_mode, job_type=where.split("/")[0])
    try:
        entry = loggers.get_kind(kind)
        logger = loggers.make_logger(kind, **entry.options_for_job(target))
    except Exception as e:  # logging never stops training
        log(f"warning: logger {kind!r} not built (" + " ".join(f"{type(e).__name__}: {e}".split())
            + "); training goes on without it")
        return []
    log(f"logging to {kind} under {root}" + (entry.note(logger, root) if entry.note is not None else ""))
    return [logger]


def close_loggers(loggers: list, log: Callable[[str], None]) -> None:
    """Close the job's loggers; one that fails is a warning line (the outputs are written)."""
    for lg in loggers:
        try:
            lg.close()
        except Exception as e:
            log(f"warning: closing logger {type(lg).__name__} failed: " + " ".join(f"{type(e).__name__}: {e}".split()))


class SessionSteps(Protocol):
    """What :func:`train_session` reads of a stage's progress tracker."""

    start: Optional[int]  # the step this session started from (None until the first progress report)
    step: Optional[int]  # the last step reported (None: none yet)


def error_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (the ``reason`` of an error's stop record)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def train_session(train: Callable[..., Any], *, attempt, log: Callable[[str], None], ckdir: Optional[Path],
                  total: int, steps: SessionSteps, compile_seconds: Callable[[], dict],
                  stop: Optional[SignalStop] = None):
    """Run one session's training call and close its attempt record unless it completed.

    Args:
      train: the agent's ``train`` with every argument but ``should_stop`` bound.
      attempt: this session's :class:`tdmpc2core.io.attempts.Attempt` (its ``unit``: "agent
        steps" or "updates").
      log: the stage's log (stderr with the job's prefix).
      ckdir: the checkpoint folder (None: no checkpoints).
      total: the run's length in the attempt's unit.
      steps: the stage's progress tracker (:class:`SessionSteps`).
      compile_seconds: the seconds per compiled program so far (called once the call returns).
      stop: the stage's :class:`SignalStop`, entered by the stage so that its handlers stay
        for the final phase (:func:`final_phase`); None: one for this call alone.

    Returns:
      ``train``'s result (``(state, history)``) when it completed (the attempt is left open for
      the stage to close), else the exit code: 128 + the signal number after a stop on request
      (logged as ``stopped by SIGTERM at 500/700 agent steps: checkpoint ...``; a ``stop``
      record of kind "signal"), or 2 when the checkpoint folder holds another run's or only
      damaged checkpoints (the attempt discarded: not a session of that run).

    Raises:
      BaseException: whatever else ended the call, re-raised after the attempt is closed with a
        ``stop`` record: kind "signal" (SIGINT, no checkpoint) for a second Ctrl-C's
        ``KeyboardInterrupt``, kind "error" with the error's one line otherwise.
    """
    from ..io import attempts, checkpoint
    from ..run.driver import TrainingInterrupted

    def close(outcome: str, step: Optional[int], **stop) -> None:
        attempt.end(outcome, end_step=step, start_step=steps.start, compile_seconds=compile_seconds(),
                    stop=attempts.stop_record(unit=attempt.unit, step=step, total=total, **stop))

    if stop is None:
        with SignalStop(log, ckdir is not None) as own:
            return train_session(train, attempt=attempt, log=log, ckdir=ckdir, total=total, steps=steps,
                                 compile_seconds=compile_seconds, stop=own)
    try:
        return train(should_stop=stop.should_stop)
    except TrainingInterrupted as exc:
        if stop.signum is None:  # another process of the job was signalled: all stop together
            stop.signum = signal.SIGTERM
            log("another process of the job received a signal: stopping with it")
        info = exc.checkpoint
        where = (f"checkpoint {info.path} ({info.bytes / 1e6:.1f} MB, {info.seconds:.1f} s); "
                 "rerun the same command to resume" if info is not None else "no checkpoint (no --checkpoint-dir)")
        log(f"stopped by {stop.name} at {exc.step}/{total} {attempt.unit}: {where}")
        close(f"stopped by {stop.name}", exc.step, kind="signal", signal=stop.name,
              checkpoint=None if info is None else str(info.path),
              reason="no --checkpoint-dir" if info is None else None)
        return stop.exit_code
    except (checkpoint.CheckpointMismatchError, checkpoint.CorruptCheckpointError) as exc:
        attempt.discard()  # not a session of the run whose checkpoints the folder holds
        log(f"error: {exc}")
        log(mismatch_message(ckdir))
        return 2
    except KeyboardInterrupt:  # a second Ctrl-C: the checkpoint given up
        close("stopped by SIGINT", steps.step, kind="signal", signal="SIGINT",
              reason="a second SIGINT: stopped without writing a checkpoint")
        raise
    except Exception as exc:
        close(f"failed: {type(exc).__name__}", steps.step, kind="error", reason=error_line(exc))
        raise


def completed_session(train: Callable[..., Any], *, attempt, log: Callable[[str], None], ckdir: Optional[Path],
                      total: int, steps: SessionSteps, compile_seconds: Callable[[], dict], stop: SignalStop,
                      loggers) -> Any:
    """:func:`train_session` (same arguments), then the job's ``loggers`` closed however it
    ended (:func:`close_loggers`). Returns its exit code when the session did not complete, else
    ``(state, history, started_at)``: ``started_at`` the step this session started from
    (``total`` when nothing ran: the run was already trained), and ``attempt`` ended
    "completed" in memory only (``write=False``: run.json records it; attempts.json once the
    outputs are written, :func:`final_phase`)."""
    try:
        result = train_session(train, attempt=attempt, log=log, ckdir=ckdir, total=total, steps=steps,
                               compile_seconds=compile_seconds, stop=stop)
    finally:
        close_loggers(loggers, log)
    if isinstance(result, int):
        return result
    state, hist = result
    started_at = steps.start if steps.start is not None else total
    attempt.end("completed", end_step=total, start_step=started_at, compile_seconds=compile_seconds(), write=False)
    return state, hist, started_at


def final_phase(write: Callable[[Callable[[], None]], None], *, stop: SignalStop, attempt,
                log: Callable[[str], None], ckdir: Optional[Path], total: int,
                discard: Callable[[], None]) -> int:
    """A completed session's final phase (its videos, outputs and run.json) under the stage's
    :class:`SignalStop`, so that a stop asked now is not lost nor fatal (docs/pipeline.md,
    "Stopping").

    ``write(boundary)`` writes the outputs, each atomically, calling ``boundary()`` before each
    write; a stop asked before or during the phase (logged at once) is acted on at the next
    call: the write under way finishes, ``discard()`` removes the job's completeness markers
    (its run.json files; nothing partial may look complete), the attempt is closed with a
    ``stop`` record (kind "signal", step = total: training was complete; ``checkpoint`` the
    final checkpoint the rerun resumes from, None without ``ckdir``; ``reason`` says the
    outputs were left to the rerun) and the exit code is 128 + the signal number. A second
    SIGINT (``KeyboardInterrupt``) or an exception likewise discards the markers and closes the
    attempt (kind "signal" / "error"), then propagates.

    The caller has ended ``attempt`` as "completed" in memory (``write=False``: run.json
    records it so); it is written to the folder's ``attempts.json`` only once ``write``
    returned (a session killed during the phase stays "running": the next one calls it killed).

    Returns:
      0 when every output was written, else the stop's exit code.
    """
    from ..io import attempts, checkpoint

    unit = attempt.unit
    final = checkpoint.list_checkpoints(ckdir) if ckdir is not None else []
    final_ck = str(final[-1]) if final else None

    def close(outcome: str, **rec) -> None:
        attempt.end(outcome, end_step=total, stop=attempts.stop_record(unit=unit, step=total, total=total,
                                                                      checkpoint=final_ck, **rec))

    stop.enter_final_phase()
    try:
        write(stop.boundary)
        stop.boundary()  # a stop asked during the last write: the outputs are not yet marked complete
    except FinalPhaseStop:
        discard()
        where = (f"the final checkpoint {final_ck} is kept; rerun the same command to write them from it"
                 if final_ck is not None else "no checkpoint (no --checkpoint-dir): a rerun trains anew")
        log(f"stopped by {stop.name} in the final phase, after {total}/{total} {unit} of training: the outputs "
            f"are incomplete and not marked complete (no run.json); {where}")
        close(f"stopped by {stop.name}", kind="signal", signal=stop.name,
              reason="in the final phase: the outputs were left to the rerun"
              + ("" if final_ck is not None else " (no --checkpoint-dir)"))
        return stop.exit_code
    except KeyboardInterrupt:  # a second Ctrl-C: at once, in the middle of a write (atomic: nothing half-written)
        discard()
        log("stopped by a second SIGINT in the final phase: the outputs are incomplete and not marked complete")
        close("stopped by SIGINT", kind="signal", signal="SIGINT",
              reason="a second SIGINT in the final phase: the outputs were left to the rerun")
        raise
    except Exception as exc:
        discard()
        close(f"failed: {type(exc).__name__}", kind="error", reason=error_line(exc))
        raise
    attempt.save()
    return 0
