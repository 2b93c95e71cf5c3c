"""The dm_control suite: dm_control 1.0.50's tasks and the official custom ones, named ``dmc:`` +
the official TD-MPC2 name (a host callback; :mod:`tdmpc2core.envs.dmcontrol_env`).

The paper's simulator and protocol: action repeat 2 (1000 control steps = T 500), rewards in
[0, 1] per control step, the official wrapper's conventions, so comparisons with the
published curves are like for like. A ``dmc:`` id that is not accepted is refused with the
reason (the id table, :mod:`tdmpc2core.envs.dmcontrol_ids`, is shared with the adapter and the
official task sets). No ``env_params``: the official construction is the protocol
(:data:`DMCONTROL_NONE`).
"""
from __future__ import annotations

from typing import Mapping, Optional

from tdmpc2core.envs.dmcontrol_ids import DMCONTROL_ENVS, PREFIX, dmc_name, unknown_id_error
from tdmpc2core.envs.params import canonical
from tdmpc2core.envs.registry import Suite, SuiteReport

#: why a dm_control task takes no environment settings
DMCONTROL_NONE = ("dm_control tasks take none (the official construction, suite.load(domain, task, "
                  "task_kwargs={'random': seed}), is the paper's protocol); set the episode length with "
                  "episode_length and the action repeat with action_repeat")


def check_dmcontrol(env_id: str, env_params: Mapping) -> dict:
    """dm_control tasks take no ``env_params``: ``{}`` for an empty mapping, else ValueError."""
    params = canonical(env_params, env_id)
    if params:
        raise ValueError(f"env_params={params!r} for {env_id!r}: {DMCONTROL_NONE}")
    return params


def _build(env_id, *, action_repeat, episode_length, env_params, backend, obs="state"):
    if env_params:  # a mapping was refused by check_params already; anything else is refused here
        raise ValueError(f"env_params={env_params!r}: dm_control tasks take none (the official "
                         "construction is used); pass env_params=None")
    from tdmpc2core.envs.dmcontrol_env import DMControlEnv

    return DMControlEnv(env_id, suite=SUITE.name, action_repeat=action_repeat, episode_length=episode_length,
                        obs=obs)


def _refuse(env_id) -> Optional[ValueError]:
    return unknown_id_error(env_id) if isinstance(env_id, str) and env_id.startswith(PREFIX) else None


def _frames(env):
    """The evaluation videos' renderer: the task's ``Physics.render`` (the simulator restored from
    the env state), camera 0 (2 for quadruped), as the official wrapper renders."""
    import numpy as np

    from tdmpc2core.envs.render import FrameSource

    host = env._host  # the env's scratch simulator: every call restores the full state it is given
    camera = 2 if env.spec.env_id.split(":", 1)[-1].startswith("quadruped") else 0

    def state_of(inner):
        return inner.physics, inner.model

    def draw(phys, model, width, height):
        with host._lock:
            host._restore(phys, model)
            return np.asarray(host.physics.render(height=height, width=width, camera_id=camera), np.uint8)

    def render_one(st, width, height):
        phys, model = st
        # a pixel env's OpenGL context is current on its render thread only (dm_control's EGL
        # renders on the thread that made it current): draw there, as its observations are drawn
        return host._on_thread(draw, np.asarray(phys), np.asarray(model), width, height)

    dt = float(host.env.control_timestep())
    return FrameSource(state_of, render_one, dt, f"dm_control Physics.render, camera {camera}")


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
    frames=_frames,  # evaluation videos
)
