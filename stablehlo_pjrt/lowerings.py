"""JAX lowering rules for primitives that have none for the stablehlo_ref platform.

JAX's linear-algebra primitives that call LAPACK on CPU (and cuSOLVER on GPU)
have only platform-specific lowering rules, so tracing them for a PJRT
plugin platform fails with "MLIR translation rule for primitive 'eigh' not
found for platform stablehlo_ref" before any StableHLO exists.
:func:`register_lowerings` (called from ``jax_plugin.initialize()``) registers
a ``platform="stablehlo_ref"`` rule for each of them:

* ``eigh`` -> ``@Eigh`` (the custom call of JAX's TPU Jacobi rule, config
  "lower,sort_eigenvalues,100,1e-6") -> ``numpy.linalg.eigh`` (syevd/heevd:
  eigenvalues ascending); ``subset_by_index=(lo, hi)`` is a
  ``stablehlo.slice`` of the full result. ``implementation=QDWH`` uses JAX's
  TPU rule itself (platform-independent JAX code ending in ``@Eigh``).
* ``svd`` -> ``@stablehlo_ref.svd`` {full_matrices, compute_uv, driver} ->
  ``scipy.linalg.svd`` with gesdd (algorithm DEFAULT / DIVIDE_AND_CONQUER) or
  gesvd (QR); ``subset_by_index`` is a slice (singular values descending);
  POLAR keeps JAX's platform-independent (TPU) rule.
* ``eig`` -> ``@stablehlo_ref.eig`` {compute_left, compute_right} ->
  ``scipy.linalg.eig`` / ``eigvals`` (geev: complex w, vl, vr; unit-norm
  vectors with real largest component).
* ``schur`` -> ``@stablehlo_ref.schur`` {compute_schur_vectors} ->
  ``scipy.linalg.schur`` (gees, no sorting; real Schur form for real input).
* ``hessenberg`` -> ``@stablehlo_ref.hessenberg`` ->
  ``scipy.linalg.lapack.?gehrd`` (compact form + taus).
* ``tridiagonal`` -> ``@stablehlo_ref.tridiagonal`` {lower} ->
  ``scipy.linalg.lapack.?sytrd`` / ``?hetrd`` (compact form, d, e, taus).
* ``geqp3`` -> ``@stablehlo_ref.geqp3`` -> ``scipy.linalg.lapack.?geqp3``
  (plus ``?geqrf`` / ``?ormqr`` for columns that a nonzero ``jpvt`` fixes in
  front, as LAPACK does); used by ``jax.scipy.linalg.qr(pivoting=True)``.
* ``lu`` -> ``@stablehlo_ref.lu`` -> ``scipy.linalg.lapack.?getrf`` (LAPACK's
  pivots, 0-based, and their permutation); ``lu_pivots_to_permutation`` ->
  ``@stablehlo_ref.lu_pivots_to_permutation``; ``geqrf`` ->
  ``@stablehlo_ref.geqrf`` (``?geqrf``); ``householder_product`` ->
  ``@stablehlo_ref.householder_product`` (``?orgqr`` / ``?ungqr``);
  ``ormqr`` -> ``@stablehlo_ref.ormqr`` (``?ormqr`` / ``?unmqr``). JAX has
  platform-independent rules for these, but they are loops (a blocked LU
  around a fori_loop per column, fori_loops for the permutation and ormqr)
  that the interpreter runs op by op: solve/inv/det/slogdet/expm all go
  through ``lu``. They are replaced here (JAX's rule is kept for symbolic
  shapes).

The ``stablehlo_ref.*`` custom calls use API version 4 with their attributes
in ``mhlo.backend_config`` (a dictionary).

The kernels live in stablehlo_interpreter/ops/linalg_custom_calls.py (``@Eigh``
too). The custom calls take and return row-major
arrays with exactly the primitive's result shapes and types (unlike the CPU
FFI targets: no column-major layouts, no ``info`` output; a matrix LAPACK
cannot factor gives NaN results, as JAX's CPU rules produce from ``info``).

Which rules are needed is computed, not listed: a primitive of
``jax._src.lax.linalg`` is handled here only when JAX has neither a
platform-independent rule nor one for this platform, or when it is in
``_REPLACED`` (lu, lu_pivots_to_permutation, geqrf, householder_product,
ormqr, svd). Every other linalg primitive (cholesky, qr, triangular_solve,
tridiagonal_solve, ...) keeps JAX's own platform-independent rule (qr is
geqrf + householder_product; cholesky and triangular_solve are StableHLO
ops); ``svd`` has one too (the TPU QDWH/polar algorithm, a long StableHLO
program whose results differ from LAPACK's), which is replaced here by the
direct custom call, except for ``algorithm=SvdAlgorithm.POLAR`` which still
uses it.

Parameter combinations that XLA CPU rejects are rejected the same way, with
an error naming them (``sort_eig_vals`` for schur, svd ``algorithm=JACOBI``,
eig implementations other than LAPACK); symbolic (shape-polymorphic)
dimensions are rejected too. A linalg primitive without a default rule that
this module does not know (from a newer JAX) gets a rule raising
NotImplementedError that names it. Host callbacks (``debug_callback``,
``debug_print``, ``pure_callback``, ``io_callback``) have their rules in
callbacks.py.
"""

from __future__ import annotations

import logging
import threading

from . import compat

PLATFORM_NAME = "stablehlo_ref"

logger = logging.getLogger(__name__)

# Primitive name -> rule factory; filled by @_rule.
_RULES = {}


def _rule(name):
    def deco(fn):
        _RULES[name] = fn
        return fn
    return deco


# --------------------------------------------------------------------------
# Helpers.


def _custom_call(ctx, target, operands, avals_out, **attrs):
    """stablehlo.custom_call @target, API version 4, attrs in backend_config.

    Operands and results use the default (row-major) layout.
    """
    ffi = compat.jax_internal("", "ffi")
    rule = ffi.ffi_lowering(target)
    sub = ctx.replace(avals_out=list(avals_out))
    op = rule(sub, *operands, **attrs)
    return list(op) if not hasattr(op, "results") else list(op.results)


def _slice_last(ctx, x, aval_in, aval_out, axis, lo, hi):
    """x[..., lo:hi] along ``axis`` (negative, counted from the end)."""
    mlir = compat.jax_internal("interpreters", "mlir")
    rank = len(aval_in.shape)
    axis = axis + rank
    start = [0] * rank
    limit = list(aval_in.shape)
    start[axis] = lo
    limit[axis] = hi
    return mlir.slice_op(ctx, x, aval_out, start_indices=start,
                         limit_indices=limit, strides=[1] * rank)


def _require_static(name, avals):
    core = compat.jax_internal("", "core")
    for a in avals:
        if not core.is_constant_shape(a.shape):
            raise NotImplementedError(
                f"{name} on platform {PLATFORM_NAME}: shape-polymorphic "
                f"(symbolic) dimensions are not supported, got {a.shape}")


# --------------------------------------------------------------------------
# Rules.


@_rule("eigh")
def _eigh_rule(ctx, operand, *, lower, sort_eigenvalues, subset_by_index,
               algorithm=None):
    # (eigh_p has no `algorithm` parameter in JAX 0.8.0: QR then.)
    ShapedArray = compat.jax_internal("core", "ShapedArray")
    mlir = compat.jax_internal("interpreters", "mlir")
    linalg = compat.jax_internal("lax", "linalg")
    hlo = compat.jax_internal("lib.mlir.dialects", "hlo")

    if algorithm is not None and algorithm == linalg.EighImplementation.QDWH:
        tpu_eigh = compat.jax_internal("tpu.linalg", "eigh")
        return tpu_eigh._eigh_tpu_lowering(
            ctx, operand, lower=lower, sort_eigenvalues=sort_eigenvalues,
            subset_by_index=subset_by_index, algorithm=algorithm)
    operand_aval, = ctx.avals_in
    v_aval, w_aval = ctx.avals_out
    _require_static("eigh", [operand_aval])
    batch = operand_aval.shape[:-2]
    n = operand_aval.shape[-1]
    if n == 0:
        w = hlo.real(mlir.reshape(ctx, operand, operand_aval.update(shape=batch + (0,))))
        return [operand, w]
    full_v = ShapedArray(batch + (n, n), operand_aval.dtype)
    full_w = ShapedArray(batch + (n,), w_aval.dtype)
    # The TPU rule's custom call (its Jacobi path), which the interpreter
    # implements with LAPACK's syevd semantics: eigenvalues always ascending.
    v, w = mlir.custom_call(
        "Eigh",
        result_types=[compat.aval_to_ir_type(ctx.module_context, full_v),
                      compat.aval_to_ir_type(ctx.module_context, full_w)],
        operands=[operand],
        backend_config=f"{int(lower)},{int(sort_eigenvalues)},100,1e-6",
        api_version=1,
    ).results
    if subset_by_index is not None and tuple(subset_by_index) != (0, n):
        lo, hi = (int(i) for i in subset_by_index)
        v = _slice_last(ctx, v, full_v, v_aval, -1, lo, hi)
        w = _slice_last(ctx, w, full_w, w_aval, -1, lo, hi)
    return [v, w]


_DEFAULT_SVD_RULE = None


@_rule("svd")
def _svd_rule(ctx, operand, *, full_matrices, compute_uv, subset_by_index,
              algorithm=None):
    ShapedArray = compat.jax_internal("core", "ShapedArray")
    mlir = compat.jax_internal("interpreters", "mlir")
    linalg = compat.jax_internal("lax", "linalg")

    operand_aval, = ctx.avals_in
    _require_static("svd", [operand_aval])
    batch = operand_aval.shape[:-2]
    m, n = operand_aval.shape[-2:]
    k = min(m, n)
    if full_matrices is None:
        full_matrices = True
    # SvdAlgorithm has POLAR from JAX 0.8.3 and DIVIDE_AND_CONQUER from 0.10.0.
    polar = getattr(linalg.SvdAlgorithm, "POLAR", None)
    dnc = getattr(linalg.SvdAlgorithm, "DIVIDE_AND_CONQUER", None)
    if algorithm is not None and algorithm == polar and _DEFAULT_SVD_RULE is not None:
        # JAX's platform-independent (TPU) polar-decomposition SVD.
        return _DEFAULT_SVD_RULE(ctx, operand, full_matrices=full_matrices,
                                 compute_uv=compute_uv,
                                 subset_by_index=subset_by_index,
                                 algorithm=algorithm)
    if algorithm is None or algorithm in (linalg.SvdAlgorithm.DEFAULT, dnc):
        driver = "gesdd"
    elif algorithm == linalg.SvdAlgorithm.QR:
        driver = "gesvd"
    else:
        raise NotImplementedError(
            f"svd with algorithm={algorithm} is not supported on platform "
            f"{PLATFORM_NAME} (nor on XLA CPU); use DEFAULT, QR, "
            "DIVIDE_AND_CONQUER or POLAR")
    if m == 0 or n == 0:
        return mlir.lower_fun(linalg._empty_svd, multiple_results=True)(
            ctx, operand, full_matrices=full_matrices, compute_uv=compute_uv)

    s_full = ShapedArray(batch + (k,), ctx.avals_out[0].dtype)
    avals = [s_full]
    if compute_uv:
        avals += [ShapedArray(batch + (m, m if full_matrices else k), operand_aval.dtype),
                  ShapedArray(batch + (n if full_matrices else k, n), operand_aval.dtype)]
    outs = _custom_call(ctx, "stablehlo_ref.svd", [operand], avals,
                        full_matrices=bool(full_matrices),
                        compute_uv=bool(compute_uv), driver=driver)
    if subset_by_index is not None and tuple(subset_by_index) != (0, k):
        lo, hi = (int(i) for i in subset_by_index)
        # Singular values are descending: the subset is s[lo:hi].
        res = [_slice_last(ctx, outs[0], avals[0], ctx.avals_out[0], -1, lo, hi)]
        if compute_uv:
            res.append(_slice_last(ctx, outs[1], avals[1], ctx.avals_out[1], -1, lo, hi))
            res.append(_slice_last(ctx, outs[2], avals[2], ctx.avals_out[2], -2, lo, hi))
        outs = res
    return outs


@_rule("eig")
def _eig_rule(ctx, operand, *, compute_left_eigenvectors,
              compute_right_eigenvectors, enable_eigvec_derivs=False,
              implementation=None):
    linalg = compat.jax_internal("lax", "linalg")
    del enable_eigvec_derivs
    if implementation and implementation != linalg.EigImplementation.LAPACK:
        raise ValueError(
            f"eig implementation {implementation} is not supported on platform "
            f"{PLATFORM_NAME}; only the LAPACK implementation is (as on CPU).")
    _require_static("eig", ctx.avals_in)
    return _custom_call(ctx, "stablehlo_ref.eig", [operand], ctx.avals_out,
                        compute_left=bool(compute_left_eigenvectors),
                        compute_right=bool(compute_right_eigenvectors))


@_rule("schur")
def _schur_rule(ctx, operand, *, compute_schur_vectors, sort_eig_vals,
                select_callable=None):
    del select_callable
    if sort_eig_vals:
        raise NotImplementedError(
            f"schur with sort_eig_vals=True is not supported on platform "
            f"{PLATFORM_NAME} (nor on XLA CPU: LAPACK gees sorting is not "
            "implemented).")
    _require_static("schur", ctx.avals_in)
    return _custom_call(ctx, "stablehlo_ref.schur", [operand], ctx.avals_out,
                        compute_schur_vectors=bool(compute_schur_vectors))


@_rule("hessenberg")
def _hessenberg_rule(ctx, operand):
    _require_static("hessenberg", ctx.avals_in)
    return _custom_call(ctx, "stablehlo_ref.hessenberg", [operand], ctx.avals_out)


@_rule("tridiagonal")
def _tridiagonal_rule(ctx, operand, *, lower):
    _require_static("tridiagonal", ctx.avals_in)
    return _custom_call(ctx, "stablehlo_ref.tridiagonal", [operand], ctx.avals_out,
                        lower=bool(lower))


@_rule("geqp3")
def _geqp3_rule(ctx, operand, jpvt, *, use_magma=None):
    del use_magma  # a GPU-only choice
    _require_static("geqp3", ctx.avals_in)
    return _custom_call(ctx, "stablehlo_ref.geqp3", [operand, jpvt], ctx.avals_out)


# --------------------------------------------------------------------------
# Rules that replace JAX's platform-independent ones: those are loops
# (a blocked LU around a fori_loop per column, fori_loops for the pivots'
# permutation and ormqr) or hand-written Householder custom calls; one LAPACK
# call per matrix is hundreds of times faster in the interpreter, and gives
# LAPACK's own pivots/reflectors as XLA CPU does. Symbolic shapes keep
# JAX's default rule.

# Primitive name -> JAX's platform-independent rule (filled at registration).
_DEFAULT_RULES = {}


def _default_or_none(name, ctx, operands, params):
    core = compat.jax_internal("", "core")
    if all(core.is_constant_shape(a.shape) for a in list(ctx.avals_in) + list(ctx.avals_out)):
        return None
    return _DEFAULT_RULES[name](ctx, *operands, **params)


@_rule("lu")
def _lu_rule(ctx, operand):
    res = _default_or_none("lu", ctx, [operand], {})
    if res is not None:
        return res
    return _custom_call(ctx, "stablehlo_ref.lu", [operand], ctx.avals_out)


@_rule("lu_pivots_to_permutation")
def _lu_pivots_to_permutation_rule(ctx, pivots, *, permutation_size):
    res = _default_or_none("lu_pivots_to_permutation", ctx, [pivots],
                           {"permutation_size": permutation_size})
    if res is not None:
        return res
    return _custom_call(ctx, "stablehlo_ref.lu_pivots_to_permutation", [pivots],
                        ctx.avals_out, permutation_size=int(permutation_size))


@_rule("geqrf")
def _geqrf_rule(ctx, operand):
    res = _default_or_none("geqrf", ctx, [operand], {})
    if res is not None:
        return res
    return _custom_call(ctx, "stablehlo_ref.geqrf", [operand], ctx.avals_out)


@_rule("householder_product")
def _householder_product_rule(ctx, a, taus):
    res = _default_or_none("householder_product", ctx, [a, taus], {})
    if res is not None:
        return res
    return _custom_call(ctx, "stablehlo_ref.householder_product", [a, taus],
                        ctx.avals_out)


@_rule("ormqr")
def _ormqr_rule(ctx, a, taus, c, *, left, transpose):
    res = _default_or_none("ormqr", ctx, [a, taus, c],
                           {"left": left, "transpose": transpose})
    if res is not None:
        return res
    return _custom_call(ctx, "stablehlo_ref.ormqr", [a, taus, c], ctx.avals_out,
                        left=bool(left), transpose=bool(transpose))


# Primitives with a platform-independent JAX rule that this module replaces.
_REPLACED = ("svd", "lu", "lu_pivots_to_permutation", "geqrf",
             "householder_product", "ormqr")


# --------------------------------------------------------------------------
# Registration.


def _missing_rule_error(prim_name):
    def rule(ctx, *args, **params):
        raise NotImplementedError(
            f"primitive '{prim_name}' has no lowering for platform {PLATFORM_NAME}: "
            "JAX only has platform-specific (LAPACK / cuSOLVER) rules for it and "
            "stablehlo_pjrt does not implement it yet "
            "(see stablehlo_pjrt/lowerings.py)")
    return rule


def primitives_without_lowering():
    """The jax._src.lax.linalg primitives with no rule usable on an unknown platform."""
    core = compat.jax_internal("", "core")
    mlir = compat.jax_internal("interpreters", "mlir")
    linalg = compat.jax_internal("lax", "linalg")
    out = []
    for value in vars(linalg).values():
        if (isinstance(value, core.Primitive) and value not in mlir._lowerings
                and value not in out):
            out.append(value)
    return out


def register_lowerings(platform: str = PLATFORM_NAME) -> list[str]:
    """Register the stablehlo_ref rules; returns the primitive names handled.

    Each primitive is registered on its own: one that fails is logged and
    skipped. A linalg primitive without a default rule that this module does
    not know (a newer JAX) gets a rule raising a clear NotImplementedError.
    """
    global _DEFAULT_SVD_RULE
    mlir = compat.jax_internal("interpreters", "mlir")
    linalg = compat.jax_internal("lax", "linalg")

    registered = []
    specific = mlir._platform_specific_lowerings.get(platform, {})
    targets = {p.name: p for p in primitives_without_lowering()}
    # svd has a platform-independent rule (the TPU polar algorithm); a direct
    # LAPACK-equivalent custom call is faster and matches XLA CPU. The others
    # in _REPLACED have loops as platform-independent rules (see above).
    for name in _REPLACED:
        prim = getattr(linalg, f"{name}_p", None)
        if prim is None:
            continue
        entry = mlir._lowerings.get(prim)
        default = getattr(entry, "rule", None) if entry is not None else None
        if name != "svd" and default is None:
            continue   # a JAX without the default rule this one falls back to
        targets[name] = prim
        _DEFAULT_RULES.setdefault(name, default)
    entry = mlir._lowerings.get(linalg.svd_p)
    if entry is not None and _DEFAULT_SVD_RULE is None:
        _DEFAULT_SVD_RULE = getattr(entry, "rule", None)
    for name, prim in sorted(targets.items()):
        if prim in specific:
            continue  # someone (a newer JAX) already provides one
        rule = _RULES.get(name) or _missing_rule_error(name)
        try:
            mlir.register_lowering(prim, rule, platform=platform)
        except Exception:  # noqa: BLE001 - never break plugin initialization
            logger.warning("%s: cannot register a lowering for primitive %r",
                           platform, name, exc_info=True)
            continue
        registered.append(name)
    return registered


# --------------------------------------------------------------------------
# Accurate elementwise functions
#
# JAX lowers some elementwise primitives to a chain of f32 ops for every
# platform (logistic as 1 / (1 + exp(-x)): ~1.3 ULP in f32, hundreds in f16)
# and serializes chlo.erfc / erf_inv / lgamma / digamma for plugins as their
# f32 polynomial decompositions (up to ~50 ULP).  On stablehlo_ref they become
# ops the interpreter computes in float64 and rounds once: stablehlo.logistic,
# and stablehlo.composite "chlo.<op>" whose decomposition is JAX's own generic
# lowering (any other backend that runs the module gets exactly what JAX would
# have emitted; the interpreter runs the op: ops/control.py DIRECT_COMPOSITES).

# Which: the chlo ops with the interpreter's "jax_composite" trait (the
# primitive of jax._src.lax.special has the op's name).
# Set while a composite's decomposition is being lowered, so the primitive
# inside it takes JAX's generic rule instead of this module's (no recursion).
_IN_DECOMPOSITION = threading.local()


def _logistic_rule(generic):
    def rule(ctx, x, accuracy=None):
        import numpy as np
        mlir = compat.jax_internal("interpreters", "mlir")
        hlo = compat.jax_internal("lib.mlir.dialects", "hlo")
        if np.dtype(ctx.avals_out[0].dtype).kind == "c":
            # complex: JAX's formula, whose infinities XLA CPU shares
            return generic(ctx, x, accuracy=accuracy)
        # The interpreter's logistic is correctly rounded: the highest accuracy.
        return [mlir.lower_with_sharding_in_types(ctx, hlo.logistic(x), ctx.avals_out[0])]
    return rule


def _composite_rule(prim, chlo_name, generic):
    def rule(ctx, *args, **params):
        from jax import lax
        mlir = compat.jax_internal("interpreters", "mlir")
        if getattr(_IN_DECOMPOSITION, "active", False):
            return generic(ctx, *args, **params)
        _IN_DECOMPOSITION.active = True
        try:
            fn = lax.composite(lambda *xs: prim.bind(*xs, **params), name=chlo_name)
            return mlir.lower_fun(fn, multiple_results=False)(ctx, *args)
        finally:
            _IN_DECOMPOSITION.active = False
    return rule


def register_accurate_lowerings(platform: str = PLATFORM_NAME) -> list[str]:
    """Register the rules above; returns the primitive names handled."""
    mlir = compat.jax_internal("interpreters", "mlir")
    lax_internal = compat.jax_internal("lax", "lax")
    special = compat.jax_internal("lax", "special")

    rules = {}
    logistic = getattr(mlir._lowerings.get(lax_internal.logistic_p), "rule", None)
    if logistic is not None:
        rules[lax_internal.logistic_p] = _logistic_rule(logistic)
    from stablehlo_interpreter import with_trait
    for chlo_name in sorted(with_trait("jax_composite")):
        prim = getattr(special, f"{chlo_name.split('.', 1)[1]}_p", None)
        entry = mlir._lowerings.get(prim) if prim is not None else None
        generic = getattr(entry, "rule", None)
        if generic is not None:
            rules[prim] = _composite_rule(prim, chlo_name, generic)
    registered = []
    for prim, rule in rules.items():
        try:
            mlir.register_lowering(prim, rule, platform=platform)
        except Exception:  # noqa: BLE001 - never break plugin initialization
            logger.warning("%s: cannot register a lowering for primitive %r",
                           platform, prim.name, exc_info=True)
            continue
        registered.append(prim.name)
    return registered
