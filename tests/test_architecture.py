"""The package's layers import one way (docs/architecture.md), and the host side of a run
lives in the run driver only.

Read from the source with ``ast`` (nothing is imported), so a lazy import inside a function
counts as much as one at the top of a module.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "tdmpc2core"
LAYERS = ("model", "envs", "io", "run", "agents", "report", "stages")
# layer -> the other tdmpc2core layers it may import (itself always allowed)
ALLOWED = {
    "model": set(),
    "envs": set(),
    "io": set(),
    "report": set(),
    "run": {"io"},
    "agents": {"model", "envs", "io", "run"},
}


def modules():
    return sorted(p for p in PKG.rglob("*.py"))


def layer_of(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else "top"


def imported(path: Path) -> set[str]:
    """Absolute dotted names of every module ``path`` imports (tdmpc2core.* resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    pkg_parts = ["tdmpc2core", *path.relative_to(PKG).parent.parts]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg_parts[: len(pkg_parts) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names.add(mod)
            names |= {f"{mod}.{a.name}" for a in node.names}  # `from . import x` imports module x
    return names


def internal_layers(names: set[str]) -> set[str]:
    out = set()
    for n in names:
        parts = n.split(".")
        if parts[0] == "tdmpc2core" and len(parts) > 1 and parts[1] in LAYERS:
            out.add(parts[1])
    return out


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layers_import_one_way(layer):
    bad = {}
    for path in modules():
        if layer_of(path) != layer:
            continue
        wrong = internal_layers(imported(path)) - ALLOWED[layer] - {layer}
        if wrong:
            bad[str(path.relative_to(PKG))] = sorted(wrong)
    assert not bad, f"the {layer} layer may import only {sorted(ALLOWED[layer])}; found {bad}"


def test_the_library_never_imports_snakemake():
    users = [str(p.relative_to(PKG)) for p in modules() if any(n.split(".")[0] == "snakemake" for n in imported(p))]
    assert not users


def test_no_schedule_checkpoint_or_signal_code_in_the_agents():
    """Everything a run does on the host (schedule, wall-time caps, stops, signals, checkpoint
    files, the history's storage) belongs to the run driver; an agent module may only call it."""
    forbidden_modules = {"signal", "time", "tdmpc2core.io.checkpoint", "tdmpc2core.io.atomic"}
    forbidden_names = {"SubChunkSizer", "latest_checkpoint", "perf_counter", "history_to_arrays",
                       "history_from_arrays", "compare_settings", "should_stop", "checkpoint_every"}
    for path in (PKG / "agents").glob("*.py"):
        names = imported(path)
        assert not names & forbidden_modules, (path.name, sorted(names & forbidden_modules))
        used = {n.id for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Name)}
        used |= {n.attr for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute)}
        used |= {a.arg for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.arguments)
                 for a in n.args + n.kwonlyargs}
        assert not used & forbidden_names, (path.name, sorted(used & forbidden_names))


def test_importer_knows_relative_imports():
    """The import reader itself: a relative import resolves to its absolute module."""
    names = imported(PKG / "agents" / "single_task.py")
    assert "tdmpc2core.run.driver" in names and "tdmpc2core.model.config" in names


def test_model_config_and_the_public_package_import_without_jax():
    """A login node without JAX validates configurations (the workflow's load-time checks)."""
    code = ("import sys, tdmpc2core, tdmpc2core.model, tdmpc2core.model.config; "
            "assert 'jax' not in sys.modules, sorted(m for m in sys.modules if m.startswith('jax'))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
