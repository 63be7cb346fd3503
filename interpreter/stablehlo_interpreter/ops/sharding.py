"""Shardy (`sdy`) and XLA sharding annotations JAX leaves in its modules, and
the layout and memory-placement annotation custom calls (``LayoutConstraint``,
``MoveToHost``/``MoveToDevice``, the ``xla.sdy.*`` export markers).

On a single process they carry no computation: the spec's semantics of the
program is that of the annotated values. Sharded (SPMD) entry functions are
split per device by the embedder (the plugin's stablehlo_pjrt.spmd.SpmdPlan);
manual computations run per device here.
"""

from ..registry import Unsupported, custom_call, kernel


def _identity(op):
    if op.num_results == 1:
        return lambda x: x
    return lambda *xs: xs


@kernel("sdy.sharding_constraint", "sdy.reshard", "sdy.propagation_barrier")
def sharding_constraint(op):
    """sdy sharding annotations: identity on values."""
    return _identity(op)


@kernel("sdy.named_computation", special=True)
def named_computation(op):
    """sdy.named_computation: runs its body on the operands."""
    def run(ctx, regions, *operands):
        res = regions[0](*operands)
        return res[0] if op.num_results == 1 else res
    return run


@kernel("sdy.manual_computation", special=True)
def manual_computation(op):
    """sdy.manual_computation (shard_map): the body runs once per device of
    the mesh on a process grid of its own, on the operands' shards over the
    manual axes; its collectives meet on that grid; the results are put
    back together per out_shardings (see spmd.ManualComputation). With one
    device the body sees whole values."""
    from ..spmd import ManualComputation, ShardingError
    try:
        plan = ManualComputation(op)
    except ShardingError as e:
        raise Unsupported(str(e)) from None

    def run(ctx, regions, *operands):
        res = plan.run(ctx, regions[0], operands)
        return res[0] if op.num_results == 1 else tuple(res)
    return run


@custom_call("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",
             "annotate_device_placement")
def sharding_custom_call(op):
    """XLA's sharding custom calls: identity on a single device."""
    if len(op.operand_types) != op.num_results:
        raise Unsupported(f"sharding custom_call with {len(op.operand_types)} operands "
                          f"and {op.num_results} results")
    return _identity(op)


# --------------------------------------------------------------------------
# Annotations: identity.


def _identity_builder(op):
    if len(op.operand_types) != op.num_results:
        raise Unsupported(f"@{op.attrs.get('call_target_name')} with "
                          f"{len(op.operand_types)} operands and {op.num_results} results")
    for a, r in zip(op.operand_types, op.result_types):
        if getattr(a, "shape", None) != getattr(r, "shape", None):
            raise Unsupported(
                f"@{op.attrs.get('call_target_name')} changes shape {a!r} -> {r!r}: "
                "manual sharding across partitions needs XLA's SPMD partitioner")
    if op.num_results == 0:
        return lambda *xs: ()
    if op.num_results == 1:
        return lambda x: x
    return lambda *xs: xs


@custom_call("LayoutConstraint", "MoveToHost", "MoveToDevice",
             "xla.sdy.FuncResultSharding", "xla.sdy.GlobalToLocalShape",
             "xla.sdy.LocalToGlobalShape", "xla.sdy.ShardingGroup",
             "xla.sdy.PropagationBarrier")
def sharding_annotation(op):
    """Layout / memory-placement / Shardy-export annotations: the identity on one device.

    (`Sharding`, `SPMDFullToShardShape`, `SPMDShardToFullShape` and
    `annotate_device_placement` are registered above.)

    Shape-changing uses (full <-> shard shape of a multi-partition program)
    need the SPMD partitioner and are reported as unsupported.
    """
    return _identity_builder(op)
