"""The Playground suite: MuJoCo Playground 0.2.0's DM Control ports on MJX or Warp (pure JAX;
the adapter :mod:`tdmpc2core.envs.playground_env`), with its ids, environment settings,
renderer and registry entry.

The paper's protocol: action repeat 2, so 1000 simulator steps are T = 500 agent steps;
rewards in [0, 1] per simulator step. Its physics differ from dm_control's, so comparisons
with the published curves are approximate. :data:`PUBLISHED`: the 22 tasks with a published
curve -> the dm_control name of that curve.

``env_params``: extra ``config_overrides`` (:data:`PLAYGROUND_KEYS`): ``ctrl_dt`` and ``sim_dt``
(seconds, > 0; the control step must be a whole number >= 1 of physics steps, since
Playground steps ``round(ctrl_dt / sim_dt)`` of them, defaults in :data:`PLAYGROUND_DT`),
``naconmax`` and ``njmax`` (ints >= 0, MuJoCo Warp's contact and constraint buffers) and
``vision`` (false only). ``impl``, ``action_repeat`` and ``episode_length`` belong to the
wrapper (``backend``, ``action_repeat``, ``episode_length``).
"""
from __future__ import annotations

from typing import Mapping

from tdmpc2core.envs.params import canonical, is_int, is_number, unknown_key_error
from tdmpc2core.envs.registry import Suite, SuiteReport
from tdmpc2core.resources import PLAYGROUND_TO_DMC

# playground 0.2.0: mujoco_playground.registry.dm_control_suite.ALL_ENVS (checked by tests).
PLAYGROUND_DMC_ENVS: tuple[str, ...] = (
    "AcrobotSwingup",
    "AcrobotSwingupSparse",
    "BallInCup",
    "CartpoleBalance",
    "CartpoleBalanceSparse",
    "CartpoleSwingup",
    "CartpoleSwingupSparse",
    "CheetahRun",
    "FingerSpin",
    "FingerTurnEasy",
    "FingerTurnHard",
    "FishSwim",
    "HopperHop",
    "HopperStand",
    "HumanoidStand",
    "HumanoidWalk",
    "HumanoidRun",
    "PendulumSwingup",
    "PointMass",
    "ReacherEasy",
    "ReacherHard",
    "SwimmerSwimmer6",
    "WalkerRun",
    "WalkerStand",
    "WalkerWalk",
)
#: playground 0.2.0: the ``config_overrides`` a task may set
PLAYGROUND_KEYS = ("ctrl_dt", "sim_dt", "naconmax", "njmax", "vision")
#: playground 0.2.0's DM Control tasks: their default (ctrl_dt, sim_dt), seconds
PLAYGROUND_DT: dict[str, tuple[float, float]] = {
    "AcrobotSwingup": (0.01, 0.01), "AcrobotSwingupSparse": (0.01, 0.01), "BallInCup": (0.02, 0.002),
    "CartpoleBalance": (0.01, 0.01), "CartpoleBalanceSparse": (0.01, 0.01), "CartpoleSwingup": (0.01, 0.01),
    "CartpoleSwingupSparse": (0.01, 0.01), "CheetahRun": (0.01, 0.01), "FingerSpin": (0.02, 0.005),
    "FingerTurnEasy": (0.02, 0.005), "FingerTurnHard": (0.02, 0.005), "FishSwim": (0.04, 0.002),
    "HopperHop": (0.02, 0.005), "HopperStand": (0.02, 0.005), "HumanoidStand": (0.025, 0.005),
    "HumanoidWalk": (0.025, 0.005), "HumanoidRun": (0.025, 0.005), "PendulumSwingup": (0.02, 0.01),
    "PointMass": (0.02, 0.02), "ReacherEasy": (0.02, 0.005), "ReacherHard": (0.02, 0.005),
    "SwimmerSwimmer6": (0.03, 0.003), "WalkerRun": (0.025, 0.0025), "WalkerStand": (0.025, 0.0025),
    "WalkerWalk": (0.025, 0.0025),
}
#: the Playground config keys the wrapper owns (set through backend, action_repeat, episode_length)
PLAYGROUND_RESERVED = ("impl", "action_repeat", "episode_length")


#: Playground DM Control task -> dm_control task name of its published curve
#: (tdmpc2core.resources, the one copy of the table)
PUBLISHED: dict[str, str] = PLAYGROUND_TO_DMC


def check_playground(env_id: str, env_params: Mapping) -> dict:
    """The canonical Playground ``env_params`` (extra ``config_overrides``). Raises ValueError."""
    params = canonical(env_params, env_id)
    reserved = [k for k in params if k in PLAYGROUND_RESERVED]
    if reserved:
        raise ValueError(f"env_params for {env_id!r} (playground) may not override {reserved}: the wrapper owns "
                         "action repeat and the time limit, and the physics impl is chosen with backend=")
    for key, value in params.items():
        if key not in PLAYGROUND_KEYS:
            raise unknown_key_error(env_id, "playground", key, PLAYGROUND_KEYS)
        if key in ("ctrl_dt", "sim_dt") and not (is_number(value) and value > 0):
            raise ValueError(f"env_params for {env_id!r} (playground): {key}={value!r}; need a number > 0 (seconds)")
        if key in ("naconmax", "njmax") and not (is_int(value) and value >= 0):
            raise ValueError(f"env_params for {env_id!r} (playground): {key}={value!r}; need an integer >= 0")
    if params.get("vision", False) is not False:
        raise ValueError(f"env_params for {env_id!r} (playground): vision={params['vision']!r}; vision observations "
                         "are not supported (state observations only): false or absent")
    ctrl, sim = PLAYGROUND_DT.get(env_id, (None, None))
    ctrl, sim = params.get("ctrl_dt", ctrl), params.get("sim_dt", sim)
    if ctrl is not None and sim is not None:
        n = ctrl / sim
        if n < 1 - 1e-9 or abs(n - round(n)) > 1e-6 * max(1.0, n):
            raise ValueError(f"env_params for {env_id!r} (playground): ctrl_dt={ctrl} is not a whole number >= 1 "
                             f"of sim_dt={sim} (Playground runs round(ctrl_dt / sim_dt) physics steps per control "
                             "step, so the control step would not be the one asked for)")
    return params


def _frames(env):
    """The evaluation videos' renderer: ``mujoco.Renderer`` on the task's ``mj_model``
    (:func:`tdmpc2core.envs.render.mj_qpos_source`)."""
    from tdmpc2core.envs.render import mj_qpos_source

    import jax.numpy as jnp

    pg = env.playground_env
    model = pg.mj_model

    def state_of(inner):
        d = inner.data
        if model.nmocap:
            return d.qpos, d.mocap_pos, d.mocap_quat
        return d.qpos, jnp.zeros((0,), jnp.float32), jnp.zeros((0,), jnp.float32)

    return mj_qpos_source(model, state_of, float(pg.dt), "mujoco.Renderer on the Playground task's mj_model")


def _build(env_id, *, action_repeat, episode_length, env_params, backend):
    from tdmpc2core.envs.playground_env import PlaygroundEnv

    return PlaygroundEnv(env_id, suite=SUITE.name, action_repeat=action_repeat, episode_length=episode_length,
                         env_params=env_params, backend=backend)


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
    frames=_frames,  # evaluation videos
)
