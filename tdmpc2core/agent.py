"""``TDMPC2``: single-task online TD-MPC2, the paper-era agent (official commit 5f6fade).

Example::

    from tdmpc2core import TDMPC2
    agent = TDMPC2("Pendulum-v1", model_size=1, num_samples=64, num_elites=8,
                   num_pi_trajs=4, iterations=2)
    state, history = agent.train(seed=[0, 1], n_timesteps=4000, eval_every=1000)
    print(agent.gamma, history["eval_return"])   # 0.975, [n_evals, n_seeds]
"""
from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Callable, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from . import online
from .config import TDMPC2Config, resolve_config
from .envs import Env, make_env
from .planner import act_with_policy, plan
from .update import init_agent_state
from .world_model import WorldModel


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
        self.cfg = resolve_config(user_cfg, episode_length=self.episode_length, action_dim=self.spec.action_dim)
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

    def schedule(self, n_timesteps: int, eval_every: Optional[int]):
        """Host plan of the run: a list of (phase, start_tick, n_ticks, evaluate_after)."""
        n = self.n_envs
        total_ticks = -(-int(n_timesteps) // n)
        burst_tick = -(-self.seed_steps // n)  # first tick with agent_steps >= seed_steps
        cuts = {0, total_ticks}
        if eval_every:
            cuts |= {i for i in range(0, total_ticks + 1) if (i * n) % eval_every == 0}
        if burst_tick < total_ticks:
            cuts |= {burst_tick, burst_tick + 1}
        cuts = sorted(c for c in cuts if 0 <= c <= total_ticks)
        evals = set()
        if eval_every:
            evals = {i for i in cuts if (i * n) % eval_every == 0 or i == total_ticks}
        plan_ = []
        for a, b in zip(cuts[:-1], cuts[1:]):
            phase = "seed" if b <= burst_tick else ("burst" if a == burst_tick else "train")
            plan_.append((phase, a, b - a, b in evals))
        return plan_, (0 in evals)

    def train(self, seed: Union[int, Sequence[int]] = 0, n_timesteps: int = 1_000_000, *,
              eval_every: Optional[int] = None, eval_episodes: int = 10,
              callback: Optional[Callable[[dict], None]] = None, state=None, seeds_for_keys=None):
        """Train for ``n_timesteps`` agent steps per seed (several seeds vmapped in one program).

        Args:
          seed: one int or several; several run in one jitted, vmapped program.
          n_timesteps: agent steps per seed (transitions, one per environment per tick; env
            frames = agent steps x action repeat). Not replay rows: the replay also holds one
            reset row per episode, so an episodic run of short episodes stores more rows.
          eval_every: agent steps between evaluations (also at step 0 and at the end);
            None: no evaluation.
          eval_episodes: episodes per evaluation.
          callback: called on the host after every chunk with a dict of numpy values
            (``agent_steps``, ``env_frames``, ``updates``, the metrics, ``eval_return`` when
            the chunk ended with an evaluation, ...).
        Returns:
          (state, history): the final run state (leading seed axis) and a dict of numpy arrays:
          ``eval_agent_steps`` [n_evals], ``eval_env_frames`` [n_evals], ``eval_returns``
          [n_evals, n_seeds, eval_episodes], ``eval_return`` [n_evals, n_seeds] (mean over
          episodes), ``eval_lengths``, and ``chunks`` (list of per-chunk dicts).
        Raises:
          TerminationError: the env terminated (non-episodic agent), at the first chunk
            boundary after it, naming the env and the count.
          NoSampleableEpisodeError: (episodic) after the last chunk, when scheduled updates
            never ran because no episode of at least horizon + 1 rows was ever held (every
            episode terminated too early); names the env, the longest episode and H.
            (Updates wait for such an episode, with a warning, instead of failing at the
            burst: docs/deviations.md R3.)
          FloatingPointError: non-finite observations or rewards from the env.
        """
        seeds = [int(s) for s in np.atleast_1d(np.asarray(seed))]
        if state is None:
            state = self.init(seeds, n_timesteps)
        plan_, eval_at_start = self.schedule(n_timesteps, eval_every)
        history = {"eval_agent_steps": [], "eval_env_frames": [], "eval_returns": [], "eval_lengths": [],
                   "chunks": []}

        def do_eval(agent_steps):
            idx = len(history["eval_agent_steps"])
            rets, lens = self.evaluate(state, eval_episodes, eval_index=idx, seeds=seeds)
            history["eval_agent_steps"].append(agent_steps)
            history["eval_env_frames"].append(agent_steps * self.action_repeat)
            history["eval_returns"].append(rets)
            history["eval_lengths"].append(lens)
            return rets

        warned_waiting = False
        t_start = time.perf_counter()
        if eval_at_start:
            do_eval(0)
        for phase, start, n_ticks, evaluate_after in plan_:
            t0 = time.perf_counter()
            state = self._chunk()(state, jnp.int32(start), jnp.int32(n_ticks))
            jax.block_until_ready(state)
            dt = time.perf_counter() - t0
            agent_steps = (start + n_ticks) * self.n_envs
            self._check_run(state, agent_steps)
            rec = {"phase": phase, "agent_steps": agent_steps, "env_frames": agent_steps * self.action_repeat,
                   "updates": np.asarray(state.agent.updates), "chunk_seconds": dt,
                   "wall_time_s": time.perf_counter() - t_start,
                   "agent_steps_per_s": n_ticks * self.n_envs / max(dt, 1e-9)}
            for k in online.metric_keys(self.cfg):
                rec[k] = np.asarray(state.metrics[k])
            if self.episodic:
                rec["pending_updates"] = np.asarray(state.pending_updates)
                if phase != "seed" and rec["pending_updates"].max() > 0 and not warned_waiting:
                    warned_waiting = True
                    warnings.warn(self._waiting_message(state, agent_steps, seeds), RuntimeWarning, stacklevel=2)
            cnt = np.asarray(state.finished_count)
            rec["train_return"] = np.where(cnt > 0, np.asarray(state.finished_return_sum) / np.maximum(cnt, 1), np.nan)
            state = state._replace(finished_return_sum=jnp.zeros_like(state.finished_return_sum),
                                   finished_count=jnp.zeros_like(state.finished_count))
            if evaluate_after:
                rec["eval_returns"] = do_eval(agent_steps)
                rec["eval_return"] = rec["eval_returns"].mean(axis=1)
            history["chunks"].append(rec)
            if callback is not None:
                callback(rec)
        history = {k: (np.asarray(v) if k != "chunks" else v) for k, v in history.items()}
        if len(history["eval_returns"]):
            history["eval_return"] = history["eval_returns"].mean(axis=-1)
        if self.episodic and int(np.max(np.asarray(state.pending_updates))) > 0:
            raise NoSampleableEpisodeError(self._waiting_message(state, int(n_timesteps), seeds, final=True),
                                           state=state, history=history)
        return state, history

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
                "tasks. Use a non-terminating task (e.g. the DMC suite) or the episodic mode.")
        bad = int(np.max(np.asarray(state.nonfinite)))
        if bad > 0:
            raise FloatingPointError(
                f"{self.env_id}: {bad} non-finite observation(s) or reward(s) by agent step {agent_steps} "
                "(NaN physics); check the env, its action bounds and its backend.")
