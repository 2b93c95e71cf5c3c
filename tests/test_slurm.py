"""The SLURM path on a real one-node SLURM (issue 11): the workflow profile as users get it,
through snakemake-executor-plugin-slurm, against slurmctld + slurmd + munged started here.

* ``slurm_cluster`` (module fixture): installs slurm-wlm and munge with apt-get where they
  are missing (root only), writes /etc/slurm/slurm.conf (the plugin's in-job ``srun`` drops
  SLURM_CONF, so it must be there) with one node of this machine's size and a fake GPU
  (gres ``File=/dev/null``: a GPU request is really scheduled, and the job sees
  CUDA_VISIBLE_DEVICES=0; JAX runs on the CPU), starts the daemons, and stops them by pid
  at the end, whatever happens. Where it cannot (not root, no apt-get, an
  /etc/slurm/slurm.conf of another cluster), the tests are skipped with the reason, and
  under CI=true (.ci/run) that skip is a failure.
* The profile: a copy of workflow/profiles/slurm/config.yaml with only what this cluster
  lacks changed: the status command (squeue: no accounting here, and the plugin's default
  sacct then fails silently), short status and latency waits, and --verbose (the
  ``sbatch call:`` lines are checked).

Measured on the 2-vCPU development machine: 2.6 minutes with a warm compilation cache (the
checkout's .jax_cache/, shared with tests/test_workflow.py's preemption test; load 3-4 from
other jobs), 7.0 minutes with a cold one at load 11-15.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SLURM_CONF = Path("/etc/slurm/slurm.conf")
GRES_CONF = Path("/etc/slurm/gres.conf")
MARK = "# written by tdmpc2-pipeline tests/test_slurm.py; removed when the test ends"
INIT_SECONDS = 5  # --slurm-init-seconds-before-status-checks; MinJobAge must be >= 3x this
MIN_JOB_AGE = 300



def not_here(reason: str):
    """Skip with the reason; under CI=true (.ci/run) the real cluster must run: fail instead."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the real-SLURM test cannot run here and CI=true: {reason}")
    pytest.skip(reason)


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def _install_slurm():
    """slurm-wlm and munge from Debian (about 12 s); apt-get update only if needed."""
    need = [b for b in ("slurmctld", "slurmd", "munged", "sbatch") if not shutil.which(b)
            and not Path(f"/usr/sbin/{b}").exists()]
    if not need:
        return
    if os.geteuid() != 0:
        not_here(f"SLURM is not installed ({', '.join(need)} missing) and installing it needs root")
    if not shutil.which("apt-get"):
        not_here(f"SLURM is not installed ({', '.join(need)} missing) and there is no apt-get")
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", "slurm-wlm", "munge"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    res = _run(cmd, env=env, timeout=900)
    if res.returncode != 0:
        _run(["apt-get", "update"], env=env, timeout=900)
        res = _run(cmd, env=env, timeout=900)
    if res.returncode != 0:
        not_here(f"apt-get install slurm-wlm munge failed: {res.stderr[-800:]}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _read_pid(path: Path):
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _stop(pid, name, timeout=20.0):
    """SIGTERM to one daemon by pid, SIGKILL if it is still there after `timeout`."""
    if pid is None or not _pid_alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    end = time.time() + timeout
    while time.time() < end and _pid_alive(pid):
        time.sleep(0.2)
    if _pid_alive(pid):
        os.kill(pid, signal.SIGKILL)


def node_line() -> str:
    """This machine as slurm.conf's node line (`slurmd -C`, without its UpTime)."""
    res = _run(["slurmd", "-C"], timeout=60)
    line = next(l for l in res.stdout.splitlines() if l.startswith("NodeName="))
    return line


@pytest.fixture(scope="module")
def slurm_cluster():
    """A one-node SLURM with one fake GPU; yields {"host", "dir"}; daemons stopped by pid."""
    if os.geteuid() != 0:
        not_here("starting slurmctld/slurmd/munged needs root")
    _install_slurm()
    for conf in (SLURM_CONF, GRES_CONF):
        if conf.exists() and MARK not in conf.read_text():
            not_here(f"{conf} exists and is not this test's: not replacing a real cluster's configuration")
    base = Path(tempfile.mkdtemp(prefix="tdmpc2-slurm-"))
    host = socket.gethostname().split(".")[0]
    node = node_line()
    node_name = node.split()[0].split("=", 1)[1]
    pids = {}
    started_munged = False
    try:
        for d in ("state", "spool"):
            (base / d).mkdir()
        SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
        SLURM_CONF.write_text("\n".join([
            MARK,
            "ClusterName=tdmpc2test",
            f"SlurmctldHost={host}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "ReturnToService=2",
            f"MinJobAge={MIN_JOB_AGE}",
            "KillWait=30",
            "GresTypes=gpu",
            f"StateSaveLocation={base}/state",
            f"SlurmdSpoolDir={base}/spool",
            f"SlurmctldPidFile={base}/slurmctld.pid",
            f"SlurmdPidFile={base}/slurmd.pid",
            f"SlurmctldLogFile={base}/slurmctld.log",
            f"SlurmdLogFile={base}/slurmd.log",
            f"{node} Gres=gpu:1 State=UNKNOWN",
            f"PartitionName=debug Nodes={node_name} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))
        GRES_CONF.write_text(f"{MARK}\nNodeName={node_name} Name=gpu File=/dev/null\n")
        # munged as the munge user (the package wrote /etc/munge/munge.key)
        munge_pid_file = Path("/run/munge/munged.pid")
        pid = _read_pid(munge_pid_file)
        if pid is None or not _pid_alive(pid):
            Path("/run/munge").mkdir(parents=True, exist_ok=True)
            shutil.chown("/run/munge", "munge", "munge")
            res = _run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], timeout=60)
            assert res.returncode == 0, f"munged did not start: {res.stderr}"
            started_munged = True
            for _ in range(50):
                pid = _read_pid(munge_pid_file)
                if pid:
                    break
                time.sleep(0.1)
        pids["munged"] = pid if started_munged else None
        for daemon in ("slurmctld", "slurmd"):
            res = _run([f"/usr/sbin/{daemon}"], timeout=60)
            assert res.returncode == 0, f"{daemon} did not start: {res.stdout} {res.stderr}"
            for _ in range(100):
                pids[daemon] = _read_pid(base / f"{daemon}.pid")
                if pids[daemon]:
                    break
                time.sleep(0.1)
        deadline = time.time() + 60
        state = ""
        while time.time() < deadline:
            state = _run(["sinfo", "-h", "-N", "-o", "%T"], timeout=30).stdout.strip()
            if state.startswith("idle"):
                break
            time.sleep(0.5)
        logs = "".join((base / f).read_text()[-2000:] for f in ("slurmctld.log", "slurmd.log")
                       if (base / f).exists())
        assert state.startswith("idle"), f"the node is {state!r}, not idle:\n{logs}"
        yield {"host": node_name, "dir": base}
    finally:
        # jobs first (a job left running would keep writing), then the daemons, by pid
        _run(["scancel", "--full", "--user", "root"], timeout=30) if shutil.which("scancel") else None
        for daemon in ("slurmd", "slurmctld", "munged"):
            _stop(pids.get(daemon), daemon)
        for conf in (SLURM_CONF, GRES_CONF):
            if conf.exists() and MARK in conf.read_text():
                conf.unlink()
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ the checkpoint folder's lock
HOLD = """
import sys, time
from tdmpc2core.run.lock import exclusive_folder
with exclusive_folder(sys.argv[1]):
    print("holding", flush=True)
    time.sleep(600)
"""


def test_checkpoint_folder_lock_refuses_a_second_writer(tmp_path):
    """One writer per checkpoint folder: a second process (or a second open in this one) gets
    FolderInUseError naming the folder and the holder's pid; the stage exits 4 with that line
    before reading or writing anything; the kernel frees the lock when the holder dies, even
    by SIGKILL, so a rerun is never blocked by a stale lock."""
    from tdmpc2core.run.lock import FolderInUseError, exclusive_folder

    folder = tmp_path / "ck"
    with exclusive_folder(None) as held:  # no checkpoint folder (a run without checkpoints): no lock
        assert held is None and not folder.exists()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(FolderInUseError) as err:
            with exclusive_folder(folder):
                pass
        assert err.value.folder == folder and f"pid {holder.pid} on " in err.value.holder
        assert f"the checkpoint folder {folder} is in use by another process (pid {holder.pid}" in str(err.value)
        for stage, extra in (("train-single", ["--task", "t", "--seeds", "0", "--outdir", str(tmp_path / "out"),
                                               "--spec", '{"env_id": "Pendulum-v1", "agent_steps": 10}']),
                             ("train-multi", ["--pool", "p", "--model-size", "1", "--seeds", "0", "--dataset",
                                              str(tmp_path / "none.parquet"), "--outdir", str(tmp_path / "out"),
                                              "--spec", '{"updates": 10}'])):
            res = subprocess.run([sys.executable, "-m", "tdmpc2core.cli", stage, *extra,
                                  "--checkpoint-dir", str(folder)], capture_output=True, text=True, timeout=300)
            assert res.returncode == 4, (stage, res.stderr[-2000:])
            assert "is in use by another process" in res.stderr and not (tmp_path / "out").exists(), res.stderr
        assert sorted(p.name for p in folder.iterdir()) == [".lock"]  # nothing else touched
    finally:
        holder.kill()  # SIGKILL: the lock goes with the process
        holder.wait()
    with exclusive_folder(folder):
        with pytest.raises(FolderInUseError):  # a second open in the same process is refused too
            with exclusive_folder(folder):
                pass
    with exclusive_folder(folder):  # released at the end of the block
        pass


# ------------------------------------------------------------------ the workflow on the cluster
# The configuration of tests/test_workflow.py's preemption test (the same compiled programs,
# so the compilation cache is shared), with one GPU per training job, a job time limit of 30
# minutes for a runtime of 90 (three jobs at most: two extra retries) and a pool for the
# dataset rules.
TINY = """\
protocol: slurm-tiny
seeds: [0, 1]
seeds_per_job: 2
threads_per_job: 1
jax_cache_dir: {cache}
checkpoint_every: 100
keep_checkpoints: 2
max_chunk_seconds: 0.2
bootstrap_reps: 200
cluster: {{max_job_minutes: 30, stop_lead_seconds: 60, slurm_extra: "", gpu_mem_fraction: 0.5,
          gpu_preallocate: false}}
protocols:
  slurm-tiny:
    label: "SLURM test run: NOT the paper's protocol"
    defaults:
      action_repeat: 1
      agent_steps: 700
      eval_every: 200
      eval_episodes: 2
      n_envs: 2
      agent: {{model_size: 1, mlp_dim: 32, latent_dim: 16, enc_dim: 32, num_samples: 16, num_elites: 4,
              num_pi_trajs: 2, iterations: 1, batch_size: 16, seed_steps: 400}}
      resources: {{gpu: 1, runtime: 90, mem_mb: 4000}}
    tasks:
      pendulum:
        env_id: Pendulum-v1
        published: null
        expected: null
    pools:
      tiny: [pendulum]
"""
TRAIN_RULE = "train_single_seeds_0_1"
RUN_FILES = ("eval.parquet", "metrics.parquet", "episodes.parquet", "run.json")
WALL_CLOCK = ("wall_time_s", "agent_steps_per_s")


def make_workdir(dest: Path) -> Path:
    """A copy of the workflow, the tiny config, and the CI variant of the SLURM profile."""
    dest.mkdir(parents=True)
    for name in ("Snakefile", "config.yaml"):
        shutil.copy2(ROOT / name, dest / name)
    for name in ("workflow", "envs"):
        shutil.copytree(ROOT / name, dest / name)
    (dest / "tiny.yaml").write_text(TINY.format(cache=json.dumps(str(ROOT / ".jax_cache"))))
    profile = yaml.safe_load((ROOT / "workflow/profiles/slurm/config.yaml").read_text())
    # only what this cluster lacks: accounting (status by squeue), and short waits
    profile.update({"slurm-status-command": "squeue", "slurm-init-seconds-before-status-checks": INIT_SECONDS,
                    "latency-wait": 5, "verbose": True})
    assert MIN_JOB_AGE >= 3 * INIT_SECONDS  # else the plugin falls back to sacct
    (dest / "ci-profile").mkdir()
    (dest / "ci-profile/config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return dest


def snakemake_cmd(*args):
    return [sys.executable, "-m", "snakemake", "--workflow-profile", "ci-profile", "--configfile=tiny.yaml", *args]


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("SNAKEMAKE", "SLURM_"))}


def job_stats(out: str) -> dict[str, int]:
    """The "Job stats" table of Snakemake's output as {rule: count}."""
    stats = {}
    for line in out.split("Job stats:", 1)[1].splitlines()[3:]:
        m = re.match(r"^(\S+)\s+(\d+)$", line.strip())
        if not m:
            break
        stats[m.group(1)] = int(m.group(2))
    return stats


def sbatch_calls(out: str) -> list[str]:
    return [l.split("sbatch call:", 1)[1] for l in out.splitlines() if "sbatch call:" in l]


def read_outputs(wf: Path) -> dict:
    import pandas as pd

    return {(s, f): (pd.read_parquet(wf / f"results/single/pendulum/seed{s}/{f}") if f.endswith(".parquet")
                     else json.loads((wf / f"results/single/pendulum/seed{s}/{f}").read_text()))
            for s in (0, 1) for f in RUN_FILES}


def assert_same_results(a: dict, b: dict):
    """Every Parquet column equal (NaNs of the reset rows included) but the wall-clock ones."""
    for key, x in a.items():
        if key[1] == "run.json":
            assert x["final_eval_return"] == b[key]["final_eval_return"], key
            continue
        y = b[key]
        assert list(x.columns) == list(y.columns) and len(x) == len(y) > 0, key
        for c in x.columns:
            if c in WALL_CLOCK:
                continue
            u, v = x[c].to_numpy(), y[c].to_numpy()
            if u.dtype == object and len(u) and isinstance(u[0], np.ndarray):
                u, v = np.stack(u), np.stack(v)
            np.testing.assert_array_equal(u, v, err_msg=f"{key}: {c}")


@pytest.mark.slow
def test_profile_on_a_real_slurm_submits_training_only_and_resumes_a_preempted_job(slurm_cluster, tmp_path):
    """1. The tiny config through the profile: the training job is submitted with sbatch
    asking for one GPU (its --time capped by cluster.max_job_minutes, --signal=TERM@lead),
    sees only its GPU, runs JAX on the CPU; every other rule runs locally; every output and
    results/report.html are made. 2. Preemption: scancel --signal=TERM of the running
    training job of a second copy; the retry resumes from its checkpoint, and the outputs
    equal those of the uninterrupted run. A second writer of the job's checkpoint folder is
    refused while the job runs."""
    t0 = time.time()
    env = clean_env()
    # ---- 1. the whole DAG, uninterrupted
    wf = make_workdir(tmp_path / "a")
    res = subprocess.run(snakemake_cmd(), cwd=wf, env=env, capture_output=True, text=True, timeout=1500)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-8000:]
    calls = sbatch_calls(out)
    assert len(calls) == 1, calls  # one training job (two seeds vmapped), nothing else submitted
    call = calls[0]
    assert f"rule_{TRAIN_RULE}_wildcards_pendulum" in call and "--gpus=1" in call, call
    assert re.search(r"(-t |--time[= ])30\b", call), call  # a runtime of 90 min in jobs of at most 30
    assert "--signal=TERM@60" in call and "--account" not in call and "-A " not in call, call
    assert "up to 3 jobs each, 5 retries" in out  # the profile's 3 + 2 more jobs of 10 min
    local = set(re.findall(r"^localrule (\w+):", out, re.M))
    submitted = set(re.findall(r"^rule (\w+):", out, re.M))
    assert submitted == {TRAIN_RULE}, submitted
    assert local == {"all", "resolve_config", "figures_task", "figure_overview", "tables", "dataset_task",
                     "dataset_pool", "dataset_summary", "report"}, local
    log = (wf / "logs/train_single/pendulum/seeds_0_1.log").read_text()
    first = log.splitlines()[0]
    assert "CUDA_VISIBLE_DEVICES=0" in first and "SLURM_JOB_ID=none" not in first, first
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION=0.5" in first and "XLA_PYTHON_CLIENT_PREALLOCATE=false" in first
    run = json.loads((wf / "results/single/pendulum/seed0/run.json").read_text())
    assert "cpu" in json.dumps(run["provenance"]).lower()
    for f in ("results/report.html", "results/tables/final_scores.csv", "results/figures/overview.png",
              "results/datasets/pools/tiny.parquet", "results/datasets/summary.parquet"):
        assert (wf / f).exists(), f
    assert "SLURM test run" in (wf / "results/report.html").read_text(encoding="utf-8")
    uninterrupted = read_outputs(wf)
    # reruns through the profile: nothing changed, nothing to do; a deleted seed folder plans
    # exactly its training job and what depends on it
    for _ in range(2):
        plan = subprocess.run(snakemake_cmd("-n"), cwd=wf, env=env, capture_output=True, text=True, timeout=600)
        assert plan.returncode == 0 and "Nothing to be done" in plan.stdout + plan.stderr, plan.stderr[-3000:]
    shutil.rmtree(wf / "results/single/pendulum/seed1")
    plan = subprocess.run(snakemake_cmd("-n"), cwd=wf, env=env, capture_output=True, text=True, timeout=600)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert job_stats(plan.stdout + plan.stderr) == {
        TRAIN_RULE: 1, "figures_task": 1, "figure_overview": 1, "tables": 1, "dataset_task": 1, "dataset_pool": 1,
        "dataset_summary": 1, "report": 1, "all": 1, "total": 9}
    t1 = time.time()

    # ---- 2. the training job of a second copy, preempted mid-run
    wf2 = make_workdir(tmp_path / "b")
    target = "results/single/pendulum/seed0/eval.parquet"
    log2 = wf2 / "logs/train_single/pendulum/seeds_0_1.log"
    ckdir = wf2 / "checkpoints/single/pendulum/seeds_0_1"
    smk = subprocess.Popen(snakemake_cmd(target), cwd=wf2, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        lock_checked, jobid = False, None
        deadline = time.time() + 900
        while time.time() < deadline and smk.poll() is None:
            text = log2.read_text() if log2.exists() else ""
            if not lock_checked and "env Pendulum-v1" in text:
                # the job holds its checkpoint folder: a second writer is refused at once
                second = subprocess.run(
                    [sys.executable, "-m", "tdmpc2core.cli", "train-single", "--task", "pendulum", "--spec",
                     '{"env_id": "Pendulum-v1", "agent_steps": 700}', "--seeds", "0", "1",
                     "--outdir", str(tmp_path / "second"), "--checkpoint-dir", str(ckdir)],
                    capture_output=True, text=True, timeout=300, env=env)
                assert second.returncode == 4, second.stderr
                assert f"the checkpoint folder {ckdir} is in use by another process (pid " in second.stderr
                assert not (tmp_path / "second").exists()
                lock_checked = True
            # the signal follows the step-400 checkpoint (the seed phase's end; the 400-update burst
            # and the training ticks after it still to run): with the programs from the session's
            # cache the job runs 500 -> 700 in about 0.3 s, less than squeue + scancel take, so a
            # signal sent at 500 could land at 700 (seen 2026-12-06)
            if "step_000000000400 written" in text:
                break
            time.sleep(0.05)
        assert smk.poll() is None and lock_checked, (log2.read_text() if log2.exists() else "no log")
        jobs = subprocess.run(["squeue", "-h", "-o", "%i %T %k"], capture_output=True, text=True).stdout.split("\n")
        running = [l.split()[0] for l in jobs if "RUNNING" in l and TRAIN_RULE in l]
        assert len(running) == 1, jobs
        jobid = running[0]
        # as a preemption does: SIGTERM to the job's processes (the trainer, exec'd in the step)
        subprocess.run(["scancel", "--signal=TERM", jobid], check=True, timeout=60)
        out2 = smk.communicate(timeout=1200)[0]
    finally:
        if smk.poll() is None:
            smk.send_signal(signal.SIGINT)  # the plugin scancels its jobs
            try:
                smk.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                smk.kill()
    assert smk.returncode == 0, out2[-8000:]
    calls2 = sbatch_calls(out2)
    assert len(calls2) == 2 and all(f"rule_{TRAIN_RULE}_" in c for c in calls2), calls2  # the job, its retry
    text = log2.read_text()
    assert "resumed from checkpoints/single/pendulum/seeds_0_1/step_" in text, text[-3000:]
    resumed = read_outputs(wf2)
    att = resumed[(0, "run.json")]["attempts"]
    assert [a["outcome"] for a in att] == ["stopped by SIGTERM", "completed"], att
    # stopped after the seed phase, at a chunk boundary up to the last (a stop at 700 is acted on
    # before the final evaluation, which the retry runs: the outputs below are equal either way)
    assert 400 <= att[1]["start_step"] <= 700 and resumed[(0, "run.json")]["resumed_from_agent_steps"] >= 400
    assert_same_results(resumed, uninterrupted)
    print(f"\nreal SLURM: uninterrupted run {t1 - t0:.0f} s, preempted + resumed job {time.time() - t1:.0f} s, "
          f"load {os.getloadavg()[0]:.1f}")


# ------------------------------------------------------------------ a multi-process multi-task job
MT_SLURM_UPDATES = 60


def _train_multi_cmd(pool: Path, outdir: Path, ckdir: Path, *extra) -> list:
    from test_checkpoint import MT_AGENT, MT_RANGES

    spec = {"updates": MT_SLURM_UPDATES, "batch_size": 16, "agent": MT_AGENT, "return_ranges": MT_RANGES,
            "eval_every": MT_SLURM_UPDATES, "eval_episodes": 1}
    return [sys.executable, "-m", "tdmpc2core.cli", "train-multi", "--pool", "p", "--model-size", "1",
            "--dataset", str(pool), "--spec", json.dumps(spec), "--seeds", "0", "1", "--outdir", str(outdir),
            "--checkpoint-dir", str(ckdir), "--max-chunk-seconds", "0.2", *extra]


@pytest.mark.slow
def test_a_multitask_job_of_two_srun_tasks_joins_through_slurm_and_equals_one_process(slurm_cluster, tmp_path):
    """An allocation of 2 tasks (salloc), its shell starting the trainer as the workflow's multi-task rule
    does with cluster.multitask_tasks_per_node: 2 (Cluster.multitask_launcher: srun); each task
    has 2 fake CPU devices and joins jax.distributed from SLURM's environment (no coordinator
    given). Its outputs, written once by process 0, equal a one-process run's within the
    multi-device tolerance (tests/test_devices.py)."""
    import shlex

    import pandas as pd
    from test_checkpoint import mt_pool
    from test_devices import TOL

    from tdmpc2core.dataset import save_dataset
    from tdmpc2core.io import checkpoint as ck
    from tdmpc2core.pipeline.cluster import Cluster

    pool = tmp_path / "pool.parquet"
    save_dataset(mt_pool(), pool)
    cluster = Cluster(max_job_minutes=30, stop_lead_seconds=60, slurm_extra="", gpu_mem_fraction=0.5,
                      gpu_preallocate=False, threads_per_job=1, multitask_nodes=1, multitask_tasks_per_node=2)
    assert cluster.multitask_resources(0) == {"gpu": 0, "mpi": "srun", "nodes": 1, "tasks_per_node": 2}
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(Path(__file__).parent)])
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    env["JAX_PLATFORMS"] = "cpu"
    cache = os.environ.get("TDMPC2_TEST_JAX_CACHE")
    if cache:  # the session's compilation cache (tests/conftest.py), as tests/test_devices.py's processes:
        env["JAX_COMPILATION_CACHE_DIR"] = cache  # the 4-device and 1-device programs compiled once
    cmd = shlex.join(_train_multi_cmd(pool, tmp_path / "slurm", tmp_path / "ck_slurm"))
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n{cluster.multitask_launcher()} {cmd}\n")
    # the same job in one process, one device, outside SLURM: meanwhile
    env1 = {k: v for k, v in env.items() if k != "XLA_FLAGS"}
    one = subprocess.Popen(_train_multi_cmd(pool, tmp_path / "one", tmp_path / "ck_one", "--devices", "1"),
                           cwd=tmp_path, env=env1, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # salloc: the allocation an sbatch job would get, the script run in it at once (no polling)
    with open(tmp_path / "job.log", "w") as joblog:
        res = subprocess.run(["salloc", "--ntasks-per-node=2", "--nodes=1", "--cpus-per-task=1", "--mem=6000",
                              "bash", str(script)], cwd=tmp_path, env=env, stdout=joblog, stderr=subprocess.STDOUT,
                             text=True, timeout=900)
    log = (tmp_path / "job.log").read_text() if (tmp_path / "job.log").exists() else ""
    assert res.returncode == 0, log[-6000:]
    assert "process 0 of 2: 2 local of 4 cpu devices" in log and "process 1 of 2" in log, log[-4000:]
    assert "done: 60 updates (process 0 writes the outputs)" in log
    run = json.loads((tmp_path / "slurm/run.json").read_text())
    assert run["devices"] == {"device_count": 4, "process_count": 2, "mesh": {"data": 4}, "platform": "cpu"}
    err = one.communicate(timeout=600)[1]
    assert one.returncode == 0, err[-3000:]
    a, b = pd.read_parquet(tmp_path / "slurm/eval.parquet"), pd.read_parquet(tmp_path / "one/eval.parquet")
    assert list(a.columns) == list(b.columns) and len(a) == len(b) == 2 * 2  # 2 seeds x 2 evaluations, once
    first = a["updates"] == 0  # the same initial parameters: the same evaluation before training
    np.testing.assert_array_equal(a[first]["return"].to_numpy(), b[first]["return"].to_numpy())
    from test_checkpoint import mt_agent

    agent = mt_agent()  # the stage's agent: its checkpoints read back as global arrays
    sa, _, _ = agent.restore(ck.latest_checkpoint(tmp_path / "ck_slurm"))
    sb, _, _ = agent.restore(ck.latest_checkpoint(tmp_path / "ck_one"))
    import jax

    diffs = [float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
             for x, y in zip(jax.tree_util.tree_leaves(sa.agent.params), jax.tree_util.tree_leaves(sb.agent.params))]
    assert int(np.asarray(sa.agent.updates)[0]) == MT_SLURM_UPDATES and max(diffs) <= TOL, max(diffs)
