"""dm_control suite adapter (dm-control 1.0.50 on mujoco 3.17.0): the paper's own simulator.

Ids are ``"dmc:" + the official TD-MPC2 task name`` (``dmc:cheetah-run``, ``dmc:cup-catch``,
``dmc:walker-walk-backwards``): the domain, a hyphen, the task with ``_`` written ``-``, and
the official short domain names ``cup`` (ball_in_cup) and ``pointmass`` (point_mass).
:data:`DMCONTROL_ENVS` lists them: every task of dm_control's suite but ``lqr`` (its model
itself is drawn at random when the environment is built, and it has no time limit), plus
the official custom tasks of :mod:`tdmpc2core.envs.dmcontrol_tasks`.

Conventions (the official wrapper, ``tdmpc2/envs/dmcontrol.py`` at the paper's commit
5f6fade, which loads ``suite.load(domain, task, task_kwargs={'random': seed},
visualize_reward=False)``):

* observation: the values of the task's observation dict concatenated in the dict's order,
  each flattened, as float32 (:attr:`DMControlEnv.obs_layout` names the parts);
* action: agent actions in [-1, 1] (clipped), mapped onto the actuator bounds as
  dm_control's ``action_scale`` wrapper does, in float64: ``low + (high - low) / 2 *
  (a + 1)``;
* action repeat: the same action for ``action_repeat`` control steps, rewards summed in
  float64 and returned as float32;
* episodes: ``episode_length`` control steps (1000 by default, as every suite task), i.e.
  T = 1000 / action_repeat agent steps, ``truncated`` at T; never ``terminated`` (no
  dm_control suite task terminates).

One *simulator step* here is one dm_control control step (``control_timestep`` seconds,
i.e. ``n_sub_steps`` MuJoCo steps), the unit of DMC's 1000-step episodes.

The host step. dm_control is not JAX: :meth:`DMControlEnv.reset` and
:meth:`DMControlEnv.step` are ``jax.pure_callback`` calls (``vmap_method="broadcast_all"``:
under any number of ``vmap`` axes, e.g. seeds x envs or seeds x evaluation episodes, one
host call receives the whole batch and loops over it), so they can sit inside the
compiled training program (``lax.scan``/``fori_loop``/``cond``) next to the planner,
replay and updates. The simulator's state is not kept on the host: the env state is a
pytree of JAX arrays (:class:`DMCState`) that holds the complete MuJoCo integration state
(``mj_getState(..., mjSTATE_INTEGRATION)``: time, qpos, qvel, act, warm start, controls,
applied forces, mocap, ...) and the few model fields a task redraws at each reset (e.g.
the reacher's target position), as the bits of their float64/float32 values in uint32
arrays. Each host step restores that state into one scratch simulator, runs ``mj_step1``
(the derived quantities dm_control's stepping expects) and the control steps, and reads
the state back. So the callbacks are pure functions, a checkpointed run state holds the
exact simulator state (a resumed run continues bit for bit), and one simulator serves any
batch. The result is bit-identical to stepping a dm_control environment continuously
(``tests/test_dmcontrol.py``).

Randomness: each reset seeds the task's ``numpy.random.RandomState`` with a uint32 drawn
from the reset's JAX key (:meth:`DMControlEnv.reset_seed`) and calls the task's own
``initialize_episode``; the same key gives the same initial state. The official wrapper
draws all episodes of a run from one RandomState seeded once (docs/deviations.md E4).

A diverging simulation (dm_control's ``PhysicsError``) gives NaN observation and reward
for that step (the state is left as it was); the training loop counts non-finite values
and stops with a FloatingPointError (docs/deviations.md E6). With pixels the frame of such a
step is black (zeros) and the NaN reward is what the loop sees. Any other exception raised
inside a host call (a bug in a task, a renderer that fails) gives NaN as well, is kept, and is
raised after the call as :class:`~tdmpc2core.envs.base.SimulatorError` with its message
(:meth:`DMControlEnv.raise_host_error`, called by the agents): the run stops there.

Pixels (``obs="rgb"``; spec §2 "Pixels"; the official ``PixelWrapper``, 5f6fade
``tdmpc2/envs/wrappers/pixels.py``, over its dm_control wrapper's ``render``): each
observation is the stack of the last 3 RGB frames of 64x64 pixels, channels first, oldest
first, (9, 64, 64) uint8, flattened in C order into a uint8 [36864] vector
(``spec.obs_shape``, ``spec.obs_dtype``). A frame is ``physics.render(64, 64, camera_id)``
(camera 2 for quadruped, else camera 0, as the official wrapper) taken in the host step after
the action repeat; at a reset the stack is the reset frame three times (the official wrapper
renders it three times). The two earlier frames of the stack are carried in the env state
(:class:`DMCPixelState`), so the host callbacks stay pure functions of their arguments and a
checkpoint resumes the stack exactly. dm_control's EGL and OSMesa contexts render on the calling thread and can
be current on one thread only, while ``jax.pure_callback`` calls arrive on XLA's threads (not
always the same one), so a pixel env runs every host call on one dedicated thread of its own,
where the context is created and stays current. Headless Linux: when ``MUJOCO_GL`` is unset, no
display is set, an EGL library is installed and dm_control is not imported yet, building any
dm_control env sets ``MUJOCO_GL=egl`` (:func:`choose_gl_backend`; the backend GPU machines use
too); a pixel env renders a frame when it is built, and a failure is a ValueError naming
``MUJOCO_GL`` and what to set.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
import warnings
import atexit
import concurrent.futures
import dataclasses
import weakref
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from tdmpc2core.envs.base import Env, EnvSpec, EnvState, HostErrors, StepOut, check_repeat_and_length
from tdmpc2core.envs.dmcontrol_ids import (_SUITE_TASKS, _UNALIAS, DMCONTROL_ENVS, MT30_TASKS, PREFIX, REFUSED_TASKS,  # noqa: F401
                                            SUITE_TASKS, dmc_name, official_name, unknown_id_error)
from tdmpc2core.envs.dmcontrol_tasks import CUSTOM_TASKS, REFUSED  # noqa: F401

# Model fields that a task's initialize_episode redraws at every reset (dm_control 1.0.50
# suite sources), carried in the env state. Writes of constants (finger's damping and
# colours, fish's target colour) are applied once by a reset when the env is built.
_EPISODE_MODEL_FIELDS: dict[str, tuple[str, ...]] = {
    "finger": ("site_pos", "site_size"),
    "fish": ("geom_pos",),
    "reacher": ("geom_pos", "geom_size"),
    "swimmer": ("geom_pos", "light_pos"),
    "point_mass": ("wrap_prm",),
    "manipulator": ("body_pos", "body_quat"),
    "stacker": ("body_pos",),
    "quadruped-escape": ("hfield_data",),   # the random terrain
}


#: pixel observations (spec §2): frames of RENDER_SIZE x RENDER_SIZE RGB pixels, NUM_FRAMES stacked
RENDER_SIZE = 64
NUM_FRAMES = 3
FRAME_SIZE = 3 * RENDER_SIZE * RENDER_SIZE  # one frame, channels first, flattened
PIXEL_SHAPE = (3 * NUM_FRAMES, RENDER_SIZE, RENDER_SIZE)
#: the official wrapper's camera per domain (``TimeStepToGymWrapper.render``): 0 unless named here
_CAMERA = {"quadruped": 2}


def camera_id(name: str) -> int:
    """The camera the official wrapper renders official task ``name`` with (2 for quadruped, else 0)."""
    domain = name.split("-", 1)[0]
    return _CAMERA.get(_UNALIAS.get(domain, domain), 0)


def choose_gl_backend() -> None:
    """Set ``MUJOCO_GL=egl`` when it is unset, on Linux without a display, before dm_control is
    first imported, when an EGL library is found (``ctypes.util.find_library("EGL")``).

    dm_control picks its OpenGL backend once, when it is imported; left to itself it picks GLFW,
    which cannot render without a display, so pixels would fail on every headless machine
    (clusters, containers, CI). EGL is what GPU machines render with too. Called before this
    module imports dm_control (state envs as well: a backend choice changes no number of a state
    env, and it lets quadruped-escape's terrain upload work headless). Nothing is changed when
    ``MUJOCO_GL`` is set, a display is set, dm_control is already imported, or no EGL library is
    installed.
    """
    if "MUJOCO_GL" in os.environ or not sys.platform.startswith("linux"):
        return
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or "dm_control" in sys.modules:
        return
    import ctypes.util

    if ctypes.util.find_library("EGL"):
        os.environ["MUJOCO_GL"] = "egl"


def _import_dm_control():
    choose_gl_backend()
    with warnings.catch_warnings():  # glfw warns when no display is set; rendering is not used
        warnings.simplefilter("ignore")
        import dm_control.suite  # noqa: F401
        from dm_control.rl import control
    return control


def load_environment(name: str, seed=None):
    """The ``dm_control.rl.control.Environment`` of official task ``name`` (no ``dmc:``),
    built as the official wrapper builds it (``visualize_reward=False``).

    Raises:
        ValueError: an unknown or refused name.
    """
    _import_dm_control()
    from dm_control import suite

    if name in SUITE_TASKS:
        domain, task = SUITE_TASKS[name]
        return suite.load(domain, task, task_kwargs={"random": seed}, visualize_reward=False)
    if name in CUSTOM_TASKS:
        from tdmpc2core.envs.dmcontrol_tasks import load_custom

        return load_custom(name, random=seed)
    raise unknown_id_error(PREFIX + name)


class DMCState(NamedTuple):
    """The env state of a dm_control task (leading batch axes added by vmap, if any).

    Attributes:
        physics: u32[2 * S]: the float64 MuJoCo integration state (``mj_getState`` with
            ``mjSTATE_INTEGRATION``, S values), as raw bits.
        model: u32[M]: the bits of the model fields the task redraws at each reset (M = 0
            for most tasks).
    """

    physics: jax.Array
    model: jax.Array


class DMCPixelState(NamedTuple):
    """The env state of a dm_control task with pixel observations (``obs="rgb"``).

    Attributes:
        physics, model: as :class:`DMCState`.
        frames: u8[2 * 3 * 64 * 64]: the two newest frames of the stack (oldest first,
            each channels first and flattened): with the next step's frame they make the next
            observation.
    """

    physics: jax.Array
    model: jax.Array
    frames: jax.Array


class _RenderThread:
    """One daemon thread that runs the calls given to :meth:`call`, in order (a pixel env's host
    work: the OpenGL context lives on it). Not a ``ThreadPoolExecutor``: those refuse work once
    the interpreter starts exiting, before the exit hook that frees the context has run."""

    def __init__(self, name: str):
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, args, fut = item
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 (handed to the caller)
                fut.set_exception(e)

    def call(self, fn, *args):
        """``fn(*args)`` run on the thread; its result, or its exception raised here."""
        if threading.current_thread() is self._thread:
            return fn(*args)
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((fn, args, fut))
        return fut.result()

    def stop(self):
        self._queue.put(None)


def _release_render_thread(physics, thread: _RenderThread) -> None:
    """Free ``physics``'s rendering contexts on ``thread`` (where they are current), then stop
    it. Run when the env is collected or at exit (idempotent); errors at shutdown are ignored."""
    def free():
        if getattr(physics, "_contexts", None):
            physics._free_rendering_contexts()

    try:
        thread.call(free)
    except Exception:  # noqa: BLE001 (interpreter shutdown: nothing left to do)
        pass
    thread.stop()


class _Host:
    """The host side: one dm_control environment used as a scratch simulator.

    Every call restores the complete state it is given, so the calls are pure functions of
    their arguments; a lock serialises them.
    """

    def __init__(self, name: str, action_repeat: int, pixels: bool = False):
        import mujoco


        control = _import_dm_control()
        self._mujoco = mujoco
        self._physics_error = control.PhysicsError
        try:
            env = load_environment(name, seed=0)
            env.reset()  # applies the task's constant model writes once; sets the layouts below
        except ValueError:
            raise
        except Exception as e:  # e.g. quadruped-escape without an OpenGL context
            raise ValueError(f"dm_control task {name!r} could not be built and reset: "
                             f"{type(e).__name__}: {e}") from None
        self.env, self.physics, self.task = env, env.physics, env.task
        self.repeat = int(action_repeat)
        self.n_sub_steps = int(round(env.control_timestep() / self.physics.timestep()))
        self.sig = int(mujoco.mjtState.mjSTATE_INTEGRATION)
        self.state_size = int(mujoco.mj_stateSize(self.physics.model.ptr, self.sig))
        domain = name.split("-", 1)[0]
        fields = _EPISODE_MODEL_FIELDS.get(name, _EPISODE_MODEL_FIELDS.get(_UNALIAS.get(domain, domain), ()))
        self.model_fields = []
        offset = 0
        for f in fields:
            arr = getattr(self.physics.model, f)
            n = arr.nbytes // 4
            self.model_fields.append((f, offset, offset + n, arr.dtype, arr.shape))
            offset += n
        self.model_words = offset
        spec = env.action_spec()
        self.low = np.asarray(np.broadcast_to(spec.minimum, spec.shape), np.float64)
        self.high = np.asarray(np.broadcast_to(spec.maximum, spec.shape), np.float64)
        self.action_dtype = spec.dtype
        obs = env.task.get_observation(self.physics)
        self.obs_layout = tuple((k, int(np.asarray(v).size)) for k, v in obs.items())
        self.obs_dim = sum(n for _, n in self.obs_layout)
        self._lock = threading.Lock()
        self.stats = {"calls": 0, "items": 0, "seconds": 0.0}
        #: exceptions other than PhysicsError raised inside host calls (NaN results), until
        #: raised after the call (DMControlEnv.raise_host_error)
        self.errors = HostErrors()
        self.pixels = bool(pixels)
        self.camera_id = camera_id(name)
        # Pixels: every host call runs on one dedicated thread. dm_control's EGL (and OSMesa)
        # context renders on the calling thread and can be current on one thread only, while
        # jax.pure_callback calls come from XLA's threads (a different one from one call to the
        # next); so the context is created and kept current on this thread.
        self._render_thread = _RenderThread("tdmpc2-dmc-render") if self.pixels else None
        if self.pixels:
            try:
                self._on_thread(self._frame)
                # free the OpenGL context on its own thread, when the env is collected or at exit
                # (registered after dm_control's own exit hook, so it runs first: dm_control's
                # would free it from the main thread, where EGL refuses the context)
                atexit.register(weakref.finalize(self, _release_render_thread, self.physics, self._render_thread))
            except Exception as e:  # no OpenGL context: GLFW without a display, no EGL library, ...
                raise ValueError(
                    f"dm_control task {name!r} with obs='rgb' could not render a frame ({type(e).__name__}: {e}); "
                    f"MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}. Pixels need an OpenGL backend: set MUJOCO_GL=egl "
                    "(GPU or Mesa EGL) or MUJOCO_GL=osmesa (software) before dm_control is imported (before the "
                    "first dm_control env of the process is built)") from None

    def _count(self, t0, items):
        self.stats["calls"] += 1
        self.stats["items"] += int(items)
        self.stats["seconds"] += time.perf_counter() - t0

    # ---------------------------------------------------------------- one item
    def _read(self, phys_out, model_out):
        st = np.empty(self.state_size, np.float64)
        self._mujoco.mj_getState(self.physics.model.ptr, self.physics.data.ptr, st, self.sig)
        phys_out[:] = st.view(np.uint32)
        if model_out is not None:
            for f, a, b, _, _ in self.model_fields:
                model_out[a:b] = np.ascontiguousarray(getattr(self.physics.model, f)).reshape(-1).view(np.uint32)

    def _restore(self, phys, model):
        for f, a, b, dtype, shape in self.model_fields:
            np.copyto(getattr(self.physics.model, f), model[a:b].view(dtype).reshape(shape))
        m, d = self.physics.model.ptr, self.physics.data.ptr
        self._mujoco.mj_setState(m, d, np.ascontiguousarray(phys).view(np.float64), self.sig)
        # dm_control's stepping expects the position/velocity stage of the current state; a
        # non-finite state raises PhysicsError here (MuJoCo would reset it with a warning)
        with self.physics.check_invalid_state():
            self._mujoco.mj_step1(m, d)

    def _on_thread(self, fn, *args):
        """``fn(*args)``, on the render thread with pixels (see ``__init__``), else here."""
        if self._render_thread is None:
            return fn(*args)
        return self._render_thread.call(fn, *args)

    def _frame(self):
        """The current frame: u8[3 * 64 * 64], channels first (official ``PixelWrapper._get_obs``)."""
        img = self.physics.render(height=RENDER_SIZE, width=RENDER_SIZE, camera_id=self.camera_id)
        return np.ascontiguousarray(np.asarray(img, np.uint8).transpose(2, 0, 1)).reshape(-1)

    def _obs(self):
        obs = self.task.get_observation(self.physics)
        return np.concatenate([np.asarray(v).ravel() for v in obs.values()]).astype(np.float32)

    def _control_step(self, env_action) -> float:
        """One control step as ``control.Environment.step`` takes it, minus its step counter."""
        self.task.before_step(env_action, self.physics)
        self.physics.step(self.n_sub_steps)
        self.task.after_step(self.physics)
        return float(self.task.get_reward(self.physics) or 0.0)

    # ---------------------------------------------------------------- batches
    def reset(self, seeds):
        return self._on_thread(self._reset, seeds)

    def step(self, phys, model, action, repeat, agent_units):
        return self._on_thread(self._step, phys, model, action, repeat, agent_units)

    def _reset(self, seeds):
        t0 = time.perf_counter()
        seeds = np.asarray(seeds)
        batch = seeds.shape
        phys = np.empty(batch + (2 * self.state_size,), np.uint32)
        model = np.empty(batch + (self.model_words,), np.uint32)
        obs = np.empty(batch + ((FRAME_SIZE,) if self.pixels else (self.obs_dim,)),
                       np.uint8 if self.pixels else np.float32)
        with self._lock:
            for i in np.ndindex(batch):
                try:
                    self.task.random.seed(int(seeds[i]))
                    ts = self.env.reset()
                    if self.pixels:
                        obs[i] = self._frame()
                    else:
                        obs[i] = np.concatenate([np.asarray(v).ravel()
                                                 for v in ts.observation.values()]).astype(np.float32)
                    self._read(phys[i], model[i])
                except Exception as e:  # noqa: BLE001 - kept, raised after the call (raise_host_error)
                    self.errors.add("reset", e)
                    obs[i] = 0 if self.pixels else np.nan
            self._count(t0, seeds.size)
        return phys, model, obs

    def _step(self, phys, model, action, repeat, agent_units):
        t0 = time.perf_counter()
        batch = phys.shape[:-1]
        action = np.broadcast_to(action, batch + action.shape[-1:])
        phys_out = np.array(phys, np.uint32, copy=True)
        obs = np.empty(batch + ((FRAME_SIZE,) if self.pixels else (self.obs_dim,)),
                       np.uint8 if self.pixels else np.float32)
        reward = np.empty(batch, np.float32)
        with self._lock:
            for i in np.ndindex(batch):
                a = np.asarray(action[i])
                if agent_units:  # dm_control's action_scale wrapper, onto [low, high], in float64
                    scale = (self.high - self.low) / (1.0 - (-1.0))
                    env_action = self.low + scale * (a.astype(np.float64) - (-1.0))
                else:
                    env_action = a.astype(np.float64)
                env_action = env_action.astype(self.action_dtype, copy=False)
                try:
                    self._restore(phys[i], model[i])
                    total = 0.0
                    for _ in range(repeat):
                        total += self._control_step(env_action)
                    obs[i] = self._frame() if self.pixels else self._obs()
                    reward[i] = np.float32(total)
                    self._read(phys_out[i], None)
                except self._physics_error:  # diverging physics: NaN, the episode dropped (E6, O8)
                    obs[i] = 0 if self.pixels else np.nan
                    reward[i] = np.nan
                except Exception as e:  # noqa: BLE001 - anything else: kept, raised after the call
                    self.errors.add("step", e)
                    obs[i] = 0 if self.pixels else np.nan
                    reward[i] = np.nan
            self._count(t0, reward.size)
        return phys_out, obs, reward


class DMControlEnv(Env):
    """A dm_control suite task (or an official custom task) behind the :class:`Env` interface.

    Args:
        env_id: an id in :data:`DMCONTROL_ENVS` (``"dmc:cheetah-run"``).
        suite: the name of the suite that builds it (``EnvSpec.suite``; :mod:`tdmpc2core.envs.suites.dmcontrol`).
        action_repeat: control steps per agent step (rewards summed; the paper uses 2).
        episode_length: control steps per episode (1000, as every suite task); T =
            episode_length // action_repeat agent steps.
        obs: ``"state"`` (default; f32[obs_dim], the task's observation dict concatenated) or
            ``"rgb"`` (u8[9 * 64 * 64], the stack of the last 3 rendered frames; module
            docstring, spec §2 "Pixels"; ``spec.obs_dtype`` "uint8", ``spec.obs_shape``
            (9, 64, 64)).

    Raises:
        ValueError: unknown or refused id (close matches and the accepted ids named);
            ``action_repeat`` < 1 or ``episode_length`` not a multiple of it; ``obs`` not
            "state" or "rgb"; a task that fails to build (e.g. quadruped-escape needs an
            OpenGL context: ``MUJOCO_GL=egl`` or ``osmesa``) or, with pixels, to render.
    """

    steps_on_host = True

    def __init__(self, env_id: str, *, suite: str, action_repeat: int = 1, episode_length: int = 1000,
                 obs: str = "state"):
        from tdmpc2core.envs.registry import check_obs

        if env_id not in DMCONTROL_ENVS:
            raise unknown_id_error(env_id)
        check_repeat_and_length(action_repeat, episode_length, check_length=True)
        self.pixels = check_obs(obs) == "rgb"
        host = _Host(dmc_name(env_id), action_repeat, pixels=self.pixels)
        self._host = host
        self._token = None
        pix = dict(obs_dtype="uint8", obs_shape=PIXEL_SHAPE) if self.pixels else {}
        spec = EnvSpec.from_bounds(
            env_id, suite, NUM_FRAMES * FRAME_SIZE if self.pixels else host.obs_dim, host.low, host.high,
            action_repeat=action_repeat, episode_length=episode_length // action_repeat,
            backend=None, can_terminate=False)
        self.spec = dataclasses.replace(spec, **pix)

    def raise_host_error(self, where: str = "") -> None:
        """Raise :class:`~tdmpc2core.envs.base.SimulatorError` for the first exception other
        than dm_control's ``PhysicsError`` (diverging physics gives NaN and a dropped episode:
        docs/deviations.md E6) raised inside a host call since the last check; nothing
        otherwise. The agents call it after every call of their compiled programs."""
        self._host.errors.raise_first(self.spec.env_id, self.spec.suite, where)

    @property
    def dm_env(self):
        """The host ``dm_control.rl.control.Environment`` (a scratch simulator: its state is
        overwritten by every call)."""
        return self._host.env

    @property
    def obs_layout(self) -> tuple[tuple[str, int], ...]:
        """The observation's parts in order: ((name, length), ...) of the task's dict."""
        return self._host.obs_layout

    @property
    def effective_settings(self) -> dict:
        """The control step and the physics step in seconds (``control_timestep``,
        ``physics_timestep``) and the MuJoCo steps per control step (``n_sub_steps``): the
        official construction's, which ``env_params`` cannot change."""
        host = self._host
        return {"control_timestep": float(host.env.control_timestep()),
                "physics_timestep": float(host.physics.timestep()), "n_sub_steps": int(host.n_sub_steps)}

    @property
    def n_sub_steps(self) -> int:
        """MuJoCo steps per control (simulator) step."""
        return self._host.n_sub_steps

    def host_stats(self, reset: bool = False) -> dict:
        """Host work since the env was built (or the last ``reset=True``): ``calls`` (host
        callbacks), ``items`` (env resets and agent steps, over all batch elements) and
        ``seconds`` (wall time inside the callbacks). ``reset=True`` zeroes the counters
        after reading them."""
        out = dict(self._host.stats)
        if reset:
            self._host.stats.update(calls=0, items=0, seconds=0.0)
        return out

    @staticmethod
    def reset_seed(key) -> jax.Array:
        """The uint32 seed of the task's RandomState for a reset with ``key``."""
        return jax.random.bits(key, (), jnp.uint32)

    def _shapes(self):
        """Shapes of the host's (physics, model, observation) outputs; the observation is one
        frame u8[3 * 64 * 64] with pixels."""
        h = self._host
        obs = (jax.ShapeDtypeStruct((FRAME_SIZE,), jnp.uint8) if self.pixels
               else jax.ShapeDtypeStruct((h.obs_dim,), jnp.float32))
        return (jax.ShapeDtypeStruct((2 * h.state_size,), jnp.uint32),
                jax.ShapeDtypeStruct((h.model_words,), jnp.uint32), obs)

    def _raw_reset(self, key):
        phys, model, obs = jax.pure_callback(self._host.reset, self._shapes(), self.reset_seed(key),
                                             vmap_method="broadcast_all")
        if self.pixels:  # the reset frame fills the stack (official PixelWrapper.reset)
            return DMCPixelState(phys, model, jnp.tile(obs, NUM_FRAMES - 1)), jnp.tile(obs, NUM_FRAMES)
        return DMCState(phys, model), obs

    def _with_frame(self, inner, phys, frame):
        """(state, observation) after a host step that rendered ``frame`` u8[3 * 64 * 64]: the
        stack is the carried frames then the new one; the newest two are carried on."""
        obs = jnp.concatenate([inner.frames, frame])
        return DMCPixelState(phys, inner.model, obs[FRAME_SIZE:]), obs

    def _host_step(self, inner: DMCState, action, repeat: int, agent_units: bool):
        phys_s, _, obs_s = self._shapes()

        def call(phys, model, a):
            return self._host.step(np.asarray(phys), np.asarray(model), np.asarray(a), repeat, agent_units)

        return jax.pure_callback(call, (phys_s, obs_s, jax.ShapeDtypeStruct((), jnp.float32)),
                                 inner.physics, inner.model, action, vmap_method="broadcast_all")

    def _raw_step(self, inner, env_action, key):
        """One control step with an action in the env's own units (float32)."""
        del key
        a = jnp.asarray(env_action, jnp.float32).reshape(self.spec.action_dim)
        phys, obs, reward = self._host_step(inner, a, 1, False)
        if self.pixels:
            inner, obs = self._with_frame(inner, phys, obs)
            return inner, obs, reward, jnp.zeros((), bool)
        return DMCState(phys, inner.model), obs, reward, jnp.zeros((), bool)

    def step(self, env_state: EnvState, action: jax.Array, key: jax.Array) -> tuple[EnvState, StepOut]:
        """One agent step: ``action_repeat`` control steps in one host call (see the module
        docstring). ``key`` is unused (dm_control steps are deterministic). Returns
        ``(env_state, StepOut(obs, reward, terminated=False, truncated=t >= T, success=False))``;
        with pixels ``obs`` is the u8 frame stack whose newest frame is rendered after the
        step."""
        del key
        a = jnp.clip(jnp.asarray(action, jnp.float32).reshape(self.spec.action_dim), -1.0, 1.0)
        phys, obs, reward = self._host_step(env_state.inner, a, self.spec.action_repeat, True)
        t = env_state.t + 1
        if self.pixels:  # the frame rendered after the action repeat joins the stack
            inner, obs = self._with_frame(env_state.inner, phys, obs)
        else:
            inner = DMCState(phys, env_state.inner.model)
        return EnvState(inner=inner, t=t), StepOut(obs, reward, jnp.zeros((), bool), t >= self.spec.episode_length,
                                                   jnp.zeros((), bool))

