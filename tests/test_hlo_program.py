"""PJRT program formats `hlo` / `hlo_with_config` (what PyTorch/XLA sends),
through the C API without torch: JAX produces the HloModuleProtos.

Also the sweep of the HLO opcodes StableHLO lacks: what XLA's HLO -> StableHLO
converter (jaxlib 0.10.2) makes of each, and that every `custom_call @mhlo.*`
it emits runs, while the ops it refuses are reported at compile time.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import scipy.special as sps
from test_pjrt_capi import call, client, destroy_buffer, event_destroy, execute, from_host, ok, to_host  # noqa: F401

from stablehlo_pjrt import _capi as C
from stablehlo_pjrt import compat


def compile_program(client, code: bytes, fmt: bytes):  # noqa: F811
    code_buf = ctypes.create_string_buffer(code, max(1, len(code)))
    fmt_buf = ctypes.create_string_buffer(fmt, len(fmt))
    prog = C.PJRT_Program(code=ctypes.addressof(code_buf), code_size=len(code),
                          format=ctypes.addressof(fmt_buf), format_size=len(fmt))
    prog.struct_size = C.struct_size(C.PJRT_Program)
    a = C.Client_Compile_Args(client=client, program=ctypes.addressof(prog))
    err = call("PJRT_Client_Compile", a)
    return a.executable, err


def hlo_proto(fn, *args) -> bytes:
    return jax.jit(fn).lower(*args).compiler_ir("hlo").as_serialized_hlo_module_proto()


def hlo_text_proto(body: str, params: str = "p = f32[4] parameter(0)") -> bytes:
    text = f"HloModule m\nENTRY e {{\n {params}\n {body}\n}}\n"
    return compat.hlo_bindings().hlo_module_from_text(text).as_serialized_hlo_module_proto()


def with_config(module: bytes) -> bytes:
    """An HloModuleProtoWithConfig: the module in field 1 (length-delimited)."""
    n, size = len(module), bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        size.append(b | (0x80 if n else 0))
        if not n:
            break
    return b"\x0a" + bytes(size) + module + b"\x12\x00"


def run(client, exe, inputs, out_specs):  # noqa: F811
    bufs = []
    for x, t in inputs:
        b, d = from_host(client, x, t)
        event_destroy(d)
        bufs.append(b)
    outs, err = execute(exe, bufs, len(out_specs))
    assert err is None, err
    res = [to_host(o, dt, shape) for o, (dt, shape) in zip(outs, out_specs)]
    for b in bufs + outs:
        destroy_buffer(b)
    ok("PJRT_LoadedExecutable_Destroy", C.LoadedExecutable_Destroy_Args(executable=exe))
    return res


X = np.array([[0.5, -1.25, 3.0, 0.125], [2.0, 2.0, -0.0, -7.5]], np.float32)


def _f(x, y):
    return jax.lax.top_k(jax.scipy.special.erf(x), 2), jnp.tanh(x) @ x.T + y


@pytest.mark.parametrize("fmt", [b"hlo", b"hlo_with_config"])
def test_jax_hlo_module_runs_through_the_c_api(client, fmt):  # noqa: F811
    proto = hlo_proto(_f, X, np.float32(1))
    code = proto if fmt == b"hlo" else with_config(proto)
    exe, err = compile_program(client, code, fmt)
    assert err is None, err
    (vals, idx, mm) = run(client, exe, [(X, C.BufferType.F32), (np.array(1, np.float32), C.BufferType.F32)],
                          [(np.float32, (2, 2)), (np.int32, (2, 2)), (np.float32, (2, 2))])
    # erf: float64 scipy rounded once, as chlo.erf; top_k: stable, largest first.
    e = sps.erf(X.astype(np.float64)).astype(np.float32)
    order = np.argsort(-e, axis=-1, kind="stable")[:, :2]
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(vals, np.take_along_axis(e, order, -1))
    np.testing.assert_allclose(mm, np.tanh(X) @ X.T + 1, rtol=1e-6)


def test_pjrt_trace_shows_the_converted_stablehlo(tmp_path):
    """The trace logs the StableHLO that runs (custom_call @mhlo.erf), not the HLO."""
    script = tmp_path / "t.py"
    script.write_text(
        "import sys; sys.path[:0] = [%r, %r]\n" % (os.path.dirname(__file__), os.getcwd())
        + "from test_hlo_program import *\n"
        "from test_pjrt_capi import ok\n"
        "c = ok('PJRT_Client_Create', C.Client_Create_Args()).client\n"
        "exe, err = compile_program(c, hlo_text_proto('ROOT r = f32[4] erf(p)'), b'hlo')\n"
        "assert err is None, err\n")
    env = dict(os.environ, STABLEHLO_PJRT_TRACE="1")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    log = r.stdout + r.stderr
    assert "PJRT_Client_Compile" in log
    assert "stablehlo.custom_call @mhlo.erf" in log


# ---------------------------------------------------------------------------
# Sweep: HLO opcodes without a StableHLO op of their own.
# ---------------------------------------------------------------------------

# Converted to plain StableHLO ops (checked by running them).
PLAIN = {
    "tan": ("ROOT r = f32[4] tan(p)", np.tan),
    "cbrt": ("ROOT r = f32[4] cbrt(p)", np.cbrt),
    "logistic": ("ROOT r = f32[4] logistic(p)", lambda x: 1 / (1 + np.exp(-x))),
    "erf": ("ROOT r = f32[4] erf(p)", sps.erf),                   # -> custom_call @mhlo.erf
    "bitcast": ("ROOT r = f32[4] bitcast(p)", lambda x: x),      # same shape: folded away
    "opt-barrier": ("ROOT r = f32[4] opt-barrier(p)", lambda x: x),
}

# XLA-private ops the converter refuses ("failed to legalize operation ...").
REFUSED = {
    "copy": "ROOT r = f32[4] copy(p)",
    "add-dependency": "t = token[] after-all()\n ROOT r = f32[4] add-dependency(p, t)",
    "domain": ('ROOT r = f32[4] domain(p), domain={kind="sharding", '
               'entry={maximal device=0}, exit={maximal device=1}}'),
    "stochastic-convert": "q = u32[4] parameter(1)\n ROOT r = bf16[4] stochastic-convert(p, q)",
    "rng-get-and-update-state": "ROOT r = u64[2] rng-get-and-update-state(), delta=1",
}

V = np.array([0.25, -1.5, 2.0, 0.0], np.float32)


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_sweep_converted_ops_run(client, name):  # noqa: F811
    body, ref = PLAIN[name]
    exe, err = compile_program(client, hlo_text_proto(body), b"hlo")
    assert err is None, err
    (out,) = run(client, exe, [(V, C.BufferType.F32)], [(np.float32, (4,))])
    np.testing.assert_allclose(out, ref(V.astype(np.float64)).astype(np.float32), rtol=2e-7)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype,btype", [(np.float32, C.BufferType.F32),
                                         (ml_dtypes.bfloat16, C.BufferType.BF16),
                                         (np.int32, C.BufferType.S32)])
def test_sweep_topk_runs(client, largest, dtype, btype):  # noqa: F811
    ty = {np.float32: "f32", ml_dtypes.bfloat16: "bf16", np.int32: "s32"}[dtype]
    body = f"ROOT r = ({ty}[2,2], s32[2,2]) topk(p), k=2, largest={str(largest).lower()}"
    exe, err = compile_program(client, hlo_text_proto(body, f"p = {ty}[2,5] parameter(0)"), b"hlo")
    assert err is None, err
    x = np.array([[3, 1, 3, -2, 0], [5, 7, 7, -1, 7]]).astype(dtype)
    vals, idx = run(client, exe, [(x, btype)], [(dtype, (2, 2)), (np.int32, (2, 2))])
    key = -x.astype(np.float64) if largest else x.astype(np.float64)
    order = np.argsort(key, axis=-1, kind="stable")[:, :2]
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(vals, np.take_along_axis(x, order, -1))


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_sweep_refused_ops_are_reported_at_compile(client, name):  # noqa: F811
    params = "p = f32[4] parameter(0)"
    _, err = compile_program(client, hlo_text_proto(REFUSED[name], params), b"hlo")
    assert err is not None and err[0] == C.ErrorCode.UNIMPLEMENTED
    assert "XLA-private op" in err[1] and "'hlo'" in err[1]


def test_bad_hlo_bytes_are_an_argument_error(client):  # noqa: F811
    for code in (b"", b"garbage\x00\x01"):
        _, err = compile_program(client, code, b"hlo")
        assert err[0] == C.ErrorCode.INVALID_ARGUMENT and "HloModuleProto" in err[1]
    _, err = compile_program(client, b"\x0a\x05ab", b"hlo_with_config")
    assert err[0] == C.ErrorCode.INVALID_ARGUMENT and "truncated" in err[1]


def test_gspmd_sharding_strings_become_shardings():
    """GSPMD mhlo.sharding (programs converted from HLO: PyTorch/XLA SPMD):
    which device holds which tile, as XLA's tile assignment says."""
    from stablehlo_interpreter import ShardingError, parse_gspmd_sharding
    g = np.arange(16, dtype=np.float32).reshape(4, 4)
    # 2x2 tiles, devices listed in tile order 0,2,1,3: tile (0,1) on device 2.
    sh = parse_gspmd_sharding("{devices=[2,2]0,2,1,3}", 4)
    parts = sh.split(g, [0, 1, 2, 3])
    np.testing.assert_array_equal(parts[2], g[:2, 2:])
    np.testing.assert_array_equal(parts[1], g[2:, :2])
    np.testing.assert_array_equal(sh.assemble(parts, [0, 1, 2, 3], (4, 4), np.float32), g)
    # Rows split in 2, each half replicated on 2 devices (iota form, transposed).
    sh = parse_gspmd_sharding("{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}", 4)
    parts = sh.split(g, [0, 1, 2, 3])
    for dev, rows in ((0, slice(0, 2)), (2, slice(0, 2)), (1, slice(2, 4)), (3, slice(2, 4))):
        np.testing.assert_array_equal(parts[dev], g[rows])
    assert parse_gspmd_sharding("{replicated}", 4) is None
    assert parse_gspmd_sharding("{maximal device=1}", 4) is None
    with pytest.raises(ShardingError, match="partitions"):
        parse_gspmd_sharding("{devices=[2,1]0,1}", 4)
    with pytest.raises(ShardingError, match="manual"):
        parse_gspmd_sharding("{manual}", 4)


def test_optimized_program_config_round_trip():
    """hlo_program.with_config wraps a module as HloModuleProtoWithConfig
    (what PJRT_Executable_OptimizedProgram hands out): the module comes back
    out of it as sent, and a module without a host_program_shape gets no
    config (jaxlib aborts on a config without an entry layout)."""
    from stablehlo_pjrt.hlo_program import _module_of_config_proto, with_config
    module = hlo_proto(lambda a: a * 2, np.ones(3, np.float32))
    wrapped = with_config(module, 1, 2)
    assert wrapped is not None and _module_of_config_proto(wrapped) == module
    assert with_config(b"\x0a\x03abc", 1, 1) is None   # a name (field 1), no field 4
    assert with_config(b"\x0a\x09abc", 1, 1) is None   # truncated
