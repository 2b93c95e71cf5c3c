"""The two agents and what they compute on the device.

* :mod:`.single_task`: :class:`~tdmpc2core.TDMPC2`, single-task online TD-MPC2 (spec §8);
  its compiled training ticks in :mod:`.online`, its replay buffer in :mod:`.replay`, the
  export of that replay as an episode dataset in :mod:`.export`.
* :mod:`.multitask`: :class:`~tdmpc2core.TDMPC2MultiTask`, multi-task TD-MPC2 trained offline
  on a pooled dataset (spec §10); its sampling (device and host-memory paths) in
  :mod:`.multitask_sampling`, its evaluation in :mod:`.multitask_eval`, its run-driver
  program in :mod:`.multitask_program`.
* :mod:`.common`: what both agents share (evaluation keys, metric names, one seed's init,
  the evaluation episode, the per-update loop and its hook point ``UpdateHook``, through
  which the extensions of :mod:`tdmpc2core.extensions` run).
* :mod:`.official_eval`: the released (official) checkpoints, converted and evaluated with
  the planner by the official ``evaluate.py`` protocol (``tdmpc2 evaluate-official``).

Each agent builds its compiled programs (init, training chunk, evaluation) and hands them to
the run driver (:mod:`tdmpc2core.run`), which owns everything a run does on the host.
"""
