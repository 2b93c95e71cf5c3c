"""Is a ``.pt`` file intact? Every zip member's CRC-32, the file's SHA-256 and size, in one read.

``torch.save`` (PyTorch >= 1.6) writes a zip archive: ``data.pkl`` (the pickled structure),
one stored, uncompressed member per tensor storage (``<archive>/data/<key>``) and a few small
records; the zip's central directory, at the end of the file, records each member's CRC-32. A
flipped byte inside a tensor's data changes nothing ``torch.load`` looks at, so a damaged
download loads and its weights are used silently; :func:`check_zip_file` refuses it before
anything is loaded::

    from tdmpc2core.io.integrity import check_zip_file
    rec = check_zip_file("mt30-48M.pt")      # FileIntegrityError naming the damaged member
    rec.sha256, rec.size, rec.members        # rec.to_json() for provenance

One sequential read: the central directory and each member's local header (30 bytes plus its
name and extra field) are read first, then the file is streamed once from start to end in
large blocks, every block fed to SHA-256 and its member-data byte ranges to each member's
``zlib.crc32`` (deflated members, which ``torch.save`` does not write, are inflated on the way).
Bytes outside member data (headers, padding, the directory) carry no CRC; the SHA-256 covers
them, to compare with a published digest. ``torch.load`` then reads the file again (from the
page cache when it fits): the check replaces the separate SHA-256 pass there was before.
Needs no PyTorch.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import struct
import zipfile
import zlib
from typing import Optional

#: bytes per read of the streaming pass
BLOCK_BYTES = 16 << 20
# a zip local file header: signature, 22 bytes (version .. sizes), name length, extra length
_LOCAL = struct.Struct("<4s22xHH")
_LOCAL_SIGNATURE = b"PK\x03\x04"
# the legacy (non-zip) torch.save format opens with a pickle of its magic number 0x1950a86a20f9469cfc6c
_LEGACY_MAGIC = b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
_FETCH_AGAIN = ("the file is corrupt (an incomplete or damaged download, or a disk fault): fetch it again from "
                "its source and compare its SHA-256 with the published one")


class FileIntegrityError(ValueError):
    """A file that is damaged or whose integrity cannot be checked. ``path``: the file;
    ``member``: the zip member at fault (None: the file as a whole); ``reason``: the message
    without the path. ``str()`` is ``"<what><path>: <reason>"``, one line (``what``: a class
    attribute, e.g. ``"official chunk "``)."""

    what = ""

    def __init__(self, path, member: Optional[str], reason: str):
        self.path, self.member, self.reason = os.fspath(path), member, reason
        super().__init__(f"{self.what}{self.path}: {reason}")


@dataclasses.dataclass(frozen=True)
class FileCheck:
    """What :func:`check_zip_file` found: ``path`` (as given), ``size`` (bytes), ``sha256``
    (hex) and ``members`` (zip members whose CRC-32 matched: all of them)."""

    path: str
    size: int
    sha256: str
    members: int

    def to_json(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256, "members_checked": self.members,
                "check": "zip CRC-32 of every member"}


@dataclasses.dataclass
class _Member:
    name: str
    start: int  # first byte of the member's data in the file
    end: int  # one past its last byte
    crc: int  # the CRC-32 the central directory records (of the uncompressed data)
    inflate: Optional[object] = None  # a zlib decompressor for a deflated member
    got: int = 0  # the CRC-32 computed so far
    broken: str = ""  # why a deflated member's data does not inflate


def _not_a_zip(fh, size: int, exc: Exception) -> str:
    """Why a file that zipfile cannot open is refused (empty, legacy torch format, truncated, other)."""
    fh.seek(0)
    head = fh.read(16)
    if size == 0:
        return "the file is empty (0 bytes): not a PyTorch file"
    if head[:1] == b"\x80" and head[2:14] == _LEGACY_MAGIC:
        return ("the file is a legacy (non-zip) PyTorch file (torch.save before PyTorch 1.6, or "
                "_use_new_zipfile_serialization=False): it carries no checksums, so its integrity cannot be checked "
                "and it is refused; the official release's files are zip files: fetch the file again, or re-save it "
                "with a current torch.save from a copy you trust")
    if head[:4] == _LOCAL_SIGNATURE:
        return (f"the file starts as a zip archive but has no readable zip directory at its end ({exc}): "
                "truncated (a download cut short?) or damaged; fetch it again")
    return (f"the file is not a zip archive ({size} bytes, starting {head[:8]!r}): not a PyTorch file written by "
            "torch.save")


def _members(path, fh, size: int, error) -> list:
    """The members' data ranges and recorded CRC-32s, sorted by position: the central
    directory (zipfile) and each member's local header (for where its data starts)."""
    try:
        with zipfile.ZipFile(fh) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError) as exc:
        raise error(path, None, _not_a_zip(fh, size, exc)) from None
    out = []
    for zi in infos:
        if zi.flag_bits & 0x1:
            raise error(path, zi.filename, f"member {zi.filename!r} is encrypted: its contents cannot be checked")
        if zi.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise error(path, zi.filename, f"member {zi.filename!r} uses zip compression method {zi.compress_type}; "
                                           "checked: stored (what torch.save writes) and deflated")
        fh.seek(zi.header_offset)
        head = fh.read(_LOCAL.size)
        if len(head) < _LOCAL.size or _LOCAL.unpack(head)[0] != _LOCAL_SIGNATURE:
            raise error(path, zi.filename, f"member {zi.filename!r}: no zip local header at byte {zi.header_offset} "
                                           f"where the directory puts it: {_FETCH_AGAIN}")
        _, n_name, n_extra = _LOCAL.unpack(head)
        start = zi.header_offset + _LOCAL.size + n_name + n_extra
        if start + zi.compress_size > size:
            raise error(path, zi.filename, f"member {zi.filename!r} runs past the end of the file ({size} bytes): "
                                           f"truncated; {_FETCH_AGAIN}")
        inflate = zlib.decompressobj(-15) if zi.compress_type == zipfile.ZIP_DEFLATED else None
        out.append(_Member(zi.filename, start, start + zi.compress_size, zi.CRC, inflate))
    return sorted(out, key=lambda m: m.start)


def _feed(m: _Member, data, final: bool = False) -> None:
    if m.inflate is None:
        m.got = zlib.crc32(data, m.got)
    elif not m.broken:
        try:
            m.got = zlib.crc32(m.inflate.flush() if final else m.inflate.decompress(data), m.got)
        except zlib.error as exc:
            m.broken = str(exc)


def _stream(fh, members: list, block: int) -> tuple:
    """Read the file once from the start: (sha256 hex, bytes read); each member's ``got`` is
    the CRC-32 of its data (inflated for a deflated member)."""
    sha = hashlib.sha256()
    buf = bytearray(block)
    view = memoryview(buf)
    pos = first = 0
    fh.seek(0)
    while True:
        n = fh.readinto(buf)
        if not n:
            break
        end = pos + n
        sha.update(view[:n])
        while first < len(members) and members[first].end <= pos:
            first += 1
        for m in members[first:]:
            if m.start >= end:
                break
            if m.end > pos:
                _feed(m, view[max(m.start, pos) - pos: min(m.end, end) - pos])
        pos = end
    for m in members:
        _feed(m, b"", final=True)
    return sha.hexdigest(), pos


def check_zip_file(path, *, error=FileIntegrityError, block: int = BLOCK_BYTES) -> FileCheck:
    """Check a zip-format ``.pt`` file (what ``torch.save`` writes) before it is loaded.

    Checked, in one sequential read of the file (module docstring): it is a zip archive with
    a readable central directory; every member's local header is where the directory says;
    no member runs past the end of the file; every member's data has the CRC-32 the directory
    records. Computed in the same pass: the file's SHA-256 and size.

    Args:
      path: the file. error: the exception class raised (:class:`FileIntegrityError` or a
        subclass; called as ``error(path, member, reason)``). block: bytes per read.
    Returns: :class:`FileCheck` (path, size, sha256, members checked).
    Raises:
      FileNotFoundError: no such file.
      ``error``: the file is empty, not a zip archive, a legacy (non-zip) PyTorch file (refused:
        it has no checksums to check), truncated, has an encrypted member or one of another
        compression method, or a member whose CRC-32 differs (the message names the member,
        its bytes in the file and both CRC-32s).
    """
    path = os.fspath(path)
    with open(path, "rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        members = _members(path, fh, size, error)
        digest, read = _stream(fh, members, block)
    if read != size:
        raise error(path, None, f"the file changed while being read ({size} bytes at the start, {read} read): "
                                "check it again")
    for m in members:
        if m.broken:
            raise error(path, m.name, f"member {m.name!r} (bytes {m.start}..{m.end} of {size}) is damaged: its "
                                      f"deflated data does not inflate ({m.broken}); {_FETCH_AGAIN}")
        if m.got != m.crc:
            what = "a tensor's data" if "/data/" in m.name else "a zip member"
            raise error(path, m.name, f"member {m.name!r} ({what}, bytes {m.start}..{m.end} of {size}) is damaged: "
                                      f"its CRC-32 is {m.got:08x}, the zip directory records {m.crc:08x}; "
                                      f"{_FETCH_AGAIN}")
    return FileCheck(path=path, size=size, sha256=digest, members=len(members))


__all__ = ["BLOCK_BYTES", "FileIntegrityError", "FileCheck", "check_zip_file"]
