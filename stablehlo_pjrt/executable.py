"""Compilation and execution.

PJRT_Client_Compile receives the program (format "mlir": MLIR bytecode or a
StableHLO portable artifact serialized for the version we advertise) and a
serialized CompileOptionsProto.  All parsing and planning happens here, once;
the per-executable metadata jaxlib asks for (output types, dimensions, memory
kinds, fingerprint, device assignment) is computed once and cached, so
Execute only looks up the argument arrays, runs the plan and wraps results.
"""

from __future__ import annotations

import hashlib
import re
import struct
from time import perf_counter_ns

import numpy as np

from . import dispatch, donation, interrupt
from ._capi import BufferType, ErrorCode, PJRT_Program, read_bytes, read_sized, read_str
from .buffer import (
    Buffer,
    dtype_of,
    preview_value,
    short_type,
    type_of_dtype,
    type_of_element,
)
from .error import PjrtError, failed_precondition, invalid_argument, unimplemented
from .event import Completion
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
    from jax._src.lib import xla_client
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
                from jax._src.lib import xla_client
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
        self._fingerprint_c = CString(self.fingerprint)

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
        converts an "mlir" program to HLO on every request, ~4 ms each.
        A GSPMD program (PyTorch/XLA) stays StableHLO: :meth:`optimized_code`
        writes its result shardings into it, which XLA's C API client reads
        back."""
        cached = self._optimized
        if cached is None:
            fmt, code = self.format, self.optimized_code()
            try:
                if self.spmd is not None and self.spmd.gspmd:
                    raise NotImplementedError
                from jax._src.lib import xla_client

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


_shi = None


def _interpreter():
    """The interpreter package, imported once (Execute is a hot path)."""
    global _shi
    if _shi is None:
        import stablehlo_interpreter
        _shi = stablehlo_interpreter
    return _shi


def compile_args(program_ptr, options_ptr, options_size) -> ExecutableMeta:
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


class ExecuteContext:
    """PJRT_ExecuteContext: nothing is attached to one yet."""
    __slots__ = ("handle",)

    def __init__(self):
        register(self)


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


class Outputs(list):
    """Execute's per-device output lists; ``interrupted`` asks the caller to
    re-raise a KeyboardInterrupt once it has handed them over; ``completion``
    is set when the outputs are pending (the program runs on the worker)."""

    def __init__(self, items=(), interrupted=False, completion=None, queued=0):
        super().__init__(items)
        self.interrupted = interrupted
        self.completion = completion
        self.queued = queued


def _timeout_text(meta, limit, error) -> str:
    where = f" (stopped in {str(error).split(': ExecutionTimeout')[0]})" if error else ""
    return (f"stablehlo_ref execution of {meta.name} exceeded the time limit of {limit:g} s "
            f"set with stablehlo_pjrt.set_execute_timeout / STABLEHLO_REF_EXECUTE_TIMEOUT"
            f"{where}")


def _interrupted_text(meta) -> str:
    return f"stablehlo_ref execution of {meta.name} was interrupted (KeyboardInterrupt)"


_active_tracer = None


def _op_tracer_active() -> bool:
    """Whether an op tracer (stablehlo_interpreter.use_tracer, the oracle
    tools) is active now: the program then runs inline, inside its scope."""
    global _active_tracer
    if _active_tracer is None:
        _active_tracer = _interpreter().active_tracer
    return _active_tracer() is not None


class LoadedExecutable:
    """PJRT_LoadedExecutable: a compiled program bound to devices."""

    __slots__ = ("handle", "meta", "client", "devices", "logical_ids", "deleted",
                 "run_ns", "span", "_devices_c", "_logical_ids_c", "_assignment_bytes",
                 "_memories")

    def __init__(self, client, meta: ExecutableMeta):
        from ._capi import PJRT_LogicalDeviceIds
        self.client = client
        self.meta = meta
        self.deleted = False
        # A running average of the wall time of its runs: in auto mode,
        # cheap programs run inline (dispatch.run_inline); the first run is
        # inline. Averaged so that one slow run (a GC pause, the machine
        # busy) does not send a cheap program to the worker.
        self.run_ns = 0
        replicas, partitions = meta.num_replicas, meta.num_partitions
        assignment = meta.options.device_assignment
        if assignment is None:
            assignment = client.default_assignment(replicas, partitions)
        if len(assignment) != replicas or any(len(row) != partitions for row in assignment):
            raise invalid_argument(
                f"device assignment {assignment} does not match {replicas} replica(s) x "
                f"{partitions} partition(s)")
        self.devices = []
        self.logical_ids = []
        for r, row in enumerate(assignment):
            for p, device_id in enumerate(row):
                self.devices.append(client.device_by_id(device_id))
                self.logical_ids.append((r, p))
        self.span = None
        if not all(d.addressable for d in self.devices):
            # Devices of other processes: Execute takes the addressable ones'
            # arguments and exchanges the rest (distributed.py).
            from .distributed import Span
            self.span = Span(self.devices, meta)
            local = [i for i, d in enumerate(self.devices) if d.addressable]
            self.devices = [self.devices[i] for i in local]
            self.logical_ids = [self.logical_ids[i] for i in local]
        self._devices_c = pointer_array(d.handle for d in self.devices)
        ids = (PJRT_LogicalDeviceIds * len(self.logical_ids))()
        for i, (r, p) in enumerate(self.logical_ids):
            ids[i].replica = r
            ids[i].partition = p
        self._logical_ids_c = ids
        self._assignment_bytes = encode_device_assignment(assignment)
        self._memories = {}
        register(self)

    def __str__(self):
        return f"LoadedExecutable({self.meta.name}, {self.handle:#x})"

    def execute(self, argument_lists: list[list[Buffer]], execute_device=None,
                non_donatable=(), launch_id=0) -> list[list[Buffer]]:
        """Runs the program: inline (the outputs are ready when this returns)
        or on the worker (dispatch.py: the outputs are pending, the run's
        Completion is ``outputs.completion``). Bad arguments fail here in
        both cases; a failing run fails here inline, through the outputs'
        events on the worker."""
        if self.deleted:
            raise failed_precondition(f"{self} has been deleted")
        meta = self.meta
        if execute_device is not None:
            devices = [execute_device]
        else:
            devices = self.devices
        if len(argument_lists) != len(devices):
            raise invalid_argument(
                f"{self} runs on {len(devices)} device(s) but {len(argument_lists)} "
                "argument list(s) were given")
        n_in = len(meta.input_types)
        for args in argument_lists:
            if len(args) != n_in:
                raise invalid_argument(
                    f"{meta.name} takes {n_in} argument(s), got {len(args)}")
        if self.span is not None and (execute_device is None or self.span.collectives):
            return self._execute_spanning(argument_lists, execute_device)
        process = self._process(execute_device)
        try:
            # Programs with host callbacks run inline (XLA CPU runs them
            # synchronously too), so do runs under an op tracer.
            inline = dispatch.run_inline(self.run_ns, meta.host_callbacks is not None,
                                         _op_tracer_active())
        except KeyboardInterrupt:  # while waiting for the queue to drain
            dispatch.cancel_all()
            return self._interrupted(devices)
        # Per device, the donated parameters (None: no donation); raises
        # XLA's errors for a buffer donated twice or donated and also used.
        donations = donation.plan(meta.aliased_params, argument_lists, non_donatable,
                                  self.logical_ids if execute_device is None else [process])
        if inline:
            return self._execute_now(devices, argument_lists, donations, process)
        return self._dispatch(devices, argument_lists, donations, process, launch_id)

    def _execute_spanning(self, argument_lists, execute_device) -> Outputs:
        """A program whose devices span processes (distributed.execute):
        inline, without donation (the arguments are sent to the other
        processes; XLA treats donation as a hint)."""
        from . import distributed
        devices = self.devices
        positions = None
        if execute_device is not None:
            # One device's replica of a program with collectives: the other
            # processes launch theirs (PyTorch/XLA), with which it exchanges.
            if execute_device not in devices:
                raise invalid_argument(f"{execute_device} is not one of the devices of {self}")
            if len(devices) != 1:
                raise unimplemented(
                    f"{self} has {len(devices)} devices in this process; launching one of "
                    "them alone when the program has collectives across processes is "
                    "supported with one device per process only")
            devices = [execute_device]
            positions = list(self.span.local)
        meta = self.meta
        try:
            values = distributed.execute(self, argument_lists, positions)
        except KeyboardInterrupt:
            return self._interrupted(devices)
        outputs = Outputs()
        for dev, vals in zip(devices, values):
            memories = self._output_memories(dev)
            outputs.append([Buffer(v, bt, dev, mem) if bt != BufferType.TOKEN
                            else Buffer(v, bt, dev, shape=())
                            for v, bt, mem in zip(vals, meta.output_buffer_types, memories)])
        return outputs

    def _process(self, execute_device) -> tuple[int, int]:
        """(replica, partition) of a launch on one device of the executable;
        (0, 0) for a launch on all of them."""
        if execute_device is None or len(self.devices) == 1:
            return (0, 0)
        # One device of a replicated executable (PyTorch/XLA compiles its
        # non-SPMD programs for every device as replicas and launches
        # each on one): that device's replica runs alone.  Collectives
        # naming other replicas fail there (the interpreter's 1x1 grid)
        # instead of waiting for replicas that never come.
        meta = self.meta
        if meta.spmd is not None or meta.num_partitions > 1:
            raise unimplemented(
                f"{self} is partitioned over {meta.num_partitions} devices; "
                "launching it on a single device is not supported by stablehlo_ref")
        if execute_device not in self.devices:
            raise invalid_argument(
                f"{execute_device} is not one of the devices of {self} "
                f"({', '.join(str(d) for d in self.devices)})")
        return self.logical_ids[self.devices.index(execute_device)]

    # -- inline --------------------------------------------------------------

    def _execute_now(self, devices, argument_lists, donations, process) -> Outputs:
        meta = self.meta
        inputs = []
        borrowed = []
        for args in argument_lists:
            row = []
            for b in args:
                # Buffer.live_array, inlined for the common case (this loop
                # runs on every call): ready, alive, no error.
                if b.ready is None and not b.deleted and b.error is None:
                    row.append(b.array)
                else:
                    row.append(b.live_array())
                if b.borrowed:
                    borrowed.append(b.array)
            inputs.append(row)
        # Which results must be copied is decided from the inputs before the
        # run (which may consume donated arrays).
        ownerships = [donation.OutputOwnership(ins, donations[d] if donations else {}, borrowed)
                      for d, ins in enumerate(inputs)]
        t0 = perf_counter_ns()
        try:
            try:
                results = self._run(devices, argument_lists, inputs, donations, ownerships,
                                    process)
            finally:
                if donations:
                    # Donated buffers are consumed by the run (also a failed
                    # one, which may have written them), as on XLA.
                    donation.consume(argument_lists, donations)
        except KeyboardInterrupt:
            # Ctrl-C: the outputs are error buffers and the interrupt is
            # re-raised in the caller once Execute returns (interrupt.py).
            return self._interrupted(devices)
        self._ran(perf_counter_ns() - t0)
        outputs = Outputs()
        for dev, res, own in zip(devices, results, ownerships):
            memories = self._output_memories(dev)
            outputs.append([Buffer(v, bt, dev, mem) if bt != BufferType.TOKEN
                            else Buffer(v, bt, dev, shape=())
                            for v, bt, mem in zip(self._result_values(res, own),
                                                  meta.output_buffer_types, memories)])
        return outputs

    def _ran(self, ns: int) -> None:
        self.run_ns = ns if not self.run_ns else (3 * self.run_ns + ns) >> 2

    def _run(self, devices, argument_lists, inputs, donations, ownerships, process):
        """Runs the plan on ``inputs`` (per device; ``donations`` and
        ``ownerships`` as :func:`donation.run_donating` takes them): the
        per-device result lists. A failure is a PjrtError naming the op;
        KeyboardInterrupt and dispatch.Cancelled pass through."""
        meta = self.meta
        shi = _interpreter()

        def run():
            if donations:
                return donation.run_donating(meta, argument_lists, inputs, donations,
                                             ownerships, process=process,
                                             num_replicas=meta.num_replicas,
                                             num_partitions=meta.num_partitions)
            if meta.spmd is not None:
                # A global-view sharded program: shards in, one global run,
                # shards out (in partition order = self.devices order).
                return meta.spmd.run(inputs)
            if len(devices) == 1 and process != (0, 0):
                return [meta.program.run(*inputs[0], process=process)]
            if len(devices) == 1:
                return [meta.program.run(*inputs[0])]
            # One interpreter process per (replica, partition), in the
            # replica-major order of self.devices / self.logical_ids.
            return meta.program.run_parallel(
                inputs, num_replicas=meta.num_replicas,
                num_partitions=meta.num_partitions)

        limit = interrupt.execute_timeout()
        try:
            if limit:
                return interrupt.run_limited(run, limit)
            if len(devices) == 1 and not donations and meta.spmd is None and process == (0, 0):
                return [meta.program.run(*inputs[0])]  # the common case, without run()
            return run()
        except interrupt.ExecutionTimeout:
            raise PjrtError(ErrorCode.DEADLINE_EXCEEDED, _timeout_text(meta, limit, None)) \
                from None
        except shi.InterpreterError as e:
            if isinstance(e.__cause__, interrupt.ExecutionTimeout):
                raise PjrtError(ErrorCode.DEADLINE_EXCEEDED,
                                _timeout_text(meta, limit, e)) from None
            # A buffer that does not match its parameter is the caller's
            # mistake (INVALID_ARGUMENT, as XLA reports it); the rest is ours.
            code = (ErrorCode.INVALID_ARGUMENT if isinstance(e, shi.ArgumentError)
                    else ErrorCode.INTERNAL)
            raise PjrtError(code, f"stablehlo_ref execution of {meta.name} failed: {e}") from None

    # -- on the worker -------------------------------------------------------

    def _dispatch(self, devices, argument_lists, donations, process, launch_id) -> Outputs:
        meta = self.meta
        # Everything that can be checked before the run fails here, as inline.
        for args in argument_lists:
            for b in args:
                b.check_alive()
        if meta.spmd is None:
            for args in argument_lists:
                self._check_arguments(args)
        memories = [self._output_memories(dev) for dev in devices]
        try:
            dispatch.reserve()
        except KeyboardInterrupt:  # while waiting for room in the queue
            dispatch.cancel_all()
            return self._interrupted(devices)
        try:
            done = Completion()
            outputs = Outputs(completion=done)
            for dev, mems in zip(devices, memories):
                outputs.append([
                    Buffer(None, bt, dev, mem, shape=shape, ready=done,
                           nbytes=0 if dt is None else _size(shape, dt))
                    for bt, shape, dt, mem in zip(meta.output_buffer_types, meta.output_shapes,
                                                  meta.output_dtypes, mems)])
            # Zero-copy host buffers alias the caller's numpy arrays, which
            # the caller may change after the call: the run reads them as
            # they are now, as an inline run would.
            snapshots = {}
            for k, args in enumerate(argument_lists):
                for i, b in enumerate(args):
                    b.pin()
                    if b.borrowed and b.array is not None and b.type != BufferType.TOKEN:
                        snapshots[k, i] = np.array(b.array, copy=True)
            if donations:
                # Consumed at dispatch, as XLA does: deleted as the caller sees
                # it, their data kept for the run (pinned).
                donation.consume(argument_lists, donations)
            task = _ExecuteTask(self, devices, argument_lists, donations, process, outputs,
                                done, launch_id, snapshots)
        except BaseException:
            dispatch.unreserve()
            raise
        outputs.queued = dispatch.submit(task)
        return outputs

    def _check_arguments(self, args) -> None:
        """The interpreter's argument check (dtype and shape of each
        parameter), done at dispatch: data still being computed is checked
        through a stand-in of its type."""
        shi = _interpreter()
        meta = self.meta
        for i, b in enumerate(args):
            if b.type == BufferType.TOKEN:
                continue
            value = b.array
            if value is None:
                value = np.broadcast_to(np.zeros((), dtype_of(b.type)), b.shape)
            try:
                meta.program.check_argument(i, value)
            except shi.InterpreterError as e:
                raise invalid_argument(
                    f"stablehlo_ref execution of {meta.name} failed: {e}") from None

    # -- outputs -------------------------------------------------------------

    def _output_memories(self, device):
        """The memory each output goes to on ``device`` (checked once)."""
        memories = self._memories.get(device)
        if memories is None:
            meta = self.meta
            memories = []
            for i, kind in enumerate(meta.output_memory_kinds):
                memory = device.memory_of_kind(kind)
                if memory is None:
                    raise PjrtError(ErrorCode.INVALID_ARGUMENT,
                                    f"{meta.name}: result #{i} asks for memory kind "
                                    f"{kind!r}, which {device} does not have "
                                    "(stablehlo_ref has device, pinned_host, unpinned_host)")
                memories.append(memory)
            self._memories[device] = memories
        return memories

    def _interrupted(self, devices) -> Outputs:
        return Outputs([self._error_outputs(dev, ErrorCode.CANCELLED,
                                            _interrupted_text(self.meta))
                        for dev in devices], interrupted=True)

    def _error_outputs(self, device, code, message) -> list[Buffer]:
        meta = self.meta
        return [Buffer(None, bt, device, error=(code, message), shape=shape)
                for bt, shape in zip(meta.output_buffer_types, meta.output_shapes)]

    def _result_values(self, results, ownership) -> list:
        """The interpreter's results of one device, checked against the
        declared outputs and owned (copied unless donated memory)."""
        meta = self.meta
        if len(results) != meta.num_outputs:
            raise PjrtError(ErrorCode.INTERNAL,
                            f"{meta.name} produced {len(results)} result(s), "
                            f"expected {meta.num_outputs}")
        out = []
        for i, value in enumerate(results):
            bt = meta.output_buffer_types[i]
            if bt == BufferType.TOKEN:
                out.append(value)
                continue
            dtype = meta.output_dtypes[i]
            array = value if isinstance(value, np.ndarray) else np.asarray(value)
            if array.dtype != dtype or array.shape != meta.output_shapes[i]:
                raise PjrtError(
                    ErrorCode.INTERNAL,
                    f"{meta.name}: result #{i} is {array.dtype}{list(array.shape)}, "
                    f"expected {short_type(bt)}{list(meta.output_shapes[i])} "
                    "(interpreter bug)")
            if not array.flags.c_contiguous:
                array = np.ascontiguousarray(array)
            # A new buffer unless the program aliases a donated input to it.
            out.append(ownership.own(i, array))
        return out


def _size(shape, dtype) -> int:
    n = dtype.itemsize
    for d in shape:
        n *= d
    return n


class _ExecuteTask(dispatch.Task):
    """One Execute on the worker: its argument buffers (pinned until it
    finishes), its pending outputs and their Completion."""

    __slots__ = ("exe", "argument_lists", "donations", "process", "outputs", "completion",
                 "snapshots", "values", "error")

    def __init__(self, exe, devices, argument_lists, donations, process, outputs, completion,
                 launch_id, snapshots):
        super().__init__(exe, devices, launch_id)
        self.exe = exe
        self.argument_lists = argument_lists
        self.donations = donations  # per device {parameter: output}, or None
        self.process = process
        self.outputs = outputs
        self.completion = completion
        self.snapshots = snapshots  # (device index, argument index) -> data read at dispatch
        self.values = None
        self.error = None

    def work(self):
        exe = self.exe
        donations = self.donations
        inputs = []
        snapshots = self.snapshots
        try:
            for k, args in enumerate(self.argument_lists):
                donated = donations[k] if donations else ()
                row = []
                for i, b in enumerate(args):
                    if snapshots and (k, i) in snapshots:
                        row.append(snapshots[k, i])
                        continue
                    ready = b.ready
                    if ready is not None and not ready.done:
                        # Inputs come from work dispatched before this task,
                        # which the FIFO queue has finished.
                        raise PjrtError(ErrorCode.INTERNAL,
                                        f"stablehlo_ref: argument #{i} ({b}) of "
                                        f"{exe.meta.name} is not ready when its run starts")
                    if i in donated and b.error is None:
                        # Consumed at dispatch and pinned by this run alone:
                        # the run takes the only reference, so that it may
                        # update the memory in place or keep it for the
                        # aliased output (donation.run_donating), as inline.
                        row.append(b.take_array())
                    else:
                        row.append(b.pinned_data())
                inputs.append(row)
            row = b = None
            # (No caller-owned memory reaches the run: borrowed buffers were
            # copied at dispatch.)
            ownerships = [donation.OutputOwnership(ins, donations[d] if donations else {}, ())
                          for d, ins in enumerate(inputs)]
            t0 = perf_counter_ns()
            results = exe._run(self.devices, self.argument_lists, inputs, donations, ownerships,
                               self.process)
            exe._ran(perf_counter_ns() - t0)
            inputs = self.snapshots = None
            self.values = [exe._result_values(res, own)
                           for res, own in zip(results, ownerships)]
        except PjrtError as e:
            self.error = (e.pjrt_code, str(e))
        except KeyboardInterrupt:  # raised by a host callback
            self.error = (ErrorCode.CANCELLED, _interrupted_text(exe.meta))

    def fail(self, code, message):
        self.values = None
        self.error = (int(code), message)

    def finish(self):
        error = self.error
        if error is None and self.values is None:
            error = (ErrorCode.INTERNAL, f"stablehlo_ref execution of {self.exe.meta.name} "
                                         "produced no results")
        for k, bufs in enumerate(self.outputs):
            if error is None:
                for buf, value in zip(bufs, self.values[k]):
                    buf.fulfil(value)
            else:
                for buf in bufs:
                    buf.fulfil(error=error)
        self.values = None
        for args in self.argument_lists:
            for b in args:
                b.unpin()
        self.completion.set(error)

    def describe_outcome(self) -> dict:
        """For the trace line of the finished run."""
        if self.error is not None:
            return {"error": self.error[1]}
        return {"outputs": [[f"{b} = {preview_value(v)}" for b, v in zip(bufs, values)]
                            for bufs, values in zip(self.outputs, self.values or ())]}
