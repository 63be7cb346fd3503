"""Conformance runner for the StableHLO reference interpreter.

Run ``python -m conformance SUITE_DIR`` (see :mod:`conformance.runner`).
"""

from .runner import main

__all__ = ["main"]
