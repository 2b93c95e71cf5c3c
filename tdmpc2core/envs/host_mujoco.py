"""Host-stepped MuJoCo environments with a complete, restorable state (Meta-World, MyoSuite).

The design of :mod:`tdmpc2core.envs.dmcontrol_env`, made generic: the suite's own Python
environment runs on the host as a scratch simulator, called through ``jax.pure_callback`` from
inside the compiled program. Its JAX state (:class:`HostState`) carries everything the next step
depends on, so each host call is a pure function of its arguments (vmappable, and a resumed run
continues bit for bit):

* ``physics``: MuJoCo's integration state (``mj_getState`` with ``mjSTATE_INTEGRATION``: time,
  qpos, qvel, act, warm start, controls, mocap poses, ...), float64 as raw uint32 bits;
* ``model``: the bits of the rows of the model fields that the suite's reset redraws (goal and
  object positions, object sizes and the quantities MuJoCo derives from them; the rows are found
  when the host is built, as those that differ between resets with three seeds);
* ``attrs``: the env object's per-episode Python state (:class:`AttrCodec`: every numeric
  attribute of the env, e.g. Meta-World's goal, frame-stacked previous observation and step
  counter, MyoSuite's target joint angles), as raw bits.

Attributes that are views into MuJoCo's ``data``/``model`` arrays are not carried (restoring the
MuJoCo state restores them). A numeric attribute that appears after the layout was fixed, or
changes shape or type, raises ``RuntimeError`` naming it (the state would not be restorable).

An exception raised by the suite's simulator inside a host call (a step past Meta-World's
``max_path_length``, a bug in a task) cannot stop the compiled program mid-call: the call's
items from then on give NaN observations and rewards, and the exception's one line is kept on
the host; :meth:`HostMujocoEnv.raise_host_error` (which the agents call after every call of
their compiled programs) raises it as :class:`~tdmpc2core.envs.base.SimulatorError`, so the
run stops with that message instead of training on NaN.

Subclasses of :class:`MujocoHost` build the env and say how one simulator step and one reset
run; :class:`HostMujocoEnv` is the :class:`~tdmpc2core.envs.base.Env` adapter.
"""
from __future__ import annotations

import abc
import threading
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from tdmpc2core.envs.base import Env, EnvSpec, EnvState, HostErrors, StepOut, check_repeat_and_length


class HostState(NamedTuple):
    """The env state of a host-stepped MuJoCo env (leading batch axes added by vmap, if any).

    Attributes:
        physics: u32[2 S], the float64 MuJoCo integration state (S values) as raw bits.
        model: u32[M], the bits of the model-field rows the suite's reset redraws.
        attrs: u32[A], the env object's per-episode Python state (:class:`AttrCodec`).
    """

    physics: jax.Array
    model: jax.Array
    attrs: jax.Array


_SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)


def _words(a: np.ndarray) -> np.ndarray:
    """The raw bytes of ``a`` as uint32 words (zero-padded to a multiple of 4 bytes)."""
    b = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    pad = (-b.size) % 4
    if pad:
        b = np.concatenate([b, np.zeros(pad, np.uint8)])
    return b.view(np.uint32)


class AttrCodec:
    """The numeric Python state of an env object as a fixed-length uint32 vector.

    Built from one or more snapshots of the env (after a reset and after a step, so attributes
    created lazily are seen). Carried: ``bool``/``int``/``float``/NumPy scalars, NumPy numeric
    arrays, lists/tuples of scalars, dicts of arrays or scalars (one level), each possibly None
    (a presence word says which). Skipped: names in ``skip``, strings, other objects, and arrays
    that share memory with MuJoCo's ``model``/``data`` (views restored with the MuJoCo state).

    Raises:
        RuntimeError (:meth:`encode`): a carried attribute changed kind, dtype or shape, or a new
            numeric attribute appeared: the state would not restore exactly.
    """

    def __init__(self, env, skip: set[str], views_of: list[np.ndarray]):
        self.skip = set(skip)
        self._views_of = views_of
        self.entries: dict[str, tuple] = {}  # name -> (kind, detail)
        self.views: set[str] = set()
        self.size = 0
        self.observe(env)

    # ------------------------------------------------------------ layout
    def _is_view(self, v) -> bool:
        return isinstance(v, np.ndarray) and any(np.shares_memory(v, b) for b in self._views_of)

    @staticmethod
    def _kind(v):
        if v is None:
            return None
        if isinstance(v, _SCALARS):
            return ("scalar", type(v))
        if isinstance(v, np.ndarray) and (v.dtype.kind in "biuf"):
            return ("array", (v.dtype.str, v.shape))
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, _SCALARS) for x in v):
            return ("seq", (type(v), len(v), type(v[0])))
        if isinstance(v, dict) and v and all(isinstance(k, str) for k in v):
            parts = {k: AttrCodec._kind(x) for k, x in v.items()}
            if all(p is not None and p[0] in ("scalar", "array") for p in parts.values()):
                return ("dict", tuple(sorted(parts.items(), key=lambda kv: kv[0])))
        return "other"

    def observe(self, env) -> None:
        """Add the numeric attributes ``env`` has now to the layout (before any encode)."""
        for name, v in sorted(vars(env).items()):
            if name in self.skip or name in self.views:
                continue
            if self._is_view(v):
                self.views.add(name)
                continue
            k = self._kind(v)
            if k == "other":
                continue
            if name not in self.entries or self.entries[name] is None:
                self.entries[name] = k
            elif k is not None and k != self.entries[name]:
                raise RuntimeError(f"env attribute {name!r} changed from {self.entries[name]} to {k}: "
                                   "its per-episode state cannot be carried")
        self._offsets()

    @staticmethod
    def _nbytes(k) -> int:
        if k is None:
            return 0
        kind, d = k
        if kind == "scalar":
            return 8
        if kind == "array":
            return int(np.dtype(d[0]).itemsize * int(np.prod(d[1], dtype=np.int64)))
        if kind == "seq":
            return 8 * d[1]
        return sum(AttrCodec._nbytes(p) for _, p in d)

    def _offsets(self):
        self.layout = []
        off = 0
        for name in sorted(self.entries):
            n = 1 + (self._nbytes(self.entries[name]) + 3) // 4  # presence word + data
            self.layout.append((name, off, n))
            off += n
        self.size = off

    # ------------------------------------------------------------ values
    @staticmethod
    def _scalar_bytes(x, typ) -> np.ndarray:
        if issubclass(typ, (float, np.floating)):
            return _words(np.asarray(x, np.float64))
        return _words(np.asarray(x, np.int64))

    def _encode_one(self, k, v) -> np.ndarray:
        kind, d = k
        if kind == "scalar":
            return self._scalar_bytes(v, d)
        if kind == "array":
            return _words(np.asarray(v))
        if kind == "seq":
            typ = d[2]
            dt = np.float64 if issubclass(typ, (float, np.floating)) else np.int64
            return _words(np.asarray(v, dt))
        return np.concatenate([self._encode_one(p, v[key]) for key, p in d]) if d else np.zeros(0, np.uint32)

    def _decode_one(self, k, w: np.ndarray):
        kind, d = k
        if kind == "scalar":
            typ = d
            if issubclass(typ, (float, np.floating)):
                x = w[:2].view(np.float64)[0]
            else:
                x = w[:2].view(np.int64)[0]
            return typ(x) if typ is not np.bool_ else np.bool_(x)
        if kind == "array":
            dt, shape = np.dtype(d[0]), d[1]
            n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            return w.view(np.uint8)[:n].view(dt).reshape(shape).copy()
        if kind == "seq":
            seq_t, n, typ = d
            dt = np.float64 if issubclass(typ, (float, np.floating)) else np.int64
            vals = w[: 2 * n].view(dt)
            return seq_t(typ(x) for x in vals)
        out, off = {}, 0
        for key, p in d:
            nw = (self._nbytes(p) + 3) // 4
            out[key] = self._decode_one(p, w[off: off + nw])
            off += nw
        return out

    def encode(self, env, out: np.ndarray) -> None:
        """Write ``env``'s carried attributes into ``out`` (u32[size])."""
        have = vars(env)
        for name, off, n in self.layout:
            k = self.entries[name]
            v = have.get(name)
            if v is None or k is None:
                if k is None and v is not None and self._kind(v) not in ("other", None):
                    raise RuntimeError(f"env attribute {name!r} became {type(v).__name__} after the state "
                                       "layout was fixed: its per-episode state cannot be carried")
                out[off] = 0
                out[off + 1: off + n] = 0
                continue
            kv = self._kind(v)
            if kv != k:
                raise RuntimeError(f"env attribute {name!r} is {kv}, the state layout has {k}: its per-episode "
                                   "state cannot be carried")
            w = self._encode_one(k, v)
            out[off] = 1
            out[off + 1: off + 1 + w.size] = w
            out[off + 1 + w.size: off + n] = 0
        for name, v in have.items():
            if name in self.entries or name in self.skip or name in self.views:
                continue
            if self._kind(v) not in ("other", None) and not self._is_view(v):
                raise RuntimeError(f"env attribute {name!r} appeared after the state layout was fixed: its "
                                   "per-episode state cannot be carried")

    def decode(self, env, words: np.ndarray) -> None:
        """Set ``env``'s carried attributes from ``words`` (u32[size])."""
        words = np.ascontiguousarray(words, np.uint32)
        for name, off, n in self.layout:
            k = self.entries[name]
            if k is None or words[off] == 0:
                setattr(env, name, None)
            else:
                setattr(env, name, self._decode_one(k, words[off + 1: off + n]))


class MujocoHost(abc.ABC):
    """The host side of a :class:`HostMujocoEnv`: one suite env used as a scratch simulator.

    Every call restores the complete state it is given (MuJoCo integration state, the model
    fields in :attr:`model_fields`, the env object's attributes), so the calls are pure
    functions of their arguments; a lock serialises them. Subclasses set ``self.env`` (the
    suite's unwrapped env), ``self.model``/``self.data`` (its ``MjModel``/``MjData``),
    :attr:`model_fields`, :attr:`attr_skip`, and implement :meth:`_reset_episode` and
    :meth:`_sim_step`, then call :meth:`_finish_init`.
    """

    model_fields: tuple[str, ...] = ()
    attr_skip: set[str] = set()

    @abc.abstractmethod
    def _reset_episode(self, seed: int) -> np.ndarray:
        """Start an episode from uint32 ``seed``; return the first observation (float32)."""

    @abc.abstractmethod
    def _sim_step(self, action: np.ndarray):
        """One simulator step with an action in the env's units: (obs, reward, success)."""

    def settings(self) -> dict:
        """What identifies the suite's env in use (its name, versions), as plain data for the
        run's record (:attr:`HostMujocoEnv.effective_settings`); ``{}`` by default."""
        return {}

    def _finish_init(self, low, high, warmup_action):
        import mujoco

        self._mujoco = mujoco
        self.low = np.asarray(low, np.float64)
        self.high = np.asarray(high, np.float64)
        self.sig = int(mujoco.mjtState.mjSTATE_INTEGRATION)
        self.state_size = int(mujoco.mj_stateSize(self.model, self.sig))
        # the rows of the listed model fields that a reset redraws: those that differ between
        # resets with three seeds (a redrawn continuous value differs with probability 1)
        snaps = []
        for seed in (1, 2, 3):
            self._reset_episode(seed)
            snaps.append({f: np.array(getattr(self.model, f), copy=True) for f in self.model_fields})
        fields, offset = [], 0
        for f in self.model_fields:
            a = snaps[0][f].reshape(len(snaps[0][f]), -1)
            differ = np.zeros(len(a), bool)
            for other in snaps[1:]:
                differ |= np.any(a != other[f].reshape(len(a), -1), axis=1)
            rows = np.flatnonzero(differ)
            if rows.size == 0:
                continue
            arr = getattr(self.model, f)
            n = (arr[rows].nbytes + 3) // 4
            fields.append((f, rows, offset, offset + n, arr.dtype, arr[rows].shape))
            offset += n
        self._fields = fields
        self.model_words = offset
        views = [v for obj in (self.model, self.data) for v in (getattr(obj, k, None) for k in dir(obj)
                                                               if not k.startswith("_"))
                 if isinstance(v, np.ndarray)]
        obs = self._reset_episode(0)
        self.codec = AttrCodec(self.env, self.attr_skip, views)
        self._sim_step(np.asarray(warmup_action))
        self.codec.observe(self.env)
        obs = self._reset_episode(0)
        self.codec.observe(self.env)
        self.obs_dim = int(np.asarray(obs).size)
        self._lock = threading.Lock()
        self.stats = {"calls": 0, "items": 0, "seconds": 0.0}
        #: exceptions raised by the simulator inside host calls (NaN results), until raised
        self.errors = HostErrors()

    # ---------------------------------------------------------------- one item
    def _read(self, phys_out, model_out, attrs_out):
        st = np.empty(self.state_size, np.float64)
        self._mujoco.mj_getState(self.model, self.data, st, self.sig)
        phys_out[:] = st.view(np.uint32)
        for f, rows, a, b, _, _ in self._fields:
            model_out[a:b] = _words(getattr(self.model, f)[rows])[: b - a]
        self.codec.encode(self.env, attrs_out)

    def _restore(self, phys, model, attrs):
        for f, rows, a, b, dtype, shape in self._fields:
            n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            getattr(self.model, f)[rows] = np.ascontiguousarray(model[a:b]).view(np.uint8)[:n].view(dtype).reshape(shape)
        self._mujoco.mj_setState(self.model, self.data, np.ascontiguousarray(phys).view(np.float64), self.sig)
        self._mujoco.mj_forward(self.model, self.data)  # the derived quantities the env's step left
        self.codec.decode(self.env, attrs)

    def _count(self, t0, items):
        self.stats["calls"] += 1
        self.stats["items"] += int(items)
        self.stats["seconds"] += time.perf_counter() - t0

    # ---------------------------------------------------------------- batches
    def reset(self, seeds):
        t0 = time.perf_counter()
        seeds = np.asarray(seeds)
        batch = seeds.shape
        phys = np.empty(batch + (2 * self.state_size,), np.uint32)
        model = np.empty(batch + (self.model_words,), np.uint32)
        attrs = np.empty(batch + (self.codec.size,), np.uint32)
        obs = np.empty(batch + (self.obs_dim,), np.float32)
        with self._lock:
            for i in np.ndindex(batch):
                try:
                    obs[i] = np.asarray(self._reset_episode(int(seeds[i])), np.float32).reshape(-1)
                    self._read(phys[i], model[i], attrs[i])
                except Exception as e:  # noqa: BLE001 - kept, raised after the call (raise_host_error)
                    self.errors.add("reset", e)
                    obs[i] = np.nan
            self._count(t0, seeds.size)
        return phys, model, attrs, obs

    def step(self, phys, model, attrs, action, repeat: int):
        """``repeat`` simulator steps with ``action`` (env units, float32) from each state:
        (physics, attrs, obs, reward summed, success of the last step). A step that raises
        gives NaN observation and reward, leaves the state as it was and keeps the exception
        (:attr:`errors`; raised after the call by :meth:`HostMujocoEnv.raise_host_error`)."""
        t0 = time.perf_counter()
        batch = phys.shape[:-1]
        action = np.broadcast_to(action, batch + action.shape[-1:])
        phys_out = np.array(phys, np.uint32, copy=True)
        attrs_out = np.array(attrs, np.uint32, copy=True)
        obs = np.empty(batch + (self.obs_dim,), np.float32)
        reward = np.empty(batch, np.float32)
        success = np.zeros(batch, bool)
        scratch = np.empty((self.model_words,), np.uint32)
        with self._lock:
            for i in np.ndindex(batch):
                a = np.array(action[i], np.float32)
                self._restore(phys[i], model[i], attrs[i])
                total, succ, o = 0.0, False, None
                try:
                    for _ in range(repeat):
                        o, r, succ = self._sim_step(a.copy())
                        total += float(r)
                except Exception as e:  # noqa: BLE001 - kept, raised after the call (raise_host_error)
                    self.errors.add("step", e)
                    obs[i] = np.nan
                    reward[i] = np.nan
                    continue
                obs[i] = np.asarray(o, np.float32).reshape(-1)
                reward[i] = np.float32(total)
                success[i] = bool(succ)
                self._read(phys_out[i], scratch, attrs_out[i])
            self._count(t0, reward.size)
        return phys_out, attrs_out, obs, reward, success


class HostMujocoEnv(Env):
    """An :class:`Env` over a :class:`MujocoHost` (subclasses build the host and the spec).

    ``step`` does the whole action repeat in one host call: the same action for
    ``action_repeat`` simulator steps, rewards summed, the success flag of the last simulator
    step. These suites never terminate an episode (the official wrappers return done=False
    until the time limit).
    """

    steps_on_host = True

    _host: MujocoHost

    def _build(self, env_id: str, make_host, suite: str, action_repeat: int, episode_length: int) -> None:
        """The adapters' construction: check the repeat and the length (``episode_length`` in
        simulator steps, a multiple of ``action_repeat``) before building the host
        (``make_host(env_id)``), then the spec (T = ``episode_length // action_repeat`` agent
        steps, ``has_success``, never terminating). Raises ValueError for a bad repeat or length."""
        check_repeat_and_length(action_repeat, episode_length, check_length=True)
        self._host = host = make_host(env_id)
        self._token = None
        self.spec = EnvSpec.from_bounds(env_id, suite, host.obs_dim, host.low, host.high, action_repeat=action_repeat,
                                        episode_length=episode_length // action_repeat, backend=None,
                                        can_terminate=False, has_success=True)

    @property
    def effective_settings(self) -> dict:
        """The suite's env in use, as its host names it (:meth:`MujocoHost.settings`: Meta-World's
        env name, reward function version and ``max_path_length``; MyoSuite's registry id)."""
        return self._host.settings()

    def raise_host_error(self, where: str = "") -> None:
        """Raise :class:`~tdmpc2core.envs.base.SimulatorError` for the first exception the
        simulator raised inside a host call since the last check (its type and message, the
        env id, ``where``), or nothing. The agents call it after every call of their compiled
        programs, so a run stops at the call's end instead of going on with NaN."""
        self._host.errors.raise_first(self.spec.env_id, self.spec.suite, where)

    def host_stats(self, reset: bool = False) -> dict:
        """Host work since the env was built (or the last ``reset=True``): ``calls``,
        ``items`` (resets and agent steps over all batch elements) and ``seconds``."""
        out = dict(self._host.stats)
        if reset:
            self._host.stats.update(calls=0, items=0, seconds=0.0)
        return out

    @property
    def raw_env(self):
        """The host's suite env (a scratch simulator: every call overwrites its state)."""
        return self._host.env

    @staticmethod
    def reset_seed(key) -> jax.Array:
        """The uint32 seed of the suite env's random generator for a reset with ``key``."""
        return jax.random.bits(key, (), jnp.uint32)

    def _shapes(self):
        h = self._host
        return (jax.ShapeDtypeStruct((2 * h.state_size,), jnp.uint32),
                jax.ShapeDtypeStruct((h.model_words,), jnp.uint32),
                jax.ShapeDtypeStruct((h.codec.size,), jnp.uint32),
                jax.ShapeDtypeStruct((h.obs_dim,), jnp.float32))

    def _raw_reset(self, key):
        phys, model, attrs, obs = jax.pure_callback(self._host.reset, self._shapes(), self.reset_seed(key),
                                                    vmap_method="broadcast_all")
        return HostState(phys, model, attrs), obs

    def _host_step(self, inner: HostState, env_action, repeat: int):
        phys_s, _, attrs_s, obs_s = self._shapes()

        def call(phys, model, attrs, a):
            return self._host.step(np.asarray(phys), np.asarray(model), np.asarray(attrs), np.asarray(a), repeat)

        out = (phys_s, attrs_s, obs_s, jax.ShapeDtypeStruct((), jnp.float32), jax.ShapeDtypeStruct((), jnp.bool_))
        return jax.pure_callback(call, out, inner.physics, inner.model, inner.attrs, env_action,
                                 vmap_method="broadcast_all")

    def _raw_step(self, inner, env_action, key):
        """One simulator step with an action in the env's own units: (inner, obs, reward,
        terminated=False, success)."""
        del key
        a = jnp.asarray(env_action, jnp.float32).reshape(self.spec.action_dim)
        phys, attrs, obs, reward, success = self._host_step(inner, a, 1)
        return HostState(phys, inner.model, attrs), obs, reward, jnp.zeros((), bool), success

    def step(self, env_state: EnvState, action: jax.Array, key: jax.Array) -> tuple[EnvState, StepOut]:
        """One agent step: ``action_repeat`` simulator steps in one host call. ``action``:
        f32[action_dim] in [-1, 1] (clipped, mapped onto the env's bounds); ``key`` unused (the
        steps are deterministic). Returns ``(env_state, StepOut(obs, reward, terminated=False,
        truncated=t >= T, success))``, ``success`` the suite's flag after the last simulator step."""
        del key
        a = self.scale_action(action)
        phys, attrs, obs, reward, success = self._host_step(env_state.inner, a, self.spec.action_repeat)
        t = env_state.t + 1
        inner = HostState(phys, env_state.inner.model, attrs)
        return EnvState(inner=inner, t=t), StepOut(obs, reward, jnp.zeros((), bool), t >= self.spec.episode_length,
                                                   success)


__all__ = ["HostState", "AttrCodec", "MujocoHost", "HostMujocoEnv"]
