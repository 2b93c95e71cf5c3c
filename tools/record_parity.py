"""Record the official TD-MPC2 code's numbers as test fixtures (tests/fixtures/parity_*.npz).

    python tools/record_parity.py --official PATH_TO_CHECKOUT [--commit SHA] [--out tests/fixtures]

PATH_TO_CHECKOUT is a checkout of nicklashansen/tdmpc2 at 5f6fade (the reference of
docs/spec/tdmpc2.md), e.g. ``git clone https://github.com/nicklashansen/tdmpc2 && git -C tdmpc2
checkout 5f6fade``. Nothing of it is copied into this repository: this script imports its
model files (``tdmpc2/tdmpc2.py`` and ``tdmpc2/common/{math,layers,init,scale,world_model}.py``,
which need only PyTorch) from the checkout and runs them unmodified on the CPU. The official
code asks for a CUDA device in a few places; the script hands those modules a view of
``torch`` whose ``device(...)`` is the CPU and whose factory functions map ``device="cuda"``
to the CPU (a run-time redirect; no file of the checkout is edited).

Fixed weights (random, of tiny widths) and fixed inputs go in; random draws of the official
code (``torch.randn_like`` / ``torch.randn`` noise, NumPy's Q-pair and elite choices) are
made from a seeded generator and recorded, so the tests inject the same draws into
tdmpc2core. Every number is float32 as the official code computes it.

The fixtures hold numbers only, plus a ``meta`` JSON entry: the official commit, the
SHA-256 of every official file imported, the PyTorch / NumPy / Python versions and the
configurations. The script refuses to write without them. PyTorch is needed here (and only
here): ``pip install -e '.[official]'``.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import inspect
import json
import math
import platform
import subprocess
import sys
import types
from pathlib import Path

import numpy as np

REFERENCE = "5f6fadec0fec78304b4b53e8171d348b58cac486"
FIXTURE_VERSION = 1

# ------------------------------------------------------------------- configurations
# Tiny widths keep the fixtures small and the tests fast; everything else is the paper's
# default (config.yaml at 5f6fade) except dropout 0 (its masks cannot be injected), a
# smaller planner and batch, num_q 3 (a random pair out of more than two) and a gradient
# clip of 0.3 instead of 20, so that both clips (and the stale policy gradient in the
# world model's, spec §5.4) act on these small gradients.
BASE = dict(
    obs="state", num_enc_layers=3, enc_dim=12, mlp_dim=16, latent_dim=16, num_q=3, simnorm_dim=8,
    num_bins=101, vmin=-10.0, vmax=10.0, dropout=0.0, num_channels=32,
    batch_size=8, horizon=3, rho=0.5, consistency_coef=20.0, reward_coef=0.1, value_coef=0.1,
    lr=3e-4, enc_lr_scale=0.3, grad_clip_norm=0.3, tau=0.01, entropy_coef=1e-4,
    log_std_min=-10.0, log_std_max=2.0, discount_denom=5, discount_min=0.95, discount_max=0.995,
    mpc=True, iterations=3, num_samples=16, num_elites=4, num_pi_trajs=3, min_std=0.05, max_std=2.0,
    temperature=0.5,
)
SINGLE = dict(BASE, multitask=False, task_dim=0, tasks=["single"], obs_shape={"state": (5,)}, action_dim=2,
              episode_length=100)
# two tasks of different dims, padded to the largest (spec §10): obs 3 and 5, actions 1 and 2
MULTI = dict(BASE, multitask=True, task_dim=4, tasks=["task-a", "task-b"], obs_shape={"state": (5,)},
             action_dim=2, obs_dims=[3, 5], action_dims=[1, 2], episode_lengths=[100, 500], episode_length=500)


# pixels (spec §2 "Pixels", §3.2 rgb row): single-task, 3 stacked RGB frames of 64x64, a conv
# trunk of 4 channels (so latent_dim 4 * 4 * 4 = 64), a batch of 2 (8 images per update)
RGB = dict(SINGLE, obs="rgb", obs_shape={"rgb": (9, 64, 64)}, num_channels=4, latent_dim=64, batch_size=2)


class Cfg(dict):
    """The attribute-access config the official code reads (a Hydra DictConfig stand-in)."""

    __getattr__ = dict.__getitem__

    def __setattr__(self, k, v):
        self[k] = v


def make_cfg(d):
    c = Cfg(d)
    c.bin_size = (c.vmax - c.vmin) / (c.num_bins - 1)
    return c


# ------------------------------------------------------------------- run-time redirect
class CpuTorch(types.ModuleType):
    """``torch`` as the official modules see it: ``device(...)`` is the CPU and
    ``device="cuda"`` in a factory call becomes the CPU; everything else is torch's."""

    def __init__(self, torch):
        super().__init__("torch")
        object.__setattr__(self, "_torch", torch)

    def __getattr__(self, name):
        torch = object.__getattribute__(self, "_torch")
        attr = getattr(torch, name)
        if name == "device":
            return lambda *a, **k: torch.device("cpu")
        if isinstance(attr, (types.BuiltinFunctionType, types.FunctionType)):
            @functools.wraps(attr)
            def call(*a, **k):
                if "device" in k and str(k["device"]).startswith("cuda"):
                    k["device"] = "cpu"
                return attr(*a, **k)
            return call
        return attr


class Draws:
    """Seeded stand-ins for the official code's random draws, recorded in call order.

    ``torch.randn_like`` / ``torch.randn`` draw float32 N(0, 1) from a NumPy generator;
    ``torch.randint`` (the pixel ShiftAug's shifts) draws integers from the same generator, in
    the dtype asked for; ``numpy.random.choice`` is NumPy's own, seeded. Each record keeps the calling official
    function's name and, for the planner, a copy of the caller's local variables.
    """

    def __init__(self, torch, seed: int):
        self.torch = torch
        self.rng = np.random.default_rng(seed)
        self.np_rng = np.random.RandomState(seed)
        self.records = []
        self._orig = None

    def _caller(self):
        f = inspect.currentframe().f_back.f_back
        while f is not None and "/common/" not in f.f_code.co_filename and "tdmpc2.py" not in f.f_code.co_filename:
            f = f.f_back
        return f

    def _snapshot(self, f):
        keep = ("mean", "std", "score", "elite_idxs", "elite_value", "elite_actions", "value", "actions",
                "pi_actions", "max_value")
        out = {}
        for k in keep:
            v = f.f_locals.get(k) if f is not None else None
            if isinstance(v, self.torch.Tensor):
                out[k] = v.detach().cpu().numpy().copy()
            elif isinstance(v, np.ndarray):
                out[k] = v.copy()
        return out

    def randn_like(self, x, *a, **k):
        f = self._caller()
        v = self.rng.standard_normal(tuple(x.shape)).astype(np.float32)
        self.records.append(("randn_like", f.f_code.co_name if f else "?", v, {}))
        return self.torch.from_numpy(v)

    def randn(self, *size, **k):
        f = self._caller()
        if len(size) == 1 and isinstance(size[0], (tuple, list)):
            size = tuple(size[0])
        v = self.rng.standard_normal(tuple(int(s) for s in size)).astype(np.float32)
        self.records.append(("randn", f.f_code.co_name if f else "?", v, self._snapshot(f)))
        return self.torch.from_numpy(v)

    def randint(self, low, high=None, size=None, **k):
        f = self._caller()
        if high is None:
            low, high = 0, low
        v = self.rng.integers(int(low), int(high), tuple(int(s) for s in size))
        self.records.append(("randint", f.f_code.co_name if f else "?", v.astype(np.int32), {}))
        t = self.torch.from_numpy(v.astype(np.int64))
        return t.to(k["dtype"]) if k.get("dtype") is not None else t

    def choice(self, *a, **k):
        f = self._caller()
        v = self.np_rng.choice(*a, **k)
        self.records.append(("choice", f.f_code.co_name if f else "?", np.asarray(v), {}))
        return v

    @contextlib.contextmanager
    def active(self):
        torch = self.torch
        orig = (torch.randn_like, torch.randn, torch.randint, np.random.choice)
        torch.randn_like, torch.randn, torch.randint, np.random.choice = (self.randn_like, self.randn, self.randint,
                                                                          self.choice)
        try:
            yield self
        finally:
            torch.randn_like, torch.randn, torch.randint, np.random.choice = orig

    def take(self):
        out, self.records = self.records, []
        return out


# ------------------------------------------------------------------- helpers
def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def git_commit(root: Path):
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def to_np(t):
    return t.detach().cpu().numpy().copy()


def state_np(model):
    return {k: to_np(v) for k, v in model.state_dict().items()}


def fill_weights(torch, model, seed: int):
    """Replace every weight by a fixed random value of a useful scale (the official init
    would leave the reward and Q heads at zero): Linear weights N(0, 1/fan_in), biases
    N(0, 0.1^2), LayerNorm scales 1 + N(0, 0.1^2); the target Qs differ from the online Qs."""
    g = np.random.default_rng(seed)
    sd = model.state_dict()
    new = {}
    for k, v in sd.items():
        shp = tuple(v.shape)
        if k.endswith("ln.weight"):
            x = 1.0 + 0.1 * g.standard_normal(shp)
        elif k.endswith("_task_emb.weight"):
            x = g.standard_normal(shp)
            x = x / np.linalg.norm(x, axis=1, keepdims=True)
            x[0] *= 1.5  # above the max-norm 1: renormalised at every look-up
            x[1:] *= 0.5
        elif k.startswith("_encoder.rgb.") and len(shp) == 4:  # conv weight [out, in, k, k]: fan_in = in k k
            x = g.standard_normal(shp) / math.sqrt(int(np.prod(shp[1:])))
        elif len(shp) >= 2 and not k.startswith(("_Qs", "_target_Qs")) or (
                k.startswith(("_Qs", "_target_Qs")) and len(shp) == 3):
            fan_in = shp[-1]
            x = g.standard_normal(shp) / math.sqrt(fan_in)
        else:
            x = 0.1 * g.standard_normal(shp)
        if k.startswith(("_Qs", "_target_Qs")) and k.endswith((".2", ".6")) and len(shp) == 2:
            x = 1.0 + 0.1 * g.standard_normal(shp)  # flat Q layout: 4 i + 2 is ln.weight
        if k in ("_reward.2.weight", "_Qs.params.8", "_target_Qs.params.8"):
            x = 4.0 * x  # wide value distributions: the running scale S leaves 1
        if k.startswith("_target_Qs"):
            x = x + 0.05 * g.standard_normal(shp)
        new[k] = torch.from_numpy(np.asarray(x, np.float32))
    model.load_state_dict(new)


# ------------------------------------------------------------------- the recordings
def record_math(torch, om, oscale, cfg, out):
    """symlog/symexp, two-hot encode/decode, soft CE at and beyond +-vmax, the policy's
    log-std squashing, 5f6fade log-prob scaling and squash correction, running scale S."""
    vmax_y = float(np.expm1(np.float32(10.0)))
    y = np.array([0.0, 1e-8, -1e-8, 1e-3, -0.3, 0.5, 1.0, -1.0, 2.5, -7.25, 100.0, -1234.5, 22025.0, -22025.0,
                  vmax_y, -vmax_y, 1e5, -1e5, 3e7, -3e7, 0.1, 0.2, 0.30000001], np.float32)
    t = torch.from_numpy(y)
    out["math/y"] = y
    out["math/symlog"] = to_np(om.symlog(t))
    out["math/symexp"] = to_np(om.symexp(torch.from_numpy(np.linspace(-12, 12, 49).astype(np.float32))))
    out["math/symexp_x"] = np.linspace(-12, 12, 49).astype(np.float32)
    out["math/two_hot"] = to_np(om.two_hot(t[:, None], cfg))
    g = np.random.default_rng(11)
    logits = (3.0 * g.standard_normal((len(y), cfg.num_bins))).astype(np.float32)
    logits[0] = 0.0
    logits[1, 100] = 60.0  # all mass on +vmax
    logits[2, 0] = 60.0  # all mass on -vmax
    out["math/logits"] = logits
    om.DREG_BINS = None
    out["math/two_hot_inv"] = to_np(om.two_hot_inv(torch.from_numpy(logits), cfg))
    out["math/dreg_bins"] = to_np(om.DREG_BINS)
    out["math/soft_ce"] = to_np(om.soft_ce(torch.from_numpy(logits), t[:, None], cfg))
    raw = (2.0 * g.standard_normal((6, 3))).astype(np.float32)
    out["math/raw_log_std"] = raw
    out["math/log_std"] = to_np(om.log_std(torch.from_numpy(raw), torch.tensor(cfg.log_std_min),
                                           torch.tensor(cfg.log_std_max) - torch.tensor(cfg.log_std_min)))
    eps = g.standard_normal((6, 3)).astype(np.float32)
    out["math/eps"] = eps
    ls = torch.from_numpy(out["math/log_std"])
    out["math/logprob"] = to_np(om.gaussian_logprob(torch.from_numpy(eps), ls))
    size = torch.from_numpy(np.array([[1.0], [2.0], [3.0], [1.0], [2.0], [3.0]], np.float32))
    out["math/logprob_size"] = to_np(size)
    out["math/logprob_sized"] = to_np(om.gaussian_logprob(torch.from_numpy(eps), ls, size=size))
    mu = (1.5 * g.standard_normal((6, 3))).astype(np.float32)
    pi = mu + eps * np.exp(out["math/log_std"])
    out["math/squash_mu"], out["math/squash_pi"] = mu, pi
    m2, p2, lp2 = om.squash(torch.from_numpy(mu), torch.from_numpy(pi), torch.from_numpy(out["math/logprob"]).clone())
    out["math/squash_mu_out"], out["math/squash_pi_out"], out["math/squash_logpi_out"] = to_np(m2), to_np(p2), to_np(lp2)
    # running scale S: several updates from batches [B, 1] of different spreads
    scale = oscale.RunningScale(cfg)
    batches = np.stack([(s * g.standard_normal((8, 1))).astype(np.float32) for s in (0.2, 3.0, 50.0, 7.0, 0.5, 400.0)])
    out["math/scale_batches"] = batches
    values, scaled = [], []
    for b in batches:
        x = torch.from_numpy(b)
        scaled.append(to_np(scale(x, update=True)))
        values.append(np.float32(to_np(scale._value)[0]))
    out["math/scale_values"] = np.array(values, np.float32)
    out["math/scale_scaled"] = np.stack(scaled)


def record_forward(torch, om, agent, cfg, draws, out, prefix, tasks=None):
    """Every module's forward on fixed inputs (spec §3-§4), in eval mode."""
    m = agent.model
    g = np.random.default_rng(21)
    B, A = 8, cfg.action_dim
    obs = g.standard_normal((B, cfg.obs_shape["state"][0])).astype(np.float32)
    act = np.clip(g.standard_normal((B, A)), -1, 1).astype(np.float32)
    task = None
    if tasks is not None:
        task_np = np.array(tasks, np.int64)
        for i, t in enumerate(task_np):  # padded observation and action dims are zero
            obs[i, cfg.obs_dims[t]:] = 0.0
            act[i, cfg.action_dims[t]:] = 0.0
        task = torch.from_numpy(task_np)
        out[f"{prefix}/task"] = task_np
        out[f"{prefix}/task_emb_table_before"] = to_np(m._task_emb.weight)
    out[f"{prefix}/obs"], out[f"{prefix}/action"] = obs, act
    with torch.no_grad():
        z = m.encode(torch.from_numpy(obs), task)
        if tasks is not None:
            out[f"{prefix}/task_emb_table_after"] = to_np(m._task_emb.weight)  # renormalised in place
            out[f"{prefix}/task_emb"] = to_np(m._task_emb(task))
        out[f"{prefix}/z"] = to_np(z)
        a = torch.from_numpy(act)
        out[f"{prefix}/next"] = to_np(m.next(z, a, task))
        out[f"{prefix}/reward_logits"] = to_np(m.reward(z, a, task))
        out[f"{prefix}/q_logits"] = to_np(m.Q(z, a, task, return_type="all"))
        out[f"{prefix}/target_q_logits"] = to_np(m.Q(z, a, task, return_type="all", target=True))
        draws.take()
        q_min = m.Q(z, a, task, return_type="min", target=True)
        q_avg = m.Q(z, a, task, return_type="avg")
        rec = draws.take()
        out[f"{prefix}/q_min"], out[f"{prefix}/q_avg"] = to_np(q_min), to_np(q_avg)
        out[f"{prefix}/q_min_pair"], out[f"{prefix}/q_avg_pair"] = rec[0][2].astype(np.int32), rec[1][2].astype(np.int32)
        mu, pi, log_pi, log_std = m.pi(z, task)
        rec = draws.take()
        out[f"{prefix}/pi_eps"] = rec[0][2]
        out[f"{prefix}/pi_mean"], out[f"{prefix}/pi_sample"] = to_np(mu), to_np(pi)
        out[f"{prefix}/pi_log_pi"], out[f"{prefix}/pi_log_std"] = to_np(log_pi), to_np(log_std)
        out[f"{prefix}/reward"] = to_np(om.two_hot_inv(m.reward(z, a, task), cfg))


class FixedBuffer:
    """``buffer.sample()`` of the official update, returning fixed batches in turn."""

    def __init__(self, batches):
        self.batches = list(batches)

    def sample(self):
        return self.batches.pop(0)


def make_batch(torch, cfg, seed, tasks=None):
    g = np.random.default_rng(seed)
    H, B, A = cfg.horizon, cfg.batch_size, cfg.action_dim
    obs = g.standard_normal((H + 1, B, cfg.obs_shape["state"][0])).astype(np.float32)
    action = np.clip(0.8 * g.standard_normal((H, B, A)), -1, 1).astype(np.float32)
    reward = (2.0 * g.standard_normal((H, B, 1))).astype(np.float32)
    reward[0, 0, 0] = 30000.0  # beyond symexp(vmax): clipped to the last bin
    reward[1, 0, 0] = -30000.0
    task = None
    if tasks is not None:
        task = np.array(tasks, np.int64)
        for i, t in enumerate(task):
            obs[:, i, cfg.obs_dims[t]:] = 0.0
            action[:, i, cfg.action_dims[t]:] = 0.0
    np_batch = dict(obs=obs, action=action, reward=reward[..., 0])
    if task is not None:
        np_batch["task"] = task
    tb = (torch.from_numpy(obs), torch.from_numpy(action), torch.from_numpy(reward),
          None if task is None else torch.from_numpy(task))
    return np_batch, tb


def record_updates(torch, agent, cfg, draws, out, prefix, tasks=None):
    """Two full updates on fixed batches (spec §5): losses, grad norm, parameters after the
    world-model step, after the policy step, target Qs after the soft update."""
    batches = [make_batch(torch, cfg, 31 + i, tasks) for i in range(2)]
    agent_buffer = FixedBuffer([b[1] for b in batches])
    snaps = {}
    orig_update_pi = agent.update_pi

    def update_pi(zs, task):
        snaps["after_wm"] = state_np(agent.model)
        snaps["zs"] = to_np(zs)
        loss = orig_update_pi(zs, task)
        snaps["after_pi"] = state_np(agent.model)
        grads = [p.grad for p in agent.model._pi.parameters() if p.grad is not None]
        snaps["pi_grad_sq"] = float(sum(float((g.double() ** 2).sum()) for g in grads))
        return loss

    agent.update_pi = update_pi
    try:
        for i, (np_batch, _) in enumerate(batches):
            u = f"{prefix}/u{i + 1}"
            for k, v in np_batch.items():
                out[f"{u}/batch/{k}"] = v
            draws.take()
            metrics = agent.update(agent_buffer)
            rec = draws.take()
            # draw order: TD target (pi noise, target pair), policy step (pi noise, online pair)
            kinds = [(r[0], r[1]) for r in rec]
            assert kinds == [("randn_like", "pi"), ("choice", "Q"), ("randn_like", "pi"), ("choice", "Q")], kinds
            out[f"{u}/draw/td_eps"], out[f"{u}/draw/td_pair"] = rec[0][2], rec[1][2].astype(np.int32)
            out[f"{u}/draw/pi_eps"], out[f"{u}/draw/pi_pair"] = rec[2][2], rec[3][2].astype(np.int32)
            for k, v in metrics.items():
                out[f"{u}/metric/{k}"] = np.float64(v)
            out[f"{u}/pi_scale_f32"] = to_np(agent.scale._value).reshape(())
            out[f"{u}/stale_pi_grad_sq"] = np.float64(snaps["pi_grad_sq"])
            out[f"{u}/zs"] = snaps["zs"]
            # after the world-model step: everything; after the policy step: what it changes
            # (the policy, and the embedding rows its look-ups renormalise); after the
            # update: the target Qs. Every other tensor is checked unchanged here.
            final = state_np(agent.model)
            for k, v in snaps["after_wm"].items():
                out[f"{u}/after_wm/{k}"] = v
            for k, v in snaps["after_pi"].items():
                if k.startswith("_pi.") or k == "_task_emb.weight":
                    out[f"{u}/after_pi/{k}"] = v
                else:
                    assert np.array_equal(v, snaps["after_wm"][k]), k
            for k, v in final.items():
                if k.startswith("_target_Qs."):
                    out[f"{u}/after_update/{k}"] = v
                else:
                    assert np.array_equal(v, snaps["after_pi"][k]), k
    finally:
        agent.update_pi = orig_update_pi


@contextlib.contextmanager
def observe_line(method, text, fn):
    """Call ``fn(frame)`` when ``method`` is about to run its source line holding ``text``
    (a line-event trace of that one function: reads its locals, changes nothing)."""
    method = inspect.unwrap(getattr(method, "__func__", method))  # under torch.no_grad's wrapper
    lines, start = inspect.getsourcelines(method)
    hits = [start + i for i, line in enumerate(lines) if text in line]
    if len(hits) != 1:
        raise RuntimeError(f"expected one line holding {text!r} in {method.__qualname__}, found {len(hits)}")
    code = method.__code__

    def local(frame, event, arg):
        if event == "line" and frame.f_lineno == hits[0]:
            fn(frame)
        return local

    def glob(frame, event, arg):
        return local if frame.f_code is code else None

    old = sys.gettrace()
    sys.settrace(glob)
    try:
        yield
    finally:
        sys.settrace(old)


def record_planner(torch, agent, cfg, draws, out, prefix, task=None):
    """Two planning calls (t0, then a warm-started one) in training mode (spec §6): the
    policy trajectories, every iteration's samples, values, elites, mean and std."""
    g = np.random.default_rng(41 + (task or 0))
    obs = g.standard_normal((2, cfg.obs_shape["state"][0])).astype(np.float32)
    if task is not None:
        obs[:, cfg.obs_dims[task]:] = 0.0
        out[f"{prefix}/task"] = np.int64(task)
    out[f"{prefix}/obs"] = obs
    ev_calls = []
    orig = agent._estimate_value

    def estimate_value(z, actions, t):
        v = orig(z, actions, t)
        ev_calls.append((to_np(z), to_np(actions), to_np(v)))
        return v

    agent._estimate_value = estimate_value
    try:
        for call, t0 in enumerate((True, False)):
            p = f"{prefix}/call{call}"
            draws.take()
            ev_calls.clear()
            if call == 1:
                out[f"{p}/prev_mean"] = to_np(agent._prev_mean)
            final = []
            with observe_line(agent.plan, "score = score.squeeze(1)", lambda f: final.append(draws._snapshot(f))):
                a = agent.act(torch.from_numpy(obs[call]), t0=t0, eval_mode=False, task=task)
            rec = draws.take()
            assert len(final) == 1
            out[f"{p}/action"] = to_np(a)
            out[f"{p}/final_mean"] = to_np(agent._prev_mean)
            pi_eps = [r[2] for r in rec if r[0] == "randn_like"]
            out[f"{p}/pi_traj_eps"] = np.stack(pi_eps[:cfg.horizon])  # [H, P, A]: one draw per horizon step
            samp = [r for r in rec if r[0] == "randn" and r[1] == "plan"]
            it = [r for r in samp if r[2].ndim == 3]
            assert len(it) == cfg.iterations and len(samp) == cfg.iterations + 1
            out[f"{p}/pi_actions"] = it[0][3]["pi_actions"]
            for i, r in enumerate(it):
                out[f"{p}/it{i}/mean_in"], out[f"{p}/it{i}/std_in"] = r[3]["mean"], r[3]["std"]
                out[f"{p}/it{i}/noise"] = r[2]
            # the locals at each later iteration's draw hold the previous iteration's results;
            # the last iteration's are those seen as plan() reaches its action selection
            outs = [r[3] for r in it[1:]] + [final[0]]
            for i, loc in enumerate(outs):
                out[f"{p}/it{i}/actions"] = ev_calls[i][1]
                out[f"{p}/it{i}/value"] = ev_calls[i][2]
                out[f"{p}/it{i}/elite_idxs"] = loc["elite_idxs"].astype(np.int64)
                out[f"{p}/it{i}/score"] = loc["score"]
                out[f"{p}/it{i}/mean_out"], out[f"{p}/it{i}/std_out"] = loc["mean"], loc["std"]
            out[f"{p}/explore_noise"] = samp[-1][2]
            ch = [r for r in rec if r[0] == "choice"]
            # per iteration: one Q pair in estimate_value; then the elite choice
            out[f"{p}/q_pairs"] = np.stack([c[2] for c in ch[:-1]]).astype(np.int32)
            out[f"{p}/elite_choice"] = np.int64(ch[-1][2])
            ev_eps = pi_eps[cfg.horizon:]
            out[f"{p}/value_pi_eps"] = np.stack(ev_eps)  # [iterations, N, A] pi noise at z_H
            for i, (z, acts, v) in enumerate(ev_calls):
                out[f"{p}/ev{i}/z"], out[f"{p}/ev{i}/actions"], out[f"{p}/ev{i}/value"] = z, acts, v
    finally:
        agent._estimate_value = orig


def rgb_images(seed: int, n: int):
    """``n`` uint8 frame stacks [n, 9, 64, 64] and how the fixture stores them: 8x8-pixel
    blocks of random colour in [0, 127] (``blocks`` [n, 9, 8, 8] uint8) plus 128 times one bit
    of per-pixel noise (``bits``, np.packbits of the [n, 9, 64, 64] 0/1 noise), so neighbouring
    pixels differ by 128 in about half the places (the bilinear shift's rounding shows: the
    integer crop differs by up to about 1e-3) and the fixture stays small.
    :func:`images_from_stored` rebuilds the images."""
    g = np.random.default_rng(seed)
    blocks = g.integers(0, 128, (n, 9, 8, 8)).astype(np.uint8)
    noise = g.integers(0, 2, (n, 9, 64, 64)).astype(np.uint8)
    stored = {"blocks": blocks, "bits": np.packbits(noise.reshape(-1))}
    imgs = images_from_stored(stored["blocks"], stored["bits"])
    assert np.array_equal(imgs, (np.kron(blocks.astype(np.int64), np.ones((8, 8), np.int64)) + 128 * noise).astype(
        np.uint8))
    return imgs, stored


def images_from_stored(blocks, bits):
    """The uint8 images [n, 9, 64, 64] of :func:`rgb_images`' stored form (tests use the same
    two lines)."""
    n = blocks.shape[0]
    noise = np.unpackbits(bits)[: n * 9 * 64 * 64].reshape(n, 9, 64, 64)
    return (np.repeat(np.repeat(blocks, 8, axis=2), 8, axis=3) + 128 * noise).astype(np.uint8)


def crop_shift(images, shifts, pad: int = 3):
    """The integer crop ``edge_pad(images)[..., sy:sy+64, sx:sx+64]`` (float32), what ShiftAug
    computes in exact arithmetic; shifts [n, 2] (x, y)."""
    xp = np.pad(images.astype(np.float32), ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="edge")
    h = images.shape[-1]
    return np.stack([xp[i, :, sy:sy + h, sx:sx + h] for i, (sx, sy) in enumerate(shifts)])


def record_rgb(torch, layers, agent, cfg, draws, out):
    """The pixel model (spec §3.2 rgb row, §12.17): ShiftAug alone on fixed images (the
    drawn shifts; its output stored as the difference from the integer crop, mostly zeros),
    the rgb encoder's forward (eval mode; its own draws), and one full update (spec §5) on a
    batch of uint8 frame stacks, with every shift drawn recorded."""
    n = 4
    imgs, stored = rgb_images(51, n)
    out["aug/images_blocks"], out["aug/images_bits"] = stored["blocks"], stored["bits"]
    draws.take()
    aug = layers.ShiftAug()(torch.from_numpy(imgs))
    rec = draws.take()
    assert [(r[0], r[1]) for r in rec] == [("randint", "forward")], rec
    shifts = rec[0][2].reshape(n, 2)
    aug = to_np(aug)
    diff = aug - crop_shift(imgs, shifts)
    assert np.array_equal(crop_shift(imgs, shifts) + diff, aug)  # the crop plus diff is the output, bit for bit
    out["aug/shifts"], out["aug/minus_crop"] = shifts, diff.astype(np.float32)

    m = agent.model
    with torch.no_grad():
        z = m.encode(torch.from_numpy(imgs), None)
    rec = draws.take()
    assert [(r[0], r[1]) for r in rec] == [("randint", "forward")], rec
    out["enc/shifts"], out["enc/z"] = rec[0][2].reshape(n, 2), to_np(z)

    g = np.random.default_rng(61)
    H, B, A = cfg.horizon, cfg.batch_size, cfg.action_dim
    obs, stored = rgb_images(62, (H + 1) * B)
    obs = obs.reshape(H + 1, B, 9, 64, 64)
    action = np.clip(0.8 * g.standard_normal((H, B, A)), -1, 1).astype(np.float32)
    reward = (2.0 * g.standard_normal((H, B, 1))).astype(np.float32)
    buffer = FixedBuffer([(torch.from_numpy(obs), torch.from_numpy(action), torch.from_numpy(reward), None)])
    snaps = {}
    orig_update_pi = agent.update_pi

    def update_pi(zs, task):
        snaps["after_wm"] = state_np(agent.model)
        snaps["zs"] = to_np(zs)
        return orig_update_pi(zs, task)

    agent.update_pi = update_pi
    try:
        draws.take()
        metrics = agent.update(buffer)
        rec = draws.take()
    finally:
        agent.update_pi = orig_update_pi
    # draw order: the TD targets' encode of obs[1:] (one ShiftAug call per time step, 5-D
    # input), their pi noise and target pair; the rollout's encode of obs[0]; the policy step
    kinds = [(r[0], r[1]) for r in rec]
    assert kinds == [("randint", "forward")] * H + [("randn_like", "pi"), ("choice", "Q"), ("randint", "forward"),
                                                    ("randn_like", "pi"), ("choice", "Q")], kinds
    u = "upd"
    # obs: images_from_stored(blocks, bits).reshape(H + 1, B, 9, 64, 64)
    out[f"{u}/batch/obs_blocks"], out[f"{u}/batch/obs_bits"] = stored["blocks"], stored["bits"]
    out[f"{u}/batch/action"], out[f"{u}/batch/reward"] = action, reward[..., 0]
    out[f"{u}/draw/td_shifts"] = np.stack([r[2].reshape(B, 2) for r in rec[:H]])  # [H, B, 2]
    out[f"{u}/draw/td_eps"], out[f"{u}/draw/td_pair"] = rec[H][2], rec[H + 1][2].astype(np.int32)
    out[f"{u}/draw/wm_shifts"] = rec[H + 2][2].reshape(B, 2)
    out[f"{u}/draw/pi_eps"], out[f"{u}/draw/pi_pair"] = rec[H + 3][2], rec[H + 4][2].astype(np.int32)
    for k, v in metrics.items():
        out[f"{u}/metric/{k}"] = np.float64(v)
    out[f"{u}/pi_scale_f32"] = to_np(agent.scale._value).reshape(())
    out[f"{u}/zs"] = snaps["zs"]
    for k, v in snaps["after_wm"].items():  # what the world-model step changes (not the pi, not the targets)
        if not k.startswith(("_pi.", "_target_Qs.")):
            out[f"{u}/after_wm/{k}"] = v
    for k, v in state_np(agent.model).items():
        if k.startswith(("_pi.", "_target_Qs.")):
            out[f"{u}/after_update/{k}"] = v


def purge_official_modules():
    for name in list(sys.modules):
        if name in ("common", "tdmpc2") or name.startswith("common."):
            del sys.modules[name]


def record_later_layouts(torch, root: Path, variants, out, files):
    """The nested Q layout, from the later code itself: each variant's 5f6fade state dict
    converted by the later code's own ``api_model_conversion`` and loaded into its
    ``WorldModel``; its ``state_dict()`` is recorded (tensors as arrays; the non-tensor
    entries' values in ``meta``)."""
    src = root / "tdmpc2"
    purge_official_modules()
    sys.path.insert(0, str(src))
    try:
        import common.layers as llayers
        import common.world_model as lwm
        for name, mod in list(sys.modules.items()):
            f = getattr(mod, "__file__", None)
            if f and Path(f).resolve().is_relative_to(src):
                files[str(Path(f).resolve().relative_to(root))] = sha256(Path(f).resolve())
        non_tensor = {}
        for vname, (cfg_dict, sd5) in variants.items():
            cfg = make_cfg(cfg_dict)
            model = lwm.WorldModel(cfg)  # on the CPU already (its .to() re-creates the views)
            source = {k: torch.from_numpy(v.copy()) for k, v in sd5.items()}
            if cfg.episodic:  # 5f6fade has no termination head: fixed random weights for it
                g = np.random.default_rng(5)
                for k, v in model.state_dict().items():
                    if k.startswith("_termination."):
                        shp = tuple(v.shape)
                        x = (g.standard_normal(shp) / math.sqrt(shp[-1])) if len(shp) == 2 else 0.1 * g.standard_normal(shp)
                        source[k] = torch.from_numpy(np.asarray(x, np.float32))
            converted = llayers.api_model_conversion(model.state_dict(), source)
            model.load_state_dict(converted)
            for k, v in model.state_dict().items():
                if isinstance(v, torch.Tensor):
                    out[f"{vname}/{k}"] = to_np(v)
                else:
                    non_tensor[f"{vname}/{k}"] = [type(v).__name__, list(v) if isinstance(v, tuple) else
                                                  (None if v is None else str(v))]
        return non_tensor
    finally:
        sys.path.remove(str(src))
        purge_official_modules()


#: the official files the recording tools import (their SHA-256 goes into every fixture)
OFFICIAL_FILES = ("tdmpc2.py", "common/math.py", "common/layers.py", "common/init.py", "common/scale.py",
                  "common/world_model.py", "common/__init__.py")


def imported_official_files(root: Path, src: Path) -> dict:
    """{path relative to the checkout: SHA-256} of every module imported from ``src``; exits if
    one of OFFICIAL_FILES was not imported from there (the fixtures must name what made them)."""
    files = {}
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if f and Path(f).resolve().is_relative_to(src):
            files[str(Path(f).resolve().relative_to(root))] = sha256(Path(f).resolve())
    missing = [n for n in OFFICIAL_FILES if f"tdmpc2/{n}" not in files]
    if missing:
        sys.exit(f"error: tdmpc2/{missing[0]} was not imported from the checkout (no SHA-256 to record); "
                 "refusing to write")
    return files


def official_checkout(path, commit_arg=None):
    """(root, root/tdmpc2, the full reference commit) of a checkout of nicklashansen/tdmpc2 at
    5f6fade; exits with a one-line error for anything else (files missing, another commit, a
    commit that cannot be told: pass ``commit_arg`` for a tree that is not a git work tree)."""
    root = Path(path).resolve()
    src = root / "tdmpc2"
    absent = [n for n in OFFICIAL_FILES if not (src / n).is_file()]
    if absent:
        sys.exit(f"error: {root} is not a checkout of nicklashansen/tdmpc2: missing tdmpc2/{absent[0]}")
    commit = git_commit(root)
    if commit is None:
        commit = commit_arg
    elif commit_arg and not commit.startswith(commit_arg[:7]):
        sys.exit(f"error: --commit {commit_arg} but the checkout is at {commit}")
    if not commit:
        sys.exit("error: the checkout's commit is unknown (not a git work tree): pass --commit SHA")
    if len(commit) < 7 or not REFERENCE.startswith(commit[:7]):
        sys.exit(f"error: the checkout is at {commit}; the fixtures are recorded from {REFERENCE[:7]} "
                 f"(docs/spec/tdmpc2.md's reference): check it out first")
    return root, src, REFERENCE


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--official", required=True, help="a checkout of nicklashansen/tdmpc2 (at 5f6fade)")
    ap.add_argument("--commit", help="the checkout's commit, if it is not a git work tree (e.g. a git archive)")
    ap.add_argument("--later", help="optional: a checkout of a later commit (e.g. e9f5932) to record the nested "
                    "Q-ensemble layout of its state dicts from (needs tensordict)")
    ap.add_argument("--later-commit", help="the later checkout's commit, if it is not a git work tree")
    ap.add_argument("--only", choices=("all", "rgb"), default="all",
                    help="rgb: record the pixel model's fixture (parity_rgb.npz) only, leaving the others as they are")
    ap.add_argument("--force", action="store_true",
                    help="write even if the official files differ from those the existing fixtures name")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))
    args = ap.parse_args(argv)

    root, src, commit = official_checkout(args.official, args.commit)

    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    sys.path.insert(0, str(src))
    import common.math as om  # noqa: E402 (the official modules, from the checkout)
    import common.layers as olayers
    import common.scale as oscale
    import common.world_model as owm  # noqa: F401
    import tdmpc2 as oagent
    cpu_torch = CpuTorch(torch)
    oagent.torch = cpu_torch
    oscale.torch = cpu_torch

    files = imported_official_files(root, src)

    meta = dict(fixture_version=FIXTURE_VERSION, official_repository="nicklashansen/tdmpc2", official_commit=commit,
                official_files_sha256=dict(sorted(files.items())), torch_version=torch.__version__,
                numpy_version=np.__version__, python_version=platform.python_version(),
                recorded_on=platform.platform(), device="cpu", recorder="tools/record_parity.py")
    for k in ("official_commit", "official_files_sha256", "torch_version"):
        if not meta[k]:
            sys.exit(f"error: {k} is unknown; refusing to write fixtures without it")

    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    # an edited checkout at the right commit would record other numbers: compare its files'
    # hashes with those the existing fixtures were recorded from
    old = outdir / "parity_modules.npz"
    if old.exists() and not args.force:
        prev = json.loads(str(np.load(old)["meta"]))
        for f, h in prev.get("official_files_sha256", {}).items():
            if files.get(f, h) != h:
                sys.exit(f"error: {f} differs from the file the existing fixtures were recorded from "
                         f"(SHA-256 {files[f][:12]}... vs {h[:12]}...): an edited checkout? (--force to write anyway)")
    written = []

    def write(name, arrays, cfgs):
        m = dict(meta, configs=cfgs)
        arrays = dict(arrays, meta=np.array(json.dumps(m, sort_keys=True, default=list)))
        path = outdir / f"parity_{name}.npz"
        np.savez_compressed(path, **arrays)
        written.append(path)

    def pixels():
        """ShiftAug, the rgb encoder, one update (parity_rgb.npz)."""
        cfg = make_cfg(RGB)
        draws = Draws(torch, seed=5)
        with draws.active():
            agent = oagent.TDMPC2(cfg)
            fill_weights(torch, agent.model, seed=6)
            out = {f"weights/{k}": v for k, v in state_np(agent.model).items()}
            out["discount"] = np.float64(agent.discount)
            record_rgb(torch, olayers, agent, cfg, draws, out)
            write("rgb", out, dict(rgb=dict(cfg)))

    if args.only == "rgb":
        pixels()
        for p in written:
            print(f"wrote {p} ({p.stat().st_size} bytes)")
        return

    # ---- single-task: weights, math, module forwards, two updates, the planner
    cfg = make_cfg(SINGLE)
    draws = Draws(torch, seed=1)
    with draws.active():
        agent = oagent.TDMPC2(cfg)
        fill_weights(torch, agent.model, seed=2)
        out = {f"weights/{k}": v for k, v in state_np(agent.model).items()}
        record_math(torch, om, oscale, cfg, out)
        record_forward(torch, om, agent, cfg, draws, out, "fwd")
        write("modules", out, dict(single=dict(cfg)))

        out = {f"weights/{k}": v for k, v in state_np(agent.model).items()}
        out["discount"] = np.float64(agent.discount)
        record_planner(torch, agent, cfg, draws, out, "plan")
        record_updates(torch, agent, cfg, draws, out, "upd")
        write("single", out, dict(single=dict(cfg)))

    # ---- multi-task: two tasks of different dims, padded; embedding max-norm
    cfg = make_cfg(MULTI)
    draws = Draws(torch, seed=3)
    with draws.active():
        agent = oagent.TDMPC2(cfg)
        fill_weights(torch, agent.model, seed=4)
        out = {f"weights/{k}": v for k, v in state_np(agent.model).items()}
        out["discount"] = to_np(agent.discount)
        out["action_masks"] = to_np(agent.model._action_masks)
        record_forward(torch, om, agent, cfg, draws, out, "fwd", tasks=[0, 1, 1, 0, 1, 0, 0, 1])
        # the forward's look-ups renormalised the embedding in place: start again from the weights
        agent.model.load_state_dict({k[len("weights/"):]: torch.from_numpy(v) for k, v in out.items()
                                     if k.startswith("weights/")})
        for t in (0, 1):
            record_planner(torch, agent, cfg, draws, out, f"plan{t}", task=t)
        agent.model.load_state_dict({k[len("weights/"):]: torch.from_numpy(v) for k, v in out.items()
                                     if k.startswith("weights/")})
        record_updates(torch, agent, cfg, draws, out, "upd", tasks=[0, 1, 1, 0, 1, 0, 0, 1])
        write("multitask", out, dict(multi=dict(cfg)))
    multi_sd = {k[len("weights/"):]: v for k, v in out.items() if k.startswith("weights/")}

    pixels()

    # ---- the later (nested) layout, from the later code
    if args.later:
        lroot = Path(args.later).resolve()
        lcommit = git_commit(lroot) or args.later_commit
        if not lcommit:
            sys.exit("error: the later checkout's commit is unknown: pass --later-commit SHA")
        single_sd = {k[len("weights/"):]: v for k, v in np.load(outdir / "parity_single.npz").items()
                     if k.startswith("weights/")}
        lfiles = {}
        variants = {"single": (dict(SINGLE, episodic=False), single_sd),
                    "episodic": (dict(SINGLE, episodic=True), single_sd),
                    "multi": (dict(MULTI, episodic=False), multi_sd)}
        lout = {}
        non_tensor = record_later_layouts(torch, lroot, variants, lout, lfiles)
        if not lfiles or not non_tensor:
            sys.exit("error: nothing recorded from the later checkout; refusing to write")
        import tensordict
        lmeta = dict(meta, later_commit=lcommit, tensordict_version=tensordict.__version__, later_files_sha256=dict(sorted(lfiles.items())),
                     non_tensor_entries=non_tensor, configs=dict(single=dict(SINGLE), multi=dict(MULTI)))
        path = outdir / "parity_layouts.npz"
        np.savez_compressed(path, **lout, meta=np.array(json.dumps(lmeta, sort_keys=True, default=list)))
        written.append(path)
    for p in written:
        print(f"wrote {p} ({p.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
