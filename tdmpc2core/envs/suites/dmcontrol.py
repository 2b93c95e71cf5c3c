"""The dm_control suite: dm_control 1.0.50's tasks and the official custom ones, named ``dmc:`` +
the official TD-MPC2 name (a host callback; :mod:`tdmpc2core.envs.dmcontrol_env`).

The paper's simulator and protocol: action repeat 2 (1000 control steps = T 500), rewards in
[0, 1] per control step, the official wrapper's conventions, so comparisons with the
published curves are like for like. A ``dmc:`` id that is not accepted is refused with the
reason (:mod:`tdmpc2core.envs.dmcontrol_ids`). No ``env_params``: the official construction is
the protocol (:data:`tdmpc2core.envs.params.DMCONTROL_NONE`).
"""
from __future__ import annotations

from typing import Optional

from tdmpc2core.envs.dmcontrol_ids import DMCONTROL_ENVS, PREFIX, dmc_name, unknown_id_error
from tdmpc2core.envs.params import check_dmcontrol
from tdmpc2core.envs.registry import Suite, SuiteReport


def _build(env_id, *, action_repeat, episode_length, env_params, backend, obs="state"):
    if env_params:  # a mapping was refused by check_params already; anything else is refused here
        raise ValueError(f"env_params={env_params!r}: dm_control tasks take none (the official "
                         "construction is used); pass env_params=None")
    from tdmpc2core.envs.dmcontrol_env import DMControlEnv

    return DMControlEnv(env_id, action_repeat=action_repeat, episode_length=episode_length, obs=obs)


def _refuse(env_id) -> Optional[ValueError]:
    return unknown_id_error(env_id) if isinstance(env_id, str) and env_id.startswith(PREFIX) else None


def _frames(env):
    from tdmpc2core.envs.render import _dmcontrol

    return _dmcontrol(env)


SUITE = Suite(
    name="dmcontrol",
    ids=DMCONTROL_ENVS,
    build=_build,
    requires=("dm-control", "mujoco"),
    default_action_repeat=2,
    refuse=_refuse,
    obs_types=("state", "rgb"),
    check_params=check_dmcontrol,
    published={i: dmc_name(i) for i in DMCONTROL_ENVS},
    report=SuiteReport(
        label="dm_control", version_package="dm-control", rank=0,
        comparison_note=("The dm_control tasks run on dm_control itself, the paper's simulator, with the "
                         "official wrapper's conventions: comparisons with the published curves are like "
                         "for like (our seeds and random streams are our own)."),
        reward_per_step=(0.0, 1.0)),
    frames=_frames,  # evaluation videos (tdmpc2core.envs.render._dmcontrol)
)
