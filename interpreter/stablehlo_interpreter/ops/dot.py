"""dot_general (spec: dot_general) and the legacy stablehlo.dot.

Both operands are transposed into (batch, free, contracting) order, reshaped
to 3-d and multiplied with ``np.matmul`` so floats go through BLAS; the
result is reshaped to ``batch + lhs_free + rhs_free``. Permutations are fixed
at compile time; sizes come from the runtime shapes (dynamic shapes work).

Element types: operands are converted to the result element type first (the
spec's reading of mixed-type dot_general). Then

* f32/f64: native matmul; complex: the sequential sum of complex products
  XLA computes (BLAS beyond a contracting size of 256);
* f16, bf16 and the 8/6/4-bit floats: matmul in f32, one rounding at the end
  (what XLA does, within the suite's ULP tolerances);
* integers: exact modular arithmetic. i8/i16/ui8/ui16 (and sub-byte ints) go
  through float64 matmul, exact as long as the sums stay below 2**53
  (checked from the contracting size), else int64; wider types use int64 /
  uint64 matmul, whose wrap-around agrees with the result type's modulo;
* i1: `or` of `and`s, i.e. a count > 0.

precision_config and algorithm are hints the spec lets implementations ignore.
"""

from math import prod as _prod

import numpy as np

from .. import blas as _blas
from .. import dtypes
from ..registry import Unsupported, kernel
from . import spec_kernels as _spec


def _matmul_plan(dtype):
    """(compute dtype, finish(result) -> dtype array) for a result dtype."""
    dtype = np.dtype(dtype)
    if dtypes.is_bool(dtype):
        return np.dtype(np.float64), lambda r: r > 0
    if dtypes.is_integer(dtype):
        bits = dtypes.bit_width(dtype)
        if bits <= 16:
            return "small-int", None
        wide = np.dtype(np.uint64 if dtypes.is_unsigned(dtype) else np.int64)
        return wide, (lambda r: r if r.dtype == dtype else r.astype(dtype))
    if dtypes.is_complex(dtype) or dtype in (np.float32, np.float64):
        return dtype, None
    if dtypes.is_float(dtype):
        return np.dtype(np.float32), lambda r: r.astype(dtype)
    raise Unsupported(f"dot_general on element type {dtype}")


def make_dot_general(lb, rb, lc, rc, lhs_rank, rhs_rank, out_dtype):
    """The runtime function computing dot_general for fixed dimension numbers."""
    lf = [d for d in range(lhs_rank) if d not in lb and d not in lc]
    rf = [d for d in range(rhs_rank) if d not in rb and d not in rc]
    lperm = list(lb) + lf + list(lc)
    rperm = list(rb) + list(rc) + rf
    l_ident = lperm == list(range(lhs_rank))
    r_ident = rperm == list(range(rhs_rank))
    compute, finish = _matmul_plan(out_dtype)
    out_dtype = np.dtype(out_dtype)
    # Real float results computed in their own type: no conversion, no
    # finishing step, BLAS whatever the contracting size.
    native = isinstance(compute, np.dtype) and compute == out_dtype and finish is None \
        and out_dtype.kind == "f"
    # Matrix or vector times matrix, matrix times vector, in numpy's own
    # layout (no batch, lhs contracting its last dim, rhs its first):
    # np.matmul of the operands as they are makes the BLAS call it makes on
    # their (1, M, K) x (1, K, N) views (its kernel picks gemv/gemm/dot
    # from the core sizes and strides, which C-contiguous operands share
    # with those views), without the three reshapes.
    plain = native and not lb and lhs_rank in (1, 2) and rhs_rank in (1, 2) \
        and lhs_rank + rhs_rank > 2 and tuple(lc) == (lhs_rank - 1,) and tuple(rc) == (0,)

    # The shape arithmetic of the operand shapes seen (one pair, unless
    # shapes are dynamic): a small product in a loop body (an RNN cell's
    # matrix-vector product) pays the Python of it once.
    geometry = {}

    def shapes_of(ls, rs):
        bshape = tuple(ls[d] for d in lb)
        if bshape != tuple(rs[d] for d in rb):
            raise ValueError(f"batching dims differ: lhs {ls} rhs {rs}")
        cshape = tuple(ls[d] for d in lc)
        if cshape != tuple(rs[d] for d in rc):
            raise ValueError(f"contracting dims differ: lhs {ls} rhs {rs}")
        lfs = tuple(ls[d] for d in lf)
        rfs = tuple(rs[d] for d in rf)
        if len(geometry) >= 64:
            geometry.clear()
        B, K, M, N = _prod(bshape), _prod(cshape), _prod(lfs), _prod(rfs)
        macs = B * M * N * K
        g = geometry[ls, rs] = (B, K, M, N, bshape + lfs + rfs, (B, M, K), (B, K, N), macs)
        return g

    def run(lhs, rhs):
        g = geometry.get((lhs.shape, rhs.shape))
        if g is None:
            g = shapes_of(lhs.shape, rhs.shape)
        if native and lhs.dtype is out_dtype and rhs.dtype is out_dtype:
            # f32 x f32 -> f32 (f64 likewise): the general path below with
            # its tests decided once per shape pair; what remains is the
            # matmul (an RNN cell's 256x256 matrix-vector product per loop
            # step: 3.9 -> 2.9 us).
            if plain and lhs.flags.c_contiguous and rhs.flags.c_contiguous:
                if g[7] < _blas.SMALL_GEMM_MACS:   # (tests change it at run time)
                    return _blas.shared_product(lhs, rhs, g[7])
                return np.matmul(lhs, rhs)
            a = (lhs if l_ident else np.transpose(lhs, lperm)).reshape(g[5])
            b = (rhs if r_ident else np.transpose(rhs, rperm)).reshape(g[6])
            if g[7] < _blas.SMALL_GEMM_MACS:
                return _blas.shared_product(a, b, g[7]).reshape(g[4])
            return np.matmul(a, b).reshape(g[4])
        B, K, M, N, out_shape = g[:5]
        a = lhs if l_ident else np.transpose(lhs, lperm)
        b = rhs if r_ident else np.transpose(rhs, rperm)
        # Convert to the result type first (exact when types agree).
        if a.dtype != out_dtype:
            a = a.astype(out_dtype)
        if b.dtype != out_dtype:
            b = b.astype(out_dtype)
        cd, fin = compute, finish
        if cd.__class__ is str:   # "small-int" (a dtype == str comparison costs 1 us)
            # |products| < 2**32 for <= 16-bit ints: float64 sums are exact
            # while K * 2**32 < 2**53.
            if K < (1 << 20):
                cd = np.dtype(np.float64)
                fin = _wrap_from_float(out_dtype)
            else:
                cd = np.dtype(np.uint64 if dtypes.is_unsigned(out_dtype) else np.int64)
                fin = lambda r: r.astype(out_dtype)  # noqa: E731
        if a.dtype != cd:
            a = a.astype(cd)
        if b.dtype != cd:
            b = b.astype(cd)
        a = a.reshape(B, M, K)
        b = b.reshape(B, K, N)
        if cd.kind == "c" and K <= _COMPLEX_SEQ_MAX_K:
            r = _complex_sequential(a, b)
        elif cd.kind in "fc" and g[7] < _blas.SMALL_GEMM_MACS:
            r = _blas.shared_product(a, b, g[7])  # one BLAS thread per block (blas.py)
        else:
            r = np.matmul(a, b)
        if fin is not None:
            r = fin(r)
        return r.reshape(out_shape)
    return run


# XLA CPU accumulates complex dots one complex product at a time, in order;
# BLAS (zgemm) rounds differently and, under cancellation, the imaginary or
# real part can be off by many ULPs from XLA's result. Up to this contracting
# size the sequential order is reproduced (K vectorized steps).
_COMPLEX_SEQ_MAX_K = 256


def _complex_sequential(a, b):
    """(B, M, K) x (B, K, N) complex matmul, summing k = 0, 1, ... in order."""
    B, M, K = a.shape
    N = b.shape[2]
    acc = np.zeros((B, M, N), dtype=a.dtype)
    for k in range(K):
        acc += a[:, :, k, None] * b[:, None, k, :]
    return acc


def _wrap_from_float(dtype):
    """Exact integer float64 values -> ``dtype`` with modular wrap-around."""
    def fin(r):
        return r.astype(np.int64).astype(dtype)
    return fin


@kernel("stablehlo.dot_general", traits=("summing",))
def dot_general(op):
    """spec: dot_general. Batching/contracting dims may be in any position."""
    dn = op.attrs["dot_dimension_numbers"]
    if not isinstance(dn, dict):
        raise Unsupported(f"undecodable dot_dimension_numbers {dn!r}")
    lt, rt = op.operand_types
    if any(t.quant is not None for t in (lt, rt, op.result_types[0])):
        raise Unsupported("dot_general on quantized element types")
    return _make(op, dn["lhs_batching_dimensions"], dn["rhs_batching_dimensions"],
                 dn["lhs_contracting_dimensions"], dn["rhs_contracting_dimensions"], lt.rank,
                 rt.rank, op.result_types[0].dtype)


def _make(op, lb, rb, lc, rc, lhs_rank, rhs_rank, out_dtype):
    """The kernel of one dot: spec mode's sequential contraction for float
    and complex results (integer sums wrap: any order is exact)."""
    out = np.dtype(out_dtype)
    if _spec.is_spec(op) and (dtypes.is_float(out) or dtypes.is_complex(out)):
        lb, rb, lc, rc = (tuple(int(d) for d in v) for v in (lb, rb, lc, rc))
        return lambda lhs, rhs: _spec.dot_general(lhs, rhs, lb, rb, lc, rc, out)
    return make_dot_general(lb, rb, lc, rc, lhs_rank, rhs_rank, out_dtype)


@kernel("stablehlo.dot", traits=("summing",))
def dot(op):
    """stablehlo.dot (legacy; the spec defines it through dot_general):
    contracts the last lhs dim with the first rhs dim, ranks 1 or 2."""
    lt, rt = op.operand_types
    if lt.rank not in (1, 2) or rt.rank not in (1, 2):
        raise Unsupported(f"dot with operand ranks {lt.rank}, {rt.rank}")
    if any(t.quant is not None for t in (lt, rt, op.result_types[0])):
        raise Unsupported("dot on quantized element types")
    return _make(op, (), (), (lt.rank - 1,), (0,), lt.rank, rt.rank, op.result_types[0].dtype)
