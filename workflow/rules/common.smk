# Shared definitions: the selected protocol, the merged task settings, seed groups, paths.
# No rules here; the rule files include what they need from these names.

import copy
import dataclasses
import difflib
import json
import os
import re
import shlex
import sys

import yaml
from snakemake.exceptions import WorkflowError

RUNS = "results/single"
FIGURES = "results/figures"
TABLES = "results/tables"
RESOLVED = "results/resolved_config.yaml"
BENCHMARKS = "benchmarks/runs"
JAX_CACHE = config["jax_cache_dir"]
# checkpoints of the training jobs: outside results/, because Snakemake deletes the outputs of a
# failed job and a rerun must find them (docs/pipeline.md, "Preemption"). Like threads and the
# cache, these are shell globals, not params: they change no result, so they trigger no rerun.
CHECKPOINTS = config["checkpoint_dir"]
CHECKPOINT_EVERY = int(config["checkpoint_every"])
KEEP_CHECKPOINTS = int(config["keep_checkpoints"])
MAX_CHUNK_SECONDS = float(config["max_chunk_seconds"])
DATASETS = "results/datasets"
# run.json last: it marks a complete run (episodes.parquet is the seed's replay, exported by
# its training job: the replay lives in that process)
RUN_FILES = ["eval.parquet", "metrics.parquet", "episodes.parquet", "run.json"]
# the keys of one task that the training stage receives (docs/artifacts.md, "Task settings"),
# and the optional ones it also accepts (passed only when set)
SPEC_KEYS = [
    "env_id",
    "action_repeat",
    "episode_length",
    "agent_steps",
    "eval_every",
    "eval_episodes",
    "agent",
]
OPTIONAL_SPEC_KEYS = ["n_envs", "backend", "allow_evicted"]

# ---- the protocol -------------------------------------------------------------------
PROTOCOL_NAME = config["protocol"]
if PROTOCOL_NAME not in config["protocols"]:
    raise WorkflowError(
        f"config: protocol {PROTOCOL_NAME!r} has no entry under 'protocols' "
        f"(have: {sorted(config['protocols'])}); add protocols: {{{PROTOCOL_NAME}: {{label: ..., tasks: ...}}}}"
    )
PROTOCOL = config["protocols"][PROTOCOL_NAME]


def _merge_task(name, defaults, task):
    """defaults, then the task's keys; `agent` and `resources` merge key by key."""
    out = copy.deepcopy(defaults)
    for key, value in task.items():
        if key in ("agent", "resources") and isinstance(value, dict):
            out[key] = {**out.get(key, {}), **value}
        else:
            out[key] = copy.deepcopy(value)
    if "action_repeat" not in out and "env_id" in out:
        # the paper's for the suite (2 for DM Control, 1 otherwise), as the library's default
        from tdmpc2core.envs.ids import default_action_repeat

        try:
            out["action_repeat"] = default_action_repeat(out["env_id"])
        except ValueError:
            pass  # the env id check below names the problem
    missing = [k for k in SPEC_KEYS if k not in out]
    if missing:
        raise WorkflowError(
            f"config: task {name!r} of protocol {PROTOCOL_NAME!r} lacks {missing}; set them under "
            f"protocols.{PROTOCOL_NAME}.defaults or under the task"
        )
    out.setdefault("published", None)
    out.setdefault("expected", None)
    return out


TASKS = {
    name: _merge_task(name, PROTOCOL.get("defaults", {}), t)
    for name, t in PROTOCOL["tasks"].items()
}


def _library_checks():
    """tdmpc2core's configuration checks: plain Python modules (tdmpc2core.model.config and the
    env ids of tdmpc2core.envs) that import no JAX, so a dry run works where JAX is not
    installed. Taken from this checkout when the package is not installed in the Python that
    runs Snakemake (e.g. with --use-conda, where the jobs' env has it)."""
    try:
        from tdmpc2core.model import config as library_config
        from tdmpc2core import envs as library_envs
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != "tdmpc2core":
            raise
        sys.path.insert(0, workflow.basedir)
        from tdmpc2core.model import config as library_config
        from tdmpc2core import envs as library_envs
    return library_config, library_envs


LIBRARY_CONFIG, LIBRARY_ENVS = _library_checks()
from tdmpc2core.io import (
    official_data as LIBRARY_OFFICIAL,
)  # plain Python + the task-set table (no torch)

AGENT_KEYS = sorted(f.name for f in dataclasses.fields(LIBRARY_CONFIG.TDMPC2Config))


def _unknown_agent_keys(where, agent, accepted, defaults_agent=None):
    """One line for the first agent key the library does not accept, with the closest one."""
    unknown = [k for k in agent if k not in accepted]
    if unknown:
        key = unknown[0]
        if defaults_agent is not None and key in defaults_agent:
            where = f"protocols.{PROTOCOL_NAME}.defaults.agent"
        close = difflib.get_close_matches(key, accepted, n=1)
        raise WorkflowError(
            f"config: unknown agent setting {key!r} in {where}"
            + (
                f"; did you mean {close[0]!r}?"
                if close
                else f"; accepted: {', '.join(accepted)}"
            )
            + (
                f" (and {len(unknown) - 1} more unknown agent setting(s): {unknown[1:]})"
                if len(unknown) > 1
                else ""
            )
        )


def _check_task(name, t):
    """What the training job would refuse at its start, refused now by the same code
    (tdmpc2core.model.config.validate_config): every agent setting, the env id and the time
    limit, and a batch larger than the replay holds at the first update."""
    where = f"protocols.{PROTOCOL_NAME}.tasks.{name}"
    _unknown_agent_keys(
        f"{where}.agent",
        t["agent"],
        AGENT_KEYS,
        (PROTOCOL.get("defaults") or {}).get("agent") or {},
    )
    try:
        T = LIBRARY_ENVS.time_limit(
            t["env_id"],
            action_repeat=int(t["action_repeat"]),
            episode_length=int(t["episode_length"]),
        )
    except ValueError as e:
        raise WorkflowError(f"config: {where}: env_id {t['env_id']!r}: {e}")
    try:
        cfg = LIBRARY_CONFIG.validate_config(
            LIBRARY_CONFIG.TDMPC2Config(**t["agent"]),
            episode_length=T,
            n_envs=int(t.get("n_envs") or 1),
        )
    except (ValueError, TypeError) as e:
        raise WorkflowError(f"config: {where}.agent (T = {T} agent steps): {e}")
    _n = int(t.get("n_envs") or 1)
    _first_update = (
        -(-cfg.seed_steps // _n) * _n + _n
    )  # agent steps when the burst's tick has run
    if int(t["agent_steps"]) < _first_update:
        raise WorkflowError(
            f"config: {where}: agent_steps={t['agent_steps']} trains nothing: the first update comes "
            f"after the seed phase's seed_steps={cfg.seed_steps} random agent steps, in the tick that "
            f"reaches {_first_update} agent steps (n_envs={_n}); raise agent_steps to at least "
            f"{_first_update} or lower agent.seed_steps"
        )
    if (
        cfg.episodic
    ):  # its first update's data is known only during the run: bounded by the run
        try:
            LIBRARY_CONFIG.check_batch_size(
                cfg.batch_size,
                int(t["agent_steps"]),
                f"the whole run ({t['agent_steps']} agent steps, at most one slice each)",
                "lower agent.batch_size",
            )
        except ValueError as e:
            raise WorkflowError(f"config: {where}.agent: {e}")
    return T, cfg


TASK_T, TASK_CFG = {}, {}
for _name, _t in TASKS.items():
    TASK_T[_name], TASK_CFG[_name] = _check_task(_name, _t)


def _check_expected(where, exp):
    """An expected range that can be met: mean_min <= mean_max."""
    if (
        exp
        and exp.get("mean_min") is not None
        and exp.get("mean_max") is not None
        and exp["mean_min"] > exp["mean_max"]
    ):
        raise WorkflowError(
            f"config: {where}: mean_min {exp['mean_min']} > mean_max {exp['mean_max']}: "
            "no final return could pass"
        )


for _name, _t in TASKS.items():
    _check_expected(
        f"protocols.{PROTOCOL_NAME}.tasks.{_name}.expected", _t.get("expected")
    )

# ---- episode datasets and pools -----------------------------------------------------
ALLOW_EVICTED = bool(PROTOCOL.get("datasets", {}).get("allow_evicted", False))
POOLS = {name: list(tasks) for name, tasks in PROTOCOL.get("pools", {}).items()}
for _pool, _members in POOLS.items():
    _unknown = [t for t in _members if t not in TASKS]
    if _unknown:
        raise WorkflowError(
            f"config: pool {_pool!r} of protocol {PROTOCOL_NAME!r} names task(s) {_unknown} that are not "
            f"under protocols.{PROTOCOL_NAME}.tasks (have: {sorted(TASKS)})"
        )
for _name, _t in TASKS.items():
    _t["allow_evicted"] = ALLOW_EVICTED
    _buffer = int(
        _t["agent"].get("buffer_size", 1_000_000)
    )  # TDMPC2Config's default (spec §1)
    if not ALLOW_EVICTED and int(_t["agent_steps"]) > _buffer:
        raise WorkflowError(
            f"config: task {_name!r} of protocol {PROTOCOL_NAME!r} trains {_t['agent_steps']} agent steps with "
            f"buffer_size {_buffer}: its replay evicts the oldest episodes, so its episode dataset cannot hold "
            f"the whole run. Raise agent.buffer_size, or set protocols.{PROTOCOL_NAME}.datasets.allow_evicted: "
            "true to export what the replay still holds."
        )


# ---- official pools (protocols.<protocol>.official_pools; workflow/rules/official_data.smk) ----
# pool -> {src, task_set, eval_tasks}: the official mt30 / mt80 chunks, converted into a pool
OFFICIAL_POOLS = {
    name: dict(p) for name, p in (PROTOCOL.get("official_pools") or {}).items()
}
OFFICIAL_POOL_TASKS = {}  # pool -> the tasks it is evaluated on
for _pool, _p in OFFICIAL_POOLS.items():
    if _pool in POOLS:
        raise WorkflowError(
            f"config: protocols.{PROTOCOL_NAME}: pool {_pool!r} is under both pools and official_pools"
        )
    _table = LIBRARY_OFFICIAL.task_set_table(_p["task_set"])
    _evaluable = [t["name"] for t in _table if t["env_id"]]
    _eval = list(_p.get("eval_tasks") or _evaluable)
    _bad = [t for t in _eval if t not in _evaluable]
    if _bad:
        raise WorkflowError(
            f"config: protocols.{PROTOCOL_NAME}.official_pools.{_pool}.eval_tasks: {_bad} cannot be evaluated "
            f"(not in {_p['task_set']}, or no environment of ours: docs/dmcontrol.md); evaluable: {_evaluable}"
        )
    OFFICIAL_POOL_TASKS[_pool] = _eval


def official_chunks(pool):
    """The pool's chunk files as the official trainer globs them (*.pt, sorted); none found:
    the rule still runs and the stage names the folder and what it expects."""
    import glob
    import os

    return sorted(glob.glob(os.path.join(OFFICIAL_POOLS[pool]["src"], "*.pt")))


for _pool in OFFICIAL_POOLS:
    if not official_chunks(_pool):  # may still be downloading: said, not refused
        print(
            f"note: official_pools.{_pool}.src {OFFICIAL_POOLS[_pool]['src']!r} holds no *.pt chunk files yet; "
            "convert_official_data will refuse it until the official chunks are there",
            file=sys.stderr,
        )

if not TASKS and not OFFICIAL_POOLS:
    raise WorkflowError(
        f"config: protocols.{PROTOCOL_NAME}.tasks is empty; name at least one task (or official_pools)"
    )


def task_dataset(task):
    return f"{DATASETS}/tasks/{task}.parquet"


def pool_dataset(pool):
    return f"{DATASETS}/pools/{pool}.parquet"


# ---- seeds ---------------------------------------------------------------------------
SEEDS = [int(s) for s in config["seeds"]]
SEEDS_PER_JOB = int(config["seeds_per_job"])
SEED_GROUPS = [
    tuple(SEEDS[i : i + SEEDS_PER_JOB]) for i in range(0, len(SEEDS), SEEDS_PER_JOB)
]


def seed_tag(group):
    """seeds_0_1_2: the name of a seed group in rule names, logs and benchmarks."""
    return "seeds_" + "_".join(str(s) for s in group)


# ---- what the stages receive -----------------------------------------------------------
def task_spec(task):
    """The merged settings of one task, as the JSON the training stage receives."""
    t = TASKS[task]
    spec = {k: t[k] for k in SPEC_KEYS}
    spec.update({k: t[k] for k in OPTIONAL_SPEC_KEYS if t.get(k) is not None})
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def run_files(task, name):
    """One file of every seed's run of a task: results/single/{task}/seed{s}/{name}."""
    return [f"{RUNS}/{task}/seed{s}/{name}" for s in SEEDS]


def all_run_files(name):
    return [p for t in TASKS for p in run_files(t, name)]


# ---- multi-task (protocols.<protocol>.multitask; docs/pipeline.md, "Multi-task") -------------
# One offline multi-task model per (pool, model size), trained on the pool's dataset with
# every seed of `multitask.seeds` (default: the top-level seeds) vmapped in one job.
MULTI = "results/multi"
MULTI_FILES = [
    "eval.parquet",
    "metrics.parquet",
    "run.json",
]  # run.json last: a complete run
MULTITASK = PROTOCOL.get("multitask")
MT_POOLS, MT_SIZES, MT_SEEDS = [], [], []
if MULTITASK:
    MT_POOLS = list(MULTITASK.get("pools") or [*POOLS, *OFFICIAL_POOLS])
    _bad = [p for p in MT_POOLS if p not in POOLS and p not in OFFICIAL_POOLS]
    if _bad or not MT_POOLS:
        raise WorkflowError(
            f"config: protocols.{PROTOCOL_NAME}.multitask.pools names {_bad or 'no pool'}; the pools are those "
            f"under protocols.{PROTOCOL_NAME}.pools and official_pools (have: {sorted([*POOLS, *OFFICIAL_POOLS])})"
        )
    MT_SIZES = [int(s) for s in MULTITASK["model_sizes"]]
    MT_SEEDS = [int(s) for s in MULTITASK.get("seeds") or SEEDS]
    _pooled = {
        t for p in MT_POOLS for t in POOLS.get(p, OFFICIAL_POOL_TASKS.get(p, []))
    }
    _episodic = sorted(
        t
        for t in _pooled
        if t in TASKS and (TASKS[t].get("agent") or {}).get("episodic")
    )
    if _episodic:
        raise WorkflowError(
            f"config: protocols.{PROTOCOL_NAME}.multitask trains pool(s) "
            f"{[p for p in MT_POOLS if set(POOLS[p]) & set(_episodic)]} holding episodic task(s) {_episodic}: the "
            "multi-task agent has no termination head and refuses terminating data (docs/deviations.md M7). "
            f"Leave those tasks out of the pools in multitask.pools."
        )
    for _key in ("return_ranges",):
        _bad = sorted(set(MULTITASK.get(_key) or {}) - _pooled)
        if _bad:
            raise WorkflowError(
                f"config: protocols.{PROTOCOL_NAME}.multitask.{_key} names task(s) {_bad} that no trained pool holds "
                f"(pooled tasks: {sorted(_pooled)})"
            )
    for _task, _rg in (MULTITASK.get("return_ranges") or {}).items():
        if len(_rg) != 2 or not _rg[0] < _rg[1]:
            raise WorkflowError(
                f"config: protocols.{PROTOCOL_NAME}.multitask.return_ranges.{_task} = {_rg}: need [low, high] "
                "with low < high"
            )
    for _pool, _exp in (MULTITASK.get("expected") or {}).items():
        for _task, _e in (_exp or {}).items():
            _check_expected(
                f"protocols.{PROTOCOL_NAME}.multitask.expected.{_pool}.{_task}", _e
            )
        _bad = sorted(
            set(_exp or {}) - set(POOLS.get(_pool, OFFICIAL_POOL_TASKS.get(_pool, [])))
        )
        if _pool not in MT_POOLS or _bad:
            raise WorkflowError(
                f"config: protocols.{PROTOCOL_NAME}.multitask.expected.{_pool}: "
                + (
                    f"{_pool!r} is not a trained pool ({MT_POOLS})"
                    if _pool not in MT_POOLS
                    else f"task(s) {_bad} are not in pool {_pool!r} "
                    f"({POOLS.get(_pool, OFFICIAL_POOL_TASKS.get(_pool))})"
                )
            )
    if "model_size" in (MULTITASK.get("agent") or {}):
        raise WorkflowError(
            f"config: protocols.{PROTOCOL_NAME}.multitask.agent.model_size: the model sizes are multitask.model_sizes"
        )
    _mt_agent = dict(MULTITASK.get("agent") or {})
    _unknown_agent_keys(
        f"protocols.{PROTOCOL_NAME}.multitask.agent",
        _mt_agent,
        sorted(AGENT_KEYS + ["task_dim"]),
    )
    _mt_agent.pop("task_dim", None)
    for _pool in MT_POOLS:
        if _pool in OFFICIAL_POOLS:
            # the official data's episodes are known only once converted: the agent's settings are
            # checked here, its batch against the pool when the job loads it (train-multi)
            _table = LIBRARY_OFFICIAL.task_set_table(OFFICIAL_POOLS[_pool]["task_set"])
            for _size in MT_SIZES:
                try:
                    LIBRARY_CONFIG.resolve_config(
                        LIBRARY_CONFIG.TDMPC2Config(
                            **_mt_agent,
                            model_size=_size,
                            batch_size=int(MULTITASK.get("batch_size") or 1024),
                        ),
                        episode_length=min(t["episode_length"] for t in _table),
                        action_dim=0,
                    )
                except (ValueError, TypeError) as e:
                    raise WorkflowError(
                        f"config: protocols.{PROTOCOL_NAME}.multitask (pool {_pool}, model size {_size}): {e}"
                    )
            continue
        # as TDMPC2MultiTask builds its configuration (the pool's shortest episode), per model size
        _T_min = min(TASK_T[t] for t in POOLS[_pool])
        for _size in MT_SIZES:
            _where = f"protocols.{PROTOCOL_NAME}.multitask (pool {_pool}, model size {_size})"
            try:
                _mt_cfg = LIBRARY_CONFIG.resolve_config(
                    LIBRARY_CONFIG.TDMPC2Config(
                        **_mt_agent,
                        model_size=_size,
                        batch_size=int(MULTITASK.get("batch_size") or 1024),
                    ),
                    episode_length=_T_min,
                    action_dim=0,
                )
            except (ValueError, TypeError) as e:
                raise WorkflowError(f"config: {_where}: {e}")
            # the pool's sampleable slices, from the episodes each pooled run's replay will export
            _rows = []
            for _task in POOLS[_pool]:
                _t, _T = TASKS[_task], TASK_T[_task]
                _held = LIBRARY_CONFIG.episodes_held_at_end(
                    TASK_CFG[_task],
                    agent_steps=int(_t["agent_steps"]),
                    episode_length=_T,
                    n_envs=int(_t.get("n_envs") or 1),
                )
                _rows += [_T + 1] * (_held * len(SEEDS))
            try:
                LIBRARY_CONFIG.check_batch_size(
                    _mt_cfg.batch_size,
                    LIBRARY_CONFIG.slices_in_episodes(_rows, _mt_cfg.horizon),
                    f"pool {_pool!r} ({len(_rows)} episodes exported by its tasks' runs, horizon {_mt_cfg.horizon})",
                    "lower multitask.batch_size, or pool longer runs",
                )
            except ValueError as e:
                raise WorkflowError(f"config: {_where}: {e}")
MT_RESOURCES = {
    "gpu": 0,
    "runtime": 60,
    "mem_mb": 4000,
    **((MULTITASK or {}).get("resources") or {}),
}
# updates between the multi-task jobs' checkpoints (a shell global: not a rerun trigger)
MT_CHECKPOINT_EVERY = int(
    (MULTITASK or {}).get("checkpoint_every")
    or (MULTITASK or {}).get("eval_every")
    or 1
)


def multi_spec(pool):
    """The multi-task settings one train-multi job receives (docs/artifacts.md): the pool's
    own tasks' return ranges only."""
    m = MULTITASK
    spec = {
        k: m[k]
        for k in (
            "updates",
            "batch_size",
            "eval_every",
            "eval_episodes",
            "log_every",
            "backend",
            "device_budget_bytes",
        )
        if m.get(k) is not None
    }
    spec["agent"] = dict(m.get("agent") or {})
    if pool in OFFICIAL_POOLS:
        spec["eval_tasks"] = OFFICIAL_POOL_TASKS[pool]
    members = POOLS.get(pool) or OFFICIAL_POOL_TASKS[pool]
    ranges = {
        t: list(r) for t, r in (m.get("return_ranges") or {}).items() if t in members
    }
    if ranges:
        spec["return_ranges"] = ranges
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def multi_files(name):
    """One file of every multi-task run: results/multi/{pool}/size{size}/{name}."""
    return [f"{MULTI}/{p}/size{s}/{name}" for p in MT_POOLS for s in MT_SIZES]


# what the report needs of the multi-task stage (called after multitask.smk defined `scaling`)


def multitask_report_inputs():
    """What the report needs of the multi-task stage (nothing without a multitask block)."""
    if not MULTITASK:
        return []
    return [
        rules.scaling.output.scaling,
        rules.scaling.output.tasks,
        rules.scaling.output.figure,
    ]


def multitask_run_files():
    """The multi-task runs' run.json files (the report shows their runtimes)."""
    return [
        f"{MULTI}/{pool}/size{size}/run.json" for pool in MT_POOLS for size in MT_SIZES
    ]


MULTITASK_RESOLVED = None
if MULTITASK:
    MULTITASK_RESOLVED = {
        "pools": MT_POOLS,
        "model_sizes": MT_SIZES,
        "seeds": MT_SEEDS,
        **{
            k: v
            for k, v in MULTITASK.items()
            if k not in ("pools", "model_sizes", "seeds")
        },
    }

RESOLVED_CONFIG = {
    "protocol": PROTOCOL_NAME,
    "label": PROTOCOL["label"],
    "seeds": SEEDS,
    "seeds_per_job": SEEDS_PER_JOB,
    "threads_per_job": int(config["threads_per_job"]),
    "jax_cache_dir": config["jax_cache_dir"],
    "checkpoint_dir": CHECKPOINTS,
    "checkpoint_every": CHECKPOINT_EVERY,
    "keep_checkpoints": KEEP_CHECKPOINTS,
    "max_chunk_seconds": MAX_CHUNK_SECONDS,
    "bootstrap_reps": int(config["bootstrap_reps"]),
    "tasks": TASKS,
    # an official pool: the tasks its models are evaluated on (the scaling stage's per-task rows)
    "pools": {**POOLS, **OFFICIAL_POOL_TASKS},
    "official_pools": OFFICIAL_POOLS,
    "datasets": {"allow_evicted": ALLOW_EVICTED},
    "multitask": MULTITASK_RESOLVED,
}
RESOLVED_YAML = (
    "# The configuration this run used (protocol selected, task settings merged with the defaults).\n"
    "# Written by the Snakefile's resolve_config rule; read by `tdmpc2 tables/figures/report`.\n"
    + yaml.safe_dump(RESOLVED_CONFIG, sort_keys=False, default_flow_style=False)
)

# ---- how rules call the stages ----------------------------------------------------------
# TDMPC2 (and JAX_CACHE) are used in shell commands as globals, not params, on purpose: a
# params value is a rerun trigger, and moving the virtualenv or the cache must not retrain.
# With --use-conda the env of envs/tdmpc2.yaml provides `tdmpc2`; otherwise the Python that
# runs Snakemake (the project's virtualenv) runs the CLI module, whether or not its bin/ is on PATH.
_USE_CONDA = False
try:
    from snakemake_interface_executor_plugins.settings import DeploymentMethod

    _USE_CONDA = (
        DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
    )
except Exception:
    pass
TDMPC2 = "tdmpc2" if _USE_CONDA else f"{shlex.quote(sys.executable)} -m tdmpc2core.cli"
CONDA_ENV = "../../envs/tdmpc2.yaml"  # relative to workflow/rules/


# ---- jobs on a cluster and on GPUs (config key `cluster`; docs/pipeline.md, "SLURM") -------
# Every submitted rule sets its own resources from the config (gpu, runtime, mem_mb and
# slurm_extra), so nothing it needs comes from the profile's default-resources, which a
# --default-resources on the command line replaces as a whole.
CLUSTER = config["cluster"]
MAX_JOB_MINUTES = int(CLUSTER["max_job_minutes"])
if MAX_CHUNK_SECONDS >= float(CLUSTER["stop_lead_seconds"]):
    raise WorkflowError(
        f"config: max_chunk_seconds={MAX_CHUNK_SECONDS:g} is not below cluster.stop_lead_seconds="
        f"{CLUSTER['stop_lead_seconds']}: a job told to stop that long before its time limit finishes its "
        "running call first (up to max_chunk_seconds) and then writes its checkpoint, so it could be killed "
        "before the checkpoint; lower max_chunk_seconds (e.g. 30) or raise cluster.stop_lead_seconds"
    )
# sbatch --signal=TERM@N: SIGTERM to every process of the job step N s before its time limit
# (the trainer checkpoints and exits 143; the retry resumes), then the config's own options
SLURM_EXTRA = " ".join(
    x
    for x in (
        f"--signal=TERM@{int(CLUSTER['stop_lead_seconds'])}",
        CLUSTER.get("slurm_extra") or "",
    )
    if x
)


def job_runtime(minutes):
    """A submitted job's --time (minutes): the run's runtime, at most cluster.max_job_minutes."""
    return min(int(minutes), MAX_JOB_MINUTES)


def job_threads(resources):
    """A job's CPU threads: its `resources.threads`, else the top-level threads_per_job
    (Snakemake lowers either to --cores)."""
    return int(resources.get("threads") or config["threads_per_job"])


def extra_jobs(minutes):
    """How many more jobs than one a run of `minutes` needs under cluster.max_job_minutes."""
    return max(0, -(-int(minutes) // MAX_JOB_MINUTES) - 1)


# training rule -> the longest runtime (minutes) of its jobs; where jobs are submitted, the
# onstart: handler (hooks.smk) gives the rule one extra retry per further job its longest run
# needs: a job stopped at its time limit checkpoints, fails and is resubmitted, and the retry
# resumes. (Rule retries are set there because the --retries asked for are not known yet
# while the Snakefile is read.)
LONG_RUNS = {}


# JAX's persistent compilation cache, shared by every training job: with a size limit set, JAX
# guards each read and write of an entry with a file lock (filelock, on <cache>/.lockfile), so
# concurrent jobs never read an entry another is still writing (tests/test_workflow.py runs two
# at once on one folder). The limit is far above what the workflow's programs take (MBs each).
JAX_CACHE_MAX_BYTES = 100 * 2**30


def jax_env(gpu):
    """The JAX environment of a training job's shell: the compilation cache's size limit (which
    turns on its file lock), then JAX_PLATFORMS=cpu for a job without a GPU (it neither looks
    for a GPU nor grabs one it was not given), or for a GPU job the memory settings of
    cluster.gpu_mem_fraction / cluster.gpu_preallocate. A GPU job sees the GPUs its scheduler
    gave it (SLURM sets CUDA_VISIBLE_DEVICES); the platform is not forced, so it runs on the
    CPU where JAX has no GPU backend (run.json records the backend)."""
    cache = f"JAX_COMPILATION_CACHE_MAX_SIZE={JAX_CACHE_MAX_BYTES}"
    if not int(gpu):
        return f"{cache} JAX_PLATFORMS=cpu"
    return (
        f"{cache} XLA_PYTHON_CLIENT_PREALLOCATE={'true' if CLUSTER['gpu_preallocate'] else 'false'} "
        f"XLA_PYTHON_CLIENT_MEM_FRACTION={float(CLUSTER['gpu_mem_fraction']):g}"
    )


# ---- the code version of each stage (a params: of its rules) -------------------------------
# A rerun trigger for code changes of tdmpc2core: a hash of the stage's module and every
# tdmpc2core module it imports (followed statically, transitively), each as its syntax tree
# without docstrings, so comments, docstrings and formatting change nothing while any code
# change of what the stage runs reruns its jobs and what depends on them. cli.py (the
# dispatcher) is not part of it. docs/pipeline.md, "Rerunning one seed, one task".
import ast
import hashlib
from pathlib import Path

LIBRARY_ROOT = (
    Path(LIBRARY_CONFIG.__file__).resolve().parents[1]
)  # the tdmpc2core the jobs run


def _module_path(name):
    base = LIBRARY_ROOT.parent.joinpath(*name.split("."))
    for p in (base / "__init__.py", base.with_suffix(".py")):
        if p.is_file():
            return p
    return None


def _module_imports(name, tree, is_package):
    """The tdmpc2core modules a module imports (at any depth of its code)."""
    found = set()
    pkg = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {
                a.name for a in node.names if a.name.split(".")[0] == "tdmpc2core"
            }
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - (node.level - 1)]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            if src.split(".")[0] != "tdmpc2core":
                continue
            subs = {
                f"{src}.{a.name}" for a in node.names if _module_path(f"{src}.{a.name}")
            }
            found |= subs
            if len(subs) < len(node.names):  # a name defined in the module itself
                found.add(src)
    return found


def _strip_docstrings(tree):
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return tree


def code_version(stage):
    """sha256 (16 hex digits) of tdmpc2core.stages.<stage> and what it imports, comments and
    docstrings aside. Raises WorkflowError if the stage module is missing."""
    todo, seen, digest = [f"tdmpc2core.stages.{stage}"], {}, hashlib.sha256()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen[name], imports = _module_code(name)
        todo += sorted(imports - set(seen))
    for name in sorted(seen):
        digest.update(f"{name}\n{seen[name]}\n".encode())
    return digest.hexdigest()[:16]


MODULE_CODE = {}


def _module_code(name):
    """(the module's AST dump without docstrings, the library modules it imports), parsed
    once per workflow load: the stages share most of their imports."""
    if name not in MODULE_CODE:
        path = _module_path(name)
        if path is None:
            raise WorkflowError(f"code version: no module {name} under {LIBRARY_ROOT}")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        MODULE_CODE[name] = (
            ast.dump(_strip_docstrings(tree), include_attributes=False),
            _module_imports(name, tree, path.name == "__init__.py"),
        )
    return MODULE_CODE[name]


CODE_VERSION = {}


def stage_code(stage):
    """code_version(stage), computed once per stage."""
    if stage not in CODE_VERSION:
        CODE_VERSION[stage] = code_version(stage)
    return CODE_VERSION[stage]


# ---- released (official) checkpoints (config key official_checkpoints; official.smk) --------
OFFICIAL = "results/official"
OFFICIAL_FILES = ["eval.parquet", "run.json"]  # run.json last: a complete evaluation
OFFICIAL_CFG = config.get("official_checkpoints")
OFFICIAL_CKPTS = dict((OFFICIAL_CFG or {}).get("checkpoints") or {})
OFFICIAL_RESOURCES = dict((OFFICIAL_CFG or {}).get("resources") or {})


def _check_official_tasks():
    """Task names a job would refuse, refused now (plain Python: no JAX, no dm_control)."""
    from tdmpc2core.envs import official_tasks

    sets = ["all", *official_tasks.task_set_names()]
    for name, ck in OFFICIAL_CKPTS.items():
        path = os.path.join(OFFICIAL_CFG["dir"], ck["file"])
        if not os.path.isfile(path):
            raise WorkflowError(
                f"config: official_checkpoints.checkpoints.{name}.file: {path} does not exist "
                f"(official_checkpoints.dir {OFFICIAL_CFG['dir']!r} + file {ck['file']!r}): download the "
                "checkpoint there, or correct the path"
            )
        for t in ck["tasks"]:
            if t in sets:
                continue
            why = official_tasks.unavailable_reason(t)
            if not t.startswith("dmc:") or why is not None:
                raise WorkflowError(
                    f"config: official_checkpoints.checkpoints.{name}.tasks: {t!r} "
                    + (
                        f"cannot be evaluated here ({why}); "
                        if t.startswith("dmc:")
                        else "is not accepted; "
                    )
                    + f"accepted: {sets} or a dm_control id (dmc:<official name>, `tdmpc2core.envs.list_env_ids()`)"
                )


def official_args(name):
    """The evaluate-official options of one checkpoint (shell-quoted)."""
    ck, c = OFFICIAL_CKPTS[name], OFFICIAL_CFG
    args = [a for t in ck["tasks"] for a in ("--task", t)]
    args += [
        "--episodes",
        str(c.get("episodes", 10)),
        "--seed",
        str(c.get("seed", 1)),
        "--episode-length",
        str(c.get("episode_length", 1000)),
    ]
    if ck.get("model_size") is not None:
        args += ["--model-size", str(ck["model_size"])]
    if ck.get("task_set"):
        args += ["--task-set", ck["task_set"]]
    for k, v in sorted((c.get("planner") or {}).items()):
        args += ["--planner", f"{k}={v}"]
    return " ".join(shlex.quote(a) for a in args)


def official_outputs():
    """Every output of the released-checkpoint evaluations (none when the key is absent)."""
    if not OFFICIAL_CKPTS:
        return []
    return [
        f"{OFFICIAL}/{n}/{f}" for n in OFFICIAL_CKPTS for f in OFFICIAL_FILES
    ] + list(rules.official_table.output)


def official_report_inputs():
    """The table the report's "Released checkpoints, our planner" section shows (none when off)."""
    return [rules.official_table.output.table] if OFFICIAL_CKPTS else []


# ---- paths the stages are given (derived from a rule's files, not hard-coded prefixes) -----
def parent(path, levels=1):
    """The folder `levels` above `path` (a rule's input or output file)."""
    return str(Path(str(path)).parents[levels - 1])


wildcard_constraints:
    task="|".join(re.escape(t) for t in TASKS),
