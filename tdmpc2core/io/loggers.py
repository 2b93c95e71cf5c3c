"""Loggers: where a run's metrics go besides its history: a CSV file, TensorBoard event files
(``tensorboardX``), Weights & Biases runs (``wandb``, offline by default), or a kind of your own.

A logger is any object with ``log(step, metrics)`` and ``close()`` (:class:`Logger`). Give
them to an agent's ``train(..., loggers=[...])`` (a :class:`~tdmpc2core.run.driver.RunOptions`
field), or describe them with a :class:`LoggingConfig` (``train(..., logging_config=...)``,
whose loggers ``train`` builds and closes itself). The run driver calls ``log`` after each
chunk record and after each evaluation:

* ``step``: the run's position in its own unit (agent steps for :class:`~tdmpc2core.TDMPC2`,
  updates for :class:`~tdmpc2core.TDMPC2MultiTask`);
* ``metrics``: ``{"Train/<name>": value}`` for every number of the chunk record (the update
  metrics, ``updates``, ``train_return``, ``chunk_seconds``...; ``Train/env_frames`` where the
  agent knows them), and ``{"Eval/episodic mean reward": value}`` (and what else the agent
  reports: ``Eval/env_frames`` and ``Eval/mean episodic length``; for the multi-task agent
  ``Eval/normalized score`` and per task ``Eval/<task>/episodic mean reward``; for an env with a
  success flag, ``Eval/success rate`` (the official rule: success at the episode's last step)
  and ``Eval/success rate (any step)``, in [0, 1], per task ``Eval/<task>/success rate`` for
  the multi-task agent) after an evaluation. A per-seed value is logged as its mean over the seeds (NaN-aware).

A logger that also has ``log_seeds(step, {seed: metrics})`` gets each seed's own values
instead (a value shared by the seeds, such as ``env_frames``, in each): :class:`WandbLogger`
(one W&B run per seed) and :class:`TensorBoardLogger` (one event folder per seed) do.

A logger that also has ``flush()`` gets it once every record of a step has been given (after a
chunk record and the evaluation that follows it at the same step): :class:`WandbLogger` then
commits the step's row, so what was logged is written to its files within
:attr:`WandbLogger.FLUSH_SECONDS` even if the process is then killed.

A logger that raises is reported once as a one-line warning and dropped for the rest of the
call; training goes on. The caller owns its loggers and closes them (the driver never does,
so one logger may serve several ``train`` calls of a run).

Kinds: the registry of :class:`LoggerKind` entries is the one list of the kinds. A kind is
registered once (:func:`register_logger_kind`) with its factory, where its files go for a
workflow job (``job_options``) and for a :class:`LoggingConfig` (``config_options``), and the
pip extra that installs its package; :func:`make_logger` ``(kind, **options)`` builds one, and
the workflow's accepted kinds (``tdmpc2core.pipeline.config.check_logger``), the training
stages' ``--logger`` choices and their job loggers (``tdmpc2core.stages.resumable.job_loggers``)
all read the registry (:func:`logger_kinds`, :func:`get_kind`). Built in, at the end of this
module: ``"csv"`` (:class:`CSVLogger`), ``"tensorboard"`` (:class:`TensorBoardLogger`, needs
``pip install -e '.[tensorboard]'``) and ``"wandb"`` (:class:`WandbLogger`, needs ``pip install
-e '.[wandb]'``). A kind of your own is one module calling :func:`register_logger_kind`
(docs/architecture.md, "A logger"; ``tests/test_extending.py`` follows it).

This module lives in ``io/`` so that the pipeline (which may import ``io/`` but not ``run/``)
and the run driver read the same registry; ``tdmpc2core.run.loggers`` is its older name.
Plain Python at import: the packages of a kind are imported when one is built.
"""
from __future__ import annotations

import csv
import dataclasses
import difflib
import io
import json
import logging
import math
import numbers
import os
import warnings
from pathlib import Path
from typing import Callable, Mapping, Optional, Protocol, Sequence, Union, runtime_checkable

from .atomic import write_text


@runtime_checkable
class Logger(Protocol):
    """What the run driver calls: ``log(step, metrics)`` with the run's position (int) and a
    ``{name: float}`` mapping; ``close()`` when the owner is done with it (and, when the logger
    has it, ``flush()`` once a step's records are all given: module docstring)."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class LogTarget:
    """Where one run's loggers write and what they attach (the facts a kind's options are made of).

    Attributes:
      root: the folder of the log files (the workflow's ``logger.dir``; a LoggingConfig's ``dir``).
      where: the run's folder under ``root``: ``single/{task}`` or ``multi/{pool}/size{n}`` for a
        workflow job, the run's name for a LoggingConfig.
      name: the run's name (a W&B run's; each seed's is ``{name}-seed{S}``).
      group: the runs' group (W&B), or None.
      seeds: the seeds the run trains (a workflow job's; () for a LoggingConfig).
      config: the settings attached to the run (JSON-serialisable).
      project, entity, mode, job_type: the W&B settings (None: W&B's or the kind's default).
    """

    root: Path
    where: str
    name: str
    group: Optional[str] = None
    seeds: tuple = ()
    config: Mapping = dataclasses.field(default_factory=dict)
    project: str = "tdmpc2"
    entity: Optional[str] = None
    mode: Optional[str] = None
    job_type: Optional[str] = None


def _no_options(target: LogTarget) -> dict:
    return {}


@dataclasses.dataclass(frozen=True)
class LoggerKind:
    """One kind of logger, registered once (:func:`register_logger_kind`).

    Attributes:
      name: the kind (``logger: {kind: <name>}`` in the workflow, ``--logger <name>``, a
        LoggingConfig's ``kind``).
      factory: ``factory(**options) -> Logger``.
      job_options: ``job_options(target) -> options`` of a workflow training job's logger
        (:class:`LogTarget`; ``tdmpc2core.stages.resumable.job_loggers``).
      config_options: the same for a :class:`LoggingConfig`'s loggers (None: ``job_options``).
      extra: the pip extra that installs the kind's package (``pip install -e '.[<extra>]'``),
        None when it needs nothing beyond the core dependencies.
      note: ``note(logger, root) -> str``: what the job's log adds to "logging to <kind> under
        <root>" (None: nothing).
    """

    name: str
    factory: Callable[..., Logger]
    job_options: Callable[[LogTarget], dict] = _no_options
    config_options: Optional[Callable[[LogTarget], dict]] = None
    extra: Optional[str] = None
    note: Optional[Callable[[Logger, Path], str]] = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or not all(c.isalnum() or c in "_-" for c in self.name):
            raise ValueError(f"LoggerKind: name={self.name!r}; accepted: a non-empty name of letters, digits, _ and -")
        if not callable(self.factory):
            raise TypeError(f"LoggerKind({self.name!r}): factory must be callable, got {type(self.factory).__name__}")

    def options_for_job(self, target: LogTarget) -> dict:
        """The factory's options for a workflow training job writing to ``target``."""
        return self.job_options(target)

    def options_for_config(self, target: LogTarget) -> dict:
        """The factory's options for a :class:`LoggingConfig`'s logger writing to ``target``."""
        return (self.config_options or self.job_options)(target)


_KINDS: dict[str, LoggerKind] = {}


def register_logger_kind(kind: LoggerKind) -> LoggerKind:
    """Add ``kind`` to the registry (the one list of the logger kinds) and return it.

    Raises:
      TypeError: not a :class:`LoggerKind`.
      ValueError: a kind of that name is registered (one entry per kind).
    """
    if not isinstance(kind, LoggerKind):
        raise TypeError(f"register_logger_kind takes a LoggerKind, got {type(kind).__name__}")
    if kind.name in _KINDS:
        raise ValueError(f"register_logger: a logger kind {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def register_logger(kind: str, factory: Callable[..., Logger]) -> LoggerKind:
    """Make ``make_logger(kind, **options)`` call ``factory(**options)``: a :class:`LoggerKind`
    with no options of its own (the callers give them all).

    Raises:
      ValueError: ``kind`` is empty or already registered (one factory per kind).
      TypeError: ``factory`` is not callable.
    """
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"register_logger: kind must be a non-empty string, got {kind!r}")
    if not callable(factory):
        raise TypeError(f"register_logger({kind!r}): factory must be callable, got {type(factory).__name__}")
    return register_logger_kind(LoggerKind(kind, factory))


def unregister_logger_kind(name: str) -> None:
    """Remove a kind registered at run time (tests). Raises ValueError: a built-in or unknown one."""
    if name not in _KINDS or name in BUILTIN_KINDS:
        raise ValueError(f"cannot unregister logger kind {name!r}: not registered at run time")
    del _KINDS[name]


def logger_kinds() -> list:
    """The registered logger kinds, sorted."""
    return sorted(_KINDS)


def get_kind(name: str) -> LoggerKind:
    """The registered :class:`LoggerKind` named ``name``.

    Raises:
      ValueError: an unknown kind (the closest and the registered ones named).
    """
    kind = _KINDS.get(name)
    if kind is None:
        close = difflib.get_close_matches(str(name), logger_kinds(), n=1)
        raise ValueError(f"unknown logger kind {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                         + f"; registered: {logger_kinds()}")
    return kind


def make_logger(kind: str, **options) -> Logger:
    """A new logger of ``kind`` built with ``options`` (e.g. ``make_logger("csv", path=...)``).

    Raises:
      ValueError: an unknown kind (the message lists the registered ones).
    """
    return get_kind(kind).factory(**options)


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


class MissingExtraError(ImportError):
    """A logger kind whose package is not installed; the message names the extra to install."""


def _import_extra(module: str, kind: str):
    """``module`` imported, or :class:`MissingExtraError` naming the extra that installs ``kind``'s
    package (its :attr:`LoggerKind.extra`)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        extra = get_kind(kind).extra or kind
        raise MissingExtraError(f"logger kind {kind!r} needs the package {module.split('.')[0]!r} "
                                f"({type(e).__name__}: {e}); install it with pip install -e '.[{extra}]' "
                                f"(or pip install 'tdmpc2core[{extra}]')") from None


def _json_safe(config: Optional[Mapping]) -> dict:
    """``config`` as plain JSON data (numpy values and tuples converted; other objects as text)."""
    return json.loads(json.dumps(dict(config or {}), default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


class TensorBoardLogger:
    """TensorBoard event files (``tensorboardX``): one scalar per metric and step.

    ``log`` writes to ``logdir``; ``log_seeds`` (what the run driver calls) to ``logdir/seed{S}``
    per seed, so TensorBoard shows the seeds as runs side by side. ``config`` (JSON-serialisable)
    is attached to each event folder as the text summary ``config`` (a JSON code block). Each
    call is flushed, so the files are complete after every record. TensorBoard's tags have no
    spaces: ``Eval/episodic mean reward`` is shown as ``Eval/episodic_mean_reward``.

    Args:
      logdir: the folder of the event files (created).
      config: the settings attached to the run (None: nothing).
    Raises:
      MissingExtraError: tensorboardX is not installed (``pip install -e '.[tensorboard]'``).
    """

    def __init__(self, logdir="runs", *, config: Optional[Mapping] = None):
        self._tbx = _import_extra("tensorboardX", "tensorboard")
        # a NaN (e.g. train_return before any episode ended) is written as NaN, without a log line each
        logging.getLogger("tensorboardX.x2num").setLevel(logging.ERROR)
        self.logdir = Path(os.fspath(logdir))
        self.config = _json_safe(config)
        self.writers: dict = {}

    def _writer(self, seed):
        w = self.writers.get(seed)
        if w is None:
            path = self.logdir if seed is None else self.logdir / f"seed{seed}"
            path.mkdir(parents=True, exist_ok=True)
            w = self.writers[seed] = self._tbx.SummaryWriter(logdir=str(path))
            if self.config:
                cfg = {**self.config, **({} if seed is None else {"seed": int(seed)})}
                w.add_text("config", "```json\n" + json.dumps(cfg, indent=1, sort_keys=True) + "\n```", 0)
        return w

    def _write(self, seed, step: int, metrics: Mapping[str, float]) -> None:
        w = self._writer(seed)
        for k, v in metrics.items():
            w.add_scalar(k, float(v), int(step))
        w.flush()

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Write ``metrics`` at ``step`` into ``logdir``."""
        self._write(None, step, metrics)

    def log_seeds(self, step: int, by_seed: Mapping[int, Mapping[str, float]]) -> None:
        """Write each seed's ``metrics`` at ``step`` into ``logdir/seed{S}``."""
        for seed, metrics in by_seed.items():
            self._write(int(seed), step, metrics)

    def close(self) -> None:
        """Close the event files (a later ``log`` opens new ones)."""
        for w in self.writers.values():
            w.close()
        self.writers.clear()


class WandbLogger:
    """Weights & Biases runs, written offline unless asked otherwise (no network, no account).

    ``log_seeds`` (what the run driver calls) logs each seed into its own run, named
    ``{name}-seed{S}`` and grouped under ``group`` (so W&B shows the seeds of a task together);
    ``log`` (direct use) into one run named ``name``. A run is created at its first committed
    row; ``config`` (the resolved settings, plus ``seed``) is attached to it. The W&B step is
    the logger's ``step`` (agent steps or updates); ``Train/env_frames`` / ``Eval/env_frames``
    carry env frames.

    Rows: the metrics logged at one step make one W&B row, committed when a later step is
    logged or at :meth:`flush` (the run driver calls it once a step's records are all given) or
    :meth:`close`; after a ``flush`` log only later steps (W&B drops a row of an earlier one).
    W&B writes committed rows to a run's ``.wandb`` file every :attr:`FLUSH_SECONDS` (its
    ``x_transaction_log_flush_interval``, where the installed W&B has it, as 0.31 does; W&B's
    own default, 15 s, lost the end of killed runs),
    so a process killed (``kill -9``) loses at most the rows of its last seconds.
    :meth:`close` returns once every run's ``.wandb`` file is complete (its last record W&B's
    ``exit``), not merely when W&B says the run finished.

    Offline runs are folders ``{dir}/wandb/offline-run-*`` (a ``.wandb`` file each); upload
    them later with ``wandb sync {dir}/wandb/offline-run-*`` (``wandb sync --sync-all`` from
    ``dir``). A run resumed from a checkpoint by a new process starts new W&B runs at the
    resumed step, in the same group.

    Args:
      project: the W&B project.
      group, name: the runs' group and name (None: W&B's defaults; name None and seeds: ``seed{S}``).
      config: the settings attached to every run (JSON-serialisable).
      dir: the folder under which W&B writes ``wandb/`` (created; None: the working directory).
      mode: ``"offline"``, ``"online"`` or ``"disabled"``; None: the ``WANDB_MODE`` environment
        variable if set, else ``"offline"``.
      entity, tags, job_type: as ``wandb.init``'s.
      settings: more ``wandb.Settings`` fields (default: W&B's console capture off, the
        transaction log written every :attr:`FLUSH_SECONDS`).
    Raises:
      MissingExtraError: wandb is not installed (``pip install -e '.[wandb]'``).
      ValueError: an unknown ``mode``.
    """

    MODES = ("offline", "online", "disabled")
    #: seconds between W&B's writes of committed rows to a run's ``.wandb`` file
    FLUSH_SECONDS = 1.0
    #: the longest :meth:`close` waits for the ``.wandb`` files to be complete (then a warning)
    CLOSE_TIMEOUT = 60.0

    def __init__(self, project: str = "tdmpc2", *, group: Optional[str] = None, name: Optional[str] = None,
                 config: Optional[Mapping] = None, dir=None, mode: Optional[str] = None,
                 entity: Optional[str] = None, tags: Optional[Sequence[str]] = None, job_type: Optional[str] = None,
                 settings: Optional[Mapping] = None):
        self._wandb = _import_extra("wandb", "wandb")
        self.mode = mode or os.environ.get("WANDB_MODE") or "offline"
        if self.mode not in self.MODES:
            raise ValueError(f"WandbLogger: mode={self.mode!r} is not accepted; accepted: {list(self.MODES)}")
        self.project, self.group, self.name, self.entity = project, group, name, entity
        self.config, self.tags, self.job_type = _json_safe(config), list(tags or []) or None, job_type
        self.dir = None if dir is None else Path(os.fspath(dir))
        defaults = {"console": "off"}
        if "x_transaction_log_flush_interval" in getattr(self._wandb.Settings, "model_fields", {}):
            defaults["x_transaction_log_flush_interval"] = self.FLUSH_SECONDS  # wandb 0.31 has it
        self.settings = {**defaults, **dict(settings or {})}
        self.runs: dict = {}
        #: seed (None: the ``log`` run) -> the folder of its W&B run (``offline-run-*`` offline)
        self.run_dirs: dict = {}
        self._rows: dict = {}  # seed -> (step, metrics) of the row not yet committed

    def _run(self, seed):
        run = self.runs.get(seed)
        if run is None:
            if seed is None:
                name, config = self.name, self.config
            else:
                name = f"{self.name}-seed{seed}" if self.name else f"seed{seed}"
                config = {**self.config, "seed": int(seed)}
            if self.dir is not None:
                self.dir.mkdir(parents=True, exist_ok=True)
            run = self.runs[seed] = self._wandb.init(
                project=self.project, entity=self.entity, group=self.group, name=name, config=config,
                dir=None if self.dir is None else str(self.dir), mode=self.mode, tags=self.tags,
                job_type=self.job_type, reinit="create_new", settings=self._wandb.Settings(**self.settings))
            self.run_dirs[seed] = Path(run.dir).parent
        return run

    def _add(self, seed, step: int, metrics: Mapping[str, float]) -> None:
        pending = self._rows.get(seed)
        if pending is not None and pending[0] != int(step):
            self._commit(seed)
        self._rows.setdefault(seed, (int(step), {}))[1].update(metrics)

    def _commit(self, seed) -> None:
        step, row = self._rows.pop(seed)
        self._run(seed).log(row, step=step, commit=True)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Log ``metrics`` at ``step`` into the run named ``name``."""
        self._add(None, step, dict(metrics))

    def log_seeds(self, step: int, by_seed: Mapping[int, Mapping[str, float]]) -> None:
        """Log each seed's ``metrics`` at ``step`` into that seed's run."""
        for seed, metrics in by_seed.items():
            self._add(int(seed), step, dict(metrics))

    def flush(self) -> None:
        """Commit the row of the last step logged in every run (W&B writes it to the run's
        ``.wandb`` file within :attr:`FLUSH_SECONDS`)."""
        for seed in list(self._rows):
            self._commit(seed)

    def close(self) -> None:
        """Commit the last rows, finish every run and return once their ``.wandb`` files are
        complete (W&B finishes writing them after ``finish`` returns; a one-line warning after
        :attr:`CLOSE_TIMEOUT` seconds)."""
        import time

        self.flush()
        runs, self.runs = dict(self.runs), {}
        for run in runs.values():
            run.finish()
        if self.mode == "disabled":
            return
        files = [f for seed in runs for f in sorted(self.run_dirs[seed].glob("run-*.wandb"))]
        deadline = time.monotonic() + self.CLOSE_TIMEOUT
        while files:
            files = [f for f in files if not wandb_file_complete(f)]
            if files and time.monotonic() > deadline:
                warnings.warn(f"WandbLogger.close: W&B's file(s) {[str(f) for f in files]} are not complete "
                              f"{self.CLOSE_TIMEOUT:g} s after their runs finished", RuntimeWarning, stacklevel=2)
                break
            if files:
                time.sleep(0.02)


#: W&B's ``.wandb`` transaction log: a 7-byte header (``:W&B``, magic, version), then records in
#: 32 KiB blocks counted from the file's start; each piece has a 7-byte header (checksum u32, length
#: u16, kind u8: 1 whole, 2 first, 3 middle, 4 last) and a block's last < 7 bytes are padding
_WANDB_HEADER, _WANDB_BLOCK = 7, 32768


def wandb_records(path) -> list:
    """The complete records of a W&B ``.wandb`` file, in order, as W&B's ``Record`` protobufs
    (``wandb.proto.wandb_internal_pb2``); a record cut short at the end (a file being written)
    is left out. Raises ValueError: not a W&B transaction log."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(os.fspath(path)).read_bytes()
    if not data.startswith(b":W&B"):
        raise ValueError(f"{path}: not a W&B transaction log (no ':W&B' header)")
    out, pos, part = [], _WANDB_HEADER, b""
    while True:
        left = _WANDB_BLOCK - pos % _WANDB_BLOCK
        if left < 7:
            pos += left
            continue
        if pos + 7 > len(data):
            break
        _, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind not in (1, 2, 3, 4) or pos + 7 + n > len(data):
            break  # padding or a piece still being written
        piece, pos = data[pos + 7:pos + 7 + n], pos + 7 + n
        part = piece if kind in (1, 2) else part + piece
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(part)
            out.append(rec)
            part = b""
    return out


def wandb_file_complete(path) -> bool:
    """Whether a W&B ``.wandb`` file is complete: its last record is W&B's ``exit`` (written when
    the run finished). False for a missing, empty or unreadable file."""
    try:
        recs = wandb_records(path)
    except (OSError, ValueError):
        return False
    return bool(recs) and recs[-1].WhichOneof("record_type") == "exit"


# ---- the built-in kinds: each registered once, with where its files go
register_logger_kind(LoggerKind(
    "csv", CSVLogger,
    # a job: one file of seed means per job, {root}/{where}/seeds_<seeds>.csv; a LoggingConfig: {root}/{name}.csv
    job_options=lambda t: dict(path=t.root / t.where / ("seeds_" + "_".join(str(s) for s in t.seeds) + ".csv")),
    config_options=lambda t: dict(path=t.root / f"{t.name}.csv")))
register_logger_kind(LoggerKind(
    "tensorboard", TensorBoardLogger, extra="tensorboard",
    # one event folder per seed under {root}/{where} (a LoggingConfig's where: its name)
    job_options=lambda t: dict(logdir=t.root / t.where, config=t.config)))
register_logger_kind(LoggerKind(
    "wandb", WandbLogger, extra="wandb",
    # W&B writes under {root}/wandb; one run per seed, grouped
    job_options=lambda t: dict(project=t.project, entity=t.entity, mode=t.mode, group=t.group, name=t.name,
                               config=t.config, dir=t.root, job_type=t.job_type),
    note=lambda logger, root: (f" (W&B mode {logger.mode}; upload offline runs with "
                               f"`wandb sync {root}/wandb/offline-run-*`)")))
#: the kinds this module registers (the others were registered at run time)
BUILTIN_KINDS = tuple(_KINDS)


@dataclasses.dataclass(frozen=True)
class LoggingConfig:
    """What an agent's ``train(..., logging_config=...)`` logs, how often, and where (the
    reference API's argument; docs/architecture.md, "A logger").

    With a logging config, ``train`` evaluates every ``log_frequency`` steps of the run's unit
    (agent steps for :class:`~tdmpc2core.TDMPC2`, updates for
    :class:`~tdmpc2core.TDMPC2MultiTask`, which also records its training metrics at that
    cadence), builds the loggers below, gives them every record and closes them at the end.

    Attributes:
      config: settings attached to each logger's run (W&B config, a TensorBoard text
        summary), JSON-serialisable; the agent's resolved configuration is added under
        ``agent`` unless given.
      log_frequency: steps (the run's unit) between evaluations and records (>= 1).
      use_wandb: log to W&B (kind ``"wandb"``; offline unless ``WANDB_MODE`` or
        ``options["wandb"]["mode"]`` says otherwise).
      kind: further logger kinds (a registered name or several): ``"tensorboard"``, ``"csv"``...
      project: the W&B project.
      group, name: W&B group and run name (None: the env id, or ``multitask``); each seed's run
        is ``{name}-seed{S}``.
      dir: where the files go (None: ``runs``): W&B under ``{dir}/wandb``, TensorBoard in
        ``{dir}/{name}/seed{S}``, CSV in ``{dir}/{name}.csv`` (seed means).
      options: kind -> more keyword options of that kind's factory (e.g. ``{"wandb": {"entity":
        "me", "mode": "online"}}``).
    Raises:
      ValueError: ``log_frequency`` < 1, or an unknown kind (the registered ones named).
    """

    config: Mapping = dataclasses.field(default_factory=dict)
    log_frequency: int = 1000
    use_wandb: bool = False
    kind: Union[None, str, Sequence[str]] = None
    project: str = "tdmpc2"
    group: Optional[str] = None
    name: Optional[str] = None
    dir: Optional[str] = None
    options: Mapping = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        freq = self.log_frequency
        if isinstance(freq, bool) or not isinstance(freq, numbers.Integral) or int(freq) < 1:
            raise ValueError(f"LoggingConfig: log_frequency={freq!r} is not accepted; accepted: an integer >= 1 "
                             "(steps of the run's unit between evaluations)")
        unknown = [k for k in self.kinds() if k not in _KINDS]
        if unknown:
            close = difflib.get_close_matches(str(unknown[0]), logger_kinds(), n=1)
            raise ValueError(f"LoggingConfig: unknown logger kind {unknown[0]!r}"
                             + (f" (did you mean {close[0]!r}?)" if close else "") + f"; registered: {logger_kinds()}")

    def kinds(self) -> list:
        """The logger kinds, in order (``wandb`` first with ``use_wandb``), each once."""
        more = [self.kind] if isinstance(self.kind, str) else list(self.kind or ())
        return list(dict.fromkeys((["wandb"] if self.use_wandb else []) + more))

    def make_loggers(self, default_name: str, agent_config: Optional[Mapping] = None) -> list:
        """The loggers of :meth:`kinds` (``default_name``: the name and group when not set). A
        kind that cannot be built (e.g. its package missing) is left out with a one-line
        warning naming the extra to install: logging never stops training."""
        name = self.name or default_name
        config = dict(self.config)
        if agent_config is not None:
            config.setdefault("agent", dict(agent_config))
        # where each kind's files go: its LoggerKind's config_options
        target = LogTarget(root=Path(self.dir or "runs"), where=name, name=name, group=self.group or default_name,
                           config=config, project=self.project)
        out = []
        for kind in self.kinds():
            try:
                base = get_kind(kind).options_for_config(target)
                out.append(make_logger(kind, **{**base, **dict(self.options.get(kind) or {})}))
            except Exception as e:  # a logger never stops training
                msg = " ".join(f"{type(e).__name__}: {e}".split())
                warnings.warn(f"logger {kind!r} not built ({msg}); training goes on without it", RuntimeWarning,
                              stacklevel=3)
        return out


__all__ = ["Logger", "LoggerKind", "LogTarget", "CSVLogger", "TensorBoardLogger", "WandbLogger", "LoggingConfig",
           "MissingExtraError", "register_logger", "register_logger_kind", "unregister_logger_kind", "get_kind",
           "make_logger", "logger_kinds", "wandb_records", "wandb_file_complete", "BUILTIN_KINDS"]
