"""Linear algebra ops: cholesky and triangular_solve.

Both run in float64/complex128 and round once to the result type.
"""

import functools

import numpy as np

from .. import dtypes
from ..blas import SMALL_GEMM_MACS, small_lapack
from ..registry import Unsupported, kernel
from . import spec_kernels as _spec


def compute_dtype(dtype):
    """float64 or complex128: the precision the kernels compute in."""
    return np.complex128 if dtypes.is_complex(dtype) else np.float64


def matrix_call_types(op, num_results=None, why=""):
    """(compute dtype, result dtypes) of a linear-algebra custom call
    (linalg_custom_calls.py) whose first operand is a float
    or complex matrix: checks that, and the number of results when
    ``num_results`` is given (``why``: what decides it, for the error)."""
    t = op.operand_types[0]
    if not (dtypes.is_float(t.dtype) or dtypes.is_complex(t.dtype)):
        raise Unsupported(f"@{op.attrs.get('call_target_name')} of {t.element_type}")
    if num_results is not None and op.num_results != num_results:
        raise Unsupported(f"@{op.attrs.get('call_target_name')} with {op.num_results} "
                          f"result(s), not {num_results}{why}")
    return compute_dtype(t.dtype), [r.dtype for r in op.result_types]


# Up to this many matrices, one LAPACK ?potrf call each (single-threaded
# below blas.SMALL_GEMM_MACS); more go to numpy's batched gufunc, whose fixed
# cost per call (copies into Fortran order, its own threading) is ~2x a
# potrf of 256x256 but is shared by the whole batch.
_POTRF_MAX_BATCH = 16


def _cholesky_lower(h):
    """Lower Cholesky factors of the Hermitian batch ``h`` (only its lower
    triangle is read; ``h`` is the caller's scratch and may be overwritten);
    NaN where not positive definite (LAPACK's info > 0)."""
    batch = h.shape[:-2]
    n = h.shape[-1]
    if int(np.prod(batch, dtype=np.int64)) <= _POTRF_MAX_BATCH:
        from scipy.linalg import lapack
        potrf, = lapack.get_lapack_funcs(("potrf",), (h,))
        call = small_lapack if n ** 3 < SMALL_GEMM_MACS else (
            lambda f, *args, **kw: f(*args, **kw))
        if not np.iscomplexobj(h) and h.flags.c_contiguous:
            # LAPACK is column-major: the lower triangle of a row-major
            # matrix is the upper triangle of its transpose, a column-major
            # view that potrf factors in place (U = L^T, whose transpose is
            # row-major L again). Lower on a row-major matrix made f2py copy
            # it in and numpy copy the factor out: 256x256, 0.85 -> 0.32 ms.
            if not batch:
                u, info = call(potrf, h.T, lower=0, clean=1, overwrite_a=1)
                return u.T if info == 0 else np.full(h.shape, np.nan, h.dtype)
            out = np.empty(h.shape, dtype=h.dtype)
            for idx in np.ndindex(*batch):
                u, info = call(potrf, h[idx].T, lower=0, clean=1, overwrite_a=1)
                out[idx] = u.T if info == 0 else np.nan
            return out
        out = np.empty(h.shape, dtype=h.dtype)
        for idx in np.ndindex(*batch):
            c, info = call(potrf, h[idx], lower=1, clean=1)
            out[idx] = c if info == 0 else np.nan
        return out
    h = np.tril(h) + np.conj(np.swapaxes(np.tril(h, -1), -1, -2))
    try:
        return np.linalg.cholesky(h)
    except np.linalg.LinAlgError:
        pass
    flat = h.reshape((-1,) + h.shape[-2:])
    out = np.empty_like(flat)
    for i, m in enumerate(flat):
        try:
            out[i] = np.linalg.cholesky(m)
        except np.linalg.LinAlgError:
            out[i] = np.nan
    return out.reshape(h.shape)


@kernel("stablehlo.cholesky")
def cholesky(op):
    """spec: cholesky (docs/spec.md#cholesky).

    Reads only the triangle `lower` names (the input is taken as Hermitian;
    for complex input the imaginary part of the diagonal is ignored, as
    LAPACK's ?potrf does). The other triangle of the result,
    implementation-defined by the spec, is zero, and a matrix that is not
    positive definite gives all NaNs: both as XLA CPU does.
    """
    lower = bool(op.attrs.get("lower", False))
    out_dtype = op.result_types[0].dtype
    cdt = compute_dtype(out_dtype)

    def run(a):
        if a.size == 0:
            return np.zeros(a.shape, dtype=out_dtype)
        a = a.astype(cdt)
        if dtypes.is_complex(cdt):
            a = a.copy()
            idx = np.arange(a.shape[-1])
            a[..., idx, idx] = a[..., idx, idx].real
        if lower:
            return _cholesky_lower(a).astype(out_dtype, order="C")
        # The upper factor U = L^H of the Hermitian matrix whose lower
        # triangle is the conjugate transpose of a's upper one.
        ll = _cholesky_lower(np.conj(np.swapaxes(a, -1, -2), order="C"))
        return np.ascontiguousarray(np.conj(np.swapaxes(ll, -1, -2))).astype(out_dtype)
    return run


def _substitute(m, b, lower, unit):
    """Solve m @ x = b for triangular m (batched), by forward/back substitution.

    Substitution (rather than a general solver) gives IEEE inf/NaN results for
    singular matrices instead of raising, like XLA.
    """
    n = m.shape[-1]
    x = np.zeros(np.broadcast_shapes(b.shape), dtype=np.result_type(m, b))
    order = range(n) if lower else range(n - 1, -1, -1)
    for i in order:
        rhs = b[..., i, :]
        if lower and i > 0:
            rhs = rhs - (m[..., i:i + 1, :i] @ x[..., :i, :])[..., 0, :]
        elif not lower and i < n - 1:
            rhs = rhs - (m[..., i:i + 1, i + 1:] @ x[..., i + 1:, :])[..., 0, :]
        if not unit:
            rhs = rhs / m[..., i, i][..., None]
        x[..., i, :] = rhs
    return x


_TRANS = {"NO_TRANSPOSE": 0, "TRANSPOSE": 1, "ADJOINT": 2}

_TRSM = {}   # (dtype, single-threaded) -> scipy's ?trsm, looked up once


def _trsm_fn(dtype, small):
    fn = _TRSM.get((dtype, small))
    if fn is None:
        from scipy.linalg import blas
        fn, = blas.get_blas_funcs(("trsm",), (np.empty((1, 1), dtype),))
        if small:
            # One BLAS thread below SMALL_GEMM_MACS (see blas.py: on a busy
            # 2-core machine a threaded 64x64 trsm waits ~20 ms for its
            # second thread).
            fn = functools.partial(small_lapack, fn)
        _TRSM[(dtype, small)] = fn
    return fn


def _trsm_call(dtype, k, xshape, left, lower, unit, trans):
    """(?trsm, its keyword arguments) solving in place in a C-contiguous
    ``x`` of ``xshape`` (see :func:`_trsm`) against a k x k matrix."""
    t = _TRANS[trans]
    if t == 2 and np.dtype(dtype).kind != "c":
        t = 1
    fn = _trsm_fn(np.dtype(dtype), k * k * max(xshape[-2:]) < SMALL_GEMM_MACS)
    return fn, {"side": 1 if left else 0, "lower": 0 if lower else 1, "trans_a": t,
                "diag": int(unit), "overwrite_b": 1}


def _solve_in(fn, kw, a, x):
    r = fn(1.0, a.T, x.T, **kw)
    if r.ctypes.data != x.ctypes.data:   # (f2py solved a copy)
        x[...] = r.T
    return x


def _trsm(a, x, left, lower, unit, trans):
    """Triangular solve by one BLAS ?trsm per matrix (scipy's BLAS), in
    place: ``a`` (batch + (k, k)) and ``x`` (batch + (m, n), holding b; the
    caller's own copy) are C-contiguous float64/complex128; returns ``x``.

    BLAS is column-major, and a row-major matrix is the column-major
    transpose: op(A) X = B is X^T op(A)^T = B^T, a solve from the other
    side with the transposed triangle, which trsm reads from the same
    memory (``a.T``, ``x.T``: no copy into Fortran order and back). The
    right-side solve is also OpenBLAS's faster one (64x64 with 64
    right-hand sides: 18 us against 30 us for the left side)."""
    fn, kw = _trsm_call(x.dtype, a.shape[-1], x.shape, left, lower, unit, trans)
    if x.ndim == 2:
        return _solve_in(fn, kw, a, x)
    a = np.broadcast_to(a, x.shape[:-2] + a.shape[-2:])
    for idx in np.ndindex(*x.shape[:-2]):
        xi = x[idx]
        r = fn(1.0, a[idx].T, xi.T, **kw)
        if r.ctypes.data != xi.ctypes.data:
            xi[...] = r.T
    return x


@kernel("stablehlo.triangular_solve")
def triangular_solve(op):
    """spec: triangular_solve (docs/spec.md#triangular_solve).

    left_side: solves op(a) @ x = b, else x @ op(a) = b, where op is
    identity, transpose or adjoint (transpose_a), a is the lower or upper
    triangle of `a` (lower) with an implicit unit diagonal when
    unit_diagonal. The other triangle of `a` is ignored.
    """
    left = bool(op.attrs.get("left_side", False))
    lower = bool(op.attrs.get("lower", False))
    unit = bool(op.attrs.get("unit_diagonal", False))
    trans = op.attrs.get("transpose_a", "NO_TRANSPOSE")
    if trans not in ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"):
        raise Unsupported(f"transpose_a {trans}")
    out_dtype = op.result_types[0].dtype
    cdt = compute_dtype(out_dtype)
    if _spec.is_spec(op) and (dtypes.is_float(out_dtype) or dtypes.is_complex(out_dtype)):
        # Spec numerics: the C++ interpreter's substitution (spec_kernels).
        return lambda a, b: _spec.triangular_solve(a, b, left, lower, unit, trans, out_dtype)

    ashape, bshape = tuple(op.operand_types[0].shape), tuple(op.operand_types[1].shape)
    one_matrix = len(ashape) == 2 and len(bshape) == 2 \
        and all(isinstance(d, int) and d > 0 for d in ashape + bshape)
    if one_matrix:
        # One matrix of static shape (solve, inv, expm, solve_triangular):
        # the trsm call decided here, not per run.
        fn, kw = _trsm_call(cdt, ashape[-1], bshape, left, lower, unit, trans)

        def run_one(a, b):
            if a.shape != ashape or b.shape != bshape:
                return run(a, b)    # (operands of another shape: it raises)
            x = _solve_in(fn, kw, np.ascontiguousarray(a, dtype=cdt),
                          np.array(b, dtype=cdt, order="C"))
            return x.astype(out_dtype, copy=False)

    def run(a, b):
        if b.size == 0 or a.size == 0:
            # Shapes may be dynamic: the result has b's shape.
            return np.zeros(b.shape, dtype=out_dtype)
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        if int(np.prod(batch, dtype=np.int64)) <= a.shape[-1]:
            # Few matrices: one BLAS ?trsm call each (no pivoting or
            # singularity check, so a zero diagonal gives inf/NaN as XLA),
            # solving in place in a float64 copy of b.
            x = np.empty(batch + b.shape[-2:], dtype=cdt)
            x[...] = b
            x = _trsm(np.ascontiguousarray(a, dtype=cdt), x, left, lower, unit, trans)
            return x.astype(out_dtype, copy=False)
        a = a.astype(cdt)
        b = b.astype(cdt)
        m = np.tril(a) if lower else np.triu(a)
        eff_lower = lower
        if trans != "NO_TRANSPOSE":
            m = np.swapaxes(m, -1, -2)
            if trans == "ADJOINT":
                m = np.conj(m)
            eff_lower = not eff_lower
        if left:
            x = _substitute(m, b, eff_lower, unit)
        else:
            # x @ m = b  <=>  m^T @ x^T = b^T
            x = np.swapaxes(_substitute(np.swapaxes(m, -1, -2), np.swapaxes(b, -1, -2),
                                        not eff_lower, unit), -1, -2)
        return np.ascontiguousarray(x).astype(out_dtype)
    return run_one if one_matrix else run
