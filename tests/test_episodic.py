"""Episodic mode (spec §11, official eece801 + the 38b31a5 fix): per-step termination in the
TD targets, the termination head and its loss, the planner's alive mask, the replay of
variable-length episodes, and end-to-end runs on terminating tasks (a custom probe, Brax
inverted_pendulum, gymnax MountainCarContinuous-v0; Brax hopper's contacts and terminations
are tested on the env alone in tests/test_envs.py).

The non-episodic agent's numbers are pinned bit for bit in tests/test_agent.py
(``test_non_episodic_run_bit_identical_to_recorded_*``).
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tdmpc2core.agents import replay as rp
from tdmpc2core.model.config import TDMPC2Config, resolve_config
from tdmpc2core.model.planner import estimate_value
from tdmpc2core.model.update import Batch, td_targets, world_model_loss, wm_subtrees
from tdmpc2core.model.world_model import WorldModel

OBS, ACT, H = 5, 2, 3
BASE = dict(model_size=1, mlp_dim=16, latent_dim=16, enc_dim=16, num_q=2, horizon=H, dropout=0.0)


def make_wm(**kw):
    cfg = resolve_config(TDMPC2Config(**dict(BASE, **kw)), episode_length=10, action_dim=ACT)
    return WorldModel(cfg, OBS, ACT)


def random_params(wm, seed, scale=0.3):
    shapes = jax.eval_shape(wm.init, jax.random.PRNGKey(0))
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_map(
        lambda s: jnp.asarray(rng.standard_normal(s.shape) * scale + (1.0 if len(s.shape) == 1 else 0.0),
                              jnp.float32), shapes)


# ================================================================ TD targets (§11.4)
def hand_batch(terminated, B=2, seed=0):
    rng = np.random.default_rng(seed)
    return Batch(obs=jnp.asarray(rng.standard_normal((H + 1, B, OBS)), jnp.float32),
                 action=jnp.asarray(rng.uniform(-1, 1, (H, B, ACT)), jnp.float32),
                 reward=jnp.ones((H, B), jnp.float32),                       # rewards [1, 1, 1]
                 terminated=jnp.asarray(np.broadcast_to(np.asarray(terminated, np.float32)[:, None], (H, B))))


def test_td_targets_use_each_steps_own_termination_flag():
    wm = make_wm(episodic=True)
    params = random_params(wm, 0)
    target_qs = random_params(wm, 1)["qs"]  # non-zero Q, so a bootstrap is visible
    gamma, key = 0.9, jax.random.PRNGKey(3)
    f = jax.jit(td_targets, static_argnums=0)
    td_term, _ = f(wm, params, target_qs, hand_batch([0, 0, 1]), gamma, key)
    td_none, _ = f(wm, params, target_qs, hand_batch([0, 0, 0]), gamma, key)
    td_term, td_none = np.asarray(td_term), np.asarray(td_none)
    q = (td_none - 1.0) / gamma  # the bootstrap values Q_min(z'_{t+1}, a'_{t+1})
    assert np.abs(q).min() > 0.05, "the bootstrap must be non-zero for the test to mean anything"
    # only the last step drops its bootstrap: td = [1 + g q_0, 1 + g q_1, 1]
    np.testing.assert_array_equal(td_term[2], np.ones_like(td_term[2]))
    np.testing.assert_array_equal(td_term[:2], td_none[:2])
    # ... which the known bug (the slice's last flag applied to every step) would not give
    assert np.all(np.abs(td_term[:2] - 1.0) > 0.04)
    # the non-episodic (paper-era) agent bootstraps through every step whatever the flags
    wm_pe = make_wm()
    p_pe = {k: v for k, v in params.items() if k != "termination"}
    td_pe, _ = f(wm_pe, p_pe, target_qs, hand_batch([0, 0, 1]), gamma, key)
    np.testing.assert_array_equal(np.asarray(td_pe), td_none)


# ============================================================ termination head (§11.2-3)
def test_termination_head_only_when_episodic_and_not_zero_initialised():
    wm = make_wm(episodic=True)
    p_ep = jax.eval_shape(wm.init, jax.random.PRNGKey(0))
    p_pe = jax.eval_shape(make_wm().init, jax.random.PRNGKey(0))
    assert "termination" in p_ep and "termination" not in p_pe
    assert set(p_ep) - {"termination"} == set(p_pe)
    # mlp(latent -> [mlp_dim, mlp_dim] -> 1), the last layer a plain Linear (a logit)
    head = p_ep["termination"]
    assert head["Dense_0"]["kernel"].shape == (16, 1) and len([k for k in head if k.startswith("NormedLinear")]) == 2
    # standard init, not zeroed like the reward and Q heads (spec §3.7)
    z = jnp.zeros((1, 16), jnp.float32)
    kernel = jax.jit(wm.modules["termination"].init)(jax.random.PRNGKey(0), z)["params"]["Dense_0"]["kernel"]
    assert 0.005 < float(jnp.std(kernel)) < 0.05


def test_termination_loss_is_bce_on_predicted_latents_weighted_by_coef():
    # (the predicted latents zs carry gradient into dynamics and encoder: world_model_loss
    # does not stop it, as for the reward and value losses)
    coef = 2.5
    wm = make_wm(episodic=True, termination_coef=coef)
    wm_pe = make_wm()
    params = random_params(wm, 5)
    term = np.zeros((H, 4), np.float32)
    term[2, 1] = term[1, 3] = 1.0
    batch = hand_batch([0, 0, 0], B=4, seed=6)._replace(terminated=jnp.asarray(term))
    rng = np.random.default_rng(7)
    td = jnp.asarray(rng.uniform(-2, 5, (H, 4)), jnp.float32)
    next_z = jax.nn.softmax(jnp.asarray(rng.standard_normal((H, 4, 2, 8)), jnp.float32), -1).reshape(H, 4, 16)
    f = jax.jit(world_model_loss, static_argnums=0)
    loss, (zs, m) = f(wm, wm_subtrees(params), params["pi"], batch, td, next_z, None)
    p_pe = {k: v for k, v in params.items() if k != "termination"}
    loss_pe, (zs_pe, m_pe) = f(wm_pe, wm_subtrees(p_pe), p_pe["pi"], batch, td, next_z, None)
    # by hand: mean over H x B of BCE(sigmoid(logit(z_{t+1})), d_t), on the predicted z_1..z_H
    logits = np.asarray(jax.jit(wm.termination_logit)(params, zs[1:])[..., 0], np.float64)
    p = 1.0 / (1.0 + np.exp(-logits))
    bce = -(term * np.log(p) + (1 - term) * np.log(1 - p)).mean()
    np.testing.assert_allclose(float(m["termination_loss"]), bce, rtol=1e-5)
    np.testing.assert_allclose(float(loss), float(loss_pe) + coef * bce, rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(zs), np.asarray(zs_pe))
    assert "termination_loss" not in m_pe and bce > 0.05


# ================================================================ planner (§11.4)
def test_planner_stops_reward_and_value_after_a_predicted_termination():
    wm = make_wm(episodic=True)
    params = random_params(wm, 11)
    N = 8
    rng = np.random.default_rng(12)
    z = jax.nn.softmax(jnp.asarray(rng.standard_normal((N, 2, 8)), jnp.float32), -1).reshape(N, 16)
    actions = jnp.asarray(rng.uniform(-1, 1, (H, N, ACT)), jnp.float32)
    key, gamma = jax.random.PRNGKey(13), 0.9

    def with_term_bias(b):
        t = params["termination"]
        return dict(params, termination=dict(t, Dense_0={"kernel": jnp.zeros_like(t["Dense_0"]["kernel"]),
                                                         "bias": jnp.full((1,), b, jnp.float32)}))

    G = jax.jit(lambda p: estimate_value(wm, p, z, actions, gamma, key))

    @jax.jit
    def pieces(p):
        rs, zz, zs = [], z, []
        for t in range(H):
            rs.append(wm.reward(p, zz, actions[t]))
            zz = wm.next(p, zz, actions[t])
            zs.append(zz)
        _, api, _, _ = wm.pi(p["pi"], zz, jax.random.split(key)[0])
        return jnp.stack(rs), wm.q_all(p["qs"], zz, api), jnp.stack(zs)

    r_logits, q_logits, zs = pieces(params)
    bins = np.linspace(-10, 10, 101)

    def dec(l):
        l = np.asarray(l, np.float64)
        e = np.exp(l - l.max(-1, keepdims=True))
        s = (e / e.sum(-1, keepdims=True)) @ bins
        return np.sign(s) * np.expm1(np.abs(s))

    # shift the head's output bias so that about half of the predictions say "terminated"
    logits = np.asarray(jax.jit(wm.termination_logit)(params, zs)[..., 0])
    t = params["termination"]
    params = dict(params, termination=dict(t, Dense_0=dict(t["Dense_0"],
                                                          bias=t["Dense_0"]["bias"] - np.median(logits))))
    r, q = dec(r_logits), dec(q_logits).mean(0)
    full = sum(gamma ** t * r[t] for t in range(H)) + gamma ** H * q
    # never terminates (logit -20): the non-episodic value
    np.testing.assert_allclose(np.asarray(G(with_term_bias(-20.0))), full, rtol=1e-4, atol=1e-4)
    # always terminates after the first step: only r_0 counts (no later reward, no value)
    np.testing.assert_allclose(np.asarray(G(with_term_bias(20.0))), r[0], rtol=1e-4, atol=1e-4)
    # the trained head's own predictions: terminated after step t masks steps t+1.. and Q
    dead = np.asarray(jax.jit(wm.termination_logit)(params, zs)[..., 0] > 0.0, np.float64)  # sigmoid > 0.5
    alive = np.concatenate([np.ones((1, N)), np.cumprod(1 - dead, axis=0)])  # alive before step t
    expected = sum(gamma ** t * alive[t] * r[t] for t in range(H)) + gamma ** H * alive[H] * q
    np.testing.assert_allclose(np.asarray(G(params)), expected, rtol=1e-4, atol=1e-4)
    assert 0 < alive[H].sum() < N, "some samples must terminate, others not, for the test to mean anything"
    assert np.abs(full - r[0]).min() > 1e-3


# ====================================================== replay of variable-length episodes
T_R, N_ENVS = 8, 2
MIN_ROWS = H + 1
# agent steps of each env's successive episodes; T_R = 8 steps means truncated, fewer terminated
LENGTHS = {0: [5, 2, 8, 3, 6, 1, 4, 8, 2, 5], 1: [8, 1, 4, 7, 3, 2, 6, 5, 8, 3]}

_commit = jax.jit(rp.commit_and_restart, static_argnums=5)
_stage = jax.jit(rp.stage_step)


def simulate(capacity, lengths=LENGTHS, n_ticks=None):
    # capacity: agent steps held (the ring has 2 capacity rows)
    """Drive an EpisodicReplay as the online loop does (commit + restart at the top of a tick,
    then one staged step per env). Observations carry (episode id, step); action a_t =
    (id + 0.5, t); reward r_t = 100 id + t. Returns (replay, expected committed episodes in
    order: (id, steps, terminated))."""
    rng = np.random.default_rng(0)
    replay = rp.init_episodic_replay(capacity, N_ENVS, T_R, OBS, ACT)
    queue = {e: list(v) for e, v in lengths.items()}
    ep_id, ep_len, t = np.zeros(N_ENVS, int), np.zeros(N_ENVS, int), np.zeros(N_ENVS, int)
    done, active = np.ones(N_ENVS, bool), False
    next_id, expected = 0, []
    n_ticks = n_ticks or max(sum(v) for v in lengths.values()) + 1
    for _ in range(n_ticks):
        ending = done & active
        for e in range(N_ENVS):  # commit order: env index within a tick
            if ending[e]:
                expected.append((int(ep_id[e]), int(t[e]), bool(t[e] < T_R)))
        obs0 = np.zeros((N_ENVS, OBS), np.float32)
        stop = any(done[e] and not queue[e] for e in range(N_ENVS))
        steps = t.copy()
        for e in range(N_ENVS):
            if done[e] and not stop:
                ep_id[e], ep_len[e], t[e] = next_id, queue[e].pop(0), 0
                next_id += 1
            obs0[e, :2] = ep_id[e], 0
            obs0[e, 2:] = rng.standard_normal(OBS - 2)
        replay = _commit(replay, jnp.asarray(ending), jnp.asarray(steps, jnp.int32),
                         jnp.asarray(done & (not stop)), jnp.asarray(obs0), MIN_ROWS)
        if stop:
            return replay, expected
        active = True
        obs = np.zeros((N_ENVS, OBS), np.float32)
        obs[:, 0], obs[:, 1] = ep_id, t + 1
        term = (t + 1 == ep_len) & (ep_len < T_R)
        replay = _stage(replay, jnp.asarray(t + 1, jnp.int32), jnp.asarray(obs),
                        jnp.asarray(np.stack([ep_id + 0.5, t], 1), jnp.float32),
                        jnp.asarray(100.0 * ep_id + t, jnp.float32), jnp.asarray(term))
        t = t + 1
        done = t >= ep_len
    return replay, expected


def held_suffix(expected, capacity):
    """Whole-episode eviction: the newest episodes whose agent steps add up to <= capacity."""
    held, steps = [], 0
    for ep in reversed(expected):
        steps += ep[1]
        if steps > capacity:
            break
        held.append(ep)
    return held[::-1]


@pytest.fixture(scope="module")
def big():  # nothing evicted
    return simulate(200)


@pytest.fixture(scope="module")
def wrapped():  # the ring (40 rows) wrapped several times
    return simulate(20)


def test_committed_episodes_in_completion_order_with_variable_lengths(big):
    replay, expected = big
    episodes, evicted = rp.committed_episodes(replay)
    assert evicted == 0 and len(episodes) == len(expected) == int(replay.committed)
    assert [int(e["obs"][0, 0]) for e in episodes] == [i for i, _, _ in expected]
    for e, (i, steps, terminated) in zip(episodes, expected):
        L = steps + 1
        assert e["obs"].shape == (L, OBS) and e["action"].shape == (L, ACT) and e["reward"].shape == (L,)
        np.testing.assert_array_equal(e["obs"][:, 0], i)
        np.testing.assert_array_equal(e["obs"][:, 1], np.arange(L))
        assert np.isnan(e["action"][0]).all() and np.isnan(e["reward"][0])
        np.testing.assert_array_equal(e["action"][1:, 1], np.arange(steps))
        np.testing.assert_array_equal(e["reward"][1:], 100.0 * i + np.arange(steps))
        # terminated only on the last row of an episode that terminated (not at the time limit)
        want = np.zeros(L, bool)
        want[-1] = terminated
        np.testing.assert_array_equal(e["terminated"], want)
    assert len({len(e["reward"]) for e in episodes}) > 4
    # the counters
    assert int(replay.longest) == T_R
    assert int(replay.sampleable) == sum(s + 1 >= MIN_ROWS for _, s, _ in expected)
    assert int(rp.num_sampleable(replay)) == int(replay.sampleable)


def test_ring_evicts_whole_episodes_oldest_first(wrapped):
    replay, expected = wrapped
    episodes, evicted = rp.committed_episodes(replay)
    held = held_suffix(expected, 20)
    assert [int(e["obs"][0, 0]) for e in episodes] == [i for i, _, _ in held]
    assert evicted == len(expected) - len(held) > 5
    for e, (i, steps, _) in zip(episodes, held):  # intact, though the ring wrapped
        np.testing.assert_array_equal(e["obs"][:, 0], i)
        np.testing.assert_array_equal(e["obs"][:, 1], np.arange(steps + 1))
    assert int(rp.num_sampleable(replay)) == sum(s + 1 >= MIN_ROWS for _, s, _ in held)


sample_many = jax.jit(jax.vmap(lambda r, k: rp.sample_episodic(r, k, 32, H), in_axes=(None, 0)))


@pytest.mark.parametrize("which", ["big", "wrapped"])
def test_slices_uniform_over_long_enough_episodes_never_crossing(which, request):
    replay, expected = request.getfixturevalue(which)
    held = held_suffix(expected, 200 if which == "big" else 20)
    b = sample_many(replay, jax.random.split(jax.random.PRNGKey(1), 500))
    f = lambda x: np.asarray(jnp.swapaxes(x, 1, 2)).reshape((-1,) + x.shape[1:2] + x.shape[3:])
    obs, act, rew, term = f(b.obs), f(b.action), f(b.reward), f(b.terminated)
    ids, steps = obs[:, :, 0], obs[:, :, 1]
    assert np.all(ids == ids[:, :1]) and np.all(steps == steps[:, :1] + np.arange(H + 1))
    np.testing.assert_array_equal(act[:, :, 0], ids[:, 1:] + 0.5)
    np.testing.assert_array_equal(rew, 100.0 * ids[:, 1:] + steps[:, :1] + np.arange(H))
    assert np.isfinite(obs).all() and np.isfinite(act).all() and np.isfinite(rew).all()
    info = {i: (s, tm) for i, s, tm in held}
    # d_t = 1 exactly on the terminal step of a terminated episode
    last = np.array([[info[int(i)][1] and s == info[int(i)][0] for s in row] for i, row in zip(ids[:, 0], steps[:, 1:])])
    np.testing.assert_array_equal(term, last.astype(np.float32))
    # only held episodes with >= H + 1 rows, each of them, about equally often (episode-uniform)
    eligible = sorted(i for i, s, _ in held if s + 1 >= MIN_ROWS)
    drawn, counts = np.unique(ids[:, 0].astype(int), return_counts=True)
    assert drawn.tolist() == eligible
    expect = len(ids) / len(eligible)
    assert counts.min() > 0.75 * expect and counts.max() < 1.25 * expect
    # starts uniform over 0 .. steps + 1 - (H + 1) within each episode
    for i in eligible[:6]:
        starts = steps[ids[:, 0] == i, 0]
        assert set(starts.astype(int)) == set(range(info[i][0] + 1 - H))


def test_nothing_sampleable_when_every_episode_is_shorter_than_h_plus_1():
    replay, expected = simulate(60, {0: [1, 2, 2, 1], 1: [2, 2, 1, 2]})
    assert len(expected) == int(replay.committed) >= 6 and int(replay.longest) == 2
    assert int(replay.sampleable) == 0 and int(rp.num_sampleable(replay)) == 0
    episodes, _ = rp.committed_episodes(replay)  # still exported: they are real data
    assert [len(e["reward"]) for e in episodes] == [s + 1 for _, s, _ in expected]


def test_capacity_in_agent_steps_with_room_for_every_reset_row():
    assert rp.capacity_steps(1_000_000, 5000, 1000) == 5000      # min(buffer, run) agent steps
    assert rp.capacity_steps(300, 5000, 100) == 300
    assert rp.capacity_steps(50, 5000, 100) == 100               # one whole episode fits
    replay = rp.init_episodic_replay(300, 2, 100, OBS, ACT)
    assert replay.obs.shape == (600, OBS) and rp.episodic_capacity(replay) == 300
    with pytest.raises(ValueError, match="T = 10"):
        rp.init_episodic_replay(9, 1, 10, OBS, ACT)


def test_run_no_longer_than_capacity_evicts_nothing_even_with_one_step_episodes():
    lengths = {0: [1] * 12, 1: [1, 2, 1, 1, 8, 1, 1]}
    steps = sum(sum(v) for v in lengths.values())
    replay, expected = simulate(steps, lengths)  # 2 steps-worth of rows per one-step episode
    episodes, evicted = rp.committed_episodes(replay)
    assert evicted == 0 and len(episodes) == len(expected) == int(replay.committed)
    assert [int(e["obs"][0, 0]) for e in episodes] == [i for i, _, _ in expected]
    assert int(replay.rows_written) > steps  # more rows than agent steps, all held
    # one fewer step of capacity: the oldest episode goes, whole
    replay, expected = simulate(sum(s for _, s, _ in expected) - 1, lengths)
    episodes, evicted = rp.committed_episodes(replay)
    assert evicted == 1 and [int(e["obs"][0, 0]) for e in episodes] == [i for i, _, _ in expected[1:]]


# ======================================================================= end to end
from tdmpc2core import TDMPC2  # noqa: E402
from tdmpc2core.agents.single_task import NoSampleableEpisodeError  # noqa: E402
from tdmpc2core.envs.base import Env, EnvSpec  # noqa: E402


def one_seed(tree, i=0):
    return jax.tree_util.tree_map(lambda x: x[i], tree)


def check_episodes(episodes, T, fell=None):
    """Committed episodes of a real run: rows = steps + 1, a terminated episode ends on its only
    terminal row, an episode without a terminal row ran the whole T steps."""
    for e in episodes:
        L = len(e["reward"])
        assert 2 <= L <= T + 1 and e["obs"].shape[0] == L and np.isnan(e["reward"][0])
        assert np.isfinite(e["obs"]).all() and np.isfinite(e["reward"][1:]).all()
        assert not e["terminated"][:-1].any()
        if not e["terminated"][-1]:
            assert L == T + 1, "an episode that did not terminate must end at the time limit"
        if fell is not None:
            assert bool(e["terminated"][-1]) == bool(fell(e["obs"][-1]))


# ------------------------------------------------------------- learning probe
PROBE_T = 40
PROBE_CFG = dict(model_size=1, mlp_dim=64, latent_dim=32, enc_dim=64, num_samples=64, num_elites=8,
                 num_pi_trajs=4, iterations=2, batch_size=64, seed_steps=300)
PROBE_ENVS = 2  # two envs that restart on their own: each its own staging area in the replay
PROBE_STEPS = 800
# evaluations at agent steps 0, 400 and 800 (checked by the checkpoint test below)
PROBE_RUN = dict(seed=0, n_timesteps=PROBE_STEPS, eval_every=400, eval_episodes=20)
# mean eval return (= mean episode length) of 20 episodes, out of T = 40. One seed of 800 agent
# steps: its trained return moves with the CPU's float rounding (AMD EPYC family 26 above 20; family
# 25, bit-identical code: 19.85, untrained 12.50), so the probe asks for a clear gain over the
# untrained planner on the same CPU as well as a trained return above 17.5
PROBE_THRESHOLD = 17.5
PROBE_UNTRAINED_MAX = 15.0  # the untrained planner's mean episode: it falls early
PROBE_GAIN = 5.0  # trained minus untrained mean return, at least


class Balance(Env):
    """An unstable 1-D system: x' = 1.1 x + 0.1 a (a in [-1, 1]); the episode terminates when
    |x'| reaches 1 (it fell). Every step pays +1, the step that falls too, so the return is
    the episode length. Starts: |x0| uniform in [0.3, 0.6], either sign.

    Terminating is all that matters here: the reward is the same whatever the agent does, so
    an agent that bootstraps through every episode end (the paper-era agent) sees a flat
    value and has no reason to avoid falling; only the end of the reward stream at a fall
    makes balancing worth more. Doing nothing falls within 5-13 steps (mean return ~9, as
    random actions); holding x needs a = -k x with 0.1 < k.
    """

    def __init__(self):
        self.spec = EnvSpec.from_bounds("Balance", "gymnax", 1, [-1.0], [1.0], action_repeat=1,
                                        episode_length=PROBE_T, can_terminate=True)

    def _raw_reset(self, key):
        k1, k2 = jax.random.split(key)
        x = jax.random.uniform(k1, (), jnp.float32, 0.3, 0.6) * jnp.where(jax.random.bernoulli(k2), 1.0, -1.0)
        return x, x[None]

    def _raw_step(self, x, env_action, key):
        x = jnp.clip(1.1 * x + 0.1 * env_action[0], -1.0, 1.0)
        return x, x[None], jnp.ones((), jnp.float32), jnp.abs(x) >= 1.0


def test_balance_env_falls_without_control_and_holds_with_feedback():
    env = Balance()
    step = jax.jit(env.step)
    for policy, expect_fall in ((lambda x: 0.0, True), (lambda x: float(np.clip(-3.0 * x, -1, 1)), False)):
        state, obs = env.reset(jax.random.PRNGKey(0))
        for t in range(PROBE_T):
            state, out = step(state, jnp.array([policy(float(obs[0]))]), jax.random.PRNGKey(0))
            obs = out.obs
            assert float(out.reward) == 1.0
            if bool(out.terminated):
                break
        assert bool(out.terminated) == expect_fall and (t < 14 if expect_fall else t == PROBE_T - 1)


@pytest.fixture(scope="module")
def probe():
    # one trained episodic agent (one set of compiled programs) for the learning probe, the
    # schedule and replay checks and the checkpoint test
    agent = TDMPC2(Balance(), n_envs=PROBE_ENVS, episodic=True, **PROBE_CFG)
    assert agent.gamma == 0.95 and agent.episodic and agent.spec.can_terminate
    t = time.perf_counter()
    state, hist = agent.train(**PROBE_RUN)
    return agent, state, hist, time.perf_counter() - t


def test_probe_episodic_agent_learns_to_avoid_termination(probe):
    agent, state, _, seconds = probe
    returns, lengths = agent.evaluate(state, 20, eval_index=3)
    untrained_r, untrained_l = agent.evaluate(agent.init([0], PROBE_STEPS), 20, eval_index=3)
    print(f"probe: trained mean return {returns.mean():.2f}, untrained {untrained_r.mean():.2f} "
          f"(threshold {PROBE_THRESHOLD}); train {seconds:.1f} s")
    # evaluation reports each episode's length (agent steps up to and including the fall, or T)
    np.testing.assert_array_equal(returns, lengths)
    np.testing.assert_array_equal(untrained_r, untrained_l)
    assert untrained_l.min() < PROBE_T and np.all((lengths >= 1) & (lengths <= PROBE_T))
    assert returns.mean() > PROBE_THRESHOLD
    assert untrained_r.mean() < PROBE_UNTRAINED_MAX
    assert returns.mean() - untrained_r.mean() >= PROBE_GAIN


def test_probe_run_schedule_and_replay(probe):
    agent, state, _, _ = probe
    n, ticks = PROBE_ENVS, PROBE_STEPS // PROBE_ENVS
    burst_tick = 300 // n
    # random actions for ticks 0..150, the burst of 300 updates at tick 150, then n per tick
    assert int(state.agent.updates[0]) == 300 + n * (ticks - burst_tick - 1)
    assert int(state.pending_updates[0]) == 0
    episodes, evicted = rp.committed_episodes(one_seed(state.replay))
    assert evicted == 0
    check_episodes(episodes, PROBE_T, fell=lambda o: abs(o[0]) >= 1.0)
    lengths = [len(e["reward"]) - 1 for e in episodes]
    n_term = sum(bool(e["terminated"][-1]) for e in episodes)
    assert n_term > 10 and len(set(lengths)) > 5 and max(lengths) == PROBE_T
    # every agent step of the run is in a committed episode or in one of the n in progress
    assert sum(lengths) + int(np.sum(np.asarray(state.ep_t[0]))) == PROBE_STEPS
    fell_at_last_tick = sum(bool(state.done[0, e]) and abs(float(state.obs[0, e, 0])) >= 1 for e in range(n))
    assert int(state.terminations[0]) == n_term + fell_at_last_tick


def test_episodic_run_resumed_from_a_checkpoint_equals_the_whole_run(probe, tmp_path):
    # the variable-length replay (ring, episode table, each env's staging area) and the
    # pending updates are part of the checkpoint: the probe's run, stopped after its second
    # evaluation with episodes in progress and resumed from disk, equals the uninterrupted run
    # bit for bit, its evaluations included (the restored ones and the one after the resume)
    from tdmpc2core.run.driver import TrainingInterrupted

    agent, whole, whole_hist, _ = probe
    d = tmp_path / "ck"
    at = {"steps": 0}
    with pytest.raises(TrainingInterrupted) as e:
        agent.train(checkpoint_dir=d, checkpoint_every=100, progress=lambda p: at.update(steps=p["agent_steps"]),
                    should_stop=lambda: at["steps"] >= 500, **PROBE_RUN)
    stopped_at = e.value.agent_steps
    assert stopped_at == 500 and (d / f"step_{stopped_at:012d}").is_dir()
    state, hist = agent.train(checkpoint_dir=d, **PROBE_RUN)  # restored from disk
    for x, y in zip(jax.tree_util.tree_leaves(whole), jax.tree_util.tree_leaves(state)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert whole_hist["eval_returns"].shape == (3, 1, 20)
    np.testing.assert_array_equal(hist["eval_returns"], whole_hist["eval_returns"])
    np.testing.assert_array_equal(hist["eval_lengths"], whole_hist["eval_lengths"])


# ------------------------------------------------------------- real terminating envs
TINY = dict(model_size=1, mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16, num_elites=4,
            num_pi_trajs=2, iterations=1, batch_size=16)


@pytest.mark.slow
def test_brax_inverted_pendulum_runs_trains_and_exports(tmp_path):
    # the pole falls within a few steps under random actions: many short terminated episodes,
    # two envs that restart on their own
    agent = TDMPC2("inverted_pendulum", n_envs=2, episode_length=100, episodic=True, seed_steps=100, **TINY)
    T = agent.episode_length
    assert T == 100 and agent.spec.can_terminate
    state, hist = agent.train(seed=0, n_timesteps=300)  # (evaluation lengths: the probe above)
    # 150 ticks of 2 envs: the burst of 100 updates at tick 50, then 2 per tick
    assert int(state.agent.updates[0]) == 100 + 2 * (150 - 50 - 1) and int(state.pending_updates[0]) == 0
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree_util.tree_leaves(state.agent.params))
    assert "termination_loss" in hist["chunks"][-1] and np.isfinite(hist["chunks"][-1]["termination_loss"]).all()
    episodes, evicted = rp.committed_episodes(one_seed(state.replay))
    assert evicted == 0
    check_episodes(episodes, T)
    lengths = [len(e["reward"]) - 1 for e in episodes]
    n_term = sum(bool(e["terminated"][-1]) for e in episodes)
    # every termination is the end of a committed episode, or of one that ended at the last tick
    ended_last_tick = int(np.sum(np.asarray(state.done[0])))
    assert n_term <= int(state.terminations[0]) <= n_term + ended_last_tick and n_term > 20
    assert len(set(lengths)) > 3 and sum(lengths) + int(np.sum(np.asarray(state.ep_t[0]))) == 300
    # the episode dataset export (tdmpc2core.dataset, when present) keeps the terminated flags
    dataset = pytest.importorskip("tdmpc2core.dataset")
    ds = dataset.export_episodes(agent, state, seed_index=0, name="inverted_pendulum", seed=0)
    dataset.save_dataset(ds, tmp_path / "episodes.parquet")
    back = dataset.load_dataset(tmp_path / "episodes.parquet")
    assert back.num_episodes == len(episodes)
    ends = np.flatnonzero(back.step == 0)[1:] - 1
    ends = np.append(ends, len(back.step) - 1)
    np.testing.assert_array_equal(back.terminated[ends], [bool(e["terminated"][-1]) for e in episodes])
    assert int(back.terminated.sum()) == n_term and not back.truncated[ends][np.asarray(back.terminated[ends])].any()


def test_mountaincar_accepted_by_the_episodic_agent():
    agent = TDMPC2("MountainCarContinuous-v0", episodic=True)
    assert agent.spec.can_terminate and agent.episode_length == 999
    assert agent.gamma == pytest.approx((999 / 5 - 1) / (999 / 5)) and agent.seed_steps == 4995
    assert "termination" in jax.eval_shape(agent.wm.init, jax.random.PRNGKey(0))


@pytest.mark.slow
def test_no_sampleable_episode_raises_after_train():
    # the goal moved to the left edge of the track: every episode terminates at its first
    # step, so no episode ever has the H + 1 = 4 rows of a slice (mpc=False: the planner
    # is not needed, and compiling it would only cost time)
    agent = TDMPC2("MountainCarContinuous-v0", episodic=True, seed_steps=10, mpc=False,
                   env_params={"max_steps_in_episode": 3, "goal_position": -1.2}, **TINY)
    assert agent.episode_length == 3
    with pytest.raises(ValueError, match="shorter than horizon = 3"):  # T < H: refused at once
        TDMPC2("MountainCarContinuous-v0", episodic=True, env_params={"max_steps_in_episode": 2}, **TINY)
    with pytest.warns(RuntimeWarning, match="waiting"):
        with pytest.raises(NoSampleableEpisodeError) as e:
            agent.train(seed=0, n_timesteps=30)
    msg = str(e.value)
    assert isinstance(e.value, ValueError)
    assert "MountainCarContinuous-v0" in msg and "H = 3" in msg and "seed 0: 1." in msg and "never ran" in msg
    st = e.value.state
    assert int(st.terminations[0]) == 30          # it terminated, and the episodic agent took it
    assert int(st.agent.updates[0]) == 0 and int(st.pending_updates[0]) == 10 + 19
    assert int(st.replay.sampleable[0]) == 0 and int(st.replay.longest[0]) == 1
