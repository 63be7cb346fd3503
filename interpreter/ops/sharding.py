"""Shardy (`sdy`) and XLA sharding annotations JAX leaves in its modules.

On a single process they carry no computation: the spec's semantics of the
program is that of the annotated values. Multi-device SPMD programs are split
per device by the runner, not here.
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
    """sdy.manual_computation on a single device: the body sees whole values.

    With one device every manual axis has size 1, so the local shard is the
    global value. Larger meshes need the SPMD runner.
    """
    def run(ctx, regions, *operands):
        if ctx.grid is not None and getattr(ctx.grid, "num_processes", 1) > 1:
            raise NotImplementedError(
                "sdy.manual_computation over several devices is not supported yet")
        res = regions[0](*operands)
        return res[0] if op.num_results == 1 else res
    return run


@custom_call("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",
             "annotate_device_placement")
def sharding_custom_call(op):
    """XLA's sharding custom calls: identity on a single device."""
    if len(op.operand_types) != op.num_results:
        raise Unsupported(f"sharding custom_call with {len(op.operand_types)} operands "
                          f"and {op.num_results} results")
    return _identity(op)
