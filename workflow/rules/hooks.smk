# What a run says when it ends, and how a local run stops (docs/pipeline.md, "Rerunning one
# seed, one task" and "Stopping a local run"). Plain Python in the Snakemake process; no rule
# here. The logic is in tdmpc2core/pipeline/hooks.py and stops.py (unit-tested in
# tests/test_pipeline_hooks.py); these handlers only pass it the workflow's paths and jobs.
#
# * onsuccess: where the report is and whether every task passed its expected range.
# * onerror (a job failed, or the run was stopped): one line per training job that was
#   stopped (from the stop record in its checkpoint folder: where, its checkpoint, how to
#   resume), and a report that no longer matches the results moved aside to
#   results/report.stale.html, with a line saying so.
# * onstart: on a local run, SIGTERM or SIGINT to the snakemake process alone stops the
#   running training jobs at their next chunk boundary, each with a checkpoint; where jobs
#   are submitted, each training rule gets the retries its longest run needs.

from snakemake.logging import logger

from tdmpc2core.pipeline import hooks as end_of_run
from tdmpc2core.pipeline import stops

REPORT = rules.report.output[0]
LOCAL_STOP = stops.LocalStop(
    seed_tag=seed_tag, max_chunk_seconds=MAX_CHUNK_SECONDS, pixel_tasks=P.pixel_tasks
)


def _say(line):
    logger.info(line)


def _failed_jobs():
    """The scheduler's failed jobs, as "rule (k=v, ...)" strings."""
    try:
        return [
            end_of_run.job_label(j.rule.name, j.wildcards)
            for j in workflow.scheduler.failed
        ]
    except Exception:  # no scheduler (the run failed before scheduling)
        return []


onstart:
    if workflow.local_exec:  # a cluster executor keeps Snakemake's own handling
        logger.addFilter(LOCAL_STOP.install())
    else:
        _asked = int(getattr(workflow.execution_settings, "retries", 0) or 0)
        for _name, (_retries, _line) in P.cluster.retries(
            LONG_RUNS, _asked
        ).items():
            workflow.get_rule(_name).restart_times = _retries
            _say(_line)


onsuccess:
    for _line in end_of_run.success_lines(
        REPORT,
        EVERY_OUTPUT,
        rules.tables.output.final,
        rules.scaling.output.tasks if MULTITASK else None,
    ):
        _say(_line)


onerror:
    for _line in end_of_run.error_lines(
        REPORT, EVERY_OUTPUT, LOCAL_STOP.lines(), _failed_jobs()
    ):
        _say(_line)
