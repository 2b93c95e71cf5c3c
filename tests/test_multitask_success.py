"""Success in the multi-task path: a multi-task model evaluated on a task set that mixes a
Meta-World task (a success flag, host-stepped) with a dm_control task (none) records, per task,
the episode's success at its last step (the official rule) and at any step, NaN / null for the
dm_control task, and carries them into the history, the loggers' keys, eval.parquet, run.json
and the scaling report's normalized score (100 x success for a success task, the paper's
Meta-World score); an official-layout multi-task checkpoint of the same two tasks, through
``tdmpc2 evaluate-official``, writes them into its eval.parquet.

Meta-World's own flag is False for an untrained agent on every step, which would not tell a
dropped flag from a real one; so the host's per-simulator-step flag is also replaced here
(monkeypatched on the Meta-World host class: the physics, rewards and observations are the
real ones) by one that is True only after chosen agent steps, giving known outcomes: True
after a middle step only (last-step success 0, any-step 1) and after the last step (1, 1).

Needs the ``[metaworld]`` extra (``.ci/run`` installs it; the checkpoint test also PyTorch). One
tiny untrained agent (no training program, the policy prior acting), episodes of Meta-World's
100 agent steps: one evaluation program per task, compiled once and run with each flag.
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd
import pytest

from tdmpc2core.agents.multitask import TDMPC2MultiTask
from tdmpc2core.envs import metaworld_env

from test_multitask import TINY, make_dataset, random_episodes, task

#: Meta-World's own time limit (100 agent steps at action repeat 2, docs/metaworld.md); the
#: dm_control task's episodes are shorter; episodes per task and evaluation; seeds
T, T_DMC, REPEAT, E, SEEDS = 100, 4, 2, 2, (0, 1)
MW, DMC = "reach", "cartpole"  # task names in the pool (env ids mw-reach, dmc:cartpole-balance)


@pytest.fixture(scope="module")
def mixed():
    """(agent, state, dataset): a tiny untrained multi-task model over [mw-reach, dmc:cartpole-balance]
    (obs 39 / action 4 and obs 5 / action 1, padded), both evaluated in their own envs."""
    rng = np.random.default_rng(0)
    tasks = [task(MW, 39, 4, T, env_id="mw-reach", action_repeat=REPEAT),
             task(DMC, 5, 1, T_DMC, env_id="dmc:cartpole-balance", action_repeat=REPEAT)]
    ds = make_dataset([random_episodes(rng, 3, T, 39, 4), random_episodes(rng, 3, T_DMC, 5, 1)], tasks)
    agent = TDMPC2MultiTask(ds, eval_envs=True, batch_size=4, **dict(TINY, mpc=False))
    assert [e.spec.has_success for e in agent.eval_envs] == [True, False]
    return agent, agent.init(list(SEEDS)), ds


def force_success(monkeypatch, after: set):
    """Meta-World's success flag replaced by: True after the agent steps in ``after`` (1-based),
    False otherwise. The host reports the flag of the last simulator step of an agent step;
    Meta-World's step counter (carried in the env state) is 1 after the reset's zero step, so
    agent step k ends at simulator step 1 + REPEAT k."""
    real = metaworld_env._Host._sim_step

    def sim_step(self, action):
        obs, reward, _ = real(self, action)
        done, rest = divmod(self.env.curr_path_length - 1, REPEAT)
        return obs, reward, rest == 0 and done in after

    monkeypatch.setattr(metaworld_env._Host, "_sim_step", sim_step)


def test_real_flags_are_recorded_per_task_and_null_without_a_flag(mixed):
    agent, state, _ = mixed
    ev = agent.evaluate(state, num_episodes=E)
    assert ev["tasks"] == [MW, DMC] and ev["success"].shape == ev["success_any"].shape == (len(SEEDS), 2, E)
    mw, dmc = ev["success"][:, 0], ev["success"][:, 1]
    assert np.isin(mw, [0.0, 1.0]).all() and np.isin(ev["success_any"][:, 0], [0.0, 1.0]).all()
    assert (ev["success_any"][:, 0] >= mw).all()
    assert np.isnan(dmc).all() and np.isnan(ev["success_any"][:, 1]).all() and np.isnan(ev["success_rate"][:, 1]).all()
    np.testing.assert_allclose(ev["success_rate"][:, 0], mw.mean(-1))
    np.testing.assert_allclose(ev["normalized_score_per_task"][:, 0], 100 * mw.mean(-1))
    # the dm_control task: its declared range (0, T x action repeat), not a success
    np.testing.assert_allclose(ev["normalized_score_per_task"][:, 1], 100 * ev["return"][:, 1] / (T_DMC * REPEAT))


@pytest.mark.parametrize("after,last,anyv", [({2}, 0.0, 1.0), ({T}, 1.0, 1.0), (set(), 0.0, 0.0)])
def test_forced_flags_give_last_and_any_step_success(mixed, monkeypatch, after, last, anyv):
    agent, state, _ = mixed
    force_success(monkeypatch, after)
    ev = agent.evaluate(state, num_episodes=E)
    assert (ev["success"][:, 0] == last).all() and (ev["success_any"][:, 0] == anyv).all()
    assert (ev["success_rate"][:, 0] == last).all() and (ev["normalized_score_per_task"][:, 0] == 100 * last).all()
    assert np.isnan(ev["success"][:, 1]).all() and np.isnan(ev["success_any"][:, 1]).all()
    assert (ev["lengths"][:, 0] == T).all() and (ev["lengths"][:, 1] == T_DMC).all()


def test_success_reaches_history_eval_parquet_run_json_and_the_scaling_report(mixed, monkeypatch, tmp_path):
    """Two evaluations through the run program (the last-step flag at 0, then at 1), the
    history the driver builds, and the stage's outputs (train-multi's _write_outputs)."""
    from tdmpc2core.report import scaling
    from tdmpc2core.run import driver
    from tdmpc2core.stages import train_multi

    agent, state, ds = mixed
    prog = agent.program()
    run = driver.Run(SEEDS, 10, 10, E, (("log_every", None),))
    evals = []
    for after in ({2}, {T}):
        force_success(monkeypatch, after)
        evals.append(prog.evaluate(state, 0, run))
    hist = driver.finalize_history(prog, {"evals": evals, "chunks": [], "wall_seconds": 0.0}, len(SEEDS), E)
    S, K = len(SEEDS), 2
    assert hist["eval_success"].shape == hist["eval_success_any"].shape == (2, S, K, E)
    assert (hist["eval_success"][:, :, 0] == np.array([0.0, 1.0])[:, None, None]).all()
    assert (hist["eval_success_any"][:, :, 0] == 1.0).all() and np.isnan(hist["eval_success"][:, :, 1]).all()
    logged = prog.eval_log(evals[-1])
    assert f"{MW}/success rate" in logged and f"{DMC}/success rate" not in logged
    np.testing.assert_array_equal(logged[f"{MW}/success rate"], np.ones(S))
    back = driver.history_from_arrays(prog, driver.history_to_arrays(prog, {"evals": evals, "chunks": [],
                                                                            "wall_seconds": 0.0}, S, E))
    np.testing.assert_array_equal(back["eval_success_any"], hist["eval_success_any"])  # through a checkpoint

    args = argparse.Namespace(pool="mix", model_size=1, dataset="pool.parquet")
    session = {"wall_seconds": 0.0, "training_wall_seconds_all_sessions": 0.0, "resumed_from_updates": None,
               "attempts": [], "checkpoint_dir": None, "provenance": {"platform": {}}}
    final = train_multi._write_outputs(args, {"updates": 0}, list(SEEDS), tmp_path, ds, agent, state, hist, E,
                                       session)
    df = pd.read_parquet(tmp_path / "eval.parquet")
    mw, dmc = df[df["task"] == MW], df[df["task"] == DMC]
    assert len(mw) == len(dmc) == 2 * S * E
    assert mw["success"].tolist() == [False] * (S * E) + [True] * (S * E)
    assert mw["success_any"].tolist() == [True] * (2 * S * E)
    assert dmc["success"].isna().all() and dmc["success_any"].isna().all()
    assert mw["normalized_score"].tolist() == [0.0] * (S * E) + [100.0] * (S * E)
    run_json = json.loads((tmp_path / "run.json").read_text())
    assert run_json["final"] == final and final["success_rate"] == {MW: [1.0] * S}
    # the scaling report: the Meta-World task's score is 100 x its success rate
    scores = scaling.final_task_scores(scaling.task_scores(scaling.read_multi_evals([tmp_path / "eval.parquet"])))
    assert scores.set_index(["seed", "task"])["normalized_score"].xs(MW, level="task").tolist() == [100.0] * S


# ------------------------------------------------------------------ an official multi-task checkpoint
PLANNER = dict(iterations=1, num_samples=16, num_elites=4, num_pi_trajs=2, horizon=1)


def test_official_multi_task_checkpoint_records_success_per_task(mixed, tmp_path, monkeypatch):
    """A tiny multi-task checkpoint in the official layout (the untrained model's parameters of
    seed 0, written as the official code saves them) of the custom task list [mw-reach, cartpole-balance], through
    ``tdmpc2 evaluate-official``: the Meta-World task's rows have success at the last step (the
    official rule) and at any step, and a normalized score of 100 x success; the dm_control
    task's are null (its score return / 10). Then the library call with the flag at the last step."""
    pytest.importorskip("torch", reason="PyTorch is not installed: pip install -e '.[official]' (writing and "
                                        "reading .pt checkpoints needs it)")
    import jax

    from tdmpc2core import cli as C
    from tdmpc2core.agents.official_eval import evaluate_official
    from tdmpc2core.io.official import save_official
    from tdmpc2core.model import official as O

    _, state, _ = mixed
    ckpt = tmp_path / "mix.pt"
    save_official(ckpt, O.to_official(jax.tree_util.tree_map(lambda x: np.asarray(x[0]), state.agent.params)))
    tasks = "mw-reach,cartpole-balance"

    force_success(monkeypatch, {2})  # success after agent step 2 only: at the last step False, at some step True
    out = tmp_path / "eval"
    args = ["--checkpoint", ckpt, "--task", "all", "--task-set", tasks, "--episodes", E, "--episode-length",
            2 * T_DMC, "--out", out] + [a for k, v in PLANNER.items() for a in ("--planner", f"{k}={v}")]
    assert C.main(["evaluate-official", *map(str, args)]) == 0
    df = pd.read_parquet(out / "eval.parquet")
    mw, dmc = df[df["task"] == "mw-reach"], df[df["task"] == "cartpole-balance"]
    assert mw["length"].tolist() == [T] * E and dmc["length"].tolist() == [T_DMC] * E  # Meta-World keeps its 100
    assert mw["success"].tolist() == [False] * E and mw["success_any"].tolist() == [True] * E
    assert mw["normalized_score"].tolist() == [0.0] * E
    assert dmc["success"].isna().all() and dmc["success_any"].isna().all()
    np.testing.assert_allclose(dmc["normalized_score"], dmc["return"] / 10.0)

    force_success(monkeypatch, {T})  # at the last step: success by both rules
    ev = evaluate_official(ckpt, ["mw-reach"], task_set=tasks, episodes=E, episode_length=2 * T_DMC, planner=PLANNER)
    assert [(r["task"], r["success"], r["success_any"]) for r in ev.rows] == [("mw-reach", True, True)] * E
