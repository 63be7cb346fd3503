"""One benchmark process: times workloads on one system and prints JSON lines.

Run by the runner as ``python -m benchmarks.worker SYSTEM NAMES ...``; each
finished workload is printed as one line ``@@BENCH {json}`` so that the
runner keeps what finished even if the process dies or times out later.

Systems:
  ref  jax.jit on the stablehlo_ref PJRT plugin (JAX_PLATFORMS=stablehlo_ref)
  cpu  jax.jit on XLA CPU (JAX_PLATFORMS=cpu)
  cpp  the C++ StableHLO reference interpreter in jaxlib
       (``jaxlib.mlir.dialects.stablehlo.eval_module``) on the module lowered
       for CPU; the runner starts one such process per workload, with a
       timeout, because it aborts on ops it does not support.
"""

import argparse
import json
import statistics
import sys
import time
import traceback

import numpy as np

MARK = "@@BENCH "


def _summary(outputs):
    """A small fingerprint of the outputs, to check the systems agree."""
    out = []
    for a in outputs:
        a = np.asarray(a)
        f = a.astype(np.float64) if a.dtype.kind in "biuf" else a.astype(np.complex128).real
        out.append({"shape": list(a.shape), "dtype": str(a.dtype),
                    "sum": float(np.sum(f)), "absum": float(np.sum(np.abs(f))),
                    "head": [float(v) for v in f.ravel()[:4]]})
    return out


def _time(call, repeats, inner, budget, warmup=True):
    compile_s = None
    if warmup:
        t = time.perf_counter()
        outs = call()
        compile_s = time.perf_counter() - t
    else:
        outs = None
    samples = []
    start = time.perf_counter()
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(inner):
            res = call()
        samples.append((time.perf_counter() - t) / inner)
        if outs is None:
            outs = res
        if time.perf_counter() - start > budget:
            break
    return samples, compile_s, outs


def _record(w, system, samples, compile_s, outs):
    rec = {"name": w.name, "system": system, "status": "ok",
           "median_s": statistics.median(samples), "min_s": min(samples),
           "repeats": len(samples), "samples_s": samples}
    if compile_s is not None:
        rec["first_call_s"] = compile_s
    rec["outputs"] = _summary(outs)
    return rec


def run_jax(system, names, repeats, quick, budget):
    import jax

    from .workloads import BY_NAME
    backend = jax.default_backend()
    expected = "cpu" if system == "cpu" else "stablehlo_ref"
    if backend != expected:
        raise SystemExit(f"worker {system}: JAX backend is {backend!r}, expected {expected!r}")
    for name in names:
        w = BY_NAME[name]
        try:
            fn, args = w.build(quick)
            jf = jax.jit(fn)
            dargs = [jax.device_put(a) for a in args]
            jax.block_until_ready(dargs)

            def call():
                return jax.block_until_ready(jf(*dargs))
            samples, compile_s, outs = _time(call, repeats, w.inner, budget)
            outs = jax.tree_util.tree_leaves(outs)
            rec = _record(w, system, samples, compile_s, [np.asarray(o) for o in outs])
        except Exception as e:  # report and go on with the next workload
            rec = {"name": name, "system": system, "status": "error",
                   "error": f"{type(e).__name__}: {e}"[:500],
                   "traceback": traceback.format_exc()[-2000:]}
        print(MARK + json.dumps(rec), flush=True)


def run_cpp(names, repeats, quick, budget):
    import jax
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    from .workloads import BY_NAME
    for name in names:
        w = BY_NAME[name]
        fn, args = w.build(quick)
        module = jax.jit(fn).lower(*args).compiler_ir("stablehlo")
        with module.context:
            # np.array keeps 0-d arrays 0-d; unsigned types need signless=False.
            attrs = [ir.DenseElementsAttr.get(np.array(a, order="C"),
                                              signless=np.asarray(a).dtype.kind != "u")
                     for a in args]

            def call():
                return stablehlo.eval_module(module, attrs)
            # No warm-up: the interpreter has no compile step, and a run may
            # take minutes.
            samples, _, outs = _time(call, repeats, w.inner, budget, warmup=False)
            outs = [np.array(o) for o in outs]
        print(MARK + json.dumps(_record(w, "cpp", samples, None, outs)), flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.worker")
    p.add_argument("system", choices=["ref", "cpu", "cpp"])
    p.add_argument("names", nargs="+")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--budget", type=float, default=20.0,
                   help="stop repeating a workload after this many seconds")
    a = p.parse_args(argv)
    if a.system == "cpp":
        run_cpp(a.names, a.repeats, a.quick, a.budget)
    else:
        run_jax(a.system, a.names, a.repeats, a.quick, a.budget)


if __name__ == "__main__":
    sys.exit(main())
