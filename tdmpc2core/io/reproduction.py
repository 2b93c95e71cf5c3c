"""The results file of ``benchmarks/reproduction.py`` (the paper's numbers, reproduced; issue 45):
its columns, reading, checking, and its rows made from finished training runs.

One Parquet file, one row per (task, seed, evaluation point) of ``tdmpc2 train-single`` runs:

* ``task``: the dm_control task as the published files name it (``cheetah-run``);
* ``seed``;
* ``env_steps``: simulator steps at the evaluation (agent steps x action repeat: the published
  curves' x axis); ``agent_steps``: agent steps (decisions) at the evaluation;
* ``eval_return``: the mean return over the evaluation's episodes (DMControl's 0-1000 scale);
  ``eval_episodes``: how many;
* ``model_size``: the agent's model-size preset; ``precision``: the Dense layers' matmul
  precision (``"highest"``: full float32, as 5f6fade);
* ``device``: the JAX device kind the run trained on (``"TPU v5 lite"``, ``"cpu"``);
* ``commit``: the git commit of the code that trained it: the one the run recorded (run.json's
  ``provenance.git.commit``) when its work tree had no uncommitted change; for a run trained
  in a copy without git (none recorded) or in a work tree with changes (``dirty``, or not
  known to be clean), the commit of the code at hand, only when the run's ``code_version`` is
  that code's (:func:`run_commit`).

Beside it, ``<name>.json`` (:func:`meta_path`): the plan (the configuration's tasks, their run
length and seeds), the resolved settings of each collected task and the wall time of every call
(written by the benchmark; read by the report). Read by tdmpc2core/report/reproduction.py and
checked at plan time (tdmpc2core/pipeline/config.py, config key ``reproduction``). Pure pandas.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from .results_file import read_checked_parquet

#: The Parquet file's columns (in order) and their dtype kinds.
COLUMNS = {"task": "O", "seed": "i", "env_steps": "i", "agent_steps": "i", "eval_return": "f", "eval_episodes": "i",
           "model_size": "i", "precision": "O", "device": "O", "commit": "O"}
#: One row per these.
KEY = ("task", "seed", "env_steps")


def meta_path(path: str | os.PathLike) -> Path:
    """The JSON beside a results file: ``reproduction.parquet`` -> ``reproduction.json``."""
    return Path(os.path.splitext(os.fspath(path))[0] + ".json")


def check_frame(df: pd.DataFrame, source: str = "the results") -> pd.DataFrame:
    """``df`` with its columns checked and typed (see :data:`COLUMNS`), sorted by :data:`KEY`.

    Raises:
      ValueError: a missing column or one of the wrong kind (named), no rows, a duplicated
        (task, seed, env_steps) row, a negative step or episode count, a non-finite return, or
        ``env_steps`` not a whole multiple of ``agent_steps`` (the action repeat).
    """
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{source}: missing column(s) {missing}; expected {list(COLUMNS)}")
    if df.empty:
        raise ValueError(f"{source}: no rows (no evaluation was recorded)")
    for c, kind in COLUMNS.items():
        got = df[c].dtype.kind
        ok = (got in ("O", "U", "S") or str(df[c].dtype) in ("string", "str")) if kind == "O" else (
            got in "iu" if kind == "i" else got in "fiu")
        if not ok:
            raise ValueError(f"{source}: column {c!r} has dtype {df[c].dtype}, expected kind {kind!r}")
    dup = df.duplicated(list(KEY))
    if dup.any():
        row = df[dup].iloc[0]
        raise ValueError(f"{source}: duplicated row {({k: _plain(row[k]) for k in KEY})}")
    for c in ("seed", "env_steps", "agent_steps", "eval_episodes"):
        if (df[c] < 0).any():
            raise ValueError(f"{source}: column {c!r} has negative values, e.g. {_plain(df[c][df[c] < 0].iloc[0])}")
    if not np.isfinite(df["eval_return"].to_numpy(np.float64)).all():
        raise ValueError(f"{source}: column 'eval_return' has non-finite values")
    steps = df[df["agent_steps"] > 0]
    bad = steps[steps["env_steps"] % steps["agent_steps"] != 0]
    if len(bad):
        r = bad.iloc[0]
        raise ValueError(f"{source}: env_steps {_plain(r['env_steps'])} is not a whole multiple of agent_steps "
                         f"{_plain(r['agent_steps'])} (task {r['task']!r}, seed {_plain(r['seed'])})")
    out = df[list(COLUMNS)].copy()
    out["eval_return"] = out["eval_return"].astype(np.float64)
    for c in ("seed", "env_steps", "agent_steps", "eval_episodes", "model_size"):
        out[c] = out[c].astype(np.int64)
    for c in ("task", "precision", "device", "commit"):
        out[c] = out[c].astype(object)
    return out.sort_values(list(KEY), kind="stable").reset_index(drop=True)


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def read_results(path: str | os.PathLike) -> pd.DataFrame:
    """The benchmark's Parquet file, checked (:func:`check_frame`).

    Raises: FileNotFoundError (the path), ValueError (a folder, a file that is not Parquet, bad
    columns or rows: named)."""
    return read_checked_parquet(path, "reproduction results", check_frame)


def read_meta(path: str | os.PathLike) -> dict:
    """The JSON beside the results file ``path`` (:func:`meta_path`), {} when there is none.

    Raises: ValueError naming the file when it is not a JSON object."""
    p = meta_path(path)
    if not p.exists():
        return {}
    try:
        meta = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not JSON ({e})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{p}: expected a JSON object, got {type(meta).__name__}")
    return meta


def run_commit(info: dict, run_json, commit: Optional[str] = None, code_version: Optional[str] = None) -> str:
    """The commit a finished run's rows name (``info``: its run.json, read from ``run_json``).

    The run's own record first: its provenance's git commit when its work tree was clean
    (``dirty`` false), whatever ``commit`` says (a run directory trained by other code than the
    one at hand keeps its commit). A run that recorded none was trained in a copy of the work
    tree without git; one whose work tree had uncommitted changes (``dirty`` true, or not
    recorded) ran code that commit does not hold (the accelerator machine's copy: the files of
    the commit sent over a git folder of an older one). Either gets ``commit``, the commit of
    the code at hand (``--commit`` or the work tree's HEAD), only when that is verifiably the
    code that trained it: the run's ``code_version`` (run.json; the hash of the training stage
    and every module it imports, tdmpc2core.pipeline.codeversion) equals ``code_version``, the
    code at hand's. Otherwise the rows could name a commit that never trained them, so it is an
    error.

    Raises:
      ValueError: no clean commit recorded and none given, or the run's code version missing
        or other than ``code_version`` (both named, with what to do).
    """
    git = (info.get("provenance") or {}).get("git") or {}
    recorded = git.get("commit")
    if recorded and git.get("dirty") is False:
        return str(recorded)
    why = (f"its git commit {recorded} recorded with uncommitted changes in the work tree" if recorded and git.get("dirty")
           else f"its git commit {recorded} recorded without knowing whether the work tree had changes" if recorded
           else "no git commit recorded (a copy of the work tree without git)")
    if not commit:
        raise ValueError(f"{run_json}: {why}; give the commit that ran (--commit)")
    ran = info.get("code_version")
    if code_version is None or ran != code_version:
        what = ("records no code_version either" if not ran
                else f"ran code version {ran}, and the code here (commit {commit}) is "
                     + (f"code version {code_version}" if code_version else "of no known code version"))
        raise ValueError(f"{run_json}: {why}, and it {what}: the commit that trained it cannot be "
                         f"told, so its rows would be mislabelled {commit}. Collect it with the code that trained it "
                         "(check out that commit; its code version then matches), or train it again (delete its "
                         "folder under results/single and its checkpoint folder)")
    return str(commit)


def rows_from_runs(run_dir: str | os.PathLike, published: str, seeds: Sequence[int],
                   commit: Optional[str] = None, code_version: Optional[str] = None) -> tuple[pd.DataFrame, list[dict]]:
    """The results rows of one finished ``tdmpc2 train-single`` job, and its seeds' run.json.

    ``run_dir``: the task's folder of the pipeline's runs (``results/single/<task>``), holding
    ``seed<S>/eval.parquet`` and ``seed<S>/run.json`` of each of ``seeds``; ``published``: the
    task's published name (the ``task`` column); ``commit`` and ``code_version``: the commit and
    the training stage's code version (``code_version("train_single")``) of the code at hand,
    for a run that recorded no commit (:func:`run_commit`).

    Per seed and evaluation: ``eval_return`` the mean of the episodes' returns, ``eval_episodes``
    their number, ``env_steps`` the eval.parquet's ``env_frames``; ``model_size`` and
    ``precision`` (``matmul_precision``) from run.json's ``agent_config``, ``device`` its
    provenance's JAX device kind (``"unknown"`` when not recorded), ``commit``
    (:func:`run_commit`): the run's own, else ``commit`` when the code versions agree.

    Raises:
      FileNotFoundError: a seed's run.json (written last: the job has not finished) or
        eval.parquet is missing (the path named).
      ValueError: a run whose commit cannot be told (:func:`run_commit`), or a run.json
        without ``agent_config`` (named).
    """
    frames, runs = [], []
    for seed in seeds:
        d = Path(run_dir) / f"seed{int(seed)}"
        run_json = d / "run.json"
        if not run_json.exists():
            raise FileNotFoundError(f"{run_json} does not exist: the job of seed {seed} has not finished")
        info = json.loads(run_json.read_text())
        cfg = info.get("agent_config")
        if not isinstance(cfg, dict):
            raise ValueError(f"{run_json}: no agent_config")
        the_commit = run_commit(info, run_json, commit, code_version)
        prov = info.get("provenance") or {}
        device = (prov.get("platform") or {}).get("device_kind") or "unknown"
        ev = pd.read_parquet(d / "eval.parquet")
        g = ev.groupby(["agent_steps", "env_frames"], sort=True)["return"]
        agg = g.agg(["mean", "size"]).reset_index()
        frames.append(pd.DataFrame({
            "task": published, "seed": int(seed), "env_steps": agg["env_frames"].astype(np.int64),
            "agent_steps": agg["agent_steps"].astype(np.int64), "eval_return": agg["mean"].astype(np.float64),
            "eval_episodes": agg["size"].astype(np.int64), "model_size": int(cfg.get("model_size") or -1),
            "precision": str(cfg.get("matmul_precision", "unknown")), "device": str(device),
            "commit": str(the_commit)}))
        runs.append(info)
    return check_frame(pd.concat(frames, ignore_index=True), f"{run_dir}"), runs


def append_rows(existing: Optional[pd.DataFrame], new: pd.DataFrame, overwrite: bool = False,
                source: str = "the results") -> pd.DataFrame:
    """``existing`` (None: no file yet) with the rows of ``new`` added, checked and sorted.

    Raises:
      ValueError: a row of ``new`` whose (task, seed, env_steps) ``existing`` already has, unless
        ``overwrite`` (then the new row replaces it): the first such row and the count named.
    """
    if existing is None or existing.empty:
        return check_frame(new, source)
    key = list(KEY)
    both = existing.merge(new[key], on=key, how="inner")
    if len(both) and not overwrite:
        r = both.iloc[0]
        raise ValueError(f"{source} already holds {len(both)} of the new rows, e.g. task {r['task']!r} seed "
                         f"{_plain(r['seed'])} at {_plain(r['env_steps'])} simulator steps; pass --overwrite to "
                         "replace them")
    keep = existing.merge(new[key].assign(_new=True), on=key, how="left")
    keep = keep[keep["_new"].isna()].drop(columns="_new")
    return check_frame(pd.concat([keep, new], ignore_index=True), source)


__all__ = ["COLUMNS", "KEY", "meta_path", "check_frame", "read_results", "read_meta", "rows_from_runs", "run_commit",
           "append_rows"]
