"""Brax adapter (brax 0.14.2).

The raw registry env (``brax.envs.get_environment(name)``) is used: no EpisodeWrapper, no
AutoResetWrapper. One simulator step is one ``env.step`` (which itself runs the env's
``n_frames`` physics steps). ``state.done`` (a float 0/1) is the termination; Brax envs
have no time limit of their own, the wrapper's T = ``episode_length // action_repeat``.

Action bounds: most Brax envs pass the action straight to the actuators, which clip it to
``sys.actuator.ctrl_range``; those bounds are used. Some envs (``inverted_pendulum``,
``humanoid``, ``humanoidstandup``, ``pusher`` in 0.14.2) rescale a [-1, 1] action onto
``ctrl_range`` inside their own ``step``; for those the env's bounds are [-1, 1]
(detected by ``ctrl_range`` appearing in the source of ``type(env).step``).
"""

from __future__ import annotations

import inspect

import jax
import numpy as np

from tdmpc2core.envs.base import Env, EnvSpec, fresh_dicts


def _rescales_internally(env) -> bool:
    try:
        return "ctrl_range" in inspect.getsource(type(env).step)
    except (OSError, TypeError):
        return False


class BraxEnv(Env):
    """A Brax environment behind the :class:`Env` interface.

    Args:
        env_id: a Brax registry name (checked by the suite, :mod:`tdmpc2core.envs.suites.brax`,
            before it builds this).
        suite: the name of the suite that builds it (``EnvSpec.suite``).
        can_terminate: whether the env can end an episode early with its default constructor
            arguments (its ``terminate_when_unhealthy``, when it has one, decides instead).
        action_repeat: simulator steps (``env.step`` calls) per agent step.
        episode_length: simulator steps per episode; T = episode_length // action_repeat.
        env_params: ``None`` or a dict of keyword arguments for the Brax env constructor
            (e.g. ``{"backend": "mjx"}``, ``{"terminate_when_unhealthy": False}``).

    Raises:
        ValueError: bad ``env_params``, or a non-flat observation.
    """

    def __init__(self, env_id: str, *, suite: str, can_terminate: bool, action_repeat: int = 1,
                 episode_length: int = 1000, env_params=None):
        if env_params is not None and not isinstance(env_params, dict):
            raise ValueError(
                f"env_params for Brax must be None or a dict of constructor kwargs, got "
                f"{type(env_params).__name__}"
            )
        kwargs = dict(env_params or {})
        from brax import envs as brax_envs  # lazy

        try:
            env = brax_envs.get_environment(env_id, **kwargs)
        except TypeError as e:
            raise ValueError(f"bad env_params for Brax env {env_id!r}: {e}") from None

        # Not env.observation_size: Brax computes it by running reset op by op (~10 s).
        obs = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs
        if not hasattr(obs, "shape") or len(obs.shape) != 1:
            raise ValueError(f"Brax env {env_id!r} has a non-flat observation")
        obs_size = obs.shape[0]
        action_dim = int(env.action_size)
        ctrl_range = None
        sys = getattr(env, "sys", None)
        if sys is not None and getattr(sys, "actuator", None) is not None:
            ctrl_range = np.asarray(sys.actuator.ctrl_range, np.float32).reshape(-1, 2)
        if ctrl_range is None or ctrl_range.shape[0] != action_dim or _rescales_internally(env):
            low = np.full((action_dim,), -1.0, np.float32)
            high = np.full((action_dim,), 1.0, np.float32)
        else:
            low, high = ctrl_range[:, 0], ctrl_range[:, 1]

        can_terminate = bool(can_terminate)
        if hasattr(env, "_terminate_when_unhealthy"):
            can_terminate = bool(env._terminate_when_unhealthy)

        T = episode_length // action_repeat
        self._env = env
        self._token = None if not kwargs else repr(sorted(kwargs.items()))
        from tdmpc2core.envs.params import canonical

        self._env_params = canonical(kwargs, env_id)
        self.spec = EnvSpec.from_bounds(
            env_id, suite, int(obs_size), low, high,
            action_repeat=action_repeat, episode_length=T,
            backend=None, can_terminate=can_terminate)

    @property
    def effective_settings(self) -> dict:
        """The simulator step in seconds (``dt``: the physics time step x ``n_frames``), the
        physics steps per simulator step (``n_frames``) and the physics pipeline (``backend``)."""
        from tdmpc2core.envs.params import plain

        env = self._env
        return {"dt": float(plain(env.dt)), "n_frames": int(getattr(env, "_n_frames", 1)),
                "backend": getattr(env, "backend", None)}

    @property
    def brax_env(self):
        """The underlying raw Brax environment."""
        return self._env

    def _raw_reset(self, key):
        state = self._env.reset(key)
        return state, state.obs

    def _raw_step(self, inner, env_action, key):
        del key  # Brax steps are deterministic
        state = self._env.step(fresh_dicts(inner), env_action)
        return state, state.obs, state.reward, jax.numpy.asarray(state.done) > 0.5

