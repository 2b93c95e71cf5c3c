"""The run driver: everything a training run does on the host, for both agents.

The chunk schedule in the run's own unit, wall-time-capped calls of the compiled program,
stop requests, checkpoints (settings check, rotation, resuming), the training history,
progress and callbacks (:mod:`.driver`). An agent takes part through the small interface
:class:`~tdmpc2core.run.driver.RunProgram`.
"""
