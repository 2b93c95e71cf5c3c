# Training: one job per (task, seed group). A group holds `seeds_per_job` seeds that train
# vmapped in one program; each seed still gets its own folder results/single/{task}/seed{s}/
# (docs/artifacts.md). One rule per seed group, named train_single_seeds_<s1>_<s2>...
# Checkpoints go to {checkpoint_dir}/single/{task}/seeds_<...>/, not under results/: a job
# stopped by SIGTERM/SIGINT (SLURM time limit or preemption, Ctrl-C) writes one there and
# fails; Snakemake deletes its declared outputs but not the checkpoints, and the rerun of the
# same target resumes from them (docs/pipeline.md, "Preemption").


# The tasks that learn from pixels (agent.obs rgb) have rules of their own,
# train_single_pixels_<seeds>: their jobs export no episodes.parquet (datasets are state-only).
for _name, _group, _pixels in P.train_rules():

    rule:
        name:
            _name
        # every seed's run files and, with config `video: last`, the first seed's video
        output:
            P.group_outputs(_group, _pixels),
        log:
            f"logs/train_single/{{task}}/{seed_tag(_group)}.log",
        benchmark:
            f"{BENCHMARKS}/train_single/{{task}}/{seed_tag(_group)}.tsv"
        wildcard_constraints:
            task=P.task_pattern(_pixels),
        conda:
            CONDA_ENV
        threads: lambda wc: P.cluster.job_threads(TASKS[wc.task]["resources"])
        # what the job asks a scheduler for, from the task's `resources` and `cluster`; the
        # rest are the shell's settings that are no rerun trigger (resources, not params:
        # moving the virtualenv, the cache or the checkpoints retrains nothing)
        # The top-level `logger` block: the stage's --logger flags as one more resource (none without it).
        resources:
            **P.logger_resources(),
            gpu=lambda wc: TASKS[wc.task]["resources"]["gpu"],
            runtime=lambda wc: P.cluster.job_runtime(
                TASKS[wc.task]["resources"]["runtime"]
            ),
            mem_mb=lambda wc: TASKS[wc.task]["resources"]["mem_mb"],
            slurm_extra=P.cluster.slurm_extra,
            jax_env=lambda wc: P.cluster.jax_env(TASKS[wc.task]["resources"]["gpu"]),
            tdmpc2=TDMPC2,
            jax_cache=P.jax_cache,
            checkpoints=P.checkpoints,
            checkpoint_every=str(P.checkpoint_every),  # strings: not a consumable resource
            keep_checkpoints=str(P.keep_checkpoints),
            max_chunk_seconds=str(MAX_CHUNK_SECONDS),
            devices=P.cluster.devices,  # --devices: auto splits the seeds over the GPUs the job got
            video=P.video,  # --video: a resource, no rerun trigger (switching it on adds an output)
        params:
            # the merged settings of the task: a change reruns that task's jobs only (the
            # cache folder, threads and resources are not params: changing them reruns nothing)
            spec=lambda wc: P.task_spec(wc.task),
            seeds=" ".join(str(s) for s in _group),
            # the code of tdmpc2core this stage runs (tdmpc2core/pipeline/codeversion.py), a rerun
            # trigger with rerun_on_code_change (else None: docs/pipeline.md, "Code changes")
            code=P.code_param("train_single"),
            # the shell command is formatted when the job runs, after this loop has ended, so
            # it must not read `_group`: the tag comes through params (a function of the seeds,
            # which are already a param, so it adds no rerun trigger)
            seed_tag=seed_tag(_group),
            outdir=lambda wc, output: parent(output[0], 2),
        shell:
            # PJRT_NPROC sizes the thread pool of JAX's CPU client (XLA reads it before the
            # core count), OMP_NUM_THREADS that of oneDNN/OpenMP kernels; with one thread,
            # XLA's Eigen kernels run single-threaded as well. `exec`: the trainer replaces
            # the shell, so a SIGTERM reaches it alone and the job ends when it has written
            # its checkpoint (a shell killed first would end the job, and on SLURM the step,
            # before that).
            "export PJRT_NPROC={threads} OMP_NUM_THREADS={threads} "
            "JAX_COMPILATION_CACHE_DIR={resources.jax_cache:q} {resources.jax_env}; "
            'if [ {threads} -eq 1 ]; then export XLA_FLAGS="${{XLA_FLAGS:-}} --xla_cpu_multi_thread_eigen=false"; fi; '
            'echo "job on $(hostname): CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES-unset}} '
            'SLURM_JOB_ID=${{SLURM_JOB_ID-none}} {resources.jax_env}" > {log:q}; '
            "exec {resources.tdmpc2} train-single --task {wildcards.task:q} --spec {params.spec:q} "
            "--seeds {params.seeds} --outdir {params.outdir:q} "
            "--video {resources.video} "
            "--checkpoint-dir {resources.checkpoints:q}/single/{wildcards.task:q}/{params.seed_tag} "
            "--checkpoint-every {resources.checkpoint_every} --keep-checkpoints {resources.keep_checkpoints} "
            "--max-chunk-seconds {resources.max_chunk_seconds} --devices {resources.devices}"
            + P.logger_shell()
            + " >> {log:q} 2>&1"
