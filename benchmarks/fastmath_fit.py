"""Fits the polynomials of ``interpreter/stablehlo_interpreter/_fastmath.c``.

Each is a least-squares Chebyshev fit at 400 Chebyshev nodes of the
function's value at 120 bits (mpmath), converted to monomials, printed as C
arrays (highest degree first, for Horner) with the largest relative error of
the float64 evaluation on a dense grid. The C kernels only need about 1e-12:
an element whose float64 value lies close to a float32 rounding boundary is
recomputed by the exact path (see the C module's docstring).

    python -m benchmarks.fastmath_fit
"""

import mpmath as mp
import numpy as np
from numpy.polynomial import chebyshev as cheb

mp.mp.prec = 120

# erfc(a) = exp(-a^2) Q(t), t = 2 / (2 + a), for a in [0.5, 10.5] (erfc_f32)
# and in [0.5, 4] (erf_f32: a narrower range, a lower degree).
Q_FITS = (("ERFC_Q", 0.5, 10.5, 14), ("ERF_Q", 0.5, 4.0, 12))
# tanh(a) = a * T(a^2) for a < TANH_SMALL.
TANH_SMALL = 0.5
EXP_R = 0.35  # |r| <= ln(2) / 2 after the reduction


def _fit(f, lo, hi, deg, scale):
    """Monomial coefficients in u = (v - lo) * scale - 1 (v in [lo, hi])."""
    k = np.arange(400)
    u = np.cos(np.pi * (k + 0.5) / 400)
    v = lo + (u + 1) / scale
    y = np.array([float(f(mp.mpf(float(vi)))) for vi in v])
    return cheb.cheb2poly(cheb.chebfit(u, y, deg))


def _horner(m, u):
    r = np.full_like(u, m[-1])
    for c in m[-2::-1]:
        r = r * u + c
    return r


def _err(m, f, lo, hi, scale):
    v = np.linspace(lo, hi, 3001)
    truth = np.array([float(f(mp.mpf(float(x)))) for x in v])
    return float(np.max(np.abs(_horner(m, (v - lo) * scale - 1) / truth - 1)))


def _q(t):
    a = 2 / t - 2
    return mp.erfc(a) * mp.exp(a * a)


def _erf_over_x(s):
    if s == 0:
        return 2 / mp.sqrt(mp.pi)
    x = mp.sqrt(s)
    return mp.erf(x) / x


def _tanh_over_x(s):
    if s == 0:
        return mp.mpf(1)
    x = mp.sqrt(s)
    return mp.tanh(x) / x


def tables():
    """(name, coefficients, variable, max relative error) of each fit."""
    out = []
    # Fits in the variable itself (scale 1, lo -1: u = v) where the
    # monomials are well conditioned.
    for name, f, lo, hi, deg in (("ERF_P", _erf_over_x, 0.0, 0.25, 7),
                                 ("TANH_P", _tanh_over_x, 0.0, TANH_SMALL ** 2, 11),
                                 ("EXP_P", mp.exp, -EXP_R, EXP_R, 9)):
        m = _fit(f, lo, hi, deg, 2 / (hi - lo))
        # back to monomials in v itself: u = (v - lo) * 2 / (hi - lo) - 1
        mv = np.polynomial.Polynomial(m)(np.polynomial.Polynomial(
            [-lo * 2 / (hi - lo) - 1, 2 / (hi - lo)])).coef
        out.append((name, mv, "v", _err_plain(mv, f, lo, hi)))
    for name, a_lo, a_hi, deg in Q_FITS:
        t_lo, t_hi = 2 / (2 + a_hi), 2 / (2 + a_lo)
        scale = 2 / (t_hi - t_lo)
        m = _fit(_q, t_lo, t_hi, deg, scale)
        # u = t * scale + offset
        out.append((name, m, f"u = t * {scale.hex()} + {(-t_lo * scale - 1).hex()}",
                    _err(m, _q, t_lo, t_hi, scale)))
    return out


def _err_plain(m, f, lo, hi):
    v = np.linspace(lo, hi, 3001)
    truth = np.array([float(f(mp.mpf(float(x)))) for x in v])
    return float(np.max(np.abs(_horner(m, v) / truth - 1)))


def main():
    for name, m, var, err in tables():
        print(f"/* {name}: in {var}; max relative error {err:.2e} */")
        body = ",\n    ".join(float(c).hex() for c in m[::-1])
        print(f"static const double {name}[{len(m)}] = {{\n    {body}}};")


if __name__ == "__main__":
    main()
