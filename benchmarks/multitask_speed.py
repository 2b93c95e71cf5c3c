"""Multi-task offline training speed: updates/s of ``TDMPC2MultiTask`` per model size.

A synthetic pooled dataset of the given shape (random data: speed does not depend on the
values) and the whole jitted training program (slice sampling from the device copy of the
dataset + one update, in the agent's ``fori_loop``), seeds vmapped. Runs unchanged on a GPU.

    python benchmarks/multitask_speed.py --demo                     # the demo's multitask block
    python benchmarks/multitask_speed.py --sizes 1 5 19 48 317 --tasks 22 --obs 67 --actions 21 \\
        --episode-length 500 --batch 1024 --json out.json           # the paper's sizes on the dmc22 pool

Reported per configuration: compile seconds (first chunk of 2 updates), updates/s (median of
--repeats timed chunks after compilation), GFLOP/s (the official algorithm's update FLOPs,
``tdmpc2core/model/flops.py``, with all K Q members), and the days that ``--updates`` updates take
at that speed.

``--placement host`` (or ``both``) runs the host path (the pool in host memory, batches moved:
``device_budget_bytes=0``) and adds, for it, ``sampling_batches_per_s``: batches (one update's
slices for every seed) the host side prepares per second alone (draw the rows on the device,
gather them with numpy, move them), against ``updates_per_s``; and ``wait_share``: the share of
the timed chunks the updates spent waiting for batches (0: sampling is not the bottleneck).

    python benchmarks/multitask_speed.py --placement both --sizes 1 --tasks 30 --obs 24 --actions 6 \
        --episode-length 500 --episodes 20 --batch 1024      # the mt30 shapes
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tdmpc2core.model import flops  # noqa: E402
from tdmpc2core.dataset import EpisodeDataset, TaskInfo  # noqa: E402
from tdmpc2core.agents.multitask import TDMPC2MultiTask  # noqa: E402


def synthetic_pool(num_tasks: int, obs: int, actions: int, T: int, episodes: int, seed: int = 0) -> EpisodeDataset:
    rng = np.random.default_rng(seed)
    rows = T + 1
    R = num_tasks * episodes * rows
    o = rng.normal(size=(R, obs)).astype(np.float32)
    a = rng.uniform(-1, 1, size=(R, actions)).astype(np.float32)
    r = rng.uniform(0, 1, size=R).astype(np.float32)
    step = np.tile(np.arange(rows, dtype=np.int32), num_tasks * episodes)
    a[step == 0] = np.nan
    r[step == 0] = np.nan
    tasks = tuple(TaskInfo(f"task{i}", obs, actions, T, 2, 0.99, None) for i in range(num_tasks))
    return EpisodeDataset(obs=o, action=a, reward=r, terminated=np.zeros(R, bool), truncated=step == T,
                          episode=np.repeat(np.arange(num_tasks * episodes, dtype=np.int64), rows), step=step,
                          task=np.repeat(np.arange(num_tasks, dtype=np.int32), episodes * rows), tasks=tasks,
                          provenance={"kind": "synthetic benchmark pool"})


def sampling_rate(agent, seeds, target_s: float) -> float:
    """Batches per second of the host path's sampling alone (draw, gather, move), after a warm-up."""
    keys = jax.random.split(jax.random.PRNGKey(0), len(seeds))
    K = agent._block_updates(len(seeds))
    jax.block_until_ready(jax.device_put(agent._host_batches(keys, 0, K, K)))  # compile the index program
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < target_s:
        jax.block_until_ready(jax.device_put(agent._host_batches(keys, n, K, K)))
        n += K
    return n / (time.perf_counter() - t)


def bench(ds, seeds, repeats, updates_total, target_s, placement="device", **kwargs) -> dict:
    t0 = time.perf_counter()
    if placement == "host":
        kwargs["device_budget_bytes"] = 0
    agent = TDMPC2MultiTask(ds, **kwargs)
    state = agent.init(seeds)
    state = agent.run_updates(state, 2)
    jax.block_until_ready(state)
    compile_s = time.perf_counter() - t0
    t = time.perf_counter()
    state = agent.run_updates(state, 3)
    jax.block_until_ready(state)
    n = max(3, int(target_s / max((time.perf_counter() - t) / 3, 1e-6)))
    times = []
    timing0 = dict(agent.host_timing)
    t_all = time.perf_counter()
    for _ in range(repeats):
        t = time.perf_counter()
        state = agent.run_updates(state, n)
        jax.block_until_ready(state)
        times.append((time.perf_counter() - t) / n)
    per = statistics.median(times)
    wall = time.perf_counter() - t_all
    extra = {"placement": agent.data_placement, "pool_mb": round(agent.pool_nbytes / 1e6, 1)}
    if agent.data_placement == "host":
        extra.update(block_updates=agent._block_updates(len(seeds)),
                     wait_share=round((agent.host_timing["wait_s"] - timing0["wait_s"]) / wall, 3),
                     sampling_batches_per_s=round(sampling_rate(agent, seeds, target_s), 1))
    c = agent.cfg
    f = flops.update_flops(c, agent.obs_dim, agent.action_dim, agent.task_dim)
    n_params = int(sum(x.size for x in jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda x: x[0],
                                                                                         state.agent.params))))
    return {"model_size": c.model_size, "params": n_params, "task_dim": agent.task_dim, "batch_size": c.batch_size,
            "seeds": len(seeds), "compile_s": round(compile_s, 1), "updates_per_s": round(1 / per, 3),
            "gflops_per_s": round(len(seeds) * f / per / 1e9, 1),
            "days_for_updates": round(updates_total * per / 86400, 2), "updates": updates_total,
            "device": jax.devices()[0].device_kind, "backend": jax.default_backend(), **extra,
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--demo", action="store_true", help="the demo's multitask block of config.yaml (shapes of "
                                                       "its pool: Pendulum obs 3 + CartpoleBalance obs 5, 1 action)")
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 5])
    p.add_argument("--tasks", type=int, default=22)
    p.add_argument("--obs", type=int, default=67)
    p.add_argument("--actions", type=int, default=21)
    p.add_argument("--episode-length", type=int, default=500)
    p.add_argument("--episodes", type=int, default=4, help="episodes per task in the synthetic pool")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--target-seconds", type=float, default=3.0, help="length of one timed chunk")
    p.add_argument("--updates", type=int, default=10_000_000, help="updates of the run to estimate days for")
    p.add_argument("--json", help="append the results as JSON lines to this file")
    p.add_argument("--placement", choices=["device", "host", "both"], default="device",
                   help="where the pool lives: on the device (default), in host memory (batches moved), or both")
    args = p.parse_args()
    seeds = list(range(args.seeds))
    results = []
    if args.demo:
        cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
        mt = cfg["protocols"][cfg["protocol"]]["multitask"]
        ds = synthetic_pool(2, 5, 1, 200, 8)
        seeds = list(range(len(cfg["seeds"])))
        for size in mt["model_sizes"]:
            kw = dict(mt.get("agent", {}), model_size=size, batch_size=mt["batch_size"])
            results.append(dict(bench(ds, seeds, args.repeats, mt["updates"], args.target_seconds, **kw),
                                config="demo"))
            print(json.dumps(results[-1]), flush=True)
    else:
        ds = synthetic_pool(args.tasks, args.obs, args.actions, args.episode_length, args.episodes)
        places = ["device", "host"] if args.placement == "both" else [args.placement]
        for size in args.sizes:
            for place in places:
                results.append(dict(bench(ds, seeds, args.repeats, args.updates, args.target_seconds, place,
                                          model_size=size, batch_size=args.batch),
                                    config=f"{args.tasks} tasks, obs {args.obs}, actions {args.actions}"))
                print(json.dumps(results[-1]), flush=True)
                if args.json:
                    with open(args.json, "a") as fh:
                        fh.write(json.dumps(results[-1]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
