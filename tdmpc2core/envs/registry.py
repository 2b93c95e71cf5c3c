"""The suite registry: one :class:`Suite` object per environment suite, the only place that
dispatches on a suite.

A suite says which env ids it owns, how to build an :class:`~tdmpc2core.envs.base.Env` for one
(its heavy packages imported only then), its episode-length and action-repeat rules, what its
score means for the report, the names of its tasks in the published results, and which
packages it needs. :func:`~tdmpc2core.envs.make_env`, :func:`~tdmpc2core.envs.suite_of`,
:func:`~tdmpc2core.envs.time_limit` and :func:`~tdmpc2core.envs.list_env_ids` ask the
registry; the report and the provenance (layers that may not import ``envs/``) get its facts
as plain data from their caller (:func:`report_facts`, :func:`packages`).

Plain Python: importing this module, the built-in suites' modules (:mod:`tdmpc2core.envs.suites`)
and calling anything here but :meth:`Suite.make` imports no JAX and no simulator, so a login
node without them checks a configuration.

This module imports no suite: the suite modules import it (for :class:`Suite`), and the
package (:mod:`tdmpc2core.envs`, whose ``__init__`` runs before any of its modules) registers
the built-in ones (:func:`register_builtin` of :data:`tdmpc2core.envs.suites.BUILTIN`), so the
registry is complete whenever it can be called.

Adding a suite: one module defining ``SUITE = Suite(...)`` and one line in
:data:`tdmpc2core.envs.suites.BUILTIN` (or :func:`register_suite` at run time, as
``tests/test_suites.py`` does with a toy suite).
"""
from __future__ import annotations

import dataclasses
from importlib import metadata
from typing import Any, Callable, Mapping, Optional

from tdmpc2core.envs.suggest import close_ids, shown, similarity, unknown_message

#: What a suite's score means for the report (:attr:`SuiteReport.score`).
SCORES = ("return", "success")
#: simulator steps per episode when ``episode_length`` is not given, for a suite whose caller
#: sets the time limit (the paper's DMC episodes: 1000 steps)
DEFAULT_EPISODE_LENGTH = 1000


@dataclasses.dataclass(frozen=True)
class SuiteReport:
    """What a suite's results mean for the report (plain data; :func:`report_facts`).

    Attributes:
        label: the simulator's name in the report (``"dm_control"``).
        version_package: the distribution whose version the report names beside ``label``
            (``"dm-control"``), or None.
        comparison_note: one sentence on what comparing this suite's runs with the published
            curves means, or ``""`` (none). ``{tasks}`` in it is replaced by `` (task, ...)``
            when another suite with a note is in the same run, else by nothing.
        rank: the report lists suites by rank, then by registration order.
        score: ``"return"`` (the episode return) or ``"success"`` (a success rate in [0, 1]).
        reward_per_step: (low, high) bounds of one simulator step's reward, so a task of L
            simulator steps has returns in [L low, L high] and a normalized score
            100 (return - L low) / (L high - L low); None: no declared range (no normalized
            score unless the user declares one).
    """

    label: str
    version_package: Optional[str] = None
    comparison_note: str = ""
    rank: int = 100
    score: str = "return"
    reward_per_step: Optional[tuple[float, float]] = None


@dataclasses.dataclass(frozen=True, eq=False)  # compared and hashed by identity (its tables are dicts)
class Suite:
    """One environment suite (spec §2 for the paper's DMControl protocol).

    Attributes:
        name: the suite's name (``"dmcontrol"``), also ``EnvSpec.suite`` of its envs.
        ids: the accepted env ids, in listing order.
        build: ``build(env_id, *, action_repeat, episode_length, env_params, backend) -> Env``;
            imports the suite's packages inside (never at module import). Arguments are
            already checked by :meth:`make` (id accepted, repeat and length valid, ``backend``
            only if :attr:`takes_backend`); ``episode_length`` is the simulator steps of an
            episode that takes effect (:meth:`sim_episode_length`: T x ``action_repeat``).
        requires: the distributions (pip names) :attr:`build` needs; checked from the
            installed metadata, nothing imported.
        pip_extra: the tdmpc2core extra that installs them (``pip install 'tdmpc2core[x]'``), or
            None when they are core dependencies.
        default_action_repeat: the action repeat when none is given (the paper's: 2 for DMC).
        own_time_limit: env id -> simulator steps per episode when the env keeps its own time
            limit (gymnax, Meta-World, MyoSuite): T is that limit ``// action_repeat``, and an
            ``episode_length`` given is refused unless it is that limit (or ``T x
            action_repeat``); or None: the caller's ``episode_length`` (a multiple of the action
            repeat; :data:`DEFAULT_EPISODE_LENGTH` when not given) sets T.
        takes_backend: whether ``backend`` (a physics implementation) applies.
        backend_hint: appended to the error for a ``backend`` given to a suite that takes none.
        refuse: ``refuse(env_id) -> ValueError | None``: the error for an id this suite
            recognises but does not accept (a discrete gymnax id, an unknown ``dmc:`` id).
        check_params: ``check_params(env_id, env_params) -> dict``: the canonical form of a
            mapping of environment settings (:mod:`tdmpc2core.envs.params`), checked without
            building anything; raises ValueError (one line: the key, the env id, what is
            accepted). None: any mapping of plain data is passed to :attr:`build` as it is.
        time_limit_key: with :attr:`own_time_limit`, the ``env_params`` key that replaces the
            env's own time limit (simulator steps; gymnax's ``max_steps_in_episode``), or None.
        published: env id -> the task's name in the published results (official curves).
        report: :class:`SuiteReport`.
        frames: ``frames(env) -> FrameSource``: how the suite's own renderer pictures an env's
            states for evaluation videos (:mod:`tdmpc2core.envs.render`), or None: no renderer
            (the report says so instead of showing a video).
        frames_opengl: whether :attr:`frames` draws through MuJoCo's OpenGL context (True: the
            MuJoCo suites; False: a drawing without OpenGL, gymnax's), so that a run with videos
            checks the OpenGL backend before it trains (:func:`tdmpc2core.envs.render.check_opengl`).
        obs_types: the observation types :attr:`build` can give (``"state"``, and ``"rgb"``
            for pixels, spec §2 "Pixels"). :meth:`make` refuses any other; :attr:`build` is
            called with ``obs=`` only for one other than ``"state"`` (so a suite without pixels
            keeps the signature above).
    """

    name: str
    ids: tuple[str, ...]
    build: Callable[..., Any]
    requires: tuple[str, ...] = ()
    pip_extra: Optional[str] = None
    default_action_repeat: int = 1
    own_time_limit: Optional[Mapping[str, int]] = None
    takes_backend: bool = False
    backend_hint: str = ""
    refuse: Optional[Callable[[str], Optional[ValueError]]] = None
    check_params: Optional[Callable[[str, Mapping], dict]] = None
    time_limit_key: Optional[str] = None
    published: Mapping[str, str] = dataclasses.field(default_factory=dict)
    report: SuiteReport = None  # type: ignore[assignment]
    frames: Optional[Callable[[Any], Any]] = None
    frames_opengl: bool = True
    obs_types: tuple[str, ...] = ("state",)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"suite name {self.name!r}: must be an identifier (letters, digits, _)")
        if self.report is None:
            object.__setattr__(self, "report", SuiteReport(label=self.name))
        if self.report.score not in SCORES:
            raise ValueError(f"suite {self.name!r}: report.score={self.report.score!r}; accepted: {list(SCORES)}")
        if not isinstance(self.default_action_repeat, int) or self.default_action_repeat < 1:
            raise ValueError(f"suite {self.name!r}: default_action_repeat={self.default_action_repeat!r}; "
                             "need an int >= 1")
        object.__setattr__(self, "ids", tuple(self.ids))
        object.__setattr__(self, "requires", tuple(self.requires))

    @property
    def keeps_episode_length(self) -> bool:
        """Whether the caller's ``episode_length`` sets the time limit (False: the env's own)."""
        return self.own_time_limit is None

    def missing(self) -> list[str]:
        """Distributions of :attr:`requires` that are not installed (nothing is imported)."""
        out = []
        for dist in self.requires:
            try:
                metadata.version(dist)
            except metadata.PackageNotFoundError:
                out.append(dist)
        return out

    def install_error(self) -> Optional[ImportError]:
        """The one-line error for missing packages, or None when all are installed."""
        missing = self.missing()
        if not missing:
            return None
        how = f"pip install 'tdmpc2core[{self.pip_extra}]'" if self.pip_extra else "pip install " + " ".join(missing)
        return ImportError(f"the {self.name} suite needs {', '.join(missing)}, which is not installed: {how}")

    def action_repeat(self, action_repeat: Optional[int]) -> int:
        """``action_repeat``, or the suite's default when None."""
        return self.default_action_repeat if action_repeat is None else action_repeat

    def env_params(self, env_id: str, env_params) -> dict:
        """The canonical environment settings of ``env_id`` (a plain dict; ``{}`` for None):
        :attr:`check_params`'s, else a JSON-plain copy (:func:`tdmpc2core.envs.params.canonical`).
        Plain Python: nothing is imported or built.

        Raises:
            ValueError: not a mapping, not plain data, or a key or value the suite refuses.
        """
        from tdmpc2core.envs.params import canonical

        if self.check_params is None or env_params is None:
            return canonical(env_params, env_id)
        return self.check_params(env_id, env_params)

    def time_limit(self, env_id: str, action_repeat: int, episode_length: Optional[int], env_params=None) -> int:
        """T in agent steps of ``env_id`` (see :func:`tdmpc2core.envs.time_limit`):
        ``episode_length // action_repeat`` (``episode_length`` None:
        :data:`DEFAULT_EPISODE_LENGTH`), or for a suite with its own time limit, that limit
        (``env_params[time_limit_key]`` when set) ``// action_repeat``.

        Raises:
            ValueError: bad ``action_repeat``/``episode_length``; an own time limit shorter
                than ``action_repeat``; for a suite with its own time limit, an
                ``episode_length`` other than that limit (the limit named: the value would
                not take effect).
        """
        return self.sim_episode_length(env_id, action_repeat, episode_length, env_params) // action_repeat

    def sim_episode_length(self, env_id: str, action_repeat: int, episode_length: Optional[int],
                           env_params=None) -> int:
        """The simulator steps of an episode of ``env_id`` that take effect, T x
        ``action_repeat`` (:meth:`time_limit`; what runs and the resolved configuration record
        as ``episode_length``). Plain Python: nothing is built.

        Raises:
            ValueError: as :meth:`time_limit`.
        """
        given = episode_length is not None
        length = episode_length if given else DEFAULT_EPISODE_LENGTH
        check_repeat_and_length(action_repeat, length, check_length=self.keeps_episode_length)
        if self.keeps_episode_length:
            return length
        if given and (isinstance(length, bool) or not isinstance(length, int) or length < 1):
            raise ValueError(f"episode_length must be a positive integer (simulator steps) or None, got {length!r}")
        steps, where = self.own_time_limit[env_id], "its own time limit"
        if self.time_limit_key is not None and isinstance(env_params, Mapping) and self.time_limit_key in env_params:
            steps, where = int(env_params[self.time_limit_key]), f"env_params {self.time_limit_key}"
        if steps // action_repeat < 1:
            raise ValueError(f"{env_id!r}: max_steps_in_episode={steps} is shorter than "
                             f"action_repeat={action_repeat}")
        effective = (steps // action_repeat) * action_repeat
        if episode_length is not None and episode_length not in (steps, effective):
            how = (f"; a longer or shorter episode: env_params {{{self.time_limit_key}: N}}"
                   if self.time_limit_key is not None else "")
            raise ValueError(
                f"episode_length={episode_length} for {env_id!r}: the {self.name} suite ends its episodes at {where}, "
                f"{steps} simulator steps (T = {steps // action_repeat} agent steps at action_repeat="
                f"{action_repeat}), so that length would not take effect; leave episode_length out or "
                f"give {effective}{how}")
        return effective

    def return_range(self, sim_steps: int) -> Optional[tuple[float, float]]:
        """(low, high) returns of an episode of ``sim_steps`` simulator steps, or None."""
        if self.report.reward_per_step is None:
            return None
        lo, hi = self.report.reward_per_step
        return (float(lo) * sim_steps, float(hi) * sim_steps)

    def make(self, env_id: str, *, action_repeat: Optional[int] = None, episode_length: Optional[int] = None,
             env_params=None, backend: Optional[str] = None, obs: str = "state"):
        """Check the arguments, then :attr:`build` the env (see :func:`tdmpc2core.envs.make_env`).

        Raises:
            ValueError: an id this suite does not accept, a bad repeat or length (an
                ``episode_length`` a suite with its own time limit would not keep, the limit
                named: :meth:`sim_episode_length`), a ``backend``
                for a suite that takes none, ``env_params`` the suite refuses
                (:meth:`env_params`), an ``obs`` the suite cannot give (:attr:`obs_types`);
                ImportError: a required package is missing.
        """
        if env_id not in self.ids:
            raise ValueError(f"env id {env_id!r} is not a {self.name} id; accepted: {list(self.ids)}")
        check_obs(obs)
        if obs not in self.obs_types:
            givers = [s.name for s in suites() if obs in s.obs_types]
            raise ValueError(f"obs={obs!r} is not available for {env_id!r}: the {self.name} suite gives "
                             f"{list(self.obs_types)} observations; {obs!r} is given by: {givers} (as in the "
                             "official code, pixel observations are dm_control's only)")
        action_repeat = self.action_repeat(action_repeat)
        check_repeat_and_length(action_repeat, DEFAULT_EPISODE_LENGTH if episode_length is None else episode_length,
                                check_length=self.keeps_episode_length)
        if backend is not None and not self.takes_backend:
            takers = [s.name for s in suites() if s.takes_backend]
            raise ValueError(f"backend={backend!r} applies only to {' and '.join(takers)} envs; {env_id!r} is a "
                             f"{self.name} env{self.backend_hint}")
        if isinstance(env_params, Mapping):  # checked as the pipeline checks it (an EnvParams object: by build)
            self.env_params(env_id, env_params)
        err = self.install_error()
        if err is not None:
            raise err
        params_given = env_params if isinstance(env_params, Mapping) else None
        if self.time_limit_key is not None and env_params is not None and params_given is None:
            # an EnvParams object: its time-limit field, for the length in effect
            steps = getattr(env_params, self.time_limit_key, None)
            params_given = {} if steps is None else {self.time_limit_key: int(steps)}
        episode_length = self.sim_episode_length(env_id, action_repeat, episode_length, params_given)
        extra = {} if obs == "state" else {"obs": obs}
        return self.build(env_id, action_repeat=action_repeat, episode_length=episode_length,
                          env_params=env_params, backend=backend, **extra)


#: the observation types (spec §2): flat float32 state vectors, or 64x64 RGB frame stacks
OBS_TYPES = ("state", "rgb")


def check_obs(obs) -> str:
    """``obs`` if it is one of :data:`OBS_TYPES`, else ValueError naming it and the accepted ones."""
    if not isinstance(obs, str) or obs not in OBS_TYPES:
        raise ValueError(f"obs={obs!r}; accepted: {list(OBS_TYPES)}")
    return obs


_REGISTRY: dict[str, Suite] = {}
_OWNER: dict[str, str] = {}  # env id -> suite name
_BUILTIN: set = set()  # the names of the built-in suites (tdmpc2core.envs.suites.BUILTIN)


def register_suite(suite: Suite) -> Suite:
    """Add ``suite`` to the registry and return it.

    Raises:
        TypeError: not a :class:`Suite`.
        ValueError: a suite of that name is registered, or one of its ids is another suite's.
    """
    if not isinstance(suite, Suite):
        raise TypeError(f"register_suite takes a Suite, got {type(suite).__name__}")
    if suite.name in _REGISTRY:
        raise ValueError(f"a suite named {suite.name!r} is already registered; registered: {list(_REGISTRY)}")
    taken = {i: _OWNER[i] for i in suite.ids if i in _OWNER}
    if taken:
        raise ValueError(f"suite {suite.name!r}: env id(s) already owned by another suite: {taken}")
    if len(set(suite.ids)) != len(suite.ids):
        raise ValueError(f"suite {suite.name!r} lists an env id twice")
    _REGISTRY[suite.name] = suite
    _OWNER.update({i: suite.name for i in suite.ids})
    return suite


def register_builtin(builtin) -> None:
    """Register the built-in suites (:data:`tdmpc2core.envs.suites.BUILTIN`, in order), once:
    what the package's ``__init__`` does before anything can ask the registry."""
    for suite in builtin:
        if suite.name not in _BUILTIN:
            register_suite(suite)
            _BUILTIN.add(suite.name)


def unregister_suite(name: str) -> None:
    """Remove a suite registered at run time (tests). Raises ValueError: a built-in or unknown one."""
    if name not in _REGISTRY or name in _BUILTIN:
        raise ValueError(f"cannot unregister suite {name!r}: not registered at run time")
    suite = _REGISTRY.pop(name)
    for i in suite.ids:
        _OWNER.pop(i, None)


def suites() -> list[Suite]:
    """Every registered suite, in registration order (the built-in ones first)."""
    return list(_REGISTRY.values())


_RAISE = object()


def get_suite(name: str, default: Any = _RAISE) -> Suite:
    """The suite named ``name`` (an ``EnvSpec.suite``), or ``default`` when given and none is
    registered under that name (a prebuilt env of an unregistered suite).

    Raises:
        ValueError: unknown name and no ``default`` (lists the registered ones).
    """
    if name not in _REGISTRY:
        if default is not _RAISE:
            return default
        raise ValueError(f"unknown suite {name!r}; registered: {list(_REGISTRY)}")
    return _REGISTRY[name]


def suite_for(env_id: str) -> Suite:
    """The suite that owns ``env_id``.

    Raises:
        ValueError: an id a suite recognises but refuses (its own message), or an unknown id:
            one line of at most 400 characters (:func:`.suggest.unknown_message`) with up to
            three close matches (case and ``-``/``_`` ignored), the ids of the suite the id
            looks most like (closest first, at most 10, then how many more) and the command
            that lists every id (``tdmpc2 envs``).
    """
    if isinstance(env_id, str) and env_id in _OWNER:
        return _REGISTRY[_OWNER[env_id]]
    for s in _REGISTRY.values():
        err = s.refuse(env_id) if s.refuse is not None else None
        if err is not None:
            raise err
    every = list(_OWNER)
    close = close_ids(str(env_id), every)
    nearest = close[0] if close else max(every, key=lambda i: similarity(str(env_id), i))
    suite = _REGISTRY[_OWNER[nearest]]
    raise ValueError(unknown_message(f"unknown env id {shown(env_id)}.", str(env_id), suite.name, suite.ids, close))


def report_facts() -> dict[str, dict]:
    """{suite name: :class:`SuiteReport` fields as a dict} in report order (rank, then
    registration): the plain data :mod:`tdmpc2core.report.analysis` takes (it imports no
    ``envs/``)."""
    ordered = sorted(enumerate(suites()), key=lambda p: (p[1].report.rank, p[0]))
    return {s.name: dataclasses.asdict(s.report) for _, s in ordered}


def packages() -> tuple[str, ...]:
    """Every distribution the registered suites need, in registration order, without repeats:
    the suite part of :func:`tdmpc2core.io.provenance.packages`."""
    out: dict[str, None] = {}
    for s in suites():
        out.update({dist: None for dist in s.requires})
    return tuple(out)


def check_repeat_and_length(action_repeat: int, episode_length: int, *, check_length: bool):
    """Validate ``action_repeat`` (and, if asked, ``episode_length``).

    Raises:
        ValueError: ``action_repeat`` is not an int >= 1; or (``check_length``)
            ``episode_length`` is not a positive int divisible by ``action_repeat``.
    """
    if isinstance(action_repeat, bool) or not isinstance(action_repeat, int) or action_repeat < 1:
        raise ValueError(f"action_repeat must be an integer >= 1, got {action_repeat!r}")
    if check_length:
        if isinstance(episode_length, bool) or not isinstance(episode_length, int) or episode_length < 1:
            raise ValueError(
                f"episode_length must be a positive integer (simulator steps), got {episode_length!r}"
            )
        if episode_length % action_repeat != 0:
            raise ValueError(
                f"episode_length={episode_length} (simulator steps) is not divisible by "
                f"action_repeat={action_repeat}; the time limit T = episode_length // "
                f"action_repeat agent steps must cover exactly episode_length simulator steps"
            )


__all__ = ["SCORES", "DEFAULT_EPISODE_LENGTH", "OBS_TYPES", "check_obs", "Suite", "SuiteReport", "register_suite", "register_builtin", "unregister_suite", "suites", "get_suite",
           "suite_for", "report_facts", "packages", "check_repeat_and_length"]
