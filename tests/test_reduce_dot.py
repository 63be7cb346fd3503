"""reduce (fast ufunc path, batched tree path, sequential path) and
dot_general / dot, against numpy."""

import ml_dtypes
import numpy as np
import pytest

import stablehlo_interpreter as shi


def reduce_text(op, etype, in_shape, dims, out_shape):
    it = "tensor<" + "".join(f"{d}x" for d in in_shape) + etype + ">"
    ot = "tensor<" + "".join(f"{d}x" for d in out_shape) + etype + ">"
    return f"""
    func.func @main(%x: {it}, %init: tensor<{etype}>) -> {ot} {{
      %r = stablehlo.reduce(%x init: %init) applies stablehlo.{op} across dimensions = {list(dims)}
          : ({it}, tensor<{etype}>) -> {ot}
      return %r : {ot}
    }}"""


def run1(text, *args):
    (r,) = shi.compile(text).run(*args)
    return r


# --------------------------------------------------------------------------
# reduce, fast path


def test_reduce_sum_int8_wraps():
    x = np.array([[100, 100, 100], [-128, -1, 0]], np.int8)
    r = run1(reduce_text("add", "i8", (2, 3), [1], (2,)), x, np.array(1, np.int8))
    expect = ((x.astype(np.int64).sum(axis=1) + 1 + 128) % 256 - 128).astype(np.int8)
    assert r.dtype == np.int8
    np.testing.assert_array_equal(r, expect)  # 301 -> 45, -128 - 1 + 1 -> -128


def test_reduce_prod_uint32_wraps():
    x = np.array([1 << 20, 1 << 15, 3], np.uint32)
    r = run1(reduce_text("multiply", "ui32", (3,), [0], ()), x, np.array(1, np.uint32))
    assert r.shape == () and r.dtype == np.uint32
    assert int(r) == ((1 << 35) * 3) % (1 << 32)


def test_reduce_sum_int4_wraps():
    x = np.array([7, 7, 7], ml_dtypes.int4)
    r = run1(reduce_text("add", "i4", (3,), [0], ()), x, np.array(0, ml_dtypes.int4))
    assert r.dtype == ml_dtypes.int4 and int(r) == (21 + 8) % 16 - 8


def test_reduce_max_propagates_nan_and_handles_inf_init():
    x = np.array([[1.0, np.nan, 3.0], [-np.inf, -5.0, 2.0]], np.float32)
    r = run1(reduce_text("maximum", "f32", (2, 3), [1], (2,)), x,
             np.array(-np.inf, np.float32))
    assert np.isnan(r[0]) and r[1] == 2.0


def test_reduce_multiple_dims_unsorted_and_keep_middle():
    x = np.arange(2 * 3 * 4, dtype=np.float64).reshape(2, 3, 4) / 7
    r = run1(reduce_text("add", "f64", (2, 3, 4), [2, 0], (3,)), x, np.array(0.5))
    np.testing.assert_allclose(r, x.sum(axis=(0, 2)) + 0.5, rtol=1e-15)


def test_reduce_empty_dim_gives_init():
    x = np.zeros((3, 0), np.float32)
    r = run1(reduce_text("minimum", "f32", (3, 0), [1], (3,)), x, np.array(np.inf, np.float32))
    np.testing.assert_array_equal(r, np.full(3, np.inf, np.float32))


def test_reduce_no_dims_combines_init_elementwise():
    x = np.array([1, 5, -3], np.int32)
    r = run1(reduce_text("maximum", "i32", (3,), [], (3,)), x, np.array(2, np.int32))
    np.testing.assert_array_equal(r, [2, 5, 2])


@pytest.mark.parametrize("op,fn", [("and", np.all), ("or", np.any),
                                   ("add", np.any), ("multiply", np.all)])
def test_reduce_bool(op, fn):
    x = np.array([[True, False, True], [True, True, True]])
    init = np.array(op in ("and", "multiply"))
    r = run1(reduce_text(op, "i1", (2, 3), [1], (2,)), x, init)
    np.testing.assert_array_equal(r, fn(x, axis=1))


def test_reduce_sum_f16_accumulates_wider():
    # 4096 ones: an f16 running sum would stop at 2048 (2048 + 1 rounds down).
    x = np.ones(4096, np.float16)
    r = run1(reduce_text("add", "f16", (4096,), [0], ()), x, np.array(0, np.float16))
    assert r.dtype == np.float16 and float(r) == 4096.0


def test_reduce_sum_bf16_and_complex():
    xb = (np.arange(12) / 3).astype(ml_dtypes.bfloat16).reshape(3, 4)
    rb = run1(reduce_text("add", "bf16", (3, 4), [0], (4,)), xb,
              np.array(0, ml_dtypes.bfloat16))
    expect = xb.astype(np.float32).sum(axis=0).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(rb, expect)
    xc = (np.arange(6) + 1j * np.arange(6)[::-1]).astype(np.complex64).reshape(2, 3)
    rc = run1(reduce_text("multiply", "complex<f32>", (2, 3), [1], (2,)), xc,
              np.array(1, np.complex64))
    np.testing.assert_allclose(rc, xc.prod(axis=1), rtol=1e-6)


# --------------------------------------------------------------------------
# reduce, general bodies

ARGMAX = """
func.func @main(%x: tensor<{n}x{m}xf32>) -> (tensor<{n}xf32>, tensor<{n}xi32>) {{
  %idx = stablehlo.iota dim = 1 : tensor<{n}x{m}xi32>
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.reduce(%x init: %ninf), (%idx init: %zero) across dimensions = [1]
      : (tensor<{n}x{m}xf32>, tensor<{n}x{m}xi32>, tensor<f32>, tensor<i32>) -> (tensor<{n}xf32>, tensor<{n}xi32>)
   reducer(%a: tensor<f32>, %b: tensor<f32>) (%ai: tensor<i32>, %bi: tensor<i32>) {{
    %gt = stablehlo.compare GT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %nan = stablehlo.compare NE, %a, %a, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %pick = stablehlo.or %gt, %nan : tensor<i1>
    %eq = stablehlo.compare EQ, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %lt = stablehlo.compare LT, %ai, %bi, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %tie = stablehlo.and %eq, %lt : tensor<i1>
    %pidx = stablehlo.or %pick, %tie : tensor<i1>
    %v = stablehlo.select %pick, %a, %b : tensor<i1>, tensor<f32>
    %i = stablehlo.select %pidx, %ai, %bi : tensor<i1>, tensor<i32>
    stablehlo.return %v, %i : tensor<f32>, tensor<i32>
  }}
  return %r#0, %r#1 : tensor<{n}xf32>, tensor<{n}xi32>
}}"""


@pytest.mark.parametrize("m", [1, 2, 7, 16, 33])
def test_variadic_argmax_body(m):
    rng = np.random.default_rng(m)
    n = 5
    x = rng.integers(-3, 3, size=(n, m)).astype(np.float32)  # many ties
    if m > 2:
        x[1, m // 2] = np.nan
    v, i = shi.compile(ARGMAX.format(n=n, m=m)).run(x)
    expect_i = np.argmax(np.where(np.isnan(x), np.inf, x), axis=1)  # first max / first NaN
    np.testing.assert_array_equal(i, expect_i.astype(np.int32))
    np.testing.assert_array_equal(v, x[np.arange(n), expect_i])


def test_variadic_reduce_empty_reduced_dim():
    v, i = shi.compile(ARGMAX.format(n=3, m=0)).run(np.zeros((3, 0), np.float32))
    np.testing.assert_array_equal(v, np.full(3, -np.inf, np.float32))
    np.testing.assert_array_equal(i, np.zeros(3, np.int32))


def test_batchable_body_not_a_plain_reducer():
    # sum of squares: body(acc, x) = acc + x * x is not one known ufunc.
    text = """
    func.func @main(%x: tensor<4x5xi64>) -> tensor<4xi64> {
      %z = stablehlo.constant dense<0> : tensor<i64>
      %r = stablehlo.reduce(%x init: %z) across dimensions = [1]
          : (tensor<4x5xi64>, tensor<i64>) -> tensor<4xi64>
       reducer(%a: tensor<i64>, %b: tensor<i64>) {
        %s = stablehlo.add %a, %b : tensor<i64>
        stablehlo.return %s : tensor<i64>
      }
      %q = stablehlo.reduce(%x init: %z) across dimensions = [0]
          : (tensor<4x5xi64>, tensor<i64>) -> tensor<5xi64>
       reducer(%a: tensor<i64>, %b: tensor<i64>) {
        %one = stablehlo.constant dense<1> : tensor<i64>
        %s = stablehlo.add %a, %b : tensor<i64>
        %t = stablehlo.multiply %s, %one : tensor<i64>
        stablehlo.return %t : tensor<i64>
      }
      %u = stablehlo.slice %q [0:4] : (tensor<5xi64>) -> tensor<4xi64>
      %w = stablehlo.add %r, %u : tensor<4xi64>
      return %w : tensor<4xi64>
    }"""
    x = np.arange(20, dtype=np.int64).reshape(4, 5) - 7
    np.testing.assert_array_equal(run1(text, x), x.sum(axis=1) + x.sum(axis=0)[:4])


def test_non_batchable_body_uses_sequential_loop():
    # A reshape in the body is not elementwise: the body runs per element.
    text = """
    func.func @main(%x: tensor<3x4xf32>) -> tensor<3xf32> {
      %z = stablehlo.constant dense<0.0> : tensor<f32>
      %r = stablehlo.reduce(%x init: %z) across dimensions = [1]
          : (tensor<3x4xf32>, tensor<f32>) -> tensor<3xf32>
       reducer(%a: tensor<f32>, %b: tensor<f32>) {
        %m = stablehlo.maximum %a, %b : tensor<f32>
        %r1 = stablehlo.reshape %m : (tensor<f32>) -> tensor<1xf32>
        %r0 = stablehlo.reshape %r1 : (tensor<1xf32>) -> tensor<f32>
        stablehlo.return %r0 : tensor<f32>
      }
      return %r : tensor<3xf32>
    }"""
    x = np.array([[1, -2, 9, 4], [-1, -2, -3, -4], [0.5, 0.25, 8, 8]], np.float32)
    np.testing.assert_array_equal(run1(text, x), np.maximum(x.max(axis=1), 0))


# --------------------------------------------------------------------------
# dot_general / dot


def dot_text(lt, rt, ot, lb, rb, lc, rc):
    return f"""
    func.func @main(%a: {lt}, %b: {rt}) -> {ot} {{
      %r = stablehlo.dot_general %a, %b, batching_dims = {lb} x {rb},
          contracting_dims = {lc} x {rc} : ({lt}, {rt}) -> {ot}
      return %r : {ot}
    }}"""


def test_dot_general_dims_in_any_position():
    # lhs (k=3, b=2, m=4), rhs (n=5, k=3, b=2): batch 2, result 2x4x5.
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 2, 4)).astype(np.float32)
    b = rng.standard_normal((5, 3, 2)).astype(np.float32)
    r = run1(dot_text("tensor<3x2x4xf32>", "tensor<5x3x2xf32>", "tensor<2x4x5xf32>",
                      [1], [2], [0], [1]), a, b)
    np.testing.assert_allclose(r, np.einsum("kbm,nkb->bmn", a, b), rtol=1e-5)


def test_dot_general_two_contracting_and_two_batch_dims():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float64)  # b0, k0, b1, k1
    b = rng.standard_normal((5, 4, 3, 2, 6)).astype(np.float64)  # k1, b1, k0, b0, n
    r = run1(dot_text("tensor<2x3x4x5xf64>", "tensor<5x4x3x2x6xf64>", "tensor<2x4x6xf64>",
                      [0, 2], [3, 1], [1, 3], [2, 0]), a, b)
    np.testing.assert_allclose(r, np.einsum("ajcl,lcjan->acn", a, b), rtol=1e-12)


def test_dot_general_int8_wraps_and_i64_wraps():
    a = np.full((2, 4), 100, np.int8)
    b = np.full((4, 3), 100, np.int8)
    r = run1(dot_text("tensor<2x4xi8>", "tensor<4x3xi8>", "tensor<2x3xi8>",
                      [], [], [1], [0]), a, b)
    expect = ((40000 + 128) % 256) - 128
    np.testing.assert_array_equal(r, np.full((2, 3), expect, np.int8))
    a64 = np.array([[1 << 62, 1 << 62]], np.int64)
    b64 = np.array([[3], [1]], np.int64)
    r64 = run1(dot_text("tensor<1x2xi64>", "tensor<2x1xi64>", "tensor<1x1xi64>",
                        [], [], [1], [0]), a64, b64)
    assert int(r64[0, 0]) == 0  # 4 * 2**62 = 2**64 wraps to 0


def test_dot_general_int8_to_int32_result():
    a = np.full((1, 300), 127, np.int8)
    b = np.full((300, 1), -128, np.int8)
    r = run1(dot_text("tensor<1x300xi8>", "tensor<300x1xi8>", "tensor<1x1xi32>",
                      [], [], [1], [0]), a, b)
    assert r.dtype == np.int32 and int(r[0, 0]) == 127 * -128 * 300


def test_dot_general_bool():
    a = np.array([[True, False], [False, False]])
    b = np.array([[False, True], [True, True]])
    r = run1(dot_text("tensor<2x2xi1>", "tensor<2x2xi1>", "tensor<2x2xi1>",
                      [], [], [1], [0]), a, b)
    np.testing.assert_array_equal(r, (a.astype(int) @ b.astype(int)) > 0)


def test_dot_general_bf16_operands_f32_result():
    a = (np.arange(6) / 3 + 0.01).astype(ml_dtypes.bfloat16).reshape(2, 3)
    b = (np.arange(12) / 7 - 0.5).astype(ml_dtypes.bfloat16).reshape(3, 4)
    r = run1(dot_text("tensor<2x3xbf16>", "tensor<3x4xbf16>", "tensor<2x4xf32>",
                      [], [], [1], [0]), a, b)
    assert r.dtype == np.float32
    np.testing.assert_allclose(r, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-6)


def test_dot_general_f16_result_rounds_once():
    a = np.full((1, 4096), 1, np.float16)
    b = np.full((4096, 1), 1, np.float16)
    r = run1(dot_text("tensor<1x4096xf16>", "tensor<4096x1xf16>", "tensor<1x1xf16>",
                      [], [], [1], [0]), a, b)
    assert r.dtype == np.float16 and float(r[0, 0]) == 4096.0


def test_dot_general_outer_product_and_empty_contraction():
    a = np.array([1, 2], np.int32)
    b = np.array([3, 4, 5], np.int32)
    r = run1(dot_text("tensor<2xi32>", "tensor<3xi32>", "tensor<2x3xi32>",
                      [], [], [], []), a, b)
    np.testing.assert_array_equal(r, np.outer(a, b))
    z = run1(dot_text("tensor<2x0xf32>", "tensor<0x3xf32>", "tensor<2x3xf32>",
                      [], [], [1], [0]), np.zeros((2, 0), np.float32),
             np.zeros((0, 3), np.float32))
    np.testing.assert_array_equal(z, np.zeros((2, 3), np.float32))


def test_dot_general_complex_sums_in_order():
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((3, 5)) + 1j * rng.standard_normal((3, 5))).astype(np.complex64)
    b = (rng.standard_normal((5, 2)) + 1j * rng.standard_normal((5, 2))).astype(np.complex64)
    r = run1(dot_text("tensor<3x5xcomplex<f32>>", "tensor<5x2xcomplex<f32>>",
                      "tensor<3x2xcomplex<f32>>", [], [], [1], [0]), a, b)
    acc = np.zeros((3, 2), np.complex64)
    for k in range(5):
        acc = acc + a[:, k:k + 1] * b[k:k + 1, :]
    np.testing.assert_array_equal(r, acc)


def test_legacy_dot():
    text = """
    func.func @main(%a: tensor<2x3xf64>, %v: tensor<3xf64>) -> tensor<2xf64> {
      %r = stablehlo.dot %a, %v : (tensor<2x3xf64>, tensor<3xf64>) -> tensor<2xf64>
      return %r : tensor<2xf64>
    }"""
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    v = np.array([1.0, -1.0, 0.5])
    np.testing.assert_allclose(run1(text, a, v), a @ v)


def test_dot_general_kernel_remembers_geometry_per_shape_pair():
    # The kernel caches its shape arithmetic per operand shape pair: other
    # shapes (dynamic ones) still compute and still fail on a mismatch.
    from stablehlo_interpreter.ops.dot import make_dot_general
    run = make_dot_general((), (), (1,), (0,), 2, 2, np.float32)
    rng = np.random.default_rng(0)
    for m, k, n in [(3, 4, 5), (2, 4, 5), (3, 4, 5), (1, 7, 2)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        np.testing.assert_allclose(run(a, b), a.astype(np.float64) @ b, rtol=1e-5)
    with pytest.raises(ValueError, match="contracting dims differ"):
        run(np.zeros((3, 4), np.float32), np.zeros((5, 2), np.float32))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("dims, lshape, rshape", [
    (((), (), (0,), (0,)), (64,), (64, 32)),            # an RNN cell's vector-matrix product
    (((), (), (1,), (0,)), (5, 64), (64, 7)),
    (((), (), (1,), (0,)), (5, 64), (64,)),
    (((), (), (1,), (0,)), (1, 64), (64, 1)),
    (((), (), (0,), (0,)), (1,), (1, 9)),               # K = 1: numpy's loop without BLAS
    (((), (), (0,), (0,)), (64,), (64,)),               # a dot product (a 0-d result)
    (((), (), (0,), (1,)), (64,), (9, 64)),
    (((0,), (2,), (1,), (0,)), (3, 6, 4), (6, 5, 3)),   # transposed operands, batch dims
])
def test_dot_general_native_float_path_is_the_batched_matmul(dt, dims, lshape, rshape):
    # Float operands of the result type take the kernel's short path (its
    # shape tests decided once per shape pair); it must give the bits of the
    # (B, M, K) x (B, K, N) matmul the general path computes, with or without
    # the one-BLAS-thread switch (blas.small_product).
    from stablehlo_interpreter import blas
    from stablehlo_interpreter.ops.dot import make_dot_general
    lb, rb, lc, rc = dims
    run = make_dot_general(lb, rb, lc, rc, len(lshape), len(rshape), dt)
    rng = np.random.default_rng(7)
    a = rng.standard_normal(lshape).astype(dt)
    b = rng.standard_normal(rshape).astype(dt)
    lf = [d for d in range(a.ndim) if d not in lb + lc]
    rf = [d for d in range(b.ndim) if d not in rb + rc]
    B = int(np.prod([a.shape[d] for d in lb]))
    K = int(np.prod([a.shape[d] for d in lc]))
    out_shape = tuple(a.shape[d] for d in lb) + tuple(a.shape[d] for d in lf) \
        + tuple(b.shape[d] for d in rf)

    def general(x, y):
        xt = np.transpose(x, list(lb) + lf + list(lc))
        yt = np.transpose(y, list(rb) + list(rc) + rf)
        return np.matmul(xt.reshape(B, -1, K), yt.reshape(B, K, -1)).reshape(out_shape)

    # Also strided operands (views of wider arrays: numpy's matmul may then
    # take its loop without BLAS, on both paths alike).
    wide_a = np.zeros(lshape[:-1] + (2 * lshape[-1],), dt)
    wide_a[..., ::2] = a
    wide_b = np.zeros(rshape[:-1] + (2 * rshape[-1],), dt)
    wide_b[..., ::2] = b
    for x, y in ((a, b), (wide_a[..., ::2], wide_b[..., ::2])):
        expect = general(x, y)
        for macs in (0, 1 << 30):   # never / always the small-product switch
            saved = blas.SMALL_GEMM_MACS
            blas.SMALL_GEMM_MACS = macs
            try:
                r = run(x, y)
            finally:
                blas.SMALL_GEMM_MACS = saved
            assert r.__class__ is np.ndarray and r.dtype == dt and r.shape == out_shape
            np.testing.assert_array_equal(r, expect)
    # Operands of another type than the result's are converted first.
    r16 = run(a.astype(np.float16), b)
    np.testing.assert_array_equal(r16, run(a.astype(np.float16).astype(dt), b))
