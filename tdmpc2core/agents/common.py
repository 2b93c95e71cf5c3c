"""What the single-task and multi-task agents share.

* the evaluation keys (:data:`EVAL_KEY_OFFSET`, :func:`eval_key`): an evaluation's initial
  states come from the seed and the evaluation's position, never from the training stream,
  so a rerun or a resumed run evaluates on the same states (the official checkpoints'
  evaluation, :mod:`.official_eval`, uses the same keys);
* the update metrics (:data:`METRIC_KEYS`) and the hyperparameter check of the constructors;
* one seed's initial agent state (:func:`init_one`);
* the evaluation episode (:func:`eval_episode`) and its per-seed batch (:func:`episodes_of_seed`);
* the per-update loop (:func:`update_loop`) with its hook point: an optional
  :class:`UpdateHook` folded after every update inside the compiled program, its value
  carried in the run state (``ext``): how the extensions' post_update phases run
  (:mod:`tdmpc2core.extensions`);
* the recorded evaluation episodes the extensions' eval_metrics read
  (:func:`eval_episode` with ``record``, :func:`episodes_with_metrics`).
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from ..model.update import AgentState, init_agent_state

#: evaluation keys are ``PRNGKey(seed + EVAL_KEY_OFFSET)`` folded with the evaluation's indices
EVAL_KEY_OFFSET = 10_000_019
#: the scalar metrics of one update (spec §5), as both agents log them
METRIC_KEYS = ("consistency_loss", "reward_loss", "value_loss", "pi_loss", "total_loss",
               "grad_norm", "pi_grad_norm", "pi_scale")


def eval_key(seed: int, *indices: int):
    """The evaluation key [2] of ``seed`` at ``indices`` (e.g. the evaluation index; or the
    updates done and the task): ``PRNGKey(seed + EVAL_KEY_OFFSET)`` folded with each index in
    turn."""
    key = jax.random.PRNGKey(int(seed) + EVAL_KEY_OFFSET)
    for i in indices:
        key = jax.random.fold_in(key, int(i))
    return key


class UnknownHyperparameterError(TypeError, ValueError):
    """An unknown hyperparameter name: a TypeError, as an unknown keyword argument is, and a
    ValueError, so the CLI stages report it in one line like their other bad inputs."""


def check_hyperparameters(owner: str, hyperparameters: dict, config_cls) -> None:
    """Raise :class:`UnknownHyperparameterError` (a TypeError) naming the keys of
    ``hyperparameters`` that are not fields of ``config_cls``, the closest field to the first
    and the accepted ones; ``owner`` is the class named in the message."""
    fields = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(hyperparameters) - fields)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(fields), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownHyperparameterError(f"{owner}: unknown hyperparameter(s) {unknown}{hint}; "
                                         f"accepted: {sorted(fields)}")


def init_one(wm, key):
    """(AgentState, run key) of one seed from its PRNGKey: the parameters from the first half
    of ``split(key)``, the run's stream from the second."""
    k_params, k_run = jax.random.split(key)
    return init_agent_state(wm, k_params), k_run


def eval_episode(env, act, T: int, H: int, A: int, key, record: bool = False):
    """One evaluation episode: a fresh initial state from ``key``, then T agent steps of
    ``act(obs, mean, t0, key) -> (env_action, mean)`` (``mean`` [H, A], the planner's warm
    start, zeros at the start). An episode that terminates stops accumulating reward: its
    return sums the rewards up to and including the terminal step, and its length counts the
    agent steps up to and including it (T when it never terminates).
    Returns (return, length, success): return f32[], length i32[], and ``success`` None for a
    suite without a success flag (``env.spec.has_success`` False: the compiled program is then
    the one without success), else a pair of bool[] (success at the last step taken, success at
    any step taken): the official rule scores an episode by ``info['success']`` at its last
    step (the step that ended it: the time limit, or a termination); Meta-World's maintainers
    count it solved when any step succeeded. Steps after a termination count for neither.
    With ``record``, a fourth item, the episode itself for the extensions' eval_metrics: (obs
    [T+1, o], action [T, a] (the env actions ``act`` gave), reward [T], valid [T] bool: the
    step was taken before a termination). Shared by the single- and multi-task agents."""
    k_reset, k_loop = jax.random.split(key)
    state, obs = env.reset(k_reset)
    with_success = bool(getattr(env.spec, "has_success", False))

    def body(carry, inp):
        state, obs, mean, ret, length, alive, succ = carry
        t, k = inp
        k_act, k_step = jax.random.split(k)
        a, mean = act(obs, mean, t == 0, k_act)
        state, out = env.step(state, a, k_step)
        # where, not alive * reward: an env stepped past its terminal state may return NaN
        ret = ret + jnp.where(alive > 0, out.reward, 0.0)
        length = length + alive.astype(jnp.int32)
        if with_success:  # (last, any): frozen once the episode has ended
            last, anyv = succ
            taken = alive > 0
            succ = (jnp.where(taken, out.success, last), anyv | (taken & out.success))
        seen = (obs, a, out.reward, alive > 0) if record else None
        alive = alive * (1.0 - out.terminated.astype(jnp.float32))
        return (state, out.obs, mean, ret, length, alive, succ), seen

    succ0 = (jnp.zeros((), bool), jnp.zeros((), bool)) if with_success else None
    init = (state, obs, jnp.zeros((H, A), jnp.float32), jnp.zeros((), jnp.float32),
            jnp.zeros((), jnp.int32), jnp.ones((), jnp.float32), succ0)
    (_, last_obs, _, ret, length, _, succ), seen = jax.lax.scan(
        body, init, (jnp.arange(T), jax.random.split(k_loop, T)))
    if not record:
        return ret, length, succ
    obs_seq, actions, rewards, valid = seen
    return ret, length, succ, (jnp.concatenate([obs_seq, last_obs[None]]), actions, rewards, valid)


def episodes_of_seed(one_episode: Callable, num_episodes: int) -> Callable:
    """``(params, key) -> (returns [E], lengths [E], success)``: ``one_episode(params, k)``
    (:func:`eval_episode`) for each of the ``num_episodes`` keys ``split(key, E)`` (one seed's
    evaluation; vmapped over seeds by :func:`tdmpc2core.run.compiled.per_seed`); ``success``
    None, or (last, any) bool [E] for a suite with a success flag."""
    def per_seed(params, key):
        return jax.vmap(lambda k: one_episode(params, k))(jax.random.split(key, num_episodes))

    return per_seed


def episodes_with_metrics(one_episode: Callable, num_episodes: int, metrics: Callable) -> Callable:
    """``(params, key, ext) -> (returns [E], lengths [E], success, {name: scalar})``: the
    episodes of :func:`episodes_of_seed`, ``one_episode(params, k)`` returning (return, length,
    success, episode) (:func:`eval_episode` with ``record``), then ``metrics(ext, params,
    episodes)`` of the episodes stacked [E, ...] (the extensions' eval_metrics, one seed)."""
    def per_seed(params, key, ext):
        ret, length, succ, episodes = jax.vmap(lambda k: one_episode(params, k))(jax.random.split(key, num_episodes))
        return ret, length, succ, metrics(ext, params, episodes)

    return per_seed


class UpdateHook(NamedTuple):
    """A per-update hook, folded after every gradient update inside the compiled program.

    ``init() -> value``: the carried value of one seed at the start of a run (a pytree of
    arrays; the agents keep it in their run state as ``ext``, stacked over seeds, and in
    checkpoints). ``fold(value, agent_state, metrics) -> value``: called after each update
    with the agent state and the update's metrics (:data:`METRIC_KEYS` and, episodic,
    ``termination_loss``; scalars of one seed); it must keep the value's shapes and dtypes.
    A hook reads the training, it cannot change it: the parameters are those of a run without
    it.
    """

    init: Callable[[], Any]
    fold: Callable[[Any, AgentState, dict], Any]


def extensions_hook(extensions, step_of: Callable) -> Optional[UpdateHook]:
    """The :class:`UpdateHook` that :func:`update_loop` folds for an agent's extensions (a
    :class:`tdmpc2core.extensions.ExtensionSet` or None): their post_update phases, with
    ``step = step_of(agent_state)`` (an int32 scalar). None without a post_update phase."""
    if extensions is None or not extensions.has("post_update"):
        return None
    return UpdateHook(init=lambda: None, fold=lambda value, st, m: extensions.fold(value, st, m, step_of(st)))


def update_loop(n_updates, step: Callable, agent_state: AgentState, metrics: dict,
                hook: Optional[UpdateHook] = None, ext=None):
    """``n_updates`` (traced) gradient updates of one seed in a ``lax.fori_loop``: the loop of
    both agents' training programs. ``step(j, agent_state) -> (agent_state, metrics)`` is the
    j-th update (its batch and key), its metrics all the update's scalars; ``metrics`` the
    carried value before the first one: the loop carries its keys only. (The single-task
    chunk also runs it on every seed's state at once, ``step`` and ``hook.fold`` vmapped over
    the seeds: :func:`tdmpc2core.agents.online._updates`.)

    Without ``hook`` the loop carries (agent_state, metrics), the program of the agents
    without hooks. With one, ``ext`` is carried too and ``hook.fold(ext, agent_state,
    metrics)`` runs after each update with all the update's metrics (e.g. ``wm_grad_norm``,
    which the agents do not carry). Returns (agent_state, metrics, ext)."""
    keys = tuple(metrics)
    if hook is None:
        def body(j, carry):
            st, m = step(j, carry[0])
            return st, {k: m[k] for k in keys}

        agent_state, metrics = jax.lax.fori_loop(0, n_updates, body, (agent_state, metrics))
        return agent_state, metrics, ext

    def body_hooked(j, carry):
        st, _, value = carry
        st, m = step(j, st)
        return st, {k: m[k] for k in keys}, hook.fold(value, st, m)

    return jax.lax.fori_loop(0, n_updates, body_hooked, (agent_state, metrics, ext))


def success_dict(succ) -> dict:
    """The evaluation's success arrays as numpy: ``{}`` for None (a suite without a success
    flag), else ``{"success": bool [..., E], "success_any": bool [..., E]}`` from the (last,
    any) pair that :func:`episodes_of_seed` returns."""
    import numpy as np

    if succ is None:
        return {}
    last, anyv = succ
    return {"success": np.asarray(last, bool), "success_any": np.asarray(anyv, bool)}


__all__ = ["EVAL_KEY_OFFSET", "METRIC_KEYS", "eval_key", "check_hyperparameters", "init_one", "eval_episode",
           "episodes_of_seed", "episodes_with_metrics", "success_dict", "UpdateHook", "extensions_hook", "update_loop"]
