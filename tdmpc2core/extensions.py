"""Extensions: small research features folded into both agents' compiled programs (issue 26).

An extension is any object with one or more of these phases (methods), given to an agent at
construction, ``TDMPC2(..., extensions=[GradNorms(), ModelError()])`` or
``TDMPC2MultiTask(..., extensions=[...])``:

``init_state(total_steps) -> state``
  The extension's initial state of one seed: a pytree of arrays (or None). ``total_steps`` is
  the run's length in the agent's unit (agent steps for :class:`~tdmpc2core.TDMPC2`, updates
  for :class:`~tdmpc2core.TDMPC2MultiTask`; 0 when ``agent.init`` is called without it). The
  agents keep every extension's state in their run state (``ext``: a dict keyed by extension
  name, stacked over seeds), in checkpoints (restored exactly), and pass it to the other
  phases. An extension without ``init_state`` has the state None.
``pretrain(agent_state, state, key) -> (agent_state, state)``
  Run once per seed at the start of a fresh run, after the initialisation and before the first
  tick (never on a resumed or continued run), inside the compiled init program.
  ``agent_state`` is the seed's :class:`~tdmpc2core.model.update.AgentState` (parameters,
  target Qs, both Adam states, the running scale, the update counter); ``key`` a PRNG key of
  the seed's own (``fold_in(PRNGKey(seed), PRETRAIN_FOLD)``, apart from the run's streams). It
  may change any of the agent state's values (that is its purpose: a pretrain that changes the
  parameters changes the run) but must keep every shape and dtype (ValueError otherwise); the
  replay, environments and keys of the run are not its to change. Extensions pretrain in the
  order given.
``post_update(state, agent_state, metrics, step) -> state``
  Folded after every gradient update inside the compiled training program (no host round
  trip): ``agent_state`` after the update, ``metrics`` the update's scalars
  (:func:`tdmpc2core.model.update.update`: the losses, ``grad_norm``, ``wm_grad_norm``,
  ``pi_grad_norm``, ``pi_scale``, ...), ``step`` an int32 scalar: the agent steps done when the
  update runs (single-task: the tick's environment steps are done; the seed-phase burst's
  updates share one step) or the updates done (multi-task, this update included). It must keep
  its state's shapes and dtypes. It reads the training; it cannot change it.
``eval_metrics(state, model, episodes) -> {name: scalar}``
  Computed at every evaluation, per seed (and per evaluated task for the multi-task agent),
  inside the compiled evaluation program, from the state, the seed's world model
  (:class:`EvalModel`) and the evaluation's own episodes (:class:`EvalEpisodes`). Each value is
  a float scalar; the names are fixed (they become the history's ``ext/<extension>/<name>``
  entries, the columns of the training stages' ``eval.parquet`` and the report's table).

An object with none of these phases, or with a method that looks like a phase but is not one
of them (``pre_update``, ``post_step``, ``post_updates``, ...), is refused at construction
with the accepted names. Each extension has a name (its ``name`` attribute, else its class
name in snake case), unique among the agent's extensions. An agent without extensions
compiles and computes exactly what it did before they existed.

Two extensions ship here, selectable by name (:func:`make_extensions`, the pipeline's
``extensions`` key): :class:`GradNorms` (``grad_norms``) and :class:`ModelError`
(``model_error``).
"""
from __future__ import annotations

import difflib
import re
from typing import Callable, NamedTuple, Optional, Sequence

# JAX is imported where it is used: the workflow checks extension names without it
# (tdmpc2core.pipeline.config.check_extensions; tests/test_architecture.py)

#: the phases an extension may have, in the order a run meets them
PHASES = ("init_state", "pretrain", "post_update", "eval_metrics")
#: the pretrain key of a seed is fold_in(PRNGKey(seed), PRETRAIN_FOLD): apart from the run's streams
PRETRAIN_FOLD = 0x5EED_E47
#: other APIs' phases (refused: an extension written for one of them would silently do nothing)
OTHER_PHASES = frozenset({"loss", "modify_loss", "act", "pre_update", "pre_step", "post_step", "pre_rollout",
                          "post_rollout", "pre_eval", "post_eval", "train_metrics", "on_episode_end", "post_init",
                          "pre_train", "post_train", "on_update", "on_step", "on_eval"})
_PHASE_LIKE = re.compile(r"^(pre|post|on|before|after)_[a-z0-9_]+$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class EvalEpisodes(NamedTuple):
    """One seed's evaluation episodes, as :func:`tdmpc2core.agents.common.eval_episode` ran them.

    obs [E, T+1, O] float32: the observation before each step and after the last (multi-task:
    zero-padded to the model's width); action [E, T, A] float32: the action taken, in [-1, 1]
    (multi-task: zero-padded); reward [E, T] float32; valid [E, T] bool: the step was taken
    before the episode terminated (steps after a termination are not data).
    """

    obs: jnp.ndarray
    action: jnp.ndarray
    reward: jnp.ndarray
    valid: jnp.ndarray


class EvalModel:
    """The world model of one seed (and task) at an evaluation: ``params`` (the seed's
    parameters, a dict of the networks: encoder, dynamics, reward, qs, pi, ...), ``horizon`` H,
    ``latent_dim``, and its calls with the task's embedding applied (multi-task; renormalised
    at look-up as the planner does):

    * ``encode(obs [..., O]) -> z [..., L]``;
    * ``next(z, a [..., A]) -> z' [..., L]``;
    * ``reward(z, a) -> [...]`` the predicted reward, decoded (two-hot inverse, the reward's units).
    """

    def __init__(self, wm, params: dict, task: Optional[int] = None):
        from .model.update import embed

        self.wm, self.params = wm, params
        self.horizon = int(wm.cfg.horizon)
        self.latent_dim = int(wm.cfg.latent_dim)
        self.e = None if task is None else embed(params["task_emb"], task)

    def encode(self, obs):
        return self.wm.encode(self.params, obs, self._e(obs))

    def next(self, z, a):
        return self.wm.next(self.params, z, a, self._e(z))

    def reward(self, z, a):
        from .model import math as tm

        return tm.two_hot_inv(self.wm.reward(self.params, z, a, self._e(z)), self.wm.cfg.vmin, self.wm.cfg.vmax)

    def _e(self, x):
        import jax.numpy as jnp

        return None if self.e is None else jnp.broadcast_to(self.e, x.shape[:-1] + self.e.shape[-1:])


class UnknownPhaseError(TypeError, ValueError):
    """An extension with an unknown phase, or with none: a TypeError (a wrong object) and a
    ValueError (the stages report it in one line)."""


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def extension_name(ext) -> str:
    """The name of ``ext``: its ``name`` attribute (a str), else its class name in snake case."""
    name = getattr(ext, "name", None)
    return str(name) if isinstance(name, str) and name else _snake(type(ext).__name__)


def check_extension(ext) -> tuple:
    """The phases ``ext`` has, in :data:`PHASES` order.

    Raises:
      UnknownPhaseError: ``ext`` is a class (not an instance), has a callable attribute that
        looks like a phase but is not one (:data:`OTHER_PHASES`, ``pre_*``, ``post_*``,
        ``on_*``..., or a near miss of an accepted name), a phase that is not callable, or none
        of the phases; the message names the accepted ones.
    """
    accepted = ", ".join(PHASES)
    if isinstance(ext, type):
        raise UnknownPhaseError(f"extension {ext.__name__}: pass an instance ({ext.__name__}()), not the class")
    name = extension_name(ext)
    unknown = []
    for attr in dir(ext):
        if attr.startswith("_") or attr in PHASES or not callable(getattr(ext, attr, None)):
            continue
        close = difflib.get_close_matches(attr, PHASES, n=1, cutoff=0.8)
        if attr in OTHER_PHASES or _PHASE_LIKE.match(attr) or close:
            unknown.append(attr + (f" (did you mean {close[0]}?)" if close else ""))
    if unknown:
        raise UnknownPhaseError(f"extension {name!r}: unknown phase(s) {', '.join(unknown)}; accepted: {accepted}")
    bad = [p for p in PHASES if hasattr(ext, p) and not callable(getattr(ext, p))]
    if bad:
        raise UnknownPhaseError(f"extension {name!r}: {', '.join(bad)} is not callable; phases are methods "
                                f"({accepted})")
    phases = tuple(p for p in PHASES if hasattr(ext, p))
    if not phases:
        raise UnknownPhaseError(f"extension {name!r} ({type(ext).__name__}) has none of the phases {accepted}")
    return phases


class _HookExtension:
    """``post_update=UpdateHook(init, fold)`` as an extension (the older, single-hook API)."""

    name = "post_update"

    def __init__(self, hook):
        self.hook = hook

    def init_state(self, total_steps):
        return self.hook.init()

    def post_update(self, state, agent_state, metrics, step):
        return self.hook.fold(state, agent_state, metrics)


def _same_layout(a, b) -> bool:
    import jax

    sa, sb = jax.tree_util.tree_structure(a), jax.tree_util.tree_structure(b)
    if sa != sb:
        return False
    return all(getattr(x, "shape", None) == getattr(y, "shape", None) and getattr(x, "dtype", None)
               == getattr(y, "dtype", None) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


class ExtensionSet:
    """An agent's extensions composed: one state slot per extension (a dict keyed by name),
    each phase applied in the order given. Built by the agents from ``extensions=`` (and the
    older ``post_update=`` hook, the slot ``post_update``).

    With only the ``post_update=`` hook, the run state's ``ext`` is the hook's value itself (as
    before extensions existed: docs/artifacts.md); otherwise a dict {name: state}.

    An entry may be a registered extension's name (:data:`REGISTRY`: ``"grad_norms"``,
    ``"model_error"``), which stands for its instance with default settings.

    Raises:
      UnknownPhaseError: an extension with an unknown phase or none (:func:`check_extension`).
      ValueError: two extensions of one name, a name that is not an identifier, an unknown
        registered name (with the closest one), or ``extensions`` not a sequence.
    """

    def __init__(self, extensions: Sequence = (), hook=None):
        if extensions is None:
            extensions = ()
        if isinstance(extensions, (str, bytes)) or not isinstance(extensions, (list, tuple)):
            raise ValueError(f"extensions: expected a list or tuple of extension objects, got "
                             f"{type(extensions).__name__}")
        # a registered name (the pipeline's spelling, e.g. "grad_norms") stands for its default instance
        exts = [make_extensions([e])[0] if isinstance(e, str) else e for e in extensions]
        exts += [_HookExtension(hook)] if hook is not None else []
        self.phases = [check_extension(e) for e in exts]
        self.names = [extension_name(e) for e in exts]
        bad = [n for n in self.names if not _NAME.match(n)]
        if bad:
            raise ValueError(f"extension name {bad[0]!r} is not an identifier (letters, digits, _)")
        dup = sorted({n for n in self.names if self.names.count(n) > 1})
        if dup:
            raise ValueError(f"two extensions named {dup[0]!r}: give one a distinct name attribute")
        self.extensions = exts
        self.bare = hook is not None and not list(extensions)
        #: the names given with extensions= (the hook alias excluded): part of the checkpoint settings
        self.declared = [n for n in self.names if not (hook is not None and n == "post_update")]
        self._metric_names = None

    def has(self, phase: str) -> bool:
        return any(phase in p for p in self.phases)

    def _each(self, phase: str):
        return [(n, e) for n, e, p in zip(self.names, self.extensions, self.phases) if phase in p]

    # ---- the phases, one seed
    def init(self, total_steps: int):
        """The run state's ``ext`` of one seed (arrays)."""
        import jax
        import jax.numpy as jnp

        vals = {n: (None if not hasattr(e, "init_state") else
                    jax.tree_util.tree_map(jnp.asarray, e.init_state(int(total_steps))))
                for n, e in zip(self.names, self.extensions)}
        return vals["post_update"] if self.bare else vals

    def _get(self, value, name):
        return value if self.bare else value[name]

    def _set(self, value, name, new):
        return new if self.bare else {**value, name: new}

    def pretrain(self, agent_state, value, seed_key):
        """Every pretrain phase in order (one seed; ``seed_key`` = PRNGKey(seed)). Returns
        (agent_state, value); raises ValueError if one changes a shape or dtype."""
        import jax

        for i, (name, ext) in enumerate(self._each("pretrain")):
            key = jax.random.fold_in(jax.random.fold_in(seed_key, PRETRAIN_FOLD), i)
            new_agent, new_state = ext.pretrain(agent_state, self._get(value, name), key)
            if not _same_layout(new_agent, agent_state):
                raise ValueError(f"extension {name!r}: pretrain changed the agent state's structure, shapes or "
                                 "dtypes; it may change values only")
            if not _same_layout(new_state, self._get(value, name)):
                raise ValueError(f"extension {name!r}: pretrain changed its state's structure, shapes or dtypes")
            agent_state, value = new_agent, self._set(value, name, new_state)
        return agent_state, value

    def fold(self, value, agent_state, metrics: dict, step):
        """Every post_update phase after one update (one seed)."""
        import jax
        import jax.numpy as jnp

        for name, ext in self._each("post_update"):
            old = self._get(value, name)
            new = ext.post_update(old, agent_state, metrics, step)
            if not _same_layout(jax.tree_util.tree_map(jnp.asarray, new), old):
                raise ValueError(f"extension {name!r}: post_update changed its state's structure, shapes or "
                                 "dtypes")
            value = self._set(value, name, jax.tree_util.tree_map(jnp.asarray, new))
        return value

    def eval_metrics(self, value, model: EvalModel, episodes: EvalEpisodes) -> dict:
        """{``ext/<extension>/<metric>``: float32 scalar} of every eval_metrics phase (one seed).
        Raises ValueError: a metric name that is not a non-empty str, or a value that is not a
        scalar."""
        import jax.numpy as jnp

        out = {}
        for name, ext in self._each("eval_metrics"):
            got = ext.eval_metrics(self._get(value, name), model, episodes)
            if not isinstance(got, dict):
                raise ValueError(f"extension {name!r}: eval_metrics returned {type(got).__name__}, not a dict")
            for k, v in got.items():
                if not isinstance(k, str) or not k or "/" in k:
                    raise ValueError(f"extension {name!r}: eval_metrics name {k!r} must be a non-empty str without '/'")
                v = jnp.asarray(v, jnp.float32)
                if v.shape != ():
                    raise ValueError(f"extension {name!r}: eval_metrics[{k!r}] has shape {v.shape}, not a scalar")
                out[f"ext/{name}/{k}"] = v
        return out

    def metric_names(self, abstract_eval: Callable) -> list:
        """The history keys of the eval metrics, sorted: ``abstract_eval()`` returns them
        (traced with :func:`jax.eval_shape`); computed once."""
        import jax

        if self._metric_names is None:
            self._metric_names = sorted(jax.eval_shape(abstract_eval)) if self.has("eval_metrics") else []
        return self._metric_names


def make_extension_set(extensions, hook=None) -> Optional[ExtensionSet]:
    """An :class:`ExtensionSet` of ``extensions`` (and the ``post_update=`` hook), or None when
    there are none (the agents' programs without extensions)."""
    if not extensions and hook is None:
        if extensions is not None and not isinstance(extensions, (list, tuple)):
            raise ValueError(f"extensions: expected a list or tuple of extension objects, got "
                             f"{type(extensions).__name__}")
        return None
    return ExtensionSet(extensions or (), hook)


# ----------------------------------------------------------------------------- shipped ones
_NETWORKS = ("encoder", "dynamics", "reward", "qs", "pi", "termination", "task_emb")
_GRADS = ("grad_norm", "wm_grad_norm", "pi_grad_norm")


def _norm(tree):
    import jax
    import jax.numpy as jnp

    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves))


class GradNorms:
    """Gradient and parameter norms (``grad_norms``): a monitor of the optimisation.

    post_update: for the update's gradient norms (:func:`tdmpc2core.model.update.update`'s
    metrics: ``grad_norm``, the norm the world-model clip saw; ``wm_grad_norm``, the world
    model's gradient alone (encoder, dynamics, reward, Q ensemble and, multi-task, the task
    embedding together); ``pi_grad_norm``, the policy's before its clip), the last value, an
    exponential moving average (``decay``, bias-corrected) and the maximum over the run, and
    ``clipped``: the fraction of updates whose clip norm exceeded ``clip_norm`` (None: not
    counted). The update exposes no gradient norm per network, so per network this reports
    parameter norms.

    eval_metrics: those, and ``param_norm_<network>`` (the L2 norm of every parameter of the
    network: encoder, dynamics, reward, qs (the online Q ensemble), pi, and termination /
    task_emb when the agent has them) at the evaluation, and ``updates`` (updates seen).
    Units: gradient and parameter norms in the parameters' own units (no normalisation).
    """

    name = "grad_norms"

    def __init__(self, decay: float = 0.99, clip_norm: Optional[float] = 20.0):
        if not 0.0 < float(decay) < 1.0:
            raise ValueError(f"GradNorms: decay={decay!r} must be in (0, 1)")
        self.decay = float(decay)
        self.clip_norm = None if clip_norm is None else float(clip_norm)

    def init_state(self, total_steps):
        import jax.numpy as jnp

        z = jnp.zeros((), jnp.float32)
        return {"count": jnp.zeros((), jnp.int32), "clipped": jnp.zeros((), jnp.int32),
                **{f"{g}_{s}": z for g in _GRADS for s in ("last", "ema", "max")}}

    def post_update(self, state, agent_state, metrics, step):
        import jax.numpy as jnp

        d = self.decay
        out = dict(state, count=state["count"] + 1)
        for g in _GRADS:
            x = jnp.asarray(metrics[g], jnp.float32)
            out[f"{g}_last"] = x
            out[f"{g}_ema"] = d * state[f"{g}_ema"] + (1.0 - d) * x
            out[f"{g}_max"] = jnp.maximum(state[f"{g}_max"], x)
        if self.clip_norm is not None:
            out["clipped"] = state["clipped"] + (metrics["grad_norm"] > self.clip_norm).astype(jnp.int32)
        return out

    def eval_metrics(self, state, model, episodes):
        import jax.numpy as jnp

        n = state["count"]
        correction = 1.0 - jnp.power(jnp.float32(self.decay), n.astype(jnp.float32))
        nan = jnp.float32(jnp.nan)
        out = {"updates": n.astype(jnp.float32)}
        for g in _GRADS:
            out[f"{g}_last"] = jnp.where(n > 0, state[f"{g}_last"], nan)
            out[f"{g}_ema"] = jnp.where(n > 0, state[f"{g}_ema"] / jnp.maximum(correction, 1e-12), nan)
            out[f"{g}_max"] = jnp.where(n > 0, state[f"{g}_max"], nan)
        if self.clip_norm is not None:
            out["clipped"] = jnp.where(n > 0, state["clipped"] / jnp.maximum(n, 1).astype(jnp.float32), nan)
        for net in _NETWORKS:
            if net in model.params:
                out[f"param_norm_{net}"] = _norm(model.params[net])
        return out


class ModelError:
    """The world model's open-loop error on the evaluation's own episodes (``model_error``).

    eval_metrics: from every start t of every evaluation episode with t + H steps taken before
    a termination (H the agent's horizon), the model is rolled open loop with the episode's
    actions, z_0 = encode(o_t), z_h = next(z_{h-1}, a_{t+h-1}), and compared with the episode:

    * ``latent_mse_h{h}`` (h = 1..H): mean over latent dims of (z_h - encode(o_{t+h}))^2, the
      consistency loss's measure (the training's targets are the encoded observations too);
    * ``reward_abs_h{h}`` (h = 1..H): |reward(z_{h-1}, a_{t+h-1}) - r_{t+h-1}|, the decoded
      reward prediction's absolute error, in reward units;

    each a mean over the starts and episodes, NaN when no start fits (an episode shorter than
    H). These are fresh transitions: the evaluation's episodes, from their own initial states,
    never in the replay.
    """

    name = "model_error"

    def eval_metrics(self, state, model, episodes):
        import jax.numpy as jnp

        H = model.horizon
        E, T = episodes.reward.shape
        n = T - H + 1  # starts t = 0 .. T - H
        nan = jnp.float32(jnp.nan)
        if n < 1:
            return {**{f"latent_mse_h{h}": nan for h in range(1, H + 1)},
                    **{f"reward_abs_h{h}": nan for h in range(1, H + 1)}}
        zs = model.encode(episodes.obs)  # [E, T+1, L]
        z = zs[:, :n]
        ok = jnp.ones((E, n), bool)
        out = {}
        for h in range(1, H + 1):
            a = episodes.action[:, h - 1:h - 1 + n]
            ok = ok & episodes.valid[:, h - 1:h - 1 + n]
            r_err = jnp.abs(model.reward(z, a) - episodes.reward[:, h - 1:h - 1 + n])
            z = model.next(z, a)
            l_err = jnp.mean(jnp.square(z - zs[:, h:h + n]), axis=-1)
            count = jnp.sum(ok)
            w = ok.astype(jnp.float32)
            out[f"latent_mse_h{h}"] = jnp.where(count > 0, jnp.sum(l_err * w) / jnp.maximum(count, 1), nan)
            out[f"reward_abs_h{h}"] = jnp.where(count > 0, jnp.sum(r_err * w) / jnp.maximum(count, 1), nan)
        return out


#: the extensions selectable by name (the pipeline's ``extensions`` key, the stages' spec)
REGISTRY: dict = {"grad_norms": GradNorms, "model_error": ModelError}


def make_extensions(names: Sequence[str]) -> list:
    """Instances of the registered extensions ``names`` (default settings), in order.

    Raises:
      ValueError: an unknown name (the registered ones listed) or a repeated one.
    """
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise ValueError(f"extensions: expected a list of names from {sorted(REGISTRY)}, got {names!r}")
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), sorted(REGISTRY), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown extension {unknown[0]!r}{hint}; registered: {sorted(REGISTRY)}")
    if len(set(names)) != len(names):
        raise ValueError(f"extensions: {list(names)} names one twice")
    return [REGISTRY[n]() for n in names]


__all__ = ["PHASES", "PRETRAIN_FOLD", "EvalEpisodes", "EvalModel", "UnknownPhaseError", "extension_name",
           "check_extension", "ExtensionSet", "make_extension_set", "GradNorms", "ModelError", "REGISTRY",
           "make_extensions"]
