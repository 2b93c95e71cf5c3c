"""The multi-task agent's training data and its two sampling paths (spec §9, §10).

* :class:`DeviceData`: the pooled dataset as the training program reads it;
* :func:`sample_indices`, :func:`gather_slices`, :func:`sample_slices`: B slices of H+1
  consecutive rows, episode-uniform then start-uniform;
* the device path (:func:`device_chunk`): the pool on the device once, each update samples it
  inside the compiled program;
* the host path (:func:`run_updates_host`): the pool stays in host memory; a small compiled
  program draws each update's rows from the same keys (:func:`index_program`), a background
  thread gathers them with numpy one block ahead (:func:`host_batches`) and the training
  program (:func:`host_chunk`) runs the block's updates. Both paths draw the same slices and
  give the same numbers on CPU.

Both training programs run their updates through
:func:`tdmpc2core.agents.common.update_loop` (with the agent's extensions' post_update
phases, if any: :func:`update_hook`).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..model.update import Batch, update
from ..run.compiled import Compiled, per_seed
from .common import extensions_hook, update_loop

#: the host path's bytes of batches per host-to-device transfer (all seeds), by default
HOST_BLOCK_BYTES = 64 * 2 ** 20


class DeviceData(NamedTuple):
    """The dataset as the training program reads it (on the device once, shared by seeds).

    obs [R, O], action [R, A], reward [R] (float32, NaN on reset rows); starts, rows, task
    [E'] (int32) of the sampleable episodes (at least H+1 rows); gamma [num_tasks] (float32),
    masks [num_tasks, A] (float32).
    """

    obs: jnp.ndarray
    action: jnp.ndarray
    reward: jnp.ndarray
    starts: jnp.ndarray
    rows: jnp.ndarray
    task: jnp.ndarray
    gamma: jnp.ndarray
    masks: jnp.ndarray


def sample_indices(data: DeviceData, key, batch_size: int, horizon: int):
    """The rows of B slices of H+1 consecutive rows (spec §9, §10): (idx [B, H+1] int32 rows of
    the pool, task [B] int32).

    Episodes uniformly with replacement over the sampleable episodes, then a start uniform in
    [0, rows - (H+1)] (torchrl's SliceSampler with strict_length). Reads only ``starts``,
    ``rows`` and ``task`` of ``data``, so the host path draws the same rows from the same key.
    """
    k_ep, k_start = jax.random.split(key)
    i = jax.random.randint(k_ep, (batch_size,), 0, data.starts.shape[0])
    start = jax.random.randint(k_start, (batch_size,), 0, data.rows[i] - horizon)  # maxval exclusive
    idx = (data.starts[i] + start)[:, None] + jnp.arange(horizon + 1, dtype=jnp.int32)[None]  # [B, H+1]
    return idx, data.task[i]


def gather_slices(xp, obs, action, reward, idx, task) -> Batch:
    """The slices at rows ``idx`` [..., B, H+1] of the pool's ``obs``, ``action``, ``reward``, as
    a time-major :class:`Batch` (obs [..., H+1, B, O], action [..., H, B, A], reward [..., H, B],
    terminated zeros, task [..., B]). ``xp`` is ``jax.numpy`` (the device path) or ``numpy``
    (the host path, on leading axes [K, S]): the same values either way."""
    H = idx.shape[-1] - 1
    o = obs[idx]
    a = action[idx[..., 1:]]
    r = reward[idx[..., 1:]]
    return Batch(obs=xp.swapaxes(o, -3, -2), action=xp.swapaxes(a, -3, -2), reward=xp.swapaxes(r, -2, -1),
                 terminated=xp.zeros(idx.shape[:-2] + (H, idx.shape[-2]), xp.float32), task=task)


def sample_slices(data: DeviceData, key, batch_size: int, horizon: int) -> Batch:
    """B slices of H+1 consecutive rows of the pooled dataset, time-major (spec §9, §10).

    :func:`sample_indices` then :func:`gather_slices` on the device copy. A slice may start at
    a reset row: its NaN action and reward are dropped by the shift (action, reward = rows
    1..H). Returns Batch(obs [H+1, B, O], action [H, B, A], reward [H, B], terminated [H, B]
    (zeros: the dataset has no terminations), task [B]).
    """
    idx, task = sample_indices(data, key, batch_size, horizon)
    return gather_slices(jnp, data.obs, data.action, data.reward, idx, task)


def update_hook(agent):
    """The hook :func:`~tdmpc2core.agents.common.update_loop` folds: the agent's extensions'
    post_update phases with ``step`` = the updates done (this one included); None without."""
    return extensions_hook(agent.extensions, lambda agent_state: agent_state.updates)


def device_chunk(agent) -> Compiled:
    """The device path's training program (states [S, ...] donated, data, n_updates) -> states:
    ``n_updates`` updates of every seed, each sampling the device copy of the pool with the
    keys ``split(fold_in(state.key, updates))`` (sample, update)."""
    wm, B, H, hook = agent.wm, agent.cfg.batch_size, agent.cfg.horizon, update_hook(agent)
    placement = agent.placement

    def single(st, data: DeviceData, n_updates):
        def step(_, agent_state):
            k_sample, k_update = jax.random.split(jax.random.fold_in(st.key, agent_state.updates))
            # every device draws the same rows; the batch is then split over the mesh
            batch = placement.constrain(sample_slices(data, k_sample, B, H))
            return update(wm, agent_state, batch, data.gamma, k_update, data.masks)

        agent_state, metrics, ext = update_loop(n_updates, step, st.agent, st.metrics, hook, st.ext)
        return st._replace(agent=agent_state, metrics=metrics, ext=ext)

    # state batched over seeds (donated); the dataset and the update count unbatched
    return per_seed(single, name="chunk", compile_seconds=agent.compile_seconds, in_axes=(0, None, None),
                    donate_argnums=(0,), devices=agent.placement)


def block_updates(agent, n_seeds: int) -> int:
    """Updates per host block: ``agent.host_block_updates``, or as many as fit in
    :data:`HOST_BLOCK_BYTES` of batches for ``n_seeds`` seeds (1 to 256)."""
    if agent.host_block_updates:
        return agent.host_block_updates
    B, H = agent.cfg.batch_size, agent.cfg.horizon
    per = n_seeds * B * ((H + 1) * agent.obs_dim + H * agent.action_dim + H + 1 + (H + 1)) * 4
    return int(max(1, min(256, HOST_BLOCK_BYTES // per)))


def index_program(agent) -> Compiled:
    """(keys [S, 2], first update u0, data, K) -> (idx [K, S, B, H+1], task [K, S, B]) of updates
    u0 .. u0+K-1: the keys of the device path's updates, the same draws (K static)."""
    B, H = agent.cfg.batch_size, agent.cfg.horizon

    def one(key, u, data):
        k_sample, _ = jax.random.split(jax.random.fold_in(key, u))
        return sample_indices(data, k_sample, B, H)

    def block(keys, u0, data, K):
        us = u0 + jnp.arange(K, dtype=jnp.int32)
        return jax.vmap(lambda u: jax.vmap(lambda k: one(k, u, data))(keys))(us)

    return per_seed(block, name="index", batched=False, static_argnums=(3,), devices=agent.placement)


def host_chunk(agent) -> Compiled:
    """The host path's training program (states [S, ...] donated, batches [K, S, ...], data,
    n_updates) -> states: the first ``n_updates`` of the block's updates, with the update keys
    of the device path."""
    wm, hook, placement = agent.wm, update_hook(agent), agent.placement

    def single(st, batches: Batch, data: DeviceData, n_updates):
        def step(j, agent_state):
            _, k_update = jax.random.split(jax.random.fold_in(st.key, agent_state.updates))
            batch = placement.constrain(jax.tree_util.tree_map(lambda x: x[j], batches))
            return update(wm, agent_state, batch, data.gamma, k_update, data.masks)

        agent_state, metrics, ext = update_loop(n_updates, step, st.agent, st.metrics, hook, st.ext)
        return st._replace(agent=agent_state, metrics=metrics, ext=ext)

    # batches [K, S, ...] -> per seed [K, ...]
    return per_seed(single, name="chunk", compile_seconds=agent.compile_seconds, in_axes=(0, 1, None, None),
                    donate_argnums=(0,), devices=agent.placement)


def host_batches(agent, keys, u0: int, K: int, n: int) -> Batch:
    """The batches of updates u0 .. u0+n-1, gathered on the host, zero-padded to K updates
    (one program shape; the padding is never read): Batch leaves [K, S, ...], numpy."""
    from ..run.devices import local

    idx, task = jax.device_get(agent._index_fn()(keys, jnp.int32(u0), local(agent.data), K))
    h = agent._host_data
    batch = gather_slices(np, h.obs, h.action, h.reward, idx[:n], task[:n])
    if n < K:
        batch = Batch(*(np.concatenate([x, np.zeros((K - n,) + x.shape[1:], x.dtype)]) for x in batch))
    return batch


def run_updates_host(agent, state, n_updates: int):
    """``n_updates`` more updates of every seed on the host path: blocks of
    :func:`block_updates` updates, each block's batches prepared in a background thread while
    the previous block trains (:func:`tdmpc2core.run.prefetch.feed`); timings in
    ``agent.host_timing``."""
    from ..run.prefetch import feed

    if n_updates <= 0:
        return state
    from ..run.devices import to_host

    u0 = int(to_host(state.agent.updates)[0])
    S = int(state.seed.shape[0])
    K = agent._block_updates(S)
    keys = to_host(state.key)  # a host copy: the state is donated to each block
    blocks = [(u0 + b, min(K, n_updates - b)) for b in range(0, n_updates, K)]
    chunk = agent._chunk_host()
    box = [state]

    def prepare(u, n):  # in a background thread, while the previous block trains
        # time-major leaves [K, S, T, B, ...]: the batch axis (3) split over the mesh
        return jax.block_until_ready(agent.placement.put_batches(agent._host_batches(keys, u, K, n), 3))

    def consume(block, batch):
        box[0] = chunk(box[0], batch, agent.data, agent.placement.replicate(jnp.int32(block[1])))
        agent.host_timing["updates"] += block[1]

    feed(blocks, prepare, consume, agent.host_timing)
    return box[0]


__all__ = ["DeviceData", "sample_indices", "gather_slices", "sample_slices", "HOST_BLOCK_BYTES", "device_chunk",
           "block_updates", "index_program", "host_chunk", "host_batches", "run_updates_host"]
