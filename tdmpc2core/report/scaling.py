"""The multi-task scaling table and figure (the paper's "one agent, many tasks, better as the
model grows"), from ``results/multi/{pool}/size{model_size}/`` runs.

Pure pandas / numpy (matplotlib for the figure); the stage ``tdmpc2 scaling`` calls these on
the pipeline's files and a test calls them on hand-made ones.

Conventions:

* A seed's return on a task at an evaluation is the mean over that evaluation's episodes;
  its normalized score on the task is ``100 (return - low) / (high - low)`` for the task's
  declared return range (``return_low`` / ``return_high`` columns of ``eval.parquet``;
  DM Control: [0, 1000], the paper's return / 10), and its normalized score is the mean
  over tasks (NaN when a task has no declared range: never a mix of scores and raw returns).
* Over seeds: mean, population sd (``ddof=0``), min and max, as the single-task tables.
* "Final" is each run's last evaluation.
* The single-task return beside a task's multi-task return is the final evaluation of the
  single-task runs of the same task (``results/single/{task}/seed*/eval.parquet``), i.e. of
  the agents whose replay the pool holds.
"""
from __future__ import annotations

import math
import os
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

MULTI_EVAL_COLUMNS = ("pool", "model_size", "task", "seed", "eval_index", "updates", "episode", "return",
                      "length", "normalized_score", "return_low", "return_high")


def run_dir(root: str | os.PathLike, pool: str, model_size: int) -> str:
    """``{root}/{pool}/size{model_size}`` (docs/artifacts.md)."""
    return os.path.join(os.fspath(root), pool, f"size{int(model_size)}")


def read_multi_evals(paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """Concatenate multi-task ``eval.parquet`` files, checking their columns.

    Raises:
      FileNotFoundError: a missing file; ValueError: a file without the columns of
      docs/artifacts.md (named).
    """
    frames = []
    for p in paths:
        p = os.fspath(p)
        if not os.path.exists(p):
            raise FileNotFoundError(f"multi-task evaluation file {p} does not exist")
        df = pd.read_parquet(p)
        missing = [c for c in MULTI_EVAL_COLUMNS if c not in df.columns]
        if missing:
            raise ValueError(f"{p}: not a multi-task eval.parquet of docs/artifacts.md; missing columns {missing}")
        frames.append(df[list(MULTI_EVAL_COLUMNS)])
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in MULTI_EVAL_COLUMNS})
    return pd.concat(frames, ignore_index=True)


def task_scores(evals: pd.DataFrame) -> pd.DataFrame:
    """One row per (pool, model_size, seed, evaluation, task): mean return and normalized
    score over the episodes, and the task's declared range."""
    keys = ["pool", "model_size", "seed", "eval_index", "updates", "task"]
    cols = keys + ["return", "normalized_score", "episodes", "return_low", "return_high"]
    if evals.empty:
        return pd.DataFrame(columns=cols)
    g = evals.groupby(keys, sort=False)
    out = g.agg(**{"return": ("return", "mean"), "normalized_score": ("normalized_score", "mean"),
                   "episodes": ("return", "size"), "return_low": ("return_low", "first"),
                   "return_high": ("return_high", "first")}).reset_index()
    return out[cols]


def final_task_scores(scores: pd.DataFrame) -> pd.DataFrame:
    """The last evaluation of each (pool, model_size, seed)."""
    if scores.empty:
        return scores
    last = scores.groupby(["pool", "model_size", "seed"])["eval_index"].transform("max")
    return scores[scores["eval_index"] == last].reset_index(drop=True)


def _stats(x) -> dict:
    x = np.asarray(x, np.float64)
    if x.size == 0:
        return {"mean": math.nan, "sd": math.nan, "min": math.nan, "max": math.nan}
    if np.isnan(x).any():
        return {"mean": math.nan, "sd": math.nan, "min": math.nan, "max": math.nan}
    sd = float(x.std(ddof=0)) if x.size > 1 else math.nan  # one seed: no spread (not 0)
    return {"mean": float(x.mean()), "sd": sd, "min": float(x.min()), "max": float(x.max())}


SCALING_COLUMNS = ["pool", "model_size", "params", "updates", "n_tasks", "n_seeds", "score_mean", "score_sd",
                   "score_min", "score_max", "mean_return", "published_score", "note"]
PUBLISHED_MULTITASK = "resources/published_multitask_scores.csv"


def published_multitask_scores() -> pd.DataFrame:
    """The paper's multi-task normalized scores per task set and model size that we carry
    (``tdmpc2core/resources/published_multitask_scores.csv``: task_set, model_size,
    normalized_score, source). Only values verified from a readable source are carried; today
    none (tdmpc2core/resources/README.md says why)."""
    from importlib import resources

    with resources.files("tdmpc2core").joinpath(PUBLISHED_MULTITASK).open("r") as fh:
        return pd.read_csv(fh, dtype={"task_set": str, "model_size": "Int64", "normalized_score": float,
                                      "source": str})


def scaling_table(final: pd.DataFrame, params: Mapping[tuple, int], pools: Sequence[str],
                  sizes: Sequence[int], published: Optional[Mapping[tuple, float]] = None) -> pd.DataFrame:
    """Per (pool, model_size): the final normalized score (mean over tasks per seed, then
    mean / sd / min / max over seeds) and ``mean_return``, the raw return averaged over tasks
    and seeds (tasks of different return scales mixed: kept for the CSV, not shown).

    ``params``: {(pool, model_size): learnable parameters} (from each run's run.json).
    ``published``: {(pool, model_size): the paper's normalized score} where one is carried
    (:func:`published_multitask_scores`), else ``published_score`` is NaN.
    A missing run gets a row with a note.
    """
    rows = []
    for pool in pools:
        for size in sizes:
            f = final[(final["pool"] == pool) & (final["model_size"] == size)]
            r = {c: math.nan for c in SCALING_COLUMNS}
            r.update(pool=pool, model_size=int(size), params=params.get((pool, int(size)), math.nan), note="",
                     published_score=(published or {}).get((pool, int(size)), math.nan))
            if f.empty:
                r.update(n_tasks=0, n_seeds=0, note="no evaluation found")
                rows.append(r)
                continue
            per_seed = f.groupby("seed")["normalized_score"].apply(lambda s: float(s.mean()) if s.notna().all()
                                                                   else math.nan)
            st = _stats(per_seed.to_numpy())
            notes = []
            unranged = sorted(f.loc[f["normalized_score"].isna(), "task"].unique())
            if unranged:
                notes.append(f"no declared return range for {unranged}: no normalized score")
            r.update(updates=int(f["updates"].max()), n_tasks=int(f["task"].nunique()), n_seeds=int(f["seed"].nunique()),
                     score_mean=st["mean"], score_sd=st["sd"], score_min=st["min"], score_max=st["max"],
                     mean_return=float(f.groupby("seed")["return"].mean().mean()), note="; ".join(notes))
            rows.append(r)
    out = pd.DataFrame(rows, columns=SCALING_COLUMNS)
    for c in ("model_size", "n_tasks", "n_seeds"):
        out[c] = out[c].astype("Int64")
    out["updates"] = out["updates"].astype("Int64")
    return out


TASK_COLUMNS = ["pool", "task", "model_size", "multi_mean", "multi_sd", "multi_min", "multi_max", "seed_returns",
                "score_mean", "return_low", "return_high", "single_mean", "single_sd", "single_agent_steps",
                "expected", "result", "note"]


def task_table(final: pd.DataFrame, final_evals_ranges: pd.DataFrame, single_final: pd.DataFrame,
               pools: Mapping[str, Sequence[str]], sizes: Sequence[int],
               expected: Mapping[str, Mapping[str, Mapping]]) -> pd.DataFrame:
    """Per (pool, task, model_size): the multi-task final return over seeds beside the
    single-task final return of the same task, and the expected-range check.

    ``final_evals_ranges``: rows of (pool, model_size, task, return_low, return_high).
    ``single_final``: one row per (task, seed) with the single-task final ``return`` and
    ``agent_steps``. ``expected``: {pool: {task: {mean_min, mean_max, seed_min}}} (on the
    final multi-task return, mean over seeds and every seed), applied to every model size.
    """
    from .analysis import expected_range_text

    rows = []
    for pool, tasks in pools.items():
        for task in tasks:
            s = single_final[single_final["task"] == task] if not single_final.empty else single_final
            sst = _stats(s["return"].to_numpy()) if len(s) else _stats([])
            for size in sizes:
                f = final[(final["pool"] == pool) & (final["model_size"] == size) & (final["task"] == task)]
                rg = final_evals_ranges[(final_evals_ranges["pool"] == pool) & (final_evals_ranges["model_size"] == size)
                                        & (final_evals_ranges["task"] == task)]
                exp = ((expected or {}).get(pool) or {}).get(task)
                st = _stats(f["return"].to_numpy())
                r = {c: math.nan for c in TASK_COLUMNS}
                r.update(pool=pool, task=task, model_size=int(size), multi_mean=st["mean"], multi_sd=st["sd"],
                         multi_min=st["min"], multi_max=st["max"],
                         seed_returns="; ".join(f"{int(a)}: {b:.1f}" for a, b in zip(f["seed"], f["return"])),
                         score_mean=float(f["normalized_score"].mean()) if len(f) else math.nan,
                         return_low=float(rg["return_low"].iloc[0]) if len(rg) else math.nan,
                         return_high=float(rg["return_high"].iloc[0]) if len(rg) else math.nan,
                         single_mean=sst["mean"], single_sd=sst["sd"],
                         single_agent_steps=(int(s["agent_steps"].max()) if len(s) else math.nan),
                         expected=expected_range_text(exp), note="")
                if f.empty:
                    r.update(result="fail" if exp else "no expectation", note="no evaluation found")
                elif not exp:
                    r.update(result="no expectation")
                else:
                    vals = f["return"].to_numpy()
                    ok = ((exp.get("mean_min") is None or vals.mean() >= exp["mean_min"])
                          and (exp.get("mean_max") is None or vals.mean() <= exp["mean_max"])
                          and (exp.get("seed_min") is None or bool((vals >= exp["seed_min"]).all())))
                    r.update(result="pass" if ok else "fail")
                if s is not None and len(s) == 0:
                    r["note"] = (r["note"] + "; " if r["note"] else "") + "no single-task evaluation found"
                rows.append(r)
    out = pd.DataFrame(rows, columns=TASK_COLUMNS)
    out["model_size"] = out["model_size"].astype("Int64")
    out["single_agent_steps"] = out["single_agent_steps"].astype("Int64")
    return out


def plot_scaling(scaling: pd.DataFrame, tasks: pd.DataFrame, path: str | os.PathLike) -> None:
    """Left: final normalized score vs learnable parameters (log x), one line per pool, mean
    over seeds with min-max bars, each point labelled with its model size. Right: each task's
    final multi-task return vs model size, its single-task return as a dashed line."""
    from .figures import _plt, save_atomic

    plt = _plt()
    pools = list(dict.fromkeys(scaling["pool"]))
    task_keys = list(dict.fromkeys(zip(tasks["pool"], tasks["task"])))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    ax = axes[0]
    for pool in pools:
        d = scaling[(scaling["pool"] == pool) & scaling["score_mean"].notna()].sort_values("params")
        if d.empty:
            continue
        x = d["params"].astype(float).to_numpy()
        y = d["score_mean"].to_numpy(float)
        err = np.vstack([y - d["score_min"].to_numpy(float), d["score_max"].to_numpy(float) - y])
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=f"pool {pool}")
        for xi, yi, s in zip(x, y, d["model_size"]):
            ax.annotate(f"size {int(s)}", (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=8)
        pub = d[d["published_score"].notna()] if "published_score" in d else d.iloc[:0]
        if len(pub):
            ax.plot(pub["params"].astype(float), pub["published_score"].astype(float), "k^", linestyle=":",
                    label=f"pool {pool}: paper")
    ax.set_xscale("log")
    ax.set_xlabel("learnable parameters")
    ax.set_ylabel("normalized score (0-100)")
    ax.set_title("Multi-task: final normalized score vs model size\n(mean over seeds; bars: min-max)")
    if pools:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax = axes[1]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (pool, task) in enumerate(task_keys):
        d = tasks[(tasks["pool"] == pool) & (tasks["task"] == task)].sort_values("model_size")
        c = colors[i % len(colors)]
        xs = d["model_size"].astype(float).to_numpy()
        ax.errorbar(xs, d["multi_mean"].to_numpy(float),
                    yerr=np.vstack([d["multi_mean"] - d["multi_min"], d["multi_max"] - d["multi_mean"]]).astype(float),
                    marker="o", capsize=3, color=c, label=f"{task} ({pool}): multi-task")
        single = d["single_mean"].dropna()
        if len(single):
            ax.axhline(float(single.iloc[0]), color=c, linestyle="--", linewidth=1, label=f"{task}: single-task")
    ax.set_xscale("log")
    sizes = sorted(set(int(s) for s in tasks["model_size"].dropna()))
    if sizes:
        ax.set_xticks(sizes)
        ax.set_xticklabels([str(s) for s in sizes])
        ax.minorticks_off()
    ax.set_xlabel("model-size preset")
    ax.set_ylabel("final return")
    ax.set_title("Per task: multi-task return (mean, min-max over seeds)\nbeside the single-task return (dashed)")
    ax.grid(alpha=0.3)
    if 0 < len(task_keys) <= 10:
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_atomic(fig, path)
    plt.close(fig)


__all__ = ["read_multi_evals", "task_scores", "final_task_scores", "scaling_table", "task_table", "plot_scaling",
           "run_dir", "MULTI_EVAL_COLUMNS", "SCALING_COLUMNS", "TASK_COLUMNS"]
