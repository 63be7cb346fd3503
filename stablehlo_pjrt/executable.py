"""Compilation and the serialized executable.

PJRT_Client_Compile receives the program (format "mlir": MLIR bytecode or a
StableHLO portable artifact serialized for the version we advertise) and a
serialized CompileOptionsProto.  All parsing and planning happens here, once;
the per-executable metadata jaxlib asks for (output types, dimensions, memory
kinds, fingerprint, device assignment) is computed once and cached, so
Execute (execute.py) only looks up the argument arrays, runs the plan and
wraps results.
"""

from __future__ import annotations

import hashlib
import re
import struct

import numpy as np

from . import compat, donation
from ._capi import BufferType, ErrorCode, PJRT_Program, read_bytes, read_sized, read_str
from .buffer import dtype_of, type_of_dtype, type_of_element
from .error import PjrtError, invalid_argument, unimplemented
from .handles import CString, int64_array, pointer_array, register
from .hlo_program import HLO_FORMATS, hlo_to_stablehlo
from .protowire import fields, read_varint

SERIALIZED_MAGIC = b"STABLEHLO_REF_EXECUTABLE\x00v1\x00"
# The serialized form (PJRT_Executable_Serialize) is an envelope checked in
# full before any byte of it reaches MLIR or protobuf (parse_serialized):
#   ENVELOPE_MAGIC, u32 version, u64 sizes of format/options/code,
#   sha256 of the three payloads, then the payloads.
# A truncated, bit-flipped or foreign blob is an INVALID_ARGUMENT naming what
# is wrong, never a crash inside a parser.
ENVELOPE_MAGIC = b"STABLEHLO_REF_EXECUTABLE\x00"
ENVELOPE_VERSION = 2
_ENVELOPE_HEADER = struct.Struct("<IQQQ32s")

# ----------------------------------------------------------------------------
# DeviceAssignmentProto
# ----------------------------------------------------------------------------


def encode_device_assignment(assignment: list[list[int]]) -> bytes:
    """The serialized DeviceAssignmentProto of ``assignment[replica][partition]``
    (jaxlib's xla_client.DeviceAssignment writes it)."""
    xla_client = compat.jax_internal("lib", "xla_client")
    replicas = len(assignment)
    partitions = len(assignment[0]) if replicas else 0
    ids = np.array(assignment, dtype=np.int64).reshape(replicas, partitions)
    return xla_client.DeviceAssignment.create(ids).serialize()


def decode_device_assignment(data: bytes) -> list[list[int]]:
    """``assignment[replica][partition]`` of a serialized DeviceAssignmentProto
    {replica_count=1, computation_count=2, computation_devices=3
    {replica_device_ids=1}}.

    Hand-written on purpose: jaxlib's DeviceAssignment can write the proto
    but only reports its counts back (no device ids), and jaxlib ships no
    Python protobuf classes (google.protobuf is not a dependency)."""
    replicas = partitions = 0
    columns: list[list[int]] = []
    for field, wire, value in fields(data, "DeviceAssignmentProto"):
        if field == 1 and wire == 0:
            replicas = value
        elif field == 2 and wire == 0:
            partitions = value
        elif field == 3 and wire == 2:
            ids: list[int] = []
            for ifield, iwire, ivalue in fields(value, "DeviceAssignmentProto"):
                if ifield != 1:
                    raise invalid_argument("unexpected field in ComputationDevice")
                if iwire == 2:  # packed
                    ipos = 0
                    while ipos < len(ivalue):
                        v, ipos = read_varint(ivalue, ipos, "DeviceAssignmentProto")
                        ids.append(v)
                elif iwire == 0:  # unpacked
                    ids.append(ivalue)
                else:
                    raise invalid_argument("unexpected field in ComputationDevice")
            columns.append(ids)
    if len(columns) != partitions or any(len(c) != replicas for c in columns):
        raise invalid_argument(
            f"DeviceAssignmentProto is inconsistent: {replicas}x{partitions} "
            f"with columns {columns}")
    return [[columns[p][r] for p in range(partitions)] for r in range(replicas)]


class CompileOptions:
    """What the plugin needs from a serialized CompileOptionsProto."""

    def __init__(self, serialized: bytes):
        self.serialized = serialized
        self.num_replicas = 1
        self.num_partitions = 1
        self.device_assignment: list[list[int]] | None = None
        self.use_spmd_partitioning = False
        if serialized:
            try:
                xla_client = compat.jax_internal("lib", "xla_client")
            except Exception as e:  # pragma: no cover - jaxlib is a dependency
                raise unimplemented(
                    f"cannot read CompileOptionsProto without jaxlib: {e}") from None
            from .hlo_program import check_wire_format
            check_wire_format(serialized, "CompileOptionsProto")
            try:
                opts = xla_client.CompileOptions.ParseFromString(serialized)
            except Exception as e:
                raise invalid_argument(f"cannot parse compile options: {e}") from None
            # XLA applies each override to its DebugOptions, whose fields are
            # all named xla_*; any other key is an error there (XLA's text).
            # The interpreter has no XLA passes: xla_* options are accepted
            # and ignored (their names and value types are not checked: the
            # DebugOptions schema is not available to Python).
            for key, _ in sorted(opts.env_option_overrides):
                if not key.startswith("xla_"):
                    raise invalid_argument(f"No such compile option: '{key}'")
            build = opts.executable_build_options
            self.num_replicas = max(1, int(build.num_replicas))
            self.num_partitions = max(1, int(build.num_partitions))
            self.use_spmd_partitioning = bool(build.use_spmd_partitioning)
            if build.device_assignment is not None:
                self.device_assignment = decode_device_assignment(
                    build.device_assignment.serialize())


# ----------------------------------------------------------------------------
# Executables
# ----------------------------------------------------------------------------


class ExecutableMeta:
    """Everything about a compiled program that does not depend on devices."""

    def __init__(self, program, code: bytes, code_format: str,
                 options: CompileOptions, name: str | None = None, spmd=None):
        self.program = program
        # An SPMD program (sharded jit): the global program with its argument
        # and result shardings (spmd.SpmdPlan).
        self.spmd = spmd
        # Parameter -> output aliasing (tf.aliasing_output) and the host
        # callback table; set by compile_program.
        self.aliased_params: dict[int, int] = {}
        self.host_callbacks = None
        self._shardings_c = {}
        self._optimized = None
        self.code = code
        self.format = code_format
        self.options = options
        self.num_replicas = max(options.num_replicas, int(getattr(program, "num_replicas", 1)))
        self.num_partitions = max(options.num_partitions, int(getattr(program, "num_partitions", 1)))
        self._name = name
        self._name_c = None
        self.input_types = list(program.input_types)
        self.output_types = list(program.output_types)
        self.output_buffer_types: list[int] = []
        self.output_shapes: list[tuple[int, ...]] = []
        for i, t in enumerate(self.output_types):
            bt, shape = _describe_output(t, i)
            self.output_buffer_types.append(bt)
            if spmd is not None and bt != BufferType.TOKEN:
                # Like XLA's partitioned executables: per-device shapes.
                shape = tuple(spmd.out_shard_shapes[i])
            self.output_shapes.append(shape)
        self.num_outputs = len(self.output_types)
        self.output_dtypes = [None if bt == BufferType.TOKEN else dtype_of(bt)
                              for bt in self.output_buffer_types]
        # C arrays handed out by the metadata queries, built once.
        self._types_c = (np.array(self.output_buffer_types or [0], dtype=np.int32), None)
        dims = [d for s in self.output_shapes for d in s]
        self._dims_c = int64_array(dims)
        self._dim_sizes_c = (np.array([len(s) for s in self.output_shapes] or [0],
                                      dtype=np.uint64),)
        # Memory kinds of parameters and results: the entry function's
        # `mhlo.memory_kind` attributes (JAX sets them for memory_kind
        # shardings, e.g. "pinned_host"); "device" otherwise.
        entry = program.function(spmd.func if spmd is not None else None)
        self.param_memory_kinds = _memory_kinds(entry.arg_attrs, len(self.input_types))
        self.output_memory_kinds = _memory_kinds(entry.result_attrs, self.num_outputs)
        self._kinds_c = {}
        for which, kinds in (("in", self.param_memory_kinds), ("out", self.output_memory_kinds)):
            strings = [CString(k) for k in (kinds or ["device"])]
            self._kinds_c[which] = (strings, pointer_array(k.address for k in strings),
                                    np.array([k.size for k in strings], dtype=np.uint64))
        h = hashlib.sha256()
        h.update(SERIALIZED_MAGIC)
        h.update(code)
        h.update(options.serialized)
        self.fingerprint = h.hexdigest()
        self.fingerprint_c = CString(self.fingerprint)

    @property
    def name(self) -> str:
        if self._name is None:
            match = None
            try:
                text = self.program.text or ""
                match = re.search(r"module\s+@\"?([\w.$-]+)", text[:4000])
            except Exception:
                pass
            self._name = match.group(1) if match else "main"
        return self._name

    def name_c(self) -> CString:
        if self._name_c is None:
            self._name_c = CString(self.name)
        return self._name_c

    def output_types_address(self) -> int:
        return self._types_c[0].ctypes.data

    def output_dims_addresses(self) -> tuple[int, int]:
        return self._dims_c[1], self._dim_sizes_c[0].ctypes.data

    def memory_kinds_addresses(self, which: str = "out") -> tuple[int, int]:
        _, ptrs, sizes = self._kinds_c[which]
        return ptrs[1], sizes.ctypes.data

    def shardings_addresses(self, which: str) -> tuple[int, int, int]:
        """(count, shardings, sharding_sizes) for the PJRT shardings
        extension: serialized xla.OpSharding protos of the parameters
        (``which="in"``) or outputs (``"out"``); (n, 0, 0) when the program
        is not partitioned (no shardings to report)."""
        count = len(self.input_types) if which == "in" else self.num_outputs
        if self.spmd is None:
            return count, 0, 0
        cached = self._shardings_c.get(which)
        if cached is None:
            # (An empty result tuple still has one sharding: op_shardings.)
            protos = [CString(b) for b in self.spmd.op_shardings(which)]
            ptrs = pointer_array(c.address for c in protos)
            sizes = np.array([c.size for c in protos] or [0], dtype=np.uint64)
            cached = self._shardings_c[which] = (protos, ptrs, sizes)
        protos, ptrs, sizes = cached
        return len(protos), ptrs[1], sizes.ctypes.data

    def optimized_code(self) -> bytes:
        """What PJRT_Executable_OptimizedProgram returns: the program, with
        the result shardings an SPMD plan chose written into it."""
        return self.code if self.spmd is None else self.spmd.optimized_program(self.code)

    def optimized_program(self) -> tuple[CString, bytes]:
        """(format, code) for PJRT_Executable_OptimizedProgram: the program
        (the interpreter runs it unoptimized) as XLA HLO with its module
        config ("hlo_with_config"), converted once with jaxlib's StableHLO ->
        HLO converter; the StableHLO itself ("mlir") if that fails. jaxlib
        asks for it three times per compile (layouts, cost analysis) and
        converts an "mlir" program to HLO on every request, milliseconds each.
        A GSPMD program (PyTorch/XLA) stays StableHLO: :meth:`optimized_code`
        writes its result shardings into it, which XLA's C API client reads
        back."""
        cached = self._optimized
        if cached is None:
            fmt, code = self.format, self.optimized_code()
            try:
                if self.spmd is not None and self.spmd.gspmd:
                    raise NotImplementedError
                xla_client = compat.jax_internal("lib", "xla_client")

                from .hlo_program import with_config
                computation = xla_client._xla.mlir.mlir_module_to_xla_computation(
                    code, use_tuple_args=False, return_tuple=False)
                hlo = with_config(computation.as_serialized_hlo_module_proto(),
                                  self.num_replicas, self.num_partitions)
                if hlo is not None:
                    fmt, code = "hlo_with_config", hlo
            except Exception:  # noqa: BLE001 - jaxlib converts the StableHLO itself then
                pass
            cached = self._optimized = (CString(fmt), code)
        return cached

    def serialize(self) -> bytes:
        fmt = self.format.encode()
        payload = fmt + self.options.serialized + self.code
        return (ENVELOPE_MAGIC
                + _ENVELOPE_HEADER.pack(ENVELOPE_VERSION, len(fmt), len(self.options.serialized),
                                        len(self.code), hashlib.sha256(payload).digest())
                + payload)

    def argument_bytes(self) -> int:
        return sum(_nbytes(t) for t in self.input_types)

    def output_bytes(self) -> int:
        return sum(_nbytes(t) for t in self.output_types)


def _check_layout_modes(program) -> None:
    """Buffers are row-major numpy arrays and executables report the default
    layout: a program that asks for another one (``mhlo.layout_mode``, from
    ``jax.experimental.layout.Layout(major_to_minor=...)`` other than the
    row-major order) is refused here, with the reason, rather than compiled
    with a layout JAX would then find overridden ("Unexpected XLA layout
    override")."""
    entry = program.function()
    for what, attrs_list, types in (("argument", entry.arg_attrs, entry.input_types),
                                    ("result", entry.result_attrs, entry.output_types)):
        for i, attrs in enumerate(attrs_list or ()):
            mode = attrs.get("mhlo.layout_mode") if isinstance(attrs, dict) else None
            if mode is None:
                continue
            mode = str(mode).strip('"')
            rank = len(getattr(types[i], "shape", ()) or ()) if i < len(types) else 0
            row_major = "{" + ",".join(str(d) for d in range(rank - 1, -1, -1)) + "}"
            if mode in ("default", "auto", row_major):
                continue
            m2m = mode
            if mode.startswith("{") and mode.endswith("}") and ":" not in mode:
                try:
                    dims = [int(d) for d in mode[1:-1].split(",") if d.strip()]
                    m2m = f"Layout(major_to_minor={tuple(reversed(dims))})"
                except ValueError:
                    pass
            raise unimplemented(
                f"{what} {i} of @{entry.name} asks for the layout {mode} ({m2m}); "
                "stablehlo_ref keeps arrays in row-major order (major_to_minor="
                f"{tuple(range(rank))}) and supports only that layout and Layout.AUTO")


def _memory_kinds(attr_list, n) -> list[str]:
    kinds = []
    for i in range(n):
        attrs = attr_list[i] if attr_list and i < len(attr_list) else {}
        kind = attrs.get("mhlo.memory_kind") if isinstance(attrs, dict) else None
        kinds.append(str(kind) if kind else "device")
    return kinds


def _nbytes(t) -> int:
    shape = getattr(t, "shape", None)
    dtype = getattr(t, "dtype", None)
    if shape is None or dtype is None or any(d is None for d in shape):
        return 0
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _describe_output(t, index: int) -> tuple[int, tuple[int, ...]]:
    kind = type(t).__name__
    if kind == "TokenType":
        return BufferType.TOKEN, ()
    if kind == "TensorType":
        if any(d is None for d in t.shape):
            raise unimplemented(
                f"output #{index} has a dynamic shape {t!r}; stablehlo_ref needs "
                "static output shapes")
        try:
            bt = type_of_dtype(t.dtype)
        except PjrtError:
            bt = type_of_element(t.element_type)
        if getattr(t, "quant", None) is not None:
            raise unimplemented(f"output #{index} has quantized type {t!r}")
        return bt, tuple(int(d) for d in t.shape)
    raise unimplemented(
        f"output #{index} has type {t!r}; stablehlo_ref returns only tensors and tokens "
        "(tuples are not supported as results)")


def parse_serialized(data: bytes) -> tuple[str, bytes, bytes]:
    """Inverse of ExecutableMeta.serialize: (format, options, code), after
    checking the envelope: magic, version, sizes, checksum."""
    data = bytes(data)
    what = "serialized stablehlo_ref executable"
    if data.startswith(SERIALIZED_MAGIC):
        raise invalid_argument(f"this {what} has format version 1, which carried no "
                               "checksum and is no longer read; compile the program again")
    if not data.startswith(ENVELOPE_MAGIC):
        raise invalid_argument(f"not a {what} (the bytes do not start with "
                               f"{ENVELOPE_MAGIC!r})")
    pos = len(ENVELOPE_MAGIC)
    if len(data) < pos + _ENVELOPE_HEADER.size:
        raise invalid_argument(f"truncated {what}: {len(data)} bytes, the header alone "
                               f"needs {pos + _ENVELOPE_HEADER.size}")
    version, nf, no, nc, digest = _ENVELOPE_HEADER.unpack_from(data, pos)
    if version != ENVELOPE_VERSION:
        raise invalid_argument(f"{what} has format version {version}; this plugin reads "
                               f"version {ENVELOPE_VERSION}")
    pos += _ENVELOPE_HEADER.size
    if nf + no + nc != len(data) - pos or max(nf, no, nc) > len(data):
        raise invalid_argument(f"corrupt {what}: the header's sizes ({nf}+{no}+{nc}) do not "
                               f"match the {len(data) - pos} payload bytes")
    payload = data[pos:]
    if hashlib.sha256(payload).digest() != digest:
        raise invalid_argument(f"corrupt {what}: checksum mismatch (the bytes were changed "
                               "after serialization)")
    try:
        fmt = payload[:nf].decode("ascii")
    except UnicodeDecodeError:
        raise invalid_argument(f"corrupt {what}: the program format is not ASCII") from None
    return fmt, payload[nf:nf + no], payload[nf + no:]


def compile_args(program_ptr: int, options_ptr: int, options_size: int) -> ExecutableMeta:
    """Compiles the PJRT_Program and serialized CompileOptionsProto of a
    Compile call's args."""
    if not program_ptr:
        raise invalid_argument("program is NULL")
    program = read_sized(PJRT_Program, program_ptr)
    if program is None:
        raise invalid_argument("PJRT_Program.struct_size is smaller than its header")
    code = read_bytes(program.code, program.code_size)
    fmt = read_str(program.format, program.format_size)
    options = CompileOptions(read_bytes(options_ptr, options_size))
    return compile_program(code, fmt, options)


def compile_program(code: bytes, code_format: str, options: CompileOptions) -> ExecutableMeta:
    if code_format in HLO_FORMATS:
        # XLA HLO (PyTorch/XLA sends it): converted once to StableHLO, which is
        # what the executable keeps, serializes and reports as its program.
        code, code_format = hlo_to_stablehlo(code, code_format), "mlir"
    if code_format != "mlir":
        # INVALID_ARGUMENT, as XLA's plugins answer an unknown format.
        raise invalid_argument(
            f"program format {code_format!r} is not supported by stablehlo_ref "
            "(only 'mlir': StableHLO bytecode, portable artifact or text; and "
            "'hlo'/'hlo_with_config': XLA HloModuleProto, converted to StableHLO)")
    import stablehlo_interpreter as shi
    spmd = options.num_partitions > 1 and options.use_spmd_partitioning
    if spmd and options.num_replicas > 1:
        raise unimplemented(
            f"the program is SPMD-partitioned over {options.num_partitions} partitions "
            f"and has {options.num_replicas} replicas; stablehlo_ref runs sharded "
            "programs with one replica only (pmap of a sharded computation is not "
            "supported)")
    try:
        program = shi.compile(code)
    except shi.UnsupportedOpsError as e:
        raise PjrtError(ErrorCode.UNIMPLEMENTED,
                        f"stablehlo_ref cannot compile this program: {e}") from None
    except shi.LoadError as e:
        raise invalid_argument(f"stablehlo_ref could not load the program: {e}") from None
    except shi.InterpreterError as e:
        raise invalid_argument(f"stablehlo_ref could not compile the program: {e}") from None
    _check_layout_modes(program)
    from .callbacks import bind_program
    callbacks = bind_program(program)
    plan = None
    if spmd:
        from .spmd import ShardingError, SpmdPlan
        try:
            plan = SpmdPlan(program, options.num_partitions)
        except ShardingError as e:
            raise unimplemented(f"stablehlo_ref cannot run this sharded program: {e}") from None
    meta = ExecutableMeta(program, code, code_format, options, spmd=plan)
    meta.host_callbacks = callbacks  # keeps the callables alive with the executable
    meta.aliased_params = donation.aliased_parameters(meta)
    if plan is not None:
        plan.owned_outputs = frozenset(meta.aliased_params.values())
    return meta


class Executable:
    """PJRT_Executable: a compiled program not bound to devices.  Handles are
    cheap views of a shared ExecutableMeta (GetExecutable makes a new one per
    call, each destroyed separately by the caller)."""

    __slots__ = ("handle", "meta", "_compile_options_c")

    def __init__(self, meta: ExecutableMeta):
        self.meta = meta
        self._compile_options_c = None
        register(self)

    def __str__(self):
        return f"Executable({self.meta.name}, {self.handle:#x})"
