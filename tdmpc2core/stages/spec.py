"""The ``--spec`` argument of the training stages: a JSON object given inline or as ``@file``."""
from __future__ import annotations

import json
from pathlib import Path


def parse_spec(text: str, accepted: set, required: set) -> dict:
    """The settings from JSON text or ``@path``.

    Raises:
      ValueError: text that is not a JSON object, unknown keys (named, with the accepted
        ones) or missing required keys; the message names the file for ``@path``.
    """
    src = "--spec"
    if text.startswith("@"):
        src = text[1:]
        text = Path(src).read_text()
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{src}: not valid JSON ({exc})") from None
    if not isinstance(spec, dict):
        raise ValueError(f"{src}: expected a JSON object, got {type(spec).__name__}")
    unknown = sorted(set(spec) - set(accepted))
    if unknown:
        raise ValueError(f"{src}: unknown key(s) {unknown}; accepted: {sorted(accepted)}")
    missing = sorted(set(required) - set(spec))
    if missing:
        raise ValueError(f"{src}: missing key(s) {missing}")
    return spec
