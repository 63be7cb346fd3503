"""What a plugin declares it supports: undeclared features become skips.

Modelled on SQLAlchemy's dialect suite requirements: the backend team states
what its plugin does not support, and the checks needing it are reported as
``skipped`` with the reason, instead of failing. The declaration is JSON::

    {"unsupported": ["serialization", "multi_device", "element_type:f8e3m4"]}

or, equivalently, ``{"serialization": false, "multi_device": false,
"element_types": ["f32", "s32", ...]}`` (``element_types`` lists the types
that are supported; every other element type is then undeclared).
Without a declaration everything is assumed supported, and what the plugin
answers UNIMPLEMENTED to (or refuses to compile) is reported as
``unsupported``: a capability found, not a failure.

The same file may carry the client-create options the plugin needs (as
``--create-option``; see options.py)::

    {"unsupported": ["serialization"], "create_options": {"preallocate": false}}

Capability names: ``multi_device``, ``memory_kinds``, ``serialization``,
``strided_transfers``, ``layouts``, ``donation``, ``zero_copy``,
``error_buffers``, ``element_type:<name>`` (PJRT_Buffer_Type names in lower
case: pred, s8, ..., f32, bf16, c64, f8e4m3fn, ...).
"""

from __future__ import annotations

import json
from typing import Any

KNOWN = ("multi_device", "memory_kinds", "serialization", "strided_transfers", "layouts",
         "donation", "zero_copy", "error_buffers")


class Capabilities:
    def __init__(self, declared: dict[str, Any] | None = None):
        from .options import from_json
        declared = dict(declared or {})
        self.create_options = from_json(declared.pop("create_options", {}))
        self.unsupported = {str(x).lower() for x in declared.pop("unsupported", [])}
        self.element_types = None
        if "element_types" in declared:
            self.element_types = {str(x).lower() for x in declared.pop("element_types")}
        for k, v in declared.items():
            if v is False:
                self.unsupported.add(k.lower())
            elif v is not True:
                raise ValueError(f"capability {k!r}: expected true or false, got {v!r}")
        unknown = [u for u in self.unsupported
                   if u not in KNOWN and not u.startswith("element_type:")]
        if unknown:
            raise ValueError(f"unknown capabilities {unknown}; known: {list(KNOWN)} and "
                             "element_type:<name>")

    @classmethod
    def load(cls, path: str | None) -> "Capabilities":
        """The declaration in the JSON file at ``path`` (none: everything);
        OSError or ValueError naming the problem."""
        if not path:
            return cls()
        with open(path, encoding="utf-8") as f:
            try:
                declared = json.load(f)
            except ValueError as e:
                raise ValueError(f"not valid JSON: {e}") from None
        if not isinstance(declared, dict):
            raise ValueError(f"expected a JSON object, got {type(declared).__name__}")
        return cls(declared)

    def allows(self, name: str) -> bool:
        name = name.lower()
        if name in self.unsupported:
            return False
        if name.startswith("element_type:") and self.element_types is not None:
            return name.split(":", 1)[1] in self.element_types
        return True

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"unsupported": sorted(self.unsupported)}
        if self.element_types is not None:
            d["element_types"] = sorted(self.element_types)
        if self.create_options:
            d["create_options"] = dict(self.create_options)
        return d
