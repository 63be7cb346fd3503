"""A numpy StableHLO interpreter.

    import stablehlo_interpreter as shi
    program = shi.compile(mlir_text_or_bytes)   # parse + plan, once
    outputs = program.run(*numpy_args)          # run many times

It knows nothing of PJRT: it loads a module, compiles it to a plan once and
runs the plan many times.

This module is the interpreter's public surface: the names in ``__all__``
below, plus four public modules, ``dtypes`` (element types), ``mlir_text``
(scanning printed MLIR at the top level of its brackets), ``cli`` (the
``stablehlo-ref`` command line: ``main``, ``load_args``, ``UserError``) and
``config`` (every ``STABLEHLO_REF_*`` switch: ``Setting``, ``SETTINGS``,
``describe``, ``format_settings``; the plugin declares its own switches with
the same ``Setting``).
Everything else in the package is private. The PJRT plugin
(``stablehlo_pjrt``), the conformance runner (``stablehlo_conformance``) and
the benchmarks use these names only; an import-linter contract in
pyproject.toml (run by ``.ci/lint``) checks it. The tests may look inside.

* Loading and running: ``load``/``Module`` (its ``mlir``/``context`` are
  read with ``MLIR_LOCK`` held), ``compile``/``Program`` (``Program.run``,
  ``Program.function``, ``Program.check_argument``, ``Program.module``: the
  loaded ``Module``),
  ``prestart_bytecode_reader`` (start the isolated process that reads
  bytecode first, ahead of the first load), the error classes and the types.
* MLIR pieces: ``decode_attribute`` (an op's attribute as a Python value),
  ``parse_attribute`` (attribute text as a Python value), ``format_location``
  (a location as the text errors use), ``format_value`` (a runtime value as
  the reference interpreter prints it).
* Comparing outputs: ``compare_outputs``, ``compare_arrays`` and their
  ``ComparisonReport`` (dtype-aware tolerances, see compare.py).
* Observing a run: the tracers ``OpTracer``, ``NanFinder`` (raises
  ``NonFiniteError``) and ``Recorder``, ``use_tracer`` (for runs that are
  not given one, such as the plugin's), ``active_tracer`` (the one in effect)
  and ``summarize`` (a value in one line).
* Shardy sharding geometry, on which the plugin plans sharded programs:
  ``Mesh``, ``Sharding``, ``ShardingError``, ``module_meshes``,
  ``parse_sharding``, ``parse_sharding_per_value``, ``parse_gspmd_sharding``,
  ``attribute_text``.
* ``wrap_kernel``: make one op's kernel run through a wrapper (the plugin's
  fault injection breaks a kernel with it).
* ``TRAITS``, ``with_trait``, ``has_trait``: the op traits the kernels are
  registered with (the plugin's lowerings and sharding propagation ask them).
"""

from . import config, dtypes, ops  # noqa: F401 - importing ops registers every kernel
from .attrs import decode_attribute, parse_attribute
from .compare import ComparisonReport, compare_arrays, compare_outputs
from .compiler import Program, compile, format_location
from .errors import (
    ArgumentError,
    CheckFailure,
    CompileError,
    ExecutionError,
    InterpreterError,
    Interrupt,
    LoadError,
    UnsupportedOpsError,
)
from .isolate import prestart as prestart_bytecode_reader
from .loader import MLIR_LOCK, Module, load
from .ops.interpreter_ops import format_value
from .registry import TRAITS, has_trait, with_trait, wrap_kernel
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
from .trace import (
    NanFinder,
    NonFiniteError,
    OpTracer,
    Recorder,
    active_tracer,
    summarize,
    use_tracer,
)
from .types import TOKEN, OtherType, TensorType, Token, TokenType, TupleType

__version__ = "0.1.0"

__all__ = [
    # loading and running
    "compile", "load", "Program", "Module", "MLIR_LOCK", "prestart_bytecode_reader",
    "InterpreterError", "Interrupt", "LoadError", "CompileError", "UnsupportedOpsError",
    "ExecutionError", "CheckFailure", "ArgumentError",
    "TensorType", "TupleType", "TokenType", "OtherType", "Token", "TOKEN", "dtypes",
    # the STABLEHLO_REF_* switches (config.Setting, config.SETTINGS, config.describe)
    "config",
    # MLIR pieces
    "decode_attribute", "parse_attribute", "format_location", "format_value",
    # comparing outputs
    "compare_outputs", "compare_arrays", "ComparisonReport",
    # observing a run
    "OpTracer", "NanFinder", "NonFiniteError", "Recorder", "use_tracer", "active_tracer",
    "summarize",
    # sharding geometry
    "Mesh", "Sharding", "ShardingError", "attribute_text", "module_meshes", "parse_sharding",
    "parse_sharding_per_value", "parse_gspmd_sharding",
    # fault injection
    "wrap_kernel",
    # op traits (registry.TRAITS): the ops with one
    "TRAITS", "with_trait", "has_trait",
]
