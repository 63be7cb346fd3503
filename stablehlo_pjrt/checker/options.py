"""Client-create options (``PJRT_NamedValue``) from the command line and the
capabilities file, and the defaults the checker picks for accelerators.

A ``--create-option KEY=VALUE`` value is typed the way ``PJRT_NamedValue``
can hold it: ``true``/``false`` is a bool, an integer literal an int64, a
float literal a float, a comma-separated list of integers (or ``[1, 2]``) an
int64 list, anything else a string. ``KEY:TYPE=VALUE`` forces the type
(``int``, ``float``, ``bool``, ``str``, ``ints``), e.g. ``device_ids:ints=0``
or ``allocator:str=1``.
"""

from __future__ import annotations

import re
from typing import Any

OptionValue = bool | int | float | str | list[int]

_TYPES = ("int", "float", "bool", "str", "ints")

# Options the checker passes by default, by platform name, unless the user
# sets the key. XLA's GPU plugins reserve 75% of the device's memory for each
# client ("preallocate"); the checker's parallel workers and its second-client
# check each create one, so preallocation makes every client after the first
# fail with CUDA_ERROR_OUT_OF_MEMORY or "no supported devices found".
ALLOCATOR_DEFAULTS: dict[str, dict[str, OptionValue]] = {
    "cuda": {"preallocate": False},
    "rocm": {"preallocate": False},
}

# Platform names and default memory kinds of plugins whose devices are host
# memory (then parallel workers cost nothing but CPU).
HOST_PLATFORMS = ("cpu", "host", "interpreter", "stablehlo_ref")


def _int_list(text: str, force: bool = False) -> list[int] | None:
    """``1,2`` or ``[1, 2]`` (with ``force``, also ``1``) as a list of ints."""
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    elif "," not in body and not force:
        return None
    parts = [p.strip() for p in body.split(",") if p.strip()]
    if all(re.fullmatch(r"[+-]?\d+", p) for p in parts):
        return [int(p) for p in parts]
    return None


def typed(value: str, kind: str | None = None) -> OptionValue:
    """``value`` as the PJRT_NamedValue type ``kind`` (inferred when None);
    ValueError naming the problem otherwise."""
    low = value.strip().lower()
    if kind is None:
        if low in ("true", "false"):
            return low == "true"
        if re.fullmatch(r"[+-]?\d+", low):
            return int(low)
        if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?e[+-]?\d+|inf|nan)", low):
            return float(low)
        ints = _int_list(value)
        return value if ints is None else ints
    if kind == "str":
        return value
    if kind == "bool":
        if low not in ("true", "false", "1", "0"):
            raise ValueError(f"{value!r} is not a bool (true or false)")
        return low in ("true", "1")
    if kind == "int":
        return int(low)
    if kind == "float":
        return float(low)
    if kind == "ints":
        ints = _int_list(value, force=True)
        if ints is None:
            raise ValueError(f"{value!r} is not a comma-separated list of integers")
        return ints
    raise ValueError(f"unknown type {kind!r}; one of {', '.join(_TYPES)}")


def parse_option(text: str) -> tuple[str, OptionValue]:
    """``KEY=VALUE`` or ``KEY:TYPE=VALUE`` -> (key, typed value)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--create-option {text!r}: expected KEY=VALUE (or KEY:TYPE=VALUE, "
                         f"TYPE one of {', '.join(_TYPES)})")
    key, _, kind = key.strip().partition(":")
    try:
        return key, typed(value, kind or None)
    except ValueError as e:
        raise ValueError(f"--create-option {text!r}: {e}") from None


def from_json(options: object) -> dict[str, OptionValue]:
    """The ``create_options`` object of a capabilities file, checked."""
    if not isinstance(options, dict):
        raise ValueError(f"create_options: expected an object of KEY: VALUE, got {options!r}")
    out: dict[str, OptionValue] = {}
    for k, v in options.items():
        ok = isinstance(v, (bool, int, float, str)) or (
            isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool)
                                        for x in v))
        if not ok:
            raise ValueError(f"create_options.{k} = {v!r}: a PJRT_NamedValue holds a bool, "
                             "an integer, a float, a string or a list of integers")
        out[str(k)] = v
    return out


def accelerator_defaults(meta: dict[str, Any]) -> tuple[dict[str, OptionValue], str | None]:
    """(create options to add, why) for the plugin described by ``meta``
    (checker.probe): the allocator options of a known accelerator platform."""
    platform = str(meta.get("platform", "")).lower()
    opts = ALLOCATOR_DEFAULTS.get(platform)
    if not opts:
        return {}, None
    shown = ", ".join(f"{k}={v}" for k, v in opts.items())
    return dict(opts), (f"{shown} (platform {platform}: each worker creates a client, and the "
                        "plugin's allocator would otherwise reserve most of the device for each)")


def is_accelerator(meta: dict[str, Any]) -> bool:
    """Whether the plugin's devices are not host memory: neither the platform
    nor the devices' default memory kind says host."""
    if not meta.get("platform"):
        return False
    if str(meta["platform"]).lower() in HOST_PLATFORMS:
        return False
    kinds = [str(k).lower() for k in meta.get("device_kinds", [])]
    if kinds and all(k in HOST_PLATFORMS for k in kinds):
        return False
    mem = str(meta.get("default_memory_kind", "")).lower()
    return "host" not in mem
