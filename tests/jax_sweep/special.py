"""Special functions (lgamma, digamma, Bessel, ...) and activations, also at
their edge values."""

from .harness import case, xfail
from .inputs import edge_values, finfo, np_dtype, pairs, randn

# Differences from XLA CPU that are not our bugs: "case/label" glob -> reason
# (see harness.xfail).
xfail({
    "special_edges/spence[*]": "spence(max float): XLA CPU overflows to NaN; -pi^2/6 - log(x)^2/2 "
                               "(what we return) is the finite value",
})



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
        c(f"{name}[{dt}]", f, e, ulps=u, atol=8 * float(finfo(np_dtype(dt)).eps))
    # Not gammainc/gammaincc/betainc at edge values: their series loops run
    # to the iteration cap there, minutes on an interpreter (see special()).
    x, y = pairs(a)
    for name, f in {"xlogy": sp.xlogy, "xlog1py": sp.xlog1py}.items():
        c(f"{name}[{dt}]", f, x, y, rtol=1e-6 if dt == "float32" else 1e-12, atol=1e-30)
