"""The gymnax suite: gymnax 1.0.1's continuous-action ids (pure JAX; :mod:`tdmpc2core.envs.gymnax_env`).

Not in the paper: action repeat 1 by default, and each env keeps its own time limit
(``params.max_steps_in_episode``; an ``episode_length`` other than it is refused; ``env_params`` may set it).
Discrete-action ids are recognised and refused with the list of continuous ones.
``env_params``: fields of the env's ``EnvParams`` (:data:`tdmpc2core.envs.params.GYMNAX_PARAMS`).
"""
from __future__ import annotations

from typing import Optional

from tdmpc2core.envs.ids import GYMNAX_CONTINUOUS, GYMNAX_DISCRETE, GYMNAX_MAX_STEPS, discrete_error
from tdmpc2core.envs.params import GYMNAX_TIME_LIMIT_KEY, check_gymnax
from tdmpc2core.envs.registry import Suite, SuiteReport


def _build(env_id, *, action_repeat, episode_length, env_params, backend):
    from tdmpc2core.envs.gymnax_env import GymnaxEnv

    return GymnaxEnv(env_id, action_repeat=action_repeat, env_params=env_params)


def _refuse(env_id) -> Optional[ValueError]:
    return discrete_error(env_id) if env_id in GYMNAX_DISCRETE else None


def _frames(env):
    from tdmpc2core.envs.render import _gymnax

    return _gymnax(env)


SUITE = Suite(
    name="gymnax",
    ids=tuple(GYMNAX_CONTINUOUS),
    build=_build,
    requires=("gymnax",),
    default_action_repeat=1,
    own_time_limit=GYMNAX_MAX_STEPS,
    check_params=check_gymnax,
    time_limit_key=GYMNAX_TIME_LIMIT_KEY,
    refuse=_refuse,
    report=SuiteReport(label="gymnax", rank=2),
    frames=_frames,  # evaluation videos (tdmpc2core.envs.render._gymnax)
    frames_opengl=False,  # a Pillow drawing: no OpenGL context
)
