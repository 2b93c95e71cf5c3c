"""Derive ``tdmpc2core/resources/published_dmc_seed_range.csv`` from the official raw results.

    python tools/derive_published_seed_range.py [RESULTS_DIR]   # default ../shared/reference/tdmpc2_results

RESULTS_DIR is a copy of the ``results/`` folder of nicklashansen/tdmpc2 (at e9f5932). Its
``tdmpc2/`` folder holds one ``<task>.csv`` per task with ``step,reward,seed`` (3 seeds each);
this table covers the DMControl state tasks of ``published_dmc_curves.csv`` (39 tasks), at the
published points up to :data:`MAX_ENV_STEPS` simulator steps: the points the reproduction of
issue 45 is judged at (docs/fidelity.md, "The paper's numbers, reproduced").

The unit of ``step``: simulator (environment) steps = agent steps x 2, the official DMControl
wrapper's action repeat (as for ``published_dmc_curves.csv``).

Per (task, step): the number of seeds that have the step, the mean of their ``reward`` (the
evaluation's mean episode return) and its lowest and highest value over those seeds, each
written to 2 decimals. ``published_dmc_curves.csv`` gives the mean and sd of the same values;
this table adds the range that the reproduction's rule widens. The raw files are not part of
the project; the derived table is (with this script naming how).
"""
from __future__ import annotations

import csv
from pathlib import Path

from tdmpc2core.report.published import derive_main, table_text

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tdmpc2core" / "resources" / "published_dmc_seed_range.csv"
CURVES = ROOT / "tdmpc2core" / "resources" / "published_dmc_curves.csv"
ACTION_REPEAT = 2  # the official DMControl wrapper's
#: the last published point kept (simulator steps): 0, 100,000 and 200,000
MAX_ENV_STEPS = 200_000
COLUMNS = ("method", "task", "env_steps", "agent_steps", "n_seeds", "mean_return", "min_return", "max_return")


def dmc_tasks() -> list[str]:
    """The DMControl state tasks of the packaged published curves (method tdmpc2), sorted."""
    with CURVES.open(newline="") as fh:
        return sorted({r["task"] for r in csv.DictReader(fh) if r["method"] == "tdmpc2"})


def derive(results: Path, max_env_steps: int = MAX_ENV_STEPS) -> str:
    """The table as CSV text (rows sorted by task, step). Raises ValueError for a missing task
    file, a file with other columns, or a step that is not a multiple of 2 (each naming the file)."""
    rows = []
    for task in dmc_tasks():
        path = results / "tdmpc2" / f"{task}.csv"
        if not path.exists():
            raise ValueError(f"{path}: missing (the published curve of {task!r})")
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames[:3] != ["step", "reward", "seed"]:
                raise ValueError(f"{path}: expected columns step,reward,seed; got {reader.fieldnames}")
            by_step: dict[int, list[float]] = {}
            for r in reader:
                by_step.setdefault(int(float(r["step"])), []).append(float(r["reward"]))
        for step in sorted(s for s in by_step if s <= max_env_steps):
            if step % ACTION_REPEAT:
                raise ValueError(f"{path}: step {step} is not a multiple of the action repeat {ACTION_REPEAT}")
            v = by_step[step]
            rows.append(("tdmpc2", task, step, step // ACTION_REPEAT, len(v), f"{sum(v) / len(v):.2f}",
                         f"{min(v):.2f}", f"{max(v):.2f}"))
    return table_text(COLUMNS, rows)


def main(argv=None) -> None:
    derive_main(derive, OUT, ROOT, argv)


if __name__ == "__main__":
    main()
