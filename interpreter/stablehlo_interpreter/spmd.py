"""Shardy (`sdy`) shardings: what a global-view SPMD program means per device.

JAX sends sharded programs unpartitioned: every value has its global shape
and ``sdy.sharding`` attributes (on arguments, results, constraints) say how
devices hold it. XLA's SPMD partitioner would split such a program into
per-device programs; this interpreter computes whole arrays instead, which
gives the same per-device values. This module holds the geometry and what
runs inside the interpreter:

* meshes and shardings (:class:`Mesh`, :class:`Sharding`), parsed from the
  module's attributes: a global value is cut into the devices' shards
  (:meth:`Sharding.split`) and put back together (:meth:`Sharding.assemble`);
* ``sdy.manual_computation`` (``shard_map``): cut the operands over the
  manual axes, run the body once per device on a process grid of its own
  (collectives in the body meet there), and put the results back together
  -- see :class:`ManualComputation`.

A sharded ``jit`` (one global program run for every partition, its
arguments assembled from and its results split into shards) is planned by
the embedder: the PJRT plugin's ``stablehlo_pjrt.spmd.SpmdPlan``, which also
encodes the shardings as ``xla.OpSharding`` for PJRT.

Terms (sdy): a mesh has named axes with sizes and a list of device ids
(logical ids: partition ids of the program; iota when not given). A
sharding names a mesh and, per dimension, the axes (major to minor) that
split it; axes it does not name replicate the value. ``"x":(k)m`` is the
sub-axis of size ``m`` of ``x`` whose coordinate is ``(x // k) % m``.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import numpy as np

from .errors import ExecutionError, InterpreterError
from .mlir_text import split_top


class ShardingError(InterpreterError):
    """A sharding this interpreter cannot apply (named in the message)."""


# ----------------------------------------------------------------------
# Meshes and shardings


class Mesh:
    """An sdy mesh: ``axes`` as ``[(name, size)]`` and the device id at each
    position of the row-major mesh."""

    def __init__(self, axes: Any, device_ids: Any = None, name: str | None = None) -> None:
        self.name = name
        self.axes = [(str(n), int(s)) for n, s in axes]
        self.sizes = {n: s for n, s in self.axes}
        size = 1
        for _, s in self.axes:
            size *= s
        if device_ids is None:
            device_ids = list(range(size))
        self.device_ids = [int(d) for d in device_ids]
        if not self.axes:
            # A maximal mesh (`<[], device_ids=[k]>`): one device holds the value.
            if len(self.device_ids) != 1:
                raise ShardingError(f"mesh {self} without axes must name one device")
        elif len(self.device_ids) != size:
            raise ShardingError(f"mesh {self}: {len(self.device_ids)} device ids for "
                                f"{size} positions")
        if len(set(self.device_ids)) != len(self.device_ids):
            raise ShardingError(f"mesh {self} repeats a device id")
        self._coords = {}
        for pos, dev in enumerate(self.device_ids):
            c = {}
            for n, s in reversed(self.axes):
                c[n] = pos % s
                pos //= s
            self._coords[dev] = c

    @property
    def num_devices(self) -> int:
        return len(self.device_ids)

    @property
    def maximal(self) -> bool:
        return not self.axes

    def coords(self, device: int) -> dict[str, int]:
        """``{axis: coordinate}`` of logical device ``device`` in this mesh."""
        try:
            return self._coords[device]
        except KeyError:
            raise ShardingError(f"device {device} is not in mesh {self}") from None

    def __repr__(self):
        axes = ", ".join(f'"{n}"={s}' for n, s in self.axes)
        ids = "" if self.device_ids == list(range(len(self.device_ids))) else \
            f", device_ids={self.device_ids}"
        return f"{'@' + self.name if self.name else 'mesh'}<[{axes}]{ids}>"


class AxisRef:
    """An axis or a sub-axis ``"x":(pre)size`` of a mesh."""

    __slots__ = ("name", "pre", "size")

    def __init__(self, name, pre=1, size=None):
        self.name = name
        self.pre = pre
        self.size = size

    def resolve(self, mesh):
        if self.name not in mesh.sizes:
            raise ShardingError(f"axis \"{self.name}\" is not in mesh {mesh}")
        full = mesh.sizes[self.name]
        if self.size is None:
            self.size = full // self.pre
        if self.pre * self.size > full or full % (self.pre * self.size):
            raise ShardingError(f"sub-axis \"{self.name}\":({self.pre}){self.size} does "
                                f"not fit axis size {full}")
        return self

    def coord(self, coords):
        return (coords[self.name] // self.pre) % self.size

    def __repr__(self):
        if self.pre == 1 and self.size is None:
            return f'"{self.name}"'
        return f'"{self.name}":({self.pre}){self.size}'


class Sharding:
    """How devices of ``mesh`` hold a value: ``dims[d]`` lists the axes that
    split dimension ``d`` (major first)."""

    def __init__(self, mesh: Mesh, dims: Any, replicated: Any = (), unreduced: Any = (),
                 text: str | None = None) -> None:
        self.mesh = mesh
        self.dims = [[a.resolve(mesh) for a in axes] for axes in dims]
        self.replicated = list(replicated)
        self.unreduced = [a.resolve(mesh) for a in unreduced]
        self.text = text

    @classmethod
    def replicated_on(cls, mesh: Mesh, ndim: int) -> Sharding:
        return cls(mesh, [[] for _ in range(ndim)])

    def __repr__(self):
        return self.text or f"<{self.mesh!r}, {self.dims}>"

    @property
    def is_replicated(self) -> bool:
        return self.mesh.maximal or not any(self.dims)

    def check(self, shape: tuple[int, ...], what: str) -> None:
        """Raise unless this sharding applies to values of ``shape``."""
        if self.unreduced:
            raise ShardingError(
                f"{what}: sharding {self} has unreduced axes "
                f"{self.unreduced}; partial (unreduced) values are not supported "
                "by stablehlo_ref")
        if self.mesh.maximal:
            return
        if len(self.dims) != len(shape):
            raise ShardingError(f"{what}: sharding {self} has {len(self.dims)} "
                                f"dimension(s), the value has shape {list(shape)}")
        for d, (n, count) in enumerate(zip(shape, self.counts())):
            if n % count:
                raise ShardingError(
                    f"{what}: dimension {d} of size {n} is not divisible into "
                    f"{count} shards ({self}); uneven shardings are not supported "
                    "by stablehlo_ref")

    def counts(self, axes_filter: Any = None) -> list[int]:
        """Number of shards along each dimension."""
        out = []
        for axes in self.dims:
            c = 1
            for a in axes:
                if axes_filter is None or a.name in axes_filter:
                    c *= a.size
            out.append(c)
        return out

    def shard_index(self, device: int, axes_filter: Any = None) -> list[int]:
        """The tile coordinates of ``device``: its shard index per dimension."""
        coords = self.mesh.coords(device)
        idx = []
        for axes in self.dims:
            i = 0
            for a in axes:
                if axes_filter is None or a.name in axes_filter:
                    i = i * a.size + a.coord(coords)
            idx.append(i)
        return idx

    def shard_shape(self, shape: tuple[int, ...], axes_filter: Any = None) -> tuple[int, ...]:
        if self.mesh.maximal:
            return tuple(shape)
        return tuple(n // c for n, c in zip(shape, self.counts(axes_filter)))

    def slices(self, shape: tuple[int, ...], device: int,
               axes_filter: Any = None) -> tuple[slice, ...]:
        if self.mesh.maximal:
            return tuple(slice(None) for _ in shape)
        counts = self.counts(axes_filter)
        idx = self.shard_index(device, axes_filter)
        out = []
        for n, c, i in zip(shape, counts, idx):
            step = n // c
            out.append(slice(i * step, (i + 1) * step))
        return tuple(out)

    def split(self, value: Any, devices: Any, axes_filter: Any = None) -> list[Any]:
        """The shard of ``value`` each device of ``devices`` holds."""
        value = np.asarray(value)
        if self.is_replicated and axes_filter is None:
            return [value for _ in devices]
        return [value[self.slices(value.shape, d, axes_filter)] for d in devices]

    def assemble(self, shards: Any, devices: Any, shape: tuple[int, ...], dtype: Any,
                 axes_filter: Any = None) -> Any:
        """The global value from ``shards[i]`` held by ``devices[i]`` (one
        device per distinct shard is read: replicas are assumed equal)."""
        if self.mesh.maximal:
            return np.asarray(shards[0])
        out = np.empty(shape, dtype=dtype)
        seen = set()
        want = self.shard_shape(shape, axes_filter)
        for dev, shard in zip(devices, shards):
            key = tuple(self.shard_index(dev, axes_filter))
            if key in seen:
                continue
            seen.add(key)
            shard = np.asarray(shard)
            if shard.shape != want:
                raise ShardingError(f"the shard of device {dev} has shape "
                                    f"{list(shard.shape)}, sharding {self} of a "
                                    f"{list(shape)} value needs {list(want)}")
            out[self.slices(shape, dev, axes_filter)] = shard
        total = 1
        for c in self.counts(axes_filter):
            total *= c
        if len(seen) != total:
            raise ShardingError(f"devices {list(devices)} hold {len(seen)} of the "
                                f"{total} shards of sharding {self}")
        return out




# ----------------------------------------------------------------------
# Parsing the textual attributes


_AXIS_RE = re.compile(r'"((?:[^"\\]|\\.)*)"(?::\((\d+)\)(\d+))?')


def _split_top(text, sep=","):
    """Top-level parts of a sharding string, without empty ones."""
    return [p for p in split_top(text, sep) if p]


def attribute_text(attr: Any) -> str:
    """The text of a decoded string attribute (without its quotes)."""
    s = str(attr).strip()
    if len(s) >= 2 and s[0] == s[-1] == "'":
        s = s[1:-1]
    return s


def parse_mesh(text, name=None):
    """``#sdy.mesh<["x"=2, "y"=2], device_ids=[...]>`` or ``mesh<...>`` / ``<...>``."""
    s = attribute_text(text)
    for prefix in ("#sdy.mesh", "mesh"):
        if s.startswith(prefix):
            s = s[len(prefix):]
            break
    s = s.strip()
    if not (s.startswith("<") and s.endswith(">")):
        raise ShardingError(f"cannot parse mesh {text!r}")
    body = s[1:-1].strip()
    parts = _split_top(body)
    if not parts or not parts[0].startswith("["):
        raise ShardingError(f"cannot parse mesh {text!r}")
    axes = [(m.group(1), int(v)) for m, v in
            ((_AXIS_RE.match(p.strip()), p.split("=")[-1]) for p in
             _split_top(parts[0][1:-1])) if m]
    device_ids = None
    for p in parts[1:]:
        if p.startswith("device_ids"):
            ids = p.split("=", 1)[1].strip()
            device_ids = [int(x) for x in ids.strip("[]").split(",") if x.strip()]
        else:
            raise ShardingError(f"mesh {text!r}: unsupported part {p!r}")
    return Mesh(axes, device_ids, name)


def _parse_axes(text):
    """``{"x", "y":(1)2, ?}`` -> ([AxisRef], open)."""
    s = text.strip()
    # priorities (`}p1`) carry no meaning for the values
    s = re.sub(r"\}p\d+$", "}", s)
    if not (s.startswith("{") and s.endswith("}")):
        raise ShardingError(f"cannot parse dimension sharding {text!r}")
    refs = []
    for p in _split_top(s[1:-1]):
        if p == "?":
            continue
        m = _AXIS_RE.fullmatch(p)
        if not m:
            raise ShardingError(f"cannot parse axis {p!r} in {text!r}")
        if m.group(2):
            refs.append(AxisRef(m.group(1), int(m.group(2)), int(m.group(3))))
        else:
            refs.append(AxisRef(m.group(1)))
    return refs


def _attribute_body(text, prefix, open_, close, what):
    """The text between ``open_`` and ``close`` of ``prefix<...>`` (the prefix
    is optional: per-value lists hold bare ``<...>``)."""
    s = attribute_text(text)
    if s.startswith(prefix):
        s = s[len(prefix):]
    s = s.strip()
    if not (s.startswith(open_) and s.endswith(close)):
        raise ShardingError(f"cannot parse {what} {text!r}")
    return s[len(open_):-len(close)]


def parse_sharding(text: str, meshes: dict[str, Mesh]) -> Sharding:
    """``#sdy.sharding<@mesh, [{"x"}, {}], replicated={"y"}>`` (or the bare
    ``<@mesh, ...>`` of a per-value list) -> :class:`Sharding`."""
    body = _attribute_body(text, "#sdy.sharding", "<", ">", "sharding")
    s = f"<{body}>"  # how the sharding is shown in messages and kept in .text
    parts = _split_top(body)
    if len(parts) < 2:
        raise ShardingError(f"cannot parse sharding {text!r}")
    mref = parts[0]
    if mref.startswith("@"):
        mname = mref[1:].strip('"')
        mesh = meshes.get(mname)
        if mesh is None:
            raise ShardingError(f"sharding {s} names mesh @{mname}, which the module "
                                f"does not define (has: {sorted(meshes)})")
    else:
        mesh = parse_mesh(mref)
    dims_text = parts[1]
    if not (dims_text.startswith("[") and dims_text.endswith("]")):
        raise ShardingError(f"cannot parse sharding {text!r}")
    dims = [_parse_axes(d) for d in _split_top(dims_text[1:-1])]
    replicated, unreduced = [], []
    for p in parts[2:]:
        key, _, val = p.partition("=")
        key = key.strip()
        if key == "replicated":
            replicated = _parse_axes(val)
        elif key == "unreduced":
            unreduced = _parse_axes(val)
        else:
            raise ShardingError(f"sharding {s}: unsupported part {p!r}")
    return Sharding(mesh, dims, [a.name for a in replicated], unreduced, text=s)


_GSPMD_TILED = re.compile(
    r"^\{devices=\[([\d,]+)\]\s*(.*?)\s*(last_tile_dim_replicate)?\s*\}$")
_GSPMD_IOTA = re.compile(r"^<=\[([\d,]+)\](?:T\(([\d,]+)\))?$")


def parse_gspmd_sharding(text: str, num_devices: int) -> Sharding | None:
    """A GSPMD ``mhlo.sharding`` string (what programs converted from XLA HLO
    carry: PyTorch/XLA's SPMD) as a :class:`Sharding`, or None if replicated.

    ``{devices=[t0,...,tn-1(,r)]ids (last_tile_dim_replicate)}``: tile
    ``(i0..in-1)`` of dimension-wise tiling ``t`` is held by the device at that
    position of the tile-assignment array (``ids`` listed, or ``<=[dims]T(perm)``:
    an iota reshaped and transposed).  Built as a mesh with one axis per tile
    dimension (``_gspmd<d>``, and ``_gspmd_rep`` for the replicated last one)
    whose device ids are the tile assignment in row-major order: the device at
    mesh position ``i`` then holds tile ``i`` along each sharded dimension.
    ``{replicated}`` / ``{maximal device=k}`` (a value every device can
    compute on the global view) are replicated.
    """
    t = text.strip()
    if t in ("{replicated}", "{manual}") or t.startswith("{maximal"):
        return None if t != "{manual}" else _raise_manual(text)
    m = _GSPMD_TILED.match(t)
    if not m:
        raise ShardingError(f"mhlo.sharding {text!r}: not a GSPMD sharding stablehlo_ref "
                            "understands (replicated, maximal or devices=[...])")
    dims = [int(x) for x in m.group(1).split(",")]
    ids_text, rep = m.group(2).strip(), m.group(3) is not None
    total = int(np.prod(dims))
    iota = _GSPMD_IOTA.match(ids_text)
    if iota:
        shape = [int(x) for x in iota.group(1).split(",")]
        ids = np.arange(int(np.prod(shape))).reshape(shape)
        if iota.group(2):
            ids = ids.transpose([int(x) for x in iota.group(2).split(",")])
        ids = ids.ravel().tolist()
    else:
        try:
            ids = [int(x) for x in ids_text.split(",")] if ids_text else list(range(total))
        except ValueError:
            raise ShardingError(f"mhlo.sharding {text!r}: cannot read the device list") from None
    if len(ids) != total or total != num_devices:
        raise ShardingError(f"mhlo.sharding {text!r}: {len(ids)} devices in a tiling of "
                            f"{total}, the program has {num_devices} partitions")
    tiled = dims[:-1] if rep else dims
    axes = [(f"_gspmd{d}", n) for d, n in enumerate(tiled)]
    if rep:
        axes.append(("_gspmd_rep", dims[-1]))
    mesh = Mesh(axes, ids)
    return Sharding(mesh, [[AxisRef(f"_gspmd{d}")] if n > 1 else [] for d, n in enumerate(tiled)],
                    text=text)


def _raise_manual(text):
    raise ShardingError(f"mhlo.sharding {text!r}: manual sharding needs XLA's SPMD partitioner")


def parse_sharding_per_value(text: str, meshes: dict[str, Mesh]) -> list[Sharding]:
    body = _attribute_body(text, "#sdy.sharding_per_value", "<[", "]>", "per-value shardings")
    return [parse_sharding(p, meshes) for p in _split_top(body)]


def parse_manual_axes(text):
    s = attribute_text(text)
    m = re.search(r"manual_axes\s*(\{.*\})", s)
    if not m:
        raise ShardingError(f"cannot parse manual axes {text!r}")
    return [a.name for a in _parse_axes(m.group(1))]


def module_meshes(mlir_module: Any) -> dict[str, Mesh]:
    """``{name: Mesh}`` of the module's ``sdy.mesh`` ops (MLIR lock held)."""
    from . import attrs as _attrs
    meshes = {}
    for op in mlir_module.body.operations:
        o = op.operation
        if o.name != "sdy.mesh":
            continue
        name = attribute_text(_attrs.decode_attribute(o, "sym_name"))
        meshes[name] = parse_mesh(_attrs.decode_attribute(o, "mesh"), name)
    return meshes


def compiler_meshes(compiler):
    """Meshes of the module a ``_Compiler`` is compiling, parsed once."""
    meshes = getattr(compiler, "_sdy_meshes", None)
    if meshes is None:
        meshes = compiler._sdy_meshes = module_meshes(compiler.module.mlir)
    return meshes


# ----------------------------------------------------------------------
# shard_map: sdy.manual_computation on a process grid


class ManualComputation:
    """Compile-time view of one ``sdy.manual_computation``."""

    def __init__(self, op):
        meshes = compiler_meshes(op.module)
        self.where = op.where()
        self.in_shardings = parse_sharding_per_value(op.attrs["in_shardings"], meshes)
        self.out_shardings = parse_sharding_per_value(op.attrs["out_shardings"], meshes)
        self.manual_axes = set(parse_manual_axes(op.attrs["manual_axes"]))
        all_shardings = self.in_shardings + self.out_shardings
        mesh = all_shardings[0].mesh if all_shardings else None
        for sh in all_shardings:
            if sh.mesh.axes != mesh.axes or sh.mesh.device_ids != mesh.device_ids:
                raise ShardingError(f"{self.where}: shardings on different meshes "
                                    f"({mesh} and {sh.mesh})")
        self.mesh = mesh
        self.num_devices = 1 if mesh is None else mesh.num_devices
        if len(self.in_shardings) != len(op.operand_types) or \
                len(self.out_shardings) != len(op.result_types):
            raise ShardingError(f"{self.where}: in/out shardings do not match the "
                                "operands/results")
        for sh in all_shardings:
            if sh.unreduced:
                raise ShardingError(f"{self.where}: unreduced axes in {sh} are not "
                                    "supported")
        if mesh is not None and sorted(mesh.device_ids) != list(range(self.num_devices)):
            raise ShardingError(f"{self.where}: mesh {mesh} does not number its devices "
                                f"0..{self.num_devices - 1}; not supported")
        self.in_types = list(op.operand_types)
        self.out_types = list(op.result_types)
        self.num_results = op.num_results

    def run(self, ctx, region, operands):
        if self.num_devices == 1:
            return region(*operands)
        if ctx.grid is not None and getattr(ctx.grid, "num_processes", 1) > 1:
            if getattr(ctx.grid, "sdy_mesh", None) is None:
                raise ExecutionError(
                    f"{self.where}: a manual computation inside a multi-process run "
                    "(shard_map in a pmap or MPMD program) is not supported by "
                    "stablehlo_ref")
            return self._run_nested(ctx, region, operands)
        from .compiler import Context
        from .parallel import ProcessGrid, _raise_first
        devices = list(range(self.num_devices))
        manual = self.manual_axes
        local_args = []
        for value, sh in zip(operands, self.in_shardings):
            if getattr(value, "shape", None) is None:
                local_args.append([value] * len(devices))
            else:
                sh.check(value.shape, f"{self.where} operand")
                local_args.append(sh.split(value, devices, axes_filter=manual))
        grid = ProcessGrid(1, self.num_devices)
        grid.sdy_mesh = self.mesh  # marks a grid of manual computations
        procs = grid.process_ids
        results = [None] * len(procs)
        errors = [None] * len(procs)
        block, captures = region.block, region.captures

        def body(i):
            proc = procs[i]
            try:
                sub = Context(ctx.program, tracer=None, process=proc, grid=grid)
                results[i] = block.run(sub, captures, [a[i] for a in local_args])
            except BaseException as e:  # noqa: BLE001 - reported below
                errors[i] = e
                grid.abort(proc, e)
            finally:
                grid.finished(proc)

        threads = [threading.Thread(target=body, args=(i,), daemon=True,
                                    name=f"stablehlo-manual-{i}")
                   for i in range(len(procs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        _raise_first(grid, procs, errors)
        outs = []
        for j, (sh, t) in enumerate(zip(self.out_shardings, self.out_types)):
            shards = [results[i][j] for i in range(len(procs))]
            shape = getattr(t, "shape", None)
            if shape is None:
                outs.append(shards[0])
                continue
            outs.append(sh.assemble(shards, devices, tuple(shape), t.dtype,
                                    axes_filter=manual))
        return outs

    def _run_nested(self, ctx, region, operands):
        """A manual computation inside the body of another (e.g. axis_index in
        a shard_map over some of the mesh axes): this process is already one
        device of the mesh; cut its operands over the newly manual axes, run
        the body here, and gather the results from the devices that differ
        only in those axes."""
        outer = ctx.grid.sdy_mesh
        mesh = self.mesh
        if mesh.axes != outer.axes or mesh.device_ids != outer.device_ids:
            raise ExecutionError(f"{self.where}: nested manual computation on mesh "
                                 f"{mesh}, the enclosing one runs on {outer}")
        manual = self.manual_axes
        device = ctx.process[1]
        local = []
        for value, sh in zip(operands, self.in_shardings):
            if getattr(value, "shape", None) is None:
                local.append(value)
            else:
                sh.check(value.shape, f"{self.where} operand")
                local.append(value[sh.slices(value.shape, device, manual)])
        res = region(*local)
        mine = mesh.coords(device)
        group = tuple(sorted(
            (0, d) for d in mesh.device_ids
            if all(c == mine[a] for a, c in mesh.coords(d).items() if a not in manual)))
        need = [j for j, sh in enumerate(self.out_shardings)
                if any(a.name in manual for axes in sh.dims for a in axes)]
        if not need:
            return list(res)
        got = ctx.grid.rendezvous(ctx.process, group, ("sdy.manual_computation", id(self)),
                                  [res[j] for j in need], what="sdy.manual_computation")
        members = [p for p in group]
        outs = list(res)
        for k, j in enumerate(need):
            t = self.out_types[j]
            outs[j] = self.out_shardings[j].assemble(
                [got[p][k] for p in members], [p[1] for p in members],
                tuple(t.shape), t.dtype, axes_filter=manual)
        return outs
