"""Measuring on a borrowed accelerator machine that has no network: carry, run, keep the cache.

The machine this project borrows for accelerator measurements (benchmarks/README.md,
"Accelerator") has Python 3.11 and its own JAX, a local package index without several of our
dependencies, no network, and a ten-minute limit per command; it starts bare each time. Three
subcommands make one measurement one command there:

    python benchmarks/accelerator.py bundle              # here (with network): .accel/site.tar.xz
    python3 benchmarks/accelerator.py run -- python benchmarks/tick_parts.py --out '$OUT/parts.json'
                                                         # there, the repository's root as cwd
    python benchmarks/accelerator.py keep DIR            # here: the returned cache into .accel/cache/

``bundle`` downloads the pinned wheels the machine's index lacks (:data:`WHEELS`, CPython 3.11,
manylinux x86-64), installs them into a staging folder, drops what no measurement imports
(MuJoCo's experimental studio, MJX's test data, Playground's locomotion and manipulation
assets) and packs the rest into ``.accel/site.tar.xz`` (git-ignored; carry ``.accel``).

``run`` (on the machine) unpacks that bundle once per machine into ``/tmp/tdmpc2-accel``,
installs :data:`INDEX_PACKAGES` from the machine's own index (``file:///opt/pypi/simple``)
beside it, puts both after the machine's JAX on ``PYTHONPATH`` (so its JAX stays first),
points JAX's persistent compilation cache at a folder filled from ``.accel/cache/*.tar``, runs
the command with ``$OUT`` expanded under a time limit (``--timeout``, default 540 s, so that
the cache is still packed inside the ten minutes), and packs the cache entries the command
added into ``$OUT/cache-N.tar`` files of at most 15 MiB. ``keep`` copies those files into
``.accel/cache/``, so that the next call loads its programs instead of compiling them.

Nothing here is needed on a machine with network access: there, ``pip install -e .`` and
``JAX_COMPILATION_CACHE_DIR`` do the same.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ACCEL = ROOT / ".accel"
#: wheels the machine's own index lacks (or has at other versions), pinned as pyproject.toml
WHEELS = ("mujoco==3.17.0", "mujoco-mjx==3.17.0", "playground==0.2.0", "brax==0.14.2", "flax==0.12.8",
          "optax==0.2.8", "gymnax==1.0.1", "gymnasium==1.3.0", "mediapy==1.2.7", "trimesh==5.2.0",
          "jaxopt==0.8.5", "cloudpickle==3.1.3", "farama-notifications==0.0.6")
#: what those and tdmpc2core import, from the machine's own index (names only, no dependencies:
#: the machine's JAX, jaxlib, NumPy and SciPy are used as they are)
INDEX_PACKAGES = ("absl-py", "aiofiles", "contourpy", "cycler", "etils", "fonttools", "fsspec", "humanize",
                  "importlib-resources", "kiwisolver", "lxml", "markdown-it-py", "matplotlib", "mdurl",
                  "ml-collections", "msgpack", "nest-asyncio", "orbax-checkpoint", "packaging", "pandas", "pillow",
                  "protobuf", "psutil", "pyarrow", "pygments", "pyparsing", "python-dateutil", "pytz", "pyyaml",
                  "rich", "seaborn", "simplejson", "six", "tensorstore", "tqdm", "treescope", "typing-extensions",
                  "tzdata", "zipp", "filelock", "jsonschema", "jsonschema-specifications", "referencing",
                  "rpds-py", "attrs", "einops", "jaxtyping", "wadler-lindig")  # the last three: tdmpc2-jax
#: folders of the installed wheels that no measurement imports (MB saved in the bundle)
PRUNE = ("mujoco/experimental", "mujoco/mjx/test_data", "mujoco/include", "bin")
#: Playground suites whose assets are dropped (their modules stay importable; DM Control stays)
PRUNE_ASSETS = ("mujoco_playground/_src/locomotion", "mujoco_playground/_src/manipulation")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
SITE = Path("/tmp/tdmpc2-accel")
CACHE_CHUNK = 15 * 2 ** 20


def bundle(args) -> int:
    wheels = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tdmpc2-accel-wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    for req in WHEELS:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.11", "--implementation", "cp", *plat, "-d", str(wheels), req],
                       check=True)
    with tempfile.TemporaryDirectory() as stage:
        files = sorted(str(p) for p in wheels.glob("*.whl"))
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", stage,
                        *files], check=True)
        for rel in PRUNE:
            shutil.rmtree(Path(stage) / rel, ignore_errors=True)
        for rel in PRUNE_ASSETS:
            for p in (Path(stage) / rel).rglob("*"):
                if p.is_file() and p.suffix != ".py":
                    p.unlink()
        for p in Path(stage).rglob("__pycache__"):
            shutil.rmtree(p, ignore_errors=True)
        out = ACCEL / "site.tar.xz"
        tmp = out.with_name(out.name + ".tmp")
        with tarfile.open(tmp, "w:xz") as tar:
            tar.add(stage, arcname="wheels")
        os.replace(tmp, out)
    print(f"wrote {out} ({out.stat().st_size / 2 ** 20:.1f} MiB); carry .accel")
    return 0


def _setup_site() -> None:
    ready = SITE / ".ready"
    if ready.exists():
        print(f"[accelerator] site ready in {SITE} (this machine set it up earlier)", flush=True)
        return
    t = time.perf_counter()
    SITE.mkdir(parents=True, exist_ok=True)
    with tarfile.open(ACCEL / "site.tar.xz") as tar:
        tar.extractall(SITE, filter="data")
    env = dict(os.environ, PIP_CONFIG_FILE="/dev/null")
    base = [sys.executable, "-m", "pip", "install", "--isolated", "-q", "--no-deps", "--no-compile", "--only-binary=:all:",
            "--index-url", "file:///opt/pypi/simple", "--target", str(SITE / "index")]
    res = subprocess.run(base + list(INDEX_PACKAGES), env=env, capture_output=True, text=True)
    if res.returncode != 0:  # one name the index lacks fails the lot: install one by one, say which
        missing = [n for n in INDEX_PACKAGES
                   if subprocess.run(base + ["--upgrade", n], env=env, capture_output=True).returncode != 0]
        print(f"[accelerator] not in the machine's index: {missing}", flush=True)
    ready.write_text("ok\n")
    print(f"[accelerator] site set up in {time.perf_counter() - t:.0f} s", flush=True)


def _joined_cache_tars(folder: Path) -> list:
    """Each returned cache tar (``cache-STAMP.tar.partNN`` files joined in order) as a
    temporary file."""
    stamps = sorted({p.name.split(".tar.part")[0] for p in folder.glob("cache-*.tar.part*")})
    blobs = []
    for stamp in stamps:
        blob = Path(tempfile.mkdtemp()) / f"{stamp}.tar"
        with open(blob, "wb") as f:
            for part in sorted(folder.glob(f"{stamp}.tar.part*")):
                f.write(part.read_bytes())
        blobs.append(blob)
    return blobs


def run(args) -> int:
    out = Path(os.environ.get("OUT", tempfile.mkdtemp(prefix="accel-out-")))
    _setup_site()
    cache = Path(args.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    for blob in _joined_cache_tars(ACCEL / "cache"):
        with tarfile.open(blob) as t:
            t.extractall(cache, filter="data")
        blob.unlink()
    before = {p.name for p in cache.iterdir()}
    print(f"[accelerator] compilation cache {cache}: {len(before)} entries carried in", flush=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (env.get("PYTHONPATH", ""), str(SITE / "wheels"),
                                                    str(SITE / "index"), str(ROOT)) if x)
    env.update(JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0.5",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0", PYTHONUNBUFFERED="1", OUT=str(out))
    cmd = [a.replace("${OUT}", str(out)).replace("$OUT", str(out)) for a in args.command]
    if cmd and cmd[0] == "python":
        cmd[0] = sys.executable
    print(f"[accelerator] running {shlex.join(cmd)} (limit {args.timeout} s)", flush=True)
    t = time.perf_counter()
    # a session of its own, so that the time limit stops the command's whole process group (a
    # `bash -c 'python ...; python ...'` leaves its Python holding the chip if only bash is killed)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
    try:
        rc = proc.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        rc = 124
        print(f"[accelerator] stopped at the {args.timeout} s limit", flush=True)
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
    print(f"[accelerator] exit {rc} after {time.perf_counter() - t:.0f} s", flush=True)
    new = sorted(p for p in cache.iterdir() if p.name not in before and p.is_file())
    stamp = time.strftime("%Y%m%d%H%M%S")
    if new:
        # one tar of the new entries, split into parts of at most 15 MiB (the machine returns
        # files of at most 16 MiB); ``keep`` and the next ``run`` join the parts again
        blob = Path(tempfile.mkdtemp()) / "cache.tar"
        with tarfile.open(blob, "w") as tar:
            for p in new:
                tar.add(p, arcname=p.name)
        n_parts = -(-blob.stat().st_size // CACHE_CHUNK)
        if n_parts > args.max_cache_files:
            print(f"[accelerator] the new cache entries need {n_parts} files of 15 MiB, more than "
                  f"--max-cache-files {args.max_cache_files}: not returned", flush=True)
        else:
            with open(blob, "rb") as f:
                for i in range(n_parts):
                    (out / f"cache-{stamp}.tar.part{i:02d}").write_bytes(f.read(CACHE_CHUNK))
        blob.unlink()
    print(f"[accelerator] {len(new)} new cache entries ({sum(p.stat().st_size for p in new) / 2 ** 20:.1f} MiB) "
          f"in $OUT/cache-{stamp}.tar.part*", flush=True)
    return rc


def keep(args) -> int:
    dest = ACCEL / "cache"
    dest.mkdir(parents=True, exist_ok=True)
    got = sorted(Path(args.dir).glob("cache-*.tar.part*"))
    for p in got:
        shutil.copyfile(p, dest / p.name)
    total = sum(p.stat().st_size for p in dest.glob("cache-*"))
    print(f"kept {len(got)} cache file(s) in {dest} ({total / 2 ** 20:.1f} MiB in all)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("bundle", help="download and pack the wheels the machine lacks (here)")
    r = sub.add_parser("run", help="set up, run a command with the cache, pack the new cache entries (there)")
    r.add_argument("--timeout", type=int, default=540, help="seconds the command may run (default 540)")
    r.add_argument("--cache-dir", default="/tmp/tdmpc2-accel-cache")
    r.add_argument("--max-cache-files", type=int, default=4, help="cache files (15 MiB parts) at most (the machine "
                   "returns 8 files per call)")
    r.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command ($OUT is expanded)")
    k = sub.add_parser("keep", help="copy the returned cache-*.tar.part* files into .accel/cache (here)")
    k.add_argument("dir", help="the folder the call's files came back to")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        if args.command[:1] == ["--"]:
            args.command = args.command[1:]
        if not args.command:
            ap.error("run: give the command after --")
    return {"bundle": bundle, "run": run, "keep": keep}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
