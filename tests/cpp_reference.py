"""Run programs on the C++ StableHLO reference interpreter, in a subprocess.

jaxlib ships the C++ interpreter as ``jaxlib.mlir.dialects.stablehlo.eval_module``.
It aborts the process (``llvm::report_fatal_error``) on what it does not
support, so it runs in a child process here: the parent hands it a batch of
programs and reads one result file per program; a program that kills the
child is recorded as ``("abort", message)`` and the child is restarted after
it.

Values cross as MLIR attribute text: arguments as hex ``dense<"0x...">``
(bit-exact for every element type), results as the interpreter prints them
(decimal when that round-trips exactly, else hex), read back with
``stablehlo_interpreter.parse_attribute``.

Used by tests/test_spec_numerics.py: spec mode must be bit-identical to it.
The child is ``python tests/cpp_reference.py``, serving requests on stdin.
"""

import os
import pickle
import subprocess
import sys
import tempfile
import threading

import numpy as np


def dense_text(a):
    """``dense<"0x...">`` attribute text of array ``a``: bit-exact."""
    import stablehlo_interpreter as shi
    a = np.array(a, order="C")   # (np.ascontiguousarray makes 0-d arrays 1-d)
    et = shi.dtypes.to_element_type(a.dtype)
    shape = "x".join(str(s) for s in a.shape)
    ttype = f"tensor<{shape}x{et}>" if a.ndim else f"tensor<{et}>"
    data = a.astype(np.uint8).tobytes() if a.dtype == np.bool_ else a.tobytes()
    if not data:
        return f"dense<> : {ttype}" if a.ndim else f"dense<0> : {ttype}"
    return f'dense<"0x{data.hex().upper()}"> : {ttype}'


def _child():
    """Serve requests from stdin: pickled ``(text, [arg texts])`` in, pickled
    result out, each a 8-byte length then the bytes."""
    from jax._src.interpreters import mlir as jmlir
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo
    ctx = jmlir.make_ir_context()
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return
        text, args = pickle.loads(inp.read(int.from_bytes(head, "little")))
        try:
            with ctx, ir.Location.unknown():
                module = ir.Module.parse(text)
                attrs = [ir.Attribute.parse(a) for a in args]
                result = ("ok", [str(o) for o in stablehlo.eval_module(module, attrs)])
        except Exception as e:  # noqa: BLE001 - a result like any other
            result = ("error", f"{type(e).__name__}: {e}"[:2000])
        data = pickle.dumps(result)
        out.write(len(data).to_bytes(8, "little") + data)
        out.flush()


class CppInterpreter:
    """A child process running the C++ interpreter, restarted after an abort.

    ``run(text, args)``: ``("ok", [arrays])``, ``("error", message)`` (an
    exception) or ``("abort", message)`` (the child died or timed out)."""

    def __init__(self, timeout=60.0):
        self.timeout = timeout
        self.proc = None
        self._err = None

    def _start(self):
        self._err = tempfile.TemporaryFile()
        env = dict(os.environ, JAX_PLATFORMS="cpu")
        self.proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._err, env=env)

    def run(self, text, args=()):
        import stablehlo_interpreter as shi
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        data = pickle.dumps((text, [dense_text(a) for a in args]))
        proc = self.proc
        timer = threading.Timer(self.timeout, proc.kill)
        timer.start()
        try:
            proc.stdin.write(len(data).to_bytes(8, "little") + data)
            proc.stdin.flush()
            head = proc.stdout.read(8)
            body = proc.stdout.read(int.from_bytes(head, "little")) if len(head) == 8 else b""
        except (BrokenPipeError, OSError):
            head = b""
        finally:
            timer.cancel()
        if len(head) < 8:
            proc.kill()
            proc.wait()
            self._err.seek(0)
            tail = self._err.read().decode(errors="replace").strip().splitlines()[-3:]
            self.proc = None
            return ("abort", f"exit {proc.returncode}: " + " | ".join(tail))
        result = pickle.loads(body)
        if result[0] == "ok":
            result = ("ok", [shi.parse_attribute(s) for s in result[1]])
        return result

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def bits_equal(a, b):
    """Same dtype, shape and bits, except that any NaN equals any NaN (the
    spec leaves NaN signs and payloads unspecified; the C++ interpreter's
    APFloat makes the default NaN where x86 makes the negative one)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "c":
        return bits_equal(a.real, b.real) and bits_equal(a.imag, b.imag)
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if _is_float(a.dtype):
        nan_a = np.isnan(a.astype(np.float64))
        nan_b = np.isnan(b.astype(np.float64))
        if not np.array_equal(nan_a, nan_b):
            return False
        a, b = a[~nan_a], b[~nan_b]
    return a.view(np.uint8).tobytes() == b.view(np.uint8).tobytes()


def _is_float(dtype):
    import stablehlo_interpreter as shi
    return shi.dtypes.is_float(dtype)


if __name__ == "__main__":
    _child()
