"""The checks that the configuration's resolvers share (:mod:`tdmpc2core.pipeline.config`,
:mod:`~tdmpc2core.pipeline.multitask`, :mod:`~tdmpc2core.pipeline.cluster`,
:mod:`~tdmpc2core.pipeline.codeversion`): the one error they raise and the checks of more than
one block. It imports no other module of the pipeline, so each of them may import it.
"""
from __future__ import annotations

import dataclasses
import difflib
import re

from tdmpc2core.model import config as library_config

__all__ = ["ConfigError", "AGENT_KEYS", "unknown_agent_keys", "agent_key_written_at", "check_extensions",
           "check_expected"]

#: the agent settings the library accepts (the fields of tdmpc2core.model.config.TDMPC2Config)
AGENT_KEYS = sorted(f.name for f in dataclasses.fields(library_config.TDMPC2Config))


class ConfigError(ValueError):
    """A configuration the workflow refuses; the message is one line naming the key."""


def unknown_agent_keys(where: str, agent: dict, accepted: list, defaults_where: tuple = ("", None)) -> None:
    """One line for the first agent key the library does not accept, with the closest one.
    ``defaults_where``: (where, agent block) of the protocol's defaults, named when it sets the key."""
    unknown = [k for k in agent if k not in accepted]
    if not unknown:
        return
    key = unknown[0]
    if defaults_where[1] is not None and key in defaults_where[1]:
        where = defaults_where[0]
    close = difflib.get_close_matches(key, accepted, n=1)
    raise ConfigError(
        f"config: unknown agent setting {key!r} in {where}"
        + (f"; did you mean {close[0]!r}?" if close else f"; accepted: {', '.join(accepted)}")
        + (f" (and {len(unknown) - 1} more unknown agent setting(s): {unknown[1:]})" if len(unknown) > 1 else ""))


def agent_key_written_at(err: Exception, blocks) -> str:
    """Where the agent setting a refusal names first was written: the library's messages start
    ``key=value`` or ``key.field=value`` ("horizon=0 ...", "learning_rate.kind='cosin' ...").
    ``blocks``: (the block as given, its config path) in the order they win. Returns
    " (set at PATH.KEY)" for the first block that sets the key; "" when the message names no key
    or no block sets it (a preset's own value)."""
    m = re.match(r"(\w+)(?:\.\w+)*=", str(err))
    if not m:
        return ""
    key = m.group(1)
    for block, path in blocks:
        if isinstance(block, dict) and key in block:
            return f" (set at {path}.{key})"
    return ""


def check_extensions(where: str, names) -> None:
    """Refuse (one-line :class:`ConfigError`) an ``extensions`` setting that is not a list of
    registered extension names (:data:`tdmpc2core.extensions.REGISTRY`), naming the key."""
    if names is None:
        return
    from tdmpc2core.extensions import make_extensions

    try:
        make_extensions(names)
    except ValueError as e:
        raise ConfigError(f"config: {where}: {e}") from None


def check_expected(where: str, exp) -> None:
    """An expected range that can be met: mean_min <= mean_max."""
    if exp and exp.get("mean_min") is not None and exp.get("mean_max") is not None \
            and exp["mean_min"] > exp["mean_max"]:
        raise ConfigError(f"config: {where}: mean_min {exp['mean_min']} > mean_max {exp['mean_max']}: "
                          "no final return could pass")
