"""Speed benchmark: updates/s, planning latency, agent steps/s and achieved GFLOP/s.

GFLOP/s are counted as the official algorithm's FLOPs (tdmpc2core/model/flops.py), so exact
savings (evaluating only the random Q pair) show as a higher figure. Runs unchanged on a GPU.

    python benchmarks/speed.py                 # demo config + model_size 1 and 5, paper planner
    python benchmarks/speed.py --only demo --json out.json

Each figure is measured after compilation (compile time reported separately), as the median
of --repeats timed calls.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import yaml

from tdmpc2core.model import flops
from tdmpc2core.agents.single_task import TDMPC2
from tdmpc2core.model.planner import plan
from tdmpc2core.model.update import Batch, init_agent_state, update

ROOT = Path(__file__).resolve().parents[1]


def demo_agent_kwargs() -> dict:
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    agent = cfg["protocols"][cfg["protocol"]]["defaults"].get("agent")
    if not agent:
        raise KeyError("config.yaml: protocols[protocol].defaults.agent is missing or empty")
    return dict(agent)


def timed(fn, repeats):
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def fixed_batch(agent) -> Batch:
    """A fixed random batch of the agent's shapes ([H+1, B, obs], [H, B, A], [H, B] x 2)."""
    cfg, O, A = agent.cfg, agent.spec.obs_dim, agent.spec.action_dim
    B, H = cfg.batch_size, cfg.horizon
    rng = np.random.default_rng(0)
    return Batch(jnp.asarray(rng.normal(size=(H + 1, B, O)), jnp.float32),
                 jnp.asarray(rng.uniform(-1, 1, size=(H, B, A)), jnp.float32),
                 jnp.asarray(rng.normal(size=(H, B)), jnp.float32), jnp.zeros((H, B), jnp.float32))


def bench_updates(agent, *, n_updates, repeats):
    """(seconds per update, compile seconds): a jitted lax.scan of ``n_updates`` updates
    (world model + policy + target Qs, spec §5.2) on a fixed batch."""
    wm, batch = agent.wm, fixed_batch(agent)
    st = init_agent_state(wm, jax.random.PRNGKey(0))

    def many_updates(s, k):
        return jax.lax.scan(lambda s, k: (update(wm, s, batch, agent.gamma, k)[0], None), s,
                            jax.random.split(k, n_updates))[0]

    upd = jax.jit(many_updates)
    t = time.perf_counter(); jax.block_until_ready(upd(st, jax.random.PRNGKey(1))); compile_s = time.perf_counter() - t
    return timed(lambda: upd(st, jax.random.PRNGKey(2)), repeats) / n_updates, compile_s


def bench_plan(agent, *, repeats):
    """(seconds per planning call, compile seconds): one MPPI plan from one observation (spec §6)."""
    wm, cfg = agent.wm, agent.cfg
    O, A, H = agent.spec.obs_dim, agent.spec.action_dim, cfg.horizon
    params = init_agent_state(wm, jax.random.PRNGKey(0)).params
    p = jax.jit(lambda params, k: plan(wm, params, jnp.zeros(O, jnp.float32), jnp.zeros((H, A), jnp.float32),
                                       jnp.asarray(False), False, agent.gamma, k))
    t = time.perf_counter(); jax.block_until_ready(p(params, jax.random.PRNGKey(0))); compile_s = time.perf_counter() - t
    return timed(lambda: p(params, jax.random.PRNGKey(3)), repeats), compile_s


def _compile_total(agent, name: str) -> float:
    rec = agent.compile_seconds.get(name, {})
    return float(rec.get("trace_lower_s", 0.0) + rec.get("compile_s", 0.0))


def bench_train(agent, *, seeds, n_ticks):
    """(agent steps/s over all seeds, compile seconds of the training chunk for this seed
    count): whole training ticks (plan, env step, replay write, one update) after the seed
    phase, ``seeds`` vmapped."""
    seeds = list(seeds)
    state = agent.init(seeds, 10 * agent.episode_length)
    chunk = agent._chunk()
    before = _compile_total(agent, "chunk")
    T = agent.episode_length
    burst_tick = -(-agent.seed_steps // agent.n_envs)
    # one random episode per env fills the replay (ticks 0..T, the call that compiles); then
    # jump past the burst to a tick in the same phase of the episode (tick % T == 1) and time
    # training ticks alone, after one warm-up call
    state = chunk(state, jnp.int32(0), jnp.int32(T + 1))
    compile_s = _compile_total(agent, "chunk") - before
    start = (burst_tick // T + 1) * T + 1
    state = chunk(state, jnp.int32(start), jnp.int32(1)); jax.block_until_ready(state)
    t = time.perf_counter(); state = chunk(state, jnp.int32(start + 1), jnp.int32(n_ticks)); jax.block_until_ready(state)
    dt_tick = (time.perf_counter() - t) / n_ticks
    return agent.n_envs * len(seeds) / dt_tick, compile_s


def bench(name, env_id, agent_kwargs, *, repeats, n_updates, n_ticks, train_seeds=1):
    agent = TDMPC2(env_id, **agent_kwargs)
    cfg = agent.cfg
    O, A = agent.spec.obs_dim, agent.spec.action_dim
    dt_upd, upd_compile = bench_updates(agent, n_updates=n_updates, repeats=repeats)
    dt_plan, plan_compile = bench_plan(agent, repeats=repeats)
    steps_per_s, chunk_compile = bench_train(agent, seeds=range(train_seeds), n_ticks=n_ticks)

    f_upd = flops.update_flops(cfg, O, A)
    f_plan = flops.plan_flops(cfg, O, A)
    res = {
        "name": name, "env_id": env_id, "agent_kwargs": agent_kwargs, "obs_dim": O, "action_dim": A,
        "batch_size": cfg.batch_size, "num_samples": cfg.num_samples, "iterations": cfg.iterations,
        "backend": jax.default_backend(), "device": jax.devices()[0].device_kind,
        "updates_per_s": 1.0 / dt_upd, "update_ms": dt_upd * 1e3,
        "update_gflops_counted": f_upd / 1e9, "update_gflop_per_s": f_upd / dt_upd / 1e9,
        "plan_ms": dt_plan * 1e3, "plan_gflops_counted": f_plan / 1e9, "plan_gflop_per_s": f_plan / dt_plan / 1e9,
        "train_agent_steps_per_s": steps_per_s, "train_seeds": train_seeds,
        "train_gflop_per_s": (f_upd + f_plan) * steps_per_s / 1e9,
        "compile_s": {"updates": upd_compile, "plan": plan_compile, "train_chunk": chunk_compile},
    }
    print(f"{name:>12}: {res['updates_per_s']:7.2f} updates/s ({res['update_gflop_per_s']:6.1f} GFLOP/s), "
          f"plan {res['plan_ms']:7.1f} ms ({res['plan_gflop_per_s']:6.1f} GFLOP/s), "
          f"train {steps_per_s:7.1f} agent steps/s ({res['train_gflop_per_s']:6.1f} GFLOP/s)", flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["demo", "size1", "size5"], nargs="*")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    paper_planner = dict(batch_size=256)  # every planner setting at its paper default
    cases = {
        "demo": ("Pendulum-v1", demo_agent_kwargs(), dict(n_updates=50, n_ticks=100, train_seeds=2)),
        "size1": ("Pendulum-v1", dict(model_size=1, **paper_planner), dict(n_updates=10, n_ticks=10)),
        "size5": ("Pendulum-v1", dict(model_size=5, **paper_planner), dict(n_updates=5, n_ticks=5)),
    }
    results = []
    for name in args.only or list(cases):
        env_id, kw, sizes = cases[name]
        results.append(bench(name, env_id, kw, repeats=args.repeats, **sizes))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
