"""Window ops: reduce_window and select_and_scatter.

Windows are strided views of the padded (and base-dilated) input, never
copies per output element:

* reduce_window with a known reducer (add, max, ...; the shared table of
  ``reducers``) reduces a ``sliding_window_view`` in one ufunc call (small
  float-sum windows fold position by position in float64);
* a prefix-scan window (JAX's cumsum/cummax/cumlogsumexp...) is an O(n)
  accumulate, or a log-depth tree scan for other elementwise bodies;
* other bodies (several operands, argmax-style pairs, ...) are folded one
  window position at a time over all windows at once when the body is
  elementwise (``regions.is_batchable``), else element by element;
* select_and_scatter folds `select` over window positions for all windows at
  once, then applies `scatter` to the selected positions with the scatter
  machinery of gather_scatter (ufunc.at or conflict-free rounds).
"""

import numpy as np

from .. import dtypes
from ..regions import batched, broadcast_results, is_batchable, reducer_kind
from ..registry import kernel
from .gather_scatter import apply_updates, update_strategy
from .reducers import reducer


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


def _prefix_scan_axis(shape, wdims, strides, bdil, wdil, padding):
    """``(axis, reverse)`` if the window is an inclusive prefix scan, else None.

    JAX lowers every cumulative op (cumsum, cumprod, cummax, cummin,
    cumlogsumexp) on CPU to a reduce_window whose window spans the whole
    axis (``w >= n``) with ``w - 1`` padding before (forward) or after
    (reverse) and unit strides and dilations; every other axis has a window
    of 1 and no padding. Output ``i`` then reduces ``w - 1 - i`` init values
    and ``x[0..i]`` (forward; ``x[i..n-1]`` reversed).
    """
    if any(s != 1 for s in strides) or any(b != 1 for b in bdil) or \
            any(d != 1 for d in wdil):
        return None
    found = None
    for ax, (n, w, (lo, hi)) in enumerate(zip(shape, wdims, padding.tolist())):
        if w == 1 and lo == 0 and hi == 0:
            continue
        if found is not None or n < 2 or w < n:
            return None
        if lo == w - 1 and hi == 0:
            found = (ax, False)
        elif lo == 0 and hi == w - 1:
            found = (ax, True)
        else:
            return None
    return found


def _idempotent_init(combine, inits):
    """True if ``body(init, init)`` gives ``init`` back bit for bit.

    Then (the spec lets a reduction use any tree that keeps the order) the
    padding's init values collapse into one and a prefix-scan window is
    ``init ∘ scan(x)``; for add this is init = +-0, for multiply 1, always
    for max/min/and/or.
    """
    try:
        again = combine(inits)
    except Exception:
        return False
    for a, b in zip(again, inits):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
            return False
    return True


def _tree_scan(body, xs, axis, reverse):
    """Inclusive scan of a batchable variadic ``body`` along ``axis``.

    Hillis-Steele: ``ceil(log2 n)`` body calls on whole arrays; in round d
    element i combines the range ending d before it (forward) with its own,
    the earlier range always on the left, so the in-order traversal of every
    result's tree keeps the window's order (what the spec requires of a
    reduction tree).
    """
    n = xs[0].shape[axis]
    ys = [np.array(x) for x in xs]
    d = 1
    while d < n:
        lo = [slice(None)] * ys[0].ndim
        hi = list(lo)
        lo[axis] = slice(0, n - d)
        hi[axis] = slice(d, n)
        lo, hi = tuple(lo), tuple(hi)
        shape = ys[0][hi].shape
        res = broadcast_results(body(*[y[lo] for y in ys], *[y[hi] for y in ys]), shape)
        dst = lo if reverse else hi
        new = [np.array(y) for y in ys]
        for y, r in zip(new, res):
            y[dst] = r
        ys = new
        d *= 2
    return ys


# Windows of up to this many elements are folded position by position
# (vectorized over all windows, in the accumulation dtype); larger ones are
# reduced over a strided view in one ufunc call.
_POSITION_FOLD_MAX = 64


@kernel("stablehlo.reduce_window", special=True)
def reduce_window(op):
    """spec: reduce_window. Reduces every window of the padded inputs with `body`.

    Known reducer bodies use the shared table (``reducers``): exact kinds are
    order-independent, float sums and products accumulate in float64 and
    round once (the spec leaves a reduction's tree implementation-defined).
    Prefix-scan windows (JAX's cumulative ops) run as an O(n) accumulate, or
    as a log-depth tree scan for other elementwise bodies; everything else
    folds the window positions over all windows at once.
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
    red = reducer(kind, res_dtypes[0]) if kind else None
    batchable = is_batchable(body)
    cache = {}
    scans = {}

    def run(ctx, regions, *operands):
        inputs, inits = operands[:n], operands[n:]
        shape = inputs[0].shape
        geo = cache.get(shape)
        if geo is None:
            geo = cache[shape] = _Windows(shape, wdims, strides, bdil, wdil, padding)
            scans[shape] = _prefix_scan_axis(shape, wdims, strides, bdil, wdil, padding) \
                if red is not None or batchable else None
        if geo.empty:
            out = [np.full(geo.out, i, dtype=dt) for i, dt in zip(inits, res_dtypes)]
            return out[0] if n == 1 else out
        scan = scans[shape]
        if scan is not None:
            axis, reverse = scan
            if red is not None:
                if _idempotent_init(lambda i: [red(i[0], i[0])], inits):
                    x = inputs[0]
                    if x.dtype != res_dtypes[0]:
                        x = x.astype(res_dtypes[0])
                    if reverse:
                        x = np.flip(x, axis)  # the reducer kinds all commute
                    r = red.accumulate(x, axis, inits[0])
                    return np.ascontiguousarray(np.flip(r, axis) if reverse else r)
            else:
                body_fn = batched(ctx, regions[0])
                if _idempotent_init(lambda i: body_fn(*i, *i), inits):
                    xs = [x if x.dtype == dt else x.astype(dt)
                          for x, dt in zip(inputs, res_dtypes)]
                    ys = _tree_scan(body_fn, xs, axis, reverse)
                    args = ys + list(inits) if reverse else list(inits) + ys
                    out = broadcast_results(body_fn(*args), geo.out)
                    out = [np.ascontiguousarray(a, dtype=dt) for a, dt in zip(out, res_dtypes)]
                    return out[0] if n == 1 else out
        if red is not None:
            x = inputs[0]
            small = int(np.prod(wdims)) <= _POSITION_FOLD_MAX
            if not red.exact and small:
                # Float add/multiply, small window: fold the positions into a
                # float64 accumulator over all windows at once, round once
                # (the padded input stays in its own type; ml_dtypes floats
                # go through f32, exactly).
                if x.dtype in dtypes.ML_FLOATS:
                    x = x.astype(np.float32)
                padded = geo.pad(x, np.asarray(inits[0]).astype(x.dtype))
                acc = np.empty(geo.out, dtype=red.acc)
                acc[...] = np.asarray(inits[0]).astype(red.acc)
                for pos in np.ndindex(*wdims):
                    red.ufunc(acc, padded[geo.position_slices(pos)], out=acc)
                return acc.astype(res_dtypes[0])
            if x.dtype != red.acc and red.exact:
                x = x.astype(red.acc)
            padded = geo.pad(x, np.asarray(inits[0]).astype(x.dtype))
            win = geo.view(padded)
            res = red.reduce(win, tuple(range(rank, 2 * rank)), inits[0], contiguous_ok=False)
            return np.ascontiguousarray(res, dtype=res_dtypes[0])
        padded = [geo.pad(x, i) for x, i in zip(inputs, inits)]
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
