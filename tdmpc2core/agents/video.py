"""Recording one evaluation episode of a trained agent as frames (issue 29).

The episode is the evaluation's (:func:`tdmpc2core.agents.common.eval_episode`): a fresh
initial state from the reset half of its key, then T agent steps of the planner in eval mode
(no exploration noise), each with its own split of the loop half. It runs as one small
compiled program of its own, :func:`make_record_fn`, which keeps per agent step only what a
picture needs (:meth:`tdmpc2core.envs.render.FrameSource.state_of`); the frames are drawn on
the host afterwards. The program reads the parameters and nothing else of a run: training and
evaluation numbers are those of a run without recording.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

#: ``video`` settings of a run: none, the last evaluation's, every evaluation's
VIDEO_MODES = ("off", "last", "every")


class Recording(NamedTuple):
    """One recorded episode.

    Attributes:
        frames: uint8 [N, height, width, 3] RGB: the initial state, then every ``stride``-th
            agent step up to the episode's end (its termination or T).
        fps: frames per second of real (simulated) time: 1 / (control timestep x action
            repeat x stride).
        episode_return: the episode's undiscounted return (float).
        length: agent steps of the episode (int; T unless it terminated).
        stride: agent steps between frames (int >= 1).
    """

    frames: np.ndarray
    fps: float
    episode_return: float
    length: int
    stride: int


class NotBuiltError(NotImplementedError, ValueError):
    """A video mode that is not built yet (a ValueError too, so the CLI reports it in one line)."""


def check_video_mode(mode: str, every: bool = True) -> str:
    """``mode`` if it is one of :data:`VIDEO_MODES`; raises ValueError naming it and those
    accepted, or, with ``every=False`` (the multi-task stage), :class:`NotBuiltError` for
    ``"every"`` (a multi-task run records its last evaluation only)."""
    if mode not in VIDEO_MODES:
        raise ValueError(f"video={mode!r}: accepted {list(VIDEO_MODES)}")
    if mode == "every" and not every:
        raise NotBuiltError("video='every' (a video at every evaluation) is built for single-task runs only; "
                            "a multi-task run records 'last' (the last evaluation's episodes) or 'off'")
    return mode


def make_record_fn(env, act: Callable, T: int, H: int, A: int, state_of: Callable, timings: dict) -> Callable:
    """A compiled ``(params, key) -> (states, return, length)`` of one seed
    (:class:`tdmpc2core.run.compiled.Compiled`: its trace, lower and compile seconds go into
    ``timings["record"]``).

    ``act(params, obs, mean, t0, key) -> (action, mean)`` acts as the evaluation does;
    ``states``: ``state_of(inner)`` stacked over the T + 1 states of the episode (the initial
    one first), leading axis T + 1; return f32[], length i32[] (as
    :func:`~tdmpc2core.agents.common.eval_episode`: steps up to and including a termination).
    """

    def rollout(params, key):
        k_reset, k_loop = jax.random.split(key)
        state, obs = env.reset(k_reset)

        def body(carry, inp):
            state, obs, mean, ret, length, alive = carry
            t, k = inp
            k_act, k_step = jax.random.split(k)
            a, mean = act(params, obs, mean, t == 0, k_act)
            state, out = env.step(state, a, k_step)
            ret = ret + jnp.where(alive > 0, out.reward, 0.0)
            length = length + alive.astype(jnp.int32)
            alive = alive * (1.0 - out.terminated.astype(jnp.float32))
            return (state, out.obs, mean, ret, length, alive), state_of(state.inner)

        init = (state, obs, jnp.zeros((H, A), jnp.float32), jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32),
                jnp.ones((), jnp.float32))
        (_, _, _, ret, length, _), seen = jax.lax.scan(body, init, (jnp.arange(T), jax.random.split(k_loop, T)))
        states = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), state_of(state.inner), seen)
        return states, ret, length

    from ..run.compiled import per_seed

    # the one place programs are compiled (one seed's episode: nothing to map)
    return per_seed(rollout, name="record", compile_seconds=timings, batched=False)


def frame_stride(n_steps: int, max_frames: int) -> int:
    """Agent steps between frames so that an episode of ``n_steps`` agent steps gives at most
    ``max_frames`` frames (its initial state included): ceil((n_steps + 1) / max_frames)."""
    if int(max_frames) < 2:
        raise ValueError(f"max_frames={max_frames!r}: at least 2 accepted")
    return max(1, math.ceil((int(n_steps) + 1) / int(max_frames)))


def episode_key(seed: int, eval_index: int, eval_episodes: int):
    """The key [2] of the first episode of evaluation ``eval_index`` of ``seed`` when it has
    ``eval_episodes`` episodes (:func:`~tdmpc2core.agents.common.eval_key` split as
    :func:`~tdmpc2core.agents.common.episodes_of_seed` splits it): the recorded episode starts
    from that episode's initial state and draws the same planner keys."""
    from .common import eval_key

    if int(eval_episodes) < 1:
        raise ValueError(f"eval_episodes={eval_episodes!r}: at least 1 accepted")
    return jax.random.split(eval_key(int(seed), int(eval_index)), int(eval_episodes))[0]


def record(record_fn: Callable, source, params, key, *, action_repeat: int, width: int, height: int,
           max_frames: int) -> Recording:
    """Run ``record_fn`` (:func:`make_record_fn`) on ``params`` and ``key``, then render the
    states of the episode's steps (to its end) every ``stride`` agent steps with ``source``
    (:class:`~tdmpc2core.envs.render.FrameSource`)."""
    states, ret, length = jax.block_until_ready(record_fn(params, key))
    length = int(length)
    stride = frame_stride(length, max_frames)
    idx = np.arange(0, length + 1, stride)
    if idx[-1] != length:  # the episode's last state is always shown
        idx = np.append(idx, length)
    picked: Any = jax.tree_util.tree_map(lambda x: np.asarray(x)[idx], states)
    frames = source.render(picked, width, height)
    fps = 1.0 / (source.control_dt * int(action_repeat) * stride)
    return Recording(frames, fps, float(ret), length, stride)


__all__ = ["VIDEO_MODES", "NotBuiltError", "Recording", "check_video_mode", "make_record_fn", "frame_stride",
           "episode_key", "record"]
