"""``TDMPC2MultiTask``: multi-task TD-MPC2 trained offline on a pooled dataset (spec §10).

The paper's multi-task models (mt30 / mt80) are trained offline on the pooled replay of
single-task agents, then evaluated on every task. This module does the same with an
:class:`tdmpc2core.dataset.EpisodeDataset` of one or many tasks:

* a learnable task embedding [num_tasks, task_dim] with max-norm 1 (PyTorch's
  ``Embedding(max_norm=1)``, emulated: :func:`tdmpc2core.model.update.renorm_rows`), concatenated
  to the inputs of every module (encoder, dynamics, reward, policy, Q);
* observations zero-padded to the largest task's width, actions to the largest action
  width; each task's action mask (ones on its own dims) multiplies the policy's mean,
  log-std and noise and the planner's samples, mean and std, so a task never sees actions
  in dimensions it does not have (the env receives only its own dims);
* each task's discount from its own episode length (spec §1.3 heuristic), gathered per slice;
* updates on batches of H+1-row slices drawn uniformly over the pooled episodes (episode
  uniform, then start uniform; the reset row may start a slice), no planning during training,
  ``n_timesteps`` counting updates;
* several seeds vmapped in one jitted program; the dataset is placed on the device once and
  passed to that program as an unbatched argument, so the seeds share one copy.

Example::

    from tdmpc2core import TDMPC2MultiTask
    from tdmpc2core.dataset import load_dataset
    agent = TDMPC2MultiTask(load_dataset("results/datasets/pools/demo.parquet"), eval_envs=True,
                            model_size=1, batch_size=256)
    state, history = agent.train(seed=[0, 1], n_timesteps=2000, eval_every=1000)
    print(history["normalized_score"])     # [n_evals, n_seeds]

Evaluation (:meth:`TDMPC2MultiTask.evaluate`): each task in its own environment built with the
task's action repeat and episode length from the dataset's task table, the planner in eval
mode (no exploration noise; t0 on each episode's first step), with the task's embedding and
action mask; logged per task, the mean over tasks, and the normalized score. The normalized
score of a task is ``100 (return - low) / (high - low)`` for the task's declared return range
``(low, high)``; Playground DM Control tasks default to ``(0, T x action_repeat)``, i.e.
``(0, 1000)`` in the paper's protocol, which is the paper's ``return / 10`` (dm_control tasks,
``dmc:`` ids, the same). Other tasks need
a declared range (``return_ranges``); without one their normalized score is NaN, and so is
the mean over tasks (never a silent mix of normalised and raw returns). A task whose env has
a success flag (Meta-World, MyoSuite) is scored by 100 x its success rate (the official rule:
success at the episode's last step), as the paper scores Meta-World in mt80.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
from typing import Callable, Mapping, NamedTuple, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from ..model.config import (TDMPC2Config, check_offline_config, config_record, discount_from_episode_length,
                            resolve_config)
from ..model.update import AgentState
from ..model.world_model import WorldModel
from ..run import driver
from ..run.compiled import Compiled, per_seed
from ..run.devices import DataParallel, local, to_host
from ..run.driver import Run, RunOptions
from . import multitask_eval as mt_eval
from . import multitask_sampling as sampling
from ..extensions import make_extension_set
from .common import EVAL_KEY_OFFSET, METRIC_KEYS, UpdateHook, check_hyperparameters, init_one
from .multitask_program import OfflineProgram
from .multitask_sampling import (HOST_BLOCK_BYTES, DeviceData, gather_slices, sample_indices,  # noqa: F401 (public)
                                 sample_slices)

#: the official code's task_dim (spec §1.2): 96 for model sizes 1 and 317 and for mt80, else 64
TASK_DIM_LARGE, TASK_DIM_SMALL = 96, 64


def official_task_dim(model_size: int, num_tasks: int) -> int:
    """The official parser's task_dim (spec §1.2): 96 if the model size is 1 or 317 or the task
    set has 80 tasks (mt80; any set of 80 or more here), else 64 (mt30 with sizes 5, 19, 48)."""
    return TASK_DIM_LARGE if (int(model_size) in (1, 317) or int(num_tasks) >= 80) else TASK_DIM_SMALL


class MultiTaskState(NamedTuple):
    """A multi-task run, every leaf with a leading seed axis [S].

    agent: the learned state (params incl. ``task_emb``, target Qs, optimizers, S, and
    ``updates``: gradient updates done); key: each seed's base key of the update stream
    (update u uses ``fold_in(key, u)``, so a run continued in chunks equals the run left
    whole); seed: the seeds (evaluation keys derive from the seed); metrics: the last
    update's scalar metrics; ext: the extensions' states (a dict by extension name; with only
    the ``post_update=`` hook, its value; None without).
    """

    agent: AgentState
    key: jnp.ndarray
    seed: jnp.ndarray
    metrics: dict
    ext: object = None  # the extensions' states [S, ...] (None without extensions)


class TDMPC2MultiTask:
    """Multi-task TD-MPC2 trained offline on a pooled dataset (paper era, spec §10).

    Args:
      dataset: an :class:`tdmpc2core.dataset.EpisodeDataset` (e.g. ``pool_tasks`` of
        single-task exports, or ``load_dataset`` of a pooled Parquet file). It fixes the
        tasks: task i has ``dataset.tasks[i]``'s obs dim, action dim, episode length T_i
        and action repeat. Episodes with fewer than H+1 rows are dropped (with a warning).
      eval_envs: None (train without evaluating; :meth:`evaluate` raises); True (each task's
        env from the task table's ``env_id``); or one entry per task in task-id order: an env
        id (built with the task's action repeat, ``T_i x action_repeat`` simulator steps and the
        task table's ``env_params``, the settings the task's data was collected with) or a
        prebuilt :class:`tdmpc2core.envs.Env`, or None: the task is trained on but not
        evaluated (e.g. an official task we have no environment for; ``eval_task_ids``). Every
        env must have the task's obs dim, action dim, T (agent steps) and action repeat
        (gymnax envs keep their own time limit, so a mismatch there raises).
      model_size: preset {1, 5, 19, 48, 317}; widths left None come from it.
      task_dim: task-embedding width; None: the official value (:func:`official_task_dim`:
        96 for model sizes 1 and 317 or 80+ tasks, else 64).
      batch_size: slices per update (paper's multi-task protocol: 1024).
      return_ranges: {task name: (low, high)} declared return ranges for the normalized
        score; Playground DM Control tasks default to (0, T x action_repeat).
      backend: Playground physics backend of the evaluation envs (None: MJX).
      device_budget_bytes: the most bytes of pool rows (obs, action, reward: ``pool_nbytes``)
        to place on the device. None (default) or a pool within it: the pool goes on the device
        once and each update samples it inside the compiled program. A larger pool stays in
        host memory (``data_placement == "host"``): the compiled program draws each update's
        rows from the same keys, the host gathers them (numpy, a background thread one block
        ahead) and only the batches move to the device. Both paths draw the same slices and
        give the same numbers (tests/test_multitask.py; docs/architecture.md).
      host_block_updates: updates per host-to-device transfer on the host path (None: as many
        as fit in ``HOST_BLOCK_BYTES`` of batches for all seeds, at most 256).
      post_update: an optional :class:`~tdmpc2core.agents.common.UpdateHook` folded after
        every update inside the compiled program (its value in the state's ``ext``); None
        (default): the program without hooks. (The older form of an extension with one
        post_update phase.)
      extensions: extension objects (:mod:`tdmpc2core.extensions`) with some of the phases
        ``init_state``, ``pretrain`` (once, at the start of a fresh run), ``post_update`` (after
        every update inside the compiled program, on both data paths; ``step`` = updates done)
        and ``eval_metrics`` (at every evaluation, per task, on that task's evaluation
        episodes; in the history as ``ext/<extension>/<metric>`` [n_evals, S, num evaluated
        tasks]). () (default): the programs without extensions. An unknown phase raises
        :class:`~tdmpc2core.extensions.UnknownPhaseError`.
      devices: where the updates run (:class:`tdmpc2core.run.devices.DataParallel`): None
        (default: every device, of every process of a ``jax.distributed`` job, when
        ``batch_size`` divides evenly over them, else one), a device count, ``"all"``, a list of
        ``jax.Device`` or a ``jax.sharding.Mesh``. With more than one device each update's
        global batch is split over them, the parameters, optimizer states and pool replicated,
        the gradient reductions inserted by XLA: the same sampled rows as one device, the
        numbers equal to float rounding (tests/test_devices.py). Evaluation runs on each
        process's first device (the same episodes in every process; process 0 writes them).
      **hyperparameters: any field of :class:`~tdmpc2core.model.config.TDMPC2Config` at its paper
        default (the single-task agent's). ``gamma`` set explicitly applies to every task;
        ``seed_steps`` and ``buffer_size`` have no role offline. ``learning_rate`` (a float or
        a schedule of the update count, :class:`~tdmpc2core.agents.single_task.TDMPC2`'s) and
        ``weight_decay`` as the single-task agent's: the task embedding is trained by the
        world-model optimizer at ``learning_rate`` (and decayed with it), the encoder at
        ``learning_rate * enc_lr_scale``. ``updates_per_step`` is refused unless 1: offline,
        ``n_timesteps`` counts updates.

    Derived: per-task discounts ``gammas`` from each task's T (spec §1.3); planner
    ``iterations`` + 2 when the padded action dim is >= 20.

    Raises:
      ValueError: a dataset with terminations (the paper-era agent has no termination
        head), eval envs that do not match the task table, an unknown model size, an
        optimizer setting outside what is accepted, ``updates_per_step`` other than 1.
      TypeError: an unknown hyperparameter name.
      NotImplementedError: ``episodic=True``.
      ValueError: ``obs`` other than "state" (pixels are single-task only).
    """

    def __init__(self, dataset, eval_envs=None, model_size: int = 5, task_dim: Optional[int] = None,
                 batch_size: int = 1024, *, return_ranges: Optional[Mapping[str, Sequence[float]]] = None,
                 backend: Optional[str] = None, device_budget_bytes: Optional[int] = None,
                 host_block_updates: Optional[int] = None, post_update: Optional[UpdateHook] = None,
                 extensions: Sequence = (), devices=None, **hyperparameters):
        check_hyperparameters("TDMPC2MultiTask", hyperparameters, TDMPC2Config)
        if hyperparameters.get("obs", "state") != "state":
            raise ValueError(f"TDMPC2MultiTask: obs={hyperparameters['obs']!r} is not supported: multi-task training "
                             "learns from episode datasets of state observations (the official datasets are "
                             "state-only); pixels (obs='rgb') are for the single-task TDMPC2")
        #: where the updates run (:class:`~tdmpc2core.run.devices.DataParallel`): the global batch
        #: split over its mesh (None: one device)
        self.placement = DataParallel.build(devices, int(batch_size))
        self.devices, self.post_update = devices, post_update
        #: the extensions composed (:class:`tdmpc2core.extensions.ExtensionSet`), None without
        self.extensions = make_extension_set(extensions, post_update)
        user_cfg = TDMPC2Config(model_size=model_size, batch_size=int(batch_size), **hyperparameters)
        if user_cfg.episodic:
            raise NotImplementedError("episodic=True is not implemented for the multi-task agent")
        check_offline_config(user_cfg)
        self.tasks = tuple(dataset.tasks)
        self.task_names = [t.name for t in self.tasks]
        self.num_tasks = len(self.tasks)
        if self.num_tasks < 1:
            raise ValueError("the dataset has no tasks")
        if np.any(np.asarray(dataset.terminated)):
            n = int(np.sum(np.asarray(dataset.terminated)))
            raise ValueError(f"the dataset has {n} terminated row(s); the paper-era multi-task agent bootstraps "
                             "through every episode end and refuses terminating data")
        self.obs_dim = int(dataset.obs.shape[1])
        self.action_dim = int(dataset.action.shape[1])
        self.task_dim = official_task_dim(model_size, self.num_tasks) if task_dim is None else int(task_dim)
        if self.task_dim < 1:
            raise ValueError(f"task_dim={task_dim!r} must be >= 1")
        # widths, checks and the planner iterations (on the padded action dim); gamma and
        # seed_steps are per task / unused here
        self.cfg = dataclasses.replace(
            resolve_config(user_cfg, episode_length=min(t.episode_length for t in self.tasks),
                           action_dim=self.action_dim, backend=jax.default_backend()),
            gamma=user_cfg.gamma, seed_steps=None)
        c = self.cfg
        #: task name -> discount (Python floats, as the single-task agent's ``gamma``)
        self.task_gammas = {
            t.name: float(c.gamma) if c.gamma is not None else
            discount_from_episode_length(t.episode_length, c.discount_denom, c.discount_min, c.discount_max)
            for t in self.tasks}
        self.gammas = np.array(list(self.task_gammas.values()), np.float32)  # [num_tasks], on the device
        masks = np.zeros((self.num_tasks, self.action_dim), np.float32)
        for i, t in enumerate(self.tasks):
            masks[i, : int(t.action_dim)] = 1.0
        self.masks = masks
        self.wm = WorldModel(self.cfg, self.obs_dim, self.action_dim, self.task_dim, self.num_tasks)

        from ..io.dataset import sampleable_episodes

        starts, rows, ep_task = sampleable_episodes(dataset, c.horizon)
        self.num_episodes = int(len(starts))
        self.dataset_nbytes = int(getattr(dataset, "nbytes", 0))
        self.dataset_provenance = dict(getattr(dataset, "provenance", {}) or {})
        host = DeviceData(
            obs=np.asarray(dataset.obs, np.float32), action=np.asarray(dataset.action, np.float32),
            reward=np.asarray(dataset.reward, np.float32), starts=np.asarray(starts, np.int32),
            rows=np.asarray(rows, np.int32), task=np.asarray(ep_task, np.int32), gamma=self.gammas,
            masks=self.masks)
        if host.obs.shape[0] >= 2 ** 31:
            raise ValueError(f"the dataset has {host.obs.shape[0]} rows; row indices are int32 (at most 2**31 - 1)")
        #: bytes of the rows (obs, action, reward) the sampler reads: what the device budget bounds
        self.pool_nbytes = int(host.obs.nbytes + host.action.nbytes + host.reward.nbytes)
        self.device_budget_bytes = None if device_budget_bytes is None else int(device_budget_bytes)
        #: "device": the pool on the device once, sampled inside the compiled program (every seed
        #: reads that copy); "host": the pool stays in host memory, the compiled program draws the
        #: rows of each update's slices, the host gathers them and moves only the batches
        self.data_placement = ("device" if self.device_budget_bytes is None
                               or self.pool_nbytes <= self.device_budget_bytes else "host")
        self._host_data = host
        put = self.placement.replicate if self.placement.mesh is not None else jax.device_put
        if self.data_placement == "device":  # on every device of the mesh (each process its own)
            self.data = put(host)
        else:  # only the episode table, discounts and masks on the device; the rows stay here
            empty = lambda a: np.zeros((0,) + a.shape[1:], a.dtype)
            self.data = put(host._replace(obs=empty(host.obs), action=empty(host.action), reward=empty(host.reward)))
        #: updates per host block (bounded by HOST_BLOCK_BYTES of batches per transfer)
        self.host_block_updates = int(host_block_updates) if host_block_updates else None

        self.backend = backend
        self.eval_envs = mt_eval.build_eval_envs(self, eval_envs)
        self.return_ranges = mt_eval.resolve_ranges(self, return_ranges)
        self._fns: dict = {}
        #: the host path's sampling time: seconds preparing batches (draw, gather, transfer; in a
        #: background thread), seconds the updates waited for them, updates fed
        self.host_timing = {"prepare_s": 0.0, "wait_s": 0.0, "updates": 0}
        #: seconds spent tracing, lowering and compiling each program in this process
        #: ({"init" | "chunk" | "eval": {"trace_lower_s", "compile_s", "calls_compiled"}})
        self.compile_seconds: dict = {}
        #: the same for :meth:`record_episode`'s programs (kept apart: a video changes no record)
        self.record_seconds: dict = {}

    def __hash__(self):  # jitted closures capture self
        return id(self)

    @property
    def eval_task_ids(self) -> list:
        """The task ids evaluated (those with an eval env), in task-id order."""
        return [] if self.eval_envs is None else [i for i, e in enumerate(self.eval_envs) if e is not None]

    @property
    def eval_task_names(self) -> list:
        return [self.task_names[i] for i in self.eval_task_ids]

    # ---- description ----------------------------------------------------------------
    @property
    def config(self) -> dict:
        """The resolved hyperparameters (:func:`~tdmpc2core.model.config.config_record`) and the
        task table, JSON-serialisable."""
        d = config_record(self.cfg)
        d.update(task_dim=self.task_dim, obs_dim=self.obs_dim, action_dim=self.action_dim,
                 num_tasks=self.num_tasks, sampleable_episodes=self.num_episodes,
                 dataset_nbytes=self.dataset_nbytes,
                 # a task's entry as in the dataset's task table (env_params only when set)
                 tasks=[dict(t.to_json() if hasattr(t, "to_json") else dict(t._asdict()),
                             gamma=self.task_gammas[t.name], action_mask=m.tolist(),
                             return_range=self.return_ranges[t.name],
                             eval_env=(None if self.eval_envs is None or self.eval_envs[i] is None
                                       else self.eval_envs[i].spec.env_id))
                        for i, (t, m) in enumerate(zip(self.tasks, self.masks))])
        return d

    # ---- state ------------------------------------------------------------------------
    def init(self, seed: Union[int, Sequence[int]], total_steps: int = 0) -> MultiTaskState:
        """Initial states of the seeds, stacked on axis 0 (parameters from ``PRNGKey(seed)``),
        with the extensions' states (``init_state(total_steps)``, ``total_steps`` the run's
        updates) and their pretrain phases.

        Each seed is initialised by one compiled single-seed program (shared by agents with
        equal world models, whatever the number of seeds) and the states are stacked; the
        pretrain phases, if any, run in a compiled program of their own (seeds vmapped)."""
        seeds = [int(s) for s in np.atleast_1d(np.asarray(seed, dtype=np.int64))]
        program = _init_program(self.wm)
        states = [program(jax.random.PRNGKey(s)) for s in seeds]
        if "init" in program.timings:  # when it was compiled (maybe for an equal agent); not under eval_shape
            self.compile_seconds["init"] = dict(program.timings["init"])
        agent, run_keys = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *states)
        metrics = {k: jnp.zeros((len(seeds),), jnp.float32) for k in METRIC_KEYS}
        exts = self.extensions
        ext = None if exts is None else jax.tree_util.tree_map(
            lambda x: jnp.stack([x] * len(seeds)), exts.init(int(total_steps)))
        if exts is not None and exts.has("pretrain"):
            if "pretrain" not in self._fns:
                self._fns["pretrain"] = per_seed(exts.pretrain, name="pretrain", compile_seconds=self.compile_seconds,
                                                 devices=self.placement)
            agent, ext = self._fns["pretrain"](agent, ext, jnp.stack([jax.random.PRNGKey(s) for s in seeds]))
        state = MultiTaskState(agent=agent, key=run_keys, seed=jnp.asarray(seeds, jnp.int32), metrics=metrics,
                               ext=ext)
        return self.place(state)

    def place(self, state: MultiTaskState) -> MultiTaskState:
        """``state`` replicated on every device of the placement's mesh (unchanged on one device;
        a restored checkpoint's host arrays, whatever device count wrote it, go through here)."""
        return self.placement.replicate(state) if self.placement.mesh is not None else state

    # ---- training (programs in :mod:`.multitask_sampling`) ------------------------------
    def _chunk(self) -> Compiled:
        """The device path's compiled training program (:func:`.multitask_sampling.device_chunk`)."""
        if "chunk" not in self._fns:
            self._fns["chunk"] = sampling.device_chunk(self)
        return self._fns["chunk"]

    def run_updates(self, state: MultiTaskState, n_updates: int) -> MultiTaskState:
        """``n_updates`` more updates of every seed: one call of the compiled program (device
        path), or blocks of ``host_block_updates`` updates fed with batches gathered on the host
        (host path; the same numbers)."""
        state = self.place(state)
        if self.data_placement == "device":
            return self._chunk()(state, self.data, self.placement.replicate(jnp.int32(n_updates)))
        return sampling.run_updates_host(self, state, int(n_updates))

    # ---- the host path (:mod:`.multitask_sampling`) -----------------------------------
    def _block_updates(self, n_seeds: int) -> int:
        return sampling.block_updates(self, n_seeds)

    def _index_fn(self) -> Compiled:
        if "index" not in self._fns:
            self._fns["index"] = sampling.index_program(self)
        return self._fns["index"]

    def _chunk_host(self) -> Compiled:
        if "chunk_host" not in self._fns:
            self._fns["chunk_host"] = sampling.host_chunk(self)
        return self._fns["chunk_host"]

    def _host_batches(self, keys, u0: int, K: int, n: int):
        return sampling.host_batches(self, keys, u0, K, n)

    def program(self) -> "OfflineProgram":
        """What this agent computes for the run driver (:mod:`tdmpc2core.run.driver`)."""
        return OfflineProgram(self)

    def train(self, seed: Union[None, int, Sequence[int]] = None, n_timesteps: int = 1_000_000, *,
              eval_every: Optional[int] = None, eval_episodes: Optional[int] = None, log_every: Optional[int] = None,
              callback: Optional[Callable[[dict], None]] = None, state: Optional[MultiTaskState] = None,
              history: Optional[dict] = None, total_timesteps: Optional[int] = None,
              options: Optional[RunOptions] = None, logging_config=None,
              initial_state: Optional[MultiTaskState] = None, num_episode_test: Optional[int] = None,
              **run_options):
        """Run ``n_timesteps`` more updates for every seed (vmapped, one jitted program).

        A run may be done in one call, continued in several (``state``/``history`` of the
        previous call, ``total_timesteps`` given to each), or resumed from a checkpoint by a
        new process (``checkpoint_dir``): on CPU all three give bit-identical parameters and
        evaluations. How the run is driven on the host (checkpoints, resuming, the wall-time
        cap, stop requests, progress, loggers) is :class:`~tdmpc2core.run.driver.RunOptions`
        (``options``, or its fields as keywords), counted in updates; the schedule, the
        progress dict and the driver's errors are :func:`tdmpc2core.run.driver.train`'s.

        Args:
          seed: one int or several (vmapped); default 0. With ``state`` it must be None or
            the state's seeds.
          n_timesteps: gradient updates of this call (the reference's offline iterations;
            paper: 10M at batch 1024). When a run is resumed from ``checkpoint_dir``, the call
            runs to ``total_timesteps`` instead.
          total_timesteps: the whole run's length in updates (the final evaluation is at its
            end); None: the end of this call.
          eval_every: updates between evaluations (absolute counts; also before the first
            update of a fresh run and at the end of the run); None: no evaluation.
          eval_episodes: episodes per task per evaluation (default 10); ``num_episode_test`` is
            its alias (the reference API's name).
          log_every: updates between training-metric records (default: eval_every; None and
            no eval_every: one record at the end of the call).
          logging_config: a :class:`~tdmpc2core.io.loggers.LoggingConfig` (the reference
            API's): training-metric records every ``log_frequency`` updates and, with eval envs,
            an evaluation at each (``eval_every``/``log_every`` may be left out); its loggers
            built, given every record and closed at the end of the call. Unlike the reference,
            a fresh run is also evaluated before its first update.
          callback: called on the host after every chunk with that chunk's record.
          state, history: a state (and the history) this agent's ``train`` or ``init``
            returned, or :meth:`restore` read: the run continues from it; its buffers are
            donated; the returned history extends ``history``. Updates, RNG and evaluation
            keys derive from the state and the update count, so a run continued in chunks
            equals the run left whole. ``initial_state`` is the alias of ``state`` (the
            reference API's name).
        Returns:
          (state, history): ``history`` holds ``eval_updates`` [n_evals], ``eval_returns`` /
          ``eval_lengths`` [n_evals, S, num_tasks, E], ``eval_return`` [n_evals, S, num_tasks],
          ``eval_mean_return`` [n_evals, S], ``normalized_score_per_task`` [n_evals, S,
          num_tasks], ``normalized_score`` [n_evals, S], ``tasks``, ``chunks`` (per-chunk
          records: ``updates``, ``chunk_updates``, wall-clock ``chunk_seconds``,
          ``wall_time_s`` and ``updates_per_s``, the last update's metrics, the evaluation's
          means when the chunk ended with one), ``wall_seconds``, and the loggers' keys of the
          evaluations (when the run evaluated): ``Eval/episodic mean reward`` (mean over
          tasks), ``Eval/normalized score``, ``Eval/<task>/episodic mean reward`` and
          ``Eval/<task>/mean episodic length``, each [n_evals, S] (the reference's are [S,
          n_logs]).
        Raises:
          ValueError: ``eval_every`` without eval envs; ``seed`` disagreeing with ``state``;
            a call past ``total_timesteps``; ``resume=False`` with checkpoints in the folder;
            ``eval_every`` or ``log_every`` differing from ``logging_config.log_frequency``.
          TypeError: an argument and its alias both given (``state`` and ``initial_state``,
            ``eval_episodes`` and ``num_episode_test``).
          And what :func:`tdmpc2core.run.driver.train` raises (TrainingInterrupted, a
          checkpoint of other settings, ...).
        """
        owner = "TDMPC2MultiTask.train"
        state, eval_episodes = driver.reference_aliases(owner, state, initial_state, eval_episodes, num_episode_test)
        log_every = driver.log_cadence(owner, "log_every", log_every, logging_config)
        if self.eval_envs is not None:
            eval_every = driver.log_cadence(owner, "eval_every", eval_every, logging_config)
        if eval_every and self.eval_envs is None:
            raise ValueError("eval_every is set but the agent has no eval_envs: nothing to evaluate on "
                             "(pass eval_envs=True or one env per task)")
        opts = driver.agent_run_options(self, options, run_options)
        with driver.logging_options(opts, logging_config, "multitask", self.config) as opts:
            return driver.train(self.program(), None if seed is None else np.atleast_1d(seed), n_timesteps,
                                eval_every=eval_every, eval_episodes=eval_episodes, callback=callback, state=state,
                                history=history, total_steps=total_timesteps,
                                extra={"log_every": int(log_every) if log_every else None}, options=opts)

    # ---- checkpoints --------------------------------------------------------------------
    @property
    def dataset_sha256(self) -> str:
        """SHA-256 of the training data as the agent holds it (observations, actions, rewards,
        sampleable episode starts and lengths, task ids, discounts, action masks): part of a
        checkpoint's settings, so a checkpoint is refused by an agent built on other data. The
        same whichever ``data_placement`` (a run may resume on the other path)."""
        if getattr(self, "_dataset_sha256", None) is None:
            h = hashlib.sha256()
            for name, arr in zip(DeviceData._fields, tuple(self._host_data)):
                arr = np.ascontiguousarray(arr)
                h.update(f"{name}:{arr.dtype.str}:{arr.shape};".encode())
                h.update(arr.tobytes())
            self._dataset_sha256 = h.hexdigest()
        return self._dataset_sha256

    def save_checkpoint(self, directory, state: MultiTaskState, history: Optional[dict], *, total_timesteps: int,
                        eval_every: Optional[int] = None, eval_episodes: int = 10, log_every: Optional[int] = None,
                        keep: Optional[int] = None):
        """Write ``state`` and ``history`` as checkpoint ``step_{updates}`` of ``directory``
        (:func:`tdmpc2core.run.driver.save_checkpoint`): parameters with the task embedding,
        target Qs, both Adam states, the running scale, the update counter, the seeds' keys,
        the last metrics, and the history. The dataset is not saved (its SHA-256 is compared
        instead). Returns the :class:`~tdmpc2core.io.checkpoint.CheckpointInfo`."""
        run = Run(tuple(int(s) for s in to_host(state.seed)), int(total_timesteps),
                  int(eval_every) if eval_every else None, int(eval_episodes),
                  (("log_every", int(log_every) if log_every else None),))
        return driver.save_checkpoint(self.program(), directory, state, history, run, keep=keep)

    def restore(self, path, *, seeds=None, total_timesteps: Optional[int] = None, eval_every=driver.UNSET,
                eval_episodes: Optional[int] = None, log_every=driver.UNSET):
        """Read checkpoint ``path`` into this agent's state: (state, history, manifest).

        Run settings given are compared with the checkpoint's, those not given taken from it;
        the agent's own settings (class, configuration and task table, the data's SHA-256,
        the evaluation envs) are always compared.
        Raises FileNotFoundError, :class:`~tdmpc2core.io.checkpoint.CorruptCheckpointError`, or
        :class:`~tdmpc2core.io.checkpoint.CheckpointMismatchError` naming each differing setting.
        """
        return driver.restore(self.program(), path, seeds=seeds, total_steps=total_timesteps,
                              eval_every=eval_every, eval_episodes=eval_episodes, log_every=log_every)

    # ---- acting and evaluation (:mod:`.multitask_eval`) -----------------------------------
    def act(self, params, obs, task: int, t0, eval_mode: bool, key, prev_mean=None):
        """One action for one (unpadded or padded) observation of task ``task`` (one seed's
        params). Returns (action [task action dim] in [-1, 1], mean [H, A] for the next call)."""
        task, eval_mode = int(task), bool(eval_mode)
        obs = jnp.asarray(obs, jnp.float32).reshape(-1)
        obs = jnp.pad(obs, (0, self.obs_dim - obs.shape[0]))
        if prev_mean is None:
            prev_mean = jnp.zeros((self.cfg.horizon, self.action_dim), jnp.float32)
        fn = self._fns.get(("act", task, eval_mode))
        if fn is None:
            fn = self._fns[("act", task, eval_mode)] = mt_eval.act_program(self, task, eval_mode)
        return fn(params, obs, prev_mean, jnp.asarray(t0, bool), key)

    def _eval_fn(self, task: int, num_episodes: int) -> Compiled:
        key_ = ("eval", task, num_episodes)
        if key_ not in self._fns:
            self._fns[key_] = mt_eval.eval_program(self, task, num_episodes)
        return self._fns[key_]

    def eval_keys(self, seeds, updates: int, task: int):
        """Evaluation keys [S, 2]: from the seed, the updates done and the task (the same
        initial states when a run is repeated or continued in chunks)."""
        return mt_eval.eval_keys(seeds, updates, task)

    def normalized_score(self, returns, task_ids=None) -> np.ndarray:
        """100 (return - low) / (high - low) per task on the last axis ([..., num_tasks], or
        [..., len(task_ids)] for the tasks ``task_ids``); NaN for a task without a declared range."""
        return mt_eval.normalized_score(self, returns, task_ids)

    def evaluate(self, state: MultiTaskState, num_episodes: int = 10) -> dict:
        """Evaluate every seed on every evaluated task (``eval_task_ids``: all tasks unless
        eval_envs has None entries), each in its own env (host loop over tasks); the per-task
        axes below have one entry per evaluated task, and the means are over those.

        ``num_episodes`` episodes per task from fresh initial states (keys from the seed, the
        updates done and the task), the planner in eval mode with the task's embedding and
        action mask on padded observations; the env receives the task's own action dims.

        Returns a dict of numpy arrays: ``tasks`` (names), ``returns`` / ``lengths`` [S,
        num_tasks, E], ``return`` [S, num_tasks] (mean over episodes), ``mean_return`` [S]
        (mean over tasks), ``normalized_score_per_task`` [S, num_tasks], ``normalized_score``
        [S] (mean over tasks; NaN when a task has no declared range), ``updates`` (int). When an
        evaluated task's env has a success flag (``EnvSpec.has_success``): ``success`` and
        ``success_any`` float64 [S, num_tasks, E] (1.0/0.0: success at the episode's last step,
        the official rule, and at any step; NaN for a task without a flag), ``success_rate``
        [S, num_tasks] (mean of ``success``), and such a task's normalized score is 100 x its
        success rate (the paper's rule for Meta-World).
        Raises:
          ValueError: the agent was built without eval_envs.
        """
        return mt_eval.evaluate(self, local(state), num_episodes)

    def record_episode(self, state: MultiTaskState, task: Union[int, str], seed_index: int = 0, *,
                       seed: Optional[int] = None, updates: Optional[int] = None, eval_episodes: int = 10, key=None,
                       width: int = 192, height: int = 192, max_frames: int = 250):
        """Record one episode of task ``task`` (index or name) by seed ``seed_index`` of
        ``state``, acting as :meth:`evaluate` acts, rendered by the task's suite
        (:func:`tdmpc2core.envs.render.frame_source`); one compiled program per task, the frames
        drawn on the host afterwards (:meth:`tdmpc2core.agents.single_task.TDMPC2.record_episode`).

        ``key`` None: the first episode's key of the evaluation after ``updates`` updates (default
        the state's) with ``eval_episodes`` episodes, seed ``seed`` (default the state's seed at
        ``seed_index``):
        ``split(eval_key(seed, updates, task), eval_episodes)[0]``, its initial state and keys.
        Returns a :class:`tdmpc2core.agents.video.Recording`.
        Raises:
          ValueError: an unknown task, a task without an evaluation env, a bad ``seed_index``,
            frame size or ``max_frames``.
          tdmpc2core.envs.render.NoRendererError: the task's suite has no renderer.
        """
        from ..envs.render import frame_source
        from . import video

        if isinstance(task, str):
            if task not in self.task_names:
                raise ValueError(f"task={task!r}: not a task of the dataset {self.task_names}")
            task = self.task_names.index(task)
        task = int(task)
        if self.eval_envs is None or not 0 <= task < self.num_tasks or self.eval_envs[task] is None:
            raise ValueError(f"task={task!r}: no evaluation env (evaluated tasks: {self.eval_task_names})")
        state = local(state)
        n_seeds = jax.tree_util.tree_leaves(state.agent.params)[0].shape[0]
        if not 0 <= int(seed_index) < n_seeds:
            raise ValueError(f"seed_index={seed_index!r}: the state holds {n_seeds} seed(s)")
        env = self.eval_envs[task]
        video.frame_stride(env.spec.episode_length, max_frames)  # checks max_frames
        entry = self._fns.get(("record", task))
        if entry is None:
            source = frame_source(env)
            entry = self._fns[("record", task)] = (
                source, mt_eval.record_program(self, task, source.state_of, self.record_seconds))
        source, fn = entry
        params = jax.tree_util.tree_map(lambda x: x[int(seed_index)], state.agent.params)
        if key is None:
            s = int(np.asarray(state.seed).reshape(-1)[int(seed_index)]) if seed is None else int(seed)
            u = int(np.asarray(state.agent.updates).reshape(-1)[0]) if updates is None else int(updates)
            if int(eval_episodes) < 1:
                raise ValueError(f"eval_episodes={eval_episodes!r}: at least 1 accepted")
            key = jax.random.split(mt_eval.eval_keys([s], u, task)[0], int(eval_episodes))[0]
        rec = video.record(fn, source, params, key, action_repeat=env.spec.action_repeat, width=width,
                           height=height, max_frames=max_frames)
        env.raise_host_error("while an episode was recorded")
        return rec

    def video_renderer(self, task: int):
        """Task ``task``'s :class:`tdmpc2core.envs.render.FrameSource` of :meth:`record_episode`
        (None before its first call for that task)."""
        entry = self._fns.get(("record", int(task)))
        return None if entry is None else entry[0]


@functools.lru_cache(maxsize=None)
def _init_program(wm: WorldModel) -> Compiled:
    """The compiled single-seed init of ``wm``, shared by agents with equal world models."""
    return per_seed(functools.partial(init_one, wm), name="init", compile_seconds={}, batched=False)


__all__ = ["TDMPC2MultiTask", "MultiTaskState", "OfflineProgram", "DeviceData", "sample_slices", "sample_indices",
           "gather_slices", "official_task_dim", "HOST_BLOCK_BYTES", "METRIC_KEYS", "EVAL_KEY_OFFSET"]
