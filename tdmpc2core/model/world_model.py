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

from . import math as tm
from .networks import build_modules, init_params


def _cat(*xs):
    """Concatenate on the last axis, broadcasting the leading axes (e.g. a task embedding
    [B, D] beside latents [H, B, L]); single-task inputs have equal leading axes already."""
    xs = [x for x in xs if x is not None]
    lead = jnp.broadcast_shapes(*(x.shape[:-1] for x in xs))
    return jnp.concatenate([jnp.broadcast_to(x, lead + x.shape[-1:]) for x in xs], axis=-1)


@dataclasses.dataclass(frozen=True)
class WorldModel:
    """Applies the TD-MPC2 networks for a resolved :class:`~tdmpc2core.model.config.TDMPC2Config`."""

    cfg: object
    obs_dim: int
    action_dim: int
    task_dim: int = 0
    num_tasks: int = 0

    @property
    def modules(self):
        return build_modules(self.cfg, self.obs_dim, self.action_dim, self.task_dim)

    def init(self, key) -> dict:
        c = self.cfg
        return init_params(self.modules, key, self.obs_dim, self.action_dim, c.latent_dim, c.num_q, self.task_dim,
                           self.num_tasks)

    # ---- model calls -------------------------------------------------------------
    def encode(self, params, obs, e=None):
        """obs [..., obs_dim] -> z [..., latent] (LayerNorm then SimNorm; spec §3.2)."""
        return self.modules["encoder"].apply({"params": params["encoder"]}, _cat(obs, e))

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
