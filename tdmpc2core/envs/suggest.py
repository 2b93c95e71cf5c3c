"""Suggestions for a mistyped env id, as plain Python (no JAX, no suite): the close matches
and a short listing of one suite's ids, for one-line error messages.

Matching ignores case and ``-`` versus ``_``: ``CARTPOLEBALANCE`` finds ``CartpoleBalance``,
``dmc:Cartpole-Balance`` finds ``dmc:cartpole-balance``. An error message built here stays one
line (ids never hold a newline; the asked-for id is shown by ``repr``, shortened) and under
:data:`MAX_MESSAGE` characters; ``tdmpc2 envs`` (:data:`LIST_COMMAND`) prints every id.
"""
from __future__ import annotations

import difflib
from typing import Sequence

#: the command that prints every accepted id of every suite (tdmpc2core/stages/envs.py)
LIST_COMMAND = "tdmpc2 envs"
#: at most this many ids of a suite in a message, then "... N more"
MAX_LISTED = 10
#: the longest unknown-id message
MAX_MESSAGE = 400


def match_key(env_id: str) -> str:
    """What matching compares: lower case, ``_`` read as ``-``."""
    return str(env_id).lower().replace("_", "-")


def similarity(a: str, b: str) -> float:
    """difflib's ratio of the two ids' :func:`match_key`."""
    return difflib.SequenceMatcher(None, match_key(a), match_key(b)).ratio()


def close_ids(env_id: str, ids: Sequence[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """Up to ``n`` ids of ``ids`` like ``env_id``, closest first; an id equal to it but for
    case and ``-``/``_`` comes alone."""
    keyed: dict[str, str] = {}
    for i in ids:
        keyed.setdefault(match_key(i), i)
    key = match_key(env_id)
    if key in keyed:
        return [keyed[key]]
    return [keyed[k] for k in difflib.get_close_matches(key, list(keyed), n=n, cutoff=cutoff)]


def shown(env_id) -> str:
    """``repr(env_id)``, shortened to about 60 characters."""
    text = repr(env_id)
    return text if len(text) <= 60 else text[:56] + "...'"


def unknown_message(head: str, env_id: str, label: str, ids: Sequence[str], close: Sequence[str] = ()) -> str:
    """One line: ``head``, ``Did you mean [...]?`` (when ``close``), then ``label``'s ids
    closest to ``env_id`` first (at most :data:`MAX_LISTED`, fewer when the line would pass
    :data:`MAX_MESSAGE` characters), ``... N more``, and the command that lists them all."""
    base = head + (f" Did you mean {list(close)}?" if close else "")
    tail = f" `{LIST_COMMAND}` lists every id of every suite."
    part = f" {label} ids ({len(ids)}, closest first): "

    def line(listed):
        rest = len(ids) - len(listed)
        return base + part + ", ".join(listed) + (f", ... {rest} more;" if rest else ";") + tail

    order = sorted(range(len(ids)), key=lambda i: (-similarity(env_id, ids[i]), i))
    listed: list[str] = []
    for i in order[:MAX_LISTED]:
        if len(line(listed + [ids[i]])) > MAX_MESSAGE:
            break
        listed.append(ids[i])
    return line(listed) if listed else f"{base} {label}: {len(ids)} ids;{tail}"


__all__ = ["LIST_COMMAND", "MAX_LISTED", "MAX_MESSAGE", "match_key", "similarity", "close_ids", "shown",
           "unknown_message"]
