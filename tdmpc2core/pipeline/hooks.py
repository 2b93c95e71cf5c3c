"""What a workflow run says and does when it ends.

Called by the thin handlers of ``workflow/rules/hooks.smk`` (docs/pipeline.md, "Rerunning
one seed, one task", "Preemption, time limits and resuming"); every function takes what it
needs as arguments (paths, the list of outputs, plain strings), so that unit tests call it
directly (tests/test_pipeline_hooks.py). Imports no JAX and no Snakemake.

* :func:`success_lines`: where the report is, whether it is current, the expected-range
  checks; and a stale copy an earlier run left, removed once the report is current.
* :func:`error_lines`: the stopped training jobs (from :mod:`.stops`), the failed jobs, and a
  report that no longer matches the results moved aside (:func:`move_stale_report`).
The retries a cluster run gets per training rule are :meth:`.cluster.Cluster.retries`.

Local stops (signals to the trainers, their stop records) are in :mod:`.stops`.
"""
from __future__ import annotations

import csv
import html
import os
import re
import time
from typing import Iterable, Mapping, Optional, Sequence

from ..io import atomic


def stale_path(report: str) -> str:
    """Where an out-of-date report is moved: ``results/report.html`` -> ``results/report.stale.html``."""
    return re.sub(r"\.html$", ".stale.html", str(report))


def report_state(report: str, outputs: Iterable[str]) -> tuple[list[str], list[str]]:
    """(missing, newer): the outputs the report shows (``outputs`` but the report itself) that
    are missing, or modified after it (by mtime).

    Raises:
        FileNotFoundError: the report does not exist.
    """
    t = os.path.getmtime(report)
    inputs = [f for f in outputs if f != report]
    missing = [f for f in inputs if not os.path.exists(f)]
    newer = [f for f in inputs if os.path.exists(f) and os.path.getmtime(f) > t]
    return missing, newer


def folders(paths: Sequence[str], n: int = 4) -> str:
    """A short list of the folders of ``paths`` (the runs, tables, ... they belong to): the
    first ``n`` in order, then "and K more"."""
    seen = []
    for p in paths:
        d = os.path.dirname(p)
        if d not in seen:
            seen.append(d)
    return ", ".join(seen[:n]) + (f" and {len(seen) - n} more" if len(seen) > n else "")


def read_csv(path: str) -> Optional[list[dict]]:
    """The rows of a CSV table as dicts, or None if it cannot be read."""
    try:
        with open(path, newline="") as fh:
            return list(csv.DictReader(fh))
    except OSError:
        return None


def check_line(what: str, rows: Sequence[Mapping[str, str]], key: str) -> str:
    """``what``: N of M pass their expected range (a row's ``result`` column is ``pass``,
    ``fail`` or anything else for "no range declared"); the failing rows named by ``key``."""
    judged = [r for r in rows if r.get("result") in ("pass", "fail")]
    failed = [r[key] for r in judged if r["result"] == "fail"]
    none = len(rows) - len(judged)
    if not judged:
        return f"{what}: no expected range is declared ({len(rows)} without one)."
    text = (
        f"{what}: all {len(judged)} pass their expected range"
        if not failed
        else f"{what}: {len(failed)} of {len(judged)} FAIL their expected range: {', '.join(failed)}"
    )
    return text + (f"; {none} without an expected range." if none else ".")


def summary_lines(report: str, outputs: Sequence[str], final_table: str,
                  multitask_table: Optional[str] = None) -> list[str]:
    """Lines for the end of a run: where the report is, whether it is current, the checks of
    ``final_table`` (``tables`` rule, one row per task) and, for a protocol with multi-task
    training, ``multitask_table`` (``scaling`` rule, one row per task, pool and model size)."""
    if not os.path.exists(report):
        return [f"No report yet: `snakemake --cores all` builds {report}."]
    missing, newer = report_state(report, outputs)
    if missing or newer:
        return [
            f"{report} is older than this run's results ({len(missing)} missing, {len(newer)} newer: "
            f"{folders(missing + newer)}): it does not show them. `snakemake --cores all` rebuilds it."
        ]
    lines = [f"Report: {os.path.abspath(report)}"]
    final = read_csv(final_table)
    if final is not None:
        lines.append(check_line(f"Final-score check ({final_table})", final, "task"))
    if multitask_table is not None:
        tasks = read_csv(multitask_table)
        if tasks is not None:
            for r in tasks:
                r["name"] = f"{r['task']} (pool {r['pool']}, model size {r['model_size']})"
            lines.append(check_line(f"Multi-task check ({multitask_table})", tasks, "name"))
    return lines


def remove_superseded_stale(report: str, outputs: Sequence[str]) -> Optional[str]:
    """Delete the stale copy an earlier run that did not complete left, once ``report`` is
    current again; return the line that says so (None when there was nothing to remove)."""
    stale = stale_path(report)
    if os.path.exists(stale) and os.path.exists(report) and report_state(report, outputs) == ([], []):
        os.remove(stale)
        return f"Removed {stale} (an out-of-date report of an earlier run): {report} is current."
    return None


def success_lines(report: str, outputs: Sequence[str], final_table: str,
                  multitask_table: Optional[str] = None) -> list[str]:
    """What ``onsuccess`` says: :func:`summary_lines`, then :func:`remove_superseded_stale`'s line."""
    lines = summary_lines(report, outputs, final_table, multitask_table)
    removed = remove_superseded_stale(report, outputs)
    return lines + ([removed] if removed else [])


def stale_banner(report: str, missing: Sequence[str], newer: Sequence[str], when: str) -> str:
    """The HTML banner put at the top of a report moved aside (``when``: the run's local time)."""
    return (
        '<div style="background:#f8d7da;border:2px solid #a00;padding:.8em 1.2em;margin:1em 0;font-size:1.1em">'
        f"<b>Out of date.</b> A run of {when} did not complete, and this report shows results it has since "
        f"deleted or replaced ({len(missing)} missing, {len(newer)} newer than this report, in "
        f"{html.escape(folders(list(missing) + list(newer)))}). Rerun <code>snakemake --cores all</code> to "
        f"rebuild {html.escape(str(report))}.</div>"
    )


def move_stale_report(report: str, outputs: Sequence[str], when: Optional[str] = None) -> Optional[str]:
    """The report shows results this run deleted or replaced: write it, with
    :func:`stale_banner` after ``<body>``, to :func:`stale_path` (atomically,
    :func:`tdmpc2core.io.atomic.write_text`), delete the report, and return the line that
    says so. None (nothing moved) when there is no report or it is current. ``when``: the
    banner's time (default: now, local, ``%Y-%m-%d %H:%M``)."""
    if not os.path.exists(report):
        return None
    missing, newer = report_state(report, outputs)
    if not missing and not newer:
        return None
    with open(report, encoding="utf-8") as fh:
        text = fh.read()
    when = when if when is not None else time.strftime("%Y-%m-%d %H:%M", time.localtime())
    banner = stale_banner(report, missing, newer, when)
    i = text.find("<body>")
    text = text[: i + 6] + banner + text[i + 6 :] if i >= 0 else banner + text
    stale = stale_path(report)
    atomic.write_text(stale, text)
    os.remove(report)
    return (
        f"{report} showed results this run did not complete ({len(missing)} missing, {len(newer)} replaced: "
        f"{folders(missing + newer)}); moved to {stale}. The same command rebuilds {report}."
    )


def job_label(rule: str, wildcards: Optional[Mapping[str, str]] = None) -> str:
    """A job as the end-of-run lines name it: ``rule (k=v, ...)``, or the rule alone."""
    wildcards = dict(wildcards or {})
    return rule + (f" ({', '.join(f'{k}={v}' for k, v in wildcards.items())})" if wildcards else "")


def error_lines(report: str, outputs: Sequence[str], stopped: Sequence[str],
                failed: Sequence[str]) -> list[str]:
    """What ``onerror`` says: one line per stopped training job (``stopped``, from
    :meth:`.stops.LocalStop.lines`) under a heading; else the failed jobs (``failed``:
    :func:`job_label` strings; a stopped job is a failed one to Snakemake, so they are not
    listed twice); then, if the report no longer matches the results, :func:`move_stale_report`
    (which moves it) and its line."""
    lines = []
    if stopped:
        lines.append(f"Stopped {len(stopped)} training job(s):")
        lines += [f"  {line}" for line in stopped]
    elif failed:
        lines.append(f"Failed job(s): {'; '.join(sorted(failed))} (their logs are under logs/).")
    moved = move_stale_report(report, outputs)
    return lines + ([moved] if moved else [])
