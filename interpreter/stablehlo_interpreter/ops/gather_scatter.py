"""Indexed data movement: gather, dynamic_gather and scatter.

Both ops map every element of one side (the gather result, the scatter
updates) to an index of the other side (the operand). The kernels compute
that map as one row-major linear operand index per element, from the
un-broadcast parts (a start index per batch position, an offset per window
position) with numpy broadcasting, and then move the data with one
``np.take`` / ``ufunc.at`` call, so no Python code runs per element. The most
common gather (one indexed axis, full slices elsewhere: ``x[idx]``) is a
single ``np.take`` along that axis. Grid parts that only depend on static
shapes are cached per shape combination.
"""

import numpy as np

from ..errors import Interrupt
from ..index_chains import known_index_max
from ..pool import run_chunks
from ..regions import batched, broadcast_results, is_batchable, reducer_kind
from ..registry import annotate, kernel
from .reducers import reducer

try:
    from .. import _gather
except ImportError:   # not built: numpy's take (the same elements)
    _gather = None

_I64_MAX = np.iinfo(np.int64).max
_I32_MAX = np.iinfo(np.int32).max
_I32 = np.dtype(np.int32)
_UNSIGNED = {n: np.dtype(f"u{n}") for n in (1, 2, 4, 8)}


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
    """Static part of a gather for one (operand, indices, slice sizes) shape.

    Two schedules, both plain copies of operand elements (so bit-identical):

    * ``take``: one start index component, full slices along every other
      operand dim and a slice of 1 along the indexed one (``x[idx]``, row and
      embedding lookups, the probe of ``jnp.searchsorted``): one
      ``np.take(mode="clip")`` along that axis -- its clip to ``[0, n - 1]``
      is the spec's clamp to ``[0, dim - slice_size]`` -- and a transpose
      into the result's dim order (a view).
    * ``linear``: everything else (``take_along_axis``, multi-dim starts,
      windows). The row-major linear operand index of every result element
      is a precomputed static part (offsets within the slice, batching
      aranges) plus the clamped start components times their strides; one
      ``np.take`` on the flat operand reads them all.
    """

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
        self.empty = (int(np.prod(self.result_shape, dtype=np.int64)) == 0)
        # Clamp bounds per start index component (spec: clamp to
        # dim(operand) - slice_sizes).
        self.upper = [max(int(operand_shape[d] - slice_sizes[d]), 0)
                      for d in self.start_index_map]
        self.start_shape = _place(batch_shape, out_rank, batch_dims)
        sim = self.start_index_map
        if (len(sim) == 1 and not obatch and collapsed <= {sim[0]}
                and slice_sizes[sim[0]] == 1 and operand_shape[sim[0]] >= 1
                and all(slice_sizes[d] == operand_shape[d] for d in range(rank)
                        if d != sim[0])):
            self.mode = "take"
            d = sim[0]
            self.axis = d
            nb = len(batch_shape)
            # np.take's result dims: operand dims before d, the batch dims,
            # (d itself as a size-1 dim when it is not collapsed), the rest.
            self.keep_d = d not in collapsed
            take_axis = {k: k for k in range(d)}
            if self.keep_d:
                take_axis[d] = d + nb
            for k in range(d + 1, rank):
                take_axis[k] = k + nb - 1 + (1 if self.keep_d else 0)
            perm = [0] * out_rank
            for j, r in enumerate(batch_dims):
                perm[r] = d + j
            for k, od in zip(kept, offset_dims):
                perm[od] = take_axis[k]
            self.perm = None if perm == list(range(out_rank)) else tuple(perm)
            return
        self.mode = "linear"
        strides = [1] * rank
        for d in range(rank - 2, -1, -1):
            strides[d] = strides[d + 1] * int(operand_shape[d + 1])
        # Linear indices in np.intp, which np.take uses natively -- or, for
        # start indices of at most 32 bits into an operand of fewer than
        # 2^31 elements, in int32: np.take then converts each block's index
        # to intp in the core's cache, which costs less than writing and
        # reading back an 8-byte index (take_along_axis (1000, 1000), the
        # gather alone, process time on a busy machine: 2.33 -> 2.02 ms).
        lin_dt = np.intp
        self.lin_dt = np.dtype(lin_dt)
        self.lin32 = int(np.prod(operand_shape, dtype=np.int64)) <= _I32_MAX
        self.strides = [strides[d] for d in sim]
        # Static part of the linear index: offsets within the slice plus the
        # batching index (an arange over the matching batch axis).
        static = np.zeros((1,) * out_rank, dtype=lin_dt)
        for d, od in zip(kept, offset_dims):
            shape = [1] * out_rank
            shape[od] = slice_sizes[d]
            static = static + (np.arange(slice_sizes[d], dtype=lin_dt)
                               * lin_dt(strides[d])).reshape(shape)
        for od_, is_ in zip(obatch, ibatch):
            ax = batch_dims[_batch_position(is_, ivd)]
            shape = [1] * out_rank
            shape[ax] = self.result_shape[ax]
            static = static + (np.arange(self.result_shape[ax], dtype=lin_dt)
                               * lin_dt(strides[od_])).reshape(shape)
        self.static = static if static.any() else None
        self.static32 = None if self.static is None or not self.lin32 \
            else self.static.astype(np.int32)
        # The starts' shape holds the sum (no window dims wider than 1).
        self.static_into_starts = all(n == 1 or n == m for n, m in
                                      zip(static.shape, self.start_shape))
        # Small gathers whose index vectors are the indices' last dim (the
        # diagonal of det, take_along_axis of a few rows): _small_take.
        size = int(np.prod(self.result_shape, dtype=np.int64))
        self.small = sim and ivd == len(index_shape) - 1 and index_shape[ivd] == len(sim) \
            and size <= _SMALL_GATHER
        self.upper_arr = np.array(self.upper, np.intp)
        self._static2d = None   # (_static_view)
        self.stride_arr = np.array(self.strides, np.intp)
        # _small_take's (indices, linear index) for the last read-only
        # indices it saw: a plan's constant (jnp.diagonal's), the same
        # array at every run.
        self.memo = None

    def __call__(self, operand, indices, in_range=False):
        """``in_range``: every start index component is known to lie in
        ``[0, min(self.upper)]`` (KernelInfo.in_range): no clamp."""
        if self.empty:
            return np.empty(self.result_shape, dtype=operand.dtype)
        indices = _take_index(indices)
        if self.mode == "take":
            return self._take(operand, indices)
        if self.small:
            return self._small_take(operand, indices)
        ivd_last = self.ivd >= indices.ndim
        # Start components shaped to broadcast against the result (views).
        parts = [(indices if ivd_last else _component(indices, self.ivd, k)).reshape(
            self.start_shape) for k in range(len(self.strides))]
        flat = operand.reshape(-1)  # a copy only for a non-contiguous operand
        rows = self.result_shape[0] if self.result_shape else 1
        size = int(np.prod(self.result_shape, dtype=np.int64))
        narrow = self.lin32 and indices.dtype.itemsize <= 4
        lt, static = (_I32, self.static32) if narrow else (self.lin_dt, self.static)
        if _gather is not None and len(self.strides) == 1:
            out = self._one_pass_take(flat, parts[0], size)
            if out is not None:
                return out
        if size < 2 * _GATHER_BLOCK or rows < 2:
            return self._linear_take(flat, parts, lt, static, self.result_shape,
                                     in_range=in_range)
        # In blocks of result rows: the clamped starts, the linear index and
        # the values read stay in the core's cache between the passes (the
        # whole 1e6-element linear index is 8 MB of intp written and read
        # back).
        step = max(1, _GATHER_BLOCK // (size // rows))
        out = np.empty(self.result_shape, dtype=operand.dtype)
        # (One thread: blocks shared with the pool's threads were no faster
        # on take_along_axis (1000, 1000), 2-core VM: 1.64 -> 1.73 ms wall,
        # 2.3 ms CPU; the blocks' Python steps hold the GIL between takes.)
        for r0 in range(0, rows, step):
            r1 = min(r0 + step, rows)
            cut = [p[r0:r1] if p.shape[0] > 1 else p for p in parts]
            block = static
            if block is not None and block.shape[0] > 1:
                block = block[r0:r1]
            self._linear_take(flat, cut, lt, block, (r1 - r0,) + self.result_shape[1:],
                              out=out[r0:r1], in_range=in_range)
        return out

    def _one_pass_take(self, flat, part, size):
        """The gather of one start component by _gather.take_linear (one
        pass: clamp, scale, add the static part, copy; the elements
        _linear_take reads), or None where it does not apply: starts
        broadcast over the result, indices other than int32/int64, elements
        of other sizes, a static part whose broadcast is no 2-D view. Large
        ones share row blocks with the pool's threads."""
        res = self.result_shape
        if part.shape != res or part.dtype not in _ONE_PASS_PARTS or not flat.size \
                or flat.dtype.itemsize not in (1, 2, 4, 8):
            return None
        cols = res[-1] if res else 1
        rows = size // cols
        static = self._static_view(res, rows, cols)
        if static is False:
            return None
        sbuf, s_row, s_col = static
        part = np.ascontiguousarray(part).reshape(rows, cols)
        out = np.empty(res, flat.dtype)
        # (as unsigned integers of their size: ml_dtypes' types export no
        # buffer format)
        raw = _UNSIGNED[flat.dtype.itemsize]
        flat, o2 = flat.view(raw), out.reshape(rows, cols).view(raw)
        upper, stride = self.upper[0], self.strides[0]

        def block(lo, hi):
            _gather.take_linear(flat, part[lo:hi], upper, stride,
                                None if sbuf is None else sbuf[lo * s_row:], s_row, s_col,
                                cols, o2[lo:hi])

        if size >= _TAKE_SHARED_MIN and rows >= 4:
            step = -(-rows // 4)
            run_chunks(block, [(lo, min(lo + step, rows)) for lo in range(0, rows, step)])
        else:
            block(0, rows)
        return out

    def _static_view(self, res, rows, cols):
        """``(buffer, s_row, s_col)``: the static part broadcast over the
        result seen as (rows, cols), in elements of its flat buffer (None,
        0, 0 without one); False when that is no view. Made once."""
        view = self._static2d
        if view is None:
            static = self.static
            if static is None:
                view = (None, 0, 0)
            else:
                v = np.broadcast_to(static, res).reshape(rows, cols)
                # (a reshape that had to copy starts elsewhere)
                ok = static.dtype == np.int64 and static.flags.c_contiguous \
                    and v.__array_interface__["data"][0] == static.__array_interface__["data"][0]
                view = (static.reshape(-1), v.strides[0] // 8, v.strides[1] // 8) if ok \
                    else False
            self._static2d = view
        return view

    def _small_take(self, operand, indices):
        """The linear schedule in a few whole-array calls: every start
        component clamped at once (upper bounds per component along the
        index vector dim), the linear index as their dot product with the
        strides (the same elements as _linear_take reads: 3 us for det's
        64-element diagonal instead of 10). Indices that own their data and
        are read-only (a constant of the plan: nothing writes them) get
        their linear index computed once (det's diagonal: 0.9 us)."""
        memo = self.memo
        if memo is not None and memo[0] is indices:
            return np.asarray(operand.reshape(-1).take(memo[1], mode="clip"))
        c = indices.astype(np.intp)
        np.maximum(c, 0, out=c)
        np.minimum(c, self.upper_arr, out=c)
        lin = c.dot(self.stride_arr).reshape(self.start_shape)
        if self.static is not None:
            lin = lin + self.static
        if lin.shape != self.result_shape:
            lin = np.broadcast_to(lin, self.result_shape)
        if indices.base is None and not indices.flags.writeable:
            self.memo = (indices, lin)   # (one tuple: threads see old or new)
        return np.asarray(operand.reshape(-1).take(lin, mode="clip"))

    def _take(self, operand, indices):
        idx = indices if self.ivd >= indices.ndim else _component(indices, self.ivd, 0)
        if self.axis == 0 and (idx.dtype != np.intp or _gather is not None) \
                and idx.size >= _TAKE_MIN and idx.flags.c_contiguous:
            out = _take_rows_in_blocks(operand, idx)
        else:
            out = np.take(operand, idx, axis=self.axis, mode="clip")
        if self.keep_d:
            out = np.expand_dims(out, self.axis + idx.ndim)
        if self.perm is not None:
            out = out.transpose(self.perm)
        # A 0-d result of take is a numpy scalar: keep it an array.
        return np.asarray(out)

    def _linear_take(self, flat, parts, lt, static, shape, out=None, in_range=False):
        """``flat`` at the linear indices of the result block ``shape``: the
        clamped start components ``parts`` times their strides plus the
        static part ``static`` (None: 0), summed in the integer type ``lt``
        (which holds every linear index of ``flat``). ``in_range``: the
        components need no clamp (see __call__)."""
        lin = None
        for k, stride in enumerate(self.strides):
            s = parts[k]
            # Clamp in the index type (values stay within it), then widen,
            # scale and sum into the linear index in one ufunc call each:
            # few full-size temporaries.
            c = s if in_range else np.asarray(_clamp(s, self.upper[k]))  # (0-d: scalars)
            fresh = c is not s   # ours to update in place (never the indices)
            if stride != 1:
                c = np.asarray(np.multiply(c, lt.type(stride), dtype=lt))
                fresh = True
            if lin is not None:
                np.add(lin, c, out=lin)
            elif static is not None and self.static_into_starts:
                # The first start and the static part, in one pass (into
                # the clamped copy when it is ours and has the sum's shape).
                if fresh and c.dtype == lt and c.shape == np.broadcast_shapes(c.shape,
                                                                               static.shape):
                    lin = np.add(c, static, out=c)
                else:
                    lin = np.asarray(np.add(c, static, dtype=lt))
                static = None
            else:
                lin = c if fresh and c.dtype == lt else c.astype(lt)
        if static is not None:
            if lin is None:
                lin = static
            elif self.static_into_starts:
                np.add(lin, static, out=lin)
            else:
                lin = lin + static
        if lin is None:
            lin = np.zeros((1,) * len(shape), dtype=lt)
        if lin.shape != tuple(shape):
            # (np.take copies a broadcast view into a fresh intp array: not
            # when the starts already have the result's shape.)
            lin = np.broadcast_to(lin, shape)
        # Every linear index is in bounds (clamped starts, offsets within the
        # slice): "clip" only skips numpy's bounds-error path.
        if out is None:
            return np.asarray(flat.take(lin, mode="clip"))
        flat.take(lin, mode="clip", out=out)
        return out


# Result elements per block of a large linear gather (256 KiB of intp
# index; take_along_axis (1000, 1000), process time on a busy machine:
# blocks of 2^13 3.3 ms, 2^15 2.3-2.4 ms, 2^17 2.4-3.0 ms, unblocked 3.4 ms).
_GATHER_BLOCK = 1 << 15
# Result elements of the largest gather _GatherPlan._small_take serves.
_SMALL_GATHER = 4096
# Indices per block of a large take of rows with indices other than intp
# (one thread, x[idx] of 1e6 int32 indices into 1e5 f32, interleaved on a
# loaded 2-core VM: blocks of 2^15 1.13 ms, 2^16 1.18 ms; jnp.searchsorted
# of 1e5 into 1e5, 17 such takes: 5.50 / 5.70 ms).
_TAKE_BLOCK = 1 << 15
# The smallest such take done in blocks.
_TAKE_MIN = 1 << 16
# The smallest such take done in blocks of _TAKE_SHARED_BLOCK indices shared
# with the pool's threads (x[idx] as above, two threads, the kernel alone,
# an idle host: blocks of 2^15 / 2^16 / 2^17 727 / 637 / 712 us wall, one
# thread 849 us; split into takes of 2^15 they lost that again: 730-780
# us). A helper core reads the operand and the indices into its own cache
# first: jnp.searchsorted of 1e5 into 1e5 took 5.7 -> 7.6 ms with its takes
# shared.
_TAKE_SHARED_MIN = 1 << 19
_TAKE_SHARED_BLOCK = 1 << 16


def _take_rows_in_blocks(operand, idx):
    """``np.take(operand, idx, axis=0, mode="clip")`` for C-contiguous
    ``idx`` (of a type other than intp where _gather is not built), in
    blocks of _TAKE_BLOCK indices:
    np.take converts its indices to an intp array first, which for a block
    stays in the core's cache (x[idx], 1e6 int32 indices into 1e5 f32:
    1.18 -> 1.02 ms; 1e6 uint32 into 101 values: 1.09 -> 0.85 ms). With
    a second core free the blocks are shared with the pool's threads (the
    same program, 2-core VM, interleaved: 1.11 -> 0.95 ms wall)."""
    flat = idx.reshape(-1)
    out = np.empty(idx.shape + operand.shape[1:], dtype=operand.dtype)
    rows = out.reshape((flat.size,) + operand.shape[1:])

    # One pass per block, no intp copy of the indices, where _gather.c
    # applies (x[idx] of 1e6 int32 indices into 1e5 f32, one thread: 0.62
    # ms against np.take's 1.32): then one block below _TAKE_SHARED_MIN.
    one_pass = _gather is not None and flat.dtype in _TAKE_ROWS_INDEX and operand.size \
        and operand.flags.c_contiguous

    def block(lo, hi):
        if one_pass:   # (bytes: ml_dtypes' types export no buffer format)
            _gather.take_rows(operand.view(np.uint8), operand.shape[0], flat[lo:hi],
                              rows[lo:hi].view(np.uint8))
        else:
            np.take(operand, flat[lo:hi], axis=0, mode="clip", out=rows[lo:hi])

    if flat.size >= _TAKE_SHARED_MIN:
        # Blocks write disjoint rows (np.take releases the GIL while it
        # copies): on the pool's threads when a core is free (the bounds do
        # not depend on the thread count).
        step = _TAKE_SHARED_BLOCK
        run_chunks(block, [(lo, min(lo + step, flat.size)) for lo in range(0, flat.size, step)])
    else:
        step = flat.size if one_pass else _TAKE_BLOCK   # (one pass converts no indices)
        for lo in range(0, flat.size, step):
            block(lo, min(lo + step, flat.size))
    return out


# Index types of _gather.take_rows, and of take_linear's start components.
_TAKE_ROWS_INDEX = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64,
                                                   np.uint8, np.uint16, np.uint32))
_ONE_PASS_PARTS = frozenset((np.dtype(np.int32), np.dtype(np.int64)))
# Index types np.take and np.clip handle natively; others (uint64, which does
# not cast to intp, and the ml_dtypes sub-byte ints) go through as_index.
_NATIVE_INDEX = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64,
                                                np.uint8, np.uint16, np.uint32))


def _component(indices, ivd, k):
    """Start index component ``k`` (a view of ``indices`` without ``ivd``)."""
    return indices[(slice(None),) * ivd + (k,)]


_INT_RANGE = {}


def _int_range(dt):
    r = _INT_RANGE.get(dt)
    if r is None:
        info = np.iinfo(dt)
        r = _INT_RANGE[dt] = (int(info.min), int(info.max))
    return r


# Below this many elements np.clip's Python wrappers cost more than a second
# pass of np.maximum/np.minimum.
_SMALL = 4096


def _clamp(s, upper):
    """``s`` clamped to ``[0, upper]`` in its own integer type."""
    lo, hi = _int_range(s.dtype)
    if upper >= hi:
        return np.maximum(s, s.dtype.type(0)) if lo < 0 else s
    if s.size < _SMALL:
        z = s.dtype.type(0)
        return np.minimum(np.maximum(s, z) if lo < 0 else s, s.dtype.type(upper))
    # Starts are rarely out of range: one read of the largest (negative
    # ones viewed as unsigned are larger still) usually shows that the
    # indices need no clamped copy (take_along_axis (1000, 1000), the
    # gather alone, process time on a busy machine: 2.07 -> 1.75 ms).
    u = s.view(_UNSIGNED[s.dtype.itemsize]) if lo < 0 else s
    if u.max() <= upper:
        return s
    # Bounds of the index type: Python ints make np.clip look up np.iinfo
    # twice a call (~2 us, a fifth of a 32K-element block's clamp).
    t = s.dtype.type
    return np.clip(s, t(0), t(upper))


def _take_index(indices):
    indices = np.asarray(indices)
    return indices if indices.dtype in _NATIVE_INDEX else as_index(indices)


def _gather_runner(dn, static_slice_sizes=None):
    cache = {}

    def run(operand, indices, slice_sizes=None, in_range=False):
        sizes = static_slice_sizes if slice_sizes is None else \
            tuple(int(s) for s in as_index(slice_sizes))
        key = (operand.shape, indices.shape, sizes)
        plan = cache.get(key)
        if plan is None:
            plan = cache[key] = _GatherPlan(dn, operand.shape, indices.shape, sizes)
        return plan(operand, indices, in_range)
    return run


@kernel("stablehlo.gather", traits=("foldable", "quant_same_params", "no_rounding"))
def gather(op):
    """spec: gather. Slices of `operand` at (clamped) `start_indices`.

    `indices_are_sorted` is only a promise and is ignored.
    """
    dn = op.attrs["dimension_numbers"]
    sizes = tuple(op.attrs["slice_sizes"])
    run = _gather_runner(dn, sizes)
    return annotate(lambda operand, indices: run(operand, indices),
                    in_range=lambda operand, indices: run(operand, indices, None, True))


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
    `updated_results = results` for them); the kept ones, in row-major update
    order, are the schedule applied. Per operand dim the index is a start
    component (shaped like the scatter batch), an offset (an arange over a
    window or batching dim, static) or both; the linear index and the bounds
    test are built from those un-broadcast parts, with the common cases --
    a start alone, no offset, stride 1 -- kept in the index type.
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
        strides = [1] * rank
        for d in range(rank - 2, -1, -1):
            strides[d] = strides[d + 1] * int(input_shape[d + 1])
        # Offsets per operand dim (None: 0) and their static part of the
        # linear index and of the bounds test, for dims without a start.
        offsets = [None] * rank
        for d, ud in zip(window_operand_dims, uwd):
            shape = [1] * urank
            shape[ud] = update_shape[ud]
            offsets[d] = np.arange(update_shape[ud], dtype=np.int64).reshape(shape)
        for d, sd in zip(ibatch, sbatch):
            ax = scatter_dims[_batch_position(sd, ivd)]
            shape = [1] * urank
            shape[ax] = update_shape[ax]
            offsets[d] = np.arange(update_shape[ax], dtype=np.int64).reshape(shape)
        started = set(self.sd2od)
        static_lin = 0
        static_ok = True
        for d in range(rank):
            o = offsets[d]
            if d in started or o is None:
                continue
            static_lin = static_lin + o * np.int64(strides[d])
            if o.size > input_shape[d]:
                static_ok = static_ok & (o < input_shape[d])
        self.static_lin = static_lin
        self.static_ok = static_ok
        self.started = [(k, d, offsets[d], int(input_shape[d]), strides[d])
                        for k, d in enumerate(self.sd2od)]
        self.update_shape = tuple(update_shape)
        self.size = int(np.prod(update_shape, dtype=np.int64))

    def targets(self, indices, umax=None):
        """(linear result index, flat update positions) of in-bounds updates.

        ``umax``: the largest of ``indices`` viewed as unsigned, when the
        caller knows it (index_chains.known_index_max)."""
        if self.size == 0:
            z = np.zeros(0, dtype=np.int64)
            return z, z
        given = indices.dtype
        indices = _take_index(indices)
        if indices.dtype != given:
            umax = None   # (converted: other values)
        ivd_last = self.ivd >= indices.ndim
        lin = self.static_lin
        ok = self.static_ok
        for k, d, off, n, stride in self.started:
            s = indices if ivd_last else _component(indices, self.ivd, k)
            s = s.reshape(self.start_shape)
            if off is not None:
                s = s.astype(np.int64) + off
                ok_d = _in_bounds(s, n)
            else:
                # (Every component holds some of the indices' values.)
                ok_d = _in_bounds(s, n, umax)
            if ok_d is not None:
                ok = ok_d if ok is True else ok & ok_d
            if stride != 1:
                s = np.multiply(s, stride, dtype=np.int64)
            if isinstance(lin, int) and lin == 0:
                lin = s
            else:
                lin = np.add(lin, s, dtype=np.int64)
        lin = np.broadcast_to(lin, self.update_shape).reshape(-1)
        if ok is True or ok.all():
            # Every element in bounds: ``pos`` selects all of them (a view).
            return lin, slice(None)
        pos = np.flatnonzero(np.broadcast_to(ok, self.update_shape))
        return lin[pos], pos


def _in_bounds(i, n, umax=None):
    """``0 <= i < n`` for an integer array ``i`` (None: always true).

    One comparison: a signed index viewed as unsigned of its width puts the
    negative ones above every valid index. Indices are rarely out of
    bounds: the largest unsigned value, one read pass, usually shows that
    none is, and then no mask is written. ``umax``: a bound on that largest
    value, known without the pass (index_chains.known_index_max).
    """
    dt = i.dtype
    hi = _int_range(dt)[1]
    if dt.kind == "u":
        if n > hi:
            return None
        u = i
    elif n > hi:
        return i >= 0
    else:
        u = i.view(dt.str.replace("i", "u"))
    if umax is not None and umax < n:
        return None
    if u.size and u.max() < n:
        return None
    return u < n


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
        # Result i takes update p - n (p >= n) or keeps its value (p == i,
        # see update_strategy): the last write per target wins.
        keep = last_writes(lin, results[0].size)
        tgt = lin[keep]
        for i, p in enumerate(fast[1]):
            if p >= n:
                results[i][tgt] = values[p - n][keep]
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


def last_writes(lin, size):
    """Positions ``j`` of ``lin`` that no later position overwrites
    (``lin[k] != lin[j]`` for all ``k > j``), in increasing order."""
    m = lin.size
    if m <= 1:
        return np.arange(m)
    if size <= 4 * m:
        # Dense: the largest position per target, in O(m + size).
        last = np.full(size, -1, dtype=np.int64)
        pos = np.arange(m, dtype=np.int64)
        np.maximum.at(last, lin, pos)
        return np.flatnonzero(last[lin] == pos)
    rev = lin[::-1]
    _, first = np.unique(rev, return_index=True)
    return np.sort(m - 1 - first)


def update_strategy(op, block, dtype):
    """Pick the fast path for a scatter-like update body at compile time."""
    rep = replaced_args(block)
    n = len(block.result_slots)
    if rep is not None and all(p == i or p >= n for i, p in enumerate(rep)):
        # Only updates and kept values: the last update per target decides.
        # (A body returning another result's value, e.g. a swap, depends on
        # the order of duplicate updates: the general paths below run it.)
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
        except Interrupt:
            raise   # not an answer to cache
        except Exception:
            _AT_OK[key] = False
    return _AT_OK[key]


@kernel("stablehlo.scatter", special=True, traits=("keeps_tiling", "judged_whole"))
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
        lin, pos = plan.targets(indices, known_index_max(indices))
        results = [np.array(x, dtype=dt, copy=True).reshape(-1)
                   for x, dt in zip(inputs, res_dtypes)]
        values = [np.asarray(u).reshape(-1)[pos] for u in updates]
        region = batched(ctx, regions[0]) if batchable else regions[0]
        apply_updates(results, lin, values, body, batchable, fast, region)
        out = [r.reshape(inputs[0].shape) for r in results]
        return out[0] if n == 1 else out
    return run
