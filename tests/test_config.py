"""The configuration checks the jobs and the workflow share (tdmpc2core.model.config): plain
Python, importable and runnable where JAX is not installed."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tdmpc2core.envs import time_limit
from tdmpc2core.model.config import (TDMPC2Config, capacity_episodes, first_update_slices, resolve_config,
                                     slices_in_episodes, validate_config)

ROOT = Path(__file__).resolve().parents[1]
DEMO = dict(model_size=1, enc_dim=128, mlp_dim=128, latent_dim=64, batch_size=64, num_samples=64, num_elites=8,
            num_pi_trajs=4, iterations=2)


def fake_jax(tmp_path: Path) -> Path:
    """A folder that, first on PYTHONPATH, makes `import jax` fail as on a machine without it."""
    (tmp_path / "nojax" / "jax").mkdir(parents=True)
    (tmp_path / "nojax" / "jax" / "__init__.py").write_text(
        'raise ImportError("jax is not installed here (test stand-in)")\n')
    return tmp_path / "nojax"


def test_validate_config_refuses_what_the_job_refuses():
    T = time_limit("Pendulum-v1")  # 200
    cfg = validate_config(TDMPC2Config(**DEMO), episode_length=T)
    assert cfg.seed_steps == 1000 and cfg.mlp_dim == 128 and cfg.num_q == 2
    for bad, needle in ((dict(horizon=0), "horizon=0 must be >= 1"),
                        (dict(num_elites=65), "num_elites=65 exceeds num_samples=64"),
                        (dict(batch_size=0), "batch_size=0 must be >= 1"),
                        (dict(model_size=3), "model_size=3 is not a preset"),
                        (dict(num_elites=0), "num_elites=0 must be >= 1"),
                        (dict(iterations=0), "iterations=0 must be >= 1"),
                        (dict(num_pi_trajs=-1), "num_pi_trajs=-1 must be >= 0"),
                        (dict(dropout=1.0), r"dropout=1.0 must be in \[0, 1\)"),
                        (dict(dropout=-0.2), r"dropout=-0.2 must be in \[0, 1\)"),
                        # a count that is not an integer (it would fail later as an array shape)
                        (dict(horizon=2.5), "horizon=2.5 must be an integer"),
                        (dict(horizon=True), "horizon=True must be an integer"),
                        (dict(num_elites="8"), "num_elites='8' must be an integer"),
                        (dict(latent_dim=64.0), "latent_dim=64.0 must be an integer")):
        with pytest.raises(ValueError, match=needle):
            validate_config(TDMPC2Config(**{**DEMO, **bad}), episode_length=T)
        with pytest.raises(ValueError, match=needle):  # the job's path: the same check
            resolve_config(TDMPC2Config(**{**DEMO, **bad}), episode_length=T, action_dim=1)
    # without the planner (mpc=False) its iterations are never used
    assert validate_config(TDMPC2Config(**{**DEMO, "iterations": 0, "mpc": False}), episode_length=T).iterations == 0


def test_first_update_slices_and_the_batch_it_can_feed():
    # Pendulum (T = 200), seed_steps 1000, one env: 5 episodes complete before the burst,
    # each of 201 rows: 201 - 3 = 198 slices of H + 1 = 4 rows
    cfg = validate_config(TDMPC2Config(**DEMO), episode_length=200)
    assert first_update_slices(cfg, episode_length=200, n_envs=1) == 5 * 198 == slices_in_episodes([201] * 5, 3)
    # two envs: the burst at tick 500, 2 x floor(500 / 200) = 4 episodes
    assert first_update_slices(cfg, episode_length=200, n_envs=2) == 4 * 198
    # a small buffer holds fewer episodes (whole episodes, oldest evicted)
    small = validate_config(TDMPC2Config(**DEMO, buffer_size=450), episode_length=200)
    assert first_update_slices(small, episode_length=200, n_envs=1) == capacity_episodes(450, 1000, 200) * 198 == 594
    validate_config(TDMPC2Config(**{**DEMO, "batch_size": 990}), episode_length=200)
    with pytest.raises(ValueError, match=r"batch_size=991 exceeds the 990 distinct training slices .* the replay at "
                                         r"the first update .*raise seed_steps to 1200 or more"):
        validate_config(TDMPC2Config(**{**DEMO, "batch_size": 991}), episode_length=200)
    with pytest.raises(ValueError, match="batch_size=991 exceeds the 990"):  # the job, given its n_envs
        resolve_config(TDMPC2Config(**{**DEMO, "batch_size": 991}), episode_length=200, action_dim=1, n_envs=1)
    resolve_config(TDMPC2Config(**{**DEMO, "batch_size": 991}), episode_length=200, action_dim=1)  # multi-task: no run
    # episodic: the first update waits for sampleable data (R3), so what it has is known only
    # during the run: no refusal here (the workflow bounds the batch by the run's length)
    ep = validate_config(TDMPC2Config(**{**DEMO, "batch_size": 101}, episodic=True, seed_steps=100),
                         episode_length=100, n_envs=2)
    assert first_update_slices(ep, episode_length=100, n_envs=2) is None
    # the seed phase must outlast the first episode (fixed-length episodes)
    with pytest.raises(ValueError, match="seed_steps=300 is too small: with n_envs=2"):
        validate_config(TDMPC2Config(**DEMO, seed_steps=300), episode_length=200, n_envs=2)


def test_config_and_env_ids_import_no_jax(tmp_path):
    code = textwrap.dedent("""
        import sys
        from tdmpc2core.envs import suite_of, time_limit
        from tdmpc2core.model.config import TDMPC2Config, validate_config
        T = time_limit("CartpoleBalance", action_repeat=2, episode_length=1000)
        print(suite_of("CartpoleBalance"), T, validate_config(TDMPC2Config(model_size=1), episode_length=T).seed_steps)
        try:
            import jax
        except ImportError:
            print("no jax")
        assert not [m for m in sys.modules if m.split(".")[0] in ("jax", "jaxlib", "flax", "optax")]
    """)
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": f"{fake_jax(tmp_path)}:{ROOT}", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["playground", "500", "2500", "no", "jax"]


def test_the_agent_runs_the_same_first_update_check():
    """The job builds TDMPC2, whose configuration goes through resolve_config with its n_envs:
    the refusal the workflow gives at load is the one the job gives."""
    from tdmpc2core import TDMPC2

    kw = {k: v for k, v in DEMO.items() if k != "batch_size"}
    assert TDMPC2("Pendulum-v1", batch_size=990, **kw).cfg.batch_size == 990
    with pytest.raises(ValueError, match="batch_size=991 exceeds the 990 distinct training slices"):
        TDMPC2("Pendulum-v1", batch_size=991, **kw)
    with pytest.raises(ValueError, match="batch_size=793 exceeds the 792"):  # 2 envs: 4 episodes at the burst
        TDMPC2("Pendulum-v1", n_envs=2, batch_size=793, **kw)


def test_kernels_and_matmul_precision_are_checked_and_auto_is_resolved_for_a_given_backend():
    """kernels ('auto' | 'cpu' | 'reference') and matmul_precision ('highest' | 'high' |
    'default') are refused otherwise in one line naming the key, the value and the choices; a
    given backend resolves 'auto' (cpu on 'cpu', the reference elsewhere) so run.json records
    the concrete choice, and without one 'auto' stays."""
    from tdmpc2core.model.config import kernels_for_backend
    T = 200
    cfg = TDMPC2Config(**DEMO)
    assert (cfg.kernels, cfg.matmul_precision) == ("auto", "highest")
    assert resolve_config(cfg, episode_length=T, action_dim=1).kernels == "auto"
    assert resolve_config(cfg, episode_length=T, action_dim=1, backend="cpu").kernels == "cpu"
    assert resolve_config(cfg, episode_length=T, action_dim=1, backend="gpu").kernels == "reference"
    for k in ("cpu", "reference"):
        for backend in ("cpu", "gpu", "tpu"):
            assert kernels_for_backend(k, backend) == k
            got = resolve_config(TDMPC2Config(**DEMO, kernels=k), episode_length=T, action_dim=1, backend=backend)
            assert got.kernels == k
    for bad, needle in ((dict(kernels="gpu"), r"kernels='gpu' is not a kernel choice; accepted: \['auto', 'cpu', "
                                              r"'reference'\]"),
                        (dict(matmul_precision="float32"), r"matmul_precision='float32' is not a precision; "
                                                           r"accepted: \['highest', 'high', 'default'\]")):
        for call in (lambda c: validate_config(c, episode_length=T),
                     lambda c: resolve_config(c, episode_length=T, action_dim=1, backend="cpu")):
            with pytest.raises(ValueError, match=needle) as e:
                call(TDMPC2Config(**DEMO, **bad))
            assert "\n" not in str(e.value)
    for prec in ("high", "default"):
        assert validate_config(TDMPC2Config(**DEMO, matmul_precision=prec), episode_length=T).matmul_precision == prec


def test_burst_tick_and_first_update_are_the_schedule_the_agents_run():
    """One definition of the seed-phase burst (spec §8) for the agents' schedule and the
    workflow's check: the first tick reaching seed_steps, and the agent steps once it ran."""
    from tdmpc2core.model.config import burst_tick, first_update_agent_steps

    assert [burst_tick(1000, n) for n in (1, 2, 3, 7)] == [1000, 500, 334, 143]
    assert [first_update_agent_steps(1000, n) for n in (1, 2, 3)] == [1001, 1002, 1005]
    assert first_update_agent_steps(1, 4) == 8  # one tick of 4 envs reaches 1 step; its burst tick ends at 8
