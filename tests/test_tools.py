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
