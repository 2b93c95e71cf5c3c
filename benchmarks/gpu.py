"""GPU benchmark: what the paper's model sizes cost on one accelerator.

    python benchmarks/gpu.py                          # sizes 1 5 19 48, CheetahRun, 1 and 8 seeds
    python benchmarks/gpu.py --sizes 5 --seeds 1 8 --out benchmarks/runs/gpu.json
    python benchmarks/gpu.py --reduced                # the CPU form the test suite runs

For each model size, with the paper planner (6 iterations, 512 samples, 64 elites, 24 policy
trajectories, horizon 3; iterations + 2 on humanoid tasks) and batch 256, it measures in a
fresh process of its own (so compile times and peak memory are the size's alone):

- ``updates_per_s``: a jitted ``lax.scan`` of updates on a fixed batch (spec §5.2);
- ``plan_ms``: one MPPI planning call (spec §6);
- ``train_agent_steps_per_s``: whole training ticks after the seed phase (plan, env step,
  replay write, one update) on a MuJoCo Playground DMC task, summed over the seeds vmapped
  in one program, for each ``--seeds`` count (default one seed, and 8 seeds);
- compile seconds (trace, lower and XLA compile) of the update, plan and training programs (the
  training program once per seed count);
- peak device memory (``memory_stats()["peak_bytes_in_use"]``; None where the backend has no
  allocator statistics, e.g. the CPU);
- achieved TFLOP/s: the official algorithm's matmul FLOPs (tdmpc2core/model/flops.py, all K Q
  members where the reference evaluates them) divided by our time.

Matmul precision is set on purpose and recorded: the Dense layers run at the configuration's
``matmul_precision`` (``--matmul-precision``, default ``highest``: full float32, no TF32;
docs/deviations.md N5), and ``jax_default_matmul_precision`` (every other product) is set by
``--default-matmul-precision`` (default ``highest``, i.e. no TF32 anywhere, as 5f6fade's fp32).
``--kernels`` chooses how the networks are computed (``auto``: the reference flax/JAX kernels on
a GPU; ``cpu``: the hand-written kernels tuned for XLA:CPU, to measure them on a GPU); each row
records the concrete choice. The results go to ``--out`` (JSON) and a Markdown table
beside it (``.md``) that README's Speed section quotes. ``--reduced`` shrinks everything
(model size 1, a small planner and batch, Pendulum-v1, 2 seeds vmapped, a few calls) so the
command runs on a CPU in about a minute: ``tests/test_benchmarks.py`` runs it so it cannot rot.

Compiling dominates the benchmark's wall time on a many-core GPU host. ``--warm-jobs N`` first
runs the cases N at a time into one persistent compilation cache (their overlapping timings are
discarded, their compile seconds kept as ``compile_s_cold``), then measures them one by one, each
loading its programs; ``--warm-only --compile-cache DIR`` stops after compiling (so other work can
share that phase) and ``--cold-from`` joins its figures to the measuring run's rows.

Aims (issue: updates well ahead of the peers): model size 5, one seed, >= 500 agent steps/s
on an H200, and >= 2,000 in aggregate with 8 vmapped seeds (the official code: about
1.5 h per 1M env steps on an RTX 3090, about 93 agent steps/s).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAPER_SIZES = (1, 5, 19, 48)
AIMS = {5: {1: 500.0, 8: 2000.0}}  # model size -> {seeds: agent steps/s} (H200)
REDUCED = dict(sizes=[1], env="Pendulum-v1", seeds=[2], updates=2, ticks=2, repeats=1,
               agent=dict(batch_size=32, num_samples=32, num_elites=4, num_pi_trajs=4, iterations=2))


def measure_one(size: int, env: str, seeds, *, updates: int, ticks: int, repeats: int, agent_kwargs: dict,
                default_precision: str, kernels: str = "auto", matmul_precision: str = "highest") -> dict:
    """All figures of one model size, in this process (call it in a fresh one)."""
    import jax
    import jaxlib

    jax.config.update("jax_default_matmul_precision", default_precision)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import speed  # noqa: E402  (the shared timing functions)

    from tdmpc2core.agents.single_task import TDMPC2
    from tdmpc2core.model import flops
    from tdmpc2core.model import kernels as K
    from tdmpc2core.model.networks import count_params

    kw = {"batch_size": 256, "kernels": kernels, "matmul_precision": matmul_precision, **agent_kwargs}
    agent = TDMPC2(env, model_size=size, **kw)
    cfg, O, A = agent.cfg, agent.spec.obs_dim, agent.spec.action_dim
    f_upd, f_plan = flops.update_flops(cfg, O, A), flops.plan_flops(cfg, O, A)
    dt_upd, upd_compile = speed.bench_updates(agent, n_updates=updates, repeats=repeats)
    partial(size, updates_per_s=1.0 / dt_upd, update_tflop_per_s=f_upd / dt_upd / 1e12, update_compile_s=upd_compile)
    dt_plan, plan_compile = speed.bench_plan(agent, repeats=repeats)
    partial(size, plan_ms=dt_plan * 1e3, plan_compile_s=plan_compile)
    train = {}
    for n in seeds:
        steps_per_s, chunk_compile = speed.bench_train(agent, seeds=range(n), n_ticks=ticks)
        train[str(n)] = {"agent_steps_per_s": steps_per_s, "env_frames_per_s": steps_per_s * agent.action_repeat,
                         "tflop_per_s": (f_upd + f_plan) * steps_per_s / 1e12,
                         "compile_s": chunk_compile}
        partial(size, seeds=n, **train[str(n)])
    dev = jax.devices()[0]
    stats = dev.memory_stats() if hasattr(dev, "memory_stats") else None
    peak = None if not stats else stats.get("peak_bytes_in_use")
    params = init_params(agent)
    return {
        "model_size": size, "params": count_params(params), "env_id": env, "action_repeat": agent.action_repeat,
        "obs_dim": O, "action_dim": A,
        "planner": {k: getattr(cfg, k) for k in ("horizon", "iterations", "num_samples", "num_elites",
                                                  "num_pi_trajs")},
        "batch_size": cfg.batch_size,
        "backend": jax.default_backend(), "device": dev.device_kind,
        "jax": jax.__version__, "jaxlib": jaxlib.__version__,
        "kernels": K.concrete(cfg.kernels),
        "matmul_precision": {"dense_layers": cfg.matmul_precision,
                             "jax_default_matmul_precision": jax.config.jax_default_matmul_precision},
        "updates_per_s": 1.0 / dt_upd, "update_tflop_per_s": f_upd / dt_upd / 1e12,
        "update_gflop_counted": f_upd / 1e9,
        "plan_ms": dt_plan * 1e3, "plan_tflop_per_s": f_plan / dt_plan / 1e12, "plan_gflop_counted": f_plan / 1e9,
        "train": train,
        "compile_s": {"updates": upd_compile, "plan": plan_compile},
        "peak_device_bytes": peak,
    }


def partial(size: int, **figures) -> None:
    """One figure as soon as it is measured (a ``PARTIAL`` line on stdout), so a case cut short
    by a time limit still reports what it reached."""
    print("PARTIAL " + json.dumps({"model_size": size, **figures}), flush=True)


def init_params(agent):
    import jax

    from tdmpc2core.model.update import init_agent_state
    return init_agent_state(agent.wm, jax.random.PRNGKey(0)).params


def markdown(rows: list, meta: dict) -> str:
    """The table README's Speed section quotes."""
    seeds = sorted({int(n) for r in rows for n in r["train"]})
    head = ["model size", "kernels", "params", "updates/s", "update TFLOP/s", "plan ms"]
    head += [f"agent steps/s, {n} seed{'s' if n > 1 else ''}" for n in seeds]
    head += ["compile s (update / plan / train)", "peak memory"]
    out = [f"{meta['device']} ({meta['backend']}), jax {meta['jax']}, {meta['date']}; env {meta['env']}; "
           f"matmul precision: Dense layers {meta['matmul_precision']['dense_layers']}, "
           f"default {meta['matmul_precision']['jax_default_matmul_precision']}", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [str(r["model_size"]), r.get("kernels", "?"), f"{r['params'] / 1e6:.1f}M", f"{r['updates_per_s']:.1f}",
                 f"{r['update_tflop_per_s']:.3f}", f"{r['plan_ms']:.1f}"]
        cells += [f"{r['train'][str(n)]['agent_steps_per_s']:.1f}" if str(n) in r["train"] else "" for n in seeds]
        c = r.get("compile_s_cold") or {**r["compile_s"], "train": {n: t["compile_s"] for n, t in r["train"].items()}}
        cells.append(f"{c['updates']:.0f} / {c['plan']:.0f} / {max(c['train'].values()):.0f}")
        peak = r["peak_device_bytes"]
        cells.append("n/a (no allocator stats)" if peak is None else f"{peak / 2**30:.2f} GiB")
        out.append("| " + " | ".join(cells) + " |")
    note = next((r["compile_note"] for r in rows if "compile_note" in r), None)
    if note:
        out.append(f"\nCompile seconds: cold compiles, {note.split('compiled with ')[1]}.")
    for size, aims in AIMS.items():
        r = next((r for r in rows if r["model_size"] == size and r.get("kernels") != "cpu"), None)
        for n, aim in aims.items():
            got = None if r is None or str(n) not in r["train"] else r["train"][str(n)]["agent_steps_per_s"]
            if got is not None:
                out.append(f"\nAim, model size {size}, {n} seed(s): >= {aim:.0f} agent steps/s on an H200; "
                           f"measured {got:.1f} on {meta['device']}.")
    return "\n".join(out) + "\n"


def check_row(r: dict) -> None:
    """Every figure finite and positive (the test suite's check of the reduced run)."""
    figures = [r["updates_per_s"], r["plan_ms"], r["update_tflop_per_s"], r["compile_s"]["updates"],
               r["compile_s"]["plan"]]
    for t in r["train"].values():
        figures += [t["agent_steps_per_s"], t["tflop_per_s"], t["compile_s"]]
    bad = [x for x in figures if not (isinstance(x, (int, float)) and math.isfinite(x) and x > 0)]
    if bad:
        raise ValueError(f"model size {r['model_size']}: non-positive or non-finite figures {bad}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(PAPER_SIZES), help="model sizes (default 1 5 19 48)")
    ap.add_argument("--env", default="CheetahRun", help="env id of the training figures (default CheetahRun, "
                    "MuJoCo Playground, action repeat 2)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 8], help="vmapped seed counts (default 1 8)")
    ap.add_argument("--updates", type=int, default=20, help="updates per timed call")
    ap.add_argument("--ticks", type=int, default=50, help="training ticks per timed call")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls (median)")
    ap.add_argument("--default-matmul-precision", default="highest", choices=["highest", "high", "default",
                    "tensorfloat32", "float32", "bfloat16"],
                    help="jax_default_matmul_precision (Dense layers are always HIGHEST; default highest)")
    ap.add_argument("--kernels", nargs="+", default=["auto"], choices=["auto", "reference", "cpu"],
                    help="kernel choices, each measured for every size (default auto: the reference on a GPU)")
    ap.add_argument("--matmul-precision", default="highest", choices=["highest", "high", "default"],
                    help="the Dense layers' matmul precision (configuration field; default highest)")
    ap.add_argument("--cases", nargs="+", help="SIZE:KERNELS pairs measured in this order (instead of "
                    "every --sizes x --kernels), e.g. 5:auto 5:cpu 48:auto")
    ap.add_argument("--warm-jobs", type=int, default=0, help="first compile every case N at a time into a "
                    "persistent cache, then measure one by one (their cold compile seconds are kept beside)")
    ap.add_argument("--warm-only", action="store_true", help="with --warm-jobs: stop after compiling, writing the "
                    "cold compile seconds to --out (for --cold-from)")
    ap.add_argument("--compile-cache", help="the persistent compilation cache the cases use (kept; default: a "
                    "temporary one with --warm-jobs, none without)")
    ap.add_argument("--cold-from", help="a --warm-only output whose cold compile seconds go beside this run's")
    ap.add_argument("--reduced", action="store_true", help="the test suite's CPU form: size 1, small planner, "
                    "Pendulum-v1, 2 seeds vmapped, a few calls")
    ap.add_argument("--out", default=None, help="JSON results (default benchmarks/runs/gpu-<date>.json; a "
                    "Markdown table goes beside it)")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one size, print JSON
    ap.add_argument("--agent-json", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    agent_kwargs = json.loads(args.agent_json)
    if args.reduced:
        for k, v in REDUCED.items():
            if k != "agent":
                setattr(args, k, v)
        agent_kwargs = dict(REDUCED["agent"], **agent_kwargs)
    if args.one is not None:
        row = measure_one(args.one, args.env, args.seeds, updates=args.updates, ticks=args.ticks,
                          repeats=args.repeats, agent_kwargs=agent_kwargs,
                          default_precision=args.default_matmul_precision, kernels=args.kernels[0],
                          matmul_precision=args.matmul_precision)
        print("RESULT " + json.dumps(row))
        return 0

    date = dt.date.today().isoformat()
    out = Path(args.out or ROOT / "benchmarks" / "runs" / f"gpu-{date}.json")
    cases = [(s, k) for k in args.kernels for s in args.sizes]
    if args.cases:
        try:
            cases = [(int(c.split(":")[0]), c.split(":")[1]) for c in args.cases]
        except (IndexError, ValueError):
            ap.error(f"--cases: each case is SIZE:KERNELS (e.g. 5:cpu), got {args.cases}")
        bad = [c for c in cases if c[1] not in ("auto", "reference", "cpu")]
        if bad:
            ap.error(f"--cases: kernels must be auto, reference or cpu, got {bad}")
    env = dict(os.environ)
    cache = args.compile_cache or (tempfile.mkdtemp(prefix="gpu-bench-cache-") if args.warm_jobs else None)
    if cache:
        env.update(JAX_COMPILATION_CACHE_DIR=cache, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                   JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    cold = {}
    if args.cold_from:
        cold = {tuple(k.split(":")): v for k, v in json.loads(Path(args.cold_from).read_text())["cold"].items()}
        cold = {(int(k[0]), k[1]): v for k, v in cold.items()}
    if args.warm_jobs:
        # compile every case at once into one persistent cache (their timings overlap and are
        # discarded; their compile seconds are kept as the cold figures), then measure one by one
        print(f"compiling {len(cases)} cases, {args.warm_jobs} at a time, into {cache} ...", flush=True)
        with concurrent.futures.ThreadPoolExecutor(args.warm_jobs) as pool:
            for case, (row, err) in zip(cases, pool.map(lambda c: run_one(c, args, agent_kwargs, env), cases)):
                if row is None:
                    print(f"  {case}: failed while compiling: {err[-2000:]}", file=sys.stderr)
                    continue
                cold[case] = {"updates": row["compile_s"]["updates"], "plan": row["compile_s"]["plan"],
                              "train": {n: t["compile_s"] for n, t in row["train"].items()},
                              "concurrent_cases": args.warm_jobs}
                print(f"  {case}: compiled ({cold[case]})", flush=True)
        if args.warm_only:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"cold": {f"{s}:{k}": v for (s, k), v in cold.items()}}, indent=1))
            print(f"wrote the cold compile seconds to {out}; the programs are in {cache}")
            return 0
    rows = []
    for size, kernels in cases:
        print(f"model size {size}, kernels {kernels}: measuring in a fresh process ...", flush=True)
        row, err = run_one((size, kernels), args, agent_kwargs, env)
        if row is None:
            sys.stderr.write(err)
            print(f"gpu.py: model size {size}, kernels {kernels} failed; see the output above", file=sys.stderr)
            return 1
        check_row(row)
        if (size, kernels) in cold:
            row["compile_s_cold"] = cold[(size, kernels)]
            row["compile_note"] = (f"compile_s: loaded from the persistent cache; compile_s_cold: compiled with "
                                   f"{cold[(size, kernels)]['concurrent_cases']} cases compiling at once")
        rows.append(row)
        print(f"  {row['updates_per_s']:.1f} updates/s ({row['update_tflop_per_s']:.3f} TFLOP/s), plan "
              f"{row['plan_ms']:.1f} ms, train " + ", ".join(f"{v['agent_steps_per_s']:.1f} agent steps/s "
                                                            f"({n} seeds)" for n, v in row["train"].items()),
              flush=True)
        write(out, rows, args, date)  # after every case: a run cut short keeps what it measured
    if cache and not args.compile_cache:
        shutil.rmtree(cache, ignore_errors=True)
    print(f"wrote {out} and {out.with_suffix('.md')}")
    print(out.with_suffix(".md").read_text())
    return 0


def run_one(case, args, agent_kwargs: dict, env: dict):
    """(row, None) or (None, the output's tail): one (size, kernels) case in a fresh process."""
    size, kernels = case
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", str(size), "--env", args.env,
           "--kernels", kernels, "--matmul-precision", args.matmul_precision,
           "--seeds", *map(str, args.seeds), "--updates", str(args.updates), "--ticks", str(args.ticks),
           "--repeats", str(args.repeats), "--default-matmul-precision", args.default_matmul_precision,
           "--agent-json", json.dumps(agent_kwargs)]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if res.returncode != 0 or line is None:
        return None, f"exit {res.returncode}\n" + res.stdout[-4000:] + res.stderr[-4000:]
    return json.loads(line[len("RESULT "):]), None


def write(out: Path, rows: list, args, date: str) -> None:
    """The JSON results and the Markdown table beside them, each written atomically."""
    first = rows[0]
    meta = {"date": date, "device": first["device"], "backend": first["backend"], "jax": first["jax"],
            "env": args.env, "matmul_precision": first["matmul_precision"], "reduced": bool(args.reduced),
            "argv": sys.argv[1:]}
    out.parent.mkdir(parents=True, exist_ok=True)
    for path, text in ((out, json.dumps({"meta": meta, "results": rows}, indent=1)),
                       (out.with_suffix(".md"), markdown(rows, meta))):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
