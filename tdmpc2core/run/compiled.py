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
"""
from __future__ import annotations

import time
from typing import Callable

import jax


def _signature(args) -> tuple:
    leaves, tree = jax.tree_util.tree_flatten(args)
    sig = []
    for x in leaves:
        aval = jax.typeof(x) if hasattr(jax, "typeof") else jax.core.get_aval(x)
        sig.append((getattr(aval, "shape", ()), str(getattr(aval, "dtype", type(x))),
                    bool(getattr(aval, "weak_type", False))))
    return tree, tuple(sig)


class Compiled:
    """``jitted`` (a ``jax.jit`` function of positional arrays) compiled ahead of time per input
    signature, its trace+lower and compile seconds added to ``timings[name]``."""

    def __init__(self, jitted: Callable, name: str, timings: dict):
        self.jitted, self.name, self.timings = jitted, str(name), timings
        self._executables: dict = {}

    def __call__(self, *args):
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(args)):
            return self.jitted(*args)  # inside another trace (eval_shape, an outer jit): no executable
        key = _signature(args)
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
        return exe(*args)

    def lower(self, *args):
        """The jitted function's lowering (for inspection, e.g. the HLO or its cost analysis)."""
        return self.jitted.lower(*args)


def per_program(timings: dict) -> dict:
    """``{program: trace + lower + compile seconds}`` of ``timings``."""
    return {k: float(r["trace_lower_s"] + r["compile_s"]) for k, r in timings.items()}


def total_seconds(timings: dict) -> float:
    """Trace, lower and compile seconds of every program in ``timings``."""
    return float(sum(r["trace_lower_s"] + r["compile_s"] for r in timings.values()))


__all__ = ["Compiled", "per_program", "total_seconds"]
