"""Batch normalization ops, by the spec's formulas.

Computed in float64 (the spec's decompositions are elementwise ops and
reductions in the operand type; one final rounding keeps f16/bf16/f32 results
within an ulp of them).
"""

import numpy as np

from .. import dtypes
from ..registry import Unsupported, kernel
from .elementwise import round_f64


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


# Operands are normalized in chunks of about this many elements along their
# first non-feature axis: a chunk's float64 temporaries stay in cache instead
# of four full-size float64 copies of the operand.
_CHUNK_ELEMS = 1 << 16


def _chunks(shape, fi):
    """``(axis, bounds)``: ranges of the first axis that is not the feature
    axis, of about _CHUNK_ELEMS elements each; None for rank 1."""
    axis = 0 if fi != 0 else 1
    if len(shape) <= axis or shape[axis] == 0:
        return None
    per = int(np.prod(shape, dtype=np.int64)) // shape[axis]
    step = max(1, _CHUNK_ELEMS // max(1, per))
    return axis, [(lo, min(lo + step, shape[axis])) for lo in range(0, shape[axis], step)]


def _take(a, axis, lo, hi):
    return a[lo:hi] if axis == 0 else a[:, lo:hi]


def _normalize(x, mean, var, scale, offset, eps, bshape, dtype, fi):
    """(x - mean) / sqrt(var + eps) * scale + offset in float64, rounded once
    to ``dtype``; the per-feature vectors are float64 already."""
    m, sc, of = mean.reshape(bshape), scale.reshape(bshape), offset.reshape(bshape)
    d = np.sqrt(var.reshape(bshape) + eps)
    chunks = _chunks(x.shape, fi)
    if chunks is None:
        return round_f64((_f64(x) - m) / d * sc + of, dtype)
    axis, bounds = chunks
    out = np.empty(x.shape, dtype)
    for lo, hi in bounds:
        c = _f64(_take(x, axis, lo, hi))
        c -= m
        c /= d
        c *= sc
        c += of
        _take(out, axis, lo, hi)[...] = round_f64(c, dtype)
    return out


@kernel("stablehlo.batch_norm_inference")
def batch_norm_inference(op):
    """spec: batch_norm_inference (docs/spec.md#batch_norm_inference).

    (operand - mean) / sqrt(variance + epsilon) * scale + offset, with the
    per-feature vectors broadcast along feature_index.
    """
    dtype, fi, eps, bshape, axes = _setup(op)

    def run(operand, scale, offset, mean, variance):
        return _normalize(operand, _f64(mean), _f64(variance), _f64(scale), _f64(offset),
                          eps, bshape, dtype, fi)
    return run


def _statistics(x, fi, bshape, axes):
    """Per-feature mean and biased variance of ``x`` in float64: each chunk's
    sums accumulated in float64 (no float64 copy of ``x``), the variance
    from the centred values (two passes, the spec's formula)."""
    n = x.size // x.shape[fi]
    chunks = _chunks(x.shape, fi)
    if chunks is None:
        x64 = _f64(x)
        mean = x64.mean(axis=axes, keepdims=True)
        c = x64 - mean
        return mean, (c * c).mean(axis=axes, keepdims=True)
    axis, bounds = chunks
    total = np.zeros(bshape)
    for lo, hi in bounds:
        total += np.add.reduce(_take(x, axis, lo, hi), axis=axes, dtype=np.float64, keepdims=True)
    mean = total / n
    squares = np.zeros(bshape)
    for lo, hi in bounds:
        c = _f64(_take(x, axis, lo, hi))
        c -= mean
        c *= c
        squares += np.add.reduce(c, axis=axes, keepdims=True)
    return mean, squares / n


@kernel("stablehlo.batch_norm_training")
def batch_norm_training(op):
    """spec: batch_norm_training (docs/spec.md#batch_norm_training).

    batch_mean / batch_var are the mean and the (biased) variance over every
    dimension but feature_index; output is the normalized operand.
    """
    dtype, fi, eps, bshape, axes = _setup(op)
    fdtype = op.result_types[1].dtype

    def run(operand, scale, offset):
        if operand.size == 0:
            mean = var = np.full(bshape, np.nan)
        else:
            mean, var = _statistics(operand, fi, bshape, axes)
        out = _normalize(operand, mean, var, _f64(scale), _f64(offset), eps, bshape, dtype, fi)
        return [out, round_f64(mean.reshape(-1), fdtype), round_f64(var.reshape(-1), fdtype)]
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
