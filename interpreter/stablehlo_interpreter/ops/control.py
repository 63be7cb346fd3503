"""Control flow, calls, tuples and constants."""

import numpy as np

from .. import compiler as _compiler
from .. import loopgen as _loopgen
from .. import looptile as _looptile
from ..registry import COMPOSITES, Unsupported, annotate, kernel, kernel_info, one_or_many


@kernel("stablehlo.constant", traits=("elementwise", "quant_aware", "no_rounding"))
def constant(op):
    """spec: constant. Materialised once at compile time."""
    value = op.attrs["value"]
    if not isinstance(value, np.ndarray):
        raise TypeError(f"constant value is {value!r}, expected dense elements")
    # np.array, not np.ascontiguousarray: the latter turns 0-d values into 1-d.
    value = np.array(value, order="C", copy=True)
    value.flags.writeable = False  # shared by every run; kernels never mutate inputs
    return lambda: value


@kernel("func.call", special=True, traits=("quant_aware",))
def call(op):
    """func.call: run another function of the module (recursion allowed)."""
    callee = op.attrs["callee"]
    if callee not in _function_names(op):
        raise TypeError(f"call to unknown function @{callee}")
    if op.num_results == 1:
        def run(ctx, regions, *args):
            return ctx.program.functions[callee].block.run(ctx, (), args)[0]
        return run

    def run_many(ctx, regions, *args):
        return ctx.program.functions[callee].block.run(ctx, (), args)
    return run_many


def _function_names(op):
    """Names of the module's functions (indexed once per module by the compiler)."""
    return op.module.function_ops()


def _direct_composite(op):
    """The registered direct kernel of a composite (registry.composite), or None
    to run its decomposition: unknown names, newer versions, attributes, and
    64-bit results (the direct kernels compute in float64, which rounds a
    narrower result correctly but is no better than the decomposition in
    float64: scipy's digamma near the poles is less accurate than it)."""
    builder = COMPOSITES.get(op.attrs.get("name"))
    if builder is None or op.attrs.get("version", 0) > 1:
        return None
    # Builders marked composite_exact (exact results, e.g. chlo.top_k) check
    # their own attributes and arity and also run 64-bit types.
    if not kernel_info(builder).composite_exact and (
            op.attrs.get("composite_attributes") or op.num_results != 1
            or np.dtype(op.result_types[0].dtype) in (np.float64, np.complex128)):
        return None
    try:
        fn = builder(op)
    except Unsupported:
        return None  # e.g. an element type the direct kernel does not take
    return lambda ctx, regions, *args: fn(*args)


@kernel("stablehlo.composite", special=True, traits=("judged_whole",))
def composite(op):
    """spec: composite. Runs the decomposition function, as the spec defines,
    or a kernel registered for the composite's name (registry.composite: e.g.
    chlo.erf computed in float64 and rounded once instead of JAX's f32
    polynomial; the spec lets an implementation run the op itself)."""
    callee = op.attrs["decomposition"]
    if callee not in _function_names(op):
        raise TypeError(f"composite {op.attrs.get('name')!r}: unknown decomposition @{callee}")
    direct = _direct_composite(op)
    if direct is not None:
        return direct
    wrap = one_or_many(op)

    def run(ctx, regions, *args):
        return wrap(ctx.program.functions[callee].block.run(ctx, (), args))
    return run


@kernel("stablehlo.while", special=True, traits=("judged_whole",))
def while_(op):
    """spec: while. Runs `body` while `cond` yields true.

    A loop whose large values change only through fused chains runs tiled,
    chunk by chunk over all its iterations (looptile.py). After
    loopgen.GENERATE_AFTER iterations (summed over runs) the loop is
    compiled into one generated Python function (loopgen.py) that runs the
    remaining iterations and later runs; tracing and validating runs stay
    on the plain plan."""
    wrap = one_or_many(op)
    state = _loopgen.LoopState(op)
    tiling = []   # [looptile plan or None], made at the first plain run

    def run(ctx, regions, *operands):
        cond, body = regions
        vals = list(operands)
        if state.vm is not None:
            res = unbound(ctx, (getattr(cond, "captures", None), getattr(body, "captures", None)),
                          operands)
            if res is not None:
                return res
        cb, bb = getattr(cond, "block", None), getattr(body, "block", None)
        if cb is not None and bb is not None and hasattr(cond, "captures") \
                and hasattr(body, "captures"):
            # Bound blocks: run them directly (one call level less per
            # iteration; this loop is the per-iteration overhead).
            crun, brun, ccap, bcap = cb.run, bb.run, cond.captures, body.captures
            if ctx.tracer is None and not _compiler._DEBUG_VALIDATE:
                if not tiling:
                    tiling.append(_looptile.plan_or_none(op, cb, bb))
                if tiling[0] is not None:
                    res = tiling[0].run(ctx, crun, ccap, brun, bcap, vals)
                    if res is not None:
                        return wrap(res)
            fast = state.usable(ctx)
            if fast:
                compiled = state.compiled
                if compiled is None:
                    # An entry counts as half the iterations due before
                    # generation (32 of 64): a loop entered again is likely
                    # to be entered in every run (a jitted function called
                    # in a loop), and each plain entry costs the plan more
                    # than a whole call of the generated loop (a 1-step
                    # fori_loop: ~20 against ~10 µs a call), while
                    # generating costs 0.3-3 ms once per executable, little
                    # beside its first call's compilation (100 ms and more
                    # through JAX). A short loop entered in every run is then
                    # generated when its second run enters it.
                    state.count += _loopgen.GENERATE_AFTER >> 1
                    if state.due():
                        compiled = state.compile(ctx, ccap, bcap)
                if compiled is None:
                    fast = not state.failed
                else:
                    res = compiled.run(ctx, ccap, bcap, vals)
                    if res is not None:
                        return wrap(res)
                    fast = False   # values not of the compiled types
            while crun(ctx, ccap, vals)[0]:
                # The body consumes the carried list: values it alone holds
                # may then be updated in place (dynamic_update_slice).
                vals = brun(ctx, bcap, vals, True)
                if fast:
                    state.count += 1
                    if state.due():
                        compiled = state.compile(ctx, ccap, bcap)
                        fast = False
                        if compiled is not None:
                            res = compiled.run(ctx, ccap, bcap, vals)
                            if res is not None:
                                return wrap(res)
            return wrap(vals)
        while cond(*vals)[0]:
            vals = body(*vals)
        return wrap(vals)

    def unbound(ctx, captures, operands):
        # The loop runs in C (loopvm.py) and no tiling plan applies: straight
        # there, without bound regions or the checks above (the while op's
        # fixed cost is this Python). None: the loop is not (yet) in C, the
        # run is observed, or the values are of other types.
        vm = state.vm
        if vm is None or tiling[0] is not None or ctx.tracer is not None \
                or _compiler._DEBUG_VALIDATE or captures[0] is None or captures[1] is None:
            return None
        res = vm.run(ctx, captures[0], captures[1], list(operands))
        return None if res is None else wrap(res)
    return annotate(run, unbound=unbound)


@kernel("stablehlo.if", special=True, traits=("judged_whole",))
def if_(op):
    """spec: if. Runs `true_branch` or `false_branch` depending on `pred`."""
    wrap = one_or_many(op)

    def run(ctx, regions, pred):
        return wrap(regions[0]() if pred else regions[1]())
    return annotate(run, branch=_if_branch)


def _if_branch(pred, n):
    return 0 if pred else 1


@kernel("stablehlo.case", special=True, traits=("judged_whole",))
def case(op):
    """spec: case. An out-of-range index selects the last branch."""
    wrap = one_or_many(op)
    n = len(op.regions)

    def run(ctx, regions, index):
        return wrap(regions[_case_branch(index, n)]())
    return annotate(run, branch=_case_branch)


def _case_branch(index, n):
    i = int(index)
    return n - 1 if i < 0 or i >= n else i


@kernel("stablehlo.tuple", traits=("quant_aware",))
def tuple_(op):
    """spec: tuple."""
    return lambda *vals: tuple(vals)


@kernel("stablehlo.get_tuple_element", traits=("quant_aware",))
def get_tuple_element(op):
    """spec: get_tuple_element."""
    index = op.attrs["index"]
    return lambda t: t[index]


@kernel("stablehlo.optimization_barrier", traits=("quant_aware",))
def optimization_barrier(op):
    """spec: optimization_barrier. Identity on its operands."""
    if op.num_results == 1:
        return lambda x: x
    return lambda *xs: xs
