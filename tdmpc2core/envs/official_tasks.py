"""The official multi-task task sets (mt30, mt80) as data, and which of their tasks run here.

Source: ``tdmpc2core/resources/official_task_sets.csv`` (read by :mod:`tdmpc2core.resources`),
the ``TASK_SET`` table of the official repository's ``tdmpc2/common/__init__.py``
(nicklashansen/tdmpc2 at 5f6fade; the file's SHA-256 is in ``OFFICIAL_TASK_SETS_SOURCE``). Task ``i`` of a multi-task checkpoint is the
``i``-th name of its set: the row of its task embedding and of its action mask.

Plain Python (no JAX, no dm_control), so the workflow can check a configuration that names
these tasks on a machine without them. Whether a task runs here is decided by the
dm_control ids (:mod:`tdmpc2core.envs.dmcontrol_ids`): all 30 of mt30's tasks (the two
three-link reachers on the model of :mod:`tdmpc2core.envs.dmcontrol_reacher`) and all 80 of
mt80's: the same 30 and its 50 Meta-World tasks (``mw-*``, the ``metaworld`` suite, which needs
the ``[metaworld]`` extra: without it they are unavailable, with that reason). :func:`env_id_of` gives a task's env id.
"""
from __future__ import annotations

import functools
from typing import Optional, Sequence, Union

from tdmpc2core.envs.dmcontrol_ids import DMCONTROL_ENVS, PREFIX, REFUSED_TASKS
from tdmpc2core.resources import OFFICIAL_TASK_SETS_SOURCE, official_task_sets


@functools.lru_cache(maxsize=1)
def _load() -> dict:
    return {"source": OFFICIAL_TASK_SETS_SOURCE,
            "task_sets": {name: [r["name"] for r in rows] for name, rows in official_task_sets().items()}}


def task_set_names() -> list[str]:
    """The official task-set names (``["mt30", "mt80"]``)."""
    return sorted(_load()["task_sets"])


def task_set(name: str) -> tuple[str, ...]:
    """The official task names of set ``name`` in the official order (task index order).

    Raises:
      KeyError: an unknown set, naming the accepted ones.
    """
    sets = _load()["task_sets"]
    if name not in sets:
        raise KeyError(f"unknown official task set {name!r}; accepted: {sorted(sets)}")
    return tuple(sets[name])


def task_set_source() -> dict:
    """Where the lists come from (repository, commit, path, the file's SHA-256)."""
    return dict(_load()["source"])


def env_id_of(task: str) -> Optional[str]:
    """Our env id of an official task name: ``dmc:<name>`` for a dm_control task (``cup-spin``
    or ``dmc:cup-spin``), the name itself for a Meta-World task (``mw-reach``), else None."""
    from tdmpc2core.envs.domain_ids import METAWORLD_ENVS

    name = task[len(PREFIX):] if task.startswith(PREFIX) else task
    if PREFIX + name in DMCONTROL_ENVS:
        return PREFIX + name
    if name in METAWORLD_ENVS and not task.startswith(PREFIX):
        return name
    return None


def unavailable_reason(task: str) -> Optional[str]:
    """Why an official task name (``cup-spin``, ``mw-reach``) cannot run here, or None if it has an
    env id (:func:`env_id_of`) whose suite's packages are installed (a Meta-World task without the
    ``[metaworld]`` extra: the install line)."""
    env_id = env_id_of(task)
    name = task[len(PREFIX):] if task.startswith(PREFIX) else task
    if env_id is not None:
        from tdmpc2core.envs.registry import suite_for

        err = suite_for(env_id).install_error()
        return None if err is None else str(err)
    if name.startswith("mw-"):
        return "not a Meta-World task known to tdmpc2core"
    if name in REFUSED_TASKS:
        return REFUSED_TASKS[name]
    return "not a dm_control task known to tdmpc2core"


def resolve_task_list(task_set_or_names: Union[str, Sequence[str], None], num_tasks: int) -> tuple[str, tuple[str, ...]]:
    """The task names of a multi-task checkpoint with ``num_tasks`` task embeddings.

    Args:
      task_set_or_names: ``"mt30"`` / ``"mt80"``; a list of official names (or a comma-separated
        string of them) in task-index order, for a checkpoint trained on another list; or None:
        the official set with ``num_tasks`` tasks.

    Returns:
      (label, names): the set's name (or ``"custom"``) and its names.

    Raises:
      ValueError: no official set has ``num_tasks`` tasks (and none was given), or the given
        list has another length than the checkpoint's task embedding.
    """
    if task_set_or_names is None:
        fits = [n for n in task_set_names() if len(task_set(n)) == num_tasks]
        if not fits:
            raise ValueError(f"the checkpoint has {num_tasks} task embeddings, and no official task set has that "
                             f"many ({', '.join(f'{n}: {len(task_set(n))}' for n in task_set_names())}): name its "
                             "tasks in task-index order (a comma-separated list of official task names)")
        return fits[0], task_set(fits[0])
    if isinstance(task_set_or_names, str):
        if task_set_or_names in task_set_names():
            label, names = task_set_or_names, task_set(task_set_or_names)
        else:
            label, names = "custom", tuple(n.strip() for n in task_set_or_names.split(",") if n.strip())
    else:
        label, names = "custom", tuple(str(n) for n in task_set_or_names)
    names = tuple(n[len(PREFIX):] if n.startswith(PREFIX) else n for n in names)
    if len(names) != num_tasks:
        raise ValueError(f"task set {label!r} has {len(names)} tasks but the checkpoint has {num_tasks} task "
                         f"embeddings; " + ", ".join(f"{n} has {len(task_set(n))}" for n in task_set_names()))
    if len(set(names)) != len(names):
        raise ValueError(f"task list {list(names)} names a task twice")
    return label, names


__all__ = ["task_set_names", "task_set", "task_set_source", "env_id_of", "unavailable_reason", "resolve_task_list"]
