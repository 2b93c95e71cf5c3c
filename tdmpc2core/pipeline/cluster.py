"""What the workflow's jobs ask a scheduler for, and how they use GPUs (config key
``cluster``; docs/pipeline.md, "SLURM" and "Preemption, time limits and resuming").

Every submitted rule sets its own resources from the configuration (gpu, runtime, mem_mb,
slurm_extra), so nothing it needs comes from a profile's default-resources. None of these is a
rerun trigger (they are the rules' ``resources:``, not ``params:``). Plain Python.
"""
from __future__ import annotations

import dataclasses

__all__ = ["Cluster", "cluster_from_config", "JAX_CACHE_MAX_BYTES"]

# JAX's persistent compilation cache, shared by every training job: with a size limit set, JAX
# guards each read and write of an entry with a file lock (filelock, on <cache>/.lockfile), so
# concurrent jobs never read an entry another is still writing (tests/test_workflow.py runs two
# at once on one folder). The limit is far above what the workflow's programs take (MBs each).
JAX_CACHE_MAX_BYTES = 100 * 2**30


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The ``cluster`` block resolved: ``max_job_minutes`` (longest --time of one job, minutes),
    ``stop_lead_seconds`` (SIGTERM that long before a job's limit), ``slurm_extra`` (the training
    jobs' sbatch options: --signal=TERM@<stop_lead_seconds>, then the config's own),
    ``gpu_mem_fraction`` and ``gpu_preallocate`` (a GPU job's JAX memory settings),
    ``threads_per_job`` (a job's CPU threads unless its resources set ``threads``), ``devices``
    (each training job's ``--devices``: auto, all or a count; tdmpc2core.run.devices) and the
    multi-task job's ``multitask_nodes`` and ``multitask_tasks_per_node`` (processes per node,
    one per GPU; more than one process in all: a multi-process job started with ``srun``)."""

    max_job_minutes: int
    stop_lead_seconds: int
    slurm_extra: str
    gpu_mem_fraction: float
    gpu_preallocate: bool
    threads_per_job: int
    devices: str = "auto"
    multitask_nodes: int = 1
    multitask_tasks_per_node: int = 1
    #: how many jobs that use this machine's accelerator run at once in a local run ("auto": one
    #: where an accelerator is found, no limit where none is; tdmpc2core/pipeline/accelerators.py)
    local_accelerator_jobs: object = "auto"

    @property
    def multitask_processes(self) -> int:
        """Processes of a multi-task job: nodes x tasks per node (one per GPU)."""
        return self.multitask_nodes * self.multitask_tasks_per_node

    def multitask_resources(self, gpu: int) -> dict:
        """The multi-task job's GPU and process resources for the SLURM executor, ``gpu`` being
        its GPUs per node (``multitask.resources.gpu``).

        One process: ``{"gpu": gpu}`` (``sbatch --gpus``). Several (nodes x tasks per node):
        the executor's multi-process job (``mpi: srun``, ``nodes``, ``tasks_per_node`` or, one
        process per node, ``tasks``), its GPUs as ``gres: gpu:<gpu>`` per node with one task
        per GPU (``tasks_per_gpu: 1``) instead of ``--gpus`` (a job-wide count SLURM could spread
        unevenly); the shell starts the processes with ``srun`` (:meth:`multitask_launcher`) and
        each joins jax.distributed from SLURM's environment."""
        gpu = int(gpu)
        if self.multitask_processes == 1:
            return {"gpu": gpu}
        out = {"gpu": 0, "mpi": "srun", "nodes": self.multitask_nodes}
        if self.multitask_tasks_per_node > 1:
            out["tasks_per_node"] = self.multitask_tasks_per_node
        else:
            out["tasks"] = self.multitask_processes
        if gpu:
            out.update(gres=f"gpu:{gpu}", tasks_per_gpu=1)
        return out

    def multitask_launcher(self) -> str:
        """How the multi-task job's shell starts the trainer: ``exec`` (one process) or ``srun``
        with the job's tasks (several processes; refused outside a SLURM allocation, where no
        ``srun`` can start them)."""
        if self.multitask_processes == 1:
            return "exec"
        n = self.multitask_processes
        return (f'if [ -z "${{SLURM_JOB_ID:-}}" ]; then echo "cluster.multitask_nodes x multitask_tasks_per_node = {n} '
                'processes need a SLURM job (the slurm profile); this run is local: set both to 1" >&2; exit 2; fi; '
                f"exec srun --ntasks={n} --kill-on-bad-exit=1")

    def job_runtime(self, minutes) -> int:
        """A submitted job's --time (minutes): the run's runtime, at most max_job_minutes."""
        return min(int(minutes), self.max_job_minutes)

    def job_threads(self, resources: dict) -> int:
        """A job's CPU threads: its ``resources.threads``, else threads_per_job (Snakemake
        lowers either to --cores)."""
        return int(resources.get("threads") or self.threads_per_job)

    def extra_jobs(self, minutes) -> int:
        """How many more jobs than one a run of ``minutes`` needs under max_job_minutes: a job
        stopped at its time limit checkpoints, fails and is resubmitted; the retry resumes."""
        return max(0, -(-int(minutes) // self.max_job_minutes) - 1)

    def jax_env(self, gpu) -> str:
        """The JAX environment of a training job's shell: the compilation cache's size limit
        (which turns on its file lock), then JAX_PLATFORMS=cpu for a job without a GPU (it
        neither looks for a GPU nor grabs one it was not given), or for a GPU job the memory
        settings gpu_mem_fraction / gpu_preallocate. A GPU job sees the GPUs its scheduler gave
        it (SLURM sets CUDA_VISIBLE_DEVICES); the platform is not forced, so it runs on the CPU
        where JAX has no GPU backend (run.json records the backend)."""
        cache = f"JAX_COMPILATION_CACHE_MAX_SIZE={JAX_CACHE_MAX_BYTES}"
        if not int(gpu):
            return f"{cache} JAX_PLATFORMS=cpu"
        return (f"{cache} XLA_PYTHON_CLIENT_PREALLOCATE={'true' if self.gpu_preallocate else 'false'} "
                f"XLA_PYTHON_CLIENT_MEM_FRACTION={self.gpu_mem_fraction:g}")

    def retries(self, long_runs: dict, asked: int) -> dict[str, tuple[int, str]]:
        """Where jobs are submitted: rule -> (its retries, the line saying so) for each training
        rule whose longest run (``long_runs``: rule -> minutes) needs more than one job: one more
        retry per further job, on top of the ``asked`` retries (the profile's ``retries``)."""
        out = {}
        for name, minutes in long_runs.items():
            extra = self.extra_jobs(minutes)
            if extra:
                out[name] = (asked + extra, f"{name}: runs of up to {minutes} min in jobs of at most "
                             f"{self.max_job_minutes} min (cluster.max_job_minutes): up to {extra + 1} jobs "
                             f"each, {asked + extra} retries")
        return out


def cluster_from_config(config: dict, *, max_chunk_seconds: float) -> Cluster:
    """The ``cluster`` block of the (schema-validated) configuration. Raises
    tdmpc2core.pipeline.config.ConfigError if max_chunk_seconds is not below
    cluster.stop_lead_seconds (a job told to stop could be killed before its checkpoint)."""
    from tdmpc2core.pipeline.checks import ConfigError

    c = config["cluster"]
    if max_chunk_seconds >= float(c["stop_lead_seconds"]):
        raise ConfigError(
            f"config: max_chunk_seconds={max_chunk_seconds:g} is not below cluster.stop_lead_seconds="
            f"{c['stop_lead_seconds']}: a job told to stop that long before its time limit finishes its "
            "running call first (up to max_chunk_seconds) and then writes its checkpoint, so it could be killed "
            "before the checkpoint; lower max_chunk_seconds (e.g. 30) or raise cluster.stop_lead_seconds")
    # sbatch --signal=TERM@N: SIGTERM to every process of the job step N s before its time limit
    # (the trainer checkpoints and exits 143; the retry resumes), then the config's own options
    extra = " ".join(x for x in (f"--signal=TERM@{int(c['stop_lead_seconds'])}", c.get("slurm_extra") or "") if x)
    return Cluster(max_job_minutes=int(c["max_job_minutes"]), stop_lead_seconds=int(c["stop_lead_seconds"]),
                   slurm_extra=extra, gpu_mem_fraction=float(c["gpu_mem_fraction"]),
                   gpu_preallocate=bool(c["gpu_preallocate"]), threads_per_job=int(config["threads_per_job"]),
                   devices=str(c.get("devices", "auto")), multitask_nodes=int(c.get("multitask_nodes", 1)),
                   multitask_tasks_per_node=int(c.get("multitask_tasks_per_node", 1)),
                   local_accelerator_jobs=_local_accelerator_jobs(c.get("local_accelerator_jobs", "auto")))


def _local_accelerator_jobs(value):
    """``cluster.local_accelerator_jobs`` checked: "auto" or an int >= 1 (ConfigError naming it)."""
    from tdmpc2core.pipeline.accelerators import Accelerators, accelerator_job_slots
    from tdmpc2core.pipeline.checks import ConfigError

    try:
        accelerator_job_slots(value, Accelerators(None, 0, ""))
    except ValueError as e:
        raise ConfigError(f"config: {e}") from None
    return value
