"""Checkpoints of a training run: save, verify, list, restore, prune. No pickle.

A checkpoint is a directory ``{checkpoint_dir}/step_{agent_steps:012d}/`` holding two files:

* ``state.msgpack``: the arrays, serialised with :func:`flax.serialization.msgpack_serialize`
  (numpy arrays as msgpack extension records: dtype, shape, raw bytes; arrays over 1 GiB
  are split into chunks by flax). It holds one dict ``{"tree": {leaf path: array},
  "host": {name: array}}``: ``tree`` is the run state pytree flattened by
  :func:`jax.tree_util.tree_flatten_with_path` (leaf paths as :func:`jax.tree_util.keystr`
  writes them, e.g. ``['state'].agent.params['encoder']...``); ``host`` holds free-form numpy
  arrays kept on the host (e.g. the evaluation history).
* ``manifest.json``: the format name and version, the step, the ``settings`` the run was
  made with (compared on restore), free ``meta`` data, the shape and dtype of every leaf,
  and the payload's byte size and SHA-256.

Writes are atomic: both files go into a temporary sibling directory ``.tmp-step_...``
(``fsync``'d), which is then renamed to its final name. A process killed mid-write (even
by SIGKILL) leaves at most a ``.tmp-*`` directory, which is never taken for a checkpoint
and is removed by the next :func:`save`. A checkpoint whose payload was damaged afterwards
(truncated by a full disk or a broken copy) fails its checksum: :func:`latest_checkpoint`
skips it with a :class:`CheckpointWarning` and returns the previous complete one;
:func:`restore` of that very path raises :class:`CorruptCheckpointError`.

Generic over pytrees and agents. An agent uses it in three calls::

    info = checkpoint.save(directory, step, {"state": state}, settings=settings,
                           host=history_arrays, meta=meta, keep=k)
    path = checkpoint.latest_checkpoint(directory)           # None: no checkpoint yet
    tree, host, manifest = checkpoint.restore(path, {"state": template}, settings=settings)

where ``template`` is a pytree of the same structure (arrays or ``jax.ShapeDtypeStruct``, e.g.
``jax.eval_shape`` of the agent's ``init``), and ``settings`` a JSON-serialisable dict of
everything that changes shapes or results (hyperparameters, env, seeds, run length,
evaluation protocol). :class:`tdmpc2core.TDMPC2` does this in ``save_checkpoint`` /
``restore``; a multi-task agent whose state is a NamedTuple pytree with a leading seed axis
does the same with its own ``init`` as the template and its own config as the settings.
Typed PRNG key arrays (``jax.random.key``) are stored as their key data and re-wrapped.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

import numpy as np

FORMAT = "tdmpc2core-checkpoint"
FORMAT_VERSION = 1
PAYLOAD = "state.msgpack"
MANIFEST = "manifest.json"
_NAME = re.compile(r"^step_(\d+)$")
_TMP_PREFIX = ".tmp-"


class CheckpointError(ValueError):
    """Base class of the checkpoint errors (a ``ValueError``)."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint that is incomplete or damaged (no manifest, checksum or size mismatch,
    unreadable payload, wrong format)."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint made with other settings, or whose arrays do not fit the template."""


class CheckpointWarning(UserWarning):
    """A damaged checkpoint was skipped in favour of an older complete one."""


@dataclasses.dataclass(frozen=True)
class CheckpointInfo:
    """What :func:`save` wrote: ``path``, ``step``, payload ``bytes`` (the manifest adds
    about a kilobyte per 100 leaves), ``seconds`` spent (device-to-host copy included)."""

    path: Path
    step: int
    bytes: int
    seconds: float


def checkpoint_name(step: int) -> str:
    """``step_{step:012d}``: names sort by step."""
    if int(step) < 0:
        raise ValueError(f"checkpoint step must be >= 0, got {step}")
    return f"step_{int(step):012d}"


# ------------------------------------------------------------------------- flattening
def _is_key_array(x) -> bool:
    import jax

    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def flatten(tree) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    """(``{leaf path: numpy array}``, ``{leaf path: {"shape", "dtype"[, "key_impl"]}}``)
    of a pytree (device arrays are copied to the host)."""
    import jax

    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    names, values, specs = [], [], {}
    for path, leaf in leaves:
        name = jax.tree_util.keystr(path)
        if name in specs:
            raise ValueError(f"checkpoint: two leaves share the path {name!r}")
        spec = {}
        if _is_key_array(leaf):
            spec["key_impl"] = str(jax.random.key_impl(leaf))
            leaf = jax.random.key_data(leaf)
        names.append(name)
        values.append(leaf)
        specs[name] = spec
    arrays = {}
    for name, value in zip(names, jax.device_get(values)):  # one transfer for the whole tree
        arr = np.asarray(value)
        if arr.dtype == object:
            raise TypeError(f"checkpoint: leaf {name} is not an array (type {type(value).__name__})")
        arrays[name] = arr
        specs[name].update(shape=list(arr.shape), dtype=arr.dtype.name)
    return arrays, specs


def _template_specs(template) -> tuple[list[str], dict[str, dict], Any]:
    """Leaf paths, {path: {"shape", "dtype", "key"}} (key data's shape for typed keys) and treedef."""
    import jax

    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    names, specs = [], {}
    for path, leaf in leaves:
        name = jax.tree_util.keystr(path)
        is_key = _is_key_array(leaf)
        if is_key:
            kd = jax.eval_shape(jax.random.key_data, leaf)
            shape, dtype = tuple(kd.shape), np.dtype(kd.dtype)
        else:
            shape, dtype = tuple(np.shape(leaf)), np.dtype(leaf.dtype)
        names.append(name)
        specs[name] = {"shape": list(shape), "dtype": dtype.name, "key": is_key}
    return names, specs, treedef


# ------------------------------------------------------------------------- settings
def _normalise(x):
    """JSON round trip: tuples become lists, numpy scalars Python numbers."""
    return json.loads(json.dumps(x, sort_keys=True, default=_json_default))


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _flat_items(d: Mapping, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(_flat_items(v, key + "."))
        else:
            out[key] = v
    return out


def compare_settings(stored: Mapping, current: Mapping, ignore: Iterable[str] = ()) -> list[str]:
    """The differences between two settings dicts, one line per dotted key
    (``"agent.horizon: checkpoint 3, now 4"``); keys in ``ignore`` (or under them) are skipped.
    A key present on one side only is a difference."""
    a, b = _flat_items(_normalise(dict(stored))), _flat_items(_normalise(dict(current)))
    ignore = tuple(ignore)
    missing = object()
    diffs = []
    for key in sorted(set(a) | set(b)):
        if any(key == i or key.startswith(i + ".") for i in ignore):
            continue
        va, vb = a.get(key, missing), b.get(key, missing)
        if va != vb:
            sa = "(absent)" if va is missing else json.dumps(va)
            sb = "(absent)" if vb is missing else json.dumps(vb)
            diffs.append(f"{key}: checkpoint {sa}, now {sb}")
    return diffs


# ------------------------------------------------------------------------- writing
def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_payload(path: Path, data: bytes) -> None:
    """Write and fsync the payload (a seam for the kill-during-write tests)."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _publish(tmp: Path, final: Path) -> None:
    """Rename the finished temporary directory onto its final name (atomic)."""
    os.rename(tmp, final)


def save(directory, step: int, tree, *, settings: Mapping, host: Optional[Mapping[str, np.ndarray]] = None,
         meta: Optional[Mapping] = None, keep: Optional[int] = None) -> CheckpointInfo:
    """Write ``tree`` (any pytree of arrays) and ``host`` arrays as checkpoint ``step``.

    Args:
      directory: the run's checkpoint folder (created if needed).
      step: the checkpoint's position, in the run's own unit (agent steps for the agents
        here); names the directory ``step_{step:012d}``. An existing checkpoint of the same
        step is replaced (the new one is complete before the old one is removed).
      tree: the run state (device or numpy arrays; typed PRNG keys allowed).
      settings: JSON-serialisable dict of everything that changes shapes or results;
        :func:`restore` compares it.
      host: extra numpy arrays by name (e.g. the evaluation history), restored as they are.
      meta: JSON-serialisable information kept in the manifest, not compared.
      keep: keep only the ``keep`` newest checkpoints afterwards (None: keep all).
    Returns:
      :class:`CheckpointInfo` (path, step, payload bytes, seconds).
    Raises:
      TypeError: a leaf that is not an array, or settings/meta that are not JSON-serialisable.
      OSError: the folder cannot be written.
    """
    import flax.serialization

    t0 = time.perf_counter()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    arrays, specs = flatten(tree)
    host_arrays = {str(k): np.asarray(v) for k, v in (host or {}).items()}
    for k, v in host_arrays.items():
        if v.dtype == object:
            raise TypeError(f"checkpoint: host array {k!r} has dtype object (not allowed: no pickle)")
    data = flax.serialization.msgpack_serialize({"tree": arrays, "host": host_arrays})
    digest = hashlib.sha256(data).hexdigest()
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "step": int(step),
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": _normalise(dict(settings)),
        "meta": _normalise(dict(meta or {})),
        "leaves": specs,
        "host": {k: {"shape": list(v.shape), "dtype": v.dtype.name} for k, v in host_arrays.items()},
        "payload": {"file": PAYLOAD, "bytes": len(data), "sha256": digest},
    }
    final = directory / checkpoint_name(step)
    tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{final.name}-", dir=directory))
    try:
        _write_payload(tmp / PAYLOAD, data)
        del data
        with open(tmp / MANIFEST, "w") as fh:
            fh.write(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(tmp)
        old = None
        if final.exists():  # the same step again (a resumed run): move the old one aside first
            old = directory / f"{_TMP_PREFIX}old-{final.name}-{os.getpid()}"
            os.rename(final, old)
        _publish(tmp, final)
        _fsync_dir(directory)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    if keep is not None:
        prune(directory, keep)
    return CheckpointInfo(path=final, step=int(step), bytes=int(manifest["payload"]["bytes"]),
                          seconds=time.perf_counter() - t0)


def prune(directory, keep: int) -> list[Path]:
    """Delete all but the ``keep`` newest checkpoints of ``directory`` (and leftover
    ``.tmp-*`` directories of killed writes). Returns the deleted checkpoint paths.

    Raises ValueError if ``keep < 1``."""
    if int(keep) < 1:
        raise ValueError(f"keep_checkpoints must be >= 1, got {keep}")
    directory = Path(directory)
    if not directory.is_dir():
        return []
    for p in directory.iterdir():
        if p.name.startswith(_TMP_PREFIX) and p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
    entries = _entries(directory)
    removed = []
    for _, p in entries[:-int(keep)] if len(entries) > int(keep) else []:
        # rename first, so a kill during the deletion leaves a .tmp-* folder, not a damaged checkpoint
        doomed = directory / f"{_TMP_PREFIX}del-{p.name}-{os.getpid()}"
        os.rename(p, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        removed.append(p)
    return removed


def clear(directory) -> list[Path]:
    """Delete every checkpoint of ``directory`` (and ``.tmp-*`` leftovers); returns them."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = []
    for p in sorted(directory.iterdir()):
        if p.is_dir() and (_NAME.match(p.name) or p.name.startswith(_TMP_PREFIX)):
            doomed = directory / f"{_TMP_PREFIX}del-{p.name}-{os.getpid()}"
            os.rename(p, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
            if _NAME.match(p.name):
                removed.append(p)
    return removed


# ------------------------------------------------------------------------- reading
def _entries(directory: Path) -> list[tuple[int, Path]]:
    out = []
    for p in directory.iterdir():
        m = _NAME.match(p.name)
        if m and p.is_dir():
            out.append((int(m.group(1)), p))
    return sorted(out)


def list_checkpoints(directory) -> list[Path]:
    """Checkpoint directories of ``directory`` (oldest first), complete or not (verify with
    :func:`verify`); ``.tmp-*`` directories of unfinished writes are not listed. A missing
    ``directory`` has none."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return [p for _, p in _entries(directory)]


def read_manifest(path) -> dict:
    """The manifest of checkpoint ``path``, without checking the payload.

    Raises:
      FileNotFoundError: ``path`` does not exist.
      CorruptCheckpointError: no manifest, unreadable JSON, or another format / version.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    mpath = path / MANIFEST
    if not mpath.is_file():
        raise CorruptCheckpointError(f"checkpoint {path} is incomplete: no {MANIFEST} (a write cut short?)")
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, ValueError) as exc:
        raise CorruptCheckpointError(f"checkpoint {path}: {MANIFEST} is unreadable ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CorruptCheckpointError(f"checkpoint {path}: {MANIFEST} is not a {FORMAT} manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CorruptCheckpointError(
            f"checkpoint {path}: format version {manifest.get('format_version')!r}; this version of "
            f"tdmpc2core reads version {FORMAT_VERSION} only")
    return manifest


def _read_payload(path: Path, manifest: dict) -> bytes:
    ppath = path / manifest["payload"]["file"]
    if not ppath.is_file():
        raise CorruptCheckpointError(f"checkpoint {path} is incomplete: {ppath.name} is missing")
    data = ppath.read_bytes()
    want = int(manifest["payload"]["bytes"])
    if len(data) != want:
        raise CorruptCheckpointError(
            f"checkpoint {path} is damaged: {ppath.name} has {len(data)} bytes, the manifest says {want} "
            "(truncated?)")
    if hashlib.sha256(data).hexdigest() != manifest["payload"]["sha256"]:
        raise CorruptCheckpointError(f"checkpoint {path} is damaged: {ppath.name} fails its SHA-256 checksum")
    return data


def verify(path) -> dict:
    """Check that checkpoint ``path`` is complete and undamaged; returns its manifest.

    Raises FileNotFoundError or :class:`CorruptCheckpointError` (the message says which)."""
    path = Path(path)
    manifest = read_manifest(path)
    _read_payload(path, manifest)
    return manifest


def latest_checkpoint(directory) -> Optional[Path]:
    """The newest complete, undamaged checkpoint of ``directory``, or None if it has none.

    Damaged or incomplete ones are skipped with a :class:`CheckpointWarning` naming them and
    the reason. Raises :class:`CorruptCheckpointError` when checkpoints exist but none is
    usable (never a silent fresh start)."""
    entries = list_checkpoints(directory)
    problems = []
    for p in reversed(entries):
        try:
            verify(p)
        except CorruptCheckpointError as exc:
            problems.append(str(exc))
            warnings.warn(f"skipping checkpoint: {exc}; trying the previous one", CheckpointWarning, stacklevel=2)
            continue
        return p
    if problems:
        raise CorruptCheckpointError(
            f"{directory}: no usable checkpoint ({len(problems)} damaged or incomplete: "
            + "; ".join(problems) + "). Delete the folder to start the run over.")
    return None


def _is_below(name: str, prefix: str) -> bool:
    return len(name) > len(prefix) and name.startswith(prefix) and name[len(prefix)] in "[."


def regrouped_leaves(stored: Mapping[str, Mapping], specs: Mapping[str, Mapping]) -> dict:
    """How a template's leaves are read from a checkpoint that holds the same arrays grouped
    otherwise: an optimizer state saved as one flat vector per parameter group (``optax.flatten``,
    the CPU kernels' layout) restored into one array per parameter (the reference kernels'), or
    the reverse (:func:`tdmpc2core.model.update.make_optimizers`, :attr:`tdmpc2core.model.kernels.Kernels.flat_optimizer`).

    ``stored``: the manifest's ``{leaf path: {"shape", "dtype"}}`` in the saved (tree) order;
    ``specs``: the template's. Returns ``{template path: (kind, [stored paths])}`` for the
    template leaves not stored as such: ``("split", [P])`` when the checkpoint holds a leaf P,
    shaped lead + [N], whose path is a prefix of theirs and whose N is the sum of their sizes
    past the same lead (the template order is the concatenation order), ``("concat", [P/...])``
    when the checkpoint holds leaves below the template path (concatenated in the saved order)
    of the same dtype. Anything else is left out, to be reported as a mismatch by the caller.
    """
    out = {}
    missing = [n for n in specs if n not in stored]
    for p in [p for p in stored if p not in specs]:
        below = [n for n in missing if _is_below(n, p)]
        if not below:
            continue
        lead, dtype = list(stored[p]["shape"][:-1]), stored[p]["dtype"]
        sizes = [int(np.prod(specs[n]["shape"][len(lead):], dtype=np.int64)) for n in below]
        if all(specs[n]["shape"][:len(lead)] == lead and specs[n]["dtype"] == dtype for n in below) \
                and stored[p]["shape"] and sum(sizes) == stored[p]["shape"][-1]:
            off = 0
            for n, k in zip(below, sizes):
                out[n] = ("split", [p], off, k)
                off += k
    for n in missing:
        if n in out:
            continue
        parts = [p for p in stored if _is_below(p, n)]
        if not parts or not specs[n]["shape"]:
            continue
        lead = specs[n]["shape"][:-1]
        ok = all(stored[p]["shape"][:len(lead)] == lead and stored[p]["dtype"] == specs[n]["dtype"] for p in parts)
        if ok and sum(int(np.prod(stored[p]["shape"][len(lead):], dtype=np.int64)) for p in parts) \
                == specs[n]["shape"][-1]:
            out[n] = ("concat", parts)
    return out


def _regroup(arrays: Mapping[str, Any], how: tuple, spec: Mapping) -> np.ndarray:
    """The template leaf ``spec`` from the stored ``arrays`` as :func:`regrouped_leaves` planned."""
    if how[0] == "split":
        _, (p,), off, k = how
        return np.asarray(arrays[p])[..., off:off + k].reshape(tuple(spec["shape"]))
    lead = tuple(spec["shape"][:-1])
    return np.concatenate([np.asarray(arrays[p]).reshape(lead + (-1,)) for p in how[1]], axis=-1)


def restore(path, template, *, settings: Optional[Mapping] = None, ignore: Iterable[str] = ()):
    """Read checkpoint ``path`` into the structure of ``template``.

    Args:
      path: a checkpoint directory (``.../step_000000001000``).
      template: a pytree with the structure, shapes and dtypes of the saved tree (arrays
        or ``jax.ShapeDtypeStruct``; ``jax.eval_shape`` of the initialiser costs nothing).
      settings: compared with the settings saved (None: not compared); ``ignore`` lists
        dotted keys that change neither shapes nor results.
    Returns:
      (tree of numpy arrays (typed PRNG keys re-wrapped), ``{name: numpy array}`` host
      arrays, manifest dict).
    Raises:
      FileNotFoundError: ``path`` does not exist.
      CorruptCheckpointError: incomplete or damaged (checksum, size), or another format.
      CheckpointMismatchError: other settings (each differing key named with both values),
        or leaves whose paths, shapes or dtypes differ from the template's (named).
    """
    import flax.serialization
    import jax

    path = Path(path)
    manifest = read_manifest(path)
    if settings is not None:
        diffs = compare_settings(manifest.get("settings", {}), settings, ignore)
        if diffs:
            raise CheckpointMismatchError(
                f"checkpoint {path} was made with other settings than this run's ("
                + "; ".join(diffs) + ")")
    names, specs, treedef = _template_specs(template)
    stored = manifest["leaves"]
    regroup = regrouped_leaves(stored, specs)
    problems = []
    for n in names:
        if n in regroup:
            continue
        if n not in stored:
            problems.append(f"{n}: not in the checkpoint")
        elif ((stored[n]["shape"], stored[n]["dtype"], "key_impl" in stored[n])
              != (specs[n]["shape"], specs[n]["dtype"], specs[n]["key"])):
            problems.append(f"{n}: checkpoint {stored[n]['dtype']}{stored[n]['shape']}, "
                            f"expected {specs[n]['dtype']}{specs[n]['shape']}")
    used = {m for how in regroup.values() for m in how[1]}
    problems += [f"{n}: in the checkpoint only" for n in stored if n not in specs and n not in used]
    if problems:
        more = f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""
        raise CheckpointMismatchError(
            f"checkpoint {path} does not fit this agent's state: " + "; ".join(problems[:8]) + more)
    data = _read_payload(path, manifest)
    try:
        payload = flax.serialization.msgpack_restore(data)
    except Exception as exc:  # a damaged payload whose checksum matched a damaged manifest
        raise CorruptCheckpointError(f"checkpoint {path}: payload unreadable ({exc})") from None
    del data
    arrays = payload.get("tree", {})
    leaves = []
    for n in names:
        arr = _regroup(arrays, regroup[n], specs[n]) if n in regroup else np.asarray(arrays[n])
        if specs[n]["key"]:
            arr = jax.random.wrap_key_data(arr, impl=stored[n]["key_impl"])
        leaves.append(arr)
    tree = jax.tree_util.tree_unflatten(treedef, leaves)
    host = {k: np.asarray(v) for k, v in payload.get("host", {}).items()}
    return tree, host, manifest


__all__ = [
    "FORMAT", "FORMAT_VERSION", "CheckpointError", "CorruptCheckpointError", "CheckpointMismatchError",
    "CheckpointWarning", "CheckpointInfo", "checkpoint_name", "save", "prune", "clear", "list_checkpoints",
    "read_manifest", "verify", "latest_checkpoint", "restore", "compare_settings", "flatten",
]
