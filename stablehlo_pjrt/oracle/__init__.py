"""Golden-output oracle: check another backend against the reference.

    from stablehlo_pjrt import oracle

    report = oracle.compare(f, x, y, against="cpu")     # the verdict, every output leaf
    report.ok, report.verdict, report.causes            # "explained", {"summation-order"}
    print(report)                                       # per output: what differs and why

    d = oracle.first_divergence(f, x, y, against="cpu") # None, or the op to blame
    print(d)                                            # op, Python line, values

    oracle.precision(f, x, y)      # per op: bits lost in the program's own types

    oracle.find_nan(f, x)          # the first op producing NaN/inf, or None
    oracle.trace_ops(f, x)         # every op with input/result summaries
    oracle.probe(f, x, {"jit(f)/sin": "probes/"})      # dump values to .npy

The bounds, the causes and the verdict are explained in docs/oracle.md.
`compare` and `first_divergence` need both platforms in one process: leave
JAX_PLATFORMS unset or set it to e.g. "cpu,stablehlo_ref".  The PJRT call
trace as Chrome trace-event JSON is in `chrome_trace`
(STABLEHLO_PJRT_TRACE_JSON=path).  The file-based comparison for backends
that are not JAX is `stablehlo-ref compare` (stablehlo_interpreter.compare).
"""

import importlib
from typing import Any

# No submodule shares a name with a function exported here: importing it
# would replace the package attribute (oracle.compare) with the module.

# Imported on first use (JAX loads with some of them).
_EXPORTS = {
    "compare": "verdict", "first_divergence": "bisect", "Divergence": "bisect",
    "ModuleVariants": "bisect", "jax_backend_runner": "runners",
    "reference_runner": "runners", "Report": "verdict", "Bounds": "bounds",
    "CAUSES": "causes", "precision": "precision_report",
    "PrecisionReport": "precision_report",
    "find_nan": "probe", "trace_ops": "probe", "probe": "probe",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
