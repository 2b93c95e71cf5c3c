"""Episode datasets, the public module (``from tdmpc2core.dataset import ...``).

The format and its I/O live in :mod:`tdmpc2core.io.dataset`; exporting a single-task run's
replay lives with the agent, in :mod:`tdmpc2core.agents.export`. This module gathers both
under the names users know (the seed document's ``export_episodes``, ``pool_tasks``,
``save_dataset``, ``load_dataset``).
"""
from .agents.export import export_episodes
from .io.dataset import (COLUMNS, FORMAT_NAME, FORMAT_VERSION, METADATA_KEY, ROW_GROUP_ROWS, DatasetError,
                         EpisodeDataset, TaskInfo, concatenate_episodes, episode_summary, from_episodes,
                         load_dataset, pool_tasks, read_episode_summary, read_metadata, sampleable_episodes,
                         save_dataset)

__all__ = ["export_episodes", "COLUMNS", "FORMAT_NAME", "FORMAT_VERSION", "METADATA_KEY", "ROW_GROUP_ROWS",
           "DatasetError", "EpisodeDataset", "TaskInfo", "concatenate_episodes", "episode_summary",
           "from_episodes", "load_dataset", "pool_tasks", "read_episode_summary", "read_metadata",
           "sampleable_episodes", "save_dataset"]
