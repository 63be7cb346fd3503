"""Conversions: convert between every pair of dtypes, reduce_precision, the
narrow (8/6/4-bit float, sub-byte int) types, and rounding checked against the
correctly rounded value."""

import math

from .harness import FTZ, case, xfail
from .inputs import apply_all, dtypes_for, edge_values, is_float, np_dtype

# Differences from XLA CPU that are not our bugs: "case/label" glob -> reason
# (see harness.xfail).
xfail({
    "convert/subnormal:float32->*": FTZ,
    "convert/subnormal:bfloat16->*": FTZ,
    "convert/subnormal:float64->*": FTZ,
    "narrow_types/from:float4_e2m1fn->['int32']": "XLA CPU converts float4_e2m1fn 6.0 (its largest "
                                                  "value) to INT_MAX/INT_MIN; we give 6/-6",
})



@case("elementwise", "x64", "elementwise_slow", "elementwise_x64_slow")
def convert(c):
    """lax.convert_element_type between every pair of dtypes, on edge values."""
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    srcs = dtypes_for(c.cfg, "all")
    dsts = list(srcs)
    if "x64" not in c.cfg:
        dsts += ["float8_e4m3fn", "float8_e5m2"]
        srcs = srcs + ["float8_e4m3fn", "float8_e5m2"]
    else:
        srcs = srcs + ["float32", "int32", "uint32", "float16", "bfloat16"]
        dsts = dsts + ["float32", "int32", "uint32", "float16", "bfloat16", "int8", "uint8"]
    if not c.slow:
        # Each source dtype to a spread of destinations.
        pick = {"float32", "float16", "bfloat16", "int8", "uint8", "int32", "uint32", "bool",
                "complex64", "float8_e4m3fn", "float8_e5m2", "float64", "int64", "uint64",
                "complex128"}
        dsts = [d for d in dsts if d in pick]
    for s in srcs:
        x = edge_values(s)
        ops, jops = {}, {}
        for d in dsts:
            sk, dk = np.dtype(np_dtype(s)).kind, np.dtype(np_dtype(d)).kind
            if s == d or (sk == "c" and dk != "c"):
                continue  # complex -> real: JAX warns and takes the real part (the real op)
            ops[d] = lambda v, d=d: lax.convert_element_type(v, np_dtype(d))
            if dk in "iu" and sk not in "iub":
                jops[d] = lambda v, d=d: jnp.asarray(v).astype(np_dtype(d))
        c(f"{s}->", apply_all(ops), x)
        if jops:
            c(f"astype:{s}->", apply_all(jops), x)
        if is_float(np_dtype(s)) and np_dtype(s).itemsize > 1:
            c(f"subnormal:{s}->", apply_all(ops), edge_values(s, subnormal=True))
    for s, d in [("float32", "int32"), ("float32", "bfloat16"), ("int32", "float32"),
                 ("float16", "float32")]:
        if s in srcs:
            v = edge_values(s)[:16]
            if np_dtype(d).itemsize > v.dtype.itemsize:
                v = v.reshape(-1, np_dtype(d).itemsize // v.dtype.itemsize)
            c(f"bitcast:{s}->{d}", lambda v, d=d: lax.bitcast_convert_type(v, np_dtype(d)), v)


@case("elementwise")
def reduce_precision(c):
    from jax import lax
    x = edge_values("float32")
    for e, m in [(5, 10), (8, 7), (4, 3), (5, 2), (8, 23), (3, 1)]:
        c(f"reduce_precision[{e},{m}]", lambda v, e=e, m=m: lax.reduce_precision(v, e, m), x)


NARROW = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz",
          "float8_e3m4", "float8_e4m3", "float8_e8m0fnu", "float4_e2m1fn", "int4", "uint4", "int2", "uint2"]


def _narrow_values(name):
    """Values spanning a narrow type's range (all of them for 4-bit and 8-bit floats)."""
    import ml_dtypes
    import numpy as np
    dt = np_dtype(name)
    if name.startswith(("int", "uint")):
        ii = ml_dtypes.iinfo(dt)
        return np.arange(int(ii.min), int(ii.max) + 1).astype(dt)
    bits = 8 if name.startswith("float8") else 4
    if bits == 8:
        return np.arange(256, dtype=np.uint8).view(dt)
    return np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]).astype(dt)


@case("elementwise")
def narrow_types(c):
    """Every value of the 8- and 4-bit floats and the sub-byte ints through
    conversions to and from f32/f16/bf16/i32, and f32 values rounded to them."""
    from jax import lax
    np = c.np
    wide = ["float32", "float16", "bfloat16", "int32"]
    f = np.concatenate([edge_values("float32"), np.linspace(-500, 500, 61),
                        np.geomspace(1e-9, 1e4, 40), -np.geomspace(1e-9, 1e4, 40)]).astype(np.float32)
    for n in NARROW:
        dt = np_dtype(n)
        v = _narrow_values(n)
        c(f"from:{n}->", apply_all({w: (lambda x, w=w: lax.convert_element_type(x, np_dtype(w))) for w in wide}), v)
        src = f if not n.startswith(("int", "uint")) else \
            np.arange(-20, 20).astype(np.int32)
        c(f"to:{src.dtype}->{n}", lambda x, dt=dt: lax.convert_element_type(x, dt), src)
        if not n.startswith(("int", "uint")):
            c(f"to:bfloat16->{n}", lambda x, dt=dt: lax.convert_element_type(x, dt), f.astype(np_dtype("bfloat16")))
            c(f"to:float16->{n}", lambda x, dt=dt: lax.convert_element_type(x, dt), f.astype(np.float16))
        if n in ("float8_e4m3fn", "float8_e5m2", "int4", "uint4", "float8_e4m3fnuz", "float8_e3m4"):
            a = v[: v.size // 2 * 2]
            b = a[::-1]
            ops = {"add": lax.add, "mul": lax.mul, "max": lax.max, "lt": lax.lt, "neg": lambda x, y: lax.neg(x)}
            if not n.startswith(("int", "uint")):
                ops["div"] = lax.div
            c(f"arith:{n}", apply_all(ops), a, b)


@case("elementwise", "x64")
def conversion_rounding(c):
    """Conversions that round twice if done through an intermediate type:
    values just above/below ties of the narrow type, random bit patterns."""
    from jax import lax
    np = c.np
    rng = np.random.default_rng(7)
    x64 = "x64" in c.cfg
    wides = (["float64", "int64", "uint64"] if x64 else []) + ["float32", "int32", "uint32"]
    narrows = (["float32"] if x64 else []) + ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz"]
    for w in wides:
        dt = np_dtype(w)
        if dt.kind == "f":
            bits = rng.integers(0, 2 ** 63 if dt.itemsize == 8 else 2 ** 31, 400, dtype=np.int64)
            raw = bits.astype(np.uint64 if dt.itemsize == 8 else np.uint32).view(dt)
            # values near ties of the narrow types: 1 + k*2^-m + tiny
            base = np.array([1 + 2.0 ** -8 + 2.0 ** -30, 1 + 2.0 ** -11 + 2.0 ** -40, 1 + 2.0 ** -24 + 2.0 ** -50,
                             1 + 2.0 ** -4 + 2.0 ** -20, 3 * 2.0 ** -9 + 2.0 ** -33, 1 + 2.0 ** -3 + 2.0 ** -25])
            ties = np.concatenate([base, -base, base * 1024, base * 2.0 ** -20]).astype(dt)
            vals = np.concatenate([raw[np.isfinite(raw)][:200], ties])
        else:
            hi = np.iinfo(dt).max
            lo = np.iinfo(dt).min
            r = rng.integers(lo, hi, 300, dtype=dt, endpoint=True)
            # 2^k + 2^(k-24) + 1: above a float32 tie, exactly at it after rounding to f64
            ks = np.arange(25, min(np.iinfo(dt).bits - (0 if dt.kind == "u" else 1), 64))
            tie = np.array([(1 << int(k)) + (1 << int(k) - 24) + 1 for k in ks] +
                           [(1 << int(k)) + (1 << int(k) - 8) + 1 for k in ks] +
                           [(1 << int(k)) + (1 << int(k) - 11) + 1 for k in ks], dtype=object)
            tie = np.array([int(t) for t in tie if int(t) <= hi], dtype=dt)
            vals = np.concatenate([r, tie])
        targets = [n for n in narrows if np_dtype(n).itemsize < dt.itemsize or (dt.kind != "f" and n != w)]
        # XLA CPU's answer here depends on the host CPU: without AVX512-FP16 it converts f64 and
        # 64-bit integers to f16/bf16 through f32 and rounds twice (AMD EPYC: f64 1.00048828125095
        # -> 1.0 where the correctly rounded f16 is 1.001).  The spec rounds once, to nearest
        # even, so finite in-range results are checked against the exact rounding instead.
        c(f"{w}->", apply_all({n: (lambda v, n=n: lax.convert_element_type(v, np_dtype(n))) for n in targets}),
          vals, check=lambda want, got, vals=vals: _check_correctly_rounded(vals, want, got))


def _check_correctly_rounded(vals, want, got):
    """Assert ``got`` (the conversion of ``vals`` to got.dtype) is the correctly
    rounded value (round to nearest, ties to even), computed exactly with
    Fractions over every finite value of the (at most 16-bit) target type.
    Values outside the target's finite range, NaNs and infinities are compared
    with XLA CPU's ``want`` (no double rounding can change them)."""
    from fractions import Fraction

    import numpy as np
    dt = got.dtype
    if dt.itemsize > 2:
        # f64/int64 -> f32: numpy's cast is the hardware's single correctly rounded conversion.
        exact = np.asarray(vals).astype(dt)
        _assert_same_values(exact, got, vals)
        return
    bits = np.arange(2 ** (8 * dt.itemsize), dtype=np.uint16 if dt.itemsize == 2 else np.uint8)
    with np.errstate(invalid="ignore"):
        table = bits.view(dt).astype(np.float64)
    finite = np.isfinite(table)
    order = np.argsort(table[finite], kind="stable")
    grid_bits, grid = bits[finite][order], table[finite][order]
    big = grid[-1]
    expect = np.asarray(want).copy()
    for i, v in enumerate(np.asarray(vals).tolist()):
        if isinstance(v, float) and not math.isfinite(v):
            continue
        x = Fraction(v)
        if abs(x) > Fraction(big):
            continue  # overflow: implementation-defined for types without infinity
        j = int(np.searchsorted(grid, float(x)))
        best = None
        for k in range(max(j - 2, 0), min(j + 2, len(grid))):
            cand = (abs(Fraction(float(grid[k])) - x), int(grid_bits[k]) & 1, k)
            best = cand if best is None or cand < best else best
        if x == 0:
            continue  # the sign of zero follows the input; XLA agrees on it
        if grid[best[2]] == 0:  # underflow keeps the sign, where the type has a -0
            expect[i] = np.array(-0.0 if x < 0 else 0.0).astype(dt)
        else:
            expect[i] = np.array(grid_bits[best[2]]).view(dt)
    _assert_same_values(expect, got, vals)


def _assert_same_values(expect, got, vals):
    import numpy as np
    e64, g64 = np.asarray(expect).astype(np.float64), np.asarray(got).astype(np.float64)
    same = (e64 == g64) | (np.isnan(e64) & np.isnan(g64))
    if not same.all():
        idx = np.flatnonzero(~same)[:6]
        rows = [f"  at {i}: got {got[i]!r}, correctly rounded {expect[i]!r} (input {np.asarray(vals)[i]!r})"
                for i in idx]
        raise AssertionError(f"({got.dtype}[{got.size}]): {int((~same).sum())} elements are not "
                             "correctly rounded\n" + "\n".join(rows))
