"""The paper's numbers, reproduced (issue 45): our DMControl runs at the published points.

``benchmarks/reproduction.py`` trains the chosen dm_control tasks through the pipeline's own
``tdmpc2 train-single`` stage and writes every evaluation of every seed to one Parquet file
(:data:`tdmpc2core.io.reproduction.COLUMNS`). This module reads that file and judges it by the
rule stated in advance in docs/fidelity.md ("The paper's numbers, reproduced"):

* at each published point of a task (simulator steps 0, 100,000 and, for the longer runs,
  200,000: every published point up to the run's length), our **mean over seeds** is *inside*
  when it lies in the published seeds' [min, max] widened by :data:`MARGIN` return points on
  each side (inclusive), else *outside*; a published point the run should reach but has no
  evaluation of ours is *missing* (:func:`point_table`);
* a task is *inside* when every one of its published points is inside, *outside* when one is
  outside, else *incomplete* (:func:`task_verdicts`);
* overall, "N of M tasks inside" at :data:`HEADLINE_ENV_STEPS` simulator steps: M the tasks with
  an evaluation there, N those inside (:func:`headline`).

The published [min, max] over seeds: :func:`tdmpc2core.report.published.seed_range`
(``tdmpc2core/resources/published_dmc_seed_range.csv``, from the official repository's
per-seed files). Returns are DMControl episode returns (0..1000); steps are simulator steps
(agent steps x 2). Pure numpy / pandas (matplotlib for the figure only); no JAX.
"""
from __future__ import annotations

import math
import os
from typing import Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from ..io.reproduction import COLUMNS, KEY, check_frame, meta_path, read_meta, read_results  # noqa: F401
from . import published as P

#: The widening of the published seeds' [min, max] on each side (return points; 0-1000 scale).
MARGIN = 100.0
#: The point of the overall count ("N of M tasks inside"), in simulator steps.
HEADLINE_ENV_STEPS = 100_000
#: Verdicts of a point and of a task.
INSIDE, OUTSIDE, MISSING, INCOMPLETE = "inside", "outside", "missing", "incomplete"


def published_points(task: str, max_env_steps: Optional[int] = None, margin: float = MARGIN) -> pd.DataFrame:
    """The published points of ``task`` up to ``max_env_steps`` simulator steps (None: all in the
    packaged range table): ``env_steps``, ``agent_steps``, ``pub_n``, ``pub_mean``, ``pub_min``,
    ``pub_max``, ``band_low`` = pub_min - margin, ``band_high`` = pub_max + margin (both rounded to
    the table's 2 decimals).

    Raises: KeyError for a task without a published DMControl state curve."""
    r = P.seed_range(task)
    if max_env_steps is not None:
        r = r[r["env_steps"] <= int(max_env_steps)]
    return pd.DataFrame({
        "env_steps": r["env_steps"].astype(np.int64).to_numpy(),
        "agent_steps": r["agent_steps"].astype(np.int64).to_numpy(),
        "pub_n": r["n_seeds"].astype(np.int64).to_numpy(), "pub_mean": r["mean_return"].to_numpy(np.float64),
        "pub_min": r["min_return"].to_numpy(np.float64), "pub_max": r["max_return"].to_numpy(np.float64),
        # to the table's 2 decimals, so that a return on an edge is on it (454.4 - 100 is 354.40000000000003)
        "band_low": np.round(r["min_return"].to_numpy(np.float64) - margin, 2),
        "band_high": np.round(r["max_return"].to_numpy(np.float64) + margin, 2)})


def plan_of(df: pd.DataFrame, meta: Optional[Mapping] = None) -> dict:
    """task -> the simulator steps its run was planned to reach: the ``plan`` of the benchmark's
    JSON (``{task: {"env_steps": N, ...}}``) when given, else each task's last evaluation in
    ``df``. A task of the plan with no row is kept (it is missing); a task with rows but not in
    the plan is added at its last evaluation."""
    plan = {}
    for task, p in ((meta or {}).get("plan") or {}).items():
        plan[str(task)] = int(p["env_steps"])
    for task, g in df.groupby("task", sort=True):
        plan.setdefault(str(task), int(g["env_steps"].max()))
    return plan


def planned_seeds(meta: Optional[Mapping]) -> dict:
    """task -> the seeds its run was planned with (the JSON's ``plan``; {} without one)."""
    return {str(t): [int(s) for s in p["seeds"]] for t, p in ((meta or {}).get("plan") or {}).items() if p.get("seeds")}


def point_table(df: pd.DataFrame, plan: Optional[Mapping[str, int]] = None, margin: float = MARGIN,
                seeds: Optional[Mapping[str, Sequence[int]]] = None) -> pd.DataFrame:
    """One row per (task, published point up to the task's planned length): ``task``,
    ``env_steps``, ``agent_steps``, the published ``pub_n``/``pub_mean``/``pub_min``/``pub_max``,
    ``band_low``/``band_high`` (:func:`published_points`), ours: ``n_seeds``, ``seeds`` (tuple),
    ``seed_returns`` (tuple, in seed order), ``mean`` (over seeds; NaN when missing), and
    ``verdict`` (:data:`INSIDE` when band_low <= mean <= band_high, the mean taken to the
    published table's 0.01 return points, :data:`OUTSIDE`, or
    :data:`MISSING` when no seed of ours was evaluated at that point, or, with ``seeds``, not
    every planned seed: a task whose seeds train in jobs of their own is judged once all are in).

    ``plan``: task -> planned simulator steps (:func:`plan_of`; default: from ``df`` alone).
    ``seeds``: task -> its planned seeds (:func:`planned_seeds`; default: whatever seeds it has).

    Raises: KeyError for a task without a published curve (named)."""
    plan = dict(plan_of(df) if plan is None else plan)
    rows = []
    for task in sorted(plan):
        ours = df[df["task"] == task]
        for p in published_points(task, plan[task], margin).itertuples(index=False):
            at = ours[ours["env_steps"] == p.env_steps].sort_values("seed")
            x = at["eval_return"].to_numpy(np.float64)
            mean = float(x.mean()) if x.size else float("nan")
            # judged to the published table's precision (0.01 return points): a mean on an edge is inside
            short = seeds is not None and task in seeds and not set(seeds[task]) <= set(int(v) for v in at["seed"])
            verdict = MISSING if not x.size or short else (
                INSIDE if p.band_low <= round(mean, 2) <= p.band_high else OUTSIDE)
            rows.append(dict(task=task, env_steps=int(p.env_steps), agent_steps=int(p.agent_steps), pub_n=int(p.pub_n),
                             pub_mean=float(p.pub_mean), pub_min=float(p.pub_min), pub_max=float(p.pub_max),
                             band_low=float(p.band_low), band_high=float(p.band_high), n_seeds=int(x.size),
                             seeds=tuple(int(s) for s in at["seed"]), seed_returns=tuple(float(v) for v in x),
                             mean=mean, verdict=verdict))
    cols = ["task", "env_steps", "agent_steps", "pub_n", "pub_mean", "pub_min", "pub_max", "band_low", "band_high",
            "n_seeds", "seeds", "seed_returns", "mean", "verdict"]
    return pd.DataFrame(rows, columns=cols)


def task_verdicts(points: pd.DataFrame) -> pd.DataFrame:
    """One row per task of :func:`point_table`'s ``points``: ``verdict`` (:data:`OUTSIDE` when a
    point is outside, else :data:`INCOMPLETE` when a point is missing, else :data:`INSIDE`),
    ``points`` (its published points, simulator steps), ``outside`` and ``missing`` (the points
    so judged)."""
    rows = []
    for task, g in points.groupby("task", sort=True):
        out = [int(s) for s, v in zip(g["env_steps"], g["verdict"]) if v == OUTSIDE]
        miss = [int(s) for s, v in zip(g["env_steps"], g["verdict"]) if v == MISSING]
        verdict = OUTSIDE if out else (INCOMPLETE if miss else INSIDE)
        rows.append(dict(task=task, verdict=verdict, points=tuple(int(s) for s in g["env_steps"]), outside=tuple(out),
                         missing=tuple(miss)))
    return pd.DataFrame(rows, columns=["task", "verdict", "points", "outside", "missing"])


def headline(points: pd.DataFrame, env_steps: int = HEADLINE_ENV_STEPS) -> dict:
    """The overall count at ``env_steps`` simulator steps: ``inside`` (N), ``evaluated`` (M: tasks
    judged there: every planned seed evaluated), ``planned`` (tasks whose run should reach it),
    ``missing`` (planned, not judged yet: no evaluation, or not every planned seed's; task
    names), ``env_steps`` and ``text`` ("N of M tasks inside at 100,000 simulator steps", with the
    missing ones named when there are any)."""
    at = points[points["env_steps"] == int(env_steps)]
    evaluated = at[at["verdict"] != MISSING]
    n, m = int((evaluated["verdict"] == INSIDE).sum()), int(len(evaluated))
    missing = sorted(at.loc[at["verdict"] == MISSING, "task"])
    text = f"{n} of {m} tasks inside at {int(env_steps):,} simulator steps"
    if not len(at):  # e.g. the reduced CPU form: its runs end long before the headline's point
        text = (f"no task's run reaches {int(env_steps):,} simulator steps, the headline's point: each task is "
                "judged at the published points its run reaches")
    if missing:
        text += f" ({len(missing)} more planned, not judged yet: {', '.join(missing)})"
    return dict(inside=n, evaluated=m, planned=int(len(at)), missing=missing, env_steps=int(env_steps), text=text)


def partial_notes(df: pd.DataFrame, points: pd.DataFrame, meta: Optional[Mapping] = None) -> list[str]:
    """What the results file lacks against its plan, one sentence each: tasks of the plan with no
    row, published points a task's run should reach without an evaluation of any seed, tasks with
    fewer seeds than planned (the plan's ``seeds``; their points are not judged until all are in).
    Empty when the run is complete."""
    notes = []
    plan = (meta or {}).get("plan") or {}
    absent = sorted(t for t in plan if t not in set(df["task"]))
    if absent:
        notes.append(f"{len(absent)} of {len(plan)} planned task(s) have no results yet: {', '.join(absent)}.")
    for task, g in points[(points["verdict"] == MISSING) & (points["n_seeds"] == 0)].groupby("task", sort=True):
        if task in absent:
            continue
        steps = ", ".join(f"{int(s):,}" for s in g["env_steps"])
        notes.append(f"{task}: no evaluation yet at {steps} simulator steps.")
    for task, p in sorted(plan.items()):
        want = sorted(int(s) for s in p.get("seeds") or [])
        have = sorted(int(s) for s in df.loc[df["task"] == task, "seed"].unique())
        if want and have and have != want:
            notes.append(f"{task}: seeds {have} of the planned {want}.")
    return notes


# --------------------------------------------------------------------------- figure
def plot_task(df: pd.DataFrame, task: str, path: str | os.PathLike, max_env_steps: Optional[int] = None,
              margin: float = MARGIN) -> None:
    """One figure of ``task``: each of our seeds (thin lines) and their mean (thick) against the
    published seeds at the published points up to ``max_env_steps`` (default: our last
    evaluation, at least 100,000): each published seed's return (open circles; with three seeds
    the middle one is 3 x mean - min - max of the packaged table, within 0.03), their [min, max]
    (bars), mean (line) and the band widened by ``margin`` (shaded). x: simulator steps. Written atomically (PNG or SVG, by ``path``'s suffix).

    Raises: ValueError when ``df`` has no row of ``task``; KeyError for a task without a
    published curve."""
    from .figures import _fmt_frames, _plt, save_atomic

    ours = df[df["task"] == task]
    if ours.empty:
        raise ValueError(f"no rows of task {task!r}")
    last = int(ours["env_steps"].max())
    top = int(max_env_steps) if max_env_steps is not None else max(last, HEADLINE_ENV_STEPS)
    pub = published_points(task, top, margin)
    plt = _plt()
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(5.0, 3.2))
    ax.fill_between(pub["env_steps"], pub["band_low"], pub["band_high"], color="#1f77b4", alpha=0.12, lw=0,
                    label=f"published [min, max] ± {margin:g}")
    ax.errorbar(pub["env_steps"], pub["pub_mean"],
                yerr=np.stack([(pub["pub_mean"] - pub["pub_min"]).to_numpy(float),
                               (pub["pub_max"] - pub["pub_mean"]).to_numpy(float)]),
                color="#1f77b4", lw=1.5, capsize=4, marker="o", ms=4,
                label=f"published seeds (n={int(pub['pub_n'].max()) if len(pub) else 0}): each, mean, [min, max]")
    # each published seed's return: with three seeds the middle one is 3 x mean - min - max
    trio = pub[pub["pub_n"] == 3]
    if len(trio):
        mid = 3 * trio["pub_mean"] - trio["pub_min"] - trio["pub_max"]
        xs = np.repeat(trio["env_steps"].to_numpy(), 3)
        ys = np.column_stack([trio["pub_min"], mid, trio["pub_max"]]).ravel()
        ax.scatter(xs, ys, s=14, facecolors="none", edgecolors="#1f77b4", lw=0.8, zorder=3)
    for _, s in ours.groupby("seed"):
        s = s.sort_values("env_steps")
        ax.plot(s["env_steps"], s["eval_return"], color="#d62728", lw=0.7, alpha=0.45, marker=".", ms=3)
    m = ours.groupby("env_steps")["eval_return"].mean()
    ax.plot(m.index, m.to_numpy(), color="#d62728", lw=2, marker="o", ms=4,
            label=f"ours (n={ours['seed'].nunique()}): seeds, mean")
    ax.xaxis.set_major_formatter(FuncFormatter(_fmt_frames))
    ax.set_xlabel("simulator steps")
    ax.set_ylabel("evaluation return")
    ax.set_title(f"{task}: tdmpc2core vs the published TD-MPC2 seeds", fontsize=9)
    ax.set_ylim(-120, 1120)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    save_atomic(fig, path)
    plt.close(fig)


def verdict_words(point) -> str:
    """A point's verdict as the tables print it: the verdict, and for a point judged
    :data:`MISSING` with some seeds in (a task whose seeds train in jobs of their own) which
    seeds those are: "missing (seeds 0 in; judged once every planned seed is)". Their returns are
    shown beside it; they are not judged."""
    if point.verdict == MISSING and point.n_seeds:
        return f"missing (seeds {', '.join(str(s) for s in point.seeds)} in; judged once every planned seed is)"
    return str(point.verdict)


def points_markdown(points: pd.DataFrame) -> str:
    """The per-point table as Markdown (returns to 1 decimal). A point with some of its planned
    seeds in shows their returns and stays unjudged (:func:`verdict_words`)."""
    head = ("| task | simulator steps | ours: mean (seeds) | published: mean [min, max] (n) | band | verdict |\n"
            "|---|---|---|---|---|---|\n")
    lines = []
    for r in points.itertuples(index=False):
        ours = "—" if not r.n_seeds else (
            f"{r.mean:.1f} (" + ", ".join(f"{v:.1f}" for v in r.seed_returns) + ")")
        lines.append(f"| {r.task} | {r.env_steps:,} | {ours} | {r.pub_mean:.1f} [{r.pub_min:.1f}, {r.pub_max:.1f}] "
                     f"({r.pub_n}) | [{r.band_low:.1f}, {r.band_high:.1f}] | {verdict_words(r)} |")
    return head + "\n".join(lines) + "\n"


def report_context(path: str | os.PathLike) -> dict:
    """What results/report.html's "The paper's numbers, reproduced" section shows, from the
    benchmark's results file ``path`` (config key ``reproduction``): ``path``, ``points``
    (:func:`point_table` against the plan of the JSON beside it), ``tasks``
    (:func:`task_verdicts`), ``headline`` (:func:`headline`), ``partial`` (:func:`partial_notes`),
    ``figures`` ([(task, "png", bytes)], :func:`plot_task`), ``commits``, ``devices``,
    ``precisions``, ``model_sizes`` (the distinct values of the rows), ``meta`` (the JSON, {}
    without one), ``calls`` (its calls: per task the count and the wall seconds),
    ``margin``, ``headline_env_steps``.

    Raises: FileNotFoundError, ValueError (:func:`read_results`, :func:`read_meta`), KeyError
    (a task without a published curve)."""
    import tempfile

    df = read_results(path)
    meta = read_meta(path)
    plan = plan_of(df, meta)
    points = point_table(df, plan, seeds=planned_seeds(meta))
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for task in sorted(set(df["task"])):
            p = os.path.join(tmp, f"{task}.png")
            last = int(df.loc[df["task"] == task, "env_steps"].max())
            plot_task(df, task, p, max_env_steps=max(plan.get(task, 0), last))
            with open(p, "rb") as fh:
                figures.append((task, "png", fh.read()))
    calls = {}
    for c in meta.get("calls") or []:
        t = calls.setdefault(str(c.get("task")), {"calls": 0, "wall_s": 0.0})
        t["calls"] += 1
        w = c.get("wall_s")
        t["wall_s"] += float(w) if isinstance(w, (int, float)) and math.isfinite(w) else 0.0

    def distinct(col):
        return sorted({str(v) for v in df[col]})

    return dict(path=os.fspath(path), points=points, tasks=task_verdicts(points), headline=headline(points),
                partial=partial_notes(df, points, meta), figures=figures, commits=distinct("commit"),
                devices=distinct("device"), precisions=distinct("precision"),
                model_sizes=sorted({int(v) for v in df["model_size"]}), meta=meta, calls=calls, margin=MARGIN,
                headline_env_steps=HEADLINE_ENV_STEPS)


__all__ = ["MARGIN", "HEADLINE_ENV_STEPS", "INSIDE", "OUTSIDE", "MISSING", "INCOMPLETE", "published_points", "plan_of",
           "point_table", "task_verdicts", "headline", "partial_notes", "plot_task", "points_markdown",
           "report_context", "read_results", "read_meta", "meta_path"]
