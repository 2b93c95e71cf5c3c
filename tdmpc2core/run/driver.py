"""The host side of a training run: wall-time-capped sub-chunks, interruption, and the
training history as plain numpy arrays (what a checkpoint keeps besides the device state).

None of this changes a number of the run: a chunk of ticks split into several calls of the
same compiled program gives bit-identical states (a tick depends only on its absolute index
and the state, :mod:`tdmpc2core.online`), and the history is only read back.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..agents.online import METRIC_KEYS

PHASES = ("seed", "burst", "train")
#: per-chunk record fields that measure wall-clock time (differ between two runs of the same seed)
WALL_CLOCK_KEYS = ("chunk_seconds", "wall_time_s", "agent_steps_per_s")


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
      checkpoint: the :class:`tdmpc2core.checkpoint.CheckpointInfo` written, or None.
    """

    def __init__(self, state, history, step: int, checkpoint=None, unit: str = "agent steps"):
        where = f"; checkpoint {checkpoint.path}" if checkpoint is not None else " (no checkpoint folder)"
        super().__init__(f"training stopped on request at {step} {unit}{where}")
        self.state = state
        self.history = history
        self.step = self.agent_steps = int(step)
        self.unit = unit
        self.checkpoint = checkpoint


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


# ------------------------------------------------------------------------- history
def new_history() -> dict:
    """An empty history in its working (list) form."""
    return {"eval_agent_steps": [], "eval_env_frames": [], "eval_returns": [], "eval_lengths": [],
            "chunks": [], "wall_seconds": 0.0}


def working_history(history: Optional[dict]) -> dict:
    """A copy of ``history`` (as ``train`` returns it) in its working (list) form."""
    if history is None:
        return new_history()
    return {
        "eval_agent_steps": [int(x) for x in np.asarray(history["eval_agent_steps"]).reshape(-1)],
        "eval_env_frames": [int(x) for x in np.asarray(history["eval_env_frames"]).reshape(-1)],
        "eval_returns": list(np.asarray(history["eval_returns"])),
        "eval_lengths": list(np.asarray(history["eval_lengths"])),
        "chunks": [dict(c) for c in history["chunks"]],
        "wall_seconds": float(history.get("wall_seconds", 0.0)),
    }


def finalize_history(hist: dict, n_seeds: int, eval_episodes: int) -> dict:
    """The working history as ``train`` returns it: numpy arrays ``eval_agent_steps`` and
    ``eval_env_frames`` [n_evals] int64, ``eval_returns`` [n_evals, n_seeds, episodes] f32,
    ``eval_lengths`` (same shape, int32), ``eval_return`` [n_evals, n_seeds] (mean over the
    episodes), ``chunks`` (list of per-chunk dicts), ``wall_seconds`` (float, training wall
    time summed over the sessions of a resumed run)."""
    n_eval = len(hist["eval_agent_steps"])
    E = int(eval_episodes)
    out = {
        "eval_agent_steps": np.asarray(hist["eval_agent_steps"], np.int64).reshape(n_eval),
        "eval_env_frames": np.asarray(hist["eval_env_frames"], np.int64).reshape(n_eval),
        "eval_returns": (np.stack(hist["eval_returns"]) if n_eval else np.zeros((0, n_seeds, E), np.float32)),
        "eval_lengths": (np.stack(hist["eval_lengths"]) if n_eval else np.zeros((0, n_seeds, E), np.int32)),
        "chunks": list(hist["chunks"]),
        "wall_seconds": float(hist["wall_seconds"]),
    }
    out["eval_return"] = out["eval_returns"].mean(axis=-1)
    return out


def history_to_arrays(hist: dict, n_seeds: int, eval_episodes: int) -> dict[str, np.ndarray]:
    """The history as a flat dict of numpy arrays (the ``host`` part of a checkpoint).

    Keys: ``eval/agent_steps``, ``eval/env_frames``, ``eval/returns``, ``eval/lengths``;
    ``chunks/phase`` (int8 index into :data:`PHASES`), ``chunks/agent_steps``,
    ``chunks/env_frames``, ``chunks/updates`` [n_chunks, n_seeds], one
    ``chunks/<metric>`` [n_chunks, n_seeds] per metric and ``train_return``, the wall-clock
    fields, ``chunks/eval_position`` (index into the evaluations of the evaluation that ended
    the chunk, -1 if none); ``wall_seconds``.
    """
    h = finalize_history(hist, n_seeds, eval_episodes)
    chunks = h["chunks"]
    c = len(chunks)
    d = {"eval/agent_steps": h["eval_agent_steps"], "eval/env_frames": h["eval_env_frames"],
         "eval/returns": np.asarray(h["eval_returns"], np.float32),
         "eval/lengths": np.asarray(h["eval_lengths"], np.int32),
         "wall_seconds": np.asarray(h["wall_seconds"], np.float64),
         "chunks/phase": np.asarray([PHASES.index(r["phase"]) for r in chunks], np.int8).reshape(c),
         "chunks/eval_position": np.asarray([r.get("eval_position", -1) for r in chunks], np.int64).reshape(c)}
    for k in ("agent_steps", "env_frames"):
        d[f"chunks/{k}"] = np.asarray([r[k] for r in chunks], np.int64).reshape(c)
    for k in WALL_CLOCK_KEYS:
        d[f"chunks/{k}"] = np.asarray([r[k] for r in chunks], np.float64).reshape(c)
    for k, dtype in [("updates", np.int32), *[(m, np.float32) for m in METRIC_KEYS], ("train_return", np.float64)]:
        d[f"chunks/{k}"] = (np.stack([np.asarray(r[k], dtype) for r in chunks]) if c
                            else np.zeros((0, n_seeds), dtype))
    return d


def history_from_arrays(d: dict[str, np.ndarray]) -> dict:
    """Inverse of :func:`history_to_arrays`: the history as ``train`` returns it."""
    returns = np.asarray(d["eval/returns"])
    chunks = []
    for j in range(len(d["chunks/phase"])):
        rec = {"phase": PHASES[int(d["chunks/phase"][j])],
               "agent_steps": int(d["chunks/agent_steps"][j]), "env_frames": int(d["chunks/env_frames"][j])}
        for k in WALL_CLOCK_KEYS:
            rec[k] = float(d[f"chunks/{k}"][j])
        for k in ("updates", *METRIC_KEYS, "train_return"):
            rec[k] = np.asarray(d[f"chunks/{k}"][j])
        pos = int(d["chunks/eval_position"][j])
        if pos >= 0:
            rec["eval_position"] = pos
            rec["eval_returns"] = returns[pos]
            rec["eval_return"] = returns[pos].mean(axis=1)
        chunks.append(rec)
    hist = {"eval_agent_steps": list(np.asarray(d["eval/agent_steps"])),
            "eval_env_frames": list(np.asarray(d["eval/env_frames"])),
            "eval_returns": list(returns), "eval_lengths": list(np.asarray(d["eval/lengths"])),
            "chunks": chunks, "wall_seconds": float(d["wall_seconds"])}
    return finalize_history(hist, returns.shape[1], returns.shape[2])
