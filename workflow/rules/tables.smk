# Tables: the paper's single-task table, aggregate scores, and the final-score check.


rule tables:
    """CSV and Markdown tables under results/tables/."""
    input:
        config=RESOLVED,
        eval=P.all_run_files("eval.parquet"),
    output:
        single=report(
            f"{TABLES}/single_task.csv",
            caption="../report/table_single_task.rst",
            category="Tables",
            labels={"table": "single-task"},
        ),
        single_md=f"{TABLES}/single_task.md",
        aggregate=report(
            f"{TABLES}/aggregate.csv",
            caption="../report/table_aggregate.rst",
            category="Tables",
            labels={"table": "aggregate"},
        ),
        aggregate_md=f"{TABLES}/aggregate.md",
        final=report(
            f"{TABLES}/final_scores.csv",
            caption="../report/table_final_scores.rst",
            category="Tables",
            labels={"table": "final-score check"},
        ),
        final_md=f"{TABLES}/final_scores.md",
        lengths=report(
            f"{TABLES}/episode_lengths.csv",
            caption="../report/table_episode_lengths.rst",
            category="Tables",
            labels={"table": "episode lengths (episodic tasks)"},
        ),
        lengths_md=f"{TABLES}/episode_lengths.md",
    log:
        "logs/tables.log",
    benchmark:
        f"{BENCHMARKS}/tables.tsv"
    conda:
        CONDA_ENV
    resources:
        tdmpc2=TDMPC2,
    params:
        code=P.code_param("tables"),
        runs=lambda wc, input: parent(input.eval[0], 3),
        outdir=lambda wc, output: parent(output.single),
    shell:
        "JAX_PLATFORMS=cpu {resources.tdmpc2} tables --config {input.config:q} --runs {params.runs:q} --outdir {params.outdir:q} > {log:q} 2>&1"
