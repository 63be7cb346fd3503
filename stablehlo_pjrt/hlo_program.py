"""PJRT program formats ``hlo`` and ``hlo_with_config``: XLA HLO in, StableHLO out.

PyTorch/XLA (and XLA's PjRtCApiClient::Compile(XlaComputation)) hands the
plugin a serialized ``HloModuleProto`` with program format ``hlo``;
``hlo_with_config`` is an ``HloModuleProtoWithConfig`` (the module in field
1, its HloModuleConfigProto in field 2).  Both are converted here with the
converter jaxlib ships (XLA's own: ``hlo_to_stablehlo`` imports HLO into
MHLO/StableHLO, ``mhlo_to_stablehlo`` legalizes what is left; the MHLO ops
StableHLO lacks become ``custom_call @mhlo.*``, which the interpreter runs in
stablehlo_interpreter/ops/mhlo_custom_calls.py).  The result is StableHLO
bytecode that takes the usual ``mlir`` path; its text is what the PJRT trace
and the op trace show.
"""


import re

from . import compat
from .error import PjrtError, invalid_argument, unimplemented
from .protowire import fields, int_field, len_field

HLO_FORMATS = ("hlo", "hlo_with_config")


def check_wire_format(data: bytes, what: str) -> None:
    """Raise INVALID_ARGUMENT unless ``data`` is a well-formed protobuf
    message (protowire.fields' checks). jaxlib's
    CompileOptions.ParseFromString ignores a parse failure and returns
    defaults, so garbage would otherwise compile as "no options".
    Length-delimited fields are not descended into: a string and a nested
    message look alike on the wire."""
    for _ in fields(data, what):
        pass


def _module_of_config_proto(data: bytes) -> bytes:
    """Field 1 (hlo_module) of an HloModuleProtoWithConfig.

    The config (field 2) is not needed: replica/partition counts come from
    the compile options, which PJRT passes separately.
    """
    module = None
    for field, wire, value in fields(data, "HloModuleProtoWithConfig"):
        if field == 1 and wire == 2:
            module = value
    if module is None:
        raise invalid_argument("HloModuleProtoWithConfig has no hlo_module (field 1)")
    return module


def with_config(module: bytes, num_replicas: int, num_partitions: int) -> bytes | None:
    """An HloModuleProtoWithConfig for a serialized HloModuleProto: the module
    (field 1) and an HloModuleConfigProto (field 2) whose
    entry_computation_layout (1) is the module's host_program_shape (field 4
    of HloModuleProto), with replica_count (4) and num_partitions (5). None
    when the module has no host_program_shape or is not a well-formed
    message: jaxlib aborts on a config without an entry layout. (Field
    numbers of xla/service/hlo.proto and xla/xla.proto; tests/test_pjrt_jax.py
    checks jaxlib reads the result.)"""
    try:
        shape = None
        for field, wire, value in fields(module, "HloModuleProto"):
            if field == 4 and wire == 2:
                shape = value
    except PjrtError:
        return None
    if shape is None:
        return None
    config = len_field(1, shape) + int_field(4, num_replicas) + int_field(5, num_partitions)
    return len_field(1, module) + len_field(2, config)


def hlo_to_stablehlo(code: bytes, code_format: str) -> bytes:
    """StableHLO bytecode for a serialized HloModuleProto (``hlo``) or
    HloModuleProtoWithConfig (``hlo_with_config``)."""
    if code_format == "hlo_with_config":
        code = _module_of_config_proto(code)
    _jax = compat.jax_internal("lib", "_jax")
    try:
        imported = _jax.mlir.hlo_to_stablehlo(code)
    except Exception as e:  # XlaRuntimeError: not an HloModuleProto
        raise invalid_argument(
            f"stablehlo_ref could not read the '{code_format}' program as an "
            f"HloModuleProto: {_first_line(e)}") from None
    try:
        converted = _jax.mlir.mhlo_to_stablehlo(imported)
    except Exception as e:
        # XLA still reads (and PyTorch/XLA's randperm still writes) a legacy
        # dynamic-slice form that the imported module fails to verify with
        # ("operand #1 must be variadic of 0D tensor"): rewritten into the
        # current form, the program converts.
        fixed = scalar_start_indices(code) if "0D tensor" in str(e) else None
        if fixed is not None:
            try:
                return _jax.mlir.mhlo_to_stablehlo(_jax.mlir.hlo_to_stablehlo(fixed))
            except Exception:  # noqa: BLE001 - report the original program's error
                pass
        # XLA-private HLO ops (copy, add-dependency, domain, stochastic-convert,
        # rng-get-and-update-state...) have no StableHLO form; XLA's converter
        # names the op on stderr and raises "MHLO => StableHLO failed".
        raise unimplemented(
            f"stablehlo_ref cannot run this '{code_format}' program: XLA's HLO -> "
            f"StableHLO converter refused it ({_first_line(e)}). Typical causes: an "
            "XLA-private op with no StableHLO form (copy, add-dependency, domain, "
            "stochastic-convert, rng-get-and-update-state; named on stderr)") from None
    return converted


# The opcodes with start indices, and the operand number of their first index.
_START_INDICES = {"kDynamicSlice": 1, "kDynamicUpdateSlice": 2}
_SHAPE = re.compile(r"= ([a-z]+[0-9]*)\[(\d*)\]")


def scalar_start_indices(code: bytes) -> bytes | None:
    """``code`` (a serialized HloModuleProto) with every dynamic-slice and
    dynamic-update-slice in XLA's legacy form -- all start indices in one
    rank-1 operand, ``dynamic-slice(s64[8] %x, s64[1] %i)`` -- rewritten into
    the current one, one scalar per dimension (``slice`` + ``reshape`` of
    each element of the vector); None if it has none.

    PyTorch/XLA's randperm (a Fisher-Yates shuffle over ``rng`` draws of
    shape [1]) emits the legacy form; XLA compiles it, its HLO -> StableHLO
    importer refuses it.  The rewrite goes through XLA's own HLO text printer
    and parser (jaxlib's ``hlo`` module): jaxlib has no protobuf classes for
    HloModuleProto and no API to add instructions, and the text form is
    XLA's complete one (names, metadata, shardings, layouts, aliasing)."""
    hlo = compat.hlo_bindings()
    try:
        module = hlo.HloModule.from_serialized_hlo_module_proto(code)
    except Exception:  # noqa: BLE001 - not a module XLA reads: the caller's error stands
        return None
    legacy = {}  # instruction name -> (operand names, index position, dtype, length)
    for comp in module.computations():
        for ins in comp.instructions():
            first = _START_INDICES.get(ins.opcode.name)
            if first is None:
                continue
            operands = ins.operands()
            if len(operands) != first + 1:
                continue
            m = _SHAPE.search(operands[first].to_string())
            if m and m.group(2):  # a rank-1 index vector (a scalar prints "s64[]")
                legacy[ins.name] = ([o.name for o in operands], first, m.group(1),
                                    int(m.group(2)))
    if not legacy:
        return None
    options = hlo.HloPrintOptions()
    options.print_large_constants = True  # the default elides them ("{...}")
    options.print_operand_shape = False
    lines = []
    for line in module.to_string(options).splitlines():
        name = _instruction_name(line)
        if name not in legacy:
            lines.append(line)
            continue
        names, first, dtype, length = legacy.pop(name)
        indent = line[:len(line) - len(line.lstrip())]
        index = names[first]
        scalars = []
        for k in range(length):
            part = f"{name}.start{k}"
            lines.append(f"{indent}%{part} = {dtype}[1]{{0}} slice(%{index}), "
                         f"slice={{[{k}:{k + 1}]}}")
            lines.append(f"{indent}%{part}.scalar = {dtype}[] reshape(%{part})")
            scalars.append(f"%{part}.scalar")
        old = "(" + ", ".join("%" + n for n in names) + ")"
        new = "(" + ", ".join(["%" + n for n in names[:first]] + scalars) + ")"
        if line.count(old) != 1:
            return None
        lines.append(line.replace(old, new))
    if legacy:  # an instruction the printer wrote in an unexpected way
        return None
    try:
        return hlo.hlo_module_from_text("\n".join(lines)).as_serialized_hlo_module_proto()
    except Exception:  # noqa: BLE001 - the caller reports the converter's error
        return None


def _instruction_name(line: str) -> str | None:
    """The name an HLO text line defines (``ROOT %add.3 = ...`` -> add.3)."""
    s = line.strip()
    if s.startswith("ROOT "):
        s = s[5:]
    if not s.startswith("%") or " = " not in s:
        return None
    return s[1:s.index(" = ")]


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
