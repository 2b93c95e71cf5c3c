"""The plan of a ``snakemake -n -p`` run as a stable text, to compare plans across changes.

Snakemake prints each planned job as a block (``rule NAME:`` then indented ``key: value``
lines, then ``Shell command: ...`` with ``-p``), the job stats table and a summary of the
reasons. Its output varies from run to run in things no change of the workflow causes: the
timestamps, the job ids, the order of the jobs and of the files inside a reason (Python sets),
the Python that runs the stages and the temporary folder. :func:`normalise_dry_run` removes
exactly those, so two plans of the same workflow and configuration give the same text.
tests/fixtures/dryrun/*.txt hold the plans recorded this way (tests/test_workflow.py).
"""
from __future__ import annotations

import re

__all__ = ["normalise_dry_run", "DRY_RUN_ARGS"]

#: the flags of the recorded dry runs (tests/test_workflow.py, test_dry_run_plans_are_recorded)
DRY_RUN_ARGS = ("-n", "-p", "--cores", "4")

_JOB_START = re.compile(r"^(?:local)?(?:rule|checkpoint) (\S+):$")
# fields whose value is a comma-separated list of files in no stable order
_FILE_LISTS = ("input", "output", "log", "benchmark")
_SKIPPED = ("jobid",)


def _sorted_reason(value: str) -> str:
    """A reason line with the files of each of its parts sorted: Snakemake joins parts with
    "; " and lists a part's files after its label, comma-separated, in set order."""
    parts = []
    for part in value.split("; "):
        label, sep, files = part.partition(": ")
        parts.append(label + sep + ", ".join(sorted(files.split(", "))) if sep else part)
    return "; ".join(parts)


def _resources(value: str, python: str) -> str:
    """The resources line without ``tmpdir`` (the machine's) and with the Python path named."""
    items = [r for r in value.split(", ") if not r.startswith("tmpdir=")]
    return ", ".join(items).replace(python, "PYTHON")


def _job(lines: list[str], python: str) -> str:
    """One job block (its ``rule`` line first; with ``-p`` its shell command last, which may
    span lines: resolve_config prints the resolved YAML) as normalised text."""
    out = [lines[0].strip()]
    for i, line in enumerate(lines[1:], 1):
        if line.startswith("Shell command: "):
            shell = "\n".join(lines[i:])[len("Shell command: "):].rstrip()
            out.append("    shell: " + shell.replace(python, "PYTHON"))
            break
        key, _, value = line.strip().partition(": ")
        if not line.startswith("    ") or key in _SKIPPED:
            continue
        if key == "reason":
            value = _sorted_reason(value)
        elif key == "resources":
            value = _resources(value, python)
        elif key == "input":
            value = ", ".join(sorted(value.split(", ")))
        out.append(f"    {key}: {value}")
    return "\n".join(out)


_BLOCK_END = re.compile(r"^(?:\[.*\d\d:\d\d:\d\d.*\]|Job stats:|Reasons:|This was a dry-run.*)$")


def normalise_dry_run(text: str, *, python: str) -> str:
    """The planned jobs of a ``snakemake -n -p`` output, sorted, then its job stats and reasons.

    ``text``: stdout and stderr of the dry run; ``python``: the interpreter path the jobs'
    commands name (``sys.executable`` of the Snakemake process), written as ``PYTHON``.
    Each job keeps its rule name, wildcards, files, reason (files sorted), resources (without
    ``tmpdir``) and shell command; the timestamps and job ids go. Raises ValueError if the text
    holds no "Job stats" table (not a dry run's output, or the workflow refused to load).
    """
    if "Job stats:" not in text:
        raise ValueError("normalise_dry_run: no 'Job stats:' table in the output (did the dry run fail?)")
    jobs, current = [], None
    for line in text.splitlines():
        if _JOB_START.match(line):
            current = [line]
            jobs.append(current)
        elif _BLOCK_END.match(line):
            current = None
        elif current is not None:
            current.append(line)
    # the last stats table (Snakemake prints one before the jobs and one after them)
    tail = text.rpartition("Job stats:")[2]
    summary = [line.rstrip() for line in tail.splitlines()
               if line.strip() and not line.startswith("This was a dry-run")]
    # the stats table's rows follow the DAG's order: sorted (the reasons' rule lists are sorted)
    rows = [i for i, line in enumerate(summary) if re.match(r"^\S+\s+\d+$", line)
            and not line.startswith("total")]
    if rows:
        summary[rows[0]:rows[-1] + 1] = sorted(summary[rows[0]:rows[-1] + 1])
    blocks = sorted(_job(j, python) for j in jobs)
    return "\n\n".join(blocks) + "\n\nJob stats:\n" + "\n".join(summary) + "\n"
