"""Jitted programs compiled ahead of time, with their compile time measured.

A run uses a few compiled programs (the training chunk, the evaluation, the initial state).
Their first call used to hide the compilation inside the first chunk's wall time, so a log
could only give an upper bound. :class:`Compiled` wraps a ``jax.jit`` function: on the first
call with a new input signature (the shapes, dtypes and tree structure of its arguments) it
traces and lowers the program (``jit(...).lower``) and compiles it (``.compile()``) as two
timed steps, keeps the executable, and calls it; later calls with the same signature call the
executable directly. The numbers are the ones ``jit`` would compute (the same lowering and
the same XLA compilation; the persistent compilation cache applies as usual).

Timings go into a dict the caller owns, ``{program name: {"trace_lower_s", "compile_s",
"calls_compiled", "jax_events", "executable_bytes"}}``, summed over signatures (an agent keeps one per process:
``agent.compile_seconds``). ``jax_events``: what JAX reported through :mod:`jax.monitoring`
while the program was traced, lowered and compiled, summed per event (durations in seconds,
counts as numbers; the leading ``/jax/`` dropped): e.g. ``compilation_cache/cache_hits`` and
``compilation_cache/cache_retrieval_time_sec`` (the persistent cache's executable read and
loaded), ``core/compile/backend_compile_duration`` (XLA compiling), so a slow warm start says
which step was slow. Nested events overlap (a function jitted inside the program is traced
inside its trace and counted in both), and events another thread raises meanwhile are counted too.
``executable_bytes``: XLA's sizes of the compiled program (:func:`executable_bytes`: its machine
code, arguments, outputs, temporaries), absent where the backend reports none.

:func:`per_seed` is the one place the agents compile their programs: the training chunks,
the evaluations, the initial states (``jax.jit(jax.vmap(fn))`` over the seed axis, or
``jax.jit(fn)`` for a program that batches inside), on the devices it is given
(:mod:`tdmpc2core.run.devices`: one, or the seeds split over a mesh).
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Optional, Sequence

import jax

from . import program_cache
from .program_cache import abstract  # noqa: F401  (re-exported: compile_ahead's argument specs)


def _signature(args) -> tuple:
    leaves, tree = jax.tree_util.tree_flatten(args)
    sig = []
    for x in leaves:
        aval = jax.typeof(x) if hasattr(jax, "typeof") else jax.core.get_aval(x)
        sig.append((getattr(aval, "shape", ()), str(getattr(aval, "dtype", type(x))),
                    bool(getattr(aval, "weak_type", False))))
    return tree, tuple(sig)


def blocked_seconds(timings: dict) -> float:
    """The seconds the callers' threads spent on compiling, all programs of a timings dict
    together: compiling a program at its first call, or waiting there for its compile ahead
    (:meth:`Compiled.compile_ahead`) to end. Without compiling ahead, the compiling seconds
    (:func:`compiling_seconds`) measured around the same calls."""
    return float(sum(float(t.get("blocked_s", 0.0)) for t in timings.values()))


#: how long :func:`start_compiles` waits for one compile's thread to begin tracing before it
#: starts the next anyway (seconds; normally it waits milliseconds)
TRACE_ORDER_WAIT_S = 30.0


def start_compiles(jobs: Sequence[tuple], on_error: Callable[[str, Exception], None]) -> list:
    """Start each ``(name, compile_fn)`` of ``jobs`` in a thread of its own (named
    ``compile-ahead-<name>``) and return the threads. Each thread is started once the one
    before it has taken :data:`tdmpc2core.run.program_cache.TRACING` (or ended, or
    :data:`TRACE_ORDER_WAIT_S` passed), so the programs are traced in the order of ``jobs``
    and each one's XLA compile overlaps the next one's tracing: list the longest compile first.
    Without this, which thread traced first was a race; on a TPU v5e host the evaluation won it
    and the training chunk, the longer XLA compile, waited for the evaluation's tracing
    (benchmarks/README.md, "Compiling ahead"). A ``compile_fn`` that raises is given to
    ``on_error(name, exception)`` in its thread."""
    threads = []
    for name, compile_fn in jobs:
        def work(name=name, compile_fn=compile_fn):
            try:
                compile_fn()
            except Exception as e:  # noqa: BLE001 - the caller's on_error decides
                on_error(name, e)

        t = threading.Thread(target=work, name=f"compile-ahead-{name}")
        t.start()
        threads.append(t)
        program_cache.TRACING.wait_taken_by(t, TRACE_ORDER_WAIT_S)
    return threads


def compiling_seconds(timings: dict) -> float:
    """The seconds spent tracing, lowering and compiling in a timings dict (``{program:
    {"trace_lower_s", "compile_s", ...}}``, :class:`Compiled`), all programs together."""
    return float(sum(float(t.get("trace_lower_s", 0.0)) + float(t.get("compile_s", 0.0)) for t in timings.values()))


@contextlib.contextmanager
def jax_events(into: dict):
    """Sum the events :mod:`jax.monitoring` reports inside the block into ``into`` (``{name:
    seconds or count}``, the ``/jax/`` prefix dropped), those of this thread only (JAX reports
    an event in the thread that caused it; another program may be compiled ahead beside it,
    :meth:`Compiled.compile_ahead`)."""
    from jax import monitoring

    me = threading.get_ident()

    def name(event: str) -> str:
        return event[5:] if event.startswith("/jax/") else event

    def duration(event, seconds, **_):
        if threading.get_ident() == me:
            into[name(event)] = round(into.get(name(event), 0.0) + float(seconds), 6)

    def count(event, **_):
        if threading.get_ident() == me:
            into[name(event)] = into.get(name(event), 0) + 1

    monitoring.register_event_duration_secs_listener(duration)
    monitoring.register_event_listener(count)
    try:
        yield into
    finally:
        for unregister, listener in ((monitoring.unregister_event_duration_listener, duration),
                                     (monitoring.unregister_event_listener, count)):
            try:
                unregister(listener)
            except (AssertionError, ValueError):  # already gone (code in the block cleared JAX's listeners)
                pass


#: :func:`executable_bytes`'s fields, from XLA's memory analysis of a compiled program
_MEMORY_FIELDS = {"code": "generated_code_size_in_bytes", "arguments": "argument_size_in_bytes",
                  "outputs": "output_size_in_bytes", "temporaries": "temp_size_in_bytes"}


def executable_bytes(executable) -> dict:
    """The sizes XLA reports for a compiled program (``jax.stages.Compiled``), in bytes:
    ``code`` (the generated machine code: what a persistent cache's load has to read and
    load), ``arguments``, ``outputs``, ``temporaries`` (device memory). {} where the backend
    gives no memory analysis."""
    try:
        stats = executable.memory_analysis()
    except Exception:  # noqa: BLE001 - a backend or runtime without one
        return {}
    stats = stats[0] if isinstance(stats, (list, tuple)) and stats else stats
    out = {}
    for field, attr in _MEMORY_FIELDS.items():
        value = getattr(stats, attr, None)
        if isinstance(value, (int, float)) and value >= 0:
            out[field] = int(value)
    return out


class Compiled:
    """``jitted`` (a ``jax.jit`` function of positional arguments) compiled ahead of time per
    input signature, its trace+lower and compile seconds added to ``timings[name]``.

    ``static_argnums``: the positions ``jitted`` was made static on (hashable Python values,
    part of the signature; the executable is called without them)."""

    #: the ``("seeds",)`` mesh the program was built for (:class:`ShardedSeeds`), None: one device
    mesh = None

    def __init__(self, jitted: Callable, name: str, timings: dict, static_argnums: Sequence[int] = (),
                 fingerprint: Optional[dict] = None, donate_argnums: Sequence[int] = ()):
        self.jitted, self.name, self.timings = jitted, str(name), timings
        self.static_argnums = tuple(int(i) for i in static_argnums)
        #: what the traced function closes over (JSON), given by its agent when the program may be
        #: kept across processes (:mod:`tdmpc2core.run.program_cache`); None: traced in each process
        self.fingerprint = fingerprint
        self.donate_argnums = tuple(int(i) for i in donate_argnums)
        self._executables: dict = {}
        self._lock = threading.Lock()  # one compile of this program at a time (its compile ahead, its call)

    def _key(self, args) -> tuple:
        static = tuple(args[i] for i in self.static_argnums)
        dynamic = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
        return (_signature(dynamic), static), dynamic

    def __call__(self, *args):
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(args)):
            return self.jitted(*args)  # inside another trace (eval_shape, an outer jit): no executable
        key, dynamic = self._key(args)
        exe = self._executables.get(key)
        if exe is None:
            t0 = time.perf_counter()
            with self._lock:  # a compile ahead of this program in another thread: wait for it
                exe = self._executables.get(key)
                if exe is None:
                    exe = self._compile(args, key, ahead=False)
            rec = self.timings[self.name]
            rec["blocked_s"] = rec.get("blocked_s", 0.0) + time.perf_counter() - t0
        return exe(*dynamic)

    def compile_ahead(self, *args) -> bool:
        """Compile the program for arguments like ``args`` (arrays or, to let the caller's
        thread go on with the arrays, their :func:`tdmpc2core.run.program_cache.abstract` specs) before its first call,
        e.g. in another thread while the caller compiles or runs something else; the call then
        finds it compiled (or waits for this compile to end). The same program: its seconds go
        into ``timings[name]`` as a call's would, with ``ahead``: True. Returns False when it
        was compiled already."""
        key, _ = self._key(args)
        with self._lock:
            if key in self._executables:
                return False
            self._compile(args, key, ahead=True)
        return True

    def _compile(self, args, key, ahead: bool):
        """Compile for ``args`` (the lock held): from the program cache or traced, lowered and
        compiled; recorded in ``timings[name]``; the executable stored under ``key``."""
        rec = self.timings.setdefault(self.name, {"trace_lower_s": 0.0, "compile_s": 0.0, "calls_compiled": 0})
        rec.setdefault("blocked_s", 0.0)  # the calls' waiting: 0 for one compiled ahead that was done in time
        with jax_events(rec.setdefault("jax_events", {})):
            exe, trace_lower_s, compile_s = self._stored(args)
            if exe is None:
                t0 = time.perf_counter()
                with program_cache.TRACING:  # one program traced at a time; XLA's compiles overlap
                    lowered = self.jitted.lower(*args)
                t1 = time.perf_counter()
                exe = lowered.compile()
                trace_lower_s, compile_s = trace_lower_s + t1 - t0, compile_s + time.perf_counter() - t1
            else:
                rec["program_cache"] = exe.source
                parts = rec.setdefault("program_cache_s", {})  # where its seconds went, by step
                for part, seconds in exe.seconds.items():
                    parts[part] = round(parts.get(part, 0.0) + seconds, 6)
        self._executables[key] = exe
        for field, size in executable_bytes(getattr(exe, "executable", exe)).items():
            sizes = rec.setdefault("executable_bytes", {})  # absent where the backend gives none
            sizes[field] = sizes.get(field, 0) + size
        rec["trace_lower_s"] += trace_lower_s
        rec["compile_s"] += compile_s
        rec["calls_compiled"] += 1
        if ahead:
            rec["ahead"] = True
        return exe

    def _stored(self, args) -> tuple:
        """(program, trace_lower_s, compile_s) from the program cache (:mod:`.program_cache`)
        when it is on and this program may use it (a fingerprint, one device, no static
        arguments); (None, seconds spent, 0.0) otherwise."""
        if self.fingerprint is None or self.static_argnums or self.mesh is not None:
            return None, 0.0, 0.0
        folder = program_cache.cache_dir()
        if folder is None:
            return None, 0.0, 0.0
        return program_cache.load_or_store(folder, self.name, self.fingerprint, self.jitted, args,
                                           self.donate_argnums)

    def lower(self, *args):
        """The jitted function's lowering (for inspection, e.g. the HLO or its cost analysis)."""
        return self.jitted.lower(*args)


class ShardedSeeds:
    """A per-seed program whose seed axis is split over devices when the run's
    :class:`~tdmpc2core.run.devices.SeedSharding` gives a mesh for its seed count.

    ``body``: the program of all seeds (``vmap(fn)``, or a program that maps the seeds
    inside). On each call the seed count S is read from the first argument mapped on axis 0;
    the mesh of S seeds (None: one device) picks the program: ``jax.jit(body)`` as without
    sharding, or ``jax.jit(shard_map(body))`` over the ``("seeds",)`` mesh, the mapped
    arguments split on their first axis and the others replicated, placed there before the
    call. Each device runs the same program on its seeds, without communication."""

    def __init__(self, body: Callable, in_axes, name: str, timings: dict, donate_argnums, placement,
                 fingerprint: Optional[dict] = None):
        self.body, self.in_axes, self.name, self.timings = body, in_axes, str(name), timings
        self.donate_argnums, self.placement = tuple(donate_argnums), placement
        self.fingerprint = fingerprint  # used by the one-device program only (Compiled._stored)
        self._programs: dict = {}

    def _axes(self, n_args: int) -> tuple:
        return tuple(self.in_axes) if isinstance(self.in_axes, (tuple, list)) else (self.in_axes,) * n_args

    def program(self, *args) -> Compiled:
        """The :class:`Compiled` program for ``args`` (its mesh chosen from their seed count)."""
        axes = self._axes(len(args))
        first = next(a for a, ax in zip(args, axes) if ax == 0)
        n_seeds = int(jax.tree_util.tree_leaves(first)[0].shape[0])
        mesh = self.placement.mesh_for(n_seeds)
        key = None if mesh is None else tuple(d.id for d in mesh.devices.reshape(-1))
        prog = self._programs.get(key)
        if prog is None:
            kw = {"donate_argnums": self.donate_argnums} if self.donate_argnums else {}
            if mesh is None:
                fn = self.body
            else:
                from jax.sharding import PartitionSpec as P

                from .devices import SEED_AXIS

                specs = tuple(P(SEED_AXIS) if ax == 0 else P() for ax in axes)
                fn = jax.shard_map(self.body, mesh=mesh, in_specs=specs, out_specs=P(SEED_AXIS), check_vma=False)
            prog = self._programs[key] = Compiled(jax.jit(fn, **kw), self.name, self.timings,
                                                  fingerprint=self.fingerprint, donate_argnums=self.donate_argnums)
            prog.mesh = mesh
        return prog

    def __call__(self, *args):
        prog = self.program(*args)
        if prog.mesh is not None and not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(args)):
            from jax.sharding import NamedSharding, PartitionSpec as P

            from .devices import SEED_AXIS

            split, whole = NamedSharding(prog.mesh, P(SEED_AXIS)), NamedSharding(prog.mesh, P())
            args = tuple(jax.device_put(a, split if ax == 0 else whole) for a, ax in zip(args, self._axes(len(args))))
        return prog(*args)

    def compile_ahead(self, *args) -> bool:
        """:meth:`Compiled.compile_ahead` of the program for ``args`` when it runs on one device
        (no mesh for their seed count); False otherwise (a seed-split program's arguments are
        placed on its mesh at the call: compiled then)."""
        prog = self.program(*args)
        return False if prog.mesh is not None else prog.compile_ahead(*args)

    def lower(self, *args):
        return self.program(*args).lower(*args)


def per_seed(fn: Callable, *, name: str, compile_seconds: Optional[dict] = None, in_axes=0,
             donate_argnums: Sequence[int] = (), static_argnums: Sequence[int] = (), batched: bool = True,
             devices=None, fingerprint: Optional[dict] = None):
    """The one place the agents compile a program: ``jax.jit(jax.vmap(fn, in_axes))`` (one seed
    per entry of the mapped axis; ``batched=False``: ``jax.jit(fn)``, for a program that maps
    inside) as a :class:`Compiled`, its compile seconds in ``compile_seconds[name]``, or with a
    :class:`~tdmpc2core.run.devices.SeedSharding` a :class:`ShardedSeeds`.

    Args:
      fn: the program of one seed (or the whole program with ``batched=False``).
      name: the program's name in ``compile_seconds`` (``"init"``, ``"chunk"``, ``"eval"``...).
      compile_seconds: the caller's timings dict (None: a private one, not reported).
      in_axes: ``jax.vmap``'s ``in_axes`` (0: every argument has the seed axis first; each
        entry 0 or None with a :class:`~tdmpc2core.run.devices.SeedSharding`, which splits
        the arguments mapped on axis 0 over its mesh; with ``batched=False``, used only for
        that: which arguments carry the seed axis).
      donate_argnums, static_argnums: as ``jax.jit`` (static arguments only with
        ``batched=False``).
      fingerprint: what ``fn`` closes over, as JSON (the agent's resolved configuration, its env
        and the program's own settings): the program may then be kept across processes when
        :data:`tdmpc2core.run.program_cache.PROGRAM_CACHE_ENV` names a folder (one device
        only). None (default): traced in every process. Give one only when it determines the
        traced program completely (no user code).
      devices: where the program runs (:mod:`tdmpc2core.run.devices`): None (JAX's default
        device; a multi-task :class:`~tdmpc2core.run.devices.DataParallel` program follows its
        arguments' placement, which the agent makes), or a
        :class:`~tdmpc2core.run.devices.SeedSharding`: a :class:`ShardedSeeds` that splits
        the seeds over the devices its mesh gives (a ``batched=False`` program must then run
        on any number of seeds: each device gets its share).
    Returns:
      a :class:`Compiled` (or :class:`ShardedSeeds`) that compiles per input signature; the
      same program and numbers as calling the ``jax.jit`` function.
    Raises:
      ValueError: ``static_argnums`` with ``batched=True`` or a SeedSharding.
      TypeError: ``devices`` that is not None or a placement of :mod:`tdmpc2core.run.devices`.
    """
    from .devices import DataParallel, SeedSharding

    if devices is not None and not isinstance(devices, (SeedSharding, DataParallel)):
        raise TypeError(f"per_seed({name!r}): devices must be None, a SeedSharding or a DataParallel placement "
                        f"(tdmpc2core.run.devices), got {type(devices).__name__}")
    if static_argnums and batched:
        raise ValueError(f"per_seed({name!r}): static_argnums need batched=False (vmap maps every argument)")
    body = jax.vmap(fn, in_axes=in_axes) if batched else fn
    timings = {} if compile_seconds is None else compile_seconds
    if isinstance(devices, SeedSharding):
        if static_argnums:
            raise ValueError(f"per_seed({name!r}): static_argnums are not supported with a SeedSharding")
        axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,)
        if any(ax not in (0, None) for ax in axes):
            raise ValueError(f"per_seed({name!r}): a seed-sharded program maps arguments on axis 0 or not at all, "
                             f"got in_axes={in_axes!r}")
        return ShardedSeeds(body, in_axes, name, timings, donate_argnums, devices, fingerprint)
    kw = {}
    if donate_argnums:
        kw["donate_argnums"] = tuple(donate_argnums)
    if static_argnums:
        kw["static_argnums"] = tuple(static_argnums)
    return Compiled(jax.jit(body, **kw), name, timings, static_argnums=static_argnums, fingerprint=fingerprint,
                    donate_argnums=donate_argnums)


def per_program(timings: dict) -> dict:
    """``{program: trace + lower + compile seconds}`` of ``timings``."""
    return {k: float(r["trace_lower_s"] + r["compile_s"]) for k, r in timings.items()}


def compiling_note(timings: dict) -> str:
    """The log's words for ``timings``' programs: ``"compiling: chunk 90 s, eval 40 s"`` (and the
    programs loaded from the program cache, :mod:`tdmpc2core.run.program_cache`, named), or
    ``"nothing compiled"`` when this process compiled none (a run resumed at its end that only
    writes its outputs). Programs compiled ahead (:meth:`Compiled.compile_ahead`) are named,
    with the seconds the run waited on compiling (:func:`blocked_seconds`): ``"compiling: chunk
    90 s, eval 40 s; compiled ahead: chunk, eval, the run waiting 95 s of it"``."""
    parts = per_program(timings)
    if not parts:
        return "nothing compiled"
    loaded = [k for k, r in timings.items() if r.get("program_cache") == "loaded"]
    ahead = [k for k, r in timings.items() if r.get("ahead")]
    return ("compiling: " + ", ".join(f"{k} {v:.0f} s" for k, v in parts.items())
            + (f"; not traced, from the program cache: {', '.join(loaded)}" if loaded else "")
            + (f"; compiled ahead: {', '.join(ahead)}, the run waiting {blocked_seconds(timings):.0f} s of it"
               if ahead else ""))


def total_seconds(timings: dict) -> float:
    """Trace, lower and compile seconds of every program in ``timings``."""
    return float(sum(r["trace_lower_s"] + r["compile_s"] for r in timings.values()))


__all__ = ["Compiled", "ShardedSeeds", "per_seed", "per_program", "compiling_note", "total_seconds"]
