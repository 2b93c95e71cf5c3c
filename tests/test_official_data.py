"""The official mt30 / mt80 dataset chunks -> our episode Parquet (tdmpc2 convert-official-data).

The chunks are made here with torch and tensordict in the official layout (offline_trainer.py /
buffer.py of nicklashansen/tdmpc2: a TensorDict of batch size [N, L] with obs, action, reward,
task; saved with torch.save, loaded with torch.load(weights_only=False)).
"""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

if os.environ.get("CI"):  # CI installs the official extra (.ci/run): missing there is a failure, not a skip
    import tensordict
    import torch
else:
    _why = "is not installed: pip install -e '.[official]' to run the official-dataset tests"
    torch = pytest.importorskip("torch", reason=f"PyTorch {_why}", exc_type=ImportError)
    tensordict = pytest.importorskip("tensordict", reason=f"tensordict {_why}", exc_type=ImportError)

from tdmpc2core.cli import main  # noqa: E402
from tdmpc2core.dataset import RunInfo, load_dataset  # noqa: E402
from tdmpc2core.io import official_data  # noqa: E402
from tdmpc2core.io.official_data import OfficialDataError, task_set_table  # noqa: E402

MT30 = task_set_table("mt30")


def official_episodes(task_ids, task_set="mt30", seed=0, rows=None, reset_action="nan"):
    """Arrays of N official episodes, padded as the official multi-task wrapper pads."""
    table = task_set_table(task_set)
    L = rows or official_data.EPISODE_ROWS[task_set]
    O = max(t["obs_dim"] for t in table)
    A = max(t["action_dim"] for t in table)
    rng = np.random.default_rng(seed)
    N = len(task_ids)
    obs = np.zeros((N, L, O), np.float32)
    act = np.zeros((N, L, A), np.float32)
    rew = rng.uniform(0, 1, (N, L)).astype(np.float32)
    for e, k in enumerate(task_ids):
        t = table[k]
        obs[e, :, : t["obs_dim"]] = rng.normal(size=(L, t["obs_dim"]))
        act[e, :, : t["action_dim"]] = rng.uniform(-1, 1, (L, t["action_dim"]))
        if reset_action == "nan":
            act[e, 0, : t["action_dim"]] = np.nan
    if reset_action == "nan":
        rew[:, 0] = np.nan
    task = np.repeat(np.asarray(task_ids, np.int64)[:, None], L, axis=1)
    return {"obs": obs, "action": act, "reward": rew, "task": task}


def save_chunk(path, arrays, layout="tensordict"):
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
    if layout == "tensordict":
        N, L = arrays["task"].shape
        obj = tensordict.TensorDict(tensors, batch_size=(N, L))
    else:
        obj = tensors
    torch.save(obj, path)


def no_files_under(folder):
    return [] if not os.path.isdir(folder) else sorted(os.listdir(folder))


def test_convert_two_tensordict_chunks(tmp_path):
    src = tmp_path / "mt30"
    src.mkdir()
    a = official_episodes([0, 8, 29], seed=1)
    b = official_episodes([26, 8], seed=2, reset_action="zero")  # row 0 values are never read: any value
    save_chunk(src / "chunk_0.pt", a)
    save_chunk(src / "chunk_1.pt", b)
    out = tmp_path / "results" / "pools" / "mt30.parquet"
    assert main(["convert-official-data", "--src", str(src), "--out", str(out), "--tasks", "mt30"]) == 0
    ds = load_dataset(out)
    assert ds.task_names == [t["name"] for t in MT30] and len(ds.tasks) == 30
    assert ds.obs_dim == 24 and ds.action_dim == 6
    assert ds.num_episodes == 5 and np.all(ds.episode_rows == 501)
    assert list(ds.episode_task) == [0, 8, 29, 26, 8]
    t = {x.name: x for x in ds.tasks}
    assert (t["cartpole-balance"].obs_dim, t["cartpole-balance"].action_dim) == (5, 1)
    assert (t["reacher-three-easy"].obs_dim, t["reacher-three-easy"].action_dim, t["reacher-three-easy"].env_id) \
        == (8, 3, "dmc:reacher-three-easy")
    assert t["walker-stand"].env_id == "dmc:walker-stand" and t["walker-stand"].episode_length == 500
    assert t["walker-stand"].action_repeat == 2 and t["walker-stand"].discount == pytest.approx(0.99)
    # row for row: obs all rows, action / reward rows 1.., row 0 a reset row
    both = {k: np.concatenate([a[k], b[k]]) for k in a}
    np.testing.assert_array_equal(ds.obs.reshape(5, 501, 24), both["obs"])
    np.testing.assert_array_equal(ds.action.reshape(5, 501, 6)[:, 1:], both["action"][:, 1:])
    np.testing.assert_array_equal(ds.reward.reshape(5, 501)[:, 1:], both["reward"][:, 1:])
    assert np.all(np.isnan(ds.reward[ds.step == 0]))
    assert np.isnan(ds.action[ds.step == 0][3, 0]) and np.all(ds.action[ds.step == 0][3, 3:] == 0)  # task 26: 3 dims
    assert np.array_equal(np.flatnonzero(ds.truncated), np.arange(1, 6) * 501 - 1) and not ds.terminated.any()
    assert np.array_equal(ds.episode[ds.step == 0], np.arange(5))
    prov = ds.provenance
    assert prov["kind"] == "official" and prov["task_set"] == "mt30" and prov["episode_rows"] == 501
    assert [s["file"] for s in prov["source_files"]] == ["chunk_0.pt", "chunk_1.pt"]
    assert prov["source_files"][0]["sha256"] == official_data.sha256_file(src / "chunk_0.pt")
    assert prov["reader_versions"]["tensordict"] == tensordict.__version__
    assert no_files_under(out.parent) == ["mt30.parquet"]
    # the release names no seed or run: null seed and run_id columns
    assert ds.runs == (RunInfo(None, None),) and np.all(ds.run == 0)
    runs = pq.read_table(out, columns=["seed", "run_id"])
    assert runs.column("seed").null_count == runs.column("run_id").null_count == ds.num_rows


def test_convert_dict_layout_and_mt80(tmp_path):
    src = tmp_path / "mt80"
    src.mkdir()
    arr = official_episodes([30, 79, 3], task_set="mt80", seed=3)
    arr["episode"] = np.zeros_like(arr["task"])  # the official buffer's own key: accepted, ignored
    save_chunk(src / "chunk_0.pt", arr, layout="dict")
    out = tmp_path / "mt80.parquet"
    assert main(["convert-official-data", "--src", str(src), "--out", str(out), "--tasks", "mt80"]) == 0
    ds = load_dataset(out)
    assert len(ds.tasks) == 80 and ds.obs_dim == 39 and ds.action_dim == 6
    assert np.all(ds.episode_rows == 101)
    mw = ds.tasks[30]
    assert (mw.name, mw.obs_dim, mw.action_dim, mw.episode_length, mw.env_id) == ("mw-assembly", 39, 4, 100,
                                                                                  "mw-assembly")
    assert ds.tasks[3].episode_length == 500  # dm_control's own length (its discount), data in 100-step pieces


def _fails(tmp_path, capsys, src, tasks="mt30"):
    out = tmp_path / "results" / "datasets" / "pools" / "x.parquet"
    rc = main(["convert-official-data", "--src", str(src), "--out", str(out), "--tasks", tasks])
    err = capsys.readouterr().err
    assert rc == 1
    assert not out.exists() and no_files_under(out.parent) == []  # nothing half-written
    return err


def test_error_no_chunks(tmp_path, capsys):
    src = tmp_path / "empty"
    src.mkdir()
    (src / "README.txt").write_text("x")
    err = _fails(tmp_path, capsys, src)
    assert str(src) in err and "no chunk files (*.pt)" in err and "chunk_0.pt" in err and "README.txt" in err


def test_error_other_episode_length(tmp_path, capsys):
    src = tmp_path / "d"
    src.mkdir()
    save_chunk(src / "chunk_0.pt", official_episodes([0, 1], seed=0))
    save_chunk(src / "chunk_1.pt", official_episodes([0], task_set="mt30", rows=101))
    err = _fails(tmp_path, capsys, src)
    assert "chunk_1.pt" in err and "[N, 501]" in err and "101" in err and "--tasks" in err


def test_error_task_id_out_of_range(tmp_path, capsys):
    src = tmp_path / "d"
    src.mkdir()
    arr = official_episodes([0, 1], seed=0)
    arr["task"][1, :] = 30
    save_chunk(src / "chunk_0.pt", arr)
    err = _fails(tmp_path, capsys, src)
    assert "chunk_0.pt" in err and "'task'" in err and "task id 30" in err and "0..29" in err


@pytest.mark.parametrize("case", ["missing_key", "unknown_key", "obs_padding", "action_padding", "not_tensors"])
def test_error_layout(tmp_path, capsys, case):
    src = tmp_path / "d"
    src.mkdir()
    arr = official_episodes([8], seed=0)  # cartpole-balance: obs 5, action 1
    if case == "missing_key":
        del arr["reward"]
    elif case == "unknown_key":
        arr["advantage"] = arr["reward"].copy()
    elif case == "obs_padding":
        arr["obs"][0, 7, 10] = 1.0
    elif case == "action_padding":
        arr["action"][0, 7, 2] = 0.5
    if case == "not_tensors":
        torch.save([1, 2, 3], src / "chunk_0.pt")
    else:
        save_chunk(src / "chunk_0.pt", arr)
    err = _fails(tmp_path, capsys, src)
    assert "chunk_0.pt" in err
    want = {"missing_key": "missing key(s) ['reward']", "unknown_key": "unknown key(s) ['advantage']",
            "obs_padding": "key 'obs'", "action_padding": "key 'action'", "not_tensors": "holds a list"}[case]
    assert want in err, err


def test_help_says_trusted_sources(capsys):
    with pytest.raises(SystemExit):
        main(["convert-official-data", "--help"])
    out = capsys.readouterr().out
    assert "trusted source" in out and "unpickles" in out


def test_task_sets_match_the_official_lists_and_our_envs():
    from tdmpc2core.envs.dmcontrol_ids import DMCONTROL_ENVS, MT30_TASKS, REFUSED_TASKS

    mt80 = task_set_table("mt80")
    assert tuple(t["name"] for t in MT30) == MT30_TASKS
    assert [t["name"] for t in mt80[:30]] == list(MT30_TASKS) and len(mt80) == 80
    assert all(t["name"].startswith("mw-") and (t["obs_dim"], t["action_dim"]) == (39, 4) for t in mt80[30:])
    assert all(t["env_id"] == t["name"] and (t["episode_length"], t["action_repeat"]) == (100, 2) for t in mt80[30:])
    # the Hugging Face dataset card's largest dims: MT30 obs 24 / action 6, MT80 39 / 6
    assert (max(t["obs_dim"] for t in MT30), max(t["action_dim"] for t in MT30)) == (24, 6)
    assert (max(t["obs_dim"] for t in mt80), max(t["action_dim"] for t in mt80)) == (39, 6)
    for t in MT30:   # every mt30 task has our environment (the three-link reachers too)
        assert t["env_id"] == "dmc:" + t["name"] and t["env_id"] in DMCONTROL_ENVS, t["name"]
        assert t["name"] not in REFUSED_TASKS


def test_task_set_dims_are_our_dm_control_envs_dims():
    """obs / action dims of the table = our dm_control envs' (the official wrapper's flattening)."""
    pytest.importorskip("dm_control")
    from tdmpc2core.envs import make_env

    seen = {}
    for t in MT30:
        env = make_env(t["env_id"], action_repeat=2, episode_length=1000)
        seen[t["name"]] = (env.spec.obs_dim, env.spec.action_dim, env.spec.episode_length)
    want = {t["name"]: (t["obs_dim"], t["action_dim"], t["episode_length"]) for t in MT30}
    assert seen == want and len(seen) == 30
