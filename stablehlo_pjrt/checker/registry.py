"""The checks of every area, registered on first use."""

from __future__ import annotations

from .core import Registry

_CACHE: dict = {}


def build(suite: str | None) -> Registry:
    """Every check; the Programs area enumerates the conformance suite at ``suite``."""
    key = suite or ""
    if key not in _CACHE:
        reg = Registry()
        from . import capi_checks, framework_checks, program_checks
        capi_checks.register(reg)
        program_checks.register(reg, suite)
        framework_checks.register(reg)
        _CACHE[key] = reg
    return _CACHE[key]
