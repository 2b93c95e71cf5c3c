"""The report's "Released checkpoints, our planner" table: each evaluated task of each
released checkpoint, its mean return over the evaluation episodes beside the published
TD-MPC2 final score of the task (:func:`tdmpc2core.report.published.final_point`: the last
point of the published single-task curve, 5M model, state observations).

Input: the ``eval.parquet`` files of ``tdmpc2 evaluate-official`` (one row per episode; the
skipped tasks and why in the file's ``tdmpc2.provenance`` metadata). pandas and pyarrow
only; no JAX.
"""
from __future__ import annotations

import json
import os
from typing import Iterable

import numpy as np
import pandas as pd

from . import published as P

#: Columns of :func:`official_table`.
COLUMNS = ("checkpoint", "model_size", "task_set", "task", "episodes", "return_mean", "return_sd",
           "normalized_score", "published_return", "published_sd", "published_agent_steps", "difference", "note",
           "checkpoint_file", "checkpoint_bytes", "checkpoint_sha256")
#: What the checkpoint file was (every row of a checkpoint): its name, size and SHA-256, checked
#: (zip CRC-32 of every member) by ``tdmpc2 evaluate-official`` before it was read.
FILE_COLUMNS = ("checkpoint_file", "checkpoint_bytes", "checkpoint_sha256")
PROVENANCE_KEY = b"tdmpc2.provenance"


def read_eval(path) -> tuple[pd.DataFrame, dict]:
    """(episodes, provenance) of one ``eval.parquet`` of ``tdmpc2 evaluate-official``.

    Raises:
      ValueError: a file without the provenance metadata or without the columns needed (named).
    """
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    meta = (t.schema.metadata or {}).get(PROVENANCE_KEY)
    if meta is None:
        raise ValueError(f"{path}: no {PROVENANCE_KEY.decode()} metadata: not written by tdmpc2 evaluate-official")
    df = t.to_pandas()
    need = ("checkpoint", "task", "episode", "return", "model_size", "task_set")
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: lacks columns {missing} (has {list(df.columns)})")
    return df, json.loads(meta)


def official_table(paths: Iterable) -> pd.DataFrame:
    """One row per (checkpoint, task): episodes, mean and population sd of the return, the
    normalized score (return / 10, the official evaluate.py's for DMC; 100 x the success rate for a
    task with a success flag, its Meta-World rule), the published TD-MPC2
    final score where the task has a published curve (else NaN, with a note), our mean minus
    it, and one row per skipped task (return NaN, the reason in ``note``); on every row the
    checkpoint file's name, size and SHA-256 (:data:`FILE_COLUMNS`; None where an older
    ``eval.parquet`` did not record the size)."""
    published = set(P.dmc_tasks())  # return curves; a success task's row gives its success rate instead
    rows = []
    for path in paths:
        df, prov = read_eval(path)
        where = prov.get("checkpoint_path")
        file = dict(checkpoint_file=os.path.basename(where) if where else None,
                    checkpoint_bytes=prov.get("checkpoint_bytes"), checkpoint_sha256=prov.get("checkpoint_sha256"))
        name = str(df["checkpoint"].iloc[0]) if len(df) else str(prov.get("checkpoint"))
        size = df["model_size"].iloc[0] if len(df) else None
        tset = df["task_set"].iloc[0] if len(df) else prov.get("task_set")
        multi = bool(prov.get("task_names"))
        for task, g in df.groupby("task", sort=False):
            r = g["return"].to_numpy(np.float64)
            row = dict(checkpoint=name, model_size=size, task_set=tset, task=task, episodes=len(r),
                       return_mean=float(r.mean()), return_sd=float(r.std()), normalized_score=float(r.mean()) / 10,
                       **file)
            succ = pd.to_numeric(g["success"], errors="coerce") if "success" in g else None
            if succ is not None and succ.notna().any():  # the paper's score of a success task (Meta-World)
                row["normalized_score"] = 100.0 * float(succ.astype(float).mean())
            if task in published:
                fp = P.final_point(task)
                row.update(published_return=fp["mean_return"], published_sd=fp["sd_return"],
                           published_agent_steps=fp["agent_steps"], difference=row["return_mean"] - fp["mean_return"],
                           note="published: single-task 5M agent" if multi else "")
            else:
                row.update(published_return=np.nan, published_sd=np.nan, published_agent_steps=np.nan,
                           difference=np.nan, note="no published curve for this task")
            rows.append(row)
        for task, why in (prov.get("skipped") or {}).items():
            rows.append(dict(checkpoint=name, model_size=size, task_set=tset, task=task, episodes=0,
                             return_mean=np.nan, return_sd=np.nan, normalized_score=np.nan, published_return=np.nan,
                             published_sd=np.nan, published_agent_steps=np.nan, difference=np.nan,
                             note=f"skipped: {why}", **file))
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    out["checkpoint_bytes"] = out["checkpoint_bytes"].astype("Int64")
    return out


def official_markdown(table: pd.DataFrame) -> str:
    from .analysis import markdown_table

    cols = ["checkpoint", "model_size", "task", "episodes", "return_mean", "return_sd", "published_return",
            "difference", "note"]
    heads = ["Checkpoint", "Model size", "Task", "Episodes", "Return (mean)", "Return (sd)",
             "Published TD-MPC2 final", "Ours - published", "Note"]
    files = table.drop_duplicates("checkpoint")
    return ("# Released checkpoints, our planner\n\nEach released checkpoint evaluated with this project's planner "
            "on dm_control (the official evaluate.py protocol), beside the published TD-MPC2 final score.\n\n"
            + markdown_table(table, cols, heads)
            + "\n\n## The checkpoint files\n\nEach file as it was read (every zip member's CRC-32 checked first).\n\n"
            + markdown_table(files, ["checkpoint", *FILE_COLUMNS], ["Checkpoint", "File", "Bytes", "SHA-256"]))


__all__ = ["COLUMNS", "FILE_COLUMNS", "read_eval", "official_table", "official_markdown"]
