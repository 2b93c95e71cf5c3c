"""``tdmpc2 evaluate-official``: a released TD-MPC2 checkpoint, evaluated with our planner.

    tdmpc2 evaluate-official --checkpoint dog-run-1.pt --task dmc:dog-run --model-size 5 \\
        --out results/official/dog-run-1
    tdmpc2 evaluate-official --checkpoint mt30-48M.pt --task all --model-size 48 --out results/official/mt30-48M

The official ``evaluate.py`` protocol (10 episodes per task from fresh initial states, the
planner in eval mode, seed 1) on dm_control; :mod:`tdmpc2core.agents.official_eval` has the
details. The checkpoint's integrity is checked first (every zip member's CRC-32, its size and
SHA-256 in one read: :mod:`tdmpc2core.io.integrity`), then it is read with
``torch.load(weights_only=True)`` (tensors and plain containers only; no pickled code runs)
and its architecture inferred from the weights; a damaged checkpoint (the member named), or
one that does not fit ``--model-size``, the task or the task set, is refused before anything
is written.

Writes ``{out}/eval.parquet`` (one row per episode: checkpoint, its SHA-256 and size, task,
episode, return, length, env frames, normalized score = return / 10 (100 x the episode's success
for a task with a success flag, the paper's Meta-World score), success and success_any (the
success flag at the episode's last step, the official rule, and at any step; null for a task
without one); the provenance in the
file's metadata, key ``tdmpc2.provenance``), then ``{out}/run.json`` (settings, skipped tasks
and why, ``source_files`` (the checkpoint's path, size, SHA-256, members checked), provenance;
written last: the marker of a complete evaluation). Needs PyTorch
(``pip install -e '.[official]'``).

Progress goes to stderr, one flushed line each (:class:`tdmpc2core.run.progress.EvalProgress`):
each task's start (episodes x agent steps), the first estimate of the time still to go right
after the first step (which compiles), then a line at most every 30 s and one at each task's
end, each with the time it expects to still take from the agent steps done so far.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def _planner_kv(text: str):
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--planner {text!r}: expected KEY=VALUE, e.g. num_samples=512")
    k, v = text.split("=", 1)
    try:
        try:
            return k.strip(), int(v)
        except ValueError:
            return k.strip(), float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--planner {text!r}: {v!r} is not a number") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True,
                   help="an official .pt checkpoint ({'model': state_dict}, as the official TDMPC2.save writes)")
    p.add_argument("--task", required=True, action="append",
                   help="dm_control task, dmc:<official name> (single-task: the checkpoint's task); for a multi-task "
                        "checkpoint 'all' (or mt30 / mt80: every task available here, the others skipped with the "
                        "reason) or one of its tasks; repeatable")
    p.add_argument("--model-size", type=int, default=None,
                   help="official model size the checkpoint must be (1, 5, 19, 48, 317; default: inferred)")
    p.add_argument("--task-set", default=None,
                   help="multi-task: mt30, mt80 or the task names in task-index order, comma-separated "
                        "(default: the official set with the checkpoint's task count)")
    p.add_argument("--episodes", type=int, default=10, help="episodes per task (official: 10)")
    p.add_argument("--seed", type=int, default=1, help="evaluation seed (official default: 1)")
    p.add_argument("--episode-length", type=int, default=1000,
                   help="simulator steps per episode (official: 1000 = 500 agent steps; shorter only for smoke tests)")
    p.add_argument("--planner", type=_planner_kv, action="append", default=[], metavar="KEY=VALUE",
                   help="planner setting other than the paper's (iterations, num_samples, num_elites, num_pi_trajs, "
                        "horizon, min_std, max_std, temperature); repeatable")
    p.add_argument("--name", default=None, help="the checkpoint's name in the outputs (default: the file's stem)")
    p.add_argument("--out", required=True, help="output folder (eval.parquet, run.json)")


def run(args) -> int:
    import numpy as np
    import pyarrow as pa

    from ..agents.official_eval import evaluate_official
    from ..io import atomic, provenance
    from ..run.compiled import per_program

    import importlib.util

    if importlib.util.find_spec("torch") is None:
        print("tdmpc2 evaluate-official: error: reading an official .pt checkpoint needs PyTorch: "
              "pip install -e '.[official]'", file=sys.stderr)
        return 1
    out = Path(args.out)
    runjson = out / "run.json"
    name = args.name or Path(args.checkpoint).stem
    log = lambda msg: print(f"tdmpc2 evaluate-official [{name}]: {msg}", file=sys.stderr, flush=True)  # noqa: E731
    t0 = time.perf_counter()
    tasks = args.task if len(args.task) > 1 else args.task[0]
    ev = evaluate_official(args.checkpoint, tasks, model_size=args.model_size, task_set=args.task_set,
                           episodes=args.episodes, seed=args.seed, episode_length=args.episode_length,
                           planner=dict(args.planner), progress=log)
    ck = ev.checkpoint
    if not ev.rows:
        raise ValueError(f"{args.checkpoint}: none of the tasks asked for can be evaluated here: "
                         + "; ".join(f"{t}: {r}" for t, r in ev.skipped.items()))
    for t, why in ev.skipped.items():
        log(f"skipped {t}: {why}")
    wall = time.perf_counter() - t0
    prov = provenance.collect(".", include_jax=True)
    info = {
        "checkpoint": name, "checkpoint_path": os.path.abspath(ck.path), "checkpoint_sha256": ck.sha256,
        "checkpoint_bytes": ck.size, "source_files": [ck.check.to_json()],
        "architecture": ck.architecture.__dict__ | {"model_size": ck.model_size}, "layout": ck.weights.layout,
        "task_set": ck.task_set, "task_names": list(ck.task_names), "tasks_asked": args.task,
        "tasks_evaluated": sorted({r["task"] for r in ev.rows}, key=[r["task"] for r in ev.rows].index),
        "skipped": ev.skipped, "settings": ev.settings,
    }
    n = len(ev.rows)
    col = lambda k: [r[k] for r in ev.rows]  # noqa: E731
    table = pa.table({
        "checkpoint": [name] * n, "checkpoint_file": [os.path.basename(ck.path)] * n,
        "checkpoint_sha256": [ck.sha256] * n, "checkpoint_bytes": pa.array([ck.size] * n, pa.int64()),
        "model_size": pa.array([ck.model_size] * n, pa.int64()),
        "task_set": pa.array([ck.task_set] * n, pa.string()),
        "task": col("task"), "env_id": col("env_id"), "task_index": np.asarray(col("task_index"), np.int64),
        "seed": np.asarray(col("seed"), np.int64), "episode": np.asarray(col("episode"), np.int64),
        "return": np.asarray(col("return"), np.float64), "length": np.asarray(col("length"), np.int64),
        "env_frames": np.asarray(col("env_frames"), np.int64),
        "normalized_score": np.where([x is None for x in col("success")], np.asarray(col("return"), np.float64) / 10.0,
                                     [100.0 * bool(x) for x in col("success")]),
        "success": pa.array(col("success"), pa.bool_()), "success_any": pa.array(col("success_any"), pa.bool_()),
    })
    meta = json.dumps({**info, "provenance": prov}, sort_keys=True, default=atomic._json_default)
    from .outputs import describe_columns

    # the success columns and the normalized score say their rule in the file (field metadata)
    table = describe_columns(table.replace_schema_metadata({b"tdmpc2.provenance": meta.encode()}))
    # the marker of completeness goes first, comes back last: a refused or failed evaluation
    # (everything above) leaves an earlier complete one as it was
    if runjson.exists():
        runjson.unlink()
    atomic.write_parquet(out / "eval.parquet", table)
    from ..pipeline.codeversion import code_version

    atomic.write_json(runjson, {**info, "returns": ev.returns(), "wall_seconds": wall,
                                "code_version": code_version("evaluate_official"),
                                "compile_seconds": per_program(ev.compile_seconds),
                                "compile_detail": ev.compile_seconds, "provenance": prov})
    log("; ".join(f"{t} {r:.1f}" for t, r in ev.returns().items()) + f" (mean return over {args.episodes} "
        f"episode(s); {wall:.0f} s, compiling {sum(per_program(ev.compile_seconds).values()):.0f} s)")
    return 0
