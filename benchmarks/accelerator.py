"""Measuring on a borrowed accelerator machine that has no network: carry, run, keep the cache.

The machine this project borrows for accelerator measurements (benchmarks/README.md,
"Accelerator") has Python 3.11 and its own JAX, a local package index without several of our
dependencies, no network, and a ten-minute limit per command; it starts bare each time. Three
subcommands make one measurement one command there:

    python benchmarks/accelerator.py bundle              # here (with network): .accel/site.tar.xz
    python benchmarks/accelerator.py check               # here: the bundle's dm_control steps the tasks
    python3 benchmarks/accelerator.py run -- python benchmarks/tick_parts.py --out '$OUT/parts.json'
                                                         # there, the repository's root as cwd
    python benchmarks/accelerator.py keep DIR            # here: the returned cache into .accel/cache/

``bundle`` downloads the pinned wheels the machine's index lacks (:data:`WHEELS`, CPython 3.11,
manylinux x86-64), installs them into a staging folder, drops what no measurement imports
(MuJoCo's experimental studio, MJX's test data, Playground's locomotion and manipulation
assets) and packs the rest into ``.accel/site.tar.xz`` (git-ignored; carry ``.accel``).

dm_control, the paper's own simulator (benchmarks/reproduction.py, issue 45), is in the bundle
too, pruned (:func:`prune_dm_control`): its wheel is 56 MB, almost all of it the locomotion
assets and the dog's meshes. What stays is the Python package ``import dm_control.suite`` needs
(``suite``, ``rl``, ``mujoco`` without its test assets, ``utils``, ``_render``) with the suite's
shared model files (``suite/common``) and the model file of each domain of the tasks of
:data:`DMC_CONFIG` (``--dmc-config``); every other domain module stays importable (the suite's
``__init__`` imports them all) and fails only when loaded (its XML is gone). dm-env (pure Python)
comes with it; labmaze (locomotion only), glfw and PyOpenGL (rendering) do not: the state tasks
never render, and the runs set ``MUJOCO_GL=disabled``. ``check`` (here) unpacks the bundle into
a scratch folder and, in a fresh ``python -S`` that sees only the bundle, this repository and
links to what the machine brings itself (its JAX, NumPy, SciPy and the :data:`INDEX_PACKAGES`,
taken from this environment), imports ``dm_control.suite`` and steps each of those tasks
through tdmpc2core's dm_control env (the host callback inside a jitted program), with
``MUJOCO_GL`` unset and with ``disabled``.

``run`` (on the machine) unpacks that bundle once per machine into ``/tmp/tdmpc2-accel``,
installs :data:`INDEX_PACKAGES` from the machine's own index (``file:///opt/pypi/simple``)
beside it, puts both after the machine's JAX on ``PYTHONPATH`` (so its JAX stays first),
points JAX's persistent compilation cache at a folder filled from ``.accel/cache/*.tar``, runs
the command with ``$OUT`` expanded under a time limit (``--timeout``, default 540 s, so that
the cache is still packed inside the ten minutes), and packs the cache entries the command
added into ``$OUT/cache-N.tar`` files of at most 15 MiB. ``keep`` copies those files into
``.accel/cache/``, so that the next call loads its programs instead of compiling them.

``bundle --workflow`` also packs Snakemake and the part of its dependencies the machine's index
lacks (``.accel/workflow.tar.xz``); ``run --workflow`` sets it up there, so that
``python -m snakemake`` runs the pipeline on the machine (benchmarks/results/accelerator/demo.md).

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
          "jaxopt==0.8.5", "cloudpickle==3.1.3", "farama-notifications==0.0.6",
          # jax.export serialization (the program cache): the machine's JAX comes without it
          "flatbuffers==25.12.19",
          # dm_control (pruned: DMC_KEEP) and what its suite imports beyond the machine's packages
          "dm-control==1.0.50", "dm-env==1.6")
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
#: the configuration whose tasks' dm_control model files the bundle keeps
DMC_CONFIG = "workflow/configs/reproduction-dmc.yaml"
#: the parts of the dm_control package kept (relative to dm_control/); the rest is dropped
DMC_KEEP = ("__init__.py", "_render", "mujoco", "rl", "suite", "utils")
#: inside those, dropped: MuJoCo's test assets, the dog's meshes, the suite's picture, tests
DMC_DROP = ("mujoco/testing", "suite/dog_assets", "suite/all_domains.png", "suite/demos", "suite/explore.py")
#: what the machine has itself (its own JAX stack), linked from this environment by ``check``
MACHINE_PACKAGES = ("jax", "jaxlib", "numpy", "scipy", "ml-dtypes", "opt-einsum")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
#: the workflow's own packages the machine's index has (``run --workflow`` installs them there);
#: the rest of Snakemake's dependency closure travels in ``.accel/workflow.tar.xz``
WORKFLOW_INDEX = ("configargparse", "docutils", "gitpython", "humanfriendly", "jinja2", "nbformat", "psutil",
                  "pulp", "smart-open", "tabulate")
#: imported at every Python start of ``run --workflow`` (``sitecustomize``): that machine's
#: sandbox gives ``/proc/PID/io`` without ``rchar``, on which psutil's ``io_counters`` raises
#: ValueError and Snakemake's per-job ``benchmark:`` sampling fails the job; the I/O counters read
#: zero there instead (the benchmark's wall time and memory are unaffected)
PSUTIL_SHIM = """\
try:
    import collections, psutil
    _pio = collections.namedtuple("pio", "read_count write_count read_bytes write_bytes read_chars write_chars")
    _io_counters = psutil.Process.io_counters

    def _io_or_zeros(self):
        try:
            return _io_counters(self)
        except ValueError:
            return _pio(0, 0, 0, 0, 0, 0)

    psutil.Process.io_counters = _io_or_zeros
except ImportError:
    pass
"""
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
        kept = prune_dm_control(Path(stage) / "dm_control", dmc_domains(args.dmc_config))
        print(f"dm_control: kept the model files of {kept}")
        for p in Path(stage).rglob("__pycache__"):
            shutil.rmtree(p, ignore_errors=True)
        out = ACCEL / "site.tar.xz"
        ACCEL.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        with tarfile.open(tmp, "w:xz") as tar:
            tar.add(stage, arcname="wheels")
        os.replace(tmp, out)
    print(f"wrote {out} ({out.stat().st_size / 2 ** 20:.1f} MiB); carry .accel")
    if args.workflow:
        bundle_workflow(plat)
    return 0


def workflow_closure(top: str = "snakemake") -> dict:
    """``{name: version}``: ``top`` and every package it needs, transitively, as installed in this
    environment (``pip install -e '.[workflow]'``), less :data:`WORKFLOW_INDEX` and
    :data:`INDEX_PACKAGES` (the machine's index has those).

    Raises SystemExit naming ``top`` when it is not installed here."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    def norm(n):
        return n.lower().replace("_", "-").replace(".", "-")

    skip = {norm(n) for n in WORKFLOW_INDEX + INDEX_PACKAGES}
    seen, todo = {}, [top]
    while todo:
        name = norm(todo.pop())
        if name in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            if name == top:
                raise SystemExit(f"error: {top} is not installed here: pip install -e '.[workflow]' first")
            continue
        seen[name] = dist.version
        for req in dist.requires or []:
            r = Requirement(req)
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(r.name)
    return {n: v for n, v in sorted(seen.items()) if n not in skip}


def bundle_workflow(plat: list) -> None:
    """Pack Snakemake and the part of its dependency closure the machine's index lacks
    (:func:`workflow_closure`) into ``.accel/workflow.tar.xz``: wheels for CPython 3.11 on
    manylinux x86-64, or the source distribution of a pure-Python package that has no wheel
    (connection-pool), installed here into a staging folder with :data:`PSUTIL_SHIM` as its
    ``sitecustomize``."""
    pins = [f"{n}=={v}" for n, v in workflow_closure().items()]
    with tempfile.TemporaryDirectory() as wheels, tempfile.TemporaryDirectory() as stage:
        sdists = []
        for req in pins:
            res = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                                  "--python-version", "3.11", "--implementation", "cp", *plat, "-d", wheels, req],
                                 capture_output=True, text=True)
            if res.returncode:
                sdists.append(req)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", stage,
                        *sorted(str(p) for p in Path(wheels).glob("*.whl")), *sdists], check=True)
        (Path(stage) / "sitecustomize.py").write_text(PSUTIL_SHIM)
        for p in Path(stage).rglob("__pycache__"):
            shutil.rmtree(p, ignore_errors=True)
        out = ACCEL / "workflow.tar.xz"
        tmp = out.with_name(out.name + ".tmp")
        with tarfile.open(tmp, "w:xz") as tar:
            tar.add(stage, arcname="workflow")
        os.replace(tmp, out)
    print(f"wrote {out} ({out.stat().st_size / 2 ** 20:.1f} MiB): Snakemake and {len(pins) - 1} packages "
          f"(from source: {sdists}); `run --workflow` installs {list(WORKFLOW_INDEX)} from the machine's index")


def dmc_domains(config: str = DMC_CONFIG) -> list[str]:
    """The dm_control domains (``ball_in_cup``, ``cheetah``, ...) of the ``dmc:`` tasks of the
    workflow configuration ``config`` (its selected protocol's tasks, config.yaml merged under it).

    Raises ValueError naming a task that is not one of dm_control's own suite (a custom task of
    the paper needs its own files, which the bundle does not keep)."""
    sys.path.insert(0, str(ROOT))
    from tdmpc2core.envs.dmcontrol_ids import PREFIX, SUITE_TASKS
    from tdmpc2core.pipeline.config import load_workflow_config, resolve

    P = resolve(load_workflow_config([config], root=ROOT))
    domains = set()
    for task, spec in P.tasks.items():
        env_id = str(spec["env_id"])
        if not env_id.startswith(PREFIX):
            continue
        name = env_id[len(PREFIX):]
        if name not in SUITE_TASKS:
            raise ValueError(f"{config}: task {task!r} ({env_id}) is not a task of dm_control's suite; the bundle "
                             "keeps the suite's model files only")
        domains.add(SUITE_TASKS[name][0])
    return sorted(domains)


def prune_dm_control(pkg: Path, domains) -> list[str]:
    """Prune the installed dm_control package ``pkg`` in place to what ``import dm_control.suite``
    and the suite tasks of ``domains`` need: the parts of :data:`DMC_KEEP` less :data:`DMC_DROP`,
    no tests, and of the suite's model files ``common/`` and ``<domain>.xml`` of ``domains``.
    Returns the domains whose model file was kept. Raises FileNotFoundError for a domain without
    one (a misspelt name)."""
    for p in pkg.iterdir():
        if p.name not in DMC_KEEP and p.name != "__pycache__":
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    for rel in DMC_DROP:
        p = pkg / rel
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    for p in list(pkg.rglob("*_test.py")):
        p.unlink()
    keep = {f"{d}.xml" for d in domains}
    missing = sorted(k for k in keep if not (pkg / "suite" / k).exists())
    if missing:
        raise FileNotFoundError(f"dm_control suite has no model file(s) {missing}")
    for p in (pkg / "suite").glob("*.xml"):
        if p.name not in keep:
            p.unlink()
    return sorted(domains)


def _machine_site(dest: Path, names) -> None:
    """Links in ``dest`` to the top-level modules of the installed distributions ``names`` (from
    this environment): what the accelerator machine brings itself, for :func:`check`."""
    from importlib import metadata

    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:  # not installed here: nothing here needs it either
            print(f"[check] {name} is not installed here: not linked")
            continue
        tops = {str(f).split("/")[0] for f in dist.files or () if not str(f).startswith(("..", "/"))}
        for top in tops:
            if top.endswith((".dist-info", ".data")) or top == "__pycache__":
                continue
            src = Path(dist.locate_file(top))
            if src.exists() and not (dest / top).exists():
                (dest / top).symlink_to(src)


PROBE = """
import os, sys, warnings
import jax, jax.numpy as jnp
import dm_control.suite
from tdmpc2core.envs import make_env
assert not any(p.endswith("site-packages") for p in sys.path), sys.path
for t in sys.argv[1:]:
    env = make_env("dmc:" + t)
    st, obs = jax.jit(env.reset)(jax.random.key(0))
    step = jax.jit(env.step)
    total = 0.0
    for i in range(5):
        st, out = step(st, jnp.full((env.spec.action_dim,), 0.3, jnp.float32), jax.random.key(i))
        total += float(out.reward)
    print(f"{t}: obs {obs.shape}, 5 agent steps, reward {total:.4f}, MUJOCO_GL={os.environ.get('MUJOCO_GL')}")
print("dm_control from", dm_control.__file__)
"""


def check(args) -> int:
    """Unpack the bundle into a scratch folder and step each task of ``--dmc-config`` there in a
    Python that sees only the bundle, the machine's own packages (linked from this environment)
    and this repository, with MUJOCO_GL unset and ``disabled``. Exit 0 when both pass."""
    tasks = []
    sys.path.insert(0, str(ROOT))
    from tdmpc2core.envs.dmcontrol_ids import PREFIX
    from tdmpc2core.pipeline.config import load_workflow_config, resolve

    P = resolve(load_workflow_config([args.dmc_config], root=ROOT))
    tasks = [str(s["env_id"])[len(PREFIX):] for s in P.tasks.values() if str(s["env_id"]).startswith(PREFIX)]
    bundle = ACCEL / "site.tar.xz"
    if not bundle.exists():
        raise SystemExit(f"error: {bundle} does not exist: run `python benchmarks/accelerator.py bundle` first")
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(bundle) as tar:
            tar.extractall(tmp, filter="data")
        machine = Path(tmp) / "machine"
        _machine_site(machine, MACHINE_PACKAGES + INDEX_PACKAGES)
        path = os.pathsep.join((str(Path(tmp) / "wheels"), str(machine), str(ROOT)))
        rc = 0
        for gl in (None, "disabled"):
            env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYTHONPATH")}
            env.update(PYTHONPATH=path, JAX_PLATFORMS="cpu", **({"MUJOCO_GL": gl} if gl else {}))
            res = subprocess.run([sys.executable, "-S", "-c", PROBE, *tasks], env=env, cwd=tmp, capture_output=True,
                                 text=True, timeout=600)
            print(f"--- MUJOCO_GL={gl or 'unset'}: exit {res.returncode}")
            print(res.stdout + (res.stderr[-3000:] if res.returncode else ""))
            rc = rc or res.returncode
    return rc


def _from_index(target: Path, args) -> subprocess.CompletedProcess:
    """``pip install`` of ``args`` (names, options) from the machine's own index into ``target``,
    no dependencies (the names are the whole list), wheels only."""
    return subprocess.run([sys.executable, "-m", "pip", "install", "--isolated", "-q", "--no-deps", "--no-compile",
                           "--only-binary=:all:", "--index-url", "file:///opt/pypi/simple", "--target", str(target),
                           *args], env=dict(os.environ, PIP_CONFIG_FILE="/dev/null"), capture_output=True, text=True)


def _setup_site() -> None:
    ready = SITE / ".ready"
    if ready.exists():
        print(f"[accelerator] site ready in {SITE} (this machine set it up earlier)", flush=True)
        return
    t = time.perf_counter()
    SITE.mkdir(parents=True, exist_ok=True)
    with tarfile.open(ACCEL / "site.tar.xz") as tar:
        tar.extractall(SITE, filter="data")
    res = _from_index(SITE / "index", INDEX_PACKAGES)
    if res.returncode != 0:  # one name the index lacks fails the lot: install one by one, say which
        missing = [n for n in INDEX_PACKAGES if _from_index(SITE / "index", ["--upgrade", n]).returncode != 0]
        print(f"[accelerator] not in the machine's index: {missing}", flush=True)
    ready.write_text("ok\n")
    print(f"[accelerator] site set up in {time.perf_counter() - t:.0f} s", flush=True)


def _setup_workflow() -> None:
    """``run --workflow``: unpack ``.accel/workflow.tar.xz`` (Snakemake, :func:`bundle_workflow`)
    into ``/tmp/tdmpc2-accel/workflow`` and install :data:`WORKFLOW_INDEX` from the machine's
    index beside it, once per machine."""
    ready = SITE / ".workflow-ready"
    if ready.exists():
        return
    bundle = ACCEL / "workflow.tar.xz"
    if not bundle.exists():
        raise SystemExit(f"error: {bundle} is not here: run `python benchmarks/accelerator.py bundle --workflow` "
                         "and carry .accel")
    with tarfile.open(bundle) as tar:
        tar.extractall(SITE, filter="data")
    res = _from_index(SITE / "workflow-index", WORKFLOW_INDEX)
    if res.returncode != 0:
        raise SystemExit(f"error: installing {list(WORKFLOW_INDEX)} from the machine's index failed: "
                         f"{res.stderr.strip().splitlines()[-1:]}")
    ready.write_text("ok\n")
    print("[accelerator] Snakemake set up", flush=True)


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
    if args.workflow:
        _setup_workflow()
    cache = Path(args.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    for blob in _joined_cache_tars(ACCEL / "cache"):
        with tarfile.open(blob) as t:
            t.extractall(cache, filter="data")
        blob.unlink()
    before = {p.name for p in cache.iterdir()}
    print(f"[accelerator] compilation cache {cache}: {len(before)} entries carried in", flush=True)
    env = dict(os.environ)
    extra = (str(SITE / "workflow"), str(SITE / "workflow-index")) if args.workflow else ()
    env["PYTHONPATH"] = os.pathsep.join(x for x in (env.get("PYTHONPATH", ""), str(SITE / "wheels"),
                                                    str(SITE / "index"), str(ROOT), *extra) if x)
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
    b = sub.add_parser("bundle", help="download and pack the wheels the machine lacks (here)")
    b.add_argument("--workflow", action="store_true", help="also pack Snakemake and what it needs that the "
                   "machine's index lacks (.accel/workflow.tar.xz), for `run --workflow`")
    b.add_argument("--dmc-config", default=DMC_CONFIG, help="the configuration whose dm_control tasks' model "
                   f"files are kept (default {DMC_CONFIG})")
    ch = sub.add_parser("check", help="step the --dmc-config's dm_control tasks with the bundle alone (here)")
    ch.add_argument("--dmc-config", default=DMC_CONFIG, help=f"default {DMC_CONFIG}")
    r = sub.add_parser("run", help="set up, run a command with the cache, pack the new cache entries (there)")
    r.add_argument("--timeout", type=int, default=540, help="seconds the command may run (default 540)")
    r.add_argument("--workflow", action="store_true", help="Snakemake on the machine (python -m snakemake): "
                   "needs `bundle --workflow`")
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
    return {"bundle": bundle, "check": check, "run": run, "keep": keep}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
