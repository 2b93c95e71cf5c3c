"""docs/architecture.md's "Extending" recipes, followed: a suite of your own and a logger kind of
your own, each one module whose text is the recipe's code block in the docs. The test writes
that block to a file (the one file the recipe touches), imports it, and takes the new suite or
kind through the library and a dry run of the workflow (``snakemake -n``, Snakemake's API in this
process, where the module registered it), as a user following the docs would.
"""
from __future__ import annotations

import importlib
import json
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "architecture.md"


def recipe(first_line: str) -> str:
    """The Python code block of docs/architecture.md whose first line is ``first_line``."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)
    found = [b for b in blocks if b.splitlines()[0].strip() == first_line]
    assert len(found) == 1, f"docs/architecture.md: no (or more than one) recipe starting {first_line!r}"
    return found[0]


@contextmanager
def one_module(tmp_path: Path, name: str, first_line: str):
    """The recipe written to ``tmp_path/<name>.py`` and imported (the module registers itself);
    the registration undone afterwards (other test files share the process)."""
    (tmp_path / f"{name}.py").write_text(recipe(first_line))
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def dry_run(tmp_path: Path, capsys, settings: dict) -> str:
    """The plan of ``snakemake -n -p`` on a copy of the workflow with ``settings`` as a
    --configfile, in this process (what the registered suite or kind is visible to)."""
    import shutil

    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    wf = tmp_path / "wf"
    wf.mkdir()
    for name in ("Snakefile", "config.yaml"):
        shutil.copy2(ROOT / name, wf / name)
    for name in ("workflow", "envs"):
        shutil.copytree(ROOT / name, wf / name)
    (wf / "extra.yaml").write_text(yaml.safe_dump(settings))
    cwd = os.getcwd()
    os.chdir(wf)
    capsys.readouterr()
    try:
        with SnakemakeApi(OutputSettings(printshellcmds=True)) as api:
            api.workflow(resource_settings=ResourceSettings(cores=1), snakefile=wf / "Snakefile", workdir=wf,
                         config_settings=ConfigSettings(configfiles=[Path("extra.yaml")])
                         ).dag().execute_workflow(executor="local", pseudo_executor="dryrun")
    finally:
        os.chdir(cwd)
    out = capsys.readouterr()
    return out.out + out.err


# --------------------------------------------------------------------------- a suite
def test_a_suite_of_your_own_is_one_module(tmp_path, capsys):
    import jax

    from tdmpc2core.envs import list_env_ids, make_env, registry, time_limit

    with one_module(tmp_path, "toy_suite", "# toy_suite.py: a suite of your own, one module") as mod:
        try:
            suite = mod.SUITE
            env_id = suite.ids[0]
            # the library: the registry dispatches the id; the env steps (its build imports JAX)
            assert list_env_ids()[suite.name] == [env_id] and time_limit(env_id, episode_length=40) == 40
            env = make_env(env_id, episode_length=40)
            state, obs = env.reset(jax.random.PRNGKey(0))
            state, out = env.step(state, jax.numpy.ones((1,)), jax.random.PRNGKey(1))
            assert env.spec.suite == suite.name and obs.shape == (env.spec.obs_dim,) and 0 <= float(out.reward) <= 1
            # the workflow: a protocol of the new suite's task plans its training job
            plan = dry_run(tmp_path, capsys, {"protocol": "toy", "video": "off", "protocols": {"toy": {
                "label": "toy", "tasks": {"toy": {
                    "env_id": env_id, "episode_length": 40, "agent_steps": 2000, "eval_every": 1000,
                    "eval_episodes": 1, "resources": {"gpu": 0, "runtime": 5, "mem_mb": 1000},
                    "agent": {"model_size": 1, "horizon": 3, "batch_size": 16}}}}}})
            assert "rule train_single_seeds_0_1:" in plan and "wildcards: task=toy" in plan
            spec = json.loads(re.search(r"train-single --task toy --spec '([^']*)'", plan).group(1))
            assert spec["env_id"] == env_id and spec["action_repeat"] == suite.default_action_repeat
        finally:
            registry.unregister_suite(mod.SUITE.name)


# --------------------------------------------------------------------------- a logger
def test_a_logger_kind_of_your_own_is_one_module(tmp_path, capsys):
    import argparse

    from tdmpc2core.io import loggers
    from tdmpc2core.pipeline.config import resolve
    from tdmpc2core.stages import resumable, train_single

    with one_module(tmp_path, "toy_logger", "# toy_logger.py: a logger kind of your own, one module") as mod:
        kind = mod.KIND.name
        try:
            assert kind in loggers.logger_kinds()
            # the library: the reference API's LoggingConfig builds it where its kind says
            (lg,) = loggers.LoggingConfig(kind=kind, dir=str(tmp_path / "runs")).make_loggers("Pendulum-v1")
            lg.log(10, {"Eval/episodic mean reward": 1.5})
            lg.close()
            assert json.loads((tmp_path / "runs" / f"Pendulum-v1.{kind}").read_text()) == {
                "step": 10, "Eval/episodic mean reward": 1.5}
            # a training stage: --logger takes the kind, job_loggers builds it where its kind says
            parser = argparse.ArgumentParser()
            train_single.add_arguments(parser)
            args = parser.parse_args(["--task", "pendulum", "--spec", "{}", "--seeds", "0", "1", "--outdir", "o",
                                      "--logger", kind, "--logger-dir", str(tmp_path / "logs")])
            (job,) = resumable.job_loggers(args, print, "single/pendulum", "pendulum", [0, 1], dict)
            assert job.path == tmp_path / "logs" / "single" / "pendulum" / f"seeds_0_1.{kind}"
            # the workflow: the configuration accepts the kind, every training job gets its flags
            config = yaml.safe_load((ROOT / "config.yaml").read_text())
            assert resolve({**config, "logger": {"kind": kind}}).logger_flags().startswith(f"--logger {kind} ")
            plan = dry_run(tmp_path, capsys, {"logger": {"kind": kind}})
            jobs = re.findall(r"train-(?:single|multi) .*", plan)
            assert len(jobs) == 3 and all(f"--logger {kind} --logger-dir logs/metrics" in j for j in jobs), jobs
        finally:
            loggers.unregister_logger_kind(kind)
