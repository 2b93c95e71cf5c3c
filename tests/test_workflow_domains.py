"""The Meta-World / MyoSuite configurations of issue 27 (workflow/configs/paper-metaworld.yaml,
paper-myosuite.yaml, paper-all.yaml, metaworld-smoke.yaml, myosuite-smoke.yaml).

Their shape (the schema, the task lists, the paper's budget and model, the expected bands
from the published success curves) is checked here on the files alone. Resolving them and
their dry runs need the suites that own the ``mw-*`` / ``myo-*`` env ids: those tests skip,
naming the missing ids, until the suites are registered, and run by themselves once they are
(tests/test_workflow.py ``needs_suites``).
"""
from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from tdmpc2core.report import published as P
from tdmpc2core.resources import official_task_sets
from test_workflow import copy_workflow, job_resources, needs_suites, no_jax_env, ok, shell_specs

ROOT = Path(__file__).resolve().parents[1]
MW, MYO, ALL = ("workflow/configs/paper-metaworld.yaml", "workflow/configs/paper-myosuite.yaml",
                "workflow/configs/paper-all.yaml")
SMOKE = ("workflow/configs/metaworld-smoke.yaml", "workflow/configs/myosuite-smoke.yaml")
DMC = "workflow/configs/paper-dmc-dmcontrol.yaml"
MW_TASKS = [r["name"] for r in official_task_sets()["mt80"] if r["domain"] == "metaworld"]
MYO_TASKS = ["myo-reach", "myo-reach-hard", "myo-pose", "myo-pose-hard", "myo-obj-hold", "myo-obj-hold-hard",
             "myo-key-turn", "myo-key-turn-hard", "myo-pen-twirl", "myo-pen-twirl-hard"]
SCHEMA = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())


def load(path: str) -> dict:
    return yaml.safe_load((ROOT / path).read_text())


def settings(block: dict, task: str) -> dict:
    """A task's settings over its protocol's defaults (the keys this file checks)."""
    return {**block.get("defaults", {}), **block["tasks"][task]}


def band(ptask: str) -> tuple[float, float, int]:
    """The published TD-MPC2 band (mean ± 1 sd, in the score's unit) at the curve's last point
    (as paper-dmc.yaml's), for a success curve the last point every published seed reaches,
    and that agent step."""
    c = P.score_curve(ptask)
    if P.score_kind(ptask) == "success":
        c = c[c["n_seeds"] == c["n_seeds"].max()]
    last = c.iloc[-1]
    return float(last["mean"] - last["sd"]), float(last["mean"] + last["sd"]), int(last["agent_steps"])


def check_expected(task: str, t: dict) -> None:
    lo, hi, _ = band(t["published"])
    if P.score_kind(t["published"]) == "success":
        lo, hi = max(lo, 0.0), min(hi, 100.0)
    assert lo - 0.1 - 1e-9 <= t["expected"]["mean_min"] <= lo + 1e-9, task
    assert hi - 1e-9 <= t["expected"]["mean_max"] <= hi + 0.1 + 1e-9, task


# --------------------------------------------------------------------------- the files alone
def test_domain_configs_are_the_papers_protocols():
    """Schema-valid on their own; Meta-World: the 50 mt80 names, action repeat 2, 100 agent
    steps, 1M agent steps (2M env frames, the published curves' length); MyoSuite: the 10
    official ids against their myo-hand-* curves, no repeat, 2M agent steps; the 5M model,
    3 seeds, evaluation every 50k agent steps with 10 episodes; expected: the published band
    in percent."""
    for path in (MW, MYO, ALL, *SMOKE):
        jsonschema.Draft202012Validator(SCHEMA).validate(load(path))
    for path, names, repeat, length, steps, pub in (
            (MW, MW_TASKS, 2, 200, 1_000_000, lambda t: t),
            (MYO, MYO_TASKS, 1, 100, 2_000_000, lambda t: "myo-hand-" + t[len("myo-"):])):
        cfg = load(path)
        block = cfg["protocols"][cfg["protocol"]]
        assert list(block["tasks"]) == names and cfg["seeds"] == [0, 1, 2] and cfg["seeds_per_job"] == 3
        d = block["defaults"]
        assert (d["action_repeat"], d["episode_length"], d["agent_steps"]) == (repeat, length, steps), path
        assert (d["eval_every"], d["eval_episodes"], d["agent"]) == (50_000, 10, {"model_size": 5}), path
        for task, t in block["tasks"].items():
            assert t["env_id"] == task and t["published"] == pub(task), task
            assert P.score_kind(t["published"]) == "success" and "agent_steps" not in t
            check_expected(task, t)
        # the published curves end where the budget does (MyoSuite: some seeds stop at 1.95M)
        assert max(P.score_curve(pub(names[0]))["agent_steps"]) == steps


def test_paper_all_is_the_three_domains_with_their_own_protocols():
    """99 tasks: paper-dmc-dmcontrol.yaml's settings for its 22, the other 17 DMControl tasks
    with a published curve (the three-link reachers too), and the Meta-World and MyoSuite tasks
    with their configurations' settings; no ManiSkill2 task."""
    cfg = load(ALL)
    block = cfg["protocols"]["paper"]
    dmc = [t for t in block["tasks"] if block["tasks"][t]["env_id"].startswith("dmc:")]
    assert len(block["tasks"]) == 99 and len(dmc) == 39
    assert set(dmc) == set(P.dmc_tasks()) and {"reacher-three-easy", "reacher-three-hard"} <= set(dmc)
    assert list(block["tasks"])[39:] == MW_TASKS + MYO_TASKS
    assert not {"lift-cube", "pick-cube", "pick-ycb", "stack-cube", "turn-faucet"} & set(block["tasks"])
    assert "ManiSkill2" in (ROOT / ALL).read_text() and "ManiSkill2" in block["label"]
    ref = {p: load(p)["protocols"]["paper"] for p in (DMC, MW, MYO)}
    keys = ("env_id", "action_repeat", "episode_length", "agent_steps", "eval_every", "eval_episodes", "agent",
            "published", "expected")
    for task in block["tasks"]:
        src = next((b for b in ref.values() if task in b["tasks"]), None)
        mine = settings(block, task)
        if src is None:  # a DMControl task beyond paper-dmc-dmcontrol's 22
            lo, hi, last = band(task)
            assert mine["agent_steps"] == last and mine["env_id"] == f"dmc:{task}", task
            check_expected(task, mine)
            continue
        theirs = settings(src, task)
        assert {k: mine.get(k) for k in keys} == {k: theirs.get(k) for k in keys}, task


# --------------------------------------------------------------------------- with the suites
@pytest.mark.parametrize("path", [pytest.param(p, marks=needs_suites(p)) for p in (MW, MYO, ALL, *SMOKE)])
def test_domain_configs_resolve(path):
    """The workflow's configuration check (tdmpc2core.pipeline.config.resolve, no Snakemake)
    accepts each file over config.yaml, as --configfile merges it."""
    from test_pipeline_config import merged

    from tdmpc2core.pipeline.config import resolve

    p = resolve(merged((ROOT / path).read_text()))
    resolved = yaml.safe_load(p.resolved_yaml)
    assert set(resolved["tasks"]) == set(load(path)["protocols"][load(path)["protocol"]]["tasks"])


def recorded_plan(path: str) -> str:
    """The recorded dry-run plan of ``path`` (tests/fixtures/dryrun/<name>.txt), which
    tests/test_workflow.py::test_dry_run_plans_are_recorded compares with a real `snakemake -n
    -p` of the file: read here instead of planning again (each plan costs a Snakemake start)."""
    record = ROOT / "tests" / "fixtures" / "dryrun" / (Path(path).stem + ".txt")
    if not record.exists():
        pytest.skip(f"no recorded plan {record.relative_to(ROOT)} yet: once the suites are registered, record it "
                    "with TDMPC2_RECORD_DRYRUN=1 pytest tests/test_workflow.py -k test_dry_run_plans_are_recorded")
    return record.read_text()


@pytest.mark.parametrize("path,n_tasks,seeds", [pytest.param(p, n, s, marks=needs_suites(p)) for p, n, s in (
    (MW, 50, "0 1 2"), (MYO, 10, "0 1 2"), (ALL, 99, "0 1 2"), (SMOKE[0], 1, "0 1"), (SMOKE[1], 1, "0 1"))])
def test_domain_dry_runs_plan_every_task(path, n_tasks, seeds):
    """The plan has one training job per task (the seeds vmapped in it), each with its domain's
    protocol, and the tables, figures and report after them."""
    plan = recorded_plan(path)
    rule = "train_single_seeds_" + seeds.replace(" ", "_")
    assert len(re.findall(rf"^rule {rule}:", plan, re.M)) == n_tasks
    assert re.search(r"^(local)?rule report:", plan, re.M) and re.search(r"^(local)?rule tables:", plan, re.M)
    specs = shell_specs(plan)
    assert len(specs) == n_tasks
    for task, (spec, job_seeds) in specs.items():
        assert job_seeds == seeds, task
        if path in (MW, MYO, ALL):
            assert spec["agent"] == {"model_size": 5}, task
        if task.startswith("mw-"):
            assert (spec["action_repeat"], spec["episode_length"]) == (2, 200), task
            assert spec["agent_steps"] == (1_000_000 if path != SMOKE[0] else 2000), task
        elif task.startswith("myo-"):
            assert (spec["action_repeat"], spec["episode_length"]) == (1, 100), task
            assert spec["agent_steps"] == (2_000_000 if path != SMOKE[1] else 2000), task


@pytest.mark.parametrize("path", [pytest.param(ALL, marks=needs_suites(ALL))])
def test_paper_all_passes_the_slurm_profile_without_jax(tmp_path, path):
    """The SLURM profile's dry run on a login node without JAX plans every task of paper-all,
    each training job with a GPU and a time limit of at most cluster.max_job_minutes."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    import subprocess
    import sys

    wf = copy_workflow(tmp_path)
    res = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--workflow-profile", "workflow/profiles/slurm",
                          "--configfile", path], cwd=wf, capture_output=True, text=True, timeout=600,
                         env=no_jax_env(tmp_path))
    out = ok(res)
    assert "ImportError" not in out
    single = job_resources(out)["train_single_seeds_0_1_2"]
    assert len(single) == 99 and all(r["gpu"] == "1" and int(r["runtime"]) <= 1440 for r in single)
    # no job of a ManiSkill2 task (the label names ManiSkill2 as left out, so look for its tasks)
    assert not re.search(r"\b(lift-cube|pick-cube|pick-ycb|stack-cube|turn-faucet)\b", out)
