"""stablehlo.reduce (spec: reduce).

Three strategies, chosen at compile time:

* the body is one known commutative binary op (``regions.reducer_kind``) on a
  single operand: a numpy ufunc reduction (``reducers.Reducer.reduce``: float
  sums in a float64 accumulator / pairwise, whatever the axes);
* the body is batchable (elementwise ops on 0-d tensors, e.g. the variadic
  (value, index) bodies JAX emits for argmax): a pairwise tree reduction of
  adjacent elements, calling the body ``ceil(log2(n))`` times on whole arrays;
* otherwise: a sequential per-element loop (correct, slow).

The spec leaves the schedule implementation-defined as long as it is a binary
tree whose in-order traversal keeps the input order (with the init values
inserted anywhere); both the tree and the loop keep the order, with the init
values combined first.
"""

import numpy as np

from ..attrs import decode_attribute
from ..regions import arg_reducer_kind, batched, broadcast_results, is_batchable, reducer_kind
from ..registry import Unsupported, annotate, kernel
from . import spec_kernels as _spec
from .reducers import _PAR_MIN, reducer


def _reduced_dims_last(xs, dims):
    """``(out_shape, n, vals)``: each of ``xs`` with the reduced dims moved
    last and flattened into one axis of ``n`` elements."""
    keep = [d for d in range(xs[0].ndim) if d not in dims]
    out_shape = tuple(xs[0].shape[d] for d in keep)
    n = 1
    for d in dims:
        n *= xs[0].shape[d]
    perm = keep + list(dims)
    return out_shape, n, [np.transpose(x, perm).reshape(out_shape + (n,)) for x in xs]


def tree_reduce(body, xs, inits, dims):
    """Reduce arrays ``xs`` over ``dims`` with a batchable variadic ``body``.

    The reduced dims are moved last and flattened; each round combines
    adjacent pairs (2i, 2i+1) in one body call on whole arrays, an odd last
    element is carried over. Finally the init values are combined on the left.
    """
    n_ops = len(xs)
    out_shape, n, vals = _reduced_dims_last(xs, dims)
    while n > 1:
        m = n // 2
        left = [v[..., 0:2 * m:2] for v in vals]
        right = [v[..., 1:2 * m:2] for v in vals]
        res = broadcast_results(body(*left, *right), out_shape + (m,))
        if n % 2:
            res = [np.concatenate([r, v[..., n - 1:]], axis=-1) for r, v in zip(res, vals)]
        vals = res
        n = m + n % 2
    if n == 0:
        return [np.broadcast_to(i, out_shape) for i in inits]
    last = [v[..., 0] for v in vals]
    res = broadcast_results(body(*inits, *last), out_shape)
    assert len(res) == n_ops
    return res


def sequential_reduce(body, xs, inits, dims):
    """Spec mode's schedule for a batchable body (Ops.cpp reduceOp): the
    inits, then the reduced elements one position at a time in row-major
    order, each step one body call over all results at once."""
    out_shape, n, vals = _reduced_dims_last(xs, dims)
    acc = [np.broadcast_to(i, out_shape) for i in inits]
    for k in range(n):
        acc = broadcast_results(body(*acc, *[v[..., k] for v in vals]), out_shape)
    return [np.array(a, order="C") for a in acc]


def loop_reduce(body, xs, inits, dims):
    """The sequential schedule, one body call per element (any body)."""
    out_shape, n, vals = _reduced_dims_last(xs, dims)
    outs = [np.empty(out_shape, dtype=i.dtype) for i in inits]
    for idx in np.ndindex(*out_shape):
        acc = list(inits)
        for k in range(n):
            acc = body(*acc, *[np.asarray(v[idx + (k,)]) for v in vals])
        for o, a in zip(outs, acc):
            o[idx] = a
    return outs


@kernel("stablehlo.reduce", special=True, traits=("summing", "judged_whole"))
def reduce(op):
    """spec: reduce. N inputs and N init values, reduced over `dimensions`."""
    n = len(op.operand_types) // 2
    dims = tuple(sorted(op.attrs["dimensions"]))
    if len(set(dims)) != len(dims):
        raise Unsupported(f"reduce: repeated dimensions {dims}")
    # Quantized values arrive as storage arrays; regions.reducer_kind and
    # is_batchable reject quantized bodies, so those run element by element
    # with the body's own (quantization-aware) ops.
    body = op.regions[0]
    out_dtypes = [t.dtype for t in op.result_types]
    # Inputs may have a narrower element type than the body (promotion):
    # convert them to the body/result type first.
    in_dtypes = [t.dtype for t in op.operand_types[:n]]
    convert = [o if o != i else None for i, o in zip(in_dtypes, out_dtypes)]

    def prepare(xs):
        return [x if c is None or x.dtype == c else x.astype(c) for x, c in zip(xs, convert)]

    kind = reducer_kind(body) if n == 1 else None
    fast = reducer(kind, out_dtypes[0]) if kind is not None else None
    spec = _spec.is_spec(op)
    if fast is not None and spec and _spec.order_dependent(kind, out_dtypes[0]):
        def run_spec(ctx, regions, x, init):
            return _spec.reduce(kind, prepare([x])[0], dims, init, out_dtypes[0])
        return annotate(run_spec, regions_unused=True)   # compiler._special_step binds none
    if fast is not None:
        vector = _vector_kernel(op, fast, dims) if convert[0] is None else None
        if vector is None and convert[0] is None:
            vector = _shaped_kernel(op, fast, dims)
        if vector is not None:
            def run_fast(ctx, regions, x, init):
                return vector(x, init)
        else:
            def run_fast(ctx, regions, x, init):
                return fast.reduce(prepare([x])[0], dims, init)
        # compiler._special_step binds no regions; fusion.py may feed it the
        # chunks of the chain computing x (when no conversion comes first).
        return annotate(run_fast, regions_unused=True,
                        reduction=(fast, dims) if convert[0] is None else None)

    is_batched = is_batchable(body)
    # Spec mode keeps the reference's sequential order (the tree's differs
    # for inexact bodies); argmax-style bodies are exact, any order.
    strategy = (sequential_reduce if spec else tree_reduce) if is_batched else loop_reduce
    arg_kind = _arg_reduce(op, dims, out_dtypes) if is_batched and n == 2 else None

    def run(ctx, regions, *operands):
        xs = prepare(list(operands[:n]))
        inits = list(operands[n:])
        shape = xs[0].shape
        for x in xs[1:]:
            if x.shape != shape:
                raise ValueError(f"reduce: inputs have different shapes {shape} and {x.shape}")
        region = batched(ctx, regions[0]) if is_batched else regions[0]
        if arg_kind is not None and shape[dims[0]] > 0:
            res = arg_reduce(arg_kind, region, xs, inits, dims[0])
        else:
            res = strategy(region, xs, inits, dims)
        res = [r if r.dtype == d else r.astype(d) for r, d in zip(res, out_dtypes)]
        return res[0] if n == 1 else res
    return run


def _vector_kernel(op, fast, dims):
    """Reducer.vector_kernel where the operand is statically a vector of
    1 to _PAR_MIN - 1 elements reduced over its one axis, else None."""
    shape = op.operand_types[0].shape
    if len(shape) != 1 or dims != (0,) or shape[0] is None or not 0 < shape[0] < _PAR_MIN:
        return None
    return fast.vector_kernel()


def _shaped_kernel(op, fast, dims):
    """Reducer.shaped_kernel for the operand's static shape, else None."""
    shape = op.operand_types[0].shape
    if shape is None or any(s is None for s in shape):
        return None
    return fast.shaped_kernel(shape, dims)


# Value types np.argmax/np.argmin order as the comparisons of the body do
# (NaN first, -0 == +0).
_ARG_VALUE_TYPES = frozenset(np.dtype(t) for t in (
    np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64, np.bool_))


def _arg_reduce(op, dims, out_dtypes):
    """"max"/"min" when this reduce is JAX's argmax/argmin: the argmax body
    (regions.arg_reducer_kind) over one dim whose index operand is an
    ``iota`` along it (ascending positions, no wraparound), else None."""
    kind = arg_reducer_kind(op.regions[0])
    if kind is None or len(dims) != 1 or op.raw is None:
        return None
    vt, it = op.operand_types[0], op.operand_types[1]
    if np.dtype(out_dtypes[0]) not in _ARG_VALUE_TYPES or np.dtype(vt.dtype) != np.dtype(out_dtypes[0]) \
            or np.dtype(it.dtype).kind not in "iu" or np.dtype(it.dtype) != np.dtype(out_dtypes[1]):
        return None
    d = dims[0]
    size = vt.shape[d] if vt.shape is not None and d < len(vt.shape) else None
    if size is None or size - 1 > np.iinfo(it.dtype).max:
        return None
    try:
        owner = op.raw.operands[1].owner
        if getattr(owner, "name", None) != "stablehlo.iota" or \
                int(decode_attribute(owner, "iota_dimension")) != d:
            return None
    except Exception:
        return None
    return kind


def arg_reduce(kind, body, xs, inits, d):
    """The argmax/argmin reduce of ``xs`` = (values, iota along ``d``) over
    ``d``: the body is associative (regions.arg_reducer_kind), so the
    result is the sequential schedule's, computed without rounds of body
    calls: np.argmax/np.argmin (the first NaN, else the first extreme) give
    the index; the value is the last extreme element's (it differs from the
    first only between -0 and +0); then the body once with the inits."""
    x, idx = xs
    pick = np.argmax if kind == "max" else np.argmin
    pos = np.expand_dims(pick(x, axis=d), d)
    val = np.take_along_axis(x, pos, axis=d)
    if x.dtype.kind == "f":
        zero = val == 0
        if zero.any():
            n = x.shape[d]
            last = n - 1 - np.argmax(np.flip(x == 0, axis=d), axis=d)
            val = np.where(zero, np.take_along_axis(x, np.expand_dims(last, d), axis=d), val)
    ind = np.take_along_axis(idx, pos, axis=d)
    val, ind = np.squeeze(val, d), np.squeeze(ind, d)
    return broadcast_results(body(*inits, val, ind), val.shape)
