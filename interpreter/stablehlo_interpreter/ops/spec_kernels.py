"""Spec-mode kernels (``numerics="spec"``): the C++ reference interpreter's order.

stablehlo/reference/Ops.cpp evaluates every op in its element type, one
element at a time. Where the result depends on the order of float
operations, these kernels reproduce its order, bit for bit, with whole-array
numpy steps (never a Python loop over elements). Where the C module
``stablehlo_interpreter._libm_loops`` is built (``C_LOOPS``), float32,
float64, float16 and bfloat16 folds and contractions (complex ones too), complex division and the C library's float64
functions run as its C loops instead: the same order, the same bits
(tests/test_spec_loops.py), without materialising the transposed rows or the
products:

* reduce: ``acc = init; acc = body(acc, x)`` for the input elements in
  row-major order of the input index space (Ops.cpp reduceOp), so each
  result is a left fold of its reduced elements in row-major order of the
  reduced dims. Rows of a ``(n + 1, kept)`` array (init first) are folded
  by ``ufunc.reduce(axis=0)``, which numpy evaluates row after row when the
  kept axis is the inner loop (tests/test_spec_numerics.py checks that it
  equals an explicit loop); one kept element is a 1-d ``ufunc.accumulate``.
* reduce_window: the input padded with the init value (padding and base
  dilation holes), then per window ``reduce`` of its elements in row-major
  window order (reduceWindowOp): one element-type step per window position
  over all windows at once; a forward prefix-scan window (JAX's cumsum) is
  one ``ufunc.accumulate`` of ``[init, x...]``.
* dot_general: ``acc = +0; acc = acc + convert(l) * convert(r)`` over the
  contracting index space in lexicographic order of the contracting dims as
  listed (dotGeneralOp): products of a block of contracting indices for all
  output elements at once, then folded into ``acc`` row by row.
* convolution: per output element, dot_general of its window of the lhs
  padded (and lhs-dilated) with zeros against the kernel, contracting the
  spatial dims (in ``input_spatial_dimensions`` order) then the input
  feature (convolutionOp); feature and batch groups are computed group by
  group and concatenated along the output feature.

Element-type arithmetic: float16/bfloat16/float8 through float32 and one
rounding (exact for + and *: a float32 sum or product of two such values
rounds correctly, the double rounding is innocuous), complex multiply by
the textbook formula with every product and sum rounded (Element.cpp
operator*), complex add componentwise.
"""

import math

import ml_dtypes
import numpy as np

from .. import dtypes
from . import c_complex
from .elementwise import _complex_multiply

try:
    from .. import _libm_loops as C_LOOPS
except ImportError:     # not built: the numpy path below gives the same bits, slower
    C_LOOPS = None

# Products of at most this many elements are formed per block of
# contracting indices (memory per step of a contraction).
_BLOCK_ELEMENTS = 1 << 21


def libm(fn, fallback):
    """``fn`` (a ``math`` function of one or two floats) over float64 arrays
    (broadcast together), as the C library computes it: the ``_libm_loops``
    C loop calls the same C library function as ``math`` and reproduces its
    special cases; without the module, ``math`` is called per element.
    Where ``math`` raises (overflow, a pole, a domain error: the C function
    returns inf or NaN there) the numpy ufunc ``fallback`` gives the IEEE
    special value, on both paths."""
    name = fn.__name__

    def one(*xs):
        try:
            return fn(*xs)
        except (ValueError, OverflowError):
            return float(fallback(*[np.float64(x) for x in xs]))
    ufunc = np.frompyfunc(one, fallback.nin, 1)

    def run(*xs):
        xs = np.broadcast_arrays(*[np.asarray(x, np.float64) for x in xs])
        shape = xs[0].shape
        if C_LOOPS is None:
            return np.asarray(ufunc(*xs), dtype=object).astype(np.float64).reshape(shape)
        flat = [np.ascontiguousarray(x).reshape(-1) for x in xs]
        out = np.empty(flat[0].size, np.float64)
        flag = np.empty(out.size, np.bool_)
        loop = C_LOOPS.unary if len(flat) == 1 else C_LOOPS.binary
        if loop(name, *flat, out, flag):
            out[flag] = fallback(*[f[flag] for f in flat])
        return out.reshape(shape)
    return run


def divdc3(a, b, c, d):
    """``(a + bi) / (c + di)`` over float64 arrays (broadcast together) as
    libgcc's ``__divdc3`` computes it (ops/c_complex.py ``divdc3``): the C
    loop, or the numpy steps without it. Returns ``(real, imag)``."""
    if C_LOOPS is None:
        return c_complex.divdc3(a, b, c, d)
    parts = np.broadcast_arrays(*[np.asarray(v, np.float64) for v in (a, b, c, d)])
    shape = parts[0].shape
    flat = [np.ascontiguousarray(v).reshape(-1) for v in parts]
    x, y = np.empty(flat[0].size, np.float64), np.empty(flat[0].size, np.float64)
    C_LOOPS.cdiv(*flat, x, y)
    return x.reshape(shape), y.reshape(shape)


def is_spec(op):
    """True when ``op`` compiles in spec mode (numerics.py)."""
    return getattr(op.module, "numerics", "accurate") == "spec"


def order_dependent(kind, dtype):
    """True when a fold of ``kind`` over ``dtype`` depends on the order:
    float and complex add/multiply (everything else is exact)."""
    dtype = np.dtype(dtype)
    return kind in ("add", "multiply") and (dtypes.is_float(dtype) or dtypes.is_complex(dtype))


def combiner(kind, dtype):
    """``f(a, b)``: one application of ``kind`` in element type ``dtype``."""
    dtype = np.dtype(dtype)
    if dtypes.is_complex(dtype):
        if kind == "multiply":
            return lambda a, b: _complex_multiply(np.asarray(a, dtype), np.asarray(b, dtype))
        return lambda a, b: np.add(a, b, dtype=dtype)
    uf = np.add if kind == "add" else np.multiply
    if dtype.itemsize >= 4:
        return lambda a, b: uf(a, b, dtype=dtype)
    f32 = np.dtype(np.float32)
    return lambda a, b: uf(np.asarray(a).astype(f32), np.asarray(b).astype(f32)).astype(dtype)


_BF16 = np.dtype(ml_dtypes.bfloat16)
# The real element types the C loops fold and contract in.
_C_REAL = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), _BF16)


def _c_buffer(x):
    """``x`` as the C loops take it: bfloat16 as its uint16 bits (numpy
    cannot export ml_dtypes' type through the buffer protocol)."""
    return x.view(np.uint16) if x.dtype == _BF16 else x


def _c_foldable(kind, dtype):
    """True when the C loops (``_libm_loops.fold``) fold ``kind`` over
    ``dtype``: float32/float64/float16/bfloat16 add and multiply, complex
    add (a fold of the real parts and one of the imaginary parts)."""
    if C_LOOPS is None:
        return False
    if dtype in _C_REAL:
        return True
    return kind == "add" and dtype in (np.complex64, np.complex128)


def _c_fold(kind, x, acc):
    """``acc`` (kept,) folded with the rows of ``x`` (n, kept; any strides)
    in place by the C loop (see ``_c_foldable``)."""
    if acc.dtype.kind == "c":
        re, im = np.ascontiguousarray(acc.real), np.ascontiguousarray(acc.imag)
        C_LOOPS.fold(kind, x.real, re)
        C_LOOPS.fold(kind, x.imag, im)
        acc.real, acc.imag = re, im
    else:
        C_LOOPS.fold(kind, _c_buffer(x), _c_buffer(acc))
    return acc


def fold_rows(kind, dtype, rows):
    """Left fold of the rows of the 2-d array ``rows`` (``rows[0]`` first),
    in element type ``dtype``: ``((rows[0] op rows[1]) op rows[2]) ...``."""
    dtype = np.dtype(dtype)
    n, kept = rows.shape
    if _c_foldable(kind, dtype) and rows.dtype == dtype:
        return _c_fold(kind, rows[1:], np.array(rows[0], dtype))
    if dtypes.is_complex(dtype) and kind == "multiply":
        f = combiner(kind, dtype)
        acc = rows[0]
        for k in range(1, n):
            acc = f(acc, rows[k])
        return np.asarray(acc, dtype)
    uf = np.add if kind == "add" else np.multiply
    narrow = dtypes.is_float(dtype) and dtype.itemsize < 4 and dtype != np.float16
    if narrow and n * kept >= 64:
        # ml_dtypes' own loops round every step too, but run ~10x slower
        # than a float32 step and its rounding.
        f = combiner(kind, dtype)
        acc = rows[0]
        if kept == 1 or n > 8 * kept:
            # Long and narrow: the element type's own accumulate.
            return uf.accumulate(np.ascontiguousarray(rows), axis=0)[-1]
        for k in range(1, n):
            acc = f(acc, rows[k])
        return np.asarray(acc, dtype)
    rows = np.ascontiguousarray(rows, dtype=dtype)
    if kept == 1:
        return uf.accumulate(rows[:, 0])[-1:].copy()
    # Kept axis innermost: numpy's reduce adds row after row (no pairwise
    # blocking, which it applies only along a contiguous reduced axis).
    r = uf.reduce(rows, axis=0)
    if kind == "add":
        # numpy starts a sum from +0, not from rows[0]: (+0 + -0) is +0, so a
        # column of -0 only sums to +0 (the fold gives -0; any other column
        # is the same either way).
        r = _negative_zero_columns(r, rows)
    return r


def _negative_zero_columns(r, rows):
    if r.dtype.kind == "c":
        r = r.copy()
        r.real = _negative_zero_columns(r.real.copy(), rows.real)
        r.imag = _negative_zero_columns(r.imag.copy(), rows.imag)
        return r
    zero = r == 0
    if not zero.any():
        return r
    neg = np.logical_and.reduce((rows == 0) & np.signbit(rows), axis=0)
    if neg.any():
        r = np.where(neg, -np.zeros((), r.dtype), r)
    return r


def reduce(kind, x, axes, init, dtype):
    """Ops.cpp reduceOp with a ``kind`` body: ``init`` then the elements of
    ``x`` reduced over ``axes``, row-major, in element type ``dtype``."""
    dtype = np.dtype(dtype)
    axes = sorted(a % x.ndim for a in axes) if x.ndim else []
    keep = [d for d in range(x.ndim) if d not in axes]
    out_shape = tuple(x.shape[d] for d in keep)
    n = 1
    for a in axes:
        n *= x.shape[a]
    kept = 1
    for s in out_shape:
        kept *= s
    if kept == 0:
        return np.empty(out_shape, dtype)
    if _c_foldable(kind, dtype):
        # The input as (n, kept) rows: a view where the layout allows.
        x = np.asarray(x)
        x2 = np.transpose(x.astype(dtype, copy=False), axes + keep).reshape(n, kept)
        acc = np.full(kept, np.asarray(init).astype(dtype), dtype)
        return _c_fold(kind, x2, acc).reshape(out_shape)
    rows = np.empty((n + 1, kept), dtype)
    rows[0] = np.asarray(init).astype(dtype)
    rows[1:] = np.transpose(x, axes + keep).reshape(n, kept)
    return np.asarray(fold_rows(kind, dtype, rows)).reshape(out_shape)


def reduce_windows(kind, padded, init, geo, dtype):
    """Ops.cpp reduceWindowOp with a ``kind`` body on the padded input:
    ``init`` then each window position in row-major order."""
    f = combiner(kind, dtype)
    acc = np.full(geo.out, init, dtype=dtype)
    for pos in np.ndindex(*geo.wdims):
        acc = f(acc, padded[geo.position_slices(pos)])
    return np.array(acc, dtype=dtype, order="C")   # (ascontiguousarray makes 0-d 1-d)


# A scan along the last axis at least this long accumulates along that axis
# in place: one sequential fold per row, without the two transposing copies
# (numpy's accumulate folds each row in the same order either way; (1000,
# 1000) f32 4.4 -> 2.7 ms). Shorter rows cost a loop call each: moved to
# axis 0, every step is one vector add across the rows.
_LAST_AXIS_SCAN = 8


def prefix_scan(kind, x, axis, init, dtype):
    """A forward prefix-scan window whose init is idempotent (``init op
    init == init``, so the padding's inits collapse into one): output ``i``
    is the left fold of ``[init, x[0], ..., x[i]]`` along ``axis``."""
    dtype = np.dtype(dtype)
    x = np.asarray(x, dtype)
    complex_product = dtypes.is_complex(dtype) and kind == "multiply"
    if axis % x.ndim == x.ndim - 1 and x.shape[-1] >= _LAST_AXIS_SCAN and not complex_product:
        rows = np.empty(x.shape[:-1] + (x.shape[-1] + 1,), dtype)
        rows[..., 0] = np.asarray(init).astype(dtype)
        rows[..., 1:] = x
        uf = np.add if kind == "add" else np.multiply
        return np.ascontiguousarray(uf.accumulate(rows, axis=-1)[..., 1:])
    x = np.moveaxis(x, axis, 0)
    n = x.shape[0]
    rows = np.empty((n + 1,) + x.shape[1:], dtype)
    rows[0] = np.asarray(init).astype(dtype)
    rows[1:] = x
    if complex_product:
        f = combiner(kind, dtype)
        for k in range(1, n + 1):
            rows[k] = f(rows[k - 1], rows[k])
        out = rows[1:]
    else:
        uf = np.add if kind == "add" else np.multiply
        out = uf.accumulate(rows, axis=0)[1:]
    return np.ascontiguousarray(np.moveaxis(out, 0, axis))


def contract(a, b, dtype, acc=None, inplace=False):
    """``acc + sum_k a[:, :, k] * b[:, k, :]`` folded in order k = 0, 1, ...
    in element type ``dtype`` (``a``: (B, M, K), ``b``: (B, K, N), both
    already ``dtype``); ``acc`` (B, M, N) starts at +0 when None. With
    ``inplace``, a C-contiguous ``acc`` of ``dtype`` may be updated and
    returned instead of a copy (the caller's own accumulator)."""
    dtype = np.dtype(dtype)
    B, M, K = a.shape
    N = b.shape[2]
    if C_LOOPS is not None and (dtype in _C_REAL or dtype.kind == "c") and a.dtype == dtype \
            and b.dtype == dtype:
        if acc is None:
            out = np.zeros((B, M, N), dtype)
        elif inplace and acc.dtype == dtype and acc.flags.c_contiguous and acc.flags.writeable:
            out = acc
        else:
            out = np.array(acc, dtype, order="C")
        C_LOOPS.contract(_c_buffer(a), _c_buffer(b), _c_buffer(out))
        return out
    mul = combiner("multiply", dtype)
    size = B * M * N
    at = np.moveaxis(a, 2, 0)[:, :, :, None]        # (K, B, M, 1)
    bt = np.moveaxis(b, 1, 0)[:, :, None, :]        # (K, B, 1, N)
    step = max(1, min(K, _BLOCK_ELEMENTS // max(1, size)))
    # Row 0: the running sum; rows 1..: one block of products, in k order.
    buf = np.empty((step + 1, size), dtype)
    if acc is None:
        buf[0] = 0
    else:
        buf[0] = acc.reshape(size)
    for k0 in range(0, K, step):
        k1 = min(K, k0 + step)
        buf[1:k1 - k0 + 1] = np.asarray(mul(at[k0:k1], bt[k0:k1])).reshape(k1 - k0, size)
        buf[0] = fold_rows("add", dtype, buf[:k1 - k0 + 1]).reshape(size)
    acc = buf[0]
    return acc.reshape(B, M, N)


def dot_general(lhs, rhs, lb, rb, lc, rc, out_dtype):
    """Ops.cpp dotGeneralOp: result dims (batch, lhs free, rhs free)."""
    out_dtype = np.dtype(out_dtype)
    lf = [d for d in range(lhs.ndim) if d not in lb and d not in lc]
    rf = [d for d in range(rhs.ndim) if d not in rb and d not in rc]
    bshape = tuple(lhs.shape[d] for d in lb)
    if bshape != tuple(rhs.shape[d] for d in rb):
        raise ValueError(f"batching dims differ: lhs {lhs.shape} rhs {rhs.shape}")
    cshape = tuple(lhs.shape[d] for d in lc)
    if cshape != tuple(rhs.shape[d] for d in rc):
        raise ValueError(f"contracting dims differ: lhs {lhs.shape} rhs {rhs.shape}")
    lfs = tuple(lhs.shape[d] for d in lf)
    rfs = tuple(rhs.shape[d] for d in rf)
    B, K = _prod(bshape), _prod(cshape)
    # No copy where the operands already are the result type: the C loop
    # takes any strides (reshape copies only where the dims do not merge).
    a = np.transpose(lhs, list(lb) + lf + list(lc)).astype(out_dtype, copy=False)
    b = np.transpose(rhs, list(rb) + list(rc) + rf).astype(out_dtype, copy=False)
    a, b = a.reshape(B, _prod(lfs), K), b.reshape(B, K, _prod(rfs))
    return contract(a, b, out_dtype).reshape(bshape + lfs + rfs)


def convolution(lhs, rhs, geometry, padding, out_dtype):
    """Ops.cpp convolutionOp (see the module docstring); ``geometry`` is
    ops/convolution.py's ConvGeometry of the op."""
    out_dtype = np.dtype(out_dtype)
    (ib, if_, isp, ki, ko, ksp, ob, of, osp, ns, strides, lhs_dil, rhs_dil, reversal,
     fg, bg) = geometry
    isp, ksp, osp = list(isp), list(ksp), list(osp)
    pad = np.zeros((ns, 2), np.int64) if padding is None else \
        np.asarray(padding, dtype=np.int64).reshape(ns, 2)
    # lhs as (N, spatial..., C), zero-padded and dilated; rhs as (K..., I, O).
    x = np.transpose(lhs, [ib] + isp + [if_]).astype(out_dtype)
    x = _pad_zeros(x, [0] + [int(p) for p in pad[:, 0]] + [0],
                   [0] + [int(p) for p in pad[:, 1]] + [0], [0] + [d - 1 for d in lhs_dil] + [0])
    w = np.transpose(rhs, ksp + [ki, ko]).astype(out_dtype)
    ksz = w.shape[:ns]
    n_batch, C = x.shape[0], x.shape[-1]
    O = w.shape[-1]
    G = max(fg, bg)
    out_sp = []
    for s in range(ns):
        p, k, d, st = x.shape[1 + s], ksz[s], rhs_dil[s], strides[s]
        dw = (k - 1) * d + 1 if k > 0 else 0
        out_sp.append(0 if (p == 0 or dw > p) else (p - dw) // st + 1)
    Og = O // G
    if fg > 1:
        Nb, Cg = n_batch, C // G
    else:
        Nb, Cg = n_batch // G, C
    M = Nb * _prod(out_sp)
    acc = np.zeros((G, M, Og), out_dtype)
    for kpos in np.ndindex(*ksz):
        sl = [slice(None)]
        for s in range(ns):
            k = ksz[s] - 1 - kpos[s] if reversal[s] else kpos[s]
            start = k * rhs_dil[s]
            sl.append(slice(start, start + (out_sp[s] - 1) * strides[s] + 1, strides[s])
                      if out_sp[s] else slice(0, 0))
        sl.append(slice(None))
        win = x[tuple(sl)]                                  # (N, out..., C)
        if fg > 1:
            a = np.moveaxis(win.reshape(M, G, Cg), 1, 0)     # (G, M, Cg)
        else:
            a = win.reshape(G, M, Cg)
        b = np.moveaxis(w[kpos].reshape(Cg, G, Og), 1, 0)   # (G, Cg, Og)
        acc = contract(a, b, out_dtype, acc, inplace=True)
    # (G, Nb, out..., Og) -> (Nb, out..., G * Og): output feature g * Og + o.
    r = np.moveaxis(acc.reshape((G, Nb) + tuple(out_sp) + (Og,)), 0, -2)
    r = r.reshape((Nb,) + tuple(out_sp) + (G * Og,))
    perm = [0] * (ns + 2)
    perm[ob] = 0
    perm[of] = ns + 1
    for k, d in enumerate(osp):
        perm[d] = 1 + k
    return np.ascontiguousarray(np.transpose(r, perm))


def _rotators(n, dtype):
    """``rot[j, k] = complex(cos(p), sin(p))``, ``p = -2 * pi * j * k / n``
    evaluated left to right in double (Ops.cpp ``__fft_1d``), each part the
    C library's cos/sin (through ``math``) rounded to the element type."""
    part = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
    j = np.arange(n, dtype=np.float64)[:, None]
    k = np.arange(n, dtype=np.float64)[None, :]
    phase = (((-2.0 * np.pi) * j) * k) / float(n)
    cos, sin = libm(math.cos, np.cos)(phase), libm(math.sin, np.sin)(phase)
    out = np.empty((n, n), dtype)
    out.real = cos.astype(part)
    out.imag = sin.astype(part)
    return out


def dft(x, axis, dtype):
    """Ops.cpp ``__fft_1d`` along ``axis``: ``X[k] = +0 + x[0] * rot[0, k] +
    x[1] * rot[1, k] + ...`` in the element type (complex multiply by the
    textbook formula), all other elements at once."""
    dtype = np.dtype(dtype)
    x = np.moveaxis(np.asarray(x, dtype), axis, -1)
    n = x.shape[-1]
    lead = x.shape[:-1]
    if n == 0 or x.size == 0:
        return np.moveaxis(np.zeros(x.shape, dtype), -1, axis)
    a = x.reshape(1, -1, n)
    r = contract(a, _rotators(n, dtype)[None], dtype)
    return np.moveaxis(r.reshape(lead + (n,)), -1, axis)


def fft(x, fft_type, lengths, dtype):
    """Ops.cpp ``fftOp``: 1-d DFTs over the trailing ``len(lengths)`` dims in
    element type ``dtype`` (the result's), as the C++ interpreter composes
    them:

    * FFT: the last dim first;
    * RFFT: the last dim's full transform, its first n/2+1 coefficients
      kept, then the other dims, last first;
    * IFFT: the first dim first, each ``conj(dft(conj(x))) / complex(n, 0)``
      (complex division as :func:`divide`);
    * IRFFT (an even last length n only: for an odd one the C++ interpreter
      reads memory it never wrote, docs/conformance.md): ``conj(dft(conj(x)))``
      along the other dims, first first, with no division; then the last
      dim's spectrum rebuilt as ``x[0..m) ++ conj(reverse(x[1..m-1)))``
      (m = n/2+1), the real part of its ``dft(conj(.))``, divided by the
      product of the lengths."""
    dtype = np.dtype(dtype)
    dims = list(range(x.ndim - len(lengths), x.ndim))
    if fft_type == "IRFFT":
        return _irfft(x, dims, lengths[-1], dtype)
    r = np.asarray(x).astype(dtype)
    if fft_type == "IFFT":
        for d in dims:
            n = np.full(r.shape, complex(r.shape[d], 0.0), dtype)
            r = divide(np.conj(dft(np.conj(r), d, dtype)), n, dtype)
        return np.ascontiguousarray(r)
    if fft_type == "RFFT":
        last = dims.pop()
        r = dft(r, last, dtype)
        r = r[..., : r.shape[-1] // 2 + 1]
    for d in reversed(dims):
        r = dft(r, d, dtype)
    return np.ascontiguousarray(r)


def _irfft(x, dims, n, dtype):
    """fft's IRFFT (real result type ``dtype``, even ``n``): see there."""
    if n % 2:
        raise ValueError(f"spec IRFFT of odd length {n}")
    ctype = np.dtype(np.complex64 if dtype.itemsize <= 4 else np.complex128)
    r = np.asarray(x).astype(ctype)
    last = dims.pop()
    for d in dims:
        r = np.conj(dft(np.conj(r), d, ctype))
    m = n // 2 + 1
    full = np.concatenate([r[..., :m], np.conj(r[..., 1:m - 1][..., ::-1])], axis=-1)
    real = np.ascontiguousarray(dft(np.conj(full), last, ctype).real).astype(dtype)
    norm = _prod(full.shape[d] for d in dims + [last])
    return np.ascontiguousarray(divide(real, np.full(real.shape, norm, dtype), dtype))


def divide(a, b, dtype):
    """``a / b`` in element type ``dtype``; complex as the C++ interpreter
    divides (complex128 by libgcc's algorithm, rounded)."""
    dtype = np.dtype(dtype)
    if dtypes.is_complex(dtype):
        a, b = np.asarray(a, np.complex128), np.asarray(b, np.complex128)
        x, y = divdc3(a.real, a.imag, b.real, b.imag)
        out = np.empty(x.shape, np.complex128)
        out.real, out.imag = x, y
        return out.astype(dtype)
    if dtype.itemsize >= 4:
        return np.divide(a, b, dtype=dtype)
    f32 = np.dtype(np.float32)
    return np.divide(np.asarray(a).astype(f32), np.asarray(b).astype(f32)).astype(dtype)


def triangular_solve(a, b, left, lower, unit, trans, dtype):
    """Ops.cpp triangularSolveOp: substitution in the element type. Row
    ``i`` of the solution (in the order the triangle allows) is
    ``b[i] - a[i, j0] * x[j0] - a[i, j1] * x[j1] ...`` folded in the loop's
    order of ``j``, divided by ``a[i, i]`` unless the diagonal is unit; every
    column (and batch) at once."""
    dtype = np.dtype(dtype)
    a = np.asarray(a).astype(dtype)
    b = np.asarray(b).astype(dtype)
    if trans in ("TRANSPOSE", "ADJOINT"):
        a = np.swapaxes(a, -1, -2)
        lower = not lower
    if trans == "ADJOINT":
        a = np.conj(a)
    m = a if left else np.swapaxes(a, -1, -2)        # m[..., i, j]
    rhs = b if left else np.swapaxes(b, -1, -2)      # rhs[..., i, k]
    n = m.shape[-1]
    backward = left != lower
    order = range(n - 1, -1, -1) if backward else range(n)
    mul = combiner("multiply", dtype)
    x = np.zeros(rhs.shape, dtype)
    cols = rhs.shape[:-2] + rhs.shape[-1:]
    width = int(np.prod(cols, dtype=np.int64))
    for i in order:
        js = list(range(n - 1, i, -1)) if backward else list(range(i))
        rows = np.empty((len(js) + 1, width), dtype)
        rows[0] = rhs[..., i, :].reshape(width)
        for r, j in enumerate(js, 1):
            # x - p equals x + (-p) exactly: the fold subtracts in order.
            rows[r] = -np.asarray(mul(m[..., i, j, None], x[..., j, :])).reshape(width)
        xi = fold_rows("add", dtype, rows).reshape(cols)
        if not unit:
            xi = divide(xi, m[..., i, i, None], dtype)
        x[..., i, :] = xi
    return x if left else np.swapaxes(x, -1, -2).copy()


def _pad_zeros(x, lo, hi, interior):
    """spec pad with zeros: ``lo``/``hi`` around (negative crops), ``interior``
    between elements."""
    shape, place = [], []
    for n, lo_, hi_, i in zip(x.shape, lo, hi, interior):
        dil = (n - 1) * (i + 1) + 1 if n > 0 else 0
        shape.append(max(lo_, 0) + dil + max(hi_, 0))
        place.append(slice(max(lo_, 0), max(lo_, 0) + dil, i + 1))
    out = np.zeros(shape, dtype=x.dtype)
    out[tuple(place)] = x
    crop = tuple(slice(max(-lo_, 0), max(s - max(-hi_, 0), max(-lo_, 0)))
                 for s, lo_, hi_ in zip(shape, lo, hi))
    return out[crop]


def _prod(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n
