"""The PJRT call trace as Chrome trace-event JSON, among the oracle tools.

The writer is a hook of the plugin's call trace and lives next to it, in
stablehlo_pjrt/trace_json.py (the plugin starts it for
STABLEHLO_PJRT_TRACE_JSON); this module is its name here: ``start``,
``stop``, ``current`` and ``ChromeTraceWriter``.
"""

from ..trace_json import ChromeTraceWriter, current, start, stop

__all__ = ["ChromeTraceWriter", "current", "start", "stop"]
