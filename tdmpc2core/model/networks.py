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

from typing import Callable, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from . import kernels as K
from .math import simnorm

#: The default matmul precision of the Dense layers: full float32 (no silent TF32/bf16 on GPUs;
#: spec §12.19). A run's own is its configuration's ``matmul_precision`` (the layers'
#: ``kernels.matmul_precision``), recorded in run.json.
MATMUL_PRECISION = K.PRECISIONS["highest"]
LN_EPS = K.LN_EPS
weight_init = nn.initializers.normal(stddev=0.02)


class Dense(nn.Module):
    """``flax.linen.Dense`` (same name in the tree, same parameters and initialisation; spec
    §3.1) computed by ``kernels.linear``: x [..., in] -> [..., features].

    ``kernels``: the :class:`~tdmpc2core.model.kernels.Kernels` every layer of a world model
    shares (its kind and matmul precision; :func:`tdmpc2core.model.kernels.choose`), by default
    the reference at full float32. ``frozen_inputs`` (internal, for the policy step's Q call):
    the first that many input features are detached by the caller and get no cotangent computed
    (CPU kernels).
    """

    features: int
    kernel_init: Callable = weight_init
    bias_init: Callable = nn.initializers.zeros
    kernels: K.Kernels = K.REFERENCE
    frozen_inputs: int = 0

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", self.kernel_init, (x.shape[-1], self.features), jnp.float32)
        bias = self.param("bias", self.bias_init, (self.features,), jnp.float32)
        return self.kernels.linear(x, kernel, bias, self.frozen_inputs)


class LayerNorm(nn.Module):
    """``flax.linen.LayerNorm(epsilon=1e-5)`` (same name in the tree, same parameters) computed
    by ``kernels.layer_norm_act``, optionally followed by Mish (``act='mish'``): x [..., F] ->
    [..., F] in at least float32. ``kernels`` as :class:`Dense`."""

    kernels: K.Kernels = K.REFERENCE

    @nn.compact
    def __call__(self, x, act: Optional[str] = None):
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (x.shape[-1],), jnp.float32)
        return self.kernels.layer_norm_act(x, scale, bias, act)


class Dropout(nn.Module):
    """``flax.linen.Dropout`` (same name in the tree, so the same ``make_rng`` key, and the
    same mask and scaling; spec §3.3) with the mask drawn by ``kernels.bernoulli_mask``
    (jax.random.bernoulli's bits on either kernels). ``kernels`` as :class:`Dense`."""

    rate: float
    kernels: K.Kernels = K.REFERENCE

    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        if self.rate == 0.0 or deterministic:
            return x
        if self.rate >= 1.0:  # as flax: all dropped, zero output and zero gradient (no 0/0)
            return jnp.zeros_like(x)
        keep_prob = 1.0 - self.rate
        mask = self.kernels.bernoulli_mask(self.make_rng("dropout"), keep_prob, x.shape)
        return jax.lax.select(mask, x / keep_prob, jnp.zeros_like(x))


class NormedLinear(nn.Module):
    """Linear -> [Dropout] -> LayerNorm -> activation ('mish' or 'simnorm') (spec §3.1).
    ``kernels`` and ``frozen_inputs`` (of the Linear) as :class:`Dense`."""

    features: int
    act: str = "mish"
    dropout: float = 0.0
    simnorm_dim: int = 8
    kernels: K.Kernels = K.REFERENCE
    frozen_inputs: int = 0

    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        x = Dense(self.features, kernels=self.kernels, frozen_inputs=self.frozen_inputs)(x)
        if self.dropout > 0:
            x = Dropout(rate=self.dropout, kernels=self.kernels)(x, deterministic=deterministic)
        if self.act not in ("mish", "simnorm"):
            raise ValueError(f"unknown activation {self.act!r}")
        x = LayerNorm(kernels=self.kernels)(x, "mish" if self.act == "mish" else None)
        return x if self.act == "mish" else simnorm(x, self.simnorm_dim)


class MLP(nn.Module):
    """mlp(in, hidden, out) of the official code (spec §3.1): x [..., in] -> [..., out].

    Hidden layers are NormedLinear with Mish, dropout only in the first one. The output
    layer is a plain Linear (``out_act=None``; zero weight if ``zero_out``) or a
    NormedLinear with ``out_act`` ('simnorm' for encoder and dynamics). ``kernels`` as
    :class:`Dense`, for every layer; ``frozen_inputs`` (internal) applies to the first layer
    (the one reading x).
    """

    hidden: Sequence[int]
    out: int
    out_act: Optional[str] = None
    dropout: float = 0.0
    zero_out: bool = False
    simnorm_dim: int = 8
    kernels: K.Kernels = K.REFERENCE
    frozen_inputs: int = 0

    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        frozen = self.frozen_inputs
        kp = dict(kernels=self.kernels)
        for i, h in enumerate(self.hidden):
            x = NormedLinear(h, "mish", self.dropout if i == 0 else 0.0, self.simnorm_dim, frozen_inputs=frozen,
                             **kp)(x, deterministic)
            frozen = 0
        if self.out_act is None:
            kinit = nn.initializers.zeros if self.zero_out else weight_init
            return Dense(self.out, kernel_init=kinit, frozen_inputs=frozen, **kp)(x)
        return NormedLinear(self.out, self.out_act, 0.0, self.simnorm_dim, frozen_inputs=frozen, **kp)(x, deterministic)


def torch_default_init(fan_in: int):
    """PyTorch's default Conv2d/Linear initialiser (kaiming_uniform with a = sqrt(5) for the
    weight, uniform(+-1/sqrt(fan_in)) for the bias; spec §3.7 conv row): both are
    uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in_channels * kh * kw."""
    bound = 1.0 / float(fan_in) ** 0.5

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


class Conv(nn.Module):
    """A 2-D convolution without padding ('VALID', as torch's Conv2d default), channels
    first: x [N, C_in, H, W] -> [N, features, H', W'], H' = (H - k) // stride + 1.

    Parameters: ``kernel`` [k, k, C_in, features] (flax's HWIO layout; torch's OIHW weight
    is its transpose (3, 2, 0, 1)) and ``bias`` [features], both initialised as PyTorch's
    default (:func:`torch_default_init`; spec §3.7). Computed by ``kernels.conv2d`` (the CPU
    kernels' matmul form, or ``jax.lax.conv_general_dilated``), ``kernels`` as :class:`Dense`.
    """

    features: int
    kernel_size: int
    stride: int
    kernels: K.Kernels = K.REFERENCE

    @nn.compact
    def __call__(self, x):
        k, cin = self.kernel_size, x.shape[1]
        init = torch_default_init(cin * k * k)
        kernel = self.param("kernel", init, (k, k, cin, self.features), jnp.float32)
        bias = self.param("bias", init, (self.features,), jnp.float32)
        # computed channels-last (NHWC) between two transposes: XLA:CPU runs an NCHW convolution
        # inside a while loop (the training chunk's update and tick loops) about 25x slower than
        # at top level; NHWC is faster but its gradient is still ~20x slower there, hence the CPU
        # kernels' matmul form (kernels.conv2d)
        y = self.kernels.conv2d(jnp.transpose(x, (0, 2, 3, 1)), kernel, self.stride)
        return jnp.transpose(y, (0, 3, 1, 2)) + bias[None, :, None, None]


#: the official conv trunk (5f6fade ``layers.conv``): (kernel size, stride) of its 4 layers
CONV_LAYERS = ((7, 2), (5, 2), (3, 2), (3, 1))


def conv_out_side(side: int = 64) -> int:
    """The side of the conv trunk's output for an input of ``side`` (64 -> 4)."""
    for k, s in CONV_LAYERS:
        side = (side - k) // s + 1
    return side


class ConvEncoder(nn.Module):
    """The rgb encoder after ShiftAug (spec §3.2 rgb row; 5f6fade ``layers.conv`` with
    SimNorm): x [N, C, 64, 64] float32 on the 0-255 scale (already shifted:
    :func:`tdmpc2core.model.pixels.shift_aug`) -> x/255 - 0.5 -> Conv(C->nc, k7, s2) ReLU ->
    Conv(nc->nc, k5, s2) ReLU -> Conv(k3, s2) ReLU -> Conv(k3, s1) -> flatten in (C, H, W)
    order -> SimNorm: z [N, nc * 4 * 4] (512 with the paper's nc = 32; no Linear, no
    LayerNorm). Layers ``Conv_0``..``Conv_3`` (:class:`Conv`)."""

    num_channels: int = 32
    simnorm_dim: int = 8
    kernels: K.Kernels = K.REFERENCE

    @nn.compact
    def __call__(self, x):
        x = x / 255.0 - 0.5
        for i, (k, s) in enumerate(CONV_LAYERS):
            x = Conv(self.num_channels, k, s, kernels=self.kernels)(x)
            if i < len(CONV_LAYERS) - 1:
                x = jax.nn.relu(x)
        x = x.reshape(x.shape[0], -1)
        return simnorm(x, self.simnorm_dim)


def build_modules(cfg, obs_dim: int, action_dim: int, task_dim: int = 0,
                  kernels: Optional[K.Kernels] = None) -> dict[str, nn.Module]:
    """The world model's networks for a resolved config (spec §3.2 table).

    Inputs (concatenated in this order): encoder obs ⊕ e; dynamics, reward, Q: z ⊕ e ⊕ a;
    pi, termination: z ⊕ e, where e is the task embedding (task_dim 0 for single-task).
    Every layer computes with ``kernels`` (None: :func:`tdmpc2core.model.kernels.of_config`
    of ``cfg``; the world model passes the one it chose). With ``cfg.obs == "rgb"`` the encoder
    is the conv trunk (:class:`ConvEncoder`, ``cfg.num_channels``; its input the shifted image,
    not obs ⊕ e). Raises ValueError for a ``kernels`` or ``matmul_precision`` not accepted.
    """
    kp = dict(kernels=K.of_config(cfg) if kernels is None else kernels)
    mlp2 = (cfg.mlp_dim, cfg.mlp_dim)
    enc_hidden = (cfg.enc_dim,) * max(cfg.num_enc_layers - 1, 1)
    if getattr(cfg, "obs", "state") == "rgb":
        encoder = ConvEncoder(cfg.num_channels, cfg.simnorm_dim, kp["kernels"])
    else:
        encoder = MLP(enc_hidden, cfg.latent_dim, out_act="simnorm", simnorm_dim=cfg.simnorm_dim, **kp)
    mods = {
        "encoder": encoder,
        "dynamics": MLP(mlp2, cfg.latent_dim, out_act="simnorm", simnorm_dim=cfg.simnorm_dim, **kp),
        "reward": MLP(mlp2, cfg.num_bins, zero_out=True, **kp),
        "pi": MLP(mlp2, 2 * action_dim, **kp),
        "q": MLP(mlp2, cfg.num_bins, dropout=cfg.dropout, zero_out=True, **kp),
    }
    if cfg.episodic:
        mods["termination"] = MLP(mlp2, 1, **kp)
    return mods


def init_params(modules: dict, key, obs_dim: int, action_dim: int, latent_dim: int, num_q: int,
                task_dim: int = 0, num_tasks: int = 0, obs_shape=None) -> dict:
    """Initial parameters: {'encoder','dynamics','reward','pi','qs'(stacked K),['termination'],
    ['task_emb']}.

    Multi-task (``num_tasks > 0`` and ``task_dim > 0``): ``task_emb`` is the embedding table
    [num_tasks, task_dim], initialised uniform(-0.02, 0.02) (spec §3.7); its max-norm 1 is
    applied at look-up (:func:`tdmpc2core.model.update.renorm_rows`). The single-task key stream is
    unchanged (the embedding draws from a key of its own).

    ``obs_shape`` (C, H, W): rgb observations; the encoder (a :class:`ConvEncoder`) is
    initialised on an image of that shape from the same key as the state encoder.
    """
    keys = jax.random.split(key, 6)
    o = jnp.zeros((1, obs_dim + task_dim) if obs_shape is None else (1,) + tuple(obs_shape), jnp.float32)
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
