"""The named causes of a legitimate difference, and the re-runs that test them.

Each cause is a hypothesis about what a correct backend did differently;
the oracle accepts it only after re-running the reference under it and
seeing the difference disappear (docs/oracle.md lists them):

``summation-order``
    the difference is inside the rounding bound of the program
    (bounds.py): sums taken in another order, rounding amplified by the
    program's condition.
``reduced-precision-inputs``
    dot/convolution operands rounded to TF32 (to nearest even, nearest with
    ties away, or toward zero), bf16 or bf16x3 (three bf16 products); only
    where the op's precision config is DEFAULT or HIGH.
``excess-precision``
    the backend kept a value wider than the program's bf16/f16 type (it
    skipped a rounding the program asks for).
``flush-to-zero``
    subnormal inputs or results taken as zero.
``transcendental-accuracy``
    an elementwise function (exp, tanh, lgamma, ...) is less accurate than
    the reference but within TRANSCENDENTAL_BACKWARD_ULPS ULPs of the
    correctly rounded result, or of the result for an input that many ULPs
    away (lgamma, digamma: also that many ULPs of 1); both sides are
    measured against a truth computed with mpmath.
``approximate-division``
    a floating-point divide that is not correctly rounded (StableHLO's
    divide is IEEE division) but within APPROXIMATE_DIVISION_ULPS of the
    exact quotient: what GPUs compute by default (CUDA's div.full.f32).
``nan-payload``, ``signed-zero``
    NaNs with other bits, zeros of the other sign.
``unexplained``
    none of the above: the finding.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Iterable

import numpy as np

from stablehlo_interpreter import with_trait

CAUSES = ("summation-order", "reduced-precision-inputs", "excess-precision",
          "flush-to-zero", "transcendental-accuracy", "approximate-division",
          "nan-payload", "signed-zero")
UNEXPLAINED = "unexplained"

# Formats a DEFAULT/HIGH dot may round its operands to: (mantissa bits, the
# rounding of the f32 operand), or None for bf16x3 (three bf16 products).
# TF32 comes in the three roundings hardware and compilers use: to nearest
# even (cuBLAS, cuDNN), to nearest with ties away from zero (PTX
# cvt.rna.tf32.f32, what XLA's Triton GEMMs emit) and toward zero (tensor
# cores fed raw f32 bits ignore the low 13 mantissa bits).
REDUCED_FORMATS: dict[str, tuple[int, str] | None] = {
    "tf32": (10, "nearest-even"), "tf32-rna": (10, "nearest-away"),
    "tf32-rz": (10, "toward-zero"), "bf16": (7, "nearest-even"), "bf16x3": None}
# How far from the exact quotient an approximate division may be: CUDA
# documents 2 ULPs for div.full.f32 and for x/y compiled with
# -prec-div=false (CUDA C++ Programming Guide, "Mathematical Functions",
# single precision: "x/y ... 2 ulp" without IEEE-compliant division).
APPROXIMATE_DIVISION_ULPS = 2.0
# How far a transcendental function's result may be from a correctly rounded
# one of an input this many ULPs away (backward error), or this many ULPs of
# the result (forward error), to count as an accuracy difference, not a bug.
TRANSCENDENTAL_BACKWARD_ULPS = 32.0
# Functions evaluated by cancelling terms of order one (lgamma, digamma):
# their usual implementations err by a few ULPs of 1, not of the result,
# near their zeros and extrema; they get that absolute floor as well.
ABSOLUTE_FLOOR = frozenset({"chlo.lgamma", "chlo.digamma"})


def check_names(names: str | Iterable[str] | None) -> set[str]:
    """The cause names of ``allow``/``forbid``, checked."""
    if names is None:
        return set()
    if isinstance(names, str):
        names = [names]
    found = set(names)
    bad = found - set(CAUSES)
    if bad:
        raise ValueError(f"unknown cause(s) {sorted(bad)}; the causes are {list(CAUSES)}")
    return found


def bit_causes(ref: np.ndarray, other: np.ndarray) -> set[str] | None:
    """The causes of the difference when the arrays are equal up to NaN
    payloads and zero signs (None when they differ otherwise)."""
    r, o = np.asarray(ref), np.asarray(other)
    if r.dtype.kind not in "fc" and r.dtype.name not in _ML_FLOATS:
        return None
    r64, o64 = r.astype(np.complex128 if r.dtype.kind == "c" else np.float64), \
        o.astype(np.complex128 if r.dtype.kind == "c" else np.float64)
    rn, on = np.isnan(r64), np.isnan(o64)
    if not np.array_equal(rn, on):
        return None
    if not np.array_equal(r64[~rn], o64[~on]):
        return None
    causes: set[str] = set()
    if rn.any() and r.view(_uint(r)).tolist() != o.view(_uint(o)).tolist():
        rb, ob = r.view(_uint(r)), o.view(_uint(o))
        if np.any(rb[rn] != ob[on]):
            causes.add("nan-payload")
    zeros = (r64 == 0) & ~rn
    if np.any(np.signbit(r64.real[zeros]) != np.signbit(o64.real[zeros])):
        causes.add("signed-zero")
    return causes


_ML_FLOATS = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
              "float8_e5m2fnuz", "float8_e4m3b11fnuz")


def _uint(a: Any) -> np.dtype[Any]:
    return np.dtype(f"u{np.asarray(a).dtype.itemsize}")


def _finfo(dtype: Any) -> Any:
    """ml_dtypes' finfo (bf16 and f8 too; ml_dtypes has no type hints)."""
    import ml_dtypes
    return ml_dtypes.finfo(dtype)  # type: ignore[no-untyped-call]


def flush_subnormals(a: np.ndarray) -> np.ndarray:
    """``a`` with subnormal floats replaced by zeros of the same sign."""
    a = np.asarray(a)
    if a.dtype.kind != "f" and a.dtype.name not in _ML_FLOATS:
        return a
    tiny = float(_finfo(a.dtype).tiny)
    x = a.astype(np.float64)
    sub = (x != 0) & (np.abs(x) < tiny)
    if not sub.any():
        return a
    out = a.copy()
    out[sub] = np.copysign(0.0, x[sub]).astype(a.dtype)
    return out


def ftz_explains(ref: np.ndarray, other: np.ndarray, bad: np.ndarray) -> bool:
    """Every element in ``bad`` is one where one side is a subnormal (or
    zero) and the other a zero (or subnormal)."""
    r = np.asarray(ref)
    try:
        tiny = float(_finfo(r.dtype).tiny)
    except (TypeError, ValueError):
        return False
    r64, o64 = r.astype(np.float64)[bad], np.asarray(other).astype(np.float64)[bad]
    return bool(np.all(((np.abs(r64) < tiny) & (o64 == 0)) |
                       ((np.abs(o64) < tiny) & (r64 == 0))))


_NARROW = re.compile(r"(?<=[x< (,:])(bf16|f16|f8E4M3FN|f8E5M2)(?![A-Za-z0-9])")


_CONVERT = re.compile(r"^(\s*%\S+ = )stablehlo\.convert (%[^ ]+) : \(tensor<([^>]*)>\) -> "
                      r"tensor<([^>]*)>(.*)$")
_FORMATS = {"bf16": "e8m7", "f16": "e5m10", "f8E4M3FN": "e4m3", "f8E5M2": "e5m2"}


# Cached: a program judged again is not rewritten again (the text is the key).
@functools.lru_cache(maxsize=32)
def widen_module(text: str, keep_converts: bool = False) -> str | None:
    """The module with its bf16/f16/f8 element types computed in f32 (the
    hypothesis of ``excess-precision``), or None when it has none.
    ``keep_converts``: an explicit convert from a wider type still rounds
    (as a reduce_precision), so only the roundings of arithmetic results
    are skipped: what XLA does when it computes bf16 ops in f32 and drops
    the convert pairs between them."""
    if not _NARROW.search(text):
        return None
    lines = []
    for line in text.splitlines():
        m = _CONVERT.match(line) if keep_converts else None
        if m:
            src, dst = m.group(3), m.group(4)
            fmt = next((f for n, f in _FORMATS.items()
                        if dst.endswith("x" + n) or dst == n), None)
            if fmt and (src.endswith("f32") or src.endswith("f64")):
                wide = _NARROW.sub("f32", src)
                lines.append(f"{m.group(1)}stablehlo.reduce_precision {m.group(2)}, "
                             f"format = {fmt} : tensor<{wide}>{m.group(5)}")
                continue
        lines.append(_NARROW.sub("f32", line))
    return "\n".join(lines)


def round_mantissa(a: np.ndarray, mantissa_bits: int,
                   mode: str = "nearest-even") -> np.ndarray:
    """``a`` (float32) rounded with ``mantissa_bits`` explicit mantissa bits
    (TF32: 10, bf16: 7), exponent range kept; ``mode`` is "nearest-even",
    "nearest-away" (ties away from zero) or "toward-zero" (truncation)."""
    a = np.ascontiguousarray(a, np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    drop = np.uint64(23 - mantissa_bits)
    half = np.uint64(1 << (23 - mantissa_bits - 1))
    if mode == "nearest-even":
        bits = bits + half - np.uint64(1) + ((bits >> drop) & np.uint64(1))
    elif mode == "nearest-away":
        bits = bits + half
    elif mode != "toward-zero":
        raise ValueError(f"unknown rounding mode {mode!r}")
    out = ((bits >> drop) << drop).astype(np.uint32).view(np.float32)
    return np.where(np.isfinite(a), out, a)


def reduced_operands(fmt: str, operands: list[Any]) -> list[list[np.ndarray]]:
    """The operand lists whose dot products, summed, are what a backend
    computing in ``fmt`` (a REDUCED_FORMATS key) gets: one list for the
    single formats, three (hi*hi, hi*lo, lo*hi) for bf16x3."""
    ops = [np.asarray(x) for x in operands]
    if fmt == "bf16x3":
        hi = [round_mantissa(x, 7) for x in ops]
        lo = [round_mantissa(x.astype(np.float32) - h, 7) for x, h in zip(ops, hi)]
        return [[hi[0], hi[1]], [hi[0], lo[1]], [lo[0], hi[1]]]
    spec = REDUCED_FORMATS[fmt]
    if spec is None:
        raise ValueError(f"{fmt}: not one rounding format")
    mant, mode = spec
    return [[round_mantissa(x, mant, mode) if x.dtype == np.float32 else x for x in ops]]


def format_label(fmt: str) -> str:
    """How a report names a REDUCED_FORMATS entry."""
    spec = REDUCED_FORMATS[fmt]
    if spec is None:
        return "bf16x3 (hi*hi + hi*lo + lo*hi)"
    how = {"nearest-even": "to nearest even", "nearest-away": "to nearest, ties away from "
           "zero", "toward-zero": "toward zero"}[spec[1]]
    return f"{fmt.split('-')[0]} (rounded {how})"


def mp_truth(op_name: str, inputs: list[Any]) -> np.ndarray | None:
    """A correctly rounded (float64 of a 50-digit mpmath value) result of an
    elementwise function at each element of ``inputs``, or None when the
    function has no mpmath counterpart here."""
    try:
        import mpmath
    except ImportError:
        return None
    name = op_name.split(".")[-1]
    table = {
        "exponential": mpmath.exp, "log": mpmath.log, "tanh": mpmath.tanh,
        "sine": mpmath.sin, "cosine": mpmath.cos, "tan": mpmath.tan,
        "lgamma": lambda x: mpmath.log(abs(mpmath.gamma(x))),
        "digamma": mpmath.digamma, "erf": mpmath.erf, "erfc": mpmath.erfc,
        "exponential_minus_one": mpmath.expm1, "log_plus_one": mpmath.log1p,
        "logistic": lambda x: 1 / (1 + mpmath.exp(-x)), "sqrt": mpmath.sqrt,
        "rsqrt": lambda x: 1 / mpmath.sqrt(x), "cbrt": mpmath.cbrt,
        "atan": mpmath.atan, "asin": mpmath.asin, "acos": mpmath.acos,
        "sinh": mpmath.sinh, "cosh": mpmath.cosh, "asinh": mpmath.asinh,
        "acosh": mpmath.acosh, "atanh": mpmath.atanh,
    }
    fn = table.get(name)
    if fn is None or len(inputs) != 1:
        return None
    x = np.asarray(inputs[0]).astype(np.float64).reshape(-1)
    out = np.empty_like(x)
    with mpmath.workdps(50):
        for i, v in enumerate(x):
            try:
                out[i] = float(mpmath.re(fn(mpmath.mpf(float(v)))))
            except (ValueError, ZeroDivisionError, OverflowError):
                out[i] = np.nan
    return out


TRANSCENDENTAL_OPS = with_trait("transcendental")  # registry.TRAITS


def _spacing(dtype: np.dtype[Any], v: np.ndarray) -> np.ndarray:
    """The ULP of ``dtype`` at |v| (float64 values; bf16/f8 from finfo)."""
    fi = _finfo(dtype)
    if dtype.kind == "f":
        sp = np.abs(np.spacing(np.abs(v).astype(dtype)).astype(np.float64))
    else:
        sp = np.maximum(np.abs(v) * float(fi.eps), float(fi.tiny))
    return np.asarray(np.maximum(sp, float(fi.smallest_subnormal)))


def division_verdict(x: np.ndarray, y: np.ndarray, ref: np.ndarray, other: np.ndarray,
                     bad: np.ndarray) -> tuple[bool, str]:
    """(explained, text) for a real divide whose other-side quotients differ
    from the reference's correctly rounded ones at ``bad``: whether each is
    within APPROXIMATE_DIVISION_ULPS of the exact quotient (the float64
    quotient of the operands, exact to 2^-53 relative for f32 and narrower)."""
    dtype = np.asarray(ref).dtype
    if dtype.itemsize > 4:
        return False, "stablehlo.divide: not correctly rounded (float64: no exact quotient here)"
    bad = np.asarray(bad).reshape(-1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        exact = (np.broadcast_to(np.asarray(x, np.float64), np.shape(ref)).reshape(-1)[bad] /
                 np.broadcast_to(np.asarray(y, np.float64), np.shape(ref)).reshape(-1)[bad])
    o = np.asarray(other).astype(np.float64).reshape(-1)[bad]
    finite = np.isfinite(exact) & np.isfinite(o)
    same = (o == exact) | (np.isnan(o) & np.isnan(exact))
    with np.errstate(invalid="ignore"):
        err = np.where(finite, np.abs(o - exact) / _spacing(dtype, exact), np.inf)
    err = np.where(same, 0.0, err)
    k = APPROXIMATE_DIVISION_ULPS
    worst = float(np.max(err)) if err.size else 0.0
    text = (f"stablehlo.divide: {int(bad.sum())} of {np.size(ref)} quotient(s) not correctly "
            f"rounded (StableHLO's divide is IEEE division); vs the exact quotient the other "
            f"side errs by at most {worst:.3g} ULP")
    if worst <= k:
        return True, text + (f", within the {k:g} ULPs of an approximate division (CUDA's "
                             "div.full.f32)")
    return False, text + f", more than an approximate division's {k:g} ULPs"


def transcendental_verdict(op_name: str, x: np.ndarray, ref: np.ndarray,
                           other: np.ndarray, bad: np.ndarray,
                           limit: int = 2048) -> tuple[bool, str]:
    """(explained, text) for a one-input elementwise function whose results
    differ at ``bad``: measures both sides in ULPs of a correctly rounded
    truth at (up to ``limit`` of) those elements, and whether the other side
    is within TRANSCENDENTAL_BACKWARD_ULPS of the truth at an input that
    many ULPs away (|f'(x)| * k * ulp(x), from the truth's finite
    difference) or that many ULPs of the result."""
    bad = np.asarray(bad).reshape(-1)
    gap = np.abs(np.asarray(other, np.float64) - np.asarray(ref, np.float64)).reshape(-1)
    idx = np.flatnonzero(bad)
    idx = idx[np.argsort(-np.where(np.isfinite(gap[idx]), gap[idx], np.inf),
                         kind="stable")][:limit]   # the largest differences
    if idx.size == 0:
        return True, ""
    xs = np.asarray(x).reshape(-1)[idx]
    truth = mp_truth(op_name, [xs])
    if truth is None:
        return False, f"{op_name}: no correctly rounded truth available"
    dtype = np.asarray(ref).dtype
    fi = _finfo(dtype)
    r = np.asarray(ref).reshape(-1)[idx].astype(np.float64)
    o = np.asarray(other).reshape(-1)[idx].astype(np.float64)
    ulp_y = _spacing(dtype, np.maximum(np.abs(truth), np.abs(r)))
    k = TRANSCENDENTAL_BACKWARD_ULPS
    dx = k * _spacing(dtype, xs.astype(np.float64))
    up = mp_truth(op_name, [xs.astype(np.float64) + dx])
    dn = mp_truth(op_name, [xs.astype(np.float64) - dx])
    with np.errstate(invalid="ignore"):
        reach = np.nanmax(np.abs(np.stack([up - truth, dn - truth])), axis=0)
    reach = np.where(np.isfinite(reach), reach, 0.0)
    allowed = np.maximum(k * ulp_y, reach)
    if op_name in ABSOLUTE_FLOOR:
        allowed = np.maximum(allowed, k * float(fi.eps))
    err_r, err_o = np.abs(r - truth) / ulp_y, np.abs(o - truth) / ulp_y
    ok = bool(np.all(np.abs(o - truth) <= allowed))
    closer = "the reference" if np.max(err_r) < np.max(err_o) else "the other side"
    text = (f"{op_name}: vs a correctly rounded truth (mpmath) at {idx.size} differing "
            f"element(s), the reference errs by at most {np.max(err_r):.3g} ULP, the other "
            f"side by {np.max(err_o):.3g} ULP; {closer} is closer")
    if ok:
        text += (f"; the other side is within the result for an input at most {k:g} ULPs "
                 "away (an accuracy difference, not a bug)")
    else:
        text += f"; the other side is farther than an input {k:g} ULPs away explains"
    return ok, text


@functools.lru_cache(maxsize=32)
def skip_final_roundings(text: str) -> str | None:
    """The module where each bf16/f16 elementwise result that the program
    converts straight back to f32 is computed in f32 instead (None when
    there is none): what XLA does when it computes narrow ops in f32 and
    then removes the f32 -> bf16 -> f32 convert pair at the program's
    explicit widening (its float normalization and convert-pair
    simplification)."""
    from jaxlib.mlir import ir

    import stablehlo_interpreter as shi
    from stablehlo_interpreter import MLIR_LOCK
    loaded = shi.load(text, name="<excess precision>")
    changed = False
    with MLIR_LOCK, loaded.context, ir.Location.unknown():
        module = ir.Module.parse(loaded.mlir.operation.get_asm(enable_debug_info=True))
        f32 = ir.F32Type.get()
        for f in module.body.operations:
            if f.operation.name != "func.func" or not f.operation.regions[0].blocks:
                continue
            for op in list(f.operation.regions[0].blocks[0].operations):
                op = op.operation
                if op.name != "stablehlo.convert":
                    continue
                src, dst = (ir.RankedTensorType(v.type) for v in (op.operands[0], op.results[0]))
                if str(dst.element_type) != "f32" or \
                        str(src.element_type) not in ("bf16", "f16"):
                    continue
                owner = op.operands[0].owner
                prod = owner.operation if hasattr(owner, "operation") else owner
                if not hasattr(prod, "name") or prod.regions or \
                        prod.name in ("stablehlo.convert", "func.func") or \
                        len(prod.results) != 1:
                    continue
                with ir.InsertionPoint(prod):
                    ins = []
                    for v in prod.operands:
                        t = ir.RankedTensorType(v.type)
                        if str(t.element_type) == str(src.element_type):
                            w = ir.Operation.create(
                                "stablehlo.convert", results=[ir.RankedTensorType.get(
                                    t.shape, f32)], operands=[v]).result
                            ins.append(w)
                        else:
                            ins.append(v)
                    wide = ir.Operation.create(
                        prod.name, results=[ir.RankedTensorType.get(dst.shape, f32)],
                        operands=ins, attributes={a.name: a.attr for a in prod.attributes})
                op.results[0].replace_all_uses_with(wide.results[0])
                changed = True
        if not changed or not module.operation.verify():
            return None
        return str(module.operation.get_asm(enable_debug_info=True))
