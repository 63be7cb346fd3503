"""SPMD planning of a sharded ``jit`` for the plugin.

JAX sends sharded programs unpartitioned (global shapes, ``sdy.sharding``
attributes; see the interpreter's ``stablehlo_interpreter.spmd`` for the
geometry); PyTorch/XLA sends them as XLA HLO with GSPMD ``mhlo.sharding``
strings. A :class:`SpmdPlan` runs such a program for ``num_partitions``
devices: it assembles each global argument from the devices' shards, runs
the program once, and cuts every global result into the devices' shards.
It also chooses the shardings of results the program leaves open (a simple
forward propagation: :func:`_propagate` over sdy shardings,
:func:`_propagate_gspmd` over GSPMD tilings, the rules XLA's propagation
follows for the common ops) and encodes every sharding as the
``xla.OpSharding`` PJRT reports (jaxlib's message class) and, for GSPMD
programs, into the optimized program XLA's C API client reads them from.

It uses the interpreter through its public names only.
"""


import io
import re

import numpy as np

from stablehlo_interpreter import (
    MLIR_LOCK,
    ExecutionError,
    Mesh,
    Sharding,
    ShardingError,
    attribute_text,
    decode_attribute,
    has_trait,
    load,
    module_meshes,
    parse_gspmd_sharding,
    parse_sharding,
    parse_sharding_per_value,
)

from . import compat
from .mlir_funcs import find_func

xla_client = compat.jax_internal("lib", "xla_client", feature="SPMD programs (xla.OpSharding)")


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
        attrs = [a or {} for a in list(f.arg_attrs) + list(f.result_attrs)]
        with MLIR_LOCK, module.context:
            self.meshes = module_meshes(module.mlir)
            # A program converted from XLA HLO (PyTorch/XLA's SPMD) carries
            # GSPMD `mhlo.sharding` strings instead of sdy meshes/shardings.
            self.gspmd = not self.meshes and not any("sdy.sharding" in a for a in attrs) \
                and any("mhlo.sharding" in a for a in attrs)
            returned = [] if self.gspmd else _propagate(module.mlir, f.name, self.meshes)
        default_mesh = Mesh([("_all", self.num_partitions)])
        self.in_shapes = [_shape(t) for t in f.input_types]
        self.out_shapes = [_shape(t) for t in f.output_types]
        self.in_shardings = [self._sharding(attrs, t, default_mesh, f"argument #{i}")
                             for i, (attrs, t) in enumerate(zip(f.arg_attrs, f.input_types))]
        if self.gspmd:
            with MLIR_LOCK, module.context:
                returned = [None if t is None else t.sharding(self.devices)
                            for t in _propagate_gspmd(module.mlir, f.name, self)]
        self.out_shardings = [self._sharding(attrs, t, default_mesh, f"result #{i}",
                                             returned[i] if i < len(returned) else None)
                              for i, (attrs, t) in enumerate(zip(f.result_attrs,
                                                                  f.output_types))]
        # Shapes with the padding of uneven GSPMD shards (None: even).
        self.in_padded = [None if s is None or padded_shape(s, sh) == s else padded_shape(s, sh)
                          for sh, s in zip(self.in_shardings, self.in_shapes)]
        self.out_padded = [None if s is None or padded_shape(s, sh) == s else padded_shape(s, sh)
                           for sh, s in zip(self.out_shardings, self.out_shapes)]
        self.out_shard_shapes = [None if s is None else sh.shard_shape(p or s)
                                 for sh, s, p in zip(self.out_shardings, self.out_shapes,
                                                     self.out_padded)]
        self._optimized = None

    def _sharding(self, attrs, t, default_mesh, what, propagated=None):
        shape = _shape(t)
        text = (attrs or {}).get("sdy.sharding")
        gspmd = (attrs or {}).get("mhlo.sharding")
        if text is None and gspmd is None and propagated is not None and shape is not None:
            # The program leaves this result's sharding to the compiler (XLA
            # would propagate one): any choice is correct; take the sharding
            # the value has by simple forward propagation.
            try:
                propagated.check(shape, what)
                return propagated
            except ShardingError:
                pass
        if text is None and gspmd is not None and shape is not None:
            # Programs converted from XLA HLO (PyTorch/XLA) carry GSPMD shardings.
            sh = parse_gspmd_sharding(str(gspmd), self.num_partitions)
            if sh is None:
                return Sharding.replicated_on(default_mesh, len(shape))
            # GSPMD pads uneven shards at the end (a 3-row value in 2 shards:
            # 2 rows each, the last one's second row padding).
            sh.check(padded_shape(shape, sh), f"{what} of @{self.func}")
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

    def optimized_program(self, code):
        """The program as PJRT reports it compiled (PJRT_Executable_OptimizedProgram):
        for a GSPMD program, ``code`` (StableHLO bytecode) with every result's
        sharding as its ``mhlo.sharding`` and the module's
        ``mhlo.spmd_output_sharding`` / ``mhlo.spmd_parameters_shardings``
        (what XLA's partitioner records).  XLA's C API client converts the
        program back into an HloModule (PjRtCApiExecutable::GetHloModules);
        PyTorch/XLA reads the output shardings from it and takes each
        device's result buffer for that device's shard."""
        if not self.gspmd:
            return code
        if self._optimized is None:
            from jaxlib.mlir import ir
            texts = [gspmd_text(b) for b in self.op_shardings("out")]
            module = load(code, name="optimized program", trusted=True)
            with MLIR_LOCK, module.context:
                o = find_func(module.mlir, self.func)
                if o is None:
                    return code
                old = list(o.attributes["res_attrs"]) if "res_attrs" in o.attributes \
                    else [None] * len(texts)
                new = []
                for attrs, text in zip(old, texts):
                    entries = {} if attrs is None else \
                        {a.name: a.attr for a in ir.DictAttr(attrs)}
                    entries["mhlo.sharding"] = ir.StringAttr.get(text)
                    new.append(ir.DictAttr.get(entries))
                o.attributes["res_attrs"] = ir.ArrayAttr.get(new)
                # What XLA's partitioner records in the HloModule (and
                # PyTorch/XLA reads: ShardingUtil::GetOutputSharding).
                top = module.mlir.operation.attributes
                top["mhlo.spmd_output_sharding"] = ir.StringAttr.get(
                    texts[0] if len(texts) == 1 else tuple_text(self.op_shardings("out")))
                top["mhlo.spmd_parameters_shardings"] = ir.ArrayAttr.get(
                    [ir.StringAttr.get(gspmd_text(b)) for b in self.op_shardings("in")])
                buf = io.BytesIO()
                module.mlir.operation.write_bytecode(buf)
            self._optimized = buf.getvalue()
        return self._optimized

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
        for i, (sh, shape, t, padded) in enumerate(zip(self.in_shardings, self.in_shapes,
                                                       f.input_types, self.in_padded)):
            shards = [args[i] for args in args_per_partition]
            if shape is None or sh.is_replicated:
                globals_.append(shards[0])
            elif padded is not None:
                whole = sh.assemble(shards, self.devices, padded, t.dtype)
                globals_.append(whole[tuple(slice(0, n) for n in shape)])
            else:
                globals_.append(sh.assemble(shards, self.devices, shape, t.dtype))
        if consume:
            # The list is given up: an argument assembled here from shards is
            # a fresh array only the run refers to, which in-place kernels
            # (dynamic_update_slice) may then update instead of copying; a
            # replicated argument is a device's own buffer array, which its
            # other references protect (the interpreter checks them). Only
            # for donating runs, which gain from it: elsewhere it measured
            # slower (freeing the arguments early changes how malloc reuses
            # the large blocks; CHANGELOG.md has the numbers).
            results = program.run_donated(globals_, func=self.func)
        else:
            results = program.run(*globals_, func=self.func)
        per_device = [[None] * len(results) for _ in self.devices]
        for j, (value, sh, shape, padded) in enumerate(zip(results, self.out_shardings,
                                                           self.out_shapes, self.out_padded)):
            if shape is None:
                parts = [value] * len(self.devices)
            elif padded is not None:
                value = np.asarray(value)
                parts = sh.split(np.pad(value, [(0, p - n) for n, p in zip(shape, padded)]),
                                 self.devices)
            else:
                parts = sh.split(value, self.devices)
                if j in self.owned_outputs and j not in written_back \
                        and not sh.is_replicated:
                    parts = [np.array(part, order="C") for part in parts]
            for p, part in enumerate(parts):
                per_device[p][j] = part
        return per_device


# Which ops propagation does not treat as elementwise (their elements move:
# the interpreter's "moves_elements" trait) and which XLA tiles like their
# first tiled operand of the same rank ("keeps_tiling"): traits of the
# interpreter's kernels (stablehlo_interpreter.with_trait).


class _Known(dict):
    """MLIR value -> what a propagation pass knows of it (a sharding or a
    tiling); ``get`` of a value that cannot be a key is None."""

    def get(self, v, default=None):
        try:
            return dict.get(self, v, default)
        except TypeError:
            return default


def _shape_of(v):
    """The shape of MLIR value ``v``; None for tokens and tuples."""
    try:
        return tuple(int(d) for d in v.type.shape)
    except Exception:  # noqa: BLE001 - tokens, tuples
        return None


def _sharding(mesh, dims):
    out = Sharding.__new__(Sharding)
    out.mesh, out.dims, out.replicated, out.unreduced, out.text = mesh, dims, [], [], None
    return out


def _remap(sh, dims_map, ndim):
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
    return _sharding(sh.mesh, dims)


def _argument_shardings(func, block, meshes):
    """The ``sdy.sharding`` of each argument that has one."""
    known = _Known()
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
    return known


def _broadcast_sharding(o, known, result):
    sh = known.get(o.operands[0])
    rshape = _shape_of(result)
    ishape = _shape_of(o.operands[0])
    if sh is None or rshape is None or ishape is None:
        return None
    bdims = [int(d) for d in decode_attribute(o, "broadcast_dimensions")]
    m = [None] * len(rshape)
    for i, r in enumerate(bdims):
        if ishape[i] == rshape[r]:
            m[r] = i
    return _remap(sh, m, len(rshape))


def _dot_general_sharding(o, known):
    """The result sharding of a dot_general: batch, then the lhs's free,
    then the rhs's free dimensions take their operand's axes (each mesh
    axis once)."""
    dn = str(o.attributes["dot_dimension_numbers"])

    def nums(key):
        mm = re.search(key + r"\s*=\s*\[([^\]]*)\]", dn)
        return [int(x) for x in mm.group(1).split(",") if x.strip()] if mm else []
    lb, rb = nums("lhs_batching_dimensions"), nums("rhs_batching_dimensions")
    lc, rc = nums("lhs_contracting_dimensions"), nums("rhs_contracting_dimensions")
    lhs, rhs = o.operands[0], o.operands[1]
    ls, rs = known.get(lhs), known.get(rhs)
    lsh, rsh = _shape_of(lhs), _shape_of(rhs)
    if (ls is None and rs is None) or lsh is None or rsh is None:
        return None
    lf = [d for d in range(len(lsh)) if d not in lb and d not in lc]
    rf = [d for d in range(len(rsh)) if d not in rb and d not in rc]
    base = ls if ls is not None else rs
    used = set()

    def take(sh, d):
        if sh is None or sh.mesh.axes != base.mesh.axes:
            return []
        axes = sh.dims[d]
        if any(a.name in used for a in axes):
            return []
        used.update(a.name for a in axes)
        return axes
    dims = [take(ls, d) for d in lb] + [take(ls, d) for d in lf] + [take(rs, d) for d in rf]
    return _sharding(base.mesh, dims)


def _propagate_op(o, name, results, known, meshes):
    """Record in ``known`` what op ``o`` (with ``results``) tells of its results."""
    if name in ("sdy.sharding_constraint", "sdy.reshard"):
        known[results[0]] = parse_sharding(str(o.attributes["sharding"]), meshes)
    elif name == "sdy.manual_computation":
        for v, sh in zip(results, parse_sharding_per_value(
                str(o.attributes["out_shardings"]), meshes)):
            known[v] = sh
    elif name == "stablehlo.transpose":
        sh = known.get(o.operands[0])
        if sh is not None:
            perm = list(decode_attribute(o, "permutation"))
            known[results[0]] = _remap(sh, perm, len(perm))
    elif name == "stablehlo.reduce":
        sh = known.get(o.operands[0])
        if sh is not None:
            red = set(int(d) for d in decode_attribute(o, "dimensions"))
            keep = [d for d in range(len(sh.dims)) if d not in red]
            for v in results:
                known[v] = _remap(sh, keep, len(keep))
    elif name == "stablehlo.broadcast_in_dim":
        sh = _broadcast_sharding(o, known, results[0])
        if sh is not None:
            known[results[0]] = sh
    elif name == "stablehlo.dot_general":
        sh = _dot_general_sharding(o, known)
        if sh is not None:
            known[results[0]] = sh
    elif not has_trait(name, "moves_elements") and not len(o.regions) and len(results) == 1:
        rshape = _shape_of(results[0])
        if rshape is not None and o.operands and all(
                _shape_of(v) == rshape for v in o.operands):
            for v in o.operands:
                sh = known.get(v)
                if sh is not None:
                    known[results[0]] = sh
                    break


def _propagate(mlir_module, func_name, meshes):
    """Shardings of the values ``func_name`` returns, by a simple forward
    pass over its top-level ops (arguments, sharding constraints, manual
    computations, shape-preserving elementwise ops, transpose, reduce,
    broadcast_in_dim, dot_general); None where nothing is known.

    Only the choice of result layouts for results the program leaves
    unspecified depends on this: values never do."""
    func = find_func(mlir_module, func_name)
    if func is None or not func.regions or not func.regions[0].blocks:
        return []
    block = func.regions[0].blocks[0]
    known = _argument_shardings(func, block, meshes)
    for op in block.operations:
        o = op.operation
        name = o.name
        try:
            if name in ("func.return", "stablehlo.return"):
                return [known.get(v) for v in o.operands]
            results = list(o.results)
            if results:
                _propagate_op(o, name, results, known, meshes)
        except Exception:  # noqa: BLE001 - propagation is a best effort
            continue
    return []


class Tiling:
    """Which tile of a value each device holds, device by device: the form a
    GSPMD tile assignment has once read (``{devices=[2,1,2]0,2,1,3
    last_tile_dim_replicate}``: devices 0 and 2 hold tile (0, 0), ...).

    ``counts[d]`` tiles along dimension ``d``; ``index[k]`` the tile
    coordinates of logical device ``k``; devices with equal coordinates are
    replicas, ``order[k]`` ranks them (the order of the tile assignment they
    came from, kept so that a propagated sharding prints like its source).
    Propagation (:func:`_propagate_gspmd`) moves index columns from operands
    to results; a valid tiling is *balanced*: every tile is held by the same
    number of devices."""

    __slots__ = ("counts", "index", "order")

    def __init__(self, counts, index, order):
        self.counts = tuple(int(c) for c in counts)
        self.order = np.asarray(order, dtype=np.int64)
        self.index = np.asarray(index, dtype=np.int64).reshape(len(self.order),
                                                               len(self.counts))

    @classmethod
    def of(cls, sharding, devices):
        """The tiling of an interpreter :class:`Sharding` (None: replicated)."""
        if sharding is None or sharding.is_replicated:
            return None
        ids = sharding.mesh.device_ids
        return cls(sharding.counts(), [sharding.shard_index(d) for d in devices],
                   [ids.index(d) for d in devices])

    @property
    def tiles(self):
        return int(np.prod(self.counts, dtype=np.int64))

    def columns(self, sources):
        """The tiling whose dimension ``r`` is dimension ``sources[r]`` of
        this one (None: not tiled)."""
        counts = [1 if d is None else self.counts[d] for d in sources]
        index = np.zeros((len(self.order), len(sources)), dtype=np.int64)
        for r, d in enumerate(sources):
            if d is not None:
                index[:, r] = self.index[:, d]
        return Tiling(counts, index, self.order)

    def balanced(self):
        keys, held = np.unique(self.index, axis=0, return_counts=True)
        return len(keys) == self.tiles and len(set(held.tolist())) == 1

    def fit(self, shape):
        """This tiling without the dimensions ``shape`` does not divide
        evenly (XLA would pad their shards; stablehlo_ref splits values into
        equal shards only); None if ``shape`` has another rank."""
        if shape is None or len(shape) != len(self.counts):
            return None
        return self.columns([d if shape[d] % c == 0 else None
                             for d, c in enumerate(self.counts)])

    def op_sharding(self, devices):
        """The ``xla.OpSharding`` message of this tiling."""
        rep = len(devices) // self.tiles
        assignment = []
        for idx in np.ndindex(*self.counts):
            held = np.nonzero((self.index == np.asarray(idx, dtype=np.int64)).all(axis=1))[0]
            assignment += [devices[k] for k in sorted(held, key=lambda k: self.order[k])]
        dims = list(self.counts) + ([rep] if rep > 1 else [])
        return _op_sharding_proto(OTHER, dims, assignment, rep > 1)

    def sharding(self, devices):
        """The interpreter :class:`Sharding` of this tiling (None: replicated),
        by way of its GSPMD text."""
        if self.tiles == 1:
            return None
        return parse_gspmd_sharding(gspmd_text(self.op_sharding(devices)), len(devices))


def combine_tilings(parts, n):
    """The tiling whose dimension ``r`` is dimension ``parts[r][1]`` of the
    tiling ``parts[r][0]`` (``(None, None)``: not tiled), or None when the
    devices' coordinates do not form a balanced tiling (operands tiled over
    the same devices in ways that cannot hold together)."""
    counts, cols, order = [], [], None
    for tiling, d in parts:
        if tiling is None or d is None or tiling.counts[d] == 1:
            counts.append(1)
            cols.append(np.zeros(n, dtype=np.int64))
        else:
            counts.append(tiling.counts[d])
            cols.append(tiling.index[:, d])
            order = tiling.order if order is None else order
    if order is None:
        return None
    t = Tiling(counts, np.stack(cols, axis=1), order)
    return t if t.balanced() else None


def _reshape_sources(ishape, oshape, tiling):
    """Dimension sources (see :meth:`Tiling.columns`) of a reshape's result.

    Dimensions are grouped where their products agree ([6, 4] -> [2, 3, 4]:
    {0} -> {0, 1}, {1} -> {2}); a group keeps its tiling when only its
    major dimension is tiled and the group's major result dimension is
    divisible by the tile count (the tiles then hold the same elements)."""
    out = [None] * len(oshape)
    i = j = 0
    while True:
        while i < len(ishape) and ishape[i] == 1:
            i += 1
        while j < len(oshape) and oshape[j] == 1:
            j += 1
        if i >= len(ishape) or j >= len(oshape):
            return out
        gi, gj, pi, pj = [i], [j], ishape[i], oshape[j]
        while pi != pj:
            if pi < pj and i + 1 < len(ishape):
                i += 1
                gi.append(i)
                pi *= ishape[i]
            elif pj < pi and j + 1 < len(oshape):
                j += 1
                gj.append(j)
                pj *= oshape[j]
            else:
                return out
        i += 1
        j += 1
        c = tiling.counts[gi[0]]
        if c > 1 and all(tiling.counts[k] == 1 for k in gi[1:]) and oshape[gj[0]] % c == 0:
            out[gj[0]] = gi[0]


def _dot_dims(o, name, lrank):
    """(lhs batch, rhs batch, lhs contracting, rhs contracting) of a dot."""
    if name == "stablehlo.dot":
        return [], [], [lrank - 1], [0]
    dn = str(o.attributes["dot_dimension_numbers"])

    def nums(key):
        m = re.search(key + r"\s*=\s*\[([^\]]*)\]", dn)
        return [int(x) for x in m.group(1).split(",") if x.strip()] if m else []
    return (nums("lhs_batching_dimensions"), nums("rhs_batching_dimensions"),
            nums("lhs_contracting_dimensions"), nums("rhs_contracting_dimensions"))


def _propagate_gspmd(mlir_module, func_name, plan):
    """Tilings of the values ``func_name`` returns, for a program with GSPMD
    ``mhlo.sharding`` annotations (XLA HLO from PyTorch/XLA): a forward pass
    over its top-level ops that chooses what XLA's sharding propagation
    chooses for the common ops (elementwise ops and custom calls such as
    mhlo.erf, convert, select, transpose, broadcast_in_dim, reshape,
    reduce, dot/dot_general, ops annotated with ``mhlo.sharding`` such as
    XLA's `Sharding` custom call); None where nothing is known (the result
    is then replicated).

    Only the layout of results the program leaves unannotated depends on
    this; the values never do (the program runs unpartitioned)."""
    func = find_func(mlir_module, func_name)
    if func is None or not func.regions or not func.regions[0].blocks:
        return []
    devices = plan.devices
    block = func.regions[0].blocks[0]
    known = _Known()
    for arg, sh in zip(block.arguments, plan.in_shardings):
        t = Tiling.of(sh, devices)
        if t is not None:
            known[arg] = t

    def put(v, t):
        t = None if t is None else t.fit(_shape_of(v))
        if t is not None and t.tiles > 1:
            known[v] = t

    for op in block.operations:
        o = op.operation
        name = o.name
        if name in ("func.return", "stablehlo.return"):
            return [known.get(v) for v in o.operands]
        results = list(o.results)
        if not results:
            continue
        try:
            _gspmd_op(o, name, results, known, put, devices)
        except Exception:  # noqa: BLE001 - propagation is a best effort
            # (an annotation it cannot read, such as {manual}, leaves the value
            # unknown: only the layout of results depends on this)
            continue
    return []


def _gspmd_op(o, name, results, known, put, devices):
    """``put`` the tilings op ``o`` (with ``results``) gives its results, as
    XLA's sharding propagation chooses them."""
    n = len(devices)
    operands = list(o.operands)
    if "mhlo.sharding" in o.attributes:
        # An annotated instruction (XLA's `Sharding` custom call, or
        # any op the user's sharding was put on): that is its sharding.
        if len(results) == 1:
            text = attribute_text(decode_attribute(o, "mhlo.sharding"))
            put(results[0], Tiling.of(parse_gspmd_sharding(text, n), devices))
    elif name == "stablehlo.transpose":
        t = known.get(operands[0])
        if t is not None:
            put(results[0], t.columns([int(d) for d in decode_attribute(o, "permutation")]))
    elif name in ("stablehlo.broadcast_in_dim", "stablehlo.reshape"):
        t = known.get(operands[0])
        rshape, ishape = _shape_of(results[0]), _shape_of(operands[0])
        if t is not None and rshape is not None and ishape is not None:
            if name == "stablehlo.reshape":
                put(results[0], t.columns(_reshape_sources(ishape, rshape, t)))
            else:
                put(results[0], t.columns(_broadcast_sources(o, ishape, rshape)))
    elif name == "stablehlo.reduce":
        inputs = [known.get(v) for v in operands[:len(results)]]
        t = next((x for x in inputs if x is not None), None)
        if t is not None:
            red = {int(d) for d in decode_attribute(o, "dimensions")}
            keep = [d for d in range(len(t.counts)) if d not in red]
            for v in results:
                put(v, t.columns(keep))
    elif name in ("stablehlo.dot", "stablehlo.dot_general"):
        put(results[0], _dot_tiling(o, name, known, n))
    elif has_trait(name, "keeps_tiling"):
        # XLA keeps the operand's tiling on these, even along the
        # dimension they slice, sort, pad, concatenate or scan
        # (cumsum is a reduce_window); uneven ones are untiled by put.
        rank = len(_shape_of(results[0]) or ())
        t = next((known.get(v) for v in operands if known.get(v) is not None
                  and len(known.get(v).counts) == rank), None)
        for v in results:
            put(v, t)
    elif name == "stablehlo.reverse":
        # The tiles stay where they are: the device holding tile i
        # holds tile count-1-i of the result (XLA reverses the tile
        # assignment).
        t = known.get(operands[0])
        if t is not None:
            index = t.index.copy()
            for d in (int(x) for x in decode_attribute(o, "dimensions")):
                index[:, d] = t.counts[d] - 1 - index[:, d]
            put(results[0], Tiling(t.counts, index, t.order))
    elif not has_trait(name, "moves_elements") and not len(o.regions) and len(results) == 1:
        t = _elementwise_tiling(results[0], operands, known, n)
        if t is not None:
            put(results[0], t)


def _broadcast_sources(o, ishape, rshape):
    """For each result dimension of a broadcast_in_dim, the operand dimension
    it takes its tiling from (None: a broadcast dimension)."""
    src = [None] * len(rshape)
    for i, r in enumerate(int(d) for d in decode_attribute(o, "broadcast_dimensions")):
        if ishape[i] == rshape[r]:
            src[r] = i
    return src


def _elementwise_tiling(result, operands, known, n):
    """Elementwise ops (and convert, select, clamp, custom calls like
    mhlo.erf): tiled like the operands of the result's shape; two operands'
    tilings are merged dimension by dimension when they hold together."""
    rshape = _shape_of(result)
    same = [known.get(v) for v in operands if _shape_of(v) == rshape]
    same = [t for t in same if t is not None]
    if rshape is None or not same:
        return None
    best = max(same, key=lambda x: x.tiles)
    parts = [(best if best.counts[d] > 1 else
              next((x for x in same if x.counts[d] > 1), best), d)
             for d in range(len(rshape))]
    merged = combine_tilings(parts, n)
    return merged if merged is not None else best


def _dot_tiling(o, name, known, n):
    """A dot's result tiling: batch dimensions as the lhs (else the rhs)
    tiles them, then the lhs's and the rhs's free dimensions as they are
    tiled (contracting dimensions drop out: the result is whole)."""
    lhs, rhs = o.operands[0], o.operands[1]
    lt, rt = known.get(lhs), known.get(rhs)
    lsh, rsh = _shape_of(lhs), _shape_of(rhs)
    if (lt is None and rt is None) or lsh is None or rsh is None:
        return None
    lb, rb, lc, rc = _dot_dims(o, name, len(lsh))
    lf = [d for d in range(len(lsh)) if d not in lb and d not in lc]
    rf = [d for d in range(len(rsh)) if d not in rb and d not in rc]
    parts = [(lt, a) if lt is not None and lt.counts[a] > 1 else (rt, b)
             for a, b in zip(lb, rb)]
    parts += [(lt, d) for d in lf] + [(rt, d) for d in rf]
    t = combine_tilings(parts, n)
    if t is not None:
        return t
    # Operand tilings that do not hold together: the one with more tiles.
    for src in sorted((x for x in (lt, rt) if x is not None), key=lambda x: -x.tiles):
        t = combine_tilings([(x, d) if x is src else (None, None) for x, d in parts], n)
        if t is not None:
            return t
    return None


def padded_shape(shape, sharding):
    """``shape`` rounded up to whole tiles of ``sharding`` (GSPMD's padding
    of uneven shards); ``shape`` itself when the ranks differ (check says so)."""
    if sharding.mesh.maximal or len(sharding.dims) != len(shape):
        return shape
    return tuple(-(-n // c) * c for n, c in zip(shape, sharding.counts()))


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


def _op_sharding_proto(kind, dims=(), devices=(), replicate_last=False):
    """An ``xla.OpSharding`` message (jaxlib's own class)."""
    sharding = xla_client.OpSharding()
    sharding.type = xla_client.OpSharding.Type(kind)
    if dims:
        sharding.tile_assignment_dimensions = list(dims)
    if devices:
        sharding.tile_assignment_devices = list(devices)
    sharding.replicate_on_last_tile_dim = bool(replicate_last)
    return sharding


def encode_op_sharding(kind, dims=(), devices=(), replicate_last=False):
    """A serialized ``xla.OpSharding`` (jaxlib's own message class)."""
    return _op_sharding_proto(kind, dims, devices, replicate_last).SerializeToString()


def gspmd_text(proto):
    """The GSPMD text (what ``mhlo.sharding`` holds) of an ``xla.OpSharding``
    message or its serialized bytes, as XLA's HloSharding prints it."""
    if isinstance(proto, bytes):
        data, proto = proto, xla_client.OpSharding()
        proto.ParseFromString(data)
    return str(xla_client.HloSharding.from_proto(proto))


def tuple_text(serialized_list):
    """The GSPMD text of the tuple of the serialized ``xla.OpSharding``s."""
    parts = []
    for data in serialized_list:
        part = xla_client.OpSharding()
        part.ParseFromString(data)
        parts.append(part)
    proto = _op_sharding_proto(TUPLE)
    proto.tuple_shardings = parts
    return gspmd_text(proto)


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
