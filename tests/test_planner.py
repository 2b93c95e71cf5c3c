"""MPPI planner (spec §6, §12.10): action bounds, eval mode (no exploration noise, elite
still random), warm start (shifted mean, zero last step; none at t0), value estimate,
+2 iterations for A >= 20."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tdmpc2core.model.config import TDMPC2Config, resolve_config
from tdmpc2core.model.planner import estimate_value, plan
from tdmpc2core.model.world_model import WorldModel

OBS, ACT, H = 4, 2, 3
BASE = dict(model_size=1, mlp_dim=16, latent_dim=16, enc_dim=16, num_q=2, horizon=H)


def make_wm(**kw):
    cfg = resolve_config(TDMPC2Config(**dict(BASE, **kw)), episode_length=100, action_dim=ACT)
    return WorldModel(cfg, OBS, ACT)


def random_params(wm, seed, scale=0.3):
    shapes = jax.eval_shape(wm.init, jax.random.PRNGKey(0))
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_map(
        lambda s: jnp.asarray(rng.standard_normal(s.shape) * scale + (1.0 if len(s.shape) == 1 else 0.0),
                              jnp.float32), shapes)


def plan_many(wm, eval_mode):
    """jit(vmap(plan)) over (obs, prev_mean, t0, key)."""
    g = wm.cfg.gamma
    return jax.jit(jax.vmap(lambda p, o, m, t0, k: plan(wm, p, o, m, t0, eval_mode, g, k),
                            in_axes=(None, 0, 0, 0, 0)))


def inputs(n, seed):
    rng = np.random.default_rng(seed)
    obs = jnp.asarray(rng.standard_normal((n, OBS)) * 2, jnp.float32)
    prev = jnp.asarray(rng.uniform(-1, 1, (n, H, ACT)), jnp.float32)
    t0 = jnp.asarray(rng.random(n) < 0.5)
    keys = jax.random.split(jax.random.PRNGKey(seed), n)
    return obs, prev, t0, keys


# -------------------------------------------------------------------- eval mode
@pytest.fixture(scope="module")
def one_elite():
    wm = make_wm(num_samples=32, num_elites=1, num_pi_trajs=4, iterations=2, min_std=0.05, max_std=0.5)
    params = random_params(wm, 2, scale=0.2)
    obs, prev, t0, keys = inputs(96, 3)
    f_eval = plan_many(wm, True)
    a_eval, m_eval = (np.asarray(x) for x in f_eval(params, obs, prev, t0, keys))
    a_eval2, _ = (np.asarray(x) for x in f_eval(params, obs, prev, t0, keys))
    a_train, m_train = (np.asarray(x) for x in plan_many(wm, False)(params, obs, prev, t0, keys))
    return a_eval, a_eval2, m_eval, a_train, m_train


def test_actions_within_bounds_for_many_keys(one_elite):
    a_eval, _, m_eval, a_train, m_train = one_elite
    for a, mean in ((a_eval, m_eval), (a_train, m_train)):
        assert a.shape == (96, ACT) and mean.shape == (96, H, ACT)
        assert np.isfinite(a).all() and np.all(np.abs(a) <= 1.0)
        # the mean is a weighted average of clipped samples (float rounding: 1 + 1 ulp)
        assert np.all(np.abs(mean) <= 1.0 + 1e-6)
        assert np.unique(a[:, 0]).size > 48  # not a constant
    # the clip binds: elite + noise beyond the bounds is returned as exactly +-1
    assert np.any(np.abs(a_train) == 1.0)


def test_eval_mode_returns_the_elite_without_noise(one_elite):
    a_eval, a_eval2, m_eval, a_train, m_train = one_elite
    # one elite: weight 1, so the final mean is that elite's sequence, and the eval
    # action is its first action exactly (no noise added)
    np.testing.assert_array_equal(a_eval, m_eval[:, 0])
    np.testing.assert_array_equal(a_eval, a_eval2)  # deterministic given the key
    # the noise touches only the returned action, never the mean carried to the next step
    np.testing.assert_array_equal(m_eval, m_train)


def test_train_mode_adds_sigma0_noise(one_elite):
    a_eval, _, _, a_train, _ = one_elite
    free = np.abs(a_train) < 1.0
    assert np.all(a_train[free] != a_eval[free])
    # one elite: the final std is clamped to min_std = 0.05, so train - eval = 0.05 N(0, 1)
    # wherever the clip to [-1, 1] did not bind
    z = (a_train - a_eval)[free] / 0.05
    assert z.size > 100
    assert 0.8 < z.std() < 1.2 and abs(z.mean()) < 0.25
    assert np.abs(z).max() < 5.0


def test_eval_mode_elite_is_drawn_not_averaged():
    # several elites with equal weights (temperature 0): the eval action is one elite's
    # first action, which in general is not the weighted mean
    wm = make_wm(num_samples=32, num_elites=8, num_pi_trajs=0, iterations=1, temperature=0.0, max_std=0.5)
    params = random_params(wm, 4)
    obs, prev, t0, keys = inputs(32, 5)
    a, mean = (np.asarray(x) for x in plan_many(wm, True)(params, obs, prev, t0, keys))
    assert np.mean(np.abs(a - mean[:, 0]).max(-1) > 1e-4) > 0.9


# ------------------------------------------------------------------- warm start
@pytest.fixture(scope="module")
def narrow():
    # no policy trajectories, uniform weights over elites and a tiny fixed std: the samples
    # sit on the initial mean, so the final mean ~= the initial mean
    wm = make_wm(num_samples=256, num_elites=64, num_pi_trajs=0, iterations=1, temperature=0.0,
                 min_std=1e-3, max_std=1e-3)
    return wm, random_params(wm, 6), plan_many(wm, True)


def test_warm_start_shifts_previous_mean(narrow):
    wm, params, f = narrow
    n = 16
    obs, _, _, keys = inputs(n, 7)
    rng = np.random.default_rng(8)
    prev = rng.uniform(-0.8, 0.8, (n, H, ACT)).astype(np.float32)
    a, mean = (np.asarray(x) for x in f(params, obs, jnp.asarray(prev), jnp.zeros(n, bool), keys))
    shifted = np.concatenate([prev[:, 1:], np.zeros((n, 1, ACT), np.float32)], axis=1)
    np.testing.assert_allclose(mean, shifted, atol=3e-3)
    np.testing.assert_allclose(a, prev[:, 1], atol=5e-3)
    assert np.abs(mean - prev).max() > 0.3  # not the unshifted mean


def test_t0_ignores_previous_mean(narrow):
    wm, params, f = narrow
    n = 16
    obs, _, _, keys = inputs(n, 9)
    prev = np.random.default_rng(10).uniform(-0.8, 0.8, (n, H, ACT)).astype(np.float32)
    a, mean = (np.asarray(x) for x in f(params, obs, jnp.asarray(prev), jnp.ones(n, bool), keys))
    np.testing.assert_allclose(mean, 0.0, atol=3e-3)
    np.testing.assert_allclose(a, 0.0, atol=5e-3)


# ---------------------------------------------------------------- value estimate
def test_estimate_value_matches_reference():
    """G = sum_t gamma^t r_t + gamma^H Q_avg(z_H, pi(z_H)) (spec §6.4b)."""
    wm = make_wm(num_samples=8, num_elites=2, num_pi_trajs=0)
    params = random_params(wm, 11)
    rng = np.random.default_rng(12)
    z = jax.nn.softmax(jnp.asarray(rng.standard_normal((8, 2, 8)), jnp.float32), -1).reshape(8, 16)
    actions = jnp.asarray(rng.uniform(-1, 1, (H, 8, ACT)), jnp.float32)
    key = jax.random.PRNGKey(13)
    gamma = 0.9
    G = np.asarray(jax.jit(lambda p, z, a: estimate_value(wm, p, z, a, gamma, key))(params, z, actions))

    @jax.jit
    def pieces(p, z, a):
        rs, zz = [], z
        for t in range(H):
            rs.append(wm.reward(p, zz, a[t]))
            zz = wm.next(p, zz, a[t])
        _, api, _, _ = wm.pi(p["pi"], zz, jax.random.split(key)[0])  # key layout: (k_pi, k_pair)
        return jnp.stack(rs), wm.q_all(p["qs"], zz, api)

    r_logits, q_logits = (np.asarray(x, np.float64) for x in pieces(params, z, actions))
    bins = np.linspace(-10, 10, 101)

    def dec(l):
        e = np.exp(l - l.max(-1, keepdims=True))
        s = (e / e.sum(-1, keepdims=True)) @ bins
        return np.sign(s) * np.expm1(np.abs(s))

    r = dec(r_logits)  # [H, 8]
    q = dec(q_logits).mean(0)  # K = 2: the pair is both members
    expected = sum(gamma ** t * r[t] for t in range(H)) + gamma ** H * q
    np.testing.assert_allclose(G, expected, rtol=1e-4, atol=1e-4)
    assert np.ptp(expected) > 0.1


# --------------------------------------------------------------------- iterations
@pytest.mark.parametrize("A, expected", [(1, 6), (17, 6), (19, 6), (20, 8), (21, 8), (38, 8)])
def test_iterations_plus_two_for_large_action_dims(A, expected):
    cfg = resolve_config(TDMPC2Config(), episode_length=500, action_dim=A)
    assert cfg.iterations == expected
    cfg = resolve_config(TDMPC2Config(iterations=3), episode_length=500, action_dim=A)
    assert cfg.iterations == expected - 3
    # applied once: resolving an already resolved config for A >= 20 is the caller's job,
    # but the user value is never modified in place
    assert TDMPC2Config().iterations == 6


def test_eval_mode_plan_draws_the_same_numbers_with_the_cpu_kernels_faster_generator(monkeypatch):
    # kernels.draw_key (CPU kernels: the policy trajectories' and the elite's draws from the
    # unrolled threefry generator, which XLA:CPU compiles faster) changes no number of a plan
    from tdmpc2core.model import kernels as K
    wm = make_wm(kernels="cpu", num_samples=32, num_elites=4, num_pi_trajs=4)
    p = random_params(wm, 3)
    n = 5
    rng = np.random.default_rng(0)
    args = (p, jnp.asarray(rng.standard_normal((n, OBS)), jnp.float32),
            jnp.asarray(rng.uniform(-1, 1, (n, H, ACT)), jnp.float32), jnp.asarray([True, False, False, True, False]),
            jax.random.split(jax.random.PRNGKey(11), n))
    got = plan_many(wm, True)(*args)
    monkeypatch.setattr(K.CpuKernels, "draw_key", lambda self, key: key)
    want = plan_many(wm, True)(*args)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
