"""Shape / data-movement kernels (stablehlo_interpreter/ops/shape.py) against numpy."""

import ml_dtypes
import numpy as np
import pytest

import stablehlo_interpreter as shi


def run1(text, *args):
    (r,) = shi.compile(text).run(*args)
    return r


def test_iota_dtypes_and_wraparound():
    text = """
    func.func @main() -> (tensor<3x20xi4>, tensor<2x3xf32>, tensor<4xcomplex<f32>>) {
      %a = stablehlo.iota dim = 1 : tensor<3x20xi4>
      %b = stablehlo.iota dim = 0 : tensor<2x3xf32>
      %c = stablehlo.iota dim = 0 : tensor<4xcomplex<f32>>
      return %a, %b, %c : tensor<3x20xi4>, tensor<2x3xf32>, tensor<4xcomplex<f32>>
    }"""
    a, b, c = shi.compile(text).run()
    assert a.dtype == ml_dtypes.int4
    # i4 holds -8..7: the index wraps modulo 16.
    expect = ((np.arange(20) + 8) % 16 - 8)
    np.testing.assert_array_equal(a.astype(np.int64), np.broadcast_to(expect, (3, 20)))
    np.testing.assert_array_equal(b, [[0, 0, 0], [1, 1, 1]])
    assert c.dtype == np.complex64
    np.testing.assert_array_equal(c, [0, 1, 2, 3])


@pytest.mark.parametrize("src, dims, dst", [
    ("128xf32", "[1]", "1x128xf32"),            # a bias row: a reshape
    ("16x128xf32", "[1, 2]", "1x16x128xf32"),   # x[None]
    ("4xf32", "[1]", "3x4xf32"),                # increasing dims, filled (small)
    ("1x128xf32", "[0, 1]", "16x128xf32"),      # ordered dims, filled (small)
    ("3x1xi8", "[0, 2]", "3x5x7xi8"),
    ("1xf32", "[1]", "6x9xf32"),                # one value: a view
    ("2x1xf32", "[0, 1]", "2x5000xf32"),        # large: a view
])
def test_broadcast_in_dim_fast_paths_equal_numpy(src, dims, dst):
    # The fast paths (a reshape, a filled array when small, a view of one
    # value or a large result) give numpy's broadcast of the operand's dims
    # placed at `dims`.
    text = f"""
    func.func @main(%x: tensor<{src}>) -> tensor<{dst}> {{
      %r = stablehlo.broadcast_in_dim %x, dims = {dims} : (tensor<{src}>) -> tensor<{dst}>
      return %r : tensor<{dst}>
    }}"""
    shape = tuple(int(d) for d in src.split("x")[:-1])
    out = tuple(int(d) for d in dst.split("x")[:-1])
    dt = np.int8 if src.endswith("i8") else np.float32
    x = np.arange(int(np.prod(shape)), dtype=dt).reshape(shape)
    view = [1] * len(out)
    for i, d in enumerate(eval(dims)):  # noqa: S307 - the literal above
        view[d] = shape[i]
    r = run1(text, x)
    assert r.shape == out and r.dtype == x.dtype
    np.testing.assert_array_equal(r, np.broadcast_to(x.reshape(view), out))


def test_broadcast_in_dim_unsorted_dims_transposes():
    text = """
    func.func @main(%x: tensor<2x3xi32>) -> tensor<3x4x2xi32> {
      %r = stablehlo.broadcast_in_dim %x, dims = [2, 0] : (tensor<2x3xi32>) -> tensor<3x4x2xi32>
      return %r : tensor<3x4x2xi32>
    }"""
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    r = run1(text, x)
    np.testing.assert_array_equal(r, np.broadcast_to(x.T[:, None, :], (3, 4, 2)))


def test_broadcast_in_dim_scalar_size1_and_empty():
    text = """
    func.func @main(%s: tensor<f32>, %x: tensor<1x3xf32>, %e: tensor<0xf32>)
        -> (tensor<2x2xf32>, tensor<5x3xf32>, tensor<4x0xf32>) {
      %a = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<2x2xf32>
      %b = stablehlo.broadcast_in_dim %x, dims = [0, 1] : (tensor<1x3xf32>) -> tensor<5x3xf32>
      %c = stablehlo.broadcast_in_dim %e, dims = [1] : (tensor<0xf32>) -> tensor<4x0xf32>
      return %a, %b, %c : tensor<2x2xf32>, tensor<5x3xf32>, tensor<4x0xf32>
    }"""
    x = np.array([[1, 2, 3]], np.float32)
    a, b, c = shi.compile(text).run(np.array(7, np.float32), x, np.zeros(0, np.float32))
    np.testing.assert_array_equal(a, np.full((2, 2), 7, np.float32))
    np.testing.assert_array_equal(b, np.repeat(x, 5, axis=0))
    assert c.shape == (4, 0) and c.dtype == np.float32


@pytest.mark.parametrize("et,dtype,value", [
    ("f32", np.float32, -2.5), ("bf16", ml_dtypes.bfloat16, 1.5),
    ("f8E4M3FN", ml_dtypes.float8_e4m3fn, -3.0), ("complex<f32>", np.complex64, 1 - 2j),
    ("i1", np.bool_, True), ("i4", ml_dtypes.int4, -7), ("ui64", np.uint64, 2**63 + 5)])
def test_broadcast_of_one_value_is_a_read_only_zero_stride_view(et, dtype, value):
    # One value broadcast (shape.splat): every element type, from a 0-d
    # operand and from one element in the middle of a slice, read-only as
    # np.broadcast_to's views are, with the operand's bits.
    text = f"""
    func.func @main(%s: tensor<{et}>, %v: tensor<3x{et}>) -> (tensor<4x5x{et}>, tensor<2x6x{et}>) {{
      %a = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<{et}>) -> tensor<4x5x{et}>
      %m = stablehlo.slice %v [1:2] : (tensor<3x{et}>) -> tensor<1x{et}>
      %b = stablehlo.broadcast_in_dim %m, dims = [1] : (tensor<1x{et}>) -> tensor<2x6x{et}>
      return %a, %b : tensor<4x5x{et}>, tensor<2x6x{et}>
    }}"""
    s = np.array(value, dtype)
    v = np.array([0, value, 0], dtype)
    a, b = shi.compile(text).run(s, v)
    for r, shape in ((a, (4, 5)), (b, (2, 6))):
        assert r.shape == shape and r.dtype == s.dtype
        assert not r.flags.writeable and not any(r.strides)
        assert (r.reshape(-1)[:, None].view(np.uint8) == s.reshape(1, 1).view(np.uint8)).all()


def test_reshape_transpose_reverse():
    text = """
    func.func @main(%x: tensor<2x3x4xbf16>) -> (tensor<4x6xbf16>, tensor<4x2x3xbf16>, tensor<2x3x4xbf16>) {
      %a = stablehlo.reshape %x : (tensor<2x3x4xbf16>) -> tensor<4x6xbf16>
      %b = stablehlo.transpose %x, dims = [2, 0, 1] : (tensor<2x3x4xbf16>) -> tensor<4x2x3xbf16>
      %c = stablehlo.reverse %x, dims = [0, 2] : tensor<2x3x4xbf16>
      return %a, %b, %c : tensor<4x6xbf16>, tensor<4x2x3xbf16>, tensor<2x3x4xbf16>
    }"""
    x = np.arange(24).astype(ml_dtypes.bfloat16).reshape(2, 3, 4)
    a, b, c = shi.compile(text).run(x)
    np.testing.assert_array_equal(a, x.reshape(4, 6))
    np.testing.assert_array_equal(b, np.transpose(x, (2, 0, 1)))
    np.testing.assert_array_equal(c, x[::-1, :, ::-1])
    assert a.dtype == b.dtype == c.dtype == ml_dtypes.bfloat16


def test_reshape_0d_and_back():
    text = """
    func.func @main(%x: tensor<1x1xi64>) -> tensor<i64> {
      %r = stablehlo.reshape %x : (tensor<1x1xi64>) -> tensor<i64>
      return %r : tensor<i64>
    }"""
    r = run1(text, np.array([[42]], np.int64))
    assert isinstance(r, np.ndarray) and r.shape == () and int(r) == 42


def test_slice_strided():
    text = """
    func.func @main(%x: tensor<5x7xi32>) -> tensor<2x3xi32> {
      %r = stablehlo.slice %x [1:4:2, 0:7:3] : (tensor<5x7xi32>) -> tensor<2x3xi32>
      return %r : tensor<2x3xi32>
    }"""
    x = np.arange(35, dtype=np.int32).reshape(5, 7)
    np.testing.assert_array_equal(run1(text, x), x[1:4:2, 0:7:3])


DYN_SLICE = """
func.func @main(%x: tensor<4x5xi32>, %i: tensor<i64>, %j: tensor<i64>) -> tensor<2x3xi32> {
  %r = stablehlo.dynamic_slice %x, %i, %j, sizes = [2, 3]
      : (tensor<4x5xi32>, tensor<i64>, tensor<i64>) -> tensor<2x3xi32>
  return %r : tensor<2x3xi32>
}"""


@pytest.mark.parametrize("i,j,ci,cj", [(1, 1, 1, 1), (-5, 0, 0, 0), (3, 4, 2, 2),
                                       (100, -100, 2, 0)])
def test_dynamic_slice_clamps_start_indices(i, j, ci, cj):
    x = np.arange(20, dtype=np.int32).reshape(4, 5)
    r = run1(DYN_SLICE, x, np.array(i), np.array(j))
    np.testing.assert_array_equal(r, x[ci:ci + 2, cj:cj + 3])


def test_dynamic_update_slice_clamps_and_does_not_mutate():
    text = """
    func.func @main(%x: tensor<4x4xf32>, %u: tensor<2x3xf32>, %i: tensor<i32>, %j: tensor<i32>)
        -> tensor<4x4xf32> {
      %r = stablehlo.dynamic_update_slice %x, %u, %i, %j
          : (tensor<4x4xf32>, tensor<2x3xf32>, tensor<i32>, tensor<i32>) -> tensor<4x4xf32>
      return %r : tensor<4x4xf32>
    }"""
    prog = shi.compile(text)
    x = np.zeros((4, 4), np.float32)
    u = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    (r,) = prog.run(x, u, np.array(7, np.int32), np.array(-2, np.int32))
    expect = np.zeros((4, 4), np.float32)
    expect[2:4, 0:3] = u
    np.testing.assert_array_equal(r, expect)
    assert not x.any()  # the operand is untouched


def test_concatenate_mixed_sizes_and_empty():
    text = """
    func.func @main(%a: tensor<2x3xui8>, %b: tensor<0x3xui8>, %c: tensor<1x3xui8>) -> tensor<3x3xui8> {
      %r = stablehlo.concatenate %a, %b, %c, dim = 0
          : (tensor<2x3xui8>, tensor<0x3xui8>, tensor<1x3xui8>) -> tensor<3x3xui8>
      return %r : tensor<3x3xui8>
    }"""
    a = np.arange(6, dtype=np.uint8).reshape(2, 3)
    c = np.full((1, 3), 255, np.uint8)
    r = run1(text, a, np.zeros((0, 3), np.uint8), c)
    np.testing.assert_array_equal(r, np.concatenate([a, c]))
    assert r.dtype == np.uint8


def _np_pad(x, value, low, high, interior):
    """Reference: interior first, then edge padding, then crop (negative edges)."""
    out = x
    for ax, it in enumerate(interior):
        if it and out.shape[ax] > 1:
            n = out.shape[ax]
            idx = np.repeat(np.arange(1, n), it)
            out = np.insert(out, idx, value, axis=ax)
    pads = [(max(lo, 0), max(hi, 0)) for lo, hi in zip(low, high)]
    out = np.pad(out, pads, constant_values=value)
    sl = tuple(slice(max(-lo, 0), out.shape[ax] - max(-hi, 0))
               for ax, (lo, hi) in enumerate(zip(low, high)))
    return out[sl]


@pytest.mark.parametrize("low,high,interior", [
    ((1, 2), (0, 1), (0, 0)),
    ((0, 0), (0, 0), (2, 1)),
    ((-1, 1), (2, -2), (1, 0)),
    ((-2, -1), (-1, -3), (1, 2)),
])
def test_pad_negative_and_interior(low, high, interior):
    x = np.arange(1, 13, dtype=np.float64).reshape(3, 4)
    r_shape = [lo + hi + d + max(d - 1, 0) * it
               for d, lo, hi, it in zip(x.shape, low, high, interior)]
    t = "x".join(map(str, r_shape)) + "xf64"
    text = f"""
    func.func @main(%x: tensor<3x4xf64>, %v: tensor<f64>) -> tensor<{t}> {{
      %r = stablehlo.pad %x, %v, low = {list(low)}, high = {list(high)}, interior = {list(interior)}
          : (tensor<3x4xf64>, tensor<f64>) -> tensor<{t}>
      return %r : tensor<{t}>
    }}"""
    r = run1(text, x, np.array(-1.0))
    np.testing.assert_array_equal(r, _np_pad(x, -1.0, low, high, interior))


def test_pad_empty_operand():
    text = """
    func.func @main(%x: tensor<0x2xi8>, %v: tensor<i8>) -> tensor<3x2xi8> {
      %r = stablehlo.pad %x, %v, low = [1, 0], high = [2, 0], interior = [5, 0]
          : (tensor<0x2xi8>, tensor<i8>) -> tensor<3x2xi8>
      return %r : tensor<3x2xi8>
    }"""
    r = run1(text, np.zeros((0, 2), np.int8), np.array(9, np.int8))
    np.testing.assert_array_equal(r, np.full((3, 2), 9, np.int8))


def test_get_dimension_size():
    text = """
    func.func @main(%x: tensor<2x5xf32>) -> tensor<i32> {
      %r = stablehlo.get_dimension_size %x, dim = 1 : (tensor<2x5xf32>) -> tensor<i32>
      return %r : tensor<i32>
    }"""
    r = run1(text, np.zeros((2, 5), np.float32))
    assert r.dtype == np.int32 and r.shape == () and int(r) == 5


def test_legacy_broadcast():
    text = """
    func.func @main(%x: tensor<3xi16>) -> tensor<2x4x3xi16> {
      %r = "stablehlo.broadcast"(%x) {broadcast_sizes = array<i64: 2, 4>} : (tensor<3xi16>) -> tensor<2x4x3xi16>
      return %r : tensor<2x4x3xi16>
    }"""
    x = np.array([1, -2, 3], np.int16)
    np.testing.assert_array_equal(run1(text, x), np.broadcast_to(x, (2, 4, 3)))
