"""What asynchronous execution buys on a training loop.

    python -m benchmarks.async_loop [--steps 60] [--every 1,10] [--repeats 3] [--quick]

A training loop in Python: each step prepares the next batch on the host
(numpy: shuffle and normalize, as an input pipeline does), dispatches one
jitted SGD step of the MLP of ``benchmarks/workloads.py`` (784-512-512-10,
batch 128; ``--quick``: 32-64-64-10, batch 16) with the parameters donated,
and reads the loss every N steps (``float(loss)`` waits for the step). Each
execution mode of the plugin (``STABLEHLO_REF_ASYNC`` = ``0`` sync, ``1``
async, ``auto``) runs in its own process, the modes interleaved over
``--repeats`` rounds; the report gives the median wall time and process CPU
time per step and checks that every mode computed the same final
parameters, bit for bit.

Asynchronous dispatch can only win what runs while the program runs: the
host work of the next step and the Python of JAX's dispatch, on the second
core, in the moments the worker releases the GIL (inside numpy kernels).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from stablehlo_pjrt import config

MODES = ("0", "1", "auto")
MODE_NAMES = {"0": "sync", "1": "async", "auto": "auto"}


def _child(steps: int, every: int, quick: bool) -> dict:
    import time

    import jax
    import numpy as np

    from benchmarks.workloads import _mlp_step

    fn, args = _mlp_step(quick)
    nparams = len(args) - 2
    dev = jax.devices("stablehlo_ref")[0]
    step = jax.jit(fn, donate_argnums=tuple(range(nparams)))
    params = [jax.device_put(a, dev) for a in args[:nparams]]
    x_all = np.random.default_rng(1).standard_normal((8 * len(args[-2]),) + args[-2].shape[1:])
    x_all = x_all.astype(np.float32)
    labels = args[-1]
    rng = np.random.default_rng(2)

    def batch():
        # The host side of an input pipeline: pick, normalize.
        idx = rng.permutation(len(x_all))[:len(labels)]
        xb = x_all[idx]
        xb = (xb - xb.mean(axis=0)) / (xb.std(axis=0) + 1e-6)
        return jax.device_put(xb.astype(np.float32), dev)

    # Warm-up: compile, and one run that sets the program's run time.
    loss, *params = step(*params, batch(), labels)
    float(loss)
    t0, c0 = time.perf_counter(), time.process_time()
    losses = []
    for i in range(steps):
        loss, *params = step(*params, batch(), labels)
        if (i + 1) % every == 0:
            losses.append(float(loss))
    final = [np.asarray(p) for p in params]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    digest = [float(np.sum(p.astype(np.float64))) for p in final]
    return {"wall_ms": 1e3 * wall / steps, "cpu_ms": 1e3 * cpu / steps,
            "digest": digest, "last_loss": losses[-1] if losses else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", default="1,10", help="read the loss every N steps (list)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("EVERY", "STEPS"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(_child(int(a.child[1]), int(a.child[0]), a.quick)))
        return 0
    everies = [int(e) for e in a.every.split(",")]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    results = {(m, e): [] for m in MODES for e in everies}
    for _ in range(a.repeats):
        for e in everies:
            for m in MODES:
                env = config.child_environ()
                env.update(JAX_PLATFORMS="stablehlo_ref", STABLEHLO_REF_ASYNC=m,
                           PYTHONPATH=root + os.pathsep + env.get("PYTHONPATH", ""))
                cmd = [sys.executable, "-m", "benchmarks.async_loop", "--child", str(e),
                       str(a.steps)] + (["--quick"] if a.quick else [])
                p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=root)
                if p.returncode:
                    sys.stderr.write(p.stderr[-3000:])
                    return 1
                results[m, e].append(json.loads(p.stdout.strip().splitlines()[-1]))
    size = "32-64-64-10, batch 16" if a.quick else "784-512-512-10, batch 128"
    print(f"MLP {size}, {a.steps} steps, median of {a.repeats} (ms per step)\n")
    print("| loss read every | mode | wall | process CPU |")
    print("|---|---|---|---|")
    same = True
    for e in everies:
        ref = results["0", e][0]["digest"]
        for m in MODES:
            rs = results[m, e]
            same &= all(r["digest"] == ref for r in rs)
            print(f"| {e} | {MODE_NAMES[m]} | {statistics.median(r['wall_ms'] for r in rs):.2f} "
                  f"| {statistics.median(r['cpu_ms'] for r in rs):.2f} |")
    print(f"\nfinal parameters identical in every mode: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
