"""The accuracy contract of transcendental functions on stablehlo_ref.

Every function below, called from JAX on the stablehlo_ref platform, returns
results within 1 ULP of the correctly rounded value for float32, float16 and
bfloat16 (measured: at most 0.5 ULP, i.e. correctly rounded but for ties),
checked against mpmath at 120 bits over a grid and random points of each
function's domain; and special values (zeros, infinities, NaN, the largest
and smallest normal numbers) give exactly what the float64 function gives
rounded to the type.

This goes through JAX, not only the interpreter: JAX lowers logistic to
1 / (1 + exp(-x)) and serializes chlo.erf, erfc, asin, lgamma, ... as f32
polynomial decompositions (1 to 250 ULP off); the plugin's lowerings and the
interpreter's composite kernels replace those (stablehlo_pjrt/lowerings.py,
registry.composite in ops/chlo.py).  XLA CPU runs the decompositions, so its
errors are printed next to ours for information, never asserted (they depend
on the host CPU).

The values are computed once, in a subprocess (JAX backends are process
global): ``python test_transcendental_accuracy.py`` prints the JSON table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.abspath(__file__)
DTYPES = ("float32", "float16", "bfloat16")
MAX_ULPS = 1.0


def _functions():
    """name -> (jax function, mpmath function, float64 function, domain sampler)."""
    import jax
    import jax.numpy as jnp
    import jax.scipy.special as jss
    import mpmath
    import numpy as np
    import scipy.special as sps

    rng = np.random.default_rng(0)

    def lin(lo, hi, n=300):
        return np.concatenate([np.linspace(lo, hi, n), rng.uniform(lo, hi, n)])

    def logs(lo, hi, n=300):
        return np.exp(lin(np.log(lo), np.log(hi), n))

    def sym_logs(lo, hi):
        a = logs(lo, hi)
        return np.concatenate([a, -a])

    # chlo's definitions at the poles (ChloOps.td, the decompositions, XLA):
    # lgamma(+-inf) = +inf (scipy: gammaln(-inf) = -inf); digamma is NaN at
    # 0 and the negative integers (scipy: psi(+-0) = -+inf).
    def lgamma64(x):
        return np.where(np.isinf(x), np.inf, sps.gammaln(x))

    def digamma64(x):
        return np.where((x <= 0) & (x == np.floor(x)), np.nan, sps.psi(x))

    def logistic64(x):
        with np.errstate(over="ignore"):
            return 1.0 / (1.0 + np.exp(-x))

    return {
        "exp": (jnp.exp, mpmath.exp, np.exp, lambda: lin(-80, 80)),
        "expm1": (jnp.expm1, mpmath.expm1, np.expm1, lambda: np.concatenate([lin(-10, 10), sym_logs(1e-6, 1)])),
        "log": (jnp.log, mpmath.log, np.log, lambda: logs(1e-30, 1e30)),
        "log1p": (jnp.log1p, mpmath.log1p, np.log1p, lambda: np.concatenate([lin(-0.99, 10), sym_logs(1e-6, 0.5)])),
        "sin": (jnp.sin, mpmath.sin, np.sin, lambda: lin(-100, 100)),
        "cos": (jnp.cos, mpmath.cos, np.cos, lambda: lin(-100, 100)),
        "tan": (jnp.tan, mpmath.tan, np.tan, lambda: lin(-10, 10)),
        "tanh": (jnp.tanh, mpmath.tanh, np.tanh, lambda: np.concatenate([lin(-10, 10), sym_logs(1e-6, 1)])),
        "sinh": (jnp.sinh, mpmath.sinh, np.sinh, lambda: np.concatenate([lin(-88, 88), sym_logs(1e-6, 1)])),
        "cosh": (jnp.cosh, mpmath.cosh, np.cosh, lambda: lin(-88, 88)),
        "logistic": (jax.nn.sigmoid, lambda x: 1 / (1 + mpmath.exp(-x)), logistic64, lambda: lin(-30, 30)),
        "sqrt": (jnp.sqrt, mpmath.sqrt, np.sqrt, lambda: logs(1e-30, 1e30)),
        "rsqrt": (jax.lax.rsqrt, lambda x: 1 / mpmath.sqrt(x), lambda x: 1 / np.sqrt(x), lambda: logs(1e-30, 1e30)),
        "cbrt": (jnp.cbrt, lambda x: mpmath.sign(x) * mpmath.cbrt(abs(x)), np.cbrt, lambda: sym_logs(1e-30, 1e30)),
        "atan": (jnp.arctan, mpmath.atan, np.arctan, lambda: lin(-100, 100)),
        "asin": (jnp.arcsin, mpmath.asin, np.arcsin, lambda: lin(-1, 1)),
        "acos": (jnp.arccos, mpmath.acos, np.arccos, lambda: lin(-1, 1)),
        "asinh": (jnp.arcsinh, mpmath.asinh, np.arcsinh, lambda: lin(-100, 100)),
        "acosh": (jnp.arccosh, mpmath.acosh, np.arccosh, lambda: lin(1, 100)),
        "atanh": (jnp.arctanh, mpmath.atanh, np.arctanh, lambda: lin(-0.999, 0.999)),
        "erf": (jss.erf, mpmath.erf, sps.erf, lambda: lin(-5, 5)),
        "erfc": (jss.erfc, mpmath.erfc, sps.erfc, lambda: lin(-5, 9)),
        "erfinv": (jss.erfinv, mpmath.erfinv, sps.erfinv, lambda: lin(-0.999, 0.999)),
        "lgamma": (jss.gammaln, lambda x: mpmath.log(abs(mpmath.gamma(x))), lgamma64, lambda: lin(0.05, 50)),
        "digamma": (jss.digamma, mpmath.digamma, digamma64, lambda: lin(0.05, 50)),
    }


def _special_values(dt):
    import ml_dtypes
    import numpy as np
    fi = ml_dtypes.finfo(dt)
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, float(fi.max), -float(fi.max),
                     float(fi.tiny), -float(fi.tiny)], np.float64).astype(dt)


def measure():
    """{dtype: {name: {"ref": max ulps, "cpu": max ulps, "special": [mismatches]}}}."""
    import jax
    import ml_dtypes
    import mpmath
    import numpy as np
    mpmath.mp.prec = 120
    ref, cpu = jax.devices("stablehlo_ref")[0], jax.devices("cpu")[0]
    out: dict = {}
    for dtn in DTYPES:
        dt = np.dtype(getattr(ml_dtypes, dtn, dtn))
        fi = ml_dtypes.finfo(dt)
        tiny, big, eps = float(fi.tiny), float(fi.max), float(fi.eps)
        for name, (jf, mf, f64, sample) in _functions().items():
            x = sample().astype(dt)
            x = x[np.isfinite(x.astype(np.float64))]
            truth = np.empty(x.size, np.float64)
            ulp = np.empty(x.size, np.float64)
            for i, xi in enumerate(x.astype(np.float64).tolist()):
                try:
                    t = mf(mpmath.mpf(xi))
                    truth[i] = float(t.real if isinstance(t, mpmath.mpc) else t)
                except (ZeroDivisionError, ValueError):  # a pole: left to the special values
                    truth[i] = np.nan
                mag = max(abs(truth[i]), tiny)
                ulp[i] = eps * 2.0 ** np.floor(np.log2(mag)) if mag <= big else np.inf
            keep = np.isfinite(truth) & (np.abs(truth) <= big)
            row = {}
            for label, dev in (("ref", ref), ("cpu", cpu)):
                y = np.asarray(jax.jit(jf, device=dev)(x)).astype(np.float64)
                with np.errstate(invalid="ignore"):
                    err = np.where(np.isfinite(y), np.abs(y - truth) / ulp, np.inf)[keep]
                row[label] = float(err.max()) if err.size else 0.0
                if label == "ref":
                    worst = int(np.argmax(np.where(keep, np.nan_to_num(np.abs(y - truth) / ulp, nan=np.inf), -1)))
                    row["worst_input"] = float(x.astype(np.float64)[worst])
            sv = _special_values(dt)
            with np.errstate(all="ignore"):
                want = np.asarray(f64(sv.astype(np.float64))).astype(dt).astype(np.float64)
            got = np.asarray(jax.jit(jf, device=ref)(sv)).astype(np.float64)
            same = (want == got) | (np.isnan(want) & np.isnan(got))
            row["special"] = [f"{name}({v!r}) = {g!r}, float64 gives {w!r}"
                              for v, g, w, s in zip(sv.astype(np.float64).tolist(), got.tolist(),
                                                    want.tolist(), same.tolist()) if not s]
            out.setdefault(dtn, {})[name] = row
    return out


@pytest.fixture(scope="module")
def table():
    env = dict(os.environ, JAX_PLATFORMS="cpu,stablehlo_ref")
    proc = subprocess.run([sys.executable, HERE], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _names():
    # The list is static; building it needs jax and mpmath, only names here.
    return ["exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "sinh", "cosh", "logistic",
            "sqrt", "rsqrt", "cbrt", "atan", "asin", "acos", "asinh", "acosh", "atanh", "erf", "erfc",
            "erfinv", "lgamma", "digamma"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", _names())
def test_within_one_ulp(table, dtype, name):
    row = table[dtype][name]
    assert row["ref"] <= MAX_ULPS, (
        f"{name} {dtype}: {row['ref']:.3f} ULP at x = {row['worst_input']!r} "
        f"(XLA CPU: {row['cpu']:.3f} ULP, for information)")
    assert not row["special"], "\n".join(row["special"])


if __name__ == "__main__":
    assert sorted(_functions()) == sorted(_names())
    print(json.dumps(measure()))
