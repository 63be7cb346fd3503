"""Runs conformance tasks inside a worker process.

A task is a dict made by :mod:`stablehlo_conformance.runner`: the chunk texts of one
file (or of one `// -----` chunk) and the cases to run on them. For every case
the worker sends ``("start", i)`` then ``("result", i, status, seconds,
message)`` on its connection, so that the parent can time each case out and
attribute a crash to the case that caused it.
"""

import contextlib
import io
import os
import sys
import time
import traceback


def _status_of(exc):
    import stablehlo_interpreter as shi
    if isinstance(exc, shi.CheckFailure):
        return "failed"
    if isinstance(exc, shi.UnsupportedOpsError):
        return "unsupported"
    return "error"


def _message(exc):
    import stablehlo_interpreter as shi
    if isinstance(exc, shi.InterpreterError):
        return str(exc)
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" ({tb[-1].filename}:{tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"


class ArgsError(Exception):
    """Malformed `--args` (messages as upstream's stablehlo-translate prints them)."""


_USAGE = "--args=[dense<1> : tensor<2xi32>, ...]"


def parse_args(text):
    """Parse `--args="[dense<...> : tensor<...>, ...]"` into numpy arrays."""
    import numpy as np

    import stablehlo_interpreter as shi
    try:
        values = shi.parse_attribute(text)
    except shi.LoadError:
        values = None
    if not isinstance(values, list):
        raise ArgsError("expectected array attribute string for args, i.e. " + _USAGE)
    for v in values:
        if not isinstance(v, np.ndarray):
            raise ArgsError("expected dense elements attribute for args elements, i.e. "
                            + _USAGE)
    return values


def roundtrip(text):
    """Serialize to a portable artifact and back; None if the text is unchanged,
    else a message (upstream's `--serialize | --deserialize` + diff RUN lines)."""
    from jaxlib.mlir.dialects import stablehlo

    import stablehlo_interpreter as shi
    module = shi.load(text)
    original = module.text
    blob = stablehlo.serialize_portable_artifact_str(original, stablehlo.get_current_version())
    again = shi.load(blob, trusted=True).text  # our own bytes: no isolation needed
    if again == original:
        return None
    a, b = original.splitlines(), again.splitlines()
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"round trip changed line {i + 1}: {x.strip()!r} -> {y.strip()!r}"
    return f"round trip changed the line count: {len(a)} -> {len(b)}"


class _Compiled:
    def __init__(self, chunks, numerics=None):
        self.chunks = chunks
        self.numerics = numerics   # None: STABLEHLO_REF_NUMERICS decides
        self.cache = {}

    def get(self, i):
        import stablehlo_interpreter as shi
        if i not in self.cache:
            try:
                self.cache[i] = shi.compile(self.chunks[i], numerics=self.numerics)
            except BaseException as e:
                self.cache[i] = e
        v = self.cache[i]
        if isinstance(v, BaseException):
            raise v
        return v


def run_case(case, compiled, outputs):
    """Run one case; returns (status, message)."""
    from stablehlo_interpreter import format_value
    kind = case["kind"]
    group = case.get("group")
    buf = io.StringIO()
    status, message = "passed", ""
    try:
        if kind == "dynamic":
            msg = roundtrip(compiled.chunks[0])
            compiled.get(0)
            if msg is not None:
                status, message = "failed", msg
        else:
            args = parse_args(case["args"]) if case.get("args") is not None else []
            with contextlib.redirect_stdout(buf):
                for ci, func in case["runs"]:
                    prog = compiled.get(ci)
                    f = prog.function(func)
                    results = prog.run(*args, func=f.name)
                    if case.get("print"):
                        for r, t in zip(results, f.output_types):
                            print(format_value(r, t, dense=case["print"] == "dense"))
    except BaseException as e:  # noqa: BLE001 - everything is a case result
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        status, message = _status_of(e), _message(e)
        if isinstance(e, ArgsError):
            status = "error"
        buf.write(message + "\n")
    if group is not None:
        outputs[group] = outputs.get(group, "") + buf.getvalue()
    if case.get("expect_error"):
        if status in ("error", "failed"):
            status, message = "passed", f"failed as expected: {message}"
        elif status == "passed":
            status, message = "failed", "expected an error, but the program ran"
    if status == "passed" and case.get("checks") is not None:
        from .filecheck import FileCheckError, filecheck
        try:
            filecheck(outputs.get(group, ""), case["checks"])
        except FileCheckError as e:
            status, message = "failed", f"FileCheck: {e}"
    return status, message


def serve(conn, memory_limit_mb=0):
    """Worker main loop: run tasks until the parent closes the connection."""
    if memory_limit_mb:
        # A runaway case fails with MemoryError instead of exhausting the host.
        import resource
        limit = int(memory_limit_mb) << 20
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):
            pass
    # Keep the parent's terminal clean: kernels that print (interpreter.print)
    # go to the case's captured buffer or nowhere.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        sys.stdout = open(os.devnull, "w")
        sys.stderr = open(os.devnull, "w")
    except OSError:
        pass
    import stablehlo_interpreter  # noqa: F401 - once, up front: every kernel registers
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        compiled = _Compiled(task["chunks"], task.get("numerics"))
        outputs = {}
        for i, case in enumerate(task["cases"]):
            conn.send(("start", i))
            t0 = time.perf_counter()
            status, message = run_case(case, compiled, outputs)
            # MLIR names text input "-": point locations at the suite file.
            message = message.replace('"-":', f'{task["file"]}:')
            if status != "passed" and task.get("note"):
                message = f'{task["note"]} {message}'
            conn.send(("result", i, status, time.perf_counter() - t0, message))
        conn.send(("done",))
