"""The reference API's names work with this package (issue 26): its example runs with only its
import lines changed; ``initial_state``, ``num_episode_test`` and ``logging_config`` are
accepted by both agents' ``train`` (an argument and its alias both given is a TypeError naming
both); :class:`tdmpc2core.LoggingConfig` and its checks; the per-task keys of the multi-task
agent's evaluations; the training stages' loggers (built from the workflow's flags, and left
out with one warning line when they cannot be built)."""
from __future__ import annotations

import argparse
import types
import warnings

import numpy as np
import pytest

import tdmpc2core
from tdmpc2core.run import driver
from tdmpc2core.io import loggers as lg


@pytest.mark.slow
def test_the_reference_example_runs_with_only_its_imports_changed(capsys):
    """The reference's "Example" as its documentation gives it (model_size 1, its small planner,
    1,200 agent steps of Pendulum, evaluations every 600): about 3 min of one worker on CI's
    2-core CPU, most of it compiling the model_size 1 programs; a HEAVY unit of its own
    (tests/conftest.py)."""
    # --- the reference's "Example", its two import lines changed (from ajax ... -> from tdmpc2core ...)
    from tdmpc2core import TDMPC2
    from tdmpc2core import LoggingConfig

    # model_size=1 and a smaller planner than the paper's, for a quick CPU run.
    agent = TDMPC2("Pendulum-v1", model_size=1, num_samples=64, num_elites=8,
                   num_pi_trajs=4, iterations=2, seed_steps=400)
    logging = LoggingConfig(config={}, log_frequency=600, use_wandb=False)
    state, evaluations = agent.train(seed=0, n_timesteps=1_200, num_episode_test=2,
                                     logging_config=logging)
    print(agent.gamma)  # 0.975, derived from Pendulum's 200-step episodes
    print(evaluations["Eval/episodic mean reward"])
    # --- end of the example
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "0.975" and agent.gamma == 0.975
    rewards = evaluations["Eval/episodic mean reward"]
    assert rewards.shape == (3, 1) and np.all(np.isfinite(rewards))  # at 0, 600 and 1,200 agent steps, one seed
    assert list(evaluations["eval_agent_steps"]) == [0, 600, 1200]
    assert evaluations["eval_returns"].shape == (3, 1, 2)  # num_episode_test episodes per evaluation
    np.testing.assert_array_equal(rewards, evaluations["eval_return"])


def test_aliases_of_the_reference_names_and_both_given_is_a_type_error():
    from tdmpc2core import TDMPC2

    agent = TDMPC2("Pendulum-v1", model_size=1, mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16,
                   num_elites=4, num_pi_trajs=2, iterations=1, batch_size=16, seed_steps=200)
    with pytest.raises(TypeError, match=r"TDMPC2.train: state= and initial_state= \(its alias\) are both given"):
        agent.train(n_timesteps=10, state=object(), initial_state=object())
    with pytest.raises(TypeError, match="eval_episodes= and num_episode_test="):
        agent.train(n_timesteps=10, eval_episodes=2, num_episode_test=2)
    with pytest.raises(ValueError, match="eval_every=100 and logging_config.log_frequency=50 disagree"):
        agent.train(n_timesteps=10, eval_every=100, logging_config=tdmpc2core.LoggingConfig(log_frequency=50))
    with pytest.raises(TypeError, match="logging_config must be a tdmpc2core.LoggingConfig"):
        agent.train(n_timesteps=10, logging_config={"log_frequency": 5})
    assert driver.alias("f", "a", None, "b", 3, 10) == 3 and driver.alias("f", "a", None, "b", None, 10) == 10
    assert driver.log_cadence("f", "eval_every", None, tdmpc2core.LoggingConfig(log_frequency=7)) == 7
    assert driver.log_cadence("f", "eval_every", 7, tdmpc2core.LoggingConfig(log_frequency=7)) == 7
    assert driver.log_cadence("f", "eval_every", None, None) is None


def test_multitask_train_takes_the_aliases_too():
    from tdmpc2core import TDMPC2MultiTask
    from test_multitask_extensions import pool
    from test_multitask import TINY

    agent = TDMPC2MultiTask(pool(), batch_size=8, **TINY)
    with pytest.raises(TypeError, match=r"TDMPC2MultiTask.train: state= and initial_state= \(its alias\)"):
        agent.train(n_timesteps=1, state=object(), initial_state=object())
    with pytest.raises(TypeError, match="eval_episodes= and num_episode_test="):
        agent.train(n_timesteps=1, eval_episodes=2, num_episode_test=2)
    with pytest.raises(ValueError, match="log_every=3 and logging_config.log_frequency=2 disagree"):
        agent.train(n_timesteps=1, log_every=3, logging_config=tdmpc2core.LoggingConfig(log_frequency=2))


def test_multitask_evaluations_are_logged_per_task():
    from tdmpc2core.agents.multitask_program import OfflineProgram

    program = OfflineProgram(types.SimpleNamespace(eval_task_names=["a", "b"], eval_task_ids=[0, 1], eval_envs=None,
                                                   extensions=None))
    ev = {"eval_mean_return": np.array([1.0, 2.0]), "normalized_score": np.array([10.0, 20.0]),
          "eval_return": np.array([[1.0, 1.0], [3.0, 1.0]]), "eval_lengths": np.array([[[4, 6], [5, 5]],
                                                                                      [[2, 2], [5, 5]]])}
    got = program.eval_log(ev)
    assert sorted(got) == ["a/episodic mean reward", "a/mean episodic length", "b/episodic mean reward",
                           "b/mean episodic length", "episodic mean reward", "normalized score"]
    np.testing.assert_array_equal(got["a/episodic mean reward"], [1.0, 3.0])
    np.testing.assert_array_equal(got["a/mean episodic length"], [5.0, 2.0])
    # the driver's history keys and what a per-seed logger gets of them
    hist = driver.logged_evals(program, [ev, ev])
    assert hist["Eval/b/episodic mean reward"].shape == (2, 2)
    by_seed = driver._per_seed({"Eval/a/episodic mean reward": got["a/episodic mean reward"], "Eval/x": 5}, [7, 9])
    assert by_seed == {7: {"Eval/a/episodic mean reward": 1.0, "Eval/x": 5.0},
                       9: {"Eval/a/episodic mean reward": 3.0, "Eval/x": 5.0}}


def test_logging_config_checks_exports_and_a_kind_that_cannot_be_built(tmp_path, monkeypatch):
    assert tdmpc2core.LoggingConfig is lg.LoggingConfig and "LoggingConfig" in tdmpc2core.__all__
    with pytest.raises(ValueError, match="log_frequency='abc' is not accepted; accepted: an integer >= 1"):
        lg.LoggingConfig(log_frequency="abc")
    with pytest.raises(ValueError, match="log_frequency=0 is not accepted; accepted: an integer >= 1"):
        lg.LoggingConfig(log_frequency=0)
    with pytest.raises(ValueError, match="unknown logger kind 'tensorbord' \\(did you mean 'tensorboard'\\?\\); registered: .*tensorboard"):
        lg.LoggingConfig(kind="tensorbord")
    cfg = lg.LoggingConfig(use_wandb=True, kind=["csv", "wandb"], dir=str(tmp_path))
    assert cfg.kinds() == ["wandb", "csv"]

    def missing(*a, **k):
        raise lg.MissingExtraError("logger kind 'wandb' needs the package 'wandb'; install it with "
                                   "pip install -e '.[wandb]'")

    real = lg.make_logger
    monkeypatch.setattr(lg, "make_logger", lambda kind, **o: missing() if kind == "wandb" else real(kind, **o))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = cfg.make_loggers("Pendulum-v1", {"gamma": 0.975})
    assert [type(b).__name__ for b in built] == ["CSVLogger"] and built[0].path == tmp_path / "Pendulum-v1.csv"
    (w,) = caught
    assert "logger 'wandb' not built" in str(w.message) and ".[wandb]" in str(w.message)
    assert "\n" not in str(w.message)
    # the message when the package is absent names the extra
    with pytest.raises(lg.MissingExtraError, match=r"logger kind 'wandb' needs the package 'no_such_module'.*"
                                                   r"pip install -e '\.\[wandb\]'"):
        lg._import_extra("no_such_module", "wandb")  # the extra: the wandb kind's (LoggerKind.extra)

def test_training_stages_build_the_workflows_logger_or_warn_and_go_on(tmp_path, monkeypatch):
    from tdmpc2core.stages import resumable, train_single

    parser = argparse.ArgumentParser(allow_abbrev=False)
    train_single.add_arguments(parser)
    base = ["--task", "pendulum", "--spec", "{}", "--seeds", "0", "1", "--outdir", str(tmp_path / "out")]
    lines = []
    none = resumable.job_loggers(parser.parse_args(base), lines.append, "single/pendulum", "pendulum", [0, 1], dict)
    assert none == []
    # the workflow's flags without a logger block (its shell text is the same with one)
    assert resumable.job_loggers(parser.parse_args(base + ["--logger", "none"]), lines.append, "single/pendulum",
                                 "pendulum", [0, 1], dict) == [] and lines == []
    args = parser.parse_args(base + ["--logger", "csv", "--logger-dir", str(tmp_path / "logs"),
                                     "--logger-group", "demo"])
    (csv_logger,) = resumable.job_loggers(args, lines.append, "single/pendulum", "pendulum", [0, 1], dict)
    assert csv_logger.path == tmp_path / "logs" / "single" / "pendulum" / "seeds_0_1.csv"
    if __import__("importlib").util.find_spec("tensorboardX"):
        args.logger = "tensorboard"
        (tb,) = resumable.job_loggers(args, lines.append, "single/pendulum", "pendulum", [0, 1],
                                      lambda: {"task": "pendulum"})
        assert isinstance(tb, lg.TensorBoardLogger) and tb.logdir == tmp_path / "logs" / "single" / "pendulum"
    if __import__("importlib").util.find_spec("wandb"):
        args.logger = "wandb"
        (wb,) = resumable.job_loggers(args, lines.append, "single/pendulum", "pendulum", [0, 1], dict)
        assert (wb.group, wb.name, wb.mode, wb.project) == ("demo/single/pendulum", "pendulum", "offline", "tdmpc2")
        assert "wandb sync" in lines[-1]
    monkeypatch.setattr(lg, "make_logger", lambda kind, **o: (_ for _ in ()).throw(
        lg.MissingExtraError("logger kind 'wandb' needs the package 'wandb'; pip install -e '.[wandb]'")))
    lines.clear()
    args.logger = "wandb"  # whichever optional packages are installed (a fresh user had tensorboardX alone)
    assert resumable.job_loggers(args, lines.append, "single/pendulum", "pendulum", [0, 1], dict) == []
    assert len(lines) == 1 and lines[0].startswith("warning: logger 'wandb' not built (MissingExtraError")
    assert lines[0].endswith("training goes on without it")
