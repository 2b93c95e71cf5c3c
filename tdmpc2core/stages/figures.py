"""``tdmpc2 figures``: learning-curve figures, per task or an overview of all tasks.

Per task (the Snakefile's ``figures_task`` rule)::

    tdmpc2 figures --task cartpole-balance --published cartpole-balance \\
        --eval results/single/cartpole-balance/seed*/eval.parquet \\
        --metrics results/single/cartpole-balance/seed*/metrics.parquet \\
        --out-eval results/figures/cartpole-balance_eval.png \\
        --out-train results/figures/cartpole-balance_train.png

Overview (the ``figure_overview`` rule)::

    tdmpc2 figures --config results/resolved_config.yaml --runs results/single \\
        --overview results/figures/overview.png

x axes are env frames (agent steps x action repeat), as the paper's figures. Ours: mean
over seeds, shaded min-max over seeds; published TD-MPC2: mean, shaded +- 1 sd.
"""
from __future__ import annotations

import argparse
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", help="task name (per-task mode)")
    parser.add_argument("--eval", nargs="+", default=[], metavar="EVAL_PARQUET",
                        help="the task's eval.parquet files, one per seed")
    parser.add_argument("--metrics", nargs="*", default=[], metavar="METRICS_PARQUET",
                        help="the task's metrics.parquet files (for the training figure)")
    parser.add_argument("--published", default="none",
                        help="dm_control name of the published curve, or 'none'")
    parser.add_argument("--subtitle", default="", help="a second title line (e.g. the env id)")
    parser.add_argument("--out-eval", help="evaluation-curve figure (.png or .svg)")
    parser.add_argument("--out-train", help="training-curve figure (.png or .svg)")
    parser.add_argument("--config", help="resolved configuration (overview mode)")
    parser.add_argument("--runs", default="results/single", help="folder of runs (overview mode)")
    parser.add_argument("--overview", help="overview figure of every task (.png or .svg)")


def run(args) -> int:
    from ..report import analysis as A
    from ..report import figures as F
    from ..report import published as P

    if args.overview:
        if not args.config:
            print("tdmpc2 figures: --overview needs --config (the resolved configuration)", file=sys.stderr)
            return 2
        cfg = A.load_run_config(args.config)
        paths = [os.path.join(A.run_dir(args.runs, t, s), "eval.parquet")
                 for t in cfg["tasks"] for s in cfg["seeds"]]
        paths = [p for p in paths if os.path.exists(p)]
        scores = A.seed_scores(A.read_evals(paths))
        F.plot_overview(scores, {t: v.get("published") for t, v in cfg["tasks"].items()}, args.overview)
        print(f"tdmpc2 figures: overview of {len(cfg['tasks'])} tasks -> {args.overview}")
        return 0

    if not args.task or not args.eval or not (args.out_eval or args.out_train):
        print("tdmpc2 figures: per-task mode needs --task, --eval and --out-eval and/or --out-train "
              "(or use --overview with --config)", file=sys.stderr)
        return 2
    published = None if args.published.lower() in ("", "none", "null") else args.published
    if published is not None and published not in P.published_tasks():
        print(f"tdmpc2 figures: no published curve named {published!r}; accepted: "
              f"{P.published_tasks()} or 'none'", file=sys.stderr)
        return 2
    evals = A.read_evals(args.eval)
    other = sorted(set(evals["task"]) - {args.task})
    if other:
        print(f"tdmpc2 figures: the --eval files hold other tasks {other}, not only {args.task!r}",
              file=sys.stderr)
        return 2
    scores = A.seed_scores(evals)
    if args.out_eval:
        F.plot_eval(args.task, scores, args.out_eval, published_task=published, subtitle=args.subtitle)
    if args.out_train:
        F.plot_train(args.task, A.read_metrics(args.metrics), args.out_train)
    print(f"tdmpc2 figures: {args.task}: {scores['seed'].nunique()} seeds -> "
          f"{', '.join(p for p in (args.out_eval, args.out_train) if p)}")
    return 0
