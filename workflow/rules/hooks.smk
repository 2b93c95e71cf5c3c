# What a run says when it ends, and how a local run stops (docs/pipeline.md, "Rerunning one
# seed, one task" and "Stopping a local run"). Plain Python in the Snakemake process; no rule here.
#
# * onsuccess: where the report is and whether every task passed its expected range.
# * onerror (a job failed, or the run was stopped): one line per training job that was
#   stopped (its checkpoint, how to resume), and a report that no longer matches the results
#   moved aside to results/report.stale.html, with a line saying so.
# * onstart (local runs only): SIGTERM or SIGINT to the snakemake process alone stops the
#   running training jobs at their next chunk boundary, each with a checkpoint.

import csv
import logging
import os
import re
import signal
import threading
import time

from snakemake.logging import logger

REPORT = rules.report.output[0]
STALE_REPORT = re.sub(r"\.html$", ".stale.html", REPORT)
TRAINING_STAGES = ("train-single", "train-multi")


def report_inputs():
    """Every output the report shows, directly or through a figure or table: every other
    output of the DAG (the default target's inputs but the report)."""
    return [f for f in EVERY_OUTPUT if f != REPORT]


def report_state():
    """(missing, newer): the outputs the report depends on that are missing, or newer than it."""
    t = os.path.getmtime(REPORT)
    missing = [f for f in report_inputs() if not os.path.exists(f)]
    newer = [
        f for f in report_inputs() if os.path.exists(f) and os.path.getmtime(f) > t
    ]
    return missing, newer


def _folders(paths, n=4):
    """A short list of the folders of `paths` (the runs, tables, ... they belong to)."""
    seen = []
    for p in paths:
        d = os.path.dirname(p)
        if d not in seen:
            seen.append(d)
    return ", ".join(seen[:n]) + (f" and {len(seen) - n} more" if len(seen) > n else "")


def _say(line):
    logger.info(line)


# ---- the end of a successful run --------------------------------------------------------
def _read_csv(path):
    try:
        with open(path, newline="") as fh:
            return list(csv.DictReader(fh))
    except OSError:
        return None


def _check_line(what, rows, key):
    """`what`: N of M pass ...; the failing ones named."""
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


def summarize_report():
    """Lines for the end of a run: where the report is, whether it is current, the checks."""
    if not os.path.exists(REPORT):
        return [f"No report yet: `snakemake --cores all` builds {REPORT}."]
    missing, newer = report_state()
    if missing or newer:
        return [
            f"{REPORT} is older than this run's results ({len(missing)} missing, {len(newer)} newer: "
            f"{_folders(missing + newer)}): it does not show them. `snakemake --cores all` rebuilds it."
        ]
    lines = [f"Report: {os.path.abspath(REPORT)}"]
    final = _read_csv(rules.tables.output.final)
    if final is not None:
        lines.append(
            _check_line(
                f"Final-score check ({rules.tables.output.final})", final, "task"
            )
        )
    if MULTITASK:
        tasks = _read_csv(rules.scaling.output.tasks)
        if tasks is not None:
            for r in tasks:
                r["name"] = (
                    f"{r['task']} (pool {r['pool']}, model size {r['model_size']})"
                )
            lines.append(
                _check_line(
                    f"Multi-task check ({rules.scaling.output.tasks})", tasks, "name"
                )
            )
    return lines


onsuccess:
    for _line in summarize_report():
        _say(_line)
    # a report moved aside by an earlier run that did not complete is superseded once this one is current
    if (
        os.path.exists(STALE_REPORT)
        and os.path.exists(REPORT)
        and report_state() == ([], [])
    ):
        os.remove(STALE_REPORT)
        _say(
            f"Removed {STALE_REPORT} (an out-of-date report of an earlier run): {REPORT} is current."
        )


# ---- stopping a local run ------------------------------------------------------------------
# Snakemake 9's local executor runs each job's shell in snakemake's own process group and,
# on SIGTERM, waits for the running jobs to finish ("Will exit after finishing currently
# running jobs"); on SIGINT it raises KeyboardInterrupt in its scheduler, which also waits
# for them while tearing its thread pool down. A signal to the snakemake process alone (a
# supervisor, a notebook, `kill`) thus never reached a training job, which ran to its end.
# Here the snakemake process, on SIGTERM or SIGINT, sends SIGTERM to every running training
# process (tdmpc2 train-single / train-multi, found among its descendants; a trainer started
# in the meantime is signalled too) and then asks the scheduler for its graceful exit (no new
# job starts; quick jobs already running finish). Each trainer stops at its next chunk
# boundary with a checkpoint and exits 143 (tdmpc2core.stages.resumable.SignalStop); the
# run ends with one line per stopped job. A second SIGINT (Ctrl-C again) is passed on as
# SIGINT: the trainers give up their checkpoint, and Snakemake's own interrupt follows. With
# a terminal's Ctrl-C the trainers also get SIGINT themselves; SIGTERM after it changes nothing.
STOP = {"signals": [], "trainers": {}, "watcher": None}


def _trainer_processes():
    import psutil

    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = p.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if any(s in cmd for s in TRAINING_STAGES) and any("tdmpc2" in c for c in cmd):
            found.append((p, cmd))
    return found


def _signal_trainers(sig, again=False):
    import psutil

    for p, cmd in _trainer_processes():
        if p.pid in STOP["trainers"] and not again:
            continue
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            continue
        STOP["trainers"][p.pid] = cmd


def _watch_new_trainers():
    while True:
        time.sleep(0.5)
        try:
            _signal_trainers(signal.SIGTERM)
        except Exception:
            pass


def _install_stop_handlers():
    graceful = signal.getsignal(
        signal.SIGTERM
    )  # the scheduler's: exit once running jobs end

    def on_stop_signal(signum, frame):
        earlier = list(STOP["signals"])
        STOP["signals"].append(signum)
        if signum == signal.SIGINT and signal.SIGINT in earlier:
            _signal_trainers(
                signal.SIGINT, again=True
            )  # the trainers' second SIGINT: no checkpoint
            raise KeyboardInterrupt
        _signal_trainers(signal.SIGTERM)
        if earlier:
            return
        name = signal.Signals(signum).name
        # os.write: a signal handler must not wait for the logging lock the main thread may hold
        os.write(
            2,
            (
                f"\nsnakemake received {name}: stopping the training jobs at their next chunk boundary "
                f"(at most max_chunk_seconds = {MAX_CHUNK_SECONDS:g} s of compute, or the evaluation or "
                "seed-phase burst under way), each with a checkpoint; no new job starts. "
                + (
                    "Ctrl-C again stops them without a checkpoint."
                    if signum == signal.SIGINT
                    else ""
                )
                + "\n"
            ).encode(),
        )
        STOP["watcher"] = threading.Thread(target=_watch_new_trainers, daemon=True)
        STOP["watcher"].start()
        if callable(
            graceful
        ):  # in a thread: the scheduler's lock may be held by this (main) thread
            threading.Thread(target=graceful, args=(signum, None), daemon=True).start()
        else:
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_stop_signal)
    signal.signal(signal.SIGINT, on_stop_signal)
    logger.addFilter(_StoppedJobErrors())


class _StoppedJobErrors(logging.Filter):
    """Once a stop was asked for: Snakemake's error report of each training job that stopped
    with a checkpoint (the failed shell command, "Error in rule ...") is left out; the run's
    last lines say what happened to each (stopped_job_lines)."""

    def filter(self, record):
        if not STOP["signals"] or record.levelno < logging.ERROR:
            return True
        logs = getattr(record, "log", None)
        where = (
            [str(x) for x in logs]
            if isinstance(logs, (list, tuple))
            else [str(record.msg)]
        )
        return not any(log in w for log in stopped_logs() for w in where)


def _arg(cmd, flag, n=1):
    """The value(s) after `flag` in an argv list."""
    if flag not in cmd:
        return None
    i = cmd.index(flag) + 1
    vals = []
    while i < len(cmd) and not cmd[i].startswith("--") and len(vals) < n:
        vals.append(cmd[i])
        i += 1
    return vals if n > 1 else (vals[0] if vals else None)


_STOPPED = re.compile(
    r"stopped by (\w+) at (\d+)/(\d+) (agent steps|updates): (?:checkpoint (\S+)|(.*))"
)


def _stopped_jobs():
    """(job, log, match of the log's last "stopped by" line or None) per training job signalled."""
    out = []
    for pid, cmd in STOP["trainers"].items():
        if "train-single" in cmd:
            task, seeds = _arg(cmd, "--task"), _arg(cmd, "--seeds", n=10**6) or []
            tag = seed_tag(seeds)
            job, log = (
                f"train_single_{tag} (task {task})",
                f"logs/train_single/{task}/{tag}.log",
            )
        else:
            pool, size = _arg(cmd, "--pool"), _arg(cmd, "--model-size")
            job, log = (
                f"train_multi (pool {pool}, model size {size})",
                f"logs/train_multi/{pool}/size{size}.log",
            )
        found = None
        try:
            with open(log) as fh:
                for line in fh:
                    m = _STOPPED.search(line)
                    found = m or found
        except OSError:
            pass
        out.append((job, log, found))
    return out


def stopped_logs():
    """The logs of the training jobs that stopped on request (their "stopped by" line written)."""
    return [log for job, log, found in _stopped_jobs() if found is not None]


def stopped_job_lines():
    """One line per training job this run stopped: where it stopped, its checkpoint, how to resume."""
    lines = []
    for job, log, found in _stopped_jobs():
        if found is None:
            lines.append(
                f"{job}: stopped without writing a checkpoint on this stop (see {log}); the same "
                "snakemake command resumes it from its newest earlier checkpoint, if any."
            )
        elif found.group(5):
            lines.append(
                f"{job}: stopped at {found.group(2)}/{found.group(3)} {found.group(4)}, checkpoint "
                f"{found.group(5)}; run the same snakemake command to resume from it."
            )
        else:
            lines.append(
                f"{job}: stopped at {found.group(2)}/{found.group(3)} {found.group(4)} without a "
                f"checkpoint ({found.group(6).strip()}); the same command starts it over."
            )
    return lines


def extend_retries_for_time_limits():
    """Where jobs are submitted: each training rule retries once more per further job its
    longest run needs under cluster.max_job_minutes (common.smk, LONG_RUNS), on top of the
    retries asked for (the profile's `retries`)."""
    asked = int(getattr(workflow.execution_settings, "retries", 0) or 0)
    for name, minutes in LONG_RUNS.items():
        extra = extra_jobs(minutes)
        if extra:
            workflow.get_rule(name).restart_times = asked + extra
            _say(
                f"{name}: runs of up to {minutes} min in jobs of at most {MAX_JOB_MINUTES} min "
                f"(cluster.max_job_minutes): up to {extra + 1} jobs each, {asked + extra} retries"
            )


onstart:
    if (
        workflow.local_exec
    ):  # a cluster executor keeps Snakemake's own handling (it cancels remote jobs)
        _install_stop_handlers()
    else:
        extend_retries_for_time_limits()


# ---- the end of a run that did not complete -------------------------------------------------
def _failed_jobs():
    try:
        return sorted(
            f"{j.rule.name}"
            + (
                f" ({', '.join(f'{k}={v}' for k, v in j.wildcards.items())})"
                if j.wildcards
                else ""
            )
            for j in workflow.scheduler.failed
        )
    except Exception:
        return []


def move_stale_report():
    """The report shows results this run deleted or replaced: move it to STALE_REPORT with a
    banner saying so, and return the line that says it (None when the report is current).
    """
    if not os.path.exists(REPORT):
        return None
    missing, newer = report_state()
    if not missing and not newer:
        return None
    with open(REPORT, encoding="utf-8") as fh:
        text = fh.read()
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime())
    banner = (
        '<div style="background:#f8d7da;border:2px solid #a00;padding:.8em 1.2em;margin:1em 0;font-size:1.1em">'
        f"<b>Out of date.</b> A run of {when} did not complete, and this report shows results it has since "
        f"deleted or replaced ({len(missing)} missing, {len(newer)} newer than this report, in "
        f"{html_escape(_folders(missing + newer))}). Rerun <code>snakemake --cores all</code> to rebuild "
        f"{html_escape(REPORT)}.</div>"
    )
    i = text.find("<body>")
    text = text[: i + 6] + banner + text[i + 6 :] if i >= 0 else banner + text
    tmp = f"{STALE_REPORT}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, STALE_REPORT)
    os.remove(REPORT)
    return (
        f"{REPORT} showed results this run did not complete ({len(missing)} missing, {len(newer)} replaced: "
        f"{_folders(missing + newer)}); moved to {STALE_REPORT}. The same command rebuilds {REPORT}."
    )


def html_escape(text):
    import html

    return html.escape(str(text))


onerror:
    _lines = stopped_job_lines()
    if _lines:
        _say(f"Stopped {len(_lines)} training job(s):")
        for _line in _lines:
            _say(f"  {_line}")
    _failed = _failed_jobs()
    if (
        _failed and not _lines
    ):  # (a stopped job is a failed one to Snakemake: listed above)
        _say(f"Failed job(s): {'; '.join(_failed)} (their logs are under logs/).")
    _line = move_stale_report()
    if _line:
        _say(_line)
