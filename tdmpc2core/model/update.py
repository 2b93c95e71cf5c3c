"""One TD-MPC2 update: a world-model step, a policy step and the target-Q update (spec §5).

:func:`update` is a pure function of the agent state and a batch; it is jitted as part of
the training program (never alone per step).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from . import math as tm
from . import pixels
from .world_model import WorldModel

WM_KEYS = ("encoder", "dynamics", "reward", "qs", "termination", "task_emb")


class AgentState(NamedTuple):
    """Learned state of one agent (one seed).

    params: {'encoder','dynamics','reward','qs','pi',['termination'],['task_emb']}
    (networks.init_params; ``task_emb`` [num_tasks, task_dim] in the multi-task agent);
    target_qs: the target Q ensemble (a copy of params['qs'], spec §3.4);
    wm_opt_state / pi_opt_state: Adam states of the two optimizers (spec §5.3);
    pi_scale: the running scale S (spec §4.7); pi_grad_sq: squared norm of the previous
    (clipped) policy gradient, kept for the 5f6fade clip quirk (spec §5.4);
    updates: gradient updates done (int32).
    """

    params: dict
    target_qs: dict
    wm_opt_state: object
    pi_opt_state: object
    pi_scale: jnp.ndarray
    pi_grad_sq: jnp.ndarray
    updates: jnp.ndarray


class Batch(NamedTuple):
    """Sub-trajectories of H+1 rows, time-major (spec §5.1).

    obs [H+1, B, obs_dim]; action [H, B, A]; reward [H, B]; terminated [H, B] (0/1 float);
    task [B] int32 (multi-task) or None.
    """

    obs: jnp.ndarray
    action: jnp.ndarray
    reward: jnp.ndarray
    terminated: jnp.ndarray
    task: Optional[jnp.ndarray] = None


class UpdateDraws(NamedTuple):
    """The random draws of one update, injected instead of drawn from the key (used to
    compare with the official code, whose draws come from torch and NumPy; spec §5).

    td_eps [H, B, A]: the policy noise of the TD targets' next actions; td_pair [2]: the
    target-Q members whose minimum they take; pi_eps [H+1, B, A]: the policy noise of the
    policy step; pi_pair [2]: the online-Q members it averages. Dropout masks still come
    from the key (configure ``dropout=0`` to compare).

    Rgb observations only (None: drawn from the key): next_shifts int [H, B, 2], the
    ShiftAug shifts (x, y) of the TD targets' encoding of obs[1:]; shifts int [B, 2], those
    of the latent rollout's encoding of obs[0] (spec §5.2; 5f6fade draws them in this order).
    """

    td_eps: jnp.ndarray
    td_pair: jnp.ndarray
    pi_eps: jnp.ndarray
    pi_pair: jnp.ndarray
    next_shifts: Optional[jnp.ndarray] = None
    shifts: Optional[jnp.ndarray] = None


def renorm_rows(table, idx, max_norm: float = 1.0):
    """PyTorch's ``Embedding(max_norm=...)`` look-up renorm, written back (spec §3.2, §12.15).

    Every row of ``table`` [num_tasks, D] whose index occurs in ``idx`` (any shape) and whose
    L2 norm exceeds ``max_norm`` is scaled by ``max_norm / (norm + 1e-7)``, as
    ``torch.embedding_renorm_`` does in place before a look-up; other rows are returned
    unchanged (bitwise). The scale carries no gradient (this is applied to the parameter
    before the loss, so the loss sees the renormalised row as a plain look-up, as in torch).
    """
    used = jnp.zeros((table.shape[0],), bool).at[jnp.reshape(idx, (-1,))].set(True)
    norm = jnp.sqrt(jnp.sum(jnp.square(table), axis=-1))
    scale = jnp.where(used & (norm > max_norm), max_norm / (norm + 1e-7), 1.0)
    return table * jax.lax.stop_gradient(scale)[:, None]


def embed(table, idx, max_norm: float = 1.0):
    """The look-up ``table[idx]`` of rows renormalised as :func:`renorm_rows` would (without
    writing them back): what acting and evaluation use (deviation M2)."""
    rows = table[idx]
    norm = jnp.sqrt(jnp.sum(jnp.square(rows), axis=-1, keepdims=True))
    return rows * jnp.where(norm > max_norm, max_norm / (norm + 1e-7), 1.0)


def task_inputs(params: dict, task, gammas, masks=None):
    """Multi-task conditioning of a batch (spec §10): (params with the looked-up embedding rows
    renormalised, e [B, D] the slices' embeddings, gamma [B] each slice's task discount,
    mask [B, A] each slice's action mask or None)."""
    params = dict(params, task_emb=renorm_rows(params["task_emb"], task))
    e = params["task_emb"][task]
    gamma = jnp.asarray(gammas, jnp.float32)[task]
    mask = None if masks is None else jnp.asarray(masks, jnp.float32)[task]
    return params, e, gamma, mask


def wm_subtrees(params: dict) -> dict:
    return {k: v for k, v in params.items() if k in WM_KEYS}


def scaled_learning_rate(lr, scale: float):
    """``lr * scale`` for a float, else the schedule ``count -> lr(count) * scale`` (the encoder's
    learning rate, spec §5.3: ``enc_lr_scale`` times the world model's, whatever the update)."""
    if callable(lr):
        return lambda count: lr(count) * scale
    return lr * scale


def _adam(lr, eps: float, weight_decay: float):
    """Adam (b1 0.9, b2 0.999) at ``lr`` (a float or a schedule of the update count); with
    ``weight_decay`` > 0 optax's adamw: the decoupled decay ``lr * weight_decay * param`` added
    to every parameter's step (no mask), as PyTorch's AdamW does."""
    if weight_decay:
        return optax.adamw(lr, b1=0.9, b2=0.999, eps=eps, weight_decay=weight_decay)
    return optax.adam(lr, b1=0.9, b2=0.999, eps=eps)


def make_optimizers(cfg, kernels=None):
    """(world-model Adam with the encoder at lr * enc_lr_scale, policy Adam with eps 1e-5)
    (spec §5.3).

    ``kernels`` (a :class:`~tdmpc2core.model.kernels.Kernels`; None: those of ``cfg``) sets the
    state's layout: one flat vector per parameter group when ``kernels.flat_optimizer`` (the CPU
    kernels: ``optax.flatten``, faster on XLA:CPU), else one array per parameter (the reference
    kernels: no concatenation, faster on a TPU). The arithmetic is the same elementwise.

    Gradient clipping is applied before these (:func:`clip_coef` scales the gradients in
    :func:`update`), exactly as PyTorch's clip_grad_norm_ (spec §5.3).

    ``cfg.learning_rate``: a float (the reference), or a schedule of the update count (a
    callable or a named :class:`~tdmpc2core.model.config.LRSchedule`), evaluated by optax at
    the count of updates each optimizer has made (its state's count: 0 at the first update,
    saved in checkpoints, so a resumed run continues its schedule); the encoder's group runs
    at the schedule's value times ``enc_lr_scale``, every other world-model parameter (the
    multi-task task embedding included) and the policy at its value.

    ``cfg.weight_decay`` > 0: decoupled weight decay (optax.adamw, PyTorch's AdamW) in both
    optimizers, on every parameter, biases and LayerNorm scales included (optax's default, no
    mask), at the learning rate of the parameter's group (so the encoder's decays at
    ``enc_lr_scale`` times the rate). 0 (default): plain Adam, the reference's program.
    """
    def label(tree):
        return {k: jax.tree_util.tree_map(lambda _: "encoder" if k == "encoder" else "rest", v)
                for k, v in tree.items()}

    from .kernels import of_config

    lr, wd = cfg.learning_rate, float(cfg.weight_decay)
    # optax.flatten runs Adam on one concatenated vector per group: elementwise the same
    # arithmetic as per-leaf Adam, with a handful of ops instead of several per leaf.
    flat = (kernels if kernels is not None else of_config(cfg)).flat_optimizer
    layout = optax.flatten if flat else (lambda tx: tx)
    wm = optax.multi_transform(
        {"encoder": layout(_adam(scaled_learning_rate(lr, cfg.enc_lr_scale), 1e-8, wd)),
         "rest": layout(_adam(lr, 1e-8, wd))},
        label)
    pi = layout(_adam(lr, cfg.pi_eps, wd))
    return wm, pi


def clip_coef(sq_norm, max_norm: float):
    """PyTorch clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied only if < 1."""
    return jnp.minimum(max_norm / (jnp.sqrt(sq_norm) + 1e-6), 1.0)


def init_agent_state(wm: WorldModel, key) -> AgentState:
    params = wm.init(key)
    wm_tx, pi_tx = make_optimizers(wm.cfg, wm.kernels)
    return AgentState(
        params=params,
        target_qs=jax.tree_util.tree_map(jnp.copy, params["qs"]),
        wm_opt_state=wm_tx.init(wm_subtrees(params)),
        pi_opt_state=pi_tx.init(params["pi"]),
        pi_scale=jnp.ones((), jnp.float32),
        pi_grad_sq=jnp.zeros((), jnp.float32),
        updates=jnp.zeros((), jnp.int32),
    )


def td_targets(wm: WorldModel, params, target_qs, batch: Batch, gamma, key, e_next=None, mask=None,
               eps=None, pair=None, aug_key=None, shifts=None):
    """td_t = r_t + gamma (1 - d_t) min(Q'_i, Q'_j)(enc(o_{t+1}), pi(enc(o_{t+1}))) (spec §5.2.1).

    Online encoder, a sampled (not mean) policy action, the target ensemble without dropout.
    gamma is a scalar or [B] (multi-task: each slice's task's discount, spec §10). Multi-task:
    ``e_next`` the slices' task embeddings [B, D], ``mask`` their action masks [B, A].
    ``eps`` [H, B, A] and ``pair`` [2]: injected draws (:class:`UpdateDraws`), or None.
    Rgb: ``aug_key`` draws the ShiftAug shifts of obs[1:], or ``shifts`` [H, B, 2] are given
    (ignored for state observations).
    Returns (td [H, B], next_z [H, B, L]), both without gradient.
    """
    k_pi, k_pair = jax.random.split(key)
    next_z = wm.encode(params, batch.obs[1:], e_next, key=aug_key, shifts=shifts)
    _, a_next, _, _ = wm.pi(params["pi"], next_z, k_pi, e_next, mask, eps=eps)
    q = wm.q_pair(target_qs, next_z, a_next, k_pair, "min", e_next, idx=pair)
    # paper-era agent: no termination in the target (spec §5.2); episodic mode: 1 - d_t (§11.4)
    not_done = (1.0 - batch.terminated) if wm.cfg.episodic else 1.0
    td = batch.reward + gamma * not_done * q
    return jax.lax.stop_gradient(td), jax.lax.stop_gradient(next_z)


def world_model_loss(wm: WorldModel, wm_params, pi_params, batch: Batch, td, next_z, dropout_key, aug_key=None,
                     shifts=None):
    """20 L_cons + 0.1 L_rew + 0.1 L_val (+ coef L_term when episodic) (spec §5.2.3-5).

    Rgb: ``aug_key`` draws the ShiftAug shifts of obs[0], or ``shifts`` [B, 2] are given
    (ignored for state observations).

    Consistency /H, reward /H, value /(H K), rho^t inside, not normalised by sum rho^t.
    Returns (loss, (zs [H+1, B, L], metrics)).
    """
    cfg = wm.cfg
    params = dict(wm_params, pi=pi_params)
    H = batch.action.shape[0]
    rho = cfg.rho ** jnp.arange(H, dtype=jnp.float32)
    # multi-task: the (already renormalised) rows of the slices' tasks, with gradient into
    # the embedding table (it is trained by this optimizer, spec §5.3)
    e = None if batch.task is None else params["task_emb"][batch.task]
    z = wm.encode(params, batch.obs[0], e, key=aug_key, shifts=shifts)
    zs = [z]
    cons = 0.0
    for t in range(H):
        z = wm.next(params, z, batch.action[t], e)
        cons = cons + rho[t] * jnp.mean(jnp.square(z - next_z[t]))
        zs.append(z)
    zs = jnp.stack(zs)
    _zs = zs[:-1]
    q_logits = wm.q_all(params["qs"], _zs, batch.action, e, dropout_key=dropout_key)  # [K, H, B, N]
    r_logits = wm.reward(params, _zs, batch.action, e)  # [H, B, N]
    rew_ce = tm.soft_ce(r_logits, batch.reward, cfg.vmin, cfg.vmax).mean(axis=-1)  # [H]
    val_ce = tm.soft_ce(q_logits, td[None], cfg.vmin, cfg.vmax).mean(axis=-1)  # [K, H]
    K = q_logits.shape[0]
    cons_loss = cons / H
    rew_loss = jnp.sum(rho * rew_ce) / H
    val_loss = jnp.sum(rho[None] * val_ce) / (H * K)
    total = cfg.consistency_coef * cons_loss + cfg.reward_coef * rew_loss + cfg.value_coef * val_loss
    metrics = {"consistency_loss": cons_loss, "reward_loss": rew_loss, "value_loss": val_loss}
    if cfg.episodic:
        logits = wm.termination_logit(params, zs[1:], e)[..., 0]  # [H, B]
        term = optax.sigmoid_binary_cross_entropy(logits, batch.terminated).mean()
        total = total + cfg.termination_coef * term
        metrics["termination_loss"] = term
    metrics["total_loss"] = total
    return total, (zs, metrics)


def policy_loss(wm: WorldModel, pi_params, qs_params, zs, pi_scale, key, e=None, mask=None, eps=None, pair=None):
    """L_pi = mean_t rho^t mean_B[alpha log pi - Q_avg / S] on detached latents (spec §5.2.7).

    Q: average of a random online pair with dropout, Q params frozen; S updated from the
    t = 0 values first. Multi-task: ``e`` [B, D] the slices' task embeddings (no gradient:
    frozen in this step, spec §3.5), ``mask`` [B, A] their action masks. ``eps`` [H+1, B, A]
    and ``pair`` [2]: injected draws (:class:`UpdateDraws`), or None.
    Returns (loss, (new_scale, metrics)).
    """
    cfg = wm.cfg
    k_pi, k_pair, k_drop = jax.random.split(key, 3)
    if e is not None:
        e = jax.lax.stop_gradient(e)
    _, a, log_pi, _ = wm.pi(pi_params, zs, k_pi, e, mask, eps=eps)
    q = wm.policy_q(qs_params, zs, a, k_pair, e, dropout_key=k_drop, idx=pair)  # [H+1, B]
    new_scale = tm.running_scale_update(pi_scale, q[0][:, None], cfg.tau)
    q = q / jax.lax.stop_gradient(new_scale)
    rho = cfg.rho ** jnp.arange(zs.shape[0], dtype=jnp.float32)
    per_t = jnp.mean(cfg.entropy_coef * log_pi[..., 0] - q, axis=-1)  # [H+1]
    loss = jnp.mean(per_t * rho)
    return loss, (new_scale, {"pi_loss": loss, "pi_entropy_term": jnp.mean(log_pi)})


def update(wm: WorldModel, state: AgentState, batch: Batch, gamma, key, masks=None,
           draws: Optional[UpdateDraws] = None):
    """One update: targets, world-model step, policy step, target Qs (spec §5.2 order).

    Single-task: ``batch.task`` is None and ``gamma`` a scalar. Multi-task (spec §10):
    ``batch.task`` [B] the slices' task ids, ``gamma`` [num_tasks] the per-task discounts and
    ``masks`` [num_tasks, A] the per-task action masks; the task-embedding rows of the batch's
    tasks are renormalised to norm <= 1 before the targets and again after the world-model
    step, before the policy step (where 5f6fade's look-ups renorm them in place), and written
    back into the parameters.

    ``draws``: the update's policy noise and Q pairs (and rgb: ShiftAug shifts), injected
    instead of drawn from ``key`` (:class:`UpdateDraws`; None in training).

    Rgb observations (``wm.rgb``): the ShiftAug shifts of obs[1:] (targets) and obs[0]
    (rollout) come from ``pixels.aug_key(key)`` split in two; ``key``'s other splits are those
    of a state run.

    Returns (new_state, metrics) with scalar metrics: the losses; ``grad_norm``, the norm the
    world-model clip saw (its gradient's, plus the previous policy step's clipped gradient
    when ``stale_pi_grad_in_clip``: what 5f6fade logs, spec §5.4); ``wm_grad_norm``, the
    world-model gradient's alone; ``pi_grad_norm``, the policy gradient's before its clip;
    ``pi_scale``, the running scale S after this update.
    """
    cfg = wm.cfg
    wm_tx, pi_tx = make_optimizers(cfg, wm.kernels)
    k_td, k_drop, k_pi = jax.random.split(key, 3)
    params = state.params
    multitask = batch.task is not None
    e, mask = None, None
    if multitask:
        params, e, gamma, mask = task_inputs(params, batch.task, gamma, masks)
    d = draws if draws is not None else UpdateDraws(None, None, None, None)
    k_aug_next, k_aug0 = jax.random.split(pixels.aug_key(key)) if wm.rgb else (None, None)
    td, next_z = td_targets(wm, params, state.target_qs, batch, gamma, k_td, e, mask, eps=d.td_eps, pair=d.td_pair,
                            aug_key=k_aug_next, shifts=d.next_shifts)

    wm_params = wm_subtrees(params)
    (_, (zs, metrics)), g = jax.value_and_grad(world_model_loss, argnums=1, has_aux=True)(
        wm, wm_params, params["pi"], batch, td, next_z, k_drop, k_aug0, d.shifts)
    g_sq = wm.kernels.global_sq_norm(g)
    clip_sq = g_sq + (state.pi_grad_sq if cfg.stale_pi_grad_in_clip else 0.0)
    coef = clip_coef(clip_sq, cfg.grad_clip_norm)
    g = jax.tree_util.tree_map(lambda x: x * coef, g)
    upd, wm_opt_state = wm_tx.update(g, state.wm_opt_state, wm_params)
    wm_params = optax.apply_updates(wm_params, upd)
    if multitask:  # the policy step's look-up renorms the rows again (after the Adam step)
        wm_params = dict(wm_params, task_emb=renorm_rows(wm_params["task_emb"], batch.task))
        e = wm_params["task_emb"][batch.task]

    (_, (new_scale, pmetrics)), gp = jax.value_and_grad(policy_loss, argnums=1, has_aux=True)(
        wm, params["pi"], wm_params["qs"], jax.lax.stop_gradient(zs), state.pi_scale, k_pi, e, mask, d.pi_eps,
        d.pi_pair)
    gp_sq = wm.kernels.global_sq_norm(gp)
    pcoef = clip_coef(gp_sq, cfg.grad_clip_norm)
    gp = jax.tree_util.tree_map(lambda x: x * pcoef, gp)
    upd, pi_opt_state = pi_tx.update(gp, state.pi_opt_state, params["pi"])
    pi_params = optax.apply_updates(params["pi"], upd)

    target_qs = jax.tree_util.tree_map(lambda t, o: t + cfg.tau * (o - t), state.target_qs, wm_params["qs"])
    new_params = dict(wm_params, pi=pi_params)
    # grad_norm: the norm the world-model clip saw, as 5f6fade logs it (with the stale policy
    # gradient when stale_pi_grad_in_clip); wm_grad_norm: the world-model gradient's alone
    metrics = dict(metrics, **pmetrics, grad_norm=jnp.sqrt(clip_sq), wm_grad_norm=jnp.sqrt(g_sq),
                   pi_grad_norm=jnp.sqrt(gp_sq), pi_scale=new_scale)
    new_state = AgentState(new_params, target_qs, wm_opt_state, pi_opt_state, new_scale,
                           gp_sq * jnp.square(pcoef), state.updates + 1)
    return new_state, metrics
