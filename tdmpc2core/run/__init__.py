"""The run driver: everything a training run does on the host, for both agents.

The chunk schedule in the run's own unit, wall-time-capped calls of the compiled program,
stop requests, checkpoints (settings check, rotation, resuming), the training history,
progress, callbacks and loggers (:mod:`.driver`). An agent takes part through
:class:`~tdmpc2core.run.driver.RunProgram`: six methods (its compiled programs) and data.
:mod:`.compiled`: the one place the agents compile their programs (``per_seed``, on the
devices :mod:`.devices` gives: one, the seeds split over several, or the multi-task batch
split over a data-parallel mesh); :mod:`.loggers`: the older name of
:mod:`tdmpc2core.io.loggers` (the loggers and their registry); :mod:`.lock` (one writer per
checkpoint folder), :mod:`.prefetch`, :mod:`.progress` (time-to-go lines), :mod:`.jax_cache`
(the compilation cache's damaged entries).
"""
