"""Render ``results/report.html``: one self-contained HTML file.

Figures are embedded (PNG as base64 ``data:`` URIs, SVG inline), the style sheet is
inline, and nothing links outside the file. :func:`render_report` takes plain data (no
file reading); ``tdmpc2core.stages.report`` gathers it from the pipeline's files.
"""
from __future__ import annotations

import base64
import re
import html
import math
from typing import Iterable, Mapping, Optional, Sequence

import pandas as pd

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0 auto;max-width:1200px;
padding:1em 2em;color:#222;line-height:1.45}
h1{margin-bottom:.2em} h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}
.banner{padding:.8em 1.2em;border-radius:6px;font-size:1.15em;margin:1em 0}
.banner.demo{background:#fff3cd;border:2px solid #e0a800}
.banner.paper{background:#d4edda;border:2px solid #28a745}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.88em}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.pass td.result{background:#d4edda;font-weight:bold} tr.fail td.result{background:#f8d7da;font-weight:bold}
td.inside{background:#d4edda} td.outside{background:#f8d7da}
.videos{display:flex;flex-wrap:wrap;gap:1em} .vid{margin:0} .vid video{width:256px;height:auto;display:block}
.fig{margin:.5em 0 1.5em} .fig img,.fig svg{max-width:100%;height:auto}
pre{background:#f7f7f7;border:1px solid #ddd;padding:.8em;overflow-x:auto;font-size:.85em}
.muted{color:#666;font-size:.9em} .summary{font-size:1.05em}
nav a{margin-right:1em}
"""


def esc(x) -> str:
    """HTML-escaped text of a value ('' for None / NaN / NA)."""
    if x is None or x is pd.NA:
        return ""
    if isinstance(x, float) and math.isnan(x):
        return ""
    return html.escape(str(x))


def num(x, digits: int = 1) -> str:
    """A number with thousands separators ('' for missing)."""
    if x is None or x is pd.NA:
        return ""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return esc(x)
    if math.isnan(f):
        return ""
    if f.is_integer() and digits == 0:
        return f"{int(f):,}"
    return f"{f:,.{digits}f}"


_PRECISION_WORDS = {
    "HIGHEST": "full float32: every matrix product in float32, no reduced-precision passes",
    "HIGH": "reduced: float32 matrix products in about three bfloat16 passes (GPUs and TPUs; float32 on CPU)",
    "DEFAULT": "the backend's fastest: bfloat16 or TF32 matrix products on GPUs and TPUs (float32 on CPU)",
}


def matmul_precision_words(raw) -> str:
    """A recorded matmul precision (e.g. ``float32 (HIGHEST); jax_default_matmul_precision=None``
    or ``highest``) in words, the JAX name after it."""
    if raw is None or raw is pd.NA:
        return "not recorded"
    text = str(raw).split(";")[0]  # the Dense layers' part (run.json's note says the rest after it)
    import re

    for name in ("HIGHEST", "HIGH", "DEFAULT"):
        if re.search(rf"\b{name}\b", text, re.IGNORECASE):
            return f"{_PRECISION_WORDS[name]} (JAX precision {name})"
    return text


def fmt_value(key: str, v, none_text: str = "unknown") -> str:
    """A recorded value as a reader wants it (plain text, not escaped): seconds to 0.1 s, other
    floats to 4 significant digits, a matmul precision in words."""
    k = str(key).lower()
    if "default_matmul" in k and (v is None or str(v) == "None"):  # JAX's global setting, left unset
        return "unset: the backend's default (the Dense layers set their own precision)"
    if v is None or v is pd.NA:
        return none_text
    if "matmul_precision" in k and "default_matmul" not in k:
        return matmul_precision_words(v)
    if isinstance(v, bool) or not isinstance(v, float):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if k.endswith(("seconds", "_s", "seconds_upper_bound")) or "seconds" in k:
        return f"{v:,.1f}"
    return f"{v:.4g}"


def html_table(headers: Sequence[str], rows: Iterable[Sequence], row_classes: Optional[Sequence[str]] = None,
               cell_classes: Optional[Sequence[Sequence[str]]] = None) -> str:
    """A table; cells are pre-escaped HTML strings (use :func:`esc` / :func:`num`)."""
    out = ["<table>", "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>"]
    for i, r in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if row_classes and row_classes[i] else ""
        cells = []
        for j, c in enumerate(r):
            cc = cell_classes[i][j] if cell_classes and cell_classes[i][j] else ""
            cells.append(f'<td class="{cc}">{c}</td>' if cc else f"<td>{c}</td>")
        out.append(f"<tr{cls}>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def embed_image(data: bytes | str, kind: str, alt: str) -> str:
    """An ``<img>`` with a base64 PNG data URI, or inline SVG text."""
    if kind == "svg":
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        start = text.find("<svg")
        return text[start:] if start >= 0 else text
    b64 = base64.b64encode(data if isinstance(data, bytes) else data.encode()).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{b64}">'


def embed_video(data: bytes, label: str, mime: str = "video/mp4") -> str:
    """A ``<video>`` (muted, looping, with controls, autoplaying inline) whose source is a
    base64 data URI of ``data`` (an MP4 by default), so the page stays one file."""
    b64 = base64.b64encode(data).decode("ascii")
    return (f'<video class="evalvideo" aria-label="{esc(label)}" title="{esc(label)}" muted loop controls autoplay '
            f'playsinline preload="auto" src="data:{esc(mime)};base64,{b64}"></video>')


def _anchor(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", label)


def videos_section(videos: Sequence) -> str:
    """Each task's evaluation video, or a line saying why it has none: ``videos`` is a list of
    (task, caption, MP4 bytes or None, the reason when None)."""
    parts = ['<div class="videos">']
    for task, caption, data, reason in videos:
        anchor = esc(_anchor(task))
        if data is not None:
            parts.append(f'<figure class="vid" id="video-{anchor}">{embed_video(data, f"{task}: {caption}")}'
                         f"<figcaption><b>{esc(task)}</b> {esc(caption)}</figcaption></figure>")
        else:
            parts.append(f'<p class="muted" id="video-{anchor}"><b>{esc(task)}</b>: no video ({esc(reason)}).</p>')
    return "\n".join(parts) + "</div>"


def _mean_sd(m, s, digits: int = 1) -> str:
    if m is None or m is pd.NA or (isinstance(m, float) and math.isnan(m)):
        return ""
    if s is None or s is pd.NA or (isinstance(s, float) and math.isnan(s)):
        return num(m, digits)
    return f"{num(m, digits)} ± {num(s, digits)}"


def final_section(final: pd.DataFrame, expected_text: Mapping[str, str], episodic: Iterable[str] = ()) -> str:
    """The final-score table; for the ``episodic`` tasks, the final mean episode length (and
    per seed) beside the returns."""
    episodic = set(episodic)
    rows, classes, cells = [], [], []
    for r in final.itertuples(index=False):
        res = str(r.result)
        row = [esc(r.task), num(r.final_agent_steps, 0), num(r.mean), esc(r.seed_returns)]
        cell = ["", "num", "num", ""]
        if episodic:
            m = getattr(r, "mean_length", None)
            row.append(f"{num(m)} ({esc(getattr(r, 'seed_lengths', ''))})" if r.task in episodic and num(m) else "")
            cell.append("")
        rows.append(row + [esc(expected_text.get(r.task, "")), esc(res.upper() if res in ("pass", "fail") else res),
                           esc(r.note)])
        classes.append(res if res in ("pass", "fail") else "")
        cells.append(cell + ["", "result", ""])
    n_pass = int((final["result"] == "pass").sum())
    n_fail = int((final["result"] == "fail").sum())
    n_none = int((final["result"] == "no expectation").sum())
    head = (f'<p class="summary"><b>{n_pass} pass, {n_fail} fail</b>'
            + (f", {n_none} without an expected range" if n_none else "") + ".</p>")
    headers = ["Task", "Final agent steps", "Mean over seeds", "Per seed (seed: return)"]
    if episodic:
        headers.append("Episode length, episodic tasks: mean (seed: length)")
    return head + html_table(headers + ["Expected", "Result", "Note"], rows, classes, cells)


def episode_length_section(lengths: pd.DataFrame) -> str:
    """Every evaluation of the episodic tasks: return beside episode length, over seeds
    (:func:`tdmpc2core.report.analysis.episode_length_table`)."""
    rows, cells = [], []
    for r in lengths.itertuples(index=False):
        rows.append([esc(r.task), num(r.agent_steps, 0), num(r.n_seeds, 0), _mean_sd(r.return_mean, r.return_sd),
                     _mean_sd(r.length_mean, r.length_sd), f"{num(r.length_min)} – {num(r.length_max)}",
                     esc(r.seed_lengths)])
        cells.append(["", "num", "num", "num", "num", "num", ""])
    return html_table(["Task", "Agent steps", "Seeds", "Return: mean ± sd", "Episode length: mean ± sd",
                       "Episode length: min – max", "Per seed (seed: length)"], rows, cell_classes=cells)


def single_task_section(single: pd.DataFrame) -> str:
    """The paper's single-task table beside ours; when no row compares anything (no task with a
    published curve evaluated at a published step, as in the demo), a plain statement of why
    instead of a table of empty cells."""
    compared = single[single["mean"].notna() & single["tdmpc2_mean"].notna()] if not single.empty else single
    if compared.empty:
        items = []
        for task, g in single.groupby("task", sort=False):
            notes = [n for n in g["note"] if isinstance(n, str) and n]
            items.append(f"<li><b>{esc(task)}</b>: {esc(notes[0] if notes else 'nothing compared')}</li>")
        return ("<p><b>Nothing in this run can be set beside the paper's single-task table.</b> That table "
                "compares returns at the published curves' table steps (50,000, 100,000, 500,000, 1,000,000 and "
                "2,000,000 agent steps, and each curve's last point) with the published TD-MPC2, TD-MPC, SAC "
                "and DreamerV3 results, and here:</p><ul>" + "".join(items) + "</ul>"
                "<p>The paper's protocol (<code>--configfile workflow/configs/paper-dmc.yaml</code>: the 22 DM "
                "Control tasks with a published curve, 2,000,000 agent steps) fills it. The tables "
                "(<code>results/tables/single_task.csv</code>) keep one row per task with this note.</p>")
    rows, cells = [], []
    kinds = single["score"] if "score" in single.columns else pd.Series(["return"] * len(single))
    success = bool((kinds == "success").any())
    for r, kind in zip(single.itertuples(index=False), kinds):
        ours = "" if pd.isna(r.mean) else f"{_mean_sd(r.mean, r.sd)} (n={int(r.n_seeds)})"
        rng = "" if pd.isna(r.min) else f"{num(r.min)} – {num(r.max)}"
        row = [esc(r.task), esc(r.published_task), "success rate (%)" if kind == "success" else "return",
               num(r.agent_steps, 0), num(r.env_frames, 0), ours, rng,
               _mean_sd(r.tdmpc2_mean, r.tdmpc2_sd), esc(r.band),
               _mean_sd(r.tdmpc_mean, r.tdmpc_sd), _mean_sd(r.sac_mean, r.sac_sd),
               _mean_sd(r.dreamerv3_mean, r.dreamerv3_sd), esc(r.note)]
        cell = ["", "", "", "num", "num", "num", "num", "num", esc(r.band), "num", "num", "num", ""]
        if success:
            row.insert(7, num(getattr(r, "success_any_mean", float("nan"))))
            cell.insert(7, "num")
        rows.append(row)
        cells.append(cell)
    heads = ["Task", "Published task", "Score", "Agent steps", "Our env frames", "Ours: mean ± sd",
             "Ours: min – max", "TD-MPC2 published", "Band (±1 sd)", "TD-MPC", "SAC", "DreamerV3", "Note"]
    if success:
        heads.insert(7, "Ours: success at any step (%)")
    return ("<p>At exactly these agent steps (the paper's tables use agent steps; the published curves "
            "have a point every 50,000). Ours: mean ± population sd over seeds, and the lowest – highest "
            "seed. Published: mean ± population sd over the paper's seeds. Band: our mean inside or "
            "outside the published TD-MPC2 mean ± 1 sd. A task without an evaluation at a published "
            "step is not compared; the note says so. "
            + ("Score: the episode return, or for a task with a success flag (Meta-World, MyoSuite) the "
               "success rate in percent, an episode counting as a success when the flag is set at its last "
               "step (the official rule), beside the published success rates; the any-step rate (Meta-World's "
               "maintainers' rule) is shown for reference and not compared." if success else
               "Score: the episode return.")
            + "</p>" + html_table(heads, rows, cell_classes=cells))


def aggregate_section(agg: pd.DataFrame) -> str:
    """Aggregate scores with their confidence intervals; says plainly when the run has no
    aggregate (no task evaluated at a published step), when the "aggregate" is over one task
    only, and when too few scores leave no confidence interval."""
    scored = agg[agg["mean_score"].notna()] if not agg.empty else agg
    if scored.empty:
        notes = sorted({n for n in agg["note"] if isinstance(n, str) and n}) if not agg.empty else []
        return ("<p><b>No aggregate score.</b> An aggregate is over the tasks that have a published curve, "
                "at the agent steps where the curves have a point (and at each task's last evaluation); this run "
                "has none to aggregate" + (f" ({esc('; '.join(notes))})" if notes else "") + ".</p>")
    out = []
    n_tasks = int(scored["n_tasks"].max())
    no_ci = scored["mean_score_ci_low"].isna().all()
    if n_tasks < 2 or no_ci:
        tasks = sorted({x for s in scored["tasks"] if isinstance(s, str) for x in s.split(", ") if x})
        out.append("<p><b>What this run cannot show:</b> the paper's aggregates (mean and IQM of the normalized "
                   "score) are over many tasks, with confidence intervals from resampling seeds within each "
                   f"task. This run has {n_tasks} task(s) with a published curve ({esc(', '.join(tasks))}) and "
                   f"{int(scored['n_seeds'].max())} seed(s), so "
                   + ("the numbers below are that task's own score, not an aggregate over tasks" if n_tasks < 2
                      else "the numbers below are over few tasks")
                   + (", and no confidence interval is given: a bootstrap of so few numbers only restates them"
                      if no_ci else "") + ".</p>")
    rows, cells = [], []
    from .published import DOMAIN_LABELS

    for r in scored.itertuples(index=False):
        def ci(p, lo, hi):
            if pd.isna(p):
                return ""
            return num(p) if pd.isna(lo) else f"{num(p)} [{num(lo)}, {num(hi)}]"
        step = num(r.step, 0) if str(r.step).isdigit() else esc(r.step)
        dom = getattr(r, "domain", "") or "DMControl"  # a table written before the domains: DMControl's
        rows.append([esc(DOMAIN_LABELS.get(dom, dom)),
                     esc(getattr(r, "score", "return / 10")), step, num(r.n_tasks, 0), num(r.n_seeds, 0),
                     ci(r.mean_score, r.mean_score_ci_low, r.mean_score_ci_high),
                     ci(r.iqm_score, r.iqm_score_ci_low, r.iqm_score_ci_high),
                     num(r.published_mean_score), num(r.mean_return), num(r.published_mean_return),
                     esc(r.note)])
        cells.append(["", "", "", "num", "num", "num", "num", "num", "num", "num", ""])
    out.append(html_table(["Domain", "Score", "Agent steps", "Tasks", "Seeds", "Mean score [95% CI]", "IQM score [95% CI]",
                           "TD-MPC2 published mean score", "Ours: mean return", "TD-MPC2 published mean return",
                           "Note"], rows, cell_classes=cells))
    method = next((m for m in scored["method"] if isinstance(m, str) and m), None)
    out.append(f'<p class="muted">Confidence intervals: {esc(method)}.</p>' if method else
               '<p class="muted">No confidence interval: too few scores for a bootstrap (the note says how many).</p>')
    left = agg[agg["mean_score"].isna()]
    if not left.empty:
        out.append('<p class="muted">Steps without a score: ' + esc("; ".join(
            f"{r.step}: {r.note}" for r in left.itertuples(index=False))) + ".</p>")
    return "\n".join(out)


def dataset_stats(summary: pd.DataFrame) -> pd.DataFrame:
    """Per dataset and task: episodes, agent steps, terminated episodes and the return
    distribution, from the rows of ``tdmpc2 dataset-summary`` (one per episode). A pool gets
    one row per task and an ``(all tasks)`` row of totals (no return statistics: the tasks'
    returns are on different scales)."""
    def stats(g):
        r = g["return"]
        return pd.Series({"episodes": len(g), "agent_steps": int(g["agent_steps"].sum()),
                          "terminated": int(g["terminated"].sum()), "mean": r.mean(), "sd": r.std(ddof=0),
                          "min": r.min(), "median": r.median(), "max": r.max()})

    out = []
    for (dataset, kind), g in summary.groupby(["dataset", "kind"], sort=False):
        for task, gt in g.groupby("task", sort=False):
            out.append({"dataset": dataset, "kind": kind, "task": task, **stats(gt)})
        if kind == "pool":  # totals only: returns of different tasks are on different scales
            out.append({"dataset": dataset, "kind": kind, "task": "(all tasks)",
                        **stats(g)[["episodes", "agent_steps", "terminated"]]})
    return pd.DataFrame(out)


def datasets_section(stats: pd.DataFrame) -> str:
    rows, cells = [], []
    for r in stats.itertuples(index=False):
        rows.append([esc(r.dataset), esc(r.kind), esc(r.task), num(r.episodes, 0), num(r.agent_steps, 0),
                     num(r.terminated, 0), _mean_sd(r.mean, r.sd), num(r.min), num(r.median), num(r.max)])
        cells.append(["", "", "", "num", "num", "num", "num", "num", "num", "num"])
    return html_table(["Dataset", "Kind", "Task", "Episodes", "Agent steps", "Terminated episodes",
                       "Return: mean ± sd", "Min", "Median", "Max"], rows, cell_classes=cells)


MT30_CAVEAT = ("The pools are our own single-task runs' replay, not the paper's mt30 / mt80 datasets, so "
               "these scores are not the paper's numbers: they show that one agent trained offline on the "
               "pooled data solves the pooled tasks, and how that changes with model size on our data.")


def multitask_section(scaling: pd.DataFrame, tasks: pd.DataFrame, ranges: Mapping[str, object],
                      settings: Mapping) -> str:
    """The multi-task scaling table, the per-task table with the expected-range check, and the
    definition of the normalized score with every task's declared range."""
    rows, cells = [], []
    for r in scaling.itertuples(index=False):
        score = "" if pd.isna(r.score_mean) else _mean_sd(r.score_mean, r.score_sd)
        rng = "" if pd.isna(r.score_mean) else f"{num(r.score_min)} – {num(r.score_max)}"
        rows.append([esc(r.pool), num(r.model_size, 0), num(r.params, 0), num(r.updates, 0), num(r.n_tasks, 0),
                     num(r.n_seeds, 0), score, rng, esc(r.note)])
        cells.append(["", "num", "num", "num", "num", "num", "num", "num", ""])
    out = [html_table(["Pool", "Model size", "Parameters", "Updates", "Tasks", "Seeds",
                       "Normalized score: mean ± sd", "Min – max over seeds", "Note"],
                      rows, cell_classes=cells)]
    rows, classes, cells = [], [], []
    for r in tasks.itertuples(index=False):
        res = str(r.result)
        multi = "" if pd.isna(r.multi_mean) else _mean_sd(r.multi_mean, r.multi_sd)
        single = "" if pd.isna(r.single_mean) else _mean_sd(r.single_mean, r.single_sd)
        rows.append([esc(r.pool), esc(r.task), num(r.model_size, 0), multi, esc(r.seed_returns), num(r.score_mean),
                     single, num(r.single_agent_steps, 0), esc(r.expected),
                     esc(res.upper() if res in ("pass", "fail") else res), esc(r.note)])
        classes.append(res if res in ("pass", "fail") else "")
        cells.append(["", "", "num", "num", "", "num", "num", "num", "", "result", ""])
    n_pass, n_fail = int((tasks["result"] == "pass").sum()), int((tasks["result"] == "fail").sum())
    out.append(f'<p class="summary"><b>Expected-range check of the multi-task returns: {n_pass} pass, '
               f'{n_fail} fail.</b></p>')
    out.append(html_table(["Pool", "Task", "Model size", "Multi-task return: mean ± sd", "Per seed (seed: return)",
                           "Normalized score", "Single-task return: mean ± sd", "Single-task agent steps",
                           "Expected (multi-task return)", "Result", "Note"], rows, classes, cells))
    declared = settings.get("return_ranges") or {}
    ranges_rows = [[esc(t), "none: no normalized score" if rg is None else f"[{num(rg[0], 2)}, {num(rg[1], 2)}]",
                    "" if rg is None else ("declared (multitask.return_ranges)" if t in declared
                                           else "default: DMC returns in [0, 1000], the paper's return / 10")]
                   for t, rg in ranges.items()]
    out.append("<p>Return ranges (low, high) of the normalized score 100 (return − low) / (high − low):</p>"
               + html_table(["Task", "Return range", "Source"], ranges_rows))
    if any(rg is not None and t in declared for t, rg in ranges.items()):
        out.append('<p class="muted">A declared range is the task\'s own scale, not DMC\'s: on it even a '
                   "random policy may score well above 0 (e.g. Pendulum's range of all possible returns), "
                   "so a mean over tasks mixes scales. Read each task's return beside its single-task "
                   "return above; compare normalized scores only between model sizes on the same pool.</p>")
    keys = ("updates", "batch_size", "eval_every", "eval_episodes", "seeds", "agent")
    out.append('<p class="muted">Settings: ' + esc(", ".join(f"{k} = {settings.get(k)}" for k in keys
                                                             if settings.get(k) is not None)) + ".</p>")
    return "\n".join(out)


def official_section(table: pd.DataFrame) -> str:
    """The "Released checkpoints, our planner" table (:func:`tdmpc2core.report.official.official_table`):
    each evaluated task's return beside the published TD-MPC2 final score, skipped tasks with why;
    then each checkpoint file's name, size and SHA-256 (where the table has them)."""
    rows, cells = [], []
    for r in table.itertuples(index=False):
        ours = "" if pd.isna(r.return_mean) else _mean_sd(r.return_mean, r.return_sd)
        pub = "" if pd.isna(r.published_return) else _mean_sd(r.published_return, r.published_sd)
        rows.append([esc(r.checkpoint), num(r.model_size, 0), esc(r.task_set), esc(r.task), num(r.episodes, 0), ours,
                     num(r.normalized_score), pub, num(r.published_agent_steps, 0), num(r.difference), esc(r.note)])
        cells.append(["", "num", "", "", "num", "num", "num", "num", "num", "num", ""])
    out = html_table(["Checkpoint", "Model size", "Task set", "Task", "Episodes", "Our planner: return mean ± sd",
                      "Normalized score", "Published TD-MPC2 final: mean ± sd", "Published at agent steps",
                      "Ours − published", "Note"], rows, cell_classes=cells)
    if "checkpoint_sha256" not in table.columns:  # a table written before the files were recorded
        return out
    files = table.drop_duplicates("checkpoint")
    return out + "\n<p>The checkpoint files as they were read (every zip member's CRC-32 checked first):</p>\n" + \
        html_table(["Checkpoint", "File", "Bytes", "SHA-256"],
                   [[esc(r.checkpoint), esc(r.checkpoint_file), num(r.checkpoint_bytes, 0),
                     f"<code>{esc(r.checkpoint_sha256)}</code>"] for r in files.itertuples(index=False)],
                   cell_classes=[["", "", "num", ""]] * len(files))


def runtime_section(runs: pd.DataFrame) -> str:
    """The training jobs' runtimes: one row per attempt (session) of each job, a resumed job's
    attempts one below the other, and each job's total over its attempts."""
    rows, cells = [], []
    for r in runs.itertuples(index=False):
        rows.append([esc(r.job), esc(r.run), esc(r.seeds), esc(r.attempt), esc(r.steps), esc(r.outcome),
                     esc(r.started_utc), num(r.wall_time_s), num(r.compile_time_s),
                     esc(getattr(r, "compile_programs", "") or ""), esc(r.backend),
                     esc(r.device_kind), esc(matmul_precision_words(r.matmul_precision))])
        cells.append(["", "", "", "", "num", "", "", "num", "num", "", "", "", ""])
    out = ["<p>One row per attempt of each training job, from its run.json: a job stopped (a time limit, a "
           "preemption, Ctrl-C) and resumed from its checkpoint has one row per session. The seeds of a job "
           "share one process and one compiled program. Compile time: the seconds each session spent tracing, "
           "lowering and compiling its programs (the training chunk, the evaluation, the initial state), "
           "measured apart from running them; a program found in the persistent compilation cache compiles "
           "in seconds.</p>",
           html_table(["Job", "Run", "Seeds", "Attempt", "Steps (from → to)", "Outcome", "Started (UTC)",
                       "Wall time (s)", "Compile time (s)", "Compile per program (s)", "JAX backend", "Device",
                       "Matmul precision"],
                      rows, cell_classes=cells)]
    multi = runs.groupby(["job", "run", "seeds"], sort=False).filter(lambda g: len(g) > 1)
    if not multi.empty:
        totals = [f"{esc(job)} {esc(run)} (seeds {esc(seeds)}): {num(g['wall_time_s'].sum())} s over {len(g)} attempts"
                  for (job, run, seeds), g in multi.groupby(["job", "run", "seeds"], sort=False)]
        out.append('<p class="muted">Resumed jobs, wall time over all attempts: ' + "; ".join(totals) + ".</p>")
    return "\n".join(out)


def kv_table(d: Mapping, key_header: str = "Key", value_header: str = "Value", none_text: str = "unknown") -> str:
    return html_table([key_header, value_header],
                      [[esc(k), esc(fmt_value(k, v, none_text))] for k, v in d.items()])


def _head(ctx: Mapping) -> list[str]:
    """The page's head, title, banner (protocol, simulators), sources and navigation."""
    is_paper = bool(ctx.get("is_paper"))
    banner_cls = "paper" if is_paper else "demo"
    # which simulator the runs used, and what it means for the published curves
    sim_used, sim_note = ctx.get("simulator") or ("", "The DMC tasks here run on MuJoCo Playground, "
                                                  "whose physics differ from dm_control's: comparisons "
                                                  "are approximate.")
    protocol_text = ("the paper's protocol" if is_paper else "NOT the paper's protocol")
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>TD-MPC2 reproduction report: {esc(ctx.get('protocol'))}</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>TD-MPC2 reproduction report</h1>",
        f'<div class="banner {banner_cls}"><b>{esc(ctx.get("label"))}</b><br>'
        f'Protocol <code>{esc(ctx.get("protocol"))}</code>'
        + ("" if protocol_text.lower() in str(ctx.get("label") or "").lower() else f": {protocol_text}") + "."
        + (f'<br>{esc(sim_used)}' if sim_used else "") + "</div>",
        f'<p class="muted">Generated {esc(ctx.get("generated"))}. Paper: Hansen, Su, Wang, '
        "TD-MPC2: Scalable, Robust World Models for Continuous Control (ICLR 2024). Published "
        "curves: the official repository's results folder (nicklashansen/tdmpc2). "
        f"{esc(sim_note)}</p>",
        '<nav><a href="#final">Final scores</a>'
        + ('<a href="#lengths">Episode lengths</a>' if ctx.get("episodic") else "")
        + '<a href="#single">Single-task table</a>'
        '<a href="#aggregate">Aggregates</a><a href="#figures">Figures</a>'
        + ('<a href="#videos">Videos</a>' if ctx.get("videos") else "")
        + '<a href="#datasets">Datasets</a>'
        + ('<a href="#multitask">Multi-task</a>' if ctx.get("multitask") else "")
        + ('<a href="#official">Released checkpoints</a>' if ctx.get("official") is not None else "")
        + ('<a href="#learning-parity">Beside the official code</a>' if ctx.get("learning_parity") else "")
        + ('<a href="#reproduction">Reproduced</a>' if ctx.get("reproduction") else "")
        + '<a href="#runtime">Runtime</a>'
        '<a href="#provenance">Provenance</a><a href="#config">Configuration</a></nav>',
    ]


def _results(ctx: Mapping) -> list[str]:
    """Notes, final scores against the expected ranges, episode lengths (episodic tasks), the
    single-task table and the aggregates."""
    parts = []
    for note in ctx.get("notes") or []:
        parts.append(f'<p class="muted">{esc(note)}</p>')
    parts += ['<h2 id="final">Final score against the expected range</h2>',
              "<p>Each task's last evaluation: a seed's score is the mean return over that evaluation's "
              "episodes; the task passes when the mean over seeds lies in the expected range and every "
              "seed reaches the per-seed minimum.</p>",
              final_section(ctx["final"], ctx.get("expected_text", {}), ctx.get("episodic") or ())]
    lengths = ctx.get("episode_lengths")
    if ctx.get("episodic") and lengths is not None:
        parts += ['<h2 id="lengths">Episode lengths of the episodic tasks</h2>',
                  "<p>Tasks trained with <code>episodic: true</code> end an episode when the environment "
                  "terminates (e.g. a body that falls), so an evaluation episode can be shorter than the time "
                  "limit T. Each evaluation's return beside its episode length in agent steps: a seed's value "
                  "is the mean over that evaluation's episodes; then mean ± population sd and lowest – highest "
                  "over seeds.</p>",
                  episode_length_section(lengths)]
    parts += ['<h2 id="single">Single-task results beside the published curves</h2>',
              single_task_section(ctx["single"])]
    parts += ['<h2 id="aggregate">Aggregate scores</h2>',
              "<p>Over the tasks with a published curve, per domain as the paper shows them. Normalized "
              "score = DMControl return / 10 (0–100); Meta-World and MyoSuite: the success rate in percent "
              "(success at the episode's last step, the official rule); mean over tasks of the mean over "
              "seeds, and the interquartile mean (IQM) over all seed × task scores. The paper reports "
              "DMControl's raw returns averaged over tasks: the return columns.</p>",
              aggregate_section(ctx["aggregate"])]
    return parts


def _figures(ctx: Mapping) -> list[str]:
    """The learning curves: the overview and each task's figures."""
    parts = []
    parts.append('<h2 id="figures">Learning curves</h2>')
    parts.append("<p>x: env frames (agent steps × action repeat), as the paper's figures. Ours: mean over "
                 "seeds, shaded between the lowest and the highest seed. Published TD-MPC2: mean, shaded "
                 "± 1 sd.</p>")
    if ctx.get("overview"):
        kind, data = ctx["overview"]
        parts.append(f'<div class="fig"><h3>All tasks</h3>{embed_image(data, kind, "overview")}</div>')
    for task, subtitle, images in ctx.get("figures", []):
        parts.append(f'<h3 id="fig-{esc(task)}">{esc(task)} <span class="muted">{esc(subtitle)}</span></h3>')
        for alt, kind, data in images:
            parts.append(f'<div class="fig">{embed_image(data, kind, alt)}</div>')
    return parts


def _videos(ctx: Mapping) -> list[str]:
    """The evaluation videos (config ``video``): one per task, or why none."""
    videos = ctx.get("videos") or []
    if not videos:
        return []
    return ['<h2 id="videos">Evaluation videos</h2>',
            "<p>One episode of each task's first seed, acting as its last evaluation acts (the planner in "
            "evaluation mode, from the initial state of that evaluation's first episode), rendered by the "
            "task's simulator; single-task runs first, then each multi-task model on each of its tasks.</p>",
            videos_section(videos)]


def _datasets(ctx: Mapping) -> list[str]:
    """The episode datasets' table and figure (when ``ctx['datasets']`` has rows)."""
    parts = []
    ds = ctx.get("datasets")
    if ds is not None and not ds.empty:
        parts.append('<h2 id="datasets">Episode datasets</h2>')
        parts.append("<p>Each training run's replay, exported as an episode dataset (every complete "
                     "episode, as collected: seed-phase random episodes included), joined per task "
                     "(<code>results/datasets/tasks/</code>) and pooled for multi-task training "
                     "(<code>results/datasets/pools/</code>; observations and actions zero-padded to the "
                     "largest task). Agent steps = transitions; the reset rows are not counted. Returns are "
                     "undiscounted training-episode returns, exploration noise included.</p>")
        parts.append(datasets_section(ds))
        if ctx.get("datasets_figure"):
            kind, data = ctx["datasets_figure"]
            parts.append(f'<div class="fig">{embed_image(data, kind, "episode returns per task dataset")}</div>')
    return parts


def _multitask(ctx: Mapping) -> list[str]:
    """The multi-task section (when ``ctx['multitask']``)."""
    parts = []
    mt = ctx.get("multitask")
    if mt:
        parts.append('<h2 id="multitask">Multi-task TD-MPC2: one agent, every pooled task, per model size</h2>')
        parts.append("<p>One model per pool and model-size preset, trained offline on the pool's episode "
                     "dataset (slices drawn uniformly over the pooled episodes, no planning during training, "
                     "a learnable task embedding, zero-padded observations, masked actions, each task's discount "
                     "from its own episode length), then evaluated on every task in its own environment with the "
                     "planner in evaluation mode. A seed's normalized score is the mean over tasks of each "
                     "task's 100 (return − low) / (high − low) at the final evaluation; DM Control's range "
                     "[0, 1000] makes it the paper's return / 10. Beside each task's multi-task return: the "
                     "final return of the single-task runs whose replay the pool holds.</p>")
        parts.append(f'<p class="banner demo">{esc(MT30_CAVEAT)}</p>')
        parts.append(multitask_section(mt["scaling"], mt["tasks"], mt.get("ranges") or {}, mt.get("settings") or {}))
        if mt.get("figure"):
            kind, data = mt["figure"]
            parts.append(f'<div class="fig">{embed_image(data, kind, "multi-task scaling")}</div>')
    return parts


def _official(ctx: Mapping) -> list[str]:
    """The released checkpoints' section (when ``ctx['official']`` is given)."""
    parts = []
    off = ctx.get("official")
    if off is not None:
        parts.append('<h2 id="official">Released checkpoints, our planner</h2>')
        parts.append("<p>Checkpoints released with the paper (official TD-MPC2 weights, converted bit for bit), "
                     "evaluated here with this project's planner on dm_control by the official evaluate.py "
                     "protocol: each episode from a fresh initial state, the planner in evaluation mode (no "
                     "exploration noise), multi-task checkpoints per task with the task's embedding, padded "
                     "observations and masked actions. Beside each task's mean return: the published TD-MPC2 "
                     "final score (the last point of the published single-task curve, 5M model; for a "
                     "multi-task checkpoint a reference, not the same experiment). Tasks not available on "
                     "dm_control here are listed as skipped, with the reason.</p>")
        parts.append(official_section(off))
    return parts


def learning_parity_section(lp: Mapping) -> str:
    """The "Learning beside the official code" section's body from
    :func:`tdmpc2core.report.learning_parity.report_context`: the method, the per-task
    comparison (means with bootstrap CIs, the TOST and its verdict), one figure per task."""
    meta = lp.get("meta") or {}
    sched, settings = meta.get("schedule") or {}, meta.get("settings") or {}
    out = [f"<p>The official code (nicklashansen/tdmpc2 at 5f6fade, PyTorch on the CPU, its own training loop, "
           f"replay buffer and dm_control wrappers, unmodified) and this project's agent, trained on the same "
           f"dm_control tasks with the same hyperparameters and schedule, several independent seeds each "
           f"(<code>benchmarks/learning_parity.py</code>; results file <code>{esc(lp.get('path'))}</code>). "
           f"Equivalence margin ±{num(lp.get('margin'), 0)} return, stated in advance: each seed's score is its "
           f"mean return over the last {esc(lp.get('last_points'))} evaluation points; two one-sided Welch "
           f"t-tests (TOST) at α = {esc(lp.get('alpha'))} on the difference of the mean scores (ours − "
           f"official). <i>equivalent</i>: its 90% interval lies inside the margin; otherwise <i>different</i> "
           f"when the two-sided Welch test of a zero difference rejects at the same α, else "
           f"<i>inconclusive</i>. "
           f"Intervals of the means: percentile bootstrap over seeds (95%).</p>"]
    if sched or settings:
        keys = ("enc_dim", "mlp_dim", "latent_dim", "num_q", "batch_size", "horizon", "num_samples", "num_elites",
                "num_pi_trajs", "iterations", "seed_steps")
        words = [f"{k} = {sched[k]}" for k in ("steps", "eval_freq", "eval_episodes") if k in sched]
        words += [f"{k} = {settings[k]}" for k in keys if k in settings]
        if meta.get("wall_s") is not None:
            words.append(f"wall time {num(float(meta['wall_s']) / 60, 0)} min")
        out.append('<p class="muted">Settings (official names, both sides): ' + esc(", ".join(words)) + ".</p>")
    if meta.get("reduced"):
        out.append('<p class="banner demo"><b>A reduced run</b> (<code>learning_parity.py run --reduced</code>: a '
                   'tiny model, a few hundred agent steps, two seeds): it checks that the harness runs, and says '
                   'nothing about learning. The committed comparison is '
                   '<code>benchmarks/results/learning_parity.parquet</code>.</p>')
    comp = lp.get("comparison")
    alone = [] if comp is None else [r.task for r in comp.itertuples(index=False)
                                     if r.verdict == "one implementation only"]
    if comp is None or alone:
        out.append('<p class="banner demo"><b>No comparison</b> for ' + esc(", ".join(alone) or "any task")
                   + ": the results file holds one implementation's runs only (both need at least two seeds "
                   f"evaluated at the same last {esc(lp.get('last_points'))} points).</p>")
    if comp is not None and not comp.empty:
        rows = []
        for r in comp.itertuples(index=False):
            def ci(v):
                return f"[{num(v[0])}, {num(v[1])}]" if not any(map(math.isnan, v)) else ""

            def p(v):
                return esc(f"{v:.3g}") if not math.isnan(v) else ""
            rows.append([esc(r.task), esc(", ".join(f"{int(s):,}" for s in r.steps)),
                         f"{num(r.official_mean)} {ci(r.official_ci)} ({r.n_official})",
                         f"{num(r.ours_mean)} {ci(r.ours_ci)} ({r.n_ours})",
                         f"{num(r.diff)} {ci(r.ci90)}", p(r.p_tost), p(r.p_diff), f"<b>{esc(r.verdict)}</b>"])
        out.append(html_table(["Task", "Points (agent steps)", "Official: mean [95% CI] (seeds)",
                               "Ours: mean [95% CI] (seeds)", "Ours − official [90% CI]", "p (TOST)",
                               "p (difference, two-sided)", "Verdict"], rows))
    for task, kind, data in lp.get("figures") or []:
        out.append(f'<div class="fig">{embed_image(data, kind, f"{task}: official vs ours")}</div>')
    return "\n".join(out)


def _learning_parity(ctx: Mapping) -> list[str]:
    """The "Learning beside the official code" section (when ``ctx['learning_parity']`` is given)."""
    lp = ctx.get("learning_parity")
    if not lp:
        return []
    return ['<h2 id="learning-parity">Learning beside the official code</h2>', learning_parity_section(lp)]


def reproduction_section(rp: Mapping) -> str:
    """The "The paper's numbers, reproduced" section's body from
    :func:`tdmpc2core.report.reproduction.report_context`: what ran and the rule stated in
    advance, "N of M tasks inside" at 100,000 simulator steps, what a partial run lacks, the
    per-task verdicts, the per-point table (ours: mean and each seed; published: mean [min, max];
    the widened band; the verdict), the commits, devices and precision of the rows, the calls'
    wall time, and one figure per task."""
    meta = rp.get("meta") or {}
    margin = rp.get("margin")
    out = [f"<p>Our agent, trained by the pipeline's own <code>tdmpc2 train-single</code> stage on dm_control "
           f"(the paper's simulator) with the paper's settings (<code>{esc(meta.get('configfile') or 'the configuration')}"
           f"</code>; <code>benchmarks/reproduction.py</code>; results file <code>{esc(rp.get('path'))}</code>), against "
           f"the published TD-MPC2 seeds (the official repository's per-seed curves) at every published point its runs "
           f"reach. The rule, stated in advance in docs/fidelity.md: at each published point, our mean over seeds is "
           f"<i>inside</i> when it lies in the published seeds' [min, max] widened by {num(margin, 0)} return points "
           f"on each side, else <i>outside</i>; a point the run should reach without an evaluation of ours, or "
           f"without every planned seed's (their returns are shown, not judged), is "
           f"<i>missing</i>. A task is inside when all its points are. Steps are simulator steps (agent steps × 2).</p>"]
    if meta.get("reduced"):
        out.append('<p class="banner demo"><b>A reduced run</b> (<code>reproduction.py run --reduced</code>: a tiny '
                   'agent, a few hundred agent steps, two seeds, on the CPU): it checks that the harness runs and '
                   'says nothing about the paper\'s numbers.</p>')
    head = rp.get("headline") or {}
    out.append(f'<p class="summary"><b>{esc(head.get("text", ""))}.</b></p>')
    partial = rp.get("partial") or []
    if partial:
        out.append('<p class="banner demo"><b>A partial run</b>: ' + esc(" ".join(partial)) + "</p>")
    tasks = rp.get("tasks")
    if tasks is not None and not tasks.empty:
        items = []
        for r in tasks.itertuples(index=False):
            why = ""
            if r.outside:
                why = " (outside at " + ", ".join(f"{s:,}" for s in r.outside) + " simulator steps)"
            elif r.missing:
                why = " (not judged yet at " + ", ".join(f"{s:,}" for s in r.missing) + " simulator steps)"
            items.append(f"<li>{esc(r.task)}: <b>{esc(r.verdict)}</b>{esc(why)}</li>")
        out.append("<ul>" + "".join(items) + "</ul>")
    points = rp.get("points")
    if points is not None and not points.empty:
        from .reproduction import verdict_words
        rows, cells = [], []
        for r in points.itertuples(index=False):
            ours = "" if not r.n_seeds else (
                f"{num(r.mean)} (" + ", ".join(f"{s}: {num(v)}" for s, v in zip(r.seeds, r.seed_returns)) + ")")
            rows.append([esc(r.task), num(r.env_steps, 0), ours,
                         f"{num(r.pub_mean)} [{num(r.pub_min)}, {num(r.pub_max)}] ({r.pub_n})",
                         f"[{num(r.band_low)}, {num(r.band_high)}]", f"<b>{esc(verdict_words(r))}</b>"])
            cells.append([""] * 5 + [r.verdict if r.verdict in ("inside", "outside") else ""])
        out.append(html_table(["Task", "Simulator steps", "Ours: mean over seeds (seed: return)",
                               "Published: mean [min, max] (seeds)", f"Band (±{num(margin, 0)})", "Verdict"],
                              rows, cell_classes=cells))
    words = [f"commit {', '.join(rp.get('commits') or [])}", f"device {', '.join(rp.get('devices') or [])}",
             f"matmul precision {', '.join(rp.get('precisions') or [])}",
             f"model size {', '.join(str(m) for m in rp.get('model_sizes') or [])}"]
    calls = rp.get("calls") or {}
    if calls:
        words.append("wall time of the calls: " + "; ".join(
            f"{t} {v['calls']} call(s), {num(v['wall_s'] / 60, 1)} min" for t, v in sorted(calls.items())))
    out.append('<p class="muted">Rows of ' + esc("; ".join(words)) + ".</p>")
    for task, kind, data in rp.get("figures") or []:
        out.append(f'<div class="fig">{embed_image(data, kind, f"{task}: our seeds over the published seeds")}</div>')
    return "\n".join(out)


def _reproduction(ctx: Mapping) -> list[str]:
    """The "The paper's numbers, reproduced" section (when ``ctx['reproduction']`` is given)."""
    rp = ctx.get("reproduction")
    if not rp:
        return []
    return ['<h2 id="reproduction">The paper\'s numbers, reproduced</h2>', reproduction_section(rp)]


def _runtime(ctx: Mapping) -> list[str]:
    """Every attempt of each training job, and Snakemake's benchmark files."""
    parts = []
    parts.append('<h2 id="runtime">Runtime</h2>')
    runs = ctx.get("runs")
    if runs is not None and not runs.empty:
        parts.append(runtime_section(runs))
    rt = ctx.get("runtimes")
    if rt is not None and not rt.empty:
        parts.append("<p>From Snakemake's <code>benchmark:</code> files, one per job (wall seconds, "
                     "peak resident memory, CPU seconds). A job's file holds its last attempt only: the table "
                     "above has every attempt of a resumed training job.</p>")
        parts.append(html_table(["Job", "Wall time (s)", "Max RSS (MB)", "CPU time (s)"],
                                [[esc(r.job), num(r.wall_s), num(r.max_rss_mb), num(r.cpu_time_s)]
                                 for r in rt.itertuples(index=False)]))
        parts.append(f'<p class="muted">Total over jobs: {num(rt["wall_s"].sum())} s.</p>')
    return parts


def extensions_section(ext: pd.DataFrame) -> str:
    """The extensions' eval metrics at each run's last evaluation
    (:func:`tdmpc2core.report.analysis.extension_table`), one table per run, folded."""
    parts = []
    for run, g in ext.groupby("run", sort=False):
        rows = [[esc(r.task), num(r.step, 0), esc(r.metric), _mean_sd(r.mean, r.sd, 4),
                 "" if pd.isna(r.min) else f"{num(r.min, 4)} – {num(r.max, 4)}", num(r.n_seeds, 0)]
                for r in g.itertuples(index=False)]
        parts.append(f"<details><summary>{esc(run)}: {g['metric'].nunique()} metrics, {g['task'].nunique()} "
                     f"task(s)</summary>" + html_table(["Task", "Step", "Metric", "Mean ± sd", "Min – max", "Seeds"],
                                                        rows) + "</details>")
    return "".join(parts)


def _extensions(ctx: Mapping) -> list[str]:
    """The extensions' eval metrics (when a run had extensions: ``ctx['extensions']``)."""
    ext = ctx.get("extensions")
    if ext is None or ext.empty:
        return []
    return ['<h2 id="extensions">Extension metrics</h2>',
            "<p>What the runs' extensions (<code>extensions:</code> in the configuration; "
            "<code>tdmpc2core/extensions.py</code>) computed at each run's last evaluation: mean ± population sd "
            "and lowest – highest over seeds. <code>grad_norms/...</code>: gradient norms the update saw (last, "
            "moving average, maximum; <code>clipped</code>: the fraction of updates whose norm exceeded the clip) "
            "and parameter norms per network; <code>model_error/...</code>: the world model's open-loop error "
            "h steps ahead on the evaluation's own episodes (latent mean squared error against the encoded "
            "observations, absolute reward error).</p>", extensions_section(ext)]


def _provenance(ctx: Mapping) -> list[str]:
    """Git commit, package versions, the runs' provenance, the platform and the configuration."""
    parts = []
    parts.append('<h2 id="provenance">Provenance</h2>')
    git = ctx.get("git") or {}
    commit = git.get("commit") or "unknown (not a git work tree)"
    dirty = git.get("dirty")
    parts.append(f"<p>Git commit: <code>{esc(commit)}</code>"
                 + ("" if dirty is None else (" <b>with uncommitted changes (dirty)</b>" if dirty else " (clean)"))
                 + "</p>")
    parts.append("<h3>Package versions (report environment)</h3>" + kv_table(ctx.get("packages") or {},
                                                                            "Package", "Version", "not installed"))
    if ctx.get("run_packages"):
        parts.append("<h3>Package versions recorded by the training runs</h3>"
                     + kv_table(ctx["run_packages"], "Package", "Version", "not installed"))
    if ctx.get("run_provenance"):
        parts.append("<h3>Provenance recorded by the training runs (first run)</h3>"
                     + kv_table(ctx["run_provenance"]))
    parts.append("<h3>Platform (report machine)</h3>" + kv_table(ctx.get("platform") or {}))
    parts.append('<h2 id="config">Configuration used</h2>')
    parts.append(f"<pre>{esc(ctx.get('config_yaml', ''))}</pre>")
    lp = ctx.get("learning_parity")
    if lp:  # a report input only (config key learning_parity): not in the resolved file the other stages read
        parts.append(f"<p>learning_parity: <code>{esc(lp.get('path'))}</code> (the report's input only).</p>")
    rp = ctx.get("reproduction")
    if rp:  # likewise (config key reproduction)
        parts.append(f"<p>reproduction: <code>{esc(rp.get('path'))}</code> (the report's input only).</p>")
    parts.append("</body></html>")
    return parts


def render_report(ctx: Mapping) -> str:
    """The report's HTML from plain data.

    ``ctx`` keys: ``protocol``, ``label``, ``is_paper`` (bool), ``generated`` (str),
    ``final`` / ``single`` / ``aggregate`` (DataFrames of :mod:`tdmpc2core.report.analysis`),
    ``episodic`` (names of the episodic tasks) and ``episode_lengths`` (DataFrame of
    :func:`tdmpc2core.report.analysis.episode_length_table`; shown when ``episodic`` is not empty),
    ``expected_text`` (task -> text), ``figures`` (list of (task, subtitle, [(alt, kind,
    data)])), ``overview`` ((kind, data) or None), ``runtimes`` (DataFrame with columns
    job, wall_s, max_rss_mb, cpu_time_s), ``runs`` (DataFrame: one row per attempt of each training
    job, the columns of ``tdmpc2core.stages.report.RUN_COLUMNS``),
    ``packages`` / ``run_packages`` (dicts), ``git`` (dict), ``platform`` (dict),
    ``config_yaml`` (str), ``simulator`` ((sentence naming the simulators used, sentence on
    the comparison) of :func:`tdmpc2core.analysis.simulator_text`), ``notes`` (list of str), ``datasets`` (DataFrame of
    :func:`dataset_stats`, optional) and ``datasets_figure`` ((kind, data) or None), and
    ``multitask`` (optional dict: ``scaling`` and ``tasks`` DataFrames of
    :mod:`tdmpc2core.report.scaling`, ``ranges`` (task -> (low, high) or None), ``settings`` (the
    resolved multitask block) and ``figure`` ((kind, data) or None)), and ``official``
    (optional DataFrame of :func:`tdmpc2core.report.official.official_table`: the "Released
    checkpoints, our planner" section), ``learning_parity`` (optional dict of
    :func:`tdmpc2core.report.learning_parity.report_context`: the "Learning beside the official
    code" section), ``reproduction`` (optional dict of
    :func:`tdmpc2core.report.reproduction.report_context`: the "The paper's numbers, reproduced"
    section), and ``extensions`` (optional DataFrame of
    :func:`tdmpc2core.report.analysis.extension_table`: the "Extension metrics" section, shown
    when not empty), and ``videos`` (optional list of (task, caption, MP4 bytes or None, why
    none) of :func:`videos_section`: the "Evaluation videos" section, after the figures).
    """
    parts = []
    for section in (_head, _results, _figures, _videos, _datasets, _multitask, _official, _learning_parity,
                    _reproduction, _extensions, _runtime, _provenance):
        parts += section(ctx)
    return "\n".join(parts) + "\n"


__all__ = ["render_report", "dataset_stats", "multitask_section", "html_table", "embed_image", "esc", "num", "CSS",
           "final_section", "episode_length_section", "runtime_section", "fmt_value", "matmul_precision_words",
           "single_task_section", "aggregate_section", "extensions_section", "embed_video", "videos_section",
           "learning_parity_section", "reproduction_section"]
