"""Non-finite data is kept out (docs/deviations.md O8): an episode with a NaN observation or
reward, at a step or at its reset, is dropped whole (it never reaches the replay's committed
episodes, a batch or a loss), each drop is counted per env and logged with the env index and
the agent step, and past ``max_nonfinite`` drops the run stops with a clear error, its last
checkpoint intact.
"""
from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tdmpc2core.agents import replay as rp
from tdmpc2core.envs.base import Env, EnvSpec
from tdmpc2core.io import checkpoint as ck

T = 20
# The smallest program that still runs every part the guard is about (env step and reset, the
# drop and its count, the replay's commits, batches and the update): horizon 1 (the update and
# its losses are unrolled over H) and the policy prior acting instead of the planner (mpc=False;
# how an action is chosen has no part in keeping non-finite data out, and the observation the
# agent acts on after a drop is zeros either way). The planner's own handling of the episode
# start (a zero warm start at t0) is tested in tests/test_planner.py.
TINY = dict(model_size=1, mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16, num_elites=4, num_pi_trajs=2,
            iterations=1, batch_size=16, horizon=1, mpc=False, seed_steps=80)


class NaNLine(Env):
    """x in [-1, 1] moved by the action, reward x. NaN physics: a reset yields a NaN state with
    probability ``p_reset``; an episode whose draw says so turns NaN at a step in [1, T) and
    stays NaN until its next reset (as a diverged simulator does)."""

    def __init__(self, p_reset: float, p_step: float):
        self.p_reset, self.p_step = float(p_reset), float(p_step)
        self._token = (self.p_reset, self.p_step)
        self.spec = EnvSpec(env_id="nan-line", suite="gymnax", obs_dim=1, action_dim=1, action_low=(-1.0,),
                            action_high=(1.0,), action_repeat=1, episode_length=T, sim_episode_length=T,
                            backend=None, can_terminate=False)

    def _raw_reset(self, key):
        k_x, k_r, k_s, k_at = jax.random.split(key, 4)
        x = jax.random.uniform(k_x, (), jnp.float32, -0.5, 0.5)
        x = jnp.where(jax.random.uniform(k_r) < self.p_reset, jnp.nan, x)
        bad_at = jnp.where(jax.random.uniform(k_s) < self.p_step, jax.random.randint(k_at, (), 1, T), -1)
        inner = (x, jnp.zeros((), jnp.int32), bad_at.astype(jnp.int32))
        return inner, x[None]

    def _raw_step(self, inner, env_action, key):
        x, c, bad_at = inner
        c = c + 1
        x = jnp.clip(x + 0.2 * env_action[0], -1.0, 1.0)
        x = jnp.where(c == bad_at, jnp.nan, x)
        return (x, c, bad_at), x[None], x, jnp.zeros((), bool)


def committed_rows_are_finite(replay_one_seed):
    episodes, _ = rp.committed_episodes(replay_one_seed)
    for ep in episodes:
        assert np.all(np.isfinite(ep["obs"]))
        assert np.all(np.isfinite(ep["action"][1:])) and np.all(np.isfinite(ep["reward"][1:]))
    return len(episodes)


def test_start_episodes_commits_only_kept_episodes_contiguously():
    """The replay side: dropped episodes are not committed, kept ones stay in env order and
    contiguous, and the dropped slots are handed out again."""
    n, keep_slots = 3, 4
    replay = rp.init_replay(keep_slots, n, 2, 1, 1)
    ids = iter(range(100))

    def round_(replay, commit, keep=None):
        obs0 = jnp.asarray([[float(next(ids))] for _ in range(n)])
        replay = rp.start_episodes(replay, obs0, commit, None if keep is None else jnp.asarray(keep))
        for t in (1, 2):
            replay = rp.write_step(replay, jnp.full((n,), t, jnp.int32), jnp.zeros((n, 1)), jnp.zeros((n, 1)),
                                   jnp.zeros((n,)), jnp.zeros((n,), bool))
        return replay

    replay = round_(replay, False)                          # episodes 0, 1, 2 in progress
    replay = round_(replay, True, [True, False, True])      # commit 0 and 2; 3, 4, 5 start
    eps, evicted = rp.committed_episodes(replay)
    assert [int(e["obs"][0, 0]) for e in eps] == [0, 2] and evicted == 0
    replay = round_(replay, True, [False, True, True])      # commit 4 and 5
    eps, _ = rp.committed_episodes(replay)
    assert [int(e["obs"][0, 0]) for e in eps] == [0, 2, 4, 5]
    replay = round_(replay, True)                           # commit 6, 7, 8: the ring (4) evicts 0, 2, 4... in order
    eps, evicted = rp.committed_episodes(replay)
    assert [int(e["obs"][0, 0]) for e in eps] == [5, 6, 7, 8] and evicted == 3
    assert int(replay.committed) == 7


@pytest.mark.slow
@pytest.mark.parametrize("episodic", [False, True])
def test_nan_steps_and_resets_are_dropped_counted_and_stop_the_run_past_the_limit(episodic, tmp_path, caplog):
    from tdmpc2core import TDMPC2

    agent = TDMPC2(NaNLine(p_reset=0.15, p_step=0.25), n_envs=2, max_nonfinite=1000, episodic=episodic, **TINY)
    steps = 400
    with caplog.at_level(logging.WARNING, logger="tdmpc2core"):
        state, hist = agent.train(seed=[0, 1], n_timesteps=steps, max_chunk_seconds=1e-9)
    counts, last = np.asarray(state.nonfinite), np.asarray(state.nonfinite_step)
    assert counts.sum() >= 8, counts  # drops happened in every seed (about 0.36 of the 20 episodes per env)
    assert np.all(counts.sum(axis=1) > 0)
    # the run went on: every scheduled update ran, and nothing non-finite reached a loss
    assert np.all(np.asarray(state.agent.updates) == np.asarray(state.agent.updates)[0])
    for leaf in jax.tree_util.tree_leaves(state.agent.params):
        assert np.all(np.isfinite(np.asarray(leaf)))
    for k, v in state.metrics.items():
        assert np.all(np.isfinite(np.asarray(v))), k
    # nothing non-finite in the replay's committed episodes; the dropped ones are missing
    for i in range(2):
        held = committed_rows_are_finite(jax.tree_util.tree_map(lambda x: x[i], state.replay))
        if not episodic:  # lockstep: 9 rounds of 2 episodes committed (the 10th is in progress), minus the drops
            dropped_in_committed_rounds = counts[i].sum() - np.asarray(state.discard)[i].sum()
            assert held == (steps // 2 // T - 1) * 2 - dropped_in_committed_rounds
    # both kinds happened and were logged with the env index and the agent step
    lines = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert lines and all("env " in m and "agent step" in m for m in lines)
    logged_steps = [int(m.split("agent step ")[1].split(";")[0]) for m in lines]
    if not episodic:
        assert any(s % (T * 2) == 0 for s in logged_steps), "a reset drop"   # resets at multiples of T ticks
        assert any(s % (T * 2) != 0 for s in logged_steps), "a step drop"
    assert np.all(last[counts > 0] >= 0) and np.all(last[counts == 0] == -1)

    # past the limit: a clear error, and the last checkpoint is the last good one
    agent.max_nonfinite = 1
    ckdir = tmp_path / "ck"
    with pytest.raises(FloatingPointError, match=r"more than max_nonfinite=1 .*env \d x\d+ \(last at agent step \d+"):
        agent.train(seed=[0, 1], n_timesteps=steps, checkpoint_dir=ckdir, checkpoint_every=40,
                    max_chunk_seconds=1e-9)
    saved = ck.list_checkpoints(ckdir)
    if saved:  # every checkpoint written is complete and holds a finite, usable state
        good, _, manifest = agent.restore(saved[-1])
        assert manifest["meta"]["agent_steps"] < steps
        assert int(np.max(np.asarray(good.nonfinite).sum(axis=1))) <= 1
