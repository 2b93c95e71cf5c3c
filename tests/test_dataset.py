"""Episode datasets (tdmpc2core.dataset): export of a run's replay, concatenation, pooling,
Parquet round trip, the checks of load_dataset, and third-party readers."""
from __future__ import annotations

import json
import os
import warnings

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tdmpc2core import TDMPC2
from tdmpc2core import dataset as dsm
from tdmpc2core.dataset import (DatasetError, EpisodeDataset, RunInfo, TaskInfo, concatenate_episodes,
                                export_episodes, load_dataset, pool_tasks, run_id, sampleable_episodes, save_dataset)

TINY = dict(model_size=1, mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16, num_elites=4,
            num_pi_trajs=2, iterations=1, batch_size=16)


def synthetic(name, obs_dim, action_dim, T, lengths, seed=0, terminated_last=None, action_repeat=1):
    """A single-task dataset of episodes with the given agent-step lengths."""
    rng = np.random.default_rng(seed)
    eps = []
    for i, n in enumerate(lengths):
        obs = rng.standard_normal((n + 1, obs_dim)).astype(np.float32)
        act = rng.uniform(-1, 1, (n + 1, action_dim)).astype(np.float32)
        rew = rng.standard_normal(n + 1).astype(np.float32)
        act[0], rew[0] = np.nan, np.nan
        term = np.zeros(n + 1, bool)
        if terminated_last is not None and terminated_last[i]:
            term[-1] = True
        eps.append({"obs": obs, "action": act, "reward": rew, "terminated": term})
    task = TaskInfo(name, obs_dim, action_dim, T, action_repeat, 0.99, None)
    return dsm.from_episodes(eps, task, {"kind": "synthetic", "seed": seed}, seed=seed)


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint8)


def assert_same(a: EpisodeDataset, b: EpisodeDataset):
    for f in ("obs", "action", "reward", "terminated", "truncated", "episode", "step", "task"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and x.shape == y.shape, f
        assert np.array_equal(bits(x), bits(y)), f  # bit for bit, NaN payloads included
    assert a.tasks == b.tasks


# ------------------------------------------------------------------ export from a run
RUN_STEPS, BUFFER = 1000, 1000  # the fixture's call; the replay holds 1000 agent steps (5 episodes)


@pytest.fixture(scope="module")
def run():
    """The first call (1000 agent steps) of a 2000-step run whose replay holds 1000 agent steps:
    no longer than ``buffer_size``, so nothing is evicted yet. The eviction test continues a copy
    of it with the same compiled program (same agent, same replay shape): nothing to compile."""
    agent = TDMPC2("Pendulum-v1", n_envs=2, seed_steps=400, buffer_size=BUFFER, **TINY)  # T = 200
    finished = []
    state, hist = agent.train(seed=[0, 1], n_timesteps=RUN_STEPS, total_timesteps=2 * RUN_STEPS,
                              callback=lambda r: finished.append(r))
    return agent, state, finished, hist


def test_export_equals_the_rows_the_run_collected(run):
    agent, state, chunks, _ = run
    for i in range(2):
        ds = export_episodes(agent, state, seed_index=i, name="pendulum", seed=i)
        # 1000 agent steps over 2 envs = 500 ticks: 2 rounds of 2 complete episodes (the third in progress)
        assert ds.num_episodes == 4 and ds.num_transitions == 4 * 200 and ds.num_rows == 4 * 201
        assert ds.tasks[0] == TaskInfo("pendulum", 3, 1, 200, 1, agent.gamma, "Pendulum-v1")
        replay = jax.tree_util.tree_map(lambda x: np.asarray(x[i]), state.replay)
        # rounds in order, env order within a round: slots 0,1 then 2,3 of the ring
        for e in range(4):
            rows = slice(e * 201, (e + 1) * 201)
            assert np.array_equal(bits(ds.obs[rows]), bits(replay.obs[e]))
            assert np.array_equal(bits(ds.action[rows]), bits(replay.action[e]))
            assert np.array_equal(bits(ds.reward[rows]), bits(replay.reward[e]))
        assert np.all(np.isnan(ds.action[ds.step == 0])) and np.all(np.isnan(ds.reward[ds.step == 0]))
        assert not ds.terminated.any() and ds.truncated.sum() == 4 and np.all(ds.truncated[ds.step == 200])
        # Pendulum obs = (cos, sin, thetadot): on the unit circle, and the rewards the run summed
        assert np.allclose(ds.obs[:, 0] ** 2 + ds.obs[:, 1] ** 2, 1.0, atol=1e-5)
        # the training returns the run reported are these episodes' returns
        tr = [c["train_return"][i] for c in chunks if np.isfinite(c["train_return"][i])]
        assert len(tr) == 2 and np.isclose(np.mean(tr), ds.episode_returns().mean(), rtol=1e-5)
        assert np.isclose(np.sum(ds.episode_returns()),
                          np.nansum(replay.reward[:4]), rtol=1e-6)
        assert ds.provenance["seed"] == i and ds.provenance["git"]["commit"] is not None
        assert ds.runs == (RunInfo(i, None),) and np.all(ds.run == 0)  # every row: the seed given, no run id
        assert ds.provenance["packages"]["tdmpc2core"] and ds.provenance["agent_config"]["env_id"] == "Pendulum-v1"


def test_export_refuses_a_missing_seed_index_and_evicted_episodes(run):
    agent, state, _, hist = run
    with pytest.raises(ValueError, match="seed_index"):
        export_episodes(agent, state)
    with pytest.raises(ValueError, match="out of range"):
        export_episodes(agent, state, seed_index=2)
    # the run continued (a copy: the state is donated) to 2000 agent steps = 1000 ticks: 8 episodes
    # committed (4 rounds of 2); the ring holds 5 (+ 2 being written), so it wrapped and evicted 3
    copy = jax.tree_util.tree_map(lambda x: x.copy(), state)
    st, _ = agent.train(seed=[0, 1], n_timesteps=RUN_STEPS, total_timesteps=2 * RUN_STEPS, state=copy,
                        history=hist)
    with pytest.raises(ValueError, match=r"evicted 3 older episode\(s\) \(buffer_size=1000 agent steps\)"):
        export_episodes(agent, st, seed_index=1)
    ds = export_episodes(agent, st, seed_index=1, allow_evicted=True)
    assert ds.num_episodes == 5 and ds.provenance["evicted_episodes"] == 3
    assert ds.num_rows == 5 * 201 and np.all(ds.truncated[ds.step == 200])


def test_export_round_trips_bit_for_bit_and_third_party_readers_read_it(run, tmp_path):
    agent, state, _, _ = run
    ds = export_episodes(agent, state, seed_index=0, name="pendulum")
    path = tmp_path / "pendulum.parquet"
    size = save_dataset(ds, path)
    assert size == os.path.getsize(path) > 0
    back = load_dataset(path)
    assert_same(ds, back)
    assert back.provenance["task"] == "pendulum"
    # pyarrow
    t = pq.read_table(path)
    assert t.num_rows == ds.num_rows and t.schema.field("obs").type == pa.list_(pa.float32(), 3)
    assert pq.ParquetFile(path).metadata.num_row_groups >= 1
    # pandas
    df = pq.read_table(path).to_pandas()
    assert list(df.columns) == list(dsm.COLUMNS)
    assert np.array_equal(np.stack(df["obs"].to_numpy()), ds.obs)
    assert set(df["task"].astype(str)) == {"pendulum"}
    # DuckDB
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    n, steps, ret = con.execute(
        f"SELECT count(DISTINCT episode), count(*), sum(reward) FROM read_parquet('{path}') WHERE step > 0"
    ).fetchone()
    assert n == 4 and steps == ds.num_transitions
    rows = con.execute(f"SELECT count(*) FROM read_parquet('{path}')").fetchone()[0]
    assert rows == ds.num_rows
    assert np.isclose(ret, np.nansum(ds.reward.astype(np.float64)), rtol=1e-6)
    first = con.execute(f"SELECT obs FROM read_parquet('{path}') WHERE episode = 1 AND step = 3").fetchone()[0]
    assert np.allclose(first, ds.obs[201 + 3])
    # exported without a seed: the seed and run id are unknown, null in the file
    assert back.runs == (RunInfo(None, None),)
    assert con.execute(f"SELECT count(*) FROM '{path}' WHERE seed IS NULL AND run_id IS NULL").fetchone()[0] == rows


def test_export_with_the_stage_run_id_matches_a_version_1_files_derivation(run, tmp_path):
    """train-single's export: every row has the seed and run_id that its run.json records
    (:func:`tdmpc2core.io.provenance.run_id` of the task, seed, spec and agent config). The same
    file in version 1 (no such columns) gets the same run from its provenance: the agent's real
    configuration survives the file's JSON metadata unchanged for the id."""
    agent, state, _, _ = run
    spec = {"env_id": "Pendulum-v1", "agent_steps": RUN_STEPS, "agent": dict(TINY, seed_steps=400)}
    rid = run_id("pendulum", 1, spec, agent.config)
    ds = export_episodes(agent, state, seed_index=1, name="pendulum", seed=1, run_id=rid,
                         provenance={"spec": spec})
    assert ds.runs == (RunInfo(1, rid),) and ds.provenance["run_id"] == rid
    path = tmp_path / "episodes.parquet"
    save_dataset(ds, path)
    assert load_dataset(path).runs == ds.runs
    # as the version-1 code wrote it: no seed or run_id column, version 1
    v1 = rewrite(path, tmp_path / "v1.parquet", lambda t: t.drop_columns(["seed", "run_id"]),
                 lambda m: {**m, "version": 1})
    back = load_dataset(v1)
    assert back.runs == (RunInfo(1, rid),) and np.array_equal(back.run, ds.run)
    assert_same(ds, back)


# ------------------------------------------------------------------ concatenate, pool
def test_concatenate_seeds_and_refusals():
    a = synthetic("walk", 4, 2, 10, [10, 10], seed=0)
    b = synthetic("walk", 4, 2, 10, [10], seed=1)
    c = concatenate_episodes([a, b])
    assert c.num_episodes == 3 and list(np.unique(c.episode)) == [0, 1, 2]
    assert np.array_equal(c.obs[: a.num_rows], a.obs) and np.array_equal(c.obs[a.num_rows:], b.obs)
    with pytest.raises(ValueError, match="obs_dim"):
        concatenate_episodes([a, synthetic("walk", 5, 2, 10, [10])])
    with pytest.raises(ValueError, match="episode_length"):
        concatenate_episodes([a, synthetic("walk", 4, 2, 12, [10])])
    with pytest.raises(ValueError, match="name"):
        concatenate_episodes([a, synthetic("run", 4, 2, 10, [10])])
    with pytest.raises(ValueError, match="no datasets"):
        concatenate_episodes([])


def test_pool_pads_and_keeps_per_task_metadata(tmp_path):
    a = synthetic("a", 3, 1, 5, [5, 5], seed=0)
    b = synthetic("b", 6, 4, 8, [8], seed=1, action_repeat=2)
    c = synthetic("c", 2, 2, 3, [1, 3], seed=2, terminated_last=[True, False])  # a terminated episode
    pool = pool_tasks([a, b, c])
    assert pool.obs_dim == 6 and pool.action_dim == 4
    assert [t.name for t in pool.tasks] == ["a", "b", "c"]
    assert [(t.obs_dim, t.action_dim, t.episode_length, t.action_repeat) for t in pool.tasks] == \
        [(3, 1, 5, 1), (6, 4, 8, 2), (2, 2, 3, 1)]
    assert list(pool.episode_task) == [0, 0, 1, 2, 2] and list(pool.episode_rows) == [6, 6, 9, 2, 4]
    ra = slice(0, a.num_rows)
    assert np.array_equal(pool.obs[ra, :3], a.obs) and np.all(pool.obs[ra, 3:] == 0)
    assert np.array_equal(pool.action[ra, :1], a.action, equal_nan=True) and np.all(pool.action[ra, 1:] == 0)
    rc = slice(a.num_rows + b.num_rows, None)
    assert np.all(pool.obs[rc, 2:] == 0) and np.all(pool.action[rc, 2:] == 0)
    assert pool.terminated[rc].tolist() == [False, True, False, False, False, False]
    path = tmp_path / "pool.parquet"
    save_dataset(pool, path)
    back = load_dataset(path)
    assert_same(pool, back)
    assert json.loads(pq.read_schema(path).metadata[dsm.METADATA_KEY])["tasks"][1]["action_repeat"] == 2
    with pytest.raises(ValueError, match="unique"):
        pool_tasks([a, a])
    with pytest.raises(ValueError, match="holds 3 tasks"):
        pool_tasks([pool])


def test_short_episodes_are_kept_and_dropped_from_sampling_with_a_warning():
    d = synthetic("c", 2, 2, 10, [1, 10, 2], terminated_last=[True, False, True])
    with pytest.warns(UserWarning, match="2 of 3 episodes have fewer than horizon"):
        starts, rows, task = sampleable_episodes(d, horizon=3)
    assert list(starts) == [2] and list(rows) == [11]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(sampleable_episodes(d, horizon=1)[1]) == [2, 11, 3]  # H + 1 = 2 rows: all sampleable
    with pytest.raises(ValueError, match="nothing can be sampled"):
        sampleable_episodes(synthetic("c", 2, 2, 10, [1, 2], terminated_last=[True, True]), horizon=3)


# ------------------------------------------------------------------ bad files
def write_table(path, table):
    pq.write_table(table, path)


@pytest.fixture
def good(tmp_path):
    ds = synthetic("a", 3, 2, 4, [4, 4, 2], terminated_last=[False, False, True])
    path = tmp_path / "good.parquet"
    save_dataset(ds, path)
    return ds, path


def rewrite(path, out, fn=None, meta=None):
    """Copy a dataset file through a table transform and/or a metadata transform."""
    t = pq.read_table(path)
    m = json.loads(t.schema.metadata[dsm.METADATA_KEY])
    if fn is not None:
        t = fn(t)
    if meta is not None:
        m = meta(m)
    t = t.replace_schema_metadata({dsm.METADATA_KEY: json.dumps(m).encode()})
    pq.write_table(t, out)
    return out


def set_col(t, name, values, typ=None):
    i = t.schema.get_field_index(name)
    return t.set_column(i, name, pa.array(values, typ or t.schema.field(name).type))


BAD = {
    "format": (None, lambda m: {**m, "format": "other"}, "format 'other'"),
    "version": (None, lambda m: {**m, "version": 99}, "version 99"),
    "missing column": (lambda t: t.drop_columns(["truncated"]), None, r"missing column\(s\) \['truncated'\]"),
    "mistyped column": (lambda t: t.set_column(1, "step", t.column("step").cast(pa.float64())), None,
                        "column 'step' has type double"),
    "gap": (lambda t: set_col(t, "step", [0, 1, 2, 4, 5] + t.column("step").to_pylist()[5:]), None,
            "has a gap"),
    "repeated step": (lambda t: set_col(t, "step", [0, 1, 2, 2, 4] + t.column("step").to_pylist()[5:]), None,
                      "repeated step"),
    "nan reward": (lambda t: set_col(t, "reward", [np.nan, np.nan] + t.column("reward").to_pylist()[2:]), None,
                   "NaN or infinite reward outside a reset row at row 1"),
    "nan obs": (lambda t: set_col(t, "obs", [[np.nan, 0, 0]] + t.column("obs").to_pylist()[1:]), None,
                "non-finite observation at row 0"),
    "unknown task": (lambda t: set_col(t, "task", ["zzz"] * t.num_rows, pa.string()), None,
                     r"task name\(s\) \['zzz'\] are not in the task table"),
    "obs width": (None, lambda m: {**m, "tasks": [{**m["tasks"][0], "obs_dim": 4}]},
                  "column 'obs' has width 3, but the task table's largest obs_dim is 4"),
    "action width": (None, lambda m: {**m, "tasks": [{**m["tasks"][0], "action_dim": 1}]},
                     "column 'action' has width 2, but the task table's largest action_dim is 1"),
    "incomplete episode": (lambda t: t.slice(0, t.num_rows - 1), None, "is not complete"),
    # nothing is dropped without a word: another column or metadata key is refused
    "extra column": (lambda t: t.append_column("advantage", pa.array(np.zeros(t.num_rows, np.float32))), None,
                     r"unknown column\(s\) \['advantage'\]; a tdmpc2core.episodes file has exactly the columns"),
    "extra metadata key": (None, lambda m: {**m, "reward_scale": 0.1},
                           r"unknown key\(s\) \['reward_scale'\] in the 'tdmpc2core.dataset' metadata"),
    "extra task key": (None, lambda m: {**m, "tasks": [{**m["tasks"][0], "reward_scale": 0.1}]},
                       "a task table entry must have the keys"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_files_give_their_error(good, tmp_path, case):
    fn, meta, msg = BAD[case]
    path = rewrite(good[1], tmp_path / f"bad-{case}.parquet", fn, meta)
    with pytest.raises(DatasetError, match=msg) as exc:
        load_dataset(path)
    assert str(path) in str(exc.value)


def test_truncated_file_and_not_a_dataset(good, tmp_path):
    data = good[1].read_bytes()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(data[: len(data) // 2])  # a job killed mid-write (without the atomic rename)
    with pytest.raises(DatasetError, match="not a complete Parquet file"):
        load_dataset(cut)
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), plain)
    with pytest.raises(DatasetError, match="not a tdmpc2core.episodes file"):
        load_dataset(plain)
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        load_dataset(tmp_path / "nope.parquet")


def test_an_invalid_dataset_is_not_written_and_nothing_is_left_behind(good, tmp_path):
    ds = good[0]
    bad = EpisodeDataset(**{**{f: getattr(ds, f) for f in ("obs", "action", "reward", "terminated", "truncated",
                                                            "episode", "step", "task", "tasks")},
                            "step": ds.step.copy() * 0})
    out = tmp_path / "sub" / "x.parquet"
    with pytest.raises(DatasetError):
        save_dataset(bad, out)
    assert not out.exists() and list((tmp_path / "sub").glob("*") if (tmp_path / "sub").exists() else []) == []

    # a save interrupted mid-write leaves only the temporary name, never the final one
    class Boom(Exception):
        pass

    real = pq.write_table

    def exploding(table, where, **kw):
        real(table.slice(0, 3), where, **kw)
        raise Boom()

    out2 = tmp_path / "y.parquet"
    pq.write_table = exploding
    try:
        with pytest.raises(Boom):
            save_dataset(ds, out2)
    finally:
        pq.write_table = real
    assert not out2.exists() and list(tmp_path.glob(".tmp-*")) == []


# ------------------------------------------------------------------ the stages
def test_stages_join_pool_and_refuse_bad_inputs_leaving_nothing(tmp_path):
    import subprocess
    import sys

    a0 = synthetic("a", 3, 1, 5, [5, 5], seed=0)
    a1 = synthetic("a", 3, 1, 5, [5], seed=1)
    b0 = synthetic("b", 4, 2, 8, [8], seed=2)
    paths = {}
    for name, d in (("a0", a0), ("a1", a1), ("b0", b0)):
        paths[name] = tmp_path / f"{name}.parquet"
        save_dataset(d, paths[name])

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "tdmpc2core.cli", *map(str, args)], capture_output=True,
                              text=True, timeout=300)

    res = cli("dataset-task", "--inputs", paths["a0"], paths["a1"], "--out", tmp_path / "tasks/a.parquet")
    assert res.returncode == 0, res.stderr
    res = cli("dataset-pool", "--inputs", tmp_path / "tasks/a.parquet", paths["b0"], "--out", tmp_path / "p.parquet")
    assert res.returncode == 0, res.stderr
    pool = load_dataset(tmp_path / "p.parquet")
    assert pool.task_names == ["a", "b"] and pool.num_episodes == 4 and pool.obs_dim == 4
    assert [pool.runs[i].seed for i in pool.episode_run] == [0, 0, 1, 2]  # each episode keeps its seed
    res = cli("dataset-summary", "--tasks", tmp_path / "tasks/a.parquet", "--pools", tmp_path / "p.parquet",
              "--out", tmp_path / "summary.parquet", "--figure", tmp_path / "fig.png")
    assert res.returncode == 0, res.stderr
    import pandas as pd
    s = pd.read_parquet(tmp_path / "summary.parquet")
    assert len(s) == 3 + 4 and set(s["kind"]) == {"task", "pool"}
    assert np.allclose(s[s["kind"] == "pool"]["return"].to_numpy(), pool.episode_returns())

    # a bad input: a clear error naming the file, and no output (not even a temporary one)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(paths["b0"].read_bytes()[:100])
    res = cli("dataset-task", "--inputs", paths["a0"], bad, "--out", tmp_path / "out/x.parquet")
    assert res.returncode != 0 and "bad.parquet: not a complete Parquet file" in res.stderr
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    res = cli("dataset-task", "--inputs", paths["a0"], paths["b0"], "--out", tmp_path / "out/y.parquet")
    assert res.returncode != 0 and "disagrees with dataset 0" in res.stderr
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    # an episode file with a column the format does not have: refused by name, not pooled without it
    extra = rewrite(paths["b0"], tmp_path / "extra.parquet",
                    lambda t: t.append_column("advantage", pa.array(np.zeros(t.num_rows, np.float32))))
    res = cli("dataset-pool", "--inputs", tmp_path / "tasks/a.parquet", extra, "--out", tmp_path / "out/p.parquet")
    assert res.returncode == 1 and "extra.parquet: unknown column(s) ['advantage']" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_train_multi_refuses_a_batch_larger_than_the_pool(tmp_path, capsys):
    """The job's side of the load-time check (tdmpc2core.model.config.check_batch_size): a pool of
    two Pendulum episodes of 201 rows holds 2 x (201 - 3) = 396 distinct slices of horizon + 1
    rows, so a batch of 397 would repeat slices; refused in one line before any training.
    Through the command's entry point (``tdmpc2core.cli.main``, which prints the one-line error
    and sets the exit code) in this process; the stage tests above run the CLI as a subprocess."""
    from tdmpc2core.cli import main

    ds = synthetic("pendulum", 3, 1, 200, [200, 200])
    ds = EpisodeDataset(**{f: getattr(ds, f) for f in ("obs", "action", "reward", "terminated", "truncated",
                                                          "episode", "step", "task")},
                        tasks=(TaskInfo("pendulum", 3, 1, 200, 1, 0.975, "Pendulum-v1"),), provenance={})
    save_dataset(ds, tmp_path / "pool.parquet")
    agent = {k: v for k, v in TINY.items() if k not in ("model_size", "batch_size")}

    spec = {"updates": 1, "batch_size": 397, "eval_every": 1, "eval_episodes": 1, "agent": agent}
    rc = main(["train-multi", "--pool", "p", "--model-size", "1", "--dataset", str(tmp_path / "pool.parquet"),
               "--spec", json.dumps(spec), "--seeds", "0", "--outdir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 1, err[-3000:]
    assert ("tdmpc2 train-multi: error: ValueError: batch_size=397 exceeds the 396 distinct training slices "
            f"(horizon + 1 consecutive rows of one episode) that the pooled dataset {tmp_path / 'pool.parquet'} "
            "holds") in err
    assert not (tmp_path / "out" / "run.json").exists()
