"""The workflow's configuration, resolved and checked into one typed object.

``resolve(config)`` takes the merged, schema-validated configuration (config.yaml, then every
--configfile and --config over it; Snakemake fills the schema's defaults first) and returns a
:class:`Pipeline`: the selected protocol, every task with its merged settings, the seeds and
their groups, the pools, the official pools, the multi-task block, the released checkpoints,
the cluster settings and the resolved YAML the later stages read. Whatever a job would refuse
at its start is refused here, at load, by the library's own checks
(tdmpc2core.model.config.validate_config, the env ids' time_limit, the official task sets), as
:class:`ConfigError`: one line naming the key and what is accepted (docs/pipeline.md,
"Configuration"). Plain Python: imports no JAX and no Snakemake, so a login node validates.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import glob
import json
import os
import re
import shlex
from pathlib import Path

import yaml

from tdmpc2core import envs as library_envs
from tdmpc2core.io import official_data as library_official
from tdmpc2core.io.loggers import logger_kinds
from tdmpc2core.io.spec import MultiSpec, TaskSpec
from tdmpc2core.model import config as library_config
from tdmpc2core.pipeline.checks import (AGENT_KEYS, ConfigError, check_expected as _check_expected,  # noqa: F401
                                        agent_key_written_at, check_extensions,
                                        unknown_agent_keys as _unknown_agent_keys)
from tdmpc2core.pipeline.cluster import Cluster, cluster_from_config
from tdmpc2core.pipeline.multitask import Multitask, check_multitask  # noqa: F401 (Multitask: the type of Pipeline.multitask)

__all__ = ["ConfigError", "Pipeline", "resolve", "seed_tag", "train_rule_name", "parent", "task_dataset", "pool_dataset", "RUNS", "FIGURES", "TABLES", "RESOLVED",
           "BENCHMARKS", "DATASETS", "MULTI", "OFFICIAL", "RUN_FILES", "EPISODES_FILE", "VIDEO_FILE", "MULTI_FILES", "OFFICIAL_FILES",
           "SPEC_KEYS", "OPTIONAL_SPEC_KEYS"]

RUNS = "results/single"
FIGURES = "results/figures"
TABLES = "results/tables"
RESOLVED = "results/resolved_config.yaml"
BENCHMARKS = "benchmarks/runs"
DATASETS = "results/datasets"
MULTI = "results/multi"
OFFICIAL = "results/official"
# run.json last: it marks a complete run (episodes.parquet is the seed's replay, exported by
# its training job: the replay lives in that process)
RUN_FILES = ["eval.parquet", "metrics.parquet", "episodes.parquet", "run.json"]
EPISODES_FILE = "episodes.parquet"  # not written by a pixel task's jobs (Pipeline.pixel_tasks)
VIDEO_FILE = "video.mp4"  # the evaluation video of a training job's first seed (config key `video`)
MULTI_FILES = ["eval.parquet", "metrics.parquet", "run.json"]  # run.json last: a complete run
OFFICIAL_FILES = ["eval.parquet", "run.json"]  # run.json last: a complete evaluation
# the keys of one task that the training stage receives (docs/artifacts.md, "Task settings"),
# and the optional ones it also accepts (passed only when set): the fields of the contract
SPEC_KEYS = TaskSpec.always_keys()
OPTIONAL_SPEC_KEYS = TaskSpec.optional_keys()
# the settings that merge key by key over the protocol's defaults (the others: the task's value wins)
MERGED_KEYS = ("agent", "resources", "env_params")
LOGGER_KEYS = ("kind", "dir", "project", "entity", "mode")
WANDB_MODES = ("offline", "online", "disabled")


def seed_tag(group) -> str:
    """seeds_0_1_2: the name of a seed group in rule names, logs and benchmarks."""
    return "seeds_" + "_".join(str(s) for s in group)


@dataclasses.dataclass(frozen=True)
class Official:
    """official_checkpoints resolved (docs/pipeline.md, "Released checkpoints"): the block
    (None when absent), its checkpoints (name -> {file, tasks, ...}) and its jobs' resources."""

    block: dict | None
    checkpoints: dict
    resources: dict


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """The resolved configuration (see :func:`resolve`). ``tasks``: task -> merged settings
    (SPEC_KEYS, resources, published, expected, allow_evicted); ``task_T``: task -> agent steps
    per episode; ``task_cfg``: task -> validated TDMPC2Config; ``pools``: pool -> tasks;
    ``official_pools``: pool -> {src, task_set, eval_tasks}; ``official_pool_tasks``: pool ->
    the tasks it is evaluated on; ``multitask``: None without a multitask block."""

    config: dict
    protocol_name: str
    protocol: dict
    tasks: dict
    task_T: dict
    task_cfg: dict
    allow_evicted: bool
    pools: dict
    official_pools: dict
    official_pool_tasks: dict
    seeds: list
    seeds_per_job: int
    seed_groups: list
    multitask: Multitask | None
    official: Official
    cluster: Cluster
    jax_cache: str
    checkpoints: str
    checkpoint_every: int
    keep_checkpoints: int
    max_chunk_seconds: float
    rerun_on_code_change: bool
    resolved_yaml: str
    notes: tuple = ()
    logger: dict | None = None
    #: evaluation videos: "off", "last" or "every" (config key ``video``; docs/artifacts.md)
    video: str = "off"
    #: the results file of benchmarks/learning_parity.py the report shows (config key
    #: ``learning_parity``), None without one
    learning_parity: str | None = None
    #: the results file of benchmarks/reproduction.py the report shows (config key
    #: ``reproduction``), None without one
    reproduction: str | None = None
    #: a local run on a machine with an accelerator: how many jobs on it may run at once (the
    #: trainer jobs then ask for one unit of the ``accelerator`` resource); None: no limit
    #: (tdmpc2core.pipeline.jobs.use_local_accelerators sets it, at plan time)
    accelerator_slots: int | None = None

    def reproduction_inputs(self) -> list[str]:
        """The report's inputs of config ``reproduction``: the results file and, when it exists, the
        JSON beside it (its plan and the calls' wall time, which the section shows); [] without it."""
        if not self.reproduction:
            return []
        meta = os.path.splitext(self.reproduction)[0] + ".json"
        return [self.reproduction] + ([meta] if os.path.isfile(meta) else [])

    def logger_resources(self) -> dict:
        """The training rules' ``logger`` resource: the stage's logger flags (``--logger none``
        without a logger). A resource, present either way, so the shell command's text is the
        same with and without a logger block: adding, changing or removing it reruns nothing."""
        return {"logger": self.logger_flags()}

    def logger_shell(self) -> str:
        """What the training rules' shell commands add for the logger: `` {resources.logger}``
        (the same text with or without a logger block; see :meth:`logger_resources`)."""
        return " {resources.logger}"

    def logger_flags(self) -> str:
        """The training stages' logger flags (``--logger KIND --logger-dir DIR ...``, plain
        words: the schema allows no character a shell would read), or ``--logger none``
        without a logger."""
        lg = self.logger
        if not lg:
            return "--logger none"
        flags = ["--logger", lg["kind"], "--logger-dir", lg["dir"], "--logger-group", self.protocol_name]
        for key in ("project", "entity", "mode"):
            if lg.get(key):
                flags += [f"--logger-{key}", str(lg[key])]
        return " ".join(shlex.quote(f) for f in flags)

    # ---- what the stages receive ----------------------------------------------------
    def train_single_command(self, task: str, group, tdmpc2) -> list[str]:
        """The argv of the training rule's command for ``task`` and the seed ``group``
        (workflow/rules/train.smk: ``{tdmpc2} train-single --task ... --devices ...`` and the
        logger's flags), ``tdmpc2`` the command's prefix as a list (``[python, "-m",
        "tdmpc2core.cli"]``). Relative paths as the rule has them (the run's folder
        ``results/single/<task>``, the checkpoints under ``checkpoint_dir``), for a process whose
        working directory is the workflow's. tests/test_reproduction.py checks it against the
        recorded dry-run plan of workflow/configs/reproduction-dmc.yaml. Raises KeyError for a task
        the protocol lacks."""
        if task not in self.tasks:
            raise KeyError(f"task {task!r} is not under protocols.{self.protocol_name}.tasks "
                           f"(have: {sorted(self.tasks)})")
        group = tuple(int(s) for s in group)
        return [*tdmpc2, "train-single", "--task", task, "--spec", self.task_spec(task),
                "--seeds", *[str(s) for s in group], "--outdir", f"{RUNS}/{task}", "--video", self.video,
                "--checkpoint-dir", f"{self.checkpoints}/single/{task}/{seed_tag(group)}",
                "--checkpoint-every", str(self.checkpoint_every), "--keep-checkpoints", str(self.keep_checkpoints),
                "--max-chunk-seconds", str(self.max_chunk_seconds), "--devices", str(self.cluster.devices),
                *shlex.split(self.logger_flags())]

    def train_single_env(self, task: str, cores: int | None = None) -> dict:
        """The environment variables the training rule's shell exports for ``task``'s jobs
        (workflow/rules/train.smk): ``PJRT_NPROC`` and ``OMP_NUM_THREADS`` (the job's threads,
        lowered to ``cores`` as Snakemake lowers them to --cores), ``JAX_COMPILATION_CACHE_DIR``,
        ``TDMPC2_PROGRAM_CACHE_DIR`` (its ``programs`` folder: :mod:`tdmpc2core.run.program_cache`),
        the cluster's JAX settings (:meth:`Cluster.jax_env`) and, for one thread, the XLA flag of
        single-threaded Eigen kernels (appended to ``XLA_FLAGS``: the returned value holds the flag
        alone)."""
        res = self.tasks[task]["resources"]
        threads = self.cluster.job_threads(res)
        if cores is not None:
            threads = max(1, min(threads, int(cores)))
        env = {"PJRT_NPROC": str(threads), "OMP_NUM_THREADS": str(threads), "JAX_COMPILATION_CACHE_DIR": self.jax_cache,
               "TDMPC2_PROGRAM_CACHE_DIR": f"{self.jax_cache}/programs"}
        env.update(item.split("=", 1) for item in shlex.split(self.cluster.jax_env(res["gpu"])))
        if threads == 1:
            env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"
        return env

    def task_spec(self, task: str) -> str:
        """The merged settings of one task, as the JSON the training stage receives: the
        :class:`~tdmpc2core.io.spec.TaskSpec` of the task (an empty list of extensions is no
        setting: the spec, and the run id, of a task without)."""
        return self.task_contract(task).to_json()

    def task_contract(self, task: str) -> TaskSpec:
        """The typed settings of one task's training jobs (:class:`~tdmpc2core.io.spec.TaskSpec`)."""
        return TaskSpec.of_task(self.tasks[task])

    def multi_spec(self, pool: str) -> str:
        """The multi-task settings one train-multi job receives (docs/artifacts.md), as JSON: the
        :class:`~tdmpc2core.io.spec.MultiSpec` of :meth:`multi_contract`."""
        return self.multi_contract(pool).to_json()

    def multi_contract(self, pool: str, size: int | None = None) -> MultiSpec:
        """The typed settings of the pool's train-multi jobs (of model size ``size``: not in the
        JSON, the job's folder and ``--model-size`` carry it): the pool's own tasks' return
        ranges only, the evaluated tasks of an official pool."""
        m = self.multitask.block
        members = self.pools.get(pool) or self.official_pool_tasks[pool]
        return MultiSpec(**{k: m.get(k) for k in MultiSpec.optional_keys() if k not in ("return_ranges", "eval_tasks")},
                         agent=dict(m.get("agent") or {}),
                         eval_tasks=self.official_pool_tasks[pool] if pool in self.official_pools else None,
                         return_ranges={t: list(r) for t, r in (m.get("return_ranges") or {}).items() if t in members},
                         model_size=size)

    def official_args(self, name: str) -> str:
        """The evaluate-official options of one released checkpoint (shell-quoted)."""
        ck, c = self.official.checkpoints[name], self.official.block
        args = [a for t in ck["tasks"] for a in ("--task", t)]
        args += ["--episodes", str(c.get("episodes", 10)), "--seed", str(c.get("seed", 1)),
                 "--episode-length", str(c.get("episode_length", 1000))]
        if ck.get("model_size") is not None:
            args += ["--model-size", str(ck["model_size"])]
        if ck.get("task_set"):
            args += ["--task-set", ck["task_set"]]
        for k, v in sorted((c.get("planner") or {}).items()):
            args += ["--planner", f"{k}={v}"]
        return " ".join(shlex.quote(a) for a in args)

    def official_checkpoint(self, name: str) -> str:
        """The file of one released checkpoint: official_checkpoints.dir / its file."""
        return os.path.join(self.official.block["dir"], self.official.checkpoints[name]["file"])

    # ---- files ------------------------------------------------------------------------
    def run_files(self, task: str, name: str) -> list[str]:
        """One file of every seed's run of a task: results/single/{task}/seed{s}/{name}."""
        return [f"{RUNS}/{task}/seed{s}/{name}" for s in self.seeds]

    def all_run_files(self, name: str) -> list[str]:
        """One file of every seed's run of every task (``episodes.parquet``: of every task that
        exports one, :attr:`dataset_tasks`)."""
        tasks = self.dataset_tasks if name == EPISODES_FILE else list(self.tasks)
        return [p for t in tasks for p in self.run_files(t, name)]

    @property
    def pixel_tasks(self) -> list[str]:
        """The tasks that learn from pixels (agent.obs rgb). Their training jobs export no
        episode dataset (datasets and multi-task TD-MPC2 are state-only, docs/deviations.md F3),
        so their training rules (``train_single_pixels_<seeds>``) have no episodes.parquet."""
        return [t for t, s in self.tasks.items() if (s.get("agent") or {}).get("obs", "state") == "rgb"]

    @property
    def dataset_tasks(self) -> list[str]:
        """The tasks whose training jobs export episode datasets: every task but :attr:`pixel_tasks`."""
        pixels = set(self.pixel_tasks)
        return [t for t in self.tasks if t not in pixels]

    def task_seed_groups(self, task: str) -> list[tuple]:
        """The seed groups of ``task``'s training jobs: ``seeds`` in groups of the task's
        ``seeds_per_job`` (its own or its protocol's defaults' key), else the top-level one's
        (:attr:`seed_groups`); a task's ``seed_groups`` (explicit groups, checked at resolution
        to hold every seed once, in order) come before both."""
        given = self.tasks[task].get("seed_groups")
        if given is not None:
            return [tuple(int(x) for x in g) for g in given]
        n = self.tasks[task].get("seeds_per_job")
        return self.seed_groups if n is None else seed_groups(self.seeds, int(n))

    def train_rules(self) -> list[tuple[str, tuple, bool]]:
        """(rule name, seed group, pixels) of every training rule: per seed group, one rule for the
        state tasks (``train_single_<seeds>``; also when there is no task at all) and, when the
        protocol has pixel tasks, one for them (``train_single_pixels_<seeds>``, without
        episodes.parquet). The groups are the top-level ``seeds_per_job``'s, then those of tasks
        with a ``seeds_per_job`` of their own (:meth:`task_seed_groups`); each rule trains the
        tasks of its kind that have its group (:meth:`task_pattern`)."""
        kinds = ([False] if len(self.pixel_tasks) < len(self.tasks) or not self.tasks else []) \
            + ([True] if self.pixel_tasks else [])
        out = []
        for px in kinds:
            groups = [g for t in self._kind_tasks(px) for g in self.task_seed_groups(t)] or list(self.seed_groups)
            out += [(train_rule_name(g, px), g, px) for g in dict.fromkeys(groups)]
        order = {g: i for i, g in enumerate(dict.fromkeys(g for _, g, _ in out))}
        return sorted(out, key=lambda r: (order[r[1]], r[2]))

    def rule_tasks(self, group, pixels: bool) -> list[str]:
        """The tasks of one kind (pixels or not) whose training jobs include seed ``group``."""
        return [t for t in self._kind_tasks(pixels) if tuple(group) in self.task_seed_groups(t)]

    def task_pattern(self, pixels: bool, group=None) -> str:
        """The regex of the ``{task}`` wildcard of the training rules of one kind (pixels or not),
        of seed ``group``'s rule when given (the tasks with that group, :meth:`rule_tasks`)."""
        tasks = self._kind_tasks(pixels) if group is None else self.rule_tasks(group, pixels)
        return "|".join(re.escape(t) for t in tasks) or "(?!)"

    def video_files(self, task: str | None = None) -> list[str]:
        """The evaluation videos of a task's training jobs (every task's with None):
        results/single/{task}/seed{first seed of each seed group}/video.mp4; [] with video off."""
        if self.video == "off":
            return []
        tasks = list(self.tasks) if task is None else [task]
        return [f"{RUNS}/{t}/seed{g[0]}/{VIDEO_FILE}" for t in tasks for g in self.task_seed_groups(t)]

    def group_outputs(self, group, pixels: bool = False) -> list[str]:
        """The training rule's outputs for a seed group (``{task}`` a wildcard): every seed's
        RUN_FILES (without episodes.parquet for the pixel tasks' rule), then the first seed's
        video (none with video off)."""
        names = [f for f in RUN_FILES if not (pixels and f == EPISODES_FILE)]
        files = [f"{RUNS}/{{task}}/seed{s}/{f}" for s in group for f in names]
        return files + ([] if self.video == "off" else [f"{RUNS}/{{task}}/seed{group[0]}/{VIDEO_FILE}"])

    @property
    def multi_video(self) -> str:
        """The multi-task jobs' ``--video``: the config's, but "last" for "every" (a multi-task
        run records its last evaluation only)."""
        return "last" if self.video == "every" else self.video

    def multi_video_dirs(self) -> list[str]:
        """Every multi-task job's videos folder (results/multi/{pool}/size{size}/videos); [] with
        video off or without a multitask block."""
        return [] if self.video == "off" else self.multi_files("videos")

    def multi_files(self, name: str) -> list[str]:
        """One file of every multi-task run: results/multi/{pool}/size{size}/{name}."""
        if self.multitask is None:
            return []
        return [f"{MULTI}/{p}/size{s}/{name}" for p in self.multitask.pools for s in self.multitask.sizes]

    def official_outputs(self) -> list[str]:
        """Every released-checkpoint evaluation's files (none when the key is absent)."""
        return [f"{OFFICIAL}/{n}/{f}" for n in self.official.checkpoints for f in OFFICIAL_FILES]

    def official_chunks(self, pool: str) -> list[str]:
        """The pool's chunk files as the official trainer globs them (*.pt, sorted); none found:
        the rule still runs and the stage names the folder and what it expects."""
        return sorted(glob.glob(os.path.join(self.official_pools[pool]["src"], "*.pt")))

    def code_param(self, stage: str):
        """The ``code`` param of a stage's rules: its code version (tdmpc2core.pipeline.codeversion)
        with rerun_on_code_change, a rerun trigger; without it None, the same for every code."""
        from tdmpc2core.pipeline.codeversion import code_version

        return code_version(stage) if self.rerun_on_code_change else None

    def run_records(self) -> dict[str, tuple[str, list[str]]]:
        """Rule -> (its stage, the run.json of each of its jobs' runs): what
        tdmpc2core.pipeline.codeversion.code_changes compares with the code now."""
        out = {name: ("train_single", [f"{RUNS}/{t}/seed{s}/run.json" for t in self.rule_tasks(g, px) for s in g])
               for name, g, px in self.train_rules()}
        out["train_multi"] = ("train_multi", self.multi_files("run.json"))
        out["official_eval"] = ("evaluate_official", [f"{OFFICIAL}/{n}/run.json" for n in self.official.checkpoints])
        return out

    def jobs_without_every_videos(self) -> list[str]:
        """With ``video: every``: one line naming the finished training jobs whose run.json
        records no video per evaluation (run with ``off`` or ``last``; its ``video`` entry has
        no ``every``). Such jobs are kept: the per-evaluation videos are recorded as training
        evaluates (docs/pipeline.md, "Evaluation videos"), and the ``videos/`` folder is not a
        declared output, so switching ``last`` to ``every`` reruns nothing. [] otherwise."""
        if self.video != "every":
            return []
        jobs = []
        for t in self.tasks:
            for g in self.task_seed_groups(t):
                run_json = f"{RUNS}/{t}/seed{g[0]}/run.json"
                try:
                    with open(run_json, encoding="utf-8") as fh:
                        video = json.load(fh).get("video")
                except (OSError, ValueError, AttributeError):
                    continue  # not finished (or unreadable): the job runs with video: every
                if not (isinstance(video, dict) and "every" in video):
                    jobs.append((t, g))
        if not jobs:
            return []
        named = ", ".join(f"{RUNS}/{t}/seed{g[0]}/run.json (checkpoints {self.checkpoints}/single/{t}/{seed_tag(g)}/)"
                          for t, g in jobs[:3]) + (", ..." if len(jobs) > 3 else "")
        return [f"video: every: {len(jobs)} finished training job(s) recorded no video per evaluation: {named}; "
                "kept, since those videos are recorded as training evaluates: to have them, delete such a job's "
                "run.json and its checkpoint folder, then run again: it trains anew, and what is built on its "
                "outputs (its pool, the multi-task model) is made again too"]

    def _kind_tasks(self, pixels: bool) -> list[str]:
        return self.pixel_tasks if pixels else self.dataset_tasks

    def long_runs(self) -> dict[str, int]:
        """Training rule -> the longest runtime (minutes) of its jobs (cluster retries)."""
        out = {name: max((self.tasks[t]["resources"]["runtime"] for t in self.rule_tasks(g, px)), default=0)
               for name, g, px in self.train_rules()}
        if self.multitask is not None:
            out["train_multi"] = self.multitask.resources["runtime"]
        return out


def seed_groups(seeds, per_job: int) -> list[tuple]:
    """``seeds`` in groups of ``per_job`` (the last one shorter), in their order."""
    seeds = [int(x) for x in seeds]
    return [tuple(seeds[i:i + per_job]) for i in range(0, len(seeds), per_job)]


def _check_seed_groups(proto: str, name: str, given, seeds: list) -> None:
    """A task's explicit ``seed_groups``: non-empty lists of integers that, joined, are the
    top-level ``seeds`` in their order (each seed in one job, no job twice). Raises ConfigError
    naming the task's key, the value and what is accepted."""
    where = f"protocols.{proto}.tasks.{name}.seed_groups"
    ok = isinstance(given, list) and given and all(
        isinstance(g, list) and g and all(isinstance(x, int) and not isinstance(x, bool) for x in g) for g in given)
    if not ok or [x for g in given for x in g] != list(seeds):
        why = ""
        if ok:
            joined = [x for g in given for x in g]
            extra = sorted({x for x in joined if x not in seeds})
            missing = [s for s in seeds if s not in joined]
            twice = sorted({x for x in joined if joined.count(x) > 1})
            why = (f" (seed(s) {extra} are not among the top-level seeds)" if extra
                   else f" (seed(s) {missing} are in no group)" if missing
                   else f" (seed(s) {twice} are in more than one group)" if twice else " (out of order)")
        raise ConfigError(
            f"config: {where}: {given!r} is not accepted{why}; give lists of seeds that, joined, are the "
            f"top-level seeds {list(seeds)} in their order, e.g. {[[s] for s in seeds[:1]] + ([list(seeds[1:])] if seeds[1:] else [])}")


def train_rule_name(group, pixels: bool = False) -> str:
    """The training rule of a seed group: ``train_single_seeds_0_1``, or for the pixel tasks
    (agent.obs rgb) ``train_single_pixels_seeds_0_1``."""
    return f"train_single_{'pixels_' if pixels else ''}{seed_tag(group)}"


def parent(path, levels: int = 1) -> str:
    """The folder ``levels`` above ``path`` (a rule's input or output file)."""
    return str(Path(str(path)).parents[levels - 1])


def task_dataset(task: str) -> str:
    """The episode dataset of one task."""
    return f"{DATASETS}/tasks/{task}.parquet"


def pool_dataset(pool: str) -> str:
    """The episode dataset of one pool (ours or an official one converted)."""
    return f"{DATASETS}/pools/{pool}.parquet"


# ---- the checks -------------------------------------------------------------------------
def _merge_task(proto: str, name: str, defaults: dict, task: dict) -> dict:
    """defaults, then the task's keys; `agent`, `resources` and `env_params` merge key by key."""
    out = copy.deepcopy(defaults)
    for key, value in task.items():
        if key in MERGED_KEYS and isinstance(value, dict):
            out[key] = {**out.get(key, {}), **value}
        else:
            out[key] = copy.deepcopy(value)
    if "action_repeat" not in out and "env_id" in out:
        # the paper's for the suite (2 for DM Control, 1 otherwise), as the library's default
        try:
            out["action_repeat"] = library_envs.default_action_repeat(out["env_id"])
        except ValueError as e:  # an id no suite accepts: named before the keys it would have filled
            raise ConfigError(f"config: protocols.{proto}.tasks.{name}: env_id {out['env_id']!r}: {e}") from None
    # episode_length: filled by _check_task (the value in effect: the suite's own time limit,
    # or the library's default 1000 for a suite whose caller sets it)
    missing = [k for k in SPEC_KEYS if k not in out and k != "episode_length"]
    if missing:
        raise ConfigError(
            f"config: task {name!r} of protocol {proto!r} lacks {missing}; set them under "
            f"protocols.{proto}.defaults or under the task")
    out.setdefault("published", None)
    out.setdefault("expected", None)
    return out


def _check_env_params(proto: str, protocol: dict, name: str, t: dict) -> dict:
    """The task's environment settings (``env_params``, merged over the defaults' key by key),
    checked by the env's suite as the training job's ``make_env`` checks them
    (:func:`tdmpc2core.envs.check_env_params`, plain Python) and stored in ``t`` in their
    canonical form; an empty mapping is dropped, so a task without settings keeps the spec it
    always had. Returns the canonical settings ({} for none)."""
    given = t.get("env_params")
    where = f"protocols.{proto}.tasks.{name}.env_params"
    if (protocol.get("defaults") or {}).get("env_params"):
        where += f" (merged over protocols.{proto}.defaults.env_params)"
    try:
        params = library_envs.check_env_params(t["env_id"], given)
    except ValueError as e:
        raise ConfigError(f"config: {where}: {e}") from None
    if params:
        t["env_params"] = params
    else:
        t.pop("env_params", None)
    return params


def _agent_key_source(proto: str, protocol: dict, name: str, err: Exception) -> str:
    """Where the agent setting an error names was written: " (set at
    protocols.P.tasks.N.agent.KEY)" or " (set at protocols.P.defaults.agent.KEY)"; "" when the
    message names no key or the key came from neither block (the preset's own value)."""
    return agent_key_written_at(err, [
        (((protocol.get("tasks") or {}).get(name) or {}).get("agent"), f"protocols.{proto}.tasks.{name}.agent"),
        ((protocol.get("defaults") or {}).get("agent"), f"protocols.{proto}.defaults.agent")])


def _check_task(proto: str, protocol: dict, name: str, t: dict):
    """What the training job would refuse at its start, refused now by the same code
    (tdmpc2core.model.config.validate_config, tdmpc2core.envs): every agent setting, the env id,
    its environment settings and the time limit they give (an episode_length that a suite with
    its own time limit would not keep, the limit named), and a batch larger than the replay
    holds at the first update. Sets ``t["episode_length"]`` to the simulator steps per episode
    in effect (tdmpc2core.envs.sim_episode_length: gymnax Pendulum-v1's 200; 1000 where none
    is set and the suite takes one). Returns (T, cfg)."""
    where = f"protocols.{proto}.tasks.{name}"
    _unknown_agent_keys(f"{where}.agent", t["agent"], AGENT_KEYS,
                        (f"protocols.{proto}.defaults.agent", (protocol.get("defaults") or {}).get("agent") or {}))
    check_extensions(f"{where}.extensions", t.get("extensions"))
    try:
        library_envs.suite_of(t["env_id"])
    except ValueError as e:
        raise ConfigError(f"config: {where}: env_id {t['env_id']!r}: {e}") from None
    env_params = _check_env_params(proto, protocol, name, t)
    _check_observations(where, t)
    given = t.get("episode_length")
    try:
        length = library_envs.sim_episode_length(
            t["env_id"], action_repeat=int(t["action_repeat"]), episode_length=None if given is None else int(given),
            env_params=env_params)
    except ValueError as e:
        task_sets = "episode_length" in ((protocol.get("tasks") or {}).get(name) or {})
        src = f"{where}.episode_length" if task_sets else f"protocols.{proto}.defaults.episode_length"
        raise ConfigError(f"config: {where}: env_id {t['env_id']!r} (episode_length set in {src}): {e}") from None
    # the resolved configuration, the job's spec and the report hold the length in effect (the key
    # after action_repeat, where the defaults always put it)
    items = [(k, v) for k, v in t.items() if k != "episode_length"]
    t.clear()
    for k, v in items:
        t[k] = v
        if k == "action_repeat":
            t["episode_length"] = length
    t.setdefault("episode_length", length)
    T = length // int(t["action_repeat"])
    n = int(t.get("n_envs") or 1)
    try:
        cfg = library_config.validate_config(library_config.TDMPC2Config(**t["agent"]), episode_length=T, n_envs=n)
    except (ValueError, TypeError) as e:
        src = _agent_key_source(proto, protocol, name, e)
        raise ConfigError(f"config: {where}.agent (T = {T} agent steps): {e}{src}") from None
    first = library_config.first_update_agent_steps(cfg.seed_steps, n)
    if int(t["agent_steps"]) < first:
        raise ConfigError(
            f"config: {where}: agent_steps={t['agent_steps']} trains nothing: the first update comes "
            f"after the seed phase's seed_steps={cfg.seed_steps} random agent steps, in the tick that "
            f"reaches {first} agent steps (n_envs={n}); raise agent_steps to at least "
            f"{first} or lower agent.seed_steps")
    if cfg.episodic:  # its first update's data is known only during the run: bounded by the run
        try:
            library_config.check_batch_size(
                cfg.batch_size, int(t["agent_steps"]),
                f"the whole run ({t['agent_steps']} agent steps, at most one slice each)", "lower agent.batch_size")
        except ValueError as e:
            raise ConfigError(f"config: {where}.agent: {e}") from None
    return T, cfg


#: the suffix of the published pixel curves' names (tdmpc2core.report.published.PIXEL_SUFFIX;
#: the pipeline layer does not import the report's)
PIXEL_SUFFIX = "-pixels"


def _check_observations(where: str, t: dict) -> None:
    """Pixel observations (agent.obs rgb): dm_control tasks only (as the official code), compared
    with a pixel curve (``<task>-pixels``); a state task is not compared with a pixel curve."""
    obs = (t.get("agent") or {}).get("obs", "state")
    rgb = obs == "rgb"
    if rgb:
        suite = library_envs.suite_for(t["env_id"])
        if "rgb" not in suite.obs_types:
            raise ConfigError(
                f"config: {where}.agent.obs: rgb observations are rendered by dm_control only (as the official "
                f"code); env_id {t['env_id']!r} is a {suite.name} task. Use its dm_control id "
                "(dmc:<domain>-<task>, docs/dmcontrol.md) or obs: state")
    pub = t.get("published")
    if pub is None:
        return
    if rgb and not str(pub).endswith(PIXEL_SUFFIX):
        raise ConfigError(
            f"config: {where}.published: {pub!r} is a curve from states, but the task learns from pixels "
            f"(agent.obs: rgb); compare it with {pub + PIXEL_SUFFIX!r} if the paper has that curve, or null")
    if not rgb and str(pub).endswith(PIXEL_SUFFIX):
        raise ConfigError(
            f"config: {where}.published: {pub!r} is a curve from pixels, but the task learns from states "
            f"(agent.obs: {obs}); set agent.obs: rgb, or compare with {pub[:-len(PIXEL_SUFFIX)]!r}")


def _check_pools(proto: str, protocol: dict, tasks: dict, allow_evicted: bool) -> dict:
    """The protocol's pools (pool -> tasks), each naming tasks of the protocol; every task's
    whole run kept by its replay unless datasets.allow_evicted (sets each task's allow_evicted)."""
    pools = {name: list(members) for name, members in protocol.get("pools", {}).items()}
    for pool, members in pools.items():
        unknown = [t for t in members if t not in tasks]
        if unknown:
            raise ConfigError(
                f"config: pool {pool!r} of protocol {proto!r} names task(s) {unknown} that are not "
                f"under protocols.{proto}.tasks (have: {sorted(tasks)})")
    for pool, members in pools.items():
        pixels = [t for t in members if (tasks[t].get("agent") or {}).get("obs", "state") == "rgb"]
        if pixels:
            raise ConfigError(
                f"config: pool {pool!r} of protocol {proto!r} names task(s) {pixels} that learn from pixels "
                "(agent.obs: rgb); multi-task TD-MPC2 trains on state observations only (as the official "
                "code and its datasets): pool state tasks")
    for name, t in tasks.items():
        t["allow_evicted"] = allow_evicted
        buffer = int(t["agent"].get("buffer_size", 1_000_000))  # TDMPC2Config's default (spec §1)
        if not allow_evicted and int(t["agent_steps"]) > buffer:
            raise ConfigError(
                f"config: task {name!r} of protocol {proto!r} trains {t['agent_steps']} agent steps with "
                f"buffer_size {buffer}: its replay evicts the oldest episodes, so its episode dataset cannot hold "
                f"the whole run. Raise agent.buffer_size, or set protocols.{proto}.datasets.allow_evicted: "
                "true to export what the replay still holds.")
    return pools


def _check_official_pools(proto: str, protocol: dict, pools: dict):
    """protocols.<protocol>.official_pools: (pool -> block, pool -> the tasks it is evaluated on,
    notes on pools whose chunk folder is still empty)."""
    official = {name: dict(p) for name, p in (protocol.get("official_pools") or {}).items()}
    tasks, notes = {}, []
    for pool, p in official.items():
        if pool in pools:
            raise ConfigError(f"config: protocols.{proto}: pool {pool!r} is under both pools and official_pools")
        evaluable = [t["name"] for t in library_official.task_set_table(p["task_set"]) if t["env_id"]]
        chosen = list(p.get("eval_tasks") or evaluable)
        bad = [t for t in chosen if t not in evaluable]
        if bad:
            raise ConfigError(
                f"config: protocols.{proto}.official_pools.{pool}.eval_tasks: {bad} cannot be evaluated "
                f"(not in {p['task_set']}, or no environment of ours: docs/dmcontrol.md); evaluable: {evaluable}")
        tasks[pool] = chosen
        if not glob.glob(os.path.join(p["src"], "*.pt")):  # may still be downloading: said, not refused
            notes.append(
                f"note: official_pools.{pool}.src {p['src']!r} holds no *.pt chunk files yet; "
                "convert_official_data will refuse it until the official chunks are there")
    return official, tasks, notes


def _check_official_checkpoints(block: dict | None) -> Official:
    """official_checkpoints: every checkpoint file present and every task one a job can
    evaluate (plain Python: no JAX, no dm_control)."""
    checkpoints = dict((block or {}).get("checkpoints") or {})
    resources = dict((block or {}).get("resources") or {})
    if checkpoints:
        from tdmpc2core.envs import official_tasks

        sets = ["all", *official_tasks.task_set_names()]
        for name, ck in checkpoints.items():
            path = os.path.join(block["dir"], ck["file"])
            if not os.path.isfile(path):
                raise ConfigError(
                    f"config: official_checkpoints.checkpoints.{name}.file: {path} does not exist "
                    f"(official_checkpoints.dir {block['dir']!r} + file {ck['file']!r}): download the "
                    "checkpoint there, or correct the path")
            for t in ck["tasks"]:
                why = None if t in sets else official_tasks.unavailable_reason(t)
                ours = official_tasks.env_id_of(t) == t  # a dm_control (dmc:<name>) or Meta-World (mw-<name>) id
                if t not in sets and (not ours or why is not None):
                    raise ConfigError(
                        f"config: official_checkpoints.checkpoints.{name}.tasks: {t!r} "
                        + (f"cannot be evaluated here ({why}); " if ours else "is not accepted; ")
                        + f"accepted: {sets}, a dm_control id (dmc:<official name>) or a Meta-World id "
                        "(mw-<name>) (`tdmpc2core.envs.list_env_ids()`)")
    return Official(block, checkpoints, resources)


def check_logger(block) -> dict | None:
    """The top-level ``logger`` block with its defaults (dir ``logs/metrics``, project
    ``tdmpc2``), or None when absent. Raises :class:`ConfigError` (one line naming the key and
    what is accepted) for an unknown key or W&B mode, or a kind the logger registry does not
    hold (:func:`tdmpc2core.io.loggers.logger_kinds`: the schema leaves the kinds to it)."""
    if block is None:
        return None
    if not isinstance(block, dict):
        raise ConfigError(f"config: logger: {block!r} is not accepted; give a mapping such as "
                          "{kind: wandb, project: tdmpc2} (or leave it out)")
    unknown = [k for k in block if k not in LOGGER_KEYS]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), LOGGER_KEYS, n=1)
        raise ConfigError(f"config: unknown key {unknown[0]!r} in logger"
                          + (f"; did you mean {close[0]!r}?" if close else f"; accepted: {', '.join(LOGGER_KEYS)}"))
    kinds = logger_kinds()
    if block.get("kind") not in kinds:
        close = difflib.get_close_matches(str(block.get("kind")), kinds, n=1)
        raise ConfigError(f"config: logger.kind: {block.get('kind')!r} is not accepted"
                          + (f" (did you mean {close[0]!r}?)" if close else "") + f"; accepted: {', '.join(kinds)}")
    if block.get("mode") is not None and block["mode"] not in WANDB_MODES:
        raise ConfigError(f"config: logger.mode: {block['mode']!r} is not accepted; accepted: {', '.join(WANDB_MODES)}")
    return {"dir": "logs/metrics", "project": "tdmpc2", **block}


def _resolved_yaml(p: dict) -> str:
    """The resolved configuration as the YAML text resolve_config writes."""
    return ("# The configuration this run used (protocol selected, task settings merged with the defaults).\n"
            "# Written by the Snakefile's resolve_config rule; read by `tdmpc2 tables/figures/report`.\n"
            + yaml.safe_dump(p, sort_keys=False, default_flow_style=False))


def load_workflow_config(configfiles, root: str | os.PathLike = ".", overrides: dict | None = None) -> dict:
    """The configuration ``snakemake --configfile F ...`` hands the workflow, without Snakemake:
    ``root``/config.yaml (the Snakefile's ``configfile``), then each of ``configfiles`` and last
    ``overrides`` (as ``--config``) merged over it key by key (nested mappings merge, anything
    else replaces), validated against ``root``/workflow/schemas/config.schema.yaml with the
    schema's defaults filled in as Snakemake's ``validate`` fills them (the jsonschema recipe
    Snakemake uses: a property's ``default`` is set where the property is absent, at every level
    the validation reaches). Pass the result to :func:`resolve`. For tools that run a stage as
    the workflow would (benchmarks/reproduction.py) where Snakemake is not installed.

    Raises:
      FileNotFoundError: a config file that does not exist (named).
      ConfigError: a file that is not a YAML mapping, or a schema refusal (one line: the key path
        and jsonschema's message).
    """
    import jsonschema
    from jsonschema import validators

    root = Path(root)

    def read(path):
        p = Path(path)
        if not p.is_absolute() and not p.exists():
            p = root / p
        if not p.exists():
            raise FileNotFoundError(f"config file {path} does not exist")
        data = yaml.safe_load(p.read_text())
        if not isinstance(data, dict):
            raise ConfigError(f"config: {path} is not a YAML mapping")
        return data

    def update(base, over):
        for k, v in over.items():
            base[k] = update(base.get(k, {}), v) if isinstance(v, dict) and isinstance(base.get(k), dict) else copy.deepcopy(v)
        return base

    config = read(root / "config.yaml")
    for f in configfiles:
        update(config, read(f))
    update(config, overrides or {})
    schema = yaml.safe_load((root / "workflow" / "schemas" / "config.schema.yaml").read_text())
    base = validators.validator_for(schema)
    properties = base.VALIDATORS["properties"]

    def set_defaults(validator, props, instance, sch):
        if isinstance(instance, dict):
            for name, sub in props.items():
                if isinstance(sub, dict) and "default" in sub:
                    instance.setdefault(name, copy.deepcopy(sub["default"]))
        yield from properties(validator, props, instance, sch)

    filling = validators.extend(base, {"properties": set_defaults})
    try:
        filling(schema).validate(config)
    except jsonschema.ValidationError as e:
        where = ".".join(str(x) for x in e.absolute_path) or "(top level)"
        raise ConfigError(f"config: {where}: {e.message}") from None
    return config


def resolve(config: dict) -> Pipeline:
    """The workflow's configuration checked and resolved (module docstring).

    ``config``: the merged configuration after Snakemake's schema validation (its defaults
    filled). Raises :class:`ConfigError` (a ValueError) with one line naming the key, in the
    order the workflow always checked: the protocol, each task's settings, the expected
    ranges, the pools, the official pools, the multi-task block, the cluster, the released
    checkpoints. Pure: reads the official pools' folders and the checkpoint files only to
    see that they exist.
    """
    name = config["protocol"]
    if name not in config["protocols"]:
        raise ConfigError(
            f"config: protocol {name!r} has no entry under 'protocols' "
            f"(have: {sorted(config['protocols'])}); add protocols: {{{name}: {{label: ..., tasks: ...}}}}")
    protocol = config["protocols"][name]
    tasks = {t: _merge_task(name, t, protocol.get("defaults", {}), s) for t, s in protocol["tasks"].items()}
    checked = {t: _check_task(name, protocol, t, s) for t, s in tasks.items()}
    for t, s in tasks.items():
        _check_expected(f"protocols.{name}.tasks.{t}.expected", s.get("expected"))
    allow_evicted = bool(protocol.get("datasets", {}).get("allow_evicted", False))
    pools = _check_pools(name, protocol, tasks, allow_evicted)
    official_pools, official_pool_tasks, notes = _check_official_pools(name, protocol, pools)
    if not tasks and not official_pools:
        raise ConfigError(f"config: protocols.{name}.tasks is empty; name at least one task (or official_pools)")
    seeds, per_job = [int(s) for s in config["seeds"]], int(config["seeds_per_job"])
    for t, s in tasks.items():
        if s.get("seed_groups") is not None:
            if "seeds_per_job" in ((protocol.get("tasks") or {}).get(t) or {}) \
                    and "seed_groups" in ((protocol.get("tasks") or {}).get(t) or {}):
                raise ConfigError(f"config: protocols.{name}.tasks.{t}: give seeds_per_job or seed_groups, not both "
                                  f"(seed_groups names each job's seeds; seeds_per_job groups them in order)")
            _check_seed_groups(name, t, s["seed_groups"], seeds)
    task_T, task_cfg = {t: c[0] for t, c in checked.items()}, {t: c[1] for t, c in checked.items()}
    multitask = check_multitask(name, protocol.get("multitask"), tasks=tasks, task_T=task_T, task_cfg=task_cfg,
                                pools=pools, official_pools=official_pools,
                                official_pool_tasks=official_pool_tasks, seeds=seeds)
    max_chunk = float(config["max_chunk_seconds"])
    cluster = cluster_from_config(config, max_chunk_seconds=max_chunk)
    official = _check_official_checkpoints(config.get("official_checkpoints"))
    logger = check_logger(config.get("logger"))
    video = _check_video(config.get("video", "off"), tasks, name)
    learning_parity = _check_learning_parity(config.get("learning_parity"))
    reproduction = _check_reproduction(config.get("reproduction"))
    resolved = {
        "protocol": name, "label": protocol["label"], "seeds": seeds, "seeds_per_job": per_job,
        "threads_per_job": int(config["threads_per_job"]), "jax_cache_dir": config["jax_cache_dir"],
        "checkpoint_dir": config["checkpoint_dir"], "checkpoint_every": int(config["checkpoint_every"]),
        "keep_checkpoints": int(config["keep_checkpoints"]), "max_chunk_seconds": max_chunk,
        "bootstrap_reps": int(config["bootstrap_reps"]), "tasks": tasks,
        # an official pool: the tasks its models are evaluated on (the scaling stage's per-task rows)
        "pools": {**pools, **official_pool_tasks}, "official_pools": official_pools,
        "datasets": {"allow_evicted": allow_evicted},
        "multitask": None if multitask is None else {
            "pools": multitask.pools, "model_sizes": multitask.sizes, "seeds": multitask.seeds,
            **{k: v for k, v in multitask.block.items() if k not in ("pools", "model_sizes", "seeds")}},
        # the evaluation videos (a training setting too); learning_parity and reproduction are the report's
        # inputs only and stay out of this file, which the tables and figures read as well (a new file reruns
        # the report alone)
        "video": video,
    }
    return Pipeline(
        config=config, protocol_name=name, protocol=protocol, tasks=tasks, task_T=task_T, task_cfg=task_cfg,
        allow_evicted=allow_evicted, pools=pools, official_pools=official_pools,
        official_pool_tasks=official_pool_tasks, seeds=seeds, seeds_per_job=per_job,
        seed_groups=seed_groups(seeds, per_job),
        multitask=multitask, official=official, cluster=cluster, jax_cache=config["jax_cache_dir"],
        checkpoints=config["checkpoint_dir"], checkpoint_every=int(config["checkpoint_every"]),
        keep_checkpoints=int(config["keep_checkpoints"]), max_chunk_seconds=max_chunk,
        rerun_on_code_change=bool(config.get("rerun_on_code_change", False)),
        resolved_yaml=_resolved_yaml(resolved), notes=tuple(notes), logger=logger, video=video,
        learning_parity=learning_parity, reproduction=reproduction)


def _check_learning_parity(value) -> str | None:
    """The ``learning_parity`` setting: None, or the path of an existing Parquet file with the
    columns of benchmarks/learning_parity.py's results (:func:`_check_results_file`)."""
    from tdmpc2core.io.learning_parity import COLUMNS

    return _check_results_file("learning_parity", value, COLUMNS, "benchmarks/learning_parity.py")


def _check_reproduction(value) -> str | None:
    """The ``reproduction`` setting: None, or the path of an existing Parquet file with the
    columns of benchmarks/reproduction.py's results (:func:`_check_results_file`)."""
    from tdmpc2core.io.reproduction import COLUMNS

    return _check_results_file("reproduction", value, COLUMNS, "benchmarks/reproduction.py")


def _check_results_file(key: str, value, columns, benchmark: str) -> str | None:
    """A report-only results file setting (``learning_parity``, ``reproduction``): None, or the
    path of an existing Parquet file with ``columns`` (relative to the working directory, as
    Snakemake reads it; only its schema is read here, the rows when the report is made). Raises
    ConfigError naming the key and the path when the file does not exist, is not Parquet, lacks
    a column (named, with the expected ones) or has no rows, so a wrong file stops the plan
    instead of the report job (whose failure would remove the report made before)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"config: {key}={value!r}; give the path of a results file of {benchmark}, or null")
    if not os.path.isfile(value):
        raise ConfigError(f"config: {key}={value!r} is not a file (relative paths are read from the "
                          f"working directory {os.getcwd()})")
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(value)
        names = meta.schema.to_arrow_schema().names
    except Exception as e:  # noqa: BLE001 (pyarrow raises several kinds for a file that is not Parquet)
        raise ConfigError(f"config: {key}={value!r} is not a Parquet file ({type(e).__name__}: {e}); give "
                          f"a results file of {benchmark}") from None
    missing = [c for c in columns if c not in names]
    if missing:
        raise ConfigError(f"config: {key}={value!r} lacks the column(s) {missing} of a results file of "
                          f"{benchmark} (expected {list(columns)}; it has {names})")
    if meta.num_rows == 0:
        raise ConfigError(f"config: {key}={value!r} has no rows (no evaluation was recorded)")
    return value


def _check_video(value, tasks: dict, protocol: str) -> str:
    """The ``video`` setting as "off", "last" or "every" (YAML's false, an unquoted off, is
    "off"). Raises ConfigError for another value, or for "last" / "every" with a task whose
    suite has no renderer (tdmpc2core.envs.render.cannot_render), naming the task."""
    if value is False or value == "off":
        return "off"
    if value not in ("last", "every"):
        hint = (" (YAML reads an unquoted on, yes or true as true: write last or every)"
                if value is True else "")
        raise ConfigError(f"config: video={value!r}; accepted: off, last, every{hint}")
    from tdmpc2core.envs.render import cannot_render

    for t, s in tasks.items():
        try:
            reason = cannot_render(s["env_id"])
        except ValueError:  # an unknown id: the task check names it
            continue
        if reason is not None:
            raise ConfigError(f"config: protocols.{protocol}.tasks.{t}: {reason}; set video: off "
                              "(the training jobs then write no video)")
    return value
