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
"calls_compiled"}}``, summed over signatures (an agent keeps one per process:
``agent.compile_seconds``).

:func:`per_seed` is the one place the agents compile their programs: the training chunks,
the evaluations, the initial states (``jax.jit(jax.vmap(fn))`` over the seed axis, or
``jax.jit(fn)`` for a program that batches inside), on the devices it is given (today: one).
"""
from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

import jax

#: the message for more than one device (the next issue's multi-device runs)
MULTI_DEVICE_MESSAGE = "multi-device runs are not supported yet (issue 28)"


def _signature(args) -> tuple:
    leaves, tree = jax.tree_util.tree_flatten(args)
    sig = []
    for x in leaves:
        aval = jax.typeof(x) if hasattr(jax, "typeof") else jax.core.get_aval(x)
        sig.append((getattr(aval, "shape", ()), str(getattr(aval, "dtype", type(x))),
                    bool(getattr(aval, "weak_type", False))))
    return tree, tuple(sig)


class Compiled:
    """``jitted`` (a ``jax.jit`` function of positional arguments) compiled ahead of time per
    input signature, its trace+lower and compile seconds added to ``timings[name]``.

    ``static_argnums``: the positions ``jitted`` was made static on (hashable Python values,
    part of the signature; the executable is called without them)."""

    def __init__(self, jitted: Callable, name: str, timings: dict, static_argnums: Sequence[int] = ()):
        self.jitted, self.name, self.timings = jitted, str(name), timings
        self.static_argnums = tuple(int(i) for i in static_argnums)
        self._executables: dict = {}

    def __call__(self, *args):
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(args)):
            return self.jitted(*args)  # inside another trace (eval_shape, an outer jit): no executable
        static = tuple(args[i] for i in self.static_argnums)
        dynamic = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
        key = (_signature(dynamic), static)
        exe = self._executables.get(key)
        if exe is None:
            t0 = time.perf_counter()
            lowered = self.jitted.lower(*args)
            t1 = time.perf_counter()
            exe = self._executables[key] = lowered.compile()
            t2 = time.perf_counter()
            rec = self.timings.setdefault(self.name, {"trace_lower_s": 0.0, "compile_s": 0.0, "calls_compiled": 0})
            rec["trace_lower_s"] += t1 - t0
            rec["compile_s"] += t2 - t1
            rec["calls_compiled"] += 1
        return exe(*dynamic)

    def lower(self, *args):
        """The jitted function's lowering (for inspection, e.g. the HLO or its cost analysis)."""
        return self.jitted.lower(*args)


def check_devices(devices) -> None:
    """Accept what :func:`per_seed` can place programs on today: None (JAX's default device)
    or a sequence of exactly one ``jax.Device``.

    Raises:
      ValueError: more than one device, a ``jax.sharding.Mesh`` of more than one device
        (:data:`MULTI_DEVICE_MESSAGE`), or an empty sequence.
      TypeError: something that is neither a device sequence nor a mesh.
    """
    if devices is None:
        return
    if isinstance(devices, jax.sharding.Mesh):
        n = int(devices.devices.size)
    elif isinstance(devices, (list, tuple)):
        bad = [d for d in devices if not isinstance(d, jax.Device)]
        if bad:
            raise TypeError(f"devices: expected jax.Device entries, got {type(bad[0]).__name__}")
        n = len(devices)
    else:
        raise TypeError(f"devices: expected None, a list of one jax.Device or a jax.sharding.Mesh, got "
                        f"{type(devices).__name__}")
    if n == 0:
        raise ValueError("devices: an empty list; pass None (the default device) or one device")
    if n > 1:
        raise ValueError(f"devices: {n} devices given; {MULTI_DEVICE_MESSAGE}")


def per_seed(fn: Callable, *, name: str, compile_seconds: Optional[dict] = None, in_axes=0,
             donate_argnums: Sequence[int] = (), static_argnums: Sequence[int] = (), batched: bool = True,
             devices=None) -> Compiled:
    """The one place the agents compile a program: ``jax.jit(jax.vmap(fn, in_axes))`` (one seed
    per entry of the mapped axis; ``batched=False``: ``jax.jit(fn)``, for a program that maps
    inside) as a :class:`Compiled`, its compile seconds in ``compile_seconds[name]``.

    Args:
      fn: the program of one seed (or the whole program with ``batched=False``).
      name: the program's name in ``compile_seconds`` (``"init"``, ``"chunk"``, ``"eval"``...).
      compile_seconds: the caller's timings dict (None: a private one, not reported).
      in_axes: ``jax.vmap``'s ``in_axes`` (0: every argument has the seed axis first).
      donate_argnums, static_argnums: as ``jax.jit`` (static arguments only with
        ``batched=False``).
      devices: None (the default device) or one device; the next issue's meshes raise.
    Returns:
      a :class:`Compiled` that compiles per input signature; the same program and numbers as
      calling the ``jax.jit`` function.
    Raises:
      ValueError: more than one device (:func:`check_devices`), or ``static_argnums`` with
        ``batched=True``.
    """
    check_devices(devices)
    if static_argnums and batched:
        raise ValueError(f"per_seed({name!r}): static_argnums need batched=False (vmap maps every argument)")
    body = jax.vmap(fn, in_axes=in_axes) if batched else fn
    kw = {}
    if donate_argnums:
        kw["donate_argnums"] = tuple(donate_argnums)
    if static_argnums:
        kw["static_argnums"] = tuple(static_argnums)
    return Compiled(jax.jit(body, **kw), name, {} if compile_seconds is None else compile_seconds,
                    static_argnums=static_argnums)


def per_program(timings: dict) -> dict:
    """``{program: trace + lower + compile seconds}`` of ``timings``."""
    return {k: float(r["trace_lower_s"] + r["compile_s"]) for k, r in timings.items()}


def total_seconds(timings: dict) -> float:
    """Trace, lower and compile seconds of every program in ``timings``."""
    return float(sum(r["trace_lower_s"] + r["compile_s"] for r in timings.values()))


__all__ = ["Compiled", "per_seed", "check_devices", "MULTI_DEVICE_MESSAGE", "per_program", "total_seconds"]
