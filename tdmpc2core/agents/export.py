"""Export a single-task run's replay as an episode dataset (:mod:`tdmpc2core.io.dataset`).

The replay lives in the run state of :class:`tdmpc2core.TDMPC2`; this module reads its
complete episodes (:func:`tdmpc2core.agents.replay.committed_episodes`) and builds an
:class:`~tdmpc2core.io.dataset.EpisodeDataset` of them, rows unchanged (spec §9).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ..io.dataset import EpisodeDataset, TaskInfo, from_episodes


def _task_of_agent(agent, name: Optional[str]) -> TaskInfo:
    spec = agent.spec
    return TaskInfo(name=str(name if name is not None else agent.env_id), obs_dim=int(spec.obs_dim),
                    action_dim=int(spec.action_dim), episode_length=int(agent.episode_length),
                    action_repeat=int(agent.action_repeat), discount=float(agent.gamma),
                    env_id=agent.env_id if isinstance(agent.env_id, str) else None,
                    env_params=agent.env.env_params or None)


def check_exportable(agent) -> None:
    """Raise ValueError when ``agent`` observes pixels (``spec.obs_dtype`` not float32): datasets,
    pools and multi-task training hold state observations only (the official datasets are
    state-only; docs/deviations.md F1)."""
    dtype = getattr(agent.spec, "obs_dtype", "float32")
    if dtype != "float32":
        raise ValueError(f"export_episodes({agent.env_id}): the agent observes pixels (obs='rgb', {dtype} "
                         f"observations of shape {agent.spec.obs_shape}); episode datasets, pools and multi-task "
                         "training take state observations only (as the official datasets); train with "
                         "obs='state' to export")


def export_episodes(agent, state, seed_index: Optional[int] = None, *, name: Optional[str] = None,
                    allow_evicted: bool = False, seed: Optional[int] = None, run_id: Optional[str] = None,
                    provenance: Optional[dict] = None) -> EpisodeDataset:
    """Every complete episode a single-task run's replay holds, oldest first, rows unchanged.

    Args:
      agent: the :class:`tdmpc2core.TDMPC2` that trained ``state``.
      state: the run state ``agent.train`` returned (leading seed axis).
      seed_index: which seed of ``state`` to export; may be None only for a single seed.
      name: the task name (default: the agent's env id).
      allow_evicted: export what the ring still holds when it wrapped and evicted older
        episodes (by default an error: a dataset of the whole training history needs
        ``buffer_size`` at least the run length).
      seed, run_id: the run's seed (the one ``train`` was given for this seed index) and id
        (``train-single`` passes :func:`tdmpc2core.io.provenance.run_id`, which its run.json
        records too): every row's ``seed`` and ``run_id`` columns, and recorded in the
        provenance; None: unknown (null in the file).
      provenance: recorded in the dataset's provenance (default: the package versions, the
        git commit and the platform), with the agent's config.
    Returns:
      An :class:`EpisodeDataset` of one task, one run; the episode in progress is not exported.
    Raises:
      ValueError: a missing or out-of-range ``seed_index``, no complete episode, or evicted
        episodes without ``allow_evicted``; an agent trained from pixels (``obs="rgb"``): the
        episode datasets hold float32 state observations, as the official datasets do
        (docs/deviations.md F1).
    """
    import jax

    check_exportable(agent)

    from ..io import provenance as prov_mod
    from .replay import committed_episodes

    leaves = jax.tree_util.tree_leaves(state.replay.committed)
    n_seeds = int(np.shape(leaves[0])[0]) if np.ndim(leaves[0]) else None
    if n_seeds is None:
        replay = state.replay
    else:
        if seed_index is None:
            if n_seeds != 1:
                raise ValueError(f"export_episodes: the state holds {n_seeds} seeds; pass seed_index "
                                 f"(0 .. {n_seeds - 1})")
            seed_index = 0
        if not 0 <= int(seed_index) < n_seeds:
            raise ValueError(f"export_episodes: seed_index={seed_index} out of range for {n_seeds} seed(s)")
        replay = jax.tree_util.tree_map(lambda x: x[int(seed_index)], state.replay)
    episodes, evicted = committed_episodes(replay)
    task = _task_of_agent(agent, name)
    if evicted and not allow_evicted:
        raise ValueError(
            f"export_episodes({task.name}): the replay wrapped and evicted {evicted} older episode(s) "
            f"(buffer_size={agent.cfg.buffer_size} agent steps); the dataset would miss the start of the "
            "run. Train with buffer_size >= the run length, or pass allow_evicted=True.")
    if not episodes:
        raise ValueError(f"export_episodes({task.name}): no complete episode in the replay yet")
    prov = {"kind": "export", "task": task.name, "seed": seed, "run_id": run_id, "seed_index": seed_index,
            "evicted_episodes": int(evicted), "agent_config": agent.config}
    prov.update(prov_mod.collect(Path(__file__).resolve().parents[2]) if provenance is None else provenance)
    return from_episodes(episodes, task, prov, seed=seed, run_id=run_id)
