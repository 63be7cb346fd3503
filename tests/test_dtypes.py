"""The one home of each dtype helper: the element-type table (interpreter)
and the plugin's PJRT buffer types derived from it, the ULP distance
(check.expect_close, compare, the oracle) and the total-order key (compare
TOTALORDER, top_k, ApproxTopK), with their edge cases."""

import ml_dtypes
import numpy as np
import pytest

from stablehlo_interpreter import dtypes
from stablehlo_interpreter.registry import one_or_many

NARROW_FLOATS = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                 "float8_e4m3b11fnuz", "float8_e4m3", "float8_e3m4", "float6_e2m3fn",
                 "float6_e3m2fn", "float4_e2m1fn"]
SIGNED_FLOATS = [np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)] + [
    np.dtype(getattr(ml_dtypes, n)) for n in NARROW_FLOATS]


def _all_values(dt):
    """Every value of a float format of at most 16 bits, in bit-pattern order."""
    width = dtypes.bit_width(dt)
    bits = np.arange(1 << width, dtype=np.uint16 if dt.itemsize == 2 else np.uint8)
    return bits.astype({1: np.uint8, 2: np.uint16}[dt.itemsize]).view(dt)


# --------------------------------------------------------------------------
# ULP distance


def test_ulp_distance_f32_edges():
    f32 = np.float32
    one = np.array([1.0], f32)
    assert dtypes.ulp_distance(one, np.nextafter(one, f32(2)))[0] == 1
    assert dtypes.ulp_distance(one, np.nextafter(one, f32(0)))[0] == 1   # across a binade
    assert dtypes.ulp_distance(np.array([0.0], f32), np.array([-0.0], f32))[0] == 0
    tiny = np.array([1e-45], f32)   # smallest subnormal
    assert dtypes.ulp_distance(tiny, -tiny)[0] == 2
    assert dtypes.ulp_distance(tiny, np.array([0.0], f32))[0] == 1
    normal = np.array([np.finfo(f32).tiny], f32)
    assert dtypes.ulp_distance(normal, np.nextafter(normal, f32(0)))[0] == 1  # to the last subnormal
    nan1 = np.array([0x7FC00000], np.uint32).view(f32)
    nan2 = np.array([0xFFC00001], np.uint32).view(f32)   # another payload, other sign
    assert dtypes.ulp_distance(nan1, nan2)[0] == 0
    big = np.iinfo(np.uint64).max
    assert dtypes.ulp_distance(nan1, one)[0] == big
    assert dtypes.ulp_distance(np.array([np.inf], f32), np.array([3e38], f32))[0] == big
    assert dtypes.ulp_distance(np.array([np.inf], f32), np.array([-np.inf], f32))[0] == big
    assert dtypes.ulp_distance(np.array([np.inf], f32), np.array([np.inf], f32))[0] == 0
    mx = np.array([np.finfo(f32).max], f32)
    assert dtypes.ulp_distance(mx, -mx)[0] == 2 * (0x7F7FFFFF)


def test_ulp_distance_shapes_and_complex():
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    d = dtypes.ulp_distance(a, a.T.copy().T)
    assert d.shape == (2, 3) and d.dtype == np.uint64 and not d.any()
    f32 = np.float32
    c = np.array([1 + 1j], np.complex64)
    c2 = np.array([complex(1.0, float(np.nextafter(f32(1), f32(2))))], np.complex64)
    assert dtypes.ulp_distance(c, c2)[0] == 1
    c3 = np.array([complex(float(np.nextafter(np.nextafter(f32(1), f32(2)), f32(2))), 1.0)],
                  np.complex64)
    assert dtypes.ulp_distance(c2, c3)[0] == 2   # the larger of the two parts


@pytest.mark.parametrize("dt", SIGNED_FLOATS[3:], ids=str)
def test_ulp_distance_narrow_floats_count_in_their_own_width(dt):
    """Adjacent finite values are 1 apart, -0/+0 are 0 apart, and a value is
    as far from its negation as twice its distance from zero (f4/f6 keep
    their sign in bit 3/5 of the byte, not bit 7)."""
    values = _all_values(dt)
    with np.errstate(invalid="ignore"):
        f = values.astype(np.float64)
    finite = values[np.isfinite(f)]
    order = np.argsort(finite.astype(np.float64), kind="stable")
    ascending = finite[order]
    fa = ascending.astype(np.float64)
    distinct = np.concatenate([[True], fa[1:] != fa[:-1]])
    steps = ascending[distinct]
    d = dtypes.ulp_distance(steps[1:], steps[:-1])
    # between -0 and +0 the sorted list has one of them only
    assert (d == 1).all(), (dt, steps[1:][d != 1])
    zero = np.zeros(1, dt)
    assert dtypes.ulp_distance(zero, -zero)[0] == 0
    pos = steps[steps.astype(np.float64) > 0]
    assert (dtypes.ulp_distance(pos, -pos) == 2 * dtypes.ulp_distance(pos, np.zeros_like(pos))).all()


def test_ulp_distance_unsigned_format():
    """f8E8M0FNU (powers of two, no sign, no zero): neighbours are 1 apart."""
    dt = np.dtype(ml_dtypes.float8_e8m0fnu)
    a = np.array([1.0, 2.0, 0.5], dt)
    b = np.array([2.0, 8.0, 1.0], dt)
    assert dtypes.ulp_distance(a, b).tolist() == [1, 2, 1]


# --------------------------------------------------------------------------
# Total order


@pytest.mark.parametrize("dt", SIGNED_FLOATS, ids=str)
def test_total_order_key_floats(dt):
    """-NaN < -inf < -max < ... < -0 < +0 < ... < +inf < +NaN."""
    specials = [-np.inf, -1.0, -0.0, 0.0, 0.5, 1.0]
    fi = dtypes.finfo(dt)
    vals = [-float(fi.max), *specials, float(fi.max)]
    if not np.isinf(np.array(np.inf, dt).astype(np.float64)):
        vals = [v for v in vals if not np.isinf(v)]   # formats without inf
    x = np.array(vals, dt)
    # keep only distinct bit patterns (fnuz formats have one zero)
    keys = dtypes.total_order_key(x)
    f = x.astype(np.float64)
    for i in range(len(x) - 1):
        if f[i] < f[i + 1]:
            assert keys[i] < keys[i + 1], (dt, f[i], f[i + 1])
    if fi.smallest_subnormal > 0:
        sub = np.array([float(fi.smallest_subnormal)], dt)
        assert dtypes.total_order_key(np.zeros(1, dt))[0] < dtypes.total_order_key(sub)[0]
    neg_zero, pos_zero = np.array([-0.0, 0.0], dt)
    if neg_zero.tobytes() != pos_zero.tobytes():
        kz = dtypes.total_order_key(np.array([-0.0, 0.0], dt))
        assert kz[0] < kz[1]
    nan = np.array([np.nan], dt)
    if np.isnan(nan.astype(np.float64))[0] and np.signbit(nan.astype(np.float64))[0] is np.False_:
        assert dtypes.total_order_key(nan)[0] > keys.max()


def test_total_order_key_keeps_shapes():
    for dt in (np.float32, ml_dtypes.bfloat16, np.int32):
        x = np.array(1, dt)
        assert dtypes.total_order_key(x).shape == ()
        y = np.arange(6, dtype=dt).reshape(2, 3)[:, ::2]   # not contiguous
        assert dtypes.total_order_key(y).shape == (2, 2)
        assert (dtypes.total_order_key(y)[:, 1] > dtypes.total_order_key(y)[:, 0]).all()


def test_total_order_key_nan_signs_f32():
    f32 = np.float32
    x = np.array([0xFFC00000, 0xFF800000, 0x80000000, 0x00000000, 0x7F800000, 0x7FC00000],
                 np.uint32).view(f32)   # -NaN, -inf, -0, +0, +inf, +NaN
    keys = dtypes.total_order_key(x)
    assert (keys[1:] > keys[:-1]).all()


def _plain_total_order_key(x):
    """total_order_key as first written: uint64 bits, np.where on the sign."""
    dt = x.dtype
    width = dtypes.bit_width(dt)
    bits = x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize])
    bits = bits.astype(np.uint64)
    if width != dt.itemsize * 8:
        bits = bits & np.uint64((1 << width) - 1)
    if float(dtypes.finfo(dt).min) >= 0:
        return bits
    sign = np.uint64(1 << (width - 1))
    full = np.uint64((1 << width) - 1)
    return np.where(bits & sign, ~bits & full, bits | sign)


@pytest.mark.parametrize("dt", SIGNED_FLOATS + [np.dtype(ml_dtypes.float8_e8m0fnu)], ids=str)
def test_total_order_key_same_keys_as_plain_formula(dt):
    """The keys (built in the format's own width, one xor) are those of the
    plain uint64 formula: every bit pattern of the formats up to 16 bits,
    random ones and the edges (zeros, NaN payloads, infinities) of f32/f64."""
    if dt.itemsize <= 2:
        x = _all_values(dt)
    else:
        u = {4: np.uint32, 8: np.uint64}[dt.itemsize]
        w = dt.itemsize * 8
        edges = np.array([0, 1, 1 << (w - 1), (1 << (w - 1)) + 1, (1 << w) - 1,
                          (1 << (w - 1)) - 1], dtype=u)
        rnd = np.random.default_rng(0).integers(0, np.iinfo(u).max, 100_000, dtype=u,
                                                endpoint=True)
        x = np.concatenate([edges, rnd]).view(dt)
    want = _plain_total_order_key(x)
    got = dtypes.total_order_key(x)
    assert got.dtype == np.uint64 and np.array_equal(got, want)
    col = x[: (x.size // 4) * 4].reshape(-1, 4)[:, 1]          # a strided view
    assert np.array_equal(dtypes.total_order_key(col), _plain_total_order_key(col))
    s = dtypes.total_order_key(x[3:4].reshape(()))                # 0-d stays an array
    assert isinstance(s, np.ndarray) and s.shape == () and s == want[3]


@pytest.mark.parametrize("dt", ["int8", "int64", "uint8", "uint64", "int4", "uint4", "int2", "bool"])
def test_total_order_key_integers(dt):
    dt = np.dtype(getattr(ml_dtypes, dt, None) or dt)
    if dt == np.bool_:
        x = np.array([False, True])
    else:
        lo, hi = dtypes.int_info(dt)
        x = np.array(sorted({lo, lo + 1, 0, hi - 1, hi}), dt)
    keys = dtypes.total_order_key(x)
    assert keys.dtype == np.uint64 and (keys[1:] > keys[:-1]).all()


# --------------------------------------------------------------------------
# Element types: the interpreter's table, the plugin's PJRT types derived from it


def test_element_type_table_roundtrips():
    for name, dt in dtypes._ELEMENT_TO_DTYPE.items():
        if name == "index":
            continue
        assert dtypes.from_element_type(name) == dt
        assert dtypes.to_element_type(dt) == name
    with pytest.raises(TypeError, match="unsupported element type"):
        dtypes.from_element_type("f7")


def test_pjrt_buffer_types_derive_from_the_interpreter_table():
    from stablehlo_pjrt import buffer
    from stablehlo_pjrt._capi import BufferType
    from stablehlo_pjrt.error import PjrtError
    names = {k: v for k, v in vars(BufferType).items() if not k.startswith("_")}
    covered = 0
    for name, t in names.items():
        if t in (BufferType.INVALID, BufferType.TOKEN):
            with pytest.raises(PjrtError):
                buffer.dtype_of(t)
            continue
        dt = buffer.dtype_of(t)
        assert buffer.type_of_dtype(dt) == t, name
        covered += 1
        if t in (BufferType.S1, BufferType.U1):
            continue   # no StableHLO element type: host transfers only
        et = dtypes.to_element_type(dt)
        assert dtypes.from_element_type(et) is dt or dtypes.from_element_type(et) == dt
        assert buffer.type_of_element(et) == t, name
    assert covered == len(names) - 2
    assert buffer.type_of_element("!stablehlo.token") == BufferType.TOKEN


def test_one_or_many():
    class Op:
        def __init__(self, n):
            self.num_results = n
    assert one_or_many(Op(1))([7]) == 7
    assert one_or_many(Op(2))([7, 8]) == [7, 8]
    assert one_or_many(Op(0))([]) == []
