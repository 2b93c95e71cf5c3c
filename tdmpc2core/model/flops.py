"""FLOPs of the official algorithm, counted from the architecture (for benchmarks).

Counted as the reference (5f6fade) computes: matrix multiplies only (2 * in * out per row of
each Linear), all K Q members wherever the reference evaluates all K and then keeps a random
pair (TD targets, policy loss, planner). A backward pass counts 2x its forward when weight
gradients are taken and 1x when only input gradients are (the Q ensemble in the policy loss).
Our implementation evaluates only the pair, so its achieved GFLOP/s on these counts is higher
than the arithmetic it actually performs: exact savings show as speed.
"""
from __future__ import annotations


def _mlp(inp: int, hidden, out: int) -> int:
    """Matmul FLOPs per row of an mlp(inp, hidden, out)."""
    dims = [inp, *hidden, out]
    return sum(2 * a * b for a, b in zip(dims[:-1], dims[1:]))


def conv_flops(in_channels: int, num_channels: int, side: int = 64) -> int:
    """Multiply-add FLOPs (2 per MAC) of the rgb conv trunk (spec §3.2 rgb row) on one
    [in_channels, side, side] image: sum over its 4 layers of 2 * out_side^2 * C_out * C_in * k^2
    (ShiftAug, the bias, ReLU and SimNorm not counted, as for the MLPs)."""
    from .networks import CONV_LAYERS

    total, c_in = 0, in_channels
    for k, s in CONV_LAYERS:
        side = (side - k) // s + 1
        total += 2 * side * side * num_channels * c_in * k * k
        c_in = num_channels
    return total


def module_flops(cfg, obs_dim: int, action_dim: int, task_dim: int = 0) -> dict:
    """FLOPs per row of each module for a resolved config (rgb, ``cfg.obs == "rgb"``: the
    encoder is the conv trunk on a [obs_dim / 64^2, 64, 64] image, :func:`conv_flops`)."""
    L, M, E = cfg.latent_dim, cfg.mlp_dim, cfg.enc_dim
    enc_hidden = [E] * max(cfg.num_enc_layers - 1, 1)
    za = L + task_dim + action_dim
    if getattr(cfg, "obs", "state") == "rgb":
        encoder = conv_flops(obs_dim // (64 * 64), cfg.num_channels)
    else:
        encoder = _mlp(obs_dim + task_dim, enc_hidden, L)
    return {
        "encoder": encoder,
        "dynamics": _mlp(za, [M, M], L),
        "reward": _mlp(za, [M, M], cfg.num_bins),
        "q": _mlp(za, [M, M], cfg.num_bins),
        "pi": _mlp(L + task_dim, [M, M], 2 * action_dim),
    }


def update_flops(cfg, obs_dim: int, action_dim: int, task_dim: int = 0) -> int:
    """FLOPs of one reference update (spec §5.2) at batch B and horizon H."""
    f = module_flops(cfg, obs_dim, action_dim, task_dim)
    B, H, K = cfg.batch_size, cfg.horizon, cfg.num_q
    td = H * B * (f["encoder"] + f["pi"] + K * f["q"])
    wm_fwd = B * f["encoder"] + H * B * (f["dynamics"] + K * f["q"] + f["reward"])
    wm = 3 * wm_fwd
    pi_fwd_pi = (H + 1) * B * f["pi"]
    pi_fwd_q = (H + 1) * B * K * f["q"]
    pi = 3 * pi_fwd_pi + 2 * pi_fwd_q
    return int(td + wm + pi)


def plan_flops(cfg, obs_dim: int, action_dim: int, task_dim: int = 0) -> int:
    """FLOPs of one reference planning call (spec §6)."""
    f = module_flops(cfg, obs_dim, action_dim, task_dim)
    N, P, H, K = cfg.num_samples, cfg.num_pi_trajs, cfg.horizon, cfg.num_q
    pi_trajs = P * (H * f["pi"] + (H - 1) * f["dynamics"])
    per_iter = N * H * (f["reward"] + f["dynamics"]) + N * (f["pi"] + K * f["q"])
    return int(f["encoder"] + pi_trajs + cfg.iterations * per_iter)
