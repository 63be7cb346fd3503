"""LAPACK-equivalent custom calls that stablehlo_pjrt/lowerings.py emits.

JAX has no platform-independent lowering for several linear-algebra
primitives (on CPU they call LAPACK through typed-FFI custom calls whose
operands are column-major and which report an ``info`` status). For the
``stablehlo_ref`` platform the plugin lowers them to the custom calls below
instead. Their operands and results are plain row-major arrays with the
primitive's own shapes (no ``info`` result: a batch element LAPACK cannot
factor comes back as NaN, which is what JAX's CPU rules turn a nonzero
``info`` into). Attributes arrive in ``mhlo.backend_config`` (a
dictionary: custom-call API version 4).

=================================  ==========================================
custom call                        numpy / scipy routine (LAPACK driver)
=================================  ==========================================
``stablehlo_ref.svd``              ``scipy.linalg.svd`` (``gesdd``; ``gesvd``
                                   when ``driver = "gesvd"``)
``stablehlo_ref.eig``              ``scipy.linalg.eig`` / ``eigvals``
                                   (``geev``)
``stablehlo_ref.schur``            ``scipy.linalg.schur`` (``gees``, no
                                   sorting; real Schur form for real input)
``stablehlo_ref.hessenberg``       ``scipy.linalg.lapack.?gehrd``
``stablehlo_ref.tridiagonal``      ``scipy.linalg.lapack.?sytrd`` / ``?hetrd``
``stablehlo_ref.geqp3``            ``scipy.linalg.lapack.?geqp3`` (with
                                   ``?geqrf`` + ``?ormqr``/``?unmqr`` for
                                   columns that ``jpvt`` fixes in front)
=================================  ==========================================

(``eigh`` reuses the TPU rule's ``@Eigh`` custom call, implemented in
custom_calls.py with ``numpy.linalg.eigh``.)

As everywhere in this interpreter, the arithmetic runs in float64 /
complex128 and rounds once to the result type; batch dimensions are the
leading ones, one LAPACK call per matrix.
"""

import functools

import numpy as np

from .. import blas as _blas
from .. import dtypes
from ..registry import Unsupported, custom_call
from .linalg import matrix_call_types


def _config(op):
    cfg = op.attrs.get("backend_config")
    if cfg is None or cfg == "":
        cfg = op.attrs.get("mhlo.backend_config")
    if cfg is None or cfg == "":
        return {}
    if not isinstance(cfg, dict):
        raise Unsupported(f"@{op.attrs.get('call_target_name')}: backend_config "
                          f"must be a dictionary, got {cfg!r}")
    return cfg


def _lapack(name, a):
    """scipy's LAPACK routine ``name`` for the dtype of ``a`` (d or z prefix).

    For matrices below blas.SMALL_GEMM_MACS flops (m n min(m, n)) it runs
    with one BLAS thread: on this 2-core, shared machine OpenBLAS's threads
    otherwise wait for each other (a 64x64 ?trsm took 20 ms instead of 20 us).
    """
    m, n = a.shape[-2:] if a.ndim >= 2 else (a.shape[-1], 1)
    small = m * n * min(m, n) < _blas.SMALL_GEMM_MACS
    key = (name, a.dtype, small)
    fn = _LAPACK_CACHE.get(key)
    if fn is None:
        # get_lapack_funcs costs microseconds per call (a 64x64 getrf costs
        # 15): looked up once per routine, dtype and threading.
        from scipy.linalg import lapack
        fn, = lapack.get_lapack_funcs((name,), (a,))
        if small:
            fn = functools.partial(_blas.small_lapack, fn)
        _LAPACK_CACHE[key] = fn
    return fn


_LAPACK_CACHE = {}


def _threads_for(x):
    """How to call a LAPACK driver (scipy.linalg/np.linalg) on matrix ``x``:
    with one BLAS thread below blas.SMALL_GEMM_MACS (as :func:`_lapack`: on
    a busy 2-core machine a threaded 128x128 gesdd took 0.5 s of CPU time
    instead of 2 ms, its threads spinning while they wait for each other)."""
    m, n = x.shape[-2:]
    if m * n * min(m, n) < _blas.SMALL_GEMM_MACS:
        return _blas.small_lapack
    return _call


def _call(fn, *args, **kwargs):
    return fn(*args, **kwargs)


def _nan_like(shape, dtype):
    return np.full(shape, np.nan, dtype=dtype)


def _results(outs, out_dtypes):
    """The kernel's return value: one array, or a list for several results."""
    res = [np.ascontiguousarray(o.astype(d)) for o, d in zip(outs, out_dtypes)]
    return res[0] if len(res) == 1 else res


def _each_matrix(batch, fn, outs, out_dtypes):
    """Call ``fn(idx) -> tuple`` for every batch index and store into
    ``outs``; returns them as the kernel's result (:func:`_results`).

    A matrix for which ``fn`` raises LinAlgError / ValueError (LAPACK's
    ``info != 0``) or whose results are requested for a non-finite input gets
    NaN results, like JAX's CPU lowering does.
    """
    for idx in np.ndindex(*batch):
        try:
            vals = fn(idx)
        except (np.linalg.LinAlgError, ValueError):
            vals = None
        for k, out in enumerate(outs):
            if vals is None or vals[k] is None:
                if out.dtype.kind == "c":
                    out[idx] = complex(np.nan, np.nan)
                elif out.dtype.kind == "f":
                    out[idx] = np.nan
            else:
                out[idx] = vals[k]
    return _results(outs, out_dtypes)


# --------------------------------------------------------------------------
# Singular value decomposition.


@custom_call("stablehlo_ref.svd")
def svd(op):
    """@stablehlo_ref.svd (a) -> (s) or (s, u, vt).

    backend_config: full_matrices, compute_uv (bool), driver ("gesdd" or
    "gesvd"). Singular values descending (LAPACK); u is m x m (full) or
    m x k, vt is n x n or k x n, k = min(m, n).
    """
    import scipy.linalg
    cfg = _config(op)
    full = bool(cfg.get("full_matrices", True))
    compute_uv = bool(cfg.get("compute_uv", True))
    driver = str(cfg.get("driver", "gesdd"))
    if driver not in ("gesdd", "gesvd"):
        raise Unsupported(f"@stablehlo_ref.svd driver {driver!r}")
    cdt, out_dtypes = matrix_call_types(op, 3 if compute_uv else 1, f" (compute_uv={compute_uv})")

    def run(a):
        a = np.asarray(a).astype(cdt)
        batch = a.shape[:-2]
        m, n = a.shape[-2:]
        k = min(m, n)
        s = np.empty(batch + (k,), dtype=np.float64)
        outs = [s]
        if compute_uv:
            outs.append(np.empty(batch + (m, m if full else k), dtype=cdt))
            outs.append(np.empty(batch + (n if full else k, n), dtype=cdt))

        def one(idx):
            x = a[idx]
            if not np.all(np.isfinite(x)):
                return None
            r = _threads_for(x)(scipy.linalg.svd, x, full_matrices=full, compute_uv=compute_uv,
                                check_finite=False, lapack_driver=driver)
            return (r,) if not compute_uv else (r[1], r[0], r[2])

        return _each_matrix(batch, one, outs, out_dtypes)
    return run


# --------------------------------------------------------------------------
# Non-symmetric eigendecomposition.


@custom_call("stablehlo_ref.eig")
def eig(op):
    """@stablehlo_ref.eig (a) -> (w[, vl][, vr]), all complex.

    backend_config: compute_left, compute_right (bool). geev's eigenvalue
    order; eigenvectors are columns with unit 2-norm and real largest
    component; vl are left eigenvectors, vl[:, j]^H a = w[j] vl[:, j]^H.
    """
    import scipy.linalg
    cfg = _config(op)
    left = bool(cfg.get("compute_left", False))
    right = bool(cfg.get("compute_right", False))
    cdt, out_dtypes = matrix_call_types(op, 1 + left + right,
                                 f" (compute_left={left}, compute_right={right})")

    def run(a):
        a = np.asarray(a).astype(cdt)
        batch = a.shape[:-2]
        n = a.shape[-1]
        outs = [np.empty(batch + (n,), dtype=np.complex128)]
        outs += [np.empty(batch + (n, n), dtype=np.complex128) for _ in range(left + right)]

        def one(idx):
            x = a[idx]
            if not np.all(np.isfinite(x)):
                return None
            call = _threads_for(x)
            if not (left or right):
                return (call(scipy.linalg.eigvals, x, check_finite=False),)
            r = call(scipy.linalg.eig, x, left=left, right=right, check_finite=False)
            return tuple(r)

        return _each_matrix(batch, one, outs, out_dtypes)
    return run


# --------------------------------------------------------------------------
# Schur decomposition.


@custom_call("stablehlo_ref.schur")
def schur(op):
    """@stablehlo_ref.schur (a) -> (t[, z]): a = z t z^H, gees without sorting.

    backend_config: compute_schur_vectors (bool). Real input gives the real
    (quasi-triangular, 2x2 blocks for complex pairs) Schur form.
    """
    import scipy.linalg
    vectors = bool(_config(op).get("compute_schur_vectors", True))
    cdt, out_dtypes = matrix_call_types(op, 1 + vectors, f" (compute_schur_vectors={vectors})")
    output = "complex" if dtypes.is_complex(cdt) else "real"

    def run(a):
        a = np.asarray(a).astype(cdt)
        batch = a.shape[:-2]
        outs = [np.empty(a.shape, dtype=cdt) for _ in range(1 + vectors)]

        def one(idx):
            x = a[idx]
            if not np.all(np.isfinite(x)):
                return None
            if x.shape[-1] == 0:
                return (x, x)
            tt, z = _threads_for(x)(scipy.linalg.schur, x, output=output, check_finite=False)
            return (tt, z)

        return _each_matrix(batch, one, outs, out_dtypes)
    return run


# --------------------------------------------------------------------------
# Hessenberg and tridiagonal reductions (LAPACK compact forms).


@custom_call("stablehlo_ref.hessenberg")
def hessenberg(op):
    """@stablehlo_ref.hessenberg (a) -> (a', taus): gehrd with ilo=1, ihi=n.

    a' holds the upper Hessenberg matrix on and above the first subdiagonal
    and the Householder vectors (implicit leading 1) below it; taus has n-1
    entries.
    """
    cdt, out_dtypes = matrix_call_types(op, 2)

    def run(a):
        a = np.asarray(a).astype(cdt)
        batch = a.shape[:-2]
        n = a.shape[-1]
        outs = [np.empty(a.shape, dtype=cdt), np.empty(batch + (max(n - 1, 0),), dtype=cdt)]

        def one(idx):
            x = a[idx]
            if n <= 1:
                return (x, np.zeros((max(n - 1, 0),), cdt))
            ht, tau, info = _lapack("gehrd", x)(x, lo=0, hi=n - 1)
            if info != 0:
                return None
            return (ht, tau)

        return _each_matrix(batch, one, outs, out_dtypes)
    return run


@custom_call("stablehlo_ref.tridiagonal")
def tridiagonal(op):
    """@stablehlo_ref.tridiagonal (a) -> (a', d, e, taus): sytrd / hetrd.

    backend_config: lower (bool), the triangle of a that is read and
    overwritten with the Householder vectors. d (n, real) is the diagonal,
    e (n-1, real) the off-diagonal, taus (n-1) the reflector scalars.
    """
    cdt, out_dtypes = matrix_call_types(op, 4)
    lower = bool(_config(op).get("lower", True))
    name = "hetrd" if dtypes.is_complex(cdt) else "sytrd"

    def run(a):
        a = np.asarray(a).astype(cdt)
        batch = a.shape[:-2]
        n = a.shape[-1]
        outs = [np.empty(a.shape, dtype=cdt), np.empty(batch + (n,), np.float64),
                np.empty(batch + (n - 1,), np.float64), np.empty(batch + (n - 1,), cdt)]

        def one(idx):
            x = a[idx]
            c, d, e, tau, info = _lapack(name, x)(x, lower=int(lower))
            if info != 0:
                return None
            return (c, d, e, tau)

        return _each_matrix(batch, one, outs, out_dtypes)
    return run


# --------------------------------------------------------------------------
# QR with column pivoting.


def geqp3(a, jpvt):
    """LAPACK ?geqp3 on one matrix: returns (qr, jpvt (1-based), tau).

    Columns j with jpvt[j] != 0 on entry are swapped to the front (in LAPACK's
    order) and factored without pivoting; the rest are pivoted by column norm.
    """
    m, n = a.shape
    k = min(m, n)
    a = np.array(a, copy=True)
    jp = np.zeros(n, dtype=np.int64)
    nf = 0
    for j in range(n):   # dgeqp3's "move initial columns up front" loop
        if jpvt[j] != 0:
            if j != nf:
                a[:, [j, nf]] = a[:, [nf, j]]
                jp[j] = jp[nf]
                jp[nf] = j + 1
            else:
                jp[j] = j + 1
            nf += 1
        else:
            jp[j] = j + 1
    tau = np.zeros(k, dtype=a.dtype)
    if nf > 0 and m > 0:
        na = min(m, nf)
        qr, tf, _, info = _lapack("geqrf", a)(a[:, :nf])
        if info != 0:
            raise np.linalg.LinAlgError("geqrf failed")
        a[:, :nf] = qr
        tau[:na] = tf[:na]
        if nf < n:
            ormqr = _lapack("unmqr" if np.iscomplexobj(a) else "ormqr", a)
            trans = "C" if np.iscomplexobj(a) else "T"
            c, _, info = ormqr("L", trans, qr[:, :na], tf[:na], a[:, nf:], lwork=max(1, n - nf) * 64)
            if info != 0:
                raise np.linalg.LinAlgError("ormqr failed")
            a[:, nf:] = c
    if nf < k:
        sub = a[nf:, nf:]
        qr, jsub, ts, _, info = _lapack("geqp3", sub)(sub)
        if info != 0:
            raise np.linalg.LinAlgError("geqp3 failed")
        order = np.asarray(jsub, dtype=np.int64) - 1
        a[:nf, nf:] = a[:nf, nf:][:, order]
        a[nf:, nf:] = qr
        jp[nf:] = jp[nf:][order]
        tau[nf:] = ts
    return a, jp, tau


@custom_call("stablehlo_ref.geqp3")
def geqp3_call(op):
    """@stablehlo_ref.geqp3 (a, jpvt) -> (a', jpvt', taus): QR with column pivoting.

    jpvt is 1-based as in LAPACK (nonzero on entry: a column fixed in front);
    a' holds R above and the Householder vectors below the diagonal.
    """
    cdt, out_dtypes = matrix_call_types(op, 3)

    def run(a, jpvt):
        a = np.asarray(a).astype(cdt)
        jpvt = np.asarray(jpvt)
        batch = a.shape[:-2]
        m, n = a.shape[-2:]
        outs = [np.empty(a.shape, cdt), np.empty(batch + (n,), np.int64),
                np.empty(batch + (min(m, n),), cdt)]
        for idx in np.ndindex(*batch):
            r = geqp3(a[idx], jpvt[idx])
            for o, v in zip(outs, r):
                o[idx] = v
        return _results(outs, out_dtypes)
    return run


# --------------------------------------------------------------------------
# LU, QR and the Householder products: JAX's platform-independent rules for
# these are loops of dynamic slices (lu: an unrolled blocked algorithm around
# a fori_loop per column; lu_pivots_to_permutation and ormqr: fori_loops)
# that the interpreter would run op by op, hundreds of times slower than one
# LAPACK call. stablehlo_pjrt/lowerings.py lowers them to these instead.


def pivots_to_permutation(piv, m):
    """The permutation (..., m) that LAPACK's 0-based row swaps ``piv`` apply.

    Row i is swapped with row piv[i], for i = 0, 1, ... in order (as
    LAPACK's ?laswp and JAX's lu_pivots_to_permutation). The swaps are
    sequential, so this loops over them in plain Python per matrix (k integer
    swaps cost microseconds; numpy calls per swap would cost more).
    """
    piv = np.asarray(piv)
    batch = piv.shape[:-1]
    out = np.empty(batch + (m,), dtype=np.int64)
    if piv.size and (int(piv.min()) < 0 or int(piv.max()) >= m):
        bad = piv[(piv < 0) | (piv >= m)].reshape(-1)[0]
        raise ValueError(f"pivot {bad} out of range [0, {m})")
    for idx in (np.ndindex(*batch) if batch else ((),)):
        perm = list(range(m))
        for i, p in enumerate(piv[idx].tolist()):
            perm[i], perm[p] = perm[p], perm[i]
        out[idx] = perm
    return out


@custom_call("stablehlo_ref.lu")
def lu(op):
    """@stablehlo_ref.lu (a) -> (lu, pivots, permutation): LAPACK ?getrf.

    lu holds the unit-lower L below the diagonal and U on and above it
    (m x n, any shape); pivots (min(m, n), 0-based) are getrf's row swaps,
    permutation (m) their product, so that a[permutation] = L @ U. A
    singular matrix (getrf's info > 0) is factored all the same, as on XLA
    CPU; no finiteness check (NaN propagates through LAPACK as on XLA CPU).
    """
    cdt, out_dtypes = matrix_call_types(op, 3)

    def run(a):
        a = np.asarray(a)
        batch = a.shape[:-2]
        m, n = a.shape[-2:]
        k = min(m, n)
        lu_out = np.empty(a.shape, dtype=out_dtypes[0])
        piv = np.zeros(batch + (k,), dtype=np.int64)
        if a.size:
            getrf = _lapack("getrf", np.empty((m, n), cdt))
            for idx in np.ndindex(*batch):
                # Converted straight into the Fortran order getrf works in,
                # which it then overwrites (no further copy).
                x = np.array(a[idx], dtype=cdt, order="F")
                f, p, info = getrf(x, overwrite_a=1)
                if info < 0:   # an illegal argument: never for valid shapes
                    raise ValueError(f"@stablehlo_ref.lu: getrf info={info}")
                lu_out[idx] = f    # rounds once to the result type
                piv[idx] = p
        perm = pivots_to_permutation(piv, m)
        return _results([lu_out, piv, perm], out_dtypes)
    return run


@custom_call("stablehlo_ref.lu_pivots_to_permutation")
def lu_pivots_to_permutation(op):
    """@stablehlo_ref.lu_pivots_to_permutation (pivots) -> (permutation).

    backend_config: permutation_size (m >= k). pivots are 0-based row swaps
    applied in order to iota(m).
    """
    m = int(_config(op).get("permutation_size", op.result_types[0].shape[-1]))
    out_dtype = op.result_types[0].dtype

    def run(piv):
        try:
            return pivots_to_permutation(piv, m).astype(out_dtype)
        except ValueError as e:
            raise ValueError(f"@stablehlo_ref.lu_pivots_to_permutation: {e}") from None
    return run


@custom_call("stablehlo_ref.geqrf")
def geqrf_call(op):
    """@stablehlo_ref.geqrf (a) -> (a', taus): LAPACK ?geqrf.

    a' holds R on and above the diagonal and the Householder vectors (implicit
    leading 1) below it; taus has min(m, n) entries.
    """
    cdt, out_dtypes = matrix_call_types(op, 2)

    def run(a):
        a = np.asarray(a).astype(cdt)
        batch = a.shape[:-2]
        m, n = a.shape[-2:]
        outs = [np.array(a, copy=True), np.zeros(batch + (min(m, n),), dtype=cdt)]
        if a.size:
            fn = _lapack("geqrf", a)
            for idx in np.ndindex(*batch):
                qr, tau, _, info = fn(a[idx])
                if info != 0:
                    raise ValueError(f"@stablehlo_ref.geqrf: geqrf info={info}")
                outs[0][idx] = qr
                outs[1][idx] = tau
        return _results(outs, out_dtypes)
    return run


@custom_call("stablehlo_ref.householder_product")
def householder_product_call(op):
    """@stablehlo_ref.householder_product (a, taus) -> q: LAPACK ?orgqr / ?ungqr.

    q (m x n, m >= n >= k) is the first n columns of H(0) ... H(k-1),
    H(i) = I - taus[i] v_i v_i^H, v_i the i-th column of a below the
    diagonal with an implicit 1 on it.
    """
    cdt, (out_dtype,) = matrix_call_types(op, 1)
    name = "ungqr" if dtypes.is_complex(cdt) else "orgqr"

    def run(a, taus):
        a = np.asarray(a).astype(cdt)
        taus = np.asarray(taus).astype(cdt)
        batch = a.shape[:-2]
        m, n = a.shape[-2:]
        q = np.empty(a.shape, dtype=cdt)
        if a.size == 0:
            return q.astype(out_dtype)
        fn = _lapack(name, a)
        for idx in np.ndindex(*batch):
            if taus.shape[-1] == 0:
                q[idx] = np.eye(m, n, dtype=cdt)
                continue
            r, _, info = fn(a[idx], taus[idx])
            if info != 0:
                raise ValueError(f"@stablehlo_ref.householder_product: {name} info={info}")
            q[idx] = r
        return np.ascontiguousarray(q.astype(out_dtype))
    return run


@custom_call("stablehlo_ref.ormqr")
def ormqr_call(op):
    """@stablehlo_ref.ormqr (a, taus, c) -> c': LAPACK ?ormqr / ?unmqr.

    backend_config: left, transpose (bool). c' = op(Q) c (left) or c op(Q),
    op(Q) = Q^H when transpose; Q = H(0) ... H(k-1) from a's columns below
    the diagonal (k = len(taus)) as for householder_product.
    """
    cdt, (out_dtype,) = matrix_call_types(op, 1)
    cfg = _config(op)
    left = bool(cfg.get("left", True))
    transpose = bool(cfg.get("transpose", False))
    cplx = dtypes.is_complex(cdt)
    name = "unmqr" if cplx else "ormqr"
    trans = ("C" if cplx else "T") if transpose else "N"
    side = "L" if left else "R"

    def run(a, taus, c):
        a = np.asarray(a).astype(cdt)
        taus = np.asarray(taus).astype(cdt)
        c = np.asarray(c).astype(cdt)
        k = taus.shape[-1]
        out = np.array(c, copy=True)
        if c.size == 0 or k == 0:
            return out.astype(out_dtype)
        fn = _lapack(name, a)
        batch = c.shape[:-2]
        lwork = max(1, max(c.shape[-2:]) * 64)
        for idx in np.ndindex(*batch):
            r, _, info = fn(side, trans, a[idx][:, :k], taus[idx], c[idx], lwork)
            if info != 0:
                raise ValueError(f"@stablehlo_ref.ormqr: {name} info={info}")
            out[idx] = r
        return np.ascontiguousarray(out.astype(out_dtype))
    return run
