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
]

LAYOUTS = {  # (lhs perm, rhs perm, out perm): position of canonical axis k
    "nwc": ((0, 2, 1), (2, 1, 0), (0, 2, 1)),
    "ncw": ((0, 1, 2), (0, 1, 2), (0, 1, 2)),
    "nhwc": ((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2)),
    "odd": ((1, 3, 0, 2), (2, 0, 3, 1), (3, 0, 2, 1)),
}


def to_layout(x, perm):
    """Canonical array -> array whose axis perm[k] is canonical axis k."""
    inv = np.argsort(perm)
    return np.transpose(x, inv)


@pytest.mark.parametrize("path", ["auto", "kernel_loop"])
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_convolution_matches_reference(case, dynamic, path, monkeypatch):
    from stablehlo_interpreter.ops import convolution as conv_mod
    if path == "kernel_loop":
        # Large problems: no im2col, one matmul per kernel position.
        monkeypatch.setattr(conv_mod, "_IM2COL_LIMIT", 0)
        monkeypatch.setattr(conv_mod, "_SEQUENTIAL_DOT", 0)
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


def test_convolution_f32_sums_short_dots_in_order():
    # A BLAS dot would fuse/reorder these; the spec-style loop keeps f32 rounding.
    lhs = np.array([[[1e8], [1.0], [-1e8]]], np.float32).transpose(0, 2, 1)  # (1, 1, 3)
    rhs = np.ones((1, 1, 3), np.float32)
    dims = "[b, f, 0]x[o, i, 0]->[b, f, 0]"
    prog = conv_prog((1, 1, 3), (1, 1, 3), (1, 1, 1), "f32", "f32", dims, (1,), [(0, 0)],
                     (1,), (1,), (False,), 1, 1, False)
    assert prog.run(lhs, rhs)[0][0, 0, 0] == np.float32(np.float32(1e8 + 1.0) - 1e8)


def test_convolution_empty_output():
    dims = "[b, f, 0]x[o, i, 0]->[b, f, 0]"
    prog = conv_prog((1, 1, 2), (1, 1, 3), (1, 1, 0), "f32", "f32", dims, (1,), [(0, 0)],
                     (1,), (1,), (False,), 1, 1, False)
    assert prog.run(np.ones((1, 1, 2), np.float32), np.ones((1, 1, 3), np.float32))[0].shape \
        == (1, 1, 0)
