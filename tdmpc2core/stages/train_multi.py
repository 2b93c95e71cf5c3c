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
aside); a signal while the outputs are written (training complete) stops after the atomic write
under way, with run.json removed and exit 143/130 (:func:`~tdmpc2core.stages.resumable.final_phase`). Exit code 2: the checkpoint folder belongs to another run (settings named) or holds
only damaged checkpoints; 4: another process holds the checkpoint folder (its lock,
:mod:`tdmpc2core.run.lock`); 5: a job of several processes whose jax.distributed join did not
complete within ``--distributed-timeout`` (one line naming the coordinator and the timeout,
:func:`tdmpc2core.run.devices.initialize_distributed`). As ``tdmpc2 train-single`` (docs/pipeline.md, "Preemption"), the
session's record in ``attempts.json`` gets a ``stop`` (in updates) when a signal or an exception
ends it (:func:`~tdmpc2core.stages.resumable.train_session`).
"""
from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from pathlib import Path
from typing import Optional

from ..io.spec import MultiSpec
from .resumable import (FOLDER_IN_USE, OTHER_JOBS_FOLDER, OtherJobsFolderError, check_finished_run, SignalStop, add_checkpoint_arguments, add_device_arguments,
                        add_logger_arguments, close_checkpoint_dir, completed_session, hms, job_loggers, join_processes,
                        library_log, open_checkpoint_dir, final_phase, signal_safe_log)

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pool", required=True, help="pool name (folder name under results/multi)")
    p.add_argument("--model-size", required=True, type=int, help="model-size preset {1, 5, 19, 48, 317}")
    p.add_argument("--dataset", required=True, help="the pooled episode dataset (Parquet)")
    p.add_argument("--spec", required=True,
                   help="JSON object of the multi-task settings (docs/artifacts.md), or @file.json")
    p.add_argument("--seeds", required=True, type=int, nargs="+", help="seeds, run vmapped in one program")
    p.add_argument("--outdir", required=True, help="results/multi/{pool}/size{model_size}")
    p.add_argument("--video", default="off", choices=["off", "last", "every"],
                   help="evaluation videos: 'last' records one episode per evaluated task of the first seed "
                        "acting as the last evaluation acts, written to {outdir}/videos/{task}.mp4 "
                        "(docs/artifacts.md); 'every' is for single-task runs only (refused here); default off")
    add_checkpoint_arguments(p, "updates", "only when stopped by a signal and at the end")
    add_logger_arguments(p)
    add_device_arguments(p, processes=True)


def parse_spec(text: str, model_size: Optional[int] = None) -> MultiSpec:
    """The multi-task settings from JSON text or ``@path``, for a job of ``model_size``
    (:meth:`tdmpc2core.io.spec.MultiSpec.parse`; raises ValueError naming bad keys)."""
    return MultiSpec.parse(text, model_size=model_size)


def run(args) -> int:
    spec = parse_spec(args.spec, args.model_size)
    from ..agents.video import check_video_mode
    from ..run.driver import check_eval_every

    check_video_mode(getattr(args, "video", "off"), every=False)  # 'every': single-task only
    check_eval_every(spec.eval_every, "updates")  # before anything is built or recorded

    prefix = f"[train-multi {args.pool} size{args.model_size}]"
    log = lambda msg: print(f"{prefix} {msg}", file=sys.stderr, flush=True)
    from ..run import devices
    from ..run.lock import FolderInUseError, exclusive_folder

    if join_processes(args, log):  # a job of several processes: before anything touches a device
        prefix = f"[train-multi {args.pool} size{args.model_size} p{devices.process_index()}]"
        if not devices.is_primary():
            with library_log(prefix):
                return _follow(args, spec, log)
    with library_log(prefix):  # checkpoints written, resumes: into this job's log
        try:
            # one writer per checkpoint folder (a resubmitted job while the first still runs)
            with exclusive_folder(args.checkpoint_dir):
                return _run(args, spec, log, signal_safe_log(prefix))
        except FolderInUseError as exc:
            log(f"error: {exc}")
            return FOLDER_IN_USE
        except OtherJobsFolderError as exc:
            log(f"error: {exc}")
            return OTHER_JOBS_FOLDER


def _make_agent(args, spec: MultiSpec, log):
    """The pooled dataset and the agent of ``spec`` on it (the batch size checked against the
    pool's slices), logged."""
    from ..agents.multitask import TDMPC2MultiTask
    from ..extensions import make_extensions
    from ..io.dataset import load_dataset
    from ..model.config import check_batch_size, slices_in_episodes

    dataset = load_dataset(args.dataset)
    eval_envs = True
    if spec.eval_tasks is not None:  # evaluate these tasks only (trained on all)
        table = {t.name: t for t in dataset.tasks}
        bad = [n for n in spec.eval_tasks if n not in table or not table[n].env_id]
        if bad or not spec.eval_tasks:
            raise ValueError(f"spec eval_tasks: {bad or 'empty'}: each must be a task of {args.dataset} with an "
                             f"env_id; evaluable: {[t.name for t in dataset.tasks if t.env_id]}")
        eval_envs = [t.env_id if t.name in spec.eval_tasks else None for t in dataset.tasks]
    agent = TDMPC2MultiTask(dataset, eval_envs=eval_envs, devices=getattr(args, "devices", None),
                            return_ranges=spec.return_ranges, backend=spec.backend,
                            device_budget_bytes=spec.device_budget_bytes,
                            extensions=make_extensions(spec.extensions or []), **spec.agent_settings())
    # a batch of more slices than the pool holds would repeat slices: refused with the check the
    # workflow runs on its prediction of the pool at load (tdmpc2core.model.config)
    check_batch_size(agent.cfg.batch_size, slices_in_episodes(dataset.episode_rows, agent.cfg.horizon),
                     f"the pooled dataset {args.dataset}", "lower multitask.batch_size")
    placed = ("on the device once" if agent.data_placement == "device" else
              f"in host memory: over the device budget of {agent.device_budget_bytes} bytes, batches moved")
    log(f"{len(agent.task_names)} tasks {agent.task_names}: {dataset.num_episodes} episodes, "
        f"{dataset.num_transitions} transitions ({agent.pool_nbytes / 1e6:.1f} MB of rows {placed}); "
        f"evaluated: {agent.eval_task_names}; obs {agent.obs_dim}, action {agent.action_dim} "
        f"(padded), task_dim {agent.task_dim}, batch {agent.cfg.batch_size}, discounts "
        + ", ".join(f"{n} {g:.3f}" for n, g in agent.task_gammas.items())
        + f"; {agent.placement.n_devices} device(s)"
        + (f" (batch split over {dict(agent.placement.mesh.shape)})" if agent.placement.mesh is not None else "")
        + f"; seeds {list(args.seeds)}, {int(spec.updates)} updates, evaluation every "
          f"{spec.eval_every} updates"
        + (f"; extensions {spec.extensions}" if spec.extensions else ""))
    from ..envs.params import describe

    for t in dataset.tasks:  # the evaluation envs are built with these (the task table's)
        if t.env_params:
            log(f"task {t.name}: env settings {describe(t.env_params)} (from the pool's task table)")
    return dataset, agent


class _Progress:
    """The stage's progress lines (after every chunk, at least every ``--progress-seconds``) and
    the steps :func:`~tdmpc2core.stages.resumable.train_session` reads: ``start`` (the updates
    this session started from) and ``step`` (the last reported)."""

    def __init__(self, log, names: list, updates: int, progress_seconds: float):
        self.log, self.names, self.total, self.every = log, names, updates, progress_seconds
        self.last_log, self.updates, self.seconds = time.perf_counter(), 0, 0.0
        self.start, self.score, self.done, self.step = None, None, 0, None

    def left(self) -> str:
        return (f", ~{hms((self.total - self.done) * self.seconds / self.updates)} left"
                if self.updates and self.seconds else "")

    def on_progress(self, p) -> None:
        import numpy as np

        if self.start is None:  # the first call compiles: it does not set the rate
            self.start = p["start_updates"]
        else:
            self.updates += p["steps"]
            self.seconds += max(p["seconds"] - p.get("compile_seconds", 0.0), 0.0)  # compiling is no speed
        self.done = self.step = p["updates"]
        if p["last_normalized_score"] is not None:
            self.score = p["last_normalized_score"]
        now = time.perf_counter()
        if now - self.last_log >= self.every and p["updates"] < self.total:
            self.last_log = now
            msg = f"{p['updates']}/{self.total} updates ({100.0 * p['updates'] / self.total:.0f}%), " \
                  f"{p['updates_per_s']:.1f} updates/s{self.left()}"
            if self.score is not None:
                msg += ", last normalized score " + " ".join(f"{x:.1f}" for x in np.atleast_1d(self.score))
            self.log(msg)

    def on_chunk(self, rec) -> None:
        import numpy as np

        self.last_log = time.perf_counter()
        self.done = self.step = rec["updates"]
        msg = (f"{rec['updates']}/{self.total} updates, {rec['updates_per_s']:.1f} updates/s{self.left()}, "
               f"total loss " + " ".join(f"{x:.3f}" for x in np.atleast_1d(rec["total_loss"])))
        if "eval_return" in rec:
            msg += ("; eval return per task (" + ", ".join(self.names) + "): "
                    + "; ".join(" ".join(f"{x:.1f}" for x in row) for row in np.asarray(rec["eval_return"]))
                    + "; normalized score " + " ".join(f"{x:.1f}" for x in np.atleast_1d(rec["normalized_score"])))
        self.log(msg)


def _run(args, spec: MultiSpec, log, log_now=None) -> int:
    """One session: train (or resume) the seeds on the pool, then write the job's outputs;
    returns the exit code (module docstring). ``log_now``: the log a signal handler may call
    (:func:`~tdmpc2core.stages.resumable.signal_safe_log`)."""
    from ..io import attempts, provenance
    from ..run.compiled import compiling_note, per_program

    seeds = list(args.seeds)
    outdir = Path(args.outdir)
    # another job's finished run in the checkpoint folder (a mistyped --checkpoint-dir): refused
    # before anything is built or written, its trained agent kept
    check_finished_run(Path(args.checkpoint_dir) if args.checkpoint_dir else None,
                       {"pool": args.pool, "seeds": seeds, "outdir": str(outdir)})
    if (outdir / "run.json").exists():
        (outdir / "run.json").unlink()  # the marker of completeness goes first, comes back last
    for old in (outdir / VIDEO_DIR).glob("*.mp4"):  # nor a video of another run
        old.unlink()

    t_start = time.perf_counter()
    dataset, agent = _make_agent(args, spec, log)
    from .train_single import check_rendering

    # the videos need MuJoCo's OpenGL rendering: checked before training, not after it
    check_rendering([env for env in (agent.eval_envs or []) if env is not None], getattr(args, "video", "off"),
                    False, log)
    updates = int(spec.updates)
    ckdir = Path(args.checkpoint_dir) if args.checkpoint_dir else None
    # this session's record beside the checkpoints (before the folder is opened: a finished run's
    # folder starts a new list); run.json gets every attempt of a resumed run
    attempt = attempts.begin(ckdir, "updates")
    open_checkpoint_dir(ckdir, log)  # a finished run's folder is cleared: a forced rerun trains anew
    _barrier("checkpoint folder opened")  # the other processes of a job resume from it after this

    prog = _Progress(log, agent.eval_task_names, updates, args.progress_seconds)
    eval_episodes = int(spec.eval_episodes or 10)
    where = f"multi/{args.pool}/size{args.model_size}"
    loggers = job_loggers(args, log, where, f"{args.pool}-size{args.model_size}", seeds, lambda:
                          {"pool": args.pool, "model_size": args.model_size, "protocol": args.logger_group,
                           "spec": spec.record, "agent": agent.config})
    train = functools.partial(agent.train, **_train_arguments(args, spec), callback=prog.on_chunk,
                              progress=prog.on_progress, loggers=loggers)
    # one SignalStop for training and the final phase (as train-single: docs/pipeline.md, "Stopping")
    with SignalStop(log, ckdir is not None, log_now) as stop:
        result = completed_session(train, attempt=attempt, log=log, ckdir=ckdir, total=updates, steps=prog,
                                   compile_seconds=lambda: per_program(agent.compile_seconds), stop=stop,
                                   loggers=loggers)
        if isinstance(result, int):
            return result
        state, hist, started_at = result
        wall = time.perf_counter() - t_start
        prov = provenance.collect(".", include_jax=True)
        result_final = {}

        def write(boundary) -> None:
            boundary()
            videos = None
            if getattr(args, "video", "off") == "last":
                videos = write_task_videos(agent, state, seeds[0], eval_episodes, outdir / VIDEO_DIR, log)
            result_final["final"] = _write_outputs(
                args, spec.record, seeds, outdir, dataset, agent, state, hist, eval_episodes, {
                    **({"videos": videos} if videos is not None else {}),
                    "wall_seconds": wall, "training_wall_seconds_all_sessions": hist["wall_seconds"],
                    "resumed_from_updates": started_at or None,
                    "attempts": attempt.records(),  # every session of the run (tdmpc2core.io.attempts)
                    "checkpoint_dir": str(ckdir) if ckdir is not None else None, "provenance": prov},
                boundary)

        rc = final_phase(write, stop=stop, attempt=attempt, log=log, ckdir=ckdir, total=updates,
                         discard=lambda: (outdir / "run.json").unlink(missing_ok=True))
        if rc:
            return rc
        final = result_final["final"]
        close_checkpoint_dir(ckdir, {"pool": args.pool, "model_size": args.model_size, "seeds": seeds,
                                     "updates": updates, "outdir": str(outdir)})
        log(f"done in {wall:.0f} s ({compiling_note(agent.compile_seconds)})"
            + ("" if final is None else
               "; final normalized score " + " ".join("n/a" if x is None else f"{x:.1f}"
                                                      for x in final["normalized_score"])))
    return 0


#: the evaluation videos' folder under --outdir: one {task}.mp4 per evaluated task (docs/artifacts.md)
VIDEO_DIR = "videos"


def write_task_videos(agent, state, seed: int, eval_episodes: int, folder: Path, log) -> dict:
    """One video per evaluated task of the job's first seed (position 0 in ``state``), acting as
    the last evaluation acts (:meth:`TDMPC2MultiTask.record_episode`), written atomically to
    ``folder/{task}.mp4`` (the folder always made); returns run.json's ``videos``: task -> what
    :func:`tdmpc2core.stages.train_single.record_and_write` returns, with ``seed`` and ``updates``."""
    import numpy as np

    from ..run.devices import local
    from .train_single import VIDEO_MAX_FRAMES, VIDEO_SIZE, record_and_write

    folder.mkdir(parents=True, exist_ok=True)
    updates = int(np.asarray(local(state).agent.updates).reshape(-1)[0])
    out = {}
    for i, name in zip(agent.eval_task_ids, agent.eval_task_names):
        rec = record_and_write(
            agent.eval_envs[i], lambda i=i: agent.record_episode(state, i, 0, seed=seed, eval_episodes=eval_episodes,
                                                                 width=VIDEO_SIZE, height=VIDEO_SIZE,
                                                                 max_frames=VIDEO_MAX_FRAMES),
            lambda i=i: agent.video_renderer(i), agent.record_seconds, folder / f"{name}.mp4", log,
            f"task {name}, seed {seed}")
        out[name] = rec if rec.get("file") is None else {**rec, "file": f"{VIDEO_DIR}/{name}.mp4", "seed": seed,
                                                         "updates": updates}
    return out


def _train_arguments(args, spec: MultiSpec) -> dict:
    """The ``train`` arguments of the job (every process of a multi-process job passes the same)."""
    updates = int(spec.updates)
    return dict(seed=list(args.seeds), n_timesteps=updates, total_timesteps=updates,
                eval_every=spec.eval_every, eval_episodes=int(spec.eval_episodes or 10),
                log_every=int(spec.log_every or 0) or None, max_chunk_seconds=args.max_chunk_seconds,
                checkpoint_dir=Path(args.checkpoint_dir) if args.checkpoint_dir else None,
                checkpoint_every=args.checkpoint_every, keep_checkpoints=args.keep_checkpoints, progress_bar=False)


def _barrier(name: str) -> None:
    """Every process of a multi-process job waits here (nothing in a one-process job)."""
    from ..run import devices

    if devices.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def _follow(args, spec: MultiSpec, log) -> int:
    """A process other than 0 of a multi-process job: the same agent and the same ``train`` call
    (every program is a collective of the job), no outputs, checkpoints, attempt records or
    loggers (process 0 writes them); 143 when the job was stopped by a signal (to any process),
    with process 0's checkpoint."""
    from ..run.driver import TrainingInterrupted

    dataset, agent = _make_agent(args, spec, log)
    updates = int(spec.updates)
    _barrier("checkpoint folder opened")  # process 0 has cleared or kept the folder
    with SignalStop(log, args.checkpoint_dir is not None) as stop:
        try:
            agent.train(**_train_arguments(args, spec), should_stop=stop.should_stop)
        except TrainingInterrupted as exc:
            log(f"stopped with the job at {exc.step}/{updates} updates (process 0 wrote the checkpoint)")
            return stop.exit_code if stop.signum is not None else 128 + 15
    log(f"done: {updates} updates (process 0 writes the outputs)")
    return 0


def _write_outputs(args, spec: dict, seeds: list, outdir: Path, dataset, agent, state, hist: dict,
                   eval_episodes: int, session: dict, boundary=lambda: None) -> Optional[dict]:
    """eval.parquet, metrics.parquet and, last, run.json (docs/artifacts.md, "Multi-task run"),
    each written atomically, ``boundary()`` before each (where a stop asked in the final phase
    is acted on: :func:`~tdmpc2core.stages.resumable.final_phase`); ``session``: run.json's
    keys of this session (wall time, attempts, provenance, ...). Returns run.json's ``final``
    (None without an evaluation)."""
    from ..io import atomic
    from . import outputs

    names = agent.eval_task_names
    ranges = [agent.return_ranges[n] for n in names]
    boundary()
    outputs.write_table(outdir / "eval.parquet", "multi_eval", outputs.multi_eval_columns(
        args.pool, args.model_size, names, seeds, hist, eval_episodes, ranges))
    # one row per seed and chunk of the schedule, including those of earlier sessions
    boundary()
    outputs.write_table(outdir / "metrics.parquet", "multi_metrics",
                        outputs.multi_metrics_columns(args.pool, args.model_size, seeds, hist["chunks"]))
    run = _run_json(args, spec, seeds, dataset, agent, state, hist, session)
    boundary()
    atomic.write_json(outdir / "run.json", run)
    return run["final"]


def _run_json(args, spec: dict, seeds: list, dataset, agent, state, hist: dict, session: dict) -> dict:
    """The job's run.json (docs/artifacts.md, "Multi-task run")."""
    import jax
    import numpy as np

    from ..model.networks import count_params
    from ..pipeline.codeversion import code_version
    from ..run.compiled import per_program
    from . import outputs

    from ..run import devices

    names = agent.eval_task_names
    records = hist["chunks"]
    params0 = jax.tree_util.tree_map(lambda x: x[0], devices.to_host(state.agent.params))
    final = None
    if len(hist["eval_updates"]):
        final = {"updates": int(hist["eval_updates"][-1]),
                 "return": {n: [float(x) for x in hist["eval_return"][-1][:, k]] for k, n in enumerate(names)},
                 "mean_return": [float(x) for x in hist["eval_mean_return"][-1]],
                 "normalized_score": [None if math.isnan(x) else float(x) for x in hist["normalized_score"][-1]]}
        if "eval_success_rate" in hist:  # tasks with a success flag: their rate in [0, 1] (last-step rule)
            final["success_rate"] = {n: [float(x) for x in hist["eval_success_rate"][-1][:, k]]
                                     for k, n in enumerate(names) if not np.isnan(hist["eval_success_rate"][-1][:, k]).all()}
            final["success_rate_rule"] = outputs.FINAL_SUCCESS_RULE
    speeds = [r["updates_per_s"] for r in records[1:]] or [r["updates_per_s"] for r in records]
    prov = session["provenance"]
    return {
        "pool": args.pool, "model_size": args.model_size, "seeds": seeds, "spec": spec, "dataset": args.dataset,
        "dataset_episodes": dataset.num_episodes, "dataset_transitions": dataset.num_transitions,
        "dataset_provenance": dataset.provenance,
        "agent_config": agent.config, "task_dim": agent.task_dim, "gammas": agent.task_gammas,
        "return_ranges": {n: (None if rg is None else list(rg))
                          for n, rg in zip(names, (agent.return_ranges[n] for n in names))},
        "params": count_params(params0), "updates": int(spec["updates"]), "final": final,
        "eval_tasks": names, "data_placement": agent.data_placement, "pool_nbytes": agent.pool_nbytes,
        "device_budget_bytes": agent.device_budget_bytes, "host_sampling": dict(agent.host_timing),
        "updates_per_s_median": float(np.median(speeds)) if speeds else None,
        "matmul_precision": outputs.matmul_precision_note(agent.config["matmul_precision"], prov["platform"]),
        "code_version": code_version("train_multi"),  # the rerun_on_code_change check (pipeline/codeversion.py)
        "compile_seconds": per_program(agent.compile_seconds), "compile_detail": agent.compile_seconds,
        "devices": devices.record(agent.placement),  # device and process counts, the mesh
        **session,
    }
