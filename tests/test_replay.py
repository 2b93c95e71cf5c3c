"""Episode replay (spec §9, §12.13): slices stay inside one committed episode, the reset
row's NaN action/reward never reach a batch or a loss, eviction is oldest-first."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tdmpc2core.agents import replay as rp
from tdmpc2core.model.config import TDMPC2Config, resolve_config
from tdmpc2core.model.update import init_agent_state, update
from tdmpc2core.model.world_model import WorldModel

T, OBS, ACT, H, B = 10, 5, 2, 3, 4
N_ENVS, KEEP = 2, 5
# the same tiny world model as tests/test_update.py (the jitted update is shared)
CFG_KW = dict(model_size=1, mlp_dim=16, latent_dim=16, enc_dim=16, num_q=2, batch_size=B, horizon=H, dropout=0.0)

jit_update = jax.jit(update, static_argnums=0)
jit_init = jax.jit(init_agent_state, static_argnums=0)


def obs_row(ep_id, step, rng):
    """Observation carrying its episode id and step (other dims: noise)."""
    o = rng.standard_normal(OBS).astype(np.float32)
    o[0], o[1] = ep_id, step
    return o


def fill(n_rounds, partial_steps=0, seed=0):
    """n_rounds of N_ENVS complete episodes (ids 0, 1, 2, ... in allocation order), then
    (if partial_steps) a round in progress with that many steps written."""
    rng = np.random.default_rng(seed)
    replay = rp.init_replay(KEEP, N_ENVS, T, OBS, ACT)
    rounds = n_rounds + (1 if partial_steps else 0)
    for r in range(rounds):
        ids = [N_ENVS * r + e for e in range(N_ENVS)]
        obs0 = jnp.asarray(np.stack([obs_row(i, 0, rng) for i in ids]))
        replay = rp.start_episodes(replay, obs0, r > 0)
        steps = T if r < n_rounds else partial_steps
        for t in range(steps):
            obs = jnp.asarray(np.stack([obs_row(i, t + 1, rng) for i in ids]))
            act = jnp.asarray([[i + 0.5, t] for i in ids], jnp.float32)       # a_t
            rew = jnp.asarray([100.0 * i + t for i in ids], jnp.float32)       # r_t
            replay = rp.write_step(replay, jnp.full((N_ENVS,), t + 1, jnp.int32), obs, act, rew,
                                   jnp.zeros((N_ENVS,), bool))
    return replay


sample_many = jax.jit(jax.vmap(lambda r, k: rp.sample(r, k, B, H), in_axes=(None, 0)))


def slices(replay, n_batches=400, seed=0):
    b = sample_many(replay, jax.random.split(jax.random.PRNGKey(seed), n_batches))
    # [n, H+1, B, ...] -> [n * B, H+1, ...]
    f = lambda x: np.asarray(jnp.swapaxes(x, 1, 2)).reshape((-1,) + x.shape[1:2] + x.shape[3:])
    return f(b.obs), f(b.action), f(b.reward), f(b.terminated)


@pytest.fixture(scope="module")
def full_replay():
    # 8 rounds x 2 envs = 16 committed episodes (ids 0..15) + 2 in progress (ids 16, 17)
    return fill(8, partial_steps=6)


def test_slices_stay_inside_one_committed_episode(full_replay):
    obs, act, rew, term = slices(full_replay)
    assert obs.shape == (400 * B, H + 1, OBS) and act.shape == (400 * B, H, ACT) and rew.shape == (400 * B, H)
    ids = obs[:, :, 0]
    steps = obs[:, :, 1]
    assert np.all(ids == ids[:, :1])                              # one episode per slice
    assert np.all(steps == steps[:, :1] + np.arange(H + 1))       # consecutive rows
    # rows 1..H: a_t, r_t of the same episode, aligned with o_t (the [1:] shift)
    start = steps[:, 0]
    np.testing.assert_array_equal(act[:, :, 0], ids[:, 1:] + 0.5)
    np.testing.assert_array_equal(act[:, :, 1], start[:, None] + np.arange(H))
    np.testing.assert_array_equal(rew, 100.0 * ids[:, 1:] + start[:, None] + np.arange(H))
    # every valid start 0 .. T+1-(H+1) occurs (0 = the reset row), no other
    assert set(np.unique(start).astype(int)) == set(range(T + 1 - H))


def test_only_committed_episodes_are_sampled_and_oldest_are_evicted(full_replay):
    obs, _, _, _ = slices(full_replay)
    seen = set(np.unique(obs[:, 0, 0]).astype(int))
    # 16 committed, the ring keeps the newest KEEP = 5 (ids 11..15); 16, 17 are in progress
    assert seen == set(range(16 - KEEP, 16))
    assert int(rp.num_valid(full_replay)) == KEEP
    # episode-uniform: each held episode gets about 1/KEEP of the slices
    counts = np.array([(obs[:, 0, 0] == i).sum() for i in sorted(seen)])
    assert counts.min() > 0.7 * len(obs) / KEEP


def test_before_capacity_every_committed_episode_is_held():
    replay = fill(2, partial_steps=3)  # 4 committed (ids 0..3), 2 in progress (4, 5)
    obs, _, _, _ = slices(replay, n_batches=200, seed=1)
    assert set(np.unique(obs[:, 0, 0]).astype(int)) == {0, 1, 2, 3}
    # without the partial round the last two episodes are not committed yet
    replay = fill(3)
    obs, _, _, _ = slices(replay, n_batches=200, seed=2)
    assert set(np.unique(obs[:, 0, 0]).astype(int)) == {0, 1, 2, 3}


def test_capacity_in_episodes():
    assert rp.capacity_episodes(1_000_000, 2000, 50) == 40      # min(buffer, run) / T
    assert rp.capacity_episodes(25, 1000, 10) == 3             # ceil
    assert rp.capacity_episodes(1_000_000, 1_000_000, 500) == 2000


def test_reset_row_nan_never_reaches_a_batch_or_a_loss(full_replay):
    # the storage does hold NaN in every reset row ...
    assert np.all(np.isnan(np.asarray(full_replay.action[:, 0])))
    assert np.all(np.isnan(np.asarray(full_replay.reward[:, 0])))
    obs, act, rew, term = slices(full_replay, n_batches=300, seed=3)
    assert np.any(obs[:, 0, 1] == 0)  # ... and slices do start at the reset row
    assert np.isfinite(obs).all() and np.isfinite(act).all() and np.isfinite(rew).all()
    assert np.isfinite(term).all() and np.all(term == 0.0)
    # an update on sampled batches gives finite losses and parameters
    cfg = resolve_config(TDMPC2Config(**CFG_KW), episode_length=T, action_dim=ACT)
    wm = WorldModel(cfg, OBS, ACT)
    state = jit_init(wm, jax.random.PRNGKey(0))
    for i in range(3):
        batch = rp.sample(full_replay, jax.random.PRNGKey(100 + i), B, H)
        batch = batch._replace(obs=batch.obs * 0.1)  # ids up to 15: keep the inputs moderate
        state, metrics = jit_update(wm, state, batch, 0.95, jax.random.PRNGKey(i))
        for k, v in metrics.items():
            assert np.isfinite(float(v)), k
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree_util.tree_leaves(state))
    assert float(metrics["reward_loss"]) > 0.0 and float(metrics["consistency_loss"]) > 0.0
