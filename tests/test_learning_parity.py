"""Learning beside the official code (issue 30): the statistics of
tdmpc2core/report/learning_parity.py on synthetic data with known answers, and the harness
benchmarks/learning_parity.py in its reduced form (ours alone: one task, two seeds, a few hundred
steps, no statistics) through the code path that writes the Parquet file, so it cannot rot.

The official side needs a checkout of nicklashansen/tdmpc2 at 5f6fade and a Python with PyTorch,
torchrl, tensordict, omegaconf, hydra-core, gym 0.26 and dm_control: its test runs
when ``TDMPC2_OFFICIAL_CHECKOUT`` (and optionally ``TDMPC2_OFFICIAL_PYTHON``) name them, and
skips with that reason otherwise (CI has neither).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tdmpc2core.report import learning_parity as lp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import learning_parity as bench  # noqa: E402


# --------------------------------------------------------------------------- statistics
def test_bootstrap_ci_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    hits = 0
    trials = 300
    for i in range(trials):
        x = rng.normal(500.0, 80.0, size=30)
        lo, hi = lp.bootstrap_ci(x, reps=1000, seed=i)
        assert lo <= x.mean() <= hi
        hits += lo <= 500.0 <= hi
    assert 0.90 <= hits / trials <= 0.99, hits / trials
    assert lp.bootstrap_ci([3.0]) == (3.0, 3.0)
    assert all(np.isnan(lp.bootstrap_ci([])))


def test_welch_matches_scipy_and_tost_accepts_equal_and_rejects_shifted_means():
    from scipy import stats

    rng = np.random.default_rng(2)
    a, b = rng.normal(600, 40, size=12), rng.normal(590, 60, size=9)
    d, se, df = lp.welch(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False)
    assert np.isclose(2 * stats.t.sf(abs(d) / se, df), ref.pvalue, rtol=1e-10)
    # equal means, small spread: equivalent within +-100
    t = lp.welch_tost(rng.normal(700, 30, size=40), rng.normal(700, 30, size=40), margin=100)
    assert t["equivalent"] and lp.verdict(t) == "equivalent" and t["ci90"][0] > -100 and t["ci90"][1] < 100
    # a shift of 300: not equivalent, and different (the 90% interval lies beyond the margin)
    t = lp.welch_tost(rng.normal(400, 30, size=40), rng.normal(700, 30, size=40), margin=100)
    assert not t["equivalent"] and lp.verdict(t) == "different" and t["ci90"][1] < -100
    # a shift exactly at the margin is never equivalent (p_tost about 0.5)
    a = rng.normal(0, 10, size=200)
    t = lp.welch_tost(a + 100 - a.mean(), a - a.mean(), margin=100)
    assert not t["equivalent"] and 0.3 < t["p_tost"] < 0.7
    # too few seeds to tell: inconclusive, not "equivalent"
    t = lp.welch_tost([100.0, 900.0], [200.0, 800.0], margin=100)
    assert lp.verdict(t) == "inconclusive"
    with pytest.raises(ValueError, match="at least 2 values per side"):
        lp.welch([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="margin=0"):
        lp.welch_tost([1.0, 2.0], [1.0, 2.0], margin=0)


def synthetic(shift: float, n: int = 6, seed: int = 0) -> pd.DataFrame:
    """Two implementations x two tasks; ours = official + ``shift`` on task "b" only."""
    rng = np.random.default_rng(seed)
    rows = []
    for task in ("a", "b"):
        for impl in lp.IMPLEMENTATIONS:
            for s in range(n):
                for step in (0, 1000, 2000, 3000):
                    r = 100 + 0.25 * step + rng.normal(0, 20) + (shift if (impl == "ours" and task == "b") else 0)
                    rows.append(dict(implementation=impl, task=task, seed=s, agent_step=step, env_frames=2 * step,
                                     episode_return=r, eval_episodes=2))
    return pd.DataFrame(rows)


def test_comparison_gives_the_verdict_per_task_from_the_last_two_points(tmp_path):
    df = lp.check_frame(synthetic(shift=-400.0))
    scores = lp.seed_scores(df)
    assert set(scores["steps"]) == {(2000, 3000)} and len(scores) == 2 * 2 * 6
    comp = lp.comparison(df, reps=500).set_index("task")
    assert comp.loc["a", "verdict"] == "equivalent"
    assert comp.loc["b", "verdict"] == "different" and comp.loc["b", "diff"] < -300
    md = lp.comparison_markdown(comp.reset_index())
    assert "| a | 2000, 3000 |" in md and "equivalent" in md and "different" in md
    curves = lp.curve_table(df, reps=200)
    assert len(curves) == 2 * 4 * 2 and (curves["ci_low"] <= curves["mean"]).all()
    lp.plot_task(curves, "a", tmp_path / "a.png", df=df)
    assert (tmp_path / "a.png").stat().st_size > 1000
    # one implementation only: no test, said so
    one = lp.comparison(df[df["implementation"] == "ours"], reps=100)
    assert set(one["verdict"]) == {"one implementation only"}


def test_the_results_file_is_checked_with_the_key_named(tmp_path):
    df = synthetic(0.0, n=2)
    with pytest.raises(ValueError, match=r"missing column\(s\) \['episode_return'\]"):
        lp.check_frame(df.drop(columns=["episode_return"]))
    with pytest.raises(ValueError, match=r"implementation\(s\) \['theirs'\] unknown"):
        lp.check_frame(df.assign(implementation="theirs"))
    with pytest.raises(ValueError, match="duplicated row"):
        lp.check_frame(pd.concat([df, df.iloc[:1]]))
    with pytest.raises(ValueError, match="column 'seed' has dtype float64"):
        lp.check_frame(df.assign(seed=df["seed"].astype(float)))
    with pytest.raises(FileNotFoundError, match="do not exist"):
        lp.read_results(tmp_path / "none.parquet")
    with pytest.raises(ValueError, match="no rows"):
        lp.check_frame(df.iloc[:0])


def test_top_k_ties_pick_the_lowest_indices():
    """docs/deviations.md N10: on exactly equal values (an untrained planner's: zero-initialized
    reward and Q heads) our elites are the lowest indices, the policy trajectories first
    (5f6fade's torch.topk on the CPU picks others)."""
    import jax
    import jax.numpy as jnp

    assert jax.lax.top_k(jnp.zeros(64), 8)[1].tolist() == list(range(8))


# --------------------------------------------------------------------------- the harness
def test_every_official_hyperparameter_is_mapped_and_checked_on_our_agent():
    assert set(bench.OURS_NAME) == set(bench.SETTINGS) and bench.OURS_NAME["lr"] == "learning_rate"
    agent = bench.ours_agent("cartpole-balance", bench.SETTINGS)
    assert agent.episode_length == 500 and agent.action_repeat == 2 and agent.seed_steps == 1000
    with pytest.raises(ValueError, match="'num_q'"):  # a value our agent resolves otherwise is named
        bench.ours_agent("cartpole-balance", dict(bench.SETTINGS, num_q=None))


@pytest.mark.slow
def test_reduced_form_of_our_side_writes_the_parquet_file(tmp_path):
    out = tmp_path / "lp.parquet"
    assert bench.main(["run", "--reduced", "--out", str(out)]) == 0
    df = lp.read_results(out)
    assert list(df.columns) == list(lp.COLUMNS) + ["eval_episodes"]
    assert set(df["implementation"]) == {"ours"} and set(df["task"]) == {"cartpole-balance"}
    assert sorted(set(df["seed"])) == [0, 1]
    r = bench.REDUCED
    assert sorted(set(df["agent_step"])) == list(range(0, r["steps"] + 1, r["eval_freq"]))
    assert (df["env_frames"] == 2 * df["agent_step"]).all() and df["episode_return"].between(0, 1000).all()
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["reduced"] is True and meta["implementations"] == ["ours"] and "load average" in meta["uptime_start"]


def test_run_arguments_are_resolved_and_refused_before_anything_trains(tmp_path, monkeypatch):
    def plan(*argv):
        return bench.plan(bench.build_parser().parse_args(["run", *argv]))

    # the reduced form with the official side: whole episodes between evaluations (the official
    # code evaluates at episode boundaries), both implementations
    settings, schedule, tasks, seeds, impls, out = plan("--reduced", "--official", "ck", "--out", str(tmp_path / "r.pq"))
    assert schedule == dict(steps=1000, eval_freq=500, eval_episodes=1) and impls == ["ours", "official"]
    assert tasks == ["cartpole-balance"] and seeds == [0, 1] and settings["num_q"] == 2 and out == tmp_path / "r.pq"
    assert plan("--reduced", "--out", str(tmp_path / "r.pq"))[1]["steps"] == bench.REDUCED["steps"]  # ours alone
    with pytest.raises(SystemExit, match="--implementations official needs --official"):
        plan("--implementations", "official", "--out", str(tmp_path / "r.pq"))
    with pytest.raises(SystemExit, match="must be a multiple of the episode length 500"):
        plan("--official", "ck", "--eval-freq", "300", "--steps", "600", "--out", str(tmp_path / "r.pq"))
    # an existing file is never replaced unasked: the committed comparison is the default
    (tmp_path / "r.pq").write_bytes(b"x")
    with pytest.raises(SystemExit, match=r"r.pq exists; give another --out, or --overwrite"):
        plan("--out", str(tmp_path / "r.pq"))
    assert plan("--out", str(tmp_path / "r.pq"), "--overwrite")[5] == tmp_path / "r.pq"
    if bench.DEFAULT_RESULTS.exists():
        with pytest.raises(SystemExit, match=r"exists \(the committed comparison\)"):
            plan()
    # the reduced form's own scratch file (no --out) is replaced each time
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    (tmp_path / "learning_parity_reduced.parquet").write_bytes(b"x")
    assert plan("--reduced")[5] == tmp_path / "learning_parity_reduced.parquet"


def test_analyze_names_its_outputs_after_the_results_and_pools_batches(tmp_path, capsys):
    first, second = tmp_path / "first.parquet", tmp_path / "second.parquet"
    synthetic(0.0, n=3).to_parquet(first)
    synthetic(0.0, n=3, seed=1).assign(seed=lambda d: d["seed"] + 3).to_parquet(second)  # seeds 3-5
    figs = tmp_path / "figs"
    figs.mkdir()
    assert bench.main(["analyze", "--results", str(first), "--figures", str(figs)]) == 0
    assert sorted(p.name for p in figs.iterdir()) == ["first_a.png", "first_b.png"]
    assert "(3) |" in (tmp_path / "first.md").read_text()
    # two batches pooled under a name, one task: seeds 0-5 on each side
    assert bench.main(["analyze", "--results", str(first), str(second), "--name", "pooled", "--tasks", "b",
                       "--figures", str(figs)]) == 0
    assert (figs / "pooled_b.png").exists() and not (figs / "pooled_a.png").exists()
    md = (tmp_path / "pooled.md").read_text()
    assert "| b |" in md and "| a |" not in md and "(6) |" in md
    for argv, msg in (([str(first), str(second)], "pooled under one --name"),
                      ([str(first), str(first), "--name", "x"], r"duplicated row \{'implementation': 'official', 'task': 'a', 'seed': 0"),
                      ([str(tmp_path / "none.parquet")], "none.parquet do not exist"),
                      ([str(tmp_path)], "a folder, not the Parquet file"),
                      ([str(first), "--tasks", "c"], r"--tasks \['c'\]: not in the results")):
        with pytest.raises(SystemExit, match=msg):
            bench.main(["analyze", "--results", *argv, "--figures", str(figs)])
    # figures beside the results file by default (never into benchmarks/results for another file)
    assert bench.main(["analyze", "--results", str(first)]) == 0 and (tmp_path / "first_a.png").exists()
    (tmp_path / "scores.csv").write_text("task,score\na,1\n")
    with pytest.raises(SystemExit, match=r"scores.csv: not a Parquet file"):
        bench.main(["analyze", "--results", str(tmp_path / "scores.csv")])


def test_failed_cells_fail_the_run_and_collect_never_replaces_unasked(tmp_path):
    out = tmp_path / "lp.parquet"
    # the official side from a folder that is no checkout: each cell fails in its worker (its log kept)
    with pytest.raises(SystemExit, match=r"no cell finished \(official/cartpole-balance/0 failed"):
        bench.main(["run", "--reduced", "--implementations", "official", "--official", str(tmp_path / "nope"),
                    "--seeds", "0", "--out", str(out)])
    assert not out.exists() and (tmp_path / "lp.parquet.work" / "official-cartpole-balance-0.log").exists()
    with pytest.raises(SystemExit, match="holds no rows"):  # the run reset its rows.jsonl
        bench.main(["collect", "--out", str(out)])
    synthetic(0.0, n=2).to_parquet(out)
    (tmp_path / "lp.parquet.work" / "rows.jsonl").write_text(json.dumps(dict(
        implementation="ours", task="a", seed=0, agent_step=0, env_frames=0, episode_return=1.0, eval_episodes=1)) + "\n")
    with pytest.raises(SystemExit, match="lp.parquet exists; give another --out, or --overwrite"):
        bench.main(["collect", "--out", str(out)])
    assert bench.main(["collect", "--out", str(out), "--overwrite"]) == 0 and len(pd.read_parquet(out)) == 1


def test_official_adapter_runs_one_cell_when_a_checkout_is_given(tmp_path):
    checkout = os.environ.get("TDMPC2_OFFICIAL_CHECKOUT")
    if not checkout:
        pytest.skip("TDMPC2_OFFICIAL_CHECKOUT (a checkout of nicklashansen/tdmpc2 at 5f6fade) is not set; "
                    "TDMPC2_OFFICIAL_PYTHON names a Python with its dependencies (docs/fidelity.md)")
    python = os.environ.get("TDMPC2_OFFICIAL_PYTHON", sys.executable)
    settings = dict(bench.SETTINGS, **bench.REDUCED["overrides"], seed_steps=500)
    schedule = dict(steps=1000, eval_freq=500, eval_episodes=1)
    args = type("A", (), dict(official=checkout, official_python=python))()
    rows, info = bench._run_official_cell(args, "cartpole-balance", 0, settings, schedule, tmp_path, print)
    assert info.get("commit", "").startswith("5f6fade"), info
    assert [r["agent_step"] for r in rows] == [0, 500, 1000]
    assert all(0 <= r["episode_return"] <= 1000 for r in rows) and info["seed_steps"] == 500
