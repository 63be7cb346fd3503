"""Kernel fast paths chosen by an operand's values or layout, against the spec.

Each is taken at run time when a cheap test says it applies (a mask that is
all true or all false, a divisor that is one value, a reduction over size-1
axes, a bool operand that is 0-d) and must give the bits the general path
gives: expected values come from Python integers, numpy on the same bits, or
the general kernels the fast paths skip (dtypes.total_order_key).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import stablehlo_interpreter as shi
from stablehlo_interpreter import dtypes as D
from stablehlo_interpreter import fusion

N = 1 << 15   # at least the select fast paths' minimum sizes (ops/elementwise.py)


def test_sizes_reach_the_fast_paths():
    from stablehlo_interpreter.ops import elementwise as ew
    assert N >= ew._UNIFORM_MIN and N >= ew._BIT_SELECT_MIN


def tt(shape, et):
    return "tensor<" + "".join(f"{d}x" for d in shape) + et + ">"


def bits(a):
    a = np.ascontiguousarray(a)
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    return a.view(f"u{a.dtype.itemsize}")


def same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(bits(a), bits(b))


# --------------------------------------------------------------------------
# select with a mask that is all true or all false


def _special(dt, n, rng):
    dt = np.dtype(dt)
    if dt == np.bool_:
        return rng.random(n) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    x = rng.standard_normal(n).astype(np.float32).astype(dt)
    u = x.view(f"u{dt.itemsize}")
    sign = np.array(1 << (8 * dt.itemsize - 1), dtype=object).astype(u.dtype)
    u[::5] = np.asarray(np.nan, dt).view(u.dtype) | u.dtype.type(3)   # NaN payload
    u[1::7] = sign                                                    # -0
    u[2::9] = np.asarray(np.nan, dt).view(u.dtype) | sign             # -NaN
    return x


MASKS = {
    "all_true": lambda n: np.ones(n, bool),
    "all_false": lambda n: np.zeros(n, bool),
    "last_false": lambda n: np.arange(n) < n - 1,
    "last_true": lambda n: np.arange(n) == n - 1,
    "mixed": lambda n: np.random.default_rng(3).random(n) < 0.5,
}


@pytest.mark.parametrize("et", ["f32", "f64", "bf16", "f16", "i32", "ui8", "i64", "i1"])
@pytest.mark.parametrize("mask", list(MASKS))
def test_select_uniform_and_mixed_masks(et, mask):
    dt = D.from_element_type(et)
    rng = np.random.default_rng(len(et) + len(mask))
    t, f = _special(dt, N, rng), _special(dt, N, rng)
    p = MASKS[mask](N)
    text = (f"func.func @main(%p: {tt((N,), 'i1')}, %t: {tt((N,), et)}, %f: {tt((N,), et)})"
            f" -> {tt((N,), et)} {{\n"
            f"  %r = stablehlo.select %p, %t, %f : {tt((N,), 'i1')}, {tt((N,), et)}\n"
            f"  return %r : {tt((N,), et)}\n}}")
    got = shi.compile(text).run(p, t, f)[0]
    assert same_bits(got, np.where(p, t, f))


@pytest.mark.parametrize("et", ["f32", "f64", "i8", "bf16"])
def test_select_of_large_arrays_in_blocks(et):
    # Above 2 blocks the bit select runs block by block (ops/elementwise.py
    # _SELECT_BLOCK): contiguous operands, a broadcast scalar, a ragged end,
    # and a strided operand (not blocked).
    from stablehlo_interpreter.ops import elementwise as ew
    dt = D.from_element_type(et)
    n = 2 * ew._SELECT_BLOCK + 777
    rng = np.random.default_rng(11)
    t, f = _special(dt, n, rng), _special(dt, n, rng)
    p = rng.random(n) < 0.5
    c = _special(dt, 3, rng)[:1].reshape(())
    for tt_, ff in ((t, f), (t, np.broadcast_to(c, (n,))), (np.broadcast_to(c, (n,)), f),
                    (t, c), (_special(dt, 2 * n, rng)[::2], f)):
        got = ew._bit_select(p, tt_, ff)
        assert same_bits(got, np.where(p, tt_, ff))


@pytest.mark.parametrize("et", ["f32", "f64", "bf16", "f16", "i32", "ui8", "i1"])
@pytest.mark.parametrize("n", [N, 2 * (1 << 17) + 5])
def test_select_with_a_zero_operand(et, n):
    # One operand all zero bits (0-d or broadcast): the other's bits times
    # the (negated) mask. -0.0 is not zero bits and takes the general path.
    from stablehlo_interpreter.ops import elementwise as ew
    dt = D.from_element_type(et)
    rng = np.random.default_rng(n + len(et))
    x = _special(dt, n, rng)
    p = rng.random(n) < 0.5
    zeros = [np.zeros((), dt), np.broadcast_to(np.zeros((), dt), (n,))]
    if dt.kind == "f" or et in ("bf16",):
        zeros.append(np.asarray(-0.0).astype(dt))
    for z in zeros:
        assert same_bits(ew._bit_select(p, x, z), np.where(p, x, z))
        assert same_bits(ew._bit_select(p, z, x), np.where(p, z, x))


def test_selected_operand_is_not_updated_in_place_later():
    # A uniform mask returns an operand itself; a later op that may update
    # its dying first operand in place (add's donation) must not change the
    # select's result through it.
    t = tt((N,), "f32")
    text = (f"func.func @main(%p: {tt((N,), 'i1')}, %a: {t}, %x: {t}) -> ({t}, {t}) {{\n"
            f"  %b = stablehlo.negate %x : {t}\n"
            f"  %r = stablehlo.select %p, %a, %b : {tt((N,), 'i1')}, {t}\n"
            f"  %s = stablehlo.add %b, %a : {t}\n"
            f"  return %r, %s : {t}, {t}\n}}")
    x = np.arange(N, dtype=np.float32)
    a = np.full(N, 0.5, np.float32)
    r, s = shi.compile(text).run(np.zeros(N, bool), a, x)
    assert same_bits(r, -x)
    assert same_bits(s, -x + a)


@pytest.mark.parametrize("mask_value", ["0.0", "1.0e+30"])
def test_select_uniform_masks_in_a_fused_chain(mask_value, monkeypatch):
    # jnp.searchsorted's canonicalisation: select(x == 0, 0, x) and
    # select(x != x, NaN, ...) with 0-d (broadcast) operands in a fused chain.
    n = fusion.MIN_ELEMENTS * 2
    t, b = tt((n,), "f32"), tt((n,), "i1")
    text = (f"func.func @main(%x: {t}) -> ({t}, {t}) {{\n"
            f"  %c0 = stablehlo.constant dense<{mask_value}> : tensor<f32>\n"
            f"  %z = stablehlo.broadcast_in_dim %c0, dims = [] : (tensor<f32>) -> {t}\n"
            f"  %cn = stablehlo.constant dense<0x7FC00000> : tensor<f32>\n"
            f"  %nan = stablehlo.broadcast_in_dim %cn, dims = [] : (tensor<f32>) -> {t}\n"
            f"  %e = stablehlo.compare EQ, %x, %z, FLOAT : ({t}, {t}) -> {b}\n"
            f"  %s = stablehlo.select %e, %z, %x : {b}, {t}\n"
            f"  %m = stablehlo.compare NE, %x, %x, FLOAT : ({t}, {t}) -> {b}\n"
            f"  %r = stablehlo.select %m, %nan, %s : {b}, {t}\n"
            f"  %ge = stablehlo.compare GE, %r, %z, FLOAT : ({t}, {t}) -> {b}\n"
            f"  %q = stablehlo.select %ge, %x, %z : {b}, {t}\n"
            f"  return %r, %q : {t}, {t}\n}}")
    rng = np.random.default_rng(0)
    for x in (rng.standard_normal(n).astype(np.float32) + 3,          # masks all false/true
              np.where(rng.random(n) < 0.01, np.float32(np.nan), np.float32(-0.0))):
        mv = np.float32(mask_value)
        want_r = np.where(x != x, np.float32(np.nan), np.where(x == mv, mv, x))
        want_q = np.where(want_r >= mv, x, mv)
        program = shi.compile(text)
        got = program.run(x)
        assert any(isinstance(f[1], fusion.FusedChain) for f in program.functions["main"].block._fast)
        assert same_bits(got[0], want_r) and same_bits(got[1], want_q)
        monkeypatch.setenv("STABLEHLO_REF_FUSION", "0")
        plain = shi.compile(text).run(x)
        monkeypatch.delenv("STABLEHLO_REF_FUSION")
        assert same_bits(got[0], plain[0]) and same_bits(got[1], plain[1])


# --------------------------------------------------------------------------
# integer divide by one value (a broadcast scalar)


INT_TYPES = ["i4", "i8", "i16", "i32", "i64", "ui4", "ui8", "ui16", "ui32", "ui64"]


def _pyints(a):
    a = np.asarray(a)
    return [int(v) for v in a.astype(np.uint64 if a.dtype.kind == "u" else np.int64).ravel()]


def _wrap(v, et):
    nbits = D.bit_width(D.from_element_type(et))
    v &= (1 << nbits) - 1
    if not et.startswith("ui") and v >= 1 << (nbits - 1):
        v -= 1 << nbits
    return v


def _xla_divide(x, y, et):
    lo, _ = D.int_info(D.from_element_type(et))
    if y == 0:
        return _wrap(-1, et)
    if x == lo and y == -1:
        return lo
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


@pytest.mark.parametrize("et", INT_TYPES)
def test_divide_by_a_broadcast_scalar(et):
    dt = D.from_element_type(et)
    lo, hi = D.int_info(dt)
    rng = np.random.default_rng(len(et))
    car = np.uint64 if et.startswith("ui") else np.int64
    xs = [int(v) for v in rng.integers(lo, hi, 500, dtype=car, endpoint=True)]
    xs += [v for v in (lo, lo + 1, hi, hi - 1, 0, 1, 2, 3, 7, 8, 9) if lo <= v <= hi]
    x = np.array(xs, dtype=car).astype(dt)
    n = x.size
    divisors = {lo, lo + 1, hi, hi - 1, 0, 1, 2, 3, 4, 7, 8, 10, 16, -1, -2, -3, -8}
    divisors = sorted(d for d in divisors if lo <= d <= hi)
    text = (f"func.func @main(%x: {tt((n,), et)}, %d: tensor<{et}>) -> {tt((n,), et)} {{\n"
            f"  %b = stablehlo.broadcast_in_dim %d, dims = [] : (tensor<{et}>) -> {tt((n,), et)}\n"
            f"  %q = stablehlo.divide %x, %b : {tt((n,), et)}\n"
            f"  return %q : {tt((n,), et)}\n}}")
    program = shi.compile(text)
    for d in divisors:
        got = _pyints(program.run(x, np.array(d, dtype=car).astype(dt))[0])
        assert got == [_xla_divide(v, d, et) for v in xs], (et, d)


@pytest.mark.parametrize("et", ["ui8", "ui32", "ui64", "ui4"])
def test_unsigned_divide_by_an_array_without_zeros(et):
    dt = D.from_element_type(et)
    _, hi = D.int_info(dt)
    rng = np.random.default_rng(1)
    x = rng.integers(0, hi, 2000, dtype=np.uint64, endpoint=True)
    y = rng.integers(1, hi, 2000, dtype=np.uint64, endpoint=True)
    y[:5] = [1, 2, hi, hi - 1, 3] if hi > 3 else [1, 2, 3, 1, 2]
    text = (f"func.func @main(%x: {tt((2000,), et)}, %y: {tt((2000,), et)}) -> {tt((2000,), et)} {{\n"
            f"  %q = stablehlo.divide %x, %y : {tt((2000,), et)}\n"
            f"  return %q : {tt((2000,), et)}\n}}")
    got = _pyints(shi.compile(text).run(x.astype(dt), y.astype(dt))[0])
    assert got == [int(a) // int(b) for a, b in zip(x, y)]


# --------------------------------------------------------------------------
# TOTALORDER compare in the type's own width


def _all_patterns(dt):
    u = np.arange(1 << (8 * np.dtype(dt).itemsize), dtype=np.uint64)
    return u.astype(f"u{np.dtype(dt).itemsize}").view(dt)


def _float_patterns(dt, n, rng):
    dt = np.dtype(dt)
    u = rng.integers(0, 1 << (8 * dt.itemsize) - 1, n, dtype=np.uint64, endpoint=True)
    x = u.astype(f"u{dt.itemsize}").view(dt).copy()
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0], dt)
    x[: special.size] = special
    return x


_NP_CMP = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
           "GT": np.greater, "GE": np.greater_equal}


@pytest.mark.parametrize("et", ["f16", "bf16", "f32", "f64"])
def test_totalorder_compare_matches_the_uint64_keys(et):
    dt = D.from_element_type(et)
    rng = np.random.default_rng(7)
    if np.dtype(dt).itemsize == 2:
        a = _all_patterns(dt)                 # every value against shifted copies of all
        pairs = [(a, np.roll(a, k)) for k in (1, 255, 32768, 40000)]
        pairs.append((a, a[rng.permutation(a.size)]))
    else:
        a = _float_patterns(dt, 100_000, rng)
        pairs = [(a, np.roll(a, 1)), (a, _float_patterns(dt, 100_000, rng)), (a, a.copy())]
    n = pairs[0][0].size
    for direction, fn in _NP_CMP.items():
        text = (f"func.func @main(%a: {tt((n,), et)}, %b: {tt((n,), et)}) -> {tt((n,), 'i1')} {{\n"
                f"  %r = stablehlo.compare {direction}, %a, %b, TOTALORDER : "
                f"({tt((n,), et)}, {tt((n,), et)}) -> {tt((n,), 'i1')}\n"
                f"  return %r : {tt((n,), 'i1')}\n}}")
        program = shi.compile(text)
        for x, y in pairs:
            want = fn(D.total_order_key(x), D.total_order_key(y))
            assert np.array_equal(program.run(x, y)[0], want), (et, direction)


@pytest.mark.parametrize("et", ["f16", "f32", "f64"])
def test_totalorder_compare_by_the_float_order_where_it_is_total(et):
    """The float compare stands in for the keys when neither operand has a
    NaN and one has no zero (elementwise._float_order_is_total); every
    other case -- a NaN on either side, zeros on both, small operands, a
    0-d operand -- gives the keys' answer too."""
    from stablehlo_interpreter.ops import elementwise as E
    dt = np.dtype(D.from_element_type(et))
    rng = np.random.default_rng(11)
    n = 4096
    base = rng.standard_normal(n).astype(dt)
    base[base == 0] = 1
    fin = np.finfo(dt)
    base[:6] = [fin.max, -fin.max, fin.tiny, -fin.tiny, np.inf, -np.inf]
    other = np.where(rng.random(n) < 0.3, base, rng.standard_normal(n).astype(dt))
    zeros = base.copy()
    zeros[::7] = 0.0
    zeros[3::7] = -0.0
    nans = base.copy()
    nans[n // 2] = np.nan
    cases = {
        "no NaN, no zero": (base, other, True),
        "zeros on one side": (zeros, other, True),
        "zeros on the other": (other, zeros, True),
        "zeros on both": (zeros, zeros[::-1].copy(), False),
        "a NaN in a": (nans, other, False),
        "a NaN in b": (other, nans, False),
        "small": (base[:100], other[:100], False),
        "0-d b": (base, np.array(-0.0, dt), True),
    }
    for name, (x, y, plain) in cases.items():
        assert E._float_order_is_total(x, y) == plain, name
        text = (f"func.func @main(%a: {tt(x.shape, et)}, %b: {tt(y.shape, et)}) -> "
                f"{tt(x.shape, 'i1')} {{\n")
        rhs = "%b" if y.shape == x.shape else "%bb"
        if rhs == "%bb":
            text += (f"  %bb = stablehlo.broadcast_in_dim %b, dims = [] : ({tt(y.shape, et)}) -> "
                     f"{tt(x.shape, et)}\n")
        for direction, fn in _NP_CMP.items():
            prog = shi.compile(text + (
                f"  %r = stablehlo.compare {direction}, %a, {rhs}, TOTALORDER : "
                f"({tt(x.shape, et)}, {tt(x.shape, et)}) -> {tt(x.shape, 'i1')}\n"
                f"  return %r : {tt(x.shape, 'i1')}\n}}"))
            want = fn(D.total_order_key(x), D.total_order_key(np.broadcast_to(y, x.shape)))
            assert np.array_equal(prog.run(x, y)[0], want), (et, name, direction)


def test_totalorder_compare_of_0d_values():
    text = ("func.func @main(%a: tensor<f32>, %b: tensor<f32>) -> tensor<i1> {\n"
            "  %r = stablehlo.compare LT, %a, %b, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
            "  return %r : tensor<i1>\n}")
    program = shi.compile(text)
    vals = [-np.nan, -np.inf, -1.0, -0.0, 0.0, 1.0, np.inf, np.nan]
    for i, x in enumerate(vals):
        for j, y in enumerate(vals):
            got = program.run(np.float32(x), np.float32(y))[0]
            assert got.shape == () and bool(got) == (i < j), (x, y)


# --------------------------------------------------------------------------
# reductions over size-1 axes, bool bodies with a 0-d init or operand


def _reduce_text(shape, et, body, dims, out_shape):
    return (f"func.func @main(%x: {tt(shape, et)}, %i: tensor<{et}>) -> {tt(out_shape, et)} {{\n"
            f"  %r = stablehlo.reduce(%x init: %i) applies stablehlo.{body} across dimensions = "
            f"{list(dims)} : ({tt(shape, et)}, tensor<{et}>) -> {tt(out_shape, et)}\n"
            f"  return %r : {tt(out_shape, et)}\n}}")


_BOOL_BODY = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
              "add": np.logical_or, "multiply": np.logical_and,
              "maximum": np.logical_or, "minimum": np.logical_and}


@pytest.mark.parametrize("body", list(_BOOL_BODY))
@pytest.mark.parametrize("init", [False, True])
def test_bool_reductions_with_0d_inits(body, init):
    rng = np.random.default_rng(2)
    x = rng.random((300, 40, 1)) < 0.5
    x[:5] = True
    x[5:10] = False
    fn = _BOOL_BODY[body]
    for dims, shape_out in (((2,), (300, 40)), ((1, 2), (300,)), ((1,), (300, 1))):
        text = _reduce_text(x.shape, "i1", body, dims, shape_out)
        got = shi.compile(text).run(x, np.array(init))[0]
        want = fn(np.bool_(init), fn.reduce(x, axis=dims))
        assert np.array_equal(got, want) and got.dtype == np.bool_, (body, init, dims)


def _ieee_max(a, b, pick_max):
    """IEEE maximum/minimum of float arrays by the spec (NaN wins, -0 < +0)."""
    out = np.where(a > b, a, b) if pick_max else np.where(a < b, a, b)
    eq = (a == b)
    zs = np.where(np.signbit(a) & np.signbit(b), -0.0, 0.0) if pick_max else \
        np.where(np.signbit(a) | np.signbit(b), -0.0, 0.0)
    out = np.where(eq & (a == 0), zs.astype(a.dtype), out)
    return np.where(np.isnan(a), a, np.where(np.isnan(b), b, out))


@pytest.mark.parametrize("et,body", [("i32", "add"), ("ui8", "maximum"), ("i64", "minimum"),
                                     ("f32", "maximum"), ("f32", "minimum"), ("bf16", "maximum"),
                                     ("f64", "minimum")])
def test_reductions_over_size_1_axes(et, body):
    dt = D.from_element_type(et)
    rng = np.random.default_rng(4)
    x = _special(dt, 2000, rng).reshape(1, 2000, 1)
    for init in ([0, 5, -3] if np.dtype(dt).kind in "iu" else [0.0, -0.0, np.nan, -np.inf, 1.0]):
        i0 = np.array(init).astype(dt)
        got = shi.compile(_reduce_text(x.shape, et, body, (0, 2), (2000,))).run(x, i0)[0]
        flat = x.reshape(-1)
        if np.dtype(dt).kind in "iu":
            fn = {"add": np.add, "maximum": np.maximum, "minimum": np.minimum}[body]
            want = fn(i0, flat).astype(dt)
        else:
            a = np.broadcast_to(i0, flat.shape).astype(np.float64)
            want = _ieee_max(a, flat.astype(np.float64), body == "maximum").astype(dt)
        assert same_bits(got, want), (et, body, init)


@pytest.mark.parametrize("op", ["and", "or", "xor"])
@pytest.mark.parametrize("value", ["true", "false"])
def test_bool_bitwise_with_a_broadcast_constant(op, value, monkeypatch):
    # Fused chains pass the broadcast constant 0-d: the byte path.
    n = fusion.MIN_ELEMENTS * 2
    t = tt((n,), "i1")
    text = (f"func.func @main(%x: {t}, %y: {t}) -> {t} {{\n"
            f"  %c = stablehlo.constant dense<{value}> : tensor<i1>\n"
            f"  %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i1>) -> {t}\n"
            f"  %a = stablehlo.xor %x, %y : {t}\n"
            f"  %r = stablehlo.{op} %a, %b : {t}\n"
            f"  return %r : {t}\n}}")
    rng = np.random.default_rng(5)
    x, y = rng.random(n) < 0.5, rng.random(n) < 0.3
    fn = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[op]
    want = fn(x ^ y, value == "true")
    got = shi.compile(text).run(x, y)[0]
    assert got.dtype == np.bool_ and np.array_equal(bits(got), bits(want))
    monkeypatch.setenv("STABLEHLO_REF_FUSION", "0")
    assert np.array_equal(bits(shi.compile(text).run(x, y)[0]), bits(want))


# --------------------------------------------------------------------------
# malloc thresholds (heap.py)


def _tuned(env):
    code = ("import stablehlo_interpreter as shi; from stablehlo_interpreter import heap\n"
            "shi.compile('func.func @main() -> () { return }'); print(heap.tuned)")
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES" and k != "STABLEHLO_REF_MALLOC"}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_malloc_thresholds_are_set_once_unless_the_user_chose():
    import ctypes
    glibc = hasattr(ctypes.CDLL(None), "gnu_get_libc_version")
    assert _tuned({}) == str(glibc)
    assert _tuned({"STABLEHLO_REF_MALLOC": "0"}) == "False"
    assert _tuned({"MALLOC_TOP_PAD_": "1048576"}) == "False"



# --------------------------------------------------------------------------
# argmax / argmin reductions (ops/reduce.py arg_reduce)


def _argmax_body(direction, vt, it, ctype, tie="LT"):
    return (f"  reducer(%a: tensor<{vt}>, %b: tensor<{vt}>) (%i: tensor<{it}>, %j: tensor<{it}>) {{\n"
            f"    %0 = stablehlo.compare {direction}, %a, %b, {ctype} : (tensor<{vt}>, tensor<{vt}>) -> tensor<i1>\n"
            f"    %1 = stablehlo.compare NE, %a, %a, {ctype} : (tensor<{vt}>, tensor<{vt}>) -> tensor<i1>\n"
            f"    %2 = stablehlo.or %0, %1 : tensor<i1>\n"
            f"    %3 = stablehlo.compare EQ, %a, %b, {ctype} : (tensor<{vt}>, tensor<{vt}>) -> tensor<i1>\n"
            f"    %4 = stablehlo.compare {tie}, %i, %j, SIGNED : (tensor<{it}>, tensor<{it}>) -> tensor<i1>\n"
            f"    %5 = stablehlo.and %3, %4 : tensor<i1>\n"
            f"    %6 = stablehlo.or %2, %5 : tensor<i1>\n"
            f"    %7 = stablehlo.select %2, %a, %b : tensor<i1>, tensor<{vt}>\n"
            f"    %8 = stablehlo.select %6, %i, %j : tensor<i1>, tensor<{it}>\n"
            f"    stablehlo.return %7, %8 : tensor<{vt}>, tensor<{it}>\n  }}\n")


def _argmax_text(shape, d, direction, vt, ctype, iota=True, tie="LT"):
    out = tuple(n for k, n in enumerate(shape) if k != d)
    idx = (f"  %idx = stablehlo.iota dim = {d} : {tt(shape, 'i32')}\n" if iota else "")
    params = f"%x: {tt(shape, vt)}, %v0: tensor<{vt}>, %i0: tensor<i32>" + \
        ("" if iota else f", %idx: {tt(shape, 'i32')}")
    return (f"func.func @main({params}) -> ({tt(out, vt)}, {tt(out, 'i32')}) {{\n" + idx +
            f"  %r:2 = stablehlo.reduce(%x init: %v0), (%idx init: %i0) across dimensions = [{d}] :"
            f" ({tt(shape, vt)}, {tt(shape, 'i32')}, tensor<{vt}>, tensor<i32>) -> "
            f"({tt(out, vt)}, {tt(out, 'i32')})\n" + _argmax_body(direction, vt, "i32", ctype, tie) +
            f"  return %r#0, %r#1 : {tt(out, vt)}, {tt(out, 'i32')}\n}}")


def _fold(x, idx, v0, i0, d, direction, tie_lt=True):
    """The spec's sequential schedule of the body, element by element."""
    xm, im = np.moveaxis(x, d, -1), np.moveaxis(idx, d, -1)
    vals = np.empty(xm.shape[:-1], x.dtype)
    inds = np.empty(xm.shape[:-1], np.int32)
    for r in np.ndindex(*xm.shape[:-1]):
        av, ai = v0[()], i0[()]
        for bv, bi in zip(xm[r], im[r]):
            better = av > bv if direction == "GT" else av < bv
            pick = bool(better) or bool(av != av)
            pick_i = pick or bool(av == bv and (ai < bi if tie_lt else ai > bi))
            av, ai = (av if pick else bv), (ai if pick_i else bi)
        vals[r], inds[r] = av, ai
    return vals, inds


def _arg_values(vt, shape, rng):
    dt = D.from_element_type(vt)
    if vt == "i1":
        return rng.random(shape) < 0.3
    if np.dtype(dt).kind in "iu":
        return rng.integers(0, 5, shape).astype(dt)   # many ties
    x = rng.choice(np.array([0.0, -0.0, 1.0, -1.0, 2.0, -np.inf, np.inf], np.float64), shape)
    x[rng.random(shape) < 0.03] = np.nan
    x = x.astype(dt)
    x[0] = -0.0    # a row of zeros only: value of the last zero, index of the first
    x[1, ::2] = 0.0
    return x


@pytest.mark.parametrize("vt,ctype", [("f32", "FLOAT"), ("f64", "FLOAT"), ("f16", "FLOAT"),
                                      ("i32", "SIGNED"), ("ui8", "UNSIGNED"), ("i1", "UNSIGNED")])
@pytest.mark.parametrize("direction", ["GT", "LT"])
@pytest.mark.parametrize("d", [0, 1])
def test_argmax_argmin_reductions_match_the_sequential_schedule(vt, ctype, direction, d):
    rng = np.random.default_rng(hash((vt, direction, d)) % 1000)
    shape = (9, 23)
    x = _arg_values(vt, shape, rng)
    idx = np.broadcast_to(np.arange(shape[d], dtype=np.int32).reshape(
        (-1, 1) if d == 0 else (1, -1)), shape)
    dt = D.from_element_type(vt)
    inits = [np.array(v).astype(dt) for v in ([0, 1] if vt in ("i1", "ui8") else
                                              [0, -1, 3] if vt == "i32" else
                                              [-np.inf, np.inf, -0.0, 0.0, np.nan])]
    program = shi.compile(_argmax_text(shape, d, direction, vt, ctype))
    for v0 in inits:
        for i0 in (np.array(0, np.int32), np.array(5, np.int32)):
            got = program.run(x, v0, i0)
            want = _fold(x, idx, v0, i0, d, direction)
            assert same_bits(got[0], want[0]) and same_bits(got[1], want[1]), (v0, i0)


def test_argmax_with_an_index_operand_that_is_not_an_iota():
    # Not JAX's iota: ties go to the smaller index value, wherever it is.
    rng = np.random.default_rng(9)
    x = rng.integers(0, 3, (6, 17)).astype(np.float32)
    idx = rng.permutation(6 * 17).reshape(6, 17).astype(np.int32)
    v0, i0 = np.array(-np.inf, np.float32), np.array(0, np.int32)
    got = shi.compile(_argmax_text((6, 17), 1, "GT", "f32", "FLOAT", iota=False)).run(x, v0, i0, idx)
    want = _fold(x, idx, v0, i0, 1, "GT")
    assert same_bits(got[0], want[0]) and same_bits(got[1], want[1])


def test_other_bodies_are_not_taken_for_argmax():
    # Ties to the larger index (GT on the indices): not the argmax body.
    rng = np.random.default_rng(10)
    x = rng.integers(0, 3, (6, 17)).astype(np.float32)
    idx = np.broadcast_to(np.arange(17, dtype=np.int32), (6, 17))
    v0, i0 = np.array(-np.inf, np.float32), np.array(0, np.int32)
    text = _argmax_text((6, 17), 1, "GT", "f32", "FLOAT", tie="GT")
    got = shi.compile(text).run(x, v0, i0)
    want = _fold(x, idx, v0, i0, 1, "GT", tie_lt=False)
    assert same_bits(got[0], want[0]) and same_bits(got[1], want[1])
    # TOTALORDER comparisons order -0 below +0 and NaNs by sign: not taken.
    x = np.array([[0.0, -0.0, np.nan, -np.nan, 1.0]], np.float32)
    text = _argmax_text((1, 5), 1, "GT", "f32", "TOTALORDER")
    got = shi.compile(text).run(x, v0, i0)
    assert int(got[1][0]) == int(np.argmax(D.total_order_key(x[0])))   # +NaN is the largest


def _reduce_body(text):
    program = shi.compile(text)
    (step,) = [s for s in program.functions["main"].block.steps if s.op.name == "stablehlo.reduce"]
    return step.op.regions[0]


def test_arg_reducer_kind_recognises_jax_bodies_only(monkeypatch):
    from stablehlo_interpreter.ops import reduce as reduce_mod
    from stablehlo_interpreter.regions import arg_reducer_kind
    assert arg_reducer_kind(_reduce_body(_argmax_text((3, 4), 1, "GT", "f32", "FLOAT"))) == "max"
    assert arg_reducer_kind(_reduce_body(_argmax_text((3, 4), 0, "LT", "i32", "SIGNED"))) == "min"
    assert arg_reducer_kind(_reduce_body(_argmax_text((3, 4), 1, "GT", "f32", "FLOAT", tie="GT"))) is None
    assert arg_reducer_kind(_reduce_body(_argmax_text((3, 4), 1, "GT", "f32", "TOTALORDER"))) is None
    assert arg_reducer_kind(_reduce_body(_argmax_text((3, 4), 1, "GE", "f32", "FLOAT"))) is None
    # The fast kernel runs for an iota index, not for an index argument.
    calls = []
    real = reduce_mod.arg_reduce
    monkeypatch.setattr(reduce_mod, "arg_reduce", lambda *a: calls.append(1) or real(*a))
    x = np.zeros((3, 4), np.float32)
    v0, i0 = np.array(-np.inf, np.float32), np.array(0, np.int32)
    shi.compile(_argmax_text((3, 4), 1, "GT", "f32", "FLOAT")).run(x, v0, i0)
    assert calls == [1]
    idx = np.zeros((3, 4), np.int32)
    shi.compile(_argmax_text((3, 4), 1, "GT", "f32", "FLOAT", iota=False)).run(x, v0, i0, idx)
    assert calls == [1]


# --------------------------------------------------------------------------
# float32 sine through tan(x / 2) (ops/elementwise_math.py sin_f32)


def _sin_ref(x):
    with np.errstate(all="ignore"):
        return np.sin(np.asarray(x, np.float32).astype(np.float64)).astype(np.float32)


def _sin_inputs():
    rng = np.random.default_rng(12)
    # Every 4th float32 of [1, 2) and every 64th of [2, 1024).
    parts = [np.arange(0x3F800000, 0x40000000, 4, dtype=np.uint32).view(np.float32),
             np.arange(0x40000000, 0x44800000, 64, dtype=np.uint32).view(np.float32)]
    for scale in (1e-30, 1e-6, 0.01, 1.0, 3.0, 30.0, 300.0, 1000.0, 1e5, 1e30):
        parts.append((rng.standard_normal(1 << 16) * scale).astype(np.float32))
    # The float32 values around the first 330 multiples of pi (sin near 0,
    # tan(x / 2) near 0 or a pole).
    base = (np.arange(1, 331) * np.pi).astype(np.float32).view(np.uint32).astype(np.int64)
    near = (base[:, None] + np.arange(-300, 301)[None, :]).astype(np.uint32).view(np.float32)
    parts += [near.ravel(), -near.ravel()]
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1.17549435e-38,
                        3.4028235e38, -3.4028235e38, 1023.99994, 1024.0, -1024.0, np.pi / 2], np.float32)
    payload = np.array([0x7FC00123, 0xFFC00456, 0x7F800001], np.uint32).view(np.float32)
    parts += [np.resize(np.concatenate([special, payload]), 1000)]   # also a whole special array
    return np.concatenate(parts)


def test_float32_sine_is_the_float64_sine_rounded():
    from stablehlo_interpreter.ops.elementwise_math import sin_f32
    x = _sin_inputs()
    with np.errstate(all="ignore"):
        for lo in range(0, x.size, 1 << 17):     # the fused chains' chunk size
            assert same_bits(sin_f32(x[lo:lo + (1 << 17)]), _sin_ref(x[lo:lo + (1 << 17)])), lo
    # Strided, broadcast, 2-d and small operands.
    with np.errstate(all="ignore"):
        assert same_bits(sin_f32(x[: 1 << 16][::3]), _sin_ref(x[: 1 << 16][::3]))
        b = np.broadcast_to(np.float32(2.5), (300,))
        assert same_bits(sin_f32(b), _sin_ref(b))
        m = x[: 1 << 14].reshape(128, 128)
        assert same_bits(sin_f32(m), _sin_ref(m))
        assert same_bits(sin_f32(x[:10]), _sin_ref(x[:10]))


def test_float32_sine_through_a_program():
    n = 1 << 17
    x = _sin_inputs()[-n:]
    text = (f"func.func @main(%x: {tt((n,), 'f32')}) -> {tt((n,), 'f32')} {{\n"
            f"  %s = stablehlo.sine %x : {tt((n,), 'f32')}\n"
            f"  return %s : {tt((n,), 'f32')}\n}}")
    assert same_bits(shi.compile(text).run(x)[0], _sin_ref(x))
    text0 = ("func.func @main(%x: tensor<f32>) -> tensor<f32> {\n"
             "  %s = stablehlo.sine %x : tensor<f32>\n  return %s : tensor<f32>\n}")
    got = shi.compile(text0).run(np.float32(1.5))[0]
    assert got.shape == () and same_bits(got, _sin_ref(np.float32(1.5)))


def test_float32_sine_guard_absorbs_a_less_accurate_tan(monkeypatch):
    # A tan 2000 float64 ULPs off (far worse than any libm's) must still
    # give np.sin's float32 bits: the elements whose rounding it could flip
    # lie within the guard and take np.sin. Without the guard about 1 in
    # 100,000 results would differ.
    from stablehlo_interpreter.ops import elementwise_math as em
    redone = []
    real_sin = np.sin

    def off_tan(t, out):
        real = np.tan(t, out=out)
        real *= 1 + 2000 * 2.0 ** -52
        return real

    def counting_sin(x, *a, **k):
        redone.append(np.size(x))
        return real_sin(x, *a, **k)
    monkeypatch.setattr(em, "_tan", off_tan)
    x = _sin_inputs()
    x = x[np.isfinite(x) & (np.abs(x) < 1000)][: 3 << 20]
    with np.errstate(all="ignore"):
        want = _sin_ref(x)
        monkeypatch.setattr(em.np, "sin", counting_sin)
        got = np.concatenate([em.sin_f32(x[lo:lo + (1 << 17)]) for lo in range(0, x.size, 1 << 17)])
    monkeypatch.setattr(em.np, "sin", real_sin)
    assert same_bits(got, want)
    assert sum(redone) > x.size / 10_000   # the guard did take elements


# --------------------------------------------------------------------------
# Unary functions of 8- and 16-bit floats read from a table of every value


_TABLE_OPS = ["stablehlo.exponential", "stablehlo.exponential_minus_one", "stablehlo.log",
              "stablehlo.log_plus_one", "stablehlo.logistic", "stablehlo.sine",
              "stablehlo.cosine", "stablehlo.tan", "stablehlo.tanh", "stablehlo.rsqrt",
              "stablehlo.cbrt", "chlo.erf", "chlo.erfc", "chlo.erf_inv", "chlo.lgamma",
              "chlo.digamma", "chlo.atan", "chlo.asinh", "chlo.bessel_i1e"]


@pytest.mark.parametrize("et", ["f16", "bf16", "f8E4M3FN", "f8E5M2"])
@pytest.mark.parametrize("name", _TABLE_OPS)
def test_narrow_float_table_gives_the_kernels_bits(name, et):
    # Every bit pattern of the type, shuffled and strided, through the table
    # (>= TABLE_MIN elements) against the kernel's own float64 detour on
    # pieces below TABLE_MIN.
    from stablehlo_interpreter.compiler import Op
    from stablehlo_interpreter.ops import elementwise as ew
    from stablehlo_interpreter.registry import KERNELS
    from stablehlo_interpreter.types import TensorType
    dt = D.from_element_type(et)
    n = 1 << (8 * dt.itemsize)
    u = np.dtype(f"u{dt.itemsize}")
    every = np.random.default_rng(3).permutation(np.arange(n, dtype=np.uint32).astype(u))
    x = np.tile(every, max(2, 2 * ew.TABLE_MIN // n)).view(dt)[::2]   # strided, all values
    t = TensorType(x.shape, dt, et)
    fn = KERNELS[name](Op(name, "test", {}, [t], [t], [], None, None))
    with np.errstate(all="ignore"):
        got = fn(x)
        want = np.concatenate([fn(np.ascontiguousarray(x[i:i + 1000]))
                               for i in range(0, x.size, 1000)])
    assert any(k[0][0] == name and k[1] == dt for k in ew._TABLES)   # the table ran
    assert same_bits(got, want), name


@pytest.mark.parametrize("et", ["f32", "f16"])
@pytest.mark.parametrize("name", _TABLE_OPS + ["stablehlo.atan2"])
def test_float64_ufunc_in_one_call_gives_the_detours_bits(name, et):
    # f32/f16 kernels of a float64 ufunc call it once with dtype=float64 (the
    # cast in its buffers): the bits of casting to float64, the ufunc, and
    # rounding once, over special values, every scale and a strided operand.
    from stablehlo_interpreter.compiler import Op
    from stablehlo_interpreter.ops.elementwise import round_f64
    from stablehlo_interpreter.registry import KERNELS
    from stablehlo_interpreter.types import TensorType
    dt = D.from_element_type(et)
    rng = np.random.default_rng(4)
    with np.errstate(all="ignore"):
        x = np.concatenate([_special(dt, 20000, rng), (np.exp2(rng.uniform(-30, 30, 20000))
                                                       * rng.choice([-1, 1], 20000)).astype(dt)])
    x = x[::2]
    nin = 2 if name == "stablehlo.atan2" else 1
    args = [x, np.roll(x, 7)][:nin]
    t = TensorType(x.shape, dt, et)
    fn = KERNELS[name](Op(name, "test", {}, [t] * nin, [t], [], None, None))
    f64 = getattr(fn, "__wrapped__", fn)
    ufunc = {"stablehlo.atan2": np.arctan2, "stablehlo.exponential": np.exp,
             "stablehlo.tanh": np.tanh, "chlo.erf": __import__("scipy.special").special.erf,
             "stablehlo.log_plus_one": np.log1p}.get(name)
    with np.errstate(all="ignore"):
        got = fn(*args)
        if ufunc is not None:
            want = round_f64(ufunc(*[a.astype(np.float64) for a in args]), dt)
            assert f64.__name__ == ufunc.__name__   # the one-call path ran
            assert same_bits(got, want), name
        small = np.concatenate([fn(*[a[i:i + 1000] for a in args]) for i in range(0, x.size, 1000)])
    assert same_bits(got, small), name
