"""SPMD planning of a sharded ``jit`` for the plugin.

JAX sends sharded programs unpartitioned (global shapes, ``sdy.sharding``
attributes; see the interpreter's ``stablehlo_interpreter.spmd`` for the
geometry). A :class:`SpmdPlan` runs such a program for ``num_partitions``
devices: it assembles each global argument from the devices' shards, runs
the program once, and cuts every global result into the devices' shards.
It also chooses the shardings of results the program leaves open (a simple
forward propagation) and encodes every sharding as the ``xla.OpSharding``
PJRT reports (jaxlib's message class).

It uses the interpreter through its public names only.
"""

import re

import numpy as np
from jax._src.lib import xla_client

from stablehlo_interpreter import (
    MLIR_LOCK,
    ExecutionError,
    Mesh,
    Sharding,
    ShardingError,
    attribute_text,
    decode_attribute,
    module_meshes,
    parse_gspmd_sharding,
    parse_sharding,
    parse_sharding_per_value,
)


class SpmdPlan:
    """Arguments/results shardings of an SPMD program's entry function.

    ``num_partitions`` devices (logical ids ``0..n-1``) run the program;
    values without ``sdy.sharding`` are replicated.
    """

    def __init__(self, program, num_partitions, func=None):
        self.program = program
        self.num_partitions = int(num_partitions)
        self.devices = list(range(self.num_partitions))
        module = program.module
        f = program.function(func)
        self.func = f.name
        with MLIR_LOCK, module.context:
            self.meshes = module_meshes(module.mlir)
            returned = _propagate(module.mlir, f.name, self.meshes)
        default_mesh = Mesh([("_all", self.num_partitions)])
        self.in_shardings = [self._sharding(attrs, t, default_mesh, f"argument #{i}")
                             for i, (attrs, t) in enumerate(zip(f.arg_attrs, f.input_types))]
        self.out_shardings = [self._sharding(attrs, t, default_mesh, f"result #{i}",
                                             returned[i] if i < len(returned) else None)
                              for i, (attrs, t) in enumerate(zip(f.result_attrs,
                                                                  f.output_types))]
        self.in_shapes = [_shape(t) for t in f.input_types]
        self.out_shapes = [_shape(t) for t in f.output_types]
        self.out_shard_shapes = [None if s is None else sh.shard_shape(s)
                                 for sh, s in zip(self.out_shardings, self.out_shapes)]

    def _sharding(self, attrs, t, default_mesh, what, propagated=None):
        shape = _shape(t)
        text = (attrs or {}).get("sdy.sharding")
        if text is None and propagated is not None and shape is not None:
            # The program leaves this result's sharding to the compiler (XLA
            # would propagate one): any choice is correct; take the sharding
            # the value has by simple forward propagation.
            try:
                propagated.check(shape, what)
                return propagated
            except ShardingError:
                pass
        gspmd = (attrs or {}).get("mhlo.sharding")
        if text is None and gspmd is not None and shape is not None:
            # Programs converted from XLA HLO (PyTorch/XLA) carry GSPMD shardings.
            sh = parse_gspmd_sharding(str(gspmd), self.num_partitions)
            if sh is None:
                return Sharding.replicated_on(default_mesh, len(shape))
            sh.check(shape, f"{what} of @{self.func}")
            return sh
        if shape is None:  # tokens
            return Sharding.replicated_on(default_mesh, 0)
        if text is None:
            return Sharding.replicated_on(default_mesh, len(shape))
        sh = parse_sharding(text, self.meshes)
        sh.check(shape, f"{what} of @{self.func}")
        if not sh.mesh.maximal:
            for d in sh.mesh.device_ids:
                if not 0 <= d < self.num_partitions:
                    raise ShardingError(f"{what}: mesh {sh.mesh} names device {d}, the "
                                        f"program has {self.num_partitions} partitions")
        return sh

    def op_shardings(self, which):
        shardings = self.in_shardings if which == "in" else self.out_shardings
        shapes = self.in_shapes if which == "in" else self.out_shapes
        if which == "out" and not shapes:
            # No results: XLA reports the sharding of the empty result tuple,
            # one element (IFRT refuses any other count: "HLO module output
            # is an empty tuple, but the output sharding has 0 elements").
            return [encode_op_sharding(REPLICATED)]
        out = []
        for sh, shape in zip(shardings, shapes):
            out.append(op_sharding(sh, 0 if shape is None else len(shape), self.devices))
        return out

    # Results whose shards get memory of their own (set at compile time to the
    # outputs a donated parameter aliases): the next step of a loop donates
    # them back, and only an array that owns its memory can be reused.
    # Other results stay views of the global result (no copy).
    owned_outputs = frozenset()

    def run(self, args_per_partition, written_back=frozenset(), consume=False):
        """Per-partition argument lists -> per-partition result lists.
        ``written_back``: results the caller writes into donated shards
        itself (no own copy needed). ``consume`` (a donating run): the global
        arguments are given up to the run (see below)."""
        if len(args_per_partition) != self.num_partitions:
            raise ExecutionError(f"got {len(args_per_partition)} argument lists for "
                                 f"{self.num_partitions} partitions")
        program = self.program
        f = program.function(self.func)
        globals_ = []
        for i, (sh, shape, t) in enumerate(zip(self.in_shardings, self.in_shapes,
                                               f.input_types)):
            shards = [args[i] for args in args_per_partition]
            if shape is None or sh.is_replicated:
                globals_.append(shards[0])
            else:
                globals_.append(sh.assemble(shards, self.devices, shape, t.dtype))
        if consume:
            # The list is given up: an argument assembled here from shards is
            # a fresh array only the run refers to, which in-place kernels
            # (dynamic_update_slice) may then update instead of copying; a
            # replicated argument is a device's own buffer array, which its
            # other references protect (the interpreter checks them). Only
            # for donating runs: elsewhere it measured slower (1M-element
            # a * 2 + 1 on 8 devices: 1.9 ms against 1.3 ms of CPU time per
            # call; freeing the arguments early changes how malloc reuses the
            # large blocks), while a donating loop gains (2.7 against 3.3 ms).
            results = program.run_donated(globals_, func=self.func)
        else:
            results = program.run(*globals_, func=self.func)
        per_device = [[None] * len(results) for _ in self.devices]
        for j, (value, sh, shape) in enumerate(zip(results, self.out_shardings,
                                                   self.out_shapes)):
            if shape is None:
                parts = [value] * len(self.devices)
            else:
                parts = sh.split(value, self.devices)
                if j in self.owned_outputs and j not in written_back \
                        and not sh.is_replicated:
                    parts = [np.array(part, order="C") for part in parts]
            for p, part in enumerate(parts):
                per_device[p][j] = part
        return per_device


_ELEMENTWISE_SKIP = {"stablehlo.reverse", "stablehlo.pad", "stablehlo.slice",
                     "stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice",
                     "stablehlo.concatenate", "stablehlo.sort", "stablehlo.iota"}


def _propagate(mlir_module, func_name, meshes):
    """Shardings of the values ``func_name`` returns, by a simple forward
    pass over its top-level ops (arguments, sharding constraints, manual
    computations, shape-preserving elementwise ops, transpose, reduce,
    broadcast_in_dim, dot_general); None where nothing is known.

    Only the choice of result layouts for results the program leaves
    unspecified depends on this: values never do."""
    func = None
    for op in mlir_module.body.operations:
        o = op.operation
        if o.name == "func.func" and attribute_text(decode_attribute(o, "sym_name")) == func_name:
            func = o
            break
    if func is None or not func.regions or not func.regions[0].blocks:
        return []
    block = func.regions[0].blocks[0]
    known = {}
    arg_attrs = decode_attribute(func, "arg_attrs") if "arg_attrs" in func.attributes \
        else []
    for i, arg in enumerate(block.arguments):
        text = (arg_attrs[i] or {}).get("sdy.sharding") if i < len(arg_attrs) and \
            isinstance(arg_attrs[i], dict) else None
        if text is not None:
            try:
                known[arg] = parse_sharding(text, meshes)
            except ShardingError:
                pass

    def get(v):
        try:
            return known.get(v)
        except TypeError:
            return None

    def shape_of(v):
        try:
            return tuple(v.type.shape)
        except Exception:  # noqa: BLE001 - tokens, tuples
            return None

    def remap(sh, dims_map, ndim):
        """Result sharding with result dim r taking operand dim dims_map[r]."""
        dims = [[] for _ in range(ndim)]
        used = set()
        for r, d in enumerate(dims_map):
            if d is None or d >= len(sh.dims):
                continue
            axes = [a for a in sh.dims[d] if a.name not in used]
            if len(axes) != len(sh.dims[d]):
                continue
            dims[r] = axes
            used.update(a.name for a in axes)
        out = Sharding.__new__(Sharding)
        out.mesh, out.dims, out.replicated, out.unreduced, out.text = \
            sh.mesh, dims, [], [], None
        return out

    for op in block.operations:
        o = op.operation
        name = o.name
        try:
            results = list(o.results)
            if name in ("func.return", "stablehlo.return"):
                return [get(v) for v in o.operands]
            if not results:
                continue
            if name in ("sdy.sharding_constraint", "sdy.reshard"):
                known[results[0]] = parse_sharding(str(o.attributes["sharding"]), meshes)
            elif name == "sdy.manual_computation":
                for v, sh in zip(results, parse_sharding_per_value(
                        str(o.attributes["out_shardings"]), meshes)):
                    known[v] = sh
            elif name == "stablehlo.transpose":
                sh = get(o.operands[0])
                if sh is not None:
                    perm = list(decode_attribute(o, "permutation"))
                    known[results[0]] = remap(sh, perm, len(perm))
            elif name == "stablehlo.reduce":
                n = len(results)
                sh = get(o.operands[0])
                if sh is not None:
                    red = set(int(d) for d in decode_attribute(o, "dimensions"))
                    keep = [d for d in range(len(sh.dims)) if d not in red]
                    for v in results:
                        known[v] = remap(sh, keep, len(keep))
                del n
            elif name == "stablehlo.broadcast_in_dim":
                sh = get(o.operands[0])
                rshape = shape_of(results[0])
                ishape = shape_of(o.operands[0])
                if sh is not None and rshape is not None and ishape is not None:
                    bdims = [int(d) for d in decode_attribute(o, "broadcast_dimensions")]
                    m = [None] * len(rshape)
                    for i, r in enumerate(bdims):
                        if ishape[i] == rshape[r]:
                            m[r] = i
                    known[results[0]] = remap(sh, m, len(rshape))
            elif name == "stablehlo.dot_general":
                dn = str(o.attributes["dot_dimension_numbers"])

                def nums(key):
                    mm = re.search(key + r"\s*=\s*\[([^\]]*)\]", dn)
                    return [int(x) for x in mm.group(1).split(",") if x.strip()] if mm else []
                lb, rb = nums("lhs_batching_dimensions"), nums("rhs_batching_dimensions")
                lc, rc = nums("lhs_contracting_dimensions"), nums("rhs_contracting_dimensions")
                lhs, rhs = o.operands[0], o.operands[1]
                ls, rs = get(lhs), get(rhs)
                lsh, rsh = shape_of(lhs), shape_of(rhs)
                if (ls is not None or rs is not None) and lsh is not None and rsh is not None:
                    lf = [d for d in range(len(lsh)) if d not in lb and d not in lc]
                    rf = [d for d in range(len(rsh)) if d not in rb and d not in rc]
                    base = ls if ls is not None else rs
                    dims = []
                    used = set()

                    def take(sh, d):
                        if sh is None or sh.mesh.axes != base.mesh.axes:
                            return []
                        axes = sh.dims[d]
                        if any(a.name in used for a in axes):
                            return []
                        used.update(a.name for a in axes)
                        return axes
                    for d in lb:
                        dims.append(take(ls, d))
                    for d in lf:
                        dims.append(take(ls, d))
                    for d in rf:
                        dims.append(take(rs, d))
                    out = Sharding.__new__(Sharding)
                    out.mesh, out.dims, out.replicated, out.unreduced, out.text = \
                        base.mesh, dims, [], [], None
                    known[results[0]] = out
            elif name not in _ELEMENTWISE_SKIP and not len(o.regions) and len(results) == 1:
                rshape = shape_of(results[0])
                if rshape is not None and o.operands and all(
                        shape_of(v) == rshape for v in o.operands):
                    for v in o.operands:
                        sh = get(v)
                        if sh is not None:
                            known[results[0]] = sh
                            break
        except Exception:  # noqa: BLE001 - propagation is a best effort
            continue
    return []


def _shape(t):
    shape = getattr(t, "shape", None)
    if shape is None:
        return None
    if any(d is None for d in shape):
        raise ShardingError(f"dynamic shape {t!r} in a sharded program is not supported")
    return tuple(int(d) for d in shape)


# ----------------------------------------------------------------------
# xla.OpSharding (what PJRT reports as parameter/output shardings)

REPLICATED, MAXIMAL, TUPLE, OTHER, MANUAL = 0, 1, 2, 3, 4


def encode_op_sharding(kind, dims=(), devices=(), replicate_last=False):
    """A serialized ``xla.OpSharding`` (jaxlib's own message class)."""
    sharding = xla_client.OpSharding()
    sharding.type = xla_client.OpSharding.Type(kind)
    if dims:
        sharding.tile_assignment_dimensions = list(dims)
    if devices:
        sharding.tile_assignment_devices = list(devices)
    sharding.replicate_on_last_tile_dim = bool(replicate_last)
    return sharding.SerializeToString()


def op_sharding(sharding, ndim, devices):
    """A serialized ``xla.OpSharding`` proto equivalent to ``sharding``,
    with ``devices`` (the logical ids of the program) as tile devices."""
    if sharding.mesh.maximal or not any(sharding.dims):
        return encode_op_sharding(REPLICATED)
    counts = sharding.counts()
    tiles = 1
    for c in counts:
        tiles *= c
    devices = list(devices)
    if len(devices) % tiles:
        raise ShardingError(f"{len(devices)} devices cannot hold the {tiles} "
                            f"tiles of {sharding}")
    rep = len(devices) // tiles
    shape = counts + ([rep] if rep > 1 else [])
    grid = np.full(shape, -1, dtype=np.int64)
    used = {a.name for axes in sharding.dims for a in axes}
    for dev in devices:
        idx = sharding.shard_index(dev)
        if rep > 1:
            coords = sharding.mesh.coords(dev)
            r = 0
            for n, s in sharding.mesh.axes:
                if n not in used:
                    r = r * s + coords[n]
                else:
                    # a partially used axis (sub-axes): the remaining part
                    # replicates too
                    parts = [a for axes in sharding.dims for a in axes if a.name == n]
                    covered = 1
                    for a in parts:
                        covered *= a.size
                    if covered != s:
                        raise ShardingError(f"sharding {sharding} uses part of axis "
                                            f"\"{n}\"; not supported as a PJRT sharding")
            idx = idx + [r]
        if grid[tuple(idx)] != -1:
            raise ShardingError(f"sharding {sharding}: devices {grid[tuple(idx)]} and "
                                f"{dev} hold the same tile")
        grid[tuple(idx)] = dev
    return encode_op_sharding(OTHER, dims=shape, devices=grid.ravel().tolist(),
                              replicate_last=rep > 1)
