"""Tables, aggregates and the final-score check on hand-made evaluation files.

Every expected number below is computed by hand from the synthetic returns (or read from
the packaged published curves, whose values are quoted in comments).
"""
from __future__ import annotations

import json
import math
import os
import re
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from tdmpc2core.report import analysis as A
from tdmpc2core.report import published as P


# --------------------------------------------------------------------------- helpers
def write_eval(root, task, seed, returns_by_step, action_repeat=2):
    """eval.parquet of docs/artifacts.md: {agent_steps: [episode returns]} for one seed."""
    rows = []
    for i, (step, rets) in enumerate(sorted(returns_by_step.items())):
        for e, r in enumerate(rets):
            rows.append({"task": task, "seed": seed, "eval_index": i, "agent_steps": step,
                         "env_frames": step * action_repeat, "episode": e, "return": float(r), "length": 500})
    d = os.path.join(root, task, f"seed{seed}")
    os.makedirs(d, exist_ok=True)
    df = pd.DataFrame(rows).astype({"seed": "int64", "eval_index": "int64", "agent_steps": "int64",
                                    "env_frames": "int64", "episode": "int64", "length": "int64"})
    path = os.path.join(d, "eval.parquet")
    df.to_parquet(path)
    return path


def write_metrics(root, task, seed, last_step, action_repeat=2):
    steps = list(range(0, last_step + 1, max(last_step // 10, 1)))
    df = pd.DataFrame({"task": task, "seed": seed, "agent_steps": steps,
                       "env_frames": [s * action_repeat for s in steps], "updates": steps,
                       "wall_time_s": [s / 100 for s in steps], "agent_steps_per_s": 100.0,
                       "total_loss": [1.0 / (1 + s) for s in steps],
                       "train_return": [float(s) if i % 2 else math.nan for i, s in enumerate(steps)]})
    df.to_parquet(os.path.join(root, task, f"seed{seed}", "metrics.parquet"))


def scores_of(root, paths):
    return A.seed_scores(A.read_evals(paths))


# --------------------------------------------------------------------------- published
def test_published_curves_and_name_map():
    assert len(P.PLAYGROUND_TO_DMC) == 22
    assert set(P.PLAYGROUND_TO_DMC.values()) <= set(P.published_tasks())
    assert P.dmc_name("BallInCup") == "cup-catch"
    assert P.dmc_name("Pendulum-v1") is None
    c = P.curve("walker-walk")
    assert c.loc[c["agent_steps"] == 50_000, "mean_return"].item() == pytest.approx(961.90)
    assert (c["env_steps"] == 2 * c["agent_steps"]).all()
    assert P.final_point("humanoid-run")["agent_steps"] == 7_000_000
    with pytest.raises(KeyError, match="no published curve"):
        P.curve("not-a-task")


# --------------------------------------------------------------------------- single-task table
def test_values_at_published_steps_and_band_marks(tmp_path):
    # walker-walk published TD-MPC2: 961.90 +- 10.22 at 50k, 973.43 +- 3.66 at 100k agent steps
    p0 = write_eval(tmp_path, "walker", 0, {0: [30, 40], 50_000: [950, 960], 100_000: [900, 900], 150_000: [990, 990]})
    p1 = write_eval(tmp_path, "walker", 1, {0: [50, 60], 50_000: [960, 970], 100_000: [920, 940], 150_000: [990, 990]})
    scores = scores_of(tmp_path, [p0, p1])
    table = A.single_task_table(scores, {"walker": {"published": "walker-walk", "action_repeat": 2}})
    assert list(table["agent_steps"]) == [50_000, 100_000]  # 150k is no table step; 500k is beyond the run
    r50, r100 = table.iloc[0], table.iloc[1]
    # seeds 955 and 965: mean 960, population sd 5
    assert (r50["mean"], r50["sd"], r50["min"], r50["max"], r50["n_seeds"]) == (960.0, 5.0, 955.0, 965.0, 2)
    assert r50["tdmpc2_mean"] == pytest.approx(961.90) and r50["tdmpc2_sd"] == pytest.approx(10.22)
    assert r50["band_low"] == pytest.approx(951.68) and r50["band_high"] == pytest.approx(972.12)
    assert r50["band"] == "inside"
    assert r50["env_frames"] == 100_000
    assert r50["sac_mean"] == pytest.approx(708.17) and r50["dreamerv3_mean"] == pytest.approx(630.13)
    # seeds 900 and 930: mean 915 (sd 15), outside 973.43 +- 3.66
    assert (r100["mean"], r100["sd"]) == (915.0, 15.0)
    assert r100["band"] == "outside"
    assert r50["note"] == "" and r100["note"] == ""


def test_no_step_in_common_and_no_published_curve(tmp_path):
    p = write_eval(tmp_path, "cartpole-balance", 0, {s: [500.0] for s in range(0, 10_001, 1000)})
    q = write_eval(tmp_path, "pendulum", 0, {0: [-1200.0], 6000: [-150.0]}, action_repeat=1)
    scores = scores_of(tmp_path, [p, q])
    table = A.single_task_table(scores, {
        "cartpole-balance": {"published": "cartpole-balance", "action_repeat": 2},
        "pendulum": {"published": None, "action_repeat": 1},
    })
    assert len(table) == 2
    cb = table[table["task"] == "cartpole-balance"].iloc[0]
    assert cb["note"].startswith("no step in common with the published curve")
    assert "10,000 agent steps" in cb["note"] and "50,000" in cb["note"]
    assert cb["band"] == "" and math.isnan(cb["mean"]) and math.isnan(cb["tdmpc2_mean"])
    pe = table[table["task"] == "pendulum"].iloc[0]
    assert pe["note"] == "no published curve" and pe["band"] == ""


def test_no_evaluation_at_exactly_the_published_step(tmp_path):
    p = write_eval(tmp_path, "cheetah", 0, {0: [0.0], 40_000: [400.0], 90_000: [600.0], 120_000: [650.0]})
    table = A.single_task_table(scores_of(tmp_path, [p]), {"cheetah": {"published": "cheetah-run"}})
    assert list(table["agent_steps"]) == [50_000, 100_000]
    assert table.iloc[0]["note"] == "no evaluation at exactly 50,000 agent steps (nearest: 40,000); not compared"
    assert table.iloc[1]["note"].startswith("no evaluation at exactly 100,000 agent steps (nearest: 90,000)")
    assert (table["band"] == "").all() and table["mean"].isna().all()


def test_action_repeat_other_than_published_is_noted(tmp_path):
    p = write_eval(tmp_path, "w", 0, {0: [0.0], 50_000: [960.0]}, action_repeat=4)
    table = A.single_task_table(scores_of(tmp_path, [p]), {"w": {"published": "walker-walk", "action_repeat": 4}})
    assert table.iloc[0]["band"] == "inside"
    assert "action repeat 4 differs from the published 2" in table.iloc[0]["note"]


def test_humanoid_table_includes_the_last_published_point():
    assert A.table_steps_for("humanoid-run") == [50_000, 100_000, 500_000, 1_000_000, 2_000_000, 7_000_000]
    assert A.table_steps_for("walker-walk") == [50_000, 100_000, 500_000, 1_000_000, 2_000_000]


# --------------------------------------------------------------------------- final-score check
def test_final_score_check_pass_and_fail(tmp_path):
    paths = [
        write_eval(tmp_path, "ok", 0, {0: [0], 1000: [800, 900]}),        # 850
        write_eval(tmp_path, "ok", 1, {0: [0], 1000: [700, 700]}),        # 700 -> mean 775
        write_eval(tmp_path, "lowmean", 0, {0: [0], 1000: [600]}),
        write_eval(tmp_path, "lowmean", 1, {0: [0], 1000: [700]}),        # mean 650 < 700
        write_eval(tmp_path, "badseed", 0, {0: [0], 1000: [990]}),
        write_eval(tmp_path, "badseed", 1, {0: [0], 1000: [390]}),        # mean 690 >= 600, seed 390 < 400
        write_eval(tmp_path, "toohigh", 0, {0: [0], 1000: [999]}),        # 999 > mean_max 990
        write_eval(tmp_path, "noexp", 0, {0: [0], 1000: [1.0]}),
        write_eval(tmp_path, "missing", 0, {0: [0], 1000: [900]}),        # seed 1 absent
    ]
    tasks = {
        "ok": {"expected": {"mean_min": 700, "seed_min": 400}, "agent_steps": 1000},
        "lowmean": {"expected": {"mean_min": 700}},
        "badseed": {"expected": {"mean_min": 600, "seed_min": 400}},
        "toohigh": {"expected": {"mean_min": 900, "mean_max": 990}},
        "noexp": {"expected": None},
        "missing": {"expected": {"mean_min": 100}},
    }
    out = A.final_score_check(scores_of(tmp_path, paths), tasks, seeds=[0, 1]).set_index("task")
    assert out.loc["ok", "result"] == "pass" and out.loc["ok", "mean"] == 775.0
    assert out.loc["ok", "worst_seed"] == 700.0 and out.loc["ok", "seed_returns"] == "0: 850.0; 1: 700.0"
    assert out.loc["ok", "final_agent_steps"] == 1000 and out.loc["ok", "note"] == ""
    assert out.loc["lowmean", "result"] == "fail" and out.loc["lowmean", "mean_ok"] == "no"
    assert out.loc["badseed", "result"] == "fail"
    assert (out.loc["badseed", "mean_ok"], out.loc["badseed", "seeds_ok"]) == ("yes", "no")
    assert out.loc["toohigh", "result"] == "fail"
    assert out.loc["noexp", "result"] == "no expectation"
    assert out.loc["missing", "result"] == "fail" and "missing seeds: [1]" in out.loc["missing", "note"]
    assert A.expected_range_text({"mean_min": 700, "seed_min": 400}) == "mean >= 700, every seed >= 400"
    assert A.expected_range_text({"mean_min": 1.5, "mean_max": 2}) == "mean in [1.5, 2]"


# --------------------------------------------------------------------------- aggregates
def test_iqm_hand_computed():
    # 8 values: the 25% trimmed mean drops 2 at each end -> mean(3, 4, 5, 6) = 4.5
    assert A.iqm([1, 2, 3, 4, 5, 6, 7, 80]) == pytest.approx(4.5)
    assert A.iqm(np.array([[1, 3, 5, 7], [2, 4, 6, 80]])) == pytest.approx(4.5)


def _four_task_runs(tmp_path):
    # returns at 100k agent steps, seeds (0, 1): scores (return / 10) 1..7 and 80
    runs = {"walker": ("walker-walk", (10, 20)), "cheetah": ("cheetah-run", (30, 40)),
            "finger": ("finger-spin", (50, 60)), "reacher": ("reacher-easy", (70, 800))}
    paths, tasks = [], {}
    for task, (ptask, (a, b)) in runs.items():
        paths.append(write_eval(tmp_path, task, 0, {0: [0.0], 100_000: [a]}))
        paths.append(write_eval(tmp_path, task, 1, {0: [0.0], 100_000: [b]}))
        tasks[task] = {"published": ptask}
    tasks["pendulum"] = {"published": None}  # excluded from aggregates
    paths.append(write_eval(tmp_path, "pendulum", 0, {0: [-1000.0], 100_000: [-100.0]}, action_repeat=1))
    return scores_of(tmp_path, paths), tasks


def test_aggregate_mean_and_iqm_hand_computed(tmp_path):
    scores, tasks = _four_task_runs(tmp_path)
    agg = A.aggregate_table(scores, tasks, reps=500, seed=1)
    assert list(agg["step"]) == ["50000", "100000", "final"]  # 500k+ is beyond every run
    r = agg[agg["step"] == "100000"].iloc[0]
    assert (r["n_tasks"], r["n_seeds"]) == (4, 2)
    assert r["tasks"] == "walker, cheetah, finger, reacher"
    # per-task means 1.5, 3.5, 5.5, 43.5 -> 13.5; IQM of (1, 2, 3, 4, 5, 6, 7, 80) = 4.5
    assert r["mean_score"] == pytest.approx(13.5)
    assert r["iqm_score"] == pytest.approx(4.5)
    assert r["mean_return"] == pytest.approx(135.0)
    assert r["mean_score_ci_low"] <= r["mean_score"] <= r["mean_score_ci_high"]
    assert r["iqm_score_ci_low"] <= r["iqm_score"] <= r["iqm_score_ci_high"]
    assert r["mean_score_ci_low"] < r["mean_score_ci_high"]
    # published TD-MPC2 at 100k: 973.43, 614.40, 974.40, 976.23 -> 884.615
    assert r["published_mean_return"] == pytest.approx(884.615)
    assert r["published_mean_score"] == pytest.approx(88.4615)
    assert r["method"].startswith("rliable")
    r50 = agg[agg["step"] == "50000"].iloc[0]
    assert r50["n_tasks"] == 0 and "no task has an evaluation at exactly this step" in r50["note"]
    final = agg[agg["step"] == "final"].iloc[0]
    assert final["mean_score"] == pytest.approx(13.5)  # the last evaluation is the 100k one
    assert final["published_mean_return"] == pytest.approx(884.615)


def test_bootstrap_falls_back_to_numpy_without_rliable(monkeypatch):
    monkeypatch.setitem(sys.modules, "rliable", None)  # import rliable -> ImportError
    m = np.array([[1.0, 3, 5, 7], [2, 4, 6, 80]])
    points, ci, method = A.interval_estimates(m, reps=300, seed=0)
    assert method.startswith("numpy stratified bootstrap") and "rliable unavailable" in method
    assert points == pytest.approx([13.5, 4.5])
    assert ci.shape == (2, 2) and (ci[0] <= points).all() and (points <= ci[1]).all()


def test_bad_eval_file_is_named(tmp_path):
    path = tmp_path / "eval.parquet"
    pd.DataFrame({"task": ["x"], "seed": [0]}).to_parquet(path)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*missing columns"):
        A.read_evals([path])


# --------------------------------------------------------------------------- stages end to end
def test_tables_figures_report_stages(tmp_path, monkeypatch):
    from tdmpc2core import cli

    runs = tmp_path / "results" / "single"
    for seed in (0, 1):
        write_eval(runs, "pendulum", seed, {s: [-1200 + s / 6 + seed] for s in range(0, 6001, 1000)}, 1)
        write_metrics(runs, "pendulum", seed, 6000, 1)
        write_eval(runs, "cartpole-balance", seed, {s: [200 + s / 15 + seed] for s in range(0, 10001, 1000)})
        write_metrics(runs, "cartpole-balance", seed, 10000)
        for task in ("pendulum", "cartpole-balance"):
            with open(runs / task / f"seed{seed}" / "run.json", "w") as fh:
                json.dump({"seed": seed, "provenance": {"matmul_precision": "highest", "wall_time_s": 12.5,
                                                        "platform": {"jax_backend": "cpu", "device_kind": "cpu"}}}, fh)
    # pendulum's job (both seeds) was stopped once and resumed: run.json records both attempts
    # (tdmpc2core.io.attempts), as the training stage writes them
    attempts = [{"attempt": 1, "started_utc": "2026-01-01T10:00:00Z", "ended_utc": "2026-01-01T10:03:33Z",
                 "wall_seconds": 213.3, "start_step": None, "end_step": 3000, "unit": "agent steps",
                 "outcome": "stopped by SIGTERM", "pid": 1},
                {"attempt": 2, "started_utc": "2026-01-01T11:00:00Z", "ended_utc": "2026-01-01T11:01:51Z",
                 "wall_seconds": 111.2, "start_step": 3000, "end_step": 6000, "unit": "agent steps",
                 "outcome": "completed", "pid": 2}]
    for seed in (0, 1):
        with open(runs / "pendulum" / f"seed{seed}" / "run.json", "w") as fh:
            json.dump({"seed": seed, "seeds_in_job": [0, 1], "attempts": attempts,
                       "wall_seconds": 111.23456789, "compile_seconds_upper_bound": 409.65476666600017,
                       "resumed_from_agent_steps": 3000,
                       "matmul_precision": "float32 (HIGHEST); jax_default_matmul_precision=None",
                       "provenance": {"platform": {"jax_backend": "cpu", "device_kind": "cpu"}}}, fh)
    cfg = {"protocol": "demo", "label": "Demo at laptop scale: NOT the paper's protocol", "seeds": [0, 1],
           "bootstrap_reps": 200,
           "tasks": {"pendulum": {"env_id": "Pendulum-v1", "action_repeat": 1, "agent_steps": 6000,
                                  "published": None, "expected": {"mean_min": -400, "seed_min": -800}},
                     "cartpole-balance": {"env_id": "CartpoleBalance", "action_repeat": 2, "agent_steps": 10000,
                                          "published": "cartpole-balance", "expected": {"mean_min": 900}}}}
    (tmp_path / "results" / "resolved_config.yaml").write_text(yaml.safe_dump(cfg))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["tables", "--config", "results/resolved_config.yaml"]) == 0
    final = pd.read_csv("results/tables/final_scores.csv").set_index("task")
    assert final.loc["pendulum", "result"] == "pass"          # -199.5 >= -400, seeds >= -800
    assert final.loc["cartpole-balance", "result"] == "fail"  # 867.2 < 900
    md = open("results/tables/single_task.md").read()
    assert "no step in common with the published curve" in md and "no published curve" in md
    for task, pub in (("pendulum", "none"), ("cartpole-balance", "cartpole-balance")):
        rc = cli.main(["figures", "--task", task, "--published", pub,
                       "--eval", *[f"results/single/{task}/seed{s}/eval.parquet" for s in (0, 1)],
                       "--metrics", *[f"results/single/{task}/seed{s}/metrics.parquet" for s in (0, 1)],
                       "--out-eval", f"results/figures/{task}_eval.png",
                       "--out-train", f"results/figures/{task}_train.png"])
        assert rc == 0
        assert open(f"results/figures/{task}_eval.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert cli.main(["figures", "--config", "results/resolved_config.yaml",
                     "--overview", "results/figures/overview.png"]) == 0
    assert cli.main(["report", "--config", "results/resolved_config.yaml", "--no-jax"]) == 0
    html = open("results/report.html", encoding="utf-8").read()
    assert "Demo at laptop scale: NOT the paper&#x27;s protocol" in html
    assert html.count("data:image/png;base64,") == 5  # 2 tasks x 2 figures + overview
    assert not re.search(r'(src|href)="(?!#|data:)', html)  # nothing outside the file
    assert "<td class=\"result\">FAIL</td>" in html and "<td class=\"result\">PASS</td>" in html
    # the matmul precision in words (from run.json), not an XLA enum
    assert "full float32: every matrix product in float32, no reduced-precision passes (JAX precision HIGHEST)" in html
    # every attempt of the resumed job, and its total; the raw floats rounded
    assert html.count("<td>train-single</td><td>pendulum</td><td>0, 1</td>") == 2
    assert "<td>1 of 2</td><td class=\"num\">? → 3,000 agent steps</td><td>stopped by SIGTERM</td>" in html
    assert "<td>2 of 2</td><td class=\"num\">3,000 → 6,000 agent steps</td><td>completed</td>" in html
    assert "train-single pendulum (seeds 0, 1): 324.5 s over 2 attempts" in html
    assert "409.65476666600017" not in html and "409.7" in html and "111.23456789" not in html
    # what the demo-like run cannot show, said plainly instead of empty tables and a CI from two numbers
    assert "Nothing in this run can be set beside the paper's single-task table." in html
    assert "<b>cartpole-balance</b>: no step in common with the published curve" in html
    assert "What this run cannot show:" in html and "that task's own score, not an aggregate over tasks" in html
    agg = pd.read_csv("results/tables/aggregate.csv")
    assert agg["mean_score_ci_low"].isna().all() and "no confidence interval from 2 score(s)" in agg["note"].iloc[-1]
    assert "jax</td><td>" in html  # package versions
    assert "Git commit" in html and "cartpole-balance" in html
    # the released checkpoints' section: only with `tdmpc2 official-table`'s CSV
    assert "Released checkpoints, our planner" not in html
    from tdmpc2core.report.official import COLUMNS
    nan = float("nan")
    file = ["mt30-48M.pt", 123456789, "ab" * 32]  # what the checkpoint file was: name, size, SHA-256
    pd.DataFrame([["mt30-48M", 48, "mt30", "walker-run", 10, 801.5, 12.25, 80.15, 820.0, 9.0, 2000000, -18.5, "",
                   *file],
                  ["mt80-48M", 48, "mt80", "mw-assembly", 0, nan, nan, nan, nan, nan, nan, nan,
                   "skipped: the metaworld suite needs metaworld, which is not installed: "
                   "pip install 'tdmpc2core[metaworld]'", "mt80-48M.pt", 223456789, "cd" * 32]],
                 columns=list(COLUMNS)).to_csv("results/tables/official_checkpoints.csv", index=False)
    assert cli.main(["report", "--config", "results/resolved_config.yaml", "--no-jax", "--official-tables",
                     "results/tables/official_checkpoints.csv", "--out", "results/report_official.html"]) == 0
    html = open("results/report_official.html", encoding="utf-8").read()
    assert '<h2 id="official">Released checkpoints, our planner</h2>' in html and 'href="#official"' in html
    assert "801.5 ± 12.2" in html and "820.0 ± 9.0" in html and "skipped: the metaworld suite needs metaworld" in html
    assert html.count(f"<code>{'ab' * 32}</code>") == 1 and "123,456,789" in html  # each file, listed once
    assert html.count(f"<code>{'cd' * 32}</code>") == 1 and "223,456,789" in html
    # the learning-parity section (config `learning_parity`): only with the benchmark's results file
    assert "Learning beside the official code" not in html
    rng = np.random.default_rng(0)
    pd.DataFrame([dict(implementation=impl, task=task, seed=s, agent_step=step, env_frames=2 * step,
                       episode_return=200 + 0.2 * step + rng.normal(0, 10), eval_episodes=2)
                  for impl in ("official", "ours") for task in ("cartpole-balance", "cup-catch")
                  for s in range(5) for step in (0, 1000, 2000)]).to_parquet("results/lp.parquet")
    assert cli.main(["report", "--config", "results/resolved_config.yaml", "--no-jax", "--learning-parity",
                     "results/lp.parquet", "--out", "results/report_lp.html"]) == 0
    html = open("results/report_lp.html", encoding="utf-8").read()
    assert '<h2 id="learning-parity">Learning beside the official code</h2>' in html
    assert 'href="#learning-parity"' in html and html.count("<b>equivalent</b>") == 2
    assert html.count("data:image/png;base64,") == 5 + 2  # + one figure per task
    assert "<td>cartpole-balance</td><td>1,000, 2,000</td>" in html
    assert "<th>p (difference, two-sided)</th>" in html and "A reduced run" not in html and "No comparison" not in html
    # a reduced run of ours alone (its .json says so): said in a banner, no verdict made up
    lp = pd.read_parquet("results/lp.parquet")
    lp[lp["implementation"] == "ours"].to_parquet("results/lp_ours.parquet")
    with open("results/lp_ours.json", "w") as fh:
        json.dump({"reduced": True, "schedule": {"steps": 600}}, fh)
    assert cli.main(["report", "--config", "results/resolved_config.yaml", "--no-jax", "--learning-parity",
                     "results/lp_ours.parquet", "--out", "results/report_lp_ours.html"]) == 0
    html = open("results/report_lp_ours.html", encoding="utf-8").read()
    assert "<b>A reduced run</b>" in html and "<b>No comparison</b> for cartpole-balance, cup-catch" in html
    assert html.count("<b>one implementation only</b>") == 2 and not re.search(r"\bnan\b", html)
    assert "<p>learning_parity: <code>results/lp_ours.parquet</code> (the report's input only).</p>" in html
    # the reproduction section (config `reproduction`, issue 45) from the committed test fixture
    # (fabricated rows; tests/test_reproduction.py checks its numbers)
    assert "numbers, reproduced" not in html
    import shutil
    from pathlib import Path

    fixtures = Path(__file__).resolve().parent / "fixtures"
    for ext in ("parquet", "json"):
        shutil.copy2(fixtures / f"reproduction_fixture.{ext}", f"results/rp.{ext}")
    assert cli.main(["report", "--config", "results/resolved_config.yaml", "--no-jax", "--reproduction",
                     "results/rp.parquet", "--out", "results/report_rp.html"]) == 0
    html = open("results/report_rp.html", encoding="utf-8").read()
    assert '<h2 id="reproduction">The paper\'s numbers, reproduced</h2>' in html and 'href="#reproduction"' in html
    assert "<b>2 of 3 tasks inside at 100,000 simulator steps" in html and "<b>A partial run</b>" in html
    assert html.count("data:image/png;base64,") == 5 + 3  # + one figure per task of the file
    assert "<p>reproduction: <code>results/rp.parquet</code> (the report's input only).</p>" in html


# --------------------------------------------------------------------------- episodic tasks
def write_eval_lengths(root, task, seed, episodes_by_step):
    """eval.parquet with lengths: {agent_steps: [(return, length), ...]} for one seed."""
    rows = []
    for i, (step, eps) in enumerate(sorted(episodes_by_step.items())):
        for e, (r, n) in enumerate(eps):
            rows.append({"task": task, "seed": seed, "eval_index": i, "agent_steps": step, "env_frames": step,
                         "episode": e, "return": float(r), "length": int(n)})
    d = os.path.join(root, task, f"seed{seed}")
    os.makedirs(d, exist_ok=True)
    pd.DataFrame(rows).to_parquet(os.path.join(d, "eval.parquet"))


def test_episode_lengths_beside_returns_for_episodic_tasks(tmp_path, monkeypatch):
    from tdmpc2core import cli

    runs = tmp_path / "results" / "single"
    # hopper (episodic): lengths vary; seed 0 at step 1000: episodes (10, 10 steps) and (30, 30)
    write_eval_lengths(runs, "hopper", 0, {0: [(5, 5), (7, 7)], 1000: [(10, 10), (30, 30)]})
    write_eval_lengths(runs, "hopper", 1, {0: [(3, 3), (5, 5)], 1000: [(40, 40), (60, 60)]})
    for seed in (0, 1):
        write_eval_lengths(runs, "pendulum", seed, {0: [(-1000, 200)], 1000: [(-200 - seed, 200)]})
    cfg = {"protocol": "demo", "label": "demo", "seeds": [0, 1], "bootstrap_reps": 200,
           "tasks": {"hopper": {"env_id": "hopper", "agent_steps": 1000, "agent": {"episodic": True},
                                "published": None, "expected": {"mean_min": 30}},
                     "pendulum": {"env_id": "Pendulum-v1", "agent_steps": 1000, "agent": {},
                                  "published": None, "expected": None}}}
    # the library's view: per seed mean length, then over seeds (hand-computed)
    scores = A.seed_scores(A.read_evals(sorted(str(p) for p in runs.glob("*/seed*/eval.parquet"))))
    table = A.episode_length_table(scores, cfg["tasks"])
    assert list(table["task"].unique()) == ["hopper"]                 # only the episodic task
    last = table[table["agent_steps"] == 1000].iloc[0]
    assert last["length_mean"] == 35.0 and last["length_sd"] == 15.0  # seeds 20 and 50
    assert (last["length_min"], last["length_max"], last["return_mean"]) == (20.0, 50.0, 35.0)
    assert last["seed_lengths"] == "0: 20.0; 1: 50.0"
    assert table[table["agent_steps"] == 0].iloc[0]["length_mean"] == 5.0  # (6 + 4) / 2
    final = A.final_score_check(scores, cfg["tasks"], seeds=[0, 1]).set_index("task")
    assert final.loc["hopper", "mean_length"] == 35.0 and final.loc["hopper", "result"] == "pass"
    assert final.loc["pendulum", "mean_length"] == 200.0
    # the stages: tables write episode_lengths.*, the report shows the lengths beside the returns
    (tmp_path / "results" / "resolved_config.yaml").write_text(yaml.safe_dump(cfg))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["tables", "--config", "results/resolved_config.yaml"]) == 0
    csv = pd.read_csv("results/tables/episode_lengths.csv")
    assert list(csv["task"]) == ["hopper", "hopper"] and list(csv["length_mean"]) == [5.0, 35.0]
    md = open("results/tables/final_scores.md").read()
    assert "Episode length (episodic)" in md and "35.0 (0: 20.0; 1: 50.0)" in md
    assert cli.main(["report", "--config", "results/resolved_config.yaml", "--no-jax"]) == 0
    html = open("results/report.html", encoding="utf-8").read()
    assert 'id="lengths"' in html and "Episode length: mean ± sd" in html
    assert "35.0 ± 15.0" in html and "35.0 (0: 20.0; 1: 50.0)" in html
    # a protocol without an episodic task: no lengths section, no length column
    cfg["tasks"]["hopper"]["agent"] = {}
    (tmp_path / "results" / "resolved_config.yaml").write_text(yaml.safe_dump(cfg))
    assert cli.main(["tables", "--config", "results/resolved_config.yaml"]) == 0
    assert pd.read_csv("results/tables/episode_lengths.csv").empty
    assert "No task of this protocol is episodic" in open("results/tables/episode_lengths.md").read()
    assert cli.main(["report", "--config", "results/resolved_config.yaml", "--no-jax"]) == 0
    html = open("results/report.html", encoding="utf-8").read()
    assert 'id="lengths"' not in html and "Episode length, episodic" not in html


def test_dataset_stats_pool_row_has_totals_but_no_mixed_returns():
    from tdmpc2core.report import html as R

    summary = pd.DataFrame({"dataset": ["p"] * 4, "kind": ["pool"] * 4, "task": ["a", "a", "b", "b"],
                            "return": [1.0, 3.0, 100.0, 300.0], "agent_steps": [10, 10, 20, 20],
                            "terminated": [False, True, False, False]})
    st = R.dataset_stats(summary).set_index("task")
    assert st.loc["a", "mean"] == 2.0 and st.loc["b", "max"] == 300.0
    total = st.loc["(all tasks)"]
    assert total["episodes"] == 4 and total["agent_steps"] == 60 and total["terminated"] == 1
    assert all(pd.isna(total[c]) for c in ("mean", "sd", "min", "median", "max"))  # scales differ


# --------------------------------------------------------------------------- the report, read as a reviewer would
def test_loss_plot_draws_only_chunks_where_an_update_ran(tmp_path, monkeypatch):
    """The seed phase runs no update: its metrics rows hold the initial zeros, which a loss
    curve must not draw (nor a mean line jumping from them)."""
    from tdmpc2core.report import figures as F

    rows = []
    for seed in (0, 1):
        for step in range(0, 6001, 500):
            updates = 0 if step < 1000 else step  # the burst of 1000 updates at agent step 1000
            rows.append({"seed": seed, "env_frames": step, "updates": updates,
                         "total_loss": 0.0 if updates == 0 else 5.0 / (1 + step / 1000) + seed,
                         "train_return": float(step)})
    figs = []
    monkeypatch.setattr(F, "save_atomic", lambda fig, path, dpi=110: figs.append(fig))
    F.plot_train("pendulum", pd.DataFrame(rows), tmp_path / "t.png")
    ret_ax, loss_ax = figs[0].axes
    assert loss_ax.get_lines(), "no loss drawn"
    for line in loss_ax.get_lines():
        x, y = line.get_xdata(), line.get_ydata()
        assert min(x) == 1000 and (np.asarray(y) > 0).all(), (line.get_label(), list(x), list(y))
    assert loss_ax.get_yscale() == "log"
    assert min(ret_ax.get_lines()[0].get_xdata()) == 0  # the return panel keeps the seed phase
    # nothing computed yet: the panel says so instead of drawing zeros
    figs.clear()
    F.plot_train("pendulum", pd.DataFrame(rows[:2]), tmp_path / "t.png")
    assert not figs[0].axes[1].get_lines()
    assert "no update ran" in figs[0].axes[1].texts[0].get_text()


# --------------------------------------------------------------------------- simulators
def test_simulator_text_names_the_simulators_and_what_they_mean_for_the_comparison():
    from tdmpc2core.envs import report_facts, suite_of

    facts = report_facts()
    dmc = {"cheetah-run": {"env_id": "dmc:cheetah-run"}, "cup-catch": {"env_id": "dmc:cup-catch"}}
    used, note = A.simulator_text(dmc, suite_of, {"dm-control": "1.0.50"}, suites=facts)
    assert used == "Simulator: dm_control 1.0.50 (2 tasks)."
    assert "like for like" in note and "approximate" not in note
    mixed = {"pendulum": {"env_id": "Pendulum-v1"}, "cartpole-balance": {"env_id": "CartpoleBalance"},
             "cheetah-run": {"env_id": "dmc:cheetah-run"}}
    assert A.simulators(mixed, suite_of) == {"dmcontrol": ["cheetah-run"], "playground": ["cartpole-balance"],
                                   "gymnax": ["pendulum"]}
    used, note = A.simulator_text(mixed, suite_of, suites=facts)
    assert used == "Simulator: dm_control (1 task); MuJoCo Playground (MJX) (1 task); gymnax (1 task)."
    assert "MuJoCo Playground (cartpole-balance)" in note and "approximate" in note and "like for like" in note
    used, note = A.simulator_text({"c": {"env_id": "CartpoleBalance"}}, suite_of, suites=facts)
    assert "approximate" in note and "like for like" not in note

    from tdmpc2core.report import html as R

    ctx = {"protocol": "paper", "label": "x", "is_paper": True, "generated": "now",
           "final": pd.DataFrame(columns=A.FINAL_COLUMNS), "single": pd.DataFrame(columns=A.SINGLE_TASK_COLUMNS),
           "aggregate": pd.DataFrame(columns=A.AGGREGATE_COLUMNS),
           "simulator": A.simulator_text(dmc, suite_of, {"dm-control": "1.0.50"}, suites=facts)}
    html = R.render_report(ctx)
    banner = html.split('<div class="banner', 1)[1].split("</div>", 1)[0]
    assert "Simulator: dm_control 1.0.50 (2 tasks)." in banner
    assert "MuJoCo Playground, whose physics" not in html


# --------------------------------------------------------------------------- the stages' output schema
def test_stage_outputs_have_one_schema_which_the_report_reads(tmp_path):
    """tdmpc2core.stages.outputs writes eval.parquet / metrics.parquet with the columns and types
    of its SCHEMAS (and nothing else); the report's reader expects the same eval columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tdmpc2core.agents.online import METRIC_KEYS
    from tdmpc2core.stages import outputs as O

    kinds = {"string": "O", "int64": "i", "float64": "f", "bool": "b"}
    assert {**A.EVAL_COLUMNS, **{c: "b" for c in A.SUCCESS_COLUMNS}} == {
        n: kinds[t] for n, t in O.SCHEMAS["single_eval"]}
    assert O.TRAINING_METRICS == tuple(METRIC_KEYS)
    for name in ("single_metrics", "multi_metrics"):
        assert set(O.TRAINING_METRICS) <= {n for n, _ in O.SCHEMAS[name]}
    hist = {"eval_agent_steps": [0, 100], "eval_env_frames": [0, 200],
            "eval_returns": np.arange(12, dtype=np.float32).reshape(2, 2, 3),
            "eval_lengths": np.full((2, 2, 3), 200)}
    O.write_table(tmp_path / "eval.parquet", "single_eval", O.single_eval_columns("pendulum", 7, 1, hist, 3))
    table = pq.read_table(tmp_path / "eval.parquet")
    assert [(f.name, f.type) for f in table.schema] == [(n, pa.type_for_alias(t)) for n, t in O.SCHEMAS["single_eval"]]
    df = table.to_pandas()
    assert df["return"].tolist() == [3.0, 4.0, 5.0, 9.0, 10.0, 11.0] and (df["seed"] == 7).all()
    assert df["success"].isna().all() and df["success_any"].isna().all()  # a return suite: null
    # no evaluation: the same columns and types, no rows
    empty = {"eval_updates": [], "eval_returns": np.zeros((0, 1, 1, 1)), "eval_lengths": np.zeros((0, 1, 1, 1))}
    O.write_table(tmp_path / "m.parquet", "multi_eval", O.multi_eval_columns("p", 1, ["a"], [0], empty, 1, [None]))
    assert [(f.name, f.type) for f in pq.read_table(tmp_path / "m.parquet").schema] == [
        (n, pa.type_for_alias(t)) for n, t in O.SCHEMAS["multi_eval"]]
    with pytest.raises(ValueError, match=r"missing columns \['length'\], unknown columns \['len'\]"):
        cols = O.single_eval_columns("pendulum", 7, 1, hist, 3)
        cols["len"] = cols.pop("length")
        O.write_table(tmp_path / "bad.parquet", "single_eval", cols)
    with pytest.raises(ValueError, match="stage output 'nope': unknown"):
        O.write_table(tmp_path / "bad.parquet", "nope", {})
    assert not (tmp_path / "bad.parquet").exists()
