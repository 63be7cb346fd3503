"""chlo dialect kernels: special functions, mulhi, top_k, next_after,
ragged_dot, scan and the broadcasting binary ops."""

import math

import jax
import ml_dtypes
import numpy as np
import pytest
from testkit import run_xla_cpu

import stablehlo_interpreter as shi
from stablehlo_interpreter.dtypes import ulp_distance

jax.config.update("jax_enable_x64", True)
CPU = jax.devices("cpu")[0]
RS = np.random.default_rng(0)


def unary(name, x, et):
    n = x.size
    text = f"""func.func @main(%x: tensor<{n}x{et}>) -> tensor<{n}x{et}> {{
      %r = chlo.{name} %x : tensor<{n}x{et}> -> tensor<{n}x{et}>
      return %r : tensor<{n}x{et}>
    }}"""
    return text, shi.compile(text).run(x.reshape(n))[0]


VALS = np.concatenate([RS.normal(size=100) * 3, RS.uniform(-20, 20, 50),
                       [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 30.0, np.inf, -np.inf, np.nan]])
TYPES = [("f32", np.float32), ("f64", np.float64), ("f16", np.float16),
         ("bf16", ml_dtypes.bfloat16)]

# Ops where XLA CPU is itself within a few ulp: our results must agree.
XLA_AGREES = {
    "tan": VALS, "cosh": VALS, "sinh": VALS, "acosh": np.abs(VALS) + 1, "asinh": VALS,
    "asin": np.tanh(VALS), "acos": np.tanh(VALS), "atan": VALS, "erf": VALS,
}


@pytest.mark.parametrize("name", sorted(XLA_AGREES))
@pytest.mark.parametrize("et,dtype", TYPES)
def test_unary_agrees_with_xla_cpu(name, et, dtype):
    x = XLA_AGREES[name].astype(dtype)
    text, got = unary(name, x, et)
    want = run_xla_cpu(text, x)[0]
    assert got.dtype == np.dtype(dtype)
    ulps = ulp_distance(got, want)
    assert ulps.max() <= 4, (x[np.argmax(ulps)], got[np.argmax(ulps)], want[np.argmax(ulps)])


def test_complex_unary_agrees_with_xla_cpu():
    z = (RS.normal(size=40) * 2 + 1j * RS.normal(size=40) * 2).astype(np.complex64)
    for name in ("tan", "cosh", "sinh", "asin", "acos", "atan", "asinh", "acosh", "atanh"):
        text, got = unary(name, z, "complex<f32>")
        want = run_xla_cpu(text, z)[0]
        assert got.dtype == np.complex64
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_special_function_values():
    x = np.array([1.0, 2.0, 5.0, 0.5, 0.0, -1.0, -2.5, np.inf, -np.inf], np.float64)
    _, lg = unary("lgamma", x, "f64")
    np.testing.assert_allclose(lg[:4], [0.0, 0.0, math.log(24.0), math.log(math.sqrt(math.pi))],
                               atol=1e-15)
    assert np.isinf(lg[4]) and np.isinf(lg[5]) and lg[4] > 0  # poles: +inf
    np.testing.assert_allclose(lg[6], math.lgamma(-2.5), atol=1e-15)  # near a zero of lgamma
    assert lg[7] == np.inf and lg[8] == np.inf
    _, dg = unary("digamma", x, "f64")
    np.testing.assert_allclose(dg[0], -0.5772156649015329, rtol=1e-15)
    np.testing.assert_allclose(dg[1], 1 - 0.5772156649015329, rtol=1e-15)
    assert np.isnan(dg[4]) and np.isnan(dg[5])  # poles give NaN
    # Accurate where a single-precision polynomial is not: lgamma near 1 and 2.
    _, lg32 = unary("lgamma", np.array([1.0, 2.0, 0.999], np.float32), "f32")
    np.testing.assert_array_equal(lg32[:2], [0.0, 0.0])
    np.testing.assert_allclose(lg32[2], math.lgamma(float(np.float32(0.999))), rtol=1e-7)


def test_erf_family_edges():
    p = np.array([0.0, 0.5, -0.9, 1.0, -1.0, 1.5], np.float32)
    _, inv = unary("erf_inv", p, "f32")
    assert inv[3] == np.inf and inv[4] == -np.inf and np.isnan(inv[5])
    _, back = unary("erf", inv[:3], "f32")
    np.testing.assert_allclose(back, p[:3], atol=1e-7)
    # erfc keeps the subnormal tail of f32 (no flush to zero).
    _, tail = unary("erfc", np.array([9.5, 10.5, -3.0], np.float32), "f32")
    assert 0 < tail[0] < np.finfo(np.float32).tiny and tail[1] == 0
    np.testing.assert_allclose(tail[2], 2 - math.erfc(3.0), rtol=1e-7)


@pytest.mark.parametrize("et,dtype", [("f32", np.float32), ("f16", np.float16),
                                       ("bf16", ml_dtypes.bfloat16)])
def test_erf_inv_narrow_floats_are_the_rounded_float64_value(et, dtype):
    # f32/f16/bf16 take ndtri((1 + x) / 2) / sqrt(2) (ops/chlo.py), 1.4x
    # faster than scipy's erfinv: the rounded result must be scipy's
    # float64 erfinv rounded once, on random bit patterns of (-1, 1), the
    # values next to +-1, tiny and subnormal values and the special values.
    import scipy.special as sps
    bits = np.dtype(dtype).itemsize * 8
    one = int(np.array(1, dtype).view(f"u{bits // 8}"))
    pats = RS.integers(0, one, 200_000 if bits == 32 else one, dtype=np.uint64)
    x = pats.astype(f"u{bits // 8}").view(dtype)
    near_one = np.array(1, dtype).view(f"u{bits // 8}") - np.arange(1, 500, dtype=f"u{bits // 8}")
    special = np.array([0.0, -0.0, 1.0, -1.0, 1.5, -3.0, np.nan, np.inf, -np.inf], dtype)
    x = np.concatenate([x, -x, near_one.view(dtype), -near_one.view(dtype), special])
    _, got = unary("erf_inv", x, et)
    with np.errstate(all="ignore"):
        want = shi.ops.elementwise.round_f64(sps.erfinv(x.astype(np.float64)), np.dtype(dtype))
    same = (got.astype(np.float64) == want.astype(np.float64)) | (np.isnan(got.astype(np.float64))
                                                                   & np.isnan(want.astype(np.float64)))
    assert same.all(), x[~same][:10]
    assert np.signbit(got[-9 + 1]) and not np.signbit(got[-9])   # erf_inv(-0) = -0


def test_bessel_i1e():
    x = np.array([0.0, 1.0, -2.0, 50.0], np.float64)
    _, got = unary("bessel_i1e", x, "f64")
    # I1(1) e^-1, odd in x, ~ 1/sqrt(2 pi x) for large x.
    np.testing.assert_allclose(got[1], 0.5651591039924851 * math.exp(-1), rtol=1e-14)
    assert got[0] == 0 and got[2] == -unary("bessel_i1e", np.array([2.0]), "f64")[1][0]
    np.testing.assert_allclose(got[3], 1 / math.sqrt(2 * math.pi * 50) * (1 - 3 / 400), rtol=1e-4)


def binary(name, x, y, et):
    n = x.size
    text = f"""func.func @main(%x: tensor<{n}x{et}>, %y: tensor<{n}x{et}>) -> tensor<{n}x{et}> {{
      %r = chlo.{name} %x, %y : tensor<{n}x{et}>, tensor<{n}x{et}> -> tensor<{n}x{et}>
      return %r : tensor<{n}x{et}>
    }}"""
    return text, shi.compile(text).run(x, y)[0]


def test_polygamma_and_zeta():
    n = np.array([0.0, 1.0, 2.0, 1.5, -1.0, 3.0])
    x = np.array([1.0, 1.0, 2.0, 1.0, 1.0, 0.5])
    _, pg = binary("polygamma", n, x, "f64")
    np.testing.assert_allclose(pg[0], -0.5772156649015329, rtol=1e-14)  # digamma(1)
    np.testing.assert_allclose(pg[1], math.pi ** 2 / 6, rtol=1e-14)  # trigamma(1)
    np.testing.assert_allclose(pg[2], -2 * (1.2020569031595942 - 1), rtol=1e-13)
    assert np.isnan(pg[3]) and np.isnan(pg[4])  # n must be a natural number
    np.testing.assert_allclose(pg[5], math.pi ** 4, rtol=1e-13)  # psi'''(1/2) = pi^4
    s = np.array([2.0, 2.0, 0.5, 1.0, 2.0, 3.0, 2.5])
    q = np.array([1.0, 2.0, 1.0, 1.0, -2.0, -2.0, -1.5])
    _, z = binary("zeta", s, q, "f64")
    np.testing.assert_allclose(z[:2], [math.pi ** 2 / 6, math.pi ** 2 / 6 - 1], rtol=1e-14)
    assert np.isnan(z[2])  # x < 1
    assert z[3] == np.inf  # harmonic series
    assert z[4] == np.inf and np.isnan(z[5])  # pole at q <= 0 integer: +inf iff x even
    assert np.isnan(z[6])  # q <= 0 needs an integer x


@pytest.mark.parametrize("et,dtype", TYPES)
def test_next_after(et, dtype):
    x = np.array([1.0, 1.0, 0.0, -0.0, 0.0, 2.0, np.nan, 1.0, -1.0, np.inf], dtype)
    y = np.array([2.0, 0.0, 1.0, -1.0, -0.0, 2.0, 1.0, np.nan, -2.0, 0.0], dtype)
    _, got = binary("next_after", x, y, et)
    bits = np.dtype(f"u{np.dtype(dtype).itemsize}")
    xb = x.view(bits)
    assert got.dtype == np.dtype(dtype)
    assert got.view(bits)[0] == xb[0] + 1 and got.view(bits)[1] == xb[1] - 1
    smallest = np.array(1, bits).view(dtype)
    assert got[2] == smallest and got[3] == -smallest  # smallest subnormal signed like y
    assert got.view(bits)[4] == y.view(bits)[4]  # both zero: y (here -0.0)
    assert got[5] == 2.0 and np.isnan(got[6]) and np.isnan(got[7])
    assert got.view(bits)[8] == xb[8] + 1  # -1 moves away from zero toward -2
    assert got[9] == ml_dtypes.finfo(dtype).max
    if dtype in (np.float32, np.float64, np.float16):
        a = RS.normal(size=50).astype(dtype)
        b = RS.normal(size=50).astype(dtype)
        np.testing.assert_array_equal(binary("next_after", a, b, et)[1], np.nextafter(a, b))


MULHI_TYPES = [("i8", np.int8), ("ui8", np.uint8), ("i16", np.int16), ("ui16", np.uint16),
               ("i32", np.int32), ("ui32", np.uint32), ("i64", np.int64), ("ui64", np.uint64)]


@pytest.mark.parametrize("et,dtype", MULHI_TYPES)
def test_mulhi_against_big_ints(et, dtype):
    info = np.iinfo(dtype)
    edge = [info.min, info.max, 0, 1, info.max // 3, info.min + 1 if info.min else 7]
    a = np.array(edge + list(RS.integers(info.min, info.max, 30, endpoint=True, dtype=dtype)),
                 dtype=dtype)
    b = np.array(edge[::-1] + list(RS.integers(info.min, info.max, 30, endpoint=True,
                                               dtype=dtype)), dtype=dtype)
    _, got = binary("mulhi", a, b, et)
    width = info.bits
    want = []
    for p, q in zip(a.tolist(), b.tolist()):
        hi = (p * q) >> width
        if info.min < 0 and hi >= 1 << (width - 1):
            hi -= 1 << width
        want.append(hi)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, np.array(want, dtype=dtype))


def top_k(x, et, k):
    shape = "x".join(map(str, x.shape))
    oshape = "x".join(map(str, x.shape[:-1] + (k,)))
    text = f"""func.func @main(%x: tensor<{shape}x{et}>) -> (tensor<{oshape}x{et}>, tensor<{oshape}xi32>) {{
      %v, %i = chlo.top_k(%x, k = {k}) : tensor<{shape}x{et}> -> (tensor<{oshape}x{et}>, tensor<{oshape}xi32>)
      return %v, %i : tensor<{oshape}x{et}>, tensor<{oshape}xi32>
    }}"""
    return text, shi.compile(text).run(x)


def test_top_k_total_order_and_ties():
    x = np.array([[1.0, np.nan, -0.0, 0.0, np.inf, 1.0, -np.inf]], np.float32)
    _, (v, i) = top_k(x, "f32", 6)
    assert np.isnan(v[0, 0]) and i[0, 0] == 1  # NaN is largest in total order
    np.testing.assert_array_equal(i[0, 1:], [4, 0, 5, 3, 2])  # equal 1.0s keep index order
    assert not np.signbit(v[0, 4]) and np.signbit(v[0, 5])  # +0 before -0


@pytest.mark.parametrize("et,dtype", [("f32", np.float32), ("bf16", ml_dtypes.bfloat16),
                                      ("i8", np.int8), ("ui64", np.uint64), ("i1", np.bool_)])
def test_top_k_matches_xla_cpu(et, dtype):
    x = RS.integers(0, 5, size=(4, 9)).astype(dtype)  # many ties
    text, (v, i) = top_k(x, et, 4)
    wv, wi = run_xla_cpu(text, x)
    np.testing.assert_array_equal(v, wv)
    np.testing.assert_array_equal(i, wi)


@pytest.mark.parametrize("et,dtype", [("f32", np.float32), ("f64", np.float64),
                                      ("f16", np.float16), ("bf16", ml_dtypes.bfloat16),
                                      ("i8", np.int8), ("ui64", np.uint64), ("i1", np.bool_)])
def test_top_k_partition_path_ties_and_special_values(et, dtype):
    # k much smaller than the row: the kernel selects with np.partition; ties
    # at the k-th value must still come in index order, as XLA CPU's sort.
    x = RS.integers(0, 6, size=(3, 200)).astype(dtype)
    if np.dtype(dtype).kind == "f" or dtype is ml_dtypes.bfloat16:
        x[0, [5, 50, 150]] = np.nan
        x[1, [3, 9]] = -0.0
        x[1, [4, 7]] = np.inf
        x[2, :] = -x[2, :]   # mostly negative: -0 and +0 at the top, in total order
    text, (v, i) = top_k(x, et, 7)
    wv, wi = run_xla_cpu(text, x)
    np.testing.assert_array_equal(i, wi)
    np.testing.assert_array_equal(v.view(np.uint8), wv.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_jax_top_k_runs_the_composite_directly(dtype, monkeypatch):
    # JAX serializes lax.top_k for plugins as `stablehlo.composite
    # "chlo.top_k"` (a full sort + slice); the interpreter runs the top_k
    # kernel instead. Same values and indices as XLA CPU, ties in index order.
    from stablehlo_interpreter.registry import COMPOSITES, annotate
    builder = COMPOSITES["chlo.top_k"]
    calls = []

    def counting(op):
        calls.append(op)
        return builder(op)
    annotate(counting, composite_exact=True)
    monkeypatch.setitem(COMPOSITES, "chlo.top_k", counting)
    x = RS.integers(-3, 4, size=(4, 300)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x[0, [7, 70]] = np.nan
        x[1, 5] = -0.0
    f = jax.jit(lambda v: jax.lax.top_k(v, 9))
    wv, wi = (np.asarray(o) for o in f(jax.device_put(x, CPU)))
    gv, gi = (np.asarray(o) for o in f(jax.device_put(x, jax.devices("stablehlo_ref")[0])))
    assert calls, "the chlo.top_k composite ran its decomposition"
    np.testing.assert_array_equal(gi, wi)
    np.testing.assert_array_equal(gv.view(np.uint8), wv.view(np.uint8))


def test_ragged_dot_modes():
    lhs = RS.normal(size=(7, 3)).astype(np.float32)
    rhs = RS.normal(size=(2, 3, 4)).astype(np.float32)
    gs = np.array([2, 4], np.int64)  # row 6 is in no group
    text = """func.func @main(%l: tensor<7x3xf32>, %r: tensor<2x3x4xf32>, %g: tensor<2xi64>) -> tensor<7x4xf32> {
      %0 = "chlo.ragged_dot"(%l, %r, %g) {ragged_dot_dimension_numbers = #chlo.ragged_dot<lhs_batching_dimensions = [], rhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1], lhs_ragged_dimensions = [0], rhs_group_dimensions = [0]>} : (tensor<7x3xf32>, tensor<2x3x4xf32>, tensor<2xi64>) -> tensor<7x4xf32>
      return %0 : tensor<7x4xf32>
    }"""
    out = shi.compile(text).run(lhs, rhs, gs)[0]
    np.testing.assert_allclose(out[:2], lhs[:2] @ rhs[0], rtol=1e-6)
    np.testing.assert_allclose(out[2:6], lhs[2:6] @ rhs[1], rtol=1e-6)
    assert (out[6] == 0).all()
    # Mode 2: ragged contracting dimension, one result per group.
    lhs2 = RS.normal(size=(2, 5)).astype(np.float32)
    rhs2 = RS.normal(size=(5, 3)).astype(np.float32)
    gs2 = np.array([3, 2], np.int32)
    text2 = """func.func @main(%l: tensor<2x5xf32>, %r: tensor<5x3xf32>, %g: tensor<2xi32>) -> tensor<2x2x3xf32> {
      %0 = "chlo.ragged_dot"(%l, %r, %g) {ragged_dot_dimension_numbers = #chlo.ragged_dot<lhs_batching_dimensions = [], rhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0], lhs_ragged_dimensions = [1], rhs_group_dimensions = []>} : (tensor<2x5xf32>, tensor<5x3xf32>, tensor<2xi32>) -> tensor<2x2x3xf32>
      return %0 : tensor<2x2x3xf32>
    }"""
    out2 = shi.compile(text2).run(lhs2, rhs2, gs2)[0]
    np.testing.assert_allclose(out2[0], lhs2[:, :3] @ rhs2[:3], rtol=1e-5)
    np.testing.assert_allclose(out2[1], lhs2[:, 3:] @ rhs2[3:], rtol=1e-5)
    # Mode 3: ragged batch dimension, a plain batched matmul.
    lhs3 = RS.normal(size=(3, 2, 4)).astype(np.float32)
    rhs3 = RS.normal(size=(3, 4, 5)).astype(np.float32)
    text3 = """func.func @main(%l: tensor<3x2x4xf32>, %r: tensor<3x4x5xf32>, %g: tensor<2xi64>) -> tensor<3x2x5xf32> {
      %0 = "chlo.ragged_dot"(%l, %r, %g) {ragged_dot_dimension_numbers = #chlo.ragged_dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1], lhs_ragged_dimensions = [0], rhs_group_dimensions = []>} : (tensor<3x2x4xf32>, tensor<3x4x5xf32>, tensor<2xi64>) -> tensor<3x2x5xf32>
      return %0 : tensor<3x2x5xf32>
    }"""
    out3 = shi.compile(text3).run(lhs3, rhs3, np.array([1, 2], np.int64))[0]
    np.testing.assert_allclose(out3, lhs3 @ rhs3, rtol=1e-5)


def test_scan_multi_input_reverse_and_dim():
    text = """func.func @main(%x: tensor<2x4xf32>, %w: tensor<2x4xf32>, %c0: tensor<2xf32>) -> (tensor<2x4xf32>, tensor<2xf32>) {
      %0:2 = chlo.scan(%x, %w) inits(%c0) dimension=1 attributes {is_reverse = true} {
      ^bb0(%a: tensor<2xf32>, %b: tensor<2xf32>, %c: tensor<2xf32>):
        %p = stablehlo.multiply %a, %b : tensor<2xf32>
        %s = stablehlo.add %c, %p : tensor<2xf32>
        stablehlo.return %s, %s : tensor<2xf32>, tensor<2xf32>
      } : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2xf32>) -> (tensor<2x4xf32>, tensor<2xf32>)
      return %0#0, %0#1 : tensor<2x4xf32>, tensor<2xf32>
    }"""
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    w = np.full((2, 4), 2, np.float32)
    c0 = np.array([100, 0], np.float32)
    out, carry = shi.compile(text).run(x, w, c0)
    want = c0[:, None] + np.cumsum((x * w)[:, ::-1], axis=1)[:, ::-1]
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(carry, want[:, 0])


def test_broadcast_binary_ops():
    text = """func.func @main(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %c: tensor<2xf32>) -> (tensor<2x3xf32>, tensor<2x3xi1>, tensor<2x3xf32>) {
      %0 = chlo.broadcast_add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
      %1 = chlo.broadcast_compare %a, %c {broadcast_dimensions = array<i64: 0>, comparison_direction = #chlo<comparison_direction GT>} : (tensor<2x3xf32>, tensor<2xf32>) -> tensor<2x3xi1>
      %2 = chlo.broadcast_maximum %c, %a {broadcast_dimensions = array<i64: 0>} : (tensor<2xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
      return %0, %1, %2 : tensor<2x3xf32>, tensor<2x3xi1>, tensor<2x3xf32>
    }"""
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([10, 20, 30], np.float32)
    c = np.array([1, 4], np.float32)
    add, gt, mx = shi.compile(text).run(a, b, c)
    np.testing.assert_array_equal(add, a + b)
    np.testing.assert_array_equal(gt, a > c[:, None])
    np.testing.assert_array_equal(mx, np.maximum(a, c[:, None]))
