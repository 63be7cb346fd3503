"""A broad sweep of real JAX programs on stablehlo_ref, compared with XLA CPU.

Every case builds a few jitted JAX functions, runs each on XLA CPU (the
reference) and on the stablehlo_ref plugin, and compares the results with
dtype-aware tolerances: exact for integers and booleans, bitwise-by-value
(NaN positions, infinities and signed zeros included) for exactly rounded
float ops, a ULP budget for transcendental functions.

Cases are grouped into configurations; each configuration runs in one fresh
subprocess (`python test_jax_sweep.py CONFIG [CASE-GLOB]` prints one JSON
line per case with that case's failures), and within a case the checks
with equal tolerances are fused into one jitted function per backend, so
the default sweep (elementwise, x64, arrays, programs) costs four process
start-ups and a few hundred compilations.  The ``*_slow`` configurations add
dense grids, more shapes, dtypes and seeds and are marked ``slow``.

Mismatches that are not our bugs (XLA CPU's own accuracy, implementation-
defined results, lowerings this platform does not have yet) are listed in
XFAIL with the reason; everything else fails the test.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import subprocess
import sys
import time
import traceback

import pytest

HERE = os.path.abspath(__file__)
MARK = "@@SWEEP@@ "

CONFIGS = {
    # name: (env, slow)
    "elementwise": ({"JAX_PLATFORMS": "cpu,stablehlo_ref"}, False),
    "x64": ({"JAX_PLATFORMS": "cpu,stablehlo_ref", "JAX_ENABLE_X64": "1"}, False),
    "arrays": ({"JAX_PLATFORMS": "cpu,stablehlo_ref"}, False),
    "programs": ({"JAX_PLATFORMS": "cpu,stablehlo_ref"}, False),
    "programs_slow": ({"JAX_PLATFORMS": "cpu,stablehlo_ref"}, True),
    "elementwise_slow": ({"JAX_PLATFORMS": "cpu,stablehlo_ref"}, True),
    "elementwise_x64_slow": ({"JAX_PLATFORMS": "cpu,stablehlo_ref", "JAX_ENABLE_X64": "1"}, True),
    "arrays_slow": ({"JAX_PLATFORMS": "cpu,stablehlo_ref"}, True),
}

# XLA CPU compile time dominates the sweep; LLVM -O0 halves it and leaves
# XLA's numerics alone (fast-math stays off).
FAST_XLA = {"XLA_FLAGS": "--xla_backend_optimization_level=0"}

# "case/label" glob -> reason.  A case whose every failure matches an entry
# is reported as xfail with the reasons; any other failure fails the test.
# Patterns use only "*" as a wildcard (labels contain brackets).
_FTZ = ("XLA CPU runs with FTZ/DAZ: subnormal operands read as zero (and subnormal "
        "results flush); we follow IEEE-754 as the spec does")
XFAIL: dict[str, str] = {
    "unary_float/subnormal[float32]*": _FTZ,
    "unary_float/subnormal[bfloat16]*": _FTZ,
    "unary_float/subnormal[float64]*": _FTZ,
    "binary_float/subnormal[float32]*": _FTZ,
    "binary_float/subnormal[bfloat16]*": _FTZ,
    "binary_float/subnormal[float64]*": _FTZ,
    "convert/subnormal:float32->*": _FTZ,
    "convert/subnormal:bfloat16->*": _FTZ,
    "convert/subnormal:float64->*": _FTZ,
    "complex_special/abs[*]": "XLA CPU's complex abs of (inf, NaN) is NaN; IEEE hypot (and "
                              "std::abs, the reference interpreter) give inf, as we do",
    "complex_special/tanh[*]": "tanh(+-0 + i inf / i NaN): we follow C99 Annex G ctanh (+-0 + i NaN, "
                               "as std::tanh); XLA CPU gives NaN + i NaN",
    "complex_special/expm1[*]": "expm1 at infinite real parts: we follow C99 cexp (inf + i NaN, "
                                "-1 + i 0); XLA CPU gives NaN + i NaN",
    "more_programs/pure_callback": "JAX itself refuses host callbacks on non-CPU/GPU/TPU platforms "
                                   "(EmitPythonCallback not supported on stablehlo_ref)",
    "narrow_types/from:float4_e2m1fn->['int32']": "XLA CPU converts float4_e2m1fn 6.0 (its largest "
                                                  "value) to INT_MAX/INT_MIN; we give 6/-6",
    "unary_float/grid[float64]['log1p']": "XLA CPU's f64 log1p is ~50 ULPs off near x = -0.4 "
                                          "(log1p(-0.3999999999999986)); ours is correctly rounded",
    "unary_float/grid[float64]['atanh']": "atanh decomposes through log1p: XLA CPU's f64 log1p error "
                                          "near |x| = 0.4 (see log1p)",
    "special_edges/spence[*]": "spence(max float): XLA CPU overflows to NaN; -pi^2/6 - log(x)^2/2 "
                               "(what we return) is the finite value",
    "unary_float/trans[*]['asin']": "XLA CPU's asin of the smallest normal number gives 0 (a "
                                    "flushed intermediate); asin(x) = x there, as we return",
    "unary_float/trans[float32]['sinh']": "XLA CPU runs JAX's chlo.sinh decomposition, e^(x+log(1/2)) - "
                                          "e^(-x+log(1/2)), whose rounded exponent costs ~|x| ULP "
                                          "(sinh(-33.25): 226 ULP); ours is correctly rounded "
                                          "(tests/test_transcendental_accuracy.py)",
    "unary_float/trans[float32]['cosh']": "XLA CPU runs JAX's chlo.cosh decomposition (see sinh); ours is "
                                          "correctly rounded (tests/test_transcendental_accuracy.py)",
}

# case name -> (config, function); filled by @case.
CASES: dict[str, tuple[str, object]] = {}


def case(*configs):
    def register(fn):
        for cfg in configs:
            CASES[f"{cfg}:{fn.__name__}"] = (cfg, fn)
        return fn
    return register


# ---------------------------------------------------------------------------
# Comparison machinery (runs inside the subprocesses)
# ---------------------------------------------------------------------------


class Checker:
    """Collects the checks of one case, runs them fused, keeps the failures.

    ``c(label, fn, *args, **tolerances)`` queues a check; ``flush()`` runs
    the queue: checks with the same tolerances are fused into one jitted
    function returning a dict keyed by label (so one compilation per backend
    covers dozens of checks), and a group in which either backend raises is
    rerun check by check to name the culprit.
    """

    FUSE = 24

    def __init__(self, cfg):
        import jax
        import numpy as np
        self.jax, self.np = jax, np
        self.cfg = cfg
        self.slow = cfg.endswith("_slow")
        self.cpu = jax.devices("cpu")[0]
        self.ref = jax.devices("stablehlo_ref")[0]
        self.failures: list[dict] = []
        self.checks = 0
        self.queue: list = []

    def fail(self, label, msg):
        self.failures.append({"label": label, "msg": msg[:1500]})

    def __call__(self, label, fn, *args, **kw):
        """Queue a comparison of fn(*args) between XLA CPU and stablehlo_ref.

        fn may return a pytree; each leaf is compared and reported as
        ``label/path``.  Keywords: ``ulps`` (ULPs of the result dtype) or
        ``rtol``/``atol`` for floats; with neither the comparison is exact by
        value (NaN == NaN; the sign of zero counts unless zero_sign=False).
        XLA CPU flushes subnormal results to zero, so a zero where we produce
        a subnormal of the same sign is accepted everywhere.  ``check(want,
        got)`` replaces the comparison (implementation-defined results).
        ulps/rtol/atol may be dicts keyed by the result's first path key.
        """
        self.checks += 1
        self.queue.append((label, fn, args, kw))
        if len(self.queue) >= 4 * self.FUSE:
            self.flush()

    def _run(self, dev, fn, args):
        jax = self.jax
        args = jax.device_put(args, dev)
        with jax.default_device(dev):
            out = jax.block_until_ready(jax.jit(fn)(*args))
        return jax.tree_util.tree_map(self.np.asarray, out)

    def flush(self):
        groups: dict = {}
        for item in self.queue:
            key = repr(sorted((k, repr(v)) for k, v in item[3].items()))
            groups.setdefault(key, []).append(item)
        self.queue = []
        for items in groups.values():
            for i in range(0, len(items), self.FUSE):
                self._run_group(items[i:i + self.FUSE])

    def _run_group(self, items):
        if len(items) > 1:
            flat, spans = [], []
            for _, _, args, _ in items:
                spans.append((len(flat), len(args)))
                flat.extend(args)

            def fused(*a):
                return [fn(*a[s:s + k]) for (_, fn, _, _), (s, k) in zip(items, spans)]
            try:
                t0 = time.time()
                want = self._run(self.cpu, fused, flat)
                t1 = time.time()
                got = self._run(self.ref, fused, flat)
                if os.environ.get("SWEEP_TIMING"):
                    print(f"{len(items)} items cpu {t1 - t0:.2f}s ref {time.time() - t1:.2f}s "
                          f"{items[0][0]}", file=sys.stderr)
            except Exception:  # noqa: BLE001  find the culprit one by one
                for item in items:
                    self._run_group([item])
                return
            for (label, _, args, kw), w, g in zip(items, want, got):
                self._check(label, w, g, args, **kw)
            return
        label, fn, args, kw = items[0]
        try:
            want = self._run(self.cpu, fn, args)
        except Exception as e:  # noqa: BLE001  a bug of the case itself
            self.fail(label, f"XLA CPU raised {type(e).__name__}: {str(e)[:300]}")
            return
        try:
            got = self._run(self.ref, fn, args)
        except Exception as e:  # noqa: BLE001
            self.fail(label, f"stablehlo_ref raised {type(e).__name__}: {str(e)[:600]}")
            return
        self._check(label, want, got, args, **kw)

    def _check(self, label, want, got, args, ulps=None, rtol=None, atol=0.0,
               nan_sign=False, zero_sign=True, check=None):
        jax = self.jax
        wl, wt = jax.tree_util.tree_flatten_with_path(want)
        gl, gt = jax.tree_util.tree_flatten(got)
        if wt != gt:
            self.fail(label, f"tree {gt} != {wt}")
            return
        for (path, w), g in zip(wl, gl):
            key = jax.tree_util.keystr(path)
            first = path[0].key if path and hasattr(path[0], "key") else None
            pick = lambda v: v.get(first) if isinstance(v, dict) else v  # noqa: E731
            try:
                w, g = self.np.asarray(w), self.np.asarray(g)
                assert w.dtype == g.dtype, f"dtype {g.dtype} != {w.dtype}"
                assert w.shape == g.shape, f"shape {g.shape} != {w.shape}"
                if check is not None:
                    check(w, g)
                else:
                    self._compare(w, g, pick(ulps), pick(rtol), pick(atol) or 0.0, zero_sign,
                                  nan_sign, args)
            except AssertionError as e:
                self.fail(label + key, str(e))

    def _compare(self, w, g, ulps, rtol, atol, zero_sign, nan_sign, args):
        np = self.np
        if not is_float(w.dtype) and w.dtype.kind != "c":
            bad = w != g
        else:
            parts = [(w.real, g.real), (w.imag, g.imag)] if w.dtype.kind == "c" else [(w, g)]
            bad = np.zeros(w.shape, bool)
            for wp, gp in parts:
                fi = finfo(wp.dtype)
                w64, g64 = wp.astype(np.float64), gp.astype(np.float64)
                wn, gn = np.isnan(w64), np.isnan(g64)
                both = wn & gn
                same = (w64 == g64) | both
                if zero_sign:
                    same &= ~((w64 == 0) & (g64 == 0) & (np.signbit(w64) != np.signbit(g64)))
                if nan_sign:
                    same &= ~(both & (np.signbit(w64) != np.signbit(g64)))
                # XLA CPU's flush-to-zero of subnormal results.
                same |= (w64 == 0) & (np.abs(g64) < float(fi.tiny)) & (np.signbit(w64) == np.signbit(g64))
                if ulps is not None or rtol is not None or atol:
                    eps = float(fi.eps)
                    allow = atol + (rtol or 0.0) * np.abs(w64)
                    if ulps is not None:
                        with np.errstate(all="ignore"):
                            mag = np.maximum(np.abs(w64), float(fi.tiny))
                            ulp = eps * 2.0 ** np.floor(np.log2(np.where(np.isfinite(mag), mag, 1.0)))
                        allow = allow + ulps * ulp
                    with np.errstate(invalid="ignore", over="ignore"):
                        same |= np.isfinite(w64) & np.isfinite(g64) & (np.abs(w64 - g64) <= allow)
                bad |= ~same
        if bad.any():
            idx = np.argwhere(bad)[:6]
            rows = []
            for ix in idx:
                t = tuple(int(v) for v in ix)
                ins = [repr(np.asarray(a)[t]) for a in args if np.shape(a) == w.shape]
                rows.append(f"  at {t}: got {g[t]!r} want {w[t]!r}" + (f" (inputs {', '.join(ins)})" if ins else ""))
            raise AssertionError(f"({w.dtype}{list(w.shape)}): {int(bad.sum())}/{bad.size} "
                                 f"elements differ\n" + "\n".join(rows))


def is_float(dt):
    import numpy as np
    dt = np.dtype(dt)
    return dt.kind == "f" or dt.name == "bfloat16" or dt.name.startswith("float8")


def finfo(dt):
    import ml_dtypes
    return ml_dtypes.finfo(dt)


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------


def _dtype(name):
    import ml_dtypes
    import numpy as np
    return np.dtype(getattr(ml_dtypes, name, None) or name)


def edge_values(name, subnormal=False):
    """Edge values of a dtype (a 1-d numpy array); floats: subnormals only if asked."""
    import ml_dtypes
    import numpy as np
    dt = _dtype(name)
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
    dt = _dtype(dtype)
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


def _dtypes_for(cfg, which):
    x64 = "x64" in cfg
    return {"float": FLOATS64 if x64 else FLOATS32, "int": INTS64 if x64 else INTS32,
            "complex": ["complex128" if x64 else "complex64"],
            "all": ALL64 if x64 else ALL32}[which]


# ULP budgets of transcendental functions: XLA CPU uses its own polynomial
# approximations (and computes f16/bf16 in f32), we use numpy; a few ULPs of
# difference on either side is the accuracy of the two implementations.
TRANS_ULPS = {"float32": 4, "float64": 4, "float16": 2, "bfloat16": 2, "complex64": 8,
              "complex128": 8}


# ---------------------------------------------------------------------------
# Elementwise
# ---------------------------------------------------------------------------


def _unary_ops(lax, jnp):
    exact = {
        "neg": lax.neg, "abs": lax.abs, "sign": lax.sign, "floor": lax.floor, "ceil": lax.ceil,
        "round_away": lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
        "round_even": lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
        "sqrt": lax.sqrt, "is_finite": lax.is_finite, "square": lax.square,
        "reciprocal": lambda x: 1 / x, "isnan": jnp.isnan, "isinf": jnp.isinf,
        "signbit": jnp.signbit, "trunc": jnp.trunc, "fabs": jnp.fabs,
        "nextafter_up": lambda x: jnp.nextafter(x, jnp.array(jnp.inf, x.dtype)),
        "integer_pow3": lambda x: lax.integer_pow(x, 3),
        "integer_pow_m2": lambda x: lax.integer_pow(x, -2),
        "frexp": jnp.frexp, "ldexp3": lambda x: jnp.ldexp(x, 3),
    }
    trans = {
        "exp": lax.exp, "exp2": lax.exp2, "expm1": lax.expm1, "log": lax.log, "log1p": lax.log1p,
        "rsqrt": lax.rsqrt, "cbrt": lax.cbrt, "sin": lax.sin, "cos": lax.cos, "tan": lax.tan,
        "tanh": lax.tanh, "logistic": lax.logistic, "atan": lax.atan, "asin": lax.asin,
        "acos": lax.acos, "sinh": lax.sinh, "cosh": lax.cosh, "asinh": lax.asinh,
        "acosh": lax.acosh, "atanh": lax.atanh, "erf": lax.erf, "erfc": lax.erfc,
        "erf_inv": lax.erf_inv, "lgamma": lax.lgamma, "digamma": lax.digamma,
        "log2": jnp.log2, "log10": jnp.log10, "sinc": jnp.sinc, "deg2rad": jnp.deg2rad,
    }
    return exact, trans


def _apply_all(ops):
    return lambda *a: {k: f(*a) for k, f in ops.items()}


@case("elementwise", "x64", "elementwise_slow", "elementwise_x64_slow")
def unary_float(c):
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    exact, trans = _unary_ops(lax, jnp)
    for dt in _dtypes_for(c.cfg, "float"):
        x = edge_values(dt)
        c(f"exact[{dt}]", _apply_all(exact), x)
        # lgamma/digamma: JAX serializes chlo for plugins already decomposed
        # (the Lanczos series in the operand type), whose cancellation costs
        # a few more ULPs than XLA CPU's own lowering.
        # Near their zeros both implementations lose relative accuracy: an
        # absolute allowance of a few ULPs of 1 covers it.
        u = {k: TRANS_ULPS[dt] * (8 if k in ("lgamma", "digamma") else 1) for k in trans}
        a = {k: 16 * float(finfo(_dtype(dt)).eps) if k in ("lgamma", "digamma") else 0.0 for k in trans}
        c(f"trans[{dt}]", _apply_all(trans), x, ulps=u, atol=a)
        sub = edge_values(dt, subnormal=True)
        c(f"subnormal[{dt}]", _apply_all({**exact, **trans}), sub, ulps=TRANS_ULPS[dt])
        if c.slow:
            # A dense grid of ordinary values in every function's domain.
            g = np.concatenate([np.linspace(-10, 10, 401), np.geomspace(1e-6, 1e6, 97),
                                -np.geomspace(1e-6, 1e6, 97)]).astype(dt)
            a2 = {k: 2 * v for k, v in a.items()}
            c(f"grid[{dt}]", _apply_all(trans), g, ulps={k: 2 * v for k, v in u.items()}, atol=a2)


@case("elementwise", "x64")
def unary_int(c):
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    for dt in _dtypes_for(c.cfg, "int"):
        x = edge_values(dt)
        ops = {"neg": lax.neg, "sign": lax.sign, "not": lax.bitwise_not,
               "clz": lax.clz, "popcnt": lax.population_count, "square": lax.square,
               "integer_pow3": lambda x: lax.integer_pow(x, 3),
               "pow_int": lambda x: jnp.power(x, 5)}
        if np.dtype(dt).kind == "i":
            ops["abs"] = lax.abs
        c(f"ops[{dt}]", _apply_all(ops), x)
    c("not[bool]", lax.bitwise_not, edge_values("bool"))


@case("elementwise", "x64")
def unary_complex(c):
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    for dt in _dtypes_for(c.cfg, "complex"):
        x = edge_values(dt)
        fin = x[np.isfinite(x)]
        tame = fin[(np.abs(fin.real) < 1e3) & (np.abs(fin.imag) < 1e3)]
        u = TRANS_ULPS[dt]
        c(f"exact[{dt}]", _apply_all({"neg": lax.neg, "real": lax.real, "imag": lax.imag, "conj": lax.conj,
                                      "is_nan": jnp.isnan, "is_finite": jnp.isfinite}), x)
        c(f"abs[{dt}]", lax.abs, fin, ulps=2)
        c(f"sign_square[{dt}]", _apply_all({"sign": lax.sign, "square": lax.square}), tame, ulps=2)
        c(f"trans[{dt}]", _apply_all({"exp": lax.exp, "log": lax.log, "sqrt": lax.sqrt, "rsqrt": lax.rsqrt,
                                      "sin": lax.sin, "cos": lax.cos, "tan": lax.tan, "tanh": lax.tanh,
                                      "expm1": lax.expm1, "log1p": lax.log1p}), tame, ulps=u, atol=1e-6)
        re = lambda v: v.real.astype(np.float32 if dt == "complex64" else np.float64)  # noqa: E731
        c(f"complex[{dt}]", lax.complex, re(x), re(x[::-1]))
        c(f"pow[{dt}]", lax.pow, tame[:12], tame[-12:], rtol=1e-5, atol=1e-6)
        c(f"div[{dt}]", lax.div, tame, tame[::-1], rtol=1e-6, atol=1e-30)
        # Infinities, NaNs and zero divisors: C99 Annex G, as XLA and std::complex.
        sp = np.array([0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan])
        zs = np.array([complex(p, q) for p in sp for q in sp], dt)
        c(f"div_special[{dt}]", lax.div, *pairs(zs), rtol=1e-6)
        c(f"mul[{dt}]", lax.mul, x, x[::-1], ulps=2)
        c(f"add_eq[{dt}]", _apply_all({"add": lax.add, "eq": lax.eq, "ne": lax.ne}), x, x[::-1])


def _binary_float_ops(lax, jnp):
    exact = {"add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div, "rem": lax.rem,
             "max": lax.max, "min": lax.min, "nextafter": lax.nextafter,
             "eq": lax.eq, "ne": lax.ne, "lt": lax.lt, "le": lax.le, "gt": lax.gt, "ge": lax.ge,
             "jnp_maximum": jnp.maximum, "jnp_fmax": jnp.fmax, "copysign": jnp.copysign,
             "floor_divide": jnp.floor_divide, "mod": jnp.mod, "where_lt": lambda x, y: jnp.where(x < y, x, y)}
    trans = {"pow": lax.pow, "atan2": lax.atan2, "hypot": jnp.hypot, "logaddexp": jnp.logaddexp}
    return exact, trans


@case("elementwise", "x64", "elementwise_slow")
def binary_float(c):
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    exact, trans = _binary_float_ops(lax, jnp)
    for dt in _dtypes_for(c.cfg, "float"):
        x, y = pairs(edge_values(dt))
        c(f"exact[{dt}]", _apply_all(exact), x, y)
        # logaddexp cancels (max + log1p(exp(-|d|))): a few ULPs of the max.
        u = {k: TRANS_ULPS[dt] * (4 if k == "logaddexp" else 1) for k in trans}
        c(f"trans[{dt}]", _apply_all(trans), x, y, ulps=u)
        e = edge_values(dt)
        xs, ys = pairs(edge_values(dt, subnormal=True), e[np.isfinite(e.astype(np.float64))][:12])
        c(f"subnormal[{dt}]", _apply_all({**exact, **trans}), np.concatenate([xs, ys]), np.concatenate([ys, xs]),
          ulps=u)


@case("elementwise", "x64")
def binary_int(c):
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    for dt in _dtypes_for(c.cfg, "int"):
        x, y = pairs(edge_values(dt))
        nz = y != 0
        bits = np.dtype(dt).itemsize * 8
        sh = (np.arange(x.size) % (bits + 3)).astype(dt)
        if np.dtype(dt).kind == "i":
            sh[::5] = -sh[::5] - 1          # negative shift amounts: out of range like >= bits
        ops = {"add": lax.add, "sub": lax.sub, "mul": lax.mul, "max": lax.max, "min": lax.min,
               "and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor,
               "eq": lax.eq, "ne": lax.ne, "lt": lax.lt, "le": lax.le, "gt": lax.gt, "ge": lax.ge,
               # Division by zero and INT_MIN / -1: XLA's values (the spec leaves them open).
               "div": lax.div, "rem": lax.rem}
        c(f"ops[{dt}]", _apply_all(ops), x, y)
        c(f"floor_mod[{dt}]", _apply_all({"floor_divide": jnp.floor_divide, "mod": jnp.mod}), x[nz], y[nz])
        c(f"shifts[{dt}]", _apply_all({"shl": lax.shift_left, "shra": lax.shift_right_arithmetic,
                                       "shrl": lax.shift_right_logical}), x, sh)
        small = (np.arange(x.size) % 9).astype(dt)
        c(f"pow[{dt}]", jnp.power, x, small)
        c(f"integer_pow[{dt}]", lambda a: lax.integer_pow(a, 7), x)
    b, b2 = pairs(edge_values("bool"))
    c("ops[bool]", _apply_all({"and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor,
                               "eq": lax.eq, "lt": lax.lt, "max": lax.max, "add": jnp.add}), b, b2)


@case("elementwise", "x64")
def select_clamp_where(c):
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    for dt in _dtypes_for(c.cfg, "all"):
        x = edge_values(dt)
        y = x[::-1].copy()
        p = (np.arange(x.size) % 3) == 0
        c(f"select[{dt}]", lax.select, p, x, y)
        c(f"where_scalar[{dt}]", lambda p, a: jnp.where(p, a, a[0]), p, x)
        if np.dtype(dt).kind not in "cb":
            c(f"clip[{dt}]", lambda a: jnp.clip(a, a[2], a[6]), x)
            c(f"clamp_scalar[{dt}]", lambda lo_, a, hi_: lax.clamp(lo_, a, hi_), x[3], x, x[6])
            c(f"clamp_array[{dt}]", lambda lo_, a, hi_: lax.clamp(lo_, a, hi_),
              np.minimum(x, y), x, np.maximum(x, y) if np.dtype(dt).kind != "f" else np.fmax(x, y))


@case("elementwise", "x64", "elementwise_slow", "elementwise_x64_slow")
def convert(c):
    """lax.convert_element_type between every pair of dtypes, on edge values."""
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    srcs = _dtypes_for(c.cfg, "all")
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
            sk, dk = np.dtype(_dtype(s)).kind, np.dtype(_dtype(d)).kind
            if s == d or (sk == "c" and dk != "c"):
                continue  # complex -> real: JAX warns and takes the real part (the real op)
            ops[d] = lambda v, d=d: lax.convert_element_type(v, _dtype(d))
            if dk in "iu" and sk not in "iub":
                jops[d] = lambda v, d=d: jnp.asarray(v).astype(_dtype(d))
        c(f"{s}->", _apply_all(ops), x)
        if jops:
            c(f"astype:{s}->", _apply_all(jops), x)
        if is_float(_dtype(s)) and _dtype(s).itemsize > 1:
            c(f"subnormal:{s}->", _apply_all(ops), edge_values(s, subnormal=True))
    for s, d in [("float32", "int32"), ("float32", "bfloat16"), ("int32", "float32"),
                 ("float16", "float32")]:
        if s in srcs:
            v = edge_values(s)[:16]
            if _dtype(d).itemsize > v.dtype.itemsize:
                v = v.reshape(-1, _dtype(d).itemsize // v.dtype.itemsize)
            c(f"bitcast:{s}->{d}", lambda v, d=d: lax.bitcast_convert_type(v, _dtype(d)), v)


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
    dt = _dtype(name)
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
        dt = _dtype(n)
        v = _narrow_values(n)
        c(f"from:{n}->", _apply_all({w: (lambda x, w=w: lax.convert_element_type(x, _dtype(w))) for w in wide}), v)
        src = f if not n.startswith(("int", "uint")) else \
            np.arange(-20, 20).astype(np.int32)
        c(f"to:{src.dtype}->{n}", lambda x, dt=dt: lax.convert_element_type(x, dt), src)
        if not n.startswith(("int", "uint")):
            c(f"to:bfloat16->{n}", lambda x, dt=dt: lax.convert_element_type(x, dt), f.astype(_dtype("bfloat16")))
            c(f"to:float16->{n}", lambda x, dt=dt: lax.convert_element_type(x, dt), f.astype(np.float16))
        if n in ("float8_e4m3fn", "float8_e5m2", "int4", "uint4", "float8_e4m3fnuz", "float8_e3m4"):
            a = v[: v.size // 2 * 2]
            b = a[::-1]
            ops = {"add": lax.add, "mul": lax.mul, "max": lax.max, "lt": lax.lt, "neg": lambda x, y: lax.neg(x)}
            if not n.startswith(("int", "uint")):
                ops["div"] = lax.div
            c(f"arith:{n}", _apply_all(ops), a, b)


@case("elementwise", "x64")
def complex_special(c):
    """Complex functions at infinities/NaNs (C99 Annex G where defined)."""
    from jax import lax
    import jax.numpy as jnp
    np = c.np
    dt = _dtypes_for(c.cfg, "complex")[0]
    sp = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan])
    z = np.array([complex(p, q) for p in sp for q in sp], dt)
    for name, f in {"abs": lax.abs, "sqrt": lax.sqrt, "exp": lax.exp, "log": lax.log,
                    "sign": lax.sign, "tanh": lax.tanh, "mul": lambda v: v * v[::-1],
                    "add": lambda v: v + v[::-1], "expm1": lax.expm1, "log1p": lax.log1p,
                    "rsqrt": lax.rsqrt, "sin": lax.sin, "cos": lax.cos, "square": jnp.square,
                    "reciprocal": jnp.reciprocal, "logistic": lax.logistic}.items():
        c(f"{name}[{dt}]", f, z, ulps=4, atol=1e-7)


@case("arrays")
def batched_indexing(c):
    """vmap of gathers and scatters (batching dims), dynamic slices."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    x = randn((3, 6, 4))
    i = np.array([[0, 5], [-1, 2], [7, 1]], np.int32)
    c("vmap_take", jax.vmap(lambda v, j: v[j]), x, i)
    c("vmap_take_clip", jax.vmap(lambda v, j: jnp.take(v, j, axis=0, mode="clip")), x, i)
    c("vmap_take_fill", jax.vmap(lambda v, j: jnp.take(v, j, axis=1, mode="fill", fill_value=np.nan)), x, i)
    for op in ["set", "add", "max", "mul"]:
        c(f"vmap_at_{op}", jax.vmap(lambda v, j, u, op=op: getattr(v.at[j], op)(u)), x, i, randn((3, 2, 4), seed=1),
          rtol=1e-6, atol=1e-6)
        c(f"vmap_at_{op}_drop", jax.vmap(lambda v, j, u, op=op: getattr(v.at[j], op)(u, mode="drop")), x, i,
          randn((3, 2, 4), seed=1), rtol=1e-6, atol=1e-6)
    c("vmap_dynamic_slice", jax.vmap(lambda v, j: lax.dynamic_slice(v, (j, 1), (3, 2))), x, np.array([0, 4, -2], np.int32))
    c("vmap_dynamic_update_slice", jax.vmap(lambda v, u, j: lax.dynamic_update_slice(v, u, (j, 2))), x,
      randn((3, 2, 3), seed=2), np.array([5, 0, 3], np.int32))
    c("vmap_vmap_gather", jax.vmap(jax.vmap(lambda v, j: v[j])), randn((2, 3, 5)), np.array([[0, 4, 2], [1, 1, 3]], np.int32))
    c("nd_gather", lambda v, a, b: v[a, :, b], x, np.array([[0, 2], [1, 1]], np.int32), np.array([[3], [0]], np.int32))
    c("scatter_2d_idx", lambda v, a, b, u: v.at[a, b].add(u), randn((5, 5)), np.array([0, 4, 4, 1], np.int32),
      np.array([1, 1, 1, 0], np.int32), randn((4,), seed=3), rtol=1e-6, atol=1e-6)
    c("grad_take_along", jax.grad(lambda v: jnp.take_along_axis(v, jnp.argsort(v, axis=1)[:, :2], axis=1).sum() ** 2),
      randn((4, 5)), rtol=1e-6, atol=1e-6)


@case("programs")
def more_programs(c):
    import jax
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    x = randn((2, 6, 6, 3))
    mp = lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")  # noqa: E731
    for dt in ["float32", "bfloat16", "float16"]:
        xv = x.astype(_dtype(dt))
        tol = {"float32": 1e-6, "bfloat16": 1e-2, "float16": 1e-3}[dt]
        c(f"jvp_max_pool[{dt}]", lambda v, t: jax.jvp(mp, (v,), (t,)), xv, randn((2, 6, 6, 3), seed=1).astype(_dtype(dt)),
          rtol=tol, atol=tol)
    c("dot_product_attention", lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True),
      randn((2, 5, 2, 4)), randn((2, 5, 2, 4), seed=1), randn((2, 5, 2, 4), seed=2), rtol=1e-5, atol=1e-6)
    c("image_resize", lambda v: jax.image.resize(v, (2, 9, 4, 3), "linear"), x, rtol=1e-5, atol=1e-6)
    c("image_resize_cubic", lambda v: jax.image.resize(v, (2, 3, 8, 3), "cubic"), x, rtol=1e-5, atol=1e-6)
    c("convolve2d", lambda a, b: jax.scipy.signal.convolve2d(a, b, mode="same"), randn((7, 8)), randn((3, 3), seed=1),
      rtol=1e-5, atol=1e-6)
    c("nan_reductions", lambda v: (jnp.nanmean(v), jnp.nanstd(v, axis=0), jnp.nanargmin(v, axis=1)),
      np.where(randn((4, 5)) > 1, np.nan, randn((4, 5), seed=2)).astype(np.float32), rtol=1e-6, atol=1e-6)
    c("cumsum_bool_int8_overflow", lambda b, i: (jnp.cumsum(b), jnp.cumsum(i, dtype=jnp.int8)),
      randn((9,), "bool"), np.full(9, 100, np.int8))
    a = randn((3, 4, 4))
    spd = (a @ np.swapaxes(a, 1, 2) + 4 * np.eye(4)).astype(np.float32)
    tol = {"rtol": 2e-4, "atol": 2e-4}
    c("batched_cholesky_solve", lambda m, r: (jnp.linalg.cholesky(m), jnp.linalg.solve(m, r)), spd, randn((3, 4, 2), seed=3), **tol)
    c("batched_qr_recon", lambda m: (lambda q, r: q @ r)(*jnp.linalg.qr(m)), a, **tol)
    c("batched_eigh_values", lambda m: jnp.linalg.eigh(m)[0], spd, **tol)
    c("batched_svd_recon", lambda m: (lambda u, s, vt: (u * s[..., None, :]) @ vt)(*jnp.linalg.svd(m, full_matrices=False)), a, **tol)
    c("batched_det_inv", lambda m: (jnp.linalg.det(m), jnp.linalg.inv(m)), a, **tol)
    za = randn((4, 4), "complex64")
    herm = (za @ za.conj().T + 4 * np.eye(4)).astype(np.complex64)
    c("complex_cholesky", jnp.linalg.cholesky, herm, **tol)
    c("complex_solve_inv", lambda m, r: (jnp.linalg.solve(m, r), jnp.linalg.inv(m)), za, randn((4, 2), "complex64", seed=4), **tol)
    c("complex_eigh_values", lambda m: jnp.linalg.eigh(m)[0], herm, **tol)
    c("complex_qr_recon", lambda m: (lambda q, r: q @ r)(*jnp.linalg.qr(m)), za, **tol)
    c("complex_svd_values", lambda m: jnp.linalg.svd(m, compute_uv=False), za, **tol)
    c("eigh_vectors_abs", lambda m: jnp.abs(jnp.linalg.eigh(m)[1]), spd[0], **tol)
    c("tridiagonal_solve", lambda dl, d, du, b: lax.linalg.tridiagonal_solve(dl, d, du, b),
      np.array([0, 1, 1, 1], np.float32), np.array([4, 4, 4, 4], np.float32), np.array([1, 1, 1, 0], np.float32),
      randn((4, 2)), **tol)
    c("schur", lambda m: jnp.abs(jnp.diag(jax.scipy.linalg.schur(m)[0])), spd[0], **tol)
    c("hessenberg_recon", lambda m: (lambda h, q: q @ h @ q.T)(*jax.scipy.linalg.hessenberg(m, calc_q=True)), a[0], **tol)
    c("pure_callback", lambda v: jax.pure_callback(lambda u: np.asarray(u) * 2, jax.ShapeDtypeStruct(v.shape, v.dtype), v),
      randn((3,)))
    c("fft_big_odd", lambda v: jnp.fft.fft(v), randn((3, 97), "complex64"), rtol=1e-4, atol=1e-4)
    c("rfft_odd_len", lambda v: jnp.fft.irfft(jnp.fft.rfft(v), n=15), randn((15,)), rtol=1e-5, atol=1e-5)
    c("top_k_full_int", lambda v: lax.top_k(v, 9), randn((3, 9), "int32"))
    c("sort_desc_multi", lambda a, b: lax.sort((a, b), num_keys=1, is_stable=True, dimension=0),
      randn((8, 2), "int32") % 3, randn((8, 2), seed=1))
    c("while_big_trip", lambda n: lax.fori_loop(0, n, lambda i, s: s + (i % 7), 0), np.int32(3000))
    c("bitcast_f64_u32_pair", lambda v: lax.bitcast_convert_type(v.astype(jnp.float32), jnp.uint16), randn((4,)))
    c("clamp_int_broadcast", lambda v: lax.clamp(np.int32(-3), v, np.int32(4)), randn((9,), "int32"))
    c("population_count_u8", lax.population_count, np.arange(256, dtype=np.uint8))
    c("argsort_f16_nan", lambda v: jnp.argsort(v, stable=True), edge_values("float16"))
    c("rng_uniform_bits_f16", lambda s: jax.random.uniform(jax.random.key(s), (8,), dtype=jnp.float16), np.uint32(5))


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
        dt = _dtype(w)
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
        targets = [n for n in narrows if _dtype(n).itemsize < dt.itemsize or (dt.kind != "f" and n != w)]
        # XLA CPU's answer here depends on the host CPU: without AVX512-FP16 it converts f64 and
        # 64-bit integers to f16/bf16 through f32 and rounds twice (AMD EPYC: f64 1.00048828125095
        # -> 1.0 where the correctly rounded f16 is 1.001).  The spec rounds once, to nearest
        # even, so finite in-range results are checked against the exact rounding instead.
        c(f"{w}->", _apply_all({n: (lambda v, n=n: lax.convert_element_type(v, _dtype(n))) for n in targets}),
          vals, check=lambda want, got, vals=vals: _check_correctly_rounded(vals, want, got))


def _check_correctly_rounded(vals, want, got):
    """Assert ``got`` (the conversion of ``vals`` to got.dtype) is the correctly
    rounded value (round to nearest, ties to even), computed exactly with
    Fractions over every finite value of the (at most 16-bit) target type.
    Values outside the target's finite range, NaNs and infinities are compared
    with XLA CPU's ``want`` (no double rounding can change them)."""
    import numpy as np
    from fractions import Fraction
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


# ---------------------------------------------------------------------------
# Arrays: reductions, dot, conv, windows, gather/scatter, sort, shape ops
# ---------------------------------------------------------------------------


@case("arrays", "x64", "arrays_slow")
def reductions(c):
    import jax.numpy as jnp
    np = c.np
    shapes = [(3, 4), (2, 3, 4), (3, 0)]
    dts = [d for d in _dtypes_for(c.cfg, "all") if d not in ("int16", "uint8", "uint16")]
    if c.slow:
        shapes += [(5,), (0,), (2, 0, 3), (17, 33), (4, 5, 6, 7)]
        dts = _dtypes_for(c.cfg, "all")
    for dt in dts:
        kind = np.dtype(_dtype(dt)).kind
        fl = kind in "fc" or is_float(_dtype(dt))
        tol = {"float16": 4e-3, "bfloat16": 3e-2}.get(dt, 1e-5)
        for shape in shapes:
            if len(shape) == 3 and not c.slow and dt not in ("float32", "int32", "float64", "int64"):
                continue
            x = randn(shape, dt)
            axes = [None] + list(range(len(shape))) + ([(0, len(shape) - 1)] if len(shape) > 1 else [])
            ops = {}
            for ax in axes:
                tag = f"{ax}"
                ops["sum" + tag] = lambda v, ax=ax: jnp.sum(v, axis=ax)
                ops["prod" + tag] = lambda v, ax=ax: jnp.prod(v, axis=ax)
                if fl:
                    ops["mean" + tag] = lambda v, ax=ax: jnp.mean(v, axis=ax)
                    if kind != "c":
                        ops["var" + tag] = lambda v, ax=ax: jnp.var(v, axis=ax)
                ops["any" + tag] = lambda v, ax=ax: jnp.any(v, axis=ax)
                ops["all" + tag] = lambda v, ax=ax: jnp.all(v, axis=ax)
                if kind != "c" and 0 not in shape:
                    ops["max" + tag] = lambda v, ax=ax: jnp.max(v, axis=ax)
                    ops["min" + tag] = lambda v, ax=ax: jnp.min(v, axis=ax)
                    if not isinstance(ax, tuple):
                        ops["argmax" + tag] = lambda v, ax=ax: jnp.argmax(v, axis=ax)
                        ops["argmin" + tag] = lambda v, ax=ax: jnp.argmin(v, axis=ax)
                elif kind != "c" and ax is not None and not isinstance(ax, tuple) and shape[ax] != 0:
                    ops["max_empty" + tag] = lambda v, ax=ax: jnp.max(v, axis=ax)
                    ops["min_init" + tag] = lambda v, ax=ax: jnp.min(v, axis=ax, initial=5)
            kw = {"rtol": tol * 4, "atol": tol} if fl else {}
            c(f"[{dt}{list(shape)}]", _apply_all(ops), x, **kw)
    # NaN / inf / signed zero in reductions.
    for dt in _dtypes_for(c.cfg, "float"):
        e = edge_values(dt)
        c(f"max_nan[{dt}]", jnp.max, e)
        c(f"min_nan[{dt}]", jnp.min, e)
        c(f"argmax_nan[{dt}]", jnp.argmax, e)
        c(f"argmin_nan[{dt}]", jnp.argmin, e)
        c(f"nanmax[{dt}]", jnp.nanmax, e)
        c(f"sum_inf[{dt}]", jnp.sum, e[8:])
        z = np.array([-0.0, -0.0, 0.0], dt)
        c(f"max_zero[{dt}]", jnp.max, z[:2])
        c(f"logsumexp[{dt}]", lambda v: __import__("jax").nn.logsumexp(v), e[np.isfinite(e.astype(float))][:6],
          rtol=1e-2 if dt in ("float16", "bfloat16") else 1e-6)


@case("arrays", "x64")
def cumulative(c):
    import jax.numpy as jnp
    from jax import lax
    for dt in _dtypes_for(c.cfg, "all"):
        if dt == "bool":
            continue
        x = randn((4, 6), dt)
        tol = {"float16": 4e-3, "bfloat16": 3e-2}.get(dt)
        kw = {"rtol": tol, "atol": tol} if tol else ({"rtol": 1e-5, "atol": 1e-5} if dt.startswith(("float", "complex")) else {})
        for ax in (0, 1):
            c(f"cumsum[{dt} axis={ax}]", lambda v, ax=ax: jnp.cumsum(v, axis=ax), x, **kw)
            c(f"cumprod[{dt} axis={ax}]", lambda v, ax=ax: jnp.cumprod(v, axis=ax), x, **kw)
            if not dt.startswith("complex"):
                c(f"cummax[{dt} axis={ax}]", lambda v, ax=ax: lax.cummax(v, axis=ax), x)
                c(f"cummin_rev[{dt} axis={ax}]", lambda v, ax=ax: lax.cummin(v, axis=ax, reverse=True), x)
            c(f"cumlogsumexp[{dt}]", lambda v: lax.cumlogsumexp(v, axis=1), x, **kw) if dt.startswith("float") else None


@case("arrays", "x64", "arrays_slow")
def dots(c):
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    x64 = "x64" in c.cfg
    dts = ["float64", "int64", "complex128"] if x64 else ["float32", "float16", "bfloat16", "int8", "int32", "uint8", "complex64"]
    for dt in dts:
        tol = {"float16": 5e-3, "bfloat16": 3e-2}.get(dt, 1e-5)
        a, b = randn((3, 5), dt), randn((5, 4), dt, seed=1)
        v = randn((5,), dt, seed=2)
        kw = {"rtol": tol, "atol": tol}
        c(f"matmul[{dt}]", jnp.matmul, a, b, **kw)
        c(f"matvec[{dt}]", jnp.matmul, a, v, **kw)
        c(f"vdot[{dt}]", jnp.vdot, v, v, **kw)
        c(f"dot_0d[{dt}]", jnp.dot, v[0], v, **kw)
        ba, bb = randn((2, 3, 5), dt), randn((2, 5, 4), dt, seed=3)
        c(f"batch_matmul[{dt}]", jnp.matmul, ba, bb, **kw)
        c(f"broadcast_matmul[{dt}]", jnp.matmul, ba, b, **kw)
        c(f"einsum_bij_bjk[{dt}]", lambda p, q: jnp.einsum("bij,bjk->bik", p, q), ba, bb, **kw)
        c(f"einsum_trace[{dt}]", lambda p: jnp.einsum("ii->", p), randn((4, 4), dt), **kw)
        c(f"einsum_outer[{dt}]", lambda p, q: jnp.einsum("i,j->ij", p, q), v, v, **kw)
        c(f"einsum_multi[{dt}]", lambda p, q, r: jnp.einsum("bij,bjk,kl->bil", p, q, r), ba, bb,
          randn((4, 2), dt), rtol=tol * 4, atol=tol * 4)
        c(f"tensordot2[{dt}]", lambda p, q: jnp.tensordot(p, q, axes=([1, 2], [0, 1])),
          randn((2, 3, 4), dt), randn((3, 4, 5), dt), **kw)
        c(f"dot_general_batch_free[{dt}]", lambda p, q: lax.dot_general(
            p, q, (((2,), (1,)), ((0,), (2,)))), randn((2, 3, 4), dt), randn((5, 4, 2), dt), **kw)
        c(f"empty_contract[{dt}]", jnp.matmul, randn((3, 0), dt), randn((0, 4), dt))
    if not x64:
        a, b = randn((3, 5), "bfloat16"), randn((5, 4), "bfloat16", seed=1)
        c("mixed_pref_f32", lambda p, q: lax.dot(p, q, preferred_element_type=np.float32), a, b, rtol=1e-5, atol=1e-5)
        i8, j8 = randn((3, 5), "int8"), randn((5, 4), "int8", seed=1)
        c("mixed_i8_i32", lambda p, q: lax.dot(p, q, preferred_element_type=np.int32), i8, j8)
        c("mixed_promote_f16_f32", jnp.matmul, randn((3, 5), "float16"), randn((5, 4), "float32"), rtol=1e-3, atol=1e-3)
        for prec in ["highest", "default", "float32"]:
            c(f"precision_{prec}", lambda p, q, prec=prec: jnp.matmul(p, q, precision=prec),
              randn((3, 5)), randn((5, 4), seed=1), rtol=1e-5, atol=1e-5)
        c("int_overflow", jnp.matmul, np.full((2, 3), 100, np.int8), np.full((3, 2), 100, np.int8))
    if c.slow:
        c("big_matmul", jnp.matmul, randn((64, 96)), randn((96, 48), seed=1), rtol=1e-4, atol=1e-4)


@case("arrays", "arrays_slow")
def convolutions(c):
    from jax import lax
    np = c.np
    x = randn((2, 3, 9, 8))           # NCHW
    w = randn((4, 3, 3, 2), seed=1)    # OIHW
    kw = {"rtol": 2e-5, "atol": 2e-5}
    combos = []
    for strides in [(1, 1), (2, 1)]:
        for padding in ["VALID", "SAME", ((1, 2), (0, 1))]:
            for rhs_dil in [(1, 1), (2, 1)]:
                for lhs_dil in [(1, 1), (1, 2)]:
                    combos.append((strides, padding, rhs_dil, lhs_dil))
    if not c.slow:
        combos = combos[::3]
    for strides, padding, rhs_dil, lhs_dil in combos:
        if lhs_dil != (1, 1) and isinstance(padding, str):
            continue
        c(f"conv s={strides} p={padding} rd={rhs_dil} ld={lhs_dil}",
          lambda a, b, s=strides, p=padding, r=rhs_dil, l_=lhs_dil: lax.conv_general_dilated(
              a, b, s, p, lhs_dilation=l_, rhs_dilation=r), x, w, **kw)
    # feature groups, batch groups, NHWC
    xg = randn((2, 4, 7, 7))
    c("feature_group_2", lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME", feature_group_count=2),
      xg, randn((6, 2, 3, 3), seed=2), **kw)
    c("depthwise", lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "VALID", feature_group_count=4),
      xg, randn((4, 1, 3, 3), seed=2), **kw)
    c("batch_group_2", lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "VALID", batch_group_count=2),
      randn((4, 3, 6, 6)), randn((4, 3, 2, 2), seed=4), **kw)
    c("nhwc_hwio", lambda a, b: lax.conv_general_dilated(a, b, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
      randn((2, 8, 8, 3)), randn((3, 3, 3, 5), seed=5), **kw)
    c("conv1d", lambda a, b: lax.conv_general_dilated(a, b, (1,), [(2, 2)], rhs_dilation=(2,)),
      randn((1, 2, 10)), randn((3, 2, 3), seed=6), **kw)
    c("conv3d", lambda a, b: lax.conv_general_dilated(a, b, (1, 1, 1), "SAME"),
      randn((1, 2, 4, 4, 4)), randn((2, 2, 2, 2, 2), seed=7), **kw)
    c("conv_transpose", lambda a, b: lax.conv_transpose(a, b, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
      randn((1, 4, 4, 2)), randn((3, 3, 2, 3), seed=8), **kw)
    c("conv_bf16", lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME"),
      x.astype(_dtype("bfloat16")), w.astype(_dtype("bfloat16")), rtol=3e-2, atol=3e-2)
    c("conv_f16_pref_f32", lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME", preferred_element_type=np.float32),
      x.astype(np.float16), w.astype(np.float16), rtol=1e-3, atol=1e-3)
    c("conv_int32", lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME"),
      randn((1, 2, 5, 5), "int32"), randn((2, 2, 3, 3), "int32", seed=3))
    import jax
    c("conv_grad", jax.grad(lambda a, b: (lax.conv_general_dilated(a, b, (2, 1), "SAME", rhs_dilation=(1, 2)) ** 2).sum(),
                            argnums=(0, 1)), x, w, rtol=1e-4, atol=1e-4)


@case("arrays", "arrays_slow")
def windows(c):
    import jax
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    for dt in ["float32", "int32", "bfloat16"]:
        x = randn((2, 7, 6, 3), dt)
        for win, strides, pad in [((1, 2, 2, 1), (1, 2, 2, 1), "VALID"), ((1, 3, 3, 1), (1, 1, 1, 1), "SAME"),
                                  ((1, 3, 2, 1), (1, 2, 1, 1), ((0, 0), (1, 2), (0, 1), (0, 0)))]:
            tag = f"[{dt} w={win} s={strides} p={pad}]"
            init = -np.inf if dt != "int32" else np.iinfo(np.int32).min
            c("max_pool" + tag, lambda v, w=win, s=strides, p=pad, i=init: lax.reduce_window(
                v, np.array(i, v.dtype), lax.max, w, s, p), x)
            c("sum_pool" + tag, lambda v, w=win, s=strides, p=pad: lax.reduce_window(
                v, np.array(0, v.dtype), lax.add, w, s, p), x,
              **({"rtol": 3e-2, "atol": 3e-2} if dt == "bfloat16" else {"rtol": 1e-5, "atol": 1e-5} if dt == "float32" else {}))
    x = randn((2, 7, 6, 3))
    c("window_dilation", lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 1, 1, 1), "VALID",
                                                      window_dilation=(1, 2, 1, 1), base_dilation=(1, 1, 2, 1)), x)
    c("min_pool", lambda v: lax.reduce_window(v, jnp.inf, lax.min, (1, 2, 3, 1), (1, 1, 2, 1), "SAME"), x)
    c("avg_pool_grad", jax.grad(lambda v: lax.reduce_window(v, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "SAME").sum()), x)
    c("max_pool_grad", jax.grad(lambda v: (lax.reduce_window(v, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME") ** 2).sum()), x,
      rtol=1e-6, atol=1e-6)
    c("reduce_window_variadic", lambda v, i: lax.reduce_window(
        (v, i), (-jnp.inf, 0), lambda a, b: (jnp.maximum(a[0], b[0]), jnp.where(a[0] >= b[0], a[1], b[1])),
        (2, 2), (1, 1), "VALID"), randn((5, 5)), np.arange(25, dtype=np.int32).reshape(5, 5))


@case("arrays", "x64", "arrays_slow")
def gather_scatter(c):
    import jax.numpy as jnp
    np = c.np
    x = randn((6, 5))
    idx = np.array([0, 5, -1, -6, 2], np.int32)
    oob = np.array([0, 7, -9, 100, 3, -1], np.int32)
    c("take_rows", lambda v, i: v[i], x, idx)
    c("take_rows_oob_default", lambda v, i: v[i], x, oob)
    for mode in ["clip", "fill", "promise_in_bounds"]:
        ii = idx if mode == "promise_in_bounds" else oob
        if mode != "promise_in_bounds":
            c(f"take_mode_{mode}", lambda v, i, m=mode: jnp.take(v, i, axis=0, mode=m), x, ii)
        c(f"at_get_{mode}", lambda v, i, m=mode: v.at[i, 1:3].get(mode=m), x, ii)
    c("take_fill_value", lambda v, i: jnp.take(v, i, axis=1, mode="fill", fill_value=-7.0), x, oob)
    c("take_along_axis", lambda v, i: jnp.take_along_axis(v, i, axis=1), x, np.array([[0, 4], [1, 1], [2, 0], [3, 3], [4, 2], [0, 0]], np.int32))
    c("fancy_2d", lambda v, i, j: v[i, j], x, idx[:3], np.array([1, -1, 4], np.int32))
    c("fancy_slices", lambda v, i: v[1:, i][::2], x, np.array([0, 3], np.int32))
    c("bool_mask_static", lambda v: v[np.array([True, False, True, False, True, True])], x)
    c("dynamic_index", lambda v, i: v[i], x, np.int32(-2))
    c("scalar_index_2d", lambda v, i, j: v[i, j], x, np.int32(3), np.int32(-1))
    y = randn((5,), seed=3)
    for op in ["set", "add", "mul", "min", "max"]:
        c(f"at_{op}", lambda v, i, u, op=op: getattr(v.at[i], op)(u), x, idx, randn((5, 5), seed=2))
        c(f"at_{op}_dup", lambda v, i, u, op=op: getattr(v.at[i], op)(u),
          y, np.array([1, 1, 3, 1, -1], np.int32), randn((5,), seed=4), rtol=1e-6, atol=1e-6)
        for mode in ["drop", "clip", "promise_in_bounds"]:
            ii = idx if mode == "promise_in_bounds" else oob
            upd = randn((ii.size, 5), seed=5)
            c(f"at_{op}_{mode}", lambda v, i, u, op=op, m=mode: getattr(v.at[i], op)(u, mode=m), x, ii, upd,
              rtol=1e-6, atol=1e-6)
    c("at_set_scalar", lambda v: v.at[2, 3].set(9.0), x)
    c("at_add_int", lambda v, i: v.at[i].add(1), np.zeros(6, np.int32), np.array([0, 0, 5, 2, 2, 2], np.int32))
    c("at_set_unique_sorted", lambda v, i, u: v.at[i].set(u, unique_indices=True, indices_are_sorted=True),
      y, np.array([0, 2, 4], np.int32), randn((3,), seed=6))
    c("segment_sum", lambda d, s: __import__("jax").ops.segment_sum(d, s, num_segments=4), randn((7, 2)),
      np.array([0, 0, 1, 3, 3, 3, 9], np.int32), rtol=1e-6, atol=1e-6)
    c("at_set_bf16", lambda v, i: v.at[i].max(v[0]), randn((6, 3), "bfloat16"), np.array([5, 0], np.int32))
    c("dynamic_slice", lambda v, i, j: __import__("jax").lax.dynamic_slice(v, (i, j), (3, 2)), x, np.int32(5), np.int32(-3))
    c("dynamic_update_slice", lambda v, u, i, j: __import__("jax").lax.dynamic_update_slice(v, u, (i, j)), x,
      randn((3, 2), seed=9), np.int32(4), np.int32(-1))
    c("dynamic_slice_in_dim", lambda v, i: __import__("jax").lax.dynamic_slice_in_dim(v, i, 2, axis=1), x, np.int32(4))
    c("dynamic_index_in_dim_u8", lambda v, i: __import__("jax").lax.dynamic_index_in_dim(v, i, axis=0, keepdims=False),
      x, np.uint8(200))


@case("arrays", "x64", "arrays_slow")
def sorting(c):
    import jax
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    for dt in ["float32", "int32", "uint8", "bfloat16", "bool", "int16"]:
        x = randn((4, 9), dt)
        c(f"sort[{dt}]", lambda v: jnp.sort(v, axis=-1), x)
        c(f"sort_axis0[{dt}]", lambda v: jnp.sort(v, axis=0), x)
        c(f"argsort_stable[{dt}]", lambda v: jnp.argsort(v, axis=-1, stable=True), x)
        c(f"argsort_desc[{dt}]", lambda v: jnp.argsort(v, axis=-1, stable=True, descending=True), x)
        if dt != "bool":
            c(f"top_k[{dt}]", lambda v: lax.top_k(v, 3), x)
    e = edge_values("float32")
    c("sort_edge_f32", jnp.sort, e)
    c("argsort_edge_f32", lambda v: jnp.argsort(v, stable=True), e)
    c("sort_neg_zero", jnp.sort, np.array([0.0, -0.0, 0.0, -0.0, -1.0], np.float32))
    c("top_k_nan", lambda v: lax.top_k(v, 4), e)
    c("lexsort", lambda a, b: jnp.lexsort((a, b)), randn((10,), "int32"), randn((10,), "int32", seed=2))
    c("sort_multi_operand", lambda a, b: lax.sort((a, b), num_keys=2), randn((10,), "int32") % 3, randn((10,), seed=2))
    c("sort_complex", jnp.sort, randn((8,), "complex64"))
    c("unique_static", lambda v: jnp.unique(v, size=8, fill_value=-1), np.array([3, 1, 3, 2, 1, 7, 0, 0], np.int32))
    c("unique_counts", lambda v: jnp.unique(v, return_counts=True, return_inverse=True, size=6, fill_value=0),
      np.array([3, 1, 3, 2, 1, 7, 0, 0], np.int32))
    c("searchsorted", lambda a, v: jnp.searchsorted(a, v), np.sort(randn((10,))), randn((7,), seed=3))
    c("searchsorted_right_int", lambda a, v: jnp.searchsorted(a, v, side="right"),
      np.array([1, 2, 2, 3, 5], np.int32), np.array([0, 2, 3, 6], np.int32))
    for method in ["scan", "sort", "compare_all"]:
        c(f"searchsorted_{method}", lambda a, v, m=method: jnp.searchsorted(a, v, method=m),
          np.sort(randn((10,))), randn((7,), seed=3))
    c("median", jnp.median, randn((9, 4)))
    c("quantile", lambda v: jnp.quantile(v, np.array([0.1, 0.5, 0.9], np.float32), axis=0), randn((9, 4)), rtol=1e-5, atol=1e-6)
    c("argpartition", lambda v: jnp.sort(jnp.take_along_axis(v, jnp.argpartition(v, 3, axis=-1)[..., :3], -1), -1), randn((3, 8)))
    c("sort_vmap", jax.vmap(jnp.sort), randn((3, 5)))


@case("arrays", "arrays_slow")
def shape_ops(c):
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    dts = ["float32", "int8", "bool", "complex64", "bfloat16", "uint32"]
    for dt in (dts if c.slow else dts[:4]):
        x = randn((3, 4, 5), dt)
        t = f"[{dt}]"
        c("pad" + t, lambda v: jnp.pad(v, ((1, 0), (0, 2), (3, 1))), x)
        c("pad_neg_interior" + t, lambda v: lax.pad(v, v.dtype.type(1) if v.dtype != np.bool_ else True,
                                                    ((-1, 2, 1), (1, -2, 0), (0, 0, 2))), x)
        c("pad_edge" + t, lambda v: jnp.pad(v, 2, mode="edge"), x[0])
        c("pad_reflect" + t, lambda v: jnp.pad(v, 2, mode="reflect"), x[0])
        c("pad_wrap" + t, lambda v: jnp.pad(v, ((1, 3), (2, 0)), mode="wrap"), x[0])
        c("concat" + t, lambda a, b: jnp.concatenate([a, b, a], axis=1), x, x[:, :2])
        c("stack" + t, lambda a, b: jnp.stack([a, b], axis=-1), x, x)
        c("reshape" + t, lambda v: v.reshape(5, 12).T.reshape(-1, 2), x)
        c("transpose" + t, lambda v: jnp.transpose(v, (2, 0, 1)), x)
        c("flip" + t, lambda v: jnp.flip(v, (0, 2)), x)
        c("roll" + t, lambda v: jnp.roll(v, (2, -7), axis=(1, 2)), x)
        c("roll_dynamic" + t, lambda v, s: jnp.roll(v, s, axis=1), x, np.int32(-3))
        c("tile" + t, lambda v: jnp.tile(v, (2, 1, 2)), x)
        c("repeat" + t, lambda v: jnp.repeat(v, 3, axis=1), x)
        c("repeat_array" + t, lambda v: jnp.repeat(v, np.array([1, 0, 2, 3]), axis=1, total_repeat_length=6), x)
        c("slice_strided" + t, lambda v: v[::-2, 1::3, -1:0:-2], x)
        c("broadcast_to" + t, lambda v: jnp.broadcast_to(v[:, :1], (2, 3, 4, 5)), x)
        c("expand_squeeze" + t, lambda v: jnp.squeeze(v[None, :, 1:2], (0, 2)), x)
        c("rot90" + t, lambda v: jnp.rot90(v, 1, axes=(1, 2)), x)
        c("triu_tril" + t, lambda v: (jnp.triu(v, 1), jnp.tril(v, -1)), x)
        c("diag" + t, lambda v: (jnp.diagonal(v, 1, 1, 2), jnp.diag(v[0, 0])), x)
        c("split" + t, lambda v: jnp.split(v, [1, 3], axis=1), x)
        c("iota_eye" + t, lambda v: (jnp.eye(4, 5, 1, dtype=v.dtype), jnp.arange(7, dtype=v.dtype)
                                     if v.dtype != np.bool_ else jnp.arange(2) > 0), x)
    c("meshgrid", lambda a, b: jnp.meshgrid(a, b), randn((3,)), randn((4,)))
    c("where_3arg", jnp.where, randn((3, 4)) > 0, randn((3, 4)), np.float32(2))
    c("nonzero_size", lambda v: jnp.nonzero(v > 0, size=6, fill_value=-1), randn((3, 4)))
    c("argwhere_size", lambda v: jnp.argwhere(v > 0, size=5), randn((3, 4)))
    c("clip_nan_bounds", lambda v: jnp.clip(v, -1.0, 1.0), edge_values("float32"))
    c("select_n", lambda p, a, b, d: lax.select_n(p, a, b, d), np.array([0, 1, 2, 1], np.int32),
      randn((4,)), randn((4,), seed=1), randn((4,), seed=2))
    c("bincount", lambda v: jnp.bincount(v, length=5), np.array([0, 1, 1, 4, 3, 9, -1], np.int32))
    c("histogram", lambda v: jnp.histogram(v, bins=5, range=(-2, 2)), randn((30,)))
    c("polyval", lambda p, v: jnp.polyval(p, v), randn((4,)), randn((6,), seed=1), rtol=1e-6, atol=1e-6)
    c("convolve_1d", lambda a, b: jnp.convolve(a, b, mode="full"), randn((9,)), randn((4,), seed=1), rtol=1e-5, atol=1e-6)
    c("interp", lambda xq, xp, fp: jnp.interp(xq, xp, fp), randn((6,)), np.sort(randn((8,), seed=1)), randn((8,), seed=2),
      rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------
# Programs: control flow, random, linalg, fft, special, autodiff, models
# ---------------------------------------------------------------------------


@case("programs")
def control_flow(c):
    import jax
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    x = randn((4,))
    c("cond", lambda p, v: lax.cond(p, lambda u: u * 2, lambda u: -u, v), np.bool_(True), x)
    c("cond_false", lambda p, v: lax.cond(p > 0, lambda u: u * 2, lambda u: -u, v), np.int32(0), x)
    c("switch", lambda i, v: lax.switch(i, [jnp.sin, jnp.cos, lambda u: u + 1], v), np.int32(7), x, ulps=4)
    c("switch_neg", lambda i, v: lax.switch(i, [jnp.sin, jnp.cos, lambda u: u + 1], v), np.int32(-3), x, ulps=4)
    c("while_loop", lambda v: lax.while_loop(lambda s: s[0] < 10, lambda s: (s[0] + 1, s[1] * 1.5), (0, v)), x, rtol=1e-6)
    c("while_zero_trip", lambda v: lax.while_loop(lambda s: s[0] < 0, lambda s: (s[0] + 1, s[1] * 1.5), (0, v)), x)
    c("fori_loop", lambda v: lax.fori_loop(0, 7, lambda i, s: s + i * s, v), x, rtol=1e-6)
    c("fori_loop_dynamic", lambda n, v: lax.fori_loop(0, n, lambda i, s: s * 0.5 + i, v), np.int32(5), x, rtol=1e-6)
    c("scan", lambda v: lax.scan(lambda cr, a: (cr + a, cr * a), 0.0, v), randn((6,)), rtol=1e-6, atol=1e-6)
    c("scan_reverse_unroll", lambda v: lax.scan(lambda cr, a: (cr * 0.9 + a, jnp.sin(cr)), jnp.zeros(3), v,
                                                reverse=True, unroll=2), randn((5, 3)), ulps=8, atol=1e-6)
    c("scan_length_only", lambda: lax.scan(lambda cr, _: (cr + 1, cr), 0, None, length=4))
    c("map", lambda v: lax.map(lambda r: jnp.sum(r ** 2), v), randn((5, 3)), rtol=1e-6)
    c("map_batched", lambda v: lax.map(lambda r: r @ r, v, batch_size=2), randn((5, 3)), rtol=1e-6)
    c("associative_scan_add", lambda v: lax.associative_scan(jnp.add, v), randn((11,)), rtol=1e-5, atol=1e-6)
    c("associative_scan_max_rev", lambda v: lax.associative_scan(jnp.maximum, v, reverse=True, axis=1), randn((3, 9)))
    c("nested_while_cond", lambda v: lax.while_loop(
        lambda s: s[0] < 5, lambda s: (s[0] + 1, lax.cond(s[0] % 2 == 0, lambda u: u + 1, lambda u: u * 2, s[1])), (0, v)), x)
    c("vmap_cond", jax.vmap(lambda p, v: lax.cond(p, jnp.sin, jnp.cos, v)), np.array([True, False, True, False]), x, ulps=4)
    c("vmap_while", jax.vmap(lambda n: lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, s[1] + s[0]), (0, 0))[1]),
      np.array([0, 3, 5, 1], np.int32))
    c("checkpoint_grad", jax.grad(lambda v: jax.checkpoint(lambda u: jnp.sin(u).sum() * jnp.cos(u).sum())(v)), x, ulps=16)


@case("programs")
def aliasing(c):
    """In-place updates must never be visible through another name: values
    that are updated and also kept (returned, carried twice, emitted per
    step, used after the update)."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    np = c.np
    x = randn((6,))
    u = randn((2,), seed=1)
    c("dus_keep_operand", lambda v, w: (v, lax.dynamic_update_slice(v, w, (2,)), v * 2), x, u)
    c("dus_twice_same_operand", lambda v, w: (lax.dynamic_update_slice(v, w, (0,)),
                                              lax.dynamic_update_slice(v, w * 3, (4,))), x, u)
    c("dus_then_read_old", lambda v, w: lax.dynamic_update_slice(v, w, (1,)) + v, x, u)
    c("at_set_keep", lambda v: (v.at[0].set(9.0), v.at[1].add(5.0), v), x)

    def body(i, carry):
        a, b, hist = carry
        old = a
        a = lax.dynamic_update_slice(a, jnp.full((1,), i, a.dtype), (i % 6,))
        hist = hist.at[i].set(old)
        return a, old, hist
    c("fori_carry_old_and_new", lambda v: lax.fori_loop(0, 5, body, (v, v, jnp.zeros((5, 6), v.dtype))), x)
    c("scan_emit_carry", lambda v: lax.scan(lambda a, i: (a.at[i].set(-1.0), a), v, jnp.arange(6)), x)
    c("scan_emit_updated", lambda v: lax.scan(lambda a, i: ((b := a.at[i].add(1.0)), (a, b)), v, jnp.arange(4)), x)
    c("while_duplicate_carry", lambda v: lax.while_loop(
        lambda s: s[0] < 4,
        lambda s: (s[0] + 1, s[1].at[s[0]].set(s[2][s[0]] * 10), s[1]), (0, v, v)), x)
    c("cond_branch_updates", lambda p, v: (lax.cond(p, lambda a: a.at[0].set(7.0), lambda a: a, v), v), np.bool_(True), x)
    c("scan_100_steps_history", lambda v: lax.scan(
        lambda h, t: (jnp.tanh(h * 0.9 + t), h), v, randn((100, 6), seed=3)), x, rtol=1e-5, atol=1e-6)
    c("grad_through_updates", jax.grad(lambda v: lax.fori_loop(
        0, 3, lambda i, a: a.at[i].multiply(a[i + 1]), v).sum()), x, rtol=1e-6, atol=1e-6)


@case("programs", "programs_slow")
def random(c):
    import jax
    import jax.numpy as jnp
    np = c.np
    seeds = np.array([0, 42, 2**31 - 1], np.uint32)
    for impl in ["threefry2x32", "rbg"] + (["unsafe_rbg"] if c.slow else []):
        t = f"[{impl}]"
        mk = lambda s, impl=impl: jax.random.key(s, impl=impl)  # noqa: E731
        bits_fn = lambda s, mk=mk: jax.random.key_data(jax.random.split(mk(s), 3))  # noqa: E731
        for s in (seeds if c.slow else seeds[:1]):
            c("split" + t, bits_fn, s)
            c("bits" + t, lambda s, mk=mk: jax.random.bits(mk(s), (5, 3), jnp.uint32), s)
            c("bits_u8" + t, lambda s, mk=mk: jax.random.bits(mk(s), (7,), jnp.uint8), s)
            c("uniform" + t, lambda s, mk=mk: jax.random.uniform(mk(s), (6,), minval=-2, maxval=3), s)
            c("normal" + t, lambda s, mk=mk: jax.random.normal(mk(s), (6,)), s, ulps=4, atol=1e-6)
            c("bernoulli" + t, lambda s, mk=mk: jax.random.bernoulli(mk(s), 0.3, (10,)), s)
            if impl != "threefry2x32" and not c.slow:
                continue  # the rest only builds on bits: the default run checks it on threefry
            c("categorical" + t, lambda s, mk=mk: jax.random.categorical(mk(s), jnp.log(jnp.array([0.1, 0.2, 0.7])), shape=(9,)), s)
            c("permutation" + t, lambda s, mk=mk: jax.random.permutation(mk(s), 10), s)
            c("randint" + t, lambda s, mk=mk: jax.random.randint(mk(s), (8,), -5, 1000), s)
            c("fold_in" + t, lambda s, mk=mk: jax.random.key_data(jax.random.fold_in(mk(s), 7)), s)
            c("choice" + t, lambda s, mk=mk: jax.random.choice(mk(s), 10, (4,), replace=False), s)
            c("truncated_normal" + t, lambda s, mk=mk: jax.random.truncated_normal(mk(s), -1.0, 1.5, (6,)), s, ulps=8, atol=1e-6)
            c("gamma" + t, lambda s, mk=mk: jax.random.gamma(mk(s), jnp.array([0.5, 1.0, 3.0])), s, rtol=1e-4, atol=1e-6)
    c("PRNGKey_legacy", lambda s: jax.random.uniform(jax.random.PRNGKey(s), (4,)), np.uint32(3))
    c("vmap_split", lambda s: jax.vmap(lambda k: jax.random.normal(k, (2,)))(jax.random.split(jax.random.key(s), 4)),
      np.uint32(1), ulps=4, atol=1e-6)


@case("programs", "x64")
def linalg(c):
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl
    from jax import lax
    np = c.np
    dt = "float64" if "x64" in c.cfg else "float32"
    tol = {"rtol": 1e-9, "atol": 1e-9} if dt == "float64" else {"rtol": 2e-4, "atol": 2e-4}
    a = randn((4, 4), dt)
    spd = (a @ a.T + 4 * np.eye(4)).astype(dt)
    b = randn((4, 2), dt, seed=1)
    c("cholesky", jnp.linalg.cholesky, spd, **tol)
    c("solve", jnp.linalg.solve, a, b, **tol)
    c("inv", jnp.linalg.inv, a, **tol)
    c("det", jnp.linalg.det, a, **tol)
    c("slogdet", jnp.linalg.slogdet, a, **tol)
    c("lu", jsl.lu, a, **tol)
    c("lu_factor", jsl.lu_factor, a, **tol)
    c("triangular_solve", lambda m, r: lax.linalg.triangular_solve(m, r, left_side=True, lower=True),
      np.tril(spd).astype(dt), b, **tol)
    c("solve_triangular_T", lambda m, r: jsl.solve_triangular(m, r, trans=1, lower=False), np.triu(spd).astype(dt), b, **tol)
    c("cho_solve", lambda m, r: jsl.cho_solve(jsl.cho_factor(m), r), spd, b, **tol)
    # Factorizations are unique only up to signs; compare invariant quantities.
    c("qr_reconstruct", lambda m: (lambda q, r: (q @ r, jnp.abs(jnp.diag(r))))(*jnp.linalg.qr(m)), a, **tol)
    c("eigh_values", lambda m: jnp.linalg.eigh(m)[0], spd, **tol)
    c("svd_values", lambda m: jnp.linalg.svd(m, compute_uv=False), a, **tol)
    c("eig_values_sorted", lambda m: jnp.sort_complex(jnp.linalg.eigvals(m)), a, **tol)
    c("pinv", jnp.linalg.pinv, randn((5, 3), dt), **tol)
    c("lstsq", lambda m, r: jnp.linalg.lstsq(m, r)[0], randn((5, 3), dt), randn((5,), dt, seed=2), **tol)
    c("matrix_power", lambda m: jnp.linalg.matrix_power(m, 3), a, **tol)
    c("norm_fro_2", lambda m: (jnp.linalg.norm(m), jnp.linalg.norm(m, 1), jnp.linalg.norm(m[0])), a, **tol)
    c("expm", jsl.expm, a * 0.3, **tol)


@case("programs", "x64")
def fft(c):
    import jax.numpy as jnp
    np = c.np
    x64 = "x64" in c.cfg
    cdt = "complex128" if x64 else "complex64"
    rdt = "float64" if x64 else "float32"
    tol = {"rtol": 1e-10, "atol": 1e-10} if x64 else {"rtol": 2e-5, "atol": 2e-5}
    z = randn((4, 8), cdt)
    r = randn((4, 8), rdt)
    c("fft", jnp.fft.fft, z, **tol)
    c("ifft", jnp.fft.ifft, z, **tol)
    c("fft_n_pad", lambda v: jnp.fft.fft(v, n=11), z, **tol)
    c("rfft", jnp.fft.rfft, r, **tol)
    c("irfft", jnp.fft.irfft, np.fft.rfft(r).astype(cdt), **tol)
    c("irfft_odd_n", lambda v: jnp.fft.irfft(v, n=7), np.fft.rfft(r).astype(cdt), **tol)
    c("fft2", jnp.fft.fft2, z, **tol)
    c("fftn_3d", jnp.fft.fftn, randn((3, 4, 5), cdt), **tol)
    c("rfftn", jnp.fft.rfftn, randn((3, 4, 6), rdt), **tol)
    c("irfftn", lambda v: jnp.fft.irfftn(v, s=(4, 6)), randn((4, 4), cdt), **tol)
    c("fft_axis0_norm_ortho", lambda v: jnp.fft.fft(v, axis=0, norm="ortho"), z, **tol)
    c("fftshift_freq", lambda v: jnp.fft.fftshift(jnp.fft.fftfreq(8) + v), r[0], **tol)


@case("programs", "x64")
def special(c):
    import jax
    import jax.numpy as jnp
    import jax.scipy.special as sp
    np = c.np
    dt = "float64" if "x64" in c.cfg else "float32"
    x = np.array([0.01, 0.3, 0.9, 1.0, 1.5, 2.0, 4.5, 10.0, 30.0], dt)
    s = np.linspace(-3, 3, 9).astype(dt)
    tol = {"rtol": 1e-12 if dt == "float64" else 3e-6, "atol": 1e-12 if dt == "float64" else 1e-6}
    loose = {"rtol": 1e-9 if dt == "float64" else 2e-5, "atol": 1e-9 if dt == "float64" else 1e-6}
    c("erf", sp.erf, s, **tol)
    c("erfc", sp.erfc, s, **tol)
    c("erfinv", sp.erfinv, np.linspace(-0.99, 0.99, 9).astype(dt), **tol)
    c("ndtri", sp.ndtri, np.linspace(0.01, 0.99, 9).astype(dt), **loose)
    c("gammaln", sp.gammaln, x, **tol)
    c("digamma", sp.digamma, x, **loose)
    c("polygamma", lambda v: sp.polygamma(1, v), x, **loose)
    c("igamma", lambda a, v: sp.gammainc(a, v), x, x[::-1], **loose)
    c("igammac", lambda a, v: sp.gammaincc(a, v), x, x[::-1], **loose)
    c("betainc", lambda a, b_, v: sp.betainc(a, b_, v), x, x[::-1], np.linspace(0.05, 0.95, 9).astype(dt), **loose)
    c("betaln", sp.betaln, x, x[::-1], **loose)
    c("i0e_i1e", lambda v: (sp.i0e(v), sp.i1e(v)), s, **loose)
    c("bessel_jn", lambda v: sp.bessel_jn(v, v=2), x, **loose)
    c("zeta", lambda v: sp.zeta(v + 1.5, 2.0), x, **loose)
    c("logsumexp", lambda v: sp.logsumexp(v, axis=0), randn((5, 3), dt), **tol)
    c("logsumexp_b", lambda v: sp.logsumexp(v, b=jnp.array([1.0, -0.5, 2.0], dt), axis=1, return_sign=True), randn((5, 3), dt), **tol)
    c("softmax", lambda v: jax.nn.softmax(v, axis=-1), randn((5, 3), dt), **tol)
    c("log_softmax", jax.nn.log_softmax, randn((5, 3), dt), **tol)
    c("gelu_tanh_exact", lambda v: (jax.nn.gelu(v), jax.nn.gelu(v, approximate=False)), s, **tol)
    c("xlogy_entr", lambda a, b_: (sp.xlogy(a, b_), sp.entr(b_), sp.xlog1py(a, b_)), s, np.abs(s), **tol)
    c("expit_logit", lambda v: (sp.expit(v), sp.logit(sp.expit(v))), s, **loose)
    c("lgamma_neg", sp.gammaln, np.array([-0.5, -1.5, -2.0, -2.5, 0.0, -0.0], dt), **tol)
    c("gamma_fn", sp.gamma, np.array([0.5, 1.0, 3.3, -0.5, -1.5], dt), **loose)


@case("programs", "x64")
def special_edges(c):
    """Special functions and nn activations at edge values (poles, domain
    ends, infinities, NaN)."""
    import jax
    import jax.scipy.special as sp
    np = c.np
    dt = "float64" if "x64" in c.cfg else "float32"
    e = edge_values(dt)
    e = np.concatenate([e, np.array([-1.0, -2.0, -3.0, 1.0, 2.0, 0.999, -0.999, 1e-30, 50.0, -50.0, 89.0, -100.0], dt)])
    a = np.abs(e[np.isfinite(e)])[:12]
    ops = {"erfinv": sp.erfinv, "ndtri": sp.ndtri, "gammaln": sp.gammaln, "digamma": sp.digamma,
           "ndtr": sp.ndtr, "log_ndtr": sp.log_ndtr, "i0e": sp.i0e, "i1e": sp.i1e, "expit": sp.expit,
           "logit": sp.logit, "softplus": jax.nn.softplus, "log_sigmoid": jax.nn.log_sigmoid,
           "silu": jax.nn.silu, "gelu": jax.nn.gelu, "elu": jax.nn.elu, "celu": jax.nn.celu,
           "relu6": jax.nn.relu6, "hard_tanh": jax.nn.hard_tanh, "sigmoid": jax.nn.sigmoid,
           "entr": sp.entr, "spence": sp.spence}
    u = 8 if dt == "float32" else 16
    for name, f in ops.items():
        c(f"{name}[{dt}]", f, e, ulps=u, atol=8 * float(finfo(_dtype(dt)).eps))
    # Not gammainc/gammaincc/betainc at edge values: their series loops run
    # to the iteration cap there, minutes on an interpreter (see special()).
    x, y = pairs(a)
    for name, f in {"xlogy": sp.xlogy, "xlog1py": sp.xlog1py}.items():
        c(f"{name}[{dt}]", f, x, y, rtol=1e-6 if dt == "float32" else 1e-12, atol=1e-30)


@case("programs", "x64")
def autodiff(c):
    import jax
    import jax.numpy as jnp
    np = c.np
    dt = "float64" if "x64" in c.cfg else "float32"
    tol = {"rtol": 1e-6 if dt == "float32" else 1e-12, "atol": 1e-6 if dt == "float32" else 1e-12}
    f = lambda v: jnp.sum(jnp.tanh(v) * jnp.sin(v) ** 2 + jnp.exp(-v ** 2))  # noqa: E731
    x = randn((6,), dt)
    c("grad", jax.grad(f), x, **tol)
    c("value_and_grad", jax.value_and_grad(f), x, **tol)
    c("hessian", jax.hessian(f), x, **tol)
    c("jvp", lambda v, t: jax.jvp(f, (v,), (t,)), x, randn((6,), dt, seed=1), **tol)
    c("vjp", lambda v, t: jax.vjp(lambda u: jnp.cumsum(jnp.sin(u)), v)[1](t), x, randn((6,), dt, seed=1), **tol)
    c("jacfwd_jacrev", lambda v: (jax.jacfwd(jnp.sort)(v), jax.jacrev(lambda u: u[::2] * u[1::2])(v)), x, **tol)
    c("vmap_grad", jax.vmap(jax.grad(f)), randn((3, 6), dt), **tol)
    c("vmap_matmul_in_axes", jax.vmap(jnp.matmul, in_axes=(0, None)), randn((3, 2, 4), dt), randn((4, 5), dt), **tol)
    c("grad_of_scan", jax.grad(lambda v: jax.lax.scan(lambda cr, a: (cr * jnp.cos(a), cr), 1.0, v)[0]), x, **tol)
    c("grad_of_while_fori", jax.grad(lambda v: jax.lax.fori_loop(0, 3, lambda i, u: jnp.sin(u) * v, v).sum()), x, **tol)
    c("grad_gather_scatter", jax.grad(lambda v: (v[np.array([0, 2, 2, 5])] ** 2).sum() + v.at[1].set(3.0).prod()), x, **tol)
    c("grad_max_reduce", jax.grad(lambda v: jnp.max(v.reshape(2, 3), axis=1).sum()), x, **tol)
    c("custom_jvp_relu_softplus", jax.grad(lambda v: (jax.nn.relu(v) + jax.nn.softplus(v)).sum()), x, **tol)
    c("grad_linalg_solve", jax.grad(lambda m: jnp.linalg.solve(m + 3 * jnp.eye(3, dtype=m.dtype), jnp.ones(3, m.dtype)).sum()),
      randn((3, 3), dt), rtol=1e-4 if dt == "float32" else 1e-10, atol=1e-5 if dt == "float32" else 1e-10)


@case("programs", "x64")
def models(c):
    import jax
    import jax.numpy as jnp
    np = c.np
    dt = "float64" if "x64" in c.cfg else "float32"
    tol = {"rtol": 2e-5, "atol": 2e-5} if dt == "float32" else {"rtol": 1e-11, "atol": 1e-11}

    def mlp_init():
        return [(randn((8, 16), dt, seed=1, scale=0.3), randn((16,), dt, seed=2, scale=0.1)),
                (randn((16, 4), dt, seed=3, scale=0.3), randn((4,), dt, seed=4, scale=0.1))]

    def mlp(params, x):
        for i, (w, b) in enumerate(params):
            x = x @ w + b
            if i < len(params) - 1:
                x = jax.nn.gelu(x)
        return x

    def loss(params, x, y):
        logits = mlp(params, x)
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 4), -1))

    def step(params, x, y):
        lval, g = jax.value_and_grad(loss)(params, x, y)
        return lval, jax.tree_util.tree_map(lambda p, gp: p - 0.1 * gp, params, g)

    xb = randn((10, 8), dt, seed=5)
    yb = np.arange(10, dtype=np.int32) % 4
    c("mlp_train_step", step, mlp_init(), xb, yb, **tol)

    def train3(params, x, y):
        def body(p, _):
            lv, p = step(p, x, y)
            return p, lv
        return jax.lax.scan(body, params, None, length=3)
    c("mlp_train_scan3", train3, mlp_init(), xb, yb, **tol)

    d, h, T = 16, 2, 5

    def tinit():
        return {"wq": randn((d, d), dt, 11, 0.25), "wk": randn((d, d), dt, 12, 0.25), "wv": randn((d, d), dt, 13, 0.25),
                "wo": randn((d, d), dt, 14, 0.25), "w1": randn((d, 32), dt, 15, 0.25), "w2": randn((32, d), dt, 16, 0.25),
                "g1": np.ones(d, dt), "g2": np.ones(d, dt)}

    def layer_norm(x, g):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g

    def block(p, x):
        B = x.shape[0]
        y = layer_norm(x, p["g1"])
        q, k, v = (jnp.reshape(y @ p[n], (B, T, h, d // h)) for n in ("wq", "wk", "wv"))
        s = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(d // h).astype(dt)
        mask = jnp.tril(jnp.ones((T, T), bool))
        s = jnp.where(mask, s, jnp.finfo(dt).min)
        a = jax.nn.softmax(s, axis=-1)
        o = jnp.einsum("bhts,bshd->bthd", a, v).reshape(B, T, d)
        x = x + o @ p["wo"]
        y = layer_norm(x, p["g2"])
        return x + jax.nn.relu(y @ p["w1"]) @ p["w2"]

    xt = randn((2, T, d), dt, seed=20)
    c("transformer_block", block, tinit(), xt, **tol)
    c("transformer_grad", jax.grad(lambda p, x: (block(p, x) ** 2).mean()), tinit(), xt, **tol)
    if dt == "float32":
        c("transformer_bf16", lambda p, x: block(jax.tree_util.tree_map(lambda a: a.astype(jnp.bfloat16), p),
                                                 x.astype(jnp.bfloat16)), tinit(), xt, rtol=5e-2, atol=5e-2)


# ---------------------------------------------------------------------------
# Subprocess protocol and pytest glue
# ---------------------------------------------------------------------------


def _run_config(cfg: str, only: str | None = None) -> None:
    import warnings
    warnings.filterwarnings("ignore")
    for name, (g, fn) in CASES.items():
        if g != cfg or (only and not fnmatch.fnmatch(name.split(":", 1)[1], only)):
            continue
        ck = Checker(cfg)
        t0 = time.time()
        try:
            fn(ck)
            ck.flush()
            res = {"name": name, "checks": ck.checks, "failures": ck.failures}
            res["secs"] = round(time.time() - t0, 1)
        except BaseException:  # noqa: BLE001
            res = {"name": name, "checks": ck.checks,
                   "failures": ck.failures + [{"label": "<case>", "msg": traceback.format_exc()[-3000:]}]}
        print(MARK + json.dumps(res), flush=True)


_results: dict[str, dict] = {}


def _config_results(cfg: str) -> dict:
    if cfg in _results:
        return _results[cfg]
    env = dict(os.environ)
    for key in ("JAX_PLATFORMS", "JAX_ENABLE_X64", "STABLEHLO_REF_NUM_DEVICES", "STABLEHLO_PJRT_TRACE"):
        env.pop(key, None)
    env.update(FAST_XLA)
    env.update(CONFIGS[cfg][0])
    try:
        proc = subprocess.run([sys.executable, HERE, cfg], env=env, capture_output=True, text=True, timeout=1800)
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")) + "\n<timed out>"
        rc = "timeout"
    results = {}
    for line in out.splitlines():
        if line.startswith(MARK):
            r = json.loads(line[len(MARK):])
            results[r["name"]] = r
    results["__process__"] = {"rc": rc, "stderr": err[-4000:]}
    _results[cfg] = results
    return results


def _glob(pattern: str, text: str) -> bool:
    import re
    rx = ".*".join(re.escape(p) for p in pattern.split("*"))
    return re.fullmatch(rx, text, re.S) is not None


def _xfail_reason(case_name: str, label: str) -> str | None:
    short = case_name.split(":", 1)[1]
    for pat, reason in XFAIL.items():
        if _glob(pat, f"{short}/{label}"):
            return reason
    return None


def _params():
    out = []
    for name, (cfg, _) in CASES.items():
        marks = [pytest.mark.slow] if CONFIGS[cfg][1] else []
        out.append(pytest.param(name, id=name, marks=marks))
    return out


@pytest.mark.parametrize("name", _params())
def test_sweep(name):
    cfg = CASES[name][0]
    results = _config_results(cfg)
    r = results.get(name)
    if r is None:
        proc = results["__process__"]
        pytest.fail(f"case {name} produced no result; config {cfg} exited with {proc['rc']}; "
                    f"stderr tail:\n{proc['stderr']}")
    assert r["checks"] > 0, f"case {name} ran no checks"
    real, expected = [], {}
    for f in r["failures"]:
        reason = _xfail_reason(name, f["label"])
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


@pytest.mark.parametrize("cfg", [pytest.param(k, marks=[pytest.mark.slow] if v[1] else []) for k, v in CONFIGS.items()])
def test_config_process_exits_cleanly(cfg):
    proc = _config_results(cfg)["__process__"]
    assert proc["rc"] == 0, f"exit code {proc['rc']}; stderr tail:\n{proc['stderr']}"


if __name__ == "__main__":
    _run_config(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
