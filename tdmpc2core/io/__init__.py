"""Data on disk: atomic writes (:mod:`.atomic`), checkpoints (:mod:`.checkpoint`), Parquet
episode datasets (:mod:`.dataset`) and the provenance recorded beside results
(:mod:`.provenance`). Imports no JAX at module level.
"""
