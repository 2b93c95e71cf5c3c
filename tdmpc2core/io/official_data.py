"""The official mt30 / mt80 datasets (TensorDict chunk files) converted to our episode Parquet.

The official multi-task datasets (Hugging Face ``nicklashansen/tdmpc2``, folders ``mt30/`` and
``mt80/``: ``chunk_0.pt`` ...) are files written with ``torch.save``. Facts of their layout, from
the official offline trainer (``tdmpc2/trainer/offline_trainer.py`` and
``tdmpc2/common/buffer.py`` of nicklashansen/tdmpc2; the trainer globs ``*.pt`` in the data
folder, loads each file and asserts its second batch dimension is the episode length):

* one file is a ``tensordict.TensorDict`` of batch size ``[N, L]``: N episodes of L rows,
  ``L = 501`` for mt30 and ``101`` for mt80 (every task, the dm_control ones included);
* keys ``obs`` [N, L, O] (zero-padded to the task set's largest obs dim: 24 for mt30, 39 for
  mt80), ``action`` [N, L, A] (padded to 6), ``reward`` [N, L], ``task`` [N, L] (the task's
  index in the official task list, ``TASK_SET`` of ``tdmpc2/common/__init__.py``); the replay
  buffer adds ``episode`` itself when it loads a file;
* row 0 of an episode is its first observation; the buffer drops ``action[0]`` and
  ``reward[0]`` of every sampled slice, so the values stored there are never used.

Our rows follow the same convention (row t+1 holds o_{t+1}, a_t, r_t; docs/artifacts.md), so
the conversion is row for row: each official episode becomes one of ours, its row 0 a reset row
(action NaN in the task's own dims, reward NaN, whatever the file holds there: values the
official trainer never reads), its last row ``truncated``, its ``seed`` and ``run_id`` null (the
release does not say which run produced an episode). Each task's true dims come from the
task-set table (``tdmpc2core/resources/official_task_sets.csv``), and the padding beyond them
must be zero (checked).

Loading a ``.pt`` file unpickles it, which can run arbitrary code: only convert files from a
trusted source (the official release). torch is needed, and tensordict for TensorDict files
(the ``official`` extra); a plain dict of tensors with the same keys and shapes is read too.

Integrity: every chunk file is checked before any is converted (:func:`check_chunk`: each zip
member's CRC-32, the file's size and SHA-256 in one read); a damaged file is refused, naming the
damaged member, and nothing is written.

Memory: one chunk at a time (the official mt30 chunks are about 5 GB each on disk, about 10 GB
of arrays once loaded; the conversion peaked at about 1.4x a chunk's arrays), written to the
Parquet file in row groups as it is converted; the output is written under a temporary name and
renamed at the end, so an error or a kill leaves no complete-looking file.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from . import atomic
from ..resources import official_task_sets
from .dataset import (FORMAT_NAME, FORMAT_VERSION, METADATA_KEY, PARQUET_OPTIONS, ROW_GROUP_ROWS, DatasetError,
                      EpisodeDataset, RunInfo, TaskInfo, _arrow_table)
from .integrity import FileIntegrityError, check_zip_file

#: rows per episode in the official chunk files (offline_trainer.py: 501 for mt30, 101 for mt80)
EPISODE_ROWS = {"mt30": 501, "mt80": 101}
#: chunk files of the full official release (download_mt30.sh: chunk_0..3; download_mt80.sh: chunk_0..19)
RELEASE_CHUNKS = {"mt30": 4, "mt80": 20}
#: the keys a chunk must hold; ``episode`` (added by the official buffer) is accepted and ignored
REQUIRED_KEYS = ("obs", "action", "reward", "task")
IGNORED_KEYS = ("episode",)


class OfficialDataError(DatasetError):
    """An official chunk file or folder that cannot be converted; the message names the file,
    the key and what is accepted."""


class DamagedChunkError(OfficialDataError, FileIntegrityError):
    """A chunk file that fails :func:`tdmpc2core.io.integrity.check_zip_file`: a zip member's
    CRC-32 differs (``member`` names it), truncated, not a zip archive, or a legacy non-zip
    PyTorch file (no checksums to check: refused)."""

    what = "official chunk "


def check_chunk(path):
    """The integrity of one chunk file, before it is loaded: every zip member's CRC-32, its
    size and SHA-256 in one read (:func:`tdmpc2core.io.integrity.check_zip_file`). Returns the
    :class:`~tdmpc2core.io.integrity.FileCheck`; raises DamagedChunkError naming the file and
    the damaged member, FileNotFoundError for a missing file."""
    return check_zip_file(path, error=DamagedChunkError)


def task_set_table(task_set: str) -> list:
    """The official task list ``task_set`` ("mt30" or "mt80") in the official order, one dict per
    task: ``task_id``, ``name``, ``domain``, ``obs_dim``, ``action_dim``, ``episode_length``
    (agent steps of the task's own episodes: 500 dm_control, 100 Meta-World), ``action_repeat``
    (2), ``env_id`` (our ``dmc:`` id, or None where we have no environment).

    Source: ``tdmpc2core/resources/official_task_sets.csv`` (tdmpc2core/resources/README.md).
    Raises ValueError for another task set.
    """
    if task_set not in EPISODE_ROWS:
        raise ValueError(f"unknown official task set {task_set!r}; accepted: {sorted(EPISODE_ROWS)}")
    return [dict(r) for r in official_task_sets()[task_set]]


def chunk_files(src) -> list:
    """The chunk files of the folder ``src`` (``*.pt``, sorted by name, as the official trainer
    globs them). Raises FileNotFoundError for a missing folder, OfficialDataError for one
    without ``.pt`` files (naming what it holds)."""
    src = Path(src)
    if not src.is_dir():
        raise FileNotFoundError(f"official data folder {src}: no such folder (expected the folder of "
                                "chunk_*.pt files of the official mt30 / mt80 release)")
    files = sorted(p for p in src.glob("*.pt") if p.is_file())
    if not files:
        held = sorted(p.name for p in src.iterdir())[:10]
        raise OfficialDataError(f"official data folder {src}: no chunk files (*.pt); accepted: the official "
                                f"release's chunk_0.pt, chunk_1.pt, ... (it holds {held or 'nothing'})")
    return files


def sha256_file(path, block: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for b in iter(lambda: fh.read(block), b""):
            h.update(b)
    return h.hexdigest()


def load_chunk(path, *, check: bool = True) -> dict:
    """The arrays of one chunk file: {key: numpy array} for every key it holds, with the
    layout (``TensorDict`` or ``dict``) it had. UNPICKLES the file (``torch.load(...,
    weights_only=False)``): only for files from a trusted source. ``check``: first check the
    file's integrity (:func:`check_chunk`; its record under ``"file_check"``);
    :func:`convert_chunks`, which has checked every file before converting any, passes False.

    Raises ImportError naming the extra to install, DamagedChunkError (an OfficialDataError)
    for a damaged file (nothing of it loaded), OfficialDataError for a file that does not load
    or is neither a TensorDict nor a dict of tensors.
    """
    try:
        import torch
    except ImportError:
        raise ImportError("reading the official chunk files needs torch and tensordict: "
                          "pip install torch==2.13.0 && pip install -e '.[official]'") from None
    try:
        import tensordict  # noqa: F401  (TensorDict files unpickle into it)
    except ImportError:
        tensordict = None
    checked = check_chunk(path) if check else None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 (any unpickling failure: named with the file)
        hint = (" (tensordict is not installed: pip install -e '.[official]')" if tensordict is None
                and "tensordict" in str(exc) else "")
        raise OfficialDataError(f"official chunk {path}: cannot be loaded with torch.load: "
                                f"{type(exc).__name__}: {exc}{hint}") from None
    layout = type(obj).__name__
    if tensordict is not None and isinstance(obj, tensordict.TensorDictBase):
        keys = list(obj.keys())
        items = {k: obj.get(k) for k in keys}
        batch = tuple(obj.batch_size)
    elif isinstance(obj, dict):
        items, batch = dict(obj), None
    else:
        raise OfficialDataError(f"official chunk {path}: holds a {layout}; accepted: a TensorDict (the official "
                                "release) or a dict of tensors with the keys obs, action, reward, task")
    out = {}
    for k, v in items.items():
        if not isinstance(v, torch.Tensor):
            raise OfficialDataError(f"official chunk {path}: key {k!r} holds a {type(v).__name__}, not a tensor "
                                    "(nested TensorDicts, e.g. pixel observations, are not supported)")
        out[str(k)] = v.detach().cpu().numpy()
    return {"layout": layout, "batch_size": batch, "arrays": out, "file_check": checked}


def _episodes_from_chunk(path, arrays: dict, *, task_set: str, tasks: Sequence[TaskInfo], episode0: int,
                         obs_width: int, action_width: int) -> EpisodeDataset:
    """One chunk's arrays as an :class:`EpisodeDataset` (episode ids from ``episode0``),
    checked against the official layout; raises OfficialDataError naming file and key."""
    L = EPISODE_ROWS[task_set]
    K = len(tasks)
    missing = [k for k in REQUIRED_KEYS if k not in arrays]
    if missing:
        raise OfficialDataError(f"official chunk {path}: missing key(s) {missing}; a chunk holds "
                                f"{list(REQUIRED_KEYS)} (and optionally {list(IGNORED_KEYS)}), has {sorted(arrays)}")
    extra = sorted(set(arrays) - set(REQUIRED_KEYS) - set(IGNORED_KEYS))
    if extra:
        raise OfficialDataError(f"official chunk {path}: unknown key(s) {extra}; accepted keys: "
                                f"{list(REQUIRED_KEYS + IGNORED_KEYS)} (this converter keeps nothing else, so it "
                                "refuses rather than drops them)")
    obs, act, rew, task = (arrays[k] for k in REQUIRED_KEYS)
    want = {"obs": (3, obs_width), "action": (3, action_width), "reward": (2, None), "task": (2, None)}
    for k, (nd, width) in want.items():
        a = arrays[k]
        if a.ndim == nd + 1 and k in ("reward", "task") and a.shape[-1] == 1:
            arrays[k] = a = a[..., 0]
        if a.ndim != nd or a.shape[1] != L or (width is not None and a.shape[2] != width) or a.shape[0] != obs.shape[0]:
            shape = f"[N, {L}" + (f", {width}]" if width is not None else "]")
            if a.ndim >= 2 and a.shape[1] != L:
                raise OfficialDataError(
                    f"official chunk {path}: key {k!r} has episodes of {a.shape[1]} rows (shape {list(a.shape)}); "
                    f"{task_set} chunks have {L} rows per episode (mt30: {EPISODE_ROWS['mt30']}, mt80: "
                    f"{EPISODE_ROWS['mt80']}): is this the other task set's data? (--tasks)")
            raise OfficialDataError(f"official chunk {path}: key {k!r} has shape {list(a.shape)}; accepted for "
                                    f"{task_set}: {shape} with the same N for every key")
    obs, act, rew, task = (arrays[k] for k in REQUIRED_KEYS)
    N = obs.shape[0]
    if N == 0:
        raise OfficialDataError(f"official chunk {path}: holds no episodes")
    if not (np.issubdtype(task.dtype, np.integer) or np.issubdtype(task.dtype, np.floating)):
        raise OfficialDataError(f"official chunk {path}: key 'task' has dtype {task.dtype}; expected integer ids")
    if np.issubdtype(task.dtype, np.floating) and not np.all(task == np.round(task)):
        raise OfficialDataError(f"official chunk {path}: key 'task' holds non-integer values")
    tid = task.astype(np.int64)
    bad = (tid < 0) | (tid >= K)
    if bad.any():
        e, t = (int(x[0]) for x in np.nonzero(bad))
        raise OfficialDataError(f"official chunk {path}: key 'task': episode {e} (row {t}) has task id "
                                f"{int(tid[e, t])}, out of range; {task_set} has task ids 0..{K - 1} "
                                f"({tasks[0].name} .. {tasks[-1].name})")
    changes = np.any(tid != tid[:, :1], axis=1)
    if changes.any():
        e = int(np.flatnonzero(changes)[0])
        raise OfficialDataError(f"official chunk {path}: key 'task': episode {e} changes task within the episode "
                                f"(ids {sorted(set(tid[e].tolist()))}); an episode has one task")
    ep_task = tid[:, 0].astype(np.int32)
    obs_dims = np.array([t.obs_dim for t in tasks])[ep_task]
    act_dims = np.array([t.action_dim for t in tasks])[ep_task]
    obs = np.asarray(obs, np.float32)
    act = np.array(act, np.float32)  # a copy: row 0 is rewritten
    rew = np.array(rew, np.float32)
    # padding beyond each task's true dims must be zero (the official wrapper pads with zeros)
    for name, a, dims in (("obs", obs, obs_dims), ("action", act[:, 1:], act_dims)):
        pad = np.arange(a.shape[2])[None, None, :] >= dims[:, None, None]
        nz = pad & (a != 0)
        if nz.any():
            e, t, j = (int(x[0]) for x in np.nonzero(nz))
            tk = tasks[int(ep_task[e])]
            raise OfficialDataError(
                f"official chunk {path}: key {name!r}: episode {e} (task {tk.name!r}) has a non-zero value in "
                f"column {j} at row {t + (name == 'action')}, beyond the task's {name} dim "
                f"{tk.obs_dim if name == 'obs' else tk.action_dim} (official_task_sets.csv); accepted: zero padding")
    # row 0: the reset row of our format (values the official trainer never reads)
    own = np.arange(action_width)[None, :] < act_dims[:, None]
    act[:, 0, :] = np.where(own, np.nan, 0.0)
    rew[:, 0] = np.nan
    R = N * L
    step = np.tile(np.arange(L, dtype=np.int32), N)
    truncated = np.zeros((N, L), bool)
    truncated[:, -1] = True
    ds = EpisodeDataset(
        obs=obs.reshape(R, obs_width), action=act.reshape(R, action_width), reward=rew.reshape(R),
        terminated=np.zeros(R, bool), truncated=truncated.reshape(R),
        episode=np.repeat(np.arange(episode0, episode0 + N, dtype=np.int64), L), step=step,
        task=np.repeat(ep_task, L), tasks=tuple(tasks), provenance={},
        runs=(RunInfo(seed=None, run_id=None),))  # the official data names no seed or run: null columns
    try:
        return ds.check(f"official chunk {path}")
    except DatasetError as exc:
        raise OfficialDataError(str(exc)) from None


def convert_chunks(src, out, *, task_set: str, tasks: Sequence[TaskInfo], provenance: dict,
                   log: Optional[Callable[[str], None]] = None) -> dict:
    """Convert every chunk file of ``src`` into one episode-dataset Parquet file ``out``.

    Args:
      src: the folder of official chunk files (``*.pt``, read in sorted order).
      out: the Parquet file to write (docs/artifacts.md, "Episode datasets"), atomically.
      task_set: "mt30" or "mt80" (rows per episode, task ids).
      tasks: the task table, one :class:`TaskInfo` per official task id, in the official order
        (the stage builds it from :func:`task_set_table` with each task's discount).
      provenance: stored under the file's ``provenance`` (the source files, their sizes and
        SHA-256 are added here as ``source_files``: :func:`check_chunk` checks every file, each
        in one read, before any is converted).
    Returns: a summary dict (files, episodes, rows, episodes per task, bytes written).
    Raises:
      FileNotFoundError: no such folder. DamagedChunkError: a damaged chunk (a zip member's
        CRC-32 differs: named), refused before anything is written. OfficialDataError: no
        chunk files, a chunk of another episode length, a task id out of range, a missing or
        unknown key, non-zero padding, ... (naming the file and the key); nothing is left at
        ``out`` (the temporary file is removed).
      ImportError: torch / tensordict missing.
    """
    import pyarrow.parquet as pq

    if task_set not in EPISODE_ROWS:
        raise ValueError(f"unknown official task set {task_set!r}; accepted: {sorted(EPISODE_ROWS)}")
    log = log or (lambda msg: None)
    files = chunk_files(src)
    if len(files) != RELEASE_CHUNKS[task_set]:
        log(f"note: {len(files)} chunk file(s); the full {task_set} release has {RELEASE_CHUNKS[task_set]}")
    tasks = tuple(tasks)
    O = max(t.obs_dim for t in tasks)
    A = max(t.action_dim for t in tasks)
    sources = []
    for f in files:  # every file checked (and hashed, in the same read) before any is converted
        checked = check_chunk(f)
        sources.append({"file": f.name, "bytes": checked.size, **checked.to_json()})
    prov = dict(provenance)
    prov["source_files"] = sources
    meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "tasks": [t.to_json() for t in tasks],
            "provenance": prov}
    counts = np.zeros(len(tasks), np.int64)
    episodes = rows = 0
    layouts = set()
    with atomic.atomic_path(out) as tmp:
        writer = None
        try:
            for f in files:
                chunk = load_chunk(f, check=False)
                layouts.add(chunk["layout"])
                bs = chunk["batch_size"]
                if bs is not None and (len(bs) != 2 or bs[1] != EPISODE_ROWS[task_set]):
                    raise OfficialDataError(
                        f"official chunk {f}: TensorDict batch size {list(bs)}; {task_set} chunks have batch size "
                        f"[N, {EPISODE_ROWS[task_set]}] (mt30: {EPISODE_ROWS['mt30']} rows per episode, mt80: "
                        f"{EPISODE_ROWS['mt80']}): is this the other task set's data? (--tasks)")
                ds = _episodes_from_chunk(f, chunk["arrays"], task_set=task_set, tasks=tasks, episode0=episodes,
                                          obs_width=O, action_width=A)
                del chunk
                table = _arrow_table(ds)
                table = table.replace_schema_metadata(
                    {METADATA_KEY: json.dumps(meta, sort_keys=True, default=str).encode()})
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema, **PARQUET_OPTIONS)
                writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
                counts += np.bincount(ds.episode_task, minlength=len(tasks))
                episodes += ds.num_episodes
                rows += ds.num_rows
                log(f"{f.name}: {ds.num_episodes} episodes ({chunk_summary(ds)})")
                del ds, table
        finally:
            if writer is not None:
                writer.close()
    return {"files": [s["file"] for s in sources], "episodes": episodes, "rows": rows,
            "episodes_per_task": {t.name: int(c) for t, c in zip(tasks, counts) if c},
            "layouts": sorted(layouts), "bytes": os.path.getsize(out)}


def chunk_summary(ds: EpisodeDataset) -> str:
    ids, n = np.unique(ds.episode_task, return_counts=True)
    return ", ".join(f"{ds.tasks[i].name} {c}" for i, c in zip(ids, n))


__all__ = ["EPISODE_ROWS", "RELEASE_CHUNKS", "REQUIRED_KEYS", "OfficialDataError", "DamagedChunkError",
           "task_set_table", "chunk_files", "check_chunk", "load_chunk", "convert_chunks"]
