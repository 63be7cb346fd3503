"""Shape and data-movement ops: iota, broadcasts, reshape, transpose, slices,
concatenate, pad, reverse, get_dimension_size.

Every kernel works from the runtime shapes of its operands, never from `?`
dims of the result types, so the same kernels serve dynamically shaped
programs. Results may be read-only views of operands (nothing mutates
values), which keeps broadcasts, transposes, slices and reverses copy-free.
"""

import math

import numpy as np

from .. import dtypes
from ..registry import Unsupported, annotate, kernel

# --------------------------------------------------------------------------
# Helpers shared with ops/dynamic.py


def static_shape(ttype, what):
    """The static shape of a result type, or Unsupported if it has `?` dims."""
    if not ttype.is_static:
        raise Unsupported(f"{what} with a dynamic result type {ttype!r}")
    return ttype.shape


def make_iota(shape, dim, dtype):
    """spec: iota. ``result[i0, ..., iN] = convert(i_dim)`` in ``dtype``.

    Integers wrap (as a conversion of the index would), booleans take the
    lowest bit; floats and complex get the exactly converted index.
    """
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"iota: negative dimension in shape {shape}")
    if not 0 <= dim < len(shape):
        raise ValueError(f"iota: iota_dimension {dim} out of range for rank {len(shape)}")
    idx = np.arange(shape[dim], dtype=np.int64)
    dtype = np.dtype(dtype)
    if dtypes.is_bool(dtype):
        vals = (idx & 1).astype(np.bool_)
    elif dtypes.is_integer(dtype):
        vals = idx.astype(dtype)  # numpy/ml_dtypes integer casts wrap
    else:
        vals = idx.astype(np.float64).astype(dtype)
    view = [1] * len(shape)
    view[dim] = shape[dim]
    return np.array(np.broadcast_to(vals.reshape(view), shape), order="C")


# Results up to this many elements of an operand of several elements are
# filled (one C loop) rather than made broadcast views: np.broadcast_to's
# nditer costs 3-7 us, the fill of a few thousand elements well under one (a
# loop step's bias row). One value broadcast stays a view: fold.py keeps such
# constants without memory of their own, fusion.py reads them as one value.
_FILL_MAX = 4096


def splat(x, shape):
    """The one value of ``x`` (size 1) as a read-only view of ``shape``
    with every stride 0, what np.broadcast_to returns, made directly on
    ``x``'s memory: np.broadcast_to goes through an nditer in Python (4 us
    against 1 us), the cost of a whole small op in the programs around a
    scalar (expm's scale 2**-s over a 64x64 matrix)."""
    v = np.ndarray(shape, x.dtype, x, 0, (0,) * len(shape))
    v.flags.writeable = False
    return v


def broadcast_small(x, shape, size):
    """``x`` (dims equal to ``shape``'s or 1) broadcast to ``shape`` of
    ``size`` elements: a filled array when small, else np.broadcast_to's
    read-only view."""
    if x.size == 1:
        return splat(x, shape)
    if size > _FILL_MAX:
        return np.broadcast_to(x, shape)
    out = np.empty(shape, x.dtype)
    out[...] = x
    return out


def do_broadcast_in_dim(x, bdims, shape):
    """spec: broadcast_in_dim. Operand dim ``i`` becomes result dim ``bdims[i]``.

    ``bdims`` need not be increasing, so the operand is first transposed into
    increasing result-dim order, then given size-1 dims elsewhere and
    broadcast (a read-only view).
    """
    shape = tuple(int(d) for d in shape)
    if len(bdims) != x.ndim:
        raise ValueError(f"broadcast_dimensions {bdims} do not match operand rank {x.ndim}")
    for i, d in enumerate(bdims):
        if x.shape[i] != 1 and x.shape[i] != shape[d]:
            raise ValueError(f"cannot broadcast operand dim {i} of size {x.shape[i]} "
                             f"to result dim {d} of size {shape[d]}")
    order = sorted(range(x.ndim), key=lambda i: bdims[i])
    if order != list(range(x.ndim)):
        x = np.transpose(x, order)
    view = [1] * len(shape)
    for i in order:
        view[bdims[i]] = x.shape[order.index(i)]
    return np.broadcast_to(x.reshape(view), shape)


def do_pad(x, value, low, high, interior):
    """spec: pad. Negative low/high crop; interior inserts between elements.

    The operand is placed into an array of the un-cropped size
    (``max(low, 0) + d + (d - 1) * interior + max(high, 0)`` per dim), then
    negative edge padding is cut away.
    """
    rank = x.ndim
    if not (len(low) == len(high) == len(interior) == rank):
        raise ValueError(f"pad: padding sizes {low}, {high}, {interior} do not match rank {rank}")
    if any(i < 0 for i in interior):
        raise ValueError(f"pad: negative interior padding {interior}")
    full = []
    place = []
    crop = []
    for d, lo, hi, it in zip(x.shape, low, high, interior):
        core = d + max(d - 1, 0) * it
        lo_p, hi_p = max(lo, 0), max(hi, 0)
        n = lo_p + core + hi_p
        full.append(n)
        place.append(slice(lo_p, lo_p + core, it + 1))
        stop = n - max(-hi, 0)
        start = max(-lo, 0)
        if stop < start:
            raise ValueError(f"pad: negative result dimension (operand dim {d}, "
                             f"low {lo}, high {hi}, interior {it})")
        crop.append(slice(start, stop))
    out = np.full(full, value, dtype=x.dtype)
    out[tuple(place)] = x
    return out[tuple(crop)]


def clamp_starts(starts, operand_shape, sizes):
    """spec (dynamic_slice / dynamic_update_slice): each start index is clamped
    to ``[0, operand_dim - size]``."""
    out = []
    for s, d, n in zip(starts, operand_shape, sizes):
        s = int(s)
        out.append(min(max(s, 0), d - n))
    return out


def int_list(t, what):
    """A 1-d integer tensor operand as a list of Python ints."""
    t = np.asarray(t)
    if t.ndim != 1:
        raise ValueError(f"{what} must be a 1-d tensor, got shape {t.shape}")
    return [int(v) for v in t.astype(np.int64)]


def check_result_dims(shape, rtype, what):
    """A runtime shape must agree with the static dims of the result type."""
    if len(shape) != len(rtype.shape) or any(
            s is not None and s != d for s, d in zip(rtype.shape, shape)):
        raise ValueError(f"{what}: runtime shape {tuple(shape)} does not match result "
                         f"type {rtype!r}")


# --------------------------------------------------------------------------
# Kernels


@kernel("stablehlo.iota", traits=("foldable", "moves_elements", "no_rounding"))
def iota(op):
    """spec: iota. Static result shape: computed once at compile time."""
    rtype = op.result_types[0]
    shape = static_shape(rtype, "iota")
    value = make_iota(shape, op.attrs["iota_dimension"], rtype.dtype)
    value.flags.writeable = False  # shared by every run
    return lambda: value


@kernel("stablehlo.broadcast_in_dim", traits=("foldable", "view", "quant_same_params", "no_rounding"))
def broadcast_in_dim(op):
    """spec: broadcast_in_dim. A read-only broadcast view of the operand, or
    a filled array when the result is small and the operand is not one value
    (broadcast_small)."""
    bdims = tuple(op.attrs["broadcast_dimensions"])
    rshape = op.result_types[0].shape
    if all(d is not None for d in rshape):
        rshape = tuple(int(d) for d in rshape)
        if bdims == tuple(range(len(bdims))):
            # Dims keep their order (the common case): a reshape and a
            # broadcast, or the operand itself when nothing is broadcast.
            pad = (1,) * (len(rshape) - len(bdims))
            size = math.prod(rshape)

            def run_ordered(x):
                if x.shape == rshape:
                    return x
                if x.ndim != len(bdims) or any(
                        a != 1 and a != b for a, b in zip(x.shape, rshape)):
                    return do_broadcast_in_dim(x, bdims, rshape)  # raises
                if x.shape + pad == rshape:
                    return x.reshape(rshape)   # nothing to broadcast
                return broadcast_small(x.reshape(x.shape + pad), rshape, size)
            return run_ordered
        oshape = op.operand_types[0].shape
        if all(a < b for a, b in zip(bdims, bdims[1:])) and len(oshape) == len(bdims) \
                and all(d is not None for d in oshape):
            # Increasing dims with size-1 dims between them (jnp's x[None],
            # a bias row (n,) -> (1, n)): the operand's own shape as a view.
            oshape = tuple(int(d) for d in oshape)
            view = [1] * len(rshape)
            for i, d in enumerate(bdims):
                view[d] = oshape[i]
            view = tuple(view)
            if all(a == 1 or a == b for a, b in zip(view, rshape)):
                reshape_only = view == rshape
                size = math.prod(rshape)

                def run_increasing(x):
                    if x.shape != oshape:   # a batched region's operand
                        return do_broadcast_in_dim(x, bdims, rshape)
                    if reshape_only:
                        return x.reshape(rshape)
                    return broadcast_small(x.reshape(view), rshape, size)
                return run_increasing
        return lambda x: do_broadcast_in_dim(x, bdims, rshape)
    # A `?` result dim can only come from an operand dim mapped onto it.
    src = {d: i for i, d in enumerate(bdims)}
    if any(d is None and k not in src for k, d in enumerate(rshape)):
        raise Unsupported("broadcast_in_dim: `?` result dim not mapped from the operand")

    def run(x):
        shape = [x.shape[src[k]] if d is None else d for k, d in enumerate(rshape)]
        return do_broadcast_in_dim(x, bdims, shape)
    return run


@kernel("stablehlo.broadcast", traits=("no_rounding",))
def broadcast(op):
    """stablehlo.broadcast (the pre-broadcast_in_dim form, not in the spec):
    result shape is ``broadcast_sizes + operand.shape``."""
    sizes = tuple(op.attrs["broadcast_sizes"])
    return lambda x: np.broadcast_to(x, sizes + x.shape)


@kernel("stablehlo.reshape", traits=("foldable", "view", "quant_same_params", "no_rounding"))
def reshape(op):
    """spec: reshape. Row-major order is kept (numpy's C order)."""
    rshape = op.result_types[0].shape
    unknown = sum(d is None for d in rshape)
    if unknown > 1:
        raise Unsupported(f"reshape to {op.result_types[0]!r}: more than one `?` dim")
    target = tuple(-1 if d is None else d for d in rshape)
    ndarray = np.ndarray

    def run(x):
        if x.__class__ is ndarray:
            return x.reshape(target)   # the method: np.reshape's dispatch costs a microsecond
        return np.reshape(x, target)
    return run


@kernel("stablehlo.transpose", traits=("foldable", "view", "quant_same_params", "no_rounding"))
def transpose(op):
    """spec: transpose. ``result.shape[i] = operand.shape[permutation[i]]`` (a view)."""
    perm = tuple(op.attrs["permutation"])
    ndarray = np.ndarray

    def run(x):
        if x.__class__ is ndarray:
            return x.transpose(perm)
        return np.transpose(x, perm)
    return run


@kernel("stablehlo.slice", traits=("foldable", "view", "quant_same_params", "moves_elements",
                                   "keeps_tiling", "no_rounding"))
def slice_(op):
    """spec: slice. Static start/limit/strides: a strided view."""
    index = tuple(slice(s, l, st) for s, l, st in zip(
        op.attrs["start_indices"], op.attrs["limit_indices"], op.attrs["strides"]))

    def run(x):
        for sl, d in zip(index, x.shape):
            if not 0 <= sl.start <= sl.stop <= d:
                raise ValueError(f"slice [{sl.start}, {sl.stop}) out of bounds for dim {d}")
        return x[index]
    return run


@kernel("stablehlo.dynamic_slice", traits=("foldable", "quant_same_params", "moves_elements",
                                           "keeps_tiling", "no_rounding"))
def dynamic_slice(op):
    """spec: dynamic_slice. Start indices are clamped to ``[0, dim - size]``."""
    sizes = tuple(op.attrs["slice_sizes"])

    def run(x, *starts):
        if len(starts) != x.ndim:
            raise ValueError(f"dynamic_slice: {len(starts)} start indices for rank {x.ndim}")
        if any(n > d for n, d in zip(sizes, x.shape)):
            raise ValueError(f"dynamic_slice: slice_sizes {sizes} exceed operand shape {x.shape}")
        st = clamp_starts(starts, x.shape, sizes)
        return x[tuple(slice(s, s + n) for s, n in zip(st, sizes))]
    return run


@kernel("stablehlo.dynamic_update_slice", traits=("foldable", "quant_same_params", "moves_elements",
                                                  "keeps_tiling", "no_rounding"))
def dynamic_update_slice(op):
    """spec: dynamic_update_slice. Start indices are clamped to
    ``[0, dim - update_dim]``; the operand itself is never modified."""
    def window(x, update, starts):
        if len(starts) != x.ndim or update.ndim != x.ndim:
            raise ValueError("dynamic_update_slice: rank mismatch")
        if any(n > d for n, d in zip(update.shape, x.shape)):
            raise ValueError(f"dynamic_update_slice: update shape {update.shape} exceeds "
                             f"operand shape {x.shape}")
        st = clamp_starts(starts, x.shape, update.shape)
        return tuple(slice(s, s + n) for s, n in zip(st, update.shape))

    def run(x, update, *starts):
        index = window(x, update, starts)
        out = x.copy()
        out[index] = update
        return out

    def run_in_place(x, update, *starts):
        # Called by the plan loop only with an operand nothing else can
        # see (dead after this op, owns its data, no other reference):
        # updating it is unobservable and saves a copy per loop iteration.
        x[window(x, update, starts)] = update
        return x
    return annotate(run, donate_first=run_in_place)


@kernel("stablehlo.concatenate", traits=("foldable", "quant_same_params", "moves_elements", "keeps_tiling",
                                         "no_rounding"))
def concatenate(op):
    """spec: concatenate along `dimension`."""
    dim = op.attrs["dimension"]
    dtype = op.result_types[0].dtype

    def run(*xs):
        return np.concatenate(xs, axis=dim).astype(dtype, copy=False)
    return run


@kernel("stablehlo.pad", traits=("foldable", "quant_same_params", "moves_elements", "keeps_tiling",
                                 "no_rounding"))
def pad(op):
    """spec: pad (edge padding may be negative, interior padding >= 0)."""
    low = tuple(op.attrs["edge_padding_low"])
    high = tuple(op.attrs["edge_padding_high"])
    interior = tuple(op.attrs["interior_padding"])
    if any(i < 0 for i in interior):
        raise Unsupported(f"pad: negative interior padding {interior}")
    return lambda x, v: do_pad(x, v, low, high, interior)


@kernel("stablehlo.reverse", traits=("foldable", "view", "quant_same_params", "moves_elements",
                                     "no_rounding"))
def reverse(op):
    """spec: reverse along `dimensions` (a view)."""
    dims = tuple(op.attrs["dimensions"])
    if not dims:
        return lambda x: x
    rank = len(op.operand_types[0].shape)
    if any(not 0 <= d < rank for d in dims) or len(set(dims)) != len(dims):
        raise Unsupported(f"reverse: dimensions {list(dims)} not distinct dimensions "
                          f"of rank {rank}")
    # The view np.flip makes, by one precomputed index (np.flip normalises
    # its axes in Python per call: 3 us for a 2-element reverse).
    index = tuple(slice(None, None, -1) if d in dims else slice(None) for d in range(rank))
    return lambda x: x[index]


@kernel("stablehlo.get_dimension_size", traits=("quant_aware",))
def get_dimension_size(op):
    """spec: get_dimension_size. The runtime size of `dimension` as a 0-d i32."""
    dim = op.attrs["dimension"]
    dtype = op.result_types[0].dtype
    return lambda x: np.array(x.shape[dim], dtype=dtype)
