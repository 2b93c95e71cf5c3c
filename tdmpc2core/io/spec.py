"""What the workflow gives a training job: the typed contract between the pipeline and the stages.

The workflow builds one :class:`TaskSpec` per task (``tdmpc2core.pipeline.config.Pipeline.task_spec``)
and one :class:`MultiSpec` per multi-task job (``Pipeline.multi_spec``); it passes each as JSON
(``--spec``, a rerun trigger: its text is the job's settings), and the stage reads it back with
:meth:`TaskSpec.parse` / :meth:`MultiSpec.parse` (``tdmpc2 train-single``, ``tdmpc2 train-multi``).
The fields of these classes are the one list of the keys (docs/artifacts.md, "Task settings" and
"Multi-task run"): the pipeline's keys, the stages' accepted keys and the JSON all follow from
them. A field's value is kept as given (no conversion), so the JSON the pipeline writes is the
JSON the stage recorded before the contract existed, and a run's ``spec`` and run id are unchanged.

Both agents get their model size by one road: :meth:`~TaskSpec.agent_settings` (the
hyperparameters passed to ``TDMPC2`` / ``TDMPC2MultiTask``) holds ``model_size`` when it is set:
a task's ``agent.model_size``, or the multi-task job's size (its folder ``size{n}`` and
``--model-size``, one job per size; not in the JSON).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar, Mapping, Optional

__all__ = ["TaskSpec", "MultiSpec", "dumps"]


def _always(default=None):
    """A field the pipeline always writes (None included)."""
    return dataclasses.field(default=default, metadata={"always": True})


def _job_field():
    """A field that is not in the JSON (not compared either): the job gives it, or :meth:`_Spec.parse`."""
    return dataclasses.field(default=None, compare=False, repr=False, metadata={"json": False})


def dumps(spec: Mapping) -> str:
    """The JSON text of a spec: sorted keys, no spaces (the workflow's ``--spec``)."""
    return json.dumps(dict(spec), sort_keys=True, separators=(",", ":"))


class _Spec:
    """What the two contracts share: the key lists, the JSON both ways, the record."""

    #: the keys a spec must have
    REQUIRED: ClassVar[tuple] = ()

    @classmethod
    def keys(cls) -> list[str]:
        """Every key, in the order of the fields (the JSON's keys are sorted)."""
        return [f.name for f in dataclasses.fields(cls) if f.metadata.get("json", True)]

    @classmethod
    def always_keys(cls) -> list[str]:
        """The keys the pipeline always writes, even when None."""
        return [f.name for f in dataclasses.fields(cls) if f.metadata.get("always")]

    @classmethod
    def optional_keys(cls) -> list[str]:
        """The keys the pipeline writes only when set (not None and not empty)."""
        return [k for k in cls.keys() if k not in cls.always_keys()]

    def to_dict(self) -> dict:
        """The JSON object: every :meth:`always_keys` key, then the others that are set."""
        out = {k: getattr(self, k) for k in self.always_keys()}
        out.update({k: getattr(self, k) for k in self.optional_keys()
                    if getattr(self, k) is not None and getattr(self, k) != [] and getattr(self, k) != {}})
        return out

    def to_json(self) -> str:
        """:meth:`to_dict` as the workflow passes it (:func:`dumps`)."""
        return dumps(self.to_dict())

    @classmethod
    def parse(cls, text: str, **job):
        """The spec of JSON ``text`` or ``@path`` (a file of it); ``job``: the fields that are not
        in the JSON (:class:`MultiSpec`'s ``model_size``). The object as given is kept as
        :attr:`given` (what the run records).

        Raises:
          ValueError: text that is not a JSON object, unknown keys (named, with the accepted
            ones) or missing required keys; the message names the file for ``@path``.
        """
        src = "--spec"
        if text.startswith("@"):
            src = text[1:]
            text = Path(src).read_text()
        try:
            given = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{src}: not valid JSON ({exc})") from None
        if not isinstance(given, dict):
            raise ValueError(f"{src}: expected a JSON object, got {type(given).__name__}")
        unknown = sorted(set(given) - set(cls.keys()))
        if unknown:
            raise ValueError(f"{src}: unknown key(s) {unknown}; accepted: {sorted(cls.keys())}")
        missing = sorted(set(cls.REQUIRED) - set(given))
        if missing:
            raise ValueError(f"{src}: missing key(s) {missing}")
        return cls(**given, **job, given=given)

    @property
    def record(self) -> dict:
        """The spec as the run records it (``run.json``'s ``spec``, the run id): the JSON object
        as given to :meth:`parse`, else :meth:`to_dict`."""
        return dict(self.given) if self.given is not None else self.to_dict()


@dataclasses.dataclass(frozen=True)
class TaskSpec(_Spec):
    """One task's settings for ``tdmpc2 train-single`` (docs/artifacts.md, "Task settings").

    Attributes:
      env_id: the environment id (:func:`tdmpc2core.envs.list_env_ids`).
      action_repeat: simulator steps per agent step (None: the suite's).
      episode_length: simulator steps per episode in effect (None: the suite's default).
      agent_steps: the run's length in agent steps.
      eval_every: agent steps between evaluations (None: none).
      eval_episodes: episodes per evaluation (None: 10).
      agent: the agent's hyperparameters (``TDMPC2Config`` fields, ``model_size`` among them).
      n_envs: environments in lockstep (None: 1).
      backend: the physics implementation of a suite that takes one (None: its default).
      allow_evicted: export what the replay still holds when it evicted episodes (None: false).
      env_params: the environment settings (None: the suite's defaults).
      extensions: registered extension names (:data:`tdmpc2core.extensions.REGISTRY`).
    """

    REQUIRED: ClassVar[tuple] = ("env_id", "agent_steps")

    env_id: str = _always()
    action_repeat: Optional[int] = _always()
    episode_length: Optional[int] = _always()
    agent_steps: int = _always()
    eval_every: Optional[int] = _always()
    eval_episodes: Optional[int] = _always()
    agent: Mapping[str, Any] = _always(None)
    n_envs: Optional[int] = None
    backend: Optional[str] = None
    allow_evicted: Optional[bool] = None
    env_params: Optional[Mapping[str, Any]] = None
    extensions: Optional[list] = None
    #: the JSON object :meth:`parse` read (None: built in Python), what :attr:`record` gives
    given: Optional[dict] = _job_field()

    @classmethod
    def of_task(cls, task: Mapping) -> "TaskSpec":
        """The spec of one task's merged settings (the workflow's resolved task: every
        :meth:`always_keys` key present, other keys ignored)."""
        return cls(**{k: task[k] for k in cls.always_keys()},
                   **{k: task.get(k) for k in cls.optional_keys()})

    @property
    def model_size(self) -> Optional[int]:
        """The model-size preset the task asks for (``agent.model_size``; None: the agent's default)."""
        return (self.agent or {}).get("model_size")

    def agent_settings(self) -> dict:
        """The agent's hyperparameters, ``model_size`` among them when set (``TDMPC2(...,
        **spec.agent_settings())``)."""
        return dict(self.agent or {})


@dataclasses.dataclass(frozen=True)
class MultiSpec(_Spec):
    """One multi-task job's settings for ``tdmpc2 train-multi`` (docs/artifacts.md, "Multi-task run").

    Attributes:
      updates: the run's length in updates.
      batch_size: slices per update (None: the agent's default).
      eval_every, eval_episodes, log_every: updates between evaluations, episodes per task and
        evaluation (None: 10), updates between training-metric records (None: at the evaluations).
      agent: the agent's hyperparameters (``TDMPC2Config`` fields; not ``model_size``).
      return_ranges: task -> [low, high] returns for the normalized score.
      backend: the physics implementation of the evaluation envs.
      eval_tasks: the pool's tasks evaluated (None: every task with an env).
      device_budget_bytes: the largest pool kept on the device (None: any).
      extensions: registered extension names.
      model_size: the job's model-size preset (not in the JSON: the job's folder ``size{n}``
        and ``--model-size`` carry it).
    """

    REQUIRED: ClassVar[tuple] = ("updates",)

    updates: int = None
    batch_size: Optional[int] = None
    eval_every: Optional[int] = None
    eval_episodes: Optional[int] = None
    log_every: Optional[int] = None
    agent: Mapping[str, Any] = _always(None)
    return_ranges: Optional[Mapping[str, list]] = None
    backend: Optional[str] = None
    eval_tasks: Optional[list] = None
    device_budget_bytes: Optional[int] = None
    extensions: Optional[list] = None
    model_size: Optional[int] = _job_field()
    #: the JSON object :meth:`parse` read (None: built in Python), what :attr:`record` gives
    given: Optional[dict] = _job_field()

    def agent_settings(self) -> dict:
        """The agent's hyperparameters with the job's ``model_size`` and the ``batch_size`` when
        set (``TDMPC2MultiTask(dataset, ..., **spec.agent_settings())``)."""
        out = dict(self.agent or {})
        if self.model_size is not None:
            out["model_size"] = int(self.model_size)
        if self.batch_size is not None:
            out["batch_size"] = int(self.batch_size)
        return out
