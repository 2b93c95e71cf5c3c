"""Pixel observations (spec §2 "Pixels", §9; issue 29): the dm_control pixel env, the frame
replay, and the single-task agent from pixels.

Shapes are kept tiny (a 4-value "frame" for the replay; for the agent, the smallest model that
the rgb encoder allows: latent 512) so the file stays within the suite's time budget.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tdmpc2core.agents import replay as rp
from tdmpc2core.envs.dmcontrol_env import choose_gl_backend

# at collection, before any test of the session imports dm_control (which fixes its OpenGL
# backend once): MUJOCO_GL=egl on a headless Linux machine with EGL, as the library does
choose_gl_backend()

FRAME = 4  # a toy frame of 4 values; a pixel observation is 3 of them, oldest first
FRAME_PX = 3 * 64 * 64  # one rendered frame


def _episode(rng, T):
    """Frames f_0..f_T and the stacked observations the env gives (refilled at reset)."""
    f = rng.integers(0, 256, (T + 1, FRAME), dtype=np.uint8)
    r = np.arange(T + 1)
    stacks = np.concatenate([f[np.maximum(r - 2, 0)], f[np.maximum(r - 1, 0)], f[r]], axis=-1)
    return f, stacks


_start, _write = jax.jit(rp.start_episodes), jax.jit(rp.write_step)


def _fill(replay, episodes, n_envs, T):
    """Write rounds of ``n_envs`` episodes (stacked observations [T+1, 3 FRAME]) and commit them."""
    A = replay.action.shape[-1]
    dt = replay.obs.dtype
    for k in range(0, len(episodes), n_envs):
        round_ = np.stack(episodes[k:k + n_envs])  # [n_envs, T+1, 3 FRAME]
        replay = _start(replay, jnp.asarray(round_[:, 0], dt), jnp.asarray(k > 0))
        for t in range(T):
            replay = _write(replay, jnp.full((n_envs,), t + 1), jnp.asarray(round_[:, t + 1], dt),
                            jnp.full((n_envs, A), 0.5 * t), jnp.full((n_envs,), float(t)), jnp.zeros((n_envs,), bool))
    # commit the last round
    return _start(replay, jnp.zeros((n_envs, 3 * FRAME), dt), jnp.asarray(True))


def test_frame_replay_stores_one_frame_per_row_and_samples_the_stacks_a_stacked_replay_holds():
    """The u8 replay keeps only the newest frame of each observation ([S, T+1, frame]) and its
    batches are the stacks a replay of whole stacks gives for the same key (rows r-2, r-1, r
    clamped at the reset row), bit for bit; committed_episodes rebuilds the same stacks."""
    T, n_envs, H, B = 6, 2, 3, 64
    rng = np.random.default_rng(0)
    eps = [_episode(rng, T) for _ in range(6)]
    frames = rp.init_replay(4, n_envs, T, 3 * FRAME, 2, obs_dtype="uint8", frames=3)
    assert frames.obs.shape == (6, T + 1, FRAME) and frames.obs.dtype == jnp.uint8
    stacked = rp.init_replay(4, n_envs, T, 3 * FRAME, 2)  # f32 stacks: the state layout
    frames = _fill(frames, [e[1] for e in eps], n_envs, T)
    stacked = _fill(stacked, [e[1].astype(np.float32) for e in eps], n_envs, T)
    # the ring holds the newest frames, exactly (4 complete slots: episodes 2..5)
    held, evicted = rp.committed_episodes(frames)
    assert evicted == 2 and len(held) == 4
    for got, (f, stacks) in zip(held, eps[2:]):
        np.testing.assert_array_equal(got["obs"], stacks)
    sample = jax.jit(rp.sample, static_argnums=(2, 3))
    for k in range(3):
        key = jax.random.PRNGKey(k)
        a = sample(frames, key, B, H)
        b = sample(stacked, key, B, H)
        assert a.obs.dtype == jnp.uint8 and a.obs.shape == (H + 1, B, 3 * FRAME)
        np.testing.assert_array_equal(np.asarray(a.obs, np.float32), np.asarray(b.obs))
        np.testing.assert_array_equal(np.asarray(a.action), np.asarray(b.action))
        np.testing.assert_array_equal(np.asarray(a.reward), np.asarray(b.reward))
    # slices starting at the reset row are drawn, so the clamp is exercised
    assert np.any(np.asarray(a.obs[0, :, :FRAME]) == np.asarray(a.obs[0, :, 2 * FRAME:]))


def test_frame_replay_layouts_other_than_f32_states_and_u8_stacks_of_three_are_refused():
    with pytest.raises(ValueError, match="frames=3"):
        rp.init_replay(1, 1, 4, 12, 1, obs_dtype="uint8")
    with pytest.raises(ValueError, match="float32"):
        rp.init_replay(1, 1, 4, 12, 1, frames=3)
    with pytest.raises(ValueError, match="divide"):
        rp.init_replay(1, 1, 4, 13, 1, obs_dtype="uint8", frames=3)


# ---- the dm_control pixel env ------------------------------------------------------------
def test_dmcontrol_pixels_are_the_official_wrappers_frames_stacked_after_each_step():
    """obs='rgb' gives u8[9*64*64]: the reset frame three times, then each step's frame (rendered
    after the action repeat with camera 0) pushed onto the stack, equal to rendering a
    continuously stepped dm_control env as the official PixelWrapper does; from
    jax.pure_callback's threads (dm_control renders on its own thread); vmapped too."""
    from tdmpc2core.envs import make_env

    env = make_env("dmc:cartpole-balance", obs="rgb")
    from dm_control import suite
    assert (env.spec.obs_dim, env.spec.obs_dtype, env.spec.obs_shape) == (36864, "uint8", (9, 64, 64))
    keys = jax.random.split(jax.random.PRNGKey(3), 2)
    acts = np.random.default_rng(0).uniform(-1, 1, (4, 2, 1)).astype(np.float32)

    @jax.jit
    def run(keys, acts):
        st, obs0 = jax.vmap(env.reset)(keys)

        def body(st, a):
            st, out = jax.vmap(env.step)(st, a, keys)
            return st, out.obs

        return obs0, jax.lax.scan(body, st, acts)[1]

    obs0, obs = map(np.asarray, run(keys, jnp.asarray(acts)))
    assert obs0.dtype == np.uint8 and obs.shape == (4, 2, 36864)
    for e in range(2):
        ref = suite.load("cartpole", "balance", task_kwargs={"random": 0}, visualize_reward=False)
        ref.task.random.seed(int(env.reset_seed(keys[e])))
        ref.reset()
        frame = lambda: ref.physics.render(64, 64, 0).transpose(2, 0, 1).reshape(-1)
        stack = [frame()] * 3
        np.testing.assert_array_equal(obs0[e], np.concatenate(stack))
        for t in range(4):
            for _ in range(2):
                ref.step(acts[t, e].astype(np.float64))
            stack = stack[1:] + [frame()]
            np.testing.assert_array_equal(obs[t, e], np.concatenate(stack))
    assert len({obs[t, 0].tobytes() for t in range(4)}) == 4  # the frames change

    # diverging physics (E6): a black newest frame, the earlier frames kept, a NaN reward (what
    # the run checks: u8 pixels cannot be NaN), the simulator state left as it was
    state, o0 = env.reset(keys[0])
    phys = np.array(state.inner.physics).view(np.float64).copy()
    phys[1] = np.nan  # qpos[0] (the state starts with the time)
    bad = state._replace(inner=state.inner._replace(physics=jnp.asarray(phys.view(np.uint32))))
    after, out = env.step(bad, jnp.zeros(1), keys[0])
    assert np.isnan(np.asarray(out.reward)) and not np.asarray(out.obs)[-FRAME_PX:].any()
    np.testing.assert_array_equal(np.asarray(out.obs)[:-FRAME_PX], np.asarray(o0)[FRAME_PX:])
    np.testing.assert_array_equal(np.asarray(after.inner.physics), np.asarray(bad.inner.physics))

    # the evaluation video's renderer (tdmpc2core.envs.render) draws a pixel env's states on the
    # env's render thread, where its OpenGL context is current (from the main thread it failed:
    # a fresh user's pixel smoke run); the reset state at 64 x 64 is the observation's frame
    from tdmpc2core.envs.render import frame_source

    src = frame_source(env)
    frames = src.render(jax.tree_util.tree_map(lambda x: np.asarray(x)[None], src.state_of(state.inner)), 64, 64)
    np.testing.assert_array_equal(frames[0].transpose(2, 0, 1).reshape(-1), np.asarray(o0)[-FRAME_PX:])
    src.close()


def test_pixels_are_refused_for_suites_without_them_and_unknown_obs_types_are_named():
    from tdmpc2core.envs import make_env

    with pytest.raises(ValueError, match="obs='rgb' is not available for 'Pendulum-v1'.*dmcontrol"):
        make_env("Pendulum-v1", obs="rgb")
    with pytest.raises(ValueError, match=r"obs='pixels'; accepted: \['state', 'rgb'\]"):
        make_env("dmc:cartpole-balance", obs="pixels")


def test_replay_memory_of_the_papers_pixel_protocol():
    """1M agent steps, buffer_size 1M, T = 500 (2001 slots of 501 rows), a 6-dim action: 12.35 GB
    with one frame per row (fits a 24 GB GPU), against 36.99 GB with whole stacks (docs/deviations.md R4)."""
    S = rp.capacity_episodes(1_000_000, 1_000_000, 500)
    frames = rp.replay_nbytes(S, 1, 500, 36864, 6, obs_dtype="uint8", frames=3)
    rows = (S + 1) * 501
    assert S == 2000 and frames == rows * (12288 + 4 * 6 + 8) + 12
    assert round(frames / 1e9, 2) == 12.35
    assert round((frames + rows * 2 * 12288) / 1e9, 2) == 36.99


# ---- the single-task agent from pixels ---------------------------------------------------
#: a tiny pixel agent: the conv encoder's latent is num_channels * 16 (spec §3.2: 512 for the
#: paper's 32 channels); 2 channels (latent 32) keep the compiled programs small (they have host
#: callbacks, so JAX's compilation cache cannot keep them)
PIX = dict(obs="rgb", model_size=1, mlp_dim=32, num_channels=2, latent_dim=32, num_samples=16, num_elites=4,
           num_pi_trajs=2, iterations=1, horizon=2, batch_size=4, episode_length=20, seed_steps=10)


@pytest.mark.slow
def test_pixel_run_resumed_from_a_checkpoint_equals_the_uninterrupted_run(tmp_path):
    """TDMPC2('dmc:cartpole-balance', obs='rgb') trains (seed phase, burst, planning, updates on
    u8 frame stacks), evaluates, and a run stopped at 20 agent steps and resumed from its
    checkpoint (the host simulator scrambled in between) equals the uninterrupted run bit for
    bit: parameters, optimiser states, replay frames, env states (the carried frames) and
    evaluations. The replay holds one u8 frame per row."""
    from tdmpc2core import TDMPC2

    agent = TDMPC2("dmc:cartpole-balance", **PIX)
    assert agent.pixels and agent.config["obs"] == "rgb" and agent.config["obs_dim"] == 36864
    whole, hist = agent.train(seed=0, n_timesteps=30, eval_every=30, eval_episodes=1)
    assert int(np.asarray(whole.agent.updates)[0]) == 10 + 19  # burst of 10 at step 10, then 1 per step
    assert whole.replay.obs.dtype == jnp.uint8 and whole.replay.obs.shape[-1] == 3 * 64 * 64
    assert whole.obs.dtype == jnp.uint8 and whole.obs.shape == (1, 1, 36864)
    assert hist["eval_returns"].shape == (2, 1, 1) and np.isfinite(hist["eval_returns"]).all()
    assert np.isfinite(np.asarray(whole.metrics["total_loss"])).all()

    ckpt = tmp_path / "ckpt"
    agent.train(seed=0, n_timesteps=20, total_timesteps=30, eval_every=30, eval_episodes=1, checkpoint_dir=ckpt)
    scratch = agent.env.dm_env  # leave the host simulator somewhere else
    scratch.task.random.seed(7)
    scratch.reset()
    for _ in range(5):
        scratch.step(np.ones(1))
    resumed, hist2 = agent.train(seed=0, n_timesteps=30, eval_every=30, eval_episodes=1, checkpoint_dir=ckpt)
    for x, y in zip(jax.tree_util.tree_leaves((whole.agent, whole.replay, whole.env_state, whole.obs)),
                    jax.tree_util.tree_leaves((resumed.agent, resumed.replay, resumed.env_state, resumed.obs))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_array_equal(hist["eval_returns"], hist2["eval_returns"])


def test_pixel_agent_refuses_episodic_mode_export_and_multitask():
    from tdmpc2core import TDMPC2
    from tdmpc2core.agents.export import check_exportable
    from tdmpc2core.agents.multitask import TDMPC2MultiTask

    with pytest.raises(ValueError, match="obs='rgb' with episodic=True is not supported"):
        TDMPC2("dmc:cartpole-balance", episodic=True, **PIX)
    with pytest.raises(ValueError, match="obs='rgb' is not available for 'Pendulum-v1'"):
        TDMPC2("Pendulum-v1", obs="rgb", num_channels=2, latent_dim=32)
    with pytest.raises(ValueError, match="multi-task training learns from episode datasets of state observations"):
        TDMPC2MultiTask(None, obs="rgb")

    class _Pix:  # export's check reads the agent's env spec only
        env_id = "dmc:cartpole-balance"
        spec = type("S", (), {"obs_dtype": "uint8", "obs_shape": (9, 64, 64)})()

    with pytest.raises(ValueError, match="episode datasets, pools and multi-task training take state observations"):
        check_exportable(_Pix())
