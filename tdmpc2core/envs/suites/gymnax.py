"""The gymnax suite: gymnax 1.0.1's continuous-action ids (pure JAX; the adapter
:mod:`tdmpc2core.envs.gymnax_env`), with everything else the suite knows: its ids and time
limits, its environment settings and their check, its renderer and its registry entry.

Not in the paper: action repeat 1 by default, and each env keeps its own time limit
(``params.max_steps_in_episode``; an ``episode_length`` other than it is refused; ``env_params`` may set it).
Discrete-action ids are recognised and refused with the list of continuous ones.
``env_params``: fields of the env's ``EnvParams`` (:data:`GYMNAX_PARAMS`), each of its
default's type (an int where the default is an int, a number where it is a float, a bool where
it is a bool); ``max_steps_in_episode`` (>= 1) is the env's own time limit in simulator steps.

The tables were read off gymnax 1.0.1 (``gymnax.registered_envs``, each env's ``action_space``
and ``default_params``) and are checked against the installed gymnax by the tests. They are
static so that dispatching an id needs no import (and so that ``MNISTBandit-bsuite``, which
downloads MNIST when constructed, is never built just to look at its action space).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional

from tdmpc2core.envs.params import canonical, is_int, is_number, unknown_key_error
from tdmpc2core.envs.registry import Suite, SuiteReport

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


#: gymnax 1.0.1: continuous-action id -> its ``EnvParams`` fields and their defaults
GYMNAX_PARAMS: dict[str, dict[str, Any]] = {
    "Pendulum-v1": {"max_steps_in_episode": 200, "max_speed": 8.0, "max_torque": 2.0, "dt": 0.05, "g": 10.0,
                    "m": 1.0, "l": 1.0},
    "MountainCarContinuous-v0": {"max_steps_in_episode": 999, "min_action": -1.0, "max_action": 1.0,
                                 "min_position": -1.2, "max_position": 0.6, "max_speed": 0.07,
                                 "goal_position": 0.45, "goal_velocity": 0.0, "power": 0.0015, "gravity": 0.0025},
    "PointRobot-misc": {"max_steps_in_episode": 100, "max_force": 0.1, "circle_radius": 1.0, "dense_reward": False,
                        "goal_radius": 0.2, "center_init": False, "normalize_time": True},
    "Reacher-misc": {"max_steps_in_episode": 100, "torque_scale": 1.0, "dt": 0.05},
    "Swimmer-misc": {"max_steps_in_episode": 500, "dt": 0.05},
}
#: the gymnax params field that is the env's own time limit (simulator steps)
GYMNAX_TIME_LIMIT_KEY = "max_steps_in_episode"



def check_gymnax(env_id: str, env_params: Mapping) -> dict:
    """The canonical gymnax ``env_params`` of ``env_id`` (the module docstring). Raises ValueError."""
    params = canonical(env_params, env_id)
    fields = GYMNAX_PARAMS.get(env_id, {})
    for key, value in params.items():
        if key not in fields:
            raise unknown_key_error(env_id, "gymnax", key, list(fields))
        default = fields[key]
        if isinstance(default, bool):
            ok, want = isinstance(value, bool), "true or false"
        elif isinstance(default, int):
            ok, want = is_int(value) and value >= 1, "an integer >= 1 (simulator steps)"
        else:
            ok, want = is_number(value), "a finite number"
        if not ok:
            raise ValueError(f"env_params for {env_id!r} (gymnax): {key}={value!r}; need {want} "
                             f"(default {default!r})")
    return params



# ---- the renderer: gymnax's own visualiser needs gymnasium's pygame renderer (not a
# dependency), so classic control is drawn with Pillow from the state
def _frames(env):
    """The evaluation videos' renderer (:attr:`tdmpc2core.envs.registry.Suite.frames`): a Pillow
    drawing of the state, for Pendulum-v1 and MountainCarContinuous-v0."""
    from tdmpc2core.envs.render import FrameSource, NoRendererError

    env_id = env.spec.env_id
    params = env.gymnax_params
    if env_id == "Pendulum-v1":
        draw = _draw_pendulum
    elif env_id == "MountainCarContinuous-v0":
        draw = lambda st, w, h: _draw_mountain_car(st, w, h, params)  # noqa: E731
    else:
        raise NoRendererError(f"{env_id}: no renderer for this gymnax env (drawn: Pendulum-v1, "
                              "MountainCarContinuous-v0)")
    return FrameSource(lambda inner: inner, draw, float(getattr(params, "dt", 1.0)),
                       "a Pillow drawing of the gymnax state")


def _draw_pendulum(st, width, height):
    """The pendulum as gymnasium draws it: theta = 0 upright, counter-clockwise positive; the
    rod's length 1 is 40% of the frame's smaller side; an arc shows the last torque. Returns
    uint8 [height, width, 3]."""
    import numpy as np
    from PIL import Image, ImageDraw

    theta, last_u = float(np.asarray(st.theta)), float(np.asarray(st.last_u))
    img = Image.new("RGB", (width, height), (255, 255, 255))
    d = ImageDraw.Draw(img)
    cx, cy, L = width / 2, height / 2, 0.4 * min(width, height)
    x, y = cx - L * math.sin(theta), cy - L * math.cos(theta)
    rod = max(2, int(0.08 * min(width, height)))
    d.line([(cx, cy), (x, y)], fill=(204, 77, 77), width=rod)
    r = rod / 2
    d.ellipse([x - r, y - r, x + r, y + r], fill=(204, 77, 77))
    if abs(last_u) > 1e-3:  # the torque: an arc around the pivot, its length ~ |u| / 2
        a = 0.3 * min(width, height)
        span = min(abs(last_u) / 2.0, 1.0) * 180.0
        start = -90.0 if last_u > 0 else -90.0 - span
        d.arc([cx - a, cy - a, cx + a, cy + a], start, start + span, fill=(60, 60, 60), width=2)
    p = max(2, rod // 3)
    d.ellipse([cx - p, cy - p, cx + p, cy + p], fill=(0, 0, 0))
    return np.asarray(img, np.uint8)


def _draw_mountain_car(st, width, height, params):
    """The car on the hill y = sin(3 x) / 2 over [min_position, max_position], the goal flag.
    Returns uint8 [height, width, 3]."""
    import numpy as np
    from PIL import Image, ImageDraw

    lo, hi = float(params.min_position), float(params.max_position)
    goal = float(params.goal_position)
    pos = float(np.asarray(st.position))
    img = Image.new("RGB", (width, height), (255, 255, 255))
    d = ImageDraw.Draw(img)
    sx = lambda x: (x - lo) / (hi - lo) * (width - 1)  # noqa: E731
    sy = lambda y: height - 1 - (0.5 * math.sin(3 * y) + 0.55) / 1.1 * 0.8 * (height - 1)  # noqa: E731
    xs = np.linspace(lo, hi, 100)
    d.line([(sx(x), sy(x)) for x in xs], fill=(0, 0, 0), width=2)
    fx, fy = sx(goal), sy(goal)
    d.line([(fx, fy), (fx, fy - 0.15 * height)], fill=(0, 0, 0), width=1)
    d.polygon([(fx, fy - 0.15 * height), (fx + 0.06 * width, fy - 0.13 * height), (fx, fy - 0.11 * height)],
              fill=(204, 204, 0))
    r = max(3, int(0.04 * min(width, height)))
    cx, cy = sx(pos), sy(pos) - r
    d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=(77, 77, 204))
    return np.asarray(img, np.uint8)


def _build(env_id, *, action_repeat, episode_length, env_params, backend):
    from tdmpc2core.envs.gymnax_env import GymnaxEnv

    return GymnaxEnv(env_id, suite=SUITE.name, can_terminate=GYMNAX_CONTINUOUS[env_id], action_repeat=action_repeat,
                     env_params=env_params)


def _refuse(env_id) -> Optional[ValueError]:
    return discrete_error(env_id) if env_id in GYMNAX_DISCRETE else None


SUITE = Suite(
    name="gymnax",
    ids=tuple(GYMNAX_CONTINUOUS),
    build=_build,
    requires=("gymnax",),
    default_action_repeat=1,
    own_time_limit=GYMNAX_MAX_STEPS,
    check_params=check_gymnax,
    time_limit_key=GYMNAX_TIME_LIMIT_KEY,
    refuse=_refuse,
    report=SuiteReport(label="gymnax", rank=2),
    frames=_frames,  # evaluation videos
    frames_opengl=False,  # a Pillow drawing: no OpenGL context
)
