"""The built-in suites, one module each, and the registry's list of them (plain Python).

:data:`BUILTIN` is what :mod:`tdmpc2core.envs.registry` registers on first use, in this order
(the order of :func:`tdmpc2core.envs.list_env_ids` and of the unknown-id message). Adding a
suite: a module here defining ``SUITE = Suite(...)`` (heavy imports only inside its ``build``)
and one line below.
"""
from __future__ import annotations

from tdmpc2core.envs.suites import brax, dmcontrol, gymnax, metaworld, myosuite, playground

BUILTIN = (
    gymnax.SUITE,
    brax.SUITE,
    playground.SUITE,
    dmcontrol.SUITE,
    metaworld.SUITE,
    myosuite.SUITE,
)

__all__ = ["BUILTIN"]
