"""The per-call shortcuts of a cached executable's Execute: Program.call
(the interpreter's entry without run()'s keyword and argument handling) and
Buffer.finished_output (an output buffer built without __init__'s branches)
give what the general routes give."""

from __future__ import annotations

import array

import numpy as np
import pytest

import stablehlo_interpreter as shi
from stablehlo_interpreter import ArgumentError, OpTracer, use_tracer

ADD = """
func.func @main(%a: tensor<4xf32>, %b: tensor<f32>) -> tensor<4xf32> {
  %bb = stablehlo.broadcast_in_dim %b, dims = [] : (tensor<f32>) -> tensor<4xf32>
  %s = stablehlo.add %a, %bb : tensor<4xf32>
  return %s : tensor<4xf32>
}
"""


def test_call_matches_run():
    p = shi.compile(ADD)
    a = np.arange(4, dtype=np.float32)
    b = np.array(2.5, np.float32)
    for _ in range(3):  # the first call builds the entry, later ones reuse it
        (r,) = p.call((a, b))
        np.testing.assert_array_equal(r, a + np.float32(2.5))
        assert r.dtype == np.float32
    (r2,) = p.call([a, b])  # any sequence
    np.testing.assert_array_equal(r2, r)


def test_call_reports_bad_arguments_as_run_does():
    p = shi.compile(ADD)
    a = np.arange(4, dtype=np.float32)
    for args in ((a.astype(np.float64), np.float32(1)), (a[:3], np.float32(1)), (a,)):
        with pytest.raises(ArgumentError) as by_run:
            p.run(*args)
        with pytest.raises(ArgumentError) as by_call:
            p.call(args)
        assert str(by_call.value) == str(by_run.value)


def test_call_accepts_what_run_converts():
    """A 0-d numpy scalar (not an ndarray) is converted by run(); call()
    hands such arguments to run()."""
    p = shi.compile(ADD)
    a = np.arange(4, dtype=np.float32)
    (r,) = p.call((a, np.float32(1)))
    np.testing.assert_array_equal(r, a + 1)


def test_call_is_seen_by_an_active_tracer():
    p = shi.compile(ADD)
    a = np.arange(4, dtype=np.float32)
    p.call((a, np.float32(1)))

    class Names(OpTracer):
        def __init__(self):
            super().__init__()
            self.names = []

        def before(self, op, inputs, depth):
            self.names.append(op.name)

        def after(self, op, results, depth):
            pass

    t = Names()
    with use_tracer(t):
        p.call((a, np.array(1, np.float32)))
    assert "stablehlo.add" in t.names


def test_call_ignores_floating_point_errors():
    p = shi.compile(ADD)
    big = np.full(4, 3e38, np.float32)
    with np.errstate(all="raise"):
        (r,) = p.call((big, np.array(3e38, np.float32)))
        assert np.isinf(r).all()
        np.float32(1) + np.float32(1)  # the caller's error state is back
        with pytest.raises(FloatingPointError):
            np.float32(3e38) * np.float32(10)


@pytest.mark.parametrize("impl", ["python", "c"])
def test_finished_output_sets_what_init_sets(impl):
    """Every slot of a Buffer made by finished_output (the Python method,
    and _shim.new_output, which Execute's fast path calls) holds what
    __init__ puts there (a slot added to Buffer and missed there fails
    here)."""
    from stablehlo_pjrt import _shim
    from stablehlo_pjrt.buffer import Buffer
    from stablehlo_pjrt.handles import peek, release

    finished_output = Buffer.finished_output if impl == "python" else _shim.new_output

    class Dev:  # a Device's allocation statistics, nothing else
        default_memory = "memory"

        def __init__(self):
            self.stats = array.array("q", [0, 0, 0, 0])

        def allocated(self, n):
            _shim.stats_alloc(self.stats, n)

    dev = Dev()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(6, dtype=np.float32).reshape(2, 3)
    ref = Buffer(a, 11, dev, "memory")
    h = finished_output(b, 11, dev, "memory", b.nbytes)
    try:
        fast = peek(h)
        assert fast.__class__ is Buffer and fast.handle == h
        for name in Buffer.__slots__:
            if name in ("handle", "array", "__weakref__"):
                continue
            assert getattr(fast, name) == getattr(ref, name), name
        assert fast.array is b
        # bytes in use, peak, allocations, largest
        assert list(dev.stats) == [48, 48, 2, 24]
    finally:
        release(h)
        release(ref.handle)


MIXED = """
func.func @main(%a: tensor<4xf32>, %i: tensor<i32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<4xf32>) {
  %c = stablehlo.constant dense<2.0> : tensor<f32>
  %cb = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<4xf32>
  %m = stablehlo.multiply %a, %cb : tensor<4xf32>
  %e = stablehlo.exponential %m : tensor<4xf32>
  %u = stablehlo.reshape %c : (tensor<f32>) -> tensor<1xf32>
  %d = stablehlo.dynamic_update_slice %e, %u, %i : (tensor<4xf32>, tensor<1xf32>, tensor<i32>) -> tensor<4xf32>
  %s = stablehlo.reduce(%d init: %c) applies stablehlo.add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  return %d, %a, %s, %cb : tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<4xf32>
}
"""


def _generated(p):
    run = p._entry[2]
    return getattr(run, "__code__", None) is not None and \
        run.__code__.co_filename.startswith("<plan of")


def test_straight_line_code_matches_the_loop():
    """From the second call on, a short entry block runs as generated
    straight-line code; its results are the plain loop's (run()), inputs
    are left alone, a constant result is the constant's value."""
    p = shi.compile(MIXED)
    a = np.array([0.5, -1.0, 2.0, 3.0], np.float32)
    keep = a.copy()
    expected = p.run(a, np.array(1, np.int32))
    for k in range(3):
        got = p.call((a, np.array(1, np.int32)))
        assert _generated(p) == (k > 0)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_array_equal(g, e)
    np.testing.assert_array_equal(a, keep)
    assert got[1] is a  # an argument returned as it is, as run() returns it


def test_straight_line_code_with_a_step_of_no_results():
    """An op of no results (a check here; a host callback in the plugin)
    is a line calling its kernel: it still runs, and fails as in the loop."""
    p = shi.compile("""
func.func @main(%a: tensor<2xf32>, %b: tensor<2xf32>) -> tensor<2xf32> {
  "check.expect_eq"(%a, %b) : (tensor<2xf32>, tensor<2xf32>) -> ()
  %s = stablehlo.add %a, %b : tensor<2xf32>
  return %s : tensor<2xf32>
}""")
    a = np.array([1.0, 2.0], np.float32)
    for k in range(3):
        np.testing.assert_array_equal(p.call((a, a))[0], 2 * a)
        assert _generated(p) == (k > 0)
    with pytest.raises(shi.CheckFailure):
        p.call((a, a + 1))


def test_straight_line_failure_is_reported_as_the_loop_reports_it(monkeypatch):
    p = shi.compile(ADD)
    a = np.arange(4, dtype=np.float32)
    b = np.array(1, np.float32)
    p.call((a, b))
    p.call((a, b))
    assert _generated(p)
    block = p.functions["main"].block

    def exploding(*args):
        raise ValueError("kernel exploded")

    # Both routes run the same (patched) plan: the generated code, made anew,
    # and Block.run's loop under run() (_runs = 0: a block's first run takes
    # the loop; from its second it would take the generated code too).
    block._fast = [(k, exploding, *rest) for k, _, *rest in block._fast]
    block._line = None
    p._entry = None
    block._runs = 0
    with pytest.raises(shi.ExecutionError) as by_run:
        p.run(a, b)
    block._runs = 0
    with pytest.raises(shi.ExecutionError) as by_loop:
        p.call((a, b))  # the first call of the new entry: Block.run
    assert not _generated(p)
    with pytest.raises(shi.ExecutionError) as by_code:
        p.call((a, b))
    assert _generated(p)
    assert str(by_code.value) == str(by_loop.value) == str(by_run.value)
    assert "kernel exploded" in str(by_code.value)
    assert isinstance(by_code.value.__cause__, ValueError)


def test_new_output_rejects_bad_arguments():
    """_shim.new_output checks what it is given: a bad argument is a Python
    exception and leaves the registry and the statistics as they were."""
    # (buffer sets the shim's output template at import: without it every
    # call raises RuntimeError, whatever its arguments.)
    from stablehlo_pjrt import _shim, buffer, handles  # noqa: F401

    class Dev:
        def __init__(self, stats):
            self.stats = stats

    st = array.array("q", [0, 0, 0, 0])
    a = np.zeros(3, np.float32)
    before = len(handles._objects)
    for args, exc in (((a, 11, Dev(st), None), TypeError),               # 4 arguments
                      ((a, 11, Dev(st), None, "12"), TypeError),         # nbytes not an int
                      ((a, 11, object(), None, 12), AttributeError),     # no statistics
                      ((a, 11, Dev(b"\0" * 32), None, 12), (BufferError, TypeError)),
                      ((a, 11, Dev(array.array("q", [0])), None, 12), ValueError),
                      ((object(), 11, Dev(st), None, 12), AttributeError)):  # no shape
        with pytest.raises(exc):
            _shim.new_output(*args)
    assert len(handles._objects) == before and list(st) == [0, 0, 0, 0]
    with pytest.raises(TypeError):
        _shim.set_output_template(object())


def test_allocation_statistics():
    """_shim's statistics updates (one C call each, atomic under the GIL):
    what PJRT_Device_MemoryStats and ClearMemoryStats report; a bad buffer
    is a ValueError, never a crash."""
    from stablehlo_pjrt import _shim

    st = array.array("q", [0, 0, 0, 0])
    _shim.stats_alloc(st, 100)
    _shim.stats_alloc(st, 0)
    _shim.stats_alloc(st, 40)
    _shim.stats_free(st, 100)
    assert _shim.stats_read(st) == (40, 140, 3, 100)
    assert _shim.stats_read(st, True) == (40, 140, 3, 100)
    assert _shim.stats_read(st) == (40, 40, 0, 0)
    for bad in (array.array("q", [0, 0, 0]), b"\0" * 32):
        with pytest.raises((ValueError, BufferError, TypeError)):
            _shim.stats_alloc(bad, 1)


LOOP = """
func.func @main(%x: tensor<f32>) -> tensor<f32> {
  %limit = stablehlo.constant dense<100.0> : tensor<f32>
  %r = stablehlo.while(%v = %x) : tensor<f32>
    cond {
      %c = stablehlo.compare LT, %v, %limit : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %v2 = stablehlo.add %v, %v : tensor<f32>
      stablehlo.return %v2 : tensor<f32>
    }
  %s = stablehlo.sine %r : tensor<f32>
  return %s : tensor<f32>
}
"""


def test_straight_line_code_with_a_kernel_taking_the_context():
    """A step taking the execution context (a while loop, which runs its
    regions in it) gets one in the generated code; the results are run()'s."""
    p = shi.compile(LOOP)
    x = np.array(3.0, np.float32)
    (expected,) = p.run(x)
    for _ in range(3):
        (got,) = p.call((x,))
        np.testing.assert_array_equal(got, expected)
    assert _generated(p) and p._entry[3]  # needs_context
    np.testing.assert_array_equal(expected, np.sin(np.float32(192)))


def _general_keeps(results, inputs, borrowed):
    """Which results OutputOwnership.own (the general path) keeps as they
    are, in order; a copy ends the list's meaning for later results, as in
    _result_values (each own call sees the earlier ones)."""
    from stablehlo_pjrt.donation import OutputOwnership

    own = OutputOwnership(inputs, {}, borrowed or ())
    return [own.own(i, r) is r for i, r in enumerate(results)]


def _view_cases():
    base = np.arange(8, dtype=np.float32)
    other = np.arange(8, dtype=np.float32)
    read_only = np.frombuffer(bytes(16), np.float32)
    carried = np.frombuffer(bytearray(16), np.float32).reshape(4)  # a loop's state
    caller = np.arange(4, dtype=np.float32)    # a zero-copy host buffer's memory
    fresh = np.ones(4, np.float32)
    return [
        # (name, results, inputs, borrowed)
        ("view of a new array", [other[:4]], [base[4:]], None),
        ("view of an input's base", [base[:4]], [base[4:]], None),
        ("reshape of an input", [base.reshape(2, 4)], [base], None),
        ("view of a bytearray", [carried], [base], None),
        ("read-only view", [read_only], [base], None),
        ("view overlapping caller memory", [caller[:]], [fresh], [caller]),
        ("view beside caller memory", [other[:4]], [caller], [caller]),
        ("two views of one array", [other[:4], other[4:]], [base], None),
        ("an array and a view of it", [other, other[:4]], [base], None),
        ("two new arrays", [np.zeros(4, np.float32), np.ones(4, np.float32)], [base], None),
    ]


@pytest.mark.parametrize("case", _view_cases(), ids=lambda c: c[0])
def test_fast_ownership_decides_as_the_general_path(case):
    """execute_fast keeps a run's results as they are (views included: a
    loop's carried value, a reshape) exactly where the general path's
    OutputOwnership keeps them, and otherwise leaves them to it."""
    from stablehlo_pjrt.execute import _owned_results

    _, results, inputs, borrowed = case
    dtypes = [r.dtype for r in results]
    shapes = [r.shape for r in results]
    fast = _owned_results(results, inputs, dtypes, shapes, borrowed)
    assert (fast is not None) == all(_general_keeps(results, inputs, borrowed))


def test_view_results_take_the_fast_path(monkeypatch):
    """A result that is a view of the run's own memory (a reshape or slice
    of a new array, a loop's carried value) becomes a new buffer without
    the general path's ownership checks; each call's output keeps its
    value when later calls run and when another output is deleted. A view
    of an input is still left to the general path, which copies it."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from stablehlo_pjrt import dispatch
    from stablehlo_pjrt.execute import LoadedExecutable

    general = []
    result_values = LoadedExecutable._result_values

    def counting(self, results, ownership):
        general.append(1)
        return result_values(self, results, ownership)

    monkeypatch.setattr(LoadedExecutable, "_result_values", counting)
    dispatch.set_mode("sync")
    try:
        dev = jax.devices("stablehlo_ref")[0]
        x = np.arange(4, dtype=np.float32)
        for fn, want in ((lambda v: jnp.reshape(v + 1, (2, 2)), lambda k: (x + k + 1).reshape(2, 2)),
                         (lambda v: (v + 1)[1:3], lambda k: (x + k + 1)[1:3])):
            f = jax.jit(fn)
            outs = [f(jax.device_put(x + k, dev)) for k in range(4)]
            outs[1].delete()
            for k in (0, 2, 3):
                np.testing.assert_array_equal(np.asarray(outs[k]), want(k))
        assert general == []
        # A reshape of the input itself: copied by the general path.
        b = jax.device_put(x, dev)
        out = jax.jit(lambda v: jnp.reshape(v, (2, 2)))(b)
        assert general == [1]
        b.delete()
        np.testing.assert_array_equal(np.asarray(out), x.reshape(2, 2))
    finally:
        dispatch.set_mode("auto")


def test_trampoline_calls_execute_fast_itself(monkeypatch):
    """Execute's C fast path calls LoadedExecutable.execute_fast directly
    (its caller is no Python frame of the plugin); with the hook pointed at
    another class, the slot's function api._execute_fast calls it, with the
    same outputs. The hook refuses anything but a class."""
    import sys

    jax = pytest.importorskip("jax")

    from stablehlo_pjrt import _shim, dispatch
    from stablehlo_pjrt.execute import LoadedExecutable

    callers = []
    fast = LoadedExecutable.execute_fast

    def recording(self, handles):
        callers.append(sys._getframe(1).f_code.co_name)
        return fast(self, handles)

    monkeypatch.setattr(LoadedExecutable, "execute_fast", recording)
    dispatch.set_mode("sync")
    f = jax.jit(lambda v: v * 2 + 1)
    x = jax.device_put(np.arange(3, dtype=np.float32), jax.devices("stablehlo_ref")[0])
    try:
        np.testing.assert_array_equal(np.asarray(f(x)), [1, 3, 5])
        assert callers and "_execute_fast" not in callers
        callers.clear()
        _shim.set_executable_class(type(None))
        np.testing.assert_array_equal(np.asarray(f(x)), [1, 3, 5])
        assert callers == ["_execute_fast"]
    finally:
        _shim.set_executable_class(LoadedExecutable)
        dispatch.set_mode("auto")
    with pytest.raises(TypeError):
        _shim.set_executable_class(42)


def test_outputs_made_in_c_and_in_python_agree(monkeypatch):
    """Execute's fast path makes its outputs with _shim.new_output, or with
    Buffer.finished_output where the trampoline lacks it: the same values,
    the same allocation statistics."""
    jax = pytest.importorskip("jax")

    from stablehlo_pjrt import buffer, dispatch
    from stablehlo_pjrt.buffer import Buffer

    dev = jax.devices("stablehlo_ref")[0]
    f = jax.jit(lambda v: (v + 1, v * 2))
    x = jax.device_put(np.arange(6, dtype=np.float32), dev)
    dispatch.set_mode("sync")
    try:
        got = {}
        for impl in (buffer.finished_output, Buffer.finished_output):
            monkeypatch.setattr(buffer, "finished_output", impl)
            before = dev.memory_stats()["bytes_in_use"]
            outs = f(x)
            grown = dev.memory_stats()["bytes_in_use"] - before
            got[impl] = ([np.asarray(o) for o in outs], grown)
            del outs
        (c_vals, c_grown), (py_vals, py_grown) = got.values()
        for a, b in zip(c_vals, py_vals):
            np.testing.assert_array_equal(a, b)
        assert c_grown == py_grown == 48
    finally:
        dispatch.set_mode("auto")


# Straight-line code of the other blocks: called functions, case branches
# (with captures), interpreted loop bodies (consuming their carried list).

NESTED = """
func.func private @upd(%x: tensor<8xf32>, %v: tensor<2xf32>, %i: tensor<i32>)
    -> (tensor<8xf32>, tensor<2xf32>) {
  %u = stablehlo.dynamic_update_slice %x, %v, %i : (tensor<8xf32>, tensor<2xf32>, tensor<i32>) -> tensor<8xf32>
  return %u, %v : tensor<8xf32>, tensor<2xf32>
}
func.func @main(%x: tensor<8xf32>, %v: tensor<2xf32>, %i: tensor<i32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %x2 = stablehlo.add %x, %x : tensor<8xf32>
  %r:2 = func.call @upd(%x2, %v, %i) : (tensor<8xf32>, tensor<2xf32>, tensor<i32>) -> (tensor<8xf32>, tensor<2xf32>)
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %p = stablehlo.compare GT, %i, %c0, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
  %k = stablehlo.convert %p : (tensor<i1>) -> tensor<i32>
  %c = "stablehlo.case"(%k) ({
    %n = stablehlo.negate %r#0 : tensor<8xf32>
    stablehlo.return %n : tensor<8xf32>
  }, {
    %m = stablehlo.multiply %r#0, %x : tensor<8xf32>
    stablehlo.return %m : tensor<8xf32>
  }) : (tensor<i32>) -> tensor<8xf32>
  return %r#0, %c : tensor<8xf32>, tensor<8xf32>
}
"""


def _recording_generation(monkeypatch):
    """The names of the blocks whose straight-line code gets made."""
    from stablehlo_interpreter import compiler
    made = []
    real = compiler._straight_line

    def record(block):
        run = real(block)
        made.append((block.name, run is not None))
        return run
    monkeypatch.setattr(compiler, "_straight_line", record)
    return made


def test_called_functions_and_case_branches_take_straight_line_code(monkeypatch):
    """From its second run a called function (whose dying argument it may
    update in place) and a case branch (reading captured values) run as
    generated code, with the loop's results; the caller's inputs stay as
    they were."""
    made = _recording_generation(monkeypatch)
    p = shi.compile(NESTED)
    x = np.arange(8, dtype=np.float32)
    v = np.array([10, 20], np.float32)
    keep = x.copy()
    for k in range(4):
        i = k % 3   # 0: the first branch, 1 and 2: the second
        u = 2 * x
        u[i:i + 2] = v
        want_c = -u if i == 0 else u * x
        got = p.call((x, v, np.array(i, np.int32)))
        np.testing.assert_array_equal(got[0], u)
        np.testing.assert_array_equal(got[1], want_c)
        assert got[0].dtype == got[1].dtype == np.float32
        np.testing.assert_array_equal(x, keep)
    names = {n for n, ok in made if ok}
    assert {"@main", "@upd"} <= names
    assert any(n.startswith("stablehlo.case") for n in names), made
    # Each block's code is made once.
    assert len(made) == len(set(n for n, _ in made))


def test_failure_in_a_called_functions_code_is_reported_as_the_loop_reports_it():
    p = shi.compile(NESTED)
    args = (np.arange(8, dtype=np.float32), np.ones(2, np.float32), np.array(1, np.int32))
    callee = p.functions["upd"].block

    def exploding(*a):
        raise ValueError("kernel exploded")

    from stablehlo_interpreter.compiler import DONATE_FIRST
    p.call(args)
    # (The update takes its in-place kernel, c, where the operand dies.)
    callee._fast = [(k, exploding, a, b, exploding if k == DONATE_FIRST else c, out, dead)
                    for k, _, a, b, c, out, dead in callee._fast_steps()]
    callee._line, callee._runs = None, 0
    with pytest.raises(shi.ExecutionError) as by_loop:
        p.call(args)     # the callee's first run since: the loop
    assert callee._line is None
    with pytest.raises(shi.ExecutionError) as by_code:
        p.call(args)     # its second: generated code
    assert callee._line
    assert str(by_code.value) == str(by_loop.value)
    assert "kernel exploded" in str(by_code.value)
    assert isinstance(by_code.value.__cause__, ValueError)


LOOP_UPDATE = """
func.func @main(%x: tensor<6xf32>) -> tensor<6xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.while(%i = %c0, %a = %x) : tensor<i32>, tensor<6xf32>
  cond {
    %n = stablehlo.constant dense<5> : tensor<i32>
    %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %s = stablehlo.dynamic_slice %a, %i, sizes = [1] : (tensor<6xf32>, tensor<i32>) -> tensor<1xf32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    %a2 = stablehlo.dynamic_update_slice %a, %s, %i2 : (tensor<6xf32>, tensor<1xf32>, tensor<i32>) -> tensor<6xf32>
    stablehlo.return %i2, %a2 : tensor<i32>, tensor<6xf32>
  }
  return %r#1 : tensor<6xf32>
}
"""


def test_interpreted_loop_bodies_take_straight_line_code(monkeypatch):
    """Without generated loops (STABLEHLO_REF_FAST_LOOPS=0) a while loop
    runs its body block per iteration, consuming the carried list: from the
    second iteration on that block is generated code, which updates the
    carried array as the loop does and leaves the argument alone."""
    from stablehlo_interpreter import loopgen
    monkeypatch.setattr(loopgen, "ENABLED", False)
    made = _recording_generation(monkeypatch)
    p = shi.compile(LOOP_UPDATE)
    x = np.arange(6, dtype=np.float32) + 1
    keep = x.copy()
    for _ in range(2):
        (r,) = p.run(x)
        np.testing.assert_array_equal(r, np.full(6, x[0]))
        np.testing.assert_array_equal(x, keep)
    assert any(ok and not n.startswith("@") for n, ok in made), made
