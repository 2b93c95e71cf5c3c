# Shared definitions. The configuration is resolved and checked by the library
# (tdmpc2core/pipeline/: config.py the protocol, tasks, seeds, pools, multi-task block and
# released checkpoints; cluster.py the jobs' resources; codeversion.py the stages' code
# versions), unit-tested there; a refusal is one line (ConfigError -> WorkflowError).
# No rules here; the rule files read `P` (a tdmpc2core.pipeline.config.Pipeline) and the
# names below.

import re
import shlex
import sys

from snakemake.exceptions import WorkflowError

from tdmpc2core.pipeline import codeversion
from tdmpc2core.pipeline.config import *
from tdmpc2core.pipeline.jobs import (
    ACCELERATOR,
    job_resources,
    job_shell,
    use_local_accelerators,
)

try:
    P = resolve(config)
except ConfigError as _e:
    raise WorkflowError(str(_e)) from None
# official pools still downloading; which finished jobs ran other code than now (codeversion.py);
# with video: every, which finished jobs have no video per evaluation
for _line in [
    *P.notes,
    *codeversion.code_changes(P.run_records(), rerun=P.rerun_on_code_change),
    *P.jobs_without_every_videos(),
]:
    print(_line, file=sys.stderr)

# a local run on a machine with a GPU or TPU: its trainer jobs ask for one unit of the
# `accelerator` resource, of which there are cluster.local_accelerator_jobs (auto: one, so the
# jobs take the device in turn; tdmpc2core/pipeline/jobs.py, docs/pipeline.md "One accelerator")
P, _found = use_local_accelerators(P, workflow.local_exec)
if P.accelerator_slots and ACCELERATOR not in workflow.global_resources:
    workflow.register_resource(ACCELERATOR, P.accelerator_slots)
    print(
        f"tdmpc2: {_found.kind.upper()} found ({_found.evidence}): at most {P.accelerator_slots} "
        f"job(s) on it at once (cluster.local_accelerator_jobs)",
        file=sys.stderr,
    )

# the names the rule files and hooks.smk read
TASKS, POOLS, OFFICIAL_POOLS, SEED_GROUPS = (
    P.tasks,
    P.pools,
    P.official_pools,
    P.seed_groups,
)
MULTITASK, OFFICIAL_CKPTS = P.multitask, P.official.checkpoints
MT_POOLS, MT_SIZES = (P.multitask.pools, P.multitask.sizes) if MULTITASK else ([], [])
# config `video: last`: each multi-task job's videos folder (one {task}.mp4 per evaluated task)
MULTI_VIDEOS = (
    {"videos": directory(f"{MULTI}/{{pool}}/size{{size}}/videos")}
    if P.video != "off"
    else {}
)
MAX_CHUNK_SECONDS, MAX_JOB_MINUTES = P.max_chunk_seconds, P.cluster.max_job_minutes
extra_jobs = P.cluster.extra_jobs
# training rule -> the longest runtime (minutes) of its jobs: where jobs are submitted,
# hooks.smk's onstart gives the rule one extra retry per further job its longest run needs
LONG_RUNS = P.long_runs()

# TDMPC2 is used in shell commands as a resource (`tdmpc2=TDMPC2`), not a param, on purpose: a
# params value is a rerun trigger, and moving the virtualenv must not retrain (the workflow's
# convention for such settings: tdmpc2core/pipeline/jobs.py, docs/pipeline.md "What reruns a job"). With --use-conda the env of
# envs/tdmpc2.yaml provides `tdmpc2`; otherwise the Python that runs Snakemake (the project's
# virtualenv) runs the CLI module, whether or not its bin/ is on PATH.
try:
    from snakemake_interface_executor_plugins.settings import DeploymentMethod

    _USE_CONDA = (
        DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
    )
except Exception:
    _USE_CONDA = False
TDMPC2 = "tdmpc2" if _USE_CONDA else f"{shlex.quote(sys.executable)} -m tdmpc2core.cli"
CONDA_ENV = "../../envs/tdmpc2.yaml"  # relative to workflow/rules/


wildcard_constraints:
    task="|".join(re.escape(t) for t in TASKS),
