"""The CPU kernels of the model: hand-written backward passes and generators that XLA:CPU
runs faster than what JAX derives (measured in benchmarks/README.md, "Where a CPU update's time
goes"). Chosen by ``kernels="cpu"`` (the default on a CPU backend; docs/fidelity.md "Kernels");
:mod:`tdmpc2core.model.kernels` holds the plain flax/JAX reference they are tested against.

- :func:`linear`: the Linear layer (spec §3.1) as one product [x, 1] @ [kernel; bias], with a
  written-out backward pass and ``frozen_inputs`` (inputs whose cotangent is not computed).
- :func:`layer_norm_act`: LayerNorm (flax's fast variance, spec §3.1, deviation N6) then Mish,
  with a written-out backward pass.
- :func:`bernoulli_mask`: jax.random.bernoulli's dropout mask bit for bit (spec §3.3) without
  JAX's rolled CPU loop.
- :func:`global_sq_norm`: clip_grad_norm_'s squared total norm (spec §5.3) with barriered squares.
- :func:`unrolled_threefry_key`: a key whose jax.random draws are the default generator's bits
  exactly, from the threefry rounds written out (one kernel per draw instead of JAX's CPU loop).

Every value equals the reference to float32 rounding (the masks bit for bit); the gradients too
(tests/test_networks.py, tests/test_math.py). On a GPU these are unmeasured: the optimization
barriers stop XLA fusing the reductions, and [x, 1] copies every layer input.
"""
from __future__ import annotations

import math as _pymath
from functools import partial
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from .math import mish, mish_given_exp, mish_grad_given_exp

LN_EPS = 1e-5
HIGHEST = jax.lax.Precision.HIGHEST


@partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def linear(x, kernel, bias, frozen_inputs: int = 0, precision=HIGHEST):
    """x @ kernel + bias over any leading axes: x [..., in], kernel [in, out], bias [out]
    -> [..., out] (the Linear layer of spec §3.1); ``precision`` (static) a jax.lax.Precision,
    full float32 (HIGHEST) by default, used by the forward and the backward products.

    Computed as one product [x, 1] @ [kernel; bias] (the bias as an extra input row, added in
    the dot's accumulation rather than after it): the same value up to float32 rounding as
    flax.linen.Dense's x @ kernel + bias, without a pass over the output to add the bias. The
    [x, 1] kept for the backward pass gives the kernel and the bias gradient in one contraction
    over all leading axes, sum_n [x, 1][n, i] g[n, o] (``einsum('ni,no->io')``): XLA:CPU lowers
    that straight to one dot of the two stored arrays, while the gradient JAX derives for
    x @ kernel makes it copy g into a transposed layout first and run a slower dot, and a
    separate sum for the bias (a slow column reduction on CPU). See benchmarks/README.md
    ("Where a CPU update's time goes"). Same gradients up to float32 summation order.

    ``frozen_inputs`` (static, 0 to ``in``): the first ``frozen_inputs`` input features get a
    zero cotangent and their part of g @ kernel^T is not computed. Only for inputs the caller
    has already passed through ``stop_gradient`` (the policy step's detached latents in
    front of the action, spec §5.2.7): their gradient is discarded anyway.

    Reverse mode only: being a ``custom_vjp``, it refuses ``jax.jvp`` / ``jax.jacfwd`` (JAX
    raises "can't apply forward-mode autodiff (jvp) to a custom_vjp function"); nothing in
    tdmpc2core uses forward mode. Cotangents come back in each argument's own dtype.
    Raises ValueError for ``frozen_inputs`` outside [0, in].
    """
    _check_frozen(x, frozen_inputs)
    return _linear_value(x, kernel, bias, precision)[0]


def _check_frozen(x, frozen_inputs):
    if jnp.ndim(x) == 0:
        raise ValueError("linear: x is a scalar; it needs a last axis of input features [..., in]")
    if not 0 <= frozen_inputs <= x.shape[-1]:
        raise ValueError(f"linear: frozen_inputs={frozen_inputs} is outside [0, {x.shape[-1]}] "
                         f"(the input's last axis, shape {tuple(x.shape)})")


def _linear_value(x, kernel, bias, precision):
    """([x, 1] @ [kernel; bias], [x, 1])."""
    x1 = jnp.concatenate([x, jnp.ones(x.shape[:-1] + (1,), x.dtype)], axis=-1)
    w1 = jnp.concatenate([kernel, bias[None]], axis=0)  # promotes, as x @ kernel + bias would
    return jax.lax.dot_general(x1, w1, (((x.ndim - 1,), (0,)), ((), ())), precision=precision), x1


def _linear_fwd(x, kernel, bias, frozen_inputs, precision):
    _check_frozen(x, frozen_inputs)
    y, x1 = _linear_value(x, kernel, bias, precision)
    return y, (x1, kernel, bias)


def _linear_bwd(frozen_inputs, precision, res, g):
    x1, kernel, bias = res
    d_kb = jnp.einsum("ni,no->io", x1.reshape(-1, x1.shape[-1]), g.reshape(-1, g.shape[-1]),
                      precision=precision)
    f = frozen_inputs
    dx = jnp.einsum("...o,io->...i", g, kernel[f:], precision=precision)
    if f:
        dx = jnp.concatenate([jnp.zeros(g.shape[:-1] + (f,), dx.dtype), dx], axis=-1)
    return dx.astype(x1.dtype), d_kb[:-1].astype(kernel.dtype), d_kb[-1].astype(bias.dtype)


linear.defvjp(_linear_fwd, _linear_bwd)


def _stored(x):
    """x behind an optimization barrier. A row sum of a stored array XLA:CPU runs as one loop;
    a row sum of an expression it splits into reduce-windows over a stored copy (about 7x
    slower on a [2048, 384] array). For e = exp(y) in :func:`layer_norm_act`'s forward pass:
    computed once, kept for the backward pass."""
    return jax.lax.optimization_barrier(x)


def _ln_stats(h):
    """mean, rstd, clamp weight over the last axis: flax.linen.LayerNorm's fast variance,
    var = max(0, v) with v = E[h^2] - mean^2, rstd = 1 / sqrt(var + 1e-5); the weight is
    d var / d v as autodiff of jnp.maximum gives it (1 for v > 0, 1/2 at 0, 0 below)."""
    mu = jnp.mean(h, axis=-1, keepdims=True)
    mu2 = jnp.mean(_stored(jnp.square(h)), axis=-1, keepdims=True)
    v = mu2 - jnp.square(mu)
    w = jnp.where(v > 0.0, 1.0, jnp.where(v == 0.0, 0.5, 0.0)).astype(h.dtype)
    return mu, jax.lax.rsqrt(jnp.maximum(0.0, v) + LN_EPS), w


def _ln_y(h, mu, rstd, scale, bias):
    return (h - mu) * (rstd * scale) + bias


def layer_norm_act(h, scale, bias, act: Optional[str] = None):
    """LayerNorm over the last axis (epsilon 1e-5), then Mish if ``act == 'mish'`` (spec §3.1).

    h [..., F], scale [F], bias [F] -> [..., F], computed in at least float32 (as flax's
    statistics are; a bfloat16 h gives a float32 result). The forward pass is
    ``flax.linen.LayerNorm(epsilon=1e-5)``'s formula (fast variance, max(0, E[h^2] - mean^2))
    followed by :func:`~tdmpc2core.model.math.mish`; E[h^2] is summed from a stored h^2 (see
    :func:`_stored`), so values can differ from flax's in the last float32 bits. The backward
    pass is written out (LayerNorm's gradient, dh = rstd (g' - mean(g') - xhat mean(g' xhat))
    with g' = scale g mish'(y), and mish' from the e = exp(y) the forward pass kept): the one
    JAX derives made XLA:CPU recompute LayerNorm and Mish's derivative from about eight stored
    arrays in each of the three fusions that read it (benchmarks/README.md). Same gradients
    up to float32 rounding, also where the variance is clamped (E[h^2] - mean^2 rounded to or
    below zero: the variance term is weighted as autodiff of the clamp weights it).

    ``act``: 'mish' or None (plain LayerNorm). Reverse mode only (custom_vjp, as
    :func:`linear`). Raises ValueError for another ``act``.
    """
    if act not in ("mish", None):
        raise ValueError(f"layer_norm_act: act={act!r}; accepted: 'mish' or None")
    # cast outside the custom_vjp: autodiff of the cast returns h's cotangent in h's dtype
    h = jnp.asarray(h)
    return _layer_norm_act(h.astype(jnp.promote_types(h.dtype, jnp.float32)), scale, bias, act)


@partial(jax.custom_vjp, nondiff_argnums=(3,))
def _layer_norm_act(h, scale, bias, act):
    mu, rstd, _ = _ln_stats(h)
    y = _ln_y(h, mu, rstd, scale, bias)
    return mish(y) if act == "mish" else y


def _layer_norm_act_fwd(h, scale, bias, act):
    mu, rstd, w = _ln_stats(h)
    y = _ln_y(h, mu, rstd, scale, bias)
    if act is None:
        return y, (h, mu, rstd, w, scale, bias, None)
    e = _stored(jnp.exp(jnp.minimum(y, 20.0)))
    return mish_given_exp(y, e), (h, mu, rstd, w, scale, bias, e)


def _layer_norm_act_bwd(act, res, g):
    h, mu, rstd, w, scale, bias, e = res
    xhat = (h - mu) * rstd
    if act == "mish":
        g = g * mish_grad_given_exp(_ln_y(h, mu, rstd, scale, bias), e)
    g_scaled = g * scale
    a = jnp.mean(_stored(g_scaled), axis=-1, keepdims=True)
    b = jnp.mean(_stored(g_scaled * xhat), axis=-1, keepdims=True)
    dh = rstd * (g_scaled - a - xhat * (b * w))
    lead = tuple(range(g.ndim - 1))
    d_scale = jnp.sum(g * xhat, axis=lead)
    d_bias = jnp.sum(g, axis=lead)
    return dh, d_scale.astype(scale.dtype), d_bias.astype(bias.dtype)


_layer_norm_act.defvjp(_layer_norm_act_fwd, _layer_norm_act_bwd)


_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREEFRY_PARITY = 0x1BD11BDA


def _threefry2x32(k1, k2, x1, x2):
    """Threefry-2x32 with 20 rounds (Salmon et al. 2011, the counter-based generator behind
    jax.random's default key), written out round by round so XLA fuses it into one
    elementwise loop. JAX's own CPU lowering rolls the rounds into a 5-step while loop that
    writes both [shape] words to memory every step. Same arithmetic, so the same bits."""
    ks = (k1, k2, k1 ^ k2 ^ jnp.uint32(_THREEFRY_PARITY))
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _THREEFRY_ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = (x2 << jnp.uint32(r)) | (x2 >> jnp.uint32(32 - r))
            x2 = x1 ^ x2
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + jnp.uint32(i + 1)
    return x1, x2


def bernoulli_mask(key, p: float, shape):
    """``jax.random.bernoulli(key, p, shape)``, bit for bit, faster on CPU (dropout, spec §3.3).

    Used where JAX draws with the default generator (threefry2x32, ``jax_threefry_partitionable``
    on, as in jax 0.10): the 32-bit words are threefry2x32(key, (i >> 32, i & 0xffffffff)) of
    the flat index i, xor-ed; jax.random's uniform is (word >> 9) * 2^-23, so ``u < p`` is the
    integer test ``word >> 9 < ceil(p_f32 * 2^23)``. Any other key type or generator setting,
    64-bit mode (``jax_enable_x64``: jax.random then draws float64 uniforms from 64-bit words)
    and a ``p`` that float32 rounds to 0 fall back to ``jax.random.bernoulli`` itself. ``key``:
    a raw uint32[2] key or a typed threefry key; ``p`` a Python float in (0, 1). Returns bool
    [shape]. tests/test_math.py checks the identity with jax.random.bernoulli.

    The test ``u < t`` is written ``u // t == 0`` (the same for unsigned u and t >= 1): XLA
    counts an integer division as expensive and will not copy it, with the 20 rounds before it,
    into every fusion that reads the mask. With ``<``, XLA:CPU recomputed the whole generator in
    each of the mask's readers (the dropout forward, its backward and the transposing fusions of
    the Q ensemble's first-layer gradient: three times per dropout site in an update); now the
    words are computed once per site and the readers compare.
    """
    shape = tuple(int(d) for d in shape)
    typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    threshold = int(np.ceil(np.float64(np.float32(p)) * 2.0 ** 23)) if 0.0 < p < 1.0 else 0
    fast = (jax.config.jax_threefry_partitionable and not jax.config.jax_enable_x64 and threshold >= 1
            and _pymath.prod(shape) < 2 ** 32
            and (jax.random.key_impl(key) == "threefry2x32" and key.shape == () if typed
                 else (jax.config.jax_default_prng_impl == "threefry2x32" and key.shape == (2,)
                       and key.dtype == jnp.uint32)))
    if not fast:
        return jax.random.bernoulli(key, p, shape)
    data = jax.random.key_data(key) if typed else key
    lo = jax.lax.iota(jnp.uint32, _pymath.prod(shape)).reshape(shape) if shape else jnp.zeros((), jnp.uint32)
    b1, b2 = _threefry2x32(data[0], data[1], jnp.zeros_like(lo), lo)
    return ((b1 ^ b2) >> jnp.uint32(9)) // jnp.uint32(threshold) == jnp.uint32(0)


def _unrolled_split(key, shape):
    """threefry2x32's partitionable split (``split(key, shape)``'s key data [*shape, 2]) with the
    rounds unrolled: the words of the flat indices i, stacked (jax's ``_threefry_split_foldlike``)."""
    lo = jax.lax.iota(jnp.uint32, _pymath.prod(shape)).reshape(shape)
    b1, b2 = _threefry2x32(key[0], key[1], jnp.zeros_like(lo), lo)
    return jnp.stack([b1, b2], axis=b1.ndim)


def _unrolled_bits(key, bit_width, shape):
    """threefry2x32's partitionable 32-bit random bits (the two words of the flat indices i,
    xor-ed) with the rounds unrolled; other widths from jax's own threefry."""
    from jax.extend.random import threefry_prng_impl
    if bit_width != 32:
        return threefry_prng_impl.random_bits(key, bit_width, shape)
    lo = jax.lax.iota(jnp.uint32, _pymath.prod(shape)).reshape(shape) if shape else jnp.zeros((), jnp.uint32)
    b1, b2 = _threefry2x32(key[0], key[1], jnp.zeros_like(lo), lo)
    return b1 ^ b2


_UNROLLED_IMPL = None


def _unrolled_impl():
    global _UNROLLED_IMPL
    if _UNROLLED_IMPL is None:
        from jax.extend.random import define_prng_impl, threefry_prng_impl
        _UNROLLED_IMPL = define_prng_impl(key_shape=(2,), seed=threefry_prng_impl.seed, split=_unrolled_split,
                                          random_bits=_unrolled_bits, fold_in=threefry_prng_impl.fold_in,
                                          name="threefry2x32_unrolled", tag="fru")
    return _UNROLLED_IMPL


def unrolled_threefry_key(key):
    """``key`` (a raw uint32[..., 2] threefry key) as a typed key whose draws are jax.random's,
    bit for bit, with threefry2x32's 20 rounds unrolled (:func:`_threefry2x32`) instead of JAX's
    CPU lowering, a 5-step while loop of its own for every draw's shape: XLA:CPU compiles
    each of those loops into several kernels, the unrolled rounds into one elementwise kernel
    (benchmarks/README.md, "The test suite's time"). Every jax.random function given the typed
    key (or keys split from it) draws its bits through it and turns them into numbers as it
    always does. Under the same conditions as :func:`bernoulli_mask`'s fast path (the default
    threefry generator, ``jax_threefry_partitionable`` on, no 64-bit mode); otherwise, and for a
    key that is already typed, ``key`` is returned unchanged."""
    if (not jax.config.jax_threefry_partitionable or jax.config.jax_enable_x64
            or jax.config.jax_default_prng_impl != "threefry2x32"
            or jnp.issubdtype(key.dtype, jax.dtypes.prng_key) or key.dtype != jnp.uint32 or key.shape[-1:] != (2,)):
        return key
    return jax.random.wrap_key_data(key, impl=_unrolled_impl())


def global_sq_norm(tree):
    """Sum of squares of every leaf of ``tree`` (the square of clip_grad_norm_'s total norm,
    spec §5.3), a float32 scalar. Each square goes through an optimization barrier: XLA:CPU
    then sums it in one loop instead of splitting the sum into reduce-windows over a stored
    copy (2x faster). The reference is the plain sum (:func:`tdmpc2core.model.kernels.global_sq_norm`)."""
    return sum(jnp.sum(jax.lax.optimization_barrier(jnp.square(x))) for x in jax.tree_util.tree_leaves(tree))


def conv2d(x, kernel, stride: int, precision):
    """'VALID' 2-D convolution x [N, H, W, C] * kernel [k, k, C, O] (HWIO) -> [N, H', W', O] as
    one matmul: the k x k strided slices of x concatenated on the channel axis in (kh, kw, C)
    order ([N, H', W', k * k * C], an im2col of slices), times the kernel reshaped to
    [k * k * C, O]. On XLA:CPU the gradient of ``lax.conv_general_dilated`` inside a while loop
    (the training program's update loop) ran about 20x slower than at top level (3.3 s against
    0.13 s per step of the rgb encoder at 64 images, one thread); this form ran in 0.17 s there.
    Same values as the convolution to float32 rounding (a different summation order)."""
    k = kernel.shape[0]
    n, h, w, c = x.shape
    ho, wo = (h - k) // stride + 1, (w - k) // stride + 1
    cols = [x[:, i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride, :]
            for i in range(k) for j in range(k)]
    patches = jnp.concatenate(cols, axis=-1)
    return jnp.dot(patches, kernel.reshape(k * k * c, kernel.shape[3]), precision=precision)
