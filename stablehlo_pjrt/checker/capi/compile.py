"""Area ``capi``, group ``compile``: compilation: bad programs and options, other
formats, compile-only.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import numpy as np

from ... import _capi as C
from ... import compat
from ..core import Failed, Unsupported, check
from ..plugin import PluginError, compile_options
from ._common import ADD_ONE, E, _expect_error

if TYPE_CHECKING:
    from ..context import Context

BAD_PROGRAMS = {
    "not_mlir": ("mlir", b"this is not a module"),
    "type_error": ("mlir", b"""module { func.func public @main(%a: tensor<2xf32>) -> tensor<3xf32> {
      return %a : tensor<2xf32> } }"""),
    "unknown_op": ("mlir", b"""module { func.func public @main(%a: tensor<2xf32>) -> tensor<2xf32> {
      %0 = stablehlo.no_such_op %a : tensor<2xf32>
      return %0 : tensor<2xf32> } }"""),
    "unknown_format": ("no-such-format", ADD_ONE.encode()),
    "empty": ("mlir", b""),
}


@check("capi", "compile", params=sorted(BAD_PROGRAMS))
def compile_error(ctx: Context, name: str) -> None:
    """A bad program is an error with a message (INVALID_ARGUMENT for an
    unknown format), never a crash or an executable."""
    fmt, code = BAD_PROGRAMS[name]
    # CompileInvalidProgramFormat (XLA's test): an unknown format is
    # INVALID_ARGUMENT.
    codes = (E.INVALID_ARGUMENT,) if name == "unknown_format" else (
        E.INVALID_ARGUMENT, E.UNIMPLEMENTED, E.FAILED_PRECONDITION, E.INTERNAL, E.UNKNOWN)
    _expect_error(lambda: ctx.client.compile(code, fmt), f"compiling {name}", codes)


@check("capi", "compile")
def bad_compile_options(ctx: Context) -> None:
    """CompileInvalidOption (XLA's test): compile options that are not a
    CompileOptionsProto are INVALID_ARGUMENT."""
    for opts in (b"\xff\xff\xff garbage", b"invalid compile options"):
        _expect_error(lambda: ctx.client.compile(ADD_ONE, options=opts),
                      f"compiling with options {opts!r}", (E.INVALID_ARGUMENT,))


@check("capi", "compile")
def compile_hlo_module(ctx: Context) -> None:
    """CompileXlaComputation (XLA's test): a serialized HloModuleProto
    (format "hlo") of XLA's TupleCreate program compiles; run, its three
    outputs are its inputs (the first plus one). A plugin that takes only
    StableHLO answers UNIMPLEMENTED or INVALID_ARGUMENT: unsupported."""
    xc = compat.jax_internal("lib", "xla_client")
    text = ("func.func public @main(%v1: tensor<f32>, %v2: tensor<3xf32>, "
            "%v3: tensor<2x3xf32>) -> (tensor<f32>, tensor<3xf32>, tensor<2x3xf32>) {\n"
            "  %one = stablehlo.constant dense<1.0> : tensor<f32>\n"
            "  %0 = stablehlo.add %v1, %one : tensor<f32>\n"
            "  return %0, %v2, %v3 : tensor<f32>, tensor<3xf32>, tensor<2x3xf32>\n}\n")
    proto = xc._xla.mlir.mlir_module_to_xla_computation(
        text, use_tuple_args=False, return_tuple=True).as_serialized_hlo_module_proto()
    c = ctx.client
    try:
        exe = c.compile(proto, fmt="hlo")
    except PluginError as e:
        if e.code in (E.UNIMPLEMENTED, E.INVALID_ARGUMENT):
            raise Unsupported(f"format 'hlo': {e}") from None
        raise
    ins = [np.array(2.5, np.float32), np.arange(3, dtype=np.float32),
           np.arange(6, dtype=np.float32).reshape(2, 3)]
    bufs = [c.from_host(x) for x in ins]
    try:
        outs = [c.buffer(h) for h in exe.execute(bufs)[0]]
        got = [o.to_host() for o in outs]
        for o in outs:
            o.destroy()
        want = [ins[0] + 1, ins[1], ins[2]]
        if len(got) != 3 or any(g.shape != w.shape or not np.array_equal(g, w)
                                for g, w in zip(got, want)):
            raise Failed(f"the HLO program gave {got}, expected {want}")
    finally:
        for b in bufs:
            b.destroy()
        exe.destroy()


@check("capi", "compile")
def compile_only_with_client_topology(ctx: Context) -> None:
    """CompileWithSharedTopology (xla/pjrt/plugin/test): PJRT_Compile of a
    pass-through i32 program for the client's own topology
    (PJRT_Client_TopologyDescription) gives an executable with one
    output. Unsupported when the plugin has no compile-only path."""
    c, p = ctx.client, ctx.plugin
    for name in ("PJRT_Client_TopologyDescription", "PJRT_Compile"):
        if not p.has(name):
            raise Unsupported(f"{name} is not in the table")
    topo = p.call("PJRT_Client_TopologyDescription",
                  C.Client_TopologyDescription_Args(client=c.handle)).topology
    code = (b"module { func.func @main(%arg0: tensor<i32>) -> tensor<i32> {\n"
            b"  return %arg0 : tensor<i32> } }")
    code_buf = ctypes.create_string_buffer(code, len(code))
    fmt = ctypes.create_string_buffer(b"mlir", 4)
    prog = C.PJRT_Program(code=ctypes.addressof(code_buf), code_size=len(code),
                          format=ctypes.addressof(fmt), format_size=4)
    prog.struct_size = C.struct_size(C.PJRT_Program)
    opts = compile_options()
    opts_buf = ctypes.create_string_buffer(opts, len(opts))
    try:
        a = p.call("PJRT_Compile", C.Compile_Args(
            topology=topo, program=ctypes.addressof(prog),
            compile_options=ctypes.addressof(opts_buf), compile_options_size=len(opts)))
    except PluginError as e:
        # XLA's CPU plugin of 0.106 answers NOT_FOUND "No compiler factory
        # for platform": it has no compile-only compiler registered.
        if e.code in (E.UNIMPLEMENTED, E.NOT_FOUND):
            raise Unsupported(f"no compile-only path: {e}") from None
        raise
    try:
        n = p.call("PJRT_Executable_NumOutputs", C.Executable_NumOutputs_Args(
            executable=a.executable)).num_outputs
        if n != 1:
            raise Failed(f"the compiled pass-through program has {n} outputs")
    finally:
        p.call("PJRT_Executable_Destroy", C.Executable_Destroy_Args(
            executable=a.executable))
