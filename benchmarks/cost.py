"""What a configuration costs before you launch it: compile seconds and training speed as the
work grows along one axis at a time (horizon, num_samples, model size, vmapped seeds).

    python benchmarks/cost.py                               # the grid below, Pendulum-v1, CPU or GPU
    python benchmarks/cost.py --axes horizon seeds --json benchmarks/runs/cost.json
    python benchmarks/cost.py --reduced                     # a tiny grid (the test suite's form)

Every point starts from the base configuration (model size 1, batch 256, the paper planner:
6 iterations, 512 samples, 64 elites, 24 policy trajectories, horizon 3; one seed) and changes
one setting. Each point runs in a fresh process with JAX's persistent compilation cache off,
so its compile seconds are a cold start's, and reports:

- ``compile_s``: trace + lower + XLA compile of the training program (``chunk``: ticks of plan,
  env step, replay write and update, seeds vmapped; what every training job compiles first);
- ``eval_compile_s``: the same for the evaluation program (``eval_episodes`` episodes vmapped);
- ``agent_steps_per_s``: whole training ticks after the seed phase, summed over the seeds
  (``benchmarks/speed.py`` ``bench_train``);
- ``s_per_1M_env_frames``: the training time of one million environment frames at that speed
  (Pendulum-v1: action repeat 1, so frames = agent steps), planning and updates included;
  evaluation and compilation not.

The table (Markdown, printed and written beside ``--json``) is what README's Speed section
quotes. The environment is gymnax Pendulum-v1 (obs 3, action 1), whose step costs next to
nothing, so the figures are the agent's; a DMC task adds its physics (benchmarks/README.md,
"dm_control vs MuJoCo Playground").
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = "Pendulum-v1"
BASE = dict(model_size=1, batch_size=256, horizon=3, num_samples=512, seeds=1)
AXES = {
    "horizon": [1, 3, 5, 8],
    "num_samples": [128, 512, 1024],
    "model_size": [1, 5],
    "seeds": [1, 2, 4, 8],
}
REDUCED_BASE = dict(model_size=1, batch_size=16, horizon=3, num_samples=16, seeds=1, enc_dim=32, mlp_dim=32,
                    latent_dim=16, num_elites=4, num_pi_trajs=2, iterations=1)
REDUCED_AXES = {"horizon": [1, 3], "seeds": [1, 2]}


def measure_point(point: dict, *, ticks: int, eval_episodes: int) -> dict:
    """Compile seconds and agent steps/s of one configuration, in this process."""
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    import jax.numpy as jnp

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from speed import bench_train

    from tdmpc2core import TDMPC2
    from tdmpc2core.agents import online

    kw = {k: v for k, v in point.items() if k != "seeds"}
    agent = TDMPC2(ENV, **kw)
    seeds = list(range(point["seeds"]))
    steps_per_s, compile_s = bench_train(agent, seeds=seeds, n_ticks=ticks)
    fn = online.make_eval_fn(agent, eval_episodes)
    state = agent.init(seeds, 10 * agent.episode_length)
    keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds])
    t0 = time.perf_counter()
    lowered = fn.lower(state.agent.params, keys)
    t1 = time.perf_counter()
    lowered.compile()
    eval_compile_s = time.perf_counter() - t1 + (t1 - t0)
    cfg = agent.cfg
    return {"point": point, "horizon": cfg.horizon, "num_samples": cfg.num_samples, "model_size": cfg.model_size,
            "batch_size": cfg.batch_size, "compile_s": compile_s, "eval_compile_s": eval_compile_s,
            "agent_steps_per_s": steps_per_s, "s_per_1M_env_frames": 1e6 * agent.action_repeat / steps_per_s,
            "backend": jax.default_backend(), "jax": jax.__version__}


def grid(base: dict, axes: dict) -> list[tuple[str, dict]]:
    """(axis, point) pairs: the base once, then each axis's other values."""
    out = [("base", dict(base))]
    for axis, values in axes.items():
        for v in values:
            if v != base[axis]:
                out.append((axis, dict(base, **{axis: v})))
    return out


def _hours(seconds: float) -> str:
    h = seconds / 3600
    return f"{h:.1f}" if h < 10 else f"{h:,.0f}"


def markdown(rows: list, meta: dict) -> str:
    lines = [("REDUCED (a test of the command, not speed figures): " if meta.get("reduced") else "")
             + f"Cost as work grows ({meta['env']}, {meta['backend']}, {meta.get('cpus')} CPUs, jax {meta['jax']}, {meta['date']}; "
             f"load {meta['load_start']} at the start, {meta['load_end']} at the end). Base: "
             + ", ".join(f"{k} {v}" for k, v in meta["base"].items()) + ".", "",
             "| changed | value | training program compile s | eval program compile s | agent steps/s "
             "(all seeds) | hours per 1M env frames |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        axis = r["axis"]
        value = "(base)" if axis == "base" else r["point"][axis]
        lines.append(f"| {axis} | {value} | {r['compile_s']:.1f} | {r['eval_compile_s']:.1f} | "
                     f"{r['agent_steps_per_s']:.2f} | {_hours(r['s_per_1M_env_frames'])} |")
    return "\n".join(lines) + "\n"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--axes", nargs="*", choices=list(AXES), help="the axes to vary (default: all)")
    p.add_argument("--ticks", type=int, default=5, help="timed training ticks per point (default 5)")
    p.add_argument("--eval-episodes", type=int, default=10, help="episodes of the evaluation program (default 10)")
    p.add_argument("--reduced", action="store_true", help="a tiny grid and model (the test suite's form)")
    p.add_argument("--json", default=None, help="write the rows here (and a Markdown table beside it, .md)")
    p.add_argument("--point", default=None, help=argparse.SUPPRESS)  # internal: one point, in a child process
    args = p.parse_args(argv)
    if args.ticks < 1 or args.eval_episodes < 1:
        p.error(f"--ticks {args.ticks} and --eval-episodes {args.eval_episodes}: both must be >= 1")
    if args.json and args.json.endswith(".md"):
        p.error(f"--json {args.json}: the Markdown table is written beside the JSON as .md; name a .json file")

    if args.point is not None:
        print("POINT " + json.dumps(measure_point(json.loads(args.point), ticks=args.ticks,
                                                    eval_episodes=args.eval_episodes)))
        return 0

    base, axes = (REDUCED_BASE, REDUCED_AXES) if args.reduced else (BASE, AXES)
    if args.axes:
        missing = [a for a in args.axes if a not in axes]
        if missing:
            p.error(f"--axes {missing[0]}: not an axis of the {'reduced ' if args.reduced else ''}grid "
                    f"(its axes: {' '.join(axes)})")
        axes = {a: v for a, v in axes.items() if a in args.axes}
    meta = {"env": ENV, "base": base, "date": dt.date.today().isoformat(), "load_start": load(),
            "reduced": args.reduced, "cpus": os.cpu_count(), "cpu": platform.processor() or platform.machine()}
    rows = []
    for axis, point in grid(base, axes):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--point", json.dumps(point), "--ticks",
               str(args.ticks), "--eval-episodes", str(args.eval_episodes)]
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        found = [ln for ln in res.stdout.splitlines() if ln.startswith("POINT ")]
        if res.returncode != 0 or not found:
            raise RuntimeError(f"cost point {point} failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
        row = dict(json.loads(found[-1][6:]), axis=axis)
        rows.append(row)
        if args.json:  # every row measured so far survives a later point's failure
            partial = Path(args.json).with_suffix(".partial.json")
            partial.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
        print(f"{axis:>12} {json.dumps(point)}: compile {row['compile_s']:.1f} s (+ eval {row['eval_compile_s']:.1f} s), "
              f"{row['agent_steps_per_s']:.2f} agent steps/s", flush=True)
    meta.update(load_end=load(), backend=rows[0]["backend"], jax=rows[0]["jax"])
    table = markdown(rows, meta)
    print(table)
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
        out.with_suffix(".md").write_text(table)
        out.with_suffix(".partial.json").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
