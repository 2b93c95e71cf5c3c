"""The published DMControl learning curves packaged with tdmpc2core, and the name map.

Source: ``tdmpc2core/resources/published_dmc_curves.csv``, computed from the ``results/``
folder of the official repository (nicklashansen/tdmpc2), whose curves are the paper's
(Hansen, Su, Wang, ICLR 2024): TD-MPC2 (5M model, state observations) and the paper's
baselines TD-MPC, SAC and DreamerV3 on the 39 DMControl tasks, averaged over seeds.

Columns: ``method`` (``tdmpc2``, ``tdmpc``, ``sac``, ``dreamerv3``), ``task`` (dm_control
name, e.g. ``cartpole-balance``), ``env_steps`` (simulator steps = env frames, the paper's
x axis), ``agent_steps`` (env_steps / 2: the paper's action repeat of 2), ``mean_return``,
``sd_return`` (population sd over seeds) and ``n_seeds``.

Only pandas is needed; nothing here imports JAX.
"""
from __future__ import annotations

import functools
from importlib import resources
from typing import Optional

from ..resources import PLAYGROUND_TO_DMC

#: The methods of the published file, in the order the tables show them.
METHODS = ("tdmpc2", "tdmpc", "sac", "dreamerv3")
METHOD_LABELS = {"tdmpc2": "TD-MPC2", "tdmpc": "TD-MPC", "sac": "SAC", "dreamerv3": "DreamerV3"}

#: The action repeat of the published DMC curves (agent_steps = env_steps / 2).
PUBLISHED_ACTION_REPEAT = 2

#: dm_control task name of a published curve -> its MuJoCo Playground task: the inverse of
#: tdmpc2core.resources.PLAYGROUND_TO_DMC (one table, also read by the registry's Playground suite)
DMC_TO_PLAYGROUND: dict[str, str] = {v: k for k, v in PLAYGROUND_TO_DMC.items()}

_COLUMNS = ("method", "task", "env_steps", "agent_steps", "mean_return", "sd_return", "n_seeds")


def dmc_name(playground_name: str) -> Optional[str]:
    """The dm_control name of a Playground DM Control task, or None if it has no published curve."""
    return PLAYGROUND_TO_DMC.get(playground_name)


@functools.lru_cache(maxsize=1)
def _load():
    import pandas as pd

    with resources.files("tdmpc2core").joinpath("resources/published_dmc_curves.csv").open("r") as fh:
        df = pd.read_csv(fh)
    missing = [c for c in _COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"published_dmc_curves.csv lacks columns {missing}; has {list(df.columns)}")
    return df


def load_published(method: Optional[str] = None, task: Optional[str] = None):
    """The published curves as a DataFrame (a copy), optionally one method and/or one task.

    Raises:
      KeyError: an unknown method or task, naming the accepted ones.
    """
    df = _load()
    if method is not None:
        if method not in METHODS:
            raise KeyError(f"unknown published method {method!r}; accepted: {list(METHODS)}")
        df = df[df["method"] == method]
    if task is not None:
        if task not in published_tasks():
            raise KeyError(f"no published curve for task {task!r}; accepted: {published_tasks()}")
        df = df[df["task"] == task]
    return df.sort_values(["method", "task", "agent_steps"]).reset_index(drop=True)


def published_tasks() -> list[str]:
    """The dm_control names that have a published curve (sorted)."""
    return sorted(_load()["task"].unique().tolist())


def curve(task: str, method: str = "tdmpc2"):
    """One method's curve on one task: agent_steps, env_steps, mean_return, sd_return, n_seeds."""
    return load_published(method, task)[["agent_steps", "env_steps", "mean_return", "sd_return", "n_seeds"]]


def final_point(task: str, method: str = "tdmpc2") -> dict:
    """The last published point of a curve: dict of agent_steps, env_steps, mean_return, sd_return."""
    row = curve(task, method).iloc[-1]
    return {
        "agent_steps": int(row["agent_steps"]),
        "env_steps": int(row["env_steps"]),
        "mean_return": float(row["mean_return"]),
        "sd_return": float(row["sd_return"]),
    }


__all__ = [
    "METHODS", "METHOD_LABELS", "PUBLISHED_ACTION_REPEAT", "PLAYGROUND_TO_DMC", "DMC_TO_PLAYGROUND",
    "dmc_name", "load_published", "published_tasks", "curve", "final_point",
]
