"""Episode replay as JAX arrays, and slice sampling (spec §9).

Layout: a ring of ``num_slots`` episode slots, each holding one episode's ``T + 1`` rows
(row 0 is the reset row: the initial observation, NaN action and reward, as the reference
stores it; row t+1 holds o_{t+1}, a_t, r_t). ``buffer_size`` counts agent steps
(transitions): the ring keeps ``capacity_episodes = ceil(min(buffer_size, run length) / T)``
complete episodes, and the reset rows are held on top of that (one per episode), plus one
slot per environment for the episode in progress. Eviction is by whole episodes, oldest first
(the reference's row ring shortens the oldest episode instead; docs/deviations.md R1).

Only complete episodes are sampled (the reference adds an episode to its buffer when it
ends). Sampling (torchrl SliceSampler, ``strict_length``): B episodes uniformly with
replacement over the committed episodes, then a start uniformly in [0, len - (H + 1)],
H + 1 consecutive rows; slices never cross episodes.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .update import Batch


class Replay(NamedTuple):
    obs: jnp.ndarray          # [S, T+1, obs_dim] f32
    action: jnp.ndarray       # [S, T+1, A] f32, NaN in row 0
    reward: jnp.ndarray       # [S, T+1] f32, NaN in row 0
    terminated: jnp.ndarray   # [S, T+1] f32 (1.0 on a terminal step), NaN in row 0
    allocated: jnp.ndarray    # int32: slots handed out so far (slot = allocated % S)
    committed: jnp.ndarray    # int32: episodes completed and added so far
    env_slot: jnp.ndarray     # [n_envs] int32: slot each env is writing


def capacity_episodes(buffer_size: int, run_agent_steps: int, T: int) -> int:
    """Complete episodes kept: ceil(min(buffer_size, run length) / T), at least 1."""
    return max(1, math.ceil(min(buffer_size, max(run_agent_steps, 1)) / T))


def init_replay(num_complete: int, n_envs: int, T: int, obs_dim: int, action_dim: int) -> Replay:
    S = num_complete + n_envs
    return Replay(
        obs=jnp.zeros((S, T + 1, obs_dim), jnp.float32),
        action=jnp.full((S, T + 1, action_dim), jnp.nan, jnp.float32),
        reward=jnp.full((S, T + 1), jnp.nan, jnp.float32),
        terminated=jnp.full((S, T + 1), jnp.nan, jnp.float32),
        allocated=jnp.zeros((), jnp.int32),
        committed=jnp.zeros((), jnp.int32),
        env_slot=jnp.zeros((n_envs,), jnp.int32),
    )


def num_slots(replay: Replay) -> int:
    return replay.obs.shape[0]


def num_valid(replay: Replay):
    """Committed episodes still held: min(committed, S - n_envs)."""
    return jnp.minimum(replay.committed, num_slots(replay) - replay.env_slot.shape[0])


def start_episodes(replay: Replay, obs0, commit: bool | jnp.ndarray) -> Replay:
    """Commit the episodes in progress (if ``commit``) and give each env a fresh slot whose
    row 0 is its reset observation ``obs0`` [n_envs, obs_dim]."""
    n_envs = obs0.shape[0]
    S = num_slots(replay)
    committed = replay.committed + jnp.where(commit, n_envs, 0).astype(jnp.int32)
    slots = (replay.allocated + jnp.arange(n_envs, dtype=jnp.int32)) % S
    nan_a = jnp.full((n_envs,) + replay.action.shape[2:], jnp.nan, jnp.float32)
    return Replay(
        obs=replay.obs.at[slots, 0].set(obs0),
        action=replay.action.at[slots, 0].set(nan_a),
        reward=replay.reward.at[slots, 0].set(jnp.nan),
        terminated=replay.terminated.at[slots, 0].set(jnp.nan),
        allocated=replay.allocated + n_envs,
        committed=committed,
        env_slot=slots,
    )


def write_step(replay: Replay, row, obs, action, reward, terminated) -> Replay:
    """Write row ``row`` [n_envs] (= t + 1) of each env's episode: o_{t+1}, a_t, r_t, d_t."""
    s = replay.env_slot
    return replay._replace(
        obs=replay.obs.at[s, row].set(obs),
        action=replay.action.at[s, row].set(action),
        reward=replay.reward.at[s, row].set(reward),
        terminated=replay.terminated.at[s, row].set(terminated.astype(jnp.float32)),
    )


def committed_slots(replay: Replay):
    """Slot index of the i-th oldest committed episode still held, as a function of i."""
    S = num_slots(replay)
    n_envs = replay.env_slot.shape[0]
    c = num_valid(replay)
    first = replay.allocated - n_envs - c
    return lambda i: (first + i) % S


def sample(replay: Replay, key, batch_size: int, horizon: int) -> Batch:
    """B slices of H+1 rows from committed episodes, time-major (spec §9).

    Returns Batch(obs [H+1, B, O], action [H, B, A], reward [H, B], terminated [H, B]).
    The reset row can start a slice; its NaN action/reward are dropped by the [1:] shift.
    """
    T1 = replay.obs.shape[1]
    k_ep, k_start = jax.random.split(key)
    c = num_valid(replay)
    i = jax.random.randint(k_ep, (batch_size,), 0, jnp.maximum(c, 1))
    slot = committed_slots(replay)(i)
    start = jax.random.randint(k_start, (batch_size,), 0, T1 - horizon)
    rows = start[:, None] + jnp.arange(horizon + 1)[None]  # [B, H+1]
    obs = replay.obs[slot[:, None], rows]  # [B, H+1, O]
    action = replay.action[slot[:, None], rows[:, 1:]]
    reward = replay.reward[slot[:, None], rows[:, 1:]]
    term = replay.terminated[slot[:, None], rows[:, 1:]]
    return Batch(
        obs=jnp.swapaxes(obs, 0, 1),
        action=jnp.swapaxes(action, 0, 1),
        reward=jnp.swapaxes(reward, 0, 1),
        terminated=jnp.swapaxes(term, 0, 1),
    )


def committed_episodes(replay: Replay):
    """The complete episodes one seed's replay holds, oldest first, on the host.

    ``replay`` is one seed's replay (no seed axis; jax or numpy arrays). Episodes come in the
    order they were collected: rounds of ``n_envs`` episodes in order, env order within a
    round; the episodes in progress are not included.

    Returns:
      (episodes, evicted): ``episodes`` a list of dicts of numpy arrays, one per episode,
      ``obs`` [L, obs_dim] f32, ``action`` [L, A] f32, ``reward`` [L] f32, ``terminated``
      [L] bool, with L = rows (agent steps + 1; row 0 is the reset row, NaN action and
      reward); ``evicted`` the number of complete episodes the ring no longer holds.
    """
    import numpy as np

    host = jax.tree_util.tree_map(np.asarray, replay)
    S = host.obs.shape[0]
    n_envs = host.env_slot.shape[0]
    committed = int(host.committed)
    held = min(committed, S - n_envs)
    first = int(host.allocated) - n_envs - held
    episodes = []
    for i in range(held):
        s = (first + i) % S
        term = host.terminated[s]
        episodes.append({
            "obs": host.obs[s].copy(),
            "action": host.action[s].copy(),
            "reward": host.reward[s].copy(),
            "terminated": np.nan_to_num(term, nan=0.0) > 0.5,
        })
    return episodes, committed - held
