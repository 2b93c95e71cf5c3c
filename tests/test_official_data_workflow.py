"""The official datasets through the pipeline: workflow/configs/paper-mt30.yaml plans, and a
small official-format chunk is converted and trained on (official_pools, official_data.smk)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from test_workflow import copy_workflow, job_stats, multi_specs, ok, refusal, snakemake

from tdmpc2core.io.official_data import task_set_table

MT30_EVALUABLE = [t["name"] for t in task_set_table("mt30") if t["env_id"]]


def test_paper_mt30_dry_run(tmp_path):
    out = ok(snakemake(copy_workflow(tmp_path), "-n", "-p", "--cores", "4", "--configfile",
                       "workflow/configs/paper-mt30.yaml"))
    assert job_stats(out) == {"convert_official_data": 1, "resolve_config": 1, "train_multi": 5, "scaling": 1,
                              "all": 1, "total": 9}
    assert "convert-official-data --src data/mt30 --out results/datasets/pools/mt30.parquet --tasks mt30" in out
    multi = multi_specs(out)
    assert set(multi) == {("mt30", s) for s in (1, 5, 19, 48, 317)}
    for (_, size), (spec, seeds) in multi.items():
        assert spec["updates"] == 10_000_000 and spec["batch_size"] == 1024 and seeds == "0", size
        assert spec["eval_tasks"] == MT30_EVALUABLE and len(MT30_EVALUABLE) == 30
        assert spec["device_budget_bytes"] == 16_000_000_000


def test_official_pool_config_errors(tmp_path):
    """An eval task of an official pool that cannot be evaluated here (reacher-four-easy: an
    official task file outside the pool's set, with no environment of ours) is refused at load
    (the workflow loaded in this process: test_workflow.load_workflow)."""
    wf = copy_workflow(tmp_path)
    (wf / "bad.yaml").write_text(TINY.format(src="chunks", eval_tasks="[reacher-four-easy]", budget=1000))
    msg = refusal(wf, "bad.yaml")
    assert "reacher-four-easy" in msg and "evaluable" in msg


TINY = """\
protocol: official-tiny
seeds: [0]
seeds_per_job: 1
threads_per_job: 1
jax_cache_dir: .jax_cache
checkpoint_every: 1000
keep_checkpoints: 2
max_chunk_seconds: 30
bootstrap_reps: 200
video: off  # the videos' paths are tested elsewhere (tests/test_videos.py, test_workflow.py's tiny run)
protocols:
  official-tiny:
    label: "official-format chunk, tiny: NOT the paper's protocol"
    tasks: {{}}
    official_pools:
      mt30: {{src: {src}, task_set: mt30, eval_tasks: {eval_tasks}}}
    multitask:
      model_sizes: [1]
      updates: 200
      batch_size: 32
      eval_every: 200
      eval_episodes: 1
      log_every: 100
      device_budget_bytes: {budget}
      agent: {{enc_dim: 32, mlp_dim: 32, latent_dim: 16, task_dim: 8, num_samples: 16, num_elites: 4,
               num_pi_trajs: 2, iterations: 1}}
"""


@pytest.mark.slow
def test_convert_and_train_on_an_official_format_chunk(tmp_path):
    """A fresh checkout converts a small official-format chunk (a TensorDict of 4 mt30 episodes
    of 501 rows) and trains a tiny model on it for 200 updates, the pool kept in host memory
    (over its device budget), evaluated on dm_control's cartpole-balance."""
    if not os.environ.get("CI"):  # CI installs both (.ci/run): there a missing one fails
        pytest.importorskip("tensordict", reason="tensordict is not installed: pip install -e '.[official]' to "
                            "run the official-dataset workflow test", exc_type=ImportError)
        pytest.importorskip("dm_control")
    import pandas as pd

    from test_official_data import official_episodes, save_chunk
    from tdmpc2core.dataset import load_dataset

    wf = copy_workflow(tmp_path)
    (wf / "chunks").mkdir()
    save_chunk(wf / "chunks" / "chunk_0.pt", official_episodes([8, 8, 9, 0], seed=5))
    (wf / "tiny.yaml").write_text(TINY.format(src="chunks", eval_tasks="[cartpole-balance]", budget=1000))
    ok(snakemake(wf, "--cores", "1", "--configfile", "tiny.yaml", timeout=1500))
    ds = load_dataset(wf / "results/datasets/pools/mt30.parquet")
    assert ds.num_episodes == 4 and len(ds.tasks) == 30 and ds.provenance["kind"] == "official"
    run = json.loads((wf / "results/multi/mt30/size1/run.json").read_text())
    assert run["data_placement"] == "host" and run["host_sampling"]["updates"] == 200
    assert run["eval_tasks"] == ["cartpole-balance"] and run["updates"] == 200
    ev = pd.read_parquet(wf / "results/multi/mt30/size1/eval.parquet")
    assert set(ev["task"]) == {"cartpole-balance"} and sorted(ev["updates"].unique()) == [0, 200]
    assert ev["length"].eq(500).all() and np.isfinite(ev["normalized_score"]).all()
    scaling = pd.read_csv(wf / "results/tables/multitask_scaling.csv")
    assert list(scaling["pool"]) == ["mt30"] and list(scaling["model_size"]) == [1]
