"""Hostile-input hardening (issue 13): every finding reproduced as a test.

Findings that aborted the process run in a subprocess: the assertion is that
the process exits normally (no signal) with the expected typed error. The
files in tests/hardening_corpus/ are the fuzz reproducers (mutated bytecode
that aborted, segfaulted or hung the MLIR reader); tests/fuzz/ keeps the
fuzzer itself.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import stablehlo_interpreter as shi

CORPUS = Path(__file__).resolve().parent / "hardening_corpus"


def run_py(code, env=None, timeout=240):
    e = dict(os.environ)
    e.update({"JAX_PLATFORMS": "cpu", **(env or {})})
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=timeout, env=e)
    assert p.returncode >= 0, f"killed by signal {-p.returncode}: {p.stderr[-2000:]}"
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


# --------------------------------------------------------------------------
# 1. Never abort


def test_complex_dense_attribute_in_a_dictionary_does_not_abort():
    # Real JAX reaches it: ffi_call attributes land in mhlo.backend_config.
    out = run_py("""
        import jax, numpy as np
        import stablehlo_interpreter as shi
        def f(x):
            return jax.ffi.ffi_call("x", jax.ShapeDtypeStruct(x.shape, x.dtype))(
                x, myattr=np.array([1 + 2j]))
        text = jax.jit(f).lower(np.ones(3, np.float32)).as_text()
        try:
            shi.compile(text)
        except shi.UnsupportedOpsError as e:
            print("unsupported", e.unsupported[0][2])
    """)
    assert "unsupported unknown custom_call target @x" in out


def test_complex_dense_attribute_in_a_dictionary_is_decoded():
    from jaxlib.mlir import ir

    from stablehlo_interpreter.attrs import decode
    from stablehlo_interpreter.loader import MLIR_LOCK, new_context
    with MLIR_LOCK, new_context():
        a = ir.Attribute.parse("{a = 1 : i32, b = {c = dense<[(1.0,2.0), (3.0,-4.0)]> : "
                               "tensor<2xcomplex<f32>>}}")
        d = decode(a)
    assert d["a"] == 1
    assert d["b"]["c"].dtype == np.complex64
    assert d["b"]["c"].tolist() == [1 + 2j, 3 - 4j]


def test_complex_attribute_on_the_plugin_is_an_unimplemented_error():
    out = run_py("""
        import jax, numpy as np
        def f(x):
            return jax.ffi.ffi_call("x", jax.ShapeDtypeStruct(x.shape, x.dtype))(
                x, myattr=np.array([1 + 2j]))
        try:
            jax.jit(f)(np.ones(3, np.float32))
        except Exception as e:
            print(type(e).__name__, str(e)[:300])
    """, env={"JAX_PLATFORMS": "stablehlo_ref"})
    assert "UNIMPLEMENTED" in out and "custom_call target @x" in out


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.mlirbc")), ids=lambda p: p.name)
def test_corpus_bytecode_is_a_load_error_not_a_crash(path):
    # Before: aborts (std::terminate from the bindings), a segfault and
    # hangs inside the MLIR bytecode reader, most in the loader's fallback
    # that re-parsed rejected bytes.
    out = run_py(f"""
        import stablehlo_interpreter as shi
        data = open({str(path)!r}, "rb").read()
        try:
            shi.compile(data)
            print("compiled")
        except shi.InterpreterError as e:
            print(type(e).__name__, str(e).splitlines()[0][:300])
    """, env={"STABLEHLO_REF_ISOLATE_TIMEOUT": "15"})
    assert out.startswith(("LoadError", "CompileError", "UnsupportedOpsError", "compiled"))


def test_text_attribute_name_that_is_not_utf8_is_a_load_error():
    # Before: the process terminated (nanobind's str conversion of the name)
    # when the compiler read the dictionary key "\\FF \\t\\00c"; found by the
    # hypothesis-drawn attribute fuzz kind. UTF-8 escapes stay fine.
    out = run_py(f"""
        import stablehlo_interpreter as shi
        try:
            shi.compile(open({str(CORPUS / "attr_nonutf8_dictkey.mlir")!r}).read())
        except shi.InterpreterError as e:
            print(type(e).__name__, str(e).splitlines()[0][:300])
    """)
    assert out.startswith("LoadError") and "not valid UTF-8" in out and ":2:" in out
    ok = '{"\\C3\\A9" = 1 : i64}'
    text = (CORPUS / "attr_nonutf8_dictkey.mlir").read_text()
    text = text.replace(text[text.index("{\"\\FF"):text.index(", api_version")], ok)
    with pytest.raises(shi.InterpreterError, match="unknown custom_call target"):
        shi.compile(text)


def test_nonutf8_function_name_is_a_compile_error():
    with pytest.raises(shi.InterpreterError, match="not valid UTF-8|could not read"):
        shi.compile((CORPUS / "bytecode_nonutf8_name_214.mlirbc").read_bytes())


def test_bytecode_is_never_parsed_as_text():
    from stablehlo_interpreter import loader
    src = (CORPUS / "bytecode_abort_25.mlirbc").read_bytes()
    with pytest.raises(shi.LoadError) as e:
        loader.load(src)
    assert "as MLIR bytecode" not in str(e.value)  # the old fallback's wording
    assert "could not read MLIR bytecode" in str(e.value)



def test_portable_artifact_with_a_large_constant_is_read_as_one():
    """StableHLO's writer puts the string section (which names the vhlo
    dialect) after the attributes: with a 100x100 f64 constant it starts past
    byte 65,536, where the old prefix search stopped, and the artifact was read
    as plain bytecode ("module has no func.func"). Found by the plugin
    checker's programs area (8 conformance programs)."""
    from jaxlib.mlir.dialects import stablehlo

    from stablehlo_interpreter import isolate
    values = np.arange(100 * 100, dtype=np.float64).reshape(100, 100) / 7
    dense = ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in values)
    text = ("func.func @main() -> tensor<100x100xf64> {\n"
            f"  %0 = stablehlo.constant dense<[{dense}]> : tensor<100x100xf64>\n"
            "  return %0 : tensor<100x100xf64>\n}\n")
    art = stablehlo.serialize_portable_artifact_str(text, "1.0.0")
    assert art.find(b"vhlo\x00") > 65536  # the case the prefix search missed
    assert isolate.is_portable_artifact(art)
    np.testing.assert_array_equal(shi.compile(art).run()[0], values)

def _nested_ifs(n):
    open_ = '%r = "stablehlo.if"(%p) ({\n'
    close = ('}, {\n %c = stablehlo.constant dense<2.0> : tensor<f32>\n'
             ' stablehlo.return %c : tensor<f32>\n'
             '}) : (tensor<i1>) -> tensor<f32>\n stablehlo.return %r : tensor<f32>\n')
    core = '%r = stablehlo.constant dense<1.0> : tensor<f32>\n stablehlo.return %r : tensor<f32>\n'
    body = open_ * n + core + close * n
    body = body[:body.rfind("stablehlo.return %r")] + "return %r : tensor<f32>\n"
    return "func.func @main(%p: tensor<i1>) -> tensor<f32> {\n" + body + "}\n"


def test_deep_nesting_is_refused_before_parsing():
    # Before: ~2,500 nested regions segfaulted MLIR's parser.
    out = run_py(f"""
        import stablehlo_interpreter as shi
        import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_hardening import _nested_ifs
        try:
            shi.compile(_nested_ifs(3000))
        except shi.LoadError as e:
            print(e)
    """)
    assert "nest deeper than" in out


def test_moderate_nesting_still_runs():
    p = shi.compile(_nested_ifs(150))
    assert p.run(np.array(True))[0] == 1.0


def _serialized(meta_code=None):
    from stablehlo_pjrt.executable import CompileOptions, compile_program
    code = meta_code or ("func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
                         "  %0 = stablehlo.add %a, %a : tensor<2xf32>\n"
                         "  return %0 : tensor<2xf32>\n}\n").encode()
    return compile_program(code, "mlir", CompileOptions(b"")).serialize()


def test_serialized_executable_roundtrip_and_envelope():
    from stablehlo_pjrt.error import PjrtError
    from stablehlo_pjrt.executable import parse_serialized
    blob = _serialized()
    fmt, options, code = parse_serialized(blob)
    assert fmt == "mlir" and b"stablehlo.add" in code
    rng = np.random.default_rng(0)
    for _ in range(200):
        b = bytearray(blob)
        i = int(rng.integers(len(b)))
        b[i] ^= 1 << int(rng.integers(8))
        with pytest.raises(PjrtError) as e:
            parse_serialized(bytes(b))
        assert e.value.pjrt_code == 3  # INVALID_ARGUMENT
    for cut in (0, 10, 40, len(blob) - 1):
        with pytest.raises(PjrtError, match="truncated|corrupt|not a serialized"):
            parse_serialized(blob[:cut])


def test_bitflipped_executables_through_the_c_api_do_not_abort():
    # Before: 6 of 200 bit-flipped serialized executables aborted
    # PJRT_Executable_DeserializeAndLoad.
    out = run_py("""
        import ctypes, numpy as np
        from stablehlo_pjrt import _capi as C, _shim, table
        from stablehlo_pjrt.executable import CompileOptions, compile_program
        table.build_api()
        API = C.PJRT_Api.from_address(_shim.api_address()[0])
        FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
        def call(name, args):
            args.struct_size = C.struct_size(type(args))
            err = FN(getattr(API, name))(ctypes.addressof(args))
            return _shim.error_info(err) if err else None
        cc = C.Client_Create_Args(); assert call("PJRT_Client_Create", cc) is None
        code = b"func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\\n  return %a : tensor<2xf32>\\n}\\n"
        blob = compile_program(code, "mlir", CompileOptions(b"")).serialize()
        rng = np.random.default_rng(1)
        codes = {}
        for k in range(200):
            b = bytearray(blob)
            for _ in range(int(rng.integers(1, 4))):
                i = int(rng.integers(len(b))); b[i] ^= 1 << int(rng.integers(8))
            buf = ctypes.create_string_buffer(bytes(b), len(b))
            a = C.Executable_DeserializeAndLoad_Args(
                client=cc.client, serialized_executable=ctypes.addressof(buf),
                serialized_executable_size=len(b))
            err = call("PJRT_Executable_DeserializeAndLoad", a)
            codes[err[0] if err else 0] = codes.get(err[0] if err else 0, 0) + 1
        print(codes)
    """)
    assert out.strip() == "{3: 200}"


# --------------------------------------------------------------------------
# 2. Exact arguments

_TWO = ("func.func @main(%a: tensor<f32>, %b: tensor<i32>) -> (tensor<f32>, tensor<i32>) {\n"
        "  return %a, %b : tensor<f32>, tensor<i32>\n}\n")


@pytest.mark.parametrize("args,needle", [
    ((np.int64(10**12), np.int32(1)), "argument #0 (%arg0) of @main: expected tensor<f32>"),
    ((np.float32(1), np.int64(2**40)), "argument #1 (%arg1) of @main: expected tensor<i32>"),
    ((np.float32(1), np.array([1, 2], np.int32)), "argument #1 (%arg1) of @main: expected "
     "tensor<i32>, got tensor<2xi32>"),
    ((np.float32(1), 2**40), "out of range for int32"),
    ((np.float32(1), float("nan")), "nan is not an integer"),
    ((np.float32(1), 1.5), "1.5 is not an integer"),
])
def test_program_run_refuses_mismatched_arguments(args, needle):
    p = shi.compile(_TWO)
    with pytest.raises(shi.ArgumentError) as e:
        p.run(*args)
    assert needle in str(e.value)


@pytest.mark.parametrize("args,needle", [
    ((np.int64(10**12), np.int32(1)), "not exactly representable in float32"),
    ((np.float32(1), np.int64(2**40)), "out of range for int32"),
    ((np.float32(1), np.float64("nan")), "not an integer"),
    ((np.float64(1e300), np.int32(1)), "overflows float32"),
])
def test_checked_cast_refuses_changed_values(args, needle):
    p = shi.compile(_TWO)
    with pytest.raises(shi.ArgumentError, match=needle):
        p.run(*args, cast=True)


def test_checked_cast_converts_exact_values():
    p = shi.compile(_TWO)
    a, b = p.run(np.int64(2**24), np.float64(-7.0), cast=True)
    assert a.dtype == np.float32 and a == 2**24
    assert b.dtype == np.int32 and b == -7
    a, b = p.run(1.5, 3)  # Python scalars have no dtype: checked conversion
    assert a == 1.5 and b == 3


def test_plugin_arguments_are_typed_and_unaffected():
    # The plugin's buffers carry their dtype: conforming arrays pass
    # through Program.run's first comparison unchanged (same object).
    p = shi.compile("func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {\n"
                    "  return %a : tensor<3xf32>\n}\n")
    x = np.arange(3, dtype=np.float32)
    assert p.run(x)[0] is x


# --------------------------------------------------------------------------
# 3. Bounded resources


def test_compile_is_linear_in_the_number_of_functions():
    # Before: func.call's builder scanned every function of the module: 4,000
    # functions took 36 s. Now the module's functions are indexed once, so
    # call sites look callees up in a dict (counted here, not timed).
    from stablehlo_interpreter import compiler
    n = 300
    text = _chain(n)
    calls = []
    orig = compiler._Compiler.function_ops

    def counting(self):
        calls.append(self.__dict__.get("_function_ops") is None)
        return orig(self)
    compiler._Compiler.function_ops = counting
    try:
        p = shi.compile(text)
    finally:
        compiler._Compiler.function_ops = orig
    assert sum(calls) == 1 and len(calls) == n  # built once, looked up per call site
    assert p.run(np.float32(1.5))[0] == 3.0


def _chain(n):
    fs = ["func.func @main(%a: tensor<f32>) -> tensor<f32> {\n"
          " %0 = func.call @f0(%a) : (tensor<f32>) -> tensor<f32>\n return %0 : tensor<f32>\n}"]
    for i in range(n):
        if i + 1 < n:
            body = f" %0 = func.call @f{i + 1}(%a) : (tensor<f32>) -> tensor<f32>\n"
        else:
            body = " %0 = stablehlo.add %a, %a : tensor<f32>\n"
        fs.append(f"func.func private @f{i}(%a: tensor<f32>) -> tensor<f32> {{\n{body}"
                  " return %0 : tensor<f32>\n}")
    return "\n".join(fs) + "\n"


def test_a_1000_deep_call_chain_runs():
    # Before: "recursion too deep" at a few hundred levels.
    p = shi.compile(_chain(1000))
    assert p.run(np.float32(2.0))[0] == 4.0


def test_runaway_recursion_is_an_error_not_a_crash():
    out = run_py("""
        import numpy as np, stablehlo_interpreter as shi
        p = shi.compile('''
        func.func @main(%a: tensor<f32>) -> tensor<f32> {
          %0 = func.call @main(%a) : (tensor<f32>) -> tensor<f32>
          return %0 : tensor<f32>
        }''')
        try:
            p.run(np.float32(1))
        except shi.ExecutionError as e:
            print(e)
    """)
    assert "recursion too deep" in out


def test_run_out_refuses_an_absurd_broadcast(tmp_path):
    # Before: a stride-0 broadcast result was written at its logical size
    # (~4 TB for this one).
    m = tmp_path / "big.mlir"
    m.write_text("func.func @main() -> tensor<1024x1024x1024x1024xf32> {\n"
                 "  %c = stablehlo.constant dense<1.0> : tensor<f32>\n"
                 "  %0 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> "
                 "tensor<1024x1024x1024x1024xf32>\n"
                 "  return %0 : tensor<1024x1024x1024x1024xf32>\n}\n")
    out = tmp_path / "o.npz"
    p = subprocess.run([sys.executable, "-m", "stablehlo_interpreter.cli", "run", str(m),
                        "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "--max-out-bytes" in p.stderr and "(1024, 1024, 1024, 1024)" in p.stderr
    assert not out.exists()


# --------------------------------------------------------------------------
# 4. Probe files


def test_probe_id_cannot_inject_index_rows(tmp_path, monkeypatch):
    from stablehlo_interpreter.ops import interpreter_ops as io_ops
    secret = tmp_path / "elsewhere"
    secret.mkdir()
    np.save(secret / "evil.npy", np.array([9.0, 9.0], np.float32))
    d = tmp_path / "probes"
    monkeypatch.setenv("STABLEHLO_REF_PROBE_DIR", str(d))
    evil = f'x,tensor<2xf32>,{d}/probe1.npy\\nq,tensor<2xf32>,{secret}/evil.npy\\nz'
    text = ("func.func @main() -> tensor<2xf32> {\n"
            "  %0 = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32>\n"
            f'  %1 = "interpreter.probe"(%0) {{probe_id = "{evil}"}} : '
            "(tensor<2xf32>) -> tensor<2xf32>\n"
            "  return %1 : tensor<2xf32>\n}\n")
    shi.compile(text).run()
    import csv
    rows = list(csv.reader(open(d / "index.csv", newline="")))
    assert len(rows) == 1 and rows[0][2] == str(d / "probe1.npy")
    assert rows[0][0].count("\n") == 2  # the id stays one field
    from stablehlo_interpreter.compiler import Context
    from stablehlo_interpreter.types import TensorType
    t = TensorType((2,), np.float32, "f32")
    ctx = Context(None)
    # A row naming a file the plugin did not make is never loaded.
    with open(d / "index.csv", "a", newline="") as f:
        csv.writer(f, lineterminator="\n").writerow(["q", repr(t), str(secret / "evil.npy")])
    assert io_ops.load_probe(ctx, "q", 0, t) is None
    stored_id = evil.replace("\\n", "\n")  # MLIR unescapes \\n in the string
    assert io_ops.load_probe(ctx, stored_id, 0, t).tolist() == [1.0, 2.0]


# --------------------------------------------------------------------------
# 5. Errors


def test_load_error_carries_mlirs_reason():
    with pytest.raises(shi.LoadError) as e:
        shi.compile("func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
                    "  %0 = stablehlo.add %a, %a : tensor<3xf32>\n  return %0 : tensor<2xf32>\n}")
    assert "use of value '%a' expects different type" in str(e.value)


def test_object_arrays_in_npz_are_a_user_error(tmp_path):
    from stablehlo_interpreter import cli
    f = tmp_path / "o.npz"
    np.savez(f, np.array([{"a": 1}], dtype=object), np.int32(1))
    func = shi.compile(_TWO).function()
    with pytest.raises(cli.UserError, match="cannot read arguments"):
        cli.load_args(str(f), func)


def test_locations_show_the_users_frame_first():
    loc = ('loc("jit(f)/sin"(callsite("inner"("/site-packages/jax/_src/core.py":3:11 to :21) '
           'at callsite("test_x"("/home/me/test_mine.py":12:4) at '
           'callsite("pytest_pyfunc_call"("/usr/lib/site-packages/_pytest/python.py":159:15) '
           'at "main"("/usr/lib/site-packages/pluggy/_callers.py":103:23))))))')
    from stablehlo_interpreter.compiler import format_location
    assert format_location(loc) == "/home/me/test_mine.py:12:4 (in test_x) [jit(f)/sin]"
    assert format_location('loc("-":3:8)', "m.mlir") == "m.mlir:3:8"


def test_full_location_chain_on_request(monkeypatch):
    from stablehlo_interpreter.compiler import format_location
    loc = 'loc(callsite("f"("/a/b.py":1:2) at "g"("/a/c.py":3:4)))'
    assert format_location(loc) == "/a/b.py:1:2 (in f)"
    monkeypatch.setenv("STABLEHLO_REF_FULL_LOCATIONS", "1")
    assert "callsite(" in format_location(loc)


def test_unsupported_op_in_a_jax_program_names_the_users_line():
    out = run_py("""
        import jax, numpy as np, stablehlo_interpreter as shi
        def f(x):
            return jax.ffi.ffi_call("nope", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
        text = jax.jit(f).lower(np.ones(3, np.float32)).as_text(debug_info=True)
        try:
            shi.compile(text)
        except shi.UnsupportedOpsError as e:
            print(e.unsupported[0][1])
    """)
    assert out.strip().startswith("<string>:") or ":4:" in out
    assert "callsite" not in out and len(out) < 200
