"""The jobs that run a trainer (``train_single_*``, ``train_multi``, ``official_eval``): what each
asks the scheduler for, the settings its shell reads, and the shell's preamble, in one place.

Rerun triggers, and the workflow's convention for values that must not be one (docs/pipeline.md,
"What reruns a job"). Snakemake records, for every output, the params of the rule that made it,
its shell command as written (before formatting), its input files and its software environment,
and reruns a job when one of these changed (``--rerun-triggers``: all of them by default). It
records no resources. So a rule's values are of three kinds:

* what changes a job's numbers is a param (the task's spec, the seeds, the code version): a
  change reruns the job;
* what the scheduler reads is a resource (:data:`SCHEDULER`: gpu, runtime, mem_mb, slurm_extra
  and a multi-process job's process counts), as Snakemake means it;
* what the shell needs but must rerun nothing when it changes (where the Python, the
  compilation cache and the checkpoints are, the checkpoint cadence, the devices, the video and
  logger flags: :data:`SETTINGS`) is a string resource too, read in the shell as
  ``{resources.<name>}``: the shell's text, and so the recorded command, is the same whatever
  its value. ``tests/test_workflow.py`` checks that changing one replans nothing.

:func:`job_resources` and :func:`job_shell` give every trainer rule its resources and its
shell, so a new resource of these jobs (a per-job accelerator token, say) is one line here.
Plain Python.
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional, Union

__all__ = ["SCHEDULER", "SETTINGS", "ACCELERATOR", "job_resources", "use_local_accelerators", "job_shell", "PREAMBLE",
           "JOB_LINE"]

#: the resources a scheduler reads (besides a multi-process job's, tdmpc2core.pipeline.cluster)
SCHEDULER = ("gpu", "runtime", "mem_mb", "slurm_extra")
#: the settings the trainers' shells read from resources: no rerun trigger (module docstring)
SETTINGS = ("logger", "jax_env", "tdmpc2", "jax_cache", "checkpoints", "checkpoint_every", "keep_checkpoints",
            "max_chunk_seconds", "launcher", "devices", "video")

#: every trainer's shell starts so: PJRT_NPROC sizes the thread pool of JAX's CPU client (XLA
#: reads it before the core count), OMP_NUM_THREADS that of oneDNN/OpenMP kernels; with one
#: thread, XLA's Eigen kernels run single-threaded as well; the compilation cache, the traced
#: programs' cache in it (tdmpc2core.run.program_cache) and the JAX environment
#: (tdmpc2core.pipeline.cluster.Cluster.jax_env)
PREAMBLE = ("export PJRT_NPROC={threads} OMP_NUM_THREADS={threads} "
            "JAX_COMPILATION_CACHE_DIR={resources.jax_cache:q} "
            "TDMPC2_PROGRAM_CACHE_DIR={resources.jax_cache:q}/programs {resources.jax_env}; "
            'if [ {threads} -eq 1 ]; then export XLA_FLAGS="${{XLA_FLAGS:-}} --xla_cpu_multi_thread_eigen=false"; fi; ')
#: a training job's log starts with where it ran (the GPUs its scheduler gave it)
JOB_LINE = ('echo "job on $(hostname): CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES-unset}} '
            'SLURM_JOB_ID=${{SLURM_JOB_ID-none}} {resources.jax_env}" > {log:q}; ')

Resources = Union[Mapping, Callable]


def _per_job(resources: Resources, value: Callable):
    """``value(resources)`` for a rule whose jobs share one resources mapping, else a function
    of the job's wildcards (``resources`` a function of them: a task's own resources)."""
    if callable(resources):
        return lambda wc: value(resources(wc))
    return value(resources)


def job_resources(pipeline, resources: Resources, *, tdmpc2: str, trainer: Optional[Mapping] = None,
                  gpu: Optional[Mapping] = None) -> dict:
    """The ``resources:`` of a trainer rule, in the order the recorded plans show them.

    Args:
      pipeline: the resolved configuration (:class:`tdmpc2core.pipeline.config.Pipeline`).
      resources: the jobs' ``resources`` block (gpu, runtime in minutes, mem_mb), or a function
        of a job's wildcards returning it (the training rules: each task's own).
      tdmpc2: how the shell runs the ``tdmpc2`` command (the workflow's ``TDMPC2``).
      trainer: for a training rule, its trainer settings in order (``checkpoints``,
        ``checkpoint_every``, ..., ``devices``, ``video``): the logger flags come first and these
        after the cache; None for an evaluation job.
      gpu: the GPU entries instead of ``{"gpu": resources["gpu"]}`` (the multi-task job's, with
        its process counts: :meth:`tdmpc2core.pipeline.cluster.Cluster.multitask_resources`).

    Returns:
      ``{name: value or function of the wildcards}``: :data:`SCHEDULER` resources and
      :data:`SETTINGS` (module docstring: the settings are no rerun trigger).
    """
    cluster = pipeline.cluster
    out = dict(pipeline.logger_resources()) if trainer is not None else {}
    out.update(gpu if gpu is not None else {"gpu": _per_job(resources, lambda r: r["gpu"])})
    out["runtime"] = _per_job(resources, lambda r: cluster.job_runtime(r["runtime"]))
    out["mem_mb"] = _per_job(resources, lambda r: r["mem_mb"])
    out["slurm_extra"] = cluster.slurm_extra
    out["jax_env"] = _per_job(resources, lambda r: cluster.jax_env(r["gpu"]))
    out["tdmpc2"] = tdmpc2
    out["jax_cache"] = pipeline.jax_cache
    out.update(trainer or {})
    if pipeline.accelerator_slots:  # a local run on an accelerator (use_local_accelerators): a job
        # that uses it (gpu >= 1: no JAX_PLATFORMS=cpu, Cluster.jax_env) takes one unit
        out[ACCELERATOR] = _per_job(resources, lambda r: 1 if int(r["gpu"]) else 0)
    return out


#: the consumable resource of the jobs that may open the machine's accelerator
ACCELERATOR = "accelerator"


def use_local_accelerators(pipeline, local: bool, found=None):
    """``(pipeline, found)``: the pipeline with ``accelerator_slots`` set for this run, and the
    accelerators found (None for a submitting run). A local run (``local``: Snakemake runs the
    jobs itself, no executor submits them) applies ``cluster.local_accelerator_jobs`` to what
    :func:`tdmpc2core.pipeline.accelerators.local_accelerators` finds (or ``found``); a submitting
    run, or a machine without an accelerator, gets None (no limit). With slots set,
    :func:`job_resources` gives every trainer job one unit of :data:`ACCELERATOR`, and the
    workflow makes it a global resource of that many units."""
    import dataclasses

    from .accelerators import accelerator_job_slots, local_accelerators

    if not local:
        return dataclasses.replace(pipeline, accelerator_slots=None), None
    found = local_accelerators() if found is None else found
    slots = accelerator_job_slots(pipeline.cluster.local_accelerator_jobs, found)
    return dataclasses.replace(pipeline, accelerator_slots=slots), found


def job_shell(command: str, *, job_line: bool = True) -> str:
    """A trainer rule's shell: :data:`PREAMBLE`, the job's first log line (:data:`JOB_LINE`;
    ``job_line`` False: none, the command writes the log itself), then ``command`` (which
    starts with ``exec``, so that a SIGTERM reaches the trainer alone and the job ends when it
    has written its checkpoint: a shell killed first would end the job, and on SLURM the step,
    before that)."""
    return PREAMBLE + (JOB_LINE if job_line else "") + command
