"""World-model networks (spec §3): parameter counts, initialisation, LayerNorm epsilon,
architecture (numpy forward), Q-pair reductions and dropout placement."""
from __future__ import annotations

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tdmpc2core.model import kernels as K
from tdmpc2core.model import math as tm
from tdmpc2core.model.config import MODEL_SIZES, TDMPC2Config, resolve_config
from tdmpc2core.model.networks import MLP, NormedLinear, count_params
from tdmpc2core.model.world_model import WorldModel

OBS, ACT = 24, 6  # walker-like state task (spec §1.2 single-task column)


# --------------------------------------------------------------------- helpers
def expected_param_count(obs, A, enc_dim, mlp_dim, latent_dim, num_enc_layers, num_q, num_bins=101):
    """Count from the layer widths of spec §3.2 (Linear in*out+out, LayerNorm 2*out)."""
    def linear(i, o):
        return i * o + o

    def normed(i, o):
        return linear(i, o) + 2 * o

    enc, prev = 0, obs
    for _ in range(max(num_enc_layers - 1, 1)):
        enc += normed(prev, enc_dim)
        prev = enc_dim
    enc += normed(prev, latent_dim)
    za = latent_dim + A
    dyn = normed(za, mlp_dim) + normed(mlp_dim, mlp_dim) + normed(mlp_dim, latent_dim)
    rew = normed(za, mlp_dim) + normed(mlp_dim, mlp_dim) + linear(mlp_dim, num_bins)
    pi = normed(latent_dim, mlp_dim) + normed(mlp_dim, mlp_dim) + linear(mlp_dim, 2 * A)
    q = num_q * (normed(za, mlp_dim) + normed(mlp_dim, mlp_dim) + linear(mlp_dim, num_bins))
    return enc + dyn + rew + pi + q


def make_wm(obs=OBS, A=ACT, T=500, **kw):
    cfg = resolve_config(TDMPC2Config(**kw), episode_length=T, action_dim=A)
    return WorldModel(cfg, obs, A)


def np_mish(x):
    return x * np.tanh(np.logaddexp(0.0, x))


def np_simnorm(x, g=8):
    s = x.reshape(*x.shape[:-1], -1, g)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).reshape(x.shape)


def np_layernorm(h, scale, bias, eps=1e-5):
    mu = h.mean(-1, keepdims=True)
    var = ((h - mu) ** 2).mean(-1, keepdims=True)
    return (h - mu) / np.sqrt(var + eps) * scale + bias


def np_mlp(p, x, out_act=None):
    """float64 forward of networks.MLP from its parameter dict (spec §3.1)."""
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), p)
    n = len([k for k in p if k.startswith("NormedLinear_")])
    n_hidden = n if out_act is None else n - 1
    for i in range(n):
        q = p[f"NormedLinear_{i}"]
        h = x @ q["Dense_0"]["kernel"] + q["Dense_0"]["bias"]
        h = np_layernorm(h, q["LayerNorm_0"]["scale"], q["LayerNorm_0"]["bias"])
        x = np_mish(h) if i < n_hidden else np_simnorm(h)
    if out_act is None:
        x = x @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"]
    return x


def random_params(wm, seed, scale=0.3):
    """Parameters with the init's structure and random (non-zero) values everywhere, so
    the zero-init heads give non-trivial outputs (numpy RNG: no XLA compile needed)."""
    shapes = jax.eval_shape(wm.init, jax.random.PRNGKey(0))
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_map(
        lambda s: jnp.asarray(rng.standard_normal(s.shape) * scale + (1.0 if len(s.shape) == 1 else 0.0),
                              jnp.float32), shapes)


@pytest.fixture(scope="module")
def real_params():
    """Initialised parameters of presets 1, 5, 19 (state task obs 24, A 6)."""
    out = {}
    for size in (1, 5, 19):
        wm = make_wm(model_size=size)
        out[size] = (wm, jax.jit(wm.init)(jax.random.PRNGKey(size)))
    return out


# ------------------------------------------------------------- parameter counts
@pytest.mark.parametrize("size", [1, 5, 19])
def test_param_count_of_built_presets(real_params, size):
    wm, params = real_params[size]
    w = MODEL_SIZES[size]
    assert count_params(params) == expected_param_count(OBS, ACT, **w)


@pytest.mark.parametrize("size", [48, 317])
def test_param_count_of_big_presets_via_eval_shape(size):
    wm = make_wm(model_size=size)
    shapes = jax.eval_shape(wm.init, jax.random.PRNGKey(0))
    n = sum(math.prod(s.shape) for s in jax.tree_util.tree_leaves(shapes))
    assert n == expected_param_count(OBS, ACT, **MODEL_SIZES[size])
    assert jax.tree_util.tree_leaves(shapes)[0].dtype == jnp.float32


def test_param_counts_match_spec_figures(real_params):
    # spec §1.2: 5M single-task walker (obs 24, A 6) = 4.96 M; the Q ensemble ~2.9 M of it
    wm, params = real_params[5]
    n = count_params(params)
    assert n == 4_960_618
    assert round(n / 1e6, 2) == 4.96
    assert round(count_params(params["qs"]) / 1e6, 1) == 2.9
    # dog (obs 223, A 38): 5.16 M
    assert round(expected_param_count(223, 38, **MODEL_SIZES[5]) / 1e6, 2) == 5.16
    dog = make_wm(obs=223, A=38, model_size=5)
    shapes = jax.eval_shape(dog.init, jax.random.PRNGKey(0))
    assert sum(math.prod(s.shape) for s in jax.tree_util.tree_leaves(shapes)) == expected_param_count(
        223, 38, **MODEL_SIZES[5])
    # presets differ in num_q: 2 for size 1, 8 for size 317
    assert jax.tree_util.tree_leaves(real_params[1][1]["qs"])[0].shape[0] == 2
    big = jax.eval_shape(make_wm(model_size=317).init, jax.random.PRNGKey(0))
    assert jax.tree_util.tree_leaves(big["qs"])[0].shape[0] == 8
    # the encoder of preset 19 has num_enc_layers - 1 = 2 hidden layers + the output layer
    assert sorted(real_params[19][1]["encoder"]) == ["NormedLinear_0", "NormedLinear_1", "NormedLinear_2"]


# ------------------------------------------------------------------ initialisation
def _dense_kernels(tree, prefix=""):
    out = {}
    for k, v in tree.items():
        name = f"{prefix}/{k}"
        if isinstance(v, dict):
            if "kernel" in v:
                out[name] = (v["kernel"], v["bias"])
            else:
                out.update(_dense_kernels(v, name))
    return out


def test_linear_init_normal_002_zero_bias(real_params):
    wm, params = real_params[5]
    dense = _dense_kernels(params)
    zero_heads = {"/reward/Dense_0", "/qs/Dense_0"}
    assert zero_heads <= set(dense)
    checked = 0
    for name, (k, b) in dense.items():
        k, b = np.asarray(k), np.asarray(b)
        assert np.all(b == 0.0), name
        if name in zero_heads:
            assert np.all(k == 0.0), name  # spec §3.7 zero init of reward and Q heads
            continue
        assert np.any(k != 0.0), name
        if k.size >= 50_000:
            checked += 1
            assert abs(k.std() - 0.02) < 0.02 * 0.02, (name, k.std())
            assert abs(k.mean()) < 5e-4, name
            # untruncated: |w| > 2 sigma happens (~4.6%); truncated_normal(0.02) never exceeds 0.04
            frac = np.mean(np.abs(k) > 0.04)
            assert 0.03 < frac < 0.065, (name, frac)
    assert checked >= 8
    # the policy head is not zeroed (spec §3.7)
    assert np.asarray(params["pi"]["Dense_0"]["kernel"]).std() > 0.015
    # Q members are initialised independently
    q0 = np.asarray(params["qs"]["NormedLinear_0"]["Dense_0"]["kernel"])
    assert q0.shape[0] == 5 and not np.allclose(q0[0], q0[1])


def test_layernorm_params_init(real_params):
    wm, params = real_params[1]
    n = 0
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        names = [getattr(p, "key", None) for p in path]
        if "LayerNorm_0" in names:
            n += 1
            expected = 1.0 if names[-1] == "scale" else 0.0
            assert np.all(np.asarray(leaf) == expected), names
    assert n > 20


def test_zero_init_heads_predict_exactly_zero(real_params):
    wm, params = real_params[1]
    rng = np.random.default_rng(7)

    @jax.jit
    def run(params):
        k3 = jax.random.PRNGKey(7)
        z = tm.simnorm(jnp.asarray(rng.standard_normal((32, wm.cfg.latent_dim)) * 3.0, jnp.float32))
        a = jnp.asarray(rng.uniform(-1.0, 1.0, (32, ACT)), jnp.float32)
        r_logits = wm.reward(params, z, a)
        return (r_logits, wm.q_all(params["qs"], z, a), tm.two_hot_inv(r_logits, -10.0, 10.0),
                wm.q_pair(params["qs"], z, a, k3, "avg"), wm.q_pair(params["qs"], z, a, k3, "min"))

    r_logits, q_logits, r, q, qmin = (np.asarray(v) for v in run(params))
    assert r_logits.shape == (32, 101) and q_logits.shape == (2, 32, 101)
    assert np.max(np.abs(r_logits)) == 0.0
    assert np.max(np.abs(q_logits)) == 0.0
    # symexp(mean of the bins) = 0 (float32 linspace puts bin 50 at -3e-7: |v| < 1e-6)
    for v in (r, q, qmin):
        assert np.all(np.abs(v) < 1e-6) and np.all(v == v[0])


# ----------------------------------------------------------- LayerNorm epsilon 1e-5
def test_layernorm_epsilon_is_1e5():
    mod = NormedLinear(8, "mish")
    p = mod.init(jax.random.PRNGKey(0), jnp.zeros((1, 8)))["params"]
    p = jax.tree_util.tree_map(lambda x: x, p)
    p["Dense_0"]["kernel"] = jnp.eye(8, dtype=jnp.float32)
    x = np.array([[1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 1.5, -1.5]]) * 1e-3  # variance 1.875e-6
    got = np.asarray(mod.apply({"params": p}, jnp.asarray(x, jnp.float32)), np.float64)
    ones, zeros = np.ones(8), np.zeros(8)
    ref5 = np_mish(np_layernorm(x, ones, zeros, 1e-5))
    ref6 = np_mish(np_layernorm(x, ones, zeros, 1e-6))
    np.testing.assert_allclose(got, ref5, rtol=1e-4, atol=1e-6)
    assert np.max(np.abs(ref5 - ref6)) > 0.1
    assert np.max(np.abs(got - ref6)) > 0.1


# ----------------------------------------------------- architecture (numpy forward)
def test_modules_match_numpy_forward():
    wm = make_wm(obs=5, A=3, model_size=1, mlp_dim=24, latent_dim=16, enc_dim=20, num_q=3)
    key = jax.random.PRNGKey(5)

    params = random_params(wm, 1, scale=0.2)
    rng = np.random.default_rng(2)
    obs = jnp.asarray(rng.standard_normal((6, 5)) * 2.0, jnp.float32)
    a = jnp.asarray(rng.uniform(-1, 1, (6, 3)), jnp.float32)

    @jax.jit
    def run(params, obs, a):
        z = wm.encode(params, obs)
        return (params, obs, a, z, wm.next(params, z, a), wm.reward(params, z, a),
                wm.q_all(params["qs"], z, a), wm.pi(params["pi"], z, key))

    params, obs, a, z, nxt, rew, q_all, pi_out = jax.tree_util.tree_map(
        lambda x: np.asarray(x, np.float64), run(params, obs, a))
    z_ref = np_mlp(params["encoder"], obs, "simnorm")
    np.testing.assert_allclose(z, z_ref, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(z.reshape(6, 2, 8).sum(-1), 1.0, atol=1e-5)  # SimNorm output
    za = np.concatenate([z, a], -1)  # order: z, (task), a
    np.testing.assert_allclose(nxt, np_mlp(params["dynamics"], za, "simnorm"), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(rew, np_mlp(params["reward"], za), rtol=1e-4, atol=1e-5)
    assert q_all.shape == (3, 6, 101)
    for m in range(3):
        pm = jax.tree_util.tree_map(lambda x: x[m], params["qs"])
        np.testing.assert_allclose(q_all[m], np_mlp(pm, za), rtol=1e-4, atol=1e-5)

    # policy prior (spec §4.5, 5f6fade log-prob) with the noise eps = N(key)
    mean, sample, log_pi, log_std = pi_out
    out = np_mlp(params["pi"], z)
    mu, raw = out[:, :3], out[:, 3:]
    ls = -10.0 + 0.5 * 12.0 * (np.tanh(raw) + 1.0)
    eps = np.asarray(jax.random.normal(key, (6, 3)), np.float64)
    u = mu + eps * np.exp(ls)
    # squash correction from the returned (float32) action: near |a| = 1 the float32
    # rounding of tanh dominates 1 - a^2, as in the float32 reference code
    lp = 3 * (np.sum(-0.5 * eps ** 2 - ls, -1) - 0.5 * math.log(2 * math.pi)) \
        - np.sum(np.log(np.maximum(0.0, 1.0 - sample ** 2) + 1e-6), -1)
    np.testing.assert_allclose(log_std, ls, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mean, np.tanh(mu), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(sample, np.tanh(u), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(log_pi[:, 0], lp, rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------------- Q pairs
@pytest.fixture(scope="module")
def q5():
    wm = make_wm(obs=4, A=2, model_size=1, mlp_dim=16, latent_dim=16, enc_dim=16, num_q=5, dropout=0.3)

    params = random_params(wm, 4, scale=0.3)
    rng = np.random.default_rng(9)
    z = jnp.asarray(np_simnorm(rng.standard_normal((10, 16)) * 2.0), jnp.float32)
    a = jnp.asarray(rng.uniform(-1, 1, (10, 2)), jnp.float32)
    return wm, params, z, a


def test_q_pair_min_avg_equal_selected_members_of_q_all(q5):
    wm, params, z, a = q5
    keys = jax.random.split(jax.random.PRNGKey(100), 12)

    @jax.jit
    def run(params, z, a, keys):
        decoded = tm.two_hot_inv(wm.q_all(params["qs"], z, a), -10.0, 10.0)  # [5, 10]
        qmin = jax.vmap(lambda k: wm.q_pair(params["qs"], z, a, k, "min"))(keys)
        qavg = jax.vmap(lambda k: wm.q_pair(params["qs"], z, a, k, "avg"))(keys)
        return decoded, qmin, qavg

    decoded, qmin, qavg = (np.asarray(v) for v in run(params, z, a, keys))
    assert np.ptp(decoded, axis=0).min() > 1e-3  # members disagree, so the pair matters
    pairs = set()
    for s, key in enumerate(keys):
        i, j = (int(v) for v in jax.random.choice(key, 5, (2,), replace=False))
        assert i != j
        pairs.add(frozenset((i, j)))
        np.testing.assert_allclose(qmin[s], np.minimum(decoded[i], decoded[j]), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(qavg[s], 0.5 * (decoded[i] + decoded[j]), rtol=1e-5, atol=1e-6)
    assert len(pairs) >= 4
    with pytest.raises(ValueError):
        wm.q_pair(params["qs"], z, a, jax.random.PRNGKey(0), "max")


# ---------------------------------------------------------------------- dropout
def _record_calls(fn):
    calls = []

    def interceptor(f, args, kwargs, ctx):
        calls.append((type(ctx.module).__name__, tuple(ctx.module.scope.path)))
        return f(*args, **kwargs)

    with nn.intercept_methods(interceptor):
        out = fn()
    return out, calls


def test_dropout_only_in_first_q_layer_before_layernorm(q5):
    wm, params, z, a = q5
    mods = wm.modules
    za = jnp.concatenate([z, a], -1)
    p0 = jax.tree_util.tree_map(lambda x: x[0], params["qs"])
    _, calls = _record_calls(lambda: mods["q"].apply({"params": p0}, za, deterministic=False,
                                                     rngs={"dropout": jax.random.PRNGKey(0)}))
    drops = [c for c in calls if c[0] == "Dropout"]
    assert drops == [("Dropout", ("NormedLinear_0", "Dropout_0"))]
    order = [c[1] for c in calls if c[1][:1] == ("NormedLinear_0",) and len(c[1]) == 2]
    assert order == [("NormedLinear_0", "Dense_0"), ("NormedLinear_0", "Dropout_0"),
                     ("NormedLinear_0", "LayerNorm_0")]
    # no other network has a dropout layer
    z1, a1 = z[:2], a[:2]
    for name, x in [("encoder", jnp.zeros((2, 4))), ("dynamics", jnp.concatenate([z1, a1], -1)),
                    ("reward", jnp.concatenate([z1, a1], -1)), ("pi", z1)]:
        _, calls = _record_calls(lambda: mods[name].apply({"params": params[name]}, x, deterministic=False,
                                                          rngs={"dropout": jax.random.PRNGKey(0)}))
        assert not [c for c in calls if c[0] == "Dropout"], name


def test_dropout_needs_a_key_and_masks_differ_per_member(q5):
    wm, params, z, a = q5
    qs = params["qs"]
    wm0 = dataclasses.replace(wm, cfg=dataclasses.replace(wm.cfg, dropout=0.0))
    k, k2, kp = jax.random.PRNGKey(11), jax.random.PRNGKey(12), jax.random.PRNGKey(1)

    @jax.jit
    def run(qs, z, a):
        same = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x[:1], x.shape), qs)
        return dict(
            det1=wm.q_all(qs, z, a), det2=wm.q_all(qs, z, a), det0=wm0.q_all(qs, z, a),
            d1=wm.q_all(qs, z, a, dropout_key=k), d1b=wm.q_all(qs, z, a, dropout_key=k),
            d2=wm.q_all(qs, z, a, dropout_key=k2),
            pair_drop=wm.q_pair(qs, z, a, kp, "avg", dropout_key=k), pair=wm.q_pair(qs, z, a, kp, "avg"),
            same_drop=wm.q_all(same, z, a, dropout_key=k), same=wm.q_all(same, z, a))

    r = {n: np.asarray(v) for n, v in run(qs, z, a).items()}
    np.testing.assert_array_equal(r["det1"], r["det2"])
    # without a key the model equals the same model built with dropout = 0
    np.testing.assert_allclose(r["det0"], r["det1"], rtol=1e-6, atol=1e-6)
    # with a key: stochastic, reproducible per key
    np.testing.assert_array_equal(r["d1"], r["d1b"])
    assert np.max(np.abs(r["d1"] - r["det1"])) > 1e-3
    assert np.max(np.abs(r["d1"] - r["d2"])) > 1e-3
    # q_pair with a dropout key is stochastic, without it is not
    assert np.max(np.abs(r["pair_drop"] - r["pair"])) > 1e-4
    # identical members get different masks (spec §3.3 randomness='different')
    np.testing.assert_array_equal(r["same"][0], r["same"][1])
    assert np.max(np.abs(r["same_drop"][0] - r["same_drop"][1])) > 1e-3


def test_dropout_module_equals_flax_dropout_bit_for_bit():
    import flax.linen as fnn

    from tdmpc2core.model.networks import Dropout
    x = jax.random.normal(jax.random.PRNGKey(0), (3, 16, 40))
    for rate in (0.01, 0.5):
        for seed in range(2):
            rngs = {"dropout": jax.random.PRNGKey(seed)}
            want = fnn.Dropout(rate).apply({}, x, deterministic=False, rngs=rngs)
            got = Dropout(rate).apply({}, x, deterministic=False, rngs=rngs)
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert Dropout(rate).apply({}, x, deterministic=True) is x
    # rate 1 drops everything, as flax: zero output and zero (not NaN) gradient
    rngs = {"dropout": jax.random.PRNGKey(0)}
    for mod in (Dropout(1.0), fnn.Dropout(1.0)):
        out = mod.apply({}, x, deterministic=False, rngs=rngs)
        grad = jax.grad(lambda v: jnp.sum(mod.apply({}, v, deterministic=False, rngs=rngs)))(x)
        assert not np.any(np.asarray(out)) and not np.any(np.asarray(grad)), type(mod)


# ---------------------------------------------------------------------- Linear with its own VJP
def test_dense_equals_flax_dense_forward_init_and_gradients():
    """networks.Dense: flax.linen.Dense's parameters (names, shapes, initial values) bit for bit
    and its forward value to float32 rounding ([x, 1] @ [kernel; bias] adds the bias inside the
    dot); its hand-written backward pass (one contraction over all leading axes for kernel and
    bias) gives autodiff's gradients to float32 summation order, also under vmap."""
    import flax.linen as fnn

    from tdmpc2core.model.networks import MATMUL_PRECISION, Dense, weight_init
    x = jax.random.normal(jax.random.PRNGKey(0), (3, 7, 20))
    ours, ref = Dense(9), fnn.Dense(9, kernel_init=weight_init, precision=MATMUL_PRECISION)
    p = ours.init(jax.random.PRNGKey(1), x)
    q = ref.init(jax.random.PRNGKey(1), x)
    assert jax.tree_util.tree_structure(p) == jax.tree_util.tree_structure(q)
    for a, b in zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(q)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    p = jax.tree_util.tree_map(lambda v: v + 0.1 * jax.random.normal(jax.random.PRNGKey(2), v.shape), p)
    np.testing.assert_allclose(np.asarray(ours.apply(p, x)), np.asarray(ref.apply(p, x)), rtol=1e-6, atol=1e-6)
    w = jax.random.normal(jax.random.PRNGKey(3), (3, 7, 9))

    def loss(mod):
        return lambda p, x: jnp.sum(w * jnp.tanh(mod.apply(p, x)))

    g_ours = jax.grad(loss(ours), argnums=(0, 1))(p, x)
    g_ref = jax.grad(loss(ref), argnums=(0, 1))(p, x)
    for a, b in zip(jax.tree_util.tree_leaves(g_ours), jax.tree_util.tree_leaves(g_ref)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    # batched over stacked parameters and inputs, as the Q ensemble is
    ps = jax.tree_util.tree_map(lambda v: jnp.stack([v, 2.0 * v]), p)
    xs = jnp.stack([x, -x])
    gv = jax.vmap(jax.grad(loss(ours), argnums=(0, 1)))(ps, xs)
    gr = jax.vmap(jax.grad(loss(ref), argnums=(0, 1)))(ps, xs)
    for a, b in zip(jax.tree_util.tree_leaves(gv), jax.tree_util.tree_leaves(gr)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_dense_frozen_inputs_zero_cotangent_there_and_the_same_elsewhere():
    from tdmpc2core.model.kernels_cpu import linear
    x = jax.random.normal(jax.random.PRNGKey(0), (6, 10))
    k = jax.random.normal(jax.random.PRNGKey(1), (10, 4))
    b = jax.random.normal(jax.random.PRNGKey(2), (4,))
    full = jax.grad(lambda x, k, b: jnp.sum(jnp.sin(linear(x, k, b))), argnums=(0, 1, 2))(x, k, b)
    part = jax.grad(lambda x, k, b: jnp.sum(jnp.sin(linear(x, k, b, 7))), argnums=(0, 1, 2))(x, k, b)
    np.testing.assert_array_equal(np.asarray(linear(x, k, b, 7)), np.asarray(linear(x, k, b)))
    assert not np.any(np.asarray(part[0][:, :7]))
    np.testing.assert_allclose(np.asarray(part[0][:, 7:]), np.asarray(full[0][:, 7:]), rtol=1e-6, atol=1e-6)
    for a, c in zip(part[1:], full[1:]):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(c))


def test_policy_q_same_values_and_action_gradient_as_q_pair_avg(q5):
    """The policy step's Q call (policy_q, the first layer's input gradient for the action
    columns only): the same Q values and the same gradient into the action as the plain avg
    pair with detached latents; no gradient reaches z."""
    wm, params, z, a = q5
    key, kd = jax.random.PRNGKey(4), jax.random.PRNGKey(5)

    def q(z, a, only):
        if only:
            return wm.policy_q(params["qs"], z, a, key, dropout_key=kd)
        return wm.q_pair(params["qs"], jax.lax.stop_gradient(z), a, key, "avg", dropout_key=kd)

    np.testing.assert_array_equal(np.asarray(q(z, a, True)), np.asarray(q(z, a, False)))
    gz1, ga1 = jax.grad(lambda z, a: jnp.sum(q(z, a, True)), argnums=(0, 1))(z, a)
    gz0, ga0 = jax.grad(lambda z, a: jnp.sum(q(z, a, False)), argnums=(0, 1))(z, a)
    assert not np.any(np.asarray(gz1)) and not np.any(np.asarray(gz0))
    assert np.max(np.abs(np.asarray(ga0))) > 1e-4
    np.testing.assert_allclose(np.asarray(ga1), np.asarray(ga0), rtol=1e-5, atol=1e-7)


def test_linear_cotangent_dtypes_bad_frozen_inputs_and_no_forward_mode():
    """Cotangents in each argument's own dtype (as autodiff gives them), a clear error for a
    frozen_inputs outside [0, in], and forward mode refused (a custom_vjp; documented)."""
    from tdmpc2core.model.kernels_cpu import linear
    x = jnp.ones((3, 10), jnp.bfloat16)
    k, b = jnp.ones((10, 4), jnp.float32), jnp.zeros((4,), jnp.float32)
    gx, gk, gb = jax.grad(lambda x, k, b: jnp.sum(linear(x, k, b)), argnums=(0, 1, 2))(x, k, b)
    assert (gx.dtype, gk.dtype, gb.dtype) == (jnp.bfloat16, jnp.float32, jnp.float32)
    for bad in (-1, 11):
        with pytest.raises(ValueError, match="frozen_inputs"):
            linear(x, k, b, bad)
        with pytest.raises(ValueError, match="frozen_inputs"):
            jax.grad(lambda k: jnp.sum(linear(x, k, b, bad)))(k)
    with pytest.raises(TypeError, match="forward-mode"):
        jax.jvp(lambda k: linear(x, k, b), (k,), (k,))


@pytest.mark.parametrize("act", ["mish", None])
def test_layer_norm_act_equals_flax_layernorm_then_mish_values_and_gradients(act):
    """networks.layer_norm_act (LayerNorm with a hand-written backward pass, optionally fused
    with Mish): flax.linen.LayerNorm(1e-5) [+ math.mish] to float32 rounding, forward and the
    gradients of h, scale and bias, jitted and under vmap, with rows where y > 20 (Mish is the
    identity there) and a row of equal entries (variance 0, rstd = 1/sqrt(1e-5)); LayerNorm parameters as flax's."""
    from tdmpc2core.model.kernels_cpu import layer_norm_act
    from tdmpc2core.model.networks import LayerNorm
    k = jax.random.split(jax.random.PRNGKey(0), 5)
    h = jax.random.normal(k[0], (2, 5, 96)) * 3.0 + 1.0
    h = h.at[1, 1].set(0.7)
    scale = 1.0 + 0.3 * jax.random.normal(k[1], (96,))
    bias = (0.2 * jax.random.normal(k[2], (96,))).at[:3].set(21.0)  # y > 20 in about half these
    w = jax.random.normal(k[3], h.shape)

    def ref(h, scale, bias):
        y = nn.LayerNorm(epsilon=1e-5).apply({"params": {"scale": scale, "bias": bias}}, h)
        return tm.mish(y) if act == "mish" else y

    ours = lambda h, s, b: layer_norm_act(h, s, b, act)  # noqa: E731
    assert float(jnp.max(ref(h, scale, bias))) > 20.0 or act is None
    np.testing.assert_allclose(np.asarray(jax.jit(ours)(h, scale, bias)), np.asarray(jax.jit(ref)(h, scale, bias)),
                               rtol=1e-6, atol=1e-6)
    ss, bs = jnp.stack([scale, 0.5 * scale]), jnp.stack([bias, -bias])
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(ours))(h, ss, bs)),
                               np.asarray(jax.jit(jax.vmap(ref))(h, ss, bs)), rtol=1e-6, atol=1e-6)
    g_ours = jax.jit(jax.grad(lambda *a: jnp.sum(w * ours(*a)), argnums=(0, 1, 2)))(h, scale, bias)
    g_ref = jax.jit(jax.grad(lambda *a: jnp.sum(w * ref(*a)), argnums=(0, 1, 2)))(h, scale, bias)
    for a, b in zip(g_ours, g_ref):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-5)
    gv = jax.jit(jax.vmap(jax.grad(lambda *a: jnp.sum(w * ours(*a)), argnums=(0, 1, 2))))(h, ss, bs)
    gr = jax.jit(jax.vmap(jax.grad(lambda *a: jnp.sum(w * ref(*a)), argnums=(0, 1, 2))))(h, ss, bs)
    for a, b in zip(gv, gr):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-5)
    p_ours = LayerNorm().init(jax.random.PRNGKey(1), h)
    p_ref = nn.LayerNorm(epsilon=1e-5).init(jax.random.PRNGKey(1), h)
    assert jax.tree_util.tree_structure(p_ours) == jax.tree_util.tree_structure(p_ref)
    for a, b in zip(jax.tree_util.tree_leaves(p_ours), jax.tree_util.tree_leaves(p_ref)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_layer_norm_act_refuses_other_activations():
    from tdmpc2core.model.kernels_cpu import layer_norm_act
    h, s, b = jnp.ones((2, 8)), jnp.ones((8,)), jnp.zeros((8,))
    with pytest.raises(ValueError, match="act='relu'.*'mish' or None"):
        layer_norm_act(h, s, b, "relu")
    with pytest.raises(ValueError, match="act='relu'"):
        jax.grad(lambda h: jnp.sum(layer_norm_act(h, s, b, "relu")))(h)


def test_layer_norm_act_clamped_variance_and_low_precision_inputs_as_flax():
    """Where E[h^2] - mean^2 rounds below zero (|mean| / std ~ 1e4: the variance is clamped to
    0) or to exactly 0, the gradient weights the variance term as autodiff of flax's clamp does
    (0, resp. 1/2); a bfloat16 h is normalised in float32 as flax's statistics are. Found by a
    new user's checks."""
    from tdmpc2core.model.kernels_cpu import layer_norm_act
    o, z = jnp.ones(4), jnp.zeros(4)
    g = jnp.array([1.0, 0.0, 0.0, 0.0])

    def ref(h):
        return nn.LayerNorm(epsilon=1e-5).apply({"params": {"scale": o, "bias": z}}, h)

    for h, rtol in ((jnp.array([4096.5, 4097.0, 4097.5, 4098.0]), 1e-5),   # variance -2 -> clamped
                    (jnp.array([10000.0, 10001.0, 10002.0, 10003.0]), 5e-3)):  # exactly 0: a tie (x2 without the 1/2)
        got = jax.grad(lambda h: jnp.sum(g * layer_norm_act(h, o, z)))(h)
        want = jax.grad(lambda h: jnp.sum(g * ref(h)))(h)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol)
    hb = jnp.array([30.0, 31.0, 29.0, 30.5], jnp.bfloat16)
    out = layer_norm_act(hb, o, z)
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref(hb)), rtol=1e-6, atol=1e-6)
    assert jax.grad(lambda h: jnp.sum(layer_norm_act(h, o, z, "mish")))(hb).dtype == jnp.bfloat16


def test_linear_keeps_a_wider_bias_and_refuses_a_scalar_input():
    """A float32 bias beside a bfloat16 kernel is not rounded to bfloat16 (x @ kernel + bias
    promotes); a scalar x gets a clear error. Found by a new user's checks."""
    from tdmpc2core.model.kernels_cpu import linear
    got = linear(jnp.ones((1, 1)), jnp.zeros((1, 1), jnp.bfloat16), jnp.array([0.123456]))
    np.testing.assert_allclose(np.asarray(got, np.float64), 0.123456, rtol=1e-7)
    with pytest.raises(ValueError, match="scalar"):
        linear(jnp.float32(1.0), jnp.ones((1, 1)), jnp.zeros(1))


# ---------------------------------------------------------------------- the kernel choice
def test_reference_dense_and_layer_norm_are_flax_and_jax_bit_for_bit():
    """kernels='reference' is plain flax/JAX: Dense is flax.linen.Dense (HIGHEST) and LayerNorm
    [+ Mish] is flax.linen.LayerNorm(1e-5) [then jax.nn.mish], values and gradients bit for bit
    (jitted alike); the dropout mask is jax.random.bernoulli's."""
    import flax.linen as fnn

    from tdmpc2core.model.networks import Dense, Dropout, LayerNorm, weight_init
    x = jax.random.normal(jax.random.PRNGKey(0), (3, 7, 20)) * 2.0 + 0.5
    w = jax.random.normal(jax.random.PRNGKey(3), (3, 7, 9))
    ours, ref = Dense(9, kernels=K.REFERENCE), fnn.Dense(9, kernel_init=weight_init, precision="highest")
    p = jax.tree_util.tree_map(lambda v: v + 0.1, ref.init(jax.random.PRNGKey(1), x))
    for f in (lambda m: jax.jit(lambda p, x: m.apply(p, x)),
              lambda m: jax.jit(jax.grad(lambda p, x: jnp.sum(w * jnp.tanh(m.apply(p, x))), argnums=(0, 1)))):
        for a, b in zip(jax.tree_util.tree_leaves(f(ours)(p, x)), jax.tree_util.tree_leaves(f(ref)(p, x))):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    ln, fln = LayerNorm(kernels=K.REFERENCE), fnn.LayerNorm(epsilon=1e-5)
    q = {"params": {"scale": 1.0 + 0.1 * x[0, 0], "bias": 0.2 * x[1, 1]}}
    for act in ("mish", None):
        def mine(q, x):
            return ln.apply(q, x, act)

        def theirs(q, x):
            y = fln.apply(q, x)
            return jax.nn.mish(y) if act else y

        for f in (jax.jit, lambda g: jax.jit(jax.grad(lambda q, x: jnp.sum(jnp.sin(g(q, x))), argnums=(0, 1)))):
            for a, b in zip(jax.tree_util.tree_leaves(f(mine)(q, x)), jax.tree_util.tree_leaves(f(theirs)(q, x))):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    rngs = {"dropout": jax.random.PRNGKey(5)}
    np.testing.assert_array_equal(np.asarray(Dropout(0.3, kernels=K.REFERENCE).apply({}, x, False, rngs=rngs)),
                                  np.asarray(fnn.Dropout(0.3).apply({}, x, False, rngs=rngs)))


def _kernel_wms():
    kw = dict(obs=5, A=3, model_size=1, mlp_dim=16, latent_dim=16, enc_dim=8, num_q=2, dropout=0.2, horizon=1)
    return {k: make_wm(kernels=k, **kw) for k in ("cpu", "reference")}


def test_both_kernels_give_the_same_parameters_losses_and_gradients():
    """kernels 'cpu' and 'reference': the same parameter tree (official weights load into
    either), and the world-model and policy losses and every gradient
    (dropout on, the policy step's frozen latents) to float32 rounding; the clip norm too."""
    from tdmpc2core.model import update as U
    wms = _kernel_wms()
    p0 = {k: jax.eval_shape(wm.init, jax.random.PRNGKey(0)) for k, wm in wms.items()}
    assert p0["cpu"] == p0["reference"]  # names, shapes, dtypes (the initial values: the flax tests above)
    params = random_params(wms["cpu"], 11, scale=0.3)
    rng = np.random.default_rng(2)
    batch = U.Batch(obs=jnp.asarray(rng.standard_normal((2, 8, 5)), jnp.float32),
                    action=jnp.asarray(rng.uniform(-1, 1, (1, 8, 3)), jnp.float32),
                    reward=jnp.asarray(rng.standard_normal((1, 8)), jnp.float32), terminated=jnp.zeros((1, 8)))
    td = jnp.asarray(rng.standard_normal((1, 8)), jnp.float32)
    next_z = jnp.asarray(np_simnorm(rng.standard_normal((1, 8, 16))), jnp.float32)

    def losses(wm, params):
        key = jax.random.PRNGKey(7)
        (lw, (zs, _)), gw = jax.value_and_grad(U.world_model_loss, argnums=1, has_aux=True)(
            wm, U.wm_subtrees(params), params["pi"], batch, td, next_z, key)
        (lp, _), gp = jax.value_and_grad(U.policy_loss, argnums=1, has_aux=True)(
            wm, params["pi"], params["qs"], jax.lax.stop_gradient(zs), jnp.float32(1.5), key)
        return lw, lp, gw, gp, wm.kernels.global_sq_norm(gw), zs

    got = {k: jax.jit(losses, static_argnums=0)(wm, params) for k, wm in wms.items()}
    for a, b in zip(jax.tree_util.tree_leaves(got["cpu"]), jax.tree_util.tree_leaves(got["reference"])):
        scale = float(np.max(np.abs(np.asarray(b)), initial=0.0))
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-6 * max(scale, 1.0))


def test_kernels_auto_resolves_per_backend_and_precision_reaches_every_dense_layer(monkeypatch):
    """'auto' builds the CPU kernels on a CPU backend and the reference on any other, once: the
    world model's one Kernels object is every layer's; the configured matmul precision is the
    one every Dense product (forward and backward) uses."""
    import re

    from tdmpc2core.model import kernels as K
    from tdmpc2core.model.networks import build_modules
    cfg = make_wm(obs=4, A=2, model_size=1).cfg
    assert cfg.kernels == "auto" and cfg.matmul_precision == "highest"
    assert {m.kernels for m in build_modules(cfg, 4, 2).values()} == {K.choose("auto")}
    assert K.choose("auto").name == K.concrete("auto") == "cpu" and isinstance(K.choose("auto"), K.CpuKernels)
    wm = make_wm(obs=4, A=2, model_size=1)
    assert {m.kernels for m in wm.modules.values()} == {wm.kernels}
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert {m.kernels for m in build_modules(cfg, 4, 2).values()} == {K.ReferenceKernels("highest")}
    assert wm.kernels == K.CpuKernels("highest")  # chosen when the world model was built, not per call
    monkeypatch.undo()
    for k in ("cpu", "reference"):
        for prec in ("default", "high", "highest"):
            wm = make_wm(obs=4, A=2, model_size=1, mlp_dim=16, latent_dim=16, enc_dim=16, kernels=k,
                         matmul_precision=prec)
            p = random_params(wm, 0)
            jaxpr = str(jax.make_jaxpr(jax.grad(lambda p: jnp.sum(wm.encode(p, jnp.ones((2, 4))))))(p))
            found = set(re.findall(r"precision=\(Precision\.(\w+)", jaxpr))
            assert found == {prec.upper()}, (k, prec, found)
    with pytest.raises(ValueError, match="kernels='gpu'"):
        K.concrete("gpu")
    with pytest.raises(ValueError, match="kernels='gpu'"):
        K.choose("gpu")
    with pytest.raises(ValueError, match="matmul_precision='fast'"):
        K.CpuKernels("fast")
