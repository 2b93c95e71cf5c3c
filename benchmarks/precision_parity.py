"""Does the agent learn alike at a faster matmul precision? The same tasks and seeds at two.

    # one (task, precision) run on an accelerator, resumable: stops cleanly after --budget-seconds
    # (a checkpoint in --workdir) and continues from it when the same command runs again
    python benchmarks/precision_parity.py run --task CheetahRun --precision default --out runs/pp.parquet
    python benchmarks/precision_parity.py analyze --results runs/pp.parquet [more.parquet ...]
    python benchmarks/precision_parity.py run --reduced --precision high --out /tmp/pp.parquet   # seconds, CPU

On the borrowed TPU (benchmarks/README.md, "Accelerator"), one call per (task, precision) part,
the checkpoints and the traced programs (the program cache, ``--program-cache``) kept on the
machine between calls (it stays warm between calls back to back), so a resumed call traces nothing:
``python3 benchmarks/accelerator.py run --timeout 560 -- python benchmarks/precision_parity.py run
--task CheetahRun --precision highest --budget-seconds 500 --workdir /tmp/pp-work --out
'$OUT/pp.parquet'``; the same command again continues it; the rows come back in the call that
finishes. A budget that ends during the last chunk stops the run before its final evaluation (a
stop request always does, tdmpc2core/run/driver.py), so the next call only evaluates: measured
2026-12-07, CheetahRun at ``default`` took 481 s and then 117 s.

The question (issue 43): the Dense layers' ``matmul_precision`` (``highest``: full float32, the
paper-era code's; ``high``: three bf16 passes on a TPU, TF32 on a GPU; ``default``: one bf16
pass on a TPU) changes every product of the networks. A faster precision may be used for the
paper's protocols only where it is *shown* to learn alike: the same seeds and tasks trained at
``highest`` and at the candidate, compared with the learning-parity statistics
(tdmpc2core/report/learning_parity.py: a seed's score is its mean evaluation return over the last
``LAST_POINTS`` evaluation points; two one-sided Welch t-tests of candidate - highest against
``+-MARGIN``), the margin and protocol stated before any run (docs/fidelity.md, "Learning alike
at a faster matmul precision").

``run`` trains ``tdmpc2core.TDMPC2`` (the agent the pipeline's ``train-single`` stage trains)
on one task, every seed vmapped in one program, with the configuration's ``matmul_precision``
set to ``--precision`` and everything else at the paper's defaults for ``--model-size``; the
simulators' own products stay at full float32 (tdmpc2core/envs/base.py). Its evaluations
become rows of ``--out`` (appended; a (precision, task, seed, agent_step) row already there is
refused): ``precision``, ``task``, ``seed``, ``agent_step``, ``env_frames``,
``episode_return`` (mean over the evaluation's episodes), ``eval_episodes``, ``model_size``,
``device``, ``jax``; a JSON beside it records each call (wall seconds, steps reached).
``analyze`` compares every candidate precision found with ``highest`` per task.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the reference precision every other one is compared with
REFERENCE = "highest"
COLUMNS = ("precision", "task", "seed", "agent_step", "env_frames", "episode_return", "eval_episodes", "model_size",
           "device", "jax")
#: the protocol stated in advance (docs/fidelity.md): Playground's MJX versions of three DMC
#: tasks (programs the persistent cache keeps, all on the device), 5 seeds, model size 5, the
#: paper's planner and batch, 30,000 agent steps, evaluations every 10,000 with 10 episodes
DEFAULTS = dict(tasks=("CheetahRun", "FingerSpin", "CartpoleSwingup"), seeds=(0, 1, 2, 3, 4), model_size=5,
                steps=30_000, eval_every=10_000, eval_episodes=10)
REDUCED = dict(task="Pendulum-v1", seeds=(0, 1, 2), steps=400, eval_every=200, eval_episodes=1, model_size=1,
               agent=dict(enc_dim=16, mlp_dim=16, latent_dim=16, batch_size=8, num_samples=16, num_elites=2,
                          num_pi_trajs=2, iterations=1, seed_steps=200))


def _read(path: Path):
    import pandas as pd

    if not path.exists():
        return pd.DataFrame({c: [] for c in COLUMNS})
    df = pd.read_parquet(path)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: not a precision-parity results file (missing columns {missing})")
    return df


def _write_atomic(path: Path, df) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)


def run(args) -> int:
    import jax
    import numpy as np
    import pandas as pd

    from tdmpc2core import TDMPC2, TrainingInterrupted

    out = Path(args.out)
    existing = _read(out)
    task, precision = args.task, args.precision
    if len(existing[(existing["task"] == task) & (existing["precision"] == precision)]):
        raise SystemExit(f"{out}: already holds rows of {task} at {precision}; choose another --out")
    kw = dict(args.agent)
    agent = TDMPC2(task, model_size=args.model_size, matmul_precision=precision, **kw)
    work = Path(args.workdir or out.with_suffix(".work")) / f"{task}-{precision}"
    _use_program_cache(args.program_cache, work)
    deadline = time.time() + args.budget_seconds if args.budget_seconds else None
    t0 = time.time()
    from peers import git_commit

    log = {"task": task, "precision": precision, "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
           "tdmpc2core_commit": git_commit(ROOT)}
    try:
        _, hist = agent.train(seed=list(args.seeds), n_timesteps=args.steps, eval_every=args.eval_every,
                              eval_episodes=args.eval_episodes, checkpoint_dir=str(work),
                              checkpoint_every=args.eval_every,
                              max_chunk_seconds=args.max_chunk_seconds if deadline else None,
                              should_stop=(lambda: time.time() > deadline) if deadline else None)
    except TrainingInterrupted:
        log.update(stopped=True, wall_s=time.time() - t0)
        _append_log(out, log)
        print(f"stopped at the {args.budget_seconds} s budget after a checkpoint in {work}; run the same command "
              f"again to continue", flush=True)
        return 3
    rets = np.asarray(hist["eval_return"])  # [n_evals, n_seeds]
    steps = np.asarray(hist["eval_agent_steps"])
    dev = jax.devices()[0]
    rows = [dict(precision=precision, task=task, seed=int(s), agent_step=int(steps[i]),
                 env_frames=int(steps[i]) * agent.action_repeat, episode_return=float(rets[i, j]),
                 eval_episodes=int(args.eval_episodes), model_size=int(args.model_size),
                 device=f"{dev.device_kind} ({jax.default_backend()})", jax=jax.__version__)
            for i in range(len(steps)) for j, s in enumerate(args.seeds)]
    _write_atomic(out, pd.concat([existing, pd.DataFrame(rows, columns=COLUMNS)], ignore_index=True))
    log.update(stopped=False, wall_s=time.time() - t0, rows=len(rows), compile_seconds=agent.compile_seconds)
    _append_log(out, log)
    print(f"wrote {len(rows)} rows of {task} at {precision} to {out}", flush=True)
    return 0


def _use_program_cache(folder, work: Path) -> None:
    """Point the program cache (tdmpc2core/run/program_cache.py) at ``folder`` (None: the run's
    checkpoint folder's ``programs``; ``""``: none) unless the environment already names one, so
    that a resumed call loads the training and evaluation programs its first call traced instead
    of tracing them again (about a minute each on the TPU host)."""
    from tdmpc2core.run.program_cache import PROGRAM_CACHE_ENV

    if os.environ.get(PROGRAM_CACHE_ENV, "").strip():
        return
    folder = str(work / "programs") if folder is None else folder
    if folder:
        os.environ[PROGRAM_CACHE_ENV] = folder


def _append_log(out: Path, entry: dict) -> None:
    path = out.with_suffix(".json")
    calls = json.loads(path.read_text())["calls"] if path.exists() else []
    calls.append(entry)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"calls": calls}, indent=1, default=str))
    os.replace(tmp, path)


def compare(df, reference: str = REFERENCE):
    """Per (task, candidate precision): the TOST of candidate - ``reference`` on the scores of
    the seeds run at both (docs/fidelity.md: the same seeds at both precisions;
    tdmpc2core/report/learning_parity.py: ``seed_scores``, ``welch_tost``, ``verdict`` at its
    MARGIN, ALPHA and LAST_POINTS). Returns a list of dicts (task, precision, n, diff, ci90,
    p_tost, p_diff, verdict, steps, unpaired: {precision: seeds run at that precision alone,
    left out until the other has them}). Raises ValueError when a task lacks the reference or
    when a candidate shares no seed with it."""
    from tdmpc2core.report import learning_parity as lp

    out = []
    for task, g in df.groupby("task", sort=True):
        if reference not in set(g["precision"]):
            raise ValueError(f"task {task!r}: no rows at the reference precision {reference!r}")
        for cand in sorted(set(g["precision"]) - {reference}):
            seeds = {p: set(g[g["precision"] == p]["seed"].astype(int)) for p in (cand, reference)}
            both = seeds[cand] & seeds[reference]
            if not both:
                raise ValueError(f"task {task!r}: {cand} (seeds {sorted(seeds[cand])}) and {reference} (seeds "
                                 f"{sorted(seeds[reference])}) share no seed")
            unpaired = {p: sorted(v - both) for p, v in seeds.items() if v - both}
            pair = g[g["precision"].isin([reference, cand]) & g["seed"].astype(int).isin(both)]
            pair = pair.rename(columns={"precision": "implementation"})
            scores = lp.seed_scores(pair)
            a = scores[scores["implementation"] == cand]["score"].to_numpy()
            b = scores[scores["implementation"] == reference]["score"].to_numpy()
            t = lp.welch_tost(a, b)
            out.append(dict(task=task, precision=cand, n=t["n"], diff=t["diff"], ci90=t["ci90"], p_tost=t["p_tost"],
                            p_diff=t["p_diff"], verdict=lp.verdict(t), steps=tuple(scores["steps"].iloc[0]),
                            unpaired=unpaired))
    return out


def overall(results, tasks=DEFAULTS["tasks"]) -> dict:
    """The stated verdict per candidate precision (docs/fidelity.md): "learns alike" only when
    "equivalent" on every task of ``tasks``; "not shown alike" as soon as one task is
    "inconclusive" or "different"; else "open" (a task not compared yet). ``results``: the
    rows of :func:`compare`. Returns {precision: (verdict, tasks compared, tasks missing)}."""
    out = {}
    for cand in sorted({r["precision"] for r in results}):
        got = {r["task"]: r["verdict"] for r in results if r["precision"] == cand}
        missing = [t for t in tasks if t not in got]
        if any(v != "equivalent" for v in got.values()):
            verdict = "not shown alike"
        elif missing:
            verdict = "open"
        else:
            verdict = "learns alike"
        out[cand] = (verdict, sorted(got), missing)
    return out


def analyze(args) -> int:
    import pandas as pd

    from tdmpc2core.report import learning_parity as lp

    frames = []
    for p in args.results:
        if not Path(p).is_file():
            raise SystemExit(f"analyze: {p}: no such file (the results Parquet files that `run --out` wrote)")
        try:
            frames.append(_read(Path(p)))
        except (ValueError, OSError) as e:  # pyarrow's ArrowInvalid is a ValueError
            raise SystemExit(f"analyze: {p}: not a readable precision-parity results file: {e}") from None
    df = pd.concat(frames, ignore_index=True)
    if df.empty:
        raise SystemExit(f"analyze: no rows in {args.results}")
    key = ["precision", "task", "seed", "agent_step"]
    if df.duplicated(key).any():
        raise SystemExit(f"a (precision, task, seed, agent_step) row occurs twice in {args.results}")
    with_ref = {t for t, g in df.groupby("task") if REFERENCE in set(g["precision"])}
    awaiting = sorted(set(df["task"]) - with_ref)
    try:
        results = compare(df[df["task"].isin(with_ref)])
    except ValueError as e:
        raise SystemExit(f"analyze: {e}") from None
    lines = [f"Candidate precision - {REFERENCE} (margin +-{lp.MARGIN:.0f}, alpha {lp.ALPHA}, a seed's score its "
             f"mean over the last {lp.LAST_POINTS} evaluation points)", "",
             "| task | precision | points (agent steps) | seeds (candidate, highest) | difference [90% CI] | "
             "p TOST | p diff | verdict |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['task']} | {r['precision']} | {', '.join(map(str, r['steps']))} | {r['n'][0]}, {r['n'][1]} "
                     f"| {r['diff']:+.1f} [{r['ci90'][0]:.1f}, {r['ci90'][1]:.1f}] | {r['p_tost']:.3g} | "
                     f"{r['p_diff']:.3g} | {r['verdict']} |")
    unpaired = [f"{r['task']}, {r['precision']} against {REFERENCE}: seeds {', '.join(map(str, v))} only at {p}"
                for r in results for p, v in r["unpaired"].items()]
    if unpaired:
        lines += ["", "Left out until both precisions have them (a comparison takes the seeds run at both): "
                  + "; ".join(unpaired)]
    if awaiting:
        lines += ["", "Not compared yet (no rows at " + REFERENCE + "): " + ", ".join(
            f"{t} ({', '.join(sorted(set(df[df['task'] == t]['precision'])))})" for t in awaiting)]
    lines += ["", f"Overall (a candidate learns alike only if equivalent on all of {', '.join(DEFAULTS['tasks'])}):"]
    for cand, (verdict, got, missing) in overall(results).items():
        lines.append(f"- {cand}: {verdict} (compared on {', '.join(got) or 'none'}"
                     + (f"; not yet on {', '.join(missing)})" if missing else ")"))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.summary:
        Path(args.summary).write_text(text)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train one task at one precision (resumable)")
    r.add_argument("--task", default=None, help=f"env id (one of the stated tasks {list(DEFAULTS['tasks'])})")
    r.add_argument("--precision", required=True, choices=["highest", "high", "default"])
    r.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULTS["seeds"]))
    r.add_argument("--model-size", type=int, default=DEFAULTS["model_size"])
    r.add_argument("--steps", type=int, default=DEFAULTS["steps"], help="agent steps")
    r.add_argument("--eval-every", type=int, default=DEFAULTS["eval_every"])
    r.add_argument("--eval-episodes", type=int, default=DEFAULTS["eval_episodes"])
    r.add_argument("--budget-seconds", type=float, default=None, help="stop cleanly (checkpoint) after this long")
    r.add_argument("--max-chunk-seconds", type=float, default=30.0,
                   help="with --budget-seconds: the longest call of the training program between two looks at the "
                        "budget (default 30; an evaluation is not split)")
    r.add_argument("--out", required=True, help="the results Parquet file (rows appended)")
    r.add_argument("--workdir", help="checkpoints (default OUT.work/TASK-PRECISION)")
    r.add_argument("--program-cache", default=None,
                   help="the program cache's folder, unless TDMPC2_PROGRAM_CACHE_DIR names one (default: the "
                        "checkpoints' folder's programs/; '' for none)")
    r.add_argument("--reduced", action="store_true", help="a tiny CPU form (seconds)")
    a = sub.add_parser("analyze", help="candidate precisions against highest, per task")
    a.add_argument("--results", nargs="+", required=True)
    a.add_argument("--summary", help="write the Markdown table here too")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        args.agent = {}
        if args.reduced:
            for k in ("seeds", "steps", "eval_every", "eval_episodes", "model_size"):
                setattr(args, k, REDUCED[k])
            args.task = args.task or REDUCED["task"]
            args.agent = dict(REDUCED["agent"])
        if not args.task:
            ap.error(f"run: --task is required (the stated tasks: {list(DEFAULTS['tasks'])})")
        return run(args)
    return analyze(args)


if __name__ == "__main__":
    sys.exit(main())
