"""Meta-World suite adapter (metaworld 3.0.0 on mujoco 3.17.0, host-stepped; docs/metaworld.md).

Ids are ``mw-<name>`` (:data:`tdmpc2core.envs.domain_ids.METAWORLD_ENVS`), Meta-World's
``<name>-v3-goal-observable`` env (the paper used ``-v2-``: docs/deviations.md E10).

Conventions (the official wrapper, nicklashansen/tdmpc2 ``tdmpc2/envs/metaworld.py``):

* ``_freeze_rand_vec = False``: a new goal and object placement at every reset;
* reset: Meta-World's reset, then one step with a zero action; the observation is the reset's
  (taken before that step), as the official wrapper returns it;
* one agent step: the action for ``action_repeat`` (2) simulator steps, rewards summed; the
  success flag is ``info['success']`` of the last of them;
* 100 agent steps per episode, never terminated early; state observations (39 values:
  hand, gripper, two objects, the previous frame's 18 values and the goal), float32;
* actions in [-1, 1]^4, Meta-World's own units (the agent's action unchanged).

Randomness: each reset seeds the env's ``np_random`` with a uint32 drawn from the reset's JAX key
(as dm_control, docs/deviations.md E4) and sets ``seeded_rand_vec`` so the goal is drawn from it
(Meta-World 3 otherwise draws from NumPy's global generator).

MuJoCo 3.17 compatibility (docs/metaworld.md): Meta-World 3.0.0's ``reset_mocap_welds`` writes an
11-number weld row (anchor 3, relative pose 3 + 4, torque scale 1), the layout of MuJoCo <= 3.3;
MuJoCo 3.17's rows have a 12th number, a flag that says whether the relative pose is computed from
the reference configuration (1) or given (0). :func:`compatible_weld_reset` writes the same 11
numbers into the same first 11 slots and sets the flag to 0 ("given"), what MuJoCo 3.17 compiles for
a weld whose relative pose is given in the XML, i.e. the meaning of the 11 numbers under 3.3.
"""
from __future__ import annotations

import contextlib
import threading
import warnings

import numpy as np

from tdmpc2core.envs.domain_ids import MAX_PATH_LENGTH, METAWORLD_ENVS, metaworld_env_name
from tdmpc2core.envs.host_mujoco import HostMujocoEnv, MujocoHost

#: Meta-World's weld row as its reset_mocap_welds writes it (anchor, relative position,
#: relative quaternion, torque scale): MuJoCo <= 3.3's 11-number layout
WELD_ROW = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 5.0)
_PATCH_LOCK = threading.Lock()


def compatible_weld_reset(env) -> None:
    """Meta-World's mocap weld reset for any MuJoCo 3 row width: :data:`WELD_ROW` into slots
    0-10 of every weld row; a 12th slot (MuJoCo >= 3.4: relative pose computed from the
    reference configuration, 1, or given, 0) is set to 0, as a weld with a given relative pose
    compiles. Raises ValueError for a row narrower than 11."""
    import mujoco

    m = env.model
    if m.nmocap <= 0 or m.eq_data is None:
        return
    width = m.eq_data.shape[1]
    if width < len(WELD_ROW):
        raise ValueError(f"MuJoCo's weld rows have {width} numbers; Meta-World's weld reset needs at least 11")
    for i in range(m.eq_data.shape[0]):
        if m.eq_type[i] == mujoco.mjtEq.mjEQ_WELD:
            m.eq_data[i, : len(WELD_ROW)] = WELD_ROW
            m.eq_data[i, len(WELD_ROW):] = 0.0


@contextlib.contextmanager
def _weld_patch():
    """Meta-World's ``SawyerMocapBase.reset_mocap_welds`` replaced by
    :func:`compatible_weld_reset` while envs are built (restored afterwards)."""
    from metaworld import sawyer_xyz_env

    cls = sawyer_xyz_env.SawyerMocapBase
    with _PATCH_LOCK:
        original = cls.__dict__["reset_mocap_welds"]
        cls.reset_mocap_welds = compatible_weld_reset
        try:
            yield
        finally:
            cls.reset_mocap_welds = original


def make_metaworld_env(env_id: str, seed: int = 0):
    """Meta-World's own env of ``env_id`` (``mw-<name>``) on this MuJoCo, built as the official
    wrapper builds it (``<name>-v3-goal-observable(seed=seed)``, ``_freeze_rand_vec = False``),
    with the weld reset of :func:`compatible_weld_reset`. For the expert-policy benchmark and the
    tests; :class:`MetaWorldEnv` is the adapter.

    Raises:
        ValueError: an id not in :data:`METAWORLD_ENVS`.
    """
    if env_id not in METAWORLD_ENVS:
        from tdmpc2core.envs.suggest import close_ids

        raise ValueError(f"unknown Meta-World id {env_id!r}; close: {close_ids(env_id, list(METAWORLD_ENVS))}; "
                         f"accepted: mw-<name> for the 50 tasks of tdmpc2core.envs.domain_ids.METAWORLD_TASKS")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE

        with _weld_patch():
            env = ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE[metaworld_env_name(env_id)](seed=seed)
    env._freeze_rand_vec = False
    return env


class _Host(MujocoHost):
    # body_pos and site_pos: the object and goal placements Meta-World's resets write
    model_fields = ("body_pos", "site_pos")
    attr_skip = {"_np_random", "_np_random_seed", "np_random", "init_config", "discrete_goals",
                 "_ezpickle_args", "_ezpickle_kwargs", "frame_skip", "max_path_length", "seeded_rand_vec",
                 "_freeze_rand_vec", "_partially_observable", "_set_task_called", "isV2", "render_mode",
                 "camera_id", "camera_name", "width", "height"}

    def __init__(self, env_id: str):
        from gymnasium.utils import seeding

        self._seeding = seeding
        self.env_id = env_id
        self.env = make_metaworld_env(env_id, seed=0)
        self.env.seeded_rand_vec = True  # goals from env.np_random, seeded at each reset
        self.model, self.data = self.env.model, self.env.data
        space = self.env.action_space
        self.zero = np.zeros(space.shape, np.float32)
        self._finish_init(space.low, space.high, self.zero)

    def _reset_episode(self, seed: int) -> np.ndarray:
        self.env.np_random, _ = self._seeding.np_random(int(seed))
        obs, _ = self.env.reset()
        self.env.step(self.zero.copy())  # the official wrapper's step after the reset
        return np.asarray(obs, np.float32)

    def _sim_step(self, action):
        obs, reward, _, _, info = self.env.step(action)
        return obs, reward, float(info["success"]) > 0.5

    def settings(self) -> dict:
        """Meta-World's env in use: its name (``<name>-v3-goal-observable``), reward function
        version (Meta-World 3 has ``v1`` and ``v2``; the env's default, ``v2``, as the official
        construction) and ``max_path_length`` (simulator steps before it refuses to step)."""
        return {"env_name": metaworld_env_name(self.env_id), "env_class": type(self.env).__name__,
                "reward_function_version": str(self.env.reward_function_version),
                "max_path_length": int(self.env.max_path_length)}


class MetaWorldEnv(HostMujocoEnv):
    """A Meta-World task behind the :class:`~tdmpc2core.envs.base.Env` interface (see the module
    docstring for the conventions).

    Args:
        env_id: an id in :data:`METAWORLD_ENVS` (``"mw-reach"``).
        suite: the name of the suite that builds it (``EnvSpec.suite``; :mod:`tdmpc2core.envs.suites.metaworld`).
        action_repeat: simulator steps per agent step (the official: 2).
        episode_length: simulator steps per episode (200: T = 100 agent steps at repeat 2); at
            most ``MAX_PATH_LENGTH - 1`` = 499 (:data:`tdmpc2core.envs.domain_ids.MAX_PATH_LENGTH`:
            Meta-World refuses to step past its ``max_path_length``, and the reset takes one step).

    Spec: obs f32[39], action [-1, 1]^4, ``has_success`` True, ``can_terminate`` False.

    Raises:
        ValueError: unknown id, bad repeat or length (one line naming Meta-World's limit for a
            length past it).
    """

    def __init__(self, env_id: str, *, suite: str, action_repeat: int = 2, episode_length: int = 200):
        check_episode_fits(env_id, action_repeat, episode_length, MAX_PATH_LENGTH)
        self._build(env_id, _Host, suite, action_repeat, episode_length)
        # the installed Meta-World's limit, in case it is not the one the check above assumed
        check_episode_fits(env_id, action_repeat, episode_length, int(self._host.env.max_path_length))


def check_episode_fits(env_id: str, action_repeat, episode_length, max_path_length: int) -> None:
    """Refuse an episode of ``episode_length`` simulator steps that Meta-World cannot run: its
    env raises ``ValueError: You must reset the env manually once truncate==True`` at a step
    past ``max_path_length``, and the official reset takes one step, so at most
    ``max_path_length - 1`` steps (ValueError naming the limit; other bad values are left to
    :func:`~tdmpc2core.envs.base.check_repeat_and_length`)."""
    if isinstance(episode_length, bool) or not isinstance(episode_length, int) \
            or isinstance(action_repeat, bool) or not isinstance(action_repeat, int) or action_repeat < 1:
        return
    most = ((max_path_length - 1) // action_repeat) * action_repeat
    if episode_length > most:
        raise ValueError(
            f"episode_length={episode_length} for {env_id!r}: Meta-World refuses to step past max_path_length="
            f"{max_path_length} simulator steps and the reset takes one, so an episode lasts at most "
            f"{max_path_length - 1} ({most} at action_repeat={action_repeat}: T = {most // action_repeat} agent steps)")



__all__ = ["MetaWorldEnv", "make_metaworld_env", "compatible_weld_reset", "check_episode_fits", "WELD_ROW"]
