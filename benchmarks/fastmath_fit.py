"""Fits the polynomials of ``interpreter/stablehlo_interpreter/_fastmath.c``.

Each is a least-squares Chebyshev fit at 400 Chebyshev nodes of the
function's value at 120 bits (mpmath), converted to monomials, printed as C
arrays (highest degree first, for Horner) with the largest relative error of
the float64 evaluation on a dense grid; where a polynomial's relative error
reaches the kernel's result scaled (erf's Q: by erfc(a) / erf(a)), fit and
error are weighted by that scale. The C kernels only need about 1e-12:
an element whose float64 value lies close to a float32 rounding boundary is
recomputed by the exact path (see the C module's header comment). Paste the
output over the tables there.

    python -m benchmarks.fastmath_fit
"""

import mpmath as mp
import numpy as np
from numpy.polynomial import chebyshev as cheb

mp.mp.prec = 120


def _q(t):
    """erfc(a) e^(a^2) as a function of t = 2 / (2 + a)."""
    a = 2 / t - 2
    return mp.erfc(a) * mp.exp(a * a)


def _erf_weight(t):
    """How a relative error of Q(t) weighs in erf(a) = 1 - e^(-a^2) Q(t):
    erfc(a) / erf(a), below 1 on a >= 0.5 and 1.5e-8 at a = 4."""
    a = 2 / t - 2
    return mp.erfc(a) / mp.erf(a)


def _over_root(f, at0):
    """f(sqrt(s)) / sqrt(s) (the even part of an odd function, in s = x^2)."""
    def g(s):
        if s == 0:
            return at0
        x = mp.sqrt(s)
        return f(x) / x
    return g


def _erfinv_w(w):
    """erf_inv(x) / x as a function of w = -log(1 - x^2)."""
    if w == 0:
        return mp.sqrt(mp.pi) / 2
    x = mp.sqrt(-mp.expm1(-w))
    return mp.erfinv(x) / x


def _erfinv_v(v):
    """erf_inv(x) / x as a function of v = sqrt(-log(1 - x^2))."""
    return _erfinv_w(v * v)


def _expm1_over(r):
    """expm1(r) / r."""
    return mp.mpf(1) if r == 0 else mp.expm1(r) / r


def _log_s(z):
    """log((1 + s) / (1 - s)) / s as a function of z = s^2."""
    if z == 0:
        return mp.mpf(2)
    s = mp.sqrt(z)
    return mp.log((1 + s) / (1 - s)) / s


SQRT2 = mp.sqrt(2)
LOG_Z = float(((SQRT2 - 1) / (SQRT2 + 1)) ** 2)

# name, function, interval, degree, whether the polynomial is in the
# variable itself (monomials well conditioned there) or in u, the interval
# mapped to [-1, 1] (u = v * NAME_SCALE + NAME_OFFSET), and the weight of its
# relative error in the kernel's result (None: 1).
FITS = (
    ("ERF_P", _over_root(mp.erf, 2 / mp.sqrt(mp.pi)), 0.0, 0.25, 6, False, None),
    ("EXP_P", mp.exp, -0.35, 0.35, 9, False, None),
    ("EXPM1_P", _expm1_over, -0.35, 0.35, 8, False, None),
    # e^r after the AVX-512 exp's reduction by ln2 / 16 (EXP_T: 2^(j / 16))
    ("EXP16_P", mp.exp, -float(mp.log(2) / 32) * 1.01, float(mp.log(2) / 32) * 1.01, 5, False,
     None),
    ("LOG_P", _log_s, 0.0, LOG_Z, 5, False, None),
    # erfc(a) = e^(-a^2) Q(t), t = 2 / (2 + a), a in [0.5, 10.5] (erfc) and
    # in [0.5, 4] (erf: narrower, and fitted for erf's relative error, in
    # which Q's counts erfc(a) / erf(a) times: a lower degree)
    ("ERFC_Q", _q, 2 / 12.5, 2 / 2.5, 14, True, None),
    ("ERF_Q", _q, 2 / 6.0, 2 / 2.5, 10, True, _erf_weight),
    # erf_inv(x) = x P(w), w = -log(1 - x^2) < 6.25; x P(sqrt(w)) above
    ("ERFINV_W", _erfinv_w, 0.0, 6.25, 18, True, None),
    ("ERFINV_V", _erfinv_v, 2.5, 4.1, 14, True, None),
)


def _horner(m, u):
    r = np.full_like(u, m[-1])
    for c in m[-2::-1]:
        r = r * u + c
    return r


def fit(f, lo, hi, deg, mapped, weight=None):
    """(monomial coefficients, scale, offset, max relative error, weighted by
    ``weight`` where given)."""
    scale = 2 / (hi - lo)
    offset = -lo * scale - 1
    k = np.arange(400)
    u = np.cos(np.pi * (k + 0.5) / 400)
    nodes = [mp.mpf(float(lo + (ui + 1) / scale)) for ui in u]
    y = np.array([float(f(x)) for x in nodes])
    # least squares on the (weighted) relative error
    w = None if weight is None else np.array([float(weight(x)) for x in nodes]) / np.abs(y)
    m = cheb.cheb2poly(cheb.chebfit(u, y, deg, w=w))
    if not mapped:   # monomials in v: substitute u = v * scale + offset
        m = np.polynomial.Polynomial(m)(np.polynomial.Polynomial([offset, scale])).coef
    v = np.linspace(lo, hi, 3001)
    truth = np.array([float(f(mp.mpf(float(x)))) for x in v])
    got = _horner(m, v * scale + offset if mapped else v)
    rel = np.abs(got / truth - 1)
    if weight is not None:
        rel *= np.array([float(weight(mp.mpf(float(x)))) for x in v])
    return m, scale, offset, float(np.max(rel))


# erf(a) / a on [0, 4] in ERF_T_N pieces: piece j is centred on j / ERF_T_STEP
# and spans half a step either side (a little more: the kernel's piece index
# and u = a - j / ERF_T_STEP are rounded); a polynomial in u of degree
# ERF_T_DEG each. The AVX-512 erf picks each lane's coefficients by a
# two-source permute (in-register table of 16 doubles).
ERF_T_N, ERF_T_STEP, ERF_T_DEG = 16, 3.75, 8


def fit_pieces():
    """(ERF_T_N rows of monomial coefficients in u, lowest degree first; max
    relative error of erf over [0, 4] of the float64 evaluation)."""
    half = 0.5 / ERF_T_STEP * 1.002
    k = np.arange(200)
    t = np.cos(np.pi * (k + 0.5) / 200)
    g = _over_root(mp.erf, 2 / mp.sqrt(mp.pi))
    rows, worst = [], 0.0
    for j in range(ERF_T_N):
        c = j / ERF_T_STEP
        y = np.array([float(g(mp.mpf(float(c + half * ti)) ** 2)) for ti in t])
        m = cheb.cheb2poly(cheb.chebfit(t, y, ERF_T_DEG)) / half ** np.arange(ERF_T_DEG + 1)
        a = np.linspace(max(0.0, c - half), min(4.0, c + half), 2001)
        got = _horner(m, a - j * (1 / ERF_T_STEP))
        truth = np.array([float(g(mp.mpf(float(x)) ** 2)) for x in a])
        worst = max(worst, float(np.max(np.abs(got / truth - 1))))
        rows.append(m)
    return rows, worst


def main():
    rows, err = fit_pieces()
    print(f"/* ERF_T: erf(a) / a for a in [0, 4]; piece j = round(a * {ERF_T_STEP}), a polynomial in"
          f" u = a - j / {ERF_T_STEP}; row k: the {ERF_T_N} pieces' coefficients of u^({ERF_T_DEG} - k);"
          f" max relative error {err:.2e} */")
    body = ",\n    ".join("{" + ", ".join(float(m[d]).hex() for m in rows) + "}"
                          for d in range(ERF_T_DEG, -1, -1))
    print(f"static const double ERF_T[{ERF_T_DEG + 1}][{ERF_T_N}] = {{\n    {body}}};")
    exp_t = [float(mp.power(2, mp.mpf(j) / 16)).hex() for j in range(16)]
    exp_t = ",\n    ".join(", ".join(exp_t[i:i + 4]) for i in range(0, 16, 4))
    print(f"/* EXP_T: 2^(j / 16), j = 0..15, rounded */\nstatic const double EXP_T[16] = {{\n    {exp_t}}};")
    for name, f, lo, hi, deg, mapped, weight in FITS:
        m, scale, offset, err = fit(f, lo, hi, deg, mapped, weight)
        var = f"u = v * {name}_SCALE + {name}_OFFSET" if mapped else "v"
        what = "relative error" if weight is None else f"error weighted by {weight.__name__}"
        print(f"/* {name}: in {var}, v in [{lo:.6g}, {hi:.6g}]; max {what} {err:.2e} */")
        if mapped:
            print(f"#define {name}_SCALE {scale.hex()}\n#define {name}_OFFSET {offset.hex()}")
        body = ",\n    ".join(float(c).hex() for c in m[::-1])
        print(f"static const double {name}[{len(m)}] = {{\n    {body}}};")


if __name__ == "__main__":
    main()
