"""Multi-GPU benchmark: the multi-task update data-parallel over 1, 2, 4, 8 devices.

    python benchmarks/multi_device.py                       # sizes 48 and 317, batch 1024, 1 2 4 8 GPUs
    python benchmarks/multi_device.py --sizes 48 --devices 1 2 --out benchmarks/runs/multi.json
    python benchmarks/multi_device.py --reduced             # the CPU form the test suite runs

For each model size and each device count N (those at most the visible devices), it builds
the multi-task agent (:class:`tdmpc2core.TDMPC2MultiTask`, ``devices=N``: the global batch
split over a ``("data",)`` mesh, tdmpc2core/run/devices.py) on a synthetic pool of mt80's
shape (80 tasks, obs 39, action 6 padded; random rows: the update's cost does not depend on
the values) and times calls of its compiled training program (``--updates`` updates each,
the median of ``--repeats``), after one untimed call that compiles it. It reports:

- ``updates_per_s`` at each N, and the **scaling efficiency** ``updates_per_s(N) /
  (N x updates_per_s(1))`` (strong scaling: the global batch stays ``--batch``; 1.0 is
  perfect);
- compile seconds per N;
- whether the compiled program has the all-reduces of data parallelism (a program without
  them would be replicated, not split).

The numbers are the same to float rounding at every N (tests/test_devices.py), so only speed
is measured here. Results go to ``--out`` (JSON) and a Markdown table beside it. ``--reduced``
fakes 4 CPU devices (``--xla_force_host_platform_device_count``), model size 1 with tiny
widths, batch 16, counts 1 and 2, a few updates. The test suite measures its already-compiled
1- and 4-device agents with :func:`measure_agent` and :func:`write` (tests/multidevice_checks.py),
so the harness cannot rot without compiling anything more. Not yet run on real GPUs (README
"Speed").
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = (48, 317)
COUNTS = (1, 2, 4, 8)
#: the pool's shape: mt80's padded widths (obs 39, action 6) over 80 tasks
TASKS, OBS, ACT, T, EPISODES_PER_TASK = 80, 39, 6, 100, 2
REDUCED = dict(sizes=[1], devices=[1, 2], batch=16, updates=5, repeats=2, fake=4,
               agent=dict(mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16, num_elites=4, num_pi_trajs=2,
                          iterations=1, task_dim=8), tasks=4)


def synthetic_pool(tasks: int):
    """A pooled dataset of ``tasks`` tasks (random rows, mt80's padded widths)."""
    import numpy as np

    from tdmpc2core.dataset import EpisodeDataset, TaskInfo

    rng = np.random.default_rng(0)
    n_ep = tasks * EPISODES_PER_TASK
    rows = n_ep * (T + 1)
    act = rng.uniform(-1, 1, (rows, ACT)).astype(np.float32)
    rew = rng.normal(size=rows).astype(np.float32)
    act[:: T + 1], rew[:: T + 1] = np.nan, np.nan
    table = tuple(TaskInfo(f"task{i}", OBS, ACT, T, 1, 0.99, None) for i in range(tasks))
    return EpisodeDataset(obs=rng.normal(size=(rows, OBS)).astype(np.float32), action=act, reward=rew,
                          terminated=np.zeros(rows, bool), truncated=np.tile(np.arange(T + 1) == T, n_ep),
                          episode=np.repeat(np.arange(n_ep, dtype=np.int64), T + 1),
                          step=np.tile(np.arange(T + 1, dtype=np.int32), n_ep),
                          task=np.repeat(np.arange(tasks, dtype=np.int32), EPISODES_PER_TASK * (T + 1)),
                          tasks=table, provenance={"source": "benchmarks/multi_device.py (synthetic)"}
                          ).check("synthetic pool")


def measure(size: int, n_devices: int, pool, *, batch: int, updates: int, repeats: int, agent: dict) -> dict:
    """One (size, device count) point: updates/s (median), compile seconds, all-reduces."""
    from tdmpc2core import TDMPC2MultiTask

    a = TDMPC2MultiTask(pool, model_size=size, batch_size=batch, devices=n_devices, **agent)
    return measure_agent(a, updates=updates, repeats=repeats)


def measure_agent(a, *, updates: int, repeats: int) -> dict:
    """The point of a built multi-task agent ``a`` (its placement's device count): a first call
    (compiling, unless the agent compiled its program already), then ``repeats`` timed calls of
    ``updates`` updates of one seed."""
    import jax

    state = a.init([0])
    t0 = time.perf_counter()
    state = jax.block_until_ready(a.run_updates(state, updates))  # compiles
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        state = jax.block_until_ready(a.run_updates(state, updates))
        times.append(time.perf_counter() - t0)
    prog = a._chunk()
    text = "\n".join(exe.as_text() for exe in prog._executables.values())
    sec = statistics.median(times)
    return {"model_size": int(a.cfg.model_size), "devices": a.placement.n_devices, "batch": int(a.cfg.batch_size),
            "updates": updates,
            "updates_per_s": updates / sec, "first_call_s": first,
            "compile_s": sum(r["compile_s"] + r["trace_lower_s"] for r in a.compile_seconds.values()),
            "all_reduces": text.count("all-reduce"), "times_s": times}


def efficiency(rows: list) -> None:
    """Adds ``speedup`` and ``scaling_efficiency`` against the size's 1-device row (None without one)."""
    for r in rows:
        base = next((b for b in rows if b["model_size"] == r["model_size"] and b["devices"] == 1), None)
        r["speedup"] = None if base is None else r["updates_per_s"] / base["updates_per_s"]
        r["scaling_efficiency"] = None if base is None else r["speedup"] / r["devices"]


def markdown(rows: list, meta: dict) -> str:
    lines = [f"Multi-task update, data parallel ({meta['device']}, {meta['backend']}, JAX {meta['jax']}, "
             f"{meta['date']}; global batch {rows[0]['batch']}; {'REDUCED CPU form' if meta['reduced'] else ''})", "",
             "| model size | devices | updates/s | speedup | scaling efficiency | compile s | all-reduces |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        f = lambda x: "n/a" if x is None else f"{x:.2f}"
        lines.append(f"| {r['model_size']} | {r['devices']} | {r['updates_per_s']:.1f} | {f(r['speedup'])} | "
                     f"{f(r['scaling_efficiency'])} | {r['compile_s']:.1f} | {r['all_reduces']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="model sizes (default 48 317)")
    ap.add_argument("--devices", type=int, nargs="+", default=list(COUNTS),
                    help="device counts (default 1 2 4 8; those above the visible devices are skipped)")
    ap.add_argument("--batch", type=int, default=1024, help="global batch (default 1024, the paper's)")
    ap.add_argument("--updates", type=int, default=20, help="updates per timed call (default 20)")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls (median; default 5)")
    ap.add_argument("--reduced", action="store_true", help="the test suite's CPU form (4 fake devices, size 1)")
    ap.add_argument("--out", default=None, help="JSON results (default benchmarks/runs/multi-device-<date>.json)")
    args = ap.parse_args(argv)
    agent, tasks = {}, TASKS
    if args.reduced:
        from tdmpc2core.run.devices import use_fake_cpu_devices

        use_fake_cpu_devices(REDUCED["fake"])  # before JAX starts
        args.sizes, args.devices, args.batch = REDUCED["sizes"], REDUCED["devices"], REDUCED["batch"]
        args.updates, args.repeats, agent, tasks = REDUCED["updates"], REDUCED["repeats"], REDUCED["agent"], REDUCED["tasks"]
    import jax

    visible = jax.device_count()
    pool = synthetic_pool(tasks)
    rows = []
    for size in args.sizes:
        for n in args.devices:
            if n > visible:
                print(f"skipped: {n} devices (only {visible} visible)", file=sys.stderr)
                continue
            if args.batch % n:
                print(f"skipped: {n} devices (batch {args.batch} does not divide)", file=sys.stderr)
                continue
            r = measure(size, n, pool, batch=args.batch, updates=args.updates, repeats=args.repeats, agent=agent)
            print(f"size {size}, {n} device(s): {r['updates_per_s']:.1f} updates/s, compile {r['compile_s']:.1f} s",
                  file=sys.stderr, flush=True)
            rows.append(r)
    if not rows:
        print("nothing measured", file=sys.stderr)
        return 1
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "runs" / f"multi-device-{date[:10]}.json"
    write(out, rows, reduced=bool(args.reduced), argv=sys.argv[1:])
    return 0


def write(out: Path, rows: list, *, reduced: bool, argv: list) -> dict:
    """The scaling efficiencies added, the JSON results and the Markdown table beside them
    (each written atomically; the table printed). Returns the meta data."""
    import jax

    efficiency(rows)
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    dev = jax.devices()[0]
    meta = {"date": date, "device": getattr(dev, "device_kind", str(dev)), "backend": jax.default_backend(),
            "jax": jax.__version__, "visible_devices": jax.device_count(), "reduced": bool(reduced), "argv": argv,
            "load": os.getloadavg()[0]}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    from tdmpc2core.io.atomic import write_text

    write_text(out, json.dumps({"meta": meta, "results": rows}, indent=1))
    write_text(out.with_suffix(".md"), markdown(rows, meta))
    print(markdown(rows, meta))
    return meta


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
