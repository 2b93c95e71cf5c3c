"""Compiling in a cold and a warm job: the training stage (`tdmpc2 train-single`, the workflow's
own command) run three times in new processes on one task, and each run's compile seconds per
program (trace + lower + XLA compile, from its run.json) set side by side:

  1. cold: empty caches (JAX's persistent compilation cache and the program cache,
     tdmpc2core.run.program_cache, both on as in the workflow's jobs);
  2. warm: the same job again (its checkpoint folder removed, so it trains anew) with both caches
     filled by run 1: nothing traced, every executable loaded;
  3. JAX cache only: the same job with the program cache off and JAX's cache filled by a run
     without it (what a warm job did before the program cache): every program traced again.

    python benchmarks/warm_start.py                                  # CheetahRun (MJX), size 5, paper planner
    python benchmarks/warm_start.py --env Pendulum-v1 --model-size 1 # seconds, for a look
    python benchmarks/warm_start.py --json out.json

Run 3 needs its own cold run first (the program cache's executables are those of the exported
program, a module other than ``jax.jit``'s), which is timed too and reported as "cold, JAX
cache only". A short run (``--agent-steps``, default 600, all in the seed phase, and one
evaluation episode at the end): the point is the compiling, not the training.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_stage(work: Path, env_id: str, agent: dict, agent_steps: int, jax_cache: Path, programs) -> dict:
    """One `tdmpc2 train-single` process in ``work``; (wall seconds, compile seconds per program,
    the log's last line)."""
    out, ckdir = work / "out", work / "ck"
    for p in (out, ckdir):
        shutil.rmtree(p, ignore_errors=True)
    spec = {"env_id": env_id, "agent_steps": agent_steps, "eval_every": agent_steps, "eval_episodes": 1,
            "agent": agent}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION", "TDMPC2_PROGRAM"))}
    env.update(JAX_COMPILATION_CACHE_DIR=str(jax_cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    if programs is not None:
        env["TDMPC2_PROGRAM_CACHE_DIR"] = str(programs)
    cmd = [sys.executable, "-m", "tdmpc2core.cli", "train-single", "--task", "t", "--spec", json.dumps(spec),
           "--seeds", "0", "--outdir", str(out), "--checkpoint-dir", str(ckdir), "--video", "off"]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"the stage failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    run = json.loads((out / "seed0" / "run.json").read_text())
    compile_s = run["attempts"][-1]["compile_seconds"]
    done = [ln for ln in res.stderr.splitlines() if " done in " in ln]
    # what the program cache said (a program not stored or not loaded, and why): a warm job that
    # compiles like a cold one is explained here
    said = [ln for ln in res.stderr.splitlines() if "program cache" in ln]
    # per program: trace+lower and XLA seconds, where a loaded program's seconds went
    # (program_cache_s) and what JAX reported (jax_events: its cache's hits and read time...)
    detail = run.get("compile_detail", {})
    # JAX's persistent cache after the job: each entry's bytes (compressed executables; their
    # load is the warm job's cache_retrieval_time_sec), largest first
    entries = sorted(((p.name, p.stat().st_size) for p in Path(jax_cache).iterdir() if p.is_file()),
                     key=lambda e: -e[1]) if Path(jax_cache).is_dir() else []
    return {"wall_s": wall, "compile_s": compile_s, "compile_total_s": sum(compile_s.values()),
            "log": done[-1].split("] ", 1)[-1] if done else None, "program_cache_said": said,
            "compile_detail": detail, "jax_cache_entries": dict(entries)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="CheetahRun")
    ap.add_argument("--model-size", type=int, default=5)
    ap.add_argument("--demo-planner", action="store_true", help="the demo's small planner instead of the paper's")
    ap.add_argument("--agent-steps", type=int, default=600)
    ap.add_argument("--skip-jax-only", action="store_true",
                    help="runs 1 and 2 only (on an accelerator with ten minutes a call: the pair without the "
                         "program cache compiles everything twice more)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    agent = {"model_size": args.model_size, "seed_steps": max(args.agent_steps, 1000)}
    if args.demo_planner:
        agent.update(num_samples=64, num_elites=8, num_pi_trajs=4, iterations=2)
    from importlib import metadata

    from tdmpc2core.io.provenance import platform_info, short_commit

    # (JAX is not imported here: on an accelerator one process at a time may hold the device)
    meta = {"env": args.env, "model_size": args.model_size, "planner": "demo" if args.demo_planner else "paper",
            "agent_steps": args.agent_steps, "commit": short_commit(ROOT), "jax": metadata.version("jax"),
            "load_at_start": os.getloadavg(), **platform_info()}
    rows = {}

    def run(name, cache, programs):
        rows[name] = run_stage(tmp, args.env, agent, args.agent_steps, cache, programs)
        if args.json:  # after each run: a call cut short keeps what it measured
            Path(args.json).write_text(json.dumps({"meta": meta, "runs": rows}, indent=1, default=str))

    with tempfile.TemporaryDirectory(prefix="warm_start-") as tmp:
        tmp = Path(tmp)
        both, plain = tmp / "jax_cache", tmp / "jax_cache_plain"
        run("cold (both caches empty)", both, both / "programs")
        run("warm (both caches filled)", both, both / "programs")
        if not args.skip_jax_only:
            run("cold, JAX cache only", plain, None)
            run("warm, JAX cache only (before the program cache)", plain, None)
    print(f"{args.env}, model size {args.model_size}, {meta['planner']} planner; commit {meta['commit']}, "
          f"load {meta['load_at_start'][0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print("| run | compile s (trace + lower + XLA) per program | total | wall s |")
    print("|---|---|---|---|")
    for name, r in rows.items():
        per = ", ".join(f"{k} {v:.1f}" for k, v in r["compile_s"].items())
        print(f"| {name} | {per} | {r['compile_total_s']:.1f} | {r['wall_s']:.0f} |")
    for name, r in rows.items():  # where the seconds went, program by program
        for prog, d in r.get("compile_detail", {}).items():
            parts = ", ".join(f"{k} {v:.2f}" for k, v in d.get("program_cache_s", {}).items())
            # durations (float seconds) to two decimals, counts as they are; the event's last name
            events = ", ".join(f"{k.rsplit('/', 1)[-1]} {round(v, 2)}" for k, v in d.get("jax_events", {}).items())
            sizes = ", ".join(f"{k} {v / 2**20:.2f}" for k, v in d.get("executable_bytes", {}).items())
            print(f"{name}, {prog}: program cache [{parts}]; JAX [{events}]; executable MiB [{sizes}]")
    for name, r in rows.items():
        entries = r.get("jax_cache_entries") or {}
        print(f"{name}: JAX's persistent cache after it, {len(entries)} entries, "
              f"{sum(entries.values()) / 2**20:.1f} MiB; the largest: "
              + ", ".join(f"{k[:48]} {v / 2**20:.2f} MiB" for k, v in list(entries.items())[:4]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
