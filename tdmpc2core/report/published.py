"""The published DMControl learning curves packaged with tdmpc2core, and the name map.

Source: ``tdmpc2core/resources/published_dmc_curves.csv``, computed from the ``results/``
folder of the official repository (nicklashansen/tdmpc2), whose curves are the paper's
(Hansen, Su, Wang, ICLR 2024): TD-MPC2 (5M model, state observations) and the paper's
baselines TD-MPC, SAC and DreamerV3 on the 39 DMControl tasks, averaged over seeds.

Columns: ``method`` (``tdmpc2``, ``tdmpc``, ``sac``, ``dreamerv3``), ``task`` (dm_control
name, e.g. ``cartpole-balance``), ``env_steps`` (simulator steps = env frames, the paper's
x axis), ``agent_steps`` (env_steps / 2: the paper's action repeat of 2), ``mean_return``,
``sd_return`` (population sd over seeds) and ``n_seeds``.

The published success curves of the Meta-World (``mw-*``, 50 tasks) and MyoSuite
(``myo-hand-*``, 10 tasks) domains: ``tdmpc2core/resources/published_success_curves.csv``,
derived by ``tools/derive_published_success.py`` from the same ``results/`` folder (at e9f5932):
columns ``method``, ``task`` (the published name), ``domain`` (``Meta-World``/``MyoSuite``),
``env_steps`` (simulator steps, the files' ``step``), ``agent_steps`` (env_steps / the official
wrapper's action repeat: 2 for Meta-World, 1 for MyoSuite), ``mean_success`` and
``sd_success`` (a fraction in [0, 1]: the mean and population sd over seeds of each seed's
evaluation success rate, the official rule: ``info['success']`` at each episode's last step)
and ``n_seeds``.

The published curves of TD-MPC2 trained from pixels (``obs=rgb``, 64x64 renders, the 5M model)
on 12 DMControl tasks: ``tdmpc2core/resources/published_pixel_curves.csv``, derived by
``tools/derive_published_pixels.py`` from the same ``results/`` folder (``tdmpc2-pixels/``):
columns ``method`` (``tdmpc2`` only: the folder has no baseline from pixels), ``task`` (the
published name, ``<dm_control task>-pixels``, e.g. ``walker-walk-pixels``, so that it never
collides with the state curve of the task), ``dmc_task``, ``env_steps``, ``agent_steps``
(env_steps / 2), ``mean_return``, ``sd_return``, ``n_seeds``. Their domain is
``DMControl pixels``, aggregated apart from the state curves.

The spread of the published TD-MPC2 seeds of the DMControl state curves at their first points
(0, 100,000 and 200,000 simulator steps): ``tdmpc2core/resources/published_dmc_seed_range.csv``,
derived by ``tools/derive_published_seed_range.py`` from the same ``results/`` folder
(``tdmpc2/``): columns ``method`` (``tdmpc2``), ``task``, ``env_steps``, ``agent_steps``,
``n_seeds``, ``mean_return``, ``min_return`` and ``max_return`` (over the published seeds);
read by :func:`seed_range` for the reproduction of issue 45 (tdmpc2core/report/reproduction.py).

The report reads all three curve tables through :func:`score_curve`: one method's curve of one task in the
report's score unit, the return for DMControl and the success rate in percent (0-100) for a
success task (:func:`score_kind`).

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
_PIXEL_COLUMNS = ("method", "task", "dmc_task", "env_steps", "agent_steps", "mean_return", "sd_return", "n_seeds")
_RANGE_COLUMNS = ("method", "task", "env_steps", "agent_steps", "n_seeds", "mean_return", "min_return", "max_return")
_SUCCESS_COLUMNS = ("method", "task", "domain", "env_steps", "agent_steps", "mean_success", "sd_success", "n_seeds")

#: the domains of the published curves, in the order the report shows them, and what their
#: score is: DMControl by return, Meta-World and MyoSuite by success rate (the paper's). The
#: domains are named as the paper names them (not suite names: a domain is the published
#: curves' grouping, whichever suite runs its tasks)
DOMAINS = ("DMControl", "DMControl pixels", "Meta-World", "MyoSuite")
DOMAIN_LABELS = {**{d: d for d in DOMAINS}, "DMControl pixels": "DMControl from pixels"}
DOMAIN_SCORES = dict(zip(DOMAINS, ("return", "return", "success", "success")))
#: the official wrappers' action repeat per domain (agent_steps = env_steps / repeat)
DOMAIN_ACTION_REPEAT = dict(zip(DOMAINS, (2, 2, 2, 1)))
#: the suffix of the published names of the pixel curves (``walker-walk-pixels``)
PIXEL_SUFFIX = "-pixels"


def dmc_name(playground_name: str) -> Optional[str]:
    """The dm_control name of a Playground DM Control task, or None if it has no published curve."""
    return PLAYGROUND_TO_DMC.get(playground_name)


def _read_resource(name: str, columns) -> "pd.DataFrame":
    """One of the package's published-curve resources (``resources/<name>``), its columns
    checked. Raises ValueError naming the file and the missing columns."""
    import pandas as pd

    with resources.files("tdmpc2core").joinpath(f"resources/{name}").open("r") as fh:
        df = pd.read_csv(fh)
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{name} lacks columns {missing}; has {list(df.columns)}")
    return df


def table_text(columns, rows) -> str:
    """A packaged table's CSV text (the form :func:`_read_resource` reads): the header
    ``columns`` then ``rows`` (sequences of cells), ``\\n`` line ends. Used by the tools that
    derive the tables from the official ``results/`` folder (tools/derive_published_*.py)."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    w.writerows(rows)
    return buf.getvalue()


def derive_main(derive, out, root, argv=None) -> None:
    """The command line of a tools/derive_published_*.py script: ``derive(results folder)`` (the
    first argument, default ``shared/reference/tdmpc2_results`` beside the repository ``root``)
    written to the packaged table ``out``."""
    import sys
    from pathlib import Path

    argv = sys.argv[1:] if argv is None else argv
    results = Path(argv[0]) if argv else Path(root).parent / "shared" / "reference" / "tdmpc2_results"
    Path(out).write_text(derive(results))
    print(f"wrote {out}")


@functools.lru_cache(maxsize=1)
def _load():
    return _read_resource("published_dmc_curves.csv", _COLUMNS)


@functools.lru_cache(maxsize=1)
def _load_success():
    return _read_resource("published_success_curves.csv", _SUCCESS_COLUMNS)


@functools.lru_cache(maxsize=1)
def _load_pixels():
    return _read_resource("published_pixel_curves.csv", _PIXEL_COLUMNS)


@functools.lru_cache(maxsize=1)
def _load_range():
    return _read_resource("published_dmc_seed_range.csv", _RANGE_COLUMNS)


def seed_range(task: Optional[str] = None):
    """The published TD-MPC2 seeds' mean, lowest and highest return per DMControl state task and
    published point up to 200,000 simulator steps (a copy; columns ``task``, ``env_steps``,
    ``agent_steps``, ``n_seeds``, ``mean_return``, ``min_return``, ``max_return``; returns on
    DMControl's 0-1000 scale, steps as in :func:`load_published`), optionally of one task.

    Raises:
      KeyError: a task without a published DMControl state curve (naming the accepted ones).
    """
    df = _load_range()
    if task is not None:
        if task not in set(df["task"]):
            raise KeyError(f"no published seed range for task {task!r}; accepted: {sorted(set(df['task']))}")
        df = df[df["task"] == task]
    cols = ["task", "env_steps", "agent_steps", "n_seeds", "mean_return", "min_return", "max_return"]
    return df[cols].sort_values(["task", "env_steps"]).reset_index(drop=True)


def pixel_tasks() -> list[str]:
    """The published names of the pixel curves (``<task>-pixels``, sorted)."""
    return sorted(_load_pixels()["task"].unique().tolist())


@functools.lru_cache(maxsize=1)
def _success_tasks() -> dict:
    df = _load_success()
    return dict(zip(df["task"], df["domain"]))


def domain_of(task: str) -> str:
    """The domain of a published task name (``"DMControl"``, ``"DMControl pixels"``,
    ``"Meta-World"``, ``"MyoSuite"``).

    Raises:
      KeyError: no published curve of that name (naming the accepted ones).
    """
    dom = _success_tasks().get(task)
    if dom is not None:
        return dom
    if task in set(_load()["task"]):
        return DOMAINS[0]
    if task in set(_load_pixels()["task"]):
        return "DMControl pixels"
    raise KeyError(f"no published curve for task {task!r}; accepted: {published_tasks()}")


def score_kind(task: str) -> str:
    """``"return"`` or ``"success"``: what the published curves of ``task`` report."""
    return DOMAIN_SCORES[domain_of(task)]


def published_action_repeat(task: str) -> int:
    """The official wrapper's action repeat of the published task (2: DMControl, Meta-World;
    1: MyoSuite), the factor between its ``env_steps`` and ``agent_steps``."""
    return DOMAIN_ACTION_REPEAT[domain_of(task)]


def load_success(method: Optional[str] = None, task: Optional[str] = None):
    """The published success curves as a DataFrame (a copy; columns of the resource),
    optionally one method and/or one task.

    Raises:
      KeyError: an unknown method, or a task without a published success curve.
    """
    df = _load_success()
    if method is not None:
        if method not in METHODS:
            raise KeyError(f"unknown published method {method!r}; accepted: {list(METHODS)}")
        df = df[df["method"] == method]
    if task is not None:
        if task not in _success_tasks():
            raise KeyError(f"no published curve for task {task!r} among the success curves; accepted: {sorted(_success_tasks())}")
        df = df[df["task"] == task]
    return df.sort_values(["method", "task", "agent_steps"]).reset_index(drop=True)


def score_curve(task: str, method: str = "tdmpc2"):
    """One method's published curve of ``task`` in the report's score unit: columns
    ``agent_steps``, ``env_steps``, ``mean``, ``sd``, ``n_seeds``; ``mean``/``sd`` the return
    (DMControl, from states or pixels) or the success rate in percent, 0-100 (Meta-World,
    MyoSuite). An empty frame when ``method`` has no curve of the task (every method but
    ``tdmpc2`` for the pixel curves).

    Raises:
      KeyError: an unknown method or task.
    """
    if score_kind(task) == "success":
        c = load_success(method, task)
        out = c[["agent_steps", "env_steps"]].copy()
        out["mean"], out["sd"] = 100.0 * c["mean_success"], 100.0 * c["sd_success"]
    elif domain_of(task) == "DMControl pixels":
        if method not in METHODS:
            raise KeyError(f"unknown published method {method!r}; accepted: {list(METHODS)}")
        df = _load_pixels()
        c = df[(df["method"] == method) & (df["task"] == task)].sort_values("agent_steps")
        out = c[["agent_steps", "env_steps"]].copy()
        out["mean"], out["sd"] = c["mean_return"], c["sd_return"]
    else:
        c = load_published(method, task)
        out = c[["agent_steps", "env_steps"]].copy()
        out["mean"], out["sd"] = c["mean_return"], c["sd_return"]
    out["n_seeds"] = c["n_seeds"]
    return out.reset_index(drop=True)


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
        if task not in set(_load()["task"]):
            raise KeyError(f"no published curve for task {task!r} among the DMControl return curves; accepted: {dmc_tasks()}")
        df = df[df["task"] == task]
    return df.sort_values(["method", "task", "agent_steps"]).reset_index(drop=True)


def dmc_tasks() -> list[str]:
    """The dm_control names that have a published return curve (sorted)."""
    return sorted(_load()["task"].unique().tolist())


def published_tasks() -> list[str]:
    """Every published task name (sorted): the dm_control names (return curves), the pixel
    curves' names (``<task>-pixels``: return curves from pixels) and the Meta-World /
    MyoSuite names (``mw-*``, ``myo-hand-*``: success curves)."""
    return sorted(set(_load()["task"]) | set(_success_tasks()) | set(pixel_tasks()))


def curve(task: str, method: str = "tdmpc2"):
    """One method's curve on one DMControl task: agent_steps, env_steps, mean_return,
    sd_return, n_seeds (a success task's: :func:`score_curve` or :func:`load_success`)."""
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
    "dmc_name", "load_published", "published_tasks", "curve", "final_point", "DOMAINS", "DOMAIN_LABELS",
    "DOMAIN_SCORES", "DOMAIN_ACTION_REPEAT", "domain_of", "score_kind", "published_action_repeat", "load_success",
    "score_curve", "dmc_tasks", "pixel_tasks", "PIXEL_SUFFIX", "seed_range",
]
