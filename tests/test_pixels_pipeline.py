"""Pixels in the pipeline (issue 29): the published pixel curves, the protocol configurations
and the refusals of pixel settings the library cannot run. Nothing here trains."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from tdmpc2core.pipeline.config import ConfigError, resolve
from tdmpc2core.report import published as P

ROOT = Path(__file__).resolve().parents[1]
PIXELS = ROOT / "workflow/configs/paper-dmc-pixels.yaml"
SMOKE = ROOT / "workflow/configs/dmcontrol-pixels-smoke.yaml"


def over_demo(text: str) -> dict:
    """config.yaml with a --configfile's YAML merged over it key by key, as Snakemake does."""
    def update(base, over):
        for k, v in over.items():
            base[k] = update(base.get(k, {}), v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
        return base
    return update(yaml.safe_load((ROOT / "config.yaml").read_text()), yaml.safe_load(text))


def test_published_pixel_curves_units_names_and_domain():
    """12 tasks, TD-MPC2 only, env steps = 2 x agent steps up to 1M agent steps, their own domain."""
    names = P.pixel_tasks()
    assert len(names) == 12 and all(n.endswith(P.PIXEL_SUFFIX) for n in names)
    assert set(names) <= set(P.published_tasks())
    assert P.domain_of("walker-walk-pixels") == "DMControl pixels" and P.score_kind("walker-walk-pixels") == "return"
    assert P.domain_of("walker-walk") == "DMControl"  # the state curve of the same task is apart
    c = P.score_curve("walker-walk-pixels")
    assert (c["env_steps"] == 2 * c["agent_steps"]).all() and c["agent_steps"].max() == 1_000_000
    assert len(c) == 21 and (c["n_seeds"] == 3).all()
    assert c["mean"].iloc[-1] == pytest.approx(949.17) and c["sd"].iloc[-1] == pytest.approx(8.87)
    assert c["mean"].iloc[-1] != pytest.approx(P.score_curve("walker-walk")["mean"].iloc[-1])
    assert P.score_curve("walker-walk-pixels", "sac").empty
    with pytest.raises(KeyError, match="unknown published method"):
        P.score_curve("walker-walk-pixels", "dreamer")
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    enum = schema["$defs"]["task"]["properties"]["published"]["enum"]
    assert set(enum) - {None} == set(P.published_tasks())
    from tdmpc2core.pipeline import config as C
    assert C.PIXEL_SUFFIX == P.PIXEL_SUFFIX


def test_published_pixel_resource_is_derived_from_the_official_files():
    """The packaged table is what tools/derive_published_pixels.py computes from the raw files
    (checked where they are: ../shared/reference/tdmpc2_results)."""
    raw = ROOT.parent / "shared" / "reference" / "tdmpc2_results"
    if not (raw / "tdmpc2-pixels" / "walker-walk.csv").exists():
        pytest.skip(f"the raw official results are not at {raw}")
    spec = importlib.util.spec_from_file_location("derive_pixels", ROOT / "tools" / "derive_published_pixels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.derive(raw) == (ROOT / "tdmpc2core" / "resources" / "published_pixel_curves.csv").read_text()


def test_pixel_protocols_resolve():
    """paper-dmc-pixels.yaml: the 12 published pixel tasks on dm_control, rgb, the 5M model,
    1M agent steps, one seed per job; the smoke config resolves too."""
    p = resolve(over_demo(PIXELS.read_text()))
    assert len(p.tasks) == 12 and p.seed_groups == [(0,), (1,), (2,)]
    assert {t["published"] for t in p.tasks.values()} == set(P.pixel_tasks())
    for name, t in p.tasks.items():
        assert t["env_id"] == f"dmc:{name}" and t["agent"] == {"obs": "rgb", "model_size": 5}
        assert t["agent_steps"] == 1_000_000 and t["eval_every"] == 50_000 and t["action_repeat"] == 2
        final = P.score_curve(t["published"]).iloc[-1]
        assert t["expected"]["mean_min"] <= final["mean"] <= t["expected"]["mean_max"]
    s = resolve(over_demo(SMOKE.read_text()))
    assert s.tasks["reacher-easy"]["agent"]["obs"] == "rgb"


def _pixels_with(**task) -> dict:
    config = over_demo(PIXELS.read_text())
    config["protocols"]["paper-pixels"]["tasks"] = {"walker-walk": {
        "env_id": "dmc:walker-walk", "published": "walker-walk-pixels", **task}}
    return config


@pytest.mark.parametrize("task, message", [
    ({"env_id": "WalkerWalk"}, "rgb observations are rendered by dm_control only (as the official code); "
                               "env_id 'WalkerWalk' is a playground task"),
    ({"published": "walker-walk"}, "'walker-walk' is a curve from states, but the task learns from pixels "
                                   "(agent.obs: rgb); compare it with 'walker-walk-pixels'"),
    ({"agent": {"obs": "state"}}, "'walker-walk-pixels' is a curve from pixels, but the task learns from states"),
    ({"agent": {"latent_dim": 128}}, "latent"),
])
def test_pixel_settings_the_library_cannot_run_are_refused_when_the_workflow_loads(task, message):
    with pytest.raises(ConfigError) as e:
        resolve(_pixels_with(**task))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_pool_of_pixel_tasks_is_refused():
    config = _pixels_with()
    config["protocols"]["paper-pixels"]["pools"] = {"px": ["walker-walk"]}
    with pytest.raises(ConfigError, match=r"pool 'px' .* names task\(s\) \['walker-walk'\] that learn from pixels"):
        resolve(config)


def test_report_tables_put_pixel_runs_beside_the_pixel_curves(tmp_path):
    """A pixel task and a state task of the same dm_control task: each compared with its own
    published curve, aggregated in its own domain; the markdown and HTML tables name the domain."""
    import numpy as np

    from tdmpc2core.report import analysis as A
    from tdmpc2core.report import html as H
    from tdmpc2core.stages import outputs as O
    from tdmpc2core.stages import tables as TB

    paths = []
    for task, rets in (("walker-px", (500.0, 600.0)), ("walker", (900.0, 950.0))):
        for seed, r in enumerate(rets):
            hist = {"eval_agent_steps": [0, 50_000], "eval_env_frames": [0, 100_000],
                    "eval_returns": np.array([[[0.0, 0.0]], [[r, r]]]), "eval_lengths": np.full((2, 1, 2), 500)}
            path = tmp_path / task / f"seed{seed}" / "eval.parquet"
            path.parent.mkdir(parents=True)
            O.write_table(path, "single_eval", O.single_eval_columns(task, seed, 0, hist, 2))
            paths.append(path)
    tasks = {"walker-px": {"published": "walker-walk-pixels", "action_repeat": 2},
             "walker": {"published": "walker-walk", "action_repeat": 2}}
    scores = A.seed_scores(A.read_evals(paths))
    single = A.single_task_table(scores, tasks, steps=(50_000,))
    px = single[(single["task"] == "walker-px") & (single["agent_steps"] == 50_000)].iloc[0]
    st = single[(single["task"] == "walker") & (single["agent_steps"] == 50_000)].iloc[0]
    pub_px = P.score_curve("walker-walk-pixels").set_index("agent_steps").loc[50_000]
    pub_st = P.score_curve("walker-walk").set_index("agent_steps").loc[50_000]
    assert px["mean"] == 550.0 and px["tdmpc2_mean"] == pytest.approx(pub_px["mean"])
    assert st["tdmpc2_mean"] == pytest.approx(pub_st["mean"]) and pub_px["mean"] != pytest.approx(pub_st["mean"])
    assert np.isnan(px["sac_mean"])  # no published baseline from pixels
    agg = A.aggregate_table(scores, tasks, steps=(50_000,), reps=50)
    row = agg[(agg["domain"] == "DMControl pixels") & (agg["step"] == "50000")].iloc[0]
    assert row["tasks"] == "walker-px" and row["mean_return"] == 550.0
    assert row["published_mean_return"] == pytest.approx(pub_px["mean"])
    assert set(agg["domain"]) == {"DMControl", "DMControl pixels"}
    assert "| DMControl from pixels |" in TB._aggregate_md(agg, "label")
    assert "<td>DMControl from pixels</td>" in H.aggregate_section(agg)


def test_pixel_tasks_train_in_rules_of_their_own_without_an_episode_dataset():
    """A protocol with a state task and a pixel task: per seed group one training rule for each
    kind, the pixel one without episodes.parquet, and no dataset of the pixel task anywhere."""
    from tdmpc2core.pipeline import stops
    from tdmpc2core.pipeline.config import seed_tag

    config = _pixels_with()
    config["protocols"]["paper-pixels"]["tasks"]["walker-state"] = {
        "env_id": "dmc:walker-walk", "published": "walker-walk", "agent": {"obs": "state"}}
    p = resolve(config)
    assert p.pixel_tasks == ["walker-walk"] and p.dataset_tasks == ["walker-state"]
    rules = p.train_rules()
    assert [(n, px) for n, _, px in rules][:2] == [("train_single_seeds_0", False), ("train_single_pixels_seeds_0", True)]
    assert len(rules) == 6 and set(p.long_runs()) == {n for n, _, _ in rules}
    assert p.task_pattern(True) == "walker\\-walk" and p.task_pattern(False) == "walker\\-state"
    px, st = p.group_outputs((0,), True), p.group_outputs((0,), False)
    assert not any(f.endswith("episodes.parquet") for f in px) and sum(f.endswith("episodes.parquet") for f in st) == 1
    assert all("walker-state" in f for f in p.all_run_files("episodes.parquet"))
    assert len(p.all_run_files("run.json")) == 6
    records = p.run_records()
    assert records["train_single_pixels_seeds_1"] == ("train_single", ["results/single/walker-walk/seed1/run.json"])
    cmd = ["tdmpc2", "train-single", "--task", "walker-walk", "--seeds", "1"]
    assert stops.job_name(cmd, seed_tag, p.pixel_tasks) == "train_single_pixels_seeds_1 (task walker-walk)"
    # a protocol without a pixel task keeps its rule names
    assert [n for n, _, _ in resolve(over_demo("seeds: [0]")).train_rules()] == ["train_single_seeds_0"]


@pytest.mark.parametrize("plan", ["paper-dmc-pixels", "config"])
def test_the_report_command_of_the_recorded_plans_parses(plan):
    """The report rule's command in the recorded dry-run plan parses with the report stage's
    arguments: a protocol of pixel tasks only has no dataset summary, and its `--datasets` is
    then given no value (a fresh user's pixel smoke run failed there)."""
    import argparse
    import shlex

    from tdmpc2core.stages import report

    line = next(ln for ln in (ROOT / "tests/fixtures/dryrun" / f"{plan}.txt").read_text().splitlines()
                if "tdmpc2core.cli report " in ln)
    argv = shlex.split(line.split("tdmpc2core.cli report ", 1)[1].split(" > ", 1)[0])
    parser = argparse.ArgumentParser(exit_on_error=False)
    report.add_arguments(parser)
    args = parser.parse_args(argv)
    assert args.out == "results/report.html"
    assert (args.datasets is None) == (plan == "paper-dmc-pixels")
