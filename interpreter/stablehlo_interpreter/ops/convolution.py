"""convolution and dynamic_conv.

The spec defines a convolution as a dot product of every (padded, dilated)
lhs window with the kernel. Here the lhs is brought to the canonical layout
``(N, C, spatial...)`` and the kernel to ``(O, I, spatial...)``; the windows
become a strided view of the padded lhs (im2col) and the dot products one
batched matmul per group (BLAS for floats). Large problems loop over kernel
positions instead of materialising im2col -- never over output elements.
"""

import numpy as np

from .. import dtypes
from ..registry import Unsupported, kernel

# im2col is materialised when it has at most this many elements.
_IM2COL_LIMIT = 1 << 24
# Dot products up to this length are summed term by term (see conv()).
_SEQUENTIAL_DOT = 32


def pad_spatial(x, lo, hi, interior, axes):
    """spec pad with zeros on ``axes`` (negative lo/hi crop, interior dilates)."""
    shape = list(x.shape)
    sl_in = [slice(None)] * x.ndim
    for ax, l, h, i in zip(axes, lo, hi, interior):
        n = x.shape[ax]
        dil = (n - 1) * (i + 1) + 1 if n > 0 else 0
        shape[ax] = max(l, 0) + dil + max(h, 0)
        sl_in[ax] = slice(max(l, 0), max(l, 0) + dil, i + 1)
    out = np.zeros(shape, dtype=x.dtype)
    out[tuple(sl_in)] = x
    crop = [slice(None)] * x.ndim
    for ax, l, h in zip(axes, lo, hi):
        crop[ax] = slice(max(-l, 0), shape[ax] - max(-h, 0))
    return out[tuple(crop)]


def _work_dtype(result_dtype):
    """Type the arithmetic runs in: the result type (narrow floats in f32)."""
    if dtypes.is_bool(result_dtype):
        return np.dtype(np.int64)
    if result_dtype in dtypes.SUB_BYTE_INTS:
        return np.dtype(np.int64)
    if dtypes.is_float(result_dtype) and np.dtype(result_dtype).itemsize < 4:
        return np.dtype(np.float32)
    return np.dtype(result_dtype)


def _finish(acc, result_dtype):
    if dtypes.is_bool(result_dtype):
        return acc != 0
    if result_dtype in dtypes.SUB_BYTE_INTS:
        bits = dtypes.bit_width(result_dtype)
        acc = acc & ((1 << bits) - 1)
        if not dtypes.is_unsigned(result_dtype):
            acc = np.where(acc >= (1 << (bits - 1)), acc - (1 << bits), acc)
    return acc.astype(result_dtype, copy=False)


def make_convolution(attrs, result_dtype):
    """Runtime function ``conv(lhs, rhs, padding)`` for one op occurrence."""
    dn = attrs["dimension_numbers"]
    ib, if_ = dn["input_batch_dimension"], dn["input_feature_dimension"]
    isp = tuple(dn["input_spatial_dimensions"])
    ki, ko = dn["kernel_input_feature_dimension"], dn["kernel_output_feature_dimension"]
    ksp = tuple(dn["kernel_spatial_dimensions"])
    ob, of = dn["output_batch_dimension"], dn["output_feature_dimension"]
    osp = tuple(dn["output_spatial_dimensions"])
    ns = len(isp)
    # (Exported dynamic programs may carry longer window attributes than
    # there are spatial dims; only the first `ns` entries mean anything.)
    strides = tuple(attrs.get("window_strides") or (1,) * ns)[:ns]
    lhs_dil = tuple(attrs.get("lhs_dilation") or (1,) * ns)[:ns]
    rhs_dil = tuple(attrs.get("rhs_dilation") or (1,) * ns)[:ns]
    reversal = tuple(attrs.get("window_reversal") or (False,) * ns)[:ns]
    G = int(attrs.get("feature_group_count", 1))
    B = int(attrs.get("batch_group_count", 1))
    work = _work_dtype(np.dtype(result_dtype))
    # Output layout: canonical (N, O, spatial...) -> result dims.
    out_perm = [0] * (ns + 2)
    out_perm[ob] = 0
    out_perm[of] = 1
    for k, d in enumerate(osp):
        out_perm[d] = 2 + k
    rev_axes = tuple(2 + k for k in range(ns) if reversal[k])

    def conv(lhs, rhs, padding):
        # Padding is applied in channels-last order (N, spatial..., C), the
        # layout the im2col path reads from; `lhs` is the (N, C, spatial...)
        # view of it.
        lhs_cl = np.transpose(lhs, (ib,) + isp + (if_,)).astype(work, copy=False)
        rhs = np.transpose(rhs, (ko, ki) + ksp).astype(work, copy=False)
        pad = np.asarray(padding, dtype=np.int64).reshape(ns, 2) if padding is not None \
            else np.zeros((ns, 2), dtype=np.int64)
        lhs_cl = pad_spatial(lhs_cl, pad[:, 0], pad[:, 1], [d - 1 for d in lhs_dil],
                             range(1, ns + 1))
        lhs = np.moveaxis(lhs_cl, -1, 1)
        if rev_axes:
            # Reversing every lhs window equals reversing the kernel.
            rhs = np.flip(rhs, rev_axes)
        N, C = lhs.shape[:2]
        P = lhs.shape[2:]
        O, I = rhs.shape[:2]
        K = rhs.shape[2:]
        dwin = [(k - 1) * d + 1 if k > 0 else 0 for k, d in zip(K, rhs_dil)]
        out_sp = [0 if (p == 0 or w > p) else (p - w) // s + 1
                  for p, w, s in zip(P, dwin, strides)]
        Nb, Cg, Og = N // B, C // G, O // (B * G)
        if Cg != I:
            raise ValueError(f"kernel input features {I} != lhs features/group {Cg}")
        nout = int(np.prod(out_sp, dtype=np.int64))
        ksize = int(np.prod(K, dtype=np.int64))
        if nout == 0 or Nb == 0 or Og == 0 or ksize == 0 or Cg == 0:
            acc = np.zeros((B, G, Nb, nout, Og), dtype=work)
        else:
            # lhs (B, Nb, G, Cg, P...) -> per group (B, G, Nb, Cg, P...)
            L = lhs.reshape((B, Nb, G, Cg) + tuple(P)).swapaxes(1, 2)
            # kernel (B, G, Og, Cg, K...) -> (B, G, Cg*K, Og) matching im2col.
            R = rhs.reshape((B, G, Og, Cg) + tuple(K))
            if Cg * ksize <= _SEQUENTIAL_DOT:
                # Short dot products: accumulate term by term (kernel position
                # outer, input feature inner), each product rounded, as XLA's
                # CPU loops do; a BLAS dot would fuse and reorder them.
                acc = np.zeros((B, G, Nb) + tuple(out_sp) + (Og,), dtype=work)
                for kpos in np.ndindex(*K):
                    sl = (slice(None),) * 4 + tuple(
                        slice(k * d, k * d + (n - 1) * s + 1, s)
                        for k, d, n, s in zip(kpos, rhs_dil, out_sp, strides))
                    part = L[sl]  # (B, G, Nb, Cg, out...)
                    wk = R[(Ellipsis,) + kpos]  # (B, G, Og, Cg)
                    for c in range(Cg):
                        x = part[:, :, :, c][..., None]
                        w = wk[:, :, :, c].reshape((B, G, 1) + (1,) * ns + (Og,))
                        acc += x * w
                acc = acc.reshape(B, G, Nb * nout, Og)
            elif Nb * nout * Cg * ksize <= _IM2COL_LIMIT or ksize == 1:
                # Channels-last im2col: rows (Nb, out...), columns (K..., Cg),
                # so the copy moves runs of Cg contiguous elements.
                Lc = np.moveaxis(lhs_cl.reshape((B, Nb) + tuple(P) + (G, Cg)),
                                 2 + ns, 1)  # (B, G, Nb, P..., Cg)
                win = np.lib.stride_tricks.sliding_window_view(
                    Lc, dwin, axis=tuple(range(3, 3 + ns)))
                sel = (slice(None),) * 3 + tuple(slice(None, None, s) for s in strides) \
                    + (slice(None),) + tuple(slice(None, None, d) for d in rhs_dil)
                win = win[sel]  # (B, G, Nb, out..., Cg, K...)
                # -> (B, G, Nb, out..., K..., Cg)
                order = tuple(range(3 + ns)) + tuple(range(4 + ns, 4 + 2 * ns)) + (3 + ns,)
                cols = np.ascontiguousarray(win.transpose(order)).reshape(
                    B, G, Nb * nout, ksize * Cg)
                # kernel (B, G, Og, Cg, K...) -> (B, G, K..., Cg, Og)
                korder = (0, 1) + tuple(range(4, 4 + ns)) + (3, 2)
                Rm = np.ascontiguousarray(R.transpose(korder)).reshape(
                    B, G, ksize * Cg, Og)
                acc = np.matmul(cols, Rm)
            else:
                acc = np.zeros((B, G, Nb * nout, Og), dtype=work)
                for kpos in np.ndindex(*K):
                    sl = (slice(None),) * 4 + tuple(
                        slice(k * d, k * d + (n - 1) * s + 1, s)
                        for k, d, n, s in zip(kpos, rhs_dil, out_sp, strides))
                    part = L[sl]  # (B, G, Nb, Cg, out...)
                    part = np.moveaxis(part, 3, -1).reshape(B, G, Nb * nout, Cg)
                    acc += np.matmul(part, R[(Ellipsis,) + kpos].swapaxes(-1, -2))
            acc = acc.reshape(B, G, Nb, nout, Og)
        # Feature index o = (b * G + g) * Og + og (spec: concatenate groups).
        res = acc.transpose(2, 0, 1, 4, 3).reshape((Nb, B * G * Og) + tuple(out_sp))
        res = np.transpose(res, out_perm)
        return np.ascontiguousarray(_finish(res, np.dtype(result_dtype)))
    return conv


def _check(op):
    for t in list(op.operand_types[:2]) + list(op.result_types):
        if getattr(t, "quant", None) is not None:
            raise Unsupported("quantized convolution")


@kernel("stablehlo.convolution")
def convolution(op):
    """spec: convolution. `precision_config` is ignored, as the spec allows.

    Operands are converted to the result element type first (integers then
    wrap around in that type); narrow floats accumulate in f32.
    """
    _check(op)
    padding = op.attrs.get("padding")
    conv = make_convolution(op.attrs, op.result_types[0].dtype)
    return lambda lhs, rhs: conv(lhs, rhs, padding)


@kernel("stablehlo.dynamic_conv")
def dynamic_conv(op):
    """spec: dynamic_conv. Convolution with `padding` given as an operand."""
    _check(op)
    conv = make_convolution(op.attrs, op.result_types[0].dtype)
    return lambda lhs, rhs, padding: conv(lhs, rhs, padding)
