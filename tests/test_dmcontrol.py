"""dm_control as an environment suite (tdmpc2core.envs.dmcontrol_env): ids and errors, the
official wrapper's conventions checked against dm_control stepped natively, the host step's
state round trip (batching, determinism, model fields), the custom mt30 tasks' rewards, and
a short TDMPC2 run of two seeds resumed from a checkpoint."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tdmpc2core.envs import list_env_ids, make_env, suite_of
from tdmpc2core.envs import dmcontrol_env as D
from tdmpc2core.envs import dmcontrol_tasks as C

KEY = jax.random.PRNGKey(0)
ROOT = Path(__file__).resolve().parents[1]


def flat(obs_dict):
    """The official flattening: the dict's values in order, each flattened, as float32."""
    return np.concatenate([np.asarray(v).ravel() for v in obs_dict.values()]).astype(np.float32)


def flat64(obs_dict):
    """The dict's values in order, each flattened, in float64 (as dm_control computes them)."""
    return np.concatenate([np.asarray(v, np.float64).ravel() for v in obs_dict.values()])


def native(name, seed):
    """dm_control itself with the official action wrapper (actions in [-1, 1])."""
    from dm_control.suite.wrappers import action_scale

    return action_scale.Wrapper(D.load_environment(name, seed=seed), minimum=-1.0, maximum=1.0)


# ----------------------------------------------------------------------- ids and errors
def test_ids_are_dm_controls_suite_without_lqr_plus_the_custom_tasks():
    D._import_dm_control()  # quiet about the missing display
    from dm_control import suite

    assert set(D._SUITE_TASKS) == set(suite.ALL_TASKS) - {("lqr", "lqr_2_1"), ("lqr", "lqr_6_2")}
    ids = list_env_ids()["dmcontrol"]
    assert len(ids) == len(set(ids)) == 49 + 11
    assert {"dmc:cheetah-run", "dmc:cup-catch", "dmc:pointmass-easy", "dmc:cartpole-balance-sparse",
            "dmc:humanoid_CMU-stand", "dmc:walker-walk-backwards", "dmc:cup-spin",
            "dmc:reacher-three-easy", "dmc:reacher-three-hard"} <= set(ids)
    assert all(suite_of(i) == "dmcontrol" for i in ids)
    # the official parse of a task name (tdmpc2/envs/dmcontrol.py) finds the same (domain, task)
    for name, (domain, task) in D.SUITE_TASKS.items():
        if "_" in domain and domain not in ("ball_in_cup", "point_mass"):
            continue  # humanoid_CMU: no official name; ours splits at the first hyphen
        d, t = name.replace("-", "_").split("_", 1)
        assert (dict(cup="ball_in_cup", pointmass="point_mass").get(d, d), t) == (domain, task)


def test_importing_envs_imports_no_simulator():
    code = ("import sys, tdmpc2core.envs as E; E.list_env_ids(); E.suite_of('dmc:cheetah-run'); "
            "print([m for m in ('dm_control', 'mujoco') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("env_id, needles", [
    ("dmc:cheetah-runn", ["unknown dm_control task 'dmc:cheetah-runn'", "Did you mean", "'dmc:cheetah-run'"]),
    ("dmc:ball_in_cup-catch", ["'dmc:cup-catch'"]),
    ("dmc:reacher-four-easy", ["not available", "four-link reacher", "dm_control does not ship"]),
    ("dmc:fish-obstacles", ["not available", "walls"]),
    ("dmc:lqr-lqr-2-1", ["not available", "drawn at random"]),
])
def test_unknown_and_refused_tasks_name_the_reason_and_the_accepted_ids(env_id, needles):
    for fn in (suite_of, make_env):
        with pytest.raises(ValueError) as e:
            fn(env_id)
        msg = str(e.value)
        for n in needles:
            assert n in msg, (n, msg[:300])
        # the accepted ids closest first, at most 10, and the command that lists them all
        assert "dm_control ids (60, closest first): dmc:" in msg and "more; `tdmpc2 envs` lists" in msg, msg
        assert len(msg) <= 400 and "\n" not in msg


def test_bad_arguments():
    with pytest.raises(ValueError, match="applies only to playground envs"):
        make_env("dmc:cartpole-balance", backend="jax")
    with pytest.raises(ValueError, match="dm_control tasks take none"):
        make_env("dmc:cartpole-balance", env_params={"time_limit": 5})
    with pytest.raises(ValueError, match="divisible"):
        make_env("dmc:cartpole-balance", action_repeat=3)
    with pytest.raises(ValueError, match="custom DMControl task 'reacher-four-easy' is not defined .*four-link"):
        C.load_custom("reacher-four-easy")


# ------------------------------------------------------------ conventions vs native
@pytest.mark.parametrize("name", ["cheetah-run", "hopper-hop", "walker-walk", "cup-spin"])
def test_steps_match_dm_control_with_the_official_wrapper_bit_for_bit(name):
    """Reset and 40 agent steps of action repeat 2 equal dm_control stepped continuously with
    the official wrapper's action scaling and reward summing, for the same task seed."""
    env = make_env("dmc:" + name, action_repeat=2)
    key = jax.random.PRNGKey(3)
    state, obs = jax.jit(env.reset)(key)
    ref = native(name, int(env.reset_seed(key)))
    ts = ref.reset()
    # observation: the dict's keys in order, flattened (official get_obs_shape / _obs_to_array)
    assert env.obs_layout == tuple((k, int(np.prod(np.shape(v)))) for k, v in ts.observation.items())
    assert env.spec.obs_dim == sum(int(np.prod(s.shape)) for s in ref.observation_spec().values())
    np.testing.assert_array_equal(np.asarray(obs), flat(ts.observation))
    step = jax.jit(env.step)
    rng = np.random.default_rng(0)
    for t in range(40):
        a = rng.uniform(-1, 1, env.spec.action_dim).astype(np.float32)
        state, out = step(state, jnp.asarray(a), key)
        reward = 0.0
        for _ in range(2):
            ts = ref.step(a)
            reward += ts.reward
        np.testing.assert_array_equal(np.asarray(out.obs), flat(ts.observation), err_msg=f"step {t}")
        assert np.asarray(out.reward) == np.float32(reward), t
        assert out.reward.dtype == jnp.float32 and out.obs.dtype == jnp.float32
        assert not bool(out.terminated) and not bool(out.truncated)


def test_spec_and_action_rescale():
    env = make_env("dmc:cheetah-run", action_repeat=2)
    s = env.spec
    assert (s.suite, s.obs_dim, s.action_dim, s.action_repeat) == ("dmcontrol", 17, 6, 2)
    assert (s.episode_length, s.sim_episode_length, s.can_terminate, s.backend) == (500, 1000, False, None)
    assert s.action_low == (-1.0,) * 6 and s.action_high == (1.0,) * 6
    assert env.obs_layout == (("position", 8), ("velocity", 9))
    # an actuator range other than [-1, 1]: point_mass's is [-1, 1] too, so check the mapping
    # itself on a host step with the agent units: a = 0.5 -> low + 0.75 (high - low)
    host = env._host
    host.low, host.high = np.full(6, -2.0), np.full(6, 4.0)
    try:
        state, _ = env.reset(KEY)
        env.step(state, jnp.full((6,), 0.5), KEY)
        np.testing.assert_array_equal(host.physics.data.ctrl, np.full(6, 2.5))
        env.step(state, jnp.full((6,), 7.0), KEY)  # clipped to 1 first
        np.testing.assert_array_equal(host.physics.data.ctrl, np.full(6, 4.0))
    finally:
        host.low, host.high = np.full(6, -1.0), np.full(6, 1.0)


def test_raw_step_is_one_control_step_in_env_units():
    """The lower-level contract of Env (one simulator step, env units) matches an agent step
    of action repeat 1 when the action maps exactly (0.5 on [-1, 1] is 0.5)."""
    env = make_env("dmc:walker-walk", action_repeat=1)
    state, _ = env.reset(KEY)
    a = jnp.full((6,), 0.5)
    inner, obs, reward, term = env._raw_step(state.inner, env.scale_action(a), KEY)
    nxt, out = env.step(state, a, KEY)
    np.testing.assert_array_equal(np.asarray(obs), np.asarray(out.obs))
    assert np.asarray(reward) == np.asarray(out.reward) and not bool(term)
    np.testing.assert_array_equal(np.asarray(inner.physics), np.asarray(nxt.inner.physics))
    assert env.n_sub_steps == 10  # walker: 0.025 s control steps of 0.0025 s MuJoCo steps


def test_episode_is_1000_control_steps_never_terminated():
    for repeat, T in ((2, 500), (1, 1000)):
        env = make_env("dmc:pendulum-swingup", action_repeat=repeat)
        assert env.spec.episode_length == T and env.n_sub_steps == 1

        @jax.jit
        def roll(key):
            state, _ = env.reset(key)

            def body(st, k):
                st, out = env.step(st, jax.random.uniform(k, (1,), minval=-1, maxval=1), k)
                return st, (out.terminated, out.truncated, out.reward)

            return jax.lax.scan(body, state, jax.random.split(key, T + 3))[1]

        term, trunc, reward = (np.asarray(x) for x in roll(KEY))
        assert not term.any()
        assert np.flatnonzero(trunc)[0] == T - 1  # truncated first at agent step T
        assert np.isfinite(reward).all() and (reward >= 0).all() and (reward <= repeat).all()
    # dm_control's own episode of this task is 1000 control steps too
    ref = D.load_environment("pendulum-swingup", seed=0)
    ref.reset()
    steps = 0
    while not ref.step(np.zeros(1)).last():
        steps += 1
    assert steps + 1 == 1000


# ------------------------------------------------- host step: state, batching, determinism
def test_vmapped_batches_equal_single_calls_and_keys_determine_initial_states():
    env = make_env("dmc:cartpole-swingup", action_repeat=2)
    keys = jax.random.split(KEY, 6).reshape(2, 3, -1)   # seeds x envs
    states, obs = jax.jit(jax.vmap(jax.vmap(env.reset)))(keys)
    actions = jax.random.uniform(KEY, (2, 3, 1), minval=-1, maxval=1)
    states2, out = jax.jit(jax.vmap(jax.vmap(env.step)))(states, actions, keys)
    for i in range(2):
        for j in range(3):
            s1, o1 = env.reset(keys[i, j])
            np.testing.assert_array_equal(np.asarray(o1), np.asarray(obs[i, j]))
            _, out1 = env.step(s1, actions[i, j], keys[i, j])
            np.testing.assert_array_equal(np.asarray(out1.obs), np.asarray(out.obs[i, j]))
            assert np.asarray(out1.reward) == np.asarray(out.reward[i, j])
    flat_obs = np.asarray(obs).reshape(6, -1)
    assert len({o.tobytes() for o in flat_obs}) == 6  # other keys, other initial states
    again = jax.jit(jax.vmap(jax.vmap(env.reset)))(keys)
    for x, y in zip(jax.tree_util.tree_leaves(again), jax.tree_util.tree_leaves((states, obs))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("name", ["reacher-hard", "finger-turn-hard", "fish-swim", "pointmass-hard",
                                  "swimmer-swimmer6", "manipulator-bring-ball", "stacker-stack-2"])
def test_per_episode_model_fields_travel_with_the_state(name):
    """Tasks that redraw model fields (targets) at reset: the env state carries them, so two
    interleaved episodes step as each would alone, and no other model field changes."""
    env = make_env("dmc:" + name, action_repeat=2)
    host = env._host
    assert env._host.model_words > 0
    before = {f: np.array(getattr(host.physics.model, f)) for f in dir(host.physics.model)
              if isinstance(getattr(host.physics.model, f, None), np.ndarray)}
    ka, kb = jax.random.split(KEY)
    sa, _ = env.reset(ka)
    sb, _ = env.reset(kb)
    assert not np.array_equal(np.asarray(sa.inner.model), np.asarray(sb.inner.model))
    carried = {f for f, *_ in host.model_fields}
    for f, v in before.items():
        if f not in carried:
            np.testing.assert_array_equal(getattr(host.physics.model, f), v, err_msg=f)
    rng = np.random.default_rng(1)
    acts = rng.uniform(-1, 1, (6, env.spec.action_dim)).astype(np.float32)
    alone = sa
    for a in acts:
        alone, out_alone = env.step(alone, jnp.asarray(a), KEY)
    inter = sa
    for a in acts:
        inter, out_inter = env.step(inter, jnp.asarray(a), KEY)
        sb, _ = env.step(sb, jnp.asarray(-a), KEY)   # the other episode in between
    np.testing.assert_array_equal(np.asarray(out_inter.obs), np.asarray(out_alone.obs))
    assert np.asarray(out_inter.reward) == np.asarray(out_alone.reward)


def test_diverged_physics_gives_nan_and_keeps_the_state():
    env = make_env("dmc:cartpole-balance", action_repeat=2)
    state, _ = env.reset(KEY)
    phys = np.array(state.inner.physics).view(np.float64).copy()
    phys[1] = np.nan  # qpos[0] (the state starts with the time)
    bad = state._replace(inner=state.inner._replace(physics=jnp.asarray(phys.view(np.uint32))))
    after, out = env.step(bad, jnp.zeros(1), KEY)
    assert np.isnan(np.asarray(out.obs)).all() and np.isnan(np.asarray(out.reward))
    np.testing.assert_array_equal(np.asarray(after.inner.physics), np.asarray(bad.inner.physics))
    _, ok = env.step(state, jnp.zeros(1), KEY)  # the scratch simulator is not poisoned
    assert np.isfinite(np.asarray(ok.obs)).all()


# ------------------------------------------------------------------ custom mt30 tasks
def _tol_linear(x, lo, hi, margin, value_at_margin):
    """dm_control's tolerance with the linear sigmoid, written out."""
    if lo <= x <= hi:
        return 1.0
    d = (lo - x) / margin if x < lo else (x - hi) / margin
    scale = 1.0 - value_at_margin
    return max(0.0, 1.0 - d * scale) if d * scale < 1 else 0.0


def _tol_gauss(x, lo, hi, margin, value_at_margin=0.1):
    if lo <= x <= hi:
        return 1.0
    if margin == 0:
        return 0.0
    d = (lo - x) / margin if x < lo else (x - hi) / margin
    return float(np.exp(-0.5 * (d * np.sqrt(-2 * np.log(value_at_margin))) ** 2))


def _expected_reward(name, p):
    """The official definitions (docs/dmcontrol.md), from physics quantities."""
    inf = np.inf
    xpos = p.named.data.xpos
    if name.startswith("walker"):
        v = 1.0 if "walk" in name else 8.0
        stand = (3 * _tol_gauss(p.torso_height(), 1.2, inf, 0.6) + (1 + p.torso_upright()) / 2) / 4
        return stand * (5 * _tol_linear(p.horizontal_velocity(), -inf, -v, v / 2, 0.5) + 1) / 6
    if name == "cheetah-run-backwards":
        return _tol_linear(p.speed(), -inf, -8.0, 8.0, 0.0)
    if name in ("cheetah-run-front", "cheetah-run-back"):
        foot = "bfoot" if name.endswith("front") else "ffoot"
        up = (3 * _tol_gauss(xpos[foot, "z"], 1.2, inf, 0.6) + 2 * _tol_gauss(xpos["torso", "z"], 1.2, inf, 0.6)) / 5
        return up * (5 * _tol_linear(p.speed(), 6.0, inf, 6.0, 0.0) + 1) / 6
    if name == "cheetah-jump":
        def stand(foot):
            h = _tol_gauss((xpos["torso", "z"] + xpos[foot, "z"]) / 2, 1.2, inf, 0.6)
            return (5 * h + _tol_linear(p.speed(), -0.5, 0.5, 0.5, 0.0)) / 6
        return (stand("bfoot") + stand("ffoot")) / 2
    if name == "hopper-hop-backwards":
        return _tol_gauss(p.height(), 0.6, 2.0, 0.0) * _tol_linear(p.speed(), -inf, -1.0, 0.5, 0.5)
    if name == "pendulum-spin":
        return _tol_linear(abs(float(p.angular_velocity()[0])), 9.0, inf, 4.5, 0.5)
    if name == "cup-spin":
        target = p.named.data.site_xpos["target", ["x", "z"]]
        ball = p.named.data.xpos["ball", ["x", "z"]]
        inside = float(all(abs(target - ball) < p.named.model.site_size["target", [0, 2]]
                           - p.named.model.geom_size["ball", 0]))
        speed = np.hypot(p.named.data.qvel["ball_x"], p.named.data.qvel["ball_z"])
        return (1 - inside) * (_tol_linear(np.linalg.norm(target - ball), 0.5, inf, 0.25, 0.5)
                               + 2 * _tol_linear(speed, 6.0, inf, 3.0, 0.5)) / 3
    raise AssertionError(name)


# the three-link reachers' reward is dm_control's reacher reward, checked against the official
# task's recorded rewards below (test_three_link_reacher_replays_the_official_episodes...)
@pytest.mark.parametrize("name", [n for n in C.CUSTOM_TASKS if not n.startswith("reacher-three")])
def test_custom_task_rewards_follow_their_definitions(name):
    env = D.load_environment(name, seed=5)
    env.reset()
    p = env.physics
    rng = np.random.default_rng(2)
    rewards, seen = [], []
    for t in range(150):
        if t % 50 == 0:  # states the random policy does not reach: fast, high, backwards
            with p.reset_context():
                p.data.qpos[:] = p.data.qpos + rng.normal(0, 0.3, p.model.nq)
                p.data.qvel[:] = rng.normal(0, 6.0, p.model.nv)
        ts = env.step(rng.uniform(-1, 1, env.action_spec().shape))
        want = _expected_reward(name, p)
        np.testing.assert_allclose(ts.reward, want, rtol=1e-9, atol=1e-12, err_msg=f"{name} step {t}")
        rewards.append(ts.reward)
    assert np.ptp(rewards) > 0  # the checks saw more than one value


def test_cup_spin_starts_in_the_cup_unless_the_first_draw_is_below_a_tenth():
    env = D.load_environment("cup-spin")
    outside_when_allowed = []
    for seed in range(40):
        env.task.random.seed(seed)
        u = np.random.RandomState(seed).uniform()   # the task's first draw
        env.reset()
        assert env.physics.data.ncon == 0
        if u >= 0.1:
            assert env.physics.in_target() == 1.0, seed
        else:
            outside_when_allowed.append(env.physics.in_target() == 0.0)
    # seeds 7, 9, 19, 21, 34 draw u < 0.1: any contact-free position is taken (as in
    # cup-catch), which is mostly outside the cup (all but seed 9's)
    assert outside_when_allowed == [True, False, True, True, True]


def test_widened_floor_is_the_only_model_change_and_leaves_dynamics_unchanged():
    from dm_control import suite

    for name, domain, geom, size in (("cheetah-run-backwards", "cheetah", "ground", 200.0),
                                     ("walker-run-backwards", "walker", "floor", 500.0)):
        ours, ref = D.load_environment(name, seed=1), suite.load(domain, "run", task_kwargs={"random": 1})
        gid = ref.physics.model.name2id(geom, "geom")
        sizes = np.array(ref.physics.model.geom_size)
        sizes[gid, 0] = size
        np.testing.assert_array_equal(ours.physics.model.geom_size, sizes)
        ours.reset(), ref.reset()
        for e in (ours, ref):   # far behind the start: on dm_control's own floor, past its drawn end
            with e.physics.reset_context():
                e.physics.named.data.qpos["rootx"] = -150.0
        rng = np.random.default_rng(0)
        for _ in range(100):
            a = rng.uniform(-1, 1, ref.action_spec().shape)
            ours.step(a), ref.step(a)
        np.testing.assert_array_equal(ours.physics.data.qpos, ref.physics.data.qpos)
        # still on the plane (falling through it for 100 control steps would end far below 0)
        assert ref.physics.named.data.xpos["torso", "z"] > 0.0


# ------------------------------------------------------------ the three-link reachers
REACHER3 = {"easy": "reacher-three-easy", "hard": "reacher-three-hard"}


@pytest.fixture(scope="module")
def reacher3():
    """(the official tasks' recorded numbers, the recorder module) (tools/record_reacher_three.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("record_reacher_three", ROOT / "tools" / "record_reacher_three.py")
    rec = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rec)
    with np.load(ROOT / "tests" / "fixtures" / "reacher_three.npz") as z:
        return {k: z[k] for k in z.files}, rec


@pytest.mark.parametrize("short", REACHER3)
def test_three_link_reacher_model_equals_the_official_one(short, reacher3):
    """The model generated from dm_control's reacher.xml compiles to the official
    reacher_three_links.xml's model: the key arrays equal, and a digest of every numeric
    MjModel array (482 fields with MuJoCo 3.17.0) equal."""
    rec, tool = reacher3
    model = D.load_environment(REACHER3[short], seed=0).physics.model
    ours = tool.model_arrays(model)
    want = {k.split("/")[-1]: v for k, v in rec.items() if k.startswith(f"{short}/model/")}
    assert set(ours) == set(want) and len(want) == len(tool.MODEL_FIELDS) + 1
    for f, v in want.items():
        np.testing.assert_array_equal(ours[f], v, err_msg=f)
    assert (model.nq, model.nv, model.nu, model.nbody) == (3, 3, 3, 5)
    digest, fields = tool.model_digest(model.ptr)
    meta = json.loads(str(rec["meta"]))
    assert fields == meta["digest_fields"], "this MuJoCo's model fields differ from the recording's"
    assert digest == str(rec[f"{short}/model_digest"])


@pytest.mark.parametrize("short", REACHER3)
def test_three_link_reacher_replays_the_official_episodes_bit_for_bit(short, reacher3, monkeypatch):
    """The official tasks' recorded seeded episodes (2 x 120 control steps, tools/
    record_reacher_three.py): dm_control stepped natively on our task gives the same float64
    observations and rewards at every control step, and our env at action repeat 2 gives the
    official wrapper's float32 observations and summed rewards at every agent step."""
    rec, _ = reacher3
    name = REACHER3[short]
    seeds, acts, obs, rew = (rec[f"{short}/{k}"] for k in ("seeds", "actions", "obs", "reward"))
    assert set(np.unique(rew)) == {0.0, 1.0}   # the reward was exercised
    for seed, a_ep, o_ep, r_ep in zip(seeds, acts, obs, rew):
        ref = native(name, int(seed))
        ts = ref.reset()
        np.testing.assert_array_equal(flat64(ts.observation), o_ep[0])
        for t, a in enumerate(a_ep):
            ts = ref.step(a.astype(np.float64))
            np.testing.assert_array_equal(flat64(ts.observation), o_ep[t + 1], err_msg=f"seed {seed} step {t}")
            assert ts.reward == r_ep[t], (seed, t)

    env = make_env("dmc:" + name, action_repeat=2)
    assert (env.spec.obs_dim, env.spec.action_dim) == (8, 3)
    step = jax.jit(env.step)
    for seed, a_ep, o_ep, r_ep in zip(seeds, acts, obs, rew):
        np.testing.assert_array_equal(a_ep[0::2], a_ep[1::2])   # held: one agent action per pair
        monkeypatch.setattr(env, "reset_seed", lambda key, s=int(seed): jnp.uint32(s))  # the recorded task seed
        state, o = env.reset(KEY)
        np.testing.assert_array_equal(np.asarray(o), o_ep[0].astype(np.float32))
        for i in range(len(a_ep) // 2):
            state, out = step(state, jnp.asarray(a_ep[2 * i]), KEY)
            np.testing.assert_array_equal(np.asarray(out.obs), o_ep[2 * i + 2].astype(np.float32),
                                          err_msg=f"seed {seed} agent step {i}")
            assert np.asarray(out.reward) == np.float32(r_ep[2 * i] + r_ep[2 * i + 1]), (seed, i)


def test_three_link_reacher_spec_episode_and_determinism():
    env = make_env("dmc:reacher-three-easy", action_repeat=2)
    s = env.spec
    assert (s.obs_dim, s.action_dim, s.episode_length, s.sim_episode_length) == (8, 3, 500, 1000)
    assert env.obs_layout == (("position", 3), ("to_target", 2), ("velocity", 3)) and env.n_sub_steps == 1
    ka, kb = jax.random.split(KEY)
    (sa, oa), (sa2, oa2), (sb, ob) = env.reset(ka), env.reset(ka), env.reset(kb)
    np.testing.assert_array_equal(np.asarray(oa), np.asarray(oa2))
    assert not np.array_equal(np.asarray(oa), np.asarray(ob))
    a = jnp.asarray([0.3, -0.7, 1.0])
    (_, x), (_, y) = env.step(sa, a, KEY), env.step(sa2, a, KEY)
    np.testing.assert_array_equal(np.asarray(x.obs), np.asarray(y.obs))
    # dm_control's own episode: 20 s of 0.02 s control steps, as dm_control's reacher
    ref = D.load_environment("reacher-three-hard", seed=0)
    ref.reset()
    steps = 1
    while not ref.step(np.zeros(3)).last():
        steps += 1
    assert steps == 1000 and ref.physics.named.model.geom_size["target", 0] == 0.015


def test_three_link_model_refuses_another_reacher_file():
    from tdmpc2core.envs.dmcontrol_reacher import three_link_model

    from dm_control.suite import common

    xml = common.read_model("reacher.xml").decode()
    with pytest.raises(ValueError, match="expected one <body name='arm'>"):
        three_link_model(xml.replace('name="arm"', 'name="upper_arm"'))
    with pytest.raises(ValueError, match="two motors"):
        three_link_model(xml.replace('<motor name="wrist" joint="wrist"/>', ""))


def test_mt30_table_in_the_docs_matches_the_code():
    table = (ROOT / "docs" / "dmcontrol.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z-]+)` \| (yes|no)\b", table, flags=re.M))
    assert list(rows) == list(D.MT30_TASKS)
    for name, avail in rows.items():
        assert (avail == "yes") == (D.PREFIX + name in D.DMCONTROL_ENVS), name
    assert sum(v == "yes" for v in rows.values()) == 30


# ----------------------------------------------------------------- training through TDMPC2
TINY = dict(model_size=1, mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16, num_elites=4,
            num_pi_trajs=2, iterations=1, batch_size=16)


@pytest.mark.slow
def test_two_seeds_train_evaluate_and_resume_exactly(tmp_path):
    """TDMPC2 on dm_control: 2 seeds x 2 envs, 300 agent steps (seed phase, burst, planning),
    evaluated; a run stopped at 200 steps and resumed from its checkpoint (the host
    simulator scrambled in between) gives the same parameters and evaluations bit for bit. The
    whole run compiles its programs ahead in threads (RunOptions.compile_ahead, on by default
    off a CPU): the training chunk beside the first evaluation, both with host callbacks into
    the one dm_control simulator (programs compiled ahead equal those compiled at their call:
    tests/test_program_cache.py)."""
    from tdmpc2core import TDMPC2

    agent = TDMPC2("dmc:cartpole-balance", n_envs=2, action_repeat=2, episode_length=200, seed_steps=200,
                   **TINY)
    assert agent.episode_length == 100 and agent.config["suite"] == "dmcontrol"
    whole, hist = agent.train(seed=[0, 1], n_timesteps=300, eval_every=300, eval_episodes=2, compile_ahead=True)
    assert all(agent.compile_seconds[p].get("ahead") for p in ("chunk", "eval")), agent.compile_seconds
    from tdmpc2core.run.compiled import compiling_note

    assert re.search(r"; compiled ahead: (chunk, eval|eval, chunk), the run waiting \d+ s of it$",
                     compiling_note(agent.compile_seconds)), compiling_note(agent.compile_seconds)
    assert np.asarray(whole.agent.updates).tolist() == [298, 298]   # burst of 200, then 2 per tick
    assert int(np.asarray(whole.nonfinite).max()) == 0
    assert hist["eval_returns"].shape == (2, 2, 2)
    np.testing.assert_array_equal(hist["eval_lengths"], 100)
    assert ((hist["eval_returns"] > 0) & (hist["eval_returns"] <= 200)).all()
    assert not np.array_equal(*(np.asarray(x) for x in jax.tree_util.tree_leaves(whole.agent.params)[0]))

    ckpt = tmp_path / "ckpt"
    agent.train(seed=[0, 1], n_timesteps=200, total_timesteps=300, eval_every=300, eval_episodes=2,
                checkpoint_dir=ckpt)
    scratch = agent.env.dm_env   # leave the host simulator somewhere else entirely
    scratch.task.random.seed(123)
    scratch.reset()
    for _ in range(37):
        scratch.step(np.ones(1))
    resumed, hist2 = agent.train(seed=[0, 1], n_timesteps=300, eval_every=300, eval_episodes=2,
                                 checkpoint_dir=ckpt)
    for x, y in zip(jax.tree_util.tree_leaves((whole.agent, whole.env_state, whole.obs)),
                    jax.tree_util.tree_leaves((resumed.agent, resumed.env_state, resumed.obs))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_array_equal(hist["eval_returns"], hist2["eval_returns"])
