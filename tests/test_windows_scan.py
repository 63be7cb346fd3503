"""Prefix-scan reduce_windows (JAX's cumulative ops) and large windows.

The interpreter recognises a window spanning a whole axis with n-1 padding
and runs it as an accumulate or a log-depth tree scan (ops/windows.py). Here
every result is checked against a brute-force evaluation of the spec (pad with
the init value, fold init then each window's elements in order): bit for bit
where the reduction is exact (integers, max/min, and/or, bool), and against the
correctly rounded exact value for float sums, whose order the spec leaves to
the implementation.
"""

import math

import ml_dtypes
import numpy as np
import pytest
from test_windows import binop, reduce_window_ref, rw_prog

import stablehlo_interpreter as shi

SPECIALS = [np.nan, -0.0, 0.0, np.inf, -np.inf, 1.5, -2.0, 3.0]


def _scan_prog(shape, et, axis, reverse, body, n=1):
    rank = len(shape)
    w = [1] * rank
    w[axis] = shape[axis]
    pad = np.zeros((rank, 2), int)
    pad[axis, 1 if reverse else 0] = shape[axis] - 1
    ones = (1,) * rank
    return rw_prog(shape, et, shape, w, ones, ones, ones, pad, body, n=n), w, pad


def _bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    if a.dtype.kind == "f" or a.dtype in (ml_dtypes.bfloat16,):
        a, b = a.astype(np.float64), b.astype(np.float64)
        same = (a == b) & (np.signbit(a) == np.signbit(b)) | (np.isnan(a) & np.isnan(b))
        assert same.all(), (a, b)
    else:
        np.testing.assert_array_equal(a, b)


def _ieee_max(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == b == 0:
        return 0.0 if math.copysign(1, a) > 0 or math.copysign(1, b) > 0 else -0.0
    return max(a, b)


def _ieee_min(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == b == 0:
        return -0.0 if math.copysign(1, a) < 0 or math.copysign(1, b) < 0 else 0.0
    return min(a, b)


FLOAT_FOLDS = {"maximum": (_ieee_max, -np.inf), "minimum": (_ieee_min, np.inf)}


@pytest.mark.parametrize("et,dt", [("f32", np.float32), ("f64", np.float64),
                                   ("f16", np.float16), ("bf16", ml_dtypes.bfloat16)])
@pytest.mark.parametrize("kind", ["maximum", "minimum"])
@pytest.mark.parametrize("axis,reverse", [(0, False), (1, False), (0, True), (1, True)])
def test_float_max_min_scan_is_bit_identical(et, dt, kind, axis, reverse):
    rng = np.random.default_rng(0)
    x = rng.choice(SPECIALS, size=(5, 7)).astype(dt)
    prog, w, pad = _scan_prog(x.shape, et, axis, reverse, binop(kind, et))
    fn, init = FLOAT_FOLDS[kind]
    init = np.array(init, dt)
    got = prog.run(x, init)[0]

    def fold(a, b):
        return (np.array(fn(float(a), float(b)), dt),)
    want = reduce_window_ref([x], [init], w, (1, 1), (1, 1), (1, 1), pad, fold)[0]
    _bits_equal(got, want)


INT_KINDS = {"add": lambda a, b: a + b, "multiply": lambda a, b: a * b,
             "maximum": np.maximum, "minimum": np.minimum,
             "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b}
IDENTITY = {"add": 0, "multiply": 1, "maximum": None, "minimum": None, "and": -1, "or": 0,
            "xor": 0}


@pytest.mark.parametrize("et,dt", [("i8", np.int8), ("ui32", np.uint32), ("i64", np.int64),
                                   ("i4", ml_dtypes.int4), ("ui2", ml_dtypes.uint2)])
@pytest.mark.parametrize("kind", sorted(INT_KINDS))
@pytest.mark.parametrize("reverse", [False, True])
def test_integer_scan_wraps_like_the_spec(et, dt, kind, reverse):
    rng = np.random.default_rng(1)
    info = ml_dtypes.iinfo(dt) if dt in (ml_dtypes.int4, ml_dtypes.uint2) else np.iinfo(dt)
    lo, hi = max(int(info.min), -100), min(int(info.max), 100)
    x = rng.integers(lo, hi, size=(3, 9), endpoint=True).astype(dt)
    prog, w, pad = _scan_prog(x.shape, et, 1, reverse, binop(kind, et))
    ident = IDENTITY[kind]
    if ident is None:
        ident = info.min if kind == "maximum" else info.max
    init = np.array(ident).astype(dt)
    got = prog.run(x, init)[0]

    def fold(a, b):
        # wide Python ints, wrapped to the type: the spec's modular arithmetic
        return (np.array(INT_KINDS[kind](int(a), int(b))).astype(np.int64).astype(dt)
                if kind in ("add", "multiply") else np.array(INT_KINDS[kind](a, b), dt),)
    want = reduce_window_ref([x], [init], w, (1, 1), (1, 1), (1, 1), pad, fold)[0]
    _bits_equal(got.astype(np.int64), want.astype(np.int64))
    assert got.dtype == np.dtype(dt)


@pytest.mark.parametrize("kind,init", [("and", True), ("or", False), ("add", False),
                                       ("multiply", True), ("maximum", False),
                                       ("minimum", True)])
def test_bool_scan(kind, init):
    x = np.array([[0, 1, 0, 0, 1], [1, 1, 0, 1, 1]], bool)
    prog, w, pad = _scan_prog(x.shape, "i1", 1, False, binop(kind, "i1"))
    got = prog.run(x, np.array(init))[0]
    uf = np.logical_or if kind in ("or", "add", "maximum") else np.logical_and
    np.testing.assert_array_equal(got, uf.accumulate(x, axis=1))


def test_scan_with_non_identity_init_follows_the_padding():
    # init 2 for add is not idempotent: every padding element adds 2 (the
    # spec pads with the init value); the scan path must not be taken.
    x = np.arange(1, 6, dtype=np.int32).reshape(1, 5)
    prog, w, pad = _scan_prog(x.shape, "i32", 1, False, binop("add", "i32"))
    got = prog.run(x, np.array(2, np.int32))[0]
    want = reduce_window_ref([x], [np.array(2, np.int32)], w, (1, 1), (1, 1), (1, 1), pad,
                             lambda a, b: (np.int32(a + b),))[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("et,dt", [("f32", np.float32), ("f16", np.float16),
                                   ("bf16", ml_dtypes.bfloat16), ("f64", np.float64)])
@pytest.mark.parametrize("reverse", [False, True])
def test_float_cumsum_is_correctly_rounded(et, dt, reverse):
    rng = np.random.default_rng(2)
    n = 3000 if dt == np.float64 else 300
    x = (rng.random((2, n)) + 1).astype(dt)
    prog, w, pad = _scan_prog(x.shape, et, 1, reverse, binop("add", et))
    got = prog.run(x, np.array(0, dt))[0]
    xf = x.astype(np.float64)
    for r in range(2):
        row = xf[r, ::-1] if reverse else xf[r]
        exact = [math.fsum(row[:k + 1]) for k in range(n)]
        want = np.array(exact).astype(dt)
        if reverse:
            want = want[::-1]
        if dt == np.float64:
            # two-level blocked scan: within a few ulps of the exact prefix
            np.testing.assert_allclose(got[r], want, rtol=4e-16 * 4, atol=0)
        else:
            # float64 accumulation of <= 300 such terms is exact: one rounding
            np.testing.assert_array_equal(got[r].astype(np.float64), want.astype(np.float64))


def test_float_cumsum_specials_and_signed_zero():
    x = np.array([[-0.0, -0.0, 1.0, np.inf, -np.inf, 2.0],
                  [-0.0, np.nan, 1.0, 2.0, 3.0, 4.0]], np.float32)
    prog, w, pad = _scan_prog(x.shape, "f32", 1, False, binop("add", "f32"))
    got = prog.run(x, np.array(-0.0, np.float32))[0]
    want = reduce_window_ref([x], [np.array(-0.0, np.float32)], w, (1, 1), (1, 1), (1, 1),
                             pad, lambda a, b: (np.float32(a + b),))[0]
    _bits_equal(got, want)
    got = prog.run(x, np.array(0.0, np.float32))[0]
    assert not np.signbit(got[0, :2]).any()  # +0 + -0 = +0


LOGADDEXP = """    %m = stablehlo.maximum %a0, %a1 : tensor<f32>
    %d = stablehlo.subtract %a0, %a1 : tensor<f32>
    %nan = stablehlo.compare NE, %d, %d, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %s = stablehlo.add %a0, %a1 : tensor<f32>
    %ab = stablehlo.abs %d : tensor<f32>
    %ng = stablehlo.negate %ab : tensor<f32>
    %e = stablehlo.exponential %ng : tensor<f32>
    %l = stablehlo.log_plus_one %e : tensor<f32>
    %t = stablehlo.add %m, %l : tensor<f32>
    %r0 = stablehlo.select %nan, %s, %t : tensor<i1>, tensor<f32>
    stablehlo.return %r0 : tensor<f32>"""


@pytest.mark.parametrize("reverse", [False, True])
def test_logaddexp_body_runs_as_a_tree_scan(reverse):
    # JAX's cumlogsumexp body: not a known reducer, an elementwise body.
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 200)).astype(np.float32) * 5
    x[0, 5] = -np.inf
    x[1, 7] = np.inf
    x[2, 150] = np.nan
    prog, w, pad = _scan_prog(x.shape, "f32", 1, reverse, LOGADDEXP)
    got = prog.run(x, np.array(-np.inf, np.float32))[0]
    xf = x.astype(np.float64)
    want = np.logaddexp.accumulate(xf[:, ::-1] if reverse else xf, axis=1)
    if reverse:
        want = want[:, ::-1]
    np.testing.assert_allclose(got, want, rtol=2e-6)


def test_variadic_scan_body():
    # (value, count) pairs combined elementwise: a variadic body on the scan
    # (arguments: the accumulators of both operands, then both inputs).
    body = """    %v = stablehlo.maximum %a0, %a2 : tensor<f32>
    %c = stablehlo.add %a1, %a3 : tensor<f32>
    stablehlo.return %v, %c : tensor<f32>, tensor<f32>"""
    x = np.array([[3, 1, 4, 1, 5, 9, 2, 6]], np.float32)
    c = np.ones_like(x)
    prog, w, pad = _scan_prog(x.shape, "f32", 1, False, body, n=2)
    got = prog.run(x, c, np.array(-np.inf, np.float32), np.array(0, np.float32))
    np.testing.assert_array_equal(got[0], np.maximum.accumulate(x, axis=1))
    np.testing.assert_array_equal(got[1], np.cumsum(c, axis=1))


def test_scan_of_a_3d_middle_axis_and_size_one():
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    prog, w, pad = _scan_prog(x.shape, "i32", 1, True, binop("add", "i32"))
    got = prog.run(x, np.array(0, np.int32))[0]
    np.testing.assert_array_equal(got, np.flip(np.cumsum(np.flip(x, 1), axis=1), 1))
    x1 = np.array([[-0.0]], np.float32)
    prog, w, pad = _scan_prog(x1.shape, "f32", 1, False, binop("add", "f32"))
    assert not np.signbit(prog.run(x1, np.array(0.0, np.float32))[0][0, 0])


def test_large_max_window_matches_the_brute_force():
    # a big non-scan window (strided, padded both sides) through the view path
    rng = np.random.default_rng(4)
    x = rng.choice(SPECIALS, size=(1, 40)).astype(np.float32)
    pad = np.array([[0, 0], [10, 5]])
    out = (1, (40 + 15 - 30) // 2 + 1)
    prog = rw_prog(x.shape, "f32", out, (1, 30), (1, 2), (1, 1), (1, 1), pad,
                   binop("maximum", "f32"))
    init = np.array(-np.inf, np.float32)
    got = prog.run(x, init)[0]
    want = reduce_window_ref([x], [init], (1, 30), (1, 2), (1, 1), (1, 1), pad,
                             lambda a, b: (np.float32(_ieee_max(float(a), float(b))),))[0]
    _bits_equal(got, want)


# The conformance files whose expected values are a sequential element-type
# fold (tests/test_conformance_suite.py lists them as known differences).
SUITE_WINDOW_SUMS = ["cumsum_float32_8_9", "cumsum_bfloat16_8_9", "cumsum_complex64_8_9",
                     "reduce_window_add_float32_12_12"]


def _ulps(a, b):
    if a.dtype.kind == "c":
        return np.maximum(_ulps(a.real.astype(np.float32), b.real.astype(np.float32)),
                          _ulps(a.imag.astype(np.float32), b.imag.astype(np.float32)))
    scale = 65536 if a.dtype == ml_dtypes.bfloat16 else 1

    def key(v):
        i = np.asarray(v).astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(key(a) - key(b)) // scale


@pytest.mark.parametrize("name", SUITE_WINDOW_SUMS)
def test_suite_window_sums_are_correctly_rounded(name):
    import re

    from conftest import SUITE
    path = SUITE / "testdata" / f"{name}.mlir"
    if not path.exists():
        pytest.skip(f"no conformance suite at {SUITE}")
    text = re.sub(r"\s*stablehlo.custom_call @check\.[^\n]*\n", "\n", path.read_text())
    prog = shi.compile(text)
    x, expected, ours = prog.run(func="inputs")[0], prog.run(func="expected")[0], prog.run()[0]
    wd = [int(v) for v in re.search(r"window_dimensions = array<i64: ([0-9, ]+)>",
                                    text).group(1).split(",")]
    pad = np.array(eval(re.search(r"padding = dense<(\[\[.*?\]\])>", text).group(1)))
    m = re.search(r"window_strides = array<i64: ([0-9, ]+)>", text)
    strides = [int(v) for v in m.group(1).split(",")] if m else [1] * x.ndim
    wide = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
    padded = np.pad(wide, pad)  # these files' init value is 0
    exact = np.zeros(ours.shape, wide.dtype)
    for oi in np.ndindex(*ours.shape):
        win = padded[tuple(slice(o * s, o * s + w) for o, s, w in zip(oi, strides, wd))].ravel()
        exact[oi] = complex(math.fsum(win.real), math.fsum(win.imag)) \
            if wide.dtype.kind == "c" else math.fsum(win)
    rounded = exact.astype(x.dtype)
    assert _ulps(ours, rounded).max() == 0
    assert _ulps(expected, rounded).max() > 3  # why the file's check (3 ULP) fails
