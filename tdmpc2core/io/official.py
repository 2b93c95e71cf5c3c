"""The official TD-MPC2 code's ``.pt`` checkpoints: read and write ``{"model": state_dict}``.

The official ``TDMPC2.save`` writes ``torch.save({"model": WorldModel.state_dict()})``.
:func:`load_official` checks the file's integrity (every zip member's CRC-32:
:mod:`tdmpc2core.io.integrity`; a damaged file is refused before it is loaded), reads it with
``torch.load(..., weights_only=True)`` only (no pickled code runs) and returns the state dict
with numpy arrays (:func:`read_official`: also the file's size and SHA-256); :func:`save_official`
writes one. Converting a state dict to and from our parameters is
:mod:`tdmpc2core.model.official` (no PyTorch needed there)::

    from tdmpc2core.io.official import load_official, save_official
    from tdmpc2core.model.official import from_official, to_official
    w = from_official(load_official("model.pt"))
    save_official("copy.pt", to_official(w.params, w.target_qs))

Needs PyTorch: ``pip install -e '.[official]'``.
"""
from __future__ import annotations

import os
from typing import Mapping

import numpy as np

from .integrity import FileCheck, FileIntegrityError, check_zip_file

_NESTED_PREFIXES = ("_Qs.params", "_detach_Qs_params", "_target_Qs_params")


class OfficialCheckpointError(ValueError):
    """A ``.pt`` file that is not an official ``{"model": state_dict}`` checkpoint."""


class DamagedCheckpointError(OfficialCheckpointError, FileIntegrityError):
    """A ``.pt`` file that fails :func:`tdmpc2core.io.integrity.check_zip_file`: a member's
    CRC-32 differs (``member`` names it), truncated, not a zip archive, or a legacy non-zip
    PyTorch file (no checksums to check: refused)."""


def _torch(what: str):
    try:
        import torch
    except ImportError as e:
        raise ImportError(f"{what} an official .pt checkpoint needs PyTorch: pip install -e '.[official]' "
                          "(tdmpc2core.model.official converts dicts of numpy arrays without it)") from e
    return torch


def load_official(path) -> dict:
    """Read an official ``.pt`` checkpoint: the state dict of :func:`read_official` (which
    checks the file's integrity first; its docstring lists what is returned and raised)."""
    return read_official(path)[0]


def read_official(path) -> tuple[dict, FileCheck]:
    """Check, then read an official ``.pt`` checkpoint: :func:`~tdmpc2core.io.integrity.check_zip_file`
    (every zip member's CRC-32, the file's SHA-256 and size, one read), then
    ``torch.load(path, map_location="cpu", weights_only=True)`` and its ``"model"`` entry (a
    bare state dict is accepted too).

    Returns ``({key: value}, FileCheck)``: tensors as numpy arrays (data-less meta tensors,
    which newer tensordict versions write for module templates, and non-tensor entries such as
    ``__batch_size`` as they are), and the file's size, SHA-256 and members checked.

    Raises:
      ImportError: PyTorch is not installed.
      FileNotFoundError: no such file.
      DamagedCheckpointError (an OfficialCheckpointError): the file is damaged (a member's
        CRC-32 differs: named), truncated, not a zip archive, or a legacy non-zip torch file;
        nothing of it is loaded.
      pickle.UnpicklingError: the file holds pickled objects other than tensors and plain
        containers (``weights_only`` refuses to run their code).
      OfficialCheckpointError: the file is not a dict, or its ``"model"`` is not a dict.
    """
    torch = _torch("reading")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no official checkpoint at {path!r}")
    checked = check_zip_file(path, error=DamagedCheckpointError)
    obj = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(obj, Mapping):
        raise OfficialCheckpointError(f"{path}: expected a dict {{'model': state_dict}}, got {type(obj).__name__}")
    sd = obj["model"] if "model" in obj else obj
    if not isinstance(sd, Mapping):
        raise OfficialCheckpointError(f"{path}: 'model' is a {type(sd).__name__}, not a state dict")

    def np_(v):
        if isinstance(v, torch.Tensor) and not v.is_meta:
            return v.detach().cpu().numpy()
        return v

    return {k: np_(v) for k, v in sd.items()}, checked


def save_official(path, state_dict: Mapping) -> dict:
    """Write ``{"model": state_dict}`` with ``torch.save``, as the official ``TDMPC2.save``
    does, for a state dict of :func:`tdmpc2core.model.official.to_official` (numpy arrays).

    A nested-layout state dict (``_detach_Qs_params.*`` keys) gets the non-tensor entries
    that tensordict 0.8.3 (the later official code's pin) writes: ``<prefix>.__batch_size``
    = ``torch.Size([K])`` and ``<prefix>.__device`` = None for ``_Qs.params``,
    ``_detach_Qs_params`` and ``_target_Qs_params``. Returns the dict written.

    Raises:
      ImportError: PyTorch is not installed.
      OfficialCheckpointError: a value that is not a float32 array.
    """
    torch = _torch("writing")
    sd = {}
    for k, v in state_dict.items():
        a = np.asarray(v)
        if a.dtype != np.float32:
            raise OfficialCheckpointError(f"{k!r} has dtype {a.dtype}; official checkpoints hold float32 tensors")
        sd[k] = torch.from_numpy(np.array(a, order="C", copy=True))
    if any(k.startswith("_detach_Qs_params.") for k in sd):
        K = int(sd["_Qs.params.0.weight"].shape[0])
        for prefix in _NESTED_PREFIXES:
            sd[f"{prefix}.__batch_size"] = torch.Size([K])
            sd[f"{prefix}.__device"] = None
    torch.save({"model": sd}, os.fspath(path))
    return sd


__all__ = ["OfficialCheckpointError", "DamagedCheckpointError", "load_official", "read_official", "save_official"]
