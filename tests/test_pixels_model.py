"""The pixel model (issue 29; spec §2 "Pixels", §3.2 rgb row, §3.7, §12 item 17): the config
fields, ShiftAug against the official float32 grid sample, the conv encoder, the key
contract of ``WorldModel.encode`` and of the update and planner, and the FLOP count.

Tiny shapes throughout: one rgb world model (mlp_dim 32, 2 Q members) shared by the tests.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tdmpc2core.model import flops, pixels
from tdmpc2core.model import planner as P
from tdmpc2core.model import update as U
from tdmpc2core.model.config import TDMPC2Config, config_record, resolve_config
from tdmpc2core.model.networks import ConvEncoder, conv_out_side
from tdmpc2core.model.world_model import WorldModel

SHAPE = (9, 64, 64)
OBS = 9 * 64 * 64
ACT = 2
SMALL = dict(obs="rgb", mlp_dim=32, enc_dim=32, num_q=2, batch_size=2, horizon=2, num_samples=16, num_elites=4,
             num_pi_trajs=2, iterations=1, dropout=0.0)


@pytest.fixture(scope="module")
def wm():
    cfg = resolve_config(TDMPC2Config(**SMALL), episode_length=10, action_dim=ACT)
    return WorldModel(cfg, OBS, ACT, obs_shape=SHAPE)


@pytest.fixture(scope="module")
def params(wm):
    return wm.init(jax.random.PRNGKey(0))


def _images(key, lead):
    return jax.random.randint(jax.random.PRNGKey(key), tuple(lead) + (OBS,), 0, 256).astype(jnp.uint8)


# ------------------------------------------------------------------------------ configuration
def test_config_fields_and_refusals():
    with pytest.raises(ValueError, match=r"obs='pixels' is not an observation kind; accepted: \['state', 'rgb'\]"):
        TDMPC2Config(obs="pixels")
    with pytest.raises(ValueError, match="num_channels=0"):
        TDMPC2Config(obs="rgb", num_channels=0)
    with pytest.raises(ValueError, match="latent_dim=128 .* must be 512"):
        resolve_config(TDMPC2Config(obs="rgb", model_size=1), episode_length=10, action_dim=2)
    with pytest.raises(ValueError, match="latent_dim=512 .* must be 256"):
        resolve_config(TDMPC2Config(obs="rgb", num_channels=16), episode_length=10, action_dim=2)
    assert resolve_config(TDMPC2Config(obs="rgb", model_size=19, latent_dim=512), episode_length=10,
                          action_dim=2).latent_dim == 512
    # a state run's record (its run id and checkpoint settings) does not name the new fields
    rec = config_record(TDMPC2Config())
    assert "obs" not in rec and "num_channels" not in rec
    assert config_record(TDMPC2Config(obs="rgb"))["obs"] == "rgb"


def test_world_model_refusals(wm):
    cfg = wm.cfg
    with pytest.raises(ValueError, match=r"needs obs_shape \(C, 64, 64\)"):
        WorldModel(cfg, OBS, ACT)
    with pytest.raises(ValueError, match=r"needs obs_shape \(C, 64, 64\)"):
        WorldModel(cfg, 9 * 32 * 32, ACT, obs_shape=(9, 32, 32))
    with pytest.raises(ValueError, match="obs_dim=100 is not the flat length 36864"):
        WorldModel(cfg, 100, ACT, obs_shape=SHAPE)
    with pytest.raises(ValueError, match="multi-task rgb observations are not supported"):
        WorldModel(cfg, OBS, ACT, task_dim=8, num_tasks=2, obs_shape=SHAPE)
    with pytest.raises(ValueError, match="obs_shape=.* is given but cfg.obs='state'"):
        WorldModel(dataclasses.replace(cfg, obs="state"), OBS, ACT, obs_shape=SHAPE)


# ------------------------------------------------------------------------------ ShiftAug
def test_shift_aug_is_the_official_grid_sample_not_the_crop():
    """The official ShiftAug (torch grid_sample on its float32 grid, run here on the CPU)
    against ours with the same shifts: within one float32 ulp of 255 (torch's CPU kernel
    chains the weighted sum in fused multiply-adds, XLA may not); the integer crop, the exact-
    arithmetic equivalent, is off by up to ~2e-3 (docs/deviations.md F1)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)
    n, h, pad = 6, 64, 3
    x = torch.randint(0, 256, (n, 9, h, h), dtype=torch.uint8, generator=g)
    si = torch.randint(0, 2 * pad + 1, (n, 1, 1, 2), generator=g)
    # the official computation (5f6fade layers.ShiftAug.forward) with these shifts
    xp = F.pad(x.float(), (pad,) * 4, "replicate")
    eps = 1.0 / (h + 2 * pad)
    ar = torch.linspace(-1.0 + eps, 1.0 - eps, h + 2 * pad)[:h]
    ar = ar.unsqueeze(0).repeat(h, 1).unsqueeze(2)
    base = torch.cat([ar, ar.transpose(1, 0)], dim=2).unsqueeze(0).repeat(n, 1, 1, 1)
    shift = si.float()
    shift *= 2.0 / (h + 2 * pad)
    ref = F.grid_sample(xp, base + shift, padding_mode="zeros", align_corners=False).numpy()
    assert np.array_equal(pixels._base_grid(h, pad), ar[0, :, 0].numpy())
    shifts = jnp.asarray(si.numpy()[:, 0, 0, :])
    ours = np.asarray(jax.jit(pixels.shift_aug)(jnp.asarray(x.numpy()), shifts))
    np.testing.assert_allclose(ours, ref, rtol=0, atol=2e-5)
    crop = np.asarray(pixels.crop_shift(jnp.asarray(x.numpy()), shifts))
    assert 1e-4 < np.abs(crop - ref).max() < 5e-3  # the crop is not the reference


def test_shift_aug_shifts_and_refusals():
    img = jnp.arange(2 * 1 * 64 * 64, dtype=jnp.float32).reshape(2, 1, 64, 64)
    # shift (3, 3) is the identity up to the float32 grid's offsets; (0, 6): 3 left, 3 down
    out = np.asarray(pixels.shift_aug(img, jnp.array([[3, 3], [0, 6]])))
    np.testing.assert_allclose(out[0], np.asarray(img[0]), atol=0.02)
    padded = np.pad(np.asarray(img[1]), ((0, 0), (3, 3), (3, 3)), mode="edge")
    np.testing.assert_allclose(out[1], padded[:, 6:70, 0:64], atol=0.05)
    with pytest.raises(ValueError, match=r"shifts must be \[N, 2\]"):
        pixels.shift_aug(img, jnp.zeros((2, 3), jnp.int32))
    with pytest.raises(ValueError, match="H == W"):
        pixels.shift_aug(img[:, :, :32], jnp.zeros((2, 2), jnp.int32))
    s = np.asarray(pixels.draw_shifts(jax.random.PRNGKey(0), (500,)))
    assert s.shape == (500, 2) and s.min() == 0 and s.max() == 6


# ------------------------------------------------------------------------------ the encoder
def test_conv_encoder_shapes_init_and_flatten_order(wm, params):
    enc = params["encoder"]
    assert {k: enc[k]["kernel"].shape for k in enc} == {
        "Conv_0": (7, 7, 9, 32), "Conv_1": (5, 5, 32, 32), "Conv_2": (3, 3, 32, 32), "Conv_3": (3, 3, 32, 32)}
    assert conv_out_side(64) == 4
    # PyTorch's default init: weight and bias uniform(+-1/sqrt(fan_in)) (spec §3.7)
    for k, fan in (("Conv_0", 9 * 49), ("Conv_1", 32 * 25), ("Conv_3", 32 * 9)):
        b = 1 / np.sqrt(fan)
        w = np.asarray(enc[k]["kernel"])
        assert np.abs(w).max() <= b and np.abs(w).max() > 0.9 * b and abs(w.std() - b / np.sqrt(3)) < 0.1 * b
        assert np.abs(np.asarray(enc[k]["bias"])).max() <= b
    # SimNorm groups of 8 on the flat trunk output (the flatten order is pinned against the
    # official model in test_official.py / test_parity.py)
    x = jax.random.uniform(jax.random.PRNGKey(1), (2, 9, 64, 64), jnp.float32, 0, 255)
    z = ConvEncoder(32).apply({"params": enc}, x)
    assert z.shape == (2, 512)
    np.testing.assert_allclose(np.asarray(z.reshape(2, 64, 8).sum(-1)), 1.0, rtol=1e-5)


def test_encode_key_contract(wm, params):
    obs = _images(1, (3, 2))
    with pytest.raises(ValueError, match="need `key`"):
        wm.encode(params, obs)
    with pytest.raises(ValueError, match=r"shifts must be int \[..., 2\]"):
        wm.encode(params, obs, shifts=jnp.zeros((2, 2), jnp.int32))
    with pytest.raises(ValueError, match="last axis 100"):
        wm.encode(params, obs[..., :100], key=jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(5)
    z = wm.encode(params, obs, key=key)
    assert z.shape == (3, 2, 512) and z.dtype == jnp.float32
    # the key draws one shift per image: the same numbers as those shifts injected
    shifts = pixels.draw_shifts(key, (3, 2))
    np.testing.assert_array_equal(np.asarray(z), np.asarray(wm.encode(params, obs, shifts=shifts)))
    # a time axis encodes image by image (the official stacks per-step encodings)
    np.testing.assert_allclose(np.asarray(z[1]), np.asarray(wm.encode(params, obs[1], shifts=shifts[1])),
                               rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------------ update, planner
def test_update_and_plan_rgb(wm, params):
    """One rgb update and one plan run; injected shifts decide the encoding (the update's
    ShiftAug keys are derived from its key, so the same key gives the same update)."""
    state = U.init_agent_state(wm, jax.random.PRNGKey(0))
    obs = _images(2, (3, 2))
    batch = U.Batch(obs, jnp.zeros((2, 2, ACT)), jnp.ones((2, 2)), jnp.zeros((2, 2)))
    key = jax.random.PRNGKey(3)
    k_aug_next, k_aug0 = jax.random.split(pixels.aug_key(key))
    draws_ref = U.UpdateDraws(None, None, None, None, pixels.draw_shifts(k_aug_next, (2, 2)),
                              pixels.draw_shifts(k_aug0, (2,)))
    # the policy noise and pairs from the key; only the shifts injected
    f = jax.jit(U.update, static_argnums=0)
    s1, m1 = f(wm, state, batch, 0.9, key)
    s2, m2 = f(wm, state, batch, 0.9, key, None, draws_ref)
    for k in m1:
        assert np.isfinite(float(m1[k])), k
        assert float(m1[k]) == float(m2[k]), k
    assert float(m1["consistency_loss"]) > 0
    zero = U.UpdateDraws(None, None, None, None, jnp.zeros((2, 2, 2), jnp.int32), jnp.zeros((2, 2), jnp.int32))
    _, m3 = f(wm, state, batch, 0.9, key, None, zero)
    assert float(m3["consistency_loss"]) != float(m1["consistency_loss"])  # the injected shifts are used
    a, mean = jax.jit(P.plan, static_argnums=(0, 5))(wm, s1.params, obs[0, 0], jnp.zeros((2, ACT)), True, True,
                                                    0.9, jax.random.PRNGKey(4))
    assert a.shape == (ACT,) and mean.shape == (2, ACT) and bool(jnp.all(jnp.abs(a) <= 1))


def test_flops_count_the_conv_trunk(wm):
    c = 2 * (29 * 29 * 32 * 9 * 49 + 13 * 13 * 32 * 32 * 25 + 6 * 6 * 32 * 32 * 9 + 4 * 4 * 32 * 32 * 9)
    assert flops.conv_flops(9, 32) == c
    assert flops.module_flops(wm.cfg, OBS, ACT)["encoder"] == c
    state_cfg = dataclasses.replace(wm.cfg, obs="state")
    assert flops.module_flops(state_cfg, 24, ACT)["encoder"] == 2 * (24 * 32 + 32 * 512)
