"""Feeding a compiled program from the host one block ahead (the multi-task host path).

``feed(blocks, prepare, consume, timing)`` prepares block i + 1 in a background thread while
the caller's thread consumes block i (dispatching it to the device), and accumulates in
``timing`` the seconds spent preparing (``prepare_s``, in the thread) and the seconds the
consumer waited for a block (``wait_s``): a ``wait_s`` near zero means preparing is not the
bottleneck. Host-side timing lives in this layer, as the run driver's does.
"""
from __future__ import annotations

import concurrent.futures
import time
from typing import Callable, Sequence


def feed(blocks: Sequence, prepare: Callable, consume: Callable, timing: dict) -> None:
    """For each ``block`` (a tuple of arguments) in order: ``consume(block, prepare(*block))``,
    with the next block's ``prepare`` running in a background thread meanwhile.

    ``timing`` gets ``prepare_s`` and ``wait_s`` added (seconds). Exceptions of ``prepare``
    are raised in the caller's thread when its block is consumed.
    """
    if not blocks:
        return

    def timed(*args):
        t = time.perf_counter()
        out = prepare(*args)
        return out, time.perf_counter() - t

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        nxt = pool.submit(timed, *blocks[0])
        for i, block in enumerate(blocks):
            t = time.perf_counter()
            out, prep_s = nxt.result()
            timing["wait_s"] = timing.get("wait_s", 0.0) + time.perf_counter() - t
            timing["prepare_s"] = timing.get("prepare_s", 0.0) + prep_s
            if i + 1 < len(blocks):
                nxt = pool.submit(timed, *blocks[i + 1])
            consume(block, out)
            del out


__all__ = ["feed"]
