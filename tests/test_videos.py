"""Evaluation videos (issue 29): the recording rollout, the suites' renderers, the MP4 writer,
the report's <video> elements and that they play in a real headless Chromium."""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess

import jax
import numpy as np
import pytest

from tdmpc2core.envs import make_env
from tdmpc2core.envs.render import NoRendererError, cannot_render, frame_source

TINY = dict(model_size=1, enc_dim=16, mlp_dim=16, latent_dim=8, num_samples=16, num_elites=4, num_pi_trajs=2,
            iterations=1, batch_size=8, horizon=3, seed_steps=200)


def frames_of(path):
    """(meta, frames uint8 [N, H, W, 3]) of a video file, decoded by imageio-ffmpeg's ffmpeg."""
    import imageio_ffmpeg

    from tdmpc2core.io.video import _no_python_in_forked_child

    gen = imageio_ffmpeg.read_frames(str(path))
    with _no_python_in_forked_child():  # as write_video starts ffmpeg
        meta = next(gen)
    w, h = meta["size"]
    frames = np.stack([np.frombuffer(f, np.uint8).reshape(h, w, 3) for f in gen])
    return meta, frames


# --------------------------------------------------------------------------- recording
def test_record_episode_is_the_evaluation_episode_drawn_from_its_states(tmp_path):
    """record_episode starts from the evaluation's first episode's initial state (its key),
    acts as the evaluation acts (the return of that evaluation episode, up to the float
    differences of another compiled program), keeps every stride-th state and draws it."""
    from tdmpc2core import TDMPC2
    from tdmpc2core.agents import video
    from tdmpc2core.envs.suites.gymnax import _draw_pendulum

    agent = TDMPC2("Pendulum-v1", **TINY)
    state = agent.init([3, 4], 400)  # untrained parameters: no training program to compile
    rec = agent.record_episode(state, 1, seed=4, eval_index=2, eval_episodes=3, width=64, height=48, max_frames=60)
    # T = 200 agent steps: stride ceil(201 / 60) = 4, frames of steps 0, 4, ..., 200; gymnax dt 0.05 s
    assert rec.stride == 4 and rec.length == 200 and rec.frames.shape == (51, 48, 64, 3)
    assert rec.frames.dtype == np.uint8 and rec.fps == pytest.approx(1 / (0.05 * 4))
    k_reset, _ = jax.random.split(video.episode_key(4, 2, 3))
    st0, _ = agent.env.reset(k_reset)
    np.testing.assert_array_equal(rec.frames[0], _draw_pendulum(st0.inner, 64, 48))
    assert len({f.tobytes() for f in rec.frames}) > 10  # the pendulum moves
    rets, _, _, _ = agent.evaluate_all(state, 3, eval_index=2, seeds=[3, 4])
    assert rec.episode_return == pytest.approx(float(rets[1, 0]), rel=1e-3)
    assert abs(rec.episode_return - float(rets[1, 1])) > 1.0  # another episode would not do
    again = agent.record_episode(state, 1, seed=4, eval_index=2, eval_episodes=3, width=64, height=48, max_frames=60)
    np.testing.assert_array_equal(again.frames, rec.frames)  # deterministic; compiled once
    assert agent.record_seconds["record"]["calls_compiled"] == 1 and "record" not in agent.compile_seconds
    assert agent.video_renderer().seconds > 0
    # the train-single stage's writer: seed position 0, the last of 3 evaluations, the same program
    from tdmpc2core.stages.train_single import write_last_video

    logs = []
    rec0 = write_last_video(agent, state, {"eval_agent_steps": [0, 200, 400]}, 3, 3, tmp_path / "video.mp4",
                            logs.append)
    assert rec0["file"] == "video.mp4" and rec0["seed"] == 3 and rec0["eval_index"] == 2
    assert (rec0["frames"], rec0["stride"], rec0["width"], rec0["length"]) == (201, 1, 192, 200)
    assert rec0["fps"] == pytest.approx(20.0) and set(rec0["seconds"]) == {"compile", "rollout", "render", "encode"}
    assert rec0["seconds"]["compile"] == 0.0 and rec0["bytes"] == (tmp_path / "video.mp4").stat().st_size
    assert frames_of(tmp_path / "video.mp4")[1].shape == (201, 192, 192, 3)
    assert "video: seed 3, 201 frames at 20 fps" in logs[0]
    # --video every: the train-single stage's on_evaluation hook, one video per evaluation, then the
    # last copied to video.mp4; a video of an evaluation the run does not have (another run's) goes
    from tdmpc2core.stages.train_single import EveryVideo

    every = EveryVideo(agent, 3, 200, 3, tmp_path / "seed3" / "videos", logs.append)
    (tmp_path / "seed3" / "videos" / "agent_steps_000000600.mp4").parent.mkdir(parents=True)
    (tmp_path / "seed3" / "videos" / "agent_steps_000000600.mp4").write_bytes(b"stale")
    every(state, 200, {"eval_agent_steps": 200})
    every(state, 400, {"eval_agent_steps": 400})
    assert every.records[400]["eval_index"] == 2 and every.records[200]["eval_index"] == 1
    fin = every.finish(state, {"eval_agent_steps": [0, 200, 400]}, tmp_path / "seed3" / "video.mp4")
    assert fin["file"] == "video.mp4" and fin["every"] == ["videos/agent_steps_000000200.mp4",
                                                          "videos/agent_steps_000000400.mp4"]
    assert sorted(p.name for p in (tmp_path / "seed3" / "videos").iterdir()) == [
        "agent_steps_000000200.mp4", "agent_steps_000000400.mp4"]
    last = frames_of(tmp_path / "seed3" / "video.mp4")[1]
    np.testing.assert_array_equal(last, frames_of(tmp_path / "video.mp4")[1])  # the last evaluation's episode
    assert not np.array_equal(frames_of(tmp_path / "seed3" / "videos" / "agent_steps_000000200.mp4")[1][:50],
                              last[:50])  # another evaluation: another episode
    with pytest.raises(ValueError, match="seed_index=2: the state holds 2 seed"):
        agent.record_episode(state, 2)
    with pytest.raises(ValueError, match="width=63: a positive even number"):
        agent.record_episode(state, 0, width=63)
    with pytest.raises(ValueError, match="max_frames=1"):
        agent.record_episode(state, 0, max_frames=1)


def test_video_modes_and_suites_without_a_renderer_are_named():
    from tdmpc2core.agents.video import NotBuiltError, check_video_mode
    from tdmpc2core.envs import Env

    assert check_video_mode("last") == "last" and check_video_mode("off") == "off"
    assert check_video_mode("every") == "every"
    with pytest.raises(NotBuiltError, match="'every'.*single-task runs only"):
        check_video_mode("every", every=False)
    with pytest.raises(ValueError, match=r"video='sometimes': accepted \['off', 'last', 'every'\]"):
        check_video_mode("sometimes")
    for env_id in ("Pendulum-v1", "MountainCarContinuous-v0", "CartpoleBalance", "inverted_pendulum",
                   "dmc:cheetah-run"):
        assert cannot_render(env_id) is None, env_id

    class Custom(Env):
        pass

    from tdmpc2core.envs.base import EnvSpec

    custom = Custom()
    custom.spec = EnvSpec.from_bounds("my-task", "mysuite", 3, [-1.0], [1.0], action_repeat=1, episode_length=10)
    assert "my-task: no renderer for suite 'mysuite'" in cannot_render(custom)
    with pytest.raises(NoRendererError, match="my-task: no renderer for suite 'mysuite'"):
        frame_source(custom)


def test_pipeline_video_setting(tmp_path):
    """config `video`: last or off (YAML's unquoted off is false); the files it adds."""
    from tdmpc2core.pipeline.config import ConfigError, _check_video

    tasks = {"p": {"env_id": "Pendulum-v1"}, "c": {"env_id": "CartpoleBalance"}}
    assert _check_video(False, tasks, "demo") == "off" and _check_video("off", tasks, "demo") == "off"
    assert _check_video("last", tasks, "demo") == "last" and _check_video("every", tasks, "demo") == "every"
    with pytest.raises(ConfigError, match="video='sometimes'; accepted: off, last, every"):
        _check_video("sometimes", tasks, "demo")
    with pytest.raises(ConfigError, match="video=True; .*unquoted on, yes or true as true: write last or every"):
        _check_video(True, tasks, "demo")  # `video: on` in YAML


# --------------------------------------------------------------------------- renderers
def check_frames(src, states):
    """``src`` draws ``states`` (a list of 2 state_of values): other states, other pictures;
    the same state, the same picture."""
    stacked = jax.tree_util.tree_map(lambda *x: np.stack([np.asarray(a) for a in x + x[:1]]), *states)
    frames = src.render(stacked, 64, 48)
    assert frames.shape == (3, 48, 64, 3) and frames.dtype == np.uint8
    assert frames[0].std() > 5  # a picture, not a blank frame
    np.testing.assert_array_equal(frames[0], frames[2])
    assert np.abs(frames[0].astype(int) - frames[1]).mean() > 0.01
    assert src.control_dt == pytest.approx(0.01)
    src.close()


def test_playground_renderer_draws_the_qpos_kept():
    """Playground: mujoco.Renderer on the task's mj_model from the qpos the rollout keeps (env
    states built by hand: an MJX reset would compile for a minute)."""
    from types import SimpleNamespace

    from mujoco_playground import registry

    from tdmpc2core.envs.suites.playground import _frames as _playground

    # the adapter's playground_env only (PlaygroundEnv traces an MJX reset when built: slow)
    pg = registry.load("CartpoleBalance", config_overrides={"impl": "jax"})
    src = _playground(SimpleNamespace(playground_env=pg))
    model = pg.mj_model
    moved = np.array(model.qpos0)
    moved[0] += 0.5  # the cart, half a metre along its rail
    z = np.zeros((0,), np.float32)
    states = [src.state_of(SimpleNamespace(data=SimpleNamespace(qpos=q, mocap_pos=z, mocap_quat=z)))
              for q in (np.array(model.qpos0), moved)]
    check_frames(src, states)


def test_dmcontrol_renderer_draws_the_restored_state():
    """dm_control: Physics.render after restoring the env state's integration state (two
    initial states of other keys)."""
    env = make_env("dmc:cartpole-balance", action_repeat=2)
    src = frame_source(env)
    check_frames(src, [src.state_of(env.reset(jax.random.PRNGKey(k))[0].inner) for k in (0, 1)])


# --------------------------------------------------------------------------- the file
def test_write_video_is_h264_yuv420p_written_atomically(tmp_path):
    from tdmpc2core.io.video import write_video

    frames = np.zeros((12, 32, 48, 3), np.uint8)
    for i in range(12):
        frames[i, :, : 4 * i] = (200, 50, 20)  # a bar that grows
    path = tmp_path / "v" / "video.mp4"
    size = write_video(path, frames, 25.0)
    assert size == path.stat().st_size and size < 10_000
    meta, back = frames_of(path)
    assert meta["size"] == (48, 32) and meta["fps"] == pytest.approx(25.0) and meta["codec"].startswith("h264")
    assert "yuv420p" in meta["pix_fmt"]
    assert back.shape == frames.shape
    assert np.abs(back.astype(int) - frames).mean() < 6  # the picture survives the lossy codec
    for bad, match in ((frames[..., :2], r"uint8 \[N, H, W, 3\]"), (frames[:, :31], "even sides"),
                       (frames[:0], "at least one frame"), (frames.astype(np.float32), "uint8")):
        with pytest.raises(ValueError, match=match):
            write_video(tmp_path / "bad.mp4", bad, 25.0)
    with pytest.raises(ValueError, match="fps=0"):
        write_video(tmp_path / "bad.mp4", frames, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v"]  # nothing left by the refused writes
    assert [p.name for p in path.parent.iterdir()] == ["video.mp4"]


def test_write_video_runs_no_python_in_a_forked_child(tmp_path, monkeypatch):
    """ffmpeg starts without imageio-ffmpeg's preexec_fn: no fork of the JAX process (its
    at-fork warning "os.fork() was called ... deadlock" is absent), the switch is put back, and a
    user's own setting of it is kept."""
    import warnings

    from tdmpc2core.io.video import _NO_PREEXEC, write_video

    jax.numpy.zeros(2).block_until_ready()  # JAX's threads are up: its at-fork hook would warn
    frames = np.zeros((3, 16, 16, 3), np.uint8)
    monkeypatch.delenv(_NO_PREEXEC, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write_video(tmp_path / "a.mp4", frames, 5.0)
    assert not [w for w in caught if "os.fork()" in str(w.message)]
    assert _NO_PREEXEC not in os.environ
    monkeypatch.setenv(_NO_PREEXEC, "0")  # the user's choice: imageio-ffmpeg's default
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write_video(tmp_path / "b.mp4", frames, 5.0)
    assert os.environ[_NO_PREEXEC] == "0"
    assert [w for w in caught if "os.fork()" in str(w.message)]  # the check above can fail


# --------------------------------------------------------------------------- the report in a browser
PROBE = """<script>
(function () {
  const t0 = Date.now();
  function check() {
    const vs = [...document.querySelectorAll("video")];
    const st = vs.map(v => ({ready: v.readyState, time: v.currentTime, error: v.error ? v.error.code : null,
                             width: v.videoWidth, paused: v.paused}));
    const done = vs.every(v => v.error || (v.readyState >= 2 && v.currentTime > 0));
    if (done || Date.now() - t0 > 15000) {
      const out = document.createElement("pre");
      out.id = "video-probe";
      out.textContent = JSON.stringify(st);
      document.body.appendChild(out);
    } else setTimeout(check, 50);
  }
  window.addEventListener("load", check);
})();
</script></body>"""


def chromium() -> str:
    """The headless Chromium binary; skipped when absent, a failure under CI=true (.ci/run installs it)."""
    for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("no headless Chromium and CI=true: .ci/run installs chromium-headless-shell")
    pytest.skip("no headless Chromium (apt-get install chromium-headless-shell)")


def video_states(browser: str, page, tmp_path) -> list:
    """Each <video> of ``page`` (HTML text) after Chromium loaded it: readyState, currentTime,
    error code, videoWidth, paused (the probe script waits until each plays or fails)."""
    path = tmp_path / "probe.html"
    path.write_text(page.replace("</body>", PROBE, 1), encoding="utf-8")
    res = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--mute-audio",
                          "--autoplay-policy=no-user-gesture-required", "--virtual-time-budget=20000",
                          "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="video-probe">(.*?)</pre>', res.stdout, re.S)
    assert m, f"no probe result from {browser} (rc {res.returncode}): {res.stderr[-2000:]}"
    return json.loads(html.unescape(m.group(1)))


def test_report_videos_play_in_headless_chromium(tmp_path):
    """The report's <video> elements (base64 MP4 data URIs, muted, looping, autoplaying) load
    and play in a real headless Chromium; the probe sees a broken video as an error."""
    import pandas as pd

    from tdmpc2core.envs.suites.gymnax import _draw_pendulum
    from tdmpc2core.io.video import write_video
    from tdmpc2core.report import analysis as A
    from tdmpc2core.report import html as R

    browser = chromium()
    State = type("State", (), {})
    frames = []
    for i in range(30):  # a swinging pendulum, 1.5 s at 20 fps
        st = State()
        st.theta, st.last_u = np.float32(np.pi * np.sin(i / 5)), np.float32(1.0)
        frames.append(_draw_pendulum(st, 96, 96))
    write_video(tmp_path / "a.mp4", np.stack(frames), 20.0)
    data = (tmp_path / "a.mp4").read_bytes()
    ctx = {"protocol": "demo", "label": "x", "is_paper": False, "generated": "now",
           "final": pd.DataFrame(columns=A.FINAL_COLUMNS), "single": pd.DataFrame(columns=A.SINGLE_TASK_COLUMNS),
           "aggregate": pd.DataFrame(columns=A.AGGREGATE_COLUMNS),
           "videos": [("pendulum", "seed 0", data, None), ("cartpole", "seed 1", data, None),
                      ("custom", "", None, "my-task: no renderer for suite 'mysuite'")]}
    page = R.render_report(ctx)
    assert page.count('<video class="evalvideo"') == 2 and 'href="#videos"' in page
    assert "<b>custom</b>: no video (my-task: no renderer for suite &#x27;mysuite&#x27;)" in page
    tag = re.search(r"<video [^>]*>", page).group(0)
    assert all(w in tag.split("src=")[0] for w in (" muted", " loop", " controls", " autoplay"))
    states = video_states(browser, page, tmp_path)
    assert len(states) == 2
    for s in states:
        assert s["error"] is None and s["ready"] >= 2 and s["time"] > 0 and s["width"] == 96, states
    # the probe can fail: a video whose bytes are not a video reports an error
    broken = R.render_report({**ctx, "videos": [("broken", "", b"not a video" * 100, None)]})
    (bad,) = video_states(browser, broken, tmp_path)
    assert bad["error"] is not None and bad["time"] == 0, bad


def test_multitask_record_episode_is_the_task_evaluation_episode(tmp_path):
    """The multi-task agent records task by task (its embedding and mask, padded observations):
    the first frame is the evaluation's first episode's initial state of that task
    (eval_key(seed, updates, task)); a task without an evaluation env is refused."""
    from tdmpc2core import TDMPC2MultiTask
    from tdmpc2core.agents import multitask_eval as mt_eval
    from tdmpc2core.dataset import EpisodeDataset, TaskInfo
    from tdmpc2core.envs.suites.gymnax import _draw_pendulum

    rng = np.random.default_rng(0)
    cols = {k: [] for k in ("obs", "action", "reward", "truncated", "episode", "step", "task")}
    for t, (T, o_dim, a_dim) in enumerate(((200, 3, 1), (10, 4, 2))):  # pendulum, then a wider stand-in
        for _ in range(2):
            obs = np.zeros((T + 1, 4), np.float32)
            obs[:, :o_dim] = rng.normal(size=(T + 1, o_dim))
            act = np.zeros((T + 1, 2), np.float32)
            act[:, :a_dim] = rng.uniform(-1, 1, (T + 1, a_dim))
            rew = rng.normal(size=T + 1).astype(np.float32)
            act[0, :a_dim], rew[0] = np.nan, np.nan
            ep = len(cols["obs"])
            for k, v in (("obs", obs), ("action", act), ("reward", rew), ("truncated", np.arange(T + 1) == T),
                         ("episode", np.full(T + 1, ep, np.int64)), ("step", np.arange(T + 1, dtype=np.int32)),
                         ("task", np.full(T + 1, t, np.int32))):
                cols[k].append(v)
    c = {k: np.concatenate(v) for k, v in cols.items()}
    tasks = (TaskInfo("pendulum", 3, 1, 200, 1, 0.95, "Pendulum-v1"), TaskInfo("wide", 4, 2, 10, 1, 0.95, None))
    ds = EpisodeDataset(obs=c["obs"], action=c["action"], reward=c["reward"],
                        terminated=np.zeros(len(c["reward"]), bool), truncated=c["truncated"], episode=c["episode"], step=c["step"], task=c["task"], tasks=tasks,
                        provenance={}).check("test")
    agent = TDMPC2MultiTask(ds, eval_envs=["Pendulum-v1", None], **{k: v for k, v in TINY.items() if k != "seed_steps"})
    state = agent.init([5])
    rec = agent.record_episode(state, "pendulum", eval_episodes=4, width=32, height=32, max_frames=101)
    assert rec.stride == 2 and rec.length == 200 and rec.frames.shape == (101, 32, 32, 3)
    k_reset, _ = jax.random.split(jax.random.split(mt_eval.eval_keys([5], 0, 0)[0], 4)[0])
    st0, _ = agent.eval_envs[0].reset(k_reset)
    np.testing.assert_array_equal(rec.frames[0], _draw_pendulum(st0.inner, 32, 32))
    assert agent.record_seconds["record"]["calls_compiled"] == 1
    from tdmpc2core.stages.train_multi import write_task_videos

    logs = []
    videos = write_task_videos(agent, state, 5, 4, tmp_path / "videos", logs.append)  # the same program
    assert list(videos) == ["pendulum"] and videos["pendulum"]["file"] == "videos/pendulum.mp4"
    assert videos["pendulum"]["updates"] == 0 and videos["pendulum"]["frames"] == 201
    assert (tmp_path / "videos/pendulum.mp4").exists() and "task pendulum, seed 5" in logs[0]
    with pytest.raises(ValueError, match="task=1: no evaluation env"):
        agent.record_episode(state, "wide")
    with pytest.raises(ValueError, match="task='nope': not a task of the dataset"):
        agent.record_episode(state, "nope")


# --------------------------------------------------- rendering checked first; a failing video (issue 44)
def test_rendering_is_checked_before_training_naming_the_backend(tmp_path, monkeypatch, capsys):
    """A run that needs MuJoCo's OpenGL rendering (a video of a MuJoCo suite, pixel observations)
    with a backend that cannot work here (GLFW without a display; OSMesa where it is not
    installed) is refused before anything is built or trained: one line naming the backend and
    what to install or set, exit status 1 (a subprocess makes the context: this process's
    MuJoCo keeps its own). gymnax's drawings need no OpenGL: not checked."""
    import ctypes.util
    import time

    from tdmpc2core import cli
    from tdmpc2core.envs import render

    backends = {"glfw": "GLFW needs a display (DISPLAY is not set)"}
    if ctypes.util.find_library("OSMesa") is None:  # .ci/run installs EGL only
        backends["osmesa"] = "the OSMesa library is missing or unusable: install it (Debian/Ubuntu: apt-get install"
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    for backend, hint in backends.items():
        monkeypatch.setenv("MUJOCO_GL", backend)
        monkeypatch.setattr(render, "_CHECKED", {}, raising=False)
        for video, agent, what in (("last", {}, "evaluation videos (--video last)"),
                                   ("off", {"obs": "rgb"}, "pixel observations (agent.obs rgb)")):
            # a valid run (T = 500: seed_steps 500), which 10c895d trained before its video failed
            spec = {"env_id": "dmc:cartpole-balance", "agent_steps": 10, "agent": {**TINY, "seed_steps": 500, **agent}}
            t0 = time.perf_counter()
            rc = cli.main(["train-single", "--task", "cart", "--spec", json.dumps(spec), "--seeds", "0",
                           "--outdir", str(tmp_path / "out"), "--video", video])
            err = [ln for ln in capsys.readouterr().err.splitlines() if "error" in ln]
            assert rc == 1 and len(err) == 1, err
            assert f"{what} need MuJoCo's OpenGL rendering, which fails here (MUJOCO_GL={backend}: " in err[0]
            assert hint in err[0] and "MUJOCO_GL=egl" in err[0]
            assert time.perf_counter() - t0 < 60 and not (tmp_path / "out").exists()  # nothing built, nothing trained
    from tdmpc2core.stages.train_single import check_rendering

    logs = []
    check_rendering(["Pendulum-v1"], "last", False, logs.append)  # a Pillow drawing: nothing to check
    assert logs == []
    monkeypatch.setenv("MUJOCO_GL", "egl")  # what .ci/run and the tdmpc2 command use headless
    check_rendering(["dmc:cartpole-balance"], "last", False, logs.append)
    assert "rendering: MuJoCo's OpenGL context works here (MUJOCO_GL=egl" in logs[0]


@pytest.mark.parametrize("mode", ["last", "every"])
def test_a_video_failing_after_training_costs_the_video_alone(tmp_path, monkeypatch, mode):
    """The recording fails after training (here the renderer raises as a missing OpenGL platform
    does): the run's outputs are written all the same, run.json records the failure, video.mp4 is
    an empty file standing for it (the workflow declares it), and the report says why there is
    no video. Training itself is stood in for (an untrained state, one evaluation of return 0, a
    one-episode export): not the point."""
    from types import SimpleNamespace

    from tdmpc2core import TDMPC2
    from tdmpc2core.report import html as R
    from tdmpc2core.stages import report as report_stage
    from tdmpc2core.stages import train_single

    def train(self, *, seed, n_timesteps, **kw):
        S = len(seed)  # one evaluation at the end, of return 0
        hist = {"eval_agent_steps": np.array([n_timesteps]), "eval_env_frames": np.array([n_timesteps]),
                "eval_returns": np.zeros((1, S, 2)), "eval_lengths": np.full((1, S, 2), 200, np.int32),
                "eval_return": np.zeros((1, S)), "chunks": [], "wall_seconds": 0.0}
        return self.init(seed, n_timesteps), hist

    def broken(self, *a, **k):
        raise RuntimeError("an OpenGL platform library has not been loaded into this process")

    def export(agent, state, seed_index=None, *, name=None, seed=0, **kw):  # an untrained replay holds none
        from tdmpc2core.dataset import TaskInfo, from_episodes

        T, nan = agent.episode_length, np.float32(np.nan)
        task = TaskInfo(name, 3, 1, T, 1, agent.gamma, "Pendulum-v1")
        return from_episodes([{"obs": np.zeros((T + 1, 3), np.float32), "terminated": np.zeros(T + 1, bool),
                               "action": np.r_[[[nan]], np.zeros((T, 1), np.float32)],
                               "reward": np.r_[nan, np.zeros(T, np.float32)]}], task, {"kind": "export"}, seed=seed)

    monkeypatch.setattr(TDMPC2, "train", train)
    monkeypatch.setattr(TDMPC2, "record_episode", broken)
    monkeypatch.setattr("tdmpc2core.agents.export.export_episodes", export)
    spec = {"env_id": "Pendulum-v1", "agent_steps": 400, "eval_episodes": 2, "agent": TINY}
    args = SimpleNamespace(task="pendulum", spec=json.dumps(spec), seeds=[0], outdir=str(tmp_path / "pendulum"),
                           video=mode, checkpoint_dir=None, checkpoint_every=None, keep_checkpoints=2,
                           max_chunk_seconds=None, progress_seconds=60.0, logger=None, devices=None)
    assert train_single.run(args) == 0
    d = tmp_path / "pendulum" / "seed0"
    assert all((d / f).exists() for f in ("eval.parquet", "metrics.parquet", "episodes.parquet", "run.json"))
    rec = json.loads((d / "run.json").read_text())["video"]
    assert rec["file"] is None and rec["error"] == ("RuntimeError: an OpenGL platform library has not been loaded "
                                                    "into this process") and rec["empty_file"] == "video.mp4"
    assert rec["reason"].startswith("recording failed: RuntimeError") and (d / "video.mp4").stat().st_size == 0
    videos = report_stage._videos({"tasks": {"pendulum": {}}, "seeds": [0]}, str(tmp_path))
    assert videos == [("pendulum", "", None, rec["reason"])]
    assert "<b>pendulum</b>: no video (recording failed: RuntimeError: an OpenGL platform library" in \
        R.videos_section(videos)
