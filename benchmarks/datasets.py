"""Episode-dataset I/O speed: write and read a dataset of >= 1M rows, MB/s both ways, and
the peak memory of reading against the data's size.

    python benchmarks/datasets.py                      # 1,000,000 agent steps, obs 24, action 6
    python benchmarks/datasets.py --rows 4000000 --obs-dim 67 --action-dim 21 --json out.json

MB/s = the in-memory size of the dataset's arrays (``EpisodeDataset.nbytes``) / seconds.
Reading runs in a fresh process (Linux): its peak resident memory (VmHWM, reset after the
imports and a warm-up read of a small file, which pages in the reader's code) above the
resident memory before the call is the reading cost; the target is at most 2x the data's
size.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def synthetic(n_rows: int, obs_dim: int, action_dim: int, T: int):
    from tdmpc2core.dataset import TaskInfo, from_episodes

    rng = np.random.default_rng(0)
    n_eps = max(1, round(n_rows / (T + 1)))
    eps = []
    for _ in range(n_eps):
        a = rng.uniform(-1, 1, (T + 1, action_dim)).astype(np.float32)
        r = rng.uniform(0, 1, T + 1).astype(np.float32)
        a[0], r[0] = np.nan, np.nan
        eps.append({"obs": rng.standard_normal((T + 1, obs_dim)).astype(np.float32), "action": a, "reward": r,
                    "terminated": np.zeros(T + 1, bool)})
    return from_episodes(eps, TaskInfo("bench", obs_dim, action_dim, T, 2, 0.99, None), {"kind": "benchmark"})


READER = """
import gc, sys, time, json
from tdmpc2core.dataset import load_dataset
import numpy, pyarrow.parquet

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

load_dataset(sys.argv[2])  # warm-up on a small file: pages in the Parquet reader's code
gc.collect()
with open("/proc/self/clear_refs", "w") as fh:  # reset the peak (VmHWM) to the current RSS
    fh.write("5")
base = status("VmRSS")
t0 = time.perf_counter()
ds = load_dataset(sys.argv[1])
dt = time.perf_counter() - t0
peak = status("VmHWM")
print(json.dumps({"seconds": dt, "peak_above_baseline_bytes": peak - base, "nbytes": ds.nbytes}))
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="about this many rows (agent steps + reset rows)")
    p.add_argument("--obs-dim", type=int, default=24)
    p.add_argument("--action-dim", type=int, default=6)
    p.add_argument("--episode-length", type=int, default=500, help="agent steps per episode")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)

    from tdmpc2core.dataset import save_dataset

    ds = synthetic(args.rows, args.obs_dim, args.action_dim, args.episode_length)
    mb = ds.nbytes / 1e6
    res = {"rows": ds.num_rows, "episodes": ds.num_episodes, "obs_dim": args.obs_dim,
           "action_dim": args.action_dim, "data_mb": mb}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.parquet")
        w = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            size = save_dataset(ds, path)
            w.append(time.perf_counter() - t0)
        res.update(file_mb=size / 1e6, write_s=min(w), write_mb_s=mb / min(w))
        small = os.path.join(d, "small.parquet")
        save_dataset(synthetic(2 * (args.episode_length + 1), args.obs_dim, args.action_dim,
                               args.episode_length), small)
        reads = []
        for _ in range(args.repeats):
            out = subprocess.run([sys.executable, "-c", READER, path, small], capture_output=True, text=True,
                                 check=True)
            reads.append(json.loads(out.stdout.strip().splitlines()[-1]))
        best = min(reads, key=lambda r: r["seconds"])
        peak = max(r["peak_above_baseline_bytes"] for r in reads)
        res.update(read_s=best["seconds"], read_mb_s=mb / best["seconds"], read_peak_mb=peak / 1e6,
                   read_peak_over_data=peak / ds.nbytes)
    print(f"{res['rows']:,} rows ({res['episodes']} episodes, obs {args.obs_dim}, action {args.action_dim}): "
          f"{mb:.0f} MB in memory, {res['file_mb']:.0f} MB on disk")
    print(f"write: {res['write_s']:.2f} s = {res['write_mb_s']:.0f} MB/s (checks included)")
    print(f"read:  {res['read_s']:.2f} s = {res['read_mb_s']:.0f} MB/s (checks included); peak memory "
          f"{res['read_peak_mb']:.0f} MB = {res['read_peak_over_data']:.2f} x the data (target <= 2)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2)
    return 0 if res["read_peak_over_data"] <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
