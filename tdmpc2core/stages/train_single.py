"""``tdmpc2 train-single``: train single-task TD-MPC2 seeds (vmapped) on one task.

Writes ``{outdir}/seed{S}/eval.parquet``, ``metrics.parquet``, ``episodes.parquet`` (the
seed's replay as an episode dataset, :func:`tdmpc2core.dataset.export_episodes`; not for a
pixel run, spec ``"agent": {"obs": "rgb"}``: datasets are state-only) and, last,
``run.json`` for every seed (docs/artifacts.md), only once training is complete. A job whose videos
(``--video``) or pixel observations need MuJoCo's OpenGL rendering checks it first and refuses
to start, in one line, where it cannot work (:func:`check_rendering`); a video that still fails
after training costs the video alone (:func:`record_and_write`). Progress is logged to stderr
after every chunk of the schedule and at least every ``--progress-seconds``: agent steps done
of the total, agent steps/s, time left (from this session's training-tick rate, the seconds its
calls spent compiling left out), the last evaluation return.

With ``--checkpoint-dir`` the job can be stopped and resumed (docs/pipeline.md,
"Preemption"): SIGTERM or SIGINT stops training at the next boundary between calls of the
compiled program (at most ``--max-chunk-seconds`` of compute away), writes a checkpoint and
exits with 128 + the signal number (143, 130) without writing outputs; the same command run
again resumes from the newest complete checkpoint, and its outputs equal those of an
uninterrupted run (wall-clock columns aside). A second Ctrl-C gives up the checkpoint (it
raises KeyboardInterrupt once the running call returns; SIGKILL stops at once). Once the
outputs are written the folder keeps only the final checkpoint and an
``outputs_written.json`` marker: running the job again (a forced rerun) trains anew.
A signal once training is complete (while the video and the outputs are written) is held the
same way (:func:`~tdmpc2core.stages.resumable.final_phase`): logged at once, acted on once the
atomic write under way is done; the job's run.json files are removed, the exit code is 143/130
and the rerun resumes from the final checkpoint and writes every output (docs/pipeline.md,
"Stopping in the final phase").
Exit codes: 0 done, 2 the checkpoint folder belongs to another run (settings named) or
holds only damaged checkpoints, 4 the checkpoint folder is in use by another process (its
lock, :mod:`tdmpc2core.run.lock`; nothing read or written), 130/143 stopped by SIGINT/SIGTERM.
Each session records itself in the checkpoint folder's ``attempts.json``
(:mod:`tdmpc2core.io.attempts`); one stopped by a signal or ended by an exception also records
a ``stop`` (kind, signal, step and total in agent steps, the checkpoint written or why none, the
error's one line), which the end-of-run hook reads (:func:`~tdmpc2core.stages.resumable.train_session`).
An exception is re-raised after its record is written.
"""
from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

from ..io.spec import TaskSpec
from .resumable import (FOLDER_IN_USE, OTHER_JOBS_FOLDER, OtherJobsFolderError, check_finished_run, SignalStop, add_checkpoint_arguments, add_device_arguments,
                        add_logger_arguments, close_checkpoint_dir, completed_session, final_phase, hms, job_loggers,
                        library_log, open_checkpoint_dir, signal_safe_log)

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", required=True, help="task name (folder name under results/single)")
    p.add_argument("--spec", required=True,
                   help="JSON object of the task settings (docs/artifacts.md), or @file.json")
    p.add_argument("--seeds", required=True, type=int, nargs="+", help="seeds, run vmapped in one program")
    p.add_argument("--outdir", required=True, help="results/single/{task}")
    p.add_argument("--video", default="off", choices=["off", "last", "every"],
                   help="evaluation video: 'last' records one episode of the first seed acting as the last "
                        "evaluation acts, written to {outdir}/seed{first seed}/video.mp4 (docs/artifacts.md); "
                        "'every' records one at every evaluation, {outdir}/seed{first seed}/videos/"
                        "agent_steps_<N>.mp4, and copies the last to video.mp4; default off. MuJoCo's OpenGL "
                        "rendering is checked before training; a recording that still fails costs the video "
                        "alone (run.json's video.error; video.mp4 is then an empty file)")
    add_checkpoint_arguments(p, "agent steps", "only when stopped by a signal and at the end")
    add_logger_arguments(p)
    add_device_arguments(p, processes=False)


def parse_spec(text: str) -> TaskSpec:
    """The task settings from JSON text or ``@path`` (:meth:`tdmpc2core.io.spec.TaskSpec.parse`;
    raises ValueError naming bad keys)."""
    return TaskSpec.parse(text)


def run(args) -> int:
    spec = parse_spec(args.spec)
    from ..agents.video import check_video_mode
    from ..run.driver import check_eval_every

    check_video_mode(getattr(args, "video", "off"))
    check_eval_every(spec.eval_every, "agent steps")  # before anything is built or recorded

    seeds = list(args.seeds)
    outdir = Path(args.outdir)
    prefix = f"[train-single {args.task}]"
    log = lambda msg: print(f"{prefix} {msg}", file=sys.stderr, flush=True)
    # videos and pixels need MuJoCo's OpenGL rendering: checked now, not after training
    check_rendering([spec.env_id], getattr(args, "video", "off"), spec.agent_settings().get("obs", "state") == "rgb",
                    log)
    from ..run.lock import FolderInUseError, exclusive_folder

    with library_log(prefix):  # checkpoints written, resumes: into this job's log
        try:
            # one writer per checkpoint folder (a resubmitted job while the first still runs)
            with exclusive_folder(args.checkpoint_dir):
                return _run(args, spec, seeds, outdir, log, signal_safe_log(prefix))
        except FolderInUseError as exc:
            log(f"error: {exc}")
            return FOLDER_IN_USE
        except OtherJobsFolderError as exc:
            log(f"error: {exc}")
            return OTHER_JOBS_FOLDER


class _Progress:
    """The stage's progress lines (after every chunk, at least every ``--progress-seconds``) and
    the steps :func:`~tdmpc2core.stages.resumable.train_session` reads: ``start`` (the agent
    steps this session started from) and ``step`` (the last reported)."""

    def __init__(self, log, agent, n_timesteps: int, progress_seconds: float):
        self.log, self.agent, self.total, self.every = log, agent, n_timesteps, progress_seconds
        # the rate of this session's training ticks (seed-phase ticks are far faster), without the
        # seconds its calls spent compiling (a resumed session compiles in its first training call)
        self.last_log, self.train_steps, self.train_seconds = time.perf_counter(), 0, 0.0
        self.chunk_steps, self.chunk_seconds = 0, 0.0  # the chunk in progress, compiling left out
        self.last_eval, self.start, self.step = None, None, None

    def status(self, done: int, total: int, phase: str, rate: float) -> str:
        import numpy as np

        msg = f"{done}/{total} agent steps ({100.0 * done / max(total, 1):.0f}%, {phase}), {rate:.1f} agent steps/s"
        if self.train_seconds > 0:
            left = (total - done) * self.train_seconds / self.train_steps
            msg += f", ~{hms(left)} left"
        if self.last_eval is not None:
            msg += ", last eval return " + " ".join(f"{x:.1f}" for x in np.atleast_1d(self.last_eval))
        return msg

    def on_progress(self, p) -> None:
        if self.start is None:
            self.start = p["start_agent_steps"]
        self.step = p["agent_steps"]
        if p["last_eval_return"] is not None:
            self.last_eval = p["last_eval_return"]
        running = max(p["seconds"] - p.get("compile_seconds", 0.0), 0.0)
        steps = p.get("steps", p["agent_steps_per_s"] * p["seconds"])
        self.chunk_steps += steps
        self.chunk_seconds += running
        if p["phase"] == "train":
            self.train_steps += steps
            self.train_seconds += running
        now = time.perf_counter()
        if now - self.last_log >= self.every and p["agent_steps"] < p["total_agent_steps"]:
            self.last_log = now
            self.log(self.status(p["agent_steps"], p["total_agent_steps"], p["phase"], p["agent_steps_per_s"]))

    def on_chunk(self, rec) -> None:
        self.step = rec["agent_steps"]
        if "eval_return" in rec:
            self.last_eval = rec["eval_return"]
        self.last_log = time.perf_counter()
        # the chunk's rate without compiling (the record's own includes it), when its calls were reported
        rate = self.chunk_steps / self.chunk_seconds if self.chunk_seconds > 0 else rec["agent_steps_per_s"]
        self.chunk_steps, self.chunk_seconds = 0, 0.0
        if rec["phase"] == "burst":
            self.log(f"{rec['agent_steps']}/{self.total} agent steps: seed-phase burst of {self.agent.seed_steps} "
                     f"updates took {rec['chunk_seconds']:.0f} s")
        else:
            self.log(self.status(rec["agent_steps"], self.total, rec["phase"], rate))


def _make_agent(spec: TaskSpec, seeds: list, log, devices=None):
    """The agent of ``spec`` (its env built with the spec's ``env_params``), its run length in
    agent steps, logged."""
    from ..agents.single_task import TDMPC2
    from ..envs.params import describe
    from ..extensions import make_extensions

    agent = TDMPC2(spec.env_id, n_envs=int(spec.n_envs or 1),
                   episode_length=None if spec.episode_length is None else int(spec.episode_length),
                   action_repeat=None if spec.action_repeat is None else int(spec.action_repeat),
                   env_params=spec.env_params or None, backend=spec.backend,
                   extensions=make_extensions(spec.extensions or []), devices=devices, **spec.agent_settings())
    n_timesteps = int(spec.agent_steps)
    mesh = agent.placement.mesh_for(len(seeds))
    log(f"env {spec.env_id}: T={agent.episode_length} agent steps, action_repeat={agent.action_repeat}, "
        f"gamma={agent.gamma:.4f}, seed_steps={agent.seed_steps}, seeds={seeds}, {n_timesteps} agent steps"
        + (", episodic (termination head)" if agent.episodic else "")
        + (", pixels (obs='rgb': 64x64 RGB frame stacks)" if agent.pixels else "")
        + (f", extensions {spec.extensions}" if spec.extensions else "")
        + f"; env settings: {describe(agent.env.env_params)} (in effect: {describe(agent.env.effective_settings)})"
        + ("; one device" if mesh is None else f"; seeds split over {mesh.devices.size} devices"))
    return agent, n_timesteps


def effective_spec(spec, agent) -> dict:
    """``spec`` (a :class:`~tdmpc2core.io.spec.TaskSpec`, its :attr:`~tdmpc2core.io.spec.TaskSpec.record`,
    or a mapping of its keys) as the run used it: ``episode_length`` the simulator steps of an
    episode of the env that was built (T x action repeat), which differs from the spec's for an
    env that keeps its own time limit (a gymnax Pendulum: 200, whatever the spec said). What
    ``run.json``, the run id and the episodes' provenance record."""
    record = spec.record if isinstance(spec, TaskSpec) else dict(spec)
    return {**record, "episode_length": int(agent.spec.sim_episode_length)}


def _run(args, spec: TaskSpec, seeds: list, outdir: Path, log, log_now=None) -> int:
    """One session: train (or resume) the seeds, then write every seed's outputs; returns the
    exit code (module docstring). ``log_now``: the log a signal handler may call
    (:func:`~tdmpc2core.stages.resumable.signal_safe_log`)."""
    from ..io import attempts, provenance
    from ..run.compiled import compiling_note, per_program

    # another job's finished run in the checkpoint folder (a mistyped --checkpoint-dir): refused
    # before anything is built or written, its trained agent kept
    check_finished_run(Path(args.checkpoint_dir) if args.checkpoint_dir else None,
                       {"task": args.task, "seeds": seeds, "outdir": str(outdir)})
    agent, n_timesteps = _make_agent(spec, seeds, log, getattr(args, "devices", None))
    eval_episodes = int(spec.eval_episodes or 10)
    eval_every = spec.eval_every
    spec = effective_spec(spec, agent)  # the episode length actually used, in run.json and the run id
    for seed in seeds:  # a stale marker of completeness must not outlive a run that fails
        (outdir / f"seed{seed}" / "run.json").unlink(missing_ok=True)
    (outdir / f"seed{seeds[0]}" / VIDEO_FILE).unlink(missing_ok=True)  # nor a video of another run

    ckdir = Path(args.checkpoint_dir) if args.checkpoint_dir else None
    # this session's record beside the checkpoints (before the folder is opened: a finished run's
    # folder starts a new list); run.json gets every attempt of a resumed run
    attempt = attempts.begin(ckdir, "agent steps")
    open_checkpoint_dir(ckdir, log)  # a finished run's folder is cleared: a forced rerun trains anew

    t_start = time.perf_counter()
    prog = _Progress(log, agent, n_timesteps, args.progress_seconds)
    loggers = job_loggers(args, log, f"single/{args.task}", args.task, seeds, lambda:
                          {"task": args.task, "protocol": args.logger_group, "spec": spec, "agent": agent.config})
    from ..run.driver import check_eval_every

    eval_every = check_eval_every(eval_every, "agent steps")  # 0 is refused, not "no evaluation"
    every = EveryVideo(agent, seeds[0], eval_every, eval_episodes, outdir / f"seed{seeds[0]}" / VIDEO_DIR, log) \
        if getattr(args, "video", "off") == "every" else None
    train = functools.partial(
        agent.train, seed=seeds, n_timesteps=n_timesteps, total_timesteps=n_timesteps,
        eval_every=eval_every, eval_episodes=eval_episodes, callback=prog.on_chunk,
        progress=prog.on_progress, max_chunk_seconds=args.max_chunk_seconds, checkpoint_dir=ckdir,
        checkpoint_every=args.checkpoint_every, keep_checkpoints=args.keep_checkpoints, loggers=loggers,
        progress_bar=False, on_evaluation=every)
    # one SignalStop for training and the final phase: a signal after training's last check, or
    # while the outputs are written, is a stop (logged, exit 143/130, the attempt "stopped"), not
    # ignored nor fatal (docs/pipeline.md, "Stopping")
    with SignalStop(log, ckdir is not None, log_now) as stop:
        # started_at: the agent steps this session started from (0: a fresh run)
        result = completed_session(train, attempt=attempt, log=log, ckdir=ckdir, total=n_timesteps, steps=prog,
                                   compile_seconds=lambda: per_program(agent.compile_seconds), stop=stop,
                                   loggers=loggers)
        if isinstance(result, int):
            return result
        state, hist, started_at = result
        wall = time.perf_counter() - t_start
        prov = provenance.collect(".", include_jax=True)
        session = {"wall": wall, "started_at": started_at, "attempts": attempt.records(), "ckdir": ckdir,
                   "provenance": prov, "eval_episodes": eval_episodes, "n_timesteps": n_timesteps,
                   "video": None}

        def write(boundary) -> None:
            boundary()
            if getattr(args, "video", "off") == "last":
                session["video"] = write_last_video(agent, state, hist, seeds[0], eval_episodes,
                                                    outdir / f"seed{seeds[0]}" / VIDEO_FILE, log)
            elif every is not None:
                session["video"] = every.finish(state, hist, outdir / f"seed{seeds[0]}" / VIDEO_FILE)
            if session["video"] is not None and session["video"].get("error"):
                # the recording failed after training: the run's outputs are written all the same, with
                # the failure in run.json; an empty video.mp4 stands for the video (the workflow's rule
                # declares it)
                from ..io import atomic

                empty = outdir / f"seed{seeds[0]}" / VIDEO_FILE
                empty.parent.mkdir(parents=True, exist_ok=True)
                with atomic.atomic_path(empty) as tmp:
                    tmp.write_bytes(b"")
                session["video"]["empty_file"] = VIDEO_FILE
            for i, seed in enumerate(seeds):
                _write_seed(args, spec, seeds, outdir, log, agent, state, hist, i, seed, session, boundary)

        def discard() -> None:  # a stopped final phase: no seed of the job may look complete
            for seed in seeds:
                (outdir / f"seed{seed}" / "run.json").unlink(missing_ok=True)

        rc = final_phase(write, stop=stop, attempt=attempt, log=log, ckdir=ckdir, total=n_timesteps,
                         discard=discard)
        if rc:
            return rc
        # the outputs are complete: keep only the final checkpoint (the trained agent) and mark the
        # run finished, so that a forced rerun of this job trains anew instead of resuming
        close_checkpoint_dir(ckdir, {"task": args.task, "seeds": seeds, "agent_steps": n_timesteps,
                                     "outdir": str(outdir)})
        log(f"done in {wall:.0f} s ({compiling_note(agent.compile_seconds)}); final eval return "
            + (" ".join(f"{x:.1f}" for x in hist["eval_return"][-1]) if len(hist["eval_agent_steps"]) else "n/a"))
    return 0


def _write_seed(args, spec: dict, seeds: list, outdir: Path, log, agent, state, hist: dict, i: int, seed: int,
                session: dict, boundary=lambda: None) -> None:
    """Seed ``seed``'s outputs (position ``i`` in the job): eval.parquet, metrics.parquet,
    episodes.parquet and, last, run.json (docs/artifacts.md), each written atomically;
    ``boundary()`` before each (:func:`~tdmpc2core.stages.resumable.final_phase`: where a stop
    asked in the final phase is acted on)."""
    from ..agents.export import export_episodes
    from ..io import atomic, provenance
    from ..io.dataset import save_dataset
    from . import outputs

    d = outdir / f"seed{seed}"
    d.mkdir(parents=True, exist_ok=True)
    runjson = d / "run.json"
    if runjson.exists():
        runjson.unlink()  # the marker of completeness goes first, comes back last
    boundary()
    outputs.write_table(d / "eval.parquet", "single_eval",
                        outputs.single_eval_columns(args.task, seed, i, hist, session["eval_episodes"]))
    # one row per chunk of the schedule, including those of earlier sessions
    boundary()
    outputs.write_table(d / "metrics.parquet", "single_metrics_episodic" if agent.episodic else "single_metrics",
                        outputs.single_metrics_columns(args.task, seed, i, hist["chunks"], agent.episodic))
    prov = session["provenance"]
    # the run's id: in every row of its episodes (the run_id column) and in its run.json
    rid = provenance.run_id(args.task, seed, spec, agent.config)
    if agent.pixels:  # episode datasets are state-only (as the official ones): no episodes.parquet
        (d / "episodes.parquet").unlink(missing_ok=True)
        log(f"seed {seed}: pixel observations (obs='rgb'): no episodes.parquet (episode datasets hold state "
            "observations only)")
        episodes = None
    else:
        boundary()
        episodes = export_episodes(agent, state, seed_index=i, name=args.task, seed=seed, run_id=rid,
                                   allow_evicted=bool(spec.get("allow_evicted", False)),
                                   provenance={"spec": spec, **prov})
        size = save_dataset(episodes, d / "episodes.parquet")
        log(f"seed {seed}: exported {episodes.num_episodes} episodes ({episodes.num_transitions} agent steps, "
            f"{size / 1e6:.1f} MB) to {d / 'episodes.parquet'}")
    boundary()
    atomic.write_json(runjson, _run_json(args, spec, seeds, agent, hist, i, seed, episodes, session, rid))


#: the evaluation video of a job's first seed, beside its eval.parquet (docs/artifacts.md)
VIDEO_FILE = "video.mp4"
#: frame size (pixels) and the most frames of an evaluation video
VIDEO_SIZE, VIDEO_MAX_FRAMES = 192, 250


def write_last_video(agent, state, hist: dict, seed: int, eval_episodes: int, path: Path, log) -> dict:
    """Record seed ``seed`` (the job's first, position 0 in ``state``) acting as its last
    evaluation acts (the first episode's initial state and keys: :meth:`TDMPC2.record_episode`)
    and write the MP4 at ``path`` atomically (:func:`record_and_write`)."""
    eval_index = max(len(hist["eval_agent_steps"]) - 1, 0)
    rec = record_and_write(
        agent.env, lambda: agent.record_episode(state, 0, seed=seed, eval_index=eval_index, eval_episodes=eval_episodes,
                                                width=VIDEO_SIZE, height=VIDEO_SIZE, max_frames=VIDEO_MAX_FRAMES),
        agent.video_renderer, agent.record_seconds, path, log, f"seed {seed}")
    return rec if rec.get("file") is None else {**rec, "seed": seed, "eval_index": eval_index}


#: ``--video every``: the first seed's video of each evaluation, in this folder beside video.mp4
VIDEO_DIR = "videos"


def every_video_name(agent_steps: int) -> str:
    """The file of the evaluation video at ``agent_steps`` (``--video every``)."""
    return f"agent_steps_{int(agent_steps):09d}.mp4"


class EveryVideo:
    """``--video every``: the :class:`~tdmpc2core.run.driver.RunOptions` ``on_evaluation`` hook
    that records the job's first seed (position 0) acting as each evaluation acts and writes
    ``{folder}/agent_steps_<N>.mp4`` (:func:`record_and_write`); :meth:`finish` makes the last
    one the job's ``video.mp4``. A resumed run keeps the videos of its earlier sessions' evaluations."""

    def __init__(self, agent, seed: int, eval_every, eval_episodes: int, folder: Path, log):
        self.agent, self.seed, self.eval_every, self.eval_episodes = agent, seed, eval_every, eval_episodes
        self.folder, self.log, self.records = Path(folder), log, {}

    def __call__(self, state, tick: int, evaluation: dict) -> None:
        steps = int(evaluation["eval_agent_steps"])
        eval_index = self.agent.eval_index(tick, self.eval_every)
        path = self.folder / every_video_name(steps)
        rec = record_and_write(
            self.agent.env, lambda: self.agent.record_episode(
                state, 0, seed=self.seed, eval_index=eval_index, eval_episodes=self.eval_episodes, width=VIDEO_SIZE,
                height=VIDEO_SIZE, max_frames=VIDEO_MAX_FRAMES),
            self.agent.video_renderer, self.agent.record_seconds, path, self.log, f"seed {self.seed} at {steps} agent steps")
        self.records[steps] = rec if rec.get("file") is None else {**rec, "seed": self.seed, "eval_index": eval_index}

    def finish(self, state, hist: dict, path: Path) -> dict:
        """The run's ``video.mp4`` at ``path``: a copy of its last evaluation's video (recorded
        now if this session did not evaluate it); the videos of evaluations the run's history
        does not have (another run's) are removed. Returns the run.json record of ``video.mp4``
        with ``every``: the file of each evaluation, in order."""
        from ..io import atomic

        steps = [int(s) for s in hist["eval_agent_steps"]]
        for old in self.folder.glob("agent_steps_*.mp4"):
            if old.name not in {every_video_name(s) for s in steps}:
                old.unlink()
        if not steps:
            return {"file": None, "reason": "no evaluation"}
        last = self.folder / every_video_name(steps[-1])
        if last.exists():
            with atomic.atomic_path(path) as tmp:
                tmp.write_bytes(last.read_bytes())
            rec = dict(self.records.get(steps[-1]) or {"seed": self.seed, "eval_index": len(steps) - 1})
            rec["file"] = path.name
        else:
            rec = write_last_video(self.agent, state, hist, self.seed, self.eval_episodes, path, self.log)
        return {**rec, "every": [f"{VIDEO_DIR}/{every_video_name(s)}" for s in steps
                                 if (self.folder / every_video_name(s)).exists()]}


def check_rendering(env_ids, video: str, pixels: bool, log) -> None:
    """Before a training stage builds anything: when its evaluation videos (``video`` other
    than ``"off"``, for an env whose suite draws through MuJoCo) or its pixel observations need
    MuJoCo's OpenGL rendering, check that it works here
    (:func:`tdmpc2core.envs.render.check_opengl`; logged).

    Raises:
      tdmpc2core.envs.render.OpenGLError: one line naming the backend and what to install or set
        (a ValueError: the CLI's one-line error, exit status 1).
    """
    import os

    from ..envs.render import cannot_render, check_opengl, needs_opengl

    what = ["pixel observations (agent.obs rgb)"] if pixels else []
    if video != "off" and any(cannot_render(e) is None and needs_opengl(e) for e in env_ids):
        what.append(f"evaluation videos (--video {video})")
    if what:
        seconds = check_opengl(" and ".join(what))
        log(f"rendering: MuJoCo's OpenGL context works here (MUJOCO_GL={os.environ.get('MUJOCO_GL') or 'unset'}; "
            f"checked in {seconds:.1f} s) for the {' and '.join(what)}")


def record_and_write(env, record, renderer_of, record_seconds: dict, path: Path, log, what: str) -> dict:
    """``record()`` (an agent's ``record_episode`` call) and the MP4 of its frames at ``path``,
    written atomically; returns what run.json records of the video: the file's name, frames,
    fps, stride, size, the episode's return and length (agent steps), the renderer and the
    seconds spent (compile, rollout, render, encode); for an env that cannot be rendered
    ``{"file": None, "reason": ...}`` (logged, no file). A recording, drawing or encoding that
    raises costs the video alone: ``{"file": None, "reason": "recording failed: ...", "error":
    "<type>: <message>"}`` (logged; no file at ``path``), and the run goes on to write its outputs."""
    from ..envs.render import NoRendererError, cannot_render
    from ..io.video import write_video

    reason = cannot_render(env)
    if reason is not None:
        log(f"video: none ({reason})")
        return {"file": None, "reason": reason}
    before = _compile_s(record_seconds)
    t0 = time.perf_counter()
    try:
        rec = record()
        t1 = time.perf_counter()
        size = write_video(path, rec.frames, rec.fps)
    except NoRendererError as exc:
        log(f"video: none ({exc})")
        return {"file": None, "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a renderer or encoder failing: the video alone is lost
        error = " ".join(f"{type(exc).__name__}: {exc}".split())
        log(f"video: {what}: recording failed ({error}); the run's outputs are written without this video")
        try:
            renderer = renderer_of()
            if renderer is not None:
                renderer.close()
        except Exception:  # noqa: BLE001 - a broken context may not close either
            pass
        return {"file": None, "reason": f"recording failed: {error}", "error": error}
    renderer = renderer_of()
    render_s = renderer.seconds
    renderer.close()  # its OpenGL context, now: freed at interpreter exit, EGL complains
    compile_s = _compile_s(record_seconds) - before
    # compile: trace, lower and compile the recording program; rollout: run it; render: draw the
    # frames; encode: write the MP4
    seconds = {"compile": compile_s, "rollout": max(t1 - t0 - compile_s - render_s, 0.0), "render": render_s,
               "encode": time.perf_counter() - t1}
    log(f"video: {what}, {len(rec.frames)} frames at {rec.fps:g} fps (every {rec.stride} agent step(s)), "
        f"return {rec.episode_return:.1f}, {size / 1e3:.0f} KB to {path} ("
        + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()) + ")")
    return {"file": path.name, "frames": int(len(rec.frames)), "fps": rec.fps, "stride": rec.stride,
            "width": int(rec.frames.shape[2]), "height": int(rec.frames.shape[1]), "bytes": size,
            "episode_return": rec.episode_return, "length": rec.length, "renderer": renderer.describe,
            "seconds": seconds}


def _compile_s(timings: dict) -> float:
    rec = timings.get("record", {})
    return float(rec.get("trace_lower_s", 0.0) + rec.get("compile_s", 0.0))


def _run_json(args, spec: dict, seeds: list, agent, hist: dict, i: int, seed: int, episodes, session: dict,
              run_id: str) -> dict:
    """Seed ``seed``'s run.json (docs/artifacts.md, "Single-task run")."""
    import numpy as np

    from ..pipeline.codeversion import code_version
    from ..run.compiled import per_program
    from ..run.devices import record as device_record
    from . import outputs

    n_timesteps, prov, ckdir = session["n_timesteps"], session["provenance"], session["ckdir"]
    return {
        "task": args.task, "seed": seed, "run_id": run_id,  # the run_id column of its episodes
        "seeds_in_job": seeds, "spec": spec,
        # the env's settings (the suite's defaults: {}) and the values in effect (tdmpc2core.envs.Env)
        "env_params": agent.env.env_params, "env_effective": agent.env.effective_settings,
        "agent_config": agent.config, "gamma": agent.gamma, "seed_steps": agent.seed_steps,
        "agent_steps": n_timesteps, "env_frames": n_timesteps * agent.action_repeat,
        "final_eval_return": hist["eval_return"][-1, i] if len(hist["eval_agent_steps"]) else None,
        # an env with a success flag: the last evaluation's success rate in [0, 1] (the last-step rule)
        "final_eval_success": (float(np.mean(hist["eval_success"][-1, i]))
                               if "eval_success" in hist and len(hist["eval_agent_steps"]) else None),
        **({"final_eval_success_rule": outputs.FINAL_SUCCESS_RULE} if "eval_success" in hist else {}),
        # None for pixel runs (obs='rgb'): no episodes.parquet
        "dataset_episodes": None if episodes is None else episodes.num_episodes,
        "dataset_agent_steps": None if episodes is None else episodes.num_transitions,
        "matmul_precision": outputs.matmul_precision_note(agent.config["matmul_precision"], prov["platform"]),
        "code_version": code_version("train_single"),  # the rerun_on_code_change check (pipeline/codeversion.py)
        "compile_seconds": per_program(agent.compile_seconds),
        "devices": device_record(agent.placement.mesh_for(len(seeds))),  # device and process counts, the mesh
        "compile_detail": agent.compile_seconds, "wall_seconds": session["wall"],
        "training_wall_seconds_all_sessions": hist["wall_seconds"],
        "resumed_from_agent_steps": session["started_at"] or None,
        "attempts": session["attempts"],  # every session of the run (tdmpc2core.io.attempts)
        "checkpoint_dir": str(ckdir) if ckdir is not None else None,
        "provenance": prov,
        # the job's evaluation video (its first seed only; --video last): write_last_video's record
        **({"video": session["video"]} if session.get("video") is not None and i == 0 else {}),
    }
