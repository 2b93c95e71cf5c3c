"""Episode replays as JAX arrays, and slice sampling (spec §9).

Two layouts share the sampling rule and :func:`committed_episodes`:

* :class:`Replay` (fixed-length episodes, the paper-era agent): described below.
* :class:`EpisodicReplay` (``episodic=True``, variable-length episodes, spec §11): a ring of
  rows sized in rows, with an episode table; see its docstring.

Fixed-length layout: a ring of ``num_slots`` episode slots, each holding one episode's ``T + 1`` rows
(row 0 is the reset row: the initial observation, NaN action and reward, as the reference
stores it; row t+1 holds o_{t+1}, a_t, r_t). ``buffer_size`` counts agent steps
(transitions): the ring keeps ``capacity_episodes = ceil(min(buffer_size, run length) / T)``
complete episodes, and the reset rows are held on top of that (one per episode), plus one
slot per environment for the episode in progress. Eviction is by whole episodes, oldest first
(the reference's row ring shortens the oldest episode instead; docs/deviations.md R1).

Only complete episodes are sampled (the reference adds an episode to its buffer when it
ends). Sampling (torchrl SliceSampler, ``strict_length``): B episodes uniformly with
replacement over the committed episodes, then a start uniformly in [0, len - (H + 1)],
H + 1 consecutive rows; slices never cross episodes.

Pixel observations (``obs="rgb"``, spec §2 "Pixels", §9 "uint8 for rgb"): an observation
is the stack of the last 3 frames (u8[9 * 64 * 64], oldest frame first), but the fixed-length
replay stores ONE frame per row, the newest (u8[3 * 64 * 64]; :func:`init_replay` with
``frames=3``), and :func:`sample` rebuilds each row's stack from rows r-2, r-1, r of its
episode, clamped at the episode's row 0. That is exact: the env refills the stack with the
reset frame at a reset, so row 0's stack is its frame three times, row 1's is (f0, f0, f1),
and so on. It needs a third of the memory: the paper's pixel protocol (1M agent steps,
buffer_size 1M: 2001 slots of 501 rows) holds 12.3 GB of frames instead of 37.0 GB of stacks
(docs/architecture.md, "Replay memory"), so it fits a 24 GB GPU. The episodic replay has no
frame layout (pixels are refused in episodic mode).
"""
from __future__ import annotations

import math
from typing import NamedTuple, Union

import jax
import jax.numpy as jnp

from ..model.config import capacity_episodes  # noqa: F401 (one definition: the workflow's checks use it)
from ..model.update import Batch


#: frames per pixel observation (spec §2): the replay stores one, sampling stacks this many
PIXEL_FRAMES = 3


class Replay(NamedTuple):
    obs: jnp.ndarray          # [S, T+1, obs_dim] f32; pixels: [S, T+1, frame] u8, one frame per row
    action: jnp.ndarray       # [S, T+1, A] f32, NaN in row 0
    reward: jnp.ndarray       # [S, T+1] f32, NaN in row 0
    terminated: jnp.ndarray   # [S, T+1] f32 (1.0 on a terminal step), NaN in row 0
    allocated: jnp.ndarray    # int32: slots handed out so far (slot = allocated % S)
    committed: jnp.ndarray    # int32: episodes completed and added so far
    env_slot: jnp.ndarray     # [n_envs] int32: slot each env is writing




def init_replay(num_complete: int, n_envs: int, T: int, obs_dim: int, action_dim: int,
                obs_dtype="float32", frames: int = 1) -> Replay:
    """An empty fixed-length replay of ``num_complete + n_envs`` episode slots of ``T + 1`` rows.

    ``obs_dtype``: the observations' dtype (f32 state; u8 pixels). ``frames``: the frames in
    one observation; with ``frames > 1`` (pixels: 3, obs_dim = 3 * frame) a row holds only the
    newest frame, ``obs_dim // frames`` values, and :func:`sample` rebuilds the stacks (module
    docstring). Raises ValueError: ``frames`` < 1 or not dividing ``obs_dim``; a layout other
    than f32 with frames=1 or u8 with frames=3.
    """
    S = num_complete + n_envs
    frames = int(frames)
    if frames < 1 or obs_dim % frames:
        raise ValueError(f"frames={frames}: must be >= 1 and divide obs_dim={obs_dim}")
    if (frames > 1) != (jnp.dtype(obs_dtype) == jnp.uint8) or frames not in (1, PIXEL_FRAMES):
        raise ValueError(f"obs_dtype={jnp.dtype(obs_dtype).name!r} with frames={frames}: accepted are float32 "
                         f"observations with frames=1 (state) and uint8 pixel stacks with frames={PIXEL_FRAMES} "
                         "(a frame per row)")
    return Replay(
        obs=jnp.zeros((S, T + 1, obs_dim // frames), obs_dtype),
        action=jnp.full((S, T + 1, action_dim), jnp.nan, jnp.float32),
        reward=jnp.full((S, T + 1), jnp.nan, jnp.float32),
        terminated=jnp.full((S, T + 1), jnp.nan, jnp.float32),
        allocated=jnp.zeros((), jnp.int32),
        committed=jnp.zeros((), jnp.int32),
        env_slot=jnp.zeros((n_envs,), jnp.int32),
    )


def replay_nbytes(num_complete: int, n_envs: int, T: int, obs_dim: int, action_dim: int, **layout) -> int:
    """Bytes of the arrays :func:`init_replay` allocates with these arguments (``layout``: its
    ``obs_dtype`` and ``frames``), computed from shapes alone (nothing is allocated). E.g. the
    paper's pixel protocol, ``replay_nbytes(2000, 1, 500, 36864, 6, obs_dtype="uint8",
    frames=3)``: 12.35e9 (36.99e9 with the stacks stored whole)."""
    shapes = jax.eval_shape(lambda: init_replay(num_complete, n_envs, T, obs_dim, action_dim, **layout))
    return int(sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(shapes)))


def num_slots(replay: Replay) -> int:
    return replay.obs.shape[0]


def stores_frames(replay: Replay) -> bool:
    """Whether the replay holds one pixel frame per row (u8 observations; :func:`init_replay`
    with ``frames`` = :data:`PIXEL_FRAMES`), its stacks rebuilt at sampling."""
    return replay.obs.dtype == jnp.uint8


def _row_obs(replay: Replay, obs):
    """What a row stores of observations ``obs`` [..., obs_dim]: all of it, or with frames the
    newest frame (the last ``frame`` values of the stack, oldest frame first)."""
    if not stores_frames(replay):
        return obs
    return obs[..., obs.shape[-1] - replay.obs.shape[-1]:]


def stacked_obs(replay: Replay, slot, rows):
    """Observations of rows ``rows`` [...] (int) of episode slots ``slot`` (broadcastable):
    [..., obs_dim]. With frames, the stack of rows r-2, r-1, r clamped at row 0 (oldest first)."""
    if not stores_frames(replay):
        return replay.obs[slot, rows]
    return jnp.concatenate([replay.obs[slot, jnp.maximum(rows - k, 0)] for k in range(PIXEL_FRAMES - 1, -1, -1)],
                           axis=-1)


def num_valid(replay: Replay):
    """Committed episodes still held: min(committed, S - n_envs)."""
    return jnp.minimum(replay.committed, num_slots(replay) - replay.env_slot.shape[0])


def start_episodes(replay: Replay, obs0, commit: bool | jnp.ndarray, keep=None) -> Replay:
    """Commit the episodes in progress (if ``commit``) and give each env a fresh slot whose
    row 0 is its reset observation ``obs0`` [n_envs, obs_dim].

    ``keep`` [n_envs] bool (default all): only these envs' episodes are committed (a dropped
    episode, e.g. one with a non-finite observation, never is). The kept episodes are moved to
    the front of the round's slots, in env order, so committed episodes stay contiguous in
    the ring; the dropped slots are handed out again at once. With every episode kept the
    arrays are unchanged by the move.
    """
    n_envs = obs0.shape[0]
    S = num_slots(replay)
    keep = jnp.ones((n_envs,), bool) if keep is None else keep
    keep = keep & commit
    g = jnp.sum(keep).astype(jnp.int32)
    block = replay.env_slot
    src = block[jnp.argsort(~keep, stable=True)]  # kept episodes first, in env order
    base = jnp.where(commit, replay.allocated - n_envs + g, replay.allocated).astype(jnp.int32)
    slots = (base + jnp.arange(n_envs, dtype=jnp.int32)) % S
    nan_a = jnp.full((n_envs,) + replay.action.shape[2:], jnp.nan, jnp.float32)
    obs, action = replay.obs.at[block].set(replay.obs[src]), replay.action.at[block].set(replay.action[src])
    reward = replay.reward.at[block].set(replay.reward[src])
    terminated = replay.terminated.at[block].set(replay.terminated[src])
    return Replay(
        obs=obs.at[slots, 0].set(_row_obs(replay, obs0)),
        action=action.at[slots, 0].set(nan_a),
        reward=reward.at[slots, 0].set(jnp.nan),
        terminated=terminated.at[slots, 0].set(jnp.nan),
        allocated=base + n_envs,
        committed=replay.committed + g,
        env_slot=slots,
    )


def write_step(replay: Replay, row, obs, action, reward, terminated) -> Replay:
    """Write row ``row`` [n_envs] (= t + 1) of each env's episode: o_{t+1}, a_t, r_t, d_t."""
    s = replay.env_slot
    return replay._replace(
        obs=replay.obs.at[s, row].set(_row_obs(replay, obs)),
        action=replay.action.at[s, row].set(action),
        reward=replay.reward.at[s, row].set(reward),
        terminated=replay.terminated.at[s, row].set(terminated.astype(jnp.float32)),
    )


def committed_slots(replay: Replay):
    """Slot index of the i-th oldest committed episode still held, as a function of i."""
    S = num_slots(replay)
    n_envs = replay.env_slot.shape[0]
    c = num_valid(replay)
    first = replay.allocated - n_envs - c
    return lambda i: (first + i) % S


def sample(replay: Replay, key, batch_size: int, horizon: int) -> Batch:
    """B slices of H+1 rows from committed episodes, time-major (spec §9).

    Returns Batch(obs [H+1, B, O], action [H, B, A], reward [H, B], terminated [H, B]).
    The reset row can start a slice; its NaN action/reward are dropped by the [1:] shift.
    A frame replay gives the stacked u8 observations (:func:`stacked_obs`).
    """
    T1 = replay.obs.shape[1]
    k_ep, k_start = jax.random.split(key)
    c = num_valid(replay)
    i = jax.random.randint(k_ep, (batch_size,), 0, jnp.maximum(c, 1))
    slot = committed_slots(replay)(i)
    start = jax.random.randint(k_start, (batch_size,), 0, T1 - horizon)
    rows = start[:, None] + jnp.arange(horizon + 1)[None]  # [B, H+1]
    obs = stacked_obs(replay, slot[:, None], rows)  # [B, H+1, O]
    action = replay.action[slot[:, None], rows[:, 1:]]
    reward = replay.reward[slot[:, None], rows[:, 1:]]
    term = replay.terminated[slot[:, None], rows[:, 1:]]
    return Batch(
        obs=jnp.swapaxes(obs, 0, 1),
        action=jnp.swapaxes(action, 0, 1),
        reward=jnp.swapaxes(reward, 0, 1),
        terminated=jnp.swapaxes(term, 0, 1),
    )


def committed_episodes(replay: Union[Replay, "EpisodicReplay"]):
    """The complete episodes one seed's replay holds, oldest first, on the host.

    ``replay`` is one seed's replay (no seed axis; jax or numpy arrays). Episodes come in the
    order they were collected: for the fixed-length :class:`Replay`, rounds of ``n_envs``
    episodes in order, env order within a round; for the :class:`EpisodicReplay`, the order
    in which the episodes ended (ties: env index). The episodes in progress are not included.
    An episode that terminated has ``terminated`` True on its last row only.

    Returns:
      (episodes, evicted): ``episodes`` a list of dicts of numpy arrays, one per episode,
      ``obs`` [L, obs_dim] f32, ``action`` [L, A] f32, ``reward`` [L] f32, ``terminated``
      [L] bool, with L = rows (agent steps + 1; row 0 is the reset row, NaN action and
      reward; a frame replay's ``obs`` are the rebuilt u8 stacks [L, obs_dim]); ``evicted``
      the number of complete episodes the ring no longer holds.
    """
    import numpy as np

    if isinstance(replay, EpisodicReplay):
        return _committed_episodes_episodic(replay)
    host = jax.tree_util.tree_map(np.asarray, replay)
    S = host.obs.shape[0]
    n_envs = host.env_slot.shape[0]
    committed = int(host.committed)
    held = min(committed, S - n_envs)
    first = int(host.allocated) - n_envs - held
    episodes = []
    for i in range(held):
        s = (first + i) % S
        term = host.terminated[s]
        ep_obs = host.obs[s]
        if host.obs.dtype == np.uint8:  # frames: the stacks of rows r-2, r-1, r (clamped at 0)
            r = np.arange(ep_obs.shape[0])
            ep_obs = np.concatenate([ep_obs[np.maximum(r - k, 0)] for k in range(PIXEL_FRAMES - 1, -1, -1)], axis=-1)
        episodes.append({
            "obs": ep_obs.copy(),
            "action": host.action[s].copy(),
            "reward": host.reward[s].copy(),
            "terminated": np.nan_to_num(term, nan=0.0) > 0.5,
        })
    return episodes, committed - held


# ======================================================================================
# Variable-length episodes (episodic mode, spec §11)
# ======================================================================================
class EpisodicReplay(NamedTuple):
    """Replay of variable-length episodes (one seed): a ring of rows plus an episode table.

    Rows: the reference's layout (spec §9): one row per environment step, the reset row of
    each episode included (o_0, NaN action, reward and terminated); row t+1 holds o_{t+1},
    a_t, r_t, d_t (d_t = 1.0 on a terminal step, else 0.0). Rows are addressed by an
    absolute row counter; the row of absolute index ``i`` lives at ring position ``i % R``.

    Capacity (docs/deviations.md R1, as the fixed-length replay): ``buffer_size`` counts
    agent steps (transitions). The replay holds whole episodes, newest first, as long as
    their agent steps add up to at most ``C = max(min(buffer_size, run length), T)``
    (:func:`capacity_steps`); older ones are evicted whole (the reference's ring of
    ``min(buffer_size, steps)`` rows shortens the oldest episode instead). The ring has
    ``R = 2 C`` rows: room for the reset rows of up to C held episodes (each has at least one
    step), so a held episode is never overwritten, and a run no longer than ``buffer_size``
    evicts nothing, whatever its episode lengths.

    Episodes enter the ring when complete (the reference adds an episode when it ends),
    copied from the per-env staging area where the episode in progress is written; an
    episode's rows are contiguous in absolute index.

    Episode table (a ring of ``E = C + 1`` entries, more than the episodes C steps can hold,
    indexed by the episode's commit number ``k % E``): ``ep_start`` (absolute row of its
    reset row; the agent steps committed before it are ``ep_start - k``), ``ep_rows`` (rows,
    = agent steps + 1) and ``ep_elig_before`` (how many earlier committed episodes had at
    least ``H + 1`` rows, i.e. could be sampled).

    Staging (per env, ``T + 1`` rows): ``stage_*``; rows above the env's current step are
    stale and never read.
    """

    obs: jnp.ndarray            # [R = 2 C, obs_dim] f32
    action: jnp.ndarray         # [R, A] f32 (NaN in reset rows)
    reward: jnp.ndarray         # [R] f32 (NaN in reset rows)
    terminated: jnp.ndarray     # [R] f32 (NaN in reset rows)
    ep_start: jnp.ndarray       # [E] int32 absolute row of the episode's reset row
    ep_rows: jnp.ndarray        # [E] int32 rows of the episode (agent steps + 1)
    ep_elig_before: jnp.ndarray  # [E] int32 sampleable episodes committed before it
    rows_written: jnp.ndarray   # int32 absolute rows committed so far
    committed: jnp.ndarray      # int32 episodes committed so far
    sampleable: jnp.ndarray     # int32 committed episodes with >= H + 1 rows so far
    longest: jnp.ndarray        # int32 agent steps of the longest committed episode
    stage_obs: jnp.ndarray      # [n_envs, T+1, obs_dim] f32, the episodes in progress
    stage_action: jnp.ndarray   # [n_envs, T+1, A] f32
    stage_reward: jnp.ndarray   # [n_envs, T+1] f32
    stage_terminated: jnp.ndarray  # [n_envs, T+1] f32


def capacity_steps(buffer_size: int, run_agent_steps: int, T: int) -> int:
    """Agent steps the episodic replay holds: ``max(min(buffer_size, run length), T)``
    (spec §1.3's ``min(buffer_size, steps)``, in agent steps as docs/deviations.md R1; at least
    one whole episode)."""
    return max(min(int(buffer_size), max(int(run_agent_steps), 1)), int(T))


def init_episodic_replay(capacity: int, n_envs: int, T: int, obs_dim: int, action_dim: int) -> EpisodicReplay:
    """An empty :class:`EpisodicReplay` holding ``capacity`` agent steps (``>= T``; a ring of
    ``2 capacity`` rows) and ``n_envs`` staging areas of ``T + 1`` rows.

    Raises:
      ValueError: ``capacity < T`` (one whole episode must fit).
    """
    if capacity < T:
        raise ValueError(f"capacity={capacity} agent steps cannot hold one episode of T = {T} steps")
    C = int(capacity)
    R, E = 2 * C, C + 1
    z = lambda: jnp.zeros((), jnp.int32)
    return EpisodicReplay(
        obs=jnp.zeros((R, obs_dim), jnp.float32),
        action=jnp.full((R, action_dim), jnp.nan, jnp.float32),
        reward=jnp.full((R,), jnp.nan, jnp.float32),
        terminated=jnp.full((R,), jnp.nan, jnp.float32),
        ep_start=jnp.zeros((E,), jnp.int32), ep_rows=jnp.zeros((E,), jnp.int32),
        ep_elig_before=jnp.zeros((E,), jnp.int32),
        rows_written=z(), committed=z(), sampleable=z(), longest=z(),
        stage_obs=jnp.zeros((n_envs, T + 1, obs_dim), jnp.float32),
        stage_action=jnp.full((n_envs, T + 1, action_dim), jnp.nan, jnp.float32),
        stage_reward=jnp.full((n_envs, T + 1), jnp.nan, jnp.float32),
        stage_terminated=jnp.full((n_envs, T + 1), jnp.nan, jnp.float32),
    )


def episodic_capacity(replay: EpisodicReplay) -> int:
    """C, the agent steps the replay holds (its ring has 2 C rows)."""
    return replay.obs.shape[0] // 2


def commit_and_restart(replay: EpisodicReplay, ending, steps, restart, obs0, min_rows: int) -> EpisodicReplay:
    """Commit the episodes of the envs in ``ending`` and start new ones in ``restart``.

    Args:
      ending: [n_envs] bool, envs whose episode (``steps`` [n_envs] agent steps, so
        ``steps + 1`` staged rows) is complete; committed in env order.
      restart: [n_envs] bool, envs that start an episode whose reset observation is
        ``obs0`` [n_envs, obs_dim] (staging row 0; NaN action, reward, terminated).
      min_rows: H + 1, the rows a slice needs (episodes with fewer are never sampled).

    Writes are unconditional scatters whose masked-out rows write back what is there (no
    data-dependent branch: under the seed vmap a branch would copy the whole ring).
    """
    R = replay.obs.shape[0]
    E = replay.ep_start.shape[0]
    n_envs, T1 = replay.stage_obs.shape[:2]
    j = jnp.arange(T1, dtype=jnp.int32)

    def commit_one(e, r: EpisodicReplay) -> EpisodicReplay:
        end = ending[e]
        L = jnp.where(end, steps[e] + 1, 0).astype(jnp.int32)
        idx = (r.rows_written + j) % R
        w = j < L

        def put(ring, stage):
            keep = ring[idx]
            mask = w.reshape((T1,) + (1,) * (stage.ndim - 1))
            return ring.at[idx].set(jnp.where(mask, stage, keep))

        k = r.committed % E
        put_k = lambda tab, v: tab.at[k].set(jnp.where(end, v, tab[k]))
        return r._replace(
            obs=put(r.obs, r.stage_obs[e]), action=put(r.action, r.stage_action[e]),
            reward=put(r.reward, r.stage_reward[e]), terminated=put(r.terminated, r.stage_terminated[e]),
            ep_start=put_k(r.ep_start, r.rows_written), ep_rows=put_k(r.ep_rows, L),
            ep_elig_before=put_k(r.ep_elig_before, r.sampleable),
            rows_written=r.rows_written + L,
            committed=r.committed + end.astype(jnp.int32),
            sampleable=r.sampleable + (end & (L >= min_rows)).astype(jnp.int32),
            longest=jnp.maximum(r.longest, jnp.where(end, steps[e], 0)).astype(jnp.int32),
        )

    replay = jax.lax.fori_loop(0, n_envs, commit_one, replay)
    nan_a = jnp.full(replay.stage_action.shape[::2], jnp.nan, jnp.float32)  # [n_envs, A]
    r0 = restart[:, None]
    return replay._replace(
        stage_obs=replay.stage_obs.at[:, 0].set(jnp.where(r0, obs0, replay.stage_obs[:, 0])),
        stage_action=replay.stage_action.at[:, 0].set(jnp.where(r0, nan_a, replay.stage_action[:, 0])),
        stage_reward=replay.stage_reward.at[:, 0].set(jnp.where(restart, jnp.nan, replay.stage_reward[:, 0])),
        stage_terminated=replay.stage_terminated.at[:, 0].set(
            jnp.where(restart, jnp.nan, replay.stage_terminated[:, 0])),
    )


def stage_step(replay: EpisodicReplay, row, obs, action, reward, terminated) -> EpisodicReplay:
    """Write staging row ``row`` [n_envs] (= t + 1) of each env: o_{t+1}, a_t, r_t, d_t."""
    e = jnp.arange(replay.stage_obs.shape[0])
    return replay._replace(
        stage_obs=replay.stage_obs.at[e, row].set(obs),
        stage_action=replay.stage_action.at[e, row].set(action),
        stage_reward=replay.stage_reward.at[e, row].set(reward),
        stage_terminated=replay.stage_terminated.at[e, row].set(terminated.astype(jnp.float32)),
    )


def _first_true(pred, lo, hi, n_iter: int):
    """Smallest k in [lo, hi) with ``pred(k)`` for a monotone (False..True) predicate; hi if
    none. Elementwise over array ``lo``/``hi``; ``n_iter`` >= log2(hi - lo) + 1 (static)."""
    def body(_, c):
        lo, hi = c
        mid = (lo + hi) // 2
        p = pred(mid)
        active = lo < hi
        return jnp.where(active & ~p, mid + 1, lo), jnp.where(active & p, mid, hi)

    return jax.lax.fori_loop(0, n_iter, body, (lo, hi))[0]


def _search_iters(E: int) -> int:
    return int(math.ceil(math.log2(E + 1))) + 1


def first_held(replay: EpisodicReplay):
    """Commit number of the oldest episode still held (= ``committed`` if none): the oldest k
    whose agent steps together with those of every later episode are at most C."""
    C = episodic_capacity(replay)
    E = replay.ep_start.shape[0]
    c = replay.committed
    lo = jnp.maximum(c - E, 0)
    steps_written = replay.rows_written - c  # every committed row but the reset rows
    return _first_true(lambda k: steps_written - (replay.ep_start[k % E] - k) <= C, lo, c, _search_iters(E))


def num_sampleable(replay: EpisodicReplay):
    """Held episodes with at least H + 1 rows (the ones :func:`sample_episodic` draws from)."""
    E = replay.ep_start.shape[0]
    first = first_held(replay)
    lo = jnp.where(first < replay.committed, replay.ep_elig_before[first % E], replay.sampleable)
    return replay.sampleable - lo


def sample_episodic(replay: EpisodicReplay, key, batch_size: int, horizon: int) -> Batch:
    """B slices of H+1 rows from held episodes of at least H+1 rows, time-major (spec §9).

    torchrl's SliceSampler with ``strict_length``: B episodes drawn uniformly with
    replacement over the held episodes that have at least H+1 rows, then a start uniformly
    in [0, rows - (H+1)]; H+1 consecutive rows; slices never cross episodes. Returns
    Batch(obs [H+1, B, O], action [H, B, A], reward [H, B], terminated [H, B]). The caller
    must not use the batch when :func:`num_sampleable` is 0 (it would be garbage).
    """
    R = replay.obs.shape[0]
    E = replay.ep_start.shape[0]
    k_ep, k_start = jax.random.split(key)
    first = first_held(replay)
    lo = jnp.where(first < replay.committed, replay.ep_elig_before[first % E], replay.sampleable)
    n = replay.sampleable - lo
    u = lo + jax.random.randint(k_ep, (batch_size,), 0, jnp.maximum(n, 1))  # the u-th sampleable episode
    # the episode k with ep_elig_before[k] <= u < ep_elig_before[k + 1]: the last k whose
    # count of earlier sampleable episodes is <= u (that one is sampleable itself)
    firsts = jnp.full((batch_size,), first, jnp.int32)
    ends = jnp.full((batch_size,), replay.committed, jnp.int32)
    k = _first_true(lambda m: replay.ep_elig_before[m % E] > u, firsts, ends, _search_iters(E)) - 1
    slot = k % E
    rows = replay.ep_rows[slot]
    start = jax.random.randint(k_start, (batch_size,), 0, jnp.maximum(rows - horizon, 1))
    idx = (replay.ep_start[slot][:, None] + start[:, None] + jnp.arange(horizon + 1)[None]) % R  # [B, H+1]
    return Batch(
        obs=jnp.swapaxes(replay.obs[idx], 0, 1),
        action=jnp.swapaxes(replay.action[idx[:, 1:]], 0, 1),
        reward=jnp.swapaxes(replay.reward[idx[:, 1:]], 0, 1),
        terminated=jnp.swapaxes(replay.terminated[idx[:, 1:]], 0, 1),
    )


def _committed_episodes_episodic(replay: EpisodicReplay):
    import numpy as np

    host = jax.tree_util.tree_map(np.asarray, replay)
    R = host.obs.shape[0]
    C, E = R // 2, host.ep_start.shape[0]
    committed, written = int(host.committed), int(host.rows_written)
    steps_written = written - committed
    first = max(committed - E, 0)
    while first < committed and steps_written - (int(host.ep_start[first % E]) - first) > C:
        first += 1
    episodes = []
    for k in range(first, committed):
        idx = (int(host.ep_start[k % E]) + np.arange(int(host.ep_rows[k % E]))) % R
        episodes.append({
            "obs": host.obs[idx].copy(),
            "action": host.action[idx].copy(),
            "reward": host.reward[idx].copy(),
            "terminated": np.nan_to_num(host.terminated[idx], nan=0.0) > 0.5,
        })
    return episodes, committed - len(episodes)
