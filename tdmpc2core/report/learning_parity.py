"""Learning beside the official code: the statistics of ``benchmarks/learning_parity.py``.

The benchmark trains the official code (nicklashansen/tdmpc2 at 5f6fade) and ``tdmpc2core``
on the same dm_control tasks with the same settings and writes every evaluation of every
seed to one Parquet file (:data:`tdmpc2core.io.learning_parity.COLUMNS`). This module reads that file and compares the two
implementations, per task:

* at every evaluation point, each implementation's mean return over seeds with a percentile
  bootstrap 95% confidence interval (seeds resampled with replacement; :func:`bootstrap_ci`);
* the equivalence test stated in advance (:data:`MARGIN`, :data:`ALPHA`, :data:`LAST_POINTS`):
  each seed's score is its mean return over the last ``LAST_POINTS`` evaluation points; two
  one-sided Welch t-tests (TOST, :func:`welch_tost`) of the difference of the implementations'
  mean scores against ``-MARGIN`` and ``+MARGIN``. "equivalent" when both reject at ``ALPHA``
  (the 90% confidence interval of the difference lies inside the margin); otherwise "different"
  when the ordinary two-sided Welch test of a zero difference rejects at ``ALPHA``, else
  "inconclusive" (too few seeds or too much spread to tell either way; :func:`verdict`).

Pure numpy / scipy / pandas (matplotlib for the figure only); no JAX, no PyTorch. Units:
returns are DMControl episode returns (0..1000), ``agent_step`` counts agent steps (decisions),
``env_frames`` simulator steps (agent steps x action repeat).
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np
import pandas as pd

# the results file's format (columns, reading, checking) lives with the other file formats
from ..io.learning_parity import COLUMNS, IMPLEMENTATIONS, OPTIONAL_COLUMNS, check_frame, read_results  # noqa: F401

#: Equivalence margin (return units), stated in advance: 10% of DMControl's 0..1000 range.
MARGIN = 100.0
#: Level of each one-sided test (TOST) and of the two-sided difference test.
ALPHA = 0.05
#: A seed's score for the equivalence test: its mean return over this many last evaluation points.
LAST_POINTS = 2
#: Bootstrap resamples and the confidence level of the per-point intervals.
BOOT_REPS = 10_000
CI_LEVEL = 0.95


# --------------------------------------------------------------------------- statistics
def bootstrap_ci(x, reps: int = BOOT_REPS, level: float = CI_LEVEL, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``x`` (1-D; resampled with replacement,
    ``reps`` times, NumPy generator seeded with ``seed``). One value: (x, x). Empty: NaNs."""
    x = np.asarray(x, np.float64).ravel()
    if x.size == 0:
        return float("nan"), float("nan")
    if x.size == 1:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(int(reps), x.size))].mean(axis=1)
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [a, 1.0 - a])
    return float(lo), float(hi)


def welch(a, b) -> tuple[float, float, float]:
    """(difference of means mean(a) - mean(b), its standard error, Welch-Satterthwaite degrees
    of freedom). Needs two values per side; a zero standard error gives df = inf."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if a.size < 2 or b.size < 2:
        raise ValueError(f"Welch's test needs at least 2 values per side, got {a.size} and {b.size}")
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = float(np.sqrt(va + vb))
    if se == 0.0:
        return float(a.mean() - b.mean()), 0.0, float("inf")
    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    return float(a.mean() - b.mean()), se, float(df)


def welch_tost(a, b, margin: float = MARGIN, alpha: float = ALPHA) -> dict:
    """Two one-sided Welch t-tests of equivalence of the means of ``a`` and ``b`` within
    ``+-margin``: H0 diff <= -margin and H0 diff >= +margin, each at level ``alpha``.

    Returns a dict: ``diff`` (mean(a) - mean(b)), ``se``, ``df``, ``p_lower`` / ``p_upper`` (the
    one-sided p-values), ``p_tost`` (their max), ``ci90`` (the (1 - 2 alpha) Welch interval of
    the difference), ``p_diff`` (the two-sided Welch test of diff = 0), ``equivalent`` (p_tost <
    alpha), ``margin``, ``alpha``, ``n`` ((len a, len b)).
    """
    from scipy import stats

    if not margin > 0:
        raise ValueError(f"margin={margin!r} must be > 0")
    d, se, df = welch(a, b)
    if se == 0.0:
        p_lo = 0.0 if d > -margin else 1.0
        p_hi = 0.0 if d < margin else 1.0
        p_diff = 1.0 if d == 0 else 0.0
        ci = (d, d)
    else:
        p_lo = float(stats.t.sf((d + margin) / se, df))
        p_hi = float(stats.t.cdf((d - margin) / se, df))
        p_diff = float(2 * stats.t.sf(abs(d) / se, df))
        q = float(stats.t.ppf(1 - alpha, df))
        ci = (d - q * se, d + q * se)
    p = max(p_lo, p_hi)
    return dict(diff=d, se=se, df=df, p_lower=p_lo, p_upper=p_hi, p_tost=p, ci90=(float(ci[0]), float(ci[1])),
                p_diff=p_diff, equivalent=bool(p < alpha), margin=float(margin), alpha=float(alpha),
                n=(int(np.size(a)), int(np.size(b))))


def verdict(test: dict) -> str:
    """"equivalent" (TOST rejects both one-sided nulls at ``alpha``: the difference is shown to
    lie within +-margin), else "different" (the two-sided Welch test of a zero difference
    rejects at ``alpha``), else "inconclusive"."""
    if test["equivalent"]:
        return "equivalent"
    if test["p_diff"] < test["alpha"]:
        return "different"
    return "inconclusive"


# --------------------------------------------------------------------------- tables
def curve_table(df: pd.DataFrame, reps: int = BOOT_REPS, seed: int = 0) -> pd.DataFrame:
    """One row per (task, agent_step, implementation): ``env_frames``, ``n_seeds``, ``mean``,
    ``ci_low`` / ``ci_high`` (bootstrap over seeds, :func:`bootstrap_ci`), ``min``, ``max``."""
    rows = []
    for (task, step, impl), g in df.groupby(["task", "agent_step", "implementation"], sort=True):
        x = g["episode_return"].to_numpy()
        lo, hi = bootstrap_ci(x, reps=reps, seed=seed)
        rows.append(dict(task=task, agent_step=int(step), implementation=impl, env_frames=int(g["env_frames"].iloc[0]),
                         n_seeds=int(x.size), mean=float(x.mean()), ci_low=lo, ci_high=hi, min=float(x.min()),
                         max=float(x.max())))
    return pd.DataFrame(rows)


def seed_scores(df: pd.DataFrame, last_points: int = LAST_POINTS) -> pd.DataFrame:
    """Per (task, implementation, seed): ``score``, the mean return over the task's last
    ``last_points`` evaluation points (agent steps both implementations share), and ``steps``
    (those points). Raises ValueError when a task's implementations share fewer points, or a
    seed lacks one of them (named)."""
    rows = []
    for task, g in df.groupby("task", sort=True):
        shared = sorted(set.intersection(*[set(h["agent_step"]) for _, h in g.groupby("implementation")]))
        if len(shared) < last_points:
            raise ValueError(f"task {task!r}: the implementations share {len(shared)} evaluation point(s), "
                             f"need last_points={last_points}")
        steps = shared[-last_points:]
        for (impl, seed), h in g.groupby(["implementation", "seed"], sort=True):
            sel = h[h["agent_step"].isin(steps)]
            if len(sel) != len(steps):
                raise ValueError(f"task {task!r}, {impl} seed {seed}: no evaluation at agent step(s) "
                                 f"{sorted(set(steps) - set(sel['agent_step']))}")
            rows.append(dict(task=task, implementation=impl, seed=int(seed), score=float(sel["episode_return"].mean()),
                             steps=tuple(int(s) for s in steps)))
    return pd.DataFrame(rows)


def comparison(df: pd.DataFrame, margin: float = MARGIN, alpha: float = ALPHA, last_points: int = LAST_POINTS,
               reps: int = BOOT_REPS, seed: int = 0) -> pd.DataFrame:
    """One row per task: the per-seed scores' mean and bootstrap CI of each implementation
    (``official_mean``, ``official_ci``, ``ours_mean``, ``ours_ci``, ``n_official``, ``n_ours``), the
    TOST of ours - official (:func:`welch_tost`: ``diff``, ``ci90``, ``p_tost``, ``p_diff``),
    ``steps`` (the points averaged), ``margin`` and ``verdict`` (:func:`verdict`). A task that only
    one implementation ran has NaNs and verdict "one implementation only"."""
    scores = seed_scores(df, last_points)
    rows = []
    for task, g in scores.groupby("task", sort=True):
        by = {impl: g[g["implementation"] == impl]["score"].to_numpy() for impl in IMPLEMENTATIONS}
        row = dict(task=task, steps=g["steps"].iloc[0], margin=float(margin))
        for impl, x in by.items():
            row[f"n_{impl}"] = int(x.size)
            row[f"{impl}_mean"] = float(x.mean()) if x.size else float("nan")
            row[f"{impl}_ci"] = bootstrap_ci(x, reps=reps, seed=seed)
        if min(x.size for x in by.values()) >= 2:
            t = welch_tost(by["ours"], by["official"], margin, alpha)
            row.update(diff=t["diff"], ci90=t["ci90"], p_tost=t["p_tost"], p_diff=t["p_diff"], verdict=verdict(t))
        else:
            row.update(diff=float("nan"), ci90=(float("nan"), float("nan")), p_tost=float("nan"),
                       p_diff=float("nan"), verdict="one implementation only")
        rows.append(row)
    return pd.DataFrame(rows)


def comparison_markdown(comp: pd.DataFrame) -> str:
    """The per-task comparison as a Markdown table (returns to 1 decimal)."""
    head = ("| task | points (agent steps) | official mean [95% CI] (n) | ours mean [95% CI] (n) | "
            "ours - official [90% CI] | p TOST | p diff | verdict |\n|---|---|---|---|---|---|---|---|\n")

    def ci(v):
        return f"[{v[0]:.1f}, {v[1]:.1f}]"

    lines = []
    for r in comp.itertuples(index=False):
        lines.append(f"| {r.task} | {', '.join(str(s) for s in r.steps)} | {r.official_mean:.1f} {ci(r.official_ci)} "
                     f"({r.n_official}) | {r.ours_mean:.1f} {ci(r.ours_ci)} ({r.n_ours}) | {r.diff:+.1f} "
                     f"{ci(r.ci90)} | {r.p_tost:.3g} | {r.p_diff:.3g} | {r.verdict} |")
    return head + "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- figure
def plot_task(curves: pd.DataFrame, task: str, path: str | os.PathLike, df: Optional[pd.DataFrame] = None,
              margin: Optional[float] = None) -> None:
    """One figure of ``task``: each implementation's mean return vs env frames with its
    bootstrap 95% band (``curves`` from :func:`curve_table`), each seed as a thin line when
    ``df`` (the results) is given. Written atomically (PNG or SVG, by ``path``'s suffix).

    Raises: ValueError when ``curves`` has no row of ``task``."""
    from .figures import _plt, save_atomic

    plt = _plt()
    c = curves[curves["task"] == task]
    if c.empty:
        raise ValueError(f"no curve rows for task {task!r}")
    fig, ax = plt.subplots(figsize=(5.0, 3.2))
    colors = {"official": "#1f77b4", "ours": "#d62728"}
    for impl in IMPLEMENTATIONS:
        g = c[c["implementation"] == impl].sort_values("env_frames")
        if g.empty:
            continue
        n = int(g["n_seeds"].max())
        ax.plot(g["env_frames"], g["mean"], color=colors[impl], lw=2, label=f"{impl} (n={n})")
        ax.fill_between(g["env_frames"], g["ci_low"], g["ci_high"], color=colors[impl], alpha=0.2, lw=0)
        if df is not None:
            for _, s in df[(df["task"] == task) & (df["implementation"] == impl)].groupby("seed"):
                s = s.sort_values("env_frames")
                ax.plot(s["env_frames"], s["episode_return"], color=colors[impl], lw=0.6, alpha=0.35)
    ax.set_xlabel("env frames")
    ax.set_ylabel("evaluation return")
    ax.set_title(f"{task}: official (5f6fade) vs tdmpc2core", fontsize=9)
    ax.set_ylim(-20, 1020)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    save_atomic(fig, path)
    plt.close(fig)


def tasks_of(df: pd.DataFrame) -> list[str]:
    """The tasks of the results, sorted."""
    return sorted(df["task"].unique())


def summary_lines(comp: pd.DataFrame) -> Sequence[str]:
    """One line per task: ``task: verdict (ours - official = d [lo, hi], margin +-m)``."""
    return [f"{r.task}: {r.verdict} (ours - official = {r.diff:+.1f} [{r.ci90[0]:.1f}, {r.ci90[1]:.1f}], "
            f"margin +-{r.margin:g})" for r in comp.itertuples(index=False)]


def report_context(path: str | os.PathLike, reps: int = BOOT_REPS) -> dict:
    """What results/report.html's "Learning beside the official code" section shows, from the
    benchmark's results file ``path`` (config key ``learning_parity``): ``path``, ``comparison``
    (:func:`comparison`; None when no task has both implementations' last points),
    ``curves`` (:func:`curve_table`), ``figures`` ([(task, "png", bytes)], :func:`plot_task`),
    ``meta`` (the benchmark's JSON written beside the file, {} without one: settings, schedule,
    wall time, load), ``margin``, ``alpha``, ``last_points``.

    Raises: FileNotFoundError, ValueError (:func:`read_results`)."""
    import json
    import tempfile

    df = read_results(path)
    curves = curve_table(df, reps=reps)
    try:
        comp = comparison(df, reps=reps)
    except ValueError:
        comp = None
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for task in tasks_of(df):
            p = os.path.join(tmp, f"{task}.png")
            plot_task(curves, task, p, df=df)
            with open(p, "rb") as fh:
                figures.append((task, "png", fh.read()))
    meta_path = os.path.splitext(os.fspath(path))[0] + ".json"
    meta = {}
    if os.path.exists(meta_path):
        with open(meta_path) as fh:
            meta = json.load(fh)
    return dict(path=os.fspath(path), comparison=comp, curves=curves, figures=figures, meta=meta, margin=MARGIN,
                alpha=ALPHA, last_points=LAST_POINTS)
