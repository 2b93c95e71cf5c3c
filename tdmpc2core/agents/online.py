"""The single-task online loop (spec §8) as jitted programs over seeds.

A *tick* is one agent step of each of the ``n_envs`` environments in lockstep:

1. if the episodes ended at the previous tick (or none has started), the finished episodes
   are added to the replay and the environments reset (the reference's order: an episode
   enters the buffer at the top of the iteration after it ended);
2. each env acts: uniform random actions while ``agent_steps <= seed_steps`` (the
   reference's ``step > seed_steps`` test), else the MPPI planner;
3. the envs step (action repeat inside the env adapter) and the row (o_{t+1}, a_t, r_t) is
   written;
4. updates: none before ``seed_steps``; at the first tick with ``agent_steps >= seed_steps``
   the burst of ``seed_steps`` updates (spec §8, §12.14); afterwards ``n_envs`` per tick, or
   ``max(1, round(n_envs * updates_per_step))`` with ``cfg.updates_per_step`` other than 1
   (:func:`~tdmpc2core.model.config.updates_per_tick`; docs/deviations.md O10).

``agent_steps`` here is the count before the tick (the reference's ``step``).

Episodic mode (``cfg.episodic``, spec §11; :func:`tick_episodic`): episodes have variable
lengths and each environment restarts on its own when its episode ends (terminated, or
truncated at T): at the top of the next tick its episode is committed to the
:class:`~tdmpc2core.agents.replay.EpisodicReplay` (env order) and it resets. The phases stay in
agent steps (a tick is still ``n_envs`` agent steps). An update needs an episode of at least
H + 1 rows to sample from; until one exists, the scheduled updates (the burst included)
wait and run at the first tick that has one (docs/deviations.md R3; the reference crashes
in its sampler). ``pending_updates`` counts them.

A chunk runs a
dynamic number of ticks inside a ``lax.fori_loop`` (one compiled program for the whole run,
whatever the chunk length or phase); the host only acts between chunks (evaluation, logging,
checkpoints).

Seeds. The loop carries every seed's state (a leading seed axis) and a tick is written for
all seeds at once: the per-seed steps (reset, planner, env step, one update) are vmapped
over the seeds *inside* the control flow, not the loop under one vmap. The phase tests
depend on the tick index alone, the same for every seed, so they are real branches
(``lax.cond``) whose branches are vmapped, and in the fixed-length mode the update loop's
count is the same for every seed, so it is one loop of vmapped updates (episodic mode:
counts per seed, each seed's loop vmapped). It is the program vmapping the whole loop gives,
the same numbers, but JAX traces each part once as batched: a vmapped loop or cond is
traced, then its body's jaxpr batched, twice for a loop (the batching rule's search for the
batched carry, then the final batching), nested at each level of control flow, which made
most of the chunk's trace time.
"""
from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from . import replay as rp
from .common import METRIC_KEYS, episodes_of_seed, episodes_with_metrics, eval_episode, extensions_hook, update_loop
from ..model.config import burst_tick, updates_per_tick
from ..model.planner import act_with_policy, plan
from ..model.update import AgentState, update
from ..run.compiled import Compiled, per_seed


class RunState(NamedTuple):
    """Everything a single-task run carries between ticks (one seed)."""

    agent: AgentState
    replay: rp.Replay
    env_state: object            # [n_envs] env states
    obs: jnp.ndarray             # [n_envs, obs_dim] current observations (f32; u8 pixels)
    prev_mean: jnp.ndarray       # [n_envs, H, A] planner warm start
    ep_t: jnp.ndarray            # [n_envs] int32 agent steps into the current episode
    ep_return: jnp.ndarray       # [n_envs] f32 return of the current episode so far
    done: jnp.ndarray            # [n_envs] bool: episode ended at the last tick
    active: jnp.ndarray          # bool: an episode is in progress (False before the first reset)
    key: jnp.ndarray
    metrics: dict                # last update's scalar metrics
    finished_return_sum: jnp.ndarray   # f32, episodes finished since the last host read
    finished_count: jnp.ndarray        # int32
    terminations: jnp.ndarray          # int32, env terminations seen (all time)
    nonfinite: jnp.ndarray             # [n_envs] int32, episodes dropped for a non-finite
    #                                    observation or reward (all time; see drop_nonfinite)
    nonfinite_step: jnp.ndarray        # [n_envs] int32, agent steps before the tick of the last
    #                                    such event (-1: none)
    discard: jnp.ndarray               # [n_envs] bool: the episode in progress is dropped
    pending_updates: jnp.ndarray       # int32, episodic mode: scheduled updates waiting for
    #                                    an episode of >= H + 1 rows (always 0 otherwise)
    tick: jnp.ndarray                  # int32, ticks done (agent steps = tick * n_envs); a resumed
                                       # run continues from it
    ext: object = None                 # the extensions' states (agent.extensions, a dict by name;
    #                                    with only the post_update= hook, its value); None without


def metric_keys(cfg) -> tuple:
    """The update metrics a run reports: METRIC_KEYS, plus ``termination_loss`` when episodic."""
    return METRIC_KEYS + (("termination_loss",) if cfg.episodic else ())


def zero_metrics(cfg=None):
    return {k: jnp.zeros((), jnp.float32) for k in (METRIC_KEYS if cfg is None else metric_keys(cfg))}


def over_envs(fn, n_envs: int):
    """``jax.vmap(fn)`` over the environments' axis (every argument and result mapped on axis 0).
    With one environment, ``fn`` on its slice and the axis put back on the results instead: the
    same computation without a batching pass over a one-long axis, which inside the seeds' vmap
    halves the time to trace an MJX environment's reset and step (the paper's runs have one
    environment per seed)."""
    if n_envs != 1:
        return jax.vmap(fn)

    def one(*args):
        out = fn(*jax.tree_util.tree_map(lambda x: x[0], args))
        return jax.tree_util.tree_map(lambda x: x[None], out)

    return one


def placeholder_env_state(env, keys):
    """(env_state, obs) of ``jax.vmap(env.reset)(keys)``'s shapes and dtypes, all zeros,
    without the reset's computation in the program.

    A run's first tick resets every env (at tick 0 in both modes: the episode boundary, or
    ``done`` set for every env), so the state a run starts with is never stepped, observed or
    recorded; only its structure is needed. Building it from shapes keeps the env's reset
    (for Brax and MJX physics, a large program) out of the init program, which then compiles
    in a fraction of the time; the key split is unchanged, so every later number is the same.
    An env whose state holds typed PRNG keys (which have no zeros) gets its real reset.
    """
    shapes = jax.eval_shape(jax.vmap(env.reset), keys)
    leaves = jax.tree_util.tree_leaves(shapes)
    if any(jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) for x in leaves):
        return jax.vmap(env.reset)(keys)
    return jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)


def init_run_state(agent, agent_state: AgentState, key, run_agent_steps: int) -> RunState:
    """A run before its first tick (one seed)."""
    env, cfg = agent.env, agent.cfg
    n, T = agent.n_envs, agent.episode_length
    k_env, key = jax.random.split(key)
    env_state, obs = placeholder_env_state(env, jax.random.split(k_env, n))
    if cfg.episodic:
        replay = rp.init_episodic_replay(rp.capacity_steps(cfg.buffer_size, run_agent_steps, T), n, T,
                                         env.spec.obs_dim, env.spec.action_dim)
    else:
        replay = rp.init_replay(rp.capacity_episodes(cfg.buffer_size, run_agent_steps, T), n, T,
                                env.spec.obs_dim, env.spec.action_dim, **replay_layout(env.spec))
    return RunState(
        agent=agent_state, replay=replay, env_state=env_state, obs=obs,
        prev_mean=jnp.zeros((n, cfg.horizon, env.spec.action_dim), jnp.float32),
        ep_t=jnp.zeros((n,), jnp.int32), ep_return=jnp.zeros((n,), jnp.float32),
        done=jnp.ones((n,), bool), active=jnp.zeros((), bool), key=key, metrics=zero_metrics(cfg),
        finished_return_sum=jnp.zeros((), jnp.float32), finished_count=jnp.zeros((), jnp.int32),
        terminations=jnp.zeros((), jnp.int32), nonfinite=jnp.zeros((n,), jnp.int32),
        nonfinite_step=jnp.full((n,), -1, jnp.int32), discard=jnp.zeros((n,), bool),
        pending_updates=jnp.zeros((), jnp.int32),
        tick=jnp.zeros((), jnp.int32), ext=_ext_init(agent, run_agent_steps))


def replay_layout(spec) -> dict:
    """:func:`~tdmpc2core.agents.replay.init_replay`'s observation layout for an env spec: {} for
    state observations (f32 rows, the arrays of runs made before pixels); for pixels, u8
    rows of one frame each (``frames`` = 3; the stacks rebuilt at sampling)."""
    if getattr(spec, "obs_dtype", "float32") == "float32":
        return {}
    return {"obs_dtype": spec.obs_dtype, "frames": rp.PIXEL_FRAMES}


def _ext_init(agent, run_agent_steps: int):
    """The extensions' initial states of one seed (None without extensions)."""
    exts = getattr(agent, "extensions", None)
    return None if exts is None else exts.init(run_agent_steps)


def _finite_obs(obs):
    """[n_envs] bool: every entry of the env's observation is finite (always True for u8
    pixels: a pixel env's failed step is seen through its NaN reward)."""
    if not jnp.issubdtype(obs.dtype, jnp.floating):
        return jnp.ones(obs.shape[:-1], bool)
    return jnp.all(jnp.isfinite(obs), axis=-1)


def _drop(rs: RunState, bad, steps_before) -> RunState:
    """Drop the episodes in progress of the envs in ``bad`` [n_envs] (a non-finite observation
    or reward): they are never committed to the replay, and the event is counted per env
    (once per episode) with the agent step it happened at (docs/deviations.md O8)."""
    new = bad & ~rs.discard
    return rs._replace(discard=rs.discard | bad, nonfinite=rs.nonfinite + new.astype(jnp.int32),
                       nonfinite_step=jnp.where(new, steps_before, rs.nonfinite_step).astype(jnp.int32))


def _reset(agent, rs: RunState, key, steps_before) -> RunState:
    n = agent.n_envs
    env_state, obs = over_envs(agent.env.reset, n)(jax.random.split(key, n))
    kept = ~rs.discard
    replay = rp.start_episodes(rs.replay, obs, rs.active, kept)
    finished = jnp.where(rs.active, jnp.sum(kept), 0).astype(jnp.int32)
    ok = _finite_obs(obs)
    rs = rs._replace(
        replay=replay, env_state=env_state, obs=jnp.where(ok[:, None], obs, jnp.zeros_like(obs)),
        finished_return_sum=rs.finished_return_sum + jnp.where(rs.active, jnp.sum(jnp.where(kept, rs.ep_return, 0.0)),
                                                               0.0),
        finished_count=rs.finished_count + finished,
        ep_t=jnp.zeros_like(rs.ep_t), ep_return=jnp.zeros_like(rs.ep_return),
        done=jnp.zeros_like(rs.done), active=jnp.ones((), bool), discard=jnp.zeros_like(rs.discard))
    return _drop(rs, ~ok, steps_before)


def _updates(agent, rs: RunState, n_updates, key, steps_before, sample=rp.sample) -> RunState:
    """``n_updates`` (traced) updates of every seed (``rs``, ``key``: [seeds, ...]) on batches
    ``sample(replay, key, batch_size, horizon)`` draws from each seed's replay (the
    fixed-length replay's sampler by default); the extensions' post_update phases after each,
    with ``step`` = ``steps_before + n_envs`` (the agent steps done, this tick's included;
    traced only with extensions, so the program without them is unchanged).

    ``n_updates`` a scalar (the fixed-length mode's schedule, the same for every seed): one
    loop whose body is the seeds' update, vmapped. [seeds] (the episodic mode's waiting
    updates): each seed's loop, vmapped (a loop that runs the largest count, the other seeds'
    states kept once their own count is done)."""
    cfg = agent.cfg

    def seed_step(replay, key):  # one seed's j-th update
        def step(j, st):
            k_s, k_u = jax.random.split(jax.random.fold_in(key, j))
            batch = sample(replay, k_s, cfg.batch_size, cfg.horizon)
            return update(agent.wm, st, batch, agent.gamma, k_u)

        return step

    hook = extensions_hook(getattr(agent, "extensions", None),
                           lambda st: jnp.asarray(steps_before + agent.n_envs, jnp.int32))
    if jnp.ndim(n_updates) == 0:
        def step(j, st):
            return jax.vmap(lambda r, k, s: seed_step(r, k)(j, s))(rs.replay, key, st)

        seeds_hook = None if hook is None else hook._replace(fold=jax.vmap(hook.fold))
        st, metrics, ext = update_loop(n_updates, step, rs.agent, rs.metrics, seeds_hook, rs.ext)
    else:
        st, metrics, ext = jax.vmap(lambda n_, r, k, s, m, e: update_loop(n_, seed_step(r, k), s, m, hook, e))(
            n_updates, rs.replay, key, rs.agent, rs.metrics, rs.ext)
    return rs._replace(agent=st, metrics=metrics, ext=ext)


def _scheduled_updates(agent, tick_index):
    """Updates due at a tick (spec §5.5, §8): none before seed_steps, the burst of seed_steps
    at the first tick with step >= seed_steps, then n_envs per tick (``max(1, round(n_envs *
    updates_per_step))``, :func:`~tdmpc2core.model.config.updates_per_tick`; a Python int, so
    the default's program is the reference schedule's). Both modes step every env at every
    tick (the episodic mode's restarts happen at the top of the tick), so a tick's count is
    based on ``n_envs`` in the episodic mode too."""
    n, seed_steps = agent.n_envs, agent.cfg.seed_steps
    b = burst_tick(seed_steps, n)
    return jnp.where(tick_index < b, 0, jnp.where(tick_index == b, seed_steps, updates_per_tick(agent.cfg, n)))


def _env_step(agent, rs: RunState, action, prev_mean, key, write_row, steps_before) -> RunState:
    """Step every env with ``action`` [n, A] and write row ``ep_t + 1`` (o_{t+1}, a_t, r_t,
    d_t) with ``write_row`` (``rp.write_step`` or ``rp.stage_step``); count terminations.

    A non-finite observation or reward drops the env's episode (:func:`_drop`; its rows are
    never committed, so they reach neither the replay's sampled episodes nor a loss) and the
    observation the agent acts on next is zeros until the env restarts: at once in the
    episodic mode (``done``), at the next episode boundary otherwise (every env resets then).
    """
    env_state, out = over_envs(agent.env.step, agent.n_envs)(rs.env_state, action, jax.random.split(key, agent.n_envs))
    finite = _finite_obs(out.obs) & jnp.isfinite(out.reward)
    replay = write_row(rs.replay, rs.ep_t + 1, out.obs, action, out.reward, out.terminated)
    rs = _drop(rs, ~finite, steps_before)
    done = out.terminated | out.truncated
    if agent.cfg.episodic:
        done = done | rs.discard
    return rs._replace(
        replay=replay, env_state=env_state, obs=jnp.where(finite[:, None], out.obs, jnp.zeros_like(out.obs)),
        prev_mean=prev_mean,
        ep_t=rs.ep_t + 1, ep_return=rs.ep_return + jnp.where(finite, out.reward, 0.0),
        done=done, terminations=rs.terminations + jnp.sum(out.terminated).astype(jnp.int32))


def _tick_keys(rs: RunState):
    """Each seed's key split in six: (key carried on, reset, random actions, planner, env step,
    updates), each [seeds, 2]."""
    return jax.vmap(lambda k: tuple(jax.random.split(k, 6)))(rs.key)


def tick(agent, rs: RunState, tick_index) -> RunState:
    """One lockstep tick (module docstring) of every seed (``rs``: [seeds, ...]).
    ``tick_index`` is the same for every seed, so the phase tests are real branches."""
    if agent.cfg.episodic:
        return tick_episodic(agent, rs, tick_index)
    n, T = agent.n_envs, agent.episode_length
    key, k_reset, k_rand, k_plan, k_step, k_upd = _tick_keys(rs)
    rs = rs._replace(key=key)
    steps_before = tick_index * n  # the reference's `step`
    # 1. episodes end together at T (terminations are refused in this mode), so the reset
    # predicate depends on the tick alone.
    reset = jax.vmap(lambda r, k: _reset(agent, r, k, steps_before))
    rs = jax.lax.cond((tick_index % T) == 0, lambda r: reset(r, k_reset), lambda r: r, rs)
    t0 = rs.ep_t == 0

    # 2. act: uniform random while step <= seed_steps (spec §8), else plan
    action, prev_mean = _act(agent, rs, steps_before, t0, k_rand, k_plan)
    # 3. env step and replay row
    rs = jax.vmap(lambda r, a, m, k: _env_step(agent, r, a, m, k, rp.write_step, steps_before))(
        rs, action, prev_mean, k_step)
    # 4. updates (spec §5.5, §8)
    return _updates(agent, rs, _scheduled_updates(agent, tick_index), k_upd, steps_before)


def _act(agent, rs: RunState, steps_before, t0, k_rand, k_plan):
    """Uniform random actions while ``steps_before <= seed_steps`` (spec §8), else the planner
    (or the policy prior with ``mpc=False``), for every seed (``rs``, ``t0``, the keys:
    [seeds, ...]); the phase is the same for every seed: one branch, vmapped over the seeds.
    Returns (actions [seeds, n, A], prev_mean [seeds, n, H, A])."""
    cfg, n, A = agent.cfg, agent.n_envs, agent.env.spec.action_dim

    def random_actions(prev_mean, k_rand):
        return jax.random.uniform(k_rand, (n, A), jnp.float32, -1.0, 1.0), prev_mean

    def planned_actions(params, obs, prev_mean, t0, k_plan):
        keys = jax.random.split(k_plan, n)
        if cfg.mpc:
            return over_envs(lambda o, m, f, k: plan(agent.wm, params, o, m, f, False, agent.gamma, k), n)(
                obs, prev_mean, t0, keys)
        a = over_envs(lambda o, k: act_with_policy(agent.wm, params, o, False, k), n)(obs, keys)
        return a, prev_mean

    return jax.lax.cond(steps_before <= cfg.seed_steps,
                        lambda: jax.vmap(random_actions)(rs.prev_mean, k_rand),
                        lambda: jax.vmap(planned_actions)(rs.agent.params, rs.obs, rs.prev_mean, t0, k_plan))


def _where_env(mask, new, old):
    """Per-env select over pytrees whose leaves have a leading [n_envs] axis."""
    return jax.tree_util.tree_map(
        lambda a, b: jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b), new, old)


def tick_episodic(agent, rs: RunState, tick_index) -> RunState:
    """One tick of the episodic mode (module docstring; spec §8, §11) of every seed (``rs``:
    [seeds, ...]).

    1. every env whose episode ended at the last tick commits it to the replay (env order)
       and resets (envs that have not started yet reset too);
    2. act (random while agent_steps <= seed_steps, else plan), step, stage the row;
    3. updates: the schedule's count (0 before the burst tick, ``seed_steps`` at it,
       :func:`~tdmpc2core.model.config.updates_per_tick` after: ``n_envs`` by default) is
       added to ``pending_updates``; all pending updates run when the replay holds an
       episode of at least H + 1 rows, else they keep waiting.
    """
    n = agent.n_envs
    key, k_reset, k_rand, k_plan, k_step, k_upd = _tick_keys(rs)
    steps_before = tick_index * n

    # 1. commit finished episodes, restart those envs
    rs = jax.vmap(lambda r, k, k_r: _restart_ended(agent, r, k, k_r, steps_before))(rs, key, k_reset)

    # 2. act, step, stage the row (o_{t+1}, a_t, r_t, d_t)
    action, prev_mean = _act(agent, rs, steps_before, rs.ep_t == 0, k_rand, k_plan)
    rs = jax.vmap(lambda r, a, m, k: _env_step(agent, r, a, m, k, rp.stage_step, steps_before))(
        rs, action, prev_mean, k_step)

    # 3. updates (spec §5.5, §8), waiting while nothing can be sampled
    pending = rs.pending_updates + _scheduled_updates(agent, tick_index).astype(jnp.int32)
    can_sample = jax.vmap(rp.num_sampleable)(rs.replay) > 0
    n_updates = jnp.where(can_sample, pending, 0)
    rs = rs._replace(pending_updates=pending - n_updates)
    return _updates(agent, rs, n_updates, k_upd, steps_before, sample=rp.sample_episodic)


def _restart_ended(agent, rs: RunState, key, k_reset, steps_before) -> RunState:
    """The episodic tick's first step (:func:`tick_episodic`) of one seed: every env whose
    episode ended at the last tick commits it (unless dropped) and resets, as do envs not
    started yet; ``key`` is the key carried on."""
    env, cfg = agent.env, agent.cfg
    n = agent.n_envs
    ending = rs.done & rs.active & ~rs.discard  # a dropped episode is not committed
    reset_state, reset_obs = over_envs(env.reset, n)(jax.random.split(k_reset, n))
    restart = rs.done
    ok = _finite_obs(reset_obs)
    replay = rp.commit_and_restart(rs.replay, ending, rs.ep_t, restart, reset_obs, cfg.horizon + 1)
    rs = rs._replace(
        key=key, replay=replay,
        env_state=_where_env(restart, reset_state, rs.env_state),
        obs=jnp.where(restart[:, None], jnp.where(ok[:, None], reset_obs, jnp.zeros_like(reset_obs)), rs.obs),
        finished_return_sum=rs.finished_return_sum + jnp.sum(jnp.where(ending, rs.ep_return, 0.0)),
        finished_count=rs.finished_count + jnp.sum(ending).astype(jnp.int32),
        ep_t=jnp.where(restart, 0, rs.ep_t), ep_return=jnp.where(restart, 0.0, rs.ep_return),
        done=jnp.zeros_like(rs.done), active=jnp.ones((), bool), discard=rs.discard & ~restart)
    return _drop(rs, restart & ~ok, steps_before)


def make_chunk_fn(agent, compile_seconds: Optional[dict] = None, devices=None) -> Compiled:
    """One compiled program (states [seeds, ...], start_tick, n_ticks) -> states
    (:func:`tdmpc2core.run.compiled.per_seed`, the states donated; ``compile_seconds``: the
    timings dict of its ``"chunk"`` entry).

    Runs ticks start_tick .. start_tick + n_ticks - 1 of every seed (one loop carrying all
    seeds' states, each tick vmapped over the seeds inside: module docstring) and sets the
    states' ``tick`` to start_tick + n_ticks. The tick count is dynamic, so every chunk of a
    run uses the same compiled program; a tick depends only on its absolute index and the
    state (the PRNG key lives in the state), so any split of a run into chunks gives the same
    numbers.
    """
    def chunk(rs, start, n_ticks):
        rs = jax.lax.fori_loop(0, n_ticks, lambda i, r: tick(agent, r, start + i), rs)
        return rs._replace(tick=jnp.full_like(rs.tick, start + n_ticks))

    return per_seed(chunk, name="chunk", compile_seconds=compile_seconds, in_axes=(0, None, None), batched=False,
                    donate_argnums=(0,), devices=devices, fingerprint=_fingerprint(agent, "chunk"))


def make_eval_fn(agent, num_episodes: int, compile_seconds: Optional[dict] = None, devices=None) -> Compiled:
    """A compiled program (params [seeds, ...], keys [seeds, 2]) -> (returns, lengths, success):
    returns and lengths [seeds, E]; success None, or for an env with a success flag
    (``env.spec.has_success``) the pair (success at the last step, at any step) bool [seeds, E]
    (:func:`eval_episode`) (:func:`tdmpc2core.run.compiled.per_seed`; ``compile_seconds``: the
    timings dict of its ``"eval"`` entry).

    Each of ``num_episodes`` episodes (:func:`eval_episode`) starts from a fresh initial
    state of its own key and runs T agent steps with the planner in eval mode (no
    exploration noise; the elite is still drawn at random, spec §6.5), t0 on the first step
    (spec §7).

    With extensions that have eval_metrics (``agent.extensions``), the program is (params,
    keys, ext [seeds, ...]) -> (returns, lengths, success, {``ext/<extension>/<metric>``: [seeds]}): the
    same episodes, recorded, then the extensions' eval_metrics on them (the same returns).
    """
    env, cfg = agent.env, agent.cfg
    T, A, H = agent.episode_length, env.spec.action_dim, cfg.horizon
    exts = getattr(agent, "extensions", None)
    record = exts is not None and exts.has("eval_metrics")

    def one_episode(params, key):
        def act(obs, mean, t0, k):
            if cfg.mpc:
                return plan(agent.wm, params, obs, mean, t0, True, agent.gamma, k)
            return act_with_policy(agent.wm, params, obs, True, k), mean

        return eval_episode(env, act, T, H, A, key, record=record)

    if record:
        fn = episodes_with_metrics(one_episode, num_episodes, functools.partial(eval_metrics_of, agent))
    else:
        fn = episodes_of_seed(one_episode, num_episodes)
    return per_seed(fn, name="eval", compile_seconds=compile_seconds, devices=devices,
                    fingerprint=_fingerprint(agent, "eval", num_episodes=int(num_episodes)))


def _fingerprint(agent, program: str, **settings):
    """The agent's :meth:`~tdmpc2core.agents.single_task.TDMPC2.program_fingerprint` of
    ``program`` (None for an agent without one: traced in every process)."""
    fn = getattr(agent, "program_fingerprint", None)
    return None if fn is None else fn(program, **settings)


def eval_metrics_of(agent, ext, params, episodes) -> dict:
    """The extensions' eval_metrics of one seed's recorded episodes (obs [E, T+1, O], action
    [E, T, A], reward [E, T], valid [E, T])."""
    from ..extensions import EvalEpisodes, EvalModel

    return agent.extensions.eval_metrics(ext, EvalModel(agent.wm, params), EvalEpisodes(*episodes))


def eval_metric_names(agent) -> list:
    """The history keys of the extensions' eval_metrics (``ext/<extension>/<metric>``, sorted;
    [] without), from the evaluation traced on abstract values (nothing runs)."""
    exts = getattr(agent, "extensions", None)
    if exts is None or not exts.has("eval_metrics"):
        return []
    spec, T = agent.env.spec, agent.episode_length

    def abstract():
        params = agent.wm.init(jax.random.PRNGKey(0))
        ext = exts.init(0)
        f32 = jnp.float32
        episodes = (jnp.zeros((1, T + 1, spec.obs_dim), spec.obs_dtype), jnp.zeros((1, T, spec.action_dim), f32),
                    jnp.zeros((1, T), f32), jnp.zeros((1, T), bool))
        return eval_metrics_of(agent, ext, params, episodes)

    return exts.metric_names(abstract)
