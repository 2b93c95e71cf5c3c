"""Pictures of an environment's states, for evaluation videos (issue 29).

A recorded episode is rendered in two steps, so that the rollout stays one compiled program
without a host round trip per step:

1. inside the compiled rollout, :meth:`FrameSource.state_of` keeps, per agent step, the small
   part of the env state a picture needs (a pytree of arrays: MuJoCo ``qpos`` and mocap
   poses, a gymnax state, a host simulator's state words);
2. on the host afterwards, :meth:`FrameSource.render` turns the stacked states into RGB frames.

Each suite's module defines its renderer and names it in its registry entry
(:attr:`tdmpc2core.envs.registry.Suite.frames`): dm_control's ``Physics.render``; Playground's and
Brax's ``mujoco.Renderer`` on the env's own ``MjModel`` (:func:`mj_qpos_source`: ``qpos`` and
mocap poses copied into an ``MjData``, ``mj_forward``; camera 0 when the model has one, else the
free camera); Meta-World's and MyoSuite's on the host simulator's model (:func:`host_mujoco_source`;
Meta-World's ``corner2`` camera when present, as the official wrapper); gymnax's classic control
drawn with Pillow. This module holds what they share and what the callers ask: a suite without a
renderer raises :class:`NoRendererError` from :func:`frame_source`.
MuJoCo rendering needs an OpenGL context: headless, ``MUJOCO_GL=egl`` (Mesa's EGL) or
``osmesa``. :func:`check_opengl` tries one in a subprocess, so that a training stage with
videos or pixels refuses to start (one line: the backend, what to install or set) instead of
failing after training.
"""
from __future__ import annotations

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


def default_camera(model, preferred=()) -> int | str:
    """The first of ``preferred`` that ``model`` has, else camera 0, else the free camera (-1)."""
    for name in preferred:
        for i in range(model.ncam):
            if model.camera(i).name == name:
                return name
    return 0 if model.ncam > 0 else -1


def mj_qpos_source(model, state_of, control_dt, describe) -> FrameSource:
    """Frames of a MuJoCo ``model`` from ``state_of(inner) -> (qpos, mocap_pos, mocap_quat)`` per
    step (empty mocap arrays for a model without mocap bodies)."""
    import mujoco

    data = mujoco.MjData(model)
    canvas = _MjCanvas(model, default_camera(model))

    def render_one(st, width, height):
        qpos, mpos, mquat = st
        data.qpos[:] = np.asarray(qpos, np.float64)
        if model.nmocap:
            data.mocap_pos[:] = np.asarray(mpos, np.float64).reshape(model.nmocap, 3)
            data.mocap_quat[:] = np.asarray(mquat, np.float64).reshape(model.nmocap, 4)
        mujoco.mj_forward(model, data)
        return canvas.draw(data, width, height)

    return FrameSource(state_of, render_one, control_dt, describe, canvas.close)


def host_mujoco_source(env) -> FrameSource:
    """Frames of a host MuJoCo env (:class:`tdmpc2core.envs.host_mujoco.HostMujocoEnv`: Meta-World,
    MyoSuite): its simulator restored from the env state, drawn by ``mujoco.Renderer``."""
    host = env._host
    camera = default_camera(host.model, preferred=("corner2",))
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



__all__ = ["FrameSource", "NoRendererError", "OpenGLError", "cannot_render", "frame_source", "needs_opengl",
           "check_opengl", "opengl_hint", "default_camera", "mj_qpos_source", "host_mujoco_source"]
