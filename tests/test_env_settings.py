"""Environment settings (issue 31): ``env_params`` set per task in the pipeline, checked at load
without JAX, recorded by the agent and in run.json (with the episode length actually used), carried
by the dataset's task table and used again where a task is rebuilt (the multi-task evaluation).

Cheap by design: no training and no compiled program of the agent (building an env and an agent
traces at most a few eager ops); the pipeline checks run in milliseconds; the datasets are numpy.
"""
from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from tdmpc2core.dataset import (DatasetError, TaskInfo, concatenate_episodes, from_episodes, load_dataset,
                                pool_tasks, read_metadata, save_dataset)
from tdmpc2core.envs import check_env_params, time_limit
from tdmpc2core.envs import params as P
from tdmpc2core.envs.suites import brax as brax_suite, gymnax as gymnax_suite, playground as playground_suite
from tdmpc2core.pipeline.config import ConfigError, resolve

ROOT = Path(__file__).resolve().parents[1]
DEMO = yaml.safe_load((ROOT / "config.yaml").read_text())
SCHEMA = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
TINY = dict(model_size=1, mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16, num_elites=4,
            num_pi_trajs=2, iterations=1, batch_size=16)


def merged(text: str, base: dict = DEMO) -> dict:
    """``base`` with the YAML ``text`` merged over it key by key (as Snakemake merges --configfile)."""
    def update(b, over):
        for k, v in over.items():
            b[k] = update(b.get(k, {}), v) if isinstance(v, dict) and isinstance(b.get(k), dict) else v
        return b

    return update(copy.deepcopy(base), yaml.safe_load(text))


def refusal(text: str, base: dict = DEMO) -> str:
    with pytest.raises(ConfigError) as e:
        resolve(merged(text, base))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("config: "), msg
    return msg


# ------------------------------------------------------------- the tables vs the packages
def test_gymnax_table_is_the_installed_gymnax():
    gymnax = pytest.importorskip("gymnax")
    from tdmpc2core.envs.ids import GYMNAX_CONTINUOUS, GYMNAX_MAX_STEPS

    assert set(gymnax_suite.GYMNAX_PARAMS) == set(GYMNAX_CONTINUOUS)
    for env_id, fields in gymnax_suite.GYMNAX_PARAMS.items():
        _, default = gymnax.make(env_id)
        assert {f.name: P.plain(getattr(default, f.name)) for f in dataclasses.fields(default)} == fields, env_id
        assert fields[gymnax_suite.GYMNAX_TIME_LIMIT_KEY] == GYMNAX_MAX_STEPS[env_id]


def test_brax_table_is_the_installed_brax():
    envs = pytest.importorskip("brax.envs")
    from brax.envs.base import PipelineEnv

    assert set(inspect.signature(PipelineEnv.__init__).parameters) >= {"n_frames", "debug"}
    for env_id, keys in brax_suite.BRAX_PARAMS.items():
        sig = inspect.signature(envs._envs[env_id].__init__).parameters
        assert tuple(k for k in sig if k not in ("self", "kwargs")) == keys, env_id
        assert "kwargs" in sig  # n_frames and debug reach PipelineEnv


def test_playground_table_is_the_installed_playground():
    registry = pytest.importorskip("mujoco_playground").registry
    from tdmpc2core.envs.ids import PLAYGROUND_DMC_ENVS

    assert set(playground_suite.PLAYGROUND_DT) == set(PLAYGROUND_DMC_ENVS)
    for env_id in PLAYGROUND_DMC_ENVS:
        cfg = registry.get_default_config(env_id)
        assert (cfg.ctrl_dt, cfg.sim_dt) == playground_suite.PLAYGROUND_DT[env_id], env_id
        assert set(cfg.keys()) - {"vision_config"} == set(playground_suite.PLAYGROUND_KEYS) | set(playground_suite.PLAYGROUND_RESERVED), env_id


# ------------------------------------------------------------------- the suites' checks
@pytest.mark.parametrize("env_id, params, message", [
    ("Pendulum-v1", {"max_torq": 1.0}, r"'Pendulum-v1' \(gymnax\): unknown key 'max_torq' \(did you mean "
                                       r"'max_torque'\?\); accepted: max_steps_in_episode, max_speed"),
    ("Pendulum-v1", {"max_steps_in_episode": 1.5}, r"max_steps_in_episode=1.5; need an integer >= 1"),
    ("Pendulum-v1", {"dt": True}, r"dt=True; need a finite number \(default 0.05\)"),
    ("PointRobot-misc", {"dense_reward": 1}, r"dense_reward=1; need true or false"),
    ("hopper", {"n_frame": 2}, r"unknown key 'n_frame' \(did you mean 'n_frames'\?\)"),
    ("ant", {"backend": "warp"}, r"backend='warp'; accepted: \['generalized', 'positional', 'spring', 'mjx'\]"),
    ("ant", {"n_frames": 0}, r"n_frames=0; need an integer >= 1"),
    ("CartpoleBalance", {"ctrl_dt": 0.015}, r"ctrl_dt=0.015 is not a whole number >= 1 of sim_dt=0.01"),
    ("WalkerWalk", {"sim_dt": 0.05}, r"ctrl_dt=0.025 is not a whole number >= 1 of sim_dt=0.05"),
    ("CartpoleBalance", {"ctrl_dt": -1}, r"ctrl_dt=-1; need a number > 0 \(seconds\)"),
    ("CartpoleBalance", {"impl": "warp"}, r"may not override \['impl'\]"),
    ("CartpoleBalance", {"vision": True}, r"vision=True; vision observations are not supported"),
    ("CartpoleBalance", {"episode_lenght": 5}, r"unknown key 'episode_lenght'"),
    ("dmc:cartpole-balance", {"time_limit": 5}, r"dm_control tasks take none \(the official construction, "
                                                r"suite.load\(domain, task, task_kwargs=\{'random': seed\}\)"),
    ("Pendulum-v1", {"g": float("nan")}, r"not plain data"),
    ("Pendulum-v1", [("g", 9.8)], r"must be a mapping"),
])
def test_bad_settings_are_one_line_naming_key_env_and_what_is_accepted(env_id, params, message):
    with pytest.raises(ValueError, match=message) as e:
        check_env_params(env_id, params)
    assert "\n" not in str(e.value) and repr(env_id) in str(e.value)


def test_good_settings_are_canonical_plain_data():
    assert check_env_params("Pendulum-v1", None) == {} == check_env_params("dmc:cartpole-balance", {})
    assert check_env_params("Pendulum-v1", {"max_steps_in_episode": 100, "g": 9}) == {"max_steps_in_episode": 100,
                                                                                       "g": 9}
    assert check_env_params("hopper", {"healthy_z_range": (0.5, 2.0), "n_frames": 2}) == {
        "healthy_z_range": [0.5, 2.0], "n_frames": 2}  # tuples become lists: what a JSON record holds
    assert check_env_params("CartpoleBalance", {"ctrl_dt": 0.02}) == {"ctrl_dt": 0.02}
    assert check_env_params("WalkerWalk", {"ctrl_dt": 0.01, "sim_dt": 0.0025, "vision": False}) == {
        "ctrl_dt": 0.01, "sim_dt": 0.0025, "vision": False}
    # gymnax: the time limit follows max_steps_in_episode; the other suites' follows episode_length
    assert time_limit("Pendulum-v1", env_params={"max_steps_in_episode": 100}) == 100
    assert time_limit("Pendulum-v1", action_repeat=3, env_params={"max_steps_in_episode": 100}) == 33
    assert time_limit("Pendulum-v1") == 200 == time_limit("Pendulum-v1", episode_length=200)
    assert time_limit("CartpoleBalance", env_params={"ctrl_dt": 0.02}) == 500
    assert P.describe({"ctrl_dt": 0.02, "sim_dt": 0.01}) == "ctrl_dt=0.02, sim_dt=0.01" and P.describe({}) == "defaults"


# ------------------------------------------------------------------- the pipeline config
ENV_TASKS = """
protocols:
  demo:
    tasks:
      pendulum: {env_params: {max_steps_in_episode: 100, max_torque: 1.5}}
      cartpole-balance: {env_params: {ctrl_dt: 0.02}}
"""


def test_pipeline_passes_env_params_in_the_task_spec_and_its_time_limit():
    p = resolve(merged(ENV_TASKS))
    specs = {t: json.loads(p.task_spec(t)) for t in p.tasks}
    assert specs["pendulum"]["env_params"] == {"max_steps_in_episode": 100, "max_torque": 1.5}
    assert specs["cartpole-balance"]["env_params"] == {"ctrl_dt": 0.02}
    assert p.task_T == {"pendulum": 100, "cartpole-balance": 500}  # gymnax: its own (now 100-step) limit
    assert yaml.safe_load(p.resolved_yaml)["tasks"]["cartpole-balance"]["env_params"] == {"ctrl_dt": 0.02}
    # without env_params the spec is the one the training rule always had (no rerun of old runs);
    # with them it differs for that task only (the training rule's params.spec: a rerun trigger)
    default = resolve(merged("{}"))
    assert "env_params" not in json.loads(default.task_spec("pendulum"))
    assert default.task_spec("cartpole-balance") != p.task_spec("cartpole-balance")
    one = resolve(merged("protocols: {demo: {tasks: {pendulum: {env_params: {max_torque: 1.5}}}}}"))
    assert one.task_spec("cartpole-balance") == default.task_spec("cartpole-balance")
    assert one.task_spec("pendulum") != default.task_spec("pendulum")
    empty = resolve(merged("protocols: {demo: {tasks: {pendulum: {env_params: {}}}}}"))
    assert empty.task_spec("pendulum") == default.task_spec("pendulum")


def test_defaults_env_params_merge_key_by_key_and_are_named_in_errors():
    p = resolve(merged("""
protocols:
  demo:
    defaults: {env_params: {ctrl_dt: 0.02}}
    tasks:
      pendulum: {env_id: CartpoleSwingup, published: null}
      cartpole-balance: {env_params: {sim_dt: 0.005}}
"""))
    assert json.loads(p.task_spec("cartpole-balance"))["env_params"] == {"ctrl_dt": 0.02, "sim_dt": 0.005}
    assert json.loads(p.task_spec("pendulum"))["env_params"] == {"ctrl_dt": 0.02}
    # a default a gymnax task cannot take: the line says where the key was merged from
    msg = refusal("protocols: {demo: {defaults: {env_params: {ctrl_dt: 0.02}}}}")
    assert msg.startswith("config: protocols.demo.tasks.pendulum.env_params (merged over "
                          "protocols.demo.defaults.env_params): env_params for 'Pendulum-v1' (gymnax): unknown "
                          "key 'ctrl_dt'"), msg


@pytest.mark.parametrize("text, message", [
    ("protocols: {demo: {tasks: {pendulum: {env_params: {max_torq: 1}}}}}",
     "config: protocols.demo.tasks.pendulum.env_params: env_params for 'Pendulum-v1' (gymnax): unknown key "
     "'max_torq' (did you mean 'max_torque'?); accepted: max_steps_in_episode, max_speed, max_torque, dt, g, m, l"),
    ("protocols: {demo: {tasks: {cartpole-balance: {env_params: {ctrl_dt: 0.015}}}}}",
     "config: protocols.demo.tasks.cartpole-balance.env_params: env_params for 'CartpoleBalance' (playground): "
     "ctrl_dt=0.015 is not a whole number >= 1 of sim_dt=0.01"),
    ("protocols: {demo: {tasks: {cartpole-balance: {env_params: {episode_length: 500}}}}}",
     "may not override ['episode_length']"),
    ("protocols: {demo: {tasks: {pendulum: {env_params: {max_steps_in_episode: 2}, agent: {seed_steps: 10}}}}}",
     "shorter than horizon"),  # the time limit it sets goes through the agent's own checks
])
def test_bad_env_params_are_refused_at_load(text, message):
    assert message in refusal(text)


def test_dm_control_tasks_say_they_take_none():
    smoke = merged((ROOT / "workflow/configs/dmcontrol-smoke.yaml").read_text())
    proto = smoke["protocol"]
    task = next(iter(smoke["protocols"][proto]["tasks"]))
    msg = refusal(f"protocols: {{{proto}: {{tasks: {{{task}: {{env_params: {{time_limit: 5}}}}}}}}}}", smoke)
    assert f"protocols.{proto}.tasks.{task}.env_params: env_params={{'time_limit': 5}}" in msg
    assert "dm_control tasks take none" in msg and "episode_length" in msg


def test_schema_takes_env_params_of_plain_values():
    ok = merged(ENV_TASKS)
    jsonschema.validate(ok, SCHEMA)
    for bad in ("protocols: {demo: {tasks: {pendulum: {env_params: {g: {x: 1}}}}}}",
                "protocols: {demo: {tasks: {pendulum: {env_params: [1]}}}}"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(merged(bad), SCHEMA)


def test_checking_env_params_imports_no_jax(tmp_path):
    """The load-time check is plain Python (snakemake -n on a login node without JAX)."""
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(merged(ENV_TASKS)))
    code = ("import json, sys; from tdmpc2core.pipeline.config import resolve; "
            f"p = resolve(json.load(open({str(cfg)!r}))); assert p.task_T['pendulum'] == 100; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('jax', 'gymnax', 'brax', 'mujoco_playground')]; "
            "assert not bad, bad")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]


# ------------------------------------------------------------- the agent and run.json
@pytest.fixture(scope="module")
def pendulum_agents():
    from tdmpc2core import TDMPC2

    return (TDMPC2("Pendulum-v1", **TINY),
            TDMPC2("Pendulum-v1", env_params={"max_steps_in_episode": 100, "max_torque": 1.5}, **TINY))


def test_agent_config_records_env_params_only_when_set(pendulum_agents):
    default, custom = pendulum_agents
    assert "env_params" not in default.config and default.env.env_params == {}
    assert custom.config["env_params"] == {"max_steps_in_episode": 100, "max_torque": 1.5}
    assert custom.config["episode_length_agent_steps"] == 100 and custom.spec.action_high == (1.5,)
    assert custom.env.effective_settings == {"max_steps_in_episode": 100, "max_speed": 8.0, "max_torque": 1.5,
                                             "dt": 0.05, "g": 10.0, "m": 1.0, "l": 1.0}


def test_playground_control_step_is_recorded():
    """The issue's example: an agent on CartpoleBalance at another control step no longer records
    what the default agent records."""
    pytest.importorskip("mujoco_playground")
    from tdmpc2core import TDMPC2

    slow = TDMPC2("CartpoleBalance", env_params={"ctrl_dt": 0.02}, **TINY)
    default = TDMPC2("CartpoleBalance", **TINY)
    assert slow.config != default.config
    assert {k for k in slow.config if slow.config[k] != default.config.get(k)} == {"env_params"}
    assert slow.config["env_params"] == {"ctrl_dt": 0.02}
    assert slow.env.effective_settings == {"ctrl_dt": 0.02, "sim_dt": 0.01, "n_substeps": 2, "impl": "jax"}
    assert default.env.effective_settings["ctrl_dt"] == 0.01


def _run_json(agent, spec: dict, seed: int = 0) -> dict:
    """The run.json train-single writes for ``agent`` (no training: one evaluation of return 0)."""
    from tdmpc2core.dataset import RunInfo
    from tdmpc2core.io.provenance import run_id
    from tdmpc2core.stages import train_single

    spec = train_single.effective_spec(spec, agent)
    hist = {"eval_return": np.zeros((1, 1)), "eval_agent_steps": np.array([0]), "wall_seconds": 0.0}
    episodes = SimpleNamespace(runs=(RunInfo(seed, run_id("pendulum", seed, spec, agent.config)),),
                               num_episodes=1, num_transitions=agent.episode_length)
    session = {"n_timesteps": 1000, "provenance": {"platform": {}}, "ckdir": None, "wall": 0.0,
               "started_at": 0, "attempts": []}
    record = train_single._run_json(SimpleNamespace(task="pendulum"), spec, [seed], agent, hist, 0, seed,
                                    episodes, session, episodes.runs[0].run_id)
    return json.loads(json.dumps(record, default=str))


def test_run_json_records_the_settings_and_the_episode_length_used(pendulum_agents):
    default, custom = pendulum_agents
    spec = {"env_id": "Pendulum-v1", "action_repeat": 1, "episode_length": 1000, "agent_steps": 1000}
    run = _run_json(default, spec)
    assert run["spec"]["episode_length"] == 200  # gymnax keeps its own limit: what the run used
    assert run["env_params"] == {} and run["env_effective"]["max_steps_in_episode"] == 200
    from tdmpc2core.io.provenance import run_id
    assert run["run_id"] == run_id("pendulum", 0, run["spec"], run["agent_config"])  # recomputable from run.json

    run = _run_json(custom, {**spec, "env_params": {"max_steps_in_episode": 100, "max_torque": 1.5}})
    assert run["spec"]["episode_length"] == 100 and run["spec"]["env_params"]["max_torque"] == 1.5
    assert run["env_params"] == run["agent_config"]["env_params"] == {"max_steps_in_episode": 100, "max_torque": 1.5}
    assert run["env_effective"]["max_torque"] == 1.5
    # with an action repeat that does not divide the limit: the simulator steps an episode really has
    three = _run_json(type(default)("Pendulum-v1", action_repeat=3, **TINY), spec)
    assert three["spec"]["episode_length"] == 198 and three["agent_config"]["episode_length_agent_steps"] == 66


# ---------------------------------------------------------- the dataset's task table
def synthetic(task: TaskInfo, lengths, seed=0):
    rng = np.random.default_rng(seed)
    eps = []
    for n in lengths:
        act = rng.uniform(-1, 1, (n + 1, task.action_dim)).astype(np.float32)
        rew = rng.standard_normal(n + 1).astype(np.float32)
        act[0], rew[0] = np.nan, np.nan
        eps.append({"obs": rng.standard_normal((n + 1, task.obs_dim)).astype(np.float32), "action": act,
                    "reward": rew, "terminated": np.zeros(n + 1, bool)})
    return from_episodes(eps, task, {"kind": "export"}, seed=seed)


PEND = TaskInfo("pendulum", 3, 1, 100, 1, 0.95, "Pendulum-v1", {"max_steps_in_episode": 100, "max_torque": 1.5})
CART = TaskInfo("cartpole", 5, 1, 500, 2, 0.99, "CartpoleBalance")


def test_task_table_round_trip_keeps_env_params(tmp_path):
    pool = pool_tasks([synthetic(PEND, [100, 40]), synthetic(CART, [500])])
    path = tmp_path / "pool.parquet"
    save_dataset(pool, path)
    back = load_dataset(path)
    assert back.tasks == (PEND, CART) and back.tasks[0].env_params == PEND.env_params
    assert back.tasks[1].env_params is None
    raw = json.loads(pq.read_schema(path).metadata[b"tdmpc2core.dataset"])
    assert raw["version"] == 2
    assert raw["tasks"][0]["env_params"] == {"max_steps_in_episode": 100, "max_torque": 1.5}
    assert "env_params" not in raw["tasks"][1]  # a task with default settings: the entry files always had
    assert read_metadata(path)["tasks"][0].env_params == PEND.env_params


def test_task_table_without_env_params_reads_as_defaults_and_bad_entries_are_refused(tmp_path):
    ds = synthetic(CART, [500])
    entry = CART.to_json()
    assert "env_params" not in entry and TaskInfo.from_json(entry, "x") == CART  # older files: defaults
    assert TaskInfo.from_json({**entry, "env_params": {}}, "x").env_params is None
    assert hash(PEND) == hash(dataclasses.replace(PEND, env_params=None))  # hashable; compared by ==
    assert PEND != dataclasses.replace(PEND, env_params=None)
    with pytest.raises(DatasetError, match=r"dataset f.parquet: bad task table entry .* env_params must be a "
                                           r"mapping"):
        TaskInfo.from_json({**entry, "env_params": [1]}, "dataset f.parquet")
    with pytest.raises(ValueError, match=r"disagrees with dataset 0 on \{'env_params': \(None, \{'ctrl_dt': 0.02\}\)"):
        concatenate_episodes([ds, synthetic(dataclasses.replace(CART, env_params={"ctrl_dt": 0.02}), [500], 1)])
    both = concatenate_episodes([synthetic(PEND, [100]), synthetic(PEND, [90], 1)])
    assert both.tasks == (PEND,)


# ------------------------------------------------------------------ the rebuild path
def test_multitask_evaluation_rebuilds_each_task_with_its_table_settings():
    """TDMPC2MultiTask(eval_envs=True), as train-multi builds it: each task's env from the pool's
    task table, env_params included (a default Pendulum would have T = 200, not the table's 100)."""
    from tdmpc2core import TDMPC2MultiTask
    from tdmpc2core.agents.multitask_eval import task_env

    env = task_env(PEND)
    assert env.spec.episode_length == 100 and env.env_params == PEND.env_params and env.spec.action_high == (1.5,)
    plain = TaskInfo("plain", 3, 1, 200, 1, 0.95, "Pendulum-v1")
    pool = pool_tasks([synthetic(PEND, [100, 30]), synthetic(plain, [200], 1)])
    with pytest.warns(UserWarning, match="no declared return range"):  # gymnax declares none
        agent = TDMPC2MultiTask(pool, eval_envs=True, **TINY)
    assert [e.env_params for e in agent.eval_envs] == [PEND.env_params, {}]
    assert [e.spec.episode_length for e in agent.eval_envs] == [100, 200]
    assert agent.config["tasks"][0]["env_params"] == PEND.env_params
    assert "env_params" not in agent.config["tasks"][1]  # a default task's entry is unchanged
    # a task table that says other settings than the env given: refused, naming them
    with pytest.raises(ValueError, match=r"eval env 'Pendulum-v1' does not match task 'pendulum' of the dataset: "
                                         r"env_params \{'max_steps_in_episode': 100\} \(env\) vs \{'max_steps_in_episode': "
                                         r"100, 'max_torque': 1.5\} \(task table\)"):
        TDMPC2MultiTask(pool, eval_envs=[task_env(dataclasses.replace(PEND, env_params={"max_steps_in_episode": 100})),
                                         None], **TINY)
