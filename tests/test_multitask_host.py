"""The multi-task agent's host path: a pool larger than the device budget stays in host memory,
the compiled program draws each update's rows, the host gathers them, only batches move; and
the per-update hook (``agents.common.UpdateHook``) folded inside both paths' update loops.

It must draw the same slices and give the same numbers as the device path (the pool on the
device, sampled inside the compiled program), so a run may switch paths between sessions.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tdmpc2core.agents import multitask_sampling as sampling
from tdmpc2core.agents.common import UpdateHook
from tdmpc2core.agents.multitask import TDMPC2MultiTask, gather_slices, sample_indices, sample_slices

from test_multitask import TINY, leaves, make_dataset, random_episodes, task


@pytest.fixture(scope="module")
def pool():
    """A synthetic pool of two tasks of different widths (obs 2 / action 1, obs 4 / action 3: the
    padded widths of tests/test_multitask.py's `padded` pool, so the agents' init program is
    that file's, from the session's compilation cache when it ran first)."""
    rng = np.random.default_rng(7)
    tasks = [task("a", 2, 1, 12), task("b", 4, 3, 20)]
    return make_dataset([random_episodes(rng, 6, 12, 2, 1), random_episodes(rng, 5, 20, 4, 3)], tasks)


def test_placement_follows_the_device_budget(pool):
    rows = pool.obs.nbytes + pool.action.nbytes + pool.reward.nbytes
    assert TDMPC2MultiTask(pool, batch_size=8, **TINY).data_placement == "device"  # no budget: as before
    assert TDMPC2MultiTask(pool, batch_size=8, device_budget_bytes=rows, **TINY).data_placement == "device"
    host = TDMPC2MultiTask(pool, batch_size=8, device_budget_bytes=rows - 1, **TINY)
    assert host.data_placement == "host" and host.pool_nbytes == rows
    # on the device: only the episode table, discounts and masks
    assert host.data.obs.shape[0] == 0 and host.data.starts.shape[0] == pool.num_episodes


def test_host_gather_equals_device_sampling(pool):
    agent = TDMPC2MultiTask(pool, batch_size=8, **TINY)
    B, H = 8, agent.cfg.horizon
    key = jax.random.PRNGKey(3)
    dev = jax.jit(lambda k: sample_slices(agent.data, k, B, H))(key)
    idx, tk = jax.jit(lambda k: sample_indices(agent.data, k, B, H))(key)
    host = gather_slices(np, pool.obs, pool.action, pool.reward, np.asarray(idx), np.asarray(tk))
    for x, y in zip(dev, host):
        np.testing.assert_array_equal(np.asarray(x), y)


N_UPDATES = 10
PATHS = {"device": dict(batch_size=8), "host": dict(batch_size=8, device_budget_bytes=1024, host_block_updates=3)}
COUNT = UpdateHook(init=lambda: jnp.zeros((), jnp.int32), fold=lambda c, st, m: c + 1)


@pytest.fixture(scope="module")
def plain(pool):
    """Both paths' runs without a hook: two seeds, N_UPDATES updates (the host path in blocks
    of 3, a partial last block). Compiled once for the module: the hook test compares with them."""
    out = {}
    for path, kw in PATHS.items():
        agent = TDMPC2MultiTask(pool, **kw, **TINY)
        out[path] = (agent, agent.train(seed=[0, 1], n_timesteps=N_UPDATES)[0])
    return out


def test_host_path_gives_the_device_paths_numbers(plain):
    """The parameters, optimizer states and metrics equal the device path's bit for bit (CPU)."""
    (dev, a), (host, b) = plain["device"], plain["host"]
    assert host.data_placement == "host" and dev.data_placement == "device"
    assert int(np.asarray(b.agent.updates)[0]) == N_UPDATES and host.host_timing["updates"] == N_UPDATES
    for x, y in zip(leaves(a), leaves(b)):
        np.testing.assert_array_equal(x, y)
    assert dev.dataset_sha256 == host.dataset_sha256  # the same data whichever the placement


@pytest.mark.parametrize("path", list(PATHS))
def test_update_hook_counts_updates_and_changes_no_parameter(pool, plain, path):
    """The hook's state counts the updates, is carried across calls in the run state, and
    changes nothing: the hooked run split 4 + 6 equals the plain run of N_UPDATES bit for bit."""
    counted = TDMPC2MultiTask(pool, post_update=COUNT, **PATHS[path], **TINY)
    st, _ = counted.train(seed=[0, 1], n_timesteps=4)
    st, _ = counted.train(state=st, n_timesteps=N_UPDATES - 4)
    np.testing.assert_array_equal(np.asarray(st.ext), [N_UPDATES, N_UPDATES])
    np.testing.assert_array_equal(np.asarray(st.ext), np.asarray(st.agent.updates))
    ref = plain[path][1]
    assert ref.ext is None
    for a, b in zip(leaves(ref.agent), leaves(st.agent)):
        np.testing.assert_array_equal(a, b)


def test_host_block_size_is_bounded(pool, monkeypatch):
    agent = TDMPC2MultiTask(pool, batch_size=8, device_budget_bytes=0, **TINY)
    assert 1 <= agent._block_updates(2) <= 256
    monkeypatch.setattr(sampling, "HOST_BLOCK_BYTES", 1)  # the host path's module (agents/multitask_sampling.py)
    assert agent._block_updates(2) == 1


def test_eval_envs_with_none_evaluate_only_those_tasks():
    """An official pool's tasks without an env of ours are trained on, not evaluated (M8).
    The agent has tests/test_multitask.py's twin-task settings, so its init and evaluation
    programs are those of that file's probe (task "left", 10 episodes): loaded from the
    session's compilation cache when that file ran first."""
    from test_multitask import T_TWIN, TWIN, TWIN_BATCH, TWIN_EVAL_EPISODES, TwinLine, twin_episodes

    rng = np.random.default_rng(0)
    ds = make_dataset([twin_episodes(rng, 1.0, 4), twin_episodes(rng, -1.0, 4)],
                      [task("right", 1, 1, T_TWIN), task("left", 1, 1, T_TWIN)])
    agent = TDMPC2MultiTask(ds, eval_envs=[None, TwinLine(-1.0, "left")], batch_size=TWIN_BATCH,
                            return_ranges={"left": (-25, 25)}, **TWIN)
    assert agent.eval_task_ids == [1] and agent.eval_task_names == ["left"]
    ev = agent.evaluate(agent.init([0]), num_episodes=TWIN_EVAL_EPISODES)
    assert ev["tasks"] == ["left"] and ev["returns"].shape == (1, 1, TWIN_EVAL_EPISODES)
    np.testing.assert_allclose(ev["normalized_score"], 100 * (ev["return"][:, 0] + 25) / 50)
    with pytest.raises(ValueError, match="every entry is None"):
        TDMPC2MultiTask(ds, eval_envs=[None, None], batch_size=TWIN_BATCH, **TWIN)
