"""Episode datasets, the public module (``from tdmpc2core.dataset import ...``).

The format and its I/O live in :mod:`tdmpc2core.io.dataset`; exporting a single-task run's
replay lives with the agent, in :mod:`tdmpc2core.agents.export`. This module gathers both
under the names users know (the seed document's ``export_episodes``, ``pool_tasks``,
``save_dataset``, ``load_dataset``), with the run table's :class:`RunInfo` and the run id
:func:`run_id` that ``train-single`` records in the ``run_id`` column and in run.json.
"""
from .agents.export import export_episodes
from .io.dataset import (COLUMNS, COLUMNS_V1, FORMAT_NAME, FORMAT_VERSION, METADATA_KEY, READ_VERSIONS,
                         ROW_GROUP_ROWS, DatasetError, EpisodeDataset, RunInfo, TaskInfo, concatenate_episodes,
                         episode_summary, from_episodes, load_dataset, pool_tasks, read_episode_summary,
                         read_metadata, runs_from_provenance, sampleable_episodes, save_dataset)
from .io.provenance import run_id

__all__ = ["export_episodes", "COLUMNS", "COLUMNS_V1", "FORMAT_NAME", "FORMAT_VERSION", "METADATA_KEY",
           "READ_VERSIONS", "ROW_GROUP_ROWS", "DatasetError", "EpisodeDataset", "RunInfo", "TaskInfo",
           "concatenate_episodes", "episode_summary", "from_episodes", "load_dataset", "pool_tasks",
           "read_episode_summary", "read_metadata", "run_id", "runs_from_provenance", "sampleable_episodes",
           "save_dataset"]
