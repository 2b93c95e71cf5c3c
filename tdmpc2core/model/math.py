"""Math primitives of TD-MPC2 (spec §4): symlog, two-hot, soft cross-entropy, SimNorm,
Mish, the policy's log-std squashing and 5f6fade log-probability, the running scale S.

All functions are pure JAX and work on any leading batch shape.
"""
from __future__ import annotations

import math as _pymath

import jax
import jax.numpy as jnp

LOG_2PI_HALF = 0.5 * _pymath.log(2.0 * _pymath.pi)


def symlog(x):
    """sign(x) * ln(1 + |x|) (spec §4.1)."""
    return jnp.sign(x) * jnp.log1p(jnp.abs(x))


def symexp(x):
    """sign(x) * (exp(|x|) - 1) (spec §4.1)."""
    return jnp.sign(x) * jnp.expm1(jnp.abs(x))


def bin_centers(num_bins: int, vmin: float, vmax: float):
    """The two-hot support in symlog space: linspace(vmin, vmax, num_bins) (spec §4.3)."""
    return jnp.linspace(vmin, vmax, num_bins, dtype=jnp.float32)


def two_hot(y, num_bins: int, vmin: float, vmax: float):
    """Two-hot target distribution of scalar targets (spec §4.2).

    Args:
      y: [...] float targets (untransformed returns / rewards).
    Returns:
      [..., num_bins] float32: mass 1-w on bin i and w on bin (i+1) mod num_bins where
      u = (clip(symlog(y), vmin, vmax) - vmin) / bin_size, i = floor(u), w = u - i.
    """
    bin_size = (vmax - vmin) / (num_bins - 1)
    s = jnp.clip(symlog(y), vmin, vmax)
    u = (s - vmin) / bin_size
    i = jnp.floor(u)
    w = (u - i)[..., None]
    i = i.astype(jnp.int32)
    lo = jax.nn.one_hot(i, num_bins, dtype=jnp.float32)
    hi = jax.nn.one_hot((i + 1) % num_bins, num_bins, dtype=jnp.float32)
    return lo * (1.0 - w) + hi * w


def two_hot_inv(logits, vmin: float, vmax: float):
    """Decode logits [..., num_bins] to scalars [...]: symexp(sum softmax * bins) (spec §4.3)."""
    num_bins = logits.shape[-1]
    p = jax.nn.softmax(logits, axis=-1)
    s = jnp.sum(p * bin_centers(num_bins, vmin, vmax), axis=-1)
    return symexp(s)


def soft_ce(logits, y, vmin: float, vmax: float):
    """Soft cross-entropy between logits [..., N] and two-hot(y) for y [...]; returns [...] (spec §4.4)."""
    target = two_hot(y, logits.shape[-1], vmin, vmax)
    return -jnp.sum(target * jax.nn.log_softmax(logits, axis=-1), axis=-1)


def simnorm(x, group: int = 8):
    """Simplicial normalisation: softmax within consecutive groups of ``group`` (spec §3.1)."""
    shape = x.shape
    x = x.reshape(*shape[:-1], shape[-1] // group, group)
    return jax.nn.softmax(x, axis=-1).reshape(shape)


def mish(x):
    """x * tanh(softplus(x)) (spec §3.1), evaluated as x * n / (n + 2) with n = e^x (e^x + 2).

    The identity tanh(ln(1 + e^x)) = ((1+e^x)^2 - 1) / ((1+e^x)^2 + 1) needs one exp instead
    of three transcendentals (3.4x faster on CPU); it agrees with the direct formula to
    float32 rounding (tests/test_math.py). For x > 20, mish(x) = x in float32.
    """
    return mish_given_exp(x, jnp.exp(jnp.minimum(x, 20.0)))


def mish_given_exp(x, e):
    """:func:`mish` of x from e = exp(min(x, 20)) already computed (same operations)."""
    n = e * (e + 2.0)
    return jnp.where(x > 20.0, x, x * n / (n + 2.0))


def mish_grad_given_exp(x, e):
    """d mish / dx from e = exp(min(x, 20)): t + x 4e(e+1) / (n+2)^2 with n = e(e+2) and
    t = n/(n+2) = tanh(softplus(x)) (the derivative of x n/(n+2)); 1 for x > 20, where
    :func:`mish` is the identity."""
    n = e * (e + 2.0)
    return jnp.where(x > 20.0, 1.0, n / (n + 2.0) + x * (4.0 * e * (e + 1.0)) / jnp.square(n + 2.0))


def squash_log_std(raw, log_std_min: float, log_std_max: float):
    """log sigma = min + (max - min)/2 * (tanh(raw) + 1), in [min, max] (spec §4.5, §12.11)."""
    return log_std_min + 0.5 * (log_std_max - log_std_min) * (jnp.tanh(raw) + 1.0)


def gaussian_logprob_5f6fade(eps, log_std, size=None):
    """The paper-era (5f6fade) scaled Gaussian log-probability (spec §4.5, §12.1).

    r = sum_i(-eps_i^2/2 - log_std_i); returns size * (r - ln(2 pi)/2), shape [..., 1].
    ``size`` defaults to the action dimension (multi-task: the task's active dims, [..., 1]).
    """
    r = jnp.sum(-0.5 * jnp.square(eps) - log_std, axis=-1, keepdims=True)
    if size is None:
        size = eps.shape[-1]
    return (r - LOG_2PI_HALF) * size


def squash_correction(pi):
    """sum_i ln(max(0, 1 - tanh(u_i)^2) + 1e-6) for pi = tanh(u), shape [..., 1] (spec §4.5)."""
    return jnp.sum(jnp.log(jax.nn.relu(1.0 - jnp.square(pi)) + 1e-6), axis=-1, keepdims=True)


def percentile_range(x, lo: float = 5.0, hi: float = 95.0):
    """P_hi - P_lo over axis 0 with linear interpolation at p (n-1)/100 (spec §4.7)."""
    x = jnp.sort(x.reshape(x.shape[0], -1), axis=0)
    n = x.shape[0]

    def pct(p):
        pos = p * (n - 1) / 100.0
        f = int(_pymath.floor(pos))
        c = min(f + 1, n - 1)
        w = pos - f
        return x[f] * (1.0 - w) + x[c] * w

    return (pct(hi) - pct(lo)).squeeze()


def running_scale_update(scale, x, tau: float):
    """S <- S + tau * (max(P95 - P5, 1) - S) from the batch x [B, 1] (spec §4.7)."""
    v = jnp.maximum(percentile_range(jax.lax.stop_gradient(x)), 1.0)
    return scale + tau * (v - scale)
