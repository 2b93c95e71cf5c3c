"""The Playground suite: MuJoCo Playground 0.2.0's DM Control ports on MJX or Warp (pure JAX;
:mod:`tdmpc2core.envs.playground_env`).

The paper's protocol: action repeat 2, so 1000 simulator steps are T = 500 agent steps;
rewards in [0, 1] per simulator step. Its physics differ from dm_control's, so comparisons
with the published curves are approximate. ``env_params``: extra Playground config overrides,
``ctrl_dt``, ``sim_dt`` and a few more (:data:`tdmpc2core.envs.params.PLAYGROUND_KEYS`). :data:`PUBLISHED`: the 22 tasks with a published
curve -> the dm_control name of that curve.
"""
from __future__ import annotations

from tdmpc2core.envs.ids import PLAYGROUND_DMC_ENVS
from tdmpc2core.envs.params import check_playground
from tdmpc2core.envs.registry import Suite, SuiteReport
from tdmpc2core.resources import PLAYGROUND_TO_DMC

#: Playground DM Control task -> dm_control task name of its published curve
#: (tdmpc2core.resources, the one copy of the table)
PUBLISHED: dict[str, str] = PLAYGROUND_TO_DMC


def _build(env_id, *, action_repeat, episode_length, env_params, backend):
    from tdmpc2core.envs.playground_env import PlaygroundEnv

    return PlaygroundEnv(env_id, action_repeat=action_repeat, episode_length=episode_length,
                         env_params=env_params, backend=backend)


def _frames(env):
    from tdmpc2core.envs.render import _playground

    return _playground(env)


SUITE = Suite(
    name="playground",
    ids=PLAYGROUND_DMC_ENVS,
    build=_build,
    requires=("playground", "mujoco", "mujoco-mjx"),
    default_action_repeat=2,
    takes_backend=True,
    check_params=check_playground,
    published=PUBLISHED,
    report=SuiteReport(
        label="MuJoCo Playground (MJX)", version_package="playground", rank=1,
        comparison_note=("The DMC tasks run on MuJoCo Playground{tasks}, whose physics differ from "
                         "dm_control's: comparisons with the published curves are approximate."),
        reward_per_step=(0.0, 1.0)),
    frames=_frames,  # evaluation videos (tdmpc2core.envs.render._playground)
)
