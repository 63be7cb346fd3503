"""Spec mode's C loops (stablehlo_interpreter._libm_loops) give the bits of
the numpy/Python path they replace, which is the one used where the module
is not built (ops/spec_kernels.py ``C_LOOPS``).

Each test runs both paths: the C loop, and the fallback with ``C_LOOPS``
set to None. The C library functions compare bit for bit, NaN payloads
included (both paths call the same function). Arithmetic (folds,
contractions, complex division) compares bit for bit except that a NaN
equals any NaN: which of two NaN operands an x86 add propagates depends on
the operand order the compiler picks for a commutative add, and the spec
leaves NaN signs and payloads unspecified (tests/cpp_reference.py
``bits_equal``, the C++ differential tests' comparison, does the same).
"""

import math

import cpp_reference
import ml_dtypes
import numpy as np
import pytest

import stablehlo_interpreter as shi
from stablehlo_interpreter.ops import spec_elementwise, spec_kernels

C = pytest.importorskip("stablehlo_interpreter._libm_loops",
                        reason="the C loops are not built (pip install -e .)")

SPECIALS = np.array([
    0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 1.5, -1.5, 0.1,
    np.inf, -np.inf, np.nan, -np.nan, 5e-324, -5e-324, 1e-310, 2.2250738585072014e-308,
    1.7976931348623157e308, -1.7976931348623157e308, 709.78, 709.79, 710.0, -745.13, -745.14,
    -1000.0, 1000.0, 1e300, -1e300, 1e-300, np.pi, -np.pi, 1e22, -1e22, 1e16, 1023.999,
    1024.0, -1074.0, -1075.0, 2.0 ** 53, -(2.0 ** 53) - 2,
])


def _values():
    rng = np.random.default_rng(20)
    wide = rng.standard_normal(3000) * 10.0 ** rng.integers(-300, 300, 3000)
    return np.concatenate([SPECIALS, wide, rng.standard_normal(3000) * 10,
                           rng.uniform(-800, 800, 3000)])


# The instruction-set levels of the C loops' fold and contract (isa=).
ISAS = (0, 1, 2, 3)


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def _same(a, b):
    """Bit for bit, any NaN equal to any NaN."""
    return cpp_reference.bits_equal(a, b)


@pytest.fixture
def no_c(monkeypatch):
    """Runs its body with the C loops switched off (the fallback path)."""
    def off(fn, *args):
        with monkeypatch.context() as m:
            m.setattr(spec_kernels, "C_LOOPS", None)
            return fn(*args)
    return off


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fn, fallback", [(math.exp, np.exp), (math.expm1, np.expm1),
                                          (math.log, np.log), (math.log1p, np.log1p),
                                          (math.sin, np.sin), (math.cos, np.cos),
                                          (math.tan, np.tan), (math.tanh, np.tanh),
                                          (math.cbrt, np.cbrt)], ids=lambda f: f.__name__)
def test_unary_libm_is_math(no_c, fn, fallback):
    x = _values()
    run = spec_kernels.libm(fn, fallback)
    got = run(x)
    want = no_c(run, x)
    assert got.dtype == want.dtype == np.float64 and got.shape == x.shape
    assert np.array_equal(_bits(got), _bits(want))
    # and the fallback path is math itself where math does not raise
    ok = []
    for v in SPECIALS:
        try:
            ok.append((v, fn(v)))
        except (ValueError, OverflowError):
            pass
    assert ok
    vs, rs = (np.array(c, np.float64) for c in zip(*ok))
    assert np.array_equal(_bits(run(vs)), _bits(rs))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fn, fallback", [(math.atan2, np.arctan2), (math.pow, np.power)],
                         ids=lambda f: f.__name__)
def test_binary_libm_is_math(no_c, fn, fallback):
    s = SPECIALS
    x, y = (a.ravel() for a in np.meshgrid(s, s))
    v = _values()
    x = np.concatenate([x, v, -np.abs(v)])
    y = np.concatenate([y, np.random.default_rng(1).permutation(v), np.round(v[::-1])])
    run = spec_kernels.libm(fn, fallback)
    assert np.array_equal(_bits(run(x, y)), _bits(no_c(run, x, y)))
    # broadcasting and 0-d
    got = run(x[:7, None], y[None, :5])
    assert got.shape == (7, 5)
    assert np.array_equal(_bits(got), _bits(no_c(run, x[:7, None], y[None, :5])))
    assert run(np.float64(2.0), np.float64(3.0)).shape == ()


def _rows(rng, shape, dtype):
    raw = rng.standard_normal(shape) * 10.0 ** rng.integers(-4, 5, shape)
    if np.dtype(dtype).kind == "c":
        raw = raw + 1j * raw[::-1]
    rows = raw.astype(dtype)
    flat = rows.reshape(-1)
    if flat.size > 8:   # special values among the inputs
        flat[rng.integers(0, flat.size, 4)] = np.array([np.nan, np.inf, -np.inf, -0.0]).astype(
            dtype)
    return rows


FOLD_DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.complex64,
               np.complex128]
FOLD_SHAPES = [(1, 1), (2, 1), (1000, 1), (5, 3), (300, 7), (40, 8), (33, 17), (9, 2049),
               (3, 5000), (50, 2), (50, 4), (7, 6), (40, 13)]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", FOLD_DTYPES)
@pytest.mark.parametrize("shape", FOLD_SHAPES)
def test_fold_rows_is_the_numpy_fold(no_c, dtype, shape):
    rng = np.random.default_rng(sum(shape))
    rows = _rows(rng, shape, dtype)
    kinds = ["add"] if np.dtype(dtype).kind == "c" else ["add", "multiply"]
    for kind in kinds:
        got = spec_kernels.fold_rows(kind, dtype, rows)
        want = no_c(spec_kernels.fold_rows, kind, dtype, rows)
        assert got.dtype == np.dtype(dtype)
        assert _same(got, np.asarray(want).reshape(got.shape)), kind
        # (the fallback itself is checked against an explicit loop in
        # tests/test_spec_numerics.py)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_narrow_steps_round_like_numpy_on_every_value(no_c, dtype):
    # Every 16-bit pattern against shuffles of every other: one add or
    # multiply step (float32, then round to nearest even) against the
    # numpy/ml_dtypes path.
    every = np.arange(65536, dtype=np.uint16).view(dtype)
    rng = np.random.default_rng(16)
    for _ in range(4):
        rows = np.stack([every, rng.permutation(every)])
        for kind in ("add", "multiply"):
            got = spec_kernels.fold_rows(kind, dtype, rows)
            want = no_c(spec_kernels.fold_rows, kind, dtype, rows)
            assert _same(got, want), kind


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_narrow_contraction_rounds_like_numpy_on_every_value(no_c, dtype):
    # acc + a * w over a row of every 16-bit pattern (the vectorized row
    # loop), a few multipliers.
    # One row, and 8 rows (the register tiles).
    every = np.arange(65536, dtype=np.uint16).view(dtype)
    rng = np.random.default_rng(6)
    w = every.reshape(1, 1, -1)
    acc = rng.permutation(every).reshape(1, 1, -1)
    values = (1.0, -0.5, 3.0, 1e-3, 300.0, float(rng.standard_normal()), 6e-5, -1e-30)
    for v in values:
        a = np.full((1, 1, 1), v, dtype)
        got = spec_kernels.contract(a, w, dtype, acc)
        want = no_c(spec_kernels.contract, a, w, dtype, acc)
        assert _same(got, want), v
    a = np.array(values, dtype).reshape(1, 8, 1)
    acc = np.stack([rng.permutation(every) for _ in values]).reshape(1, 8, -1)
    got = spec_kernels.contract(a, w, dtype, acc)
    want = no_c(spec_kernels.contract, a, w, dtype, acc)
    assert _same(got, want)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_float16_paths_are_the_same_bits():
    # The C module steps float16 by AVX512-FP16 arithmetic where the CPU has
    # it (isa=0), else by F16C conversions around float32 arithmetic; isa=2
    # allows at most AVX2 and F16C, 1 (True) and 3 the portable C
    # conversions. On a CPU without an instruction set the call takes the
    # next path down, so every host compares what it has: the same bits,
    # every 16-bit pattern against a shuffle, rows of every stride kind.
    every = np.arange(65536, dtype=np.uint16).view(np.float16)
    rng = np.random.default_rng(2)
    rows = np.stack([rng.permutation(every), every, rng.permutation(every)])
    for kind in ("add", "multiply"):
        for x in (rows[1:], rows[1:, :1003], rows[1:].T, rows[1:, :40].T, rows[1:, :3]):
            got = {}
            for isa in ISAS:
                acc = (rows[0, :x.shape[1]]).copy()
                C.fold(kind, x, acc, isa)
                got[isa] = acc
            assert all(_same(got[i], got[1]) for i in ISAS), (kind, x.shape)
    for shape in ((2, 7, 300, 9), (1, 9, 40, 70), (1, 4, 3, 33)):
        B, M, K, N = shape
        a = _rows(np.random.default_rng(4), (B, M, K), np.float16)
        w = _rows(np.random.default_rng(5), (B, K, N), np.float16)
        got = {}
        for isa in ISAS:
            acc = _rows(np.random.default_rng(6), (B, M, N), np.float16)
            C.contract(a, w, acc, isa)
            got[isa] = acc
        assert all(_same(got[i], got[1]) for i in ISAS), shape
    # one product and one sum over every 16-bit pattern, in tiles
    w = every.reshape(1, 1, -1)
    a = np.array([1.0, -0.5, 3.0, 1e-3, 300.0, 6e-5, -7.0, 0.1], np.float16).reshape(1, 8, 1)
    start = np.stack([rng.permutation(every) for _ in range(8)]).reshape(1, 8, -1)
    got = {}
    for isa in ISAS:
        acc = start.copy()
        C.contract(a, w, acc, isa)
        got[isa] = acc
    assert all(_same(got[i], got[1]) for i in ISAS)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_bfloat16_single_chains_are_the_portable_bits():
    # Outputs outside the groups of 8 chains (a fold to one value, the last
    # outputs of a strided fold) step in an SSE register (chain_b) at every
    # level but the portable one (isa=1): one step over every 16-bit pattern
    # (7 outputs a call, so all of them single chains), then long chains of
    # values over a wide range of magnitudes, subnormals and ties among them.
    every = np.arange(65536, dtype=np.uint16)
    rng = np.random.default_rng(7)
    other = rng.permutation(every)
    for kind in ("add", "multiply"):
        got = {}
        for isa in ISAS:
            acc = other.copy()
            for lo in range(0, every.size, 7):
                C.fold(kind, every[lo:lo + 7].reshape(1, -1), acc[lo:lo + 7], isa)
            got[isa] = acc
        assert all(_same(got[i].view(ml_dtypes.bfloat16), got[1].view(ml_dtypes.bfloat16))
                   for i in ISAS), kind
    raw = rng.standard_normal((3000, 5)) * 2.0 ** rng.integers(-140, 128, (3000, 5))
    near_one = 1.0 + rng.standard_normal((3000, 5)) * 0.02   # products that stay finite
    for kind, chains in (("add", raw.astype(ml_dtypes.bfloat16)),
                         ("multiply", near_one.astype(ml_dtypes.bfloat16))):
        for x in (chains, chains[::-3], chains[:, :1]):
            got = {}
            for isa in ISAS:
                acc = chains[0, :x.shape[1]].copy().view(np.uint16)
                C.fold(kind, x.view(np.uint16), acc, isa)
                got[isa] = acc.view(ml_dtypes.bfloat16)
            assert all(_same(got[i], got[1]) for i in ISAS), (kind, x.shape)
        want = np.asarray(spec_kernels.fold_rows(kind, ml_dtypes.bfloat16, chains[:, :1]))
        assert _same(got[0], want.reshape(-1)), kind


def test_fold_of_negative_zeros_is_negative_zero():
    rows = np.full((5, 20), -0.0, np.float32)
    r = spec_kernels.fold_rows("add", np.float32, rows)
    assert np.all(np.signbit(r))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", FOLD_DTYPES)
@pytest.mark.parametrize("shape, axes", [((1000,), [0]), ((30, 40), [1]), ((30, 40), [0]),
                                         ((30, 40), [0, 1]), ((4, 5, 6), [0, 2]),
                                         ((4, 5, 6), [1]), ((3, 1, 7, 2), [1, 3]),
                                         ((0, 5), [0]), ((5, 0), [0])])
def test_reduce_is_the_numpy_reduce(no_c, dtype, shape, axes):
    rng = np.random.default_rng(len(shape) * 10 + sum(axes))
    x = _rows(rng, shape, dtype) if np.prod(shape) else np.zeros(shape, dtype)
    init = np.asarray(-0.0).astype(dtype)
    kinds = ["add"] if np.dtype(dtype).kind == "c" else ["add", "multiply"]
    for kind in kinds:
        got = spec_kernels.reduce(kind, x, axes, init, dtype)
        want = no_c(spec_kernels.reduce, kind, x, axes, init, dtype)
        assert got.shape == want.shape and got.dtype == want.dtype
        assert _same(got, want), kind


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
def test_reduce_of_reversed_and_strided_views(no_c, dtype):
    # negative and non-unit strides reach the C loop as they are
    x = _rows(np.random.default_rng(9), (60, 50), dtype)
    for view in (x[::-1], x[:, ::-2], x[::3, ::-1].T, np.broadcast_to(x[0], (7, 50))):
        for axes in ([0], [1], [0, 1]):
            got = spec_kernels.reduce("add", view, axes, np.zeros((), dtype), dtype)
            want = no_c(spec_kernels.reduce, "add", view, axes, np.zeros((), dtype), dtype)
            assert _same(got, want)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16,
                                   np.complex64, np.complex128])
@pytest.mark.parametrize("bmkn", [(1, 1, 1, 1), (2, 3, 300, 5), (1, 17, 4, 1030), (3, 8, 0, 4),
                                  (1, 64, 513, 64), (2, 21, 77, 1), (1, 100, 30, 15),
                                  (1, 8, 5, 16)])
def test_contract_is_the_numpy_contraction(no_c, dtype, bmkn):
    B, M, K, N = bmkn
    rng = np.random.default_rng(M * K)
    a = _rows(rng, (B, K, M), dtype).transpose(0, 2, 1)   # strided views
    b = _rows(rng, (B, N, K), dtype).transpose(0, 2, 1)
    acc = _rows(rng, (B, M, N), dtype)
    for start in (None, acc):
        got = spec_kernels.contract(a, b, dtype, start)
        want = no_c(spec_kernels.contract, a, b, dtype, start)
        assert got.shape == (B, M, N) and got.dtype == np.dtype(dtype)
        assert _same(got, want)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("bmkn", [(1, 16, 40, 64), (2, 13, 300, 70), (1, 9, 600, 17),
                                  (1, 8, 3, 16), (1, 33, 257, 100), (3, 4, 5, 40)])
def test_register_tiles_are_the_row_loop(no_c, dtype, bmkn):
    # Where w's rows are contiguous the C loop computes register tiles of
    # outputs (k in chunks, remainders by the row loop), 512-, 256- or
    # 128-bit vectors by the isa level; isa=1 takes the row loop alone. All
    # of them, and the numpy fallback: the same bits.
    B, M, K, N = bmkn
    rng = np.random.default_rng(M * N + K)
    a = _rows(rng, (B, M, K), dtype)
    w = _rows(rng, (B, K, N), dtype)
    acc = _rows(rng, (B, M, N), dtype)
    buf = spec_kernels._c_buffer     # bfloat16 as its uint16 bits
    # contiguous, then w's rows reversed (a negative k stride, the rows
    # still contiguous: tiles) and a's k strided and reversed
    for a_, w_ in ((a, w), (_rows(rng, (B, M, 2 * K), dtype)[:, :, ::-2], w[:, ::-1])):
        want = no_c(spec_kernels.contract, a_, w_, dtype, acc)
        for isa in ISAS:
            got = acc.copy()
            C.contract(buf(a_), buf(w_), buf(got), isa)
            assert _same(got, want), isa


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_bfloat16_tiles_over_several_panels():
    # bfloat16 tiles read a and w from float32 panels converted per block
    # (64 rows of a, 512 outputs of w, 256 contracted indices): more of each
    # than one panel holds, with remainders, against the row loop (isa=1).
    rng = np.random.default_rng(11)
    B, M, K, N = 1, 140, 300, 1100
    a = _rows(rng, (B, M, K), ml_dtypes.bfloat16).view(np.uint16)
    w = _rows(rng, (B, K, N), ml_dtypes.bfloat16).view(np.uint16)
    acc = _rows(rng, (B, M, N), ml_dtypes.bfloat16).view(np.uint16)
    got = {}
    for isa in ISAS:
        got[isa] = acc.copy()
        C.contract(a, w, got[isa], isa)
    for isa in ISAS:
        assert _same(got[isa].view(ml_dtypes.bfloat16), got[1].view(ml_dtypes.bfloat16)), isa


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("mn", [(16, 64), (16, 200), (24, 9)])
def test_register_tiles_round_every_product(dtype, mn):
    # As below, over a whole tile of outputs at once: acc = -1, one product
    # (1 + u)^2 = 1 + 2u + u^2 whose u^2 the product's rounding drops (half
    # an ulp of 1, a tie to even, in float32 and float64; less in float16); a
    # fused multiply-add would keep it.
    M, N = mn
    u = {np.float32: 2.0 ** -12, np.float64: 2.0 ** -27, np.float16: 2.0 ** -6}[dtype]
    e = 1 + u
    a = np.full((1, M, 1), e, dtype)
    w = np.full((1, 1, N), e, dtype)
    acc = np.full((1, M, N), -1.0, dtype)
    C.contract(a, w, acc)
    assert np.all(acc == np.asarray(2 * u, dtype))
    assert np.asarray(2 * u + u * u, dtype) != np.asarray(2 * u, dtype)


@pytest.mark.parametrize("c_loops", [True, False])
def test_contract_rounds_every_product(no_c, c_loops):
    # acc = -1 after k = 0; at k = 1 the product (1 + 2^-12)^2 = 1 + 2^-11 +
    # 2^-24 rounds (a tie, to even) to 1 + 2^-11, so the sum is 2^-11. A
    # fused multiply-add would keep the 2^-24.
    e = 1 + 2.0 ** -12
    a = np.array([[[1.0, e]]], np.float32)        # (1, 1, 2)
    b = np.array([[[-1.0], [e]]], np.float32)     # (1, 2, 1)
    run = spec_kernels.contract if c_loops else lambda *xs: no_c(spec_kernels.contract, *xs)
    assert run(a, b, np.float32)[0, 0, 0] == np.float32(2.0 ** -11)
    assert np.float32(2.0 ** -11 + 2.0 ** -24) != np.float32(2.0 ** -11)


def test_complex_division_is_divdc3(no_c):
    s = np.array([0.0, -0.0, 1.0, -1.0, 3.0, 1e-310, -1e-310, 2.2250738585072014e-308,
                  1e-300, 1e300, -1e300, 1.7976931348623157e308, 8.98846567431158e307,
                  2.0 ** -52, 2.0 ** -53, np.inf, -np.inf, np.nan])
    a, b, c, d = (g.ravel() for g in np.meshgrid(s, s, s, s))
    rng = np.random.default_rng(3)
    r = rng.standard_normal((4, 5000)) * 10.0 ** rng.integers(-307, 308, (4, 5000))
    a, b, c, d = (np.concatenate([v, w]) for v, w in zip((a, b, c, d), r))
    got = spec_kernels.divdc3(a, b, c, d)
    want = no_c(spec_kernels.divdc3, a, b, c, d)
    for g, w in zip(got, want):
        assert _same(g, w)
    # broadcast scalars, as spec_elementwise passes them
    got = spec_kernels.divdc3(1.0, 0.0, c[:9].reshape(3, 3), d[:9].reshape(3, 3))
    want = no_c(spec_kernels.divdc3, 1.0, 0.0, c[:9].reshape(3, 3), d[:9].reshape(3, 3))
    assert got[0].shape == (3, 3)
    for g, w in zip(got, want):
        assert _same(g, w)


SPEC_PROGRAM = """
func.func @main(%a: tensor<64x128xf64>, %b: tensor<128x32xf64>) -> (tensor<64x32xf64>, tensor<f64>) {
  %0 = stablehlo.exponential_minus_one %a : tensor<64x128xf64>
  %1 = stablehlo.dot_general %0, %b, contracting_dims = [1] x [0]
       : (tensor<64x128xf64>, tensor<128x32xf64>) -> tensor<64x32xf64>
  %2 = stablehlo.atan2 %1, %1 : tensor<64x32xf64>
  %z = stablehlo.constant dense<0.0> : tensor<f64>
  %3 = stablehlo.reduce(%2 init: %z) applies stablehlo.add across dimensions = [0, 1]
       : (tensor<64x32xf64>, tensor<f64>) -> tensor<f64>
  return %1, %3 : tensor<64x32xf64>, tensor<f64>
}
"""


def test_a_spec_program_is_the_same_on_both_paths(no_c):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((64, 128)), rng.standard_normal((128, 32))
    got = shi.compile(SPEC_PROGRAM, numerics="spec").run(a, b)
    want = no_c(lambda: shi.compile(SPEC_PROGRAM, numerics="spec").run(a, b))
    for g, w in zip(got, want):
        assert _same(g, w)


def test_spec_elementwise_uses_the_shared_libm():
    assert spec_elementwise.libm is spec_kernels.libm


# -- bad input: a Python exception, never a crash ---------------------------------

def test_bad_buffers_raise():
    x = np.ones(4)
    out, flag = np.empty(4), np.empty(4, np.bool_)
    with pytest.raises(ValueError, match="no C library function 'sqrt'"):
        C.unary("sqrt", x, out, flag)
    with pytest.raises(TypeError, match="float64"):
        C.unary("exp", x.astype(np.float32), out, flag)
    with pytest.raises(ValueError, match="lengths differ"):
        C.unary("exp", x, np.empty(3), flag)
    with pytest.raises((TypeError, ValueError, BufferError)):
        C.unary("exp", x, x[::2], flag)     # not contiguous
    ro = np.empty(4)
    ro.flags.writeable = False
    with pytest.raises((TypeError, ValueError, BufferError)):
        C.unary("exp", x, ro, flag)
    with pytest.raises(ValueError, match="no C library function 'hypot'"):
        C.binary("hypot", x, x, out, flag)
    with pytest.raises(ValueError, match="lengths differ"):
        C.binary("pow", x, np.ones(5), out, flag)
    with pytest.raises(ValueError, match="kind must be"):
        C.fold("max", np.ones((2, 2)), np.ones(2))
    with pytest.raises(ValueError, match="2-d float64"):
        C.fold("add", np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="2-d float32"):
        C.fold("add", np.ones((2, 2)), np.ones(2, np.float32))
    with pytest.raises(ValueError, match="acc has 3 elements"):
        C.fold("add", np.ones((2, 2)), np.ones(3))
    with pytest.raises(TypeError):
        C.fold("add", np.ones((2, 2), np.int64), np.ones(2, np.int64))
    with pytest.raises(ValueError, match="shapes do not match"):
        C.contract(np.ones((1, 2, 3)), np.ones((1, 4, 5)), np.zeros((1, 2, 5)))
    with pytest.raises(ValueError, match="3-d float64"):
        C.contract(np.ones((2, 3)), np.ones((1, 3, 5)), np.zeros((1, 2, 5)))
    with pytest.raises(TypeError):
        C.contract(np.ones((1, 2, 3)), np.ones((1, 3, 5)), "acc")
    with pytest.raises(TypeError, match="complex buffers fold as their real"):
        C.fold("add", np.ones((2, 2), np.complex64), np.ones(2, np.complex64))
    with pytest.raises(ValueError, match="3-d complex64"):
        C.contract(np.ones((1, 2, 3)), np.ones((1, 3, 5)), np.zeros((1, 2, 5), np.complex64))
    with pytest.raises(ValueError, match="cdiv: lengths differ"):
        C.cdiv(x, x, x, np.ones(3), out, np.empty(4))
    with pytest.raises(TypeError, match="float64"):
        C.cdiv(x, x, x, x, out, np.empty(4, np.float32))
    with pytest.raises(ValueError, match="isa must be 0 to 3"):
        C.fold("add", np.ones((2, 2)), np.ones(2), 4)
    with pytest.raises(ValueError, match="isa must be 0 to 3"):
        C.contract(np.ones((1, 2, 3)), np.ones((1, 3, 5)), np.zeros((1, 2, 5)), -1)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64,
                                   np.complex64])
@pytest.mark.parametrize("kind", ["add", "multiply"])
@pytest.mark.parametrize("shape,axis", [((6, 40), 1), ((6, 40), 0), ((3, 4, 9), -1),
                                        ((50, 5), 1), ((1, 300), 1)])
def test_prefix_scan_is_the_sequential_fold(dtype, kind, shape, axis):
    """spec_kernels.prefix_scan along any axis (the last one folded in
    place, the others moved to the front) is the left fold of [init, x...]
    in the element type, one step at a time; specials included."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape) * (1.5 if kind == "multiply" else 4)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    x = x.astype(dtype)
    flat = x.reshape(-1)
    flat[::7] = -0.0
    flat[3] = np.inf
    flat[11] = np.nan
    init = dtype(0 if kind == "add" else 1)
    moved = np.moveaxis(x, axis, -1)
    want = np.empty_like(moved)
    acc = np.full(moved.shape[:-1], init, dtype)
    op = np.add if kind == "add" else np.multiply
    with np.errstate(all="ignore"):   # (inf * 0, nan: as the interpreter runs kernels)
        got = spec_kernels.prefix_scan(kind, x, axis, init, dtype)
        for j in range(moved.shape[-1]):
            acc = spec_kernels.combiner(kind, np.dtype(dtype))(acc, moved[..., j]) \
                if np.dtype(dtype).kind == "c" else op(acc, moved[..., j]).astype(dtype)
            want[..., j] = acc
    assert got.dtype == np.dtype(dtype) and got.shape == x.shape
    assert cpp_reference.bits_equal(got, np.moveaxis(want, -1, axis))
