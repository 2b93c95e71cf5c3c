"""tdmpc2core.pipeline.accelerators: what a local workflow run finds on the machine, read from
the environment and /dev alone (a fake /dev tree here), and the job slots it gives."""
import pytest

from tdmpc2core.pipeline.accelerators import Accelerators, accelerator_job_slots, local_accelerators


def fake_dev(tmp_path, *names):
    dev = tmp_path / "dev"
    dev.mkdir()
    for n in names:
        p = dev / n
        p.parent.mkdir(parents=True, exist_ok=True)
        p.touch()
    return dev


def test_nothing_found_on_a_plain_cpu_machine(tmp_path):
    dev = fake_dev(tmp_path, "null", "nvidiactl", "vfio/vfio", "dri/card0")
    assert local_accelerators({}, dev) == Accelerators(None, 0, "no accelerator device files or variables")


@pytest.mark.parametrize("names, env, kind, count", [
    (("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"), {}, "gpu", 2),
    (("nvidia0", "nvidia1"), {"CUDA_VISIBLE_DEVICES": "1"}, "gpu", 1),
    (("nvidia0",), {"CUDA_VISIBLE_DEVICES": ""}, None, 0),
    (("nvidia0",), {"CUDA_VISIBLE_DEVICES": "-1"}, None, 0),
    (("kfd", "dri/renderD128", "dri/renderD129"), {}, "gpu", 2),
    (("kfd", "dri/renderD128"), {"HIP_VISIBLE_DEVICES": "0,1,2"}, "gpu", 3),
    (("accel0",), {}, "tpu", 1),
    (("vfio/0", "vfio/1", "vfio/2", "vfio/3", "vfio/vfio"), {}, "tpu", 4),
    ((), {"TPU_ACCELERATOR_TYPE": "v5litepod-1"}, "tpu", 1),
    (("nvidia0", "accel0"), {"JAX_PLATFORMS": "cpu"}, None, 0),
    (("accel0",), {"JAX_PLATFORMS": "tpu,cpu"}, "tpu", 1),
])
def test_accelerators_found_from_device_files_and_variables(tmp_path, names, env, kind, count):
    found = local_accelerators(env, fake_dev(tmp_path, *names))
    assert (found.kind, found.count) == (kind, count), found
    assert found.evidence


def test_job_slots_auto_is_one_with_an_accelerator_and_unlimited_without():
    assert accelerator_job_slots("auto", Accelerators("tpu", 1, "x")) == 1
    assert accelerator_job_slots("auto", Accelerators("gpu", 8, "x")) == 1
    assert accelerator_job_slots("auto", Accelerators(None, 0, "x")) is None
    assert accelerator_job_slots(2, Accelerators("gpu", 2, "x")) == 2
    for bad in (0, -1, True, "1", 1.5):
        with pytest.raises(ValueError, match="cluster.local_accelerator_jobs=.*accepted: 'auto' or an integer >= 1"):
            accelerator_job_slots(bad, Accelerators(None, 0, "x"))


def test_config_value_is_checked_and_only_a_local_run_on_an_accelerator_is_limited():
    """cluster.local_accelerator_jobs is refused in one line unless auto or >= 1; the pipeline's
    slots (tdmpc2core.pipeline.jobs.use_local_accelerators) are set for a local run that found an
    accelerator only (a submitting run, e.g. SLURM, is never limited by it)."""
    import dataclasses

    from tdmpc2core.pipeline.checks import ConfigError
    from tdmpc2core.pipeline.cluster import _local_accelerator_jobs
    from tdmpc2core.pipeline.jobs import use_local_accelerators

    assert _local_accelerator_jobs("auto") == "auto" and _local_accelerator_jobs(3) == 3
    with pytest.raises(ConfigError, match=r"^config: cluster.local_accelerator_jobs=0: accepted: 'auto' or an integer"):
        _local_accelerator_jobs(0)

    @dataclasses.dataclass(frozen=True)
    class FakeCluster:
        local_accelerator_jobs: object = "auto"

    @dataclasses.dataclass(frozen=True)
    class FakePipeline:
        cluster: FakeCluster = FakeCluster()
        accelerator_slots: object = None

    tpu = Accelerators("tpu", 1, "x")
    assert use_local_accelerators(FakePipeline(), True, tpu)[0].accelerator_slots == 1
    assert use_local_accelerators(FakePipeline(), False, tpu) == (FakePipeline(accelerator_slots=None), None)
    assert use_local_accelerators(FakePipeline(), True, Accelerators(None, 0, "x"))[0].accelerator_slots is None
    assert use_local_accelerators(FakePipeline(FakeCluster(2)), True, tpu)[0].accelerator_slots == 2
