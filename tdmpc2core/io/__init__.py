"""Data on disk: atomic writes (:mod:`.atomic`), checkpoints (:mod:`.checkpoint`), Parquet
episode datasets (:mod:`.dataset`), the provenance recorded beside results
(:mod:`.provenance`), the official code's checkpoints (:mod:`.official`) and the integrity
check of official ``.pt`` files (:mod:`.integrity`). Imports no JAX
at module level.
"""
