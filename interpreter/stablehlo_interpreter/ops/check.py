"""The `check` dialect of the conformance suites, and its custom-call spellings.

Upstream (openxla/stablehlo ``stablehlo/tests/CheckOps.td``/``CheckOps.cpp``
and the interpreter fallback in ``stablehlo/tools/StablehloTranslateMain.cpp``)
defines these assertions; jaxlib does not ship the dialect, so they reach us
as unregistered ops in generic form (``"check.expect_eq"(%a, %b) : ...``,
attributes either in ``{...}`` or as ``<{...}>`` properties) or as
``stablehlo.custom_call @check.*`` in the JAX-generated testdata.

Semantics (following upstream, see each builder):

* ``expect_eq`` / ``expect_eq_const``: exact. Floats compare by value
  (``-0.0 == 0.0`` as APFloat ``==`` does upstream); unlike upstream's APFloat
  comparison, NaN equals NaN, as the suite's README states.
* ``expect_almost_eq`` / ``_const``: absolute tolerance (default ``1e-4`` for
  the dialect ops, ``1e-3`` for ``@check.expect_almost_eq``); NaN equals NaN,
  infinities must match exactly.
* ``expect_close``: ULP distance within ``[min_ulp_difference,
  max_ulp_difference]`` (dialect default max 1, min 0; ``@check.expect_close``
  uses 0..3). Non-finite values must be bitwise equal or both NaN.
* ``@check.eq``: integers/bools exact, floats almost-equal at ``1e-4``;
  returns ``tensor<i1>`` true (a mismatch raises).
* ``expect_serialized_eq``: compares with a tensor saved by
  ``interpreter.probe`` (see :mod:`.interpreter_ops`).

A failure raises :class:`CheckFailure` naming the op, its location, the first
differing index and both values.
"""


import numpy as np

from .. import dtypes
from ..errors import CheckFailure
from ..registry import Unsupported, custom_call, kernel
from .interpreter_ops import load_probe
from .properties import op_properties

# --------------------------------------------------------------------------
# Attributes: `{...}` attributes, or `<{...}>` properties of unregistered ops
# (which the Python bindings do not expose as attributes).


def _attrs_of(op):
    merged = op_properties(op)
    merged.update(op.attrs)
    return merged


def _value_attr(op, attrs):
    v = attrs.get("value")
    if v is None:
        raise Unsupported(f"{op.name} needs a `value` attribute")
    if not isinstance(v, np.ndarray):
        raise Unsupported(f"{op.name}: `value` is not a dense elements attribute ({v!r})")
    return v


# --------------------------------------------------------------------------
# Element comparisons (vectorised; each returns a boolean "ok" mask).


def _as_comparable(x):
    """An array numpy compares correctly: ml_dtypes floats/sub-byte ints widened."""
    dt = x.dtype
    if dt in dtypes.ML_FLOATS:
        return x.astype(np.float64)
    if dt in dtypes.SUB_BYTE_INTS:
        return x.astype(np.int64)
    return x


def _float_eq(a, b):
    return (a == b) | (np.isnan(a) & np.isnan(b))


def eq_mask(actual, expected):
    """Exact equality per element (NaN == NaN, -0.0 == 0.0)."""
    a, b = _as_comparable(actual), _as_comparable(expected)
    if dtypes.is_complex(a.dtype):
        return _float_eq(a.real, b.real) & _float_eq(a.imag, b.imag)
    if a.dtype.kind == "f":
        return _float_eq(a, b)
    return a == b


def _float_almost(a, b, tol):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    with np.errstate(all="ignore"):
        close = np.isfinite(a) & np.isfinite(b) & (np.abs(a - b) <= tol)
    return (a == b) | (np.isnan(a) & np.isnan(b)) | close


def almost_eq_mask(actual, expected, tol):
    """Absolute-tolerance equality (upstream `areApproximatelyEqual`)."""
    a, b = _as_comparable(actual), _as_comparable(expected)
    if dtypes.is_complex(a.dtype):
        return _float_almost(a.real, b.real, tol) & _float_almost(a.imag, b.imag, tol)
    if a.dtype.kind == "f":
        return _float_almost(a, b, tol)
    return a == b  # integers / booleans: upstream only accepts floats; be exact


# --------------------------------------------------------------------------
# Failure reporting


def _fmt(x):
    if isinstance(x, (np.bool_, bool)):
        return "true" if x else "false"
    if isinstance(x, np.generic) and x.dtype in dtypes.ML_FLOATS:
        return repr(float(x))
    if isinstance(x, (np.floating, float)):
        return repr(float(x))
    if isinstance(x, (np.complexfloating, complex)):
        c = complex(x)
        return f"({c.real!r}, {c.imag!r})"
    if isinstance(x, np.generic) and x.dtype in dtypes.SUB_BYTE_INTS:
        return str(int(x))
    return str(x.item() if isinstance(x, np.generic) else x)


def _fail(op, message):
    name = op.name
    if name == "stablehlo.custom_call":
        name = f"stablehlo.custom_call @{op.attrs.get('call_target_name')}"
    raise CheckFailure(f"{name} at {op.location}: {message}", op.name, op.location)


def _check_shapes(op, actual, expected):
    if not isinstance(actual, np.ndarray):
        _fail(op, f"expected a tensor, got {type(actual).__name__}")
    if actual.shape != expected.shape:
        _fail(op, f"shape mismatch: actual {actual.shape} vs expected {expected.shape}")
    if actual.dtype != expected.dtype:
        _fail(op, f"element type mismatch: actual {actual.dtype} vs expected "
                  f"{expected.dtype}")


def _report(op, actual, expected, ok, what, extra=None):
    bad = np.argwhere(~np.asarray(ok).reshape(actual.shape)) if actual.ndim else (
        [()] if not bool(ok) else [])
    if len(bad) == 0:
        return
    idx = tuple(int(i) for i in bad[0])
    msg = (f"{what}: element values don't match at index {list(idx)}: "
           f"{_fmt(actual[idx])} (actual) vs {_fmt(expected[idx])} (expected)")
    if extra is not None:
        msg += f", {extra(idx)}"
    msg += f" ({len(bad)} of {actual.size} elements differ)"
    _fail(op, msg)


def run_expect_eq(op, actual, expected):
    _check_shapes(op, actual, expected)
    _report(op, actual, expected, eq_mask(actual, expected), "expected exact equality")


def run_expect_almost_eq(op, actual, expected, tol):
    _check_shapes(op, actual, expected)
    _report(op, actual, expected, almost_eq_mask(actual, expected, tol),
            f"expected equality within tolerance {tol:g}")


def run_expect_close(op, actual, expected, min_ulp, max_ulp):
    _check_shapes(op, actual, expected)
    if not (dtypes.is_float(actual.dtype) or dtypes.is_complex(actual.dtype)):
        # Upstream rejects non-float operands; exact equality is the natural reading.
        return run_expect_eq(op, actual, expected)
    ulps = dtypes.ulp_distance(actual, expected)
    ok = (ulps <= np.uint64(max_ulp)) & (ulps >= np.uint64(min_ulp))
    _report(op, actual, expected, ok,
            f"expected ULP difference in [{min_ulp}, {max_ulp}]",
            extra=lambda idx: f"ULP difference={int(ulps[idx])}")


# --------------------------------------------------------------------------
# Kernels: the check dialect


def _tolerance(op, attrs, default):
    tol = attrs.get("tolerance", default)
    if not isinstance(tol, (int, float)):
        raise Unsupported(f"{op.name}: bad tolerance {tol!r}")
    return float(tol)


@kernel("check.expect_eq")
def expect_eq(op):
    """CheckOps.td ExpectEqOp: operands exactly equal."""
    def run(actual, expected):
        run_expect_eq(op, actual, expected)
        return ()
    return run


@kernel("check.expect_eq_const")
def expect_eq_const(op):
    """CheckOps.td ExpectEqConstOp: operand exactly equal to `value`."""
    expected = _value_attr(op, _attrs_of(op))

    def run(actual):
        run_expect_eq(op, actual, expected)
        return ()
    return run


@kernel("check.expect_almost_eq")
def expect_almost_eq(op):
    """CheckOps.td ExpectAlmostEqOp: absolute `tolerance` (default 1e-4)."""
    tol = _tolerance(op, _attrs_of(op), 1e-4)

    def run(actual, expected):
        run_expect_almost_eq(op, actual, expected, tol)
        return ()
    return run


@kernel("check.expect_almost_eq_const")
def expect_almost_eq_const(op):
    """CheckOps.td ExpectAlmostEqConstOp: absolute `tolerance` (default 1e-4)."""
    attrs = _attrs_of(op)
    expected = _value_attr(op, attrs)
    tol = _tolerance(op, attrs, 1e-4)

    def run(actual):
        run_expect_almost_eq(op, actual, expected, tol)
        return ()
    return run


@kernel("check.expect_close")
def expect_close(op):
    """CheckOps.td ExpectCloseOp: ULP distance in [min, max] (defaults 0, 1)."""
    attrs = _attrs_of(op)
    max_ulp = int(attrs.get("max_ulp_difference", 1))
    min_ulp = int(attrs.get("min_ulp_difference", 0))

    def run(actual, expected):
        run_expect_close(op, actual, expected, min_ulp, max_ulp)
        return ()
    return run


@kernel("check.expect_serialized_eq", special=True)
def expect_serialized_eq(op):
    """CheckOps.td ExpectSerializedEqOp: equal to the `iteration`-th value probed
    under `probe_id` (by ``interpreter.probe``) in this run or in the probe dir."""
    attrs = _attrs_of(op)
    probe_id = attrs.get("probe_id")
    if not isinstance(probe_id, str):
        raise Unsupported("check.expect_serialized_eq needs a string probe_id")
    iteration = int(attrs.get("iteration", attrs.get("iter", 0)))
    ttype = op.operand_types[0]

    def run(ctx, regions, value):
        saved = load_probe(ctx, probe_id, iteration, ttype)
        if saved is None:
            _fail(op, f"no serialized data for probe {probe_id!r} "
                      f"(iteration {iteration})")
        run_expect_eq(op, value, saved)
        return ()
    return run


# --------------------------------------------------------------------------
# Kernels: `stablehlo.custom_call @check.*` (testdata), as upstream's
# StablehloTranslateInterpreterFallback evaluates them.


def _two_operands(op):
    if len(op.operand_types) != 2:
        raise Unsupported(f"@{op.attrs.get('call_target_name')} takes 2 operands, "
                          f"got {len(op.operand_types)}")


@custom_call("check.expect_eq")
def cc_expect_eq(op):
    """StablehloTranslateMain.cpp fallback: @check.expect_eq is exact."""
    _two_operands(op)

    def run(actual, expected):
        run_expect_eq(op, actual, expected)
        return ()
    return run


@custom_call("check.expect_almost_eq")
def cc_expect_almost_eq(op):
    """StablehloTranslateMain.cpp fallback: @check.expect_almost_eq, tolerance 1e-3."""
    _two_operands(op)

    def run(actual, expected):
        run_expect_almost_eq(op, actual, expected, 1e-3)
        return ()
    return run


@custom_call("check.expect_close")
def cc_expect_close(op):
    """StablehloTranslateMain.cpp fallback: @check.expect_close, 0 to 3 ULP."""
    _two_operands(op)

    def run(actual, expected):
        run_expect_close(op, actual, expected, 0, 3)
        return ()
    return run


@custom_call("check.eq")
def cc_eq(op):
    """StablehloTranslateMain.cpp `evalCustomCallCheckEq`: integer (and i1)
    operands exact, others almost-equal at 1e-4; yields `tensor<i1>` true
    (a mismatch raises, as upstream's status does)."""
    _two_operands(op)
    is_int = dtypes.is_integer(op.operand_types[1].dtype) or dtypes.is_bool(
        op.operand_types[1].dtype)
    n = op.num_results

    def run(actual, expected):
        if is_int:
            run_expect_eq(op, actual, expected)
        else:
            run_expect_almost_eq(op, actual, expected, 1e-4)
        if n == 0:
            return ()
        return np.array(True)
    return run
