"""Which kernels compute the networks: the plain flax/JAX reference or the CPU kernels
(:mod:`tdmpc2core.model.kernels_cpu`), chosen by the configuration's ``kernels`` field
(docs/fidelity.md "Kernels"; :data:`tdmpc2core.model.config.KERNELS`).

The choice is made once: :func:`choose` turns a configuration's ``kernels`` and
``matmul_precision`` into one :class:`Kernels` object (``"auto"`` resolved on the JAX backend),
the world model builds it with its networks (:class:`tdmpc2core.model.world_model.WorldModel`)
and every layer and the update compute with it. Its two kinds are two classes, not a string
the layers test:

* :class:`ReferenceKernels`, the spec's formula as flax and JAX write it: ``flax.linen.Dense``'s
  x @ kernel + bias (spec §3.1), ``flax.linen.LayerNorm(epsilon=1e-5)``'s fast variance
  (deviation N6) then ``jax.nn.mish`` (x tanh(softplus(x))), ``jax.random.bernoulli``'s dropout
  mask (spec §3.3) and a plain sum of squares for the clip norm (spec §5.3), all differentiated
  by JAX;
* :class:`CpuKernels`, the hand-written backward passes of :mod:`tdmpc2core.model.kernels_cpu`:
  the same values to float32 rounding (the masks bit for bit), faster on XLA:CPU; on other
  backends they are unmeasured, so "auto" takes them on a CPU backend only.

A new backend-specific kernel set is one more subclass (and one entry in :data:`KINDS`).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

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


@dataclasses.dataclass(frozen=True)
class Kernels:
    """The functions the networks and the update compute with, at one matmul precision.

    Hashable and compared by kind and precision, so a Flax module may hold it as an attribute.
    Build one with :func:`choose`. Attributes: ``name`` ("cpu" or "reference", what
    ``run.json`` records), ``matmul_precision`` ("highest": full float32, "high", "default");
    :attr:`precision` is its ``jax.lax.Precision``.
    """

    name: ClassVar[str] = ""
    #: whether the optimizers run Adam on one concatenated vector per parameter group
    #: (``optax.flatten``) rather than on each parameter array: the same elementwise arithmetic
    #: (spec §5.3); a handful of ops instead of several per parameter, which XLA:CPU runs faster,
    #: while a TPU pays for the concatenation and the slicing back (relayouts of its tiled
    #: arrays: about 0.5 ms of a 2.7 ms update at model size 5, benchmarks/README.md
    #: "Accelerator"). It sets the optimizer state's layout; :func:`tdmpc2core.io.checkpoint.restore`
    #: reads a checkpoint of either layout into the other.
    flat_optimizer: ClassVar[bool] = False
    matmul_precision: str = "highest"

    def __post_init__(self):
        check_kernel_fields("auto", self.matmul_precision)

    @property
    def precision(self) -> jax.lax.Precision:
        return PRECISIONS[self.matmul_precision]

    def linear(self, x, kernel, bias, frozen_inputs: int = 0):
        """The Linear layer x [..., in] @ kernel [in, out] + bias [out] -> [..., out] (spec §3.1);
        the first ``frozen_inputs`` input features are detached by the caller (the CPU kernels
        compute no cotangent for them). Raises ValueError for a scalar x."""
        raise NotImplementedError

    def conv2d(self, x, kernel, stride: int):
        """A 'VALID' 2-D convolution, channels last: x [N, H, W, C] * kernel [k, k, C, O] ->
        [N, (H - k) // stride + 1, (W - k) // stride + 1, O] (the rgb encoder's, spec §3.2)."""
        raise NotImplementedError

    def layer_norm_act(self, h, scale, bias, act: Optional[str]):
        """LayerNorm over the last axis (epsilon 1e-5) of h [..., F] with scale, bias [F], then
        Mish if ``act == 'mish'`` (spec §3.1), in at least float32 -> [..., F]. Raises
        ValueError for another ``act``."""
        raise NotImplementedError

    def bernoulli_mask(self, key, p: float, shape):
        """``jax.random.bernoulli(key, p, shape)``'s bits (bool [shape]; the dropout mask, spec §3.3)."""
        raise NotImplementedError

    def global_sq_norm(self, tree):
        """Sum of squares of every leaf of ``tree``, a float32 scalar (the square of
        clip_grad_norm_'s total norm, spec §5.3)."""
        raise NotImplementedError

    def draw_key(self, key):
        """The key a program draws from: ``key`` itself, or (CPU kernels) the same key whose
        jax.random draws give the same bits from a generator XLA:CPU compiles faster
        (:func:`~tdmpc2core.model.kernels_cpu.unrolled_threefry_key`)."""
        return key


@dataclasses.dataclass(frozen=True)
class ReferenceKernels(Kernels):
    """Plain flax/JAX (module docstring), differentiated by JAX."""

    name: ClassVar[str] = "reference"

    def linear(self, x, kernel, bias, frozen_inputs: int = 0):
        # flax.linen.Dense's dot_general(x, kernel) + bias; frozen_inputs ignored: JAX derives the
        # full input gradient and the caller's stop_gradient discards its frozen part
        if jnp.ndim(x) == 0:
            raise ValueError("linear: x is a scalar; it needs a last axis of input features [..., in]")
        dtype = jnp.result_type(x, kernel, bias)
        x, kernel, bias = (jnp.asarray(v, dtype) for v in (x, kernel, bias))
        y = jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())), precision=self.precision)
        return y + jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))

    def conv2d(self, x, kernel, stride: int):
        return jax.lax.conv_general_dilated(x, kernel, (stride, stride), "VALID",
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=self.precision)

    def layer_norm_act(self, h, scale, bias, act: Optional[str]):
        # flax.linen.LayerNorm's arithmetic (mean and E[h^2] over the last axis, var = max(0,
        # E[h^2] - mean^2), (h - mean) * (rsqrt(var + eps) * scale) + bias) then jax.nn.mish
        if act not in ("mish", None):
            raise ValueError(f"layer_norm_act: act={act!r}; accepted: 'mish' or None")
        h = jnp.asarray(h)
        h = h.astype(jnp.promote_types(h.dtype, jnp.float32))
        sq = jnp.square(h)  # flax's order of operations, so that autodiff sums the cotangents in its order
        mu, mu2 = jnp.mean(h, axis=-1), jnp.mean(sq, axis=-1)
        var = jnp.maximum(0.0, mu2 - jnp.square(mu))
        y = (h - mu[..., None]) * (jax.lax.rsqrt(var[..., None] + LN_EPS) * scale) + bias
        return jax.nn.mish(y) if act == "mish" else y

    def bernoulli_mask(self, key, p: float, shape):
        return jax.random.bernoulli(key, p, shape)

    def global_sq_norm(self, tree):
        return sum(jnp.sum(jnp.square(x)) for x in jax.tree_util.tree_leaves(tree))


@dataclasses.dataclass(frozen=True)
class CpuKernels(Kernels):
    """The hand-written backward passes of :mod:`tdmpc2core.model.kernels_cpu` (module
    docstring): a conv as the k x k strided slices of x concatenated times the kernel as one
    matmul (XLA:CPU runs ``conv_general_dilated``'s gradient inside a while loop, the training
    program's update loop, about 20x slower than at top level, and this matmul form at full
    speed); barriered squares for the clip norm."""

    name: ClassVar[str] = "cpu"
    flat_optimizer: ClassVar[bool] = True

    def linear(self, x, kernel, bias, frozen_inputs: int = 0):
        return kernels_cpu.linear(x, kernel, bias, frozen_inputs, self.precision)

    def conv2d(self, x, kernel, stride: int):
        return kernels_cpu.conv2d(x, kernel, stride, self.precision)

    def layer_norm_act(self, h, scale, bias, act: Optional[str]):
        return kernels_cpu.layer_norm_act(h, scale, bias, act)

    def bernoulli_mask(self, key, p: float, shape):
        return kernels_cpu.bernoulli_mask(key, p, shape)

    def global_sq_norm(self, tree):
        return kernels_cpu.global_sq_norm(tree)

    def draw_key(self, key):
        return kernels_cpu.unrolled_threefry_key(key)


#: the concrete kernel choices, by name
KINDS = {"reference": ReferenceKernels, "cpu": CpuKernels}
#: the layers' default when built by hand (the world model always passes its own)
REFERENCE = ReferenceKernels()


def choose(kernels: str = "auto", matmul_precision: str = "highest", backend: Optional[str] = None) -> Kernels:
    """The :class:`Kernels` of a configuration's ``kernels`` ("auto", "cpu" or "reference") and
    ``matmul_precision``: "auto" is resolved here, once, on ``backend`` (None: this process's
    JAX default backend; :func:`tdmpc2core.model.config.kernels_for_backend`).

    Raises:
      ValueError: ``kernels`` or ``matmul_precision`` not an accepted value (one line naming it).
    """
    check_kernel_fields(kernels, matmul_precision)
    name = kernels_for_backend(kernels, jax.default_backend() if backend is None else backend)
    return KINDS[name](matmul_precision)


def of_config(cfg) -> Kernels:
    """:func:`choose` of a :class:`~tdmpc2core.model.config.TDMPC2Config`'s ``kernels`` and ``matmul_precision``."""
    return choose(cfg.kernels, cfg.matmul_precision)


__all__ = ["Kernels", "ReferenceKernels", "CpuKernels", "KINDS", "REFERENCE", "choose", "of_config", "concrete",
           "precision", "PRECISIONS", "LN_EPS"]
