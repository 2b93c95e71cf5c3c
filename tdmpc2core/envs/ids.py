"""The accepted environment ids and their time limits, as plain Python (no JAX, no suite).

Dispatching an id, listing the ids and computing a task's time limit T need no import of a
suite nor of JAX, so a machine without JAX (a cluster login node running ``snakemake -n``)
can check a configuration. The suite adapters (:mod:`.gymnax_env`, :mod:`.brax_env`,
:mod:`.playground_env`) import their tables from here; the tests check the tables against
the installed suites.
"""
from __future__ import annotations

import difflib

from tdmpc2core.envs.dmcontrol_ids import DMCONTROL_ENVS, PREFIX as DMC_PREFIX, unknown_id_error

SUITES = ("gymnax", "brax", "playground", "dmcontrol")

# Continuous-action ids in gymnax 1.0.1 -> whether the env has a true terminal state.
GYMNAX_CONTINUOUS: dict[str, bool] = {
    "Pendulum-v1": False,
    "MountainCarContinuous-v0": True,  # goal reached
    "PointRobot-misc": False,
    "Reacher-misc": False,
    "Swimmer-misc": False,
}

# Discrete-action ids in gymnax 1.0.1 (rejected: TD-MPC2 needs continuous actions).
GYMNAX_DISCRETE: tuple[str, ...] = (
    "CartPole-v1",
    "Acrobot-v1",
    "MountainCar-v0",
    "Asterix-MinAtar",
    "Breakout-MinAtar",
    "Freeway-MinAtar",
    "Seaquest-MinAtar",
    "SpaceInvaders-MinAtar",
    "Catch-bsuite",
    "DeepSea-bsuite",
    "MemoryChain-bsuite",
    "UmbrellaChain-bsuite",
    "DiscountingChain-bsuite",
    "MNISTBandit-bsuite",
    "SimpleBandit-bsuite",
    "FourRooms-misc",
    "MetaMaze-misc",
    "BernoulliBandit-misc",
    "GaussianBandit-misc",
    "Pong-misc",
    "FrozenLake-misc",
)

# gymnax 1.0.1 default ``params.max_steps_in_episode`` (simulator steps) of the continuous ids:
# a gymnax task's time limit is its own, T = max_steps_in_episode // action_repeat.
GYMNAX_MAX_STEPS: dict[str, int] = {
    "Pendulum-v1": 200,
    "MountainCarContinuous-v0": 999,
    "PointRobot-misc": 100,
    "Reacher-misc": 100,
    "Swimmer-misc": 500,
}

def discrete_error(env_id: str) -> ValueError:
    return ValueError(
        f"gymnax env {env_id!r} has a discrete action space; TD-MPC2 needs continuous "
        f"actions. Accepted continuous gymnax ids: {sorted(GYMNAX_CONTINUOUS)}"
    )


# Brax 0.14.2 registry names with a flat observation -> whether the env can terminate
# before the time limit (with default constructor arguments). 'fast' (a unit-test env with
# dict observations) is left out.
BRAX_ENVS: dict[str, bool] = {
    "ant": True,
    "halfcheetah": False,
    "hopper": True,
    "humanoid": True,
    "humanoidstandup": False,
    "inverted_pendulum": True,
    "inverted_double_pendulum": True,
    "pusher": False,
    "reacher": False,
    "swimmer": False,
    "walker2d": True,
}

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


def check_repeat_and_length(action_repeat: int, episode_length: int, *, check_length: bool):
    """Validate ``action_repeat`` (and, if asked, ``episode_length``).

    Raises:
        ValueError: ``action_repeat`` is not an int >= 1; or (``check_length``)
            ``episode_length`` is not a positive int divisible by ``action_repeat``.
    """
    if isinstance(action_repeat, bool) or not isinstance(action_repeat, int) or action_repeat < 1:
        raise ValueError(f"action_repeat must be an integer >= 1, got {action_repeat!r}")
    if check_length:
        if isinstance(episode_length, bool) or not isinstance(episode_length, int) or episode_length < 1:
            raise ValueError(
                f"episode_length must be a positive integer (simulator steps), got {episode_length!r}"
            )
        if episode_length % action_repeat != 0:
            raise ValueError(
                f"episode_length={episode_length} (simulator steps) is not divisible by "
                f"action_repeat={action_repeat}; the time limit T = episode_length // "
                f"action_repeat agent steps must cover exactly episode_length simulator steps"
            )


def list_env_ids() -> dict[str, list[str]]:
    """Accepted ids per suite: ``{"gymnax": [...], "brax": [...], "playground": [...],
    "dmcontrol": [...]}``.

    gymnax: continuous-action ids of gymnax 1.0.1; brax: brax 0.14.2 registry names with
    flat observations; playground: every MuJoCo Playground DM Control suite task;
    dmcontrol: ``"dmc:"`` + the official TD-MPC2 name of every dm_control 1.0.50 suite task
    but lqr, and of the official custom tasks defined here (``dmc:cheetah-run``,
    ``dmc:cup-catch``, ``dmc:walker-walk-backwards``; :mod:`.dmcontrol_ids`).
    """
    return {
        "gymnax": list(GYMNAX_CONTINUOUS),
        "brax": list(BRAX_ENVS),
        "playground": list(PLAYGROUND_DMC_ENVS),
        "dmcontrol": list(DMCONTROL_ENVS),
    }


def suite_of(env_id: str) -> str:
    """Suite name of an accepted id (no import of the suite).

    Raises:
        ValueError: discrete gymnax id or unknown id (message lists the accepted ids); a
            ``dmc:`` id that is unknown or refused (message says why, with close matches
            and the accepted dm_control ids).
    """
    if env_id in GYMNAX_CONTINUOUS:
        return "gymnax"
    if env_id in BRAX_ENVS:
        return "brax"
    if env_id in PLAYGROUND_DMC_ENVS:
        return "playground"
    if env_id in DMCONTROL_ENVS:
        return "dmcontrol"
    if isinstance(env_id, str) and env_id.startswith(DMC_PREFIX):
        raise unknown_id_error(env_id)
    if env_id in GYMNAX_DISCRETE:
        raise discrete_error(env_id)
    ids = list_env_ids()
    every = [i for suite in SUITES for i in ids[suite]]
    close = difflib.get_close_matches(str(env_id), every, n=3)
    hint = f" Did you mean {close}?" if close else ""
    listing = "; ".join(f"{suite}: {ids[suite]}" for suite in SUITES)
    raise ValueError(f"unknown env id {env_id!r}.{hint} Accepted ids per suite: {listing}")


#: The paper's action repeat per suite (spec §2): DMC tasks (Playground's DM Control ports and
#: dm_control itself) repeat each action twice, so their 1000-step episodes are T = 500 agent
#: steps; gymnax and Brax tasks are not in the paper and take 1.
PAPER_ACTION_REPEAT = {"gymnax": 1, "brax": 1, "playground": 2, "dmcontrol": 2}


def default_action_repeat(env_id: str) -> int:
    """The action repeat ``make_env`` uses when none is given: 2 for the DM Control tasks (the
    paper's protocol, spec §2), 1 for gymnax and Brax.

    Raises:
        ValueError: unknown or discrete-action id.
    """
    return PAPER_ACTION_REPEAT[suite_of(env_id)]


def time_limit(env_id: str, *, action_repeat: int | None = None, episode_length: int = 1000) -> int:
    """T, the time limit in agent steps, of the environment ``make_env`` would build with
    these arguments (default env params), without building it.

    gymnax: ``GYMNAX_MAX_STEPS[env_id] // action_repeat`` (``episode_length`` is ignored, as
    by ``make_env``); Brax, Playground and dm_control: ``episode_length // action_repeat``.

    Raises:
        ValueError: an id :func:`suite_of` refuses, a bad ``action_repeat`` or
          ``episode_length`` (:func:`check_repeat_and_length`), or a gymnax time limit
          shorter than ``action_repeat``.
    """
    suite = suite_of(env_id)
    if action_repeat is None:
        action_repeat = PAPER_ACTION_REPEAT[suite]
    check_repeat_and_length(action_repeat, episode_length, check_length=suite != "gymnax")
    if suite == "gymnax":
        T = GYMNAX_MAX_STEPS[env_id] // action_repeat
        if T < 1:
            raise ValueError(f"{env_id!r}: max_steps_in_episode={GYMNAX_MAX_STEPS[env_id]} is shorter than "
                             f"action_repeat={action_repeat}")
        return T
    return episode_length // action_repeat


__all__ = ["SUITES", "GYMNAX_CONTINUOUS", "GYMNAX_DISCRETE", "GYMNAX_MAX_STEPS", "BRAX_ENVS",
           "PLAYGROUND_DMC_ENVS", "PAPER_ACTION_REPEAT", "list_env_ids", "suite_of", "time_limit",
           "default_action_repeat", "check_repeat_and_length",
           "discrete_error"]
