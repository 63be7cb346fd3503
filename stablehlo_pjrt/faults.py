"""Fault injection: break one thing in this plugin, to prove that the plugin
checker (stablehlo_pjrt.checker) catches and localizes it.

Off by default. ``STABLEHLO_REF_FAULT`` names one fault, read once when the
API table is built; when it is unset :func:`install` returns the handler
table unchanged, so there is no cost at all:

    op:NAME            the kernel of stablehlo.NAME returns wrong values
                       (floats * (1 + 2**-6) + 2**-6, integers + 1, bools
                       negated); NAME is e.g. tanh, add, dot_general
    transfer_strided   PJRT_Client_BufferFromHostBuffer ignores byte_strides
                       (reads the host data as dense row-major)
    event_never        the event of PJRT_Buffer_ReadyEvent never fires
    wrong_dtype        PJRT_Executable_OutputElementTypes reports f64 where
                       the program returns f32
    compile_crash      PJRT_Client_Compile aborts the process
"""

from __future__ import annotations

import os
import sys

from . import config

ENV = "STABLEHLO_REF_FAULT"
FAULTS = ("op:NAME", "transfer_strided", "event_never", "wrong_dtype", "compile_crash")

_keep = []  # arrays handed to the caller must outlive the call


def install(handlers: dict) -> None:
    """Applies the fault named by $STABLEHLO_REF_FAULT to ``handlers`` (PJRT
    function name -> handler, changed in place); nothing when it is unset."""
    fault = config.FAULT.value().strip()
    if not fault:
        return
    out = handlers
    if fault.startswith("op:"):
        _break_kernel(fault[3:])
        out["PJRT_LoadedExecutable_Execute"] = _marking_execution(
            handlers["PJRT_LoadedExecutable_Execute"])
    elif fault == "transfer_strided":
        out["PJRT_Client_BufferFromHostBuffer"] = _ignore_strides(
            handlers["PJRT_Client_BufferFromHostBuffer"])
    elif fault == "event_never":
        out["PJRT_Buffer_ReadyEvent"] = _never_ready(handlers["PJRT_Buffer_ReadyEvent"])
    elif fault == "wrong_dtype":
        out["PJRT_Executable_OutputElementTypes"] = _f64_outputs(
            handlers["PJRT_Executable_OutputElementTypes"])
    elif fault == "compile_crash":
        out["PJRT_Client_Compile"] = _abort
    else:
        raise ValueError(f"{ENV}={fault!r}: unknown fault; known: {', '.join(FAULTS)}")
    print(f"stablehlo_ref: fault injected: {fault} ({ENV})", file=sys.stderr)


def _break_kernel(name: str) -> None:
    import numpy as np

    import stablehlo_interpreter as shi

    from . import dispatch
    op = name if "." in name else f"stablehlo.{name}"

    def wrong(v):
        v = np.asarray(v)
        if v.dtype == np.bool_:
            return ~v
        if np.issubdtype(v.dtype, np.integer):
            return (v + 1).astype(v.dtype)
        return (v * (1 + 2.0 ** -6) + 2.0 ** -6).astype(v.dtype)

    def faulty(fn):
        def run(*xs):
            r = fn(*xs)
            if not _executing and not dispatch.on_worker():
                # The interpreter used directly (the reference, in the same
                # process as this plugin) stays right: only the plugin is
                # broken (its programs run inside Execute or on its worker).
                return r
            return [wrong(x) for x in r] if isinstance(r, (list, tuple)) else wrong(r)
        return run

    try:
        shi.wrap_kernel(op, faulty)
    except KeyError:
        raise ValueError(f"{ENV}=op:{name}: no kernel named {op}") from None
    except ValueError:
        raise ValueError(f"{ENV}=op:{name}: only ops without regions can be broken") from None


_executing = 0  # > 0 while PJRT_LoadedExecutable_Execute runs (an inline run)


def _marking_execution(h):
    def handler(ptr):
        global _executing
        _executing += 1
        try:
            return h(ptr)
        finally:
            _executing -= 1
    return handler


def _ignore_strides(h):
    from . import _capi as C

    def handler(ptr):
        a = C.Client_BufferFromHostBuffer_Args.from_address(ptr)
        a.byte_strides, a.num_byte_strides = None, 0
        return h(ptr)
    return handler


def _never_ready(h):
    from . import _capi as C
    from . import _shim

    def handler(ptr):
        r = h(ptr)
        a = C.Buffer_ReadyEvent_Args.from_address(ptr)
        a.event = _shim.event_new(False)  # pending, and nothing will set it
        return r
    return handler


def _f64_outputs(h):
    import ctypes

    from . import _capi as C

    def handler(ptr):
        r = h(ptr)
        a = C.Executable_OutputElementTypes_Args.from_address(ptr)
        n = a.num_output_types
        types = (ctypes.c_int * max(1, n))(*(ctypes.c_int * n).from_address(a.output_types))
        for i in range(n):
            if types[i] == C.BufferType.F32:
                types[i] = C.BufferType.F64
        _keep.append(types)
        a.output_types = ctypes.addressof(types)
        return r
    return handler


def _abort(ptr):
    sys.stderr.write("stablehlo_ref: injected fault compile_crash: aborting in "
                     "PJRT_Client_Compile\n")
    sys.stderr.flush()
    os.abort()
