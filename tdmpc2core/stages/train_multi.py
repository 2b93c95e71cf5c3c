"""``tdmpc2 train-multi``: train one multi-task TD-MPC2 model offline on a pooled dataset.

    tdmpc2 train-multi --pool demo --model-size 1 --dataset results/datasets/pools/demo.parquet \\
        --spec '{"updates": 2000, "batch_size": 256, "eval_every": 1000, "eval_episodes": 10}' \\
        --seeds 0 1 --outdir results/multi/demo/size1

The seeds train vmapped in one program. Each task is evaluated in its own environment (the
dataset's task table: env id, action repeat, episode length). Writes, under ``--outdir``
(docs/artifacts.md, "Multi-task run"): ``eval.parquet`` (one row per seed, evaluation, task
and episode), ``metrics.parquet`` (one row per seed and training chunk) and, last,
``run.json``, only once training is complete. Progress is logged to stderr after every chunk
and at least every ``--progress-seconds``: updates done of the total, updates/s, time left,
the last normalized score.

With ``--checkpoint-dir`` the job stops on SIGTERM/SIGINT at the next boundary between calls
of the compiled program, writes a checkpoint and exits with 143/130 without outputs; the same
command run again resumes, and its outputs equal an uninterrupted run's (wall-clock columns
aside). Exit code 2: the checkpoint folder belongs to another run (settings named) or holds
only damaged checkpoints; 4: another process holds the checkpoint folder (its lock,
:mod:`tdmpc2core.run.lock`). As ``tdmpc2 train-single`` (docs/pipeline.md, "Preemption").
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from .spec import parse_spec as _parse_spec

from .resumable import (FOLDER_IN_USE, SignalStop, add_checkpoint_arguments, close_checkpoint_dir, hms, library_log,
                        mismatch_message, open_checkpoint_dir)

SPEC_KEYS = {"updates", "batch_size", "eval_every", "eval_episodes", "log_every", "agent", "return_ranges",
             "backend", "eval_tasks", "device_budget_bytes"}
REQUIRED = {"updates"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pool", required=True, help="pool name (folder name under results/multi)")
    p.add_argument("--model-size", required=True, type=int, help="model-size preset {1, 5, 19, 48, 317}")
    p.add_argument("--dataset", required=True, help="the pooled episode dataset (Parquet)")
    p.add_argument("--spec", required=True,
                   help="JSON object of the multi-task settings (docs/artifacts.md), or @file.json")
    p.add_argument("--seeds", required=True, type=int, nargs="+", help="seeds, run vmapped in one program")
    p.add_argument("--outdir", required=True, help="results/multi/{pool}/size{model_size}")
    add_checkpoint_arguments(p, "updates", "only when stopped by a signal and at the end")


def parse_spec(text: str) -> dict:
    """The multi-task settings from JSON text or ``@path``; raises ValueError naming bad keys."""
    return _parse_spec(text, SPEC_KEYS, REQUIRED)


def run(args) -> int:
    spec = parse_spec(args.spec)

    prefix = f"[train-multi {args.pool} size{args.model_size}]"
    log = lambda msg: print(f"{prefix} {msg}", file=sys.stderr, flush=True)
    from ..run.lock import FolderInUseError, exclusive_folder

    with library_log(prefix):  # checkpoints written, resumes: into this job's log
        try:
            # one writer per checkpoint folder (a resubmitted job while the first still runs)
            with exclusive_folder(args.checkpoint_dir):
                return _run(args, spec, log)
        except FolderInUseError as exc:
            log(f"error: {exc}")
            return FOLDER_IN_USE


def _run(args, spec: dict, log) -> int:
    import jax
    import numpy as np
    import pyarrow as pa

    from ..io import atomic, attempts, checkpoint, provenance
    from ..model.config import check_batch_size, slices_in_episodes
    from ..io.dataset import load_dataset
    from ..agents.multitask import METRIC_KEYS, TDMPC2MultiTask
    from ..model.networks import MATMUL_PRECISION, count_params
    from ..run.compiled import per_program
    from ..run.driver import TrainingInterrupted

    seeds = list(args.seeds)
    outdir = Path(args.outdir)
    runjson = outdir / "run.json"
    if runjson.exists():
        runjson.unlink()  # the marker of completeness goes first, comes back last

    t_start = time.perf_counter()
    dataset = load_dataset(args.dataset)
    agent_kwargs = dict(spec.get("agent", {}))
    if "batch_size" in spec:
        agent_kwargs["batch_size"] = int(spec["batch_size"])
    eval_envs = True
    if spec.get("eval_tasks") is not None:  # evaluate these tasks only (trained on all)
        table = {t.name: t for t in dataset.tasks}
        bad = [n for n in spec["eval_tasks"] if n not in table or not table[n].env_id]
        if bad or not spec["eval_tasks"]:
            raise ValueError(f"spec eval_tasks: {bad or 'empty'}: each must be a task of {args.dataset} with an "
                             f"env_id; evaluable: {[t.name for t in dataset.tasks if t.env_id]}")
        eval_envs = [t.env_id if t.name in spec["eval_tasks"] else None for t in dataset.tasks]
    agent = TDMPC2MultiTask(dataset, eval_envs=eval_envs, model_size=args.model_size,
                            return_ranges=spec.get("return_ranges"), backend=spec.get("backend"),
                            device_budget_bytes=spec.get("device_budget_bytes"), **agent_kwargs)
    # a batch of more slices than the pool holds would repeat slices: refused with the check the
    # workflow runs on its prediction of the pool at load (tdmpc2core.model.config)
    check_batch_size(agent.cfg.batch_size, slices_in_episodes(dataset.episode_rows, agent.cfg.horizon),
                     f"the pooled dataset {args.dataset}", "lower multitask.batch_size")
    updates = int(spec["updates"])
    eval_every = int(spec.get("eval_every", 0)) or None
    eval_episodes = int(spec.get("eval_episodes", 10))
    log_every = int(spec.get("log_every", 0)) or None
    names = agent.eval_task_names
    placed = ("on the device once" if agent.data_placement == "device" else
              f"in host memory: over the device budget of {agent.device_budget_bytes} bytes, batches moved")
    log(f"{len(agent.task_names)} tasks {agent.task_names}: {dataset.num_episodes} episodes, "
        f"{dataset.num_transitions} transitions ({agent.pool_nbytes / 1e6:.1f} MB of rows {placed}); "
        f"evaluated: {names}; obs {agent.obs_dim}, action {agent.action_dim} "
        f"(padded), task_dim {agent.task_dim}, batch {agent.cfg.batch_size}, discounts "
        + ", ".join(f"{n} {g:.3f}" for n, g in agent.task_gammas.items())
        + f"; seeds {seeds}, {updates} updates, evaluation every {eval_every} updates")

    ckdir = Path(args.checkpoint_dir) if args.checkpoint_dir else None
    # this session's record beside the checkpoints (before the folder is opened: a finished run's
    # folder starts a new list); run.json gets every attempt of a resumed run
    attempt = attempts.begin(ckdir, "updates")
    open_checkpoint_dir(ckdir, log)  # a finished run's folder is cleared: a forced rerun trains anew

    prog = {"last_log": time.perf_counter(), "updates": 0, "seconds": 0.0, "start": None, "score": None, "done": 0}

    def left() -> str:
        return (f", ~{hms((updates - prog['done']) * prog['seconds'] / prog['updates'])} left"
                if prog["updates"] and prog["seconds"] else "")

    def on_progress(p):
        if prog["start"] is None:  # the first call compiles: it does not set the rate
            prog["start"] = p["start_updates"]
        else:
            prog["updates"] += p["steps"]
            prog["seconds"] += p["seconds"]
        prog["done"] = p["updates"]
        if p["last_normalized_score"] is not None:
            prog["score"] = p["last_normalized_score"]
        now = time.perf_counter()
        if now - prog["last_log"] >= args.progress_seconds and p["updates"] < updates:
            prog["last_log"] = now
            msg = f"{p['updates']}/{updates} updates ({100.0 * p['updates'] / updates:.0f}%), " \
                  f"{p['updates_per_s']:.1f} updates/s{left()}"
            if prog["score"] is not None:
                msg += ", last normalized score " + " ".join(f"{x:.1f}" for x in np.atleast_1d(prog["score"]))
            log(msg)

    def on_chunk(rec):
        prog["last_log"] = time.perf_counter()
        prog["done"] = rec["updates"]
        msg = (f"{rec['updates']}/{updates} updates, {rec['updates_per_s']:.1f} updates/s{left()}, "
               f"total loss " + " ".join(f"{x:.3f}" for x in np.atleast_1d(rec["total_loss"])))
        if "eval_return" in rec:
            msg += ("; eval return per task (" + ", ".join(names) + "): "
                    + "; ".join(" ".join(f"{x:.1f}" for x in row) for row in np.asarray(rec["eval_return"]))
                    + "; normalized score " + " ".join(f"{x:.1f}" for x in np.atleast_1d(rec["normalized_score"])))
        log(msg)

    with SignalStop(log, ckdir is not None) as stop:
        try:
            state, hist = agent.train(
                seed=seeds, n_timesteps=updates, total_timesteps=updates, eval_every=eval_every,
                eval_episodes=eval_episodes, log_every=log_every, callback=on_chunk, progress=on_progress,
                should_stop=stop.should_stop, max_chunk_seconds=args.max_chunk_seconds, checkpoint_dir=ckdir,
                checkpoint_every=args.checkpoint_every, keep_checkpoints=args.keep_checkpoints)
        except TrainingInterrupted as exc:
            where = (f"checkpoint {exc.checkpoint.path} ({exc.checkpoint.bytes / 1e6:.1f} MB, "
                     f"{exc.checkpoint.seconds:.1f} s); rerun the same command to resume"
                     if exc.checkpoint is not None else "no checkpoint (no --checkpoint-dir)")
            log(f"stopped by {stop.name} at {exc.step}/{updates} updates: {where}")
            attempt.end(f"stopped by {stop.name}", end_step=exc.step, start_step=prog["start"],
                        compile_seconds=per_program(agent.compile_seconds))
            return stop.exit_code
        except (checkpoint.CheckpointMismatchError, checkpoint.CorruptCheckpointError) as exc:
            attempt.discard()  # not a session of the run whose checkpoints the folder holds
            log(f"error: {exc}")
            log(mismatch_message(ckdir))
            return 2
    wall = time.perf_counter() - t_start
    prov = provenance.collect(".", include_jax=True)
    records = hist["chunks"]  # one per chunk of the schedule, including those of earlier sessions
    started_at = prog["start"] if prog["start"] is not None else updates
    attempt.end("completed", end_step=updates, start_step=started_at,
                compile_seconds=per_program(agent.compile_seconds))

    # ---- eval.parquet: seed x evaluation x task x episode
    n_eval = len(hist["eval_updates"])
    S, K, E = len(seeds), len(names), eval_episodes
    ranges = [agent.return_ranges[n] for n in names]
    if n_eval:
        ret = np.asarray(hist["eval_returns"])  # [n_eval, S, K, E]
        length = np.asarray(hist["eval_lengths"])
        idx = np.indices((n_eval, S, K, E)).reshape(4, -1)
        i_ev, i_s, i_k, i_e = idx
        r = ret.reshape(-1)
        lo = np.array([np.nan if rg is None else rg[0] for rg in ranges])[i_k]
        hi = np.array([np.nan if rg is None else rg[1] for rg in ranges])[i_k]
        ev = {"pool": [args.pool] * r.size, "model_size": np.full(r.size, args.model_size, np.int64),
              "task": [names[k] for k in i_k], "seed": np.asarray(seeds, np.int64)[i_s],
              "eval_index": i_ev.astype(np.int64), "updates": np.asarray(hist["eval_updates"], np.int64)[i_ev],
              "episode": i_e.astype(np.int64), "return": r.astype(np.float64),
              "length": length.reshape(-1).astype(np.int64),
              "normalized_score": 100.0 * (r - lo) / (hi - lo), "return_low": lo, "return_high": hi}
    else:
        ev = {c: [] for c in ("pool", "model_size", "task", "seed", "eval_index", "updates", "episode", "return",
                              "length", "normalized_score", "return_low", "return_high")}
    atomic.write_parquet(outdir / "eval.parquet", pa.table(ev))

    # ---- metrics.parquet: seed x chunk
    met = {"pool": [], "model_size": [], "seed": [], "updates": [], "wall_time_s": [], "updates_per_s": []}
    met.update({k: [] for k in METRIC_KEYS})
    met.update(eval_mean_return=[], normalized_score=[])
    for rec in records:
        for i, seed in enumerate(seeds):
            met["pool"].append(args.pool)
            met["model_size"].append(args.model_size)
            met["seed"].append(seed)
            met["updates"].append(rec["updates"])
            met["wall_time_s"].append(rec["wall_time_s"])
            met["updates_per_s"].append(rec["updates_per_s"])
            for k in METRIC_KEYS:
                met[k].append(float(np.asarray(rec[k])[i]))
            met["eval_mean_return"].append(float(np.asarray(rec["eval_mean_return"])[i])
                                           if "eval_mean_return" in rec else math.nan)
            met["normalized_score"].append(float(np.asarray(rec["normalized_score"])[i])
                                           if "normalized_score" in rec else math.nan)
    types = {"pool": pa.string(), "model_size": pa.int64(), "seed": pa.int64(), "updates": pa.int64()}
    atomic.write_parquet(outdir / "metrics.parquet",
                         pa.table({k: pa.array(v, type=types.get(k, pa.float64())) for k, v in met.items()}))

    # ---- run.json, last
    params0 = jax.tree_util.tree_map(lambda x: x[0], state.agent.params)
    final = None
    if n_eval:
        final = {"updates": int(hist["eval_updates"][-1]),
                 "return": {n: [float(x) for x in hist["eval_return"][-1][:, k]] for k, n in enumerate(names)},
                 "mean_return": [float(x) for x in hist["eval_mean_return"][-1]],
                 "normalized_score": [None if math.isnan(x) else float(x) for x in hist["normalized_score"][-1]]}
    speeds = [r["updates_per_s"] for r in records[1:]] or [r["updates_per_s"] for r in records]
    atomic.write_json(runjson, {
        "pool": args.pool, "model_size": args.model_size, "seeds": seeds, "spec": spec, "dataset": args.dataset,
        "dataset_episodes": dataset.num_episodes, "dataset_transitions": dataset.num_transitions,
        "dataset_provenance": dataset.provenance,
        "agent_config": agent.config, "task_dim": agent.task_dim, "gammas": agent.task_gammas,
        "return_ranges": {n: (None if rg is None else list(rg)) for n, rg in zip(names, ranges)},
        "params": count_params(params0), "updates": updates, "final": final,
        "eval_tasks": names, "data_placement": agent.data_placement, "pool_nbytes": agent.pool_nbytes,
        "device_budget_bytes": agent.device_budget_bytes, "host_sampling": dict(agent.host_timing),
        "updates_per_s_median": float(np.median(speeds)) if speeds else None,
        "matmul_precision": f"float32 ({MATMUL_PRECISION.name}); jax_default_matmul_precision="
                            f"{prov['platform'].get('jax_default_matmul_precision')}",
        "compile_seconds": per_program(agent.compile_seconds), "compile_detail": agent.compile_seconds,
        "wall_seconds": wall,
        "training_wall_seconds_all_sessions": hist["wall_seconds"], "resumed_from_updates": started_at or None,
        "attempts": attempt.records(),  # every session of the run (tdmpc2core.io.attempts)
        "checkpoint_dir": str(ckdir) if ckdir is not None else None,
        "provenance": prov,
    })
    close_checkpoint_dir(ckdir, {"pool": args.pool, "model_size": args.model_size, "seeds": seeds,
                                 "updates": updates, "outdir": str(outdir)})
    log(f"done in {wall:.0f} s (compiling: " + ", ".join(f"{k} {v:.0f} s" for k, v in
                                                     per_program(agent.compile_seconds).items()) + ")"
        + ("" if final is None else
                                   "; final normalized score " + " ".join(
                                       "n/a" if x is None else f"{x:.1f}" for x in final["normalized_score"])))
    return 0
