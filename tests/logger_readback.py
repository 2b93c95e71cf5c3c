"""Reading back what the W&B and TensorBoard loggers wrote (tdmpc2core.io.loggers), with their
own readers: W&B's ``wandb leet inspect --json`` (the records of an offline run's ``.wandb``
file) and ``tbparse`` (TensorBoard's event files); compared with the history ``train``
returned. Not a test file: tests/test_multitask_extensions.py's logging run calls it."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np

from tdmpc2core.io import loggers as lg


def loggers(tmp_path) -> dict:
    """kind -> a logger writing under ``tmp_path``, for each kind whose package is installed
    (``pip install -e '.[wandb,tensorboard]'``); in CI (``CI`` set: .ci/run installs both) a
    missing one fails."""
    if os.environ.get("CI"):
        missing = [m for m in ("wandb", "tensorboardX", "tbparse") if importlib.util.find_spec(m) is None]
        assert not missing, f"CI installs the [wandb,tensorboard] extras and tbparse; missing {missing}"
    out = {}
    if importlib.util.find_spec("tbparse") and importlib.util.find_spec("tensorboardX"):
        out["tensorboard"] = lg.make_logger("tensorboard", logdir=tmp_path / "tb", config={"what": "test"})
    if importlib.util.find_spec("wandb"):
        out["wandb"] = lg.make_logger("wandb", project="tdmpc2-test", group="test/pendulum", name="pendulum",
                                      config={"what": "test"}, dir=tmp_path / "wb", mode="offline",
                                      settings={"x_disable_stats": True, "silent": True})
    return out


def wandb_records(run_dir) -> list:
    """The records of an offline W&B run folder, as W&B's own inspector prints them."""
    res = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_dir)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]


def _expected(hist: dict, i: int) -> dict:
    """(name -> {step: value}) of seed ``i`` that the run recorded (its history)."""
    evals = {"Eval/episodic mean reward": hist["eval_return"][:, i],
             "Eval/mean episodic length": hist["eval_lengths"][:, i].mean(axis=-1),
             "Eval/env_frames": hist["eval_env_frames"]}
    out = {k: dict(zip(hist["eval_agent_steps"].tolist(), np.asarray(v, float).tolist())) for k, v in evals.items()}
    for key in ("consistency_loss", "updates", "train_return"):
        out[f"Train/{key}"] = {c["agent_steps"]: float(np.asarray(c[key])[i]) for c in hist["chunks"]}
    out["Train/env_frames"] = {c["agent_steps"]: float(c["env_frames"]) for c in hist["chunks"]}
    return out


def _same(got: dict, want: dict, what: str) -> None:
    for name, by_step in want.items():
        assert sorted(got.get(name, {})) == sorted(by_step), (what, name, got.get(name), by_step)
        np.testing.assert_allclose([got[name][s] for s in sorted(by_step)], [by_step[s] for s in sorted(by_step)],
                                   rtol=1e-6, err_msg=f"{what} {name}")


def check(built: dict, hist: dict, seeds: list) -> None:
    """Every seed's values in each logger's files equal the history's at the same steps."""
    for i, seed in enumerate(seeds):
        want = _expected(hist, i)
        if "tensorboard" in built:
            from tbparse import SummaryReader

            df = SummaryReader(str(built["tensorboard"].logdir / f"seed{seed}")).scalars
            # TensorBoard's tags have no spaces: "Eval/episodic mean reward" is Eval/episodic_mean_reward
            _same({k: dict(zip(g["step"].tolist(), g["value"].tolist())) for k, g in df.groupby("tag")},
                  {k.replace(" ", "_"): v for k, v in want.items()}, f"tensorboard seed {seed}")
        if "wandb" in built:
            records = wandb_records(built["wandb"].run_dirs[seed])
            run = next(r["run"] for r in records if r["type"] == "run")
            assert run["display_name"] == f"pendulum-seed{seed}" and run["run_group"] == "test/pendulum"
            assert run["config"]["update"]["seed"] == seed and run["config"]["update"]["what"] == "test"
            got: dict = {}
            for r in records:
                if r["type"] == "history":
                    item = r["history"]["item"]
                    for k, v in item.items():
                        if not k.startswith("_"):
                            got.setdefault(k, {})[int(item["_step"])] = float(v)  # NaN comes as "NaN"
            _same(got, want, f"wandb seed {seed}")

