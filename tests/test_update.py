"""The update step (spec §5) against a hand-written float64 numpy reference of §5.2.

The reference re-implements the networks (Linear -> LayerNorm(eps 1e-5) -> Mish, SimNorm
heads), two-hot, soft cross-entropy, the TD target, the three world-model losses and the
policy loss from the spec, reading only the parameter dicts of the library.
"""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tdmpc2core.model.config import TDMPC2Config, resolve_config
from tdmpc2core.model.update import (AgentState, Batch, clip_coef, init_agent_state, make_optimizers, policy_loss,
                               td_targets, update, world_model_loss, wm_subtrees)
from tdmpc2core.model.world_model import WorldModel

OBS, ACT, H, B = 5, 2, 3, 4
# the same tiny config as tests/test_replay.py, so the jitted update compiles once per session
CFG_KW = dict(model_size=1, mlp_dim=16, latent_dim=16, enc_dim=16, num_q=2, batch_size=B, horizon=H, dropout=0.0)
L = 16

jit_update = jax.jit(update, static_argnums=0)
jit_init = jax.jit(init_agent_state, static_argnums=0)


def make_wm(**over):
    cfg = resolve_config(TDMPC2Config(**dict(CFG_KW, **over)), episode_length=10, action_dim=ACT)
    return WorldModel(cfg, OBS, ACT)


WM = make_wm()


# ------------------------------------------------------------ numpy reference
def np_mish(x):
    return x * np.tanh(np.logaddexp(0.0, x))


def np_simnorm(x, g=8):
    s = x.reshape(*x.shape[:-1], -1, g)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).reshape(x.shape)


def np_mlp(p, x, out_act=None):
    n = len([k for k in p if k.startswith("NormedLinear_")])
    n_hidden = n if out_act is None else n - 1
    for i in range(n):
        q = p[f"NormedLinear_{i}"]
        h = x @ q["Dense_0"]["kernel"] + q["Dense_0"]["bias"]
        mu = h.mean(-1, keepdims=True)
        var = ((h - mu) ** 2).mean(-1, keepdims=True)
        h = (h - mu) / np.sqrt(var + 1e-5) * q["LayerNorm_0"]["scale"] + q["LayerNorm_0"]["bias"]
        x = np_mish(h) if i < n_hidden else np_simnorm(h)
    if out_act is None:
        x = x @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"]
    return x


def f64(tree):
    return jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), tree)


def member(qs, k):
    return jax.tree_util.tree_map(lambda x: x[k], qs)


def np_symlog(x):
    return np.sign(x) * np.log1p(np.abs(x))


def np_symexp(x):
    return np.sign(x) * np.expm1(np.abs(x))


BINS = np.linspace(-10.0, 10.0, 101)


def np_decode(logits):
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return np_symexp((e / e.sum(-1, keepdims=True)) @ BINS)


def np_soft_ce(logits, y):
    """-sum twohot(y) * log_softmax(logits) (spec §4.2, §4.4), written independently."""
    s = np.clip(np_symlog(np.asarray(y, np.float64)), -10.0, 10.0)
    u = (s + 10.0) / 0.2
    i = np.floor(u)
    w = u - i
    i = i.astype(int)
    logp = logits - (logits.max(-1, keepdims=True)
                     + np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)))
    lo = np.take_along_axis(logp, i[..., None], -1)[..., 0]
    hi = np.take_along_axis(logp, ((i + 1) % 101)[..., None], -1)[..., 0]
    return -((1.0 - w) * lo + w * hi)


def np_pi(p, z, eps, lo=-10.0, hi=2.0):
    out = np_mlp(p, z)
    mu, raw = np.split(out, 2, axis=-1)
    ls = lo + 0.5 * (hi - lo) * (np.tanh(raw) + 1.0)
    u = mu + eps * np.exp(ls)
    a = np.tanh(u)
    D = mu.shape[-1]
    logp = D * (np.sum(-0.5 * eps ** 2 - ls, -1) - 0.5 * math.log(2 * math.pi)) \
        - np.sum(np.log(np.maximum(0.0, 1.0 - a ** 2) + 1e-6), -1)
    return a, logp


def np_wm_loss(p, batch, td, next_z, cfg):
    """Spec §5.2 steps 3-5 in a plain loop."""
    obs, act, rew = (np.asarray(x, np.float64) for x in (batch.obs, batch.action, batch.reward))
    td, next_z = np.asarray(td, np.float64), np.asarray(next_z, np.float64)
    K = jax.tree_util.tree_leaves(p["qs"])[0].shape[0]
    z = np_mlp(p["encoder"], obs[0], "simnorm")
    zs = [z]
    cons = 0.0
    for t in range(H):
        z = np_mlp(p["dynamics"], np.concatenate([z, act[t]], -1), "simnorm")
        cons += cfg.rho ** t * np.mean((z - next_z[t]) ** 2)
        zs.append(z)
    r_loss = v_loss = 0.0
    for t in range(H):
        za = np.concatenate([zs[t], act[t]], -1)
        r_loss += cfg.rho ** t * np.mean(np_soft_ce(np_mlp(p["reward"], za), rew[t]))
        for k in range(K):
            v_loss += cfg.rho ** t * np.mean(np_soft_ce(np_mlp(member(p["qs"], k), za), td[t]))
    cons, r_loss, v_loss = cons / H, r_loss / H, v_loss / (H * K)
    return dict(consistency_loss=cons, reward_loss=r_loss, value_loss=v_loss,
                total_loss=20.0 * cons + 0.1 * r_loss + 0.1 * v_loss), np.stack(zs)


# --------------------------------------------------------------------- fixtures
def random_params(wm, seed, scale=0.3):
    shapes = jax.eval_shape(wm.init, jax.random.PRNGKey(0))
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_map(
        lambda s: jnp.asarray(rng.standard_normal(s.shape) * scale + (1.0 if len(s.shape) == 1 else 0.0),
                              jnp.float32), shapes)


def random_batch(seed, scale_r=3.0):
    rng = np.random.default_rng(seed)
    return Batch(obs=jnp.asarray(rng.standard_normal((H + 1, B, OBS)) * 2, jnp.float32),
                 action=jnp.asarray(rng.uniform(-1, 1, (H, B, ACT)), jnp.float32),
                 reward=jnp.asarray(rng.standard_normal((H, B)) * scale_r, jnp.float32),
                 terminated=jnp.zeros((H, B), jnp.float32))


def fresh_state(wm, params, target_qs=None):
    wm_tx, pi_tx = make_optimizers(wm.cfg)
    return AgentState(params=params, target_qs=params["qs"] if target_qs is None else target_qs,
                      wm_opt_state=wm_tx.init(wm_subtrees(params)), pi_opt_state=pi_tx.init(params["pi"]),
                      pi_scale=jnp.ones((), jnp.float32), pi_grad_sq=jnp.zeros((), jnp.float32),
                      updates=jnp.zeros((), jnp.int32))


@pytest.fixture(scope="module")
def params():
    return random_params(WM, 0)


@pytest.fixture(scope="module")
def target_qs():
    return random_params(WM, 1)["qs"]


# ------------------------------------------------------------ world-model loss
def test_world_model_loss_matches_reference(params):
    batch = random_batch(2)
    rng = np.random.default_rng(3)
    td = jnp.asarray(rng.uniform(-5, 40, (H, B)), jnp.float32)
    next_z = jnp.asarray(np_simnorm(rng.standard_normal((H, B, L)) * 2), jnp.float32)
    wmp = wm_subtrees(params)
    loss, (zs, metrics) = jax.jit(world_model_loss, static_argnums=0)(WM, wmp, params["pi"], batch, td, next_z, None)
    ref, ref_zs = np_wm_loss(f64(params), batch, td, next_z, WM.cfg)
    np.testing.assert_allclose(np.asarray(zs), ref_zs, rtol=1e-4, atol=1e-6)
    for k, v in ref.items():
        np.testing.assert_allclose(float(metrics[k]), v, rtol=2e-4, err_msg=k)
    np.testing.assert_allclose(float(loss), ref["total_loss"], rtol=2e-4)
    # each term matters in the total (a wrong weighting would show)
    assert min(ref["consistency_loss"] * 20, ref["reward_loss"] * 0.1, ref["value_loss"] * 0.1) > 1e-3
    # rho^t weights are not normalised by sum(rho^t): the normalised version is far off
    assert abs(ref["consistency_loss"] * H / (1 + 0.5 + 0.25) - ref["consistency_loss"]) > 1e-3 * ref["consistency_loss"]


def test_dropout_active_in_value_and_policy_losses():
    wm = make_wm(dropout=0.5)
    p = random_params(wm, 4)
    batch = random_batch(5)
    rng = np.random.default_rng(6)
    td = jnp.asarray(rng.uniform(-5, 40, (H, B)), jnp.float32)
    next_z = jnp.asarray(np_simnorm(rng.standard_normal((H, B, L))), jnp.float32)
    zs = jnp.asarray(np_simnorm(rng.standard_normal((H + 1, B, L))), jnp.float32)

    wm0 = dataclasses.replace(wm, cfg=dataclasses.replace(wm.cfg, dropout=0.0))

    @jax.jit
    def run(p, k1, k2):
        wmp = wm_subtrees(p)
        v_none = world_model_loss(wm, wmp, p["pi"], batch, td, next_z, None)[1][1]["value_loss"]
        v_k1 = world_model_loss(wm, wmp, p["pi"], batch, td, next_z, k1)[1][1]["value_loss"]
        v_k2 = world_model_loss(wm, wmp, p["pi"], batch, td, next_z, k2)[1][1]["value_loss"]
        pl1 = policy_loss(wm, p["pi"], p["qs"], zs, jnp.float32(1.0), k1)[0]
        pl0 = policy_loss(wm0, p["pi"], p["qs"], zs, jnp.float32(1.0), k1)[0]
        return v_none, v_k1, v_k2, pl1, pl0

    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    v_none, v_k1, v_k2, pl1, pl0 = (float(x) for x in run(p, k1, k2))
    ref, _ = np_wm_loss(f64(p), batch, td, next_z, wm.cfg)
    np.testing.assert_allclose(v_none, ref["value_loss"], rtol=2e-4)  # no key: no dropout
    assert abs(v_k1 - v_none) > 1e-4 and abs(v_k1 - v_k2) > 1e-4
    # the policy loss keeps dropout (5f6fade): same key (same pi noise and pair), the
    # dropout-0 model gives another value
    assert abs(pl1 - pl0) > 1e-4


# ------------------------------------------------------------------ TD targets
def _td_reference(p, tq, batch, gamma, eps):
    nz = np_mlp(p["encoder"], np.asarray(batch.obs[1:], np.float64), "simnorm")
    a, _ = np_pi(p["pi"], nz, eps)
    za = np.concatenate([nz, a], -1)
    q = np.minimum(np_decode(np_mlp(member(tq, 0), za)), np_decode(np_mlp(member(tq, 1), za)))
    return np.asarray(batch.reward, np.float64) + gamma * q, nz, q


def test_td_targets_match_reference(params, target_qs):
    batch = random_batch(7)
    key = jax.random.PRNGKey(42)
    f = jax.jit(td_targets, static_argnums=0)
    td, nz = f(WM, params, target_qs, batch, 0.95, key)
    td2, _ = f(WM, params, target_qs, batch, 0.5, key)
    # the policy noise of the target action: k_pi is the first half of split(key)
    eps = np.asarray(jax.random.normal(jax.random.split(key)[0], (H, B, ACT)), np.float64)
    ref, ref_nz, q = _td_reference(f64(params), f64(target_qs), batch, 0.95, eps)
    np.testing.assert_allclose(np.asarray(nz), ref_nz, rtol=1e-4, atol=1e-6)  # online encoder
    np.testing.assert_allclose(np.asarray(td), ref, rtol=1e-4, atol=1e-4)
    # gamma enters linearly: td(0.95) - td(0.5) = 0.45 * Q_min
    np.testing.assert_allclose(np.asarray(td) - np.asarray(td2), 0.45 * q, rtol=1e-3, atol=1e-4)
    assert np.abs(q).max() > 0.1
    # the target net is used, not the online one
    online, _, _ = _td_reference(f64(params), f64(params["qs"]), batch, 0.95, eps)
    assert np.abs(online - ref).max() > 1e-2
    # a sampled action, not the mean action tanh(mu)
    mean_td, _, _ = _td_reference(f64(params), f64(target_qs), batch, 0.95, 0.0 * eps)
    assert np.abs(mean_td - ref).max() > 1e-3


# ----------------------------------------------------------------- policy loss
def test_policy_loss_formula_with_running_scale(params):
    # a sharper Q head, so the batch of Q values spreads over more than 1 (S moves)
    qs = dict(params["qs"], Dense_0={"kernel": params["qs"]["Dense_0"]["kernel"] * 20.0,
                                     "bias": params["qs"]["Dense_0"]["bias"]})
    params = dict(params, qs=qs)
    rng = np.random.default_rng(8)
    zs = jnp.asarray(np_simnorm(rng.standard_normal((H + 1, B * 8, L)) * 2), jnp.float32)
    key = jax.random.PRNGKey(3)
    f = jax.jit(policy_loss, static_argnums=0)
    k_pi = jax.random.split(key, 3)[0]  # key layout of policy_loss: (k_pi, k_pair, k_drop)
    eps = np.asarray(jax.random.normal(k_pi, (H + 1, B * 8, ACT)), np.float64)
    p = f64(params)
    zs64 = np.asarray(zs, np.float64)
    a, logp = np_pi(p["pi"], zs64, eps)
    za = np.concatenate([zs64, a], -1)
    q = 0.5 * (np_decode(np_mlp(member(p["qs"], 0), za)) + np_decode(np_mlp(member(p["qs"], 1), za)))
    p5, p95 = np.percentile(q[0], [5, 95], method="linear")  # S from the t = 0 values only
    assert p95 - p5 > 1.5
    rho = 0.5 ** np.arange(H + 1)
    for s0 in (1.0, 50.0):
        loss, (new_scale, m) = f(WM, params["pi"], params["qs"], zs, jnp.float32(s0), key)
        s_new = s0 + 0.01 * (max(p95 - p5, 1.0) - s0)
        np.testing.assert_allclose(float(new_scale), s_new, rtol=1e-5)
        per_t = np.mean(1e-4 * logp - q / s_new, axis=-1)
        expected = np.mean(per_t * rho)  # mean over H+1 steps, rho^t not normalised
        np.testing.assert_allclose(float(loss), expected, rtol=1e-4)
        stale = np.mean(np.mean(1e-4 * logp - q / s0, axis=-1) * rho)  # S before its update
        assert abs(stale - expected) > 1e-3 * abs(expected)
    # Q params frozen inside the policy loss: no gradient reaches them
    gq = jax.jit(jax.grad(lambda qs: policy_loss(WM, params["pi"], qs, zs, jnp.float32(1.0), key)[0]))(params["qs"])
    assert all(float(jnp.max(jnp.abs(g))) == 0.0 for g in jax.tree_util.tree_leaves(gq))


# ---------------------------------------------------------------------- update
def _leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def _adam_mus(opt_state):
    states = [s for s in jax.tree_util.tree_leaves(opt_state, is_leaf=lambda x: isinstance(x, optax.ScaleByAdamState))
              if isinstance(s, optax.ScaleByAdamState)]
    assert len(states) == 2  # encoder group, rest group
    return [np.asarray(x) for s in states for x in jax.tree_util.tree_leaves(s.mu)]


@pytest.fixture(scope="module")
def one_update(params, target_qs):
    state = fresh_state(WM, params, target_qs)
    batch = random_batch(9)
    new, metrics = jit_update(WM, state, batch, 0.95, jax.random.PRNGKey(5))
    return state, batch, new, metrics


def test_update_changes_params_and_soft_updates_target(one_update):
    state, batch, new, metrics = one_update
    for name in ("encoder", "dynamics", "reward", "qs", "pi"):
        old_l, new_l = _leaves(state.params[name]), _leaves(new.params[name])
        assert any(not np.array_equal(o, n) for o, n in zip(old_l, new_l)), name
    # target_new = target + 0.01 (online_new - target)
    for t_old, o_new, t_new in zip(_leaves(state.target_qs), _leaves(new.params["qs"]), _leaves(new.target_qs)):
        expected = t_old.astype(np.float64) + 0.01 * (o_new.astype(np.float64) - t_old)
        np.testing.assert_allclose(t_new, expected, rtol=1e-6, atol=1e-7)
        assert not np.allclose(t_new, o_new)
    assert int(new.updates) == 1
    assert all(np.isfinite(float(v)) for v in metrics.values())
    np.testing.assert_allclose(float(new.pi_scale), float(metrics["pi_scale"]))


def test_update_losses_equal_reference_losses(one_update, params):
    # the metrics of update() are the losses of spec §5.2 at the TD targets of step 1
    state, batch, new, metrics = one_update
    key = jax.random.PRNGKey(5)
    k_td = jax.random.split(key, 3)[0]
    td, nz = jax.jit(td_targets, static_argnums=0)(WM, params, state.target_qs, batch, 0.95, k_td)
    ref, _ = np_wm_loss(f64(params), batch, td, nz, WM.cfg)
    for k, v in ref.items():
        np.testing.assert_allclose(float(metrics[k]), v, rtol=2e-4, err_msg=k)


def test_encoder_learning_rate_is_03x(one_update):
    # first Adam step from a zero state: |delta| = lr |g| / (|g| + 1e-8) ~= lr
    state, batch, new, metrics = one_update
    for name, lr in (("encoder", 9e-5), ("dynamics", 3e-4), ("reward", 3e-4), ("qs", 3e-4)):
        d = np.concatenate([np.abs(n.astype(np.float64) - o).ravel()
                            for o, n in zip(_leaves(state.params[name]), _leaves(new.params[name]))])
        big = d[d > 1e-5]
        assert big.size > 0.5 * d.size, name  # grads are non-negligible almost everywhere
        assert big.max() < lr * 1.01, (name, big.max())
        np.testing.assert_allclose(np.median(big), lr, rtol=0.01, err_msg=name)


def test_stale_policy_gradient_enters_world_model_clip(params):
    batch = random_batch(10)
    key = jax.random.PRNGKey(6)
    s0 = fresh_state(WM, params)
    big = 1e6
    n0, m0 = jit_update(WM, s0, batch, 0.95, key)
    n1, _ = jit_update(WM, s0._replace(pi_grad_sq=jnp.float32(big)), batch, 0.95, key)
    g = float(m0["grad_norm"])
    coef0 = min(1.0, 20.0 / (g + 1e-6))
    coef1 = 20.0 / (math.sqrt(g * g + big) + 1e-6)
    assert coef1 < 0.1 * coef0
    # Adam's first moment holds (1 - b1) * clipped grad: the ratio is the clip coefficient
    for mu0, mu1 in zip(_adam_mus(n0.wm_opt_state), _adam_mus(n1.wm_opt_state)):
        nz = np.abs(mu0) > 1e-9
        np.testing.assert_allclose(mu1[nz] / mu0[nz], coef1 / coef0, rtol=1e-3)
    # an enormous stale norm shrinks the world-model step to nothing
    n2, _ = jit_update(WM, s0._replace(pi_grad_sq=jnp.float32(1e30)), batch, 0.95, key)
    d = max(np.abs(a - b).max() for a, b in zip(_leaves(wm_subtrees(n2.params)), _leaves(wm_subtrees(s0.params))))
    assert d < 1e-6
    # pi_grad_sq stores the squared norm of the clipped policy gradient (<= 20^2)
    assert 0.0 < float(n0.pi_grad_sq) <= 400.0 * (1 + 1e-5)


@pytest.mark.slow
def test_stale_policy_gradient_off_does_not_clip(params):
    wm = make_wm(stale_pi_grad_in_clip=False)
    batch = random_batch(10)
    key = jax.random.PRNGKey(6)
    s0 = fresh_state(wm, params)
    f = jax.jit(lambda s: update(wm, s, batch, 0.95, key))
    n0, _ = f(s0)
    n1, _ = f(s0._replace(pi_grad_sq=jnp.float32(1e30)))
    for a, b in zip(_leaves(wm_subtrees(n0.params)), _leaves(wm_subtrees(n1.params))):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(_adam_mus(n0.wm_opt_state), _adam_mus(n1.wm_opt_state)):
        np.testing.assert_array_equal(a, b)


def test_clip_coef_is_pytorch_style():
    np.testing.assert_allclose(float(clip_coef(jnp.float32(1600.0), 20.0)), 20.0 / (40.0 + 1e-6), rtol=1e-6)
    assert float(clip_coef(jnp.float32(100.0), 20.0)) == 1.0
    assert float(clip_coef(jnp.float32(0.0), 20.0)) == 1.0


def test_same_seed_gives_bitwise_identical_parameters():
    batch = random_batch(11)

    def run(seed, key):
        st = jit_init(WM, jax.random.PRNGKey(seed))
        for i in range(2):
            st, _ = jit_update(WM, st, batch, 0.95, jax.random.fold_in(key, i))
        return st

    a = run(0, jax.random.PRNGKey(1))
    b = run(0, jax.random.PRNGKey(1))
    c = run(0, jax.random.PRNGKey(2))
    for x, y in zip(_leaves(a), _leaves(b)):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, y) for x, y in zip(_leaves(a.params), _leaves(c.params)))


# ------------------------------------------------------------ optimizer settings (spec §5.3)
SCHED = {"kind": "warmup_cosine", "init_value": 1e-4, "peak_value": 1e-3, "warmup_steps": 2, "decay_steps": 10}


def _opt_tree(seed, scale=1.0):
    """A small parameter-shaped tree: the encoder group and the rest (task embedding included)."""
    rng = np.random.default_rng(seed)
    shapes = {"encoder": {"kernel": (3, 4), "bias": (4,)}, "dynamics": {"kernel": (4, 4)}, "task_emb": (2, 3)}
    return jax.tree_util.tree_map(lambda s: jnp.asarray(scale * rng.normal(size=s), jnp.float32), shapes,
                                  is_leaf=lambda x: isinstance(x, tuple))


def _steps(tx, params, grads):
    """``len(grads)`` steps of ``tx`` from its initial state, one jitted program."""
    def run(params, grads):
        state = tx.init(params)
        for g in grads:
            upd, state = tx.update(g, state, params)
            params = optax.apply_updates(params, upd)
        return params, state

    return jax.jit(run)(params, grads)


def test_schedule_and_weight_decay_are_optax_adamw_per_group():
    """make_optimizers with a named schedule and weight decay: three world-model steps equal
    optax.adamw per group (the encoder at the schedule times enc_lr_scale), the policy's with
    eps pi_eps; the first step is -lr(0) (g / (|g| + eps) + wd p) by hand; the schedule's
    count, which a checkpoint saves, is the number of updates done."""
    wd = 0.05
    cfg = TDMPC2Config(learning_rate=SCHED, weight_decay=wd)
    wm_tx, pi_tx = make_optimizers(cfg)
    sched = optax.warmup_cosine_decay_schedule(1e-4, 1e-3, 2, 10)
    p0 = _opt_tree(0)
    grads = [_opt_tree(10 + i, 0.1) for i in range(3)]
    got, state = _steps(wm_tx, p0, grads)
    counts = [int(s.count) for s in jax.tree_util.tree_leaves(
        state, is_leaf=lambda x: isinstance(x, optax.ScaleByScheduleState)) if isinstance(s, optax.ScaleByScheduleState)]
    assert counts == [3, 3]  # encoder group, rest group
    one, _ = _steps(wm_tx, p0, grads[:1])
    for name, lr in (("encoder", lambda c: 0.3 * sched(c)), ("dynamics", sched), ("task_emb", sched)):
        ref, _ = _steps(optax.adamw(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=wd), p0[name], [g[name] for g in grads])
        for a, b in zip(_leaves(got[name]), _leaves(ref)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9, err_msg=name)
        for p, g, a in zip(_leaves(p0[name]), _leaves(grads[0][name]), _leaves(one[name])):
            p, g = p.astype(np.float64), g.astype(np.float64)
            np.testing.assert_allclose(a, p - float(lr(0)) * (g / (np.abs(g) + 1e-8) + wd * p), rtol=1e-5, atol=1e-9)
    pi_got, _ = _steps(pi_tx, p0["dynamics"], [g["dynamics"] for g in grads])
    pi_ref, _ = _steps(optax.adamw(sched, eps=1e-5, weight_decay=wd), p0["dynamics"], [g["dynamics"] for g in grads])
    for a, b in zip(_leaves(pi_got), _leaves(pi_ref)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)
    # a library callable is taken as it is (the encoder's scaled); decay 0 is plain Adam
    wm_c, _ = make_optimizers(TDMPC2Config(learning_rate=sched))
    got_c, _ = _steps(wm_c, p0, grads)
    ref_c, _ = _steps(optax.adam(lambda c: 0.3 * sched(c)), p0["encoder"], [g["encoder"] for g in grads])
    for a, b in zip(_leaves(got_c["encoder"]), _leaves(ref_c)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)


def _program(tx, params):
    """The update's StableHLO without debug info (lowered, not compiled)."""
    low = jax.jit(lambda g, s, p: tx.update(g, s, p)).lower(params, tx.init(params), params)
    return low.compiler_ir("stablehlo").operation.get_asm(enable_debug_info=False)


def test_default_optimizers_are_the_reference_plain_adam_program():
    """learning_rate a float and weight_decay 0: the programs of the reference's Adam
    construction, op for op (no schedule, no decay term)."""
    def label(tree):
        return {k: jax.tree_util.tree_map(lambda _: "encoder" if k == "encoder" else "rest", v) for k, v in tree.items()}

    p = _opt_tree(0)
    wm_tx, pi_tx = make_optimizers(TDMPC2Config())
    ref_wm = optax.multi_transform({"encoder": optax.flatten(optax.adam(3e-4 * 0.3, b1=0.9, b2=0.999, eps=1e-8)),
                                    "rest": optax.flatten(optax.adam(3e-4, b1=0.9, b2=0.999, eps=1e-8))}, label)
    assert _program(wm_tx, p) == _program(ref_wm, p)
    assert _program(pi_tx, p["dynamics"]) == _program(optax.flatten(optax.adam(3e-4, eps=1e-5)), p["dynamics"])
    # the reference kernels: the same Adam on each parameter array (Kernels.flat_optimizer)
    wm_tx, pi_tx = make_optimizers(TDMPC2Config(kernels="reference"))
    ref_wm = optax.multi_transform({"encoder": optax.adam(3e-4 * 0.3, b1=0.9, b2=0.999, eps=1e-8),
                                    "rest": optax.adam(3e-4, b1=0.9, b2=0.999, eps=1e-8)}, label)
    assert _program(wm_tx, p) == _program(ref_wm, p)
    assert _program(pi_tx, p["dynamics"]) == _program(optax.adam(3e-4, eps=1e-5), p["dynamics"])


@pytest.mark.parametrize("over,message", [
    ({"learning_rate": {"kind": "cosin"}}, "learning_rate.kind='cosin' is not a schedule; accepted: ['constant', "),
    ({"learning_rate": {"kind": "cosine", "init_value": 3e-4}}, "the 'cosine' schedule needs ['decay_steps']"),
    ({"learning_rate": {"kind": "constant", "value": 3e-4, "warmup": 5}},
     "unknown parameter(s) ['warmup'] of the 'constant' schedule; accepted: ['value'] (required)"),
    ({"learning_rate": {"kind": "linear", "init_value": 1e-3, "end_value": 0.0, "transition_steps": 1.5}},
     "learning_rate.transition_steps=1.5 is not an update count; accepted: an integer >= 0"),
    ({"learning_rate": {"kind": "cosine", "init_value": "3e-4", "decay_steps": 10}},
     "learning_rate.init_value='3e-4' is not accepted; accepted: a finite number >= 0 (YAML reads 3e-4"),
    ({"learning_rate": {**SCHED, "warmup_steps": 10}}, "decay_steps=10 must exceed warmup_steps=10"),
    ({"learning_rate": {"kind": "constant", "value": 0.0}},
     "the 'constant' schedule is 0 throughout ({'value': 0.0}); accepted: a schedule whose largest rate is > 0"),
    ({"learning_rate": -1e-3}, "learning_rate=-0.001 is not accepted; accepted: a finite number > 0, a schedule"),
    ({"learning_rate": [1e-3]}, "learning_rate=[0.001] is not accepted"),
    ({"weight_decay": -0.1}, "weight_decay=-0.1 is not accepted; accepted: a finite number >= 0"),
    ({"updates_per_step": 0}, "updates_per_step=0 is not accepted; accepted: a finite number > 0"),
    ({"updates_per_step": float("nan")}, "updates_per_step=nan is not accepted"),
])
def test_optimizer_settings_are_refused_in_one_line(over, message):
    with pytest.raises(ValueError) as e:
        TDMPC2Config(**over)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_optimizer_settings_are_recorded_readably_and_only_when_set():
    """config_record: the defaults' record is the one runs and checkpoints were made with (no
    weight_decay, no updates_per_step, no obs or num_channels), so their ids and settings hold; a named schedule is its
    mapping, a callable its name; the settings' differences are named on a resume."""
    from tdmpc2core.io.checkpoint import compare_settings
    from tdmpc2core.model.config import LRSchedule, config_record

    default = config_record(TDMPC2Config())
    assert set(default) == {f.name for f in dataclasses.fields(TDMPC2Config)} - {"weight_decay", "updates_per_step",
                                                                                "obs", "num_channels"}
    assert default["learning_rate"] == 3e-4
    cfg = TDMPC2Config(learning_rate=SCHED, weight_decay=0.1, updates_per_step=2.0)
    assert isinstance(cfg.learning_rate, LRSchedule) and hash(cfg) == hash(TDMPC2Config(**dict(
        learning_rate=dict(reversed(list(SCHED.items()))), weight_decay=0.1, updates_per_step=2.0)))
    rec = config_record(cfg)
    assert rec["learning_rate"] == SCHED and rec["weight_decay"] == 0.1 and rec["updates_per_step"] == 2.0
    assert TDMPC2Config(learning_rate=rec["learning_rate"]).learning_rate == cfg.learning_rate  # read back
    sched = optax.cosine_decay_schedule(1e-3, 100)
    assert config_record(TDMPC2Config(learning_rate=sched))["learning_rate"] == {
        "kind": "callable", "name": "optax.schedules._schedule.cosine_decay_schedule.<locals>.schedule"}
    diffs = compare_settings({"agent": default}, {"agent": rec})
    assert diffs[0] == "agent.learning_rate: checkpoint 0.0003, now (absent)"
    assert diffs[-2:] == ["agent.updates_per_step: checkpoint (absent), now 2.0",
                          "agent.weight_decay: checkpoint (absent), now 0.1"]
    other = config_record(TDMPC2Config(learning_rate=dict(SCHED, decay_steps=20)))
    assert compare_settings({"agent": other}, {"agent": rec})[0] == "agent.learning_rate.decay_steps: checkpoint 20, now 10"


# ------------------------------------------------------------ the optimizer state's two layouts
def test_optimizer_layouts_step_alike_and_checkpoints_read_into_each_other(tmp_path):
    """The CPU kernels' flat Adam (one vector per parameter group, ``optax.flatten``) and the
    reference kernels' per-parameter Adam (``Kernels.flat_optimizer``): three updates from the
    same state give the same parameters to float32 rounding (the same elementwise arithmetic,
    fused otherwise by XLA), and a
    checkpoint of either layout restores into the other's template as that layout's state
    (``checkpoint.regrouped_leaves``): what a run saved before the reference kernels' layout
    changed resumes with the new one. A template that does not add up is still refused."""
    from tdmpc2core.io import checkpoint as ck
    from tdmpc2core.model.kernels import ReferenceKernels

    class FlatReference(ReferenceKernels):  # the reference networks with the flat layout
        flat_optimizer = True

    wm_leaf = make_wm(kernels="reference", dropout=0.01)
    wm_flat = make_wm(kernels="reference", dropout=0.01)
    object.__setattr__(wm_flat, "kernels", FlatReference(wm_flat.cfg.matmul_precision))
    assert not wm_leaf.kernels.flat_optimizer and wm_flat != wm_leaf
    params = random_params(wm_leaf, 3)
    states = {}
    for name, wm in (("leaf", wm_leaf), ("flat", wm_flat)):
        wm_tx, pi_tx = make_optimizers(wm.cfg, wm.kernels)
        st = AgentState(params=params, target_qs=params["qs"], wm_opt_state=wm_tx.init(wm_subtrees(params)),
                        pi_opt_state=pi_tx.init(params["pi"]), pi_scale=jnp.ones((), jnp.float32),
                        pi_grad_sq=jnp.zeros((), jnp.float32), updates=jnp.zeros((), jnp.int32))
        for i in range(3):
            st, _ = jit_update(wm, st, random_batch(10 + i), wm.cfg.gamma, jax.random.PRNGKey(i))
        states[name] = st
    mu_flat = states["flat"].wm_opt_state.inner_states["rest"].inner_state[0].mu
    mu_leaf = states["leaf"].wm_opt_state.inner_states["rest"].inner_state[0].mu
    assert jnp.ndim(mu_flat) == 1 and isinstance(mu_leaf, dict)  # the two layouts really differ
    # XLA fuses the two programs' elementwise steps differently: a few elements differ in the last bit
    for a, b in zip(jax.tree_util.tree_leaves(states["flat"].params), jax.tree_util.tree_leaves(states["leaf"].params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)

    # flat -> per-parameter -> flat: the same bits; the per-parameter arrays are the flat vectors' pieces
    from jax.flatten_util import ravel_pytree

    info = ck.save(tmp_path / "flat", 3, {"state": states["flat"]}, settings={})
    got, _, _ = ck.restore(info.path, jax.eval_shape(lambda: {"state": states["leaf"]}))
    leaf = got["state"]
    for group in ("encoder", "rest"):
        for k in ("mu", "nu"):
            flat_v = getattr(states["flat"].wm_opt_state.inner_states[group].inner_state[0], k)
            np.testing.assert_array_equal(ravel_pytree(getattr(leaf.wm_opt_state.inner_states[group].inner_state[0], k))[0],
                                          np.asarray(flat_v))
    np.testing.assert_array_equal(ravel_pytree(leaf.pi_opt_state[0].nu)[0], np.asarray(states["flat"].pi_opt_state[0].nu))
    for a, b in zip(jax.tree_util.tree_leaves(leaf), jax.tree_util.tree_leaves(states["leaf"])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
    info = ck.save(tmp_path / "leaf", 3, {"state": leaf}, settings={})
    back, _, _ = ck.restore(info.path, jax.eval_shape(lambda: {"state": states["flat"]}))
    for a, b in zip(jax.tree_util.tree_leaves(back["state"]), jax.tree_util.tree_leaves(states["flat"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # the restored state runs on (the step of a run resumed with the other layout)
    st, m = jit_update(wm_leaf, jax.tree_util.tree_map(jnp.asarray, leaf), random_batch(13), wm_leaf.cfg.gamma,
                       jax.random.PRNGKey(3))
    assert np.isfinite(float(m["consistency_loss"]))
    # a flat vector that does not add up to the template's leaves is a mismatch, named
    short = states["flat"]._replace(pi_opt_state=jax.tree_util.tree_map(
        lambda x: x[:-1] if jnp.ndim(x) == 1 else x, states["flat"].pi_opt_state))
    info = ck.save(tmp_path / "short", 3, {"state": short}, settings={})
    with pytest.raises(ck.CheckpointMismatchError, match=r"pi_opt_state\[0\]\.mu\['.*: not in the checkpoint"):
        ck.restore(info.path, jax.eval_shape(lambda: {"state": states["leaf"]}))
