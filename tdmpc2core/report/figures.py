"""Learning-curve figures (matplotlib, Agg backend): ours beside the published TD-MPC2 curve.

Every figure plots env frames on the x axis (simulator steps = agent steps x action
repeat), as the paper's figures do. Ours: the mean over seeds of each seed's score, shaded
between the lowest and the highest seed (min-max): the mean evaluation return, or for a task
with a success flag (Meta-World, MyoSuite) the success rate in percent (the official rule:
success at the episode's last step), as the paper plots those domains. Published TD-MPC2:
its mean, shaded +- 1 population sd over its seeds, in the same unit
(:func:`tdmpc2core.report.published.score_curve`).

Files are written atomically (:mod:`tdmpc2core.io.atomic`).
"""
from __future__ import annotations

import math
import os
from typing import Mapping, Optional

import pandas as pd

from ..io import atomic

OURS_COLOR = "#1f77b4"
#: the y axis of a task's score (:func:`tdmpc2core.report.analysis.task_score_kind`)
_YLABEL = {"return": "evaluation return", "success": "success rate (%)"}
PUB_COLOR = "#d62728"


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_atomic(fig, path: str | os.PathLike, dpi: int = 110) -> None:
    """Save a figure to ``path`` atomically (:func:`tdmpc2core.io.atomic.atomic_path`); the
    format comes from the extension (png when there is none)."""
    fmt = os.path.splitext(os.fspath(path))[1].lstrip(".").lower() or "png"
    with atomic.atomic_path(path, suffix="." + fmt) as tmp:
        fig.savefig(tmp, format=fmt, dpi=dpi, bbox_inches="tight")


def _fmt_frames(x, _pos=None) -> str:
    if x >= 1e6:
        return f"{x / 1e6:g}M"
    if x >= 1e3:
        return f"{x / 1e3:g}k"
    return f"{x:g}"


def _draw_ours(ax, summary: pd.DataFrame, n_seeds: int):
    x = summary["env_frames"].to_numpy(dtype=float)
    ax.fill_between(x, summary["min"].to_numpy(float), summary["max"].to_numpy(float),
                    color=OURS_COLOR, alpha=0.2, linewidth=0)
    ax.plot(x, summary["mean"].to_numpy(float), color=OURS_COLOR, marker="o", markersize=3,
            label=f"ours: mean of {n_seeds} seed{'s' if n_seeds != 1 else ''} (shaded: min-max)")


def _draw_published(ax, curve: pd.DataFrame, xmax: Optional[float] = None):
    """The published mean (dashed, with markers on its points) and +- 1 sd band, up to
    ``xmax``; when fewer than two published points lie in that range, the panel says where
    the next one is instead of interpolating."""
    c = curve if xmax is None else curve[curve["env_steps"] <= xmax]
    if xmax is not None and len(c) < 2:
        after = curve[curve["env_steps"] > xmax]
        if not after.empty:
            ax.text(0.98, 0.03, f"next published point: {_fmt_frames(float(after['env_steps'].iloc[0]))} "
                    "env frames", ha="right", va="bottom", fontsize=7, color=PUB_COLOR, transform=ax.transAxes)
    if c.empty:
        return
    if len(c) == 1:
        ax.errorbar(c["env_steps"], c["mean"], yerr=c["sd"], color=PUB_COLOR, marker="x",
                    markersize=4, capsize=3, linestyle="none",
                    label=f"TD-MPC2 published: mean of {int(c['n_seeds'].max())} seeds (±1 sd)")
        return
    x = c["env_steps"].to_numpy(float)
    m, sd = c["mean"].to_numpy(float), c["sd"].to_numpy(float)
    ax.fill_between(x, m - sd, m + sd, color=PUB_COLOR, alpha=0.15, linewidth=0)
    n = int(c["n_seeds"].max())
    ax.plot(x, m, color=PUB_COLOR, linestyle="--", marker="x", markersize=3,
            label=f"TD-MPC2 published: mean of {n} seeds (shaded: ±1 sd)")


def plot_eval(task: str, scores: pd.DataFrame, path: str | os.PathLike,
              published_task: Optional[str] = None, subtitle: str = "") -> None:
    """Evaluation score vs env frames of one task, beside the published curve if any (the
    return; the success rate in percent for a task with a success flag).

    Args:
      task: our task name (title).
      scores: :func:`tdmpc2core.report.analysis.seed_scores` rows of this task.
      path: output file (``.png`` or ``.svg``).
      published_task: the published curve's name (dm_control name, ``mw-*``, ``myo-hand-*``), or None.
      subtitle: a second title line (e.g. the env id).

    When our run is shorter than the published curve, a second panel shows the
    published curve's whole range with ours on it.
    """
    from . import analysis
    from . import published as pub

    plt = _plt()
    from matplotlib.ticker import FuncFormatter

    summary = analysis.over_seeds(scores).sort_values("env_frames")
    n_seeds = int(scores["seed"].nunique()) if not scores.empty else 0
    kind = analysis.task_score_kind(scores, task, published_task)
    curve = pub.score_curve(published_task, "tdmpc2") if published_task else None
    if curve is not None and pub.score_kind(published_task) != kind:
        curve = None  # another unit: not drawn (the table says so)
    ours_end = float(summary["env_frames"].max()) if not summary.empty else 0.0
    two = curve is not None and not summary.empty and ours_end < 0.9 * float(curve["env_steps"].max())
    fig, axes = plt.subplots(1, 2 if two else 1, figsize=(10.5 if two else 6, 3.8), squeeze=False)
    axes = axes[0]
    ax = axes[0]
    if not summary.empty:
        _draw_ours(ax, summary, n_seeds)
    if curve is not None:
        _draw_published(ax, curve, xmax=ours_end * 1.03 if two else None)
        if two:
            ax.set_xlim(left=-0.03 * ours_end)
    ax.set_title("our run's range" if two else _YLABEL[kind])
    if two:
        ax2 = axes[1]
        _draw_published(ax2, curve)
        _draw_ours(ax2, summary, n_seeds)
        ax2.set_title("the published curve's range")
    for a in axes:
        a.set_xlabel("env frames")
        a.set_ylabel(_YLABEL[kind])
        a.xaxis.set_major_formatter(FuncFormatter(_fmt_frames))
        a.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False,
                   bbox_to_anchor=(0.5, -0.04))
    title = task + (f"  (published: {published_task})" if published_task else "  (no published curve)")
    fig.suptitle(title + (f"\n{subtitle}" if subtitle else ""), fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save_atomic(fig, path)
    plt.close(fig)


def plot_train(task: str, metrics: pd.DataFrame, path: str | os.PathLike) -> None:
    """Training return and world-model loss vs env frames, one line per seed (mean bold).

    ``train_return`` is the mean return of the training episodes that ended in a chunk
    (NaN chunks skipped); ``total_loss`` is the last update's of the chunk (log scale),
    drawn only where an update had run (``updates > 0``): the seed phase runs none, and its
    rows hold the metrics' initial zeros, not a loss.
    """
    plt = _plt()
    from matplotlib.ticker import FuncFormatter

    fig, axes = plt.subplots(1, 2, figsize=(10.5, 3.6))
    panels = [("train_return", "training episode return", False),
              ("total_loss", "total loss (last update of the chunk)", True)]
    for ax, (col, label, logy) in zip(axes, panels):
        m = pd.DataFrame()
        if not metrics.empty and col in metrics.columns:
            m = metrics[["seed", "env_frames", col]].dropna()
            if col != "train_return" and "updates" in metrics.columns:
                m = m[metrics.loc[m.index, "updates"] > 0]  # only what an update computed
        if m.empty:
            text = (f"no {col} logged" if metrics.empty or col not in metrics.columns
                    else f"no {col} yet: no update ran")
            ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
        else:
            for seed, g in m.groupby("seed"):
                g = g.sort_values("env_frames")
                ax.plot(g["env_frames"], g[col], linewidth=0.8, alpha=0.5, label=f"seed {seed}")
            if m["seed"].nunique() > 1:
                mean = m.groupby("env_frames")[col].mean()
                ax.plot(mean.index, mean.values, color="black", linewidth=1.6, label="mean over seeds")
            if logy and (m[col] > 0).all():
                ax.set_yscale("log")
            ax.legend(fontsize=7, frameon=False)
        ax.set_xlabel("env frames")
        ax.set_ylabel(label)
        ax.xaxis.set_major_formatter(FuncFormatter(_fmt_frames))
        ax.grid(alpha=0.3)
    fig.suptitle(f"{task}: training", fontsize=10)
    fig.tight_layout()
    save_atomic(fig, path)
    plt.close(fig)


def plot_overview(scores: pd.DataFrame, published: Mapping[str, Optional[str]],
                  path: str | os.PathLike) -> None:
    """A grid of every task's evaluation curve over our run's range of env frames, with the
    published TD-MPC2 curve over the same range (the whole curve where we have no run); a
    success task's panel plots its success rate (%) and says so on its y axis."""
    from . import analysis
    from . import published as pub

    plt = _plt()
    from matplotlib.ticker import FuncFormatter

    tasks = list(published)
    kinds = {t: analysis.task_score_kind(scores, t, published[t]) for t in tasks}
    mixed = len(set(kinds.values())) > 1  # then every panel names its unit
    n = max(len(tasks), 1)
    ncols = min(4, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.4 * ncols, 2.6 * nrows), squeeze=False)
    for i, task in enumerate(tasks):
        ax = axes[i // ncols][i % ncols]
        s = scores[scores["task"] == task]
        summary = analysis.over_seeds(s).sort_values("env_frames")
        xmax = float(summary["env_frames"].max()) * 1.03 if not summary.empty else None
        kind = kinds[task]
        if published[task] and pub.score_kind(published[task]) == kind:
            _draw_published(ax, pub.score_curve(published[task], "tdmpc2"), xmax=xmax)
        if not summary.empty:
            _draw_ours(ax, summary, int(s["seed"].nunique()))
        if i // ncols == nrows - 1 or i + ncols >= len(tasks):
            ax.set_xlabel("env frames", fontsize=8)
        if i % ncols == 0 or mixed:
            ax.set_ylabel(_YLABEL[kind], fontsize=8)
        ax.set_title(task, fontsize=9)
        ax.xaxis.set_major_formatter(FuncFormatter(_fmt_frames))
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for j in range(len(tasks), nrows * ncols):
        axes[j // ncols][j % ncols].axis("off")
    handles, labels = [], []
    for row in axes:
        for ax in row:
            for h, l in zip(*ax.get_legend_handles_labels()):
                key = l.split(":")[0]
                if key not in [x.split(":")[0] for x in labels]:
                    handles.append(h)
                    labels.append(l)
    bottom = min(0.07, 0.45 / (2.6 * nrows)) if handles else 0  # about 0.45 inch for the legend
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    save_atomic(fig, path)
    plt.close(fig)


def dataset_returns_figure(summary: pd.DataFrame, path: str | os.PathLike) -> None:
    """Return distribution of the episodes of each task dataset (one box per task), written to
    ``path``. ``summary``: the rows of ``tdmpc2 dataset-summary`` (kind, dataset, task, return);
    pools hold the same episodes as their tasks' datasets, so only ``kind == "task"`` rows are
    drawn. Tasks with different return ranges get their own panel."""
    plt = _plt()
    tasks = summary[summary["kind"] == "task"]
    names = list(dict.fromkeys(tasks["dataset"]))
    if not names:  # a summary of pools only
        tasks, names = summary, list(dict.fromkeys(summary["task"]))
    key = "dataset" if "dataset" in tasks and set(names) <= set(tasks["dataset"]) else "task"
    n = len(names)
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        sub = tasks[tasks[key] == name]
        ret = sub["return"].to_numpy()
        ax.boxplot([ret], widths=0.5, showmeans=True)
        ax.set_xticks([1], [f"{len(ret)} episodes"])
        ax.set_title(name, fontsize=9)
        ax.set_ylabel("episode return")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle("Episode returns in the training datasets (the agents' own replay)", fontsize=10)
    fig.tight_layout()
    save_atomic(fig, path)
    plt.close(fig)


__all__ = ["plot_eval", "plot_train", "plot_overview", "dataset_returns_figure", "save_atomic"]
