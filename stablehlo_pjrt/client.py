"""The PJRT client of the stablehlo_ref platform, and its topology."""

from __future__ import annotations

import hashlib
import json

from . import config
from .device import Device, DeviceDescription
from .error import invalid_argument
from .handles import CString, NamedValues, pointer_array, register

PLATFORM_NAME = "stablehlo_ref"
NUM_DEVICES_ENV = config.NUM_DEVICES.name


def stablehlo_versions() -> tuple[list[int], list[int]]:
    """(current, minimum) StableHLO versions of the jaxlib we run with; JAX
    serializes programs for the current version, which the interpreter's
    loader (jaxlib's MLIR) reads back."""
    try:
        from jaxlib.mlir.dialects import stablehlo
        cur = [int(x) for x in stablehlo.get_current_version().split(".")]
        low = [int(x) for x in stablehlo.get_minimum_version().split(".")]
        return cur, low
    except Exception:  # no jaxlib MLIR: advertise nothing rather than lie
        return [], []


def interpreter_version() -> str:
    try:
        import stablehlo_interpreter as shi
        return str(getattr(shi, "__version__", "unknown"))
    except Exception as e:  # reported in the version string, see Client_Create
        return f"unavailable ({type(e).__name__})"


def plugin_version() -> str:
    try:
        from importlib.metadata import version
        return version("stablehlo-pjrt")
    except Exception:
        return "0+unknown"


def configured_num_devices(options: dict | None = None) -> int:
    raw = None
    if options and "num_devices" in options:
        raw = options["num_devices"]
    elif config.NUM_DEVICES.value():
        raw = config.NUM_DEVICES.value()
    if raw is None:
        return 1
    try:
        n = int(raw)
    except (TypeError, ValueError):
        raise invalid_argument(
            f"{NUM_DEVICES_ENV}/num_devices must be a positive integer, got {raw!r}") from None
    if n < 1 or n > 4096:
        raise invalid_argument(
            f"{NUM_DEVICES_ENV}/num_devices must be between 1 and 4096, got {n}")
    return n


def platform_version_string() -> str:
    cur, low = stablehlo_versions()
    cur_s = ".".join(map(str, cur)) or "unknown"
    low_s = ".".join(map(str, low)) or "unknown"
    return (f"stablehlo_interpreter {interpreter_version()} (numpy); "
            f"StableHLO {cur_s} (minimum {low_s}); stablehlo-pjrt {plugin_version()}")


class Topology:
    """PJRT_TopologyDescription: the devices a client has (or would have)."""

    __slots__ = ("handle", "num_devices", "descriptions", "owned_by_client",
                 "name_c", "version_c", "descriptions_c", "attrs_c",
                 "serialized", "fingerprint")

    def __init__(self, num_devices: int, descriptions=None, owned_by_client=False):
        self.num_devices = num_devices
        self.descriptions = descriptions if descriptions is not None else [
            DeviceDescription(i, 0, {"interpreter": "stablehlo_interpreter",
                                     "local_hardware_id": i})
            for i in range(num_devices)]
        self.owned_by_client = owned_by_client
        self.name_c = CString(PLATFORM_NAME)
        self.version_c = CString(platform_version_string())
        self.descriptions_c = pointer_array(d.handle for d in self.descriptions)
        self.attrs_c = NamedValues({"num_devices": num_devices})
        self.serialized = json.dumps(
            {"platform": PLATFORM_NAME, "num_devices": num_devices}).encode()
        self.fingerprint = int.from_bytes(
            hashlib.sha256(self.serialized).digest()[:8], "little")
        register(self)

    @staticmethod
    def deserialize(data: bytes) -> "Topology":
        try:
            info = json.loads(data.decode())
            if info.get("platform") != PLATFORM_NAME:
                raise ValueError("wrong platform")
            n = int(info["num_devices"])
        except Exception as e:
            raise invalid_argument(f"not a serialized stablehlo_ref topology: {e}") from None
        return Topology(n)

    def __str__(self):
        return f"Topology({PLATFORM_NAME}, devices={self.num_devices})"


class Client:
    """PJRT_Client: owns the devices and memories; compiles and transfers."""

    __slots__ = ("handle", "options", "process_index", "devices", "all_devices",
                 "memories", "interpreter_name", "topology", "cluster", "_devices_by_id",
                 "_devices_by_hw", "name_c", "version_c", "devices_c",
                 "all_devices_c", "memories_c", "destroyed")

    def __init__(self, options: dict | None = None, store=None):
        """``store``: the key-value store of PJRT_Client_Create (a
        distributed.KvStore), read only by a client of several processes
        (the ``num_nodes``/``node_id`` options)."""
        from .distributed import Cluster
        self.options = dict(options or {})
        # Programs arrive as bytecode, read first by an isolated helper
        # process (stablehlo_interpreter/isolate.py): start it now.
        from stablehlo_interpreter import prestart_bytecode_reader
        prestart_bytecode_reader()
        self.interpreter_name = "stablehlo_interpreter"
        n = configured_num_devices(self.options)
        self.cluster = Cluster.from_options(self.options, store)
        if self.cluster is None:
            self.process_index = 0
            counts = [n]
        else:
            # Every process lists every device: process p's devices follow
            # those of processes 0..p-1 (global ids agree everywhere).
            self.process_index = self.cluster.node_id
            self.cluster.exchange_topology(n, {"version": plugin_version()})
            counts = self.cluster.device_counts
        total = sum(counts)
        self.all_devices = []
        for p, count in enumerate(counts):
            base = sum(counts[:p])
            self.all_devices += [Device(self, base + j, j, total, process_index=p)
                                 for j in range(count)]
        # `devices`: the addressable ones (this process's).
        self.devices = [d for d in self.all_devices if d.addressable]
        self.memories = [m for d in self.devices for m in d.memories]
        self._devices_by_id = {d.id: d for d in self.all_devices}
        self._devices_by_hw = {d.local_hardware_id: d for d in self.devices}
        self.name_c = CString(PLATFORM_NAME)
        self.version_c = CString(platform_version_string())
        self.devices_c = pointer_array(d.handle for d in self.devices)
        self.all_devices_c = pointer_array(d.handle for d in self.all_devices)
        self.memories_c = pointer_array(m.handle for m in self.memories)
        self.topology = Topology(total, [d.description for d in self.all_devices],
                                 owned_by_client=True)
        self.destroyed = False
        register(self)

    def __str__(self):
        if self.cluster is not None:
            return (f"StablehloRefClient(process {self.process_index} of "
                    f"{self.cluster.num_nodes}, devices={len(self.devices)} of "
                    f"{len(self.all_devices)}, {self.handle:#x})")
        return f"StablehloRefClient(devices={len(self.devices)}, {self.handle:#x})"

    def device_by_id(self, device_id: int) -> Device:
        d = self._devices_by_id.get(device_id)
        if d is None:
            # INVALID_ARGUMENT, as XLA's plugins answer (its C API test
            # LookupDeviceNegativeId/OutOfRangeId asks for that code).
            raise invalid_argument(
                f"no stablehlo_ref device with id {device_id} (the client has "
                f"{len(self.all_devices)}; set {NUM_DEVICES_ENV} for more)")
        return d

    def device_by_hardware_id(self, hw_id: int) -> Device:
        d = self._devices_by_hw.get(hw_id)
        if d is None:
            raise invalid_argument(f"no addressable stablehlo_ref device with local hardware id {hw_id}")
        return d

    def default_assignment(self, replicas: int, partitions: int) -> list[list[int]]:
        need = replicas * partitions
        if need > len(self.all_devices):
            raise invalid_argument(
                f"{replicas} replica(s) x {partitions} partition(s) need {need} devices; "
                f"the stablehlo_ref client has {len(self.all_devices)} (set {NUM_DEVICES_ENV})")
        return [[r * partitions + p for p in range(partitions)] for r in range(replicas)]
