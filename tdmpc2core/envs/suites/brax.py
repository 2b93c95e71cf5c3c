"""The Brax suite: Brax 0.14.2 registry envs with flat observations (pure JAX;
:mod:`tdmpc2core.envs.brax_env`). Not in the paper: action repeat 1 by default; Brax's physics
pipeline is chosen with ``env_params={"backend": ...}``, not ``backend``; ``env_params`` are the
env constructor's keyword arguments (:data:`tdmpc2core.envs.params.BRAX_PARAMS`).
"""
from __future__ import annotations

from tdmpc2core.envs.ids import BRAX_ENVS
from tdmpc2core.envs.params import check_brax
from tdmpc2core.envs.registry import Suite, SuiteReport


def _build(env_id, *, action_repeat, episode_length, env_params, backend):
    from tdmpc2core.envs.brax_env import BraxEnv

    return BraxEnv(env_id, action_repeat=action_repeat, episode_length=episode_length, env_params=env_params)


def _frames(env):
    from tdmpc2core.envs.render import _brax

    return _brax(env)


SUITE = Suite(
    name="brax",
    ids=tuple(BRAX_ENVS),
    build=_build,
    requires=("brax", "mujoco", "mujoco-mjx"),
    default_action_repeat=1,
    check_params=check_brax,
    backend_hint=" (choose Brax's pipeline with env_params={'backend': ...})",
    report=SuiteReport(label="Brax", rank=3),
    frames=_frames,  # evaluation videos (tdmpc2core.envs.render._brax)
)
