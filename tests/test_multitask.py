"""Multi-task TD-MPC2 trained offline (spec §10, §1.2, §12.15): task_dim defaults, action masks
in every output, the task embedding's max-norm, per-task discounts, slice sampling, seeds
vmapped vs alone, runs continued in chunks, evaluation errors, and a twin-task probe that only
the task embedding can solve.

Datasets are synthetic, built here from numpy arrays in the layout of
:class:`tdmpc2core.dataset.EpisodeDataset` (row 0 of an episode is its reset row, NaN action
and reward in the task's own dims; observations and actions zero-padded at the end).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tdmpc2core.model import update as up
from tdmpc2core.dataset import EpisodeDataset, TaskInfo
from tdmpc2core.envs.base import Env, EnvSpec
from tdmpc2core.agents.multitask import TDMPC2MultiTask, official_task_dim, sample_slices
from tdmpc2core.model.planner import plan, policy_trajectories

TINY = dict(model_size=1, mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16, num_elites=4, num_pi_trajs=2,
            iterations=1, task_dim=8)
T_TWIN = 25
# the twin-task agent (wider, so that the probe learns); tests/test_multitask_host.py evaluates
# with the same settings, so its evaluation and init programs are this file's (the session's
# compilation cache, tests/conftest.py)
TWIN = dict(TINY, mlp_dim=64, latent_dim=32, enc_dim=64, num_samples=64, num_elites=8, num_pi_trajs=4, iterations=2)
TWIN_BATCH, TWIN_EVAL_EPISODES = 64, 10


def leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def seed0(tree):
    return jax.tree_util.tree_map(lambda x: x[0], tree)


# --------------------------------------------------------------------- synthetic data
def make_dataset(task_episodes, tasks) -> EpisodeDataset:
    """An EpisodeDataset from per-task lists of episodes (obs [T+1, o], action [T+1, a] with a
    NaN row 0, reward [T+1] with a NaN row 0), padded to the largest dims."""
    O = max(t.obs_dim for t in tasks)
    A = max(t.action_dim for t in tasks)
    cols = {k: [] for k in ("obs", "action", "reward", "truncated", "episode", "step", "task")}
    ep = 0
    for k, episodes in enumerate(task_episodes):
        for o, a, r in episodes:
            n = len(r)
            cols["obs"].append(np.pad(o, ((0, 0), (0, O - o.shape[1]))))
            cols["action"].append(np.pad(a, ((0, 0), (0, A - a.shape[1]))))
            cols["reward"].append(r)
            cols["truncated"].append(np.arange(n) == n - 1)
            cols["episode"].append(np.full(n, ep, np.int64))
            cols["step"].append(np.arange(n, dtype=np.int32))
            cols["task"].append(np.full(n, k, np.int32))
            ep += 1
    c = {k: np.concatenate(v) for k, v in cols.items()}
    return EpisodeDataset(obs=c["obs"].astype(np.float32), action=c["action"].astype(np.float32),
                          reward=c["reward"].astype(np.float32), terminated=np.zeros(len(c["reward"]), bool),
                          truncated=c["truncated"], episode=c["episode"], step=c["step"], task=c["task"],
                          tasks=tuple(tasks), provenance={"source": "tests/test_multitask.py"}).check("test dataset")


def random_episodes(rng, n, T, obs_dim, action_dim):
    out = []
    for _ in range(n):
        a = rng.uniform(-1, 1, (T + 1, action_dim)).astype(np.float32)
        r = rng.normal(size=T + 1).astype(np.float32)
        a[0], r[0] = np.nan, np.nan
        out.append((rng.normal(size=(T + 1, obs_dim)).astype(np.float32), a, r))
    return out


def task(name, obs_dim, action_dim, T, env_id=None, action_repeat=1):
    return TaskInfo(name=name, obs_dim=obs_dim, action_dim=action_dim, episode_length=T, action_repeat=action_repeat,
                    discount=0.95, env_id=env_id)


class TwinLine(Env):
    """A point on [-1, 1] moved by 0.2 a per step; reward sign * x_{t+1}. The two twins have the
    same observations and dynamics and opposite rewards: only the task embedding tells them apart."""

    def __init__(self, sign: float, name: str):
        self.sign = float(sign)
        self._token = self.sign
        self.spec = EnvSpec(env_id=name, suite="gymnax", obs_dim=1, action_dim=1, action_low=(-1.0,),
                            action_high=(1.0,), action_repeat=1, episode_length=T_TWIN, sim_episode_length=T_TWIN,
                            backend=None, can_terminate=False)

    def _raw_reset(self, key):
        x = jax.random.uniform(key, (), jnp.float32, -0.5, 0.5)
        return x, x[None]

    def _raw_step(self, x, env_action, key):
        x = jnp.clip(x + 0.2 * env_action[0], -1.0, 1.0)
        return x, x[None], self.sign * x, jnp.zeros((), bool)


def twin_episodes(rng, sign, n):
    """Uniform random actions (the offline data of a random policy)."""
    out = []
    for _ in range(n):
        x = rng.uniform(-0.5, 0.5)
        o, a, r = [x], [np.nan], [np.nan]
        for _t in range(T_TWIN):
            u = rng.uniform(-1, 1)
            x = float(np.clip(x + 0.2 * u, -1.0, 1.0))
            o.append(x), a.append(u), r.append(sign * x)
        out.append((np.array(o, np.float32)[:, None], np.array(a, np.float32)[:, None], np.array(r, np.float32)))
    return out


@pytest.fixture(scope="module")
def twin():
    rng = np.random.default_rng(0)
    ds = make_dataset([twin_episodes(rng, 1.0, 40), twin_episodes(rng, -1.0, 40)],
                      [task("right", 1, 1, T_TWIN), task("left", 1, 1, T_TWIN)])
    agent = TDMPC2MultiTask(ds, eval_envs=[TwinLine(1.0, "right"), TwinLine(-1.0, "left")], batch_size=TWIN_BATCH,
                            return_ranges={"right": (-25, 25), "left": (-25, 25)}, **TWIN)
    return ds, agent


@pytest.fixture(scope="module")
def padded():
    """Two tasks of different widths: obs 2 / action 1 and obs 4 / action 3."""
    rng = np.random.default_rng(1)
    tasks = [task("small", 2, 1, 10), task("big", 4, 3, 10)]
    ds = make_dataset([random_episodes(rng, 4, 10, 2, 1), random_episodes(rng, 4, 10, 4, 3)], tasks)
    return ds, TDMPC2MultiTask(ds, batch_size=16, **TINY)


# --------------------------------------------------------------------- construction
def test_task_dim_defaults_follow_the_official_parser(padded):
    assert official_task_dim(1, 30) == 96 and official_task_dim(317, 30) == 96
    assert official_task_dim(5, 30) == 64 and official_task_dim(19, 30) == 64 and official_task_dim(48, 30) == 64
    assert official_task_dim(5, 80) == 96 and official_task_dim(48, 80) == 96
    ds, padded_agent = padded
    small = {k: v for k, v in TINY.items() if k != "task_dim"}
    assert TDMPC2MultiTask(ds, **small).task_dim == 96                 # model_size 1
    assert TDMPC2MultiTask(ds, **dict(small, model_size=5)).task_dim == 64
    agent = TDMPC2MultiTask(ds, **dict(small, task_dim=12))            # an explicit value overrides
    assert agent.task_dim == 12 and agent.cfg.batch_size == 1024       # the paper's multi-task batch
    # the parameters of an explicit task_dim: the padded agent's (TINY's task_dim=8), whose init
    # program the other tests here use too (one compile fewer than initialising `agent`)
    assert padded_agent.task_dim == 8
    params = seed0(padded_agent.init([0]).agent.params)
    assert params["task_emb"].shape == (2, 8)
    assert np.all(np.abs(np.asarray(params["task_emb"])) <= 0.02)     # uniform(-0.02, 0.02), spec §3.7
    assert params["encoder"]["NormedLinear_0"]["Dense_0"]["kernel"].shape[0] == 4 + 8    # padded obs + e
    assert params["pi"]["Dense_0"]["kernel"].shape[1] == 2 * 3                          # padded actions


def test_per_task_discounts_from_each_episode_length():
    rng = np.random.default_rng(2)
    Ts = (25, 200, 500, 1000)
    tasks = [task(f"t{T}", 2, 1, T) for T in Ts]
    ds = make_dataset([random_episodes(rng, 1, T, 2, 1) for T in Ts], tasks)
    agent = TDMPC2MultiTask(ds, batch_size=8, **TINY)
    np.testing.assert_allclose(agent.gammas, [0.95, 0.975, 0.99, 0.995], rtol=0, atol=1e-7)  # spec §1.3
    assert TDMPC2MultiTask(ds, batch_size=8, gamma=0.9, **TINY).gammas.tolist() == pytest.approx([0.9] * 4)
    # the update gathers each slice's own discount, and the TD target uses it
    params = seed0(agent.init([0]).agent.params)
    task_ids = jnp.array([3, 0, 2, 1, 0], jnp.int32)
    _, e, gamma, mask = up.task_inputs(params, task_ids, agent.gammas, agent.masks)
    np.testing.assert_array_equal(np.asarray(gamma), agent.gammas[np.asarray(task_ids)])
    # a target ensemble whose logits all favour the top bin: Q' = symexp(10) for every member
    bias = jnp.zeros(agent.cfg.num_bins).at[-1].set(50.0)
    tq = jax.tree_util.tree_map(lambda x: x, params["qs"])
    tq["Dense_0"]["bias"] = jnp.broadcast_to(bias, tq["Dense_0"]["bias"].shape)
    H, B = agent.cfg.horizon, 5
    batch = up.Batch(obs=jnp.zeros((H + 1, B, 2)), action=jnp.zeros((H, B, 1)), reward=jnp.ones((H, B)),
                     terminated=jnp.zeros((H, B)), task=task_ids)
    td, _ = jax.jit(lambda: up.td_targets(agent.wm, params, tq, batch, gamma, jax.random.PRNGKey(0), e, mask))()
    q = float(np.expm1(10.0))
    want = np.broadcast_to(1.0 + agent.gammas[np.asarray(task_ids)] * q, (H, B))
    np.testing.assert_allclose(np.asarray(td), want, rtol=1e-4)


def test_eval_env_that_does_not_match_the_task_table_is_refused(padded):
    ds, _ = padded
    rng = np.random.default_rng(3)
    pend = make_dataset([random_episodes(rng, 2, 100, 3, 1)], [task("pendulum", 3, 1, 100, env_id="Pendulum-v1")])
    with pytest.raises(ValueError, match=r"episode_length 200 \(env\) vs 100 \(task table\)"):
        TDMPC2MultiTask(pend, eval_envs=True, **TINY)  # gymnax keeps its own T = 200
    with pytest.raises(ValueError, match="eval_envs has 1 entries; the dataset has 2 tasks"):
        TDMPC2MultiTask(ds, eval_envs=["Pendulum-v1"], **TINY)
    with pytest.raises(ValueError, match="env_id"):
        TDMPC2MultiTask(ds, eval_envs=True, **TINY)  # the synthetic tasks have no env id


def test_terminating_data_and_unknown_hyperparameters_are_refused(padded):
    ds, _ = padded
    term = EpisodeDataset(**{**{f: getattr(ds, f) for f in ("obs", "action", "reward", "truncated", "episode",
                                                            "step", "task", "tasks", "provenance")},
                             "terminated": ds.truncated.copy()})
    with pytest.raises(ValueError, match="terminated"):
        TDMPC2MultiTask(term, **TINY)
    with pytest.raises(TypeError, match="num_sample"):
        TDMPC2MultiTask(ds, num_sample=3)
    # offline: n_timesteps counts updates, so updates_per_step has no role (refused, one line)
    with pytest.raises(ValueError, match=r"^updates_per_step=2 applies to the single-task online agent only: "
                                         r"TDMPC2MultiTask trains offline"):
        TDMPC2MultiTask(ds, updates_per_step=2, **TINY)


def test_evaluate_without_eval_envs_raises(padded):
    _, agent = padded
    state = agent.init([0])
    with pytest.raises(ValueError, match="no eval_envs"):
        agent.evaluate(state, num_episodes=2)
    with pytest.raises(ValueError, match="no eval_envs"):
        agent.train(seed=0, n_timesteps=2, eval_every=1)


# --------------------------------------------------------------------- sampling
def test_slices_stay_inside_episodes_and_drop_the_reset_row(padded):
    ds, agent = padded
    H, B = agent.cfg.horizon, 512
    batch = jax.jit(lambda k: sample_slices(agent.data, k, B, H))(jax.random.PRNGKey(0))
    assert batch.obs.shape == (H + 1, B, 4) and batch.action.shape == (H, B, 3) and batch.task.shape == (B,)
    assert np.isfinite(np.asarray(batch.action)).all() and np.isfinite(np.asarray(batch.reward)).all()
    # every slice is H+1 consecutive rows of one episode: find each one's rows in the dataset
    obs = np.asarray(batch.obs).transpose(1, 0, 2)
    starts = set()
    for b in range(B):
        row = int(np.flatnonzero((ds.obs == obs[b, 0]).all(axis=1))[0])
        np.testing.assert_array_equal(ds.obs[row:row + H + 1], obs[b])
        assert len(set(ds.episode[row:row + H + 1])) == 1
        assert ds.task[row] == int(batch.task[b])
        starts.add(int(ds.step[row]))
    assert 0 in starts and max(starts) == 10 - H  # the reset row and the last start both occur
    # the small task's padded action dims are zero in its slices
    small = np.asarray(batch.task) == 0
    assert small.any() and np.all(np.asarray(batch.action)[:, small, 1:] == 0)


# --------------------------------------------------------------------- masks
def test_masks_zero_every_padded_action_dim_in_every_output(padded):
    _, agent = padded
    wm, cfg = agent.wm, agent.cfg
    params = seed0(agent.init([0]).agent.params)
    params = dict(params, pi=jax.tree_util.tree_map(lambda x: x + 0.3, params["pi"]))  # nonzero means
    mask = jnp.asarray(agent.masks[0])  # task "small": action dim 1 of 3
    e = up.embed(params["task_emb"], 0)
    obs = jnp.array([0.3, -0.2, 0.0, 0.0])
    z = wm.encode(params, obs[None], e)
    mean, sample, log_pi, log_std = jax.jit(lambda k: wm.pi(params["pi"], z, k, e, mask))(jax.random.PRNGKey(0))
    for out in (mean, sample, log_std):
        assert np.all(np.asarray(out)[..., 1:] == 0.0)
        assert np.all(np.asarray(out)[..., 0] != 0.0)
    assert np.isfinite(np.asarray(log_pi)).all()
    traj = policy_trajectories(wm, params, z, jax.random.PRNGKey(1), e[None], mask)
    assert traj.shape == (cfg.horizon, cfg.num_pi_trajs, 3) and np.all(np.asarray(traj)[..., 1:] == 0.0)
    # the planner: a warm start with values in every dim, training mode (exploration noise
    # std[0] * N(0, 1) with std clamped to >= min_std = 0.05 before the mask, so a zero there
    # shows that the std is masked too)
    prev = jnp.full((cfg.horizon, 3), 0.5)
    run = jax.jit(lambda k, t0, e, mask: plan(wm, params, obs, prev, t0, False, 0.95, k, e, mask))
    for i in range(3):
        a, m = run(jax.random.PRNGKey(i), jnp.asarray(i == 0), e, mask)
        assert np.all(np.asarray(a)[1:] == 0.0) and np.asarray(a)[0] != 0.0
        assert np.all(np.asarray(m)[:, 1:] == 0.0)
    # the big task (3 action dims) uses all of them
    a, m = run(jax.random.PRNGKey(0), jnp.asarray(True), up.embed(params["task_emb"], 1), jnp.ones(3))
    assert np.all(np.asarray(a) != 0.0) and np.all(np.asarray(m) != 0.0)
    # the act() helper returns only the task's own action dims
    a, m = agent.act(params, np.array([0.3, -0.2], np.float32), 0, True, False, jax.random.PRNGKey(5))
    assert a.shape == (1,) and np.all(np.asarray(m)[:, 1:] == 0.0)


# --------------------------------------------------------------------- embedding max-norm
def test_renorm_rows_is_torch_max_norm():
    table = jnp.array([[2.0, 0.0], [0.3, 0.4], [0.0, 3.0], [0.6, 0.8]], jnp.float32)
    out = np.asarray(up.renorm_rows(table, jnp.array([0, 1, 1, 3])))
    np.testing.assert_allclose(out[0], [2.0 / (2.0 + 1e-7), 0.0], rtol=1e-7)  # scaled max_norm / (norm + 1e-7)
    np.testing.assert_array_equal(out[1], np.asarray(table[1]))             # norm 0.5: unchanged
    np.testing.assert_array_equal(out[2], np.asarray(table[2]))             # not looked up: unchanged
    np.testing.assert_array_equal(out[3], np.asarray(table[3]))             # norm exactly 1: unchanged
    again = np.asarray(up.renorm_rows(jnp.asarray(out), jnp.array([0])))
    np.testing.assert_array_equal(again, out)                               # idempotent
    np.testing.assert_array_equal(np.asarray(up.embed(table, 0)), out[0])   # the non-persisted look-up
    np.testing.assert_allclose(np.asarray(up.embed(table, 2)), [0.0, 3.0 / (3.0 + 1e-7)], rtol=1e-7)


def test_embedding_rows_have_norm_at_most_one_after_an_update(twin):
    _, agent = twin
    state = agent.init([0])
    big = jnp.array([[[3.0] * 8, [-2.0] * 8]], jnp.float32)  # norms 8.5 and 5.7
    params = dict(state.agent.params, task_emb=big)
    state = state._replace(agent=state.agent._replace(params=params))
    state = agent.run_updates(state, 1)  # batch of 64 over 2 tasks: both rows looked up
    norms = np.linalg.norm(np.asarray(state.agent.params["task_emb"])[0], axis=-1)
    assert np.all(norms <= 1.0) and np.all(norms > 0.99), norms
    state = agent.run_updates(state, 5)
    norms = np.linalg.norm(np.asarray(state.agent.params["task_emb"])[0], axis=-1)
    assert np.all(norms <= 1.0), norms


# --------------------------------------------------------------------- runs
def test_schedule_is_absolute_in_updates(twin):
    from tdmpc2core.run.driver import plan

    program = twin[1].program()
    plan_, at_start = plan(program, 25, eval_every=10, log_every=5)
    plan_ = [c[1:] for c in plan_]  # (start, updates, evaluate_after); the phase is always "train"
    assert at_start
    assert [(a, n) for a, n, _ in plan_] == [(0, 5), (5, 5), (10, 5), (15, 5), (20, 5)]
    assert [a + n for a, n, ev in plan_ if ev] == [10, 20, 25]
    plan_, at_start = plan(program, 10, eval_every=10, start_tick=7, log_every=None)
    plan_ = [c[1:] for c in plan_]
    assert not at_start and plan_ == [(7, 3, True), (10, 7, True)]


def test_vmapped_seeds_match_seeds_alone_and_chunks_match_whole(twin):
    _, agent = twin
    n = 12
    both, _ = agent.train(seed=[0, 1], n_timesteps=n)
    for i in (0, 1):
        alone, _ = agent.train(seed=[i], n_timesteps=n)
        for x, y in zip(leaves(both.agent), leaves(alone.agent)):
            # XLA batches the seeds' matmuls, which may change float32 summation order in the
            # last bits (docs/deviations.md, "Several seeds in one program")
            np.testing.assert_allclose(x[i], y[0], rtol=1e-4, atol=1e-5)
    whole, _ = agent.train(seed=[1], n_timesteps=n)
    part, _ = agent.train(seed=[1], n_timesteps=5)
    part, _ = agent.train(state=part, n_timesteps=n - 5)
    assert int(np.asarray(part.agent.updates)[0]) == n
    for x, y in zip(leaves(whole), leaves(part)):
        np.testing.assert_array_equal(x, y)  # the same program, keys from (seed, update index): bitwise


@pytest.mark.slow
def test_twin_task_probe_needs_the_task_embedding(twin):
    """Same observations and dynamics, opposite rewards: a model that ignored the embedding
    would average the two rewards to zero and go nowhere (return ~0 on both). Trained on the
    random-action data of both, the agent goes right on one twin and left on the other
    (optimal return ~23, a random policy ~0); with the two embedding rows swapped it goes the
    wrong way on both."""
    _, agent = twin
    state, hist = agent.train(seed=[0], n_timesteps=1500, eval_every=1500, eval_episodes=TWIN_EVAL_EPISODES)
    before, after = hist["eval_return"][0, 0], hist["eval_return"][-1, 0]
    print("twin-task returns before / after training:", before, after)
    assert np.all(after > 15.0), after
    assert np.all(hist["normalized_score"][-1] > 80.0)   # 100 (return + 25) / 50, declared range
    swapped = state._replace(agent=state.agent._replace(
        params=dict(state.agent.params, task_emb=state.agent.params["task_emb"][:, ::-1])))
    wrong = agent.evaluate(swapped, num_episodes=TWIN_EVAL_EPISODES)["return"][0]
    print("with the embedding rows swapped:", wrong)
    assert np.all(wrong < 0.0), wrong


# --------------------------------------------------------------------- scaling tables
def test_scaling_and_task_tables_on_hand_made_evaluations(tmp_path):
    import pandas as pd

    from tdmpc2core.report import scaling as S

    rows = []
    for size, level in ((1, 0.4), (5, 0.6)):
        for seed in (0, 1):
            for ev, u in ((0, 0), (1, 100)):
                for task, (lo, hi) in (("a", (0.0, 1000.0)), ("b", (-200.0, 0.0)), ("c", (np.nan, np.nan))):
                    for e in range(2):
                        frac = level * u / 100 + 0.01 * seed
                        ret = (lo + (hi - lo) * frac) if task != "c" else 10.0 * seed + e
                        rows.append(dict(pool="p", model_size=size, task=task, seed=seed, eval_index=ev, updates=u,
                                         episode=e, length=5, normalized_score=100 * (ret - lo) / (hi - lo),
                                         return_low=lo, return_high=hi, **{"return": ret}))
    path = tmp_path / "eval.parquet"
    pd.DataFrame(rows).to_parquet(path)
    final = S.final_task_scores(S.task_scores(S.read_multi_evals([path])))
    assert set(final["updates"]) == {100}
    table = S.scaling_table(final[final["task"] != "c"], {("p", 1): 10, ("p", 5): 50}, ["p"], [1, 5, 19])
    got = table.set_index("model_size")
    assert got.loc[1, "score_mean"] == pytest.approx(40.5) and got.loc[5, "score_mean"] == pytest.approx(60.5)
    assert got.loc[1, "score_sd"] == pytest.approx(0.5) and got.loc[5, "params"] == 50
    assert got.loc[19, "n_seeds"] == 0 and got.loc[19, "note"] == "no evaluation found"
    # a task without a declared range: no normalized score for the run, and the note names it
    with_c = S.scaling_table(final, {}, ["p"], [1]).iloc[0]
    assert np.isnan(with_c["score_mean"]) and "['c']" in with_c["note"]
    single = pd.DataFrame({"task": ["a", "a", "b"], "seed": [0, 1, 0], "return": [900.0, 800.0, -50.0],
                           "agent_steps": [1000, 1000, 500]})
    ranges = final.groupby(["pool", "model_size", "task"])[["return_low", "return_high"]].first().reset_index()
    tasks = S.task_table(final, ranges, single, {"p": ["a", "b"]}, [1, 5],
                         {"p": {"a": {"mean_min": 500.0}, "b": {"seed_min": -130.0}}}).set_index(["task", "model_size"])
    assert tasks.loc[("a", 5), "multi_mean"] == pytest.approx(605.0) and tasks.loc[("a", 5), "result"] == "pass"
    assert tasks.loc[("a", 1), "result"] == "fail"  # 405 < 500
    assert tasks.loc[("b", 1), "multi_min"] == pytest.approx(-120.0) and tasks.loc[("b", 1), "result"] == "pass"
    assert tasks.loc[("a", 1), "single_mean"] == pytest.approx(850.0) and tasks.loc[("b", 1), "single_agent_steps"] == 500
    # one seed has no spread: NaN, not 0 (the report then shows the mean alone)
    assert np.isnan(tasks.loc[("b", 1), "single_sd"]) and tasks.loc[("a", 1), "single_sd"] == pytest.approx(50.0)
    one = S.scaling_table(final[(final["task"] != "c") & (final["seed"] == 0)], {}, ["p"], [1]).iloc[0]
    assert one["n_seeds"] == 1 and np.isnan(one["score_sd"]) and one["score_mean"] == pytest.approx(40.0)
    out = tmp_path / "scaling.png"
    S.plot_scaling(table, tasks.reset_index(), out)
    assert out.stat().st_size > 10_000
