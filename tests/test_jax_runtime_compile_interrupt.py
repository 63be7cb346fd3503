"""Ctrl-C during compilation: a long stablehlo_ref compile interrupted with
SIGINT raises KeyboardInterrupt promptly and the plugin stays usable;
a signal that arrives while jaxlib is in C++ is taken before the next PJRT
handler starts (never inside it); the bytecode reader's helper process
survives the keypress and is restarted when a read is cut short. (XLA CPU
cannot stop a compile: Ctrl-C waits for it to finish.)

Signals and trace functions are process-wide: each scenario runs in its own
subprocess."""

import os
import subprocess
import sys

import pytest
from testkit import as_in_a_terminal

from stablehlo_interpreter import isolate


def _run(script, **env):
    e = dict(os.environ, **env)
    e.pop("STABLEHLO_REF_NUM_DEVICES", None)
    proc = subprocess.run([sys.executable, "-c", as_in_a_terminal(script)], env=e, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout.splitlines()


LONG_COMPILE = r"""
import os, signal, threading, time
import jax, jax.numpy as jnp

def f(x):
    for k in range(8000):   # 16000 ops: seconds of parsing and planning
        x = jnp.sin(x) * (1.0 + k * 1e-6)
    return x

lowered = jax.jit(f).lower(jnp.ones(3))
sent = []
threading.Timer(0.3, lambda: (sent.append(time.perf_counter()),
                              os.kill(os.getpid(), signal.SIGINT))).start()
t0 = time.perf_counter()
try:
    lowered.compile()
    print("not interrupted", flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
delay = time.perf_counter() - sent[0]
print("after", jax.jit(lambda x: x * 2)(jnp.ones(2)).tolist(), flush=True)
t0 = time.perf_counter()
c = lowered.compile()
full = time.perf_counter() - t0
y = c(jnp.ones(3)).tolist()
print("recompiled", len(set(y)) == 1 and all(abs(v) < 1 for v in y), flush=True)
print("times", delay, full, flush=True)
"""


@pytest.mark.slow
def test_ctrl_c_during_a_long_compile():
    """`python -m pytest -m slow tests/test_jax_runtime_compile_interrupt.py`
    (about 20 s: the JAX lowering of 16000 ops, then two compiles). jaxlib
    compiles on a worker thread and raises KeyboardInterrupt in the waiting
    main thread itself (it polls for signals every 200 ms)."""
    out = _run(LONG_COMPILE, JAX_PLATFORMS="stablehlo_ref")
    assert out[0] == "KeyboardInterrupt", out
    assert out[1] == "after [2.0, 2.0]", out  # the plugin is still usable
    assert out[2] == "recompiled True", out   # and the program compiles completely
    delay, full = map(float, out[3].split()[1:])
    assert delay < 1.0 and delay < full / 2, out  # prompt, long before the compile's end


PRELUDE = r"""
import ctypes, functools, operator
from stablehlo_pjrt import _capi as C, _shim, table
table.build_api()
API = C.PJRT_Api.from_address(_shim.api_address()[0])
FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)

def slot(name, args):
    args.struct_size = C.struct_size(type(args))
    return functools.partial(FN(getattr(API, name)), ctypes.addressof(args))

a = C.Client_Create_Args()
a.struct_size = C.struct_size(type(a))
assert not FN(API.PJRT_Client_Create)(ctypes.addressof(a))
client = a.client
"""

PENDING = PRELUDE + r"""
# Ctrl-C "pressed while jaxlib is in C++": the signal is made pending and the
# PJRT call made from C (map/operator.call run no bytecode in between, so
# Python cannot take the signal first).
interrupt = ctypes.pythonapi.PyErr_SetInterrupt
name = C.Client_PlatformName_Args(client=client)
try:
    err = list(map(operator.call, [interrupt, slot("PJRT_Client_PlatformName", name)]))[1]
    print("no KeyboardInterrupt", flush=True)
except KeyboardInterrupt:
    # The call itself succeeded; the interrupt reached this frame after it.
    print("KeyboardInterrupt after", C.read_str(name.platform_name, name.platform_name_size),
          flush=True)
comp = C.Client_Compile_Args(client=client)
err = None
try:
    err = list(map(operator.call, [interrupt, slot("PJRT_Client_Compile", comp)]))[1]
    print("no KeyboardInterrupt", flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt; compile returned", _shim.error_info(err), flush=True)
"""


def test_signal_pending_when_a_call_starts():
    out = _run(PENDING)
    assert out[0] == "KeyboardInterrupt after stablehlo_ref", out
    # A compile does not start: CANCELLED (before its arguments are read),
    # and KeyboardInterrupt in the caller (by the trace function).
    assert out[1] == ("KeyboardInterrupt; compile returned (1, 'stablehlo_ref: "
                      "PJRT_Client_Compile was interrupted (KeyboardInterrupt) before it "
                      "started')"), out


DURING_A_HANDLER = PRELUDE + r"""
# Ctrl-C while a handler's Python code runs (here: a handler that raises
# it): the call fails with CANCELLED, not INTERNAL, and KeyboardInterrupt
# reaches the caller.
idx = (C.API_FUNCTIONS + C.SHARDINGS_EXTENSION_FUNCTIONS).index("PJRT_Client_PlatformName")

def interrupted(ptr):
    raise KeyboardInterrupt

_shim.set_slot(idx, "PJRT_Client_PlatformName", interrupted, 0)
name = C.Client_PlatformName_Args(client=client)
err = None
try:
    err = slot("PJRT_Client_PlatformName", name)()
    print("no KeyboardInterrupt", flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt; the call returned", _shim.error_info(err), flush=True)
"""


def test_ctrl_c_inside_a_handler():
    out = _run(DURING_A_HANDLER)
    assert out == ["KeyboardInterrupt; the call returned (1, 'stablehlo_ref: "
                   "PJRT_Client_PlatformName was interrupted (KeyboardInterrupt)')"], out


MAIN_THREAD_COMPILE = PRELUDE + r"""
# Ctrl-C during a compile that runs on the main thread (as PyTorch/XLA and
# loads of serialized executables do): the compile stops, the call fails
# with CANCELLED, KeyboardInterrupt reaches the caller.
import os, signal, threading, time
N = 40000
body = "\n".join(f"  %v{i + 1} = stablehlo.sine %v{i} : tensor<3xf32>" for i in range(N))
text = (f"func.func @main(%v0: tensor<3xf32>) -> tensor<3xf32> {{\n{body}\n"
        f"  return %v{N} : tensor<3xf32>\n}}").encode()
fmt = b"mlir"
code_buf = ctypes.create_string_buffer(text, len(text))
fmt_buf = ctypes.create_string_buffer(fmt, len(fmt))
prog = C.PJRT_Program(code=ctypes.addressof(code_buf), code_size=len(text),
                      format=ctypes.addressof(fmt_buf), format_size=len(fmt))
prog.struct_size = C.struct_size(C.PJRT_Program)
opts = ctypes.create_string_buffer(b"", 1)

def compile_args():
    a = C.Client_Compile_Args(client=client, program=ctypes.addressof(prog),
                              compile_options=ctypes.addressof(opts), compile_options_size=0)
    a.struct_size = C.struct_size(type(a))
    return a

sent = []
threading.Timer(0.5, lambda: (sent.append(time.perf_counter()),
                              os.kill(os.getpid(), signal.SIGINT))).start()
a = compile_args()
err = None
try:
    err = FN(API.PJRT_Client_Compile)(ctypes.addressof(a))
    print("no KeyboardInterrupt", flush=True)
except KeyboardInterrupt:
    delay = time.perf_counter() - sent[0]
    print("KeyboardInterrupt; compile returned", _shim.error_info(err), flush=True)
t0 = time.perf_counter()
a = compile_args()
err = FN(API.PJRT_Client_Compile)(ctypes.addressof(a))
print("recompiled", err is None and bool(a.executable), flush=True)
print("times", delay, time.perf_counter() - t0, flush=True)
"""


@pytest.mark.slow
def test_ctrl_c_during_a_compile_on_the_main_thread():
    """`python -m pytest -m slow tests/test_jax_runtime_compile_interrupt.py`
    (about 10 s: two compiles of 40000 ops)."""
    out = _run(MAIN_THREAD_COMPILE)
    assert out[0] == ("KeyboardInterrupt; compile returned (1, 'stablehlo_ref: compilation "
                      "was interrupted (KeyboardInterrupt)')"), out
    assert out[1] == "recompiled True", out
    delay, full = map(float, out[2].split()[1:])
    assert delay < 1.0 and delay < full / 2, out  # prompt, long before the compile's end


def test_interrupted_read_restarts_the_helper(monkeypatch):
    """KeyboardInterrupt while waiting for the bytecode reader stops the
    helper (its late answer would be read as the next request's); the next
    read starts a fresh one."""
    if not isolate.enabled():
        pytest.skip("STABLEHLO_REF_ISOLATE=0")
    import jax
    import jax.numpy as jnp
    from jax._src.interpreters import mlir
    data = mlir.module_to_bytecode(
        jax.jit(lambda x: x + 1).lower(jnp.ones(3))._lowering.stablehlo())
    data += b""  # a distinct object; digests decide the cache
    isolate._ACCEPTED.clear()
    isolate.prestart()
    proc = isolate._PROC

    def interrupted(p):
        raise KeyboardInterrupt
    monkeypatch.setattr(isolate, "_reply", interrupted)
    with pytest.raises(KeyboardInterrupt):
        isolate.check_bytecode(data)
    assert isolate._PROC is None and proc.poll() is not None  # stopped
    monkeypatch.undo()
    assert isolate.check_bytecode(data) == "bytecode"
    assert isolate._PROC is not None and isolate._PROC is not proc


def test_helper_ignores_ctrl_c():
    """Ctrl-C in a terminal reaches the whole process group; the helper
    leaves the decision to its parent."""
    if not isolate.enabled():
        pytest.skip("STABLEHLO_REF_ISOLATE=0")
    import signal
    import time

    import jax
    import jax.numpy as jnp
    from jax._src.interpreters import mlir
    isolate.prestart()
    proc = isolate._PROC
    time.sleep(1.0)  # past its start-up (Python's own handler is set then)
    os.kill(proc.pid, signal.SIGINT)
    time.sleep(0.5)
    assert proc.poll() is None
    isolate._ACCEPTED.clear()
    data = mlir.module_to_bytecode(
        jax.jit(lambda x: x * 3).lower(jnp.ones(2))._lowering.stablehlo())
    assert isolate.check_bytecode(data) == "bytecode"
    assert isolate._PROC is proc


def test_portable_artifact_of_a_big_program():
    """The dialect section follows the string section, which grows with the
    program: a portable artifact with 3000 functions is still recognised
    (JAX's artifacts of big programs were read as plain bytecode and failed
    with "module has no func.func")."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    import stablehlo_interpreter as si
    from stablehlo_interpreter.loader import new_context
    funcs = "\n".join(
        f"  func.func private @a_function_with_a_long_name_{i}(%x: tensor<f32>) -> tensor<f32> {{\n"
        f"    return %x : tensor<f32>\n  }}" for i in range(3000))
    text = (f"module {{\n{funcs}\n  func.func public @main(%x: tensor<f32>) -> tensor<f32> {{\n"
            "    %0 = func.call @a_function_with_a_long_name_2999(%x) : (tensor<f32>) -> "
            "tensor<f32>\n    return %0 : tensor<f32>\n  }\n}")
    with new_context():
        module = ir.Module.parse(text)
        data = stablehlo.serialize_portable_artifact(module, stablehlo.get_current_version())
    assert data.find(b"vhlo\x00") > 65536  # past where it used to be looked for
    assert isolate.bytecode_dialects(data) == ["builtin", "vhlo"]
    assert isolate.is_portable_artifact(data)
    import numpy as np
    assert si.compile(data).run(np.float32(2.5))[0] == np.float32(2.5)
    # Plain bytecode, and bytes that are not bytecode.
    with new_context():
        plain = ir.Module.parse("func.func @main(%x: tensor<f32>) -> tensor<f32> {\n"
                                "  %0 = stablehlo.abs %x : tensor<f32>\n"
                                "  return %0 : tensor<f32>\n}")
        import io
        buf = io.BytesIO()
        plain.operation.write_bytecode(buf)
    assert isolate.bytecode_dialects(buf.getvalue()) == ["builtin", "func", "stablehlo"]
    assert not isolate.is_portable_artifact(buf.getvalue())
    assert not isolate.is_portable_artifact(b"ML\xefR\x00")
