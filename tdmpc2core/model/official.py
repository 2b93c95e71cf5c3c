"""Weights of the official TD-MPC2 code (nicklashansen/tdmpc2) to and from ``tdmpc2core``.

The official ``TDMPC2.save`` writes ``{"model": WorldModel.state_dict()}`` with
``torch.save``. :func:`from_official` turns such a state dict (single-task or multi-task,
any model size, with or without the episodic termination head) into the parameter tree of
:class:`tdmpc2core.model.world_model.WorldModel` and its target Q ensemble;
:func:`to_official` does the reverse. Both work on plain dicts of numpy arrays (or torch
tensors) keyed by the official names and need no PyTorch; reading and writing the ``.pt``
files is :mod:`tdmpc2core.io.official` (``pip install -e '.[official]'``)::

    from tdmpc2core.io.official import load_official, save_official
    from tdmpc2core.model.official import agent_state, from_official, to_official
    w = from_official(load_official("model.pt"))      # w.params, w.target_qs, w.architecture
    state = agent_state(wm, w)                        # wm: a WorldModel of w.architecture
    save_official("out.pt", to_official(state.params, state.target_qs))

Pure: no I/O (the model layer).

Key layouts (the official module order of spec §3):

* modules: ``_encoder.state.<i>.*`` (state observations) or ``_encoder.rgb.<j>.weight`` /
  ``.bias`` (pixel observations: the conv trunk's four ``Conv2d`` at the ``Sequential``
  indices j = 2, 4, 6, 8, weight [out, in, k, k] (torch's OIHW), bias [out]),
  ``_dynamics.<i>.*``, ``_reward.<i>.*``, ``_pi.<i>.*``,
  ``_termination.<i>.*`` (episodic, eece801 and later), ``_task_emb.weight`` (multi-task),
  where a LayerNorm'd layer ``<i>`` has ``weight`` [out, in], ``bias``, ``ln.weight``,
  ``ln.bias`` and the last plain Linear of reward / pi / Q / termination only ``weight`` and
  ``bias``;
* Q ensemble, layout ``"flat"`` (5f6fade and earlier, functorch's
  ``combine_state_for_ensemble``): ``_Qs.params.<n>`` and ``_target_Qs.params.<n>``, each
  stacked over the K members on axis 0, ``n`` running over the member's parameters in
  module order (``4 i + {0: weight, 1: bias, 2: ln.weight, 3: ln.bias}``);
* Q ensemble, layout ``"nested"`` (the torch.compile refactor of late 2024 and later):
  ``_Qs.params.<i>.<name>``, the same tensors again under ``_detach_Qs_params.<i>.<name>``,
  ``_target_Qs_params.<i>.<name>``, the non-tensor entries ``<prefix>.__batch_size`` and
  ``<prefix>.__device`` of each of the three (as tensordict 0.8.3, the official pin, writes
  them; newer tensordict versions write data-less ``_Qs.module.*``, ``_detach_Qs.module.*``
  and ``_target_Qs.module.*`` templates instead, which are ignored), and the buffers
  ``log_std_min``, ``log_std_dif`` and (multi-task) ``_action_masks``.

Our layout (:mod:`tdmpc2core.model.networks`): ``NormedLinear_<i>`` holds ``Dense_0``
(``kernel`` [in, out] = the official ``weight`` transposed, ``bias``) and ``LayerNorm_0``
(``scale`` = ``ln.weight``, ``bias``); the plain last Linear is ``Dense_0``; ``qs`` and
the target Qs stack the K members on axis 0; ``task_emb`` is the embedding table; the rgb
encoder's ``Conv_0`` .. ``Conv_3`` hold ``kernel`` [k, k, in, out] (flax's HWIO: the official
OIHW weight transposed (2, 3, 1, 0)) and ``bias``. Values are copied bit for bit (float32
only), so ours -> official -> ours is the identity.

Pixel models are single-task only (the official encoder cannot take a task embedding beside
an image); a multi-task state dict with ``_encoder.rgb.*`` is refused.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Mapping, Optional

import numpy as np

from .config import MODEL_SIZES

#: The official commit whose code the parity fixtures were recorded from (spec §0).
REFERENCE_COMMIT = "5f6fadec0fec78304b4b53e8171d348b58cac486"
LAYOUTS = ("flat", "nested")
_LN = ("weight", "bias", "ln.weight", "ln.bias")
_QS_PREFIXES = {"flat": ("_Qs.params", "_target_Qs.params"),
                "nested": ("_Qs.params", "_detach_Qs_params", "_target_Qs_params")}
_NON_TENSOR = ("__batch_size", "__device")
_BUFFERS = ("log_std_min", "log_std_dif", "_action_masks")
_SHADOW = re.compile(r"(_Qs|_detach_Qs|_target_Qs)\.module\.")
#: the official rgb encoder (5f6fade ``layers.conv``): its Conv2d layers' (Sequential index,
#: kernel size); index 0 is ShiftAug, 1 the pixel preprocessing, the odd ones ReLU
RGB_CONV_LAYERS = ((2, 7), (4, 5), (6, 3), (8, 3))
#: the image side the official conv encoder asserts (spec §2 "Pixels")
RGB_SIDE = 64


class OfficialWeightsError(ValueError):
    """A state dict that does not fit the expected architecture (names the key)."""


@dataclasses.dataclass(frozen=True)
class OfficialArchitecture:
    """The widths an official state dict implies (spec §1.2, §3.2).

    ``obs_dim`` and ``action_dim`` are the (padded, multi-task) input sizes; ``task_dim``
    and ``num_tasks`` are 0 for a single-task model; ``num_enc_layers`` counts the
    encoder's Linear layers (the official ``max(num_enc_layers - 1, 1)`` hidden layers plus
    the output layer, so 1 and 2 build the same encoder).

    ``obs`` "rgb" (spec §3.2 rgb row): the conv encoder of ``num_channels`` channels on
    ``in_channels`` x 64 x 64 images (``obs_dim`` = in_channels * 4096, the flat length);
    ``enc_dim`` and ``num_enc_layers`` are 0 (an rgb model has no MLP encoder). ``obs``
    "state": ``num_channels`` is 0.
    """

    obs_dim: int
    action_dim: int
    latent_dim: int
    enc_dim: int
    mlp_dim: int
    num_enc_layers: int
    num_q: int
    num_bins: int
    task_dim: int = 0
    num_tasks: int = 0
    episodic: bool = False
    obs: str = "state"
    num_channels: int = 0

    @property
    def rgb(self) -> bool:
        return self.obs == "rgb"

    @property
    def obs_shape(self) -> Optional[tuple]:
        """(in_channels, 64, 64) for an rgb model, None for a state one."""
        return (self.obs_dim // (RGB_SIDE * RGB_SIDE), RGB_SIDE, RGB_SIDE) if self.rgb else None

    @property
    def model_size(self) -> Optional[int]:
        """The preset of :data:`tdmpc2core.MODEL_SIZES` with these widths, or None (an rgb
        model: the preset whose mlp_dim, latent_dim and num_q these are; its encoder widths do
        not apply)."""
        skip = ("enc_dim", "num_enc_layers") if self.rgb else ()
        for size, preset in MODEL_SIZES.items():
            if all(getattr(self, k) == v for k, v in preset.items() if k not in skip):
                return size
        return None

    def describe(self) -> str:
        size = self.model_size
        head = f"model_size {size}" if size is not None else "no model_size preset"
        keys = ("num_channels", "mlp_dim", "latent_dim", "num_q") if self.rgb else (
            "enc_dim", "mlp_dim", "latent_dim", "num_enc_layers", "num_q")
        widths = ", ".join(f"{k}={getattr(self, k)}" for k in keys)
        obs = f"rgb obs_shape={self.obs_shape}" if self.rgb else f"obs_dim={self.obs_dim}"
        rest = f"{obs}, action_dim={self.action_dim}, num_bins={self.num_bins}"
        if self.num_tasks:
            rest += f", task_dim={self.task_dim}, num_tasks={self.num_tasks}"
        if self.episodic:
            rest += ", episodic"
        return f"{head} ({widths}; {rest})"

    def config_kwargs(self) -> dict:
        """Keyword arguments of :class:`~tdmpc2core.TDMPC2Config` for these widths
        (``model_size`` the matching preset, else 5 with every width explicit; an rgb model:
        ``obs="rgb"`` and ``num_channels``, the encoder widths left to the preset, unused)."""
        size = self.model_size
        kw = dict(model_size=size if size is not None else 5, enc_dim=self.enc_dim, mlp_dim=self.mlp_dim,
                  latent_dim=self.latent_dim, num_enc_layers=self.num_enc_layers, num_q=self.num_q,
                  num_bins=self.num_bins, episodic=self.episodic)
        if self.rgb:
            del kw["enc_dim"], kw["num_enc_layers"]
            kw.update(obs="rgb", num_channels=self.num_channels)
        return kw

    @classmethod
    def of(cls, wm) -> "OfficialArchitecture":
        """The architecture of a :class:`~tdmpc2core.model.world_model.WorldModel`."""
        c = wm.cfg
        rgb = getattr(c, "obs", "state") == "rgb"
        return cls(obs_dim=int(wm.obs_dim), action_dim=int(wm.action_dim), latent_dim=int(c.latent_dim),
                   enc_dim=0 if rgb else int(c.enc_dim), mlp_dim=int(c.mlp_dim),
                   num_enc_layers=0 if rgb else max(int(c.num_enc_layers), 2),
                   num_q=int(c.num_q), num_bins=int(c.num_bins), task_dim=int(wm.task_dim) if wm.num_tasks else 0,
                   num_tasks=int(wm.num_tasks), episodic=bool(c.episodic), obs="rgb" if rgb else "state",
                   num_channels=int(c.num_channels) if rgb else 0)


@dataclasses.dataclass(frozen=True)
class OfficialWeights:
    """What :func:`from_official` returns.

    params: our parameter tree (numpy float32 arrays; ``qs`` stacked over K on axis 0);
    target_qs: the target Q ensemble, the same structure as ``params['qs']``;
    architecture: the widths the state dict implies; layout: ``"flat"`` or ``"nested"``;
    buffers: the nested layout's ``log_std_min``, ``log_std_dif`` and ``_action_masks``
    (numpy arrays) where present, else empty.
    """

    params: dict
    target_qs: dict
    architecture: OfficialArchitecture
    layout: str
    buffers: dict


# ------------------------------------------------------------------------ layouts
def _mlp_layers(n_hidden: int, plain_out: bool):
    """[(official layer index, our module name, has LayerNorm)] of an official mlp."""
    layers = [(i, f"NormedLinear_{i}", True) for i in range(n_hidden)]
    layers.append((n_hidden, "Dense_0", False) if plain_out else (n_hidden, f"NormedLinear_{n_hidden}", True))
    return layers


def _layer_shapes(din: int, dout: int, ln: bool):
    shapes = {"weight": (dout, din), "bias": (dout,)}
    if ln:
        shapes.update({"ln.weight": (dout,), "ln.bias": (dout,)})
    return shapes


def _modules(a: OfficialArchitecture):
    """{official prefix: (our name, [(layer index, our module, has LN, in, out)])}."""
    enc_hidden = max(a.num_enc_layers - 1, 1)
    td = a.task_dim if a.num_tasks else 0
    za = a.latent_dim + td + a.action_dim
    z = a.latent_dim + td

    def spec(din, hidden, dout, n_hidden, plain):
        dims = [din] + [hidden] * n_hidden + [dout]
        return [(i, name, ln, dims[i], dims[i + 1]) for (i, name, ln) in _mlp_layers(n_hidden, plain)]

    mods = {} if a.rgb else {
        "_encoder.state": ("encoder", spec(a.obs_dim + td, a.enc_dim, a.latent_dim, enc_hidden, False))}
    mods.update({
        "_dynamics": ("dynamics", spec(za, a.mlp_dim, a.latent_dim, 2, False)),
        "_reward": ("reward", spec(za, a.mlp_dim, a.num_bins, 2, True)),
        "_pi": ("pi", spec(z, a.mlp_dim, 2 * a.action_dim, 2, True)),
    })
    if a.episodic:
        mods["_termination"] = ("termination", spec(z, a.mlp_dim, 1, 2, True))
    q = spec(za, a.mlp_dim, a.num_bins, 2, True)
    return mods, q


def _rgb_layers(a: OfficialArchitecture):
    """[(official Sequential index, our module name, official OIHW weight shape)] of the rgb
    encoder's convolutions."""
    cin = a.obs_dim // (RGB_SIDE * RGB_SIDE)
    out = []
    for n, (j, k) in enumerate(RGB_CONV_LAYERS):
        out.append((j, f"Conv_{n}", (a.num_channels, cin if n == 0 else a.num_channels, k, k)))
    return out


def _flat_q_names(q_layers):
    """Official flat Q index n -> (layer index, parameter name), in module order."""
    out, n = {}, 0
    for (i, _, ln, _, _) in q_layers:
        for name in (_LN if ln else _LN[:2]):
            out[n] = (i, name)
            n += 1
    return out


def expected_shapes(arch: OfficialArchitecture, layout: str = "flat") -> dict:
    """{official key: shape} of every tensor a state dict of ``arch`` holds in ``layout``.

    The nested layout's non-tensor entries (``*.__batch_size``, ``*.__device``) are not
    listed; its buffers are (``log_std_min``, ``log_std_dif`` as shape (), and
    ``_action_masks`` [num_tasks, action_dim] for multi-task).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}; accepted: {list(LAYOUTS)}")
    mods, q = _modules(arch)
    shapes = {}
    if arch.rgb:
        for j, _, w in _rgb_layers(arch):
            shapes[f"_encoder.rgb.{j}.weight"] = w
            shapes[f"_encoder.rgb.{j}.bias"] = w[:1]
    for prefix, (_, layers) in mods.items():
        for (i, _, ln, din, dout) in layers:
            for name, shp in _layer_shapes(din, dout, ln).items():
                shapes[f"{prefix}.{i}.{name}"] = shp
    if arch.num_tasks:
        shapes["_task_emb.weight"] = (arch.num_tasks, arch.task_dim)
    K = arch.num_q
    if layout == "flat":
        for n, (i, name) in _flat_q_names(q).items():
            shp = (K,) + _layer_shapes(q[i][3], q[i][4], q[i][2])[name]
            for prefix in _QS_PREFIXES["flat"]:
                shapes[f"{prefix}.{n}"] = shp
    else:
        for (i, _, ln, din, dout) in q:
            for name, shp in _layer_shapes(din, dout, ln).items():
                for prefix in _QS_PREFIXES["nested"]:
                    shapes[f"{prefix}.{i}.{name}"] = (K,) + shp
        shapes["log_std_min"] = ()
        shapes["log_std_dif"] = ()
        if arch.num_tasks:
            shapes["_action_masks"] = (arch.num_tasks, arch.action_dim)
    return shapes


def key_map(arch: OfficialArchitecture, layout: str = "flat") -> dict:
    """{official tensor key: (path, transposed)}: where each weight of ``layout`` lives in
    our trees. ``path`` starts with ``"params"`` or ``"target_qs"`` and continues with the
    keys of that tree (e.g. ``("params", "qs", "NormedLinear_0", "Dense_0", "kernel")``);
    ``transposed``: True: the official array is ours with its last two axes swapped (Linear
    weights); ``"oihw"``: the official array is our HWIO conv kernel [k, k, in, out]
    transposed (3, 2, 0, 1) to torch's [out, in, k, k] (rgb encoder weights, :data:`CONV_TO_OIHW`);
    False: the same array. The nested layout's ``_detach_Qs_params.*`` map to the online Qs
    again; its buffers are not weights and are not listed.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}; accepted: {list(LAYOUTS)}")
    mods, q = _modules(arch)
    out = {}

    def layer(prefix, root, i, name, ln):
        base = root + ((name, "Dense_0") if ln else (name,))
        out[f"{prefix}.{i}.weight"] = (base + ("kernel",), True)
        out[f"{prefix}.{i}.bias"] = (base + ("bias",), False)
        if ln:
            out[f"{prefix}.{i}.ln.weight"] = (root + (name, "LayerNorm_0", "scale"), False)
            out[f"{prefix}.{i}.ln.bias"] = (root + (name, "LayerNorm_0", "bias"), False)

    if arch.rgb:
        for j, name, _ in _rgb_layers(arch):
            out[f"_encoder.rgb.{j}.weight"] = (("params", "encoder", name, "kernel"), "oihw")
            out[f"_encoder.rgb.{j}.bias"] = (("params", "encoder", name, "bias"), False)
    for prefix, (ours, layers) in mods.items():
        for (i, name, ln, _, _) in layers:
            layer(prefix, ("params", ours), i, name, ln)
    if arch.num_tasks:
        out["_task_emb.weight"] = (("params", "task_emb"), False)
    roots = {"_Qs.params": ("params", "qs"), "_detach_Qs_params": ("params", "qs"),
             "_target_Qs_params": ("target_qs",), "_target_Qs.params": ("target_qs",)}
    for prefix in _QS_PREFIXES[layout]:
        if layout == "flat":
            for (i, name, ln, _, _) in q:
                layer("tmp", roots[prefix], i, name, ln)
            for n, (i, pname) in _flat_q_names(q).items():
                out[f"{prefix}.{n}"] = out.pop(f"tmp.{i}.{pname}")
        else:
            for (i, name, ln, _, _) in q:
                layer(prefix, roots[prefix], i, name, ln)
    return out


#: the axes permutation from our HWIO conv kernel to torch's OIHW weight, and back
CONV_TO_OIHW = (3, 2, 0, 1)
CONV_FROM_OIHW = (2, 3, 1, 0)


def _official_from_ours(a, transform):
    if transform == "oihw":
        return np.transpose(a, CONV_TO_OIHW)
    return np.swapaxes(a, -1, -2) if transform else a


def _ours_from_official(a, transform):
    if transform == "oihw":
        return np.transpose(a, CONV_FROM_OIHW)
    return np.swapaxes(a, -1, -2) if transform else a


# ------------------------------------------------------------------------ reading
def _to_numpy(v):
    if hasattr(v, "detach") and hasattr(v, "numpy"):  # a torch tensor (torch imported by its owner)
        if getattr(v, "is_meta", False):  # a data-less template tensor (newer tensordict)
            return v
        return v.detach().cpu().numpy()
    return v


def _is_array(v) -> bool:
    return isinstance(v, np.ndarray) or (hasattr(v, "shape") and hasattr(v, "dtype"))


def detect_layout(state_dict: Mapping) -> str:
    """``"nested"`` if any key starts with ``_detach_Qs_params.`` / ``_target_Qs_params.`` or
    looks like ``_Qs.params.<i>.<name>``; ``"flat"`` otherwise."""
    for k in state_dict:
        if k.startswith(("_detach_Qs_params.", "_target_Qs_params.")) or re.match(r"_Qs\.params\.\d+\.", k):
            return "nested"
    return "flat"


def infer_architecture(state_dict: Mapping) -> OfficialArchitecture:
    """The widths implied by an official state dict (from the shapes of a few keys).

    A pixel model (``_encoder.rgb.*`` keys) has ``obs="rgb"``, ``num_channels`` and the
    input channels from ``_encoder.rgb.2.weight`` [out, in, 7, 7] and ``obs_dim`` = in * 64 * 64.

    Raises:
      OfficialWeightsError: a key the inference needs is missing (named); a pixel encoder
        beside a task embedding (multi-task rgb: not supported, as the official encoder
        cannot take the embedding beside an image) or beside ``_encoder.state.*``.
    """
    sd = state_dict
    rgb = any(k.startswith("_encoder.rgb.") for k in sd)
    if rgb and "_task_emb.weight" in sd:
        raise OfficialWeightsError("this state dict has a pixel ('rgb') encoder (_encoder.rgb.*) and a task "
                                   "embedding (_task_emb.weight): multi-task pixel models are not supported (the "
                                   "official encoder concatenates the embedding to the observation, which an image "
                                   "cannot take)")
    if rgb and any(k.startswith("_encoder.state.") for k in sd):
        raise OfficialWeightsError("this state dict has both a pixel encoder (_encoder.rgb.*) and a state encoder "
                                   "(_encoder.state.*); tdmpc2core models have one observation kind")

    def shape(key):
        if key not in sd:
            raise OfficialWeightsError(f"missing key {key!r}: cannot infer the architecture (an official "
                                       f"TD-MPC2 state dict with state observations has it)")
        return tuple(np.shape(sd[key]))

    def vote(*cands):
        """The most common of the values that the keys present give (robust to one bad key)."""
        vals = [c() for c in cands if _present(c)]
        if not vals:
            cands[0]()  # raises, naming the first key
        return max(set(vals), key=vals.count)

    task_dim, num_tasks = 0, 0
    if "_task_emb.weight" in sd:
        num_tasks, task_dim = shape("_task_emb.weight")
    layout = detect_layout(sd)
    q = (lambda i, j: lambda: shape(f"_Qs.params.{4 * i}")[1 + j]) if layout == "flat" else \
        (lambda i, j: lambda: shape(f"_Qs.params.{i}.weight")[1 + j])
    if rgb:
        conv0 = shape("_encoder.rgb.2.weight")
        if len(conv0) != 4:
            raise OfficialWeightsError(f"key '_encoder.rgb.2.weight' has shape {conv0}, expected [out, in, 7, 7] "
                                       f"(the first Conv2d of the official rgb encoder)")
        num_channels, enc_in = conv0[0], conv0[1] * RGB_SIDE * RGB_SIDE
        enc_dim, n_enc = 0, 0
        latent = vote(lambda: shape("_dynamics.2.weight")[0], lambda: shape("_pi.0.weight")[1] - task_dim)
    else:
        enc = sorted({int(m.group(1)) for k in sd if (m := re.match(r"_encoder\.state\.(\d+)\.weight$", k))})
        if not enc:
            shape("_encoder.state.0.weight")
        n_enc = enc[-1] + 1
        num_channels = 0
        enc_dim = vote(lambda: shape("_encoder.state.0.weight")[0], lambda: shape("_encoder.state.1.weight")[1])
        enc_in = shape("_encoder.state.0.weight")[1]
        latent = vote(lambda: shape(f"_encoder.state.{n_enc - 1}.weight")[0], lambda: shape("_dynamics.2.weight")[0],
                      lambda: shape("_pi.0.weight")[1] - task_dim)
    mlp_dim = vote(*[(lambda m=m, i=i: shape(f"_{m}.{i}.weight")[0]) for m in ("dynamics", "reward", "pi")
                     for i in (0, 1)], q(0, 0), q(1, 0))
    num_bins = vote(lambda: shape("_reward.2.weight")[0], q(2, 0))
    action_dim = shape("_pi.2.weight")[0] // 2
    num_q = shape("_Qs.params.0" if layout == "flat" else "_Qs.params.0.weight")[0]
    return OfficialArchitecture(obs_dim=enc_in - task_dim, action_dim=action_dim, latent_dim=latent, enc_dim=enc_dim,
                                mlp_dim=mlp_dim, num_enc_layers=max(n_enc, 2) if not rgb else 0, num_q=num_q,
                                num_bins=num_bins, task_dim=task_dim, num_tasks=num_tasks,
                                episodic=any(k.startswith("_termination.") for k in sd),
                                obs="rgb" if rgb else "state", num_channels=num_channels)


def _present(get) -> bool:
    try:
        get()
        return True
    except (OfficialWeightsError, IndexError, ValueError):
        return False


def _fit_hint(sd) -> str:
    try:
        return f"this state dict fits {infer_architecture(sd).describe()}"
    except OfficialWeightsError as e:
        return f"its architecture could not be inferred ({e})"


def from_official(state_dict: Mapping, expected: Optional[OfficialArchitecture] = None) -> OfficialWeights:
    """Our parameters from an official state dict (either Q layout; spec §3).

    Args:
      state_dict: ``{official key: array}`` (numpy arrays or torch tensors), e.g. what
        :func:`tdmpc2core.io.official.load_official` returns, or a checkpoint's ``["model"]``;
        a dict holding a ``"model"`` entry is unwrapped.
      expected: the architecture the weights must have (e.g.
        ``OfficialArchitecture.of(wm)``); None: inferred from the state dict itself.

    Returns:
      :class:`OfficialWeights` (float32 numpy arrays, copied bit for bit).

    Raises:
      OfficialWeightsError: a missing, extra or mis-shaped key, a non-float32 tensor, or one
        holding NaN or inf: the
        message names the key, the expected shape and the model size that the state dict
        fits; a pixel encoder with a task embedding (multi-task rgb); the nested layout's ``_detach_Qs_params`` differing from
        ``_Qs.params`` or a ``__batch_size`` other than [K].
    """
    if "model" in state_dict and isinstance(state_dict["model"], Mapping):
        state_dict = state_dict["model"]
    sd = {k: _to_numpy(v) for k, v in state_dict.items()}
    layout = detect_layout(sd)
    arch = expected if expected is not None else infer_architecture(sd)
    want = expected_shapes(arch, layout)
    what = arch.describe()
    # the nested layout's non-tensor entries, and the stateless module templates that newer
    # tensordict versions also write (``_Qs.module.*``, ``_detach_Qs.module.*``,
    # ``_target_Qs.module.*``: meta tensors, no weights), carry nothing to convert
    tensors = {k: v for k, v in sd.items()
               if not (layout == "nested" and (k.rsplit(".", 1)[-1] in _NON_TENSOR or _SHADOW.match(k)))}
    # the buffers carry no weights: a dict without them (e.g. trimmed by hand) is accepted
    missing = [k for k in want if k not in tensors and k not in _BUFFERS]
    if missing:
        k = missing[0]
        raise OfficialWeightsError(
            f"missing key {k!r} (expected shape {want[k]} for {what}; {len(missing)} missing in all: "
            f"{missing[:6]}{' ...' if len(missing) > 6 else ''}); {_fit_hint(sd)}")
    extra = sorted(k for k in tensors if k not in want)
    if extra:
        k = extra[0]
        raise OfficialWeightsError(
            f"unexpected key {k!r} (shape {tuple(np.shape(sd[k]))}) for {what} in the {layout!r} layout "
            f"({len(extra)} unexpected in all: {extra[:6]}{' ...' if len(extra) > 6 else ''}); {_fit_hint(sd)}")
    for k, shp in want.items():
        if k not in tensors:
            continue
        v = tensors[k]
        if not _is_array(v) or tuple(v.shape) != tuple(shp):
            got = tuple(v.shape) if _is_array(v) else type(v).__name__
            raise OfficialWeightsError(f"key {k!r} has shape {got}, expected {tuple(shp)} for {what}; {_fit_hint(sd)}")
        if np.dtype(v.dtype) != np.float32:
            raise OfficialWeightsError(f"key {k!r} has dtype {v.dtype}; official weights are float32")
        if not np.all(np.isfinite(v)):
            raise OfficialWeightsError(f"key {k!r} holds {int(np.sum(~np.isfinite(v)))} non-finite value(s) "
                                       f"(NaN or inf): a damaged checkpoint or a diverged run; refusing to convert")
    if layout == "nested":
        K = arch.num_q
        for prefix in _QS_PREFIXES["nested"]:
            bs = sd.get(f"{prefix}.__batch_size")
            if bs is not None and tuple(int(x) for x in bs) != (K,):
                raise OfficialWeightsError(f"key '{prefix}.__batch_size' is {tuple(bs)}, expected ({K},) for {what}")
        for k in want:
            if k.startswith("_detach_Qs_params."):
                twin = "_Qs.params." + k[len("_detach_Qs_params."):]
                if not np.array_equal(np.asarray(sd[k]), np.asarray(sd[twin])):
                    raise OfficialWeightsError(f"key {k!r} differs from {twin!r}; they are views of the same "
                                               "parameters in the official code")

    trees = {"params": {}, "target_qs": {}}
    for k, (path, transposed) in key_map(arch, layout).items():
        if k.startswith("_detach_Qs_params."):
            continue  # checked equal to its _Qs.params twin above
        a = np.asarray(tensors[k])
        node = trees
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = np.ascontiguousarray(_ours_from_official(a, transposed)).copy()
    params, target = trees["params"], trees["target_qs"]
    buffers = {k: np.asarray(tensors[k]) for k in ("log_std_min", "log_std_dif", "_action_masks") if k in tensors}
    return OfficialWeights(params=params, target_qs=target, architecture=arch, layout=layout, buffers=buffers)


# ------------------------------------------------------------------------ writing
def architecture_of_params(params: Mapping) -> OfficialArchitecture:
    """The widths of our parameter tree (the inverse of :func:`from_official`'s layout); an
    encoder of ``Conv_*`` layers is the rgb one (``obs="rgb"``).

    Raises:
      ValueError: an rgb encoder beside a task embedding (multi-task pixel models are not
        supported).
    """
    def kernel(tree, name):
        node = tree[name]
        return np.shape(node["Dense_0"]["kernel"] if "Dense_0" in node and "kernel" in node["Dense_0"]
                        else node["kernel"])

    enc = params["encoder"]
    mlp_dim = kernel(params["dynamics"], "NormedLinear_0")[1]
    rgb = "Conv_0" in enc
    if rgb:  # the conv encoder: Conv_0 kernel [7, 7, in, out]; the latent is the dynamics' output
        kh, kw, cin, num_channels = np.shape(enc["Conv_0"]["kernel"])
        enc_in, enc_dim, n_enc = cin * RGB_SIDE * RGB_SIDE, 0, 0
        latent = kernel(params["dynamics"], "NormedLinear_2")[1]
    else:
        n_enc = len([k for k in enc if k.startswith("NormedLinear_")])
        enc_in, enc_dim = kernel(enc, "NormedLinear_0")
        latent = kernel(enc, f"NormedLinear_{n_enc - 1}")[1]
        num_channels = 0
    num_bins = kernel(params["reward"], "Dense_0")[1]
    action_dim = kernel(params["pi"], "Dense_0")[1] // 2
    K = np.shape(params["qs"]["Dense_0"]["kernel"])[0]
    task_dim, num_tasks = 0, 0
    if "task_emb" in params:
        num_tasks, task_dim = np.shape(params["task_emb"])
    if rgb and num_tasks:
        raise ValueError("a pixel (rgb) encoder with a task embedding: multi-task pixel models are not supported")
    return OfficialArchitecture(obs_dim=enc_in - task_dim, action_dim=action_dim, latent_dim=latent, enc_dim=enc_dim,
                                mlp_dim=mlp_dim, num_enc_layers=0 if rgb else max(n_enc, 2), num_q=K,
                                num_bins=num_bins, task_dim=task_dim, num_tasks=num_tasks,
                                episodic="termination" in params, obs="rgb" if rgb else "state",
                                num_channels=int(num_channels))


def to_official(params: Mapping, target_qs: Optional[Mapping] = None, *, layout: str = "flat",
                log_std_min: float = -10.0, log_std_max: float = 2.0,
                action_masks=None) -> dict:
    """An official state dict (``{key: float32 numpy array}``) from our parameters.

    Args:
      params: our parameter tree (:func:`tdmpc2core.model.networks.init_params` layout).
      target_qs: the target Q ensemble (None: a copy of ``params['qs']``, as at init).
      layout: ``"flat"`` (5f6fade, the default) or ``"nested"`` (the later code; adds the
        ``_detach_Qs_params`` copies and the buffers ``log_std_min``, ``log_std_dif`` from
        the two arguments and, multi-task, ``_action_masks``). The nested layout's
        non-tensor entries are added by :func:`tdmpc2core.io.official.save_official` (they
        need torch types).
      action_masks: [num_tasks, action_dim] 0/1, required for a multi-task model in the
        nested layout (row i has ones on task i's first action dims).

    Raises:
      ValueError: an unknown layout; a termination head in the flat layout (5f6fade has
        none); a multi-task model in the nested layout without ``action_masks``; an rgb
        encoder beside a task embedding.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}; accepted: {list(LAYOUTS)}")
    arch = architecture_of_params(params)
    if arch.episodic and layout == "flat":
        raise ValueError("the flat (5f6fade) layout has no termination head: use layout='nested' for an episodic model")
    trees = {"params": params, "target_qs": params["qs"] if target_qs is None else target_qs}
    out = {}
    for k, (path, transposed) in key_map(arch, layout).items():
        node = trees
        for part in path:
            node = node[part]
        a = np.asarray(node, np.float32)
        out[k] = np.ascontiguousarray(_official_from_ours(a, transposed)).copy()
    if layout == "nested":
        out["log_std_min"] = np.asarray(log_std_min, np.float32)
        out["log_std_dif"] = np.asarray(np.float32(log_std_max) - np.float32(log_std_min), np.float32)
        if arch.num_tasks:
            if action_masks is None:
                raise ValueError("a multi-task model in the nested layout needs action_masks [num_tasks, action_dim]")
            m = np.asarray(action_masks, np.float32)
            if m.shape != (arch.num_tasks, arch.action_dim):
                raise ValueError(f"action_masks has shape {m.shape}, expected {(arch.num_tasks, arch.action_dim)}")
            out["_action_masks"] = m.copy()
    return out


def agent_state(wm, weights: OfficialWeights):
    """A fresh :class:`~tdmpc2core.model.update.AgentState` holding converted weights
    (Adam moments zero, running scale 1, no stale gradient, 0 updates), as the official
    agent is right after ``TDMPC2.load``.

    Raises:
      OfficialWeightsError: ``weights`` do not fit ``wm`` (names the first differing key).
    """
    import jax
    import jax.numpy as jnp

    from .update import AgentState, make_optimizers, wm_subtrees

    template = jax.eval_shape(wm.init, jax.random.PRNGKey(0))
    got = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(np.shape(x), jnp.float32), weights.params)
    if jax.tree_util.tree_structure(template) != jax.tree_util.tree_structure(got) or any(
            a.shape != b.shape for a, b in zip(jax.tree_util.tree_leaves(template), jax.tree_util.tree_leaves(got))):
        want = OfficialArchitecture.of(wm)
        raise OfficialWeightsError(f"these weights ({weights.architecture.describe()}) do not fit the agent's "
                                   f"world model ({want.describe()})")
    params = jax.tree_util.tree_map(jnp.asarray, weights.params)
    wm_tx, pi_tx = make_optimizers(wm.cfg, wm.kernels)
    return AgentState(params=params, target_qs=jax.tree_util.tree_map(jnp.asarray, weights.target_qs),
                      wm_opt_state=wm_tx.init(wm_subtrees(params)), pi_opt_state=pi_tx.init(params["pi"]),
                      pi_scale=jnp.ones((), jnp.float32), pi_grad_sq=jnp.zeros((), jnp.float32),
                      updates=jnp.zeros((), jnp.int32))


__all__ = ["REFERENCE_COMMIT", "LAYOUTS", "RGB_CONV_LAYERS", "CONV_TO_OIHW", "CONV_FROM_OIHW", "OfficialArchitecture", "OfficialWeights", "OfficialWeightsError",
           "expected_shapes", "key_map", "detect_layout", "infer_architecture", "from_official",
           "architecture_of_params", "to_official", "agent_state"]
