"""Pictures of an environment's states, for evaluation videos (issue 29).

A recorded episode is rendered in two steps, so that the rollout stays one compiled program
without a host round trip per step:

1. inside the compiled rollout, :meth:`FrameSource.state_of` keeps, per agent step, the small
   part of the env state a picture needs (a pytree of arrays: MuJoCo ``qpos`` and mocap
   poses, a gymnax state, a host simulator's state words);
2. on the host afterwards, :meth:`FrameSource.render` turns the stacked states into RGB frames.

The suites' own renderers draw the frames:

* dm_control: the task's ``Physics.render`` (the simulator restored from the env state's
  integration state and redrawn model fields), camera 0 (2 for quadruped), as the official
  wrapper renders;
* MuJoCo Playground and Brax: ``mujoco.Renderer`` on the env's own ``MjModel`` (Playground's
  ``mj_model``, Brax's ``sys.mj_model``) with ``qpos`` (and mocap poses) copied into an
  ``MjData`` and ``mj_forward``; camera 0 when the model has one, else the free camera;
* Meta-World and MyoSuite: ``mujoco.Renderer`` on the host simulator's model, restored from
  the env state (Meta-World's ``corner2`` camera when present, as the official wrapper);
* gymnax classic control (``Pendulum-v1``, ``MountainCarContinuous-v0``): gymnax's own
  visualiser needs gymnasium's pygame renderer (not a dependency), so a small drawing of the
  state with Pillow (the pendulum's rod at its angle; the car on its hill).

Each suite names its renderer in its registry entry (:attr:`tdmpc2core.envs.registry.Suite.frames`);
a suite without one raises :class:`NoRendererError` from :func:`frame_source`.
MuJoCo rendering needs an OpenGL context: headless, ``MUJOCO_GL=egl`` (Mesa's EGL) or
``osmesa``. :func:`check_opengl` tries one in a subprocess, so that a training stage with
videos or pixels refuses to start (one line: the backend, what to install or set) instead of
failing after training.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np


class NoRendererError(ValueError):
    """The environment's suite (or this env of it) has no renderer here; the message names
    the env id, its suite and the suites that have one."""


class OpenGLError(ValueError):
    """MuJoCo cannot render on this machine with its OpenGL backend (``MUJOCO_GL``): one line
    naming the backend, what failed and what to install or set (:func:`check_opengl`)."""


class FrameSource:
    """How to picture one environment's states.

    Attributes:
        state_of: ``inner -> pytree`` (jittable; :attr:`tdmpc2core.envs.EnvState.inner` of one
            env, no batch axis): what :meth:`render` needs of one state.
        control_dt: seconds of simulated time per simulator step (one agent step is
            ``action_repeat`` of them).
        describe: the renderer, in words (for the report and logs).
        seconds: wall-clock seconds spent in :meth:`render` so far.
    """

    def __init__(self, state_of: Callable[[Any], Any], render_one: Callable[[Any, int, int], np.ndarray],
                 control_dt: float, describe: str, close: Callable[[], None] | None = None):
        self.state_of = state_of
        self._render_one = render_one
        self.control_dt = float(control_dt)
        self.describe = describe
        self._close = close
        self.seconds = 0.0

    def render(self, states, width: int, height: int) -> np.ndarray:
        """Frames of stacked states (every leaf with a leading axis N, as ``state_of`` gives
        them stacked by ``lax.scan``; numpy or jax arrays).

        Returns:
            uint8 [N, height, width, 3] RGB frames.
        Raises:
            ValueError: ``width`` or ``height`` not a positive even int (H.264 with yuv420p
                needs even sides).
        """
        import time

        import jax

        t0 = time.perf_counter()
        for name, v in (("width", width), ("height", height)):
            if not isinstance(v, (int, np.integer)) or v <= 0 or v % 2:
                raise ValueError(f"{name}={v!r}: a positive even number of pixels is accepted")
        leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(states)]
        n = leaves[0].shape[0] if leaves else 0
        out = np.empty((n, int(height), int(width), 3), np.uint8)
        for i in range(n):
            one = jax.tree_util.tree_map(lambda x: np.asarray(x)[i], states)
            out[i] = self._render_one(one, int(width), int(height))
        self.seconds += time.perf_counter() - t0
        return out

    def close(self) -> None:
        """Free the renderer's OpenGL context (if any)."""
        if self._close is not None:
            self._close()
            self._close = None


def frame_source(env) -> FrameSource:
    """The :class:`FrameSource` of ``env`` (a :class:`tdmpc2core.envs.Env`): its suite's
    (:attr:`tdmpc2core.envs.registry.Suite.frames`).

    Raises:
        NoRendererError: no renderer for the env's suite (or for this env of it).
    """
    reason = cannot_render(env)
    if reason is not None:
        raise NoRendererError(reason)
    from .registry import get_suite

    return get_suite(env.spec.suite).frames(env)


_GYMNAX_DRAWN = ("Pendulum-v1", "MountainCarContinuous-v0")


def cannot_render(env_id) -> str | None:
    """Why an env of ``env_id`` (or a prebuilt :class:`~tdmpc2core.envs.Env`) cannot be
    rendered, in one line; None when its suite has a renderer
    (:attr:`tdmpc2core.envs.registry.Suite.frames`). Decided from the id alone, without
    building the env (the workflow asks it while it plans the jobs). An id no suite knows
    gives the registry's ValueError."""
    from .registry import get_suite, suite_for  # no JAX: the workflow plans without it

    if hasattr(env_id, "spec"):  # an Env
        name, env_id = env_id.spec.suite, env_id.spec.env_id
        suite = get_suite(name, None)
    else:
        suite = suite_for(str(env_id))
        name = suite.name
    if suite is None or suite.frames is None:
        have = [s.name for s in _suites() if s.frames is not None]
        return f"{env_id}: no renderer for suite {name!r} (suites with one: {', '.join(have)})"
    return None


def _suites():
    from .registry import suites

    return suites()


def needs_opengl(env_id, obs: str = "state") -> bool:
    """Whether rendering ``env_id`` (an id or a prebuilt :class:`~tdmpc2core.envs.Env`) needs
    MuJoCo's OpenGL context: pixel observations (``obs="rgb"``) always do; an evaluation video
    does when the suite's renderer draws through MuJoCo (:attr:`~tdmpc2core.envs.registry.Suite.frames_opengl`;
    gymnax's drawings do not). False for a suite without a renderer (nothing is drawn). Plain
    Python; an id no suite knows gives the registry's ValueError."""
    if obs == "rgb":
        return True
    from .registry import get_suite, suite_for

    suite = get_suite(env_id.spec.suite, None) if hasattr(env_id, "spec") else suite_for(str(env_id))
    return suite is not None and suite.frames is not None and bool(suite.frames_opengl)


#: a subprocess that makes MuJoCo's OpenGL context (MUJOCO_GL as this process has it) and renders
#: one small frame: "ok", or the exception's type and message on its last line
_PROBE = """
import sys
try:
    import mujoco
    m = mujoco.MjModel.from_xml_string("<mujoco><worldbody><light pos='0 0 1'/><geom size='.1'/></worldbody></mujoco>")
    r = mujoco.Renderer(m, height=16, width=16)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    r.update_scene(d)
    r.render()
    r.close()
except BaseException as e:
    print("error: " + " ".join(f"{type(e).__module__}.{type(e).__name__}: {e}".split()), flush=True)
    sys.exit(3)
print("ok", flush=True)
"""

_CHECKED: dict = {}


def opengl_hint(backend: str | None, display: str | None = None) -> str:
    """What to install or set for MuJoCo's OpenGL backend ``backend`` (``MUJOCO_GL``; None:
    unset, MuJoCo's default GLFW on Linux), in words."""
    headless = "on a machine without a display set MUJOCO_GL=egl (Mesa's EGL or a GPU driver) or MUJOCO_GL=osmesa"
    if backend in (None, "", "glfw"):
        which = "MUJOCO_GL is unset, so MuJoCo uses GLFW, which" if not backend else "GLFW"
        return (f"{which} needs a display ({'DISPLAY=' + repr(display) if display else 'DISPLAY is not set'}): "
                f"{headless}")
    if backend == "egl":
        return ("EGL could not make a context: install Mesa's EGL (Debian/Ubuntu: apt-get install libegl1 "
                "libgl1-mesa-dri libegl-mesa0) or a GPU driver with EGL, or set MUJOCO_GL=osmesa (software "
                "rendering: apt-get install libosmesa6)")
    if backend == "osmesa":
        return ("the OSMesa library is missing or unusable: install it (Debian/Ubuntu: apt-get install libosmesa6), "
                "or set MUJOCO_GL=egl (Mesa's EGL: apt-get install libegl1 libgl1-mesa-dri libegl-mesa0)")
    return f"MUJOCO_GL={backend!r} is not a backend MuJoCo knows; accepted: egl, osmesa, glfw"


def check_opengl(what: str = "rendering", timeout: float = 120.0) -> float:
    """Check that MuJoCo can render here, before a run that needs it (an evaluation video of a
    MuJoCo suite, pixel observations) trains: a subprocess with this process's environment
    makes MuJoCo's OpenGL context (``MUJOCO_GL``: ``egl``, ``osmesa``, ``glfw``) and renders a
    16x16 frame (a backend that fails can also abort a process, or fail only when MuJoCo is
    imported, so not here). The answer is kept per (``MUJOCO_GL``, ``DISPLAY``) for the process.

    Args:
      what: what needs it, for the message (``"evaluation videos (--video last)"``).
      timeout: seconds the subprocess may take.
    Returns:
      the seconds the check took (0.0 when already checked).
    Raises:
      OpenGLError: one line naming ``what``, the backend, the error and what to install or set.
    """
    import os
    import subprocess
    import sys
    import time

    backend, display = os.environ.get("MUJOCO_GL"), os.environ.get("DISPLAY")
    key = (backend, display)
    t0 = time.perf_counter()
    if key not in _CHECKED:
        try:
            res = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout,
                                 env=dict(os.environ))
            lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
            if res.returncode == 0 and lines and lines[-1] == "ok":
                err = None
            elif lines and lines[-1].startswith("error: "):
                err = lines[-1][len("error: "):]
            else:
                tail = " ".join((res.stderr or "").split()[-40:])
                err = f"the renderer's process ended with exit status {res.returncode}" + (f" ({tail})" if tail else "")
        except subprocess.TimeoutExpired:
            err = f"making an OpenGL context took more than {timeout:g} s"
        _CHECKED[key] = err
    err = _CHECKED[key]
    if err is not None:
        shown = f"MUJOCO_GL={backend}" if backend else "MUJOCO_GL unset"
        raise OpenGLError(f"{what} need MuJoCo's OpenGL rendering, which fails here ({shown}: {err}); "
                          f"{opengl_hint(backend, display)}")
    return time.perf_counter() - t0


# ---------------------------------------------------------------- MuJoCo (shared)
class _MjCanvas:
    """A ``mujoco.Renderer`` per frame size on ``model``, made on first use."""

    def __init__(self, model, camera):
        import atexit

        self.model, self.camera, self._renderers = model, camera, {}
        atexit.register(self.close)  # before EGL is torn down (else its __del__ complains at exit)

    def draw(self, data, width, height) -> np.ndarray:
        import mujoco

        r = self._renderers.get((width, height))
        if r is None:
            r = self._renderers[(width, height)] = mujoco.Renderer(self.model, height=height, width=width)
        r.update_scene(data, camera=self.camera)
        return r.render()

    def close(self):
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()


def _default_camera(model, preferred=()) -> int | str:
    for name in preferred:
        for i in range(model.ncam):
            if model.camera(i).name == name:
                return name
    return 0 if model.ncam > 0 else -1


def _mj_qpos_source(model, state_of, control_dt, describe) -> FrameSource:
    """Frames of a MuJoCo model from (qpos, mocap_pos, mocap_quat) per step."""
    import mujoco

    data = mujoco.MjData(model)
    canvas = _MjCanvas(model, _default_camera(model))

    def render_one(st, width, height):
        qpos, mpos, mquat = st
        data.qpos[:] = np.asarray(qpos, np.float64)
        if model.nmocap:
            data.mocap_pos[:] = np.asarray(mpos, np.float64).reshape(model.nmocap, 3)
            data.mocap_quat[:] = np.asarray(mquat, np.float64).reshape(model.nmocap, 4)
        mujoco.mj_forward(model, data)
        return canvas.draw(data, width, height)

    return FrameSource(state_of, render_one, control_dt, describe, canvas.close)


def _playground(env) -> FrameSource:
    import jax.numpy as jnp

    pg = env.playground_env
    model = pg.mj_model

    def state_of(inner):
        d = inner.data
        if model.nmocap:
            return d.qpos, d.mocap_pos, d.mocap_quat
        return d.qpos, jnp.zeros((0,), jnp.float32), jnp.zeros((0,), jnp.float32)

    return _mj_qpos_source(model, state_of, float(pg.dt), "mujoco.Renderer on the Playground task's mj_model")


def _brax(env) -> FrameSource:
    import jax.numpy as jnp

    b = env.brax_env
    model = getattr(b.sys, "mj_model", None)
    if model is None:
        raise NoRendererError(f"{env.spec.env_id}: this Brax system has no mj_model to render")

    def state_of(inner):
        z = jnp.zeros((0,), jnp.float32)
        return inner.pipeline_state.q, z, z

    return _mj_qpos_source(model, state_of, float(b.dt), "mujoco.Renderer on the Brax system's mj_model")


def _dmcontrol(env) -> FrameSource:
    host = env._host  # the env's scratch simulator: every call restores the full state it is given
    camera = 2 if env.spec.env_id.split(":", 1)[-1].startswith("quadruped") else 0

    def state_of(inner):
        return inner.physics, inner.model

    def draw(phys, model, width, height):
        with host._lock:
            host._restore(phys, model)
            return np.asarray(host.physics.render(height=height, width=width, camera_id=camera), np.uint8)

    def render_one(st, width, height):
        phys, model = st
        # a pixel env's OpenGL context is current on its render thread only (dm_control's EGL
        # renders on the thread that made it current): draw there, as its observations are drawn
        return host._on_thread(draw, np.asarray(phys), np.asarray(model), width, height)

    dt = float(host.env.control_timestep())
    return FrameSource(state_of, render_one, dt, f"dm_control Physics.render, camera {camera}")


def _host_mujoco(env) -> FrameSource:
    host = env._host
    camera = _default_camera(host.model, preferred=("corner2",))
    canvas = _MjCanvas(host.model, camera)

    def state_of(inner):
        return inner.physics, inner.model, inner.attrs

    def render_one(st, width, height):
        with host._lock:
            host._restore(*(np.asarray(x) for x in st))
            return canvas.draw(host.data, width, height)

    dt = float(getattr(host.env, "dt", host.model.opt.timestep))
    return FrameSource(state_of, render_one, dt, f"mujoco.Renderer on the {env.spec.suite} model, camera {camera!r}",
                       canvas.close)


# ---------------------------------------------------------------- gymnax classic control
def _gymnax(env) -> FrameSource:
    env_id = env.spec.env_id
    params = env.gymnax_params
    if env_id == "Pendulum-v1":
        draw = _draw_pendulum
    elif env_id == "MountainCarContinuous-v0":
        draw = lambda st, w, h: _draw_mountain_car(st, w, h, params)  # noqa: E731
    else:
        raise NoRendererError(f"{env_id}: no renderer for this gymnax env (drawn: Pendulum-v1, "
                              "MountainCarContinuous-v0)")
    return FrameSource(lambda inner: inner, draw, float(getattr(params, "dt", 1.0)),
                       "a Pillow drawing of the gymnax state")


def _draw_pendulum(st, width, height) -> np.ndarray:
    """The pendulum as gymnasium draws it: theta = 0 upright, counter-clockwise positive; the
    rod's length 1 is 40% of the frame's smaller side; an arc shows the last torque."""
    from PIL import Image, ImageDraw

    theta, last_u = float(np.asarray(st.theta)), float(np.asarray(st.last_u))
    img = Image.new("RGB", (width, height), (255, 255, 255))
    d = ImageDraw.Draw(img)
    cx, cy, L = width / 2, height / 2, 0.4 * min(width, height)
    x, y = cx - L * math.sin(theta), cy - L * math.cos(theta)
    rod = max(2, int(0.08 * min(width, height)))
    d.line([(cx, cy), (x, y)], fill=(204, 77, 77), width=rod)
    r = rod / 2
    d.ellipse([x - r, y - r, x + r, y + r], fill=(204, 77, 77))
    if abs(last_u) > 1e-3:  # the torque: an arc around the pivot, its length ~ |u| / 2
        a = 0.3 * min(width, height)
        span = min(abs(last_u) / 2.0, 1.0) * 180.0
        start = -90.0 if last_u > 0 else -90.0 - span
        d.arc([cx - a, cy - a, cx + a, cy + a], start, start + span, fill=(60, 60, 60), width=2)
    p = max(2, rod // 3)
    d.ellipse([cx - p, cy - p, cx + p, cy + p], fill=(0, 0, 0))
    return np.asarray(img, np.uint8)


def _draw_mountain_car(st, width, height, params) -> np.ndarray:
    """The car on the hill y = sin(3 x) / 2 over [min_position, max_position], the goal flag."""
    from PIL import Image, ImageDraw

    lo, hi = float(params.min_position), float(params.max_position)
    goal = float(params.goal_position)
    pos = float(np.asarray(st.position))
    img = Image.new("RGB", (width, height), (255, 255, 255))
    d = ImageDraw.Draw(img)
    sx = lambda x: (x - lo) / (hi - lo) * (width - 1)  # noqa: E731
    sy = lambda y: height - 1 - (0.5 * math.sin(3 * y) + 0.55) / 1.1 * 0.8 * (height - 1)  # noqa: E731
    xs = np.linspace(lo, hi, 100)
    d.line([(sx(x), sy(x)) for x in xs], fill=(0, 0, 0), width=2)
    fx, fy = sx(goal), sy(goal)
    d.line([(fx, fy), (fx, fy - 0.15 * height)], fill=(0, 0, 0), width=1)
    d.polygon([(fx, fy - 0.15 * height), (fx + 0.06 * width, fy - 0.13 * height), (fx, fy - 0.11 * height)],
              fill=(204, 204, 0))
    r = max(3, int(0.04 * min(width, height)))
    cx, cy = sx(pos), sy(pos) - r
    d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=(77, 77, 204))
    return np.asarray(img, np.uint8)


__all__ = ["FrameSource", "NoRendererError", "OpenGLError", "cannot_render", "frame_source", "needs_opengl",
           "check_opengl", "opengl_hint"]
