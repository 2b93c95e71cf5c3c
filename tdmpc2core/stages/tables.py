"""``tdmpc2 tables``: the paper's single-task tables, aggregate scores and the final-score check.

Reads ``{runs}/{task}/seed{seed}/eval.parquet`` for every task and seed of the resolved
configuration and writes, under ``--outdir`` (CSV and Markdown each):

* ``single_task``: per task, ours (mean, population sd, min, max over seeds) at the table
  agent steps beside the published TD-MPC2 mean and sd (inside / outside mean +- 1 sd)
  and the published TD-MPC, SAC and DreamerV3 means and sds where published: returns, or
  success rates in percent for the tasks with a success flag (Meta-World, MyoSuite);
* ``aggregate``: per domain (DMControl, Meta-World, MyoSuite), mean and IQM of the normalized
  score (DMControl return / 10; Meta-World and MyoSuite success rate in percent) over the
  tasks with a published curve, with stratified-bootstrap 95% CIs (rliable), and the
  published TD-MPC2 mean over the same tasks;
* ``final_scores``: each task's final evaluation against its ``expected`` range (with
  the final mean episode length);
* ``episode_lengths``: for the episodic tasks (``agent: {episodic: true}``), every
  evaluation's return beside its episode length, over seeds (no rows when no task is
  episodic).
"""
from __future__ import annotations

import argparse
import os
import sys

DEFAULT_STEPS = (50_000, 100_000, 500_000, 1_000_000, 2_000_000)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True,
                        help="resolved configuration (results/resolved_config.yaml)")
    parser.add_argument("--runs", default="results/single",
                        help="folder of single-task runs: RUNS/TASK/seedSEED/eval.parquet")
    parser.add_argument("--outdir", default="results/tables", help="where the tables go")
    parser.add_argument("--steps", type=int, nargs="+", default=list(DEFAULT_STEPS),
                        help="agent steps of the single-task table (default: %(default)s; each "
                             "task's last published step is added)")
    parser.add_argument("--bootstrap-reps", type=int, default=None,
                        help="bootstrap replications (default: the config's bootstrap_reps, else 2000)")
    parser.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the bootstrap resampling of the CIs")


def _single_task_md(df, label: str, simulator_note: str = "") -> str:
    from ..report import analysis as A

    import pandas as pd

    view = df.copy()
    view["ours"] = ["" if pd.isna(m) else f"{A.mean_sd_text(m, s)} (n={int(n)})"
                    for m, s, n in zip(view["mean"], view["sd"], view["n_seeds"])]
    view["ours_range"] = ["" if pd.isna(lo) else f"{lo:,.1f} – {hi:,.1f}"
                          for lo, hi in zip(view["min"], view["max"])]
    for m in ("tdmpc2", "tdmpc", "sac", "dreamerv3"):
        view[m] = [A.mean_sd_text(a, b) for a, b in zip(view[f"{m}_mean"], view[f"{m}_sd"])]
    if "score" not in view.columns:  # a table written before the success columns
        view["score"], view["success_any_mean"] = "return", float("nan")
    view["score_text"] = ["success rate (%)" if k == "success" else "return" for k in view["score"]]
    cols = ["task", "score_text", "agent_steps", "ours", "ours_range", "tdmpc2", "band", "tdmpc", "sac", "dreamerv3",
            "note"]
    heads = ["Task", "Score", "Agent steps", "Ours: mean ± sd", "Ours: min – max", "TD-MPC2 (published)",
             "Band", "TD-MPC", "SAC", "DreamerV3", "Note"]
    success = bool((view["score"] == "success").any())
    if success:  # Meta-World's maintainers' rule beside the official one
        view["any_text"] = ["" if pd.isna(v) else f"{v:,.1f}" for v in view["success_any_mean"]]
        cols.insert(5, "any_text")
        heads.insert(5, "Ours: success at any step (%)")
    return (f"# Single-task results beside the published curves\n\n{label}\n\n"
            "Scores at exactly the listed agent steps: the evaluation return, or for a task with a "
            "success flag (Meta-World, MyoSuite) the success rate in percent, an episode counting as a "
            "success when the flag is set at its last step (the official rule), beside the published "
            "success rates at the same agent steps. Ours: mean over seeds of each seed's mean "
            "evaluation score, ± the population sd over seeds, and the lowest – highest seed. "
            + ("The any-step success rate (an episode succeeds when any step does, Meta-World's own rule) "
               "is shown beside it and not compared. " if success else "")
            + "Published: mean ± population sd over the paper's seeds. Band: our mean inside or "
            "outside the published TD-MPC2 mean ± 1 sd (bounds included). "
            + (simulator_note or "Playground's physics differ from dm_control's: the comparison is approximate.")
            + "\n\n"
            + A.markdown_table(view, cols, heads))


def _aggregate_md(df, label: str) -> str:
    from ..report import analysis as A

    view = df.copy()
    def ci(a, b, c):  # no interval when too few scores were bootstrapped (the note says so)
        return "" if a != a else (f"{a:.1f}" if b != b else f"{a:.1f} [{b:.1f}, {c:.1f}]")

    view["mean_ci"] = [ci(a, b, c) for a, b, c in
                       zip(view["mean_score"], view["mean_score_ci_low"], view["mean_score_ci_high"])]
    view["iqm_ci"] = [ci(a, b, c) for a, b, c in
                      zip(view["iqm_score"], view["iqm_score_ci_low"], view["iqm_score_ci_high"])]
    from ..report import published as P

    view["domain_text"] = [P.DOMAIN_LABELS.get(d, d) for d in view["domain"]]
    cols = ["domain_text", "score", "step", "n_tasks", "n_seeds", "mean_ci", "iqm_ci", "published_mean_score",
            "mean_return", "published_mean_return", "note"]
    heads = ["Domain", "Score", "Agent steps", "Tasks", "Seeds", "Mean score [95% CI]", "IQM score [95% CI]",
             "TD-MPC2 published mean score", "Ours: mean return", "TD-MPC2 published mean return", "Note"]
    method = next((m for m in df["method"] if isinstance(m, str) and m), "")
    return (f"# Aggregate scores over the tasks with a published curve\n\n{label}\n\n"
            "Per domain, as the paper shows them. Normalized score = DMControl return / 10 (0–100); "
            "Meta-World and MyoSuite: the success rate in percent (the official rule: success at the "
            "episode's last step; their return columns are empty). Mean: mean over tasks of the mean "
            "over seeds; IQM: interquartile mean over all seed x task scores. 95% confidence "
            + (f"intervals: {method} (seeds resampled within each task), given from at least "
                 f"{A.MIN_CI_SEEDS} seeds and {A.MIN_CI_SCORES} scores. " if method else
                 "intervals: none (too few scores for a bootstrap; the note says how many). ")
            + "Published: the TD-MPC2 mean over the same tasks (the paper reports raw returns "
            "averaged over tasks: the return columns). `final`: each task's last evaluation.\n\n"
            + A.markdown_table(view, cols, heads))


def _final_md(df, tasks, label: str) -> str:
    from ..report import analysis as A

    view = df.copy()
    view["expected"] = [A.expected_range_text(tasks[t].get("expected")) for t in view["task"]]
    view["result"] = [r.upper() if r in ("pass", "fail") else r for r in view["result"]]
    cols = ["task", "final_agent_steps", "mean", "seed_returns", "expected", "result", "note"]
    heads = ["Task", "Final agent steps", "Mean over seeds", "Per seed", "Expected", "Result", "Note"]
    episodic = {t for t, s in tasks.items() if A.is_episodic(s)}
    if episodic:  # episode lengths beside the returns of the episodic tasks
        view["length_text"] = [f"{m:.1f} ({sl})" if t in episodic and m == m else ""
                               for t, m, sl in zip(view["task"], view["mean_length"], view["seed_lengths"])]
        cols.insert(4, "length_text")
        heads.insert(4, "Episode length (episodic): mean (per seed)")
    return (f"# Final-score check\n\n{label}\n\n"
            "Each task's last evaluation (mean return over its episodes per seed) against the "
            "task's expected range from the configuration.\n\n" + A.markdown_table(view, cols, heads))


def _episode_lengths_md(df, label: str) -> str:
    from ..report import analysis as A

    if df.empty:
        return (f"# Episode lengths of the episodic tasks\n\n{label}\n\n"
                "No task of this protocol is episodic (`agent: {episodic: true}`); every evaluation "
                "episode runs the whole time limit T.\n")
    view = df.copy()
    view["returns"] = [A.mean_sd_text(m, s) for m, s in zip(view["return_mean"], view["return_sd"])]
    view["lengths"] = [A.mean_sd_text(m, s) for m, s in zip(view["length_mean"], view["length_sd"])]
    view["length_range"] = [f"{lo:,.1f} – {hi:,.1f}" for lo, hi in zip(view["length_min"], view["length_max"])]
    cols = ["task", "agent_steps", "n_seeds", "returns", "lengths", "length_range", "seed_lengths"]
    heads = ["Task", "Agent steps", "Seeds", "Return: mean ± sd", "Episode length: mean ± sd",
             "Episode length: min – max", "Per seed (seed: length)"]
    return (f"# Episode lengths of the episodic tasks\n\n{label}\n\n"
            "Each evaluation's return beside its episode length in agent steps (a seed's value: the "
            "mean over that evaluation's episodes; then mean ± population sd and lowest – highest over "
            "seeds). An episode that terminates is shorter than the time limit T.\n\n"
            + A.markdown_table(view, cols, heads))


def run(args) -> int:
    from ..envs import report_facts, suite_of
    from ..io import atomic
    from ..report import analysis as A

    cfg = A.load_run_config(args.config)
    tasks = cfg["tasks"]
    seeds = [int(s) for s in cfg["seeds"]]
    label = f"Protocol: **{cfg.get('protocol', '?')}**. {cfg.get('label', '')}".strip()
    paths, missing = [], []
    for task in tasks:
        for seed in seeds:
            p = os.path.join(A.run_dir(args.runs, task, seed), "eval.parquet")
            (paths if os.path.exists(p) else missing).append(p)
    for p in missing:
        print(f"tdmpc2 tables: warning: {p} does not exist; that seed counts as missing", file=sys.stderr)
    scores = A.seed_scores(A.read_evals(paths))
    reps = args.bootstrap_reps or int(cfg.get("bootstrap_reps", 2000))

    single = A.single_task_table(scores, tasks, steps=args.steps)
    agg = A.aggregate_table(scores, tasks, steps=args.steps, reps=reps, seed=args.bootstrap_seed)
    final = A.final_score_check(scores, tasks, seeds)
    lengths = A.episode_length_table(scores, tasks)

    out = args.outdir
    atomic.write_text(os.path.join(out, "single_task.csv"), single.to_csv(index=False))
    used, note = A.simulator_text(tasks, suite_of, suites=report_facts())
    atomic.write_text(os.path.join(out, "single_task.md"), _single_task_md(single, f"{label}\n\n{used}", note))
    atomic.write_text(os.path.join(out, "aggregate.csv"), agg.to_csv(index=False))
    atomic.write_text(os.path.join(out, "aggregate.md"), _aggregate_md(agg, label))
    atomic.write_text(os.path.join(out, "final_scores.csv"), final.to_csv(index=False))
    atomic.write_text(os.path.join(out, "final_scores.md"), _final_md(final, tasks, label))
    atomic.write_text(os.path.join(out, "episode_lengths.csv"), lengths.to_csv(index=False))
    atomic.write_text(os.path.join(out, "episode_lengths.md"), _episode_lengths_md(lengths, label))
    n_fail = int((final["result"] == "fail").sum())
    print(f"tdmpc2 tables: {len(tasks)} tasks, {len(seeds)} seeds; final-score check: "
          f"{int((final['result'] == 'pass').sum())} pass, {n_fail} fail; tables in {out}")
    return 0
