"""The report's analysis and rendering: tables and aggregate statistics (:mod:`.analysis`),
the multi-task scaling tables (:mod:`.scaling`), learning-curve figures (:mod:`.figures`),
the published curves (:mod:`.published`) and the self-contained HTML page (:mod:`.html`).

pandas, numpy, rliable and matplotlib only: no JAX, no agents.
"""
