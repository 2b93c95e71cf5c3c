"""Hyperparameters of TD-MPC2, their paper defaults, model-size presets and derived values.

Source: ``docs/spec/tdmpc2.md`` §1 (the official ``config.yaml`` at commit 5f6fade and
``common/__init__.py::MODEL_SIZE``). Every default below is the paper's.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Callable, Iterable, Mapping, Optional, Union

# spec §1.2: preset -> widths (single-task values; latent 768 for size 19 except mt30's 512)
MODEL_SIZES: dict[int, dict[str, int]] = {
    1: dict(enc_dim=256, mlp_dim=384, latent_dim=128, num_enc_layers=2, num_q=2),
    5: dict(enc_dim=256, mlp_dim=512, latent_dim=512, num_enc_layers=2, num_q=5),
    19: dict(enc_dim=1024, mlp_dim=1024, latent_dim=768, num_enc_layers=3, num_q=5),
    48: dict(enc_dim=1792, mlp_dim=1792, latent_dim=768, num_enc_layers=4, num_q=5),
    317: dict(enc_dim=4096, mlp_dim=4096, latent_dim=1376, num_enc_layers=5, num_q=8),
}
WIDTH_KEYS = ("enc_dim", "mlp_dim", "latent_dim", "num_enc_layers", "num_q")
#: the named learning-rate schedules (:func:`learning_rate_schedule`): kind -> (the optax
#: schedule built, its required parameters, its optional ones). The parameters are optax's own.
LR_SCHEDULES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "constant": ("constant_schedule", ("value",), ()),
    "linear": ("linear_schedule", ("init_value", "end_value", "transition_steps"), ("transition_begin",)),
    "cosine": ("cosine_decay_schedule", ("init_value", "decay_steps"), ("alpha", "exponent")),
    "warmup_cosine": ("warmup_cosine_decay_schedule", ("init_value", "peak_value", "warmup_steps", "decay_steps"),
                      ("end_value", "exponent")),
}
# the schedule parameters that count updates (integers >= 0); the others are numbers >= 0
_STEP_PARAMS = ("transition_steps", "transition_begin", "decay_steps", "warmup_steps")
#: the model's kernel choices (docs/fidelity.md "Kernels"): "auto" resolves per backend
KERNELS = ("auto", "cpu", "reference")
#: the Dense layers' matmul precisions (jax.lax.Precision HIGHEST / HIGH / DEFAULT)
MATMUL_PRECISIONS = ("highest", "high", "default")


@dataclasses.dataclass(frozen=True)
class TDMPC2Config:
    """Every hyperparameter of the agent (hashable: used as a static argument of jit).

    Names follow the official config.yaml (``lr`` is ``learning_rate``). Widths left as
    None are filled from the ``model_size`` preset by :func:`resolve_config`.

    ``learning_rate`` is a float, a hashable schedule callable of the update count, or a
    named schedule (a mapping ``{"kind": ..., ...}`` becomes an :class:`LRSchedule` at
    construction); ``weight_decay`` (AdamW's decoupled decay, 0: plain Adam) and
    ``updates_per_step`` (single-task online agent) are additions, not config.yaml
    hyperparameters, whose defaults keep the reference (docs/deviations.md O9, O10).

    Raises:
      ValueError: (at construction) an optimizer setting outside what is accepted
        (:func:`check_optimizer_fields`, :func:`learning_rate_schedule`).
    """

    # architecture (spec §1.1, §1.2, §3)
    model_size: int = 5
    enc_dim: Optional[int] = None
    mlp_dim: Optional[int] = None
    latent_dim: Optional[int] = None
    num_enc_layers: Optional[int] = None
    num_q: Optional[int] = None
    simnorm_dim: int = 8
    num_bins: int = 101
    vmin: float = -10.0
    vmax: float = 10.0
    dropout: float = 0.01
    # training (spec §1.1, §5)
    horizon: int = 3
    batch_size: int = 256
    rho: float = 0.5
    consistency_coef: float = 20.0
    reward_coef: float = 0.1
    value_coef: float = 0.1
    # a float, a schedule Callable[[int], float] of the update count, or a named schedule
    # (LRSchedule, or its mapping {"kind": ..., ...}: learning_rate_schedule)
    learning_rate: Union[float, Callable[[Any], Any], "LRSchedule"] = 3e-4
    enc_lr_scale: float = 0.3
    grad_clip_norm: float = 20.0
    pi_eps: float = 1e-5
    # decoupled weight decay of both Adams (optax.adamw; not a config.yaml hyperparameter, 0 keeps
    # the reference's plain Adam: docs/deviations.md O9)
    weight_decay: float = 0.0
    tau: float = 0.01
    entropy_coef: float = 1e-4
    log_std_min: float = -10.0
    log_std_max: float = 2.0
    buffer_size: int = 1_000_000
    seed_steps: Optional[int] = None
    # updates per agent step after the seed-phase burst, single-task online agent only (not a
    # config.yaml hyperparameter; 1 is the reference's: docs/deviations.md O10)
    updates_per_step: float = 1.0
    gamma: Optional[float] = None
    discount_denom: float = 5.0
    discount_min: float = 0.95
    discount_max: float = 0.995
    # planner (spec §1.1, §6)
    mpc: bool = True
    iterations: int = 6
    num_samples: int = 512
    num_elites: int = 64
    num_pi_trajs: int = 24
    min_std: float = 0.05
    max_std: float = 2.0
    temperature: float = 0.5
    # episodic mode (spec §11; eece801) -- not part of the paper-era agent
    episodic: bool = False
    termination_coef: float = 1.0
    # 5f6fade quirk (spec §5.4): include the previous (clipped) policy gradient in the
    # world-model clip norm. True reproduces 5f6fade; False is eece801+ behaviour.
    stale_pi_grad_in_clip: bool = True
    # how the networks are computed (not a hyperparameter of the paper; docs/fidelity.md
    # "Kernels"): "cpu" the hand-written kernels measured faster on XLA:CPU, "reference" plain
    # flax/JAX, "auto" the CPU kernels on a CPU backend and the reference elsewhere
    kernels: str = "auto"
    # the Dense layers' matmul precision: "highest" full float32 (spec §12.19), "high" or
    # "default" (on GPUs: TF32 / bf16 passes, faster, not float32 accurate)
    matmul_precision: str = "highest"
    # observations (spec §1.1 env, §2 "Pixels", §3.2; added last, the other fields keep their
    # order): "state" (float32 vectors) or "rgb" (flat uint8 64x64 frame stacks through the
    # conv encoder, whose width is num_channels)
    obs: str = "state"
    num_channels: int = 32

    def __post_init__(self):
        # a named schedule's mapping becomes an LRSchedule (hashable: the config is a static
        # argument of jit); the optimizer fields are refused here, at construction
        if isinstance(self.learning_rate, Mapping):
            object.__setattr__(self, "learning_rate", learning_rate_schedule(self.learning_rate))
        check_optimizer_fields(self)
        check_obs_fields(self.obs, self.num_channels)

    # ---- derived helpers (valid after resolve_config) ----
    @property
    def bin_size(self) -> float:
        return (self.vmax - self.vmin) / (self.num_bins - 1)


# ------------------------------------------------------------------ the optimizer's settings
_YAML_HINT = " (YAML reads 3e-4 and 1e5 as strings: write 3.0e-4 and 100000)"


def _is_real(x) -> bool:
    """A real number (Python's or NumPy's), not a bool."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


@dataclasses.dataclass(frozen=True)
class LRSchedule:
    """A named learning-rate schedule (:data:`LR_SCHEDULES`): ``kind`` and its parameters, the
    ``(name, value)`` pairs of optax's schedule of that kind, sorted by name. Build one with
    :func:`learning_rate_schedule`.

    Called with the update count (0 at a run's first update; the Adam state's count, which a
    checkpoint holds), it gives the learning rate of that update: ``optax.<schedule>(**params)``
    (JAX, imported on the first call). Hashable and plain data: :meth:`to_dict` is what
    ``run.json`` records and what the workflow's configuration writes.
    """

    kind: str
    params: tuple = ()

    def to_dict(self) -> dict:
        """``{"kind": kind, **params}``: the mapping :func:`learning_rate_schedule` reads back."""
        return {"kind": self.kind, **dict(self.params)}

    def optax_schedule(self):
        """The optax schedule (a function of the update count) this describes."""
        import optax

        return getattr(optax, LR_SCHEDULES[self.kind][0])(**dict(self.params))

    def __call__(self, count):
        return self.optax_schedule()(count)


def learning_rate_schedule(spec: Mapping) -> LRSchedule:
    """The :class:`LRSchedule` of a mapping ``{"kind": kind, <parameter>: value, ...}`` (a YAML
    ``learning_rate:`` block), checked. Plain Python (the workflow checks at load).

    Kinds (:data:`LR_SCHEDULES`) and their parameters, optax's (``*`` optional):

    * ``constant``: ``value`` (optax.constant_schedule);
    * ``linear``: ``init_value``, ``end_value``, ``transition_steps`` (>= 1),
      ``transition_begin``* (default 0) (optax.linear_schedule);
    * ``cosine``: ``init_value``, ``decay_steps`` (>= 1), ``alpha``* in [0, 1] (default 0),
      ``exponent``* > 0 (default 1) (optax.cosine_decay_schedule);
    * ``warmup_cosine``: ``init_value``, ``peak_value``, ``warmup_steps`` (>= 1),
      ``decay_steps`` (> warmup_steps: the whole schedule's length, warmup included),
      ``end_value``* (default 0), ``exponent``* (optax.warmup_cosine_decay_schedule).

    Learning rates (``value``, ``*_value``) are finite numbers >= 0, the largest > 0; step counts
    are integers >= 0 and count updates (the world model's and the policy's alike). The encoder trains at
    the schedule's value times ``enc_lr_scale``.

    Raises:
      ValueError: (one line, naming the key and what is accepted) a missing or unknown kind,
        an unknown or missing parameter, a value of the wrong type or range.
    """
    if not isinstance(spec, Mapping):
        raise ValueError(f"learning_rate schedule {spec!r} is not a mapping; accepted: "
                         f"{{kind: <one of {sorted(LR_SCHEDULES)}>, <its parameters>}}")
    kind = spec.get("kind")
    if kind not in LR_SCHEDULES:
        raise ValueError(f"learning_rate.kind={kind!r} is not a schedule; accepted: {sorted(LR_SCHEDULES)} "
                         f"(or a plain float)")
    _, required, optional = LR_SCHEDULES[kind]
    params = {k: v for k, v in spec.items() if k != "kind"}
    unknown = sorted(set(params) - set(required) - set(optional), key=str)
    if unknown:
        raise ValueError(f"learning_rate: unknown parameter(s) {unknown} of the {kind!r} schedule; accepted: "
                         f"{list(required)} (required)" + (f", {list(optional)} (optional)" if optional else ""))
    missing = [k for k in required if k not in params]
    if missing:
        raise ValueError(f"learning_rate: the {kind!r} schedule needs {missing}; its parameters: {list(required)} "
                         f"(required)" + (f", {list(optional)} (optional)" if optional else ""))
    for k, v in params.items():
        hint = _YAML_HINT if isinstance(v, str) else ""
        if k in _STEP_PARAMS:
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
                raise ValueError(f"learning_rate.{k}={v!r} is not an update count; accepted: an integer >= 0{hint}")
        elif not _is_real(v) or not math.isfinite(v) or v < 0:
            raise ValueError(f"learning_rate.{k}={v!r} is not accepted; accepted: a finite number >= 0{hint}")
    for k in ("transition_steps", "decay_steps", "warmup_steps"):
        if k in params and params[k] < 1:
            raise ValueError(f"learning_rate.{k}={params[k]!r} must be >= 1 (the {kind!r} schedule's length)")
    if kind == "warmup_cosine" and params["decay_steps"] <= params["warmup_steps"]:
        raise ValueError(f"learning_rate.decay_steps={params['decay_steps']} must exceed warmup_steps="
                         f"{params['warmup_steps']} (decay_steps is the whole schedule, warmup included)")
    if "alpha" in params and params["alpha"] > 1:
        raise ValueError(f"learning_rate.alpha={params['alpha']!r} must be in [0, 1] (the final fraction of "
                         f"init_value)")
    if "exponent" in params and params["exponent"] <= 0:
        raise ValueError(f"learning_rate.exponent={params['exponent']!r} must be > 0")
    rates = {k: v for k, v in params.items() if k == "value" or k.endswith("_value")}
    if max(rates.values()) <= 0:  # as a plain learning_rate of 0 is refused: the model would never learn
        raise ValueError(f"learning_rate: the {kind!r} schedule is 0 throughout ({rates}); accepted: a schedule "
                         f"whose largest rate is > 0")
    # plain Python numbers (a NumPy scalar would not be JSON)
    params = {k: int(v) if k in _STEP_PARAMS else float(v) for k, v in params.items()}
    return LRSchedule(kind, tuple(sorted(params.items())))


def describe_learning_rate(lr):
    """``learning_rate`` as plain data, for ``run.json`` and checkpoint settings: a float as
    itself, a named schedule as its mapping (:meth:`LRSchedule.to_dict`), another callable as
    ``{"kind": "callable", "name": "<module>.<qualname>"}`` (readable, not rebuildable: two
    callables of the same name are recorded, and compared on resume, as equal)."""
    if isinstance(lr, LRSchedule):
        return lr.to_dict()
    if callable(lr):
        fn = getattr(lr, "func", lr)  # a functools.partial: its function's name
        name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
        return {"kind": "callable", "name": f"{getattr(fn, '__module__', None) or '?'}.{name}"}
    return lr


def check_optimizer_fields(cfg) -> None:
    """Refuse a ``learning_rate``, ``weight_decay`` or ``updates_per_step`` the agents cannot
    take, with a one-line ValueError naming the key, the value and what is accepted:
    ``learning_rate`` a finite number > 0, a hashable callable (a schedule of the update count)
    or an :class:`LRSchedule`; ``weight_decay`` a finite number >= 0; ``updates_per_step`` a
    finite number > 0."""
    lr = cfg.learning_rate
    if isinstance(lr, LRSchedule):
        learning_rate_schedule(lr.to_dict())  # one built by hand is checked as well
    elif callable(lr):
        try:
            hash(lr)
        except TypeError:
            raise ValueError(f"learning_rate={lr!r} is a callable that cannot be hashed (the configuration is a "
                             f"static argument of jit); pass a function or functools.partial") from None
    elif not _is_real(lr) or not math.isfinite(lr) or lr <= 0:
        hint = _YAML_HINT if isinstance(lr, str) else ""
        raise ValueError(f"learning_rate={lr!r} is not accepted; accepted: a finite number > 0, a schedule "
                         f"Callable[[int], float] of the update count, or a named schedule {{kind: one of "
                         f"{sorted(LR_SCHEDULES)}, ...}}{hint}")
    wd = cfg.weight_decay
    if not _is_real(wd) or not math.isfinite(wd) or wd < 0:
        raise ValueError(f"weight_decay={wd!r} is not accepted; accepted: a finite number >= 0 (decoupled weight "
                         f"decay of both Adams; 0, the default, is the reference's plain Adam)")
    ups = cfg.updates_per_step
    if not _is_real(ups) or not math.isfinite(ups) or ups <= 0:
        raise ValueError(f"updates_per_step={ups!r} is not accepted; accepted: a finite number > 0 (updates per "
                         f"agent step after the seed-phase burst; 1, the default, is the reference's)")


#: the observation kinds (spec §1.1 ``obs``)
OBS_KINDS = ("state", "rgb")
#: the side of the conv trunk's output for 64x64 images (spec §3.2 rgb row: 32 * 4 * 4 = 512)
RGB_OUT_SIDE = 4


def check_obs_fields(obs, num_channels) -> None:
    """Refuse an ``obs`` outside :data:`OBS_KINDS` or a ``num_channels`` that is not an
    integer >= 1, with a one-line ValueError naming the key, the value and what is accepted."""
    if obs not in OBS_KINDS:
        raise ValueError(f"obs={obs!r} is not an observation kind; accepted: {list(OBS_KINDS)}")
    if isinstance(num_channels, bool) or not isinstance(num_channels, numbers.Integral) or num_channels < 1:
        raise ValueError(f"num_channels={num_channels!r} is not accepted; accepted: an integer >= 1 (the conv "
                         f"encoder's channels, paper default 32)")


def rgb_latent_dim(num_channels: int) -> int:
    """The latent width of the rgb encoder: its conv trunk's flat output, num_channels * 4 * 4
    (512 for the paper's 32 channels), which goes straight to SimNorm (spec §3.2)."""
    return int(num_channels) * RGB_OUT_SIDE * RGB_OUT_SIDE


def updates_per_tick(cfg, n_envs: int) -> int:
    """Updates of a single-task online tick of ``n_envs`` agent steps after the seed-phase burst:
    ``max(1, round(n_envs * updates_per_step))`` (Python's round, halves to even), ``n_envs``
    with the default 1 (spec §8; docs/deviations.md O2, O10)."""
    return max(1, round(int(n_envs) * float(cfg.updates_per_step)))


def check_offline_config(cfg, owner: str = "TDMPC2MultiTask") -> None:
    """Refuse the settings of the online loop in an offline (multi-task) agent, whose
    ``n_timesteps`` counts updates: ``updates_per_step`` other than 1 (ValueError, one line)."""
    if float(cfg.updates_per_step) != 1.0:
        raise ValueError(f"updates_per_step={cfg.updates_per_step!r} applies to the single-task online agent "
                         f"only: {owner} trains offline and counts its updates (n_timesteps); leave it at 1")


#: fields recorded in a configuration's record only when they differ from these defaults (added
#: after runs were recorded: a default run's record, run id and checkpoint settings are unchanged)
_RECORDED_IF_SET = {"weight_decay": 0.0, "updates_per_step": 1.0, "obs": "state", "num_channels": 32}


def config_record(cfg: "TDMPC2Config") -> dict:
    """The configuration as plain JSON data (the agents' ``config``, ``run.json``'s
    ``agent_config``, the checkpoints' settings): every field, ``learning_rate`` as
    :func:`describe_learning_rate` gives it, and ``weight_decay`` / ``updates_per_step`` /
    ``obs`` / ``num_channels`` only when set to other than their defaults (so runs and checkpoints recorded before these
    existed keep their ids and still resume)."""
    d = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if f.name in _RECORDED_IF_SET and v == _RECORDED_IF_SET[f.name]:
            continue
        d[f.name] = describe_learning_rate(v) if f.name == "learning_rate" else v
    return d


def discount_from_episode_length(T: int, denom: float = 5.0, lo: float = 0.95, hi: float = 0.995) -> float:
    """gamma = clip((T/denom - 1) / (T/denom), lo, hi) (spec §1.3); T in agent steps."""
    frac = T / denom
    return float(min(max((frac - 1.0) / frac, lo), hi))


def seed_steps_from_episode_length(T: int) -> int:
    """seed_steps = max(1000, 5 T) agent steps (spec §1.3)."""
    return int(max(1000, 5 * T))


def kernels_for_backend(kernels: str, backend: str) -> str:
    """The concrete kernels ("cpu" or "reference") that ``kernels`` means on a JAX backend
    (``jax.default_backend()``: "cpu", "gpu", "tpu", ...): "auto" is "cpu" on "cpu" and
    "reference" elsewhere; "cpu" and "reference" are themselves.

    Raises:
      ValueError: ``kernels`` not one of :data:`KERNELS`.
    """
    check_kernel_fields(kernels, MATMUL_PRECISIONS[0])
    if kernels != "auto":
        return kernels
    return "cpu" if backend == "cpu" else "reference"


def check_kernel_fields(kernels, matmul_precision) -> None:
    """Refuse a ``kernels`` or ``matmul_precision`` value outside :data:`KERNELS` /
    :data:`MATMUL_PRECISIONS` with a one-line ValueError naming the key, value and choices."""
    if kernels not in KERNELS:
        raise ValueError(f"kernels={kernels!r} is not a kernel choice; accepted: {list(KERNELS)} "
                         f"(auto: cpu on a CPU backend, reference elsewhere)")
    if matmul_precision not in MATMUL_PRECISIONS:
        raise ValueError(f"matmul_precision={matmul_precision!r} is not a precision; accepted: "
                         f"{list(MATMUL_PRECISIONS)} (highest: full float32, the default)")


def resolve_config(cfg: TDMPC2Config, *, episode_length: int, action_dim: int,
                   n_envs: Optional[int] = None, backend: Optional[str] = None) -> TDMPC2Config:
    """Fill preset widths, gamma, seed_steps and the planner iterations (spec §1.2, §1.3).

    Plain Python (no JAX): the workflow runs the same checks when it loads
    (:func:`validate_config`), before any job starts.

    Args:
      cfg: the user's configuration; None widths come from ``MODEL_SIZES[cfg.model_size]``,
        explicit widths override the preset.
      episode_length: T in agent steps.
      action_dim: A; the planner runs ``iterations + 2`` when A >= 20.
      n_envs: environments in lockstep of a single-task online run; given, the first update
        is checked as well (:func:`check_first_update`). None: not an online run (the
        multi-task agent checks its batch against its dataset, :func:`check_batch_size`).
      backend: the JAX backend the model will run on (``jax.default_backend()``); given,
        ``kernels="auto"`` is resolved to the concrete choice (:func:`kernels_for_backend`),
        so a run's recorded configuration says which kernels ran. None: "auto" stays (the
        networks resolve it when they are built).

    Raises:
      ValueError: unknown model_size, obs='rgb' with a latent_dim other than num_channels * 16
        (512 for the default 32 channels), values the architecture cannot take (num_bins < 2, the
        official 0 / 1 regression variants, is refused; vmin >= vmax), or T too short
        for a slice of horizon + 1 rows (T >= H + 1; episodic mode, whose episodes may end
        earlier anyway: T >= H), or (with ``n_envs``) a first update the replay cannot feed or
        ``n_envs x updates_per_step`` not a whole number (:func:`check_updates_per_tick`);
        ``kernels`` or ``matmul_precision`` not one of the accepted values.
    """
    check_kernel_fields(cfg.kernels, cfg.matmul_precision)
    if cfg.model_size not in MODEL_SIZES:
        raise ValueError(f"model_size={cfg.model_size!r} is not a preset; accepted: {sorted(MODEL_SIZES)}")
    check_integer_fields(cfg)
    if isinstance(cfg.num_bins, bool) or not isinstance(cfg.num_bins, int) or cfg.num_bins < 2:
        # the official two_hot / two_hot_inv special-case 0 (plain regression) and 1 (symlog
        # regression): not implemented here (docs/deviations.md F2)
        raise ValueError(f"num_bins={cfg.num_bins!r} is not supported: the two-hot value and reward heads need "
                         f"num_bins >= 2 (paper default 101); the official code's num_bins 0 (plain regression) "
                         f"and 1 (symlog regression) variants are not implemented")
    if not cfg.vmin < cfg.vmax:
        raise ValueError(f"vmin={cfg.vmin!r} must be below vmax={cfg.vmax!r} (the two-hot support, spec §4.2)")
    preset = MODEL_SIZES[cfg.model_size]
    widths = {k: (getattr(cfg, k) if getattr(cfg, k) is not None else preset[k]) for k in WIDTH_KEYS}
    if cfg.obs == "rgb" and widths["latent_dim"] != rgb_latent_dim(cfg.num_channels):
        raise ValueError(f"latent_dim={widths['latent_dim']} (model_size={cfg.model_size}) does not fit obs='rgb': "
                         f"the conv encoder's num_channels * 4 * 4 = {rgb_latent_dim(cfg.num_channels)} outputs go "
                         f"straight to SimNorm (spec §3.2), so latent_dim must be {rgb_latent_dim(cfg.num_channels)} "
                         f"(512 with the default num_channels=32: model_size 1, 19, 48 and 317 need latent_dim=512 "
                         f"set explicitly)")
    if widths["latent_dim"] % cfg.simnorm_dim:
        raise ValueError(f"latent_dim={widths['latent_dim']} must be divisible by simnorm_dim={cfg.simnorm_dim}")
    if widths["num_q"] < 2:
        raise ValueError(f"num_q={widths['num_q']} must be at least 2 (a random pair is drawn, spec §4.6)")
    if cfg.mpc and cfg.iterations < 1:
        raise ValueError(f"iterations={cfg.iterations} must be >= 1 (MPPI refits its mean at least once, "
                         f"spec §6.4; the paper's 6); mpc=False acts with the policy alone")
    if not 0.0 <= cfg.dropout < 1.0:
        raise ValueError(f"dropout={cfg.dropout!r} must be in [0, 1) (the Q heads' dropout rate, spec §3.3)")
    if cfg.num_elites < 1:
        raise ValueError(f"num_elites={cfg.num_elites} must be >= 1 (the MPPI refit weights its top-k "
                         f"sequences, spec §6.4c; the paper's 64)")
    if cfg.num_pi_trajs < 0:
        raise ValueError(f"num_pi_trajs={cfg.num_pi_trajs} must be >= 0")
    if cfg.num_elites > cfg.num_samples:
        raise ValueError(f"num_elites={cfg.num_elites} exceeds num_samples={cfg.num_samples}")
    if cfg.num_pi_trajs >= cfg.num_samples:
        raise ValueError(f"num_pi_trajs={cfg.num_pi_trajs} must be below num_samples={cfg.num_samples}")
    if cfg.horizon < 1:
        raise ValueError(f"horizon={cfg.horizon} must be >= 1")
    if cfg.batch_size < 1:
        raise ValueError(f"batch_size={cfg.batch_size} must be >= 1")
    if episode_length < cfg.horizon + 1 and not cfg.episodic:
        raise ValueError(f"episode length T={episode_length} agent steps is shorter than horizon + 1 = {cfg.horizon + 1}")
    if episode_length < cfg.horizon:
        # an episode has at most T + 1 rows; a training slice needs H + 1 of them (spec §9)
        raise ValueError(f"episode length T={episode_length} agent steps is shorter than horizon = {cfg.horizon}: "
                         f"no episode (at most T + 1 rows) could give a slice of horizon + 1 rows")
    gamma = cfg.gamma if cfg.gamma is not None else discount_from_episode_length(
        episode_length, cfg.discount_denom, cfg.discount_min, cfg.discount_max)
    seed_steps = cfg.seed_steps if cfg.seed_steps is not None else seed_steps_from_episode_length(episode_length)
    iterations = cfg.iterations + (2 if action_dim >= 20 else 0)
    kernels = cfg.kernels if backend is None else kernels_for_backend(cfg.kernels, backend)
    out = dataclasses.replace(cfg, **widths, gamma=float(gamma), seed_steps=int(seed_steps), iterations=iterations,
                              kernels=kernels)
    if n_envs is not None:
        check_updates_per_tick(out, n_envs)
        check_first_update(out, episode_length=episode_length, n_envs=n_envs)
    return out


def check_updates_per_tick(cfg, n_envs: int) -> int:
    """The updates of a tick of ``n_envs`` agent steps, ``n_envs x updates_per_step``, when it is
    a whole number (within 1e-9); raises ValueError (one line: the product, the nearest whole
    numbers and the settings that give them) otherwise: it would be rounded without a word
    (0.5 with one env gave one update per agent step)."""
    ups, n = float(cfg.updates_per_step), int(n_envs)
    x = n * ups
    if abs(x - round(x)) > 1e-9 or round(x) < 1:
        lo, hi = max(1, math.floor(x)), max(1, math.ceil(x))
        raise ValueError(
            f"updates_per_step={cfg.updates_per_step!r} with n_envs={n} asks for {x:g} updates per tick (a tick is "
            f"one agent step of each of the n_envs environments), not a whole number; accepted: a value whose "
            f"product with n_envs is a whole number >= 1, e.g. updates_per_step="
            + (f"{lo / n:g}" if lo == hi else f"{lo / n:g} or {hi / n:g}")
            + (f", or n_envs={round(1 / ups)} for {ups:g}" if ups < 1 and abs(1 / ups - round(1 / ups)) < 1e-9 else ""))
    return int(round(x))


def check_integer_fields(cfg: TDMPC2Config) -> None:
    """Every count of the configuration (the fields typed ``int``, or ``Optional[int]`` when
    set: horizon, batch_size, num_samples, widths, ...) is an integer (a Python or NumPy int,
    not a bool): a float such as horizon=2.5 would otherwise pass the range checks and fail
    later as an array shape.

    Raises:
      ValueError: naming the field and its value."""
    for f in dataclasses.fields(cfg):
        if f.name == "num_bins" or f.type not in ("int", "Optional[int]"):
            continue  # num_bins: its own message (resolve_config)
        v = getattr(cfg, f.name)
        if v is None and f.type == "Optional[int]":
            continue
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ValueError(f"{f.name}={v!r} must be an integer")


def validate_config(cfg: TDMPC2Config, *, episode_length: int, n_envs: int = 1) -> TDMPC2Config:
    """Every check :func:`resolve_config` makes for a single-task run of ``n_envs``
    environments with episodes of T = ``episode_length`` agent steps, where the action
    dimension is not known (it changes only the planner's iterations, which nothing checks).

    Plain Python: ``snakemake -n`` runs it for every task when the workflow loads, so a
    value the job would refuse is refused before any job starts, by the same code.

    Returns:
      the resolved configuration (iterations as given).

    Raises:
      ValueError: as :func:`resolve_config` with ``n_envs``.
    """
    return resolve_config(cfg, episode_length=episode_length, action_dim=0, n_envs=n_envs)


# ---------------------------------------------------------------- the data a batch is drawn from
# A training slice is H + 1 consecutive rows of one complete episode, the sampler's unit (spec §9,
# torchrl's SliceSampler with strict_length): an episode of L agent steps has L + 1 rows (row 0
# is the reset row) and L + 1 - H distinct slices. Samplers draw slices with replacement, so a
# batch larger than the distinct slices available never fails: it repeats slices. These
# functions say how many there are, and refuse a batch_size above that.


def slices_in_episodes(episode_rows: Iterable[int], horizon: int) -> int:
    """Distinct slices of ``horizon + 1`` rows in episodes of these row counts: the sum of
    ``rows - horizon`` over the episodes with at least ``horizon + 1`` rows."""
    return int(sum(max(0, int(r) - int(horizon)) for r in episode_rows))


def capacity_episodes(buffer_size: int, run_agent_steps: int, T: int) -> int:
    """Complete fixed-length episodes a replay keeps: ceil(min(buffer_size, run length) / T),
    at least 1 (:mod:`tdmpc2core.agents.replay`; docs/deviations.md R1)."""
    return max(1, math.ceil(min(buffer_size, max(run_agent_steps, 1)) / T))


def burst_tick(seed_steps: int, n_envs: int = 1) -> int:
    """The tick of the seed-phase burst of updates: the first tick whose agent steps reach
    ``seed_steps``, ceil(seed_steps / n_envs) (one tick is one agent step of each of the
    ``n_envs`` environments; spec §5.5, §8). The agents' schedule and every check use it."""
    return -(-int(seed_steps) // int(n_envs))


def first_update_agent_steps(seed_steps: int, n_envs: int = 1) -> int:
    """Agent steps of a run once its first update (the burst) has run: the end of the burst
    tick, (burst_tick + 1) x n_envs. A run shorter than this trains nothing."""
    return (burst_tick(seed_steps, n_envs) + 1) * int(n_envs)


def first_update_slices(cfg: TDMPC2Config, *, episode_length: int, n_envs: int = 1) -> Optional[int]:
    """Distinct training slices the replay of a single-task online run holds when its first
    update runs (``cfg`` resolved: ``seed_steps`` set); None for an episodic run.

    The first update is the seed-phase burst, at tick b = ceil(seed_steps / n_envs) (one tick
    is one agent step of each of the ``n_envs`` environments; spec §8). An episode enters the
    replay at the top of the tick after it ended, before that tick's updates. With
    fixed-length episodes (``episodic=False``) every episode is T agent steps, so each
    environment has completed floor(b / T) episodes by then, and the replay holds
    min(n_envs x floor(b / T), ceil(buffer_size / T)) of them, each of T + 1 - H slices.

    An episodic run's episodes may end early, and its first update waits until an episode long
    enough to sample exists (docs/deviations.md R3), so what the replay holds then is known only
    during the run: None (the workflow bounds such a run's batch by the run's length instead:
    at most one slice per agent step).
    """
    if cfg.episodic:
        return None
    T, H, n = int(episode_length), int(cfg.horizon), int(n_envs)
    b = burst_tick(cfg.seed_steps, n)
    held = min(n * (b // T), capacity_episodes(cfg.buffer_size, n * b, T))
    return slices_in_episodes([T + 1] * held, H)


def episodes_held_at_end(cfg: TDMPC2Config, *, agent_steps: int, episode_length: int, n_envs: int = 1) -> int:
    """Complete episodes a fixed-length single-task run's replay holds when it ends, i.e. what
    its episode dataset exports (``cfg`` resolved; ``episodic=False``).

    The run is ceil(agent_steps / n_envs) ticks; each environment's k-th episode ends at tick
    k T - 1 and enters the replay at the top of tick k T, so an episode that ends at the last
    tick is not in it: n_envs x floor((ticks - 1) / T) episodes, at most
    :func:`capacity_episodes` of them held.
    """
    if cfg.episodic:
        raise ValueError("episodic runs end episodes early: their count is known only after the run")
    T, n = int(episode_length), int(n_envs)
    ticks = -(-int(agent_steps) // n)
    committed = n * (max(ticks - 1, 0) // T)
    return min(committed, capacity_episodes(cfg.buffer_size, int(agent_steps), T))


def check_batch_size(batch_size: int, slices: int, data: str, hint: str = "") -> None:
    """Refuse a batch of more slices than the data holds distinct ones (``data`` says which
    data, e.g. "the replay at the first update"; ``hint`` says what to change)."""
    if int(batch_size) > int(slices):
        raise ValueError(f"batch_size={batch_size} exceeds the {slices} distinct training slices (horizon + 1 "
                         f"consecutive rows of one episode) that {data} holds: every batch would repeat slices"
                         + (f"; {hint}" if hint else ""))


def check_first_update(cfg: TDMPC2Config, *, episode_length: int, n_envs: int) -> None:
    """The first update of a single-task online run with fixed-length episodes can be fed
    (``cfg`` resolved; an episodic run's is known only during the run, see
    :func:`first_update_slices`).

    Raises:
      ValueError: ``n_envs < 1``; seed_steps ending before the first episode does (the burst
        would find no complete episode); a batch_size above :func:`first_update_slices`.
    """
    T, n = int(episode_length), int(n_envs)
    if n < 1:
        raise ValueError(f"n_envs={n_envs!r} must be >= 1")
    if cfg.episodic:
        return
    b = burst_tick(cfg.seed_steps, n)
    if b < T:
        raise ValueError(
            f"seed_steps={cfg.seed_steps} is too small: with n_envs={n} the first episode (T={T} agent steps) "
            f"ends at tick {T}, after the seed-phase burst of updates; use seed_steps >= {T * n} "
            f"(default: max(1000, 5 T) = {max(1000, 5 * T)})")
    slices = first_update_slices(cfg, episode_length=T, n_envs=n)
    per_round = n * (T + 1 - cfg.horizon)  # slices added per T ticks
    need = -(-int(cfg.batch_size) // per_round) * T * n
    check_batch_size(cfg.batch_size, slices,
                     f"the replay at the first update (seed_steps={cfg.seed_steps}, n_envs={n}, T={T}, "
                     f"horizon={cfg.horizon})",
                     f"lower batch_size to at most {slices}, or raise seed_steps to {need} or more")


def config_from_kwargs(**kwargs) -> TDMPC2Config:
    """A TDMPC2Config from keyword arguments, refusing unknown names with the accepted list."""
    fields = {f.name for f in dataclasses.fields(TDMPC2Config)}
    unknown = sorted(set(kwargs) - fields)
    if unknown:
        raise TypeError(f"unknown TD-MPC2 hyperparameter(s) {unknown}; accepted: {sorted(fields)}")
    return TDMPC2Config(**kwargs)


__all__ = [
    "MODEL_SIZES", "OBS_KINDS", "check_obs_fields", "rgb_latent_dim", "KERNELS", "MATMUL_PRECISIONS", "TDMPC2Config", "LR_SCHEDULES", "LRSchedule",
    "learning_rate_schedule", "describe_learning_rate", "check_optimizer_fields", "updates_per_tick",
    "check_offline_config", "config_record", "resolve_config", "kernels_for_backend",
    "check_kernel_fields", "validate_config", "config_from_kwargs",
    "discount_from_episode_length", "seed_steps_from_episode_length", "slices_in_episodes",
    "capacity_episodes", "burst_tick", "first_update_agent_steps", "first_update_slices", "episodes_held_at_end", "check_batch_size", "check_first_update",
    "check_updates_per_tick",
]
