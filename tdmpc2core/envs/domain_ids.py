"""The Meta-World and MyoSuite task ids (plain Python: no JAX, no simulator imports).

Names as the official TD-MPC2 code gives them (nicklashansen/tdmpc2, ``tdmpc2/envs/metaworld.py``
and ``tdmpc2/envs/myosuite.py``): ``mw-<name>`` is Meta-World's ``<name>-v2-goal-observable``
(here ``<name>-v3-goal-observable``: the registry has only Meta-World 3.x; docs/deviations.md
E10), and ``myo-<name>`` one of ten MyoSuite hand tasks. The published curves name the MyoSuite
tasks ``myo-hand-<name>`` (:data:`MYOSUITE_PUBLISHED`) and the Meta-World ones as here.
"""
from __future__ import annotations

#: The 50 Meta-World tasks of the paper (mt80's Meta-World part), alphabetical
METAWORLD_TASKS: tuple[str, ...] = (
    "assembly", "basketball", "bin-picking", "box-close", "button-press", "button-press-topdown",
    "button-press-topdown-wall", "button-press-wall", "coffee-button", "coffee-pull", "coffee-push",
    "dial-turn", "disassemble", "door-close", "door-lock", "door-open", "door-unlock", "drawer-close",
    "drawer-open", "faucet-close", "faucet-open", "hammer", "hand-insert", "handle-press",
    "handle-press-side", "handle-pull", "handle-pull-side", "lever-pull", "peg-insert-side",
    "peg-unplug-side", "pick-out-of-hole", "pick-place", "pick-place-wall", "plate-slide",
    "plate-slide-back", "plate-slide-back-side", "plate-slide-side", "push", "push-back", "push-wall",
    "reach", "reach-wall", "shelf-place", "soccer", "stick-pull", "stick-push", "sweep", "sweep-into",
    "window-close", "window-open",
)
METAWORLD_PREFIX = "mw-"
#: mw-<name> ids, in :data:`METAWORLD_TASKS` order
METAWORLD_ENVS: tuple[str, ...] = tuple(METAWORLD_PREFIX + n for n in METAWORLD_TASKS)
#: the Meta-World version of the tasks (the paper's: v2)
METAWORLD_VERSION = "v3"


def metaworld_env_name(env_id: str) -> str:
    """Meta-World's env name of ``mw-<name>``: ``<name>-v3-goal-observable``."""
    return env_id[len(METAWORLD_PREFIX):] + f"-{METAWORLD_VERSION}-goal-observable"


#: official task id -> MyoSuite env id (the official mapping)
MYOSUITE_TASKS: dict[str, str] = {
    "myo-reach": "myoHandReachFixed-v0",
    "myo-reach-hard": "myoHandReachRandom-v0",
    "myo-pose": "myoHandPoseFixed-v0",
    "myo-pose-hard": "myoHandPoseRandom-v0",
    "myo-obj-hold": "myoHandObjHoldFixed-v0",
    "myo-obj-hold-hard": "myoHandObjHoldRandom-v0",
    "myo-key-turn": "myoHandKeyTurnFixed-v0",
    "myo-key-turn-hard": "myoHandKeyTurnRandom-v0",
    "myo-pen-twirl": "myoHandPenTwirlFixed-v0",
    "myo-pen-twirl-hard": "myoHandPenTwirlRandom-v0",
}
MYOSUITE_ENVS: tuple[str, ...] = tuple(MYOSUITE_TASKS)
#: id -> the name of its published curves (``myo-hand-<name>``)
MYOSUITE_PUBLISHED: dict[str, str] = {i: "myo-hand-" + i[len("myo-"):] for i in MYOSUITE_ENVS}
#: agent steps per episode in the official code (both suites), no early termination
DOMAIN_EPISODE_STEPS = 100
#: Meta-World 3.0.0's ``max_path_length``: its env raises ``ValueError: You must reset the env
#: manually once truncate==True`` at a step past it. The official wrapper's reset takes one
#: step (a zero action), so an episode may last at most MAX_PATH_LENGTH - 1 simulator steps.
MAX_PATH_LENGTH = 500

__all__ = ["METAWORLD_TASKS", "METAWORLD_PREFIX", "METAWORLD_ENVS", "METAWORLD_VERSION", "metaworld_env_name",
           "MYOSUITE_TASKS", "MYOSUITE_ENVS", "MYOSUITE_PUBLISHED", "DOMAIN_EPISODE_STEPS",
           "MAX_PATH_LENGTH"]
