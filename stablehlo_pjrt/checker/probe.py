"""What the checker learns about a plugin before running checks, in a
subprocess (a plugin that aborts while loading must not take the run with
it): ``python -m stablehlo_pjrt.checker.probe PATH [OPTIONS_JSON]``.

Prints one JSON object: ``api_version``, ``platform``, ``devices``,
``device_kinds``, ``default_memory_kind``, ``memory_kinds``, ``attributes``;
or ``load_error`` (not a PJRT plugin) or ``client_error`` (the plugin loaded
but PJRT_Client_Create failed).
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .plugin import Client, Plugin


def _device_kind(p: Plugin, d: int) -> str:
    from .. import _capi as C
    desc = p.call("PJRT_Device_GetDescription",
                  C.Device_GetDescription_Args(device=d)).device_description
    k = p.call("PJRT_DeviceDescription_Kind",
               C.DeviceDescription_Kind_Args(device_description=desc))
    return C.read_str(k.device_kind, k.device_kind_size)


def _memories(p: Plugin, c: Client, devices: list[int]) -> tuple[str | None, list[str]]:
    from .. import _capi as C
    default = None
    try:
        default = c.memory_kind(c.default_memory(devices[0]))
    except Exception:  # noqa: BLE001 - a plugin without memories
        pass
    kinds: list[str] = []
    try:
        a = p.call("PJRT_Client_AddressableMemories",
                   C.Client_AddressableMemories_Args(client=c.handle))
        for m in C.read_pointers(a.addressable_memories, a.num_addressable_memories):
            k = c.memory_kind(m)
            if k not in kinds:
                kinds.append(k)
    except Exception:  # noqa: BLE001
        pass
    return default, kinds


def probe(path: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The plugin's description (see the module docstring), in this process."""
    from .plugin import Client, LoadError, Plugin, PluginError
    try:
        p = Plugin(path)
    except LoadError as e:
        return {"load_error": str(e)}
    out: dict[str, Any] = {"api_version": "%d.%d" % p.version}
    try:
        p.initialize()
        out["attributes"] = p.attributes() if p.has("PJRT_Plugin_Attributes") else {}
    except PluginError as e:
        out["init_error"] = str(e)
    try:
        c = Client(p, options or None)
    except PluginError as e:
        out["client_error"] = str(e)
        return out
    out["platform"] = c.platform_name()
    devices = c.addressable_devices()
    out["devices"] = len(devices)
    try:
        out["device_kinds"] = sorted({_device_kind(p, d) for d in devices})
    except PluginError:
        out["device_kinds"] = []
    if devices:
        out["default_memory_kind"], out["memory_kinds"] = _memories(p, c, devices)
    try:
        c.close()
    except PluginError:
        pass
    return out


def run_probe(path: str, options: dict[str, Any] | None = None, timeout: float = 120.0) -> dict[str, Any]:
    """:func:`probe` in a subprocess; ``{"probe_error": ...}`` when it died."""
    import subprocess

    from .runner import _describe_exit, _worker_env
    try:
        p = subprocess.run([sys.executable, "-m", "stablehlo_pjrt.checker.probe", path,
                            json.dumps(options or {})], capture_output=True, text=True,
                           timeout=timeout, env=_worker_env())
    except subprocess.TimeoutExpired:
        return {"probe_error": _describe_exit(None, True, timeout)}
    lines = p.stdout.strip().splitlines()
    try:
        out: dict[str, Any] = json.loads(lines[-1])
        return out
    except (IndexError, ValueError):
        tail = p.stderr.strip()[-600:]
        return {"probe_error": _describe_exit(p.returncode, False, timeout)
                + (f"; stderr ends with:\n{tail}" if tail else "")}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = probe(argv[0], json.loads(argv[1]) if len(argv) > 1 else None)
    print(json.dumps(out, default=str), flush=True)
    # Skip teardown: a plugin's static destructors may abort.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
