"""One pure-JAX environment interface over gymnax, Brax and MuJoCo Playground (DMC).

Usage::

    env = make_env("CartpoleBalance", action_repeat=2, episode_length=1000)
    state, obs = env.reset(key)                       # obs: f32[env.spec.obs_dim]
    state, out = env.step(state, action, key)         # action: f32[action_dim] in [-1, 1]
    done = out.terminated | out.truncated             # no auto-reset: caller resets

``reset``/``step`` are jittable and vmappable; ``Env`` objects are hashable. Importing this
package is cheap: the suites are imported inside :func:`make_env`. See
:mod:`tdmpc2core.envs.base` for the step semantics (units, action mapping, action
repeat, time limit).
"""

from __future__ import annotations

import difflib

from tdmpc2core.envs.base import SUITES, Env, EnvSpec, EnvState, StepOut, check_repeat_and_length
from tdmpc2core.envs.brax_env import BRAX_ENVS
from tdmpc2core.envs.gymnax_env import GYMNAX_CONTINUOUS, GYMNAX_DISCRETE, discrete_error
from tdmpc2core.envs.playground_env import PLAYGROUND_DMC_ENVS

__all__ = [
    "Env",
    "EnvSpec",
    "EnvState",
    "StepOut",
    "make_env",
    "list_env_ids",
    "suite_of",
    "default_action_repeat",
    "PAPER_ACTION_REPEAT",
]

#: The paper's action repeat per suite (spec §2): DMC tasks (Playground's DM Control ports)
#: repeat each action twice, so their 1000-step episodes are T = 500 agent steps; gymnax and
#: Brax tasks are not in the paper and take 1.
PAPER_ACTION_REPEAT = {"gymnax": 1, "brax": 1, "playground": 2}


def default_action_repeat(env_id: str) -> int:
    """The action repeat ``make_env`` uses when none is given: 2 for the DM Control tasks (the
    paper's protocol, spec §2), 1 for gymnax and Brax.

    Raises:
        ValueError: unknown or discrete-action id.
    """
    return PAPER_ACTION_REPEAT[suite_of(env_id)]


def list_env_ids() -> dict[str, list[str]]:
    """Accepted ids per suite: ``{"gymnax": [...], "brax": [...], "playground": [...]}``.

    gymnax: continuous-action ids of gymnax 1.0.1; brax: brax 0.14.2 registry names with
    flat observations; playground: every MuJoCo Playground DM Control suite task.
    """
    return {
        "gymnax": list(GYMNAX_CONTINUOUS),
        "brax": list(BRAX_ENVS),
        "playground": list(PLAYGROUND_DMC_ENVS),
    }


def suite_of(env_id: str) -> str:
    """Suite name of an accepted id (no import of the suite).

    Raises:
        ValueError: discrete gymnax id or unknown id (message lists the accepted ids).
    """
    if env_id in GYMNAX_CONTINUOUS:
        return "gymnax"
    if env_id in BRAX_ENVS:
        return "brax"
    if env_id in PLAYGROUND_DMC_ENVS:
        return "playground"
    if env_id in GYMNAX_DISCRETE:
        raise discrete_error(env_id)
    ids = list_env_ids()
    every = [i for suite in SUITES for i in ids[suite]]
    close = difflib.get_close_matches(str(env_id), every, n=3)
    hint = f" Did you mean {close}?" if close else ""
    listing = "; ".join(f"{suite}: {ids[suite]}" for suite in SUITES)
    raise ValueError(f"unknown env id {env_id!r}.{hint} Accepted ids per suite: {listing}")


def make_env(env_id: str, *, action_repeat: int | None = None, episode_length: int = 1000,
             env_params=None, backend: str | None = None) -> Env:
    """Build an :class:`Env` for ``env_id``, dispatching on the id.

    Args:
        env_id: a gymnax continuous-action id (``"Pendulum-v1"``), a Brax name
            (``"inverted_pendulum"``) or a Playground DM Control name
            (``"CartpoleBalance"``); see :func:`list_env_ids`.
        action_repeat: simulator steps per agent step (int >= 1); None: the paper's for the
            suite (:func:`default_action_repeat`: 2 for DM Control, so the default
            ``episode_length`` of 1000 gives the paper's T = 500; 1 for gymnax and Brax).
        episode_length: simulator steps per episode, so the time limit is
            T = ``episode_length // action_repeat`` agent steps (must be divisible by
            ``action_repeat``). IGNORED for gymnax, whose time limit is the env's own
            ``params.max_steps_in_episode`` simulator steps
            (T = ``max_steps_in_episode // action_repeat``, rounded down).
        env_params: suite-specific: gymnax ``EnvParams`` (or a dict of fields to
            replace); Brax constructor kwargs (dict); Playground extra
            ``config_overrides`` (dict). ``None`` = defaults.
        backend: Playground physics implementation (``"jax"`` = MJX, the default, or
            ``"warp"``); must be ``None`` for gymnax and Brax (pick Brax's pipeline
            with ``env_params={"backend": ...}``).

    Returns:
        An :class:`Env`; ``env.spec`` describes it.

    Raises:
        ValueError: unknown id (lists accepted ids), discrete-action gymnax id (lists the
            continuous ones), ``action_repeat < 1``, ``episode_length`` not a positive
            multiple of ``action_repeat`` (Brax/Playground), ``backend`` given for a
            non-Playground env, or bad ``env_params``.
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
    if suite == "brax":
        from tdmpc2core.envs.brax_env import BraxEnv

        return BraxEnv(env_id, action_repeat=action_repeat, episode_length=episode_length,
                       env_params=env_params)
    from tdmpc2core.envs.playground_env import PlaygroundEnv

    return PlaygroundEnv(env_id, action_repeat=action_repeat, episode_length=episode_length,
                         env_params=env_params, backend=backend)
