"""Many devices and many processes (issue 28), all on CPU: fake devices
(``--xla_force_host_platform_device_count``) and two processes joined by ``jax.distributed``
with gloo collectives.

* Four fake devices in one process (tests/multidevice_checks.py, a process of its own): the
  single-task seeds split over them equal the one-device run to float rounding with no
  collective in the program; the multi-task batch split over them (device and host paths)
  gives the one-device parameters within ``TOL`` after 200 updates, with XLA's all-reduces in
  the program; a checkpoint of the 4-device run resumes on one device.
* Two processes x two fake devices (``tdmpc2 train-multi --coordinator``): a SIGTERM to one
  process stops both with process 0's checkpoint; that checkpoint resumes in one process
  and the run ends within ``TOL`` of an uninterrupted one-device run; only process 0 writes.

Why a tolerance and not bit for bit: the batch's sums (losses, gradients) are reduced per
device then across devices, another order of float additions than one device's; and on CPU a
seed's numbers already differ in the last bits between a run of 1 and of 4 seeds on one device
(XLA vectorises elementwise functions over the seed axis by its width). docs/pipeline.md
"GPUs per job" states the same.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from tdmpc2core.io import attempts
from tdmpc2core.io import checkpoint as ck
from tdmpc2core.run import devices as D
from tdmpc2core.run.compiled import per_seed

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
#: the stated tolerance (absolute, on every parameter) of multi-device against one-device numbers;
#: measured: 3.6e-7 after 200 updates (docs/pipeline.md)
TOL = 1e-5


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS)] + [p for p in e.get("PYTHONPATH", "").split(os.pathsep)
                                                                if p])
    e.pop("XLA_FLAGS", None)
    cache = os.environ.get("TDMPC2_TEST_JAX_CACHE")
    if cache:  # the session's compilation cache (tests/conftest.py)
        e["JAX_COMPILATION_CACHE_DIR"] = cache
    return e


# ------------------------------------------------------------------ one device, in this process
def test_device_arguments_are_checked_and_named():
    dev = jax.devices()[0]
    assert D.device_list(None) is None and D.device_list("auto") is None
    assert D.device_list(1) == [dev] and D.device_list("all") == jax.devices()
    assert D.device_list([dev]) == [dev]
    assert D.device_list(jax.sharding.Mesh(np.array([dev]), ("x",))) == [dev]
    with pytest.raises(ValueError, match=r"devices=2: only 1 visible"):
        D.device_list(2)
    with pytest.raises(ValueError, match="at least 1"):
        D.device_list(0)
    with pytest.raises(ValueError, match="accepted None, 'auto', 'all'"):
        D.device_list("gpus")
    with pytest.raises(TypeError, match="jax.Device"):
        D.device_list(["cpu"])
    with pytest.raises(TypeError, match="a bool is not a device count"):
        D.device_list(True)
    with pytest.raises(ValueError, match="empty list"):
        D.device_list([])
    # a suite stepped on the host: one device only
    with pytest.raises(ValueError, match="stepped on the host"):
        D.SeedSharding([dev, dev], host_stepped=True)
    assert D.SeedSharding(None, host_stepped=True).mesh_for(4) is None
    # one visible device: the programs as before (no mesh)
    assert D.SeedSharding().mesh_for(4) is None and D.DataParallel.build(None, 16).mesh is None
    assert D.record(None) == {"device_count": 1, "process_count": 1, "mesh": {}, "platform": "cpu"}
    with pytest.raises(TypeError, match="SeedSharding or a DataParallel"):
        per_seed(lambda x: x, name="bad", devices=[dev])
    with pytest.raises(ValueError, match="axis 0 or not at all"):
        per_seed(lambda x, y: x, name="bad", in_axes=(0, 1), devices=D.SeedSharding())
    assert not D.in_slurm_step() or int(os.environ["SLURM_NTASKS"]) > 1
    from tdmpc2core.stages.resumable import device_value

    assert device_value("auto") is None and device_value("all") == "all" and device_value("2") == 2
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="accepted auto, all or a device count"):
        device_value("0")
    # the hand-started job's flags: refused when incomplete (nothing joined, nothing trained)
    from tdmpc2core.stages.resumable import join_processes

    def ns(**kw):
        return argparse.Namespace(**{"coordinator": None, "num_processes": None, "process_id": None,
                                     "distributed_timeout": 300, "local_device_count": None, **kw})

    for kw, msg in (({"num_processes": 2, "process_id": 1}, "--num-processes and --process-id without --coordinator"),
                    ({"coordinator": "h:1", "num_processes": 2}, "--coordinator needs --num-processes and --process-id"),
                    ({"local_device_count": 0}, "--local-device-count 0: at least 1")):
        with pytest.raises(SystemExit, match=msg):
            join_processes(ns(**kw), print)
    assert join_processes(ns(), print) is False  # one process: nothing to join


def test_an_env_stepped_on_the_host_refuses_more_than_one_device():
    pytest.importorskip("dm_control")
    from tdmpc2core import TDMPC2
    from tdmpc2core.envs import make_env

    assert make_env("dmc:cartpole-balance").steps_on_host and not make_env("Pendulum-v1").steps_on_host
    dev = jax.devices()[0]
    with pytest.raises(ValueError, match="stepped on the host"):
        TDMPC2("dmc:cartpole-balance", devices=[dev, dev])


# ------------------------------------------------------------------ four fake devices
@pytest.fixture(scope="module")
def four_devices(tmp_path_factory):
    ckdir = tmp_path_factory.mktemp("multidevice") / "checkpoints"
    res = subprocess.run([sys.executable, str(TESTS / "multidevice_checks.py"), str(ckdir)], capture_output=True,
                         text=True, timeout=900, env=env(), cwd=ROOT)
    line = [x for x in res.stdout.splitlines() if x.startswith("RESULT ")]
    assert res.returncode == 0 and line, res.stdout[-2000:] + res.stderr[-4000:]
    return json.loads(line[0][len("RESULT "):])


def test_importing_the_library_touches_no_device(four_devices):
    """jax.distributed must be initialised before JAX starts a backend: importing the library
    (agents, stages, the CLI) must not start one. Checked at the top of tests/multidevice_checks.py,
    a fresh process (the imports before anything else there), instead of a process of its own."""
    assert four_devices["imports_initialized_a_backend"] is False


def test_seeds_split_over_four_devices_equal_one_device(four_devices):
    r = four_devices
    assert r["devices"] == 4
    # default (devices=None): 4 seeds over the 4 devices, split on the seed axis; 1: one device
    assert r["seed_sharding"] == "P('seeds',)" and r["seed_mesh"] == {"seeds": 4}
    assert r["seed_single_sharding"] == "SingleDeviceSharding"
    # the 4-device run's checkpoint restored where a fresh state lies: split over the 4-device
    # agent's mesh; on one device (uncommitted) for the one-device agent
    assert r["seed_restored_placed_as_fresh"] == [True, True]
    assert r["seed_ticks"] == [201, 201]
    # seeds are independent: no collective in the sharded program
    assert r["seed_collectives"] == []
    # the random seed phase and the burst's 200 updates: equal to float rounding
    assert r["seed_replay_obs_max_abs"] <= TOL and r["seed_params_max_abs"] <= TOL
    # 3 seeds: one device by default; 4 devices asked for: refused, named
    assert r["seed_mesh_3"] is None and "3 seed(s) do not divide evenly over 4 devices" in r["seed_3_on_4"]


def test_multitask_batch_split_over_four_devices_equals_one_device_and_resumes_on_one(four_devices):
    r = four_devices
    assert r["mt_devices"] == [1, 4, 4] and r["mt_updates"] == [200, 200, 200]
    assert r["mt_all_reduce"] > 0  # the gradients reduced across the devices by XLA
    assert r["mt_params_max_abs"] <= TOL and r["mt_host_params_max_abs"] <= TOL
    # a checkpoint written by the 4-device run at 100 updates, resumed by a one-device agent
    assert r["mt_resumed_updates"] == 200 and r["mt_resumed_params_max_abs"] <= TOL
    # restored where a fresh state lies: replicated over the 4-device agent's mesh; one device
    assert r["mt_restored_placed_as_fresh"] == [True, True]
    assert "batch_size=10 does not divide evenly over 4 devices" in r["mt_batch_10_on_4"]
    assert r["mt_batch_10_default"] == 1


def test_multi_device_benchmark_harness_measures_the_compiled_agents(four_devices):
    """benchmarks/multi_device.py's reduced form: its measurement and tables on the 1- and
    4-device agents of the checks above (compiled there)."""
    data = json.loads(Path(four_devices["bench"]).read_text())
    assert data["meta"]["reduced"] is True and data["meta"]["visible_devices"] == 4
    rows = {r["devices"]: r for r in data["results"]}
    assert set(rows) == {1, 4}
    assert rows[1]["all_reduces"] == 0 and rows[4]["all_reduces"] > 0
    assert rows[1]["scaling_efficiency"] == 1.0 and rows[4]["speedup"] > 0
    assert abs(rows[4]["scaling_efficiency"] - rows[4]["speedup"] / 4) < 1e-12
    assert all(r["updates_per_s"] > 0 for r in rows.values())
    assert four_devices["mt_bench_new_programs"] == [0, 0]  # it measured the checks' programs, compiled nothing
    md = Path(four_devices["bench"]).with_suffix(".md").read_text()
    assert "| model size | devices | updates/s | speedup | scaling efficiency |" in md and "REDUCED CPU form" in md


# ------------------------------------------------------------------ two processes
# over gloo a tiny update takes ~75 ms: the SIGTERM, sent when the checkpoint at MT_SIGNAL appears,
# lands mid-run (about 7 s of updates left)
MT_UPDATES, MT_EVERY, MT_SIGNAL = 200, 50, 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stage_args(tmp_path, outdir, ckdir, *extra):
    from test_checkpoint import MT_AGENT, MT_RANGES

    # no evaluation: the 2-task SLURM job (tests/test_slurm.py) checks the evaluations written once
    spec = {"updates": MT_UPDATES, "batch_size": 16, "agent": MT_AGENT, "return_ranges": MT_RANGES}
    return [sys.executable, "-m", "tdmpc2core.cli", "train-multi", "--pool", "p", "--model-size", "1",
            "--dataset", str(tmp_path / "pool.parquet"), "--spec", json.dumps(spec), "--seeds", "0", "1",
            "--outdir", str(outdir), "--checkpoint-dir", str(ckdir), "--checkpoint-every", str(MT_EVERY),
            "--keep-checkpoints", "20", "--max-chunk-seconds", "0.05", *extra]


@pytest.mark.slow
def test_two_processes_stop_together_and_resume_in_one_within_tolerance(tmp_path):
    """Two processes (2 fake devices each, gloo) train 100 updates within TOL of one device; a
    SIGTERM to process 1 then stops both (143) with process 0's checkpoint; one process
    resumes it to the end: parameters within TOL of a one-device run, outputs written once."""
    from test_checkpoint import mt_agent, mt_pool

    from tdmpc2core.dataset import save_dataset

    save_dataset(mt_pool(), tmp_path / "pool.parquet")
    ckdir, out = tmp_path / "ck", tmp_path / "out"
    port = free_port()
    procs = [subprocess.Popen(stage_args(tmp_path, out, ckdir, "--coordinator", f"127.0.0.1:{port}",
                                         "--num-processes", "2", "--process-id", str(i), "--local-device-count", "2",
                                         "--distributed-timeout", "120", "--devices", "4"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=tmp_path)
             for i in range(2)]
    # the reference meanwhile, in this process on one device: the stage's agent, uninterrupted
    agent = mt_agent()
    ref_dir = tmp_path / "ref"
    ref, _ = agent.train(seed=[0, 1], n_timesteps=MT_UPDATES,
                         checkpoint_dir=ref_dir, checkpoint_every=MT_EVERY, keep_checkpoints=20)
    deadline = time.time() + 600
    while not (ckdir / ck.checkpoint_name(MT_SIGNAL)).exists() and time.time() < deadline \
            and all(p.poll() is None for p in procs):
        time.sleep(0.01)
    procs[1].send_signal(signal.SIGTERM)
    outs = [p.communicate(timeout=600) for p in procs]
    codes = [p.returncode for p in procs]
    assert codes == [143, 143], [o[1][-3000:] for o in outs]
    assert "another process of the job received a signal" in outs[0][1]
    assert "stopped with the job" in outs[1][1] and "received SIGTERM" in outs[1][1]
    assert not (out / "run.json").exists()
    (rec,) = attempts.read(ckdir)  # one attempt record: process 0's
    stop = rec["stop"]["step"]
    assert rec["stop"]["signal"] == "SIGTERM" and MT_SIGNAL <= stop < MT_UPDATES
    assert ck.latest_checkpoint(ckdir).name == ck.checkpoint_name(stop)
    # the 2-process run's checkpoint at MT_SIGNAL updates against the reference's (global arrays, not shards)
    st100, _, man = agent.restore(ckdir / ck.checkpoint_name(MT_SIGNAL))
    ref100, _, _ = agent.restore(ref_dir / ck.checkpoint_name(MT_SIGNAL))
    assert man["meta"]["updates"] == MT_SIGNAL
    diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
               for a, b in zip(jax.tree_util.tree_leaves(st100.agent.params), jax.tree_util.tree_leaves(ref100.agent.params)))
    assert diff <= TOL, diff
    # resumed in one process on one device, to the end
    res = subprocess.run(stage_args(tmp_path, out, ckdir, "--devices", "1"), capture_output=True, text=True,
                         timeout=600, env=env(), cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resumed from" in res.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["devices"] == {"device_count": 1, "process_count": 1, "mesh": {}, "platform": "cpu"}
    assert run["resumed_from_updates"] == stop and [a["outcome"] for a in run["attempts"]] == [
        "stopped by SIGTERM", "completed"]
    final, _, _ = agent.restore(ck.latest_checkpoint(ckdir))
    diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
               for a, b in zip(jax.tree_util.tree_leaves(final.agent.params), jax.tree_util.tree_leaves(ref.agent.params)))
    assert diff <= TOL, diff
    import pandas as pd

    # the training records of both sessions, once each: 2 seeds x the chunks
    met = pd.read_parquet(out / "metrics.parquet")
    assert len(met) > 0 and met.groupby("seed")["updates"].apply(lambda u: u.is_unique).all()
