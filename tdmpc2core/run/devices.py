"""Where the compiled programs run: one device, seeds sharded over devices, or the multi-task
batch split over devices, in one process or in several joined by ``jax.distributed``.

Three placements, one per kind of run (docs/pipeline.md "GPUs per job"):

* :class:`SeedSharding` (single-task agents): the seed axis of the run state split over a
  one-dimensional mesh ``("seeds",)``. Each device runs the vmapped per-seed program on its
  own seeds inside ``jax.shard_map`` (no communication: seeds are independent), so a seed's
  numbers are those of the one-device run. The mesh is chosen per call from the number of
  seeds (``devices=None``: every visible device when the seed count divides evenly, else one).
  Suites stepped on the host (dm_control, Meta-World, MyoSuite: ``Env.steps_on_host``) run
  on one device: their simulator callbacks are not safe to call from several devices at once.
* :class:`DataParallel` (the multi-task agent): a mesh ``("data",)`` over which each update's
  global batch is split (:meth:`DataParallel.constrain`, a sharding constraint on the batch
  axis), parameters, optimizer state and the pool replicated; XLA partitions the update and
  inserts the gradient reductions. The same global batch and sampled rows as one device.
* no mesh (:data:`ONE_DEVICE`): JAX's default device, the programs as before.

Multi-process runs (:func:`initialize_distributed`): ``jax.distributed.initialize`` before
anything touches a device, from SLURM's environment or a coordinator address; every process
then sees the global device list. Only the multi-task agent spans processes (its state is
replicated, so every process holds it whole: :func:`to_host` reads the local copy).
Importing this module touches no device.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from typing import Optional, Sequence

import numpy as np

SEED_AXIS = "seeds"
DATA_AXIS = "data"

#: environment variables the SLURM detection of jax.distributed reads (all set inside a job step, `srun`)
_SLURM_VARS = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")


def _jax():
    import jax

    return jax


def device_list(devices) -> Optional[list]:
    """The devices a ``devices`` argument names, or None for "decide from the run".

    Accepted: None or ``"auto"`` (decided per run: :func:`SeedSharding.mesh_for`,
    :func:`DataParallel.build`); an int N >= 1 (the first N of ``jax.devices()``, the global
    list in a multi-process job); ``"all"`` (every device); a sequence of ``jax.Device``; a
    ``jax.sharding.Mesh`` (its devices, flattened).

    Raises:
      ValueError: N < 1, N more than the visible devices, an empty sequence, an unknown string.
      TypeError: anything else (named).
    """
    jax = _jax()
    if devices is None or (isinstance(devices, str) and devices == "auto"):
        return None
    if isinstance(devices, str):
        if devices == "all":
            return list(jax.devices())
        raise ValueError(f"devices={devices!r}: accepted None, 'auto', 'all', a device count, a list of "
                         "jax.Device or a jax.sharding.Mesh")
    if isinstance(devices, (bool, np.bool_)):
        raise TypeError(f"devices={devices!r}: a bool is not a device count")
    if isinstance(devices, (int, np.integer)):
        n, visible = int(devices), jax.devices()
        if n < 1:
            raise ValueError(f"devices={n}: at least 1")
        if n > len(visible):
            raise ValueError(f"devices={n}: only {len(visible)} visible ({visible[0].platform}); "
                             "set CUDA_VISIBLE_DEVICES / the job's GPUs, or ask for fewer")
        return list(visible[:n])
    if isinstance(devices, jax.sharding.Mesh):
        return list(devices.devices.reshape(-1))
    if isinstance(devices, (list, tuple)):
        bad = [d for d in devices if not isinstance(d, jax.Device)]
        if bad:
            raise TypeError(f"devices: expected jax.Device entries, got {type(bad[0]).__name__}")
        if not devices:
            raise ValueError("devices: an empty list; pass None (decided per run) or at least one device")
        return list(devices)
    raise TypeError(f"devices: expected None, 'auto', 'all', an int, a list of jax.Device or a jax.sharding.Mesh, "
                    f"got {type(devices).__name__}")


def _per_process(n: int, n_proc: int) -> list:
    """``n`` devices of a job of ``n_proc`` processes: ``n / n_proc`` of each process's (in order).

    Raises ValueError: ``n`` is not a positive multiple of the process count, or more than a
    process has."""
    jax = _jax()
    if n < 1 or n % n_proc:
        raise ValueError(f"devices={n}: in a job of {n_proc} processes the device count must be a multiple of "
                         f"{n_proc} (each process the same share); or use auto / all")
    per = n // n_proc
    out = []
    for p in range(n_proc):
        mine = [d for d in jax.devices() if d.process_index == p]
        if per > len(mine):
            raise ValueError(f"devices={n}: {per} per process, but process {p} has {len(mine)}")
        out += mine[:per]
    return out


def _fallback_warning(why: str) -> None:
    """The one-device fallback of ``devices=None``, said once per reason."""
    import warnings

    if why not in _WARNED:
        _WARNED.add(why)
        warnings.warn(f"devices=None: {why}; running on one device (pass a count that divides it to "
                      "use several)", RuntimeWarning, stacklevel=3)


_WARNED: set = set()


def _mesh(devs: Sequence, axis: str):
    jax = _jax()
    return jax.sharding.Mesh(np.asarray(devs, dtype=object), (axis,))


@dataclasses.dataclass(frozen=True)
class SeedSharding:
    """The seed axis split over devices (single-task agents).

    ``devices``: as :func:`device_list`; ``host_stepped``: the agent's env steps on the host
    (then one device only). :meth:`mesh_for` gives the mesh of a run of S seeds, or None for
    one device (the program without ``shard_map``)."""

    devices: object = None
    host_stepped: bool = False

    def __post_init__(self):
        devs = device_list(self.devices)
        if devs is not None and len(devs) > 1 and self.host_stepped:
            raise ValueError(f"devices: {len(devs)} devices asked for a suite stepped on the host (dm_control, "
                             "Meta-World, MyoSuite); its simulator callbacks run on one device: pass devices=None or 1")
        if devs is not None and len({d.process_index for d in devs}) > 1:
            raise ValueError("devices: single-task seeds are sharded over one process's devices; devices of "
                             f"{len({d.process_index for d in devs})} processes were given")

    def mesh_for(self, n_seeds: int):
        """The mesh of a run of ``n_seeds`` seeds: None (one device: the default, one device
        asked, a host-stepped suite, or ``devices=None`` with seeds that do not divide evenly
        over the visible devices) or a ``("seeds",)`` mesh.

        Raises:
          ValueError: devices given explicitly that do not divide ``n_seeds``."""
        jax = _jax()
        devs = device_list(self.devices)
        if devs is None:
            if self.host_stepped:
                return None
            local = jax.local_devices()
            devs = local if (len(local) > 1 and n_seeds % len(local) == 0) else None
            if devs is None and len(local) > 1:
                _fallback_warning(f"{n_seeds} seed(s) do not divide evenly over the {len(local)} visible devices")
        elif n_seeds % len(devs):
            raise ValueError(f"devices: {n_seeds} seed(s) do not divide evenly over {len(devs)} devices; "
                             "pass a device count that divides the number of seeds")
        if devs is None or len(devs) == 1:
            return None if devs is None or devs[0] == jax.devices()[0] else _mesh(devs, SEED_AXIS)
        return _mesh(devs, SEED_AXIS)


@dataclasses.dataclass(frozen=True)
class DataParallel:
    """The multi-task batch split over a ``("data",)`` mesh; None mesh: one device.

    Build with :meth:`build`. :meth:`constrain` marks a time-major batch's batch axis as split
    over the mesh (inside the compiled program); :meth:`replicate` places host or device
    values on every device of the mesh (every process passes the same values)."""

    mesh: object = None

    @classmethod
    def build(cls, devices, batch_size: int) -> "DataParallel":
        """The placement of a multi-task run with global batch ``batch_size``.

        ``devices=None``: every device (of every process) when the batch divides evenly, else
        one device (in a single-process job). Raises ValueError: the batch does not divide
        over the devices asked for (or over a multi-process job's devices)."""
        jax = _jax()
        n_proc = jax.process_count()
        if n_proc > 1 and isinstance(devices, (int, np.integer)) and not isinstance(devices, (bool, np.bool_)):
            devs = _per_process(int(devices), n_proc)
        else:
            devs = device_list(devices)
        if devs is None:
            devs = list(jax.devices())
            if batch_size % len(devs) and n_proc == 1:
                _fallback_warning(f"batch_size={batch_size} does not divide evenly over the {len(devs)} visible devices")
                devs = devs[:1]
        if n_proc > 1 and {d.process_index for d in devs} != set(range(n_proc)):
            raise ValueError(f"devices: in a job of {n_proc} processes every process needs devices of its own; "
                             f"{len(devs)} device(s) of process(es) {sorted({d.process_index for d in devs})} were "
                             "given: use auto, all, or a count that is a multiple of the process count")
        if batch_size % len(devs):
            raise ValueError(f"devices: batch_size={batch_size} does not divide evenly over {len(devs)} devices; "
                             "the global batch is split over the devices: choose a batch size that divides")
        if len(devs) == 1 and jax.process_count() == 1 and devs[0] == jax.devices()[0]:
            return cls(None)
        return cls(_mesh(devs, DATA_AXIS))

    @property
    def n_devices(self) -> int:
        return 1 if self.mesh is None else int(self.mesh.devices.size)

    def replicated(self):
        jax = _jax()
        return jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec())

    def replicate(self, tree):
        """``tree`` on every device of the mesh (unchanged without a mesh)."""
        if self.mesh is None:
            return tree
        jax = _jax()
        rep = self.replicated()
        return jax.tree_util.tree_map(lambda x: put(x, rep), tree)

    def batch_sharding(self, batch_axis: int, ndim: int):
        """The sharding of an array whose axis ``batch_axis`` (of ``ndim``) is the batch."""
        jax = _jax()
        spec = [None] * ndim
        spec[batch_axis] = DATA_AXIS
        return jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec(*spec))

    def constrain(self, batch):
        """A time-major :class:`~tdmpc2core.model.update.Batch` (obs [H+1, B, O], action [H, B,
        A], reward / terminated [H, B], task [B]) with its batch axis split over the mesh
        (inside a compiled program; unchanged without a mesh)."""
        if self.mesh is None:
            return batch
        jax = _jax()
        return jax.tree_util.tree_map(
            lambda x: jax.lax.with_sharding_constraint(x, self.batch_sharding(x.ndim - 1 if x.ndim == 1 else 1,
                                                                               x.ndim)), batch)

    def put_batches(self, batches, batch_axis: int):
        """Host batches (numpy leaves, the batch at ``batch_axis`` of the time-major leaves
        counted from their first axis, ``batch_axis - 1`` for ``task``) placed split over the
        mesh; every process passes the same values."""
        jax = _jax()
        if self.mesh is None:
            return jax.device_put(batches)
        fields = batches._fields
        out = {}
        for name, x in zip(fields, batches):
            ax = batch_axis - 1 if name == "task" else batch_axis
            out[name] = put(x, self.batch_sharding(ax, np.ndim(x)))
        return type(batches)(**out)


ONE_DEVICE = DataParallel(None)


def put(x, sharding):
    """``x`` (numpy or a JAX array) placed with ``sharding``. In one process ``jax.device_put`` (a
    no-op for an array already placed so); across processes every process passes the same
    values and builds its own devices' shards from its copy (``jax.make_array_from_callback``:
    ``device_put``'s check that the processes agree compares with ``==``, which NaN rows, the
    pool's reset rows, fail)."""
    jax = _jax()
    if jax.process_count() == 1 or (isinstance(x, jax.Array) and x.sharding == sharding):
        return jax.device_put(x, sharding)
    arr = np.asarray(local(x))
    return jax.make_array_from_callback(arr.shape, sharding, lambda index: arr[index])


def local(tree):
    """``tree`` with every array that spans devices replaced by its copy on this process's
    first device holding it (arrays replicated over a mesh: the same values); arrays split
    over devices of this process are left whole. For programs that run on one device (the
    multi-task evaluation, the host path's index draws) and for reading values on the host."""
    jax = _jax()

    def one(x):
        if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1 and x.is_fully_replicated:
            return x.addressable_shards[0].data
        return x

    return jax.tree_util.tree_map(one, tree)


def to_host(tree):
    """numpy copies of ``tree``'s arrays (replicated arrays read from the local copy; arrays
    split over devices of several processes gathered with
    ``jax.experimental.multihost_utils.process_allgather``, a collective every process must
    call)."""
    jax = _jax()

    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(local(x))

    return jax.tree_util.tree_map(one, tree)


def is_primary() -> bool:
    """Whether this process writes outputs and checkpoints (process 0; True without
    ``jax.distributed``)."""
    return process_index() == 0


def process_index() -> int:
    jax = _jax()
    return int(jax.process_index())


def process_count() -> int:
    jax = _jax()
    return int(jax.process_count())


def any_process(flag: bool) -> bool:
    """``flag`` or'ed over the processes of the job (a collective: every process calls it at
    the same point); ``flag`` itself in a single-process job."""
    jax = _jax()
    if jax.process_count() == 1:
        return bool(flag)
    from jax.experimental import multihost_utils

    return bool(np.any(multihost_utils.process_allgather(np.asarray(bool(flag)))))


def agree(value: int) -> int:
    """Process 0's ``value`` in every process (a collective); ``value`` in a single process."""
    jax = _jax()
    if jax.process_count() == 1:
        return int(value)
    from jax.experimental import multihost_utils

    return int(multihost_utils.broadcast_one_to_all(np.asarray(int(value), np.int64)))


def record(where=None) -> dict:
    """What ``run.json`` records of where a run ran (``where``: a placement with a ``mesh``, a
    ``jax.sharding.Mesh`` or None for one device): ``device_count`` (devices the programs
    use), ``process_count``, ``mesh`` ({axis: size}, {} for one device), ``platform``."""
    jax = _jax()
    mesh = where if isinstance(where, jax.sharding.Mesh) else getattr(where, "mesh", None)
    return {"device_count": 1 if mesh is None else int(mesh.devices.size), "process_count": int(jax.process_count()),
            "mesh": {} if mesh is None else {str(k): int(v) for k, v in mesh.shape.items()},
            "platform": jax.devices()[0].platform}


@dataclasses.dataclass(frozen=True)
class DistributedSettings:
    """How a job joins ``jax.distributed`` (the pipeline's ``cluster`` block and the CLI's
    ``--coordinator`` flags).

    coordinator: ``host:port`` of process 0's coordination service (None: from SLURM's
    environment); num_processes, process_id: None with SLURM (read from it);
    initialization_timeout: seconds to wait for every process to join (jax's default 300);
    local_device_count: fake CPU devices per process (tests; None: the real devices)."""

    coordinator: Optional[str] = None
    num_processes: Optional[int] = None
    process_id: Optional[int] = None
    initialization_timeout: int = 300
    local_device_count: Optional[int] = None


def in_slurm_step() -> bool:
    """Whether this process is one task of a SLURM job step of several (``srun`` starting more
    than one task: ``SLURM_STEP_NUM_TASKS``, else ``SLURM_NTASKS``, > 1, and the variables
    jax.distributed's SLURM detection reads): the case that detection handles. A job's batch
    script (no step) or a one-task step (``srun -n1``) is not."""
    try:
        n = int(os.environ.get("SLURM_STEP_NUM_TASKS", os.environ.get("SLURM_NTASKS", "1")))
        return all(v in os.environ for v in _SLURM_VARS) and n > 1
    except ValueError:
        return False


_INITIALIZED: dict = {}


def use_fake_cpu_devices(n: int) -> None:
    """Make the CPU platform show ``n`` devices (``--xla_force_host_platform_device_count``), for
    multi-device runs tested on a CPU. Must come before JAX touches a device.

    Raises:
      RuntimeError: JAX's backends are already initialised with another device count."""
    n = int(n)
    if n < 1:
        raise ValueError(f"local_device_count={n}: at least 1")
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        import jax

        if jax.local_device_count() == n:
            return
        raise RuntimeError(f"fake CPU devices ({n}) must be set before JAX touches a device "
                           f"({jax.local_device_count()} already visible)")
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    os.environ["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={n}"])


def initialize_distributed(settings: Optional[DistributedSettings] = None) -> bool:
    """Join ``jax.distributed`` when the job spans processes, before anything touches a device.

    With ``settings.coordinator``: ``jax.distributed.initialize(coordinator, num_processes,
    process_id, initialization_timeout=...)``. Without: inside a SLURM job step of more than
    one task (:func:`in_slurm_step`), ``jax.distributed.initialize()`` reads SLURM's
    environment (coordinator = the first node, process id = ``SLURM_PROCID``). Otherwise
    nothing (a one-process job). CPU collectives go through gloo (set in every case: it
    changes nothing on GPUs). Called twice: the second call does nothing.

    A join that does not complete within ``settings.initialization_timeout`` seconds (a process
    that never started, a coordinator that cannot be reached) ends the process with exit status
    :data:`JOIN_TIMEOUT_EXIT` and one line on stderr naming the coordinator and the timeout
    (left to itself, JAX aborts it: exit 134, a C++ stack trace and "another task died").

    Returns True when this process is part of a multi-process job.
    Raises:
      ValueError: a coordinator without ``num_processes`` and ``process_id``, or a bad address.
      RuntimeError: JAX already touched a device (initialize must come first: call this
        before building agents or arrays).
    """
    if _INITIALIZED:
        return _INITIALIZED["multi"]
    s = settings or DistributedSettings()
    if s.coordinator is None and not in_slurm_step():
        _INITIALIZED["multi"] = False
        return False
    if s.coordinator is not None:
        host, _, port = str(s.coordinator).rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"coordinator={s.coordinator!r}: expected host:port")
        if s.num_processes is None or s.process_id is None:
            raise ValueError("coordinator given without num_processes and process_id (both needed outside SLURM)")
    from jax._src import xla_bridge

    if s.local_device_count and not xla_bridge.backends_are_initialized():
        use_fake_cpu_devices(s.local_device_count)
    jax = _jax()

    if xla_bridge.backends_are_initialized():
        raise RuntimeError("jax.distributed must be initialized before JAX touches a device; call "
                           "initialize_distributed first (before building an agent or an array)")
    # CPU collectives (fake devices in tests, CPU-only jobs) through gloo; no effect on GPU programs
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    timeout = int(s.initialization_timeout)
    # JAX's own deadline comes later: the watchdog below ends a join that times out first, cleanly
    kw = {"initialization_timeout": timeout + JOIN_GRACE_SECONDS}
    import logging

    where = (f"coordinator {s.coordinator}, process {s.process_id} of {s.num_processes}" if s.coordinator is not None
             else "coordinator and process index from SLURM's environment"
             + (f" (coordinator {_slurm_coordinator()})" if _slurm_coordinator() else ""))
    logging.getLogger("tdmpc2core").warning(
        "joining jax.distributed (%s); waiting up to %d s for every process (identical arguments in each)",
        where, timeout)
    watchdog = threading.Timer(timeout, _join_timed_out, (where, timeout))
    watchdog.daemon = True
    watchdog.start()
    try:
        if s.coordinator is not None:
            jax.distributed.initialize(str(s.coordinator), int(s.num_processes), int(s.process_id), **kw)
        else:
            jax.distributed.initialize(**kw)
    finally:
        watchdog.cancel()
    _INITIALIZED["multi"] = True
    return True


#: exit status of a process whose jax.distributed join timed out (:func:`initialize_distributed`)
JOIN_TIMEOUT_EXIT = 5
#: seconds JAX's own join deadline is set past ours, so that ours (a clean exit) comes first
JOIN_GRACE_SECONDS = 30


def _slurm_coordinator() -> Optional[str]:
    """The first node of the SLURM step (where jax.distributed's SLURM detection puts the
    coordinator), or None outside SLURM."""
    nodes = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST")
    return nodes.split(",")[0] if nodes else None


def _join_timed_out(where: str, timeout: int) -> None:
    """The watchdog of a join that did not complete in time: one line on stderr, then the
    process ends with :data:`JOIN_TIMEOUT_EXIT` (the join cannot be interrupted from Python;
    JAX would abort the process with a C++ stack trace)."""
    import sys

    sys.stdout.flush()
    sys.stderr.write(f"error: jax.distributed: not every process joined within {timeout} s ({where}); check that "
                     "every process of the job started with the same coordinator and process count, that process 0 "
                     "runs on the coordinator's host and its port is reachable from the others, or raise the "
                     f"timeout (--distributed-timeout); exit status {JOIN_TIMEOUT_EXIT}\n")
    sys.stderr.flush()
    os._exit(JOIN_TIMEOUT_EXIT)


__all__ = ["SEED_AXIS", "DATA_AXIS", "device_list", "put", "SeedSharding", "DataParallel", "ONE_DEVICE", "local", "to_host",
           "is_primary", "process_index", "process_count", "any_process", "agree", "record", "DistributedSettings",
           "in_slurm_step", "initialize_distributed", "use_fake_cpu_devices", "JOIN_TIMEOUT_EXIT"]
