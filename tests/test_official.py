"""The official-weights converter (tdmpc2core.model.official; tdmpc2core.io.official for the
.pt files): both Q-ensemble layouts, every model size, single-task, multi-task and episodic,
bit-exact round trips, clear errors.

The nested layout is checked against ``tests/fixtures/parity_layouts.npz``: state dicts that
the later official code (e9f5932, tensordict 0.8.3 as it pins) wrote after converting the
5f6fade weights of ``parity_single.npz`` / ``parity_multitask.npz`` with its own
``api_model_conversion``. Tests that read or write ``.pt`` files need PyTorch and are
skipped, with the reason, where it is missing (``pip install -e '.[official]'``).
"""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import jax
import numpy as np
import pytest

from tdmpc2core.io.official import load_official, save_official
from tdmpc2core.model import official as O
from tdmpc2core.model.config import MODEL_SIZES, TDMPC2Config, resolve_config
from tdmpc2core.model.networks import count_params
from tdmpc2core.model.world_model import WorldModel

FIX = Path(__file__).parent / "fixtures"
TINY = dict(model_size=1, enc_dim=12, mlp_dim=16, latent_dim=16, num_enc_layers=3, num_q=3)


def make_wm(obs=5, act=2, task_dim=0, num_tasks=0, **kw):
    cfg = resolve_config(TDMPC2Config(**dict(TINY, **kw)), episode_length=100, action_dim=act)
    return WorldModel(cfg, obs, act, task_dim, num_tasks)


def init_np(wm, seed=0):
    """Random float32 parameters in the world model's tree (shapes by tracing only: no compile)."""
    rng = np.random.default_rng(seed)
    shapes = jax.eval_shape(wm.init, jax.random.PRNGKey(0))
    return jax.tree_util.tree_map(lambda s: rng.standard_normal(s.shape).astype(np.float32), shapes)


def same(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return (jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b) and
            all(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes() for x, y in zip(la, lb)))


def load_npz(name):
    d = np.load(FIX / f"parity_{name}.npz")
    return {k: d[k] for k in d.files if k != "meta"}, json.loads(str(d["meta"]))


VARIANTS = {"single": dict(), "episodic": dict(episodic=True), "multi": dict(task_dim=4, num_tasks=2)}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("layout", O.LAYOUTS)
def test_round_trip_ours_official_ours_is_bit_exact(variant, layout):
    kw = dict(VARIANTS[variant])
    wm = make_wm(**kw)
    params = init_np(wm)
    target = jax.tree_util.tree_map(lambda x: (x + np.float32(0.5)).astype(np.float32), params["qs"])
    masks = np.array([[1, 0], [1, 1]], np.float32) if wm.num_tasks else None
    if variant == "episodic" and layout == "flat":
        with pytest.raises(ValueError, match="no termination head"):
            O.to_official(params, target, layout=layout)
        return
    sd = O.to_official(params, target, layout=layout, action_masks=masks)
    assert set(sd) == set(O.expected_shapes(O.OfficialArchitecture.of(wm), layout))
    w = O.from_official(sd, O.OfficialArchitecture.of(wm))
    assert w.layout == layout and w.architecture == O.OfficialArchitecture.of(wm)
    assert same(w.params, params) and same(w.target_qs, target)
    assert O.from_official(sd).architecture == O.OfficialArchitecture.of(wm)  # inferred from the shapes
    # the official names hold the transposed Linear weights, LayerNorm scales as ln.weight
    np.testing.assert_array_equal(sd["_dynamics.0.weight"], params["dynamics"]["NormedLinear_0"]["Dense_0"]["kernel"].T)
    np.testing.assert_array_equal(sd["_reward.0.ln.weight"], params["reward"]["NormedLinear_0"]["LayerNorm_0"]["scale"])
    if layout == "flat":  # 4 i + {weight, bias, ln.weight, ln.bias}; the last Linear at 8, 9
        np.testing.assert_array_equal(sd["_Qs.params.8"], np.swapaxes(params["qs"]["Dense_0"]["kernel"], 1, 2))
        np.testing.assert_array_equal(sd["_Qs.params.6"], params["qs"]["NormedLinear_1"]["LayerNorm_0"]["scale"])
        np.testing.assert_array_equal(sd["_target_Qs.params.9"], target["Dense_0"]["bias"])
    if wm.num_tasks and layout == "nested":
        np.testing.assert_array_equal(w.buffers["_action_masks"], masks)


@pytest.mark.parametrize("size", sorted(MODEL_SIZES))
def test_every_model_size_maps_onto_the_official_shapes(size):
    # mt80 shapes (obs 39, A 6, 80 tasks, task_dim 96): our parameter tree (shapes only)
    # against the official keys; the learnable count is the spec's (§1.2)
    counts = {1: 1.44e6, 5: 5.39e6, 19: 18.97e6, 48: 48.79e6, 317: 317.38e6}
    cfg = resolve_config(TDMPC2Config(model_size=size), episode_length=500, action_dim=6)
    wm = WorldModel(cfg, 39, 6, 96, 80)
    shapes = jax.eval_shape(wm.init, jax.random.PRNGKey(0))
    arch = O.OfficialArchitecture.of(wm)
    assert arch.model_size == size
    want = O.expected_shapes(arch, "flat")
    n = sum(int(np.prod(s)) for k, s in want.items() if not k.startswith("_target_Qs."))
    assert n == count_params(shapes) and abs(n - counts[size]) < 0.006e6
    # the shape of every official key is that of its parameter in our tree (shapes only)
    trees = {"params": shapes, "target_qs": shapes["qs"]}
    for layout in O.LAYOUTS:
        keys = O.key_map(arch, layout)
        tensors = {k for k in O.expected_shapes(arch, layout) if k not in ("log_std_min", "log_std_dif",
                                                                            "_action_masks")}
        assert set(keys) == tensors
        for k, (path, transposed) in keys.items():
            node = trees
            for part in path:
                node = node[part]
            shp = tuple(node.shape)
            assert (shp[:-2] + shp[-2:][::-1] if transposed else shp) == O.expected_shapes(arch, layout)[k], k


def test_the_nested_layout_as_the_later_official_code_writes_it():
    later, meta = load_npz("layouts")
    assert meta["later_commit"].startswith("e9f5932") and meta["tensordict_version"] == "0.8.3"
    for variant, fixture in (("single", "single"), ("multi", "multitask"), ("episodic", "single")):
        sd5 = {k[len("weights/"):]: v for k, v in load_npz(fixture)[0].items() if k.startswith("weights/")}
        sdl = {k[len(variant) + 1:]: v for k, v in later.items() if k.startswith(variant + "/")}
        # the non-tensor entries as torch.load gives them: torch.Size([K]) (a tuple) and None
        for k, (kind, value) in meta["non_tensor_entries"].items():
            if k.startswith(variant + "/"):
                sdl[k[len(variant) + 1:]] = tuple(value) if kind == "Size" else value
        w5, wl = O.from_official(sd5), O.from_official(sdl)
        assert w5.layout == "flat" and wl.layout == "nested"
        assert wl.architecture.episodic == (variant == "episodic")
        if variant != "episodic":
            assert same(wl.params, w5.params) and same(wl.target_qs, w5.target_qs)
        # ours -> nested: exactly the later code's tensors, buffers included
        masks = wl.buffers.get("_action_masks")
        ours = O.to_official(wl.params, wl.target_qs, layout="nested", action_masks=masks)
        tensors = {k: v for k, v in sdl.items() if isinstance(v, np.ndarray)}
        assert set(ours) == set(tensors)
        for k, v in ours.items():
            assert v.dtype == tensors[k].dtype and v.shape == tensors[k].shape and v.tobytes() == tensors[k].tobytes(), k
        if variant == "multi":
            assert masks.tolist() == [[1.0, 0.0], [1.0, 1.0]]


def test_newer_tensordict_module_templates_are_ignored():
    wm = make_wm()
    params = init_np(wm)
    sd = O.to_official(params, layout="nested")
    sd["_Qs.module.0.weight"] = "a data-less template"
    sd["_target_Qs.module.2.bias"] = None
    assert same(O.from_official(sd).params, params)


def _size1_sd():
    cfg = resolve_config(TDMPC2Config(model_size=1), episode_length=500, action_dim=6)
    wm = WorldModel(cfg, 24, 6)
    shapes = jax.eval_shape(wm.init, jax.random.PRNGKey(0))
    return O.to_official(jax.tree_util.tree_map(lambda s: np.zeros(s.shape, np.float32), shapes))


def test_errors_name_the_key_the_expected_shape_and_the_size_that_fits():
    sd = _size1_sd()
    cfg5 = resolve_config(TDMPC2Config(model_size=5), episode_length=500, action_dim=6)
    arch5 = O.OfficialArchitecture.of(WorldModel(cfg5, 24, 6))
    with pytest.raises(O.OfficialWeightsError, match=r"key '_encoder.state.1.weight' has shape \(128, 256\), "
                                                     r"expected \(512, 256\) for model_size 5.*"
                                                     r"this state dict fits model_size 1"):
        O.from_official(sd, arch5)
    bad = dict(sd)
    del bad["_Qs.params.5"]
    with pytest.raises(O.OfficialWeightsError, match=r"missing key '_Qs.params.5' \(expected shape \(2, 384\) "
                                                     r"for model_size 1"):
        O.from_official(bad)
    bad = dict(sd, **{"_foo.weight": np.zeros(3, np.float32)})
    with pytest.raises(O.OfficialWeightsError, match=r"unexpected key '_foo.weight' \(shape \(3,\)\)"):
        O.from_official(bad)
    bad = dict(sd, **{"_pi.1.bias": np.zeros(5, np.float32)})
    with pytest.raises(O.OfficialWeightsError, match=r"key '_pi.1.bias' has shape \(5,\), expected \(384,\) "
                                                     r"for model_size 1.*fits model_size 1"):
        O.from_official(bad)
    bad = dict(sd, **{"_pi.1.bias": np.zeros(384, np.float64)})
    with pytest.raises(O.OfficialWeightsError, match="'_pi.1.bias' has dtype float64"):
        O.from_official(bad)
    bad = dict(sd, **{"_pi.1.bias": np.full(384, np.nan, np.float32)})
    with pytest.raises(O.OfficialWeightsError, match="'_pi.1.bias' holds 384 non-finite value"):
        O.from_official(bad)
    bad = dict(sd, **{"_encoder.rgb.2.weight": np.zeros((32, 9, 7, 7), np.float32)})
    with pytest.raises(O.OfficialWeightsError, match="pixel"):
        O.from_official(bad)


def test_nested_layout_checks_its_twins_and_batch_size():
    wm = make_wm()
    sd = O.to_official(init_np(wm), layout="nested")
    bad = dict(sd)
    bad["_detach_Qs_params.1.bias"] = bad["_detach_Qs_params.1.bias"] + np.float32(1)
    with pytest.raises(O.OfficialWeightsError, match="'_detach_Qs_params.1.bias' differs from '_Qs.params.1.bias'"):
        O.from_official(bad)
    with pytest.raises(O.OfficialWeightsError, match=r"'_target_Qs_params.__batch_size' is \(5,\), expected \(3,\)"):
        O.from_official(dict(sd, **{"_target_Qs_params.__batch_size": (5,)}))
    with pytest.raises(ValueError, match="action_masks"):
        O.to_official(init_np(make_wm(task_dim=4, num_tasks=2)), layout="nested")


def test_agent_state_holds_the_weights_or_names_the_mismatch():
    wm = make_wm()
    w = O.from_official(O.to_official(init_np(wm, 3)))
    st = O.agent_state(wm, w)
    assert same(jax.tree_util.tree_map(np.asarray, st.params), w.params)
    assert float(st.pi_scale) == 1.0 and int(st.updates) == 0
    with pytest.raises(O.OfficialWeightsError, match="do not fit the agent's world model"):
        O.agent_state(make_wm(mlp_dim=32), w)


# ------------------------------------------------------------------ .pt files (PyTorch)
def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed: pip install -e '.[official]' "
                                               "to run the .pt reading/writing tests", exc_type=ImportError)


@pytest.mark.parametrize("layout", O.LAYOUTS)
def test_pt_round_trip_through_torch_save_and_weights_only_load(tmp_path, layout):
    torch = _torch()
    wm = make_wm(task_dim=4, num_tasks=2)
    params = init_np(wm, 1)
    masks = np.array([[1, 0], [1, 1]], np.float32)
    path = tmp_path / "model.pt"
    written = save_official(path, O.to_official(params, layout=layout, action_masks=masks))
    if layout == "nested":
        assert written["_Qs.params.__batch_size"] == torch.Size([3]) and written["_Qs.params.__device"] is None
    raw = torch.load(path, weights_only=True)
    assert set(raw) == {"model"}
    w = O.from_official(load_official(path))
    assert w.layout == layout and same(w.params, params) and same(w.target_qs, params["qs"])


def test_pt_written_as_the_official_save_does_is_read(tmp_path):
    torch = _torch()
    d, _ = load_npz("single")
    sd = {k[len("weights/"):]: torch.from_numpy(v) for k, v in d.items() if k.startswith("weights/")}
    torch.save({"model": sd}, tmp_path / "official.pt")
    got = O.from_official(load_official(tmp_path / "official.pt"))
    assert same(got.params, O.from_official({k: v.numpy() for k, v in sd.items()}).params)
    assert O.from_official({"model": sd}).layout == "flat"  # torch tensors and the wrapper dict accepted


class _Payload:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_pt_with_pickled_code_is_refused(tmp_path):
    torch = _torch()
    path = tmp_path / "evil.pt"
    torch.save({"model": {"x": _Payload()}}, path)
    with pytest.raises(pickle.UnpicklingError):
        load_official(path)
    with pytest.raises(FileNotFoundError, match="no official checkpoint"):
        load_official(tmp_path / "missing.pt")


# ------------------------------------------------------------------ pixel (rgb) encoder
def make_rgb_wm(num_channels=4, **kw):
    cfg = resolve_config(TDMPC2Config(**dict(TINY, latent_dim=16 * num_channels, num_channels=num_channels,
                                             obs="rgb", **kw)), episode_length=100, action_dim=2)
    return WorldModel(cfg, 9 * 64 * 64, 2, obs_shape=(9, 64, 64))


@pytest.mark.parametrize("layout", O.LAYOUTS)
def test_rgb_round_trip_and_the_official_conv_layout(layout):
    wm = make_rgb_wm()
    params = init_np(wm, 5)
    sd = O.to_official(params, layout=layout)
    arch = O.OfficialArchitecture.of(wm)
    assert arch.obs == "rgb" and arch.num_channels == 4 and arch.obs_shape == (9, 64, 64)
    assert set(sd) == set(O.expected_shapes(arch, layout)) and not any(k.startswith("_encoder.state") for k in sd)
    # torch's Conv2d weight [out, in, kh, kw] at the Sequential indices 2, 4, 6, 8 of layers.conv
    assert {k: sd[k].shape for k in sd if k.startswith("_encoder.rgb")} == {
        "_encoder.rgb.2.weight": (4, 9, 7, 7), "_encoder.rgb.2.bias": (4,), "_encoder.rgb.4.weight": (4, 4, 5, 5),
        "_encoder.rgb.4.bias": (4,), "_encoder.rgb.6.weight": (4, 4, 3, 3), "_encoder.rgb.6.bias": (4,),
        "_encoder.rgb.8.weight": (4, 4, 3, 3), "_encoder.rgb.8.bias": (4,)}
    k0 = params["encoder"]["Conv_0"]["kernel"]  # ours: HWIO [kh, kw, in, out]
    assert sd["_encoder.rgb.2.weight"][3, 5, 1, 6] == k0[1, 6, 5, 3]
    w = O.from_official(sd)
    assert w.architecture == arch and same(w.params, params)
    assert "rgb" in arch.describe() and O.OfficialArchitecture.of(
        WorldModel(resolve_config(TDMPC2Config(**arch.config_kwargs()), episode_length=100, action_dim=2),
                   arch.obs_dim, 2, obs_shape=arch.obs_shape)) == arch


def test_rgb_model_sizes_and_refusals():
    # the paper's pixel model: model_size 5 (latent 512) with 32 channels, 9 input channels
    cfg = resolve_config(TDMPC2Config(model_size=5, obs="rgb"), episode_length=500, action_dim=6)
    wm = WorldModel(cfg, 9 * 64 * 64, 6, obs_shape=(9, 64, 64))
    arch = O.OfficialArchitecture.of(wm)
    assert arch.model_size == 5 and arch.num_channels == 32
    want = O.expected_shapes(arch)
    assert want["_encoder.rgb.2.weight"] == (32, 9, 7, 7) and want["_encoder.rgb.8.weight"] == (32, 32, 3, 3)
    n = sum(int(np.prod(s)) for k, s in want.items() if not k.startswith("_target_Qs."))
    assert n == count_params(jax.eval_shape(wm.init, jax.random.PRNGKey(0)))
    sd = {k: np.zeros(s, np.float32) for k, s in want.items()}
    with pytest.raises(O.OfficialWeightsError, match="multi-task pixel models are not supported"):
        O.from_official(dict(sd, **{"_task_emb.weight": np.zeros((2, 4), np.float32)}))
    bad = dict(sd)
    del bad["_encoder.rgb.6.bias"]
    with pytest.raises(O.OfficialWeightsError, match=r"missing key '_encoder.rgb.6.bias' \(expected shape \(32,\)"):
        O.from_official(bad)
    with pytest.raises(O.OfficialWeightsError, match=r"'_encoder.rgb.4.weight' has shape \(32, 32, 3, 3\), "
                                                     r"expected \(32, 32, 5, 5\)"):
        O.from_official(dict(sd, **{"_encoder.rgb.4.weight": np.zeros((32, 32, 3, 3), np.float32)}))


def test_pt_of_the_official_pixel_model_is_read(tmp_path):
    # the official pixel model's weights (tests/fixtures/parity_rgb.npz, recorded from 5f6fade;
    # test_parity.py checks our numbers with them) saved as TDMPC2.save does
    torch = _torch()
    d, meta = load_npz("rgb")
    sd = {k[len("weights/"):]: torch.from_numpy(v) for k, v in d.items() if k.startswith("weights/")}
    torch.save({"model": sd}, tmp_path / "official.pt")
    w = O.from_official(load_official(tmp_path / "official.pt"))
    c = meta["configs"]["rgb"]
    assert (w.architecture.obs, w.architecture.num_channels, w.architecture.obs_shape) == (
        "rgb", c["num_channels"], tuple(c["obs_shape"]["rgb"]))
    back = O.to_official(w.params, w.target_qs)
    assert set(back) == set(sd) and all(back[k].tobytes() == sd[k].numpy().tobytes() for k in sd)
