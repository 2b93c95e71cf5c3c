"""The GPU benchmark (benchmarks/gpu.py) runs in its reduced CPU form, and the peer benchmark
(benchmarks/peers.py) without its peers, so neither can rot."""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_benchmark_reduced_form_runs_on_cpu_and_writes_its_tables(tmp_path):
    out = tmp_path / "gpu.json"
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--reduced", "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=1200)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["meta"]["reduced"] is True and data["meta"]["backend"] == "cpu"
    assert data["meta"]["matmul_precision"] == {"dense_layers": "highest", "jax_default_matmul_precision": "highest"}
    (row,) = data["results"]
    assert row["model_size"] == 1 and row["env_id"] == "Pendulum-v1"
    assert row["kernels"] == "cpu"  # "auto" recorded as what ran: the CPU kernels on the CPU backend
    assert set(row["train"]) == {"2"}  # the vmapped-seeds path (one count: each is a compile)
    for t in row["train"].values():
        assert t["agent_steps_per_s"] > 0 and t["tflop_per_s"] > 0 and t["compile_s"] > 0
    assert row["updates_per_s"] > 0 and row["plan_ms"] > 0 and row["update_gflop_counted"] > 0
    assert row["peak_device_bytes"] is None  # the CPU backend keeps no allocator statistics
    md = out.with_suffix(".md").read_text()
    assert "| model size | kernels | params | updates/s |" in md and "| 1 | cpu | " in md and "agent steps/s, 2 seeds" in md
    assert "n/a (no allocator stats)" in md


def test_gpu_benchmark_rejects_a_bad_figure():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu
    row = {"model_size": 5, "updates_per_s": 1.0, "plan_ms": float("nan"), "update_tflop_per_s": 1.0,
           "compile_s": {"updates": 1.0, "plan": 1.0},
           "train": {"1": {"agent_steps_per_s": 0.0, "tflop_per_s": 1.0, "compile_s": 1.0}}}
    with pytest.raises(ValueError, match="model size 5: non-positive or non-finite figures"):
        gpu.check_row(row)


def test_cost_table_grid_varies_one_axis_at_a_time_and_renders_every_point():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import cost
    points = cost.grid(cost.BASE, cost.AXES)
    assert points[0] == ("base", cost.BASE)
    for axis, point in points[1:]:
        changed = {k for k in cost.BASE if point[k] != cost.BASE[k]}
        assert changed == {axis}, (axis, point)
    # every value of every axis is measured once (the base's own value by the base row)
    assert len(points) == 1 + sum(len(v) - (cost.BASE[a] in v) for a, v in cost.AXES.items())
    rows = [dict(point=p, axis=a, compile_s=10.0, eval_compile_s=5.0, agent_steps_per_s=2.0,
                 s_per_1M_env_frames=5e5) for a, p in points]
    meta = dict(env=cost.ENV, backend="cpu", jax="x", date="d", load_start="1", load_end="2", base=cost.BASE)
    md = cost.markdown(rows, meta)
    assert md.count("\n| ") == len(points) + 1  # header + one row per point
    assert "| horizon | 5 | 10.0 | 5.0 | 2.00 | 139 |" in md and "| base | (base) |" in md
@pytest.mark.slow
def test_peer_benchmark_ours_alone_runs_interleaved_and_writes_its_table(tmp_path):
    """benchmarks/peers.py without the peers (tiny widths, one round): the harness, its worker
    process, the matmul peak and the JSON / Markdown it writes."""
    out = tmp_path / "peers.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "peers.py"), "--peers", "none", "--tiny", "--rounds", "2",
           "--sizes", "1", "--horizon", "1", "--plan-calls", "1", "--matmul-shapes", "64x64x64", "128x64x32",
           "--matmul-seconds", "0.01", "--json", str(out)]
    # its worker process keeps ours' programs in the session's compilation cache (tests/conftest.py),
    # where test_peer_benchmark_in_process_runs_the_jax_peers_in_this_process (the same size, widths,
    # horizon and precision in this process) loads them instead of compiling them again
    env = dict(os.environ)
    if os.environ.get("TDMPC2_TEST_JAX_CACHE"):
        env.update(JAX_COMPILATION_CACHE_DIR=os.environ["TDMPC2_TEST_JAX_CACHE"],
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    data = json.loads(out.read_text())
    meta = data["meta"]
    assert meta["tiny"] is True and meta["rounds"] == 2 and meta["sizes"] == [1]
    assert "load average" in meta["uptime_start"] and "load average" in meta["uptime_end"]
    assert meta["configs"]["1"]["batch_size"] == 8 and meta["configs"]["1"]["horizon"] == 1
    assert set(meta["peers"]) == {"ours"} and meta["peers"]["ours"]["tdmpc2core_file"].endswith("__init__.py")
    assert "lax.scan" in meta["timed_call"]["ours"]["update"]
    row = data["results"]["ours"]["1"]
    assert len(row["updates_per_s"]["rounds"]) == 2 and len(row["plan_ms"]["rounds"]) == 2
    assert row["updates_per_s"]["min"] <= row["updates_per_s"]["median"] <= row["updates_per_s"]["max"]
    assert row["updates_per_block"] == 2 and row["params"] > 0 and row["update_gflop_counted"] > 0
    assert set(data["matmul_gflop_per_s"]) == {"64x64x64", "128x64x32"} and data["matmul_peak_gflop_per_s"] > 0
    assert data["ratios"] == {}  # no peer to compare with
    md = out.with_suffix(".md").read_text()
    assert "| peer | size | params | updates/s median (min-max) |" in md and "| ours | 1 |" in md


def test_peer_benchmark_refuses_a_missing_or_wrong_checkout(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import peers
    with pytest.raises(SystemExit, match="peer official needs --official PATH"):
        peers.main(["--peers", "official"])
    with pytest.raises(SystemExit, match="--tdmpc2-jax /nonexistent/x: no such folder"):
        peers.main(["--peers", "tdmpc2-jax", "--tdmpc2-jax", "/nonexistent/x"])
    with pytest.raises(SystemExit, match="is not a checkout of nicklashansen/tdmpc2"):
        peers.Official({"official": str(tmp_path)})
    with pytest.raises(FileNotFoundError, match="not a checkout of ShaneFlandermeyer/tdmpc2-jax"):
        peers.TdmpcJax({"tdmpc2_jax": str(tmp_path)})
    with pytest.raises(argparse.ArgumentTypeError, match="expected MxKxN"):
        peers.parse_shape("1024x1024")


def test_peer_benchmark_rejects_a_bad_figure():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import peers
    out = {"results": {"ours": {1: {"updates_per_s": {"rounds": [3.0, 0.0]}, "plan_ms": {"rounds": [1.0]}}}},
           "matmul_peak_gflop_per_s": 10.0}
    with pytest.raises(ValueError, match=r"non-positive or non-finite figures: \['ours size 1'\]"):
        peers.check(out)


def test_peer_benchmark_in_process_runs_the_jax_peers_in_this_process(tmp_path, monkeypatch):
    """``--in-process`` (an accelerator one process at a time may hold): no worker process; the
    official PyTorch peer is refused there."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import peers
    monkeypatch.setattr(peers.Worker, "__init__", lambda *a, **k: pytest.fail("a worker process was started"))
    out = tmp_path / "peers.json"
    import jax
    before = jax.config.jax_default_matmul_precision
    assert peers.main(["--peers", "none", "--in-process", "--tiny", "--rounds", "1", "--sizes", "1", "--horizon", "1",
                       "--plan-calls", "1", "--matmul-shapes", "64x64x64", "--matmul-seconds", "0.01",
                       "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["meta"]["in_process"] is True and data["meta"]["device"].startswith("cpu (cpu), jax ")
    assert data["results"]["ours"]["1"]["updates_per_s"]["median"] > 0
    # --precision (highest by default) reaches ours' config field and JAX's default, put back after
    assert data["meta"]["matmul_precision"] == "highest" and data["meta"]["configs"]["1"]["matmul_precision"] == "highest"
    assert data["meta"]["peers"]["ours"]["jax_default_matmul_precision"] == "highest"
    assert jax.config.jax_default_matmul_precision == before
    # another precision, without compiling at it: the config every peer gets, and JAX's default
    assert peers.size_spec(1, 8, 1, True, "high")[1]["matmul_precision"] == "high"
    try:
        assert peers.Ours({"precision": "high"}).info["jax_default_matmul_precision"] == "high"
    finally:
        jax.config.update("jax_default_matmul_precision", before)
    with pytest.raises(SystemExit, match="--in-process runs the JAX peers"):
        peers.main(["--peers", "official", "--official", str(tmp_path), "--in-process"])
    with pytest.raises(SystemExit, match="--precision high with the official peer"):
        peers.main(["--peers", "official", "--official", str(tmp_path), "--precision", "high"])


def test_tick_parts_benchmark_times_parts_and_writes_its_table(tmp_path, monkeypatch):
    """benchmarks/tick_parts.py in its reduced CPU form, two cheap parts, two seeds vmapped: the
    parts harness (fori_loop of repetitions, vmapped seeds), its cost analysis and tables; the
    results written after each part (a device call cut short by its limit keeps what it measured)
    with the code's commit."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import tick_parts
    out = tmp_path / "parts.json"
    written, write = [], tick_parts.write
    monkeypatch.setattr(tick_parts, "write", lambda o, res: (written.append(sorted(res["seeds"]["2"])), write(o, res)))
    assert tick_parts.main(["--reduced", "--seeds", "2", "--parts", "replay_write", "replay_sample",
                            "--out", str(out), "--commit", "abc1234"]) == 0
    assert written[0] == ["replay_write"] and written[-1] == ["replay_sample", "replay_write"]
    data = json.loads(out.read_text())
    assert data["meta"]["backend"] == "cpu" and data["meta"]["precision"] == "highest"
    assert data["meta"]["commit"] == "abc1234"
    assert set(data["seeds"]) == {"2"}
    for s in ("2",):
        assert set(data["seeds"][s]) == {"replay_write", "replay_sample"}
        r = data["seeds"][s]["replay_sample"]
        assert r["seconds_per_call"] > 0 and r["while_lowered"] >= 1 and r["cost"]["bytes_accessed"] > 0
    md = out.with_suffix(".md").read_text()
    assert "| replay_sample | " in md and "2 seeds: ms/call" in md


def test_tick_parts_update_stages_and_device_trace(tmp_path):
    """The update's stages (cumulative prefixes of the library's update, timed alone) and
    ``--profile``: a jax.profiler trace per part, its ops by self time (named as in the compiled
    program written beside it) and the stages' table of differences."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import tick_parts
    out, prof = tmp_path / "parts.json", tmp_path / "prof"
    assert tick_parts.main(["--reduced", "--seeds", "2", "--parts", "update_td", "update_wm_step",
                            "--profile", str(prof), "--out", str(out)]) == 0
    r = json.loads(out.read_text())["seeds"]["2"]
    assert set(r) == {"update_td", "update_wm_step"}
    for name in r:
        p = r[name]["profile"]
        assert r[name]["seconds_per_call"] > 0 and p["source"].startswith("host") and p["op_us_total"] > 0
        hlo = (prof / f"{name}-2" / "program.hlo.txt").read_text()
        assert p["top"] and all(o["op"] in hlo and o["us"] >= 0 for o in p["top"])
        # each top op described from the program (only the JSON comes back from the device)
        described = [o for o in p["top"] if o.get("shape")]
        assert len(described) >= len(p["top"]) // 2, p["top"]
        assert any(o.get("op_name") for o in described)
        assert abs(sum(p["kinds"].values()) - p["op_us_total"]) < 1e-3 * p["op_us_total"] + 1e-6
    md = out.with_suffix(".md").read_text()
    assert "| TD targets | " in md and "| clip + Adam (world model) |  |" in md  # its minuend not measured
    assert "Profile of update_wm_step, 2 seed(s)" in md


def test_tick_parts_tick_alone_measures_no_other_part(tmp_path, monkeypatch):
    """``--parts tick`` times the real training program alone: the parts timed one by one are
    not all measured first (on the TPU they took 110 s of compiling before the tick's own)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import tick_parts
    calls = []
    monkeypatch.setattr(tick_parts, "measure_parts", lambda *a, **k: calls.append(a[-1]) or {})
    tick = {"seconds_per_call": 0.01, "agent_steps_per_s": 100.0}
    monkeypatch.setattr(tick_parts, "measure_tick", lambda agent, S, ticks, repeats: tick)
    out = tmp_path / "parts.json"
    assert tick_parts.main(["--reduced", "--seeds", "1", "--parts", "tick", "--out", str(out)]) == 0
    assert calls == [] and json.loads(out.read_text())["seeds"]["1"] == {"tick": tick}
    assert tick_parts.main(["--reduced", "--seeds", "1", "--parts", "plan", "tick", "--out", str(out)]) == 0
    assert calls == [["plan"]]


def test_accelerator_workflow_bundle_closure_and_psutil_shim():
    """accelerator.py's Snakemake for the TPU machine: the closure packed is Snakemake's installed
    dependencies less what that machine's index gives (at this environment's versions), and the
    shim makes psutil's I/O counters read zero where /proc/PID/io lacks a field (the machine's
    sandbox) instead of failing every job's benchmark."""
    import importlib.metadata as md
    import subprocess
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import accelerator as acc
    closure = acc.workflow_closure()
    assert closure["snakemake"] == md.version("snakemake") and "snakemake-interface-common" in closure
    given = {n.lower() for n in acc.WORKFLOW_INDEX + acc.INDEX_PACKAGES}
    assert not given & set(closure) and {"jinja2", "pyyaml", "psutil"} & given == {"jinja2", "pyyaml", "psutil"}
    probe = ("import psutil\n"
             "def broken(self): raise ValueError(\"b'rchar' field was not found in /proc/1/io\")\n"
             "psutil.Process.io_counters = broken\n"
             f"exec({acc.PSUTIL_SHIM!r})\n"
             "print(psutil.Process().io_counters().read_bytes)")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == "0", res.stderr
    res = subprocess.run([sys.executable, "-c", probe.replace("exec(", "(")], capture_output=True, text=True)
    assert res.returncode != 0 and "rchar" in res.stderr  # without the shim it raises


def test_accelerator_cache_round_trip_splits_and_joins_parts(tmp_path, monkeypatch):
    """benchmarks/accelerator.py: the cache entries a command adds come back as one tar split into
    parts of at most CACHE_CHUNK bytes; ``keep`` copies them and the next ``run`` joins and
    unpacks them (no accelerator needed: the command is a plain Python one)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import accelerator as acc
    monkeypatch.setattr(acc, "ACCEL", tmp_path / "accel")
    monkeypatch.setattr(acc, "CACHE_CHUNK", 4000)
    monkeypatch.setattr(acc, "_setup_site", lambda: None)
    out, cache = tmp_path / "out", tmp_path / "cache"
    out.mkdir()
    monkeypatch.setenv("OUT", str(out))
    write = f"import os; open(os.path.join({str(cache)!r}, 'entry'), 'wb').write(bytes(range(256)) * 10)"
    assert acc.main(["run", "--cache-dir", str(cache), "--", "python", "-c", write]) == 0
    parts = sorted(out.glob("cache-*.tar.part*"))
    assert len(parts) == 3 and all(p.stat().st_size <= 4000 for p in parts)  # a 10240-byte tar
    assert acc.main(["keep", str(out)]) == 0
    cache2 = tmp_path / "cache2"
    assert acc.main(["run", "--cache-dir", str(cache2), "--", "python", "-c", "pass"]) == 0
    assert (cache2 / "entry").read_bytes() == bytes(range(256)) * 10
    # the time limit stops the whole process group: a grandchild (the Python under `bash -c`) too
    marker = tmp_path / "survived"
    grandchild = f"import time; time.sleep(3); open({str(marker)!r}, 'w').write('x')"
    assert acc.main(["run", "--timeout", "1", "--cache-dir", str(cache2), "--", "bash", "-c",
                     f"python3 -c \"{grandchild}\"; true"]) == 124
    import time
    time.sleep(3.5)
    assert not marker.exists()


def test_precision_parity_compares_each_candidate_with_highest_per_task(tmp_path):
    """benchmarks/precision_parity.py's analysis on hand-made rows: a candidate whose seeds
    score within a few points of highest's is equivalent within +-100; one 300 below is
    different; a task without the reference is refused by the comparison and listed as waiting by
    the analysis; the overall verdict follows the rule stated in docs/fidelity.md."""
    import pandas as pd
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import precision_parity as pp

    rows = []
    for prec, shift in (("highest", 0.0), ("default", 3.0), ("high", -300.0)):
        for seed in range(5):
            for step, base in ((10_000, 500.0), (20_000, 700.0)):
                rows.append(dict(precision=prec, task="CheetahRun", seed=seed, agent_step=step, env_frames=2 * step,
                                 episode_return=base + 10.0 * seed + shift + (seed % 2), eval_episodes=10,
                                 model_size=5, device="cpu", jax="x"))
    df = pd.DataFrame(rows)
    res = {r["precision"]: r for r in pp.compare(df)}
    assert set(res) == {"default", "high"}
    assert res["default"]["verdict"] == "equivalent" and abs(res["default"]["diff"] - 3.0) < 1e-9
    assert res["high"]["verdict"] == "different" and res["high"]["steps"] == (10_000, 20_000)
    path = tmp_path / "pp.parquet"
    df.to_parquet(path)
    assert pp.main(["analyze", "--results", str(path), "--summary", str(tmp_path / "pp.md")]) == 0
    assert "| CheetahRun | default | 10000, 20000 | 5, 5 | +3.0" in (tmp_path / "pp.md").read_text()
    with pytest.raises(ValueError, match="no rows at the reference precision 'highest'"):
        pp.compare(df[df["precision"] != "highest"])
    # the stated overall rule: alike only when equivalent on every stated task; a task that is
    # not yet compared leaves it open, one that is not equivalent settles it
    assert pp.overall(pp.compare(df))["high"][0] == "not shown alike"
    assert pp.overall(pp.compare(df))["default"] == ("open", ["CheetahRun"], ["FingerSpin", "CartpoleSwingup"])
    every = pd.concat([df.assign(task=t) for t in pp.DEFAULTS["tasks"]], ignore_index=True)
    assert pp.overall(pp.compare(every))["default"][0] == "learns alike"
    # a partial study (one task without its highest rows yet) is analyzed, the task listed as waiting
    partial = pd.concat([df, df[df["precision"] == "default"].assign(task="FingerSpin")], ignore_index=True)
    partial.to_parquet(path)
    assert pp.main(["analyze", "--results", str(path), "--summary", str(tmp_path / "pp.md")]) == 0
    text = (tmp_path / "pp.md").read_text()
    assert "Not compared yet (no rows at highest): FingerSpin (default)" in text
    assert "- default: open (compared on CheetahRun; not yet on FingerSpin, CartpoleSwingup)" in text
    # the same seeds at both precisions: seeds run at one alone wait for the other, and are named
    extra = df[(df["precision"] == "default") & (df["seed"] < 3)].assign(seed=lambda d: d["seed"] + 5,
                                                                          episode_return=-1000.0)
    res = {r["precision"]: r for r in pp.compare(pd.concat([df, extra], ignore_index=True))}
    assert res["default"]["n"] == (5, 5) and res["default"]["verdict"] == "equivalent"
    assert res["default"]["unpaired"] == {"default": [5, 6, 7]} and res["high"]["unpaired"] == {}
    pd.concat([df, extra], ignore_index=True).to_parquet(path)
    assert pp.main(["analyze", "--results", str(path), "--summary", str(tmp_path / "pp.md")]) == 0
    assert "CheetahRun, default against highest: seeds 5, 6, 7 only at default" in (tmp_path / "pp.md").read_text()
    with pytest.raises(ValueError, match=r"default \(seeds \[5, 6, 7\]\) and highest \(seeds \[0, 1, 2, 3, 4\]\) share no"):
        pp.compare(pd.concat([df[df["precision"] == "highest"], extra], ignore_index=True))
    # bad input: one line naming the file, not an empty table with exit 0 or a traceback
    with pytest.raises(SystemExit, match="nowhere.parquet: no such file"):
        pp.main(["analyze", "--results", str(tmp_path / "nowhere.parquet")])
    (tmp_path / "text.parquet").write_text("not parquet\n")
    with pytest.raises(SystemExit, match="text.parquet: not a readable precision-parity results file"):
        pp.main(["analyze", "--results", str(tmp_path / "text.parquet")])
    df.iloc[:0].to_parquet(tmp_path / "empty.parquet")
    with pytest.raises(SystemExit, match="analyze: no rows in"):
        pp.main(["analyze", "--results", str(tmp_path / "empty.parquet")])
    pd.concat([df[df["precision"] == "highest"], extra], ignore_index=True).to_parquet(path)
    with pytest.raises(SystemExit, match="analyze: task 'CheetahRun': default .* share no seed"):
        pp.main(["analyze", "--results", str(path)])


def test_precision_parity_resumed_calls_share_a_program_cache(tmp_path, monkeypatch):
    """benchmarks/precision_parity.py points the program cache at the run's checkpoint folder
    (so a call resuming the run loads the programs the first call traced: checked on this CPU,
    2026-12-07, `--reduced` stopped and resumed: chunk and eval "loaded"), unless the environment
    names a cache already or ``--program-cache ''`` asks for none."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import precision_parity as pp
    from tdmpc2core.run.program_cache import PROGRAM_CACHE_ENV

    monkeypatch.delenv(PROGRAM_CACHE_ENV, raising=False)
    pp._use_program_cache(None, tmp_path / "CheetahRun-default")
    assert os.environ[PROGRAM_CACHE_ENV] == str(tmp_path / "CheetahRun-default" / "programs")
    monkeypatch.setenv(PROGRAM_CACHE_ENV, "/elsewhere")
    pp._use_program_cache(None, tmp_path / "x")
    assert os.environ[PROGRAM_CACHE_ENV] == "/elsewhere"
    monkeypatch.delenv(PROGRAM_CACHE_ENV)
    pp._use_program_cache("", tmp_path / "x")
    assert PROGRAM_CACHE_ENV not in os.environ


def test_untrained_eval_torch_tie_order_selects_other_elites_than_ours():
    """benchmarks/untrained_eval.py: on all-equal planner values (an untrained agent) the library's
    mppi_update keeps the lowest indices (the policy trajectories first, deviation N10), and the
    script's emulation of torch.topk's tie order keeps the indices torch returns (recorded from
    torch 2.13 on the CPU: 320..383 of 512 for the paper's planner, none of the 24 policy
    trajectories); on values that do not tie both keep the same elites."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import untrained_eval as ue

    from tdmpc2core.model import planner
    from tdmpc2core.model.config import TDMPC2Config

    got = ue.elite_selection(512, 64)
    assert sorted(got["jax"]) == list(range(64))
    assert sorted(got["torch"]) == list(range(320, 384)) and got["torch"] == ue.TORCH_TIE_ORDER[(512, 64)]
    assert not set(got["torch"]) & set(range(24))
    small = ue.elite_selection(64, 8)
    assert sorted(small["jax"]) == list(range(8)) and sorted(small["torch"]) == list(range(40, 48))
    # distinct values: the same elites, in the same order, either way
    cfg = TDMPC2Config(num_samples=64, num_elites=8, num_pi_trajs=0, horizon=1)
    actions = jnp.arange(64, dtype=jnp.float32).reshape(1, 64, 1)
    value = jnp.asarray(np.random.default_rng(0).permutation(64), jnp.float32)
    ours = jax.jit(lambda a, v: planner.mppi_update(cfg, a, v))(actions, value)
    emulated = jax.jit(lambda a, v: ue.torch_ties_update(planner.mppi_update, 64, 8)(cfg, a, v))(actions, value)
    for a, b in zip(ours, emulated):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
