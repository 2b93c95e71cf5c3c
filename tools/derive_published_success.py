"""Derive ``tdmpc2core/resources/published_success_curves.csv`` from the official raw results.

    python tools/derive_published_success.py [RESULTS_DIR]   # default ../shared/reference/tdmpc2_results

RESULTS_DIR is a copy of the ``results/`` folder of nicklashansen/tdmpc2 (at e9f5932): per
method (``tdmpc2/``, ``baselines/{sac,dreamerv3,tdmpc}/``) one ``<task>.csv`` per task with
``step,success,seed`` for the Meta-World (``mw-*``, 50) and MyoSuite (``myo-hand-*``, 10) tasks.
The raw files are not part of the project; the derived table is (with this script naming how).

The unit of ``step``: environment (simulator) steps = agent steps x action repeat, as for the
DMControl curves (spec, "learning-curve CSVs"): the official trainer counts agent steps
(``OnlineTrainer._step``, one per wrapper ``step``) and evaluates every 50,000 of them; the
Meta-World wrapper repeats each action twice (``tdmpc2/envs/metaworld.py``), so its files have a
point every 100,000 steps up to 2,000,000 (1,000,000 agent steps); the MyoSuite wrapper does
not repeat (``tdmpc2/envs/myosuite.py``), so its files have a point every 50,000 steps up to
2,000,000 agent steps.

Per (method, task, step): the mean of ``success`` over the seeds that have that step, its
population sd (ddof=0) and that number of seeds; success stays a fraction in [0, 1].
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

from tdmpc2core.report.published import derive_main, table_text

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tdmpc2core" / "resources" / "published_success_curves.csv"
METHODS = {"tdmpc2": "tdmpc2", "tdmpc": "baselines/tdmpc", "sac": "baselines/sac", "dreamerv3": "baselines/dreamerv3"}
#: published name prefix -> (domain, action repeat of the official wrapper)
DOMAINS = (("mw-", "Meta-World", 2), ("myo-hand-", "MyoSuite", 1))
COLUMNS = ("method", "task", "domain", "env_steps", "agent_steps", "mean_success", "sd_success", "n_seeds")


def derive(results: Path) -> str:
    """The table as CSV text (rows sorted by method, task, step)."""
    rows = []
    for method, sub in METHODS.items():
        for path in sorted((results / sub).glob("*.csv")):
            task = path.stem
            dom = next(((d, r) for p, d, r in DOMAINS if task.startswith(p)), None)
            if dom is None:
                continue
            with path.open(newline="") as fh:
                reader = csv.DictReader(fh)
                if reader.fieldnames[:3] != ["step", "success", "seed"]:
                    raise ValueError(f"{path}: expected columns step,success,seed; got {reader.fieldnames}")
                by_step: dict[int, list[float]] = {}
                for r in reader:
                    by_step.setdefault(int(float(r["step"])), []).append(float(r["success"]))
            for step in sorted(by_step):
                v = by_step[step]
                m = sum(v) / len(v)
                sd = math.sqrt(sum((x - m) ** 2 for x in v) / len(v))
                if step % dom[1]:
                    raise ValueError(f"{path}: step {step} is not a multiple of the action repeat {dom[1]}")
                rows.append((method, task, dom[0], step, step // dom[1], f"{m:.4f}", f"{sd:.4f}", len(v)))
    if not rows:
        raise ValueError(f"{results}: no mw-*/myo-hand-* files under {list(METHODS.values())}")
    return table_text(COLUMNS, rows)


def main(argv=None) -> None:
    derive_main(derive, OUT, ROOT, argv)


if __name__ == "__main__":
    main()
