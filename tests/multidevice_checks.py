"""The checks of tests/test_devices.py that need several devices, run in a process of their own
with 4 fake CPU devices (``--xla_force_host_platform_device_count`` must be set before JAX
starts, so not in the test session's process). Prints one JSON line of measurements; the test
asserts on them.

    python tests/multidevice_checks.py <checkpoint folder>
"""
from __future__ import annotations

import json
import os
import sys

os.environ["XLA_FLAGS"] = " ".join(
    [f for f in os.environ.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f]
    + ["--xla_force_host_platform_device_count=4"])

import jax  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# jax.distributed must be initialised before JAX starts a backend: importing the library (agents,
# stages, the CLI) must not start one (tests/test_devices.py asserts it on this value; this
# process pays the JAX start-up that a process of its own for the check would pay again)
import tdmpc2core, tdmpc2core.agents, tdmpc2core.cli, tdmpc2core.run.devices  # noqa: E401,E402
import tdmpc2core.stages.train_multi, tdmpc2core.stages.train_single  # noqa: E401,E402,F401 (imported for the check)
from jax._src import xla_bridge  # noqa: E402

IMPORTS_INITIALIZED_A_BACKEND = xla_bridge.backends_are_initialized()

from tdmpc2core import TDMPC2  # noqa: E402
from tdmpc2core.agents.multitask import TDMPC2MultiTask  # noqa: E402
from tdmpc2core.io import checkpoint as ck  # noqa: E402
from tdmpc2core.run.devices import SEED_AXIS, local  # noqa: E402

#: the tiny agent of the tests (tests/test_agent.py's TINY)
TINY = dict(model_size=1, mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16, num_elites=4, num_pi_trajs=2,
            iterations=1, batch_size=16)
SEEDS = [0, 1, 2, 3]
# Pendulum-v1 (T = 200): 200 random ticks, then the seed-phase burst of 200 updates
SEED_STEPS, TICKS = 200, 201
MT_UPDATES, MT_STOP = 200, 100
#: one seed: benchmarks/multi_device.py's harness measures one seed (``a.init([0])``), so it runs
#: the programs these checks compiled instead of compiling two more (a two-seed program is another
#: program: about 60 s of compiling on a busy 2-core CPU). Two seeds over a batch split across
#: devices: tests/test_devices.py's two processes and tests/test_slurm.py's 2-task job.
MT_SEEDS = [0]
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")


def host(tree):
    return [np.asarray(local(x)) for x in jax.tree_util.tree_leaves(tree)]


def compiled_text(program) -> str:
    """The optimised HLO of the executable(s) a :class:`~tdmpc2core.run.compiled.Compiled` built
    (no second compilation)."""
    return "\n".join(exe.as_text() for exe in program._executables.values())


def placement(tree) -> list:
    """Where each leaf lies: (committed, sharding)."""
    return [(x.committed, x.sharding) for x in jax.tree_util.tree_leaves(tree)]


def restored_placed_as_fresh(agents, path, seeds, total) -> list:
    """For each agent: whether checkpoint ``path`` restored by it lies where its fresh initial
    state lies (every leaf: the same sharding, committed alike)."""
    return [placement(a.restore(path)[0]) == placement(a.init(seeds, total)) for a in agents]


def max_abs(a, b) -> float:
    return max(float(np.nanmax(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if x.size else 0.0
               for x, y in zip(host(a), host(b)) if x.dtype.kind == "f")


def seeds_checks(ckdir: str) -> dict:
    """4 seeds over 4 devices against the same seeds on one device; a checkpoint of the 4-device
    run restored on 4 devices and on one."""
    out = {}
    one = TDMPC2("Pendulum-v1", seed_steps=SEED_STEPS, devices=1, **TINY)
    four = TDMPC2("Pendulum-v1", seed_steps=SEED_STEPS, **TINY)  # devices=None: all 4 (4 seeds divide)
    s1, _ = one.train(seed=SEEDS, n_timesteps=TICKS)
    s4, h4 = four.train(seed=SEEDS, n_timesteps=TICKS)
    # the 4-device run's state as a checkpoint, restored by the 4-device agent (split over its
    # mesh, as its init program's outputs) and by the one-device agent (one device, uncommitted)
    info = four.save_checkpoint(os.path.join(os.path.dirname(ckdir), "seeds_checkpoints"), s4, h4, seeds=SEEDS,
                                total_timesteps=TICKS)
    out["seed_restored_placed_as_fresh"] = restored_placed_as_fresh((four, one), info.path, SEEDS, TICKS)
    leaf = jax.tree_util.tree_leaves(s4.agent.params)[0]
    out["seed_sharding"] = str(leaf.sharding.spec)
    out["seed_mesh"] = dict(leaf.sharding.mesh.shape)
    out["seed_single_sharding"] = type(jax.tree_util.tree_leaves(s1.agent.params)[0].sharding).__name__
    out["seed_params_max_abs"] = max_abs(s1.agent.params, s4.agent.params)
    out["seed_replay_obs_max_abs"] = max_abs(s1.replay.obs, s4.replay.obs)
    out["seed_ticks"] = [int(np.asarray(s1.tick)[0]), int(np.asarray(s4.tick)[0])]
    text = compiled_text(four._chunk().program(s4, np.int32(0), np.int32(1)))
    out["seed_collectives"] = [c for c in COLLECTIVES if c in text]
    # 3 seeds do not divide over 4 devices: one device by default, an explicit 4 refused
    out["seed_mesh_3"] = None if four.placement.mesh_for(3) is None else dict(four.placement.mesh_for(3).shape)
    try:
        TDMPC2("Pendulum-v1", seed_steps=SEED_STEPS, devices=4, **TINY).placement.mesh_for(3)
        out["seed_3_on_4"] = "accepted"
    except ValueError as e:
        out["seed_3_on_4"] = str(e)
    return out


def pool():
    from test_multitask import make_dataset, random_episodes, task

    rng = np.random.default_rng(0)
    return make_dataset([random_episodes(rng, 4, 12, 3, 1), random_episodes(rng, 4, 12, 2, 2)],
                        [task("a", 3, 1, 12), task("b", 2, 2, 12)])


def multitask_checks(ckdir: str) -> dict:
    """The batch split over 4 devices (device and host paths) against one device; a checkpoint of
    the 4-device run resumed on one device."""
    from test_multitask import TINY as MT

    out = {}
    ds = pool()
    one = TDMPC2MultiTask(ds, batch_size=16, devices=1, **MT)
    four = TDMPC2MultiTask(ds, batch_size=16, **MT)  # devices=None: all 4 (16 divides)
    four_host = TDMPC2MultiTask(ds, batch_size=16, device_budget_bytes=0, **MT)
    out["mt_devices"] = [one.placement.n_devices, four.placement.n_devices, four_host.placement.n_devices]
    s1, _ = one.train(seed=MT_SEEDS, n_timesteps=MT_UPDATES)
    s4, _ = four.train(seed=MT_SEEDS, n_timesteps=MT_UPDATES)
    sh, _ = four_host.train(seed=MT_SEEDS, n_timesteps=MT_UPDATES)
    out["mt_params_max_abs"] = max_abs(s1.agent.params, s4.agent.params)
    out["mt_host_params_max_abs"] = max_abs(s1.agent.params, sh.agent.params)
    out["mt_updates"] = [int(host(s.agent.updates)[0][0]) for s in (s1, s4, sh)]
    text = compiled_text(four._chunk())
    out["mt_all_reduce"] = text.count("all-reduce")
    # stopped at MT_STOP by the 4-device run, resumed by the one-device agent from its checkpoint
    # (the agents' compiled programs reused)
    four.train(seed=MT_SEEDS, n_timesteps=MT_STOP, total_timesteps=MT_UPDATES, checkpoint_dir=ckdir)
    # that checkpoint restored on 4 devices (replicated over the mesh, as a fresh state) and on one
    out["mt_restored_placed_as_fresh"] = restored_placed_as_fresh((four, one), ck.latest_checkpoint(ckdir), MT_SEEDS,
                                                                  MT_UPDATES)
    sr, _ = one.train(seed=MT_SEEDS, n_timesteps=MT_UPDATES, total_timesteps=MT_UPDATES, checkpoint_dir=ckdir)
    out["mt_resumed_params_max_abs"] = max_abs(s1.agent.params, sr.agent.params)
    out["mt_resumed_updates"] = int(host(sr.agent.updates)[0][0])
    try:
        TDMPC2MultiTask(ds, batch_size=10, devices=4, **MT)
        out["mt_batch_10_on_4"] = "accepted"
    except ValueError as e:
        out["mt_batch_10_on_4"] = str(e)
    out["mt_batch_10_default"] = TDMPC2MultiTask(ds, batch_size=10, **MT).placement.n_devices
    # the multi-GPU benchmark's harness on these compiled agents (benchmarks/multi_device.py)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    import multi_device

    programs = [len(a._chunk()._executables) for a in (one, four)]
    rows = [multi_device.measure_agent(a, updates=5, repeats=2) for a in (one, four)]
    # the harness ran the programs compiled above (one seed, MT_SEEDS), none of its own
    out["mt_bench_new_programs"] = [len(a._chunk()._executables) - n for a, n in zip((one, four), programs)]
    bench = os.path.join(os.path.dirname(ckdir), "multi_device.json")
    multi_device.write(bench, rows, reduced=True, argv=["(tests)"])
    out["bench"] = bench
    return out


if __name__ == "__main__":
    import time

    assert jax.device_count() == 4, jax.devices()
    res = {"imports_initialized_a_backend": IMPORTS_INITIALIZED_A_BACKEND, "devices": jax.device_count(),
           "seed_axis": SEED_AXIS}
    t0 = time.perf_counter()
    res.update(seeds_checks(sys.argv[1]))
    t1 = time.perf_counter()
    res.update(multitask_checks(sys.argv[1]))
    res["seconds"] = [round(t1 - t0, 1), round(time.perf_counter() - t1, 1)]
    print("RESULT " + json.dumps(res))
