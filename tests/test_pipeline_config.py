"""tdmpc2core.pipeline: the workflow's configuration checks, code versions, cluster arithmetic,
the line counter and the dry-run normaliser, called directly (no Snakemake load; milliseconds).

tests/test_workflow.py checks the same refusals end to end through `snakemake -n` for a few
of them, and that the planned jobs of every configuration match the recorded plans.
"""
from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from tdmpc2core.pipeline import codeversion
from tdmpc2core.pipeline.cluster import JAX_CACHE_MAX_BYTES
from tdmpc2core.pipeline.config import ConfigError, resolve, seed_tag
from tdmpc2core.pipeline.dryrun import normalise_dry_run
from tdmpc2core.pipeline.lines import python_lines, workflow_python_lines
from tdmpc2core.pipeline.schema import config_error_line

ROOT = Path(__file__).resolve().parents[1]
DEMO = yaml.safe_load((ROOT / "config.yaml").read_text())
SCHEMA = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())


def merged(*texts: str, **top) -> dict:
    """config.yaml with each YAML text merged over it key by key (as Snakemake merges
    --configfile files), then the top-level ``top`` values (as --config)."""
    def update(base, over):
        for k, v in over.items():
            base[k] = update(base.get(k, {}), v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
        return base

    config = copy.deepcopy(DEMO)
    for text in texts:
        update(config, yaml.safe_load(text))
    return update(config, top)


def refusal(*texts: str, **top) -> str:
    with pytest.raises(ConfigError) as e:
        resolve(merged(*texts, **top))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(("config: ", "code version: ")), msg
    return msg


# --------------------------------------------------------------------------- resolve
def test_a_task_may_have_its_own_seeds_per_job():
    """``seeds_per_job`` under a task (or a protocol's defaults) splits that task's seeds into
    jobs of its own size: one rule per seed group, each training the tasks that have its group;
    the spec (a rerun trigger) is the same; the videos and run records follow the groups."""
    p = resolve(merged("video: last\nprotocols: {demo: {tasks: {cartpole-balance: {seeds_per_job: 1}}}}"))
    assert p.task_seed_groups("pendulum") == [(0, 1)] and p.task_seed_groups("cartpole-balance") == [(0,), (1,)]
    assert [(n, g) for n, g, _ in p.train_rules()] == [
        ("train_single_seeds_0_1", (0, 1)), ("train_single_seeds_0", (0,)), ("train_single_seeds_1", (1,))]
    assert p.task_pattern(False, (0, 1)) == "pendulum" and p.task_pattern(False, (1,)) == r"cartpole\-balance"
    assert p.task_pattern(False) == r"pendulum|cartpole\-balance"
    assert p.video_files() == ["results/single/pendulum/seed0/video.mp4", "results/single/cartpole-balance/seed0/video.mp4",
                               "results/single/cartpole-balance/seed1/video.mp4"]
    assert p.run_records()["train_single_seeds_1"] == ("train_single", ["results/single/cartpole-balance/seed1/run.json"])
    assert p.long_runs()["train_single_seeds_0"] == p.tasks["cartpole-balance"]["resources"]["runtime"]
    assert p.task_spec("cartpole-balance") == resolve(merged()).task_spec("cartpole-balance")
    everyone = resolve(merged("protocols: {demo: {defaults: {seeds_per_job: 2}}}", seeds_per_job=1))
    assert [n for n, _, _ in everyone.train_rules()] == ["train_single_seeds_0_1"]  # the defaults' key wins
    from tdmpc2core.pipeline.config import load_workflow_config

    with pytest.raises(ConfigError, match=r"^config: protocols\.demo\.tasks\.pendulum\.seeds_per_job: 0 is less than "
                                          r"the minimum of 1$"):
        load_workflow_config(["config.yaml"], root=ROOT,
                             overrides={"protocols": {"demo": {"tasks": {"pendulum": {"seeds_per_job": 0}}}}})


def test_a_task_may_name_its_seed_groups():
    """``seed_groups`` under a task names each of its jobs' seeds (a grouping ``seeds_per_job``
    cannot give: seed 0 alone, 1 and 2 vmapped); it comes before the defaults' seeds_per_job;
    groups that do not join into the top-level seeds, in order, are refused with the key named."""
    three = "seeds: [0, 1, 2]\nseeds_per_job: 3\n"
    p = resolve(merged(three + "protocols: {demo: {tasks: {cartpole-balance: {seed_groups: [[0], [1, 2]]}}}}"))
    assert p.task_seed_groups("cartpole-balance") == [(0,), (1, 2)] and p.task_seed_groups("pendulum") == [(0, 1, 2)]
    assert [(n, g) for n, g, _ in p.train_rules()] == [
        ("train_single_seeds_0_1_2", (0, 1, 2)), ("train_single_seeds_0", (0,)), ("train_single_seeds_1_2", (1, 2))]
    assert p.task_pattern(False, (1, 2)) == r"cartpole\-balance"
    assert p.task_spec("cartpole-balance") == resolve(merged(three)).task_spec("cartpole-balance")
    over = resolve(merged(three + "protocols: {demo: {defaults: {seeds_per_job: 1}, "
                                  "tasks: {pendulum: {seed_groups: [[0, 1], [2]]}}}}"))
    assert over.task_seed_groups("pendulum") == [(0, 1), (2,)] and over.task_seed_groups("cartpole-balance") == [
        (0,), (1,), (2,)]
    for bad, why in (("[[0], [2, 1]]", "(out of order)"), ("[[0, 1]]", "(seed(s) [2] are in no group)"),
                     ("[[0], [1], [1, 2]]", "(seed(s) [1] are in more than one group)"), ("[[0], []]", ""),
                     ("[[0], [1, 2, 3]]", "(seed(s) [3] are not among the top-level seeds)")):
        msg = refusal(three + f"protocols: {{demo: {{tasks: {{pendulum: {{seed_groups: {bad}}}}}}}}}")
        assert msg.startswith("config: protocols.demo.tasks.pendulum.seed_groups: ") and "[0, 1, 2]" in msg, msg
        assert why in msg, msg
    msg = refusal(three + "protocols: {demo: {tasks: {pendulum: {seed_groups: [[0, 1, 2]], seeds_per_job: 1}}}}")
    assert "seeds_per_job or seed_groups, not both" in msg


def test_demo_resolves():
    p = resolve(merged())
    assert p.protocol_name == "demo" and list(p.tasks) == ["pendulum", "cartpole-balance"]
    assert p.seed_groups == [(0, 1)] and seed_tag(p.seed_groups[0]) == "seeds_0_1"
    assert p.task_T == {"pendulum": 200, "cartpole-balance": 500}
    assert json.loads(p.task_spec("cartpole-balance")) == {
        "action_repeat": 2, "agent_steps": 10000, "allow_evicted": False, "env_id": "CartpoleBalance",
        "episode_length": 1000, "eval_episodes": 5, "eval_every": 2500,
        "agent": {"batch_size": 64, "enc_dim": 128, "iterations": 2, "latent_dim": 64, "mlp_dim": 128,
                  "model_size": 1, "num_elites": 8, "num_pi_trajs": 4, "num_samples": 64}}
    assert p.multitask.pools == ["demo"] and p.multitask.sizes == [1] and p.multitask.seeds == [0]
    assert p.multitask.resources == {"gpu": 0, "runtime": 60, "mem_mb": 4000, "threads": 2}
    assert p.multitask.checkpoint_every == 8000
    assert json.loads(p.multi_spec("demo"))["return_ranges"] == {"pendulum": [-3254.72, 0.0]}
    assert p.long_runs() == {"train_single_seeds_0_1": 120, "train_multi": 60}
    assert p.rerun_on_code_change is True and p.code_param("report") == codeversion.code_version("report")
    resolved = yaml.safe_load(p.resolved_yaml)
    assert resolved["protocol"] == "demo" and resolved["multitask"]["pools"] == ["demo"]
    assert resolved["tasks"]["pendulum"]["allow_evicted"] is False and "rerun_on_code_change" not in resolved
    assert p.all_run_files("run.json")[0] == "results/single/pendulum/seed0/run.json"
    assert p.multi_files("run.json") == ["results/multi/demo/size1/run.json"] and p.official_outputs() == []


def test_one_list_of_spec_keys_from_the_pipeline_to_the_stages():
    """The training jobs' settings have one definition, the typed contract
    (tdmpc2core.io.spec): the pipeline's keys are its fields, the stages accept exactly them
    (another key is refused, naming the accepted ones), and what a stage reads back is the
    contract the pipeline built, the model size of both agents in its agent settings."""
    from tdmpc2core.io.spec import MultiSpec, TaskSpec
    from tdmpc2core.pipeline import config as C
    from tdmpc2core.stages import train_multi, train_single

    assert C.SPEC_KEYS + C.OPTIONAL_SPEC_KEYS == TaskSpec.keys()
    p = resolve(merged("protocols: {demo: {tasks: {pendulum: {n_envs: 2, backend: null, extensions: [grad_norms],"
                       " env_params: {max_torque: 1.5}}}, multitask: {extensions: [model_error]}}}"))
    for task in p.tasks:
        got = train_single.parse_spec(p.task_spec(task))
        assert got == p.task_contract(task) and got.record == json.loads(p.task_spec(task))
    assert train_single.parse_spec(p.task_spec("pendulum")).n_envs == 2
    assert train_single.parse_spec(p.task_spec("cartpole-balance")).agent_settings()["model_size"] == 1
    got = train_multi.parse_spec(p.multi_spec("demo"), 5)
    assert got == p.multi_contract("demo", 5) and got.agent_settings()["model_size"] == 5
    assert "model_size" not in json.loads(p.multi_spec("demo"))  # the job's folder size{n} carries it
    for stage, contract in ((train_single, TaskSpec), (train_multi, MultiSpec)):
        with pytest.raises(ValueError, match=r"unknown key\(s\) \['nope'\]; accepted: " + re.escape(
                str(sorted(contract.keys())))):
            stage.parse_spec(json.dumps({k: 1 for k in contract.REQUIRED} | {"nope": 1}))


def test_paper_configs_resolve_without_code_trigger():
    for name in ("paper-dmc", "paper-dmc-dmcontrol", "paper-mt30"):
        over = (ROOT / "workflow/configs" / f"{name}.yaml").read_text()
        p = resolve(merged(over))
        assert p.rerun_on_code_change is False and p.code_param("train_single") is None, name
    assert "rerun_on_code_change" in SCHEMA["properties"] and SCHEMA["properties"]["rerun_on_code_change"][
        "default"] is False


REFUSALS = [
    ("protocols: {demo: {tasks: {pendulum: {agent: {num_sample: 5}}}}}",
     "config: unknown agent setting 'num_sample' in protocols.demo.tasks.pendulum.agent; did you mean 'num_samples'?"),
    ("protocols: {demo: {defaults: {agent: {num_sampels: 5}}}}",
     "unknown agent setting 'num_sampels' in protocols.demo.defaults.agent; did you mean 'num_samples'?"),
    ("protocols: {demo: {tasks: {pendulum: {agent: {model_size: 3}}}}}",
     "protocols.demo.tasks.pendulum.agent (T = 200 agent steps): model_size=3 is not a preset; accepted: [1, 5"),
    # a setting the defaults give every task: reported at the task, and where it was written
    ("protocols: {demo: {defaults: {agent: {model_size: 3}}}}",
     "model_size=3 is not a preset; accepted: [1, 5, 19, 48, 317] (set at protocols.demo.defaults.agent.model_size)"),
    ("protocols: {demo: {tasks: {pendulum: {agent: {horizon: 0}}}}}",
     "horizon=0 must be >= 1 (set at protocols.demo.tasks.pendulum.agent.horizon)"),
    ("protocols: {demo: {defaults: {agent: {horizon: 2.5}}}}",
     "horizon=2.5 must be an integer (set at protocols.demo.defaults.agent.horizon)"),
    ("protocols: {demo: {tasks: {pendulum: {agent: {num_elites: three}}}}}",
     "num_elites='three' must be an integer (set at protocols.demo.tasks.pendulum.agent.num_elites)"),
    ("protocols: {demo: {tasks: {pendulum: {env_id: Pendulum-v2}}}}",
     "env_id 'Pendulum-v2': unknown env id 'Pendulum-v2'. Did you mean"),
    ("protocols: {demo: {tasks: {pendulum: {agent: {learning_rate: {kind: cosin}}}}}}",
     "protocols.demo.tasks.pendulum.agent (T = 200 agent steps): learning_rate.kind='cosin' is not a schedule; "
     "accepted: ['constant', 'cosine', 'linear', 'warmup_cosine'] (or a plain float) (set at "
     "protocols.demo.tasks.pendulum.agent.learning_rate)"),
    ("protocols: {demo: {defaults: {agent: {learning_rate: {kind: linear, init_value: 1.0e-3, end_value: 0.0}}}}}",
     "learning_rate: the 'linear' schedule needs ['transition_steps']"),
    ("protocols: {demo: {tasks: {pendulum: {agent: {learning_rate: 3e-4}}}}}",
     "learning_rate='3e-4' is not accepted; accepted: a finite number > 0"),
    ("protocols: {demo: {tasks: {pendulum: {agent: {weight_decay: -0.1}}}}}",
     "protocols.demo.tasks.pendulum.agent (T = 200 agent steps): weight_decay=-0.1 is not accepted"),
    ("protocols: {demo: {tasks: {pendulum: {agent: {updates_per_step: 0}}}}}",
     "updates_per_step=0 is not accepted; accepted: a finite number > 0"),
    ("protocols: {demo: {multitask: {agent: {updates_per_step: 2}}}}",
     "multitask (pool demo, model size 1): updates_per_step=2 applies to the single-task online agent only"),
    ("protocols: {demo: {tasks: {pendulum: {agent: {horizon: 0}}}}}",
     "protocols.demo.tasks.pendulum.agent (T = 200 agent steps): horizon=0 must be >= 1"),
    ("protocols: {demo: {defaults: {agent: {num_elites: 65}}}}",
     "protocols.demo.tasks.pendulum.agent (T = 200 agent steps): num_elites=65 exceeds num_samples=64"),
    ("protocols: {demo: {tasks: {cartpole-balance: {episode_length: 999}}}}",
     "episode_length=999 (simulator steps) is not divisible"),
    ("protocols: {demo: {tasks: {pendulum: {agent: {batch_size: 991}}}}}",
     "batch_size=991 exceeds the 990 distinct training slices (horizon + 1 consecutive rows of one episode) "
     "that the replay at the first update (seed_steps=1000, n_envs=1, T=200, horizon=3) holds"),
    ("protocols: {demo: {tasks: {pendulum: {n_envs: 6}}}}", "seed_steps=1000 is too small: with n_envs=6"),
    ("protocols: {demo: {tasks: {pendulum: {agent_steps: 1000}}}}",
     "config: protocols.demo.tasks.pendulum: agent_steps=1000 trains nothing: the first update comes after the "
     "seed phase's seed_steps=1000 random agent steps, in the tick that reaches 1001 agent steps (n_envs=1); "
     "raise agent_steps to at least 1001 or lower agent.seed_steps"),
    ("protocols: {demo: {tasks: {pendulum: {agent: {episodic: true, batch_size: 6001}}}}}",
     "batch_size=6001 exceeds the 6000 distinct training slices (horizon + 1 consecutive rows of one "
     "episode) that the whole run (6000 agent steps, at most one slice each) holds"),
    ("protocols: {demo: {multitask: {batch_size: 30409}}}",
     "multitask (pool demo, model size 1): batch_size=30409 exceeds the 30408 distinct training slices"),
    ("protocols: {demo: {multitask: {agent: {num_elites: 100}}}}",
     "multitask (pool demo, model size 1): num_elites=100 exceeds num_samples=64 (set at "
     "protocols.demo.multitask.agent.num_elites)"),
    ("protocols: {demo: {multitask: {agent: {horizon: 2.5}}}}",
     "multitask (pool demo, model size 1): horizon=2.5 must be an integer (set at protocols.demo.multitask.agent.horizon)"),
    ("protocols: {demo: {multitask: {agent: {num_sample: 1}}}}",
     "unknown agent setting 'num_sample' in protocols.demo.multitask.agent; did you mean 'num_samples'?"),
    ("protocols: {demo: {multitask: {return_ranges: {pendulum: [0, -1]}}}}",
     "config: protocols.demo.multitask.return_ranges.pendulum = [0, -1]: need [low, high] with low < high"),
    ("protocols: {demo: {multitask: {return_ranges: {walker: [0, 1]}}}}",
     "multitask.return_ranges names task(s) ['walker'] that no trained pool holds"),
    ("protocols: {demo: {tasks: {pendulum: {expected: {mean_min: -100, mean_max: -400}}}}}",
     "config: protocols.demo.tasks.pendulum.expected: mean_min -100 > mean_max -400: no final return could pass"),
    ("protocols: {demo: {multitask: {expected: {demo: {pendulum: {mean_min: 5, mean_max: 1}}}}}}",
     "multitask.expected.demo.pendulum: mean_min 5 > mean_max 1"),
    ("protocols: {demo: {multitask: {expected: {demo: {walker: {mean_min: 1}}}}}}",
     "task(s) ['walker'] are not in pool 'demo'"),
    ("protocols: {demo: {multitask: {expected: {other: {pendulum: {mean_min: 1}}}}}}",
     "multitask.expected.other: 'other' is not a trained pool (['demo'])"),
    ("protocols: {demo: {tasks: {pendulum: {agent: {episodic: true}}}}}", "holding episodic task(s) ['pendulum']"),
    ("protocols: {demo: {tasks: {pendulum: {agent: {buffer_size: 2000}}}}}",
     "task 'pendulum' of protocol 'demo' trains 6000 agent steps with buffer_size 2000"),
    ("protocols: {demo: {pools: {bad: [pendulum, walker]}}}", "pool 'bad' of protocol 'demo' names task(s) ['walker']"),
    ("protocols: {demo: {multitask: {pools: [nope]}}}", "multitask.pools names ['nope']"),
    ("protocols: {demo: {multitask: {agent: {model_size: 5}}}}",
     "config: protocols.demo.multitask.agent.model_size: the model sizes are multitask.model_sizes"),
    ("protocols: {mine: {label: x, tasks: {t: {env_id: Pendulum-v1}}}}\nprotocol: mine",
     "config: task 't' of protocol 'mine' lacks ['agent_steps', 'eval_every', 'eval_episodes', "
     "'agent']; set them under protocols.mine.defaults or under the task"),  # episode_length: the suite's or 1000
    ("protocols: {mine: {label: x, tasks: {}}}\nprotocol: mine",
     "config: protocols.mine.tasks is empty; name at least one task (or official_pools)"),
    ("protocols: {demo: {official_pools: {demo: {src: /nonexistent, task_set: mt30}}}}",
     "config: protocols.demo: pool 'demo' is under both pools and official_pools"),
    ("protocols: {demo: {official_pools: {mt: {src: /nonexistent, task_set: mt30, eval_tasks: [nope]}}}}",
     "official_pools.mt.eval_tasks: ['nope'] cannot be evaluated"),
]


@pytest.mark.parametrize("text,message", REFUSALS)
def test_refusals_are_one_line_naming_the_key(text, message):
    assert message in refusal(text)


def test_refusals_of_top_level_values():
    assert "protocol 'nope' has no entry under 'protocols'" in refusal(protocol="nope")
    assert refusal(max_chunk_seconds=400).startswith(
        "config: max_chunk_seconds=400 is not below cluster.stop_lead_seconds=300")
    resolve(merged("protocols: {demo: {tasks: {pendulum: {agent: {buffer_size: 2000}}}, "
                   "datasets: {allow_evicted: true}}}"))  # allowed explicitly


def test_official_checkpoints_are_checked(tmp_path):
    (tmp_path / "tiny.pt").write_bytes(b"")
    block = {"dir": str(tmp_path), "episodes": 2, "checkpoints": {"tiny": {"file": "tiny.pt", "tasks": ["all"]}},
             "resources": {"gpu": 0, "runtime": 10, "mem_mb": 4000}}
    p = resolve(merged(official_checkpoints=block))
    assert p.official_outputs() == ["results/official/tiny/eval.parquet", "results/official/tiny/run.json"]
    assert p.official_checkpoint("tiny") == str(tmp_path / "tiny.pt")
    assert p.official_args("tiny") == "--task all --episodes 2 --seed 1 --episode-length 1000"
    bad = copy.deepcopy(block)
    bad["checkpoints"]["tiny"]["tasks"] = ["dmc:nope"]
    assert "official_checkpoints.checkpoints.tiny.tasks: 'dmc:nope'" in refusal(official_checkpoints=bad)
    bad["checkpoints"]["tiny"] = {"file": "nope.pt", "tasks": ["all"]}
    assert f"official_checkpoints.checkpoints.tiny.file: {tmp_path}/nope.pt does not exist" in refusal(
        official_checkpoints=bad)


def test_learning_parity_file_is_optional_and_checked(tmp_path):
    """Config `learning_parity` (issue 30): absent or null, no section; a file, the report's input."""
    assert resolve(merged()).learning_parity is None
    assert resolve(merged(learning_parity=None)).learning_parity is None
    import pandas as pd

    from tdmpc2core.io.learning_parity import COLUMNS

    f = tmp_path / "lp.parquet"
    pd.DataFrame([dict(implementation="ours", task="cup-catch", seed=0, agent_step=0, env_frames=0,
                       episode_return=1.0)]).to_parquet(f)
    p = resolve(merged(learning_parity=str(f)))
    assert p.learning_parity == str(f) and "learning_parity" not in p.resolved_yaml  # the report's input only
    assert "\nvideo: last\n" in p.resolved_yaml  # shown in the report's configuration
    jsonschema.validate(merged(learning_parity=str(f)), SCHEMA)
    assert f"config: learning_parity='{tmp_path}/nope.parquet' is not a file" in refusal(
        learning_parity=str(tmp_path / "nope.parquet"))
    # a file of another kind stops the plan (not the report job, whose failure removes the last report)
    (tmp_path / "final_scores.csv").write_text("task,score\ncup-catch,1\n")
    assert f"config: learning_parity='{tmp_path}/final_scores.csv' is not a Parquet file" in refusal(
        learning_parity=str(tmp_path / "final_scores.csv"))
    pd.read_parquet(f).iloc[:0].to_parquet(tmp_path / "empty.parquet")
    assert f"config: learning_parity='{tmp_path}/empty.parquet' has no rows" in refusal(
        learning_parity=str(tmp_path / "empty.parquet"))
    pd.DataFrame(dict(step=[0], episode_return=[1.0])).to_parquet(tmp_path / "eval.parquet")
    assert (f"config: learning_parity='{tmp_path}/eval.parquet' lacks the column(s) "
            f"{[c for c in COLUMNS if c != 'episode_return']}") in refusal(learning_parity=str(tmp_path / "eval.parquet"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(merged(learning_parity=3), SCHEMA)


def test_reproduction_file_is_optional_and_checked(tmp_path):
    """Config `reproduction` (issue 45): absent or null, no section; a results file of
    benchmarks/reproduction.py (the test fixture), the report's input with the JSON beside it."""
    import pandas as pd

    from tdmpc2core.io.reproduction import COLUMNS

    assert resolve(merged()).reproduction is None and resolve(merged()).reproduction_inputs() == []
    fixture = ROOT / "tests" / "fixtures" / "reproduction_fixture.parquet"
    p = resolve(merged(reproduction=str(fixture)))
    assert p.reproduction == str(fixture) and "reproduction" not in p.resolved_yaml  # the report's input only
    assert p.reproduction_inputs() == [str(fixture), str(fixture.with_suffix(".json"))]
    jsonschema.validate(merged(reproduction=str(fixture)), SCHEMA)
    alone = tmp_path / "rp.parquet"
    shutil.copy2(fixture, alone)
    assert resolve(merged(reproduction=str(alone))).reproduction_inputs() == [str(alone)]  # no JSON beside it
    assert f"config: reproduction='{tmp_path}/nope.parquet' is not a file" in refusal(
        reproduction=str(tmp_path / "nope.parquet"))
    (tmp_path / "x.csv").write_text("task\ncup-catch\n")
    assert f"config: reproduction='{tmp_path}/x.csv' is not a Parquet file" in refusal(reproduction=str(tmp_path / "x.csv"))
    pd.read_parquet(fixture).drop(columns=["device", "commit"]).to_parquet(tmp_path / "old.parquet")
    assert (f"config: reproduction='{tmp_path}/old.parquet' lacks the column(s) ['device', 'commit'] of a results "
            f"file of benchmarks/reproduction.py (expected {list(COLUMNS)}") in refusal(reproduction=str(tmp_path / "old.parquet"))
    pd.read_parquet(fixture).iloc[:0].to_parquet(tmp_path / "empty.parquet")
    assert f"config: reproduction='{tmp_path}/empty.parquet' has no rows" in refusal(
        reproduction=str(tmp_path / "empty.parquet"))


def test_load_workflow_config_merges_and_fills_defaults_as_snakemake():
    """load_workflow_config (the workflow's configuration without Snakemake: benchmarks/reproduction.py)
    merges config.yaml and the files as `merged` (Snakemake's --configfile) and fills the schema's
    defaults; a schema refusal is one line."""
    from tdmpc2core.pipeline.config import load_workflow_config

    for name in ("reproduction-dmc", "paper-dmc-dmcontrol"):
        path = f"workflow/configs/{name}.yaml"
        got = load_workflow_config([path], root=ROOT)
        want = resolve(merged((ROOT / path).read_text()))
        p = resolve(got)
        assert {t: p.task_spec(t) for t in p.tasks} == {t: want.task_spec(t) for t in want.tasks}, name
        assert p.resolved_yaml == want.resolved_yaml and p.cluster == want.cluster, name
    got = load_workflow_config([], root=ROOT, overrides={"seeds": [3]})
    assert got["seeds"] == [3] and got["learning_parity"] is None and got["reproduction"] is None  # defaults filled
    with pytest.raises(ConfigError, match=r"^config: seeds_per_job: 0 is less than the minimum of 1$"):
        load_workflow_config([], root=ROOT, overrides={"seeds_per_job": 0})
    with pytest.raises(FileNotFoundError, match="config file nope.yaml does not exist"):
        load_workflow_config(["nope.yaml"], root=ROOT)


def test_empty_official_pool_folder_is_a_note(tmp_path):
    p = resolve(merged(f"protocols: {{demo: {{official_pools: {{mt: {{src: {tmp_path}, task_set: mt30}}}}}}}}"))
    assert len(p.notes) == 1 and p.notes[0].startswith("note: official_pools.mt.src")
    assert p.official_chunks("mt") == [] and p.official_pool_tasks["mt"]


def test_logger_block_turns_on_a_logger_for_every_training_job_and_unknown_kinds_are_refused():
    import argparse

    from tdmpc2core.io.loggers import logger_kinds
    from tdmpc2core.stages import train_multi, train_single

    demo = resolve(merged())
    # the demo logs nothing new, and its training rules keep their resources and commands
    # the shell text is the same with and without a logger block (adding or removing it reruns
    # nothing: a fresh user found the earlier "" retrained every job); the flags are a resource
    assert demo.logger is None and demo.logger_flags() == "--logger none"
    assert demo.logger_resources() == {"logger": "--logger none"}
    assert demo.logger_shell() == " {resources.logger}"
    p = resolve(merged("logger: {kind: wandb, project: my-proj}"))
    assert p.logger == {"kind": "wandb", "project": "my-proj", "dir": "logs/metrics"}
    assert p.logger_shell() == " {resources.logger}" and p.logger_resources() == {"logger": p.logger_flags()}
    flags = p.logger_flags().split()
    assert flags == ["--logger", "wandb", "--logger-dir", "logs/metrics", "--logger-group", "demo",
                     "--logger-project", "my-proj"]
    for stage in (train_single, train_multi):  # the flags the rules pass are the stages' own
        parser = argparse.ArgumentParser(allow_abbrev=False)
        stage.add_arguments(parser)
        required = {"--task": "t", "--spec": "{}", "--seeds": "0", "--outdir": "o", "--pool": "p",
                    "--model-size": "1", "--dataset": "d"}
        base = [x for a in parser._actions if a.required for x in (a.option_strings[0], required[a.option_strings[0]])]
        args = parser.parse_args(base + flags)
        assert (args.logger, args.logger_project, args.logger_group) == ("wandb", "my-proj", "demo")
    msg = refusal("logger: {kind: wandbb}")
    assert msg == ("config: logger.kind: 'wandbb' is not accepted (did you mean 'wandb'?); accepted: "
                   + ", ".join(logger_kinds()))
    assert {"csv", "tensorboard", "wandb"} <= set(logger_kinds())
    assert "unknown key 'projet' in logger; did you mean 'project'?" in refusal("logger: {kind: csv, projet: x}")
    # the schema leaves the kinds to the registry: a name passes it, the library's check refuses it
    assert _schema_error(merged("logger: {kind: nope}")) is None
    assert refusal("logger: {kind: nope}") == f"config: logger.kind: 'nope' is not accepted; accepted: " \
                                              f"{', '.join(logger_kinds())}"


# --------------------------------------------------------------------------- the schema's line
def _schema_error(config: dict) -> jsonschema.ValidationError:
    return jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(SCHEMA).iter_errors(config))


def test_schema_error_lines(tmp_path):
    demo = str(ROOT / "config.yaml")
    line = config_error_line(_schema_error(merged(bogus=1)), SCHEMA, [demo])
    assert line.startswith("config: unknown key 'bogus' in the top level (set by --config); accepted there: "
                           "bootstrap_reps, ")
    typo = tmp_path / "typo.yaml"
    typo.write_text("protocols:\n  demo:\n    tasks:\n      pendulum:\n        agent_step: 5\n")
    line = config_error_line(_schema_error(merged(typo.read_text())), SCHEMA, [demo, str(typo)])
    assert line.startswith("config: unknown key 'agent_step' in protocols.demo.tasks.pendulum (set in ")
    assert line.endswith("typo.yaml); did you mean 'agent_steps'?")
    text = "protocols: {demo: {tasks: {pendulum: {published: cartpol-balance}}}}\n"
    line = config_error_line(_schema_error(merged(text)), SCHEMA, [demo])
    assert line == ("config: protocols.demo.tasks.pendulum.published: 'cartpol-balance' is not accepted; "
                    "did you mean 'cartpole-balance'?")
    # an enum's values are listed as YAML writes them (video's unquoted off is YAML's false)
    line = config_error_line(_schema_error(merged(video="sometimes")), SCHEMA, [demo], {"video": "sometimes"})
    assert line == ("config: video (set by --config): 'sometimes' is not accepted; accepted: off, last, every, "
                    "false")
    line = config_error_line(_schema_error(merged(video=True)), SCHEMA, [demo])
    assert line == ("config: video (set in config.yaml): True is not accepted (YAML reads an unquoted on, yes or "
                    "true as true); accepted: off, last, every, false")
    assert config_error_line(_schema_error(merged(video=True)), SCHEMA, [demo], {"video": True}).endswith(
        "True is not accepted (--config reads True as true); accepted: off, last, every, false")
    # --config video=false is the text 'false' (not YAML's false, which means off)
    line = config_error_line(_schema_error(merged(video="false")), SCHEMA, [demo], {"video": "false"})
    assert line == ("config: video (set by --config): the text 'false' is not accepted (--config passes it as "
                    "text, not YAML's false); accepted: off, last, every")
    line = config_error_line(_schema_error(merged(video="EVERY")), SCHEMA, [demo], {"video": "EVERY"})
    assert line.endswith("'EVERY' is not accepted; did you mean 'every'?")
    line = config_error_line(_schema_error(merged(video=1)), SCHEMA, [demo], {"video": 1})
    assert line == "config: video (set by --config): 1 is not of type 'string', 'boolean'; accepted: off, last, every, false"
    assert config_error_line(_schema_error(merged(seeds=0)), SCHEMA, [demo], {"seeds": 0}).endswith(
        "0 is not of type 'array'; write a list: [0]")
    line = config_error_line(_schema_error(merged("protocols: {demo: {defaults: {eval_every: '1e3'}}}")), SCHEMA, [demo])
    assert line.endswith("'1e3' is not of type 'integer' (YAML reads 1e3 as a string: write 1000)")
    # a protocol's or a task's key written at the top level: where it belongs
    top = tmp_path / "top.yaml"
    top.write_text("tasks: {pendulum: {agent: {horizon: 3}}}\n")
    line = config_error_line(_schema_error(merged(top.read_text())), SCHEMA, [demo, str(top)])
    assert line.startswith("config: unknown key 'tasks' in the top level (set in ") and line.endswith(
        "top.yaml); tasks is a protocol's key: write it under protocols.demo.tasks (the protocol `protocol` names)")
    line = config_error_line(_schema_error(merged(eval_every=1000)), SCHEMA, [demo], {"eval_every": 1000})
    assert line.endswith("eval_every is a task's setting: write it under protocols.demo.defaults.eval_every "
                         "(every task) or protocols.demo.tasks.<task>.eval_every")
    # a task name misspelt in an override file reads as a new task without its env_id
    typo_task = tmp_path / "task.yaml"
    typo_task.write_text("protocols: {demo: {tasks: {pendulm: {agent_steps: 3000}}}}\n")
    line = config_error_line(_schema_error(merged(typo_task.read_text())), SCHEMA, [demo, str(typo_task)])
    assert line.startswith("config: protocols.demo.tasks.pendulm (set in ") and line.endswith(
        "task.yaml): 'env_id' is a required property; did you mean the task 'pendulum'? (a task named anew "
        "needs its env_id)")
    line = config_error_line(_schema_error(merged(rerun_on_code_change="yes")), SCHEMA, [demo])
    assert line == "config: rerun_on_code_change (set in config.yaml): 'yes' is not of type 'boolean'"
    # a value --config sets is said to come from --config, though config.yaml sets the key too
    line = config_error_line(_schema_error(merged(seeds_per_job=0)), SCHEMA, [demo], {"seeds_per_job": 0})
    assert line == "config: seeds_per_job (set by --config): 0 is less than the minimum of 1"
    # --config seeds=[0]: Snakemake gives the items as strings, which no config can fix there
    line = config_error_line(_schema_error(merged(seeds=["0"])), SCHEMA, [demo], {"seeds": ["0"]})
    assert line == ("config: seeds.0 (set by --config): '0' is not of type 'integer'; --config passes list "
                    "items as strings: set this list in a file given with --configfile")
    # a key set to null: the file that sets it so is named (not the file it overrides)
    nulls = tmp_path / "nulls.yaml"
    nulls.write_text("seeds_per_job: null\n")
    line = config_error_line(_schema_error(merged(nulls.read_text())), SCHEMA, [demo, str(nulls)])
    assert line == f"config: seeds_per_job (set in {nulls}): None is not of type 'integer'", line
    # seed_groups written as a string: the hint is a list of lists
    text = "protocols: {demo: {tasks: {pendulum: {seed_groups: '0,1'}}}}\n"
    line = config_error_line(_schema_error(merged(text)), SCHEMA, [demo])
    assert line.endswith("; write a list of lists of seeds, e.g. [[0,1]]"), line


def test_optimizer_settings_in_the_configuration():
    """learning_rate (a number or a named schedule), weight_decay and updates_per_step are agent
    settings the workflow takes (checked by the library's TDMPC2Config when it loads) and the
    schema refuses in one line where it can (a schedule's kind, a negative decay)."""
    resolve(merged("protocols: {demo: {defaults: {agent: {weight_decay: 0.01, updates_per_step: 2, learning_rate: "
                   "{kind: warmup_cosine, init_value: 0.0, peak_value: 3.0e-4, warmup_steps: 100, "
                   "decay_steps: 6000}}}}}"))
    assert _schema_error(merged("protocols: {demo: {defaults: {agent: {learning_rate: {kind: cosine, "
                                "init_value: 1.0e-3, decay_steps: 10}}}}}")) is None
    demo = str(ROOT / "config.yaml")
    line = config_error_line(_schema_error(merged("protocols: {demo: {defaults: {agent: {learning_rate: "
                                                  "{kind: cosin}}}}}")), SCHEMA, [demo])
    assert line == ("config: protocols.demo.defaults.agent.learning_rate.kind: 'cosin' is not accepted; "
                    "did you mean 'cosine'?")
    line = config_error_line(_schema_error(merged("protocols: {demo: {tasks: {pendulum: {agent: "
                                                  "{weight_decay: -1}}}}}")), SCHEMA, [demo])
    assert line == "config: protocols.demo.tasks.pendulum.agent.weight_decay: -1 is less than the minimum of 0"
    # (a refused value inside a task's settings was "unknown key '?'" before: jsonschema's best
    # match is the task's unevaluatedProperties error, which config_error_line looks under)
    line = config_error_line(_schema_error(merged("protocols: {demo: {defaults: {agent: "
                                                  "{termination_coef: -1}}}}")), SCHEMA, [demo])
    assert line == "config: protocols.demo.defaults.agent.termination_coef: -1 is less than the minimum of 0"
    # YAML 1.1 reads 3e-4 as a string: the schema's refusal says so
    line = config_error_line(_schema_error(merged("protocols: {demo: {defaults: {agent: "
                                                  "{weight_decay: 1e-4}}}}")), SCHEMA, [demo])
    assert line.endswith("'1e-4' is not of type 'number' (YAML reads 1e-4 as a string: write it with a decimal "
                         "point and a signed exponent, e.g. 3.0e-4)"), line
    # a number the user quoted is told so (a fresh user's "0.01" got the hint above)
    line = config_error_line(_schema_error(merged("protocols: {demo: {defaults: {agent: "
                                                  "{weight_decay: '0.01'}}}}")), SCHEMA, [demo])
    assert line.endswith("'0.01' is not of type 'number' (a quoted number is a string: write 0.01 without "
                         "quotes)"), line


# --------------------------------------------------------------------------- code versions
def test_code_version_follows_imports_and_ignores_docstrings(tmp_path, monkeypatch):
    v = codeversion.code_version("tables")
    assert len(v) == 16 and int(v, 16) >= 0 and v != codeversion.code_version("report")
    with pytest.raises(ConfigError, match="code version: no module tdmpc2core.stages.nope"):
        codeversion.code_version("nope")
    shutil.copytree(ROOT / "tdmpc2core", tmp_path / "tdmpc2core", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(codeversion, "LIBRARY_ROOT", tmp_path / "tdmpc2core")

    def fresh(stage):
        codeversion._module_code.cache_clear()
        codeversion.code_version.cache_clear()
        return codeversion.code_version(stage)

    try:
        before = codeversion.code_version("report")
        assert fresh("report") == before  # the copy's code is the same
        html = tmp_path / "tdmpc2core/report/html.py"
        html.write_text(html.read_text().replace('"""', '"""A docstring edit. ', 1) + "\n# a comment\n")
        assert fresh("report") == before
        html.write_text(html.read_text() + "CODE_VERSION_PROBE = 1\n")
        assert fresh("report") != before
    finally:
        codeversion._module_code.cache_clear()
        codeversion.code_version.cache_clear()


def test_code_version_memo_spares_parsing_and_survives_damage(tmp_path, monkeypatch):
    """The on-disk memo (tdmpc2core/__pycache__/code-versions.json): a second process with
    unchanged sources parses nothing and gets the same versions; a damaged memo is ignored."""
    import ast

    shutil.copytree(ROOT / "tdmpc2core", tmp_path / "tdmpc2core", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(codeversion, "LIBRARY_ROOT", tmp_path / "tdmpc2core")
    memo = tmp_path / "tdmpc2core/__pycache__/code-versions.json"

    def fresh(stage):  # what a new process sees
        for f in (codeversion._module_code, codeversion.code_version, codeversion._memo):
            f.cache_clear()
        return codeversion.code_version(stage)

    try:
        first = fresh("report")
        assert memo.exists() and len(json.loads(memo.read_text())) > 10
        with monkeypatch.context() as m:
            m.setattr(ast, "parse", lambda *a, **k: pytest.fail("parsed although the memo has it"))
            assert fresh("report") == first
        memo.write_text("{not json")
        assert fresh("report") == first
        html = tmp_path / "tdmpc2core/report/html.py"
        html.write_text(html.read_text() + "CODE_VERSION_PROBE = 1\n")
        assert fresh("report") != first  # a changed text is parsed again
    finally:
        for f in (codeversion._module_code, codeversion.code_version, codeversion._memo):
            f.cache_clear()


def test_module_imports():
    import ast

    tree = ast.parse("import os\nimport tdmpc2core.io.atomic\nfrom tdmpc2core.model import config, NOT_A_MODULE\n"
                     "def f():\n    from . import ids\n    from ..io import dataset\n")
    found = codeversion.module_imports("tdmpc2core.envs.x", tree, is_package=False)
    assert found == {"tdmpc2core.io.atomic", "tdmpc2core.model.config", "tdmpc2core.model",
                     "tdmpc2core.envs.ids", "tdmpc2core.io.dataset"}


def test_code_changes_name_the_finished_jobs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    now = codeversion.code_version("tables")
    for i, rec in enumerate([{"code_version": now}, {"code_version": "0123456789abcdef"}, {}]):
        (tmp_path / f"r{i}").mkdir()
        (tmp_path / f"r{i}/run.json").write_text(json.dumps(rec))
    jobs = {"train_single_seeds_0": ("tables", [f"r{i}/run.json" for i in range(4)])}
    lines = codeversion.code_changes(jobs, rerun=False)
    assert lines == [
        f"code changed: 1 of 3 finished train_single_seeds_0 job output(s) ran code version 0123456789abcdef, "
        f"now {now} (tdmpc2core.stages.tables and its imports); kept (rerun_on_code_change: false)",
        "code version unknown: 1 of 3 finished train_single_seeds_0 job output(s) record none in run.json; "
        "kept (rerun_on_code_change: false)"]
    assert codeversion.code_changes(jobs, rerun=True)[0].endswith("rerun (rerun_on_code_change: true)")
    assert codeversion.code_changes({"x": ("tables", ["missing/run.json"])}, rerun=False) == []
    assert codeversion.recorded_code_version("r2/run.json") is None


def test_switching_to_every_video_names_the_finished_jobs_without_them(tmp_path, monkeypatch):
    """`video: every` after jobs finished with `last`: nothing reruns (the videos/ folder is not
    a declared output), so the load names those jobs and what to delete to have the videos."""
    monkeypatch.chdir(tmp_path)
    runs = {"pendulum": {"video": {"file": "video.mp4"}},  # ran with last
            "cartpole-balance": {"video": {"file": "video.mp4", "every": ["videos/agent_steps_000000000.mp4"]}}}
    for task, rec in runs.items():
        (tmp_path / f"results/single/{task}/seed0").mkdir(parents=True)
        (tmp_path / f"results/single/{task}/seed0/run.json").write_text(json.dumps(rec))
    every = resolve(merged(video="every"))
    assert every.jobs_without_every_videos() == [
        "video: every: 1 finished training job(s) recorded no video per evaluation: results/single/pendulum/seed0/"
        f"run.json (checkpoints {every.checkpoints}/single/pendulum/seeds_0_1/); kept, since those videos are "
        "recorded as training evaluates: to have them, delete such a job's run.json and its checkpoint folder, "
        "then run again: it trains anew, and what is built on its outputs (its pool, the multi-task model) is made "
        "again too"]
    assert resolve(merged(video="last")).jobs_without_every_videos() == []
    (tmp_path / "results/single/pendulum/seed0/run.json").write_text("{not json")  # a job being rewritten
    assert every.jobs_without_every_videos() == []


# --------------------------------------------------------------------------- cluster
def test_cluster_arithmetic():
    p = resolve(merged(cluster={"max_job_minutes": 60, "slurm_extra": "--qos=long"}))
    c = p.cluster
    assert (c.job_runtime(30), c.job_runtime(600)) == (30, 60)
    assert [c.extra_jobs(m) for m in (0, 59, 60, 61, 120, 121)] == [0, 0, 0, 1, 1, 2]
    assert c.job_threads({}) == 1 and c.job_threads({"threads": 3}) == 3
    assert c.slurm_extra == "--signal=TERM@300 --qos=long"
    assert c.jax_env(0) == f"JAX_COMPILATION_CACHE_MAX_SIZE={JAX_CACHE_MAX_BYTES} JAX_PLATFORMS=cpu"
    assert c.jax_env(1) == (f"JAX_COMPILATION_CACHE_MAX_SIZE={JAX_CACHE_MAX_BYTES} "
                            "XLA_PYTHON_CLIENT_PREALLOCATE=true XLA_PYTHON_CLIENT_MEM_FRACTION=0.75")
    assert c.retries(p.long_runs(), asked=2) == {
        "train_single_seeds_0_1": (3, "train_single_seeds_0_1: runs of up to 120 min in jobs of at most 60 min "
                                      "(cluster.max_job_minutes): up to 2 jobs each, 3 retries")}


def test_cluster_devices_nodes_and_processes_of_the_training_jobs():
    """cluster.devices / multitask_nodes / multitask_tasks_per_node (issue 28): what the jobs
    ask the SLURM executor for and how the multi-task job's shell starts its processes."""
    one = resolve(merged()).cluster
    assert (one.devices, one.multitask_processes) == ("auto", 1)
    assert one.multitask_resources(2) == {"gpu": 2} and one.multitask_launcher() == "exec"
    c = resolve(merged(cluster={"devices": 2, "multitask_nodes": 2, "multitask_tasks_per_node": 4})).cluster
    assert c.devices == "2" and c.multitask_processes == 8
    res = c.multitask_resources(4)
    assert res == {"gpu": 0, "mpi": "srun", "nodes": 2, "tasks_per_node": 4, "gres": "gpu:4", "tasks_per_gpu": 1}
    assert c.multitask_launcher().endswith("exec srun --ntasks=8 --kill-on-bad-exit=1")
    assert "need a SLURM job" in c.multitask_launcher()  # a local run is refused with the reason
    per_node = resolve(merged(cluster={"multitask_nodes": 3})).cluster
    assert per_node.multitask_resources(1) == {"gpu": 0, "mpi": "srun", "nodes": 3, "tasks": 3, "gres": "gpu:1",
                                               "tasks_per_gpu": 1}
    # the executor's sbatch call of that multi-node job (the profile's plugin, its own code)
    submit = pytest.importorskip("snakemake_executor_plugin_slurm.submit_string")

    class Res(dict):
        __getattr__ = dict.__getitem__

    class Job:
        threads = 1
        resources = Res(res, runtime=60, mem_mb=4000, slurm_extra=c.slurm_extra)

    call = submit.get_submit_command(Job(), dict(run_uuid="u", slurm_logfile="l", comment_str="c", account="",
                                                 partition="", workdir=None))
    assert "--nodes=2" in call and "--ntasks-per-node=4" in call and "--ntasks-per-gpu=1" in call, call
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    assert set_gres_string(Job()).strip() == "--gres=gpu:4"  # per node, no job-wide --gpus
    # the schema: auto, all or a count >= 1; nodes and tasks per node >= 1
    for bad, validator in ((0, "minimum"), ("gpus", "pattern"), (1.5, "type"), ("2", "pattern")):
        assert _schema_error(merged(cluster={"devices": bad})).validator == validator
    for key in ("multitask_nodes", "multitask_tasks_per_node"):
        assert _schema_error(merged(cluster={key: 0})).validator == "minimum"


# --------------------------------------------------------------------------- workflow size
def test_python_lines_counter():
    text = ('import os\n\n# a comment\nX = 1\n\n\nrule a:\n    input:\n        "x",\n    shell:\n        "y"\n\n'
            'include: "b.smk"\nlocalrules:\n    a,\n\nif X:\n\n    rule b:\n        output: "z"\n\n'
            'wildcard_constraints:\n    task="a|b",\nonsuccess:\n    print(1)\n')
    assert python_lines(text) == 5  # import, X, if, onsuccess, print
    counts = workflow_python_lines(ROOT)
    assert "Snakefile" in counts and "workflow/rules/common.smk" in counts
    # issue 25: at most 300 in all; the end-of-run hooks (hooks.smk) have their own share
    assert sum(n for f, n in counts.items() if not f.endswith("hooks.smk")) <= 230, counts


# --------------------------------------------------------------------------- dry-run records
def test_normalise_dry_run():
    out = """Building DAG of jobs...
Job stats:
job      count
-----  -------
b            1
a            1
total        2

[Thu Dec  3 13:35:36 2026]
rule b:
    output: y
    jobid: 2
    reason: Missing output files: y2, y1; Input files updated by another job: x
    resources: tmpdir=/tmp, tdmpc2=/usr/bin/python -m tdmpc2core.cli
Shell command: /usr/bin/python -m tdmpc2core.cli b

[Thu Dec  3 13:35:37 2026]
localrule a:
    input: q, p
    output: x
    jobid: 1
    reason: Missing output files: x
    wildcards: task=t
    resources: tmpdir=/tmp
Shell command: printf 'line one
line two'

Job stats:
job      count
-----  -------
b            1
a            1
total        2

Reasons:
    (check individual jobs above for details)
This was a dry-run (flag -n). The order of jobs does not reflect the order of execution.
"""
    text = normalise_dry_run(out, python="/usr/bin/python")
    assert text == """localrule a:
    input: p, q
    output: x
    reason: Missing output files: x
    wildcards: task=t
    resources: 
    shell: printf 'line one
line two'

rule b:
    output: y
    reason: Missing output files: y1, y2; Input files updated by another job: x
    resources: tdmpc2=PYTHON -m tdmpc2core.cli
    shell: PYTHON -m tdmpc2core.cli b

Job stats:
job      count
-----  -------
a            1
b            1
total        2
Reasons:
    (check individual jobs above for details)
"""
    with pytest.raises(ValueError, match="no 'Job stats:' table"):
        normalise_dry_run("WorkflowError: config: ...", python=sys.executable)


def test_pipeline_imports_no_jax_and_no_snakemake():
    code = ("import sys, tdmpc2core.pipeline.config, tdmpc2core.pipeline.codeversion, tdmpc2core.pipeline.cluster, "
            "tdmpc2core.pipeline.schema, tdmpc2core.pipeline.lines, tdmpc2core.pipeline.dryrun, "
            "tdmpc2core.pipeline.multitask\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'flax', 'snakemake')]\n"
            "assert not bad, bad")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr


def test_schema_error_lines_for_a_fresh_users_shape_mistakes():
    # each was a bare jsonschema message to a fresh user (issue 26's review)
    demo = str(ROOT / "config.yaml")

    def line(text):
        return config_error_line(_schema_error(merged(text)), SCHEMA, [demo])

    got = line("protocols: {demo: {defaults: {agent: {extensions: [grad_norms]}}}}")
    assert got.endswith("extensions is a setting of the task (or of defaults or the multitask block), beside agent, "
                        "not in it"), got
    got = line("logger: wandb")
    assert got.endswith("write it as a block: logger: {kind: wandb}"), got
    got = line("logger: {kind: [wandb, tensorboard]}")
    assert "logger.kind" in got and "takes one value, not a list" in got and "'csv'" in got, got
    got = line("protocols: {demo: {defaults: {extensions: grad_norms}}}")
    assert got.endswith("write a list: [grad_norms]"), got
