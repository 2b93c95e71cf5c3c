"""The MyoSuite suite: the paper's ten MyoSuite hand tasks, ``myo-*`` ids as the official TD-MPC2
code names them (myosuite 3.0.0 on mujoco 3.17, stepped on the host inside the compiled program;
:mod:`tdmpc2core.envs.myosuite_env`).

The paper's protocol: no action repeat, 100 agent steps per episode (the suite's own time limit:
an ``episode_length`` other than 100 is refused), never terminated early; the score is the success rate
(``info['solved']`` at an episode's last step, ``StepOut.success``). No ``env_params``.
Published curves: ``myo-hand-<name>``.
"""
from __future__ import annotations

from typing import Mapping

from tdmpc2core.envs.domain_ids import DOMAIN_EPISODE_STEPS, MYOSUITE_ENVS, MYOSUITE_PUBLISHED
from tdmpc2core.envs.params import canonical
from tdmpc2core.envs.registry import Suite, SuiteReport

#: the distributions the suite needs beyond the core ones (the [myosuite] extra pins them)
REQUIRES = ("myosuite", "myo-sim")


def _check_params(env_id: str, env_params: Mapping) -> dict:
    params = canonical(env_params, env_id)
    if params:
        raise ValueError(f"env_params={params!r} for {env_id!r}: MyoSuite tasks take none (the official "
                         "construction, MyoSuite's registry env, is the protocol); pass env_params=None")
    return params


def _build(env_id, *, action_repeat, episode_length, env_params, backend):
    if env_params:
        raise ValueError(f"env_params={env_params!r}: MyoSuite tasks take none; pass env_params=None")
    from tdmpc2core.envs.myosuite_env import MyoSuiteEnv

    # episode_length: the suite's own limit in effect (Suite.sim_episode_length)
    return MyoSuiteEnv(env_id, suite=SUITE.name, action_repeat=action_repeat, episode_length=episode_length)


def _frames(env):
    """The evaluation videos' renderer: ``mujoco.Renderer`` on the host simulator's model
    (:func:`tdmpc2core.envs.render.host_mujoco_source`)."""
    from tdmpc2core.envs.render import host_mujoco_source

    return host_mujoco_source(env)


SUITE = Suite(
    name="myosuite",
    ids=MYOSUITE_ENVS,
    build=_build,
    requires=REQUIRES,
    pip_extra="myosuite",
    default_action_repeat=1,
    own_time_limit={i: DOMAIN_EPISODE_STEPS for i in MYOSUITE_ENVS},
    check_params=_check_params,
    published=MYOSUITE_PUBLISHED,
    report=SuiteReport(
        label="MyoSuite", version_package="myosuite", rank=5, score="success",
        comparison_note=("The MyoSuite tasks run on MyoSuite 3.0.0 (the paper used an earlier release) with the "
                         "official wrapper's conventions; the score is the success rate.")),
    frames=_frames,  # evaluation videos
)
