"""Tables and aggregate scores of single-task runs beside the published curves.

Pure pandas / numpy / rliable: no Snakemake, no JAX, no plotting. The stages
``tdmpc2 tables``, ``tdmpc2 figures`` and ``tdmpc2 report`` call these functions; a test
calls them on hand-made evaluation files.

Conventions (docs/pipeline.md, "What the tables mean"):

* A seed's score at an evaluation is the mean return over that evaluation's episodes; for a
  task whose suite has a success flag (Meta-World, MyoSuite: ``success`` in eval.parquet) it
  is the success rate in percent, 100 x the mean of ``success`` (the official rule: the flag at
  the episode's last step), the unit of the published success curves; ``success_any`` (the
  flag at any step, Meta-World's maintainers' rule) is reported beside it, never compared.
  ``score`` is that value and ``score_kind`` says which (``return`` / ``success``).
* Over seeds we give the mean, the population standard deviation (``ddof=0``, as the
  published file's ``sd_return``) and the min / max.
* Table steps are agent steps (the paper's tables use agent steps; the published curves
  have one point every 50,000 agent steps). A run is compared with the published curve
  only at an agent step where it has an evaluation at exactly that step.
* "Inside the band" means the mean over our seeds lies in the published TD-MPC2 mean
  plus or minus one published sd, bounds included.
* The normalized score of a DMControl return is return / 10 (DMC returns lie in
  [0, 1000], so scores lie in [0, 100]); of a success task, its success rate in percent.
  Aggregates (mean and IQM over runs x tasks) use it per domain (DMControl, Meta-World,
  MyoSuite apart, as the paper shows them), with stratified-bootstrap 95% confidence
  intervals from rliable (runs resampled within each task).
"""
from __future__ import annotations

import json
import math
import os
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from . import published as pub

#: Agent steps at which the paper's single-task tables are read (as far as a run goes).
TABLE_STEPS: tuple[int, ...] = (50_000, 100_000, 500_000, 1_000_000, 2_000_000)
#: DMControl return -> normalized score (0..100).
SCORE_DIVISOR = 10.0
#: Columns of eval.parquet (docs/artifacts.md) and their dtypes' kinds.
EVAL_COLUMNS = {
    "task": "O", "seed": "i", "eval_index": "i", "agent_steps": "i", "env_frames": "i",
    "episode": "i", "return": "f", "length": "i",
}
#: Optional eval.parquet columns (the success flags, bool with nulls on disk): read as float64
#: (1.0 / 0.0, NaN where null or where a file predates them)
SUCCESS_COLUMNS = ("success", "success_any")
BASELINES = ("tdmpc", "sac", "dreamerv3")


# --------------------------------------------------------------------------- reading
def read_evals(paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """Concatenate ``eval.parquet`` files, checking their columns.

    Raises:
      FileNotFoundError: a path that does not exist.
      ValueError: a file without the columns of docs/artifacts.md (the file and the
        missing columns are named).
    """
    frames = []
    for path in paths:
        path = os.fspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"evaluation file {path} does not exist")
        df = pd.read_parquet(path)
        missing = [c for c in EVAL_COLUMNS if c not in df.columns]
        if missing:
            raise ValueError(f"{path}: not an eval.parquet of docs/artifacts.md; missing columns "
                             f"{missing} (has {list(df.columns)})")
        df = df[list(EVAL_COLUMNS) + [c for c in SUCCESS_COLUMNS if c in df.columns]].copy()
        for c in SUCCESS_COLUMNS:
            df[c] = (pd.to_numeric(df[c].astype(object).where(df[c].notna(), np.nan), errors="coerce")
                     .astype("float64") if c in df.columns else np.nan)
        frames.append(df)
    if not frames:
        return pd.DataFrame({**{c: pd.Series(dtype="object" if k == "O" else ("int64" if k == "i" else "float64"))
                                for c, k in EVAL_COLUMNS.items()},
                             **{c: pd.Series(dtype="float64") for c in SUCCESS_COLUMNS}})
    out = pd.concat(frames, ignore_index=True)
    for c, kind in EVAL_COLUMNS.items():
        if kind == "i":
            out[c] = out[c].astype("int64")
        elif kind == "f":
            out[c] = out[c].astype("float64")
        else:
            out[c] = out[c].astype(str)
    return out


#: the columns of :func:`extension_table`
EXTENSION_COLUMNS = ["run", "task", "step", "metric", "mean", "sd", "min", "max", "n_seeds"]


def extension_table(runs: Iterable[tuple[str, Sequence[str | os.PathLike]]]) -> pd.DataFrame:
    """The extensions' eval metrics at each run's last evaluation (issue 26): one row per run,
    task and metric (columns :data:`EXTENSION_COLUMNS`): ``step`` (agent steps, or updates of a
    multi-task run), ``mean`` / ``sd`` (population) / ``min`` / ``max`` over seeds (NaN values
    skipped), ``n_seeds`` (seeds with a value).

    ``runs``: (run label, eval.parquet paths) pairs, e.g. a single-task task's per-seed files
    or a multi-task run's one file. Missing files are skipped; a run whose files have no
    extension columns (``ext/<extension>/<metric>``, :mod:`tdmpc2core.stages.outputs`) adds no
    row. The metric is named ``<extension>/<metric>``."""
    rows = []
    for label, paths in runs:
        frames = [pd.read_parquet(os.fspath(p)) for p in paths if os.path.exists(os.fspath(p))]
        df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        ext = [c for c in df.columns if c.startswith("ext/")]
        if not ext or df.empty:
            continue
        step = "agent_steps" if "agent_steps" in df.columns else "updates"
        last = df[df[step] == df[step].max()]
        per_seed = last.groupby(["task", "seed"], sort=False)[ext + [step]].first().reset_index()
        for task, g in per_seed.groupby("task", sort=False):
            for c in ext:
                v = g[c].to_numpy(np.float64)
                ok = v[np.isfinite(v)]
                rows.append({"run": label, "task": task, "step": int(g[step].iloc[0]), "metric": c[len("ext/"):],
                             "mean": float(ok.mean()) if ok.size else np.nan,
                             "sd": float(ok.std()) if ok.size else np.nan,
                             "min": float(ok.min()) if ok.size else np.nan,
                             "max": float(ok.max()) if ok.size else np.nan, "n_seeds": int(ok.size)})
    return pd.DataFrame(rows, columns=EXTENSION_COLUMNS)


def read_metrics(paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """Concatenate ``metrics.parquet`` files (all columns kept)."""
    frames = [pd.read_parquet(os.fspath(p)) for p in paths]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


SEED_SCORE_COLUMNS = ["task", "seed", "eval_index", "agent_steps", "env_frames", "return", "episodes", "length",
                      "success", "success_any", "score", "score_kind"]


def seed_scores(evals: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, seed, evaluation): the mean return, the mean episode length (agent
    steps), the success rates (fractions in [0, 1]: ``success``, the official last-step rule,
    and ``success_any``; NaN for a task without a success flag) over its episodes, and the
    row's ``score``: the success rate in percent (0-100) where the task has a success flag
    (``score_kind`` ``"success"``), else the return (``"return"``).

    Columns: :data:`SEED_SCORE_COLUMNS`.
    """
    keys = ["task", "seed", "eval_index", "agent_steps", "env_frames"]
    if evals.empty:
        return pd.DataFrame(columns=SEED_SCORE_COLUMNS)
    evals = evals.copy()
    for c in SUCCESS_COLUMNS:
        if c not in evals.columns:
            evals[c] = np.nan
    g = evals.groupby(keys, sort=True)
    out = g["return"].agg(["mean", "size"]).reset_index().rename(columns={"mean": "return", "size": "episodes"})
    out["length"] = g["length"].mean().to_numpy(np.float64)
    for c in SUCCESS_COLUMNS:  # NaN for a task without the flag (mean of all-NaN)
        out[c] = g[c].mean().to_numpy(np.float64)
    has = np.isfinite(out["success"].to_numpy(np.float64))
    out["score"] = np.where(has, 100.0 * out["success"].to_numpy(np.float64), out["return"].to_numpy(np.float64))
    out["score_kind"] = np.where(has, "success", "return")
    return out[SEED_SCORE_COLUMNS]


def task_score_kind(scores: pd.DataFrame, task: str, published_task: Optional[str] = None) -> str:
    """``"success"`` or ``"return"``: how ``task`` is scored: by success when its evaluations
    recorded a success flag, else (no evaluation yet) as its published curve is, else return."""
    kinds = scores.loc[scores["task"] == task, "score_kind"] if "score_kind" in scores else pd.Series([], dtype=object)
    if len(kinds):
        return "success" if (kinds == "success").any() else "return"
    if published_task:
        return pub.score_kind(published_task)
    return "return"


def _score_col(scores: pd.DataFrame) -> str:
    return "score" if "score" in scores.columns else "return"  # frames made before the success columns


def is_episodic(settings: Mapping) -> bool:
    """Whether a task's settings train the episodic agent (``agent: {episodic: true}``)."""
    return bool((settings.get("agent") or {}).get("episodic", False))


def over_seeds(scores: pd.DataFrame, column: Optional[str] = None) -> pd.DataFrame:
    """Mean, population sd (ddof=0), min and max over seeds at each evaluation step of the
    seeds' ``column`` (default ``score``: the return, or the success rate in percent of a
    success task; ``return`` for a frame without it).

    Columns: task, agent_steps, env_frames, n_seeds, mean, sd, min, max.
    """
    cols = ["task", "agent_steps", "env_frames", "n_seeds", "mean", "sd", "min", "max"]
    if scores.empty:
        return pd.DataFrame(columns=cols)
    g = scores.groupby(["task", "agent_steps", "env_frames"], sort=True)[column or _score_col(scores)]
    out = g.agg(n_seeds="size", mean="mean", sd=lambda x: float(np.std(x, ddof=0)),
                min="min", max="max").reset_index()
    return out[cols]


# --------------------------------------------------------------------------- tables
def _fmt_int(n) -> str:
    return f"{int(n):,}"


def _pub_at(curves: pd.DataFrame, step: int) -> tuple[float, float]:
    """(mean, sd) of a :func:`~tdmpc2core.report.published.score_curve` at ``step`` agent steps."""
    row = curves[curves["agent_steps"] == step]
    if row.empty:
        return (math.nan, math.nan)
    return float(row["mean"].iloc[0]), float(row["sd"].iloc[0])


def table_steps_for(published_task: str, steps: Sequence[int] = TABLE_STEPS) -> list[int]:
    """The table steps of a task: ``steps`` where the published TD-MPC2 curve has a point,
    plus the curve's last point (7,000,000 agent steps for the humanoid and dog tasks,
    1,000,000 for Meta-World, 2,000,000 for MyoSuite)."""
    curve = pub.score_curve(published_task, "tdmpc2")
    have = set(int(s) for s in curve["agent_steps"])
    out = sorted({int(s) for s in steps if int(s) in have} | {int(curve["agent_steps"].max())})
    return out


SINGLE_TASK_COLUMNS = [
    "task", "published_task", "agent_steps", "env_frames", "n_seeds", "mean", "sd", "min", "max",
    "tdmpc2_mean", "tdmpc2_sd", "band_low", "band_high", "band",
    "tdmpc_mean", "tdmpc_sd", "sac_mean", "sac_sd", "dreamerv3_mean", "dreamerv3_sd", "note",
    "score", "success_any_mean",
]


def single_task_table(scores: pd.DataFrame, tasks: Mapping[str, Mapping],
                      steps: Sequence[int] = TABLE_STEPS) -> pd.DataFrame:
    """The paper's single-task table: ours beside the published curves at the table steps.

    Args:
      scores: :func:`seed_scores` of every task's runs.
      tasks: task name -> settings with at least ``published`` (dm_control name or None)
        and optionally ``action_repeat``.
      steps: agent steps to read (default :data:`TABLE_STEPS`; the published curve's last
        point is added for each task).

    Returns:
      One row per (task, table step the run reaches), columns
      :data:`SINGLE_TASK_COLUMNS`. ``score`` says what ``mean`` ... ``dreamerv3_sd`` are:
      ``return`` (the episode return) or ``success`` (the success rate in percent, 0-100, the
      official last-step rule, beside the published success curves at the same agent steps);
      ``success_any_mean``: our mean over seeds of the any-step success rate (percent; NaN
      for a return task). ``band`` is ``inside`` / ``outside`` (our mean against
      the published TD-MPC2 mean +- 1 sd) or empty where nothing is compared, and ``note``
      says why: ``no published curve``, ``no step in common with the published curve``
      (the run ends before the first table step), ``no evaluation at exactly N agent
      steps``, or ``no evaluations found``.
    """
    summary = over_seeds(scores)
    if "success_any" in scores.columns and not scores.empty:
        anyv = scores.assign(success_any=100.0 * scores["success_any"].astype(float))
        any_summary = over_seeds(anyv, "success_any")
    else:
        any_summary = pd.DataFrame(columns=["task", "agent_steps", "mean"])
    rows = []

    def row(task, published_task, **kw):
        r = {c: math.nan for c in SINGLE_TASK_COLUMNS}
        r.update(task=task, published_task=published_task or "", band="", note="",
                 score=task_score_kind(scores, task, published_task))
        a = any_summary[(any_summary["task"] == task) & (any_summary["agent_steps"] == kw.get("agent_steps"))]
        if len(a):
            r["success_any_mean"] = float(a["mean"].iloc[0])
        r.update(kw)
        rows.append(r)

    for task, settings in tasks.items():
        published_task = settings.get("published")
        ours = summary[summary["task"] == task]
        if ours.empty:
            row(task, published_task, note="no evaluations found")
            continue
        if not published_task:
            row(task, published_task, note="no published curve")
            continue
        kind, pub_kind = task_score_kind(scores, task), pub.score_kind(published_task)
        if kind != pub_kind:
            row(task, published_task, note=(f"scored by {kind}, but the published curve of {published_task} reports "
                                            f"{pub_kind}: not compared"))
            continue
        curves = {m: pub.score_curve(published_task, m) for m in pub.METHODS}
        candidates = table_steps_for(published_task, steps)
        run_last = int(ours["agent_steps"].max())
        reached = [s for s in candidates if s <= run_last]
        if not reached:
            row(task, published_task,
                note=(f"no step in common with the published curve: the run's evaluations end at "
                      f"{_fmt_int(run_last)} agent steps, the first table step is "
                      f"{_fmt_int(candidates[0])}"))
            continue
        ar = settings.get("action_repeat")
        ar_note = ""
        pub_ar = pub.published_action_repeat(published_task)
        if ar is not None and int(ar) != pub_ar:
            ar_note = (f"action repeat {ar} differs from the published {pub_ar}; "
                       f"compared at equal agent steps")
        for step in reached:
            at = ours[ours["agent_steps"] == step]
            if at.empty:
                nearest = int(ours["agent_steps"].iloc[(ours["agent_steps"] - step).abs().argmin()])
                row(task, published_task, agent_steps=step,
                    note=(f"no evaluation at exactly {_fmt_int(step)} agent steps (nearest: "
                          f"{_fmt_int(nearest)}); not compared"))
                continue
            a = at.iloc[0]
            m, sd = _pub_at(curves["tdmpc2"], step)
            lo, hi = m - sd, m + sd
            band = "inside" if lo <= float(a["mean"]) <= hi else "outside"
            extra = {}
            for b in BASELINES:
                bm, bsd = _pub_at(curves[b], step)
                extra[f"{b}_mean"], extra[f"{b}_sd"] = bm, bsd
            row(task, published_task, agent_steps=step, env_frames=int(a["env_frames"]),
                n_seeds=int(a["n_seeds"]), mean=float(a["mean"]), sd=float(a["sd"]),
                min=float(a["min"]), max=float(a["max"]), tdmpc2_mean=m, tdmpc2_sd=sd,
                band_low=lo, band_high=hi, band=band, note=ar_note, **extra)
    out = pd.DataFrame(rows, columns=SINGLE_TASK_COLUMNS)
    out["agent_steps"] = out["agent_steps"].astype("Int64")
    out["env_frames"] = out["env_frames"].astype("Int64")
    out["n_seeds"] = out["n_seeds"].astype("Int64")
    return out


# --------------------------------------------------------------------------- aggregates
def iqm(values) -> float:
    """Interquartile mean: the mean of the middle 50% (scipy's 25% trimmed mean), over all
    entries (runs x tasks), as rliable's ``aggregate_iqm``."""
    from scipy.stats import trim_mean

    return float(trim_mean(np.asarray(values, dtype=float), proportiontocut=0.25, axis=None))


def _agg(x: np.ndarray) -> np.ndarray:
    """(mean over tasks of the per-task mean over runs, IQM over runs x tasks)."""
    return np.array([float(np.mean(np.mean(x, axis=0))), iqm(x)])


def _numpy_stratified_bootstrap(matrix: np.ndarray, reps: int, seed: int, size: float) -> np.ndarray:
    """Percentile CIs of :func:`_agg`, resampling runs with replacement within each task."""
    rng = np.random.default_rng(seed)
    n_runs, n_tasks = matrix.shape
    stats = np.empty((reps, 2))
    cols = np.arange(n_tasks)[None, :]
    for i in range(reps):
        idx = rng.integers(0, n_runs, size=(n_runs, n_tasks))
        stats[i] = _agg(matrix[idx, cols])
    q = (1 - size) / 2
    return np.quantile(stats, [q, 1 - q], axis=0)


def interval_estimates(matrix: np.ndarray, reps: int = 2_000, seed: int = 0,
                       size: float = 0.95) -> tuple[np.ndarray, np.ndarray, str]:
    """Point estimates and CIs of (mean, IQM) of a (runs x tasks) score matrix.

    Uses ``rliable.library.get_interval_estimates`` (stratified bootstrap, percentile
    method); if rliable cannot be imported, an equivalent numpy stratified bootstrap.

    Returns:
      (points of shape (2,), intervals of shape (2, 2) as [[lo_mean, lo_iqm], [hi_mean, hi_iqm]],
      a sentence naming the method used).
    """
    matrix = np.asarray(matrix, dtype=float)
    if matrix.ndim != 2 or matrix.size == 0:
        raise ValueError(f"score matrix must be 2-D (runs x tasks) and non-empty, got shape {matrix.shape}")
    try:
        from rliable import library as rly
    except Exception as exc:  # noqa: BLE001 - any import failure (arch / pandas mismatch) falls back
        ci = _numpy_stratified_bootstrap(matrix, reps, seed, size)
        return _agg(matrix), ci, (f"numpy stratified bootstrap, percentile, {reps} reps "
                                  f"(rliable unavailable: {type(exc).__name__}: {exc})")
    import warnings

    with warnings.catch_warnings():  # arch 7 deprecates the random_state rliable 1.2 passes
        warnings.simplefilter("ignore", FutureWarning)
        points, intervals = rly.get_interval_estimates(
            {"ours": matrix}, _agg, method="percentile", reps=reps, confidence_interval_size=size,
            random_state=np.random.RandomState(seed))
    return np.asarray(points["ours"]), np.asarray(intervals["ours"]), \
        f"rliable stratified bootstrap, percentile, {reps} reps"


#: an aggregate gets a bootstrap confidence interval only from at least this many scores
#: (seeds x tasks) and seeds; below that the resamples only restate the few numbers
MIN_CI_SCORES = 5
MIN_CI_SEEDS = 2

AGGREGATE_COLUMNS = [
    "domain", "score", "step", "agent_steps", "n_tasks", "n_seeds", "mean_score", "mean_score_ci_low",
    "mean_score_ci_high", "iqm_score", "iqm_score_ci_low", "iqm_score_ci_high", "mean_return",
    "published_mean_score", "published_mean_return", "tasks", "method", "note",
]
#: what an aggregate's normalized score is, per score kind
SCORE_TEXT = {"return": "return / 10", "success": "success rate (%)"}


def aggregate_table(scores: pd.DataFrame, tasks: Mapping[str, Mapping],
                    steps: Sequence[int] = TABLE_STEPS, reps: int = 2_000, seed: int = 0) -> pd.DataFrame:
    """Aggregates over the tasks with a published curve, per domain, at each table step and at
    the end.

    The domains (:data:`tdmpc2core.report.published.DOMAINS`: DMControl, Meta-World,
    MyoSuite) are aggregated apart, as the paper shows them: a domain gets rows when a task
    of the configuration has a published curve of that domain (and is scored as that curve
    is: a success task by success, a return task by return). Within a domain: a step of
    ``steps`` gets a row when at least one run reaches it. At that step, the tasks included are those with a published curve having
    a point at that step and with our evaluation at exactly that step; the runs are the
    seeds every included task has there. The ``final`` row takes each task's last
    evaluation, with the published value at the same agent step where the curve has one.

    Columns :data:`AGGREGATE_COLUMNS`; ``domain`` (``DMControl``, ``Meta-World``,
    ``MyoSuite``) and ``score`` (:data:`SCORE_TEXT`: ``return / 10`` or ``success rate (%)``)
    say what the scores are. DMControl scores are normalized returns (return / 10), and
    ``mean_return`` and ``published_mean_return`` are raw returns averaged over the included
    tasks (as the paper reports them); Meta-World and MyoSuite scores are success rates in
    percent (the official last-step rule) and their return columns are NaN.
    ``published_*`` is the published TD-MPC2 mean over the same tasks.
    """
    rows = []
    by_domain: dict = {}
    for t, s in tasks.items():
        if s.get("published"):
            dom = pub.domain_of(s["published"])
            if task_score_kind(scores, t, s["published"]) == pub.DOMAIN_SCORES[dom]:
                by_domain.setdefault(dom, {})[t] = s["published"]
    for dom in pub.DOMAINS:
        if dom in by_domain:
            rows += _aggregate_domain(scores, dom, by_domain[dom], steps, reps, seed)
    out = pd.DataFrame(rows, columns=AGGREGATE_COLUMNS)
    out["agent_steps"] = out["agent_steps"].astype("Int64")
    out["n_tasks"] = out["n_tasks"].astype("Int64")
    out["n_seeds"] = out["n_seeds"].astype("Int64")
    return out


def _aggregate_domain(scores: pd.DataFrame, domain: str, with_pub: Mapping[str, str], steps, reps, seed) -> list:
    """The aggregate rows of one domain (:func:`aggregate_table`); ``with_pub``: our task ->
    its published name, every one of ``domain``."""
    rows = []
    kind = pub.DOMAIN_SCORES[domain]
    divisor = SCORE_DIVISOR if kind == "return" else 1.0  # success: already a percentage
    col = _score_col(scores)

    def add(label, agent_steps, per_task: dict, pub_vals: dict, note=""):
        # per_task: task -> Series indexed by seed
        r = {c: math.nan for c in AGGREGATE_COLUMNS}
        r.update(domain=domain, score=SCORE_TEXT[kind], step=label, agent_steps=agent_steps, n_tasks=len(per_task),
                 tasks=", ".join(per_task), method="", note=note)
        if not per_task:
            r.update(n_seeds=0, note=note or "no task has an evaluation at exactly this step")
            rows.append(r)
            return
        common = sorted(set.intersection(*(set(s.index) for s in per_task.values())))
        if not common:
            r.update(n_seeds=0, note="the included tasks share no seed")
            rows.append(r)
            return
        dropped = sorted(set().union(*(set(s.index) for s in per_task.values())) - set(common))
        matrix = np.array([[per_task[t][s] for t in per_task] for s in common], dtype=float)
        if matrix.size >= MIN_CI_SCORES and len(common) >= MIN_CI_SEEDS:
            points, ci, method = interval_estimates(matrix / divisor, reps=reps, seed=seed)
            r.update(mean_score_ci_low=ci[0, 0], mean_score_ci_high=ci[1, 0],
                     iqm_score_ci_low=ci[0, 1], iqm_score_ci_high=ci[1, 1], method=method)
        else:  # a bootstrap of so few numbers only restates them
            points = _agg(matrix / divisor)
            r["note"] = (r["note"] + "; " if r["note"] else "") + (
                f"no confidence interval from {matrix.size} score(s) ({len(per_task)} task(s) x {len(common)} "
                f"seed(s)): a bootstrap needs at least {MIN_CI_SEEDS} seeds and {MIN_CI_SCORES} scores")
        if len(per_task) == 1:
            r["note"] = (r["note"] + "; " if r["note"] else "") + "one task: not an aggregate over tasks"
        r.update(n_seeds=len(common), mean_score=points[0], iqm_score=points[1],
                 mean_return=float(matrix.mean(axis=0).mean()) if kind == "return" else math.nan)
        if pub_vals and len(pub_vals) == len(per_task) and all(np.isfinite(v) for v in pub_vals.values()):
            pm = float(np.mean(list(pub_vals.values())))
            r.update(published_mean_return=pm if kind == "return" else math.nan, published_mean_score=pm / divisor)
        elif note == "":
            lacking = [t for t in per_task if not np.isfinite(pub_vals.get(t, math.nan))]
            r["note"] = ("published curve has no point at this step for: " + ", ".join(lacking)
                         + ("; " + r["note"] if r["note"] else ""))
        if dropped:
            r["note"] = (r["note"] + "; " if r["note"] else "") + f"seeds left out (not in every task): {dropped}"
        rows.append(r)

    reach = {t: int(scores.loc[scores["task"] == t, "agent_steps"].max())
             for t in with_pub if (scores["task"] == t).any()}
    for step in steps:
        if not any(last >= step for last in reach.values()):
            continue  # beyond every run: not a row ("as far as our runs go")
        per_task, pub_vals = {}, {}
        for task, ptask in with_pub.items():
            curve = pub.score_curve(ptask, "tdmpc2")
            if step not in set(curve["agent_steps"]):
                continue
            at = scores[(scores["task"] == task) & (scores["agent_steps"] == step)]
            if at.empty:
                continue
            per_task[task] = at.set_index("seed")[col]
            pub_vals[task] = _pub_at(curve, step)[0]
        add(str(step), step, per_task, pub_vals)

    per_task, pub_vals = {}, {}
    for task, ptask in with_pub.items():
        s = scores[scores["task"] == task]
        if s.empty:
            continue
        last = s.sort_values("eval_index").groupby("seed").tail(1)
        per_task[task] = last.set_index("seed")[col]
        final_step = int(last["agent_steps"].max())
        pub_vals[task] = _pub_at(pub.score_curve(ptask, "tdmpc2"), final_step)[0]
    add("final", pd.NA, per_task, pub_vals)
    return rows


# --------------------------------------------------------------------------- episode lengths
EPISODE_LENGTH_COLUMNS = [
    "task", "agent_steps", "env_frames", "n_seeds", "return_mean", "return_sd", "length_mean", "length_sd",
    "length_min", "length_max", "seed_lengths",
]


def episode_length_table(scores: pd.DataFrame, tasks: Mapping[str, Mapping]) -> pd.DataFrame:
    """Evaluation returns beside episode lengths, for the episodic tasks (:func:`is_episodic`).

    One row per (episodic task, evaluation step). Over seeds: the mean and population sd of
    each seed's mean return, the mean, population sd, lowest and highest of each seed's mean
    episode length (agent steps; an episode that terminates is shorter than T), and the
    per-seed lengths as text (``seed: length; ...``). Columns :data:`EPISODE_LENGTH_COLUMNS`.
    """
    rows = []
    for task, settings in tasks.items():
        if not is_episodic(settings):
            continue
        s = scores[scores["task"] == task]
        for (step, frames), at in s.groupby(["agent_steps", "env_frames"], sort=True):
            at = at.sort_values("seed")
            rows.append({
                "task": task, "agent_steps": int(step), "env_frames": int(frames), "n_seeds": len(at),
                "return_mean": float(at["return"].mean()), "return_sd": float(np.std(at["return"], ddof=0)),
                "length_mean": float(at["length"].mean()), "length_sd": float(np.std(at["length"], ddof=0)),
                "length_min": float(at["length"].min()), "length_max": float(at["length"].max()),
                "seed_lengths": "; ".join(f"{int(k)}: {v:.1f}" for k, v in zip(at["seed"], at["length"])),
            })
    out = pd.DataFrame(rows, columns=EPISODE_LENGTH_COLUMNS)
    for c in ("agent_steps", "env_frames", "n_seeds"):
        out[c] = out[c].astype("Int64")
    return out


# --------------------------------------------------------------------------- final-score check
FINAL_COLUMNS = [
    "task", "final_agent_steps", "n_seeds", "mean", "worst_seed", "seed_returns", "mean_length", "seed_lengths",
    "mean_min", "mean_max", "seed_min", "mean_ok", "seeds_ok", "result", "note",
]


def final_score_check(scores: pd.DataFrame, tasks: Mapping[str, Mapping],
                      seeds: Optional[Sequence[int]] = None) -> pd.DataFrame:
    """Each task's final evaluation against its ``expected`` range: pass / fail.

    A seed's final score is the mean return of its last evaluation (its success rate in percent
    for a task with a success flag: ``expected`` is then in percent too). The task passes when
    the mean over seeds is >= ``mean_min`` and <= ``mean_max`` and every seed is >=
    ``seed_min`` (absent keys are not checked), and every seed in ``seeds`` has a run.
    A task without ``expected`` gets ``no expectation``. ``mean_length`` / ``seed_lengths``:
    the final evaluation's mean episode length (agent steps), over seeds and per seed (the
    report shows them for episodic tasks). Columns :data:`FINAL_COLUMNS`.
    """
    rows = []
    for task, settings in tasks.items():
        exp = settings.get("expected") or {}
        mean_min, mean_max, seed_min = exp.get("mean_min"), exp.get("mean_max"), exp.get("seed_min")
        s = scores[scores["task"] == task]
        r = {c: math.nan for c in FINAL_COLUMNS}
        r.update(task=task, seed_returns="", seed_lengths="", mean_ok="", seeds_ok="", note="",
                 mean_min=mean_min if mean_min is not None else math.nan,
                 mean_max=mean_max if mean_max is not None else math.nan,
                 seed_min=seed_min if seed_min is not None else math.nan)
        notes = []
        if s.empty:
            r.update(n_seeds=0, result="fail" if exp else "no expectation", note="no evaluations found")
            rows.append(r)
            continue
        last = s.sort_values("eval_index").groupby("seed").tail(1).sort_values("seed")
        vals = last.set_index("seed")[_score_col(last)]
        lens = last.set_index("seed")["length"] if "length" in last else None
        final_step = int(last["agent_steps"].max())
        short = last[last["agent_steps"] < final_step]
        if not short.empty:
            notes.append("seeds ending before the others: " + ", ".join(
                f"{int(x.seed)} at {_fmt_int(x.agent_steps)}" for x in short.itertuples()))
        planned = settings.get("agent_steps")
        if planned is not None and final_step != int(planned):
            notes.append(f"last evaluation at {_fmt_int(final_step)} of {_fmt_int(planned)} agent steps")
        missing = sorted(set(int(x) for x in seeds) - set(int(x) for x in vals.index)) if seeds is not None else []
        if missing:
            notes.append(f"missing seeds: {missing}")
        mean = float(vals.mean())
        worst = float(vals.min())
        mean_ok = (mean_min is None or mean >= mean_min) and (mean_max is None or mean <= mean_max)
        seeds_ok = seed_min is None or bool((vals >= seed_min).all())
        if not exp:
            result = "no expectation"
        else:
            result = "pass" if (mean_ok and seeds_ok and not missing) else "fail"
        r.update(final_agent_steps=final_step, n_seeds=len(vals), mean=mean, worst_seed=worst,
                 seed_returns="; ".join(f"{int(k)}: {v:.1f}" for k, v in vals.items()),
                 mean_length=float(lens.mean()) if lens is not None else math.nan,
                 seed_lengths="; ".join(f"{int(k)}: {v:.1f}" for k, v in lens.items()) if lens is not None else "",
                 mean_ok=("yes" if mean_ok else "no") if (mean_min is not None or mean_max is not None) else "",
                 seeds_ok=("yes" if seeds_ok else "no") if seed_min is not None else "",
                 result=result, note="; ".join(notes))
        rows.append(r)
    out = pd.DataFrame(rows, columns=FINAL_COLUMNS)
    out["final_agent_steps"] = out["final_agent_steps"].astype("Int64")
    out["n_seeds"] = out["n_seeds"].astype("Int64")
    return out


def expected_range_text(exp: Optional[Mapping]) -> str:
    """Human text of an expected range, e.g. ``mean in [700, 900], every seed >= 400``."""
    if not exp:
        return "none"
    parts = []
    lo, hi = exp.get("mean_min"), exp.get("mean_max")
    if lo is not None and hi is not None:
        parts.append(f"mean in [{lo:g}, {hi:g}]")
    elif lo is not None:
        parts.append(f"mean >= {lo:g}")
    elif hi is not None:
        parts.append(f"mean <= {hi:g}")
    if exp.get("seed_min") is not None:
        parts.append(f"every seed >= {exp['seed_min']:g}")
    return ", ".join(parts) or "none"


# --------------------------------------------------------------------------- simulators
# The suites' facts (labels, notes, score ranges) come from the suite registry as plain data,
# passed by the caller (``tdmpc2core.envs.report_facts()``): this layer imports no env code.
def simulators(tasks: Mapping[str, Mapping], suite_of,
               suites: Optional[Mapping[str, Mapping]] = None) -> dict[str, list[str]]:
    """{suite: [task, ...]} of the tasks' ``env_id``; an id no suite accepts is listed under
    ``"unknown"``, last.

    Args:
      tasks: task name -> settings with ``env_id``.
      suite_of: env id -> suite name (:func:`tdmpc2core.envs.suite_of`; raises ValueError
        for an unknown id).
      suites: the registry's report facts (:func:`tdmpc2core.envs.report_facts`), whose
        order the result follows; None: the tasks' order.
    """
    out: dict[str, list[str]] = {}
    for task, settings in tasks.items():
        try:
            suite = suite_of(str(settings.get("env_id", "")))
        except ValueError:
            suite = "unknown"
        out.setdefault(suite, []).append(task)
    order = [k for k in (suites or {}) if k in out] + [k for k in out if k not in (suites or {}) and k != "unknown"]
    return {k: out[k] for k in order + ["unknown"] if k in out}


def simulator_text(tasks: Mapping[str, Mapping], suite_of,
                   versions: Optional[Mapping[str, Optional[str]]] = None, *,
                   suites: Mapping[str, Mapping]) -> tuple[str, str]:
    """(which simulator the runs used, what that means for the comparison with the published
    DMControl curves), as plain sentences for the report's banner and the tables.

    ``suite_of`` as :func:`simulators`; ``versions``: installed package versions, named
    beside a suite's label when given for its ``version_package``; ``suites``: the
    registry's report facts (:func:`tdmpc2core.envs.report_facts`: per suite ``label``,
    ``version_package``, ``comparison_note``), required so that no caller silently loses
    the labels. A suite without facts (``unknown``) is shown by its name.
    """
    sims = simulators(tasks, suite_of, suites)
    versions = versions or {}

    def name(suite):
        facts = suites.get(suite) or {}
        v = versions.get(facts.get("version_package") or "")
        return facts.get("label", suite) + (f" {v}" if v else "")

    used = "Simulator: " + "; ".join(f"{name(s)} ({len(t)} task{'s' * (len(t) != 1)})"
                                     for s, t in sims.items()) + "."
    noted = [s for s in sims if (suites.get(s) or {}).get("comparison_note")]
    notes = [suites[s]["comparison_note"].replace("{tasks}", f" ({', '.join(sims[s])})" if len(noted) > 1 else "")
             for s in noted]
    return used, " ".join(notes)


def return_ranges(tasks: Mapping[str, Mapping], suite_of, suites: Mapping[str, Mapping],
                  lengths: Optional[Mapping[str, int]] = None) -> dict[str, Optional[tuple[float, float]]]:
    """{task: (low, high) returns of an episode, or None} from each task's suite's
    ``reward_per_step`` (report facts of :func:`tdmpc2core.envs.report_facts`) times the
    simulator steps of its episodes as recorded: ``lengths[task]`` (a run's record, run.json's
    ``spec.episode_length``) when given, else the task's ``episode_length`` setting (the
    resolved configuration records the length in effect for every task). None where there is
    none: an id no suite accepts, a suite without a declared reward range, or no recorded
    length (never a guessed one).
    """
    out = {}
    for task, settings in tasks.items():
        try:
            facts = suites.get(suite_of(str(settings.get("env_id", "")))) or {}
        except ValueError:
            facts = {}
        per_step = facts.get("reward_per_step")
        steps = (lengths or {}).get(task, settings.get("episode_length"))
        out[task] = None if per_step is None or steps is None else (float(per_step[0]) * int(steps),
                                                                    float(per_step[1]) * int(steps))
    return out


def normalized_scores(returns, return_range: Optional[tuple[float, float]]) -> np.ndarray:
    """100 (return - low) / (high - low) of ``returns`` (array-like, any shape; float64 out);
    all NaN when ``return_range`` is None (no declared range: never a silent raw return)."""
    r = np.asarray(returns, np.float64)
    if return_range is None:
        return np.full(r.shape, np.nan)
    lo, hi = return_range
    return 100.0 * (r - lo) / (hi - lo)


# --------------------------------------------------------------------------- runtimes
def read_benchmarks(root: str | os.PathLike) -> pd.DataFrame:
    """Every Snakemake ``benchmark:`` file under ``root`` (one row each).

    Columns: job (path below root without ``.tsv``), s (wall seconds), max_rss (MB),
    cpu_time (s); NaN where a column is absent. The last row of a file is used (repeated
    benchmarks append rows).
    """
    rows = []
    root = os.fspath(root)
    if os.path.isdir(root):
        for dirpath, _, files in os.walk(root):
            for f in sorted(files):
                if not f.endswith(".tsv"):
                    continue
                path = os.path.join(dirpath, f)
                try:
                    df = pd.read_csv(path, sep="\t")
                except Exception:  # noqa: BLE001 - an unreadable file is shown as such
                    rows.append({"job": os.path.relpath(path, root)[:-4], "s": math.nan,
                                 "max_rss": math.nan, "cpu_time": math.nan})
                    continue
                last = df.iloc[-1] if len(df) else {}
                rows.append({"job": os.path.relpath(path, root)[:-4],
                             "s": float(last.get("s", math.nan)),
                             "max_rss": pd.to_numeric(last.get("max_rss", math.nan), errors="coerce"),
                             "cpu_time": pd.to_numeric(last.get("cpu_time", math.nan), errors="coerce")})
    return pd.DataFrame(rows, columns=["job", "s", "max_rss", "cpu_time"]).sort_values("job").reset_index(drop=True)


def flatten(d: Mapping, prefix: str = "") -> dict:
    """A nested mapping as {"a.b.c": value} (lists kept as values)."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


def find_value(flat: Mapping, *names: str):
    """The value of the first key of ``flat`` whose last dotted part is one of ``names``."""
    for name in names:
        for k, v in flat.items():
            if k == name or k.endswith("." + name):
                return v
    return None


def read_run_info(path: str | os.PathLike) -> dict:
    """A run.json as a flat dict (see :func:`flatten`); {} if it does not exist."""
    path = os.fspath(path)
    if not os.path.exists(path):
        return {}
    with open(path) as fh:
        return flatten(json.load(fh))


# --------------------------------------------------------------------------- markdown
def _cell(v, digits: int = 1) -> str:
    if v is None or v is pd.NA:
        return ""
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        return f"{v:,.{digits}f}"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_table(df: pd.DataFrame, columns: Optional[Sequence[str]] = None,
                   headers: Optional[Sequence[str]] = None, digits: int = 1) -> str:
    """A GitHub-flavoured Markdown table of ``df`` (numbers with ``digits`` decimals)."""
    columns = list(columns or df.columns)
    headers = list(headers or columns)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_cell(r[c], digits) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def mean_sd_text(mean, sd, digits: int = 1) -> str:
    """``mean ± sd`` or an empty string where mean is NaN."""
    if mean is None or mean is pd.NA or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    if sd is None or sd is pd.NA or (isinstance(sd, float) and math.isnan(sd)):
        return f"{mean:,.{digits}f}"
    return f"{mean:,.{digits}f} ± {sd:,.{digits}f}"


__all__ = [
    "EXTENSION_COLUMNS", "extension_table", "TABLE_STEPS", "SCORE_DIVISOR", "EVAL_COLUMNS", "SUCCESS_COLUMNS",
    "SEED_SCORE_COLUMNS", "task_score_kind", "SCORE_TEXT", "read_evals", "read_metrics", "seed_scores",
    "over_seeds", "table_steps_for", "single_task_table", "iqm", "interval_estimates",
    "aggregate_table", "final_score_check", "expected_range_text", "read_benchmarks", "flatten",
    "find_value", "read_run_info", "markdown_table", "mean_sd_text", "is_episodic", "episode_length_table",
    "SINGLE_TASK_COLUMNS", "AGGREGATE_COLUMNS", "FINAL_COLUMNS", "EPISODE_LENGTH_COLUMNS",
    "simulators", "simulator_text", "return_ranges", "normalized_scores",
]


# --------------------------------------------------------------------------- files
def load_run_config(path: str | os.PathLike) -> dict:
    """The resolved pipeline configuration (``results/resolved_config.yaml``, written by the
    Snakefile's ``resolve_config`` rule): ``protocol``, ``label``, ``seeds`` and ``tasks``
    (task name -> merged settings, with ``published`` and ``expected``).

    Raises:
      ValueError: the file lacks ``tasks`` (a mapping, empty only in a protocol of official
        pools) or ``seeds`` (a list), naming the file.
    """
    import yaml

    path = os.fspath(path)
    with open(path) as fh:
        cfg = yaml.safe_load(fh) or {}
    if not isinstance(cfg.get("tasks"), dict) or not (cfg["tasks"] or cfg.get("official_pools")):
        raise ValueError(f"{path}: expected a non-empty mapping 'tasks' (task name -> settings; empty only "
                         "with official_pools)")
    if not isinstance(cfg.get("seeds"), list) or not cfg["seeds"]:
        raise ValueError(f"{path}: expected a non-empty list 'seeds'")
    return cfg


def run_dir(runs: str | os.PathLike, task: str, seed: int) -> str:
    """``{runs}/{task}/seed{seed}`` (docs/artifacts.md)."""
    return os.path.join(os.fspath(runs), task, f"seed{int(seed)}")
