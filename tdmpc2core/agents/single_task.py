"""``TDMPC2``: single-task online TD-MPC2, the paper-era agent (official commit 5f6fade).

Example::

    from tdmpc2core import TDMPC2
    agent = TDMPC2("Pendulum-v1", model_size=1, num_samples=64, num_elites=8,
                   num_pi_trajs=4, iterations=2)
    state, history = agent.train(seed=[0, 1], n_timesteps=4000, eval_every=1000)
    print(agent.gamma, history["eval_return"])   # 0.975, [n_evals, n_seeds]

    # resumable: checkpoints every 1000 agent steps; the same call run again (say, after a
    # crash) continues from the newest one, with the same numbers as an uninterrupted run
    state, history = agent.train(seed=[0, 1], n_timesteps=4000, eval_every=1000,
                                 checkpoint_dir="ckpt/pendulum", checkpoint_every=1000)
    state, history, manifest = agent.restore("ckpt/pendulum/step_000000004000")
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time
import warnings
from typing import Callable, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from ..io import checkpoint
from . import online
from . import replay as rp
from ..model.config import TDMPC2Config, resolve_config
from ..envs import Env, make_env
from ..model.planner import act_with_policy, plan
from ..run.driver import (SubChunkSizer, TrainingInterrupted, finalize_history, history_from_arrays,
                       history_to_arrays, new_history, working_history)
from ..model.update import init_agent_state
from ..model.world_model import WorldModel

_log = logging.getLogger("tdmpc2core")
_UNSET = object()


def _version() -> str:
    from .. import __version__
    return __version__


class TerminationError(ValueError):
    """A non-episodic agent met an environment termination."""


class NoSampleableEpisodeError(ValueError):
    """Episodic mode: a run ended with scheduled updates that never ran, because the replay
    held no episode of at least horizon + 1 rows to sample a slice from (spec §9).

    Raised by :meth:`TDMPC2.train` after its last chunk; ``state`` and ``history`` hold what
    the run produced.
    """

    def __init__(self, message, state=None, history=None):
        super().__init__(message)
        self.state = state
        self.history = history


class TDMPC2:
    """Single-task online TD-MPC2 (spec §1-§9) on gymnax, Brax or MuJoCo Playground.

    Two modes:

    * ``episodic=False`` (default): the paper-era agent (official 5f6fade). It bootstraps
      through every episode end, which is right for tasks that never terminate (DMC); it
      refuses a terminating task with :class:`TerminationError`. Episodes have the fixed
      length T and all environments reset together.
    * ``episodic=True``: the later official code's episodic mode (spec §11; eece801 with the
      38b31a5 fix). A termination head (mlp of the latent to one logit, §11.2) is built and
      trained with the binary cross-entropy of §11.3 on the predicted latents, weighted by
      ``termination_coef`` (default 1); TD targets drop the bootstrap at each step's own
      terminal flag (``r_t + gamma (1 - d_t) Q``, §11.4); the planner stops accumulating
      reward and value after a predicted termination (sigmoid > 0.5, §11.4). Episodes have
      variable lengths (at most T); each environment resets on its own when its episode
      ends; the replay is a ring of rows with an episode table (docs/deviations.md R1, R3).

    Args:
      env_id: gymnax id (``Pendulum-v1``), Brax name (``inverted_pendulum``) or Playground DM
        Control name (``CartpoleBalance``); see :func:`tdmpc2core.envs.list_env_ids`. Or a
        prebuilt :class:`tdmpc2core.envs.Env` (a custom task; its spec fixes T and the action
        repeat, and the other env arguments are ignored).
      n_envs: environments in lockstep; the planner plans for each, and each tick runs
        ``n_envs`` updates (the reference uses 1; docs/deviations.md O2).
      episode_length: simulator steps per episode (Brax, Playground); T = episode_length /
        action_repeat agent steps. gymnax uses its params' ``max_steps_in_episode``.
      action_repeat: simulator steps per agent step (rewards summed); the paper's DMC
        protocol uses 2.
      env_params: gymnax env params (None: the env's defaults).
      backend: Playground physics implementation (None: ``"jax"``, MJX).
      **hyperparameters: any field of :class:`~tdmpc2core.config.TDMPC2Config` (the official
        config.yaml names; ``lr`` is ``learning_rate``), each at its paper default. The
        ``model_size`` preset {1, 5, 19, 48, 317} fills enc_dim, mlp_dim, latent_dim,
        num_enc_layers and num_q left as None; explicit widths override it.

    Derived (spec §1.3): ``gamma`` = clip((T/5 - 1)/(T/5), 0.95, 0.995), ``seed_steps`` =
    max(1000, 5 T) agent steps, planner ``iterations`` + 2 when the action dim is >= 20.

    Units: ``n_timesteps``, ``seed_steps``, ``eval_every`` and every ``agent_steps`` count
    agent steps (transitions: one per environment per tick), never replay rows (the replay
    also stores one reset row per episode). ``buffer_size`` counts agent steps too (the
    reset rows are held on top; docs/deviations.md R1): a run no longer than
    ``buffer_size`` evicts no episode, in either mode.

    Raises:
      ValueError: unknown env id, discrete actions, an episode shorter than horizon + 1
        (non-episodic), seed_steps shorter than the first episode (non-episodic).
      TypeError: an unknown hyperparameter name.
    """

    def __init__(self, env_id: str, n_envs: int = 1, model_size: int = 5, *,
                 episode_length: int = 1000, action_repeat: int = 1, env_params=None,
                 backend: Optional[str] = None, **hyperparameters):
        fields = {f.name for f in dataclasses.fields(TDMPC2Config)}
        unknown = sorted(set(hyperparameters) - fields)
        if unknown:
            raise TypeError(f"TDMPC2: unknown hyperparameter(s) {unknown}; accepted: {sorted(fields)}")
        if int(n_envs) < 1:
            raise ValueError(f"n_envs={n_envs!r} must be >= 1")
        self.n_envs = int(n_envs)
        if isinstance(env_id, Env):  # a prebuilt environment (e.g. a custom task)
            self.env = env_id
            self.env_id = env_id.spec.env_id
        else:
            self.env_id = env_id
            self.env = make_env(env_id, action_repeat=action_repeat, episode_length=episode_length,
                                env_params=env_params, backend=backend)
        self.spec = self.env.spec
        self.episode_length = int(self.spec.episode_length)  # T, agent steps
        self.action_repeat = int(self.spec.action_repeat)
        user_cfg = TDMPC2Config(model_size=model_size, **hyperparameters)
        # n_envs: the first update is checked too (seed_steps, batch_size; the workflow runs the same check)
        self.cfg = resolve_config(user_cfg, episode_length=self.episode_length, action_dim=self.spec.action_dim,
                                  n_envs=self.n_envs)
        self.gamma = float(self.cfg.gamma)
        self.seed_steps = int(self.cfg.seed_steps)
        self.episodic = bool(self.cfg.episodic)
        # episodic mode: episodes may end before T, and updates wait for a sampleable episode
        # (docs/deviations.md R3), so no static check applies there
        if not self.episodic and -(-self.seed_steps // self.n_envs) < self.episode_length:
            # the burst of updates at seed_steps needs a complete episode in the replay
            raise ValueError(
                f"seed_steps={self.seed_steps} is too small: with n_envs={self.n_envs} the first episode "
                f"(T={self.episode_length} agent steps) ends at tick {self.episode_length}, after the "
                f"seed-phase burst of updates; use seed_steps >= {self.episode_length * self.n_envs} "
                f"(default: max(1000, 5 T) = {max(1000, 5 * self.episode_length)})")
        self.wm = WorldModel(self.cfg, self.spec.obs_dim, self.spec.action_dim)
        self._chunk_fns: dict = {}
        self._eval_fns: dict = {}

    # hashing by identity: jitted closures capture ``self``
    def __hash__(self):
        return id(self)

    @property
    def config(self) -> dict:
        """The resolved hyperparameters and env settings, JSON-serialisable."""
        d = dataclasses.asdict(self.cfg)
        d.update(env_id=self.env_id, n_envs=self.n_envs, episode_length_agent_steps=self.episode_length,
                 action_repeat=self.action_repeat, obs_dim=self.spec.obs_dim, action_dim=self.spec.action_dim,
                 suite=self.spec.suite, physics_backend=self.spec.backend,
                 action_low=list(self.spec.action_low), action_high=list(self.spec.action_high))
        return d

    # ---- state -----------------------------------------------------------------
    def init(self, seed: Union[int, Sequence[int]], run_agent_steps: int):
        """Initial run states, stacked over seeds on axis 0."""
        seeds = np.atleast_1d(np.asarray(seed, dtype=np.int64))
        keys = jnp.stack([jax.random.PRNGKey(int(s)) for s in seeds])

        fn = self._chunk_fns.get(("init", run_agent_steps))
        if fn is None:
            def one(key):
                k_params, k_run = jax.random.split(key)
                return online.init_run_state(self, init_agent_state(self.wm, k_params), k_run, run_agent_steps)

            fn = self._chunk_fns[("init", run_agent_steps)] = jax.jit(jax.vmap(one))
        return fn(keys)

    # ---- acting ----------------------------------------------------------------
    def act(self, params, obs, t0, eval_mode: bool, key, prev_mean=None):
        """One action for one observation (spec §6-7).

        Args:
          params: the agent's parameters of one seed (``state.agent.params`` sliced).
          obs: [obs_dim]; t0: first step of the episode; eval_mode: no exploration noise;
          key: a PRNG key; prev_mean: [H, A] warm start returned by the previous call.
        Returns:
          (action [A] in [-1, 1] (the env adapter maps it to the env's bounds), mean [H, A]).
        """
        if prev_mean is None:
            prev_mean = jnp.zeros((self.cfg.horizon, self.spec.action_dim), jnp.float32)
        if not self.cfg.mpc:
            return act_with_policy(self.wm, params, obs, eval_mode, key), prev_mean
        return plan(self.wm, params, jnp.asarray(obs, jnp.float32), prev_mean, jnp.asarray(t0), bool(eval_mode),
                    self.gamma, key)

    # ---- evaluation ------------------------------------------------------------
    def evaluate(self, state, num_episodes: int = 10, eval_index: int = 0, seeds=None):
        """Evaluate every seed: ``num_episodes`` episodes of the planner in eval mode from fresh
        initial states (keys from the seed and ``eval_index``: the same states when a seed is
        rerun). Returns (returns, lengths), numpy [n_seeds, num_episodes]."""
        fn = self._eval_fns.get(num_episodes)
        if fn is None:
            fn = self._eval_fns[num_episodes] = online.make_eval_fn(self, num_episodes)
        n_seeds = jax.tree_util.tree_leaves(state.agent.params)[0].shape[0]
        seeds = list(range(n_seeds)) if seeds is None else list(seeds)
        keys = jnp.stack([jax.random.fold_in(jax.random.PRNGKey(int(s) + 10_000_019), eval_index) for s in seeds])
        ret, length = fn(state.agent.params, keys)
        return np.asarray(ret), np.asarray(length)

    # ---- training --------------------------------------------------------------
    def _chunk(self):
        if "chunk" not in self._chunk_fns:
            self._chunk_fns["chunk"] = online.make_chunk_fn(self)
        return self._chunk_fns["chunk"]

    def schedule(self, n_timesteps: int, eval_every: Optional[int], *, start_tick: int = 0,
                 total_timesteps: Optional[int] = None):
        """Host plan of one ``train`` call, in absolute ticks (one tick = ``n_envs`` agent steps).

        Args:
          n_timesteps: agent steps of this call, from ``start_tick`` (rounded up to whole ticks).
          eval_every: agent steps between evaluations (None: none).
          start_tick: ticks already done (a continued or resumed run).
          total_timesteps: the whole run's length in agent steps (the final evaluation is at
            its end); None: the end of this call.
        Returns:
          (plan, eval_at_start): plan is a list of (phase, start_tick, n_ticks,
          evaluate_after) with phase in {"seed", "burst", "train"}; chunks end at every
          multiple of ``eval_every`` agent steps, around the burst tick and at the call's end;
          eval_at_start: evaluate before the first tick (a run starting at tick 0).
        """
        n = self.n_envs
        start_tick = int(start_tick)
        end_tick = start_tick + -(-int(n_timesteps) // n)
        total_ticks = end_tick if total_timesteps is None else -(-int(total_timesteps) // n)
        if end_tick > total_ticks:
            raise ValueError(f"this call would run to agent step {end_tick * n}, past total_timesteps="
                             f"{total_timesteps}")
        burst_tick = -(-self.seed_steps // n)  # first tick with agent_steps >= seed_steps
        cuts = {start_tick, end_tick}
        period = self._eval_period(eval_every)
        if period:
            first = -(-start_tick // period) * period
            cuts |= set(range(first, end_tick + 1, period))
        if start_tick <= burst_tick < end_tick:
            cuts |= {burst_tick, burst_tick + 1}
        cuts = sorted(cuts)
        evals = set()
        if period:
            evals = {i for i in cuts if i > start_tick and (i % period == 0 or i == total_ticks)}
        plan_ = []
        for a, b in zip(cuts[:-1], cuts[1:]):
            phase = "seed" if b <= burst_tick else ("burst" if a == burst_tick else "train")
            plan_.append((phase, a, b - a, b in evals))
        return plan_, bool(period) and start_tick == 0

    def _eval_period(self, eval_every: Optional[int]) -> int:
        """Ticks between evaluations: the ticks i with i * n_envs a multiple of eval_every (0: none)."""
        if not eval_every:
            return 0
        return int(eval_every) // math.gcd(self.n_envs, int(eval_every))

    def eval_index(self, tick: int, eval_every: Optional[int]) -> int:
        """Index of the evaluation at ``tick`` (0 = before training): the number of
        evaluations before it in the run's schedule. Evaluation keys come from (seed, index),
        so a resumed run evaluates on the same initial states as an uninterrupted one."""
        period = self._eval_period(eval_every)
        return -(-int(tick) // period) if period else 0

    @staticmethod
    def state_tick(state) -> int:
        """Ticks done by ``state`` (the same for every seed)."""
        ticks = np.asarray(state.tick).reshape(-1)
        if ticks.size == 0 or np.any(ticks != ticks[0]):
            raise ValueError(f"run state with inconsistent tick counters {ticks.tolist()}")
        return int(ticks[0])

    def train(self, seed: Union[int, Sequence[int]] = 0, n_timesteps: int = 1_000_000, *,
              eval_every: Optional[int] = None, eval_episodes: int = 10,
              callback: Optional[Callable[[dict], None]] = None, state=None, history: Optional[dict] = None,
              total_timesteps: Optional[int] = None, max_chunk_seconds: Optional[float] = None,
              checkpoint_dir=None, checkpoint_every: Optional[int] = None, keep_checkpoints: Optional[int] = 2,
              resume: bool = True, should_stop: Optional[Callable[[], bool]] = None,
              progress: Optional[Callable[[dict], None]] = None):
        """Train for ``n_timesteps`` agent steps per seed (several seeds vmapped in one program).

        A run may be done in one call, continued in several (``state``/``history`` of the
        previous call), or resumed from a checkpoint by a new process (``checkpoint_dir``): on
        CPU all three give bit-identical parameters and evaluations, whatever
        ``max_chunk_seconds`` and ``checkpoint_every`` are.

        Args:
          seed: one int or several; several run in one jitted, vmapped program.
          n_timesteps: agent steps per seed for this call, counted from where ``state`` is
            (0 for a new run); rounded up to whole ticks of ``n_envs`` agent steps (keep it a
            multiple of ``n_envs`` when splitting a run into calls). Agent steps are
            transitions (one per environment per tick; env frames = agent steps x action
            repeat), not replay rows: the replay also holds one reset row per episode, so an
            episodic run of short episodes stores more rows than agent steps. When a run is resumed
            from ``checkpoint_dir``, the call runs to ``total_timesteps`` instead.
          total_timesteps: the whole run's length in agent steps: it sizes the replay
            (``min(buffer_size, total_timesteps)``, spec §9) and places the final evaluation.
            None: the end of this call. Give it to every call of a run split into calls.
          eval_every: agent steps between evaluations (also at step 0 and at the end of the
            run); None: no evaluation.
          eval_episodes: episodes per evaluation.
          callback: called on the host after every chunk of the schedule (:meth:`schedule`)
            with a dict of numpy values (``phase``, ``agent_steps``, ``env_frames``,
            ``updates``, the metrics, ``train_return``, ``eval_return`` when the chunk ended
            with an evaluation, wall-clock ``chunk_seconds``, ``wall_time_s``,
            ``agent_steps_per_s``).
          state, history: the state and history returned by a previous call (the state's
            buffers are donated to this call); the returned history extends ``history``.
          max_chunk_seconds: wall-time cap of one call of the compiled program: chunks are
            split on the host into calls sized from the measured seconds per tick, so that
            ``should_stop`` is polled at least that often (a single tick, such as the
            seed-phase burst, and an evaluation cannot be split). Results are unchanged.
          checkpoint_dir: folder of this run's checkpoints (:mod:`tdmpc2core.checkpoint`);
            one run per folder. A checkpoint is written every ``checkpoint_every`` agent
            steps (None: only at the end of the call and when stopped), at the end of the
            call, and when ``should_stop`` stops the run; the newest ``keep_checkpoints`` are
            kept (None: all).
          resume: with ``checkpoint_dir``, continue from its newest complete checkpoint (if
            any) up to ``total_timesteps`` (default ``n_timesteps``): rerunning the same call
            finishes an interrupted run. With ``resume=False`` a folder holding checkpoints
            is an error.
          should_stop: polled on the host after every call of the compiled program; when it
            returns True the run writes a checkpoint (with ``checkpoint_dir``) and raises
            :class:`~tdmpc2core.training.TrainingInterrupted`.
          progress: called after every call of the compiled program with a dict:
            ``phase``, ``agent_steps``, ``start_agent_steps`` and ``end_agent_steps`` of this
            call, ``total_agent_steps``, ``ticks``, ``seconds``, ``agent_steps_per_s``,
            ``last_eval_return`` ([n_seeds] mean return of the latest evaluation, restored
            ones included; None before the first).
        Returns:
          (state, history): the final run state (leading seed axis) and a dict of numpy arrays:
          ``eval_agent_steps`` [n_evals], ``eval_env_frames`` [n_evals], ``eval_returns``
          [n_evals, n_seeds, eval_episodes], ``eval_return`` [n_evals, n_seeds] (mean over
          episodes), ``eval_lengths``, ``chunks`` (list of per-chunk dicts, as given to
          ``callback``) and ``wall_seconds`` (training wall time over all sessions).
        Raises:
          TerminationError: the env terminated (non-episodic agent), at the first chunk
            boundary after it, naming the env and the count.
          NoSampleableEpisodeError: (episodic) after the last chunk, when scheduled updates
            never ran because no episode of at least horizon + 1 rows was ever held (every
            episode terminated too early); names the env, the longest episode and H.
            (Updates wait for such an episode, with a warning, instead of failing at the
            burst: docs/deviations.md R3.)
          FloatingPointError: non-finite observations or rewards from the env.
          TrainingInterrupted: ``should_stop`` returned True.
          tdmpc2core.checkpoint.CheckpointMismatchError: the newest checkpoint of
            ``checkpoint_dir`` was made with other settings (named).
          tdmpc2core.checkpoint.CorruptCheckpointError: checkpoints exist but none is usable.
          ValueError: a state of other seeds, a replay sized for another run length, a call
            past ``total_timesteps``.
        """
        seeds = [int(s) for s in np.atleast_1d(np.asarray(seed))]
        eval_every = int(eval_every) if eval_every else None
        n = self.n_envs
        if checkpoint_every is not None and int(checkpoint_every) < 1:
            raise ValueError(f"checkpoint_every={checkpoint_every!r} must be >= 1 agent steps (or None)")
        if checkpoint_dir is not None and state is None:
            latest = checkpoint.latest_checkpoint(checkpoint_dir)
            if latest is not None and not resume:
                raise ValueError(f"{checkpoint_dir} holds checkpoints of a run (newest {latest.name}); pass "
                                 "resume=True to continue it, or delete them (tdmpc2core.checkpoint.clear)")
            if latest is not None:
                total = int(total_timesteps if total_timesteps is not None else n_timesteps)
                state, history, _ = self.restore(latest, seeds=seeds, total_timesteps=total,
                                                 eval_every=eval_every, eval_episodes=eval_episodes)
                total_timesteps = total
                n_timesteps = max(total - self.state_tick(state) * n, 0)
                _log.info("resumed from %s at %d agent steps", latest, self.state_tick(state) * n)
        if state is None:
            total_timesteps = int(n_timesteps if total_timesteps is None else total_timesteps)
            state = self.init(seeds, total_timesteps)
            start_tick = 0
        else:
            start_tick = self.state_tick(state)
            n_state_seeds = np.asarray(state.tick).shape[0]
            if n_state_seeds != len(seeds):
                raise ValueError(f"the state holds {n_state_seeds} seed(s), seed={seeds} names {len(seeds)}")
            if total_timesteps is None:
                total_timesteps = start_tick * n + int(n_timesteps)
            else:
                if self.episodic:  # a ring of 2 C rows (replay.EpisodicReplay)
                    unit = "rows"
                    want = 2 * rp.capacity_steps(self.cfg.buffer_size, int(total_timesteps), self.episode_length)
                else:
                    unit = "episode slots"
                    want = rp.capacity_episodes(self.cfg.buffer_size, int(total_timesteps), self.episode_length) + n
                have = int(state.replay.obs.shape[1])
                if want != have:
                    raise ValueError(
                        f"the state's replay has {have} {unit}, a run of total_timesteps={total_timesteps} "
                        f"needs {want}; pass the total_timesteps the run was started with")
        plan_, eval_at_start = self.schedule(n_timesteps, eval_every, start_tick=start_tick,
                                             total_timesteps=total_timesteps)
        end_tick = start_tick + -(-int(n_timesteps) // n)
        total_steps = -(-int(total_timesteps) // n) * n
        hist = working_history(history)
        wall_before = hist["wall_seconds"]
        t_start = time.perf_counter()
        sizer = SubChunkSizer(max_chunk_seconds)
        chunk_fn = self._chunk()
        last_saved, saved = [start_tick], [None]  # tick of the last checkpoint written, and its info

        def wall():
            return wall_before + time.perf_counter() - t_start

        def do_eval(tick):
            agent_steps = tick * n
            rets, lens = self.evaluate(state, eval_episodes, eval_index=self.eval_index(tick, eval_every),
                                       seeds=seeds)
            hist["eval_agent_steps"].append(agent_steps)
            hist["eval_env_frames"].append(agent_steps * self.action_repeat)
            hist["eval_returns"].append(rets)
            hist["eval_lengths"].append(lens)
            return rets

        def save(tick):
            hist["wall_seconds"] = wall()
            info = self.save_checkpoint(checkpoint_dir, state, hist, seeds=seeds, total_timesteps=total_timesteps,
                                        eval_every=eval_every, eval_episodes=eval_episodes, keep=keep_checkpoints)
            last_saved[0], saved[0] = tick, info
            return info

        def checkpoint_due(tick):
            return (checkpoint_dir is not None and checkpoint_every is not None
                    and (tick * n) // int(checkpoint_every) > (last_saved[0] * n) // int(checkpoint_every))

        def stop_if_asked(tick):
            if should_stop is not None and should_stop():
                info = None
                if checkpoint_dir is not None:
                    info = saved[0] if last_saved[0] == tick and saved[0] is not None else save(tick)
                hist["wall_seconds"] = wall()
                raise TrainingInterrupted(state, finalize_history(hist, len(seeds), eval_episodes), tick * n, info)

        warned_waiting = [False]
        if eval_at_start:
            do_eval(0)
        for phase, a, n_ticks, evaluate_after in plan_:
            b = a + n_ticks
            tick, seconds = a, 0.0
            while tick < b:
                stop_at = b
                if checkpoint_dir is not None and checkpoint_every is not None:
                    next_ckpt = -(-((tick * n) // int(checkpoint_every) + 1) * int(checkpoint_every) // n)
                    stop_at = min(b, next_ckpt)
                k = sizer.ticks(phase, stop_at - tick)
                t0 = time.perf_counter()
                state = chunk_fn(state, jnp.int32(tick), jnp.int32(k))
                jax.block_until_ready(state)
                dt = time.perf_counter() - t0
                sizer.record(phase, k, dt)
                seconds += dt
                tick += k
                self._check_run(state, tick * n)
                if progress is not None:
                    progress({"phase": phase, "agent_steps": tick * n, "start_agent_steps": start_tick * n,
                              "end_agent_steps": end_tick * n, "total_agent_steps": total_steps,
                              "ticks": k, "seconds": dt, "agent_steps_per_s": k * n / max(dt, 1e-9),
                              "last_eval_return": (np.mean(hist["eval_returns"][-1], axis=-1)
                                                   if hist["eval_returns"] else None)})
                if tick < b:  # a boundary inside a chunk of the schedule
                    if checkpoint_due(tick):
                        save(tick)
                    stop_if_asked(tick)
            agent_steps = b * n
            rec = {"phase": phase, "agent_steps": agent_steps, "env_frames": agent_steps * self.action_repeat,
                   "updates": np.asarray(state.agent.updates), "chunk_seconds": seconds,
                   "wall_time_s": wall(),
                   "agent_steps_per_s": (b - a) * n / max(seconds, 1e-9)}
            for k_ in online.metric_keys(self.cfg):
                rec[k_] = np.asarray(state.metrics[k_])
            if self.episodic:
                rec["pending_updates"] = np.asarray(state.pending_updates)
                if phase != "seed" and rec["pending_updates"].max() > 0 and not warned_waiting[0]:
                    warned_waiting[0] = True
                    warnings.warn(self._waiting_message(state, agent_steps, seeds), RuntimeWarning, stacklevel=2)
            cnt = np.asarray(state.finished_count)
            rec["train_return"] = np.where(cnt > 0, np.asarray(state.finished_return_sum, np.float64)
                                           / np.maximum(cnt, 1), np.nan)
            state = state._replace(finished_return_sum=jnp.zeros_like(state.finished_return_sum),
                                   finished_count=jnp.zeros_like(state.finished_count))
            if evaluate_after:
                rec["eval_returns"] = do_eval(b)
                rec["eval_return"] = rec["eval_returns"].mean(axis=1)
                rec["eval_position"] = len(hist["eval_agent_steps"]) - 1
            hist["chunks"].append(rec)
            if callback is not None:
                callback(rec)
            if checkpoint_dir is not None and (b == end_tick or checkpoint_due(b)):
                save(b)
            if b < end_tick:
                stop_if_asked(b)
        if checkpoint_dir is not None and not plan_ and last_saved[0] != end_tick:
            save(end_tick)  # nothing to run (a finished run resumed): make sure the end is saved
        hist["wall_seconds"] = wall()
        history = finalize_history(hist, len(seeds), eval_episodes)
        if self.episodic and int(np.max(np.asarray(state.pending_updates))) > 0:
            raise NoSampleableEpisodeError(self._waiting_message(state, end_tick * n, seeds, final=True),
                                           state=state, history=history)
        return state, history

    # ---- checkpoints -------------------------------------------------------------
    def checkpoint_settings(self, seeds, total_timesteps: int, eval_every: Optional[int], eval_episodes: int) -> dict:
        """Everything that changes a checkpoint's shapes or numbers: the agent class, its
        resolved configuration (:attr:`config`), the env params, and the run's seeds,
        length and evaluation protocol. Not included (they change neither): chunk sizes,
        ``max_chunk_seconds``, the checkpoint cadence and count, callbacks."""
        return {
            "agent_class": type(self).__name__,
            "agent": self.config,
            "env_params": self.env._token,
            "run": {"seeds": [int(s) for s in seeds], "total_timesteps": int(total_timesteps),
                    "eval_every": int(eval_every) if eval_every else None,
                    "eval_episodes": int(eval_episodes) if eval_every else None},
        }

    def save_checkpoint(self, directory, state, history: Optional[dict], *, seeds, total_timesteps: int,
                        eval_every: Optional[int] = None, eval_episodes: int = 10, keep: Optional[int] = None):
        """Write ``state`` and ``history`` as checkpoint ``step_{agent steps}`` of ``directory``.

        The full training state: parameters, target Qs, both Adam states, the running scale,
        the replay, environment states, observations, the planner's warm start, PRNG keys,
        counters (``tick``, updates), the last metrics; and, as host arrays, the evaluation
        history and per-chunk records (:func:`tdmpc2core.training.history_to_arrays`).
        Returns the :class:`tdmpc2core.checkpoint.CheckpointInfo` (path, bytes, seconds).
        """
        import jax as _jax

        tick = self.state_tick(state)
        hist = new_history() if history is None else history  # working (lists) or returned (arrays) form
        host = history_to_arrays(hist, len(list(seeds)), eval_episodes)
        meta = {"agent_steps": tick * self.n_envs, "env_frames": tick * self.n_envs * self.action_repeat,
                "tick": tick, "evaluations": len(hist["eval_agent_steps"]), "wall_seconds": hist["wall_seconds"],
                "tdmpc2core_version": _version(), "jax_version": _jax.__version__, "backend": _jax.default_backend()}
        info = checkpoint.save(directory, tick * self.n_envs, {"state": state},
                               settings=self.checkpoint_settings(seeds, total_timesteps, eval_every, eval_episodes),
                               host=host, meta=meta, keep=keep)
        _log.info("checkpoint %s written: %d agent steps, %.1f MB, %.2f s", info.path, tick * self.n_envs,
                  info.bytes / 1e6, info.seconds)
        return info

    def restore(self, path, *, seeds=None, total_timesteps: Optional[int] = None, eval_every=_UNSET,
                eval_episodes: Optional[int] = None):
        """Read checkpoint ``path`` (a ``step_*`` folder) into this agent's state.

        The run settings given (``seeds``, ``total_timesteps``, ``eval_every``,
        ``eval_episodes``) are compared with the checkpoint's; those not given are taken from
        it. The agent's own settings (:meth:`checkpoint_settings`) are always compared.
        Returns (state, history, manifest): the state as ``train`` returns it (leading seed
        axis), the history up to the checkpoint, and the manifest (``settings``, ``meta``,
        sizes).
        Raises:
          FileNotFoundError: no such checkpoint.
          tdmpc2core.checkpoint.CorruptCheckpointError: incomplete or damaged.
          tdmpc2core.checkpoint.CheckpointMismatchError: made with other settings (each
            differing setting named with both values) or of another state layout.
        """
        manifest = checkpoint.read_manifest(path)
        run = manifest.get("settings", {}).get("run", {})
        seeds = run.get("seeds") if seeds is None else [int(s) for s in np.atleast_1d(np.asarray(seeds))]
        total_timesteps = run.get("total_timesteps") if total_timesteps is None else int(total_timesteps)
        eval_every = run.get("eval_every") if eval_every is _UNSET else eval_every
        if eval_episodes is None:
            eval_episodes = run.get("eval_episodes") or 10
        if seeds is None or total_timesteps is None:
            raise checkpoint.CorruptCheckpointError(f"checkpoint {path}: its manifest has no run settings")
        settings = self.checkpoint_settings(seeds, total_timesteps, eval_every, eval_episodes)
        diffs = checkpoint.compare_settings(manifest.get("settings", {}), settings)
        if diffs:  # before building the template: a mismatch is reported at once
            raise checkpoint.CheckpointMismatchError(
                f"checkpoint {path} was made with other settings than this run's (" + "; ".join(diffs) + ")")
        template = {"state": jax.eval_shape(lambda: self.init(seeds, total_timesteps))}
        tree, host, manifest = checkpoint.restore(path, template, settings=settings)
        state = jax.tree_util.tree_map(jnp.asarray, tree["state"])
        return state, history_from_arrays(host), manifest

    def _waiting_message(self, state, agent_steps, seeds, final=False):
        H = self.cfg.horizon
        pending = np.asarray(state.pending_updates)
        longest = np.asarray(state.replay.longest)
        which = [s for s, p in zip(seeds, pending) if p > 0]
        longest_txt = ", ".join(f"seed {s}: {int(l)}" for s, l, p in zip(seeds, longest, pending) if p > 0)
        head = (f"{self.env_id}: by agent step {agent_steps} the replay held no episode of at least "
                f"horizon + 1 = {H + 1} rows (at least H = {H} agent steps, plus its reset row) for seed(s) {which}; "
                f"longest complete episode (agent steps): {longest_txt}. TD-MPC2 trains on slices of "
                f"H + 1 rows inside one episode (spec §9), so ")
        if final:
            return (head + f"{int(pending.max())} scheduled update(s) never ran. Every episode ended "
                    "too early (or none ended): use a shorter horizon, more agent steps or a longer "
                    "seed phase, or check why the task terminates so soon.")
        return head + (f"{int(pending.max())} scheduled update(s) are waiting and will run at the first "
                       "tick that has such an episode (docs/deviations.md R3).")

    def _check_run(self, state, agent_steps):
        term = int(np.max(np.asarray(state.terminations)))
        if term > 0 and not self.cfg.episodic:
            raise TerminationError(
                f"{self.env_id}: the environment terminated {term} time(s) by agent step {agent_steps}; "
                "the paper-era TD-MPC2 bootstraps through every episode end, so it refuses terminating "
                "tasks. Use a non-terminating task (e.g. the DMC suite) or the episodic mode (TDMPC2(..., "
                "episodic=True); in the pipeline, agent: {episodic: true}).")
        bad = int(np.max(np.asarray(state.nonfinite)))
        if bad > 0:
            raise FloatingPointError(
                f"{self.env_id}: {bad} non-finite observation(s) or reward(s) by agent step {agent_steps} "
                "(NaN physics); check the env, its action bounds and its backend.")
