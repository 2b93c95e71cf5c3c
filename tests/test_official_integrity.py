"""Damaged official files are refused before they are used (tdmpc2core.io.integrity; issue 31).

``torch.load`` loads a ``.pt`` file with bytes flipped inside a tensor's data without a word,
and the damaged weights are used. The zip archive ``torch.save`` writes records every member's
CRC-32: :func:`check_zip_file` checks them (and computes the file's size and SHA-256 in the same
read) before the official readers load anything. Here: bit-flipped copies of the official
checkpoint fixture and of a small official-format data chunk are refused by the library
functions, by ``tdmpc2 evaluate-official`` and ``tdmpc2 convert-official-data`` (as
subprocesses: one line, exit status 1, the member named, nothing written) and by the workflow's
convert_official_data rule; the intact files still load. The check's speed on a large file is
in benchmarks/README.md ("Integrity check of official .pt files"), not measured here.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tdmpc2core.io.integrity import FileIntegrityError, check_zip_file

ROOT = Path(__file__).resolve().parents[1]
SINGLE = Path(__file__).parent / "fixtures" / "official_ckpt_single.pt"


def tensor_member(path) -> zipfile.ZipInfo:
    """The largest tensor-data member (``<archive>/data/<key>``) of a torch.save zip file."""
    with zipfile.ZipFile(path) as zf:
        return max((zi for zi in zf.infolist() if "/data/" in zi.filename), key=lambda zi: zi.file_size)


def data_offset(path, zi: zipfile.ZipInfo) -> int:
    """Where the member's data starts: its local header (30 bytes, then name and extra field)."""
    with open(path, "rb") as fh:
        fh.seek(zi.header_offset)
        sig, n_name, n_extra = struct.unpack("<4s22xHH", fh.read(30))
    assert sig == b"PK\x03\x04"
    return zi.header_offset + 30 + n_name + n_extra


def flipped_copy(src, dst, n: int = 64) -> str:
    """A copy of ``src`` with ``n`` bytes inverted in the middle of its largest tensor's data
    (the zip headers and directory untouched); returns that member's name."""
    zi = tensor_member(src)
    assert zi.compress_type == zipfile.ZIP_STORED and zi.file_size >= n
    start = data_offset(src, zi) + (zi.file_size - n) // 2
    data = bytearray(Path(src).read_bytes())
    data[start:start + n] = bytes(b ^ 0xFF for b in data[start:start + n])
    Path(dst).write_bytes(bytes(data))
    return zi.filename


def cli(*args, cwd):
    """``python -m tdmpc2core.cli ...`` as a user runs it (this checkout first on the path)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               JAX_PLATFORMS="cpu")
    env.pop("TDMPC2_TRACEBACK", None)
    return subprocess.run([sys.executable, "-m", "tdmpc2core.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=env)


def one_line_error(res, stage: str) -> str:
    assert res.returncode == 1, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(f"tdmpc2 {stage}: error:")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    return errors[0]


# ------------------------------------------------------------------ the check itself (no torch)
def test_intact_checkpoint_passes_with_size_sha256_and_every_member():
    rec = check_zip_file(SINGLE, block=4096)  # small blocks: members span reads
    with zipfile.ZipFile(SINGLE) as zf:
        n = len(zf.infolist())
        assert zf.testzip() is None
    data = SINGLE.read_bytes()
    assert (rec.path, rec.size, rec.sha256, rec.members) == (str(SINGLE), len(data),
                                                             hashlib.sha256(data).hexdigest(), n)
    assert rec.to_json() == {"path": str(SINGLE), "size": len(data), "sha256": rec.sha256, "members_checked": n,
                             "check": "zip CRC-32 of every member"}


@pytest.mark.parametrize("block", [4096, 1 << 24])
def test_flipped_tensor_bytes_are_found_and_the_member_named(tmp_path, block):
    bad = tmp_path / "corrupt.pt"
    member = flipped_copy(SINGLE, bad)
    with zipfile.ZipFile(bad) as zf:
        assert zf.testzip() == member  # Python's own zip reader agrees
    with pytest.raises(FileIntegrityError) as e:
        check_zip_file(bad, block=block)
    assert e.value.member == member and e.value.path == str(bad)
    msg = str(e.value)
    assert msg.startswith(f"{bad}: member {member!r} (a tensor's data, bytes ") and "is damaged" in msg
    assert "the zip directory records" in msg and "fetch it again" in msg and "\n" not in msg


def test_damaged_deflated_member_truncated_empty_text_and_legacy_files(tmp_path):
    p = tmp_path / "a.zip"
    with zipfile.ZipFile(p, "w") as zf:
        zf.writestr("a/data.pkl", b"x" * 100)
        zf.writestr("a/packed", b"hello " * 500, compress_type=zipfile.ZIP_DEFLATED)
        zf.writestr("a/empty", b"")
    assert check_zip_file(p, block=64).members == 3
    zi = zipfile.ZipFile(p).getinfo("a/packed")
    data = bytearray(p.read_bytes())
    data[data_offset(p, zi) + zi.compress_size // 2] ^= 0x10
    (tmp_path / "b.zip").write_bytes(bytes(data))
    with pytest.raises(FileIntegrityError, match="member 'a/packed'") as e:
        check_zip_file(tmp_path / "b.zip")
    assert e.value.member == "a/packed"
    cases = {"cut.pt": SINGLE.read_bytes()[:5000], "empty.pt": b"", "text.pt": b"hello\n",
             # the legacy torch.save format opens with the pickled magic number 0x1950a86a20f9469cfc6c
             "legacy.pt": pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + b"rest of a legacy file"}
    want = {"cut.pt": "has no readable zip directory at its end", "empty.pt": "the file is empty (0 bytes)",
            "text.pt": "the file is not a zip archive", "legacy.pt": "legacy (non-zip) PyTorch file"}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(FileIntegrityError) as e:
            check_zip_file(tmp_path / name)
        assert str(e.value).startswith(f"{tmp_path / name}: ") and want[name] in str(e.value), name
        assert e.value.member is None
    with pytest.raises(FileNotFoundError):
        check_zip_file(tmp_path / "missing.pt")


# ------------------------------------------------------------------ checkpoints (torch)
def _needs(module: str):
    """``module`` (torch or tensordict), or a skip naming the extra that installs it."""
    return pytest.importorskip(module, reason=f"{module} is not installed: pip install -e '.[official]' to run "
                                              "the official checkpoint and chunk checks", exc_type=ImportError)


def test_load_official_refuses_a_flipped_checkpoint_that_torch_loads_silently(tmp_path):
    torch = _needs("torch")
    from tdmpc2core.agents.official_eval import CheckpointMismatchError, load_checkpoint
    from tdmpc2core.io.official import DamagedCheckpointError, OfficialCheckpointError, load_official, read_official

    bad = tmp_path / "corrupt.pt"
    member = flipped_copy(SINGLE, bad)
    torch.load(bad, map_location="cpu", weights_only=True)  # what the check is for: this loads
    with pytest.raises(DamagedCheckpointError, match=f"member '{member}'") as e:
        load_official(bad)
    assert isinstance(e.value, OfficialCheckpointError) and e.value.member == member
    with pytest.raises(CheckpointMismatchError, match=rf"corrupt\.pt: not a readable PyTorch checkpoint: member "
                                                      rf"'{member}' \(a tensor's data"):
        load_checkpoint(bad)
    sd, rec = read_official(SINGLE)  # the intact file loads, with its record
    assert sd and rec.sha256 == hashlib.sha256(SINGLE.read_bytes()).hexdigest()
    ck = load_checkpoint(SINGLE)
    assert ck.sha256 == rec.sha256 and ck.size == SINGLE.stat().st_size and ck.check.members == rec.members
    legacy = tmp_path / "legacy.pt"
    try:
        torch.save({"model": {"x": torch.zeros(3)}}, legacy, _use_new_zipfile_serialization=False)
    except TypeError:  # a torch without the legacy writer
        legacy.write_bytes(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2))
    with pytest.raises(DamagedCheckpointError, match="legacy .non-zip. PyTorch file.*no checksums"):
        load_official(legacy)


def test_evaluate_official_cli_refuses_a_flipped_checkpoint_in_one_line_and_writes_nothing(tmp_path):
    _needs("torch")
    bad = tmp_path / "corrupt.pt"
    member = flipped_copy(SINGLE, bad)
    res = cli("evaluate-official", "--checkpoint", bad, "--task", "dmc:cartpole-balance", "--episodes", 1,
              "--out", "results/official/corrupt", cwd=tmp_path)
    line = one_line_error(res, "evaluate-official")
    assert "corrupt.pt: not a readable PyTorch checkpoint" in line and repr(member) in line and "damaged" in line
    assert not (tmp_path / "results").exists()  # no output folder, no run.json


# ------------------------------------------------------------------ official data chunks (torch, tensordict)
@pytest.fixture
def chunks(tmp_path):
    """An intact official-format chunk (a TensorDict of 2 mt30 episodes) and a bit-flipped copy,
    each alone in a folder."""
    _needs("torch")
    _needs("tensordict")
    from test_official_data import official_episodes, save_chunk

    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    save_chunk(good / "chunk_0.pt", official_episodes([8, 0], seed=3))
    member = flipped_copy(good / "chunk_0.pt", bad / "chunk_0.pt")
    return good, bad, member


def test_chunk_reader_and_converter_refuse_a_flipped_chunk(chunks, tmp_path):
    from tdmpc2core.cli import main
    from tdmpc2core.dataset import load_dataset
    from tdmpc2core.io import official_data as D
    from tdmpc2core.stages.convert_official_data import task_table

    good, bad, member = chunks
    for call in (lambda: D.check_chunk(bad / "chunk_0.pt"), lambda: D.load_chunk(bad / "chunk_0.pt")):
        with pytest.raises(D.DamagedChunkError, match=rf"^official chunk .*chunk_0\.pt: member '{member}'") as e:
            call()
        assert isinstance(e.value, D.OfficialDataError) and e.value.member == member
    out = tmp_path / "pools" / "mt30.parquet"
    with pytest.raises(D.DamagedChunkError):
        D.convert_chunks(bad, out, task_set="mt30", tasks=task_table("mt30"), provenance={})
    assert not out.parent.exists()
    assert D.load_chunk(good / "chunk_0.pt")["file_check"].size == (good / "chunk_0.pt").stat().st_size
    assert main(["convert-official-data", "--src", str(good), "--out", str(out), "--tasks", "mt30"]) == 0
    (src,) = load_dataset(out).provenance["source_files"]
    data = (good / "chunk_0.pt").read_bytes()
    assert src["file"] == "chunk_0.pt" and src["bytes"] == src["size"] == len(data)
    assert src["sha256"] == hashlib.sha256(data).hexdigest() and src["path"] == str(good / "chunk_0.pt")
    assert src["members_checked"] == len(zipfile.ZipFile(good / "chunk_0.pt").infolist())


def test_convert_official_data_cli_refuses_a_flipped_chunk_in_one_line_and_writes_nothing(chunks, tmp_path):
    _, bad, member = chunks
    res = cli("convert-official-data", "--src", bad, "--out", "results/datasets/pools/mt30.parquet",
              "--tasks", "mt30", cwd=tmp_path)
    line = one_line_error(res, "convert-official-data")
    assert "DamagedChunkError: official chunk" in line and "chunk_0.pt" in line and repr(member) in line
    assert not (tmp_path / "results").exists()


def test_workflow_rule_refuses_a_flipped_chunk(chunks, tmp_path):
    """The convert_official_data rule (official_data.smk) on a damaged chunk: the job fails, its
    log holds the one-line refusal, no pool file is left."""
    from test_official_data_workflow import TINY
    from test_workflow import copy_workflow, snakemake

    _, bad, member = chunks
    (tmp_path / "wf").mkdir()
    wf = copy_workflow(tmp_path / "wf")
    os.replace(bad, wf / "chunks")
    (wf / "tiny.yaml").write_text(TINY.format(src="chunks", eval_tasks="[cartpole-balance]", budget=1000))
    res = snakemake(wf, "--cores", "1", "--configfile", "tiny.yaml", "--", "results/datasets/pools/mt30.parquet")
    assert res.returncode != 0, res.stdout + res.stderr
    log = (wf / "logs/convert_official_data/mt30.log").read_text()
    assert "DamagedChunkError: official chunk" in log and repr(member) in log and "Traceback" not in log
    assert not (wf / "results").exists() or not [p for p in (wf / "results").rglob("*") if p.is_file()]
