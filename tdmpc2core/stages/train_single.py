"""``tdmpc2 train-single``: train single-task TD-MPC2 seeds (vmapped) on one task.

Writes ``{outdir}/seed{S}/eval.parquet``, ``metrics.parquet``, ``episodes.parquet`` (the
seed's replay as an episode dataset, :func:`tdmpc2core.dataset.export_episodes`) and, last,
``run.json`` for every seed (docs/artifacts.md). Progress is logged to stderr after every chunk.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SPEC_KEYS = {"env_id", "action_repeat", "episode_length", "agent_steps", "eval_every", "eval_episodes",
             "agent", "n_envs", "backend", "allow_evicted"}
REQUIRED = {"env_id", "agent_steps"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", required=True, help="task name (folder name under results/single)")
    p.add_argument("--spec", required=True,
                   help="JSON object of the task settings (docs/artifacts.md), or @file.json")
    p.add_argument("--seeds", required=True, type=int, nargs="+", help="seeds, run vmapped in one program")
    p.add_argument("--outdir", required=True, help="results/single/{task}")


def parse_spec(text: str) -> dict:
    """The task settings from JSON text or ``@path``; raises ValueError naming bad keys."""
    src = "--spec"
    if text.startswith("@"):
        src = text[1:]
        text = Path(src).read_text()
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{src}: not valid JSON ({exc})") from None
    if not isinstance(spec, dict):
        raise ValueError(f"{src}: expected a JSON object, got {type(spec).__name__}")
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise ValueError(f"{src}: unknown key(s) {unknown}; accepted: {sorted(SPEC_KEYS)}")
    missing = sorted(REQUIRED - set(spec))
    if missing:
        raise ValueError(f"{src}: missing key(s) {missing}")
    return spec


def run(args) -> int:
    spec = parse_spec(args.spec)
    import numpy as np
    import pyarrow as pa

    from .. import atomic, provenance
    from ..agent import TDMPC2
    from ..dataset import export_episodes, save_dataset
    from ..networks import MATMUL_PRECISION

    seeds = list(args.seeds)
    outdir = Path(args.outdir)
    agent = TDMPC2(spec["env_id"], n_envs=int(spec.get("n_envs", 1)),
                   episode_length=int(spec.get("episode_length", 1000)),
                   action_repeat=int(spec.get("action_repeat", 1)), backend=spec.get("backend"),
                   **spec.get("agent", {}))
    n_timesteps = int(spec["agent_steps"])
    eval_every = int(spec.get("eval_every", 0)) or None
    eval_episodes = int(spec.get("eval_episodes", 10))
    log = lambda msg: print(f"[train-single {args.task}] {msg}", file=sys.stderr, flush=True)
    log(f"env {spec['env_id']}: T={agent.episode_length} agent steps, action_repeat={agent.action_repeat}, "
        f"gamma={agent.gamma:.4f}, seed_steps={agent.seed_steps}, seeds={seeds}, {n_timesteps} agent steps")

    t_start = time.perf_counter()
    compile_s = {"total": 0.0}
    rows = []

    def on_chunk(rec):
        first = rec["phase"] not in seen_phases
        seen_phases.add(rec["phase"])
        if first:
            compile_s["total"] += rec["chunk_seconds"]  # upper bound: the first chunk of a phase compiles
        rows.append(rec)
        done = rec["agent_steps"]
        if rec["phase"] == "burst":
            msg = (f"{done}/{n_timesteps} agent steps: seed-phase burst of {agent.seed_steps} updates "
                   f"took {rec['chunk_seconds']:.0f} s")
        else:
            rate = rec["agent_steps_per_s"]
            msg = f"{done}/{n_timesteps} agent steps ({rec['phase']}), {rate:.1f} agent steps/s"
            if rec["phase"] == "train":  # seed-phase ticks (random actions, no updates) are far faster
                msg += f", ~{(n_timesteps - done) / max(rate, 1e-9):.0f} s left at this rate"
        if "eval_return" in rec:
            msg += ", eval return " + " ".join(f"{x:.1f}" for x in np.atleast_1d(rec["eval_return"]))
        log(msg)

    seen_phases: set = set()
    state, hist = agent.train(seed=seeds, n_timesteps=n_timesteps, eval_every=eval_every,
                              eval_episodes=eval_episodes, callback=on_chunk)
    wall = time.perf_counter() - t_start
    prov = provenance.collect(".", include_jax=True)

    for i, seed in enumerate(seeds):
        d = outdir / f"seed{seed}"
        d.mkdir(parents=True, exist_ok=True)
        runjson = d / "run.json"
        if runjson.exists():
            runjson.unlink()  # the marker of completeness goes first, comes back last
        n_eval = len(hist["eval_agent_steps"])
        E = eval_episodes
        ev = {
            "task": [args.task] * (n_eval * E),
            "seed": np.full(n_eval * E, seed, np.int64),
            "eval_index": np.repeat(np.arange(n_eval, dtype=np.int64), E),
            "agent_steps": np.repeat(np.asarray(hist["eval_agent_steps"], np.int64), E),
            "env_frames": np.repeat(np.asarray(hist["eval_env_frames"], np.int64), E),
            "episode": np.tile(np.arange(E, dtype=np.int64), n_eval),
            "return": (np.asarray(hist["eval_returns"])[:, i, :].reshape(-1).astype(np.float64)
                       if n_eval else np.zeros(0)),
            "length": (np.asarray(hist["eval_lengths"])[:, i, :].reshape(-1).astype(np.int64)
                       if n_eval else np.zeros(0, np.int64)),
        }
        atomic.write_parquet(d / "eval.parquet", pa.table(ev))
        met = {"task": [args.task] * len(rows), "seed": np.full(len(rows), seed, np.int64)}
        met["agent_steps"] = np.array([r["agent_steps"] for r in rows], np.int64)
        met["env_frames"] = np.array([r["env_frames"] for r in rows], np.int64)
        met["updates"] = np.array([np.asarray(r["updates"])[i] for r in rows], np.int64)
        met["wall_time_s"] = np.array([r["wall_time_s"] for r in rows], np.float64)
        met["agent_steps_per_s"] = np.array([r["agent_steps_per_s"] for r in rows], np.float64)
        for k in ("consistency_loss", "reward_loss", "value_loss", "pi_loss", "total_loss", "grad_norm",
                  "pi_grad_norm", "pi_scale", "train_return"):
            met[k] = np.array([np.asarray(r[k])[i] for r in rows], np.float64)
        atomic.write_parquet(d / "metrics.parquet", pa.table(met))
        episodes = export_episodes(agent, state, seed_index=i, name=args.task, seed=seed,
                                   allow_evicted=bool(spec.get("allow_evicted", False)),
                                   provenance={"spec": spec, **prov})
        size = save_dataset(episodes, d / "episodes.parquet")
        log(f"seed {seed}: exported {episodes.num_episodes} episodes ({episodes.num_transitions} agent steps, "
            f"{size / 1e6:.1f} MB) to {d / 'episodes.parquet'}")
        final = hist["eval_return"][-1, i] if n_eval else None
        atomic.write_json(runjson, {
            "task": args.task, "seed": seed, "seeds_in_job": seeds, "spec": spec,
            "agent_config": agent.config, "gamma": agent.gamma, "seed_steps": agent.seed_steps,
            "agent_steps": n_timesteps, "env_frames": n_timesteps * agent.action_repeat,
            "final_eval_return": final,
            "dataset_episodes": episodes.num_episodes, "dataset_agent_steps": episodes.num_transitions,
            "matmul_precision": f"float32 ({MATMUL_PRECISION.name}); jax_default_matmul_precision="
                                f"{prov['platform'].get('jax_default_matmul_precision')}",
            "compile_seconds_upper_bound": compile_s["total"], "wall_seconds": wall,
            "provenance": prov,
        })
    log(f"done in {wall:.0f} s; final eval return " +
        (" ".join(f"{x:.1f}" for x in hist["eval_return"][-1]) if len(hist["eval_agent_steps"]) else "n/a"))
    return 0
