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

from typing import Callable, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from ..envs import Env, make_env
from ..envs.registry import check_obs
from ..model.config import TDMPC2Config, burst_tick, config_record, resolve_config
from ..model.planner import act_with_policy, plan
from ..model.world_model import WorldModel
from ..run import driver
from ..run.compiled import per_seed
from ..run.devices import SeedSharding
from ..run.driver import Run, RunOptions
from . import online
from ..extensions import make_extension_set
from .common import UpdateHook, check_hyperparameters, eval_key, init_one, success_dict
from .online_program import NoSampleableEpisodeError, OnlineProgram, TerminationError, state_tick  # noqa: F401


class TDMPC2:
    """Single-task online TD-MPC2 (spec §1-§9) on gymnax, Brax, MuJoCo Playground or dm_control.

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
      env_id: gymnax id (``Pendulum-v1``), Brax name (``inverted_pendulum``), Playground DM
        Control name (``CartpoleBalance``) or dm_control task (``dmc:cheetah-run``, the paper's
        own simulator, stepped on the host inside the compiled program); see
        :func:`tdmpc2core.envs.list_env_ids`. Or a
        prebuilt :class:`tdmpc2core.envs.Env` (a custom task; its spec fixes T and the action
        repeat, and the other env arguments are ignored).
      n_envs: environments in lockstep; the planner plans for each, and each tick runs
        ``n_envs`` updates (``updates_per_step`` scales it; the reference uses 1;
        docs/deviations.md O2).
      episode_length: simulator steps per episode (Brax, Playground, dm_control; None, the
        default: 1000); T = episode_length / action_repeat agent steps. A suite that keeps its
        own time limit (gymnax's ``max_steps_in_episode``, Meta-World's 200, MyoSuite's 100
        simulator steps) takes None or that limit; another value is refused (ValueError naming
        the limit: it would not take effect; :func:`tdmpc2core.envs.make_env`).
      action_repeat: simulator steps per agent step (rewards summed); None (default): the
        paper's for the suite, 2 for DM Control tasks (so the default 1000-step episode is
        T = 500 agent steps, spec §2) and 1 for gymnax and Brax (docs/deviations.md E9).
      env_params: the environment's settings (None: the suite's defaults;
        :mod:`tdmpc2core.envs.params`): gymnax ``EnvParams`` fields (or an ``EnvParams``),
        Brax constructor kwargs, Playground config overrides (``{"ctrl_dt": 0.02}``);
        dm_control takes none. Recorded in :attr:`config` (``env_params``) when set.
      backend: Playground physics implementation (None: ``"jax"``, MJX).
      max_nonfinite: episodes a seed may drop for a non-finite observation or reward (NaN
        physics) before the run stops with ``FloatingPointError`` (docs/deviations.md O8).
        Each dropped episode is reported (env index, agent step) at the next boundary between
        calls of the compiled program; its rows never reach the replay or a loss. Not part of
        a checkpoint's settings (raise it and resume).
      post_update: an optional :class:`~tdmpc2core.agents.common.UpdateHook` folded after
        every gradient update inside the compiled program (its value carried in the run
        state's ``ext``); None (default): the program without hooks. It never changes a number
        of the training. (The older form of an extension with one post_update phase.)
      extensions: extension objects (:mod:`tdmpc2core.extensions`), each with some of the
        phases ``init_state`` (its state, per seed, in the run state's ``ext`` and in
        checkpoints), ``pretrain`` (once, at the start of a fresh run), ``post_update``
        (after every update inside the compiled program, ``step`` = agent steps done) and
        ``eval_metrics`` (at every evaluation, on the evaluation's episodes; in the history as
        ``ext/<extension>/<metric>`` [n_evals, n_seeds]). () (default): the programs without
        extensions. An unknown phase raises :class:`~tdmpc2core.extensions.UnknownPhaseError`.
      devices: where the seeds run (:class:`tdmpc2core.run.devices.SeedSharding`): None
        (default: every visible device of this process when the number of seeds divides
        evenly over them, else one), a device count, ``"all"``, a list of ``jax.Device`` or a
        ``jax.sharding.Mesh``. With more than one device the seed axis is split over them
        (``jax.shard_map``, no communication); each seed's numbers are the one-device run's
        (tests/test_devices.py). A suite stepped on the host (dm_control, Meta-World,
        MyoSuite) runs on one device: more than one raises ValueError.
      **hyperparameters: any field of :class:`~tdmpc2core.model.config.TDMPC2Config` (the official
        config.yaml names; ``lr`` is ``learning_rate``), each at its paper default. The
        ``model_size`` preset {1, 5, 19, 48, 317} fills enc_dim, mlp_dim, latent_dim,
        num_enc_layers and num_q left as None; explicit widths override it. The optimizer's
        (spec §5.3; :func:`tdmpc2core.model.update.make_optimizers`):

        * ``learning_rate`` (default 3e-4): a float, a schedule ``Callable[[int], float]`` of
          the update count (0 at the first update; the Adam state's count, so a resumed run
          continues it), or a named optax schedule ``{"kind": "constant" | "linear" | "cosine" |
          "warmup_cosine", ...}`` (:func:`~tdmpc2core.model.config.learning_rate_schedule`). The
          encoder trains at ``learning_rate * enc_lr_scale`` (0.3), the schedule's value scaled.
          Recorded in :attr:`config` as the float, the schedule's mapping or the callable's
          ``{"kind": "callable", "name": ...}``.
        * ``weight_decay`` (default 0): decoupled weight decay of the world model's and the
          policy's Adam (optax.adamw, on every parameter); not a config.yaml hyperparameter,
          0 keeps the reference's plain Adam (docs/deviations.md O9).
        * ``updates_per_step`` (default 1): updates per agent step after the seed-phase burst,
          ``max(1, round(n_envs * updates_per_step))`` per tick (Python's round, halves to
          even; episodic mode too, where every env steps at every tick); the burst stays
          ``seed_steps`` updates. Not a config.yaml hyperparameter: 1 is the reference's UTD
          (docs/deviations.md O10).

    Pixels: ``obs="rgb"`` (a :class:`~tdmpc2core.model.config.TDMPC2Config` field, default
    ``"state"``) trains from 64x64 RGB renders of a dm_control task (spec §2 "Pixels", §3.2):
    observations are u8[9 * 64 * 64] stacks of the last 3 frames
    (:class:`tdmpc2core.envs.dmcontrol_env.DMControlEnv`), encoded by the conv encoder with
    its ShiftAug (``latent_dim`` must be ``num_channels * 16``, 512 by default); the replay
    keeps one frame per row (docs/deviations.md R4). Refused (ValueError): another suite, a
    prebuilt env whose observations are not the ``obs`` asked for, ``episodic=True``
    (docs/deviations.md F3). :attr:`pixels` says which.

    Derived (spec §1.3): ``gamma`` = clip((T/5 - 1)/(T/5), 0.95, 0.995), ``seed_steps`` =
    max(1000, 5 T) agent steps, planner ``iterations`` + 2 when the action dim is >= 20.

    Units: ``n_timesteps``, ``seed_steps``, ``eval_every`` and every ``agent_steps`` count
    agent steps (transitions: one per environment per tick), never replay rows (the replay
    also stores one reset row per episode). ``buffer_size`` counts agent steps too (the
    reset rows are held on top; docs/deviations.md R1): a run no longer than
    ``buffer_size`` evicts no episode, in either mode.

    Raises:
      ValueError: unknown env id, discrete actions, an episode shorter than horizon + 1
        (non-episodic), seed_steps shorter than the first episode (non-episodic); a
        learning_rate, schedule, weight_decay or updates_per_step outside what is accepted
        (:func:`~tdmpc2core.model.config.check_optimizer_fields`, one line naming the key).
      TypeError: an unknown hyperparameter name.
    """

    def __init__(self, env_id: str, n_envs: int = 1, model_size: int = 5, *,
                 episode_length: Optional[int] = None, action_repeat: Optional[int] = None, env_params=None,
                 backend: Optional[str] = None, max_nonfinite: int = 10, post_update: Optional[UpdateHook] = None,
                 extensions: Sequence = (), devices=None, **hyperparameters):
        check_hyperparameters("TDMPC2", hyperparameters, TDMPC2Config)
        from ..run.devices import device_list

        device_list(devices)  # a bad value raises before the env is built
        #: the ``devices`` argument as given (:func:`tdmpc2core.run.devices.device_list`)
        self.devices = devices
        self.post_update = post_update
        #: the extensions composed (:class:`tdmpc2core.extensions.ExtensionSet`), None without
        self.extensions = make_extension_set(extensions, post_update)
        if int(n_envs) < 1:
            raise ValueError(f"n_envs={n_envs!r} must be >= 1")
        if int(max_nonfinite) < 0:
            raise ValueError(f"max_nonfinite={max_nonfinite!r} must be >= 0")
        self.max_nonfinite = int(max_nonfinite)
        self.n_envs = int(n_envs)
        obs = check_obs(hyperparameters.get("obs", "state"))
        #: an env object given by the caller (its code is not the library's)
        self._prebuilt_env = isinstance(env_id, Env)
        if isinstance(env_id, Env):  # a prebuilt environment (e.g. a custom task)
            self.env = env_id
            self.env_id = env_id.spec.env_id
            env_obs = "rgb" if getattr(env_id.spec, "obs_dtype", "float32") == "uint8" else "state"
            if env_obs != obs:
                raise ValueError(f"TDMPC2: the prebuilt env {self.env_id!r} gives {env_obs!r} observations "
                                 f"(obs_dtype {env_id.spec.obs_dtype!r}) but obs={obs!r}; pass obs={env_obs!r}")
        else:
            self.env_id = env_id
            self.env = make_env(env_id, action_repeat=action_repeat, episode_length=episode_length,
                                env_params=env_params, backend=backend, obs=obs)
        self.spec = self.env.spec
        #: whether the agent observes pixels (``obs="rgb"``: u8 frame stacks, spec §2 "Pixels")
        self.pixels = obs == "rgb"
        #: where the seeds run (:class:`~tdmpc2core.run.devices.SeedSharding`)
        self.placement = SeedSharding(devices, host_stepped=bool(getattr(self.env, "steps_on_host", False)))
        self.episode_length = int(self.spec.episode_length)  # T, agent steps
        self.action_repeat = int(self.spec.action_repeat)
        user_cfg = TDMPC2Config(model_size=model_size, **hyperparameters)
        # n_envs: the first update is checked too (seed_steps, batch_size; the workflow runs the same check)
        self.cfg = resolve_config(user_cfg, episode_length=self.episode_length, action_dim=self.spec.action_dim,
                                  n_envs=self.n_envs, backend=jax.default_backend())
        self.gamma = float(self.cfg.gamma)
        self.seed_steps = int(self.cfg.seed_steps)
        self.episodic = bool(self.cfg.episodic)
        # episodic mode: episodes may end before T, and updates wait for a sampleable episode
        # (docs/deviations.md R3), so no static check applies there
        if not self.episodic and burst_tick(self.seed_steps, self.n_envs) < self.episode_length:
            # the burst of updates at seed_steps needs a complete episode in the replay
            raise ValueError(
                f"seed_steps={self.seed_steps} is too small: with n_envs={self.n_envs} the first episode "
                f"(T={self.episode_length} agent steps) ends at tick {self.episode_length}, after the "
                f"seed-phase burst of updates; use seed_steps >= {self.episode_length * self.n_envs} "
                f"(default: max(1000, 5 T) = {max(1000, 5 * self.episode_length)})")
        if self.pixels and self.episodic:
            raise ValueError("TDMPC2: obs='rgb' with episodic=True is not supported (the episodic replay has no "
                             "frame layout, and the official pixel runs are DMC tasks, which never terminate); use "
                             "episodic=False for pixels")
        self.wm = WorldModel(self.cfg, self.spec.obs_dim, self.spec.action_dim, obs_shape=self.spec.obs_shape)
        self._chunk_fns: dict = {}
        self._eval_fns: dict = {}
        #: seconds spent tracing, lowering and compiling each program in this process
        #: ({"init" | "chunk" | "eval": {"trace_lower_s", "compile_s", "calls_compiled"}})
        self.compile_seconds: dict = {}
        #: the same for :meth:`record_episode`'s program (``{"record": {...}}``), kept apart:
        #: recording a video changes nothing of a run's record
        self.record_seconds: dict = {}

    # hashing by identity: jitted closures capture ``self``
    def __hash__(self):
        return id(self)

    @property
    def config(self) -> dict:
        """The resolved hyperparameters and env settings, JSON-serialisable. ``env_params`` (the
        env's settings as plain data, :attr:`tdmpc2core.envs.Env.env_params`) is a key only when
        the env was built with settings other than its defaults, so a default agent's config,
        and with it the run ids and checkpoint settings of runs made before it was recorded, is
        unchanged; so are ``weight_decay`` and ``updates_per_step``, and ``learning_rate`` is a
        float, a named schedule's mapping or a callable's name
        (:func:`~tdmpc2core.model.config.config_record`)."""
        d = config_record(self.cfg)
        d.update(env_id=self.env_id, n_envs=self.n_envs, episode_length_agent_steps=self.episode_length,
                 action_repeat=self.action_repeat, obs_dim=self.spec.obs_dim, action_dim=self.spec.action_dim,
                 suite=self.spec.suite, physics_backend=self.spec.backend,
                 action_low=list(self.spec.action_low), action_high=list(self.spec.action_high))
        env_params = self.env.env_params
        if env_params:
            d["env_params"] = env_params
        return d

    def program_fingerprint(self, program: str, **settings) -> Optional[dict]:
        """What this agent's compiled ``program`` (``"init"``, ``"chunk"``, ``"eval"``) closes
        over, as JSON, for keeping it across processes (:mod:`tdmpc2core.run.program_cache`):
        the resolved configuration (:attr:`config` and the config object's repr), the agent's
        plain attributes (``gamma``, ``seed_steps``, ``max_nonfinite``..., also when set after
        construction), its and its env's classes and the program's own ``settings``. None when
        user code reaches the program (extensions, a ``post_update`` hook, a callable
        hyperparameter such as a learning-rate schedule, a prebuilt env, a subclass of the agent
        or an env or model class defined outside ``tdmpc2core``) or the env is stepped on the
        host (a callback ``jax.export`` cannot store): traced in every process then. Not seen:
        library functions replaced in memory (monkeypatching); unset the cache to do that."""
        if self.extensions is not None or self.post_update is not None or self._prebuilt_env:
            return None
        if getattr(self.env, "steps_on_host", False):
            return None
        if any(callable(getattr(self.cfg, f.name)) for f in dataclasses.fields(self.cfg)):
            return None
        for obj in (self, self.env, self.wm):  # a subclass (or env, model) outside the library: user code
            if not type(obj).__module__.startswith("tdmpc2core."):
                return None
        # the instance's own plain attributes (gamma, seed_steps, ...: set after construction too)
        # and the resolved configuration in full
        plain = {k: v for k, v in sorted(vars(self).items())
                 if isinstance(v, (bool, int, float, str, type(None))) and not k.startswith("__")}
        return {"agent": f"{type(self).__module__}.{type(self).__qualname__}", "program": program,
                "config": self.config, "cfg": repr(self.cfg), "attributes": plain,
                "env": f"{type(self.env).__module__}.{type(self.env).__qualname__}", **settings}

    # ---- state -----------------------------------------------------------------
    def init(self, seed: Union[int, Sequence[int]], run_agent_steps: int):
        """Initial run states, stacked over seeds on axis 0: the parameters and the run's key
        from ``PRNGKey(seed)``, the extensions' states and their pretrain phases (in the same
        compiled program)."""
        seeds = np.atleast_1d(np.asarray(seed, dtype=np.int64))
        keys = jnp.stack([jax.random.PRNGKey(int(s)) for s in seeds])

        fn = self._chunk_fns.get(("init", run_agent_steps))
        if fn is None:
            exts = self.extensions

            def one(key):
                agent_state, k_run = init_one(self.wm, key)
                rs = online.init_run_state(self, agent_state, k_run, run_agent_steps)
                if exts is not None and exts.has("pretrain"):
                    st, ext = exts.pretrain(rs.agent, rs.ext, key)
                    rs = rs._replace(agent=st, ext=ext)
                return rs

            fn = self._chunk_fns[("init", run_agent_steps)] = per_seed(
                one, name="init", compile_seconds=self.compile_seconds, devices=self.placement,
                fingerprint=self.program_fingerprint("init", run_agent_steps=int(run_agent_steps)))
        state = fn(keys)
        self.env.raise_host_error("while the initial states were made")  # a host simulator's reset
        return state

    # ---- acting ----------------------------------------------------------------
    def act(self, params, obs, t0, eval_mode: bool, key, prev_mean=None):
        """One action for one observation (spec §6-7).

        Args:
          params: the agent's parameters of one seed (``state.agent.params`` sliced).
          obs: [obs_dim] (f32; u8 frame stacks with pixels); t0: first step of the episode;
            eval_mode: no exploration noise;
          key: a PRNG key; prev_mean: [H, A] warm start returned by the previous call.
        Returns:
          (action [A] in [-1, 1] (the env adapter maps it to the env's bounds), mean [H, A]).
        """
        if prev_mean is None:
            prev_mean = jnp.zeros((self.cfg.horizon, self.spec.action_dim), jnp.float32)
        if not self.cfg.mpc:
            return act_with_policy(self.wm, params, obs, eval_mode, key), prev_mean
        return plan(self.wm, params, jnp.asarray(obs, self.spec.obs_dtype), prev_mean, jnp.asarray(t0), bool(eval_mode),
                    self.gamma, key)

    # ---- evaluation ------------------------------------------------------------
    def evaluate(self, state, num_episodes: int = 10, eval_index: int = 0, seeds=None):
        """Evaluate every seed: ``num_episodes`` episodes of the planner in eval mode from fresh
        initial states (keys from the seed and ``eval_index``: the same states when a seed is
        rerun). Returns (returns, lengths), numpy [n_seeds, num_episodes]; the success flags of
        an env that has them: :meth:`evaluate_all`."""
        ret, length, _, _ = self.evaluate_all(state, num_episodes, eval_index, seeds)
        return ret, length

    def evaluate_all(self, state, num_episodes: int = 10, eval_index: int = 0, seeds=None):
        """:meth:`evaluate` with the success flags and the extensions' eval_metrics of the same
        episodes: (returns, lengths, success, ext). ``success``: ``{}`` for an env without a
        success flag (``env.spec.has_success`` False), else ``{"success": bool [n_seeds,
        num_episodes] (the flag at the episode's last step, the official rule), "success_any":
        the same shape (at any step)}``; ``ext``: {``ext/<extension>/<metric>``: numpy float64
        [n_seeds]} ({} without extensions that have eval_metrics; one compiled program either
        way)."""
        fn, args = self._eval_call(state, num_episodes, eval_index, seeds)
        if len(args) == 2:
            ret, length, succ = fn(*args)
            ret = np.asarray(ret)
            self.env.raise_host_error(f"in an evaluation (index {eval_index})")  # a host simulator's exception
            return ret, np.asarray(length), success_dict(succ), {}
        ret, length, succ, ext = fn(*args)
        ret = np.asarray(ret)
        self.env.raise_host_error(f"in an evaluation (index {eval_index})")
        return (ret, np.asarray(length), success_dict(succ),
                {k: np.asarray(v, np.float64) for k, v in ext.items()})

    def _eval_call(self, state, num_episodes: int, eval_index: int, seeds):
        """(the compiled evaluation of ``num_episodes`` episodes, its arguments): the
        parameters, the seeds' evaluation keys and, with extensions that have eval_metrics,
        their states."""
        fn = self._eval_fns.get(num_episodes)
        if fn is None:
            fn = self._eval_fns[num_episodes] = online.make_eval_fn(self, num_episodes, self.compile_seconds,
                                                                    self.placement)
        n_seeds = jax.tree_util.tree_leaves(state.agent.params)[0].shape[0]
        seeds = list(range(n_seeds)) if seeds is None else list(seeds)
        keys = jnp.stack([eval_key(s, eval_index) for s in seeds])
        if self.extensions is None or not self.extensions.has("eval_metrics"):
            return fn, (state.agent.params, keys)
        return fn, (state.agent.params, keys, state.ext)

    def record_episode(self, state, seed_index: int = 0, *, seed: Optional[int] = None, eval_index: int = 0,
                       eval_episodes: int = 10, key=None, width: int = 192, height: int = 192,
                       max_frames: int = 250):
        """Record one episode of seed ``seed_index`` of ``state`` acting as the evaluation acts
        (planner in eval mode, :meth:`evaluate`), rendered by the env's suite
        (:func:`tdmpc2core.envs.render.frame_source`). A compiled program of its own (no host
        round trip per step; the frames are drawn on the host afterwards); it reads the
        parameters only, so training and evaluation numbers are unchanged.

        Args:
          state: a run state (leading seed axis), e.g. from :meth:`train`.
          seed_index: the seed's position in ``state``.
          seed: that seed's number (default ``seed_index``); with ``eval_index`` and
            ``eval_episodes`` it gives the default key.
          key: the episode's PRNG key; None: the first episode's key of evaluation
            ``eval_index`` with ``eval_episodes`` episodes
            (:func:`tdmpc2core.agents.video.episode_key`): its initial state and planner keys.
          width, height: frame size in pixels (even).
          max_frames: at most this many frames: every ``stride``-th agent step is shown,
            stride = ceil((T + 1) / max_frames).
        Returns:
          :class:`tdmpc2core.agents.video.Recording`: frames uint8 [N, height, width, 3], fps
          (1 / (control timestep x action repeat x stride)), the episode's return and length
          (agent steps), stride. The recording program's compile seconds go into
          :attr:`record_seconds` (``{"record": {...}}``), the renderer's into
          :meth:`video_renderer`'s ``seconds``.
        Raises:
          tdmpc2core.envs.render.NoRendererError: the env's suite has no renderer.
          ValueError: a bad ``seed_index``, frame size or ``max_frames``.
        """
        from ..envs.render import frame_source
        from . import video

        n_seeds = jax.tree_util.tree_leaves(state.agent.params)[0].shape[0]
        if not 0 <= int(seed_index) < n_seeds:
            raise ValueError(f"seed_index={seed_index!r}: the state holds {n_seeds} seed(s)")
        video.frame_stride(self.episode_length, max_frames)  # checks max_frames
        entry = self._eval_fns.get("record")
        if entry is None:
            source = frame_source(self.env)
            cfg = self.cfg

            def act(params, obs, mean, t0, k):
                if cfg.mpc:
                    return plan(self.wm, params, obs, mean, t0, True, self.gamma, k)
                return act_with_policy(self.wm, params, obs, True, k), mean

            fn = video.make_record_fn(self.env, act, self.episode_length, cfg.horizon, self.spec.action_dim,
                                      source.state_of, self.record_seconds)
            entry = self._eval_fns["record"] = (source, fn)
        source, fn = entry
        params = jax.tree_util.tree_map(lambda x: x[int(seed_index)], state.agent.params)
        if key is None:
            key = video.episode_key(int(seed_index) if seed is None else int(seed), eval_index, eval_episodes)
        rec = video.record(fn, source, params, key, action_repeat=self.action_repeat, width=width,
                           height=height, max_frames=max_frames)
        self.env.raise_host_error("while an episode was recorded")
        return rec

    def video_renderer(self):
        """The env's :class:`tdmpc2core.envs.render.FrameSource` that :meth:`record_episode`
        draws with (None before its first call): ``describe``, ``seconds`` spent drawing."""
        entry = self._eval_fns.get("record")
        return None if entry is None else entry[0]

    # ---- training (the run driver, :mod:`tdmpc2core.run.driver`, does the host side) ------
    def _chunk(self):
        """The compiled training chunk: (state, start tick, ticks) -> state (seeds vmapped)."""
        if "chunk" not in self._chunk_fns:
            self._chunk_fns["chunk"] = online.make_chunk_fn(self, self.compile_seconds, self.placement)
        return self._chunk_fns["chunk"]

    def program(self) -> "OnlineProgram":
        """What this agent computes for the run driver (:mod:`tdmpc2core.run.driver`)."""
        return OnlineProgram(self)

    def eval_index(self, tick: int, eval_every: Optional[int]) -> int:
        """Index of the evaluation at ``tick`` (0 = before training): the number of
        evaluations before it in the run's schedule. Evaluation keys come from (seed, index),
        so a resumed run evaluates on the same initial states as an uninterrupted one."""
        period = self.program().eval_period(eval_every)
        return -(-int(tick) // period) if period else 0

    state_tick = staticmethod(state_tick)

    def train(self, seed: Union[int, Sequence[int]] = 0, n_timesteps: int = 1_000_000, *,
              eval_every: Optional[int] = None, eval_episodes: Optional[int] = None,
              callback: Optional[Callable[[dict], None]] = None, state=None, history: Optional[dict] = None,
              total_timesteps: Optional[int] = None, options: Optional[RunOptions] = None,
              logging_config=None, initial_state=None, num_episode_test: Optional[int] = None, **run_options):
        """Train for ``n_timesteps`` agent steps per seed (several seeds vmapped in one program).

        A run may be done in one call, continued in several (``state``/``history`` of the
        previous call, ``total_timesteps`` given to each), or resumed from a checkpoint by a new
        process (``checkpoint_dir``): on CPU all three give bit-identical parameters and
        evaluations. How the run is driven on the host (checkpoints, resuming, the wall-time
        cap, stop requests, progress, loggers) is :class:`~tdmpc2core.run.driver.RunOptions`
        (``options``, or its fields as keywords), counted in agent steps; the schedule, the
        records and the driver's errors are :func:`tdmpc2core.run.driver.train`'s.

        Args:
          seed: one int or several, run vmapped in one program.
          n_timesteps: agent steps per seed of this call, from where ``state`` is (0 for a new
            run), rounded up to whole ticks of ``n_envs`` agent steps. Agent steps are
            transitions (env frames = agent steps x action repeat), not replay rows. A run
            resumed from ``checkpoint_dir`` runs to ``total_timesteps`` instead.
          total_timesteps: the whole run's length in agent steps: it sizes the replay
            (``min(buffer_size, total_timesteps)``, spec §9) and places the final evaluation;
            None: the end of this call.
          eval_every: agent steps between evaluations (also at step 0 and at the run's end);
            None: none. ``eval_episodes``: episodes per evaluation (10; alias ``num_episode_test``).
          logging_config: a :class:`~tdmpc2core.io.loggers.LoggingConfig`: evaluations every
            ``log_frequency`` agent steps; its loggers built, given every record, closed.
          callback: called after every chunk of the schedule with its record (``phase``,
            ``agent_steps``, ``env_frames``, ``updates``, the metrics, ``train_return``,
            ``eval_return`` after an evaluation, ``chunk_seconds``, ``wall_time_s``,
            ``agent_steps_per_s``).
          state, history: a previous call's (alias ``initial_state``; the state's buffers are
            donated); the returned history extends ``history``.
        Returns:
          (state, history): the run state (leading seed axis) and numpy arrays:
          ``eval_agent_steps``, ``eval_env_frames`` [n_evals], ``eval_returns``, ``eval_lengths``
          [n_evals, n_seeds, eval_episodes], ``eval_return`` [n_evals, n_seeds], for an env
          with a success flag ``eval_success``/``eval_success_any`` (:meth:`evaluate_all`), the
          loggers' ``Eval/...`` keys [n_evals, n_seeds], ``chunks`` (the callback's records)
          and ``wall_seconds``.
        Raises:
          TerminationError: the env terminated (non-episodic agent), at the first chunk
            boundary after it.
          NoSampleableEpisodeError: (episodic) scheduled updates never ran: no episode of at
            least horizon + 1 rows was ever held (docs/deviations.md R3).
          FloatingPointError / tdmpc2core.envs.base.SimulatorError: non-finite env data or
            metrics / a host simulator's error.
          ValueError: a replay sized for another run length; ``eval_every`` differing from
            ``logging_config.log_frequency``; and what :func:`tdmpc2core.run.driver.train`
            raises (TrainingInterrupted, a checkpoint of other settings, ...).
          TypeError: an argument and its alias both given.
        """
        state, eval_episodes = driver.reference_aliases("TDMPC2.train", state, initial_state, eval_episodes,
                                                        num_episode_test)
        eval_every = driver.log_cadence("TDMPC2.train", "eval_every", eval_every, logging_config)
        opts = driver.agent_run_options(self, options, run_options)
        with driver.logging_options(opts, logging_config, str(self.env_id), self.config) as opts:
            return driver.train(self.program(), [int(s) for s in np.atleast_1d(np.asarray(seed))], n_timesteps,
                                eval_every=eval_every, eval_episodes=eval_episodes, callback=callback, state=state,
                                history=history, total_steps=total_timesteps, options=opts)

    # ---- checkpoints (the run driver's, for this agent) ------------------------------
    def save_checkpoint(self, directory, state, history: Optional[dict], *, seeds, total_timesteps: int,
                        eval_every: Optional[int] = None, eval_episodes: int = 10, keep: Optional[int] = None):
        """Write ``state`` and ``history`` as checkpoint ``step_{agent steps}`` of ``directory``
        (:func:`tdmpc2core.run.driver.save_checkpoint`): parameters, target Qs, both Adam
        states, the running scale, the replay, environment states, observations, the planner's
        warm start, PRNG keys, counters, the last metrics, and the history. Returns the
        :class:`tdmpc2core.io.checkpoint.CheckpointInfo`."""
        run = Run(tuple(int(s) for s in seeds), int(total_timesteps), int(eval_every) if eval_every else None,
                  int(eval_episodes))
        return driver.save_checkpoint(self.program(), directory, state, history, run, keep=keep)

    def restore(self, path, *, seeds=None, total_timesteps: Optional[int] = None, eval_every=driver.UNSET,
                eval_episodes: Optional[int] = None):
        """Read checkpoint ``path`` (a ``step_*`` folder) into this agent's state: (state,
        history, manifest), the state as ``train`` returns it (leading seed axis).

        The run settings given (``seeds``, ``total_timesteps``, ``eval_every``,
        ``eval_episodes``) are compared with the checkpoint's; those not given are taken from
        it; the agent's own settings (class, resolved config, env params) are always compared.
        Raises:
          FileNotFoundError: no such checkpoint.
          tdmpc2core.io.checkpoint.CorruptCheckpointError: incomplete or damaged.
          tdmpc2core.io.checkpoint.CheckpointMismatchError: made with other settings (each
            differing setting named with both values) or of another state layout.
        """
        return driver.restore(self.program(), path, seeds=seeds, total_steps=total_timesteps,
                              eval_every=eval_every, eval_episodes=eval_episodes)
