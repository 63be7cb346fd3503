"""Conformance runner for the StableHLO reference interpreter.

Run ``python -m stablehlo_conformance SUITE_DIR`` (see :mod:`stablehlo_conformance.runner`).
"""

from .runner import main

__all__ = ["main"]
