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

The update's stages (named only on request, ``--parts update_td ...``; not in the default
list): cumulative prefixes of :func:`tdmpc2core.model.update.update` (spec §5.2's order), each
the library's own functions on the same fixed batch, so that the differences say where the
update's time goes: ``update_td`` (the TD targets: encoder, policy and target-Q pair on the next
observations), ``update_wm_fwd`` (+ the world-model loss forward: latent rollout, reward, Qs),
``update_wm_grad`` (+ its backward pass), ``update_wm_step`` (+ the global-norm clip and the Adam
step of the world model); ``update`` minus ``update_wm_step`` is the policy step and the
target-Q average. ``--profile DIR`` also records a device trace (``jax.profiler``; TensorBoard's
profile plugin or xprof read it) of one timed call of each part measured alone.

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
#: cumulative prefixes of the update (module docstring); measured only when named
UPDATE_STAGES = ("update_td", "update_wm_fwd", "update_wm_grad", "update_wm_step")


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
    needs_state = not only or {"plan", "update", *UPDATE_STAGES} & set(only)
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
    parts += [Part(name, lambda c, n, f=fn: fori(lambda cc, i: _stage_body(f, cc, i), c, n),
                   lambda c, f=fn: jax.vmap(lambda st, k: f(st, k)[1])(c[0], c[1]), (rs.agent, keys, jnp.zeros((S,))))
              for name, fn in update_stages(agent, batch).items() if name in (only or ())]
    return [p for p in parts if not only or p.name in only]


def _stage_body(fn, carry, i):
    """One call of an update stage per seed inside the timing loop: the state it returns is
    carried (a stage that steps the optimizer changes the next call's parameters, as the update
    does) and its scalar summed, so that nothing it computes is dead code."""
    import jax

    st, key, acc = carry
    st, x = jax.vmap(lambda s_, k: fn(s_, jax.random.fold_in(k, i)))(st, key)
    return st, key, acc + x


def update_stages(agent, batch) -> dict:
    """name -> ``fn(agent_state, key) -> (agent_state, scalar)`` for one seed: the cumulative
    prefixes of :func:`tdmpc2core.model.update.update` (module docstring), with its key splits,
    its functions and its optimizers (single-task, no injected draws)."""
    import jax
    import jax.numpy as jnp
    import optax

    from tdmpc2core.model import update as U

    wm, cfg, gamma = agent.wm, agent.cfg, agent.gamma

    def targets(st, key):
        k_td, k_drop, _ = jax.random.split(key, 3)
        td, next_z = U.td_targets(wm, st.params, st.target_qs, batch, gamma, k_td)
        return td, next_z, k_drop

    def td_only(st, key):
        td, next_z, _ = targets(st, key)
        return st, jnp.sum(td) + jnp.sum(next_z)

    def wm_fwd(st, key):
        td, next_z, k_drop = targets(st, key)
        loss, _ = U.world_model_loss(wm, U.wm_subtrees(st.params), st.params["pi"], batch, td, next_z, k_drop)
        return st, loss

    def wm_grad(st, key):
        td, next_z, k_drop = targets(st, key)
        (loss, _), g = jax.value_and_grad(U.world_model_loss, argnums=1, has_aux=True)(
            wm, U.wm_subtrees(st.params), st.params["pi"], batch, td, next_z, k_drop)
        return st, loss + wm.kernels.global_sq_norm(g)

    def wm_step(st, key):
        td, next_z, k_drop = targets(st, key)
        wm_params = U.wm_subtrees(st.params)
        (loss, _), g = jax.value_and_grad(U.world_model_loss, argnums=1, has_aux=True)(
            wm, wm_params, st.params["pi"], batch, td, next_z, k_drop)
        g_sq = wm.kernels.global_sq_norm(g)
        coef = U.clip_coef(g_sq + (st.pi_grad_sq if cfg.stale_pi_grad_in_clip else 0.0), cfg.grad_clip_norm)
        g = jax.tree_util.tree_map(lambda x: x * coef, g)
        wm_tx, _ = U.make_optimizers(cfg, wm.kernels)
        upd, opt = wm_tx.update(g, st.wm_opt_state, wm_params)
        wm_params = optax.apply_updates(wm_params, upd)
        return st._replace(params=dict(st.params, **wm_params), wm_opt_state=opt), loss

    return {"update_td": td_only, "update_wm_fwd": wm_fwd, "update_wm_grad": wm_grad, "update_wm_step": wm_step}


def measure_parts(agent, S: int, reps: int, repeats: int, only, profile=None, on_part=None) -> dict:
    """Each part of ``only`` timed alone; ``on_part(results so far)`` after each one (the caller
    writes them, so a call cut short by its time limit keeps the parts it finished)."""
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
        if profile:
            where = Path(profile) / f"{part.name}-{S}"
            with jax.profiler.trace(str(where)):
                _block(compiled(carry, n))
            hlo = compiled.as_text()
            (where / "program.hlo.txt").write_text(hlo)  # what the trace's op names are
            top = trace_ops(where)
            described = hlo_ops(hlo, [o["op"] for o in top.get("top", [])])
            for o in top.get("top", []):
                o.update(described.get(o["op"], {}))
        cost = _cost(jax.jit(part.single).lower(part.carry))
        cost_loop = _cost(compiled)  # the compiled loop: its body counted once (or per trip, by backend)
        out[part.name] = {"seconds_per_call": sec, "trace_lower_s": t1 - t0, "compile_s": t2 - t1,
                          "while_lowered": _count_while(lowered.as_text(dialect="hlo")),
                          "while_compiled": _count_while(compiled.as_text()), "cost": cost,
                          "cost_compiled_loop": cost_loop}
        if profile:
            out[part.name]["profile"] = {"dir": str(where), "calls_traced": 1, "reps_per_call": reps, **top}
        print("PARTIAL " + json.dumps({"seeds": S, "part": part.name, **out[part.name]}), flush=True)
        if on_part is not None:
            on_part(out)
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
    measured = {p for r in res["seeds"].values() for p in r}
    for part in PARTS + tuple(p for p in UPDATE_STAGES if p in measured):
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
    if measured & set(UPDATE_STAGES):
        lines += ["", "The update's stages (differences of the cumulative prefixes, ms per call):", "",
                  "| stage | " + " | ".join(f"{s} seed{'s' if int(s) > 1 else ''}" for s in res["seeds"]) + " |",
                  "|---|" + "---|" * len(res["seeds"])]
        for name, hi, lo in STAGE_ROWS:
            cells = []
            for s in res["seeds"]:
                r = res["seeds"][s]
                if hi in r and (lo is None or lo in r):
                    d = r[hi]["seconds_per_call"] - (r[lo]["seconds_per_call"] if lo else 0.0)
                    cells.append(f"{d * 1e3:.3f}")
                else:
                    cells.append("")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for s_ in res["seeds"]:
        for part, r in res["seeds"][s_].items():
            prof = r.get("profile") if isinstance(r, dict) else None
            if not prof or not prof.get("top"):
                continue
            lines += ["", f"Profile of {part}, {s_} seed(s), one call of {prof['reps_per_call']} repetitions "
                      f"({prof['source']}; {prof['op_us_total'] / 1e3:.3f} ms of ops): by kind "
                      + ", ".join(f"{k} {v / prof['op_us_total']:.0%}" for k, v in list(prof["kinds"].items())[:6]),
                      "", "| op | kind | ms | count | share |", "|---|---|---|---|---|"]
            lines += [f"| {o['op']} | {o['kind']} | {o['us'] / 1e3:.3f} | {o['count']} | {o['share']:.1%} |"
                      for o in prof["top"][:10]]
    lines.append("")
    lines.append(f"Model FLOPs per call, one seed: plan {mf['plan'] / 1e9:.2f} G, update {mf['update'] / 1e9:.2f} G "
                 f"(the reference's count, all K Q members: {mf['reference_plan'] / 1e9:.2f} G and "
                 f"{mf['reference_update'] / 1e9:.2f} G).")
    return "\n".join(lines) + "\n"


def trace_ops(folder, top: int = 15) -> dict:
    """The ops of a ``jax.profiler`` trace under ``folder`` (its ``*.trace.json.gz``), by time:
    on an accelerator the device's op timeline (processes named ``/device:...``), on a CPU the
    XLA executor threads (``tf_XLA...``). Returns ``{"source", "op_us_total", "top": [{"op",
    "kind" (the name before its number: fusion, convolution, copy, ...), "us" (self time: less the
    ops nested in it), "count", "share"}],
    "kinds": {kind: us}}``; ``{"error": ...}`` when the folder has no trace."""
    import collections
    import gzip

    files = sorted(Path(folder).rglob("*.trace.json.gz"))
    if not files:
        return {"error": f"no *.trace.json.gz under {folder}"}
    events = json.loads(gzip.open(files[-1]).read())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    device = {pid for pid, name in procs.items() if name.startswith("/device:")}
    if device:  # the device's "XLA Ops" line(s), where a trace has them; else every device line
        ops_lines = {k for k, v in threads.items() if k[0] in device and "XLA Ops" in v}
        keep = (lambda e: (e["pid"], e["tid"]) in ops_lines) if ops_lines else (lambda e: e["pid"] in device)
        source = "device: " + ", ".join(sorted(procs[p] for p in device))
    else:
        # "end: <op>" events mark where XLA:CPU's asynchronous ops finish (not ops of the program)
        keep = lambda e: (threads.get((e["pid"], e["tid"]), "").startswith("tf_XLA") and not e["name"].startswith("$")
                          and not e["name"].startswith("end: "))
        source = "host: XLA executor threads"
    per_op, count = collections.defaultdict(float), collections.Counter()
    lines = collections.defaultdict(list)  # runtime functions (C++ names, "a::b") are not ops
    for e in events:
        if e.get("ph") == "X" and keep(e) and "::" not in e["name"]:
            lines[(e["pid"], e["tid"])].append(e)
    for evs in lines.values():  # self time: an op's duration less the ops nested in it (a while's body)
        evs.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur", 0.0))))
        stack = []
        for e in evs:
            t0, d = float(e["ts"]), float(e.get("dur", 0.0))
            while stack and t0 >= stack[-1][0] + stack[-1][1]:
                stack.pop()
            if stack:
                per_op[stack[-1][2]] -= d
            per_op[e["name"]] += d
            count[e["name"]] += 1
            stack.append((t0, d, e["name"]))
    total = sum(per_op.values())
    kinds = collections.defaultdict(float)
    for name, us in per_op.items():
        kinds[name.split(".")[0]] += us
    rows = [{"op": n, "kind": n.split(".")[0], "us": round(us, 3), "count": count[n],
             "share": round(us / total, 4) if total else None}
            for n, us in sorted(per_op.items(), key=lambda kv: -kv[1])[:top]]
    return {"source": source, "op_us_total": round(total, 3), "top": rows,
            "kinds": {k: round(v, 3) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])}}


def hlo_ops(text: str, names) -> dict:
    """What the compiled program ``text`` (``compiled.as_text()``) says of each op in ``names``:
    ``{name: {"shape": its result type, "op_name": the JAX source op of its metadata (for a
    fusion, its root's)}}``, so that a profile's ops can be read without the program at hand
    (only the JSON comes back from the accelerator machine). Names not found are left out."""
    import re

    want, out = set(names), {}
    for line in text.splitlines():
        m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (\S+(?: \S+)*?) [\w\-]+\(", line)
        if not m or m.group(1) not in want:
            continue
        op_name = re.search(r'op_name="([^"]*)"', line)
        out[m.group(1)] = {"shape": m.group(2)[:120], "op_name": op_name.group(1)[-200:] if op_name else None}
    return out


#: the update's stages as differences of its measured prefixes: (row, part, minus part)
STAGE_ROWS = (("TD targets", "update_td", None), ("world-model loss, forward", "update_wm_fwd", "update_td"),
              ("world-model loss, backward", "update_wm_grad", "update_wm_fwd"),
              ("clip + Adam (world model)", "update_wm_step", "update_wm_grad"),
              ("policy step + target Qs", "update", "update_wm_step"))


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
    ap.add_argument("--parts", nargs="+", choices=PARTS + UPDATE_STAGES, default=list(PARTS),
                    help="parts to measure (default: " + " ".join(PARTS) + "; the update's stages only when named)")
    ap.add_argument("--profile", default=None, metavar="DIR",
                    help="also record a device trace of one call of each part measured alone (jax.profiler)")
    ap.add_argument("--reps", type=int, default=20, help="repetitions of a part inside one call")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls (median)")
    ap.add_argument("--ticks", type=int, default=50, help="ticks per timed call of the real training program")
    ap.add_argument("--eval-episodes", type=int, default=10)
    ap.add_argument("--agent-json", default="{}", help="extra hyperparameters (JSON)")
    ap.add_argument("--reduced", action="store_true", help="the test suite's CPU form (seconds)")
    ap.add_argument("--out", default=None, help="JSON results (default benchmarks/runs/tick_parts-<date>.json)")
    ap.add_argument("--commit", default=None,
                    help="the code's commit, recorded in the results (default: this work tree's, when it is one)")
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
    from tdmpc2core.io.provenance import short_commit

    res = {"meta": {"date": date, "commit": args.commit or short_commit(ROOT), "device": dev.device_kind,
                    "backend": jax.default_backend(), "jax": jax.__version__,
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
            r.update(measure_parts(agent, S, args.reps, args.repeats, alone, profile=args.profile,
                                   on_part=lambda done: (r.update(done), write(out, res))))
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
