"""custom_call targets that JAX's platform-independent lowerings emit.

A PJRT plugin platform gets JAX's default lowering rules, and a few of those
are custom calls that XLA itself expands (see jax/_src/lax/linalg.py,
jax/_src/lax/ann.py, jax/_src/interpreters/mlir.py):

* ``Qr`` (geqrf: Householder QR in LAPACK's compact form) and
  ``ProductOfElementaryHouseholderReflectors`` (orgqr/ungqr), which
  ``jnp.linalg.qr`` lowers to;
* ``ApproxTopK`` (``jax.lax.approx_max_k`` / ``approx_min_k``; the default
  rule marks it ``is_fallback``: an exact top-k);
* ``LayoutConstraint``, ``MoveToHost``/``MoveToDevice`` and the ``xla.sdy.*``
  markers: annotations, the identity on one device (``Sharding`` and the
  ``SPMD*`` shape markers live in sharding.py);
* ``Eigh`` and ``LuDecomposition``: the TPU rules, in case a plugin reuses
  them for eigh / lu (JAX's default rules have none for eigh).

Linear algebra runs in float64/complex128 and rounds once to the result type.
"""

import re

import numpy as np

from .. import dtypes
from ..blas import SMALL_GEMM_MACS, small_lapack
from ..registry import Unsupported, custom_call
from .linalg import matrix_call_types

# --------------------------------------------------------------------------
# Annotations: identity.


def _identity_builder(op):
    if len(op.operand_types) != op.num_results:
        raise Unsupported(f"@{op.attrs.get('call_target_name')} with "
                          f"{len(op.operand_types)} operands and {op.num_results} results")
    for a, r in zip(op.operand_types, op.result_types):
        if getattr(a, "shape", None) != getattr(r, "shape", None):
            raise Unsupported(
                f"@{op.attrs.get('call_target_name')} changes shape {a!r} -> {r!r}: "
                "manual sharding across partitions needs XLA's SPMD partitioner")
    if op.num_results == 0:
        return lambda *xs: ()
    if op.num_results == 1:
        return lambda x: x
    return lambda *xs: xs


@custom_call("LayoutConstraint", "MoveToHost", "MoveToDevice",
             "xla.sdy.FuncResultSharding", "xla.sdy.GlobalToLocalShape",
             "xla.sdy.LocalToGlobalShape", "xla.sdy.ShardingGroup",
             "xla.sdy.PropagationBarrier")
def sharding_annotation(op):
    """Layout / memory-placement / Shardy-export annotations: the identity on one device.

    (`Sharding`, `SPMDFullToShardShape`, `SPMDShardToFullShape` and
    `annotate_device_placement` are registered with the sdy ops in sharding.py.)

    Shape-changing uses (full <-> shard shape of a multi-partition program)
    need the SPMD partitioner and are reported as unsupported.
    """
    return _identity_builder(op)


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
        call = small_lapack if n ** 3 < SMALL_GEMM_MACS else (lambda f, *x, **k: f(*x, **k))
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


# --------------------------------------------------------------------------
# ApproxTopK: the default (fallback) rule asks for an exact top-k.


def _comparator_direction(op, name):
    """'GT' or 'LT' when the comparator is `compare DIR, arg0, arg1`."""
    o = op.module.function_ops().get(name)
    if o is not None:
        block = o.regions[0].blocks[0]
        ops = list(block.operations)
        args = list(block.arguments)
        if len(ops) != 2 or ops[0].operation.name != "stablehlo.compare":
            return None
        cmp = ops[0].operation
        if list(ops[1].operation.operands) != [cmp.results[0]]:
            return None
        m = re.search(r"comparison_direction\s+(\w+)", str(cmp.attributes["comparison_direction"]))
        if not m:
            return None
        direction = m.group(1)
        lhs, rhs = cmp.operands[0], cmp.operands[1]
        if lhs == args[0] and rhs == args[1]:
            return direction
        if lhs == args[1] and rhs == args[0]:
            return {"GT": "LT", "LT": "GT"}.get(direction)
        return None
    return None


@custom_call("ApproxTopK")
def approx_top_k(op):
    """@ApproxTopK (operand, iota, init_value, init_index) -> (values, indices).

    Computed exactly (what the default rule's `is_fallback` asks for): a
    stable sort along `reduction_dim` by the comparator (GT: largest first,
    LT: smallest first; floats in total order), cut to the result size.
    """
    cfg = op.attrs.get("mhlo.backend_config")
    if not isinstance(cfg, dict):
        raise Unsupported("@ApproxTopK without mhlo.backend_config")
    comps = op.attrs.get("called_computations") or []
    if len(comps) != 1 or len(op.operand_types) != 4 or op.num_results != 2:
        raise Unsupported("@ApproxTopK of an unexpected form")
    direction = _comparator_direction(op, str(comps[0]))
    if direction not in ("GT", "LT"):
        raise Unsupported("@ApproxTopK comparator is not a plain GT/LT compare")
    dim = int(cfg.get("reduction_dim", -1))
    rank = len(op.operand_types[0].shape)
    dim = dim + rank if dim < 0 else dim
    size = op.result_types[0].shape[dim]
    if size is None:
        raise Unsupported("dynamic shapes")
    full = np.uint64(0xFFFFFFFFFFFFFFFF)
    descending = direction == "GT"
    out_v, out_i = (r.dtype for r in op.result_types)

    def run(x, iota, init_value, init_index):
        key = dtypes.total_order_key(x)
        if descending:
            key = full - key
        order = np.argsort(key, axis=dim, kind="stable")
        order = np.take(order, np.arange(size), axis=dim)
        values = np.take_along_axis(x, order, axis=dim).astype(out_v)
        indices = np.take_along_axis(iota, order, axis=dim).astype(out_i)
        return [values, indices]
    return run


# --------------------------------------------------------------------------
# Dynamic-shape forms JAX emits under shape polymorphism.


@custom_call("stablehlo.dynamic_rng_bit_generator")
def dynamic_rng_bit_generator(op):
    """@stablehlo.dynamic_rng_bit_generator(state, output_shape): rng_bit_generator
    with the output shape given at run time (attribute rng_algorithm)."""
    from .rng import make_bit_generator
    if len(op.operand_types) != 2 or op.num_results != 2:
        raise Unsupported("@stablehlo.dynamic_rng_bit_generator of an unexpected form")
    algorithm = op.attrs.get("rng_algorithm", "DEFAULT")
    algorithm = re.sub(r".*\b(DEFAULT|THREE_FRY|PHILOX)\b.*", r"\1", str(algorithm))
    gen = make_bit_generator(algorithm, op.operand_types[0], op.result_types[1])

    def run(state, shape):
        return gen(state, tuple(int(d) for d in np.asarray(shape).reshape(-1)))
    return run


@custom_call("stablehlo.dynamic_top_k")
def dynamic_top_k(op):
    """@stablehlo.dynamic_top_k(operand, k): chlo.top_k with k given at run time."""
    if len(op.operand_types) != 2 or op.num_results != 2:
        raise Unsupported("@stablehlo.dynamic_top_k of an unexpected form")
    if dtypes.is_complex(op.operand_types[0].dtype):
        raise Unsupported("top_k of complex values")
    idx_dtype = op.result_types[1].dtype
    full = np.uint64(0xFFFFFFFFFFFFFFFF)

    def run(x, k):
        k = int(k)
        order = np.argsort(full - dtypes.total_order_key(x), axis=-1, kind="stable")[..., :k]
        return [np.ascontiguousarray(np.take_along_axis(x, order, axis=-1)),
                order.astype(idx_dtype)]
    return run


@custom_call("shape_assertion")
def shape_assertion(op):
    """@shape_assertion(assert_what, *inputs) {error_message}: JAX's check of
    the shape constraints of an exported shape-polymorphic module; fails the
    run with error_message.format(*inputs) when assert_what is false."""
    message = str(op.attrs.get("error_message", "shape assertion failed"))

    def run(ok, *inputs):
        if not bool(ok):
            vals = [int(v) if np.ndim(v) == 0 else v for v in inputs]
            try:
                text = message.format(*vals)
            except (IndexError, KeyError, ValueError):
                text = f"{message} {vals}"
            raise AssertionError(text)
        return ()
    return run
