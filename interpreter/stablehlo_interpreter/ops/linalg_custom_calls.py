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

Also here: the custom calls of JAX's TPU rules that XLA itself expands, in
case a plugin reuses them: ``Qr`` (geqrf: Householder QR in LAPACK's
compact form) and ``ProductOfElementaryHouseholderReflectors``
(orgqr/ungqr), which ``jnp.linalg.qr`` lowers to, ``LuDecomposition`` and
``Eigh`` (``eigh`` reuses it, with ``numpy.linalg.eigh``).

As everywhere in this interpreter, the arithmetic runs in float64 /
complex128 and rounds once to the result type; batch dimensions are the
leading ones, one LAPACK call per matrix.
"""

import functools

import numpy as np

from .. import blas as _blas
from .. import dtypes
from ..blas import small_lapack
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
    sequential: ?laswp applies them to iota(m), one call per matrix.
    """
    piv = np.asarray(piv)
    if piv.size and (int(piv.min()) < 0 or int(piv.max()) >= m):
        bad = piv[(piv < 0) | (piv >= m)].reshape(-1)[0]
        raise ValueError(f"pivot {bad} out of range [0, {m})")
    return _swaps_to_permutation(piv, m)


def _swaps_to_permutation(piv, m):
    """:func:`pivots_to_permutation` of pivots known to be in range (getrf's)."""
    batch = piv.shape[:-1]
    if not batch:
        return _laswp_permutation(piv, m)
    out = np.empty(batch + (m,), dtype=np.int64)
    for idx in np.ndindex(*batch):
        out[idx] = _laswp_permutation(piv[idx], m)
    return out


def _laswp_permutation(piv, m):
    """The swaps of one matrix applied to iota(m) by LAPACK's ?laswp (on a
    float64 column: row numbers are exact): one call, where the Python loop
    of :func:`_swapped` costs ~4 us for 64 swaps (solve, det, inv of 64x64)."""
    if not 0 < piv.shape[-1] <= m < 1 << 31:   # (more swaps than rows: the loop raises)
        return np.array(_swapped(piv.tolist(), m), dtype=np.int64)
    from scipy.linalg.lapack import dlaswp
    iota = np.arange(m, dtype=np.float64).reshape(m, 1)
    return dlaswp(iota, piv, overwrite_a=1)[:, 0].astype(np.int64)


def _swapped(piv, m):
    perm = list(range(m))
    for i, p in enumerate(piv):
        perm[i], perm[p] = perm[p], perm[i]
    return perm


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
    lu_dt, piv_dt, perm_dt = out_dtypes

    def factor(getrf, x):
        # ``x``: a Fortran-ordered copy in the compute type, which getrf
        # overwrites (no further copy).
        f, p, info = getrf(x, overwrite_a=1)
        if info < 0:   # an illegal argument: never for valid shapes
            raise ValueError(f"@stablehlo_ref.lu: getrf info={info}")
        return f, p

    shape = tuple(op.operand_types[0].shape)
    one_matrix = len(shape) == 2 and all(isinstance(d, int) and d > 0 for d in shape)
    if one_matrix:
        # One matrix of static shape (the common case: solve, det, inv,
        # expm), getrf looked up here, without the batch loop's staging
        # arrays: each result is converted once, into its own array (the
        # factor rounds once).
        getrf_one = _lapack("getrf", np.empty(shape, cdt))
        m = shape[0]

        def run_one(a):
            if a.shape != shape:
                return run(a)
            x = np.array(a, dtype=cdt, order="F")
            f, p = factor(getrf_one, x)
            return [f.astype(lu_dt, order="C"), p.astype(piv_dt),
                    _swaps_to_permutation(p, m).astype(perm_dt, copy=False)]

    def run(a):
        a = np.asarray(a)
        batch = a.shape[:-2]
        m, n = a.shape[-2:]
        lu_out = np.empty(a.shape, dtype=lu_dt)
        piv = np.zeros(batch + (min(m, n),), dtype=np.int64)
        if a.size:
            getrf = _lapack("getrf", np.empty((m, n), cdt))
            for idx in np.ndindex(*batch):
                f, p = factor(getrf, np.array(a[idx], dtype=cdt, order="F"))
                lu_out[idx] = f    # rounds once to the result type
                piv[idx] = p
        perm = _swaps_to_permutation(piv, m)
        return _results([lu_out, piv, perm], out_dtypes)
    return run_one if one_matrix else run


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
        if a.ndim == 2 and a.size:
            # One matrix (jnp.linalg.qr): a Fortran-ordered copy that geqrf
            # factors in place, each result rounded once into its own array.
            x = np.array(a, dtype=cdt, order="F")
            qr, tau, _, info = _lapack("geqrf", x)(x, overwrite_a=1)
            if info != 0:
                raise ValueError(f"@stablehlo_ref.geqrf: geqrf info={info}")
            return [qr.astype(out_dtypes[0], order="C"), tau.astype(out_dtypes[1])]
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


# --------------------------------------------------------------------------
# QR in LAPACK's compact form.


def householder_qr(a):
    """LAPACK geqrf (dgeqr2/zgeqr2 with dlarfg/zlarfg), batched over leading dims.

    Returns (r_and_v, taus): R in the upper triangle, the Householder vectors
    (implicit leading 1) below the diagonal; Q = H(0) ... H(k-1) with
    H(i) = I - tau_i v_i v_i^H.
    """
    a = np.array(a, copy=True)
    m, n = a.shape[-2:]
    k = min(m, n)
    cplx = np.iscomplexobj(a)
    taus = np.zeros(a.shape[:-2] + (k,), dtype=a.dtype)
    for j in range(k):
        alpha = a[..., j, j]
        x = a[..., j + 1:, j]
        xnorm = np.sqrt(np.sum(np.abs(x) ** 2, axis=-1))
        alphr = alpha.real
        alphi = alpha.imag if cplx else np.zeros_like(alphr)
        trivial = (xnorm == 0) & (alphi == 0)
        norm = np.sqrt(alphr ** 2 + alphi ** 2 + xnorm ** 2)
        # beta = -sign(alpha_re) * ||(alpha, x)||, Fortran SIGN: +0 counts as positive.
        beta = np.where(alphr >= 0, -norm, norm)
        safe_beta = np.where(trivial, 1.0, beta)
        if cplx:
            tau = (beta - alphr) / safe_beta - 1j * alphi / safe_beta
        else:
            tau = (beta - alphr) / safe_beta
        tau = np.where(trivial, 0, tau)
        scale = 1.0 / np.where(trivial, 1.0, alpha - beta)
        v_tail = x * scale[..., None]
        v_tail = np.where(trivial[..., None], x, v_tail)
        a[..., j + 1:, j] = v_tail
        a[..., j, j] = np.where(trivial, alpha, beta)
        taus[..., j] = tau
        if j + 1 < n:
            # Apply H(j)^H = I - conj(tau) v v^H to the trailing columns.
            v = np.concatenate([np.ones(a.shape[:-2] + (1,), dtype=a.dtype), v_tail], axis=-1)
            sub = a[..., j:, j + 1:]
            w = np.einsum("...i,...ij->...j", np.conj(v), sub)
            ctau = np.conj(tau) if cplx else tau
            a[..., j:, j + 1:] = sub - ctau[..., None, None] * v[..., :, None] * w[..., None, :]
    return a, taus


def householder_product(a, taus):
    """LAPACK orgqr/ungqr: the first n columns of H(0) ... H(k-1)."""
    m, n = a.shape[-2:]
    k = taus.shape[-1]
    batch = a.shape[:-2]
    q = np.broadcast_to(np.eye(m, n, dtype=a.dtype), batch + (m, n)).copy()
    for i in range(k - 1, -1, -1):
        v = np.concatenate([np.ones(batch + (1,), dtype=a.dtype), a[..., i + 1:, i]], axis=-1)
        sub = q[..., i:, :]
        w = np.einsum("...i,...ij->...j", np.conj(v), sub)
        q[..., i:, :] = sub - taus[..., i, None, None] * v[..., :, None] * w[..., None, :]
    return q


@custom_call("Qr")
def qr(op):
    """@Qr (geqrf): (a) -> (R and Householder vectors, taus), LAPACK's layout."""
    cdt, (out_a, out_tau) = matrix_call_types(op, 2)

    def run(a):
        ra, taus = householder_qr(a.astype(cdt))
        return [ra.astype(out_a), taus.astype(out_tau)]
    return run


@custom_call("ProductOfElementaryHouseholderReflectors")
def product_of_householder_reflectors(op):
    """@ProductOfElementaryHouseholderReflectors (orgqr/ungqr): (a, taus) -> Q."""
    cdt, (out,) = matrix_call_types(op, 1)

    def run(a, taus):
        return householder_product(a.astype(cdt), taus.astype(cdt)).astype(out)
    return run


# --------------------------------------------------------------------------
# LU with partial pivoting (the TPU rule's custom call).


def lu_partial_pivoting(a):
    """LAPACK getf2-style LU: returns (lu, pivots, permutation), 0-based."""
    a = np.array(a, copy=True)
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = a.shape[:-2]
    pivots = np.zeros(batch + (k,), dtype=np.int32)
    perm = np.broadcast_to(np.arange(m, dtype=np.int32), batch + (m,)).copy()
    flat = a.reshape((-1, m, n))
    fperm = perm.reshape((-1, m))
    fpiv = pivots.reshape((-1, k))
    rows = np.arange(flat.shape[0])
    for j in range(k):
        col = flat[:, j:, j]
        # LAPACK's i?amax: |re| + |im| for complex, first maximum wins.
        mag = np.abs(col.real) + np.abs(col.imag) if np.iscomplexobj(col) else np.abs(col)
        p = j + np.argmax(mag, axis=-1)
        fpiv[:, j] = p
        row_j = flat[rows, j, :].copy()
        flat[rows, j, :] = flat[rows, p, :]
        flat[rows, p, :] = row_j
        pj = fperm[rows, j].copy()
        fperm[rows, j] = fperm[rows, p]
        fperm[rows, p] = pj
        piv = flat[:, j, j]
        nz = piv != 0
        scale = np.where(nz, 1.0 / np.where(nz, piv, 1), 1)
        flat[:, j + 1:, j] *= np.where(nz[:, None], scale[:, None], 1)
        flat[:, j + 1:, j + 1:] -= flat[:, j + 1:, j, None] * flat[:, j, None, j + 1:]
    return flat.reshape(a.shape), fpiv.reshape(pivots.shape), fperm.reshape(perm.shape)


@custom_call("LuDecomposition")
def lu_decomposition(op):
    """@LuDecomposition: (a) -> (lu, pivots, permutation) with partial pivoting."""
    cdt, (out_lu, out_piv, out_perm) = matrix_call_types(op, 3)

    def run(a):
        lu, piv, perm = lu_partial_pivoting(a.astype(cdt))
        return [lu.astype(out_lu), piv.astype(out_piv), perm.astype(out_perm)]
    return run


# --------------------------------------------------------------------------
# Symmetric / Hermitian eigendecomposition (the TPU rule's custom call).


@custom_call("Eigh")
def eigh(op):
    """@Eigh: (a) -> (eigenvectors as columns, eigenvalues ascending).

    backend_config is "lower,sort_eigenvalues,max_iter,tol"; the triangle
    `lower` names is read. numpy's eigh returns sorted eigenvalues either way.
    """
    cdt, (out_v, out_w) = matrix_call_types(op, 2)
    cfg = str(op.attrs.get("backend_config", "") or "")
    parts = [p.strip() for p in cfg.split(",")]
    lower = parts[0] != "0" if parts and parts[0] else True

    def run(a):
        a = a.astype(cdt)
        if a.size == 0:
            return [a.astype(out_v), np.zeros(a.shape[:-1], dtype=out_w)]
        uplo = "L" if lower else "U"
        # One BLAS thread for small matrices (linalg_custom_calls._threads_for).
        n = a.shape[-1]
        call = small_lapack if n ** 3 < _blas.SMALL_GEMM_MACS else (lambda f, *x, **k: f(*x, **k))
        try:
            w, v = call(np.linalg.eigh, a, UPLO=uplo)
        except np.linalg.LinAlgError:
            w, v = None, None
        bad = ~np.all(np.isfinite(a), axis=(-2, -1))
        if w is None or bad.any():
            # Like JAX's CPU rule (syevd info != 0): NaN for the matrices that
            # cannot be decomposed, the others as usual.
            w = np.full(a.shape[:-1], np.nan)
            v = np.full(a.shape, complex(np.nan, np.nan) if np.iscomplexobj(a) else np.nan,
                        dtype=a.dtype)
            for idx in np.ndindex(*a.shape[:-2]):
                if bad[idx]:
                    continue
                try:
                    w[idx], v[idx] = call(np.linalg.eigh, a[idx], UPLO=uplo)
                except np.linalg.LinAlgError:
                    pass
        return [v.astype(out_v), w.astype(out_w)]
    return run
