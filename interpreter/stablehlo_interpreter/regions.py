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

from .registry import has_trait

# Which ops a batched body may hold: the registry's "elementwise" trait;
# which a body may be recognised as a reduction of: its "reducer" trait (the
# kind is the op's name without its dialect, as ops/reducers.py names them).


def reducer_kind(block):
    """Name of the binary op the body applies to its two arguments, else None.

    Only for single-operand bodies ``(acc, x) -> op(acc, x)``; the argument
    order does not matter for these commutative ops.
    """
    if len(block.arg_slots) != 2 or len(block.steps) != 1 or block.capture_slots:
        return None
    fn, ins, out, _, op = block.steps[0]
    kind = op.name.split(".", 1)[1] if has_trait(op.name, "reducer") else None
    if kind is None or sorted(ins) != sorted(block.arg_slots):
        return None
    if block.result_slots != (out,):
        return None
    if any(getattr(t, "quant", None) is not None for t in op.operand_types):
        return None
    return kind


def _natural_compare_type(ctype, dtype):
    """Does ``compare_type`` compare values of ``dtype`` by their plain
    order (not TOTALORDER, not a reinterpretation of the bits)?"""
    kind = np.dtype(dtype).kind
    natural = {"f": "FLOAT", "i": "SIGNED", "u": "UNSIGNED", "b": "UNSIGNED"}.get(kind)
    return natural is not None and ctype in (None, natural)


def arg_reducer_kind(block):
    """``"max"`` / ``"min"`` if ``block`` is the (value, index) body JAX emits
    for argmax / argmin, else None::

        pick = a_val > b_val (a_val < b_val) or a_val != a_val
        (pick ? a_val : b_val,
         pick or (a_val == b_val and a_idx < b_idx) ? a_idx : b_idx)

    Matched by dataflow on the compiled block (nine ops, nothing else; the
    comparisons in the operands' natural order, no TOTALORDER). With
    ascending indices this selects the first NaN, else the first extreme
    element's index and the last extreme element's value (equal extremes
    differ only as signed zeros); it is associative, so every schedule of a
    reduction gives that result (ops/reduce.py).
    """
    if len(block.arg_slots) != 4 or len(block.steps) != 9 or block.capture_slots \
            or len(block.result_slots) != 2:
        return None
    a, i, b, j = block.arg_slots
    by_out = {}
    for step in block.steps:
        op = step.op
        if step.out.__class__ is not int:
            return None
        if any(getattr(t, "quant", None) is not None or getattr(t, "shape", None) != ()
               for t in list(op.operand_types) + list(op.result_types)):
            return None
        by_out[step.out] = step

    def is_op(slot, name, ins=None, direction=None, commutative=False):
        step = by_out.get(slot)
        if step is None or step.op.name != name:
            return None
        if direction is not None:
            attrs = step.op.attrs
            if attrs.get("comparison_direction") != direction or not _natural_compare_type(
                    attrs.get("compare_type"), step.op.operand_types[0].dtype):
                return None
        if ins is not None:
            got = tuple(step.ins)
            if got != tuple(ins) and not (commutative and got == tuple(reversed(ins))):
                return None
        return step

    r_val, r_idx = block.result_slots
    sel_val = is_op(r_val, "stablehlo.select")
    sel_idx = is_op(r_idx, "stablehlo.select")
    if sel_val is None or sel_idx is None or tuple(sel_val.ins[1:]) != (a, b) \
            or tuple(sel_idx.ins[1:]) != (i, j):
        return None
    pick = sel_val.ins[0]
    pick_step = is_op(pick, "stablehlo.or")
    if pick_step is None:
        return None
    kind = None
    for first, second in (pick_step.ins, tuple(reversed(pick_step.ins))):
        if is_op(second, "stablehlo.compare", (a, a), "NE") is None:
            continue
        for direction, k in (("GT", "max"), ("LT", "min")):
            if is_op(first, "stablehlo.compare", (a, b), direction) is not None:
                kind = k
    if kind is None:
        return None
    idx_or = is_op(sel_idx.ins[0], "stablehlo.or")
    if idx_or is None or pick not in idx_or.ins:
        return None
    other = idx_or.ins[1] if idx_or.ins[0] == pick else idx_or.ins[0]
    tie = is_op(other, "stablehlo.and")
    if tie is None:
        return None
    eq, lt = tie.ins
    if not ((is_op(eq, "stablehlo.compare", (a, b), "EQ") or
             is_op(eq, "stablehlo.compare", (b, a), "EQ"))
            and is_op(lt, "stablehlo.compare", (i, j), "LT")):
        eq, lt = lt, eq
        if not ((is_op(eq, "stablehlo.compare", (a, b), "EQ") or
                 is_op(eq, "stablehlo.compare", (b, a), "EQ"))
                and is_op(lt, "stablehlo.compare", (i, j), "LT")):
            return None
    used = {r_val, r_idx, pick, pick_step.ins[0], pick_step.ins[1], sel_idx.ins[0], other, eq, lt}
    return kind if used == set(by_out) else None


def is_batchable(block):
    """True if the body may be evaluated on whole arrays at once."""
    for fn, ins, out, _, op in block.steps:
        if not has_trait(op.name, "elementwise"):
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
