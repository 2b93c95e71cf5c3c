# TD-MPC2 reproduction pipeline (Hansen, Su, Wang, ICLR 2024).
#
#   snakemake --cores all                                               # the demo of config.yaml
#   snakemake --cores all --configfile workflow/configs/paper-dmc.yaml  # the paper's DMC protocol
#   snakemake --workflow-profile workflow/profiles/slurm --configfile workflow/configs/paper-dmc.yaml
#
# DAG: resolve_config -> train_single_seeds_* (one job per task and seed group)
#      -> figures_task (per task), figure_overview, tables -> report -> all
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
# process itself, and only the training jobs are submitted.
localrules:
    all,
    resolve_config,
    figures_task,
    figure_overview,
    tables,
    dataset_summary,
    report,


rule all:
    """The report (and through it every run, figure and table)."""
    default_target: True
    input:
        "results/report.html",


include: "workflow/rules/resolve.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/datasets.smk"
include: "workflow/rules/multitask.smk"
include: "workflow/rules/report.smk"
