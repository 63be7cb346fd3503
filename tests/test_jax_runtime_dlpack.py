"""DLPack on stablehlo_ref compared with XLA CPU (scenarios in
runtime_scenarios.py).

What is the same: ``np.asarray(x)`` and ``memoryview(x)`` are zero-copy
read-only views; a view keeps the memory after ``x.delete()``; a donation of
a buffer with a live view copies instead (the input stays alive, the view
unchanged); importing a row-major numpy array or torch tensor is zero-copy,
with ``copy=True`` a copy.

What differs, pinned here so that a JAX that lifts its restriction shows up:
JAX refuses ``x.__dlpack__()`` (jaxlib: "cannot be used as a DLPack device")
and ``__dlpack_device__`` (so ``np.from_dlpack(x)``, ``torch.from_dlpack(x)``,
``jax.dlpack.from_dlpack(x)``) for platforms other than cpu/gpu, before the
plugin is asked; ``stablehlo_pjrt.dlpack_view(x)`` is the zero-copy route.
``jax.dlpack.from_dlpack(obj, device=stablehlo_ref_device)`` goes through the
CPU backend (a copy; ``copy=False`` refused); ``stablehlo_pjrt.from_dlpack``
is zero-copy. Transposed tensors are copied (CPU views them with a custom
layout)."""

import inspect

import pytest
import runtime_scenarios as rs

# The scenarios compare numpy, torch and JAX on the same arrays: without torch
# (the README's `.[test]` install) there is nothing to compare against. CI
# installs `.[test,torch]`, so they always run there.
pytest.importorskip("torch")

NAMES = ["dlpack_export", "dlpack_import", "dlpack_lifetime"]
REFUSED_DEVICE = ("BufferError: __dlpack__ device only supported for CPU and GPU, got "
                  "platform: stablehlo_ref")
REFUSED_EXPORT = ("JaxRuntimeError: INVALID_ARGUMENT: Device stablehlo_ref:0 cannot be used "
                  "as a DLPack device.")


@pytest.fixture(scope="module")
def results():
    return rs.run_both(NAMES, devices=1)


def test_export_like_cpu_where_jax_allows(results):
    r, c = rs.values_of(results, "dlpack_export")
    x = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert r["asarray"] == c["asarray"] == [True, False, x]
    assert r["memoryview"] == c["memoryview"] == [True, x]
    assert r["np_from_dlpack_cpu"] == c["np_from_dlpack_cpu"] == x
    # The zero-copy route (JAX's own calls on CPU, the plugin's view here).
    assert r["view"] == c["view"]
    assert r["view"]["numpy"] == [True, False, x] and r["view"]["torch"] == [True, x]
    assert r["view"]["jax"] == ["cpu", x]
    assert r["pinned_host"] == c["pinned_host"] == [True, [0, 1, 2]]
    assert r["bfloat16"] == c["bfloat16"] == [1.0, 2.0]


def test_export_refused_by_jax(results):
    r, c = rs.values_of(results, "dlpack_export")
    assert c["dunder_dlpack"] == "PyCapsule"
    assert c["np_from_dlpack"] == c["torch_from_dlpack"] == c["jax_from_dlpack"] \
        == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert r["dunder_dlpack"] == REFUSED_EXPORT
    assert r["np_from_dlpack"] == REFUSED_EXPORT
    assert r["torch_from_dlpack"] == REFUSED_DEVICE
    assert r["jax_from_dlpack"] == REFUSED_DEVICE


def test_import_zero_copy(results):
    r, c = rs.values_of(results, "dlpack_import")
    a = [float(i) for i in range(8)]
    assert r["numpy"] == c["numpy"] == [True, "device", a]
    assert r["torch"] == c["torch"]
    assert r["torch"][0] is True
    t = [[float(4 * i + j) for j in range(4)] for i in range(3)]
    assert r["torch_transposed"] == c["torch_transposed"] == [list(col) for col in zip(*t)]
    # copy=True copies (the array API's rule). On XLA CPU jaxlib's copy path
    # asks for a kMutableZeroCopy host buffer, which XLA CPU aliases when the
    # memory is aligned: there copy=True shares memory (a JAX bug).
    assert r["copy"] == [False, a]
    assert c["copy"] == [True, a]
    assert r["dtypes"] == c["dtypes"] == ["bool", "int8", "uint16", "float32", "complex64",
                                          "bfloat16"]
    assert r["in_jit"] == c["in_jit"] == [2 * v for v in a]
    assert r["public"] == c["public"] == a


def test_import_differences(results):
    r, c = rs.values_of(results, "dlpack_import")
    # CPU views a transposed tensor with a custom layout; stablehlo_ref
    # buffers are row-major, so that needs a copy, which copy=False refuses.
    assert c["transposed_no_copy"] == r["torch_transposed"]
    assert r["transposed_no_copy"].startswith(
        "ValueError: stablehlo_pjrt.from_dlpack: the array is not in row-major order")
    # JAX imports onto its CPU device, then copies to another device.
    assert c["public_no_copy"] == r["public"]
    # An address that is not 64-byte aligned: XLA CPU must copy; the plugin views it.
    assert r["unaligned_no_copy"] == [True]
    assert c["unaligned_no_copy"].startswith(
        "ValueError: Specified input which requires a copy since the source data buffer is "
        "not aligned to 64 bytes."), c["unaligned_no_copy"]
    assert r["public_no_copy"].startswith("ValueError: Specified device=StablehloRefDevice(id=0) "
                                          "which requires a copy")


def test_views_outlive_and_block_donation_like_cpu(results):
    r, c = rs.values_of(results, "dlpack_lifetime")
    assert r == c
    assert r["view_after_delete"] == [0.0, 1.0, 2.0, 3.0]
    assert r["donate_with_view"] == [False, [1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 2.0, 3.0]]
    assert r["donate_after_view"] == [False, [1.0, 2.0, 3.0, 4.0], True]
    assert r["torch_view_and_in_place"] == [False, [0.0] * 6, [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]]


def test_without_a_cpu_backend():
    """JAX_PLATFORMS=stablehlo_ref: JAX's import needs its CPU backend; the
    plugin's does not."""
    rec = rs.run("stablehlo_ref_only", ["dlpack_import"], devices=1)["dlpack_import"]
    assert rec["error"] == "RuntimeError: Unknown backend cpu. Available backends are " \
        "['stablehlo_ref']", rec["error"]
    rec = rs.run("stablehlo_ref_only", ["dlpack_export"], devices=1)["dlpack_export"]
    assert rec["error"] == "RuntimeError: Unknown backend cpu. Available backends are " \
        "['stablehlo_ref']", rec["error"]


def test_jax_hooks_the_helpers_rely_on():
    """The plugin's import calls jaxlib's DLPack import with a stablehlo_ref
    device (JAX has no public entry that does); pin its signature, and the
    platform checks that make the helpers necessary."""
    import jax._src.array as array_mod
    from jax._src import dlpack as jdl
    from jax._src.lib import _jax
    doc = _jax.dlpack_managed_tensor_to_buffer.__doc__ or ""
    assert "dl_device_type" in doc or "dlpack_managed_tensor_to_buffer(" in doc, doc
    src = inspect.getsource(array_mod.ArrayImpl.__dlpack_device__)
    assert 'self.platform() == "cpu"' in src
    assert set(jdl._DL_DEVICE_TO_PLATFORM.values()) == {"cpu", "cuda", "rocm"}


def test_external_reference_keeps_the_memory_of_a_deleted_buffer():
    """At the PJRT level: a buffer deleted (or destroyed) while an external
    reference is held keeps its memory valid until the reference is released
    (XLA's rule; jaxlib's numpy views rely on it)."""
    import ctypes

    import numpy as np
    from test_pjrt_capi import C, destroy_buffer, event_destroy, from_host, ok

    from stablehlo_pjrt import buffer as buffer_mod
    from stablehlo_pjrt import handles

    client = ok("PJRT_Client_Create", C.Client_Create_Args()).client
    values = np.arange(4, dtype=np.float32)
    b, done = from_host(client, values, C.BufferType.F32)
    event_destroy(done)
    ok("PJRT_Buffer_IncreaseExternalReferenceCount",
       C.Buffer_IncreaseExternalReferenceCount_Args(buffer=b))
    ptr = ok("PJRT_Buffer_OpaqueDeviceMemoryDataPointer",
             C.Buffer_OpaqueDeviceMemoryDataPointer_Args(buffer=b)).device_memory_ptr
    ok("PJRT_Buffer_Delete", C.Buffer_Delete_Args(buffer=b))
    buf = handles._objects[b]
    assert buf.deleted and buf._held is not None
    assert np.ctypeslib.as_array((ctypes.c_float * 4).from_address(ptr)).tolist() == \
        [0.0, 1.0, 2.0, 3.0]
    ok("PJRT_Buffer_DecreaseExternalReferenceCount",
       C.Buffer_DecreaseExternalReferenceCount_Args(buffer=b))
    assert buf._held is None  # released with the last reference
    destroy_buffer(b)
    # Destroyed while referenced (a caller bug): leaked, never freed under the view.
    b2, done = from_host(client, values, C.BufferType.F32)
    event_destroy(done)
    ok("PJRT_Buffer_IncreaseExternalReferenceCount",
       C.Buffer_IncreaseExternalReferenceCount_Args(buffer=b2))
    held = handles._objects[b2]
    destroy_buffer(b2)
    assert held in buffer_mod._ORPHANS and held._held is not None
    ok("PJRT_Client_Destroy", C.Client_Destroy_Args(client=client))
