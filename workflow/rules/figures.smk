# Figures: one job per task (evaluation and training curves), and one overview of all tasks.


rule figures_task:
    """Evaluation return vs env frames beside the published curve; training curves."""
    input:
        eval=lambda wc: P.run_files(wc.task, "eval.parquet"),
        metrics=lambda wc: P.run_files(wc.task, "metrics.parquet"),
    output:
        eval=report(
            f"{FIGURES}/{{task}}_eval.png",
            caption="../report/figure_eval.rst",
            category="Learning curves",
            labels={"task": "{task}", "figure": "evaluation return"},
        ),
        train=report(
            f"{FIGURES}/{{task}}_train.png",
            caption="../report/figure_train.rst",
            category="Training curves",
            labels={"task": "{task}", "figure": "training"},
        ),
    log:
        "logs/figures/{task}.log",
    benchmark:
        f"{BENCHMARKS}/figures/{{task}}.tsv"
    conda:
        CONDA_ENV
    resources:
        tdmpc2=TDMPC2,
    params:
        code=P.code_param("figures"),
        published=lambda wc: TASKS[wc.task]["published"] or "none",
        subtitle=lambda wc: TASKS[wc.task]["env_id"],
    shell:
        "JAX_PLATFORMS=cpu {resources.tdmpc2} figures --task {wildcards.task:q} --published {params.published:q} "
        "--subtitle {params.subtitle:q} --eval {input.eval:q} --metrics {input.metrics:q} "
        "--out-eval {output.eval:q} --out-train {output.train:q} > {log:q} 2>&1"


rule figure_overview:
    """Every task's evaluation curve in one grid."""
    input:
        config=RESOLVED,
        eval=P.all_run_files("eval.parquet"),
    output:
        report(
            f"{FIGURES}/overview.png",
            caption="../report/figure_overview.rst",
            category="Learning curves",
            labels={"task": "all tasks", "figure": "overview"},
        ),
    log:
        "logs/figures/overview.log",
    benchmark:
        f"{BENCHMARKS}/figures/overview.tsv"
    conda:
        CONDA_ENV
    resources:
        tdmpc2=TDMPC2,
    params:
        code=P.code_param("figures"),
        runs=lambda wc, input: parent(input.eval[0], 3),
    shell:
        "JAX_PLATFORMS=cpu {resources.tdmpc2} figures --config {input.config:q} --runs {params.runs:q} --overview {output:q} > {log:q} 2>&1"
