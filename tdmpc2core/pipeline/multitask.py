"""protocols.<protocol>.multitask checked at load (docs/pipeline.md, "Multi-task").

What a train-multi job would refuse at its start is refused here: pools that are not the
protocol's, episodic tasks in a trained pool (the multi-task agent has no termination head,
docs/deviations.md M7), return ranges and expected ranges of tasks no trained pool holds,
agent settings the library does not accept, and per (pool, model size) a configuration
tdmpc2core.model.config.resolve_config refuses or a batch larger than the pool's sampleable
slices (from the episodes each pooled run's replay will export). Raises ConfigError (one line).
"""
from __future__ import annotations

import dataclasses

from tdmpc2core.io import official_data as library_official
from tdmpc2core.model import config as library_config
from tdmpc2core.pipeline.checks import (AGENT_KEYS, ConfigError, agent_key_written_at, check_expected, check_extensions,
                                        unknown_agent_keys)

__all__ = ["Multitask", "check_multitask"]


@dataclasses.dataclass(frozen=True)
class Multitask:
    """protocols.<protocol>.multitask resolved (docs/pipeline.md, "Multi-task"): the pools
    trained, the model sizes, the seeds (default: the top-level seeds), the training jobs'
    resources (gpu, runtime in minutes, mem_mb, threads) and updates between checkpoints."""

    block: dict
    pools: list
    sizes: list
    seeds: list
    resources: dict
    checkpoint_every: int


def _check_names(where: str, m: dict, mt_pools: list, pooled: set, pools: dict, official_pool_tasks: dict) -> None:
    """return_ranges and expected name pooled tasks of trained pools; ranges are [low, high]."""
    bad = sorted(set(m.get("return_ranges") or {}) - pooled)
    if bad:
        raise ConfigError(f"config: {where}.return_ranges names task(s) {bad} that no trained pool holds "
                            f"(pooled tasks: {sorted(pooled)})")
    for task, rg in (m.get("return_ranges") or {}).items():
        if len(rg) != 2 or not rg[0] < rg[1]:
            raise ConfigError(f"config: {where}.return_ranges.{task} = {rg}: need [low, high] with low < high")
    for pool, exp in (m.get("expected") or {}).items():
        for task, e in (exp or {}).items():
            check_expected(f"{where}.expected.{pool}.{task}", e)
        bad = sorted(set(exp or {}) - set(pools.get(pool, official_pool_tasks.get(pool, []))))
        if pool not in mt_pools or bad:
            raise ConfigError(
                f"config: {where}.expected.{pool}: "
                + (f"{pool!r} is not a trained pool ({mt_pools})" if pool not in mt_pools
                   else f"task(s) {bad} are not in pool {pool!r} "
                   f"({pools.get(pool, official_pool_tasks.get(pool))})"))


def _mt_config(where: str, agent: dict, size: int, batch_size: int, T: int):
    """The multi-task agent's configuration as TDMPC2MultiTask builds it (the pool's shortest
    episode ``T``), or a ConfigError naming ``where``."""
    try:
        cfg = library_config.TDMPC2Config(**agent, model_size=size, batch_size=batch_size)
        library_config.check_offline_config(cfg)
        return library_config.resolve_config(cfg, episode_length=T, action_dim=0)
    except (ValueError, TypeError) as e:
        block = where.split(" (")[0]  # protocols.P.multitask
        raise ConfigError(f"config: {where}: {e}{agent_key_written_at(e, [(agent, f'{block}.agent')])}") from None


def _check_pool_batches(proto: str, pool: str, agent: dict, sizes: list, batch_size: int, *, tasks, task_T,
                        task_cfg, pools, seeds) -> None:
    """Per model size: the agent's configuration, and a batch the pool's slices can fill."""
    T_min = min(task_T[t] for t in pools[pool])
    for size in sizes:
        where = f"protocols.{proto}.multitask (pool {pool}, model size {size})"
        cfg = _mt_config(where, agent, size, batch_size, T_min)
        # the pool's sampleable slices, from the episodes each pooled run's replay will export
        rows = []
        for task in pools[pool]:
            t, T = tasks[task], task_T[task]
            held = library_config.episodes_held_at_end(task_cfg[task], agent_steps=int(t["agent_steps"]),
                                                       episode_length=T, n_envs=int(t.get("n_envs") or 1))
            rows += [T + 1] * (held * len(seeds))
        try:
            library_config.check_batch_size(
                cfg.batch_size, library_config.slices_in_episodes(rows, cfg.horizon),
                f"pool {pool!r} ({len(rows)} episodes exported by its tasks' runs, horizon {cfg.horizon})",
                "lower multitask.batch_size, or pool longer runs")
        except ValueError as e:
            raise ConfigError(f"config: {where}: {e}") from None


def check_multitask(proto: str, m: dict | None, *, tasks: dict, task_T: dict, task_cfg: dict, pools: dict,
                    official_pools: dict, official_pool_tasks: dict, seeds: list):
    """The multitask block checked and resolved: a :class:`Multitask`,
    or None when the protocol has none. Raises ConfigError (module docstring)."""
    if not m:
        return None
    where = f"protocols.{proto}.multitask"
    mt_pools = list(m.get("pools") or [*pools, *official_pools])
    bad = [p for p in mt_pools if p not in pools and p not in official_pools]
    if bad or not mt_pools:
        raise ConfigError(
            f"config: {where}.pools names {bad or 'no pool'}; the pools are those "
            f"under protocols.{proto}.pools and official_pools (have: {sorted([*pools, *official_pools])})")
    sizes = [int(s) for s in m["model_sizes"]]
    mt_seeds = [int(s) for s in m.get("seeds") or seeds]
    pooled = {t for p in mt_pools for t in pools.get(p, official_pool_tasks.get(p, []))}
    episodic = sorted(t for t in pooled if t in tasks and (tasks[t].get("agent") or {}).get("episodic"))
    if episodic:
        raise ConfigError(
            f"config: {where} trains pool(s) "
            f"{[p for p in mt_pools if set(pools[p]) & set(episodic)]} holding episodic task(s) {episodic}: the "
            "multi-task agent has no termination head and refuses terminating data (docs/deviations.md M7). "
            f"Leave those tasks out of the pools in multitask.pools.")
    _check_names(where, m, mt_pools, pooled, pools, official_pool_tasks)
    if "model_size" in (m.get("agent") or {}):
        raise ConfigError(f"config: {where}.agent.model_size: the model sizes are multitask.model_sizes")
    check_extensions(f"{where}.extensions", m.get("extensions"))
    agent = dict(m.get("agent") or {})
    unknown_agent_keys(f"{where}.agent", agent, sorted(AGENT_KEYS + ["task_dim"]))
    agent.pop("task_dim", None)
    batch_size = int(m.get("batch_size") or 1024)
    for pool in mt_pools:
        if pool in official_pools:
            # the official data's episodes are known only once converted: the agent's settings are
            # checked here, its batch against the pool when the job loads it (train-multi)
            table = library_official.task_set_table(official_pools[pool]["task_set"])
            for size in sizes:
                _mt_config(f"{where} (pool {pool}, model size {size})", agent, size, batch_size,
                           min(t["episode_length"] for t in table))
            continue
        _check_pool_batches(proto, pool, agent, sizes, batch_size, tasks=tasks, task_T=task_T,
                            task_cfg=task_cfg, pools=pools, seeds=seeds)
    resources = {"gpu": 0, "runtime": 60, "mem_mb": 4000, **(m.get("resources") or {})}
    # updates between the multi-task jobs' checkpoints (a shell global: not a rerun trigger)
    every = int(m.get("checkpoint_every") or m.get("eval_every") or 1)
    return Multitask(block=m, pools=mt_pools, sizes=sizes, seeds=mt_seeds, resources=resources,
                       checkpoint_every=every)
