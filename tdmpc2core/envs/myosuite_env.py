"""MyoSuite suite adapter (myosuite 3.0.0 on mujoco 3.17.0, host-stepped).

Ids are the official TD-MPC2 names (:data:`tdmpc2core.envs.domain_ids.MYOSUITE_TASKS`):
``myo-reach`` is ``myoHandReachFixed-v0``, ``myo-reach-hard`` ``myoHandReachRandom-v0``, and so
pose, obj-hold, key-turn and pen-twirl.

Conventions (the official wrapper, nicklashansen/tdmpc2 ``tdmpc2/envs/myosuite.py``): the env
made by MyoSuite's registry; the reward is its ``dense`` reward; the success flag is
``info['solved']`` after the step; no action repeat; 100 agent steps per episode whatever the
env's own limit (50 to 200), MyoSuite's ``done`` and truncation ignored (the official wrapper
returns done=False); actions in [-1, 1]^39 (MyoSuite's normalised muscle activations, unchanged).
The host steps the unwrapped env: the registry's wrappers only flag truncation and instability.

Randomness: each reset calls ``reset(seed=s)`` with a uint32 ``s`` drawn from the reset's JAX
key (as dm_control, docs/deviations.md E4). The env state carries the MuJoCo state, the model
fields a reset redraws (:data:`EPISODE_MODEL_FIELDS`) and the env object's numeric attributes
(``_task_state``: the pose tasks' target angles), so steps are exact under restore.
"""
from __future__ import annotations

import warnings

import numpy as np

from tdmpc2core.envs.domain_ids import MYOSUITE_ENVS, MYOSUITE_TASKS
from tdmpc2core.envs.host_mujoco import HostMujocoEnv, MujocoHost

#: model fields a reset of the task redraws (myosuite 3.0.0 sources; checked by
#: tests/test_domains.py): the random targets' sites, the held object's size (and the collision
#: bounds MuJoCo derives from it), the key's position, the pen target's orientation
EPISODE_MODEL_FIELDS: dict[str, tuple[str, ...]] = {
    "myo-reach-hard": ("site_pos",),
    "myo-pose-hard": ("site_pos",),
    "myo-obj-hold-hard": ("site_pos", "site_size", "geom_size", "geom_rbound", "geom_aabb", "bvh_aabb",
                          "dof_length"),
    "myo-key-turn-hard": ("body_pos",),
    "myo-pen-twirl-hard": ("body_quat",),
}


def make_myosuite_env(env_id: str):
    """MyoSuite's unwrapped env of official id ``env_id`` (``myo-reach``), as its registry makes it.

    Raises:
        ValueError: an id not in :data:`MYOSUITE_ENVS`.
    """
    if env_id not in MYOSUITE_TASKS:
        from tdmpc2core.envs.suggest import close_ids

        raise ValueError(f"unknown MyoSuite id {env_id!r}; close: {close_ids(env_id, list(MYOSUITE_ENVS))}; "
                         f"accepted: {list(MYOSUITE_ENVS)}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import myosuite  # noqa: F401 (registers the envs)
        from myosuite.utils import gym as myo_gym

        return myo_gym.make(MYOSUITE_TASKS[env_id]).unwrapped


class _Host(MujocoHost):
    attr_skip = {"_np_random", "_np_random_seed", "np_random", "_input_seed", "_ezpickle_args",
                 "_ezpickle_kwargs", "frame_skip", "_ctrl_dt", "mujoco_render_frames",
                 "mj_instability_termination", "normalize_act", "render_mode"}

    def __init__(self, env_id: str):
        self.env_id = env_id
        self.model_fields = EPISODE_MODEL_FIELDS.get(env_id, ())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.env = make_myosuite_env(env_id)
        self.model, self.data = self.env.model, self.env.data
        space = self.env.action_space
        self._finish_init(space.low, space.high, np.zeros(space.shape, np.float32))

    def _reset_episode(self, seed: int) -> np.ndarray:
        obs, _ = self.env.reset(seed=int(seed))
        return np.asarray(obs, np.float32)

    def _sim_step(self, action):
        obs, reward, _, _, info = self.env.step(action)
        return obs, reward, bool(np.asarray(info["solved"]).item())

    def settings(self) -> dict:
        """MyoSuite's env in use: its registry id (``myoHandReachFixed-v0``) and class."""
        return {"env_name": MYOSUITE_TASKS[self.env_id], "env_class": type(self.env).__name__}


class MyoSuiteEnv(HostMujocoEnv):
    """A MyoSuite hand task behind the :class:`~tdmpc2core.envs.base.Env` interface (see the
    module docstring for the conventions).

    Args:
        env_id: an id in :data:`MYOSUITE_ENVS` (``"myo-reach"``).
        suite: the name of the suite that builds it (``EnvSpec.suite``; :mod:`tdmpc2core.envs.suites.myosuite`).
        action_repeat: simulator steps per agent step (the official: 1).
        episode_length: simulator steps per episode (100: T = 100 agent steps).

    Spec: obs f32[115] (reach), f32[108] (pose), f32[91] (obj-hold), f32[93] (key-turn),
    f32[83] (pen-twirl); action [-1, 1]^39; ``has_success`` True; ``can_terminate`` False.

    Raises:
        ValueError: unknown id, bad repeat or length.
    """

    def __init__(self, env_id: str, *, suite: str, action_repeat: int = 1, episode_length: int = 100):
        self._build(env_id, _Host, suite, action_repeat, episode_length)



__all__ = ["MyoSuiteEnv", "make_myosuite_env", "EPISODE_MODEL_FIELDS"]
