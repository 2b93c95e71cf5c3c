"""Episode datasets: export a run's replay, concatenate seeds, pool tasks, Parquet I/O.

The multi-task agent learns offline from the replay of single-task agents (spec §10). This
module turns a run's replay into an :class:`EpisodeDataset` (rows of complete episodes,
exactly as the replay holds them), joins the seeds of a task, pools tasks with zero padding,
and stores datasets as Parquet files that pyarrow, pandas, Polars and DuckDB read as they are.

Row layout (the reference's TensorDict rows, spec §9): one row per agent step, episodes
contiguous; ``step`` 0 is the reset row (the initial observation, NaN action and reward,
``terminated`` and ``truncated`` false); row ``t + 1`` holds o_{t+1}, a_t, r_t and whether the
episode terminated (the env's terminal state) or was truncated (the time limit) at that step.
Every episode of a dataset is complete: its last row, and only it, is terminated or
truncated.

File format (``FORMAT_NAME`` version ``FORMAT_VERSION``; docs/artifacts.md): columns
``episode`` int64, ``step`` int32, ``obs`` fixed_size_list<float32>[O], ``action``
fixed_size_list<float32>[A], ``reward`` float32, ``terminated`` bool, ``truncated`` bool,
``task`` string, ``seed`` int64 (null: unknown) and ``run_id`` string (null: unknown), and no
other column; the Parquet key-value metadata ``tdmpc2core.dataset`` holds a JSON object with
exactly the keys ``format``, ``version``, ``tasks`` (the task table) and ``provenance``
(free-form). Reading refuses a file with another column or another key in that object
(joining or pooling would otherwise drop it without a word); key-value metadata other
libraries add under their own keys (``ARROW:schema``, ``pandas``) describe no data and are
ignored. Row groups hold ``ROW_GROUP_ROWS`` rows, so readers can stream.

Runs: every episode comes from one run, a :class:`RunInfo` (the training seed and the run's
id, :func:`tdmpc2core.io.provenance.run_id`; either may be None), so users filter a task's or
a pool's rows by seed in DuckDB or Polars (``WHERE task = 'pendulum' AND seed = 1``) as in
:meth:`EpisodeDataset.select`. In memory the rows hold an index into the dataset's run table
(as they do into its task table); in the file, the ``seed`` and ``run_id`` columns.
Version 1 files (without the two columns) are read too: each task's run comes from the
provenance where it names a single run, else it is unknown (:func:`runs_from_provenance`).

Short episodes: an episode with fewer than horizon + 1 rows can never be sampled (slices
never cross episodes, spec §9). Datasets keep such episodes (they are real data, e.g. an
early termination); the samplers drop them with a warning naming how many
(:func:`sampleable_episodes`) and refuse a dataset where none is left.
"""
from __future__ import annotations

import dataclasses
import json
import os
import warnings
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np

from . import atomic
from .provenance import json_default as _json_default

FORMAT_NAME = "tdmpc2core.episodes"
#: the version written; version 1 (no ``seed`` and ``run_id`` columns) is still read
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
METADATA_KEY = b"tdmpc2core.dataset"
ROW_GROUP_ROWS = 65_536
COLUMNS = ("episode", "step", "obs", "action", "reward", "terminated", "truncated", "task", "seed", "run_id")
#: the columns of a version-1 file
COLUMNS_V1 = COLUMNS[:8]
#: how the files are written (the small columns dictionary-encoded and with statistics, so a
#: filter on task or seed skips row groups)
PARQUET_OPTIONS = dict(compression="zstd", use_dictionary=["task", "seed", "run_id"],
                       write_statistics=["episode", "step", "task", "seed", "run_id"])
#: the keys of the ``tdmpc2core.dataset`` metadata object (anything else is refused)
METADATA_FIELDS = ("format", "version", "tasks", "provenance")


class DatasetError(ValueError):
    """A dataset file or object that does not follow the format; the message names what."""


@dataclasses.dataclass(frozen=True)
class TaskInfo:
    """One task of a dataset (a row of its task table).

    Attributes:
      name: unique task name.
      obs_dim: the task's own observation width (before padding).
      action_dim: the task's own action width (before padding).
      episode_length: T, agent steps of an episode that is not terminated.
      action_repeat: simulator steps per agent step (env frames = agent steps x this).
      discount: the task's discount gamma (spec §1.3: from T).
      env_id: the id :func:`tdmpc2core.envs.make_env` takes, or None (a custom env).
      env_params: the environment settings the task's env was built with, as plain data
        (:attr:`tdmpc2core.envs.Env.env_params`: what :func:`~tdmpc2core.envs.make_env` takes to
        build it again), or None: the suite's defaults (an empty mapping is stored as None).
        Not part of the hash; compared by ``==``.
    """

    name: str
    obs_dim: int
    action_dim: int
    episode_length: int
    action_repeat: int
    discount: float
    env_id: Optional[str] = None
    env_params: Optional[dict] = dataclasses.field(default=None, hash=False)

    def __post_init__(self):
        p = self.env_params
        if p is not None and not isinstance(p, dict):
            raise DatasetError(f"task {self.name!r}: env_params must be a mapping of setting -> value or None, "
                               f"got {type(p).__name__}")
        try:  # plain data (a JSON object), a copy: the task table is written as JSON
            p = json.loads(json.dumps(p, allow_nan=False)) if p else None
        except (TypeError, ValueError) as exc:
            raise DatasetError(f"task {self.name!r}: env_params {p!r} is not plain data ({exc})") from None
        object.__setattr__(self, "env_params", p)

    def to_json(self) -> dict:
        """The task table entry: every field, ``env_params`` only when set (so the entry of a task
        with default settings is the one files always had)."""
        d = dataclasses.asdict(self)
        if d["env_params"] is None:
            del d["env_params"]
        return d

    @classmethod
    def from_json(cls, d: dict, where: str) -> "TaskInfo":
        """The entry ``d`` of a file's task table (``env_params`` absent: the defaults, as in
        files written before it was recorded). Raises :class:`DatasetError` naming ``where``."""
        fields = {f.name: f.type for f in dataclasses.fields(cls)}
        if not isinstance(d, dict) or set(d) - set(fields) or {"name", "obs_dim", "action_dim",
                                                                "episode_length", "action_repeat",
                                                                "discount"} - set(d):
            raise DatasetError(f"{where}: a task table entry must have the keys {sorted(fields)} (env_id and "
                               f"env_params optional), got {d!r}")
        try:
            return cls(name=str(d["name"]), obs_dim=int(d["obs_dim"]), action_dim=int(d["action_dim"]),
                       episode_length=int(d["episode_length"]), action_repeat=int(d["action_repeat"]),
                       discount=float(d["discount"]), env_id=None if d.get("env_id") is None else str(d["env_id"]),
                       env_params=d.get("env_params"))
        except (TypeError, ValueError) as exc:
            raise DatasetError(f"{where}: bad task table entry {d!r} ({exc})") from None


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """The run that produced episodes (an entry of a dataset's run table; the file's ``seed``
    and ``run_id`` columns).

    Attributes:
      seed: the training seed (an int), or None where unknown (the official mt30 / mt80 data;
        a version-1 file whose provenance does not name a single seed; an export made without
        ``seed``).
      run_id: the run's id (``train-single`` writes :func:`tdmpc2core.io.provenance.run_id`,
        also in the run's ``run.json``), or None where unknown.
    """

    seed: Optional[int] = None
    run_id: Optional[str] = None


@dataclasses.dataclass(frozen=True, eq=False)
class EpisodeDataset:
    """Rows of complete episodes of one or several tasks, episodes contiguous (module docstring).

    Attributes (R rows, E episodes, O / A the padded widths, the largest task's):
      obs: [R, O] float32, zero-padded at the end beyond each task's obs_dim.
      action: [R, A] float32, zero-padded beyond each task's action_dim; NaN in the task's own
        dims on reset rows.
      reward: [R] float32, NaN on reset rows.
      terminated, truncated: [R] bool.
      episode: [R] int64, 0 .. E-1 in row order.
      step: [R] int32, 0 on the reset row.
      task: [R] int32, index into ``tasks``.
      tasks: the task table.
      provenance: JSON-serialisable description of where the data came from.
      run: [R] int32, index into ``runs`` (one run per episode); None: every row the one run
        of ``runs``, or of ``(RunInfo(),)`` (unknown seed and id) when ``runs`` is empty too.
      runs: the run table, tuple of unique :class:`RunInfo`.
    """

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    episode: np.ndarray
    step: np.ndarray
    task: np.ndarray
    tasks: tuple
    provenance: dict = dataclasses.field(default_factory=dict)
    run: Optional[np.ndarray] = None
    runs: tuple = ()

    def __post_init__(self):
        runs = tuple(self.runs) if self.runs else (RunInfo(),)
        object.__setattr__(self, "runs", runs)
        if self.run is None:
            R = int(np.shape(self.reward)[0]) if np.ndim(self.reward) >= 1 else 0
            object.__setattr__(self, "run", np.zeros(R, np.int32))

    def __repr__(self) -> str:
        tasks = ", ".join(f"{t.name} (obs {t.obs_dim}, action {t.action_dim}, T {t.episode_length})"
                          for t in self.tasks)
        seeds = sorted({r.seed for r in self.runs}, key=lambda x: (x is None, x or 0))
        return (f"EpisodeDataset({self.num_episodes} episodes, {self.num_transitions} agent steps, "
                f"{self.num_rows} rows, obs {self.obs_dim}, action {self.action_dim}; tasks: {tasks}; "
                f"{len(self.runs)} run(s), seeds {seeds})")

    # ---- derived -----------------------------------------------------------------------
    @property
    def num_rows(self) -> int:
        return int(self.reward.shape[0])

    @property
    def episode_starts(self) -> np.ndarray:
        """[E] int64: the row of each episode's reset row."""
        return np.flatnonzero(self.step == 0).astype(np.int64)

    @property
    def episode_rows(self) -> np.ndarray:
        """[E] int64: rows of each episode (agent steps + 1)."""
        starts = self.episode_starts
        return np.diff(np.append(starts, self.num_rows)).astype(np.int64)

    @property
    def episode_task(self) -> np.ndarray:
        """[E] int32: task index of each episode."""
        return self.task[self.episode_starts]

    @property
    def episode_run(self) -> np.ndarray:
        """[E] int32: run index (into ``runs``) of each episode."""
        return self.run[self.episode_starts]

    @property
    def num_episodes(self) -> int:
        return int(np.count_nonzero(self.step == 0))

    @property
    def num_transitions(self) -> int:
        """Agent steps held: rows minus one reset row per episode."""
        return self.num_rows - self.num_episodes

    @property
    def obs_dim(self) -> int:
        return int(self.obs.shape[1])

    @property
    def action_dim(self) -> int:
        return int(self.action.shape[1])

    @property
    def task_names(self) -> list:
        return [t.name for t in self.tasks]

    @property
    def nbytes(self) -> int:
        return sum(int(getattr(self, f).nbytes) for f in
                   ("obs", "action", "reward", "terminated", "truncated", "episode", "step", "task", "run"))

    def episode_returns(self) -> np.ndarray:
        """[E] float64: undiscounted return of each episode (sum of its rewards)."""
        r = np.where(self.step == 0, 0.0, self.reward.astype(np.float64))
        return np.add.reduceat(r, self.episode_starts) if self.num_rows else np.zeros(0)

    def rows_of(self, task=None, seed=None, run_id=None) -> np.ndarray:
        """[R] bool: the rows of the episodes whose task, seed and run id are among those given,
        as a Parquet filter sees them (``WHERE task = ... AND seed = ...``).

        Args:
          task: a task name or a collection of names; None: any task.
          seed: an int or a collection of ints (a run whose seed is unknown matches none, as
            ``seed = 1`` drops SQL's nulls); None: any seed.
          run_id: a run id or a collection of ids (an unknown id matches none); None: any run.
        Raises:
          ValueError: a task name that is not in the task table.
        """
        as_set = lambda v: {v} if isinstance(v, (str, int, np.integer)) else set(v)
        keep_task = np.ones(len(self.tasks), bool)
        if task is not None:
            names = as_set(task)
            unknown = sorted(names - set(self.task_names))
            if unknown:
                raise ValueError(f"rows_of: task(s) {unknown} are not in the task table {self.task_names}")
            keep_task = np.array([t.name in names for t in self.tasks], bool)
        keep_run = np.ones(len(self.runs), bool)
        if seed is not None:
            seeds = {int(x) for x in as_set(seed)}
            keep_run &= np.array([r.seed in seeds for r in self.runs], bool)
        if run_id is not None:
            ids = as_set(run_id)
            keep_run &= np.array([r.run_id in ids for r in self.runs], bool)
        return keep_task[self.task] & keep_run[self.run]

    def select(self, task=None, seed=None, run_id=None) -> "EpisodeDataset":
        """The episodes :meth:`rows_of` picks (e.g. one seed's, or all but a diverged seed's),
        rows unchanged and in order, episodes renumbered from 0; the same task table (so the
        same padded widths), the run table of the episodes kept, provenance ``{"kind":
        "select", "filter": {...}, "source": <this dataset's provenance>}``.

        Raises:
          ValueError: no episode matches, or a task name that is not in the task table.
        """
        mask = self.rows_of(task, seed, run_id)
        filters = {k: (sorted(v) if isinstance(v, (set, frozenset)) else v) for k, v in
                   (("task", task), ("seed", seed), ("run_id", run_id)) if v is not None}
        if not mask.any():
            raise ValueError(f"select: no episode matches {filters}")
        run, runs = compact_runs(self.run[mask], self.runs)
        step = self.step[mask]
        return EpisodeDataset(
            obs=self.obs[mask], action=self.action[mask], reward=self.reward[mask],
            terminated=self.terminated[mask], truncated=self.truncated[mask],
            episode=(np.cumsum(step == 0) - 1).astype(np.int64), step=step, task=self.task[mask],
            tasks=self.tasks, provenance={"kind": "select", "filter": filters, "source": self.provenance},
            run=run, runs=runs).check("select")

    def check(self, where: str = "dataset") -> "EpisodeDataset":
        """Validate every invariant of the format; raises :class:`DatasetError` naming the
        first violation (``where`` prefixes the message, e.g. the file). Returns self."""
        _check(self, where)
        return self


# ============================================================================ validation
def _check(ds: EpisodeDataset, where: str) -> None:
    """Every invariant of the format, in this order (the first violation raises
    :class:`DatasetError`): the columns' dtypes and lengths, the task table, the run table, the
    episodes' numbering, each row's contents, the reset rows and each episode's end."""
    R = _check_columns(ds, where)
    O, A = _check_task_table(ds, where, R)
    _check_run_table(ds, where)
    reset, starts, ep_index = _check_episode_numbering(ds, where)
    _check_row_contents(ds, where, reset, O, A)
    _check_episode_ends(ds, where, reset, starts, ep_index)


def _check_columns(ds: EpisodeDataset, where: str) -> int:
    """Each column's dtype, dimensions and length; returns the number of rows."""
    R = ds.reward.shape[0] if np.ndim(ds.reward) == 1 else -1
    spec = {"obs": (np.float32, 2), "action": (np.float32, 2), "reward": (np.float32, 1),
            "terminated": (np.bool_, 1), "truncated": (np.bool_, 1), "episode": (np.int64, 1),
            "step": (np.int32, 1), "task": (np.int32, 1), "run": (np.int32, 1)}
    for name, (dtype, ndim) in spec.items():
        a = getattr(ds, name)
        if not isinstance(a, np.ndarray) or a.dtype != dtype or a.ndim != ndim or a.shape[0] != R:
            got = f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}"
            raise DatasetError(f"{where}: column {name!r} must be {np.dtype(dtype).name} with {ndim} dim(s) "
                               f"and {R} rows, got {got}")
    return R


def _check_task_table(ds: EpisodeDataset, where: str, R: int) -> tuple[int, int]:
    """The task table (non-empty, unique names) against the rows and the padded widths;
    returns (obs width, action width)."""
    if not ds.tasks:
        raise DatasetError(f"{where}: the task table is empty")
    names = [t.name for t in ds.tasks]
    if len(set(names)) != len(names):
        raise DatasetError(f"{where}: task names must be unique, got {names}")
    if R == 0:
        raise DatasetError(f"{where}: no rows (a dataset holds at least one complete episode)")
    O = max(t.obs_dim for t in ds.tasks)
    A = max(t.action_dim for t in ds.tasks)
    if ds.obs.shape[1] != O:
        raise DatasetError(f"{where}: obs width {ds.obs.shape[1]} disagrees with the task table "
                           f"(largest obs_dim {O})")
    if ds.action.shape[1] != A:
        raise DatasetError(f"{where}: action width {ds.action.shape[1]} disagrees with the task table "
                           f"(largest action_dim {A})")
    if ds.task.min() < 0 or ds.task.max() >= len(ds.tasks):
        raise DatasetError(f"{where}: task index out of range [0, {len(ds.tasks)})")
    return O, A


def _check_run_table(ds: EpisodeDataset, where: str) -> None:
    """The run table (unique :class:`RunInfo`, each seed an int or None, each id a string or
    None) against the rows' run indices."""
    runs = ds.runs
    if not all(isinstance(r, RunInfo) for r in runs):
        raise DatasetError(f"{where}: the run table must hold RunInfo entries, got {runs!r}")
    for r in runs:
        if not (r.seed is None or (isinstance(r.seed, (int, np.integer)) and not isinstance(r.seed, bool))):
            raise DatasetError(f"{where}: run {r}: the seed must be an int or None")
        if not (r.run_id is None or isinstance(r.run_id, str)):
            raise DatasetError(f"{where}: run {r}: the run id must be a string or None")
    if len(set(runs)) != len(runs):
        raise DatasetError(f"{where}: the run table has repeated entries: {runs}")
    if ds.run.min() < 0 or ds.run.max() >= len(runs):
        raise DatasetError(f"{where}: run index out of range [0, {len(runs)})")


def _check_episode_numbering(ds: EpisodeDataset, where: str):
    """Episodes contiguous, steps 0..L-1, ids consecutive, one task each; returns (the reset
    rows' mask, the episodes' first rows, each row's episode index)."""
    reset = ds.step == 0
    if not reset[0]:
        raise DatasetError(f"{where}: the first row is step {int(ds.step[0])}, not a reset row (step 0)")
    prev = np.concatenate([[-1], ds.step[:-1]])
    bad = ~reset & (ds.step != prev + 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        kind = ("a repeated step" if ds.step[i] == prev[i] else
                "a step out of order" if ds.step[i] < prev[i] else "a gap")
        raise DatasetError(f"{where}: episode {int(ds.episode[i])} has {kind} at row {i} "
                           f"(step {int(prev[i])} then {int(ds.step[i])})")
    ep_index = np.cumsum(reset) - 1
    starts = np.flatnonzero(reset)
    if not np.array_equal(ds.episode, ep_index + ds.episode[0]) or np.any(np.diff(ds.episode[starts]) != 1):
        i = int(np.flatnonzero(ds.episode != ep_index + ds.episode[0])[0]) if not np.array_equal(
            ds.episode, ep_index + ds.episode[0]) else int(starts[0])
        raise DatasetError(f"{where}: episode ids must number the episodes consecutively in row order "
                           f"(row {i}: episode {int(ds.episode[i])})")
    if np.any(ds.task != ds.task[starts][ep_index]):
        i = int(np.flatnonzero(ds.task != ds.task[starts][ep_index])[0])
        raise DatasetError(f"{where}: episode {int(ds.episode[i])} changes task at row {i}")
    if np.any(ds.run != ds.run[starts][ep_index]):
        i = int(np.flatnonzero(ds.run != ds.run[starts][ep_index])[0])
        raise DatasetError(f"{where}: episode {int(ds.episode[i])} changes run (seed or run id) at row {i}")
    return reset, starts, ep_index


def _check_row_contents(ds: EpisodeDataset, where: str, reset: np.ndarray, O: int, A: int) -> None:
    """Observations finite with zero padding; actions finite outside the reset rows, NaN in
    them, zero padding."""
    R = ds.reward.shape[0]
    # per-row contents, in blocks of rows (bounded temporaries, whatever the dataset's size)
    obs_dims_t = np.array([t.obs_dim for t in ds.tasks])
    act_dims_t = np.array([t.action_dim for t in ds.tasks])
    cols_o = np.arange(O)[None, :]
    cols_a = np.arange(A)[None, :]
    for b in range(0, R, ROW_GROUP_ROWS):
        blk = slice(b, min(R, b + ROW_GROUP_ROWS))
        obs, act, rst = ds.obs[blk], ds.action[blk], reset[blk][:, None]
        bad_row = ~np.all(np.isfinite(obs), axis=1)
        if bad_row.any():
            i = b + int(np.flatnonzero(bad_row)[0])
            raise DatasetError(f"{where}: non-finite observation at row {i} (episode {int(ds.episode[i])}, "
                               f"step {int(ds.step[i])})")
        pad_bad = (cols_o >= obs_dims_t[ds.task[blk]][:, None]) & (obs != 0)
        if pad_bad.any():
            i, j = (int(x[0]) for x in np.nonzero(pad_bad))
            t = ds.tasks[int(ds.task[b + i])]
            raise DatasetError(f"{where}: row {b + i} (task {t.name!r}) has a non-zero obs value in column {j}, "
                               f"beyond the task's obs_dim {t.obs_dim} in the task table (padding must be zero; "
                               "does the obs width disagree with the table?)")
        own_a = cols_a < act_dims_t[ds.task[blk]][:, None]
        bad_row = np.any(~rst & own_a & ~np.isfinite(act), axis=1)
        if bad_row.any():
            i = b + int(np.flatnonzero(bad_row)[0])
            raise DatasetError(f"{where}: NaN or infinite action outside a reset row at row {i} "
                               f"(episode {int(ds.episode[i])}, step {int(ds.step[i])})")
        bad_row = np.any(rst & own_a & ~np.isnan(act), axis=1)
        if bad_row.any():
            i = b + int(np.flatnonzero(bad_row)[0])
            raise DatasetError(f"{where}: the reset row {i} must have a NaN action (the reference's layout)")
        pad_bad = ~own_a & (act != 0)
        if pad_bad.any():
            i, j = (int(x[0]) for x in np.nonzero(pad_bad))
            t = ds.tasks[int(ds.task[b + i])]
            raise DatasetError(f"{where}: row {b + i} (task {t.name!r}) has a non-zero action value in column {j}, "
                               f"beyond the task's action_dim {t.action_dim} in the task table (padding must be "
                               "zero; does the action width disagree with the table?)")


def _check_episode_ends(ds: EpisodeDataset, where: str, reset: np.ndarray, starts: np.ndarray,
                        ep_index: np.ndarray) -> None:
    """Rewards finite outside the reset rows and NaN in them; reset rows not ended; each
    episode complete (its last row, and only it, ends it) and no longer than its task's T."""
    R = ds.reward.shape[0]
    if np.any(~reset & ~np.isfinite(ds.reward)):
        i = int(np.flatnonzero(~reset & ~np.isfinite(ds.reward))[0])
        raise DatasetError(f"{where}: NaN or infinite reward outside a reset row at row {i} "
                           f"(episode {int(ds.episode[i])}, step {int(ds.step[i])})")
    if np.any(reset & ~np.isnan(ds.reward)):
        raise DatasetError(f"{where}: reset rows must have a NaN reward")
    if np.any(reset & (ds.terminated | ds.truncated)):
        raise DatasetError(f"{where}: reset rows must have terminated and truncated false")
    # each episode complete: its last row, and only it, ends it; no longer than T steps
    ends = np.append(starts[1:], R) - 1
    ended = ds.terminated | ds.truncated
    if np.count_nonzero(ended) != len(starts) or not np.all(ended[ends]):
        e = int(np.flatnonzero(~ended[ends])[0]) if not np.all(ended[ends]) else \
            int(ep_index[np.flatnonzero(ended)[~np.isin(np.flatnonzero(ended), ends)][0]])
        raise DatasetError(f"{where}: episode {int(ds.episode[starts[e]])} is not complete: exactly its last "
                           "row must be terminated or truncated")
    lengths = ends - starts  # agent steps
    T = np.array([t.episode_length for t in ds.tasks])[ds.task[starts]]
    if np.any(lengths > T):
        e = int(np.flatnonzero(lengths > T)[0])
        raise DatasetError(f"{where}: episode {int(ds.episode[starts[e]])} has {int(lengths[e])} steps, more "
                           f"than its task's episode_length {int(T[e])}")


# ============================================================================ building
def from_episodes(episodes: Sequence[dict], task: TaskInfo, provenance: Optional[dict] = None, *,
                  seed: Optional[int] = None, run_id: Optional[str] = None) -> EpisodeDataset:
    """A single-task dataset from per-episode arrays (e.g. your own data).

    Args:
      episodes: dicts with ``obs`` [L, task.obs_dim], ``action`` [L, task.action_dim] (NaN
        on row 0), ``reward`` [L] (NaN on row 0) and ``terminated`` [L] bool (True only on
        the last row of an episode that terminated); L = agent steps + 1. An episode that
        did not terminate is marked truncated on its last row.
      task: the task table entry; provenance: recorded in the file.
      seed, run_id: the run every episode comes from (the ``seed`` and ``run_id`` columns;
        None: unknown, null in the file).
    Raises:
      DatasetError: the rows break the format (:meth:`EpisodeDataset.check`), or a seed that
        is not an int.
    """
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise DatasetError(f"export of {task.name}: seed must be an int or None, got {seed!r}")
    provenance = {} if provenance is None else provenance
    lengths = np.array([len(e["reward"]) for e in episodes], np.int64)
    R = int(lengths.sum())
    step = np.concatenate([np.arange(n, dtype=np.int32) for n in lengths])
    terminated = np.concatenate([np.asarray(e["terminated"], bool) for e in episodes])
    ends = np.cumsum(lengths) - 1
    truncated = np.zeros(R, bool)
    truncated[ends] = ~terminated[ends]  # an episode that did not terminate ended at its time limit
    terminated = terminated & (step > 0)
    return EpisodeDataset(
        obs=np.concatenate([e["obs"] for e in episodes]).astype(np.float32, copy=False),
        action=np.concatenate([e["action"] for e in episodes]).astype(np.float32, copy=False),
        reward=np.concatenate([e["reward"] for e in episodes]).astype(np.float32, copy=False),
        terminated=terminated, truncated=truncated,
        episode=np.repeat(np.arange(len(episodes), dtype=np.int64), lengths),
        step=step, task=np.zeros(R, np.int32), tasks=(task,), provenance=provenance,
        run=np.zeros(R, np.int32), runs=(RunInfo(None if seed is None else int(seed), run_id),),
    ).check(f"export of {task.name}")


def compact_runs(run: np.ndarray, runs: Sequence[RunInfo]):
    """(run [R] int32, runs): the entries of ``runs`` that ``run`` uses, in the order of their
    first row, and ``run`` re-indexed into them (how every builder orders its run table)."""
    used, first = np.unique(run, return_index=True)
    order = used[np.argsort(first)]
    remap = np.full(len(runs), -1, np.int32)
    remap[order] = np.arange(len(order), dtype=np.int32)
    return remap[run], tuple(runs[i] for i in order)


def _merge_runs(datasets: Sequence[EpisodeDataset]):
    """(run [R] int32 over the datasets' rows in order, run table): their run tables merged
    (the same :class:`RunInfo` in two datasets is one entry), in the order of first rows."""
    table: dict = {}
    parts = []
    for d in datasets:
        remap = np.array([table.setdefault(r, len(table)) for r in d.runs], np.int32)
        parts.append(remap[d.run])
    return compact_runs(np.concatenate(parts), tuple(table))


def concatenate_episodes(datasets: Sequence[EpisodeDataset]) -> EpisodeDataset:
    """The episodes of several runs of one task (e.g. its seeds), in the order given; each
    episode keeps its run (seed and run id), and the run tables are merged.

    Raises:
      ValueError: an empty list, or datasets that are not all of the same single task (name,
        obs and action dims, episode length, action repeat, discount and environment settings
        must agree; the message names the differing fields).
    """
    datasets = list(datasets)
    if not datasets:
        raise ValueError("concatenate_episodes: no datasets given")
    first = datasets[0]
    for i, d in enumerate(datasets):
        if len(d.tasks) != 1:
            raise ValueError(f"concatenate_episodes: dataset {i} holds {len(d.tasks)} tasks "
                             f"({d.task_names}); it joins runs of one task (use pool_tasks for several)")
        if d.tasks[0] != first.tasks[0]:
            a, b = dataclasses.asdict(first.tasks[0]), dataclasses.asdict(d.tasks[0])
            diff = {k: (a[k], b[k]) for k in a if a[k] != b[k] and k != "env_id"}
            if diff:
                raise ValueError(f"concatenate_episodes: dataset {i} disagrees with dataset 0 on {diff} "
                                 "(dataset 0's value, then dataset i's)")
    offsets = np.cumsum([0] + [d.num_episodes for d in datasets[:-1]])
    run, runs = _merge_runs(datasets)
    return EpisodeDataset(
        obs=np.concatenate([d.obs for d in datasets]), action=np.concatenate([d.action for d in datasets]),
        reward=np.concatenate([d.reward for d in datasets]),
        terminated=np.concatenate([d.terminated for d in datasets]),
        truncated=np.concatenate([d.truncated for d in datasets]),
        episode=np.concatenate([d.episode - d.episode[0] + o for d, o in zip(datasets, offsets)]),
        step=np.concatenate([d.step for d in datasets]), task=np.concatenate([d.task for d in datasets]),
        tasks=first.tasks, provenance={"kind": "concatenate", "sources": [d.provenance for d in datasets]},
        run=run, runs=runs,
    ).check("concatenate_episodes")


def pool_tasks(datasets: Sequence[EpisodeDataset]) -> EpisodeDataset:
    """The multi-task dataset: task i of the pool is ``datasets[i]``'s task, in that order.

    Observations and actions are zero-padded at the end to the largest dims (spec §10: the
    multi-task wrapper's padding). Each task keeps its own obs dim, action dim, episode
    length, action repeat and discount in the task table. Tasks with different episode
    lengths pool (the official mt80 data mixes lengths): episodes keep their own length and
    the sampler draws episodes uniformly, so a task's share of the batches is its share of
    the episodes, not of the transitions (docs/artifacts.md). Each episode keeps its run
    (seed and run id); the run tables are merged.

    Raises:
      ValueError: an empty list, a dataset with several tasks, or duplicate task names.
    """
    datasets = list(datasets)
    if not datasets:
        raise ValueError("pool_tasks: no datasets given")
    tasks = []
    for i, d in enumerate(datasets):
        if len(d.tasks) != 1:
            raise ValueError(f"pool_tasks: dataset {i} holds {len(d.tasks)} tasks ({d.task_names}); "
                             "pool single-task datasets")
        tasks.append(d.tasks[0])
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"pool_tasks: task names must be unique; repeated: {dup}")
    O = max(t.obs_dim for t in tasks)
    A = max(t.action_dim for t in tasks)

    def pad(x, width):
        out = np.zeros((x.shape[0], width), np.float32)
        out[:, : x.shape[1]] = x
        return out

    offsets = np.cumsum([0] + [d.num_episodes for d in datasets[:-1]])
    run, runs = _merge_runs(datasets)
    return EpisodeDataset(
        obs=np.concatenate([pad(d.obs, O) for d in datasets]),
        action=np.concatenate([pad(d.action, A) for d in datasets]),
        reward=np.concatenate([d.reward for d in datasets]),
        terminated=np.concatenate([d.terminated for d in datasets]),
        truncated=np.concatenate([d.truncated for d in datasets]),
        episode=np.concatenate([d.episode - d.episode[0] + o for d, o in zip(datasets, offsets)]),
        step=np.concatenate([d.step for d in datasets]),
        task=np.concatenate([np.full(d.num_rows, i, np.int32) for i, d in enumerate(datasets)]),
        tasks=tuple(tasks), provenance={"kind": "pool", "sources": {t.name: d.provenance for t, d in
                                                                    zip(tasks, datasets)}},
        run=run, runs=runs,
    ).check("pool_tasks")


def sampleable_episodes(dataset: EpisodeDataset, horizon: int):
    """The episodes a slice of ``horizon + 1`` rows can be drawn from (module docstring).

    Returns (starts [E'] int64, rows [E'] int64, task [E'] int32) of the episodes with at least
    ``horizon + 1`` rows. Warns (UserWarning) naming how many shorter episodes are dropped.

    Raises:
      ValueError: no episode is long enough.
    """
    starts, rows, task = dataset.episode_starts, dataset.episode_rows, dataset.episode_task
    keep = rows >= horizon + 1
    dropped = int(np.count_nonzero(~keep))
    if dropped == len(rows):
        raise ValueError(f"no episode of the dataset has horizon + 1 = {horizon + 1} rows (longest: "
                         f"{int(rows.max()) if len(rows) else 0}); nothing can be sampled")
    if dropped:
        per_task = {dataset.tasks[t].name: int(np.count_nonzero(~keep & (task == t))) for t in np.unique(task[~keep])}
        warnings.warn(f"{dropped} of {len(rows)} episodes have fewer than horizon + 1 = {horizon + 1} rows and "
                      f"are never sampled (per task: {per_task})", UserWarning, stacklevel=2)
    return starts[keep], rows[keep], task[keep]


# ============================================================================ Parquet
def _run_columns(ds: EpisodeDataset):
    """The ``seed`` (int64) and ``run_id`` (dictionary<int32, string>) Arrow columns of ``ds``'s
    rows, null where the run's seed or id is unknown."""
    import pyarrow as pa

    seeds = [r.seed for r in ds.runs]
    seed_null = np.array([x is None for x in seeds], bool)[ds.run]
    seed_val = np.array([0 if x is None else int(x) for x in seeds], np.int64)[ds.run]
    seed_col = pa.array(seed_val, pa.int64(), mask=seed_null if seed_null.any() else None)
    ids = list(dict.fromkeys(r.run_id for r in ds.runs if r.run_id is not None))
    code = np.array([-1 if r.run_id is None else ids.index(r.run_id) for r in ds.runs], np.int32)[ds.run]
    run_col = pa.DictionaryArray.from_arrays(pa.array(code, pa.int32(), mask=(code < 0) if (code < 0).any() else None),
                                             pa.array(ids, pa.string()))
    return seed_col, run_col


def _arrow_table(ds: EpisodeDataset):
    """``ds`` as an Arrow table of the format (module docstring), the metadata included."""
    import pyarrow as pa

    names = np.array(ds.task_names, dtype=object)
    task_col = pa.DictionaryArray.from_arrays(pa.array(ds.task, pa.int32()), pa.array(list(names), pa.string()))
    meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION,
            "tasks": [t.to_json() for t in ds.tasks], "provenance": ds.provenance}
    schema = pa.schema([
        ("episode", pa.int64()), ("step", pa.int32()),
        ("obs", pa.list_(pa.float32(), ds.obs_dim)), ("action", pa.list_(pa.float32(), ds.action_dim)),
        ("reward", pa.float32()), ("terminated", pa.bool_()), ("truncated", pa.bool_()),
        ("task", pa.dictionary(pa.int32(), pa.string())), ("seed", pa.int64()),
        ("run_id", pa.dictionary(pa.int32(), pa.string())),
    ], metadata={METADATA_KEY: json.dumps(meta, sort_keys=True, default=_json_default).encode()})
    cols = [
        pa.array(ds.episode), pa.array(ds.step),
        pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(ds.obs).reshape(-1)), ds.obs_dim),
        pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(ds.action).reshape(-1)), ds.action_dim),
        pa.array(ds.reward), pa.array(ds.terminated), pa.array(ds.truncated), task_col, *_run_columns(ds),
    ]
    return pa.Table.from_arrays(cols, schema=schema)


def save_dataset(dataset: EpisodeDataset, path) -> int:
    """Write ``dataset`` to ``path`` as Parquet (module docstring), checked first, atomically
    (a temporary name in the same folder, then a rename). Returns the file size in bytes.

    Raises:
      DatasetError: the dataset violates the format (nothing is written).
    """
    import pyarrow.parquet as pq

    dataset.check(f"save_dataset({path})")
    table = _arrow_table(dataset)
    with atomic.atomic_path(path) as tmp:
        pq.write_table(table, tmp, row_group_size=ROW_GROUP_ROWS, **PARQUET_OPTIONS)
    return os.path.getsize(path)


def read_metadata(path) -> dict:
    """The format header of a dataset file (format, version, tasks, provenance), checked.

    ``version`` is 1 or 2 (:data:`READ_VERSIONS`; the columns checked are those of that version).
    Raises FileNotFoundError, or :class:`DatasetError` for a file that is not a complete
    Parquet file (e.g. cut short by a killed job) or not a dataset of this format/version.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"dataset {path}: no such file")
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DatasetError(f"dataset {path}: not a complete Parquet file (truncated, e.g. by a job killed "
                           f"mid-write, or not Parquet): {exc}") from None
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise DatasetError(f"dataset {path}: no '{METADATA_KEY.decode()}' metadata; not a {FORMAT_NAME} file")
    try:
        meta = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"dataset {path}: unreadable '{METADATA_KEY.decode()}' metadata ({exc})") from None
    if meta.get("format") != FORMAT_NAME:
        raise DatasetError(f"dataset {path}: format {meta.get('format')!r}, expected {FORMAT_NAME!r}")
    if meta.get("version") not in READ_VERSIONS or isinstance(meta.get("version"), bool):
        raise DatasetError(f"dataset {path}: format version {meta.get('version')!r}; this tdmpc2core reads "
                           f"versions {', '.join(map(str, READ_VERSIONS))} (writes {FORMAT_VERSION})")
    if not isinstance(meta, dict):
        raise DatasetError(f"dataset {path}: the '{METADATA_KEY.decode()}' metadata is not a JSON object")
    extra = sorted(set(meta) - set(METADATA_FIELDS))
    if extra:  # a key this version does not know could change the data's meaning: never dropped silently
        raise DatasetError(f"dataset {path}: unknown key(s) {extra} in the '{METADATA_KEY.decode()}' metadata; "
                           f"version {meta['version']} has {list(METADATA_FIELDS)} (put anything else under "
                           "'provenance')")
    if not isinstance(meta.get("tasks"), list) or not meta["tasks"]:
        raise DatasetError(f"dataset {path}: the metadata has no task table")
    meta["tasks"] = tuple(TaskInfo.from_json(t, f"dataset {path}") for t in meta["tasks"])
    _check_schema(schema, meta["tasks"], path, meta["version"])
    return meta


def _check_schema(schema, tasks, path, version: int = FORMAT_VERSION) -> None:
    """The file's columns: exactly those of ``version``, each of its type; raises
    :class:`DatasetError` naming the first that is missing, unknown or mistyped."""
    import pyarrow as pa

    O = max(t.obs_dim for t in tasks)
    A = max(t.action_dim for t in tasks)
    want = {"episode": pa.int64(), "step": pa.int32(), "obs": pa.list_(pa.float32(), O),
            "action": pa.list_(pa.float32(), A), "reward": pa.float32(), "terminated": pa.bool_(),
            "truncated": pa.bool_()}
    if version >= 2:
        want["seed"] = pa.int64()
    columns = COLUMNS if version >= 2 else COLUMNS_V1
    have = {f.name: f.type for f in schema}
    missing = [c for c in columns if c not in have]
    if missing:
        raise DatasetError(f"dataset {path}: missing column(s) {missing}")
    extra = [c for c in have if c not in columns]
    if extra:  # joining or pooling would drop it: refused rather than lost without a word
        raise DatasetError(f"dataset {path}: unknown column(s) {extra}; a {FORMAT_NAME} file has exactly the "
                           f"columns {list(columns)} (version {version}; keep other per-row data in a file of its "
                           "own)")
    for name, typ in want.items():
        got = have[name]
        if got != typ:
            if name in ("obs", "action") and pa.types.is_fixed_size_list(got) and got.value_type == pa.float32():
                raise DatasetError(f"dataset {path}: column {name!r} has width {got.list_size}, but the task "
                                   f"table's largest {name}_dim is {typ.list_size}")
            raise DatasetError(f"dataset {path}: column {name!r} has type {got}, expected {typ}")
    for name in ("task", "run_id") if version >= 2 else ("task",):
        t = have[name]
        if not (pa.types.is_string(t) or (pa.types.is_dictionary(t) and pa.types.is_string(t.value_type))):
            raise DatasetError(f"dataset {path}: column {name!r} has type {t}, expected string")


def load_dataset(path) -> EpisodeDataset:
    """The dataset :func:`save_dataset` wrote to ``path``, every invariant checked.

    A version-1 file (no ``seed`` and ``run_id`` columns) is read too: its run table comes from
    its provenance (:func:`runs_from_provenance`), and saving the dataset again writes version 2.

    Memory: the file is read row group by row group into preallocated NumPy arrays, so the
    peak is about the data's size plus one row group (``ROW_GROUP_ROWS`` rows) and the
    checks' temporaries (benchmarks/datasets.py measures it).

    Raises:
      FileNotFoundError: no file at ``path``.
      DatasetError: a truncated or non-Parquet file, another format or version, a missing or
        mistyped column, widths that disagree with the task table, a task name missing from
        the table, an episode with a gap or a repeated step or whose seed or run id changes,
        NaN outside reset rows, ... (the message names the file and what is wrong).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = read_metadata(path)
    tasks = meta["tasks"]
    try:
        out, runs = _read_rows(path, pq.ParquetFile(path), tasks, meta["version"])
    except (pa.ArrowInvalid, OSError) as exc:
        raise DatasetError(f"dataset {path}: unreadable ({exc}); the file is damaged or truncated") from None
    if meta["version"] == 1:
        out["run"], runs = runs_from_provenance(meta.get("provenance", {}), tasks, out["task"])
    ds = EpisodeDataset(tasks=tasks, provenance=meta.get("provenance", {}), runs=runs, **out)
    return ds.check(f"dataset {path}")


def _read_rows(path, pf, tasks, version: int):
    """The columns of the Parquet file ``pf`` as the arrays of :class:`EpisodeDataset`, row
    group by row group into preallocated arrays (peak memory: the data plus one row group's
    Arrow buffers); returns (arrays, run table; ``run`` and the table only for version 2)."""
    names = [t.name for t in tasks]
    O = max(t.obs_dim for t in tasks)
    A = max(t.action_dim for t in tasks)
    R = pf.metadata.num_rows
    out = {"obs": np.empty((R, O), np.float32), "action": np.empty((R, A), np.float32),
           "reward": np.empty(R, np.float32), "terminated": np.empty(R, bool),
           "truncated": np.empty(R, bool), "episode": np.empty(R, np.int64), "step": np.empty(R, np.int32),
           "task": np.empty(R, np.int32)}
    if version >= 2:
        out["run"] = np.empty(R, np.int32)
    runs: dict = {}  # RunInfo -> index, in the order of first rows
    row = 0
    for i in range(pf.num_row_groups):
        rg = pf.read_row_group(i, columns=list(COLUMNS if version >= 2 else COLUMNS_V1))
        n = rg.num_rows
        for name in COLUMNS_V1:
            col = rg.column(name)
            if col.null_count:
                raise DatasetError(f"dataset {path}: column {name!r} has {col.null_count} null value(s)")
            off = row
            for chunk in col.chunks:
                _fill(path, name, chunk, out[name][off: off + len(chunk)], names)
                off += len(chunk)
            if off != row + n:
                raise DatasetError(f"dataset {path}: row group {i}: column {name!r} has {off - row} rows, "
                                   f"expected {n}")
            del col
        if version >= 2:
            out["run"][row: row + n] = _run_index(rg.column("seed"), rg.column("run_id"), runs)
        row += n
        del rg
    return out, tuple(runs)


def _fill(path, name: str, chunk, dst: np.ndarray, names: list) -> None:
    """One Arrow chunk of column ``name`` into ``dst`` (its rows of the preallocated array);
    task names become indices into ``names``. Raises :class:`DatasetError` for a task name
    that is not in the task table."""
    import pyarrow as pa

    m = len(chunk)
    if name in ("obs", "action"):
        dst[:] = chunk.flatten().to_numpy(zero_copy_only=False).reshape(m, dst.shape[1])
    elif name == "task":
        enc = chunk if pa.types.is_dictionary(chunk.type) else chunk.dictionary_encode()
        dict_names = enc.dictionary.to_pylist()
        unknown = sorted(set(dict_names) - set(names))
        codes = enc.indices.to_numpy(zero_copy_only=False)
        if unknown and np.any(np.isin(codes, [dict_names.index(u) for u in unknown])):
            raise DatasetError(f"dataset {path}: task name(s) {unknown} are not in the task table {names}")
        remap = np.array([names.index(x) if x in names else -1 for x in dict_names], np.int32)
        dst[:] = remap[codes]
    else:
        dst[:] = chunk.to_numpy(zero_copy_only=False)


def _run_index(seed_col, run_col, runs: dict) -> np.ndarray:
    """[n] int32: the run index of each row of one row group, from its ``seed`` and ``run_id``
    columns (Arrow; nulls: unknown); new runs are added to ``runs`` (RunInfo -> index) in the
    order of their first row."""
    import pyarrow as pa

    seed = seed_col.combine_chunks() if isinstance(seed_col, pa.ChunkedArray) else seed_col
    null = seed.is_null().to_numpy(zero_copy_only=False).astype(np.int64)
    value = seed.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    rid = run_col.cast(pa.string())
    rid = (rid.combine_chunks() if isinstance(rid, pa.ChunkedArray) else rid).dictionary_encode()
    ids = rid.dictionary.to_pylist()
    code = rid.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    keys, first, inverse = np.unique(np.stack([value, null, code], axis=1), axis=0, return_index=True,
                                     return_inverse=True)
    index = np.empty(len(keys), np.int32)
    for k in np.argsort(first):  # in the order of first rows
        v, is_null, c = (int(x) for x in keys[k])
        info = RunInfo(seed=None if is_null else v, run_id=None if c < 0 else ids[c])
        index[k] = runs.setdefault(info, len(runs))
    return index[np.asarray(inverse).reshape(-1)]


def _run_of(prov) -> RunInfo:
    """The one run a version-1 provenance names, or ``RunInfo()`` (unknown); see
    :func:`runs_from_provenance`."""
    from .provenance import run_id

    if not isinstance(prov, dict) or prov.get("kind") in ("pool", "official"):
        return RunInfo()
    if prov.get("kind") == "concatenate":
        found = {_run_of(p) for p in prov.get("sources") or []}
        return found.pop() if len(found) == 1 else RunInfo()
    seed = prov.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int):
        return RunInfo()
    rid = None
    if isinstance(prov.get("task"), str) and "spec" in prov and "agent_config" in prov:
        rid = run_id(prov["task"], seed, prov["spec"], prov["agent_config"])
    return RunInfo(seed, rid)


def runs_from_provenance(provenance, tasks, task: np.ndarray):
    """(run [R] int32, run table) of a version-1 file (no ``seed`` / ``run_id`` columns), from
    its provenance, per task (``task`` [R] int32: each row's task index):

    * an export (a provenance with an int ``seed``, as ``export_episodes`` writes it): that
      seed; its run id too when the provenance has the ``task``, ``spec`` and ``agent_config``
      that ``train-single`` records (:func:`tdmpc2core.io.provenance.run_id`);
    * a concatenation (``kind: concatenate``): its sources' run when they all name the same
      one, else unknown (version 1 does not record which episodes came from which source);
    * a pool (``kind: pool``): each task's rows from its source's provenance, as above;
    * anything else (the official data, no seed): unknown (``RunInfo()``: null seed and id).
    """
    if isinstance(provenance, dict) and provenance.get("kind") == "pool" and isinstance(
            provenance.get("sources"), dict):
        per_task = [_run_of(provenance["sources"].get(t.name)) for t in tasks]
    else:
        per_task = [_run_of(provenance)] * len(tasks)
    table = list(dict.fromkeys(per_task))
    lut = np.array([table.index(r) for r in per_task], np.int32)
    return compact_runs(lut[task], tuple(table))


def episode_summary(dataset: EpisodeDataset):
    """One row per episode: task, episode, agent_steps, return, terminated (a pandas DataFrame)."""
    import pandas as pd

    starts = dataset.episode_starts
    ends = np.append(starts[1:], dataset.num_rows) - 1
    return pd.DataFrame({
        "task": [dataset.tasks[t].name for t in dataset.episode_task],
        "episode": dataset.episode[starts],
        "agent_steps": (ends - starts).astype(np.int64),
        "return": dataset.episode_returns(),
        "terminated": dataset.terminated[ends],
    })


def read_episode_summary(path):
    """One row per episode of the dataset file at ``path``, reading only the small columns
    (not obs or action): task, episode, agent_steps, return, terminated (pandas DataFrame).

    Raises what :func:`read_metadata` raises, or :class:`DatasetError` for rows that do not
    form episodes.
    """
    import pandas as pd
    import pyarrow.parquet as pq

    meta = read_metadata(path)
    t = pq.read_table(path, columns=["episode", "step", "reward", "terminated", "task"])
    step = t.column("step").to_numpy()
    if len(step) == 0 or step[0] != 0:
        raise DatasetError(f"dataset {path}: no rows, or the first row is not a reset row")
    starts = np.flatnonzero(step == 0)
    ends = np.append(starts[1:], len(step)) - 1
    reward = t.column("reward").to_numpy().astype(np.float64)
    r = np.where(step == 0, 0.0, reward)
    names = [x.name for x in meta["tasks"]]
    task = [str(x) for x in t.column("task").take(starts).to_pylist()]
    unknown = sorted(set(task) - set(names))
    if unknown:
        raise DatasetError(f"dataset {path}: task name(s) {unknown} are not in the task table {names}")
    return pd.DataFrame({
        "task": task,
        "episode": t.column("episode").to_numpy()[starts],
        "agent_steps": (ends - starts).astype(np.int64),
        "return": np.add.reduceat(r, starts),
        "terminated": t.column("terminated").to_numpy()[ends],
    })
