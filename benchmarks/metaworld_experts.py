"""Meta-World's scripted expert policies on our adapter and on Meta-World's own pinned stack.

Proves the Meta-World suite (docs/metaworld.md): each task's expert policy
(``metaworld.policies.ENV_POLICY_MAP``) runs for ``--episodes`` seeded episodes with the official
TD-MPC2 wrapper's semantics (reset, one zero-action step, the observation of the reset; each agent
step repeats the action twice; 100 agent steps; success = ``info['success']`` of the last
simulator step, and also of any step, Meta-World's own rule). Two stacks:

* ``--stack ours`` (the project's venv): our :class:`~tdmpc2core.envs.metaworld_env.MetaWorldEnv`
  (metaworld 3.0.0 on mujoco 3.17 with the weld-reset compatibility layer), through its jitted
  ``reset``/``step``; episode ``k`` resets with ``jax.random.key(k)``, whose goal seed is
  ``MetaWorldEnv.reset_seed(key)``, recorded in the output.
* ``--stack raw`` (the project's venv): the control: Meta-World's env on our stack (metaworld
  3.0.0, mujoco 3.17, the weld-reset layer) driven as the reference is, without our adapter; equal
  to ``ours`` episode for episode when the adapter adds nothing of its own.
* ``--stack reference`` (a scratch venv with ``metaworld==3.1.1``, which pins ``mujoco==3.3.0``;
  imports nothing of tdmpc2core): Meta-World's env driven directly, each episode's goal drawn as
  ours is (the env's ``np_random`` seeded with the same seed, ``seeded_rand_vec``), so both stacks
  start each episode from the same goal and object placement.

Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/metaworld_experts.py --stack ours --out ours.json
    /tmp/mwref/bin/python benchmarks/metaworld_experts.py --stack reference --seeds-from ours.json --out ref.json
    python benchmarks/metaworld_experts.py --table ours.json ref.json   # the markdown table

``--tasks mw-reach,mw-push`` limits the tasks. Output JSON: {"stack", "versions", "tasks": {id:
{"seeds", "success_last", "success_any", "returns", "reset_obs"}}}.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

EPISODE_STEPS = 100
REPEAT = 2


def _policy(name: str):
    from metaworld.policies import ENV_POLICY_MAP

    return ENV_POLICY_MAP[name + "-v3"]()


def _versions() -> dict:
    from importlib import metadata

    return {d: metadata.version(d) for d in ("metaworld", "mujoco", "gymnasium", "numpy")}


def run_ours(ids, episodes: int) -> dict:
    import jax

    from tdmpc2core.envs import make_env

    out = {}
    for env_id in ids:
        t0 = time.time()
        env = make_env(env_id)
        assert env.spec.episode_length == EPISODE_STEPS and env.spec.action_repeat == REPEAT
        policy = _policy(env_id[3:])
        reset, step = jax.jit(env.reset), jax.jit(env.step)
        rec = {"seeds": [], "success_last": [], "success_any": [], "returns": [], "reset_obs": []}
        for k in range(episodes):
            key = jax.random.key(k)
            rec["seeds"].append(int(env.reset_seed(key)))
            state, obs = reset(key)
            rec["reset_obs"].append(np.asarray(obs).tolist())
            ret, any_s, out_k = 0.0, False, None
            for _ in range(EPISODE_STEPS):
                a = np.asarray(policy.get_action(np.asarray(obs, np.float64)), np.float32)
                state, out_k = step(state, a, key)
                obs = out_k.obs
                ret += float(out_k.reward)
                any_s |= bool(out_k.success)
            rec["success_last"].append(bool(out_k.success))
            rec["success_any"].append(any_s)
            rec["returns"].append(ret)
        rec["seconds"] = time.time() - t0
        out[env_id] = rec
        print(f"{env_id}: last {np.mean(rec['success_last']):.2f} any {np.mean(rec['success_any']):.2f} "
              f"({rec['seconds']:.1f} s)", flush=True)
    return out


def run_reference(ids, seeds_by_task: dict, raw: bool = False) -> dict:
    """Meta-World's own env driven with the official wrapper's semantics, the given seeds: on its
    pinned stack, or (``raw``) on ours, built by ``make_metaworld_env`` (the weld-reset layer) but
    stepped without our adapter: the control that separates the adapter from the MuJoCo version."""
    from gymnasium.utils import seeding
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE

    out = {}
    for env_id in ids:
        t0 = time.time()
        name = env_id[3:]
        if raw:
            from tdmpc2core.envs.metaworld_env import make_metaworld_env

            env = make_metaworld_env(env_id, seed=0)
        else:
            env = ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE[name + "-v3-goal-observable"](seed=0)
        env._freeze_rand_vec = False
        env.seeded_rand_vec = True
        policy = _policy(name)
        zero = np.zeros(env.action_space.shape, np.float32)
        rec = {"seeds": [], "success_last": [], "success_any": [], "returns": [], "reset_obs": []}
        for seed in seeds_by_task[env_id]:
            rec["seeds"].append(int(seed))
            env.np_random, _ = seeding.np_random(int(seed))
            obs, _ = env.reset()
            env.step(zero.copy())
            obs = np.asarray(obs, np.float32)
            rec["reset_obs"].append(obs.tolist())
            ret, any_s, succ = 0.0, False, False
            for _ in range(EPISODE_STEPS):
                a = np.asarray(policy.get_action(np.asarray(obs, np.float64)), np.float32)
                r = 0.0
                for _ in range(REPEAT):
                    o, rr, _, _, info = env.step(a.copy())
                    r += float(rr)
                obs = np.asarray(o, np.float32)
                succ = float(info["success"]) > 0.5
                ret += float(np.float32(r))
                any_s |= succ
            rec["success_last"].append(succ)
            rec["success_any"].append(any_s)
            rec["returns"].append(ret)
        rec["seconds"] = time.time() - t0
        out[env_id] = rec
        print(f"{env_id}: last {np.mean(rec['success_last']):.2f} any {np.mean(rec['success_any']):.2f} "
              f"({rec['seconds']:.1f} s)", flush=True)
    return out


def same_episodes(ours: dict, raw: dict) -> tuple[int, int]:
    """(episodes whose success flags, return and reset observation are equal, episodes) of ours vs
    the raw control, over the tasks both have."""
    same = total = 0
    for env_id, o in ours["tasks"].items():
        r = raw["tasks"].get(env_id)
        if r is None:
            continue
        for k in range(len(o["seeds"])):
            total += 1
            same += (o["seeds"][k] == r["seeds"][k] and o["success_last"][k] == r["success_last"][k]
                     and o["success_any"][k] == r["success_any"][k] and o["reset_obs"][k] == r["reset_obs"][k]
                     and o["returns"][k] == r["returns"][k])
    return same, total


def table(ours: dict, ref: dict) -> str:
    """The per-task markdown table: success rates (last step, any step) on both stacks, the mean
    return, and the largest difference of the reset observations (same seeds)."""
    lines = ["| task | ours: success (last) | reference: success (last) | ours: any step | reference: any step "
             "| ours: mean return | reference: mean return | max abs diff of reset obs |",
             "|---|---|---|---|---|---|---|---|"]
    tot = {"ol": [], "rl": [], "oa": [], "ra": []}
    for env_id in sorted(ours["tasks"]):
        o = ours["tasks"][env_id]
        r = ref["tasks"].get(env_id)
        if r is None:
            lines.append(f"| {env_id} | {np.mean(o['success_last']):.0%} | pending | {np.mean(o['success_any']):.0%} "
                         f"| pending | {np.mean(o['returns']):.1f} | pending | pending |")
            continue
        assert o["seeds"] == r["seeds"], env_id
        d = float(np.max(np.abs(np.asarray(o["reset_obs"]) - np.asarray(r["reset_obs"]))))
        tot["ol"] += o["success_last"]; tot["rl"] += r["success_last"]
        tot["oa"] += o["success_any"]; tot["ra"] += r["success_any"]
        lines.append(f"| {env_id} | {np.mean(o['success_last']):.0%} | {np.mean(r['success_last']):.0%} "
                     f"| {np.mean(o['success_any']):.0%} | {np.mean(r['success_any']):.0%} "
                     f"| {np.mean(o['returns']):.1f} | {np.mean(r['returns']):.1f} | {d:.1e} |")
    if tot["ol"]:
        lines.append(f"| **all** | {np.mean(tot['ol']):.1%} | {np.mean(tot['rl']):.1%} | {np.mean(tot['oa']):.1%} "
                     f"| {np.mean(tot['ra']):.1%} | | | |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stack", choices=["ours", "reference", "raw"],
                    help="raw: Meta-World's env on our stack without our adapter (the control)")
    ap.add_argument("--episodes", type=int, default=5)
    ap.add_argument("--tasks", default="", help="comma-separated mw-* ids (default: all 50)")
    ap.add_argument("--seeds-from", default=None, help="(reference) the ours JSON whose seeds to replay")
    ap.add_argument("--out", default=None)
    ap.add_argument("--table", nargs="+", metavar="JSON",
                    help="OURS_JSON REFERENCE_JSON [RAW_JSON]: print the table (and ours vs the raw control)")
    args = ap.parse_args(argv)
    if args.table:
        with open(args.table[0]) as f:
            ours = json.load(f)
        with open(args.table[1]) as f:
            ref = json.load(f)
        print(table(ours, ref))
        if len(args.table) > 2:
            with open(args.table[2]) as f:
                same, total = same_episodes(ours, json.load(f))
            print(f"\nours vs the raw control (Meta-World's env on our stack without the adapter): {same} of "
                  f"{total} episodes identical (success flags, return, reset observation)")
        return 0
    if args.stack is None:
        ap.error("--stack or --table is required")
    if args.stack == "ours":
        from tdmpc2core.envs.domain_ids import METAWORLD_ENVS

        ids = [t for t in args.tasks.split(",") if t] or list(METAWORLD_ENVS)
        unknown = [t for t in ids if t not in METAWORLD_ENVS]
        if unknown:
            ap.error(f"--tasks: unknown Meta-World ids {unknown}")
        tasks = run_ours(ids, args.episodes)
    else:
        if not args.seeds_from:
            ap.error(f"--stack {args.stack} needs --seeds-from OURS_JSON (the same goals on both stacks)")
        with open(args.seeds_from) as f:
            seeds = {k: v["seeds"] for k, v in json.load(f)["tasks"].items()}
        ids = [t for t in args.tasks.split(",") if t] or list(seeds)
        missing = [t for t in ids if t not in seeds]
        if missing:
            ap.error(f"--tasks: {missing} not in {args.seeds_from}")
        tasks = run_reference(ids, seeds, raw=args.stack == "raw")
    result = {"stack": args.stack, "versions": _versions(), "episodes": args.episodes, "tasks": tasks}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
