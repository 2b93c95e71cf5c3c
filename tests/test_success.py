"""Success rates (issue 27 item 2): the evaluation's success flags, eval.parquet's success
columns, the published Meta-World / MyoSuite success curves and the report's success tables.

A toy success suite is registered here at run time (as tests/test_suites.py registers its toy
suite), so nothing needs Meta-World or MyoSuite installed. One tiny jitted training run; the
rest is pure Python on synthetic evaluation files. Published numbers are read from the packaged
resource and quoted in comments.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tdmpc2core.envs import registry as R
from tdmpc2core.envs.registry import Suite, SuiteReport
from tdmpc2core.report import analysis as A
from tdmpc2core.report import published as P

ROOT = Path(__file__).resolve().parents[1]
TICK_ID, END_ID = "SuccTick-v0", "SuccEnd-v0"
T = 6  # agent steps per episode (action repeat 1)


# --------------------------------------------------------------------------- the toy success suite
def _tick_env_class():
    """A counter env with a success flag (JAX imported only here, as a suite's ``build`` does).
    The inner state is the number of simulator steps taken, n; the observation is (n / T, a);
    reward a (the action). ``SuccTick-v0``: success only right after step 2, never terminates
    (an episode's flag at its last step is False, at some step True). ``SuccEnd-v0``: terminates
    at step 3 with success True there; the steps stepped past it report success False."""
    import jax.numpy as jnp

    from tdmpc2core.envs.base import Env, EnvSpec

    class Tick(Env):
        def __init__(self, env_id, *, action_repeat, episode_length):
            self.ends = env_id == END_ID
            self.spec = EnvSpec.from_bounds(env_id, "succtoy", 2, [-1.0], [1.0], action_repeat=action_repeat,
                                            episode_length=episode_length // action_repeat,
                                            can_terminate=self.ends, has_success=True)

        def _raw_reset(self, key):
            n = jnp.zeros((), jnp.float32)
            return n, jnp.stack([n, n])

        def _raw_step(self, inner, env_action, key):
            n = inner + 1.0
            obs = jnp.stack([n / T, env_action[0]])
            success = (n == 2.0) if not self.ends else (n == 3.0)
            terminated = (n == 3.0) if self.ends else jnp.zeros((), bool)
            return n, obs, env_action[0], terminated, success

    return Tick


def _tick_build(env_id, *, action_repeat, episode_length, env_params, backend):
    return _tick_env_class()(env_id, action_repeat=action_repeat, episode_length=episode_length)


SUCC_TOY = Suite(name="succtoy", ids=(TICK_ID, END_ID), build=_tick_build, requires=("numpy",),
                 report=SuiteReport(label="Toy success counter", score="success", rank=60))


@pytest.fixture(scope="module")
def succ_toy():
    R.register_suite(SUCC_TOY)
    yield SUCC_TOY
    R.unregister_suite(SUCC_TOY.name)


# --------------------------------------------------------------------------- evaluation
def test_eval_episode_success_last_and_any_and_none_for_return_suites(succ_toy):
    """The official rule (the flag at the episode's last step taken) and the any-step rule; a
    terminated episode keeps the flag of its terminal step; a suite without a flag gets None."""
    import jax
    import jax.numpy as jnp

    from tdmpc2core.agents.common import eval_episode, success_dict
    from tdmpc2core.envs import make_env

    def act(obs, mean, t0, k):
        return jnp.ones((1,), jnp.float32), mean

    key = jax.random.PRNGKey(0)
    for env_id, last, anyv, length in ((TICK_ID, False, True, T), (END_ID, True, True, 3)):
        env = make_env(env_id, episode_length=T)
        ret, n, succ = jax.jit(lambda k, env=env: eval_episode(env, act, T, 1, 1, k))(key)
        assert (bool(succ[0]), bool(succ[1]), int(n)) == (last, anyv, length), env_id
        assert success_dict(succ) == {"success": np.asarray(last), "success_any": np.asarray(anyv)}
    env = make_env("Pendulum-v1")  # a suite without a success flag (its own 200-step episodes; T steps traced)
    assert jax.eval_shape(lambda k: eval_episode(env, act, T, 1, 1, k), key)[2] is None  # traced, not run
    assert success_dict(None) == {}


def test_tiny_run_records_success_in_history_loggers_and_eval_parquet(succ_toy, tmp_path):
    """The one jitted run of this file (an untrained agent's evaluation, no training chunk:
    the smallest programs): the run program's evaluation, the history's eval_success /
    eval_success_any (and through a checkpoint's host arrays), the loggers' success rates, and
    eval.parquet's success columns (a return suite's: null, tests/test_analysis.py)."""
    import pyarrow.parquet as pq

    from tdmpc2core import TDMPC2
    from tdmpc2core.run import driver
    from tdmpc2core.stages import outputs as O

    agent = TDMPC2(TICK_ID, episode_length=T, model_size=1, mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16,
                   num_elites=4, num_pi_trajs=2, iterations=1, batch_size=8, seed_steps=2 * T, horizon=1,
                   num_enc_layers=1, mpc=False)
    prog = agent.program()
    state = agent.init([0], 3 * T)
    run = driver.Run((0,), 3 * T, 3 * T, 2)
    evals = [prog.evaluate(state, tick, run) for tick in (0, 3 * T)]
    work = {"evals": evals, "chunks": [], "wall_seconds": 0.0}
    hist = driver.finalize_history(prog, work, 1, 2)
    assert hist["eval_success"].shape == hist["eval_success_any"].shape == hist["eval_returns"].shape == (2, 1, 2)
    assert hist["eval_success"].dtype == bool
    assert not hist["eval_success"].any() and hist["eval_success_any"].all()  # success only after step 2
    assert np.all(hist["Eval/success rate"] == 0.0) and np.all(hist["Eval/success rate (any step)"] == 1.0)
    back = driver.history_from_arrays(prog, driver.history_to_arrays(prog, work, 1, 2))
    assert np.array_equal(back["eval_success_any"], hist["eval_success_any"])
    O.write_table(tmp_path / "eval.parquet", "single_eval", O.single_eval_columns("tick", 0, 0, hist, 2))
    df = pq.read_table(tmp_path / "eval.parquet").to_pandas()
    assert df["success"].tolist() == [False] * 4 and df["success_any"].tolist() == [True] * 4
    scores = A.seed_scores(A.read_evals([tmp_path / "eval.parquet"]))
    assert (scores["score_kind"] == "success").all() and (scores["score"] == 0.0).all()


def test_multi_eval_columns_score_success_tasks_by_success():
    """Multi-task eval.parquet: success columns null for a task without a flag; a success
    task's normalized score is 100 x its episode's success (the paper's Meta-World score)."""
    from tdmpc2core.stages import outputs as O

    nan = np.nan
    hist = {"eval_updates": [10], "eval_returns": np.array([[[[500.0, 300.0], [1.0, 2.0]]]]),
            "eval_lengths": np.full((1, 1, 2, 2), 100),
            "eval_success": np.array([[[[nan, nan], [1.0, 0.0]]]]),
            "eval_success_any": np.array([[[[nan, nan], [1.0, 1.0]]]])}
    cols = O.multi_eval_columns("p", 1, ["walker", "mw-reach"], [0], hist, 2, [(0.0, 1000.0), None])
    assert cols["success"] == [None, None, True, False] and cols["success_any"] == [None, None, True, True]
    assert np.allclose(cols["normalized_score"], [50.0, 30.0, 100.0, 0.0])


# --------------------------------------------------------------------------- the published curves
def test_published_success_curves_units_and_names():
    """Meta-World's `step` is simulator steps (the official wrapper repeats each action twice),
    MyoSuite's is agent steps (no repeat); both in [0, 1] in the files, percent in score_curve."""
    mw = [t for t in P.published_tasks() if t.startswith("mw-")]
    myo = [t for t in P.published_tasks() if t.startswith("myo-hand-")]
    assert len(mw) == 50 and len(myo) == 10
    assert P.domain_of("mw-assembly") == "Meta-World" and P.score_kind("myo-hand-reach") == "success"
    assert P.domain_of("walker-walk") == "DMControl" and P.score_kind("walker-walk") == "return"
    c = P.score_curve("mw-assembly")
    assert (c["env_steps"] == 2 * c["agent_steps"]).all() and c["agent_steps"].max() == 1_000_000
    assert c.loc[c["agent_steps"] == 50_000, "mean"].item() == pytest.approx(3.33)  # 0.0333 over 3 seeds
    m = P.score_curve("myo-hand-reach")
    assert (m["env_steps"] == m["agent_steps"]).all() and m["agent_steps"].max() == 2_000_000
    assert ((m["mean"] >= 0) & (m["mean"] <= 100)).all()
    for method in P.METHODS:
        assert set(P.load_success(method)["task"]) == set(mw) | set(myo), method
    with pytest.raises(KeyError, match="no published curve for task 'mw-nope'"):
        P.score_curve("mw-nope")
    from tdmpc2core.resources import official_task_sets
    assert {r["name"] for r in official_task_sets()["mt80"] if r["domain"] == "metaworld"} == set(mw)


def test_published_success_resource_is_derived_from_the_official_files():
    """The packaged table is what tools/derive_published_success.py computes from the raw files
    (checked where they are: ../shared/reference/tdmpc2_results)."""
    raw = ROOT.parent / "shared" / "reference" / "tdmpc2_results"
    if not (raw / "tdmpc2" / "mw-assembly.csv").exists():
        pytest.skip(f"the raw official results are not at {raw}")
    import importlib.util

    spec = importlib.util.spec_from_file_location("derive", ROOT / "tools" / "derive_published_success.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.derive(raw) == (ROOT / "tdmpc2core" / "resources" / "published_success_curves.csv").read_text()


# --------------------------------------------------------------------------- the report
def _write_eval(root, task, seed, by_step, action_repeat, success=True):
    """eval.parquet through the stage writer: {agent_steps: [(return, success, success_any)]}."""
    from tdmpc2core.stages import outputs as O

    steps = sorted(by_step)
    E = len(by_step[steps[0]])
    hist = {"eval_agent_steps": steps, "eval_env_frames": [s * action_repeat for s in steps],
            "eval_returns": np.array([[[r for r, _, _ in by_step[s]]] for s in steps]),
            "eval_lengths": np.full((len(steps), 1, E), 100)}
    if success:
        hist["eval_success"] = np.array([[[x for _, x, _ in by_step[s]]] for s in steps], bool)
        hist["eval_success_any"] = np.array([[[y for _, _, y in by_step[s]]] for s in steps], bool)
    path = Path(root) / task / f"seed{seed}" / "eval.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    O.write_table(path, "single_eval", O.single_eval_columns(task, seed, 0, hist, E))
    return path


@pytest.fixture
def mixed_runs(tmp_path):
    """Two seeds of a Meta-World-named task (success) and of a DMControl task (return) at
    agent steps 0 and 50,000; seed scores at 50k: mw-assembly 50%, 100% (any: 100%, 100%),
    walker 900, 950."""
    paths = []
    for seed, (s1, s2) in enumerate(((True, False), (True, True))):
        paths.append(_write_eval(tmp_path, "mw-assembly", seed, {
            0: [(0.0, False, False), (0.0, False, False)],
            50_000: [(10.0, s1, True), (20.0, s2, True)]}, action_repeat=2))
    for seed, r in enumerate((900.0, 950.0)):
        paths.append(_write_eval(tmp_path, "walker", seed, {0: [(0.0, 0, 0)] * 2, 50_000: [(r, 0, 0)] * 2},
                                 action_repeat=2, success=False))
    tasks = {"mw-assembly": {"published": "mw-assembly", "action_repeat": 2},
             "walker": {"published": "walker-walk", "action_repeat": 2}}
    return A.seed_scores(A.read_evals(paths)), tasks


def test_single_task_table_shows_success_rate_beside_the_published_success(mixed_runs):
    scores, tasks = mixed_runs
    assert set(scores.loc[scores["task"] == "walker", "score_kind"]) == {"return"}
    assert scores.loc[scores["task"] == "walker", "success"].isna().all()
    table = A.single_task_table(scores, tasks, steps=(50_000,))
    mw = table[(table["task"] == "mw-assembly") & (table["agent_steps"] == 50_000)].iloc[0]
    assert mw["score"] == "success"
    assert (mw["mean"], mw["min"], mw["max"], mw["success_any_mean"]) == (75.0, 50.0, 100.0, 100.0)
    # published at 50,000 agent steps (100,000 env steps): TD-MPC2 3.33 ± 4.71 %; the baselines' too
    assert mw["tdmpc2_mean"] == pytest.approx(3.33) and mw["tdmpc2_sd"] == pytest.approx(4.71)
    for m in ("tdmpc", "sac", "dreamerv3"):
        want = P.score_curve("mw-assembly", m).set_index("agent_steps").loc[50_000, "mean"]
        assert mw[f"{m}_mean"] == pytest.approx(want) and 0 <= want <= 100
    assert mw["band"] == "outside" and mw["note"] == ""
    w = table[(table["task"] == "walker") & (table["agent_steps"] == 50_000)].iloc[0]
    assert w["score"] == "return" and w["mean"] == 925.0 and math.isnan(w["success_any_mean"])
    # a return task named against a success curve is not compared
    odd = A.single_task_table(scores, {"walker": {"published": "mw-reach"}}, steps=(50_000,))
    assert "scored by return, but the published curve of mw-reach reports success" in odd["note"].iloc[0]


def test_aggregates_are_per_domain_and_markdown_html_say_success(mixed_runs):
    from tdmpc2core.report import html as H
    from tdmpc2core.stages import tables as TB

    scores, tasks = mixed_runs
    agg = A.aggregate_table(scores, tasks, steps=(50_000,), reps=50)
    assert list(agg["domain"]) == ["DMControl", "DMControl", "Meta-World", "Meta-World"]
    mw = agg[(agg["domain"] == "Meta-World") & (agg["step"] == "50000")].iloc[0]
    assert mw["score"] == "success rate (%)" and mw["mean_score"] == 75.0 and math.isnan(mw["mean_return"])
    assert mw["published_mean_score"] == pytest.approx(3.33) and math.isnan(mw["published_mean_return"])
    dmc = agg[(agg["domain"] == "DMControl") & (agg["step"] == "50000")].iloc[0]
    assert dmc["score"] == "return / 10" and dmc["mean_score"] == 92.5 and dmc["mean_return"] == 925.0
    assert dmc["tasks"] == "walker" and mw["tasks"] == "mw-assembly"

    single = A.single_task_table(scores, tasks, steps=(50_000,))
    md = TB._single_task_md(single, "label")
    assert "| success rate (%) |" in md and "Ours: success at any step (%)" in md and "| return |" in md
    assert "| Meta-World | success rate (%) |" in TB._aggregate_md(agg, "label")
    html = H.single_task_section(single) + H.aggregate_section(agg)
    assert "success rate (%)" in html and "Meta-World" in html and "DMControl" in html


def test_figures_plot_success_for_success_tasks(mixed_runs, tmp_path, monkeypatch):
    from tdmpc2core.report import figures as F

    scores, tasks = mixed_runs
    labels = []
    import matplotlib.axes

    orig = matplotlib.axes.Axes.set_ylabel
    monkeypatch.setattr(matplotlib.axes.Axes, "set_ylabel", lambda self, s, *a, **k: (labels.append(s),
                                                                                     orig(self, s, *a, **k))[1])
    F.plot_eval("mw-assembly", scores[scores["task"] == "mw-assembly"], tmp_path / "mw.png",
                published_task="mw-assembly")
    assert labels and set(labels) == {"success rate (%)"} and (tmp_path / "mw.png").stat().st_size > 0
    labels.clear()
    F.plot_overview(scores, {t: s["published"] for t, s in tasks.items()}, tmp_path / "overview.png")
    assert set(labels) == {"evaluation return", "success rate (%)"}
