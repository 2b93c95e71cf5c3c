"""Where the test suite's time goes in JAX: tracing, lowering and XLA compiling in every Python
process a pytest run starts (the test workers and their subprocesses: workflow jobs, SLURM
jobs, benchmark scripts), by process, test file and program name.

Usage, from the repository root (the arguments after ``--`` go to pytest unchanged)::

    python tools/suite_compile_profile.py [--json FILE] -- -q -n 2 --dist loadfile tests/

The run's processes find a ``sitecustomize`` module first on ``PYTHONPATH`` (a temporary folder
this script writes); it registers a :mod:`jax.monitoring` listener as soon as JAX's monitoring
module is imported (a process that never imports JAX pays one cheap import hook) and, at exit,
writes the process's events (``/jax/core/compile/jaxpr_trace_duration``,
``jaxpr_to_mlir_module_duration``, ``backend_compile_duration``; a persistent-cache hit's load
counts as backend compiling, as JAX reports it) with the test that was running
(``PYTEST_CURRENT_TEST``, inherited by a test's subprocesses). A subprocess started with an
environment of its own that drops ``PYTHONPATH`` (srun under SLURM) is not seen. Seconds are
each process's own; processes run side by side, so they add up to CPU time, not wall time.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
          "/jax/core/compile/backend_compile_duration": "compile"}
DIR_ENV = "TDMPC2_COMPILE_TALLY_DIR"

SITECUSTOMIZE = '''
import atexit, builtins, json, os, sys, time
_EVENTS = %(events)r
_DIR = os.environ.get(%(dir_env)r)
_records, _start, _import, _done = [], time.time(), builtins.__import__, []

def _listen(event, duration, **kw):
    kind = _EVENTS.get(event)
    if kind:
        _records.append((kind, float(duration), str(kw.get("fun_name", "")),
                         os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]))

def _hook(name, *args, **kwargs):
    module = _import(name, *args, **kwargs)
    if not _done:
        mon = sys.modules.get("jax._src.monitoring")
        if mon is not None and hasattr(mon, "register_event_duration_secs_listener"):
            _done.append(True)
            builtins.__import__ = _import
            mon.register_event_duration_secs_listener(_listen)
    return module

def _write():
    if _records and _DIR:
        with open(os.path.join(_DIR, "%%d.json" %% os.getpid()), "w") as fh:
            json.dump({"argv": sys.argv[:8], "wall_s": time.time() - _start, "events": _records}, fh)

if _DIR:
    builtins.__import__ = _hook
    atexit.register(_write)
'''


def summarize(folder: Path, top: int = 25) -> dict:
    """The events of every process in ``folder``: totals, processes by compile seconds, compile
    seconds by test file, by program name, and by (test, program): which tests compile the
    costliest programs."""
    totals, by_file, by_program, count, by_test_program = (collections.Counter() for _ in range(5))
    processes = []
    for path in sorted(folder.glob("*.json")):
        rec = json.loads(path.read_text())
        own = collections.Counter()
        tests = collections.Counter()
        for kind, seconds, program, test in rec["events"]:
            own[kind] += seconds
            if kind == "compile":
                by_file[test.split("::")[0] or "(no test)"] += seconds
                by_program[program] += seconds
                count[program] += 1
                by_test_program[(test or "(no test)", program)] += seconds
            tests[test] += seconds
        totals.update(own)
        processes.append({"argv": " ".join(rec["argv"])[:120], "wall_s": round(rec["wall_s"], 1),
                          **{k: round(own[k], 1) for k in EVENTS.values()},
                          "test": tests.most_common(1)[0][0] if tests else ""})
    processes.sort(key=lambda p: -p["compile"])
    return {"processes": len(processes), "seconds": {k: round(totals[k], 1) for k in EVENTS.values()},
            "top_processes": processes[:top],
            "compile_by_file": [(f, round(s, 1)) for f, s in by_file.most_common(top)],
            "compile_by_program": [(p, round(s, 1), count[p]) for p, s in by_program.most_common(top)],
            "compile_by_test_and_program": [(tp[0], tp[1], round(s, 1)) for tp, s in by_test_program.most_common(2 * top)]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write the summary to this file")
    ap.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: pytest's arguments")
    args = ap.parse_args(argv)
    pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    with tempfile.TemporaryDirectory(prefix="suite-compile-profile-") as tmp:
        site, out = Path(tmp) / "site", Path(tmp) / "events"
        site.mkdir()
        out.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE % {"events": EVENTS, "dir_env": DIR_ENV})
        env = dict(os.environ, **{DIR_ENV: str(out)})
        env["PYTHONPATH"] = os.pathsep.join([str(site)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        rc = subprocess.call([sys.executable, "-m", "pytest", *pytest_args], env=env)
        summary = summarize(out)
    s = summary["seconds"]
    print(f"\nJAX in {summary['processes']} processes: tracing {s['trace']:.0f} s, lowering {s['lower']:.0f} s, "
          f"XLA compiling or loading {s['compile']:.0f} s (CPU seconds, processes side by side)")
    print("processes by XLA compile seconds:")
    for p in summary["top_processes"]:
        print(f"  {p['compile']:7.1f} (trace {p['trace']:.1f}, lower {p['lower']:.1f}, wall {p['wall_s']:.0f})  "
              f"{p['argv'][:70]}  [busiest test: {p['test'][:80]}]")
    print("XLA compile seconds by test file:")
    for f, sec in summary["compile_by_file"]:
        print(f"  {sec:7.1f}  {f}")
    print("XLA compile seconds by program (compiles):")
    for p, sec, n in summary["compile_by_program"]:
        print(f"  {sec:7.1f}  {n:4d}  {p}")
    print("XLA compile seconds by test and program:")
    for test, prog, sec in summary["compile_by_test_and_program"]:
        print(f"  {sec:7.1f}  {prog[:24]:24s}  {test[:100]}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return rc


if __name__ == "__main__":
    sys.exit(main())
