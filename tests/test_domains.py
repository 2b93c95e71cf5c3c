"""The Meta-World (50 tasks) and MyoSuite (10 tasks) suites (issue 27): every task built through
the registry and stepped through our host side (reset, shapes, finite reward and success,
the official wrappers' semantics, exactness under restore, determinism under a seed), one jitted
100-step episode per suite, the registry's ids, errors and install message, the weld-reset
compatibility layer and the v3 deviation (docs/deviations.md E10).

Needs the ``[metaworld]`` and ``[myosuite]`` extras (``.ci/run`` installs them)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

from tdmpc2core.envs import registry as R
from tdmpc2core.envs.domain_ids import (METAWORLD_ENVS, METAWORLD_TASKS, MYOSUITE_ENVS, MYOSUITE_PUBLISHED,
                                        MYOSUITE_TASKS, metaworld_env_name)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL = METAWORLD_ENVS + MYOSUITE_ENVS
OBS_DIM = {"myo-reach": 115, "myo-pose": 108, "myo-obj-hold": 91, "myo-key-turn": 93, "myo-pen-twirl": 83}


def env_of(env_id):
    """A fresh env of ``env_id`` (not cached: a MyoSuite env holds about 100 MB, a Meta-World one
    about 30 MB, so the tests build one at a time and drop it)."""
    from tdmpc2core.envs import make_env

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_env(env_id)


# ------------------------------------------------------------------------- registry (no JAX)
def test_ids_names_and_published_names():
    ids = R.suites()
    names = [s.name for s in ids]
    assert names[-2:] == ["metaworld", "myosuite"]
    assert R.get_suite("metaworld").ids == METAWORLD_ENVS and len(METAWORLD_ENVS) == 50
    assert R.get_suite("myosuite").ids == MYOSUITE_ENVS and len(MYOSUITE_ENVS) == 10
    # the official mapping (nicklashansen/tdmpc2 tdmpc2/envs/myosuite.py)
    assert MYOSUITE_TASKS["myo-key-turn-hard"] == "myoHandKeyTurnRandom-v0"
    assert MYOSUITE_TASKS["myo-obj-hold"] == "myoHandObjHoldFixed-v0"
    assert R.get_suite("myosuite").published["myo-pen-twirl-hard"] == "myo-hand-pen-twirl-hard"
    assert MYOSUITE_PUBLISHED["myo-reach"] == "myo-hand-reach"
    assert R.get_suite("metaworld").published["mw-pick-place"] == "mw-pick-place"
    # the 50 tasks are mt80's Meta-World part
    from tdmpc2core.envs.official_tasks import task_set

    assert sorted(t[3:] for t in task_set("mt80") if t.startswith("mw-")) == list(METAWORLD_TASKS)
    for s in ("metaworld", "myosuite"):
        suite = R.get_suite(s)
        assert suite.report.score == "success" and suite.pip_extra == s
    from tdmpc2core.envs import list_env_ids, time_limit

    listed = list_env_ids()
    assert tuple(listed["metaworld"]) == METAWORLD_ENVS and tuple(listed["myosuite"]) == MYOSUITE_ENVS
    assert time_limit("mw-reach") == 100 and time_limit("myo-pose") == 100 == time_limit("myo-pose", episode_length=100)
    assert R.suite_for("mw-reach").default_action_repeat == 2 and R.suite_for("myo-reach").default_action_repeat == 1


def test_misspelt_ids_name_the_closest_and_the_suite():
    with pytest.raises(ValueError, match=r"unknown env id 'mw-pick-plase'\. Did you mean \['mw-pick-place'") as e:
        R.suite_for("mw-pick-plase")
    assert "metaworld ids" in str(e.value) and "`tdmpc2 envs`" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"Did you mean \['myo-reach-hard'") as e:
        R.suite_for("myo-reach-hardd")
    assert "myosuite ids" in str(e.value)
    with pytest.raises(ValueError, match="env_params=.*Meta-World tasks take none"):
        R.get_suite("metaworld").env_params("mw-reach", {"x": 1})
    with pytest.raises(ValueError, match="MyoSuite tasks take none"):
        R.get_suite("myosuite").env_params("myo-reach", {"x": 1})


def test_missing_package_is_one_line_naming_the_extra():
    import dataclasses

    for name in ("metaworld", "myosuite"):
        real = R.get_suite(name)
        fake = dataclasses.replace(real, name=name + "_probe", ids=("probe-" + name,),
                                   requires=real.requires + ("not-a-real-distribution-xyz",))
        with pytest.raises(ImportError) as e:
            fake.make("probe-" + name)
        msg = str(e.value)
        assert f"pip install 'tdmpc2core[{name}]'" in msg and "not-a-real-distribution-xyz" in msg and "\n" not in msg


def test_importing_the_registry_imports_no_simulator():
    code = ("import sys, tdmpc2core.envs as E; E.list_env_ids(); E.suite_of('mw-reach'); E.suite_of('myo-reach'); "
            "print([m for m in ('jax', 'mujoco', 'metaworld', 'myosuite') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------ every task, host side
def _official_metaworld(env_id, seed, actions):
    """The official wrapper's episode on Meta-World's own env: reset, a zero step, the reset's
    observation; each action twice, rewards summed, the last step's success."""
    from gymnasium.utils import seeding

    from tdmpc2core.envs.metaworld_env import make_metaworld_env

    env = make_metaworld_env(env_id, seed=0)
    env.seeded_rand_vec = True
    env.np_random, _ = seeding.np_random(seed)
    obs, _ = env.reset()
    env.step(np.zeros(4, np.float32))
    out = [(np.asarray(obs, np.float32), None, None)]
    for a in actions:
        r = 0.0
        for _ in range(2):
            o, rr, _, _, info = env.step(a.copy())
            r += float(rr)
        out.append((np.asarray(o, np.float32), np.float32(r), float(info["success"]) > 0.5))
    return out


def _official_myosuite(env_id, seed, actions):
    from tdmpc2core.envs.myosuite_env import make_myosuite_env

    env = make_myosuite_env(env_id)
    obs, _ = env.reset(seed=seed)
    out = [(np.asarray(obs, np.float32), None, None)]
    for a in actions:
        o, r, _, _, info = env.step(a.copy())
        out.append((np.asarray(o, np.float32), np.float32(r), bool(info["solved"])))
    return out


@pytest.mark.parametrize("suite", ["metaworld", "myosuite"])
def test_every_task_steps_exactly_as_the_official_wrapper(suite):
    """Each task: spec (obs, action, T = 100, repeat, success), a batch of two seeded episodes
    stepped through the host (each step restores the whole state: the two episodes interleave on
    one scratch simulator) equal to the official wrapper's own episode on a fresh env, bit for
    bit; finite rewards; the same seed gives the same reset; random tasks' seeds differ."""
    ids = METAWORLD_ENVS if suite == "metaworld" else MYOSUITE_ENVS
    official = _official_metaworld if suite == "metaworld" else _official_myosuite
    n_steps = 3
    for env_id in ids:
        env = env_of(env_id)
        s = env.spec
        assert (s.suite, s.episode_length, s.has_success, s.can_terminate) == (suite, 100, True, False), env_id
        if suite == "metaworld":
            assert (s.obs_dim, s.action_dim, s.action_repeat, s.sim_episode_length) == (39, 4, 2, 200), env_id
        else:
            assert (s.obs_dim, s.action_dim, s.action_repeat) == (OBS_DIM[env_id.removesuffix("-hard")], 39, 1)
        assert s.action_low == (-1.0,) * s.action_dim and s.action_high == (1.0,) * s.action_dim
        host = env._host
        rng = np.random.default_rng(len(env_id))
        acts = rng.uniform(-1, 1, (n_steps, s.action_dim)).astype(np.float32)
        seeds = np.array([11, 12], np.uint32)
        phys, model, attrs, obs = host.reset(seeds)
        assert obs.shape == (2, s.obs_dim) and obs.dtype == np.float32 and np.isfinite(obs).all()
        ref = official(env_id, 11, acts)
        np.testing.assert_array_equal(obs[0], ref[0][0], err_msg=env_id)
        for k in range(n_steps):
            phys, attrs, o, r, succ = host.step(phys, model, attrs, acts[k], s.action_repeat)
            assert np.isfinite(o).all() and np.isfinite(r).all() and succ.dtype == bool, env_id
            np.testing.assert_array_equal(o[0], ref[k + 1][0], err_msg=f"{env_id} step {k}")
            assert r[0] == ref[k + 1][1] and succ[0] == ref[k + 1][2], (env_id, k)
        again = host.reset(seeds[:1])[3]
        np.testing.assert_array_equal(again[0], obs[0], err_msg=env_id)
        if suite == "metaworld" or env_id.endswith("-hard"):
            assert not np.array_equal(obs[0], obs[1]), f"{env_id}: two seeds, one initial state"
        del env, host  # no gc.collect() per task: a full collection walks the whole worker's heap
        # (up to ~2 s each late in the suite); without it the 50 tasks peak 40 MB higher


def test_reset_redraws_only_what_the_state_carries():
    """The model rows a reset changes are the ones the state carries (over more seeds than the
    host used to find them), for every task with per-episode model writes."""
    for env_id in ("mw-pick-place", "mw-door-open", "mw-assembly") + tuple(i for i in MYOSUITE_ENVS if i.endswith("-hard")):
        host = env_of(env_id)._host
        carried = {f: set(rows.tolist()) for f, rows, *_ in host._fields}
        snaps = []
        for seed in (21, 22, 23, 24):
            host._reset_episode(seed)
            snaps.append({f: np.array(getattr(host.model, f)) for f in ("body_pos", "body_quat", "site_pos",
                                                                         "site_size", "geom_size", "geom_pos")})
        for f in snaps[0]:
            for other in snaps[1:]:
                a, b = snaps[0][f], other[f]
                rows = set(np.flatnonzero(np.any((a != b).reshape(len(a), -1), axis=1)).tolist())
                assert rows <= carried.get(f, set()), (env_id, f, rows - carried.get(f, set()))
        del host


# --------------------------------------------------------------- jitted episodes (one per suite)
@pytest.mark.parametrize("env_id", ["mw-reach", "myo-pose-hard"])
def test_jitted_vmapped_episode_of_100_steps_is_deterministic(env_id):
    import jax
    import jax.numpy as jnp

    env = env_of(env_id)
    T = env.spec.episode_length

    @jax.jit
    def episode(keys):
        def one(key):
            state, obs0 = env.reset(key)

            def body(state, k):
                a = jax.random.uniform(k, (env.spec.action_dim,), minval=-1.0, maxval=1.0)
                state, out = env.step(state, a, k)
                return state, (out.reward, out.success, out.truncated, out.terminated)

            state, outs = jax.lax.scan(body, state, jax.random.split(key, T))
            return obs0, state.t, outs

        return jax.vmap(one)(keys)

    keys = jax.random.split(jax.random.key(3), 2)
    obs0, t, (rew, succ, trunc, term) = episode(keys)
    assert t.tolist() == [T, T] and T == 100
    assert trunc[:, -1].all() and not trunc[:, :-1].any() and not term.any()
    assert np.isfinite(np.asarray(rew)).all() and succ.dtype == jnp.bool_
    obs0b, _, (rew_b, succ_b, _, _) = episode(keys)
    np.testing.assert_array_equal(np.asarray(rew), np.asarray(rew_b))
    np.testing.assert_array_equal(np.asarray(succ), np.asarray(succ_b))
    assert not np.array_equal(np.asarray(obs0[0]), np.asarray(obs0[1]))
    # the seed of a reset is the env's documented function of its key
    assert int(env.reset_seed(keys[0])) == int(jax.random.bits(keys[0], (), jnp.uint32))


# ------------------------------------------------------------ compatibility layer, deviation
def test_weld_reset_writes_metaworlds_row_and_the_flag_does_not_change_the_physics():
    import mujoco

    from tdmpc2core.envs.metaworld_env import WELD_ROW, make_metaworld_env

    trajs = []
    for flag in (0.0, 1.0):
        env = make_metaworld_env("mw-pick-place")
        welds = [i for i in range(env.model.neq) if env.model.eq_type[i] == mujoco.mjtEq.mjEQ_WELD]
        assert welds and env.model.eq_data.shape[1] == 12  # mujoco 3.17's rows
        for i in welds:
            assert tuple(env.model.eq_data[i, :11]) == WELD_ROW and env.model.eq_data[i, 11] == 0.0
            env.model.eq_data[i, 11] = flag
        from gymnasium.utils import seeding

        env.seeded_rand_vec = True
        env.np_random, _ = seeding.np_random(5)  # the same goal in both runs
        env.reset()
        rng = np.random.default_rng(0)
        trajs.append(np.array([env.step(rng.uniform(-1, 1, 4).astype(np.float32))[0] for _ in range(30)]))
    np.testing.assert_array_equal(trajs[0], trajs[1])
    # the patch lives only while an env is built
    from metaworld import sawyer_xyz_env

    assert sawyer_xyz_env.SawyerMocapBase.reset_mocap_welds.__module__ == "metaworld.sawyer_xyz_env"


def test_metaworld_tasks_are_v3_not_the_papers_v2():
    """docs/deviations.md E10: mw-<name> is <name>-v3-goal-observable (the paper: -v2-)."""
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE

    assert metaworld_env_name("mw-reach") == "reach-v3-goal-observable"
    assert all(metaworld_env_name(i) in ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE for i in METAWORLD_ENVS)
    with open(os.path.join(ROOT, "docs", "deviations.md")) as f:
        text = f.read()
    entry = re.search(r"\*\*E10\..*?(?=\n\*\*E11\.|\n## )", text, re.S).group(0)
    assert "v3" in entry and "test_metaworld_tasks_are_v3_not_the_papers_v2" in entry


def test_expert_table_in_the_docs_is_the_recorded_results():
    """docs/metaworld.md's expert-policy table is the one benchmarks/metaworld_experts.py makes from
    the recorded results, and our adapter equals Meta-World's env on our stack in every episode."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("mw_experts", os.path.join(ROOT, "benchmarks", "metaworld_experts.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = {}
    for which in ("ours", "reference", "raw"):
        with open(os.path.join(ROOT, "benchmarks", "results", f"metaworld_experts_{which}.json")) as f:
            res[which] = json.load(f)
    assert set(res["ours"]["tasks"]) == set(METAWORLD_ENVS) == set(res["reference"]["tasks"])
    assert res["ours"]["versions"]["mujoco"] == "3.17.0" and res["reference"]["versions"]["mujoco"] == "3.3.0"
    assert res["reference"]["versions"]["metaworld"] == "3.1.1"
    with open(os.path.join(ROOT, "docs", "metaworld.md")) as f:
        doc = f.read()
    assert mod.table(res["ours"], res["reference"]) in doc
    assert mod.same_episodes(res["ours"], res["raw"]) == (500, 500)


def test_mt80_resolves_to_80_runnable_tasks_and_names_the_extra_when_missing(monkeypatch):
    """mt80's 50 Meta-World tasks have env ids (docs/deviations.md M8): with mt30's 30 dm_control
    tasks, 80 of 80 run; each row rebuilds as its data was collected (T 100, action repeat 2);
    without the [metaworld] extra the reason is the install line."""
    from tdmpc2core.agents.multitask_eval import task_env
    from tdmpc2core.envs import official_tasks as OT
    from tdmpc2core.resources import official_task_sets

    mt80 = OT.task_set("mt80")
    assert [t for t in mt80 if OT.unavailable_reason(t) is not None] == []
    assert all(OT.env_id_of(t) == t for t in mt80 if t.startswith("mw-"))
    row = next(r for r in official_task_sets()["mt80"] if r["name"] == "mw-assembly")

    class Row:
        env_id, action_repeat, episode_length, env_params = row["env_id"], row["action_repeat"], row["episode_length"], None

    env = task_env(Row)
    assert (env.spec.env_id, env.spec.episode_length, env.spec.action_repeat, env.spec.obs_dim) == ("mw-assembly", 100, 2, 39)
    real = R.Suite.missing
    monkeypatch.setattr(R.Suite, "missing", lambda self: ["metaworld"] if self.name == "metaworld" else real(self))
    assert "pip install 'tdmpc2core[metaworld]'" in OT.unavailable_reason("mw-reach")
    assert OT.unavailable_reason("cup-spin") is None


# ------------------------------------------------- episode lengths in effect, simulator errors (issue 44)
def test_episode_lengths_a_suite_would_not_keep_are_refused_naming_the_limit(tmp_path, capsys):
    """Meta-World keeps its own 100-agent-step episodes: another episode_length is refused where
    the configuration is resolved (library, `tdmpc2 train-single`, the workflow's check that
    `snakemake -n` runs) with the limit named, never run as 200 simulator steps without a word;
    the adapter refuses an episode past Meta-World's max_path_length (it would step into
    Meta-World's truncation error); the lengths in effect are what is recorded."""
    import copy
    import json

    import yaml

    from tdmpc2core import TDMPC2, cli
    from tdmpc2core.envs import time_limit
    from tdmpc2core.envs.metaworld_env import MetaWorldEnv
    from tdmpc2core.envs.suites.metaworld import SUITE as METAWORLD
    from tdmpc2core.pipeline.config import ConfigError, resolve

    limit = r"episode_length=2000 for 'mw-reach': the metaworld suite ends its episodes at its own time limit, 200 " \
            r"simulator steps \(T = 100 agent steps at action_repeat=2\)"
    with pytest.raises(ValueError, match=limit):
        TDMPC2("mw-reach", episode_length=2000, action_repeat=2)
    with pytest.raises(ValueError, match="episode_length=1000 for 'myo-pose'.* 100 simulator steps"):
        time_limit("myo-pose", episode_length=1000)
    from tdmpc2core.envs import sim_episode_length

    assert sim_episode_length("mw-reach") == 200 == sim_episode_length("mw-reach", episode_length=200)
    with pytest.raises(ValueError, match=r"episode_length=500 for 'mw-reach': Meta-World refuses to step past "
                                         r"max_path_length=500 .* at most 499 \(498 at action_repeat=2"):
        MetaWorldEnv("mw-reach", suite=METAWORLD.name, action_repeat=2, episode_length=500)
    # the CLI: one line, exit 1, before anything is built or trained
    spec = {"env_id": "mw-reach", "episode_length": 2000, "agent_steps": 1000}
    assert cli.main(["train-single", "--task", "mw", "--spec", json.dumps(spec), "--seeds", "0",
                     "--outdir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "200 simulator steps" in err[-1] and not (tmp_path / "out").exists()
    # the workflow (what `snakemake -n` calls): refused with the key that set it, else recorded as in effect
    config = yaml.safe_load(open(os.path.join(ROOT, "workflow/configs/metaworld-smoke.yaml")))
    demo = yaml.safe_load(open(os.path.join(ROOT, "config.yaml")))
    merged = {**demo, **{k: v for k, v in config.items() if k != "protocols"}, "protocols": config["protocols"]}
    bad = copy.deepcopy(merged)
    bad["protocols"]["metaworld-smoke"]["tasks"]["mw-reach"]["episode_length"] = 1200
    with pytest.raises(ConfigError, match=r"^config: protocols.metaworld-smoke.tasks.mw-reach: env_id 'mw-reach' "
                                          r"\(episode_length set in protocols.metaworld-smoke.tasks.mw-reach"
                                          r".episode_length\): episode_length=1200 .* 200 simulator steps"):
        resolve(bad)
    del merged["protocols"]["metaworld-smoke"]["defaults"]["episode_length"]  # not needed: the suite's own
    p = resolve(merged)
    assert p.tasks["mw-reach"]["episode_length"] == 200 and p.task_T["mw-reach"] == 100
    assert yaml.safe_load(p.resolved_yaml)["tasks"]["mw-reach"]["episode_length"] == 200
    assert json.loads(p.task_spec("mw-reach"))["episode_length"] == 200
    demo_p = resolve(copy.deepcopy(demo))  # the demo's gymnax Pendulum: its own 200, no longer 1000
    assert yaml.safe_load(demo_p.resolved_yaml)["tasks"]["pendulum"]["episode_length"] == 200


def test_an_exception_inside_the_host_simulator_stops_the_run_with_its_message():
    """Meta-World raising inside a jitted step (here its truncation error, the env's
    max_path_length lowered so that the 30th agent step runs past it) gives NaN for that
    call's items, and the env raises SimulatorError with Meta-World's message after the call,
    as the training loop (after every call of its program) and the evaluations do."""
    import types

    import jax

    from tdmpc2core.agents.single_task import OnlineProgram

    env = env_of("mw-reach")
    env._host.env.max_path_length = 50  # the reset takes a step: agent step 25 (steps 50, 51) is past it

    @jax.jit
    def run(key):
        state, _ = env.reset(key)

        def body(state, k):
            state, out = env.step(state, jax.numpy.zeros(env.spec.action_dim), k)
            return state, out.obs[0]

        return jax.lax.scan(body, state, jax.random.split(key, 30))[1]

    first = np.asarray(run(jax.random.key(0)))
    assert np.isfinite(first[:24]).all() and np.isnan(first[24:]).all()
    with pytest.raises(Exception, match=r"^mw-reach: the metaworld simulator raised ValueError: You must reset "
                                        r"the env manually once truncate==True in a host step at the end of") as e:
        env.raise_host_error("at the end of the test's call")
    from tdmpc2core.envs.base import SimulatorError

    assert type(e.value) is SimulatorError
    env.raise_host_error()  # raised once
    # the training loop asks after every call of its program, before its other checks
    env._host.errors.add("step", ValueError("boom"))
    prog = OnlineProgram(types.SimpleNamespace(n_envs=1, seed_steps=10, env=env))
    with pytest.raises(SimulatorError, match=r"ValueError: boom in a host step in the call of the training "
                                             r"program that ended at agent step 7"):
        prog.after_call(None, 7)


def test_the_records_hold_what_ran_the_env_the_rules_and_the_lengths(tmp_path):
    """run.json names Meta-World's env (reach-v3-goal-observable), its reward function version
    and max_path_length, and the rule of final_eval_success; eval.parquet's success columns say
    their rule in the file (field metadata); the report's return ranges come from the recorded
    lengths, never a guessed 1000 (issue 44)."""
    import json
    import types

    import pyarrow.parquet as pq

    from tdmpc2core import TDMPC2
    from tdmpc2core.envs import report_facts, suite_of
    from tdmpc2core.report import analysis as A
    from tdmpc2core.stages import outputs as O
    from tdmpc2core.stages import train_single

    agent = TDMPC2("mw-reach", model_size=1, mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16, num_elites=4,
                   num_pi_trajs=2, iterations=1, batch_size=16)
    spec = train_single.effective_spec({"env_id": "mw-reach", "agent_steps": 1000}, agent)
    E = 2
    hist = {"eval_return": np.zeros((1, 1)), "eval_agent_steps": np.array([0]), "eval_env_frames": np.array([0]),
            "eval_returns": np.zeros((1, 1, E)), "eval_lengths": np.full((1, 1, E), 100),
            "eval_success": np.array([[[True, False]]]), "eval_success_any": np.array([[[True, True]]]),
            "wall_seconds": 0.0}
    session = {"n_timesteps": 1000, "provenance": {"platform": {}}, "ckdir": None, "wall": 0.0, "started_at": 0,
               "attempts": []}
    run = json.loads(json.dumps(train_single._run_json(types.SimpleNamespace(task="mw-reach"), spec, [0], agent, hist,
                                                       0, 0, None, session, "rid"), default=str))
    assert run["spec"]["episode_length"] == 200
    assert run["env_effective"] == {"env_name": "reach-v3-goal-observable", "env_class": "ReachV3GoalObservable",
                                    "reward_function_version": "v2", "max_path_length": 500}
    assert run["final_eval_success"] == 0.5 and "last step" in run["final_eval_success_rule"]
    O.write_table(tmp_path / "eval.parquet", "single_eval", O.single_eval_columns("mw-reach", 0, 0, hist, E))
    schema = pq.read_schema(tmp_path / "eval.parquet")
    assert b"last step" in schema.field("success").metadata[b"description"]
    assert b"any step" in schema.field("success_any").metadata[b"description"]
    assert pq.read_table(tmp_path / "eval.parquet")["success"].to_pylist() == [True, False]
    # normalisation: the recorded length (a run's record first), none without one
    tasks = {"cart": {"env_id": "dmc:cartpole-balance", "episode_length": 200}, "bare": {"env_id": "dmc:cartpole-balance"}}
    assert A.return_ranges(tasks, suite_of, report_facts()) == {"cart": (0.0, 200.0), "bare": None}
    assert A.return_ranges(tasks, suite_of, report_facts(), lengths={"bare": 1000})["bare"] == (0.0, 1000.0)
