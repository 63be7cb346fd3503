"""One reducer table (ops/reducers.py) and the region ops that use it.

Expected values come from the spec's semantics computed independently here:
integers wrap modulo 2**bits, i1 add/max are `or` and multiply/min `and`,
float maximum/minimum propagate NaN and order -0 < +0, and float sums are
compared with the correctly rounded value of the exact (float64/fsum) sum.
"""

import math

import ml_dtypes
import numpy as np
import pytest

import stablehlo_interpreter as shi
from stablehlo_interpreter import pool
from stablehlo_interpreter.ops.elementwise import round_f64
from stablehlo_interpreter.ops.reducers import reducer
from stablehlo_interpreter.parallel import run_parallel

SUB_BYTE = {"i2": ml_dtypes.int2, "i4": ml_dtypes.int4, "ui2": ml_dtypes.uint2,
            "ui4": ml_dtypes.uint4}
OPS = {"add": "add", "multiply": "multiply", "maximum": "maximum", "minimum": "minimum",
       "and": "and", "or": "or", "xor": "xor"}
PY = {"add": lambda a, b: a + b, "multiply": lambda a, b: a * b, "maximum": max,
      "minimum": min, "and": lambda a, b: a & b, "or": lambda a, b: a | b,
      "xor": lambda a, b: a ^ b}


def _wrap(v, dt):
    info = ml_dtypes.iinfo(dt) if np.dtype(dt) in map(np.dtype, SUB_BYTE.values()) \
        else np.iinfo(dt)
    bits = info.bits
    v &= (1 << bits) - 1
    if info.min < 0 and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def _all_reduce_text(kind, et, shape):
    t = f"tensor<{'x'.join(map(str, shape))}x{et}>" if shape else f"tensor<{et}>"
    return f"""
func.func @main(%x: {t}) -> {t} {{
  %r = "stablehlo.all_reduce"(%x) ({{
    ^bb0(%a: tensor<{et}>, %b: tensor<{et}>):
      %s = stablehlo.{kind} %a, %b : tensor<{et}>
      stablehlo.return %s : tensor<{et}>
  }}) {{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}} : ({t}) -> {t}
  return %r : {t}
}}
"""


@pytest.mark.parametrize("et", sorted(SUB_BYTE))
@pytest.mark.parametrize("kind", sorted(OPS))
def test_all_reduce_sub_byte_ints_wrap(et, kind):
    dt = SUB_BYTE[et]
    info = ml_dtypes.iinfo(dt)
    vals = np.arange(int(info.min), int(info.max) + 1)
    rng = np.random.default_rng(0)
    xs = [rng.choice(vals, size=16) for _ in range(4)]
    outs = run_parallel(shi.compile(_all_reduce_text(kind, et, (16,))),
                        [[x.astype(dt)] for x in xs], 4, 1)
    want = []
    for j in range(16):
        acc = int(xs[0][j])
        for x in xs[1:]:
            acc = _wrap(PY[kind](acc, int(x[j])), dt)
        want.append(acc)
    for (o,) in outs:
        assert o.dtype == np.dtype(dt)
        assert o.astype(np.int64).tolist() == want


@pytest.mark.parametrize("kind,want", [("add", [True, True, False]),
                                       ("maximum", [True, True, False]),
                                       ("multiply", [False, True, False]),
                                       ("minimum", [False, True, False]),
                                       ("xor", [True, False, False])])
def test_all_reduce_bool(kind, want):
    xs = [np.array([1, 1, 0], bool), np.array([0, 1, 0], bool),
          np.array([0, 1, 0], bool), np.array([0, 1, 0], bool)]
    outs = run_parallel(shi.compile(_all_reduce_text(kind, "i1", (3,))),
                        [[x] for x in xs], 4, 1)
    for (o,) in outs:
        assert o.tolist() == want


def test_all_reduce_float_max_signed_zero_and_nan():
    f32 = np.float32
    xs = [np.array([-0.0, -0.0, 1, -0.0], f32), np.array([0.0, -0.0, np.nan, -0.0], f32),
          np.array([-0.0, -0.0, 2, -1], f32), np.array([-0.0, -0.0, 3, -0.0], f32)]
    outs = run_parallel(shi.compile(_all_reduce_text("maximum", "f32", (4,))),
                        [[x] for x in xs], 4, 1)
    for (o,) in outs:
        assert np.signbit(o[0]) == False and o[0] == 0  # noqa: E712
        assert np.signbit(o[1]) and o[1] == 0
        assert np.isnan(o[2])
        assert np.signbit(o[3]) and o[3] == 0


def test_all_reduce_bf16_sum_rounds_once():
    bf = ml_dtypes.bfloat16
    xs = [np.array([256.0], bf), np.array([1.0], bf), np.array([1.0], bf),
          np.array([0.0], bf)]
    # Sequentially in bf16: 256+1 = 256 (ties to even), 256+1 = 256; exact
    # sum 258 is representable in bf16.
    outs = run_parallel(shi.compile(_all_reduce_text("add", "bf16", (1,))),
                        [[x] for x in xs], 4, 1)
    for (o,) in outs:
        assert float(o[0]) == 258.0


# ----------------------------------------------------------------------
# The table itself


ALL_INT = ["int8", "uint8", "int32", "uint32"] + sorted(SUB_BYTE)


def _np_dt(name):
    return np.dtype(SUB_BYTE.get(name, name))


@pytest.mark.parametrize("name", ALL_INT)
@pytest.mark.parametrize("kind", sorted(OPS))
def test_integer_reduce_and_scan_wrap_like_the_spec(name, kind):
    dt = _np_dt(name)
    info = ml_dtypes.iinfo(dt) if name in SUB_BYTE else np.iinfo(dt)
    rng = np.random.default_rng(1)
    x = rng.integers(int(info.min), int(info.max), size=(3, 7), endpoint=True)
    r = reducer(kind, dt)
    assert r is not None and r.exact
    init = int(x[0, 0])
    red = r.reduce(x[1:].astype(dt), (1,), np.asarray(init).astype(dt))
    scan = r.accumulate(x[1:].astype(dt), 1, np.asarray(init).astype(dt))
    for i in range(2):
        acc = init
        for j in range(7):
            acc = _wrap(PY[kind](acc, int(x[1 + i, j])), dt)
            assert int(scan[i, j]) == acc
        assert int(red[i]) == acc
        assert red.dtype == dt and scan.dtype == dt


@pytest.mark.parametrize("kind,table", [("add", np.logical_or), ("maximum", np.logical_or),
                                        ("or", np.logical_or), ("multiply", np.logical_and),
                                        ("minimum", np.logical_and), ("and", np.logical_and),
                                        ("xor", np.logical_xor)])
def test_bool_reducers(kind, table):
    x = np.array([[0, 0, 1], [1, 1, 1], [0, 1, 0]], bool)
    r = reducer(kind, np.bool_)
    for init in (False, True):
        got = r.reduce(x, (1,), np.array(init))
        assert got.tolist() == [bool(table(init, table.reduce(row))) for row in x]
        assert r.accumulate(x, 1, np.array(init)).tolist() == \
            table(init, table.accumulate(x, axis=1)).tolist()


@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64, ml_dtypes.bfloat16,
                                ml_dtypes.float8_e4m3fn])
@pytest.mark.parametrize("kind", ["maximum", "minimum"])
def test_float_max_min_nan_signed_zero_inf(dt, kind):
    r = reducer(kind, dt)
    x = np.array([[-0.0, 0.0, -0.0], [0.0, -0.0, -0.0], [-0.0, -0.0, -0.0],
                  [1.0, np.nan, -1.0], [-np.inf, -0.0, -np.inf]]).astype(dt)
    init = np.array(-np.inf if kind == "maximum" else np.inf)
    if dt == ml_dtypes.float8_e4m3fn:
        init = np.array(-448.0 if kind == "maximum" else 448.0)
    init = init.astype(dt)
    got = r.reduce(x, (1,), init).astype(np.float64)
    scan = r.accumulate(x, 1, init).astype(np.float64)
    for i, row in enumerate(x.astype(np.float64)):
        acc = float(init)
        for j, v in enumerate(row):
            if math.isnan(acc) or math.isnan(v):
                acc = math.nan
            elif acc == v == 0:
                neg = math.copysign(1, acc) < 0, math.copysign(1, v) < 0
                acc = -0.0 if (all(neg) if kind == "maximum" else any(neg)) else 0.0
            else:
                acc = max(acc, v) if kind == "maximum" else min(acc, v)
            s = scan[i, j]
            assert (math.isnan(acc) and math.isnan(s)) or \
                (s == acc and math.copysign(1, s) == math.copysign(1, acc)), (i, j, s, acc)
        g = got[i]
        assert (math.isnan(acc) and math.isnan(g)) or \
            (g == acc and math.copysign(1, g) == math.copysign(1, acc))


@pytest.mark.parametrize("dt", [np.float16, np.float32, ml_dtypes.bfloat16])
def test_narrow_float_sum_is_the_rounded_exact_sum(dt):
    rng = np.random.default_rng(2)
    x = (rng.random((2000, 3)) * 10 + 10).astype(dt)
    got = reducer("add", dt).reduce(x, (0,), np.array(0, dt))
    for k in range(3):
        exact = math.fsum(x[:, k].astype(np.float64))
        assert float(got[k]) == float(np.array(exact).astype(dt))


@pytest.mark.parametrize("shape,axes", [
    ((64, 32, 32, 16), (0, 1, 2)),      # batch-norm statistics (leading run, two levels)
    ((100_003, 4), (0,)),               # a leading run with rows left over
    ((2000, 16, 64), (0, 2)),           # leading and trailing runs
    ((8, 300, 5, 7), (1, 2)),           # a middle run
    ((4, 50_000), (1,)),                # a trailing run (pairwise)
    ((3, 5, 7), ()),                    # nothing reduced
    ((2, 3, 4), (0,)),                  # kept dims merged into one run
    ((2, 3, 4, 5), (1, 2)),
    ((2, 300_000), (1,)),               # long rows: blocks on the helper threads
    ((600_001,), (0,)),
])
@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16, np.complex64])
def test_narrow_sums_in_place_are_correctly_rounded(shape, axes, dt):
    # Narrow floats are reduced where they lie, run by run, in float64
    # (complex128) -- no transposed copy. The result must be the exact sum
    # (math.fsum) rounded once, on data with cancellation.
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape) * np.exp(rng.uniform(-8, 8, shape))
    if dt == np.complex64:
        x = x + 1j * rng.standard_normal(shape)
    x = x.astype(dt)
    got = reducer("add", dt).reduce(x, axes, np.array(0, dt))
    assert got.shape == tuple(n for d, n in enumerate(shape) if d not in axes)
    x64 = np.moveaxis(x.astype(np.complex128 if dt == np.complex64 else np.float64), axes,
                      range(x.ndim - len(axes), x.ndim))
    flat = x64.reshape(got.shape + (-1,))
    for idx in np.ndindex(got.shape):
        v = flat[idx]
        parts = [v.real, v.imag] if dt == np.complex64 else [v]
        exact = [math.fsum(p) for p in parts]
        g = complex(got[idx]) if dt == np.complex64 else float(got[idx])
        want = complex(*[float(np.float32(e)) for e in exact]) if dt == np.complex64 \
            else float(round_f64(np.array(exact[0]), np.dtype(dt)))
        assert g == want, (idx, g, want)


@pytest.mark.parametrize("shape,axes", [((64, 32, 32, 16), (0, 1, 2)), ((2000, 16, 64), (0, 2)),
                                        ((2, 300_000), (1,)), ((600_001,), (0,))])
def test_large_sums_do_not_depend_on_the_thread_count(shape, axes, monkeypatch):
    # Large float sums run in chunks on the helper threads (pool.py); the
    # chunks are the same whatever the thread count, so are the bits.
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    monkeypatch.setattr(pool, "busy", lambda threads: False)
    got = []
    for threads in ("1", "3"):
        monkeypatch.setenv("STABLEHLO_REF_THREADS", threads)
        got.append(reducer("add", np.float32).reduce(x, axes, np.array(0, np.float32)))
    assert np.array_equal(got[0].view(np.uint32), got[1].view(np.uint32))


def test_float_sum_signed_zero_init():
    r = reducer("add", np.float32)
    x = np.array([-0.0, -0.0], np.float32)
    assert np.signbit(r.reduce(x, (0,), np.array(-0.0, np.float32)))
    assert not np.signbit(r.reduce(x, (0,), np.array(0.0, np.float32)))
    assert not np.signbit(r.accumulate(x, 0, np.array(0.0, np.float32))).any()
    assert np.signbit(r.accumulate(x, 0, np.array(-0.0, np.float32))).all()


def test_complex_sum_accumulates_wide_and_max_is_left_to_the_body():
    assert reducer("maximum", np.complex64) is None
    assert reducer("and", np.float32) is None
    x = np.array([1e8 + 1e8j, 1 + 1j, -1e8 - 1e8j], np.complex64)
    got = reducer("add", np.complex64).reduce(x, (0,), np.array(0, np.complex64))
    assert got == np.complex64(1 + 1j)


def test_scatter_max_at_signed_zero():
    r = reducer("maximum", np.float32)
    out = np.array([-0.0, -0.0, 0.0], np.float32)
    r.at(out, np.array([0, 0, 1, 2]), np.array([-0.0, 0.0, -0.0, -0.0], np.float32))
    assert [bool(np.signbit(v)) for v in out] == [False, True, False]
    r = reducer("minimum", np.float32)
    out = np.array([0.0, 0.0], np.float32)
    r.at(out, np.array([0, 1]), np.array([-0.0, 0.0], np.float32))
    assert [bool(np.signbit(v)) for v in out] == [True, False]
