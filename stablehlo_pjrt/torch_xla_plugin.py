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

import os

from torch_xla.experimental import plugins

from . import shim_path
from .client import NUM_DEVICES_ENV, configured_num_devices


class StablehloRefPlugin(plugins.DevicePlugin):
    """The numpy StableHLO reference interpreter as a PyTorch/XLA device.

    One process drives all the client's devices (STABLEHLO_REF_NUM_DEVICES,
    default 1): SPMD (`torch_xla.distributed.spmd`) shards over them.
    Multi-process runs (`xmp.spawn`/`torchrun`) give each process one device.
    """

    def __init__(self):
        super().__init__()
        # torch_xla.runtime.device_type() keeps only what precedes the first
        # '_' of PJRT_DEVICE ("STABLEHLO"), and plugins.default() looks that
        # up in the registry that register_plugin filled under
        # "STABLEHLO_REF": without this alias xr.host_index() and xmp.spawn
        # raise KeyError('STABLEHLO').  (The C++ side uses the full name.)
        plugins._plugin_registry.setdefault("STABLEHLO", self)

    def library_path(self) -> str:
        return shim_path()

    def physical_chip_count(self) -> int:
        # The number of processes xmp.spawn starts: one per device.
        return configured_num_devices()

    def client_create_options(self) -> dict:
        # Read by the client (num_devices); the env var keeps precedence
        # semantics simple: the option is the env var's value, or 1.
        return {"num_devices": configured_num_devices()}

    def configure_single_process(self) -> None:
        # Debugging with world size 1: one device, whatever the env says.
        os.environ[NUM_DEVICES_ENV] = "1"

    def configure_multiprocess(self, local_rank: int, local_world_size: int) -> None:
        # Each spawned process owns one device of its own client; processes do
        # not share buffers (stablehlo_ref has no cross-process collectives).
        os.environ[NUM_DEVICES_ENV] = "1"
