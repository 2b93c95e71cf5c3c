"""Tests of tdmpc2core.envs: action mapping, action repeat, time limit vs termination,
and the three suites (gymnax, Brax, MuJoCo Playground DMC)."""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tdmpc2core.envs import EnvState, StepOut, list_env_ids, make_env, time_limit
from tdmpc2core.envs.ids import GYMNAX_MAX_STEPS

KEY = jax.random.PRNGKey(0)


# --------------------------------------------------------------------------- import cost
def test_import_does_not_import_suites():
    code = (
        "import sys, tdmpc2core.envs as E; E.list_env_ids(); "
        "print([m for m in ('gymnax', 'brax', 'mujoco_playground', 'dm_control') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------------- errors
def test_unknown_id_lists_accepted_ids():
    """Close matches, the ids of the suite the id looks like (here gymnax's) and the command
    that lists every id of every suite (issue 31: no longer every id on one 2 KB line;
    `tdmpc2 envs` is tested in tests/test_rough_edges.py)."""
    with pytest.raises(ValueError) as e:
        make_env("Pendulum-v9")
    msg = str(e.value)
    assert "'Pendulum-v9'" in msg and "Did you mean ['Pendulum-v1'" in msg
    assert "gymnax ids (5, closest first): Pendulum-v1, " in msg and "Swimmer-misc" in msg
    assert "`tdmpc2 envs` lists every id of every suite" in msg


def test_discrete_gymnax_env_rejected():
    with pytest.raises(ValueError) as e:
        make_env("CartPole-v1")
    msg = str(e.value)
    assert "continuous" in msg and "CartPole-v1" in msg
    assert "Pendulum-v1" in msg and "MountainCarContinuous-v0" in msg


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(env_id="Pendulum-v1", action_repeat=0), "action_repeat"),
        (dict(env_id="inverted_pendulum", action_repeat=-1), "action_repeat"),
        (dict(env_id="inverted_pendulum", action_repeat=3, episode_length=1000), "divisible"),
        (dict(env_id="CartpoleBalance", action_repeat=3, episode_length=1000), "divisible"),
        (dict(env_id="Pendulum-v1", backend="jax"), "applies only to playground envs"),
        (dict(env_id="Pendulum-v1", action_repeat=201), "max_steps_in_episode"),
    ],
)
def test_bad_arguments(kwargs, needle):
    env_id = kwargs.pop("env_id")
    with pytest.raises(ValueError, match=needle):
        make_env(env_id, **kwargs)


def test_list_env_ids_matches_installed_gymnax_and_brax():
    import gymnax
    from brax import envs as brax_envs

    ids = list_env_ids()
    # dmcontrol: tests/test_dmcontrol.py; metaworld, myosuite: tests/test_domains.py
    assert set(ids) == {"gymnax", "brax", "playground", "dmcontrol", "metaworld", "myosuite"}
    assert {"Pendulum-v1", "MountainCarContinuous-v0", "Reacher-misc", "PointRobot-misc"} <= set(
        ids["gymnax"]
    )
    for env_id in gymnax.registered_envs:
        if env_id == "MNISTBandit-bsuite":  # downloads MNIST when built; discrete anyway
            assert env_id not in ids["gymnax"]
            continue
        env, params = gymnax.make(env_id)
        is_box = type(env.action_space(params)).__name__ == "Box"
        assert is_box == (env_id in ids["gymnax"]), env_id
        if is_box:  # the time limit tdmpc2core.envs.time_limit computes without gymnax
            assert GYMNAX_MAX_STEPS[env_id] == int(params.max_steps_in_episode), env_id
    assert set(GYMNAX_MAX_STEPS) == set(ids["gymnax"])
    assert set(ids["brax"]) == set(brax_envs._envs) - {"fast"}


# ------------------------------------------------------------------- gymnax: Pendulum
@pytest.fixture(scope="module")
def pendulum():
    return make_env("Pendulum-v1")


def test_pendulum_spec(pendulum):
    s = pendulum.spec
    assert (s.suite, s.obs_dim, s.action_dim) == ("gymnax", 3, 1)
    assert s.action_low == (-2.0,) and s.action_high == (2.0,)
    assert (s.action_repeat, s.episode_length, s.sim_episode_length) == (1, 200, 200)
    assert time_limit("Pendulum-v1") == s.episode_length == time_limit("Pendulum-v1", episode_length=200)  # its own
    with pytest.raises(ValueError, match="episode_length=1000 for 'Pendulum-v1': the gymnax suite ends its episodes "
                                         "at its own time limit, 200 simulator steps"):
        time_limit("Pendulum-v1", episode_length=1000)  # would not take effect: refused, not ignored
    assert time_limit("Pendulum-v1", action_repeat=3) == make_env("Pendulum-v1", action_repeat=3).spec.episode_length
    assert s.backend is None and s.can_terminate is False
    # the action repeat make_env takes when none is given: the paper's 2 for DM Control only
    from tdmpc2core.envs import default_action_repeat
    assert [default_action_repeat(i) for i in ("Pendulum-v1", "inverted_pendulum", "CartpoleBalance")] == [1, 1, 2]


def test_env_is_hashable_and_static(pendulum):
    other = make_env("Pendulum-v1")
    assert hash(other) == hash(pendulum) and other == pendulum
    assert make_env("Pendulum-v1", action_repeat=2) != pendulum
    custom = make_env("Pendulum-v1", env_params={"max_torque": 1.0})
    assert custom != pendulum and custom.spec.action_high == (1.0,)

    f = jax.jit(lambda env, k: env.reset(k)[1], static_argnums=0)
    assert f(pendulum, KEY).shape == (3,)


def test_pendulum_action_mapping_matches_raw_gymnax(pendulum):
    raw, params = pendulum.gymnax_env, pendulum.gymnax_params
    state, obs0 = pendulum.reset(KEY)
    assert obs0.shape == (3,) and obs0.dtype == jnp.float32

    @jax.jit
    def ours(a):
        return pendulum.step(state, jnp.array([a], jnp.float32), KEY)[1]

    @jax.jit
    def direct(torque):
        obs, _, r, _, _ = raw.step_env(KEY, state.inner, jnp.array([torque], jnp.float32), params)
        return obs, r

    for a, torque in [(1.0, 2.0), (-1.0, -2.0), (0.0, 0.0), (0.5, 1.0), (7.0, 2.0)]:
        out = ours(a)
        obs_d, r_d = direct(torque)
        np.testing.assert_allclose(out.obs, obs_d, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(out.reward, r_d, rtol=1e-6)
    # The mapping is not the identity: a=+1 must differ from torque 1.0.
    assert not np.allclose(ours(1.0).obs, direct(1.0)[0])
    assert float(jnp.abs(pendulum.scale_action(jnp.array([1.0]))[0] - 2.0)) == 0.0


def test_pendulum_action_repeat_sums_rewards():
    env2 = make_env("Pendulum-v1", action_repeat=2)
    assert env2.spec.episode_length == 100 and env2.spec.sim_episode_length == 200
    raw, params = env2.gymnax_env, env2.gymnax_params
    state, _ = env2.reset(KEY)
    a = jnp.array([0.3], jnp.float32)
    _, out = jax.jit(env2.step)(state, a, KEY)

    torque = jnp.array([-2.0 + 1.3 / 2 * 4.0])
    obs1, s1, r1, _, _ = raw.step_env(KEY, state.inner, torque, params)
    obs2, s2, r2, _, _ = raw.step_env(KEY, s1, torque, params)
    np.testing.assert_allclose(out.reward, r1 + r2, rtol=1e-5)
    np.testing.assert_allclose(out.obs, obs2, rtol=1e-5, atol=1e-6)
    assert not np.allclose(out.obs, obs1)


def test_pendulum_truncates_exactly_at_T(pendulum):
    T = pendulum.spec.episode_length

    @jax.jit
    def rollout(key):
        s, _ = pendulum.reset(key)

        def body(s, k):
            s, out = pendulum.step(s, jnp.array([0.7]), k)
            return s, (out, s.t)

        return jax.lax.scan(body, s, jax.random.split(key, T))[1]

    out, t = rollout(KEY)
    trunc = np.asarray(out.truncated)
    assert not trunc[: T - 1].any() and trunc[T - 1]
    assert not np.asarray(out.terminated).any()
    np.testing.assert_array_equal(np.asarray(t), np.arange(1, T + 1))
    assert np.isfinite(np.asarray(out.obs)).all() and out.obs.dtype == jnp.float32


def test_vmap_over_envs_and_seeds(pendulum):
    keys = jax.random.split(KEY, 6).reshape(2, 3, 2)
    reset = jax.jit(jax.vmap(jax.vmap(pendulum.reset)))
    state, obs = reset(keys)
    assert obs.shape == (2, 3, 3)
    step = jax.jit(jax.vmap(jax.vmap(pendulum.step)))
    state, out = step(state, jnp.zeros((2, 3, 1)), keys)
    assert isinstance(out, StepOut) and isinstance(state, EnvState)
    assert out.obs.shape == (2, 3, 3) and out.reward.shape == (2, 3)
    assert out.terminated.dtype == jnp.bool_ and out.truncated.dtype == jnp.bool_


# ---------------------------------------------------- gymnax: MountainCarContinuous
def _near_goal(state: EnvState, t=None) -> EnvState:
    inner = state.inner.replace(position=jnp.float32(0.449), velocity=jnp.float32(0.05))
    return state._replace(inner=inner, t=state.t if t is None else jnp.int32(t))


def test_mountaincar_terminates_at_goal_and_truncates_at_time_limit():
    env = make_env("MountainCarContinuous-v0", action_repeat=3)
    s = env.spec
    assert s.can_terminate and (s.obs_dim, s.action_dim) == (2, 1)
    assert s.episode_length == 999 // 3 == 333 and s.sim_episode_length == 999
    assert time_limit("MountainCarContinuous-v0", action_repeat=3) == s.episode_length
    T = s.episode_length
    step = jax.jit(env.step)
    state, _ = env.reset(KEY)
    a = jnp.array([1.0])

    # Ordinary step far from the goal: neither flag.
    _, out = step(state, a, KEY)
    assert not bool(out.terminated) and not bool(out.truncated)

    # Goal reached on the first sub-step of the repeat: the other two are masked.
    _, out = step(_near_goal(state), a, KEY)
    assert bool(out.terminated) and not bool(out.truncated)
    raw_obs, _, raw_r, raw_done, _ = env.gymnax_env.step_env(
        KEY, _near_goal(state).inner, a, env.gymnax_params
    )
    assert bool(raw_done)
    np.testing.assert_allclose(out.reward, raw_r, rtol=1e-6)  # 100 - 0.1, counted once
    np.testing.assert_allclose(out.obs, raw_obs, rtol=1e-6)

    # Time limit (ours, in agent steps) but not terminal; then both at once.
    _, out = step(state._replace(t=jnp.int32(T - 2)), a, KEY)
    assert not bool(out.truncated)
    _, out = step(state._replace(t=jnp.int32(T - 1)), a, KEY)
    assert bool(out.truncated) and not bool(out.terminated)
    _, out = step(_near_goal(state, t=T - 1), a, KEY)
    assert bool(out.truncated) and bool(out.terminated)


def test_gymnax_time_limit_never_leaks_into_terminated():
    # gymnax's own limit is 999 simulator steps; its step counter far beyond it must not
    # make `terminated` True (we call step_env, and compute the terminal without limit).
    env = make_env("MountainCarContinuous-v0")
    state, _ = env.reset(KEY)
    inner = state.inner.replace(time=jnp.asarray(5000, jnp.asarray(state.inner.time).dtype))
    _, out = jax.jit(env.step)(state._replace(inner=inner), jnp.array([0.0]), KEY)
    assert not bool(out.terminated) and not bool(out.truncated)


@pytest.mark.parametrize(
    "env_id, obs_dim, action_dim, low, T",
    [("Reacher-misc", 8, 2, -1.0, 100), ("PointRobot-misc", 6, 2, -0.1, 100)],
)
def test_other_continuous_gymnax_envs(env_id, obs_dim, action_dim, low, T):
    env = make_env(env_id)
    s = env.spec
    assert (s.obs_dim, s.action_dim, s.episode_length) == (obs_dim, action_dim, T)
    assert s.action_low == (low,) * action_dim and s.action_high == (-low,) * action_dim

    @jax.jit
    def rollout(key):
        st, _ = env.reset(key)
        return jax.lax.scan(
            lambda st, k: env.step(st, jnp.ones(action_dim), k), st, jax.random.split(key, 3)
        )[1]

    out = rollout(KEY)
    assert out.obs.shape == (3, obs_dim) and out.obs.dtype == jnp.float32
    assert np.isfinite(np.asarray(out.obs)).all()


# ---------------------------------------------------------- Brax: inverted_pendulum
@pytest.mark.slow
def test_brax_inverted_pendulum_termination_masks_rest_of_repeat():
    R = 6
    env = make_env("inverted_pendulum", action_repeat=R, episode_length=1200)
    s = env.spec
    assert (s.suite, s.obs_dim, s.action_dim) == ("brax", 4, 1)
    assert (s.episode_length, s.sim_episode_length) == (200, 1200)
    assert s.can_terminate and s.backend is None
    # inverted_pendulum rescales a [-1, 1] action onto ctrl_range=[-3, 3] inside its own
    # step, so its bounds are [-1, 1] (mapping again would double the force).
    assert s.action_low == (-1.0,) and s.action_high == (1.0,)
    assert np.allclose(np.asarray(env.brax_env.sys.actuator.ctrl_range), [[-3.0, 3.0]])

    a = jnp.array([1.0])
    raw = env.brax_env

    @jax.jit
    def both(key):
        state, obs0 = env.reset(key)
        _, out = env.step(state, a, key)

        def raw_body(st, _):
            st = raw.step(st, a)
            return st, (st.obs, st.done, jnp.asarray(st.reward, jnp.float32))

        _, (obs, done, rew) = jax.lax.scan(raw_body, state.inner, None, length=R)
        return obs0, out, obs, done, rew

    obs0, out, raw_obs, raw_done, raw_rew = both(KEY)
    raw_done = np.asarray(raw_done) > 0.5
    assert raw_done.any(), "the pole should fall under a constant full push"
    k = int(np.argmax(raw_done))  # first terminal sub-step
    assert k < R - 1, "termination must land mid-repeat for this test to mean anything"
    assert bool(out.terminated) and not bool(out.truncated)
    # Reward: sub-steps 0..k only (raw keeps paying 1 per sub-step after the fall).
    np.testing.assert_allclose(out.reward, raw_rew[: k + 1].sum(), rtol=1e-6)
    assert float(out.reward) < float(raw_rew.sum())
    # Observation frozen at the terminal sub-step.
    np.testing.assert_allclose(out.obs, raw_obs[k], rtol=1e-5, atol=1e-6)
    assert not np.allclose(raw_obs[k], raw_obs[-1])
    assert obs0.shape == (4,) and obs0.dtype == jnp.float32


# ------------------------------------------------------------------- Brax: hopper
@pytest.mark.slow
def test_brax_hopper_contacts_terminate_episodes_without_nan_physics():
    """Ground contacts and Brax's healthy range: two envs under random actions, each reset
    when its episode ends (terminated or truncated), 120 agent steps, jitted. What the
    episodic agent does with such episodes (commit, sample, update) is tested on Brax's
    inverted_pendulum in tests/test_episodic.py; this is the contact env behind it."""
    env = make_env("hopper", episode_length=100)
    s = env.spec
    assert (s.suite, s.action_dim) == ("brax", 3) and s.can_terminate and s.episode_length == 100

    def one_env(key):
        def body(carry, k):
            state, ep_t = carry
            k_a, k_s, k_r = jax.random.split(k, 3)
            a = jax.random.uniform(k_a, (s.action_dim,), jnp.float32, -1.0, 1.0)
            state, out = env.step(state, a, k_s)
            done = out.terminated | out.truncated
            fresh, _ = env.reset(k_r)
            state = jax.tree_util.tree_map(lambda x, y: jnp.where(done, x, y), fresh, state)
            return (state, jnp.where(done, 0, ep_t + 1)), (out.obs, out.reward, out.terminated, ep_t + 1)

        state, _ = env.reset(key)
        return jax.lax.scan(body, (state, jnp.int32(0)), jax.random.split(key, 120))[1]

    obs, rew, term, length = jax.jit(jax.vmap(one_env))(jax.random.split(KEY, 2))
    assert np.isfinite(np.asarray(obs)).all() and np.isfinite(np.asarray(rew)).all()
    term = np.asarray(term)
    assert term.sum(axis=1).min() >= 1, "the hopper should fall under random actions"
    # terminations come before the time limit, at varying lengths
    ends = np.asarray(length)[term]
    assert (ends < 100).all() and len(set(ends.tolist())) > 1


# ------------------------------------------------------- Playground: CartpoleBalance
@pytest.mark.slow
def test_playground_cartpole_balance_jit_vmap():
    from mujoco_playground import registry

    assert tuple(list_env_ids()["playground"]) == tuple(registry.dm_control_suite.ALL_ENVS)

    env = make_env("CartpoleBalance", action_repeat=2, episode_length=1000, backend="jax")
    s = env.spec
    raw = env.playground_env
    assert s.suite == "playground" and s.backend == "jax" and not s.can_terminate
    assert (s.episode_length, s.sim_episode_length, s.action_repeat) == (500, 1000, 2)
    assert time_limit("CartpoleBalance", action_repeat=2, episode_length=1000) == s.episode_length
    assert s.obs_dim == raw.observation_size == 5
    assert s.action_dim == raw.action_size == 1
    assert s.action_low == (-1.0,) and s.action_high == (1.0,)
    cfg = raw._config
    assert cfg.impl == "jax" and cfg.action_repeat == 1 and cfg.episode_length >= 10**6
    assert make_env("CartpoleBalance", action_repeat=2).spec.backend == "jax"  # default
    # no action repeat given: the paper's DMC protocol (repeat 2, T = 1000 / 2 = 500 agent
    # steps), not T = 1000 (docs/deviations.md E4)
    d = make_env("CartpoleBalance").spec
    assert (d.action_repeat, d.episode_length, d.sim_episode_length) == (2, 500, 1000)
    assert make_env("CartpoleBalance", action_repeat=1).spec.episode_length == 1000  # explicit wins

    n, steps = 4, 3
    actions = jnp.linspace(-1.0, 1.0, n)[:, None]  # per-env constant actions

    @jax.jit
    @jax.vmap
    def rollout(key, a):
        st, obs0 = env.reset(key)

        def body(st, k):
            st, out = env.step(st, a, k)
            return st, out

        st, outs = jax.lax.scan(body, st, jax.random.split(key, steps))
        return obs0, st, outs

    obs0, st, outs = rollout(jax.random.split(KEY, n), actions)
    assert obs0.shape == (n, 5) and outs.obs.shape == (n, steps, 5)
    assert outs.obs.dtype == jnp.float32 and outs.reward.shape == (n, steps)
    assert np.isfinite(np.asarray(outs.obs)).all()
    assert not np.asarray(outs.terminated).any() and not np.asarray(outs.truncated).any()
    np.testing.assert_array_equal(np.asarray(st.t), steps)
    # The scaled action reaches MuJoCo as ctrl (bounds are [-1, 1]: identity here).
    np.testing.assert_allclose(np.asarray(st.inner.data.ctrl), np.asarray(actions), atol=1e-6)
    # Rewards of a balance task are in [0, 1] per control step, so [0, 2] per agent step.
    r = np.asarray(outs.reward)
    assert (r >= 0).all() and (r <= 2.0 + 1e-6).all() and (r > 1.0).any()


def test_placeholder_env_state_has_the_resets_structure_and_no_reset_in_its_program(pendulum):
    """A run's initial env state (agents/online.py placeholder_env_state): the structure,
    shapes and dtypes of ``vmap(env.reset)``'s output, all zeros, and a program without the
    reset's computation (tick 0 resets every env; the init program need not contain it)."""
    from tdmpc2core.agents.online import placeholder_env_state

    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    real = jax.vmap(pendulum.reset)(keys)
    fake = placeholder_env_state(pendulum, keys)
    assert jax.tree_util.tree_structure(fake) == jax.tree_util.tree_structure(real)
    for a, b in zip(jax.tree_util.tree_leaves(fake), jax.tree_util.tree_leaves(real)):
        assert a.shape == b.shape and a.dtype == b.dtype and not np.any(np.asarray(a))
    assert np.any(np.asarray(real[1]))  # the real reset's observation is not zeros, so the check can fail
    hlo = jax.jit(lambda k: placeholder_env_state(pendulum, jax.random.split(k, 3))).lower(
        jax.random.PRNGKey(0)).as_text()
    real_hlo = jax.jit(lambda k: jax.vmap(pendulum.reset)(jax.random.split(k, 3))).lower(
        jax.random.PRNGKey(0)).as_text()
    assert "cosine" not in hlo and "cosine" in real_hlo  # Pendulum's reset computes cos(theta)


class _Counter:
    """A toy suite env for StepOut.success: x counts simulator steps; success while x is odd
    (a fifth item from _raw_step); terminates when x reaches ``end``."""

    @staticmethod
    def make(repeat: int, end: int):
        from tdmpc2core.envs.base import Env, EnvSpec

        class CounterEnv(Env):
            def __init__(self):
                self.spec = EnvSpec.from_bounds("counter", "gymnax", 1, [-1.0], [1.0], action_repeat=repeat,
                                                episode_length=10, can_terminate=True, has_success=True)

            def _raw_reset(self, key):
                return jnp.zeros((), jnp.int32), jnp.zeros((1,))

            def _raw_step(self, x, env_action, key):
                x = x + 1
                return x, x[None].astype(jnp.float32), 1.0, x >= end, (x % 2) == 1

        return CounterEnv()


@pytest.mark.parametrize("repeat,end,expect", [(1, 99, [True, False, True]), (2, 99, [False, False, False]),
                                               (3, 99, [True, False, True]), (2, 3, [False, True, False])])
def test_step_success_is_that_of_the_last_simulator_step_taken(repeat, end, expect):
    # StepOut.success: the flag after the last simulator step of the action repeat (the official
    # Meta-World wrapper returns the last step's info); sub-steps after a termination are not taken
    env = _Counter.make(repeat, end)
    state, _ = env.reset(jax.random.PRNGKey(0))
    got = []
    for _ in range(3):
        state, out = env.step(state, jnp.zeros(1), jax.random.PRNGKey(1))
        got.append(bool(out.success))
    assert got == expect
    assert env.spec.has_success and not make_env("Pendulum-v1").spec.has_success


def test_simulator_products_run_at_full_float32_whatever_the_global_default():
    """The env adapters trace the simulator's own products at HIGHEST (base.SIMULATOR_MATMUL_PRECISION):
    a TPU's global default is one bf16 pass and a recent GPU's TF32, which would step other
    physics than a CPU. MJX's step has matrix products; each carries the precision."""
    import jax
    import jax.numpy as jnp

    from tdmpc2core.envs import make_env
    from tdmpc2core.envs.base import SIMULATOR_MATMUL_PRECISION

    assert SIMULATOR_MATMUL_PRECISION == "highest"
    env = make_env("CartpoleBalance", action_repeat=1, episode_length=10)
    state, _ = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    with jax.default_matmul_precision("bfloat16"):
        text = jax.jit(env.step).lower(state, jnp.zeros(env.spec.action_dim), jax.random.PRNGKey(0)).as_text()
        reset_text = jax.jit(env.reset).lower(jax.random.PRNGKey(0)).as_text()
    for t in (text, reset_text):
        dots = [line for line in t.splitlines() if "stablehlo.dot_general" in line]
        assert dots, "no matrix product in the simulator's step: the check checks nothing"
        assert all("HIGHEST" in line for line in dots), [d for d in dots if "HIGHEST" not in d][:2]
