"""Environment settings (``env_params``): what each built-in suite accepts, checked as plain Python.

An environment setting changes the dynamics or the episode of a task (a control step, a time
limit, a physical constant), so it is part of the task: the pipeline sets it per task
(``env_params:`` in a task's settings, docs/pipeline.md), the run records it (``run.json``,
the agent's ``config``), the episode dataset's task table carries it, and every rebuild of the
task (the multi-task agent's evaluation) passes it again.

The checks here need no JAX and no simulator (a cluster login node checks a configuration with
``snakemake -n``): the accepted keys and their defaults are tables read off the installed
packages (gymnax 1.0.1, brax 0.14.2, playground 0.2.0), which ``tests/test_env_settings.py``
compares with the packages themselves. A setting is given as a JSON-like mapping; its
canonical form (:func:`canonical`: a plain dict of JSON values, tuples as lists) is what is
recorded and what rebuilds the env.

Per suite (:attr:`tdmpc2core.envs.registry.Suite.check_params`):

* gymnax: fields of the env's ``EnvParams`` (:data:`GYMNAX_PARAMS`), each of its default's
  type (an int where the default is an int, a number where it is a float, a bool where it is
  a bool); ``max_steps_in_episode`` (>= 1) is the env's own time limit in simulator steps.
* Brax: keyword arguments of the env's constructor (:data:`BRAX_PARAMS`), among them
  ``backend`` (one of :data:`BRAX_BACKENDS`) and ``n_frames`` (physics steps per simulator
  step, >= 1).
* Playground: extra ``config_overrides`` (:data:`PLAYGROUND_KEYS`): ``ctrl_dt`` and ``sim_dt``
  (seconds, > 0; the control step must be a whole number >= 1 of physics steps, since
  Playground steps ``round(ctrl_dt / sim_dt)`` of them, defaults in :data:`PLAYGROUND_DT`),
  ``naconmax`` and ``njmax`` (ints >= 0, MuJoCo Warp's contact and constraint buffers) and
  ``vision`` (false only). ``impl``, ``action_repeat`` and ``episode_length`` belong to the
  wrapper (``backend``, ``action_repeat``, ``episode_length``).
* dm_control: none. The official construction (``suite.load(domain, task,
  task_kwargs={"random": seed})``, tdmpc2/envs/dmcontrol.py at 5f6fade) is the paper's
  protocol; the episode length and the action repeat are the task settings of the same names.
"""
from __future__ import annotations

import difflib
import json
import math
from typing import Any, Mapping, Optional

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

#: Brax 0.14.2: the keyword arguments every registry env passes on to ``PipelineEnv``
BRAX_PIPELINE_KEYS = ("n_frames", "debug")
#: Brax 0.14.2: registry name -> the keyword arguments of its constructor (with those of
#: :data:`BRAX_PIPELINE_KEYS`, which its ``**kwargs`` passes on)
BRAX_PARAMS: dict[str, tuple[str, ...]] = {
    "ant": ("ctrl_cost_weight", "use_contact_forces", "contact_cost_weight", "healthy_reward",
            "terminate_when_unhealthy", "healthy_z_range", "contact_force_range", "reset_noise_scale",
            "exclude_current_positions_from_observation", "backend"),
    "halfcheetah": ("forward_reward_weight", "ctrl_cost_weight", "reset_noise_scale",
                    "exclude_current_positions_from_observation", "backend"),
    "hopper": ("forward_reward_weight", "ctrl_cost_weight", "healthy_reward", "terminate_when_unhealthy",
               "healthy_state_range", "healthy_z_range", "healthy_angle_range", "reset_noise_scale",
               "exclude_current_positions_from_observation", "backend"),
    "humanoid": ("forward_reward_weight", "ctrl_cost_weight", "healthy_reward", "terminate_when_unhealthy",
                 "healthy_z_range", "reset_noise_scale", "exclude_current_positions_from_observation", "backend"),
    "humanoidstandup": ("backend",),
    "inverted_pendulum": ("backend",),
    "inverted_double_pendulum": ("backend",),
    "pusher": ("backend",),
    "reacher": ("backend",),
    "swimmer": ("forward_reward_weight", "ctrl_cost_weight", "reset_noise_scale",
                "exclude_current_positions_from_observation", "backend"),
    "walker2d": ("forward_reward_weight", "ctrl_cost_weight", "healthy_reward", "terminate_when_unhealthy",
                 "healthy_z_range", "healthy_angle_range", "reset_noise_scale",
                 "exclude_current_positions_from_observation", "backend"),
}
#: Brax 0.14.2's physics pipelines
BRAX_BACKENDS = ("generalized", "positional", "spring", "mjx")

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

DMCONTROL_NONE = ("dm_control tasks take none (the official construction, suite.load(domain, task, "
                  "task_kwargs={'random': seed}), is the paper's protocol); set the episode length with "
                  "episode_length and the action repeat with action_repeat")


def _tolist(value):
    """A numpy or JAX scalar or array as Python data (json.dumps' ``default``); else TypeError."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} {value!r} is not plain data")


def canonical(env_params, env_id: str = "") -> dict:
    """``env_params`` as recorded: a plain dict of JSON values (tuples become lists, numpy and
    JAX scalars Python numbers; keys strings), a copy. None gives ``{}``.

    Raises:
        ValueError: not a mapping, a key that is not a string, or a value JSON cannot hold
            (one line naming the env id and the value).
    """
    if env_params is None:
        return {}
    where = f"env_params for {env_id!r}" if env_id else "env_params"
    if not isinstance(env_params, Mapping):
        raise ValueError(f"{where} must be a mapping of setting -> value, got {type(env_params).__name__}")
    bad = [k for k in env_params if not isinstance(k, str)]
    if bad:
        raise ValueError(f"{where}: keys must be strings, got {bad[0]!r}")
    try:
        return json.loads(json.dumps(dict(env_params), allow_nan=False, default=_tolist))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {dict(env_params)!r} is not plain data (numbers, bools, strings, lists, "
                         f"mappings; finite numbers): {exc}") from None


def _unknown(env_id: str, suite: str, key: str, accepted) -> ValueError:
    close = difflib.get_close_matches(key, list(accepted), n=1)
    return ValueError(f"env_params for {env_id!r} ({suite}): unknown key {key!r}"
                      + (f" (did you mean {close[0]!r}?)" if close else "")
                      + f"; accepted: {', '.join(accepted) or 'none'}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def check_gymnax(env_id: str, env_params: Mapping) -> dict:
    """The canonical gymnax ``env_params`` of ``env_id`` (module docstring). Raises ValueError."""
    params = canonical(env_params, env_id)
    fields = GYMNAX_PARAMS.get(env_id, {})
    for key, value in params.items():
        if key not in fields:
            raise _unknown(env_id, "gymnax", key, list(fields))
        default = fields[key]
        if isinstance(default, bool):
            ok, want = isinstance(value, bool), "true or false"
        elif isinstance(default, int):
            ok, want = _is_int(value) and value >= 1, "an integer >= 1 (simulator steps)"
        else:
            ok, want = _is_number(value), "a finite number"
        if not ok:
            raise ValueError(f"env_params for {env_id!r} (gymnax): {key}={value!r}; need {want} "
                             f"(default {default!r})")
    return params


def check_brax(env_id: str, env_params: Mapping) -> dict:
    """The canonical Brax ``env_params`` (constructor keyword arguments). Raises ValueError."""
    params = canonical(env_params, env_id)
    accepted = BRAX_PARAMS.get(env_id, ()) + BRAX_PIPELINE_KEYS
    for key, value in params.items():
        if key not in accepted:
            raise _unknown(env_id, "brax", key, accepted)
    if "backend" in params and params["backend"] not in BRAX_BACKENDS:
        raise ValueError(f"env_params for {env_id!r} (brax): backend={params['backend']!r}; "
                         f"accepted: {list(BRAX_BACKENDS)}")
    if "n_frames" in params and not (_is_int(params["n_frames"]) and params["n_frames"] >= 1):
        raise ValueError(f"env_params for {env_id!r} (brax): n_frames={params['n_frames']!r}; need an integer >= 1 "
                         "(physics steps per simulator step)")
    if "debug" in params and not isinstance(params["debug"], bool):
        raise ValueError(f"env_params for {env_id!r} (brax): debug={params['debug']!r}; need true or false")
    return params


def check_playground(env_id: str, env_params: Mapping) -> dict:
    """The canonical Playground ``env_params`` (extra ``config_overrides``). Raises ValueError."""
    params = canonical(env_params, env_id)
    reserved = [k for k in params if k in PLAYGROUND_RESERVED]
    if reserved:
        raise ValueError(f"env_params for {env_id!r} (playground) may not override {reserved}: the wrapper owns "
                         "action repeat and the time limit, and the physics impl is chosen with backend=")
    for key, value in params.items():
        if key not in PLAYGROUND_KEYS:
            raise _unknown(env_id, "playground", key, PLAYGROUND_KEYS)
        if key in ("ctrl_dt", "sim_dt") and not (_is_number(value) and value > 0):
            raise ValueError(f"env_params for {env_id!r} (playground): {key}={value!r}; need a number > 0 (seconds)")
        if key in ("naconmax", "njmax") and not (_is_int(value) and value >= 0):
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


def check_dmcontrol(env_id: str, env_params: Mapping) -> dict:
    """dm_control tasks take no ``env_params``: ``{}`` for an empty mapping, else ValueError."""
    params = canonical(env_params, env_id)
    if params:
        raise ValueError(f"env_params={params!r} for {env_id!r}: {DMCONTROL_NONE}")
    return params


def plain(value) -> Any:
    """A numpy / JAX scalar or array as Python data (a scalar, or nested lists), for the record."""
    import numpy as np

    arr = np.asarray(value)
    return arr.item() if arr.ndim == 0 else arr.tolist()


def gymnax_record(params, default_params) -> dict:
    """The fields of a gymnax ``EnvParams`` that differ from the env's defaults, as plain data
    (what rebuilds the env with :func:`tdmpc2core.envs.make_env`)."""
    import dataclasses

    out = {}
    for f in dataclasses.fields(params):
        value, default = plain(getattr(params, f.name)), plain(getattr(default_params, f.name))
        if value != default:
            out[f.name] = value
    return out


def describe(env_params: Optional[Mapping]) -> str:
    """``env_params`` in one short line for logs: ``ctrl_dt=0.02, sim_dt=0.01`` (``defaults`` if none)."""
    if not env_params:
        return "defaults"
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(env_params.items()))


__all__ = ["GYMNAX_PARAMS", "GYMNAX_TIME_LIMIT_KEY", "BRAX_PARAMS", "BRAX_PIPELINE_KEYS", "BRAX_BACKENDS",
           "PLAYGROUND_KEYS", "PLAYGROUND_DT", "PLAYGROUND_RESERVED", "DMCONTROL_NONE", "canonical", "check_gymnax",
           "check_brax", "check_playground", "check_dmcontrol", "plain", "gymnax_record", "describe"]
