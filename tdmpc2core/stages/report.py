"""``tdmpc2 report``: render ``results/report.html`` (self-contained) from the pipeline's files.

Reads the resolved configuration, the tables (``tdmpc2 tables``), the figures
(``tdmpc2 figures``), every run's ``run.json`` and the Snakemake ``benchmark:`` files, and
writes one HTML file with the figures embedded::

    tdmpc2 report --config results/resolved_config.yaml --runs results/single \\
        --tables results/tables --figures results/figures --benchmarks benchmarks/runs \\
        --out results/report.html
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="resolved configuration (results/resolved_config.yaml)")
    parser.add_argument("--runs", default="results/single", help="folder of single-task runs")
    parser.add_argument("--multi-runs", nargs="*", default=[],
                        help="run.json files of the multi-task runs (their runtimes are shown)")
    parser.add_argument("--official-tables", nargs="*", default=[],
                        help="official_checkpoints.csv of `tdmpc2 official-table` (the released-checkpoints section)")
    parser.add_argument("--tables", default="results/tables", help="folder written by `tdmpc2 tables`")
    parser.add_argument("--figures", default="results/figures", help="folder written by `tdmpc2 figures`")
    parser.add_argument("--benchmarks", default="benchmarks/runs", help="Snakemake benchmark files (optional)")
    parser.add_argument("--datasets", nargs="?", default=None, const=None,  # no value: no dataset (pixel tasks only)
                        help="summary of the episode datasets (results/datasets/summary.parquet; optional)")
    parser.add_argument("--learning-parity", nargs="?", default=None, const=None,  # no value: no section
                        help="results of benchmarks/learning_parity.py (Parquet; the \"Learning beside the official "
                             "code\" section; optional)")
    parser.add_argument("--reproduction", nargs="?", default=None, const=None,  # no value: no section
                        help="results of benchmarks/reproduction.py (Parquet; the \"The paper's numbers, reproduced\" "
                             "section; optional)")
    parser.add_argument("--repo", default=".", help="git work tree whose commit is reported")
    parser.add_argument("--no-jax", action="store_true", help="do not import JAX for the report machine's platform")
    parser.add_argument("--out", default="results/report.html", help="the HTML file to write")


_RUN_KEYS = {
    "backend": ("jax_backend", "default_backend", "platform.backend", "provenance.backend"),
    "device_kind": ("device_kind",),
    "matmul_precision": ("matmul_precision", "jax_default_matmul_precision", "default_matmul_precision"),
    "compile_time_s": ("compile_seconds_upper_bound", "compile_seconds", "compile_time_s", "compile_time"),
    "wall_time_s": ("wall_seconds", "total_wall_time_s", "wall_time_s", "wall_time"),
}
# run.json keys shown under "Provenance recorded by the training runs" (first run)
_PROVENANCE_WORDS = ("provenance", "platform", "git", "commit", "precision", "device", "compile", "wall",
                     "jax_backend", "default_backend", "hostname", "python")


RUN_COLUMNS = ["job", "run", "seeds", "attempt", "steps", "outcome", "started_utc", "wall_time_s", "compile_time_s",
               "compile_programs", "backend", "device_kind", "matmul_precision"]


def _compile(per_program) -> tuple:
    """(total seconds, "chunk 57.5, eval 18.8, init 14.2") of a {program: seconds} dict, or
    (None, "") when nothing was recorded."""
    if not isinstance(per_program, dict) or not per_program:
        return None, ""
    secs = {k: float(v) for k, v in per_program.items() if isinstance(v, (int, float))}
    order = sorted(secs, key=lambda k: (-secs[k], k))
    return sum(secs.values()), ", ".join(f"{k} {secs[k]:.1f}" for k in order)


def _attempt_rows(base: dict, flat: dict) -> list[dict]:
    """One row per attempt (session) of a training job, from its run.json: ``attempts`` when
    the job recorded them (tdmpc2core.io.attempts), else one row for the session that wrote
    the run.json (and, when it had resumed, a note that earlier attempts were not recorded)."""
    from ..report import analysis as A

    row = dict(base)
    for col, names in _RUN_KEYS.items():
        v = A.find_value(flat, *names)
        row[col] = "not recorded" if v is None and col in ("backend", "device_kind", "matmul_precision") else v
    # compile seconds per program of the session that wrote the run.json (tdmpc2core.run.compiled)
    per_program = {k.split(".", 1)[1]: v for k, v in flat.items() if k.startswith("compile_seconds.")}
    total, text = _compile(per_program)
    if total is not None:
        row["compile_time_s"], row["compile_programs"] = total, text
    else:
        row["compile_programs"] = "upper bound (first chunk)" if row["compile_time_s"] is not None else ""
    attempts = A.find_value(flat, "attempts")
    if isinstance(attempts, list) and attempts:
        rows = []
        for i, a in enumerate(attempts):
            a = a if isinstance(a, dict) else {}
            unit = a.get("unit") or ""
            lo, hi = a.get("start_step"), a.get("end_step")
            rows.append({**row, "attempt": f"{a.get('attempt', i + 1)} of {len(attempts)}",
                         "steps": ("" if lo is None and hi is None else
                                   f"{_int(lo) if lo is not None else '?'} → {_int(hi) if hi is not None else '?'} "
                                   f"{unit}".strip()),
                         "outcome": a.get("outcome") or "", "started_utc": a.get("started_utc") or "",
                         "wall_time_s": a.get("wall_seconds"),
                         # each session's own compile seconds (older records: the last session's only)
                         **(dict(zip(("compile_time_s", "compile_programs"), _compile(a.get("compile_seconds"))))
                            if a.get("compile_seconds") else
                            {"compile_time_s": row["compile_time_s"] if i == len(attempts) - 1 else None,
                             "compile_programs": row["compile_programs"] if i == len(attempts) - 1 else ""})})
        return rows
    resumed = A.find_value(flat, "resumed_from_agent_steps", "resumed_from_updates")
    return [{**row, "attempt": "last (earlier attempts not recorded)" if resumed else "1 of 1",
             "steps": f"{_int(resumed)} → end" if resumed else "", "outcome": "completed", "started_utc": ""}]


def _int(x) -> str:
    try:
        return f"{int(x):,}"
    except (TypeError, ValueError):
        return str(x)


def _run_rows(cfg, runs_dir, multi_runs=()):
    """One row per attempt of each training job: a single-task job's seeds share one process,
    so their run.json files record the same times (the first is read); then the multi-task
    runs of ``multi_runs``. Columns :data:`RUN_COLUMNS`."""
    import pandas as pd

    from ..report import analysis as A

    rows, first, missing, jobs = [], None, [], {}
    for task in cfg["tasks"]:
        for seed in cfg["seeds"]:
            path = os.path.join(A.run_dir(runs_dir, task, seed), "run.json")
            flat = A.read_run_info(path)
            if not flat:
                missing.append(path)
                continue
            first = first or flat
            in_job = A.find_value(flat, "seeds_in_job")
            key = (task, tuple(in_job) if isinstance(in_job, (list, tuple)) else (seed,))
            if key in jobs:
                continue
            jobs[key] = True
            rows += _attempt_rows({"job": "train-single", "run": task,
                                   "seeds": ", ".join(str(s) for s in key[1])}, flat)
    for path in multi_runs:
        flat = A.read_run_info(path)
        if not flat:
            missing.append(path)
            continue
        seeds = A.find_value(flat, "seeds") or []
        rows += _attempt_rows({"job": "train-multi",
                               "run": f"pool {A.find_value(flat, 'pool')}, model size {A.find_value(flat, 'model_size')}",
                               "seeds": ", ".join(str(s) for s in seeds)}, flat)
    return pd.DataFrame(rows, columns=RUN_COLUMNS), first or {}, missing


def _run_packages(flat: dict) -> dict:
    out = {}
    for k, v in flat.items():
        parts = k.split(".")
        if any(p in ("packages", "versions", "package_versions") for p in parts[:-1]):
            out[parts[-1]] = v
    return out


def _read_image(path):
    kind = "svg" if path.endswith(".svg") else "png"
    with open(path, "rb") as fh:
        return kind, fh.read()


def _multitask_context(cfg, args) -> dict:
    """The multi-task section's data: the tables of ``tdmpc2 scaling`` (required when the
    configuration has a multitask block), the scaling figure, the declared return ranges."""
    import pandas as pd

    tables = {}
    for name in ("multitask_scaling", "multitask_tasks"):
        path = os.path.join(args.tables, f"{name}.csv")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} does not exist: run `tdmpc2 scaling` first (the configuration has a "
                                    "multitask block)")
        df = pd.read_csv(path, keep_default_na=True)
        for c in df.columns:
            if df[c].dtype == object:
                df[c] = df[c].fillna("")
        tables[name] = df
    figure = None
    for ext in ("png", "svg"):
        p = os.path.join(args.figures, f"multitask_scaling.{ext}")
        if os.path.exists(p):
            figure = _read_image(p)
            break
    mt = cfg["multitask"]
    ranges = {}
    for r in tables["multitask_tasks"].itertuples(index=False):
        lo, hi = pd.to_numeric(r.return_low, errors="coerce"), pd.to_numeric(r.return_high, errors="coerce")
        ranges.setdefault(r.task, None if (pd.isna(lo) or pd.isna(hi)) else (float(lo), float(hi)))
    return {"scaling": tables["multitask_scaling"], "tasks": tables["multitask_tasks"], "figure": figure,
            "ranges": ranges, "settings": mt}


def _simulator_text(tasks, suite_of, facts: dict, PV):
    """The report's simulator sentence and note: the suites' report facts (registry) and the
    installed versions of the packages they name."""
    from ..report import analysis as A

    versions = PV.package_versions(tuple(f["version_package"] for f in facts.values() if f["version_package"]))
    return A.simulator_text(tasks, suite_of, versions, suites=facts)


def _videos(cfg, runs_dir) -> list:
    """Each task's evaluation video for the report (:func:`tdmpc2core.report.html.videos_section`):
    (task, caption, MP4 bytes, None) from the first seed folder (in the configured seed order)
    holding ``video.mp4`` and its run.json's ``video`` record; a task whose runs recorded why they
    have none (``video.file`` null: its suite has no renderer) gets (task, "", None, reason).
    [] when no run of any task recorded a video (``video: off``)."""
    from ..report import analysis as A

    out, any_record = [], False
    for task in cfg["tasks"]:
        entry = None
        for seed in cfg["seeds"]:
            d = A.run_dir(runs_dir, task, seed)
            try:
                with open(os.path.join(d, "run.json")) as fh:
                    rec = json.load(fh).get("video")
            except (OSError, ValueError):
                rec = None
            if rec is None:
                continue
            any_record = True
            if rec.get("file") and os.path.exists(os.path.join(d, rec["file"])):
                with open(os.path.join(d, rec["file"]), "rb") as fh:
                    data = fh.read()
                entry = (task, _caption(rec, rec.get("seed", seed)), data, None)
                break
            if entry is None and rec.get("file") is None:
                entry = (task, "", None, rec.get("reason") or "not recorded")
        out.append(entry or (task, "", None, "no run of this task recorded a video"))
    return out if any_record else []


def _multi_videos(multi_runs) -> list:
    """The multi-task runs' videos (their run.json's ``videos``: task -> record, the file relative
    to the run's folder) as :func:`_videos` entries, labelled ``multi-task {pool} size {N}: {task}``."""
    out = []
    for path in multi_runs:
        try:
            with open(path) as fh:
                run = json.load(fh)
        except (OSError, ValueError):
            continue
        label = f"multi-task {run.get('pool', '?')} size {run.get('model_size', '?')}"
        for task, rec in (run.get("videos") or {}).items():
            f = os.path.join(os.path.dirname(path), rec["file"]) if rec.get("file") else None
            if f is None or not os.path.exists(f):
                out.append((f"{label}: {task}", "", None, rec.get("reason") or "not recorded"))
                continue
            with open(f, "rb") as fh:
                out.append((f"{label}: {task}", _caption(rec, rec.get("seed")), fh.read(), None))
    return out


def _caption(rec: dict, seed) -> str:
    """A video's caption from its run.json record."""
    return (f"seed {seed}, return {float(rec['episode_return']):.1f} over {rec['length']} agent steps; "
            f"{rec['frames']} frames at {float(rec['fps']):g} fps (every {rec['stride']} agent step(s)); "
            f"{rec.get('renderer', '')}")


def _learning_parity(args):
    """The learning-parity section's data (tdmpc2core.report.learning_parity), None without
    ``--learning-parity``."""
    path = getattr(args, "learning_parity", None)
    if not path:
        return None
    from ..report import learning_parity as LP

    return LP.report_context(path)


def _reproduction(args):
    """The reproduction section's data (tdmpc2core.report.reproduction), None without
    ``--reproduction``."""
    path = getattr(args, "reproduction", None)
    if not path:
        return None
    from ..report import reproduction as RP

    return RP.report_context(path)


def run(args) -> int:
    import pandas as pd

    from ..envs import report_facts, suite_of
    from ..io import atomic
    from ..report import analysis as A
    from ..io import provenance as PV
    from ..report import html as R

    cfg = A.load_run_config(args.config)
    with open(args.config) as fh:
        config_yaml = fh.read()
    tasks = cfg["tasks"]

    def table(name):
        path = os.path.join(args.tables, f"{name}.csv")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} does not exist: run `tdmpc2 tables` first")
        return pd.read_csv(path, keep_default_na=True)

    final, single, agg = table("final_scores"), table("single_task"), table("aggregate")
    episodic = [t for t, s in tasks.items() if A.is_episodic(s)]
    lengths = table("episode_lengths") if episodic else None
    for df in (final, single, agg) + ((lengths,) if lengths is not None else ()):
        for c in df.columns:
            if df[c].dtype == object:
                df[c] = df[c].fillna("")

    figures = []
    for task, settings in tasks.items():
        images = []
        for suffix, alt in (("eval", "evaluation score (return, or success rate for a success task)"),
                           ("train", "training curves")):
            for ext in ("png", "svg"):
                p = os.path.join(args.figures, f"{task}_{suffix}.{ext}")
                if os.path.exists(p):
                    images.append((f"{task}: {alt}",) + _read_image(p))
                    break
        sub = settings.get("env_id", "")
        if settings.get("published"):
            sub += f" · published: {settings['published']}"
        figures.append((task, sub, images))
    overview = None
    for ext in ("png", "svg"):
        p = os.path.join(args.figures, f"overview.{ext}")
        if os.path.exists(p):
            overview = _read_image(p)
            break

    runs, first, missing = _run_rows(cfg, args.runs, args.multi_runs or ())
    bench = A.read_benchmarks(args.benchmarks).rename(
        columns={"s": "wall_s", "max_rss": "max_rss_mb", "cpu_time": "cpu_time_s"})
    notes = []
    if missing:
        notes.append(f"{len(missing)} run.json file(s) missing (incomplete runs): " + ", ".join(missing[:5])
                     + (" ..." if len(missing) > 5 else ""))
    run_prov = {k: v for k, v in first.items()
                if any(w in k.lower() for w in _PROVENANCE_WORDS)
                and not k.startswith(("agent", "config.", "spec.", "provenance.packages."))}
    datasets, datasets_figure = None, None
    if args.datasets:
        datasets = R.dataset_stats(pd.read_parquet(args.datasets))
        p = os.path.join(args.figures, "datasets.png")
        if os.path.exists(p):
            datasets_figure = _read_image(p)
    multitask = None
    if cfg.get("multitask"):
        multitask = _multitask_context(cfg, args)
    official = None
    if args.official_tables:
        official = pd.concat([pd.read_csv(p) for p in args.official_tables], ignore_index=True)
    # the extensions' eval metrics: the single-task runs' eval.parquet, then the multi-task runs'
    ext_files = [(f"single-task {task}", [os.path.join(A.run_dir(args.runs, task, seed), "eval.parquet")
                                          for seed in cfg["seeds"]]) for task in tasks]
    ext_files += [(f"multi-task {os.path.dirname(p)}", [os.path.join(os.path.dirname(p), "eval.parquet")])
                  for p in args.multi_runs or ()]
    ctx = {
        "protocol": cfg.get("protocol", "?"),
        "label": cfg.get("label", ""),
        "is_paper": cfg.get("protocol") == "paper",
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "final": final, "single": single, "aggregate": agg,
        "episodic": episodic, "episode_lengths": lengths,
        "expected_text": {t: A.expected_range_text(s.get("expected")) for t, s in tasks.items()},
        "figures": figures, "overview": overview,
        "runs": runs, "runtimes": bench,
        "packages": PV.package_versions(), "run_packages": _run_packages(first),
        "run_provenance": run_prov,
        "git": PV.git_info(args.repo), "platform": PV.platform_info(include_jax=not args.no_jax),
        "config_yaml": config_yaml, "notes": notes,
        "simulator": _simulator_text(tasks, suite_of, report_facts(), PV),
        "datasets": datasets, "datasets_figure": datasets_figure,
        "multitask": multitask,
        "official": official, "learning_parity": _learning_parity(args), "reproduction": _reproduction(args),
        "extensions": A.extension_table(ext_files),
        "videos": _videos(cfg, args.runs) + _multi_videos(args.multi_runs or ()),
    }
    atomic.write_text(args.out, R.render_report(ctx))
    print(f"tdmpc2 report: {args.out} ({os.path.getsize(args.out) / 1e3:.0f} kB)")
    return 0
