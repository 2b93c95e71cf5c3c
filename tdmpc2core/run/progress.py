"""Progress lines of a long evaluation: what runs, how far it is and how long it should still
take, one line at a time (``tdmpc2 evaluate-official`` prints them to stderr, flushed).

:func:`tdmpc2core.agents.official_eval.evaluate_official` steps the episodes of one task
together on the host, one agent step at a time; it tells an :class:`EvalProgress` when a task
starts, after each agent step and when a task ends. The time still to go is the agent steps
left (the current task's and the later tasks') times the seconds per agent step measured so
far. No task's first step counts in that rate: it includes compiling the planner and the
task's environment (or loading them from the compilation cache).

Lines (``emit`` gets each as one string without a newline):

* at a task's start: ``task 1/28 walker-run: 10 episode(s) x 500 agent steps, stepped together``;
* after the first measured step (the first estimate, right after the compile), then at most
  every ``every_s`` seconds: ``task 1/28 walker-run: agent step 2/500; 41 s so far; about 9.5 min to go``;
* at a task's end: ``task 1/28 walker-run done: mean return 712.3 over 10 episode(s) in 5.1 min;
  about 2.3 h to go`` (or ``all done``).
"""
from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

#: seconds between two lines inside a task (besides the first estimate and the task's end)
EVERY_S = 30.0


def duration(seconds: float) -> str:
    """``seconds`` for a log line: ``41 s``, ``9.5 min``, ``2.3 h``."""
    s = max(0.0, float(seconds))
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


class EvalProgress:
    """The progress of an evaluation of ``tasks`` ((name, agent steps per episode) each, in
    order), ``episodes`` episodes per task stepped together, reported through ``emit``.

    Call :meth:`start_task` (name), :meth:`step_done` (t, 0-based) after each agent step and
    :meth:`end_task` (mean return) for each task in order. ``clock``: seconds (tests).

    Raises:
      ValueError: no task, a task of no agent steps, a task started out of order or past the
        last one.
    """

    def __init__(self, tasks: Sequence[tuple[str, int]], episodes: int, emit: Callable[[str], None], *,
                 every_s: float = EVERY_S, clock: Callable[[], float] = time.perf_counter):
        self.tasks = [(str(n), int(T)) for n, T in tasks]
        if not self.tasks or any(T < 1 for _, T in self.tasks):
            raise ValueError(f"EvalProgress: need at least one task of at least one agent step, got {self.tasks}")
        self.episodes, self.emit, self.every_s, self.clock = int(episodes), emit, float(every_s), clock
        self.index = -1
        self.measured_steps, self.measured_s = 0, 0.0
        self._t_task = self._t_step = self._t_line = clock()

    def _label(self) -> str:
        return f"task {self.index + 1}/{len(self.tasks)} {self.tasks[self.index][0]}"

    def start_task(self, name: str) -> None:
        """The next task starts (``name`` must be the next of :attr:`tasks`)."""
        if self.index + 1 >= len(self.tasks) or self.tasks[self.index + 1][0] != str(name):
            raise ValueError(f"EvalProgress: task {name!r} is not the next of {[n for n, _ in self.tasks]} "
                             f"(after {self.index + 1} done)")
        self.index += 1
        self._t_task = self._t_step = self.clock()
        T = self.tasks[self.index][1]
        self.emit(f"{self._label()}: {self.episodes} episode(s) x {T} agent steps, stepped together "
                  "(the first step compiles)")

    def remaining_s(self, steps_done: int) -> Optional[float]:
        """Seconds still to go after ``steps_done`` agent steps of the current task, from the
        measured rate (None before any step was measured)."""
        if not self.measured_steps:
            return None
        left = self.tasks[self.index][1] - int(steps_done) + sum(T for _, T in self.tasks[self.index + 1:])
        return left * self.measured_s / self.measured_steps

    def _to_go(self, steps_done: int) -> str:
        rest = self.remaining_s(steps_done)
        return "time to go not known yet" if rest is None else f"about {duration(rest)} to go"

    def step_done(self, t: int) -> None:
        """Agent step ``t`` (0-based) of the current task is done: a line for the first
        estimate, then at most every :attr:`every_s` seconds (none after a task's first step,
        which measures nothing, nor after its last: :meth:`end_task` reports it)."""
        now = self.clock()
        if t == 0:  # a task's first step compiles: not part of the rate
            self._t_step = now
            return
        self.measured_steps += 1
        self.measured_s += now - self._t_step
        self._t_step = now
        T = self.tasks[self.index][1]
        if t + 1 < T and (self.measured_steps == 1 or now - self._t_line >= self.every_s):
            self._t_line = now
            self.emit(f"{self._label()}: agent step {t + 1}/{T}; {duration(now - self._t_task)} so far; "
                      f"{self._to_go(t + 1)}")

    def end_task(self, mean_return: float) -> None:
        """The current task is done; ``mean_return``: over its episodes."""
        now = self.clock()
        self._t_line = now
        last = self.index + 1 == len(self.tasks)
        self.emit(f"{self._label()} done: mean return {float(mean_return):.1f} over {self.episodes} episode(s) "
                  f"in {duration(now - self._t_task)}; " + ("all done" if last else self._to_go(self.tasks[self.index][1])))


__all__ = ["EvalProgress", "EVERY_S", "duration"]
