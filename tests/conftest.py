"""Session set-up shared by every test file (issue 15: the whole suite in under 20 minutes on
CI's 2-core CPU; most of its time is XLA compiling).

* One JAX persistent compilation cache per test session, in a fresh temporary folder shared by
  the session's pytest-xdist workers (found through ``TDMPC2_TEST_JAX_CACHE``, set by the
  controller before the workers start) and removed at the end. Tests that build agents of the
  same configuration in other files (or in the other worker) then load the compiled programs
  instead of compiling them again. It is set in this process's JAX config only, never in the
  environment: the subprocesses of the workflow, SLURM and benchmark tests keep the cache (or
  none) that their own command line sets. Starting cold each session, it cannot hide a compile
  failure or a miscompile from an older run (tests/test_jax_stack.py's reproducer compiles
  afresh); tests/test_checkpoint.py and the multi-process tests (tests/test_devices.py,
  tests/test_slurm.py's 2-task job) hand this folder to their subprocesses, so the one-device
  and 4-device multi-task programs they share are compiled once a session. Programs with host
  callbacks (dm_control) are not cached by JAX.
* Under pytest-xdist (``.ci/run``: ``-n 2 --dist loadfile``): each test file is one unit of
  work, so its module fixtures (a trained agent, the SLURM daemons) are built once on one
  worker, except the long subprocess pipelines named in ``HEAVY``, each a unit of its own; the
  units go out longest first (``HEAVY``'s estimates, measured under load on the 2-core machine),
  so that the two workers finish together (pytest_xdist_make_scheduler below).
* Python's cyclic garbage collector: a worker accumulates millions of live objects (JAX's
  traces and caches of the files it ran), and every full collection walks all of them: 83 full
  collections took 19.7 s of a 111 s run of four test files in one process (2026-12-05). At
  the first test of each file, the objects still alive are collected once and then frozen
  (``gc.freeze``: moved out of the collector's sight, never freed), so later collections walk
  only what the file itself creates. What a finished file leaves alive is kept for good: its
  fixtures are torn down before the next file starts, so this is caches (JAX's, ours). The
  youngest generation's threshold is raised from 700 to ``GC_THRESHOLD0`` (100,000 net
  allocations), so that the collections that walk a file's live objects come about 140 times
  less often: tests/test_episodic.py and tests/test_checkpoint.py in one process (two such
  runs side by side, 2026-12-06, load about 3) spent 19.0 s collecting (47 full collections)
  with 700 and 6.4 s (2 full) with 100,000, and ran 13.6 s faster (399 s -> 385 s). Garbage
  cycles are freed later (within the next 100,000 allocations), never kept. The terminal
  summary gives the seconds spent collecting.
"""
from __future__ import annotations

import gc
import json
import os
import shutil
import tempfile
import time

import pytest

# MuJoCo picks its OpenGL backend when first imported (by any test module): headless EGL unless
# told otherwise, as the tdmpc2 command does (the evaluation videos' tests; .ci/run exports it)
if not (os.environ.get("MUJOCO_GL") or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
    os.environ["MUJOCO_GL"] = "egl"

CACHE_ENV = "TDMPC2_TEST_JAX_CACHE"

# node id (a file, or a file::test) -> estimated seconds on CI's 2-core CPU under two workers
# (measured 2026-12-03 on the AMD EPYC family 25 machine, load about 3).
# A test named here runs in a group of its own; a file named here keeps its tests together.
HEAVY = {
    "tests/test_slurm.py": 520,  # + the 2-task srun multi-task job (issue 28, 2026-12-04: 70 s)
    "tests/test_workflow.py::test_real_tiny_run_produces_report": 450,
    "tests/test_workflow.py::test_real_dmcontrol_run_of_two_seeds_produces_report": 105,
    "tests/test_workflow.py::test_pipeline_with_stand_in_trainer": 140,
    "tests/test_benchmarks.py::test_gpu_benchmark_reduced_form_runs_on_cpu_and_writes_its_tables": 120,
    "tests/test_seed_api.py::test_the_reference_example_runs_with_only_its_imports_changed": 270,
    # the largest files (their tests' total, 2026-12-04 on the same machine): handed out before the
    # small ones, so that the last units to finish are short and the two workers end together
    "tests/test_agent.py": 300,
    # 4 fake devices in a process of its own, then two gloo processes (about 230 s since 2026-12-05);
    # given first to the other worker on purpose: its two processes compile the 4-device and
    # one-device multi-task programs in the first minutes, before tests/test_slurm.py's 2-task
    # job (TOGETHER, about 4-5 min in) loads them from the session cache instead of compiling
    # them at the same time
    "tests/test_devices.py": 310,
    "tests/test_episodic.py": 280,
    "tests/test_checkpoint.py": 265,  # +13 s: the restore-placement test in a fresh process (2026-12-06)
    "tests/test_multitask.py": 170,
    "tests/test_workflow.py": 150,  # its tests other than the three above
    "tests/test_multitask_host.py": 150,
    "tests/test_networks.py": 120,
    "tests/test_dmcontrol.py": 120,
    "tests/test_extensions.py": 110,
    "tests/test_nonfinite.py": 110,
    "tests/test_update.py": 100,
    "tests/test_dataset.py": 100,
    # issue 29 (pixels, videos; 2026-12-05, measured on a loaded machine and scaled)
    "tests/test_videos.py": 90,
    "tests/test_pixels.py": 80,
    "tests/test_parity.py": 80,
    "tests/test_pixels_model.py": 60,
}

# HEAVY units that run as one unit, on one worker, in this order: the real tiny pipeline
# compiles the pendulum job's programs into the checkout's .jax_cache, and the real-SLURM test
# (the same job, tests/test_slurm.py's TINY = tests/test_workflow.py's PREEMPT) then loads them
# instead of compiling them again, at the same time, on the other worker.
TOGETHER = (
    "tests/test_workflow.py::test_real_tiny_run_produces_report",
    "tests/test_slurm.py",
)


def pytest_configure(config):
    if CACHE_ENV not in os.environ:  # the controller (or a run without xdist): one folder for the session
        os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="tdmpc2-test-jax-cache-")
        config._tdmpc2_owned_cache = os.environ[CACHE_ENV]
    import jax

    jax.config.update("jax_compilation_cache_dir", os.environ[CACHE_ENV])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    from jax import monitoring

    def tally(event: str, duration: float, **_) -> None:
        if event == "/jax/compilation_cache/compile_time_saved_sec":  # one per program loaded from the cache
            _TALLY["hits"] += 1
            _TALLY["saved_s"] += duration
        elif event in _STAGES:  # where this process's JAX time goes, per test file
            _TALLY[_STAGES[event]] += duration
            if event == "/jax/core/compile/backend_compile_duration":
                _TALLY["programs"] += 1
                by_file = _TALLY["compile_s_by_file"]
                by_file[_CURRENT[0]] = by_file.get(_CURRENT[0], 0.0) + duration

    monitoring.register_event_duration_secs_listener(tally)


_TALLY = {"hits": 0, "saved_s": 0.0, "trace_s": 0.0, "lower_s": 0.0, "compile_s": 0.0, "programs": 0,
          "compile_s_by_file": {}, "gc_full": 0, "gc_full_s": 0.0, "gc_young_s": 0.0}
_STAGES = {"/jax/core/compile/jaxpr_trace_duration": "trace_s",
           "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
           "/jax/core/compile/backend_compile_duration": "compile_s"}  # a cache hit's load counts here too
_CURRENT = ["(collection)"]


def pytest_runtest_setup(item):
    path = item.nodeid.split("::")[0]
    if path != _CURRENT[0]:  # a new file: the previous file's fixtures are torn down by now
        gc.collect()
        gc.freeze()
    _CURRENT[0] = path


def _gc_timer(phase: str, info: dict) -> None:
    """Seconds in the cyclic collector, full collections (generation 2) apart."""
    if phase == "start":
        _GC_START[0] = time.perf_counter()
    else:
        key = "gc_full_s" if info["generation"] == 2 else "gc_young_s"
        _TALLY[key] += time.perf_counter() - _GC_START[0]
        _TALLY["gc_full"] += info["generation"] == 2


_GC_START = [0.0]
gc.callbacks.append(_gc_timer)
# the youngest generation collected every 100,000 net allocations instead of 700: JAX's tracing
# allocates millions of short-lived objects, and each 10th young collection promotes into the
# older ones, whose collections walk all of the file's live objects (see the docstring)
GC_THRESHOLD0 = 100_000
gc.set_threshold(GC_THRESHOLD0, *gc.get_threshold()[1:])


def pytest_sessionfinish(session):
    """Each process's cache hits and the compile seconds they saved (XLA's timing of the first
    compile, less the read), and its seconds of tracing, lowering and XLA compiling (per test
    file), for the terminal summary."""
    path = os.path.join(os.environ.get(CACHE_ENV, ""), f"tally-{os.getpid()}.json")
    if os.path.isdir(os.path.dirname(path)) and (_TALLY["hits"] or _TALLY["programs"]):
        with open(path, "w") as fh:
            json.dump(_TALLY, fh)


def pytest_terminal_summary(terminalreporter, config):
    owned = getattr(config, "_tdmpc2_owned_cache", None)
    if not owned or not os.path.isdir(owned):
        return
    total = {"hits": 0, "saved_s": 0.0, "trace_s": 0.0, "lower_s": 0.0, "compile_s": 0.0, "programs": 0,
             "gc_full": 0, "gc_full_s": 0.0, "gc_young_s": 0.0}
    by_file: dict = {}
    for name in os.listdir(owned):
        if name.startswith("tally-"):
            with open(os.path.join(owned, name)) as fh:
                t = json.load(fh)
            for k in total:
                total[k] += t[k]
            for f, sec in t["compile_s_by_file"].items():
                by_file[f] = by_file.get(f, 0.0) + sec
    terminalreporter.write_line(f"session compilation cache (tests/conftest.py): {total['hits']} programs loaded "
                                f"instead of compiled, net {total['saved_s']:+.1f} s of compiling saved (JAX's "
                                f"compile time saved per hit: first compile minus the load; tiny programs cost "
                                f"more to load)")
    top = ", ".join(f"{f} {sec:.0f} s" for f, sec in sorted(by_file.items(), key=lambda x: -x[1])[:8])
    terminalreporter.write_line(f"JAX in the test processes (not their subprocesses): tracing {total['trace_s']:.0f} s, "
                                f"lowering {total['lower_s']:.0f} s, XLA compiling or loading {total['compile_s']:.0f} s "
                                f"({total['programs']} programs); most compiling: {top}")
    terminalreporter.write_line(f"Python's garbage collector in the test processes: {total['gc_full']} full collections "
                                f"{total['gc_full_s']:.1f} s, the younger generations {total['gc_young_s']:.1f} s")


def pytest_unconfigure(config):
    owned = getattr(config, "_tdmpc2_owned_cache", None)
    if owned:
        shutil.rmtree(owned, ignore_errors=True)
        os.environ.pop(CACHE_ENV, None)


def _scope(nodeid: str) -> str:
    """The unit of work a test belongs to: TOGETHER's first entry for its members, else its
    HEAVY entry, else its file."""
    test = nodeid.split("[")[0]
    path = test.split("::")[0]
    scope = test if test in HEAVY else path
    return TOGETHER[0] if scope in TOGETHER else scope


def _unit_size(scope: str) -> float:
    return sum(HEAVY[s] for s in TOGETHER) if scope == TOGETHER[0] else HEAVY.get(scope, 0.0)


def _member_rank(nodeid: str) -> int:
    """Position in TOGETHER of the entry a test belongs to (0 for every other test)."""
    test = nodeid.split("[")[0]
    for rank, entry in enumerate(TOGETHER):
        if test == entry or test.split("::")[0] == entry:
            return rank
    return 0


@pytest.hookimpl(tryfirst=True)  # workers only (the controller does not collect)
def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):  # not an xdist worker: collection order
        return
    first = {}
    for index, item in enumerate(items):
        first.setdefault(_scope(item.nodeid), index)
    # longest first, then in collection order; the sort is stable, so a unit's tests keep their
    # order (TOGETHER's in its own)
    items.sort(key=lambda it: (-_unit_size(_scope(it.nodeid)), first[_scope(it.nodeid)], _member_rank(it.nodeid)))


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: pytest alone (no pytest-xdist) runs too
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with the HEAVY tests split out of their files: xdist's loadgroup
    cannot do it under pytest 9.2 (it renames node ids through ``Item._nodeid``, which pytest
    9.2 no longer reads), so this scheduler does it by node id. Units go out in the workers'
    collection order (longest first, above), not reordered by size."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class HeavyApart(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    config.option.loadscopereorder = False
    return HeavyApart(config, log)
