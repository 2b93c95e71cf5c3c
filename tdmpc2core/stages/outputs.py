"""The training stages' tabular outputs: one schema, one writer (docs/artifacts.md).

``eval.parquet`` and ``metrics.parquet`` of ``tdmpc2 train-single`` (one per seed, under
``results/single/{task}/seed{S}/``) and of ``tdmpc2 train-multi`` (one per job, under
``results/multi/{pool}/size{n}/``) have the columns of :data:`SCHEMAS`, in that order, with
those Arrow types. The update metrics' names are the agents' (``METRIC_KEYS`` of
:mod:`tdmpc2core.agents.common`, plus ``termination_loss`` in an episodic single-task run).
:func:`write_table` is the one writer; the ``*_columns`` functions turn a training history
(``train``'s second result, :mod:`tdmpc2core.run.driver`) into its columns.

A run with extensions that have eval_metrics (:mod:`tdmpc2core.extensions`) has one more
float64 column in ``eval.parquet`` per extension metric, named as in the history
(``ext/<extension>/<metric>``, sorted, after the schema's columns): the value of the row's
evaluation and seed (and task, multi-task), the same on every episode row of it.

``success`` and ``success_any`` (both agents' eval tables, Arrow bool): the env's success flag
at the episode's last step (the official rule: ``info['success']`` at the last step) and at any
step of the episode (Meta-World's maintainers' rule); null where the task's suite has no
success flag (``EnvSpec.has_success`` False: DMControl, Playground, Brax, gymnax). Each file
says so itself: the Arrow field metadata ``description`` of these columns holds
:data:`COLUMN_RULES` (``pq.read_schema(path).field("success").metadata``), and run.json's
``final_eval_success_rule`` the rule of its ``final_eval_success``.

Not a stage itself (``tdmpc2core/cli.py`` lists the stages).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Optional, Sequence

from ..agents.common import METRIC_KEYS

#: the update metrics of both agents, one float64 column each in metrics.parquet
TRAINING_METRICS: tuple[str, ...] = tuple(METRIC_KEYS)
#: the episodic single-task run's extra metric (the termination head's loss, spec §11.3)
EPISODIC_METRICS: tuple[str, ...] = ("termination_loss",)

_F = "float64"
#: output name -> ((column, Arrow type name), ...) in the file's order
SCHEMAS: dict[str, tuple[tuple[str, str], ...]] = {
    "single_eval": (("task", "string"), ("seed", "int64"), ("eval_index", "int64"), ("agent_steps", "int64"),
                    ("env_frames", "int64"), ("episode", "int64"), ("return", _F), ("length", "int64"),
                    ("success", "bool"), ("success_any", "bool")),
    "single_metrics": (("task", "string"), ("seed", "int64"), ("agent_steps", "int64"), ("env_frames", "int64"),
                       ("updates", "int64"), ("wall_time_s", _F), ("agent_steps_per_s", _F),
                       *((k, _F) for k in TRAINING_METRICS), ("train_return", _F)),
    "single_metrics_episodic": (),  # filled below: single_metrics + EPISODIC_METRICS
    "multi_eval": (("pool", "string"), ("model_size", "int64"), ("task", "string"), ("seed", "int64"),
                   ("eval_index", "int64"), ("updates", "int64"), ("episode", "int64"), ("return", _F),
                   ("length", "int64"), ("normalized_score", _F), ("return_low", _F), ("return_high", _F),
                   ("success", "bool"), ("success_any", "bool")),
    "multi_metrics": (("pool", "string"), ("model_size", "int64"), ("seed", "int64"), ("updates", "int64"),
                      ("wall_time_s", _F), ("updates_per_s", _F), *((k, _F) for k in TRAINING_METRICS),
                      ("eval_mean_return", _F), ("normalized_score", _F)),
}
SCHEMAS["single_metrics_episodic"] = SCHEMAS["single_metrics"] + tuple((k, _F) for k in EPISODIC_METRICS)


#: what a column of the eval tables means where its name does not say it all: written into the
#: files themselves (Arrow field metadata ``description``, :func:`describe_columns`)
COLUMN_RULES: dict[str, str] = {
    "success": ("the env's success flag at the episode's last step taken (the official TD-MPC2 rule: Meta-World's "
                "info['success'], MyoSuite's info['solved'], of the last simulator step); null where the task's "
                "suite has no success flag"),
    "success_any": ("the env's success flag at any step of the episode (Meta-World's maintainers' rule; shown "
                    "beside the official one, not compared); null where the task's suite has no success flag"),
    "normalized_score": ("a task with a success flag: 100 x success (the paper's Meta-World and MyoSuite score); "
                         "otherwise 100 (return - return_low) / (return_high - return_low) with the task's return "
                         "range (multi-task), or return / 10 (a released checkpoint's DMControl task), NaN without one"),
}
#: run.json's ``final_eval_success``: the rule it follows
FINAL_SUCCESS_RULE = ("the last evaluation's success rate in [0, 1]: the mean over its episodes of `success` "
                      "(the env's success flag at the episode's last step, the official rule)")


def describe_columns(table):
    """``table`` (a ``pyarrow.Table``) with :data:`COLUMN_RULES` as the ``description``
    metadata of the columns it has (the values are unchanged)."""
    import pyarrow as pa

    fields = [f.with_metadata({**(f.metadata or {}), b"description": COLUMN_RULES[f.name].encode()})
              if f.name in COLUMN_RULES else f for f in table.schema]
    return table.cast(pa.schema(fields, metadata=table.schema.metadata))


#: the prefix of the extensions' eval-metric columns (and history keys)
EXT_PREFIX = "ext/"


def ext_keys(hist: Mapping) -> list:
    """The extensions' eval-metric keys of a training history (``ext/...``), sorted."""
    return sorted(k for k in hist if isinstance(k, str) and k.startswith(EXT_PREFIX))


def write_table(path, output: str, columns: Mapping[str, object]) -> None:
    """Write one output file atomically with the columns and types of ``SCHEMAS[output]``.

    Args:
      path: the file (``.../eval.parquet`` or ``.../metrics.parquet``).
      output: a key of :data:`SCHEMAS`.
      columns: column name -> values (a sequence or a 1-D numpy array), exactly the schema's
        columns, all of one length, and any extension columns (``ext/...``, float64, written
        after the schema's, sorted).

    Raises:
      ValueError: an unknown ``output``, or columns missing or not in the schema (named).
    """
    import pyarrow as pa

    from ..io import atomic

    if output not in SCHEMAS:
        raise ValueError(f"stage output {output!r}: unknown; accepted: {sorted(SCHEMAS)}")
    extra = ext_keys(columns)
    names = [name for name, _ in SCHEMAS[output]]
    given = set(columns) - set(extra)
    if given != set(names):
        raise ValueError(f"stage output {output} ({path}): missing columns {sorted(set(names) - given)}, "
                         f"unknown columns {sorted(given - set(names))}; accepted: {names} and ext/... columns")
    names += extra
    schema = pa.schema([pa.field(name, pa.type_for_alias(kind)) for name, kind in SCHEMAS[output]]
                       + [pa.field(name, pa.float64()) for name in extra])
    arrays = [pa.array(columns[name], type=field.type) for name, field in zip(names, schema)]
    atomic.write_parquet(Path(path), describe_columns(pa.Table.from_arrays(arrays, schema=schema)))


def single_eval_columns(task: str, seed: int, index: int, hist: Mapping, eval_episodes: int) -> dict:
    """eval.parquet of seed ``seed`` (position ``index`` in the job's seeds): one row per
    evaluation and episode, from ``hist`` (``eval_agent_steps``, ``eval_env_frames``,
    ``eval_returns``/``eval_lengths`` of shape [n_eval, seeds, episodes]; ``eval_success`` /
    ``eval_success_any`` of that shape when the env has a success flag, else the columns are
    null; the extensions' ``ext/...`` [n_eval, seeds], repeated over the episodes)."""
    import numpy as np

    n_eval, E = len(hist["eval_agent_steps"]), eval_episodes
    flags = {k: ([bool(x) for x in np.asarray(hist[f"eval_{k}"])[:, index, :].reshape(-1)]
                 if f"eval_{k}" in hist and n_eval else [None] * (n_eval * E)) for k in ("success", "success_any")}
    ext = {k: np.repeat(np.asarray(hist[k], np.float64).reshape(n_eval, -1)[:, index], E) for k in ext_keys(hist)}
    return {**ext,
        "task": [task] * (n_eval * E),
        "seed": np.full(n_eval * E, seed, np.int64),
        "eval_index": np.repeat(np.arange(n_eval, dtype=np.int64), E),
        "agent_steps": np.repeat(np.asarray(hist["eval_agent_steps"], np.int64), E),
        "env_frames": np.repeat(np.asarray(hist["eval_env_frames"], np.int64), E),
        "episode": np.tile(np.arange(E, dtype=np.int64), n_eval),
        "return": (np.asarray(hist["eval_returns"])[:, index, :].reshape(-1).astype(np.float64)
                   if n_eval else np.zeros(0)),
        "length": (np.asarray(hist["eval_lengths"])[:, index, :].reshape(-1).astype(np.int64)
                   if n_eval else np.zeros(0, np.int64)),
        **flags,
    }


def single_metrics_columns(task: str, seed: int, index: int, rows: Sequence[Mapping], episodic: bool) -> dict:
    """metrics.parquet of seed ``seed`` (position ``index``): one row per chunk record of
    ``hist["chunks"]`` (per-seed values indexed by ``index``); ``termination_loss`` when
    ``episodic``. Use with the output ``single_metrics_episodic`` then, else ``single_metrics``."""
    import numpy as np

    met = {"task": [task] * len(rows), "seed": np.full(len(rows), seed, np.int64)}
    for k in ("agent_steps", "env_frames"):
        met[k] = np.array([r[k] for r in rows], np.int64)
    met["updates"] = np.array([np.asarray(r["updates"])[index] for r in rows], np.int64)
    for k in ("wall_time_s", "agent_steps_per_s"):
        met[k] = np.array([r[k] for r in rows], np.float64)
    for k in TRAINING_METRICS + ("train_return",) + (EPISODIC_METRICS if episodic else ()):
        met[k] = np.array([np.asarray(r[k])[index] for r in rows], np.float64)
    return met


def multi_eval_columns(pool: str, model_size: int, names: Sequence[str], seeds: Sequence[int], hist: Mapping,
                       eval_episodes: int, ranges: Sequence[Optional[tuple]]) -> dict:
    """eval.parquet of a multi-task job: one row per evaluation x seed x task x episode (that
    order), from ``hist["eval_returns"]``/``eval_lengths`` [n_eval, seeds, tasks, episodes];
    ``normalized_score`` = 100 (return - low) / (high - low) with the task's return range
    (NaN where ``ranges`` has None), or for a task with a success flag 100 x the episode's
    success (the paper's Meta-World score; ``hist["eval_success"]`` [n_eval, seeds, tasks,
    episodes], float64, NaN for a task without, as ``success``/``success_any``: null there and
    everywhere when the history has none); the extensions' ``ext/...`` [n_eval, seeds, tasks],
    repeated over the episodes."""
    import numpy as np

    n_eval = len(hist["eval_updates"])
    if not n_eval:
        return {name: [] for name, _ in SCHEMAS["multi_eval"]} | {k: [] for k in ext_keys(hist)}
    S, K, E = len(seeds), len(names), eval_episodes
    i_ev, i_s, i_k, i_e = np.indices((n_eval, S, K, E)).reshape(4, -1)
    r = np.asarray(hist["eval_returns"]).reshape(-1)
    ext = {k: np.asarray(hist[k], np.float64).reshape(n_eval, S, K)[i_ev, i_s, i_k] for k in ext_keys(hist)}
    lo = np.array([np.nan if rg is None else rg[0] for rg in ranges])[i_k]
    hi = np.array([np.nan if rg is None else rg[1] for rg in ranges])[i_k]
    flags = {}
    for k in ("success", "success_any"):
        v = np.asarray(hist[f"eval_{k}"], np.float64).reshape(-1) if f"eval_{k}" in hist else np.full(r.size, np.nan)
        flags[k] = [None if np.isnan(x) else bool(x) for x in v]
    succ = np.asarray([np.nan if x is None else float(x) for x in flags["success"]])
    with np.errstate(invalid="ignore", divide="ignore"):
        norm = np.where(np.isnan(succ), 100.0 * (r - lo) / (hi - lo), 100.0 * succ)
    return {"pool": [pool] * r.size, "model_size": np.full(r.size, model_size, np.int64),
            "task": [names[k] for k in i_k], "seed": np.asarray(seeds, np.int64)[i_s],
            "eval_index": i_ev.astype(np.int64), "updates": np.asarray(hist["eval_updates"], np.int64)[i_ev],
            "episode": i_e.astype(np.int64), "return": r.astype(np.float64),
            "length": np.asarray(hist["eval_lengths"]).reshape(-1).astype(np.int64),
            "normalized_score": norm, "return_low": lo, "return_high": hi, **flags, **ext}


def multi_metrics_columns(pool: str, model_size: int, seeds: Sequence[int], records: Sequence[Mapping]) -> dict:
    """metrics.parquet of a multi-task job: one row per chunk record and seed (that order);
    ``eval_mean_return``/``normalized_score`` NaN in a chunk without an evaluation."""
    import numpy as np

    met = {name: [] for name, _ in SCHEMAS["multi_metrics"]}
    for rec in records:
        for i, seed in enumerate(seeds):
            for k, v in (("pool", pool), ("model_size", model_size), ("seed", seed), ("updates", rec["updates"]),
                         ("wall_time_s", rec["wall_time_s"]), ("updates_per_s", rec["updates_per_s"])):
                met[k].append(v)
            for k in TRAINING_METRICS:
                met[k].append(float(np.asarray(rec[k])[i]))
            for k in ("eval_mean_return", "normalized_score"):
                met[k].append(float(np.asarray(rec[k])[i]) if k in rec else math.nan)
    return met


__all__ = ["SCHEMAS", "TRAINING_METRICS", "EPISODIC_METRICS", "EXT_PREFIX", "COLUMN_RULES", "FINAL_SUCCESS_RULE",
           "describe_columns", "ext_keys", "write_table", "single_eval_columns",
           "single_metrics_columns", "multi_eval_columns", "multi_metrics_columns"]


def matmul_precision_note(dense_precision: str, platform: Mapping) -> str:
    """run.json's ``matmul_precision``: the Dense layers' precision (the model's configuration,
    e.g. ``"highest"``: full float32) and JAX's global ``jax_default_matmul_precision`` from the
    provenance's ``platform`` record, which only the products outside those layers and outside
    the simulators follow (:data:`tdmpc2core.envs.base.SIMULATOR_MATMUL_PRECISION`);
    ``None`` there is said as "unset" (the backend's default)."""
    from ..envs.base import SIMULATOR_MATMUL_PRECISION

    default = platform.get("jax_default_matmul_precision")
    rest = "unset (the backend's default)" if default is None else str(default)
    return (f"float32 ({str(dense_precision).upper()}) in the Dense layers; "
            f"float32 ({SIMULATOR_MATMUL_PRECISION.upper()}) in the simulators' JAX physics; "
            f"jax_default_matmul_precision {rest} elsewhere")
