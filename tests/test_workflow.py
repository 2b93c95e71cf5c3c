"""The Snakemake workflow: dry runs of the demo and paper configurations, validation, and
runs in a temporary copy of the workflow (with a stand-in trainer, and with the real one).

Each test copies Snakefile, config.yaml, workflow/ and envs/ into tmp_path and runs
Snakemake there, so nothing in the checkout's results/ is read or written.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import yaml

from tdmpc2core.report import published as P

ROOT = Path(__file__).resolve().parents[1]
PAPER = "workflow/configs/paper-dmc.yaml"
HAVE_TRAIN_SINGLE = (ROOT / "tdmpc2core" / "stages" / "train_single.py").exists()


def copy_workflow(dest: Path) -> Path:
    for name in ("Snakefile", "config.yaml"):
        shutil.copy2(ROOT / name, dest / name)
    for name in ("workflow", "envs"):
        shutil.copytree(ROOT / name, dest / name)
    return dest


def snakemake(cwd: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAKEMAKE")}
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env)


def ok(res: subprocess.CompletedProcess) -> str:
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    return out


@contextlib.contextmanager
def workflow_api(wf: Path, *configfiles: str, config: tuple[str, ...] = ()):
    """Snakemake's own API on the workflow in ``wf``, in this process, with the settings that
    ``snakemake --configfile <configfiles> --config <config>`` run in ``wf`` builds
    (snakemake/cli.py): the WorkflowApi, for .dag() (which loads the workflow: the Snakefile
    and every rule file run, validate.smk's schema check and common.smk's checks included) or
    .lint(). It saves the start of a snakemake process (4-6 s under load) per configuration."""
    from snakemake.api import SnakemakeApi
    from snakemake.cli import parse_config
    from snakemake.settings.types import ConfigSettings, ResourceSettings

    cwd = os.getcwd()
    os.chdir(wf)  # the command line's working directory: config files are read relative to it
    try:
        with SnakemakeApi() as api:
            settings = ConfigSettings(config=parse_config(list(config)), configfiles=[Path(f) for f in configfiles])
            yield api.workflow(resource_settings=ResourceSettings(cores=1), config_settings=settings,
                               snakefile=wf / "Snakefile", workdir=wf)
    finally:
        os.chdir(cwd)


def load_workflow(wf: Path, *configfiles: str, config: tuple[str, ...] = ()) -> None:
    """Load the workflow in ``wf`` in this process as ``snakemake -n`` loads it before it plans
    (workflow_api): a refusal is raised as the WorkflowError whose message the command line
    prints (test_unknown_config_keys_are_refused checks that printing end to end); nothing is
    planned or run."""
    with workflow_api(wf, *configfiles, config=config) as api:
        api.dag()  # loads (parses and runs) the workflow


def refusal(wf: Path, *configfiles: str, config: tuple[str, ...] = ()) -> str:
    """The message of the WorkflowError with which loading the workflow (load_workflow) refuses
    this configuration; fails the test if it loads."""
    from snakemake.exceptions import WorkflowError

    with pytest.raises(WorkflowError) as e:
        load_workflow(wf, *configfiles, config=config)
    return str(e.value)


def job_stats(out: str) -> dict[str, int]:
    """The first "Job stats" table of Snakemake's output as {rule: count}."""
    block = out.split("Job stats:", 1)[1]
    stats = {}
    for line in block.splitlines()[3:]:
        m = re.match(r"^(\S+)\s+(\d+)$", line.strip())
        if not m:
            break
        stats[m.group(1)] = int(m.group(2))
    return stats


def planned_jobs(out: str) -> list[tuple[str, str]]:
    """(rule, task wildcard or '') of every job a dry run prints."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \S+:)", out):
        m = re.match(r"(?:local)?rule (\S+):", block.strip())
        if m:
            w = re.search(r"wildcards: task=(\S+)", block)
            jobs.append((m.group(1), w.group(1) if w else ""))
    return jobs


def shell_specs(out: str) -> dict[str, tuple[dict, str]]:
    """task -> (spec JSON, seeds) of the train-single commands printed by `snakemake -n -p`."""
    specs = {}
    for m in re.finditer(r"train-single --task (\S+) --spec '([^']*)' --seeds ([\d ]+?) --outdir", out):
        specs[m.group(1)] = (json.loads(m.group(2)), m.group(3))
    return specs


def multi_specs(out: str) -> dict[tuple[str, int], tuple[dict, str]]:
    """(pool, model size) -> (spec JSON, seeds) of the train-multi commands of `snakemake -n -p`."""
    specs = {}
    for m in re.finditer(r"train-multi --pool (\S+) --model-size (\d+) --dataset \S+ --spec '([^']*)' "
                         r"--seeds ([\d ]+?) --outdir", out):
        specs[(m.group(1), int(m.group(2)))] = (json.loads(m.group(3)), m.group(4))
    return specs


# --------------------------------------------------------------------------- dry runs
DRYRUN_FIXTURES = ROOT / "tests" / "fixtures" / "dryrun"


def unregistered_env_ids(configfile: str) -> list[str]:
    """The env ids of ``configfile``'s tasks that no registered suite accepts (the schema check
    of the workflow refuses such a file): the Meta-World / MyoSuite configurations of issue 27
    (paper-metaworld, paper-myosuite, paper-all, metaworld-smoke, myosuite-smoke) until the
    suites that own the ``mw-*`` / ``myo-*`` ids are registered."""
    from tdmpc2core.envs import suite_for

    cfg = yaml.safe_load((ROOT / configfile).read_text()) or {}
    out = []
    for proto in (cfg.get("protocols") or {}).values():
        for task in ((proto or {}).get("tasks") or {}).values():
            try:
                suite_for(task["env_id"])
            except ValueError:
                out.append(task["env_id"])
    return out


def needs_suites(configfile: str):
    """A skip mark for a configuration whose env ids are not registered yet, naming them; it
    lifts itself once the suites are (then record its dry-run plan: TDMPC2_RECORD_DRYRUN=1)."""
    missing = unregistered_env_ids(configfile)
    return pytest.mark.skipif(bool(missing), reason=(
        f"{configfile}: env ids {missing[:3]}{' ...' if len(missing) > 3 else ''} ({len(missing)}) are not "
        "registered: the Meta-World / MyoSuite suites (mw-*, myo-*) of issue 27 are not in this checkout"))


DRYRUN_CONFIGS = [pytest.param(c, marks=needs_suites(c)) for c in (
    "config.yaml", *sorted(f"workflow/configs/{p.name}" for p in (ROOT / "workflow" / "configs").glob("*.yaml")))]


def dry_run_plan(wf: Path, configfile: str) -> str:
    """The normalised plan (tdmpc2core.pipeline.dryrun) of `snakemake -n -p --cores 4` with
    `configfile` (config.yaml: the demo alone) in the workflow copy ``wf``, where nothing ran.
    official-smoke.yaml names the checkpoint fixtures: they are copied beside the workflow."""
    from tdmpc2core.pipeline.dryrun import DRY_RUN_ARGS, normalise_dry_run

    if configfile.endswith("official-smoke.yaml"):
        (wf / "tests" / "fixtures").mkdir(parents=True, exist_ok=True)
        for name in ("official_ckpt_single.pt", "official_ckpt_multi.pt"):
            shutil.copy2(ROOT / "tests" / "fixtures" / name, wf / "tests" / "fixtures" / name)
    extra = () if configfile == "config.yaml" else ("--configfile", configfile)
    return normalise_dry_run(ok(snakemake(wf, *DRY_RUN_ARGS, *extra)), python=sys.executable)


@pytest.mark.parametrize("configfile", DRYRUN_CONFIGS)
def test_dry_run_plans_are_recorded(tmp_path, configfile):
    """`snakemake -n -p` plans the same jobs (rule, wildcards, files, reasons, resources,
    commands) for config.yaml and every workflow/configs/*.yaml as recorded in
    tests/fixtures/dryrun/<name>.txt on the code before the workflow's Python moved into
    tdmpc2core/pipeline/ (issue 25). TDMPC2_RECORD_DRYRUN=1 rewrites the records instead."""
    plan = dry_run_plan(copy_workflow(tmp_path), configfile)
    record = DRYRUN_FIXTURES / (Path(configfile).stem + ".txt")
    if os.environ.get("TDMPC2_RECORD_DRYRUN") == "1":
        DRYRUN_FIXTURES.mkdir(parents=True, exist_ok=True)
        record.write_text(plan)
    assert record.exists(), f"no recorded plan {record}: run with TDMPC2_RECORD_DRYRUN=1 once"
    assert plan == record.read_text(), f"the plan of {configfile} differs from {record}"


def test_learning_parity_file_is_an_input_of_the_report_only(tmp_path):
    """Config `learning_parity` (issue 30): the report reads the file (and reruns when it
    changes); no other job sees it, and without it the command is the recorded one."""
    from tdmpc2core.pipeline.dryrun import DRY_RUN_ARGS

    import pandas as pd

    wf = copy_workflow(tmp_path)
    pd.DataFrame([dict(implementation="ours", task="cup-catch", seed=0, agent_step=0, env_frames=0,
                       episode_return=1.0)]).to_parquet(wf / "lp.parquet")  # its columns are checked at plan time
    out = ok(snakemake(wf, *DRY_RUN_ARGS, "--config", "learning_parity=lp.parquet"))
    report = [b for b in re.split(r"\n(?=(?:local)?rule \S+:)", out) if b.strip().startswith("rule report:")]
    assert len(report) == 1 and "lp.parquet" in report[0].split("output:")[0]
    assert "--learning-parity lp.parquet --out results/report.html" in report[0]
    plan = "\n".join(line for line in out.splitlines() if "Command:" not in line)  # snakemake's own command line
    assert plan.count("lp.parquet") == 2, plan  # the report's input and its command, nothing else


@pytest.fixture(scope="module")
def demo_plan_one_core(tmp_path_factory) -> str:
    """The output of `snakemake -n -p --cores 1` on the demo (a copy of the workflow), run once
    for the tests that read it."""
    return ok(snakemake(copy_workflow(tmp_path_factory.mktemp("plan-one-core")), "-n", "-p", "--cores", "1"))


def test_default_dry_run(tmp_path, demo_plan_one_core):
    out = ok(snakemake(copy_workflow(tmp_path), "-n", "-p", "--cores", "2"))
    stats = job_stats(out)
    # 2 tasks x 2 seeds, the demo's seeds_per_job 2: one vmapped job per task
    assert stats == {"resolve_config": 1, "train_single_seeds_0_1": 2,
                     "figure_overview": 1, "figures_task": 2, "tables": 1, "dataset_task": 2, "dataset_pool": 1,
                     "dataset_summary": 1, "train_multi": 1, "scaling": 1, "report": 1, "all": 1, "total": 15}
    specs = shell_specs(out)
    assert set(specs) == {"pendulum", "cartpole-balance"}
    cb, _ = specs["cartpole-balance"]
    assert cb["action_repeat"] == 2 and cb["agent_steps"] == 10000 and cb["env_id"] == "CartpoleBalance"
    assert cb["agent"]["model_size"] == 1 and set(cb) == {"env_id", "action_repeat", "episode_length",
                                                           "agent_steps", "eval_every", "eval_episodes", "agent",
                                                           "allow_evicted"}
    assert cb["allow_evicted"] is False
    assert "PJRT_NPROC=1" in out and "JAX_COMPILATION_CACHE_DIR=.jax_cache" in out
    # the trainer replaces the shell (a SIGTERM reaches it alone); checkpoints outside results/
    assert "exec " in out and "--checkpoint-dir checkpoints/single/pendulum/seeds_0_1 --checkpoint-every 1000" in out
    # one multi-task model (the demo pool, model size 1), both seeds vmapped
    multi = multi_specs(out)
    assert set(multi) == {("demo", 1)}
    spec, seeds = multi[("demo", 1)]
    assert seeds == "0" and spec["updates"] == 8000 and spec["batch_size"] == 64 and "model_size" not in spec["agent"]
    assert spec["return_ranges"] == {"pendulum": [-3254.72, 0.0]}  # declared; CartpoleBalance: DMC default
    # threads: the training jobs run side by side on one thread each; the multi-task job runs
    # alone and gets its resources.threads (2), lowered to --cores
    def threads(text):
        return {cmd: n for n, cmd in re.findall(r"PJRT_NPROC=(\d+) .*? exec \S+ -m tdmpc2core.cli (train-\w+)", text)}
    assert threads(out) == {"train-single": "1", "train-multi": "2"}, threads(out)
    assert threads(demo_plan_one_core) == {"train-single": "1", "train-multi": "1"}


def test_paper_dry_run_has_22_tasks_and_no_demo_leak(tmp_path):
    out = ok(snakemake(copy_workflow(tmp_path), "-n", "-p", "--cores", "4", "--configfile", PAPER))
    stats = job_stats(out)
    # 22 tasks x 1 job of 3 vmapped seeds; one figure job per task
    assert stats == {"resolve_config": 1, "train_single_seeds_0_1_2": 22, "figure_overview": 1,
                     "figures_task": 22, "tables": 1, "dataset_task": 22, "dataset_pool": 1, "dataset_summary": 1,
                     "train_multi": 5, "scaling": 1, "report": 1, "all": 1, "total": 79}
    # the multi-task protocol: one model per size on the dmc22 pool, 10M updates at batch 1024,
    # evaluation every 50k updates with 10 episodes per task, every other setting the paper's
    multi = multi_specs(out)
    assert set(multi) == {("dmc22", s) for s in (1, 5, 19, 48, 317)}
    for (pool, size), (spec, seeds) in multi.items():
        assert spec == {"updates": 10_000_000, "batch_size": 1024, "eval_every": 50_000, "eval_episodes": 10,
                        "log_every": 10_000, "agent": {}}, size
    specs = shell_specs(out)
    assert set(specs) == set(P.PLAYGROUND_TO_DMC.values())
    tasks_in_dag = {t for _, t in planned_jobs(out) if t}
    assert tasks_in_dag == set(P.PLAYGROUND_TO_DMC.values())
    assert "pendulum" not in tasks_in_dag and "Pendulum-v1" not in out
    for task, (spec, seeds) in specs.items():
        assert seeds == "0 1 2"
        assert spec["agent"] == {"model_size": 5}, task  # nothing of the demo's agent merged in
        assert (spec["action_repeat"], spec["episode_length"]) == (2, 1000)
        assert (spec["eval_every"], spec["eval_episodes"]) == (50_000, 10)
        assert spec["agent_steps"] == (7_000_000 if task.startswith("humanoid") else 2_000_000), task
        assert P.PLAYGROUND_TO_DMC[spec["env_id"]] == task
    assert re.search(r"resources: .*gpu=1", out)


def test_paper_config_is_self_contained():
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    paper = yaml.safe_load((ROOT / PAPER).read_text())
    demo = yaml.safe_load((ROOT / "config.yaml").read_text())
    jsonschema.Draft202012Validator(schema).validate(paper)  # valid on its own
    # every top-level key of config.yaml is set by the paper config (no scalar leaks) ...
    assert set(demo) <= set(paper)
    # ... and its protocol block is one config.yaml does not have (no task or setting merges)
    assert paper["protocol"] not in demo["protocols"] and set(paper["protocols"]) == {paper["protocol"]}
    block = paper["protocols"]["paper"]
    assert block["defaults"]["agent"] == {"model_size": 5}
    assert block["defaults"]["resources"]["gpu"] == 1
    mt = block["multitask"]
    assert mt["model_sizes"] == [1, 5, 19, 48, 317] and mt["pools"] == ["dmc22"]
    assert (mt["updates"], mt["batch_size"], mt["eval_every"], mt["eval_episodes"]) == (10_000_000, 1024, 50_000, 10)
    assert set(block["pools"]["dmc22"]) == set(block["tasks"])
    # expected: the published band at the last published point, rounded outwards to 0.1
    for task, t in block["tasks"].items():
        fp = P.final_point(task)
        lo, hi = fp["mean_return"] - fp["sd_return"], fp["mean_return"] + fp["sd_return"]
        assert lo - 0.1 <= t["expected"]["mean_min"] <= lo + 1e-9, task
        assert hi - 1e-9 <= t["expected"]["mean_max"] <= hi + 0.1, task
        assert t.get("agent_steps", block["defaults"]["agent_steps"]) == fp["agent_steps"], task


PAPER_DMCONTROL = "workflow/configs/paper-dmc-dmcontrol.yaml"


def test_paper_dmcontrol_config_is_the_paper_protocol_on_dm_control(tmp_path):
    """The same tasks, steps, seeds and settings as paper-dmc.yaml; only the simulator (every
    env_id the dm_control id of the published task), the label and the declared return
    ranges of the multi-task evaluation differ. It plans the same 79 jobs."""
    paper = yaml.safe_load((ROOT / PAPER).read_text())
    dmc = yaml.safe_load((ROOT / PAPER_DMCONTROL).read_text())
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    jsonschema.Draft202012Validator(schema).validate(dmc)
    a, b = paper["protocols"]["paper"], dmc["protocols"]["paper"]
    assert "dm_control" in b["label"] and "Playground" not in b["label"]
    assert list(b["tasks"]) == list(a["tasks"])
    for task, t in b["tasks"].items():
        assert t["env_id"] == f"dmc:{task}" == f"dmc:{t['published']}"
        assert {k: v for k, v in t.items() if k != "env_id"} == {k: v for k, v in a["tasks"][task].items()
                                                                 if k != "env_id"}, task
    assert b["multitask"].pop("return_ranges") == {t: [0.0, 1000.0] for t in b["tasks"]}
    for key in set(a) | set(b):
        if key not in ("label", "tasks"):
            assert a.get(key) == b.get(key), key
    assert {k: v for k, v in paper.items() if k != "protocols"} == {k: v for k, v in dmc.items() if k != "protocols"}

    out = ok(snakemake(copy_workflow(tmp_path), "-n", "-p", "--cores", "4", "--configfile", PAPER_DMCONTROL))
    assert job_stats(out)["total"] == 79 and job_stats(out)["train_single_seeds_0_1_2"] == 22
    specs = shell_specs(out)
    assert {t: s["env_id"] for t, (s, _) in specs.items()} == {t: f"dmc:{t}" for t in a["tasks"]}
    assert all(seeds == "0 1 2" for _, seeds in specs.values())
    assert all(s["return_ranges"][t] == [0.0, 1000.0] for (s, _) in multi_specs(out).values() for t in a["tasks"])


# --------------------------------------------------------------------------- validation
def test_unknown_config_keys_are_refused(tmp_path):
    """Every refusal of a bad configuration when the workflow loads, before any job: the
    message names the key or value, where it is, the file that sets it and what is accepted.
    Two go through the `snakemake -n` command line (the refusal printed as one line with no
    schema dump, and the source of a key: --config or the file); the others load the same
    workflow in this process (load_workflow), which runs the same checks."""
    wf = copy_workflow(tmp_path)
    res = snakemake(wf, "-n", "--config", "bogus=1")
    assert res.returncode != 0
    assert "config: unknown key 'bogus' in the top level (set by --config); accepted there: bootstrap_reps, " \
        in res.stdout + res.stderr

    # a misspelt key: one line naming it, where it is and the closest accepted key (no schema dump)
    (wf / "typo.yaml").write_text("protocols:\n  demo:\n    tasks:\n      pendulum:\n        agent_step: 5\n")
    res = snakemake(wf, "-n", "--configfile", "typo.yaml")
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert ("config: unknown key 'agent_step' in protocols.demo.tasks.pendulum (set in typo.yaml); "
            "did you mean 'agent_steps'?") in out
    assert "Failed validating" not in out and "On instance" not in out and len(out.splitlines()) <= 6, out

    # in this process from here on: the demo loads as it is, and each bad file is refused
    load_workflow(wf)
    assert ("config: unknown key 'agent_step' in protocols.demo.tasks.pendulum (set in typo.yaml); "
            "did you mean 'agent_steps'?") in refusal(wf, "typo.yaml")  # the same message as the command line's
    (wf / "typo2.yaml").write_text("protocols: {demo: {tasks: {pendulum: {published: cartpol-balance}}}}\n")
    assert ("config: protocols.demo.tasks.pendulum.published (set in typo2.yaml): 'cartpol-balance' is not "
            "accepted; did you mean 'cartpole-balance'?") in refusal(wf, "typo2.yaml")

    (wf / "agent.yaml").write_text("protocols:\n  demo:\n    tasks:\n      pendulum:\n        agent: {num_sample: 5}\n")
    assert ("config: unknown agent setting 'num_sample' in protocols.demo.tasks.pendulum.agent; did you mean "
            "'num_samples'?") in refusal(wf, "agent.yaml")
    (wf / "agent2.yaml").write_text("protocols: {demo: {defaults: {agent: {num_sampels: 5}}}}\n")
    assert "unknown agent setting 'num_sampels' in protocols.demo.defaults.agent; did you mean 'num_samples'?" \
        in refusal(wf, "agent2.yaml")

    # `episodic` marks a task that terminates (docs/pipeline.md): a boolean
    (wf / "episodic.yaml").write_text("protocols:\n  demo:\n    tasks:\n      pendulum:\n"
                                      "        agent: {episodic: 'yes'}\n")
    assert "'yes' is not of type 'boolean'" in refusal(wf, "episodic.yaml")
    # what the library would refuse at the job's start is refused at load
    for text, message in (
            ("tasks: {pendulum: {agent: {model_size: 3}}}",
             "protocols.demo.tasks.pendulum.agent (T = 200 agent steps): model_size=3 is not a preset; accepted: [1, 5"),
            ("tasks: {pendulum: {env_id: Pendulum-v2}}", "env_id 'Pendulum-v2': unknown env id 'Pendulum-v2'. Did you mean"),
            # the library's own checks (tdmpc2core.model.config.validate_config), as the job would run them
            ("tasks: {pendulum: {agent: {horizon: 0}}}",
             "protocols.demo.tasks.pendulum.agent (T = 200 agent steps): horizon=0 must be >= 1"),
            ("defaults: {agent: {num_elites: 65}}",
             "protocols.demo.tasks.pendulum.agent (T = 200 agent steps): num_elites=65 exceeds num_samples=64"),
            ("tasks: {cartpole-balance: {episode_length: 999}}", "episode_length=999 (simulator steps) is not divisible"),
            # a length a suite with its own time limit would not keep (issue 44): refused, the limit named
            ("tasks: {mw: {env_id: mw-reach, action_repeat: 2, episode_length: 1200}}",
             "episode_length=1200 for 'mw-reach': the metaworld suite ends its episodes at its own time limit, 200 "
             "simulator steps (T = 100 agent steps at action_repeat=2)"),
            ("defaults: {agent: {updates_per_step: 0.5}}", "updates_per_step=0.5 with n_envs=1 asks for 0.5 updates"),
            # a batch larger than the replay holds at the first update: Pendulum's 5 episodes of 201
            # rows before the burst at seed_steps 1000 give 5 x (201 - 3) slices of horizon + 1 rows
            ("tasks: {pendulum: {agent: {batch_size: 991}}}",
             "batch_size=991 exceeds the 990 distinct training slices (horizon + 1 consecutive rows of one episode) "
             "that the replay at the first update (seed_steps=1000, n_envs=1, T=200, horizon=3) holds"),
            ("tasks: {pendulum: {n_envs: 6}}", "seed_steps=1000 is too small: with n_envs=6"),
            ("tasks: {pendulum: {agent: {num_elites: 0}}}", "num_elites=0 must be >= 1"),
            ("tasks: {pendulum: {agent: {iterations: 0}}}", "iterations=0 must be >= 1"),
            # a run that ends in its seed phase would write complete-looking outputs of no update
            ("tasks: {pendulum: {agent_steps: 1000}}",
             "agent_steps=1000 trains nothing: the first update comes after the seed phase's seed_steps=1000"),
            # an episodic task's first update waits for data (R3): its batch is bounded by the run
            ("tasks: {pendulum: {agent: {episodic: true, batch_size: 6001}}}",
             "batch_size=6001 exceeds the 6000 distinct training slices (horizon + 1 consecutive rows of one "
             "episode) that the whole run (6000 agent steps, at most one slice each) holds"),
            # the pool's exported episodes: 2 seeds x (29 Pendulum episodes of 201 rows + 19 CartpoleBalance
            # episodes of 501 rows); horizon 3 leaves 2 x (29 x 198 + 19 x 498) = 30,408 slices
            ("multitask: {batch_size: 30409}",
             "multitask (pool demo, model size 1): batch_size=30409 exceeds the 30408 distinct training slices"),
            ("multitask: {agent: {num_elites: 100}}",
             "multitask (pool demo, model size 1): num_elites=100 exceeds num_samples=64"),
            ("multitask: {agent: {num_sample: 1}}",
             "unknown agent setting 'num_sample' in protocols.demo.multitask.agent; did you mean 'num_samples'?"),
            ("multitask: {return_ranges: {pendulum: [0, -1]}}", "return_ranges.pendulum = [0, -1]: need [low, high]"),
            ("tasks: {pendulum: {expected: {mean_min: -100, mean_max: -400}}}",
             "tasks.pendulum.expected: mean_min -100 > mean_max -400"),
            ("multitask: {expected: {demo: {pendulum: {mean_min: 5, mean_max: 1}}}}",
             "multitask.expected.demo.pendulum: mean_min 5 > mean_max 1")):
        (wf / "bad.yaml").write_text("protocols: {demo: {" + text + "}}\n")
        msg = refusal(wf, "bad.yaml")
        assert message in msg, (text, msg)
    # an episodic task in a pool the multi-task stage trains: refused at load (deviation M7)
    (wf / "episodic2.yaml").write_text("protocols:\n  demo:\n    tasks:\n      pendulum:\n"
                                       "        agent: {episodic: true}\n")
    assert "holding episodic task(s) ['pendulum']" in refusal(wf, "episodic2.yaml")

    # a run longer than its replay cannot export its whole history: refused at load time
    (wf / "evict.yaml").write_text("protocols:\n  demo:\n    tasks:\n      pendulum:\n        agent: {buffer_size: 2000}\n")
    assert "task 'pendulum' of protocol 'demo' trains 6000 agent steps with buffer_size 2000" in refusal(
        wf, "evict.yaml")
    (wf / "evict2.yaml").write_text("protocols:\n  demo:\n    datasets: {allow_evicted: true}\n")
    load_workflow(wf, "evict.yaml", "evict2.yaml")  # allowed explicitly: loads
    (wf / "pool.yaml").write_text("protocols:\n  demo:\n    pools: {bad: [pendulum, walker]}\n")
    assert "pool 'bad' of protocol 'demo' names task(s) ['walker']" in refusal(wf, "pool.yaml")

    (wf / "mt.yaml").write_text("protocols:\n  demo:\n    multitask: {pools: [nope]}\n")
    assert "multitask.pools names ['nope']" in refusal(wf, "mt.yaml")
    (wf / "mt2.yaml").write_text("protocols:\n  demo:\n    multitask: {agent: {model_size: 5}}\n")
    assert "multitask.agent.model_size" in refusal(wf, "mt2.yaml")
    (wf / "mt3.yaml").write_text("protocols:\n  demo:\n    multitask: {model_sizes: [7]}\n")
    assert ("config: protocols.demo.multitask.model_sizes.0 (set in mt3.yaml): 7 is not accepted; accepted: "
            "1, 5, 19, 48, 317") in refusal(wf, "mt3.yaml")
    (wf / "mt4.yaml").write_text("protocols:\n  demo:\n    multitask: {expected: {demo: {walker: {mean_min: 1}}}}\n")
    assert "task(s) ['walker'] are not in pool 'demo'" in refusal(wf, "mt4.yaml")

    # a stop request must be able to checkpoint before the time limit's kill
    assert "max_chunk_seconds=400 is not below cluster.stop_lead_seconds=300" in refusal(
        wf, config=("max_chunk_seconds=400",))

    assert "protocol 'nope' has no entry under 'protocols'" in refusal(wf, config=("protocol=nope",))


def test_dry_run_needs_no_jax(tmp_path):
    """A login node without JAX: `snakemake -n` loads the workflow, whose checks are the
    library's plain-Python ones (tdmpc2core.model.config, tdmpc2core.envs ids), and refuses a
    bad value all the same."""
    wf = copy_workflow(tmp_path)
    nojax = tmp_path / "nojax"
    for mod in ("jax", "jaxlib", "flax", "optax"):
        (nojax / mod).mkdir(parents=True)
        (nojax / mod / "__init__.py").write_text(f'raise ImportError("{mod} is not installed here (test stand-in)")\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAKEMAKE")}
    env["PYTHONPATH"] = os.pathsep.join([str(nojax), str(ROOT)])  # this checkout's library, whichever is installed

    def dry(*args):
        return subprocess.run([sys.executable, "-m", "snakemake", "-n", *args], cwd=wf, capture_output=True,
                              text=True, timeout=600, env=env)

    assert job_stats(ok(dry("--cores", "2")))["total"] == 15
    assert job_stats(ok(dry("--cores", "2", "--configfile", PAPER)))["total"] == 79
    (wf / "bad.yaml").write_text("protocols: {demo: {tasks: {pendulum: {agent: {horizon: 0}}}}}\n")
    res = dry("--configfile", "bad.yaml")
    assert res.returncode != 0 and "horizon=0 must be >= 1" in res.stdout + res.stderr
    assert "ImportError" not in res.stdout + res.stderr


# --------------------------------------------------------------------------- runs
STAND_IN_TRAINER = '''
"""Test stand-in for `tdmpc2 train-single`: writes the files of docs/artifacts.md without
training (returns rise linearly with the agent steps)."""
import json, os
import pandas as pd


def add_arguments(p):
    p.add_argument("--task", required=True)
    p.add_argument("--spec", required=True)
    p.add_argument("--seeds", type=int, nargs="+", required=True)
    p.add_argument("--outdir", required=True)
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--checkpoint-every", type=int, required=True)
    p.add_argument("--keep-checkpoints", type=int, required=True)
    p.add_argument("--max-chunk-seconds", type=float, required=True)
    p.add_argument("--logger", choices=["none"], required=True)  # the workflow's flags without a logger block
    p.add_argument("--devices", choices=["auto"], required=True)  # cluster.devices (issue 28)
    p.add_argument("--video", choices=["off", "last"], required=True)  # config `video` (issue 29)


def run(args):
    fail = os.environ.get("TDMPC2_TEST_FAIL")  # "task:seed": that job fails (tests of failed runs)
    if fail and fail.split(":")[0] == args.task and int(fail.split(":")[1]) in args.seeds:
        raise SystemExit(3)
    spec = json.loads(args.spec)
    ar, n, every = spec["action_repeat"], spec["agent_steps"], spec["eval_every"]
    steps = sorted(set(range(0, n + 1, every)) | {n})
    for seed in args.seeds:
        d = os.path.join(args.outdir, f"seed{seed}")
        os.makedirs(d, exist_ok=True)
        lo, hi = (-1200.0, -150.0) if spec["env_id"] == "Pendulum-v1" else (100.0, 900.0)
        rows = [dict(task=args.task, seed=seed, eval_index=i, agent_steps=s, env_frames=s * ar, episode=e,
                     length=200, **{"return": lo + (hi - lo) * s / n + 5 * seed + e})
                for i, s in enumerate(steps) for e in range(spec["eval_episodes"])]
        pd.DataFrame(rows).to_parquet(os.path.join(d, "eval.parquet"))
        pd.DataFrame(dict(task=args.task, seed=seed, agent_steps=steps, env_frames=[s * ar for s in steps],
                          total_loss=[1.0 / (1 + s) for s in steps],
                          train_return=[lo + (hi - lo) * s / n for s in steps])).to_parquet(
            os.path.join(d, "metrics.parquet"))
        import numpy as np
        from tdmpc2core.dataset import TaskInfo, from_episodes, save_dataset
        rng = np.random.default_rng(seed)
        T, O = 5, 3
        eps = []
        for _ in range(2):
            act, rew = rng.uniform(-1, 1, (T + 1, 1)).astype(np.float32), np.full(T + 1, 1.0 + seed, np.float32)
            act[0], rew[0] = np.nan, np.nan
            eps.append(dict(obs=rng.standard_normal((T + 1, O + len(args.task) % 3)).astype(np.float32),
                            action=act, reward=rew, terminated=np.zeros(T + 1, bool)))
        task = TaskInfo(args.task, O + len(args.task) % 3, 1, T, ar, 0.95, spec["env_id"])
        save_dataset(from_episodes(eps, task, {"seed": seed}), os.path.join(d, "episodes.parquet"))
        video = None
        if args.video == "last" and seed == args.seeds[0]:  # a 4-frame video: black, then white
            from tdmpc2core.io.video import write_video
            frames = np.zeros((4, 16, 16, 3), np.uint8)
            frames[2:] = 255
            size = write_video(os.path.join(d, "video.mp4"), frames, 10.0)
            video = {"file": "video.mp4", "seed": seed, "frames": 4, "fps": 10.0, "stride": 1, "bytes": size,
                     "episode_return": 1.5, "length": 3, "renderer": "stand-in"}
        with open(os.path.join(d, "run.json"), "w") as fh:
            json.dump({"task": args.task, "seed": seed, "spec": spec, "pid": os.getpid(), "video": video,
                       "checkpoint": [args.checkpoint_dir, args.checkpoint_every, args.keep_checkpoints,
                                      args.max_chunk_seconds],
                       "provenance": {"matmul_precision": "highest", "wall_time_s": 1.0,
                                      "threads": os.environ.get("PJRT_NPROC"),
                                      "cache": os.environ.get("JAX_COMPILATION_CACHE_DIR")}}, fh)
    return 0
'''


STAND_IN_MULTI = '''
"""Test stand-in for `tdmpc2 train-multi`: writes the files of docs/artifacts.md without
training (returns rise with the model size)."""
import json, os
import numpy as np
import pandas as pd
from tdmpc2core.dataset import load_dataset


def add_arguments(p):
    for a in ("--pool", "--dataset", "--spec", "--outdir"):
        p.add_argument(a, required=True)
    p.add_argument("--model-size", type=int, required=True)
    p.add_argument("--seeds", type=int, nargs="+", required=True)
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--checkpoint-every", type=int, required=True)
    p.add_argument("--keep-checkpoints", type=int, required=True)
    p.add_argument("--max-chunk-seconds", type=float, required=True)
    p.add_argument("--logger", choices=["none"], required=True)  # the workflow's flags without a logger block
    p.add_argument("--devices", choices=["auto"], required=True)  # cluster.devices (issue 28)
    p.add_argument("--video", choices=["off", "last"], required=True)  # config `video` (issue 29)


def run(args):
    assert args.checkpoint_dir == f"checkpoints/multi/{args.pool}/size{args.model_size}", args.checkpoint_dir
    spec, ds = json.loads(args.spec), load_dataset(args.dataset)
    ranges = {t.name: spec.get("return_ranges", {}).get(t.name, [0.0, 1000.0]) for t in ds.tasks}
    rows, n = [], spec["updates"]
    for seed in args.seeds:
        for i, u in enumerate(sorted(set(range(0, n + 1, spec["eval_every"])) | {n})):
            for t in ds.tasks:
                lo, hi = ranges[t.name]
                for e in range(spec["eval_episodes"]):
                    r = lo + (hi - lo) * (0.3 + 0.1 * np.log(args.model_size + 1) * u / n) + seed + e
                    rows.append(dict(pool=args.pool, model_size=args.model_size, task=t.name, seed=seed, eval_index=i,
                                     updates=u, episode=e, length=10, normalized_score=100 * (r - lo) / (hi - lo),
                                     return_low=lo, return_high=hi, **{"return": r}))
    os.makedirs(args.outdir, exist_ok=True)
    pd.DataFrame(rows).to_parquet(os.path.join(args.outdir, "eval.parquet"))
    pd.DataFrame(dict(pool=[args.pool], model_size=[args.model_size], seed=[args.seeds[0]], updates=[n])).to_parquet(
        os.path.join(args.outdir, "metrics.parquet"))
    videos = {}
    if args.video == "last":  # one 2-frame video per task
        from tdmpc2core.io.video import write_video
        for t in ds.tasks:
            size = write_video(os.path.join(args.outdir, "videos", f"{t.name}.mp4"), np.zeros((2, 16, 16, 3), np.uint8), 5.0)
            videos[t.name] = {"file": f"videos/{t.name}.mp4", "seed": args.seeds[0], "frames": 2, "fps": 5.0,
                              "stride": 1, "bytes": size, "episode_return": 0.5, "length": 1, "renderer": "stand-in"}
    with open(os.path.join(args.outdir, "run.json"), "w") as fh:
        json.dump({"pool": args.pool, "model_size": args.model_size, "params": 1000 * args.model_size,
                   "spec": spec, "return_ranges": ranges, "videos": videos}, fh)
    return 0
'''


def test_pipeline_with_stand_in_trainer(tmp_path):
    """The whole DAG with a stand-in training stage (a copy of the package whose
    train_single writes synthetic runs); then the rerun plans of docs/pipeline.md."""
    wf = copy_workflow(tmp_path)
    # `python -m tdmpc2core.cli` runs from the work dir first: a copy there shadows the install
    shutil.copytree(ROOT / "tdmpc2core", wf / "tdmpc2core", ignore=shutil.ignore_patterns("__pycache__"))
    (wf / "tdmpc2core" / "stages" / "train_single.py").write_text(STAND_IN_TRAINER)
    (wf / "tdmpc2core" / "stages" / "train_multi.py").write_text(STAND_IN_MULTI)
    # one job per seed, the layout that lets one seed rerun alone (docs/pipeline.md)
    (wf / "small.yaml").write_text("bootstrap_reps: 200\nseeds_per_job: 1\n")

    out = ok(snakemake(wf, "--cores", "2", "--configfile", "small.yaml"))
    assert "17 of 17 steps (100%) done" in out
    # the end of the run says where the report is and how the checks went
    assert f"Report: {wf / 'results/report.html'}" in out
    assert "Final-score check (results/tables/final_scores.csv): all 2 pass their expected range." in out
    assert "Multi-task check (results/tables/multitask_tasks.csv): " in out
    html = (wf / "results" / "report.html").read_text(encoding="utf-8")
    assert "Demo at laptop scale: NOT the paper&#x27;s protocol" in html
    assert html.count("data:image/png;base64,") == 7  # 2 x (eval, train), overview, datasets, multi-task
    # config `video: last` (the default): each task's first seed's video, embedded (issue 29)
    # then the multi-task model's, one per pooled task
    assert html.count('<video class="evalvideo"') == 4 and html.count("data:video/mp4;base64,") == 4
    assert "multi-task demo size 1: cartpole-balance" in html
    assert (wf / "results/single/pendulum/seed1/video.mp4").exists()  # one per job (seeds_per_job: 1)
    # the multi-task section: scaling table, per-task returns beside the single-task ones, the
    # declared ranges and the mt30 caveat
    assert 'id="multitask"' in html and "not the paper&#x27;s mt30" in html
    assert "[-3,254.72, 0.00]" in html and "[0.00, 1,000.00]" in html
    tasks = (wf / "results/tables/multitask_tasks.csv").read_text()
    assert tasks.count(",pass,") + tasks.count(",fail,") == 2
    scaling = (wf / "results/tables/multitask_scaling.md").read_text()
    assert "mt30" in scaling and "| demo | 1 |" in scaling
    assert 'id="datasets"' in html and "(all tasks)" in html
    from tdmpc2core.dataset import load_dataset
    pool = load_dataset(wf / "results/datasets/pools/demo.parquet")
    assert pool.task_names == ["pendulum", "cartpole-balance"] and pool.num_episodes == 8
    assert [t.obs_dim for t in pool.tasks] == [5, 4] and pool.obs_dim == 5
    assert not re.search(r'(src|href)="(?!#|data:)', html)
    assert "train_single/pendulum/seeds_0" in html  # runtimes from the benchmark files
    for task in ("pendulum", "cartpole-balance"):
        for seed in (0, 1):
            run = json.loads((wf / "results/single" / task / f"seed{seed}" / "run.json").read_text())
            assert run["provenance"]["threads"] == "1" and run["provenance"]["cache"] == ".jax_cache"
            # checkpoints outside results/ (Snakemake deletes a failed job's outputs), per task and seed group
            assert run["checkpoint"] == [f"checkpoints/single/{task}/seeds_{seed}", 1000, 2, 30.0]
            assert (wf / "benchmarks/runs/train_single" / task / f"seeds_{seed}.tsv").exists()
            assert (wf / "logs/train_single" / task / f"seeds_{seed}.log").exists()
    final = (wf / "results/tables/final_scores.csv").read_text()
    assert final.count(",pass,") == 2  # pendulum -147.5 >= -400; cartpole-balance 907.5 >= 700

    assert "Nothing to be done" in ok(snakemake(wf, "-n", "--configfile", "small.yaml"))
    # a logger block added to finished work reruns nothing (docs/pipeline.md, "Loggers")
    (wf / "logged.yaml").write_text("logger:\n  kind: csv\n")
    assert "Nothing to be done" in ok(snakemake(wf, "-n", "--configfile", "small.yaml", "logged.yaml"))
    # config `reproduction` (issue 45): a new results file (with its JSON) on finished work replans
    # the report alone, its command naming the file; no other job reads it
    for ext in ("parquet", "json"):
        shutil.copy2(ROOT / "tests" / "fixtures" / f"reproduction_fixture.{ext}", wf / f"rp.{ext}")
    out = ok(snakemake(wf, "-n", "-p", "--configfile", "small.yaml", "--config", "reproduction=rp.parquet"))
    assert job_stats(out) == {"report": 1, "all": 1, "total": 2}
    report = [b for b in re.split(r"\n(?=(?:local)?rule \S+:)", out) if b.strip().startswith(("rule report:", "localrule report:"))]
    assert len(report) == 1 and "rp.json" in report[0].split("output:")[0], out[-3000:]
    assert "--reproduction rp.parquet --out results/report.html" in report[0]

    # a deleted run folder: a plain rerun rebuilds exactly that seed's job and what depends on it
    report = wf / "results/report.html"
    before = report.stat().st_mtime_ns
    shutil.rmtree(wf / "results/single/pendulum/seed1")
    out = ok(snakemake(wf, "-n", "--configfile", "small.yaml"))
    assert sorted(j for j in planned_jobs(out) if j[0].startswith("train_")) == [
        ("train_multi", ""), ("train_single_seeds_1", "pendulum")]
    assert job_stats(out) == {"train_single_seeds_1": 1, "figure_overview": 1, "figures_task": 1,
                              "tables": 1, "dataset_task": 1, "dataset_pool": 1, "dataset_summary": 1,
                              "train_multi": 1, "scaling": 1, "report": 1, "all": 1, "total": 11}
    assert ("dataset_task", "pendulum") in planned_jobs(out) and ("figures_task", "pendulum") in planned_jobs(out)
    out = ok(snakemake(wf, "--cores", "2", "--configfile", "small.yaml"))
    assert (wf / "results/single/pendulum/seed1/run.json").exists() and report.stat().st_mtime_ns > before
    assert "Final-score check (results/tables/final_scores.csv): all 2 pass" in out
    assert "Nothing to be done" in ok(snakemake(wf, "-n", "--configfile", "small.yaml"))

    # a job fails under --keep-going: Snakemake deletes its outputs, so the report, which shows
    # them, is moved aside with a banner and a line saying so; the other jobs still ran
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAKEMAKE")}
    res = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--keep-going", "--configfile",
                          "small.yaml", "--forcerun", "results/single/pendulum/seed1/eval.parquet",
                          "results/single/cartpole-balance/seed0/eval.parquet"],
                         cwd=wf, capture_output=True, text=True, timeout=600,
                         env={**env, "TDMPC2_TEST_FAIL": "pendulum:1"})
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert not (wf / "results/single/pendulum/seed1").exists() or not (
        wf / "results/single/pendulum/seed1/run.json").exists()
    assert not report.exists(), out[-3000:]
    stale = (wf / "results/report.stale.html").read_text(encoding="utf-8")
    assert "<b>Out of date.</b>" in stale and "results/single/pendulum/seed1" in stale
    assert re.search(r"results/report.html showed results this run did not complete \(\d+ missing, \d+ replaced: "
                     r"[^)]*results/single/pendulum/seed1.*\); moved to results/report.stale.html", out), out[-3000:]
    assert "Failed job(s): train_single_seeds_1 (task=pendulum)" in out
    # the same command without the failure: the missing run and the report are rebuilt, the
    # stale copy removed
    out = ok(snakemake(wf, "--cores", "2", "--configfile", "small.yaml"))
    assert report.exists() and not (wf / "results/report.stale.html").exists()
    assert "Removed results/report.stale.html" in out

    # rerun one seed: exactly its training job, then what depends on it
    out = ok(snakemake(wf, "-n", "--cores", "all", "--configfile", "small.yaml",
                       "--forcerun", "results/single/pendulum/seed1/eval.parquet"))
    trains = [j for j in planned_jobs(out) if j[0].startswith("train_single")]
    assert trains == [("train_single_seeds_1", "pendulum")]
    assert job_stats(out) == {"train_single_seeds_1": 1, "figure_overview": 1, "figures_task": 1,
                              "tables": 1, "dataset_task": 1, "dataset_pool": 1, "dataset_summary": 1,
                              "train_multi": 1, "scaling": 1, "report": 1, "all": 1, "total": 11}
    assert ("dataset_task", "pendulum") in planned_jobs(out)

    # changing one task's settings reruns that task's training only
    (wf / "change.yaml").write_text("protocols:\n  demo:\n    tasks:\n      pendulum:\n        agent_steps: 3000\n")
    out = ok(snakemake(wf, "-n", "--configfile", "small.yaml", "change.yaml"))
    trains = sorted(j for j in planned_jobs(out) if j[0].startswith("train_single"))
    assert trains == [("train_single_seeds_0", "pendulum"), ("train_single_seeds_1", "pendulum")]

    # changing threads, the cache folder or the checkpoint settings reruns no training
    out = ok(snakemake(wf, "-n", "--configfile", "small.yaml", "--config", "threads_per_job=2",
                       "jax_cache_dir=/tmp/elsewhere", "checkpoint_dir=/tmp/ck", "checkpoint_every=7",
                       "keep_checkpoints=3", "max_chunk_seconds=5"))
    assert not [j for j in planned_jobs(out) if j[0].startswith("train_")]
    # changing a multi-task setting reruns the multi-task model only (and what depends on it)
    (wf / "mt.yaml").write_text("protocols:\n  demo:\n    multitask: {updates: 3000}\n")
    out = ok(snakemake(wf, "-n", "--configfile", "small.yaml", "mt.yaml"))
    stats = job_stats(out)  # the resolved configuration changes too: its quick readers rerun
    assert stats["train_multi"] == 1 and stats["scaling"] == 1 and not any(k.startswith("train_single") for k in stats)

    # Snakemake's own report of the outputs flagged with report()
    ok(snakemake(wf, "--report", "smk-report.zip", "--configfile", "small.yaml"))
    assert (wf / "smk-report.zip").stat().st_size > 10_000

    # targeted reruns, counted (docs/pipeline.md, "Rerunning one seed, one task"): with nothing
    # changed, two dry runs in fresh processes both have nothing to do (the params, code
    # versions included, are built in a stable order)
    for _ in range(2):
        assert "Nothing to be done" in ok(snakemake(wf, "-n", "--configfile", "small.yaml"))
    # one task's hyperparameter: that task's jobs and what reads them; the other task's
    # training, figure and dataset jobs (4 of the DAG's 17) stay
    (wf / "hp.yaml").write_text("protocols:\n  demo:\n    tasks:\n      pendulum:\n        agent: {horizon: 4}\n")
    out = ok(snakemake(wf, "-n", "--configfile", "small.yaml", "hp.yaml"))
    assert job_stats(out) == {"resolve_config": 1, "train_single_seeds_0": 1, "train_single_seeds_1": 1,
                              "figures_task": 1, "figure_overview": 1, "tables": 1, "dataset_task": 1,
                              "dataset_pool": 1, "dataset_summary": 1, "train_multi": 1, "scaling": 1,
                              "report": 1, "all": 1, "total": 13}
    assert {t for _, t in planned_jobs(out) if t} == {"pendulum"}
    # one task's environment settings (env_params, part of its spec): the same jobs
    (wf / "env.yaml").write_text("protocols:\n  demo:\n    tasks:\n      pendulum:\n"
                                 "        env_params: {max_torque: 1.5}\n")
    out = ok(snakemake(wf, "-n", "--configfile", "small.yaml", "env.yaml"))
    assert job_stats(out)["total"] == 13 and {t for _, t in planned_jobs(out) if t} == {"pendulum"}
    assert job_stats(out)["train_single_seeds_0"] == job_stats(out)["train_single_seeds_1"] == 1
    # the code of tdmpc2core (a code version among each rule's params, tdmpc2core/pipeline/codeversion.py,
    # with config.yaml's rerun_on_code_change: true): comments and
    # docstrings change nothing; code of the report stage's modules reruns the report; code of
    # the training stage reruns every training job and everything downstream
    html_py = wf / "tdmpc2core/report/html.py"
    html_py.write_text(html_py.read_text().replace('"""', '"""A docstring edit. ', 1) + "\n# a comment\n")
    assert "Nothing to be done" in ok(snakemake(wf, "-n", "--configfile", "small.yaml"))
    html_py.write_text(html_py.read_text() + "CODE_VERSION_PROBE = 1\n")
    out = ok(snakemake(wf, "-n", "--configfile", "small.yaml"))
    assert job_stats(out) == {"report": 1, "all": 1, "total": 2}
    trainer = wf / "tdmpc2core/stages/train_single.py"
    trainer.write_text(trainer.read_text() + "\nCODE_VERSION_PROBE = 1\n")
    out = ok(snakemake(wf, "-n", "--configfile", "small.yaml"))
    assert job_stats(out) == {"train_single_seeds_0": 2, "train_single_seeds_1": 2, "figures_task": 2,
                              "figure_overview": 1, "tables": 1, "dataset_task": 2, "dataset_pool": 1,
                              "dataset_summary": 1, "train_multi": 1, "scaling": 1, "report": 1, "all": 1,
                              "total": 16}



def test_local_run_takes_the_accelerator_one_job_at_a_time(tmp_path):
    """Issue 43: on a machine with an accelerator (here a TPU named by TPU_ACCELERATOR_TYPE, as a
    TPU machine's image sets it), the training jobs that use it (resources.gpu >= 1) run one at a
    time even with free cores; without one (JAX_PLATFORMS=cpu) they run side by side. The
    stand-in trainer records when each job ran (one second each)."""
    wf = copy_workflow(tmp_path)
    shutil.copytree(ROOT / "tdmpc2core", wf / "tdmpc2core", ignore=shutil.ignore_patterns("__pycache__"))
    timed = STAND_IN_TRAINER.replace("def run(args):\n", (
        "def run(args):\n"
        "    import time\n"
        "    t0 = time.time(); time.sleep(1.0)\n"
        "    os.makedirs(args.outdir, exist_ok=True)\n"
        "    with open(os.path.join(args.outdir, f'ran-{args.seeds[0]}'), 'w') as fh:\n"
        "        fh.write(f'{t0} {time.time()}')\n"), 1)
    (wf / "tdmpc2core" / "stages" / "train_single.py").write_text(timed)
    (wf / "acc.yaml").write_text("seeds_per_job: 1\nvideo: off\nprotocols:\n  demo:\n    defaults:\n"
                                 "      resources: {gpu: 1, runtime: 120, mem_mb: 4000}\n")
    targets = [f"results/single/{t}/seed{s}/eval.parquet" for t in ("pendulum", "cartpole-balance") for s in (0, 1)]

    def spans(env_extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SNAKEMAKE", "TPU_", "CUDA_VISIBLE"))}
        env.update(env_extra)
        shutil.rmtree(wf / "results", ignore_errors=True)
        res = subprocess.run([sys.executable, "-m", "snakemake", *targets, "--cores", "4", "--configfile", "acc.yaml"],
                             cwd=wf, capture_output=True, text=True,
                             timeout=600, env=env)
        out = ok(res)
        got = sorted(tuple(map(float, p.read_text().split())) for p in (wf / "results/single").glob("*/ran-*"))
        assert len(got) == 4, out[-3000:]
        return got, out

    got, out = spans({"TPU_ACCELERATOR_TYPE": "v5litepod-1"})
    assert "tdmpc2: TPU found (TPU_ACCELERATOR_TYPE=v5litepod-1): at most 1 job(s) on it at once" in out
    assert all(b[0] >= a[1] for a, b in zip(got, got[1:])), got  # one after another
    got, out = spans({"JAX_PLATFORMS": "cpu"})
    assert "found" not in out
    assert any(b[0] < a[1] for a, b in zip(got, got[1:])), got  # side by side: the check can fail


def test_settings_in_resources_are_no_rerun_trigger_and_params_are(tmp_path):
    """The workflow's convention for values that must not rerun a job (tdmpc2core/pipeline/jobs.py,
    docs/pipeline.md "What reruns a job"): Snakemake records a finished job's params and shell
    text, not its resources, so a setting the shell reads as {resources.<name>} changes without a
    replan while the same change as a param replans. A one-job workflow run for real (Snakemake
    records nothing for a dry run or --touch), then dry runs; the trainer rules' settings are the
    names of jobs.SETTINGS, and test_pipeline_with_stand_in_trainer changes them on the real workflow."""
    from tdmpc2core.pipeline.jobs import SETTINGS

    (tmp_path / "Snakefile").write_text(
        'rule job:\n    output: "out.txt"\n    params: spec=config.get("spec", "a")\n'
        f'    resources: **{{name: config.get(name, "x") for name in {list(SETTINGS)!r}}}\n'
        '    shell: "echo {params.spec} ' + " ".join(f"{{resources.{n}}}" for n in SETTINGS) + ' > {output}"\n')
    ok(snakemake(tmp_path, "--cores", "1"))
    assert (tmp_path / "out.txt").read_text().split() == ["a"] + ["x"] * len(SETTINGS)
    changed = [f"{n}=y" for n in SETTINGS]
    assert "Nothing to be done" in ok(snakemake(tmp_path, "-n", "--cores", "1", "--config", *changed))
    out = ok(snakemake(tmp_path, "-n", "--cores", "1", "--config", "spec=b"))
    assert "Params have changed since last execution" in out and job_stats(out) == {"job": 1, "total": 1}


def test_code_change_without_rerun_is_named_not_rerun(tmp_path):
    """rerun_on_code_change: false (the paper configurations' setting, docs/pipeline.md "Code
    changes"): after a complete run, a code change of the training stage reruns nothing, and
    the dry run names the finished jobs that ran other code (from run.json's code_version; the
    multi-task stand-in records none: counted apart)."""
    wf = copy_workflow(tmp_path)
    shutil.copytree(ROOT / "tdmpc2core", wf / "tdmpc2core", ignore=shutil.ignore_patterns("__pycache__"))
    trainer = STAND_IN_TRAINER.replace('json.dump({"task": args.task,',
                                       'json.dump({"code_version": code_version("train_single"), "task": args.task,')
    assert trainer != STAND_IN_TRAINER
    (wf / "tdmpc2core/stages/train_single.py").write_text(
        "from tdmpc2core.pipeline.codeversion import code_version\n" + trainer)
    (wf / "tdmpc2core/stages/train_multi.py").write_text(STAND_IN_MULTI)
    (wf / "small.yaml").write_text("bootstrap_reps: 200\nrerun_on_code_change: false\n")
    ok(snakemake(wf, "--cores", "2", "--configfile", "small.yaml"))
    out = ok(snakemake(wf, "-n", "--configfile", "small.yaml"))
    assert "Nothing to be done" in out and "code changed" not in out
    assert "code version unknown: 1 of 1 finished train_multi job output(s) record none in run.json" in out
    trainer_py = wf / "tdmpc2core/stages/train_single.py"
    trainer_py.write_text(trainer_py.read_text() + "\nCODE_VERSION_PROBE = 1\n")
    out = ok(snakemake(wf, "-n", "--configfile", "small.yaml"))
    assert "Nothing to be done" in out, out[-3000:]
    assert re.search(r"code changed: 4 of 4 finished train_single_seeds_0_1 job output\(s\) ran code version "
                     r"[0-9a-f]{16}, now [0-9a-f]{16} \(tdmpc2core.stages.train_single and its imports\); "
                     r"kept \(rerun_on_code_change: false\)", out), out[-3000:]

STOPPABLE_TRAINER = '''
"""Test stand-in for `tdmpc2 train-single` that stops as the real one does: chunks of
--max-chunk-seconds, SIGTERM/SIGINT handled by the real SignalStop (a checkpoint at the next
chunk boundary, exit 128 + the signal number), and a rerun resumes from the checkpoint (the
resumed session runs its remaining chunks without waiting)."""
import json, os, sys, time
from pathlib import Path
from tdmpc2core.io import attempts
from tdmpc2core.stages.resumable import SignalStop

CHUNKS = 600


def add_arguments(p):
    for a in ("--task", "--spec", "--outdir", "--checkpoint-dir"):
        p.add_argument(a, required=True)
    p.add_argument("--seeds", type=int, nargs="+", required=True)
    p.add_argument("--checkpoint-every", type=int, required=True)
    p.add_argument("--keep-checkpoints", type=int, required=True)
    p.add_argument("--max-chunk-seconds", type=float, required=True)
    p.add_argument("--logger", choices=["none"], required=True)  # the workflow's flags without a logger block
    p.add_argument("--devices", choices=["auto"], required=True)  # cluster.devices (issue 28)
    p.add_argument("--video", choices=["off", "last"], required=True)  # config `video` (issue 29)


def run(args):
    log = lambda m: print(f"[train-single {args.task}] {m}", file=sys.stderr, flush=True)
    ck = Path(args.checkpoint_dir)
    ck.mkdir(parents=True, exist_ok=True)
    state = ck / "state.json"
    step = json.loads(state.read_text())["step"] if state.exists() else 0
    resumed = step > 0
    # the handlers first: the test signals once this line is in the log
    with SignalStop(log, True) as stop:
        log(f"resumed from {state} at {step} agent steps" if resumed else "training starts")
        att = attempts.begin(ck, unit="agent steps", start_step=step)
        while step < CHUNKS:
            if not resumed:
                time.sleep(args.max_chunk_seconds)
            step += 1
            if stop.should_stop():
                state.write_text(json.dumps({"step": step}))
                log(f"stopped by {stop.name} at {step}/{CHUNKS} agent steps: checkpoint {state} (0.0 MB, 0.0 s); "
                    "rerun the same command to resume")
                att.end(f"stopped by {stop.name}", end_step=step,
                        stop=attempts.stop_record("signal", "agent steps", signal=stop.name, step=step,
                                                  total=CHUNKS, checkpoint=state))
                return stop.exit_code
    att.end("completed", end_step=CHUNKS)
    for s in args.seeds:
        d = Path(args.outdir) / f"seed{s}"
        d.mkdir(parents=True, exist_ok=True)
        for f in ("eval.parquet", "metrics.parquet", "episodes.parquet") + (
                ("video.mp4",) if args.video == "last" and s == args.seeds[0] else ()):
            (d / f).write_text("stand-in")
        (d / "run.json").write_text(json.dumps({"resumed_from": step if resumed else None}))
    log("done")
    return 0
'''


def _hung_run_report(smk: subprocess.Popen, logs, t0: float) -> str:
    """What a snakemake run that did not end after a stop signal was doing: its processes, the
    jobs' logs, and every thread's stack (its faulthandler, on SIGUSR1); then the run is killed."""
    import psutil

    lines = [f"snakemake did not end {time.time() - t0:.0f} s after the signal; its processes:"]
    with contextlib.suppress(psutil.Error):
        for p in [psutil.Process(smk.pid), *psutil.Process(smk.pid).children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                lines.append(f"  {p.pid} {p.status()} {' '.join(p.cmdline())[:300]}")
    for log in logs:
        lines.append(f"--- {log.name} ({log.parent.name}):\n" + (log.read_text()[-2000:] if log.exists() else "(none)"))
    with contextlib.suppress(OSError):
        os.kill(smk.pid, signal.SIGUSR1)
    time.sleep(2)
    with contextlib.suppress(OSError):
        os.killpg(smk.pid, signal.SIGKILL)
    lines.append("--- snakemake's output and stacks:\n" + smk.communicate()[0][-12000:])
    return "\n".join(lines)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_snakemake_alone_stops_training_with_a_checkpoint(tmp_path, sig):
    """A supervisor, a notebook or `kill` signals the snakemake process alone (not its process
    group): the running training jobs stop at their next chunk boundary with a checkpoint, the
    run ends with one line per stopped job (no tracebacks), and the same command resumes them."""
    wf = copy_workflow(tmp_path)
    shutil.copytree(ROOT / "tdmpc2core", wf / "tdmpc2core", ignore=shutil.ignore_patterns("__pycache__"))
    (wf / "tdmpc2core" / "stages" / "train_single.py").write_text(STOPPABLE_TRAINER)
    (wf / "s.yaml").write_text("seeds_per_job: 1\nmax_chunk_seconds: 0.2\n")
    args = ["--cores", "2", "--configfile=s.yaml",
            "results/single/pendulum/seed0/run.json", "results/single/cartpole-balance/seed0/run.json"]
    # snakemake with faulthandler on SIGUSR1: a run that does not end says where it waits
    cmd = [sys.executable, "-c", "import faulthandler, signal, sys; faulthandler.register(signal.SIGUSR1, "
           "all_threads=True); from snakemake.cli import main; sys.argv[0] = 'snakemake'; main()", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAKEMAKE")}
    logs = [wf / f"logs/train_single/{t}/seeds_0.log" for t in ("pendulum", "cartpole-balance")]
    # a session of its own, so that only the snakemake process is signalled
    smk = subprocess.Popen(cmd, cwd=wf, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    deadline = time.time() + 120
    while not all(p.exists() and "training starts" in p.read_text() for p in logs):
        assert time.time() < deadline and smk.poll() is None, smk.communicate()[0][-4000:]
        time.sleep(0.1)
    t0 = time.time()
    os.kill(smk.pid, sig)  # the snakemake process alone
    try:
        out = smk.communicate(timeout=120)[0]
    except subprocess.TimeoutExpired:
        pytest.fail(_hung_run_report(smk, logs, t0))
    cmd = [sys.executable, "-m", "snakemake", *args]
    # 600 chunks of 0.2 s were left: they stopped at the next boundary instead
    assert time.time() - t0 < 20, out[-4000:]
    assert smk.returncode != 0
    assert "Traceback" not in out and "RuntimeError" not in out and "RuleException" not in out, out[-4000:]
    for task, log in zip(("pendulum", "cartpole-balance"), logs):
        assert f"stopped by SIGTERM" in log.read_text()
        assert (wf / f"checkpoints/single/{task}/seeds_0/state.json").exists()
        assert re.search(rf"train_single_seeds_0 \(task {task}\): stopped at \d+/600 agent steps, checkpoint "
                         rf"checkpoints/single/{task}/seeds_0/state.json; run the same snakemake command to resume",
                         out), out[-4000:]
    assert out.index("Stopped 2 training job(s):") > out.index("Shutting down")  # the run's last lines
    assert not (wf / "results/single/pendulum/seed0/run.json").exists()
    # the same command resumes both jobs from their checkpoints
    res = subprocess.run(cmd, cwd=wf, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    for task, log in zip(("pendulum", "cartpole-balance"), logs):
        assert "resumed from" in log.read_text()
        assert json.loads((wf / f"results/single/{task}/seed0/run.json").read_text())["resumed_from"] == 600


# The pendulum job of the real runs below. tests/test_slurm.py's TINY has the same settings
# (the same compiled programs: whichever test compiles them first leaves them in the checkout's
# .jax_cache for the other); keep the two identical.
PREEMPT = """\
protocol: preempt
seeds: [0, 1]
seeds_per_job: 2
threads_per_job: 1
jax_cache_dir: {cache}
checkpoint_every: 100
keep_checkpoints: 2
max_chunk_seconds: 0.2
bootstrap_reps: 200
protocols:
  preempt:
    label: "Preemption test: NOT the paper's protocol"
    defaults:
      action_repeat: 1
      agent_steps: 700
      eval_every: 200
      eval_episodes: 2
      n_envs: 2
      agent: {{model_size: 1, mlp_dim: 32, latent_dim: 16, enc_dim: 32, num_samples: 16, num_elites: 4,
              num_pi_trajs: 2, iterations: 1, batch_size: 16, seed_steps: 400}}
      resources: {{gpu: 0, runtime: 30, mem_mb: 4000}}
    tasks:
      pendulum:
        env_id: Pendulum-v1
        published: null
        expected: null
"""

# what the tiny run adds to PREEMPT: an episodic task (Brax; it terminates when the pole
# falls; not pooled), a pool of the pendulum runs and a multi-task model trained on it
TINY_MORE = """\
label: "Tiny test run: NOT the paper's protocol"
tasks:
  inverted-pendulum:
    env_id: inverted_pendulum
    episode_length: 100
    agent_steps: 300
    eval_every: 300
    eval_episodes: 2
    n_envs: 2
    agent: {episodic: true, seed_steps: 100, mlp_dim: 32, latent_dim: 16, enc_dim: 32, num_samples: 16,
            batch_size: 16}
pools: {tiny: [pendulum]}
multitask:
  model_sizes: [1]
  updates: 4
  batch_size: 16
  eval_every: 2
  eval_episodes: 1
  agent: {mlp_dim: 32, latent_dim: 16, enc_dim: 32, num_samples: 16, num_elites: 4, num_pi_trajs: 2,
          iterations: 1, task_dim: 8}
"""


def tiny_config(cache: Path) -> str:
    """PREEMPT with TINY_MORE merged into its protocol (the pendulum job's settings untouched)."""
    cfg = yaml.safe_load(PREEMPT.format(cache=json.dumps(str(cache))))
    block, more = cfg["protocols"]["preempt"], yaml.safe_load(TINY_MORE)
    block["tasks"].update(more.pop("tasks"))
    block.update(more)
    return yaml.safe_dump(cfg, sort_keys=False)


def test_preempt_is_the_pendulum_job_of_test_slurm():
    """PREEMPT and tests/test_slurm.py's TINY train the same pendulum job (so the compiled
    programs are shared through the checkout's .jax_cache); only the cluster settings, the
    label, the resources and the pool differ."""
    from test_slurm import TINY as SLURM_TINY

    ours = yaml.safe_load(PREEMPT.format(cache='"c"'))
    theirs = yaml.safe_load(SLURM_TINY.format(cache='"c"'))
    (a,), (b,) = ours.pop("protocols").values(), theirs.pop("protocols").values()
    theirs.pop("cluster"), ours.pop("protocol"), theirs.pop("protocol")
    assert ours == theirs
    a["defaults"].pop("resources"), b["defaults"].pop("resources")
    assert a["defaults"] == b["defaults"] and a["tasks"] == b["tasks"]


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_TRAIN_SINGLE,
                    reason="tdmpc2core/stages/train_single.py (the lead's train-single stage) does not exist yet")
def test_real_tiny_run_produces_report(tmp_path):
    """The real stages end to end on a tiny configuration (PREEMPT's pendulum job, 2 seeds
    vmapped, plus an episodic Brax task, the pool and a multi-task model): the report, the
    tables, the datasets, the multi-task run. Its pendulum programs, left in the checkout's
    .jax_cache, are loaded by tests/test_slurm.py, which runs after it on the same worker
    (tests/conftest.py TOGETHER) and preempts and resumes this same job through Snakemake to
    the uninterrupted run's outputs. Stopping by a signal to Snakemake alone and resuming:
    test_signal_to_snakemake_alone_stops_training_with_a_checkpoint; a finished run's
    checkpoints cleared by a forced rerun ("starting over"), a stopped stage resumed to the
    whole run's numbers: tests/test_checkpoint.py."""
    import pandas as pd

    wf = copy_workflow(tmp_path)
    # the checkout's (git-ignored) compilation cache: compiling this run takes minutes on a
    # small CPU the first time, seconds afterwards
    (wf / "tiny.yaml").write_text(tiny_config(ROOT / ".jax_cache"))
    ok(snakemake(wf, "--cores", "2", "--configfile", "tiny.yaml", timeout=900))
    html = (wf / "results" / "report.html").read_text(encoding="utf-8")
    assert "Tiny test run" in html and "data:image/png;base64," in html
    assert "HIGHEST" in html  # the runs' matmul precision, from run.json
    # the evaluation videos (config `video: last`, the default): gymnax Pendulum drawn, Brax's
    # episodic inverted pendulum by mujoco.Renderer, the multi-task model on the pool's task
    assert html.count('<video class="evalvideo"') == 3, "3 videos expected"
    inv = json.loads((wf / "results/single/inverted-pendulum/seed0/run.json").read_text())["video"]
    assert inv["renderer"].startswith("mujoco.Renderer") and 1 <= inv["length"] <= 100
    assert (wf / "results/multi/tiny/size1/videos/pendulum.mp4").exists()
    assert "train_single/pendulum/seeds_0_1" in html  # the training job's benchmark
    assert (wf / "results/single/pendulum/seed0/run.json").exists()
    assert (wf / "results/tables/final_scores.csv").exists()
    # the real train-multi stage on the pool of that run: evaluations at 0, 2 and 4 updates;
    # Pendulum has no declared return range here, so no normalized score (and the report says so)

    # the pool the workflow predicted at load (its batch check) is the pool the runs exported:
    # 2 seeds x what one seed's replay holds at the end
    from tdmpc2core.model import config as C
    from tdmpc2core.dataset import load_dataset

    pool = load_dataset(wf / "results/datasets/pools/tiny.parquet")
    cfg = C.resolve_config(C.TDMPC2Config(model_size=1, seed_steps=400), episode_length=200, action_dim=1)
    assert pool.num_episodes == 2 * C.episodes_held_at_end(cfg, agent_steps=700, episode_length=200, n_envs=2) == 4
    run = json.loads((wf / "results/multi/tiny/size1/run.json").read_text())
    assert run["task_dim"] == 8 and run["gammas"] == {"pendulum": 0.975} and run["return_ranges"] == {"pendulum": None}
    ev = pd.read_parquet(wf / "results/multi/tiny/size1/eval.parquet")
    assert sorted(ev["updates"].unique()) == [0, 2, 4] and set(ev["task"]) == {"pendulum"}
    assert ev["length"].eq(200).all() and ev["normalized_score"].isna().all()
    assert 'id="multitask"' in html and "no declared return range" in html
    # the runtime table: one row per training job, the multi-task one included
    assert "pool tiny, model size 1" in html and html.count("<td>train-single</td>") == 2
    # the episodic task: termination loss logged, terminated episodes in its dataset, its
    # episode lengths beside its returns in a table and the report
    met = pd.read_parquet(wf / "results/single/inverted-pendulum/seed0/metrics.parquet")
    assert np.isfinite(met["termination_loss"].iloc[-1]) and "termination_loss" not in pd.read_parquet(
        wf / "results/single/pendulum/seed0/metrics.parquet").columns
    ds = load_dataset(wf / "results/datasets/tasks/inverted-pendulum.parquet")
    assert ds.terminated.sum() > 5 and ds.tasks[0].episode_length == 100
    lengths = pd.read_csv(wf / "results/tables/episode_lengths.csv")
    assert set(lengths["task"]) == {"inverted-pendulum"} and list(lengths["agent_steps"]) == [0, 300]
    assert lengths["length_mean"].between(1, 100).all()
    assert 'id="lengths"' in html


DMCONTROL_TINY = """\
protocol: dmc-tiny
seeds: [0, 1]
seeds_per_job: 2
threads_per_job: 1
jax_cache_dir: .jax_cache
checkpoint_every: 300
bootstrap_reps: 200
video: off  # dm_control rendering: tests/test_videos.py; the stage path: the tiny run above
protocols:
  dmc-tiny:
    label: "dm_control test run: NOT the paper's protocol"
    defaults:
      action_repeat: 2
      episode_length: 200
      agent_steps: 600
      eval_every: 300
      eval_episodes: 2
      n_envs: 2
      agent: {model_size: 1, mlp_dim: 32, latent_dim: 16, enc_dim: 32, num_samples: 16, num_elites: 4,
              num_pi_trajs: 2, iterations: 1, batch_size: 16, seed_steps: 200}
      resources: {gpu: 0, runtime: 30, mem_mb: 4000}
    tasks:
      cartpole-balance:
        env_id: dmc:cartpole-balance
        published: cartpole-balance
        expected: null
"""


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_TRAIN_SINGLE, reason="no train-single stage")
def test_real_dmcontrol_run_of_two_seeds_produces_report(tmp_path):
    """Two seeds on dm_control itself through the whole pipeline (training with the
    host-stepped simulator, checkpoints every 300 agent steps, export, tables, figures,
    report): 600 agent steps each, the 200 of the seed phase (two episodes per environment),
    the burst of updates, then planning and updating; and the user-facing
    dmcontrol-smoke.yaml plans."""
    import pandas as pd

    wf = copy_workflow(tmp_path)
    plan = ok(snakemake(wf, "-n", "--cores", "2", "--configfile", "workflow/configs/dmcontrol-smoke.yaml"))
    assert job_stats(plan)["train_single_seeds_0_1"] == 1
    (wf / "dmc.yaml").write_text(DMCONTROL_TINY)
    ok(snakemake(wf, "--cores", "2", "--configfile", "dmc.yaml", timeout=1500))
    for seed in (0, 1):
        run = wf / "results/single/cartpole-balance" / f"seed{seed}"
        ev = pd.read_parquet(run / "eval.parquet")
        assert sorted(ev["agent_steps"].unique()) == [0, 300, 600] and ev["length"].eq(100).all()
        assert ev["return"].between(0, 200).all()
        info = json.loads((run / "run.json").read_text())
        assert "dm-control" in json.dumps(info)
    # the reproduction's results rows (benchmarks/reproduction.py, issue 45) from these real runs
    from tdmpc2core.io.reproduction import rows_from_runs
    from tdmpc2core.pipeline.codeversion import code_version

    # the copy has no .git: no commit recorded; "a" * 40 names them as this code's (same code version)
    rows, _ = rows_from_runs(wf / "results/single/cartpole-balance", "cartpole-balance", [0, 1], commit="a" * 40,
                             code_version=code_version("train_single"))
    assert set(rows["commit"]) == {"a" * 40}
    assert len(rows) == 6 and sorted(set(rows["env_steps"])) == [0, 600, 1200] and (rows["eval_episodes"] == 2).all()
    assert set(rows["device"]) == {"cpu"} and set(rows["precision"]) == {"highest"} and set(rows["model_size"]) == {1}
    ev = pd.read_parquet(wf / "results/single/cartpole-balance/seed1/eval.parquet")
    assert np.isclose(rows[(rows["seed"] == 1) & (rows["agent_steps"] == 300)]["eval_return"].item(),
                      ev[ev["agent_steps"] == 300]["return"].mean())
    from tdmpc2core.dataset import load_dataset

    ds = load_dataset(wf / "results/datasets/tasks/cartpole-balance.parquet")
    assert ds.tasks[0].episode_length == 100 and not ds.terminated.any()
    html = (wf / "results" / "report.html").read_text(encoding="utf-8")
    banner = html.split('<div class="banner', 1)[1].split("</div>", 1)[0]
    assert "Simulator: dm_control" in banner and "like for like" in html


def test_slurm_profile_and_conda_env():
    from snakemake.cli import get_argument_parser

    profile = yaml.safe_load((ROOT / "workflow/profiles/slurm/config.yaml").read_text())
    options = {s for a in get_argument_parser()._actions for s in a.option_strings}
    unknown = [k for k in profile if f"--{k}" not in options]
    assert not unknown, f"not snakemake options: {unknown}"
    assert profile["executor"] == "slurm"
    # nothing a training job needs lives in default-resources (a --default-resources on the
    # command line replaces that list): the rules set gpu, runtime, mem_mb and slurm_extra
    res = profile["default-resources"]
    assert "gpu" not in res and "slurm_extra" not in res and "slurm_account" not in res
    assert profile["rerun-incomplete"] is True and profile["retries"] >= 1 and profile["latency-wait"] > 0
    # a workflow/profiles/default/ would be loaded silently on every run
    assert not (ROOT / "workflow/profiles/default").exists()
    env = yaml.safe_load((ROOT / "envs/tdmpc2.yaml").read_text())
    pip = [d for d in env["dependencies"] if isinstance(d, dict)][0]["pip"]
    assert "-e .." in pip


# --------------------------------------------------------------------------- SLURM, lint, envs
def no_jax_env(tmp_path: Path) -> dict:
    """An environment in which importing jax (jaxlib, flax, optax) fails, as on a login node."""
    nojax = tmp_path / "nojax"
    for mod in ("jax", "jaxlib", "flax", "optax"):
        (nojax / mod).mkdir(parents=True, exist_ok=True)
        (nojax / mod / "__init__.py").write_text(f'raise ImportError("{mod} is not installed here (test stand-in)")\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAKEMAKE")}
    env["PYTHONPATH"] = os.pathsep.join([str(nojax), str(ROOT)])  # this checkout's library, whichever is installed
    return env


def job_resources(out: str) -> dict[str, list[dict[str, str]]]:
    """rule -> the `resources:` of each of its jobs in a dry run's output."""
    found = {}
    for block in re.split(r"\n(?=(?:local)?rule \S+:)", out):
        m = re.match(r"(?:local)?rule (\S+):", block.strip())
        r = re.search(r"^\s+resources: (.*)$", block, re.M)
        if m and r:
            found.setdefault(m.group(1), []).append(dict(kv.split("=", 1) for kv in re.split(r", (?=\w+=)", r.group(1))))
    return found


def test_slurm_profile_dry_run_needs_no_jax_and_keeps_the_rules_resources(tmp_path):
    """`snakemake -n --workflow-profile workflow/profiles/slurm` on a login node without JAX
    plans the paper DAG; every training job asks for the config's GPU, memory and a time
    limit of at most cluster.max_job_minutes (the 7-day multi-task runs: 24 h jobs), with the
    SIGTERM lead; and a --default-resources on the command line, which replaces the profile's
    list, changes none of that."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    wf = copy_workflow(tmp_path)
    env = no_jax_env(tmp_path)

    def dry(*args):
        res = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--workflow-profile", "workflow/profiles/slurm",
                              "--configfile", PAPER, *args], cwd=wf, capture_output=True, text=True, timeout=600,
                             env=env)
        return ok(res)

    for extra in ((), ("--default-resources", "slurm_partition=gpu")):
        out = dry(*extra)
        assert "ImportError" not in out and job_stats(out)["total"] == 79
        res = job_resources(out)
        single, multi = res["train_single_seeds_0_1_2"], res["train_multi"]
        assert len(single) == 22 and len(multi) == 5
        for r in single + multi:
            assert r["gpu"] == "1" and r["slurm_extra"] == "--signal=TERM@300", r
            assert "XLA_PYTHON_CLIENT_MEM_FRACTION=0.75" in r["jax_env"] and "JAX_PLATFORMS" not in r["jax_env"]
        # paper runtimes: 24 h, 72 h (humanoid), 7 days (multi-task); jobs of at most 24 h
        assert {r["runtime"] for r in single + multi} == {"1440"}
        assert {r["mem_mb"] for r in single} == {"32000"}
        if extra:
            assert all(r.get("slurm_partition") == "gpu" for r in single + multi)


def test_only_training_rules_are_submitted(tmp_path):
    """Every rule but the training ones is a local rule (on a cluster it runs in the snakemake
    process), for the demo and the paper configuration (the workflow loaded in this process)."""
    wf = copy_workflow(tmp_path)
    for args in ((), (PAPER,)):
        with workflow_api(wf, *args) as api:
            api.dag()  # loads the workflow
            workflow = api._workflow
            submitted = sorted(r.name for r in workflow.rules if r.name not in workflow._localrules and not r.norun)
        assert submitted == ["train_multi"] + sorted(r for r in submitted if r.startswith("train_single_")), submitted
        assert len(submitted) == 2


def test_lint_and_format(capsys):
    """`snakemake --lint` finds nothing (demo and paper configuration; Snakemake's linter run in
    this process, its findings as JSON) and the Snakefile and workflow/ are formatted with
    snakefmt."""
    for args in ((), (PAPER,)):
        capsys.readouterr()
        with workflow_api(ROOT, *args) as api:
            linted = api.lint(json=True)
        lints = json.loads(capsys.readouterr().out)
        assert not linted and lints == {"snakefiles": [], "rules": []}, lints
    res = subprocess.run([sys.executable, "-m", "snakefmt", "--check", "Snakefile", "workflow"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


def _pyproject_pins() -> dict[str, str]:
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = list(meta["dependencies"])
    pins = {}
    for d in deps:
        name = re.match(r"[A-Za-z0-9_.\-]+(\[[^\]]*\])?", d).group(0)
        pins[re.sub(r"\[.*\]", "", name).lower()] = d[len(name):].strip()
    return pins


def test_conda_envs_agree_with_pyproject():
    """envs/*.yaml (the rules' `conda:` environments) pin what pyproject.toml pins, textually
    (no conda channel is reachable here): the same Python and every dependency with the same
    specifier."""
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _pyproject_pins()
    envs = sorted((ROOT / "envs").glob("*.yaml"))
    used = set()
    for rule_file in [ROOT / "Snakefile", *(ROOT / "workflow/rules").glob("*.smk")]:
        used |= {Path(m).name for m in re.findall(r"envs/([\w.-]+\.yaml)", rule_file.read_text())}
    assert used and used <= {e.name for e in envs}, (used, envs)
    for path in envs:
        env = yaml.safe_load(path.read_text())
        conda = [d for d in env["dependencies"] if isinstance(d, str)]
        pip = [d for d in env["dependencies"] if isinstance(d, dict)][0]["pip"]
        py = next(d for d in conda if d.startswith("python"))
        assert meta["requires-python"] == ">=3.10" and py == "python=3.11", py  # the tested Python
        listed = {}
        for line in pip:
            m = re.match(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?(.*)", line)
            if m and not line.startswith("-"):
                listed[m.group(1).lower()] = m.group(3).strip()
        assert listed == pins, {k: (listed.get(k), pins.get(k)) for k in set(listed) | set(pins)
                                if listed.get(k) != pins.get(k)}
        assert "-e .." in pip


CACHE_PROGRAM = '''
import logging, os, sys, time
while not os.path.exists(sys.argv[1]):  # start together
    time.sleep(0.01)
import jax, jax.numpy as jnp
logging.basicConfig(level=logging.WARNING)
logging.getLogger("jax._src.compiler").setLevel(logging.DEBUG)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # cache every program
total = 0.0
for n in range(1, 13):
    total += float(jax.jit(lambda x, n=n: jnp.tanh(x @ x.T * n).sum() + jnp.sin(x).mean())(jnp.ones((n, 8))))
print("result", total)
'''


def test_compilation_cache_shared_by_concurrent_jobs(tmp_path, demo_plan_one_core):
    """Two processes with the training jobs' JAX settings (from the rule's shell command)
    compile the same programs at the same moment into one empty cache folder: both succeed,
    with no error reading or writing an entry; a third process then finds every program in
    the cache."""
    exports = re.search(r"export (PJRT_NPROC=[^;]*);", demo_plan_one_core).group(1)
    assert "JAX_COMPILATION_CACHE_MAX_SIZE=" in exports  # the size limit turns JAX's entry lock on
    cache, go = tmp_path / "cache", tmp_path / "go"
    exports = re.sub(r"JAX_COMPILATION_CACHE_DIR=\S+", f"JAX_COMPILATION_CACHE_DIR={cache}", exports)
    (tmp_path / "prog.py").write_text(CACHE_PROGRAM)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SNAKEMAKE", "JAX_", "XLA_"))}

    def start(barrier):
        return subprocess.Popen(["bash", "-c", f"export {exports}; exec {sys.executable} prog.py {barrier}"],
                                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    pair = [start(go), start(go)]
    time.sleep(2.0)
    go.touch()
    outs = [p.communicate(timeout=600)[0] for p in pair]
    for p, text in zip(pair, outs):
        assert p.returncode == 0, text[-3000:]
        assert "Error reading persistent compilation cache" not in text and "Error writing" not in text, text[-3000:]
    assert len({re.search(r"result (\S+)", t).group(1) for t in outs}) == 1
    assert (cache / ".lockfile").exists()  # JAX's entry lock was used
    later = start(go)
    text = later.communicate(timeout=600)[0]
    assert later.returncode == 0, text[-3000:]
    lambdas = re.findall(r"PERSISTENT COMPILATION CACHE (HIT|MISS) for 'jit__lambda'", text, re.I)
    assert len(lambdas) == 12 and all(x.upper() == "HIT" for x in lambdas), lambdas
