"""``tdmpc2 train-single``: train single-task TD-MPC2 seeds (vmapped) on one task.

Writes ``{outdir}/seed{S}/eval.parquet``, ``metrics.parquet``, ``episodes.parquet`` (the
seed's replay as an episode dataset, :func:`tdmpc2core.dataset.export_episodes`) and, last,
``run.json`` for every seed (docs/artifacts.md), only once training is complete. Progress is logged to stderr
after every chunk of the schedule and at least every ``--progress-seconds``: agent steps done
of the total, agent steps/s, time left (from this session's training-tick rate), the last
evaluation return.

With ``--checkpoint-dir`` the job can be stopped and resumed (docs/pipeline.md,
"Preemption"): SIGTERM or SIGINT stops training at the next boundary between calls of the
compiled program (at most ``--max-chunk-seconds`` of compute away), writes a checkpoint and
exits with 128 + the signal number (143, 130) without writing outputs; the same command run
again resumes from the newest complete checkpoint, and its outputs equal those of an
uninterrupted run (wall-clock columns aside). A second Ctrl-C gives up the checkpoint (it
raises KeyboardInterrupt once the running call returns; SIGKILL stops at once). Once the
outputs are written the folder keeps only the final checkpoint and an
``outputs_written.json`` marker: running the job again (a forced rerun) trains anew.
Exit codes: 0 done, 2 the checkpoint folder belongs to another run (settings named) or
holds only damaged checkpoints, 4 the checkpoint folder is in use by another process (its
lock, :mod:`tdmpc2core.run.lock`; nothing read or written), 130/143 stopped by SIGINT/SIGTERM.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .spec import parse_spec as _parse_spec

from .resumable import (FOLDER_IN_USE, SignalStop, add_checkpoint_arguments, close_checkpoint_dir, hms, library_log,
                        mismatch_message, open_checkpoint_dir)

SPEC_KEYS = {"env_id", "action_repeat", "episode_length", "agent_steps", "eval_every", "eval_episodes",
             "agent", "n_envs", "backend", "allow_evicted"}
REQUIRED = {"env_id", "agent_steps"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", required=True, help="task name (folder name under results/single)")
    p.add_argument("--spec", required=True,
                   help="JSON object of the task settings (docs/artifacts.md), or @file.json")
    p.add_argument("--seeds", required=True, type=int, nargs="+", help="seeds, run vmapped in one program")
    p.add_argument("--outdir", required=True, help="results/single/{task}")
    add_checkpoint_arguments(p, "agent steps", "only when stopped by a signal and at the end")


def parse_spec(text: str) -> dict:
    """The task settings from JSON text or ``@path``; raises ValueError naming bad keys."""
    return _parse_spec(text, SPEC_KEYS, REQUIRED)


def run(args) -> int:
    spec = parse_spec(args.spec)

    seeds = list(args.seeds)
    outdir = Path(args.outdir)
    prefix = f"[train-single {args.task}]"
    log = lambda msg: print(f"{prefix} {msg}", file=sys.stderr, flush=True)
    from ..run.lock import FolderInUseError, exclusive_folder

    with library_log(prefix):  # checkpoints written, resumes: into this job's log
        try:
            # one writer per checkpoint folder (a resubmitted job while the first still runs)
            with exclusive_folder(args.checkpoint_dir):
                return _run(args, spec, seeds, outdir, log)
        except FolderInUseError as exc:
            log(f"error: {exc}")
            return FOLDER_IN_USE


def _run(args, spec: dict, seeds: list, outdir: Path, log) -> int:
    import numpy as np
    import pyarrow as pa

    from ..io import atomic, attempts, checkpoint, provenance
    from ..agents.single_task import TDMPC2
    from ..agents.export import export_episodes
    from ..io.dataset import save_dataset
    from ..model.networks import MATMUL_PRECISION
    from ..run.compiled import per_program
    from ..run.driver import TrainingInterrupted

    agent = TDMPC2(spec["env_id"], n_envs=int(spec.get("n_envs", 1)),
                   episode_length=int(spec.get("episode_length", 1000)),
                   action_repeat=(None if spec.get("action_repeat") is None else int(spec["action_repeat"])), backend=spec.get("backend"),
                   **spec.get("agent", {}))
    n_timesteps = int(spec["agent_steps"])
    eval_every = int(spec.get("eval_every", 0)) or None
    eval_episodes = int(spec.get("eval_episodes", 10))
    log(f"env {spec['env_id']}: T={agent.episode_length} agent steps, action_repeat={agent.action_repeat}, "
        f"gamma={agent.gamma:.4f}, seed_steps={agent.seed_steps}, seeds={seeds}, {n_timesteps} agent steps"
        + (", episodic (termination head)" if agent.episodic else ""))
    for seed in seeds:  # a stale marker of completeness must not outlive a run that fails
        (outdir / f"seed{seed}" / "run.json").unlink(missing_ok=True)

    ckdir = Path(args.checkpoint_dir) if args.checkpoint_dir else None
    # this session's record beside the checkpoints (before the folder is opened: a finished run's
    # folder starts a new list); run.json gets every attempt of a resumed run
    attempt = attempts.begin(ckdir, "agent steps")
    open_checkpoint_dir(ckdir, log)  # a finished run's folder is cleared: a forced rerun trains anew

    t_start = time.perf_counter()
    # progress: rate of the training ticks of this session (seed-phase ticks are far faster)
    prog = {"last_log": time.perf_counter(), "train_steps": 0, "train_seconds": 0.0, "last_eval": None,
            "start": None}

    def status(done: int, total: int, phase: str, rate: float) -> str:
        msg = f"{done}/{total} agent steps ({100.0 * done / max(total, 1):.0f}%, {phase}), {rate:.1f} agent steps/s"
        if prog["train_seconds"] > 0:
            left = (total - done) * prog["train_seconds"] / prog["train_steps"]
            msg += f", ~{hms(left)} left"
        if prog["last_eval"] is not None:
            msg += ", last eval return " + " ".join(f"{x:.1f}" for x in np.atleast_1d(prog["last_eval"]))
        return msg

    def on_progress(p):
        if prog["start"] is None:
            prog["start"] = p["start_agent_steps"]
        if p["last_eval_return"] is not None:
            prog["last_eval"] = p["last_eval_return"]
        if p["phase"] == "train":
            prog["train_steps"] += p["agent_steps_per_s"] * p["seconds"]
            prog["train_seconds"] += p["seconds"]
        now = time.perf_counter()
        if now - prog["last_log"] >= args.progress_seconds and p["agent_steps"] < p["total_agent_steps"]:
            prog["last_log"] = now
            log(status(p["agent_steps"], p["total_agent_steps"], p["phase"], p["agent_steps_per_s"]))

    def on_chunk(rec):
        if "eval_return" in rec:
            prog["last_eval"] = rec["eval_return"]
        prog["last_log"] = time.perf_counter()
        if rec["phase"] == "burst":
            log(f"{rec['agent_steps']}/{n_timesteps} agent steps: seed-phase burst of {agent.seed_steps} updates "
                f"took {rec['chunk_seconds']:.0f} s")
        else:
            log(status(rec["agent_steps"], n_timesteps, rec["phase"], rec["agent_steps_per_s"]))

    with SignalStop(log, ckdir is not None) as stop:
        try:
            state, hist = agent.train(
                seed=seeds, n_timesteps=n_timesteps, total_timesteps=n_timesteps, eval_every=eval_every,
                eval_episodes=eval_episodes, callback=on_chunk, progress=on_progress, should_stop=stop.should_stop,
                max_chunk_seconds=args.max_chunk_seconds, checkpoint_dir=ckdir,
                checkpoint_every=args.checkpoint_every, keep_checkpoints=args.keep_checkpoints)
        except TrainingInterrupted as exc:
            where = (f"checkpoint {exc.checkpoint.path} ({exc.checkpoint.bytes / 1e6:.1f} MB, "
                     f"{exc.checkpoint.seconds:.1f} s); rerun the same command to resume"
                     if exc.checkpoint is not None else "no checkpoint (no --checkpoint-dir)")
            log(f"stopped by {stop.name} at {exc.agent_steps}/{n_timesteps} agent steps: {where}")
            attempt.end(f"stopped by {stop.name}", end_step=exc.agent_steps, start_step=prog["start"],
                        compile_seconds=per_program(agent.compile_seconds))
            return stop.exit_code
        except (checkpoint.CheckpointMismatchError, checkpoint.CorruptCheckpointError) as exc:
            attempt.discard()  # not a session of the run whose checkpoints the folder holds
            log(f"error: {exc}")
            log(mismatch_message(ckdir))
            return 2
    wall = time.perf_counter() - t_start
    prov = provenance.collect(".", include_jax=True)
    # agent steps this session started from (0: a fresh run; nothing ran: the run was already trained)
    started_at = prog["start"] if prog["start"] is not None else n_timesteps
    attempt.end("completed", end_step=n_timesteps, start_step=started_at,
                compile_seconds=per_program(agent.compile_seconds))
    rows = hist["chunks"]  # one row per chunk of the schedule, including those of earlier sessions

    for i, seed in enumerate(seeds):
        d = outdir / f"seed{seed}"
        d.mkdir(parents=True, exist_ok=True)
        runjson = d / "run.json"
        if runjson.exists():
            runjson.unlink()  # the marker of completeness goes first, comes back last
        n_eval = len(hist["eval_agent_steps"])
        E = eval_episodes
        ev = {
            "task": [args.task] * (n_eval * E),
            "seed": np.full(n_eval * E, seed, np.int64),
            "eval_index": np.repeat(np.arange(n_eval, dtype=np.int64), E),
            "agent_steps": np.repeat(np.asarray(hist["eval_agent_steps"], np.int64), E),
            "env_frames": np.repeat(np.asarray(hist["eval_env_frames"], np.int64), E),
            "episode": np.tile(np.arange(E, dtype=np.int64), n_eval),
            "return": (np.asarray(hist["eval_returns"])[:, i, :].reshape(-1).astype(np.float64)
                       if n_eval else np.zeros(0)),
            "length": (np.asarray(hist["eval_lengths"])[:, i, :].reshape(-1).astype(np.int64)
                       if n_eval else np.zeros(0, np.int64)),
        }
        atomic.write_parquet(d / "eval.parquet", pa.table(ev))
        met = {"task": [args.task] * len(rows), "seed": np.full(len(rows), seed, np.int64)}
        met["agent_steps"] = np.array([r["agent_steps"] for r in rows], np.int64)
        met["env_frames"] = np.array([r["env_frames"] for r in rows], np.int64)
        met["updates"] = np.array([np.asarray(r["updates"])[i] for r in rows], np.int64)
        met["wall_time_s"] = np.array([r["wall_time_s"] for r in rows], np.float64)
        met["agent_steps_per_s"] = np.array([r["agent_steps_per_s"] for r in rows], np.float64)
        for k in ("consistency_loss", "reward_loss", "value_loss", "pi_loss", "total_loss", "grad_norm",
                  "pi_grad_norm", "pi_scale", "train_return"):
            met[k] = np.array([np.asarray(r[k])[i] for r in rows], np.float64)
        if agent.episodic:  # the termination head's loss (spec §11.3)
            met["termination_loss"] = np.array([np.asarray(r["termination_loss"])[i] for r in rows], np.float64)
        atomic.write_parquet(d / "metrics.parquet", pa.table(met))
        episodes = export_episodes(agent, state, seed_index=i, name=args.task, seed=seed,
                                   allow_evicted=bool(spec.get("allow_evicted", False)),
                                   provenance={"spec": spec, **prov})
        size = save_dataset(episodes, d / "episodes.parquet")
        log(f"seed {seed}: exported {episodes.num_episodes} episodes ({episodes.num_transitions} agent steps, "
            f"{size / 1e6:.1f} MB) to {d / 'episodes.parquet'}")
        final = hist["eval_return"][-1, i] if n_eval else None
        atomic.write_json(runjson, {
            "task": args.task, "seed": seed, "seeds_in_job": seeds, "spec": spec,
            "agent_config": agent.config, "gamma": agent.gamma, "seed_steps": agent.seed_steps,
            "agent_steps": n_timesteps, "env_frames": n_timesteps * agent.action_repeat,
            "final_eval_return": final,
            "dataset_episodes": episodes.num_episodes, "dataset_agent_steps": episodes.num_transitions,
            "matmul_precision": f"float32 ({MATMUL_PRECISION.name}); jax_default_matmul_precision="
                                f"{prov['platform'].get('jax_default_matmul_precision')}",
            "compile_seconds": per_program(agent.compile_seconds),
            "compile_detail": agent.compile_seconds, "wall_seconds": wall,
            "training_wall_seconds_all_sessions": hist["wall_seconds"],
            "resumed_from_agent_steps": started_at or None,
            "attempts": attempt.records(),  # every session of the run (tdmpc2core.io.attempts)
            "checkpoint_dir": str(ckdir) if ckdir is not None else None,
            "provenance": prov,
        })
    # the outputs are complete: keep only the final checkpoint (the trained agent) and mark the
    # run finished, so that a forced rerun of this job trains anew instead of resuming
    close_checkpoint_dir(ckdir, {"task": args.task, "seeds": seeds, "agent_steps": n_timesteps,
                                 "outdir": str(outdir)})
    log(f"done in {wall:.0f} s (compiling: " + ", ".join(f"{k} {v:.0f} s" for k, v in
                                                     per_program(agent.compile_seconds).items())
        + "); final eval return "
        + (" ".join(f"{x:.1f}" for x in hist["eval_return"][-1]) if len(hist["eval_agent_steps"]) else "n/a"))
    return 0
