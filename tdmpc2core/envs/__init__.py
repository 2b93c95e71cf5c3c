"""One environment interface over gymnax, Brax, MuJoCo Playground (DMC) and dm_control.

Usage::

    env = make_env("CartpoleBalance", action_repeat=2, episode_length=1000)
    state, obs = env.reset(key)                       # obs: f32[env.spec.obs_dim]
    state, out = env.step(state, action, key)         # action: f32[action_dim] in [-1, 1]
    done = out.terminated | out.truncated             # no auto-reset: caller resets

``reset``/``step`` are jittable and vmappable (pure JAX for gymnax, Brax and Playground; a
host callback for dm_control, :mod:`tdmpc2core.envs.dmcontrol_env`); ``Env`` objects are
hashable. Importing this
package is cheap and imports no JAX: the ids, :func:`suite_of` and :func:`time_limit`
are plain Python (:mod:`tdmpc2core.envs.ids`); JAX and the suites are imported by
:func:`make_env` and on first use of ``Env``, ``EnvSpec``, ``EnvState`` or ``StepOut``. See
:mod:`tdmpc2core.envs.base` for the step semantics (units, action mapping, action
repeat, time limit).
"""

from __future__ import annotations

# plain Python: the ids, their suites and time limits (no JAX; :mod:`.ids`)
from tdmpc2core.envs.ids import (PAPER_ACTION_REPEAT, SUITES, check_repeat_and_length, default_action_repeat,
                                 list_env_ids, suite_of, time_limit)

__all__ = [
    "Env",
    "EnvSpec",
    "EnvState",
    "StepOut",
    "make_env",
    "list_env_ids",
    "suite_of",
    "time_limit",
    "default_action_repeat",
    "PAPER_ACTION_REPEAT",
]

_BASE_NAMES = ("Env", "EnvSpec", "EnvState", "StepOut")


def __getattr__(name):  # lazy: the environment interface imports JAX
    if name in _BASE_NAMES:
        from tdmpc2core.envs import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_env(env_id: str, *, action_repeat: int | None = None, episode_length: int = 1000,
             env_params=None, backend: str | None = None) -> Env:
    """Build an :class:`Env` for ``env_id``, dispatching on the id.

    Args:
        env_id: a gymnax continuous-action id (``"Pendulum-v1"``), a Brax name
            (``"inverted_pendulum"``), a Playground DM Control name
            (``"CartpoleBalance"``) or a dm_control id (``"dmc:cheetah-run"``); see
            :func:`list_env_ids`.
        action_repeat: simulator steps per agent step (int >= 1); None: the paper's for the
            suite (:func:`default_action_repeat`: 2 for DM Control, Playground's ports and
            dm_control alike, so the default ``episode_length`` of 1000 gives the paper's
            T = 500; 1 for gymnax and Brax).
        episode_length: simulator steps per episode, so the time limit is
            T = ``episode_length // action_repeat`` agent steps (must be divisible by
            ``action_repeat``; dm_control: control steps, 1000 for every suite task).
            IGNORED for gymnax, whose time limit is the env's own
            ``params.max_steps_in_episode`` simulator steps
            (T = ``max_steps_in_episode // action_repeat``, rounded down).
        env_params: suite-specific: gymnax ``EnvParams`` (or a dict of fields to
            replace); Brax constructor kwargs (dict); Playground extra
            ``config_overrides`` (dict); dm_control: must be ``None``. ``None`` = defaults.
        backend: Playground physics implementation (``"jax"`` = MJX, the default, or
            ``"warp"``); must be ``None`` for gymnax and Brax (pick Brax's pipeline
            with ``env_params={"backend": ...}``).

    Returns:
        An :class:`Env`; ``env.spec`` describes it.

    Raises:
        ValueError: unknown id (lists accepted ids), discrete-action gymnax id (lists the
            continuous ones), ``action_repeat < 1``, ``episode_length`` not a positive
            multiple of ``action_repeat`` (Brax/Playground/dm_control), ``backend`` given
            for a non-Playground env, or bad ``env_params``.
    """
    suite = suite_of(env_id)
    if action_repeat is None:
        action_repeat = PAPER_ACTION_REPEAT[suite]
    check_repeat_and_length(action_repeat, episode_length, check_length=suite != "gymnax")
    if backend is not None and suite != "playground":
        raise ValueError(
            f"backend={backend!r} applies only to Playground envs; {env_id!r} is a {suite} "
            "env" + (" (choose Brax's pipeline with env_params={'backend': ...})"
                     if suite == "brax" else "")
        )
    if suite == "gymnax":
        from tdmpc2core.envs.gymnax_env import GymnaxEnv

        return GymnaxEnv(env_id, action_repeat=action_repeat, env_params=env_params)
    if suite == "dmcontrol":
        if env_params is not None:
            raise ValueError(f"env_params={env_params!r}: dm_control tasks take none (the official "
                             "construction is used); pass env_params=None")
        from tdmpc2core.envs.dmcontrol_env import DMControlEnv

        return DMControlEnv(env_id, action_repeat=action_repeat, episode_length=episode_length)
    if suite == "brax":
        from tdmpc2core.envs.brax_env import BraxEnv

        return BraxEnv(env_id, action_repeat=action_repeat, episode_length=episode_length,
                       env_params=env_params)
    from tdmpc2core.envs.playground_env import PlaygroundEnv

    return PlaygroundEnv(env_id, action_repeat=action_repeat, episode_length=episode_length,
                         env_params=env_params, backend=backend)
