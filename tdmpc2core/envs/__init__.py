"""One environment interface over the registered suites: gymnax, Brax, MuJoCo Playground (DMC)
and dm_control today (:mod:`tdmpc2core.envs.registry`, :mod:`tdmpc2core.envs.suites`).

Usage::

    env = make_env("CartpoleBalance", action_repeat=2, episode_length=1000)
    state, obs = env.reset(key)                       # obs: f32[env.spec.obs_dim]
    state, out = env.step(state, action, key)         # action: f32[action_dim] in [-1, 1]
    done = out.terminated | out.truncated             # no auto-reset: caller resets

``reset``/``step`` are jittable and vmappable (pure JAX for gymnax, Brax and Playground; a
host callback for dm_control, :mod:`tdmpc2core.envs.dmcontrol_env`); ``Env`` objects are
hashable. Importing this package is cheap and imports no JAX: the ids, :func:`suite_of`,
:func:`suite_for` and :func:`time_limit` are plain Python (:mod:`tdmpc2core.envs.ids`, the
registry); JAX and a suite's packages are imported by :func:`make_env` and on first use of
``Env``, ``EnvSpec``, ``EnvState`` or ``StepOut``. See :mod:`tdmpc2core.envs.base` for the step
semantics (units, action mapping, action repeat, time limit).
"""

from __future__ import annotations

# plain Python: the ids, their suites and time limits (no JAX; :mod:`.ids`, :mod:`.registry`)
from tdmpc2core.envs.ids import (check_env_params, check_repeat_and_length, default_action_repeat, list_env_ids,
                                 sim_episode_length, suite_of, time_limit)
from tdmpc2core.envs.registry import (Suite, SuiteReport, register_builtin, register_suite, report_facts, suite_for,
                                      suites)
from tdmpc2core.envs.suites import BUILTIN

# the built-in suites, registered before anything can ask the registry: this runs before any
# module of the package is imported (the registry itself imports no suite)
register_builtin(BUILTIN)

__all__ = [
    "Env",
    "EnvSpec",
    "EnvState",
    "StepOut",
    "make_env",
    "list_env_ids",
    "suite_of",
    "suite_for",
    "suites",
    "register_suite",
    "report_facts",
    "Suite",
    "SuiteReport",
    "time_limit",
    "sim_episode_length",
    "check_env_params",
    "default_action_repeat",
    "PAPER_ACTION_REPEAT",
]

_BASE_NAMES = ("Env", "EnvSpec", "EnvState", "StepOut")


def __getattr__(name):  # lazy: the environment interface imports JAX; the tables follow the registry
    if name in _BASE_NAMES:
        from tdmpc2core.envs import base

        return getattr(base, name)
    if name in ("SUITES", "PAPER_ACTION_REPEAT"):
        from tdmpc2core.envs import ids

        return getattr(ids, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_env(env_id: str, *, action_repeat: int | None = None, episode_length: int | None = None,
             env_params=None, backend: str | None = None, obs: str = "state") -> Env:
    """Build an :class:`Env` for ``env_id``, by the suite that owns the id (:func:`suite_for`).

    Args:
        env_id: a gymnax continuous-action id (``"Pendulum-v1"``), a Brax name
            (``"inverted_pendulum"``), a Playground DM Control name
            (``"CartpoleBalance"``), a dm_control id (``"dmc:cheetah-run"``) or an id of a suite
            registered at run time; see :func:`list_env_ids`.
        action_repeat: simulator steps per agent step (int >= 1); None: the paper's for the
            suite (:func:`default_action_repeat`: 2 for DM Control, Playground's ports and
            dm_control alike, so the default ``episode_length`` of 1000 gives the paper's
            T = 500; 1 for gymnax and Brax).
        episode_length: simulator steps per episode, so the time limit is
            T = ``episode_length // action_repeat`` agent steps (must be divisible by
            ``action_repeat``; dm_control: control steps, 1000 for every suite task); None
            (default): 1000. A suite that keeps its own time limit (``own_time_limit``: gymnax's
            ``params.max_steps_in_episode``, Meta-World's 200 and MyoSuite's 100 simulator
            steps) sets T = that limit ``// action_repeat``; there ``episode_length`` may be
            left out or given as that limit, and any other value is refused (it would not take
            effect; gymnax: change the limit with ``env_params={"max_steps_in_episode": N}``).
            ``env.spec.sim_episode_length`` is the value in effect.
        env_params: suite-specific environment settings (:mod:`tdmpc2core.envs.params`):
            gymnax ``EnvParams`` (or a dict of fields to replace); Brax constructor kwargs
            (dict); Playground extra ``config_overrides`` (dict: ``ctrl_dt``, ``sim_dt``,
            ...); dm_control: none (``None`` or ``{}``). ``None`` = defaults. A dict is
            checked first (:func:`check_env_params`); the env records its settings as
            ``env.env_params`` (plain data: what rebuilds it) and the values in effect as
            ``env.effective_settings``.
        backend: Playground physics implementation (``"jax"`` = MJX, the default, or
            ``"warp"``); must be ``None`` for the suites that take none (pick Brax's
            pipeline with ``env_params={"backend": ...}``).
        obs: ``"state"`` (default: flat float32 observations) or ``"rgb"`` (pixels, dm_control
            ids only, as the official code: uint8 [9 * 64 * 64] frame stacks, spec §2 "Pixels";
            :class:`tdmpc2core.envs.dmcontrol_env.DMControlEnv`).

    Returns:
        An :class:`Env`; ``env.spec`` describes it.

    Raises:
        ValueError: unknown id (lists accepted ids), discrete-action gymnax id (lists the
            continuous ones), ``action_repeat < 1``, ``episode_length`` not a positive
            multiple of ``action_repeat`` (Brax/Playground/dm_control) or not the time limit
            of a suite that keeps its own (named), ``backend`` given
            for a non-Playground env, or bad ``env_params`` (an unknown key, a value of the
            wrong type).
        ImportError: a package the suite needs is not installed (one line: which, and the
            pip command).
    """
    return suite_for(env_id).make(env_id, action_repeat=action_repeat, episode_length=episode_length,
                                  env_params=env_params, backend=backend, obs=obs)
