# The released (official) TD-MPC2 checkpoints, evaluated with our planner on dm_control
# (config key official_checkpoints; docs/pipeline.md, "Released checkpoints"): one job per
# checkpoint (results/official/{name}/eval.parquet, run.json last), then one table beside the
# published final scores for the report's "Released checkpoints, our planner" section.
# Nothing here when the key is absent (the default): the demo is unchanged.

import os
import re
import shlex

OFFICIAL = "results/official"
OFFICIAL_FILES = ["eval.parquet", "run.json"]  # run.json last: a complete evaluation
OFFICIAL_CFG = config.get("official_checkpoints")
OFFICIAL_CKPTS = dict((OFFICIAL_CFG or {}).get("checkpoints") or {})


def _check_official_tasks():
    """Task names a job would refuse, refused now (plain Python: no JAX, no dm_control)."""
    from tdmpc2core.envs import official_tasks

    sets = ["all", *official_tasks.task_set_names()]
    for name, ck in OFFICIAL_CKPTS.items():
        path = os.path.join(OFFICIAL_CFG["dir"], ck["file"])
        if not os.path.isfile(path):
            raise WorkflowError(
                f"config: official_checkpoints.checkpoints.{name}.file: {path} does not exist "
                f"(official_checkpoints.dir {OFFICIAL_CFG['dir']!r} + file {ck['file']!r}): download the "
                "checkpoint there, or correct the path"
            )
        for t in ck["tasks"]:
            if t in sets:
                continue
            why = official_tasks.unavailable_reason(t)
            if not t.startswith("dmc:") or why is not None:
                raise WorkflowError(
                    f"config: official_checkpoints.checkpoints.{name}.tasks: {t!r} "
                    + (
                        f"cannot be evaluated here ({why}); "
                        if t.startswith("dmc:")
                        else ""
                    )
                    + f"accepted: {sets} or a dm_control id (dmc:<official name>, `tdmpc2core.envs.list_env_ids()`)"
                )


if OFFICIAL_CKPTS:
    _check_official_tasks()

    localrules:
        official_table,

    rule official_eval:
        """One released checkpoint: the official evaluate.py protocol on its tasks, our planner."""
        input:
            checkpoint=lambda wc: os.path.join(
                OFFICIAL_CFG["dir"], OFFICIAL_CKPTS[wc.name]["file"]
            ),
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
        threads: config["threads_per_job"]
        params:
            # the evaluation settings: a change reruns the evaluations
            args=lambda wc: official_args(wc.name),
            outdir=lambda wc: f"{OFFICIAL}/{wc.name}",
        shell:
            "export PJRT_NPROC={threads} OMP_NUM_THREADS={threads} "
            "JAX_COMPILATION_CACHE_DIR={JAX_CACHE:q}; "
            'if [ {threads} -eq 1 ]; then export XLA_FLAGS="${{XLA_FLAGS:-}} --xla_cpu_multi_thread_eigen=false"; fi; '
            "exec {TDMPC2} evaluate-official --checkpoint {input.checkpoint:q} --name {wildcards.name:q} "
            "{params.args} --out {params.outdir:q} > {log:q} 2>&1"

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
        shell:
            "{TDMPC2} official-table --evals {input.evals:q} --out {output.table:q} > {log:q} 2>&1"


def official_args(name):
    """The evaluate-official options of one checkpoint (shell-quoted)."""
    ck, c = OFFICIAL_CKPTS[name], OFFICIAL_CFG
    args = [a for t in ck["tasks"] for a in ("--task", t)]
    args += [
        "--episodes",
        str(c.get("episodes", 10)),
        "--seed",
        str(c.get("seed", 1)),
        "--episode-length",
        str(c.get("episode_length", 1000)),
    ]
    if ck.get("model_size") is not None:
        args += ["--model-size", str(ck["model_size"])]
    if ck.get("task_set"):
        args += ["--task-set", ck["task_set"]]
    for k, v in sorted((c.get("planner") or {}).items()):
        args += ["--planner", f"{k}={v}"]
    return " ".join(shlex.quote(a) for a in args)


def official_outputs():
    """Every output of the released-checkpoint evaluations (none when the key is absent)."""
    if not OFFICIAL_CKPTS:
        return []
    return [
        f"{OFFICIAL}/{n}/{f}" for n in OFFICIAL_CKPTS for f in OFFICIAL_FILES
    ] + list(rules.official_table.output)


def official_report_inputs():
    """The table the report's "Released checkpoints, our planner" section shows (none when off)."""
    return [rules.official_table.output.table] if OFFICIAL_CKPTS else []
