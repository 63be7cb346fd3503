"""Quantized element types (`!quant.uniform`): quantize, dequantize and the
generic wrapper that runs float kernels on quantized tensors.

Spec: docs/spec.md, "Quantized element types" and "Quantization computations"
(`dequantize`, `quantize`, `dequantize_op_quantize`,
`dequantize_batch_norm_grad_or_training_quantize`, `dequantize_compare`,
`dequantize_select_quantize`, `hybrid_dequantize_then_op`).

At run time a quantized tensor is a numpy array of its *storage* type (int8,
int32...); its scales and zero points live in the static type
(:class:`~stablehlo_interpreter.types.QuantParams`).

How an op with quantized operands or results runs (:func:`build`):

* Quant-aware kernels (uniform_quantize, uniform_dequantize, bitcast_convert,
  constant, ...) and ops with regions (reduce, sort, while, if...) run on the
  storage values directly: the spec defines region ops on quantized values
  through their bodies, whose own ops are quantized ops again.
* Ops that only move elements (reshape, transpose, slice, gather, pad...) also
  run on storage values when every quantized operand and result has the same
  quantization parameters: then `quantize(dequantize(x)) = x`, so moving the
  storage integers is exactly the spec's result.
* Every other op follows `dequantize_op_quantize`: quantized operands are
  dequantized to their expressed type, the float kernel (built for the
  expressed types) runs, and quantized results are quantized back. Non-quantized
  operands (indices, predicates, the float lhs of a hybrid dot) pass unchanged;
  non-quantized results (compare's i1) are returned as computed. This covers
  `dequantize_compare`, `dequantize_select_quantize`,
  `hybrid_dequantize_then_op` and the batch_norm variant too, which are all
  special cases of it.
"""

import copy
import re

import numpy as np

from . import dtypes
from .mlir_text import find_top, matching_bracket
from .registry import has_trait
from .types import TensorType

# Kernels that take quantized storage values as they are: the registry's
# "quant_aware" trait (and custom calls, whose targets see the storage
# values). Its "quant_same_params" trait: ops that only select, copy or move
# elements: with identical quantization parameters on every quantized operand
# and result, running them on storage values gives exactly
# `dequantize_op_quantize`'s result.


# --------------------------------------------------------------------------
# Quantization computations


def _param_shape(q, ndim):
    """Shape that broadcasts per-axis parameters along `quantization_dimension`."""
    shape = [1] * ndim
    shape[q.quantized_dimension] = -1
    return shape


def compute_scales(q, ndim):
    """spec: compute_scales -- scales in the expressed type, broadcastable.

    The scale is a double in the type; the spec uses
    `constant(scale, expressed_type)`, i.e. the scale rounded to the expressed
    type (f32 for every program JAX emits).
    """
    s = q.scales.astype(q.expressed_dtype)
    if q.per_axis:
        return s.reshape(_param_shape(q, ndim))
    return s.reshape(())


def compute_zero_points(q, ndim, dtype=np.int64):
    """spec: compute_zero_points -- zero points, broadcastable, as ``dtype``."""
    z = q.zero_points.astype(dtype)
    if q.per_axis:
        return z.reshape(_param_shape(q, ndim))
    return z.reshape(())


def dequantize(x, q):
    """spec: dequantize. Storage integers -> expressed floating-point values.

    `x_storage - zero_points` is computed in int64: the spec writes it in the
    storage type, but there it could wrap (i8: 127 - (-128)); the reference
    implementation widens to i32 first as well. The product with the scales
    is computed in the expressed type, as the spec's `convert` then multiply.
    """
    et = q.expressed_dtype
    x = np.asarray(x)
    sub = x.astype(np.int64) - compute_zero_points(q, x.ndim)
    res = sub.astype(et) * compute_scales(q, x.ndim)
    return np.asarray(res, dtype=et)


def quantize(x, q):
    """spec: quantize. Expressed floating-point values -> storage integers.

    In the expressed type: divide by the scales, add the zero points, clamp to
    [storage_min, storage_max], round half to even; then convert to the
    storage type.
    """
    et = q.expressed_dtype
    x = np.asarray(x)
    if x.dtype != et:
        x = x.astype(et)
    scaled = np.asarray(x / compute_scales(q, x.ndim), dtype=et)
    scaled = np.asarray(scaled + compute_zero_points(q, x.ndim, et), dtype=et)
    lo = np.asarray(q.storage_min, dtype=et)
    hi = np.asarray(q.storage_max, dtype=et)
    # maximum/minimum propagate NaN, like the spec's clamp.
    clamped = np.minimum(np.maximum(scaled, lo), hi)
    rounded = np.rint(clamped)
    return _to_storage(rounded, q)


def _to_storage(rounded, q):
    """The final `convert(x_rounded, result_type)` of `quantize`.

    The values are integral and within [storage_min, storage_max] except for
    NaN, and for bounds the expressed type cannot represent exactly (f32 has no
    2**31 - 1: the clamp bound rounds up to 2**31). Float-to-integer convert
    of such values is implementation-defined in the spec; like the reference
    interpreter (APFloat::convertToInteger) NaN becomes 0 and out-of-range
    values saturate.
    """
    r = np.asarray(rounded, dtype=np.float64)
    r = np.where(np.isnan(r), 0.0, r)
    lo, hi = dtypes.int_info(q.storage_dtype)
    r = np.clip(r, float(lo), float(hi))
    if dtypes.bit_width(q.storage_dtype) < 64:
        # asarray: ufuncs turn 0-d arrays into numpy scalars.
        return np.asarray(r.astype(np.int64).astype(q.storage_dtype))
    # 64-bit storage: float(hi) is 2**63 (or 2**64), one past the range.
    out = np.asarray(np.where(r >= float(hi), 0.0, r).astype(q.storage_dtype))
    out[r >= float(hi)] = hi
    return out


def requantize(x, q_in, q_out):
    """spec: uniform_quantize on a quantized operand: quantize(dequantize(x))."""
    return quantize(dequantize(x, q_in), q_out)


# --------------------------------------------------------------------------
# The generic wrapper


def involves_quant(op):
    """True if any operand or result of ``op`` is a quantized tensor."""
    for t in op.operand_types:
        if isinstance(t, TensorType) and t.quant is not None:
            return True
    for t in op.result_types:
        if isinstance(t, TensorType) and t.quant is not None:
            return True
    return False


def expressed_type(t):
    """The float TensorType a quantized TensorType dequantizes to."""
    if not isinstance(t, TensorType) or t.quant is None:
        return t
    et = t.quant.expressed_dtype
    return TensorType(t.shape, et, dtypes.to_element_type(et), bounds=t.bounds)


def _params_key(q):
    return (np.dtype(q.storage_dtype), np.dtype(q.expressed_dtype), q.storage_min,
            q.storage_max, tuple(q.scales.tolist()), tuple(q.zero_points.tolist()))


def same_params(op):
    """True if every quantized operand and result has the same parameters.

    `quantization_dimension` may differ (transpose moves it); scales and zero
    points must be equal element for element.
    """
    keys = {_params_key(t.quant) for t in list(op.operand_types) + list(op.result_types)
            if isinstance(t, TensorType) and t.quant is not None}
    return len(keys) == 1


def build(builder, op, special):
    """Build the runtime callable of ``op`` whose types involve quantization."""
    if (has_trait(op.name, "quant_aware") or op.name == "stablehlo.custom_call"
            or special or op.regions):
        return builder(op)
    if has_trait(op.name, "quant_same_params") and same_params(op):
        return builder(op)
    return dequantize_op_quantize(builder, op)


def dequantize_op_quantize(builder, op):
    """spec: dequantize_op_quantize (and its compare/select/batch_norm/hybrid
    variants): dequantize quantized operands, run the float kernel, quantize
    quantized results."""
    inner_op = copy.copy(op)
    inner_op.operand_types = [expressed_type(t) for t in op.operand_types]
    inner_op.result_types = [expressed_type(t) for t in op.result_types]
    if op.name == "stablehlo.compare":
        # spec: dequantize_compare compares the floats with type FLOAT,
        # whatever compare_type the quantized op carries.
        inner_op.attrs = dict(op.attrs, compare_type="FLOAT")
    inner = builder(inner_op)
    in_q = [t.quant if isinstance(t, TensorType) else None for t in op.operand_types]
    out_q = [t.quant if isinstance(t, TensorType) else None for t in op.result_types]
    if len(out_q) == 1:
        rq = out_q[0]

        def run_one(*operands):
            vals = [v if q is None else dequantize(v, q) for v, q in zip(operands, in_q)]
            res = inner(*vals)
            return res if rq is None else quantize(res, rq)
        return run_one

    def run_many(*operands):
        vals = [v if q is None else dequantize(v, q) for v, q in zip(operands, in_q)]
        res = inner(*vals)
        return [r if q is None else quantize(r, q) for r, q in zip(res, out_q)]
    return run_many


# --------------------------------------------------------------------------
# Loading programs with quantized types
#
# The StableHLO dialect in jaxlib rejects every `!quant.uniform` operand or
# result in its verifier ("must be ranked tensor of per-tensor integer
# quantized ... values, but got 'tensor<2x!quant.uniform<i8:f32, 0.1:-30>>'"),
# so such programs cannot be parsed as they are. Before parsing, the loader
# therefore rewrites each quantized tensor type `tensor<2x!quant.uniform<...>>`
# into its expressed type carrying the quantized type as encoding,
# `tensor<2xf32, "!quant.uniform<...>">` (types.from_mlir turns it back into
# the quantized TensorType), and spells the ops whose verifiers insist on
# quantized types (or on a constant's value type matching its result type) in an unregistered dialect (OP_ALIASES maps them back).

QUANT_ENCODING_PREFIX = '"!quant.'
_ALIAS_DIALECT = "stablehlo_quant"
_RENAMED_OPS = ("uniform_quantize", "uniform_dequantize", "bitcast_convert", "constant")
OP_ALIASES = {f"{_ALIAS_DIALECT}.{n}": f"stablehlo.{n}" for n in _RENAMED_OPS}

_PRETTY_OP_RE = re.compile(
    r'(?<![\w."])stablehlo\.(' + "|".join(_RENAMED_OPS) + r')(?:\s+(%[\w$.\-]+(?:#\d+)?)|\(\))')
_GENERIC_OP_RE = re.compile(r'"stablehlo\.(' + "|".join(_RENAMED_OPS) + r')"\(')
_EXPRESSED_RE = re.compile(r"[a-z0-9]+(?:<-?\d+:-?\d+>)?:([A-Za-z0-9]+)")
_QUANT_START = "!quant.uniform<"


def rewrite_quantized_text(text):
    """Rewrite MLIR text with quantized tensor types so jaxlib can parse it."""
    if _QUANT_START not in text:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if _QUANT_START in line:
            m = _PRETTY_OP_RE.search(line)
            if m:
                line = _pretty_to_generic(line, m)
            lines[i] = _GENERIC_OP_RE.sub(rf'"{_ALIAS_DIALECT}.\1"(', line)
    text = "\n".join(lines)
    out = []
    pos = 0
    while True:
        start = text.find(_QUANT_START, pos)
        if start < 0:
            break
        end = matching_bracket(text, start + len(_QUANT_START) - 1)
        qtext = text[start:end + 1]
        m = _EXPRESSED_RE.match(qtext, len(_QUANT_START))
        # Only the element type of a tensor type without encoding is
        # rewritten: `tensor<...x` before it and the tensor's `>` right after.
        if (m and end + 1 < len(text) and text[end + 1] == ">"
                and (text[start - 1] in "x<")):
            out.append(text[pos:start])
            out.append(f'{m.group(1)}, "{qtext}"')
        else:
            out.append(text[pos:end + 1])
        pos = end + 1
    out.append(text[pos:])
    return "".join(out)


def _pretty_to_generic(line, m):
    """`stablehlo.OP %x : T` or `: (T) -> U` into the generic form of the alias.

    The pretty form prints a single type when operand and result types are
    equal; the generic form always needs the function type.
    """
    head = line[:m.start()] + f'"{_ALIAS_DIALECT}.{m.group(1)}"({m.group(2) or ""})'
    rest = line[m.end():]
    colon = find_top(rest, " : ")  # attribute dicts hold some
    if m.group(2) is None or colon < 0:
        return head + rest
    sig = rest[colon + 3:]
    if not sig.lstrip().startswith("("):
        loc = sig.find(" loc(")
        ty, tail = (sig, "") if loc < 0 else (sig[:loc], sig[loc:])
        ty = ty.strip()
        sig = f"({ty}) -> {ty}{tail}"
    return head + rest[:colon + 3] + sig


