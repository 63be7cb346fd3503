"""Indexed data movement: gather, dynamic_gather and scatter.

Both ops map every element of one side (the gather result, the scatter
updates) to an index of the other side (the operand). The kernels build that
whole index grid at once with numpy broadcasting -- one integer array per
operand dimension, shaped like the result/updates -- and then use advanced
indexing, so no Python code runs per element. Grid parts that only depend on
static shapes are cached per shape combination.
"""

import numpy as np

from ..regions import batched, broadcast_results, is_batchable, reducer_kind
from ..registry import kernel
from .reducers import reducer

_I64_MAX = np.iinfo(np.int64).max


def as_index(a):
    """Integer index tensor -> int64 array (huge unsigned values saturate).

    Any integer type may index; saturating keeps out-of-range unsigned 64-bit
    values out of range (so they are clamped / skipped as the spec says)
    instead of wrapping to negative numbers.
    """
    a = np.asarray(a)
    if a.dtype == np.uint64:
        return np.minimum(a, np.uint64(_I64_MAX)).astype(np.int64)
    return a.astype(np.int64)


def _start_index_vectors(indices, index_vector_dim):
    """Start indices with the index vector moved last: shape ``B + (K,)``.

    ``index_vector_dim == rank`` means an implicit trailing dimension of 1.
    """
    if index_vector_dim >= indices.ndim:
        return indices[..., None]
    return np.moveaxis(indices, index_vector_dim, -1)


def _batch_position(d_start, index_vector_dim):
    """Axis of the batch index (indices without the index vector) for d_start."""
    return d_start - (0 if d_start < index_vector_dim else 1)


def _place(arr_shape_b, full_rank, batch_axes):
    """Reshape an array over the batch axes so it broadcasts in ``full_rank`` dims."""
    shape = [1] * full_rank
    for ax, n in zip(batch_axes, arr_shape_b):
        shape[ax] = n
    return tuple(shape)


# --------------------------------------------------------------------------
# gather


class _GatherPlan:
    """Static part of a gather for one (operand, indices, slice sizes) shape."""

    def __init__(self, dn, operand_shape, index_shape, slice_sizes):
        rank = len(operand_shape)
        ivd = dn["index_vector_dim"]
        offset_dims = tuple(dn["offset_dims"])
        collapsed = set(dn["collapsed_slice_dims"])
        obatch = tuple(dn["operand_batching_dims"])
        ibatch = tuple(dn["start_indices_batching_dims"])
        self.start_index_map = tuple(dn["start_index_map"])
        self.ivd = ivd
        batch_shape = tuple(n for i, n in enumerate(index_shape) if i != ivd)
        # Operand dims that survive into the result, in order (offset_dims).
        kept = [d for d in range(rank) if d not in collapsed and d not in obatch]
        if len(kept) != len(offset_dims):
            raise ValueError("offset_dims do not match the kept slice dims")
        out_rank = len(batch_shape) + len(offset_dims)
        batch_dims = [d for d in range(out_rank) if d not in offset_dims]
        self.result_shape = [0] * out_rank
        for d, n in zip(batch_dims, batch_shape):
            self.result_shape[d] = n
        for d, od in zip(kept, offset_dims):
            self.result_shape[od] = slice_sizes[d]
        self.result_shape = tuple(self.result_shape)
        self.batch_dims = batch_dims
        self.batch_shape = batch_shape
        # Clamp bounds per start index component (spec: clamp to
        # dim(operand) - slice_sizes).
        self.upper = np.array([operand_shape[d] - slice_sizes[d]
                               for d in self.start_index_map], dtype=np.int64)
        # Static per-dimension parts: offsets within the slice plus the batching
        # index (an arange over the matching batch axis).
        static = [np.zeros((1,) * out_rank, dtype=np.int64) for _ in range(rank)]
        for d, od in zip(kept, offset_dims):
            shape = [1] * out_rank
            shape[od] = slice_sizes[d]
            static[d] = np.arange(slice_sizes[d], dtype=np.int64).reshape(shape)
        for od_, is_ in zip(obatch, ibatch):
            ax = batch_dims[_batch_position(is_, ivd)]
            shape = [1] * out_rank
            shape[ax] = self.result_shape[ax]
            static[od_] = np.arange(self.result_shape[ax], dtype=np.int64).reshape(shape)
        self.static = static
        self.start_shape = _place(batch_shape, out_rank, batch_dims)
        self.empty = (int(np.prod(self.result_shape, dtype=np.int64)) == 0)

    def __call__(self, operand, indices):
        if self.empty:
            return np.empty(self.result_shape, dtype=operand.dtype)
        starts = _start_index_vectors(as_index(indices), self.ivd)
        # Clamp so the whole slice stays in bounds (spec: gather semantics).
        starts = np.clip(starts, 0, np.maximum(self.upper, 0))
        idx = list(self.static)
        for k, d in enumerate(self.start_index_map):
            idx[d] = idx[d] + starts[..., k].reshape(self.start_shape)
        # A 0-d result of advanced indexing is a numpy scalar: keep it an array.
        return np.asarray(operand[tuple(idx)])


def _gather_runner(dn, static_slice_sizes=None):
    cache = {}

    def run(operand, indices, slice_sizes=None):
        sizes = static_slice_sizes if slice_sizes is None else \
            tuple(int(s) for s in as_index(slice_sizes))
        key = (operand.shape, indices.shape, sizes)
        plan = cache.get(key)
        if plan is None:
            plan = cache[key] = _GatherPlan(dn, operand.shape, indices.shape, sizes)
        return plan(operand, indices)
    return run


@kernel("stablehlo.gather")
def gather(op):
    """spec: gather. Slices of `operand` at (clamped) `start_indices`.

    `indices_are_sorted` is only a promise and is ignored.
    """
    dn = op.attrs["dimension_numbers"]
    sizes = tuple(op.attrs["slice_sizes"])
    run = _gather_runner(dn, sizes)
    return lambda operand, indices: run(operand, indices)


@kernel("stablehlo.dynamic_gather")
def dynamic_gather(op):
    """spec: dynamic_gather. Gather with `slice_sizes` given as an operand."""
    dn = op.attrs["dimension_numbers"]
    run = _gather_runner(dn)
    return lambda operand, indices, slice_sizes: run(operand, indices, slice_sizes)


# --------------------------------------------------------------------------
# scatter


class _ScatterPlan:
    """Static part of a scatter: the linear operand index of every update element.

    Update elements whose result index is out of bounds are dropped (spec:
    `updated_results = results` for them); ``order`` lists the kept elements
    in row-major update order, which is the schedule applied.
    """

    def __init__(self, dn, input_shape, index_shape, update_shape):
        rank = len(input_shape)
        ivd = dn["index_vector_dim"]
        uwd = tuple(dn["update_window_dims"])
        inserted = set(dn["inserted_window_dims"])
        ibatch = tuple(dn["input_batching_dims"])
        sbatch = tuple(dn["scatter_indices_batching_dims"])
        self.sd2od = tuple(dn["scattered_dims_to_operand_dims"])
        self.ivd = ivd
        self.input_shape = tuple(input_shape)
        urank = len(update_shape)
        scatter_dims = [d for d in range(urank) if d not in uwd]
        self.start_shape = _place([update_shape[d] for d in scatter_dims], urank,
                                  scatter_dims)
        window_operand_dims = [d for d in range(rank) if d not in inserted
                               and d not in ibatch]
        static = [np.zeros((1,) * urank, dtype=np.int64) for _ in range(rank)]
        for d, ud in zip(window_operand_dims, uwd):
            shape = [1] * urank
            shape[ud] = update_shape[ud]
            static[d] = np.arange(update_shape[ud], dtype=np.int64).reshape(shape)
        for d, sd in zip(ibatch, sbatch):
            ax = scatter_dims[_batch_position(sd, ivd)]
            shape = [1] * urank
            shape[ax] = update_shape[ax]
            static[d] = np.arange(update_shape[ax], dtype=np.int64).reshape(shape)
        self.static = static
        self.update_shape = tuple(update_shape)
        self.size = int(np.prod(update_shape, dtype=np.int64))

    def targets(self, indices):
        """(linear result index, flat update positions) of in-bounds updates."""
        if self.size == 0:
            z = np.zeros(0, dtype=np.int64)
            return z, z
        starts = _start_index_vectors(as_index(indices), self.ivd)
        idx = list(self.static)
        for k, d in enumerate(self.sd2od):
            idx[d] = idx[d] + starts[..., k].reshape(self.start_shape)
        # Bounds and the row-major linear index on the un-broadcast index
        # arrays (a start per update row, an offset per window element):
        # one full-size array is built, for `lin`.
        ok = True
        lin = np.int64(0)
        stride = 1
        for i, n in zip(reversed(idx), reversed(self.input_shape)):
            ok = ok & ((i >= 0) & (i < n))
            lin = lin + i * np.int64(stride)
            stride *= int(n)
        lin = np.broadcast_to(lin, self.update_shape).reshape(-1)
        ok = np.broadcast_to(ok, self.update_shape)
        if ok.all():
            # Every element in bounds: ``pos`` selects all of them (a view).
            return lin.astype(np.int64, copy=False), slice(None)
        pos = np.flatnonzero(ok)
        return lin[pos].astype(np.int64, copy=False), pos


def replaced_args(block):
    """For a body returning some of its arguments unchanged: their positions.

    A scatter body `return %arg_{N+i}...` replaces; returning `%arg_i`
    keeps the old value. Returns the tuple of argument numbers, else None.
    """
    if block.steps or block.capture_slots:
        return None
    pos = {s: i for i, s in enumerate(block.arg_slots)}
    if not all(s in pos for s in block.result_slots):
        return None
    return tuple(pos[s] for s in block.result_slots)


def occurrence_rounds(lin):
    """Split positions into rounds in which every target appears at most once.

    Round r holds, for every target, its r-th update in schedule order, so
    applying rounds one after another preserves the per-target order the
    spec's sequential schedule gives.
    """
    n = lin.size
    if n == 0:
        return []
    order = np.argsort(lin, kind="stable")
    s = lin[order]
    new = np.ones(n, dtype=bool)
    new[1:] = s[1:] != s[:-1]
    group_start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    occ = np.empty(n, dtype=np.int64)
    occ[order] = np.arange(n) - group_start
    rounds = int(occ.max()) + 1
    if rounds == 1:
        return [np.arange(n)]
    by = np.argsort(occ, kind="stable")
    counts = np.bincount(occ, minlength=rounds)
    return np.split(by, np.cumsum(counts)[:-1])


def apply_updates(results, lin, values, body, batchable, fast, region):
    """results[lin[j]] = body(results[lin[j]], values[j]) in order of j.

    ``results``: flat writable arrays; ``values``: flat update arrays aligned
    with ``lin``. ``fast`` is a ``reducers.Reducer`` for single-result reducer bodies,
    ``("replace", positions)`` for bodies returning arguments.
    """
    n = len(results)
    if lin.size == 0:
        return
    if callable(fast):
        fast.at(results[0], lin, values[0])
        return
    if fast is not None and fast[0] == "replace":
        # Last write per target wins (positions >= n are updates).
        rev = lin[::-1]
        _, first = np.unique(rev, return_index=True)
        keep = lin.size - 1 - first
        tgt = lin[keep]
        for i, p in enumerate(fast[1]):
            src = values[p - n] if p >= n else results[p]
            results[i][tgt] = src[keep] if p >= n else src[tgt]
        return
    if batchable:
        for sel in occurrence_rounds(lin):
            tgt = lin[sel]
            args = [r[tgt] for r in results] + [v[sel] for v in values]
            out = broadcast_results(region(*args), tgt.shape)
            for r, o in zip(results, out):
                r[tgt] = o
        return
    for j in range(lin.size):
        t = lin[j]
        args = [r[t:t + 1].reshape(()) for r in results] + \
               [v[j:j + 1].reshape(()) for v in values]
        out = region(*[a.copy() for a in args])
        for r, o in zip(results, out):
            r[t] = o


def update_strategy(op, block, dtype):
    """Pick the fast path for a scatter-like update body at compile time."""
    rep = replaced_args(block)
    if rep is not None:
        return ("replace", rep), False
    kind = reducer_kind(block)
    if kind is not None:
        # The shared reducer table: element-type ufunc.at (the spec's
        # sequential update order), signed zeros of float max/min fixed.
        red = reducer(kind, dtype)
        if red is not None and _ufunc_at_works(red.ufunc, dtype):
            return red, True
    return None, is_batchable(block)


_AT_OK = {}


def _ufunc_at_works(uf, dtype):
    """ufunc.at exists for every builtin dtype; ml_dtypes ones are probed once."""
    key = (uf, dtype)
    if key not in _AT_OK:
        try:
            a = np.zeros(2, dtype=dtype)
            uf.at(a, np.array([0, 0]), np.ones(2, dtype=dtype))
            _AT_OK[key] = True
        except Exception:
            _AT_OK[key] = False
    return _AT_OK[key]


@kernel("stablehlo.scatter", special=True)
def scatter(op):
    """spec: scatter. Applies `update_computation` at every in-bounds index.

    Schedule: row-major order of the update index space. Out-of-bounds
    update elements are skipped individually, as the spec's `exec` does.
    `indices_are_sorted` / `unique_indices` are promises, ignored.
    """
    dn = op.attrs["scatter_dimension_numbers"]
    n = (len(op.operand_types) - 1) // 2
    body = op.regions[0]
    fast, batchable = update_strategy(op, body, op.operand_types[0].dtype)
    res_dtypes = [t.dtype for t in op.result_types]
    cache = {}

    def run(ctx, regions, *operands):
        inputs = operands[:n]
        indices = operands[n]
        updates = operands[n + 1:]
        key = (inputs[0].shape, indices.shape, updates[0].shape)
        plan = cache.get(key)
        if plan is None:
            plan = cache[key] = _ScatterPlan(dn, inputs[0].shape, indices.shape,
                                             updates[0].shape)
        lin, pos = plan.targets(indices)
        results = [np.array(x, dtype=dt, copy=True).reshape(-1)
                   for x, dt in zip(inputs, res_dtypes)]
        values = [np.asarray(u).reshape(-1)[pos] for u in updates]
        region = batched(ctx, regions[0]) if batchable else regions[0]
        apply_updates(results, lin, values, body, batchable, fast, region)
        out = [r.reshape(inputs[0].shape) for r in results]
        return out[0] if n == 1 else out
    return run
