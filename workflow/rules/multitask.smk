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
        params:
            # the multi-task settings: a change reruns the multi-task jobs only
            spec=lambda wc: multi_spec(wc.pool),
            seeds=" ".join(str(s) for s in MT_SEEDS),
            outdir=lambda wc: f"{MULTI}/{wc.pool}/size{wc.size}",
        wildcard_constraints:
            pool="|".join(re.escape(p) for p in MT_POOLS),
            size="|".join(str(s) for s in MT_SIZES),
        log:
            "logs/train_multi/{pool}/size{size}.log",
        benchmark:
            f"{BENCHMARKS}/train_multi/{{pool}}/size{{size}}.tsv"
        threads: config["threads_per_job"]
        resources:
            gpu=MT_RESOURCES["gpu"],
            runtime=MT_RESOURCES["runtime"],
            mem_mb=MT_RESOURCES["mem_mb"],
        conda:
            CONDA_ENV
        shell:
            # thread pinning, the compilation cache, `exec` and the checkpoints (outside results/,
            # resumed by a rerun after SIGTERM/SIGINT) as the single-task training jobs (train.smk)
            "export PJRT_NPROC={threads} OMP_NUM_THREADS={threads} "
            "JAX_COMPILATION_CACHE_DIR={JAX_CACHE:q}; "
            'if [ {threads} -eq 1 ]; then export XLA_FLAGS="${{XLA_FLAGS:-}} --xla_cpu_multi_thread_eigen=false"; fi; '
            "exec {TDMPC2} train-multi --pool {wildcards.pool:q} --model-size {wildcards.size} "
            "--dataset {input.dataset:q} --spec {params.spec:q} --seeds {params.seeds} "
            "--outdir {params.outdir:q} "
            "--checkpoint-dir {CHECKPOINTS:q}/multi/{wildcards.pool:q}/size{wildcards.size} "
            "--checkpoint-every {MT_CHECKPOINT_EVERY} --keep-checkpoints {KEEP_CHECKPOINTS} "
            "--max-chunk-seconds {MAX_CHUNK_SECONDS} > {log:q} 2>&1"

    rule scaling:
        """The multi-task scaling table, the per-task table (beside the single-task returns) and their figure."""
        input:
            config=RESOLVED,
            evals=multi_files("eval.parquet"),
            runs=multi_files("run.json"),
            single=[p for pool in MT_POOLS for t in POOLS.get(pool, []) for p in run_files(t, "eval.parquet")],
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
        params:
            multi=MULTI,
            runs=RUNS,
            outdir=TABLES,
        log:
            "logs/scaling.log",
        benchmark:
            f"{BENCHMARKS}/scaling.tsv"
        conda:
            CONDA_ENV
        shell:
            "{TDMPC2} scaling --config {input.config:q} --multi {params.multi:q} --runs {params.runs:q} "
            "--outdir {params.outdir:q} --figure {output.figure:q} > {log:q} 2>&1"


def multitask_report_inputs():
    """What the report needs of the multi-task stage (nothing without a multitask block)."""
    if not MULTITASK:
        return []
    return [rules.scaling.output.scaling, rules.scaling.output.tasks, rules.scaling.output.figure]


def multitask_run_files():
    """The multi-task runs' run.json files (the report shows their runtimes)."""
    return [f"{MULTI}/{pool}/size{size}/run.json" for pool in MT_POOLS for size in MT_SIZES]
