"""The workflow's end-of-run hooks and local stop handling (tdmpc2core/pipeline/hooks.py,
stops.py), called directly: report files and attempts.json records built by hand in tmp
folders, fake process lists; one test signals a real child process through psutil. No
Snakemake; milliseconds each (the real snakemake runs are in tests/test_workflow.py)."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tdmpc2core.io import atomic, attempts
from tdmpc2core.pipeline import hooks, stops


def seed_tag(group):
    return "seeds_" + "_".join(str(s) for s in group)


# ---- the report at the end of a run ---------------------------------------------------------
@pytest.fixture
def results(tmp_path, monkeypatch):
    """A work dir with a report and the outputs it shows, all older than the report."""
    monkeypatch.chdir(tmp_path)
    outputs = ["results/single/pendulum/seed0/eval.parquet", "results/single/pendulum/seed1/eval.parquet",
               "results/tables/final_scores.csv", "results/report.html"]
    for f in outputs:
        Path(f).parent.mkdir(parents=True, exist_ok=True)
        Path(f).write_text("x")
    Path("results/report.html").write_text("<html><body><h1>Report</h1></body></html>")
    old = time.time() - 100
    for f in outputs[:-1]:
        os.utime(f, (old, old))
    return outputs


def test_stale_path():
    assert hooks.stale_path("results/report.html") == "results/report.stale.html"


def test_report_state_and_summary(results):
    report = "results/report.html"
    assert hooks.report_state(report, results) == ([], [])
    Path("results/tables/final_scores.csv").write_text("task,result\npendulum,pass\ncartpole,fail\nwalker,\n")
    os.utime("results/tables/final_scores.csv", (time.time() - 100,) * 2)
    assert hooks.summary_lines(report, results, "results/tables/final_scores.csv") == [
        f"Report: {os.path.abspath(report)}",
        "Final-score check (results/tables/final_scores.csv): 1 of 2 FAIL their expected range: cartpole; "
        "1 without an expected range.",
    ]
    os.remove("results/single/pendulum/seed1/eval.parquet")
    os.utime("results/single/pendulum/seed0/eval.parquet", (time.time() + 10,) * 2)
    assert hooks.report_state(report, results) == (["results/single/pendulum/seed1/eval.parquet"],
                                                   ["results/single/pendulum/seed0/eval.parquet"])
    assert hooks.summary_lines(report, results, "results/tables/final_scores.csv") == [
        "results/report.html is older than this run's results (1 missing, 1 newer: results/single/pendulum/seed1, "
        "results/single/pendulum/seed0): it does not show them. `snakemake --cores all` rebuilds it."]
    os.remove(report)
    assert hooks.summary_lines(report, results, "x.csv") == [
        "No report yet: `snakemake --cores all` builds results/report.html."]


def test_multitask_check_names_pool_and_size(results):
    Path("results/tables/mt.csv").write_text("task,pool,model_size,result\npendulum,demo,1,pass\n"
                                             "cartpole,demo,1,fail\n")
    lines = hooks.summary_lines("results/report.html", results, "missing.csv", "results/tables/mt.csv")
    assert lines[1:] == ["Multi-task check (results/tables/mt.csv): 1 of 2 FAIL their expected range: "
                         "cartpole (pool demo, model size 1)."]


def test_check_line():
    assert hooks.check_line("C", [{"result": "pass", "task": "a"}] * 2, "task") == \
        "C: all 2 pass their expected range."
    assert hooks.check_line("C", [{"result": "", "task": "a"}], "task") == \
        "C: no expected range is declared (1 without one)."


def test_folders_lists_four_then_counts():
    paths = [f"r/{i}/f" for i in range(6)] + ["r/0/g"]
    assert hooks.folders(paths) == "r/0, r/1, r/2, r/3 and 2 more"


def test_stale_report_moved_with_a_banner_through_the_atomic_writer(results, monkeypatch):
    report = "results/report.html"
    assert hooks.move_stale_report(report, results) is None  # current: left alone
    os.remove("results/single/pendulum/seed1/eval.parquet")
    written = []
    real = atomic.write_text
    monkeypatch.setattr(atomic, "write_text", lambda p, t: (written.append(p), real(p, t)))
    line = hooks.move_stale_report(report, results, when="2026-12-03 14:00")
    assert written == ["results/report.stale.html"]
    assert line == ("results/report.html showed results this run did not complete (1 missing, 0 replaced: "
                    "results/single/pendulum/seed1); moved to results/report.stale.html. The same command "
                    "rebuilds results/report.html.")
    assert not Path(report).exists()
    stale = Path("results/report.stale.html").read_text()
    assert stale.startswith("<html><body><div style=") and stale.endswith("<h1>Report</h1></body></html>")
    assert "<b>Out of date.</b> A run of 2026-12-03 14:00 did not complete" in stale
    assert "results/single/pendulum/seed1" in stale and "rebuild results/report.html.</div>" in stale
    assert [p.name for p in Path("results").iterdir() if p.name.startswith(".tmp")] == []
    assert hooks.move_stale_report(report, results) is None  # no report: nothing to move


def test_stale_copy_removed_once_the_report_is_current(results):
    Path("results/report.stale.html").write_text("old")
    lines = hooks.success_lines("results/report.html", results, "results/tables/final_scores.csv")
    assert lines[-1] == ("Removed results/report.stale.html (an out-of-date report of an earlier run): "
                         "results/report.html is current.")
    assert not Path("results/report.stale.html").exists()
    assert hooks.remove_superseded_stale("results/report.html", results) is None


def test_error_lines(results):
    assert hooks.job_label("train_single_seeds_1", {"task": "pendulum"}) == "train_single_seeds_1 (task=pendulum)"
    assert hooks.job_label("report") == "report"
    failed = ["train_single_seeds_1 (task=pendulum)", "figures_task (task=cartpole)"]
    assert hooks.error_lines("results/report.html", results, [], failed) == [
        "Failed job(s): figures_task (task=cartpole); train_single_seeds_1 (task=pendulum) "
        "(their logs are under logs/)."]
    os.remove("results/tables/final_scores.csv")
    lines = hooks.error_lines("results/report.html", results, ["job a: stopped", "job b: stopped"], failed)
    assert lines[:3] == ["Stopped 2 training job(s):", "  job a: stopped", "  job b: stopped"]
    assert lines[3].startswith("results/report.html showed results this run did not complete (1 missing")
    assert len(lines) == 4


# ---- stopped trainers and their stop records ------------------------------------------------
SINGLE = ["/venv/bin/python", "-m", "tdmpc2core.cli", "train-single", "--task", "pendulum", "--spec", "{}",
          "--seeds", "0", "1", "--outdir", "results/single/pendulum",
          "--checkpoint-dir", "checkpoints/single/pendulum/seeds_0_1", "--checkpoint-every", "1000"]
MULTI = ["tdmpc2", "train-multi", "--pool", "demo", "--model-size", "1", "--seeds", "0",
         "--checkpoint-dir", "checkpoints/multi/demo/size1"]


def test_command_lines():
    assert stops.is_trainer(SINGLE) and stops.is_trainer(MULTI)
    assert not stops.is_trainer(["bash", "-c", "exec tdmpc2 train-single --task x"])
    assert not stops.is_trainer(["python", "-m", "tdmpc2core.cli", "tables"])
    assert stops.arg(SINGLE, "--seeds", n=10) == ["0", "1"] and stops.arg(SINGLE, "--task") == "pendulum"
    assert stops.arg(SINGLE, "--pool") is None
    assert stops.job_name(SINGLE, seed_tag) == "train_single_seeds_0_1 (task pendulum)"
    assert stops.job_name(MULTI, seed_tag) == "train_multi (pool demo, model size 1)"
    t = stops.Trainer(pid=1, cmd=SINGLE, cwd="/w", log=None)
    assert t.checkpoint_dir == "/w/checkpoints/single/pendulum/seeds_0_1"
    assert stops.Trainer(pid=1, cmd=["tdmpc2", "train-single"], cwd="/w", log=None).checkpoint_dir is None


def record(pid, outcome, stop=None, ended="2026-12-03T14:00:05Z", attempt=1):
    ended = None if outcome == "running" else ended  # a session still running (or killed) has not ended
    r = {"attempt": attempt, "started_utc": "2026-12-03T13:59:00Z", "ended_utc": ended, "wall_seconds": 65.0,
         "start_step": 0, "end_step": None, "unit": "agent steps", "outcome": outcome, "pid": pid}
    return {**r, "stop": stop} if stop is not None else r


def write_attempts(ckdir, records):
    Path(ckdir).mkdir(parents=True, exist_ok=True)
    atomic.write_json(Path(ckdir) / attempts.FILE, {"attempts": records})


STOP_CK = {"kind": "signal", "signal": "SIGTERM", "step": 3000, "total": 6000, "unit": "agent steps",
           "checkpoint": "checkpoints/single/pendulum/seeds_0_1/step_000000003000", "reason": None}


def test_session_record_is_the_signalled_pids(tmp_path):
    ck = tmp_path / "ck"
    assert stops.session_record(ck, [7]) is None and stops.session_record(None, [7]) is None
    write_attempts(ck, [record(5, "stopped by SIGTERM", STOP_CK, attempt=1), record(7, "running", attempt=2)])
    assert stops.session_record(ck, [7])["attempt"] == 2
    assert stops.session_record(ck, [5])["stop"] == STOP_CK
    # a wrapper's pid was signalled, not the trainer's: the record that ended after the stop
    assert stops.session_record(ck, [99]) is None
    assert stops.session_record(ck, [99], since="2026-12-03T14:00:00Z")["attempt"] == 1
    assert stops.session_record(ck, [99], since="2026-12-03T14:00:06Z") is None


def test_stopped_lines_from_records():
    job, log = "train_single_seeds_0_1 (task pendulum)", "logs/train_single/pendulum/seeds_0_1.log"
    assert stops.stopped_line(job, record(5, "stopped by SIGTERM", STOP_CK), log) == (
        "train_single_seeds_0_1 (task pendulum): stopped at 3000/6000 agent steps, checkpoint "
        "checkpoints/single/pendulum/seeds_0_1/step_000000003000; run the same snakemake command to resume from it.")
    no_ck = {**STOP_CK, "signal": "SIGINT", "checkpoint": None, "reason": "a second SIGINT"}
    assert stops.stopped_line(job, record(5, "stopped by SIGINT", no_ck), log) == (
        f"{job}: stopped at 3000/6000 agent steps without a checkpoint (a second SIGINT); the same snakemake "
        "command resumes it from its newest earlier checkpoint, if any.")
    err = {**STOP_CK, "kind": "error", "signal": None, "checkpoint": None, "step": None, "total": None,
           "unit": "updates", "reason": "OSError: [Errno 28] No space left on device"}
    assert stops.stopped_line(job, record(5, "failed", err), log) == (
        f"{job}: failed: OSError: [Errno 28] No space left on device (see {log}); the same snakemake command "
        "resumes it from its newest checkpoint, if any.")
    for killed in (None, record(5, "running"), record(5, attempts.KILLED)):
        assert stops.stopped_line(job, killed, log) == (
            f"{job}: stopped without writing a checkpoint on this stop (it left no stop record; see {log}); "
            "the same snakemake command resumes it from its newest earlier checkpoint, if any.")
    assert "see its log under logs/" in stops.stopped_line(job, None, None)
    assert stops.stopped_line(job, record(5, "completed"), log) is None  # it finished before the stop


class FakeProcess:
    def __init__(self, pid, cmd, cwd, log=None):
        self.pid, self.cmd, self._cwd, self.log, self.got = pid, cmd, cwd, log, []

    def cmdline(self):
        return self.cmd

    def cwd(self):
        return self._cwd

    def open_files(self):
        class F:
            fd, path = 2, self.log
        return [F()] if self.log else []

    def send_signal(self, sig):
        self.got.append(sig)


def test_local_stop_signals_trainers_and_reads_their_records(tmp_path):
    logfile = str(tmp_path / "logs/train_single/pendulum/seeds_0_1.log")
    single = FakeProcess(11, SINGLE, str(tmp_path), log=logfile)
    multi = FakeProcess(12, MULTI, str(tmp_path))
    other = FakeProcess(13, ["python", "-m", "tdmpc2core.cli", "tables"], str(tmp_path))
    procs = [single, multi, other]
    said, graceful = [], []
    stop = stops.LocalStop(seed_tag, 30.0, processes=lambda: procs, write=said.append)
    try:
        stop.on_signal(signal.SIGINT, lambda signum, frame: graceful.append(signum))
        time.sleep(0.1)
        assert single.got == [signal.SIGTERM] and multi.got == [signal.SIGTERM] and other.got == []
        assert graceful == [signal.SIGINT]
        assert said == [stops.stop_message(signal.SIGINT, 30.0)]
        assert "snakemake received SIGINT" in said[0] and "max_chunk_seconds = 30 s" in said[0]
        assert "Ctrl-C again" in said[0] and "Ctrl-C again" not in stops.stop_message(signal.SIGTERM, 30.0)
        # a trainer started after the signal is signalled by the watcher
        late = FakeProcess(14, SINGLE[:9] + ["2"] + SINGLE[11:14] + ["checkpoints/single/pendulum/seeds_2"],
                           str(tmp_path))
        procs.append(late)
        deadline = time.time() + 5
        while not late.got and time.time() < deadline:
            time.sleep(0.05)
        assert late.got == [signal.SIGTERM] and single.got == [signal.SIGTERM]
        # records: the single-task job stopped with a checkpoint, the multi-task one left none
        write_attempts(tmp_path / "checkpoints/single/pendulum/seeds_0_1",
                       [record(11, "stopped by SIGTERM", STOP_CK)])
        write_attempts(tmp_path / "checkpoints/multi/demo/size1", [record(12, "running")])
        write_attempts(tmp_path / "checkpoints/single/pendulum/seeds_2", [record(14, "completed")])
        lines = stop.lines()
        assert lines == [
            stops.stopped_line("train_single_seeds_0_1 (task pendulum)", record(11, "x", STOP_CK), None),
            "train_multi (pool demo, model size 1): stopped without writing a checkpoint on this stop (it left "
            "no stop record; see its log under logs/); the same snakemake command resumes it from its newest "
            "earlier checkpoint, if any."]
        assert stop.stopped_logs() == [logfile]
        # Snakemake's error report of the job that stopped on request is left out, others kept
        flt = stops.StoppedJobErrors(stop)
        rec = logging.LogRecord("snakemake", logging.ERROR, "", 0, "Error in rule", None, None)
        rec.log = [logfile]
        assert flt.filter(rec) is False
        rec.log = ["logs/other.log"]
        assert flt.filter(rec) is True
        # a second SIGINT is passed on as SIGINT to every trainer, then snakemake's own interrupt
        with pytest.raises(KeyboardInterrupt):
            stop.on_signal(signal.SIGINT, None)
        assert single.got == [signal.SIGTERM, signal.SIGINT] and late.got[-1] == signal.SIGINT
    finally:
        stop.close()


def test_no_filter_before_a_stop():
    stop = stops.LocalStop(seed_tag, 30.0, processes=lambda: [])
    rec = logging.LogRecord("snakemake", logging.ERROR, "", 0, "Error in rule", None, None)
    assert stops.StoppedJobErrors(stop).filter(rec) is True
    assert stop.lines() == [] and stop.stopped_logs() == []


def test_trainers_sharing_a_checkpoint_folder_are_one_job(tmp_path):
    wrapper = FakeProcess(21, ["conda", "run", *SINGLE], str(tmp_path))
    child = FakeProcess(22, SINGLE, str(tmp_path))
    stop = stops.LocalStop(seed_tag, 30.0, processes=lambda: [wrapper, child], write=lambda text: None)
    stop.signal_trainers(signal.SIGTERM)
    write_attempts(tmp_path / "checkpoints/single/pendulum/seeds_0_1", [record(22, "stopped by SIGTERM", STOP_CK)])
    assert len(stop.lines()) == 1 and "checkpoint checkpoints/single/pendulum/seeds_0_1/step_" in stop.lines()[0]


CHILD = textwrap.dedent("""
    import json, os, signal, sys, time
    def stop(signum, frame):
        os.makedirs("ck", exist_ok=True)
        rec = {"attempt": 1, "pid": os.getpid(), "unit": "updates", "outcome": "stopped by SIGTERM",
               "ended_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "stop": {"kind": "signal", "signal": "SIGTERM", "step": 4, "total": 8, "unit": "updates",
                        "checkpoint": "ck/step_4", "reason": None}}
        with open("ck/attempts.json", "w") as fh:
            json.dump({"attempts": [rec]}, fh)
        sys.exit(143)
    signal.signal(signal.SIGTERM, stop)
    print("ready", file=sys.stderr, flush=True)
    time.sleep(60)
""")


def test_real_child_process_through_psutil(tmp_path):
    """The default process list (this process's descendants), the trainer's working directory
    and log read through psutil, a real SIGTERM, and the record it wrote."""
    pytest.importorskip("psutil")
    (tmp_path / "w").mkdir()
    log = tmp_path / "w" / "job.log"
    cmd = [sys.executable, "-c", CHILD, "tdmpc2", "train-multi", "--pool", "p", "--model-size", "5",
           "--checkpoint-dir", "ck"]
    with open(log, "w") as fh:
        child = subprocess.Popen(cmd, cwd=tmp_path / "w", stdout=fh, stderr=fh)
    try:
        deadline = time.time() + 30
        while "ready" not in log.read_text():
            assert time.time() < deadline and child.poll() is None
            time.sleep(0.05)
        stop = stops.LocalStop(seed_tag, 1.0, write=lambda text: None)
        try:
            stop.on_signal(signal.SIGTERM, lambda signum, frame: None)
            assert child.wait(timeout=30) == 143
        finally:
            stop.close()
        (trainer,) = stop.trainers.values()
        assert trainer.pid == child.pid and trainer.log == str(log) and trainer.cwd == str(tmp_path / "w")
        assert stop.lines() == ["train_multi (pool p, model size 5): stopped at 4/8 updates, checkpoint ck/step_4; "
                                "run the same snakemake command to resume from it."]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_the_pipeline_package_imports_no_jax_and_no_snakemake():
    code = ("import sys; import tdmpc2core.pipeline.hooks, tdmpc2core.pipeline.stops; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'snakemake', 'flax'))))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert json.loads(out.stdout) == []
