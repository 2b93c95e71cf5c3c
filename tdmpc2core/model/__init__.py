"""The algorithm as pure functions (spec §1-§7, §11): hyperparameters (:mod:`.config`), math
primitives (:mod:`.math`), Flax modules (:mod:`.networks`) and the kernels that compute them
(:mod:`.kernels`: the plain flax/JAX reference and the choice; :mod:`.kernels_cpu`: the kernels
measured faster on XLA:CPU), the world model's calls
(:mod:`.world_model`), one gradient update (:mod:`.update`), the MPPI planner (:mod:`.planner`),
FLOP counts (:mod:`.flops`) and the official code's parameter layout (:mod:`.official`).

The bottom layer: no I/O, no environments, no training loop; it imports nothing else of
``tdmpc2core``. Importing this package imports no JAX (:mod:`.config` is plain Python, so a
machine without JAX can validate a configuration).
"""
