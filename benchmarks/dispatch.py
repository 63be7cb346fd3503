"""Per-call cost of a cached executable: process CPU per call of
``jax.jit(lambda a: a + 1)`` on 4 f32, stablehlo_ref and XLA CPU in ONE
process, the two timed alternately (rounds of ``--calls`` calls each).

    python -m benchmarks.dispatch [--calls 3000] [--rounds 5]

Process CPU time (``time.process_time_ns``), not wall time: on a shared
machine a busy neighbour inflates wall time more than the CPU this process
spends; alternating the systems round by round exposes both to the same
load. Results are not read back (the call's dispatch only: an output of the
plugin's inline run is ready when the call returns, XLA CPU's may still be
running). Prints each round, the minimum and median per system, their ratio
and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    from stablehlo_pjrt import config
    config.default_variable(config.JAX_PLATFORMS, "cpu,stablehlo_ref")
    import jax  # after JAX_PLATFORMS is set
    import numpy as np

    f = jax.jit(lambda v: v + 1)
    x = np.arange(4, dtype=np.float32)
    args = {"xla": jax.device_put(x, jax.devices("cpu")[0]),
            "ref": jax.device_put(x, jax.devices("stablehlo_ref")[0])}
    for v in args.values():
        for _ in range(200):  # compile, then warm up
            f(v).block_until_ready()
    per_call: dict[str, list[float]] = {k: [] for k in args}
    for _ in range(a.rounds):
        for k, v in args.items():
            t0 = time.process_time_ns()
            for _ in range(a.calls):
                f(v)
            per_call[k].append((time.process_time_ns() - t0) / a.calls / 1e3)
    for k, times in per_call.items():
        print(f"{k}: " + " ".join(f"{t:.1f}" for t in times)
              + f"  us per call (min {min(times):.1f}, median {statistics.median(times):.1f})")
    ratio = min(per_call["ref"]) / min(per_call["xla"])
    print(f"ref/xla (minima): {ratio:.2f}x; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
