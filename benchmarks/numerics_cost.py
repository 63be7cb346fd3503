"""The cost of spec numerics against accurate numerics, per op family.

    python -m benchmarks.numerics_cost [--repeats N] [--without-c]

Compiles each program twice (``numerics="accurate"`` and ``"spec"``) and
times the two alternately in one process, taking the median of the process
CPU time of each (less sensitive than wall time to a loaded machine). Prints
one row per program: both times and spec / accurate. ``--without-c`` adds
the ratio of spec mode without the C loops: a child process in which
``stablehlo_interpreter._libm_loops`` cannot be imported (an install without
the C module: the numpy and ``math`` path) times both modes the same way.
docs/numerics.md keeps a run's table.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

import ml_dtypes
import numpy as np

import stablehlo_interpreter as shi


def _t(shape, et):
    return "tensor<" + "".join(f"{s}x" for s in shape) + et + ">"


def _unary(op, shape, et):
    t = _t(shape, et)
    return f"func.func @main(%a: {t}) -> {t} {{\n  %0 = stablehlo.{op} %a : {t}\n  return %0 : {t}\n}}"


def _binary(op, shape, et):
    t = _t(shape, et)
    return (f"func.func @main(%a: {t}, %b: {t}) -> {t} {{\n  %0 = stablehlo.{op} %a, %b : {t}\n"
            f"  return %0 : {t}\n}}")


def _reduce(shape, dims, et="f32"):
    out = tuple(s for d, s in enumerate(shape) if d not in dims)
    t, o, s = _t(shape, et), _t(out, et), _t((), et)
    zero = "(0.0, 0.0)" if et.startswith("complex") else "0.0"
    return (f"func.func @main(%a: {t}) -> {o} {{\n  %z = stablehlo.constant dense<{zero}> : {s}\n"
            f"  %0 = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = "
            f"{list(dims)} : ({t}, {s}) -> {o}\n  return %0 : {o}\n}}")


def _window(shape, wd, ws, pad, out, et="f32"):
    t, o, s = _t(shape, et), _t(out, et), _t((), et)
    padding = "[" + ", ".join(f"[{lo}, {hi}]" for lo, hi in pad) + "]"
    arr = lambda v: "array<i64: " + ", ".join(map(str, v)) + ">"  # noqa: E731
    return (f"func.func @main(%a: {t}) -> {o} {{\n  %z = stablehlo.constant dense<0.0> : {s}\n"
            f"  %0 = \"stablehlo.reduce_window\"(%a, %z) ({{\n  ^bb0(%x: {s}, %y: {s}):\n"
            f"    %r = stablehlo.add %x, %y : {s}\n    stablehlo.return %r : {s}\n  }}) "
            f"{{window_dimensions = {arr(wd)}, window_strides = {arr(ws)}, "
            f"padding = dense<{padding}> : tensor<{len(shape)}x2xi64>}} : ({t}, {s}) -> {o}\n"
            f"  return %0 : {o}\n}}")


def _dot(m, k, n, et="f32"):
    a, b, o = _t((m, k), et), _t((k, n), et), _t((m, n), et)
    return (f"func.func @main(%a: {a}, %b: {b}) -> {o} {{\n  %0 = stablehlo.dot_general %a, %b, "
            f"contracting_dims = [1] x [0] : ({a}, {b}) -> {o}\n  return %0 : {o}\n}}")


def _conv(n, hw, c, o, k, et="f32"):
    lt, kt, ot = _t((n, hw, hw, c), et), _t((k, k, c, o), et), _t((n, hw, hw, o), et)
    p = k // 2
    return (f"func.func @main(%a: {lt}, %b: {kt}) -> {ot} {{\n  %0 = stablehlo.convolution(%a, %b) "
            f"dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {{stride = [1, 1], "
            f"pad = [[{p}, {p}], [{p}, {p}]]}} {{batch_group_count = 1 : i64, "
            f"feature_group_count = 1 : i64}} : ({lt}, {kt}) -> {ot}\n  return %0 : {ot}\n}}")


def cases():
    """(family, name, text, args)."""
    rng = np.random.default_rng(0)

    def r(shape, dtype=np.float32):
        x = rng.standard_normal(shape)
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.standard_normal(shape)
        return x.astype(dtype)
    big, mid = (1000, 1000), (100, 1000)
    r64 = r(mid, np.float64)
    return [
        ("elementwise", "add f32 1e6", _binary("add", big, "f32"), [r(big), r(big)]),
        ("elementwise", "exponential f32 1e6", _unary("exponential", big, "f32"), [r(big)]),
        ("elementwise", "tanh f32 1e6", _unary("tanh", big, "f32"), [r(big)]),
        ("elementwise", "logistic f32 1e6", _unary("logistic", big, "f32"), [r(big)]),
        ("elementwise", "exponential f64 1e5", _unary("exponential", mid, "f64"), [r64]),
        ("elementwise", "expm1 f64 1e5", _unary("exponential_minus_one", mid, "f64"), [r64]),
        ("elementwise", "log f64 1e5", _unary("log", mid, "f64"), [np.abs(r64)]),
        ("elementwise", "tanh f64 1e5", _unary("tanh", mid, "f64"), [r64]),
        ("elementwise", "sine f64 1e5", _unary("sine", mid, "f64"), [r64]),
        ("elementwise", "power f64 1e5", _binary("power", mid, "f64"), [np.abs(r64), r64]),
        ("elementwise", "atan2 f64 1e5", _binary("atan2", mid, "f64"), [r64, r64[::-1]]),
        ("elementwise", "logistic f64 1e5", _unary("logistic", mid, "f64"), [r64]),
        ("elementwise", "divide complex128 1e5", _binary("divide", mid, "complex<f64>"),
         [r(mid, np.complex128), r(mid, np.complex128)]),
        ("reduction", "sum f32 (1000,1000) axis 1", _reduce(big, (1,)), [r(big)]),
        ("reduction", "sum f32 (1000,1000) axis 0", _reduce(big, (0,)), [r(big)]),
        ("reduction", "sum f32 1e6 to a scalar", _reduce(big, (0, 1)), [r(big)]),
        ("reduction", "sum f64 1e6 to a scalar", _reduce(big, (0, 1), "f64"),
         [r(big, np.float64)]),
        ("reduction", "sum f32 (250000,4) axis 0", _reduce((250000, 4), (0,)),
         [r((250000, 4))]),
        ("reduction", "sum f32 (100,100,100) axes 0,2", _reduce((100, 100, 100), (0, 2)),
         [r((100, 100, 100))]),
        ("reduction", "sum complex64 (1000,1000) axis 1", _reduce(big, (1,), "complex<f32>"),
         [r(big, np.complex64)]),
        ("reduction", "sum bf16 1e6 to a scalar", _reduce(big, (0, 1), "bf16"),
         [r(big, ml_dtypes.bfloat16)]),
        ("reduction", "sum bf16 (1000,1000) axis 1", _reduce(big, (1,), "bf16"),
         [r(big, ml_dtypes.bfloat16)]),
        ("reduction", "sum f16 1e6 to a scalar", _reduce(big, (0, 1), "f16"),
         [r(big, np.float16)]),
        ("reduction", "sum f16 (1000,1000) axis 1", _reduce(big, (1,), "f16"),
         [r(big, np.float16)]),
        ("window", "cumsum f32 (1000,1000) axis 1",
         _window(big, (1, 1000), (1, 1), ((0, 0), (999, 0)), big), [r(big)]),
        ("window", "3x3 sum pool f32 (8,128,128,16)",
         _window((8, 128, 128, 16), (1, 3, 3, 1), (1, 1, 1, 1),
                 ((0, 0), (1, 1), (1, 1), (0, 0)), (8, 128, 128, 16)),
         [r((8, 128, 128, 16))]),
        ("contraction", "dot f32 256x256x256", _dot(256, 256, 256), [r((256, 256)), r((256, 256))]),
        ("contraction", "dot f32 64x4096x64", _dot(64, 4096, 64), [r((64, 4096)), r((4096, 64))]),
        ("contraction", "dot f64 256x256x256", _dot(256, 256, 256, "f64"),
         [r((256, 256), np.float64), r((256, 256), np.float64)]),
        ("contraction", "dot f32 1024x1024x1 (matrix-vector)", _dot(1024, 1024, 1),
         [r((1024, 1024)), r((1024, 1))]),
        ("contraction", "dot bf16 128x128x128", _dot(128, 128, 128, "bf16"),
         [r((128, 128), ml_dtypes.bfloat16), r((128, 128), ml_dtypes.bfloat16)]),
        ("contraction", "dot f16 128x128x128", _dot(128, 128, 128, "f16"),
         [r((128, 128), np.float16), r((128, 128), np.float16)]),
        ("contraction", "dot complex64 128x128x128", _dot(128, 128, 128, "complex<f32>"),
         [r((128, 128), np.complex64), r((128, 128), np.complex64)]),
        ("contraction", "conv f32 NHWC (8,32,32,16) 3x3 -> 16", _conv(8, 32, 16, 16, 3),
         [r((8, 32, 32, 16)), r((3, 3, 16, 16))]),
    ]


def measure(repeats=5):
    """(family, name, accurate s, spec s) per program."""
    rows = []
    for family, name, text, args in cases():
        progs = {m: shi.compile(text, numerics=m) for m in ("accurate", "spec")}
        times = {m: [] for m in progs}
        for m, p in progs.items():   # warm up (plans, caches)
            p.run(*args)
        for _ in range(repeats):
            for m, p in progs.items():
                t0 = time.process_time()
                p.run(*args)
                times[m].append(time.process_time() - t0)
        rows.append((family, name, statistics.median(times["accurate"]),
                     statistics.median(times["spec"])))
    return rows


_CHILD = """import sys, json
sys.modules["stablehlo_interpreter._libm_loops"] = None   # as if not built
from benchmarks import numerics_cost
print(json.dumps(numerics_cost.measure({repeats})))
"""


def measure_without_c(repeats=5):
    """{name: spec / accurate} where the C module cannot be imported."""
    p = subprocess.run([sys.executable, "-c", _CHILD.format(repeats=int(repeats))],
                       capture_output=True, text=True, check=True)
    return {name: spec / acc for _f, name, acc, spec in json.loads(p.stdout.splitlines()[-1])}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.numerics_cost")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--without-c", action="store_true",
                   help="also time spec mode without the C loops (the numpy/math path)")
    a = p.parse_args(argv)
    extra = " spec without the C module / accurate |" if a.without_c else ""
    print(f"| family | program | accurate (ms CPU) | spec (ms CPU) | spec / accurate |{extra}")
    print("|---|---|---:|---:|---:|" + ("---:|" if a.without_c else ""))
    no_c = measure_without_c(a.repeats) if a.without_c else {}
    for family, name, acc, spec in measure(a.repeats):
        tail = f" {no_c[name]:.2f}x |" if name in no_c else ""
        print(f"| {family} | {name} | {acc * 1e3:.1f} | {spec * 1e3:.1f} | {spec / acc:.2f}x |{tail}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
