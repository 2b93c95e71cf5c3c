"""Checkpoints and resumable training: a run continued in calls, restored by a new process,
or stopped by SIGTERM and rerun equals the uninterrupted run bit for bit (CPU); damaged
checkpoints are detected; other settings and missing checkpoints are errors.

The training tests share one tiny configuration (Pendulum, 2 seeds x 2 envs, 700 agent
steps) and the test session's JAX compilation cache (tests/conftest.py; the checkout's
git-ignored ``.jax_cache/`` when run without it), so that this process and the subprocesses
compile the training program once (about 3 min on a busy 2-core CPU the first time, seconds
afterwards), and so do the other files that build the same multi-task agent (``mt_agent``):
tests/test_devices.py's and tests/test_slurm.py's one-process multi-task runs.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow.parquet as pq
import pytest

from tdmpc2core.io import attempts
from tdmpc2core.io import checkpoint as ck
from tdmpc2core.run.driver import WALL_CLOCK_KEYS, SubChunkSizer, TrainingInterrupted

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("TDMPC2_TEST_JAX_CACHE") or ROOT / ".jax_cache")
TINY = dict(model_size=1, mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16, num_elites=4,
            num_pi_trajs=2, iterations=1, batch_size=16)
AGENT = dict(TINY, seed_steps=400)  # T = 200, 2 envs: 200 random ticks, the burst at tick 200
N_ENVS, SEEDS, STEPS = 2, [0, 1], 700
RUN = dict(eval_every=200, eval_episodes=2)  # evaluations at 0, 200, 400, 600, 700
SPEC = {"env_id": "Pendulum-v1", "n_envs": N_ENVS, "agent_steps": STEPS, "agent": AGENT, **RUN}


def leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def assert_same_state(a, b):
    la, lb = leaves(a), leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(x, y)  # NaNs (the replay's reset rows) compare equal


def assert_same_history(h, w):
    np.testing.assert_array_equal(h["eval_agent_steps"], w["eval_agent_steps"])
    np.testing.assert_array_equal(h["eval_returns"], w["eval_returns"])
    np.testing.assert_array_equal(h["eval_lengths"], w["eval_lengths"])


def subprocess_env():
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(CACHE))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


@pytest.fixture(scope="module")
def compile_cache():
    """The persistent compilation cache for this module's programs (and the subprocesses')."""
    from jax.experimental.compilation_cache import compilation_cache as cc

    before = jax.config.jax_compilation_cache_dir
    cc.set_cache_dir(str(CACHE))
    cc.reset_cache()  # re-read the setting at the next compilation
    yield
    cc.set_cache_dir(before)
    cc.reset_cache()


@pytest.fixture(scope="module")
def tiny_agent(compile_cache):
    from tdmpc2core import TDMPC2

    return TDMPC2("Pendulum-v1", n_envs=N_ENVS, **AGENT)


@pytest.fixture(scope="module")
def whole(tiny_agent):
    """The uninterrupted run: (agent, final state, history)."""
    agent = tiny_agent
    state, hist = agent.train(seed=SEEDS, n_timesteps=STEPS, **RUN)
    assert agent.state_tick(state) * N_ENVS == STEPS
    np.testing.assert_array_equal(hist["eval_agent_steps"], [0, 200, 400, 600, 700])
    return agent, state, hist


@pytest.fixture(scope="module")
def saved_init(tiny_agent, tmp_path_factory):
    """A run's initial state saved as a checkpoint folder (no training needed)."""
    d = tmp_path_factory.mktemp("init")
    tiny_agent.save_checkpoint(d, tiny_agent.init(SEEDS, STEPS), None, seeds=SEEDS, total_timesteps=STEPS, **RUN)
    return d


# ------------------------------------------------------------------ chunked runs
@pytest.mark.slow
def test_chunked_and_wall_time_capped_equals_whole(whole):
    agent, w_state, w_hist = whole
    s1, h1 = agent.train(seed=SEEDS, n_timesteps=300, total_timesteps=STEPS, **RUN)
    assert agent.state_tick(s1) == 150
    # the rest with a cap so small that every call of the program runs one tick
    calls = []
    s2, h2 = agent.train(seed=SEEDS, n_timesteps=STEPS - 300, total_timesteps=STEPS, state=s1, history=h1,
                         max_chunk_seconds=1e-9, progress=calls.append, **RUN)
    assert len(calls) == (STEPS - 300) // N_ENVS and all(c["ticks"] == 1 for c in calls)
    assert_same_state(s2, w_state)
    assert_same_history(h2, w_hist)
    # the same chunk records, plus one at the end of the first call (a call's end is a chunk boundary)
    extra = [c for c in h2["chunks"] if c["agent_steps"] == 300]
    assert len(extra) == 1
    rest = [c for c in h2["chunks"] if c["agent_steps"] != 300]
    assert [c["agent_steps"] for c in rest] == [c["agent_steps"] for c in w_hist["chunks"]]
    for c, cw in zip(rest[2:], w_hist["chunks"][2:]):  # after the split point: identical metrics
        for k in cw:
            if k not in WALL_CLOCK_KEYS and k != "phase":
                np.testing.assert_array_equal(np.asarray(c[k]), np.asarray(cw[k]), err_msg=k)


def test_schedule_is_absolute_and_eval_index_continues():
    from tdmpc2core import TDMPC2

    from tdmpc2core.run.driver import plan

    agent = TDMPC2("Pendulum-v1", n_envs=N_ENVS, **AGENT)
    whole_plan, at_start = plan(agent.program(), STEPS, 200)
    assert at_start and whole_plan[0][:2] == ("seed", 0)
    cuts = [a for _, a, _, _ in whole_plan] + [STEPS // N_ENVS]
    # a continuation from tick 120 (an arbitrary, checkpointed tick) cuts at the same absolute ticks
    rest, at_start2 = plan(agent.program(), STEPS - 240, 200, start_tick=120, total_steps=STEPS)
    assert not at_start2
    assert [a for _, a, _, _ in rest][1:] == [c for c in cuts if c > 120][:-1]
    assert [(p, e) for p, a, _, e in rest if a > 120] == [(p, e) for p, a, _, e in whole_plan if a > 120]
    # evaluation keys: index = evaluations before the tick (0 at the start, then 1 per 200 agent steps)
    assert [agent.eval_index(t, 200) for t in (0, 100, 200, 300, 350)] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="past total_timesteps"):
        plan(agent.program(), 400, 200, start_tick=200, total_steps=STEPS)


def test_sub_chunk_sizer_probes_then_fills_the_cap():
    s = SubChunkSizer(2.0)
    assert s.ticks("seed", 1000) == 1          # nothing measured in this phase: a 1-tick probe
    s.record("seed", 1, 60.0)                   # the first call compiled: 60 s
    assert s.ticks("seed", 1000) == 1
    s.record("seed", 1, 0.01)
    assert s.ticks("seed", 1000) == 8           # growth at most x8 per call
    s.record("seed", 8, 0.08)
    assert s.ticks("seed", 1000) == 64
    s.record("seed", 64, 0.64)
    assert s.ticks("seed", 1000) == 200         # 2 s / 0.01 s per tick
    assert s.ticks("seed", 30) == 30
    assert s.ticks("train", 1000) == 1          # phases are measured separately
    assert SubChunkSizer(None).ticks("train", 1000) == 1000
    with pytest.raises(ValueError, match="max_chunk_seconds"):
        SubChunkSizer(0)


# ------------------------------------------------------------- stopped, then restored
@pytest.mark.slow
def test_stopped_then_restored_equals_whole(whole, tmp_path):
    """Stopped by ``should_stop`` (checkpoints every 100 agent steps, all kept, one at the stop),
    the newest checkpoint then damaged: the resumed run warns, uses the one before and ends as
    the uninterrupted run. Resumed in this process (the same programs, nothing traced again; the
    state comes from the folder); a new process resumes from a damaged folder in
    test_sigterm_then_rerun_equals_whole."""
    agent, w_state, w_hist = whole
    d = tmp_path / "ckpt"
    seen = []
    with pytest.raises(TrainingInterrupted) as exc:
        agent.train(seed=SEEDS, n_timesteps=STEPS, **RUN, checkpoint_dir=d, checkpoint_every=100,
                    keep_checkpoints=None, max_chunk_seconds=0.05, progress=lambda p: seen.append(p["agent_steps"]),
                    should_stop=lambda: bool(seen) and seen[-1] >= 530)
    stop = exc.value
    assert 530 <= stop.agent_steps < STEPS and stop.checkpoint.step == stop.agent_steps
    assert stop.checkpoint.path == d / ck.checkpoint_name(stop.agent_steps)
    steps = [int(p.name.split("_")[1]) for p in ck.list_checkpoints(d)]
    assert steps == [100, 200, 300, 400, 500, stop.agent_steps]
    assert not list(d.glob(".tmp-*"))
    # the newest checkpoint is then damaged (cut short): the resumed run must warn and use step 500
    payload = stop.checkpoint.path / ck.PAYLOAD
    payload.write_bytes(payload.read_bytes()[: payload.stat().st_size // 2])

    with pytest.warns(ck.CheckpointWarning, match="truncated"):
        state, hist = agent.train(seed=SEEDS, n_timesteps=STEPS, **RUN, checkpoint_dir=d, checkpoint_every=100)
    assert agent.state_tick(state) == STEPS // N_ENVS
    assert_same_state(state, w_state)
    assert_same_history(hist, w_hist)
    final = ck.latest_checkpoint(d)
    assert final.name == ck.checkpoint_name(STEPS)
    state, hist, manifest = agent.restore(final, seeds=SEEDS, total_timesteps=STEPS, **RUN)
    assert manifest["meta"]["agent_steps"] == STEPS and manifest["payload"]["bytes"] > 0
    assert_same_state(state, w_state)
    assert_same_history(hist, w_hist)
    assert [c["agent_steps"] for c in hist["chunks"]] == [c["agent_steps"] for c in w_hist["chunks"]]


@pytest.mark.slow
@pytest.mark.parametrize("at", [400, 700])
def test_stop_before_an_evaluation_then_resumed_evaluates_first(whole, tmp_path, at):
    """A stop asked when a chunk that ends at an evaluation point (400; 700, the run's end) has
    run is acted on before that evaluation (which, compiling included, can outlast a job's
    SIGTERM grace: a device call lost 10,000 agent steps so): checkpoint there, the chunk's record
    without an evaluation. The resumed run evaluates first (owed, not skipped), gives that record
    to the callback once, rewrites the checkpoint with it and ends as the uninterrupted run."""
    agent, w_state, w_hist = whole
    d = tmp_path / "ckpt"
    seen, records = [], []
    with pytest.raises(TrainingInterrupted) as exc:
        agent.train(seed=SEEDS, n_timesteps=STEPS, **RUN, checkpoint_dir=d, checkpoint_every=100,
                    keep_checkpoints=None, progress=lambda p: seen.append(p["agent_steps"]), callback=records.append,
                    should_stop=lambda: bool(seen) and seen[-1] >= at)
    stop = exc.value
    assert stop.agent_steps == at and stop.checkpoint.step == at
    evaluated = [s for s in w_hist["eval_agent_steps"] if s < at]
    np.testing.assert_array_equal(stop.history["eval_agent_steps"], evaluated)  # not the one at `at`
    assert stop.history["chunks"][-1]["agent_steps"] == at and "eval_position" not in stop.history["chunks"][-1]
    assert [r["agent_steps"] for r in records] == [c["agent_steps"] for c in w_hist["chunks"] if c["agent_steps"] < at]

    state, hist = agent.train(seed=SEEDS, n_timesteps=STEPS, **RUN, checkpoint_dir=d, checkpoint_every=100,
                              keep_checkpoints=None, callback=records.append)
    assert_same_state(state, w_state)
    assert_same_history(hist, w_hist)
    assert [c.get("eval_position") for c in hist["chunks"]] == [c.get("eval_position") for c in w_hist["chunks"]]
    assert [r["agent_steps"] for r in records] == [c["agent_steps"] for c in w_hist["chunks"]]  # each once
    assert "eval_position" in records[len([c for c in w_hist["chunks"] if c["agent_steps"] < at])]
    # the checkpoint of the stop now holds its evaluation (a rerun owes nothing and evaluates nothing)
    _, h_at, manifest = agent.restore(d / ck.checkpoint_name(at), seeds=SEEDS, total_timesteps=STEPS, **RUN)
    assert manifest["meta"]["evaluations"] == len(evaluated) + 1
    np.testing.assert_array_equal(h_at["eval_returns"][-1], w_hist["eval_returns"][len(evaluated)])


# ------------------------------------------------------------- SIGTERM of the CLI stage
def stage_cmd(out: Path, ckdir: Path) -> list[str]:
    return [sys.executable, "-m", "tdmpc2core.cli", "train-single", "--task", "pendulum", "--spec",
            json.dumps(SPEC), "--seeds", *map(str, SEEDS), "--outdir", str(out), "--checkpoint-dir", str(ckdir),
            "--checkpoint-every", "100", "--keep-checkpoints", "2", "--max-chunk-seconds", "0.2"]


@pytest.mark.slow
def test_sigterm_then_rerun_equals_whole(whole, tmp_path):
    """`tdmpc2 train-single` stopped by SIGTERM in the training phase: exit 143, no outputs, the
    newest 2 checkpoints kept. The newest is then damaged; rerunning the command (a new process
    restoring the run from its folder) warns, resumes from the one before, and writes the
    uninterrupted run's outputs; the folder keeps the final checkpoint, equal to it."""
    agent, w_state, w_hist = whole
    out, ckdir = tmp_path / "results/single/pendulum", tmp_path / "checkpoints/single/pendulum/seeds_0_1"
    # with the traced programs kept (tdmpc2core.run.program_cache): the first process traces and
    # stores them, the rerun loads them, and the outputs still equal the in-process run's (jax.jit)
    env = dict(subprocess_env(), TDMPC2_PROGRAM_CACHE_DIR=str(tmp_path / "programs"))
    proc = subprocess.Popen(stage_cmd(out, ckdir), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env=env, cwd=tmp_path)
    lines = []
    killer = threading.Timer(900, proc.kill)  # never hang the test run
    killer.start()
    try:
        for line in proc.stderr:  # SIGTERM once the checkpoint at 500 agent steps (training phase) is written
            lines.append(line)
            if "step_000000000500 written" in line:
                proc.send_signal(signal.SIGTERM)
                break
        lines += proc.stderr.readlines()
        rc = proc.wait()
    finally:
        killer.cancel()
    log = "".join(lines)
    assert rc == 128 + signal.SIGTERM, log[-4000:]
    assert "received SIGTERM" in log and "stopped by SIGTERM at" in log and "rerun the same command" in log
    for s in SEEDS:  # no output that could pass for complete
        assert not (out / f"seed{s}" / "run.json").exists()
        assert not (out / f"seed{s}" / "eval.parquet").exists()
    kept = ck.list_checkpoints(ckdir)
    assert len(kept) == 2  # keep_checkpoints
    assert ck.latest_checkpoint(ckdir) == kept[-1]
    stopped_at, before = (int(p.name.split("_")[1]) for p in (kept[-1], kept[0]))
    # stopped in the training phase, before the end (at 500 itself when the signal arrived before
    # the check that follows that checkpoint; 500 lies inside the schedule's chunk 402-600)
    assert 500 <= stopped_at < STEPS and before < stopped_at
    # the newest checkpoint is then damaged (cut short): the rerun, a new process, must warn,
    # skip it and resume from the one before
    payload = kept[-1] / ck.PAYLOAD
    payload.write_bytes(payload.read_bytes()[: payload.stat().st_size // 2])

    assert sorted(p.name.split("-")[0] for p in (tmp_path / "programs").glob("*.jaxprog")) == ["chunk", "eval", "init"]
    res = subprocess.run(stage_cmd(out, ckdir), capture_output=True, text=True, timeout=900,
                         env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "not traced, from the program cache: " in res.stderr, res.stderr[-4000:]
    assert "skipping checkpoint" in res.stderr and "truncated" in res.stderr, res.stderr[-4000:]
    assert f"resumed from {kept[0]}" in res.stderr
    assert "last eval return" in res.stderr and "left" in res.stderr
    # the outputs equal the uninterrupted run's
    for i, s in enumerate(SEEDS):
        ev = pq.read_table(out / f"seed{s}" / "eval.parquet").to_pandas()
        np.testing.assert_array_equal(ev["return"].to_numpy(), w_hist["eval_returns"][:, i, :].reshape(-1))
        np.testing.assert_array_equal(ev["agent_steps"].to_numpy(), np.repeat(w_hist["eval_agent_steps"], 2))
        met = pq.read_table(out / f"seed{s}" / "metrics.parquet").to_pandas()
        assert met["agent_steps"].tolist() == [c["agent_steps"] for c in w_hist["chunks"]]
        for k in ("updates", "total_loss", "pi_scale", "grad_norm", "train_return"):
            np.testing.assert_array_equal(met[k].to_numpy(), [np.float64(np.asarray(c[k])[i]) for c in w_hist["chunks"]],
                                          err_msg=k)
        run = json.loads((out / f"seed{s}" / "run.json").read_text())
        assert run["resumed_from_agent_steps"] == before
        # every row of the seed's episodes names the seed and the run's id, as run.json does (the
        # id a function of run.json's settings: the same for this resumed run as for a whole one)
        from tdmpc2core.dataset import RunInfo, load_dataset, run_id
        assert run["run_id"] == run_id("pendulum", s, run["spec"], run["agent_config"])
        assert load_dataset(out / f"seed{s}" / "episodes.parquet").runs == (RunInfo(s, run["run_id"]),)
    # the folder keeps the final checkpoint (the trained agent) and a completion marker
    assert [p.name for p in ck.list_checkpoints(ckdir)] == [ck.checkpoint_name(STEPS)]
    assert (ckdir / "outputs_written.json").exists()
    state, hist, _ = agent.restore(ck.latest_checkpoint(ckdir), seeds=SEEDS, total_timesteps=STEPS, **RUN)
    assert_same_state(state, w_state)
    assert_same_history(hist, w_hist)


# ------------------------------------------------------------- settings and missing checkpoints
def test_config_mismatch_is_an_error_naming_the_setting(tiny_agent, saved_init, capsys):
    from tdmpc2core import TDMPC2

    agent = tiny_agent
    path = ck.latest_checkpoint(saved_init)
    assert path.name == "step_000000000000"
    other = TDMPC2("Pendulum-v1", n_envs=N_ENVS, **dict(AGENT, horizon=4))
    with pytest.raises(ck.CheckpointMismatchError, match=r"agent\.horizon: checkpoint 3, now 4"):
        other.restore(path)
    with pytest.raises(ck.CheckpointMismatchError, match=r"agent\.n_envs: checkpoint 2, now 1"):
        TDMPC2("Pendulum-v1", n_envs=1, **AGENT).restore(path)
    with pytest.raises(ck.CheckpointMismatchError, match=r"run\.eval_every: checkpoint 200, now 100"):
        agent.restore(path, eval_every=100)
    with pytest.raises(ck.CheckpointMismatchError, match=r"run\.seeds"):
        agent.restore(path, seeds=[0, 2])
    with pytest.raises(ck.CheckpointMismatchError, match=r"run\.total_timesteps: checkpoint 700, now 900"):
        agent.train(seed=SEEDS, n_timesteps=900, checkpoint_dir=saved_init, **RUN)

    # the stage: exit code 2, the setting, the folder and what to do
    from tdmpc2core.stages import train_single

    from tdmpc2core.cli import build_parser

    spec = dict(SPEC, agent=dict(AGENT, horizon=4))
    args = build_parser().parse_args(["train-single", "--task", "pendulum", "--spec", json.dumps(spec), "--seeds",
                                      "0", "1", "--outdir", str(saved_init / "out"), "--checkpoint-dir",
                                      str(saved_init)])
    assert train_single.run(args) == 2
    err = capsys.readouterr().err
    assert "agent.horizon: checkpoint 3, now 4" in err
    assert f"Delete it (rm -r {saved_init})" in err and "checkpoint_dir" in err


def test_missing_checkpoint_is_an_error(tiny_agent, tmp_path):
    agent = tiny_agent
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nope")):
        agent.restore(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ck.restore(tmp_path / "nope", {"x": np.zeros(2)})
    assert ck.latest_checkpoint(tmp_path / "no-folder") is None  # nothing saved yet: a fresh start
    assert ck.list_checkpoints(tmp_path / "no-folder") == []


def test_resume_false_refuses_a_folder_with_checkpoints(tiny_agent, saved_init):
    with pytest.raises(ValueError, match="resume=True"):
        tiny_agent.train(seed=SEEDS, n_timesteps=STEPS, checkpoint_dir=saved_init, resume=False, **RUN)


# ------------------------------------------------------------- where a restored state is placed
RESTORE_PLACEMENT_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[2])
import jax, jax.numpy as jnp
from jax import monitoring
import test_checkpoint as tc
from tdmpc2core import TDMPC2
from tdmpc2core.io import checkpoint as ck
programs = []  # one event per XLA program built, compiled or loaded from the persistent cache
def built(event, duration, **_):
    if event == "/jax/core/compile/backend_compile_duration":
        programs.append(event)
monitoring.register_event_duration_secs_listener(built)
agent = TDMPC2("Pendulum-v1", n_envs=tc.N_ENVS, **tc.AGENT)
before = len(programs)
restored, _, _ = agent.restore(ck.latest_checkpoint(sys.argv[1]), seeds=tc.SEEDS, total_timesteps=tc.STEPS, **tc.RUN)
restore_programs = len(programs) - before
fresh = agent.init(tc.SEEDS, tc.STEPS)
def placement(tree):
    return [(x.committed, repr(x.sharding)) for x in jax.tree_util.tree_leaves(tree)]
keys = jnp.stack([jax.random.PRNGKey(s) for s in tc.SEEDS])
ev = tc.online_eval_program(agent)
print("RESULT " + json.dumps({
    "restore_programs": restore_programs,
    "placement": [placement(restored) == placement(fresh), sorted(set(placement(restored)))],
    "eval_module_same": ev.lower(restored.agent.params, keys).as_text() == ev.lower(fresh.agent.params, keys).as_text(),
}))
"""


def online_eval_program(agent):
    """The single-task agent's compiled evaluation program (as :meth:`TDMPC2.evaluate` builds it)."""
    from tdmpc2core.agents import online

    return online.make_eval_fn(agent, RUN["eval_episodes"], {}, agent.placement)


def test_restored_state_is_placed_as_a_fresh_run_and_compiles_nothing(saved_init):
    """A run resumed by a new process: reading the checkpoint builds no XLA program (it used to
    stage every leaf through ``jnp.asarray``: 30 programs, one per shape and dtype of this state,
    compiled or read from the JAX cache in every resumed process), and the state lies where a
    fresh run's lies: one device, uncommitted, as the init program gives it. Committed, it
    would lower the evaluation (and the training chunk) to another module than the fresh run's
    (``sdy.sharding`` annotations), missing the fresh run's JAX cache entries: compiled again
    (21 s for this tiny agent's chunk and evaluation on a 2-core CPU)."""
    res = subprocess.run([sys.executable, "-c", RESTORE_PLACEMENT_SCRIPT, str(saved_init), str(Path(__file__).parent)],
                         capture_output=True, text=True, timeout=600, env=subprocess_env(), cwd=saved_init)
    line = [x for x in res.stdout.splitlines() if x.startswith("RESULT ")]
    assert res.returncode == 0 and line, res.stderr[-4000:]
    got = json.loads(line[0][len("RESULT "):])
    assert got["restore_programs"] == 0
    same, kinds = got["placement"]
    assert same, kinds
    assert len(kinds) == 1 and kinds[0][0] is False and kinds[0][1].startswith("SingleDeviceSharding("), kinds
    assert got["eval_module_same"]


# ------------------------------------------------------------- the format (no training)
class FakeMultiTaskState(NamedTuple):
    """A pytree of the shape a multi-task agent's state would have (leading seed axis)."""

    params: dict
    step: jnp.ndarray
    key: jnp.ndarray
    typed_key: jnp.ndarray


def fake_state(n_seeds=2, offset=0.0):
    return FakeMultiTaskState(
        params={"enc": {"w": jnp.arange(n_seeds * 6, dtype=jnp.float32).reshape(n_seeds, 2, 3) + offset},
                "task_emb": jnp.full((n_seeds, 4, 5), jnp.nan, jnp.float32)},
        step=jnp.arange(n_seeds, dtype=jnp.int32),
        key=jnp.stack([jax.random.PRNGKey(i) for i in range(n_seeds)]),
        typed_key=jax.random.split(jax.random.key(3), n_seeds))


def test_round_trip_generic_pytree_and_layout_errors(tmp_path):
    tree = {"state": fake_state()}
    info = ck.save(tmp_path, 1000, tree, settings={"a": 1, "b": {"c": [1, 2]}}, host={"h": np.arange(3.0)},
                   meta={"note": "x"})
    assert info.path == tmp_path / "step_000000001000" and info.bytes == (info.path / ck.PAYLOAD).stat().st_size
    manifest = ck.verify(info.path)
    assert manifest["format"] == ck.FORMAT and manifest["format_version"] == ck.FORMAT_VERSION
    assert manifest["leaves"]["['state'].typed_key"]["key_impl"] == "threefry2x32"
    template = jax.eval_shape(lambda: {"state": fake_state()})
    got, host, _ = ck.restore(info.path, template, settings={"a": 1, "b": {"c": (1, 2)}})
    assert isinstance(got["state"], FakeMultiTaskState)
    assert jax.dtypes.issubdtype(got["state"].typed_key.dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(jax.random.key_data(got["state"].typed_key), jax.random.key_data(tree["state"].typed_key))
    for x, y in zip(leaves(got["state"]._replace(typed_key=0)), leaves(tree["state"]._replace(typed_key=0))):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(host["h"], np.arange(3.0))
    with pytest.raises(ck.CheckpointMismatchError, match=r"b\.c: checkpoint \[1, 2\], now \[1, 3\]"):
        ck.restore(info.path, template, settings={"a": 1, "b": {"c": [1, 3]}})
    with pytest.raises(ck.CheckpointMismatchError, match=r"\['state'\]\.params\['enc'\]\['w'\]: checkpoint float32\[2, 2, 3\], "
                                                         r"expected float32\[3, 2, 3\]"):
        ck.restore(info.path, jax.eval_shape(lambda: {"state": fake_state(3)}))
    # keep the newest k
    for step in (2000, 3000):
        ck.save(tmp_path, step, tree, settings={}, keep=2)
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["step_000000002000", "step_000000003000"]
    with pytest.raises(TypeError, match="object"):
        ck.save(tmp_path, 4000, tree, settings={}, host={"bad": np.array([{}], dtype=object)})


def test_damaged_checkpoints_are_detected(tmp_path):
    for step in (100, 200, 300):
        ck.save(tmp_path, step, {"state": fake_state(offset=step)}, settings={})
    (tmp_path / ".tmp-step_000000000400-abc").mkdir()  # a write killed before its rename
    (tmp_path / ".tmp-step_000000000400-abc" / ck.PAYLOAD).write_bytes(b"partial")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # unfinished writes are not candidates: no warning
        assert ck.latest_checkpoint(tmp_path).name == "step_000000000300"

    newest = tmp_path / "step_000000000300" / ck.PAYLOAD
    data = newest.read_bytes()
    newest.write_bytes(data[:-100])  # truncated
    with pytest.warns(ck.CheckpointWarning, match="step_000000000300 is damaged.*truncated"):
        assert ck.latest_checkpoint(tmp_path).name == "step_000000000200"
    with pytest.raises(ck.CorruptCheckpointError, match="truncated"):
        ck.restore(tmp_path / "step_000000000300", jax.eval_shape(lambda: {"state": fake_state()}))
    mid = len(data) // 2
    newest.write_bytes(data[:mid] + bytes([data[mid] ^ 1]) + data[mid + 1:])  # one bit flipped, same size
    with pytest.raises(ck.CorruptCheckpointError, match="checksum"):
        ck.verify(tmp_path / "step_000000000300")
    (tmp_path / "step_000000000200" / ck.MANIFEST).unlink()  # incomplete
    (tmp_path / "step_000000000100" / ck.PAYLOAD).unlink()
    with pytest.warns(ck.CheckpointWarning):
        with pytest.raises(ck.CorruptCheckpointError, match="no usable checkpoint.*Delete the folder"):
            ck.latest_checkpoint(tmp_path)
    ck.prune(tmp_path, 1)  # also clears the .tmp-* leftovers
    assert not list(tmp_path.glob(".tmp-*"))


KILL_SCRIPT = """
import os, signal, sys
import numpy as np
from tdmpc2core.io import checkpoint as ck
directory, where = sys.argv[1], sys.argv[2]
tree = {"w": np.arange(1_000_000, dtype=np.float32)}
ck.save(directory, 100, tree, settings={})
if where == "payload":      # SIGKILL halfway through writing the payload
    def write(path, data):
        with open(path, "wb") as fh:
            fh.write(data[: len(data) // 2])
            fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    ck._write_payload = write
else:                       # SIGKILL after both files are written, before the rename that publishes them
    ck._publish = lambda tmp, final: os.kill(os.getpid(), signal.SIGKILL)
ck.save(directory, 200, {"w": tree["w"] + 1}, settings={})
"""


@pytest.mark.parametrize("where", ["payload", "publish"])
def test_checkpoint_killed_mid_write_leaves_the_previous_one(tmp_path, where):
    res = subprocess.run([sys.executable, "-c", KILL_SCRIPT, str(tmp_path), where], capture_output=True, text=True,
                         timeout=300, env=subprocess_env())
    assert res.returncode == -signal.SIGKILL, res.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-step_000000000200")]  # the unfinished write
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        latest = ck.latest_checkpoint(tmp_path)
    assert latest.name == "step_000000000100"
    got, _, _ = ck.restore(latest, {"w": jax.ShapeDtypeStruct((1_000_000,), jnp.float32)})
    np.testing.assert_array_equal(got["w"], np.arange(1_000_000, dtype=np.float32))


# ------------------------------------------------------------- the multi-task agent
# One configuration for every multi-task test here, the `tdmpc2 train-multi` stage's included: a
# pool of 3 random Pendulum-v1 episodes (gymnax, obs 3, action 1, T = 200), model size 1 with the
# tiny widths, batch 16, the task_dim default, evaluated in Pendulum-v1, 2 seeds. The stage builds
# the same agent from the pool's file and the same spec, so its programs (init, training chunk,
# evaluation) are those of `mt_whole`, loaded from the compilation cache, not compiled again.
MT_T, MT_EPISODES, MT_UPDATES = 200, 3, 60
MT_RUN = dict(eval_every=20, eval_episodes=2, log_every=10)  # evaluations at 0, 20, 40, 60
MT_RANGES = {"pendulum": (-3254.72, 0.0)}
MT_AGENT = {k: v for k, v in TINY.items() if k not in ("model_size", "batch_size")}


def mt_pool():
    """The pool: random observations, actions and rewards in the dataset layout (row 0 of an
    episode is its reset row; deterministic: the subprocess and the stage build the same one)."""
    from tdmpc2core.dataset import EpisodeDataset, TaskInfo

    rng = np.random.default_rng(3)
    T, n_ep = MT_T, MT_EPISODES
    act = rng.uniform(-1, 1, (n_ep * (T + 1), 1)).astype(np.float32)
    rew = rng.normal(size=n_ep * (T + 1)).astype(np.float32)
    act[:: T + 1], rew[:: T + 1] = np.nan, np.nan
    return EpisodeDataset(obs=rng.normal(size=(n_ep * (T + 1), 3)).astype(np.float32), action=act, reward=rew,
                          terminated=np.zeros(n_ep * (T + 1), bool), truncated=np.tile(np.arange(T + 1) == T, n_ep),
                          episode=np.repeat(np.arange(n_ep, dtype=np.int64), T + 1),
                          step=np.tile(np.arange(T + 1, dtype=np.int32), n_ep),
                          task=np.zeros(n_ep * (T + 1), np.int32),
                          tasks=(TaskInfo("pendulum", 3, 1, T, 1, 0.975, "Pendulum-v1"),),
                          provenance={"source": "tests/test_checkpoint.py"}).check("test pool")


def mt_agent(batch_size=16):
    """The multi-task agent on :func:`mt_pool` (what `tdmpc2 train-multi --model-size 1` builds
    from the pool's file and a spec of this batch size, ``MT_AGENT`` and ``MT_RANGES``)."""
    from tdmpc2core.agents.multitask import TDMPC2MultiTask

    return TDMPC2MultiTask(mt_pool(), eval_envs=True, model_size=1, batch_size=batch_size,
                           return_ranges=MT_RANGES, **MT_AGENT)


@pytest.fixture(scope="module")
def mt_whole(compile_cache):
    agent = mt_agent()
    state, hist = agent.train(seed=SEEDS, n_timesteps=MT_UPDATES, **MT_RUN)
    np.testing.assert_array_equal(hist["eval_updates"], [0, 20, 40, 60])
    return agent, state, hist


def assert_same_mt_history(h, w):
    for k in ("eval_updates", "eval_returns", "eval_lengths", "normalized_score"):
        np.testing.assert_array_equal(h[k], w[k], err_msg=k)
    assert [c["updates"] for c in h["chunks"]] == [c["updates"] for c in w["chunks"]]
    for c, cw in zip(h["chunks"], w["chunks"]):
        for k in ("total_loss", "pi_scale", "grad_norm"):
            np.testing.assert_array_equal(c[k], cw[k], err_msg=k)


MT_RESUME_SCRIPT = """
import sys
sys.path.insert(0, sys.argv[2])
import test_checkpoint as tc
agent = tc.mt_agent()
state, hist = agent.train(seed=tc.SEEDS, n_timesteps=tc.MT_UPDATES, checkpoint_dir=sys.argv[1], **tc.MT_RUN)
print("DONE", int(state.agent.updates[0]))
"""


@pytest.mark.slow
def test_multitask_chunked_stopped_and_restored_by_new_process_equals_whole(mt_whole, tmp_path):
    agent, w_state, w_hist = mt_whole
    # continued in two calls, the second capped so that every call of the program is one update
    s1, h1 = agent.train(seed=SEEDS, n_timesteps=25, total_timesteps=MT_UPDATES, **MT_RUN)
    s2, h2 = agent.train(state=s1, history=h1, n_timesteps=MT_UPDATES - 25, total_timesteps=MT_UPDATES,
                         max_chunk_seconds=1e-9, **MT_RUN)
    assert_same_state(s2, w_state)
    np.testing.assert_array_equal(h2["eval_returns"], w_hist["eval_returns"])  # no extra evaluation at 25
    # stopped at 35 updates (a checkpoint there), then resumed by a new process
    d = tmp_path / "mt"
    seen = []
    with pytest.raises(TrainingInterrupted) as exc:
        agent.train(seed=SEEDS, n_timesteps=MT_UPDATES, **MT_RUN, checkpoint_dir=d, checkpoint_every=10,
                    max_chunk_seconds=1e-9, progress=lambda p: seen.append(p["updates"]),
                    should_stop=lambda: seen[-1] >= 35)
    assert exc.value.step == 35 and exc.value.unit == "updates" and exc.value.checkpoint.step == 35
    assert [p.name for p in ck.list_checkpoints(d)] == ["step_000000000030", "step_000000000035"]
    res = subprocess.run([sys.executable, "-c", MT_RESUME_SCRIPT, str(d), str(Path(__file__).parent)],
                         capture_output=True, text=True, timeout=900, env=subprocess_env(), cwd=tmp_path)
    assert res.returncode == 0 and f"DONE {MT_UPDATES}" in res.stdout, res.stderr[-4000:]
    state, hist, manifest = agent.restore(ck.latest_checkpoint(d))
    assert manifest["meta"]["updates"] == MT_UPDATES and manifest["settings"]["dataset_sha256"] == agent.dataset_sha256
    assert_same_state(state, w_state)
    assert_same_mt_history(hist, w_hist)


def test_multitask_checkpoint_of_other_data_or_settings_is_refused(compile_cache, tmp_path):
    agent = mt_agent()
    agent.save_checkpoint(tmp_path, agent.init(SEEDS), None, total_timesteps=MT_UPDATES, **MT_RUN)
    path = ck.latest_checkpoint(tmp_path)
    with pytest.raises(ck.CheckpointMismatchError, match=r"agent\.batch_size: checkpoint 16, now 32"):
        mt_agent(batch_size=32).restore(path)
    with pytest.raises(ck.CheckpointMismatchError, match=r"run\.log_every: checkpoint 10, now 5"):
        agent.restore(path, log_every=5)
    other = mt_agent()
    other._dataset_sha256 = "0" * 64  # stands for an agent built on other data
    with pytest.raises(ck.CheckpointMismatchError, match="dataset_sha256"):
        other.restore(path)
    from tdmpc2core import TDMPC2

    with pytest.raises(ck.CheckpointMismatchError, match="agent_class"):
        TDMPC2("Pendulum-v1", n_envs=N_ENVS, **AGENT).restore(path)


@pytest.mark.slow
def test_train_multi_stage_sigterm_then_rerun_equals_a_fresh_run(mt_whole, tmp_path, capsys):
    """`tdmpc2 train-multi` (in this process): SIGTERM once the checkpoint at 30 of 60 updates is
    written; exit 143 without outputs, the attempt's stop record written; the rerun resumes; a later forced rerun (the finished
    folder's marker) trains anew, to the same outputs."""
    import logging

    import pandas as pd

    from tdmpc2core.cli import build_parser
    from tdmpc2core.dataset import save_dataset
    from tdmpc2core.stages import train_multi

    save_dataset(mt_pool(), tmp_path / "pool.parquet")
    # the settings of mt_agent() and MT_RUN: the programs of mt_whole, from the compilation cache
    spec = {"updates": MT_UPDATES, "batch_size": 16, "agent": MT_AGENT, "return_ranges": MT_RANGES, **MT_RUN}
    ckdir = tmp_path / "checkpoints/multi/p/size1"

    def stage(outdir):
        args = build_parser().parse_args([
            "train-multi", "--pool", "p", "--model-size", "1", "--dataset", str(tmp_path / "pool.parquet"),
            "--spec", json.dumps(spec), "--seeds", "0", "1", "--outdir", str(outdir), "--checkpoint-dir", str(ckdir),
            "--checkpoint-every", "10", "--max-chunk-seconds", "1e-9"])
        return train_multi.run(args)

    class SigtermAfter(logging.Handler):  # SIGTERM to this process once the checkpoint at 30 is written
        def emit(self, record):
            if "step_000000000030 written" in record.getMessage():
                os.kill(os.getpid(), signal.SIGTERM)

    lib_log, trigger = logging.getLogger("tdmpc2core"), SigtermAfter()
    lib_log.addHandler(trigger)
    try:
        assert stage(tmp_path / "out") == 128 + signal.SIGTERM
    finally:
        lib_log.removeHandler(trigger)
    err = capsys.readouterr().err
    assert "stopped by SIGTERM at 30/60 updates: checkpoint" in err and not (tmp_path / "out/run.json").exists()
    # the attempt's stop record (io/attempts.py) names the signal, the step and the checkpoint
    # the stage wrote: what the end-of-run hook reads instead of the log line
    (rec,) = attempts.read(ckdir)
    assert rec["outcome"] == "stopped by SIGTERM" and (rec["start_step"], rec["end_step"]) == (0, 30)
    assert rec["stop"] == {"kind": "signal", "signal": "SIGTERM", "step": 30, "total": MT_UPDATES,
                           "unit": "updates", "checkpoint": str(ck.latest_checkpoint(ckdir)), "reason": None}
    assert stage(tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert "resumed from" in err and "step_000000000030 at 30 updates" in err
    run = json.loads((tmp_path / "out/run.json").read_text())
    assert run["resumed_from_updates"] == 30
    # the same job forced to run again (the marker): starts over; its first outputs kept apart to compare
    shutil.copytree(tmp_path / "out", tmp_path / "first")
    assert stage(tmp_path / "elsewhere") == 5  # another job's output folder: refused, the agent kept
    assert "holds the finished run of another job" in capsys.readouterr().err
    assert stage(tmp_path / "out") == 0
    assert "starting over" in capsys.readouterr().err
    assert json.loads((tmp_path / "out/run.json").read_text())["resumed_from_updates"] is None
    for name, wall in (("eval.parquet", []), ("metrics.parquet", ["wall_time_s", "updates_per_s"])):
        a = pd.read_parquet(tmp_path / "first" / name).drop(columns=wall)
        b = pd.read_parquet(tmp_path / "out" / name).drop(columns=wall)
        pd.testing.assert_frame_equal(a, b)
        assert len(a) > 0
