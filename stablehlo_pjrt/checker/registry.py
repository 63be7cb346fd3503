"""The checks of every area, registered on first use."""

from __future__ import annotations

from typing import Any

from .core import DECLARED, Registry

_CACHE: dict[str, Any] = {}


def build(suite: str | None) -> Registry:
    """Every check: the module-level ones (``@check``, areas capi and
    frameworks) and the Programs area, enumerated from the conformance
    suite at ``suite``."""
    key = suite or ""
    if key not in _CACHE:
        from . import capi, framework_checks, program_checks  # noqa: F401 - they register
        reg = Registry()
        for c in DECLARED.checks.values():
            if c.area == "capi":
                reg.add(c)
        program_checks.register(reg, suite)
        for c in DECLARED.checks.values():
            if c.area != "capi":
                reg.add(c)
        _CACHE[key] = reg
    out: Registry = _CACHE[key]
    return out
