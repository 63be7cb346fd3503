"""The plain loop's steps (compiler.Block._make_fast_steps): elementwise
kernels that only wrap a numpy ufunc run the ufunc itself where that gives
the kernel's result (compiler._bare_ufunc), with the same bits as the
kernels the observed loop (tracers) runs, and errors still name the op."""

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
