"""Where a training tick's time goes: each part of the tick timed alone, seeds vmapped.

    python benchmarks/tick_parts.py                                  # CheetahRun, size 5, 1 8 16 seeds
    python benchmarks/tick_parts.py --seeds 1 16 --precision high --out benchmarks/runs/parts.json
    python benchmarks/tick_parts.py --reduced                        # the test suite's CPU form

A tick (tdmpc2core/agents/online.py) is: plan (MPPI, spec §6), env step (action repeat inside),
replay write, then one update (spec §5.2) on a batch sampled from the replay (spec §9). Each
part here is the library's own function, vmapped over ``S`` seeds as the training program
vmaps it, and run ``--reps`` times inside one jitted ``lax.fori_loop`` whose trip count is an
argument (so XLA cannot unroll it, and one call's dispatch is spread over the repetitions):

- ``plan``: :func:`tdmpc2core.model.planner.plan` in training mode (warm start carried);
- ``env_step``: the env adapter's ``step`` (Playground/MJX for CheetahRun: ``action_repeat``
  physics steps);
- ``replay_write``: :func:`tdmpc2core.agents.replay.write_step` of one row;
- ``replay_sample``: :func:`tdmpc2core.agents.replay.sample` of a batch (B slices of H+1 rows)
  from a full replay;
- ``update``: :func:`tdmpc2core.model.update.update` on a fixed batch;
- ``tick``: the real training program (the agent's chunk: whole ticks after the seed phase,
  the burst done), as ``benchmarks/gpu.py`` times it;
- ``eval``: the real evaluation program (``--eval-episodes`` episodes of T agent steps,
  planner in eval mode, vmapped over episodes and seeds), per call.

For each part and seed count: seconds per call (median of ``--repeats`` timed calls, after the
compiling call), the compile seconds (trace+lower, XLA compile), XLA's cost analysis of one call
(FLOPs and bytes accessed of the part without the loop, from the lowered program: loops are
counted once, so ``plan``'s iterations are multiplied in by the model count, ``flops_model``),
achieved TFLOP/s against that count, and the number of ``while`` loops left in the compiled
program (fewer than in the lowered one: XLA unrolled a loop). The sum of the parts beside the
real tick shows what the fused program saves or loses.

Results: ``--out`` (JSON, rewritten after every part so a run cut short keeps what it reached)
and a Markdown table beside it. Device, JAX version, precision and kernels are recorded.
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
REDUCED = dict(env="Pendulum-v1", size=1, seeds=[1, 2], reps=2, repeats=1, ticks=2, eval_episodes=1,
               agent=dict(batch_size=16, num_samples=16, num_elites=2, num_pi_trajs=2, iterations=2,
                          enc_dim=16, mlp_dim=16, latent_dim=16))
PARTS = ("plan", "env_step", "replay_write", "replay_sample", "update", "tick", "eval")


def _block(x):
    import jax
    return jax.block_until_ready(x)


def _median_seconds(fn, repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        _block(fn())
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def _count_while(text: str) -> int:
    return sum(1 for line in text.splitlines() if " while(" in line)


def _cost(lowered) -> dict:
    try:
        ca = lowered.cost_analysis()
    except Exception as e:  # a backend without a cost model
        return {"error": f"{type(e).__name__}: {e}"}
    ca = ca[0] if isinstance(ca, (list, tuple)) and ca else ca
    if not ca:
        return {"error": "no cost analysis from this backend's lowering"}
    return {"flops": float(ca.get("flops", 0.0)), "bytes_accessed": float(ca.get("bytes accessed", 0.0))}


class Part:
    """One part: ``looped(carry, n)`` runs it n times (jitted, n dynamic); ``single(carry)`` is
    one call (lowered only, for the cost analysis)."""

    def __init__(self, name, looped, single, carry, per_call_units=1):
        self.name, self.looped, self.single, self.carry = name, looped, single, carry
        self.per_call_units = per_call_units


def build_parts(agent, S: int, only=()):
    """The parts of one tick for ``S`` seeds (each a :class:`Part`; those in ``only``, or all)."""
    import jax
    import jax.numpy as jnp

    from tdmpc2core.agents import replay as rp
    from tdmpc2core.model.planner import plan
    from tdmpc2core.model.update import update

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import speed  # noqa: E402

    cfg, env, wm = agent.cfg, agent.env, agent.wm
    O, A, H, T = env.spec.obs_dim, env.spec.action_dim, cfg.horizon, agent.episode_length
    run_steps = 10 * T
    needs_state = not only or {"plan", "update"} & set(only)
    rs = agent.init(list(range(S)), run_steps) if needs_state else None  # params, optimizer states
    params = rs.agent.params if needs_state else None
    keys = jax.vmap(lambda i: jax.random.PRNGKey(i))(jnp.arange(S))

    def fori(body, carry, n):
        return jax.lax.fori_loop(0, n, lambda i, c: body(c, i), carry)

    # plan: the tick's call (one env per seed), warm start carried
    def plan_one(p, obs, mean, key):
        return plan(wm, p, obs, mean, jnp.asarray(False), False, agent.gamma, key)

    def plan_body(c, i):
        p, obs, mean, key = c
        k = jax.vmap(lambda kk: jax.random.fold_in(kk, i))(key)
        a, mean = jax.vmap(plan_one)(p, obs, mean, k)
        return p, obs + 0.0 * a[:, :1].sum(), mean, key

    obs0 = jnp.zeros((S, O), jnp.float32)
    mean0 = jnp.zeros((S, H, A), jnp.float32)
    plan_part = Part("plan", lambda c, n: fori(plan_body, c, n),
                     lambda c: jax.vmap(plan_one)(c[0], c[1], c[2], c[3]), (params, obs0, mean0, keys))

    # env step: one env per seed, the same action each time
    env_state = jax.vmap(env.reset)(keys)[0] if not only or "env_step" in only else None

    def step_body(c, i):
        st, key = c
        act = jnp.clip(jnp.sin(i + jnp.arange(A, dtype=jnp.float32)), -1, 1)
        st, out = jax.vmap(lambda s, k: env.step(s, act, k))(st, key)
        return st, key

    step_part = Part("env_step", lambda c, n: fori(step_body, c, n),
                     lambda c: jax.vmap(lambda s, k: env.step(s, jnp.zeros(A), k))(c[0], c[1]), (env_state, keys))

    # a full replay per seed: random rows, every slot committed
    from tdmpc2core.agents.online import replay_layout
    one = rp.init_replay(rp.capacity_episodes(cfg.buffer_size, run_steps, T), agent.n_envs, T, O, A,
                         **replay_layout(env.spec))
    replay = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (S,) + x.shape), one)
    k_r = jax.random.PRNGKey(7)
    shape = replay.obs.shape
    replay = replay._replace(
        obs=jax.random.normal(k_r, shape, replay.obs.dtype) if replay.obs.dtype == jnp.float32 else replay.obs,
        action=jax.random.uniform(k_r, replay.action.shape, jnp.float32, -1, 1),
        reward=jax.random.uniform(k_r, replay.reward.shape, jnp.float32),
        terminated=jnp.zeros(replay.terminated.shape, jnp.float32),
        allocated=jnp.full_like(replay.allocated, shape[1] * 10), committed=jnp.full_like(replay.committed, 10 ** 6))

    def write_body(c, i):
        rep = c
        row = jnp.full((1,), 1 + i % T, jnp.int32)
        return jax.vmap(lambda r: rp.write_step(r, row, jnp.ones((1, O)) * i, jnp.zeros((1, A)), jnp.ones((1,)),
                                                jnp.zeros((1,), bool)))(rep)

    write_part = Part("replay_write", lambda c, n: fori(write_body, c, n),
                      lambda c: write_body(c, 0), replay)

    def sample_body(c, i):
        rep, key, acc = c
        b = jax.vmap(lambda r, k: rp.sample(r, jax.random.fold_in(k, i), cfg.batch_size, H))(rep, key)
        return rep, key, acc + b.obs[:, 0, 0, 0] + b.reward[:, 0, 0]

    sample_part = Part("replay_sample", lambda c, n: fori(sample_body, c, n),
                       lambda c: jax.vmap(lambda r, k: rp.sample(r, k, cfg.batch_size, H))(c[0], c[1]),
                       (replay, keys, jnp.zeros((S,), jnp.float32)))

    batch = speed.fixed_batch(agent)

    def update_body(c, i):
        st, key = c
        st, _ = jax.vmap(lambda s, k: update(wm, s, batch, agent.gamma, jax.random.fold_in(k, i)))(st, key)
        return st, key

    update_part = Part("update", lambda c, n: fori(update_body, c, n),
                       lambda c: jax.vmap(lambda s, k: update(wm, s, batch, agent.gamma, k))(c[0], c[1]),
                       (rs.agent if needs_state else None, keys))
    parts = [plan_part, step_part, write_part, sample_part, update_part]
    return [p for p in parts if not only or p.name in only]


def measure_parts(agent, S: int, reps: int, repeats: int, only) -> dict:
    import jax
    import jax.numpy as jnp

    out = {}
    for part in build_parts(agent, S, only):
        looped = jax.jit(part.looped)
        n = jnp.int32(reps)
        t0 = time.perf_counter()
        lowered = looped.lower(part.carry, n)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        carry = part.carry
        _block(compiled(carry, n))  # warm-up
        sec = _median_seconds(lambda: compiled(carry, n), repeats) / reps
        cost = _cost(jax.jit(part.single).lower(part.carry))
        cost_loop = _cost(compiled)  # the compiled loop: its body counted once (or per trip, by backend)
        out[part.name] = {"seconds_per_call": sec, "trace_lower_s": t1 - t0, "compile_s": t2 - t1,
                          "while_lowered": _count_while(lowered.as_text(dialect="hlo")),
                          "while_compiled": _count_while(compiled.as_text()), "cost": cost,
                          "cost_compiled_loop": cost_loop}
        print("PARTIAL " + json.dumps({"seeds": S, "part": part.name, **out[part.name]}), flush=True)
    return out


def measure_tick(agent, S: int, ticks: int, repeats: int) -> dict:
    """Whole training ticks after the seed phase (the agent's chunk program), seconds per tick."""
    import jax
    import jax.numpy as jnp

    state = agent.init(list(range(S)), 10 * agent.episode_length)
    chunk = agent._chunk()
    T = agent.episode_length
    burst = -(-agent.seed_steps // agent.n_envs)
    t0 = time.perf_counter()
    state = chunk(state, jnp.int32(0), jnp.int32(T + 1))  # compiles; one random episode fills the replay
    _block(state)
    first = time.perf_counter() - t0
    rec = agent.compile_seconds.get("chunk", {})
    start = (burst // T + 1) * T + 1
    state = chunk(state, jnp.int32(start), jnp.int32(1))
    _block(state)
    times = []
    tick = start + 1
    for _ in range(repeats):
        t = time.perf_counter()
        state = chunk(state, jnp.int32(tick), jnp.int32(ticks))
        _block(state)
        times.append((time.perf_counter() - t) / ticks)
        tick += ticks
    sec = statistics.median(times)
    res = {"seconds_per_call": sec, "agent_steps_per_s": S * agent.n_envs / sec,
           "trace_lower_s": rec.get("trace_lower_s"), "compile_s": rec.get("compile_s"), "first_call_s": first}
    print("PARTIAL " + json.dumps({"seeds": S, "part": "tick", **res}), flush=True)
    return res


def measure_eval(agent, S: int, episodes: int) -> dict:
    import jax

    from tdmpc2core.agents import online

    params = agent.init(list(range(S)), 10 * agent.episode_length).agent.params
    timings: dict = {}
    fn = online.make_eval_fn(agent, episodes, timings)
    keys = jax.vmap(jax.random.PRNGKey)(jax.numpy.arange(S))
    t0 = time.perf_counter()
    _block(fn(params, keys))
    first = time.perf_counter() - t0
    t = time.perf_counter()
    _block(fn(params, keys))
    sec = time.perf_counter() - t
    res = {"seconds_per_call": sec, "episodes": episodes, "agent_steps": episodes * agent.episode_length,
           "trace_lower_s": timings["eval"]["trace_lower_s"], "compile_s": timings["eval"]["compile_s"],
           "first_call_s": first}
    print("PARTIAL " + json.dumps({"seeds": S, "part": "eval", **res}), flush=True)
    return res


def model_flops(agent) -> dict:
    """FLOPs of one call of each part as this implementation computes them (the random Q pair
    only; tdmpc2core/model/flops.py counts the reference's K members)."""
    from tdmpc2core.model import flops

    cfg, O, A = agent.cfg, agent.spec.obs_dim, agent.spec.action_dim
    f = flops.module_flops(cfg, O, A)
    N, P, H, B = cfg.num_samples, cfg.num_pi_trajs, cfg.horizon, cfg.batch_size
    K = cfg.num_q
    plan = (f["encoder"] + P * (H * f["pi"] + (H - 1) * f["dynamics"])
            + cfg.iterations * (N * H * (f["reward"] + f["dynamics"]) + N * (f["pi"] + 2 * f["q"])))
    td = H * B * (f["encoder"] + f["pi"] + 2 * f["q"])
    wm = 3 * (B * f["encoder"] + H * B * (f["dynamics"] + K * f["q"] + f["reward"]))
    pi = 3 * (H + 1) * B * f["pi"] + 2 * (H + 1) * B * 2 * f["q"]
    return {"plan": plan, "update": td + wm + pi, "reference_plan": flops.plan_flops(cfg, O, A),
            "reference_update": flops.update_flops(cfg, O, A)}


def markdown(res: dict) -> str:
    m = res["meta"]
    lines = [f"{m['device']} ({m['backend']}), jax {m['jax']}, {m['date']}; {m['env']}, model size {m['model_size']}, "
             f"batch {m['batch_size']}, matmul precision {m['precision']}, kernels {m['kernels']}", "",
             "| part | " + " | ".join(f"{s} seed{'s' if int(s) > 1 else ''}: ms/call (TFLOP/s)" for s in res["seeds"])
             + " | compile s (" + ", ".join(res["seeds"]) + ") |",
             "|---|" + "---|" * (len(res["seeds"]) + 1)]
    mf = m["model_flops"]
    for part in PARTS:
        cells, comp = [], []
        for s in res["seeds"]:
            r = res["seeds"][s].get(part)
            if not r:
                cells.append("")
                comp.append("-")
                continue
            tf = ""
            if part in ("plan", "update"):
                tf = f" ({mf[part] * int(s) / r['seconds_per_call'] / 1e12:.1f})"
            cells.append(f"{r['seconds_per_call'] * 1e3:.3f}{tf}")
            c = (r.get("trace_lower_s") or 0) + (r.get("compile_s") or 0)
            comp.append(f"{c:.0f}")
        lines.append(f"| {part} | " + " | ".join(cells) + " | " + " / ".join(comp) + " |")
    sums = []
    for s in res["seeds"]:
        r = res["seeds"][s]
        if all(p in r for p in ("plan", "env_step", "replay_write", "replay_sample", "update")):
            sums.append(f"{sum(r[p]['seconds_per_call'] for p in ('plan', 'env_step', 'replay_write', 'replay_sample', 'update')) * 1e3:.3f}")
        else:
            sums.append("")
    lines.append("| sum of the parts but eval | " + " | ".join(sums) + " | |")
    steps = [f"{res['seeds'][s]['tick']['agent_steps_per_s']:.0f}" if "tick" in res["seeds"][s] else ""
             for s in res["seeds"]]
    lines.append("| agent steps/s (tick, all seeds) | " + " | ".join(steps) + " | |")
    lines.append("")
    lines.append(f"Model FLOPs per call, one seed: plan {mf['plan'] / 1e9:.2f} G, update {mf['update'] / 1e9:.2f} G "
                 f"(the reference's count, all K Q members: {mf['reference_plan'] / 1e9:.2f} G and "
                 f"{mf['reference_update'] / 1e9:.2f} G).")
    return "\n".join(lines) + "\n"


def write(out: Path, res: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    for path, text in ((out, json.dumps(res, indent=1)), (out.with_suffix(".md"), markdown(res))):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="CheetahRun")
    ap.add_argument("--size", type=int, default=5, help="model size (default 5)")
    ap.add_argument("--seeds", type=int, nargs="+", help="vmapped seed counts (default 1 8 16)")
    ap.add_argument("--precision", default="highest", choices=["highest", "high", "default"],
                    help="matmul precision: the Dense layers' (configuration field) and jax_default_matmul_precision")
    ap.add_argument("--kernels", default="auto", choices=["auto", "reference", "cpu"])
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--reps", type=int, default=20, help="repetitions of a part inside one call")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls (median)")
    ap.add_argument("--ticks", type=int, default=50, help="ticks per timed call of the real training program")
    ap.add_argument("--eval-episodes", type=int, default=10)
    ap.add_argument("--agent-json", default="{}", help="extra hyperparameters (JSON)")
    ap.add_argument("--reduced", action="store_true", help="the test suite's CPU form (seconds)")
    ap.add_argument("--out", default=None, help="JSON results (default benchmarks/runs/tick_parts-<date>.json)")
    args = ap.parse_args(argv)
    agent_kwargs = json.loads(args.agent_json)
    if args.reduced:
        for k, v in REDUCED.items():
            if k != "agent" and not (k == "seeds" and args.seeds):
                setattr(args, k, v)
        agent_kwargs = dict(REDUCED["agent"], **agent_kwargs)
    args.seeds = args.seeds or [1, 8, 16]

    import jax
    import jaxlib

    jax.config.update("jax_default_matmul_precision", args.precision)
    from tdmpc2core.agents.single_task import TDMPC2
    from tdmpc2core.model import kernels as K

    agent = TDMPC2(args.env, model_size=args.size, **{"batch_size": 256, "kernels": args.kernels,
                                                      "matmul_precision": args.precision, **agent_kwargs})
    dev = jax.devices()[0]
    date = dt.date.today().isoformat()
    out = Path(args.out or ROOT / "benchmarks" / "runs" / f"tick_parts-{date}.json")
    res = {"meta": {"date": date, "device": dev.device_kind, "backend": jax.default_backend(), "jax": jax.__version__,
                    "jaxlib": jaxlib.__version__, "env": args.env, "model_size": args.size,
                    "batch_size": agent.cfg.batch_size, "precision": args.precision,
                    "kernels": K.concrete(agent.cfg.kernels), "n_envs": agent.n_envs,
                    "action_repeat": agent.action_repeat, "episode_length": agent.episode_length,
                    "planner": {k: getattr(agent.cfg, k) for k in ("horizon", "iterations", "num_samples",
                                                                  "num_elites", "num_pi_trajs")},
                    "reps": args.reps, "repeats": args.repeats, "ticks": args.ticks,
                    "model_flops": model_flops(agent), "argv": sys.argv[1:] if argv is None else list(argv)},
           "seeds": {}}
    for S in args.seeds:
        r = res["seeds"].setdefault(str(S), {})
        alone = [p for p in args.parts if p not in ("tick", "eval")]
        if alone:  # (none named: the parts are skipped, not all measured)
            r.update(measure_parts(agent, S, args.reps, args.repeats, alone))
            write(out, res)
        if "tick" in args.parts:
            r["tick"] = measure_tick(agent, S, args.ticks, args.repeats)
            write(out, res)
        if "eval" in args.parts:
            r["eval"] = measure_eval(agent, S, args.eval_episodes)
            write(out, res)
        if hasattr(dev, "memory_stats") and dev.memory_stats():
            r["peak_device_bytes"] = dev.memory_stats().get("peak_bytes_in_use")
    print(markdown(res))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
