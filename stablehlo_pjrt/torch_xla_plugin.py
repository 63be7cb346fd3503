"""PyTorch/XLA's entry point: `PJRT_DEVICE=STABLEHLO_REF python train.py`.

PyTorch/XLA discovers PJRT plugins through the `torch_xla.plugins`
entry-point group (pyproject.toml: `stablehlo_ref =
"stablehlo_pjrt.torch_xla_plugin:StablehloRefPlugin"`); it registers each
under its upper-cased name, so `PJRT_DEVICE=STABLEHLO_REF` selects this one,
loads `library_path()` (the shim exporting GetPjrtApi) and creates a client
with `client_create_options()`.

This module imports torch_xla; `import stablehlo_pjrt` never imports it.
"""

from __future__ import annotations

from torch_xla.experimental import plugins

from . import config, shim_path, shutdown
from .client import configured_num_devices

MULTIPROCESS_UNSUPPORTED = (
    "stablehlo_ref does not support PyTorch/XLA's multi-process mode (xmp.spawn "
    "without nprocs=1, torchrun with several local processes): its devices are "
    "virtual devices of one process, with no collectives across processes, and "
    "PyTorch/XLA 2.9 cannot set up replication for a device type whose name has "
    "a '_' (its parse_xla_device reads 'STABLEHLO_REF:0' as no device). Use "
    "xmp.spawn(fn, nprocs=1) for one device, or SPMD (torch_xla.distributed.spmd) "
    "over STABLEHLO_REF_NUM_DEVICES devices in one process.")


class StablehloRefPlugin(plugins.DevicePlugin):
    """The numpy StableHLO reference interpreter as a PyTorch/XLA device.

    One process drives all the client's devices (STABLEHLO_REF_NUM_DEVICES,
    default 1): SPMD (`torch_xla.distributed.spmd`) shards over them.
    Multi-process runs (`xmp.spawn` without nprocs=1, `torchrun` with several
    local processes) are refused with the reason (MULTIPROCESS_UNSUPPORTED).
    """

    def __init__(self):
        super().__init__()
        # torch_xla.runtime.device_type() keeps only what precedes the first
        # '_' of PJRT_DEVICE ("STABLEHLO"), and plugins.default() looks that
        # up in the registry that register_plugin filled under
        # "STABLEHLO_REF": without this alias xr.host_index() and xmp.spawn
        # raise KeyError('STABLEHLO').  (The C++ side uses the full name.)
        plugins._plugin_registry.setdefault("STABLEHLO", self)
        _sync_before_forcing_spmd()
        # Constructed during `import torch_xla`, after torch_xla registered
        # its atexit handler: the plugin's exit handler now runs before it
        # and first waits for PyTorch/XLA's work in flight (shutdown.py).
        shutdown.add_step("PyTorch/XLA work in flight", shutdown.TORCH_XLA,
                          _wait_for_device_ops)

    def library_path(self) -> str:
        return shim_path()

    def physical_chip_count(self) -> int:
        # Every device of this plugin lives in the one host process: one
        # "chip".  PyTorch/XLA 2.9 asks this to size xmp.spawn (nprocs=None):
        # one process, whose configure_multiprocess then refuses with the
        # reason (nprocs=1 takes another path and works).
        return 1

    def client_create_options(self) -> dict:
        # Read by the client (num_devices); the env var keeps precedence
        # semantics simple: the option is the env var's value, or 1.
        return {"num_devices": configured_num_devices()}

    def configure_single_process(self) -> None:
        # Debugging with world size 1: one device, whatever the env says.
        config.set_variable(config.NUM_DEVICES, "1")

    def configure_multiprocess(self, local_rank: int, local_world_size: int) -> None:
        # Called first in every process xmp.spawn (nprocs=None) or torchrun
        # starts, before PyTorch/XLA sets up replication (which fails on our
        # device name, see MULTIPROCESS_UNSUPPORTED): say why, there.
        del local_rank, local_world_size   # PyTorch/XLA's interface; nothing to configure
        raise RuntimeError(MULTIPROCESS_UNSUPPORTED)


def _selected() -> bool:
    """Is this plugin the process's PyTorch/XLA device (PJRT_DEVICE)?"""
    return config.PJRT_DEVICE.value().upper() == "STABLEHLO_REF"


def _wait_for_device_ops() -> None:
    """Interpreter exit: wait for PyTorch/XLA's operations in flight with the
    GIL released (``_xla_wait_device_ops`` releases it). torch_xla's own
    atexit handler (``_prepare_to_exit``) waits for them too, but holding
    the GIL, while they run on torch_xla's threads and call into this
    plugin, whose handlers need the GIL: the process hung at exit (or, once
    the plugin stopped serving threads without the GIL, aborted on its
    refusal). Nothing to do if the runtime never started (waiting would
    start it)."""
    import sys
    xlac = getattr(sys.modules.get("torch_xla"), "_XLAC", None)
    started = getattr(xlac, "_xla_runtime_is_initialized", None)
    if xlac is None or started is None or not started():
        return
    xlac._xla_wait_device_ops([])


def _sync_before_forcing_spmd() -> None:
    """Make ``torch_xla.runtime.use_spmd()`` after XLA tensors exist work.

    use_spmd() then calls ``torch_xla._XLAC._xla_force_spmd_device()``, which
    copies every live tensor to the SPMD device while holding the GIL; a
    tensor with pending operations is computed on PyTorch/XLA's worker
    thread, which calls into this plugin, whose handlers are Python and wait
    for the GIL: a deadlock (a C++ plugin such as PJRT_DEVICE=CPU needs no
    GIL and replicates them).  Running the pending operations first
    (torch_xla.sync(), which releases the GIL) leaves only host copies, which
    PyTorch/XLA makes on the calling thread.  Installed once, for this
    plugin only (other devices call PyTorch/XLA's function unchanged)."""
    import torch_xla

    original = getattr(torch_xla._XLAC, "_xla_force_spmd_device", None)
    if original is None or getattr(original, "_stablehlo_ref_wrapper", False):
        return

    def force_spmd_device():
        if _selected():
            import torch_xla.core.xla_model as xm
            torch_xla.sync()
            xm.wait_device_ops()
        return original()

    force_spmd_device._stablehlo_ref_wrapper = True
    torch_xla._XLAC._xla_force_spmd_device = force_spmd_device
