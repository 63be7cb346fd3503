"""Window ops: reduce_window and select_and_scatter.

Windows are strided views of the padded (and base-dilated) input, never
copies per output element:

* reduce_window with a known reducer (add, max, ...) reduces a
  ``sliding_window_view`` with the matching ufunc in one call;
* other bodies (several operands, argmax-style pairs, ...) are folded one
  window position at a time over all windows at once when the body is
  elementwise (``regions.is_batchable``), else element by element;
* select_and_scatter folds `select` over window positions for all windows at
  once, then applies `scatter` to the selected positions with the scatter
  machinery of gather_scatter (ufunc.at or conflict-free rounds).
"""

import numpy as np

from .. import dtypes
from ..registry import kernel
from ..regions import batched, broadcast_results, is_batchable, reducer_kind
from .gather_scatter import apply_updates, update_strategy


def pad_value(x, value, lo, hi, interior):
    """spec pad: ``value`` around (lo/hi, negative crops) and between (interior)."""
    shape = []
    sl_in = []
    for n, l, h, i in zip(x.shape, lo, hi, interior):
        dil = (n - 1) * (i + 1) + 1 if n > 0 else 0
        shape.append(max(l, 0) + dil + max(h, 0))
        sl_in.append(slice(max(l, 0), max(l, 0) + dil, i + 1))
    out = np.full(shape, value, dtype=x.dtype)
    out[tuple(sl_in)] = x
    crop = tuple(slice(max(-l, 0), max(s - max(-h, 0), max(-l, 0)))
                 for s, l, h in zip(shape, lo, hi))
    return out[crop]


def _num_windows(p, w, wd, s):
    """spec reduce_window (C15): windows along one padded dimension."""
    dw = (w - 1) * wd + 1 if w > 0 else 0
    if p == 0 or dw > p:
        return 0
    return (p - dw) // s + 1


def _reduce_ufunc(kind, dtype):
    """ufunc whose .reduce implements reducer ``kind`` for dtype, or None."""
    if dtypes.is_bool(dtype):
        return {"add": np.logical_or, "multiply": np.logical_and,
                "maximum": np.logical_or, "minimum": np.logical_and,
                "and": np.logical_and, "or": np.logical_or,
                "xor": np.logical_xor}[kind]
    if dtype in dtypes.SUB_BYTE_INTS or dtype in dtypes.ML_FLOATS:
        return None  # no reliable ufunc.reduce semantics: fold with the body
    if kind in ("and", "or", "xor"):
        if not dtypes.is_integer(dtype):
            return None
        return {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[kind]
    if dtypes.is_complex(dtype) and kind in ("maximum", "minimum"):
        return None
    return {"add": np.add, "multiply": np.multiply, "maximum": np.maximum,
            "minimum": np.minimum}[kind]


class _Windows:
    """Window geometry of one reduce_window for one input shape."""

    def __init__(self, shape, wdims, strides, bdil, wdil, padding):
        r = len(shape)
        self.lo = [int(p) for p in padding[:, 0]]
        self.hi = [int(p) for p in padding[:, 1]]
        self.interior = [b - 1 for b in bdil]
        padded = [max(max(l, 0) + ((n - 1) * b + 1 if n > 0 else 0) + max(h, 0)
                      - max(-l, 0) - max(-h, 0), 0)
                  for n, l, h, b in zip(shape, self.lo, self.hi, bdil)]
        self.out = tuple(_num_windows(p, w, d, s)
                         for p, w, d, s in zip(padded, wdims, wdil, strides))
        self.wdims, self.strides, self.wdil = wdims, strides, wdil
        self.rank = r
        self.empty = (0 in self.out) or (0 in wdims)

    def pad(self, x, init):
        return pad_value(x, init, self.lo, self.hi, self.interior)

    def position_slices(self, pos):
        """Slice of the padded input holding element ``pos`` of every window."""
        return tuple(slice(p * d, p * d + (n - 1) * s + 1, s)
                     for p, d, n, s in zip(pos, self.wdil, self.out, self.strides))

    def view(self, padded):
        """(out..., window...) strided view of all windows."""
        dw = [(w - 1) * d + 1 for w, d in zip(self.wdims, self.wdil)]
        v = np.lib.stride_tricks.sliding_window_view(padded, dw)
        sel = tuple(slice(None, None, s) for s in self.strides) + \
            tuple(slice(None, None, d) for d in self.wdil)
        v = v[sel]
        return v[tuple(slice(0, n) for n in self.out)]


def _call_elementwise(region, batchable, args, shape):
    """region(*args) over arrays of ``shape``: batched, or element by element."""
    if batchable:
        return broadcast_results(region(*args), shape)
    n = int(np.prod(shape, dtype=np.int64))
    outs = None
    flat = [np.broadcast_to(a, shape).reshape(-1) for a in args]
    for k in range(n):
        res = region(*[f[k:k + 1].reshape(()).copy() for f in flat])
        if outs is None:
            outs = [np.empty(n, dtype=np.asarray(r).dtype) for r in res]
        for o, r in zip(outs, res):
            o[k] = r
    if outs is None:
        return None
    return [o.reshape(shape) for o in outs]


@kernel("stablehlo.reduce_window", special=True)
def reduce_window(op):
    """spec: reduce_window. Reduces every window of the padded inputs with `body`.

    The reduction of each window starts from the init values and folds the
    window's elements in row-major order.
    """
    n = len(op.operand_types) // 2
    rank = len(op.operand_types[0].shape)
    wdims = tuple(op.attrs["window_dimensions"])
    strides = tuple(op.attrs.get("window_strides") or (1,) * rank)
    bdil = tuple(op.attrs.get("base_dilations") or (1,) * rank)
    wdil = tuple(op.attrs.get("window_dilations") or (1,) * rank)
    padding = op.attrs.get("padding")
    padding = np.zeros((rank, 2), dtype=np.int64) if padding is None else \
        np.asarray(padding, dtype=np.int64).reshape(rank, 2)
    body = op.regions[0]
    res_dtypes = [t.dtype for t in op.result_types]
    kind = reducer_kind(body) if n == 1 else None
    ufunc = _reduce_ufunc(kind, res_dtypes[0]) if kind else None
    batchable = is_batchable(body)
    # Floating-point sums/products are not associative.
    sequential = kind in ("add", "multiply") and not dtypes.is_integer(res_dtypes[0]) \
        and not dtypes.is_bool(res_dtypes[0])
    cache = {}

    def run(ctx, regions, *operands):
        inputs, inits = operands[:n], operands[n:]
        shape = inputs[0].shape
        geo = cache.get(shape)
        if geo is None:
            geo = cache[shape] = _Windows(shape, wdims, strides, bdil, wdil, padding)
        if geo.empty:
            out = [np.full(geo.out, i, dtype=dt) for i, dt in zip(inits, res_dtypes)]
            return out[0] if n == 1 else out
        padded = [geo.pad(x, i) for x, i in zip(inputs, inits)]
        if ufunc is not None and sequential:
            # Rounding depends on the order: fold init, then the window's
            # elements in row-major order (what XLA does), for all windows.
            acc = np.array(np.broadcast_to(inits[0], geo.out), dtype=res_dtypes[0])
            for pos in np.ndindex(*wdims):
                ufunc(acc, padded[0][geo.position_slices(pos)], out=acc)
            return acc
        if ufunc is not None:
            win = geo.view(padded[0])
            red = ufunc.reduce(win, axis=tuple(range(rank, 2 * rank)))
            res = ufunc(inits[0], red)
            return np.ascontiguousarray(res, dtype=res_dtypes[0])
        acc = [np.broadcast_to(i, geo.out) for i in inits]
        body_fn = batched(ctx, regions[0]) if batchable else regions[0]
        for pos in np.ndindex(*wdims):
            sl = geo.position_slices(pos)
            acc = _call_elementwise(body_fn, batchable,
                                    acc + [p[sl] for p in padded], geo.out)
        out = [np.ascontiguousarray(a, dtype=dt) for a, dt in zip(acc, res_dtypes)]
        return out[0] if n == 1 else out
    return run


@kernel("stablehlo.select_and_scatter", special=True)
def select_and_scatter(op):
    """spec: select_and_scatter.

    For each source element, its window's element is chosen by folding
    `select` over the window in row-major order (the current choice is kept
    while `select(current, candidate)` is true); padding positions are never
    chosen. Then every result element starts from `init_value` and gets
    `scatter(result, source)` for each source element that chose it, in
    row-major source order.
    """
    rank = len(op.operand_types[0].shape)
    wdims = tuple(op.attrs.get("window_dimensions") or (1,) * rank)
    strides = tuple(op.attrs.get("window_strides") or (1,) * rank)
    padding = op.attrs.get("padding")
    padding = np.zeros((rank, 2), dtype=np.int64) if padding is None else \
        np.asarray(padding, dtype=np.int64).reshape(rank, 2)
    lo = [int(p) for p in padding[:, 0]]
    select_body, scatter_body = op.regions
    sel_batchable = is_batchable(select_body)
    dtype = op.result_types[0].dtype
    fast, sc_batchable = update_strategy(op, scatter_body, dtype)

    def run(ctx, regions, operand, source, init):
        select, scatter = regions
        if sel_batchable:
            select = batched(ctx, select)
        if sc_batchable:
            scatter = batched(ctx, scatter)
        shape = operand.shape
        sshape = source.shape
        result = np.full(shape, init, dtype=dtype).reshape(-1)
        if source.size == 0 or operand.size == 0:
            return result.reshape(shape)
        have = np.zeros(sshape, dtype=bool)
        sel_val = np.zeros(sshape, dtype=operand.dtype)
        sel_lin = np.zeros(sshape, dtype=np.int64)
        for pos in np.ndindex(*wdims):
            # Operand coordinates of this window position for every source index.
            coords = [np.arange(ns) * s + p - l
                      for ns, s, p, l in zip(sshape, strides, pos, lo)]
            valid_1d = [(c >= 0) & (c < n) for c, n in zip(coords, shape)]
            valid = np.ones(sshape, dtype=bool)
            for ax, v in enumerate(valid_1d):
                valid &= v.reshape([-1 if a == ax else 1 for a in range(rank)])
            if not valid.any():
                continue
            clipped = [np.clip(c, 0, n - 1) for c, n in zip(coords, shape)]
            grid = np.ix_(*clipped)
            vals = operand[grid]
            lin = np.ravel_multi_index(grid, shape)
            keep = _call_elementwise(select, sel_batchable, [sel_val, vals], sshape)[0]
            take = valid & ~(have & np.asarray(keep, dtype=bool))
            sel_val = np.where(take, vals, sel_val)
            sel_lin = np.where(take, lin, sel_lin)
            have |= valid
        targets = sel_lin[have]
        values = [np.asarray(source)[have]]
        apply_updates([result], targets, values, scatter_body, sc_batchable, fast,
                      scatter)
        return result.reshape(shape)
    return run
