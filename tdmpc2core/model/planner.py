"""MPPI planning in latent space (spec §6), for one observation.

:func:`plan` is pure and jittable; vmap it over environments and seeds. The warm start
(``prev_mean``) is carried by the caller between environment steps.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from . import math as tm
from . import pixels
from .world_model import WorldModel


def estimate_value(wm: WorldModel, params, z, actions, gamma, key, e=None, mask=None, eps=None, pair=None):
    """G = sum_t gamma^t r_t + gamma^H Q_avg(z_H, pi(z_H)) for each sequence (spec §6.4b).

    z [N, L]; actions [H, N, A]. One random Q pair per call; no dropout. Returns [N].
    Multi-task: ``e`` the task embedding, ``mask`` its action mask (the policy action at z_H
    is masked, spec §4.5).
    With cfg.episodic, reward and value stop after a predicted termination (spec §11.4).
    ``eps`` [N, A] (the policy noise at z_H) and ``pair`` [2] (the Q members): injected
    draws instead of drawing them from ``key``.
    """
    cfg = wm.cfg
    H = actions.shape[0]
    k_pi, k_pair = jax.random.split(key) if key is not None else (None, None)
    G = jnp.zeros(z.shape[0], jnp.float32)
    discount = 1.0
    alive = jnp.ones(z.shape[0], jnp.float32)
    for t in range(H):
        r = tm.two_hot_inv(wm.reward(params, z, actions[t], e), cfg.vmin, cfg.vmax)
        z = wm.next(params, z, actions[t], e)
        G = G + discount * alive * r
        discount = discount * gamma
        if cfg.episodic:
            term = (jax.nn.sigmoid(wm.termination_logit(params, z, e)[..., 0]) > 0.5).astype(jnp.float32)
            alive = alive * (1.0 - term)
    _, a_pi, _, _ = wm.pi(params["pi"], z, k_pi, e, mask, eps=eps)
    q = wm.q_pair(params["qs"], z, a_pi, k_pair, "avg", e, idx=pair)
    return G + discount * alive * q


def policy_trajectories(wm: WorldModel, params, z, key, e=None, mask=None, eps=None):
    """num_pi_trajs action sequences [H, P, A] sampled from the policy prior (spec §6.2)
    (multi-task: with the task's embedding ``e`` and action ``mask``). ``eps`` [H, P, A]:
    injected policy noise instead of drawing it from ``key``."""
    cfg = wm.cfg
    P, H = cfg.num_pi_trajs, cfg.horizon
    _z = jnp.broadcast_to(z, (P, z.shape[-1]))
    keys = jax.random.split(key, H) if eps is None else [None] * H
    acts = []
    for t in range(H - 1):
        _, a, _, _ = wm.pi(params["pi"], _z, keys[t], e, mask, eps=None if eps is None else eps[t])
        acts.append(a)
        _z = wm.next(params, _z, a, e)
    _, a, _, _ = wm.pi(params["pi"], _z, keys[H - 1], e, mask, eps=None if eps is None else eps[H - 1])
    acts.append(a)
    return jnp.stack(acts)


def warm_start(prev_mean, t0):
    """The initial MPPI mean [H, A] (spec §6.3): zeros at an episode's first step (``t0``),
    else the previous plan's final mean shifted one step earlier with a zero last step."""
    H, A = prev_mean.shape
    shifted = jnp.concatenate([prev_mean[1:], jnp.zeros((1, A), prev_mean.dtype)], axis=0)
    return jnp.where(t0, jnp.zeros((H, A), jnp.float32), shifted)


def mppi_update(cfg, actions, value, mask=None):
    """One MPPI refit (spec §6.4c-d): the top ``num_elites`` of ``value`` [N] and their
    ``actions`` [H, N, A]; weights ``exp(temperature (v - max v))`` normalised; the weighted
    mean and std of the elites (std clipped to [min_std, max_std]); both multiplied by the
    action ``mask`` [A] if given. Returns (mean [H, A], std [H, A], score [E], elite_actions
    [H, E, A]), the elites in decreasing value."""
    elite_value, elite_idx = jax.lax.top_k(value, cfg.num_elites)
    elite_actions = actions[:, elite_idx]  # [H, E, A]
    score = jnp.exp(cfg.temperature * (elite_value - jnp.max(elite_value)))
    score = score / jnp.sum(score)
    denom = jnp.sum(score) + 1e-9
    mean = jnp.sum(score[None, :, None] * elite_actions, axis=1) / denom
    std = jnp.sqrt(jnp.sum(score[None, :, None] * jnp.square(elite_actions - mean[:, None]), axis=1) / denom)
    std = jnp.clip(std, cfg.min_std, cfg.max_std)
    if mask is not None:
        mean, std = mean * mask, std * mask
    return mean, std, score, elite_actions


class PlanDraws(NamedTuple):
    """Every random draw of one :func:`plan` call, given instead of drawn from its key (the
    official code's draws, injected by the parity tests; spec §6).

    pi_eps [H, P, A]: the policy noise of the policy trajectories, one draw per horizon step;
    noise [I, H, N - P, A]: each iteration's standard-normal sample noise; value_eps [I, N, A]:
    each iteration's policy noise at z_H in the value estimate; pairs [I, 2]: each
    iteration's Q pair; elite: the index of the chosen elite (int); explore [A]: the
    exploration noise (training mode only; ignored in eval mode); shifts int [2] (rgb only):
    the ShiftAug shift (x, y) of the observation (None: drawn from the key).
    """

    pi_eps: jnp.ndarray
    noise: jnp.ndarray
    value_eps: jnp.ndarray
    pairs: jnp.ndarray
    elite: jnp.ndarray
    explore: Optional[jnp.ndarray] = None
    shifts: Optional[jnp.ndarray] = None


def plan(wm: WorldModel, params, obs, prev_mean, t0, eval_mode: bool, gamma, key, e=None, mask=None,
         draws: Optional[PlanDraws] = None):
    """One MPPI plan from one observation (spec §6, 5f6fade).

    Args:
      obs: [obs_dim] (rgb: the flat uint8 image, shifted by ShiftAug with a shift drawn from
        ``pixels.aug_key(key)``, which leaves ``key``'s other splits as a state run's, or
        ``draws.shifts``); prev_mean: [H, A], the previous call's final mean (warm start);
      t0: bool scalar, first step of an episode (no warm start); eval_mode: static bool,
      no exploration noise when True (the elite is still drawn at random, spec §12.10).
      e: the task embedding [task_dim] (multi-task; None for single-task).
      mask: the task's action mask [A] (multi-task): policy actions, samples, mean and std
        are multiplied by it, so the padded action dims of every output are exactly 0.
      draws: :class:`PlanDraws` to use instead of drawing from ``key`` (``key`` may then be
        None); None (default): every draw from ``key``.
    Returns:
      (action [A] in [-1, 1], mean [H, A] to pass as the next prev_mean).
    """
    cfg = wm.cfg
    H, A = cfg.horizon, wm.action_dim
    N, P, E = cfg.num_samples, cfg.num_pi_trajs, cfg.num_elites
    if draws is None:
        k_pi, k_loop, k_elite, k_noise = jax.random.split(key, 4)
        if eval_mode:
            # the policy trajectories' and the elite's draws: the same bits from a generator
            # XLA:CPU compiles faster (kernels.draw_key; measured on the evaluation program, where
            # it shortens the compile; the iterations' draws stay JAX's, which ran faster there)
            k_pi, k_elite = wm.kernels.draw_key(k_pi), wm.kernels.draw_key(k_elite)
    shifts = None if draws is None or draws.shifts is None else jnp.reshape(jnp.asarray(draws.shifts), (1, 2))
    k_aug = pixels.aug_key(key) if wm.rgb and shifts is None else None
    z = wm.encode(params, obs[None], e, key=k_aug, shifts=shifts)  # [1, L]
    zN = jnp.broadcast_to(z, (N, z.shape[-1]))
    eN = None if e is None else jnp.broadcast_to(e, (N, e.shape[-1]))

    mean = warm_start(prev_mean, t0)
    std = jnp.full((H, A), cfg.max_std, jnp.float32)
    e1 = None if e is None else e[None]
    if P == 0:
        pi_actions = None
    elif draws is None:
        pi_actions = policy_trajectories(wm, params, z, k_pi, e1, mask)
    else:
        pi_actions = policy_trajectories(wm, params, z, None, e1, mask, eps=draws.pi_eps)

    def iteration(carry, x):
        mean, std, _, _ = carry
        if draws is None:
            k_samp, k_val = jax.random.split(x)
            noise = jax.random.normal(k_samp, (H, N - P, A), jnp.float32)
            v_eps, pair = None, None
        else:
            noise, v_eps, pair = x
            k_val = None
        sampled = jnp.clip(mean[:, None] + std[:, None] * noise, -1.0, 1.0)
        actions = sampled if P == 0 else jnp.concatenate([pi_actions, sampled], axis=1)
        if mask is not None:
            actions = actions * mask
        value = jnp.nan_to_num(estimate_value(wm, params, zN, actions, gamma, k_val, eN, mask, eps=v_eps, pair=pair),
                               nan=0.0)
        return mppi_update(cfg, actions, value, mask), None

    init = (mean, std, jnp.zeros((E,), jnp.float32), jnp.zeros((H, E, A), jnp.float32))
    xs = jax.random.split(k_loop, cfg.iterations) if draws is None else (
        jnp.asarray(draws.noise, jnp.float32), jnp.asarray(draws.value_eps, jnp.float32),
        jnp.asarray(draws.pairs, jnp.int32))
    (mean, std, score, elite_actions), _ = jax.lax.scan(iteration, init, xs)
    choice = jax.random.categorical(k_elite, jnp.log(score)) if draws is None else jnp.asarray(draws.elite, jnp.int32)
    a = elite_actions[0, choice]
    if not eval_mode:
        a = a + std[0] * (jax.random.normal(k_noise, (A,), jnp.float32) if draws is None else draws.explore)
    return jnp.clip(a, -1.0, 1.0), mean


def act_with_policy(wm: WorldModel, params, obs, eval_mode: bool, key, e=None, mask=None):
    """``mpc=False``: the policy prior's mean action in eval mode, a sample otherwise (spec §6.6).
    Rgb: the ShiftAug shift of ``obs`` drawn from ``pixels.aug_key(key)``."""
    z = wm.encode(params, obs[None], e, key=pixels.aug_key(key) if wm.rgb else None)
    mean, sample, _, _ = wm.pi(params["pi"], z, key, e, mask)
    return (mean if eval_mode else sample)[0]
