"""convolution / dynamic_conv against a per-element reference of the spec."""

import itertools

import numpy as np
import pytest

import stablehlo_interpreter as shi


def tt(shape, et):
    return "tensor<" + "".join(f"{n}x" for n in shape) + et + ">"


def arr(a):
    return ", ".join(str(int(x)) for x in a)


def conv_ref(lhs, rhs, ws, pad, ld, rd, rev, G, B, acc_dtype):
    """Canonical layouts: lhs (N, C, S...), rhs (O, I, K...) -> (N/B, O, out...).

    Window element at kernel position k reads padded/dilated lhs coordinate
    y*s + k*rd; a coordinate q maps to lhs (q - lo) / ld when divisible.
    """
    N, C = lhs.shape[:2]
    O, I = rhs.shape[:2]
    S, K = lhs.shape[2:], rhs.shape[2:]
    P = [(n - 1) * d + 1 + a + b for n, d, (a, b) in zip(S, ld, pad)]
    out = [max(0, (p - ((k - 1) * r + 1)) // s + 1) for p, k, r, s in zip(P, K, rd, ws)]
    Nb, Og = N // B, O // (G * B)
    res = np.zeros((Nb, O) + tuple(out), dtype=acc_dtype)
    for nb, o in itertools.product(range(Nb), range(O)):
        grp = o // Og
        n = nb + (grp * Nb if B > 1 else 0)
        c0 = grp * I if G > 1 else 0
        for y in itertools.product(*map(range, out)):
            acc = acc_dtype.type(0)
            for k in itertools.product(*map(range, K)):
                # window reversal: the window element at k multiplies rhs at K-1-k
                kk = tuple(K[i] - 1 - k[i] if rev[i] else k[i] for i in range(len(K)))
                q = [yy * s + kv * r - a for yy, s, kv, r, (a, _) in zip(y, ws, k, rd, pad)]
                if any(v % d for v, d in zip(q, ld)):
                    continue
                src = [v // d for v, d in zip(q, ld)]
                if not all(0 <= v < m for v, m in zip(src, S)):
                    continue
                for i in range(I):
                    acc = acc_dtype.type(acc + acc_dtype.type(lhs[(n, c0 + i) + tuple(src)])
                                         * acc_dtype.type(rhs[(o, i) + kk]))
            res[(nb, o) + y] = acc
    return res


def dims_string(perm_lhs, perm_rhs, perm_out):
    """`[b, 0, f]x[o, i, 0]->[b, f, 0]` from canonical-axis positions."""
    def one(perm, names):
        toks = [""] * len(perm)
        for canon, pos in enumerate(perm):
            toks[pos] = names[canon] if canon < 2 else str(canon - 2)
        return "[" + ", ".join(toks) + "]"
    return (one(perm_lhs, "bf") + "x" + one(perm_rhs, "oi") + "->" + one(perm_out, "bf"))


def conv_prog(lshape, rshape, oshape, et, oet, dims, ws, pad, ld, rd, rev, G, B, dynamic):
    lt, rt, ot = tt(lshape, et), tt(rshape, et), tt(oshape, oet)
    common = (f"window_strides = array<i64: {arr(ws)}>, lhs_dilation = array<i64: {arr(ld)}>, "
              f"rhs_dilation = array<i64: {arr(rd)}>, "
              f"window_reversal = array<i1: {', '.join('true' if r else 'false' for r in rev)}>, "
              f"dimension_numbers = #stablehlo.conv<{dims}>, "
              f"feature_group_count = {G} : i64, batch_group_count = {B} : i64")
    padt = f"tensor<{len(pad)}x2xi64>"
    if dynamic:
        return shi.compile(f"""
func.func @main(%l: {lt}, %r: {rt}, %p: {padt}) -> {ot} {{
  %o = "stablehlo.dynamic_conv"(%l, %r, %p) {{{common}}} : ({lt}, {rt}, {padt}) -> {ot}
  return %o : {ot}
}}""")
    return shi.compile(f"""
func.func @main(%l: {lt}, %r: {rt}) -> {ot} {{
  %o = "stablehlo.convolution"(%l, %r) {{{common},
      padding = dense<[{", ".join(f"[{a}, {b}]" for a, b in pad)}]> : {padt}}} : ({lt}, {rt}) -> {ot}
  return %o : {ot}
}}""")


CASES = [
    # N, C, S, O, K, strides, pad, lhs_dil, rhs_dil, reversal, G, B, layouts
    (2, 3, (7,), 4, (3,), (2,), [(1, 2)], (1,), (1,), (False,), 1, 1, "nwc"),
    (1, 2, (5, 4), 3, (2, 3), (1, 2), [(0, 1), (2, -1)], (2, 1), (1, 2), (False, True), 1, 1,
     "nhwc"),
    (2, 4, (6,), 6, (2,), (1,), [(0, 0)], (1,), (2,), (True,), 2, 1, "ncw"),
    (4, 2, (3, 3), 4, (2, 2), (1, 1), [(1, 0), (0, 0)], (1, 1), (1, 1), (False, False), 1, 2,
     "odd"),
    (1, 40, (6,), 2, (3,), (1,), [(1, 1)], (1,), (1,), (False,), 1, 1, "nwc"),  # BLAS path
    # NCHW (channels-first im2col), groups, strides, both dilations, reversal
    (2, 4, (5, 6), 4, (3, 2), (2, 1), [(1, 1), (0, 2)], (1, 2), (2, 1), (True, False), 2, 1,
     "nchw"),
    (4, 3, (4, 5), 6, (2, 2), (1, 2), [(0, 1), (1, 0)], (2, 1), (1, 1), (False, True), 1, 2,
     "nchw"),
    # fewer output than input features, long dots: the per-position form
    (2, 8, (6, 5), 2, (3, 3), (1, 1), [(1, 1), (1, 1)], (1, 1), (1, 1), (False, False), 1, 1,
     "nchw"),
    (2, 8, (6, 5), 2, (3, 3), (2, 1), [(1, 1), (0, 1)], (1, 1), (1, 2), (False, True), 1, 1,
     "nhwc"),
    # PyTorch's weight-gradient layout ([f, b, 0, 1] x [i, o, 0, 1] -> [0, 1, b, f])
    (3, 5, (6, 6), 4, (4, 4), (1, 1), [(1, 1), (1, 1)], (1, 1), (1, 1), (False, False), 1, 1,
     "fbhw"),
    # a kernel wider than the output (weight gradients): rows (out..., N) in im2col
    (3, 5, (6, 6), 4, (5, 5), (1, 1), [(0, 0), (1, 0)], (1, 1), (1, 1), (False, False), 1, 1,
     "fbhw"),
    (3, 4, (6, 7), 4, (5, 5), (1, 1), [(0, 0), (1, 0)], (1, 1), (1, 1), (True, False), 2, 1,
     "nchw"),
    # a dilated lhs with unit strides (transposed convolutions, input gradients of
    # strided ones): split by output phase; padding below/above the dilation, crops
    (2, 4, (4, 5), 6, (3, 2), (1, 1), [(1, 2), (0, -1)], (2, 3), (1, 1), (True, False), 2, 1,
     "nhwc"),
    (1, 3, (5, 5), 2, (3, 3), (1, 1), [(2, 2), (2, 2)], (2, 2), (1, 1), (False, False), 1, 1,
     "nchw"),
    (4, 2, (3, 4), 4, (4, 3), (1, 1), [(-1, 3), (4, 0)], (3, 2), (1, 1), (False, True), 1, 2,
     "odd"),
    (2, 2, (3,), 2, (5,), (1,), [(0, 0)], (3,), (1,), (False,), 1, 1, "ncw"),  # out < kernel
    (1, 2, (4,), 3, (2,), (1,), [(1, 1)], (3,), (1,), (True,), 1, 1, "nwc"),  # a phase with no taps
]

LAYOUTS = {  # (lhs perm, rhs perm, out perm): position of canonical axis k
    "nwc": ((0, 2, 1), (2, 1, 0), (0, 2, 1)),
    "ncw": ((0, 1, 2), (0, 1, 2), (0, 1, 2)),
    "nhwc": ((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2)),
    "odd": ((1, 3, 0, 2), (2, 0, 3, 1), (3, 0, 2, 1)),
    "nchw": ((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3)),
    "fbhw": ((1, 0, 2, 3), (1, 0, 2, 3), (2, 3, 0, 1)),
}


def to_layout(x, perm):
    """Canonical array -> array whose axis perm[k] is canonical axis k."""
    inv = np.argsort(perm)
    return np.transpose(x, inv)


PATHS = {  # module constants that force one form (ops/convolution.py)
    "auto": {},
    "long_dots": {"_SHORT_DOT": 0},                   # im2col, element-type accumulation
    "per_position": {"_SHORT_DOT": 0, "_PER_POSITION_GAIN": 0},
    "kernel_loop": {"_SHORT_DOT": 0, "_IM2COL_LIMIT": 0},
    "chunked_dots": {"_SHORT_DOT": 0, "_DOT_CHUNK": 2},   # long contractions in chunks
}


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_convolution_matches_reference(case, dynamic, path, monkeypatch):
    from stablehlo_interpreter.ops import convolution as conv_mod
    for name, value in PATHS[path].items():
        monkeypatch.setattr(conv_mod, name, value)
    N, C, S, O, K, ws, pad, ld, rd, rev, G, B, lay = CASES[case]
    rng = np.random.default_rng(case)
    lhs = rng.integers(-3, 4, (N, C) + S).astype(np.float32)
    rhs = rng.integers(-3, 4, (O, C // G) + K).astype(np.float32)
    exp = conv_ref(lhs, rhs, ws, pad, ld, rd, rev, G, B, np.dtype(np.float32))
    pl, pr, po = LAYOUTS[lay]
    prog = conv_prog(to_layout(lhs, pl).shape, to_layout(rhs, pr).shape,
                     to_layout(exp, po).shape, "f32", "f32",
                     dims_string(pl, pr, po), ws, pad, ld, rd, rev, G, B, dynamic)
    args = [to_layout(lhs, pl), to_layout(rhs, pr)]
    if dynamic:
        args.append(np.array(pad, np.int64))
    got = prog.run(*args)[0]
    np.testing.assert_array_equal(got, to_layout(exp, po))


def test_integer_convolution_wraps_in_result_type():
    # i8 x i8 -> i8: products and sums wrap modulo 2^8.
    lhs = np.full((1, 1, 4), 100, np.int8)
    rhs = np.full((1, 1, 3), 3, np.int8)
    dims = "[b, f, 0]x[o, i, 0]->[b, f, 0]"
    prog = conv_prog((1, 1, 4), (1, 1, 3), (1, 1, 2), "i8", "i8", dims, (1,), [(0, 0)],
                     (1,), (1,), (False,), 1, 1, False)
    got = prog.run(lhs, rhs)[0]
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, [[[900 - 1024, 900 - 1024]]])
    # i8 -> i32 result: no wrap.
    prog = conv_prog((1, 1, 4), (1, 1, 3), (1, 1, 2), "i8", "i32", dims, (1,), [(0, 0)],
                     (1,), (1,), (False,), 1, 1, False)
    np.testing.assert_array_equal(prog.run(lhs, rhs)[0], [[[900, 900]]])


def test_convolution_f32_short_dots_round_the_exact_sum_once():
    # XLA CPU's loop adds 1e8 + 1 - 1e8 in f32 and gets 0. The spec leaves
    # the order of a dot product's sum to the implementation; the reference
    # computes short dot products (up to _SHORT_DOT terms) in float64, where
    # products of f32 values are exact, and rounds once: the exact 1.
    lhs = np.array([[[1e8], [1.0], [-1e8]]], np.float32).transpose(0, 2, 1)  # (1, 1, 3)
    rhs = np.ones((1, 1, 3), np.float32)
    dims = "[b, f, 0]x[o, i, 0]->[b, f, 0]"
    prog = conv_prog((1, 1, 3), (1, 1, 3), (1, 1, 1), "f32", "f32", dims, (1,), [(0, 0)],
                     (1,), (1,), (False,), 1, 1, False)
    assert prog.run(lhs, rhs)[0][0, 0, 0] == np.float32(1.0)


def test_convolution_empty_output():
    dims = "[b, f, 0]x[o, i, 0]->[b, f, 0]"
    prog = conv_prog((1, 1, 2), (1, 1, 3), (1, 1, 0), "f32", "f32", dims, (1,), [(0, 0)],
                     (1,), (1,), (False,), 1, 1, False)
    assert prog.run(np.ones((1, 1, 2), np.float32), np.ones((1, 1, 3), np.float32))[0].shape \
        == (1, 1, 0)


def _is_nearest_f32(v, exact):
    """``v`` (an f32) is a float32 nearest to the rational ``exact``."""
    from fractions import Fraction
    err = abs(Fraction(float(v)) - exact)
    for nb in (np.nextafter(v, np.float32(np.inf)), np.nextafter(v, np.float32(-np.inf))):
        if np.isfinite(nb) and abs(Fraction(float(nb)) - exact) < err:
            return False
    return True


def test_suite_short_convolution_is_correctly_rounded():
    # conv_general_dilated_float32_2_3_9_float32_12_1_3 (depthwise, 3-term dot
    # products) expects XLA CPU's f32 loop, up to 32 ULP from the exact value
    # under cancellation, with a 3-ULP check: the reference's float64 short
    # dots give the correctly rounded values instead, which this test proves
    # on the file (tests/test_conformance_suite.py lists it as a known
    # difference).
    import re
    from fractions import Fraction

    from conftest import SUITE

    from stablehlo_interpreter import dtypes
    path = SUITE / "testdata" / "conv_general_dilated_float32_2_3_9_float32_12_1_3.mlir"
    if not path.exists():
        pytest.skip(f"no conformance suite at {SUITE}")
    text = re.sub(r"\s*stablehlo.custom_call @check\.[^\n]*\n", "\n", path.read_text())
    prog = shi.compile(text)
    (x, w), expected, ours = prog.run(func="inputs"), prog.run(func="expected")[0], prog.run()[0]
    assert "feature_group_count = 3" in text and "rhs_dilate = [2]" in text
    og = w.shape[0] // 3
    for n, o, y in np.ndindex(*ours.shape):
        exact = sum(Fraction(float(x[n, o // og, y + 2 * k])) * Fraction(float(w[o, 0, k]))
                    for k in range(w.shape[2]))
        assert _is_nearest_f32(ours[n, o, y], exact), (n, o, y)
    assert dtypes.ulp_distance(ours, expected).max() > 3  # why the file's check fails


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("et", ["f16", "bf16", "f64", "complex<f32>", "complex<f64>", "i32",
                                "ui8", "i4", "i1"])
def test_convolution_element_types(et, path, monkeypatch):
    # Small integer values: every form and accumulation type is exact, so the
    # result must equal the reference's bit for bit (i1: a sum > 0 is true).
    from stablehlo_interpreter import dtypes
    from stablehlo_interpreter.ops import convolution as conv_mod
    for name, value in PATHS[path].items():
        monkeypatch.setattr(conv_mod, name, value)
    dt = dtypes.from_element_type(et)
    N, C, S, O, K, ws, pad, ld, rd, rev, G, B, lay = CASES[5]  # NCHW, groups, dilations
    rng = np.random.default_rng(7)
    lo = 0 if et in ("ui8", "i1") else -1
    lhs = rng.integers(lo, 2, (N, C) + S)
    rhs = rng.integers(lo, 2, (O, C // G) + K)
    if et.startswith("complex"):
        lhs = lhs + 1j * rng.integers(-1, 2, lhs.shape)
        rhs = rhs + 1j * rng.integers(-1, 2, rhs.shape)
    wide = np.dtype(np.complex128 if et.startswith("complex") else np.float64)
    exp = conv_ref(lhs.astype(wide), rhs.astype(wide), ws, pad, ld, rd, rev, G, B, wide)
    exp = (exp != 0) if et == "i1" else exp.astype(dt)
    pl, pr, po = LAYOUTS[lay]
    prog = conv_prog(to_layout(lhs, pl).shape, to_layout(rhs, pr).shape,
                     to_layout(exp, po).shape, et, et, dims_string(pl, pr, po),
                     ws, pad, ld, rd, rev, G, B, False)
    got = prog.run(to_layout(lhs.astype(dt), pl), to_layout(rhs.astype(dt), pr))[0]
    assert got.dtype == dt
    np.testing.assert_array_equal(got, to_layout(exp, po))


def test_convolution_short_f32_dots_are_correctly_rounded():
    # Random f32 data, 27-term dot products (a 3-channel 3x3 convolution, the
    # first layer of a CNN): every result is the float32 nearest to the exact
    # value (float64 products are exact; the float64 sum is far below f32's
    # rounding except under extreme cancellation, which random data lacks).
    from fractions import Fraction
    rng = np.random.default_rng(3)
    lhs = rng.standard_normal((1, 3, 5, 5)).astype(np.float32)
    rhs = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    pl, pr, po = LAYOUTS["nchw"]
    prog = conv_prog(lhs.shape, rhs.shape, (1, 2, 3, 3), "f32", "f32", dims_string(pl, pr, po),
                     (1, 1), [(0, 0), (0, 0)], (1, 1), (1, 1), (False, False), 1, 1, False)
    got = prog.run(lhs, rhs)[0]
    for o, y, x in np.ndindex(2, 3, 3):
        exact = sum(Fraction(float(lhs[0, c, y + i, x + j])) * Fraction(float(rhs[o, c, i, j]))
                    for c in range(3) for i in range(3) for j in range(3))
        assert _is_nearest_f32(got[0, o, y, x], exact), (o, y, x)


def test_convolution_long_f32_contractions_sum_chunks_in_float64():
    # A weight gradient ([f, b, 0, 1] x [i, o, 0, 1] -> [0, 1, b, f]): each
    # result sums batch x image = 4096 products of random sign. In chunks of
    # 512 summed in float64 the error relative to the sum of |terms| measured
    # 1.0e-8; one f32 BLAS sum of all 4096 terms measured 3.0e-8.
    from numpy.lib.stride_tricks import sliding_window_view
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 8, 16, 16)).astype(np.float32)   # (N, C, H, W)
    g = rng.standard_normal((16, 4, 16, 16)).astype(np.float32)   # (N, O, H, W)
    dims = "[f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f]"
    prog = conv_prog(x.shape, g.shape, (3, 3, 8, 4), "f32", "f32", dims, (1, 1),
                     [(1, 1), (1, 1)], (1, 1), (1, 1), (False, False), 1, 1, False)
    got = prog.run(x, g)[0]

    def grad(x, g):
        win = sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (16, 16),
                                  axis=(2, 3))  # (N, C, 3, 3, 16, 16)
        return np.einsum("nohw,ncijhw->ijco", g, win)
    truth = grad(x.astype(np.float64), g.astype(np.float64))
    scale = grad(np.abs(x).astype(np.float64), np.abs(g).astype(np.float64))
    assert (np.abs(got - truth) / scale).max() < 2e-8


def test_convolution_dilated_lhs_is_correctly_rounded():
    # A transposed convolution (lhs dilated by 2, unit strides) runs as four
    # convolutions of the undilated lhs, summed in float64: every f32 result
    # is the nearest to the exact value (the zeros of the dilation dropped).
    from fractions import Fraction
    rng = np.random.default_rng(9)
    lhs = rng.standard_normal((1, 4, 4, 5)).astype(np.float32)
    rhs = rng.standard_normal((3, 4, 3, 3)).astype(np.float32)
    pad, ld = [(2, 1), (1, 2)], (2, 2)
    exp_shape = conv_ref(lhs, rhs, (1, 1), pad, ld, (1, 1), (False, True), 1, 1,
                         np.dtype(np.float64)).shape
    pl, pr, po = LAYOUTS["nchw"]
    prog = conv_prog(lhs.shape, rhs.shape, exp_shape, "f32", "f32", dims_string(pl, pr, po),
                     (1, 1), pad, ld, (1, 1), (False, True), 1, 1, False)
    got = prog.run(lhs, rhs)[0]
    for o, y, x in np.ndindex(*exp_shape[1:]):
        exact = Fraction(0)
        for c, i, j in np.ndindex(4, 3, 3):
            qy, qx = y + i - pad[0][0], x + j - pad[1][0]
            if qy % 2 or qx % 2 or not (0 <= qy // 2 < 4 and 0 <= qx // 2 < 5):
                continue
            exact += Fraction(float(lhs[0, c, qy // 2, qx // 2])) * \
                Fraction(float(rhs[o, c, i, 2 - j]))  # reversed along the last axis
        assert _is_nearest_f32(got[0, o, y, x], exact), (o, y, x)


# --------------------------------------------------------------------------
# The channels-last im2col product in blocks of images or output lines, one
# product per kernel row (ops/convolution.py _blocked_im2col, _row_products).


def _nhwc_attrs(ns, strides, G=1, B=1):
    sp = list(range(1, ns + 1))
    return {"dimension_numbers": dict(
        input_batch_dimension=0, input_feature_dimension=ns + 1, input_spatial_dimensions=sp,
        kernel_input_feature_dimension=ns, kernel_output_feature_dimension=ns + 1,
        kernel_spatial_dimensions=list(range(ns)),
        output_batch_dimension=0, output_feature_dimension=ns + 1, output_spatial_dimensions=sp),
        "window_strides": list(strides), "feature_group_count": G, "batch_group_count": B}


@pytest.mark.parametrize("S,K,C,O,strides,G,B", [
    ((9, 7), (3, 3), 8, 5, (1, 1), 1, 1),     # NHWC 3x3, lines split over blocks
    ((9, 7), (3, 2), 8, 6, (2, 1), 2, 1),     # feature groups, a stride
    ((11,), (5,), 12, 10, (1,), 1, 2),        # 1-D, batch groups
    ((5, 4, 6), (2, 3, 2), 6, 3, (1, 2, 1), 1, 1),
])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("blocks", ["lines", "images"])
def test_blocked_im2col_and_reference(monkeypatch, S, K, C, O, strides, G, B, dtype, blocks):
    """Blocks of lines and of whole images: the one-block result within
    rounding, and the spec's value."""
    from stablehlo_interpreter.ops import convolution as conv_mod
    rng = np.random.default_rng(7)
    N = 4 * B
    x = rng.standard_normal((N,) + S + (C,)).astype(np.float32)
    w = rng.standard_normal(K + (C // G, O)).astype(np.float32)
    if dtype == np.complex64:
        x = (x + 1j * rng.standard_normal(x.shape)).astype(dtype)
        w = (w + 1j * rng.standard_normal(w.shape)).astype(dtype)
    pad = np.array([[1, 0]] * len(S))
    attrs = _nhwc_attrs(len(S), strides, G, B)
    monkeypatch.setattr(conv_mod, "_SHORT_DOT", 0)    # the work type's product, blocked
    plan = conv_mod._im2col_blocks
    seen = []
    monkeypatch.setattr(conv_mod, "_im2col_blocks",
                        lambda *a: seen.append((a, plan(*a))) or seen[-1][1])
    fn = conv_mod.make_convolution(attrs, np.dtype(dtype))
    monkeypatch.setattr(conv_mod, "_IM2COL_BLOCK", 1 << 30)
    one = fn(x, w, pad)        # one block: one im2col, one product
    (Nb, out_sp, per_line), only = seen.pop()
    assert only == [(0, Nb, 0, out_sp[0])]
    if blocks == "lines":      # less than a line's windows: one line of one image a block
        monkeypatch.setattr(conv_mod, "_IM2COL_BLOCK", 2 * K[-1] * C)
    else:                      # two whole images a block
        monkeypatch.setattr(conv_mod, "_IM2COL_BLOCK", 2 * out_sp[0] * per_line)
    shared = fn(x, w, pad)
    (_, split), = seen
    assert len(split) > 1
    if blocks == "lines":
        assert all(n1 == n0 + 1 for n0, n1, _, _ in split)
        assert any(a1 - a0 < out_sp[0] for _, _, a0, a1 in split)
    else:
        assert all(n1 - n0 == 2 and a1 - a0 == out_sp[0] for n0, n1, a0, a1 in split)
    assert shared.dtype == dtype and shared.shape == one.shape
    np.testing.assert_allclose(shared, one, rtol=0, atol=1e-5 * np.abs(one).max())
    # The spec's definition in float64 / complex128 (canonical layouts).
    lhs = np.moveaxis(x, -1, 1).astype(np.complex128)
    rhs = np.moveaxis(np.moveaxis(w, -1, 0), -1, 1).astype(np.complex128)
    want = conv_ref(lhs, rhs, strides, pad.tolist(), (1,) * len(S), (1,) * len(S),
                    (False,) * len(S), G, B, np.dtype(np.complex128))
    want = np.moveaxis(want, 1, -1)
    if dtype == np.float32:
        want = want.real
    scale = np.abs(want).max()
    np.testing.assert_allclose(shared, want, rtol=0, atol=1e-5 * scale)

