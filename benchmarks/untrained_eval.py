"""The untrained agent's evaluation (agent step 0): ours as is, ours with the official tie order, the official code.

    python benchmarks/untrained_eval.py [--task cup-catch] [--seeds 0 1 2] [--episodes 10]
        [--official /tmp/official --official-seeds 1 2 3] [--out benchmarks/runs/untrained_eval.json]
    python benchmarks/untrained_eval.py --reduced        # seconds: a tiny model on dm_control cartpole-balance

What it measures (the step-0 finding on cup-catch, docs/fidelity.md "Reproduction"; deviation N10
in docs/deviations.md): before the first update the reward and Q heads are zero, so every planner
trajectory's value is the same number and the elites are decided by the top-k's tie order alone.
``jax.lax.top_k`` takes the lowest indices (the ``num_pi_trajs`` policy trajectories first);
``torch.topk`` (5f6fade's ``plan``) takes others. Each variant is the eval-mode return of the
untrained agent of each seed over ``--episodes`` episodes, with the eval-mode action statistics
(mean |a|, sd, fraction of action entries at exactly +-1, pooled over steps, episodes and action
dims):

- ``ours``: the library's own step-0 evaluation (``TDMPC2.init`` with ``PRNGKey(seed)``, then
  ``TDMPC2.evaluate_all`` with evaluation index 0, the program ``tdmpc2 train-single`` runs at
  agent step 0), the action statistics from an ``eval_metrics`` extension on the same episodes.
- ``ours_torch_ties``: the same, with the planner's elite selection given torch's tie order:
  the candidates are reordered so that the indices ``torch.topk`` returns for ``num_samples``
  equal values come first (:data:`TORCH_TIE_ORDER`, read from torch 2.13 on the CPU; checked
  against the installed torch when it imports). On values that do not tie it selects the same
  elites as ``ours``. Done by patching ``tdmpc2core.model.planner.mppi_update`` inside this
  script only; the library is unchanged.
- ``official`` (with ``--official``): nicklashansen/tdmpc2 at 5f6fade, untrained, its own
  ``OnlineTrainer.eval`` (10 episodes in its config) on its own dm_control env (task seed = the
  seed), PyTorch on the CPU (the adapters of benchmarks/learning_parity.py), one process per seed.
  ``--official-python`` must import torch, tensordict, gym 0.26, omegaconf, hydra-core and
  dm_control (the project's ``official`` extra lacks gym, omegaconf and hydra-core: e.g. a
  wrapper script that adds a ``pip install --target`` folder of those three to PYTHONPATH).

The values shortcut (``--values zeros``, the default): while every value ties, the planner's
output does not depend on the values, so the value estimate (almost all of a plan's cost: about
0.4 s per agent step at model size 5 on a 2-core CPU, against a few ms without) is replaced by
zeros. This is exact only before the first update; the script checks it before measuring:
(1) on one seed's first ``--check-steps`` evaluation steps, the library's planner with its real
values and with zeros give bit-identical actions, for both tie orders; (2) the real values at
each of those observations tie exactly (max - min = 0 over ``num_samples`` random action
sequences). The official side checks (2) on its first plans' real values, then uses zeros too
(its random streams then differ from an unpatched run's: the value estimate draws the policy
noise and the Q pair; the actions are drawn from the same distribution). ``--values full`` runs
the real value estimate throughout (hours on a 2-core CPU at model size 5).

Output: a Markdown table on stdout and in ``<out>.md``, the JSON at ``--out``.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "runs" / "untrained_eval.json"
OFFICIAL_COMMIT = "5f6fadec0fec78304b4b53e8171d348b58cac486"

#: ``torch.topk(torch.zeros(N), k).indices`` on the CPU (PyTorch 2.13.0+cpu), {(N, k): indices in
#: the order returned}: the elites 5f6fade's plan() picks when all values tie. (512, 64): the
#: paper's num_samples and num_elites (all 64 among the sampled trajectories 24..511, none of the
#: 24 policy trajectories); (64, 8): the reduced form's.
TORCH_TIE_ORDER = {
    (512, 64): [369, 368, 383, 382, 381, 380, 379, 378, 377, 376, 375, 374, 373, 372, 371, 370, 351, 360, 353, 354,
                355, 356, 357, 358, 359, 364, 367, 366, 365, 362, 361, 320, 336, 321, 322, 323, 324, 325, 326, 327,
                328, 329, 330, 331, 332, 333, 334, 335, 352, 337, 338, 339, 340, 341, 342, 343, 344, 345, 346, 347,
                348, 349, 350, 363],
    (64, 8): [44, 41, 42, 43, 46, 47, 40, 45],
}

#: The paper's DMControl evaluation at model size 5 (the planner at config.yaml's values)
FULL = dict(task="cup-catch", seeds=(0, 1, 2), episodes=10, check_steps=40, agent=dict(model_size=5))
#: The reduced form (the test): a tiny model on cartpole-balance, 2 episodes of 12 agent steps
REDUCED = dict(task="cartpole-balance", seeds=(0, 1), episodes=2, check_steps=6, episode_length=24,
               agent=dict(model_size=5, enc_dim=16, mlp_dim=16, latent_dim=16, num_q=2, num_samples=64,
                          num_elites=8, num_pi_trajs=4, iterations=2))
PAPER_PLANNER = dict(num_samples=512, num_elites=64, num_pi_trajs=24, iterations=6, horizon=3, max_std=2.0,
                     min_std=0.05, temperature=0.5)


# =================================================================== tie orders and patches
def torch_tie_order(n: int, k: int) -> list:
    """The indices ``torch.topk`` returns for ``n`` equal values and ``k`` (:data:`TORCH_TIE_ORDER`),
    checked against the installed torch when it imports (ValueError if it differs)."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        got = torch.topk(torch.zeros(n, 1).squeeze(1), k, dim=0).indices.tolist()
        rec = TORCH_TIE_ORDER.get((n, k))
        if rec is not None and got != rec:
            raise ValueError(f"torch {torch.__version__}: topk of {n} equal values, k={k}, gives {got}, not the "
                             f"recorded {rec}")
        return got
    if (n, k) not in TORCH_TIE_ORDER:
        raise ValueError(f"no recorded torch tie order for num_samples={n}, num_elites={k} and torch is not installed")
    return list(TORCH_TIE_ORDER[(n, k)])


def tie_permutation(n: int, first: list):
    """A permutation of range(n): ``first`` in its order, then the other indices ascending. The
    lowest-index-first top-k of ``value[perm]`` picks ``first`` on all-equal values."""
    rest = sorted(set(range(n)) - set(first))
    return list(first) + rest


def torch_ties_update(orig, n: int, k: int):
    """``mppi_update`` with torch's tie order: the candidates reordered by :func:`tie_permutation`
    before the library's own update (the elite math untouched)."""
    import jax.numpy as jnp

    perm = jnp.asarray(tie_permutation(n, torch_tie_order(n, k)), jnp.int32)

    def update(cfg, actions, value, mask=None):
        return orig(cfg, actions[:, perm], value[perm], mask)

    return update


def zero_values(wm, params, z, actions, gamma, key, e=None, mask=None, eps=None, pair=None):
    """``estimate_value`` of an untrained agent as far as the planner can tell: all equal (0)."""
    import jax.numpy as jnp

    return jnp.zeros(z.shape[0], jnp.float32)


@contextlib.contextmanager
def patched_planner(values: str, ties: str, n: int, k: int):
    """Inside: the library's planner module with ``values`` ("full": its own; "zeros":
    :func:`zero_values`) and ``ties`` ("jax": its own top-k; "torch": :func:`torch_ties_update`).
    A program must be traced inside for the patch to take effect."""
    from tdmpc2core.model import planner

    saved = planner.estimate_value, planner.mppi_update
    try:
        if values == "zeros":
            planner.estimate_value = zero_values
        elif values != "full":
            raise ValueError(f"values={values!r}")
        if ties == "torch":
            planner.mppi_update = torch_ties_update(saved[1], n, k)
        elif ties != "jax":
            raise ValueError(f"ties={ties!r}")
        yield
    finally:
        planner.estimate_value, planner.mppi_update = saved


class ActionStats:
    """eval_metrics: sums over one seed's evaluation actions (every step, episode, action dim)."""

    name = "action_stats"

    def eval_metrics(self, state, model, episodes):
        import jax.numpy as jnp

        a = episodes.action.astype(jnp.float32)
        w = jnp.broadcast_to(episodes.valid[..., None], a.shape).astype(jnp.float32)
        return dict(n=jnp.sum(w), sum=jnp.sum(w * a), sum_sq=jnp.sum(w * a * a), sum_abs=jnp.sum(w * jnp.abs(a)),
                    n_bound=jnp.sum(w * (jnp.abs(a) >= 1.0)))


def stats_of(n, s, sq, sabs, nb) -> dict:
    n = float(n)
    mean = float(s) / n
    return dict(mean_abs=float(sabs) / n, mean=mean, sd=max(float(sq) / n - mean * mean, 0.0) ** 0.5,
                frac_at_bound=float(nb) / n, n_entries=int(n))


# =================================================================== ours
def make_agent(task: str, setting: dict, extensions=()):
    from tdmpc2core import TDMPC2

    kw = dict(setting["agent"])
    if setting.get("episode_length"):
        kw["episode_length"] = setting["episode_length"]
    return TDMPC2(f"dmc:{task}", extensions=list(extensions), **kw)


def ours_eval(task: str, seeds, episodes: int, setting: dict, ties: str, values: str, log) -> dict:
    """The library's step-0 evaluation of ``seeds`` (one program, seeds vmapped) under the patch."""
    import numpy as np

    agent = make_agent(task, setting, [ActionStats()])
    cfg = agent.cfg
    t = time.perf_counter()
    with patched_planner(values, ties, cfg.num_samples, cfg.num_elites):
        state = agent.init(list(seeds), 2 * agent.episode_length)
        rets, lens, _, ext = agent.evaluate_all(state, episodes, eval_index=0, seeds=list(seeds))
    wall = time.perf_counter() - t
    g = {k.split("/")[-1]: np.asarray(v, np.float64) for k, v in ext.items()}
    per_seed = []
    for i, s in enumerate(seeds):
        st = stats_of(g["n"][i], g["sum"][i], g["sum_sq"][i], g["sum_abs"][i], g["n_bound"][i])
        per_seed.append(dict(seed=int(s), returns=[float(x) for x in rets[i]], mean_return=float(np.mean(rets[i])),
                             lengths=[int(x) for x in lens[i]], actions=st))
    pooled = stats_of(*(np.sum(g[k]) for k in ("n", "sum", "sum_sq", "sum_abs", "n_bound")))
    log(f"ours ties={ties} values={values}: {[round(p['mean_return'], 1) for p in per_seed]} ({wall:.0f} s)")
    return dict(implementation="ours", ties=ties, values=values, seeds=per_seed,
                mean_return=float(np.mean([p["mean_return"] for p in per_seed])), actions=pooled, wall_s=wall,
                compile_s=agent.compile_seconds)


def check_zero_values(task: str, seed: int, steps: int, episodes: int, setting: dict, log) -> dict:
    """The shortcut's check on ``seed``'s untrained agent: the first ``steps`` steps of its first
    evaluation episode (the library's ``eval_episode`` and ``plan``) with real values and with
    zeros, for both tie orders (bit-identical actions?), and whether the real values tie at each
    observation visited."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from tdmpc2core.agents.common import eval_episode, eval_key
    from tdmpc2core.model import planner

    agent = make_agent(task, setting)
    cfg, A, H = agent.cfg, agent.spec.action_dim, agent.cfg.horizon
    state = agent.init([seed], 2 * agent.episode_length)
    params = jax.tree_util.tree_map(lambda x: x[0], state.agent.params)
    key = jax.random.split(eval_key(seed, 0), episodes)[0]  # the first episode's key of evaluation 0
    out = {}
    t = time.perf_counter()
    for ties in ("jax", "torch"):
        acts = {}
        for values in ("full", "zeros"):
            with patched_planner(values, ties, cfg.num_samples, cfg.num_elites):
                def act(obs, mean, t0, k):
                    return planner.plan(agent.wm, params, obs, mean, t0, True, agent.gamma, k)

                fn = jax.jit(lambda k: eval_episode(agent.env, act, steps, H, A, k, record=True))
                _, _, _, (obs, a, r, _) = fn(key)
                acts[values] = np.asarray(a)
                if values == "full":
                    visited = obs
        agent.env.raise_host_error("in the check")
        same = bool(np.array_equal(acts["full"], acts["zeros"]))
        out[ties] = dict(identical_actions=same, max_abs_diff=float(np.max(np.abs(acts["full"] - acts["zeros"]))))

    # the real values at each visited observation, over num_samples random action sequences
    def spread(obs, k):
        z = agent.wm.encode(params, obs[None])
        zN = jnp.broadcast_to(z, (cfg.num_samples, z.shape[-1]))
        k1, k2 = jax.random.split(k)
        acts = jax.random.uniform(k1, (H, cfg.num_samples, A), minval=-1.0, maxval=1.0)
        v = planner.estimate_value(agent.wm, params, zN, acts, agent.gamma, k2)
        return jnp.max(v) - jnp.min(v), v[0]

    sp, v0 = jax.jit(jax.vmap(spread))(visited, jax.random.split(jax.random.PRNGKey(7), visited.shape[0]))
    out["values_tie"] = dict(observations=int(visited.shape[0]), max_spread=float(jnp.max(sp)),
                             value=sorted({float(x) for x in np.asarray(v0)}))
    out["steps"], out["seed"], out["wall_s"] = int(steps), int(seed), time.perf_counter() - t
    out["ok"] = bool(out["jax"]["identical_actions"] and out["torch"]["identical_actions"] and float(jnp.max(sp)) == 0.0)
    log(f"check (seed {seed}, {steps} steps): {out}")
    return out


def elite_selection(n: int, k: int) -> dict:
    """The elites each tie order picks on ``n`` all-equal values (through the library's
    ``mppi_update`` and the patched one): the index sets."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from tdmpc2core.model import planner
    from tdmpc2core.model.config import TDMPC2Config

    cfg = TDMPC2Config(num_samples=n, num_elites=k, num_pi_trajs=0, horizon=1)
    actions = jnp.arange(n, dtype=jnp.float32).reshape(1, n, 1)  # an action that names its index
    value = jnp.zeros((n,), jnp.float32)
    got = {}
    for ties in ("jax", "torch"):
        upd = planner.mppi_update if ties == "jax" else torch_ties_update(planner.mppi_update, n, k)
        elite_actions = jax.jit(lambda a, v: upd(cfg, a, v)[3])(actions, value)
        got[ties] = [int(x) for x in np.asarray(elite_actions[0, :, 0])]
    return got


# =================================================================== the official side
def official_eval_worker(spec: dict) -> dict:
    """One seed of 5f6fade, untrained: its OnlineTrainer.eval, its value estimate replaced by
    zeros after ``check_plans`` plans whose real values are checked to tie."""
    sys.path.insert(0, str(ROOT / "tools"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import learning_parity as lp
    import numpy as np
    import record_parity as rp
    import torch

    root, src, commit = rp.official_checkout(spec["official"], OFFICIAL_COMMIT)
    torch.set_num_threads(1)
    rp.purge_official_modules()
    sys.path.insert(0, str(src))
    import hydra.utils
    from omegaconf import OmegaConf

    hydra.utils.get_original_cwd = lambda: str(Path(os.environ.get("TMPDIR", "/tmp")) / "untrained_eval_official")
    import common.scale as oscale
    import tdmpc2 as oagent
    from common.parser import parse_cfg
    from common.seed import set_seed
    from envs import make_env
    from trainer.online_trainer import OnlineTrainer

    cpu_torch, _ = lp.official_cpu_torch(rp, torch)
    oagent.torch = cpu_torch
    oscale.torch = cpu_torch
    cfg = OmegaConf.load(src / "config.yaml")
    cfg.pop("defaults", None)
    cfg.merge_with(dict(task=spec["task"], seed=int(spec["seed"]), model_size=5, obs="state",
                        eval_episodes=int(spec["episodes"]), save_video=False, save_agent=False, save_csv=False,
                        disable_wandb=True))
    cfg = parse_cfg(cfg)
    set_seed(cfg.seed)
    env = make_env(cfg)
    agent = oagent.TDMPC2(cfg)
    planner_cfg = {k: cfg[k] for k in PAPER_PLANNER}
    real = agent._estimate_value
    spreads = []
    if spec["values"] == "zeros":
        def estimate_value(z, actions, task):
            if len(spreads) < int(spec["check_plans"]):
                v = real(z, actions, task)
                spreads.append(float(v.max() - v.min()))
            return torch.zeros(z.shape[0], 1)

        agent._estimate_value = estimate_value
    actions, rewards = [], []
    act, step = agent.act, env.step

    def rec_act(*a, **k):
        out = act(*a, **k)
        actions.append(out.detach().cpu().numpy().copy())
        return out

    def rec_step(a):
        out = step(a)
        rewards.append((float(out[1]), bool(out[2])))
        return out

    agent.act, env.step = rec_act, rec_step
    trainer = OnlineTrainer(cfg=cfg, env=env, agent=agent, buffer=None, logger=None)
    t = time.perf_counter()
    res = trainer.eval()
    wall = time.perf_counter() - t
    returns, lengths, acc, n = [], [], 0.0, 0
    for r, done in rewards:
        acc, n = acc + r, n + 1
        if done:
            returns.append(acc)
            lengths.append(n)
            acc, n = 0.0, 0
    a = np.stack(actions).astype(np.float64)
    ties_idx = torch.topk(torch.zeros(cfg.num_samples, 1).squeeze(1), cfg.num_elites, dim=0).indices.tolist()
    import tensordict

    return dict(seed=int(spec["seed"]), returns=returns, mean_return=float(res["episode_reward"]),
                lengths=lengths,
                actions=stats_of(a.size, a.sum(), (a * a).sum(), np.abs(a).sum(), (np.abs(a) >= 1.0).sum()),
                value_checks=dict(plans=len(spreads), max_spread=max(spreads) if spreads else None),
                topk_of_equal_values=sorted(ties_idx), planner=planner_cfg, wall_s=wall,
                info=dict(commit=commit, torch=torch.__version__, tensordict=tensordict.__version__,
                          params=int(agent.model.total_params),
                          discount=float(agent.discount), episode_length=int(cfg.episode_length)))


def official_eval(args, task: str, seeds, episodes: int, values: str, log) -> dict:
    import numpy as np

    per_seed, t = [], time.perf_counter()
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "untrained_eval_official"
    tmp.mkdir(parents=True, exist_ok=True)
    for s in seeds:
        spec, result = tmp / f"spec-{task}-{s}.json", tmp / f"result-{task}-{s}.json"
        spec.write_text(json.dumps(dict(official=args.official, task=task, seed=int(s), episodes=int(episodes),
                                        values=values, check_plans=args.official_check_plans)))
        result.unlink(missing_ok=True)
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
        logf = tmp / f"log-{task}-{s}.txt"
        with open(logf, "w") as f:
            proc = subprocess.run([args.official_python, str(Path(__file__).resolve()), "--worker", str(spec),
                                   "--result", str(result)], env=env, stdout=f, stderr=subprocess.STDOUT, cwd=str(tmp))
        if proc.returncode != 0 or not result.exists():
            raise RuntimeError(f"official seed {s} failed (exit {proc.returncode}): {logf.read_text()[-3000:]}")
        r = json.loads(result.read_text())
        log(f"official seed {s}: {r['mean_return']:.1f} {[round(x, 1) for x in r['returns']]} "
            f"values checked {r['value_checks']} ({r['wall_s']:.0f} s)")
        per_seed.append(r)
    keys = ("mean_abs", "mean", "sd", "frac_at_bound", "n_entries")
    n = sum(p["actions"]["n_entries"] for p in per_seed)
    m = sum(p["actions"]["mean"] * p["actions"]["n_entries"] for p in per_seed) / n
    sq = sum((p["actions"]["sd"] ** 2 + p["actions"]["mean"] ** 2) * p["actions"]["n_entries"] for p in per_seed) / n
    pooled = dict(mean_abs=sum(p["actions"]["mean_abs"] * p["actions"]["n_entries"] for p in per_seed) / n, mean=m,
                  sd=max(sq - m * m, 0.0) ** 0.5,
                  frac_at_bound=sum(p["actions"]["frac_at_bound"] * p["actions"]["n_entries"] for p in per_seed) / n,
                  n_entries=n)
    assert set(pooled) == set(keys)
    return dict(implementation="official", ties="torch (cpu)", values=values, seeds=per_seed,
                mean_return=float(np.mean([p["mean_return"] for p in per_seed])), actions=pooled,
                wall_s=time.perf_counter() - t)


# =================================================================== report
def markdown(res: dict) -> str:
    m = res["meta"]
    lines = [f"# Untrained agent's evaluation (agent step 0): {m['task']}", "",
             f"{m['date']}; {m['device']}; JAX {m['jax']}; tdmpc2core {m['commit']}; {m['episodes']} episodes per seed; "
             f"values: {m['values']}; load average (1/5/15 min) before {m['loadavg_before']}, after "
             f"{m['loadavg_after']}.", "",
             "| variant | seed | episode returns | mean | mean abs(a) | sd(a) | frac abs(a)=1 |",
             "|---|---|---|---|---|---|---|"]
    for v in res["variants"]:
        name = v["implementation"] if v["implementation"] == "official" else f"ours, {v['ties']} ties"
        for s in v["seeds"]:
            a = s["actions"]
            lines.append(f"| {name} | {s['seed']} | {' '.join(f'{x:.1f}' for x in s['returns'])} | "
                         f"{s['mean_return']:.1f} | {a['mean_abs']:.3f} | {a['sd']:.3f} | {a['frac_at_bound']:.3f} |")
        a = v["actions"]
        lines.append(f"| **{name}** | all | | **{v['mean_return']:.1f}** | {a['mean_abs']:.3f} | {a['sd']:.3f} | "
                     f"{a['frac_at_bound']:.3f} |")
    es = res["elite_selection"]
    lines += ["", f"Elites on {m['num_samples']} equal values (k = {m['num_elites']}): jax.lax.top_k "
              f"{sorted(es['jax'])[0]}..{sorted(es['jax'])[-1]}, torch.topk (CPU) {sorted(es['torch'])[0]}.."
              f"{sorted(es['torch'])[-1]} (policy trajectories are 0..{m['num_pi_trajs'] - 1})."]
    if res.get("check"):
        c = res["check"]
        lines.append(f"Values shortcut check (seed {c['seed']}, {c['steps']} steps): identical actions with real values "
                     f"and zeros: jax ties {c['jax']['identical_actions']}, torch ties {c['torch']['identical_actions']}; "
                     f"real values' max spread over {c['values_tie']['observations']} observations "
                     f"{c['values_tie']['max_spread']} (value {c['values_tie']['value']}).")
    return "\n".join(lines) + "\n"


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default=None, help="dm_control task (official name), default cup-catch")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="our seeds (default 0 1 2)")
    p.add_argument("--episodes", type=int, default=None, help="evaluation episodes per seed (default 10)")
    p.add_argument("--values", choices=("zeros", "full"), default="zeros",
                   help="zeros: the value shortcut (checked first; exact before the first update); full: real values")
    p.add_argument("--check-steps", type=int, default=None, help="steps of the shortcut's check (default 40)")
    p.add_argument("--variants", nargs="+", choices=("jax", "torch"), default=["jax", "torch"])
    p.add_argument("--official", default=None, help="a checkout (or git archive) of nicklashansen/tdmpc2 at 5f6fade")
    p.add_argument("--official-python", default=sys.executable)
    p.add_argument("--official-seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--official-check-plans", type=int, default=20,
                   help="plans whose real values are checked to tie before the official side uses zeros")
    p.add_argument("--reduced", action="store_true", help="a tiny model on cartpole-balance, 2 episodes of 12 steps")
    p.add_argument("--out", default=None, help=f"JSON path (default {DEFAULT_OUT.relative_to(ROOT)}; reduced: "
                   "$TMPDIR/untrained_eval_reduced.json)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker:
        res = official_eval_worker(json.loads(Path(args.worker).read_text()))
        Path(args.result).write_text(json.dumps(res))
        return 0
    setting = REDUCED if args.reduced else FULL
    task = args.task or setting["task"]
    seeds = args.seeds or list(setting["seeds"])
    episodes = args.episodes or setting["episodes"]
    check_steps = args.check_steps if args.check_steps is not None else setting["check_steps"]
    out = Path(args.out) if args.out else (Path(os.environ.get("TMPDIR", "/tmp")) / "untrained_eval_reduced.json"
                                           if args.reduced else DEFAULT_OUT)

    def log(msg):
        print(f"[untrained_eval {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    import jax

    os.environ.setdefault("MUJOCO_GL", "egl")
    load0, t0 = _loadavg(), time.perf_counter()
    agent = make_agent(task, setting)
    cfg = agent.cfg
    if not args.reduced:
        bad = {k: (getattr(cfg, k), v) for k, v in PAPER_PLANNER.items() if getattr(cfg, k) != v}
        if bad or agent.episode_length != 500 or agent.action_repeat != 2:
            raise ValueError(f"not the paper's planner / episode: {bad}, T={agent.episode_length}, "
                             f"repeat={agent.action_repeat}")
    from tdmpc2core.io.provenance import short_commit

    res = dict(meta=dict(task=task, seeds=seeds, episodes=episodes, values=args.values, reduced=bool(args.reduced),
                         date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                         device=f"{jax.default_backend()} ({platform.processor() or platform.machine()}, "
                                f"{os.cpu_count()} cores)",
                         jax=jax.__version__, commit=short_commit(ROOT), python=platform.python_version(),
                         num_samples=cfg.num_samples, num_elites=cfg.num_elites, num_pi_trajs=cfg.num_pi_trajs,
                         iterations=cfg.iterations, horizon=cfg.horizon, model=dict(mlp_dim=cfg.mlp_dim,
                         latent_dim=cfg.latent_dim, enc_dim=cfg.enc_dim, num_q=cfg.num_q),
                         episode_length=agent.episode_length, action_repeat=agent.action_repeat,
                         loadavg_before=load0))
    del agent
    res["elite_selection"] = elite_selection(cfg.num_samples, cfg.num_elites)
    log(f"elites on equal values: jax {sorted(res['elite_selection']['jax'])[:4]}..., "
        f"torch {sorted(res['elite_selection']['torch'])[:4]}...")
    if args.values == "zeros" and check_steps > 0:
        res["check"] = check_zero_values(task, seeds[0], check_steps, episodes, setting, log)
        if not res["check"]["ok"]:
            log("the values shortcut is NOT exact here: use --values full")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(res, indent=1))
            return 1
    res["variants"] = [ours_eval(task, seeds, episodes, setting, ties, args.values, log) for ties in args.variants]
    if args.official:
        if args.reduced:
            raise SystemExit("--official runs the paper's size-5 agent; not with --reduced")
        try:
            res["variants"].append(official_eval(args, task, args.official_seeds, episodes, args.values, log))
        except Exception as e:  # noqa: BLE001 (ours are kept; the reason is recorded)
            log(f"official side failed: {e}")
            res["official_error"] = f"{type(e).__name__}: {e}"
    res["meta"]["loadavg_after"] = _loadavg()
    res["meta"]["wall_s"] = time.perf_counter() - t0
    md = markdown(res)
    print(md)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1, default=str))
    out.with_suffix(".md").write_text(md)
    log(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
