"""Write tiny official-format checkpoints with the official TD-MPC2 code, and its planner's
eval-mode numbers on them (tests/fixtures/official_ckpt_*).

    python tools/record_official_checkpoints.py --official PATH_TO_CHECKOUT [--commit SHA] [--out tests/fixtures]

PATH_TO_CHECKOUT is nicklashansen/tdmpc2 at 5f6fade (e.g. ``git clone
https://github.com/nicklashansen/tdmpc2 && git -C tdmpc2 checkout 5f6fade``, or a ``git
archive`` of that commit with ``--commit``). As ``tools/record_parity.py`` (whose helpers this
script imports: the CPU redirect, the seeded and recorded draws, the weight filling), the
official model files are imported from the checkout and run unmodified on the CPU; nothing
of them is copied here.

Written:

* ``official_ckpt_single.pt``: a single-task agent of tiny widths for dm_control's
  cartpole-balance (obs 5, action 1, 500 agent steps per episode), saved by the official
  ``TDMPC2.save`` (``torch.save({"model": state_dict})``);
* ``official_ckpt_multi.pt``: a multi-task agent of two tasks, cartpole-balance (obs 5,
  action 1) and reacher-easy (obs 6, action 2), padded to obs 6 / action 2, task_dim 4;
* ``official_ckpt_plans.npz``: for each checkpoint (and each task), two calls of the official
  ``act`` in eval mode from fixed observations (the first with ``t0``, the second
  warm-started from it): the observation, every random draw (policy-trajectory noise,
  each iteration's sample noise, value-estimate noise and Q pair, the elite choice), the
  planner's final mean (``_prev_mean``) and the action; plus ``meta`` (JSON): the official
  commit, the SHA-256 of every official file imported and of both ``.pt`` files, the PyTorch,
  NumPy and Python versions and the configurations.

The weights are random (``record_parity.fill_weights``: useful scales, not trained); the
tests evaluate them on dm_control and compare our planner's mean with the official one.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record_parity as rp  # noqa: E402 (the sibling tool's helpers)

FIXTURE_VERSION = 1
# tiny widths and planner, every other setting the paper's (config.yaml at 5f6fade)
SINGLE = dict(rp.BASE, multitask=False, task_dim=0, tasks=["cartpole-balance"], obs_shape={"state": (5,)},
              action_dim=1, episode_length=500)
MULTI = dict(rp.BASE, multitask=True, task_dim=4, tasks=["cartpole-balance", "reacher-easy"],
             obs_shape={"state": (6,)}, action_dim=2, obs_dims=[5, 6], action_dims=[1, 2],
             episode_lengths=[500, 500], episode_length=500)


def record_eval_plans(torch, agent, cfg, draws, out, prefix, task=None, obs_dim=None):
    """Two eval-mode ``act`` calls (t0, then warm-started): every draw, the final mean, the action."""
    g = np.random.default_rng(51 + (task or 0))
    O = cfg.obs_shape["state"][0]
    obs = g.standard_normal((2, O)).astype(np.float32)
    if obs_dim is not None:
        obs[:, obs_dim:] = 0.0  # the official multi-task wrapper pads with zeros
    out[f"{prefix}/obs"] = obs
    H, P, N = cfg.horizon, cfg.num_pi_trajs, cfg.num_samples
    for call, t0 in enumerate((True, False)):
        p = f"{prefix}/call{call}"
        draws.take()
        if call == 1:
            out[f"{p}/prev_mean"] = rp.to_np(agent._prev_mean)
        a = agent.act(torch.from_numpy(obs[call]), t0=t0, eval_mode=True, task=task)
        rec = draws.take()
        pi_eps = [r[2] for r in rec if r[0] == "randn_like"]
        noise = [r[2] for r in rec if r[0] == "randn" and r[1] == "plan"]
        choice = [r[2] for r in rec if r[0] == "choice"]
        I = cfg.iterations
        assert len(noise) == I, (len(noise), I)  # eval mode: no exploration draw
        assert len(pi_eps) == H + I and len(choice) == I + 1, (len(pi_eps), len(choice))
        out[f"{p}/pi_eps"] = np.stack(pi_eps[:H])  # [H, P, A]
        out[f"{p}/noise"] = np.stack(noise)  # [I, H, N - P, A]
        out[f"{p}/value_eps"] = np.stack(pi_eps[H:])  # [I, N, A]
        out[f"{p}/pairs"] = np.stack(choice[:-1]).astype(np.int32)  # [I, 2]
        out[f"{p}/elite"] = np.int64(choice[-1])
        out[f"{p}/mean"] = rp.to_np(agent._prev_mean)  # [H, A]: the MPPI mean after the iterations
        out[f"{p}/action"] = rp.to_np(a)
        assert out[f"{p}/noise"].shape[1:] == (H, N - P, cfg.action_dim)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--official", required=True, help="a checkout of nicklashansen/tdmpc2 at 5f6fade")
    ap.add_argument("--commit", help="the checkout's commit, if it is not a git work tree (e.g. a git archive)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))
    args = ap.parse_args(argv)

    root, src, commit = rp.official_checkout(args.official, args.commit)

    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    sys.path.insert(0, str(src))
    import common.scale as oscale  # noqa: E402 (the official modules, from the checkout)
    import tdmpc2 as oagent
    cpu_torch = rp.CpuTorch(torch)
    oagent.torch = cpu_torch
    oscale.torch = cpu_torch
    files = rp.imported_official_files(root, src)

    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    out, pts = {}, {}
    for name, base, seed in (("single", SINGLE, 7), ("multi", MULTI, 9)):
        cfg = rp.make_cfg(base)
        draws = rp.Draws(torch, seed=seed)
        with draws.active():
            agent = oagent.TDMPC2(cfg)
            rp.fill_weights(torch, agent.model, seed=seed + 1)
            path = outdir / f"official_ckpt_{name}.pt"
            agent.save(str(path))  # the official format: torch.save({"model": state_dict})
            pts[path.name] = rp.sha256(path)
            out[f"{name}/discount"] = np.asarray(rp.to_np(agent.discount) if cfg.multitask else agent.discount,
                                                 np.float64)
            if cfg.multitask:
                for t in range(len(cfg.tasks)):
                    # each task's calls start from the saved weights (look-ups renormalise the embedding)
                    agent.load(str(path))
                    record_eval_plans(torch, agent, cfg, draws, out, f"{name}/task{t}", task=t,
                                      obs_dim=cfg.obs_dims[t])
            else:
                record_eval_plans(torch, agent, cfg, draws, out, f"{name}/task0")
    meta = dict(fixture_version=FIXTURE_VERSION, official_repository="nicklashansen/tdmpc2", official_commit=commit,
                official_files_sha256=dict(sorted(files.items())), checkpoints_sha256=pts,
                torch_version=torch.__version__, numpy_version=np.__version__,
                python_version=platform.python_version(), recorded_on=platform.platform(), device="cpu",
                recorder="tools/record_official_checkpoints.py", configs=dict(single=SINGLE, multi=MULTI))
    path = outdir / "official_ckpt_plans.npz"
    np.savez_compressed(path, **out, meta=np.array(json.dumps(meta, sort_keys=True, default=list)))
    for p in [*(outdir / n for n in pts), path]:
        print(f"wrote {p} ({p.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
