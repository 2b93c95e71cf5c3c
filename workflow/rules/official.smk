# The released (official) TD-MPC2 checkpoints, evaluated with our planner on dm_control
# (config key official_checkpoints; docs/pipeline.md, "Released checkpoints"): one job per
# checkpoint (results/official/{name}/eval.parquet, run.json last), then one table beside the
# published final scores for the report's "Released checkpoints, our planner" section.
# Nothing here when the key is absent (the default): the demo is unchanged.

if OFFICIAL_CKPTS:

    localrules:
        official_table,

    rule official_eval:
        """One released checkpoint: the official evaluate.py protocol on its tasks, our planner."""
        input:
            checkpoint=lambda wc: P.official_checkpoint(wc.name),
        output:
            [f"{OFFICIAL}/{{name}}/{f}" for f in OFFICIAL_FILES],
        log:
            "logs/official_eval/{name}.log",
        benchmark:
            f"{BENCHMARKS}/official_eval/{{name}}.tsv"
        wildcard_constraints:
            name="|".join(re.escape(n) for n in OFFICIAL_CKPTS),
        conda:
            CONDA_ENV
        threads: P.cluster.job_threads(P.official.resources)
        # a job of its own on a cluster (a large checkpoint wants a GPU): what it asks the
        # scheduler for comes from official_checkpoints.resources, as a training job's does
        resources:
            **job_resources(P, P.official.resources, tdmpc2=TDMPC2),
        params:
            # the evaluation settings: a change reruns the evaluations
            args=lambda wc: P.official_args(wc.name),
            code=P.code_param("evaluate_official"),
            outdir=lambda wc, output: parent(output[0]),
        shell:
            # the trainers' preamble (tdmpc2core/pipeline/jobs.py); the stage writes the log
            job_shell(
                "exec {resources.tdmpc2} evaluate-official --checkpoint {input.checkpoint:q} --name {wildcards.name:q} "
                "{params.args} --out {params.outdir:q} > {log:q} 2>&1",
                job_line=False,
            )

    rule official_table:
        """Each evaluated task's return beside the published TD-MPC2 final score."""
        input:
            evals=[f"{OFFICIAL}/{n}/eval.parquet" for n in OFFICIAL_CKPTS],
            runs=[f"{OFFICIAL}/{n}/run.json" for n in OFFICIAL_CKPTS],
        output:
            table=report(
                f"{TABLES}/official_checkpoints.csv",
                caption="../report/table_official.rst",
                category="Tables",
                labels={"table": "released checkpoints"},
            ),
            table_md=f"{TABLES}/official_checkpoints.md",
        log:
            "logs/official_table.log",
        conda:
            CONDA_ENV
        resources:
            tdmpc2=TDMPC2,
        params:
            code=P.code_param("official_table"),
        shell:
            "JAX_PLATFORMS=cpu {resources.tdmpc2} official-table --evals {input.evals:q} --out {output.table:q} "
            "> {log:q} 2>&1"
