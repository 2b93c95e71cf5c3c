"""Traced programs kept across processes, so that a warm run neither traces nor compiles.

JAX's persistent compilation cache (``JAX_COMPILATION_CACHE_DIR``) keeps XLA's executables, but
every process still traces and lowers its programs before it can look one up: the training
chunk of a size-5 agent on an MJX task traces in 12 s on a fast CPU host and 44 s on a TPU v5e
host (benchmarks/results/accelerator/tick_parts.md), which a warm cache cannot save. With
:data:`PROGRAM_CACHE_ENV` set to a folder, a program that its caller describes (a
``fingerprint``: what the traced function closes over) is traced once, exported
(``jax.export``: its StableHLO and the calling convention), and stored there; a later process
whose key matches deserializes it instead of tracing, and its XLA compile then hits JAX's cache
as usual (the executable compiled is the same in both processes: the stored module called
through :meth:`jax.export.Exported.call`).

**Correctness rests on the key.** A stored program is used only when everything that could make
tracing give another program is the same (:func:`program_key`): the program's name and its
caller's fingerprint (the agent's resolved configuration, its env and what else the program
closes over), the arguments' tree structure, shapes, dtypes and weak types, the donated
arguments, every source file of ``tdmpc2core`` (their SHA-256), the name and version of every
installed Python distribution (JAX, jaxlib, Flax, Optax, MuJoCo, MJX, Playground, Brax, gymnax,
...), every JAX configuration value that reaches tracing, the environment variables of JAX, XLA,
MuJoCo and tdmpc2 (``JAX_*``, ``XLA_*``, ``MUJOCO_*``, ``TDMPC2_*``, ``TPU_*``, ``LIBTPU_*``), the
backend and its devices. Programs whose meaning is not in those (user code: extensions, a
callable hyperparameter, a prebuilt env object; an env stepped on the host through a callback,
which ``jax.export`` cannot store) are given no fingerprint by their agent and traced as usual.
The numbers are the ones the direct ``jax.jit`` gives (bit for bit on the CPU:
``tests/test_program_cache.py``).

**Files.** ``<folder>/<name>-<key>.jaxprog``: a pickle of the serialized export and the input
and output tree structures (trust the folder as you trust the compilation cache: the file is
unpickled), written atomically. A file that cannot be read or used is moved to
``<folder>/quarantine/`` with one line on stderr, and the program traced and stored anew.
Nothing is ever deleted otherwise: remove the folder to reclaim its space (a size-5 training
chunk: a few MB).

The workflow's jobs set it beside the JAX cache (``<jax_cache_dir>/programs``); outside the
workflow set it yourself (``export TDMPC2_PROGRAM_CACHE_DIR=~/.cache/tdmpc2-programs``).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
import re
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

#: the environment variable naming the folder (unset or empty: no program cache)
PROGRAM_CACHE_ENV = "TDMPC2_PROGRAM_CACHE_DIR"
#: the format of a stored program (part of the key)
FORMAT = 1
SUFFIX = ".jaxprog"
QUARANTINE = "quarantine"
#: environment variables left out of the key: every other one is in it (a variable a library reads
#: while tracing, e.g. FLAX_*, must not be missed; one too many only costs a cache miss). These say
#: where caches, shells and schedulers live, or size thread pools, none of which a traced program
#: depends on
ENV_IGNORED = (PROGRAM_CACHE_ENV, "JAX_COMPILATION_CACHE_DIR", "JAX_COMPILATION_CACHE_MAX_SIZE",
               "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "PWD", "OLDPWD", "SHLVL", "_", "TERM", "COLUMNS",
               "LINES", "DISPLAY", "HOSTNAME", "PS1", "LS_COLORS", "MAIL", "TMPDIR", "TEMP", "TMP", "PJRT_NPROC",
               "OMP_NUM_THREADS", "PYTEST_CURRENT_TEST", "WINDOWID", "SSH_AUTH_SOCK", "CUDA_VISIBLE_DEVICES")
ENV_IGNORED_PREFIXES = ("SLURM_", "SNAKEMAKE", "PMI_", "OMPI_", "SSH_", "TMUX", "XDG_", "DBUS_", "PYTEST_XDIST",
                        "TERM_", "GPG_", "KITTY_", "VSCODE_")


class TraceLock:
    """A reentrant lock that remembers which threads have held it, so that a caller starting
    threads can wait until one has begun (:meth:`wait_taken_by`) before starting the next, and
    the threads trace in the order they were started (:func:`tdmpc2core.run.compiled.start_compiles`).
    Used as ``with TRACING:``."""

    def __init__(self):
        import weakref

        self._lock = threading.RLock()
        self._held_by = weakref.WeakSet()  # threads that have held it (a new thread is a new object)
        self._changed = threading.Condition()

    def __enter__(self):
        self._lock.acquire()
        with self._changed:
            self._held_by.add(threading.current_thread())
            self._changed.notify_all()
        return self

    def __exit__(self, *exc):
        self._lock.release()
        return False

    def wait_taken_by(self, thread: threading.Thread, timeout: float) -> bool:
        """Wait until ``thread`` has held the lock or has ended, at most ``timeout`` seconds;
        True if it has, False on the timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while thread not in self._held_by and thread.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.05))  # polled too: a thread's end notifies nobody
        return True


#: held while a program is traced or lowered (Python's work; XLA's compile runs outside it): one
#: program at a time per process. Tracing holds Python's lock, so two programs compiled side by
#: side (:meth:`tdmpc2core.run.compiled.Compiled.compile_ahead`) traced together each took longer
#: than both one after the other (on a TPU v5e host the chunk's 18 s became 127 s beside the
#: evaluation's; benchmarks/README.md, "Compiling ahead"); in turn, the first is traced at full
#: speed and its XLA compile overlaps the second's tracing. Reentrant: tracing may nest.
TRACING = TraceLock()
#: packages whose installed files (path, size, modification time) are part of the key, besides
#: their versions: an edited or shadowing copy of one changes what is traced without a new version
PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy", "scipy", "chex", "mujoco", "mujoco_playground", "brax",
            "gymnax", "gymnasium", "ml_collections", "etils", "dm_control")
#: JAX configuration values that never reach a traced program (caches, logs, dumps, tracebacks)
CONFIG_IGNORED = ("compilation_cache", "persistent_cache", "log", "dump", "pprint", "traceback",
                  "explain_cache_misses", "source_url", "debug_info", "captured_constants_report",
                  "captured_constants_warn")


def cache_dir(environ=None) -> Optional[Path]:
    """The program cache folder :data:`PROGRAM_CACHE_ENV` names, or None (unset or empty)."""
    value = (os.environ if environ is None else environ).get(PROGRAM_CACHE_ENV, "").strip()
    return Path(value).expanduser() if value else None


@functools.lru_cache(maxsize=None)
def code_digest() -> str:
    """SHA-256 of every ``*.py`` file of the ``tdmpc2core`` package (relative path and bytes)."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def distributions() -> tuple:
    """``name==version`` of every installed Python distribution, sorted."""
    from importlib import metadata

    seen = set()
    for dist in metadata.distributions():
        name = (dist.metadata.get("Name") or "").lower().replace("_", "-")
        if name:
            seen.add(f"{name}=={dist.version}")
    return tuple(sorted(seen))


def jax_settings() -> dict:
    """The JAX configuration values that reach tracing (their current, context-local values)."""
    import jax

    out = {}
    for name in sorted(jax.config.values):
        if any(part in name for part in CONFIG_IGNORED):
            continue
        try:
            value = getattr(jax.config, name)
        except AttributeError:
            value = jax.config.values[name]
        out[name] = repr(value)
    return out


def environment(environ=None) -> dict:
    """The environment variables in the key: all but :data:`ENV_IGNORED` and those starting
    with :data:`ENV_IGNORED_PREFIXES`."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items())
            if k not in ENV_IGNORED and not k.startswith(ENV_IGNORED_PREFIXES)}


def library_settings() -> dict:
    """Settings of the libraries the programs are built with that live outside JAX's config:
    Flax's (``flax.config``; Flax imported if it is installed, so that the key does not depend on
    what the process imported before)."""
    import importlib
    import importlib.util

    out = {}
    flax = importlib.import_module("flax") if importlib.util.find_spec("flax") is not None else None
    values = getattr(getattr(flax, "config", None), "_values", None)
    if isinstance(values, dict):
        for name in sorted(values):
            try:
                out[f"flax.{name}"] = repr(getattr(flax.config, name))
            except Exception:  # noqa: BLE001 - an option without a readable value
                out[f"flax.{name}"] = repr(values[name])
    return out


@functools.lru_cache(maxsize=None)
def package_files() -> tuple:
    """For each of :data:`PACKAGES` that is importable: its folder and a digest of its files'
    relative paths, sizes and modification times (an edited install, or a copy earlier on
    ``sys.path``, gives another digest). About 50 ms for JAX's few thousand files."""
    import importlib.util

    out = []
    for name in PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        locations = list(getattr(spec, "submodule_search_locations", None) or []) if spec else []
        if spec is not None and not locations and spec.origin:
            locations = [os.path.dirname(spec.origin)]
        h = hashlib.sha256()
        for loc in sorted(locations):
            for folder, dirs, files in os.walk(loc):
                dirs.sort()
                for f in sorted(files):
                    if f.endswith((".pyc", ".pyo")):
                        continue
                    try:
                        st = os.stat(os.path.join(folder, f))
                    except OSError:
                        continue
                    rel = os.path.relpath(os.path.join(folder, f), loc)
                    h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        out.append((name, sorted(locations), h.hexdigest() if locations else None))
    return tuple(out)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _stable(obj, depth: int = 0) -> str:
    """A text of a pytree node's auxiliary data that is the same in every process for the same
    data: NumPy arrays (also wrapped, as MJX wraps them) by shape, dtype and a hash of their
    bytes, objects' memory addresses left out."""
    import numpy as np

    if depth > 20:
        return "..."
    if isinstance(obj, np.ndarray):
        data = np.ascontiguousarray(obj)
        return f"ndarray({obj.shape},{obj.dtype},{hashlib.sha256(data.tobytes()).hexdigest()[:16]})"
    if isinstance(obj, (str, bytes, int, float, bool, type(None), np.generic)):
        return repr(obj)
    if isinstance(obj, type):
        return f"{obj.__module__}.{obj.__qualname__}"
    if isinstance(obj, (tuple, list)):
        return type(obj).__name__ + "(" + ",".join(_stable(x, depth + 1) for x in obj) + ")"
    if isinstance(obj, dict):
        return "{" + ",".join(f"{_stable(k, depth + 1)}:{_stable(v, depth + 1)}" for k, v in obj.items()) + "}"
    fields = {}
    for cls in type(obj).__mro__:
        slots = getattr(cls, "__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if hasattr(obj, slot):
                fields[slot] = getattr(obj, slot)
    if hasattr(obj, "__dict__"):
        fields.update(vars(obj))
    if any(isinstance(v, np.ndarray) for v in fields.values()):
        name = f"{type(obj).__module__}.{type(obj).__qualname__}"
        return name + "{" + ",".join(f"{k}:{_stable(v, depth + 1)}" for k, v in sorted(fields.items())) + "}"
    return _ADDRESS.sub(" at 0x", repr(obj))


def tree_text(treedef) -> str:
    """The tree structure as a text that is the same in every process for the same structure
    (``str(treedef)`` shows the memory address of some nodes' data, e.g. MJX's)."""
    if treedef.num_leaves == 1 and treedef.num_nodes == 1:
        return "*"
    typ, aux = treedef.node_data()
    return (f"{typ.__module__}.{typ.__qualname__}[{_stable(aux)}]"
            f"({','.join(tree_text(c) for c in treedef.children())})")


def _avals(leaves) -> list:
    import jax

    out = []
    for x in leaves:
        aval = jax.typeof(x) if hasattr(jax, "typeof") else jax.core.get_aval(x)
        out.append([list(getattr(aval, "shape", ())), str(getattr(aval, "dtype", type(x).__name__)),
                    bool(getattr(aval, "weak_type", False))])
    return out


def program_key(name: str, fingerprint: dict, args: Sequence, donate_argnums: Sequence[int] = ()) -> str:
    """The hex SHA-256 that names a stored program (module docstring, "Correctness rests on the
    key"). ``fingerprint``: JSON-serialisable (it is dumped with sorted keys; a value JSON cannot
    write raises TypeError)."""
    import jax
    import jaxlib

    leaves, tree = jax.tree_util.tree_flatten(tuple(args))
    devices = jax.devices()
    libraries = library_settings()  # first: importing Flax sets JAX options of its own
    parts = {
        "format": FORMAT, "name": str(name), "fingerprint": fingerprint, "tree": tree_text(tree),
        "avals": _avals(leaves), "donate_argnums": sorted(int(i) for i in donate_argnums),
        "code": code_digest(), "distributions": list(distributions()), "packages": list(package_files()),
        "jax": jax.__version__, "jaxlib": jaxlib.__version__, "config": jax_settings(),
        "libraries": libraries, "environment": environment(), "sys_path": list(sys.path),
        "backend": jax.default_backend(), "devices": [d.device_kind for d in devices], "python": sys.version,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=_json_default).encode()).hexdigest()


def _json_default(obj):
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return {"ndarray": obj.tolist(), "dtype": str(obj.dtype)}
    raise TypeError(f"a program fingerprint holds a {type(obj).__name__}, which the key cannot write")


_SAID_MISSING: list = []  # serialization_missing() said once per process


def _say(line: str) -> None:
    print(f"tdmpc2 program cache: {line}", file=sys.stderr, flush=True)


def _quarantine(path: Path, why: str) -> None:
    try:
        dest = path.parent / QUARANTINE / path.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, dest)
        _say(f"{path} could not be used ({why}); moved to {dest}, the program is traced anew")
    except OSError as exc:
        _say(f"{path} could not be used ({why}) nor moved aside ({exc}); the program is traced anew")


class StoredProgram:
    """A program exported once and compiled from its StableHLO: ``__call__(*args)`` takes and
    returns the trees the traced function does. ``source``: ``"loaded"`` (from the folder),
    ``"stored"`` (traced in this process and written there) or ``"not stored"`` (traced here,
    the write failed). ``seconds``: where the time to make it went (``key``, ``read``,
    ``deserialize`` for a loaded one, ``trace_export`` for one traced here, then ``lower``: the
    stored module called through :meth:`jax.export.Exported.call`, and ``compile``: XLA's, or
    the persistent cache's executable read and loaded)."""

    def __init__(self, exported, in_tree, out_tree, donate_argnums, args, source: str,
                 seconds: Optional[dict] = None, lowered=None, lower_s: float = 0.0):
        self.in_tree, self.out_tree, self.source = in_tree, out_tree, source
        t0 = time.perf_counter()
        if lowered is None:  # else lowered by the caller (:func:`load_or_store`, under its hold of TRACING)
            lowered = self.lower(exported, donate_argnums, args)
        t1 = time.perf_counter()
        self.executable = lowered.compile()
        self.lower_s, self.compile_s = lower_s + t1 - t0, time.perf_counter() - t1
        self.seconds = {**(seconds or {}), "lower": self.lower_s, "compile": self.compile_s}

    @staticmethod
    def lower(exported, donate_argnums, args):
        """The stored module called through :meth:`jax.export.Exported.call`, lowered for
        ``args`` (under :data:`TRACING`; reentrant, so a caller may already hold it)."""
        import jax

        donated = _donated_leaves(args, donate_argnums)
        leaves = jax.tree_util.tree_leaves(tuple(args))
        with TRACING:
            return jax.jit(exported.call, donate_argnums=donated).lower(*abstract(leaves))

    def __call__(self, *args):
        import jax

        leaves, tree = jax.tree_util.tree_flatten(tuple(args))
        if tree != self.in_tree:
            raise TypeError(f"stored program called with arguments of another structure: {tree} (stored: {self.in_tree})")
        return jax.tree_util.tree_unflatten(self.out_tree, self.executable(*leaves))


def abstract(args):
    """``args`` (a tree of arrays) as :class:`jax.ShapeDtypeStruct` leaves: shape, dtype and
    weak type, no placement. A one-device program lowers from these, not from the arrays: a
    committed array (an init program's output: a fresh run) carries a sharding annotation into
    the module that an uncommitted one (a state read from a checkpoint: a resumed run) does not,
    so the two lowered to different modules, and a resumed process missed the JAX compilation
    cache entry its first process wrote and compiled the program again (the training chunk:
    18-37 s on a 2-core CPU). One device only (:class:`tdmpc2core.run.compiled.Compiled` uses the
    program cache without a mesh), where the annotation changes nothing that is computed. Also
    what :meth:`tdmpc2core.run.compiled.Compiled.compile_ahead` takes, so that the arrays may be
    donated or deleted while it compiles in another thread."""
    import jax

    def spec(x):
        aval = jax.typeof(x) if hasattr(jax, "typeof") else jax.core.get_aval(x)
        return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=bool(getattr(aval, "weak_type", False)))

    return jax.tree_util.tree_map(spec, args)


def _donated_leaves(args, donate_argnums) -> tuple:
    import jax

    out, start = [], 0
    for i, a in enumerate(args):
        n = len(jax.tree_util.tree_leaves(a))
        if i in set(donate_argnums):
            out.extend(range(start, start + n))
        start += n
    return tuple(out)


def export_program(jitted: Callable, args: Sequence):
    """(exported, in_tree, out_tree): ``jitted`` traced on ``args`` as one function of their flat
    leaves, exported with ``jax.export``. Raises what tracing or exporting raises."""
    import jax

    leaves, in_tree = jax.tree_util.tree_flatten(tuple(args))
    out_trees = []

    def flat(*xs):
        out = jitted(*jax.tree_util.tree_unflatten(in_tree, xs))
        out_leaves, out_tree = jax.tree_util.tree_flatten(out)
        out_trees.append(out_tree)
        return out_leaves

    exported = jax.export.export(jax.jit(flat))(*leaves)
    return exported, in_tree, out_trees[-1]


@functools.lru_cache(maxsize=None)
def serialization_missing() -> Optional[str]:
    """Why :func:`jax.export` cannot serialize in this environment (its optional dependency
    ``flatbuffers`` is not installed), or None. Said once per process by :func:`load_or_store`,
    which then leaves every program to be traced as usual, before tracing anything for export."""
    import importlib.util

    if importlib.util.find_spec("flatbuffers") is None:
        return ("jax.export needs the package 'flatbuffers' to serialize a program, and it is not installed "
                "(pip install flatbuffers; tdmpc2core's dependencies name it)")
    return None


def load_or_store(folder: Path, name: str, fingerprint: dict, jitted: Callable, args: Sequence,
                  donate_argnums: Sequence[int] = ()) -> tuple:
    """(program, trace_lower_s, compile_s): the :class:`StoredProgram` of ``jitted`` on ``args``
    from ``folder`` when a file of its key is there, else traced, exported and written there.
    Returns (None, seconds spent, 0.0) when the program cannot be exported (e.g. a host callback:
    said in one line) or cannot be serialized here (:func:`serialization_missing`: said once per
    process, nothing traced for export); the caller then compiles it as usual. A file that cannot be used is
    quarantined (module docstring)."""
    import jax

    t0 = time.perf_counter()
    missing = serialization_missing()
    if missing is not None:
        if not _SAID_MISSING:
            _SAID_MISSING.append(True)
            _say(f"off in this process: {missing}; every program is traced and compiled as usual")
        return None, 0.0, 0.0
    try:
        key = program_key(name, fingerprint, args, donate_argnums)
    except TypeError as exc:  # e.g. an object in the fingerprint: not storable, compiled as usual
        _say(f"{name!r} is not kept ({exc}); it is traced and compiled as usual")
        return None, time.perf_counter() - t0, 0.0
    seconds = {"key": time.perf_counter() - t0}
    path = Path(folder) / f"{name}-{key[:40]}{SUFFIX}"
    if path.exists():
        try:
            t1 = time.perf_counter()
            with open(path, "rb") as f:
                stored = pickle.load(f)
            if not isinstance(stored, dict) or stored.get("key") != key or stored.get("format") != FORMAT:
                raise ValueError("its key or format is not this program's")
            if hashlib.sha256(stored["exported"]).hexdigest() != stored.get("exported_sha256"):
                raise ValueError("its program's bytes do not match their SHA-256")
            t2 = time.perf_counter()
            exported = jax.export.deserialize(bytearray(stored["exported"]))
            t3 = time.perf_counter()
            prog = StoredProgram(exported, stored["in_tree"], stored["out_tree"], donate_argnums, args, "loaded",
                                 {**seconds, "read": t2 - t1, "deserialize": t3 - t2})
            return prog, time.perf_counter() - t0 - prog.compile_s, prog.compile_s
        except Exception as exc:  # noqa: BLE001 - a damaged or foreign file: traced anew
            _quarantine(path, f"{type(exc).__name__}: {exc}")
    # traced, exported and lowered in one hold of TRACING: a program compiled ahead beside this one
    # (compiled.start_compiles) traces after this one's lowering, so this one's XLA compile starts
    # first (lowering in a second hold, it waited for the other one's whole tracing)
    with TRACING:
        try:
            t1 = time.perf_counter()
            exported, in_tree, out_tree = export_program(jitted, args)
            blob = exported.serialize()
            seconds["trace_export"] = time.perf_counter() - t1
        except Exception as exc:  # noqa: BLE001 - e.g. a host callback: not storable, compiled as usual
            _say(f"{name!r} cannot be stored ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
                 "it is traced and compiled as usual")
            return None, time.perf_counter() - t0, 0.0
        t2 = time.perf_counter()
        lowered = StoredProgram.lower(exported, donate_argnums, args)
        lower_s = time.perf_counter() - t2
    blob = bytes(blob)
    record = {"format": FORMAT, "key": key, "name": name, "exported": blob,
              "exported_sha256": hashlib.sha256(blob).hexdigest(), "in_tree": in_tree, "out_tree": out_tree,
              "written_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    source = "stored"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            pickle.dump(record, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError as exc:  # a read-only or full folder: the program is used all the same
        source = "not stored"
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        _say(f"{path} could not be written ({exc}); the program is used without being stored")
    prog = StoredProgram(exported, in_tree, out_tree, donate_argnums, args, source, seconds, lowered=lowered,
                         lower_s=lower_s)
    return prog, time.perf_counter() - t0 - prog.compile_s, prog.compile_s


__all__ = ["PROGRAM_CACHE_ENV", "cache_dir", "program_key", "load_or_store", "export_program", "StoredProgram",
           "code_digest", "distributions", "jax_settings", "environment"]
