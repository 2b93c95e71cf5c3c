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
``task`` string, and no other column; the Parquet key-value metadata ``tdmpc2core.dataset``
holds a JSON object with exactly the keys ``format``, ``version``, ``tasks`` (the task table)
and ``provenance`` (free-form). Reading refuses a file with another column or another key in
that object (joining or pooling would otherwise drop it without a word); key-value metadata
other libraries add under their own keys (``ARROW:schema``, ``pandas``) describe no data and
are ignored. Row groups hold ``ROW_GROUP_ROWS`` rows, so readers can stream.

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

FORMAT_NAME = "tdmpc2core.episodes"
FORMAT_VERSION = 1
METADATA_KEY = b"tdmpc2core.dataset"
ROW_GROUP_ROWS = 65_536
COLUMNS = ("episode", "step", "obs", "action", "reward", "terminated", "truncated", "task")
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
    """

    name: str
    obs_dim: int
    action_dim: int
    episode_length: int
    action_repeat: int
    discount: float
    env_id: Optional[str] = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict, where: str) -> "TaskInfo":
        fields = {f.name: f.type for f in dataclasses.fields(cls)}
        if not isinstance(d, dict) or set(d) - set(fields) or {"name", "obs_dim", "action_dim",
                                                                "episode_length", "action_repeat",
                                                                "discount"} - set(d):
            raise DatasetError(f"{where}: a task table entry must have the keys {sorted(fields)}, got {d!r}")
        try:
            return cls(name=str(d["name"]), obs_dim=int(d["obs_dim"]), action_dim=int(d["action_dim"]),
                       episode_length=int(d["episode_length"]), action_repeat=int(d["action_repeat"]),
                       discount=float(d["discount"]), env_id=None if d.get("env_id") is None else str(d["env_id"]))
        except (TypeError, ValueError) as exc:
            raise DatasetError(f"{where}: bad task table entry {d!r} ({exc})") from None


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

    def __repr__(self) -> str:
        tasks = ", ".join(f"{t.name} (obs {t.obs_dim}, action {t.action_dim}, T {t.episode_length})"
                          for t in self.tasks)
        return (f"EpisodeDataset({self.num_episodes} episodes, {self.num_transitions} agent steps, "
                f"{self.num_rows} rows, obs {self.obs_dim}, action {self.action_dim}; tasks: {tasks})")

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
                   ("obs", "action", "reward", "terminated", "truncated", "episode", "step", "task"))

    def episode_returns(self) -> np.ndarray:
        """[E] float64: undiscounted return of each episode (sum of its rewards)."""
        r = np.where(self.step == 0, 0.0, self.reward.astype(np.float64))
        return np.add.reduceat(r, self.episode_starts) if self.num_rows else np.zeros(0)

    def check(self, where: str = "dataset") -> "EpisodeDataset":
        """Validate every invariant of the format; raises :class:`DatasetError` naming the
        first violation (``where`` prefixes the message, e.g. the file). Returns self."""
        _check(self, where)
        return self


# ============================================================================ validation
def _check(ds: EpisodeDataset, where: str) -> None:
    """Every invariant of the format, in this order (the first violation raises
    :class:`DatasetError`): the columns' dtypes and lengths, the task table, the episodes'
    numbering, each row's contents, the reset rows and each episode's end."""
    R = _check_columns(ds, where)
    O, A = _check_task_table(ds, where, R)
    reset, starts, ep_index = _check_episode_numbering(ds, where)
    _check_row_contents(ds, where, reset, O, A)
    _check_episode_ends(ds, where, reset, starts, ep_index)


def _check_columns(ds: EpisodeDataset, where: str) -> int:
    """Each column's dtype, dimensions and length; returns the number of rows."""
    R = ds.reward.shape[0] if np.ndim(ds.reward) == 1 else -1
    spec = {"obs": (np.float32, 2), "action": (np.float32, 2), "reward": (np.float32, 1),
            "terminated": (np.bool_, 1), "truncated": (np.bool_, 1), "episode": (np.int64, 1),
            "step": (np.int32, 1), "task": (np.int32, 1)}
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
def from_episodes(episodes: Sequence[dict], task: TaskInfo, provenance: Optional[dict] = None) -> EpisodeDataset:
    """A single-task dataset from per-episode arrays (e.g. your own data).

    Args:
      episodes: dicts with ``obs`` [L, task.obs_dim], ``action`` [L, task.action_dim] (NaN
        on row 0), ``reward`` [L] (NaN on row 0) and ``terminated`` [L] bool (True only on
        the last row of an episode that terminated); L = agent steps + 1. An episode that
        did not terminate is marked truncated on its last row.
      task: the task table entry; provenance: recorded in the file.
    Raises:
      DatasetError: the rows break the format (:meth:`EpisodeDataset.check`).
    """
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
    ).check(f"export of {task.name}")


def concatenate_episodes(datasets: Sequence[EpisodeDataset]) -> EpisodeDataset:
    """The episodes of several runs of one task (e.g. its seeds), in the order given.

    Raises:
      ValueError: an empty list, or datasets that are not all of the same single task (name,
        obs and action dims, episode length, action repeat and discount must agree; the
        message names the differing fields).
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
            a, b = first.tasks[0].to_json(), d.tasks[0].to_json()
            diff = {k: (a[k], b[k]) for k in a if a[k] != b[k] and k != "env_id"}
            if diff:
                raise ValueError(f"concatenate_episodes: dataset {i} disagrees with dataset 0 on {diff} "
                                 "(dataset 0's value, then dataset i's)")
    offsets = np.cumsum([0] + [d.num_episodes for d in datasets[:-1]])
    return EpisodeDataset(
        obs=np.concatenate([d.obs for d in datasets]), action=np.concatenate([d.action for d in datasets]),
        reward=np.concatenate([d.reward for d in datasets]),
        terminated=np.concatenate([d.terminated for d in datasets]),
        truncated=np.concatenate([d.truncated for d in datasets]),
        episode=np.concatenate([d.episode - d.episode[0] + o for d, o in zip(datasets, offsets)]),
        step=np.concatenate([d.step for d in datasets]), task=np.concatenate([d.task for d in datasets]),
        tasks=first.tasks, provenance={"kind": "concatenate", "sources": [d.provenance for d in datasets]},
    ).check("concatenate_episodes")


def pool_tasks(datasets: Sequence[EpisodeDataset]) -> EpisodeDataset:
    """The multi-task dataset: task i of the pool is ``datasets[i]``'s task, in that order.

    Observations and actions are zero-padded at the end to the largest dims (spec §10: the
    multi-task wrapper's padding). Each task keeps its own obs dim, action dim, episode
    length, action repeat and discount in the task table. Tasks with different episode
    lengths pool (the official mt80 data mixes lengths): episodes keep their own length and
    the sampler draws episodes uniformly, so a task's share of the batches is its share of
    the episodes, not of the transitions (docs/artifacts.md).

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
def _arrow_table(ds: EpisodeDataset):
    import pyarrow as pa

    names = np.array(ds.task_names, dtype=object)
    task_col = pa.DictionaryArray.from_arrays(pa.array(ds.task, pa.int32()), pa.array(list(names), pa.string()))
    meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION,
            "tasks": [t.to_json() for t in ds.tasks], "provenance": ds.provenance}
    schema = pa.schema([
        ("episode", pa.int64()), ("step", pa.int32()),
        ("obs", pa.list_(pa.float32(), ds.obs_dim)), ("action", pa.list_(pa.float32(), ds.action_dim)),
        ("reward", pa.float32()), ("terminated", pa.bool_()), ("truncated", pa.bool_()),
        ("task", pa.dictionary(pa.int32(), pa.string())),
    ], metadata={METADATA_KEY: json.dumps(meta, sort_keys=True, default=_json_default).encode()})
    cols = [
        pa.array(ds.episode), pa.array(ds.step),
        pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(ds.obs).reshape(-1)), ds.obs_dim),
        pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(ds.action).reshape(-1)), ds.action_dim),
        pa.array(ds.reward), pa.array(ds.terminated), pa.array(ds.truncated), task_col,
    ]
    return pa.Table.from_arrays(cols, schema=schema)


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


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
        pq.write_table(table, tmp, row_group_size=ROW_GROUP_ROWS, compression="zstd",
                       use_dictionary=["task"], write_statistics=["episode", "step", "task"])
    return os.path.getsize(path)


def read_metadata(path) -> dict:
    """The format header of a dataset file (format, version, tasks, provenance), checked.

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
    if meta.get("version") != FORMAT_VERSION:
        raise DatasetError(f"dataset {path}: format version {meta.get('version')!r}; this tdmpc2core reads "
                           f"version {FORMAT_VERSION}")
    if not isinstance(meta, dict):
        raise DatasetError(f"dataset {path}: the '{METADATA_KEY.decode()}' metadata is not a JSON object")
    extra = sorted(set(meta) - set(METADATA_FIELDS))
    if extra:  # a key this version does not know could change the data's meaning: never dropped silently
        raise DatasetError(f"dataset {path}: unknown key(s) {extra} in the '{METADATA_KEY.decode()}' metadata; "
                           f"version {FORMAT_VERSION} has {list(METADATA_FIELDS)} (put anything else under "
                           "'provenance')")
    if not isinstance(meta.get("tasks"), list) or not meta["tasks"]:
        raise DatasetError(f"dataset {path}: the metadata has no task table")
    meta["tasks"] = tuple(TaskInfo.from_json(t, f"dataset {path}") for t in meta["tasks"])
    _check_schema(schema, meta["tasks"], path)
    return meta


def _check_schema(schema, tasks, path) -> None:
    import pyarrow as pa

    O = max(t.obs_dim for t in tasks)
    A = max(t.action_dim for t in tasks)
    want = {"episode": pa.int64(), "step": pa.int32(), "obs": pa.list_(pa.float32(), O),
            "action": pa.list_(pa.float32(), A), "reward": pa.float32(), "terminated": pa.bool_(),
            "truncated": pa.bool_()}
    have = {f.name: f.type for f in schema}
    missing = [c for c in COLUMNS if c not in have]
    if missing:
        raise DatasetError(f"dataset {path}: missing column(s) {missing}")
    extra = [c for c in have if c not in COLUMNS]
    if extra:  # joining or pooling would drop it: refused rather than lost without a word
        raise DatasetError(f"dataset {path}: unknown column(s) {extra}; a {FORMAT_NAME} file has exactly the "
                           f"columns {list(COLUMNS)} (keep other per-row data in a file of its own)")
    for name, typ in want.items():
        got = have[name]
        if got != typ:
            if name in ("obs", "action") and pa.types.is_fixed_size_list(got) and got.value_type == pa.float32():
                raise DatasetError(f"dataset {path}: column {name!r} has width {got.list_size}, but the task "
                                   f"table's largest {name}_dim is {typ.list_size}")
            raise DatasetError(f"dataset {path}: column {name!r} has type {got}, expected {typ}")
    t = have["task"]
    if not (pa.types.is_string(t) or (pa.types.is_dictionary(t) and pa.types.is_string(t.value_type))):
        raise DatasetError(f"dataset {path}: column 'task' has type {t}, expected string")


def load_dataset(path) -> EpisodeDataset:
    """The dataset :func:`save_dataset` wrote to ``path``, every invariant checked.

    Memory: the file is read row group by row group into preallocated NumPy arrays, so the
    peak is about the data's size plus one row group (``ROW_GROUP_ROWS`` rows) and the
    checks' temporaries (benchmarks/datasets.py measures it).

    Raises:
      FileNotFoundError: no file at ``path``.
      DatasetError: a truncated or non-Parquet file, another format or version, a missing or
        mistyped column, widths that disagree with the task table, a task name missing from
        the table, an episode with a gap or a repeated step, NaN outside reset rows, ... (the
        message names the file and what is wrong).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = read_metadata(path)
    tasks = meta["tasks"]
    names = [t.name for t in tasks]
    O = max(t.obs_dim for t in tasks)
    A = max(t.action_dim for t in tasks)
    try:
        pf = pq.ParquetFile(path)
        R = pf.metadata.num_rows
        out = {"obs": np.empty((R, O), np.float32), "action": np.empty((R, A), np.float32),
               "reward": np.empty(R, np.float32), "terminated": np.empty(R, bool),
               "truncated": np.empty(R, bool), "episode": np.empty(R, np.int64), "step": np.empty(R, np.int32),
               "task": np.empty(R, np.int32)}
        # row group by row group into preallocated arrays: peak memory is the data plus one
        # row group's Arrow buffers
        row = 0
        for i in range(pf.num_row_groups):
            rg = pf.read_row_group(i, columns=list(COLUMNS))
            n = rg.num_rows
            for name in COLUMNS:
                col = rg.column(name)
                if col.null_count:
                    raise DatasetError(f"dataset {path}: column {name!r} has {col.null_count} null value(s)")
                off = row
                for chunk in col.chunks:
                    m = len(chunk)
                    dst = slice(off, off + m)
                    off += m
                    if name in ("obs", "action"):
                        width = O if name == "obs" else A
                        out[name][dst] = chunk.flatten().to_numpy(zero_copy_only=False).reshape(m, width)
                    elif name == "task":
                        enc = chunk if pa.types.is_dictionary(chunk.type) else chunk.dictionary_encode()
                        dict_names = enc.dictionary.to_pylist()
                        unknown = sorted(set(dict_names) - set(names))
                        codes = enc.indices.to_numpy(zero_copy_only=False)
                        if unknown and np.any(np.isin(codes, [dict_names.index(u) for u in unknown])):
                            raise DatasetError(f"dataset {path}: task name(s) {unknown} are not in the task "
                                               f"table {names}")
                        remap = np.array([names.index(x) if x in names else -1 for x in dict_names], np.int32)
                        out[name][dst] = remap[codes]
                    else:
                        out[name][dst] = chunk.to_numpy(zero_copy_only=False)
                if off != row + n:
                    raise DatasetError(f"dataset {path}: row group {i}: column {name!r} has {off - row} rows, "
                                       f"expected {n}")
                del col
            row += n
            del rg
    except (pa.ArrowInvalid, OSError) as exc:
        raise DatasetError(f"dataset {path}: unreadable ({exc}); the file is damaged or truncated") from None
    ds = EpisodeDataset(tasks=tasks, provenance=meta.get("provenance", {}), **out)
    return ds.check(f"dataset {path}")


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
