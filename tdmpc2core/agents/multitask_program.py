"""The multi-task agent for the run driver (:class:`OfflineProgram`, a
:class:`tdmpc2core.run.driver.RunProgram`): a tick is one update of every seed; chunks also end
at every ``log_every`` updates (a training-metric record); non-finite metrics end the run."""
from __future__ import annotations

import jax
import numpy as np

from ..run.devices import to_host
from ..run.driver import EvalField, RunProgram
from .common import METRIC_KEYS

# history key <- evaluate() key
_EVAL_FIELDS = (("eval_returns", "returns"), ("eval_lengths", "lengths"), ("eval_return", "return"),
                ("eval_mean_return", "mean_return"), ("normalized_score_per_task", "normalized_score_per_task"),
                ("normalized_score", "normalized_score"))
#: with a task whose env has a success flag (float64, NaN for the tasks without)
_SUCCESS_FIELDS = (("eval_success", "success"), ("eval_success_any", "success_any"),
                   ("eval_success_rate", "success_rate"))


class OfflineProgram(RunProgram):
    """:class:`TDMPC2MultiTask` for the run driver: a tick is one update of every seed; chunks
    also end at every ``log_every`` updates (a training-metric record)."""

    unit = "updates"
    unit_key = "updates"
    phases = ("train",)
    steps_per_tick = 1
    # a chunk record shows the evaluation's mean return and normalized score per seed, and its
    # return per seed and task
    attached = {"eval_mean_return": ("eval_mean_return", None), "normalized_score": ("normalized_score", None),
                "eval_return": ("eval_return", None)}
    progress = ("last_normalized_score", "normalized_score", None)

    def __init__(self, agent):
        self.agent = agent

    @property
    def identity(self) -> dict:
        """What makes a checkpoint this agent's: the class, the configuration (hyperparameters
        and the task table), the data's SHA-256, the evaluation envs (and the extensions when
        any: none gives the settings of runs made before extensions)."""
        agent = self.agent
        envs = None if agent.eval_envs is None else [
            None if e is None else [e.spec.env_id, e.spec.suite, e.spec.backend, repr(e._token)]
            for e in agent.eval_envs]
        out = {"agent_class": type(agent).__name__, "agent": agent.config, "dataset_sha256": agent.dataset_sha256,
               "eval_envs": envs}
        if agent.extensions is not None and agent.extensions.declared:
            out["extensions"] = list(agent.extensions.declared)
        return out

    @property
    def checkpoint_meta(self) -> dict:
        return {"tasks": list(self.agent.task_names)}

    def init_state(self, seeds, total_steps):
        return self.agent.init(seeds, total_steps)

    def place(self, state):
        """A restored state placed as :meth:`TDMPC2MultiTask.init` places a fresh one:
        replicated on every device of the agent's ``("data",)`` mesh (:meth:`TDMPC2MultiTask.place`;
        in a multi-process job each process builds its devices' copies from the checkpoint it
        read), or the driver's default without a mesh (one device, uncommitted)."""
        if self.agent.placement.mesh is None:
            return super().place(state)
        return self.agent.place(state)

    def state_tick(self, state) -> int:
        return int(to_host(state.agent.updates)[0])

    def state_seeds(self, state):
        return [int(s) for s in to_host(state.seed)]

    def cuts(self, start_tick, end_tick, run):
        every = dict(run.extra).get("log_every")
        return set(range((start_tick // every + 1) * every, end_tick, every)) if every else set()

    def advance(self, state, start_tick, n_ticks):
        return jax.block_until_ready(self.agent.run_updates(state, n_ticks))

    def chunk_record(self, state, rec, chunk, run):
        rec["chunk_updates"] = chunk.ticks
        for k in METRIC_KEYS:
            rec[k] = to_host(state.metrics[k])
        bad = [k for k in METRIC_KEYS if not np.all(np.isfinite(rec[k]))]
        if bad:
            raise FloatingPointError(f"non-finite training metrics {bad} after {rec['updates']} updates")
        return state

    def evaluate(self, state, tick, run) -> dict:
        res = self.agent.evaluate(state, run.eval_episodes)
        return {"eval_updates": self.state_tick(state),
                **{key: res[src] for key, src in self._eval_fields()}, **res["ext"]}

    def _eval_fields(self):
        return _EVAL_FIELDS + (_SUCCESS_FIELDS if self.has_success else ())

    @property
    def has_success(self) -> bool:
        """Whether an evaluated task's env has a success flag (the history then keeps
        ``eval_success``, ``eval_success_any`` [S, K, E] and ``eval_success_rate`` [S, K],
        float64, NaN for a task without one)."""
        from .multitask_eval import has_success

        return self.agent.eval_envs is not None and has_success(self.agent)

    def eval_fields(self, n_seeds, eval_episodes):
        S, K, E = n_seeds, len(self.agent.eval_task_ids), eval_episodes
        shapes = {"eval_returns": (S, K, E), "eval_lengths": (S, K, E), "eval_return": (S, K),
                  "eval_mean_return": (S,), "normalized_score_per_task": (S, K), "normalized_score": (S,),
                  "eval_success": (S, K, E), "eval_success_any": (S, K, E), "eval_success_rate": (S, K)}
        return [EvalField("eval_updates", "eval_updates", np.int64)] + [
            EvalField(key, key, np.int32 if key == "eval_lengths" else np.float64, shapes[key])
            for key, _ in self._eval_fields()] + [EvalField(k, k, np.float64, (S, K)) for k in self.ext_keys()]

    def ext_keys(self) -> list:
        """The history keys of the extensions' eval_metrics (``ext/<extension>/<metric>``)."""
        from .multitask_eval import eval_metric_names

        return eval_metric_names(self.agent)

    def finalize(self, history):
        history["tasks"] = self.agent.eval_task_names if self.agent.eval_envs is not None else \
            list(self.agent.task_names)

    def eval_log(self, ev):
        out = {"episodic mean reward": ev["eval_mean_return"], "normalized score": ev["normalized_score"]}
        lengths = np.mean(np.asarray(ev["eval_lengths"]), axis=-1)  # [S, tasks]
        from .multitask_eval import _has_success

        for k, (i, name) in enumerate(zip(self.agent.eval_task_ids, self.agent.eval_task_names)):
            out[f"{name}/episodic mean reward"] = np.asarray(ev["eval_return"])[:, k]
            out[f"{name}/mean episodic length"] = lengths[:, k]
            if _has_success(self.agent, i):
                out[f"{name}/success rate"] = np.asarray(ev["eval_success_rate"])[:, k]
        # the extensions' eval metrics [S, tasks]: logged as their means over the evaluated tasks
        for key in self.ext_keys():
            out[key[len("ext/"):]] = np.mean(np.asarray(ev[key]), axis=-1)
        return out


__all__ = ["OfflineProgram"]
