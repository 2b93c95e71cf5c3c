"""The run driver: everything a training run does on the host, for both agents.

An agent describes *what* to compute through a :class:`RunProgram` (its initial state, the
compiled program that advances the run by some ticks, its evaluation, its chunk records and
the settings that identify it); :func:`train` decides *when*:

* the schedule (:func:`schedule`): chunks in absolute ticks that end at every evaluation, at
  the agent's own cut points (the seed-phase burst; the metric cadence) and at the call's end;
* wall-time-capped calls of the compiled program (:class:`SubChunkSizer`), so a stop request
  (``should_stop``, e.g. a signal handler's flag) is acted on within ``max_chunk_seconds``;
* checkpoints (:mod:`tdmpc2core.io.checkpoint`): every ``checkpoint_every`` steps, at the
  end, and when stopped; the settings check and the rotation; resuming from the newest;
* the history (evaluations and per-chunk records) in memory and in checkpoints;
* progress and chunk callbacks.

None of this changes a number of the run: a tick depends only on its absolute index and the
state, so a chunk split into several calls of the same compiled program, a run continued in
several ``train`` calls and a run resumed from a checkpoint by a new process give the same
states (bit for bit on CPU), and the history is only read back.

Units: the driver counts *ticks* (one call-granule of the compiled program); the run's own
unit (``agent steps`` for the single-task agent, one tick = ``n_envs`` agent steps;
``updates`` for the multi-task agent, one tick = one update) is ``ticks x steps_per_tick``.
Every option given to :func:`train` (``n_timesteps``, ``eval_every``, ``checkpoint_every``)
counts the run's own unit.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import numbers
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, Sequence

import numpy as np

from ..io import checkpoint as ck
from . import devices

_log = logging.getLogger("tdmpc2core")
UNSET = object()
#: per-chunk record fields that measure wall-clock time (differ between two runs of the same seed)
WALL_CLOCK_KEYS = ("chunk_seconds", "wall_time_s", "agent_steps_per_s", "updates_per_s")


class TrainingInterrupted(RuntimeError):
    """``should_stop`` asked a training run to stop; raised at the next boundary between
    calls of the compiled program, after the checkpoint (if the run has a checkpoint folder)
    is written.

    Attributes:
      state: the run state at that point (leading seed axis).
      history: the training history up to there (as ``train`` returns it).
      step: the run's position in its own unit (``unit``: "agent steps" for
        :class:`~tdmpc2core.TDMPC2`, "updates" for :class:`~tdmpc2core.TDMPC2MultiTask`);
        ``agent_steps`` is the same number.
      checkpoint: the :class:`tdmpc2core.io.checkpoint.CheckpointInfo` written, or None.
    """

    def __init__(self, state, history, step: int, checkpoint=None, unit: str = "agent steps"):
        where = f"; checkpoint {checkpoint.path}" if checkpoint is not None else " (no checkpoint folder)"
        super().__init__(f"training stopped on request at {step} {unit}{where}")
        self.state = state
        self.history = history
        self.step = self.agent_steps = int(step)
        self.unit = unit
        self.checkpoint = checkpoint


# ----------------------------------------------------------------------------- options
@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a run is driven on the host; none of these changes a number of the run. The one
    description of the host options of both agents' ``train`` (given as ``options=`` or as
    keywords), counted in the run's unit (agent steps for ``TDMPC2``, updates for
    ``TDMPC2MultiTask``).

    Attributes:
      checkpoint_dir: folder of this run's checkpoints (:mod:`tdmpc2core.io.checkpoint`; one
        run per folder); None: none. A checkpoint is written every ``checkpoint_every`` steps,
        at the end of the call and when ``should_stop`` stops the run.
      checkpoint_every: steps between checkpoints; None: only at the end of the call and when
        stopped.
      keep_checkpoints: newest checkpoints kept (None: all).
      resume: with ``checkpoint_dir``, continue from its newest complete checkpoint (if any)
        up to ``total_timesteps``: rerunning the same call finishes an interrupted run; with
        False a folder holding checkpoints is an error.
      max_chunk_seconds: wall-time cap of one call of the compiled program: chunks of the
        schedule are split on the host into calls sized from the measured seconds per tick, so
        that ``should_stop`` is polled at least that often (a single tick, such as the
        seed-phase burst, and an evaluation cannot be split); None: a whole chunk per call.
      should_stop: polled after every call; True stops the run (checkpoint, then
        :class:`TrainingInterrupted`).
      progress: called after every call of the compiled program with a dict (:func:`train`,
        ``options``: the position in the unit's names, the rate without compiling, the last
        evaluation's summary).
      loggers: :class:`~tdmpc2core.io.loggers.Logger` objects: ``log(step, {"Train/<name>":
        ...})`` after every chunk record and ``log(step, {"Eval/episodic mean reward": ...})``
        after every evaluation, seed means (``log_seeds`` loggers get each seed's values); one
        that raises is warned about once and dropped; the caller closes them.
      progress_bar: a tqdm progress bar on stderr (steps of this call, the rate, the last
        evaluation's mean); None (default): only when stderr is a terminal. The pipeline's
        jobs pass False (their logs keep their own progress lines).
      on_evaluation: called on the host after every evaluation of this call as
        ``on_evaluation(state, tick, evaluation)``: the run state evaluated, its training tick
        and the evaluation's record (``eval_agent_steps``, ``eval_returns`` [n_seeds,
        episodes], ...). The training stage's ``--video every`` records an episode there
        (:meth:`tdmpc2core.TDMPC2.record_episode`). It must not change the state; what it
        returns is ignored.
      compile_ahead: compile the call's programs that the agent names
        (:meth:`RunProgram.compile_ahead`: the single-task agent's training chunk and
        evaluation) each in a thread of its own as soon as the call's state exists, instead of
        one after the other at their first calls: a fresh run's chunk compiles while its first
        evaluation compiles and runs, a resumed run's evaluation while it trains. The same
        programs and numbers; a call that needs a program still compiling waits for it (its
        ``compile_detail`` records ``ahead`` and the seconds it waited, ``blocked_s``), and a
        process that exits (a stop) waits for a compile under way. None (default): on unless
        JAX's default backend is the CPU, where the compiling and the computing share the
        host's cores and little would be gained.
    """

    checkpoint_dir: Any = None
    checkpoint_every: Optional[int] = None
    keep_checkpoints: Optional[int] = 2
    resume: bool = True
    max_chunk_seconds: Optional[float] = None
    should_stop: Optional[Callable[[], bool]] = None
    progress: Optional[Callable[[dict], None]] = None
    loggers: tuple = ()
    progress_bar: Optional[bool] = None
    on_evaluation: Optional[Callable[[Any, int, dict], None]] = None
    compile_ahead: Optional[bool] = None

    def __post_init__(self):
        object.__setattr__(self, "loggers", tuple(self.loggers or ()))
        bad = [lg for lg in self.loggers if not (callable(getattr(lg, "log", None))
                                                 and callable(getattr(lg, "close", None)))]
        if bad:
            raise TypeError(f"loggers: {type(bad[0]).__name__} has no log(step, metrics) and close() "
                            "(tdmpc2core.io.loggers.Logger)")
        if self.checkpoint_every is not None and int(self.checkpoint_every) < 1:
            raise ValueError(f"checkpoint_every={self.checkpoint_every!r} must be >= 1 (or None)")
        if self.max_chunk_seconds is not None and not self.max_chunk_seconds > 0:
            raise ValueError(f"max_chunk_seconds must be > 0 (or None: no cap), got {self.max_chunk_seconds!r}")


def constructor_settings(agent_class, cfg) -> set:
    """The names an agent's constructor takes: its parameters and its configuration's fields
    (``cfg``, a dataclass), for :func:`run_options`' pointer to the constructor."""
    import inspect

    names = {n for n in inspect.signature(agent_class.__init__).parameters if n != "self"}
    return names | ({f.name for f in dataclasses.fields(cfg)} if dataclasses.is_dataclass(cfg) else set())


def agent_run_options(agent, options: Optional[RunOptions], kwargs: dict) -> RunOptions:
    """:func:`run_options` for ``agent.train``: its keywords and its constructor's settings
    (``agent.cfg``) named in the refusal of an unknown keyword."""
    return run_options(options, kwargs, train=type(agent).train, constructor=constructor_settings(type(agent), agent.cfg))


def run_options(options: Optional[RunOptions], kwargs: dict, train=None, constructor=None) -> RunOptions:
    """``options`` with the fields given as keywords replaced (the agents' ``train`` accepts
    both). Raises TypeError naming an unknown keyword, the closest accepted one, and every
    keyword ``train`` takes (its own parameters, from the function ``train``, and the
    RunOptions fields); a setting of the agent's constructor (``constructor``: its parameters'
    names, e.g. ``extensions``) is pointed there."""
    import difflib
    import inspect

    names = {f.name for f in dataclasses.fields(RunOptions)}
    unknown = sorted(set(kwargs) - names)
    if unknown:
        own = [n for n, prm in inspect.signature(train).parameters.items()
               if n != "self" and prm.kind is not prm.VAR_KEYWORD] if train is not None else []
        accepted = sorted(set(own) | names)
        bad = unknown[0]
        if constructor is not None and bad in constructor:
            raise TypeError(f"train: {bad!r} is a setting of the agent, not of train: pass it to the agent's "
                            f"constructor ({bad}=...)")
        close = difflib.get_close_matches(bad, accepted, n=1)
        raise TypeError(f"train: unknown option(s) {unknown}" + (f" (did you mean {close[0]!r}?)" if close else "")
                        + f"; accepted: {accepted}")
    return dataclasses.replace(options if options is not None else RunOptions(), **kwargs)


def alias(owner: str, name: str, value, alias_name: str, alias_value, default=None):
    """The value of an argument that has an alias (the reference API's name): ``value`` if
    given, else ``alias_value`` if given, else ``default`` (``None`` counts as not given).

    Raises:
      TypeError: both are given (naming both).
    """
    if value is not None and alias_value is not None:
        raise TypeError(f"{owner}: {name}= and {alias_name}= (its alias) are both given; pass one")
    return value if value is not None else alias_value if alias_value is not None else default


def reference_aliases(owner: str, state, initial_state, eval_episodes, num_episode_test):
    """(state, eval_episodes) of an agent's ``train`` from our names and the reference API's
    (``initial_state``, ``num_episode_test``); ``eval_episodes`` defaults to 10. Raises
    TypeError when a name and its alias are both given."""
    return (alias(owner, "state", state, "initial_state", initial_state),
            alias(owner, "eval_episodes", eval_episodes, "num_episode_test", num_episode_test, 10))


def _check_logging_config(logging_config) -> None:
    from ..io.loggers import LoggingConfig

    if not isinstance(logging_config, LoggingConfig):
        raise TypeError(f"logging_config must be a tdmpc2core.LoggingConfig, got {type(logging_config).__name__}")


def log_cadence(owner: str, name: str, value, logging_config) -> Optional[int]:
    """``value`` (e.g. ``eval_every``), or ``logging_config.log_frequency`` when it is not given.

    Raises:
      ValueError: both are given and differ (naming both).
      TypeError: ``logging_config`` is not a :class:`~tdmpc2core.io.loggers.LoggingConfig`.
    """
    if logging_config is None:
        return value
    _check_logging_config(logging_config)
    freq = int(logging_config.log_frequency)
    if value is not None and int(value) != freq:
        raise ValueError(f"{owner}: {name}={value} and logging_config.log_frequency={freq} disagree; give one")
    return freq


@contextlib.contextmanager
def logging_options(options: RunOptions, logging_config, default_name: str, agent_config: dict):
    """``options`` with the loggers of ``logging_config`` (a
    :class:`~tdmpc2core.io.loggers.LoggingConfig`, or None) added after the caller's own; the
    loggers it built are closed on exit (a failing close is a one-line warning)."""
    if logging_config is None:
        yield options
        return
    _check_logging_config(logging_config)
    built = logging_config.make_loggers(default_name, agent_config)
    try:
        yield dataclasses.replace(options, loggers=(*options.loggers, *built))
    finally:
        for lg in built:
            try:
                lg.close()
            except Exception as e:  # a logger never stops training
                warnings.warn(f"logger {type(lg).__name__}: close raised " + " ".join(f"{type(e).__name__}: {e}".split()),
                              RuntimeWarning, stacklevel=3)


@dataclasses.dataclass(frozen=True)
class Run:
    """The settings of one run that fix its numbers (compared on restore) and its cadence.

    ``seeds``; ``total_steps`` (the whole run's length in its unit); ``eval_every`` (steps
    between evaluations, None: none); ``eval_episodes``; ``extra`` (the agent's own run
    settings, e.g. the multi-task ``log_every``).
    """

    seeds: tuple
    total_steps: int
    eval_every: Optional[int]
    eval_episodes: int
    extra: tuple = ()  # sorted (name, value) pairs

    def settings(self) -> dict:
        d = {"seeds": [int(s) for s in self.seeds], "total_timesteps": int(self.total_steps),
             "eval_every": int(self.eval_every) if self.eval_every else None,
             "eval_episodes": int(self.eval_episodes) if self.eval_every else None}
        d.update(dict(self.extra))
        return d


@dataclasses.dataclass(frozen=True)
class EvalField:
    """One array the history keeps per evaluation: ``key`` in the history ``train`` returns,
    ``host`` its name in a checkpoint's host arrays (under ``eval/``), its dtype and its
    per-evaluation shape."""

    key: str
    host: str
    dtype: Any
    shape: tuple = ()


class Chunk(NamedTuple):
    """One chunk of the schedule: ``phase``, ``start`` tick, ``ticks``, and whether an
    evaluation follows it (``evaluate_after``)."""

    phase: str
    start: int
    ticks: int
    evaluate_after: bool


# ----------------------------------------------------------------------------- the interface
class RunProgram:
    """What an agent supplies to the driver: its compiled programs as six methods, the rest as
    data (subclass it; the defaults fit an agent without phases, extra cut points or checks).

    Data, set by the subclass (class attributes or in ``__init__``):

    * ``agent``: the agent (its ``compile_seconds``, the compiling seconds so far with the
      seconds the run waited on them, ``blocked_s``, is read between calls: a call's share of
      waiting is taken out of its rate);
    * ``unit`` (words, for messages) and ``unit_key`` (the key of the run's position in
      records, progress and checkpoint metadata); ``steps_per_tick``; ``phases`` (the chunk
      phases, in the order a run meets them);
    * ``identity``: the settings that make a checkpoint this agent's (class, config, data, envs;
      a dict, or a property giving one);
    * ``attached``: what a chunk record shows of the evaluation that ended it, ``{record key:
      (evaluation key, axis)}``: the evaluation's value, or its mean over ``axis``;
    * ``progress``: ``(name, evaluation key, axis)``: the progress dict's summary of the last
      evaluation (its mean over ``axis``, or the value with None), None before the first;
    * ``checkpoint_meta``: free metadata of every checkpoint; ``env_frames_per_tick``: with it,
      a checkpoint's metadata also says its ``env_frames``.

    The methods: :meth:`init_state`, :meth:`state_tick`, :meth:`advance`, :meth:`evaluate`,
    :meth:`eval_fields` and :meth:`chunk_record` (required); the optional ones check or shape a
    run (:meth:`check_state`, :meth:`cuts`, :meth:`phase`, :meth:`start`, :meth:`after_call`,
    :meth:`finish`), place a restored state (:meth:`place`) or derive values (:meth:`state_seeds`,
    :meth:`finalize`, :meth:`eval_log`).
    """

    agent = None
    unit = "steps"
    unit_key = "steps"
    phases: tuple = ("train",)
    steps_per_tick = 1
    identity: dict = {}
    attached: dict = {}
    progress: Optional[tuple] = None
    checkpoint_meta: dict = {}
    env_frames_per_tick: Optional[int] = None

    # ---- required
    def init_state(self, seeds: Sequence[int], total_steps: int):
        """The run's initial state (leading seed axis)."""
        raise NotImplementedError

    def state_tick(self, state) -> int:
        """Ticks done by ``state`` (the same for every seed)."""
        raise NotImplementedError

    def advance(self, state, start_tick: int, n_ticks: int):
        """``n_ticks`` more ticks of the compiled program from ``start_tick`` (blocks until done)."""
        raise NotImplementedError

    def evaluate(self, state, tick: int, run: Run) -> dict:
        """One evaluation at ``tick``: a dict with a value for every :meth:`eval_fields` key."""
        raise NotImplementedError

    def eval_fields(self, n_seeds: int, eval_episodes: int) -> list[EvalField]:
        """The arrays the history keeps per evaluation (:class:`EvalField`)."""
        raise NotImplementedError

    def chunk_record(self, state, record: dict, chunk: Chunk, run: Run):
        """Fill ``record`` (which holds ``phase`` and the run's position) at the end of
        ``chunk`` with the last metrics and whatever else the agent logs per chunk; return the
        state (the agent may reset per-chunk counters in it). The driver adds the wall-clock
        fields and the evaluation (``attached``)."""
        raise NotImplementedError

    # ---- optional
    def state_seeds(self, state) -> Optional[list]:
        """The seeds a state holds, when the state records them (else None)."""
        return None

    def check_state(self, state, run: Run, total_given: bool) -> None:
        """Refuse a given (or restored) state that cannot continue ``run`` (raises ValueError);
        ``total_given``: the run's length was given, not derived from this call."""

    def cuts(self, start_tick: int, end_tick: int, run: Run) -> set:
        """Ticks in (start, end) where a chunk must end besides the evaluations."""
        return set()

    def phase(self, a: int, b: int) -> str:
        """The phase of the chunk [a, b)."""
        return self.phases[0]

    def place(self, state):
        """A state read from a checkpoint (numpy leaves, typed PRNG keys as JAX arrays; the
        structure, shapes and dtypes of :meth:`init_state`'s) placed as :meth:`init_state`
        places a fresh one: the same devices, shardings and commitment, so that a program
        called with it lowers to the module a fresh run's call lowered to (one JAX cache entry
        for both; a committed argument adds ``sdy.sharding`` annotations an uncommitted one
        lacks, and the resumed process would compile its training chunk and evaluation again).

        Default: JAX's default device, uncommitted (``jax.device_put`` without a device), as a
        program compiled without a mesh gives its outputs from uncommitted inputs; nothing is
        compiled (``jnp.asarray`` stages each numpy array through a compiled program, one per
        shape and dtype of the state). A program whose fresh state lies on a mesh overrides it.
        """
        import jax

        return jax.device_put(state)

    def start(self, state, run: Run) -> None:
        """Called once per ``train`` call before its first tick, with the state it starts from."""

    def after_call(self, state, step: int) -> None:
        """Checks after every call of the compiled program (raise to end the run)."""

    def finalize(self, history: dict) -> None:
        """Add derived entries to the history ``train`` returns."""

    def eval_log(self, evaluation: dict) -> dict:
        """What the loggers get of an evaluation, ``{name: value}`` (logged as ``Eval/<name>``,
        per-seed values as their mean): at least ``episodic mean reward``."""
        return {}

    def finish(self, state, history: dict, end_tick: int, run: Run) -> None:
        """After the last chunk of a call (raise to report what went wrong)."""

    # ---- derived from the data (not overridden)
    def eval_period(self, eval_every: Optional[int]) -> int:
        """Ticks between evaluations: the smallest tick count that is a whole number of
        ``eval_every`` steps (0: no evaluation)."""
        if not eval_every:
            return 0
        return int(eval_every) // math.gcd(self.steps_per_tick, int(eval_every))

    def compile_seconds(self) -> float:
        """Seconds this process has spent tracing, lowering and compiling the agent's programs
        so far (:func:`tdmpc2core.run.compiled.compiling_seconds` of its ``compile_seconds``);
        0.0 without an agent."""
        from .compiled import compiling_seconds

        return 0.0 if self.agent is None else compiling_seconds(self.agent.compile_seconds)

    def blocked_seconds(self) -> float:
        """Seconds the run's thread has spent compiling the agent's programs, or waiting for
        their compiles ahead (:func:`tdmpc2core.run.compiled.blocked_seconds`): what a call's
        rate leaves out. 0.0 without an agent."""
        from .compiled import blocked_seconds

        return 0.0 if self.agent is None else blocked_seconds(self.agent.compile_seconds)

    def compile_ahead(self, state, run: Run, chunks: bool, evaluates: bool) -> list:
        """[(program name, a function that compiles it)] for the driver to run in threads of
        their own before the call needs them (:attr:`RunOptions.compile_ahead`): their
        arguments' specs taken from ``state`` now, so the call may go on with it. ``chunks``:
        the call runs the training program; ``evaluates``: it evaluates. They are traced in
        this order (:func:`tdmpc2core.run.compiled.start_compiles`): the longest XLA compile
        first. Default: none."""
        return []

    def attach_eval(self, record: dict, evaluation: dict) -> None:
        """Copy into a chunk record what it shows of the evaluation that ended it (``attached``)."""
        for key, (source, axis) in self.attached.items():
            value = np.asarray(evaluation[source])
            record[key] = value if axis is None else value.mean(axis=axis)

    def progress_fields(self, history: dict) -> dict:
        """The progress dict's summary of the last evaluation so far (``progress``)."""
        if self.progress is None:
            return {}
        name, source, axis = self.progress
        evals = history["evals"]
        if not evals:
            return {name: None}
        value = np.asarray(evals[-1][source])
        return {name: value if axis is None else np.mean(value, axis=axis)}

    def meta(self, tick: int) -> dict:
        """A checkpoint's metadata besides the run's position (``checkpoint_meta``, ``env_frames``)."""
        frames = {} if self.env_frames_per_tick is None else {"env_frames": tick * self.env_frames_per_tick}
        return {**self.checkpoint_meta, **frames}


# ----------------------------------------------------------------------------- schedule
def schedule(program: RunProgram, start_tick: int, end_tick: int, total_ticks: int, run: Run):
    """The host plan of one call, in absolute ticks.

    Chunks end at every multiple of the evaluation period, at the program's cut points and
    at the call's end; an evaluation follows each chunk that ends at a multiple of the
    period or at the end of the run (``total_ticks``). Returns (chunks, evaluate_at_start):
    a list of :class:`Chunk`, and whether to evaluate before the first tick (a run at tick 0).

    Raises:
      ValueError: ``end_tick`` past ``total_ticks``.
    """
    if end_tick > total_ticks:
        raise ValueError(f"this call would run to {end_tick * program.steps_per_tick} {program.unit}, past "
                         f"total_timesteps={run.total_steps}")
    cuts = {start_tick, end_tick}
    period = program.eval_period(run.eval_every)
    if period:
        cuts |= set(range(-(-start_tick // period) * period, end_tick + 1, period))
    cuts |= {c for c in program.cuts(start_tick, end_tick, run) if start_tick < c < end_tick}
    cuts = sorted(cuts)
    chunks = [Chunk(program.phase(a, b), a, b - a, evaluation_due(program, b, total_ticks, run))
              for a, b in zip(cuts[:-1], cuts[1:])]
    return chunks, bool(period) and start_tick == 0


class SubChunkSizer:
    """How many ticks the next call of the chunk program may run so that it takes at most
    ``max_seconds`` of wall time (None: no cap, the whole chunk in one call).

    Seconds per tick are measured per phase (seed-phase ticks take far less than training
    ticks): a phase starts with a 1-tick call, then each call runs
    ``min(max_seconds / (seconds per tick of the last call), growth x the last call's ticks)``
    ticks (at least 1). The first call of a run includes compilation, which only makes the
    next call shorter. A single tick cannot be split (the seed-phase burst of ``seed_steps``
    updates is one tick), nor can an evaluation.
    """

    def __init__(self, max_seconds: Optional[float], growth: int = 8):
        if max_seconds is not None and not max_seconds > 0:
            raise ValueError(f"max_chunk_seconds must be > 0 (or None: no cap), got {max_seconds!r}")
        self.max_seconds = None if max_seconds is None else float(max_seconds)
        self.growth = int(growth)
        self._seconds_per_tick: dict[str, float] = {}
        self._last_ticks: dict[str, int] = {}

    def ticks(self, phase: str, remaining: int) -> int:
        """Ticks for the next call (1 <= ticks <= remaining; remaining >= 1)."""
        if self.max_seconds is None or remaining <= 1:
            return int(remaining)
        spt = self._seconds_per_tick.get(phase)
        if spt is None:
            return 1
        n = math.floor(self.max_seconds / max(spt, 1e-9))
        n = min(n, self._last_ticks[phase] * self.growth)
        return int(max(1, min(n, remaining)))

    def record(self, phase: str, ticks: int, seconds: float) -> None:
        """Report that ``ticks`` ticks of ``phase`` took ``seconds``."""
        self._seconds_per_tick[phase] = float(seconds) / max(int(ticks), 1)
        self._last_ticks[phase] = int(ticks)


# ----------------------------------------------------------------------------- history
def new_history() -> dict:
    """An empty history in its working form: ``evals`` (one dict per evaluation, keyed by the
    program's evaluation fields), ``chunks`` (one record per chunk of the schedule),
    ``wall_seconds``."""
    return {"evals": [], "chunks": [], "wall_seconds": 0.0}


def working_history(program: RunProgram, history: Optional[dict]) -> dict:
    """A copy of ``history`` (None, the working form, or as ``train`` returns it) in its
    working form."""
    if history is None:
        return new_history()
    if "evals" in history:
        evals = [dict(e) for e in history["evals"]]
    else:
        fields = program.eval_fields(1, 1)
        n = len(np.asarray(history[fields[0].key]).reshape(-1))
        evals = [{f.key: np.asarray(history[f.key])[i] for f in fields} for i in range(n)]
    return {"evals": evals, "chunks": [dict(c) for c in history["chunks"]],
            "wall_seconds": float(history.get("wall_seconds", 0.0))}


def finalize_history(program: RunProgram, hist: dict, n_seeds: int, eval_episodes: int) -> dict:
    """The working history as ``train`` returns it: one array per evaluation field
    ``[n_evals, ...]``, ``chunks`` (the per-chunk records), ``wall_seconds`` (training wall
    time summed over the sessions of a resumed run), the program's derived entries
    (:meth:`RunProgram.finalize`) and the loggers' keys of the evaluations (``Eval/<name>``,
    :func:`logged_evals`)."""
    out = {}
    for f in program.eval_fields(n_seeds, eval_episodes):
        vals = [np.asarray(e[f.key], f.dtype) for e in hist["evals"]]
        out[f.key] = np.stack(vals) if vals else np.zeros((0, *f.shape), f.dtype)
    out["chunks"] = list(hist["chunks"])
    out["wall_seconds"] = float(hist["wall_seconds"])
    program.finalize(out)
    out.update(logged_evals(program, hist["evals"]))
    return out


def logged_evals(program: RunProgram, evals: list) -> dict:
    """``{"Eval/<name>": array}`` of what the loggers got of each evaluation
    (:meth:`RunProgram.eval_log`), per seed: [n_evals, n_seeds] (a value shared by the seeds,
    such as ``env_frames``: [n_evals]). Empty without an evaluation."""
    logged = [program.eval_log(e) for e in evals]
    return {f"Eval/{k}": np.stack([np.asarray(d[k], np.float64) for d in logged]) for k in (logged[0] if logged else {})}


def _host_dtype(v):
    if isinstance(v, (bool, np.bool_)):
        return np.bool_
    if isinstance(v, int):
        return np.int64
    if isinstance(v, float):
        return np.float64
    return np.asarray(v).dtype


def history_to_arrays(program: RunProgram, hist: dict, n_seeds: int, eval_episodes: int) -> dict:
    """The history as a flat dict of numpy arrays (the ``host`` part of a checkpoint).

    ``eval/<host name>`` [n_evals, ...] per evaluation field; ``chunks/<key>`` [n_chunks,
    ...] per key of the chunk records (``phase`` as an int8 index into the program's phases;
    ``eval_position``: index of the evaluation that ended the chunk, -1 if none; what a
    record shows of that evaluation is not stored twice); ``wall_seconds``.
    """
    h = finalize_history(program, hist, n_seeds, eval_episodes)
    d = {f"eval/{f.host}": h[f.key] for f in program.eval_fields(n_seeds, eval_episodes)}
    d["wall_seconds"] = np.asarray(h["wall_seconds"], np.float64)
    chunks = h["chunks"]
    c = len(chunks)
    d["chunks/phase"] = np.asarray([program.phases.index(r["phase"]) for r in chunks], np.int8).reshape(c)
    d["chunks/eval_position"] = np.asarray([r.get("eval_position", -1) for r in chunks], np.int64).reshape(c)
    skip = {"phase", "eval_position", *program.attached}
    for k in (k for k in (chunks[0] if chunks else {}) if k not in skip):
        dtype = _host_dtype(chunks[0][k])
        d[f"chunks/{k}"] = np.stack([np.asarray(r[k], dtype) for r in chunks])
    return d


def history_from_arrays(program: RunProgram, d: dict) -> dict:
    """Inverse of :func:`history_to_arrays`: the history as ``train`` returns it."""
    fields = program.eval_fields(1, 1)
    out = {f.key: np.asarray(d[f"eval/{f.host}"], f.dtype) for f in fields}
    n_eval = len(out[fields[0].key])
    evals = [{f.key: out[f.key][i] for f in fields} for i in range(n_eval)]
    positions = np.asarray(d["chunks/eval_position"])
    phases = np.asarray(d.get("chunks/phase", np.zeros(len(positions), np.int8)))
    keys = [k.split("/", 1)[1] for k in d if k.startswith("chunks/")
            and k not in ("chunks/phase", "chunks/eval_position")]
    chunks = []
    for j, pos in enumerate(positions):
        rec = {"phase": program.phases[int(phases[j])]}
        for k in keys:
            v = np.asarray(d[f"chunks/{k}"][j])
            rec[k] = v.item() if v.ndim == 0 else v  # scalars back as Python numbers, per-seed values as arrays
        if pos >= 0:
            rec["eval_position"] = int(pos)
            program.attach_eval(rec, evals[int(pos)])
        chunks.append(rec)
    out["chunks"] = chunks
    out["wall_seconds"] = float(d["wall_seconds"])
    program.finalize(out)
    out.update(logged_evals(program, evals))
    return out


# ----------------------------------------------------------------------------- checkpoints
def _settings(program: RunProgram, run: Run) -> dict:
    return {**program.identity, "run": run.settings()}


def save_checkpoint(program: RunProgram, directory, state, history: Optional[dict], run: Run,
                    keep: Optional[int] = None):
    """Write ``state`` and ``history`` as checkpoint ``step_{steps}`` of ``directory``
    (:mod:`tdmpc2core.io.checkpoint`): the whole device state, the history as host arrays
    (:func:`history_to_arrays`), the settings that identify the run (the program's
    :meth:`~RunProgram.identity` and ``run``) and metadata. Returns the
    :class:`~tdmpc2core.io.checkpoint.CheckpointInfo`."""
    import jax

    from ..version import __version__

    tick = program.state_tick(state)
    step = tick * program.steps_per_tick
    if not devices.is_primary():  # one writer in a multi-process job: process 0 (same state everywhere)
        path = Path(directory) / ck.checkpoint_name(step)
        return ck.CheckpointInfo(path=path, step=step, bytes=0, seconds=0.0)
    state = devices.local(state)  # a replicated state read from this process's copy
    hist = working_history(program, history)
    host = history_to_arrays(program, hist, len(run.seeds), run.eval_episodes)
    meta = {program.unit_key: step, "tick": tick, **program.meta(tick), "evaluations": len(hist["evals"]),
            "wall_seconds": hist["wall_seconds"], "tdmpc2core_version": __version__, "jax_version": jax.__version__,
            "backend": jax.default_backend()}
    info = ck.save(directory, step, {"state": state}, settings=_settings(program, run), host=host, meta=meta,
                   keep=keep)
    _log.info("checkpoint %s written: %d %s, %.1f MB, %.2f s", info.path, step, program.unit, info.bytes / 1e6,
              info.seconds)
    return info


def restore(program: RunProgram, path, *, seeds=None, total_steps: Optional[int] = None, eval_every=UNSET,
            eval_episodes: Optional[int] = None, **extra):
    """Read checkpoint ``path`` (a ``step_*`` folder): (state, history, manifest); the state
    (leading seed axis) placed as a fresh run's (:meth:`RunProgram.place`).

    The run settings given (``seeds``, ``total_steps``, ``eval_every``, ``eval_episodes``,
    the program's own ``extra`` ones) are compared with the checkpoint's; those not given
    (None, or ``UNSET`` where None is a value) are taken from it. The program's identity is
    always compared.

    Raises:
      FileNotFoundError: no such checkpoint.
      tdmpc2core.io.checkpoint.CorruptCheckpointError: incomplete or damaged.
      tdmpc2core.io.checkpoint.CheckpointMismatchError: made with other settings (each
        differing setting named with both values) or of another state layout.
    """
    import jax

    manifest = ck.read_manifest(path)
    stored = manifest.get("settings", {}).get("run", {})
    seeds = stored.get("seeds") if seeds is None else [int(s) for s in np.atleast_1d(np.asarray(seeds))]
    total = stored.get("total_timesteps") if total_steps is None else int(total_steps)
    eval_every = stored.get("eval_every") if eval_every is UNSET else eval_every
    extra = {k: (stored.get(k) if v is UNSET else v) for k, v in extra.items()}
    if eval_episodes is None:
        eval_episodes = stored.get("eval_episodes") or 10
    if seeds is None or total is None:
        raise ck.CorruptCheckpointError(f"checkpoint {path}: its manifest has no run settings")
    run = Run(tuple(int(s) for s in seeds), int(total), int(eval_every) if eval_every else None, int(eval_episodes),
              tuple(sorted(extra.items())))
    settings = _settings(program, run)
    diffs = ck.compare_settings(manifest.get("settings", {}), settings)
    if diffs:  # before building the template: a mismatch is reported at once
        raise ck.CheckpointMismatchError(
            f"checkpoint {path} was made with other settings than this run's (" + "; ".join(diffs) + ")")
    template = {"state": jax.eval_shape(lambda: program.init_state(list(run.seeds), run.total_steps))}
    tree, host, manifest = ck.restore(path, template, settings=settings)
    return program.place(tree["state"]), history_from_arrays(program, host), manifest


# ----------------------------------------------------------------------------- the run
def plan(program: RunProgram, n_steps: int, eval_every: Optional[int] = None, *, start_tick: int = 0,
         total_steps: Optional[int] = None, **extra):
    """The schedule of a call that runs ``n_steps`` more steps from ``start_tick`` (as
    :func:`train` makes it): (chunks, evaluate_at_start). ``total_steps``: the whole run's
    length (None: the end of this call)."""
    n = program.steps_per_tick
    end_tick = int(start_tick) + -(-int(n_steps) // n)
    total_steps = end_tick * n if total_steps is None else int(total_steps)
    run = Run((), total_steps, int(eval_every) if eval_every else None, 1, tuple(sorted(extra.items())))
    return schedule(program, int(start_tick), end_tick, -(-total_steps // n), run)


def train(program: RunProgram, seeds: Optional[Sequence[int]], n_steps: int, *, eval_every: Optional[int] = None,
          eval_episodes: int = 10, callback: Optional[Callable[[dict], None]] = None, state=None,
          history: Optional[dict] = None, total_steps: Optional[int] = None, extra: Optional[dict] = None,
          options: RunOptions = RunOptions()):
    """Run ``n_steps`` more steps (the program's unit) of every seed; the body of both agents'
    ``train``.

    A run may be done in one call, continued in several (``state``/``history`` of the
    previous call, ``total_steps`` given to each), or resumed from ``options.checkpoint_dir``
    by a new process (the call then runs to ``total_steps``, default ``n_steps``).

    Args:
      program: the agent's :class:`RunProgram`.
      seeds: the seeds (None: the state's, or [0] for a new run).
      n_steps: steps of this call, from where ``state`` is (rounded up to whole ticks).
      eval_every, eval_episodes: evaluation cadence (steps; None: none) and episodes per
        evaluation; evaluations also before the first tick of a run and at its end.
      callback: called after every chunk of the schedule with its record.
      state, history: a previous call's result to continue (the state's buffers are donated).
      total_steps: the whole run's length (None: the end of this call).
      extra: the program's own run settings (e.g. ``log_every``), part of the checkpoint
        settings.
      options: :class:`RunOptions` (checkpoints, wall-time cap, stop requests, progress,
        loggers: each gets ``log(step, {"Train/<name>": ...})`` after every chunk record and
        ``log(step, {"Eval/episodic mean reward": ...})`` after every evaluation, seed means,
        or ``log_seeds(step, {seed: ...})`` with each seed's values where it has that method,
        and ``flush()`` (where it has one) once a step's records are all given,
        :mod:`tdmpc2core.io.loggers`; ``progress_bar``: a tqdm bar on stderr).
        ``progress`` gets a dict after every call of the compiled program: ``phase``,
        ``step``, ``start``/``end`` of this call and ``total`` (steps), ``ticks``, ``steps``
        and ``seconds`` (wall) of the call, ``compile_seconds`` (its share spent compiling:
        the first call of a session compiles), ``rate`` (steps per second of the call without
        its compiling), ``unit``; the same position under
        the unit's names (e.g. ``agent_steps``, ``start_agent_steps``, ``end_agent_steps``,
        ``total_agent_steps``, ``agent_steps_per_s``); and the program's fields (the last
        evaluation's summary).
    Returns:
      (state, history) as :func:`finalize_history` describes.
    Raises:
      TrainingInterrupted: ``should_stop`` returned True (after the checkpoint).
      ValueError: seeds disagreeing with the state, a call past ``total_steps``, an
        ``eval_every`` of 0 or less (:func:`check_eval_every`), resume=False with checkpoints
        in the folder, or what the program's checks raise.
      tdmpc2core.io.checkpoint.CheckpointMismatchError / CorruptCheckpointError: the
        folder's newest checkpoint has other settings (named) / none is usable.
    """
    call = _start_call(program, seeds, n_steps, eval_every, eval_episodes, state, history, total_steps, extra,
                       options)
    call.program.start(call.state, call.run)
    _compile_ahead(call)
    call.open_bar()
    try:
        if call.eval_at_start:
            call.evaluate(0)
            call.flush_loggers()
        elif call.eval_owed:
            call.evaluate_owed(callback)
        for chunk in call.chunks:
            call.run_chunk(chunk, callback)
    finally:
        call.close_bar()
    if call.ckdir is not None and not call.chunks and call.last_saved != call.end_tick:
        call.save(call.end_tick)  # nothing to run (a finished run resumed): make sure the end is saved
    call.hist["wall_seconds"] = call.wall()
    history = finalize_history(program, call.hist, call.n_seeds, call.run.eval_episodes)
    program.finish(call.state, history, call.end_tick, call.run)
    return call.state, history


def compile_ahead_on(options: RunOptions) -> bool:
    """Whether a call compiles its programs ahead (:attr:`RunOptions.compile_ahead`; None: not
    on JAX's CPU backend)."""
    if options.compile_ahead is not None:
        return bool(options.compile_ahead)
    import jax

    return jax.default_backend() != "cpu"


def _compile_ahead(call: "_Call") -> list:
    """Start the call's compiles ahead, each in a thread of its own; returns the threads. A
    compile that fails there is logged and left to the program's first call (which compiles it
    and raises what it raises)."""
    if not compile_ahead_on(call.opts):
        return []
    evaluates = bool(call.eval_at_start or call.eval_owed or any(c.evaluate_after for c in call.chunks))
    from .compiled import start_compiles

    def failed(name, e):  # the first call compiles it again and raises
        _log.info("compiling %s ahead failed (%s: %s); it compiles at its first call", name, type(e).__name__, e)

    # traced in the order the program names them (the single-task agent: its chunk first)
    return start_compiles(call.program.compile_ahead(call.state, call.run, bool(call.chunks), evaluates), failed)


def _resume(program: RunProgram, seeds, n_steps, eval_every, eval_episodes, total_steps, extra, opts: RunOptions):
    """(state, history, n_steps, total_steps) from the newest checkpoint of
    ``opts.checkpoint_dir`` (state None when it holds none)."""
    latest = ck.latest_checkpoint(opts.checkpoint_dir)
    if latest is not None and not opts.resume:
        raise ValueError(f"{opts.checkpoint_dir} holds checkpoints of a run (newest {latest.name}); pass resume=True "
                         "to continue it, or delete them (tdmpc2core.io.checkpoint.clear)")
    if latest is None:
        return None, None, n_steps, total_steps
    total = int(total_steps if total_steps is not None else n_steps)
    state, history, _ = restore(program, latest, seeds=[0] if seeds is None else seeds, total_steps=total,
                                eval_every=eval_every, eval_episodes=eval_episodes, **extra)
    n = program.steps_per_tick
    _log.info("resumed from %s at %d %s", latest, program.state_tick(state) * n, program.unit)
    return state, history, max(total - program.state_tick(state) * n, 0), total


def _start_call(program: RunProgram, seeds, n_steps, eval_every, eval_episodes, state, history, total_steps,
                extra, opts: RunOptions) -> "_Call":
    """The state, run settings and schedule of one :func:`train` call (resumed, fresh or
    continued), as a :class:`_Call`."""
    n = program.steps_per_tick
    eval_every = check_eval_every(eval_every, program.unit)
    extra = dict(extra or {})
    seeds = None if seeds is None else [int(s) for s in np.atleast_1d(np.asarray(seeds))]
    if opts.checkpoint_dir is not None and state is None:
        state, history, n_steps, total_steps = _resume(program, seeds, n_steps, eval_every, eval_episodes,
                                                       total_steps, extra, opts)
    total_given = total_steps is not None
    fresh = state is None
    if fresh:
        seeds = [0] if seeds is None else seeds
        total_steps = int(n_steps if total_steps is None else total_steps)
        state = program.init_state(seeds, total_steps)
        start_tick = 0
    else:
        start_tick = program.state_tick(state)
        held = program.state_seeds(state)
        if held is not None:
            if seeds is not None and seeds != held:
                raise ValueError(f"seed={seeds!r} disagrees with the state's seeds {held}")
            seeds = held
        if total_steps is None:
            total_steps = start_tick * n + int(n_steps)
    run = Run(tuple(seeds), int(total_steps), eval_every, int(eval_episodes), tuple(sorted(extra.items())))
    if not fresh:
        program.check_state(state, run, total_given)
    end_tick = start_tick + -(-int(n_steps) // n)
    total_ticks = -(-int(total_steps) // n)
    chunks, eval_at_start = schedule(program, start_tick, end_tick, total_ticks, run)
    hist = working_history(program, history)
    call = _Call(program, opts, run, state, hist, start_tick, end_tick, total_ticks, chunks, eval_at_start)
    call.eval_owed = not fresh and owed_evaluation(program, hist, start_tick, total_ticks, run)
    return call


def evaluation_due(program: RunProgram, tick: int, total_ticks: int, run: Run) -> bool:
    """Whether an evaluation follows the chunk that ends at ``tick``: at every multiple of the
    evaluation period and at the end of the run (``total_ticks``); never without a period."""
    period = program.eval_period(run.eval_every)
    return bool(period) and (tick % period == 0 or tick == total_ticks)


def owed_evaluation(program: RunProgram, hist: dict, tick: int, total_ticks: int, run: Run) -> bool:
    """Whether a run resumed at ``tick`` owes the evaluation of that tick: one is due there
    (:func:`evaluation_due`) and the history's last chunk record ends at ``tick`` without it (a
    stop request acted on before the evaluation, :meth:`_Call.run_chunk`)."""
    if tick == 0 or not hist["chunks"] or not evaluation_due(program, tick, total_ticks, run):
        return False
    last = hist["chunks"][-1]
    return last.get(program.unit_key) == tick * program.steps_per_tick and "eval_position" not in last


def check_eval_every(eval_every, unit: str = "steps") -> Optional[int]:
    """``eval_every`` as an int >= 1, or None (no evaluation).

    Raises:
      ValueError: 0, a negative number or not a whole number (one line: the value and what is
        accepted; 0 used to turn the evaluations off without a word).
    """
    if eval_every is None:
        return None
    if isinstance(eval_every, bool) or not isinstance(eval_every, numbers.Integral) and not (
            isinstance(eval_every, float) and float(eval_every).is_integer()) or int(eval_every) < 1:
        raise ValueError(f"eval_every={eval_every!r} is not accepted; accepted: a whole number >= 1 of {unit} "
                         "between evaluations, or None for no evaluation")
    return int(eval_every)


def _per_seed(values: dict, seeds: Sequence[int]) -> dict:
    """seed -> {name: that seed's number} of ``values`` (a value with a leading seed axis is
    split, a scalar is shared, anything else is its NaN-aware mean; non-numbers left out)."""
    out = {int(s): {} for s in seeds}
    for k, v in values.items():
        try:
            a = np.asarray(v, np.float64)
        except (TypeError, ValueError):
            continue
        for i, s in enumerate(seeds):
            x = _mean(a[i]) if a.ndim >= 1 and a.shape[0] == len(seeds) else _mean(a)
            if x is not None:
                out[int(s)][k] = x
    return out


def _mean(value) -> Optional[float]:
    """A logged number: a scalar, or the NaN-aware mean of per-seed values (None: not a number)."""
    try:
        a = np.asarray(value, np.float64)
    except (TypeError, ValueError):
        return None
    if a.size == 0:
        return None
    if a.ndim == 0 or not np.any(np.isfinite(a)):
        return float(a.reshape(-1)[0]) if a.size == 1 else float("nan")
    return float(np.nanmean(a))


class _Call:
    """One :func:`train` call in progress: the state, the history, the checkpoint bookkeeping
    (the tick of the last checkpoint written and its info), the wall clock and the loggers."""

    def __init__(self, program, opts, run, state, hist, start_tick, end_tick, total_ticks, chunks, eval_at_start):
        self.program, self.opts, self.run, self.state, self.hist = program, opts, run, state, hist
        self.start_tick, self.end_tick, self.total_ticks = start_tick, end_tick, total_ticks
        self.chunks, self.eval_at_start = chunks, eval_at_start
        self.eval_owed = False  # set by _start_call: a resumed run's evaluation of its first tick
        self.n, self.n_seeds, self.ckdir = program.steps_per_tick, len(run.seeds), opts.checkpoint_dir
        self.every = int(opts.checkpoint_every) if opts.checkpoint_every is not None else None
        self.sizer = SubChunkSizer(opts.max_chunk_seconds)
        self.last_saved, self.saved = start_tick, None
        self.loggers = list(opts.loggers)
        self.wall_before, self.t_start = hist["wall_seconds"], time.perf_counter()
        self.bar = None

    def open_bar(self) -> None:
        """The progress bar of this call (:attr:`RunOptions.progress_bar`; None: when stderr is a terminal)."""
        show = self.opts.progress_bar
        if show is None:
            show = bool(getattr(sys.stderr, "isatty", lambda: False)())
        if show and self.end_tick > self.start_tick:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=(self.end_tick - self.start_tick) * self.n, unit=" " + self.program.unit,
                            unit_scale=False, dynamic_ncols=True, file=sys.stderr, desc="train")

    def close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def wall(self) -> float:
        return self.wall_before + time.perf_counter() - self.t_start

    def log(self, tick: int, values: dict) -> None:
        """Give ``values`` (name -> a number or per-seed values) to every logger: their seed
        means through ``log``, each seed's own through ``log_seeds`` where a logger has it; a
        logger that raises is warned about once and dropped."""
        means = {k: m for k, m in ((k, _mean(v)) for k, v in values.items()) if m is not None}
        by_seed = None
        for lg in list(self.loggers):
            try:
                if callable(getattr(lg, "log_seeds", None)):
                    by_seed = _per_seed(values, self.run.seeds) if by_seed is None else by_seed
                    lg.log_seeds(tick * self.n, by_seed)
                else:
                    lg.log(tick * self.n, means)
            except Exception as e:  # a logger never stops training
                self.loggers.remove(lg)
                msg = " ".join(f"{type(e).__name__}: {e}".split())
                warnings.warn(f"logger {type(lg).__name__} raised {msg}; it is dropped, training goes on",
                              RuntimeWarning, stacklevel=2)

    def flush_loggers(self) -> None:
        """Every record of a step has been given: ``flush()`` the loggers that have it (W&B
        commits the step's row); one that raises is warned about once and dropped."""
        for lg in list(self.loggers):
            flush = getattr(lg, "flush", None)
            if not callable(flush):
                continue
            try:
                flush()
            except Exception as e:  # a logger never stops training
                self.loggers.remove(lg)
                msg = " ".join(f"{type(e).__name__}: {e}".split())
                warnings.warn(f"logger {type(lg).__name__} raised {msg}; it is dropped, training goes on",
                              RuntimeWarning, stacklevel=2)

    def evaluate(self, tick: int) -> dict:
        ev = self.program.evaluate(self.state, tick, self.run)
        self.hist["evals"].append(ev)
        if self.opts.on_evaluation is not None:
            self.opts.on_evaluation(self.state, tick, ev)
        if self.loggers:
            self.log(tick, {f"Eval/{k}": v for k, v in self.program.eval_log(ev).items()})
        if self.bar is not None:
            self.bar.set_postfix_str(", ".join(f"{k} {_mean(v):.4g}" for k, v in self.program.eval_log(ev).items()
                                               if k == "episodic mean reward"))
        return ev

    def save(self, tick: int):
        self.hist["wall_seconds"] = self.wall()
        self.saved = save_checkpoint(self.program, self.ckdir, self.state, self.hist, self.run,
                                     keep=self.opts.keep_checkpoints)
        self.last_saved = tick
        return self.saved

    def checkpoint_due(self, tick: int) -> bool:
        return (self.ckdir is not None and self.every is not None
                and (tick * self.n) // self.every > (self.last_saved * self.n) // self.every)

    def stop_asked(self) -> bool:
        """Whether a stop was asked (``should_stop``) in any process: one process asked (a
        signal to one task of a job) stops every process, at the same boundary, together."""
        return devices.any_process(self.opts.should_stop is not None and self.opts.should_stop())

    def stop_if_asked(self, tick: int) -> None:
        if self.stop_asked():
            self.stop(tick)

    def stop(self, tick: int) -> None:
        """Checkpoint at ``tick`` (if the run has a folder) and raise :class:`TrainingInterrupted`."""
        info = None
        if self.ckdir is not None:
            info = self.saved if self.last_saved == tick and self.saved is not None else self.save(tick)
        self.hist["wall_seconds"] = self.wall()
        raise TrainingInterrupted(self.state, finalize_history(self.program, self.hist, self.n_seeds,
                                                               self.run.eval_episodes),
                                  tick * self.n, info, unit=self.program.unit)

    def evaluate_owed(self, callback) -> None:
        """The evaluation a stopped run owes at its resume tick (:func:`owed_evaluation`): run
        it, attach it to the chunk record it follows (as an uninterrupted run would have), give
        that record to the loggers' flush and ``callback``, and rewrite the checkpoint of this
        tick with it."""
        tick = self.start_tick
        rec = self.hist["chunks"][-1]
        ev = self.evaluate(tick)
        rec["eval_position"] = len(self.hist["evals"]) - 1
        self.program.attach_eval(rec, ev)
        if self.loggers:
            self.flush_loggers()
        if callback is not None:
            callback(rec)
        if self.ckdir is not None:
            self.save(tick)

    def progress(self, chunk: Chunk, tick: int, k: int, dt: float, compiled: float = 0.0) -> None:
        n, u = self.n, self.program.unit_key
        rate = k * n / max(dt - compiled, 1e-9)  # the compiling a call did is not its speed
        p = {"phase": chunk.phase, "step": tick * n, "start": self.start_tick * n, "end": self.end_tick * n,
             "total": self.total_ticks * n, "ticks": k, "steps": k * n, "seconds": dt,
             "compile_seconds": compiled, "rate": rate,
             "unit": self.program.unit, u: tick * n, f"start_{u}": self.start_tick * n, f"end_{u}": self.end_tick * n,
             f"total_{u}": self.total_ticks * n, f"{u}_per_s": rate}
        p.update(self.program.progress_fields(self.hist))
        self.opts.progress(p)

    def advance(self, chunk: Chunk) -> float:
        """The chunk's ticks as wall-time-capped calls (checkpoints and stop requests between
        them); returns the seconds spent in the calls."""
        b, n, seconds, tick = chunk.start + chunk.ticks, self.n, 0.0, chunk.start
        while tick < b:
            stop_at = b
            if self.ckdir is not None and self.every is not None:  # the next checkpoint's tick
                stop_at = min(b, -(-((tick * n) // self.every + 1) * self.every // n))
            # every process of a multi-process job calls the program with process 0's count
            k = devices.agree(self.sizer.ticks(chunk.phase, stop_at - tick))
            c0 = self.program.blocked_seconds()
            t0 = time.perf_counter()
            self.state = self.program.advance(self.state, tick, k)
            dt = time.perf_counter() - t0
            compiled = min(max(self.program.blocked_seconds() - c0, 0.0), dt)
            self.sizer.record(chunk.phase, k, dt)
            seconds += dt
            tick += k
            if self.bar is not None:
                self.bar.update(k * n)
            self.program.after_call(self.state, tick * n)
            if self.opts.progress is not None:
                self.progress(chunk, tick, k, dt, compiled)
            if tick < b:  # a boundary inside a chunk of the schedule
                if self.checkpoint_due(tick):
                    self.save(tick)
                self.stop_if_asked(tick)
        return seconds

    def run_chunk(self, chunk: Chunk, callback) -> None:
        """One chunk of the schedule: its calls, its record (loggers), its evaluation, the
        callback, the checkpoint and the stop request at its end."""
        program, n, u = self.program, self.n, self.program.unit_key
        b = chunk.start + chunk.ticks
        seconds = self.advance(chunk)
        rec = {"phase": chunk.phase, u: b * n}
        self.state = program.chunk_record(self.state, rec, chunk, self.run)
        rec.update(chunk_seconds=seconds, wall_time_s=self.wall())
        rec[f"{u}_per_s"] = chunk.ticks * n / max(seconds, 1e-9)
        if self.loggers:
            self.log(b, {f"Train/{k}": v for k, v in rec.items() if k not in ("phase", u)})
        if chunk.evaluate_after and self.stop_asked():
            # an evaluation (its compiling included) can outlast the grace that comes with a
            # stop request (a job's SIGTERM before its time limit): stop before it, with the
            # chunk's record but not its evaluation; the resumed run evaluates first (owed_evaluation)
            self.hist["chunks"].append(rec)
            if self.loggers:
                self.flush_loggers()
            self.stop(b)
        if chunk.evaluate_after:
            ev = self.evaluate(b)
            rec["eval_position"] = len(self.hist["evals"]) - 1
            program.attach_eval(rec, ev)
        if self.loggers:  # the step's records are all given
            self.flush_loggers()
        self.hist["chunks"].append(rec)
        if callback is not None:
            callback(rec)
        if self.ckdir is not None and (b == self.end_tick or self.checkpoint_due(b)):
            self.save(b)
        if b < self.end_tick:
            self.stop_if_asked(b)
