"""What the integrity check of an official ``.pt`` file costs (tdmpc2core.io.integrity).

    python benchmarks/integrity.py                         # a 1 GiB torch.save file in the temp folder
    python benchmarks/integrity.py --mib 4096 --dir /scratch --json out.json

Writes one large tensor with ``torch.save`` (a zip archive: one stored member of that size),
then times, each ``--repeats`` times after one warm-up read (so every pass reads from the page
cache, as the check and ``torch.load`` after it do): ``cat FILE > /dev/null`` (the plain read),
:func:`check_zip_file` (every member's CRC-32, the SHA-256 and size, one pass), a SHA-256-only
pass (``hashlib``, the same block size) and ``torch.load`` of the file. Reports the median
seconds and MB/s (1 MB = 1e6 bytes) of each and the machine's load (``os.getloadavg``) before
and after. The file is removed at the end.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def sha256_only(path, block: int) -> str:
    h = hashlib.sha256()
    buf = bytearray(block)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=1024, help="tensor size in MiB (default 1024)")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the file is written")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    import torch

    from tdmpc2core.io.integrity import BLOCK_BYTES, check_zip_file

    path = os.path.join(args.dir, f"integrity-bench-{os.getpid()}.pt")
    load_before = os.getloadavg()
    try:
        torch.save({"model": {"w": torch.randint(0, 256, (args.mib << 20,), dtype=torch.uint8)}}, path)
        size = os.path.getsize(path)
        subprocess.run(f"cat {path} > /dev/null", shell=True, check=True)  # warm the page cache
        rows = {
            "cat": timed(lambda: subprocess.run(f"cat {path} > /dev/null", shell=True, check=True), args.repeats),
            "check_zip_file": timed(lambda: check_zip_file(path), args.repeats),
            "sha256_only": timed(lambda: sha256_only(path, BLOCK_BYTES), args.repeats),
            "torch_load": timed(lambda: torch.load(path, map_location="cpu", weights_only=True), args.repeats),
        }
        members = check_zip_file(path).members
    finally:
        if os.path.exists(path):
            os.unlink(path)
    out = {"bytes": size, "members": members, "repeats": args.repeats, "block_bytes": BLOCK_BYTES,
           "seconds": rows, "mb_per_s": {k: size / 1e6 / v for k, v in rows.items()},
           "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "cpus": os.cpu_count(),
           "machine": platform.processor() or platform.machine(), "torch": torch.__version__}
    print(f"{size / 1e6:,.0f} MB, {members} zip members; median of {args.repeats}; load average "
          f"{load_before[0]:.2f} before, {out['loadavg_after'][0]:.2f} after")
    for k, v in rows.items():
        print(f"  {k:15s} {v:7.3f} s  {out['mb_per_s'][k]:8,.0f} MB/s  ({v / rows['cat']:.1f}x cat)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
