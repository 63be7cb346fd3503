"""A numpy StableHLO interpreter.

    import stablehlo_interpreter as shi
    program = shi.compile(mlir_text_or_bytes)   # parse + plan, once
    outputs = program.run(*numpy_args)          # run many times

It knows nothing of PJRT: it loads a module, compiles it to a plan once and
runs the plan many times.
"""

from . import dtypes
from .compiler import Program, compile
from .errors import (ArgumentError, CheckFailure, CompileError, ExecutionError,
                     InterpreterError, LoadError, UnsupportedOpsError)
from .loader import Module, load
from .types import TOKEN, OtherType, TensorType, Token, TokenType, TupleType

__version__ = "0.1.0"

__all__ = [
    "compile", "load", "Program", "Module", "dtypes",
    "InterpreterError", "LoadError", "CompileError", "UnsupportedOpsError",
    "ExecutionError", "CheckFailure", "ArgumentError",
    "TensorType", "TupleType", "TokenType", "OtherType", "Token", "TOKEN",
]
