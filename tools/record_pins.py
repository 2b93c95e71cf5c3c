"""Print the bit-exact pins of ``tests/test_agent.py`` as the installed JAX computes them.

Run from the repository root (``python tools/record_pins.py``) after a deliberate change of
the pinned JAX release (pyproject.toml), or on a CPU model none of the recorded baselines
came from, with the code unchanged. Put the printed values into ``BASELINES`` of
tests/test_agent.py (a new JAX: replace them and ``BASELINE_VERSIONS``; a new CPU: add an
entry labelled with the printed CPU) in a commit of their own, stating which pins moved and
by how much. The runs are the tests' own (same agent, seeds and steps).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    import jax
    import jaxlib

    import test_agent as ta
    from tdmpc2core import TDMPC2

    print(f"BASELINE_VERSIONS = ({jax.__version__!r}, {jaxlib.__version__!r})  # backend {jax.default_backend()}, "
          f"CPU {ta.cpu_label()}")
    agent = TDMPC2("Pendulum-v1", seed_steps=ta.SEED_STEPS, **ta.TINY)
    state = agent.train(seed=[0, 1], n_timesteps=ta.STEPS)[0]
    print("1:", ta.fingerprint(state))
    agent2 = TDMPC2("Pendulum-v1", n_envs=2, seed_steps=400, **ta.TINY)
    state2, hist = agent2.train(seed=[0, 1], n_timesteps=420, eval_every=420, eval_episodes=2)
    print("2:", dict(ta.fingerprint(state2), eval_returns=np.asarray(hist["eval_returns"], np.float64).tolist()))


if __name__ == "__main__":
    main()
