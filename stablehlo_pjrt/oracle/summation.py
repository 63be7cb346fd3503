"""Telling a summation-order difference from a wrong sum: the oracle's
``summation-order`` cause (causes.py, docs/oracle.md) on the outputs of a
module alone, without re-running anything on the other backend: the form
the plugin checker's programs area applies first (checker/summation.py) and
``stablehlo-ref compare`` applies to an outputs file (files.py).

A dot product, a convolution or an add-reduction sums n terms; every order
of summation is a correct implementation, and two orders round differently.
For any order, |fl(sum) - sum| <= gamma_n * sum|terms| with gamma_n =
n*u / (1 - n*u) and u the unit roundoff of the element type (Higham,
"Accuracy and Stability of Numerical Algorithms", 2nd ed., sections 3.1 and
4.2: products add one rounding, which n counts). Two correct results are
therefore at most 2 * gamma_n * sum|terms| apart, plus one rounding of each
result for plugins that accumulate in a wider type and round once at the
end (XLA CPU sums bf16 in f32).

When a program's outputs differ only where one top-level summing op of
@main produced them, :func:`explain` evaluates that op on the reference
twice more, on |operands| (giving sum|terms| per element) and on ones
(giving n per element), and accepts the difference if every element is
within that bound. The plain per-dtype tolerance of
``stablehlo_interpreter.compare`` does not scale with sum|terms|, so it
reports sums with cancellation (conformance convolutions with terms of ~64
and results near 0) as wrong on one CPU and right on another, depending on
the vector width XLA picked. A difference beyond the bound is still a
failure.
"""

from __future__ import annotations

import numpy as np

from stablehlo_interpreter import with_trait

SUMMING = with_trait("summing")  # registry.TRAITS: sums in an order left to the backend


def _finfo(dtype):
    """ml_dtypes.finfo of a real floating-point dtype (bf16 and f8 too), else None."""
    import ml_dtypes
    dtype = np.dtype(dtype)
    if dtype.kind in "biuc":
        return None
    try:
        return ml_dtypes.finfo(dtype)
    except (TypeError, ValueError):
        return None


def _with_returns(text: str, extend):
    """(module text, number of original outputs) where @main also returns the
    values ``extend(module, main body ops)`` builds before its return (None
    from ``extend``: give up, return None)."""
    from jaxlib.mlir import ir

    import stablehlo_interpreter as shi
    from stablehlo_interpreter import MLIR_LOCK

    from ..mlir_funcs import find_func, return_also
    mod = shi.load(text, name="<summation bound>")
    with MLIR_LOCK, mod.context, ir.Location.unknown():
        module = ir.Module.parse(text)
        main = find_func(module, "main")
        body = list(main.regions[0].blocks[0].operations)
        n_out = len(body[-1].operation.operands)
        extra = extend(module, [o.operation for o in body])
        if extra is None:
            return None
        return_also(main, extra)
        if not module.operation.verify():
            return None
        return module.operation.get_asm(enable_debug_info=True), n_out


def _plain_sum(op) -> bool:
    """A summing op on real floating-point tensors (a reduction: of one
    input, whose body is one add)."""
    from jaxlib.mlir import ir
    if op.name not in SUMMING:
        return False
    if op.name in ("stablehlo.reduce", "stablehlo.reduce_window"):
        if len(op.results) != 1:
            return False
        inner = [o.operation.name for o in op.regions[0].blocks[0].operations]
        if inner != ["stablehlo.add", "stablehlo.return"]:
            return False
    for v in op.operands:
        et = ir.RankedTensorType(v.type).element_type
        et = et.maybe_downcast() if hasattr(et, "maybe_downcast") else et
        if not isinstance(et, ir.FloatType):
            return False
    return True


def _terms_and_counts(module, ops, index):
    """Values: op #``index`` of @main applied to |operands| and to ones."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo
    op = ops[index]
    out = []
    with ir.InsertionPoint(op):
        for make in ("abs", "ones"):
            operands = []
            for v in op.operands:
                t = ir.RankedTensorType(v.type)
                if make == "abs":
                    operands.append(stablehlo.AbsOp(v).result)
                else:
                    operands.append(stablehlo.ConstantOp(ir.DenseElementsAttr.get_splat(
                        t, ir.FloatAttr.get(t.element_type, 1.0))).result)
            new = op.clone()  # after its new operands
            for k, w in enumerate(operands):
                new.operands[k] = w
            out.extend(new.results)
    return out


def _producer(text: str, k: int):
    """(op name, index among @main's top-level ops, result number, callee) of
    what produces output ``k`` of @main; None for an argument."""
    from jaxlib.mlir import ir

    import stablehlo_interpreter as shi
    from stablehlo_interpreter import MLIR_LOCK

    from ..mlir_funcs import find_func
    mod = shi.load(text, name="<summation bound>")
    with MLIR_LOCK, mod.context:
        module = ir.Module.parse(text)
        body = [o.operation for o in find_func(module, "main").regions[0].blocks[0].operations]
        v = body[-1].operands[k]
        for i, op in enumerate(body[:-1]):
            for r, res in enumerate(op.results):
                if res == v:
                    callee = (ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                              if op.name == "func.call" else None)
                    return op.name, i, r, callee, _plain_sum(op)
    return None


def _explain_output(text, args, reference, other, k, depth=0):
    """(worst ratio to the bound, most terms) if output ``k`` of @main is
    produced, directly or through func.call, by a plain sum whose plugin
    value is within the summation-order bound; None otherwise."""
    import stablehlo_interpreter as shi
    found = _producer(text, k)
    if found is None or depth > 8:
        return None
    name, index, r, callee, plain = found
    if name == "func.call":
        from .bisect import _callee_module
        built = _with_returns(text, lambda m, ops: list(ops[index].operands))
        if built is None:
            return None
        variant, n_out = built
        call_args = shi.compile(variant, name="<summation bound>").run(*args)[n_out:]
        inner = _callee_module(text, callee)
        return _explain_output(inner, [np.asarray(a) for a in call_args], reference, other,
                               r, depth + 1)
    if not plain:
        return None
    built = _with_returns(text, lambda m, ops: _terms_and_counts(m, ops, index))
    if built is None:
        return None
    variant, n_out = built
    outs = [np.asarray(v) for v in shi.compile(variant, name="<summation bound>").run(*args)]
    n_res = (len(outs) - n_out) // 2
    terms, counts = outs[n_out + r], outs[n_out + n_res + r]
    ok, ratio = within(reference, other, terms, counts)
    if not ok:
        return None
    return ratio, int(np.max(counts)) if counts.size else 0


def within(reference, other, terms, count):
    """(ok, worst ratio of |other - reference| to its bound) for one result."""
    r = np.asarray(reference)
    fi = _finfo(r.dtype)
    if fi is None:
        return False, float("inf")
    u = float(fi.eps) / 2
    r64, o64 = r.astype(np.float64), np.asarray(other).astype(np.float64)
    s = np.asarray(terms).astype(np.float64)
    n = np.asarray(count).astype(np.float64)
    finite = np.isfinite(r64)
    # Where the reference is not finite the plugin must agree exactly.
    if not np.array_equal(np.isnan(r64), np.isnan(o64)) or \
            not np.array_equal(r64[~finite & ~np.isnan(r64)], o64[~finite & ~np.isnan(r64)]):
        return False, float("inf")
    if not np.all(np.isfinite(s)) or np.any(n * u >= 0.5):
        return False, float("inf")
    gamma = n * u / (1 - n * u)
    # Products that underflow lose up to one subnormal step each.
    bound = 2 * gamma * s + 2 * u * np.abs(r64) + n * float(fi.smallest_subnormal)
    diff = np.where(finite, np.abs(o64 - r64), 0.0)
    ratio = float(np.max(diff / bound)) if diff.size else 0.0
    return bool(np.all(diff <= bound)), ratio


def explain(text: str, args, divergence, reference: list, other: list) -> str | None:
    """A note saying why the outputs that differ are correct sums, or None.

    ``divergence`` is the oracle's first divergence (stablehlo_pjrt.oracle.
    bisect), or None: when given, its innermost op must be a summing op, so
    that the sum's operands agree on both sides. Then every output of @main that differs
    must be produced by a plain sum (directly, or as the result of a
    func.call whose callee returns it), with the plugin's value within the
    summation-order bound of that sum at every element."""
    from stablehlo_interpreter import compare_arrays
    d = divergence
    if d is not None and (d.op is None or d.innermost.op.name not in SUMMING):
        return None
    worst, most, op = 0.0, 0, None
    for k, (r, o) in enumerate(zip(reference, other)):
        if compare_arrays(f"output #{k}", r, o).ok:
            continue
        found = _explain_output(text, args, np.asarray(r), np.asarray(o), k)
        if found is None:
            return None
        worst, most = max(worst, found[0]), max(most, found[1])
        producer = _producer(text, k)
        op = op or (producer[0] if producer and producer[0] != "func.call" else None)
    op = d.innermost.op.name if d is not None else (op or "a sum")
    return (f"summation-order: {op}: the plugin's result differs from the reference's, "
            f"but every element "
            f"is within the summation-order bound 2*gamma_n*sum|terms| + 2u|result| "
            f"(n <= {most} terms; the largest difference is {worst:.2g} of its bound): "
            f"both are valid results of the same sum, rounded in different orders")
