"""One writer per checkpoint folder: an exclusive lock held while a training job uses it.

A second process that opens the same folder (a job resubmitted or requeued while the first
one is still writing its checkpoint, the same command started twice, two workflows sharing
``checkpoint_dir``) gets :class:`FolderInUseError` at once, naming the folder and the holder,
instead of both writing checkpoints and ``attempts.json`` into it.

The lock is ``flock(2)`` on ``<folder>/.lock`` (Linux emulates it with POSIX record locks
on NFS, so it holds across the nodes of a cluster on NFSv4 or with lockd). The kernel
releases it when the holder exits, however it exits (SIGKILL, a node's reboot), so a stale
lock never blocks a rerun; the file itself stays and says who held it last.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import time
from pathlib import Path
from typing import Iterator, Optional, Union

LOCK_NAME = ".lock"


class FolderInUseError(RuntimeError):
    """Another process holds the folder's lock. ``folder``: the folder; ``holder``: what the
    lock file says of its holder (pid, host, start time), or '' if it says nothing."""

    def __init__(self, folder: Path, holder: str):
        self.folder, self.holder = Path(folder), holder
        super().__init__(
            f"the checkpoint folder {folder} is in use by another process ({holder or 'holder unknown'}): "
            "two processes must never write one checkpoint folder at once. Wait for that job to end "
            "(or stop it), then rerun; if it is a second workflow, give it its own checkpoint_dir.")


@contextlib.contextmanager
def exclusive_folder(folder: Optional[Union[str, Path]]) -> Iterator[None]:
    """Hold ``folder``'s lock (creating the folder) for the ``with`` block; ``None``: no-op.

    Raises:
      FolderInUseError: another process (or another open of it in this process) holds it.
    """
    if folder is None:
        yield
        return
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip()
            raise FolderInUseError(folder, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, (f"pid {os.getpid()} on {socket.gethostname()} since "
                       f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n").encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
