"""Inputs and dtype facts shared by the sweep's case modules.

Edge values of every dtype, random arrays with a fixed seed per shape, the
dtype lists of the 32-bit and x64 configurations and the ULP budgets of
transcendental functions.
"""

import math


def is_float(dt):
    import numpy as np
    dt = np.dtype(dt)
    return dt.kind == "f" or dt.name == "bfloat16" or dt.name.startswith("float8")


def finfo(dt):
    import ml_dtypes
    return ml_dtypes.finfo(dt)


def np_dtype(name):
    import ml_dtypes
    import numpy as np
    return np.dtype(getattr(ml_dtypes, name, None) or name)


def edge_values(name, subnormal=False):
    """Edge values of a dtype (a 1-d numpy array); floats: subnormals only if asked."""
    import ml_dtypes
    import numpy as np
    dt = np_dtype(name)
    if dt == np.bool_:
        return np.array([False, True])
    if dt.kind in "iu":
        ii = np.iinfo(dt)
        vals = [0, 1, 2, 3, 7, 100, ii.max, ii.max - 1, ii.max // 2]
        if dt.kind == "i":
            vals += [-1, -2, -7, -100, ii.min, ii.min + 1]
        vals = [v for v in vals if ii.min <= v <= ii.max]
        return np.array(sorted(set(vals)), dtype=dt)
    if dt.kind == "c":
        re = edge_values("float32" if dt.itemsize == 8 else "float64")
        re = re[[0, 1, 2, 3, 5, 6, 8, 9, 12]]
        a = np.array([complex(x, y) for x in re for y in re[::2]], dt)
        return a
    fi = ml_dtypes.finfo(dt)
    big = float(fi.max)
    tiny = float(fi.tiny)
    sub = float(fi.smallest_subnormal)
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.75, 2.5, float("nan"), float("inf"), float("-inf"),
            big, -big, tiny, -tiny, 1e-3, 100.0, math.pi, -1.5, 0.1, 7.0, -33.25, 1e4, 0.75, -0.3]
    if subnormal:
        vals = [sub, -sub, tiny / 2, -tiny * 0.75, tiny * (1 - float(fi.eps))]
    out = np.array(vals, np.float64).astype(dt)
    if not dt.name.startswith("float8") or "fn" not in dt.name:
        return out
    return out[~np.isnan(out.astype(np.float64)) | np.isnan(np.array(vals))]


def pairs(a, b=None):
    """Every (x, y) of edge values: two flat arrays."""
    import numpy as np
    b = a if b is None else b
    x, y = np.meshgrid(a, b, indexing="ij")
    return x.ravel(), y.ravel()


def randn(shape, dtype="float32", seed=0, scale=1.0):
    import numpy as np
    rng = np.random.default_rng(seed + hash(tuple(shape)) % 1000)
    dt = np_dtype(dtype)
    if dt.kind == "c":
        return (rng.standard_normal(shape) * scale + 1j * rng.standard_normal(shape) * scale).astype(dt)
    if dt.kind in "iu":
        lo, hi = (0, 20) if dt.kind == "u" else (-10, 10)
        return rng.integers(lo, hi, shape).astype(dt)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    return (rng.standard_normal(shape) * scale).astype(dt)


FLOATS32 = ["float32", "float16", "bfloat16"]
INTS32 = ["int8", "int16", "int32", "uint8", "uint16", "uint32"]
ALL32 = FLOATS32 + INTS32 + ["bool", "complex64"]
FLOATS64 = ["float64"]
INTS64 = ["int64", "uint64"]
ALL64 = FLOATS64 + INTS64 + ["complex128"]


def dtypes_for(cfg, which):
    x64 = "x64" in cfg
    return {"float": FLOATS64 if x64 else FLOATS32, "int": INTS64 if x64 else INTS32,
            "complex": ["complex128" if x64 else "complex64"],
            "all": ALL64 if x64 else ALL32}[which]


# ULP budgets of transcendental functions: XLA CPU uses its own polynomial
# approximations (and computes f16/bf16 in f32), we use numpy; a few ULPs of
# difference on either side is the accuracy of the two implementations.
TRANS_ULPS = {"float32": 4, "float64": 4, "float16": 2, "bfloat16": 2, "complex64": 8,
              "complex128": 8}


def apply_all(ops):
    return lambda *a: {k: f(*a) for k, f in ops.items()}
