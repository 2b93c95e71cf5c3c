"""How much Python the workflow's files hold (issue 25: at most 300 lines in all of
workflow/ and the Snakefile; tests/test_architecture.py calls :func:`workflow_python_lines`).

A line of Python is a line that is neither blank nor a comment and is not inside a ``rule`` or
``checkpoint`` block or a Snakemake directive (``configfile:``, ``include:``, ``localrules:``,
``wildcard_constraints:``, ``report:``): the rules' bodies are Snakemake's language, what is
left is Python the workflow runs at load. ``onstart:``, ``onsuccess:`` and ``onerror:``
handlers are Python and count, their header line included. Plain Python.
"""
from __future__ import annotations

import re
from pathlib import Path

__all__ = ["python_lines", "workflow_python_lines"]

_BLOCK = re.compile(r"^(\s*)(?:rule|checkpoint)\b[^:]*:\s*(#.*)?$")
_DIRECTIVE = re.compile(r"^(\s*)(?:configfile|include|localrules|wildcard_constraints|report)\s*:")


def python_lines(text: str) -> int:
    """The lines of Python (module docstring) in the text of one Snakefile or .smk file."""
    count, skip_above = 0, None  # skip_above: the indent of the rule/directive being skipped
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        if skip_above is not None:
            if indent > skip_above or stripped.startswith(("#", ")", "]", "}")):
                continue
            skip_above = None
        m = _BLOCK.match(line) or _DIRECTIVE.match(line)
        if m:
            skip_above = len(m.group(1))
            continue
        if not stripped.startswith("#"):
            count += 1
    return count


def workflow_python_lines(root) -> dict[str, int]:
    """Path (relative to ``root``, the checkout) -> lines of Python, for the Snakefile and
    every .smk and .py file under workflow/; sum the values for the workflow's total."""
    root = Path(root)
    files = [root / "Snakefile", *sorted((root / "workflow").rglob("*.smk")),
             *sorted((root / "workflow").rglob("*.py"))]
    return {str(p.relative_to(root)): python_lines(p.read_text(encoding="utf-8")) for p in files if p.is_file()}
