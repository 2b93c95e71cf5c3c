"""The code version of a stage: which code of tdmpc2core a rule's jobs run
(docs/pipeline.md, "Rerunning one seed, one task" and "Code changes").

A hash of the stage's module ``tdmpc2core.stages.<stage>`` and every tdmpc2core module it
imports (followed statically and transitively, at any depth of the code), each as its syntax
tree without docstrings: comments, docstrings and formatting change nothing, any code change of
what the stage runs changes it. cli.py (the dispatcher) is not part of it. With
``rerun_on_code_change: true`` it is a ``params:`` of every rule (a rerun trigger); either way
:func:`code_changes` says at load which finished jobs ran other code. Plain Python (ast).

Parsing the ~90 modules takes 2-3 s of CPU, which every ``snakemake`` start (each dry run, each
cluster job) would pay; so what each module's source text parses to (the hash of its tree
without docstrings, its import statements) is kept in a small JSON file next to the bytecode,
``tdmpc2core/__pycache__/code-versions.json``, keyed by the sha256 of the source text: a file
whose text changed is parsed again, and imports are resolved against the files present on every
call. An unwritable package (a read-only install) just parses every time.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
from pathlib import Path

__all__ = ["LIBRARY_ROOT", "code_version", "module_imports", "recorded_code_version", "code_changes"]

#: the tdmpc2core package whose code the jobs run (this one)
LIBRARY_ROOT = Path(__file__).resolve().parents[1]


def _module_path(name: str) -> Path | None:
    base = LIBRARY_ROOT.parent.joinpath(*name.split("."))
    for p in (base / "__init__.py", base.with_suffix(".py")):
        if p.is_file():
            return p
    return None


def _import_statements(name: str, tree: ast.AST, is_package: bool) -> list[list]:
    """The tdmpc2core import statements of a module, unresolved: ``[module, [names]]`` per
    statement (``[]`` for ``import tdmpc2core.x``), relative imports made absolute."""
    found = []
    pkg = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [[a.name, []] for a in node.names if a.name.split(".")[0] == "tdmpc2core"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - (node.level - 1)]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            if src.split(".")[0] == "tdmpc2core":
                found.append([src, [a.name for a in node.names]])
    return found


def _resolve(statements: list[list]) -> set[str]:
    """The modules named by import statements: ``from x import y`` is y when y is a module
    file under LIBRARY_ROOT, else x."""
    found = set()
    for src, names in statements:
        subs = {f"{src}.{n}" for n in names if _module_path(f"{src}.{n}")}
        found |= subs
        if len(subs) < len(names) or not names:  # a name defined in the module itself, or `import x`
            found.add(src)
    return found


def module_imports(name: str, tree: ast.AST, is_package: bool) -> set[str]:
    """The tdmpc2core modules the module ``name`` (parsed as ``tree``) imports, at any depth of
    its code: ``import tdmpc2core.x``, ``from tdmpc2core.x import y`` (y itself when it is a
    module, else tdmpc2core.x) and relative imports."""
    return _resolve(_import_statements(name, tree, is_package))


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def _memo_path() -> Path:
    return LIBRARY_ROOT / "__pycache__" / "code-versions.json"


@functools.lru_cache(maxsize=None)
def _memo() -> dict:
    """The on-disk memo (module docstring): source sha256 -> [tree hash, import statements]."""
    try:
        with open(_memo_path(), encoding="utf-8") as fh:
            memo = json.load(fh)
        return memo if isinstance(memo, dict) else {}
    except (OSError, ValueError):
        return {}


_UNSAVED: set = set()  # keys parsed in this process and not yet written
_USED: set = set()  # keys looked up in this process
_MEMO_MAX = 4000  # entries; past it, only this process's are kept


def _save_memo() -> None:
    from tdmpc2core.io.atomic import write_json

    memo = _memo()
    if not _UNSAVED:
        return
    _UNSAVED.clear()
    if len(memo) > _MEMO_MAX:
        memo = {k: memo[k] for k in _USED}
    try:
        _memo_path().parent.mkdir(exist_ok=True)
        write_json(_memo_path(), memo)
    except OSError:  # a read-only install: parse every time
        pass


@functools.lru_cache(maxsize=None)
def _module_code(name: str) -> tuple[str, frozenset]:
    """(sha256 of the module's AST dump without docstrings, the library modules it imports),
    parsed once per source text (the on-disk memo) and looked up once per process."""
    from tdmpc2core.pipeline.checks import ConfigError

    path = _module_path(name)
    if path is None:
        raise ConfigError(f"code version: no module {name} under {LIBRARY_ROOT}")
    text = path.read_text(encoding="utf-8")
    key = f"{name}:{hashlib.sha256(text.encode()).hexdigest()}"
    memo = _memo()
    if not (isinstance(memo.get(key), list) and len(memo[key]) == 2):
        tree = ast.parse(text)
        statements = _import_statements(name, tree, path.name == "__init__.py")
        dump = ast.dump(_strip_docstrings(tree), include_attributes=False)
        memo[key] = [hashlib.sha256(dump.encode()).hexdigest(), statements]
        _UNSAVED.add(key)
    _USED.add(key)
    return memo[key][0], frozenset(_resolve(memo[key][1]))


@functools.lru_cache(maxsize=None)
def code_version(stage: str) -> str:
    """sha256 (16 hex digits) of tdmpc2core.stages.<stage> and what it imports, comments and
    docstrings aside (module docstring). Raises tdmpc2core.pipeline.config.ConfigError if a
    module is missing."""
    todo, seen, digest = [f"tdmpc2core.stages.{stage}"], {}, hashlib.sha256()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen[name], imports = _module_code(name)
        todo += sorted(imports - set(seen))
    _save_memo()
    for name in sorted(seen):
        digest.update(f"{name}\n{seen[name]}\n".encode())
    return digest.hexdigest()[:16]


def recorded_code_version(run_json: str) -> str | None:
    """The ``code_version`` a finished job recorded in its run.json; None when the file is
    missing, unreadable or has no such key (written before the stages recorded it)."""
    try:
        with open(run_json, encoding="utf-8") as fh:
            value = json.load(fh).get("code_version")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def code_changes(jobs: dict[str, tuple[str, list[str]]], *, rerun: bool) -> list[str]:
    """One line per rule some of whose finished jobs ran other code than now.

    ``jobs``: rule -> (its stage, the run.json files of its jobs); a job counts as finished
    when its run.json exists (it is written last). ``rerun``: rerun_on_code_change, which the
    line names (true: Snakemake reruns those jobs; false: they are kept). Finished jobs whose
    run.json records no code version are counted in a line of their own.
    """
    lines = []
    for rule, (stage, files) in jobs.items():
        done = [f for f in files if os.path.exists(f)]
        if not done:
            continue
        now = code_version(stage)
        recorded = [recorded_code_version(f) for f in done]
        changed = sorted({r for r in recorded if r is not None and r != now})
        unknown = sum(r is None for r in recorded)
        n = sum(r is not None and r != now for r in recorded)
        what = "rerun (rerun_on_code_change: true)" if rerun else "kept (rerun_on_code_change: false)"
        if n:
            lines.append(f"code changed: {n} of {len(done)} finished {rule} job output(s) ran code version "
                         f"{', '.join(changed)}, now {now} (tdmpc2core.stages.{stage} and its imports); {what}")
        if unknown and not rerun:
            lines.append(f"code version unknown: {unknown} of {len(done)} finished {rule} job output(s) record "
                         f"none in run.json; kept (rerun_on_code_change: false)")
    return lines
