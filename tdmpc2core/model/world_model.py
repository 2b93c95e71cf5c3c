"""The world model's calls (spec §3-§4): encode, next, reward, pi, Q (all / min / avg of a
random pair), termination.

``WorldModel`` holds the Flax modules (static, hashable through the config); parameters
are passed explicitly. Shapes: any leading batch dims ``[...]``; z is ``[..., latent_dim]``,
a is ``[..., action_dim]`` in [-1, 1]. ``e`` is the task embedding ``[..., task_dim]`` (None
for single-task) and ``mask`` the task's action mask ``[..., action_dim]`` (None: all dims).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp

from . import kernels as K
from . import math as tm
from . import pixels
from .networks import build_modules, init_params


def _cat(*xs):
    """Concatenate on the last axis, broadcasting the leading axes (e.g. a task embedding
    [B, D] beside latents [H, B, L]); single-task inputs have equal leading axes already."""
    xs = [x for x in xs if x is not None]
    lead = jnp.broadcast_shapes(*(x.shape[:-1] for x in xs))
    return jnp.concatenate([jnp.broadcast_to(x, lead + x.shape[-1:]) for x in xs], axis=-1)


@dataclasses.dataclass(frozen=True)
class WorldModel:
    """Applies the TD-MPC2 networks for a resolved :class:`~tdmpc2core.model.config.TDMPC2Config`.

    ``obs_shape``: None for state observations (float32 [..., obs_dim]); (C, 64, 64) for rgb
    ones (``cfg.obs == "rgb"``): flat uint8 [..., obs_dim = C*64*64], the (C, H, W) frame
    stack flattened in C order (spec §2 "Pixels"; (9, 64, 64) for the official 3 frames).

    Raises:
      ValueError: (at construction) ``obs_shape`` and ``cfg.obs`` disagree (rgb needs a
        (C, 64, 64) shape with obs_dim = C*64*64; state needs None), or rgb with a task
        embedding (multi-task pixels: the official encoder concatenates the embedding to the
        observation, which an image cannot take; not supported).
    """

    cfg: object
    obs_dim: int
    action_dim: int
    task_dim: int = 0
    num_tasks: int = 0
    obs_shape: Optional[tuple] = None
    #: the kernels every network and the update compute with (:func:`tdmpc2core.model.kernels.of_config`
    #: of ``cfg``): chosen once, here
    kernels: K.Kernels = dataclasses.field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "kernels", K.of_config(self.cfg))
        obs = getattr(self.cfg, "obs", "state")
        if self.obs_shape is not None:
            object.__setattr__(self, "obs_shape", tuple(int(d) for d in self.obs_shape))
        if obs == "rgb":
            shp = self.obs_shape
            if shp is None or len(shp) != 3 or shp[1:] != (pixels.IMAGE_SIZE, pixels.IMAGE_SIZE):
                raise ValueError(f"obs_shape={shp!r}: cfg.obs='rgb' needs obs_shape (C, {pixels.IMAGE_SIZE}, "
                                 f"{pixels.IMAGE_SIZE}) (the official conv encoder assumes 64x64 images; "
                                 f"(9, 64, 64) for 3 stacked RGB frames)")
            if self.obs_dim != shp[0] * shp[1] * shp[2]:
                raise ValueError(f"obs_dim={self.obs_dim} is not the flat length {shp[0] * shp[1] * shp[2]} of "
                                 f"obs_shape={shp}")
            if self.task_dim:
                raise ValueError(f"task_dim={self.task_dim}: multi-task rgb observations are not supported (the "
                                 f"official encoder concatenates the task embedding to the observation, which an "
                                 f"image cannot take); use obs='state' for multi-task runs")
        elif self.obs_shape is not None:
            raise ValueError(f"obs_shape={self.obs_shape!r} is given but cfg.obs={obs!r}: state observations are flat "
                             f"[obs_dim] (obs_shape None); set obs='rgb' for images")

    @property
    def rgb(self) -> bool:
        """Whether observations are rgb images (``cfg.obs == "rgb"``)."""
        return getattr(self.cfg, "obs", "state") == "rgb"

    @property
    def modules(self):
        return build_modules(self.cfg, self.obs_dim, self.action_dim, self.task_dim, self.kernels)

    def init(self, key) -> dict:
        c = self.cfg
        return init_params(self.modules, key, self.obs_dim, self.action_dim, c.latent_dim, c.num_q, self.task_dim,
                           self.num_tasks, self.obs_shape)

    # ---- model calls -------------------------------------------------------------
    def encode(self, params, obs, e=None, key=None, shifts=None):
        """obs [..., obs_dim] -> z [..., latent] (spec §3.2).

        State: the MLP encoder on obs ⊕ e (LayerNorm then SimNorm); ``key`` and ``shifts``
        are ignored. Rgb (``obs_shape`` set): obs is uint8 (or real 0-255) [..., C*H*W]; every
        image is shifted by the official ShiftAug (:func:`tdmpc2core.model.pixels.shift_aug`;
        always on, training, targets and acting alike: spec §12 item 17), then the conv trunk
        and SimNorm (:class:`~tdmpc2core.model.networks.ConvEncoder`). One shift per image and
        axis, drawn from ``key`` (:func:`~tdmpc2core.model.pixels.draw_shifts`), or
        ``shifts`` int [..., 2] (x, y in [0, 6]) given instead (an injected draw, e.g. the
        official code's in the parity tests).

        Raises:
          ValueError: rgb without ``key`` or ``shifts``; rgb obs whose last axis is not
            obs_dim or ``shifts`` not [..., 2] over obs's leading axes.
        """
        if not self.rgb:
            return self.modules["encoder"].apply({"params": params["encoder"]}, _cat(obs, e))
        if obs.shape[-1] != self.obs_dim:
            raise ValueError(f"encode: rgb obs has last axis {obs.shape[-1]}, expected obs_dim={self.obs_dim} "
                             f"(the flat {self.obs_shape} image)")
        lead = obs.shape[:-1]
        if shifts is None:
            if key is None:
                raise ValueError("encode: rgb observations need `key` (the ShiftAug shifts are drawn from it) or "
                                 "`shifts` [..., 2]")
            shifts = pixels.draw_shifts(key, lead)
        shifts = jnp.asarray(shifts, jnp.int32)
        if shifts.shape != lead + (2,):
            raise ValueError(f"encode: shifts must be int [..., 2] = {lead + (2,)} (one x, y shift per image), "
                             f"got shape {shifts.shape}")
        imgs = obs.reshape((-1,) + self.obs_shape)
        x = pixels.shift_aug(imgs, shifts.reshape(-1, 2))
        z = self.modules["encoder"].apply({"params": params["encoder"]}, x)
        return z.reshape(lead + z.shape[-1:])

    def next(self, params, z, a, e=None):
        """Latent dynamics d(z, a) -> z' (spec §3.2)."""
        return self.modules["dynamics"].apply({"params": params["dynamics"]}, _cat(z, e, a))

    def reward(self, params, z, a, e=None):
        """Reward logits [..., num_bins] (decode with two_hot_inv)."""
        return self.modules["reward"].apply({"params": params["reward"]}, _cat(z, e, a))

    def termination_logit(self, params, z, e=None):
        """Termination logit [..., 1] (episodic mode only; spec §11.2)."""
        return self.modules["termination"].apply({"params": params["termination"]}, _cat(z, e))

    def pi(self, pi_params, z, key, e=None, mask=None, eps=None):
        """Policy prior (spec §4.5, 5f6fade).

        Returns (mean_action, sampled_action, log_pi, log_std) with actions
        [..., A] = tanh(mu) and tanh(mu + eps * sigma), log_pi [..., 1] the paper-era scaled
        log-probability (Gaussian part x number of active dims, squash correction unscaled).
        ``eps`` [..., A]: standard-normal noise to use instead of drawing it from ``key``
        (an injected draw, e.g. the official code's in the parity tests).
        """
        out = self.modules["pi"].apply({"params": pi_params}, _cat(z, e))
        mu, raw = jnp.split(out, 2, axis=-1)
        log_std = tm.squash_log_std(raw, self.cfg.log_std_min, self.cfg.log_std_max)
        if eps is None:
            eps = jax.random.normal(key, mu.shape, mu.dtype)
        else:
            eps = jnp.broadcast_to(jnp.asarray(eps, mu.dtype), mu.shape)
        size = None
        if mask is not None:
            mu, log_std, eps = mu * mask, log_std * mask, eps * mask
            size = jnp.sum(mask, axis=-1, keepdims=True)
        log_pi = tm.gaussian_logprob_5f6fade(eps, log_std, size)
        u = mu + eps * jnp.exp(log_std)
        mean, sample = jnp.tanh(mu), jnp.tanh(u)
        log_pi = log_pi - tm.squash_correction(sample)
        return mean, sample, log_pi, log_std

    def _q_members(self, qs_params, z, a, e=None, dropout_key=None, grad_action_only=False):
        """Logits [k, ..., num_bins] of the members stacked in qs_params (axis 0).

        ``grad_action_only``: z and e enter through ``stop_gradient`` and the first layer's
        backward pass computes the input gradient for the action columns only (its
        ``frozen_inputs``; a saving of (latent + task_dim) / (latent + task_dim + action_dim)
        of that matmul with the CPU kernels).
        """
        qmod = self.modules["q"]
        if grad_action_only:
            z = jax.lax.stop_gradient(z)
            e = None if e is None else jax.lax.stop_gradient(e)
            qmod = qmod.clone(frozen_inputs=z.shape[-1] + (0 if e is None else e.shape[-1]))
        k = jax.tree_util.tree_leaves(qs_params)[0].shape[0]
        # one copy of the shared input per member, so every layer is a plain batched matmul over
        # the members: with one shared input XLA contracts the first layer's gradient over
        # members x features and transposes the activations' gradient twice to do it
        x = _cat(z, e, a)
        xs = jnp.broadcast_to(x, (k,) + x.shape)
        if dropout_key is None:
            return jax.vmap(lambda p, x: qmod.apply({"params": p}, x, deterministic=True))(qs_params, xs)
        keys = jax.random.split(dropout_key, k)  # a different dropout mask per member (spec §3.3)
        return jax.vmap(lambda p, x, kk: qmod.apply({"params": p}, x, deterministic=False, rngs={"dropout": kk}))(
            qs_params, xs, keys)

    def q_all(self, qs_params, z, a, e=None, dropout_key=None):
        """Logits of all K members [K, ..., num_bins]; dropout on iff dropout_key is given."""
        return self._q_members(qs_params, z, a, e, dropout_key)

    def q_pair(self, qs_params, z, a, key, reduce: str, e=None, dropout_key=None, idx=None):
        """min or avg of two distinct random members, decoded to scalars [...] (spec §4.6).

        One pair is drawn per call and shared by the whole batch. Only the two chosen
        members are evaluated: without dropout, the same numbers as evaluating all K and
        selecting them; with ``dropout_key``, the pair's masks come from that key split in two
        (not K), so they are not the masks ``q_all`` would give those members.
        ``idx`` [2] int: the pair to use instead of drawing it from ``key`` (an injected draw).
        Raises ValueError for a ``reduce`` other than 'min' or 'avg'.
        """
        return self._q_pair(qs_params, z, a, key, reduce, e, dropout_key, idx, False)

    def policy_q(self, qs_params, z, a, key, e=None, dropout_key=None, idx=None):
        """The policy step's Q (spec §5.2.7): the avg of a random pair as :meth:`q_pair`
        (dropout on iff ``dropout_key``), [...], with the gradient flowing to ``a`` only: the Q
        parameters, z [..., latent] and e are detached, and the first layers' backward pass
        does not compute the cotangent of z and e (less backward work with the CPU kernels;
        the same values and action gradient as ``q_pair(..., 'avg')`` on detached inputs)."""
        return self._q_pair(jax.lax.stop_gradient(qs_params), z, a, key, "avg", e, dropout_key, idx, True)

    def _q_pair(self, qs_params, z, a, key, reduce, e, dropout_key, idx, grad_action_only):
        K = jax.tree_util.tree_leaves(qs_params)[0].shape[0]
        if idx is None:
            idx = jax.random.choice(key, K, (2,), replace=False)
        else:
            idx = jnp.asarray(idx, jnp.int32)
        pair = jax.tree_util.tree_map(lambda p: p[idx], qs_params)
        q = tm.two_hot_inv(self._q_members(pair, z, a, e, dropout_key, grad_action_only), self.cfg.vmin,
                           self.cfg.vmax)
        if reduce == "min":
            return jnp.minimum(q[0], q[1])
        if reduce == "avg":
            return 0.5 * (q[0] + q[1])
        raise ValueError(f"reduce must be 'min' or 'avg', got {reduce!r}")
