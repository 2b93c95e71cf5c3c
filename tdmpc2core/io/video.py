"""Evaluation videos as small MP4 files (H.264, yuv420p), written atomically.

The encoder is the ffmpeg binary that ``imageio-ffmpeg`` ships (``libx264``); browsers play
the result in a ``<video>`` element (``+faststart``: the index comes first).
"""
from __future__ import annotations

import contextlib
import os

import numpy as np

from .atomic import atomic_path

#: imageio-ffmpeg's switch that starts ffmpeg without its ``preexec_fn=os.setpgrp``
_NO_PREEXEC = "IMAGEIO_FFMPEG_NO_PREVENT_SIGINT"

#: the media type of the files :func:`write_video` writes (the report's data URIs)
VIDEO_MIME = "video/mp4"


def write_video(path: str | os.PathLike, frames, fps: float, *, crf: int = 28) -> int:
    """Write ``frames`` as an MP4 (H.264, yuv420p, ``fps`` frames per second) at ``path``,
    atomically (a temporary name, then rename: a killed job leaves no ``path``).

    Args:
        frames: uint8 [N, H, W, 3] RGB, N >= 1, H and W even.
        fps: frames per second (> 0; fractional rates are kept as ffmpeg's rational).
        crf: x264's constant rate factor (lower: larger and sharper; 28 keeps a 10-second
            192 x 192 episode near 100 KB).
    Returns:
        the file's size in bytes.
    Raises:
        ValueError: frames of another shape or dtype, odd sides, no frames, fps <= 0.
        RuntimeError: ffmpeg failed (its message).
    """
    import imageio_ffmpeg

    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames: uint8 [N, H, W, 3] accepted, got {frames.dtype} {list(frames.shape)}")
    n, h, w, _ = frames.shape
    if n < 1:
        raise ValueError("frames: at least one frame is needed")
    if h % 2 or w % 2:
        raise ValueError(f"frames of {w} x {h} pixels: H.264 with yuv420p needs even sides")
    if not (fps > 0 and np.isfinite(fps)):
        raise ValueError(f"fps={fps!r}: a positive number is accepted")
    with atomic_path(path, suffix=".mp4") as tmp:
        writer = imageio_ffmpeg.write_frames(
            str(tmp), (w, h), fps=float(fps), codec="libx264", pix_fmt_in="rgb24", pix_fmt_out="yuv420p",
            macro_block_size=2, quality=None, bitrate=None,
            output_params=["-crf", str(int(crf)), "-preset", "medium", "-movflags", "+faststart"],
            ffmpeg_log_level="error")
        with _no_python_in_forked_child():
            writer.send(None)  # starts ffmpeg
        try:
            for f in frames:
                writer.send(np.ascontiguousarray(f))
        except Exception as e:  # imageio-ffmpeg raises IOError with ffmpeg's output
            raise RuntimeError(f"ffmpeg could not write {path}: {e}") from None
        finally:
            writer.close()
        size = os.path.getsize(tmp)
    return int(size)


@contextlib.contextmanager
def _no_python_in_forked_child():
    """Start ffmpeg with no Python ``preexec_fn`` (unless the user set imageio-ffmpeg's switch).

    imageio-ffmpeg puts ffmpeg in its own process group with ``preexec_fn=os.setpgrp``, which
    makes subprocess fork the whole interpreter and run Python in the child before ``exec``. In
    a process with JAX's threads that can deadlock (imageio-ffmpeg issue #58), and JAX warns
    "os.fork() was called ... will likely lead to a deadlock" in every training job's log.
    Without it subprocess starts ffmpeg by vfork/exec, running no Python in the child. The one
    change: a Ctrl-C in the terminal reaches ffmpeg as well, which the atomic write handles (no
    partial file is left under the video's name).
    """
    if _NO_PREEXEC in os.environ:
        yield
        return
    os.environ[_NO_PREEXEC] = "1"
    try:
        yield
    finally:
        os.environ.pop(_NO_PREEXEC, None)


__all__ = ["VIDEO_MIME", "write_video"]
