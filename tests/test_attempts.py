"""Every attempt (session) of a resumable training job, recorded beside its checkpoints
(tdmpc2core.io.attempts): what the report's runtime table shows for a resumed job."""
from __future__ import annotations

import json

import pytest

from tdmpc2core.io import attempts


def test_attempts_accumulate_across_sessions_and_a_finished_run_starts_anew(tmp_path):
    ck = tmp_path / "ck"
    a1 = attempts.begin(ck, "agent steps")
    assert json.loads((ck / attempts.FILE).read_text())["attempts"][0]["outcome"] == "running"
    a1.end("stopped by SIGTERM", end_step=3000)
    a2 = attempts.begin(ck, "agent steps")  # killed without a word: stays "running" on disk
    a3 = attempts.begin(ck, "agent steps")
    a3.end("completed", end_step=6000, start_step=3000)
    recs = a3.records()
    assert [r["attempt"] for r in recs] == [1, 2, 3]
    assert [r["outcome"] for r in recs] == ["stopped by SIGTERM", attempts.KILLED, "completed"]
    assert (recs[0]["end_step"], recs[2]["start_step"], recs[2]["end_step"]) == (3000, 3000, 6000)
    assert all(r["wall_seconds"] is not None for r in (recs[0], recs[2])) and recs[1]["wall_seconds"] is None
    assert attempts.read(ck) == recs and a2.path == a3.path
    refused = attempts.begin(ck, "agent steps")  # e.g. the folder holds another run's checkpoints
    refused.discard()
    assert attempts.read(ck) == recs
    # the run finished (its completion marker): a forced rerun is a new run with its own list
    (ck / attempts.FINISHED_MARKER).write_text("{}")
    a4 = attempts.begin(ck, "agent steps")
    assert [r["attempt"] for r in a4.records()] == [1]
    # no checkpoint folder: one record, in memory only
    mem = attempts.begin(None, "updates")
    mem.end("completed", end_step=10)
    assert mem.records()[0]["unit"] == "updates" and mem.path is None


# ------------------------------------------------------------------ stop records (issue 25 item 2)
def test_stop_record_is_checked_and_written_only_for_a_stopped_or_failed_session(tmp_path):
    ck = tmp_path / "ck"
    stop = attempts.stop_record("signal", "agent steps", signal="SIGTERM", step=500, total=700,
                                checkpoint=ck / "step_000000000500")
    assert stop == {"kind": "signal", "signal": "SIGTERM", "step": 500, "total": 700, "unit": "agent steps",
                    "checkpoint": str(ck / "step_000000000500"), "reason": None}
    assert list(stop) == list(attempts.STOP_KEYS)
    a1 = attempts.begin(ck, "agent steps")
    with pytest.raises(ValueError, match="completed session has none"):
        a1.end("completed", end_step=700, stop=stop)
    a1.end("stopped by SIGTERM", end_step=500, stop=stop)
    assert attempts.read(ck)[0]["stop"] == stop
    a2 = attempts.begin(ck, "agent steps")
    a2.end("completed", end_step=700, start_step=500)
    assert "stop" not in attempts.read(ck)[1] and attempts.read(ck)[0]["stop"] == stop
    err = attempts.stop_record("error", "updates", step=None, total=60, reason="RuntimeError: boom")
    assert (err["signal"], err["checkpoint"], err["step"]) == (None, None, None)
    bad = [  # (the record's changes, what the one-line error names)
        ({"kind": "crash"}, "kind='crash'"), ({"signal": None}, "signal=None"), ({"signal": "SIGKILL"}, "SIGKILL"),
        ({"unit": "updates"}, "unit='updates'"), ({"step": -1}, "step=-1"), ({"total": True}, "total=True"),
        ({"checkpoint": 3}, "checkpoint=3"), ({"reason": ["x"]}, "reason"), ({"extra": 1}, "unknown keys ['extra']")]
    for change, named in bad:
        with pytest.raises(ValueError, match="attempts stop record") as exc:
            attempts.begin(ck, "agent steps").end("stopped by SIGTERM", stop={**stop, **change})
        assert named in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(ValueError, match=r"missing keys \['reason'\]"):
        attempts.check_stop({k: v for k, v in stop.items() if k != "reason"})


class _Steps:
    start, step = 0, 300


class _Info:  # what the driver's TrainingInterrupted carries (tdmpc2core.io.checkpoint.CheckpointInfo)
    def __init__(self, path):
        self.path, self.step, self.bytes, self.seconds = path, 300, 2_000_000, 0.5


def _session(tmp_path, train, ckdir=True):
    from tdmpc2core.stages.resumable import train_session

    ck = tmp_path / "ck" if ckdir else None
    lines = []
    att = attempts.begin(ck, "agent steps")
    result = train_session(train, attempt=att, log=lines.append, ckdir=ck, total=700, steps=_Steps(),
                           compile_seconds=lambda: {"chunk": 1.25})
    return result, att.records()[-1], "\n".join(lines)


def test_a_session_stopped_by_a_signal_records_the_signal_step_and_checkpoint(tmp_path):
    import os
    import signal

    from tdmpc2core.run.driver import TrainingInterrupted

    def train(checkpoint):
        def run(should_stop):
            os.kill(os.getpid(), signal.SIGTERM)  # caught by the session's handler: a flag only
            assert should_stop()
            raise TrainingInterrupted(None, None, 300, checkpoint)
        return run

    rc, rec, log = _session(tmp_path, train(_Info(tmp_path / "ck/step_000000000300")))
    assert rc == 128 + signal.SIGTERM and rec["outcome"] == "stopped by SIGTERM" and rec["end_step"] == 300
    assert rec["stop"] == {"kind": "signal", "signal": "SIGTERM", "step": 300, "total": 700, "unit": "agent steps",
                           "checkpoint": str(tmp_path / "ck/step_000000000300"), "reason": None}
    assert attempts.read(tmp_path / "ck")[-1] == rec and rec["compile_seconds"] == {"chunk": 1.25}
    assert "stopped by SIGTERM at 300/700 agent steps: checkpoint" in log and "rerun the same command" in log
    rc, rec, log = _session(tmp_path, train(None), ckdir=False)  # no --checkpoint-dir: the record in memory
    assert rec["stop"]["checkpoint"] is None and rec["stop"]["reason"] == "no --checkpoint-dir"
    assert "stopped by SIGTERM at 300/700 agent steps: no checkpoint (no --checkpoint-dir)" in log


def test_a_session_ended_by_an_exception_records_the_error_and_reraises(tmp_path):
    def fail(should_stop):
        raise RuntimeError("device lost\nsecond line")

    with pytest.raises(RuntimeError, match="device lost"):
        _session(tmp_path, fail)
    rec = attempts.read(tmp_path / "ck")[-1]
    assert rec["outcome"] == "failed: RuntimeError" and rec["end_step"] == 300
    assert rec["stop"] == {"kind": "error", "signal": None, "step": 300, "total": 700, "unit": "agent steps",
                           "checkpoint": None, "reason": "RuntimeError: device lost"}

    def second_ctrl_c(should_stop):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _session(tmp_path, second_ctrl_c)
    stop = attempts.read(tmp_path / "ck")[-1]["stop"]
    assert (stop["kind"], stop["signal"], stop["checkpoint"]) == ("signal", "SIGINT", None) and stop["reason"]


def test_train_single_stage_writes_the_stop_record_of_an_error(tmp_path, monkeypatch, capsys):
    """The stage's wiring, without JAX: a stand-in agent whose training fails after 200 agent steps."""
    import json
    import types

    from tdmpc2core.agents import single_task
    from tdmpc2core.cli import build_parser
    from tdmpc2core.stages import train_single

    class Agent:
        episode_length, action_repeat, gamma, seed_steps, episodic, compile_seconds = 200, 1, 0.99, 400, False, {}
        pixels = False  # state observations (the stage logs pixel runs apart)
        env = types.SimpleNamespace(env_params={}, effective_settings={})  # what the stage logs and records
        spec = types.SimpleNamespace(sim_episode_length=200)
        placement = types.SimpleNamespace(mesh_for=lambda n_seeds: None)  # one device

        def __init__(self, *a, **k):
            pass

        def train(self, progress, **kw):
            progress({"start_agent_steps": 0, "agent_steps": 200, "total_agent_steps": 700, "phase": "seed",
                      "agent_steps_per_s": 100.0, "seconds": 2.0, "last_eval_return": None})
            raise FloatingPointError("non-finite update metrics at 200 agent steps")

    monkeypatch.setattr(single_task, "TDMPC2", Agent)
    ck = tmp_path / "checkpoints/single/pendulum/seeds_0_1"
    args = build_parser().parse_args([
        "train-single", "--task", "pendulum", "--spec", json.dumps({"env_id": "Pendulum-v1", "agent_steps": 700}),
        "--seeds", "0", "1", "--outdir", str(tmp_path / "out"), "--checkpoint-dir", str(ck)])
    with pytest.raises(FloatingPointError):
        train_single.run(args)
    (rec,) = attempts.read(ck)
    assert rec["outcome"] == "failed: FloatingPointError" and rec["start_step"] == 0
    assert rec["stop"] == {"kind": "error", "signal": None, "step": 200, "total": 700, "unit": "agent steps",
                           "checkpoint": None, "reason": "FloatingPointError: non-finite update metrics at 200 agent steps"}


def test_a_finished_run_of_another_job_in_the_checkpoint_folder_is_refused_and_kept(tmp_path, monkeypatch, capsys):
    """A checkpoint folder holding another job's finished run (a mistyped ``--checkpoint-dir``):
    the stage exits 5 before building anything, naming the differing keys, and the folder (that
    job's trained agent, its marker, its attempts) is left as it was. The same job with other
    settings is a forced rerun and may clear it (``check_finished_run`` passes)."""
    import json

    from tdmpc2core.agents import single_task
    from tdmpc2core.cli import build_parser
    from tdmpc2core.stages import resumable, train_multi, train_single

    ck = tmp_path / "checkpoints/single/cheetah-run/seeds_0_1_2"
    final = ck / "step_000000050000"
    final.mkdir(parents=True)
    (final / "state.msgpack").write_bytes(b"trained agent")
    marker = {"task": "cheetah-run", "seeds": [0, 1, 2], "agent_steps": 50000,
              "outdir": "results/single/cheetah-run", "final_checkpoint": str(final)}
    (ck / resumable.COMPLETE_MARKER).write_text(json.dumps(marker))
    before = sorted((p.relative_to(ck), p.read_bytes() if p.is_file() else None) for p in ck.rglob("*"))
    monkeypatch.setattr(single_task, "TDMPC2", lambda *a, **k: pytest.fail("an agent was built"))
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args([
        "train-single", "--task", "walker-run", "--spec", json.dumps({"env_id": "Pendulum-v1", "agent_steps": 700}),
        "--seeds", "0", "1", "2", "--outdir", "results/single/walker-run", "--checkpoint-dir", str(ck)])
    assert train_single.run(args) == resumable.OTHER_JOBS_FOLDER == 5
    err = capsys.readouterr().err
    assert f"the checkpoint folder {ck} holds the finished run of another job" in err
    assert "task: 'cheetah-run' there, 'walker-run' here" in err and "seeds" not in err.split("another job")[1].split(")")[0]
    assert "--checkpoint-dir" in err and not (tmp_path / "results").exists()
    after = sorted((p.relative_to(ck), p.read_bytes() if p.is_file() else None) for p in ck.rglob("*"))
    assert [x for x in after if x[0].name != ".lock"] == before  # (the folder's lock file: run.lock)
    # the same job (task, seeds, output folder; the path spelt otherwise) with other settings: a forced rerun
    resumable.check_finished_run(ck, {"task": "cheetah-run", "seeds": [0, 1, 2],
                                      "outdir": str(tmp_path / "results/single/cheetah-run/")})
    with pytest.raises(resumable.OtherJobsFolderError, match=r"seeds: \[0, 1, 2\] there, \[0\] here"):
        resumable.check_finished_run(ck, {"task": "cheetah-run", "seeds": [0], "outdir": "results/single/cheetah-run"})
    # train-multi's marker names its pool
    (ck / resumable.COMPLETE_MARKER).write_text(json.dumps({"pool": "mt30", "seeds": [0], "outdir": "results/multi"}))
    args = build_parser().parse_args([
        "train-multi", "--pool", "mt80", "--model-size", "1", "--spec", json.dumps({"updates": 100}), "--seeds", "0",
        "--dataset", "pool.parquet", "--outdir", "results/multi", "--checkpoint-dir", str(ck)])
    monkeypatch.setattr(train_multi, "_make_agent", lambda *a, **k: pytest.fail("an agent was built"))
    assert train_multi.run(args) == 5
    assert "pool: 'mt30' there, 'mt80' here" in capsys.readouterr().err


# ------------------------------------------------------------------ a stop in the final phase
# `tdmpc2 train-single` in a process of its own with a stand-in agent (no training, no JAX
# program): its `train` returns a finished run at once, and the outputs' writes are the stage's
# own. A SIGTERM (or SIGINT) is sent to the process at a chosen moment of the final phase:
#   during: while seed 0's metrics.parquet is being written (the handler runs inside that write)
#   end:    from `train` itself, after its last stop check (a signal as training ends)
#   twice:  SIGINT, then SIGINT again, while seed 0's metrics.parquet is being written
#   none:   no signal (the rerun)
#   after:  SIGTERM once the stage returned (the process's last moments)
FINAL_PHASE_SCRIPT = r'''
import json, os, signal, sys, types
import numpy as np
from tdmpc2core.agents import export, single_task
from tdmpc2core.cli import main
from tdmpc2core.io import atomic, dataset
from tdmpc2core.stages import outputs

mode, out, ck = sys.argv[1:4]
SEEDS, STEPS = [0, 1], 700
say = lambda msg: os.write(2, (msg + "\n").encode())

def hist():
    chunk = lambda steps: {"agent_steps": steps, "env_frames": steps, "updates": np.array([steps, steps]),
                           "wall_time_s": 1.0, "agent_steps_per_s": 100.0,
                           **{k: np.array([0.5, 0.25]) for k in outputs.TRAINING_METRICS + ("train_return",)}}
    return {"eval_agent_steps": np.array([0, STEPS]), "eval_env_frames": np.array([0, STEPS]),
            "eval_returns": np.ones((2, 2, 2)), "eval_lengths": np.full((2, 2, 2), 200),
            "eval_return": np.ones((2, 2)), "chunks": [chunk(400), chunk(STEPS)], "wall_seconds": 7.0}

class Agent:
    episode_length, action_repeat, gamma, seed_steps, episodic, pixels, compile_seconds = 200, 1, 0.99, 400, False, False, {}
    config = {"matmul_precision": "highest", "stand_in": True}
    env = types.SimpleNamespace(env_params={}, effective_settings={})
    spec = types.SimpleNamespace(sim_episode_length=200)
    placement = types.SimpleNamespace(mesh_for=lambda n_seeds: None)

    def __init__(self, *a, **k):
        pass

    def train(self, should_stop, checkpoint_dir, **kw):
        assert not should_stop()
        (checkpoint_dir / "step_000000000700").mkdir(parents=True, exist_ok=True)  # the final checkpoint's stand-in
        if mode == "end":
            os.kill(os.getpid(), signal.SIGTERM)  # after the last check: training returns all the same
        return "state", hist()

class Episodes:
    num_episodes, num_transitions = 3, 600

def save(episodes, path):
    atomic.write_text(path, "stand-in episodes")
    return 17

real_write_table = outputs.write_table

def write_table(path, output, columns):
    path = str(path)
    if os.path.basename(os.path.dirname(path)) == "seed0" and path.endswith("metrics.parquet"):
        if mode == "during":
            os.kill(os.getpid(), signal.SIGTERM)
        elif mode == "twice":
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
    real_write_table(path, output, columns)
    say("WROTE " + path)

single_task.TDMPC2 = Agent
export.export_episodes = lambda *a, **k: Episodes()
dataset.save_dataset = save
outputs.write_table = write_table
rc = main(["train-single", "--task", "pendulum", "--spec", json.dumps({"env_id": "Pendulum-v1", "agent_steps": STEPS, "eval_episodes": 2}),
           "--seeds", "0", "1", "--outdir", out, "--checkpoint-dir", ck])
if mode == "after":  # the stage has returned: a signal in the process's last moments
    say("RETURNED " + str(rc))
    os.kill(os.getpid(), signal.SIGTERM)
    import time
    time.sleep(2)
    say("NOT STOPPED")
sys.exit(rc)
'''


def _final_phase_stage(tmp_path, mode):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
               JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, "-c", FINAL_PHASE_SCRIPT, mode, str(tmp_path / "out"), str(tmp_path / "ck")],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    return res.returncode, res.stderr


def _outputs(tmp_path):
    """The output files of the job (and any temporary file of an unfinished atomic write)."""
    out = tmp_path / "out"
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) if out.exists() else []


ALL_OUTPUTS = sorted(f"seed{s}/{f}" for s in (0, 1) for f in ("episodes.parquet", "eval.parquet", "metrics.parquet",
                                                               "run.json"))


def test_sigterm_in_the_final_phase_stops_after_the_write_under_way_and_the_rerun_writes_everything(tmp_path):
    """A SIGTERM while train-single writes its outputs (training complete): logged at once, the
    write under way finishes, nothing more is written, no run.json is left (nothing looks
    complete), exit 143, the attempt says stopped (at 700/700, the final checkpoint named). The
    same command run again writes every output, and its attempt is completed."""
    import signal

    rc, err = _final_phase_stage(tmp_path, "during")
    assert rc == 128 + signal.SIGTERM, err[-3000:]
    said = err.index("received SIGTERM during the final phase: finishing the atomic write under way, then exiting")
    assert said < err.index("WROTE " + str(tmp_path / "out/seed0/metrics.parquet")), err  # at once, not after
    assert "stopped by SIGTERM in the final phase, after 700/700 agent steps" in err
    assert _outputs(tmp_path) == ["seed0/eval.parquet", "seed0/metrics.parquet"]  # complete files, no .tmp-*
    (rec,) = attempts.read(tmp_path / "ck")
    assert rec["outcome"] == "stopped by SIGTERM" and rec["end_step"] == 700
    assert rec["stop"] == {"kind": "signal", "signal": "SIGTERM", "step": 700, "total": 700, "unit": "agent steps",
                           "checkpoint": str(tmp_path / "ck/step_000000000700"),
                           "reason": "in the final phase: the outputs were left to the rerun"}
    assert not (tmp_path / "ck/outputs_written.json").exists()
    from tdmpc2core.pipeline.stops import stopped_line  # the end-of-run hook's line for it

    assert stopped_line("job", rec, None) == (
        f"job: stopped at 700/700 agent steps (in the final phase: the outputs were left to the rerun), checkpoint "
        f"{tmp_path / 'ck/step_000000000700'}; run the same snakemake command to resume from it.")

    rc, err = _final_phase_stage(tmp_path, "none")
    assert rc == 0, err[-3000:]
    assert _outputs(tmp_path) == ALL_OUTPUTS
    assert "(nothing compiled); final eval return" in err  # not "(compiling: )"
    recs = attempts.read(tmp_path / "ck")
    assert [r["outcome"] for r in recs] == ["stopped by SIGTERM", "completed"] and "stop" not in recs[1]
    run = json.loads((tmp_path / "out/seed1/run.json").read_text())
    assert [r["outcome"] for r in run["attempts"]] == ["stopped by SIGTERM", "completed"]
    assert (tmp_path / "ck/outputs_written.json").exists()


def test_sigterm_as_training_ends_is_a_stop_and_a_second_sigint_in_the_final_phase_ends_it_at_once(tmp_path):
    """A SIGTERM after training's last stop check (train returns normally) stops the job before
    any output (it was ignored: exit 0); a second SIGINT during the final phase raises at once,
    the write it interrupted left undone, and the attempt records it."""
    import signal

    rc, err = _final_phase_stage(tmp_path, "end")
    assert rc == 128 + signal.SIGTERM, err[-3000:]
    assert "received SIGTERM as training ended: exiting (143) before the outputs are written" in err
    assert _outputs(tmp_path) == []
    (rec,) = attempts.read(tmp_path / "ck")
    assert rec["outcome"] == "stopped by SIGTERM" and rec["stop"]["step"] == 700

    rc, err = _final_phase_stage(tmp_path, "twice")
    assert rc != 0 and "KeyboardInterrupt" in err, err[-3000:]
    assert "received SIGINT during the final phase" in err and "stopped by a second SIGINT in the final phase" in err
    assert _outputs(tmp_path) == ["seed0/eval.parquet"]  # metrics.parquet's write never started; no run.json
    rec = attempts.read(tmp_path / "ck")[-1]
    assert rec["outcome"] == "stopped by SIGINT" and rec["stop"]["signal"] == "SIGINT"
    assert rec["stop"]["reason"].startswith("a second SIGINT in the final phase")


def test_sigterm_after_the_run_finished_exits_0_with_every_output_kept(tmp_path):
    """A SIGTERM in a finished job's last moments (the stage returned, the process not yet
    ended): one log line and exit 0, every output and the completed attempt kept. It used to kill
    the process (exit -15), which Snakemake takes for a failed job: it deleted the outputs, and
    the rerun found the finished checkpoint folder and trained anew from step 0."""
    rc, err = _final_phase_stage(tmp_path, "after")
    assert rc == 0, err[-3000:]
    assert "RETURNED 0" in err and "NOT STOPPED" not in err, err[-3000:]
    assert "received SIGTERM after the run finished (every output written): nothing to stop; exiting 0" in err
    assert _outputs(tmp_path) == ALL_OUTPUTS
    assert [r["outcome"] for r in attempts.read(tmp_path / "ck")] == ["completed"]
