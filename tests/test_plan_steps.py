"""The plain loop's steps (compiler.Block._make_fast_steps): elementwise
kernels that only wrap a numpy ufunc run the ufunc itself where that gives
the kernel's result (compiler._bare_ufunc), with the same bits as the
kernels the observed loop (tracers) runs, and errors still name the op."""

import functools
import io

import ml_dtypes
import numpy as np
import pytest

import stablehlo_interpreter as shi
from stablehlo_interpreter.errors import ExecutionError

PROGRAM = """
func.func @main(%x: tensor<8x8xf32>, %y: tensor<8x8xf32>, %s: tensor<f32>,
                %i: tensor<8xi32>, %b: tensor<8xbf16>)
    -> (tensor<8x8xf32>, tensor<f32>, tensor<8xi32>, tensor<8xbf16>, tensor<8x8xi1>) {
  %0 = stablehlo.add %x, %y : tensor<8x8xf32>
  %1 = stablehlo.multiply %0, %y : tensor<8x8xf32>
  %2 = stablehlo.divide %1, %x : tensor<8x8xf32>
  %3 = stablehlo.subtract %2, %y : tensor<8x8xf32>
  %4 = stablehlo.negate %3 : tensor<8x8xf32>
  %5 = stablehlo.add %s, %s : tensor<f32>
  %6 = stablehlo.multiply %i, %i : tensor<8xi32>
  %7 = stablehlo.add %b, %b : tensor<8xbf16>
  %8 = stablehlo.compare LT, %4, %x : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xi1>
  return %4, %5, %6, %7, %8 : tensor<8x8xf32>, tensor<f32>, tensor<8xi32>, tensor<8xbf16>, tensor<8x8xi1>
}
"""


def _args():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 8)).astype(np.float32)
    x[0, :6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45]
    y = rng.standard_normal((8, 8)).astype(np.float32)
    y[1, :3] = [-0.0, np.nan, 3e38]
    i = np.array([2**31 - 1, -2**31, 7, -3, 0, 1, 65536, 46341], np.int32)
    b = np.array([1.5, -0.0, np.inf, 3e38, 1e-3, -2, 7, np.nan], ml_dtypes.bfloat16)
    return [x, y, np.array(-0.0, np.float32), i, b]


class _Quiet(shi.OpTracer):
    def __init__(self):
        super().__init__(stream=io.StringIO())


def test_bare_ufunc_steps_same_bits_as_kernels():
    program = shi.compile(PROGRAM)
    args = _args()
    fast = [program.call(args) for _ in range(3)][-1]    # the straight-line plan too
    plain = program.run(*args)                           # the loop
    observed = program.run(*args, tracer=_Quiet())       # the kernels, op by op
    for f, p, o in zip(fast, plain, observed):
        assert f.dtype == o.dtype and f.shape == o.shape and p.dtype == o.dtype
        assert f.tobytes() == o.tobytes() and p.tobytes() == o.tobytes()
    fns = [step[1] for step in program.functions["main"].block._fast_steps()]
    bare = [fn for fn in fns if isinstance(fn, np.ufunc)]
    # The f32 arithmetic, the i32 multiply (numpy's int32 loop wraps as
    # the spec's does) and the compare. The 0-d add (numpy returns a
    # scalar for it) and the bf16 add (computed in f32, rounded) keep
    # their kernels.
    assert [fn.__name__ for fn in bare] == ["add", "multiply", "divide", "subtract", "negative",
                                            "multiply", "less"]
    assert not isinstance(fns[5], np.ufunc) and not isinstance(fns[7], np.ufunc)


BAD = """
func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %x, %y : tensor<4xf32>
  %1 = stablehlo.multiply %0, %y : tensor<4xf32>
  return %1 : tensor<4xf32>
}
"""


@pytest.mark.parametrize("calls", [1, 3])
def test_failing_bare_ufunc_step_names_its_op(calls):
    program = shi.compile(BAD)
    x = np.ones(4, np.float32)
    for _ in range(calls - 1):
        program.call([x, x])
    block = program.functions["main"].block
    assert isinstance(block._fast_steps()[0][1], np.ufunc)
    # An operand the ufunc has no loop for (a caller that bypasses the
    # argument checks): the error names the add.
    with pytest.raises(ExecutionError, match="stablehlo.add"):
        block.run(_context(program), (), [x, np.array(["a"] * 4)])


def _context(program):
    from stablehlo_interpreter.compiler import Context
    return Context(program)


DIAGONAL = """
func.func @main(%x: tensor<8x8xf32>, %i: tensor<8x2xi32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %c = stablehlo.constant dense<[[0, 0], [1, 1], [2, 2], [3, 3], [4, 4], [5, 5], [6, 6], [9, -3]]>
      : tensor<8x2xi32>
  %0 = "stablehlo.gather"(%x, %c) <{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0, 1],
      start_index_map = [0, 1], index_vector_dim = 1>, indices_are_sorted = false,
      slice_sizes = array<i64: 1, 1>}> : (tensor<8x8xf32>, tensor<8x2xi32>) -> tensor<8xf32>
  %1 = "stablehlo.gather"(%x, %i) <{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0, 1],
      start_index_map = [0, 1], index_vector_dim = 1>, indices_are_sorted = false,
      slice_sizes = array<i64: 1, 1>}> : (tensor<8x8xf32>, tensor<8x2xi32>) -> tensor<8xf32>
  return %0, %1 : tensor<8xf32>, tensor<8xf32>
}
"""


def test_small_gather_of_constant_indices():
    """The linear index of a small gather's constant (read-only) indices is
    computed once; indices given at run time (writable, changing between
    runs) are not remembered."""
    program = shi.compile(DIAGONAL)
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    const = np.array([[0, 0], [1, 1], [2, 2], [3, 3], [4, 4], [5, 5], [6, 6], [7, 0]])
    rng = np.random.default_rng(1)
    for run in range(4):
        i = rng.integers(-3, 11, (8, 2)).astype(np.int32)
        got = program.call([x + run, i])
        np.testing.assert_array_equal(got[0], (x + run)[const[:, 0], const[:, 1]])
        c = np.clip(i, 0, 7)
        np.testing.assert_array_equal(got[1], (x + run)[c[:, 0], c[:, 1]])
        i[:] = 0    # the caller's array changes after the run: not remembered


def test_small_gather_remembers_only_read_only_owned_indices():
    from stablehlo_interpreter.ops.gather_scatter import _GatherPlan
    dn = {"offset_dims": [], "collapsed_slice_dims": [0, 1], "start_index_map": [0, 1],
          "index_vector_dim": 1, "operand_batching_dims": [], "start_indices_batching_dims": []}
    plan = _GatherPlan(dn, (8, 8), (8, 2), (1, 1))
    assert plan.small
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    idx = np.stack([np.arange(8), np.arange(8)], 1).astype(np.int32)
    plan(x, idx)
    assert plan.memo is None                       # writable: the caller may change it
    view = idx[:]
    view.flags.writeable = False
    plan(x, view)
    assert plan.memo is None                       # read-only view of a writable array
    idx.flags.writeable = False
    np.testing.assert_array_equal(plan(x, idx), np.diag(x))
    assert plan.memo[0] is idx
    np.testing.assert_array_equal(plan(x + 1, idx), np.diag(x + 1))


SCALARS = """
func.func @main(%a: tensor<T>, %b: tensor<T>) -> (tensor<T>, tensor<T>, tensor<T>, tensor<T>) {
  %0 = stablehlo.add %a, %b : tensor<T>
  %1 = stablehlo.subtract %a, %b : tensor<T>
  %2 = stablehlo.multiply %a, %b : tensor<T>
  %3 = stablehlo.negate %a : tensor<T>
  return %0, %1, %2, %3 : tensor<T>, tensor<T>, tensor<T>, tensor<T>
}
"""

SCALAR_VALUES = {
    "f32": [np.nan, -0.0, 0.0, np.inf, -np.inf, 3e38, 1e-45, -1.5],
    "f64": [np.nan, -0.0, 0.0, np.inf, -np.inf, 1.7e308, 5e-324, -1.5],
    "i32": [2**31 - 1, -2**31, 0, -1, 7],
    "ui8": [0, 255, 1, 128],
    "i1": [False, True],
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # (the batched call: inf - inf)
@pytest.mark.parametrize("numerics", ["accurate", "spec"])
@pytest.mark.parametrize("ty", sorted(SCALAR_VALUES))
def test_zero_d_ufunc_kernels_same_bits(ty, numerics, monkeypatch):
    """0-d arithmetic runs ``ufunc(..., out=...)`` (elementwise._zero_d_ufunc)
    where numpy has it: the bits of as_result's path (numpy's scalar made a
    0-d array), for every pair of special values; also called batched on
    arrays, as a region body does."""
    from stablehlo_interpreter.ops import elementwise
    text = SCALARS.replace("T", ty)
    if ty == "i1":   # (subtract and negate have no i1 form)
        text = text.replace("%1 = stablehlo.subtract %a, %b", "%1 = stablehlo.and %a, %b") \
            .replace("%3 = stablehlo.negate %a", "%3 = stablehlo.add %b, %a")
    fast = shi.compile(text, numerics=numerics)
    monkeypatch.setattr(elementwise, "_OUT_ARRAY", False)
    plain = shi.compile(text, numerics=numerics)
    monkeypatch.undo()
    dt = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "ui8": np.uint8,
          "i1": np.bool_}[ty]
    if elementwise._OUT_ARRAY:
        kernels = {s.op.name: s.fn for s in fast.functions["main"].block.steps}
        assert isinstance(kernels["stablehlo.add"], functools.partial)
        assert isinstance(kernels["stablehlo.multiply"], functools.partial)
    vals = [np.array(v, dt) for v in SCALAR_VALUES[ty]]
    for a in vals:
        for b in vals:
            got, want = fast.run(a, b), plain.run(a, b)
            for g, w in zip(got, want):
                assert g.__class__ is np.ndarray and g.shape == ()
                assert g.dtype == w.dtype and g.tobytes() == w.tobytes()
    add = next(s.fn for s in fast.functions["main"].block.steps if s.op.name == "stablehlo.add")
    arr = np.array(SCALAR_VALUES[ty], dt)
    assert add(arr, arr[::-1]).tobytes() == np.add(arr, arr[::-1]).tobytes()
