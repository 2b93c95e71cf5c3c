"""Math primitives (spec §4, §3.1, §4.5, §4.7) against hand-computed values.

Every expected value below is worked out by hand or in float64 numpy, independently of
the library's formulas.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tdmpc2core.model import math as tm
from tdmpc2core.model.kernels_cpu import bernoulli_mask, unrolled_threefry_key

VMIN, VMAX, NB = -10.0, 10.0, 101  # spec §1.1: bin size 0.2 in symlog units


def np32(x):
    return np.asarray(x, dtype=np.float32)


# ------------------------------------------------------------------ symlog / symexp
def test_symlog_hand_values():
    x = np32([0.0, math.e - 1.0, -(math.e - 1.0), math.e ** 2 - 1.0, -(math.e ** 3 - 1.0)])
    np.testing.assert_allclose(np.asarray(tm.symlog(x)), [0.0, 1.0, -1.0, 2.0, -3.0], rtol=1e-6, atol=1e-7)
    assert float(tm.symlog(np32(0.0))) == 0.0
    assert float(tm.symexp(np32(0.0))) == 0.0
    np.testing.assert_allclose(np.asarray(tm.symexp(np32([1.0, -1.0, 2.0]))),
                               [math.e - 1.0, 1.0 - math.e, math.e ** 2 - 1.0], rtol=1e-6)


def test_symexp_inverts_symlog_and_keeps_sign():
    x = np32(np.concatenate([-np.geomspace(1e-4, 2e4, 50), [0.0], np.geomspace(1e-4, 2e4, 50)]))
    s = np.asarray(tm.symlog(x))
    assert np.all(np.sign(s) == np.sign(x))
    # symlog is odd
    np.testing.assert_array_equal(np.asarray(tm.symlog(-x)), -s)
    np.testing.assert_allclose(np.asarray(tm.symexp(tm.symlog(x))), x, rtol=2e-6, atol=1e-9)


# ------------------------------------------------------------------------- two-hot
def test_two_hot_on_bin_centre_is_one_hot():
    # symlog(0) = 0 -> u = (0 + 10) / 0.2 = 50
    t = np.asarray(tm.two_hot(np32(0.0), NB, VMIN, VMAX))
    assert t.shape == (NB,)
    expected = np.zeros(NB)
    expected[50] = 1.0
    np.testing.assert_allclose(t, expected, atol=1e-6)
    # symlog(e - 1) = 1 -> u = 55 (up to float32 rounding of 11/0.2)
    t = np.asarray(tm.two_hot(np32(math.e - 1.0), NB, VMIN, VMAX))
    expected = np.zeros(NB)
    expected[55] = 1.0
    np.testing.assert_allclose(t, expected, atol=1e-5)
    # negative side: symlog(-(e^2 - 1)) = -2 -> u = 40
    t = np.asarray(tm.two_hot(np32(-(math.e ** 2 - 1.0)), NB, VMIN, VMAX))
    expected = np.zeros(NB)
    expected[40] = 1.0
    np.testing.assert_allclose(t, expected, atol=1e-5)


def test_two_hot_between_bins_splits_linearly():
    # symlog(y) = 0.1 -> u = 50.5: half on bin 50, half on bin 51
    y = np32(math.expm1(0.1))
    t = np.asarray(tm.two_hot(y, NB, VMIN, VMAX))
    expected = np.zeros(NB)
    expected[50] = expected[51] = 0.5
    np.testing.assert_allclose(t, expected, atol=1e-5)
    # symlog(y) = -3.03 -> u = 34.85: 0.15 on bin 34, 0.85 on bin 35
    y = np32(-math.expm1(3.03))
    t = np.asarray(tm.two_hot(y, NB, VMIN, VMAX))
    expected = np.zeros(NB)
    expected[34], expected[35] = 0.15, 0.85
    np.testing.assert_allclose(t, expected, atol=1e-4)
    # a batch keeps its shape and each row sums to 1
    ys = np32(np.linspace(-500, 500, 37)).reshape(37, 1)
    tb = np.asarray(tm.two_hot(ys, NB, VMIN, VMAX))
    assert tb.shape == (37, 1, NB)
    np.testing.assert_allclose(tb.sum(-1), 1.0, atol=1e-6)


def test_two_hot_at_and_beyond_vmax_and_vmin():
    last = np.zeros(NB)
    last[-1] = 1.0
    first = np.zeros(NB)
    first[0] = 1.0
    # symlog(y) = 10 exactly (clamped from above): i = 100, w = 0, (i+1) mod 101 = 0 gets 0
    for y in (1e6, 3e30):
        t = np.asarray(tm.two_hot(np32(y), NB, VMIN, VMAX))
        np.testing.assert_array_equal(t, last)  # exact: bin 0 must not receive any mass
    # symlog(y) = 10 up to float32 rounding
    t = np.asarray(tm.two_hot(np32(math.expm1(10.0)), NB, VMIN, VMAX))
    np.testing.assert_allclose(t, last, atol=1e-5)
    assert t[0] == 0.0
    # below vmin: clamped to -10 -> all mass on bin 0
    for y in (-1e6, -3e30):
        t = np.asarray(tm.two_hot(np32(y), NB, VMIN, VMAX))
        np.testing.assert_array_equal(t, first)


# ------------------------------------------------------------------------- decoding
def test_uniform_logits_decode_to_zero():
    v = np.asarray(tm.two_hot_inv(jnp.zeros((4, NB)), VMIN, VMAX))
    assert v.shape == (4,)
    # symexp(mean(linspace(-10, 10, 101))) = 0; float32 linspace is off by ~3e-7 at bin 50
    np.testing.assert_allclose(v, 0.0, atol=1e-5)


@pytest.mark.parametrize("j", [0, 13, 50, 55, 77, 100])
def test_peaked_logits_recover_bin_value(j):
    logits = np.zeros(NB, np.float32)
    logits[j] = 200.0  # softmax is one-hot in float32
    b = -10.0 + 0.2 * j
    expected = math.copysign(math.expm1(abs(b)), b)
    np.testing.assert_allclose(float(tm.two_hot_inv(jnp.asarray(logits), VMIN, VMAX)), expected,
                               rtol=1e-5, atol=1e-5)


def test_two_hot_then_decode_round_trip():
    y = np32(np.concatenate([np.linspace(-1000, 1000, 401), [0.0, 0.37, -0.37, 21000.0, -21000.0]]))
    p = np.asarray(tm.two_hot(y, NB, VMIN, VMAX))
    logits = np.log(np.maximum(p, 1e-30)).astype(np.float32)
    back = np.asarray(tm.two_hot_inv(jnp.asarray(logits), VMIN, VMAX))
    np.testing.assert_allclose(back, y, rtol=2e-5, atol=2e-5)


# ------------------------------------------------------------------ soft cross-entropy
def test_soft_ce_small_hand_computation():
    # 5 bins on [-2, 2]: bin size 1, centres -2..2. symlog(y) = 0.25 -> u = 2.25:
    # 0.75 on bin 2, 0.25 on bin 3.
    logits = np.array([[0.3, -1.2, 2.0, 0.5, -0.1],
                       [1.0, 1.0, 1.0, 1.0, 1.0]], np.float64)
    y = np32([math.expm1(0.25), -math.expm1(1.5)])  # second: u = 0.5 -> half bins 0 and 1
    lse = np.log(np.sum(np.exp(logits), axis=-1))
    logp = logits - lse[:, None]
    expected = np.array([-(0.75 * logp[0, 2] + 0.25 * logp[0, 3]),
                         -(0.5 * logp[1, 0] + 0.5 * logp[1, 1])])
    got = np.asarray(tm.soft_ce(jnp.asarray(logits, jnp.float32), jnp.asarray(y), -2.0, 2.0))
    assert got.shape == (2,)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    np.testing.assert_allclose(got[1], math.log(5.0), rtol=1e-5)  # uniform logits: ln N


# ---------------------------------------------------------------------------- SimNorm
def test_simnorm_is_softmax_per_group_of_8():
    x = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (3, 4, 32)) * 3.0, np.float64)
    out = np.asarray(tm.simnorm(jnp.asarray(x, jnp.float32), 8), np.float64)
    assert out.shape == x.shape
    g = x.reshape(3, 4, 4, 8)
    e = np.exp(g - g.max(-1, keepdims=True))
    ref = (e / e.sum(-1, keepdims=True)).reshape(x.shape)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out.reshape(3, 4, 4, 8).sum(-1), 1.0, atol=1e-6)
    # the groups are consecutive blocks of 8 (not strided): a shift inside one block only
    # changes that block
    x2 = x.copy()
    x2[..., 8:16] += 5.0
    out2 = np.asarray(tm.simnorm(jnp.asarray(x2, jnp.float32), 8))
    np.testing.assert_allclose(out2, out, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------------- Mish
def test_mish_matches_float64_reference_over_wide_range():
    x = np32(np.concatenate([np.linspace(-120, 120, 48001), np.geomspace(1e-8, 1e4, 500),
                             -np.geomspace(1e-8, 1e4, 500), [0.0, 20.0, -20.0, 1e30, -1e30]]))
    got = np.asarray(tm.mish(jnp.asarray(x)), np.float64)
    xd = x.astype(np.float64)
    ref = xd * np.tanh(np.logaddexp(0.0, xd))  # x * tanh(softplus(x)) in float64
    big = np.abs(ref) > 1e-30
    rel = np.abs(got - ref)[big] / np.abs(ref[big])
    assert rel.max() < 1e-6, (rel.max(), xd[big][np.argmax(rel)])
    assert np.abs(got - ref)[~big].max() < 1e-30
    assert np.all(np.isfinite(got))
    assert got[x == 0.0][0] == 0.0


# ------------------------------------------------------------------- log-std squashing
def test_squash_log_std_endpoints():
    got = np.asarray(tm.squash_log_std(np32([-30.0, 0.0, 30.0, 0.5]), -10.0, 2.0))
    np.testing.assert_allclose(got[:3], [-10.0, -4.0, 2.0], atol=1e-6)
    np.testing.assert_allclose(got[3], -10.0 + 6.0 * (math.tanh(0.5) + 1.0), rtol=1e-6)


# ---------------------------------------------------------- 5f6fade log-probability
def test_5f6fade_log_prob_hand_computed():
    eps = np.array([0.3, -1.1], np.float64)
    log_std = np.array([-0.5, 0.2], np.float64)
    mu = np.array([0.4, -0.2], np.float64)
    u = mu + eps * np.exp(log_std)
    pi = np.tanh(u)
    A = 2
    gauss = A * (np.sum(-0.5 * eps ** 2 - log_std) - 0.5 * math.log(2 * math.pi))
    corr = np.sum(np.log(np.maximum(0.0, 1.0 - pi ** 2) + 1e-6))
    expected = gauss - corr
    g = np.asarray(tm.gaussian_logprob_5f6fade(jnp.asarray(eps, jnp.float32), jnp.asarray(log_std, jnp.float32)))
    c = np.asarray(tm.squash_correction(jnp.asarray(pi, jnp.float32)))
    assert g.shape == (1,) and c.shape == (1,)
    np.testing.assert_allclose(g[0], gauss, rtol=1e-6)
    np.testing.assert_allclose(c[0], corr, rtol=1e-5)
    np.testing.assert_allclose(g[0] - c[0], expected, rtol=1e-5)
    # the quirks are observable: the correct Gaussian log-prob (constant per dim, no
    # factor A) is a different number
    correct = np.sum(-0.5 * eps ** 2 - log_std - 0.5 * math.log(2 * math.pi))
    assert abs(g[0] - correct) > 0.1
    # explicit size (multi-task active dims) replaces A
    g3 = np.asarray(tm.gaussian_logprob_5f6fade(jnp.asarray(eps, jnp.float32), jnp.asarray(log_std, jnp.float32),
                                                jnp.asarray([3.0])))
    np.testing.assert_allclose(g3[0], gauss / 2 * 3, rtol=1e-6)


def test_squash_correction_saturated_action_is_bounded():
    # |tanh(u)| = 1: relu(0) + 1e-6 -> ln(1e-6) per dim, never -inf
    c = np.asarray(tm.squash_correction(np32([1.0, -1.0, 0.0])))
    np.testing.assert_allclose(c[0], 2 * math.log(1e-6) + math.log(1.0 + 1e-6), rtol=1e-5)


# ------------------------------------------------------------- running scale S (§4.7)
@pytest.mark.parametrize("B", [256, 64, 7, 2])
def test_percentile_range_matches_numpy_linear(B):
    rng = np.random.default_rng(B)
    x = np32(rng.standard_normal((B, 1)) * 7.0 + 3.0)
    p5, p95 = np.percentile(x.astype(np.float64)[:, 0], [5, 95], method="linear")
    got = float(tm.percentile_range(jnp.asarray(x)))
    np.testing.assert_allclose(got, p95 - p5, rtol=1e-5)


def test_running_scale_update_tau_and_floor():
    rng = np.random.default_rng(0)
    x = np32(rng.standard_normal((256, 1)) * 10.0)
    p5, p95 = np.percentile(x.astype(np.float64)[:, 0], [5, 95], method="linear")
    assert p95 - p5 > 1.0
    s1 = float(tm.running_scale_update(jnp.float32(1.0), jnp.asarray(x), 0.01))  # S init 1
    np.testing.assert_allclose(s1, 1.0 + 0.01 * ((p95 - p5) - 1.0), rtol=1e-6)
    # tiny spread: v = max(range, 1) = 1, so S moves towards 1 (from above and from 1)
    tiny = np32(rng.standard_normal((256, 1)) * 1e-3)
    np.testing.assert_allclose(float(tm.running_scale_update(jnp.float32(5.0), jnp.asarray(tiny), 0.01)),
                               5.0 + 0.01 * (1.0 - 5.0), rtol=1e-6)
    assert float(tm.running_scale_update(jnp.float32(1.0), jnp.asarray(tiny), 0.01)) == 1.0
    # repeated updates converge geometrically: S_n - v = (1 - tau)^n (S_0 - v)
    s = jnp.float32(1.0)
    for _ in range(10):
        s = tm.running_scale_update(s, jnp.asarray(x), 0.01)
    v = p95 - p5
    np.testing.assert_allclose(float(s), v + (1 - 0.01) ** 10 * (1.0 - v), rtol=1e-5)


def test_running_scale_has_no_gradient_through_the_batch():
    x = jnp.asarray(np32(np.random.default_rng(1).standard_normal((64, 1)) * 5.0))
    g = jax.grad(lambda x: tm.running_scale_update(jnp.float32(1.0), x, 0.01))(x)
    assert float(jnp.max(jnp.abs(g))) == 0.0


# ------------------------------------------------------------------ dropout masks
@pytest.mark.parametrize("p", [0.99, 0.5, 0.01])
def test_bernoulli_mask_is_jax_random_bernoulli_bit_for_bit(p):
    for shape in [(3, 64, 40), (7,), ()]:
        for seed in range(3):
            k = jax.random.fold_in(jax.random.PRNGKey(seed), 17)
            want = np.asarray(jax.jit(lambda k: jax.random.bernoulli(k, p, shape))(k))
            got = np.asarray(jax.jit(lambda k: bernoulli_mask(k, p, shape))(k))
            assert got.dtype == bool and got.shape == shape and (got == want).all(), (shape, seed)
            kt = jax.random.key(seed)  # a typed key
            assert (np.asarray(bernoulli_mask(kt, p, shape)) == np.asarray(jax.random.bernoulli(kt, p, shape))).all()
    keys = jax.random.split(jax.random.PRNGKey(3), 3)  # vmapped over keys, as the Q ensemble draws them
    np.testing.assert_array_equal(jax.vmap(lambda k: bernoulli_mask(k, p, (2, 50)))(keys),
                                  jax.vmap(lambda k: jax.random.bernoulli(k, p, (2, 50)))(keys))


def test_unrolled_threefry_key_draws_jax_randoms_bits_bit_for_bit():
    # the planner's evaluation-mode draws (kernels.draw_key): every jax.random function the
    # planner uses, given the wrapped key or keys split from it, equals the same call on the raw
    # key, bit for bit, jitted and vmapped, without JAX's rolled threefry loop in the program
    def draws(k):
        k1, k2, k3, k4 = jax.random.split(k, 4)
        return (jax.random.normal(k1, (3, 4, 2)), jax.random.uniform(k2, (5,), minval=-1.0, maxval=1.0),
                jax.random.categorical(k3, jnp.log(jnp.arange(1.0, 9.0))), jax.random.choice(k4, 5, (2,), replace=False),
                jax.random.key_data(jax.random.split(k4, 3)) if jnp.issubdtype(k4.dtype, jax.dtypes.prng_key)
                else jax.random.split(k4, 3), jax.random.randint(k2, (6,), 0, 9))

    want, got = jax.jit(draws), jax.jit(lambda k: draws(unrolled_threefry_key(k)))
    for seed in range(3):
        k = jax.random.fold_in(jax.random.PRNGKey(seed), 5)
        for w, g in zip(want(k), got(k)):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    keys = jax.random.split(jax.random.PRNGKey(7), 4)  # vmapped, as the planner's keys are
    for w, g in zip(jax.jit(jax.vmap(draws))(keys), jax.jit(jax.vmap(lambda k: draws(unrolled_threefry_key(k))))(keys)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    assert "threefry2x32" not in str(jax.make_jaxpr(lambda k: jax.random.normal(unrolled_threefry_key(k), (3,)))(k))
    kt = jax.random.key(0)  # a typed key, and 64-bit mode: returned as they are
    assert unrolled_threefry_key(kt) is kt
    with jax.enable_x64(True):
        assert unrolled_threefry_key(k) is k


def test_bernoulli_mask_integer_threshold_equals_the_float_comparison_for_every_mantissa():
    m = np.arange(2 ** 23, dtype=np.uint32)
    u = (m | np.uint32(0x3F800000)).view(np.float32) - np.float32(1.0)  # jax.random.uniform's values
    for p in [0.99, 0.5, 0.01, 0.123456]:
        thr = int(np.ceil(np.float64(np.float32(p)) * 2.0 ** 23))
        np.testing.assert_array_equal(u < np.float32(p), m < thr)


def test_bernoulli_mask_falls_back_to_jax_for_other_generators():
    k = jax.random.key(0, impl="rbg")
    np.testing.assert_array_equal(bernoulli_mask(k, 0.9, (5, 7)), jax.random.bernoulli(k, 0.9, (5, 7)))


def test_bernoulli_mask_equals_jax_in_64_bit_mode_and_for_p_that_float32_rounds_to_zero():
    k = jax.random.PRNGKey(4)
    with jax.enable_x64(True):  # float64 uniforms from 64-bit words: the fallback
        for p in (0.5, 0.9):
            np.testing.assert_array_equal(bernoulli_mask(k, p, (40, 25)), jax.random.bernoulli(k, p, (40, 25)))
    for p in (1e-46, 1e-300):  # float32(p) == 0: no threshold of at least 1, so no division by zero
        np.testing.assert_array_equal(bernoulli_mask(k, p, (40, 25)), jax.random.bernoulli(k, p, (40, 25)))


def test_bernoulli_mask_takes_the_written_out_path_for_default_keys():
    # the speed-up is real only if the default keys do not fall back to jax.random (whose
    # threefry2x32 primitive XLA:CPU runs as a rolled loop)
    for key in (jax.random.PRNGKey(0), jax.random.key(0)):
        jaxpr = str(jax.make_jaxpr(lambda k: bernoulli_mask(k, 0.99, (4, 8)))(key))
        assert "threefry2x32" not in jaxpr and "random_bits" not in jaxpr
    assert "random_bits" in str(jax.make_jaxpr(lambda k: jax.random.bernoulli(k, 0.99, (4, 8)))(jax.random.PRNGKey(0)))


def test_bernoulli_mask_refuses_a_batch_of_typed_keys_as_jax_does():
    keys = jax.random.split(jax.random.key(0), 2)  # shape (2,): not one key
    with pytest.raises(ValueError, match="single key"):
        jax.random.bernoulli(keys, 0.9, (3, 2))
    with pytest.raises(ValueError, match="single key"):
        bernoulli_mask(keys, 0.9, (3, 2))


def test_bernoulli_mask_is_computed_once_for_several_readers():
    # the speed-up of the written-out rounds holds only if XLA does not copy them into every
    # fusion that reads the mask (as it did with a plain `<` test: three copies per dropout site
    # in an update); its 20 rotations (each a shift-left) must occur once in the compiled program
    def f(k, x, y):
        m = bernoulli_mask(k, 0.99, x.shape)
        return jnp.where(m, x / 0.99, 0.0), jnp.sum(jnp.where(m, y, 0.0) * x, axis=0), jnp.where(m, y * 3.0, 1.0).T
    x = jnp.ones((64, 32), jnp.float32)
    hlo = jax.jit(f).lower(jax.random.PRNGKey(0), x, 2 * x).compile().as_text()
    assert hlo.count("shift-left(") == 20


def test_mish_gradient_from_its_exponential_equals_autodiff():
    """math.mish_grad_given_exp (the derivative kernels_cpu.layer_norm_act's backward pass uses)
    equals the float64 derivative and jax.grad of math.mish to float32 rounding over a wide
    range, the x > 20 identity branch included; mish_given_exp equals mish bit for bit."""
    x = jnp.concatenate([jnp.linspace(-40.0, 40.0, 4001), jnp.array([-1e4, 19.999, 20.0, 20.001, 1e4])])
    e = jnp.exp(jnp.minimum(x, 20.0))
    np.testing.assert_array_equal(np.asarray(tm.mish_given_exp(x, e)), np.asarray(tm.mish(x)))
    got = np.asarray(tm.mish_grad_given_exp(x, e), np.float64)
    x64 = np.asarray(x, np.float64)
    sp = np.logaddexp(0.0, x64)  # softplus
    with np.errstate(over="ignore"):  # exp(1e4) is inf in float64 too: the sigmoid's limit, 0
        ref = np.tanh(sp) + x64 * (1.0 - np.tanh(sp) ** 2) / (1.0 + np.exp(-x64))  # float64 mish'
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    # and autodiff of math.mish agrees to the same float32 rounding
    np.testing.assert_allclose(got, np.asarray(jax.vmap(jax.grad(tm.mish))(x), np.float64), rtol=1e-5, atol=1e-6)
    assert float(tm.mish_grad_given_exp(jnp.float32(30.0), jnp.exp(jnp.float32(20.0)))) == 1.0
