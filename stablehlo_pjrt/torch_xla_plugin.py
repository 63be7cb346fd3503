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
from .distributed import configured_num_processes


class StablehloRefPlugin(plugins.DevicePlugin):
    """The numpy StableHLO reference interpreter as a PyTorch/XLA device.

    One process drives all the client's devices (STABLEHLO_REF_NUM_DEVICES,
    default 1): SPMD (`torch_xla.distributed.spmd`) shards over them.
    Several processes (`xmp.spawn` starts STABLEHLO_REF_NUM_PROCESSES,
    `torchrun` its WORLD_SIZE) share PyTorch/XLA's coordinator as the
    key-value store of the client (docs/devices.md, "Several processes").
    """

    def __init__(self):
        super().__init__()
        # torch_xla.runtime.device_type() keeps only what precedes the first
        # '_' of PJRT_DEVICE ("STABLEHLO"), and plugins.default() looks that
        # up in the registry that register_plugin filled under
        # "STABLEHLO_REF": without this alias xr.host_index() and xmp.spawn
        # raise KeyError('STABLEHLO').  (The C++ side uses the full name.)
        plugins._plugin_registry.setdefault("STABLEHLO", self)
        _accept_underscore_device_names()
        _sync_before_forcing_spmd()
        # Constructed during `import torch_xla`, after torch_xla registered
        # its atexit handler: the plugin's exit handler now runs before it
        # and first waits for PyTorch/XLA's work in flight (shutdown.py).
        shutdown.add_step("PyTorch/XLA work in flight", shutdown.TORCH_XLA,
                          _wait_for_device_ops)

    def library_path(self) -> str:
        return shim_path()

    def physical_chip_count(self) -> int:
        # The number of processes xmp.spawn (nprocs=None) starts.
        return configured_num_processes()

    def client_create_options(self) -> dict:
        # Read by the client (num_devices); the env var keeps precedence
        # semantics simple: the option is the env var's value, or 1.
        options = {"num_devices": configured_num_devices()}
        rank, world = _rank_and_world()
        if world > 1:
            options.update(node_id=rank, num_nodes=world)
        return options

    def requires_xla_coordinator(self) -> bool:
        # Several processes: PyTorch/XLA then starts its coordinator (RANK,
        # WORLD_SIZE, MASTER_ADDR, XLA_COORDINATOR_PORT) and passes its
        # key-value store to PJRT_Client_Create. One process needs none.
        return _rank_and_world()[1] > 1

    def configure_single_process(self) -> None:
        # Debugging with world size 1: one device, whatever the env says.
        config.set_variable(config.NUM_DEVICES, "1")

    def configure_multiprocess(self, local_rank: int, local_world_size: int) -> None:
        # PyTorch/XLA has set PJRT_LOCAL_PROCESS_RANK/COUNT (read by
        # _rank_and_world); each process has STABLEHLO_REF_NUM_DEVICES devices.
        del local_rank, local_world_size   # PyTorch/XLA's interface; nothing to configure


def _rank_and_world() -> tuple[int, int]:
    """(this process's rank, the number of processes), as PyTorch/XLA's
    coordinator reads them (pjrt_registry.cc): RANK / WORLD_SIZE (torchrun),
    else the local rank and count xmp.spawn sets."""
    v = {name: s.value() for name, s in config.TORCH_RANKS.items()}
    local_rank = v["PJRT_LOCAL_PROCESS_RANK"] if v["PJRT_LOCAL_PROCESS_RANK"] >= 0 \
        else v["LOCAL_RANK"]
    local_world = v["PJRT_LOCAL_PROCESS_COUNT"] if v["PJRT_LOCAL_PROCESS_COUNT"] >= 0 \
        else v["LOCAL_WORLD_SIZE"]
    return (v["RANK"] if v["RANK"] >= 0 else local_rank,
            v["WORLD_SIZE"] if v["WORLD_SIZE"] >= 0 else local_world)


def _accept_underscore_device_names() -> None:
    """PyTorch/XLA 2.9's parse_xla_device reads device names with
    ``[A-Z]+:N``: our 'STABLEHLO_REF:0' parses as no device, and setting up
    replication (xmp.spawn, torchrun) fails with 'Invalid device format'.
    Accept '_' in the device type (the C++ side names devices after
    PJRT_DEVICE, underscores included)."""
    import re

    from torch_xla._internal import utils

    original = utils.parse_xla_device
    if getattr(original, "_stablehlo_ref_wrapper", False):
        return

    def parse_xla_device(device: str):
        m = re.match(r"([A-Z][A-Z_]*):(\d+)$", device)
        if m:
            return (m.group(1), int(m.group(2)))
        return original(device)

    parse_xla_device._stablehlo_ref_wrapper = True
    utils.parse_xla_device = parse_xla_device


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
