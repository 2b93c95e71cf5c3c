# TD-MPC2 reproduction pipeline (Hansen, Su, Wang, ICLR 2024).
#
#   snakemake --cores all                                               # the demo of config.yaml
#   snakemake --cores all --configfile workflow/configs/paper-dmc.yaml  # the paper's DMC protocol
#   snakemake --workflow-profile workflow/profiles/slurm --configfile workflow/configs/paper-dmc.yaml
#
# DAG: resolve_config -> train_single_seeds_* (one job per task and seed group)
#      -> figures_task (per task), figure_overview, tables -> report -> all (every output)
#      train_single_* (each seed's episodes.parquet) -> dataset_task -> dataset_pool
#      -> dataset_summary -> report
#      dataset_pool -> train_multi (per pool and model size) -> scaling -> report
# Rules only name files and call one `tdmpc2 <stage>` command (tdmpc2core/cli.py).
# docs/pipeline.md explains the configuration, reruns and SLURM.

from snakemake.utils import min_version

min_version("9.20")


configfile: "config.yaml"


# validated against workflow/schemas/config.schema.yaml; a refusal is one line naming the key
include: "workflow/rules/validate.smk"
include: "workflow/rules/common.smk"


report: "workflow/report/workflow.rst"


# Everything but training is quick and needs no GPU: on a cluster it runs in the snakemake
# process itself, and only the training jobs (train_single_*, train_multi) are submitted.
# (multitask.smk adds `scaling`; tests/test_workflow.py checks that no other rule is submitted.)
localrules:
    all,
    resolve_config,
    figures_task,
    figure_overview,
    tables,
    dataset_task,
    dataset_pool,
    dataset_summary,
    report,


include: "workflow/rules/resolve.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/datasets.smk"
include: "workflow/rules/official_data.smk"
include: "workflow/rules/multitask.smk"
include: "workflow/rules/official.smk"
include: "workflow/rules/report.smk"


# Every output of the DAG, not only the report: Snakemake does not rebuild a missing file
# whose consumers are all present and newer, so with the report alone as the target a deleted
# run folder (or the outputs Snakemake deleted after a job failed) stayed missing under a
# complete-looking report. With every file a target, a plain rerun rebuilds exactly what is
# missing and what depends on it.
# A protocol of official pools only (no single-task tasks) ends at the scaling tables and
# figure: the tables, overview figure and report are built from single-task runs.
EVERY_OUTPUT = [
    RESOLVED,
    *[f for name in RUN_FILES for f in P.all_run_files(name)],
    *P.video_files(),
    *[task_dataset(t) for t in P.dataset_tasks],
    *[pool_dataset(p) for p in POOLS],
    *[pool_dataset(p) for p in OFFICIAL_POOLS],
    *(rules.dataset_summary.output if P.dataset_tasks else []),
    *expand(
        f"{FIGURES}/{{task}}_{{kind}}.png", task=list(TASKS), kind=["eval", "train"]
    ),
    *(rules.figure_overview.output if TASKS else []),
    *(rules.tables.output if TASKS else []),
    *[f for name in MULTI_FILES for f in P.multi_files(name)],
    *P.multi_video_dirs(),
    *(rules.scaling.output if MULTITASK else []),
    *P.official_outputs(),
    *(rules.official_table.output if OFFICIAL_CKPTS else []),
    *(rules.report.output if TASKS else []),
]


rule all:
    """Every run, dataset, figure and table, and the report."""
    default_target: True
    input:
        EVERY_OUTPUT,


# the end of a run (where the report is, the checks; stopped jobs, a stale report moved aside)
# and how a local run stops on SIGTERM/SIGINT
include: "workflow/rules/hooks.smk"
