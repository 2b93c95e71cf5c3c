"""Record the official three-link reacher tasks' numbers as a test fixture
(tests/fixtures/reacher_three.npz).

    python tools/record_reacher_three.py --official PATH_TO_CHECKOUT [--commit SHA] [--out tests/fixtures/reacher_three.npz]

PATH_TO_CHECKOUT is nicklashansen/tdmpc2 at 5f6fade (a clone checked out there, or ``git
archive 5f6fade tdmpc2 | tar -x -C DIR`` with ``--commit``). Nothing of it is copied into this
repository: the script loads the checkout's ``tdmpc2/envs/tasks/reacher.py`` unmodified (it
registers ``three_easy`` and ``three_hard`` with dm_control's reacher domain and reads its
``reacher_three_links.xml``) and builds each task as the official wrapper does
(``suite.load("reacher", task, task_kwargs={"random": seed}, visualize_reward=False)``,
dm_control's ``action_scale`` wrapper onto [-1, 1]). Needs only dm_control (the project's
venv).

Recorded, for ``easy`` (three_easy) and ``hard`` (three_hard):

* ``{task}/model/{field}``: the compiled ``MjModel``'s arrays before any reset
  (:data:`MODEL_FIELDS`) and ``{task}/model/opt_timestep``;
* ``{task}/model_digest``: SHA-256 over every numeric array of the compiled ``MjModel``
  (names sorted; the field list is in ``meta``);
* ``{task}/seeds`` i64[E]: the task seed of each episode (a fresh environment per episode);
* ``{task}/actions`` f32[E, N, 3]: seeded uniform actions in [-1, 1], each held for
  :data:`HOLD` control steps (so an agent with action repeat 2 can replay them);
* ``{task}/obs`` f64[E, N + 1, 8]: the observation dict (position, to_target, velocity)
  flattened, at the reset and after each control step;
* ``{task}/reward`` f64[E, N]: each control step's reward;

plus ``meta`` (JSON): the official commit, the SHA-256 of the official files read, the
dm_control, MuJoCo, NumPy and Python versions. The seeds are ones whose random episodes
reach the target (the script refuses to write unless every task's rewards hold both 0 and
1), so the fixture checks the reward as well as the dynamics.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import platform
import sys
import warnings
from pathlib import Path

import numpy as np

FIXTURE_VERSION = 1
TASKS = {"easy": "three_easy", "hard": "three_hard"}
SEEDS = (2, 7)          # task seeds of the episodes (random episodes that reach the target)
STEPS = 120             # control steps (one 0.02 s MuJoCo step each) per episode
HOLD = 10               # control steps each random action is held
OFFICIAL_TASK_FILES = ("tdmpc2/envs/tasks/reacher.py", "tdmpc2/envs/tasks/reacher_three_links.xml")
MODEL_FIELDS = ("body_pos", "body_quat", "body_ipos", "body_iquat", "body_mass", "body_inertia",
                "body_parentid", "geom_type", "geom_size", "geom_pos", "geom_quat", "geom_bodyid",
                "jnt_type", "jnt_range", "jnt_limited", "jnt_axis", "jnt_bodyid", "dof_damping",
                "dof_armature", "actuator_gear", "actuator_ctrlrange", "actuator_trnid")


def model_arrays(model) -> dict:
    """{field: array} of :data:`MODEL_FIELDS` and ``opt_timestep`` of a dm_control/MuJoCo model."""
    out = {f: np.array(getattr(model, f)) for f in MODEL_FIELDS}
    out["opt_timestep"] = np.array(model.opt.timestep)
    return out


def model_digest(model) -> tuple[str, list]:
    """(SHA-256 hex, field names) over every numeric ndarray attribute of a compiled
    ``mujoco.MjModel`` (``physics.model.ptr``), names sorted, each as its dtype, shape and
    raw bytes."""
    h = hashlib.sha256()
    fields = []
    for name in sorted(dir(model)):
        if name.startswith("_"):
            continue
        try:
            v = getattr(model, name)
        except Exception:  # noqa: BLE001 (properties that need a context)
            continue
        if isinstance(v, np.ndarray) and v.dtype.kind in "biuf":
            a = np.ascontiguousarray(v)
            h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
            h.update(a.tobytes())
            fields.append(name)
    return h.hexdigest(), fields


def episode(env, seed: int):
    """(actions f32[STEPS, A], obs f64[STEPS + 1, O], reward f64[STEPS]) of the first episode of
    the wrapped official environment ``env``, freshly built with task seed ``seed``; the
    actions are drawn from ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    n_act = env.action_spec().shape[0]
    ts = env.reset()
    obs = [np.concatenate([np.asarray(v, np.float64).ravel() for v in ts.observation.values()])]
    actions, rewards = [], []
    for t in range(STEPS):
        if t % HOLD == 0:
            a = rng.uniform(-1.0, 1.0, n_act).astype(np.float32)
        ts = env.step(a.astype(np.float64))    # the official wrapper: action.astype(spec dtype)
        actions.append(a)
        rewards.append(float(ts.reward))
        obs.append(np.concatenate([np.asarray(v, np.float64).ravel() for v in ts.observation.values()]))
    return np.stack(actions), np.stack(obs), np.asarray(rewards)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--official", required=True, help="a checkout of nicklashansen/tdmpc2 (at 5f6fade)")
    ap.add_argument("--commit", help="the checkout's commit, if it is not a git work tree (e.g. a git archive)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"
                                         / "reacher_three.npz"))
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import record_parity as rp  # the sibling tool's helpers: commit, SHA-256, reference

    root = Path(args.official).resolve()
    absent = [f for f in OFFICIAL_TASK_FILES if not (root / f).is_file()]
    if absent:
        sys.exit(f"error: {root} is not a checkout of nicklashansen/tdmpc2: missing {absent[0]}")
    commit = rp.git_commit(root) or args.commit
    if not commit:
        sys.exit("error: the checkout's commit is unknown (not a git work tree): pass --commit SHA")
    if len(commit) < 7 or not rp.REFERENCE.startswith(commit[:7]):
        sys.exit(f"error: the checkout is at {commit}; the fixture is recorded from {rp.REFERENCE[:7]}")

    with warnings.catch_warnings():   # glfw warns when no display is set; rendering is not used
        warnings.simplefilter("ignore")
        from dm_control import suite
        from dm_control.suite.wrappers import action_scale
    import mujoco

    # the official task file, unmodified: it adds three_easy/three_hard to dm_control's reacher
    spec = importlib.util.spec_from_file_location("official_reacher_tasks", root / OFFICIAL_TASK_FILES[0])
    official = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(official)

    out, fields_of = {}, {}
    for short, task in TASKS.items():
        built = suite.load("reacher", task, task_kwargs={"random": SEEDS[0]}, visualize_reward=False)
        if not isinstance(built.physics, official.Physics):
            sys.exit(f"error: suite.load('reacher', {task!r}) did not build the official task")
        for f, v in model_arrays(built.physics.model).items():
            out[f"{short}/model/{f}"] = v
        digest, fields_of[short] = model_digest(built.physics.model.ptr)
        out[f"{short}/model_digest"] = np.array(digest)
        runs = []
        for seed in SEEDS:
            env = action_scale.Wrapper(
                suite.load("reacher", task, task_kwargs={"random": seed}, visualize_reward=False),
                minimum=-1.0, maximum=1.0)
            runs.append(episode(env, seed))
        acts, obs, rew = (np.stack(x) for x in zip(*runs))
        if set(np.unique(rew)) != {0.0, 1.0}:
            sys.exit(f"error: {task}'s recorded rewards are {np.unique(rew)}, not both 0 and 1: other seeds")
        out.update({f"{short}/seeds": np.asarray(SEEDS, np.int64), f"{short}/actions": acts,
                    f"{short}/obs": obs, f"{short}/reward": rew})
        print(f"{task}: obs {obs.shape}, reward steps at 1: {int(rew.sum())} of {rew.size}")

    meta = dict(fixture_version=FIXTURE_VERSION, official_repository="nicklashansen/tdmpc2", official_commit=commit,
                official_files_sha256={f: rp.sha256(root / f) for f in OFFICIAL_TASK_FILES},
                dm_control_version=importlib.metadata.version("dm_control"), mujoco_version=mujoco.__version__,
                numpy_version=np.__version__, python_version=platform.python_version(),
                recorded_on=platform.platform(), tasks=TASKS, seeds=list(SEEDS), steps=STEPS, hold=HOLD,
                digest_fields=fields_of["easy"], recorder="tools/record_reacher_three.py")
    if fields_of["easy"] != fields_of["hard"]:
        sys.exit("error: the two tasks' models have different fields")
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **out, meta=np.array(json.dumps(meta, sort_keys=True)))
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
