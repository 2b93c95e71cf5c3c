"""The official TD-MPC2 task set's custom DMControl tasks, defined over dm_control's models.

The paper's multi-task set mt30 (official repository, ``tdmpc2/common/__init__.py``,
``TASK_SET['mt30']``) has 19 dm_control suite tasks and 11 tasks of its own, all defined
here (:data:`CUSTOM_TASKS`). Nine need no model of their own: each is a dm_control suite
domain (its model, physics helpers, initial-state distribution and observation) with the
official reward function, written here from its definition. The two three-link reacher
tasks (``reacher-three-easy``, ``reacher-three-hard``) are dm_control's reacher task on a
three-link arm generated from dm_control's reacher model
(:mod:`tdmpc2core.envs.dmcontrol_reacher`). Official custom tasks outside mt30 that need
models of their own are refused (:data:`REFUSED`).

Definitions (constants are those of the official task files at the paper's commit 5f6fade;
``tol`` is :func:`dm_control.utils.rewards.tolerance`, whose default sigmoid is gaussian
with ``value_at_margin=0.1``):

* ``walker-walk-backwards``, ``walker-run-backwards`` (speed ``v`` = dm_control's walk
  speed 1 / run speed 8 m/s): dm_control's walker reward with the direction reversed:
  ``stand * (5 * tol(vx, (-inf, -v), margin=v/2, linear, value_at_margin=0.5) + 1) / 6``,
  ``stand = (3 * tol(torso_height, (1.2, inf), margin=0.6) + (1 + upright) / 2) / 4``.
* ``cheetah-run-backwards``: ``tol(speed, (-inf, -8), margin=8, linear,
  value_at_margin=0)`` (8 = 0.8 x dm_control's run speed 10).
* ``cheetah-run-front`` / ``cheetah-run-back`` (the foot kept up: ``bfoot`` / ``ffoot``;
  speed ``v`` = 0.6 x 10 = 6): ``up * (5 * tol(speed, (v, inf), margin=v, linear,
  value_at_margin=0) + 1) / 6`` with ``up = (3 * tol(z_foot, (1.2, inf), margin=0.6) +
  2 * tol(z_torso, (1.2, inf), margin=0.6)) / 5``.
* ``cheetah-jump``: the mean of the two one-foot stands; a one-foot stand (foot ``f`` up)
  is ``(5 * tol((z_torso + z_f) / 2, (1.2, inf), margin=0.6) + tol(speed, (-0.5, 0.5),
  margin=0.5, linear, value_at_margin=0)) / 6``.
* ``hopper-hop-backwards``: ``tol(height, (0.6, 2)) * tol(speed, (-inf, -1), margin=0.5,
  linear, value_at_margin=0.5)``.
* ``pendulum-spin``: ``tol(|angular velocity|, (9, inf), margin=4.5, linear,
  value_at_margin=0.5)``.
* ``cup-spin``: ``(1 - in_target) * (tol(d, (0.5, inf), margin=0.25, linear,
  value_at_margin=0.5) + 2 * tol(|v_ball|, (6, inf), margin=3, linear,
  value_at_margin=0.5)) / 3`` with ``d`` the (x, z) distance from the ball to the cup's
  target site and ``|v_ball|`` the norm of the ball's (x, z) joint speeds. Its initial
  state differs from cup-catch's: a first uniform draw ``u < 0.1`` decides whether the ball
  may start outside the cup; then ball positions are drawn as in cup-catch (x in
  [-0.2, 0.2], z in [0.2, 0.5]) until one is free of contacts and, unless ``u < 0.1``,
  inside the cup.

Models: hopper, pendulum and ball-in-cup use dm_control's own files unchanged (the
official files are the same). The official cheetah and walker files differ from
dm_control's only in the floor plane's half-length along x (cheetah ``ground`` 200 instead
of 100, walker ``floor`` 500 instead of 250, so backwards runs stay on the drawn floor);
:func:`_widened_floor` makes that one change to dm_control's file. MuJoCo planes are
infinite for collisions, so the change is visual, and ``tests/test_dmcontrol.py`` checks
that it leaves the dynamics unchanged bit for bit.

Time steps follow the official construction: control steps of 0.025 s (walker), 0.02 s
(hopper, cup) and dm_control's default for cheetah, pendulum and the three-link reacher
(one physics step).
"""

from __future__ import annotations

import re

import numpy as np

from tdmpc2core.envs.dmcontrol_ids import CUSTOM_TASKS, REFUSED  # noqa: E402,F401 (plain-Python tables)

# The official custom tasks of the same domains that are not in mt30 (flips, yoga poses)
# are not defined here; they are refused as unknown names.

_INF = float("inf")

# Official constants (5f6fade task files).
_CHEETAH_UP_HEIGHT = 1.2        # torso / foot height above which "up" is 1
_CHEETAH_STAND_SPEED = 0.5      # |speed| below which a one-foot stand is still
_HOPPER_BACKWARDS_SPEED = 2     # dm_control's hop speed; backwards uses -speed/2, margin speed/4
_HOPPER_STAND_HEIGHT = 0.6
_PENDULUM_SPIN_SPEED = 9.0
_CUP_SPIN_DISTANCE = 0.5
_CUP_SPIN_SPEED = 6.0
_CUP_OUT_OF_TARGET_P = 0.1
_FLOOR = {"cheetah": ("ground", 200), "walker": ("floor", 500)}


def _widened_floor(xml: str, geom: str, half_length: float) -> str:
    """``xml`` with the first size value of the geom named ``geom`` set to ``half_length``.

    Raises:
        ValueError: the geom is not found exactly once (a dm_control version whose file
            changed).
    """
    pattern = re.compile(r'(<geom\s[^>]*name="' + re.escape(geom) + r'"[^>]*\ssize=")([^" ]+)')
    out, n = pattern.subn(lambda m: m.group(1) + repr(float(half_length)), xml)
    if n != 1:
        raise ValueError(f"dm_control model: expected one geom named {geom!r} with a size, found {n}")
    return out


def _model(domain: str):
    """(xml, assets) of a domain's dm_control model, with the official floor where it differs."""
    from dm_control.suite import common

    xml = common.read_model(f"{domain}.xml")
    if isinstance(xml, bytes):
        xml = xml.decode()
    if domain in _FLOOR:
        xml = _widened_floor(xml, *_FLOOR[domain])
    return xml, common.ASSETS


def _classes():
    """The task classes, built on first use (dm_control is imported lazily): {domain:
    (dm_control's domain module, the custom task class)}."""
    from dm_control.utils import rewards

    return {**_locomotion_classes(rewards.tolerance), **_spin_classes(rewards.tolerance)}


def _locomotion_classes(tol):
    """Walker, cheetah and hopper custom tasks (``tol``: dm_control's ``rewards.tolerance``)."""
    from dm_control.suite import cheetah, hopper, walker

    class WalkerBackwards(walker.PlanarWalker):
        """dm_control's planar walker rewarded for moving in -x at ``move_speed``."""

        def get_reward(self, physics):
            standing = tol(physics.torso_height(), bounds=(walker._STAND_HEIGHT, _INF),
                           margin=walker._STAND_HEIGHT / 2)
            upright = (1 + physics.torso_upright()) / 2
            stand = (3 * standing + upright) / 4
            move = tol(physics.horizontal_velocity(), bounds=(-_INF, -self._move_speed),
                       margin=self._move_speed / 2, value_at_margin=0.5, sigmoid="linear")
            return stand * (5 * move + 1) / 6

    class CheetahVariant(cheetah.Cheetah):
        """dm_control's cheetah with one of the official custom rewards."""

        def __init__(self, goal, move_speed, random=None):
            super().__init__(random=random)
            self._goal = goal
            self._move_speed = move_speed

        def _up(self, physics, name):
            return tol(physics.named.data.xpos[name, "z"], bounds=(_CHEETAH_UP_HEIGHT, _INF),
                       margin=_CHEETAH_UP_HEIGHT / 2)

        def _one_foot_stand(self, physics, foot):
            z = (physics.named.data.xpos["torso", "z"] + physics.named.data.xpos[foot, "z"]) / 2
            height = tol(z, bounds=(_CHEETAH_UP_HEIGHT, _INF), margin=_CHEETAH_UP_HEIGHT / 2)
            still = tol(physics.speed(), bounds=(-self._move_speed, self._move_speed),
                        margin=self._move_speed, value_at_margin=0, sigmoid="linear")
            return (5 * height + still) / 6

        def _one_foot_run(self, physics, foot):
            up = (3 * self._up(physics, foot) + 2 * self._up(physics, "torso")) / 5
            fast = tol(physics.speed(), bounds=(self._move_speed, _INF), margin=self._move_speed,
                       value_at_margin=0, sigmoid="linear")
            return up * (5 * fast + 1) / 6

        def get_reward(self, physics):
            if self._goal == "run-backwards":
                return tol(physics.speed(), bounds=(-_INF, -self._move_speed), margin=self._move_speed,
                           value_at_margin=0, sigmoid="linear")
            if self._goal == "run-front":
                return self._one_foot_run(physics, "bfoot")
            if self._goal == "run-back":
                return self._one_foot_run(physics, "ffoot")
            if self._goal == "jump":
                return (self._one_foot_stand(physics, "bfoot") + self._one_foot_stand(physics, "ffoot")) / 2
            raise ValueError(f"unknown cheetah goal {self._goal!r}")

    class HopperBackwards(hopper.Hopper):
        """dm_control's hopper rewarded for hopping in -x."""

        def __init__(self, random=None):
            super().__init__(hopping=None, random=random)

        def get_reward(self, physics):
            standing = tol(physics.height(), (_HOPPER_STAND_HEIGHT, 2))
            hopping = tol(physics.speed(), bounds=(-_INF, -_HOPPER_BACKWARDS_SPEED / 2),
                          margin=_HOPPER_BACKWARDS_SPEED / 4, value_at_margin=0.5, sigmoid="linear")
            return standing * hopping

    return dict(walker=(walker, WalkerBackwards), cheetah=(cheetah, CheetahVariant),
                hopper=(hopper, HopperBackwards))


def _spin_classes(tol):
    """Pendulum and cup spinning tasks (``tol``: dm_control's ``rewards.tolerance``)."""
    from dm_control.suite import ball_in_cup, base, pendulum

    class PendulumSpin(pendulum.SwingUp):
        """dm_control's pendulum swing-up start, rewarded for spinning fast."""

        def get_reward(self, physics):
            return tol(np.linalg.norm(physics.angular_velocity()), bounds=(_PENDULUM_SPIN_SPEED, _INF),
                       margin=_PENDULUM_SPIN_SPEED / 2, value_at_margin=0.5, sigmoid="linear")

    class CupSpin(ball_in_cup.BallInCup):
        """Ball-in-cup rewarded for swinging the ball fast and far around the cup."""

        def initialize_episode(self, physics):
            may_start_outside = self.random.uniform() < _CUP_OUT_OF_TARGET_P
            while True:
                physics.named.data.qpos["ball_x"] = self.random.uniform(-.2, .2)
                physics.named.data.qpos["ball_z"] = self.random.uniform(.2, .5)
                physics.after_reset()
                if physics.data.ncon == 0 and (bool(physics.in_target()) or may_start_outside):
                    break
            base.Task.initialize_episode(self, physics)

        def get_reward(self, physics):
            dist = np.linalg.norm(physics.ball_to_target())
            qvel = physics.named.data.qvel
            speed = np.linalg.norm([abs(qvel["ball_x"]), abs(qvel["ball_z"])])
            far = tol(dist, bounds=(_CUP_SPIN_DISTANCE, _INF), margin=_CUP_SPIN_DISTANCE / 2,
                      value_at_margin=0.5, sigmoid="linear")
            fast = tol(speed, bounds=(_CUP_SPIN_SPEED, _INF), margin=_CUP_SPIN_SPEED / 2,
                       value_at_margin=0.5, sigmoid="linear")
            return (1 - physics.in_target()) * (far + 2 * fast) / 3

    return dict(pendulum=(pendulum, PendulumSpin), cup=(ball_in_cup, CupSpin))


def load_custom(name: str, random=None):
    """A ``dm_control.rl.control.Environment`` of custom task ``name`` (in :data:`CUSTOM_TASKS`).

    Args:
        name: official task name, e.g. ``"cheetah-run-backwards"``.
        random: the task's random state (an int seed, a ``numpy.random.RandomState`` or None).
    Raises:
        ValueError: ``name`` is not a custom task defined here (the message lists them and
            says why a refused one is refused).
    """
    from dm_control.rl import control

    if name not in CUSTOM_TASKS:
        why = f" ({REFUSED[name]})" if name in REFUSED else ""
        raise ValueError(f"custom DMControl task {name!r} is not defined{why}; defined: {list(CUSTOM_TASKS)}")
    domain = name.split("-", 1)[0]
    if domain == "reacher":
        from tdmpc2core.envs.dmcontrol_reacher import load_reacher_three

        return load_reacher_three(name, random=random)
    module, cls = _classes()[domain]
    if domain == "walker":
        speed = module._WALK_SPEED if name == "walker-walk-backwards" else module._RUN_SPEED
        physics = module.Physics.from_xml_string(*_model("walker"))
        task = cls(move_speed=speed, random=random)
        return control.Environment(physics, task, control_timestep=module._CONTROL_TIMESTEP)
    if domain == "cheetah":
        goal = name[len("cheetah-"):]
        speed = {"run-backwards": module._RUN_SPEED * 0.8, "run-front": module._RUN_SPEED * 0.6,
                 "run-back": module._RUN_SPEED * 0.6, "jump": _CHEETAH_STAND_SPEED}[goal]
        physics = module.Physics.from_xml_string(*_model("cheetah"))
        return control.Environment(physics, cls(goal, speed, random=random))
    if domain == "hopper":
        physics = module.Physics.from_xml_string(*_model("hopper"))
        return control.Environment(physics, cls(random=random), control_timestep=module._CONTROL_TIMESTEP)
    if domain == "pendulum":
        physics = module.Physics.from_xml_string(*_model("pendulum"))
        return control.Environment(physics, cls(random=random))
    # cup-spin
    physics = module.Physics.from_xml_string(*_model("ball_in_cup"))
    return control.Environment(physics, cls(random=random), control_timestep=module._CONTROL_TIMESTEP)
