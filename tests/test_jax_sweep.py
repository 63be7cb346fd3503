"""A broad sweep of real JAX programs on stablehlo_ref, compared with XLA CPU.

Every case builds a few jitted JAX functions, runs each on XLA CPU (the
reference) and on the stablehlo_ref plugin, and compares the results with
dtype-aware tolerances: exact for integers and booleans, bitwise-by-value
(NaN positions, infinities and signed zeros included) for exactly rounded
float ops, a ULP budget for transcendental functions.

Cases are grouped into configurations; each configuration runs in one fresh
subprocess (`python tests/test_jax_sweep.py CONFIG [CASE-GLOB]` prints one
JSON line per case with that case's failures), and within a case the checks
with equal tolerances are fused into one jitted function per backend, so
the default sweep (elementwise, x64, arrays, programs) costs four process
start-ups and a few hundred compilations.  The ``*_slow`` configurations add
dense grids, more shapes, dtypes and seeds and are marked ``slow``.

Mismatches that are not our bugs (XLA CPU's own accuracy, implementation-
defined results, lowerings this platform does not have yet) are listed in
XFAIL with the reason; everything else fails the test.

The machinery is in ``jax_sweep/harness.py``; the cases are in the other
modules of ``jax_sweep/``, one per op family (CASE_MODULES below).  This file
is the pytest side and the subprocess entry.
"""

import os
import sys

import pytest

# Importing a case module registers its cases and its XFAIL entries.
from jax_sweep import (
    conversions,
    elementwise,
    harness,
    indexing,
    linalg_fft_random,
    programs,
    reductions,
    special,
)

CASE_MODULES = (elementwise, conversions, indexing, programs, reductions, linalg_fft_random,
                special)


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory):
    """A folder every xdist worker of this run sees (None without xdist): each
    configuration's subprocess runs once per run, not once per worker."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return None
    return str(tmp_path_factory.getbasetemp().parent)


@pytest.mark.parametrize("name", harness.params())
def test_sweep(name, shared_dir):
    cfg = harness.CASES[name][0]
    results = harness.config_results(cfg, shared_dir)
    r = results.get(name)
    if r is None:
        proc = results["__process__"]
        pytest.fail(f"case {name} produced no result; config {cfg} exited with {proc['rc']}; "
                    f"stderr tail:\n{proc['stderr']}")
    assert r["checks"] > 0, f"case {name} ran no checks"
    real, expected = [], {}
    for f in r["failures"]:
        reason = harness.xfail_reason(name, f["label"])
        if reason is None:
            real.append(f)
        else:
            expected.setdefault(reason, []).append(f["label"])
    if real:
        pytest.fail(f"{len(real)} of {r['checks']} checks differ from XLA CPU:\n" +
                    "\n".join(f"- {f['label']}: {f['msg']}" for f in real), pytrace=False)
    if expected:
        pytest.xfail("; ".join(f"{reason} ({', '.join(sorted(set(labels))[:8])})"
                               for reason, labels in expected.items()))


@pytest.mark.parametrize("cfg", harness.config_params())
def test_config_process_exits_cleanly(cfg, shared_dir):
    proc = harness.config_results(cfg, shared_dir)["__process__"]
    assert proc["rc"] == 0, f"exit code {proc['rc']}; stderr tail:\n{proc['stderr']}"


if __name__ == "__main__":
    harness.run_config(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
