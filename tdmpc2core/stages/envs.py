"""``tdmpc2 envs``: every accepted env id, per registered suite (no JAX, no simulator imported).

    tdmpc2 envs                   # each suite: a header line, then its ids, one per line
    tdmpc2 envs --suite dmcontrol
    tdmpc2 envs --ids-only        # the ids alone, one per line (for scripts)

A suite's header names how many ids it has and, when its packages are missing, how to install
them. An unknown env id's error message (:func:`tdmpc2core.envs.suite_for`) lists only a few
ids and names this command.
"""
from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", action="append", default=None,
                   help="only this suite (repeatable; default: every registered suite)")
    p.add_argument("--ids-only", action="store_true", help="print the ids alone, one per line, without headers")


def run(args) -> int:
    """Print the ids. Raises ValueError: an unknown ``--suite`` (the registered ones named)."""
    from ..envs.registry import get_suite, suites

    chosen = [get_suite(name) for name in args.suite] if args.suite else suites()
    for suite in chosen:
        if not args.ids_only:
            err = suite.install_error()
            note = f"; not installed: {err}" if err is not None else ""
            print(f"{suite.name} ({len(suite.ids)} ids{note}):")
        for env_id in suite.ids:
            print(env_id if args.ids_only else f"  {env_id}")
    return 0
