"""The multi-task agent's evaluation (spec §10): its environments, return ranges, acting and
evaluation programs, and the normalized score.

Each task is evaluated in its own environment (built with the task's action repeat, episode
length and environment settings, ``env_params``, from the dataset's task table), the planner in eval mode with the task's
embedding and action mask on zero-padded observations; the env receives the task's own
action dims. Keys come from the seed, the updates done and the task
(:func:`tdmpc2core.agents.common.eval_key`).
"""
from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from ..envs.registry import get_suite
from ..model.planner import act_with_policy, plan
from ..model.update import embed
from ..run.compiled import Compiled, per_seed
from .common import episodes_of_seed, episodes_with_metrics, eval_episode, eval_key, success_dict


def _takes_backend(env_id: str) -> bool:
    """Whether the env id's suite takes a physics ``backend`` (the registry's Suite)."""
    from ..envs import suite_for

    return suite_for(env_id).takes_backend


def _keeps_own_time_limit(suite_name: str) -> bool:
    """Whether envs of the suite named ``suite_name`` keep their own time limit (gymnax)."""
    suite = get_suite(suite_name, None)
    return suite is not None and not suite.keeps_episode_length


def task_env(t, backend=None, env_id=None):
    """The env of task ``t`` (a dataset's :class:`~tdmpc2core.io.dataset.TaskInfo`) built again
    as its data was collected: ``env_id`` (default the task table's), the task's action repeat,
    ``T x action repeat`` simulator steps (a suite that keeps its own time limit: its own, which
    :func:`_make_eval_env` compares with the table's T) and the task table's ``env_params``
    (None: the suite's defaults); ``backend`` for a suite that takes one. Raises ValueError (an
    id, a setting the suite refuses)."""
    from ..envs import make_env, suite_for

    env_id = t.env_id if env_id is None else env_id
    own = not suite_for(env_id).keeps_episode_length
    return make_env(env_id, action_repeat=int(t.action_repeat),
                    episode_length=None if own else int(t.episode_length) * int(t.action_repeat),
                    env_params=getattr(t, "env_params", None) or None,
                    backend=backend if _takes_backend(env_id) else None)


def _make_eval_env(agent, t, spec):
    """The evaluation env of task ``t`` from ``spec`` (an env id, built by :func:`task_env`
    with the task table's settings, or an Env), checked against the task table (obs dim,
    action dim, T, action repeat, env settings); raises ValueError / TypeError."""
    from ..envs import Env

    if isinstance(spec, Env):
        env = spec
    elif isinstance(spec, str):
        env = task_env(t, agent.backend, spec)
    else:
        raise TypeError(f"eval_envs entry for task {t.name!r}: expected an env id or an Env, got "
                        f"{type(spec).__name__}")
    s = env.spec
    got = dict(obs_dim=s.obs_dim, action_dim=s.action_dim, episode_length=s.episode_length,
               action_repeat=s.action_repeat, env_params=env.env_params)
    want = dict(obs_dim=int(t.obs_dim), action_dim=int(t.action_dim), episode_length=int(t.episode_length),
                action_repeat=int(t.action_repeat), env_params=dict(getattr(t, "env_params", None) or {}))
    bad = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    if bad:
        raise ValueError(
            f"eval env {s.env_id!r} does not match task {t.name!r} of the dataset: "
            + ", ".join(f"{k} {g} (env) vs {w} (task table)" for k, (g, w) in bad.items())
            + (f" ({s.suite} envs keep their own time limit)" if _keeps_own_time_limit(s.suite) else ""))
    return env


def build_eval_envs(agent, eval_envs):
    """The agent's evaluation envs from the constructor's ``eval_envs`` (None/False: none;
    True: the task table's env ids; or one entry per task: env id, Env or None)."""
    if eval_envs is None or eval_envs is False:
        return None
    if eval_envs is True:
        missing = [t.name for t in agent.tasks if not t.env_id]
        if missing:
            raise ValueError(f"eval_envs=True needs every task's env_id in the dataset's task table; "
                             f"{missing} have none: pass eval_envs, one env per task")
        eval_envs = [t.env_id for t in agent.tasks]
    eval_envs = list(eval_envs)
    if len(eval_envs) != agent.num_tasks:
        raise ValueError(f"eval_envs has {len(eval_envs)} entries; the dataset has {agent.num_tasks} tasks "
                         f"{agent.task_names} (one env per task, in task-id order; None: not evaluated)")
    if all(e is None for e in eval_envs):
        raise ValueError("eval_envs names no env (every entry is None): pass eval_envs=None to train "
                         "without evaluating")
    # None: a task trained on but not evaluated (e.g. no environment for it)
    return [None if spec is None else _make_eval_env(agent, t, spec) for t, spec in zip(agent.tasks, eval_envs)]


def resolve_ranges(agent, return_ranges):
    """{task name: (low, high) or None}: the declared ranges, else (0, T x action repeat) for
    DM Control tasks (Playground or dm_control), else None (a warning for evaluated tasks)."""
    given = dict(return_ranges or {})
    unknown = sorted(set(given) - set(agent.task_names))
    if unknown:
        raise ValueError(f"return_ranges names unknown task(s) {unknown}; tasks: {agent.task_names}")
    success = [t.name for i, t in enumerate(agent.tasks) if t.name in given and _has_success(agent, i)]
    if success:
        raise ValueError(f"return_ranges names task(s) {success} whose env has a success flag: their normalized "
                         "score is 100 x the success rate (the paper's rule for Meta-World), not a return range; "
                         "drop them from return_ranges")
    out = {}
    for i, t in enumerate(agent.tasks):
        if agent.eval_envs is not None and _has_success(agent, i):
            out[t.name] = None  # scored by success (normalized_score_of)
        elif t.name in given:
            lo, hi = (float(x) for x in given[t.name])
            if not hi > lo:
                raise ValueError(f"return_ranges[{t.name!r}] = {given[t.name]!r}: need low < high")
            out[t.name] = (lo, hi)
        elif agent.eval_envs is not None and agent.eval_envs[i] is not None:
            # the suite's declared reward range per simulator step (DM Control, Playground's MJX
            # ports or dm_control itself: [0, 1], the paper's return / 10), else None
            suite = get_suite(agent.eval_envs[i].spec.suite, None)
            out[t.name] = suite.return_range(int(t.episode_length * t.action_repeat)) if suite else None
        else:
            out[t.name] = None
    if agent.eval_envs is not None:
        missing = [n for i, (n, r) in enumerate(out.items())
                   if r is None and agent.eval_envs[i] is not None and not _has_success(agent, i)]
        if missing:
            warnings.warn(f"no declared return range for task(s) {missing}: their normalized score, and the "
                          "mean normalized score over tasks, are NaN (pass return_ranges)", stacklevel=3)
    return out


def _has_success(agent, i: int) -> bool:
    """Whether task ``i``'s evaluation env has a success flag (``EnvSpec.has_success``)."""
    envs = agent.eval_envs
    return envs is not None and envs[i] is not None and bool(getattr(envs[i].spec, "has_success", False))


def act_program(agent, task: int, eval_mode: bool) -> Compiled:
    """(params, padded obs, prev_mean, t0, key) -> (action [task action dim], mean [H, A]) of
    task ``task`` for one seed (planner, or the policy prior with ``mpc=False``)."""
    a_dim, gamma = int(agent.tasks[task].action_dim), agent.task_gammas[agent.task_names[task]]
    mask = jnp.asarray(agent.masks[task])
    cfg, wm = agent.cfg, agent.wm

    def one(params, obs, prev_mean, t0, key):
        e = embed(params["task_emb"], task)
        if not cfg.mpc:
            return act_with_policy(wm, params, obs, eval_mode, key, e, mask)[:a_dim], prev_mean
        a, mean = plan(wm, params, obs, prev_mean, t0, eval_mode, gamma, key, e, mask)
        return a[:a_dim], mean

    return per_seed(one, name="act", batched=False, devices=agent.placement)


def eval_program(agent, task: int, num_episodes: int) -> Compiled:
    """(params [S, ...], keys [S, 2]) -> (returns, lengths, success) of task ``task``: returns,
    lengths [S, E], success None or, for an env with a success flag, (success at the last step,
    at any step) bool [S, E] (:func:`~tdmpc2core.agents.common.eval_episode`); with extensions
    that have eval_metrics, (params, keys, ext [S, ...]) -> (returns, lengths, success,
    {``ext/<extension>/<metric>``: [S]}) on the same episodes (recorded, zero-padded to the
    model's widths, the task's embedding in :class:`~tdmpc2core.extensions.EvalModel`)."""
    env, cfg, wm = agent.eval_envs[task], agent.cfg, agent.wm
    T, H, A, O = env.spec.episode_length, cfg.horizon, agent.action_dim, agent.obs_dim
    a_dim, pad = env.spec.action_dim, O - env.spec.obs_dim
    gamma = agent.task_gammas[agent.task_names[task]]
    mask = jnp.asarray(agent.masks[task])
    exts = agent.extensions
    record = exts is not None and exts.has("eval_metrics")

    def one_episode(params, key):
        e = embed(params["task_emb"], task)  # renormalised at look-up, not written back (M2)

        def act(obs, mean, t0, k):
            o = jnp.pad(obs, (0, pad))
            if cfg.mpc:
                a, mean = plan(wm, params, o, mean, t0, True, gamma, k, e, mask)
            else:
                a = act_with_policy(wm, params, o, True, k, e, mask)
            return a[:a_dim], mean  # the env gets its own dims only

        return eval_episode(env, act, T, H, A, key, record=record)

    if not record:
        fn = episodes_of_seed(one_episode, num_episodes)
    else:
        fn = episodes_with_metrics(one_episode, num_episodes, functools.partial(eval_metrics_of, agent, task))
    return per_seed(fn, name="eval", compile_seconds=agent.compile_seconds, devices=agent.placement)


def record_program(agent, task: int, state_of, timings: dict):
    """The compiled ``(params, key) -> (states, return, length)`` of one seed on task ``task``
    (:func:`tdmpc2core.agents.video.make_record_fn`): one episode acting as :func:`eval_program`
    acts (the task's embedding and action mask, padded observations, the planner in eval
    mode), keeping ``state_of(inner)`` per agent step."""
    from .video import make_record_fn

    env, cfg, wm = agent.eval_envs[task], agent.cfg, agent.wm
    a_dim, pad = env.spec.action_dim, agent.obs_dim - env.spec.obs_dim
    gamma = agent.task_gammas[agent.task_names[task]]
    mask = jnp.asarray(agent.masks[task])

    def act(params, obs, mean, t0, k):
        e = embed(params["task_emb"], task)
        o = jnp.pad(obs, (0, pad))
        if cfg.mpc:
            a, mean = plan(wm, params, o, mean, t0, True, gamma, k, e, mask)
        else:
            a = act_with_policy(wm, params, o, True, k, e, mask)
        return a[:a_dim], mean

    return make_record_fn(env, act, env.spec.episode_length, cfg.horizon, agent.action_dim, state_of, timings)


def eval_metrics_of(agent, task: int, ext, params, episodes) -> dict:
    """The extensions' eval_metrics of one seed's recorded episodes of task ``task`` (obs
    [E, T+1, o], action [E, T, a] in the task's own widths, zero-padded here to the model's)."""
    from ..extensions import EvalEpisodes, EvalModel

    obs, action, reward, valid = episodes
    obs = jnp.pad(obs, ((0, 0), (0, 0), (0, agent.obs_dim - obs.shape[-1])))
    action = jnp.pad(action, ((0, 0), (0, 0), (0, agent.action_dim - action.shape[-1])))
    return agent.extensions.eval_metrics(ext, EvalModel(agent.wm, params, task),
                                         EvalEpisodes(obs, action, reward, valid))


def eval_metric_names(agent) -> list:
    """The history keys of the extensions' eval_metrics (sorted; [] without extensions that
    have eval_metrics or without eval envs), traced on abstract values (nothing runs)."""
    exts = agent.extensions
    if exts is None or not exts.has("eval_metrics") or not agent.eval_task_ids:
        return []
    task = agent.eval_task_ids[0]
    spec = agent.eval_envs[task].spec
    T = spec.episode_length

    def abstract():
        params = agent.wm.init(jax.random.PRNGKey(0))
        f32 = jnp.float32
        episodes = (jnp.zeros((1, T + 1, spec.obs_dim), f32), jnp.zeros((1, T, spec.action_dim), f32),
                    jnp.zeros((1, T), f32), jnp.zeros((1, T), bool))
        return eval_metrics_of(agent, task, exts.init(0), params, episodes)

    return exts.metric_names(abstract)


def eval_keys(seeds, updates: int, task: int):
    """Evaluation keys [S, 2]: from the seed, the updates done and the task (the same
    initial states when a run is repeated or continued in chunks)."""
    return jnp.stack([eval_key(s, updates, task) for s in seeds])


def normalized_score(agent, returns, task_ids=None) -> np.ndarray:
    """100 (return - low) / (high - low) per task on the last axis ([..., num_tasks], or
    [..., len(task_ids)] for the tasks ``task_ids``); NaN for a task without a declared range
    (a task scored by success among them: :func:`evaluate` puts 100 x its success rate there)."""
    r = np.asarray(returns, np.float64)
    out = np.full(r.shape, np.nan)
    names = agent.task_names if task_ids is None else [agent.task_names[i] for i in task_ids]
    for i, name in enumerate(names):
        rng = agent.return_ranges.get(name)
        if rng is not None:
            out[..., i] = 100.0 * (r[..., i] - rng[0]) / (rng[1] - rng[0])
    return out


def evaluate(agent, state, num_episodes: int) -> dict:
    """Every seed on every evaluated task (:meth:`tdmpc2core.TDMPC2MultiTask.evaluate`)."""
    if agent.eval_envs is None:
        raise ValueError("TDMPC2MultiTask.evaluate: this agent has no eval_envs (built with eval_envs=None); "
                         "pass eval_envs=True (the task table's env ids) or one env per task")
    seeds = [int(s) for s in np.asarray(state.seed)]
    updates = int(np.asarray(state.agent.updates)[0])
    rets, lens, ext, succ, succ_any = [], [], [], [], []
    ids = agent.eval_task_ids
    metrics = agent.extensions is not None and agent.extensions.has("eval_metrics")
    for i in ids:
        args = (state.agent.params, eval_keys(seeds, updates, i)) + ((state.ext,) if metrics else ())
        out = agent._eval_fn(i, int(num_episodes))(*args)
        rets.append(np.asarray(out[0]))
        # a host simulator's exception (its items gave NaN): the evaluation stops with it
        agent.eval_envs[i].raise_host_error(f"in the evaluation of task {agent.task_names[i]!r} at {updates} updates")
        lens.append(np.asarray(out[1]))
        flags = success_dict(out[2])
        nan = np.full(rets[-1].shape, np.nan)
        succ.append(flags["success"].astype(np.float64) if flags else nan)
        succ_any.append(flags["success_any"].astype(np.float64) if flags else nan)
        if metrics:
            ext.append({k: np.asarray(v, np.float64) for k, v in out[3].items()})
    returns = np.stack(rets, axis=1).astype(np.float64)  # [S, K, E]
    per_task = returns.mean(axis=-1)
    norm = normalized_score(agent, per_task, ids)
    res = {"tasks": agent.eval_task_names, "updates": updates, "returns": returns,
           "lengths": np.stack(lens, axis=1), "return": per_task, "mean_return": per_task.mean(axis=-1)}
    if has_success(agent):
        res["success"], res["success_any"] = np.stack(succ, axis=1), np.stack(succ_any, axis=1)  # [S, K, E]
        res["success_rate"] = res["success"].mean(axis=-1)  # [S, K], NaN for a task without
        scored = [_has_success(agent, i) for i in ids]
        norm = np.where(scored, 100.0 * res["success_rate"], norm)  # the paper's Meta-World score
    res.update({"normalized_score_per_task": norm, "normalized_score": norm.mean(axis=-1),
                "ext": {k: np.stack([e[k] for e in ext], axis=1) for k in (ext[0] if ext else {})}})  # [S, K]
    return res


def has_success(agent) -> bool:
    """Whether any evaluated task's env has a success flag (the evaluation then records
    success for every evaluated task, NaN for those without)."""
    return any(_has_success(agent, i) for i in agent.eval_task_ids)


__all__ = ["task_env", "build_eval_envs", "resolve_ranges", "act_program", "eval_program", "eval_metrics_of",
           "eval_metric_names", "eval_keys", "normalized_score", "evaluate", "has_success"]
