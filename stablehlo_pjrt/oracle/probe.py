"""Op-level tracing, NaN finding and probes for JAX functions.

These run the function's StableHLO directly on the interpreter with a
tracer of the interpreter's (``stablehlo_interpreter.OpTracer``, ...). To
observe the runs the PJRT plugin makes (``jax.jit(f)(x)`` on stablehlo_ref)
instead, wrap them in ``stablehlo_interpreter.use_tracer(...)`` or set
STABLEHLO_REF_TRACE_OPS=1 (or =nan).
"""

from __future__ import annotations

import stablehlo_interpreter as shi
from stablehlo_interpreter import NanFinder, NonFiniteError, OpTracer, Recorder

from ._lowering import lower


def _program(fn, args):
    text, flat = lower(fn, *args)
    return shi.compile(text, name=getattr(fn, "__name__", "<fn>")), flat


def trace_ops(fn, *args, stream=None, show_inputs=True):
    """Runs ``fn(*args)`` on the interpreter printing every op (with its
    source location, input and result summaries: shape, dtype, min/max/mean,
    NaN/inf counts), nested by region, loop iterations marked. Returns the
    outputs (flat list of numpy arrays)."""
    program, flat = _program(fn, args)
    return program.run(*flat, tracer=OpTracer(stream, show_inputs=show_inputs))


def find_nan(fn, *args) -> NonFiniteError | None:
    """The error naming the first op that produced a NaN or inf from finite
    inputs (``.op_name``/``.location`` and the message with its inputs and
    results), or None if the run produces none."""
    program, flat = _program(fn, args)
    try:
        program.run(*flat, tracer=NanFinder())
    except NonFiniteError as e:
        return e
    return None


def probe(fn, *args, probes: dict, keep_values: bool = False) -> Recorder:
    """Runs ``fn(*args)`` saving the results of the ops whose location
    contains a key of ``probes`` (or whose name equals it, e.g.
    "stablehlo.dot_general") as .npy files in the mapped directory. Returns
    the Recorder: its ``events`` list every op run in order (with values if
    ``keep_values``)."""
    program, flat = _program(fn, args)
    rec = Recorder(keep_values=keep_values, probes=probes)
    program.run(*flat, tracer=rec)
    return rec
