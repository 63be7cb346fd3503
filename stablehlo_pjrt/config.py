"""The plugin's switches: every environment variable the plugin (its
runtime, the oracle tools, the plugin checker and the command line) reads,
declared once here and read here only.

Each is a :class:`stablehlo_interpreter.config.Setting` (name, parser,
default, one-line doc, when it is read: ``"first use"``, ``"each use"`` or
``"import"``; see that module). The interpreter's own ``STABLEHLO_REF_*``
switches live in ``stablehlo_interpreter.config``; :func:`format_all` lists
both with their current values (``stablehlo-ref config``), and
``docs/debugging.md`` documents each switch once (a test checks it).

The plugin also reads two variables of the frameworks that load it
(``JAX_PLATFORMS``, ``PJRT_DEVICE``) and sets some for the processes it
drives (:func:`set_variable`, :func:`default_variable`); those go through
here too, so that this module and the interpreter's are the only ones that
touch ``os.environ``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

from stablehlo_interpreter import config as interpreter_config
from stablehlo_interpreter.config import ConfigError, Setting, flag, integer, seconds, text

__all__ = [
    "ConfigError", "Setting", "SETTINGS", "ASYNC", "EXECUTE_TIMEOUT", "NUM_DEVICES", "FAULT",
    "DISTRIBUTED_TIMEOUT", "NUM_PROCESSES", "TORCH_RANKS",
    "TRACE", "TRACE_JSON", "SUITE", "PYTHON", "JAX_PLATFORMS", "PJRT_DEVICE",
    "describe_all", "format_all", "set_variable", "default_variable", "variables", "child_environ",
]

_ASYNC_MODES = {"0": "sync", "sync": "sync", "off": "sync", "false": "sync", "no": "sync",
                "1": "async", "async": "async", "on": "async", "true": "async", "yes": "async",
                "always": "async", "": "auto", "auto": "auto"}


def async_mode(raw: str) -> str:
    """``sync``, ``async`` or ``auto`` from any of their spellings."""
    try:
        return _ASYNC_MODES[raw.strip().lower()]
    except KeyError:
        raise ValueError("expected auto, 1/async or 0/sync") from None


def positive_seconds(raw: str) -> float:
    """A duration in seconds, more than 0."""
    value = seconds(raw)
    if not value > 0:
        raise ValueError("must be > 0")
    return value


def process_count(raw: str) -> int:
    """A number of processes, 1 to 4096."""
    value = int(raw.strip())
    if not 1 <= value <= 4096:
        raise ValueError("must be between 1 and 4096")
    return value


def non_negative_seconds(raw: str) -> float:
    """A duration in seconds, at least 0 (empty: 0)."""
    value = seconds(raw) if raw.strip() else 0.0
    if value < 0:
        raise ValueError("must be >= 0")
    return value


# ---------------------------------------------------------------------------
# The plugin's settings. docs/debugging.md documents each one.

ASYNC: Setting[str] = Setting(
    "STABLEHLO_REF_ASYNC", async_mode, "auto",
    "where programs run: auto (cheap ones inline, the rest on the worker), 1 (always the "
    "worker), 0 (always inline); stablehlo_pjrt.set_execution_mode overrides it")
EXECUTE_TIMEOUT: Setting[float] = Setting(
    "STABLEHLO_REF_EXECUTE_TIMEOUT", non_negative_seconds, 0.0,
    "seconds an Execute may run before it fails with DEADLINE_EXCEEDED (0: no limit); "
    "stablehlo_pjrt.set_execute_timeout overrides it")
NUM_DEVICES: Setting[str] = Setting(
    "STABLEHLO_REF_NUM_DEVICES", text, "",
    "devices of a new client (empty: 1; a client's num_devices option wins)",
    read="each use")
DISTRIBUTED_TIMEOUT: Setting[float] = Setting(
    "STABLEHLO_REF_DISTRIBUTED_TIMEOUT", positive_seconds, 60.0,
    "seconds a process of a multi-process client waits for another's part of an exchange "
    "before failing with DEADLINE_EXCEEDED naming it (docs/devices.md)", read="each use")
NUM_PROCESSES: Setting[int] = Setting(
    "STABLEHLO_REF_NUM_PROCESSES", process_count, 1,
    "processes PyTorch/XLA's xmp.spawn starts (each with STABLEHLO_REF_NUM_DEVICES devices)",
    read="each use")
FAULT: Setting[str] = Setting(
    "STABLEHLO_REF_FAULT", text, "",
    "break one thing on purpose to test a checker: op:NAME, transfer_strided, event_never, "
    "wrong_dtype, compile_crash (read when the plugin builds its PJRT_Api table)",
    read="each use")
TRACE: Setting[bool] = Setting(
    "STABLEHLO_PJRT_TRACE", flag, False,
    "every PJRT call the plugin serves on stderr (read when the plugin builds its PJRT_Api "
    "table)", read="each use")
TRACE_JSON: Setting[str] = Setting(
    "STABLEHLO_PJRT_TRACE_JSON", text, "",
    "file the PJRT calls are written to as Chrome trace-event JSON at exit (read when the "
    "plugin builds its PJRT_Api table)", read="each use")
SUITE: Setting[str] = Setting(
    "STABLEHLO_SUITE", text, "",
    "the StableHLO conformance suite the plugin checker runs (empty: shared/stablehlo-suite "
    "next to a source checkout)",
    read="each use")
PYTHON: Setting[str] = Setting(
    "STABLEHLO_PJRT_PYTHON", text, "",
    "the python executable whose environment the plugin's embedded interpreter uses when a "
    "C++ host loads the .so (read by _shim.c at load)",
    read="import")
# Variables of the frameworks that load the plugin, which the plugin reads.
JAX_PLATFORMS: Setting[str] = Setting(
    "JAX_PLATFORMS", text, "",
    "JAX's platform list (stablehlo_ref selects this plugin); the plugin checker sets it for "
    "its JAX checks", read="each use")
PJRT_DEVICE: Setting[str] = Setting(
    "PJRT_DEVICE", text, "",
    "PyTorch/XLA's device (STABLEHLO_REF selects this plugin)", read="each use")
# The rank and world size PyTorch/XLA's coordinator reads (torchrun's, and
# the local ones xmp.spawn sets): the plugin passes them as node_id/num_nodes.
TORCH_RANKS: dict[str, Setting[int]] = {
    name: Setting(name, integer(0), default, f"PyTorch/XLA's {what} (several processes)",
                  read="each use")
    for name, default, what in (
        ("RANK", -1, "global rank (torchrun)"),
        ("WORLD_SIZE", -1, "number of processes (torchrun)"),
        ("LOCAL_RANK", 0, "local rank (torchrun)"),
        ("LOCAL_WORLD_SIZE", 1, "local number of processes (torchrun)"),
        ("PJRT_LOCAL_PROCESS_RANK", -1, "local rank (xmp.spawn)"),
        ("PJRT_LOCAL_PROCESS_COUNT", -1, "local number of processes (xmp.spawn)"))}

SETTINGS: tuple[Setting, ...] = (
    ASYNC, EXECUTE_TIMEOUT, NUM_DEVICES, DISTRIBUTED_TIMEOUT, NUM_PROCESSES, FAULT, TRACE,
    TRACE_JSON, SUITE, PYTHON, JAX_PLATFORMS, PJRT_DEVICE, *TORCH_RANKS.values(),
)
interpreter_config._known(interpreter_config.SETTINGS + SETTINGS)   # no name twice


def describe_all() -> list[dict[str, object]]:
    """:func:`stablehlo_interpreter.config.describe` of every switch, the
    interpreter's and the plugin's."""
    return interpreter_config.describe(interpreter_config.SETTINGS + SETTINGS)


def format_all() -> str:
    """Every switch with its current value, as ``stablehlo-ref config``
    prints it."""
    return ("# the interpreter (stablehlo_interpreter.config)\n"
            + interpreter_config.format_settings(interpreter_config.SETTINGS)
            + "\n# the PJRT plugin (stablehlo_pjrt.config)\n"
            + interpreter_config.format_settings(SETTINGS))


def set_variable(setting: Setting, value: str) -> None:
    """Sets ``setting``'s variable in this process (for code that reads it
    later: JAX, PyTorch/XLA, a client created next) and forgets the value
    read so far."""
    os.environ[setting.name] = value
    setting.forget()


@contextlib.contextmanager
def variables(values: Mapping[str, str]) -> Iterator[None]:
    """Sets these variables (any setting of either package, by name) for
    the block, then restores them; the settings read them again on both
    sides (a benchmark row run in another mode, say)."""
    by_name = {s.name: s for s in interpreter_config.SETTINGS + SETTINGS}
    unknown = sorted(set(values) - set(by_name))
    if unknown:
        raise ConfigError(f"not a setting: {', '.join(unknown)}")
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            set_variable(by_name[name], value)
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
            by_name[name].forget()


def default_variable(setting: Setting, value: str) -> None:
    """:func:`set_variable` unless the variable is set already."""
    if not setting.is_set():
        set_variable(setting, value)


child_environ = interpreter_config.child_environ
