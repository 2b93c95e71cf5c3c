# Multi-task TD-MPC2 (protocols.<protocol>.multitask): one offline model per (pool, model
# size) on the pool's dataset (results/datasets/pools/{pool}.parquet, datasets.smk), evaluated
# on every pooled task; then the scaling table and figure for the report. Nothing here when the
# protocol has no multitask block.

if MULTITASK:

    localrules:
        scaling,

    rule train_multi:
        """One multi-task model: the pool's dataset, one model size, the seeds vmapped."""
        input:
            dataset=pool_dataset("{pool}"),
        output:
            [f"{MULTI}/{{pool}}/size{{size}}/{f}" for f in MULTI_FILES],
            **MULTI_VIDEOS,
        log:
            "logs/train_multi/{pool}/size{size}.log",
        benchmark:
            f"{BENCHMARKS}/train_multi/{{pool}}/size{{size}}.tsv"
        wildcard_constraints:
            pool="|".join(re.escape(p) for p in MT_POOLS),
            size="|".join(str(s) for s in MT_SIZES),
        conda:
            CONDA_ENV
        threads: P.cluster.job_threads(P.multitask.resources)
        # as the single-task training rule (train.smk): what a scheduler is asked for, then
        # the shell's settings (no rerun trigger). A runtime above cluster.max_job_minutes (the
        # paper's 7 days) runs as several resubmitted jobs.
        resources:
            **job_resources(
                P,
                P.multitask.resources,
                tdmpc2=TDMPC2,
                # GPUs (per node) and, with several processes (cluster.multitask_nodes /
                # _tasks_per_node), the executor's multi-process job; the shell starts them with srun
                gpu=P.cluster.multitask_resources(P.multitask.resources["gpu"]),
                trainer=dict(
                    checkpoints=P.checkpoints,
                    checkpoint_every=str(P.multitask.checkpoint_every),
                    keep_checkpoints=str(P.keep_checkpoints),
                    max_chunk_seconds=str(MAX_CHUNK_SECONDS),
                    launcher=P.cluster.multitask_launcher(),
                    devices=P.cluster.devices,
                    video=P.multi_video,  # switching it on adds an output, reruns nothing
                ),
            ),
        params:
            # the multi-task settings: a change reruns the multi-task jobs only
            spec=lambda wc: P.multi_spec(wc.pool),
            seeds=" ".join(str(s) for s in P.multitask.seeds),
            code=P.code_param("train_multi"),
            outdir=lambda wc, output: parent(output[0]),
        shell:
            # the trainers' preamble (tdmpc2core/pipeline/jobs.py); the checkpoints outside
            # results/, resumed by a rerun after SIGTERM/SIGINT, as the single-task jobs'
            job_shell(
                "{resources.launcher} {resources.tdmpc2} train-multi --pool {wildcards.pool:q} --model-size {wildcards.size} "
                "--dataset {input.dataset:q} --spec {params.spec:q} --seeds {params.seeds} "
                "--outdir {params.outdir:q} --video {resources.video} "
                "--checkpoint-dir {resources.checkpoints:q}/multi/{wildcards.pool:q}/size{wildcards.size} "
                "--checkpoint-every {resources.checkpoint_every} --keep-checkpoints {resources.keep_checkpoints} "
                "--max-chunk-seconds {resources.max_chunk_seconds} --devices {resources.devices}"
                + P.logger_shell()
                + " >> {log:q} 2>&1"
            )

    rule scaling:
        """The multi-task scaling table, the per-task table (beside the single-task returns) and their figure."""
        input:
            config=RESOLVED,
            evals=P.multi_files("eval.parquet"),
            runs=P.multi_files("run.json"),
            single=[
                p
                for pool in MT_POOLS
                for t in POOLS.get(pool, [])
                for p in P.run_files(t, "eval.parquet")
            ],
        output:
            scaling=report(
                f"{TABLES}/multitask_scaling.csv",
                caption="../report/table_multitask.rst",
                category="Tables",
                labels={"table": "multi-task scaling"},
            ),
            scaling_md=f"{TABLES}/multitask_scaling.md",
            tasks=report(
                f"{TABLES}/multitask_tasks.csv",
                caption="../report/table_multitask.rst",
                category="Tables",
                labels={"table": "multi-task per task"},
            ),
            tasks_md=f"{TABLES}/multitask_tasks.md",
            figure=report(
                f"{FIGURES}/multitask_scaling.png",
                caption="../report/figure_multitask.rst",
                category="Multi-task",
                labels={"figure": "scaling"},
            ),
        log:
            "logs/scaling.log",
        benchmark:
            f"{BENCHMARKS}/scaling.tsv"
        conda:
            CONDA_ENV
        resources:
            tdmpc2=TDMPC2,
        params:
            multi=lambda wc, input: parent(input.evals[0], 3),
            # the single-task runs' folder (none in a protocol of official pools only)
            runs=lambda wc, input: parent(input.single[0], 3) if input.single else RUNS,
            outdir=lambda wc, output: parent(output.scaling),
            code=P.code_param("scaling"),
        shell:
            "JAX_PLATFORMS=cpu {resources.tdmpc2} scaling --config {input.config:q} --multi {params.multi:q} --runs {params.runs:q} "
            "--outdir {params.outdir:q} --figure {output.figure:q} > {log:q} 2>&1"
