# Training: one job per (task, seed group). A group holds `seeds_per_job` seeds (a task's
# own, else the top level's) that train vmapped in one program; each seed still gets its own folder results/single/{task}/seed{s}/
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
            task=P.task_pattern(_pixels, _group),
        conda:
            CONDA_ENV
        threads: lambda wc: P.cluster.job_threads(TASKS[wc.task]["resources"])
        # what the scheduler reads, then the shell's settings: no rerun trigger (resources, not
        # params: moving the virtualenv, the cache or the checkpoints retrains nothing;
        # tdmpc2core/pipeline/jobs.py, docs/pipeline.md "What reruns a job")
        resources:
            **job_resources(
                P,
                lambda wc: TASKS[wc.task]["resources"],
                tdmpc2=TDMPC2,
                # strings: no consumable resource
                trainer=dict(
                    checkpoints=P.checkpoints,
                    checkpoint_every=str(P.checkpoint_every),
                    keep_checkpoints=str(P.keep_checkpoints),
                    max_chunk_seconds=str(MAX_CHUNK_SECONDS),
                    devices=P.cluster.devices,  # auto: the seeds split over the job's GPUs
                    video=P.video,  # switching it on adds an output, reruns nothing
                ),
            ),
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
            # the trainers' preamble (threads, cache, JAX environment, the log's first line;
            # tdmpc2core/pipeline/jobs.py), then `exec` the stage
            job_shell(
                "exec {resources.tdmpc2} train-single --task {wildcards.task:q} --spec {params.spec:q} "
                "--seeds {params.seeds} --outdir {params.outdir:q} "
                "--video {resources.video} "
                "--checkpoint-dir {resources.checkpoints:q}/single/{wildcards.task:q}/{params.seed_tag} "
                "--checkpoint-every {resources.checkpoint_every} --keep-checkpoints {resources.keep_checkpoints} "
                "--max-chunk-seconds {resources.max_chunk_seconds} --devices {resources.devices}"
                + P.logger_shell()
                + " >> {log:q} 2>&1"
            )
