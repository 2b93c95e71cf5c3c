"""Data on disk: atomic writes (:mod:`.atomic`), checkpoints (:mod:`.checkpoint`), Parquet
episode datasets (:mod:`.dataset`), the provenance recorded beside results
(:mod:`.provenance`) and the official code's checkpoints (:mod:`.official`). Imports no JAX
at module level.
"""
