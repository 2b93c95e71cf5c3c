"""MuJoCo Playground DM Control suite adapter (playground 0.2.0).

Loaded with ``registry.load(name, config_overrides={"impl": backend, "action_repeat": 1,
"episode_length": <huge>})``. The raw Playground env neither repeats actions nor ends
episodes by time itself (those config keys are read only by Playground's training
wrappers), but both are pinned anyway so that nothing downstream can apply them twice; the
wrapper here does the action repeat and the time limit. ``ctrl_dt`` / ``sim_dt`` are the
task's own unless ``env_params`` sets them: one simulator step here is one Playground control
step (``ctrl_dt`` seconds, i.e. ``ctrl_dt / sim_dt`` MuJoCo steps), the unit of DMC's
1000-step episodes.

Termination: the DMC tasks never terminate. Their ``state.done`` only flags a NaN in
``qpos``/``qvel`` (a physics blow-up), which the caller detects as a non-finite
observation, so ``terminated`` is always False and ``spec.can_terminate`` is False.

Backend: ``"jax"`` (MJX) by default on every platform; Playground's own default
(``"warp"``) was slow on CPU and is untested under vmap inside ``lax.scan``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tdmpc2core.envs.base import Env, EnvSpec, fresh_dicts

DEFAULT_BACKEND = "jax"

_NEVER = 10**9  # Playground episode_length: never reached
_RESERVED = ("impl", "action_repeat", "episode_length")


class PlaygroundEnv(Env):
    """A MuJoCo Playground DM Control task behind the :class:`Env` interface.

    Args:
        env_id: a Playground DM Control task (checked by the suite,
            :mod:`tdmpc2core.envs.suites.playground`, before it builds this).
        suite: the name of the suite that builds it (``EnvSpec.suite``).
        action_repeat: simulator (control) steps per agent step; the paper's 2 by default
            (spec §2: T = 1000 / 2 = 500 agent steps).
        episode_length: simulator steps per episode; T = episode_length // action_repeat.
        env_params: ``None`` or a dict of extra Playground ``config_overrides`` (e.g.
            ``{"ctrl_dt": 0.02}``); it may not set ``impl``, ``action_repeat``,
            ``episode_length`` (use the ``backend`` / ``make_env`` arguments) nor enable
            vision.
        backend: physics implementation, ``"jax"`` (MJX, default) or ``"warp"``.

    Raises:
        ValueError: bad ``env_params`` / ``backend``, or a non-flat observation.
    """

    def __init__(self, env_id: str, *, suite: str, action_repeat: int = 2, episode_length: int = 1000,
                 env_params=None, backend: str | None = None):
        backend = DEFAULT_BACKEND if backend is None else backend
        if not isinstance(backend, str) or not backend:
            raise ValueError(f"backend must be a string such as 'jax' or 'warp', got {backend!r}")
        if env_params is not None and not isinstance(env_params, dict):
            raise ValueError(
                f"env_params for Playground must be None or a dict of config overrides, got "
                f"{type(env_params).__name__}"
            )
        extra = dict(env_params or {})
        bad = [k for k in extra if k in _RESERVED]
        if bad:
            raise ValueError(
                f"env_params may not override {bad}: the wrapper owns action repeat and the "
                f"time limit, and the physics impl is chosen with backend="
            )
        if extra.get("vision"):
            raise ValueError("vision observations are not supported (state observations only)")

        from mujoco_playground import registry  # lazy: ~5 s

        default_cfg = registry.get_default_config(env_id)
        overrides = {"impl": backend}
        if "action_repeat" in default_cfg:
            overrides["action_repeat"] = 1
        if "episode_length" in default_cfg:
            overrides["episode_length"] = _NEVER
        overrides.update(extra)
        try:
            env = registry.load(env_id, config_overrides=overrides)
        except (KeyError, AttributeError, TypeError) as e:
            raise ValueError(f"bad env_params for Playground env {env_id!r}: {e}") from None

        obs = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs
        if not hasattr(obs, "shape") or len(obs.shape) != 1:
            raise ValueError(f"Playground env {env_id!r} has a non-flat observation")
        action_dim = int(env.action_size)

        mj = env.mj_model
        low = np.full((action_dim,), -1.0, np.float32)
        high = np.full((action_dim,), 1.0, np.float32)
        if mj.nu == action_dim:
            limited = np.asarray(mj.actuator_ctrllimited, bool).reshape(-1)
            rng = np.asarray(mj.actuator_ctrlrange, np.float32).reshape(-1, 2)
            low = np.where(limited, rng[:, 0], low)
            high = np.where(limited, rng[:, 1], high)

        T = episode_length // action_repeat
        self._env = env
        self._token = None if not extra else repr(sorted(extra.items()))
        from tdmpc2core.envs.params import canonical

        self._env_params = canonical(extra, env_id)
        self.spec = EnvSpec.from_bounds(
            env_id, suite, int(obs.shape[0]), low, high,
            action_repeat=action_repeat, episode_length=T,
            backend=backend, can_terminate=False)

    @property
    def effective_settings(self) -> dict:
        """``ctrl_dt`` and ``sim_dt`` (seconds) in effect, the MuJoCo steps per control step
        (``n_substeps``) and the physics implementation (``impl``)."""
        env = self._env
        return {"ctrl_dt": float(env.dt), "sim_dt": float(env.sim_dt), "n_substeps": int(env.n_substeps),
                "impl": self.spec.backend}

    @property
    def playground_env(self):
        """The underlying Playground environment."""
        return self._env

    def _raw_reset(self, key):
        state = self._env.reset(key)
        return state, state.obs

    def _raw_step(self, inner, env_action, key):
        del key  # Playground keeps its own rng in state.info
        state = self._env.step(fresh_dicts(inner), env_action)
        # DMC `done` only flags NaN physics; see module docstring.
        return state, state.obs, state.reward, jnp.zeros((), bool)

