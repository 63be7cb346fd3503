"""Quantization ops: uniform_quantize and uniform_dequantize.

Every other op on quantized tensors runs through the generic wrapper of
:mod:`stablehlo_interpreter.quant` (dequantize_op_quantize, or storage
pass-through for ops that only move elements).
"""

import numpy as np

from .. import quant
from ..registry import Unsupported, kernel


def _quantized(t, what, op):
    q = getattr(t, "quant", None)
    if q is None:
        raise Unsupported(f"{op.name}: {what} is {t!r}, expected a quantized tensor")
    return q


@kernel("stablehlo.uniform_quantize", traits=("quant_aware",))
def uniform_quantize(op):
    """spec: uniform_quantize.

    Float operand: `quantize(operand, type(result))`. Quantized operand
    (requantization): `quantize(dequantize(operand), type(result))`.
    """
    q_out = _quantized(op.result_types[0], "the result", op)
    q_in = getattr(op.operand_types[0], "quant", None)
    if q_in is None:
        def uniform_quantize_float(operand):
            return quant.quantize(operand, q_out)
        return uniform_quantize_float

    if q_in.expressed_dtype != q_out.expressed_dtype:
        raise Unsupported("uniform_quantize: operand and result expressed types differ")

    def uniform_quantize_requantize(operand):
        return quant.requantize(operand, q_in, q_out)
    return uniform_quantize_requantize


@kernel("stablehlo.uniform_dequantize", traits=("quant_aware",))
def uniform_dequantize(op):
    """spec: uniform_dequantize. `result = dequantize(operand)`."""
    q_in = _quantized(op.operand_types[0], "the operand", op)
    out_dtype = op.result_types[0].dtype

    def uniform_dequantize_(operand):
        res = quant.dequantize(operand, q_in)
        # (C2) makes the result type the expressed type; asarray is a no-op then.
        return np.asarray(res, dtype=out_dtype)
    return uniform_dequantize_
