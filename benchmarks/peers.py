"""Updates/s and planning latency against the peers, in one interleaved run.

    python benchmarks/peers.py --official PATH --tdmpc2-jax PATH [--tdmpc2-jax-python PY] \\
        [--sizes 1 5] [--rounds 5] [--json out.json]
    python benchmarks/peers.py --peers none --tiny --rounds 1      # ours alone (the test's form)

The peers (nothing of theirs is copied into this repository; each is imported at run time
from a checkout named on the command line):

- ``ours``: tdmpc2core, imported from whatever checkout is on PYTHONPATH / installed (the
  JSON names the file and its git commit).
- ``official``: nicklashansen/tdmpc2 at 5f6fade (the reference of docs/spec/tdmpc2.md),
  PyTorch eager on the CPU, imported as tools/record_parity.py does (its ``CpuTorch``
  redirect; no file of the checkout is edited). That commit has no torch.compile path. Its
  worker runs with OMP_WAIT_POLICY=PASSIVE (``--omp-wait-policy``): on a shared machine,
  torch's spinning OpenMP threads made it 5-10x slower.
- ``tdmpc2-jax``: ShaneFlandermeyer/tdmpc2-jax, its ``TDMPC2`` / ``WorldModel`` classes
  built from its own layers (``NormedLinear``, ``Ensemble``, ``mish``, ``simnorm``) at the
  official widths (its ``WorldModel.create`` ties the hidden width to ``latent_dim``;
  the official networks use ``mlp_dim``), run with ``--tdmpc2-jax-python`` (a Python that
  has jax, flax, optax, jaxtyping and einops; by default this one).

Every peer runs in a long-lived worker process of its own (this file, ``--worker PEER``),
which builds and compiles everything first (setup, in parallel), then answers "time one
block" requests over a pipe. The timing is round-robin: each round times, per model size,
one block of updates of every peer, then one block of planning calls of every peer (the
order of the peers rotating by round), then the f32 matmul peak; so load on the machine
hits all peers alike. Per peer and size the figures are the median and min/max over rounds.

What one timed block holds (all on a fixed random batch: obs [H+1, B, 3], action [H, B, 1],
reward [H, B], no terminations; the state carried on from block to block):

- ours: one call of a jitted ``lax.scan`` of n ``tdmpc2core.model.update.update`` calls
  (world model + policy + soft target update, spec §5.2), as benchmarks/speed.py times it.
- official: n calls of ``TDMPC2.update(buffer)`` whose ``buffer.sample()`` returns the same
  tensors each time (no replay sampling in the timing); the call includes its metrics'
  ``.item()`` reads and the model.train()/eval() switches, as in the official training loop.
- tdmpc2-jax: one call of a jitted ``lax.scan`` of n ``TDMPC2.update(...)`` calls (its world
  model, policy and target update); its metrics are dropped, as ours are.
- plan (each call waited for): ours ``jit(plan)`` from one observation (encode + MPPI);
  official ``TDMPC2.act(obs, t0=False, eval_mode=False)`` (encode + plan + the final
  sampling); tdmpc2-jax ``jit(encode + TDMPC2.plan(train=True))``.

GFLOP/s are the official algorithm's matmul FLOPs (tdmpc2core/model/flops.py
``update_flops``, the same count for every peer) over the measured time; the peak is the
best f32 matmul rate (a jitted ``jnp.dot`` at HIGHEST precision) measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEERS = ("ours", "official", "tdmpc2-jax")
OFFICIAL_COMMIT = "5f6fadec0fec78304b4b53e8171d348b58cac486"
OBS_DIM, ACTION_DIM, EPISODE_LENGTH = 3, 1, 200  # gymnax Pendulum-v1
ENV_ID = "Pendulum-v1"
# f32 matmul shapes (M, K, N): a square one and those of the update's hidden layers
# (H*B rows and (H+1)*B rows at batch 256, horizon 3, mlp_dim 384 / 512)
MATMUL_SHAPES = ((1024, 1024, 1024), (768, 384, 384), (768, 512, 512), (1024, 512, 512))
TINY = dict(enc_dim=16, mlp_dim=16, latent_dim=16, num_enc_layers=2, num_q=2, batch_size=8, num_samples=16,
            num_elites=4, num_pi_trajs=2, iterations=2)
# the config keys every peer must agree on (official name; ours differs only in lr)
SHARED_KEYS = ("enc_dim", "mlp_dim", "latent_dim", "num_enc_layers", "num_q", "simnorm_dim", "num_bins", "vmin",
               "vmax", "dropout", "horizon", "batch_size", "rho", "consistency_coef", "reward_coef", "value_coef",
               "enc_lr_scale", "grad_clip_norm", "tau", "entropy_coef", "log_std_min", "log_std_max", "mpc",
               "iterations", "num_samples", "num_elites", "num_pi_trajs", "min_std", "max_std", "temperature")


def git_commit(path, sub="."):
    """HEAD of the git work tree holding ``path``, "+dirty" if tracked files under ``sub`` differ."""
    try:
        top = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, check=True).stdout.strip()
        if Path(top).resolve() != Path(path).resolve() and sub == ".":
            return None  # a plain copy inside another repository (e.g. a `git archive` beside ours)
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True)
        dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no", "--", sub],
                               capture_output=True, text=True, check=True).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def uptime():
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


# =================================================================== the workers
class _JaxTimed:
    """The timed calls of a JAX peer: ``self.sizes[size]`` holds ``upd`` (a jitted block of
    updates, state -> state), ``plan`` (jitted, (plan input, key) -> action), ``n`` (updates
    per block), ``key`` and the carried state under ``STATE``; ``plan_input`` picks what the
    planning call takes from that state."""

    STATE = "state"

    def plan_input(self, state):
        return state

    def update(self, size):
        jax, s = self.jax, self.sizes[size]
        s["key"], k = jax.random.split(s["key"])
        t = time.perf_counter()
        s[self.STATE] = jax.block_until_ready(s["upd"](s[self.STATE], k))
        return time.perf_counter() - t, s["n"]

    def plan(self, size, n):
        jax, s = self.jax, self.sizes[size]
        keys = jax.random.split(jax.random.fold_in(s["key"], 7), n)
        s["key"] = jax.random.split(s["key"])[0]
        t = time.perf_counter()
        for k in keys:
            jax.block_until_ready(s["plan"](self.plan_input(s[self.STATE]), k))
        return time.perf_counter() - t, n


class Ours(_JaxTimed):
    """tdmpc2core, from whatever checkout Python imports."""

    def __init__(self, opts):
        import jax
        import jax.numpy as jnp
        import tdmpc2core
        jax.config.update("jax_default_matmul_precision", opts.get("precision", "highest"))
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import speed  # noqa: F401 (its fixed batch)
        self.jax, self.jnp, self.speed = jax, jnp, speed
        self.sizes = {}
        self.matmuls = {}
        src = Path(tdmpc2core.__file__).resolve().parents[1]
        self.info = {"tdmpc2core_file": tdmpc2core.__file__, "tdmpc2core_commit": git_commit(src, "tdmpc2core"),
                     "jax": jax.__version__, "backend": jax.default_backend(),
                     "device": jax.devices()[0].device_kind,
                     "jax_default_matmul_precision": jax.config.jax_default_matmul_precision}

    def setup(self, size, spec, overrides, n_updates):
        jax, jnp = self.jax, self.jnp
        from tdmpc2core.agents.single_task import TDMPC2
        from tdmpc2core.model.planner import plan
        from tdmpc2core.model.update import init_agent_state, update
        import dataclasses
        from tdmpc2core.model.config import kernels_for_backend
        agent = TDMPC2(ENV_ID, model_size=size, **overrides)
        got = dataclasses.asdict(agent.cfg)
        # the agent resolves kernels="auto" for this process's backend (model/kernels.py)
        want = {**spec, "kernels": kernels_for_backend(spec["kernels"], jax.default_backend())}
        bad = {k: (got[k], v) for k, v in want.items() if got.get(k) != v}
        if bad:
            raise ValueError(f"ours: the agent's resolved config differs from the benchmark's: {bad}")
        if agent.spec.obs_dim != OBS_DIM or agent.spec.action_dim != ACTION_DIM:
            raise ValueError(f"ours: {ENV_ID} has obs {agent.spec.obs_dim}, action {agent.spec.action_dim}")
        wm, batch = agent.wm, self.speed.fixed_batch(agent)
        st = init_agent_state(wm, jax.random.PRNGKey(0))

        def many_updates(s, k):
            return jax.lax.scan(lambda s, k: (update(wm, s, batch, agent.gamma, k)[0], None), s,
                                jax.random.split(k, n_updates))[0]

        upd = jax.jit(many_updates)
        t = time.perf_counter(); st = jax.block_until_ready(upd(st, jax.random.PRNGKey(1)))
        compile_upd = time.perf_counter() - t
        st = jax.block_until_ready(upd(st, jax.random.PRNGKey(2)))  # warm-up
        H, A = agent.cfg.horizon, ACTION_DIM
        p = jax.jit(lambda params, k: plan(wm, params, jnp.zeros(OBS_DIM, jnp.float32), jnp.zeros((H, A), jnp.float32),
                                           jnp.asarray(False), False, agent.gamma, k))
        t = time.perf_counter(); jax.block_until_ready(p(st.params, jax.random.PRNGKey(0)))
        compile_plan = time.perf_counter() - t
        jax.block_until_ready(p(st.params, jax.random.PRNGKey(1)))
        self.sizes[size] = dict(upd=upd, plan=p, state=st, key=jax.random.PRNGKey(3), n=n_updates)
        n_params = sum(int(x.size) for x in jax.tree.leaves(st.params))
        return {"params": n_params, "compile_s": {"update_block": compile_upd, "plan": compile_plan}}

    def plan_input(self, state):
        return state.params

    def matmul(self, shapes, min_s):
        """{"MxKxN": GFLOP/s} of a jitted f32 matmul (HIGHEST precision), calls repeated for
        at least ``min_s`` seconds per shape."""
        jax, jnp = self.jax, self.jnp
        out = {}
        for m, k, n in shapes:
            name = f"{m}x{k}x{n}"
            if name not in self.matmuls:
                ka, kb = jax.random.split(jax.random.PRNGKey(m + k + n))
                a, b = jax.random.normal(ka, (m, k), jnp.float32), jax.random.normal(kb, (k, n), jnp.float32)
                f = jax.jit(lambda a, b: jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST))
                jax.block_until_ready(f(a, b)); jax.block_until_ready(f(a, b))
                self.matmuls[name] = (f, a, b)
            f, a, b = self.matmuls[name]
            calls, t = 0, time.perf_counter()
            while True:
                jax.block_until_ready(f(a, b)); calls += 1
                dt = time.perf_counter() - t
                if dt >= min_s:
                    break
            out[name] = 2.0 * m * k * n * calls / dt / 1e9
        return out


class FixedBuffer:
    """``buffer.sample()`` of the official update: the same fixed batch every time."""

    def __init__(self, batch):
        self.batch = batch

    def sample(self):
        return self.batch


def official_defaults(src: Path) -> dict:
    """The official config.yaml's values (numbers that PyYAML leaves as strings, e.g. 3e-4, parsed)."""
    import yaml
    raw = yaml.safe_load((src / "config.yaml").read_text())
    out = {}
    for k, v in raw.items():
        if isinstance(v, str):
            try:
                v = float(v) if any(c in v for c in ".eE") else int(v)
            except ValueError:
                pass
        out[k] = v
    return out


class Official:
    """nicklashansen/tdmpc2 at 5f6fade, PyTorch eager on the CPU."""

    def __init__(self, opts):
        sys.path.insert(0, str(ROOT / "tools"))
        import record_parity as rp  # the official-code import of the recording tools
        root, src, commit = rp.official_checkout(opts["official"])
        import numpy as np
        import torch
        torch.manual_seed(0)
        if opts.get("torch_threads"):
            torch.set_num_threads(int(opts["torch_threads"]))
        rp.purge_official_modules()
        sys.path.insert(0, str(src))
        import common
        import common.scale as oscale
        import tdmpc2 as oagent
        cpu_torch = rp.CpuTorch(torch)
        oagent.torch = cpu_torch
        oscale.torch = cpu_torch
        self.rp, self.np, self.torch, self.oagent, self.common = rp, np, torch, oagent, common
        self.src = src
        self.sizes = {}
        self.info = {"checkout": str(root), "commit": git_commit(root) or commit, "torch": torch.__version__,
                     "torch_threads": torch.get_num_threads(), "mode": "eager (5f6fade has no torch.compile path)",
                     "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
                     "official_files_sha256": rp.imported_official_files(root, src)}

    def setup(self, size, spec, overrides, n_updates):
        rp, np, torch = self.rp, self.np, self.torch
        d = official_defaults(self.src)
        d.update(self.common.MODEL_SIZE[size])
        d.update(overrides)
        d.update(obs="state", multitask=False, task_dim=0, tasks=["pendulum"], obs_shape={"state": (OBS_DIM,)},
                 action_dim=ACTION_DIM, episode_length=EPISODE_LENGTH, model_size=size)
        cfg = rp.make_cfg(d)
        bad = {k: (cfg[k], spec[k]) for k in SHARED_KEYS if cfg[k] != spec[k]}
        if cfg.lr != spec["learning_rate"]:
            bad["lr"] = (cfg.lr, spec["learning_rate"])
        agent = self.oagent.TDMPC2(cfg)
        if abs(agent.discount - spec["gamma"]) > 1e-12:
            bad["discount"] = (agent.discount, spec["gamma"])
        if bad:
            raise ValueError(f"official: its config differs from the benchmark's: {bad}")
        g = np.random.default_rng(0)
        H, B = cfg.horizon, cfg.batch_size
        batch = (torch.from_numpy(g.normal(size=(H + 1, B, OBS_DIM)).astype(np.float32)),
                 torch.from_numpy(g.uniform(-1, 1, size=(H, B, ACTION_DIM)).astype(np.float32)),
                 torch.from_numpy(g.normal(size=(H, B, 1)).astype(np.float32)), None)
        buf = FixedBuffer(batch)
        t = time.perf_counter()
        agent.update(buf); agent.update(buf)  # warm-up (eager: no compilation)
        warm = time.perf_counter() - t
        obs = torch.zeros(OBS_DIM)
        agent.act(obs, t0=True, eval_mode=False); agent.act(obs, t0=False, eval_mode=False)
        self.sizes[size] = dict(agent=agent, buf=buf, obs=obs, n=n_updates)
        return {"params": int(agent.model.total_params), "compile_s": {"warm_up_2_updates": warm}}

    def update(self, size):
        s = self.sizes[size]
        t = time.perf_counter()
        for _ in range(s["n"]):
            s["agent"].update(s["buf"])
        return time.perf_counter() - t, s["n"]

    def plan(self, size, n):
        s = self.sizes[size]
        t = time.perf_counter()
        for _ in range(n):
            s["agent"].act(s["obs"], t0=False, eval_mode=False)
        return time.perf_counter() - t, n


class TdmpcJax(_JaxTimed):
    """ShaneFlandermeyer/tdmpc2-jax, given the official widths."""

    STATE = "agent"

    def __init__(self, opts):
        root = Path(opts["tdmpc2_jax"]).resolve()
        if not (root / "tdmpc2_jax" / "tdmpc2.py").is_file():
            raise FileNotFoundError(f"--tdmpc2-jax {root}: not a checkout of ShaneFlandermeyer/tdmpc2-jax "
                                    "(no tdmpc2_jax/tdmpc2.py)")
        sys.path.insert(0, str(root))
        import flax
        import jax
        import optax
        import tdmpc2_jax
        # their Dense layers take JAX's default precision: the same products as ours
        jax.config.update("jax_default_matmul_precision", opts.get("precision", "highest"))
        self.jax, self.tj = jax, tdmpc2_jax
        self.sizes = {}
        self.info = {"checkout": str(root), "commit": git_commit(root), "jax": jax.__version__,
                     "flax": flax.__version__, "optax": optax.__version__, "python": sys.executable,
                     "tdmpc2_jax_file": tdmpc2_jax.__file__,
                     "jax_default_matmul_precision": jax.config.jax_default_matmul_precision}

    def build(self, cfg, gamma, key):
        """Their TDMPC2 at the official architecture (spec §3: hidden width mlp_dim, SimNorm
        latents, zero-initialised reward and Q heads, dropout on the Qs' first layer)."""
        import flax.linen as nn
        import optax
        from functools import partial
        from flax.training.train_state import TrainState
        from tdmpc2_jax.common.activations import mish, simnorm
        from tdmpc2_jax.networks import Ensemble, NormedLinear
        jnp = self.jax.numpy
        L, M, A = cfg["latent_dim"], cfg["mlp_dim"], ACTION_DIM
        sn = partial(simnorm, simplex_dim=cfg["simnorm_dim"])

        def opt(lr):
            return optax.chain(optax.zero_nans(), optax.clip_by_global_norm(cfg["grad_clip_norm"]), optax.adam(lr))

        def state(module, k, x, lr, rngs=None):
            params = module.init({"params": k, **(rngs or {})}, x)["params"]
            return TrainState.create(apply_fn=module.apply, params=params, tx=opt(lr))

        def hidden(first_dropout=None):
            return [NormedLinear(M, activation=mish, dropout_rate=first_dropout), NormedLinear(M, activation=mish)]

        k = self.jax.random.split(key, 6)
        lr = cfg["learning_rate"]
        za = jnp.zeros(L + A)
        n_enc = max(cfg["num_enc_layers"] - 1, 1)
        encoder = nn.Sequential([NormedLinear(cfg["enc_dim"], activation=mish) for _ in range(n_enc)]
                                + [NormedLinear(L, activation=sn)])
        dynamics = nn.Sequential(hidden() + [NormedLinear(L, activation=sn)])
        reward = nn.Sequential(hidden() + [nn.Dense(cfg["num_bins"], kernel_init=nn.initializers.zeros)])
        policy = nn.Sequential(hidden() + [nn.Dense(2 * A, kernel_init=nn.initializers.truncated_normal(0.02))])
        value = Ensemble(partial(nn.Sequential, hidden(cfg["dropout"])
                                 + [nn.Dense(cfg["num_bins"], kernel_init=nn.initializers.zeros)]),
                         num=cfg["num_q"])
        values = state(value, k[4], za, lr, rngs={"dropout": k[5]})
        wm = self.tj.WorldModel(
            encoder=state(encoder, k[0], jnp.zeros(OBS_DIM), lr * cfg["enc_lr_scale"]),
            dynamics_model=state(dynamics, k[1], za, lr), reward_model=state(reward, k[2], za, lr),
            policy_model=state(policy, k[3], jnp.zeros(L), lr), value_model=values,
            target_value_model=TrainState.create(apply_fn=value.apply, params=values.params,
                                                 tx=optax.GradientTransformation(lambda _: None, lambda _: None)),
            continue_model=None, action_dim=A, latent_dim=L, num_value_nets=cfg["num_q"], num_bins=cfg["num_bins"],
            symlog_min=float(cfg["vmin"]), symlog_max=float(cfg["vmax"]), predict_continues=False, symlog_obs=False)
        agent = self.tj.TDMPC2.create(
            world_model=wm, mpc=True, horizon=cfg["horizon"], mppi_iterations=cfg["iterations"],
            population_size=cfg["num_samples"], policy_prior_samples=cfg["num_pi_trajs"],
            num_elites=cfg["num_elites"], min_plan_std=cfg["min_std"], max_plan_std=cfg["max_std"],
            temperature=cfg["temperature"], discount=gamma, batch_size=cfg["batch_size"], rho=cfg["rho"],
            consistency_coef=cfg["consistency_coef"], reward_coef=cfg["reward_coef"],
            value_coef=cfg["value_coef"], continue_coef=1.0, entropy_coef=cfg["entropy_coef"], tau=cfg["tau"])
        n_params = sum(int(x.size) for m in (wm.encoder, wm.dynamics_model, wm.reward_model, wm.policy_model,
                                             wm.value_model) for x in self.jax.tree.leaves(m.params))
        return agent, n_params

    def setup(self, size, spec, overrides, n_updates):
        import numpy as np
        jax, jnp = self.jax, self.jax.numpy
        agent, n_params = self.build(spec, spec["gamma"], jax.random.PRNGKey(0))
        H, B = spec["horizon"], spec["batch_size"]
        g = np.random.default_rng(0)
        obs = jnp.asarray(g.normal(size=(H + 1, B, OBS_DIM)), jnp.float32)
        action = jnp.asarray(g.uniform(-1, 1, size=(H, B, ACTION_DIM)), jnp.float32)
        reward = jnp.asarray(g.normal(size=(H, B)), jnp.float32)
        zeros = jnp.zeros((H, B), jnp.float32)

        def many_updates(ag, k):
            def one(ag, k):
                return ag.update(observations=obs[:-1], actions=action, rewards=reward, next_observations=obs[1:],
                                 terminated=zeros, truncated=zeros, key=k)[0], None
            return jax.lax.scan(one, ag, jax.random.split(k, n_updates))[0]

        upd = jax.jit(many_updates)
        t = time.perf_counter(); agent = jax.block_until_ready(upd(agent, jax.random.PRNGKey(1)))
        compile_upd = time.perf_counter() - t
        agent = jax.block_until_ready(upd(agent, jax.random.PRNGKey(2)))
        prev = (jnp.zeros((H, ACTION_DIM)), jnp.full((H, ACTION_DIM), spec["max_std"]))

        def act(ag, k):
            k1, k2 = jax.random.split(k)
            z = ag.model.encode(jnp.zeros(OBS_DIM), ag.model.encoder.params, key=k1)
            return ag.plan(z=z, prev_plan=prev, train=True, key=k2)

        p = jax.jit(act)
        t = time.perf_counter(); jax.block_until_ready(p(agent, jax.random.PRNGKey(0)))
        compile_plan = time.perf_counter() - t
        jax.block_until_ready(p(agent, jax.random.PRNGKey(1)))
        self.sizes[size] = dict(upd=upd, plan=p, agent=agent, key=jax.random.PRNGKey(3), n=n_updates)
        return {"params": n_params, "compile_s": {"update_block": compile_upd, "plan": compile_plan}}


WORKERS = {"ours": Ours, "official": Official, "tdmpc2-jax": TdmpcJax}
#: what one timed block of each peer holds (also in the JSON)
TIMED = {
    "ours": {"update": "one call of jit(lax.scan of n tdmpc2core.model.update.update) on a fixed batch: world "
                       "model + policy + soft target update; metrics dropped",
             "plan": "jit(tdmpc2core.model.planner.plan) from one observation (encode + MPPI + final noise)"},
    "official": {"update": "n calls of TDMPC2.update(buffer), buffer.sample() returning the same fixed tensors "
                           "(no replay sampling); includes its metrics' .item() reads; torch eager, CPU",
                 "plan": "TDMPC2.act(obs, t0=False, eval_mode=False): encode + plan + final noise; torch eager"},
    "tdmpc2-jax": {"update": "one call of jit(lax.scan of n TDMPC2.update) on a fixed batch: world model + policy + "
                             "soft target update; metrics dropped",
                   "plan": "jit(WorldModel.encode + TDMPC2.plan(train=True)) from one observation"},
}


def worker_main(peer: str, opts: dict) -> int:
    """Answer one JSON request per line on stdin with one JSON line on the saved stdout
    (the peer's own prints go to stderr)."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        impl = WORKERS[peer](opts)
        proto.write(json.dumps({"ok": True, "info": impl.info}) + "\n")
    except BaseException as e:  # noqa: BLE001 (reported to the harness, which stops)
        proto.write(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}",
                                "traceback": traceback.format_exc()}) + "\n")
        return 1
    for line in sys.stdin:
        req = json.loads(line)
        op = req.pop("op")
        if op == "quit":
            break
        try:
            res = getattr(impl, op)(**req)
            proto.write(json.dumps({"ok": True, "result": res}) + "\n")
        except Exception as e:  # noqa: BLE001
            proto.write(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}",
                                    "traceback": traceback.format_exc()}) + "\n")
    return 0


class Worker:
    """The harness side of one peer's worker process."""

    def __init__(self, peer, python, opts, extra_env=None):
        self.peer = peer
        env = dict(os.environ, **(extra_env or {}))
        self.proc = subprocess.Popen([python, str(Path(__file__).resolve()), "--worker", peer,
                                      "--worker-opts", json.dumps(opts)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self.info = None

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"peer {self.peer}: its worker exited (rc {self.proc.wait()}); see its stderr above")
        res = json.loads(line)
        if not res["ok"]:
            raise RuntimeError(f"peer {self.peer}: {res['error']}\n{res.get('traceback', '')}")
        return res

    def started(self):
        self.info = self._read()["info"]
        return self.info

    def send(self, op, **kw):
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()

    def call(self, op, **kw):
        self.send(op, **kw)
        return self._read()["result"]

    def close(self):
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


class InProcess:
    """A peer run in the harness's own process, with :class:`Worker`'s interface
    (``--in-process``): on an accelerator that one process at a time may hold (a TPU chip),
    the JAX peers cannot each have a worker, so they share this process and its device. Their
    programs and the matmul peak are then timed one after another on the same device, as the
    workers' are."""

    def __init__(self, peer, opts):
        self.peer, self.opts, self.impl, self._pending, self.info = peer, opts, None, None, None

    def started(self):
        self.impl = WORKERS[self.peer](self.opts)
        self.info = self.impl.info
        return self.info

    def send(self, op, **kw):
        self._pending = (op, kw)

    def _read(self):
        op, kw = self._pending
        self._pending = None
        return {"ok": True, "result": getattr(self.impl, op)(**kw)}

    def call(self, op, **kw):
        self.send(op, **kw)
        return self._read()["result"]

    def close(self):
        self.impl = None


# =================================================================== the harness
def size_spec(size, batch, horizon, tiny, precision="highest"):
    """The resolved config (dict of tdmpc2core.model.config.TDMPC2Config) every peer gets."""
    import dataclasses
    from tdmpc2core.model.config import TDMPC2Config, resolve_config
    overrides = dict(batch_size=batch, horizon=horizon, matmul_precision=precision)
    overrides.update(TINY if tiny else {})
    cfg = resolve_config(TDMPC2Config(model_size=size, **overrides), episode_length=EPISODE_LENGTH,
                         action_dim=ACTION_DIM)
    return cfg, dataclasses.asdict(cfg), overrides


def spread(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "rounds": xs}


def run(args) -> dict:
    from tdmpc2core.model import flops
    peers = ["ours"] + [p for p in args.peers if p != "none"]
    if args.in_process and "official" in peers:
        raise SystemExit("error: --in-process runs the JAX peers (ours, tdmpc2-jax) in one process; leave official "
                         "out of --peers")
    if "official" in peers and args.precision != "highest":
        raise SystemExit(f"error: --precision {args.precision} with the official peer: its fp32 PyTorch on the CPU "
                         "has no such setting; time it at highest, or leave official out of --peers")
    for p in peers[1:]:
        path = getattr(args, p.replace("-", "_"))
        if not path:
            raise SystemExit(f"error: peer {p} needs --{p} PATH (a checkout), or leave it out of --peers")
        if not Path(path).is_dir():
            raise SystemExit(f"error: --{p} {path}: no such folder")
    # the checks each worker makes, made here first, so a wrong folder is one line, not a
    # worker's traceback
    if "official" in peers:
        sys.path.insert(0, str(ROOT / "tools"))
        import record_parity as rp
        rp.official_checkout(args.official)  # exits with one line for a wrong checkout
    if "tdmpc2-jax" in peers:
        if not (Path(args.tdmpc2_jax) / "tdmpc2_jax" / "tdmpc2.py").is_file():
            raise SystemExit(f"error: --tdmpc2-jax {args.tdmpc2_jax}: not a checkout of ShaneFlandermeyer/tdmpc2-jax "
                             "(no tdmpc2_jax/tdmpc2.py)")
        py = Path(args.tdmpc2_jax_python)
        if not (py.is_file() and os.access(py, os.X_OK)):
            raise SystemExit(f"error: --tdmpc2-jax-python {py}: not an executable file")
    bad = [s for s in args.sizes if s not in (1, 5, 19, 48, 317)]
    if bad:
        raise SystemExit(f"error: --sizes {bad[0]}: not a model-size preset; accepted: 1 5 19 48 317")
    opts = {"official": args.official, "tdmpc2_jax": args.tdmpc2_jax, "torch_threads": args.torch_threads,
            "precision": args.precision}
    pythons = {"ours": sys.executable, "official": sys.executable, "tdmpc2-jax": args.tdmpc2_jax_python}
    specs = {s: size_spec(s, args.batch, args.horizon, args.tiny, args.precision) for s in args.sizes}
    n_updates = {s: args.n_updates or (2 if args.tiny else 10 if s == 1 else 4) for s in args.sizes}
    load_start, t_start = uptime(), time.time()
    print(f"start: {load_start}", flush=True)
    # torch's OpenMP threads spin while they wait: on a shared machine (other processes, or
    # the other peers' idle workers) that made the official update 5-10x slower than with
    # passive waiting, measured here (load 6-9: 0.3-0.6 against 2.6-3.4 updates/s at size 1)
    env = {"official": {} if args.omp_wait_policy == "default" else {"OMP_WAIT_POLICY": args.omp_wait_policy}}
    if args.in_process:
        import jax
        # the peers set JAX's default precision in this process: put the caller's back after
        precision_before = jax.config.jax_default_matmul_precision
        workers = {p: InProcess(p, opts) for p in peers}
    else:
        workers = {p: Worker(p, pythons[p], opts, env.get(p)) for p in peers}
    try:
        info = {p: w.started() for p, w in workers.items()}
        setup = {p: {} for p in peers}
        for s in args.sizes:  # setup and compilation, all peers at once
            for p, w in workers.items():
                w.send("setup", size=s, spec=specs[s][1], overrides=specs[s][2], n_updates=n_updates[s])
            for p, w in workers.items():
                setup[p][s] = w._read()["result"]
                print(f"set up {p} size {s}: {setup[p][s]}", flush=True)
            counts = {p: setup[p][s]["params"] for p in peers}
            if len(set(counts.values())) > 1:  # the same architecture has the same parameters
                raise RuntimeError(f"size {s}: the peers' parameter counts differ (not the same networks): {counts}")
        upd = {p: {s: [] for s in args.sizes} for p in peers}
        plan = {p: {s: [] for s in args.sizes} for p in peers}
        mm = []
        for r in range(args.rounds):
            order = peers[r % len(peers):] + peers[:r % len(peers)]
            for s in args.sizes:
                for p in order:
                    dt, n = workers[p].call("update", size=s)
                    upd[p][s].append(n / dt)
                if args.plan_calls:
                    for p in order:
                        dt, n = workers[p].call("plan", size=s, n=args.plan_calls)
                        plan[p][s].append(1e3 * dt / n)
            mm.append(workers["ours"].call("matmul", shapes=[list(x) for x in args.matmul_shapes],
                                           min_s=args.matmul_seconds))
            print(f"round {r + 1}/{args.rounds}: " + "; ".join(
                f"{p} size {s} {upd[p][s][-1]:.2f} upd/s" + (f" {plan[p][s][-1]:.0f} ms/plan" if plan[p][s] else "")
                for s in args.sizes for p in peers) + "; matmul " + ", ".join(f"{k} {v:.0f}" for k, v in mm[-1].items())
                + " GFLOP/s", flush=True)
    finally:
        for w in workers.values():
            w.close()
        if args.in_process:
            jax.config.update("jax_default_matmul_precision", precision_before)
    load_end = uptime()
    print(f"end: {load_end}", flush=True)

    shapes = list(mm[0])
    matmul = {k: spread([m[k] for m in mm]) for k in shapes}
    peak = max(max(m.values()) for m in mm)
    results = {}
    for p in peers:
        results[p] = {}
        for s in args.sizes:
            cfg = specs[s][0]
            f_upd = flops.update_flops(cfg, OBS_DIM, ACTION_DIM)
            u = spread(upd[p][s])
            row = {"params": setup[p][s]["params"], "compile_s": setup[p][s]["compile_s"],
                   "updates_per_s": u, "updates_per_block": n_updates[s],
                   "update_gflop_counted": f_upd / 1e9, "update_gflop_per_s": f_upd * u["median"] / 1e9,
                   "update_share_of_peak": f_upd * u["median"] / 1e9 / peak}
            if plan[p][s]:
                row["plan_ms"] = spread(plan[p][s])
                row["plan_gflop_counted"] = flops.plan_flops(cfg, OBS_DIM, ACTION_DIM) / 1e9
            results[p][s] = row
    ratios = {}
    for s in args.sizes:
        others = [p for p in peers if p != "ours"]
        if not others:
            continue
        best = max(others, key=lambda p: results[p][s]["updates_per_s"]["median"])
        ratios[s] = {"faster_peer_updates": best,
                     "updates_ours_over_faster_peer": results["ours"][s]["updates_per_s"]["median"]
                     / results[best][s]["updates_per_s"]["median"],
                     # paired by round (the blocks timed side by side): less exposed to load drifting
                     "updates_ours_over_faster_peer_by_round": spread(
                         [a / b for a, b in zip(upd["ours"][s], upd[best][s])])}
        if args.plan_calls:
            bestp = min(others, key=lambda p: results[p][s]["plan_ms"]["median"])
            ratios[s].update(faster_peer_plan=bestp, plan_speed_ours_over_faster_peer=(
                results[bestp][s]["plan_ms"]["median"] / results["ours"][s]["plan_ms"]["median"]))
    return {
        "meta": {"date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime(t_start)), "wall_s": time.time() - t_start,
                 "uptime_start": load_start, "uptime_end": load_end, "cpu_count": os.cpu_count(),
                 "rounds": args.rounds, "sizes": args.sizes, "tiny": args.tiny, "env": ENV_ID,
                 "in_process": bool(args.in_process), "device": _device_kind(),
                 "matmul_precision": args.precision,
                 "obs_dim": OBS_DIM, "action_dim": ACTION_DIM, "plan_calls_per_block": args.plan_calls,
                 "configs": {s: specs[s][1] for s in args.sizes}, "peers": info,
                 "timed_call": {p: TIMED[p] for p in peers}},
        "results": results, "ratios": ratios,
        "matmul_gflop_per_s": matmul, "matmul_peak_gflop_per_s": peak,
    }


def _device_kind() -> str:
    import jax
    return f"{jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}"


def markdown(out) -> str:
    m = out["meta"]
    peak = out["matmul_peak_gflop_per_s"]
    lines = [f"Interleaved, {m['rounds']} rounds, {m['date_utc']} UTC, {m['cpu_count']} CPUs, "
             f"{m.get('device', '')}, matmul precision {m.get('matmul_precision', 'highest')}; "
             f"start `{m['uptime_start']}`, end `{m['uptime_end']}`", "",
             "| peer | size | params | updates/s median (min-max) | GFLOP/s (share of peak) | plan ms median (min-max) |",
             "|---|---|---|---|---|---|"]
    for p, rows in out["results"].items():
        for s, r in rows.items():
            u = r["updates_per_s"]
            pl = r.get("plan_ms")
            lines.append(f"| {p} | {s} | {r['params']:,} | {u['median']:.2f} ({u['min']:.2f}-{u['max']:.2f}) | "
                         f"{r['update_gflop_per_s']:.1f} ({100 * r['update_share_of_peak']:.0f}%) | "
                         + (f"{pl['median']:.1f} ({pl['min']:.1f}-{pl['max']:.1f})" if pl else "-") + " |")
    for s, q in out["ratios"].items():
        pr = q["updates_ours_over_faster_peer_by_round"]
        line = (f"- size {s}: updates/s ours / {q['faster_peer_updates']} (the faster peer) = "
                f"{q['updates_ours_over_faster_peer']:.2f} (ratio of medians; by round: median "
                f"{pr['median']:.2f}, {pr['min']:.2f}-{pr['max']:.2f})")
        if "faster_peer_plan" in q:
            line += (f"; planning speed ours / {q['faster_peer_plan']} = "
                     f"{q['plan_speed_ours_over_faster_peer']:.2f}")
        lines.append(line)
    pi = m["peers"]
    if "ours" in pi:
        lines.append(f"- ours: tdmpc2core {pi['ours']['tdmpc2core_commit']} ({pi['ours']['tdmpc2core_file']}), "
                     f"jax {pi['ours']['jax']} on {pi['ours']['backend']}")
    if "official" in pi:
        lines.append(f"- official: {pi['official']['commit']}, torch {pi['official']['torch']} "
                     f"({pi['official']['torch_threads']} threads, OMP_WAIT_POLICY "
                     f"{pi['official']['OMP_WAIT_POLICY']}), {pi['official']['mode']}")
    if "tdmpc2-jax" in pi:
        q = pi["tdmpc2-jax"]
        lines.append(f"- tdmpc2-jax: {q['commit']}, jax {q['jax']}, flax {q['flax']}, optax {q['optax']}")
    lines.append(f"- f32 matmul (jitted, HIGHEST), GFLOP/s median (min-max) over rounds: " + ", ".join(
        f"{k} {v['median']:.0f} ({v['min']:.0f}-{v['max']:.0f})" for k, v in out["matmul_gflop_per_s"].items())
                 + f"; peak {peak:.0f}")
    return "\n".join(lines) + "\n"


def check(out):
    """Refuse to report non-positive or non-finite figures."""
    import math
    bad = []
    for p, rows in out["results"].items():
        for s, r in rows.items():
            vals = list(r["updates_per_s"]["rounds"]) + list(r.get("plan_ms", {}).get("rounds", []))
            if not vals or not all(math.isfinite(v) and v > 0 for v in vals):
                bad.append(f"{p} size {s}")
    if bad or not (math.isfinite(out["matmul_peak_gflop_per_s"]) and out["matmul_peak_gflop_per_s"] > 0):
        raise ValueError(f"non-positive or non-finite figures: {bad or 'matmul peak'}")


def parse_shape(s):
    try:
        m, k, n = (int(x) for x in s.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"matmul shape {s!r}: expected MxKxN, e.g. 1024x1024x1024") from None
    return (m, k, n)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", choices=PEERS, help=argparse.SUPPRESS)
    ap.add_argument("--worker-opts", help=argparse.SUPPRESS)
    ap.add_argument("--peers", nargs="+", choices=["official", "tdmpc2-jax", "none"],
                    default=["official", "tdmpc2-jax"], help="peers beside ours (none: ours alone)")
    ap.add_argument("--official", help="a checkout of nicklashansen/tdmpc2 at 5f6fade")
    ap.add_argument("--tdmpc2-jax", help="a checkout of ShaneFlandermeyer/tdmpc2-jax")
    ap.add_argument("--tdmpc2-jax-python", default=sys.executable,
                    help="the Python that runs tdmpc2-jax (jax, flax, optax, jaxtyping, einops); default: this one")
    ap.add_argument("--torch-threads", type=int,
                    help="torch.set_num_threads for the official code (default: torch's own, one per core)")
    ap.add_argument("--omp-wait-policy", choices=["PASSIVE", "ACTIVE", "default"], default="PASSIVE",
                    help="OMP_WAIT_POLICY of the official code's worker (default PASSIVE: see run(); "
                         "default: leave the environment's)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 5], help="model sizes (presets)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--batch", type=int, default=256, help="batch size of the updates (default 256)")
    ap.add_argument("--horizon", type=int, default=3, help="horizon of updates and planning (default 3)")
    ap.add_argument("--n-updates", type=int, help="updates per timed block (default: 10 at size 1, 4 at size 5)")
    ap.add_argument("--plan-calls", type=int, default=3, help="planning calls per timed block (0: no planning)")
    ap.add_argument("--matmul-shapes", type=parse_shape, nargs="+", default=list(MATMUL_SHAPES))
    ap.add_argument("--matmul-seconds", type=float, default=0.5, help="seconds of matmuls per shape per round")
    ap.add_argument("--in-process", action="store_true",
                    help="run the JAX peers (ours, tdmpc2-jax) in this one process, on its device, instead of a "
                         "worker each (an accelerator one process at a time may hold, e.g. a TPU chip)")
    ap.add_argument("--precision", choices=["highest", "high", "default"], default="highest",
                    help="matmul precision of the JAX peers' products (ours: the matmul_precision field; both: "
                         "jax_default_matmul_precision); highest is full float32, the paper-era code's "
                         "(default); on a TPU high is three bf16 passes, default one")
    ap.add_argument("--tiny", action="store_true", help="tiny widths, batch 8, small planner (a test of the harness)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main(args.worker, json.loads(args.worker_opts))
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    if args.tiny:
        args.batch = TINY["batch_size"]
    out = run(args)
    check(out)
    md = markdown(out)
    print(md)
    if args.json:
        from tdmpc2core.io.atomic import write_json, write_text
        write_json(args.json, out)
        write_text(Path(args.json).with_suffix(".md"), md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
