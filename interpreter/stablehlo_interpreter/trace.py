"""Op-level observation of a running plan: tracing, NaN finding, recording.

A tracer is any object with ``before(op, inputs, depth)`` and
``after(op, results, depth)`` (and optionally ``enter_block(name, depth)``,
called when a function body or region starts running, which is how loop
iterations become visible); pass it as ``program.run(..., tracer=t)``.

Runs that are not given a tracer (such as the ones the PJRT plugin makes for
JAX) use, in this order:

* the tracer installed with :func:`use_tracer` (a context manager)::

      with use_tracer(NanFinder()):
          jax.jit(f)(x)          # raises at the first op producing NaN/inf

* ``STABLEHLO_REF_TRACE_OPS=1``: trace every op to stderr; ``=nan``
  additionally stops at the first op that produces a NaN or inf. The
  variable is read at each run, so it can be set after the program compiled.

The fast path of the plan is untouched when no tracer is in effect.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import config as _config
from . import dtypes
from .errors import ExecutionError
from .types import TOKEN, describe


def summarize(value: Any, max_elems_exact: int = 8) -> str:
    """One-line summary of a runtime value: type, and for tensors min/max/mean
    and NaN/inf counts (small tensors are shown in full)."""
    if isinstance(value, tuple):
        return "(" + ", ".join(summarize(v) for v in value) + ")"
    if value is TOKEN:
        return "token"
    if not isinstance(value, np.ndarray):
        return repr(value)
    head = describe(value)
    if value.size == 0:
        return f"{head} (empty)"
    if value.size <= max_elems_exact:
        return f"{head} {np.array2string(np.asarray(value).reshape(-1), separator=', ')}"
    stats = _stats(value)
    return f"{head} " + " ".join(f"{k}={v}" for k, v in stats.items())


def _as_float(value):
    if dtypes.is_complex(value.dtype):
        return np.abs(value.astype(np.complex128))
    if value.dtype == np.bool_:
        return value.astype(np.float64)
    return value.astype(np.float64)


def _stats(value):
    x = _as_float(value)
    finite = np.isfinite(x)
    out = {}
    nan = int(np.isnan(x).sum())
    inf = int(np.isinf(x).sum())
    if finite.any():
        xf = x[finite]
        out["min"] = f"{xf.min():.6g}"
        out["max"] = f"{xf.max():.6g}"
        out["mean"] = f"{xf.mean():.6g}"
    if nan:
        out["nan"] = nan
    if inf:
        out["inf"] = inf
    return out


def nonfinite_count(value):
    """Number of NaN/inf elements in a tensor (0 for non-float values)."""
    if isinstance(value, tuple):
        return sum(nonfinite_count(v) for v in value)
    if not isinstance(value, np.ndarray) or value.size == 0:
        return 0
    if not (dtypes.is_float(value.dtype) or dtypes.is_complex(value.dtype)):
        return 0
    x = value
    if dtypes.is_complex(x.dtype):
        return int((~np.isfinite(x.real) | ~np.isfinite(x.imag)).sum())
    return int((~np.isfinite(x.astype(np.float64) if x.dtype in dtypes.ML_FLOATS else x)).sum())


class OpTracer:
    """Prints each op as it runs, with its inputs and results, nested by region.

    Loop iterations and branches are marked: each time the body (or
    condition) of a ``while`` or a branch of ``case``/``if`` starts, a line
    ``-- while body, iteration 3`` is printed at the region's depth.
    """

    def __init__(self, stream: Any = None, show_inputs: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.show_inputs = show_inputs
        self._iterations = {}  # depth -> while-body entries since the while began

    def enter_block(self, name: str, depth: int) -> None:
        op, _, index = name.rpartition("#")
        if op == "stablehlo.while":
            if index == "1":
                n = self._iterations.get(depth, 0) + 1
                self._iterations[depth] = n
                self.stream.write(f"{'  ' * depth}-- while body, iteration {n}\n")
            else:
                n = self._iterations.get(depth, 0)
                self.stream.write(f"{'  ' * depth}-- while condition, before iteration {n + 1}\n")
        elif op in ("stablehlo.case", "stablehlo.if"):
            self.stream.write(f"{'  ' * depth}-- {op.split('.')[1]} branch {index}\n")

    def before(self, op: Any, inputs: Any, depth: int) -> None:
        pad = "  " * depth
        if op.name == "stablehlo.while":
            self._iterations[depth + 1] = 0
        self.stream.write(f"{pad}{op.name} @ {op.location}\n")
        if self.show_inputs:
            for i, v in enumerate(inputs):
                self.stream.write(f"{pad}  in{i}: {summarize(v)}\n")

    def after(self, op: Any, results: Any, depth: int) -> None:
        pad = "  " * depth
        for i, v in enumerate(results):
            self.stream.write(f"{pad}  out{i}: {summarize(v)}\n")


class NonFiniteError(ExecutionError):
    """Raised by :class:`NanFinder` at the first op that produced a NaN or inf."""


class NanFinder:
    """Stops at the first op whose results hold a NaN/inf that its inputs did not."""

    def __init__(self, inner: Any = None) -> None:
        self.inner = inner
        self._stack = []

    def enter_block(self, name: str, depth: int) -> None:
        if self.inner is not None and hasattr(self.inner, "enter_block"):
            self.inner.enter_block(name, depth)

    def before(self, op: Any, inputs: Any, depth: int) -> None:
        self._stack.append(inputs)
        if self.inner is not None:
            self.inner.before(op, inputs, depth)

    def after(self, op: Any, results: Any, depth: int) -> None:
        inputs = self._stack.pop()
        if self.inner is not None:
            self.inner.after(op, results, depth)
        bad = [i for i, r in enumerate(results) if nonfinite_count(r)]
        if bad and not any(nonfinite_count(v) for v in inputs):
            lines = [f"{op.where()} produced a non-finite value"]
            for i, v in enumerate(inputs):
                lines.append(f"  input #{i}: {summarize(v)}")
            for i in bad:
                lines.append(f"  result #{i}: {summarize(results[i])}")
            raise NonFiniteError("\n".join(lines), op.name, op.location)


class Recorder:
    """Records every op's inputs and results in program order.

    ``events`` is a list of ``(op, inputs, results, depth)``. ``probes`` maps
    an op location substring (or op name) to a directory: matching results are
    also saved there as ``<n>_<op>_<i>.npy``.
    """

    def __init__(self, keep_values: bool = True, probes: Any = None) -> None:
        self.keep_values = keep_values
        self.events = []
        self.probes = probes or {}
        self._stack = []
        self._n = 0

    def before(self, op: Any, inputs: Any, depth: int) -> None:
        self._stack.append(list(inputs) if self.keep_values else None)

    def after(self, op: Any, results: Any, depth: int) -> None:
        inputs = self._stack.pop()
        self.events.append((op, inputs, list(results) if self.keep_values else None, depth))
        for key, directory in self.probes.items():
            if key in op.location or key == op.name:
                os.makedirs(directory, exist_ok=True)
                for i, r in enumerate(results):
                    if isinstance(r, np.ndarray):
                        safe = op.name.replace(".", "_")
                        np.save(os.path.join(directory, f"{self._n:05d}_{safe}_{i}.npy"), r)
        self._n += 1


# The tracer of runs that are given none (see use_tracer).
ACTIVE = None


@contextlib.contextmanager
def use_tracer(tracer: Any) -> Iterator[Any]:
    """Makes ``tracer`` observe every run that is not given one explicitly,
    including the runs the PJRT plugin makes for JAX, until the block ends.
    Process-wide (not per thread): the plugin may run programs on threads
    other than the caller's."""
    global ACTIVE
    previous = ACTIVE
    ACTIVE = tracer
    try:
        yield tracer
    finally:
        ACTIVE = previous


def active_tracer() -> Any:
    """The tracer :func:`use_tracer` made active, or None. The PJRT plugin
    runs programs inline while one is (a queued run could start after its
    scope has ended)."""
    return ACTIVE


def tracer_from_env():
    """The tracer STABLEHLO_REF_TRACE_OPS asks for, or None."""
    mode = _config.TRACE_OPS.value()
    if mode == "0":
        return None
    if mode == "nan":
        return NanFinder(OpTracer())
    return OpTracer()
