"""Batch normalization ops, by the spec's formulas.

Computed in float64 (the spec's decompositions are elementwise ops and
reductions in the operand type; one final rounding keeps f16/bf16/f32 results
within an ulp of them).
"""

import numpy as np

from .. import dtypes
from ..registry import Unsupported, kernel


def _setup(op):
    t = op.operand_types[0]
    if t.quant is not None:
        raise Unsupported("quantized batch norm")
    if t.shape is None or None in t.shape:
        raise Unsupported("dynamic shapes")
    if not dtypes.is_float(t.dtype):
        raise Unsupported(f"batch norm of {t.element_type}")
    fi = int(op.attrs["feature_index"])
    eps = float(op.attrs["epsilon"])
    rank = len(t.shape)
    # Reshape per-feature vectors so they broadcast along feature_index.
    bshape = tuple(t.shape[fi] if d == fi else 1 for d in range(rank))
    axes = tuple(d for d in range(rank) if d != fi)
    return t.dtype, fi, eps, bshape, axes


def _f64(x):
    return x.astype(np.float64)


@kernel("stablehlo.batch_norm_inference")
def batch_norm_inference(op):
    """spec: batch_norm_inference (docs/spec.md#batch_norm_inference).

    (operand - mean) / sqrt(variance + epsilon) * scale + offset, with the
    per-feature vectors broadcast along feature_index.
    """
    dtype, fi, eps, bshape, axes = _setup(op)

    def run(operand, scale, offset, mean, variance):
        x = _f64(operand)
        norm = (x - _f64(mean).reshape(bshape)) / np.sqrt(_f64(variance).reshape(bshape) + eps)
        return (norm * _f64(scale).reshape(bshape) + _f64(offset).reshape(bshape)).astype(dtype)
    return run


@kernel("stablehlo.batch_norm_training")
def batch_norm_training(op):
    """spec: batch_norm_training (docs/spec.md#batch_norm_training).

    batch_mean / batch_var are the mean and the (biased) variance over every
    dimension but feature_index; output is the normalized operand.
    """
    dtype, fi, eps, bshape, axes = _setup(op)
    fdtype = op.result_types[1].dtype

    def run(operand, scale, offset):
        x = _f64(operand)
        if x.size == 0:
            mean = np.full(bshape, np.nan)
        else:
            mean = x.mean(axis=axes, keepdims=True)
        centered = x - mean
        var = (centered * centered).mean(axis=axes, keepdims=True) if x.size else mean
        norm = centered / np.sqrt(var + eps)
        out = norm * _f64(scale).reshape(bshape) + _f64(offset).reshape(bshape)
        return [out.astype(dtype), mean.reshape(-1).astype(fdtype),
                var.reshape(-1).astype(fdtype)]
    return run


@kernel("stablehlo.batch_norm_grad")
def batch_norm_grad(op):
    """spec: batch_norm_grad (docs/spec.md#batch_norm_grad).

    The spec's formula (from XLA's batchnorm_expander), with N the number of
    elements per feature:
      grad_operand = scale / stddev / N * (N*dy - sum(dy) - sum(dy*xc) * xc / (var+eps))
      grad_scale = sum(dy * xc / stddev), grad_offset = sum(dy).
    """
    dtype, fi, eps, bshape, axes = _setup(op)
    fdtype = op.result_types[1].dtype
    shape = op.operand_types[0].shape
    n = float(np.prod(shape, dtype=np.int64) // shape[fi]) if shape[fi] else 0.0

    def run(operand, scale, mean, variance, grad_output):
        x = _f64(operand)
        dy = _f64(grad_output)
        var_eps = _f64(variance).reshape(bshape) + eps
        stddev = np.sqrt(var_eps)
        centered = x - _f64(mean).reshape(bshape)
        normalized = centered / stddev
        i1 = dy * n
        i2 = dy.sum(axis=axes, keepdims=True)
        i3 = (dy * centered).sum(axis=axes, keepdims=True)
        i6 = i1 - i2 - i3 * centered / var_eps
        grad_operand = _f64(scale).reshape(bshape) / stddev / n * i6
        grad_scale = (dy * normalized).sum(axis=axes)
        grad_offset = dy.sum(axis=axes)
        return [grad_operand.astype(dtype), grad_scale.astype(fdtype),
                grad_offset.astype(fdtype)]
    return run
