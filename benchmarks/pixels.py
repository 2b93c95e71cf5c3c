"""A short CPU training run from pixels that learns something measurable (issue 29).

    python benchmarks/pixels.py                                  # dmc:cartpole-balance, defaults below
    python benchmarks/pixels.py --steps 6000 --json out.json

``TDMPC2(env, obs="rgb")`` on a dm_control task from 64x64 RGB frame stacks (spec §2
"Pixels": u8[9 x 64 x 64], the conv encoder of spec §3.2 with its ShiftAug, latent 512 as
the rgb encoder requires), with a budget that fits a 2-core CPU in minutes: shorter episodes
(``--episode-length`` control steps, action repeat 2), a short seed phase, a small batch,
``model_size`` 1's MLP widths and a small planner. It evaluates ``--eval-episodes`` episodes
(eval mode, fresh initial states from the seed's evaluation keys) before training, every
``--eval-every`` agent steps and at the end, and reports the returns at start and end per
episode, the mean of every evaluation, the wall time (compile included and
separately), agent steps/s, the host share (rendering + physics) and the machine's load
(``os.getloadavg`` before and after: other processes share the CPU).

The replay holds one frame per row (docs/deviations.md R4); the printed ``replay_bytes`` is its
size for this run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="dmc:cartpole-balance")
    p.add_argument("--steps", type=int, default=4000, help="agent steps of training")
    p.add_argument("--episode-length", type=int, default=200, help="control steps per episode (T = this / 2)")
    p.add_argument("--seed-steps", type=int, default=500)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--eval-every", type=int, default=1000, help="agent steps between evaluations (and at 0, end)")
    p.add_argument("--num-channels", type=int, default=32,
                   help="conv channels (latent_dim = 16 x this: 32 -> 512, the official encoder; fewer for a CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)

    from tdmpc2core.agents import replay as rp
    from tdmpc2core.agents.single_task import TDMPC2

    load0 = os.getloadavg()
    agent = TDMPC2(args.env, obs="rgb", model_size=1, num_channels=args.num_channels,
                   latent_dim=16 * args.num_channels, episode_length=args.episode_length,
                   seed_steps=args.seed_steps, batch_size=args.batch_size, num_samples=128, num_elites=16,
                   num_pi_trajs=8, iterations=4, horizon=3)
    T = agent.episode_length
    t0 = time.perf_counter()
    records = []
    def progress(p):
        print(f"[pixels] {p['agent_steps']}/{p['total_agent_steps']} agent steps ({p['phase']}), "
              f"{p['agent_steps_per_s']:.2f}/s, {time.perf_counter() - t0:.0f} s, last eval "
              f"{p['last_eval_return']}", file=sys.stderr, flush=True)

    state, hist = agent.train(seed=args.seed, n_timesteps=args.steps, eval_every=args.eval_every,
                              eval_episodes=args.eval_episodes, callback=records.append, progress=progress,
                              max_chunk_seconds=120)
    wall = time.perf_counter() - t0
    host = agent.env.host_stats()
    rets = np.asarray(hist["eval_returns"])[:, 0]  # [evaluations, episodes]
    compile_s = {k: round(sum(v.get(x, 0.0) for x in ("trace_lower_s", "compile_s")), 1)
                 for k, v in agent.compile_seconds.items()}
    S = rp.capacity_episodes(agent.cfg.buffer_size, args.steps, T)
    out = {
        "env": args.env, "obs": "rgb", "agent_steps": args.steps, "T_agent_steps": T,
        "seed_steps": agent.seed_steps, "batch_size": agent.cfg.batch_size, "latent_dim": agent.cfg.latent_dim,
        "updates": int(np.asarray(state.agent.updates).reshape(-1)[0]),
        "eval_agent_steps": np.asarray(hist["eval_agent_steps"]).tolist(),
        "eval_returns_start": rets[0].round(2).tolist(), "eval_returns_end": rets[-1].round(2).tolist(),
        "eval_return_start_mean": float(rets[0].mean()), "eval_return_end_mean": float(rets[-1].mean()),
        "eval_return_means": rets.mean(axis=1).round(2).tolist(),
        "return_range": [0.0, float(args.episode_length)],
        "train_returns": [float(np.asarray(r["train_return"]).reshape(-1)[0]) for r in records
                          if np.isfinite(np.asarray(r["train_return"]).reshape(-1)[0])],
        # the world model's losses per chunk record (seed 0): the first after the seed phase and the last
        "losses_first_last": {k: [round(v[0], 4), round(v[-1], 4)] for k, v in (
            (k, [float(np.asarray(r[k]).reshape(-1)[0]) for r in records
                 if k in r and r.get("phase") != "seed" and np.isfinite(np.asarray(r[k]).reshape(-1)[0])])
            for k in (records[-1] if records else {}) if "loss" in k) if v},
        "wall_s": round(wall, 1), "compile_s": compile_s,
        "agent_steps_per_s": round(args.steps / wall, 2),
        "host_seconds": round(host["seconds"], 1), "host_items": host["items"],
        "replay_bytes": rp.replay_nbytes(S, 1, T, agent.spec.obs_dim, agent.spec.action_dim,
                                         obs_dtype="uint8", frames=rp.PIXEL_FRAMES),
        "loadavg_before": [round(x, 2) for x in load0], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cpu_count": os.cpu_count(), "machine": platform.processor() or platform.machine(),
    }
    print(json.dumps(out, indent=1))
    if args.json:
        from tdmpc2core.io.atomic import write_text

        write_text(args.json, json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
