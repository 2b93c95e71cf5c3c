# The official TD-MPC2 multi-task datasets (protocols.<protocol>.official_pools; off unless
# given): a folder of the official chunk files (mt30 / mt80 chunk_*.pt, downloaded by the user)
# -> results/datasets/pools/{pool}.parquet, which train_multi (multitask.smk) trains on.
# SECURITY: the chunks are torch.save'd TensorDicts and loading them unpickles them, which can
# run arbitrary code: only name folders of files from a trusted source (the official release).
# Needs torch and tensordict in the jobs' environment (pip install -e '.[official]').

if OFFICIAL_POOLS:

    # run where snakemake runs, as the other dataset rules (CPU and disk, no GPU)
    localrules:
        convert_official_data,

    rule convert_official_data:
        """The official chunks of one pool as our episode dataset (trusted files only: loading unpickles)."""
        input:
            lambda wc: P.official_chunks(wc.pool),
        output:
            pool_dataset("{pool}"),
        log:
            "logs/convert_official_data/{pool}.log",
        benchmark:
            f"{BENCHMARKS}/convert_official_data/{{pool}}.tsv"
        wildcard_constraints:
            pool="|".join(re.escape(p) for p in OFFICIAL_POOLS),
        conda:
            CONDA_ENV
        resources:
            tdmpc2=TDMPC2,
        params:
            src=lambda wc: OFFICIAL_POOLS[wc.pool]["src"],
            task_set=lambda wc: OFFICIAL_POOLS[wc.pool]["task_set"],
            code=P.code_param("convert_official_data"),
        shell:
            "JAX_PLATFORMS=cpu {resources.tdmpc2} convert-official-data --src {params.src:q} --out {output:q} "
            "--tasks {params.task_set} > {log:q} 2>&1"
