"""A numpy StableHLO interpreter.

    import stablehlo_interpreter as shi
    program = shi.compile(mlir_text_or_bytes)   # parse + plan, once
    outputs = program.run(*numpy_args)          # run many times

It knows nothing of PJRT: it loads a module, compiles it to a plan once and
runs the plan many times.

Public surface for embedders (the PJRT plugin uses these names only):
`compile`/`Program` (`Program.run`, `Program.function`, `Program.module`:
the loaded `Module`, whose `mlir`/`context` are read with `MLIR_LOCK`
held), `load`/`Module`, the error classes, the types, `dtypes`,
`decode_attribute` (an MLIR op attribute as a Python value),
`format_location` (an MLIR location as the text errors use) and the Shardy
sharding geometry (`Mesh`, `Sharding`, `ShardingError`, `module_meshes`,
`parse_sharding`, `parse_sharding_per_value`, `attribute_text`) on which the
plugin plans sharded programs.
"""

from . import dtypes, ops  # noqa: F401 - importing ops registers every kernel
from .attrs import decode_attribute
from .compiler import Program, compile, format_location
from .errors import (
    ArgumentError,
    CheckFailure,
    CompileError,
    ExecutionError,
    InterpreterError,
    LoadError,
    UnsupportedOpsError,
)
from .loader import MLIR_LOCK, Module, load
from .spmd import (
    Mesh,
    Sharding,
    ShardingError,
    attribute_text,
    module_meshes,
    parse_gspmd_sharding,
    parse_sharding,
    parse_sharding_per_value,
)
from .types import TOKEN, OtherType, TensorType, Token, TokenType, TupleType

__version__ = "0.1.0"

__all__ = [
    "compile", "load", "Program", "Module", "dtypes",
    "InterpreterError", "LoadError", "CompileError", "UnsupportedOpsError",
    "ExecutionError", "CheckFailure", "ArgumentError",
    "TensorType", "TupleType", "TokenType", "OtherType", "Token", "TOKEN",
    "MLIR_LOCK", "decode_attribute", "format_location",
    "Mesh", "Sharding", "ShardingError", "attribute_text", "module_meshes", "parse_sharding",
    "parse_sharding_per_value", "parse_gspmd_sharding",
]
