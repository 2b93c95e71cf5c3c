"""The agents' extension points (issue 25): one place compiling per-seed programs
(``run.compiled.per_seed``, one device today), the per-update hook folded inside the compiled
update loop of the single-task agent (``agents.common.UpdateHook``; the multi-task agent's, on
both of its data paths: tests/test_multitask_host.py, beside the plain runs it compares with),
and the loggers the run driver calls after each chunk record and evaluation (``run.loggers``)."""
from __future__ import annotations

import csv
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tdmpc2core import TDMPC2
from tdmpc2core.agents.common import EVAL_KEY_OFFSET, UpdateHook, eval_key
from tdmpc2core.agents.multitask import TDMPC2MultiTask
from tdmpc2core.io import loggers as lg
from tdmpc2core.run.compiled import per_seed

import logger_readback as readback
from test_multitask import TINY, make_dataset, random_episodes, task

COUNT = UpdateHook(init=lambda: jnp.zeros((), jnp.int32), fold=lambda c, st, m: c + 1)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------------- per_seed and devices
def test_per_seed_compiles_vmapped_programs_per_signature():
    timings = {}
    f = per_seed(lambda x, y: x * y, name="mul", compile_seconds=timings, in_axes=(0, None))
    out = f(jnp.arange(3.0), jnp.float32(2.0))
    np.testing.assert_array_equal(np.asarray(out), [0.0, 2.0, 4.0])
    assert timings["mul"]["calls_compiled"] == 1
    g = per_seed(lambda x, k: x * k, name="static", batched=False, static_argnums=(1,))
    np.testing.assert_array_equal(np.asarray(g(jnp.ones(2), 3)), [3.0, 3.0])
    np.testing.assert_array_equal(np.asarray(g(jnp.ones(2), 4)), [4.0, 4.0])  # a new static value, a new program
    with pytest.raises(ValueError, match="batched=False"):
        per_seed(lambda x, k: x, name="bad", static_argnums=(1,))
    # devices: tests/test_devices.py; a batch that does not divide over the devices asked for
    dev = jax.devices()[0]
    with pytest.raises(ValueError, match="does not divide evenly over 2 devices"):
        TDMPC2MultiTask(pool(), batch_size=7, devices=[dev, dev], **TINY)


def test_eval_keys_are_shared_by_the_agents():
    assert EVAL_KEY_OFFSET == 10_000_019
    want = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(3 + 10_000_019), 5), 1)
    np.testing.assert_array_equal(np.asarray(eval_key(3, 5, 1)), np.asarray(want))


# --------------------------------------------------------------------- a small pool
def pool():
    rng = np.random.default_rng(0)
    tasks = [task("a", 3, 1, 12), task("b", 2, 2, 12)]
    return make_dataset([random_episodes(rng, 3, 12, 3, 1), random_episodes(rng, 3, 12, 2, 2)], tasks)


# --------------------------------------------------------------------- loggers
def test_csv_logger_header_from_the_first_record_new_columns_and_resume(tmp_path):
    path = tmp_path / "logs" / "run.csv"
    log = lg.make_logger("csv", path=path)
    log.log(10, {"Train/a": 1.5, "Train/b": float("nan")})
    log.log(20, {"Train/a": 2.0})
    log.log(20, {"Eval/episodic mean reward": -3.25})  # a new column: the file is rewritten with it
    log.close()
    rows = read_csv(path)
    assert list(rows[0]) == ["step", "Train/a", "Train/b", "Eval/episodic mean reward"]
    assert [r["step"] for r in rows] == ["10", "20", "20"]
    assert rows[0]["Train/b"] == "nan" and rows[1]["Train/b"] == "" and rows[0]["Eval/episodic mean reward"] == ""
    assert float(rows[2]["Eval/episodic mean reward"]) == -3.25
    again = lg.CSVLogger(path)  # a resumed run appends to the same file
    again.log(30, {"Train/a": 3.0})
    assert [r["step"] for r in read_csv(path)] == ["10", "20", "20", "30"]
    (tmp_path / "other.csv").write_text("x,y\n1,2\n")
    with pytest.raises(ValueError, match="other.csv.*'step'"):
        lg.CSVLogger(tmp_path / "other.csv")


def test_logger_registry():
    assert "csv" in lg.logger_kinds()
    with pytest.raises(ValueError, match="unknown logger kind 'nope'; registered: .*csv"):
        lg.make_logger("nope")
    with pytest.raises(ValueError, match="already registered"):
        lg.register_logger("csv", lg.CSVLogger)
    with pytest.raises(TypeError, match="callable"):
        lg.register_logger("not-callable", 3)
    with pytest.raises(TypeError, match="log\\(step, metrics\\)"):
        TDMPC2MultiTask(pool(), batch_size=8, **TINY).train(n_timesteps=1, loggers=[object()])


# the W&B logger of a process that is killed (kill -9) after logging the rows of five steps the way
# the run driver does (each step's Train and Eval records, then flush); it then waits to be killed
_KILLED_WANDB = """
import sys, time
from tdmpc2core.io import loggers as lg
w = lg.make_logger("wandb", project="t", group="g", name="n", dir=sys.argv[1], mode="offline",
                   settings={"x_disable_stats": True, "silent": True})
for i in range(5):
    w.log_seeds(100 * i, {0: {"Train/x": float(i)}, 1: {"Train/x": float(i)}})
    w.log_seeds(100 * i, {0: {"Eval/y": 2.0 * i}, 1: {"Eval/y": 2.0 * i}})
    getattr(w, "flush", lambda: None)()  # what the run driver calls once a step's records are given
print("logged", flush=True)
time.sleep(120)
"""


def _history_steps(records) -> list:
    return [int(r["history"]["item"]["_step"]) for r in records if r["type"] == "history"]


def test_wandb_keeps_what_was_logged_seconds_before_a_kill(tmp_path):
    """kill -9 a process a few seconds after it logged five steps: every step's row is in each
    seed's .wandb file (W&B's reader, `wandb leet inspect`), Train and Eval of a step in one row
    (issue 44: W&B's 15 s write interval and a held last row lost all but 4 of 19 steps)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pytest.importorskip("wandb", reason="W&B is not installed: pip install -e '.[wandb]'")
    root = str(Path(__file__).resolve().parents[1])  # this checkout's tdmpc2core in the subprocess
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p]))
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WANDB, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert proc.stdout.readline().strip() == "logged"
        time.sleep(3.0)  # "a few seconds" before the kill (WandbLogger.FLUSH_SECONDS: 1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2
    for run in runs:
        records = readback.wandb_records(run)
        rows = [r["history"]["item"] for r in records if r["type"] == "history"]
        assert _history_steps(records) == [0, 100, 200, 300, 400]
        assert [(float(r["Train/x"]), float(r["Eval/y"])) for r in rows] == [(i, 2.0 * i) for i in range(5)]


def test_wandb_close_returns_when_the_files_are_complete(tmp_path, monkeypatch):
    """W&B finishes writing a run's .wandb file after ``finish`` returns (here made to happen
    0.5 s later, as it sometimes did: 7 bytes right after close): close() returns only once
    every file is complete, its last record W&B's exit."""
    import threading
    import time

    pytest.importorskip("wandb", reason="W&B is not installed: pip install -e '.[wandb]'")
    from wandb.sdk import wandb_run

    real = wandb_run.Run.finish

    def late(self, *a, **k):
        real(self, *a, **k)
        for f in Path(self.dir).parent.glob("run-*.wandb"):
            # W&B may really be late (a loaded machine): the file whole first, or the rewrite
            # below would put back a part of it after W&B completed it (7 bytes once in CI)
            deadline = time.monotonic() + 60
            while not lg.wandb_file_complete(f) and time.monotonic() < deadline:
                time.sleep(0.01)
            whole = f.read_bytes()
            f.write_bytes(whole[:7])  # the header only, as seen right after close
            threading.Timer(0.5, f.write_bytes, (whole,)).start()

    monkeypatch.setattr(wandb_run.Run, "finish", late)
    w = lg.make_logger("wandb", project="t", group="g", name="n", dir=tmp_path, mode="offline",
                       settings={"x_disable_stats": True, "silent": True})
    w.log_seeds(0, {0: {"Train/x": 1.0}, 1: {"Train/x": 2.0}})
    w.log_seeds(100, {0: {"Train/x": 3.0}, 1: {"Train/x": 4.0}})
    w.close()
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(next(r.glob("run-*.wandb")).stat().st_size > 7 for r in runs)
    for run in runs:
        records = readback.wandb_records(run)
        assert records[-1]["type"] == "exit" and _history_steps(records) == [0, 100]


class Failing:
    calls = 0

    def log(self, step, metrics):
        Failing.calls += 1
        raise OSError("disk\nfull")

    def close(self):
        pass


def test_single_task_run_logs_to_every_kind_drops_a_failing_logger_and_counts_updates(tmp_path, capsys):
    agent = TDMPC2("Pendulum-v1", n_envs=1, model_size=1, mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16,
                   num_elites=4, num_pi_trajs=2, iterations=1, batch_size=16, seed_steps=200, post_update=COUNT)
    path = tmp_path / "train.csv"
    # every kind on the same run: W&B (offline, one run per seed) and TensorBoard (a folder per
    # seed) when their extras are installed (tests/test_loggers_readback.py reads them back)
    more = readback.loggers(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # 2 episodes, 2 seeds: the evaluation program of tests/test_checkpoint.py's runs (the
        # session's compilation cache holds it: one program fewer to compile)
        # the reference API's spellings (tests/test_seed_api.py): evaluations every log_frequency
        # agent steps, num_episode_test episodes each, and the logging config's own CSV logger
        config = lg.LoggingConfig(log_frequency=200, kind="csv", dir=str(tmp_path / "cfg"), name="pendulum")
        state, hist = agent.train(seed=[0, 1], n_timesteps=210, num_episode_test=2, logging_config=config,
                                  loggers=[Failing(), lg.make_logger("csv", path=path), *more.values()],
                                  progress_bar=True)
    for logger in more.values():
        logger.close()
    readback.check(more, hist, [0, 1])
    assert read_csv(tmp_path / "cfg" / "pendulum.csv") == read_csv(path)  # built, fed and closed by train
    np.testing.assert_array_equal(hist["Eval/episodic mean reward"], hist["eval_return"])
    assert "210/210" in capsys.readouterr().err  # the progress bar, forced on (stderr is no terminal here)
    dropped = [w for w in caught if "Failing" in str(w.message)]
    assert len(dropped) == 1 and Failing.calls == 1  # warned once, then never called again
    assert "\n" not in str(dropped[0].message) and "disk full" in str(dropped[0].message)
    np.testing.assert_array_equal(np.asarray(state.ext), np.asarray(state.agent.updates))
    assert int(np.asarray(state.ext)[0]) == 200 + 9  # the burst at tick 200, then one per tick to 209
    rows = read_csv(path)
    evals = [r for r in rows if r["Eval/episodic mean reward"]]
    trains = [r for r in rows if r["Train/consistency_loss"]]
    assert [int(r["step"]) for r in evals] == list(hist["eval_agent_steps"])  # 0, 200, 210
    assert [int(r["step"]) for r in trains] == [c["agent_steps"] for c in hist["chunks"]]
    np.testing.assert_allclose([float(r["Eval/episodic mean reward"]) for r in evals],
                               hist["eval_return"].mean(axis=1), rtol=1e-6)
    assert [int(float(r["Eval/env_frames"])) for r in evals] == list(hist["eval_env_frames"])
    last = hist["chunks"][-1]
    assert float(trains[-1]["Train/updates"]) == float(np.mean(last["updates"]))
    assert float(trains[-1]["Train/env_frames"]) == last["env_frames"]
