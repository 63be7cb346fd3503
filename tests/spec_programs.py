"""Hypothesis strategies for small random StableHLO programs (tests/test_spec_numerics.py).

Each draw is ``(text, args)``: one op (elementwise, reduce, reduce_window,
cumulative sum, dot_general, convolution) on small shapes, with element
types, dimension numbers and window attributes drawn within the spec's
constraints, and arguments that mix ordinary values of many magnitudes with
special ones (signed zeros, infinities, NaN).
"""

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

FLOATS = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
COMPLEX = {"complex<f32>": np.complex64, "complex<f64>": np.complex128}
ELEMENT_TYPES = {**FLOATS, **COMPLEX}

UNARY = ["abs", "negate", "sqrt", "rsqrt", "exponential", "log", "log_plus_one",
         "exponential_minus_one", "sine", "cosine", "tan", "tanh", "logistic", "cbrt",
         "floor", "ceil", "round_nearest_even", "round_nearest_afz", "sign"]
# Ops defined on floats only (the others take complex values too).
REAL_ONLY = {"floor", "ceil", "round_nearest_even", "round_nearest_afz", "cbrt",
             "maximum", "minimum", "remainder", "atan2"}
BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "remainder",
          "atan2", "power"]
REDUCERS = ["add", "multiply", "maximum", "minimum"]


def ttype(shape, et):
    return "tensor<" + "".join(f"{s}x" for s in shape) + et + ">"


@st.composite
def values(draw, shape, et, special=True):
    """A numpy array of ``shape`` and element type ``et``."""
    dtype = np.dtype(ELEMENT_TYPES[et])
    n = int(np.prod(shape, dtype=np.int64))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    scale = draw(st.sampled_from([1.0, 1e-3, 1e3, 1e30]))
    parts = 2 if dtype.kind == "c" else 1
    raw = rng.standard_normal((parts, n)) * scale * 10.0 ** rng.integers(-3, 4, (parts, n))
    if special and draw(st.booleans()):
        picks = rng.random((parts, n)) < 0.2
        raw[picks] = rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0],
                                size=int(picks.sum()))
    if dtype.kind == "c":
        real = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
        out = np.empty(n, dtype)
        out.real = raw[0].astype(real)
        out.imag = raw[1].astype(real)
    else:
        out = raw[0].astype(dtype)
    return out.reshape(shape)


def _func(params, results, body):
    sig = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(params))
    return (f"func.func @main({sig}) -> ({', '.join(results)}) {{\n{body}\n}}\n")


shapes = st.lists(st.integers(1, 5), min_size=0, max_size=3).map(tuple)


@st.composite
def elementwise(draw):
    et = draw(st.sampled_from(sorted(ELEMENT_TYPES)))
    shape = draw(shapes)
    t = ttype(shape, et)
    if draw(st.booleans()):
        ops = [o for o in UNARY if et in FLOATS or o not in REAL_ONLY]
        op = draw(st.sampled_from(ops))
        rt = t
        if op == "abs" and et in COMPLEX:
            rt = ttype(shape, et[len("complex<"):-1])
        body = f"  %0 = stablehlo.{op} %arg0 : ({t}) -> {rt}\n  return %0 : {rt}"
        return _func([t], [rt], body), [draw(values(shape, et))]
    ops = [o for o in BINARY if et in FLOATS or o not in REAL_ONLY]
    op = draw(st.sampled_from(ops))
    body = f"  %0 = stablehlo.{op} %arg0, %arg1 : {t}\n  return %0 : {t}"
    return _func([t, t], [t], body), [draw(values(shape, et)), draw(values(shape, et))]


def _region(kind, et):
    s = ttype((), et)
    return (f"({{\n  ^bb0(%a: {s}, %b: {s}):\n    %s = stablehlo.{kind} %a, %b : {s}\n"
            f"    stablehlo.return %s : {s}\n  }})")


def _init(kind, et, draw):
    choice = draw(st.sampled_from(["identity", "random"]))
    dtype = ELEMENT_TYPES[et]
    if choice == "identity":
        v = {"add": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}[kind]
        return np.array(v).astype(dtype)
    return draw(values((), et))


@st.composite
def reduce_program(draw):
    kind = draw(st.sampled_from(REDUCERS))
    ets = sorted(FLOATS) if kind in ("maximum", "minimum") else sorted(ELEMENT_TYPES)
    et = draw(st.sampled_from(ets))
    shape = draw(st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple))
    dims = sorted(draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
    out = tuple(s for d, s in enumerate(shape) if d not in dims)
    t, s, ot = ttype(shape, et), ttype((), et), ttype(out, et)
    body = (f"  %0 = \"stablehlo.reduce\"(%arg0, %arg1) {_region(kind, et)} "
            f"{{dimensions = array<i64: {', '.join(map(str, dims))}>}} : ({t}, {s}) -> {ot}\n"
            f"  return %0 : {ot}")
    return _func([t, s], [ot], body), [draw(values(shape, et)), _init(kind, et, draw)]


def _arr(v, et="i64"):
    return f"array<{et}: {', '.join(map(str, v))}>"


@st.composite
def reduce_window_program(draw):
    kind = draw(st.sampled_from(REDUCERS))
    ets = sorted(FLOATS) if kind in ("maximum", "minimum") else sorted(ELEMENT_TYPES)
    et = draw(st.sampled_from(ets))
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(rank))
    while True:
        wd = [draw(st.integers(1, 4)) for _ in range(rank)]
        ws = [draw(st.integers(1, 3)) for _ in range(rank)]
        bd = [draw(st.integers(1, 2)) for _ in range(rank)]
        wdil = [draw(st.integers(1, 2)) for _ in range(rank)]
        pad = [(draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(rank)]
        out = []
        for n, w, s, b, d, (lo, hi) in zip(shape, wd, ws, bd, wdil, pad):
            p = (n - 1) * b + 1 + lo + hi
            dw = (w - 1) * d + 1
            out.append(0 if dw > p else (p - dw) // s + 1)
        if all(o > 0 for o in out):
            break
    t, s, ot = ttype(shape, et), ttype((), et), ttype(out, et)
    padding = "[" + ", ".join(f"[{lo}, {hi}]" for lo, hi in pad) + "]"
    attrs = (f"window_dimensions = {_arr(wd)}, window_strides = {_arr(ws)}, "
             f"base_dilations = {_arr(bd)}, window_dilations = {_arr(wdil)}, "
             f"padding = dense<{padding}> : tensor<{rank}x2xi64>")
    body = (f"  %0 = \"stablehlo.reduce_window\"(%arg0, %arg1) {_region(kind, et)} "
            f"{{{attrs}}} : ({t}, {s}) -> {ot}\n  return %0 : {ot}")
    return _func([t, s], [ot], body), [draw(values(shape, et)), _init(kind, et, draw)]


@st.composite
def cumulative_program(draw):
    """JAX's cumsum/cumprod lowering: a window spanning the axis."""
    kind = draw(st.sampled_from(["add", "multiply"]))
    et = draw(st.sampled_from(sorted(ELEMENT_TYPES)))
    shape = draw(st.lists(st.integers(1, 12), min_size=1, max_size=2).map(tuple))
    axis = draw(st.integers(0, len(shape) - 1))
    reverse = draw(st.booleans())
    n = shape[axis]
    wd = [n if d == axis else 1 for d in range(len(shape))]
    pad = [((0, n - 1) if reverse else (n - 1, 0)) if d == axis else (0, 0)
           for d in range(len(shape))]
    t, s = ttype(shape, et), ttype((), et)
    padding = "[" + ", ".join(f"[{lo}, {hi}]" for lo, hi in pad) + "]"
    attrs = f"window_dimensions = {_arr(wd)}, padding = dense<{padding}> : tensor<{len(shape)}x2xi64>"
    body = (f"  %0 = \"stablehlo.reduce_window\"(%arg0, %arg1) {_region(kind, et)} "
            f"{{{attrs}}} : ({t}, {s}) -> {t}\n  return %0 : {t}")
    init = np.array(0.0 if kind == "add" else 1.0).astype(ELEMENT_TYPES[et])
    return _func([t, s], [t], body), [draw(values(shape, et)), init]


@st.composite
def dot_general_program(draw):
    et = draw(st.sampled_from(sorted(ELEMENT_TYPES)))
    out_et = et
    if et in ("f16", "bf16") and draw(st.booleans()):
        out_et = "f32"
    nb, nc = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    lf, rf = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    bsz = [draw(st.integers(1, 3)) for _ in range(nb)]
    csz = [draw(st.integers(1, 6)) for _ in range(nc)]
    lfs = [draw(st.integers(1, 4)) for _ in range(lf)]
    rfs = [draw(st.integers(1, 4)) for _ in range(rf)]
    lperm = draw(st.permutations(range(nb + nc + lf)))
    rperm = draw(st.permutations(range(nb + nc + rf)))
    # Logical dims (batch..., contract..., free...) placed by the permutations.
    lsizes = bsz + csz + lfs
    rsizes = bsz + csz + rfs
    lshape = [0] * len(lsizes)
    for logical, pos in enumerate(lperm):
        lshape[pos] = lsizes[logical]
    rshape = [0] * len(rsizes)
    for logical, pos in enumerate(rperm):
        rshape[pos] = rsizes[logical]
    lb = [lperm[i] for i in range(nb)]
    rb = [rperm[i] for i in range(nb)]
    lc = [lperm[nb + i] for i in range(nc)]
    rc = [rperm[nb + i] for i in range(nc)]
    # Free dims appear in the result in increasing operand-dim order.
    lfree = sorted(lperm[nb + nc + i] for i in range(lf))
    rfree = sorted(rperm[nb + nc + i] for i in range(rf))
    out = bsz + [lshape[d] for d in lfree] + [rshape[d] for d in rfree]
    lt, rt, ot = ttype(lshape, et), ttype(rshape, et), ttype(out, out_et)
    dn = (f"#stablehlo.dot<lhs_batching_dimensions = {lb}, rhs_batching_dimensions = {rb}, "
          f"lhs_contracting_dimensions = {lc}, rhs_contracting_dimensions = {rc}>")
    body = (f"  %0 = \"stablehlo.dot_general\"(%arg0, %arg1) {{dot_dimension_numbers = {dn}}} "
            f": ({lt}, {rt}) -> {ot}\n  return %0 : {ot}")
    return _func([lt, rt], [ot], body), [draw(values(tuple(lshape), et)),
                                         draw(values(tuple(rshape), et))]


@st.composite
def convolution_program(draw):
    et = draw(st.sampled_from(sorted(ELEMENT_TYPES)))
    ns = draw(st.integers(1, 2))
    groups = draw(st.integers(1, 2))
    by_batch = groups > 1 and draw(st.booleans())
    cg = draw(st.integers(1, 3))
    og = draw(st.integers(1, 2))
    n = draw(st.integers(1, 2)) * (groups if by_batch else 1)
    c = cg * (1 if by_batch else groups)
    o = og * groups
    while True:
        spatial = [draw(st.integers(1, 6)) for _ in range(ns)]
        ksz = [draw(st.integers(1, 3)) for _ in range(ns)]
        strides = [draw(st.integers(1, 2)) for _ in range(ns)]
        ldil = [draw(st.integers(1, 2)) for _ in range(ns)]
        rdil = [draw(st.integers(1, 2)) for _ in range(ns)]
        pad = [(draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) for _ in range(ns)]
        rev = [draw(st.booleans()) for _ in range(ns)]
        out_sp = []
        for s, k, st_, ld, rd, (lo, hi) in zip(spatial, ksz, strides, ldil, rdil, pad):
            p = (s - 1) * ld + 1 + lo + hi
            dw = (k - 1) * rd + 1
            out_sp.append(0 if p <= 0 or dw > p else (p - dw) // st_ + 1)
        if all(v > 0 for v in out_sp):
            break
    channels_first = draw(st.booleans())
    sp = ", ".join(str(i) for i in range(ns))
    if channels_first:
        lhs_shape, lay = [n, c] + spatial, f"[b, f, {sp}]"
        out_shape, olay = [n // (groups if by_batch else 1), o] + out_sp, f"[b, f, {sp}]"
    else:
        lhs_shape, lay = [n] + spatial + [c], f"[b, {sp}, f]"
        out_shape, olay = [n // (groups if by_batch else 1)] + out_sp + [o], f"[b, {sp}, f]"
    k_shape, klay = ksz + [cg, o], f"[{sp}, i, o]"
    lt, kt, ot = ttype(lhs_shape, et), ttype(k_shape, et), ttype(out_shape, et)
    padding = "[" + ", ".join(f"[{lo}, {hi}]" for lo, hi in pad) + "]"
    revs = ", ".join("true" if r else "false" for r in rev)
    attrs = (f"batch_group_count = {groups if by_batch else 1} : i64, "
             f"feature_group_count = {1 if by_batch else groups} : i64, "
             f"dimension_numbers = #stablehlo.conv<{lay}x{klay}->{olay}>, "
             f"lhs_dilation = {_arr(ldil)}, rhs_dilation = {_arr(rdil)}, "
             f"window_strides = {_arr(strides)}, window_reversal = array<i1: {revs}>, "
             f"padding = dense<{padding}> : tensor<{ns}x2xi64>")
    body = (f"  %0 = \"stablehlo.convolution\"(%arg0, %arg1) {{{attrs}}} : ({lt}, {kt}) -> {ot}\n"
            f"  return %0 : {ot}")
    return _func([lt, kt], [ot], body), [draw(values(tuple(lhs_shape), et)),
                                         draw(values(tuple(k_shape), et))]


@st.composite
def triangular_solve_program(draw):
    et = draw(st.sampled_from(sorted(ELEMENT_TYPES)))
    n, k = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    left, lower, unit = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    # ADJOINT only on complex: the C++ interpreter crashes conjugating a real
    # operand (docs/conformance.md).
    trans = draw(st.sampled_from(["NO_TRANSPOSE", "TRANSPOSE"] +
                                 (["ADJOINT"] if et in COMPLEX else [])))
    # A batch only with a unit diagonal: the C++ interpreter aborts on a
    # batched non-unit one (docs/conformance.md).
    batch = [2] if unit and draw(st.booleans()) else []
    ashape = batch + [n, n]
    bshape = batch + ([n, k] if left else [k, n])
    at, bt = ttype(ashape, et), ttype(bshape, et)
    attrs = (f"left_side = {str(left).lower()}, lower = {str(lower).lower()}, "
             f"unit_diagonal = {str(unit).lower()}, transpose_a = #stablehlo<transpose {trans}>")
    body = (f"  %0 = \"stablehlo.triangular_solve\"(%arg0, %arg1) {{{attrs}}} : ({at}, {bt}) -> {bt}\n"
            f"  return %0 : {bt}")
    return _func([at, bt], [bt], body), [draw(values(tuple(ashape), et)),
                                         draw(values(tuple(bshape), et))]


@st.composite
def scatter_program(draw):
    """scatter with an add/multiply body into a vector, duplicate indices
    included (the updates then fold in update order)."""
    kind = draw(st.sampled_from(["add", "multiply"]))
    et = draw(st.sampled_from(sorted(ELEMENT_TYPES)))
    n, k = draw(st.integers(1, 6)), draw(st.integers(1, 10))
    idx = np.array([[draw(st.integers(0, n - 1))] for _ in range(k)], np.int32)
    t, it, ut = ttype((n,), et), ttype((k, 1), "i32"), ttype((k,), et)
    dn = ("#stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], "
          "index_vector_dim = 1>")
    body = (f"  %0 = \"stablehlo.scatter\"(%arg0, %arg1, %arg2) {_region(kind, et)} "
            f"{{scatter_dimension_numbers = {dn}}} : ({t}, {it}, {ut}) -> {t}\n  return %0 : {t}")
    return _func([t, it, ut], [t], body), [draw(values((n,), et)), idx, draw(values((k,), et))]


@st.composite
def select_and_scatter_program(draw):
    """select_and_scatter (select GE, scatter add) over 1-d or 2-d windows."""
    et = draw(st.sampled_from(sorted(FLOATS)))
    rank = draw(st.integers(1, 2))
    while True:
        shape = [draw(st.integers(1, 6)) for _ in range(rank)]
        wd = [draw(st.integers(1, 3)) for _ in range(rank)]
        ws = [draw(st.integers(1, 3)) for _ in range(rank)]
        pad = [(draw(st.integers(0, 1)), draw(st.integers(0, 1))) for _ in range(rank)]
        out = [0 if w > n + lo + hi else (n + lo + hi - w) // s + 1
               for n, w, s, (lo, hi) in zip(shape, wd, ws, pad)]
        if all(o > 0 for o in out):
            break
    t, st_, s = ttype(shape, et), ttype(out, et), ttype((), et)
    b = ttype((), "i1")
    padding = "[" + ", ".join(f"[{lo}, {hi}]" for lo, hi in pad) + "]"
    attrs = (f"window_dimensions = {_arr(wd)}, window_strides = {_arr(ws)}, "
             f"padding = dense<{padding}> : tensor<{rank}x2xi64>")
    body = (f"  %0 = \"stablehlo.select_and_scatter\"(%arg0, %arg1, %arg2) ({{\n"
            f"  ^bb0(%a: {s}, %b: {s}):\n"
            f"    %c = stablehlo.compare GE, %a, %b, FLOAT : ({s}, {s}) -> {b}\n"
            f"    stablehlo.return %c : {b}\n  }}, {{\n"
            f"  ^bb0(%a: {s}, %b: {s}):\n    %r = stablehlo.add %a, %b : {s}\n"
            f"    stablehlo.return %r : {s}\n  }}) {{{attrs}}} : ({t}, {st_}, {s}) -> {t}\n"
            f"  return %0 : {t}")
    init = np.array(0.0).astype(ELEMENT_TYPES[et])
    return _func([t, st_, s], [t], body), [draw(values(tuple(shape), et, special=False)),
                                           draw(values(tuple(out), et)), init]


@st.composite
def fft_program(draw):
    """FFT, IFFT (complex), RFFT (real) and IRFFT (complex -> real, even
    last length: docs/conformance.md) over 1 to 3 trailing dims."""
    fft_type = draw(st.sampled_from(["FFT", "IFFT", "RFFT", "IRFFT"]))
    # float64 only: the C++ interpreter aborts on every float32 fft
    # (docs/conformance.md).
    rank = draw(st.integers(1, 3))
    lengths = [draw(st.integers(1, 9)) for _ in range(rank)]
    if fft_type == "IRFFT":
        lengths[-1] = 2 * draw(st.integers(1, 4))
    batch = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 1)))]
    half = lengths[:-1] + [lengths[-1] // 2 + 1]
    shape = batch + (half if fft_type == "IRFFT" else lengths)
    out = batch + (half if fft_type == "RFFT" else lengths)
    et = "f64" if fft_type == "RFFT" else "complex<f64>"
    out_et = "f64" if fft_type == "IRFFT" else "complex<f64>"
    t, ot = ttype(shape, et), ttype(out, out_et)
    body = (f"  %0 = stablehlo.fft %arg0, type = {fft_type}, length = {lengths} : ({t}) -> {ot}\n"
            f"  return %0 : {ot}")
    return _func([t], [ot], body), [draw(values(tuple(shape), et))]


programs = st.one_of(elementwise(), reduce_program(), reduce_window_program(),
                     cumulative_program(), dot_general_program(), convolution_program(),
                     triangular_solve_program(), scatter_program(),
                     select_and_scatter_program(), fft_program())
