"""What accelerators this machine has, read without importing JAX (the workflow's plan step).

A local ``snakemake --cores all`` would start every ready training job at once. On a machine
with one TPU chip only one process at a time may open it (the second fails with libtpu's
"multi-process lockfile" error); on a GPU each JAX process preallocates 75% of the memory, so
the second runs out of it. The workflow therefore runs the jobs that use the accelerator one at
a time when this module finds one (:func:`accelerator_job_slots`; docs/pipeline.md, "One
accelerator"). Asking JAX is no option at plan time: it is slow to import, a login node may
have none, and on a TPU machine opening the backend would take the chip from a running job.

The evidence, in order:

- ``JAX_PLATFORMS``: a list without ``tpu``, ``cuda``, ``rocm`` or ``gpu`` (e.g. ``cpu``) means
  the jobs run on the CPU whatever the machine has;
- NVIDIA GPUs: ``CUDA_VISIBLE_DEVICES`` when set (its entries; empty or ``-1``: none), else the
  ``/dev/nvidia<N>`` device files;
- AMD GPUs: ``ROCR_VISIBLE_DEVICES`` / ``HIP_VISIBLE_DEVICES`` when set, else ``/dev/kfd`` with
  ``/dev/dri/renderD*`` files;
- TPUs: ``/dev/accel<N>`` or ``/dev/vfio/<N>`` device files, or the ``TPU_ACCELERATOR_TYPE`` /
  ``TPU_NAME`` / ``TPU_WORKER_ID`` variables a TPU machine's image sets.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping, NamedTuple, Optional

#: the Snakemake resource every job that may open the accelerator asks for (one unit)
RESOURCE = "accelerator"
_ACCEL_PLATFORMS = {"tpu", "cuda", "rocm", "gpu"}
_TPU_VARS = ("TPU_ACCELERATOR_TYPE", "TPU_NAME", "TPU_WORKER_ID")


class Accelerators(NamedTuple):
    """kind: "tpu", "gpu" or None (none found); count: devices found (0 with none);
    evidence: what was read, for the log line (e.g. ``"/dev/nvidia0, /dev/nvidia1"``)."""

    kind: Optional[str]
    count: int
    evidence: str


def _visible(value: str) -> int:
    value = value.strip()
    if not value or value == "-1":
        return 0
    return len([v for v in value.split(",") if v.strip()])


def _numbered(dev: Path, pattern: str) -> list:
    try:
        return sorted(p for p in dev.iterdir() if re.fullmatch(pattern, p.name))
    except OSError:
        return []


def local_accelerators(environ: Optional[Mapping[str, str]] = None, dev: Path = Path("/dev")) -> Accelerators:
    """The accelerators a job started on this machine would use (module docstring), from the
    environment ``environ`` (default ``os.environ``) and the device files under ``dev``."""
    env = os.environ if environ is None else environ
    platforms = {p.strip().lower() for p in env.get("JAX_PLATFORMS", "").split(",") if p.strip()}
    if platforms and not platforms & _ACCEL_PLATFORMS:
        return Accelerators(None, 0, f"JAX_PLATFORMS={env['JAX_PLATFORMS']}")
    for var in ("CUDA_VISIBLE_DEVICES",):
        if var in env:
            n = _visible(env[var])
            return Accelerators("gpu" if n else None, n, f"{var}={env[var]!r}")
    nvidia = _numbered(dev, r"nvidia\d+")
    if nvidia:
        return Accelerators("gpu", len(nvidia), ", ".join(str(p) for p in nvidia))
    for var in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        if var in env:
            n = _visible(env[var])
            return Accelerators("gpu" if n else None, n, f"{var}={env[var]!r}")
    render = _numbered(dev / "dri", r"renderD\d+")
    if (dev / "kfd").exists() and render:
        return Accelerators("gpu", len(render), f"{dev / 'kfd'}, " + ", ".join(str(p) for p in render))
    tpu = _numbered(dev, r"accel\d+") or _numbered(dev / "vfio", r"\d+")
    if tpu:
        return Accelerators("tpu", len(tpu), ", ".join(str(p) for p in tpu))
    named = [v for v in _TPU_VARS if env.get(v)]
    if named:
        return Accelerators("tpu", 1, ", ".join(f"{v}={env[v]}" for v in named))
    return Accelerators(None, 0, "no accelerator device files or variables")


def accelerator_job_slots(setting, found: Accelerators) -> Optional[int]:
    """How many jobs that use the accelerator may run at once on this machine: ``setting`` (the
    config's ``cluster.local_accelerator_jobs``) ``"auto"`` gives 1 where an accelerator was
    found (each job then has every device of the machine, and a training job splits its seeds
    over them: ``cluster.devices``) and None (no limit) where none was; an int >= 1 is taken as
    it is (e.g. 2 on a GPU machine whose jobs each fit, with ``XLA_PYTHON_CLIENT_PREALLOCATE=false``).

    Raises:
      ValueError: ``setting`` is neither "auto" nor an int >= 1.
    """
    if setting == "auto":
        return 1 if found.kind else None
    if isinstance(setting, bool) or not isinstance(setting, int) or setting < 1:
        raise ValueError(f"cluster.local_accelerator_jobs={setting!r}: accepted: 'auto' or an integer >= 1")
    return setting


__all__ = ["RESOURCE", "Accelerators", "local_accelerators", "accelerator_job_slots"]
