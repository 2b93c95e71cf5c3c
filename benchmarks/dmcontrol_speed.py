"""dm_control vs MuJoCo Playground (MJX): agent steps/s and the share of time in the host step.

    python benchmarks/dmcontrol_speed.py                       # cheetah-run vs CheetahRun
    python benchmarks/dmcontrol_speed.py --dmc dmc:walker-walk --playground WalkerWalk --json out.json

Two measurements per simulator, after compilation (compile times reported separately):

* ``env``: the environment alone, a jitted ``lax.scan`` of ``--env-steps`` agent steps with
  uniform random actions (action repeat 2), vmapped over seeds x ``n_envs``;
* ``train``: whole training ticks after the seed phase (plan, env step, replay write,
  ``n_envs`` updates) of ``TDMPC2`` with the demo agent settings of ``config.yaml`` (or
  ``--model-size``/paper planner), as ``benchmarks/speed.py`` times them.

For dm_control, ``host_share`` is the wall time spent inside the host callbacks
(``DMControlEnv.host_stats``: restoring the MuJoCo state, the control steps, the observation)
divided by the measured wall time; ``host_us_per_step`` is that time per agent step of one
environment. The rest of the gap between the env-only time and the host time is the
callback's crossing (argument and result copies, dispatch).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import yaml

from tdmpc2core.agents.single_task import TDMPC2
from tdmpc2core.envs import make_env

ROOT = Path(__file__).resolve().parents[1]


def demo_agent_kwargs() -> dict:
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    return dict(cfg["protocols"][cfg["protocol"]]["defaults"]["agent"])


def host_stats(env):
    return env.host_stats(reset=True) if hasattr(env, "host_stats") else None


def bench_env(env_id, seeds, n_envs, n_steps, repeats):
    env = make_env(env_id, action_repeat=2, episode_length=1000)

    @jax.jit
    def roll(keys):
        def one(key):
            state, _ = env.reset(key)

            def body(st, k):
                a = jax.random.uniform(k, (env.spec.action_dim,), jnp.float32, -1.0, 1.0)
                st, out = env.step(st, a, k)
                return st, out.reward

            return jnp.sum(jax.lax.scan(body, state, jax.random.split(key, n_steps))[1])

        return jax.vmap(jax.vmap(one))(keys)

    keys = jax.random.split(jax.random.PRNGKey(0), seeds * n_envs).reshape(seeds, n_envs, -1)
    t = time.perf_counter(); jax.block_until_ready(roll(keys)); compile_s = time.perf_counter() - t
    host_stats(env)
    times = []
    for _ in range(repeats):
        t = time.perf_counter(); jax.block_until_ready(roll(keys)); times.append(time.perf_counter() - t)
    wall = statistics.median(times)
    hs = host_stats(env)
    steps = seeds * n_envs * n_steps
    res = {"what": "env", "env_id": env_id, "seeds": seeds, "n_envs": n_envs, "agent_steps": steps,
           "agent_steps_per_s": steps / wall, "compile_s": compile_s}
    if hs is not None:
        host = hs["seconds"] / repeats
        res.update(host_share=host / wall, host_us_per_step=1e6 * host / steps,
                   callbacks_per_run=hs["calls"] / repeats)
    return res


def bench_train(env_id, seeds, n_envs, agent_kwargs, n_ticks):
    agent = TDMPC2(env_id, n_envs=n_envs, action_repeat=2, episode_length=1000, **agent_kwargs)
    T = agent.episode_length
    chunk = agent._chunk()
    state = agent.init(list(range(seeds)), 10 * T * n_envs)
    t = time.perf_counter()
    state = chunk(state, jnp.int32(0), jnp.int32(T + 1)); jax.block_until_ready(state)
    fill_s = time.perf_counter() - t   # compile + one random episode per env
    burst_tick = -(-agent.seed_steps // n_envs)
    start = (burst_tick // T + 1) * T + 1
    t = time.perf_counter(); state = chunk(state, jnp.int32(start), jnp.int32(1)); jax.block_until_ready(state)
    first_tick = time.perf_counter() - t
    host_stats(agent.env)
    t = time.perf_counter(); state = chunk(state, jnp.int32(start + 1), jnp.int32(n_ticks)); jax.block_until_ready(state)
    wall = time.perf_counter() - t
    hs = host_stats(agent.env)
    steps = seeds * n_envs * n_ticks
    res = {"what": "train", "env_id": env_id, "seeds": seeds, "n_envs": n_envs, "agent_kwargs": agent_kwargs,
           "agent_steps": steps, "agent_steps_per_s": steps / wall,
           "compile_and_fill_s": fill_s, "first_tick_s": first_tick}
    if hs is not None:
        res.update(host_share=hs["seconds"] / wall, host_us_per_step=1e6 * hs["seconds"] / steps)
    return res


def load_text():
    try:
        return os.getloadavg()
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dmc", default="dmc:cheetah-run")
    ap.add_argument("--playground", default="CheetahRun")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--n-envs", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--env-steps", type=int, default=500)
    ap.add_argument("--ticks", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model-size", type=int, help="paper planner and this model size instead of the demo agent")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    agent_kwargs = (dict(model_size=args.model_size, batch_size=256) if args.model_size
                    else demo_agent_kwargs())
    results = []
    print(f"load average before: {load_text()}; {os.cpu_count()} CPUs; JAX {jax.default_backend()}", flush=True)
    for env_id in (args.dmc, args.playground):
        for n in args.n_envs:
            r = bench_env(env_id, args.seeds, n, args.env_steps, args.repeats)
            results.append(r)
            extra = (f", host {100 * r['host_share']:.0f}% ({r['host_us_per_step']:.0f} us/step)"
                     if "host_share" in r else "")
            print(f"env   {env_id:>18} {args.seeds}x{n:<3}: {r['agent_steps_per_s']:9.0f} agent steps/s"
                  f"{extra} (compile {r['compile_s']:.1f} s)", flush=True)
    if not args.skip_train:
        for env_id in (args.dmc, args.playground):
            r = bench_train(env_id, args.seeds, args.n_envs[0], agent_kwargs, args.ticks)
            results.append(r)
            extra = (f", host {100 * r['host_share']:.1f}% ({r['host_us_per_step']:.0f} us/step)"
                     if "host_share" in r else "")
            print(f"train {env_id:>18} {args.seeds}x{args.n_envs[0]:<3}: {r['agent_steps_per_s']:9.1f} agent steps/s"
                  f"{extra} (compile + first episode {r['compile_and_fill_s']:.0f} s)", flush=True)
    print(f"load average after: {load_text()}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
