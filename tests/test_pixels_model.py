"""The pixel model (issue 29; spec §2 "Pixels", §3.2 rgb row, §3.7, §12 item 17): the config
fields, ShiftAug's shifts, the conv encoder, the key contract of ``WorldModel.encode`` and of
the update and planner, and the FLOP count. The numbers against the official code are
tests/test_parity.py's (parity_rgb.npz) and tests/test_official.py's (weights).

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
def state(wm):
    return jax.jit(U.init_agent_state, static_argnums=0)(wm, jax.random.PRNGKey(0))


@pytest.fixture(scope="module")
def params(state):
    return state.params


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
def test_shift_aug_shifts_and_refusals():
    """What a shift means (x then y, replicate padding) and the refusals; ShiftAug against
    the official float32 sample is test_parity.py's (recorded from 5f6fade)."""
    img = jnp.arange(2 * 1 * 64 * 64, dtype=jnp.float32).reshape(2, 1, 64, 64)
    # shift (3, 3) is the identity up to the float32 grid's offsets; (0, 6): 3 left, 3 down
    out = np.asarray(jax.jit(pixels.shift_aug)(img, jnp.array([[3, 3], [0, 6]])))
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

    @jax.jit
    def both(params, obs, key):
        # the key draws one shift per image: the same numbers as those shifts injected; a time
        # axis encodes image by image (the official stacks per-step encodings)
        shifts = pixels.draw_shifts(key, obs.shape[:-1])
        return (wm.encode(params, obs, key=key), wm.encode(params, obs, shifts=shifts),
                wm.encode(params, obs[1], shifts=shifts[1]))

    z, z_inj, z1 = both(params, obs, key)
    assert z.shape == (3, 2, 512) and z.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(z), np.asarray(z_inj))
    np.testing.assert_allclose(np.asarray(z[1]), np.asarray(z1), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------------ update, planner
def test_update_and_plan_rgb(wm, state):
    """The training path: one rgb update, one plan and one policy action (mpc=False) with every
    draw (the ShiftAug shifts included) from their keys, in one program; the update's numbers against the official
    code's with injected shifts are test_parity.py's."""
    obs = _images(2, (3, 2))
    batch = U.Batch(obs, jnp.zeros((2, 2, ACT)), jnp.ones((2, 2)), jnp.zeros((2, 2)))

    @jax.jit
    def step(state, batch, key):
        s1, m = U.update(wm, state, batch, 0.9, key)
        a, mean = P.plan(wm, s1.params, batch.obs[0, 0], jnp.zeros((2, ACT)), True, True, 0.9, key)
        a_pi = P.act_with_policy(wm, s1.params, batch.obs[0, 0], False, key)
        return s1, m, a, mean, a_pi

    s1, m, a, mean, a_pi = step(state, batch, jax.random.PRNGKey(3))
    for k in m:
        assert np.isfinite(float(m[k])), k
    assert float(m["consistency_loss"]) > 0 and int(s1.updates) == 1
    enc0, enc1 = state.params["encoder"]["Conv_0"]["kernel"], s1.params["encoder"]["Conv_0"]["kernel"]
    assert float(jnp.max(jnp.abs(enc1 - enc0))) > 0  # the conv trunk is trained
    assert a.shape == (ACT,) and mean.shape == (2, ACT) and bool(jnp.all(jnp.abs(a) <= 1))
    assert a_pi.shape == (ACT,) and bool(jnp.all(jnp.abs(a_pi) <= 1))


def test_flops_count_the_conv_trunk(wm):
    c = 2 * (29 * 29 * 32 * 9 * 49 + 13 * 13 * 32 * 32 * 25 + 6 * 6 * 32 * 32 * 9 + 4 * 4 * 32 * 32 * 9)
    assert flops.conv_flops(9, 32) == c
    assert flops.module_flops(wm.cfg, OBS, ACT)["encoder"] == c
    state_cfg = dataclasses.replace(wm.cfg, obs="state")
    assert flops.module_flops(state_cfg, 24, ACT)["encoder"] == 2 * (24 * 32 + 32 * 512)


def test_conv_kernels_agree():
    """The CPU kernels' conv (strided slices x one matmul, kernels.conv2d) is the reference
    convolution (lax.conv_general_dilated) to float32 rounding, values and gradients, for the
    encoder's four layer shapes."""
    from tdmpc2core.model import kernels as K

    key = jax.random.PRNGKey(0)
    side, cin = 64, 9
    for k, s in ((7, 2), (5, 2), (3, 2), (3, 1)):
        kx, kw, key = jax.random.split(key, 3)
        x = jax.random.uniform(kx, (2, side, side, cin), minval=-0.5, maxval=0.5)
        w = jax.random.normal(kw, (k, k, cin, 8)) * 0.1
        ref, cpu = (jax.jit(lambda x, w, kern=kern: kern.conv2d(x, w, s)) for kern in (K.choose("reference"),
                                                                                      K.choose("cpu")))
        np.testing.assert_allclose(cpu(x, w), ref(x, w), rtol=1e-5, atol=1e-5)
        gr, gc = (jax.grad(lambda w, f=f: jnp.sum(f(x, w) ** 2))(w) for f in (ref, cpu))
        np.testing.assert_allclose(gc, gr, rtol=1e-4, atol=1e-4)
        side, cin = (side - k) // s + 1, 8
    with pytest.raises(ValueError):
        K.choose("gpu")
