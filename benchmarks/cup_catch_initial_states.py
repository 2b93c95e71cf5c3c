"""cup-catch: initial states and zero-action catches, ours vs the official env vs dm_control itself.

    python benchmarks/cup_catch_initial_states.py [--n 300] [--official /tmp/official
        --official-python PY] [--out benchmarks/results/cup-catch_initial_states.json]

Why (docs/fidelity.md, the step-0 finding on cup-catch): our untrained agent scores 131.9 at
agent step 0 and the official code 0.0, and with *zero actions* our env caught the ball in 5 of
its 30 evaluation episodes, the official ``make_env`` in 0 of 30. This script measures whether
the environments differ or the 30 initial states do. Every episode is 500 agent steps of
action repeat 2 (1000 control steps) with zero actions; a "catch" is a return > 0 (the returns
are all-or-nothing: the ball falls into the cup at the start and stays).

- ``ours``: the library's ``dmc:cup-catch`` (``make_env``), the 30 evaluation episodes of seeds
  0-2 at evaluation index 0 (the initial states of the step-0 evaluation) and ``--n`` more
  reset keys; each replayed in plain dm_control (``suite.load('ball_in_cup', 'catch',
  task_kwargs={'random': reset_seed(key)})``, one reset, zero actions): first observation
  bit-equal? same return?
- ``dmc``: plain dm_control, ``task_kwargs={'random': s}`` for s = 0..n-1, the first reset each.
- ``official`` (with ``--official``): nicklashansen/tdmpc2 at 5f6fade's ``envs.make_env``
  (all its wrappers, ``TensorWrapper`` included), seeds 1-3, ``--n`` / 3 consecutive resets
  each with ``torch.zeros`` actions (episodes 0-9 of each seed are the initial states of its
  step-0 evaluation: ``OnlineTrainer.train`` evaluates before its first training reset); each
  replayed in plain dm_control built with ``random=seed`` and reset as often (initial qpos
  bit-equal? same return?), and the control MuJoCo received checked to be exactly 0.
  ``--official-python`` must import torch, gym 0.26, omegaconf, hydra-core and dm_control.

Output: the JSON at ``--out`` (per episode: initial qpos, qvel, ball-to-target vector, return,
first rewarded agent step, the replay's checks) and a Markdown summary beside it (counts, Wilson intervals, Fisher
tests, two-sample KS tests of the initial ball position, the catch region).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "cup-catch_initial_states.json"
CONTROL_STEPS = 1000
#: the catch region read off the measurement: the ball starts above the cup's mouth
CATCH_X, CATCH_Z = 0.05, 0.33


def in_region(qpos: np.ndarray) -> np.ndarray:
    return (np.abs(qpos[:, 2]) < CATCH_X) & (qpos[:, 3] > CATCH_Z)


def _dmc_state(physics):
    return dict(qpos=physics.data.qpos.tolist(), qvel=physics.data.qvel.tolist(),
                rel=np.asarray(physics.ball_to_target()).tolist())


def _dmc_zero_rollout(env):
    """Zero-action return of a reset dm_control env over CONTROL_STEPS control steps (rewards
    summed, as the agent-step rewards of action repeat 2 sum them), the first rewarded agent
    step, and the largest |ctrl| MuJoCo received."""
    a = np.zeros(env.action_spec().shape)
    ret, first, ctrl = 0.0, None, 0.0
    for i in range(CONTROL_STEPS):
        r = env.step(a).reward or 0.0
        ret += r
        ctrl = max(ctrl, float(np.abs(env.physics.data.ctrl).max()))
        if first is None and r > 0:
            first = i // 2
    return ret, first, ctrl


def _obs_of(ts):
    return np.concatenate([np.asarray(v).ravel() for v in ts.observation.values()]).astype(np.float32)


# ------------------------------------------------------------------- ours
def ours(n: int, log) -> list[dict]:
    import jax
    import jax.numpy as jnp
    from dm_control import suite

    from tdmpc2core.agents.common import eval_episode, eval_key
    from tdmpc2core.envs import make_env
    from tdmpc2core.envs.dmcontrol_env import DMControlEnv

    env = make_env("dmc:cup-catch")
    T, A = env.spec.episode_length, env.spec.action_dim
    assert T * env.spec.action_repeat == CONTROL_STEPS
    names, keys = [], []
    for s in (0, 1, 2):  # the step-0 evaluation's episode keys (evaluate_all, eval index 0)
        for i, k in enumerate(jax.random.split(eval_key(s, 0), 10)):
            names.append(f"eval seed {s} ep {i}")
            keys.append(k)
    for i, k in enumerate(jax.random.split(jax.random.PRNGKey(20261206), n)):
        names.append(f"extra {i}")
        keys.append(k)
    keys = jnp.stack(keys)

    def zero(obs, mean, t0, k):
        return jnp.zeros((A,)), mean

    def one(key):  # eval_episode's own reset key split, so the states are the evaluation's
        k_reset = jax.random.split(key)[0]
        _, obs = env.reset(k_reset)
        ret = eval_episode(env, zero, T, 1, A, key)[0]
        return obs, DMControlEnv.reset_seed(k_reset), ret

    t = time.perf_counter()
    obs, seeds, rets = jax.jit(jax.vmap(one))(keys)
    obs, seeds, rets = np.asarray(obs), np.asarray(seeds), np.asarray(rets)
    log(f"ours: {len(names)} episodes in {time.perf_counter() - t:.0f} s")
    out, t = [], time.perf_counter()
    for name, o, s, r in zip(names, obs, seeds, rets):
        e = suite.load("ball_in_cup", "catch", task_kwargs={"random": int(s)}, visualize_reward=False)
        o_dmc = _obs_of(e.reset())
        st = _dmc_state(e.physics)
        r_dmc, first, _ = _dmc_zero_rollout(e)
        out.append(dict(name=name, task_seed=int(s), **st, ret=float(r), first=first,
                        dmc_obs_equal=bool(np.array_equal(o, o_dmc)), dmc_ret=float(r_dmc)))
    log(f"ours, dm_control replay: {time.perf_counter() - t:.0f} s")
    return out


# ------------------------------------------------------------------- dm_control alone
def dmc(n: int, log) -> list[dict]:
    from dm_control import suite

    out, t = [], time.perf_counter()
    for s in range(n):
        e = suite.load("ball_in_cup", "catch", task_kwargs={"random": s}, visualize_reward=False)
        e.reset()
        st = _dmc_state(e.physics)
        r, first, _ = _dmc_zero_rollout(e)
        out.append(dict(name=f"random={s}", **st, ret=float(r), first=first))
    log(f"dmc: {n} episodes in {time.perf_counter() - t:.0f} s")
    return out


# ------------------------------------------------------------------- official (worker process)
def official_worker(spec: dict) -> list[dict]:
    sys.path.insert(0, str(Path(spec["official"]) / "tdmpc2"))
    import hydra.utils
    import torch

    hydra.utils.get_original_cwd = lambda: os.getcwd()
    from common.parser import parse_cfg
    from common.seed import set_seed
    from dm_control import suite
    from envs import make_env
    from omegaconf import OmegaConf

    out = []
    for seed in spec["seeds"]:
        cfg = OmegaConf.load(Path(spec["official"]) / "tdmpc2" / "config.yaml")
        cfg.pop("defaults", None)
        cfg.merge_with(dict(task="cup-catch", seed=seed, model_size=5, obs="state", disable_wandb=True,
                            save_video=False))
        cfg = parse_cfg(cfg)
        set_seed(seed)
        env = make_env(cfg)
        phys = env.unwrapped.physics
        plain = suite.load("ball_in_cup", "catch", task_kwargs={"random": seed}, visualize_reward=False)
        for ep in range(spec["episodes"]):
            env.reset()
            st = _dmc_state(phys)
            done, ret, first, t, ctrl = False, 0.0, None, 0, 0.0
            while not done:
                _, r, done, _ = env.step(torch.zeros(env.action_space.shape))
                ret += float(r)
                ctrl = max(ctrl, float(np.abs(phys.data.ctrl).max()))
                if first is None and float(r) > 0:
                    first = t
                t += 1
            plain.reset()
            q_plain = plain.physics.data.qpos.copy()
            r_plain, _, _ = _dmc_zero_rollout(plain)
            out.append(dict(name=f"seed {seed} ep {ep}", seed=seed, ep=ep, **st,
                            ret=ret, first=first, steps=t, max_abs_ctrl=ctrl,
                            dmc_qpos_equal=bool(np.array_equal(q_plain, np.asarray(st["qpos"]))),
                            dmc_ret=float(r_plain)))
    return out


def official(args, log) -> list[dict]:
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "cup_catch_initial_states"
    tmp.mkdir(parents=True, exist_ok=True)
    spec, result = tmp / "spec.json", tmp / "result.json"
    spec.write_text(json.dumps(dict(official=str(Path(args.official).resolve()), seeds=[1, 2, 3],
                                    episodes=args.n // 3)))
    result.unlink(missing_ok=True)
    t = time.perf_counter()
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run([args.official_python, str(Path(__file__).resolve()), "--worker", str(spec),
                           "--result", str(result)], env=env, capture_output=True, text=True, cwd=str(tmp))
    if proc.returncode != 0 or not result.exists():
        raise RuntimeError(f"official worker failed ({proc.returncode}): {proc.stderr[-3000:]}")
    log(f"official: {time.perf_counter() - t:.0f} s")
    return json.loads(result.read_text())


# ------------------------------------------------------------------- statistics
def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(c - h, 0.0), min(c + h, 1.0)


def summarize(groups: dict[str, list[dict]], pairs, big) -> dict:
    from scipy import stats

    s = {}
    for g, eps in groups.items():
        q = np.array([e["qpos"] for e in eps])
        v = np.array([e["qvel"] for e in eps])
        c = np.array([e["ret"] > 0 for e in eps])
        rets = np.array([e["ret"] for e in eps])
        s[g] = dict(n=len(eps), catches=int(c.sum()), in_region=int(in_region(q).sum()), rate=float(c.mean()),
                    wilson95=wilson(int(c.sum()), len(eps)),
                    catch_returns=[float(rets[c].min()), float(rets[c].max())] if c.any() else None,
                    cup_qpos_max_abs=float(np.abs(q[:, :2]).max()), qvel_max_abs=float(np.abs(v).max()),
                    ball_x_mean=float(q[:, 2].mean()), ball_z_mean=float(q[:, 3].mean()),
                    catch_ball_x=[float(q[c, 2].min()), float(q[c, 2].max())] if c.any() else None,
                    catch_ball_z=[float(q[c, 3].min()), float(q[c, 3].max())] if c.any() else None)
    tests = {}
    for a, b in pairs:
        if a in groups and b in groups:
            qa = np.array([e["qpos"] for e in groups[a]])
            qb = np.array([e["qpos"] for e in groups[b]])
            ka, kb = s[a]["catches"], s[b]["catches"]
            tests[f"{a} vs {b}"] = dict(
                ks_ball_x_p=float(stats.ks_2samp(qa[:, 2], qb[:, 2]).pvalue),
                ks_ball_z_p=float(stats.ks_2samp(qa[:, 3], qb[:, 3]).pvalue),
                fisher_catch_p=float(stats.fisher_exact([[ka, s[a]["n"] - ka], [kb, s[b]["n"] - kb]]).pvalue))
    # chance: the pooled rate of the large independent samples, then the binomial odds of
    # the two step-0 evaluations' counts among 30 episodes
    k = sum(s[g]["catches"] for g in big if g in s)
    n = sum(s[g]["n"] for g in big if g in s)
    p = k / n
    chance = dict(pooled_from=[g for g in big if g in s], pooled_catches=k, pooled_n=n, pooled_rate=p,
                  p_0_of_30=float(stats.binom.pmf(0, 30, p)), p_5_or_more_of_30=float(stats.binom.sf(4, 30, p)),
                  p_0_of_30_and_5_or_more_of_30=float(stats.binom.pmf(0, 30, p) * stats.binom.sf(4, 30, p)))
    return dict(groups=s, tests=tests, chance=chance)


def markdown(res: dict) -> str:
    m, s = res["meta"], res["summary"]
    L = ["# cup-catch: initial states and zero-action catches", "",
         f"{m['date']}; {m['device']}; tdmpc2core {m['commit']}; dm_control {m['dm_control']}, MuJoCo {m['mujoco']}; "
         f"{m['wall_s']:.0f} s. Zero actions, 500 agent steps x action repeat 2 per episode; catch = return > 0.", "",
         "| episodes | n | catches | rate | Wilson 95% | catch returns | in region | ball_x / ball_z mean |",
         "|---|---|---|---|---|---|---|---|"]
    for g, x in s["groups"].items():
        cr = "-" if x["catch_returns"] is None else f"{x['catch_returns'][0]:.0f}-{x['catch_returns'][1]:.0f}"
        L.append(f"| {g} | {x['n']} | {x['catches']} | {x['rate']:.3f} | {x['wilson95'][0]:.3f}-{x['wilson95'][1]:.3f} "
                 f"| {cr} | {x['in_region']} | {x['ball_x_mean']:+.4f} / {x['ball_z_mean']:.4f} |")
    L += ["", "| pair | KS p (ball_x) | KS p (ball_z) | Fisher p (catch rate) |", "|---|---|---|---|"]
    for k, t in s["tests"].items():
        L.append(f"| {k} | {t['ks_ball_x_p']:.3f} | {t['ks_ball_z_p']:.3f} | {t['fisher_catch_p']:.3f} |")
    c = s["chance"]
    L += ["", f"Chance at the pooled rate {c['pooled_rate']:.3f} ({c['pooled_catches']} of {c['pooled_n']}: "
          f"{', '.join(c['pooled_from'])}): P(0 of 30) = {c['p_0_of_30']:.3f}, P(>= 5 of 30) = "
          f"{c['p_5_or_more_of_30']:.3f}, both = {c['p_0_of_30_and_5_or_more_of_30']:.4f}."]
    L += ["", "Initial cup qpos and every qvel, largest |value| over all episodes: "
          f"{max(max(x['cup_qpos_max_abs'], x['qvel_max_abs']) for x in s['groups'].values())} (the task draws only the "
          "ball's position)."]
    L += ["", "Checks: " + "; ".join(f"{k}: {v}" for k, v in res["checks"].items()) + ".", ""]
    L += [f"Catch region (every episode above once): {res['catch_region']}.", ""]
    return "\n".join(L)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=300, help="extra episodes of ours, dm_control seeds, official episodes")
    p.add_argument("--official", default=None, help="a checkout (or git archive) of nicklashansen/tdmpc2 at 5f6fade")
    p.add_argument("--official-python", default=sys.executable)
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        Path(args.result).write_text(json.dumps(official_worker(json.loads(Path(args.worker).read_text()))))
        return 0

    def log(msg):
        print(msg, flush=True)

    import importlib.metadata

    import jax
    import mujoco

    t0 = time.perf_counter()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    o = ours(args.n, log)
    G = dict(ours_eval="ours, step-0 eval (seeds 0-2)", ours=f"ours, {args.n} more keys",
             dmc=f"dm_control random=0..{args.n - 1}", off_eval="official, step-0 eval (seeds 1-3, eps 0-9)",
             off=f"official, {args.n // 3 * 3} (seeds 1-3)")
    groups = {G["ours_eval"]: o[:30], G["ours"]: o[30:], G["dmc"]: dmc(args.n, log)}
    checks = {"ours: first obs equal to dm_control's with task seed reset_seed(key)":
              f"{sum(e['dmc_obs_equal'] for e in o)} of {len(o)}",
              "ours: zero-action return equal to dm_control's": f"{sum(e['ret'] == e['dmc_ret'] for e in o)} of {len(o)}"}
    if args.official:
        off = official(args, log)
        groups[G["off_eval"]] = [e for e in off if e["ep"] < 10]
        groups[G["off"]] = off
        checks["official: initial qpos equal to plain dm_control's (random=seed, same reset count)"] = \
            f"{sum(e['dmc_qpos_equal'] for e in off)} of {len(off)}"
        checks["official: zero-action return equal to plain dm_control's"] = \
            f"{sum(e['ret'] == e['dmc_ret'] for e in off)} of {len(off)}"
        checks["official: max |ctrl| received with zero agent actions"] = max(e["max_abs_ctrl"] for e in off)
        checks["official: agent steps per episode"] = sorted({e["steps"] for e in off})
    pairs = [(G["ours"], G["dmc"]), (G["ours"], G["off"]), (G["dmc"], G["off"]), (G["ours_eval"], G["off_eval"])]
    summary = summarize(groups, pairs, big=[G["ours"], G["dmc"], G["off"]])
    every = [e for g, eps in groups.items() if g != G["off_eval"] for e in eps]  # each episode once
    q = np.array([e["qpos"] for e in every])
    c = np.array([e["ret"] > 0 for e in every])
    region = in_region(q)
    catch_region = (f"|ball_x| < {CATCH_X} and ball_z > {CATCH_Z} (qpos): {int((region & c).sum())} of {int(region.sum())} such states "
                    f"caught, {int((~region & c).sum())} of {int((~region).sum())} others caught "
                    f"(catches' |ball_x| <= {np.abs(q[c, 2]).max():.4f}, ball_z >= {q[c, 3].min():.4f}; the "
                    f"non-catches' smallest |ball_x| with ball_z > {CATCH_Z}: "
                    f"{np.abs(q[~c & (q[:, 3] > CATCH_Z), 2]).min():.4f}; "
                    f"{len(every)} episodes)")
    from tdmpc2core.io.provenance import short_commit

    res = dict(meta=dict(date=date, device=f"{platform.machine()} cpu", commit=short_commit(ROOT), jax=jax.__version__,
                         dm_control=importlib.metadata.version("dm_control"), mujoco=mujoco.__version__,
                         n=args.n, wall_s=time.perf_counter() - t0),
               checks=checks, catch_region=catch_region, summary=summary, episodes=groups)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res))
    md = markdown(res)
    out.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
