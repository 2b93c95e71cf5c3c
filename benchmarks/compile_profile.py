"""Where compile time goes: trace/lower and XLA-compile seconds of each program of a run and
of its components, from a cold cache (the persistent compilation cache is disabled here).

    python benchmarks/compile_profile.py                     # the demo's Pendulum agent
    python benchmarks/compile_profile.py --env CartpoleBalance --action-repeat 2
    python benchmarks/compile_profile.py --model-size 5 --paper-planner

Programs (as a run compiles them): ``init`` (initial state), ``chunk`` (the training program:
ticks of act + env step + replay + updates, seeds vmapped), ``eval`` (evaluation episodes).
Components, each compiled on its own at the shapes the chunk uses (one seed): ``update`` (one
gradient update on a batch), ``plan`` (one MPPI call per env), ``env_step`` (one env step per
env), ``env_reset`` (one env reset per env), ``eval_episode`` (one evaluation episode). A
component's seconds are not a share of the chunk's (XLA compiles the whole program at once),
but they say which part is large; so do the operation counts of each lowered program (``ops``:
StableHLO operations, ``dots``, ``whiles``), which do not depend on the machine's load.
Prints a table and, with ``--json``, writes the numbers to a file.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import time

DEMO = dict(model_size=1, enc_dim=128, mlp_dim=128, latent_dim=64, batch_size=64, num_samples=64, num_elites=8,
            num_pi_trajs=4, iterations=2)


_OP = re.compile(r'= "?(stablehlo\.[a-z_]+)')


def op_counts(lowered) -> dict:
    """The lowered program's size: ``ops`` (StableHLO operations, every nested region's
    counted: what XLA compiles and the executable holds code for), ``dots`` (its products),
    ``whiles`` (its loops, each body counted once)."""
    ops = collections.Counter(_OP.findall(lowered.as_text()))
    return {"ops": int(sum(ops.values())), "dots": int(ops["stablehlo.dot_general"]), "whiles": int(ops["stablehlo.while"])}


def timed(fn, *args):
    t0 = time.perf_counter()
    lowered = fn.lower(*args)
    t1 = time.perf_counter()
    lowered.compile()
    t2 = time.perf_counter()
    return {"trace_lower_s": t1 - t0, "compile_s": t2 - t1, **op_counts(lowered)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="Pendulum-v1")
    p.add_argument("--action-repeat", type=int, default=None)
    p.add_argument("--model-size", type=int, default=None, help="a preset with the paper's widths (default: the demo's)")
    p.add_argument("--paper-planner", action="store_true", help="the paper's planner sizes instead of the demo's")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--n-envs", type=int, default=1)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--json", default=None, help="also write the numbers to this file")
    args = p.parse_args(argv)

    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    import jax.numpy as jnp

    from tdmpc2core import TDMPC2
    from tdmpc2core.agents import online
    from tdmpc2core.agents import replay as rp
    from tdmpc2core.model.planner import plan
    from tdmpc2core.model.update import update

    kw = dict(DEMO)
    if args.model_size is not None:
        kw = {"model_size": args.model_size, "batch_size": 256}
    if args.paper_planner:
        for k in ("num_samples", "num_elites", "num_pi_trajs", "iterations"):
            kw.pop(k, None)
    agent = TDMPC2(args.env, n_envs=args.n_envs, action_repeat=args.action_repeat, **kw)
    cfg, n = agent.cfg, agent.n_envs
    seeds = list(range(args.seeds))
    out = {"config": {"env": args.env, "action_repeat": agent.action_repeat, "n_envs": n, "seeds": args.seeds,
                      **{k: getattr(cfg, k) for k in ("model_size", "enc_dim", "mlp_dim", "latent_dim", "batch_size",
                                                      "num_samples", "num_elites", "num_pi_trajs", "iterations",
                                                      "horizon", "num_q")}},
           "jax": jax.__version__, "programs": {}, "components": {}}

    t0 = time.perf_counter()
    state = agent.init(seeds, 10 * agent.episode_length)
    out["programs"]["init (incl. one run)"] = {"trace_lower_s": 0.0, "compile_s": time.perf_counter() - t0}
    out["programs"]["chunk"] = timed(agent._chunk(), state, jnp.int32(0), jnp.int32(1))
    fn = online.make_eval_fn(agent, args.eval_episodes)
    keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds])
    out["programs"]["eval"] = timed(fn, state.agent.params, keys)

    one = jax.tree_util.tree_map(lambda x: x[0], state)
    batch = rp.sample(one.replay, jax.random.PRNGKey(0), cfg.batch_size, cfg.horizon)
    out["components"]["update"] = timed(jax.jit(lambda s, b, k: update(agent.wm, s, b, agent.gamma, k)),
                                        one.agent, batch, jax.random.PRNGKey(1))
    plan_fn = jax.jit(jax.vmap(lambda o, m, t, k: plan(agent.wm, one.agent.params, o, m, t, False, agent.gamma, k)))
    out["components"]["plan"] = timed(plan_fn, one.obs, one.prev_mean, one.ep_t == 0, jax.random.split(jax.random.PRNGKey(2), n))
    step_fn = jax.jit(jax.vmap(agent.env.step))
    out["components"]["env_step"] = timed(step_fn, one.env_state, jnp.zeros((n, agent.spec.action_dim)),
                                          jax.random.split(jax.random.PRNGKey(3), n))
    reset_fn = jax.jit(jax.vmap(agent.env.reset))
    out["components"]["env_reset"] = timed(reset_fn, jax.random.split(jax.random.PRNGKey(3), n))
    ev1 = jax.jit(lambda p, k: online.eval_episode(
        agent.env, lambda o, m, t0_, kk: plan(agent.wm, p, o, m, t0_, True, agent.gamma, kk),
        agent.episode_length, cfg.horizon, agent.spec.action_dim, k))
    out["components"]["eval_episode"] = timed(ev1, one.agent.params, jax.random.PRNGKey(4))

    print(f"jax {jax.__version__}; {args.env}, seeds {args.seeds}, n_envs {n}; " +
          ", ".join(f"{k}={v}" for k, v in out["config"].items() if k not in ("env", "seeds", "n_envs")))
    print(f"{'':24s} {'trace+lower s':>14s} {'compile s':>10s} {'total s':>8s} {'ops':>7s} {'dots':>5s} {'whiles':>6s}")
    for group in ("programs", "components"):
        for name, r in out[group].items():
            print(f"{group[:-1] + ' ' + name:24s} {r['trace_lower_s']:14.1f} {r['compile_s']:10.1f} "
                  f"{r['trace_lower_s'] + r['compile_s']:8.1f} {r.get('ops', ''):>7} {r.get('dots', ''):>5} "
                  f"{r.get('whiles', ''):>6}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
