"""Area ``capi``, group ``executable``: executable metadata, fingerprints and
results of Execute.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import numpy as np

from ... import _capi as C
from ..core import Failed, check
from ..plugin import TYPE_NAMES
from ._common import ADD_ONE, TWO_OUTPUTS

if TYPE_CHECKING:
    from ..context import Context


@check("capi", "executable")
def metadata(ctx: Context) -> None:
    """NumOutputs, OutputElementTypes, OutputDimensions, Name, NumReplicas,
    NumPartitions and AddressableDevices describe the compiled program."""
    c, p = ctx.client, ctx.plugin
    exe = c.compile(TWO_OUTPUTS)
    try:
        if exe.num_outputs() != 3:
            raise Failed(f"NumOutputs {exe.num_outputs()}, expected 3")
        types = exe.output_types()
        want = [C.BufferType.S32, C.BufferType.F32, C.BufferType.PRED]
        if types != want:
            raise Failed(f"OutputElementTypes {[TYPE_NAMES.get(t) for t in types]}, "
                         f"expected {[TYPE_NAMES[t] for t in want]}", op="PJRT_Executable_OutputElementTypes")
        dims = exe.output_dims()
        if dims != [(), (3, 2), (2, 3)]:
            raise Failed(f"OutputDimensions {dims}, expected [(), (3, 2), (2, 3)]")
        n = p.call("PJRT_Executable_Name", C.Executable_Name_Args(executable=exe.executable))
        if not C.read_str(n.executable_name, n.executable_name_size):
            raise Failed("empty executable name")
        r = p.call("PJRT_Executable_NumReplicas", C.Executable_NumReplicas_Args(
            executable=exe.executable)).num_replicas
        q = p.call("PJRT_Executable_NumPartitions", C.Executable_NumPartitions_Args(
            executable=exe.executable)).num_partitions
        if (r, q) != (1, 1):
            raise Failed(f"replicas/partitions {(r, q)}, compiled for (1, 1)")
        a = p.call("PJRT_LoadedExecutable_AddressableDevices",
                   C.LoadedExecutable_AddressableDevices_Args(executable=exe.handle))
        if a.num_addressable_devices != 1:
            raise Failed(f"{a.num_addressable_devices} addressable devices, expected 1")
    finally:
        exe.destroy()


@check("capi", "executable")
def output_memory_kinds(ctx: Context) -> None:
    """OutputMemoryKinds: one non-empty kind per output."""
    c, p = ctx.client, ctx.plugin
    exe = c.compile(TWO_OUTPUTS)
    try:
        a = p.call("PJRT_Executable_OutputMemoryKinds",
                   C.Executable_OutputMemoryKinds_Args(executable=exe.executable))
        if a.num_outputs != 3:
            raise Failed(f"{a.num_outputs} memory kinds for 3 outputs")
        ptrs = C.read_pointers(a.memory_kinds, 3)
        sizes = (ctypes.c_size_t * 3).from_address(a.memory_kind_sizes)[:]
        kinds = [C.read_str(x, s) for x, s in zip(ptrs, sizes)]
        if not all(kinds):
            raise Failed(f"empty output memory kind: {kinds}")
    finally:
        exe.destroy()


@check("capi", "executable")
def fingerprint_stable(ctx: Context) -> None:
    """Compiling the same program twice gives the same fingerprint."""
    c = ctx.client
    e1, e2 = c.compile(ADD_ONE), c.compile(ADD_ONE)
    try:
        f1, f2 = e1.fingerprint(), e2.fingerprint()
        if f1 != f2:
            raise Failed(f"fingerprints differ: {f1[:16]!r} vs {f2[:16]!r}")
        e3 = c.compile(TWO_OUTPUTS)
        f3 = e3.fingerprint()
        e3.destroy()
        if f1 and f1 == f3:
            raise Failed("two different programs have the same fingerprint")
    finally:
        e1.destroy()
        e2.destroy()


@check("capi", "executable")
def execute_results(ctx: Context) -> None:
    """Executing a program with several outputs of several types gives the
    reference's values."""
    c = ctx.client
    exe = c.compile(TWO_OUTPUTS)
    x = np.array([[1, -2, 3], [-4, 5, 0]], np.float32)
    a, b = c.from_host(x), c.from_host(np.array(7, np.int32))
    try:
        outs = [c.buffer(h) for h in exe.execute([a, b])[0]]
        got = [o.to_host() for o in outs]
        for o in outs:
            o.destroy()
        want = [np.array(7, np.int32), x.T, x > 0]
        for k, (g, w) in enumerate(zip(got, want)):
            if g.dtype != w.dtype or not np.array_equal(g, w):
                raise Failed(f"output {k}: {g!r}, expected {w!r}")
    finally:
        a.destroy()
        b.destroy()
        exe.destroy()
