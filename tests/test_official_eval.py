"""The released checkpoints, evaluated (tdmpc2core.agents.official_eval, ``tdmpc2
evaluate-official``, ``tdmpc2 official-table``, the workflow's official_checkpoints block).

No download: ``tests/fixtures/official_ckpt_{single,multi}.pt`` were written by the official
code itself (nicklashansen/tdmpc2 at 5f6fade, run unmodified on the CPU, saved through its
``TDMPC2.save``) by ``tools/record_official_checkpoints.py``, which also recorded its
planner's eval-mode numbers on them (``official_ckpt_plans.npz``: every draw, the final MPPI
mean). Here those files go through our reader and converter; our planner, given the same
draws, must reach the official mean within :data:`MEAN_TOL` (the mean, not the sampled
elite: an elite can flip on a 1e-6 difference of two values). The checkpoints are evaluated
on dm_control's cartpole-balance (and the multi-task one also with a padded, masked task)
for a few short episodes. Reading ``.pt`` files needs PyTorch (skipped, with the reason,
without it; ``.ci/run`` installs it).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tdmpc2core.envs import official_tasks as OT
from tdmpc2core.envs.dmcontrol_ids import MT30_TASKS

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures"
SINGLE, MULTI = FIX / "official_ckpt_single.pt", FIX / "official_ckpt_multi.pt"
# the tiny checkpoints' planner (the recorder's configuration) and a short episode
PLANNER = dict(iterations=3, num_samples=16, num_elites=4, num_pi_trajs=3)
PLANNER_ARGS = [a for k, v in PLANNER.items() for a in ("--planner", f"{k}={v}")]
EPISODE_LENGTH = 40  # simulator steps: 20 agent steps at action repeat 2
#: |ours - official| <= atol + rtol |official| for the planner's final mean (float32; observed
#: at most 4.0e-6 absolute, recorded in docs/fidelity.md)
MEAN_TOL = dict(rtol=1e-4, atol=1e-5)


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed: pip install -e '.[official]' "
                                               "(reading .pt checkpoints needs it)")


def plans():
    d = np.load(FIX / "official_ckpt_plans.npz")
    return {k: d[k] for k in d.files if k != "meta"}, json.loads(str(d["meta"]))


# ------------------------------------------------------------------ data, provenance
def test_official_task_sets_are_data_with_their_source():
    assert OT.task_set("mt30") == MT30_TASKS
    mt80 = OT.task_set("mt80")
    assert len(mt80) == 80 and mt80[:30] == MT30_TASKS and all(t.startswith("mw-") for t in mt80[30:])
    src = OT.task_set_source()
    assert src["repository"] == "nicklashansen/tdmpc2" and src["commit"].startswith("5f6fade")
    assert src["path"] == "tdmpc2/common/__init__.py" and len(src["file_sha256"]) == 64
    avail = [t for t in mt80 if OT.unavailable_reason(t) is None]
    # mt30's 30 dm_control tasks and mt80's 50 Meta-World tasks (tests/test_domains.py: the extra missing)
    assert len(avail) == 80 and set(avail) - set(MT30_TASKS) == {t for t in mt80 if t.startswith("mw-")}
    assert OT.env_id_of("reacher-three-easy") == "dmc:reacher-three-easy"
    assert "four-link" in OT.unavailable_reason("reacher-four-easy")   # an official task file not defined here
    assert OT.env_id_of("mw-reach") == "mw-reach" and OT.env_id_of("cup-spin") == "dmc:cup-spin"
    assert "not a Meta-World task" in OT.unavailable_reason("mw-nope")
    assert OT.resolve_task_list(None, 30) == ("mt30", MT30_TASKS)
    with pytest.raises(ValueError, match="no official task set has that many"):
        OT.resolve_task_list(None, 2)
    with pytest.raises(ValueError, match="task set .mt30. has 30 tasks but the checkpoint has 2"):
        OT.resolve_task_list("mt30", 2)
    assert OT.resolve_task_list("dmc:cartpole-balance, reacher-easy", 2) == ("custom", ("cartpole-balance",
                                                                                      "reacher-easy"))


def test_fixtures_name_the_official_commit_files_torch_and_checkpoint_hashes():
    _, meta = plans()
    assert meta["official_commit"] == "5f6fadec0fec78304b4b53e8171d348b58cac486"
    assert meta["official_repository"] == "nicklashansen/tdmpc2" and meta["device"] == "cpu"
    for f in ("tdmpc2/tdmpc2.py", "tdmpc2/common/world_model.py", "tdmpc2/common/layers.py"):
        assert len(meta["official_files_sha256"][f]) == 64
    assert meta["torch_version"]
    for name, digest in meta["checkpoints_sha256"].items():
        assert hashlib.sha256((FIX / name).read_bytes()).hexdigest() == digest, name


def test_official_architecture_rules_of_the_parser():
    from tdmpc2core.agents.official_eval import official_architecture as oa
    assert oa(19, 24, 6, task_set="mt30", num_tasks=30)["latent_dim"] == 512  # "slightly smaller"
    assert oa(19, 39, 6, task_set="mt80", num_tasks=80)["latent_dim"] == 768
    assert [oa(s, 24, 6, task_set="mt30", num_tasks=30)["task_dim"] for s in (1, 5, 19, 48, 317)] == [96, 64, 64, 64, 96]
    assert oa(5, 39, 6, task_set="mt80", num_tasks=80)["task_dim"] == 96
    assert oa(1, 5, 1)["num_q"] == 2 and "task_dim" not in oa(5, 5, 1)


# ------------------------------------------------------------------ the planner's mean (parity)
@pytest.mark.parametrize("name,task", [("single", 0), ("multi", 0), ("multi", 1)])
def test_planner_mean_in_eval_mode_matches_the_official_code(name, task):
    """From the recorded observation with the official draws injected: our MPPI mean after the
    iterations (a t0 call, then a warm-started one) equals the official ``_prev_mean``."""
    _torch()
    import jax
    import jax.numpy as jnp

    from tdmpc2core.agents.official_eval import load_checkpoint
    from tdmpc2core.model.config import TDMPC2Config, resolve_config
    from tdmpc2core.model.planner import PlanDraws, plan
    from tdmpc2core.model.update import embed
    from tdmpc2core.model.world_model import WorldModel

    d, meta = plans()
    c = meta["configs"][name]
    ck = load_checkpoint(FIX / f"official_ckpt_{name}.pt", task_set=",".join(c["tasks"]) if c["multitask"] else None)
    a = ck.architecture
    assert (a.obs_dim, a.action_dim, a.num_tasks) == (c["obs_shape"]["state"][0], c["action_dim"],
                                                      len(c["tasks"]) if c["multitask"] else 0)
    cfg = resolve_config(TDMPC2Config(**a.config_kwargs(), horizon=c["horizon"],
                                      **{k: c[k] for k in PLANNER}), episode_length=500, action_dim=a.action_dim)
    wm = WorldModel(cfg, a.obs_dim, a.action_dim, a.task_dim, a.num_tasks)
    params = jax.tree_util.tree_map(jnp.asarray, ck.weights.params)
    disc = d[f"{name}/discount"]
    gamma = float(disc[task]) if disc.ndim else float(disc)
    e = mask = None
    if c["multitask"]:
        e = embed(params["task_emb"], task)
        mask = jnp.zeros(a.action_dim, jnp.float32).at[:c["action_dims"][task]].set(1.0)
    fn = jax.jit(lambda obs, prev, t0, dr: plan(wm, params, obs, prev, t0, True, gamma, None, e, mask, draws=dr))
    p = f"{name}/task{task}"
    prev = jnp.zeros((cfg.horizon, a.action_dim), jnp.float32)
    for call in (0, 1):
        q = f"{p}/call{call}"
        if call == 1:  # the official warm start is its previous mean: start both from the official one
            prev = jnp.asarray(d[f"{q}/prev_mean"])
        dr = PlanDraws(pi_eps=d[f"{q}/pi_eps"], noise=d[f"{q}/noise"], value_eps=d[f"{q}/value_eps"],
                       pairs=d[f"{q}/pairs"], elite=d[f"{q}/elite"])
        _, mean = fn(jnp.asarray(d[f"{p}/obs"][call]), prev, jnp.asarray(call == 0), dr)
        np.testing.assert_allclose(np.asarray(mean), d[f"{q}/mean"], **MEAN_TOL, err_msg=q)
        if mask is not None:  # the padded action dims of the mean are exactly zero
            assert np.all(np.asarray(mean)[:, c["action_dims"][task]:] == 0.0)


# ------------------------------------------------------------------ evaluation through the stage
def cli(*args):
    from tdmpc2core import cli as C
    return C.main(["evaluate-official", *map(str, args)])


@pytest.fixture(scope="module")
def single_eval(tmp_path_factory):
    """The single-task fixture through `tdmpc2 evaluate-official` (2 short episodes)."""
    _torch()
    out = tmp_path_factory.mktemp("official") / "tiny-single"
    rc = cli("--checkpoint", SINGLE, "--task", "dmc:cartpole-balance", "--episodes", 2,
             "--episode-length", EPISODE_LENGTH, *PLANNER_ARGS, "--name", "tiny-single", "--out", out)
    assert rc == 0
    return out


def test_evaluate_official_single_task_writes_eval_parquet_and_run_json(single_eval):
    import pandas as pd

    from tdmpc2core.report.official import read_eval
    df, prov = read_eval(single_eval / "eval.parquet")
    assert list(df["episode"]) == [0, 1] and set(df["task"]) == {"cartpole-balance"}
    assert (df["length"] == EPISODE_LENGTH // 2).all() and (df["env_frames"] == EPISODE_LENGTH).all()
    assert np.isfinite(df["return"]).all() and (df["return"] >= 0).all() and (df["return"] <= EPISODE_LENGTH).all()
    assert df["return"].nunique() == 2  # fresh initial states per episode
    np.testing.assert_allclose(df["normalized_score"], df["return"] / 10)
    assert (df["checkpoint_sha256"] == hashlib.sha256(SINGLE.read_bytes()).hexdigest()).all()
    assert df["model_size"].isna().all() and (df["task_index"] == -1).all() and (df["seed"] == 1).all()
    assert prov["settings"]["planner"]["num_samples"] == 16 and prov["settings"]["episodes"] == 2
    assert prov["settings"]["eval_mode"] is True  # not evaluate.py's exploration noise (deviation K4)
    assert prov["settings"]["gamma"]["cartpole-balance"] == pytest.approx(0.95)  # T = 20 agent steps
    assert prov["layout"] == "flat" and prov["architecture"]["obs_dim"] == 5 and prov["provenance"]["packages"]
    run = json.loads((single_eval / "run.json").read_text())
    assert run["returns"]["cartpole-balance"] == pytest.approx(float(df["return"].mean()))
    assert run["checkpoint_sha256"] == df["checkpoint_sha256"].iloc[0] and run["compile_seconds"]["plan"] > 0
    # what the file was, from its integrity check (tdmpc2core.io.integrity; tests/test_official_integrity.py)
    size = SINGLE.stat().st_size
    assert (df["checkpoint_bytes"] == size).all() and run["checkpoint_bytes"] == prov["checkpoint_bytes"] == size
    (src,) = run["source_files"]
    assert src == prov["source_files"][0] and src["path"] == str(SINGLE) and src["size"] == size
    assert src["sha256"] == run["checkpoint_sha256"] and src["members_checked"] > 0
    assert sorted(p.name for p in single_eval.iterdir()) == ["eval.parquet", "run.json"]  # no temporary left
    assert isinstance(pd.read_parquet(single_eval / "eval.parquet"), pd.DataFrame)


def test_a_refused_evaluation_leaves_an_earlier_complete_one_as_it_was(single_eval, tmp_path):
    out = tmp_path / "again"
    shutil.copytree(single_eval, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert cli("--checkpoint", SINGLE, "--task", "dmc:cheetah-run", "--out", out) == 1  # dims do not fit
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_multi_task_checkpoint_pads_masks_and_skips_what_is_not_available():
    """Task 0 (cartpole-balance: obs 5 of 6, action 1 of 2) with its embedding; task 1 named
    reacher-four-easy (an official task not defined here): skipped with the reason under 'all'."""
    _torch()
    from tdmpc2core.agents.official_eval import evaluate_official
    ev = evaluate_official(MULTI, "all", task_set="cartpole-balance,reacher-four-easy", episodes=1,
                           episode_length=EPISODE_LENGTH, planner=PLANNER)
    assert [(r["task"], r["task_index"], r["length"]) for r in ev.rows] == [("cartpole-balance", 0, 20)]
    assert np.isfinite(ev.rows[0]["return"])
    assert set(ev.skipped) == {"reacher-four-easy"} and "four-link" in ev.skipped["reacher-four-easy"]
    assert ev.checkpoint.task_set == "custom" and ev.checkpoint.architecture.num_tasks == 2
    # asked for by name, the unavailable task is an error listing what is available
    with pytest.raises(ValueError, match=r"cannot be evaluated here.*\['dmc:cartpole-balance'\]"):
        evaluate_official(MULTI, ["dmc:reacher-four-easy"], task_set="cartpole-balance,reacher-four-easy",
                          episodes=1, planner=PLANNER)


# ------------------------------------------------------------------ errors: clear, nothing written
class _Pickled:
    """Not a tensor: ``torch.load(weights_only=True)`` refuses to unpickle it."""

    def __reduce__(self):
        return (print, ("this must never run",))


@pytest.mark.parametrize("case", ["model_size", "dims", "missing", "unknown_task", "task_count", "not_in_set",
                                  "single_all", "not_a_checkpoint", "damaged", "pickled_code", "text_file",
                                  "empty_file", "float_planner"])
def test_errors_name_the_file_and_what_fits_and_write_nothing(tmp_path, capsys, case):
    torch = _torch()
    out = tmp_path / "results" / "official" / "x"
    ck, task, extra = SINGLE, "dmc:cartpole-balance", []
    expect = {
        "model_size": r"does not fit model size 5: enc_dim 12 \(file\) vs 256.*fits no official model size",
        "dims": r"does not fit task dmc:reacher-easy: the task has obs_dim 6 and action_dim 2, the weights take "
                r"obs_dim 5 and action_dim 1",
        "missing": r"no official checkpoint at .*nope\.pt",
        "unknown_task": r"unknown dm_control task 'dmc:cartpole-balanse'.*Did you mean \['dmc:cartpole-balance'",
        "task_count": r"official_ckpt_multi\.pt: the checkpoint has 2 task embeddings, and no official task set",
        "not_in_set": r"'dmc:walker-walk' is not one of the 2 tasks of .*official_ckpt_multi\.pt.*"
                      r"\['dmc:cartpole-balance', 'dmc:reacher-easy'\]",
        "single_all": r"official_ckpt_single\.pt is a single-task checkpoint",
        "not_a_checkpoint": r"bad\.pt: not a TD-MPC2 checkpoint this code can evaluate: missing key",
        # refused by the integrity check (tdmpc2core.io.integrity) before torch.load sees them
        "damaged": r"bad\.pt: not a readable PyTorch checkpoint: the file starts as a zip archive but has no "
                   r"readable zip directory at its end .*truncated",
        "pickled_code": r"bad\.pt: not a readable PyTorch checkpoint: torch.load\(weights_only=True\) refused it",
        "text_file": r"bad\.pt: not a readable PyTorch checkpoint: the file is not a zip archive",
        "empty_file": r"bad\.pt: not a readable PyTorch checkpoint: the file is empty \(0 bytes\)",
        "float_planner": r"planner setting num_samples=10\.0 must be an integer",
    }[case]
    if case == "model_size":
        extra = ["--model-size", 5]
    elif case == "dims":
        task = "dmc:reacher-easy"
    elif case == "missing":
        ck = tmp_path / "nope.pt"
    elif case == "unknown_task":
        task = "dmc:cartpole-balanse"
    elif case == "task_count":
        ck, task = MULTI, "all"
    elif case == "not_in_set":
        ck, task, extra = MULTI, "dmc:walker-walk", ["--task-set", "cartpole-balance,reacher-easy"]
    elif case == "single_all":
        task = "all"
    elif case == "not_a_checkpoint":
        ck = tmp_path / "bad.pt"
        torch.save({"model": {"_encoder.state.0.weight": torch.zeros(3, 3)}}, ck)
    elif case == "damaged":
        ck = tmp_path / "bad.pt"
        ck.write_bytes(SINGLE.read_bytes()[:5000])  # a download cut short
    elif case == "pickled_code":
        ck = tmp_path / "bad.pt"
        torch.save({"model": _Pickled()}, ck)  # an object whose unpickling would run code
    elif case == "text_file":
        ck = tmp_path / "bad.pt"
        ck.write_text("hello\n")  # torch's weights-only unpickler raised a bare KeyError on it
    elif case == "empty_file":
        ck = tmp_path / "bad.pt"
        ck.write_bytes(b"")  # an EOFError without a message
    elif case == "float_planner":
        extra = ["--planner", "num_samples=10.0"]
    rc = cli("--checkpoint", ck, "--task", task, *extra, "--out", out)
    captured = capsys.readouterr()
    err = captured.err
    assert "this must never run" not in captured.out + err
    assert rc == 1
    assert len([ln for ln in err.splitlines() if ln.startswith("tdmpc2 evaluate-official: error:")]) == 1, err
    import re
    assert re.search(expect, err), err
    assert not (tmp_path / "results").exists()  # nothing under results/, not even the folder


def test_checkpoint_of_an_official_size_is_inferred_and_checked(tmp_path):
    """A full-width multi-task state dict (model size 1, 80 tasks: mt80's task_dim 96), written
    in the official layout: inferred as size 1 of mt80; another size is refused naming the fit."""
    _torch()
    import jax

    from tdmpc2core.agents.official_eval import CheckpointMismatchError, load_checkpoint
    from tdmpc2core.io.official import save_official
    from tdmpc2core.model import official as O
    from tdmpc2core.model.config import TDMPC2Config, resolve_config
    from tdmpc2core.model.world_model import WorldModel

    cfg = resolve_config(TDMPC2Config(model_size=1), episode_length=500, action_dim=6)
    wm = WorldModel(cfg, 39, 6, 96, 80)
    rng = np.random.default_rng(0)
    shapes = jax.eval_shape(wm.init, jax.random.PRNGKey(0))
    params = jax.tree_util.tree_map(lambda s: rng.standard_normal(s.shape).astype(np.float32), shapes)
    path = tmp_path / "mt80-1M.pt"
    save_official(path, O.to_official(params))
    ck = load_checkpoint(path, model_size=1)
    assert (ck.model_size, ck.task_set, len(ck.task_names)) == (1, "mt80", 80)
    assert ck.task_names[:2] == ("walker-stand", "walker-walk")
    with pytest.raises(CheckpointMismatchError, match=r"mt80-1M\.pt does not fit model size 5: .*It fits "
                                                      r"--model-size 1\."):
        load_checkpoint(path, model_size=5)
    with pytest.raises(CheckpointMismatchError, match="task set 'mt30' has 30 tasks but the checkpoint has 80"):
        load_checkpoint(path, task_set="mt30")


# ------------------------------------------------------------------ the table and the report section
def test_official_table_and_report_section(single_eval, tmp_path):
    import pandas as pd

    from tdmpc2core import cli as C
    from tdmpc2core.report import html as R
    from tdmpc2core.report import published as P

    out = tmp_path / "tables" / "official_checkpoints.csv"
    assert C.main(["official-table", "--evals", str(single_eval / "eval.parquet"), "--out", str(out)]) == 0
    t = pd.read_csv(out)
    (row,) = t.itertuples(index=False)
    ours = pd.read_parquet(single_eval / "eval.parquet")["return"]
    pub = P.final_point("cartpole-balance")
    assert row.task == "cartpole-balance" and row.episodes == 2
    assert row.return_mean == pytest.approx(ours.mean()) and row.published_return == pytest.approx(pub["mean_return"])
    assert row.difference == pytest.approx(ours.mean() - pub["mean_return"])
    md = (tmp_path / "tables" / "official_checkpoints.md").read_text()
    assert "Released checkpoints, our planner" in md
    digest = hashlib.sha256(SINGLE.read_bytes()).hexdigest()
    assert (row.checkpoint_file, row.checkpoint_bytes, row.checkpoint_sha256) == (SINGLE.name, SINGLE.stat().st_size,
                                                                                  digest)
    assert f"| tiny-single | {SINGLE.name} | {SINGLE.stat().st_size:,} | {digest} |" in md
    html = R.official_section(t)
    assert "tiny-single" in html and f"{pub['mean_return']:,.1f}" in html and f"{ours.mean():,.1f}" in html
    assert f"<code>{digest}</code>" in html and f"{SINGLE.stat().st_size:,}" in html


# ------------------------------------------------------------------ the pipeline path
def _snakemake(cwd, *args, timeout=600):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAKEMAKE")}
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.mark.slow
def test_pipeline_official_block_dry_run_and_real_run(tmp_path, single_eval):
    _torch()
    for name in ("Snakefile", "config.yaml"):
        shutil.copy2(ROOT / name, tmp_path / name)
    for name in ("workflow", "envs"):
        shutil.copytree(ROOT / name, tmp_path / name)
    (tmp_path / "downloads").mkdir()
    shutil.copy2(SINGLE, tmp_path / "downloads" / "tiny.pt")
    planner = ", ".join(f"{k}: {v}" for k, v in PLANNER.items())
    (tmp_path / "off.yaml").write_text(
        "official_checkpoints:\n  dir: downloads\n  episodes: 2\n"
        f"  episode_length: {EPISODE_LENGTH}\n  planner: {{{planner}}}\n"
        "  checkpoints:\n    tiny: {file: tiny.pt, tasks: ['dmc:cartpole-balance']}\n")
    target = "results/tables/official_checkpoints.csv"
    res = _snakemake(tmp_path, "-n", "-p", "--cores", "2", "--configfile=off.yaml", "--", target)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert "official_eval" in out and "official_table" in out and "train_single" not in out
    assert "evaluate-official --checkpoint downloads/tiny.pt --name tiny --task dmc:cartpole-balance --episodes 2" in out
    # the whole DAG of this config: the demo's jobs plus the two, the report taking the table
    res = _snakemake(tmp_path, "-n", "--cores", "2", "--configfile=off.yaml")
    import re
    assert res.returncode == 0 and re.search(r"^official_eval\s+1$", res.stdout, re.M), res.stdout[-3000:]
    assert re.search(r"^train_single_seeds_0_1\s+2$", res.stdout, re.M)  # the demo's jobs beside them
    res = _snakemake(tmp_path, "--cores", "2", "--configfile=off.yaml", "--", target)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    import pandas as pd
    t = pd.read_csv(tmp_path / target)
    assert list(t["checkpoint"]) == ["tiny"] and t["episodes"].tolist() == [2]
    # the job's numbers are the stage's own run of the same settings (keys from the seed)
    ours = pd.read_parquet(tmp_path / "results/official/tiny/eval.parquet")["return"].tolist()
    assert ours == pd.read_parquet(single_eval / "eval.parquet")["return"].tolist()
    assert (tmp_path / "results/official/tiny/run.json").exists()
    # the committed smoke configuration (the fixtures as its folder): its plan
    shutil.copytree(FIX, tmp_path / "tests" / "fixtures")
    res = _snakemake(tmp_path, "-n", "--configfile=workflow/configs/official-smoke.yaml", "--", target)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert re.search(r"^official_eval\s+2$", res.stdout, re.M) and "train_single" not in res.stdout
    # refused at load, before any job: an unknown task, a missing file, a schema error (the
    # workflow loaded in this process, tests/test_workflow.py's load_workflow: the same checks)
    from test_workflow import refusal

    (tmp_path / "bad.yaml").write_text(
        "official_checkpoints:\n  dir: downloads\n  checkpoints:\n    tiny: {file: tiny.pt, tasks: ['dmc:nope']}\n")
    assert "official_checkpoints.checkpoints.tiny.tasks: 'dmc:nope'" in refusal(tmp_path, "bad.yaml")
    (tmp_path / "bad3.yaml").write_text(
        "official_checkpoints:\n  dir: downloads\n  checkpoints:\n    tiny: {file: nope.pt, tasks: [all]}\n")
    assert "official_checkpoints.checkpoints.tiny.file: downloads/nope.pt does not exist" in refusal(tmp_path,
                                                                                                     "bad3.yaml")
    (tmp_path / "bad2.yaml").write_text("official_checkpoints:\n  dir: downloads\n  checkpoints:\n"
                                        "    tiny: {file: tiny.pt, tasks: [all], model_size: 7}\n")
    assert "model_size" in refusal(tmp_path, "bad2.yaml")


def test_nested_layout_action_masks_must_fit_the_tasks(tmp_path):
    """The later official code's checkpoints store each task's action mask: one that does not
    fit the dm_control task's action dims (a wrong task list) is refused."""
    _torch()
    from tdmpc2core.agents.official_eval import CheckpointMismatchError, evaluate_official, load_checkpoint
    from tdmpc2core.io.official import save_official
    from tdmpc2core.model import official as O

    ck = load_checkpoint(MULTI, task_set="cartpole-balance,reacher-easy")
    path = tmp_path / "nested.pt"
    save_official(path, O.to_official(ck.weights.params, ck.weights.target_qs, layout="nested",
                                      action_masks=np.ones((2, 2), np.float32)))
    with pytest.raises(CheckpointMismatchError, match=r"task 0 \(cartpole-balance\) has 2 action dims in the "
                                                      r"checkpoint's _action_masks, the dm_control task 1"):
        evaluate_official(path, ["dmc:cartpole-balance"], task_set="cartpole-balance,reacher-easy", episodes=1,
                          planner=PLANNER)
