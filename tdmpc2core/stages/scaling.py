"""``tdmpc2 scaling``: the multi-task scaling table, the per-task table and their figure.

    tdmpc2 scaling --config results/resolved_config.yaml --multi results/multi \\
        --runs results/single --outdir results/tables --figure results/figures/multitask_scaling.png

Reads ``{multi}/{pool}/size{model_size}/eval.parquet`` and ``run.json`` for every pool and
model size of the resolved configuration's ``multitask`` block, and the single-task runs'
``eval.parquet`` of the pooled tasks. Writes (CSV and Markdown each):

* ``multitask_scaling``: per pool and model size, the final normalized score (mean, sd, min,
  max over seeds of the mean over tasks) and parameters;
* ``multitask_tasks``: per pool, task and model size, the final multi-task return beside the
  task's single-task return, and the expected-range check;

and the figure (score vs parameters; per-task returns beside the single-task ones).
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="resolved configuration (results/resolved_config.yaml)")
    p.add_argument("--multi", default="results/multi", help="folder of multi-task runs")
    p.add_argument("--runs", default="results/single", help="folder of single-task runs")
    p.add_argument("--outdir", default="results/tables", help="where the tables go")
    p.add_argument("--figure", required=True, help="the scaling figure (.png or .svg)")


CAVEAT = ("The pools are our own single-task runs' replay, not the paper's mt30 / mt80 datasets "
          "(nicklashansen/tdmpc2 on Hugging Face), so these scores are not the paper's numbers: they "
          "check that the multi-task path works and how it scales on our data.")


OFFICIAL_CAVEAT = ("Pools {pools} are the paper's own multi-task data (the official {sets} release, converted by "
                   "`tdmpc2 convert-official-data`); their models are evaluated on the tasks we have an "
                   "environment for, each listed in the per-task table, and the score is the mean over those.")


def _caveat(official: dict, pools) -> str:
    ours = [p for p in pools if p not in official]
    off = [p for p in pools if p in official]
    parts = []
    if ours:
        parts.append(CAVEAT if not off else f"Pools {ours}: " + CAVEAT)
    if off:
        parts.append(OFFICIAL_CAVEAT.format(pools=off, sets=sorted({official[p]["task_set"] for p in off})))
    return " ".join(parts)


def _published_text(df) -> str:
    have = df[df["published_score"].notna()]
    if len(have):
        return ("Published: the paper's multi-task normalized score of the same task set and size "
                "(tdmpc2core/resources/published_multitask_scores.csv, each with its source).")
    return ("Published: the paper's multi-task normalized scores per size are not carried: no readable source "
            "of the values could be verified (tdmpc2core/resources/README.md), so they are left out.")


def _scaling_md(df, label, ranges_text, caveat=CAVEAT) -> str:
    from ..report import analysis as A

    view = df.copy()
    view["score"] = [A.mean_sd_text(m, s) for m, s in zip(view["score_mean"], view["score_sd"])]
    view["score_range"] = ["" if m != m else f"{lo:.1f} – {hi:.1f}"
                           for m, lo, hi in zip(view["score_mean"], view["score_min"], view["score_max"])]
    view["published"] = ["n/a" if p != p else f"{p:.1f}" for p in view["published_score"]]
    cols = ["pool", "model_size", "params", "updates", "n_tasks", "n_seeds", "score", "score_range", "published",
            "note"]
    heads = ["Pool", "Model size", "Parameters", "Updates", "Tasks", "Seeds", "Normalized score: mean ± sd",
             "Min – max over seeds", "Published", "Note"]
    return (f"# Multi-task scaling\n\n{label}\n\n{caveat}\n\n{_published_text(df)}\n\nNormalized score of a task = 100 (return - low) / "
            f"(high - low) for its declared return range ({ranges_text}); a seed's score is the mean over tasks "
            "at its final evaluation; over seeds: mean ± population sd, min – max.\n\n"
            + A.markdown_table(view, cols, heads))


def _tasks_md(df, label, caveat=CAVEAT) -> str:
    from ..report import analysis as A

    view = df.copy()
    view["multi"] = [A.mean_sd_text(m, s) for m, s in zip(view["multi_mean"], view["multi_sd"])]
    view["single"] = [A.mean_sd_text(m, s) for m, s in zip(view["single_mean"], view["single_sd"])]
    view["result"] = [r.upper() if r in ("pass", "fail") else r for r in view["result"]]
    cols = ["pool", "task", "model_size", "multi", "seed_returns", "score_mean", "single", "single_agent_steps",
            "expected", "result", "note"]
    heads = ["Pool", "Task", "Model size", "Multi-task return: mean ± sd", "Per seed", "Normalized score",
             "Single-task return: mean ± sd", "Single-task agent steps", "Expected (multi-task)", "Result", "Note"]
    return (f"# Multi-task returns per task beside the single-task runs\n\n{label}\n\n{caveat}\n\n"
            "Final evaluations. Multi-task: one model per pool and size, evaluated on each task in its own "
            "environment. Single-task: the final evaluation of the runs whose replay the pool holds.\n\n"
            + A.markdown_table(view, cols, heads))


def ranges_text(ranges: dict) -> str:
    return "; ".join(f"{t}: [{lo:g}, {hi:g}]" if lo == lo else f"{t}: none"
                     for t, (lo, hi) in ranges.items())


def run(args) -> int:
    import pandas as pd

    from ..io import atomic
    from ..report import analysis as A
    from ..report import scaling as S

    cfg = A.load_run_config(args.config)
    mt = cfg.get("multitask")
    if not mt:
        print(f"tdmpc2 scaling: {args.config} has no multitask block", file=sys.stderr)
        return 2
    pools = {p: list(cfg["pools"][p]) for p in mt["pools"]}
    sizes = [int(s) for s in mt["model_sizes"]]
    label = f"Protocol: **{cfg.get('protocol', '?')}**. {cfg.get('label', '')}".strip()
    paths, params, missing = [], {}, []
    for pool in pools:
        for size in sizes:
            d = S.run_dir(args.multi, pool, size)
            ev, rj = os.path.join(d, "eval.parquet"), os.path.join(d, "run.json")
            if os.path.exists(ev):
                paths.append(ev)
            else:
                missing.append(ev)
            if os.path.exists(rj):
                with open(rj) as fh:
                    params[(pool, size)] = int(json.load(fh).get("params", 0)) or None
    for p in missing:
        print(f"tdmpc2 scaling: warning: {p} does not exist; that run counts as missing", file=sys.stderr)
    evals = S.read_multi_evals(paths)
    scores = S.task_scores(evals)
    final = S.final_task_scores(scores)
    rng = (evals.groupby(["pool", "model_size", "task"], sort=False)[["return_low", "return_high"]].first()
           .reset_index() if not evals.empty else
           pd.DataFrame(columns=["pool", "model_size", "task", "return_low", "return_high"]))
    single_paths = [os.path.join(A.run_dir(args.runs, t, s), "eval.parquet")
                    for t in {t for ts in pools.values() for t in ts} for s in cfg["seeds"]]
    single_paths = [p for p in single_paths if os.path.exists(p)]
    ss = A.seed_scores(A.read_evals(single_paths))
    single_final = (ss.sort_values("eval_index").groupby(["task", "seed"]).tail(1) if not ss.empty else ss)

    official = cfg.get("official_pools") or {}
    pub = S.published_multitask_scores()
    published = {(pool, int(r.model_size)): float(r.normalized_score) for pool in pools if pool in official
                 for r in pub.itertuples() if r.task_set == official[pool]["task_set"]}
    scaling = S.scaling_table(final, params, list(pools), sizes, published)
    caveat = _caveat(official, list(pools))
    tasks = S.task_table(final, rng, single_final, pools, sizes, mt.get("expected") or {})
    declared = {t: (float(r.return_low), float(r.return_high)) for r in rng.itertuples() for t in [r.task]}
    out = args.outdir
    atomic.write_text(os.path.join(out, "multitask_scaling.csv"), scaling.to_csv(index=False))
    atomic.write_text(os.path.join(out, "multitask_scaling.md"), _scaling_md(scaling, label, ranges_text(declared), caveat))
    atomic.write_text(os.path.join(out, "multitask_tasks.csv"), tasks.to_csv(index=False))
    atomic.write_text(os.path.join(out, "multitask_tasks.md"), _tasks_md(tasks, label, caveat))
    S.plot_scaling(scaling, tasks, args.figure)
    print(f"tdmpc2 scaling: {len(pools)} pool(s) x {len(sizes)} model size(s); expected-range check: "
          f"{int((tasks['result'] == 'pass').sum())} pass, {int((tasks['result'] == 'fail').sum())} fail; "
          f"tables in {out}, figure {args.figure}")
    return 0
