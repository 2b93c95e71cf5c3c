# Episode datasets (docs/artifacts.md, "Episode datasets"): each seed's replay, exported by its
# training job (results/single/{task}/seed{s}/episodes.parquet) -> one dataset per task ->
# the pools named under protocols.<protocol>.pools -> the summary the report shows.


rule dataset_task:
    """The seeds' episodes of one task, seed after seed, in one Parquet file."""
    input:
        lambda wc: P.run_files(wc.task, "episodes.parquet"),
    output:
        f"{DATASETS}/tasks/{{task}}.parquet",
    log:
        "logs/dataset_task/{task}.log",
    benchmark:
        f"{BENCHMARKS}/dataset_task/{{task}}.tsv"
    conda:
        CONDA_ENV
    resources:
        tdmpc2=TDMPC2,
    params:
        code=P.code_param("dataset_task"),
    shell:
        "JAX_PLATFORMS=cpu {resources.tdmpc2} dataset-task --inputs {input:q} --out {output:q} > {log:q} 2>&1"


rule dataset_pool:
    """A multi-task dataset: the pool's tasks in the config's order, zero-padded."""
    input:
        lambda wc: [task_dataset(t) for t in POOLS[wc.pool]],
    output:
        f"{DATASETS}/pools/{{pool}}.parquet",
    log:
        "logs/dataset_pool/{pool}.log",
    benchmark:
        f"{BENCHMARKS}/dataset_pool/{{pool}}.tsv"
    wildcard_constraints:
        # the official pools' file comes from convert_official_data (official_data.smk)
        pool="|".join(re.escape(p) for p in POOLS) or "(?!)",
    conda:
        CONDA_ENV
    resources:
        tdmpc2=TDMPC2,
    params:
        code=P.code_param("dataset_pool"),
    shell:
        "JAX_PLATFORMS=cpu {resources.tdmpc2} dataset-pool --inputs {input:q} --out {output:q} > {log:q} 2>&1"


rule dataset_summary:
    """Episodes, agent steps and returns of every task dataset and pool, and their figure."""
    input:
        tasks=[task_dataset(t) for t in P.dataset_tasks],
        pools=[pool_dataset(p) for p in POOLS],
    output:
        summary=f"{DATASETS}/summary.parquet",
        figure=report(
            f"{FIGURES}/datasets.png",
            caption="../report/figure_datasets.rst",
            category="Datasets",
            labels={"figure": "episode returns"},
        ),
    log:
        "logs/dataset_summary.log",
    conda:
        CONDA_ENV
    resources:
        tdmpc2=TDMPC2,
    params:
        code=P.code_param("dataset_summary"),
    shell:
        "JAX_PLATFORMS=cpu {resources.tdmpc2} dataset-summary --tasks {input.tasks:q} --pools {input.pools:q} "
        "--out {output.summary:q} --figure {output.figure:q} > {log:q} 2>&1"
