"""convolution and dynamic_conv.

The spec defines a convolution as a dot product of every (padded, dilated)
lhs window with the kernel. Here the lhs is viewed in the canonical order
``(N, C, spatial...)`` and the kernel as ``(O, I, spatial...)``; the dot
products become matrix products (BLAS for floats, one BLAS thread below
``blas.SMALL_GEMM_MACS`` as for dot_general), in one of these forms:

* **im2col**: every window copied once into a matrix (a strided view of the
  padded lhs), one matmul with the kernel. Its layout follows the lhs in
  memory: channels-last rows ``(N, out...)`` x columns ``(K..., C)`` for
  NHWC-like inputs; channels-first ``(K..., C)`` x ``(out...)`` per image for
  NCHW-like ones, so that the copy reads contiguous runs and the kernel
  times it is the NCHW result, or rows ``(out..., N)`` x ``(C, K...)`` when
  the kernel is wider than the output (weight gradients: a few outputs).
  The channels-last product (below ``blas.SMALL_GEMM_MACS``) runs in blocks
  of whole images or output lines on one BLAS thread: each block's windows
  are copied into a matrix that stays in cache and multiplied into its rows
  of the result (``_blocked_im2col``; the same k-term dot products as one
  large matmul).
* **per kernel position** (fewer output than input features, e.g. the
  input gradient of a layer with few channels): one matmul of the whole
  padded lhs with the kernel's K positions side by side (contracting over
  C only), then the K shifted partial results are summed in float64.
* **kernel loop**: im2col too large to materialise: one matmul per kernel
  position, accumulated -- never a loop over output elements.
* **polyphase**: an lhs dilated by d with unit strides (a transposed
  convolution, the input gradient of a strided one) is mostly zeros; its
  outputs split into prod(d) phases, each a plain convolution of the
  undilated lhs with every d-th kernel tap (``_polyphase``).

Accuracy: short dot products (up to ``_SHORT_DOT`` terms, e.g. a first
layer's 3 channels x 3x3) and the polyphase sub-convolutions are computed in
float64 (complex128), where products of f32 values are exact, and rounded
once: the correctly rounded value but under extreme cancellation. Longer
ones accumulate in the work type (narrow floats in f32) with the
contraction in XLA's (K..., C) order, the same sums as XLA CPU's kernels on
the NCHW layers measured, except that: a channels-last contraction of at
most ``_ROW_SPLIT_MAX`` terms is one product per kernel row, the rows'
sums added in order (more accurate than XLA CPU on the NHWC layers
measured, where one product was less); the per-position form adds its K partial
sums in float64; contractions over more than ``2 * _DOT_CHUNK`` terms (a
weight gradient's sum over batch x image) are cut into chunks whose f32
sums are added in float64. On a CNN step's layers every form is at least as
accurate as XLA CPU (docs/accuracy.md).
"""

from typing import NamedTuple

import numpy as np

from .. import blas as _blas
from .. import dtypes
from ..registry import Unsupported, kernel
from . import spec_kernels as _spec

# im2col is materialised when it has at most this many elements.
_IM2COL_LIMIT = 1 << 24
# A channels-last contraction of at most this many terms (k = K... x Cg) is
# computed as one f32 product per kernel row (the first kernel dimension),
# added in order: NHWC 3x3 layers of 8-32 channels measured more accurate
# than XLA CPU so (max error relative to |x||w| over 1-8M outputs: k=144
# 1.43e-7, XLA 1.57e-7, one product 2.71e-7; k=288 1.29e-7 / 2.31e-7 /
# 3.06e-7), at the cost of one product (k=144); from 576 terms one product
# already measured more accurate than XLA CPU (OpenBLAS blocks the sum).
_ROW_SPLIT_MAX = 384
# The channels-last im2col product runs in blocks of about this many
# elements of the window matrix (512 KiB of float32: in L2 while BLAS reads it).
_IM2COL_BLOCK = 1 << 17
# Dot products up to this length are computed in float64 / complex128.
_SHORT_DOT = 32
# Contractions longer than 2 * _DOT_CHUNK terms are computed in chunks of
# at least _DOT_CHUNK (at most _MAX_CHUNKS of them) summed in float64.
_DOT_CHUNK = 512
_MAX_CHUNKS = 32
# The per-position form is used when the padded lhs times the output
# features is at most 1/_PER_POSITION_GAIN of im2col's windows times the
# input features (it then moves less data; 0 forces it where it applies).
_PER_POSITION_GAIN = 2


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


def _wide(work):
    """Accumulation type of short dot products: float64 / complex128."""
    if work.kind == "f":
        return np.dtype(np.float64)
    if work.kind == "c":
        return np.dtype(np.complex128)
    return work


def _finish(acc, result_dtype):
    if dtypes.is_bool(result_dtype):
        return acc != 0
    if result_dtype in dtypes.SUB_BYTE_INTS:
        bits = dtypes.bit_width(result_dtype)
        acc = acc & ((1 << bits) - 1)
        if not dtypes.is_unsigned(result_dtype):
            acc = np.where(acc >= (1 << (bits - 1)), acc - (1 << bits), acc)
    return acc.astype(result_dtype, copy=False)


def _gemm(a, b):
    """np.matmul; float products below SMALL_GEMM_MACS multiply-adds on one
    BLAS thread (on a busy machine threads spin and wait for each other:
    blas.py)."""
    if a.dtype.kind in "fc":
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        macs = int(np.prod(batch, dtype=np.int64)) * a.shape[-2] * a.shape[-1] * b.shape[-1]
        if macs < _blas.SMALL_GEMM_MACS:
            return _blas.small_product(np.matmul, a, b, macs=macs)
    return np.matmul(a, b)


def _matmul(a, b):
    """``a @ b``; a long f32 / complex64 contraction (a weight gradient's sum
    over batch and image) in chunks of at least _DOT_CHUNK terms whose
    partial products are summed in float64 / complex128 (at most
    _MAX_CHUNKS calls): its error is that of one chunk's sum, not of a
    thousands-long one in the element type."""
    k = a.shape[-1]
    if a.dtype not in (np.float32, np.complex64) or k <= 2 * _DOT_CHUNK:
        return _gemm(a, b)
    step = max(_DOT_CHUNK, -(-k // _MAX_CHUNKS))
    acc = None
    for k0 in range(0, k, step):
        part = _gemm(a[..., k0:k0 + step], b[..., k0:k0 + step, :])
        if acc is None:
            acc = part.astype(_wide(part.dtype))
        else:
            np.add(acc, part, out=acc)
    return acc


def _chunked(calc, k):
    """Whether :func:`_matmul` cuts a contraction of ``k`` terms into chunks."""
    return calc in (np.float32, np.complex64) and k > 2 * _DOT_CHUNK


def _row_products(cols, Rm, out, parts):
    """``out[...] = cols @ Rm`` as ``parts`` products over consecutive equal
    ranges of the k terms (the kernel's rows: see _ROW_SPLIT_MAX), added in
    order in the work type; ``parts`` 1: one product."""
    if parts <= 1:
        return np.matmul(cols, Rm, out=out)
    step = cols.shape[-1] // parts
    np.matmul(cols[..., :step], Rm[..., :step, :], out=out)
    tmp = np.empty_like(out)
    for a in range(step, cols.shape[-1], step):
        np.matmul(cols[..., a:a + step], Rm[..., a:a + step, :], out=tmp)
        np.add(out, tmp, out=out)
    return out


def _im2col_blocks(Nb, out_sp, per_line):
    """Blocks ``(n0, n1, a0, a1)`` of the channels-last im2col product:
    images n0:n1, lines a0:a1 of out_sp[0] (whole images, several to a
    block, where one has at most _IM2COL_BLOCK window elements, else lines
    of one image); ``per_line``: window elements of one output line."""
    lines = out_sp[0]
    per_image = lines * per_line
    if per_image <= _IM2COL_BLOCK:
        step = max(1, _IM2COL_BLOCK // max(1, per_image))
        return [(n, min(n + step, Nb), 0, lines) for n in range(0, Nb, step)]
    parts = -(-per_image // _IM2COL_BLOCK)
    step = -(-lines // parts)
    return [(n, n + 1, a, min(a + step, lines)) for n in range(Nb)
            for a in range(0, lines, step)]


def _blocked_im2col(win, Rm, lead, out_sp, k, parts):
    """The channels-last im2col product ``win @ Rm`` by blocks of
    :func:`_im2col_blocks`: ``win`` (B, G, Nb, out..., K..., Cg), the
    windows (a strided view), ``Rm`` (B, G, k, Og). Each block copies its
    windows into a matrix that stays in cache and multiplies it into its
    rows of the result, (B, G, Nb * prod(out), Og), on one BLAS thread.
    The contraction of every output element is the same k-term product as
    in one large matmul (``parts``: :func:`_row_products`). Sharing the
    blocks with the pool's helper threads measured slower on the shared
    2-core machine (XLA CPU runs this convolution on one thread too): as 4
    runs of blocks, 1.3 ms -> 4.8 ms median while other processes held
    the cores, where a helper preempted in its run keeps the caller
    waiting; no gain was measured in the moments a core was free."""
    B, G, Nb = lead
    Og = Rm.shape[-1]
    line = int(np.prod(out_sp[1:], dtype=np.int64))   # rows per line of out_sp[0]
    blocks = _im2col_blocks(Nb, out_sp, B * G * line * k)
    nout = out_sp[0] * line
    acc = np.empty((B, G, Nb * nout, Og), dtype=Rm.dtype)
    macs = B * G * Nb * nout * k * Og
    if len(blocks) == 1:
        cols = np.ascontiguousarray(win).reshape(B, G, Nb * nout, k)
        return _blas.small_product(_row_products, cols, Rm, acc, parts, macs=macs)

    def run():
        for n0, n1, a0, a1 in blocks:
            # Whole images, or whole lines of one: one range of result rows.
            r0, r1 = n0 * nout + a0 * line, (n1 - 1) * nout + a1 * line
            cols = np.ascontiguousarray(win[:, :, n0:n1, a0:a1]).reshape(B, G, r1 - r0, k)
            _row_products(cols, Rm, acc[:, :, r0:r1], parts)

    _blas.small_product(run, macs=macs)
    return acc


def _window_slices(kpos, rhs_dil, out_sp, strides):
    """Slices of the padded spatial axes read by kernel position ``kpos``."""
    return tuple(slice(k * d, k * d + (n - 1) * s + 1, s)
                 for k, d, n, s in zip(kpos, rhs_dil, out_sp, strides))


class ConvGeometry(NamedTuple):
    """A convolution's dimension numbers and window attributes, decoded."""

    ib: int                 # input batch dimension
    if_: int                # input feature dimension
    isp: tuple[int, ...]    # input spatial dimensions
    ki: int                 # kernel input feature dimension
    ko: int                 # kernel output feature dimension
    ksp: tuple[int, ...]    # kernel spatial dimensions
    ob: int                 # output batch dimension
    of: int                 # output feature dimension
    osp: tuple[int, ...]    # output spatial dimensions
    ns: int                 # number of spatial dimensions
    strides: tuple[int, ...]
    lhs_dil: tuple[int, ...]
    rhs_dil: tuple[int, ...]
    reversal: tuple[bool, ...]
    G: int                  # feature_group_count
    B: int                  # batch_group_count


def conv_geometry(attrs) -> ConvGeometry:
    """The geometry of a convolution op from its attributes (the accurate
    kernel here and the spec mode's, ops/spec_kernels.py, share it)."""
    dn = attrs["dimension_numbers"]
    isp = tuple(dn["input_spatial_dimensions"])
    ns = len(isp)
    # (Exported dynamic programs may carry longer window attributes than
    # there are spatial dims; only the first `ns` entries mean anything.)
    return ConvGeometry(
        dn["input_batch_dimension"], dn["input_feature_dimension"], isp,
        dn["kernel_input_feature_dimension"], dn["kernel_output_feature_dimension"],
        tuple(dn["kernel_spatial_dimensions"]),
        dn["output_batch_dimension"], dn["output_feature_dimension"],
        tuple(dn["output_spatial_dimensions"]), ns,
        tuple(attrs.get("window_strides") or (1,) * ns)[:ns],
        tuple(attrs.get("lhs_dilation") or (1,) * ns)[:ns],
        tuple(attrs.get("rhs_dilation") or (1,) * ns)[:ns],
        tuple(attrs.get("window_reversal") or (False,) * ns)[:ns],
        int(attrs.get("feature_group_count", 1)), int(attrs.get("batch_group_count", 1)))


def make_convolution(attrs, result_dtype, wide=False):
    """Runtime function ``conv(lhs, rhs, padding)`` for one op occurrence
    (``wide``: every float dot product in float64, as the short ones)."""
    dn = attrs["dimension_numbers"]
    (ib, if_, isp, ki, ko, ksp, ob, of, osp, ns, strides, lhs_dil, rhs_dil, reversal,
     G, B) = conv_geometry(attrs)
    work = _work_dtype(np.dtype(result_dtype))
    # Output layout: canonical (N, O, spatial...) -> result dims.
    out_perm = [0] * (ns + 2)
    out_perm[ob] = 0
    out_perm[of] = 1
    for k, d in enumerate(osp):
        out_perm[d] = 2 + k
    rev_axes = tuple(2 + k for k in range(ns) if reversal[k])
    # Channels-first im2col when the lhs features lie outside (before) its
    # spatial dims in memory, as in NCHW; channels-last otherwise.
    channels_first = ns > 0 and if_ < min(isp)
    if any(d > 1 for d in lhs_dil) and all(s == 1 for s in strides) \
            and all(d == 1 for d in rhs_dil):
        # A dilated lhs (a transposed convolution, the input gradient of a
        # strided one) is mostly zeros: split the output by phase instead.
        plain = dict(attrs, lhs_dilation=(1,) * ns, window_reversal=(False,) * ns)
        # Its sub-convolutions sum in float64: the zeros' removal changes
        # the order of the f32 sums (from XLA's), and costs a quarter or less.
        return _polyphase(make_convolution(plain, result_dtype, wide=True), lhs_dil, reversal, dn, B,
                          np.dtype(result_dtype))
    return _Conv(result_dtype=result_dtype, wide=wide, ib=ib, if_=if_, isp=isp, ki=ki, ko=ko,
                 ksp=ksp, ns=ns, strides=strides, lhs_dil=lhs_dil, rhs_dil=rhs_dil, G=G, B=B,
                 work=work, out_perm=out_perm, rev_axes=rev_axes,
                 channels_first=channels_first).conv


class _Conv:
    """One convolution op occurrence: its geometry, decoded once by
    :func:`make_convolution`, and the strategies :meth:`conv` picks from per call."""

    __slots__ = ("result_dtype", "wide", "ib", "if_", "isp", "ki", "ko", "ksp", "ns", "strides",
                 "lhs_dil", "rhs_dil", "G", "B", "work", "out_perm", "rev_axes", "channels_first")

    def __init__(self, **geometry):
        for k, v in geometry.items():
            setattr(self, k, v)

    def conv(self, lhs, rhs, padding):
        pad = np.asarray(padding, dtype=np.int64).reshape(self.ns, 2) if padding is not None \
            else np.zeros((self.ns, 2), dtype=np.int64)
        rhs = np.transpose(rhs, (self.ko, self.ki) + self.ksp).astype(self.work, copy=False)
        if self.rev_axes:
            # Reversing every lhs window equals reversing the kernel.
            rhs = np.flip(rhs, self.rev_axes)
        N, C = lhs.shape[self.ib], lhs.shape[self.if_]
        O, I = rhs.shape[:2]
        K = rhs.shape[2:]
        S = [lhs.shape[d] for d in self.isp]
        P = [max(0, (n - 1) * d + 1 + lo + hi) if n > 0 else max(0, lo + hi)
             for n, d, (lo, hi) in zip(S, self.lhs_dil, pad.tolist())]
        dwin = [(k - 1) * d + 1 if k > 0 else 0 for k, d in zip(K, self.rhs_dil)]
        out_sp = [0 if (p == 0 or w > p) else (p - w) // s + 1
                  for p, w, s in zip(P, dwin, self.strides)]
        Nb, Cg, Og = N // self.B, C // self.G, O // (self.B * self.G)
        if Cg != I:
            raise ValueError(f"kernel input features {I} != lhs features/group {Cg}")
        nout = int(np.prod(out_sp, dtype=np.int64))
        ksize = int(np.prod(K, dtype=np.int64))
        npad = int(np.prod(P, dtype=np.int64))
        if nout == 0 or Nb == 0 or Og == 0 or ksize == 0 or Cg == 0:
            res = np.zeros((Nb, self.B * self.G * Og) + tuple(out_sp), dtype=self.work)
            return np.ascontiguousarray(_finish(np.transpose(res, self.out_perm),
                                                np.dtype(self.result_dtype)))
        short = self.wide or Cg * ksize <= _SHORT_DOT
        calc = _wide(self.work) if short else self.work
        geo = (N, C, P, K, out_sp, Nb, Cg, Og, nout, ksize)
        if not short and self.work.kind in "fc" and _PER_POSITION_GAIN * npad * Og <= nout * Cg \
                and Nb * npad * ksize * Og <= _IM2COL_LIMIT:
            res = self._per_position(lhs, rhs, pad, geo, calc, self.channels_first)
        elif Nb * nout * Cg * ksize <= _IM2COL_LIMIT or ksize == 1:
            if self.channels_first:
                res = self._im2col_cf(lhs, rhs, pad, geo, calc)
            else:
                res = self._im2col_cl(lhs, rhs, pad, geo, calc)
        else:
            res = self._kernel_loop(lhs, rhs, pad, geo, calc)
        # res: canonical (Nb, B*G*Og, out...), feature o = (b * G + g) * Og + og
        # (spec: the groups' results concatenated).
        res = np.transpose(res, self.out_perm)
        if res.dtype != self.work and self.work.kind in "iub":
            res = res.astype(self.work)
        # (float64 results of short dots round once, to the result type)
        return np.ascontiguousarray(_finish(res, np.dtype(self.result_dtype)))

    def padded_lhs(self, lhs, pad, order, calc):
        """The lhs as ``order`` (canonical axes), padded and dilated, in ``calc``."""
        # Operands are converted to the result type first (the spec's
        # mixed-type reading), then to the calculation type (exact).
        x = np.transpose(lhs, order).astype(self.work, copy=False).astype(calc, copy=False)
        if not pad.any() and all(d == 1 for d in self.lhs_dil):
            return x
        return pad_spatial(x, pad[:, 0], pad[:, 1], [d - 1 for d in self.lhs_dil],
                           [order.index(d) for d in self.isp])

    def _im2col_cl(self, lhs, rhs, pad, geo, calc):
        """Channels-last im2col: rows (Nb, out...), columns (K..., Cg)."""
        N, C, P, K, out_sp, Nb, Cg, Og, nout, ksize = geo
        x = self.padded_lhs(lhs, pad, (self.ib,) + self.isp + (self.if_,), calc)  # (N, P..., C)
        Lc = np.moveaxis(x.reshape((self.B, Nb) + tuple(P) + (self.G, Cg)), 2 + self.ns, 1)
        # Lc: (B, G, Nb, P..., Cg)
        win = np.lib.stride_tricks.sliding_window_view(
            Lc, [(k - 1) * d + 1 for k, d in zip(K, self.rhs_dil)], axis=tuple(range(3, 3 + self.ns)))
        sel = (slice(None),) * 3 + tuple(slice(None, None, s) for s in self.strides) \
            + (slice(None),) + tuple(slice(None, None, d) for d in self.rhs_dil)
        win = win[sel]  # (B, G, Nb, out..., Cg, K...)
        order = tuple(range(3 + self.ns)) + tuple(range(4 + self.ns, 4 + 2 * self.ns)) + (3 + self.ns,)
        win = win.transpose(order)  # (B, G, Nb, out..., K..., Cg): a view
        # kernel (B, G, Og, Cg, K...) -> (B, G, K..., Cg, Og)
        R = rhs.reshape((self.B, self.G, Og, Cg) + tuple(K))
        korder = (0, 1) + tuple(range(4, 4 + self.ns)) + (3, 2)
        Rm = np.ascontiguousarray(R.transpose(korder), dtype=calc).reshape(self.B, self.G, ksize * Cg, Og)
        k = ksize * Cg
        # (float64 short dots are exact products rounded once: no split)
        parts = K[0] if self.ns and calc in (np.float32, np.complex64) and k <= _ROW_SPLIT_MAX \
            else 1
        if self.ns and calc.kind in "fc" and not _chunked(calc, k) \
                and self.B * self.G * Nb * nout * k * Og < _blas.SMALL_GEMM_MACS:
            # (Larger products keep BLAS's own threads: blas.py.)
            acc = _blocked_im2col(win, Rm, (self.B, self.G, Nb), out_sp, k, parts)
        else:
            cols = np.ascontiguousarray(win).reshape(self.B, self.G, Nb * nout, k)
            if parts > 1:
                out = np.empty(cols.shape[:-1] + (Og,), calc)
                macs = self.B * self.G * Nb * nout * k * Og
                if macs < _blas.SMALL_GEMM_MACS:   # (one BLAS thread, as _gemm)
                    acc = _blas.small_product(_row_products, cols, Rm, out, parts, macs=macs)
                else:
                    acc = _row_products(cols, Rm, out, parts)
            else:
                acc = _matmul(cols, Rm)
        acc = acc.reshape((self.B, self.G, Nb) + tuple(out_sp) + (Og,))
        # -> (Nb, B, G, Og, out...)
        acc = np.moveaxis(acc, 3 + self.ns, 3)
        acc = acc.transpose((2, 0, 1) + tuple(range(3, 4 + self.ns)))
        return acc.reshape((Nb, self.B * self.G * Og) + tuple(out_sp))

    def _im2col_cf(self, lhs, rhs, pad, geo, calc):
        """Channels-first im2col: columns (Cg, K...) per window. When the
        output rows are at least as long as the kernel rows, per image (Cg*K) x
        (out...), so that the kernel (Og, Cg*K) times it gives (Og, out...)
        -- NCHW -- directly; else (as in a weight gradient: a large "kernel",
        a few outputs) rows (out..., Nb) times the kernel transposed, so that
        the copy moves whole kernel rows."""
        N, C, P, K, out_sp, Nb, Cg, Og, nout, ksize = geo
        x = self.padded_lhs(lhs, pad, (self.ib, self.if_) + self.isp, calc)  # (N, C, P...)
        L = x.reshape((self.B, Nb, self.G, Cg) + tuple(P))
        win = np.lib.stride_tricks.sliding_window_view(
            L, [(k - 1) * d + 1 for k, d in zip(K, self.rhs_dil)], axis=tuple(range(4, 4 + self.ns)))
        sel = (slice(None),) * 4 + tuple(slice(None, None, s) for s in self.strides) \
            + tuple(slice(None, None, d) for d in self.rhs_dil)
        win = win[sel]  # (B, Nb, G, Cg, out..., K...)
        out_axes = tuple(range(4, 4 + self.ns))
        k_axes = tuple(range(4 + self.ns, 4 + 2 * self.ns))
        # The copy's inner loop runs along the last output or kernel axis:
        # the longer one.
        if out_sp[-1] >= K[-1]:
            # (B, G, Nb, K..., Cg, out...): the contraction runs over (K..., Cg)
            # as in the channels-last form (and XLA's kernels): the same sums.
            cols = np.ascontiguousarray(win.transpose((0, 2, 1) + k_axes + (3,) + out_axes))
            cols = cols.reshape(self.B, self.G, Nb, ksize * Cg, nout)
            R = rhs.reshape((self.B, self.G, Og, Cg, ksize)).swapaxes(-1, -2)
            R = np.ascontiguousarray(R, dtype=calc).reshape(self.B, self.G, 1, Og, ksize * Cg)
            acc = _matmul(R, cols)  # (B, G, Nb, Og, nout)
            acc = acc.transpose(2, 0, 1, 3, 4)
        else:
            R = np.ascontiguousarray(rhs, dtype=calc).reshape(self.B, self.G, Og, Cg * ksize)
            # (B, G, out..., Nb, Cg, K...)
            cols = np.ascontiguousarray(win.transpose((0, 2) + out_axes + (1, 3) + k_axes))
            cols = cols.reshape(self.B, self.G, nout * Nb, Cg * ksize)
            acc = _matmul(cols, R.swapaxes(-1, -2))  # (B, G, nout * Nb, Og)
            acc = acc.reshape(self.B, self.G, nout, Nb, Og).transpose(3, 0, 1, 4, 2)
        return acc.reshape((Nb, self.B * self.G * Og) + tuple(out_sp))

    def _per_position(self, lhs, rhs, pad, geo, calc, cf):
        """sum over kernel positions k of (lhs x kernel[k]) shifted by k: one
        matmul over the padded lhs contracting Cg, K partials summed in
        float64 (complex128)."""
        N, C, P, K, out_sp, Nb, Cg, Og, nout, ksize = geo
        acc_t = _wide(calc)
        R = rhs.reshape((self.B, self.G, Og, Cg, ksize))
        if cf:
            x = self.padded_lhs(lhs, pad, (self.ib, self.if_) + self.isp, calc)  # (N, C, P...)
            L = x.reshape((self.B, Nb, self.G, Cg, int(np.prod(P)))).swapaxes(1, 2)  # (B, G, Nb, Cg, P)
            # (B, G, 1, K*Og, Cg) @ (B, G, Nb, Cg, P) -> (B, G, Nb, K, Og, P...)
            W = np.ascontiguousarray(R.transpose(0, 1, 4, 2, 3), dtype=calc).reshape(
                self.B, self.G, 1, ksize * Og, Cg)
            Z = _matmul(W, L).reshape((self.B, self.G, Nb, ksize, Og) + tuple(P))
            parts = [Z[(slice(None),) * 3 + (j, slice(None))
                       + _window_slices(kpos, self.rhs_dil, out_sp, self.strides)]
                     for j, kpos in enumerate(np.ndindex(*K))]
            acc = _sum(parts, acc_t)  # (B, G, Nb, Og, out...)
            acc = acc.transpose((2, 0, 1) + tuple(range(3, 4 + self.ns)))
        else:
            x = self.padded_lhs(lhs, pad, (self.ib,) + self.isp + (self.if_,), calc)  # (N, P..., C)
            L = np.moveaxis(x.reshape((self.B, Nb) + tuple(P) + (self.G, Cg)), 2 + self.ns, 1)
            L = L.reshape(self.B, self.G, Nb * int(np.prod(P)), Cg)
            W = np.ascontiguousarray(R.transpose(0, 1, 3, 4, 2), dtype=calc).reshape(
                self.B, self.G, Cg, ksize * Og)
            Z = _matmul(L, W).reshape((self.B, self.G, Nb) + tuple(P) + (ksize, Og))
            parts = [Z[(slice(None),) * 3 + _window_slices(kpos, self.rhs_dil, out_sp, self.strides)
                       + (j, slice(None))]
                     for j, kpos in enumerate(np.ndindex(*K))]
            acc = _sum(parts, acc_t)  # (B, G, Nb, out..., Og)
            acc = np.moveaxis(acc, 3 + self.ns, 3).transpose((2, 0, 1) + tuple(range(3, 4 + self.ns)))
        return acc.reshape((Nb, self.B * self.G * Og) + tuple(out_sp))

    def _kernel_loop(self, lhs, rhs, pad, geo, calc):
        """One matmul per kernel position (im2col too large)."""
        N, C, P, K, out_sp, Nb, Cg, Og, nout, ksize = geo
        x = self.padded_lhs(lhs, pad, (self.ib, self.if_) + self.isp, calc)  # (N, C, P...)
        L = x.reshape((self.B, Nb, self.G, Cg) + tuple(P)).swapaxes(1, 2)  # (B, G, Nb, Cg, P...)
        R = rhs.reshape((self.B, self.G, Og, Cg) + tuple(K)).astype(calc, copy=False)
        acc = np.zeros((self.B, self.G, Nb * nout, Og), dtype=calc)
        for kpos in np.ndindex(*K):
            part = L[(slice(None),) * 4 + _window_slices(kpos, self.rhs_dil, out_sp, self.strides)]
            part = np.moveaxis(part, 3, -1).reshape(self.B, self.G, Nb * nout, Cg)
            acc += _matmul(part, np.ascontiguousarray(R[(Ellipsis,) + kpos].swapaxes(-1, -2)))
        acc = acc.reshape((self.B, self.G, Nb) + tuple(out_sp) + (Og,))
        acc = np.moveaxis(acc, 3 + self.ns, 3).transpose((2, 0, 1) + tuple(range(3, 4 + self.ns)))
        return acc.reshape((Nb, self.B * self.G * Og) + tuple(out_sp))


def _polyphase(conv, lhs_dil, reversal, dn, batch_groups, result_dtype):
    """A stride-1 convolution of an lhs dilated by d as prod(d) convolutions
    of the undilated lhs (``conv``: the same op without lhs dilation).

    Along one spatial axis, output o = d*m + p reads padded position o + k,
    which holds lhs element (o + k - lo) / d when that divides: only the
    kernel taps k = c + d*j with c = (lo - p) mod d, and then element
    m + j + e with e = (p + c - lo) / d. So the outputs of phase p are a
    plain convolution of the lhs with the taps c, c + d, ... and padding -e
    before: the same products, without the zeros.
    """
    isp = tuple(dn["input_spatial_dimensions"])
    ksp = tuple(dn["kernel_spatial_dimensions"])
    osp = tuple(dn["output_spatial_dimensions"])
    ns = len(isp)
    rev_axes = tuple(a for a, r in zip(ksp, reversal) if r)

    def conv_dilated(lhs, rhs, padding):
        pad = np.asarray(padding, dtype=np.int64).reshape(ns, 2) if padding is not None \
            else np.zeros((ns, 2), dtype=np.int64)
        if rev_axes:
            rhs = np.flip(rhs, rev_axes)
        S = [lhs.shape[a] for a in isp]
        K = [rhs.shape[a] for a in ksp]
        dims = [0] * (ns + 2)
        dims[dn["output_batch_dimension"]] = lhs.shape[dn["input_batch_dimension"]] // batch_groups
        dims[dn["output_feature_dimension"]] = rhs.shape[dn["kernel_output_feature_dimension"]]
        for a, n, d, k, (lo, hi) in zip(osp, S, lhs_dil, K, pad.tolist()):
            padded = max(0, (n - 1) * d + 1 + lo + hi) if n > 0 else max(0, lo + hi)
            dims[a] = 0 if (padded == 0 or k > padded) else padded - k + 1
        out = np.zeros(dims, dtype=result_dtype)
        for phase in np.ndindex(*lhs_dil):
            sub_pad, ridx, oidx = [], [slice(None)] * rhs.ndim, [slice(None)] * out.ndim
            empty = False
            for p, d, n, k, ka, oa, lo in zip(phase, lhs_dil, S, K, ksp, osp, pad[:, 0].tolist()):
                m = -(-(dims[oa] - p) // d) if dims[oa] > p else 0  # outputs of this phase
                c = (lo - p) % d
                kc = -(-(k - c) // d) if k > c else 0  # taps c, c + d, ...
                e = (p + c - lo) // d
                sub_pad.append((-e, m + kc - 1 - n + e))
                ridx[ka] = slice(c, None, d)
                oidx[oa] = slice(p, None, d)
                empty = empty or m == 0 or kc == 0
            if not empty:
                out[tuple(oidx)] = conv(lhs, rhs[tuple(ridx)], np.array(sub_pad, np.int64))
        return out

    return conv_dilated


def _sum(parts, acc):
    """parts[0] + parts[1] + ... in dtype ``acc`` (the first add converts)."""
    if len(parts) == 1:
        return np.array(parts[0], dtype=acc)
    r = np.add(parts[0], parts[1], dtype=acc)
    for p in parts[2:]:
        np.add(r, p, out=r)
    return r


def _check(op):
    for t in list(op.operand_types[:2]) + list(op.result_types):
        if getattr(t, "quant", None) is not None:
            raise Unsupported("quantized convolution")


@kernel("stablehlo.convolution", traits=("summing",))
def convolution(op):
    """spec: convolution. `precision_config` is ignored, as the spec allows.

    Operands are converted to the result element type first (integers then
    wrap around in that type); narrow floats accumulate in f32, short float
    dot products in float64.
    """
    _check(op)
    padding = op.attrs.get("padding")
    spec = _spec_conv(op)
    if spec is not None:
        return lambda lhs, rhs: spec(lhs, rhs, padding)
    conv = make_convolution(op.attrs, op.result_types[0].dtype)
    return lambda lhs, rhs: conv(lhs, rhs, padding)


@kernel("stablehlo.dynamic_conv")
def dynamic_conv(op):
    """spec: dynamic_conv. Convolution with `padding` given as an operand."""
    _check(op)
    conv = _spec_conv(op) or make_convolution(op.attrs, op.result_types[0].dtype)
    return lambda lhs, rhs, padding: conv(lhs, rhs, padding)


def _spec_conv(op):
    """Spec mode's sequential convolution for float and complex results
    (spec_kernels), or None (accurate mode; integer sums are exact)."""
    out = np.dtype(op.result_types[0].dtype)
    if not _spec.is_spec(op) or not (dtypes.is_float(out) or dtypes.is_complex(out)):
        return None
    geometry = conv_geometry(op.attrs)
    return lambda lhs, rhs, padding: _spec.convolution(lhs, rhs, geometry, padding, out)
