"""The single-task agent for the run driver (:class:`OnlineProgram`): a tick is ``n_envs`` agent
steps of every seed; the seed-phase burst is a chunk of its own; an environment termination
(non-episodic agent), non-finite training metrics, too many dropped episodes and a host
simulator's error end the run; the errors it raises.
"""
from __future__ import annotations

import logging
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from ..model.config import burst_tick, first_update_agent_steps
from ..run.driver import Chunk, EvalField, Run, RunProgram
from . import online
from . import replay as rp

_log = logging.getLogger("tdmpc2core")


class TerminationError(ValueError):
    """A non-episodic agent met an environment termination."""


class NoSampleableEpisodeError(ValueError):
    """Episodic mode: a run ended with scheduled updates that never ran, because the replay
    held no episode of at least horizon + 1 rows to sample a slice from (spec §9).

    Raised by :meth:`TDMPC2.train` after its last chunk; ``state`` and ``history`` hold what
    the run produced.
    """

    def __init__(self, message, state=None, history=None):
        super().__init__(message)
        self.state = state
        self.history = history



def state_tick(state) -> int:
    """Ticks done by a run state (the same for every seed). Raises ValueError for a state whose
    seeds disagree."""
    ticks = np.asarray(state.tick).reshape(-1)
    if ticks.size == 0 or np.any(ticks != ticks[0]):
        raise ValueError(f"run state with inconsistent tick counters {ticks.tolist()}")
    return int(ticks[0])


class OnlineProgram(RunProgram):
    """:class:`~tdmpc2core.agents.single_task.TDMPC2` for the run driver
    (:class:`tdmpc2core.run.driver.RunProgram`): a tick is ``n_envs`` agent steps of every seed
    (:mod:`tdmpc2core.agents.online`); phases ``seed`` (random actions, no updates), ``burst``
    (the tick of the seed-phase burst of updates) and ``train``."""

    unit = "agent steps"
    unit_key = "agent_steps"
    phases = ("seed", "burst", "train")
    # a chunk record shows the evaluation's returns [seeds, episodes] and their mean per seed
    attached = {"eval_returns": ("eval_returns", None), "eval_return": ("eval_returns", 1)}
    progress = ("last_eval_return", "eval_returns", -1)

    def __init__(self, agent):
        self.agent = agent
        self.steps_per_tick = agent.n_envs
        self.burst_tick = burst_tick(agent.seed_steps, agent.n_envs)  # first tick with agent_steps >= seed_steps
        self._warned_waiting = False
        self._seeds, self._seen_nonfinite = None, None

    @property
    def env_frames_per_tick(self) -> int:
        """Env frames a tick simulates: ``n_envs`` agent steps x the action repeat."""
        return self.agent.n_envs * self.agent.action_repeat

    @property
    def identity(self) -> dict:
        """Everything of the agent that changes a checkpoint's shapes or numbers: the class, its
        resolved configuration (``TDMPC2.config``), the env params; the extensions when it has
        any (none: the settings of runs made before extensions)."""
        agent = self.agent
        out = {"agent_class": type(agent).__name__, "agent": agent.config, "env_params": agent.env._token}
        if agent.extensions is not None and agent.extensions.declared:
            out["extensions"] = list(agent.extensions.declared)
        return out

    # ---- state
    def init_state(self, seeds, total_steps):
        return self.agent.init(seeds, total_steps)

    def place(self, state):
        """A restored state placed as :meth:`TDMPC2.init` places a fresh one: with the
        ``("seeds",)`` mesh the agent's :class:`~tdmpc2core.run.devices.SeedSharding` gives for
        its seed count, every leaf split on its seed axis (``NamedSharding(mesh, P("seeds"))``,
        the init program's ``shard_map`` outputs); without one, the driver's default (one
        device, uncommitted). Left as it was: with the program cache
        (:mod:`tdmpc2core.run.program_cache`) a fresh state comes out committed (a stored
        program's outputs); the stored programs are lowered from shapes and dtypes alone, so
        the difference reaches only a program outside that cache called with the restored
        state before the first training call (an episode recorded at a resumed run's owed
        evaluation)."""
        mesh = self.agent.placement.mesh_for(int(np.shape(state.tick)[0]))
        if mesh is None:
            return super().place(state)
        from jax.sharding import NamedSharding, PartitionSpec

        from ..run.devices import SEED_AXIS

        return jax.device_put(state, NamedSharding(mesh, PartitionSpec(SEED_AXIS)))

    def state_tick(self, state) -> int:
        return state_tick(state)

    def check_state(self, state, run: Run, total_given: bool) -> None:
        agent = self.agent
        n_state_seeds = np.asarray(state.tick).shape[0]
        if n_state_seeds != len(run.seeds):
            raise ValueError(f"the state holds {n_state_seeds} seed(s), seed={list(run.seeds)} names "
                             f"{len(run.seeds)}")
        if not total_given:
            return
        if agent.episodic:  # a ring of 2 C rows (replay.EpisodicReplay)
            unit = "rows"
            want = 2 * rp.capacity_steps(agent.cfg.buffer_size, run.total_steps, agent.episode_length)
        else:
            unit = "episode slots"
            want = rp.capacity_episodes(agent.cfg.buffer_size, run.total_steps, agent.episode_length) + agent.n_envs
        have = int(state.replay.obs.shape[1])
        if want != have:
            raise ValueError(f"the state's replay has {have} {unit}, a run of total_timesteps={run.total_steps} "
                             f"needs {want}; pass the total_timesteps the run was started with")

    # ---- the schedule's cut points: the burst tick is a chunk of its own
    def cuts(self, start_tick, end_tick, run):
        return {self.burst_tick, self.burst_tick + 1} if start_tick <= self.burst_tick < end_tick else set()

    def phase(self, a, b):
        return "seed" if b <= self.burst_tick else ("burst" if a == self.burst_tick else "train")

    # ---- compute
    def advance(self, state, start_tick, n_ticks):
        state = self.agent._chunk()(state, jnp.int32(start_tick), jnp.int32(n_ticks))
        return jax.block_until_ready(state)

    def compile_ahead(self, state, run: Run, chunks: bool, evaluates: bool):
        """The training chunk (when the call runs one) and the evaluation (when it evaluates),
        for the driver to compile beside the call (RunOptions.compile_ahead): their arguments'
        specs taken now, from ``state``. The chunk first: it is traced first, so its XLA
        compile (the longest: 121 s of a cold CheetahRun job's on a TPU v5e) overlaps the
        evaluation's tracing."""
        import functools

        from ..run.compiled import abstract

        agent, out = self.agent, []
        if chunks:
            out.append(("chunk", functools.partial(agent._chunk().compile_ahead,
                                                   *abstract((state, jnp.int32(0), jnp.int32(1))))))
        if evaluates:
            fn, args = agent._eval_call(state, run.eval_episodes, 0, run.seeds)
            out.append(("eval", functools.partial(fn.compile_ahead, *abstract(args))))
        return out

    def after_call(self, state, agent_steps):
        agent = self.agent
        # a host simulator's exception inside the call (its items gave NaN): the run stops with it
        agent.env.raise_host_error(f"in the call of the training program that ended at agent step {agent_steps}")
        term = int(np.max(np.asarray(state.terminations)))
        if term > 0 and not agent.cfg.episodic:
            raise TerminationError(
                f"{agent.env_id}: the environment terminated {term} time(s) by agent step {agent_steps}; "
                "the paper-era TD-MPC2 bootstraps through every episode end, so it refuses terminating "
                "tasks. Use a non-terminating task (e.g. the DMC suite) or the episodic mode (TDMPC2(..., "
                "episodic=True); in the pipeline, agent: {episodic: true}).")
        self._report_nonfinite(state, agent_steps)
        metrics = {k: np.asarray(v) for k, v in state.metrics.items()}
        bad = sorted(k for k, v in metrics.items() if not np.all(np.isfinite(v)))
        if bad:
            raise FloatingPointError(
                f"{agent.env_id}: non-finite training metrics {bad} by agent step {agent_steps} (the parameters "
                "diverged); the run stops here, so the last checkpoint written is the last good one.")

    def start(self, state, run: Run) -> None:
        self._seeds = list(run.seeds)
        self._seen_nonfinite = np.asarray(state.nonfinite).copy()
        agent = self.agent
        first = first_update_agent_steps(agent.seed_steps, agent.n_envs)
        if run.total_steps < first:  # the whole run, not this call: a run continued later is fine
            warnings.warn(
                f"{agent.env_id}: the run of {run.total_steps} agent steps ends before its first update (the "
                f"seed-phase burst, once seed_steps={agent.seed_steps} random agent steps are done: the tick that "
                f"reaches {first} agent steps with n_envs={agent.n_envs}), so it trains nothing; give at least "
                f"{first} agent steps (n_timesteps, or total_timesteps for a run in several calls) or lower "
                "seed_steps", RuntimeWarning, stacklevel=4)

    def _report_nonfinite(self, state, agent_steps) -> None:
        """Log each newly dropped episode (seed, env index, agent step); stop past the limit."""
        agent = self.agent
        counts, steps = np.asarray(state.nonfinite), np.asarray(state.nonfinite_step)  # [S, n_envs]
        seen, seeds = self._seen_nonfinite, self._seeds
        for i, e in zip(*np.nonzero(counts > seen)):
            _log.warning("%s: seed %d, env %d: dropped %d episode(s) for a non-finite observation or reward "
                         "(NaN physics), the last at agent step %d; their rows never entered the replay "
                         "(%d of max_nonfinite=%d for this seed)", agent.env_id, seeds[i], e,
                         counts[i, e] - seen[i, e], steps[i, e], counts[i].sum(), agent.max_nonfinite)
        self._seen_nonfinite = counts.copy()
        over = [i for i in range(counts.shape[0]) if counts[i].sum() > agent.max_nonfinite]
        if over:
            detail = "; ".join(f"seed {seeds[i]}: " + ", ".join(f"env {e} x{counts[i, e]} (last at agent step "
                                                                 f"{steps[i, e]})" for e in np.nonzero(counts[i])[0])
                               for i in over)
            raise FloatingPointError(
                f"{agent.env_id}: more than max_nonfinite={agent.max_nonfinite} episodes dropped for non-finite "
                f"observations or rewards by agent step {agent_steps} ({detail}): the environment produces NaN "
                "physics (check its action bounds, its backend and its parameters). The run stops here; its last "
                "checkpoint is the last good one (raise max_nonfinite and rerun to continue).")

    def chunk_record(self, state, rec, chunk: Chunk, run: Run):
        agent = self.agent
        rec["env_frames"] = rec["agent_steps"] * agent.action_repeat
        rec["updates"] = np.asarray(state.agent.updates)
        for k in online.metric_keys(agent.cfg):
            rec[k] = np.asarray(state.metrics[k])
        if agent.episodic:
            rec["pending_updates"] = np.asarray(state.pending_updates)
            if chunk.phase != "seed" and rec["pending_updates"].max() > 0 and not self._warned_waiting:
                self._warned_waiting = True
                warnings.warn(self.waiting_message(state, rec["agent_steps"], run.seeds), RuntimeWarning,
                              stacklevel=4)
        cnt = np.asarray(state.finished_count)
        rec["train_return"] = np.where(cnt > 0, np.asarray(state.finished_return_sum, np.float64)
                                       / np.maximum(cnt, 1), np.nan)
        return state._replace(finished_return_sum=jnp.zeros_like(state.finished_return_sum),
                              finished_count=jnp.zeros_like(state.finished_count))

    # ---- evaluation and the history
    def evaluate(self, state, tick, run: Run) -> dict:
        agent = self.agent
        agent_steps = tick * agent.n_envs
        rets, lens, succ, ext = agent.evaluate_all(state, run.eval_episodes,
                                                   eval_index=agent.eval_index(tick, run.eval_every), seeds=run.seeds)
        return {"eval_agent_steps": agent_steps, "eval_env_frames": agent_steps * agent.action_repeat,
                "eval_returns": rets, "eval_lengths": lens, **{f"eval_{k}": v for k, v in succ.items()}, **ext}

    def eval_fields(self, n_seeds, eval_episodes):
        S, E = n_seeds, eval_episodes
        success = [EvalField("eval_success", "success", np.bool_, (S, E)),
                   EvalField("eval_success_any", "success_any", np.bool_, (S, E))] if self.has_success else []
        return [EvalField("eval_agent_steps", "agent_steps", np.int64), EvalField("eval_env_frames", "env_frames", np.int64),
                EvalField("eval_returns", "returns", np.float32, (S, E)),
                EvalField("eval_lengths", "lengths", np.int32, (S, E))] + success + [
                EvalField(k, k, np.float64, (S,)) for k in online.eval_metric_names(self.agent)]

    @property
    def has_success(self) -> bool:
        """Whether the agent's env has a success flag (its evaluations record success)."""
        return bool(getattr(self.agent.env.spec, "has_success", False))

    def finalize(self, history):
        history["eval_return"] = history["eval_returns"].mean(axis=-1)

    def eval_log(self, ev):
        success = {"success rate": np.mean(ev["eval_success"], axis=-1, dtype=np.float64),
                   "success rate (any step)": np.mean(ev["eval_success_any"], axis=-1, dtype=np.float64)
                   } if self.has_success else {}
        return {"episodic mean reward": np.mean(ev["eval_returns"], axis=-1),
                "mean episodic length": np.mean(ev["eval_lengths"], axis=-1), **success,
                "env_frames": ev["eval_env_frames"],
                **{k[len("ext/"):]: ev[k] for k in online.eval_metric_names(self.agent)}}

    # ---- end of a call
    def finish(self, state, history, end_tick, run):
        if self.agent.episodic and int(np.max(np.asarray(state.pending_updates))) > 0:
            raise NoSampleableEpisodeError(
                self.waiting_message(state, end_tick * self.agent.n_envs, run.seeds, final=True),
                state=state, history=history)

    def waiting_message(self, state, agent_steps, seeds, final=False):
        agent = self.agent
        H = agent.cfg.horizon
        pending = np.asarray(state.pending_updates)
        longest = np.asarray(state.replay.longest)
        which = [s for s, p in zip(seeds, pending) if p > 0]
        longest_txt = ", ".join(f"seed {s}: {int(l)}" for s, l, p in zip(seeds, longest, pending) if p > 0)
        head = (f"{agent.env_id}: by agent step {agent_steps} the replay held no episode of at least "
                f"horizon + 1 = {H + 1} rows (at least H = {H} agent steps, plus its reset row) for seed(s) {which}; "
                f"longest complete episode (agent steps): {longest_txt}. TD-MPC2 trains on slices of "
                f"H + 1 rows inside one episode (spec §9), so ")
        if final:
            return (head + f"{int(pending.max())} scheduled update(s) never ran. Every episode ended "
                    "too early (or none ended): use a shorter horizon, more agent steps or a longer "
                    "seed phase, or check why the task terminates so soon.")
        return head + (f"{int(pending.max())} scheduled update(s) are waiting and will run at the first "
                       "tick that has such an episode (docs/deviations.md R3).")


__all__ = ["OnlineProgram", "TerminationError", "NoSampleableEpisodeError", "state_tick"]
