"""The accepted environment ids and their time limits, as plain Python (no JAX, no suite import).

Dispatching an id, listing the ids and computing a task's time limit T need no import of a
suite's package nor of JAX, so a machine without JAX (a cluster login node running
``snakemake -n``) can check a configuration. The functions ask the suite registry
(:mod:`.registry`); each suite's id table is in its module (:mod:`.suites`), re-exported here
under its older names (``GYMNAX_CONTINUOUS``, ``BRAX_ENVS``, ``PLAYGROUND_DMC_ENVS``, ...).
"""
from __future__ import annotations

from tdmpc2core.envs.registry import check_repeat_and_length, suite_for, suites  # noqa: F401 (re-exported)
from tdmpc2core.envs.suites.brax import BRAX_ENVS  # noqa: F401 (re-exported: the suites' id tables)
from tdmpc2core.envs.suites.gymnax import GYMNAX_CONTINUOUS, GYMNAX_DISCRETE, GYMNAX_MAX_STEPS, discrete_error  # noqa: F401
from tdmpc2core.envs.suites.playground import PLAYGROUND_DMC_ENVS  # noqa: F401


def list_env_ids() -> dict[str, list[str]]:
    """Accepted ids per registered suite: ``{"gymnax": [...], "brax": [...], "playground": [...],
    "dmcontrol": [...]}`` (then any suite registered at run time; :mod:`.registry`).

    gymnax: continuous-action ids of gymnax 1.0.1; brax: brax 0.14.2 registry names with
    flat observations; playground: every MuJoCo Playground DM Control suite task;
    dmcontrol: ``"dmc:"`` + the official TD-MPC2 name of every dm_control 1.0.50 suite task
    but lqr, and of the official custom tasks defined here (``dmc:cheetah-run``,
    ``dmc:cup-catch``, ``dmc:walker-walk-backwards``; :mod:`.dmcontrol_ids`).
    """
    return {s.name: list(s.ids) for s in suites()}


def suite_of(env_id: str) -> str:
    """Suite name of an accepted id (no import of the suite): ``suite_for(env_id).name``.

    Raises:
        ValueError: discrete gymnax id or unknown id (message lists the accepted ids); a
            ``dmc:`` id that is unknown or refused (message says why, with close matches
            and the accepted dm_control ids).
    """
    return suite_for(env_id).name


def default_action_repeat(env_id: str) -> int:
    """The action repeat ``make_env`` uses when none is given: the suite's
    (:attr:`.registry.Suite.default_action_repeat`: 2 for the DM Control tasks, the paper's
    protocol, spec §2; 1 for gymnax and Brax).

    Raises:
        ValueError: unknown or discrete-action id.
    """
    return suite_for(env_id).default_action_repeat


def time_limit(env_id: str, *, action_repeat: int | None = None, episode_length: int | None = None,
               env_params=None) -> int:
    """T, the time limit in agent steps, of the environment ``make_env`` would build with
    these arguments, without building it.

    A suite with its own time limit (gymnax, Meta-World, MyoSuite: ``own_time_limit``): that
    limit ``// action_repeat`` (gymnax: ``GYMNAX_MAX_STEPS[env_id]``, or
    ``env_params["max_steps_in_episode"]`` when a mapping sets it); Brax, Playground and
    dm_control: ``episode_length // action_repeat`` (``episode_length`` None: 1000).

    Raises:
        ValueError: an id :func:`suite_of` refuses, a bad ``action_repeat`` or
          ``episode_length`` (:func:`check_repeat_and_length`), an own time limit shorter than
          ``action_repeat``, or an ``episode_length`` given for a suite with its own time
          limit that is not that limit (one line naming the limit: it would not take effect).
    """
    suite = suite_for(env_id)
    return suite.time_limit(env_id, suite.action_repeat(action_repeat), episode_length, env_params)


def sim_episode_length(env_id: str, *, action_repeat: int | None = None, episode_length: int | None = None,
                       env_params=None) -> int:
    """The simulator steps of an episode that take effect for these arguments (T x
    ``action_repeat``, :func:`time_limit`): the ``episode_length`` a run and the workflow's
    resolved configuration record (gymnax's Pendulum-v1: 200, whatever the default). Plain
    Python. Raises ValueError as :func:`time_limit`."""
    suite = suite_for(env_id)
    return suite.sim_episode_length(env_id, suite.action_repeat(action_repeat), episode_length, env_params)


def check_env_params(env_id: str, env_params) -> dict:
    """The canonical environment settings of ``env_id`` (a plain dict of JSON values; ``{}``
    for None), checked by its suite without building anything (:mod:`tdmpc2core.envs.params`).

    Raises:
        ValueError: an id :func:`suite_of` refuses, or settings the suite does not accept (one
          line naming the key, the env id and what is accepted).
    """
    return suite_for(env_id).env_params(env_id, env_params)


def __getattr__(name):
    # SUITES and PAPER_ACTION_REPEAT follow the registry (a suite registered at run time included)
    if name == "SUITES":
        return tuple(s.name for s in suites())
    if name == "PAPER_ACTION_REPEAT":
        #: The paper's action repeat per suite (spec §2): DMC tasks (Playground's ports and
        #: dm_control) repeat each action twice (1000-step episodes are T = 500 agent steps);
        #: gymnax and Brax are not in the paper and take 1.
        return {s.name: s.default_action_repeat for s in suites()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SUITES", "GYMNAX_CONTINUOUS", "GYMNAX_DISCRETE", "GYMNAX_MAX_STEPS", "BRAX_ENVS",
           "PLAYGROUND_DMC_ENVS", "PAPER_ACTION_REPEAT", "list_env_ids", "suite_of", "time_limit", "sim_episode_length",
           "check_env_params",
           "default_action_repeat", "check_repeat_and_length",
           "discrete_error"]
