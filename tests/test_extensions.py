"""Extensions (issue 26, tdmpc2core/extensions.py): the phases init_state, pretrain, post_update
and eval_metrics on both agents, unknown phases refused at construction, exact resume through a
checkpoint, the two shipped extensions (GradNorms, ModelError) and their columns in the stages'
eval.parquet.

The single-task run has tests/test_multitask_extensions.py's settings (Pendulum, 1 env, 2 seeds,
210 agent steps, 2 evaluation episodes) and the multi-task one tests/test_multitask.py's TINY
network on a twin-line pool, both acting with the policy prior (mpc=False: no planner to
compile); each compiles its programs once (the whole run, the split run and the resumed run
share them)."""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pyarrow.parquet as pq
import pytest

from tdmpc2core.extensions import (EvalEpisodes, ExtensionSet, GradNorms, ModelError, UnknownPhaseError,
                                   make_extensions)
from tdmpc2core.model.config import LRSchedule
from tdmpc2core.report import analysis as A
from tdmpc2core.report import html as R
from tdmpc2core.stages import outputs as O

from test_multitask import TINY, T_TWIN, TwinLine, leaves, make_dataset, task, twin_episodes

# mpc=False: the policy prior acts (no planner in the programs, which then compile in a
# fraction of the time); the extensions' phases do not depend on how the agent acts
SINGLE = dict(n_envs=1, model_size=1, mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16, num_elites=4,
              num_pi_trajs=2, iterations=1, batch_size=16, seed_steps=200, mpc=False)


class Stat:
    """A running statistic with every phase: the update count, the sum of the consistency
    loss, the last step seen, the run's length, and a pretrain that halves the policy's
    parameters (it changes the run), records their norm before and counts itself."""

    name = "stat"

    def init_state(self, total_steps):
        return {"count": jnp.zeros((), jnp.int32), "cons_sum": jnp.zeros((), jnp.float32),
                "last_step": jnp.full((), -1, jnp.int32), "total": jnp.asarray(total_steps, jnp.int32),
                "pretrained": jnp.zeros((), jnp.int32), "pi_norm_before": jnp.zeros((), jnp.float32)}

    def pretrain(self, agent_state, state, key):
        params = dict(agent_state.params, pi=jax.tree_util.tree_map(lambda x: 0.5 * x, agent_state.params["pi"]))
        return agent_state._replace(params=params), dict(state, pretrained=state["pretrained"] + 1,
                                                         pi_norm_before=norm(agent_state.params["pi"]))

    def post_update(self, state, agent_state, metrics, step):
        return dict(state, count=state["count"] + 1, cons_sum=state["cons_sum"] + metrics["consistency_loss"],
                    last_step=step)

    def eval_metrics(self, state, model, episodes):
        return {"mean_consistency": state["cons_sum"] / jnp.maximum(state["count"], 1)}


class Recorder:
    """A logger keeping what it is given."""

    def __init__(self):
        self.records = []

    def log(self, step, metrics):
        self.records.append((step, dict(metrics)))

    def close(self):
        pass


def norm(tree):
    return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree_util.tree_leaves(tree)))


def seed_norm(tree, s):
    """The L2 norm of seed ``s``'s slice of every leaf (numpy: no program to compile)."""
    return float(np.sqrt(sum(np.sum(np.square(np.asarray(x, np.float64)[s])) for x in jax.tree_util.tree_leaves(tree))))


# --------------------------------------------------------------------- construction
def test_unknown_phases_and_objects_without_phases_are_refused():
    class PreUpdate:
        def pre_update(self, state):
            return state

    class Typo:
        def post_updates(self, state, agent_state, metrics, step):
            return state

    class NotCallable:
        post_update = 3

    with pytest.raises(UnknownPhaseError, match=r"'pre_update'.*unknown phase\(s\) pre_update; accepted: init_state, "
                                                r"pretrain, post_update, eval_metrics"):
        ExtensionSet([PreUpdate()])
    with pytest.raises(UnknownPhaseError, match="post_updates \\(did you mean post_update\\?\\)"):
        ExtensionSet([Typo()])
    with pytest.raises(UnknownPhaseError, match="has none of the phases init_state, pretrain, post_update, "
                                                "eval_metrics"):
        ExtensionSet([object()])
    with pytest.raises(UnknownPhaseError, match="not callable"):
        ExtensionSet([NotCallable()])
    with pytest.raises(UnknownPhaseError, match=r"pass an instance \(GradNorms\(\)\)"):
        ExtensionSet([GradNorms])
    with pytest.raises(ValueError, match="two extensions named 'grad_norms'"):
        ExtensionSet([GradNorms(), GradNorms()])
    with pytest.raises(ValueError, match="expected a list or tuple"):
        ExtensionSet(GradNorms())
    assert make_extensions(["grad_norms", "model_error"])[1].name == "model_error"
    with pytest.raises(ValueError, match=r"unknown extension 'grad_norm' \(did you mean 'grad_norms'\?\); "
                                         r"registered: \['grad_norms', 'model_error'\]"):
        make_extensions(["grad_norm"])
    # a registered name stands for its default instance (the pipeline's spelling); a misspelt one
    # is named with the closest
    assert ExtensionSet(["grad_norms", ModelError()]).names == ["grad_norms", "model_error"]
    with pytest.raises(ValueError, match=r"unknown extension 'grad_norm' \(did you mean 'grad_norms'\?\)"):
        ExtensionSet(["grad_norm"])
    # the agents refuse at construction (UnknownPhaseError is a ValueError: one line in the stages)
    from tdmpc2core import TDMPC2
    from tdmpc2core.agents.multitask import TDMPC2MultiTask

    with pytest.raises(ValueError, match="unknown phase"):
        TDMPC2("Pendulum-v1", extensions=[PreUpdate()], **SINGLE)
    with pytest.raises(ValueError, match="none of the phases"):
        TDMPC2MultiTask(twin_pool(), batch_size=8, extensions=[object()], **TINY)


def test_model_error_is_zero_for_a_perfect_model_and_skips_steps_after_a_termination():
    """ModelError against a stand-in model whose dynamics are the episodes' own (z' = z + a,
    encode = identity) and whose reward is off by 1 from step 5 of episode 0."""
    class Exact:
        horizon, latent_dim, params = 2, 1, {}

        def encode(self, obs):
            return obs

        def next(self, z, a):
            return z + a

        def reward(self, z, a):
            return z[..., 0]

    E, T = 2, 8
    a = np.full((E, T, 1), 0.5, np.float32)
    obs = np.concatenate([np.zeros((E, 1, 1), np.float32), np.cumsum(a, axis=1)], axis=1)
    reward = obs[:, :-1, 0].copy()
    reward[0, 5:] += 1.0
    valid = np.ones((E, T), bool)
    ep = EvalEpisodes(jnp.asarray(obs), jnp.asarray(a), jnp.asarray(reward), jnp.asarray(valid))
    m = {k: float(v) for k, v in ModelError().eval_metrics(None, Exact(), ep).items()}
    assert sorted(m) == ["latent_mse_h1", "latent_mse_h2", "reward_abs_h1", "reward_abs_h2"]
    assert m["latent_mse_h1"] == m["latent_mse_h2"] == 0.0
    # starts t = 0..6 of 2 episodes: h=1 reads rewards t (wrong at 5, 6 of episode 0), h=2 t+1 (5, 6, 7)
    assert m["reward_abs_h1"] == pytest.approx(2 / 14) and m["reward_abs_h2"] == pytest.approx(3 / 14)
    # episode 0 terminated after step 4: its later steps are not data
    valid[0, 5:] = False
    obs[0, 6:] = 99.0  # past the terminal step the env's observations mean nothing
    ep = EvalEpisodes(jnp.asarray(obs), jnp.asarray(a), jnp.asarray(reward), jnp.asarray(valid))
    m = {k: float(v) for k, v in ModelError().eval_metrics(None, Exact(), ep).items()}
    assert m["latent_mse_h1"] == m["latent_mse_h2"] == 0.0 and m["reward_abs_h1"] == 0.0
    # too short for the horizon: NaN, not a number from nothing
    short = EvalEpisodes(*(jnp.asarray(x)[:, :1] for x in (obs, a, reward, valid)))
    assert np.isnan(float(ModelError().eval_metrics(None, Exact(), short)["latent_mse_h2"]))


# --------------------------------------------------------------------- the single-task agent
def test_single_task_extensions_run_every_phase_and_resume_exactly_through_a_checkpoint(tmp_path):
    from tdmpc2core import TDMPC2

    # the optimizer settings of issue 26 ride along (one compiled program for both): two updates
    # per tick after the burst, a cosine schedule of the update count and decoupled weight decay
    agent = TDMPC2("Pendulum-v1", extensions=[GradNorms(), ModelError(), Stat()], updates_per_step=2,
                   weight_decay=0.1, learning_rate={"kind": "cosine", "init_value": 1e-3, "decay_steps": 300},
                   **SINGLE)
    assert isinstance(agent.cfg.learning_rate, LRSchedule)
    assert agent.config["learning_rate"] == {"kind": "cosine", "init_value": 1e-3, "decay_steps": 300}
    run = dict(eval_every=200, eval_episodes=2, total_timesteps=210)

    # pretrain: once, inside the init program, on the initialised parameters
    init = agent.init([0, 1], 210)
    pi_norm = [seed_norm(init.agent.params["pi"], s) for s in (0, 1)]
    np.testing.assert_allclose(pi_norm, 0.5 * np.asarray(init.ext["stat"]["pi_norm_before"]), rtol=1e-5)
    assert np.asarray(init.ext["stat"]["pretrained"]).tolist() == [1, 1] and min(pi_norm) > 0

    logged, recs = Recorder(), []
    whole, hw = agent.train(seed=[0, 1], n_timesteps=210, loggers=[logged], callback=recs.append, **run)
    # ticks 0..199 random, the burst of 200 at tick 200, then 2 updates per tick for ticks 201..209
    assert [int(r["updates"][0]) for r in recs][-1] == 218 and ("burst", 201, 200) in [
        (r["phase"], r["agent_steps"], int(r["updates"][0])) for r in recs]
    kinds = (optax.ScaleByAdamState, optax.ScaleByScheduleState)  # the schedule's count is the Adam's
    counts = [int(np.asarray(s.count)[0]) for s in jax.tree_util.tree_leaves(
        (whole.agent.wm_opt_state, whole.agent.pi_opt_state), is_leaf=lambda x: isinstance(x, kinds))
        if isinstance(s, kinds)]
    assert counts == [218] * 6  # encoder, rest, policy: so a resumed run continues the schedule
    first, h1 = agent.train(seed=[0, 1], n_timesteps=205, **run)
    info = agent.save_checkpoint(tmp_path, first, h1, seeds=[0, 1], total_timesteps=210, eval_every=200,
                                 eval_episodes=2)
    restored, h2, manifest = agent.restore(info.path)
    assert manifest["settings"]["extensions"] == ["grad_norms", "model_error", "stat"]
    split, hs = agent.train(seed=[0, 1], state=restored, history=h2, n_timesteps=5, **run)

    # parameters (the schedule and decay continued from the checkpoint's Adam count), replay,
    # keys and every extension state
    for a, b in zip(leaves(whole), leaves(split)):
        np.testing.assert_array_equal(a, b)
    stat = {k: np.asarray(v) for k, v in whole.ext["stat"].items()}
    updates = np.asarray(whole.agent.updates)
    assert stat["count"].tolist() == updates.tolist() == [218, 218]  # the burst of 200 at tick 200, then 2 x 9
    assert stat["last_step"].tolist() == [210, 210]  # agent steps done when the last update ran
    assert stat["total"].tolist() == [210, 210] and stat["pretrained"].tolist() == [1, 1]  # not again on resume

    keys = O.ext_keys(hw)
    assert "ext/stat/mean_consistency" in keys and "ext/model_error/latent_mse_h3" in keys
    assert "ext/grad_norms/param_norm_qs" in keys and keys == O.ext_keys(hs)
    for k in keys:
        np.testing.assert_array_equal(hw[k], hs[k])  # the evaluations after the resume too
        assert hw[k].shape == (3, 2)  # evaluations at 0, 200, 210; 2 seeds
    np.testing.assert_allclose(hw["ext/stat/mean_consistency"][-1], stat["cons_sum"] / stat["count"], rtol=1e-6)
    evals = [m for _, m in logged.records if "Eval/episodic mean reward" in m]  # loggers: the seeds' mean
    assert [m["Eval/stat/mean_consistency"] for m in evals] == pytest.approx(hw["ext/stat/mean_consistency"].mean(1))
    assert hw["ext/grad_norms/updates"][:, 0].tolist() == [0, 0, 218]
    assert np.isnan(hw["ext/grad_norms/grad_norm_last"][0]).all()  # no update before the first evaluation
    pi_norm = [seed_norm(whole.agent.params["pi"], s) for s in (0, 1)]
    np.testing.assert_allclose(hw["ext/grad_norms/param_norm_pi"][-1], pi_norm, rtol=1e-5)
    assert np.all(np.isfinite(hw["ext/model_error/latent_mse_h1"])) and np.all(hw["ext/model_error/latent_mse_h1"] >= 0)

    # eval.parquet: the schema's columns, then the extensions', per evaluation and seed
    cols = O.single_eval_columns("pendulum", 1, 1, hw, 2)
    O.write_table(tmp_path / "eval.parquet", "single_eval", cols)
    df = pq.read_table(tmp_path / "eval.parquet").to_pandas()
    assert list(df.columns) == [n for n, _ in O.SCHEMAS["single_eval"]] + keys
    np.testing.assert_array_equal(df["ext/model_error/reward_abs_h2"], np.repeat(hw["ext/model_error/reward_abs_h2"][:, 1], 2))
    # the report: each metric at the last evaluation, over the seeds whose files exist
    tab = A.extension_table([("single-task pendulum", [tmp_path / "eval.parquet", tmp_path / "seed9.parquet"])])
    row = tab[tab["metric"] == "model_error/reward_abs_h2"].iloc[0]
    assert (row["task"], row["step"], row["n_seeds"]) == ("pendulum", 210, 1)
    assert row["mean"] == pytest.approx(hw["ext/model_error/reward_abs_h2"][-1, 1])
    assert len(tab) == len(keys) and "grad_norms/param_norm_qs" in R.extensions_section(tab)


# --------------------------------------------------------------------- the multi-task agent
def twin_pool():
    rng = np.random.default_rng(0)
    return make_dataset([twin_episodes(rng, 1.0, 3), twin_episodes(rng, -1.0, 3)],
                        [task("right", 1, 1, T_TWIN), task("left", 1, 1, T_TWIN)])


def test_multitask_extensions_step_is_updates_and_eval_metrics_are_per_task(tmp_path):
    from tdmpc2core.agents.multitask import TDMPC2MultiTask

    agent = TDMPC2MultiTask(twin_pool(), eval_envs=[None, TwinLine(-1.0, "left")], batch_size=8,
                            return_ranges={"left": (-25, 25)}, extensions=[GradNorms(), ModelError(), Stat()],
                            mpc=False, **TINY)
    state, hist = agent.train(seed=[0, 1], n_timesteps=6, eval_every=3, eval_episodes=2)
    stat = {k: np.asarray(v) for k, v in state.ext["stat"].items()}
    assert stat["count"].tolist() == stat["last_step"].tolist() == [6, 6]  # step = updates done
    assert stat["total"].tolist() == [6, 6] and stat["pretrained"].tolist() == [1, 1]
    keys = O.ext_keys(hist)
    assert "ext/grad_norms/param_norm_task_emb" in keys and "ext/model_error/reward_abs_h1" in keys
    for k in keys:
        assert hist[k].shape == (3, 2, 1)  # evaluations at 0, 3, 6; 2 seeds; the evaluated task
    assert hist["ext/grad_norms/updates"][:, 0, 0].tolist() == [0, 3, 6]
    assert np.all(np.isfinite(hist["ext/model_error/latent_mse_h2"]))
    cols = O.multi_eval_columns("twins", 1, ["left"], [0, 1], hist, 2, [(-25, 25)])
    O.write_table(tmp_path / "eval.parquet", "multi_eval", cols)
    df = pq.read_table(tmp_path / "eval.parquet").to_pandas()
    assert list(df.columns) == [n for n, _ in O.SCHEMAS["multi_eval"]] + keys
    want = np.repeat(hist["ext/grad_norms/wm_grad_norm_ema"].reshape(-1), 2)  # eval x seed x task, then episodes
    np.testing.assert_array_equal(df["ext/grad_norms/wm_grad_norm_ema"], want)


# --------------------------------------------------------------------- the pipeline's setting
def test_pipeline_extensions_setting_reaches_the_stages_spec_and_unknown_names_are_refused():
    from test_pipeline_config import merged, refusal

    from tdmpc2core.pipeline.config import resolve
    from tdmpc2core.stages import train_multi, train_single

    p = resolve(merged("protocols: {demo: {defaults: {extensions: [grad_norms, model_error]}, "
                       "tasks: {cartpole-balance: {extensions: []}}, multitask: {extensions: [model_error]}}}"))
    spec = train_single.parse_spec(p.task_spec("pendulum"))
    assert spec.extensions == ["grad_norms", "model_error"]
    assert "extensions" not in json.loads(p.task_spec("cartpole-balance"))  # [] is no setting: the spec as before
    assert train_multi.parse_spec(p.multi_spec("demo")).extensions == ["model_error"]
    assert ("config: protocols.demo.tasks.pendulum.extensions: unknown extension 'grad_norm' (did you mean "
            "'grad_norms'?); registered: ['grad_norms', 'model_error']") in refusal(
        "protocols: {demo: {tasks: {pendulum: {extensions: [grad_norm]}}}}")
    assert "config: protocols.demo.multitask.extensions: unknown extension 'nope'" in refusal(
        "protocols: {demo: {multitask: {extensions: [nope]}}}")
