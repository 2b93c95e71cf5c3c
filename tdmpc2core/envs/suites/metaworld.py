"""The Meta-World suite: the paper's 50 Meta-World tasks, ``mw-*`` ids as the official TD-MPC2 code
names them, on Meta-World 3.0.0's v3 tasks (the paper: v2; docs/deviations.md E10) over mujoco 3.17
with a weld-reset compatibility layer (docs/metaworld.md), stepped on the host inside the compiled
program (:mod:`tdmpc2core.envs.metaworld_env`).

The paper's protocol: action repeat 2 (rewards summed), 100 agent steps per episode (the suite's
own time limit, 200 simulator steps: an ``episode_length`` other than 200 is refused, as is a
length past what Meta-World's simulator allows, :data:`~tdmpc2core.envs.domain_ids.MAX_PATH_LENGTH`), never terminated early, state
observations; the score is the success rate (``info['success']`` at an episode's last step,
``StepOut.success``). No ``env_params``. Published curves: the same ``mw-<name>``.
"""
from __future__ import annotations

from typing import Mapping

from tdmpc2core.envs.domain_ids import DOMAIN_EPISODE_STEPS, MAX_PATH_LENGTH, METAWORLD_ENVS  # noqa: F401
from tdmpc2core.envs.params import canonical
from tdmpc2core.envs.registry import Suite, SuiteReport

#: the distributions the suite needs beyond the core ones (the [metaworld] extra pins them)
REQUIRES = ("metaworld",)
ACTION_REPEAT = 2


def _check_params(env_id: str, env_params: Mapping) -> dict:
    params = canonical(env_params, env_id)
    if params:
        raise ValueError(f"env_params={params!r} for {env_id!r}: Meta-World tasks take none (the official "
                         "construction, <name>-v3-goal-observable with a new goal each episode, is the "
                         "protocol); pass env_params=None")
    return params


def _build(env_id, *, action_repeat, episode_length, env_params, backend):
    if env_params:
        raise ValueError(f"env_params={env_params!r}: Meta-World tasks take none; pass env_params=None")
    from tdmpc2core.envs.metaworld_env import MetaWorldEnv

    # episode_length: the suite's own limit in effect (Suite.sim_episode_length)
    return MetaWorldEnv(env_id, suite=SUITE.name, action_repeat=action_repeat, episode_length=episode_length)


def _frames(env):
    """The evaluation videos' renderer: ``mujoco.Renderer`` on the host simulator's model
    (:func:`tdmpc2core.envs.render.host_mujoco_source`)."""
    from tdmpc2core.envs.render import host_mujoco_source

    return host_mujoco_source(env)


SUITE = Suite(
    name="metaworld",
    ids=METAWORLD_ENVS,
    build=_build,
    requires=REQUIRES,
    pip_extra="metaworld",
    default_action_repeat=ACTION_REPEAT,
    own_time_limit={i: DOMAIN_EPISODE_STEPS * ACTION_REPEAT for i in METAWORLD_ENVS},
    check_params=_check_params,
    published={i: i for i in METAWORLD_ENVS},
    report=SuiteReport(
        label="Meta-World", version_package="metaworld", rank=4, score="success",
        comparison_note=("The Meta-World tasks run Meta-World 3's v3 tasks (the paper: v2) on MuJoCo 3.17 with a "
                         "compatibility layer for the weld reset (docs/metaworld.md): comparisons with the "
                         "published curves are approximate; the score is the success rate.")),
    frames=_frames,  # evaluation videos
)
