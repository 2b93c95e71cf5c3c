"""Learning beside the official code: the same dm_control tasks, settings and budget, curves compared.

    # both implementations (the official side needs PyTorch, tensordict, torchrl, omegaconf,
    # hydra-core, gym 0.26 and dm_control in --official-python's environment: docs/fidelity.md)
    python benchmarks/learning_parity.py run --official PATH --official-python PY \\
        [--tasks cup-catch ...] [--seeds 0 1 2 3 4] [--steps 5000] [--out benchmarks/results/learning_parity.parquet]
    python benchmarks/learning_parity.py analyze [--results A.parquet [B.parquet ...]] [--name NAME] [--tasks ...]
    # the reduced form: one task, two seeds, a tiny model; ours alone (the test: 600 agent steps)
    # or with --official (1,000 agent steps, evaluations every 500: the official code evaluates
    # at episode boundaries); written to $TMPDIR/learning_parity_reduced.parquet unless --out
    python benchmarks/learning_parity.py run --reduced [--official PATH --official-python PY]

What runs (issue 30; docs/fidelity.md, "Learning beside the official code"):

- ``official``: nicklashansen/tdmpc2 at 5f6fade from the checkout named by ``--official``,
  unmodified, PyTorch eager on the CPU: its ``OnlineTrainer`` (its train loop: the random seed
  phase, the burst of ``seed_steps`` updates at step ``seed_steps``, one update per step after,
  evaluation at episode boundaries every ``eval_freq`` steps), its ``Buffer`` (torchrl's
  ``SliceSampler``), its ``make_env`` (dm_control, action repeat 2, 500 agent steps per episode,
  task seed = the run's seed), its ``TDMPC2``, seeded by its ``set_seed``. The config is built as
  its ``train.py`` builds it: ``config.yaml``'s defaults merged with :data:`SETTINGS`, then
  ``parse_cfg`` and ``make_env``; ``seed_steps`` (which ``make_env`` derives) is then set to ours.
  Adapters of ours around the unmodified code: the ``CpuTorch`` view of ``torch`` that
  tools/record_parity.py hands ``tdmpc2.py`` and ``common/scale.py`` (also ``common/buffer.py``
  here, whose ``torch.cuda.mem_get_info`` it answers with (0, 0), so the buffer keeps its
  storage on the CPU, as the official code does when the GPU is full), ``hydra``'s
  ``get_original_cwd`` (``parse_cfg`` asks it for the log folder, which nothing writes), and a
  logger that keeps the ``eval`` records only. One (task, seed) per process
  (``--worker official``), so seeds are independent and a crash loses one cell.
- ``ours``: ``tdmpc2core.agents.single_task.TDMPC2("dmc:<task>", ...)`` (the agent the
  ``tdmpc2 train-single`` stage trains), all seeds of a task vmapped in one process.

Every hyperparameter is given in the official names (:data:`SETTINGS`) and mapped explicitly to
ours (:data:`OURS_NAME`); each side asserts at start that its resolved configuration has these
values (and the same discount, episode length and action repeat), naming any key that differs.

Output: one Parquet file (atomic), one row per evaluation of each seed: implementation, task,
seed, agent_step, env_frames, episode_return (the mean over the evaluation's episodes),
eval_episodes; a JSON beside it (``.json``) with the settings, versions, wall time per cell and
the load. ``analyze`` computes the comparison (tdmpc2core/report/learning_parity.py: bootstrap
CIs per point, TOST on the last two points at the margin stated there) and writes a Markdown
summary and one figure per task.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OFFICIAL_COMMIT = "5f6fadec0fec78304b4b53e8171d348b58cac486"

#: The shared hyperparameters, in the official config.yaml's names; both sides run with these.
#: A small model and planner a CPU affords (the official defaults: widths of model_size 5,
#: batch 256, 512 samples x 6 iterations); the others are the paper's defaults, written out so
#: that both sides are checked against them.
SETTINGS = dict(
    # architecture (model_size None: these widths, not a preset)
    num_enc_layers=2, enc_dim=32, mlp_dim=64, latent_dim=32, num_q=5, dropout=0.01, simnorm_dim=8,
    num_bins=101, vmin=-10, vmax=10,
    # training
    batch_size=32, horizon=3, rho=0.5, lr=3e-4, enc_lr_scale=0.3, grad_clip_norm=20, tau=0.01,
    consistency_coef=20, reward_coef=0.1, value_coef=0.1, entropy_coef=1e-4, log_std_min=-10, log_std_max=2,
    discount_denom=5, discount_min=0.95, discount_max=0.995, buffer_size=1_000_000, seed_steps=1000,
    # planning
    mpc=True, iterations=2, num_samples=64, num_elites=8, num_pi_trajs=4, min_std=0.05, max_std=2,
    temperature=0.5,
)
#: official config key -> our TDMPC2Config field (every key of SETTINGS; the same name unless listed)
OURS_NAME = {k: k for k in SETTINGS}
OURS_NAME["lr"] = "learning_rate"
#: The schedule (agent steps), the same for both: evaluation every EVAL_FREQ steps (and at 0)
#: with EVAL_EPISODES episodes; STEPS agent steps per run.
SCHEDULE = dict(steps=5000, eval_freq=1000, eval_episodes=2)
#: dm_control as the official dmcontrol.py builds it: 500 agent steps of action repeat 2
EPISODE_LENGTH, ACTION_REPEAT = 500, 2
#: chosen by measuring (docs/fidelity.md): at these settings our agent moved within 4,000-5,000 agent
#: steps on these three; cartpole-balance, pendulum-swingup and walker-stand did not, visibly
TASKS = ("cup-catch", "finger-spin", "reacher-easy")
SEEDS = (0, 1, 2, 3, 4)
#: The reduced form (the test): ours alone, one task, two seeds, a few hundred steps.
REDUCED = dict(tasks=("cartpole-balance",), seeds=(0, 1), steps=600, eval_freq=300, eval_episodes=1,
               seed_steps=500, overrides=dict(enc_dim=16, mlp_dim=16, latent_dim=16, num_q=2, batch_size=8,
                                              num_samples=16, num_elites=4, num_pi_trajs=2, iterations=1, mpc=False))
#: The reduced form's schedule when the official side runs: it evaluates at episode boundaries only
REDUCED_WITH_OFFICIAL = dict(steps=2 * EPISODE_LENGTH, eval_freq=EPISODE_LENGTH)
#: The committed comparison, the default of ``run --out`` and ``analyze --results``
DEFAULT_RESULTS = ROOT / "benchmarks" / "results" / "learning_parity.parquet"


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _git_commit(path) -> str | None:
    """HEAD of the git work tree at ``path``, "+dirty" when tracked files differ; None outside git."""
    try:
        head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) == bool(b) and type(a) is type(b)
    try:
        return abs(float(a) - float(b)) <= 1e-12 * max(1.0, abs(float(b)))
    except (TypeError, ValueError):
        return a == b


def expected_discount(settings: dict) -> float:
    """The discount of a 500-step episode under ``settings`` (spec §1.3; the official formula)."""
    frac = EPISODE_LENGTH / settings["discount_denom"]
    return min(max((frac - 1) / frac, settings["discount_min"]), settings["discount_max"])


# =================================================================== the official side
class _EvalLog:
    """The official ``Logger`` as the trainer calls it: ``log(metrics, category)`` and
    ``finish(agent)``; keeps the ``eval`` records (``step``, ``episode_reward``) and nothing else."""

    def __init__(self):
        self.evals = []

    def log(self, d, category="train"):
        if category == "eval":
            self.evals.append(dict(step=int(d["step"]), episode_reward=float(d["episode_reward"]),
                                   total_time=float(d["total_time"])))
            print(f"[official] eval step {d['step']}: {float(d['episode_reward']):.1f} "
                  f"({float(d['total_time']):.0f} s)", file=sys.stderr, flush=True)

    def finish(self, agent=None):
        pass


def official_cpu_torch(rp, torch):
    """tools/record_parity.py's ``CpuTorch`` with ``cuda.mem_get_info`` answering (0, 0) (the
    official Buffer's storage heuristic then keeps the replay on the CPU) and the rest of
    ``torch.cuda`` as it is."""
    import types

    cuda = types.SimpleNamespace(mem_get_info=lambda *a, **k: (0, 0), is_available=lambda: False,
                                 manual_seed_all=lambda *a, **k: None)

    class BufferTorch(rp.CpuTorch):
        def __getattr__(self, name):
            if name == "cuda":
                return cuda
            return super().__getattr__(name)

    return rp.CpuTorch(torch), BufferTorch(torch)


def official_run(checkout: str, task: str, seed: int, settings: dict, schedule: dict) -> dict:
    """Train the official code on ``task`` with ``seed`` in this process; returns
    {"evals": [{step, episode_reward, total_time}], "info": {...}}.

    Raises: SystemExit (a checkout that is not 5f6fade, tools/record_parity.py's check),
    ValueError (its resolved config differs from ``settings``, naming the keys)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import record_parity as rp

    root, src, commit = rp.official_checkout(checkout)
    import numpy as np
    import torch

    torch.set_num_threads(1)
    rp.purge_official_modules()
    sys.path.insert(0, str(src))
    import hydra.utils
    from omegaconf import OmegaConf

    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / "learning_parity_official"
    hydra.utils.get_original_cwd = lambda: str(workdir)  # parse_cfg's log folder (nothing is written there)
    import common.buffer as obuffer
    import common.scale as oscale
    import tdmpc2 as oagent
    from common.parser import parse_cfg
    from common.seed import set_seed
    from envs import make_env
    from trainer.online_trainer import OnlineTrainer

    cpu_torch, buffer_torch = official_cpu_torch(rp, torch)
    oagent.torch = cpu_torch
    oscale.torch = cpu_torch
    obuffer.torch = buffer_torch
    replay_buffer = obuffer.ReplayBuffer

    def cpu_replay_buffer(*a, **k):  # pinned host memory needs a CUDA device; no number depends on it
        return replay_buffer(*a, **dict(k, pin_memory=False))

    obuffer.ReplayBuffer = cpu_replay_buffer

    cfg = OmegaConf.load(src / "config.yaml")
    cfg.pop("defaults", None)  # hydra's launcher override, not a setting
    over = {k: v for k, v in settings.items() if k != "seed_steps"}
    cfg.merge_with(dict(over, task=task, seed=int(seed), model_size=None, obs="state", steps=int(schedule["steps"]),
                        eval_freq=int(schedule["eval_freq"]), eval_episodes=int(schedule["eval_episodes"]),
                        save_video=False, save_agent=False, save_csv=False, disable_wandb=True))
    cfg = parse_cfg(cfg)
    set_seed(cfg.seed)
    env = make_env(cfg)
    cfg.seed_steps = int(settings["seed_steps"])  # make_env derives max(1000, 5 T); ours is set explicitly
    agent = oagent.TDMPC2(cfg)
    bad = {k: (cfg[k], v) for k, v in settings.items() if not _same(cfg[k], v)}
    if not _same(agent.discount, expected_discount(settings)):
        bad["discount"] = (agent.discount, expected_discount(settings))
    if cfg.episode_length != EPISODE_LENGTH:
        bad["episode_length"] = (cfg.episode_length, EPISODE_LENGTH)
    if bad:
        raise ValueError(f"official: its resolved config differs from the benchmark's (key: (official, wanted)): {bad}")
    log = _EvalLog()
    trainer = OnlineTrainer(cfg=cfg, env=env, agent=agent, buffer=obuffer.Buffer(cfg), logger=log)
    t = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t
    import tensordict
    import torchrl

    info = dict(commit=commit, torch=torch.__version__, tensordict=tensordict.__version__,
                torchrl=torchrl.__version__, numpy=np.__version__, torch_threads=torch.get_num_threads(),
                official_files_sha256=_official_hashes(rp, root, src), params=int(agent.model.total_params),
                wall_s=wall, discount=float(agent.discount), seed_steps=int(cfg.seed_steps),
                episode_length=int(cfg.episode_length), action_dim=int(cfg.action_dim))
    return dict(evals=log.evals, info=info)


def _official_hashes(rp, root, src) -> dict:
    files = {}
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if f and Path(f).resolve().is_relative_to(src):
            files[str(Path(f).resolve().relative_to(root))] = rp.sha256(Path(f).resolve())
    return dict(sorted(files.items()))


def official_rows(task: str, seed: int, result: dict, schedule: dict) -> list[dict]:
    return [dict(implementation="official", task=task, seed=int(seed), agent_step=int(e["step"]),
                 env_frames=int(e["step"]) * ACTION_REPEAT, episode_return=float(e["episode_reward"]),
                 eval_episodes=int(schedule["eval_episodes"])) for e in result["evals"]]


# =================================================================== our side
def ours_agent(task: str, settings: dict):
    """Our agent for ``task`` with ``settings`` mapped to our names (:data:`OURS_NAME`); raises
    ValueError naming every key whose resolved value differs."""
    import dataclasses

    from tdmpc2core.agents.single_task import TDMPC2

    kw = {OURS_NAME[k]: v for k, v in settings.items()}
    agent = TDMPC2(f"dmc:{task}", model_size=5, action_repeat=ACTION_REPEAT, episode_length=EPISODE_LENGTH * ACTION_REPEAT,
                   **kw)
    got = dataclasses.asdict(agent.cfg)
    bad = {k: (got[OURS_NAME[k]], v) for k, v in settings.items() if not _same(got[OURS_NAME[k]], v)}
    if not _same(agent.gamma, expected_discount(settings)):
        bad["discount"] = (agent.gamma, expected_discount(settings))
    if agent.episode_length != EPISODE_LENGTH or agent.action_repeat != ACTION_REPEAT:
        bad["episode_length/action_repeat"] = ((agent.episode_length, agent.action_repeat),
                                               (EPISODE_LENGTH, ACTION_REPEAT))
    if bad:
        raise ValueError(f"ours: the agent's resolved config differs from the benchmark's (key: (ours, wanted)): {bad}")
    return agent


def ours_run(task: str, seeds, settings: dict, schedule: dict) -> tuple[list[dict], dict]:
    """Train our agent on ``task``, all ``seeds`` vmapped; returns (rows, info)."""
    import jax

    agent = ours_agent(task, settings)
    t = time.perf_counter()
    _, hist = agent.train(seed=list(seeds), n_timesteps=int(schedule["steps"]), eval_every=int(schedule["eval_freq"]),
                          eval_episodes=int(schedule["eval_episodes"]))
    wall = time.perf_counter() - t
    rows = []
    for i, step in enumerate(hist["eval_agent_steps"]):
        for j, s in enumerate(seeds):
            rows.append(dict(implementation="ours", task=task, seed=int(s), agent_step=int(step),
                             env_frames=int(hist["eval_env_frames"][i]), episode_return=float(hist["eval_return"][i, j]),
                             eval_episodes=int(schedule["eval_episodes"])))
    info = dict(jax=jax.__version__, wall_s=wall, compile_s=agent.compile_seconds, seeds=list(seeds),
                kernels=agent.cfg.kernels)
    return rows, info


# =================================================================== driving
def _worker(args) -> int:
    """``--worker official``: one (task, seed) of the official code; JSON to ``--result``."""
    from tdmpc2core.io.atomic import write_json

    spec = json.loads(Path(args.spec).read_text())
    try:
        res = official_run(spec["official"], spec["task"], spec["seed"], spec["settings"], spec["schedule"])
        res["ok"] = True
    except Exception as e:  # noqa: BLE001 (the driver records it; one cell lost)
        traceback.print_exc()
        res = dict(ok=False, error=f"{type(e).__name__}: {e}")
    write_json(args.result, res)
    return 0 if res["ok"] else 1


def _run_official_cell(args, task, seed, settings, schedule, tmp: Path, log) -> tuple[list, dict]:
    spec = tmp / f"official-{task}-{seed}.spec.json"
    result = tmp / f"official-{task}-{seed}.json"
    spec.write_text(json.dumps(dict(official=args.official, task=task, seed=seed, settings=settings,
                                    schedule=schedule)))
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE", MKL_NUM_THREADS="1")
    cmd = [args.official_python, str(Path(__file__).resolve()), "--worker", "official", "--spec", str(spec),
           "--result", str(result)]
    t = time.perf_counter()
    logf = tmp / f"official-{task}-{seed}.log"
    with open(logf, "w") as f:
        proc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=str(tmp))
    wall = time.perf_counter() - t
    if proc.returncode != 0 or not result.exists():
        tail = logf.read_text()[-2000:]
        log(f"official {task} seed {seed}: FAILED (exit {proc.returncode}); log {logf}:\n{tail}")
        return [], dict(ok=False, wall_s=wall, log=str(logf))
    res = json.loads(result.read_text())
    log(f"official {task} seed {seed}: {len(res['evals'])} evaluations, last {res['evals'][-1]['episode_reward']:.1f}, "
        f"{wall:.0f} s ({uptime()})")
    return official_rows(task, seed, res, schedule), dict(res["info"], process_wall_s=wall)


def plan(args) -> tuple[dict, dict, list, list, list, Path]:
    """``run``'s arguments resolved: (settings, schedule, tasks, seeds, implementations, out).
    Raises SystemExit (one line) for the official side without a checkout, a schedule the
    official code cannot follow, or an existing ``out`` without ``--overwrite``."""
    settings = dict(SETTINGS)
    schedule = dict(SCHEDULE)
    tasks, seeds = list(args.tasks or TASKS), list(args.seeds if args.seeds is not None else SEEDS)
    if args.implementations is None:  # the default: both, or ours alone without a checkout
        impls = ["ours", "official"] if args.official else ["ours"]
        if not args.official:
            print("learning_parity: no --official checkout given: ours only", file=sys.stderr)
    else:
        impls = list(dict.fromkeys(args.implementations))
        if "official" in impls and not args.official:
            raise SystemExit("error: --implementations official needs --official (a checkout of "
                             "nicklashansen/tdmpc2 at 5f6fade) and --official-python")
    if args.reduced:
        settings.update(REDUCED["overrides"], seed_steps=REDUCED["seed_steps"])
        schedule.update(steps=REDUCED["steps"], eval_freq=REDUCED["eval_freq"], eval_episodes=REDUCED["eval_episodes"])
        if "official" in impls:
            schedule.update(REDUCED_WITH_OFFICIAL)
        tasks, seeds = list(args.tasks or REDUCED["tasks"]), list(args.seeds or REDUCED["seeds"])
    for k in ("steps", "eval_freq", "eval_episodes"):
        if getattr(args, k) is not None:
            schedule[k] = int(getattr(args, k))
    if schedule["steps"] % schedule["eval_freq"]:
        raise SystemExit(f"error: steps={schedule['steps']} must be a multiple of eval_freq={schedule['eval_freq']}")
    if "official" in impls and schedule["eval_freq"] % EPISODE_LENGTH:
        raise SystemExit(f"error: eval_freq={schedule['eval_freq']} must be a multiple of the episode length "
                         f"{EPISODE_LENGTH}: the official code evaluates at episode boundaries only")
    out = Path(args.out) if args.out else (
        Path(os.environ.get("TMPDIR", "/tmp")) / "learning_parity_reduced.parquet" if args.reduced else DEFAULT_RESULTS)
    scratch = args.reduced and not args.out  # the reduced form's own file in $TMPDIR: replaced each time
    if out.exists() and not (args.overwrite or scratch):
        what = " (the committed comparison)" if out.resolve() == DEFAULT_RESULTS.resolve() else ""
        raise SystemExit(f"error: {out} exists{what}; give another --out, or --overwrite to replace it")
    return settings, schedule, tasks, seeds, impls, out


def run(args) -> int:
    from tdmpc2core.io.atomic import write_json, write_parquet

    settings, schedule, tasks, seeds, impls, out = plan(args)
    tmp = Path(args.workdir or (str(out) + ".work"))
    tmp.mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(f"[learning_parity {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    rows, cells = [], {}
    partial = tmp / "rows.jsonl"
    partial.write_text("")  # this run's cells only: `collect` after a stop must not mix in an older run's
    start = time.perf_counter()
    meta = dict(settings=settings, schedule=schedule, tasks=tasks, seeds=seeds, implementations=impls,
                episode_length=EPISODE_LENGTH, action_repeat=ACTION_REPEAT, ours_name=OURS_NAME,
                official_commit=OFFICIAL_COMMIT, python=platform.python_version(), machine=platform.platform(),
                uptime_start=uptime(), reduced=bool(args.reduced), tdmpc2core_commit=_git_commit(ROOT))
    for task in tasks:
        if "ours" in impls:
            log(f"ours {task} seeds {seeds} ({uptime()})")
            r, info = ours_run(task, seeds, settings, schedule)
            rows += r
            cells[f"ours/{task}"] = info
            last = [x["episode_return"] for x in r if x["agent_step"] == max(y["agent_step"] for y in r)]
            log(f"ours {task}: {info['wall_s']:.0f} s, last returns {[round(v, 1) for v in last]} ({uptime()})")
            with open(partial, "a") as f:
                f.writelines(json.dumps(x) + "\n" for x in r)
        if "official" in impls:
            for seed in seeds:
                r, info = _run_official_cell(args, task, seed, settings, schedule, tmp, log)
                rows += r
                cells[f"official/{task}/{seed}"] = info
                with open(partial, "a") as f:
                    f.writelines(json.dumps(x) + "\n" for x in r)
    meta.update(cells=cells, wall_s=time.perf_counter() - start, uptime_end=uptime())
    failed = sorted(k for k, v in cells.items() if not v.get("ok", True))
    df = _frame(rows)
    if df.empty:
        raise SystemExit(f"error: no cell finished ({', '.join(failed)} failed: their logs are in {tmp}); nothing written")
    write_parquet(out, df)
    write_json(out.with_suffix(".json"), dict(meta, failed_cells=failed))
    log(f"wrote {out} ({len(df)} rows) and {out.with_suffix('.json')}; {meta['wall_s']:.0f} s in all")
    if failed:
        raise SystemExit(f"error: {len(failed)} cell(s) failed: {', '.join(failed)} (logs in {tmp}); {out} holds "
                         f"the others")
    return 0


def collect(args) -> int:
    """Write the Parquet file from a run's work folder (its ``rows.jsonl``, appended after every
    cell): the rows of the cells that finished, e.g. of a run that was stopped."""
    from tdmpc2core.io.atomic import write_parquet

    src = Path(args.workdir or (str(args.out) + ".work")) / "rows.jsonl"
    if not src.exists():
        raise SystemExit(f"error: {src} does not exist (no cell finished, or another --workdir)")
    if Path(args.out).exists() and not args.overwrite:
        raise SystemExit(f"error: {args.out} exists; give another --out, or --overwrite to replace it")
    rows = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    if not rows:
        raise SystemExit(f"error: {src} holds no rows (no cell finished)")
    df = _frame(rows).drop_duplicates(["implementation", "task", "seed", "agent_step"], keep="last")
    write_parquet(args.out, df)
    print(f"wrote {args.out}: {len(df)} rows from {src}", file=sys.stderr)
    return 0


def _frame(rows):
    import pandas as pd

    df = pd.DataFrame(rows, columns=["implementation", "task", "seed", "agent_step", "env_frames", "episode_return",
                                     "eval_episodes"])
    return df.astype(dict(seed="int64", agent_step="int64", env_frames="int64", episode_return="float64",
                          eval_episodes="int64"))


def analyze(args) -> int:
    """The comparison of one results file, or of several pooled (their rows concatenated: e.g.
    a second batch of seeds beside the first; a row in two files is an error). Writes
    ``<figures>/<name>_<task>.png`` per task and ``<name>.md`` beside the first file, where
    ``name`` is ``--name`` or the only file's stem (so analysing another file never writes over
    the committed comparison's figures)."""
    import pandas as pd

    from tdmpc2core.io.atomic import write_text
    from tdmpc2core.report import learning_parity as lp

    results = [Path(p) for p in (args.results or [DEFAULT_RESULTS])]
    if len(results) > 1 and not args.name:
        raise SystemExit("error: several --results are pooled under one --name (the figures' and summary's stem)")
    name = args.name or results[0].stem
    try:
        frames = [lp.read_results(p) for p in results]
        df = lp.check_frame(pd.concat(frames, ignore_index=True), " + ".join(map(str, results)))
        if args.tasks:
            unknown = sorted(set(args.tasks) - set(df["task"]))
            if unknown:
                raise ValueError(f"--tasks {unknown}: not in the results (tasks {lp.tasks_of(df)})")
            df = df[df["task"].isin(args.tasks)].reset_index(drop=True)
        curves = lp.curve_table(df)
        comp = lp.comparison(df)
    except (OSError, ValueError) as e:  # a missing or wrong file, named: one line, no traceback
        raise SystemExit(f"error: {e}")
    figs = Path(args.figures) if args.figures else results[0].parent
    for task in lp.tasks_of(df):
        lp.plot_task(curves, task, figs / f"{name}_{task}.png", df=df)
    metas = [r.with_suffix(".json") for r in results]
    reduced = [str(r) for r, m in zip(results, metas) if m.exists() and json.loads(m.read_text()).get("reduced")]
    md = ["# Learning beside the official code", "",
          *([f"**A reduced run** ({', '.join(reduced)}: `run --reduced`, a tiny model, a few hundred agent steps): "
             "it checks that the harness runs and says nothing about learning.", ""] if reduced else []),
          f"Margin +-{lp.MARGIN:g} return, TOST at alpha {lp.ALPHA} (Welch) on each seed's mean return over the "
          f"last {lp.LAST_POINTS} evaluation points; bootstrap {int(lp.CI_LEVEL * 100)}% CIs over seeds.", "",
          lp.comparison_markdown(comp), "## Per evaluation point", "",
          "| task | agent step | official mean [95% CI] | ours mean [95% CI] |", "|---|---|---|---|"]
    for (task, step), g in curves.groupby(["task", "agent_step"], sort=True):
        cell = {r.implementation: f"{r.mean:.1f} [{r.ci_low:.1f}, {r.ci_high:.1f}] (n={r.n_seeds})"
                for r in g.itertuples()}
        md.append(f"| {task} | {step} | {cell.get('official', '-')} | {cell.get('ours', '-')} |")
    text = "\n".join(md) + "\n"
    out = Path(args.summary or results[0].with_name(name + ".md"))
    write_text(out, text)
    print(text)
    print("\n".join(lp.summary_lines(comp)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line: ``run``, ``collect``, ``analyze`` (and the hidden ``--worker``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", choices=["official"], help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    sub = ap.add_subparsers(dest="cmd")
    r = sub.add_parser("run", help="train both implementations and write the Parquet file")
    r.add_argument("--official", help="a checkout of nicklashansen/tdmpc2 at 5f6fade (without it: ours only)")
    r.add_argument("--official-python", default=sys.executable,
                   help="the Python that runs the official side (PyTorch, torchrl, ...; default this one)")
    r.add_argument("--implementations", nargs="+", choices=["ours", "official"],
                   help="default: both with --official, ours alone without")
    r.add_argument("--tasks", nargs="+", help=f"dm_control tasks (default {' '.join(TASKS)})")
    r.add_argument("--seeds", nargs="+", type=int, help=f"seeds (default {' '.join(map(str, SEEDS))})")
    r.add_argument("--steps", type=int, help=f"agent steps per run (default {SCHEDULE['steps']})")
    r.add_argument("--eval-freq", dest="eval_freq", type=int, help=f"default {SCHEDULE['eval_freq']}")
    r.add_argument("--eval-episodes", dest="eval_episodes", type=int, help=f"default {SCHEDULE['eval_episodes']}")
    r.add_argument("--reduced", action="store_true", help="one task, two seeds, a tiny model; "
                   f"{REDUCED['steps']} agent steps ours alone (the test), {REDUCED_WITH_OFFICIAL['steps']} with "
                   "--official")
    r.add_argument("--out", help=f"the Parquet file (default {DEFAULT_RESULTS.relative_to(ROOT)}; with --reduced "
                   "$TMPDIR/learning_parity_reduced.parquet); a .json beside it")
    r.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    r.add_argument("--workdir", help="per-cell specs, results and logs (default OUT.work)")
    c = sub.add_parser("collect", help="the Parquet file from a (stopped) run's work folder")
    c.add_argument("--out", default=str(DEFAULT_RESULTS))
    c.add_argument("--workdir", help="the run's work folder (default OUT.work)")
    c.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    a = sub.add_parser("analyze", help="the comparison, its Markdown summary and one figure per task")
    a.add_argument("--results", nargs="+", help=f"results file(s), pooled when several (default "
                   f"{DEFAULT_RESULTS.relative_to(ROOT)})")
    a.add_argument("--name", help="stem of the figures and the summary (default: the results file's stem; "
                   "required with several files)")
    a.add_argument("--tasks", nargs="+", help="these tasks only (default all in the results)")
    a.add_argument("--figures", help="folder of the figures (default: the first results file's folder)")
    a.add_argument("--summary", help="Markdown output (default NAME.md beside the first results file)")
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args)
    if args.cmd == "run":
        return run(args)
    if args.cmd == "collect":
        return collect(args)
    if args.cmd == "analyze":
        return analyze(args)
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
