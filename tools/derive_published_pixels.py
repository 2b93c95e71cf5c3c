"""Derive ``tdmpc2core/resources/published_pixel_curves.csv`` from the official raw results.

    python tools/derive_published_pixels.py [RESULTS_DIR]   # default ../shared/reference/tdmpc2_results

RESULTS_DIR is a copy of the ``results/`` folder of nicklashansen/tdmpc2 (at e9f5932). Its
``tdmpc2-pixels/`` folder holds TD-MPC2 trained from 64x64 RGB renders (``obs=rgb``, the 5M
model) on 12 DMControl tasks, one ``<task>.csv`` per task with ``step,reward,seed`` (3 seeds).
The paper reports no baseline from pixels in that folder, so the table has one method.

The unit of ``step``: environment (simulator) steps = agent steps x 2, the DMControl wrapper's
action repeat, as for the state curves (spec, "learning-curve CSVs"): the files have a point
every 100,000 steps up to 2,000,000, i.e. an evaluation every 50,000 agent steps up to
1,000,000 agent steps.

Per (task, step): the mean of ``reward`` (the episode return) over the seeds that have that
step, its population sd (ddof=0) and that number of seeds. The published name of a curve is
``<task>-pixels`` (``walker-walk-pixels``), so that it never collides with the state curve of the
same task. The raw files are not part of the project; the derived table is.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

from tdmpc2core.report.published import derive_main, table_text

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tdmpc2core" / "resources" / "published_pixel_curves.csv"
ACTION_REPEAT = 2  # the official DMControl wrapper's
SUFFIX = "-pixels"
COLUMNS = ("method", "task", "dmc_task", "env_steps", "agent_steps", "mean_return", "sd_return", "n_seeds")


def derive(results: Path) -> str:
    """The table as CSV text (rows sorted by task, step). Raises ValueError for a folder
    without pixel curves, a file with other columns, or a step that is not a multiple of 2."""
    rows = []
    for path in sorted((results / "tdmpc2-pixels").glob("*.csv")):
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames[:3] != ["step", "reward", "seed"]:
                raise ValueError(f"{path}: expected columns step,reward,seed; got {reader.fieldnames}")
            by_step: dict[int, list[float]] = {}
            for r in reader:
                by_step.setdefault(int(float(r["step"])), []).append(float(r["reward"]))
        for step in sorted(by_step):
            v = by_step[step]
            m = sum(v) / len(v)
            sd = math.sqrt(sum((x - m) ** 2 for x in v) / len(v))
            if step % ACTION_REPEAT:
                raise ValueError(f"{path}: step {step} is not a multiple of the action repeat {ACTION_REPEAT}")
            rows.append(("tdmpc2", path.stem + SUFFIX, path.stem, step, step // ACTION_REPEAT, f"{m:.2f}", f"{sd:.2f}",
                         len(v)))
    if not rows:
        raise ValueError(f"{results}: no tdmpc2-pixels/*.csv files")
    return table_text(COLUMNS, rows)


def main(argv=None) -> None:
    derive_main(derive, OUT, ROOT, argv)


if __name__ == "__main__":
    main()
