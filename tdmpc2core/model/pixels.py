"""Pixel observations: the random-shift augmentation of the rgb encoder (spec §3.2 rgb row,
§12 item 17; the official ``ShiftAug`` of 5f6fade ``tdmpc2/common/layers.py``).

An rgb observation is a flat uint8 vector ``[..., C*H*W]`` (the official (C, H, W) frame
stack, channels first, flattened in C order; C = 9: 3 frames x RGB, oldest first; H = W = 64).

ShiftAug pads every image by ``pad`` = 3 pixels on each side, repeating the border pixels,
and samples the padded image bilinearly (zero padding outside it, ``align_corners=False``)
at a grid shifted by one random integer per image and axis in [0, 2 pad]. In exact
arithmetic that is the integer crop ``padded[:, sy:sy+H, sx:sx+W]``; in float32 the grid
is not exactly on the pixel centres (its coordinates are off by up to ~4e-6 pixel), so the
bilinear sample differs from the crop by up to ~2e-3 on the 0-255 scale in about a third
of the pixels (measured against torch 2.13 on CPU, 64x64x9 uint8 images). :func:`shift_aug`
computes the official float32 grid and bilinear sample (the reference), not the crop.
"""
from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp

#: the official ShiftAug's padding (pixels on each side)
PAD = 3
#: the image side the official conv encoder assumes (spec §2 "Pixels")
IMAGE_SIZE = 64
#: the update and the planner take their ShiftAug keys as ``jax.random.fold_in(key, AUG_FOLD)``
#: of a key they already receive, and only for rgb (the splits of a state run's keys, hence
#: its random streams, are unchanged)
AUG_FOLD = 0x5A17


def aug_key(key):
    """The ShiftAug key derived from ``key`` (:data:`AUG_FOLD`); None for a None key."""
    return None if key is None else jax.random.fold_in(key, AUG_FOLD)


def _base_grid(h: int, pad: int) -> np.ndarray:
    """The official ShiftAug's normalised sample coordinates [h] (float32):
    ``linspace(-1 + eps, 1 - eps, h + 2 pad)[:h]`` with eps = 1 / (h + 2 pad), computed as
    torch's CPU linspace does (start + i * step for the first half of the points,
    end - (n - 1 - i) * step for the second, step = (end - start) / (n - 1), all float32)."""
    f = np.float32
    n = h + 2 * pad
    eps = 1.0 / n
    start, end = f(-1.0 + eps), f(1.0 - eps)
    step = (end - start) / f(n - 1)
    i = np.arange(n)
    grid = np.where(i < n // 2, start + step * i.astype(f), end - step * (n - 1 - i).astype(f)).astype(f)
    return grid[:h]


def draw_shifts(key, lead_shape, pad: int = PAD):
    """One random integer shift per image and axis, uniform in [0, 2 pad]: int32
    [*lead_shape, 2], the last axis (x = width, y = height) as the official ShiftAug's
    ``shift[..., 0]`` / ``shift[..., 1]``. Drawn with ``jax.random.randint`` (not torch's
    stream: docs/deviations.md F1)."""
    return jax.random.randint(key, tuple(lead_shape) + (2,), 0, 2 * pad + 1, jnp.int32)


def _axis_sample(base, shift, size_padded):
    """Per image: the low index [N, h] (int32), and the weights of the low and high
    neighbours [N, h] on one axis, as torch's grid_sample (bilinear, align_corners=False)
    computes them on the CPU: unnormalise ``((g + 1) * size - 1) / 2``, low = floor, weights
    ``high - x`` and ``x - low``."""
    f = jnp.float32
    g = base[None, :] + shift.astype(f)[:, None] * f(2.0 / size_padded)
    x = ((g + f(1.0)) * f(size_padded) - f(1.0)) / f(2.0)
    lo = jnp.floor(x)
    return lo.astype(jnp.int32), (lo + f(1.0)) - x, x - lo


def shift_aug(images, shifts, pad: int = PAD):
    """The official ShiftAug (5f6fade ``layers.ShiftAug``) with given shifts.

    Args:
      images: [N, C, H, W] (H == W), any real or uint8 dtype; converted to float32 (0-255
        values stay 0-255).
      shifts: [N, 2] integers in [0, 2 pad] (x then y, as :func:`draw_shifts`).
    Returns:
      float32 [N, C, H, W]: the replicate-padded image sampled bilinearly at the shifted
      grid (zero outside the padded image), the official float32 arithmetic (module doc).
    Raises:
      ValueError: images not 4-D or not square, shifts not [N, 2].
    """
    if images.ndim != 4 or images.shape[-1] != images.shape[-2]:
        raise ValueError(f"shift_aug: images must be [N, C, H, W] with H == W, got shape {images.shape}")
    n, _, h, _ = images.shape
    if tuple(shifts.shape) != (n, 2):
        raise ValueError(f"shift_aug: shifts must be [N, 2] = [{n}, 2] (x, y per image), got shape {shifts.shape}")
    x = jnp.asarray(images).astype(jnp.float32)
    xp = jnp.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="edge")
    size = h + 2 * pad
    base = jnp.asarray(_base_grid(h, pad))
    x0, e, w = _axis_sample(base, shifts[:, 0], size)  # columns: weights of west (x0) and east (x0 + 1)
    y0, s, nn_ = _axis_sample(base, shifts[:, 1], size)  # rows: weights of north (y0) and south (y0 + 1)

    def one(img, x0, y0, e, w, s, nn_):
        def rows(y):
            ok = (y >= 0) & (y < size)
            r = img[:, jnp.clip(y, 0, size - 1), :]  # [C, h, size]
            return r * ok[None, :, None]

        def cols(r, xi):
            ok = (xi >= 0) & (xi < size)
            c = r[:, :, jnp.clip(xi, 0, size - 1)]  # [C, h, h]
            return c * ok[None, None, :]

        north, south = rows(y0), rows(y0 + 1)
        nw, ne = cols(north, x0), cols(north, x0 + 1)
        sw, se = cols(south, x0), cols(south, x0 + 1)
        s_, n_ = s[None, :, None], nn_[None, :, None]
        e_, w_ = e[None, None, :], w[None, None, :]
        # torch's order: nw * (s e) + ne * (s w) + sw * (n e) + se * (n w)
        return nw * (s_ * e_) + ne * (s_ * w_) + sw * (n_ * e_) + se * (n_ * w_)

    return jax.vmap(one)(xp, x0, y0, e, w, s, nn_)


def crop_shift(images, shifts, pad: int = PAD):
    """The exact-arithmetic equivalent of :func:`shift_aug`: the integer crop
    ``edge_pad(images)[:, :, sy:sy+H, sx:sx+W]`` (float32 [N, C, H, W]). Not used by the
    model (it differs from the official float32 sample, module doc); kept to measure that."""
    n, _, h, _ = images.shape
    xp = jnp.pad(jnp.asarray(images).astype(jnp.float32), ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="edge")
    return jax.vmap(lambda im, s: jax.lax.dynamic_slice(im, (0, s[1], s[0]), (im.shape[0], h, h)))(xp, shifts)
