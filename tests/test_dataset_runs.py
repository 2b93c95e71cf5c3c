"""Episode datasets' runs (issue 31): every row's ``seed`` and ``run_id``, kept by export,
concatenation and pooling, read back from version-1 files (derived from their provenance where
it names one run), and filtered on in DuckDB and Polars exactly as the library selects them.

Datasets are synthetic (``from_episodes``); the export from a trained agent is checked in
tests/test_dataset.py (its module's run), the official conversion in tests/test_official_data.py.
"""
from __future__ import annotations

import importlib
import json
import os
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tdmpc2core import dataset as dsm
from tdmpc2core.dataset import (DatasetError, EpisodeDataset, RunInfo, TaskInfo, concatenate_episodes,
                                from_episodes, load_dataset, pool_tasks, read_metadata, run_id, save_dataset)

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def reader(name):
    """duckdb or polars (the test extra): CI installs it, so missing there fails, elsewhere skips."""
    return importlib.import_module(name) if os.environ.get("CI") else pytest.importorskip(name)
SPEC = {"env_id": "x", "agent_steps": 20}
CONFIG = {"horizon": 3, "gamma": 0.95, "betas": (0.9, 0.999)}


def one_run(name, obs_dim, action_dim, T, lengths, seed, code=0.0):
    """A single-task export of one run (``seed``): episodes of the given agent steps, each
    episode's first observation ``code`` (to tell the runs apart)."""
    rng = np.random.default_rng(100 + seed)
    eps = []
    for n in lengths:
        obs = rng.standard_normal((n + 1, obs_dim)).astype(np.float32)
        obs[0, 0] = code
        act = rng.uniform(-1, 1, (n + 1, action_dim)).astype(np.float32)
        rew = rng.standard_normal(n + 1).astype(np.float32)
        act[0], rew[0] = np.nan, np.nan
        eps.append({"obs": obs, "action": act, "reward": rew, "terminated": np.zeros(n + 1, bool)})
    task = TaskInfo(name, obs_dim, action_dim, T, 1, 0.95, None)
    rid = run_id(name, seed, SPEC, CONFIG)
    return from_episodes(eps, task, {"kind": "export", "task": name, "seed": seed}, seed=seed, run_id=rid)


@pytest.fixture
def files(tmp_path):
    """The task dataset of pendulum (seed 0: 2 episodes, seed 1: 3) and the pool of pendulum
    and cartpole (seed 0: 1 episode, seed 1: 2), saved."""
    pend = concatenate_episodes([one_run("pendulum", 3, 1, 6, [6, 4], 0),
                                 one_run("pendulum", 3, 1, 6, [6, 6, 2], 1)])
    cart = concatenate_episodes([one_run("cartpole", 5, 2, 5, [5], 0), one_run("cartpole", 5, 2, 5, [5, 3], 1)])
    pool = pool_tasks([pend, cart])
    paths = {"task": tmp_path / "pendulum.parquet", "pool": tmp_path / "demo.parquet"}
    save_dataset(pend, paths["task"])
    save_dataset(pool, paths["pool"])
    return {"task": pend, "pool": pool}, paths


def episode_runs(ds):
    return [ds.runs[i] for i in ds.episode_run]


def test_every_operation_keeps_each_episodes_run(files):
    (ds, paths) = files
    pool = ds["pool"]
    ids = {s: {t: run_id(t, s, SPEC, CONFIG) for t in ("pendulum", "cartpole")} for s in (0, 1)}
    assert [r.seed for r in episode_runs(pool)] == [0, 0, 1, 1, 1, 0, 1, 1]
    assert [r.run_id for r in episode_runs(pool)] == [ids[s][t] for t, s in [
        ("pendulum", 0)] * 2 + [("pendulum", 1)] * 3 + [("cartpole", 0)] + [("cartpole", 1)] * 2]
    assert ids[0]["pendulum"].startswith("pendulum/seed0/") and len(set(ids[0].values()) | set(ids[1].values())) == 4
    assert pool.runs == tuple(dict.fromkeys(episode_runs(pool)))  # the run table in the order of first rows
    for kind in ("task", "pool"):
        back = load_dataset(paths[kind])
        assert read_metadata(paths[kind])["version"] == dsm.FORMAT_VERSION == 2
        assert back.runs == ds[kind].runs and np.array_equal(back.run, ds[kind].run)
        t = pq.read_table(paths[kind])
        assert t.column_names == list(dsm.COLUMNS) and t.schema.field("seed").type == pa.int64()
        assert t.column("seed").to_pylist() == [ds[kind].runs[i].seed for i in ds[kind].run]
        assert t.column("run_id").to_pylist() == [ds[kind].runs[i].run_id for i in ds[kind].run]
    # the same run in two inputs is one entry; a run without seed or id is null in the file
    twice = concatenate_episodes([one_run("a", 2, 1, 3, [3], 4), one_run("a", 2, 1, 3, [2], 4)])
    assert twice.runs == (RunInfo(4, run_id("a", 4, SPEC, CONFIG)),) and twice.num_episodes == 2
    anon = EpisodeDataset(**{f: getattr(twice, f) for f in ("obs", "action", "reward", "terminated", "truncated",
                                                          "episode", "step", "task", "tasks")})
    assert anon.runs == (RunInfo(None, None),) and np.all(anon.run == 0)
    save_dataset(anon, paths["task"].parent / "anon.parquet")
    t = pq.read_table(paths["task"].parent / "anon.parquet", columns=["seed", "run_id"])
    assert t.column("seed").null_count == t.column("run_id").null_count == anon.num_rows
    assert load_dataset(paths["task"].parent / "anon.parquet").runs == (RunInfo(None, None),)


def test_select_and_its_refusals(files):
    pool = files[0]["pool"]
    one = pool.select(task="pendulum", seed=1)
    assert one.num_episodes == 3 and one.runs == (pool.runs[1],) and one.tasks == pool.tasks
    assert np.array_equal(one.episode[one.step == 0], [0, 1, 2])
    assert one.provenance["kind"] == "select" and one.provenance["filter"] == {"task": "pendulum", "seed": 1}
    mask = pool.rows_of(task="pendulum", seed=1)
    assert np.array_equal(one.obs, pool.obs[mask]) and np.array_equal(one.reward, pool.reward[mask], equal_nan=True)
    kept = pool.select(seed=[0])  # drop the diverged seed 1
    assert [r.seed for r in episode_runs(kept)] == [0, 0, 0] and kept.task_names == pool.task_names
    assert pool.select(run_id=pool.runs[0].run_id).num_episodes == 2
    with pytest.raises(ValueError, match="no episode matches"):
        pool.select(seed=7)
    with pytest.raises(ValueError, match=r"task\(s\) \['walker'\] are not in the task table"):
        pool.rows_of(task="walker")


def duckdb_rows(con, path, where, params):
    return con.execute(f"SELECT episode, step, obs, action, reward, terminated, truncated, task, seed, run_id "
                       f"FROM read_parquet('{path}') WHERE {where} ORDER BY episode, step", params).fetchall()


@pytest.mark.parametrize("kind", ["task", "pool"])
def test_duckdb_filters_on_task_and_seed_return_that_seeds_episodes(files, kind):
    duckdb = reader("duckdb")
    ds, path = files[0][kind], files[1][kind]
    con = duckdb.connect()
    # the query of the issue
    n = con.execute(f"SELECT count(*) FROM '{path}' WHERE task = 'pendulum' AND seed = 1").fetchone()[0]
    assert n == int(ds.rows_of(task="pendulum", seed=1).sum()) == 6 + 1 + 6 + 1 + 2 + 1
    for task in ds.task_names:
        for seed in (0, 1):
            rows = duckdb_rows(con, path, "task = ? AND seed = ?", [task, seed])
            mask = ds.rows_of(task=task, seed=seed)
            assert len(rows) == int(mask.sum()) > 0
            cols = list(zip(*rows))
            assert np.array_equal(cols[0], ds.episode[mask]) and np.array_equal(cols[1], ds.step[mask])
            assert np.array_equal(np.array(cols[2], np.float32), ds.obs[mask])
            assert np.array_equal(np.array(cols[3], np.float32), ds.action[mask], equal_nan=True)
            assert np.array_equal(np.array(cols[4], np.float32), ds.reward[mask], equal_nan=True)
            assert np.array_equal(cols[5], ds.terminated[mask]) and np.array_equal(cols[6], ds.truncated[mask])
            assert set(cols[7]) == {task} and set(cols[8]) == {seed}
            assert set(cols[9]) == {run_id(task, seed, SPEC, CONFIG)}
    # dropping a seed: every other seed's episodes, and the episodes per run
    n = con.execute(f"SELECT count(DISTINCT episode) FROM '{path}' WHERE seed <> 1").fetchone()[0]
    assert n == ds.select(seed=0).num_episodes
    per_run = dict(con.execute(f"SELECT run_id, count(DISTINCT episode) FROM '{path}' GROUP BY run_id").fetchall())
    assert per_run == {r.run_id: int(np.sum(ds.episode_run == i)) for i, r in enumerate(ds.runs)}


@pytest.mark.parametrize("kind", ["task", "pool"])
def test_polars_filters_on_task_and_seed_return_that_seeds_episodes(files, kind):
    pl = reader("polars")
    ds, path = files[0][kind], files[1][kind]
    df = pl.read_parquet(path)
    assert df.schema["seed"] == pl.Int64
    for task in ds.task_names:
        for seed in (0, 1):
            got = df.filter((pl.col("task") == task) & (pl.col("seed") == seed)).sort(["episode", "step"])
            mask = ds.rows_of(task=task, seed=seed)
            sel = ds.select(task=task, seed=seed)
            assert got.height == sel.num_rows == int(mask.sum())
            assert np.array_equal(got["episode"].to_numpy(), ds.episode[mask])
            assert np.array_equal(got["step"].to_numpy(), sel.step)
            assert np.array_equal(np.array(got["obs"].to_list(), np.float32), sel.obs)
            assert np.array_equal(np.array(got["action"].to_list(), np.float32), sel.action, equal_nan=True)
            assert np.array_equal(got["reward"].to_numpy(), sel.reward, equal_nan=True)
            assert got["run_id"].cast(pl.String).unique().to_list() == [run_id(task, seed, SPEC, CONFIG)]
    lazy = pl.scan_parquet(path).filter(pl.col("seed") != 1).select(pl.col("episode").n_unique()).collect()
    assert lazy.item() == ds.select(seed=0).num_episodes


# ------------------------------------------------------------------ version-1 files
def test_version_1_files_read_with_runs_from_their_provenance(tmp_path):
    """Fixtures written by the version-1 code itself (tools/record_dataset_v1.py)."""
    path = FIXTURES / "dataset_v1_export.parquet"
    meta = read_metadata(path)
    assert meta["version"] == 1 and pq.read_schema(path).names == list(dsm.COLUMNS_V1)
    ds = load_dataset(path)
    prov = ds.provenance
    # the run id train-single would have written: a function of what run.json holds
    runjson = json.loads(json.dumps({"task": prov["task"], "seed": prov["seed"], "spec": prov["spec"],
                                     "agent_config": prov["agent_config"]}, indent=2))
    rid = run_id(runjson["task"], runjson["seed"], runjson["spec"], runjson["agent_config"])
    assert ds.runs == (RunInfo(3, rid),) and rid.startswith("walk/seed3/") and np.all(ds.run == 0)
    t = pq.read_table(path)
    assert np.array_equal(np.array(t.column("obs").to_pylist(), np.float32), ds.obs)
    # saved again: version 2, the derived columns written
    out = tmp_path / "again.parquet"
    save_dataset(ds, out)
    assert read_metadata(out)["version"] == 2 and load_dataset(out).runs == ds.runs
    duckdb = reader("duckdb")
    assert duckdb.connect().execute(f"SELECT count(*) FROM '{out}' WHERE seed = 3 AND run_id = ?",
                                    [rid]).fetchone()[0] == ds.num_rows

    pool = load_dataset(FIXTURES / "dataset_v1_pool.parquet")
    assert pool.task_names == ["walk", "hop", "swim"] and pool.num_episodes == 3 + 2 + 1
    codes = pool.obs[pool.episode_starts, 0]  # 10 * task number + seed (the recorder's mark)
    assert codes.tolist() == [10, 10, 11, 22, 22, 35]
    hop = pool.provenance["sources"]["hop"]
    assert episode_runs(pool) == [RunInfo()] * 3 + [RunInfo(2, run_id("hop", 2, hop["spec"], hop["agent_config"]))] * 2 \
        + [RunInfo(5, None)]  # walk: seeds 0 and 1 joined, which episode is whose not recorded


BAD_V2 = {
    "missing seed": (lambda t: t.drop_columns(["seed"]), None, r"missing column\(s\) \['seed'\]"),
    "seed in a version-1 file": (None, lambda m: {**m, "version": 1},
                                 r"unknown column\(s\) \['seed', 'run_id'\]; .* \(version 1;"),
    "mistyped seed": (lambda t: t.set_column(t.schema.get_field_index("seed"), "seed",
                                             t.column("seed").cast(pa.float64())), None,
                      "column 'seed' has type double, expected int64"),
    "mistyped run_id": (lambda t: t.set_column(t.schema.get_field_index("run_id"), "run_id",
                                               pa.array(np.zeros(t.num_rows, np.int64))), None,
                        "column 'run_id' has type int64, expected string"),
    "seed changes in an episode": (lambda t: t.set_column(t.schema.get_field_index("seed"), "seed",
                                                          pa.array([0, 1] + [0] * (t.num_rows - 2), pa.int64())),
                                   None, r"episode 0 changes run \(seed or run id\) at row 1"),
}


@pytest.mark.parametrize("case", sorted(BAD_V2))
def test_bad_run_columns_give_their_error(files, tmp_path, case):
    fn, meta, msg = BAD_V2[case]
    src = files[1]["task"]
    t = pq.read_table(src)
    m = json.loads(t.schema.metadata[dsm.METADATA_KEY])
    t = fn(t) if fn else t
    m = meta(m) if meta else m
    bad = tmp_path / "bad.parquet"
    pq.write_table(t.replace_schema_metadata({dsm.METADATA_KEY: json.dumps(m).encode()}), bad)
    with pytest.raises(DatasetError, match=msg) as exc:
        load_dataset(bad)
    assert str(bad) in str(exc.value)


def test_run_id_is_a_function_of_run_json():
    a = run_id("pendulum", 1, SPEC, CONFIG)
    # a JSON round trip (tuples become lists, keys strings) and key order change nothing
    back = json.loads(json.dumps({"spec": SPEC, "agent_config": dict(reversed(list(CONFIG.items())))}))
    assert run_id("pendulum", np.int64(1), back["spec"], back["agent_config"]) == a
    assert run_id("pendulum", 2, SPEC, CONFIG) != a and run_id("pendulum", 1, {**SPEC, "agent_steps": 21}, CONFIG) != a
    with pytest.raises(ValueError, match="seed must be an int"):
        run_id("pendulum", None, SPEC, CONFIG)


# ------------------------------------------------------------------ the multi-task sampler
def test_multitask_agent_leaves_the_run_columns_on_the_host(files):
    """The runs are not training data: the agent's device copy has no run column, and a pool
    that differs only in its runs is the same training data (the checkpoints' dataset hash)."""
    from tdmpc2core.agents.multitask import TDMPC2MultiTask
    from tdmpc2core.agents.multitask_sampling import DeviceData

    pool = files[0]["pool"]
    anon = EpisodeDataset(**{f: getattr(pool, f) for f in ("obs", "action", "reward", "terminated", "truncated",
                                                         "episode", "step", "task", "tasks")})
    tiny = dict(model_size=1, mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16, num_elites=4,
                num_pi_trajs=2, iterations=1, task_dim=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the 2-step episodes are too short to sample
        agents = [TDMPC2MultiTask(d, batch_size=4, **tiny) for d in (pool, anon)]
    assert type(agents[0].data) is DeviceData and not {"run", "seed", "run_id"} & set(DeviceData._fields)
    assert agents[0].data.obs.shape == pool.obs.shape and agents[0].pool_nbytes == (
        pool.obs.nbytes + pool.action.nbytes + pool.reward.nbytes)
    assert agents[0].dataset_sha256 == agents[1].dataset_sha256
