"""Write the version-1 episode-dataset fixtures of ``tests/test_dataset_runs.py`` with the
version-1 code itself (before the ``seed`` and ``run_id`` columns).

Run with the package of a commit whose ``tdmpc2core.io.dataset.FORMAT_VERSION`` is 1 first
on the path (3bbba35, the last such commit), from the repository root::

    git archive 3bbba35 tdmpc2core | tar -x -C /tmp/tdmpc2core-v1
    PYTHONPATH=/tmp/tdmpc2core-v1 python tools/record_dataset_v1.py

It refuses to run with another format version. Writes, into ``tests/fixtures/``:

- ``dataset_v1_export.parquet``: one task ``walk``, 2 episodes of one run, the provenance
  ``train-single`` gave an export (``kind: export``, ``task``, ``seed`` 3, ``spec``,
  ``agent_config``);
- ``dataset_v1_pool.parquet``: a pool of ``walk`` (seeds 0 and 1 joined: which episode came
  from which seed is not recorded), ``hop`` (one export of seed 2, with ``spec`` and
  ``agent_config``) and ``swim`` (one export of seed 5 without them, joined alone).

Each episode's first observation holds its (task, seed) code so the test can tell them apart:
obs[0, 0] = 10 * task number + seed. Nothing here imports JAX.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SPEC = {"env_id": "Walk-v0", "agent_steps": 8, "eval_every": 4, "agent": {"model_size": 1}}
AGENT_CONFIG = {"model_size": 1, "horizon": 3, "gamma": 0.95, "simnorm_dim": 8, "betas": [0.9, 0.999],
                "lr": 3e-4, "tasks": {"10": "a", "2": "b"}}


def episodes(rng, n, T, obs_dim, action_dim, code):
    out = []
    for _ in range(n):
        obs = rng.standard_normal((T + 1, obs_dim)).astype(np.float32)
        obs[0, 0] = code
        act = rng.uniform(-1, 1, (T + 1, action_dim)).astype(np.float32)
        rew = rng.standard_normal(T + 1).astype(np.float32)
        act[0], rew[0] = np.nan, np.nan
        out.append({"obs": obs, "action": act, "reward": rew, "terminated": np.zeros(T + 1, bool)})
    return out


def export(ds_mod, rng, task, seed, n, with_settings, number):
    prov = {"kind": "export", "task": task.name, "seed": seed, "seed_index": 0, "evicted_episodes": 0}
    if with_settings:  # what train-single records: the task settings and the agent's configuration
        prov.update(spec=dict(SPEC, env_id=f"{task.name}-v0"), agent_config=AGENT_CONFIG)
    return ds_mod.from_episodes(episodes(rng, n, task.episode_length, task.obs_dim, task.action_dim,
                                         10 * number + seed), task, prov)


def main() -> None:
    from tdmpc2core.io import dataset as ds_mod

    if ds_mod.FORMAT_VERSION != 1:
        raise SystemExit(f"tdmpc2core.io.dataset at {ds_mod.__file__} writes format version "
                         f"{ds_mod.FORMAT_VERSION}; put a version-1 checkout first on PYTHONPATH (module docstring)")
    rng = np.random.default_rng(0)
    walk = ds_mod.TaskInfo("walk", 3, 2, 4, 1, 0.95, None)
    hop = ds_mod.TaskInfo("hop", 2, 1, 3, 2, 0.9, None)
    swim = ds_mod.TaskInfo("swim", 4, 2, 2, 1, 0.9, None)
    out = ROOT / "tests" / "fixtures"
    ds_mod.save_dataset(export(ds_mod, rng, walk, 3, 2, True, 1), out / "dataset_v1_export.parquet")
    walk_task = ds_mod.concatenate_episodes([export(ds_mod, rng, walk, 0, 2, True, 1),
                                             export(ds_mod, rng, walk, 1, 1, True, 1)])
    hop_task = export(ds_mod, rng, hop, 2, 2, True, 2)
    swim_task = ds_mod.concatenate_episodes([export(ds_mod, rng, swim, 5, 1, False, 3)])
    ds_mod.save_dataset(ds_mod.pool_tasks([walk_task, hop_task, swim_task]), out / "dataset_v1_pool.parquet")
    print(f"wrote {out / 'dataset_v1_export.parquet'} and {out / 'dataset_v1_pool.parquet'}")


if __name__ == "__main__":
    main()
