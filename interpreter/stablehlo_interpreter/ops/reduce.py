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

from ..regions import batched, broadcast_results, is_batchable, reducer_kind
from ..registry import Unsupported, kernel
from .reducers import reducer


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


@kernel("stablehlo.reduce", special=True)
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
    if fast is not None:
        def run_fast(ctx, regions, x, init):
            return fast.reduce(prepare([x])[0], dims, init)
        return run_fast

    is_batched = is_batchable(body)
    strategy = tree_reduce if is_batched else loop_reduce

    def run(ctx, regions, *operands):
        xs = prepare(list(operands[:n]))
        inits = list(operands[n:])
        shape = xs[0].shape
        for x in xs[1:]:
            if x.shape != shape:
                raise ValueError(f"reduce: inputs have different shapes {shape} and {x.shape}")
        region = batched(ctx, regions[0]) if is_batched else regions[0]
        res = strategy(region, xs, inits, dims)
        res = [r if r.dtype == d else r.astype(d) for r, d in zip(res, out_dtypes)]
        return res[0] if n == 1 else res
    return run
