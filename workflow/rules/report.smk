# The report: results/report.html, one self-contained file.


rule report:
    """Tables, figures, final-score check, configuration, provenance and runtimes in one HTML file."""
    input:
        config=RESOLVED,
        tables=rules.tables.output,
        figures=expand(
            f"{FIGURES}/{{task}}_{{kind}}.png",
            task=list(TASKS),
            kind=["eval", "train"],
        ),
        overview=f"{FIGURES}/overview.png",
        runs=P.all_run_files("run.json"),
        videos=P.video_files(),  # embedded in the report (config `video`)
        # no episode datasets when every task learns from pixels (their jobs export none)
        datasets=rules.dataset_summary.output.summary if P.dataset_tasks else [],
        datasets_figure=rules.dataset_summary.output.figure if P.dataset_tasks else [],
        multitask=(
            [
                rules.scaling.output.scaling,
                rules.scaling.output.tasks,
                rules.scaling.output.figure,
            ]
            if MULTITASK
            else []
        ),
        multitask_runs=P.multi_files("run.json"),
        multitask_videos=P.multi_video_dirs(),
        official=[rules.official_table.output.table] if OFFICIAL_CKPTS else [],
        # the committed learning-parity results (config `learning_parity`; docs/fidelity.md)
        learning_parity=[P.learning_parity] if P.learning_parity else [],
        # the reproduction's results and the JSON beside them (config `reproduction`; docs/fidelity.md)
        reproduction=P.reproduction_inputs(),
    output:
        report(
            "results/report.html",
            caption="../report/report_html.rst",
            category="Report",
            labels={"file": "report.html"},
        ),
    log:
        "logs/report.log",
    benchmark:
        f"{BENCHMARKS}/report.tsv"
    conda:
        CONDA_ENV
    resources:
        tdmpc2=TDMPC2,
    params:
        code=P.code_param("report"),
        runs=lambda wc, input: parent(input.runs[0], 3),
        tables=lambda wc, input: parent(input.tables[0]),
        figures=lambda wc, input: parent(input.overview),
        benchmarks=BENCHMARKS,
        # "--learning-parity FILE " with the config key, else nothing (the command as without it)
        learning_parity=lambda wc, input: (
            f"--learning-parity {shlex.quote(input.learning_parity[0])} "
            if input.learning_parity
            else ""
        ),
        # "--reproduction FILE " with the config key, else nothing (the command as without it)
        reproduction=lambda wc, input: (
            f"--reproduction {shlex.quote(input.reproduction[0])} "
            if input.reproduction
            else ""
        ),
    shell:
        "JAX_PLATFORMS=cpu {resources.tdmpc2} report --config {input.config:q} --runs {params.runs:q} --tables {params.tables:q} "
        "--figures {params.figures:q} --benchmarks {params.benchmarks:q} --datasets {input.datasets:q} "
        "--multi-runs {input.multitask_runs:q} --official-tables {input.official:q} {params.learning_parity}{params.reproduction}"
        "--out {output:q} > {log:q} 2>&1"
