"""The run driver: everything a training run does on the host, for both agents.

The chunk schedule in the run's own unit, wall-time-capped calls of the compiled program,
stop requests, checkpoints (settings check, rotation, resuming), the training history,
progress, callbacks and loggers (:mod:`.driver`). An agent takes part through the small
interface :class:`~tdmpc2core.run.driver.RunProgram`. :mod:`.compiled`: the one place the
agents compile their per-seed programs (``per_seed``; one device today); :mod:`.loggers`:
where metrics go besides the history (the ``Logger`` protocol, a registry of kinds, a CSV
logger).
"""
