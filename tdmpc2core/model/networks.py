"""Flax modules of the TD-MPC2 world model (spec §3).

Every module is a single network; the world model is a dict of their parameters
(``encoder``, ``dynamics``, ``reward``, ``qs`` (stacked over the K ensemble members on
axis 0), ``pi``, and ``termination`` in the episodic mode). :mod:`tdmpc2core.model.world_model`
applies them. Keeping the Q members stacked lets a call evaluate only the random pair it
needs (exactly the same numbers as evaluating all K and selecting two).

Initialisation (spec §3.7, 5f6fade): every Linear weight ~ N(0, 0.02^2) (PyTorch's
trunc_normal with absolute bounds +-2 is practically untruncated at std 0.02), biases 0,
LayerNorm scale 1 / bias 0 (epsilon 1e-5), and the last Linear weight of the reward head
and of every Q member zero.
"""
from __future__ import annotations

from functools import partial
from typing import Callable, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from .math import bernoulli_mask, mish, mish_given_exp, mish_grad_given_exp, simnorm

#: Matmul precision of every Dense layer: full float32 (no silent TF32/bf16 on GPUs; spec §12.19).
MATMUL_PRECISION = jax.lax.Precision.HIGHEST
LN_EPS = 1e-5
weight_init = nn.initializers.normal(stddev=0.02)


@partial(jax.custom_vjp, nondiff_argnums=(3,))
def linear(x, kernel, bias, frozen_inputs: int = 0):
    """x @ kernel + bias over any leading axes: x [..., in], kernel [in, out], bias [out]
    -> [..., out] (the Linear layer of spec §3.1, float32 at HIGHEST precision).

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
    return _linear_value(x, kernel, bias)[0]


def _check_frozen(x, frozen_inputs):
    if jnp.ndim(x) == 0:
        raise ValueError("linear: x is a scalar; it needs a last axis of input features [..., in]")
    if not 0 <= frozen_inputs <= x.shape[-1]:
        raise ValueError(f"linear: frozen_inputs={frozen_inputs} is outside [0, {x.shape[-1]}] "
                         f"(the input's last axis, shape {tuple(x.shape)})")


def _linear_value(x, kernel, bias):
    """([x, 1] @ [kernel; bias], [x, 1])."""
    x1 = jnp.concatenate([x, jnp.ones(x.shape[:-1] + (1,), x.dtype)], axis=-1)
    w1 = jnp.concatenate([kernel, bias[None]], axis=0)  # promotes, as x @ kernel + bias would
    return jax.lax.dot_general(x1, w1, (((x.ndim - 1,), (0,)), ((), ())), precision=MATMUL_PRECISION), x1


def _linear_fwd(x, kernel, bias, frozen_inputs):
    _check_frozen(x, frozen_inputs)
    y, x1 = _linear_value(x, kernel, bias)
    return y, (x1, kernel, bias)


def _linear_bwd(frozen_inputs, res, g):
    x1, kernel, bias = res
    d_kb = jnp.einsum("ni,no->io", x1.reshape(-1, x1.shape[-1]), g.reshape(-1, g.shape[-1]),
                      precision=MATMUL_PRECISION)
    f = frozen_inputs
    dx = jnp.einsum("...o,io->...i", g, kernel[f:], precision=MATMUL_PRECISION)
    if f:
        dx = jnp.concatenate([jnp.zeros(g.shape[:-1] + (f,), dx.dtype), dx], axis=-1)
    return dx.astype(x1.dtype), d_kb[:-1].astype(kernel.dtype), d_kb[-1].astype(bias.dtype)


linear.defvjp(_linear_fwd, _linear_bwd)


class Dense(nn.Module):
    """``flax.linen.Dense`` (same name in the tree, same parameters and initialisation) applied
    through :func:`linear`; ``frozen_inputs`` as there."""

    features: int
    kernel_init: Callable = weight_init
    bias_init: Callable = nn.initializers.zeros

    @nn.compact
    def __call__(self, x, frozen_inputs: int = 0):
        kernel = self.param("kernel", self.kernel_init, (x.shape[-1], self.features), jnp.float32)
        bias = self.param("bias", self.bias_init, (self.features,), jnp.float32)
        return linear(x, kernel, bias, frozen_inputs)


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


class LayerNorm(nn.Module):
    """``flax.linen.LayerNorm(epsilon=1e-5)`` (same name in the tree, same parameters) applied
    through :func:`layer_norm_act`, optionally followed by Mish (``act='mish'``)."""

    @nn.compact
    def __call__(self, x, act: Optional[str] = None):
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (x.shape[-1],), jnp.float32)
        return layer_norm_act(x, scale, bias, act)


class Dropout(nn.Module):
    """``flax.linen.Dropout`` (same name in the tree, so the same ``make_rng`` key, and the
    same mask and scaling) with the mask drawn by :func:`~tdmpc2core.model.math.bernoulli_mask`,
    which computes jax.random.bernoulli's bits without JAX's rolled CPU loop (spec §3.3)."""

    rate: float

    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        if self.rate == 0.0 or deterministic:
            return x
        if self.rate >= 1.0:  # as flax: all dropped, zero output and zero gradient (no 0/0)
            return jnp.zeros_like(x)
        keep_prob = 1.0 - self.rate
        mask = bernoulli_mask(self.make_rng("dropout"), keep_prob, x.shape)
        return jax.lax.select(mask, x / keep_prob, jnp.zeros_like(x))


class NormedLinear(nn.Module):
    """Linear -> [Dropout] -> LayerNorm -> activation ('mish' or 'simnorm') (spec §3.1)."""

    features: int
    act: str = "mish"
    dropout: float = 0.0
    simnorm_dim: int = 8

    @nn.compact
    def __call__(self, x, deterministic: bool = True, frozen_inputs: int = 0):
        x = Dense(self.features)(x, frozen_inputs)
        if self.dropout > 0:
            x = Dropout(rate=self.dropout)(x, deterministic=deterministic)
        if self.act not in ("mish", "simnorm"):
            raise ValueError(f"unknown activation {self.act!r}")
        x = LayerNorm()(x, "mish" if self.act == "mish" else None)
        return x if self.act == "mish" else simnorm(x, self.simnorm_dim)


class MLP(nn.Module):
    """mlp(in, hidden, out) of the official code (spec §3.1).

    Hidden layers are NormedLinear with Mish, dropout only in the first one. The output
    layer is a plain Linear (``out_act=None``; zero weight if ``zero_out``) or a
    NormedLinear with ``out_act`` ('simnorm' for encoder and dynamics).
    """

    hidden: Sequence[int]
    out: int
    out_act: Optional[str] = None
    dropout: float = 0.0
    zero_out: bool = False
    simnorm_dim: int = 8

    @nn.compact
    def __call__(self, x, deterministic: bool = True, frozen_inputs: int = 0):
        """``frozen_inputs``: see :func:`linear`; applies to the first layer (the one reading x)."""
        frozen = frozen_inputs
        for i, h in enumerate(self.hidden):
            x = NormedLinear(h, "mish", self.dropout if i == 0 else 0.0, self.simnorm_dim)(x, deterministic, frozen)
            frozen = 0
        if self.out_act is None:
            kinit = nn.initializers.zeros if self.zero_out else weight_init
            return Dense(self.out, kernel_init=kinit)(x, frozen)
        return NormedLinear(self.out, self.out_act, 0.0, self.simnorm_dim)(x, deterministic, frozen)


def build_modules(cfg, obs_dim: int, action_dim: int, task_dim: int = 0) -> dict[str, nn.Module]:
    """The world model's networks for a resolved config (spec §3.2 table).

    Inputs (concatenated in this order): encoder obs ⊕ e; dynamics, reward, Q: z ⊕ e ⊕ a;
    pi, termination: z ⊕ e, where e is the task embedding (task_dim 0 for single-task).
    """
    mlp2 = (cfg.mlp_dim, cfg.mlp_dim)
    enc_hidden = (cfg.enc_dim,) * max(cfg.num_enc_layers - 1, 1)
    mods = {
        "encoder": MLP(enc_hidden, cfg.latent_dim, out_act="simnorm", simnorm_dim=cfg.simnorm_dim),
        "dynamics": MLP(mlp2, cfg.latent_dim, out_act="simnorm", simnorm_dim=cfg.simnorm_dim),
        "reward": MLP(mlp2, cfg.num_bins, zero_out=True),
        "pi": MLP(mlp2, 2 * action_dim),
        "q": MLP(mlp2, cfg.num_bins, dropout=cfg.dropout, zero_out=True),
    }
    if cfg.episodic:
        mods["termination"] = MLP(mlp2, 1)
    return mods


def init_params(modules: dict, key, obs_dim: int, action_dim: int, latent_dim: int, num_q: int,
                task_dim: int = 0, num_tasks: int = 0) -> dict:
    """Initial parameters: {'encoder','dynamics','reward','pi','qs'(stacked K),['termination'],
    ['task_emb']}.

    Multi-task (``num_tasks > 0`` and ``task_dim > 0``): ``task_emb`` is the embedding table
    [num_tasks, task_dim], initialised uniform(-0.02, 0.02) (spec §3.7); its max-norm 1 is
    applied at look-up (:func:`tdmpc2core.model.update.renorm_rows`). The single-task key stream is
    unchanged (the embedding draws from a key of its own).
    """
    keys = jax.random.split(key, 6)
    o = jnp.zeros((1, obs_dim + task_dim), jnp.float32)
    za = jnp.zeros((1, latent_dim + task_dim + action_dim), jnp.float32)
    z = jnp.zeros((1, latent_dim + task_dim), jnp.float32)
    params = {
        "encoder": modules["encoder"].init(keys[0], o)["params"],
        "dynamics": modules["dynamics"].init(keys[1], za)["params"],
        "reward": modules["reward"].init(keys[2], za)["params"],
        "pi": modules["pi"].init(keys[3], z)["params"],
        "qs": jax.vmap(lambda k: modules["q"].init(k, za)["params"])(jax.random.split(keys[4], num_q)),
    }
    if "termination" in modules:
        params["termination"] = modules["termination"].init(keys[5], z)["params"]
    if num_tasks > 0 and task_dim > 0:
        params["task_emb"] = jax.random.uniform(jax.random.fold_in(key, 7), (num_tasks, task_dim), jnp.float32,
                                                -0.02, 0.02)
    return params


def count_params(tree) -> int:
    """Number of scalars in a parameter tree."""
    return int(sum(x.size for x in jax.tree_util.tree_leaves(tree)))
