"""The Brax suite: Brax 0.14.2 registry envs with flat observations (pure JAX; the adapter
:mod:`tdmpc2core.envs.brax_env`), with its ids, environment settings, renderer and registry entry.

Not in the paper: action repeat 1 by default; Brax's physics pipeline is chosen with
``env_params={"backend": ...}``, not ``backend``; ``env_params`` are the env constructor's
keyword arguments (:data:`BRAX_PARAMS`), among them ``backend`` (one of :data:`BRAX_BACKENDS`)
and ``n_frames`` (physics steps per simulator step, >= 1). The tables were read off Brax 0.14.2;
``tests/test_env_settings.py`` compares them with the installed package.
"""
from __future__ import annotations

from typing import Mapping

from tdmpc2core.envs.params import canonical, is_int, unknown_key_error
from tdmpc2core.envs.registry import Suite, SuiteReport

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



def check_brax(env_id: str, env_params: Mapping) -> dict:
    """The canonical Brax ``env_params`` (constructor keyword arguments). Raises ValueError."""
    params = canonical(env_params, env_id)
    accepted = BRAX_PARAMS.get(env_id, ()) + BRAX_PIPELINE_KEYS
    for key, value in params.items():
        if key not in accepted:
            raise unknown_key_error(env_id, "brax", key, accepted)
    if "backend" in params and params["backend"] not in BRAX_BACKENDS:
        raise ValueError(f"env_params for {env_id!r} (brax): backend={params['backend']!r}; "
                         f"accepted: {list(BRAX_BACKENDS)}")
    if "n_frames" in params and not (is_int(params["n_frames"]) and params["n_frames"] >= 1):
        raise ValueError(f"env_params for {env_id!r} (brax): n_frames={params['n_frames']!r}; need an integer >= 1 "
                         "(physics steps per simulator step)")
    if "debug" in params and not isinstance(params["debug"], bool):
        raise ValueError(f"env_params for {env_id!r} (brax): debug={params['debug']!r}; need true or false")
    return params


def _frames(env):
    """The evaluation videos' renderer: ``mujoco.Renderer`` on the system's ``mj_model``
    (:func:`tdmpc2core.envs.render.mj_qpos_source`)."""
    from tdmpc2core.envs.render import NoRendererError, mj_qpos_source

    import jax.numpy as jnp

    b = env.brax_env
    model = getattr(b.sys, "mj_model", None)
    if model is None:
        raise NoRendererError(f"{env.spec.env_id}: this Brax system has no mj_model to render")

    def state_of(inner):
        z = jnp.zeros((0,), jnp.float32)
        return inner.pipeline_state.q, z, z

    return mj_qpos_source(model, state_of, float(b.dt), "mujoco.Renderer on the Brax system's mj_model")


def _build(env_id, *, action_repeat, episode_length, env_params, backend):
    from tdmpc2core.envs.brax_env import BraxEnv

    return BraxEnv(env_id, suite=SUITE.name, can_terminate=BRAX_ENVS[env_id], action_repeat=action_repeat,
                   episode_length=episode_length, env_params=env_params)


SUITE = Suite(
    name="brax",
    ids=tuple(BRAX_ENVS),
    build=_build,
    requires=("brax", "mujoco", "mujoco-mjx"),
    default_action_repeat=1,
    check_params=check_brax,
    backend_hint=" (choose Brax's pipeline with env_params={'backend': ...})",
    report=SuiteReport(label="Brax", rank=3),
    frames=_frames,  # evaluation videos
)
