"""Compile-time analysis of region bodies (reduce, sort, scatter, map, ...).

Two questions make region ops fast:

* :func:`reducer_kind` -- does the body compute exactly one known binary op of
  its arguments (``add``, ``maximum``...)? Then a numpy ufunc does the work.
* :func:`is_batchable` -- is the body made only of elementwise ops on 0-d
  tensors? Then it can be called once on whole arrays instead of once per
  element (elementwise kernels broadcast), which keeps general bodies
  vectorized. Callers still must broadcast results (a body may return a
  constant) with :func:`broadcast_results`.
"""

import numpy as np

ELEMENTWISE_OPS = frozenset("stablehlo." + n for n in """
abs add and atan2 cbrt ceil clamp compare complex convert cosine count_leading_zeros
divide exponential exponential_minus_one floor imag is_finite log log_plus_one
logistic maximum minimum multiply negate not or popcnt power real reduce_precision
remainder round_nearest_afz round_nearest_even rsqrt select shift_left
shift_right_arithmetic shift_right_logical sign sine sqrt subtract tan tanh xor
bitcast_convert constant
""".split()) | {"chlo.erf", "chlo.erfc", "chlo.erf_inv", "chlo.lgamma", "chlo.digamma",
               "chlo.next_after", "chlo.tan", "chlo.atan", "chlo.sinh", "chlo.cosh",
               "chlo.asin", "chlo.acos", "chlo.atanh", "chlo.asinh", "chlo.acosh",
               "chlo.mulhi"}

REDUCERS = {
    "stablehlo.add": "add",
    "stablehlo.multiply": "multiply",
    "stablehlo.maximum": "maximum",
    "stablehlo.minimum": "minimum",
    "stablehlo.and": "and",
    "stablehlo.or": "or",
    "stablehlo.xor": "xor",
}


def reducer_kind(block):
    """Name of the binary op the body applies to its two arguments, else None.

    Only for single-operand bodies ``(acc, x) -> op(acc, x)``; the argument
    order does not matter for these commutative ops.
    """
    if len(block.arg_slots) != 2 or len(block.steps) != 1 or block.capture_slots:
        return None
    fn, ins, out, _, op = block.steps[0]
    kind = REDUCERS.get(op.name)
    if kind is None or sorted(ins) != sorted(block.arg_slots):
        return None
    if block.result_slots != (out,):
        return None
    if any(getattr(t, "quant", None) is not None for t in op.operand_types):
        return None
    return kind


def is_batchable(block):
    """True if the body may be evaluated on whole arrays at once."""
    for fn, ins, out, _, op in block.steps:
        if op.name not in ELEMENTWISE_OPS:
            return False
        for t in list(op.operand_types) + list(op.result_types):
            if getattr(t, "shape", None) != () or getattr(t, "quant", None) is not None:
                return False
    return True


def broadcast_results(results, shape):
    """Broadcast each result of a batched body call to ``shape`` (a copy-free view)."""
    return [r if r.shape == shape else np.broadcast_to(r, shape) for r in results]


def batched(ctx, region):
    """Wrap a bound region for batched calls (whole arrays for its 0-d args).

    While it runs, ``ctx.state["batched"]`` is non-zero so that the
    ``STABLEHLO_REF_VALIDATE`` result checks accept any shape for 0-d
    results of the body's ops.
    """
    state = ctx.state

    def call(*args):
        state["batched"] = state.get("batched", 0) + 1
        try:
            return region(*args)
        finally:
            state["batched"] -= 1
    call.block = getattr(region, "block", None)
    return call
