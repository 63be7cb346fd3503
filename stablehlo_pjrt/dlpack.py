"""DLPack for stablehlo_ref arrays, both ways, zero-copy where the layout allows.

A stablehlo_ref buffer is a numpy array in host memory, so DLPack's CPU
device type describes it exactly. What stops ``x.__dlpack__()``,
``np.from_dlpack(x)`` and ``torch.from_dlpack(x)`` is JAX itself, before the
plugin is asked (JAX 0.10.2):

* ``jax.Array.__dlpack_device__`` (jax/_src/array.py) answers only for the
  platforms named "cpu" and "gpu" and raises ``BufferError: __dlpack__ device
  only supported for CPU and GPU, got platform: stablehlo_ref``;
* ``__dlpack__`` goes to jaxlib's ``BufferToDLPackManagedTensor``
  (jaxlib/dlpack.cc), whose ``DLDeviceTypeForDevice`` compares the client's
  ``platform_id()`` with ``CpuId()``/``CudaId()``/``RocmId()``. A PJRT C API
  client's platform id is the fingerprint of the name PJRT_Client_PlatformName
  returns (xla/pjrt/pjrt_c_api_client.cc), so only a plugin calling itself
  "cpu" would pass: ``INVALID_ARGUMENT: Device stablehlo_ref:0 cannot be used
  as a DLPack device``.

Neither has a hook, so export needs this module (or a copy through the CPU
backend: ``np.from_dlpack(x, device="cpu")`` works, via ``device_put``).

* :func:`dlpack_view` wraps a stablehlo_ref array in an object with
  ``__dlpack__``/``__dlpack_device__`` (kDLCPU) over the buffer's own memory:
  ``np.from_dlpack``, ``torch.from_dlpack`` and ``jax.dlpack.from_dlpack``
  accept it, zero-copy. The memory comes from jaxlib's own zero-copy
  ``np.asarray(x)`` (the plugin reports its buffers as host memory,
  PJRT_Buffer_IsOnCpu), which holds a PJRT external reference on the buffer
  for as long as any view of it lives: the buffer then keeps its memory even
  if the array is deleted, and a donation of it copies instead of reusing the
  memory (XLA CPU's rule), so no view ever sees a later program write.
* :func:`from_dlpack` puts a DLPack producer's CPU memory on a stablehlo_ref
  device without copying when it is row-major (PJRT_Client_CreateViewOfDeviceBuffer),
  also when JAX has no CPU backend (``jax.dlpack.from_dlpack(obj,
  device=stablehlo_ref_device)`` imports onto the CPU backend first and then
  copies to the device; ``copy=False`` is refused there).
"""

from __future__ import annotations

import ctypes

import numpy as np

from . import compat

PLATFORM_NAME = "stablehlo_ref"
# DLPack device types (dlpack.h): the only one a stablehlo_ref buffer can be.
KDLCPU = 1
_VERSIONED = (1, 0)  # DLPack 1.0: the first with a read-only flag


def _single_buffer(x, what):
    import jax
    if not isinstance(x, jax.Array):
        raise TypeError(f"{what} takes a jax.Array, got {type(x).__name__}")
    if len(x.sharding.device_set) != 1:
        raise BufferError(
            f"{what}: DLPack describes one device's memory, but this array is sharded "
            f"over {len(x.sharding.device_set)} devices; pass x.addressable_shards[i].data")
    return x


class _WritableAlias:
    """The same memory through ``__array_interface__`` without the read-only
    bit, for DLPack consumers older than DLPack 1.0 (which has no read-only
    flag; JAX's CPU export is such a capsule too). Keeps ``base`` alive."""

    def __init__(self, base: np.ndarray):
        self.base = base
        interface = dict(base.__array_interface__)
        interface["data"] = (interface["data"][0], False)
        self.__array_interface__ = interface


class _DLTensor(ctypes.Structure):
    # dlpack.h's DLTensor (unchanged since DLPack 0.2; a legacy "dltensor"
    # capsule points to a DLManagedTensor, whose first member is this).
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


# Element types DLPack has and numpy cannot export (numpy's __dlpack__ takes
# only its own dtypes): exported as unsigned integers of the same width, then
# the capsule's type code is set (torch and JAX read kDLBfloat).
_CODES = {}
try:
    import ml_dtypes
    _CODES[np.dtype(ml_dtypes.bfloat16)] = 4  # kDLBfloat
except ImportError:  # pragma: no cover - ml_dtypes comes with jaxlib
    pass


def _export(array, **kwargs):
    code = _CODES.get(array.dtype)
    if code is None:
        return array.__dlpack__(**kwargs)
    capsule = array.view(np.dtype(f"u{array.itemsize}")).__dlpack__(**kwargs)
    _tensor_of(capsule).code = code
    return capsule


def _tensor_of(capsule):
    """The DLTensor inside a DLPack capsule (legacy "dltensor": it opens a
    DLManagedTensor; "dltensor_versioned": a DLManagedTensorVersioned, where
    it follows version, manager_ctx, deleter and flags, 32 bytes)."""
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype = ctypes.c_char_p
    name.argtypes = [ctypes.py_object]
    kind = name(capsule)
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    address = get(capsule, kind)
    return _DLTensor.from_address(address + (32 if kind == b"dltensor_versioned" else 0))


class DLPackView:
    """A zero-copy DLPack producer over one stablehlo_ref buffer's memory.

    ``array`` is the read-only numpy view (it holds the buffer's external
    reference). DLPack 1.0 consumers (numpy >= 2.1, torch >= 2.4) get a
    capsule flagged read-only; older consumers (jax.dlpack.from_dlpack, the
    legacy protocol) get an unflagged one, as JAX's own CPU export gives.
    Writing through either is undefined behaviour, as it is for a CPU array.
    """

    __slots__ = ("array", "device")

    def __init__(self, array: np.ndarray, device):
        self.array = array
        self.device = device

    def __dlpack_device__(self):
        DLDeviceType = compat.jax_internal("dlpack", "DLDeviceType")
        return DLDeviceType.kDLCPU, 0

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if stream is not None and stream != -1:
            # CPU memory has no stream (the DLPack spec asks for None or -1).
            raise BufferError(f"stablehlo_ref memory is host memory; stream={stream!r} "
                              "does not apply (use None)")
        if max_version is not None and tuple(max_version) >= _VERSIONED:
            return _export(self.array, max_version=max_version, dl_device=dl_device,
                           copy=copy)
        alias = np.asarray(_WritableAlias(self.array))
        if copy:
            alias = alias.copy()
        return _export(alias)

    def __repr__(self):
        return (f"DLPackView({self.array.dtype}{list(self.array.shape)} of {self.device}, "
                "zero-copy)")


def dlpack_view(x) -> DLPackView:
    """A DLPack producer (``__dlpack__``, ``__dlpack_device__`` = kDLCPU)
    sharing ``x``'s memory, for a single-device stablehlo_ref ``jax.Array``:

        torch.from_dlpack(stablehlo_pjrt.dlpack_view(x))
        np.from_dlpack(stablehlo_pjrt.dlpack_view(x))

    The view keeps the buffer's memory alive (deleting or donating ``x``
    afterwards is safe: a donation then copies instead of reusing it).
    Arrays of other platforms are returned as they are (they export
    themselves)."""
    x = _single_buffer(x, "dlpack_view")
    (device,) = x.sharding.device_set
    if device.platform != PLATFORM_NAME:
        return x
    # jaxlib's zero-copy host view (PyHostValue::AsNumPyArray): read-only,
    # holding the array and a PJRT external reference on its buffer. Sub-byte
    # types are unpacked copies (DLPack has no packed int4 either).
    array = np.asarray(x)
    return DLPackView(array, device)


def _row_major(capsule) -> bool:
    """Is the legacy DLPack capsule's tensor row-major (NULL strides, or
    strides that are row-major up to dimensions of size 1)?"""
    t = _tensor_of(capsule)
    if not t.strides:
        return True
    expected = 1
    for d in reversed(range(t.ndim)):
        n = t.shape[d]
        if n == 0:
            return True
        if n != 1 and t.strides[d] != expected:
            return False
        expected *= n
    return True


def from_dlpack(external, device=None, copy=None):
    """``external`` (an object with ``__dlpack__``/``__dlpack_device__`` on
    the CPU, or a jax.Array of any platform) as a jax.Array on a stablehlo_ref
    ``device`` (default: the first). Row-major data is shared, not copied
    (``copy=False`` insists, ``copy=True`` always copies); other layouts are
    copied. As with ``jax.dlpack.from_dlpack``, writing to the producer's
    memory afterwards changes the array (undefined behaviour for JAX)."""
    import jax
    import jax.numpy as jnp
    dtypes = compat.jax_internal("", "dtypes")
    DLDeviceType = compat.jax_internal("dlpack", "DLDeviceType")

    if device is None:
        device = jax.devices(PLATFORM_NAME)[0]
    if isinstance(device, jax.sharding.Sharding):
        devices = device.device_set
        if len(devices) != 1:
            raise ValueError("from_dlpack puts the data on one device, but a sharding "
                             f"with {len(devices)} devices was given")
        (device,) = devices
    if getattr(device, "platform", None) != PLATFORM_NAME:
        raise ValueError(f"stablehlo_pjrt.from_dlpack imports onto a {PLATFORM_NAME} device, "
                         f"got {device!r} (use jax.dlpack.from_dlpack for other platforms)")
    if isinstance(external, jax.Array):
        external = dlpack_view(external)
    if not (hasattr(external, "__dlpack__") and hasattr(external, "__dlpack_device__")):
        raise TypeError("from_dlpack takes an object with __dlpack__ and __dlpack_device__ "
                        f"methods, got {type(external).__name__}")
    dl_type, _ = external.__dlpack_device__()
    if int(dl_type) != KDLCPU:
        raise TypeError(f"stablehlo_ref imports host (kDLCPU) memory; this array is on "
                        f"DLPack device type {int(dl_type)}")
    capsule = external.__dlpack__(stream=None)
    if copy is False and not _row_major(capsule):
        raise ValueError(
            "stablehlo_pjrt.from_dlpack: the array is not in row-major order, which "
            "stablehlo_ref buffers need, so it must be copied; however copy=False. Set "
            "copy=True or copy=None to copy it.")
    # jaxlib's DLPack import onto a given device (what jax.dlpack.from_dlpack
    # calls with the producer's own device): it asks the device's client for
    # PJRT_Client_CreateViewOfDeviceBuffer and falls back to a copy
    # (BufferFromHostBuffer) when the view is refused. JAX has no public entry
    # for it; tests/test_jax_runtime_dlpack.py pins the signature.
    _jax = compat.jax_internal("lib", "_jax")
    arr = _jax.dlpack_managed_tensor_to_buffer(capsule, device, None,
                                               False if copy is False else None,
                                               int(DLDeviceType.kDLCPU))
    # As jax.dlpack.from_dlpack: the dtype JAX computes with (float64 -> float32
    # without x64 is a conversion, i.e. a copy).
    arr = jnp.asarray(arr, dtype=dtypes.canonicalize_dtype(arr.dtype))
    if copy:
        arr = jnp.array(arr, copy=True)
    return arr
