"""tdmpc2core.run.program_cache: traced programs kept across processes (jax.export), used only
under a key that holds everything tracing depends on. The agent's real programs through the
cache, across processes, are pinned bit for bit in tests/test_checkpoint.py
(test_sigterm_then_rerun_equals_whole)."""
from __future__ import annotations

import json
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tdmpc2core.run import program_cache as pc
from tdmpc2core.run.compiled import compiling_note, per_seed


class State(NamedTuple):
    w: jax.Array
    key: jax.Array
    t: jax.Array


def step(s: State, x, n):
    def body(i, s):
        k, sub = jax.random.split(s.key)
        w = jnp.tanh(s.w @ s.w.T) @ s.w + 0.1 * jax.random.normal(sub, s.w.shape) + x
        return State(w, k, s.t + 1)

    return jax.lax.fori_loop(0, n, body, s)


def make_state():
    return State(jnp.arange(12.0).reshape(3, 4) / 12, jax.random.PRNGKey(3), jnp.int32(0))


def program(timings, fingerprint):
    return per_seed(step, name="toy", compile_seconds=timings, batched=False, donate_argnums=(0,),
                    fingerprint=fingerprint)


def leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def test_a_program_is_stored_once_then_loaded_without_tracing_and_computes_the_same(tmp_path, monkeypatch):
    monkeypatch.setenv(pc.PROGRAM_CACHE_ENV, str(tmp_path))
    x, n = jnp.float32(0.5), jnp.int32(7)
    want = leaves(jax.jit(step)(make_state(), x, n))
    t1, t2, t3 = {}, {}, {}
    got1 = leaves(program(t1, {"toy": 1})(make_state(), x, n))
    files = sorted(tmp_path.glob("toy-*.jaxprog"))
    assert len(files) == 1 and t1["toy"]["program_cache"] == "stored"
    got2 = leaves(program(t2, {"toy": 1})(make_state(), x, n))  # a new program object: as a new process would
    assert t2["toy"]["program_cache"] == "loaded" and sorted(tmp_path.glob("toy-*.jaxprog")) == files
    for a, b, c in zip(want, got1, got2):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    assert "not traced, from the program cache: toy" in compiling_note(t2)
    assert "program cache" not in compiling_note(t1)
    # where each one's seconds went (a slow warm start on an accelerator says which step was slow)
    assert set(t1["toy"]["program_cache_s"]) == {"key", "trace_export", "lower", "compile"}
    assert set(t2["toy"]["program_cache_s"]) == {"key", "read", "deserialize", "lower", "compile"}
    assert all(v >= 0 for t in (t1, t2) for v in t["toy"]["program_cache_s"].values())
    # XLA's sizes of the executable, stored and loaded alike: the arguments are the state's bytes
    state_bytes = sum(a.nbytes for a in leaves((make_state(), x, n)))
    assert t1["toy"]["executable_bytes"] == t2["toy"]["executable_bytes"]
    assert t1["toy"]["executable_bytes"]["arguments"] == state_bytes
    # another fingerprint (another configuration): another program, traced and stored
    program(t3, {"toy": 2})(make_state(), x, n)
    assert t3["toy"]["program_cache"] == "stored" and len(list(tmp_path.glob("toy-*.jaxprog"))) == 2
    # no folder named, or no fingerprint: traced as usual, nothing written
    monkeypatch.delenv(pc.PROGRAM_CACHE_ENV)
    t4 = {}
    program(t4, {"toy": 1})(make_state(), x, n)
    assert "program_cache" not in t4["toy"] and "program_cache_s" not in t4["toy"]
    # what JAX reported while this program was traced and compiled, and nothing after
    events = dict(t4["toy"]["jax_events"])
    assert events["core/compile/jaxpr_trace_duration"] > 0
    jax.jit(lambda v: v * 3.0)(jnp.arange(5.0)).block_until_ready()
    assert t4["toy"]["jax_events"] == events
    monkeypatch.setenv(pc.PROGRAM_CACHE_ENV, str(tmp_path))
    program(t4, None)(make_state(), x, n)
    assert "program_cache" not in t4["toy"] and len(list(tmp_path.glob("toy-*.jaxprog"))) == 2


def test_a_restored_state_compiles_the_program_a_fresh_one_did(monkeypatch):
    """A fresh run calls a stored program with committed arrays (an init program's output), a
    resumed one with uncommitted arrays (read from a checkpoint): both must lower to the same
    module, else the resumed process misses the JAX compilation cache entry its first process
    wrote (the training chunk compiled again: tests/test_checkpoint.py's rerun)."""
    x, n = jnp.float32(0.5), jnp.int32(7)
    fresh = jax.device_put(make_state(), jax.devices()[0])  # committed, as a program's outputs are
    restored = jax.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a)), make_state())
    assert all(a.committed for a in jax.tree_util.tree_leaves(fresh))
    assert not any(a.committed for a in jax.tree_util.tree_leaves(restored))
    texts = []
    real = jax.stages.Lowered.compile

    def keep_text(lowered, *a, **k):
        texts.append(lowered.as_text())
        return real(lowered, *a, **k)

    monkeypatch.setattr(jax.stages.Lowered, "compile", keep_text)
    exported, in_tree, out_tree = pc.export_program(jax.jit(step), (fresh, x, n))
    got = [leaves(pc.StoredProgram(exported, in_tree, out_tree, (0,), (s, x, n), "loaded")(s, x, n))
           for s in (fresh, restored)]
    assert len(texts) == 2 and texts[0] == texts[1]
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)


def test_the_key_holds_what_tracing_depends_on(monkeypatch):
    args = (make_state(), jnp.float32(0.5), jnp.int32(7))
    base = pc.program_key("toy", {"a": 1}, args, (0,))
    assert pc.program_key("toy", {"a": 1}, args, (0,)) == base
    assert pc.program_key("toy", {"a": 2}, args, (0,)) != base  # the caller's fingerprint
    assert pc.program_key("other", {"a": 1}, args, (0,)) != base  # the program's name
    assert pc.program_key("toy", {"a": 1}, args, ()) != base  # the donated arguments
    assert pc.program_key("toy", {"a": 1}, (make_state(), jnp.float64(0.5) if jax.config.jax_enable_x64
                                            else 0.5, jnp.int32(7)), (0,)) != base  # a weak type
    wider = State(jnp.zeros((3, 5)), jax.random.PRNGKey(3), jnp.int32(0))
    assert pc.program_key("toy", {"a": 1}, (wider, jnp.float32(0.5), jnp.int32(7)), (0,)) != base  # a shape
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")  # the environment
    assert pc.program_key("toy", {"a": 1}, args, (0,)) != base
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/elsewhere")  # where caches live: not part of it
    assert pc.program_key("toy", {"a": 1}, args, (0,)) == base
    with jax.default_matmul_precision("bfloat16"):  # a JAX setting, even a context-local one
        assert pc.program_key("toy", {"a": 1}, args, (0,)) != base
    monkeypatch.setattr(pc, "code_digest", lambda: "0" * 64)  # the library's source
    assert pc.program_key("toy", {"a": 1}, args, (0,)) != base
    monkeypatch.undo()
    monkeypatch.setattr(pc, "distributions", lambda: ("jax==0.0.1",))  # an installed package's version
    assert pc.program_key("toy", {"a": 1}, args, (0,)) != base
    monkeypatch.undo()
    monkeypatch.setattr(pc, "package_files", lambda: (("gymnax", ["/elsewhere"], "0"),))  # an edited or shadowing copy
    assert pc.program_key("toy", {"a": 1}, args, (0,)) != base
    monkeypatch.undo()
    monkeypatch.setenv("FLAX_FIX_RNG_SEPARATOR", "true")  # any library's variable (helper-12 found Flax's missing)
    assert pc.program_key("toy", {"a": 1}, args, (0,)) != base
    monkeypatch.undo()
    import flax

    before = flax.config.flax_fix_rng_separator
    flax.config.update("flax_fix_rng_separator", not before)  # Flax's own settings
    try:
        assert pc.program_key("toy", {"a": 1}, args, (0,)) != base
    finally:
        flax.config.update("flax_fix_rng_separator", before)
    monkeypatch.setenv("SLURM_JOB_ID", "123")  # a scheduler's: not part of it
    assert pc.program_key("toy", {"a": 1}, args, (0,)) == base
    assert pc.program_key("toy", {"a": np.int64(1)}, args, (0,)) == base  # NumPy scalars as their values
    with pytest.raises(TypeError):
        pc.program_key("toy", {"a": object()}, args, (0,))  # a fingerprint JSON cannot hold


class Wrapped:  # as MJX wraps static NumPy arrays in its trees' node data (hashable by content)
    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __eq__(self, other):
        return isinstance(other, Wrapped) and np.array_equal(self.array, other.array)

    def __hash__(self):
        return hash(self.array.tobytes())


def test_the_tree_text_is_the_same_in_every_process_and_sees_wrapped_arrays():
    """str(treedef) shows the address of such node data: MJX's trees never hit the cache
    (helper-12); the key's text shows the arrays' contents instead."""
    from jax.tree_util import register_pytree_node

    class Node:
        def __init__(self, x, static):
            self.x, self.static = x, static

    register_pytree_node(Node, lambda n: ((n.x,), Wrapped(n.static)), lambda aux, ch: Node(ch[0], aux.array))
    a = jax.tree_util.tree_structure(Node(1.0, np.arange(3)))
    b = jax.tree_util.tree_structure(Node(2.0, np.arange(3)))
    c = jax.tree_util.tree_structure(Node(1.0, np.arange(3) + 1))
    assert " at 0x" in str(a) and str(a) != str(b)  # the addresses differ
    assert pc.tree_text(a) == pc.tree_text(b) and pc.tree_text(a) != pc.tree_text(c)


def test_a_damaged_file_is_quarantined_and_the_program_traced_anew(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(pc.PROGRAM_CACHE_ENV, str(tmp_path))
    x, n = jnp.float32(0.5), jnp.int32(3)
    want = leaves(program({}, {"toy": 1})(make_state(), x, n))
    (path,) = tmp_path.glob("toy-*.jaxprog")
    path.write_bytes(path.read_bytes()[:100])  # cut short (a full disk)
    t = {}
    got = leaves(program(t, {"toy": 1})(make_state(), x, n))
    err = capsys.readouterr().err
    assert f"{path} could not be used" in err and "moved to" in err
    assert (tmp_path / pc.QUARANTINE / path.name).exists() and path.exists()  # stored anew
    assert t["toy"]["program_cache"] == "stored"
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)


def test_a_file_whose_program_bytes_were_changed_is_not_used(tmp_path, monkeypatch, capsys):
    """A file that still unpickles but whose program differs from what was written (helper-12:
    a constant's bytes changed; it was loaded silently) is refused by its SHA-256."""
    import pickle

    monkeypatch.setenv(pc.PROGRAM_CACHE_ENV, str(tmp_path))
    x, n = jnp.float32(0.5), jnp.int32(3)
    want = leaves(program({}, {"toy": 1})(make_state(), x, n))
    (path,) = tmp_path.glob("toy-*.jaxprog")
    record = pickle.loads(path.read_bytes())
    blob = bytearray(record["exported"])
    blob[len(blob) // 2] ^= 1
    record["exported"] = bytes(blob)
    path.write_bytes(pickle.dumps(record))
    t = {}
    got = leaves(program(t, {"toy": 1})(make_state(), x, n))
    assert "do not match their SHA-256" in capsys.readouterr().err and t["toy"]["program_cache"] == "stored"
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)


def test_a_folder_that_cannot_be_written_leaves_nothing_and_says_so(tmp_path, monkeypatch, capsys):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv(pc.PROGRAM_CACHE_ENV, str(blocked / "programs"))
    t = {}
    program(t, {"toy": 1})(make_state(), jnp.float32(0.5), jnp.int32(3))
    assert "could not be written" in capsys.readouterr().err and t["toy"]["program_cache"] == "not stored"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_program_with_a_host_callback_is_compiled_as_usual(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(pc.PROGRAM_CACHE_ENV, str(tmp_path))

    def host(x):
        return jax.pure_callback(lambda v: np.asarray(v) * 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    t = {}
    out = per_seed(host, name="host", compile_seconds=t, batched=False, fingerprint={"h": 1})(jnp.arange(3.0))
    np.testing.assert_array_equal(np.asarray(out), [0.0, 2.0, 4.0])
    assert "'host' cannot be stored" in capsys.readouterr().err
    assert "program_cache" not in t["host"] and not list(tmp_path.glob("*.jaxprog"))


def test_without_flatbuffers_the_cache_is_off_said_once_and_nothing_is_traced_for_export(tmp_path, monkeypatch,
                                                                                          capsys):
    # jax.export serializes with the optional package flatbuffers; the TPU machine's JAX came
    # without it, and every program was traced twice (once for an export that could not be
    # written) with a line per program. Now: one line per process, nothing exported
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "flatbuffers" else real(name, *a))
    monkeypatch.setattr(pc, "_SAID_MISSING", [])
    pc.serialization_missing.cache_clear()
    monkeypatch.setattr(pc, "export_program", lambda *a, **k: pytest.fail("exported without flatbuffers"))
    monkeypatch.setenv(pc.PROGRAM_CACHE_ENV, str(tmp_path))
    x, n = jnp.float32(0.5), jnp.int32(3)
    want = leaves(jax.jit(step)(make_state(), x, n))
    t1, t2 = {}, {}
    got = leaves(program(t1, {"toy": 1})(make_state(), x, n))
    program(t2, {"toy": 2})(make_state(), x, n)
    pc.serialization_missing.cache_clear()
    err = capsys.readouterr().err
    assert err.count("tdmpc2 program cache: off in this process") == 1 and "pip install flatbuffers" in err
    assert "program_cache" not in t1["toy"] and "program_cache" not in t2["toy"] and not list(tmp_path.iterdir())
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)


def test_flatbuffers_is_a_dependency_so_the_cache_works_where_tdmpc2core_is_installed():
    import tomllib
    from pathlib import Path

    deps = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    assert any(d.split(">")[0].split("=")[0].strip() == "flatbuffers" for d in deps["dependencies"])
    assert pc.serialization_missing() is None


def test_the_agent_fingerprints_its_programs_only_when_no_user_code_reaches_them():
    from tdmpc2core import TDMPC2

    small = dict(model_size=1, mlp_dim=32, latent_dim=16, enc_dim=32, num_samples=16, num_elites=4,
                 num_pi_trajs=2, iterations=1, batch_size=16, seed_steps=200)
    agent = TDMPC2("Pendulum-v1", **small)
    fp = agent.program_fingerprint("chunk")
    assert fp["config"] == agent.config and fp["program"] == "chunk"
    json.dumps(fp)  # JSON, as the key needs
    assert agent.program_fingerprint("eval", num_episodes=3)["num_episodes"] == 3
    assert TDMPC2("Pendulum-v1", **dict(small, horizon=4)).program_fingerprint("chunk") != fp
    assert TDMPC2("Pendulum-v1", **small, post_update=lambda *a: None).program_fingerprint("chunk") is None
    assert TDMPC2("Pendulum-v1", **dict(small, learning_rate=lambda count: 3e-4)).program_fingerprint("chunk") is None
    assert TDMPC2(agent.env, **small).program_fingerprint("chunk") is None  # a prebuilt env object

    class Mine(TDMPC2):  # a subclass: its code is not the library's (helper-12)
        pass

    assert Mine("Pendulum-v1", **small).program_fingerprint("chunk") is None
    other = TDMPC2("Pendulum-v1", **small)
    assert other.program_fingerprint("chunk") == fp
    other.gamma = 0.5  # an attribute set after construction reaches the traced program
    assert other.program_fingerprint("chunk") != fp
    assert TDMPC2("Pendulum-v1", **dict(small, horizon=np.int64(3))).program_fingerprint("chunk") is not None
    agent.env.steps_on_host = True  # dm_control, Meta-World...: a host callback jax.export cannot store
    assert agent.program_fingerprint("chunk") is None


def test_a_program_compiled_ahead_in_a_thread_equals_one_compiled_at_its_call():
    """Compiled.compile_ahead from shape specs (compiled.abstract) in another thread: the call
    finds it compiled (or waits for it) and gives the same numbers bit for bit as the program
    compiled at its call from the arrays; its record says ``ahead`` and the call's wait
    (``blocked_s``)."""
    import threading

    import numpy as np

    from tdmpc2core.run.compiled import abstract, blocked_seconds

    def fn(w, x, key):  # products, a loop and random numbers: what the agents' programs hold
        def body(c, _):
            return jnp.tanh(c @ w) + 0.1 * jax.random.normal(key, c.shape), None
        return jax.lax.scan(body, x, None, length=5)[0].sum(axis=0)

    w = jax.random.normal(jax.random.PRNGKey(0), (3, 16, 16))
    x = jax.random.normal(jax.random.PRNGKey(1), (3, 8, 16))
    keys = jax.random.split(jax.random.PRNGKey(2), 3)
    t_now, t_ahead = {}, {}
    now = per_seed(fn, name="toy", compile_seconds=t_now)(w, x, keys)
    prog = per_seed(fn, name="toy", compile_seconds=t_ahead)
    th = threading.Thread(target=prog.compile_ahead, args=abstract((w, x, keys)))
    th.start()
    while "toy" not in t_ahead and th.is_alive():  # the thread holds the program's lock: its compile began
        time.sleep(0.001)
    ahead = prog(w, x, keys)  # waits for the compile under way, or finds it done
    th.join()
    np.testing.assert_array_equal(np.asarray(now), np.asarray(ahead))
    assert t_ahead["toy"]["ahead"] is True and t_ahead["toy"]["calls_compiled"] == 1 and "ahead" not in t_now["toy"]
    assert blocked_seconds(t_ahead) >= 0.0 and blocked_seconds(t_now) > 0.0
    assert prog.compile_ahead(*abstract((w, x, keys))) is False  # compiled already


def test_programs_compiled_ahead_side_by_side_are_traced_one_at_a_time(tmp_path, monkeypatch):
    """program_cache.TRACING: two programs compiled ahead in threads of their own (one through
    the program cache, one traced as usual) are traced one after the other, not interleaved
    under Python's lock; both compile, and compute what they did alone."""
    import threading
    import time

    from tdmpc2core.run.compiled import abstract

    spans, both_tracing = [], threading.Barrier(2)

    def slow_trace(tag):
        def fn(w, x, key):
            t0 = time.perf_counter()
            # side by side, both tracings meet here at once; one at a time, the first waits out
            # the 1.5 s alone and the second finds the barrier broken
            try:
                both_tracing.wait(timeout=1.5)
            except threading.BrokenBarrierError:
                pass
            out = jnp.tanh(x @ w) + 0.1 * jax.random.normal(key, x.shape)
            spans.append((tag, t0, time.perf_counter()))
            return out.sum(axis=0)
        return fn

    monkeypatch.setenv(pc.PROGRAM_CACHE_ENV, str(tmp_path / "programs"))
    w = jax.random.normal(jax.random.PRNGKey(0), (2, 8, 8))
    x = jax.random.normal(jax.random.PRNGKey(1), (2, 4, 8))
    keys = jax.random.split(jax.random.PRNGKey(2), 2)
    pc.program_key("warm-up", {}, (w,))  # the key's one-time hashing of the installation, before the threads
    timings = {}
    stored = per_seed(slow_trace("stored"), name="a", compile_seconds=timings, fingerprint={"toy": "a"})
    plain = per_seed(slow_trace("plain"), name="b", compile_seconds=timings)
    threads = [threading.Thread(target=p.compile_ahead, args=abstract((w, x, keys))) for p in (stored, plain)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(tag for tag, *_ in spans) == ["plain", "stored"], spans
    first, second = sorted(spans, key=lambda s: s[1])  # (tag, start, end) by start
    assert first[2] <= second[1], f"tracing interleaved: {spans}"
    assert timings["a"]["ahead"] and timings["b"]["ahead"] and timings["a"]["program_cache"] == "stored"
    np.testing.assert_array_equal(np.asarray(stored(w, x, keys)), np.asarray(plain(w, x, keys)))


def test_compiles_started_together_are_traced_in_the_order_listed():
    """compiled.start_compiles: the second job's thread starts only once the first has taken the
    trace lock, so the first listed traces first even when it is slower to get there (a race
    before: on a TPU host the evaluation won it and the training chunk, the longer compile,
    waited); a job that raises goes to on_error; a job that never takes the lock (it ends, or
    was compiled already) does not hold up the next."""
    import time

    from tdmpc2core.run import compiled

    order, errors = [], []

    def slow_to_start():
        time.sleep(0.3)  # e.g. the program cache's first key, before its tracing
        with pc.TRACING:
            order.append("chunk")

    def quick():
        with pc.TRACING:
            order.append("eval")

    def boom():
        raise RuntimeError("no compile")

    threads = compiled.start_compiles([("chunk", slow_to_start), ("eval", quick), ("bad", boom),
                                       ("done already", lambda: None), ("last", quick)],
                                      lambda name, e: errors.append((name, str(e))))
    for t in threads:
        t.join()
    assert order == ["chunk", "eval", "eval"]
    assert errors == [("bad", "no compile")]
    assert [t.name for t in threads] == ["compile-ahead-chunk", "compile-ahead-eval", "compile-ahead-bad",
                                         "compile-ahead-done already", "compile-ahead-last"]
    # a thread that neither takes the lock nor ends is waited for at most the given seconds
    import threading
    hold = threading.Event()
    t = threading.Thread(target=hold.wait)
    t.start()
    t0 = time.perf_counter()
    assert pc.TRACING.wait_taken_by(t, 0.2) is False and time.perf_counter() - t0 < 2.0
    hold.set()
    t.join()
    assert pc.TRACING.wait_taken_by(t, 0.2) is True


def test_a_stored_program_is_traced_and_lowered_before_the_next_one_is_traced(tmp_path, monkeypatch):
    """With the program cache on, a program compiled ahead is traced, exported and lowered in one
    hold of the trace lock, so the one started after it (compiled.start_compiles) traces only
    after that lowering and the first one's XLA compile starts first. Lowered in a second hold,
    the first waited for the second's whole tracing (seen on a TPU host: 70 s)."""
    from tdmpc2core.run import compiled
    from tdmpc2core.run.compiled import abstract

    events = []

    def traced(tag):
        def fn(w, x):
            events.append(f"trace {tag}")
            return jnp.tanh(x @ w).sum(axis=0)
        return fn

    lower = pc.StoredProgram.lower

    def recorded_lower(exported, donate_argnums, args):
        out = lower(exported, donate_argnums, args)
        events.append(f"lower {exported.fun_name}")
        return out

    monkeypatch.setattr(pc.StoredProgram, "lower", staticmethod(recorded_lower))
    monkeypatch.setenv(pc.PROGRAM_CACHE_ENV, str(tmp_path / "programs"))
    w = jax.random.normal(jax.random.PRNGKey(0), (2, 8, 8))
    x = jax.random.normal(jax.random.PRNGKey(1), (2, 4, 8))
    pc.program_key("warm-up", {}, (w,))  # the key's one-time hashing of the installation
    timings = {}
    first = per_seed(traced("first"), name="first", compile_seconds=timings, fingerprint={"toy": "first"})
    second = per_seed(traced("second"), name="second", compile_seconds=timings, fingerprint={"toy": "second"})
    threads = compiled.start_compiles([(p.name, lambda p=p: p.compile_ahead(*abstract((w, x))))
                                       for p in (first, second)], lambda name, e: pytest.fail(f"{name}: {e}"))
    for t in threads:
        t.join()
    assert [e.split()[0] for e in events] == ["trace", "lower", "trace", "lower"], events
    assert events[0] == "trace first" and events[2] == "trace second", events
    assert timings["first"]["program_cache"] == timings["second"]["program_cache"] == "stored"
