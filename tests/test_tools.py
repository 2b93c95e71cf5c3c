"""The recording tools (tools/record_parity.py, tools/record_official_checkpoints.py,
tools/record_reacher_three.py) refuse anything but a checkout of the official code at 5f6fade,
in one line, before importing torch or the official code.
(Recording itself needs that checkout, which CI does not have: docs/fidelity.md.)"""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ["record_parity.py", "record_official_checkpoints.py"]
OFFICIAL_FILES = ("tdmpc2.py", "common/math.py", "common/layers.py", "common/init.py", "common/scale.py",
                  "common/world_model.py", "common/__init__.py")


def run(tool, *args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / tool), *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def fake_checkout(tmp_path):
    for name in OFFICIAL_FILES:
        (tmp_path / "tdmpc2" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tdmpc2" / name).write_text("raise SystemExit('the official code must not be imported')\n")
    return tmp_path


@pytest.mark.parametrize("tool", TOOLS)
def test_recording_tools_refuse_what_is_not_the_reference_checkout(tool, tmp_path):
    res = run(tool, "--official", tmp_path, "--out", tmp_path / "out")
    assert res.returncode != 0 and "is not a checkout of nicklashansen/tdmpc2: missing tdmpc2/tdmpc2.py" in res.stderr
    co = fake_checkout(tmp_path / "co")
    res = run(tool, "--official", co, "--out", tmp_path / "out")
    assert res.returncode != 0 and "the checkout's commit is unknown (not a git work tree): pass --commit" in res.stderr
    res = run(tool, "--official", co, "--commit", "abcdef0", "--out", tmp_path / "out")
    assert res.returncode != 0 and "the checkout is at abcdef0; the fixtures are recorded from 5f6fade" in res.stderr
    assert not (tmp_path / "out").exists()


def test_reacher_recorder_refuses_what_is_not_the_reference_checkout(tmp_path):
    tool, out = "record_reacher_three.py", tmp_path / "out" / "r.npz"
    res = run(tool, "--official", tmp_path, "--out", out)
    assert res.returncode != 0 and "missing tdmpc2/envs/tasks/reacher.py" in res.stderr
    for name in ("reacher.py", "reacher_three_links.xml"):
        (tmp_path / "co" / "tdmpc2" / "envs" / "tasks").mkdir(parents=True, exist_ok=True)
        (tmp_path / "co" / "tdmpc2" / "envs" / "tasks" / name).write_text("raise SystemExit('imported')\n")
    res = run(tool, "--official", tmp_path / "co", "--out", out)
    assert res.returncode != 0 and "the checkout's commit is unknown (not a git work tree): pass --commit" in res.stderr
    res = run(tool, "--official", tmp_path / "co", "--commit", "abcdef0", "--out", out)
    assert res.returncode != 0 and "the checkout is at abcdef0; the fixture is recorded from 5f6fade" in res.stderr
    assert not out.parent.exists()


def test_suite_compile_profile_sums_each_process_by_file_program_and_test(tmp_path):
    """tools/suite_compile_profile.py's summary of the per-process event files: totals, the
    processes by XLA compile seconds, and compile seconds by test file, program and (test,
    program)."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("suite_compile_profile", ROOT / "tools" / "suite_compile_profile.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    a, b = "tests/test_a.py::test_one", "tests/test_b.py::test_two"
    (tmp_path / "1.json").write_text(json.dumps({"argv": ["-c"], "wall_s": 10.0, "events": [
        ["trace", 1.0, "jit(chunk)", a], ["compile", 4.0, "jit(chunk)", a], ["compile", 2.0, "jit(one)", a]]}))
    (tmp_path / "2.json").write_text(json.dumps({"argv": ["cli.py", "train-single"], "wall_s": 5.0, "events": [
        ["compile", 3.0, "jit(chunk)", b], ["lower", 0.5, "jit(chunk)", b], ["compile", 1.0, "jit(f)", ""]]}))
    s = tool.summarize(tmp_path)
    assert s["processes"] == 2 and s["seconds"] == {"trace": 1.0, "lower": 0.5, "compile": 10.0}
    assert [p["compile"] for p in s["top_processes"]] == [6.0, 4.0] and s["top_processes"][1]["test"] == b
    assert s["compile_by_file"] == [("tests/test_a.py", 6.0), ("tests/test_b.py", 3.0), ("(no test)", 1.0)]
    assert s["compile_by_program"] == [("jit(chunk)", 7.0, 2), ("jit(one)", 2.0, 1), ("jit(f)", 1.0, 1)]
    assert s["compile_by_test_and_program"][:2] == [(a, "jit(chunk)", 4.0), (b, "jit(chunk)", 3.0)]
    assert (("(no test)", "jit(f)", 1.0)) in s["compile_by_test_and_program"]
