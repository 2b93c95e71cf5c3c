"""Which kernels compute the networks: the plain flax/JAX reference or the CPU kernels
(:mod:`tdmpc2core.model.kernels_cpu`), chosen by the configuration's ``kernels`` field
(docs/fidelity.md "Kernels"; :data:`tdmpc2core.model.config.KERNELS`).

The reference is the spec's formula as flax and JAX write it: ``flax.linen.Dense``'s
x @ kernel + bias (spec §3.1), ``flax.linen.LayerNorm(epsilon=1e-5)``'s fast variance
(deviation N6) then ``jax.nn.mish`` (x tanh(softplus(x))), ``jax.random.bernoulli``'s dropout
mask (spec §3.3) and a plain sum of squares for the clip norm (spec §5.3), all differentiated
by JAX. The CPU kernels give the same values to float32 rounding (the masks bit for bit) and
are faster on XLA:CPU; on other backends they are unmeasured, so "auto" takes them on a CPU
backend only. Each function here takes the concrete choice, "cpu" or "reference"
(:func:`concrete`).
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from . import kernels_cpu
from .config import check_kernel_fields, kernels_for_backend

LN_EPS = kernels_cpu.LN_EPS
PRECISIONS = {"highest": jax.lax.Precision.HIGHEST, "high": jax.lax.Precision.HIGH,
              "default": jax.lax.Precision.DEFAULT}


def concrete(kernels: str) -> str:
    """``kernels`` ("auto", "cpu" or "reference") resolved on this process's JAX default
    backend: "auto" is "cpu" on a CPU backend, "reference" elsewhere. Raises ValueError for
    another value."""
    return kernels_for_backend(kernels, jax.default_backend())


def precision(name: str) -> jax.lax.Precision:
    """The jax.lax.Precision of a ``matmul_precision`` name ("highest", "high", "default").
    Raises ValueError for another name."""
    check_kernel_fields("auto", name)
    return PRECISIONS[name]


def linear(x, kernel, bias, kernels: str, precision: jax.lax.Precision, frozen_inputs: int = 0):
    """The Linear layer x [..., in] @ kernel [in, out] + bias [out] -> [..., out] (spec §3.1).

    ``kernels`` "cpu": :func:`kernels_cpu.linear` (the first ``frozen_inputs`` input features,
    already detached by the caller, get no cotangent computed); "reference": flax.linen.Dense's
    ``dot_general(x, kernel) + bias`` (``frozen_inputs`` ignored: JAX derives the full input
    gradient and the caller's stop_gradient discards its frozen part). Same values to float32
    rounding. Raises ValueError for a scalar x or another ``kernels``.
    """
    if kernels == "cpu":
        return kernels_cpu.linear(x, kernel, bias, frozen_inputs, precision)
    _only(kernels)
    if jnp.ndim(x) == 0:
        raise ValueError("linear: x is a scalar; it needs a last axis of input features [..., in]")
    dtype = jnp.result_type(x, kernel, bias)
    x, kernel, bias = (jnp.asarray(v, dtype) for v in (x, kernel, bias))
    y = jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())), precision=precision)
    return y + jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))


def conv2d(x, kernel, stride: int, kernels: str, precision: jax.lax.Precision):
    """A 'VALID' 2-D convolution, channels last: x [N, H, W, C] * kernel [k, k, C, O] ->
    [N, (H - k) // stride + 1, (W - k) // stride + 1, O] (the rgb encoder's, spec §3.2).

    ``kernels`` "cpu": :func:`kernels_cpu.conv2d` (the k x k strided slices of x concatenated,
    times the kernel as one matmul: XLA:CPU runs ``conv_general_dilated``'s gradient inside a
    while loop, the training program's update loop, about 20x slower than at top level, and
    this matmul form at full speed); "reference": ``jax.lax.conv_general_dilated``. Same
    values to float32 rounding. Raises ValueError for another ``kernels``.
    """
    if kernels == "cpu":
        return kernels_cpu.conv2d(x, kernel, stride, precision)
    _only(kernels)
    return jax.lax.conv_general_dilated(x, kernel, (stride, stride), "VALID",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=precision)


def layer_norm_act(h, scale, bias, act: Optional[str], kernels: str):
    """LayerNorm over the last axis (epsilon 1e-5) of h [..., F] with scale, bias [F], then
    Mish if ``act == 'mish'`` (spec §3.1), in at least float32 -> [..., F].

    ``kernels`` "cpu": :func:`kernels_cpu.layer_norm_act`; "reference": flax.linen.LayerNorm's
    arithmetic (mean and E[h^2] over the last axis, var = max(0, E[h^2] - mean^2),
    (h - mean) * (rsqrt(var + eps) * scale) + bias) then ``jax.nn.mish``, differentiated by JAX.
    Raises ValueError for another ``act`` or ``kernels``.
    """
    if kernels == "cpu":
        return kernels_cpu.layer_norm_act(h, scale, bias, act)
    _only(kernels)
    if act not in ("mish", None):
        raise ValueError(f"layer_norm_act: act={act!r}; accepted: 'mish' or None")
    h = jnp.asarray(h)
    h = h.astype(jnp.promote_types(h.dtype, jnp.float32))
    sq = jnp.square(h)  # flax's order of operations, so that autodiff sums the cotangents in its order
    mu, mu2 = jnp.mean(h, axis=-1), jnp.mean(sq, axis=-1)
    var = jnp.maximum(0.0, mu2 - jnp.square(mu))
    y = (h - mu[..., None]) * (jax.lax.rsqrt(var[..., None] + LN_EPS) * scale) + bias
    return jax.nn.mish(y) if act == "mish" else y


def bernoulli_mask(key, p: float, shape, kernels: str):
    """``jax.random.bernoulli(key, p, shape)`` (bool [shape]; the dropout mask, spec §3.3):
    JAX's own on "reference", :func:`kernels_cpu.bernoulli_mask` (the same bits) on "cpu".
    Raises ValueError for another ``kernels``."""
    if kernels == "cpu":
        return kernels_cpu.bernoulli_mask(key, p, shape)
    _only(kernels)
    return jax.random.bernoulli(key, p, shape)


def global_sq_norm(tree, kernels: str):
    """Sum of squares of every leaf of ``tree``, a scalar (the square of clip_grad_norm_'s total
    norm, spec §5.3): the plain sum on "reference", :func:`kernels_cpu.global_sq_norm` (barriered
    squares, the same value to float32 rounding) on "cpu". Raises ValueError for another
    ``kernels``."""
    if kernels == "cpu":
        return kernels_cpu.global_sq_norm(tree)
    _only(kernels)
    return sum(jnp.sum(jnp.square(x)) for x in jax.tree_util.tree_leaves(tree))


def _only(kernels):
    if kernels != "reference":
        raise ValueError(f"kernels={kernels!r} is not a concrete kernel choice here; accepted: 'cpu' or "
                         f"'reference' (resolve 'auto' with tdmpc2core.model.kernels.concrete)")
