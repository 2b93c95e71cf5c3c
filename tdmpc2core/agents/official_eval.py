"""The released TD-MPC2 checkpoints, evaluated with our planner (the official ``evaluate.py``).

An official checkpoint is the ``{"model": state_dict}`` that the official ``TDMPC2.save``
writes (single-task, e.g. ``dog-run-1.pt``, or multi-task, ``mt30-317M.pt``,
``mt80-48M.pt``). :func:`load_checkpoint` reads it (``torch.load(weights_only=True)``,
:mod:`tdmpc2core.io.official`), converts it (:mod:`tdmpc2core.model.official`), infers the
architecture from the weights and checks it against the requested model size and task set;
:func:`evaluate_official` then runs the official evaluation protocol on dm_control
(``tdmpc2/evaluate.py`` at 5f6fade):

* ``episodes`` episodes per task (default 10), each from a fresh initial state, the planner
  in eval mode: no exploration noise, ``t0`` on each episode's first step (zero warm
  start); the action is the first step of an elite drawn by its score, as the official
  ``plan`` does in eval mode (spec §6.5) ("the mean of the action distribution" in the
  official docstring is that elite, not the MPPI mean); the official ``evaluate.py`` itself
  acts with exploration noise, the trainers' evaluations (the published curves) do not:
  docs/deviations.md K4;
* the paper's planner (``iterations`` 6, ``num_samples`` 512, ``num_elites`` 64,
  ``num_pi_trajs`` 24, ``horizon`` 3, ``temperature`` 0.5), every setting overridable;
* single-task: the checkpoint's task; multi-task: each task with its row of the task
  embedding (renormalised to max-norm 1 at look-up), observations zero-padded to the
  checkpoint's width, actions multiplied by the task's mask and the env given only its own
  dims, the discount from the task's episode length (spec §10); the normalized score of a
  DMC task is return / 10 (the official ``evaluate.py``). One planner program serves every
  task (embedding, mask and discount are its arguments), so an mt30 checkpoint compiles once,
  not 28 times; the episodes' loop runs on the host, the task's episodes stepped together
  (single-task too: the same keys, hence the same initial states and draws, as
  :meth:`TDMPC2.evaluate`, whose one compiled program would run every step before reporting
  anything), so ``progress`` hears after every agent step
  (:class:`tdmpc2core.run.progress.EvalProgress`: a line per task and every 30 s, with the
  time still to go).

Example::

    from tdmpc2core.agents.official_eval import evaluate_official
    ev = evaluate_official("dog-run-1.pt", "dmc:dog-run", model_size=5)         # 10 episodes
    ev = evaluate_official("mt30-48M.pt", "all", model_size=48)   # every mt30 task available here
    ev.rows   # one dict per episode: task, episode, return, length, ...

Needs PyTorch to read the file (``pip install -e '.[official]'``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Callable, Mapping, Optional, Sequence, Union

import numpy as np

from ..envs.dmcontrol_ids import PREFIX
from ..envs.official_tasks import env_id_of, resolve_task_list, task_set_names, task_set_source, unavailable_reason
from ..io.integrity import FileCheck
from ..model.config import MODEL_SIZES, TDMPC2Config, discount_from_episode_length, resolve_config
from ..model.official import (REFERENCE_COMMIT, OfficialArchitecture, OfficialWeights, OfficialWeightsError,
                              from_official)

#: Planner settings a caller may override (the paper's defaults otherwise, spec §1.2).
PLANNER_KEYS = ("iterations", "num_samples", "num_elites", "num_pi_trajs", "horizon", "min_std", "max_std",
                "temperature")
_PLANNER_INTS = ("iterations", "num_samples", "num_elites", "num_pi_trajs", "horizon")
#: The official evaluate.py's defaults (config.yaml at 5f6fade): eval_episodes, seed.
DEFAULT_EPISODES, DEFAULT_SEED = 10, 1


class CheckpointMismatchError(ValueError):
    """An official checkpoint that does not fit the requested model size, task or task set
    (the message names the file and what would fit)."""


def file_sha256(path) -> str:
    """The SHA-256 of a file (hex). :func:`load_checkpoint` takes it from its integrity check instead."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def official_architecture(model_size: int, obs_dim: int, action_dim: int, *, task_set: Optional[str] = None,
                          num_tasks: int = 0) -> dict:
    """The widths the official parser (``common/parser.py`` at 5f6fade) gives ``model_size``:
    the preset (``num_q`` 5 unless the preset says otherwise); for a multi-task set,
    ``task_dim`` 96 for mt80 or sizes 1 and 317, else 64, and ``latent_dim`` 512 for
    mt30 at size 19 ("this checkpoint is slightly smaller"). Returns a dict of
    :class:`~tdmpc2core.model.official.OfficialArchitecture` fields (obs/action dims as given)."""
    if int(model_size) not in MODEL_SIZES:
        raise ValueError(f"model_size={model_size!r} is not a preset; accepted: {sorted(MODEL_SIZES)}")
    w = dict(MODEL_SIZES[int(model_size)])
    out = dict(obs_dim=int(obs_dim), action_dim=int(action_dim), **w)
    if num_tasks:
        if task_set == "mt30" and int(model_size) == 19:
            out["latent_dim"] = 512
        out["task_dim"] = 96 if (task_set == "mt80" or int(model_size) in (1, 317)) else 64
        out["num_tasks"] = int(num_tasks)
    return out


@dataclasses.dataclass(frozen=True)
class OfficialCheckpoint:
    """A loaded official checkpoint.

    path: the file; sha256: its SHA-256; weights: the converted
    :class:`~tdmpc2core.model.official.OfficialWeights`; architecture: the widths inferred
    from the weights; model_size: the official preset it matches (None: none does, e.g. a
    tiny test checkpoint); task_set: ``"mt30"`` / ``"mt80"`` / ``"custom"`` (multi-task) or
    None (single-task); task_names: the multi-task checkpoint's tasks in task-index order
    (official names), else (); check: the file's integrity check
    (:class:`~tdmpc2core.io.integrity.FileCheck`: size, SHA-256, zip members whose CRC-32
    matched, from one read of the file; ``sha256`` comes from it).
    """

    path: str
    sha256: str
    weights: OfficialWeights
    architecture: OfficialArchitecture
    model_size: Optional[int]
    task_set: Optional[str]
    task_names: tuple
    check: Optional[FileCheck] = None

    @property
    def size(self) -> Optional[int]:
        """The file's size in bytes (None without a check)."""
        return None if self.check is None else self.check.size

    @property
    def multitask(self) -> bool:
        return self.architecture.num_tasks > 0

    def describe(self) -> str:
        head = f"{os.path.basename(self.path)}: {self.architecture.describe()}"
        if self.multitask:
            head += f"; task set {self.task_set} ({len(self.task_names)} tasks)"
        return head


def _matching_size(arch: OfficialArchitecture, task_set: Optional[str]) -> Optional[int]:
    for size in MODEL_SIZES:
        want = official_architecture(size, arch.obs_dim, arch.action_dim, task_set=task_set,
                                     num_tasks=arch.num_tasks)
        if all(getattr(arch, k) == v for k, v in want.items()):
            return size
    return None


def load_checkpoint(path, *, model_size: Optional[int] = None,
                    task_set: Union[str, Sequence[str], None] = None) -> OfficialCheckpoint:
    """Read and convert an official checkpoint, checking it against what was asked.

    Args:
      path: the ``.pt`` file.
      model_size: the official model size it must be (None: whatever the weights are).
      task_set: multi-task only: ``"mt30"``, ``"mt80"`` or the task names in task-index order
        (a list, or one comma-separated string); None: the official set with as many tasks
        as the checkpoint has embeddings.

    Raises:
      FileNotFoundError: no such file (named).
      ImportError: PyTorch is not installed.
      CheckpointMismatchError: the file is damaged (a zip member's CRC-32 differs, checked
        before anything is loaded: :func:`tdmpc2core.io.integrity.check_zip_file`; the message
        names the member, ``__cause__`` is the
        :class:`~tdmpc2core.io.official.DamagedCheckpointError`), truncated, not a zip archive
        or a legacy non-zip torch file, or not a readable ``.pt`` (``torch.load(weights_only=True)``
        refuses pickled code), the weights are not an official TD-MPC2 state dict, or do not fit
        ``model_size`` / ``task_set`` (names the file, its architecture and the size it fits).
    """
    from ..io.official import DamagedCheckpointError, OfficialCheckpointError, read_official

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no official checkpoint at {path!r}")
    try:
        sd, checked = read_official(path)
    except DamagedCheckpointError as e:
        raise CheckpointMismatchError(f"{path}: not a readable PyTorch checkpoint: {e.reason}") from e
    except OfficialCheckpointError as e:
        raise CheckpointMismatchError(f"{path}: not a TD-MPC2 checkpoint this code can evaluate: {e}") from e
    except ImportError:
        raise
    except Exception as e:  # torch.load(weights_only=True) refusing the file: pickled code, damage, not a .pt
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise CheckpointMismatchError(
            f"{path}: not a readable PyTorch checkpoint: torch.load(weights_only=True) refused it "
            f"({type(e).__name__}{': ' + first if first else ''}); expected the {{'model': state_dict}} file "
            f"the official TDMPC2.save writes") from e
    try:
        weights = from_official(sd)
    except OfficialWeightsError as e:
        raise CheckpointMismatchError(f"{path}: not a TD-MPC2 checkpoint this code can evaluate: {e}") from e
    arch = weights.architecture
    names: tuple = ()
    label = None
    if arch.num_tasks:
        try:
            label, names = resolve_task_list(task_set, arch.num_tasks)
        except (ValueError, KeyError) as e:
            raise CheckpointMismatchError(f"{path}: {e}") from e
        masks = weights.buffers.get("_action_masks")
        if masks is not None and masks.shape[0] != len(names):
            raise CheckpointMismatchError(f"{path}: _action_masks has {masks.shape[0]} rows, the task embedding "
                                          f"{len(names)}")
    elif task_set is not None:
        raise CheckpointMismatchError(f"{path} is a single-task checkpoint ({arch.describe()}); a task set "
                                      f"({task_set!r}) applies to multi-task checkpoints only")
    fits = _matching_size(arch, label)
    if model_size is not None:
        if int(model_size) not in MODEL_SIZES:
            raise CheckpointMismatchError(f"model_size={model_size!r} is not an official size; accepted: "
                                          f"{sorted(MODEL_SIZES)}")
        if fits != int(model_size):
            want = official_architecture(int(model_size), arch.obs_dim, arch.action_dim, task_set=label,
                                         num_tasks=arch.num_tasks)
            diff = ", ".join(f"{k} {getattr(arch, k)} (file) vs {v}" for k, v in want.items() if getattr(arch, k) != v)
            raise CheckpointMismatchError(
                f"{path} does not fit model size {model_size}: {diff}. "
                + (f"It fits --model-size {fits}." if fits is not None else
                   "It fits no official model size: leave the model size out (inferred from the weights)."))
    return OfficialCheckpoint(path=path, sha256=checked.sha256, weights=weights, architecture=arch,
                              model_size=fits, task_set=label, task_names=tuple(names), check=checked)


def _official_name(task: str) -> str:
    return task[len(PREFIX):] if task.startswith(PREFIX) else task


@dataclasses.dataclass
class OfficialEvaluation:
    """What :func:`evaluate_official` returns.

    rows: one dict per episode (``task``, ``env_id``, ``task_index`` (-1 single-task),
    ``episode``, ``return``, ``length`` (agent steps), ``env_frames``, ``seed``, ``success`` and
    ``success_any``: the env's success flag at the episode's last step (the official rule) and at
    any step, None for an env without one);
    skipped: {task: reason} of the tasks of a multi-task set not evaluated (``"all"`` only);
    checkpoint: the :class:`OfficialCheckpoint`; settings: the protocol (episodes, seed,
    episode length, the planner's settings, gamma per task); compile_seconds: per program.
    """

    rows: list
    skipped: dict
    checkpoint: OfficialCheckpoint
    settings: dict
    compile_seconds: dict

    def returns(self) -> dict:
        """{task: mean return over its episodes}."""
        out: dict = {}
        for r in self.rows:
            out.setdefault(r["task"], []).append(r["return"])
        return {t: float(np.mean(v)) for t, v in out.items()}


def _select_tasks(ckpt: OfficialCheckpoint, tasks) -> tuple[list, dict]:
    """(the tasks to evaluate as (official name, task index or None), skipped {name: reason})."""
    if isinstance(tasks, str):
        tasks = [tasks]
    tasks = [str(t) for t in tasks]
    if not tasks:
        raise ValueError("no task to evaluate: name a dm_control task (dmc:<name>) or, for a multi-task "
                         "checkpoint, 'all' or its tasks")
    if not ckpt.multitask:
        if len(tasks) != 1 or tasks[0] in ("all", *task_set_names()):
            raise CheckpointMismatchError(
                f"{ckpt.path} is a single-task checkpoint ({ckpt.architecture.describe()}): name its one "
                f"dm_control task, e.g. dmc:dog-run (got {tasks})")
        name = _official_name(tasks[0])
        if unavailable_reason(name) is not None:
            if env_id_of(name) is not None:  # a task of ours whose suite is not installed
                raise ImportError(unavailable_reason(name))
            from ..envs.dmcontrol_ids import unknown_id_error
            raise unknown_id_error(PREFIX + name)
        return [(name, None)], {}
    available = [n for n in ckpt.task_names if unavailable_reason(n) is None]
    if any(t in ("all", ckpt.task_set) for t in tasks):
        if len(tasks) != 1:
            raise ValueError(f"'all' evaluates every task of the checkpoint's set; do not list others beside it "
                             f"(got {tasks})")
        skipped = {n: unavailable_reason(n) for n in ckpt.task_names if unavailable_reason(n) is not None}
        return [(n, i) for i, n in enumerate(ckpt.task_names) if n not in skipped], skipped
    out = []
    for t in tasks:
        name = _official_name(t)
        if name not in ckpt.task_names:
            raise CheckpointMismatchError(
                f"task {t!r} is not one of the {len(ckpt.task_names)} tasks of {ckpt.path} (task set "
                f"{ckpt.task_set}); its tasks available here: {[env_id_of(n) for n in available]}, or 'all'")
        why = unavailable_reason(name)
        if why is not None:
            raise ValueError(f"task {t!r} of {ckpt.task_set} cannot be evaluated here: {why}. Tasks of this "
                             f"checkpoint available here: {[env_id_of(n) for n in available]} (or 'all', which "
                             "skips the others and records why)")
        out.append((name, ckpt.task_names.index(name)))
    return out, {}


def evaluate_official(checkpoint, tasks="all", *, model_size: Optional[int] = None,
                      task_set: Union[str, Sequence[str], None] = None, episodes: int = DEFAULT_EPISODES,
                      seed: int = DEFAULT_SEED, episode_length: int = 1000,
                      planner: Optional[Mapping[str, object]] = None,
                      progress: Optional[Callable[[str], None]] = None) -> OfficialEvaluation:
    """Evaluate an official checkpoint with our planner on dm_control (the official protocol).

    Args:
      checkpoint: a ``.pt`` path or an :class:`OfficialCheckpoint` (:func:`load_checkpoint`).
      tasks: single-task: its one task (``"dmc:dog-run"`` or ``"dog-run"``); multi-task:
        ``"all"`` (or the set's name: every task available here, the others skipped with the
        reason in ``skipped``) or a list of the set's tasks (one that is not available here
        is an error listing those that are).
      model_size: the official size the checkpoint must be (None: inferred from the weights).
      task_set: multi-task: ``"mt30"``, ``"mt80"`` or the task names in index order (None:
        the official set of the checkpoint's task count).
      episodes: episodes per task (official default 10); seed: the evaluation seed (the
        initial states and the planner's draws derive from it; official default 1).
      episode_length: simulator steps per episode of the dm_control tasks (the official 1000,
        i.e. 500 agent steps at the paper's action repeat 2; shorter only for smoke tests);
        Meta-World tasks keep their own 200 (:meth:`_Protocol.length_of`).
      planner: overrides of :data:`PLANNER_KEYS` (the paper's values otherwise).
      progress: called with one line (no newline) at each task's start and end, after its
        first measured agent step and then at most every 30 s, each with the time it expects
        to still take (:class:`tdmpc2core.run.progress.EvalProgress`); None: silent.

    Returns:
      :class:`OfficialEvaluation`.

    Raises:
      FileNotFoundError, ImportError, CheckpointMismatchError: see :func:`load_checkpoint`;
        also a task whose observation or action dims do not fit the weights (names both).
      ValueError: an unknown or unavailable task (lists the tasks accepted), ``episodes`` < 1,
        an unknown planner setting.
    """
    ckpt = checkpoint if isinstance(checkpoint, OfficialCheckpoint) else load_checkpoint(
        checkpoint, model_size=model_size, task_set=task_set)
    if isinstance(checkpoint, OfficialCheckpoint) and model_size is not None and ckpt.model_size != int(model_size):
        raise CheckpointMismatchError(f"{ckpt.path} is model size {ckpt.model_size}, not {model_size}")
    if int(episodes) < 1:
        raise ValueError(f"episodes={episodes!r}: must evaluate at least one episode")
    planner = _checked_planner(planner)
    selected, skipped = _select_tasks(ckpt, tasks)
    proto = _Protocol(int(episodes), int(seed), int(episode_length), planner, progress)
    if not ckpt.architecture.num_tasks:
        cfg = _evaluate_single(ckpt, selected, proto)
    else:
        cfg = _evaluate_multi(ckpt, selected, proto)
    settings = dict(episodes=proto.episodes, seed=proto.seed, episode_length=proto.episode_length,
                    action_repeat=proto.repeats, eval_mode=True, gamma=proto.gammas,
                    planner={k: getattr(cfg, k) for k in PLANNER_KEYS}, mpc=bool(cfg.mpc),
                    reference_commit=REFERENCE_COMMIT,
                    task_set_source=task_set_source() if ckpt.task_set in task_set_names() else None)
    return OfficialEvaluation(rows=proto.rows, skipped=skipped, checkpoint=ckpt, settings=settings,
                              compile_seconds=proto.compile_seconds)


def _checked_planner(planner) -> dict:
    """The planner overrides as a dict; ValueError for an unknown setting or a bad value."""
    planner = dict(planner or {})
    unknown = sorted(set(planner) - set(PLANNER_KEYS))
    if unknown:
        raise ValueError(f"unknown planner setting(s) {unknown}; accepted: {list(PLANNER_KEYS)}")
    for k, v in planner.items():
        if k in _PLANNER_INTS and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
            raise ValueError(f"planner setting {k}={v!r} must be an integer")
        if k not in _PLANNER_INTS and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0):
            raise ValueError(f"planner setting {k}={v!r} must be a number above 0")
    if planner.get("min_std", 0.05) > planner.get("max_std", 2.0):
        raise ValueError(f"planner settings min_std={planner.get('min_std', 0.05)} > max_std={planner.get('max_std', 2.0)}")
    return planner


@dataclasses.dataclass
class _Protocol:
    """One evaluation's settings and what it collects (rows, discounts, action repeats, compile
    seconds)."""

    episodes: int
    seed: int
    episode_length: int
    planner: dict
    emit: Optional[Callable[[str], None]] = None
    rows: list = dataclasses.field(default_factory=list)
    gammas: dict = dataclasses.field(default_factory=dict)
    repeats: dict = dataclasses.field(default_factory=dict)
    compile_seconds: dict = dataclasses.field(default_factory=dict)

    def length_of(self, env_id: str):
        """The ``episode_length`` to build ``env_id`` with: :attr:`episode_length` for a suite
        whose caller sets the time limit (dm_control), None for one that keeps its own
        (Meta-World: 100 agent steps, whatever the protocol's length)."""
        from ..envs import suite_for

        return self.episode_length if suite_for(env_id).keeps_episode_length else None

    def tracker(self, tasks):
        """An :class:`~tdmpc2core.run.progress.EvalProgress` of ``tasks`` ((name, agent steps)
        each) reporting to :attr:`emit`, or None when there is none."""
        from ..run.progress import EvalProgress

        return None if self.emit is None else EvalProgress(tasks, self.episodes, self.emit)

    def add_rows(self, name, index, env, ret, length, success=None):
        """One row per episode; ``success``: None, or (last, any) bool [E] for an env with a
        success flag (:func:`_host_episodes`)."""
        for ep in range(self.episodes):
            self.rows.append({"task": name, "env_id": env_id_of(name), "task_index": -1 if index is None else int(index),
                              "episode": ep, "return": float(ret[ep]), "length": int(length[ep]),
                              "env_frames": int(length[ep]) * int(env.spec.action_repeat), "seed": self.seed,
                              "success": None if success is None else bool(success[0][ep]),
                              "success_any": None if success is None else bool(success[1][ep])})


def _check_dims(ckpt: OfficialCheckpoint, env, name) -> None:
    """CheckpointMismatchError when task ``name``'s env does not fit the weights' dims."""
    s, arch = env.spec, ckpt.architecture
    if arch.num_tasks:
        bad = s.obs_dim > arch.obs_dim or s.action_dim > arch.action_dim
        want = f"at most obs_dim {arch.obs_dim} and action_dim {arch.action_dim} (padded)"
    else:
        bad = s.obs_dim != arch.obs_dim or s.action_dim != arch.action_dim
        want = f"obs_dim {arch.obs_dim} and action_dim {arch.action_dim}"
    if bad:
        raise CheckpointMismatchError(
            f"{ckpt.path} does not fit task {env_id_of(name)}: the task has obs_dim {s.obs_dim} and action_dim "
            f"{s.action_dim}, the weights take {want}")


def _evaluate_single(ckpt: OfficialCheckpoint, selected, proto: _Protocol):
    """A single-task checkpoint on its task (one seed): its episodes stepped together on the
    host (:func:`_host_episodes`) with the keys :meth:`TDMPC2.evaluate` gives seed
    ``proto.seed`` (evaluation index 0). Returns the resolved configuration."""
    import jax
    import jax.numpy as jnp

    from ..model.official import agent_state
    from ..run.compiled import per_seed
    from .common import eval_key
    from .single_task import TDMPC2

    widths = ckpt.architecture.config_kwargs()
    (name, _), = selected
    agent = TDMPC2(env_id_of(name), model_size=widths.pop("model_size"),
                   episode_length=proto.length_of(env_id_of(name)), **widths, **proto.planner)
    env = agent.env
    _check_dims(ckpt, env, name)
    params = agent_state(agent.wm, ckpt.weights).params
    plan_fn = per_seed(_plan_batch(agent.wm), name="plan", compile_seconds=proto.compile_seconds, batched=False)
    keys = jax.random.split(eval_key(proto.seed, 0), proto.episodes)  # as TDMPC2.evaluate's episodes_of_seed
    progress = proto.tracker([(name, env.spec.episode_length)])
    ret, length, success = _host_episodes(env, plan_fn, params, None, None, jnp.float32(agent.gamma), env.spec.obs_dim,
                                 agent.cfg.horizon, env.spec.action_dim, keys, proto.compile_seconds, progress, name)
    proto.add_rows(name, None, env, ret, length, success)
    proto.gammas[name] = float(agent.gamma)
    proto.repeats[name] = int(agent.action_repeat)
    return agent.cfg


def _evaluate_multi(ckpt: OfficialCheckpoint, selected, proto: _Protocol):
    """A multi-task checkpoint on each selected task: one planner program for every task (task
    embedding, mask and discount are arguments); the episodes' loop runs on the host, as the
    official evaluate.py's, stepping each task's environment (vmapped over the episodes)
    between planner calls. Returns the resolved configuration."""
    import jax
    import jax.numpy as jnp

    from ..envs import make_env
    from ..model.update import embed
    from ..model.world_model import WorldModel
    from ..run.compiled import per_seed
    from .common import eval_key

    arch = ckpt.architecture
    envs = {name: make_env(env_id_of(name), episode_length=proto.length_of(env_id_of(name))) for name, _ in selected}
    masks = ckpt.weights.buffers.get("_action_masks")  # the later (nested) layout stores them
    for name, index in selected:
        _check_dims(ckpt, envs[name], name)
        if masks is not None and int(np.sum(masks[index])) != envs[name].spec.action_dim:
            raise CheckpointMismatchError(
                f"{ckpt.path}: task {index} ({name}) has {int(np.sum(masks[index]))} action dims in the "
                f"checkpoint's _action_masks, the dm_control task {envs[name].spec.action_dim}: is the task list "
                f"({ckpt.task_set}) the one the checkpoint was trained on?")
    T_min = min(env.spec.episode_length for env in envs.values()) if envs else proto.episode_length // 2
    widths = arch.config_kwargs()
    size = widths.pop("model_size")
    cfg = resolve_config(TDMPC2Config(model_size=size, **widths, **proto.planner), episode_length=T_min,
                         action_dim=arch.action_dim, backend=jax.default_backend())
    wm = WorldModel(cfg, arch.obs_dim, arch.action_dim, arch.task_dim, arch.num_tasks)
    params = jax.tree_util.tree_map(jnp.asarray, ckpt.weights.params)
    plan_fn = per_seed(_plan_batch(wm), name="plan", compile_seconds=proto.compile_seconds, batched=False)
    H, A = cfg.horizon, arch.action_dim
    progress = proto.tracker([(name, envs[name].spec.episode_length) for name, _ in selected])
    for name, index in selected:
        env = envs[name]
        a_dim = env.spec.action_dim
        gamma = discount_from_episode_length(env.spec.episode_length, cfg.discount_denom, cfg.discount_min,
                                             cfg.discount_max)
        proto.gammas[name] = gamma
        proto.repeats[name] = int(env.spec.action_repeat)
        mask = jnp.zeros((A,), jnp.float32).at[:a_dim].set(1.0)
        e = embed(params["task_emb"], index)  # renormalised at look-up, not written back (K3)
        key = eval_key(proto.seed, 0, index)
        ret, length, success = _host_episodes(env, plan_fn, params, e, mask, jnp.float32(gamma), arch.obs_dim, H, A,
                                     jax.random.split(key, proto.episodes), proto.compile_seconds, progress, name)
        proto.add_rows(name, index, env, ret, length, success)
    return cfg


def _plan_batch(wm):
    """(params, obs [E, O], mean [E, H, A], t0, keys [E, 2], e, mask, gamma) -> (actions [E, A],
    means [E, H, A]): one eval-mode plan per episode (vmapped), the task as arguments."""
    import jax

    from ..model.planner import plan

    def f(params, obs, mean, t0, keys, e, mask, gamma):
        return jax.vmap(lambda o, m, k: plan(wm, params, o, m, t0, True, gamma, k, e, mask))(obs, mean, keys)

    return f


def _host_episodes(env, plan_fn, params, e, mask, gamma, obs_dim: int, H: int, A: int, keys, compile_seconds,
                   progress=None, name: str = ""):
    """The episodes of one task, one per key, stepped together on the host: the keys split as
    :func:`tdmpc2core.agents.common.eval_episode` splits them (a fresh initial state, then T
    agent steps, ``t0`` on the first), observations zero-padded to ``obs_dim``, the env given
    its own action dims (``e``, ``mask``: None for a single-task model). ``progress``: an
    :class:`~tdmpc2core.run.progress.EvalProgress` told of task ``name``'s start, each agent
    step and its end, or None. Returns (returns float64 [E], lengths int64 [E], success): success
    None for an env without a success flag, else (at the last step taken, at any step taken)
    bool [E], as :func:`~tdmpc2core.agents.common.eval_episode` counts them."""
    import jax
    import jax.numpy as jnp

    from ..run.compiled import per_seed

    if progress is not None:
        progress.start_task(name)
    T, a_dim, pad = env.spec.episode_length, env.spec.action_dim, obs_dim - env.spec.obs_dim
    E = keys.shape[0]
    k_reset, k_loop = jnp.moveaxis(jax.vmap(jax.random.split)(keys), 1, 0)  # [E, 2] each
    step_keys = jax.vmap(lambda k: jax.random.split(k, T))(k_loop)  # [E, T, 2]
    # vmapped over the episodes
    reset = per_seed(env.reset, name="env", compile_seconds=compile_seconds)
    step = per_seed(env.step, name="env", compile_seconds=compile_seconds)
    split = per_seed(jax.random.split, name="split")
    state, obs = reset(k_reset)
    mean = jnp.zeros((E, H, A), jnp.float32)
    ret, length = np.zeros(E, np.float64), np.zeros(E, np.int64)
    alive = np.ones(E, bool)
    with_success = bool(getattr(env.spec, "has_success", False))
    last, anyv = np.zeros(E, bool), np.zeros(E, bool)
    for t in range(T):
        k_act, k_step = jnp.moveaxis(split(step_keys[:, t]), 1, 0)
        a, mean = plan_fn(params, jnp.pad(obs, ((0, 0), (0, pad))), mean, jnp.asarray(t == 0), k_act, e, mask, gamma)
        state, out = step(state, a[:, :a_dim], k_step)  # the env gets its own dims only
        r, term = np.asarray(out.reward, np.float64), np.asarray(out.terminated, bool)
        ret += np.where(alive, r, 0.0)
        length += alive
        if with_success:
            flag = np.asarray(out.success, bool)
            last = np.where(alive, flag, last)
            anyv |= alive & flag
        alive &= ~term
        obs = out.obs
        if progress is not None:
            progress.step_done(t)
    if progress is not None:
        progress.end_task(float(np.mean(ret)))
    return ret, length, ((last, anyv) if with_success else None)


__all__ = ["CheckpointMismatchError", "OfficialCheckpoint", "OfficialEvaluation", "PLANNER_KEYS",
           "DEFAULT_EPISODES", "DEFAULT_SEED", "official_architecture", "load_checkpoint", "evaluate_official",
           "file_sha256"]
