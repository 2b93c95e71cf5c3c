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
# the layers of docs/architecture.md's picture: the packages, and extensions.py (the agents'
# extension phases, between model/ and the agents)
LAYERS = ("model", "envs", "io", "run", "extensions", "agents", "report", "pipeline", "stages")
# layer -> the other tdmpc2core layers it may import (itself always allowed); any layer may read
# resources/ (the packaged tables) and version.py, which import nothing of the package
ALLOWED = {
    "model": set(),
    "envs": set(),
    "io": set(),
    "extensions": {"model"},
    "report": {"io"},  # io imports no other layer: atomic writes from one helper (io/atomic.py)
    "run": {"io"},  # the loggers' registry is io's, where the pipeline reads it too
    # the workflow's logic: configuration checks (model.config, the env ids, the extensions'
    # names), official task sets and the logger registry (io), end-of-run hooks; never JAX or
    # Snakemake at import (checked below)
    "pipeline": {"model", "envs", "io", "extensions"},
    "agents": {"model", "envs", "io", "run", "extensions"},
}
LEAVES = ("resources", "version")


def modules():
    return sorted(p for p in PKG.rglob("*.py"))


def layer_of(path: Path) -> str:
    rel = path.relative_to(PKG)
    if len(rel.parts) == 1 and rel.stem in LAYERS:
        return rel.stem  # a layer of one module (extensions.py)
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


def test_resources_and_version_import_nothing_of_the_package():
    for path in modules():
        rel = path.relative_to(PKG)
        if rel.parts[0].removesuffix(".py") in LEAVES:
            assert not {n for n in imported(path) if n.split(".")[0] == "tdmpc2core"}, rel


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


# ---- issue 25: the layout goals, checked from the source -----------------------------------
MAX_FUNCTION_LINES = 100


def test_no_function_in_the_library_over_100_lines():
    """Every function of tdmpc2core/ fits on a screen or two (docstring included): long host
    code is split into named steps (docs/architecture.md)."""
    long = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PKG)}:{node.name} ({n} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_workflow_holds_at_most_300_lines_of_python():
    """The workflow names files and calls stages; its logic is in tdmpc2core/pipeline/, where
    unit tests reach it (tests/test_pipeline_config.py, test_pipeline_hooks.py). Counted as
    tdmpc2core.pipeline.lines counts: code lines outside rule blocks and directives."""
    from tdmpc2core.pipeline.lines import workflow_python_lines

    per_file = workflow_python_lines(PKG.parent)
    assert "workflow/rules/common.smk" in per_file and "Snakefile" in per_file
    assert sum(per_file.values()) <= 300, per_file


def test_pipeline_imports_neither_jax_nor_snakemake():
    """The workflow resolves and checks a configuration on a login node without JAX."""
    code = ("import sys, tdmpc2core.pipeline.config, tdmpc2core.pipeline.hooks, tdmpc2core.pipeline.stops, "
            "tdmpc2core.pipeline.codeversion, tdmpc2core.pipeline.cluster; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'snakemake')); assert not bad, bad")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


# suite names are dispatched on in the registry alone (tdmpc2core/envs/registry.py and one
# module per suite under envs/suites/): nowhere else compares with, or indexes by, a suite name
def _builtin_suite_names() -> set[str]:
    from tdmpc2core.envs.suites import BUILTIN

    return {s.name for s in BUILTIN}


SUITE_NAMES = _builtin_suite_names()  # every built-in suite, one added tomorrow included
REGISTRY = {"envs/registry.py", "envs/suites"}


def _suite_dispatch(tree) -> list[int]:
    """Line numbers of comparisons with, dict keys of and subscripts by a suite-name literal."""
    def literals(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return set().union(set(), *(literals(e) for e in node.elts))
        return set()

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            found = set().union(*(literals(x) for x in [node.left, *node.comparators]))
        elif isinstance(node, ast.Dict):
            found = {k.value for k in node.keys if isinstance(k, ast.Constant)}
        elif isinstance(node, ast.Subscript):
            found = literals(node.slice)
        else:
            continue
        if found & SUITE_NAMES:
            lines.append(node.lineno)
    return lines


def test_the_suite_registry_is_the_only_place_suite_names_are_dispatched_on():
    import re

    bad = []
    for path in modules():
        rel = path.relative_to(PKG).as_posix()
        if rel in REGISTRY or rel.rsplit("/", 1)[0] in REGISTRY:
            continue
        bad += [f"{rel}:{n}" for n in _suite_dispatch(ast.parse(path.read_text(), filename=str(path)))]
    smk = [PKG.parent / "Snakefile", *sorted((PKG.parent / "workflow").rglob("*.smk"))]
    pattern = re.compile(r"""(==|!=|\bin\b)\s*[\(\[{]?\s*["'](%s)["']""" % "|".join(SUITE_NAMES))
    for path in smk:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                bad.append(f"{path.relative_to(PKG.parent)}:{n}")
    assert not bad, f"suite names dispatched on outside the registry (use tdmpc2core.envs.suite_for): {bad}"


def test_the_dispatch_check_sees_a_dispatch():
    """The check above is not blind: each form it looks for is found."""
    for code in ('x == "gymnax"', 'x in ("brax", "y")', '{"playground": 1}[k]', 'd["dmcontrol"]'):
        assert _suite_dispatch(ast.parse(code)), code
    assert not _suite_dispatch(ast.parse('x == "pendulum"'))
    assert {"gymnax", "brax", "playground", "dmcontrol"} <= SUITE_NAMES


# ---- issue 46: no import cycle, lazy imports counted ------------------------------------------
def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_edges(name: str, source: str, is_package: bool, known: set) -> set:
    """The modules of ``known`` that module ``name`` imports, at any depth of its code (an import
    inside a function counts: it hides a dependency, it does not remove it): ``import a.b`` is
    a.b; ``from a import b`` is a.b when that is a module, else a (relative imports resolved)."""
    package = name.split(".") if is_package else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else (node.module or "")
            for a in node.names:
                out |= {f"{base}.{a.name}"} if f"{base}.{a.name}" in known else ({base} if base in known else set())
    return out - {name}


def import_cycles(graph: dict) -> list:
    """The import cycles of ``graph`` (module -> the modules it imports): each strongly connected
    set of more than one module, sorted (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
                on.discard(comp[-1])
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_cycle_in_the_library_lazy_imports_counted():
    """No module of tdmpc2core/ imports, directly or through others, a module that imports it;
    imports inside functions count as much as those at the top (docs/architecture.md, "Layers")."""
    paths = {module_name(p): p for p in modules()}
    graph = {n: import_edges(n, p.read_text(), p.name == "__init__.py", set(paths)) for n, p in paths.items()}
    assert not import_cycles(graph), f"import cycles (each: the modules that import one another): " \
                                     f"{import_cycles(graph)}"


def test_the_cycle_check_sees_a_cycle_closed_by_a_lazy_import():
    """The check above is not blind: a cycle whose last import sits inside a function is found,
    as is one through a package's __init__; a chain is not a cycle."""
    known = {"p", "p.a", "p.b", "p.c"}
    sources = {"p.a": "from p import b\n", "p.b": "def f():\n    from . import c\n", "p.c": "import p.a\n",
               "p": "from .a import x\n"}
    graph = {n: import_edges(n, src, n == "p", known) for n, src in sources.items()}
    assert graph == {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p": {"p.a"}}
    assert import_cycles(graph) == [["p.a", "p.b", "p.c"]]
    assert import_cycles({**graph, "p.c": set()}) == []
    assert import_cycles({"p": {"p.a"}, "p.a": {"p"}}) == [["p", "p.a"]]


def test_every_module_is_in_the_layer_picture():
    """docs/architecture.md's layer picture names every module of tdmpc2core/ in its package's
    part (a module added without its place in the picture fails here)."""
    import re

    text = (PKG.parent / "docs" / "architecture.md").read_text()
    picture = text.split("## Layers", 1)[1].split("```", 2)[1]
    parts, current = {}, None
    for line in picture.splitlines():
        m = re.match(r"^\s*(?:[│├└─ ]*)?(top|resources|[a-z]+)/\s", line.replace("──", "  "))
        if m and m.group(1) in {*LAYERS, "top", "resources"}:
            current = m.group(1)
        if current is not None:
            parts[current] = parts.get(current, "") + line + "\n"
    missing = []
    for path in modules():
        rel = path.relative_to(PKG)
        part = rel.parts[0] if len(rel.parts) > 1 else "top"
        if path.name == "__init__.py" and part != "top":
            continue
        if part == "resources":
            continue  # named as a package: its reader and tables
        if not re.search(rf"\b{re.escape(path.name)}", parts.get(part, "")):
            missing.append(str(rel))
    assert not missing, f"modules missing from docs/architecture.md's layer picture: {missing}"
