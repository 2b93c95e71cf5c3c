"""The JAX persistent compilation cache of a ``tdmpc2`` job: a damaged entry repaired by one
recompile, and the CPU loader's SIGILL line explained once.

The workflow turns the cache on for the jobs that compile (train-single, train-multi,
evaluate-official) by exporting ``JAX_COMPILATION_CACHE_DIR`` in the rule's shell, with a size
limit that turns on JAX's entry lock (docs/pipeline.md, "JAX_COMPILATION_CACHE_DIR");
:func:`tdmpc2core.cli.main` calls :func:`install` when that variable is set, before the stage
runs. Nothing here changes which programs are cached or what they compute.

**A damaged entry.** JAX 0.10 loads an entry by reading its file ``<cache>/<key>-cache``,
decompressing it and deserializing the executable; when that fails it warns (``Error reading
persistent compilation cache entry for 'jit_f': error: Error -5 while decompressing data:
incomplete or truncated stream``), compiles, and writes the result, except that its cache
never overwrites an entry whose file exists. So a truncated file (a job killed while writing
it without the lock, a full disk) used to stay, and every later job warned and compiled again.
The warning names the program, not the file, so a hook on the warning cannot tell which file
to remove; checking every entry when a job starts would read the whole cache (up to 100 GiB)
and could take an entry another job is still writing for a damaged one. :func:`install`
therefore wraps the one function JAX's compiler calls to load an entry,
``jax._src.compilation_cache.get_executable_and_time(cache_key, ...)``: when it raises
(except for an ``OSError``, a lock timeout included, which says nothing about the entry's
bytes) the entry's file is moved to ``<cache>/quarantine/`` (one line on stderr names it and
the error) and the error goes on to JAX, which warns and compiles as before; its write then
finds no file and stores the fresh entry, which the next job loads. The wrapped function is
JAX's private one: where it is missing (another JAX), :func:`install` says so in one line and
leaves the cache as JAX has it. ``tests/test_rough_edges.py`` pins this on the installed JAX.

**The SIGILL line.** On a CPU, jaxlib's loader logs from C++, for programs loaded from the
cache, lines like ``E... cpu_aot_loader.cc:195] Loading XLA:CPU AOT result. Target machine
feature +prefer-no-scatter is not supported ... could lead to execution errors such as SIGILL``,
also on the machine that wrote the entry. They go to the process's stderr from C++, not
through Python's logging, so no logging filter can drop them (and silencing C++ logs as a
whole would hide the errors that matter): they are kept. At the first program the process
loads from the cache on the CPU backend (JAX's monitoring event
``/jax/compilation_cache/cache_hits``), :data:`EXPLANATION` is printed once, one line.
"""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Callable, Optional

#: the environment variable the workflow sets to turn the cache on
CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
#: the folder, inside the cache, that damaged entries are moved to
QUARANTINE = "quarantine"
#: printed once per process, at the first program loaded from the cache on a CPU
EXPLANATION = (
    "tdmpc2: programs are loaded from the JAX compilation cache {cache}; jaxlib may log "
    "'cpu_aot_loader ... could lead to execution errors such as SIGILL' for them. That is harmless "
    "when the cache was written on a CPU of this model; it "
    "matters only when one cache folder is shared by machines whose CPUs have different instruction "
    "sets: give each CPU model its own jax_cache_dir (docs/pipeline.md, JAX_COMPILATION_CACHE_DIR).")
_HIT_EVENT = "/jax/compilation_cache/cache_hits"

_STATE = {"installed": False, "hooked": False, "explained": False}


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _cache_dir() -> Optional[Path]:
    """The cache folder JAX uses now, or None (none set, or not on a local file system)."""
    import jax

    path = jax.config.jax_compilation_cache_dir
    if not path or "://" in str(path):
        return None
    return Path(path)


def quarantine(cache_key: str, error: BaseException, emit: Callable[[str], None] = _stderr) -> Optional[Path]:
    """Move the entry ``cache_key`` of the current cache folder to its ``quarantine/`` folder
    (replacing an older copy there) and say so through ``emit``. Returns the new path, or None
    when there was no such file or it could not be moved (said through ``emit``; never raises)."""
    try:
        from jax._src.lru_cache import _CACHE_SUFFIX as suffix
    except ImportError:  # another JAX: its file naming as in 0.10
        suffix = "-cache"
    folder = _cache_dir()
    if folder is None or not cache_key:
        return None
    entry = folder / f"{cache_key}{suffix}"
    text = str(error).strip()
    why = type(error).__name__ + (": " + text.splitlines()[0][:160] if text else "")
    try:
        if not entry.is_file():
            return None
        (folder / QUARANTINE).mkdir(exist_ok=True)
        target = folder / QUARANTINE / entry.name
        os.replace(entry, target)
    except OSError as e:
        emit(f"tdmpc2: the JAX compilation cache entry {entry} could not be loaded ({why}) nor moved aside "
             f"({type(e).__name__}: {e}); remove it by hand, or JAX compiles this program again in every job")
        return None
    emit(f"tdmpc2: the JAX compilation cache entry {entry.name} could not be loaded ({why}); moved to {target} "
         "so that this compile stores a fresh entry")
    return target


def _guarded(read: Callable, emit: Callable[[str], None]) -> Callable:
    """``read`` (JAX's entry loader), moving an entry it fails on to the quarantine first."""
    @functools.wraps(read)
    def get_executable_and_time(cache_key, *args, **kwargs):
        try:
            return read(cache_key, *args, **kwargs)
        except OSError:  # the lock or the file system: nothing is known of the entry's bytes
            raise
        except Exception as e:
            quarantine(cache_key, e, emit)
            raise

    get_executable_and_time._tdmpc2_guarded = True
    return get_executable_and_time


def _explain_once(emit: Callable[[str], None]) -> Callable:
    """A JAX monitoring listener printing :data:`EXPLANATION` at the first cache hit on a CPU."""
    def listener(event: str, **_) -> None:
        if event != _HIT_EVENT or _STATE["explained"]:
            return
        import jax

        if jax.default_backend() != "cpu":
            return
        _STATE["explained"] = True
        emit(EXPLANATION.format(cache=_cache_dir() or jax.config.jax_compilation_cache_dir))

    return listener


def install(emit: Callable[[str], None] = _stderr) -> bool:
    """Set up this process's use of the JAX compilation cache (once; later calls do nothing):
    an entry that fails to load is moved to ``<cache>/quarantine/`` so that the recompile
    stores a fresh one, and :data:`EXPLANATION` is printed at the first program loaded from the
    cache on a CPU (see the module's docstring). ``emit`` gets each line (default: stderr,
    flushed). Imports JAX. Returns whether the damaged-entry hook is in place (False, with one
    line through ``emit``, when this JAX has no ``get_executable_and_time`` to wrap)."""
    if _STATE["installed"]:
        return _STATE["hooked"]
    import jax
    from jax._src import compilation_cache as cc

    _STATE["installed"] = True
    jax.monitoring.register_event_listener(_explain_once(emit))
    read = getattr(cc, "get_executable_and_time", None)
    if read is None or not callable(read):
        emit(f"tdmpc2: JAX {jax.__version__} has no jax._src.compilation_cache.get_executable_and_time; a damaged "
             "compilation cache entry is not removed (remove the entry file of the program JAX warns about by hand)")
        return False
    if not getattr(read, "_tdmpc2_guarded", False):
        cc.get_executable_and_time = _guarded(read, emit)
    _STATE["hooked"] = True
    return True


def install_if_enabled(environ=None) -> bool:
    """:func:`install` when ``environ`` (default ``os.environ``) sets :data:`CACHE_ENV` to a
    folder (the workflow's jobs) and JAX is installed; otherwise nothing (JAX is not
    imported). Returns whether :func:`install` ran and placed its hook."""
    import importlib.util

    environ = os.environ if environ is None else environ
    if not environ.get(CACHE_ENV) or importlib.util.find_spec("jax") is None:
        return False
    return install()


__all__ = ["CACHE_ENV", "QUARANTINE", "EXPLANATION", "install", "install_if_enabled", "quarantine"]
