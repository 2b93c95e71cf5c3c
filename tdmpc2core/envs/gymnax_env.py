"""gymnax adapter (gymnax 1.0.1).

Only gymnax environments with a continuous (Box) action space are accepted; the id tables
are the suite's (:mod:`tdmpc2core.envs.suites.gymnax`, which builds this adapter and tells it
its suite's name and whether the id can terminate; it checked the id first).

Semantics:

* One simulator step is one ``env.step_env`` call (gymnax's step without its auto-reset).
* The time limit is the env's ``params.max_steps_in_episode`` (in simulator steps);
  T = ``max_steps_in_episode // action_repeat`` agent steps. ``make_env`` refuses an
  ``episode_length`` other than that limit (:meth:`tdmpc2core.envs.registry.Suite.sim_episode_length`).
* ``step_env`` never applies gymnax's time limit (only ``Environment.step`` does, via
  ``is_truncated``). ``terminated`` is ``env.is_terminal(state, params')`` with
  ``params'.max_steps_in_episode`` set huge, so the time limit cannot leak into it even
  in gymnax versions whose ``is_terminal`` folds it in (1.0.1's does not).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from tdmpc2core.envs.base import Env, EnvSpec

_NO_LIMIT = 2**30  # max_steps_in_episode used only to compute `terminated`


class GymnaxEnv(Env):
    """A continuous-action gymnax environment behind the :class:`Env` interface.

    Args:
        env_id: a continuous-action gymnax id (checked by the suite before it builds this).
        suite: the name of the suite that builds it (``EnvSpec.suite``).
        can_terminate: whether the env has a true terminal state.
        action_repeat: simulator steps per agent step (>= 1).
        env_params: ``None`` (the env's ``default_params``), an instance of the env's
            ``EnvParams``, or a dict of fields to replace in the default params
            (``env_params`` records the dict, or an instance's fields that differ from the
            defaults).

    Raises:
        ValueError: a discrete action space, bad ``env_params``, or a time limit shorter
            than ``action_repeat``.
    """

    def __init__(self, env_id: str, *, suite: str, can_terminate: bool, action_repeat: int = 1, env_params=None):
        import gymnax  # lazy: pulls in gymnasium and matplotlib

        from tdmpc2core.envs.params import canonical, gymnax_record

        env, default_params = gymnax.make(env_id)
        if env_params is None:
            params = default_params
            token = None
            record = {}
        elif isinstance(env_params, dict):
            try:
                params = default_params.replace(**env_params)
            except TypeError as e:
                raise ValueError(
                    f"bad env_params for {env_id!r}: {e}; fields: "
                    f"{sorted(f.name for f in dataclasses.fields(default_params))}"
                ) from None
            token = repr(params)
            record = canonical(env_params, env_id)
        elif isinstance(env_params, type(default_params)):
            params = env_params
            token = repr(params)
            record = gymnax_record(params, default_params)
        else:
            raise ValueError(
                f"env_params for {env_id!r} must be None, a dict of fields, or a "
                f"{type(default_params).__name__}; got {type(env_params).__name__}"
            )

        space = env.action_space(params)
        if type(space).__name__ != "Box":  # belt and braces; the suite's tables say Box
            raise ValueError(f"gymnax env {env_id!r} has a discrete action space; TD-MPC2 needs continuous actions")
        shape = tuple(space.shape)
        action_dim = math.prod(shape)
        low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), (action_dim,))
        high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), (action_dim,))

        max_steps = int(params.max_steps_in_episode)
        T = max_steps // action_repeat
        if T < 1:
            raise ValueError(
                f"{env_id!r}: max_steps_in_episode={max_steps} is shorter than "
                f"action_repeat={action_repeat}"
            )

        self._env = env
        self._params = params
        self._params_no_limit = params.replace(max_steps_in_episode=_NO_LIMIT)
        self._action_shape = shape
        self._token = token
        self._env_params = record
        obs_shape = jax.eval_shape(lambda k: env.reset_env(k, params)[0], jax.random.PRNGKey(0))
        obs_dim = math.prod(obs_shape.shape)
        self.spec = EnvSpec.from_bounds(
            env_id, suite, obs_dim, low, high,
            action_repeat=action_repeat, episode_length=T,
            backend=None, can_terminate=bool(can_terminate))

    @property
    def effective_settings(self) -> dict:
        """Every field of the ``EnvParams`` in use, as plain data."""
        from tdmpc2core.envs.params import plain

        return {f.name: plain(getattr(self._params, f.name)) for f in dataclasses.fields(self._params)}

    @property
    def gymnax_env(self):
        """The underlying gymnax environment object."""
        return self._env

    @property
    def gymnax_params(self):
        """The gymnax ``EnvParams`` in use."""
        return self._params

    def _raw_reset(self, key):
        obs, state = self._env.reset_env(key, self._params)
        return state, obs

    def _raw_step(self, inner, env_action, key):
        action = env_action.reshape(self._action_shape)
        obs, state, reward, _done, _info = self._env.step_env(key, inner, action, self._params)
        terminated = self._env.is_terminal(state, self._params_no_limit)
        return state, obs, reward, terminated

