"""Reducer.shaped_kernel: the per-compile kernel of float32 sums over a
leading or trailing run of axes gives Reducer.reduce's bits, with and
without the C module, for every operand it may see (also ones that are not
C-contiguous or not of the compiled shape, which take reduce)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stablehlo_interpreter as shi
from stablehlo_interpreter.ops import reducers, spec_kernels

F32 = np.dtype(np.float32)
SPECIALS = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e38, -1e38,
                     1e-45, -1e-45, 3.0, -2.5], F32)


def _case(draw_shape, draw_axes, seed, special_fraction, negative_zero_init):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(draw_shape).astype(F32)
    mask = rng.random(draw_shape) < special_fraction
    x[mask] = rng.choice(SPECIALS, size=int(mask.sum()))
    init = np.array(-0.0 if negative_zero_init else rng.choice([0.0, 1.5, np.nan]), F32)
    return x, init


@st.composite
def cases(draw):
    ndim = draw(st.integers(2, 4))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=ndim, max_size=ndim)))
    k = draw(st.integers(1, ndim))
    axes = tuple(range(k)) if draw(st.booleans()) else tuple(range(ndim - k, ndim))
    seed = draw(st.integers(0, 2**32 - 1))
    frac = draw(st.sampled_from([0.0, 0.1, 1.0]))
    neg = draw(st.booleans())
    return shape, axes, seed, frac, neg


def _bits(a):
    a = np.asarray(a)
    return a.dtype, a.shape, a.tobytes()


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize("c_module", [True, False])
@settings(max_examples=60, deadline=None)
@given(case=cases())
def test_shaped_kernel_same_bits_as_reduce(case, c_module):
    shape, axes, seed, frac, neg = case
    x, init = _case(shape, axes, seed, frac, neg)
    saved = reducers._sums
    try:
        if not c_module:
            reducers._sums = None
        elif saved is None:
            pytest.skip("stablehlo_interpreter._sums is not built")
        red = reducers.reducer("add", F32)
        kernel = red.shaped_kernel(shape, axes)
        assert kernel is not None
        assert _bits(kernel(x, init)) == _bits(red.reduce(x, axes, init))
        # All -0 terms (the sign _negative_zero_sums sets).
        z = np.full(shape, -0.0, F32)
        assert _bits(kernel(z, init)) == _bits(red.reduce(z, axes, init))
        # Not C-contiguous, and another shape: reduce itself.
        xt = np.asfortranarray(x)
        assert _bits(kernel(xt, init)) == _bits(red.reduce(xt, axes, init))
    finally:
        reducers._sums = saved


@pytest.mark.parametrize("shape, axes", [
    ((300, 3), (0,)),       # _reduce_leading's two levels (b > 0)
    ((64, 64), (0,)),
    ((64, 64), (1,)),
    ((64, 64), (0, 1)),
    ((2, 5000), (1,)),     # rows longer than one block: _row_sums
    ((5000, 1), (0,)),      # one column: numpy's pairwise sum
])
def test_shaped_kernel_paths(shape, axes):
    x, init = _case(shape, axes, 7, 0.05, False)
    red = reducers.reducer("add", F32)
    kernel = red.shaped_kernel(shape, axes)
    assert _bits(kernel(x, init)) == _bits(red.reduce(x, axes, init))


def test_shaped_kernel_declines():
    red = reducers.reducer("add", F32)
    assert red.shaped_kernel((4, 5, 6), (1,)) is None            # a middle run
    assert red.shaped_kernel((8,), (0,)) is None                 # vectors: vector_kernel
    assert red.shaped_kernel((1024, 1024), (0,)) is None         # _PAR_MIN and up
    assert red.shaped_kernel((0, 4), (0,)) is None               # nothing to sum
    assert reducers.reducer("add", np.float64).shaped_kernel((4, 4), (0,)) is None
    assert reducers.reducer("maximum", F32).shaped_kernel((4, 4), (0,)) is None


REDUCE = """
func.func @main(%x: tensor<64x64xf32>, %i: tensor<f32>) -> tensor<64xf32> {
  %0 = stablehlo.reduce(%x init: %i) applies stablehlo.add across dimensions = [0]
       : (tensor<64x64xf32>, tensor<f32>) -> tensor<64xf32>
  return %0 : tensor<64xf32>
}
"""


@pytest.mark.parametrize("numerics", ["accurate", "spec"])
def test_program_uses_it_with_the_same_bits(numerics):
    x, init = _case((64, 64), (0,), 3, 0.05, False)
    got = shi.compile(REDUCE, numerics=numerics).run(x, init)[0]
    if numerics == "accurate":
        want = reducers.reducer("add", F32).reduce(x, (0,), init)
    else:   # the reference's sequential order, which the kernel leaves alone
        want = spec_kernels.reduce("add", x, (0,), init, F32)
    assert _bits(got) == _bits(want)
