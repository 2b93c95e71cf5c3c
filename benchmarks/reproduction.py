"""The paper's numbers, reproduced (issue 45): DMControl runs put beside the published points.

    python benchmarks/reproduction.py choose [--out benchmarks/results/reproduction_choice.csv]
    python benchmarks/reproduction.py run --task TASK [--config workflow/configs/reproduction-dmc.yaml]
        [--budget-seconds 450] [--results benchmarks/results/reproduction.parquet] [--commit SHA]
    python benchmarks/reproduction.py collect [--tasks ...] [--results ...] [--commit SHA] [--overwrite]
    python benchmarks/reproduction.py merge FILE.parquet|FILE.json ... [--results ...] [--overwrite]
    python benchmarks/reproduction.py analyze [--results ...]        # the verdicts, Markdown and figures
    python benchmarks/reproduction.py run --reduced [--task cartpole-swingup]   # the CPU form (a test)

``choose`` applies the task-choice rule stated in docs/fidelity.md ("The paper's numbers,
reproduced") to the published seed ranges (tdmpc2core/resources/published_dmc_seed_range.csv)
and to a uniform random policy's return, measured here on dm_control (10 episodes of 1,000
control steps, actions uniform in [-1, 1] per agent step, held for the action repeat of 2), and
writes the table it decided by.

``run`` is one call of a task's training job (jobs, for a task with ``seeds_per_job: 1``: one
per seed, one after the other within the call's budget, a second one started only with
``--min-start-seconds`` left), exactly as the pipeline's rule runs it: the
configuration is loaded and resolved by the pipeline's own code (config.yaml, then ``--config``
merged over it, the schema's defaults filled: ``load_workflow_config``, ``resolve``), and the
rule's command and environment come from the same ``Pipeline`` (``train_single_command``,
``train_single_env``): ``python -m tdmpc2core.cli train-single --task T --spec <the resolved
settings> --seeds 0 1 2 --outdir results/single/T --checkpoint-dir checkpoints/single/T/seeds_0_1_2
...``, run in the repository's root. The call has a wall-clock budget (``--budget-seconds``): at
``budget - stop-grace`` seconds the trainer gets SIGTERM, stops at its next chunk boundary, writes
a checkpoint and exits 143 (the pipeline's preemption path, docs/pipeline.md); the next call with
the same arguments resumes from that checkpoint. A trainer still running at the budget is
killed (SIGKILL: it loses the work since its last checkpoint, ``checkpoint_every``). Every call
is recorded in the JSON beside the results (task, start, wall seconds, exit code, agent steps
before and after, the trainer's compile seconds, the training rate and the seconds of training
left at that rate); when the job has finished, its evaluations are collected into the results file
(``collect``). Exit codes: 0 finished (rows collected) or stopped at the budget (a checkpoint to
resume from), 3 killed at the budget (the work since the last checkpoint is lost), 1 failed.

The results file (``tdmpc2core/io/reproduction.py``): one row per (task, seed, evaluation point):
task (the published name), seed, env_steps (simulator steps), agent_steps, eval_return (mean over
the evaluation's episodes), eval_episodes, model_size, precision, device (the JAX device kind, from
the run's run.json), commit (the one the run recorded; for a run trained without git, which records
none, ``--commit`` or the work tree's HEAD, only when the run's ``code_version`` in run.json equals
this code's: otherwise the run is refused, its commit unknown). Rows are appended; a row the file
already has is refused unless ``--overwrite``. The JSON beside it: the plan (every task of the
configuration, its length in simulator steps, its seeds), per collected task the resolved
settings (the spec the rule passes and the agent's full configuration from run.json) and every
call's record. On the accelerator machine, whose files come back only from ``$OUT``, give
``--results $OUT/reproduction.parquet``, then ``merge`` what came back into the committed files.

``--reduced``: the CPU form of ``run`` (the test's): the same configuration with a tiny agent,
600 agent steps, two seeds and 2 evaluation episodes, in a scratch folder (``--workdir``,
default ``$TMPDIR/reproduction-reduced``, kept: a repeat finds the job finished and trains
nothing), results to ``$TMPDIR/reproduction_reduced.parquet`` unless ``--results``, its JSON
marked ``"reduced": true``; those two scratch files are deleted and written anew by each
``--reduced`` run without ``--results`` (logged when they were there).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # this checkout's tdmpc2core, whatever the environment installed
    sys.path.insert(0, str(ROOT))

CONFIG = "workflow/configs/reproduction-dmc.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "reproduction.parquet"
CHOICE = ROOT / "benchmarks" / "results" / "reproduction_choice.csv"

# ---------------------------------------------------------------------------- the task choice
#: the rule's margin: the published seeds' [min, max] is widened by this much (return points)
MARGIN = 100.0
#: "far from a random policy": the widened band's lower edge at 100k simulator steps lies at
#: least this far above the random policy's return (a run that has not learned misses it by that)
FAR = 300.0
#: the point the choice is made at (simulator steps)
CHOICE_ENV_STEPS = 100_000
#: how many of the chosen tasks also run to the next published point (200,000 simulator steps)
LONGER = 2
RANDOM_EPISODES = 10
ACTION_REPEAT = 2
EPISODE_CONTROL_STEPS = 1000

# ---------------------------------------------------------------------------- the reduced form
REDUCED_TASK = "cartpole-swingup"
REDUCED = dict(agent_steps=600, eval_every=300, eval_episodes=2, episode_length=200,
               agent=dict(model_size=1, enc_dim=32, mlp_dim=32, latent_dim=16, num_samples=16, num_elites=4,
                          num_pi_trajs=2, iterations=1, batch_size=16, seed_steps=200),
               resources=dict(gpu=0, runtime=30, mem_mb=4000))
REDUCED_SEEDS = [0, 1]
#: the command prefix of the pipeline's stages, as the workflow runs them (workflow/rules/common.smk)
TRAINER = [sys.executable, "-m", "tdmpc2core.cli"]


def _log(msg: str) -> None:
    print(f"[reproduction {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ============================================================================ choose
def random_policy_return(task: str, episodes: int = RANDOM_EPISODES, seed: int = 0) -> list[float]:
    """Returns of ``episodes`` episodes of a uniform random policy on dm_control task ``task``
    (official name): each agent step draws an action uniform in [-1, 1] per dimension (NumPy
    generator seeded with ``seed``), maps it onto the actuator bounds as the official wrapper
    does, and holds it for :data:`ACTION_REPEAT` control steps; an episode is
    :data:`EPISODE_CONTROL_STEPS` control steps (the suite's 1000; the published returns' scale).
    The task's own random state is seeded once with ``seed`` (episodes follow from it)."""
    import numpy as np

    from tdmpc2core.envs.dmcontrol_env import load_environment

    env = load_environment(task, seed=seed)
    spec = env.action_spec()
    low, high = spec.minimum.astype(np.float64), spec.maximum.astype(np.float64)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(episodes):
        env.reset()
        ret = 0.0
        for _ in range(EPISODE_CONTROL_STEPS // ACTION_REPEAT):
            u = low + (high - low) / 2.0 * (rng.uniform(-1.0, 1.0, spec.shape) + 1.0)
            for _ in range(ACTION_REPEAT):
                ret += float(env.step(u).reward or 0.0)
        out.append(ret)
    return out


def choice_table(random_returns: dict) -> "pd.DataFrame":
    """The rule of docs/fidelity.md applied to every published DMControl state task: one row per
    task with the published points at 0, 100k and 200k simulator steps (mean, min, max), the
    random policy's return (``random_uniform``: ``random_returns[task]``, NaN when not measured;
    ``random``: the higher of it and the published step-0 mean), ``lower_edge`` (published min at
    100k - MARGIN), ``far`` (lower_edge - random >= FAR), ``suite`` (a task of dm_control's own
    suite, not one of the paper's custom tasks), ``domain``, ``chosen`` (per domain, among the
    far suite tasks, the one with the lowest published mean at 100k), ``rise`` (published mean
    200k - 100k) and ``longer`` (the LONGER chosen tasks of the largest rise)."""
    import math

    import pandas as pd

    from tdmpc2core.envs.dmcontrol_ids import SUITE_TASKS
    from tdmpc2core.report import published as P

    rng = P.seed_range()
    rows = []
    for task, g in rng.groupby("task", sort=True):
        by = {int(r.env_steps): r for r in g.itertuples(index=False)}
        if not {0, CHOICE_ENV_STEPS, 2 * CHOICE_ENV_STEPS} <= set(by):
            continue
        p0, p1, p2 = by[0], by[CHOICE_ENV_STEPS], by[2 * CHOICE_ENV_STEPS]
        uni = random_returns.get(task, float("nan"))
        rand = max(p0.mean_return, uni) if not math.isnan(uni) else p0.mean_return
        edge = round(p1.min_return - MARGIN, 2)  # to the published table's 2 decimals
        suite = task in SUITE_TASKS
        rows.append(dict(task=task, domain=SUITE_TASKS[task][0] if suite else task.split("-")[0], suite=suite,
                         pub0_mean=p0.mean_return, pub100k_mean=p1.mean_return, pub100k_min=p1.min_return,
                         pub100k_max=p1.max_return, pub200k_mean=p2.mean_return, random_uniform=uni, random=rand,
                         lower_edge=edge, far=bool(round(edge - rand, 2) >= FAR and not math.isnan(uni)),
                         rise=p2.mean_return - p1.mean_return))
    df = pd.DataFrame(rows)
    ok = df[df["far"] & df["suite"]]
    chosen = set(ok.sort_values(["pub100k_mean", "task"]).groupby("domain", sort=True).head(1)["task"])
    df["chosen"] = df["task"].isin(chosen)
    longer = set(df[df["chosen"]].sort_values(["rise", "task"], ascending=[False, True]).head(LONGER)["task"])
    df["longer"] = df["task"].isin(longer)
    return df


def choose(args) -> int:
    """Measure the random policy where the rule needs it, apply the rule, write the table."""
    import math

    from tdmpc2core.io import atomic
    from tdmpc2core.report import published as P

    rng = P.seed_range()
    at = rng[rng["env_steps"] == CHOICE_ENV_STEPS]
    # a task whose published min at 100k is below MARGIN + FAR cannot pass whatever the random
    # return (DMControl returns are >= 0): not measured
    need = sorted(at.loc[at["min_return"] - MARGIN >= FAR, "task"])
    measured = {}
    for task in need:
        t0 = time.perf_counter()
        r = random_policy_return(task, args.episodes)
        measured[task] = sum(r) / len(r)
        _log(f"{task}: uniform random policy {measured[task]:.1f} over {len(r)} episodes "
             f"[{min(r):.1f}, {max(r):.1f}] ({time.perf_counter() - t0:.1f} s)")
    df = choice_table(measured)
    out = Path(args.out)
    atomic.write_text(out, df.to_csv(index=False, float_format="%.2f"))
    cols = ["task", "domain", "suite", "pub0_mean", "random_uniform", "random", "pub100k_min", "lower_edge",
            "pub100k_mean", "far", "chosen", "rise", "longer"]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in df[cols].itertuples(index=False):
        print("| " + " | ".join("—" if isinstance(v, float) and math.isnan(v) else
                                (f"{v:.1f}" if isinstance(v, float) else str(v)) for v in r) + " |")
    print(f"chosen: {sorted(df.loc[df['chosen'], 'task'])}; to 200k: {sorted(df.loc[df['longer'], 'task'])}")
    _log(f"wrote {out}")
    return 0


# ============================================================================ the configuration
def load_pipeline(config: str, reduced: bool = False, task: str | None = None):
    """The resolved configuration (tdmpc2core.pipeline.config.Pipeline) of ``config`` as the
    workflow resolves it (config.yaml, then ``config``; the reduced form's overrides last)."""
    from tdmpc2core.pipeline.config import load_workflow_config, resolve

    overrides = None
    if reduced:
        base = load_workflow_config([config], root=ROOT)
        proto = base["protocol"]
        task = task or REDUCED_TASK
        if task not in base["protocols"][proto]["tasks"]:
            raise SystemExit(f"error: --task {task!r} is not a task of {config} (have: "
                             f"{sorted(base['protocols'][proto]['tasks'])})")
        t = dict(base["protocols"][proto]["tasks"][task], **{k: v for k, v in REDUCED.items()},
                 expected=None)
        tasks = {name: {"seed_groups": [[s] for s in REDUCED_SEEDS]}  # groups of the full seeds: one per job
                 for name, ts in base["protocols"][proto]["tasks"].items() if ts.get("seed_groups") is not None}
        tasks[task] = dict(t, **tasks.get(task, {}))
        overrides = {"seeds": REDUCED_SEEDS, "seeds_per_job": len(REDUCED_SEEDS), "threads_per_job": 1,
                     "checkpoint_every": 300, "video": "off",
                     "protocols": {proto: {"tasks": tasks}}}
    return resolve(load_workflow_config([config], root=ROOT, overrides=overrides))


def plan_of(P, only=None) -> dict:
    """The JSON's ``plan``: task -> its published name, the simulator steps and agent steps its
    run reaches, its seeds (``only``: those tasks alone, e.g. the reduced form's one)."""
    out = {}
    for task, s in P.tasks.items():
        if only is not None and task not in only:
            continue
        T = int(P.task_T[task])  # agent steps of an episode
        repeat = int(s["episode_length"]) // T
        out[task] = {"published": s.get("published") or task, "agent_steps": int(s["agent_steps"]),
                     "env_steps": int(s["agent_steps"]) * repeat, "seeds": list(P.seeds)}
    return out


# ============================================================================ the results files
def _read(results: Path):
    from tdmpc2core.io import reproduction as R

    df = R.read_results(results) if results.exists() else None
    meta = R.read_meta(results)
    return df, meta


def _write(results: Path, df, meta: dict) -> None:
    from tdmpc2core.io import atomic
    from tdmpc2core.io import reproduction as R

    results.parent.mkdir(parents=True, exist_ok=True)
    if df is not None:
        atomic.write_parquet(results, df)
    atomic.write_json(R.meta_path(results), meta)


def _git(*args) -> str | None:
    try:
        res = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def the_commit(given: str | None, reduced: bool) -> str:
    """The commit the results name: ``given`` (``--commit``), else this work tree's HEAD. A work
    tree with uncommitted changes is refused for a real run (its code is no commit: commit first,
    or say which commit it is with --commit); the reduced form records ``<sha>+dirty``.
    Raises SystemExit (one line) without either."""
    if given:
        return given
    head = _git("rev-parse", "HEAD")
    if not head:
        raise SystemExit("error: this copy of the code is not a git work tree: give --commit SHA (the commit it is)")
    if _git("status", "--porcelain", "--untracked-files=no"):
        if not reduced:
            raise SystemExit(f"error: the work tree {ROOT} has uncommitted changes to tracked files: commit them "
                             "first (the results name the commit that ran), or give --commit SHA")
        return head + "+dirty"
    return head


def _task_info(old: dict | None, new: dict) -> dict:
    """A task's entry of the JSON's ``tasks`` with the seeds (and their run ids) of ``old`` kept:
    a task whose seeds train in jobs of their own is collected, and merged, job by job."""
    if not old:
        return new
    ids = dict(zip(old.get("seeds") or [], old.get("run_ids") or []))
    ids.update(zip(new.get("seeds") or [], new.get("run_ids") or []))
    return dict(new, seeds=sorted(ids), run_ids=[ids[k] for k in sorted(ids)])


def committed_results(reduced: bool) -> Path | None:
    """The committed results file whose rows count as done for ``run`` (beside ``--results``):
    :data:`RESULTS`; None for the reduced form (an experiment of its own)."""
    return None if reduced else RESULTS


def collected_seeds(task: str, *files: Path) -> set:
    """The seeds of ``task`` (published name) whose rows are in any of ``files`` (those that exist)."""
    from tdmpc2core.io import reproduction as R

    out = set()
    for f in files:
        if f is not None and Path(f).exists():
            d = R.read_results(f)
            out |= {int(x) for x in d.loc[d["task"] == task, "seed"]}
    return out


def _clear_stale_scratch(workdir: Path) -> None:
    """The reduced form's scratch work folder, removed when a run in it was trained by other code
    (its run.json's ``code_version`` is not this code's): it runs outside the repository, so its
    runs record no commit, and rows of other code could not be told apart (collect_task refuses
    them). A folder of this code's runs is kept (a repeat trains nothing)."""
    import shutil

    from tdmpc2core.pipeline.codeversion import code_version

    runs = sorted(workdir.glob("results/single/*/seed*/run.json")) if workdir.exists() else []
    mine = code_version("train_single")
    stale = [r for r in runs if json.loads(r.read_text()).get("code_version") != mine]
    if stale:
        _log(f"--reduced: the scratch folder {workdir} holds runs of other code ({stale[0]} and "
             f"{len(stale) - 1} more): removed, trained anew")
        shutil.rmtree(workdir)


def collect_task(P, task: str, workdir: Path, results: Path, commit: str | None, overwrite: bool, meta: dict,
                 seeds=None) -> int:
    """Append the finished job(s) of ``task`` (``seeds``: those seeds' runs; default every seed)
    to ``results``; returns the rows added. Each row names the commit its run recorded; a run
    that recorded none (trained without git) gets ``commit`` (this code's) only when its
    run.json's ``code_version`` is this code's (tdmpc2core.io.reproduction.run_commit). Raises
    FileNotFoundError when a seed's run.json is missing (not finished), ValueError when a run's
    commit cannot be told."""
    from tdmpc2core.io import reproduction as R
    from tdmpc2core.pipeline.codeversion import code_version

    spec = P.tasks[task]
    published = spec.get("published") or task
    df, _ = _read(results)
    seeds = list(P.seeds if seeds is None else seeds)
    new, runs = R.rows_from_runs(workdir / "results" / "single" / task, published, seeds, commit=commit,
                                 code_version=code_version("train_single"))
    other = sorted(set(new["commit"]) - {commit})
    if other:
        _log(f"{task}: the runs recorded the commit(s) {', '.join(other)} that trained them (this code is {commit}); "
             "their rows name those")
    merged = R.append_rows(df, new, overwrite=overwrite, source=str(results))
    tasks = meta.setdefault("tasks", {})
    tasks[published] = _task_info(tasks.get(published), {
        "task": task, "spec": json.loads(P.task_spec(task)), "agent_config": runs[0]["agent_config"],
        "seeds": [int(r["seed"]) for r in runs], "run_ids": [r.get("run_id") for r in runs],
        "matmul_precision": runs[0].get("matmul_precision"), "devices": runs[0].get("devices"),
        "provenance_platform": (runs[0].get("provenance") or {}).get("platform"),
        "attempts": runs[0].get("attempts"), "training_wall_seconds": runs[0].get("training_wall_seconds_all_sessions"),
        "commit": str(new["commit"].iloc[0]), "collected_utc": _utc()})
    _write(results, merged, meta)
    _log(f"{task}: {len(new)} rows (seeds {sorted(set(new['seed']))}, simulator steps "
         f"{sorted(set(int(s) for s in new['env_steps']))}) added to {results}")
    return len(new)


def _base_meta(meta: dict, P, config: str, reduced: bool, only=None) -> dict:
    meta = dict(meta)
    meta.setdefault("what", "benchmarks/reproduction.py (issue 45): the paper's DMControl points, reproduced")
    meta["configfile"] = config
    meta["reduced"] = bool(reduced)
    meta["plan"] = {v["published"]: {**v, "task": k} for k, v in plan_of(P, only).items()}
    meta.setdefault("tasks", {})
    meta.setdefault("calls", [])
    return meta


# ============================================================================ run
def _stop(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the trainer leads its own process group
    except ProcessLookupError:
        pass


def run_trainer(argv: list, env: dict, cwd: Path, budget: float, grace: float) -> tuple[int, str, float]:
    """Run the trainer ``argv`` in ``cwd`` with ``env`` (in a session of its own); SIGTERM at
    ``budget - grace`` seconds, SIGKILL at ``budget`` if it still runs. A SIGTERM or SIGINT to this
    process (Ctrl-C) is passed on as SIGTERM at once (SIGKILL ``grace`` seconds later). Returns
    (exit code, outcome, wall seconds): outcome "finished" (0), "stopped at the budget" / "stopped
    on request" (stopped by our SIGTERM, checkpoint written: exit 143), "killed at the budget" /
    "killed on request" (SIGKILL), or "failed (exit N)"."""
    t0 = time.monotonic()
    asked = []  # a SIGTERM / SIGINT to this process: passed on to the trainer (its own session)
    handlers = {sig: signal.signal(sig, lambda signum, frame: asked.append(signum))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True)
        termed = killed = False
        by_request = False  # what the first SIGTERM was for (a request after the budget's SIGKILL does not relabel it)
        while True:
            try:
                rc = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            elapsed = time.monotonic() - t0
            if not termed and (asked or elapsed >= budget - grace):
                by_request = bool(asked)
                why = "asked to stop" if asked else "budget"
                _log(f"{why}: SIGTERM to the trainer after {elapsed:.0f} s (it checkpoints and exits)")
                _stop(proc, signal.SIGTERM)
                termed, deadline = True, max(budget, elapsed + grace)
            elif termed and not killed and elapsed >= deadline:
                _log(f"the trainer did not stop within {grace:.0f} s of SIGTERM: SIGKILL")
                _stop(proc, signal.SIGKILL)
                killed = True
    finally:
        for sig, h in handlers.items():
            signal.signal(sig, h)
    wall = time.monotonic() - t0
    if rc == 0:
        return rc, "finished", wall
    where = "on request" if by_request else "at the budget"
    if killed:
        return rc, f"killed {where}", wall
    if termed and rc == 128 + signal.SIGTERM:
        return rc, f"stopped {where}", wall
    return rc, f"failed (exit {rc})", wall


def projection(record: dict) -> dict:
    """What a call's record says of the rest of the run: ``agent_steps_per_s_over_the_call``
    (wall time, compiling included), ``agent_steps_per_s_training`` (the call's wall time less the
    trainer's compile seconds) and ``seconds_left_estimate`` (the agent steps left at that rate;
    each further call also compiles again: dm_control's host-callback programs are never kept in
    JAX's persistent cache). {} when the call did not train."""
    a, b, wall = record.get("agent_steps_from"), record.get("agent_steps_to"), float(record.get("wall_s") or 0.0)
    if a is None or b is None or wall <= 0 or b <= a:
        return {}
    comp = sum(float(v) for v in (record.get("compile_seconds") or {}).values())
    out = {"agent_steps_per_s_over_the_call": round((b - a) / wall, 2)}
    if wall - comp > 0:
        rate = (b - a) / (wall - comp)
        out["agent_steps_per_s_training"] = round(rate, 2)
        out["seconds_left_estimate"] = round(max(int(record["total_agent_steps"]) - b, 0) / rate, 1)
    return out


def run(args) -> int:
    from tdmpc2core.io import attempts
    from tdmpc2core.io import checkpoint as ck
    from tdmpc2core.pipeline.config import RUNS, seed_tag

    config = args.config
    P = load_pipeline(config, reduced=args.reduced, task=args.task)
    task = args.task or (REDUCED_TASK if args.reduced else None)
    if task is None:
        raise SystemExit("error: give --task (one of " + ", ".join(P.tasks) + ")")
    if task not in P.tasks:
        raise SystemExit(f"error: --task {task!r} is not a task of {config} (have: {sorted(P.tasks)})")
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    workdir = Path(args.workdir) if args.workdir else (tmp / "reproduction-reduced" if args.reduced else ROOT)
    if args.reduced and not args.workdir:
        _clear_stale_scratch(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    results = Path(args.results) if args.results else (
        tmp / "reproduction_reduced.parquet" if args.reduced else RESULTS)
    if args.reduced and not args.results:
        old = [p for p in (results, results.with_suffix(".json")) if p.exists()]
        if old:  # the reduced form's scratch files: each run anew (benchmarks/README.md, "Reproduction")
            _log(f"--reduced: replacing the scratch results of the previous --reduced run ({', '.join(map(str, old))}); "
                 "give --results FILE to keep a file")
        for p in old:
            p.unlink()
    commit = the_commit(args.commit, args.reduced)
    if args.budget_seconds <= args.stop_grace:
        raise SystemExit(f"error: --budget-seconds {args.budget_seconds} must exceed --stop-grace {args.stop_grace}")
    df, meta = _read(results)
    meta = _base_meta(meta, P, config, args.reduced, only=[task] if args.reduced else None)
    published = P.tasks[task].get("published") or task
    # the seeds whose rows are in: this call's results file, and the committed one (on the
    # accelerator machine --results is a fresh $OUT, and a task of one job per seed spans sessions)
    committed = committed_results(args.reduced)
    have = set() if args.overwrite else collected_seeds(published, results, committed if committed != results else None)
    if set(P.seeds) <= have:
        _log(f"{task}: the results already hold its rows; nothing to do (--overwrite to train and replace them)")
        _write(results, None, meta)
        return 0

    env = dict(os.environ)
    env.update(P.train_single_env(task))
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):  # the caller's cache (benchmarks/accelerator.py's) wins
        env["JAX_COMPILATION_CACHE_DIR"] = os.environ["JAX_COMPILATION_CACHE_DIR"]
    if "XLA_FLAGS" in env and os.environ.get("XLA_FLAGS") and env["XLA_FLAGS"] != os.environ["XLA_FLAGS"]:
        env["XLA_FLAGS"] = f"{os.environ['XLA_FLAGS']} {env['XLA_FLAGS']}"
    if P.video == "off" and "MUJOCO_GL" not in env:
        env["MUJOCO_GL"] = "disabled"  # state tasks, no video: dm_control needs no OpenGL backend at all
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT), env.get("PYTHONPATH", "")) if x)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if args.reduced and "JAX_PLATFORMS" not in os.environ:
        env["JAX_PLATFORMS"] = "cpu"

    t_call, started = time.monotonic(), False
    for group in P.task_seed_groups(task):  # one job, or one per seed for a task with seeds_per_job 1
        argv = P.train_single_command(task, group, TRAINER)
        ckdir = workdir / P.checkpoints / "single" / task / seed_tag(group)
        done = all((workdir / RUNS / task / f"seed{s}" / "run.json").exists() for s in group)
        before = [a for a in attempts.read(ckdir)] if ckdir.exists() else []
        record = {"task": published, "seeds": list(group), "started_utc": _utc(), "budget_s": args.budget_seconds,
                  "host": socket.gethostname(), "commit": commit, "configfile": config,
                  "command": argv[argv.index("train-single"):]}
        if set(group) <= have:
            _log(f"{task} seeds {list(group)}: already in the results (collected in an earlier call)")
            continue
        if done:
            _log(f"{task} seeds {list(group)}: nothing to train: the job finished earlier (every run.json is under "
                 f"{workdir / RUNS / task}); collecting its rows")
            rc, outcome, wall = 0, "finished earlier", 0.0
        else:
            left = args.budget_seconds - (time.monotonic() - t_call)  # the call's budget, over its jobs
            if started and left < args.min_start_seconds:
                _log(f"{task} seeds {list(group)}: not started, {left:.0f} s of this call's budget left (less than "
                     f"--min-start-seconds {args.min_start_seconds:.0f}: compiling alone would take most of it); "
                     "the next call starts it")
                return 0
            record["budget_s"] = round(left, 1)
            _log(f"{task} seeds {list(group)}: {' '.join(argv[argv.index('train-single'):])} (in {workdir}, budget "
                 f"{left:.0f} s)")
            rc, outcome, wall = run_trainer(argv, env, workdir, left, args.stop_grace)
            started = True
        after = attempts.read(ckdir) if ckdir.exists() else []
        new = [a for a in after if a not in before]
        last = new[-1] if new else {}
        record.update(exit_code=rc, outcome=outcome, wall_s=round(wall, 1),
                      agent_steps_from=last.get("start_step"), agent_steps_to=last.get("end_step"),
                      total_agent_steps=int(P.tasks[task]["agent_steps"]),
                      compile_seconds=last.get("compile_seconds"), attempt=last.get("attempt"),
                      trainer_outcome=last.get("outcome"))
        newest = ck.latest_checkpoint(ckdir) if ckdir.exists() else None
        record["checkpoint_agent_steps"] = None if newest is None else int(newest.name.split("_")[-1])
        record.update(projection(record))
        meta["calls"].append(record)
        _write(results, None, meta)
        # a job found finished ran nothing: it has no steps to report (its line was logged above)
        if not done and record["agent_steps_to"] is None:  # the trainer left no attempt record (it failed before one)
            _log(f"{task} seeds {list(group)}: {outcome} after {wall:.0f} s; no attempt recorded in {ckdir}")
        elif not done:
            _log(f"{task} seeds {list(group)}: {outcome} after {wall:.0f} s; agent steps "
                 f"{record['agent_steps_from']} -> {record['agent_steps_to']} of {record['total_agent_steps']}"
                 + (f"; {record['agent_steps_per_s_training']} agent steps/s after compiling: the rest needs about "
                    f"{record['seconds_left_estimate']:.0f} s of training (+ compiling in each call)"
                    if record.get("seconds_left_estimate") and rc != 0 else ""))
        if rc != 0:
            return {"stopped at the budget": 0, "stopped on request": 0}.get(
                outcome, 3 if outcome.startswith("killed") else 1)
        # each job's rows as soon as it has finished: a task of one job per seed spans calls and sessions
        try:
            if not collect_task(P, task, workdir, results, commit, args.overwrite, meta, seeds=group):
                return 1
        except (FileNotFoundError, ValueError) as e:  # e.g. a run whose commit cannot be told: one line
            raise SystemExit(f"error: {e}") from None
        have |= set(group)
    return 0


# ============================================================================ collect, merge, analyze
def collect(args) -> int:
    """Collect the finished jobs of ``--tasks`` (default: every task of the configuration whose
    run.json files are all there) into the results file."""
    from tdmpc2core.pipeline.config import RUNS

    only = (args.tasks or [REDUCED_TASK])[:1] if args.reduced else None
    P = load_pipeline(args.config, reduced=args.reduced, task=only[0] if only else None)
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    workdir = Path(args.workdir) if args.workdir else (tmp / "reproduction-reduced" if args.reduced else ROOT)
    results = Path(args.results) if args.results else (
        tmp / "reproduction_reduced.parquet" if args.reduced else RESULTS)
    commit = the_commit(args.commit, args.reduced)
    _, meta = _read(results)
    meta = _base_meta(meta, P, args.config, args.reduced, only=only)
    tasks = args.tasks or only or [t for t in P.tasks if all((workdir / RUNS / t / f"seed{s}" / "run.json").exists()
                                                     for s in P.seeds)]
    unknown = [t for t in tasks if t not in P.tasks]
    if unknown:
        raise SystemExit(f"error: task(s) {unknown} are not in {args.config} (have: {sorted(P.tasks)})")
    if not tasks:
        raise SystemExit(f"error: no task of {args.config} has finished runs under {workdir / RUNS}")
    n = 0
    for task in tasks:
        try:
            n += collect_task(P, task, workdir, results, commit, args.overwrite, meta)
        except (FileNotFoundError, ValueError) as e:
            raise SystemExit(f"error: {e}") from None
    return 0 if n else 1


def merge(args) -> int:
    """Append the rows and calls of results files that came back from another machine (each a
    ``.parquet`` and/or the ``.json`` beside it) into ``--results``."""
    from tdmpc2core.io import reproduction as R

    results = Path(args.results) if args.results else RESULTS
    df, meta = _read(results)
    seen = {(c.get("task"), c.get("started_utc"), c.get("host")) for c in meta.get("calls") or []}
    stems = list(dict.fromkeys(os.path.splitext(f)[0] for f in args.files))
    for stem in stems:
        pq, js = Path(stem + ".parquet"), Path(stem + ".json")
        if not pq.exists() and not js.exists():
            raise SystemExit(f"error: neither {pq} nor {js} exists")
        other = R.read_meta(pq)
        for key in ("what", "configfile", "plan"):
            if key in other:
                meta[key] = other[key]
        if other.get("reduced") and not meta.get("reduced", False) and results.resolve() == RESULTS.resolve():
            raise SystemExit(f"error: {js} is of a reduced run: it does not go into {results}")
        meta["reduced"] = bool(meta.get("reduced", False) or other.get("reduced", False))
        for task, info in (other.get("tasks") or {}).items():
            meta.setdefault("tasks", {})[task] = _task_info(meta["tasks"].get(task), info)
        added = [c for c in other.get("calls") or []
                 if (c.get("task"), c.get("started_utc"), c.get("host")) not in seen]
        meta.setdefault("calls", []).extend(added)
        seen |= {(c.get("task"), c.get("started_utc"), c.get("host")) for c in added}
        n = 0
        if pq.exists():
            new = R.read_results(pq)
            try:
                df = R.append_rows(df, new, overwrite=args.overwrite, source=str(results))
            except ValueError as e:
                raise SystemExit(f"error: {e}") from None
            n = len(new)
        _log(f"{stem}: {n} rows, {len(added)} call record(s) merged into {results}")
    _write(results, df, meta)
    return 0


def analyze(args) -> int:
    """The verdicts of the results file (tdmpc2core/report/reproduction.py): a Markdown summary and
    one figure per task, beside the results file unless --figures."""
    from tdmpc2core.io import atomic
    from tdmpc2core.report import reproduction as RP

    results = Path(args.results) if args.results else RESULTS
    df = RP.read_results(results)
    meta = RP.read_meta(results)
    plan = RP.plan_of(df, meta)
    points = RP.point_table(df, plan, seeds=RP.planned_seeds(meta))
    tasks = RP.task_verdicts(points)
    head = RP.headline(points)
    figs = Path(args.figures) if args.figures else results.parent
    stem = results.stem
    for task in sorted(set(df["task"])):
        RP.plot_task(df, task, figs / f"{stem}_{task}.png", max_env_steps=plan.get(task))
    lines = [f"# {stem}: the paper's numbers, reproduced", "", f"**{head['text']}.**", ""]
    lines += [f"- {r.task}: {r.verdict}"
              + (f" (outside at {', '.join(f'{s:,}' for s in r.outside)})" if r.outside else "")
              + (f" (not judged yet at {', '.join(f'{s:,}' for s in r.missing)}: "
                 + ("not every planned seed is in)" if points.loc[points["task"] == r.task, "n_seeds"].any()
                    else "no evaluation)")
                 if r.missing else "")
              for r in tasks.itertuples(index=False)]
    notes = RP.partial_notes(df, points, meta)
    if notes:
        lines += ["", "A partial run: " + " ".join(notes)]
    lines += ["", RP.points_markdown(points)]
    atomic.write_text(results.with_suffix(".md"), "\n".join(lines))
    print("\n".join(lines))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("choose", help="the task choice: published seed ranges and a random policy on dm_control")
    c.add_argument("--out", default=str(CHOICE), help=f"the choice table (default {CHOICE.relative_to(ROOT)})")
    c.add_argument("--episodes", type=int, default=RANDOM_EPISODES, help="random-policy episodes per task (10)")
    r = sub.add_parser("run", help="one call: train or resume one task's job within a wall-clock budget")
    r.add_argument("--task", default=None, help="a task of the configuration (its key, e.g. cheetah-run)")
    for p in (r,):
        p.add_argument("--budget-seconds", type=float, default=450.0,
                       help="wall seconds this call may train (default 450: a 10-minute device call with its setup)")
        p.add_argument("--stop-grace", type=float, default=90.0,
                       help="SIGTERM this long before the budget, for the checkpoint (default 90)")
        p.add_argument("--min-start-seconds", type=float, default=180.0,
                       help="a task of several jobs (seeds_per_job 1): after a job, start the next one only with at "
                            "least this much of the call's budget left (default 180: the chunk and evaluation compile "
                            "first)")
    for p in (r, sub.add_parser("collect", help="rows of finished jobs into the results file")):
        p.add_argument("--config", default=CONFIG, help=f"the workflow configuration (default {CONFIG})")
        p.add_argument("--results", default=None, help="the results file (default benchmarks/results/"
                       "reproduction.parquet; the reduced form: $TMPDIR/reproduction_reduced.parquet)")
        p.add_argument("--workdir", default=None, help="where results/ and checkpoints/ are (default: the "
                       "repository; the reduced form: $TMPDIR/reproduction-reduced)")
        p.add_argument("--commit", default=None, help="the commit of this code (default: git rev-parse HEAD; give "
                       "it where the copy has no .git, e.g. on the accelerator machine)")
        p.add_argument("--overwrite", action="store_true", help="replace rows the results file already has")
        p.add_argument("--reduced", action="store_true", help="the CPU form: a tiny agent, 600 agent steps, 2 seeds")
    sub.choices["collect"].add_argument("--tasks", nargs="*", default=None, help="default: every finished task")
    m = sub.add_parser("merge", help="append results that came back from another machine")
    m.add_argument("files", nargs="+", help="reproduction.parquet / .json files (each stem's pair)")
    m.add_argument("--results", default=None, help="default benchmarks/results/reproduction.parquet")
    m.add_argument("--overwrite", action="store_true", help="replace rows the results file already has")
    a = sub.add_parser("analyze", help="the verdicts as Markdown and one figure per task")
    a.add_argument("--results", default=None, help="default benchmarks/results/reproduction.parquet")
    a.add_argument("--figures", default=None, help="folder of the figures (default: beside the results)")
    args = ap.parse_args(argv)
    return {"choose": choose, "run": run, "collect": collect, "merge": merge, "analyze": analyze}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
