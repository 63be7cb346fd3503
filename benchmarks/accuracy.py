"""Accuracy of reductions and cumulative ops: stablehlo_ref next to XLA CPU.

    python -m benchmarks.accuracy [--quick] [--md docs/accuracy.md] [--json out.json]
                                  [--check]

Both backends run the same jitted JAX function in one process
(JAX_PLATFORMS=cpu,stablehlo_ref). Each case's error is the largest relative
error over its outputs, ``max |got - truth| / |truth|``, against a truth
computed in float64 (complex128) from the very inputs the backends get
(bf16/f16/f32 values are exact in float64); cumulative sums use a float64
compensated scan, so the truth is exact well below float32's resolution.

Convolutions have outputs near zero whose relative error means nothing; their
error is ``max |got - truth| / (|x| * |w|)``: relative to the same convolution of
the absolute values (the sum of the absolute terms of each dot product).

``--check`` exits non-zero if ours is less accurate than XLA CPU on any case
marked ``strict`` (the pure reductions and scans; see the table's notes).
XLA CPU's numbers vary with the host CPU, so no unit test compares with them:
tests/test_accuracy_benchmark.py runs ``--quick`` and checks ours against a
bound of the element type instead.
"""

import argparse
import json
import sys

from stablehlo_pjrt import config

config.default_variable(config.JAX_PLATFORMS, "cpu,stablehlo_ref")

import numpy as np  # noqa: E402


def _rng(seed=0):
    return np.random.default_rng(seed)


def _dtype(name):
    import ml_dtypes
    return {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
            "c64": np.complex64}[name]


def _uniform(shape, dt, lo=0.0, hi=1.0, seed=0):
    r = _rng(seed)
    x = lo + (hi - lo) * r.random(shape)
    if dt == "c64":
        x = x + 1j * (lo + (hi - lo) * r.random(shape))
    return x.astype(_dtype(dt))


def _wide(x):
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def _cumsum_truth(x, axis):
    """Prefix sums in float64 with Kahan compensation per step (vectorized
    over the other axes): error ~eps64, far below the f32 results'."""
    x = np.moveaxis(_wide(x), axis, 0)
    s = np.zeros(x.shape[1:], x.dtype)
    c = np.zeros_like(s)
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        y = x[i] - c
        t = s + y
        c = (t - s) - y
        s = t
        out[i] = s
    return np.moveaxis(out, 0, axis)


def _logcumsumexp_truth(x, axis):
    return np.logaddexp.accumulate(_wide(x), axis=axis)


def cases(quick):
    """(name, dtype, jax fn, inputs builder, truth fn, strict, note)."""
    import jax.numpy as jnp
    from jax import lax

    big = 20_000 if quick else 1_000_000
    mid = 5_000 if quick else 100_000
    out = []

    def add(name, dt, fn, build, truth, strict=True, note="", scale=None):
        out.append(dict(name=name, dtype=dt, fn=fn, build=build, truth=truth,
                        strict=strict, note=note, scale=scale))

    # The table (f32).
    add(f"x.mean(axis=0), x ({big}, 4) uniform [0,1)", "f32", lambda x: x.mean(axis=0),
        lambda: _uniform((big, 4), "f32"), lambda x: _wide(x).mean(axis=0))
    n = big // 2
    add(f"x.var(axis=0), x ({n}, 4) uniform [100,101)", "f32", lambda x: x.var(axis=0),
        lambda: _uniform((n, 4), "f32", 100, 101), lambda x: _wide(x).var(axis=0),
        strict=False,
        note="var rounds the mean, each square and two divisions outside the reductions")
    nb = 8 if quick else 64
    add(f"x.mean(axis=(0,1,2)), NHWC ({nb},32,32,16)", "f32",
        lambda x: x.mean(axis=(0, 1, 2)), lambda: _uniform((nb, 32, 32, 16), "f32"),
        lambda x: _wide(x).mean(axis=(0, 1, 2)))
    m = big // 500
    add(f"x.sum(axis=(0,2)), ({m},16,64)", "f32", lambda x: x.sum(axis=(0, 2)),
        lambda: _uniform((m, 16, 64), "f32"), lambda x: _wide(x).sum(axis=(0, 2)))
    add(f"x.sum(axis=1), (4, {big})", "f32", lambda x: x.sum(axis=1),
        lambda: _uniform((4, big), "f32"), lambda x: _wide(x).sum(axis=1))

    # Shapes x axes x dtypes of a plain sum (jnp.sum keeps the element type).
    for dt in ("f32", "bf16", "f16", "c64"):
        # f16 sums must stay below 65504: means of [0,1) values keep it there.
        k = min(big, 30_000) if dt == "f16" else big
        scale = 1.0
        for shape, axes in [((k, 8), (0,)), ((8, k), (1,)), ((k // 64, 64, 8), (0, 1)),
                            ((64, k // 64), (0,)), ((k // 256, 16, 16), (0, 2))]:
            add(f"sum axis={axes} of {shape}", dt,
                (lambda a: (lambda x: jnp.sum(x, axis=a)))(axes),
                (lambda s, d: (lambda: _uniform(s, d, 0, scale)))(shape, dt),
                (lambda a: (lambda x: _wide(x).sum(axis=a)))(axes))
        if dt in ("bf16", "f16"):
            # lax.reduce keeps the element type (jnp.sum accumulates bf16/f16
            # in f32 on both backends and rounds once, so it ties).
            kk = min(k, 4096)
            add(f"lax.reduce add axis=0 in {dt} of ({kk}, 8)", dt,
                lambda x: lax.reduce(x, np.array(0, x.dtype), lax.add, (0,)),
                (lambda d: (lambda: _uniform((kk, 8), d)))(dt),
                lambda x: _wide(x).sum(axis=0))
        if dt != "c64":  # complex numbers have no max in JAX
            add(f"max axis=0 of ({k}, 8)", dt, lambda x: jnp.max(x, axis=0),
                (lambda d: (lambda: _uniform((k, 8), d)))(dt),
                lambda x: _wide(x).max(axis=0))

    # Cumulative ops (JAX lowers them to prefix-scan reduce_windows).
    add(f"jnp.cumsum, {big} f32", "f32", lambda x: jnp.cumsum(x),
        lambda: _uniform((big,), "f32"), lambda x: _cumsum_truth(x, 0))
    add(f"jnp.cumsum axis=0, ({mid // 10}, 16) f32", "f32", lambda x: jnp.cumsum(x, axis=0),
        lambda: _uniform((mid // 10, 16), "f32", -1, 1), lambda x: _cumsum_truth(x, 0),
        note="signed values: relative error near cancellations")
    add(f"jnp.cumsum, {mid} bf16", "bf16", lambda x: jnp.cumsum(x),
        lambda: _uniform((mid,), "bf16"), lambda x: _cumsum_truth(x, 0))
    add(f"jnp.cumsum, {min(mid, 50_000)} f16", "f16", lambda x: jnp.cumsum(x),
        lambda: _uniform((min(mid, 50_000),), "f16"), lambda x: _cumsum_truth(x, 0))
    add(f"jnp.cumsum, {mid} c64", "c64", lambda x: jnp.cumsum(x),
        lambda: _uniform((mid,), "c64"), lambda x: _cumsum_truth(x, 0))
    add(f"lax.cumsum reverse, {mid} f32", "f32", lambda x: lax.cumsum(x, reverse=True),
        lambda: _uniform((mid,), "f32"),
        lambda x: _cumsum_truth(x[::-1], 0)[::-1])
    add(f"jnp.cumprod, {mid} f32 in [1-1e-5, 1+1e-5]", "f32", lambda x: jnp.cumprod(x),
        lambda: _uniform((mid,), "f32", 1 - 1e-5, 1 + 1e-5),
        lambda x: np.exp(np.cumsum(np.log(_wide(x)))))
    add(f"lax.cummax, {big} f32", "f32", lambda x: lax.cummax(x),
        lambda: _uniform((big,), "f32", -1, 1), lambda x: np.maximum.accumulate(_wide(x)))
    add(f"lax.cumlogsumexp, {mid} f32", "f32", lambda x: lax.cumlogsumexp(x),
        lambda: _uniform((mid,), "f32", -3, 3), lambda x: _logcumsumexp_truth(x, 0),
        note="the body's exp/log1p round in f32 on both backends")
    _window_and_conv_cases(add, quick)
    return out


def _sum_pool_truth(x, win, strides, axes):
    """Window sums (no padding) in float64 over a strided view: exact here."""
    from numpy.lib.stride_tricks import sliding_window_view
    v = sliding_window_view(_wide(x), win, axis=axes)
    sel = [slice(None)] * x.ndim
    for a, st in zip(axes, strides):
        sel[a] = slice(None, None, st)
    return v[tuple(sel)].sum(axis=tuple(range(x.ndim, x.ndim + len(axes))))


def _conv_nchw(x, w):
    """float64 NCHW x OIHW convolution, stride 1, SAME padding (odd kernels)."""
    from numpy.lib.stride_tricks import sliding_window_view
    kh, kw = w.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2)))
    win = sliding_window_view(xp, (kh, kw), axis=(2, 3))  # (N, C, H, W, kh, kw)
    return np.einsum("nchwij,ocij->nohw", win, w, optimize=True)


def _conv_filter_grad(x, g, kshape):
    """d(sum(conv(x, w) * g))/dw for the convolution above, in float64."""
    from numpy.lib.stride_tricks import sliding_window_view
    kh, kw = kshape
    xp = np.pad(x, ((0, 0), (0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2)))
    win = sliding_window_view(xp, (kh, kw), axis=(2, 3))
    return np.einsum("nohw,nchwij->ocij", g, win, optimize=True)


def _conv_data_grad(w, g):
    """d(sum(conv(x, w) * g))/dx: the transposed convolution, in float64."""
    kh, kw = w.shape[2:]
    n, _, h, wd = g.shape
    out = np.zeros((n, w.shape[1], h + kh - 1, wd + kw - 1))
    for i in range(kh):
        for j in range(kw):
            out[:, :, i:i + h, j:j + wd] += np.einsum("nohw,oc->nchw", g, w[:, :, i, j])
    return out[:, :, kh // 2:kh // 2 + h, kw // 2:kw // 2 + wd]


def _window_and_conv_cases(add, quick):
    """Pooling window sums and the convolutions of a CNN training step."""
    import jax
    from jax import lax

    nb = 4 if quick else 32
    for dt in ("f32", "bf16"):
        add(f"sum pool 3x3 stride 1, NHWC ({nb},32,32,16) uniform [0,1)", dt,
            lambda x: lax.reduce_window(x, np.array(0, x.dtype), lax.add, (1, 3, 3, 1),
                                        (1, 1, 1, 1), "VALID"),
            (lambda d: (lambda: _uniform((nb, 32, 32, 16), d)))(dt),
            lambda x: _sum_pool_truth(x, (3, 3), (1, 1), (1, 2)))
        add(f"sum pool 2x2 stride 2, NCHW ({nb},16,32,32) uniform [0,1)", dt,
            lambda x: lax.reduce_window(x, np.array(0, x.dtype), lax.add, (1, 1, 2, 2),
                                        (1, 1, 2, 2), "VALID"),
            (lambda d: (lambda: _uniform((nb, 16, 32, 32), d)))(dt),
            lambda x: _sum_pool_truth(x, (2, 2), (2, 2), (2, 3)))

    def normal(*shapes, seed=0):
        r = _rng(seed)
        return tuple(r.standard_normal(s).astype(np.float32) for s in shapes)

    def conv(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME")

    note_f32 = "f32 accumulation in XLA's order: the same sums as XLA CPU here"
    for c_in, hw, c_out in ((3, 32, 16), (16, 16, 16)):
        xs, ws = (nb, c_in, hw, hw), (c_out, c_in, 3, 3)
        short = c_in * 9 <= 32
        tag = f"NCHW ({nb},{c_in},{hw},{hw}) * ({c_out},{c_in},3,3)"
        add(f"conv {tag}" + (" (27-term dots)" if short else ""), "f32",
            lambda a: conv(*a), (lambda s=xs, t=ws: normal(s, t)),
            lambda a: _conv_nchw(*map(_wide, a)),
            scale=lambda a: _conv_nchw(*(np.abs(_wide(v)) for v in a)),
            strict=short, note="" if short else note_f32)
        gs = (nb, c_out, hw, hw)
        add(f"conv weight gradient, {tag}", "f32",
            (lambda t: lambda a: jax.vjp(lambda w: conv(a[0], w), np.zeros(t, np.float32))[1](
                a[1])[0])(ws),
            (lambda s=xs, g=gs: normal(s, g, seed=1)),
            (lambda t: lambda a: _conv_filter_grad(*map(_wide, a), t[2:]))(ws),
            scale=(lambda t: lambda a: _conv_filter_grad(*(np.abs(_wide(v)) for v in a),
                                                         t[2:]))(ws))
        add(f"conv input gradient, {tag}", "f32",
            (lambda s: lambda a: jax.vjp(lambda x: conv(x, a[0]), np.zeros(s, np.float32))[1](
                a[1])[0])(xs),
            (lambda t=ws, g=gs: normal(t, g, seed=2)),
            lambda a: _conv_data_grad(*map(_wide, a)),
            scale=lambda a: _conv_data_grad(*(np.abs(_wide(v)) for v in a)),
            strict=c_in < c_out, note="" if c_in < c_out else note_f32)

    def conv_nhwc(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def nhwc_truth(x, w):
        return np.moveaxis(_conv_nchw(np.moveaxis(x, -1, 1), np.transpose(w, (3, 2, 0, 1))), 1, -1)

    # The channels-last im2col product in blocks shared with helper threads
    # (the cliff sweep's conv2d row).
    add(f"conv NHWC ({nb},32,32,16) * HWIO (3,3,16,32)", "f32",
        lambda a: conv_nhwc(*a), lambda: normal((nb, 32, 32, 16), (3, 3, 16, 32), seed=3),
        lambda a: nhwc_truth(*map(_wide, a)),
        scale=lambda a: nhwc_truth(*(np.abs(_wide(v)) for v in a)))


def _rel_error(got, truth, scale=None):
    got = _wide(np.asarray(got))
    truth = np.asarray(truth)
    denom = np.abs(truth) if scale is None else np.asarray(scale)
    denom = np.where(denom == 0, 1.0, denom)
    return float(np.max(np.abs(got - truth) / denom))


def run(quick=False, only=None):
    import jax
    cpu = jax.devices("cpu")[0]
    ref = jax.devices("stablehlo_ref")[0]
    rows = []
    for c in cases(quick):
        if only and not any(o in c["name"] for o in only):
            continue
        x = c["build"]()
        truth = c["truth"](x)
        scale = c["scale"](x) if c["scale"] else None
        errs = {}
        for label, dev in (("xla_cpu", cpu), ("stablehlo_ref", ref)):
            got = jax.jit(c["fn"])(jax.device_put(x, dev))
            errs[label] = _rel_error(np.asarray(got), truth, scale)
        rows.append(dict(name=c["name"], dtype=c["dtype"], strict=c["strict"], note=c["note"],
                         xla_cpu=errs["xla_cpu"], stablehlo_ref=errs["stablehlo_ref"],
                         ok=errs["stablehlo_ref"] <= errs["xla_cpu"]))
        print(f"{c['name']:52s} {c['dtype']:5s} xla_cpu {errs['xla_cpu']:.2e}  "
              f"stablehlo_ref {errs['stablehlo_ref']:.2e}", file=sys.stderr, flush=True)
    return rows


def markdown(rows):
    lines = ["| case | dtype | XLA CPU | stablehlo_ref | ours <= XLA |",
             "|---|---|---:|---:|:---:|"]
    for r in rows:
        mark = "yes" if r["ok"] else ("**no**" if r["strict"] else "no (see note)")
        name = r["name"] + (f" ({r['note']})" if r["note"] else "")
        lines.append(f"| {name} | {r['dtype']} | {r['xla_cpu']:.2e} | "
                     f"{r['stablehlo_ref']:.2e} | {mark} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.accuracy", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    ap.add_argument("--only", action="append", help="cases whose name contains this")
    ap.add_argument("--md", help="write the markdown table to this file")
    ap.add_argument("--json", help="write the rows as JSON to this file")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if ours is less accurate than XLA CPU on a strict case")
    args = ap.parse_args(argv)
    rows = run(args.quick, args.only)
    table = markdown(rows)
    print(table)
    if args.md:
        with open(args.md, "w") as f:
            f.write(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    bad = [r for r in rows if r["strict"] and not r["ok"]]
    if args.check and bad:
        print("less accurate than XLA CPU: " + ", ".join(r["name"] for r in bad),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
