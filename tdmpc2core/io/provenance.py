"""Where results came from: package versions, git commit, platform.

Cheap by default: package versions come from installed metadata (nothing is imported);
JAX is imported only by :func:`platform_info` with ``include_jax=True``.
"""
from __future__ import annotations

import hashlib
import json
import operator
import os
import platform
import subprocess
from importlib import metadata
from typing import Iterable, Optional

#: The library's own stack and the pipeline's tools (distribution names as pip knows them);
#: the suites' packages go between them (:func:`packages`).
CORE_PACKAGES = ("tdmpc2core", "jax", "jaxlib", "flax", "optax")
TOOL_PACKAGES = ("snakemake", "numpy", "pandas", "pyarrow", "rliable", "matplotlib")


def packages(suite_packages: Iterable[str]) -> tuple[str, ...]:
    """The distributions whose versions a run records: :data:`CORE_PACKAGES`, then
    ``suite_packages`` (what the registered suites need:
    :func:`tdmpc2core.envs.registry.packages`, passed by the caller since ``io/`` imports no
    ``envs/``), then :data:`TOOL_PACKAGES`, each once."""
    return tuple(dict.fromkeys((*CORE_PACKAGES, *suite_packages, *TOOL_PACKAGES)))


#: The distributions the report shows by default: :func:`packages` of the built-in suites'
#: packages (``tests/test_suites.py`` checks this equals ``packages(registry.packages())``).
PACKAGES = packages(("gymnax", "brax", "mujoco", "mujoco-mjx", "playground", "dm-control", "metaworld", "myosuite",
                     "myo-sim"))


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, Optional[str]]:
    """{distribution: version or None if not installed}."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_info(path: str | os.PathLike = ".") -> dict:
    """{"commit": sha or None, "dirty": bool or None, "describe": str or None} of the git work
    tree containing ``path`` (None values outside a git work tree or without git). ``dirty``
    is True when tracked files differ from the commit or untracked files (not ignored) exist."""
    def git(*args) -> Optional[str]:
        try:
            res = subprocess.run(["git", *args], cwd=os.fspath(path), capture_output=True,
                                 text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            return None
        return res.stdout.strip() if res.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None, "describe": None}
    status = git("status", "--porcelain")  # untracked, not ignored files count as changes
    return {"commit": commit, "dirty": bool(status) if status is not None else None,
            "describe": git("describe", "--always", "--dirty")}


def short_commit(path: str | os.PathLike = ".") -> str:
    """The short commit of the git work tree containing ``path``, with ``-dirty`` when it has
    changes (:func:`git_info`); ``"unknown"`` outside a git work tree or without git."""
    info = git_info(path)
    return "unknown" if info["commit"] is None else info["commit"][:7] + ("-dirty" if info["dirty"] else "")


def platform_info(include_jax: bool = False) -> dict:
    """OS, Python, CPU count (usable by this process), and with ``include_jax`` the JAX
    backend, device kind and device count, and the default matmul precision."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    info = {
        "system": platform.platform(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable,
    }
    if include_jax:
        try:
            import jax

            devices = jax.devices()
            info.update(jax_backend=jax.default_backend(), device_kind=devices[0].device_kind,
                        device_count=len(devices),
                        jax_default_matmul_precision=str(jax.config.jax_default_matmul_precision))
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            info["jax_error"] = f"{type(exc).__name__}: {exc}"
    return info


def collect(path: str | os.PathLike = ".", include_jax: bool = False,
            names: Iterable[str] = PACKAGES) -> dict:
    """Everything above in one dict: {"packages": :func:`package_versions` of ``names``,
    "git", "platform"}."""
    return {"packages": package_versions(names), "git": git_info(path), "platform": platform_info(include_jax)}


def json_default(o):
    """``json.dumps``'s ``default`` for what the artifacts' JSON holds: a NumPy scalar as its
    Python value, an array as a list, anything else as ``str``. Used by run ids and by the
    episode datasets' metadata (io/dataset.py), so both encode a value alike."""
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def run_id(task: str, seed: int, spec, agent_config) -> str:
    """The id of a single-task training run: ``"{task}/seed{seed}/{digest}"``.

    ``digest`` is the first 12 hex digits of the SHA-256 of the canonical JSON (sorted keys, no
    spaces) of ``{"spec": spec, "agent_config": agent_config}``: the task settings and the
    resolved agent configuration, which is what ``train-single`` writes into the run's
    ``run.json`` (its keys ``task``, ``seed``, ``spec``, ``agent_config``) and into the exported
    episodes' provenance. So the id is a function of run.json's contents, the same before and
    after a JSON round trip (recomputed from a run.json written before run.json had a ``run_id``
    key, or from a version-1 dataset's provenance), the same for a resumed run as for an
    uninterrupted one, and different for two runs of one task and seed with other settings
    (e.g. two protocols). ``task/seed{seed}`` is also the run's folder under ``results/single``
    (docs/artifacts.md, "Episode datasets").

    Raises ValueError for a seed that is not an int.
    """
    try:
        if isinstance(seed, bool):
            raise TypeError
        seed = operator.index(seed)  # int or NumPy integer
    except TypeError:
        raise ValueError(f"run_id: seed must be an int, got {seed!r}") from None
    # through JSON first: what a run.json holds (tuples as lists, dict keys as strings), then sorted
    plain = json.loads(json.dumps({"spec": spec, "agent_config": agent_config}, default=json_default))
    text = json.dumps(plain, sort_keys=True, separators=(",", ":"))
    return f"{task}/seed{seed}/{hashlib.sha256(text.encode()).hexdigest()[:12]}"


__all__ = ["CORE_PACKAGES", "TOOL_PACKAGES", "packages", "PACKAGES", "package_versions", "git_info", "platform_info",
           "collect", "run_id", "json_default"]
