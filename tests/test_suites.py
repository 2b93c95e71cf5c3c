"""The suite registry (tdmpc2core/envs/registry.py): the built-in suites' facts, its errors, and a
toy suite registered here, in the test file, run through make_env, a short training call, the
report's normalisation and the library checks the workflow makes (issue 25 item 4).

Adding a suite is one module and one registry line; this file shows the module part can even
live outside the package: ``register_suite(Suite(...))`` at run time.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tdmpc2core.envs import registry as R
from tdmpc2core.envs.registry import Suite, SuiteReport

TOY_ID = "ToyPoint-v0"
TOY_STEPS = 20  # simulator steps per episode (action repeat 1: T = 20 agent steps)


# --------------------------------------------------------------------------- the toy suite
def _toy_env_class():
    """A 1-D point mass as an :class:`~tdmpc2core.envs.base.Env` (JAX imported only here, as a
    suite's ``build`` does): observation (position, velocity, target), action a force in
    [-2, 2], reward in [0, 1] per simulator step: 1 at the target, 0 at distance >= 2."""
    import jax
    import jax.numpy as jnp

    from tdmpc2core.envs.base import Env, EnvSpec

    class ToyPoint(Env):
        def __init__(self, env_id, *, action_repeat, episode_length):
            self.spec = EnvSpec.from_bounds(env_id, "toypoint", 3, [-2.0], [2.0], action_repeat=action_repeat,
                                            episode_length=episode_length // action_repeat)

        def _raw_reset(self, key):
            x = jax.random.uniform(key, (), jnp.float32, -1.0, 1.0)
            inner = jnp.stack([x, jnp.zeros((), jnp.float32)])
            return inner, jnp.concatenate([inner, jnp.zeros((1,), jnp.float32)])

        def _raw_step(self, inner, env_action, key):
            x, v = inner[0], inner[1]
            v = 0.9 * v + 0.1 * env_action[0]
            x = jnp.clip(x + 0.1 * v, -3.0, 3.0)
            inner = jnp.stack([x, v])
            reward = jnp.clip(1.0 - jnp.abs(x) / 2.0, 0.0, 1.0)
            return inner, jnp.concatenate([inner, jnp.zeros((1,), jnp.float32)]), reward, jnp.zeros((), bool)

    return ToyPoint


def _toy_build(env_id, *, action_repeat, episode_length, env_params, backend):
    if env_params is not None:
        raise ValueError(f"env_params={env_params!r}: the toy suite takes none")
    return _toy_env_class()(env_id, action_repeat=action_repeat, episode_length=episode_length)


TOY = Suite(
    name="toypoint",
    ids=(TOY_ID,),
    build=_toy_build,
    requires=("numpy",),
    default_action_repeat=1,
    published={TOY_ID: "toy-point"},
    report=SuiteReport(label="Toy point mass", version_package="numpy",
                       comparison_note="The toy tasks{tasks} have no published curve.", rank=50,
                       reward_per_step=(0.0, 1.0)),
)


@pytest.fixture(scope="module")
def toy():
    """The toy suite, registered for this module's tests only (other files share the process)."""
    R.register_suite(TOY)
    yield TOY
    R.unregister_suite(TOY.name)


def toy_workflow_task() -> dict:
    """The toy task as a workflow configuration's task entry (``protocols.<p>.tasks.<name>``):
    what the pipeline's configuration check (``tdmpc2core.pipeline.config.resolve``) must
    accept once the suite is registered."""
    return {"env_id": TOY_ID, "episode_length": TOY_STEPS, "action_repeat": 1, "published": None,
            "agent": dict(model_size=1, mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16, num_elites=4,
                          num_pi_trajs=2, iterations=1, batch_size=16, seed_steps=2 * TOY_STEPS,
                          horizon=1, num_enc_layers=1, mpc=False)}  # the policy acts: the smallest programs


# --------------------------------------------------------------------------- the registry
def test_builtin_suites_and_their_ids():
    from tdmpc2core.envs import ids, list_env_ids, suite_of

    names = [s.name for s in R.suites()[:4]]
    assert names == ["gymnax", "brax", "playground", "dmcontrol"]
    assert list(list_env_ids())[:4] == names
    assert R.suite_for("Pendulum-v1").own_time_limit is not None and not R.suite_for("Pendulum-v1").keeps_episode_length
    assert R.suite_for("CartpoleBalance").takes_backend and R.suite_for("dmc:cup-catch").default_action_repeat == 2
    assert suite_of("inverted_pendulum") == "brax"
    assert ids.PAPER_ACTION_REPEAT == {"gymnax": 1, "brax": 1, "playground": 2, "dmcontrol": 2, "metaworld": 2,
                                       "myosuite": 1}  # the last two: tests/test_domains.py
    assert R.suite_for("CartpoleBalance").return_range(1000) == (0.0, 1000.0)
    assert R.suite_for("Pendulum-v1").return_range(200) is None


def test_unknown_id_names_close_matches_and_every_suite():
    with pytest.raises(ValueError, match=r"unknown env id 'Pendulum-v2'\. Did you mean \['Pendulum-v1'") as e:
        R.suite_for("Pendulum-v2")
    # one line: the ids of the suite it looks like (gymnax), and the command that lists every id
    msg = str(e.value)
    assert "gymnax ids (5, closest first): Pendulum-v1," in msg and "`tdmpc2 envs`" in msg
    assert "\n" not in msg and len(msg) <= 400 and "dmcontrol ids" not in msg
    with pytest.raises(ValueError, match="discrete action space"):  # recognised, refused by its suite
        R.suite_for("CartPole-v1")
    with pytest.raises(ValueError, match=r"unknown dm_control task 'dmc:cheetah-rn'\. Did you mean"):
        R.suite_for("dmc:cheetah-rn")
    with pytest.raises(ValueError, match="unknown suite 'nope'"):
        R.get_suite("nope")
    assert R.get_suite("nope", None) is None and R.get_suite("brax").name == "brax"


def test_duplicate_registration_and_taken_ids_are_refused(toy):
    with pytest.raises(ValueError, match="a suite named 'toypoint' is already registered"):
        R.register_suite(TOY)
    with pytest.raises(ValueError, match=r"already owned by another suite: \{'Pendulum-v1': 'gymnax'\}"):
        R.register_suite(Suite(name="other", ids=("Pendulum-v1",), build=_toy_build))
    with pytest.raises(TypeError, match="takes a Suite"):
        R.register_suite({"name": "x"})
    with pytest.raises(ValueError, match="cannot unregister suite 'gymnax'"):
        R.unregister_suite("gymnax")
    with pytest.raises(ValueError, match="report.score='points'"):
        Suite(name="bad", ids=(), build=_toy_build, report=SuiteReport(label="b", score="points"))


def test_a_missing_package_is_one_line_naming_it_and_the_pip_command():
    s = Suite(name="needy", ids=("Needy-v0",), build=_toy_build,
              requires=("numpy", "tdmpc2core-no-such-distribution"), pip_extra="needy")
    assert s.missing() == ["tdmpc2core-no-such-distribution"]
    with pytest.raises(ImportError) as e:
        s.make("Needy-v0")
    assert str(e.value) == ("the needy suite needs tdmpc2core-no-such-distribution, which is not installed: "
                            "pip install 'tdmpc2core[needy]'")
    plain = Suite(name="needy2", ids=("Needy-v1",), build=_toy_build, requires=("tdmpc2core-no-such-distribution",))
    assert str(plain.install_error()).endswith(": pip install tdmpc2core-no-such-distribution")


def test_registry_and_suite_facts_import_no_jax_nor_a_simulator():
    """A login node checks configurations without JAX: the registry, the built-in suites'
    modules, the id functions and the report facts import neither JAX nor a simulator."""
    code = ("import sys; from tdmpc2core.envs import registry as R, suite_of, time_limit, list_env_ids; "
            "R.suites(); R.report_facts(); R.packages(); suite_of('dmc:cheetah-run'); time_limit('Pendulum-v1'); "
            "list_env_ids(); R.suite_for('CartpoleBalance').missing(); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('jax', 'gymnax', 'brax', 'mujoco', 'mujoco_playground', 'dm_control')); assert not bad, bad")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_provenance_packages_and_published_names_follow_the_registry():
    from tdmpc2core.envs.suites import playground
    from tdmpc2core.io import provenance as PV
    from tdmpc2core.report import published as P

    builtin = tuple(dict.fromkeys(d for s in R.suites()[:6] for d in s.requires))  # the built-in six
    assert PV.PACKAGES == PV.packages(builtin)
    assert playground.PUBLISHED == P.PLAYGROUND_TO_DMC
    assert R.suite_for("dmc:cup-catch").published["dmc:cup-catch"] == "cup-catch"
    assert set(playground.PUBLISHED.values()) <= set(P.published_tasks())


# --------------------------------------------------------------------------- the toy suite end to end
def test_toy_suite_through_make_env(toy):
    import jax

    from tdmpc2core.envs import default_action_repeat, list_env_ids, make_env, suite_of, time_limit

    assert suite_of(TOY_ID) == "toypoint" and list_env_ids()["toypoint"] == [TOY_ID]
    assert R.suite_for(TOY_ID) is TOY and TOY.published[TOY_ID] == "toy-point" and TOY.keeps_episode_length
    assert default_action_repeat(TOY_ID) == 1 and time_limit(TOY_ID, episode_length=TOY_STEPS) == TOY_STEPS
    with pytest.raises(ValueError, match=r"Did you mean \['ToyPoint-v0'\]"):
        suite_of("ToyPoint-v1")
    with pytest.raises(ValueError, match="backend='jax' applies only to playground envs; 'ToyPoint-v0' is a toypoint env"):
        make_env(TOY_ID, episode_length=TOY_STEPS, backend="jax")
    with pytest.raises(ValueError, match="not divisible by action_repeat=3"):
        make_env(TOY_ID, episode_length=TOY_STEPS, action_repeat=3)
    env = make_env(TOY_ID, episode_length=TOY_STEPS, action_repeat=2)
    assert (env.spec.suite, env.spec.obs_dim, env.spec.action_dim, env.spec.episode_length) == ("toypoint", 3, 1, 10)
    state, obs = env.reset(jax.random.PRNGKey(0))
    state, out = jax.jit(env.step)(state, np.ones(1, np.float32), jax.random.PRNGKey(1))
    assert obs.shape == (3,) and out.obs.shape == (3,) and 0.0 <= float(out.reward) <= 2.0


@pytest.mark.slow
def test_toy_suite_trains_and_the_report_normalises_its_returns(toy):
    from tdmpc2core import TDMPC2
    from tdmpc2core.envs import report_facts, suite_of
    from tdmpc2core.report import analysis as A

    task = toy_workflow_task()
    agent = TDMPC2(TOY_ID, episode_length=task["episode_length"], action_repeat=task["action_repeat"],
                   **task["agent"])
    assert agent.spec.suite == "toypoint" and agent.episode_length == TOY_STEPS
    _, hist = agent.train(seed=0, n_timesteps=3 * TOY_STEPS, eval_every=3 * TOY_STEPS, eval_episodes=1)
    returns = np.asarray(hist["eval_returns"], np.float64)
    assert returns.size and np.isfinite(returns).all()
    assert np.all(np.asarray(hist["eval_lengths"]) == TOY_STEPS)

    facts = report_facts()
    tasks = {"toy": {"env_id": TOY_ID, "episode_length": TOY_STEPS}, "pendulum": {"env_id": "Pendulum-v1"}}
    ranges = A.return_ranges(tasks, suite_of, facts)
    assert ranges == {"toy": (0.0, float(TOY_STEPS)), "pendulum": None}
    scores = A.normalized_scores(returns, ranges["toy"])
    assert np.all((scores >= 0) & (scores <= 100)) and np.allclose(scores, 100 * returns / TOY_STEPS)
    assert np.isnan(A.normalized_scores(returns, ranges["pendulum"])).all()
    assert list(A.simulators(tasks, suite_of, facts)) == ["gymnax", "toypoint"]  # by rank: gymnax 2, toy 50
    used, note = A.simulator_text(tasks, suite_of, {"numpy": "9.9"}, suites=facts)
    assert "Toy point mass 9.9 (1 task)" in used and note == "The toy tasks have no published curve."


def test_toy_suite_passes_the_workflows_configuration_check(toy):
    """The workflow's configuration check (tdmpc2core.pipeline.config.resolve, what
    workflow/rules/common.smk calls) accepts a protocol of the toy task once the suite is
    registered, with its time limit and default action repeat from the registry, and refuses
    the same id once the suite is gone."""
    import copy

    import yaml

    from tdmpc2core.pipeline.config import ConfigError, resolve

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())
    task = {k: v for k, v in toy_workflow_task().items() if k != "action_repeat"}
    config["protocol"] = "toy"
    config["video"] = "off"  # the toy suite has no renderer (video: last refuses it; tests/test_videos.py)
    config["protocols"] = {"toy": {"label": "toy", "tasks": {"toy": {
        **task, "agent_steps": 4 * TOY_STEPS, "eval_every": TOY_STEPS, "eval_episodes": 1,
        "resources": {"gpu": 0, "runtime": 5, "mem_mb": 1000}}}}}
    p = resolve(copy.deepcopy(config))
    assert list(p.tasks) == ["toy"] and p.task_T == {"toy": TOY_STEPS}
    assert p.tasks["toy"]["action_repeat"] == R.suite_for(TOY_ID).default_action_repeat
    R.unregister_suite(TOY.name)
    try:
        with pytest.raises(ConfigError, match=TOY_ID):
            resolve(copy.deepcopy(config))
    finally:
        R.register_suite(TOY)
