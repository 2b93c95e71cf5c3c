"""Suite-independent part of the environment interface.

Every environment is seen by the agent through :class:`Env`: pure JAX ``reset`` and
``step`` functions (jittable, vmappable, usable inside ``lax.scan``) with

* actions in the agent's units ``[-1, 1]``, mapped linearly onto the env's own bounds;
* action repeat done here (the same env action for ``action_repeat`` simulator steps,
  rewards summed, sub-steps after a termination masked out);
* a time limit kept here, counted in agent steps (``truncated``), separate from true
  terminal states (``terminated``);
* no auto-reset: ``step`` always returns the true next observation.

Units: an *agent step* is one call of :meth:`Env.step`; a *simulator step* is one step of
the wrapped suite's own environment (one gymnax ``step_env``, one Brax ``env.step``, one
Playground ``env.step``, i.e. one control step of ``ctrl_dt`` seconds, one dm_control control
step of ``control_timestep`` seconds). One agent step is ``action_repeat`` simulator steps.

Suite adapters subclass :class:`Env` and implement ``_raw_reset`` / ``_raw_step``; an adapter
may also override ``step`` (the dm_control one does the whole action repeat in one host call).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from tdmpc2core.envs.registry import check_repeat_and_length  # noqa: F401 (re-exported)

#: the precision of the simulators' own matrix products (MJX, Brax, gymnax; dm_control and the
#: other host-stepped suites compute in float64 on the CPU): full float32 on every backend,
#: whatever JAX's global default is where the agent's programs are traced (one bf16 pass on a
#: TPU, TF32 on a recent GPU), so that an accelerator steps the same physics as a CPU; the
#: networks' own precision is the configuration's ``matmul_precision``
SIMULATOR_MATMUL_PRECISION = "highest"


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """Static description of a wrapped environment (hashable).

    Attributes:
        env_id: the id given to :func:`make_env`.
        suite: the name of its suite (:mod:`tdmpc2core.envs.registry`): ``"gymnax"``,
            ``"brax"``, ``"playground"``, ``"dmcontrol"`` or one registered at run time.
        obs_dim: length of the flat observation vector (for pixels, the flattened
            frame stack: 9 * 64 * 64 = 36864).
        action_dim: length of the action vector.
        action_low, action_high: the env's own action bounds (length ``action_dim``);
            agent actions in ``[-1, 1]`` are mapped linearly onto them.
        action_repeat: simulator steps per agent step.
        episode_length: T, the time limit in AGENT steps.
        sim_episode_length: simulator steps per full episode (``T * action_repeat``).
        backend: Playground physics implementation (``"jax"`` = MJX, ``"warp"``);
            ``None`` for the other suites.
        can_terminate: whether the env can end an episode before the time limit.
        has_success: whether the suite reports a success flag (``StepOut.success``); the
            report then scores its tasks by success rate, not return.
        obs_dtype: the observation's dtype name: ``"float32"`` (state observations) or
            ``"uint8"`` (pixels, spec §2 "Pixels").
        obs_shape: the unflattened observation shape for pixels, ``(9, 64, 64)``: the
            official frame stack (3 RGB frames, channels first, oldest first), flattened in C
            order into the ``obs_dim`` vector; None for state observations.
    """

    env_id: str
    suite: str
    obs_dim: int
    action_dim: int
    action_low: tuple[float, ...]
    action_high: tuple[float, ...]
    action_repeat: int
    episode_length: int
    sim_episode_length: int
    backend: str | None
    can_terminate: bool
    has_success: bool = False
    obs_dtype: str = "float32"
    obs_shape: tuple | None = None

    @classmethod
    def from_bounds(cls, env_id: str, suite: str, obs_dim: int, low, high, *, action_repeat: int,
                    episode_length: int, backend: str | None = None, can_terminate: bool = False,
                    has_success: bool = False):
        """A spec whose action_dim, bounds and sim_episode_length follow from ``low``/``high``
        (array-likes of the env's bounds) and T = ``episode_length`` agent steps."""
        low, high = bounds_tuple(low), bounds_tuple(high)
        return cls(env_id=env_id, suite=suite, obs_dim=int(obs_dim), action_dim=len(low),
                   action_low=low, action_high=high, action_repeat=int(action_repeat),
                   episode_length=int(episode_length),
                   sim_episode_length=int(episode_length) * int(action_repeat),
                   backend=backend, can_terminate=bool(can_terminate), has_success=bool(has_success))


class StepOut(NamedTuple):
    """Result of one agent step (leading batch axes added by vmap, if any).

    Attributes:
        obs: [obs_dim] of dtype ``spec.obs_dtype`` (f32; u8 for pixels), the true next
            observation (also at episode end).
        reward: f32[], sum of the simulator rewards over the action repeat.
        terminated: bool[], a true terminal state was reached (never the time limit).
        truncated: bool[], the agent-step counter reached T (the time limit).
        success: bool[], the suite's success flag after this agent step (Meta-World's and
            MyoSuite's ``info['success']`` of the last simulator step taken, as the official
            wrappers report it); always False for a suite without one
            (``EnvSpec.has_success`` False).
    """

    obs: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    success: jax.Array


class EnvState(NamedTuple):
    """Pytree carried between agent steps.

    Attributes:
        inner: the wrapped suite's own state (a pytree; treat as opaque).
        t: i32[], agent steps taken since the last reset.
    """

    inner: Any
    t: jax.Array


def _is_plain_array(x) -> bool:
    return not jax.dtypes.issubdtype(jnp.asarray(x).dtype, jax.dtypes.extended)


def canonicalize(tree):
    """Turn every leaf into a strongly typed jax array (python scalars and weak types
    would otherwise change the carry type of a ``scan`` between iterations)."""

    def f(x):
        x = jnp.asarray(x)
        if not _is_plain_array(x):
            return x
        return jax.lax.convert_element_type(x, x.dtype)

    return jax.tree.map(f, tree)


def cast_like(new, old):
    """Cast each leaf of ``new`` to the (strong) dtype of the matching leaf of ``old``."""

    def f(n, o):
        n = jnp.asarray(n)
        if not _is_plain_array(n):
            return n
        return jax.lax.convert_element_type(n, jnp.asarray(o).dtype)

    return jax.tree.map(f, new, old)


def fresh_dicts(state):
    """Shallow-copy the ``metrics`` / ``info`` dicts of a Brax/Playground state.

    Some Brax and Playground envs update ``state.metrics`` in place inside ``step``;
    copying first keeps our ``step`` free of side effects on the caller's state.
    """
    updates = {
        name: dict(getattr(state, name))
        for name in ("metrics", "info")
        if isinstance(getattr(state, name, None), dict)
    }
    return state.replace(**updates) if updates else state


class SimulatorError(RuntimeError):
    """A host-stepped simulator (dm_control, Meta-World, MyoSuite) raised inside a call of a
    compiled program; the message is its type and message, the env id and where the run
    stood. Raised after the call (:meth:`Env.raise_host_error`): the run stops there."""


class HostErrors:
    """The exceptions a host simulator raised inside ``jax.pure_callback`` calls, kept until
    the caller asks (an exception cannot leave a compiled program mid-call; the items of the
    call give NaN meanwhile). Thread-safe; counts every one, keeps the first's line."""

    def __init__(self):
        import threading

        self._lock = threading.Lock()
        self.first, self.count = None, 0

    def add(self, what: str, exc: BaseException) -> None:
        """Record ``exc`` raised in a host ``what`` (``"step"``, ``"reset"``)."""
        line = " ".join(f"{type(exc).__name__}: {exc}".split())
        with self._lock:
            self.count += 1
            if self.first is None:
                self.first = (what, line)

    def raise_first(self, env_id: str, suite: str, where: str = "") -> None:
        """Raise :class:`SimulatorError` for the first kept exception (then forget them all),
        or return when there is none."""
        with self._lock:
            first, count = self.first, self.count
            self.first, self.count = None, 0
        if first is None:
            return
        what, line = first
        more = f" (and {count - 1} more host call item(s) failed)" if count > 1 else ""
        raise SimulatorError(f"{env_id}: the {suite} simulator raised {line} in a host {what}"
                             f"{' ' + where if where else ''}{more}; the run stops here instead of going on with "
                             "the NaN observations and rewards it gave from then on")


def bounds_tuple(x) -> tuple[float, ...]:
    """Action bounds as a tuple of Python floats, each the shortest decimal that
    round-trips through float32 (so a float32 0.1 is recorded as 0.1, not 0.10000000149)."""
    return tuple(float(str(np.float32(v))) if np.isfinite(v) else float(v)
                 for v in np.asarray(x, np.float32).reshape(-1))


class Env:
    """Pure-JAX environment with agent-unit actions, action repeat and a time limit.

    Hashable and comparable by ``(type, spec, params token)``, so an ``Env`` can be a
    static argument of ``jax.jit`` or be closed over. ``reset`` and ``step`` are pure
    functions of their arguments (no Python side effects), safe under ``jit``, ``vmap``
    and ``lax.scan``.

    Subclasses set ``self.spec`` and implement:

    * ``_raw_reset(key) -> (inner, obs)``
    * ``_raw_step(inner, env_action, key) -> (inner, obs, reward, terminated)``:
      one simulator step with an action already in the env's own units.
    """

    spec: EnvSpec
    _token: Any = None  # hashable summary of user-supplied env params (None = defaults)
    _env_params: Any = None  # the settings as plain data (None = defaults); adapters set it
    #: whether reset/step call a simulator on the host (``jax.pure_callback``: dm_control,
    #: Meta-World, MyoSuite); such an env's programs run on one device (:mod:`tdmpc2core.run.devices`)
    steps_on_host: bool = False

    # ----------------------------------------------------------------- settings
    @property
    def env_params(self) -> dict:
        """The environment settings this env was built with, as plain data (a dict of JSON
        values; ``{}``: the suite's defaults): what :func:`tdmpc2core.envs.make_env` takes to
        build the same env again, and what runs, checkpoints and dataset task tables record
        (:mod:`tdmpc2core.envs.params`)."""
        return dict(self._env_params or {})

    @property
    def effective_settings(self) -> dict:
        """The settings in effect that shape the dynamics, as plain data (adapter-specific:
        gymnax every ``EnvParams`` field; Playground ``ctrl_dt``, ``sim_dt`` in seconds and the
        physics steps per control step; Brax ``dt`` in seconds, ``n_frames`` and the pipeline;
        dm_control the control and physics time steps), for the run's record; ``{}`` when the
        adapter says nothing."""
        return {}

    # ----------------------------------------------------------------- identity
    def __hash__(self) -> int:
        return hash((type(self).__name__, self.spec, self._token))

    def __eq__(self, other) -> bool:
        return (
            type(self) is type(other)
            and self.spec == other.spec
            and self._token == other._token
        )

    def __repr__(self) -> str:
        s = self.spec
        return (
            f"{type(self).__name__}({s.env_id!r}, suite={s.suite!r}, obs_dim={s.obs_dim}, "
            f"action_dim={s.action_dim}, action_repeat={s.action_repeat}, T={s.episode_length}"
            + (f", backend={s.backend!r}" if s.backend is not None else "")
            + ")"
        )

    def raise_host_error(self, where: str = "") -> None:
        """Raise :class:`SimulatorError` for an exception a host-stepped simulator raised inside
        the compiled calls since the last check (``where``: the run's position, for the
        message); nothing for an env stepped in JAX (the default)."""

    # ------------------------------------------------------------ to implement
    def _raw_reset(self, key):  # pragma: no cover - abstract
        raise NotImplementedError

    def _raw_step(self, inner, env_action, key):  # pragma: no cover - abstract
        """One simulator step: ``(inner, obs, reward, terminated)``, or with a fifth item, the
        suite's success flag after the step (suites with ``spec.has_success``)."""
        raise NotImplementedError

    def _raw_step5(self, inner, env_action, key):
        with jax.default_matmul_precision(SIMULATOR_MATMUL_PRECISION):
            out = self._raw_step(inner, env_action, key)
        if len(out) == 5:
            return out
        return (*out, jnp.zeros((), bool))

    # ------------------------------------------------------------------ public
    def reset(self, key: jax.Array) -> tuple[EnvState, jax.Array]:
        """Start an episode.

        Args:
            key: a PRNG key.
        Returns:
            ``(env_state, obs)`` with ``obs`` [obs_dim] of dtype ``spec.obs_dtype`` and
            ``env_state.t == 0``.
        """
        with jax.default_matmul_precision(SIMULATOR_MATMUL_PRECISION):
            inner, obs = self._raw_reset(key)
        inner = canonicalize(inner)
        obs = self._flat_obs(obs)
        return EnvState(inner=inner, t=jnp.zeros((), jnp.int32)), obs

    def scale_action(self, action: jax.Array) -> jax.Array:
        """Map an agent action f32[action_dim] in [-1, 1] (clipped first) onto the env's
        bounds: ``low + (a + 1) / 2 * (high - low)``."""
        a = jnp.clip(jnp.asarray(action, jnp.float32).reshape(self.spec.action_dim), -1.0, 1.0)
        low = jnp.asarray(self.spec.action_low, jnp.float32)
        high = jnp.asarray(self.spec.action_high, jnp.float32)
        return low + (a + 1.0) * 0.5 * (high - low)

    def step(self, env_state: EnvState, action: jax.Array, key: jax.Array) -> tuple[EnvState, StepOut]:
        """Take one agent step (``action_repeat`` simulator steps with the same action).

        Args:
            env_state: from :meth:`reset` or a previous :meth:`step`.
            action: f32[action_dim] in agent units [-1, 1] (values outside are clipped).
            key: a PRNG key (split over the simulator steps; suites whose step is
                deterministic ignore it).
        Returns:
            ``(env_state, StepOut(obs, reward, terminated, truncated, success))``. The reward
            is the sum over the simulator steps taken; once a sub-step terminates, the remaining
            sub-steps change neither the state, the observation, the reward nor the success
            flag (that of the last simulator step taken).
            ``truncated`` is True when the agent-step counter reaches T. There is no
            auto-reset: the caller resets when ``terminated | truncated``.
        """
        env_action = self.scale_action(action)
        repeat = self.spec.action_repeat
        if repeat == 1:
            inner, obs, reward, term, succ = self._raw_step5(env_state.inner, env_action, key)
            inner = cast_like(inner, env_state.inner)
            obs = self._flat_obs(obs)
            reward = jnp.asarray(reward, jnp.float32).reshape(())
            term = jnp.asarray(term).astype(bool).reshape(())
            succ = jnp.asarray(succ).astype(bool).reshape(())
        else:

            def body(carry, k):
                inner, obs, rsum, done, succ = carry
                n_inner, n_obs, r, term, n_succ = self._raw_step5(inner, env_action, k)
                n_inner = cast_like(n_inner, inner)
                inner = jax.tree.map(lambda n, o: jnp.where(done, o, n), n_inner, inner)
                obs = jnp.where(done, obs, self._flat_obs(n_obs))
                rsum = rsum + jnp.where(done, 0.0, jnp.asarray(r, jnp.float32).reshape(()))
                succ = jnp.where(done, succ, jnp.asarray(n_succ).astype(bool).reshape(()))
                done = done | jnp.asarray(term).astype(bool).reshape(())
                return (inner, obs, rsum, done, succ), None

            init = (
                env_state.inner,
                jnp.zeros((self.spec.obs_dim,), self.spec.obs_dtype),  # replaced at sub-step 0
                jnp.zeros((), jnp.float32),
                jnp.zeros((), bool),
                jnp.zeros((), bool),
            )
            (inner, obs, reward, term, succ), _ = jax.lax.scan(
                body, init, jax.random.split(key, repeat)
            )
        t = env_state.t + 1
        truncated = t >= self.spec.episode_length
        return EnvState(inner=inner, t=t), StepOut(obs, reward, term, truncated, succ)

    # ----------------------------------------------------------------- helpers
    def _flat_obs(self, obs) -> jax.Array:
        return jnp.asarray(obs, self.spec.obs_dtype).reshape(self.spec.obs_dim)
