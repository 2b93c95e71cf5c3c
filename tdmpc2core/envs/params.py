"""Environment settings (``env_params``): what they are, their canonical form and the helpers
the suites' checks share (plain Python).

An environment setting changes the dynamics or the episode of a task (a control step, a time
limit, a physical constant), so it is part of the task: the pipeline sets it per task
(``env_params:`` in a task's settings, docs/pipeline.md), the run records it (``run.json``,
the agent's ``config``), the episode dataset's task table carries it, and every rebuild of the
task (the multi-task agent's evaluation) passes it again.

The checks need no JAX and no simulator (a cluster login node checks a configuration with
``snakemake -n``): each suite's module (:mod:`tdmpc2core.envs.suites`) holds what it accepts, as
tables read off the installed packages (gymnax 1.0.1, brax 0.14.2, playground 0.2.0), which
``tests/test_env_settings.py`` compares with the packages themselves, and its check
(:attr:`tdmpc2core.envs.registry.Suite.check_params`). A setting is given as a JSON-like
mapping; its canonical form (:func:`canonical`: a plain dict of JSON values, tuples as lists)
is what is recorded and what rebuilds the env.
"""
from __future__ import annotations

import difflib
import json
import math
from typing import Any, Mapping, Optional


def _tolist(value):
    """A numpy or JAX scalar or array as Python data (json.dumps' ``default``); else TypeError."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} {value!r} is not plain data")


def canonical(env_params, env_id: str = "") -> dict:
    """``env_params`` as recorded: a plain dict of JSON values (tuples become lists, numpy and
    JAX scalars Python numbers; keys strings), a copy. None gives ``{}``.

    Raises:
        ValueError: not a mapping, a key that is not a string, or a value JSON cannot hold
            (one line naming the env id and the value).
    """
    if env_params is None:
        return {}
    where = f"env_params for {env_id!r}" if env_id else "env_params"
    if not isinstance(env_params, Mapping):
        raise ValueError(f"{where} must be a mapping of setting -> value, got {type(env_params).__name__}")
    bad = [k for k in env_params if not isinstance(k, str)]
    if bad:
        raise ValueError(f"{where}: keys must be strings, got {bad[0]!r}")
    try:
        return json.loads(json.dumps(dict(env_params), allow_nan=False, default=_tolist))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {dict(env_params)!r} is not plain data (numbers, bools, strings, lists, "
                         f"mappings; finite numbers): {exc}") from None


def unknown_key_error(env_id: str, suite: str, key: str, accepted) -> ValueError:
    """The one-line error for an unknown setting ``key`` of ``env_id`` (the closest accepted one named)."""
    close = difflib.get_close_matches(key, list(accepted), n=1)
    return ValueError(f"env_params for {env_id!r} ({suite}): unknown key {key!r}"
                      + (f" (did you mean {close[0]!r}?)" if close else "")
                      + f"; accepted: {', '.join(accepted) or 'none'}")


def is_int(v) -> bool:
    """An int that is not a bool."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v) -> bool:
    """A finite int or float that is not a bool."""
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def plain(value) -> Any:
    """A numpy / JAX scalar or array as Python data (a scalar, or nested lists), for the record."""
    import numpy as np

    arr = np.asarray(value)
    return arr.item() if arr.ndim == 0 else arr.tolist()


def gymnax_record(params, default_params) -> dict:
    """The fields of a gymnax ``EnvParams`` that differ from the env's defaults, as plain data
    (what rebuilds the env with :func:`tdmpc2core.envs.make_env`)."""
    import dataclasses

    out = {}
    for f in dataclasses.fields(params):
        value, default = plain(getattr(params, f.name)), plain(getattr(default_params, f.name))
        if value != default:
            out[f.name] = value
    return out


def describe(env_params: Optional[Mapping]) -> str:
    """``env_params`` in one short line for logs: ``ctrl_dt=0.02, sim_dt=0.01`` (``defaults`` if none)."""
    if not env_params:
        return "defaults"
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(env_params.items()))


__all__ = ["canonical", "unknown_key_error", "is_int", "is_number", "plain", "gymnax_record", "describe"]
