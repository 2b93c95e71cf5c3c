"""The JAX release everything rests on computes what it should.

jaxlib 0.10.2 on CPU silently miscompiles a vmapped matrix-vector product followed by a
reduction (jax-ml/jax#39103): for 32,769 float32 rows (i, 0, 0) the jitted
``sum((I @ row) ** 2)`` of the last row gave 1071645696.0 instead of 32768**2 = 1073741824.0;
0.10.1 is correct. The project pins jax/jaxlib 0.10.1 (pyproject.toml, README "Install
notes"); this test makes a release with that miscompile fail CI instead of training on it.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def _last_row_norm(n: int):
    i = jnp.arange(n, dtype=jnp.float32)
    rows = jnp.stack((i, jnp.zeros_like(i), jnp.zeros_like(i)), axis=1)
    eye = jnp.eye(3, dtype=jnp.float32)

    def f(x):
        return jax.vmap(lambda row: jnp.sum((eye @ row) ** 2))(x)

    return float(f(rows)[-1]), float(jax.jit(f)(rows)[-1])


def test_vmapped_matvec_then_reduction_is_compiled_correctly():
    n = 32_769
    exact = float(np.float32(n - 1) ** 2)  # 1073741824.0, exact in float32
    eager, jitted = _last_row_norm(n)
    assert eager == exact
    assert jitted == exact, (f"jax {jax.__version__}: jit gives {jitted} for {exact} (jax-ml/jax#39103); "
                             "use the pinned jax/jaxlib (pyproject.toml)")


def test_the_pinned_release_is_installed():
    import jaxlib

    assert (jax.__version__, jaxlib.__version__) == ("0.10.1", "0.10.1"), (
        f"jax {jax.__version__} / jaxlib {jaxlib.__version__} installed; pyproject.toml pins 0.10.1 "
        "(0.10.2 miscompiles on CPU, jax-ml/jax#39103; later releases need Python 3.12+)")
