"""Collective ops and the process-grid ops (spec: "Collective ops").

Every collective splits the process grid into process groups (see
:class:`~stablehlo_interpreter.parallel.ProcessGrid`), meets the other members
of its group in a rendezvous and computes its result from everyone's operands.
On a single-process run (``ctx.grid is None``) the grid is 1x1: all_reduce is
the identity, collective_permute with a self loop too, and any group naming
another process is reported as an error instead of waiting forever.

Also here: replica_id, partition_id and the conformance suites' harness op
``interpreter.run_parallel`` (stablehlo/reference/InterpreterOps.td).
"""

import functools

import numpy as np

from ..parallel import GridError, ProcessGrid, run_parallel
from ..regions import broadcast_results, is_batchable, reducer_kind
from ..registry import Unsupported, kernel, one_or_many
from ..types import TensorType
from .reducers import reducer

# ----------------------------------------------------------------------
# Shared helpers


def grid_of(ctx):
    """The process grid of this execution; a 1x1 grid for a single process."""
    grid = ctx.grid
    if grid is None:
        grid = ctx.state.get("process_grid")
        if grid is None:
            grid = ctx.state["process_grid"] = ProcessGrid(1, 1)
    return grid


def _channel_id(op):
    handle = op.attrs.get("channel_handle")
    return int(handle["handle"]) if isinstance(handle, dict) else 0


def _id_groups(op, key="replica_groups"):
    """The op's groups of ids as lists, without the -1 padding of ragged groups."""
    value = op.attrs.get(key)
    if value is None:
        return []
    if not isinstance(value, np.ndarray):
        raise Unsupported(f"{key} given as {str(value)[:80]} (only dense id tensors "
                          "are supported)")
    if value.ndim != 2:
        raise Unsupported(f"{key} must be 2-dimensional, got shape {value.shape}")
    groups = [[int(i) for i in row if i >= 0] for row in value.tolist()]
    return [g for g in groups if g]


def _groups_all_reduce_style(op):
    """spec (all_gather, all_reduce, reduce_scatter): pick the grouping mode.

    cross_replica if channel_id <= 0 and not use_global_device_ids,
    cross_replica_and_partition if channel_id > 0 and not use_global_device_ids,
    flattened_ids if channel_id > 0 and use_global_device_ids.
    """
    channel = _channel_id(op)
    use_global = bool(op.attrs.get("use_global_device_ids", False))
    ids = _id_groups(op)
    if use_global and channel <= 0:
        raise Unsupported("use_global_device_ids requires channel_id > 0")
    if use_global:
        mode, size = "flattened_ids", "num_processes"
    elif channel > 0:
        mode, size = "cross_replica_and_partition", "num_replicas"
    else:
        mode, size = "cross_replica", "num_replicas"
    return _group_finder(ids, mode, size), channel


def _groups_permute_style(op, key="replica_groups"):
    """spec (all_to_all, collective_broadcast, collective_permute):
    cross_replica if channel_id <= 0, else cross_partition."""
    channel = _channel_id(op)
    ids = _id_groups(op, key)
    if channel > 0:
        return _group_finder(ids, "cross_partition", "num_partitions"), channel
    return _group_finder(ids, "cross_replica", "num_replicas"), channel


def _group_finder(ids, mode, size_attr):
    """``groups(grid)``: the process groups of this op occurrence on ``grid``."""
    cache = {}

    def groups(grid):
        key = (grid.num_replicas, grid.num_partitions)
        found = cache.get(key)
        if found is None:
            # An empty list of groups means one group of every id (XLA's
            # convention; the spec requires the groups to cover all ids).
            g = ids or [list(range(getattr(grid, size_attr)))]
            found = cache[key] = getattr(grid, mode)(g)
        return found
    return groups


def _my_group(groups, process, opname):
    for g in groups:
        if process in g:
            return g
    raise GridError(f"{opname}: process ({process[0]}, {process[1]}) is in no "
                    "process group")


def _zeros(t, shape):
    """A zero of the result type (quantize(0) = the zero point if quantized)."""
    dtype = t.dtype if isinstance(t, TensorType) else None
    out = np.zeros(shape, dtype=dtype)
    q = getattr(t, "quant", None)
    if q is not None:
        zp = q.zero_points
        if q.per_axis and len(shape):
            bshape = [1] * len(shape)
            bshape[q.quantized_dimension] = -1
            out[...] = np.asarray(zp).reshape(bshape).astype(dtype)
        else:
            out[...] = np.asarray(zp[0]).astype(dtype)
    return out


def _no_quant_reduction(op):
    """Quantized reductions run the body per element on storage values (the
    body's own kernels dequantize and quantize); that needs every operand
    and result to share one quantized type."""
    types = list(op.operand_types) + list(op.result_types)
    quant = {getattr(t, "element_type", None) for t in types
             if getattr(t, "quant", None) is not None}
    if quant and (len(quant) > 1 or any(getattr(t, "quant", None) is None for t in types)):
        raise Unsupported(f"{op.name} mixing quantized types {sorted(quant)} "
                          "with other element types")


def _reducer(block):
    """``reduce(region, values, dtype)``: fold ``values`` (in group order) with the body.

    The spec leaves the reduction tree implementation-defined; this folds
    left to right. Fast paths: the shared reducer table (``reducers``) when
    the body is one known binary op (float sums in a wide accumulator,
    rounded once), one call of the body on whole arrays when it is elementwise
    only (regions.is_batchable), else one call per element.
    """
    kind = reducer_kind(block)
    batchable = is_batchable(block)
    tables = {}

    def reduce(region, values, dtype):
        # to_destination_type: operands are converted to the body's element type.
        values = [v if v.dtype == dtype else v.astype(dtype) for v in values]
        shape = values[0].shape
        if len(values) == 1:
            return values[0]
        if kind is not None:
            if dtype not in tables:
                tables[dtype] = reducer(kind, dtype)
            if tables[dtype] is not None:
                return tables[dtype].combine(values)
        if batchable:
            acc = values[0]
            for v in values[1:]:
                acc = broadcast_results([np.asarray(region(acc, v)[0])], shape)[0]
            return np.array(acc, dtype=dtype)
        out = np.empty(shape, dtype=dtype)
        for idx in np.ndindex(*shape):
            at = idx + (Ellipsis,)  # indexing with `...` keeps 0-d arrays
            acc = values[0][at]
            for v in values[1:]:
                acc = region(acc, v[at])[0]
            out[idx] = acc
        return out
    return reduce


# ----------------------------------------------------------------------
# Process identity


@kernel("stablehlo.replica_id", special=True)
def replica_id(op):
    """spec: replica_id. The replica id of this process, as a 0-d ui32."""
    def run(ctx, regions):
        return np.asarray(ctx.process[0], dtype=np.uint32)
    return run


@kernel("stablehlo.partition_id", special=True)
def partition_id(op):
    """spec: partition_id. The partition id of this process, as a 0-d ui32."""
    def run(ctx, regions):
        return np.asarray(ctx.process[1], dtype=np.uint32)
    return run


# ----------------------------------------------------------------------
# Collectives


@kernel("stablehlo.all_gather", special=True, traits=("quant_same_params",))
def all_gather(op):
    """spec: all_gather. Concatenates every group member's operands along all_gather_dim."""
    dim = int(op.attrs["all_gather_dim"])
    groups, channel = _groups_all_reduce_style(op)
    wrap = one_or_many(op)

    def run(ctx, regions, *operands):
        grid = grid_of(ctx)
        group = _my_group(groups(grid), ctx.process, op.name)
        got = grid.rendezvous(ctx.process, group, channel, operands, op.name)
        return wrap([np.concatenate([got[p][i] for p in group], axis=dim)
                     for i in range(len(operands))])
    return run


@kernel("stablehlo.all_reduce", special=True, traits=("judged_whole",))
def all_reduce(op):
    """spec: all_reduce. Reduces each operand over the group with `computation`."""
    _no_quant_reduction(op)
    groups, channel = _groups_all_reduce_style(op)
    reduce = _reducer(op.regions[0])
    dtypes = [t.dtype for t in op.result_types]
    wrap = one_or_many(op)

    def run(ctx, regions, *operands):
        grid = grid_of(ctx)
        group = _my_group(groups(grid), ctx.process, op.name)
        got = grid.rendezvous(ctx.process, group, channel, operands, op.name)
        return wrap([reduce(regions[0], [got[p][i] for p in group], dt)
                     for i, dt in enumerate(dtypes)])
    return run


@kernel("stablehlo.reduce_scatter", special=True, traits=("judged_whole",))
def reduce_scatter(op):
    """spec: reduce_scatter. all_reduce, then member i keeps part i of the
    result split along scatter_dimension."""
    _no_quant_reduction(op)
    dim = int(op.attrs["scatter_dimension"])
    groups, channel = _groups_all_reduce_style(op)
    reduce = _reducer(op.regions[0])
    dtype = op.result_types[0].dtype

    def run(ctx, regions, operand):
        grid = grid_of(ctx)
        group = _my_group(groups(grid), ctx.process, op.name)
        got = grid.rendezvous(ctx.process, group, channel, (operand,), op.name)
        reduced = reduce(regions[0], [got[p][0] for p in group], dtype)
        if reduced.shape[dim] % len(group):
            raise ValueError(f"dimension {dim} of size {reduced.shape[dim]} does not "
                             f"split into {len(group)} parts")
        return np.split(reduced, len(group), axis=dim)[group.index(ctx.process)]
    return run


@kernel("stablehlo.all_to_all", special=True, traits=("quant_same_params",))
def all_to_all(op):
    """spec: all_to_all. Splits each operand in split_count parts along
    split_dimension; member i gets part i of everyone, concatenated along
    concat_dimension in group order."""
    split_dim = int(op.attrs["split_dimension"])
    concat_dim = int(op.attrs["concat_dimension"])
    split_count = int(op.attrs["split_count"])
    groups, channel = _groups_permute_style(op)
    wrap = one_or_many(op)

    def run(ctx, regions, *operands):
        grid = grid_of(ctx)
        group = _my_group(groups(grid), ctx.process, op.name)
        if len(group) != split_count:
            raise ValueError(f"process group has {len(group)} members, "
                             f"split_count is {split_count}")
        got = grid.rendezvous(ctx.process, group, channel, operands, op.name)
        me = group.index(ctx.process)
        return wrap([np.concatenate([np.split(got[p][i], split_count, axis=split_dim)[me]
                                     for p in group], axis=concat_dim)
                     for i in range(len(operands))])
    return run


@kernel("stablehlo.collective_permute", special=True, traits=("quant_same_params",))
def collective_permute(op):
    """spec: collective_permute. A target gets its source's operand; a process
    that is no target gets zeros.

    Each source->target pair is a process group of its own, met in the order
    of source_target_pairs (as the C++ reference interpreter does, which is
    deadlock-free since every process walks the pairs in the same order); a
    self loop needs no rendezvous.
    """
    groups, channel = _groups_permute_style(op, "source_target_pairs")
    rtype = op.result_types[0]

    def run(ctx, regions, operand):
        grid = grid_of(ctx)
        me = ctx.process
        result = None
        for src, dst in groups(grid):
            if me not in (src, dst):
                continue
            if src == dst:
                result = operand
                continue
            got = grid.rendezvous(me, (src, dst), channel, (operand,), op.name)
            if dst == me:
                result = got[src][0]
        return _zeros(rtype, operand.shape) if result is None else result
    return run


@kernel("stablehlo.collective_broadcast", special=True, traits=("quant_same_params",))
def collective_broadcast(op):
    """spec: collective_broadcast. Every group member gets the source's operands
    (the group's first member, or member operands[N][j] with has_dynamic_root);
    processes in no group get zeros."""
    groups, channel = _groups_permute_style(op)
    dynamic_root = bool(op.attrs.get("has_dynamic_root", False))
    rtypes = op.result_types
    wrap = one_or_many(op)

    def run(ctx, regions, *operands):
        data, group, got, roots = _exchange_with_roots(ctx, op, groups, channel,
                                                       operands, dynamic_root)
        if group is None:
            return wrap([_zeros(t, v.shape) for t, v in zip(rtypes, data)])
        return wrap([got[group[root]][j] for j, root in enumerate(roots)])
    return run


def _exchange_with_roots(ctx, op, groups, channel, operands, dynamic_root):
    """The rooted collectives' common part: ``(data, group, got, roots)`` with
    every group member's operands in ``got`` and each operand's root index in
    the group (the first member, or operands[N][j] with has_dynamic_root);
    ``group`` is None for a process in no group."""
    grid = grid_of(ctx)
    data = operands[:-1] if dynamic_root else operands
    group = next((g for g in groups(grid) if ctx.process in g), None)
    if group is None:
        return data, None, None, None
    got = grid.rendezvous(ctx.process, group, channel, data, op.name)
    roots = []
    for j in range(len(data)):
        root = int(operands[-1][j]) if dynamic_root else 0
        if not 0 <= root < len(group):
            raise ValueError(f"dynamic root {root} is out of range for a "
                             f"process group of {len(group)}")
        roots.append(root)
    return data, group, got, roots


@kernel("stablehlo.collective_reduce", special=True)
def collective_reduce(op):
    """spec: collective_reduce. Like all_reduce, but only the root (the group's
    first member, or member operands[N][j] with has_dynamic_root) keeps the
    reduced value; every other process gets zeros.

    Process groups are chosen as for all_reduce (with use_global_device_ids),
    following the C++ reference interpreter; the spec text's grouping
    paragraph is copied from collective_broadcast.
    """
    _no_quant_reduction(op)
    groups, channel = _groups_all_reduce_style(op)
    dynamic_root = bool(op.attrs.get("has_dynamic_root", False))
    reduce = _reducer(op.regions[0])
    rtypes = op.result_types
    wrap = one_or_many(op)

    def run(ctx, regions, *operands):
        data, group, got, roots = _exchange_with_roots(ctx, op, groups, channel,
                                                       operands, dynamic_root)
        if group is None:
            return wrap([_zeros(t, v.shape) for t, v in zip(rtypes, data)])
        out = []
        for j, (t, root) in enumerate(zip(rtypes, roots)):
            if group[root] != ctx.process:
                out.append(_zeros(t, data[j].shape))
            else:
                out.append(reduce(regions[0], [got[p][j] for p in group], t.dtype))
        return wrap(out)
    return run


# ----------------------------------------------------------------------
# The conformance harness op


@kernel("interpreter.run_parallel", special=True)
def interpreter_run_parallel(op):
    """interpreter.run_parallel (stablehlo/reference/InterpreterOps.td).

    ``programs[replica_id][partition_id]`` names the function each process of
    a ``len(programs) x len(programs[0])`` grid runs; the inputs are the
    processes' arguments concatenated in that (replica-major) order, and so
    are the results. ``infeed`` names functions whose results fill the shared
    infeed queue, one function per `infeed` execution.
    """
    programs = op.attrs.get("programs")
    if (not isinstance(programs, list) or not programs
            or not all(isinstance(row, list) and row for row in programs)
            or not all(isinstance(n, str) for row in programs for n in row)):
        raise Unsupported(f"programs must be a list of lists of function symbols, "
                          f"got {programs!r}")
    infeed = op.attrs.get("infeed") or []
    if not isinstance(infeed, list) or not all(isinstance(n, str) for n in infeed):
        raise Unsupported(f"infeed must be a list of function symbols, got {infeed!r}")
    wrap = one_or_many(op)

    def run(ctx, regions, *inputs):
        functions = ctx.program.functions
        args, pos = [], 0
        for row in programs:
            for name in row:
                f = ctx.program.function(name)
                n = len(f.input_types)
                args.append(list(inputs[pos:pos + n]))
                pos += n
        if pos != len(inputs):
            raise ValueError(f"{len(inputs)} inputs, the programs take {pos}")
        feed = [functools.partial(_run_infeed_function, name) for name in infeed]
        for name in infeed:
            if name not in functions:
                raise ValueError(f"no infeed function @{name}")
        per_process = run_parallel(ctx.program, args, programs=programs, infeed=feed)
        results = [v for outs in per_process for v in outs]
        if len(results) != op.num_results:
            raise ValueError(f"the programs return {len(results)} values, the op "
                             f"has {op.num_results} results")
        return wrap(results)
    return run


def _run_infeed_function(name, ctx):
    """An infeed item of the harness: the results of function @name, run in ``ctx``."""
    return ctx.program.functions[name].block.run(ctx, (), ())
