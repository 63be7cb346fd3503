"""Elementwise ops (stablehlo_interpreter/ops/elementwise*.py) through real StableHLO programs.

Expected values come from independent oracles: Python integers for integer
ops (wrap-around by hand), exact rationals rounded by enumerating every value
of the narrow float types, or hand-computed special cases.
"""

import math
import os
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import stablehlo_interpreter as shi
from stablehlo_interpreter import compiler as _compiler
from stablehlo_interpreter import dtypes as D


@pytest.fixture(autouse=True, scope="module")
def _validate_results():
    # Every kernel result is checked against its declared type in this file
    # (what STABLEHLO_REF_VALIDATE=1 does). Set on the interpreter, not in
    # os.environ: the variable leaked into every subprocess the same xdist
    # worker started later (it switches off in-place donation, and changed
    # which error path a runaway recursion takes).
    saved = _compiler._DEBUG_VALIDATE
    _compiler._DEBUG_VALIDATE = os.environ.get("STABLEHLO_REF_VALIDATE", "1") not in ("", "0")
    yield
    _compiler._DEBUG_VALIDATE = saved

INT_TYPES = ["i2", "i4", "i8", "i16", "i32", "i64", "ui2", "ui4", "ui8", "ui16", "ui32", "ui64"]
FLOAT_TYPES = ["f16", "bf16", "f32", "f64", "f8E4M3FN", "f8E5M2"]


def tt(shape, et):
    return "tensor<" + "".join(f"{d}x" for d in shape) + et + ">"


_CACHE = {}


def run_op(opname, args, ets, ret, attrs="", shape=None):
    """Run one op, in generic form, on ``args`` (arrays of element types ``ets``)."""
    arrays = [np.asarray(a).astype(D.from_element_type(e)) if not isinstance(a, np.ndarray)
              or a.dtype != D.from_element_type(e) else a for a, e in zip(args, ets)]
    shapes = [a.shape for a in arrays]
    shape = shapes[0] if shape is None else shape
    key = (opname, tuple(shapes), tuple(ets), ret, attrs, shape)
    prog = _CACHE.get(key)
    if prog is None:
        ins = ", ".join(f"%a{i}: {tt(s, e)}" for i, (s, e) in enumerate(zip(shapes, ets)))
        ops = ", ".join(f"%a{i}" for i in range(len(args)))
        intys = ", ".join(tt(s, e) for s, e in zip(shapes, ets))
        text = (f"func.func @main({ins}) -> {tt(shape, ret)} {{\n"
                f"  %r = \"stablehlo.{opname}\"({ops}) {attrs} : ({intys}) -> {tt(shape, ret)}\n"
                f"  return %r : {tt(shape, ret)}\n}}")
        prog = _CACHE[key] = shi.compile(text)
    out = prog.run(*arrays)[0]
    assert isinstance(out, np.ndarray)
    assert out.dtype == D.from_element_type(ret)
    assert out.shape == tuple(shape)
    return out


def ints(et, values):
    """Python ints -> array of integer type ``et`` (values must be in range)."""
    return np.array([int(v) for v in values], dtype=np.int64 if not et.startswith("ui")
                    else np.uint64).astype(D.from_element_type(et))


def rng_ints(et, n, seed=0):
    lo, hi = D.int_info(D.from_element_type(et))
    r = np.random.default_rng(seed)
    vals = [int(v) for v in r.integers(lo, hi, size=n, endpoint=True, dtype=np.int64
                                       if hi < 2**63 else np.uint64)]
    vals += [lo, hi, 0, 1, hi - 1, lo + 1]
    return vals


def wrap(v, et):
    bits = D.bit_width(D.from_element_type(et))
    v &= (1 << bits) - 1
    if not et.startswith("ui") and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def pyints(arr):
    return [int(x) for x in np.asarray(arr).astype(np.int64 if np.asarray(arr).dtype.kind != "u"
                                                   else np.uint64).ravel()]


# --------------------------------------------------------------------------
# Integer ops against Python integers


@pytest.mark.parametrize("et", INT_TYPES)
def test_integer_add_sub_mul_negate_wrap(et):
    a = rng_ints(et, 40, 1)
    b = rng_ints(et, 40, 2)
    A, B = ints(et, a), ints(et, b)
    assert pyints(run_op("add", [A, B], [et, et], et)) == [wrap(x + y, et) for x, y in zip(a, b)]
    assert pyints(run_op("subtract", [A, B], [et, et], et)) == [wrap(x - y, et) for x, y in zip(a, b)]
    assert pyints(run_op("multiply", [A, B], [et, et], et)) == [wrap(x * y, et) for x, y in zip(a, b)]
    assert pyints(run_op("negate", [A], [et], et)) == [wrap(-x, et) for x in a]
    if not et.startswith("ui"):   # abs takes signed integers only
        assert pyints(run_op("abs", [A], [et], et)) == [wrap(abs(x), et) for x in a]


def _trunc_div(x, y):
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


@pytest.mark.parametrize("et", INT_TYPES)
def test_integer_divide_remainder(et):
    lo, hi = D.int_info(D.from_element_type(et))
    a = rng_ints(et, 40, 3) + [lo, lo, hi, hi]
    b = rng_ints(et, 40, 4) + [(-1 if lo < 0 else 1), 0, 0, 0]
    A, B = ints(et, a), ints(et, b)
    q = pyints(run_op("divide", [A, B], [et, et], et))
    r = pyints(run_op("remainder", [A, B], [et, et], et))
    for x, y, qq, rr in zip(a, b, q, r):
        if y == 0:   # XLA: x / 0 = -1 (all ones), x % 0 = x
            assert qq == wrap(-1, et) and rr == x
        elif x == lo and y == -1:   # INT_MIN / -1 = INT_MIN, remainder 0
            assert qq == lo and rr == 0
        else:
            assert qq == _trunc_div(x, y), (x, y)
            assert rr == x - _trunc_div(x, y) * y, (x, y)


def _ref_power(x, e, et):
    signed = not et.startswith("ui")
    if signed and e < 0:
        if abs(x) != 1:
            return 0
        e = -e
    return wrap(pow(x, e, 1 << 64), et)


@pytest.mark.parametrize("et", ["i4", "i8", "i32", "i64", "ui4", "ui8", "ui64"])
def test_integer_power(et):
    lo, hi = D.int_info(D.from_element_type(et))
    bases = [0, 1, 2, 3, hi, lo] + ([-1, -2, -3] if lo < 0 else [5])
    exps = [0, 1, 2, 3, 7, hi] + ([-1, -2, lo] if lo < 0 else [hi - 1])
    a = [x for x in bases for _ in exps]
    b = [e for _ in bases for e in exps]
    out = pyints(run_op("power", [ints(et, a), ints(et, b)], [et, et], et))
    assert out == [_ref_power(x, e, et) for x, e in zip(a, b)]


@pytest.mark.parametrize("et", INT_TYPES)
def test_shifts(et):
    bits = D.bit_width(D.from_element_type(et))
    a = rng_ints(et, 30, 5)
    lo, hi = D.int_info(D.from_element_type(et))
    amounts = [0, 1, bits - 1, bits, bits + 1, hi] + ([-1, lo] if lo < 0 else [hi - 1])
    amounts = [s for s in amounts if lo <= s <= hi]
    xa = [x for x in a for _ in amounts]
    sa = [s for _ in a for s in amounts]
    A, S = ints(et, xa), ints(et, sa)
    mask = (1 << bits) - 1
    left = pyints(run_op("shift_left", [A, S], [et, et], et))
    logical = pyints(run_op("shift_right_logical", [A, S], [et, et], et))
    arith = pyints(run_op("shift_right_arithmetic", [A, S], [et, et], et))
    for x, s, l_, rl, ra in zip(xa, sa, left, logical, arith):
        us = s & mask   # the amount is read as unsigned
        ux = x & mask
        sx = wrap(x, et.lstrip("u")) if bits > 1 else x
        sx = ux - (1 << bits) if ux >= 1 << (bits - 1) else ux   # signed view of the bits
        assert l_ == (wrap(ux << us, et) if us < bits else 0), (x, s)
        assert rl == (wrap(ux >> us, et) if us < bits else 0), (x, s)
        expect_ra = sx >> us if us < bits else (-1 if sx < 0 else 0)
        assert ra == wrap(expect_ra, et), (x, s)


@pytest.mark.parametrize("et", INT_TYPES)
def test_popcnt_count_leading_zeros(et):
    bits = D.bit_width(D.from_element_type(et))
    a = rng_ints(et, 50, 6)
    A = ints(et, a)
    mask = (1 << bits) - 1
    # The counts are of the operand's type, so they wrap too (popcnt(-1 : i2) = 2 = -2).
    assert pyints(run_op("popcnt", [A], [et], et)) == [wrap(bin(x & mask).count("1"), et)
                                                       for x in a]
    assert pyints(run_op("count_leading_zeros", [A], [et], et)) == \
        [wrap(bits - (x & mask).bit_length(), et) for x in a]


@pytest.mark.parametrize("et", INT_TYPES)
def test_bitwise_and_min_max_sign(et):
    bits = D.bit_width(D.from_element_type(et))
    mask = (1 << bits) - 1
    a, b = rng_ints(et, 30, 7), rng_ints(et, 30, 8)
    A, B = ints(et, a), ints(et, b)
    assert pyints(run_op("and", [A, B], [et, et], et)) == [wrap((x & y) & mask, et) for x, y in zip(a, b)]
    assert pyints(run_op("or", [A, B], [et, et], et)) == [wrap((x | y) & mask, et) for x, y in zip(a, b)]
    assert pyints(run_op("xor", [A, B], [et, et], et)) == [wrap((x ^ y) & mask, et) for x, y in zip(a, b)]
    assert pyints(run_op("not", [A], [et], et)) == [wrap(~x & mask, et) for x in a]
    assert pyints(run_op("maximum", [A, B], [et, et], et)) == [max(x, y) for x, y in zip(a, b)]
    assert pyints(run_op("minimum", [A, B], [et, et], et)) == [min(x, y) for x, y in zip(a, b)]
    if not et.startswith("ui"):   # sign takes signed integers only
        assert pyints(run_op("sign", [A], [et], et)) == [(x > 0) - (x < 0) for x in a]


def test_bool_arithmetic_and_logic():
    a = np.array([False, False, True, True])
    b = np.array([False, True, False, True])
    et = ["i1", "i1"]
    assert run_op("add", [a, b], et, "i1").tolist() == [False, True, True, True]
    assert run_op("multiply", [a, b], et, "i1").tolist() == [False, False, False, True]
    assert run_op("maximum", [a, b], et, "i1").tolist() == [False, True, True, True]
    assert run_op("minimum", [a, b], et, "i1").tolist() == [False, False, False, True]
    assert run_op("xor", [a, b], et, "i1").tolist() == [False, True, True, False]
    assert run_op("not", [a], ["i1"], "i1").tolist() == [True, True, False, False]


# --------------------------------------------------------------------------
# Floats: a rounding oracle that enumerates every value of the narrow types


_TABLES = {}


def _table(dtype):
    dtype = np.dtype(dtype)
    if dtype not in _TABLES:
        bits = D.bit_width(dtype)
        codes = np.arange(1 << bits, dtype=np.uint16 if bits == 16 else np.uint8)
        with np.errstate(invalid="ignore"):
            vals = codes.view(dtype).astype(np.float64)
        ok = np.isfinite(vals)
        order = np.argsort(vals[ok], kind="stable")
        v, c = vals[ok][order], codes[ok][order]
        keep = np.concatenate([[True], v[1:] != v[:-1]])   # +0/-0: keep one (+0 first)
        _TABLES[dtype] = (v[keep], c[keep])
    return _TABLES[dtype]


def oracle_round(q, dtype):
    """Exact rational ``q`` rounded to nearest-even in the 8/16-bit type ``dtype``."""
    vals, codes = _table(dtype)
    i = int(np.searchsorted(vals, float(q)))
    cands = [j for j in (i - 1, i, i + 1) if 0 <= j < len(vals)]
    best = min(cands, key=lambda j: (abs(Fraction(vals[j]) - q), int(codes[j]) & 1))
    return vals[best]


@pytest.mark.parametrize("et", ["bf16", "f16", "f8E5M2", "f8E4M3FN"])
@pytest.mark.parametrize("opname,fn", [("add", lambda x, y: x + y),
                                       ("subtract", lambda x, y: x - y),
                                       ("multiply", lambda x, y: x * y),
                                       ("divide", lambda x, y: x / y)])
def test_narrow_float_arithmetic_rounds_once(et, opname, fn):
    dt = D.from_element_type(et)
    r = np.random.default_rng(9)
    a = (r.standard_normal(60) * 4).astype(dt)
    b = (r.standard_normal(60) * 4).astype(dt)
    b = np.where(b.astype(np.float32) == 0, np.ones((), dt), b).astype(dt)
    out = run_op(opname, [a, b], [et, et], et).astype(np.float64)
    for x, y, o in zip(a.astype(np.float64), b.astype(np.float64), out):
        exact = fn(Fraction(x), Fraction(y))
        assert o == oracle_round(exact, dt), (x, y, o)


@pytest.mark.parametrize("et", ["bf16", "f8E4M3FN", "f8E5M2", "f16"])
def test_convert_float64_to_narrow_rounds_once(et):
    dt = D.from_element_type(et)
    vals, _ = _table(dt)
    mids = (vals[1:] + vals[:-1]) / 2     # exact ties, then nudged by a tiny amount
    mids = mids[np.abs(mids) < 200]
    if len(mids) > 300:   # the Fraction oracle is slow: a random sample of the ties
        mids = np.random.default_rng(15).choice(mids, 300, replace=False)
    xs = np.concatenate([mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)])
    out = run_op("convert", [xs], ["f64"], et).astype(np.float64)
    expect = [oracle_round(Fraction(x), dt) for x in xs]
    assert out.tolist() == expect


def test_convert_int64_to_bf16_rounds_once():
    big = [2**60 + 2**52 + 1, -(2**60 + 2**52 + 1), 2**60 + 2**52, 2**62 + 2**54 - 1, 3, 2**63 - 1]
    out = run_op("convert", [np.array(big, np.int64)], ["i64"], "bf16").astype(np.float64)
    assert out.tolist() == [oracle_round(Fraction(v), ml_dtypes.bfloat16) for v in big]
    u = [2**64 - 1, 2**63 + 2**55 + 1]
    out = run_op("convert", [np.array(u, np.uint64)], ["ui64"], "bf16").astype(np.float64)
    assert out.tolist() == [oracle_round(Fraction(v), ml_dtypes.bfloat16) for v in u]


@pytest.mark.parametrize("opname,f", [("sine", math.sin), ("cosine", math.cos),
                                      ("tan", math.tan), ("tanh", math.tanh),
                                      ("exponential", math.exp), ("exponential_minus_one", math.expm1),
                                      ("log_plus_one", math.log1p), ("logistic",
                                                                     lambda x: 1 / (1 + math.exp(-x))),
                                      ("cbrt", lambda x: math.copysign(abs(x) ** (1 / 3), x))])
def test_f32_transcendentals_are_nearly_correctly_rounded(opname, f):
    lo = -0.9 if opname == "log_plus_one" else -3
    x = np.random.default_rng(10).uniform(lo, 3, 200).astype(np.float32)
    out = run_op(opname, [x], ["f32"], "f32")
    expect = np.array([f(float(v)) for v in x]).astype(np.float32)
    ulps = np.abs(out.view(np.int32).astype(np.int64) - expect.view(np.int32).astype(np.int64))
    assert ulps.max() <= 1


@pytest.mark.parametrize("et,bits", [("f16", 16), ("f32", 32)])
def test_sqrt_is_correctly_rounded_without_the_float64_detour(et, bits):
    # f16/f32 sqrt run numpy's own loops (IEEE 754 makes sqrt correctly
    # rounded on every host): the same bits as the float64 root rounded once,
    # on every f16 value and 2**20 random f32 patterns (NaN payloads included).
    if bits == 16:
        x = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    else:
        x = np.random.default_rng(11).integers(0, 1 << 32, 1 << 20, dtype=np.uint64) \
            .astype(np.uint32).view(np.float32)
    out = run_op("sqrt", [x], [et], et)
    with np.errstate(all="ignore"):
        want = np.sqrt(x.astype(np.float64)).astype(x.dtype)
    assert np.array_equal(out.view(f"u{bits // 8}"), want.view(f"u{bits // 8}"))


@pytest.mark.parametrize("et", FLOAT_TYPES)
def test_float_special_values(et):
    dt = D.from_element_type(et)
    nan, inf = float("nan"), float("inf")
    has_inf = et not in ("f8E4M3FN",)
    a = np.array([0.0, -0.0, nan, 1.0, -2.0] + ([inf, -inf] if has_inf else [3.0, -3.0])).astype(dt)
    b = np.array([-0.0, 0.0, 1.0, nan, -2.0] + ([-inf, 1.0] if has_inf else [1.0, 1.0])).astype(dt)
    mx = run_op("maximum", [a, b], [et, et], et).astype(np.float64)
    mn = run_op("minimum", [a, b], [et, et], et).astype(np.float64)
    assert mx[0] == 0 and not np.signbit(mx[0]) and not np.signbit(mx[1])
    assert np.signbit(mn[0]) and np.signbit(mn[1])
    assert np.isnan(mx[2:4]).all() and np.isnan(mn[2:4]).all()
    assert mx[4] == -2 and mn[4] == -2
    s = run_op("sign", [a], [et], et).astype(np.float64)
    assert s[0] == 0 and not np.signbit(s[0]) and s[1] == 0 and np.signbit(s[1])
    assert np.isnan(s[2]) and s[3] == 1 and s[4] == -1
    fin = run_op("is_finite", [a], [et], "i1")
    assert fin.tolist() == [True, True, False, True, True] + ([False, False] if has_inf else [True, True])
    neg = run_op("negate", [a], [et], et).astype(np.float64)
    assert np.signbit(neg[0]) and not np.signbit(neg[1]) and neg[3] == -1
    ab = run_op("abs", [a], [et], et).astype(np.float64)
    assert not np.signbit(ab[1]) and ab[4] == 2


@pytest.mark.parametrize("et", ["f16", "bf16", "f32", "f64"])
def test_rounding_ops(et):
    dt = D.from_element_type(et)
    x = np.array([0.5, -0.5, 1.5, 2.5, -2.5, -0.25, 0.49999997, 7.0, -0.0, np.inf, np.nan]).astype(dt)
    xf = x.astype(np.float64)

    def afz(v):
        if not math.isfinite(v):
            return v
        t = math.trunc(v)
        r = t + math.copysign(1, v) if abs(v - t) >= 0.5 else t
        return math.copysign(r, v) if r == 0 else r
    out = run_op("round_nearest_afz", [x], [et], et).astype(np.float64)
    expect = np.array([afz(v) for v in xf])
    np.testing.assert_array_equal(out, expect)
    assert np.signbit(out[5]) and np.signbit(out[8])   # -0.25 -> -0.0
    np.testing.assert_array_equal(run_op("round_nearest_even", [x], [et], et).astype(np.float64),
                                  np.rint(xf))
    np.testing.assert_array_equal(run_op("floor", [x], [et], et).astype(np.float64), np.floor(xf))
    np.testing.assert_array_equal(run_op("ceil", [x], [et], et).astype(np.float64), np.ceil(xf))


@pytest.mark.parametrize("et", ["f32", "f64", "bf16"])
def test_float_remainder_and_division_by_zero(et):
    dt = D.from_element_type(et)
    a = np.array([5.5, -5.5, 5.5, -5.5, 1.0, -1.0, 0.0, np.inf]).astype(dt)
    b = np.array([2.0, 2.0, -2.0, -2.0, 0.0, 0.0, 0.0, 2.0]).astype(dt)
    r = run_op("remainder", [a, b], [et, et], et).astype(np.float64)
    assert r[:4].tolist() == [1.5, -1.5, 1.5, -1.5]   # sign of the dividend
    assert np.isnan(r[4:]).all()
    q = run_op("divide", [a, b], [et, et], et).astype(np.float64)
    assert q[4] == np.inf and q[5] == -np.inf and np.isnan(q[6]) and q[7] == np.inf


def test_float_power_and_rsqrt_and_atan2():
    x = np.array([-2.0, -0.0, -36.0, 5.0, 3.0, 2.0, 0.0], np.float64)
    y = np.array([2.0, 2.0, 1.1, 2.0, -1.0, 0.5, -1.0], np.float64)
    p = run_op("power", [x, y], ["f64", "f64"], "f64")
    assert p[0] == 4 and p[1] == 0 and np.isnan(p[2]) and p[3] == 25
    assert p[4] == 1 / 3 and p[5] == math.sqrt(2) and p[6] == np.inf
    r = run_op("rsqrt", [np.array([4.0, 0.0, -1.0, np.inf], np.float32)], ["f32"], "f32")
    assert r[0] == 0.5 and r[1] == np.inf and np.isnan(r[2]) and r[3] == 0
    t = run_op("atan2", [np.array([0.0, -0.0, 1.0, 0.0]), np.array([-1.0, -1.0, 0.0, 0.0])],
               ["f64", "f64"], "f64")
    assert t.tolist() == [math.pi, -math.pi, math.pi / 2, 0.0]


# --------------------------------------------------------------------------
# compare


def _cmp_attrs(direction, ctype=None):
    s = f"comparison_direction = #stablehlo<comparison_direction {direction}>"
    if ctype:
        s += f", compare_type = #stablehlo<comparison_type {ctype}>"
    return "{" + s + "}"


_PY_CMP = {"EQ": lambda a, b: a == b, "NE": lambda a, b: a != b, "GE": lambda a, b: a >= b,
           "GT": lambda a, b: a > b, "LE": lambda a, b: a <= b, "LT": lambda a, b: a < b}


@pytest.mark.parametrize("direction", list(_PY_CMP))
@pytest.mark.parametrize("et", FLOAT_TYPES)
def test_compare_float(direction, et):
    dt = D.from_element_type(et)
    vals = [0.0, -0.0, 1.0, -1.0, float("nan"), 2.0]
    a = np.array([x for x in vals for _ in vals]).astype(dt)
    b = np.array([y for _ in vals for y in vals]).astype(dt)
    out = run_op("compare", [a, b], [et, et], "i1", _cmp_attrs(direction, "FLOAT"))
    expect = [_PY_CMP[direction](x, y) for x in vals for y in vals]
    assert out.tolist() == expect


def _total_key(x):
    # -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN
    if math.isnan(x):
        return (2 if math.copysign(1, x) > 0 else -2, 0)
    return (0, x, math.copysign(1, x))


@pytest.mark.parametrize("direction", list(_PY_CMP))
@pytest.mark.parametrize("et", ["f32", "f64", "bf16", "f16"])
def test_compare_totalorder(direction, et):
    dt = D.from_element_type(et)
    vals = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), -float("nan"), 1.5]
    a = np.array([x for x in vals for _ in vals]).astype(dt)
    b = np.array([y for _ in vals for y in vals]).astype(dt)
    out = run_op("compare", [a, b], [et, et], "i1", _cmp_attrs(direction, "TOTALORDER"))
    expect = [_PY_CMP[direction](_total_key(x), _total_key(y)) for x in vals for y in vals]
    assert out.tolist() == expect


@pytest.mark.parametrize("direction", list(_PY_CMP))
@pytest.mark.parametrize("et,ctype", [("i8", "SIGNED"), ("i4", "SIGNED"), ("ui4", "UNSIGNED"),
                                      ("ui64", "UNSIGNED"), ("i64", None), ("i1", "UNSIGNED")])
def test_compare_integers_and_bool(direction, et, ctype):
    if et == "i1":
        a_, b_ = [0, 0, 1, 1], [0, 1, 0, 1]
        a, b = np.array(a_, bool), np.array(b_, bool)
    else:
        a_, b_ = rng_ints(et, 20, 11), rng_ints(et, 20, 12)
        a, b = ints(et, a_), ints(et, b_)
    out = run_op("compare", [a, b], [et, et], "i1", _cmp_attrs(direction, ctype))
    assert out.tolist() == [_PY_CMP[direction](x, y) for x, y in zip(a_, b_)]


@pytest.mark.parametrize("direction", list(_PY_CMP))
def test_compare_complex_lexicographic(direction):
    vals = [1 + 1j, 1 + 2j, 2 + 0j, 0 + 5j]
    a = np.array([x for x in vals for _ in vals], np.complex64)
    b = np.array([y for _ in vals for y in vals], np.complex64)
    out = run_op("compare", [a, b], ["complex<f32>"] * 2, "i1", _cmp_attrs(direction, "FLOAT"))
    key = lambda z: (z.real, z.imag)  # noqa: E731
    assert out.tolist() == [_PY_CMP[direction](key(x), key(y)) for x in vals for y in vals]


# --------------------------------------------------------------------------
# convert


@pytest.mark.parametrize("src", ["f16", "bf16", "f32", "f64"])
@pytest.mark.parametrize("dst", ["i4", "i8", "i32", "i64", "ui4", "ui8", "ui32", "ui64"])
def test_convert_float_to_int_truncates_and_saturates(src, dst):
    lo, hi = D.int_info(D.from_element_type(dst))
    vals = [1.9, -1.9, 0.5, -0.5, 100.7, -100.7, 1e30, -1e30, float("inf"), -float("inf"),
            float("nan"), 3.0e4, -3.0e4]
    with np.errstate(over="ignore"):
        x = np.array(vals).astype(D.from_element_type(src))
    out = pyints(run_op("convert", [x], [src], dst))

    def ref(v):
        if math.isnan(v):
            return 0
        if math.isinf(v):
            return hi if v > 0 else lo
        return min(max(math.trunc(v), lo), hi)
    assert out == [ref(float(v)) for v in x.astype(np.float64)]


@pytest.mark.parametrize("src", INT_TYPES)
@pytest.mark.parametrize("dst", ["i4", "i8", "i64", "ui4", "ui16", "ui64"])
def test_convert_int_to_int_wraps(src, dst):
    a = rng_ints(src, 30, 13)
    assert pyints(run_op("convert", [ints(src, a)], [src], dst)) == [wrap(v, dst) for v in a]


@pytest.mark.parametrize("et", ["i4", "i32", "ui8", "f32", "bf16", "f64", "complex<f32>"])
def test_convert_to_and_from_bool(et):
    dt = D.from_element_type(et)
    vals = [0, 1, 3, 0, 2] if D.is_integer(dt) else [0.0, 0.5, -2.0, -0.0, float("nan")]
    x = np.array(vals).astype(dt)
    assert run_op("convert", [x], [et], "i1").tolist() == [v != 0 for v in vals]
    back = run_op("convert", [np.array([True, False])], ["i1"], et)
    assert back.astype(np.complex128).tolist() == [1, 0]


def test_convert_complex():
    z = np.array([1.5 + 2j, -3.7 + 1j, 0 + 1j], np.complex128)
    assert run_op("convert", [z], ["complex<f64>"], "i32").tolist() == [1, -3, 0]
    assert run_op("convert", [z], ["complex<f64>"], "i1").tolist() == [True, True, False]
    assert run_op("convert", [z], ["complex<f64>"], "f32").tolist() == [1.5, np.float32(-3.7), 0.0]
    c = run_op("convert", [np.array([3, -7], np.int8)], ["i8"], "complex<f32>")
    assert c.tolist() == [3 + 0j, -7 + 0j]
    c = run_op("convert", [z], ["complex<f64>"], "complex<f32>")
    assert c.tolist() == z.astype(np.complex64).tolist()


def test_convert_sub_byte_and_f8():
    x = ints("i4", [-8, -1, 0, 7])
    assert run_op("convert", [x], ["i4"], "f32").tolist() == [-8, -1, 0, 7]
    assert pyints(run_op("convert", [x], ["i4"], "ui64")) == [2**64 - 8, 2**64 - 1, 0, 7]
    f = run_op("convert", [np.array([1e9, -1e9, 448.0, 0.1])], ["f64"], "f8E4M3FN")
    f = f.astype(np.float64)
    assert np.isnan(f[0]) and np.isnan(f[1]) and f[2] == 448.0   # no infinity: NaN
    assert f[3] == oracle_round(Fraction(0.1), ml_dtypes.float8_e4m3fn)
    assert run_op("convert", [np.array([1e9])], ["f64"], "f8E5M2").astype(np.float64)[0] == np.inf


# --------------------------------------------------------------------------
# bitcast_convert, reduce_precision


def test_bitcast_convert_same_and_different_widths():
    x = np.array([1.0, -2.5], np.float32)
    assert run_op("bitcast_convert", [x], ["f32"], "i32").tolist() == x.view(np.int32).tolist()
    halves = run_op("bitcast_convert", [x], ["f32"], "i16", shape=(2, 2))
    assert halves.ravel().tolist() == x.view(np.int16).tolist()   # low half first
    back = run_op("bitcast_convert", [halves], ["i16"], "f32", shape=(2,))
    assert back.tolist() == x.tolist()
    b = np.array([[1, 2, 3, 4]], np.uint8)
    assert run_op("bitcast_convert", [b], ["ui8"], "ui32", shape=(1,)).tolist() == [0x04030201]
    s = run_op("bitcast_convert", [np.array(1.0)], ["f64"], "f16", shape=(4,))
    assert s.view(np.uint16).tolist() == [0, 0, 0, 0x3FF0]
    z = run_op("bitcast_convert", [np.array([1.0 + 0j])], ["complex<f64>"], "complex<f32>",
               shape=(1, 2))
    assert z.tolist() == [[0 + 1.875j, 0j]]   # real part in the low bits


def test_bitcast_convert_sub_byte():
    nib = run_op("bitcast_convert", [np.array([0x12, 0xF0], np.uint8)], ["ui8"], "i4",
                 shape=(2, 2))
    assert pyints(nib) == [2, 1, 0, -1]
    packed = run_op("bitcast_convert", [nib], ["i4"], "ui8", shape=(2,))
    assert pyints(packed) == [0x12, 0xF0]
    assert pyints(run_op("bitcast_convert", [ints("i4", [-1, 7])], ["i4"], "ui4")) == [15, 7]
    f4 = np.array([1.0, -6.0]).astype(ml_dtypes.float4_e2m1fn)
    assert pyints(run_op("bitcast_convert", [f4], ["f4E2M1FN"], "ui4")) == [2, 15]
    bools = np.array([1, 0, 1, 1, 0, 0, 0, 0], bool)
    assert int(run_op("bitcast_convert", [bools], ["i1"], "ui8", shape=())) == 13


def _rp(x, et, e, m):
    return run_op("reduce_precision", [x], [et], et,
                  f"{{exponent_bits = {e} : i32, mantissa_bits = {m} : i32}}")


def test_reduce_precision_matches_narrow_formats():
    x = (np.random.default_rng(14).standard_normal(500) * 100).astype(np.float32)
    np.testing.assert_array_equal(_rp(x, "f32", 8, 7), x.astype(ml_dtypes.bfloat16).astype(np.float32))
    np.testing.assert_array_equal(_rp(x, "f32", 5, 10), x.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(_rp(x.astype(np.float64), "f64", 8, 23),
                                  x.astype(np.float64))


def test_reduce_precision_special_values():
    x = np.array([np.inf, np.nan, 5e-324, 0.0, 65505.0, 65520.0, -65520.0, 1e-5, -0.0])
    out = _rp(x, "f64", 5, 10)
    assert out[0] == np.inf and np.isnan(out[1])
    assert out[2] == 0 and out[3] == 0 and out[4] == 65504.0
    assert out[5] == np.inf and out[6] == -np.inf
    assert out[7] == 0           # below the smallest normal: flushed, no denormals
    assert np.signbit(out[8])
    out0 = _rp(np.array([np.nan, 1.7, 3.0], np.float32), "f32", 5, 0)
    assert out0.tolist() == [np.inf, 2.0, 2.0]   # 0 mantissa bits: NaN -> inf, ties to even


@pytest.mark.parametrize("et", ["complex<f32>", "complex<f64>"])
def test_divide_complex_special_values_annex_g(et):
    # C99 Annex G (__divdc3), as std::complex and XLA CPU divide: a zero
    # divisor gives infinities signed by copysign(inf, real(divisor)) * parts,
    # finite / infinite gives signed zeros, infinite / finite infinities.
    inf, nan = np.inf, np.nan
    dt = np.complex64 if et == "complex<f32>" else np.complex128
    cases = [  # (a, b, expected)
        (complex(-2.5, -2.5), complex(-0.0, 0.0), complex(inf, inf)),
        (complex(-2.5, -2.5), complex(0.0, 0.0), complex(-inf, -inf)),
        (complex(0.0, 1.0), complex(-0.0, 0.0), complex(nan, -inf)),
        (complex(1.0, 0.0), complex(0.0, 5.0), complex(0.0, -0.2)),
        (complex(0.0, 0.0), complex(inf, inf), complex(0.0, 0.0)),
        (complex(0.0, 1.0), complex(-inf, -inf), complex(-0.0, -0.0)),
        (complex(inf, 0.0), complex(1.0, 0.0), complex(inf, nan)),
        (complex(inf, inf), complex(1.0, 1.0), complex(inf, nan)),
        (complex(inf, 1.0), complex(0.0, 2.0), complex(nan, -inf)),
        (complex(nan, 1.0), complex(0.0, 0.0), complex(nan, inf)),
        (complex(nan, nan), complex(0.0, 0.0), complex(nan, nan)),
        (complex(3.0, 4.0), complex(1.0, 2.0), complex(2.2, -0.4)),
    ]
    a = np.array([c[0] for c in cases], dt)
    b = np.array([c[1] for c in cases], dt)
    out = run_op("divide", [a, b], [et, et], et)
    for got, (x, y, want) in zip(out.tolist(), cases):
        for g, w in ((got.real, want.real), (got.imag, want.imag)):
            if np.isnan(w):
                assert np.isnan(g), (x, y, got, want)
            else:
                assert g == pytest.approx(w, rel=1e-6) and np.signbit(g) == np.signbit(w), (x, y, got, want)



def test_rsqrt_logistic_complex_infinities():
    # 1/sqrt(z) and 1/(1+exp(-z)) divide with Annex G rules: 1/(inf+inf i)
    # is 0 - 0i (XLA CPU and std::complex), not NaN.
    inf = np.inf
    z = np.array([complex(0, inf), complex(1.5, -inf), complex(-2, 0), complex(4, 0)], np.complex64)
    r = run_op("rsqrt", [z], ["complex<f32>"], "complex<f32>")
    assert r[0].real == 0 and r[0].imag == 0 and np.signbit(r[0].imag)
    assert r[1].real == 0 and r[1].imag == 0 and not np.signbit(r[1].imag)
    assert r[2] == pytest.approx(-0.70710677j) and r[3] == pytest.approx(0.5)
    w = np.array([complex(-inf, 0), complex(inf, 0), complex(0, 0)], np.complex64)
    lg = run_op("logistic", [w], ["complex<f32>"], "complex<f32>")
    assert lg[0] == 0 and not np.isnan(lg[0].imag)
    assert lg[1] == 1 and lg[2] == 0.5

# --------------------------------------------------------------------------
# select, clamp, complex parts, map, shapes


def test_select_scalar_and_elementwise_pred():
    a = np.array([1.0, 2.0, 3.0], np.float32)
    b = np.array([-1.0, -2.0, -3.0], np.float32)
    t = ["i1", "f32", "f32"]
    assert run_op("select", [np.array(True), a, b], t, "f32", shape=(3,)).tolist() == [1, 2, 3]
    assert run_op("select", [np.array(False), a, b], t, "f32", shape=(3,)).tolist() == [-1, -2, -3]
    out = run_op("select", [np.array([True, False, True]), a, b], t, "f32")
    assert out.tolist() == [1, -2, 3]


def test_clamp_scalar_bounds_and_nan():
    x = np.array([-5.0, 0.5, 5.0, np.nan], np.float32)
    out = run_op("clamp", [np.array(0.0, np.float32), x, np.array(1.0, np.float32)],
                 ["f32"] * 3, "f32", shape=(4,))
    assert out[:3].tolist() == [0.0, 0.5, 1.0] and np.isnan(out[3])
    lo = ints("i4", [-8, 0, 2])
    out = run_op("clamp", [lo, ints("i4", [-5, 7, 1]), ints("i4", [-6, 3, 7])], ["i4"] * 3, "i4")
    assert pyints(out) == [-6, 3, 2]


def test_complex_real_imag_abs_sign():
    re = np.array([1.0, np.inf, 0.0], np.float32)
    im = np.array([2.0, 0.0, -0.0], np.float32)
    z = run_op("complex", [re, im], ["f32", "f32"], "complex<f32>")
    assert z.real.tolist() == [1.0, np.inf, 0.0] and z.imag.tolist() == [2.0, 0.0, 0.0]
    assert not np.isnan(z).any()     # no inf * 1j NaNs
    assert run_op("real", [z], ["complex<f32>"], "f32").tolist() == re.tolist()
    assert run_op("imag", [z], ["complex<f32>"], "f32").tolist() == [2.0, 0.0, 0.0]
    assert run_op("imag", [re], ["f32"], "f32").tolist() == [0.0, 0.0, 0.0]
    w = np.array([3 + 4j, 0j, complex(np.nan, 1)], np.complex128)
    assert run_op("abs", [w], ["complex<f64>"], "f64")[0] == 5.0
    s = run_op("sign", [w], ["complex<f64>"], "complex<f64>")
    assert s[0] == 0.6 + 0.8j and s[1] == 0 and np.isnan(s[2].real) and np.isnan(s[2].imag)


def test_complex_expm1_log1p_accurate_near_zero():
    z = np.array([1e-10 + 1e-10j, -1e-12 + 2e-12j], np.complex128)
    e = run_op("exponential_minus_one", [z], ["complex<f64>"], "complex<f64>")
    np.testing.assert_allclose(e, z + z * z / 2, rtol=1e-12)
    lg = run_op("log_plus_one", [z], ["complex<f64>"], "complex<f64>")
    np.testing.assert_allclose(lg, z - z * z / 2, rtol=1e-12)


def test_zero_d_and_empty_tensors():
    s = run_op("add", [np.array(2, np.int32), np.array(3, np.int32)], ["i32", "i32"], "i32")
    assert s.shape == () and int(s) == 5
    e = run_op("sine", [np.zeros((0, 3), np.float32)], ["f32"], "f32")
    assert e.shape == (0, 3)
    p = run_op("power", [np.zeros((0,), np.int64), np.zeros((0,), np.int64)], ["i64", "i64"], "i64")
    assert p.shape == (0,)
    c = run_op("convert", [np.zeros((2, 0), np.float32)], ["f32"], "bf16")
    assert c.shape == (2, 0)


MAP_BATCHABLE = """
func.func @main(%a: tensor<2x3xi32>, %b: tensor<2x3xi32>) -> tensor<2x3xi32> {
  %r = "stablehlo.map"(%a, %b) ({
    ^bb0(%x: tensor<i32>, %y: tensor<i32>):
      %c = stablehlo.constant dense<3> : tensor<i32>
      %m = stablehlo.multiply %x, %y : tensor<i32>
      %s = stablehlo.add %m, %c : tensor<i32>
      stablehlo.return %s : tensor<i32>
  }) {dimensions = array<i64: 0, 1>} : (tensor<2x3xi32>, tensor<2x3xi32>) -> tensor<2x3xi32>
  return %r : tensor<2x3xi32>
}"""

MAP_CONST = """
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %r = "stablehlo.map"(%a) ({
    ^bb0(%x: tensor<f32>):
      %c = stablehlo.constant dense<7.0> : tensor<f32>
      stablehlo.return %c : tensor<f32>
  }) {dimensions = array<i64: 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}"""

MAP_PER_ELEMENT = """
func.func @main(%a: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %r = "stablehlo.map"(%a) ({
    ^bb0(%x: tensor<f32>):
      %v = stablehlo.reshape %x : (tensor<f32>) -> tensor<1xf32>
      %z = stablehlo.constant dense<0.0> : tensor<f32>
      %s = stablehlo.reduce(%v init: %z) applies stablehlo.add across dimensions = [0]
           : (tensor<1xf32>, tensor<f32>) -> tensor<f32>
      %t = stablehlo.multiply %s, %s : tensor<f32>
      stablehlo.return %t : tensor<f32>
  }) {dimensions = array<i64: 0, 1>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  return %r : tensor<2x2xf32>
}"""


def test_map_batched_constant_and_per_element():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.arange(6, 12, dtype=np.int32).reshape(2, 3)
    out = shi.compile(MAP_BATCHABLE).run(a, b)[0]
    np.testing.assert_array_equal(out, a * b + 3)
    out = shi.compile(MAP_CONST).run(np.arange(4, dtype=np.float32))[0]
    assert out.tolist() == [7.0] * 4 and out.dtype == np.float32
    x = np.array([[1.0, -2.0], [3.0, 0.5]], np.float32)
    out = shi.compile(MAP_PER_ELEMENT).run(x)[0]
    np.testing.assert_array_equal(out, x * x)


def test_elementwise_ops_in_batched_region_bodies():
    # A batchable map body runs once on whole arrays, mixing 0-d constants
    # with them: compare, select and clamp must broadcast.
    text = """
func.func @main(%a: tensor<5xf32>) -> tensor<5xf32> {
  %r = "stablehlo.map"(%a) ({
    ^bb0(%x: tensor<f32>):
      %c = stablehlo.constant dense<1.0> : tensor<f32>
      %two = stablehlo.constant dense<2.0> : tensor<f32>
      %hi = stablehlo.constant dense<6.0> : tensor<f32>
      %p = stablehlo.compare GT, %x, %c, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %d = stablehlo.multiply %x, %two : tensor<f32>
      %s = stablehlo.select %p, %d, %x : tensor<i1>, tensor<f32>
      %k = stablehlo.clamp %c, %s, %hi : tensor<f32>
      stablehlo.return %k : tensor<f32>
  }) {dimensions = array<i64: 0>} : (tensor<5xf32>) -> tensor<5xf32>
  return %r : tensor<5xf32>
}"""
    x = np.array([0.0, 2.0, 1.0, np.nan, 5.0], np.float32)
    out = shi.compile(text).run(x)[0]
    assert out[[0, 1, 2, 4]].tolist() == [1.0, 4.0, 1.0, 6.0] and np.isnan(out[3])
