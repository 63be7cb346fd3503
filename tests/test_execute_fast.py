"""The per-call shortcuts of a cached executable's Execute: Program.call
(the interpreter's entry without run()'s keyword and argument handling) and
Buffer.finished_output (an output buffer built without __init__'s branches)
give what the general routes give."""

from __future__ import annotations

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


def test_finished_output_sets_what_init_sets():
    """Every slot of a Buffer made by finished_output holds what __init__
    puts there (a slot added to Buffer and missed there fails here)."""
    from stablehlo_pjrt.buffer import Buffer
    from stablehlo_pjrt.handles import peek, release

    class Dev:
        default_memory = "memory"

        def __init__(self):
            self.allocs = []

        def allocated(self, n):
            self.allocs.append(n)

    dev = Dev()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(6, dtype=np.float32).reshape(2, 3)
    ref = Buffer(a, 11, dev, "memory")
    h = Buffer.finished_output(b, 11, dev, "memory", b.nbytes)
    try:
        fast = peek(h)
        assert fast.__class__ is Buffer and fast.handle == h
        for name in Buffer.__slots__:
            if name in ("handle", "array", "__weakref__"):
                continue
            assert getattr(fast, name) == getattr(ref, name), name
        assert fast.array is b
        assert dev.allocs == [a.nbytes, b.nbytes]
    finally:
        release(h)
        release(ref.handle)
