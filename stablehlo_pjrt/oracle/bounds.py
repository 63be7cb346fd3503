"""Per-element error bounds of a JAX program, from first principles.

For every output element this computes, next to the value the program's own
types give:

* the **centre**: the program evaluated in float64 (each op's exact result
  up to float64 rounding, with every rounding the program asks for, such as
  a convert to bf16, counted as an error instead of applied);
* the **worst-case bound** ``worst``: a first-order forward error bound any
  conforming implementation meets. Each op contributes its own rounding,
  u*|y| (a few u for transcendental functions), and for a sum of n terms
  (dot_general, conv, reduce_sum, cumsum) gamma_n * sum|terms| (Higham,
  "Accuracy and Stability of Numerical Algorithms", 2nd ed., 3.1), with
  sum|terms| from an absolute-value shadow of the same op. Errors reaching
  an op through its operands are multiplied by the op's condition:
  |J| * error, from the op's JVP (at |operands| for multilinear ops);
* the **spread** ``spread``: the standard deviation of the same local
  errors taken as independent random variables (a sum's as the random walk
  of its n partial-sum roundings, u*sqrt(n/3)*sum|terms|). Their variances
  are propagated directly, ``J^2 var`` (for multilinear ops the op applied
  to the squared operands and the variances: one extra product per dot),
  which assumes the errors of different elements independent.
  A legitimate difference stays within a few of these (the verdict uses
  :data:`SPREAD_FACTOR`), which a sum whose terms were rounded to bf16
  exceeds while every order of f32 summation (sequential, pairwise,
  blocked) stays inside.

The evaluation walks the jaxpr of ``fn``: JAX's own JVP rules give the
condition of every primitive. Calls (jit, custom_jvp/custom_vjp functions)
are walked into; ``cond``, ``while`` and ``scan`` run their bodies through
the same walk. The whole walk is one jitted float64 program, run on the
platform ``shadow_on``: the reference by default (then XLA CPU), whose
float64 rounding, 1e-16, is far below any float32 bound. The reference
plans it in a fraction of the time XLA takes to compile it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

# Primitives that only move or select values: no rounding of their own.
EXACT = frozenset({
    "broadcast_in_dim", "reshape", "transpose", "squeeze", "expand_dims", "slice",
    "dynamic_slice", "dynamic_update_slice", "concatenate", "pad", "gather", "rev",
    "select_n", "copy", "copy_p", "neg", "abs", "max", "min", "reduce_max", "reduce_min",
    "argmax", "argmin", "sort", "sign", "floor", "ceil", "round", "stop_gradient",
    "real", "imag", "conj", "clamp", "reduce_precision", "optimization_barrier",
    "iota", "eq", "ne", "lt", "le", "gt", "ge", "is_finite", "device_put",
    "sharding_constraint", "squeeze_p", "split", "scatter", "select_and_gather_add",
    "pjit", "jit",
})
# Functions whose implementations are not correctly rounded: a few u each.
TRANSCENDENTAL = frozenset({
    "exp", "exp2", "expm1", "log", "log1p", "tanh", "logistic", "sin", "cos", "tan",
    "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "pow",
    "erf", "erfc", "erf_inv", "lgamma", "digamma", "igamma", "igammac", "bessel_i0e",
    "bessel_i1e", "cbrt", "rsqrt", "polygamma", "zeta", "random_gamma_grad",
})
TRANSCENDENTAL_ULPS = 4.0
# Sums of products: linear in each operand, with n terms per result element.
SUMMING = frozenset({"dot_general", "conv_general_dilated", "reduce_sum", "cumsum",
                     "cumlogsumexp", "reduce_window_sum"})
MULTILINEAR = SUMMING | {"mul", "add", "sub", "add_any", "neg", "integer_pow_never"}
# Correctly rounded ops: into a narrow type (bf16, f16, f8) their rounding
# is deterministic and the shadow applies it (see _Walker._rounded); into
# f32/f64 it is modelled as noise of u*|y| (which also covers a backend
# contracting a*b+c into one fused multiply-add).
ROUNDED = frozenset({"add", "sub", "mul", "div", "sqrt", "add_any", "convert_element_type",
                     "neg", "abs", "max", "min", "square"})
# How many standard deviations of the spread a legitimate difference may reach.
SPREAD_FACTOR = 4.0


def unit_roundoff(dtype: Any) -> float:
    """u = eps/2 of a floating-point dtype (bf16, f16, f8 too); 0 otherwise."""
    from .causes import _finfo
    try:
        dtype = np.dtype(dtype)
    except TypeError:   # an extended dtype (a PRNG key)
        return 0.0
    if dtype.kind in "biu" or dtype == np.bool_:
        return 0.0
    if dtype.kind == "c":
        dtype = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
    try:
        return float(_finfo(dtype).eps) / 2
    except (TypeError, ValueError):
        return 0.0


def _is_float(dtype: Any) -> bool:
    return unit_roundoff(dtype) > 0 and np.dtype(dtype).kind != "c"


class _Exact:
    """The error of an exact value (arguments, constants, and what exact
    ops make of them): no arrays to carry or propagate."""

    def __repr__(self) -> str:
        return "EXACT"


EXACT_ERR = _Exact()


# (value, worst case, variance); the errors are EXACT_ERR for exact values.
Triple = tuple[Any, Any, Any]


def _materialize(x: Any, w: Any, v: Any) -> Triple:
    """(x, w, v) with EXACT_ERR replaced by zeros of x's shape."""
    shape = np.shape(x)
    return (x, _zeros(shape) if w is EXACT_ERR else w, _zeros(shape) if v is EXACT_ERR else v)


def _zeros(shape: Any) -> Any:
    import jax.numpy as jnp
    return jnp.zeros(tuple(shape), np.float64)


@dataclass
class Bounds:
    """Per output leaf: the float64 centre, the worst-case bound and the
    spread (standard deviation of the legitimate errors)."""

    centre: list[np.ndarray]
    worst: list[np.ndarray]
    spread: list[np.ndarray]
    unmodelled: set[str] = field(default_factory=set)   # primitives without a rule
    transcendental: set[str] = field(default_factory=set)   # such primitives walked

    def allowed(self, k: int) -> np.ndarray:
        """The largest |other - centre| output ``k`` may legitimately show:
        SPREAD_FACTOR spreads, but never more than the worst-case bound."""
        return np.asarray(np.minimum(SPREAD_FACTOR * self.spread[k], self.worst[k]))


def _terms(prim: str, params: dict[str, Any], in_avals: Any, out_aval: Any) -> float:
    """Terms summed into one result element."""
    if prim == "dot_general":
        (lc, _), _ = params["dimension_numbers"]
        return float(np.prod([in_avals[0].shape[d] for d in lc])) if lc else 1.0
    if prim == "conv_general_dilated":
        dn = params["dimension_numbers"]
        rhs = in_avals[1].shape
        rhs_spec = dn.rhs_spec if dn is not None else tuple(range(len(rhs)))
        # rhs_spec = (out feature dim, in feature dim, spatial...)
        return float(np.prod([rhs[d] for d in rhs_spec[1:]]))
    if prim == "reduce_sum":
        return float(np.prod([in_avals[0].shape[a] for a in params["axes"]]))
    if prim in ("cumsum", "cumlogsumexp"):
        return float(in_avals[0].shape[params["axis"]])
    if prim == "reduce_window_sum":
        return float(np.prod(params["window_dimensions"]))
    return 1.0


def fft_stages(lengths: Sequence[int]) -> int:
    """Butterfly stages L of a transform over axes of these lengths: log2 n
    for a power of two; otherwise 3*ceil(log2 2n), which covers Bluestein's
    algorithm (two forward FFTs and one inverse of a power of two >= 2n-1,
    and the chirp products) and mixed-radix ones."""
    total = 0
    for n in lengths:
        n = int(n)
        if n <= 1:
            continue
        total += int(np.log2(n)) if n & (n - 1) == 0 else 3 * int(np.ceil(np.log2(2 * n)))
    return total


def _fft_eta(u: float) -> float:
    """The error of one butterfly y = a +- w*b, relative to |a|+|b|: eta =
    mu + gamma_4*(sqrt(2) + mu), twiddles w accurate to mu =
    TRANSCENDENTAL_ULPS*u (Higham, 2nd ed., (24.5) and Lemma 24.1)."""
    mu = TRANSCENDENTAL_ULPS * u
    return float(mu + _gamma(4, u) * (np.sqrt(2.0) + mu))


def fft_factor(lengths: Sequence[int], u: float) -> float:
    """((1+eta)^L - 1), the factor of sum|x| bounding each output element's
    error of a floating-point FFT (Higham, "Accuracy and Stability of
    Numerical Algorithms", 2nd ed., ch. 24, Theorem 24.2 and its proof):
    every butterfly errs by at most eta*(|a|+|b|); through L stages, whose
    absolute values sum to sum_k |x_k| at each output (|w| = 1), that is
    ((1+eta)^L - 1) * sum|x|."""
    return float((1 + _fft_eta(u)) ** fft_stages(lengths) - 1)


def fft_exact(fft_type: str, lengths: Sequence[int], x: np.ndarray) -> np.ndarray:
    """The transform in float64/complex128 (numpy's pocketfft; its rounding,
    about 1e-16 * L * sum|x|, is far below a float32 bound)."""
    axes = tuple(range(-len(lengths), 0))
    if fft_type == "FFT":
        return np.fft.fftn(np.asarray(x, np.complex128), axes=axes)
    if fft_type == "IFFT":
        return np.fft.ifftn(np.asarray(x, np.complex128), axes=axes)
    if fft_type == "RFFT":
        return np.fft.rfftn(np.asarray(x, np.float64), s=lengths, axes=axes)
    if fft_type == "IRFFT":
        return np.fft.irfftn(np.asarray(x, np.complex128), s=lengths, axes=axes)
    raise ValueError(f"unknown fft_type {fft_type!r}")


def fft_allowed(fft_type: str, lengths: Sequence[int], x: np.ndarray,
                dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """(exact transform, the largest |other - exact| a floating-point FFT
    into ``dtype`` may show) at each output element of ``x``'s transform.

    The worst case is ((1+eta)^L - 1) * sum|x| (:func:`fft_factor`). As for
    sums, the butterflies' roundings are also taken as independent: stage
    by stage the remaining stages carry an error vector's norm to the
    output unchanged relative to the values' (the DFT is unitary up to
    sqrt(n)), spread over the n outputs, so each output's standard
    deviation is eta * sqrt(L) * ||x||_2 (the rms error grows like
    sqrt(log n), Higham 24.1). Allowed: SPREAD_FACTOR spreads, at most the
    worst case, plus a rounding of the result. IFFT and IRFFT scale by 1/n
    (one rounding more); IRFFT's input is half of a Hermitian spectrum,
    whose full sums are at most twice (|X|) and sqrt(2) times (||X||_2)."""
    u = unit_roundoff(dtype)
    xa = np.abs(np.asarray(x).astype(np.complex128 if np.asarray(x).dtype.kind == "c"
                                      else np.float64))
    worst, spread = fft_local(fft_type, lengths, xa, u, np)
    exact = fft_exact(fft_type, lengths, x)
    allowed = np.minimum(SPREAD_FACTOR * spread, worst) + 2 * u * np.abs(exact)
    return exact, np.asarray(np.broadcast_to(allowed, exact.shape))


def fft_local(fft_type: str, lengths: Sequence[int], xa: Any, u: float,
              xp: Any) -> tuple[Any, Any]:
    """(worst case, standard deviation) of an FFT's own rounding at each
    output, from the input's absolute values ``xa`` (numpy or jax.numpy
    as ``xp``; size-1 axes where the transform's were), see
    :func:`fft_allowed`."""
    axes = tuple(range(-len(lengths), 0))
    abs_sum = xp.sum(xa, axis=axes, keepdims=True)
    norm = xp.sqrt(xp.sum(xa * xa, axis=axes, keepdims=True))
    n = float(np.prod([int(m) for m in lengths]))
    scale, extra = 1.0, 0.0
    if fft_type in ("IFFT", "IRFFT"):
        scale, extra = 1 / n, u
    if fft_type == "IRFFT":
        abs_sum, norm = 2 * abs_sum, np.sqrt(2) * norm
    worst = (fft_factor(lengths, u) + extra) * abs_sum * scale
    spread = _fft_eta(u) * np.sqrt(max(fft_stages(lengths), 1)) * norm * scale
    return worst, spread


def _narrow_format(dtype: Any) -> tuple[int, int] | None:
    """(exponent bits, mantissa bits) of a float type narrower than f32, else None."""
    from .causes import _finfo
    dtype = np.dtype(dtype)
    if not _is_float(dtype) or dtype.itemsize >= 4:
        return None
    fi = _finfo(dtype)
    return int(fi.nexp), int(fi.nmant)


def _gamma(n: float, u: float) -> float:
    nu = n * u
    return nu / (1 - nu) if nu < 0.5 else float(np.inf)


class _Walker:
    """Evaluates a jaxpr on (value, worst, variance) triples in float64."""

    def __init__(self, transcendental_ulps: float = TRANSCENDENTAL_ULPS) -> None:
        self.unmodelled: set[str] = set()
        self.transcendental: set[str] = set()
        # The worst-case error of a transcendental function, in u*|y|.
        self.transcendental_ulps = transcendental_ulps

    # -- one primitive ----------------------------------------------------
    def eqn(self, eqn: Any, ins: list[Triple]) -> list[Triple]:
        prim = eqn.primitive.name
        params = dict(eqn.params)
        sub = _subjaxpr(prim, params)
        if sub is not None:
            return self.jaxpr(sub[0], sub[1], ins)
        if prim == "cond":
            return self._cond(eqn, params, ins)
        if prim == "while":
            return self._while(eqn, params, ins)
        if prim == "scan":
            return self._scan(eqn, params, ins)
        if prim == "fft":
            return self._fft(eqn, params, ins)
        in_avals = [v.aval for v in eqn.invars]
        out_avals = [v.aval for v in eqn.outvars]
        params = _widen_params(prim, params)
        vals = [x for x, _, _ in ins]
        fl = [i for i, a in enumerate(in_avals) if _is_float(a.dtype)]

        def bind(*xs: Any) -> list[Any]:
            full = list(vals)
            for i, x in zip(fl, xs):
                full[i] = x
            out = eqn.primitive.bind(*full, **params)
            return list(out) if eqn.primitive.multiple_results else [out]

        def keep(*xs: Any) -> list[Any]:
            return [xs[0]]   # reduce_precision: the shadow keeps the exact value

        f_all = keep if prim == "reduce_precision" else bind
        prim_in = [vals[i] for i in fl]
        outs = f_all(*prim_in)
        float_out = [_is_float(a.dtype) for a in out_avals]
        fo = [k for k, x in enumerate(float_out) if x]
        if not fl or not fo:
            outs = [o.astype(np.float64) if _is_float(o.dtype) else o for o in outs]
            return [(o, EXACT_ERR, EXACT_ERR) for o in outs]

        def f(*xs: Any) -> list[Any]:
            """The float results only (others have no tangent)."""
            out = f_all(*xs)
            return [out[k] for k in fo]

        exact_in, prop, samp = self._propagate(prim, f, prim_in, ins, fl, fo)
        result: list[Triple] = []
        for k, (o, oa) in enumerate(zip(outs, out_avals)):
            if not float_out[k]:
                result.append((o, EXACT_ERR, EXACT_ERR))
                continue
            o = o.astype(np.float64)
            u = unit_roundoff(oa.dtype)
            w, s = prop[k], samp[k]
            fmt = _narrow_format(oa.dtype)
            if prim == "reduce_precision":
                fmt = (params["exponent_bits"], params["mantissa_bits"])
            if fmt is not None:
                # Computed in f32 (as backends do), then rounded as the program asks.
                u = unit_roundoff(np.float32)
            if fmt is None or prim not in ROUNDED and prim != "reduce_precision":
                if prim in EXACT and fmt is None:
                    lw = None
                else:
                    lw, ls = self._local(prim, params, prim_in, in_avals, oa, o, u,
                                         [a for i, a in enumerate(in_avals) if i in fl], f)
                if lw is not None:
                    w, s = w + lw, s + ls * ls
            if fmt is not None:
                w = _zeros(o.shape) + w
                s = _zeros(o.shape) + s
                result.append(self._rounded(o, w, s, fmt))
            elif isinstance(w, float) and isinstance(s, float):
                result.append((o, EXACT_ERR, EXACT_ERR))
            else:
                result.append((o, _zeros(o.shape) + w, _zeros(o.shape) + s))
        return result

    def _fft(self, eqn: Any, params: dict[str, Any], ins: list[Triple]) -> list[Triple]:
        """An FFT: computed in complex128/float64; a real result (IRFFT)
        carries the FFT's own rounding (fft_local; complex values carry no
        errors, see docs/oracle.md "Limits")."""
        import jax.numpy as jnp
        x = ins[0][0]
        wide = jnp.asarray(x).astype(np.complex128 if jnp.iscomplexobj(x) else np.float64)
        y = eqn.primitive.bind(wide, **params)
        oa = eqn.outvars[0].aval
        if not _is_float(oa.dtype):
            return [(y, EXACT_ERR, EXACT_ERR)]
        kind = ("FFT", "IFFT", "RFFT", "IRFFT")[int(params["fft_type"])]
        u = unit_roundoff(oa.dtype)
        w, s = fft_local(kind, params["fft_lengths"], jnp.abs(wide), u, jnp)
        y = y.astype(np.float64)
        return [(y, _zeros(y.shape) + w + u * jnp.abs(y),
                 _zeros(y.shape) + s * s + (u * jnp.abs(y)) ** 2)]

    def _propagate(self, prim: str, f: Callable[..., list[Any]], prim_in: list[Any],
                   ins: list[Triple], fl: list[int],
                   fo: list[int]) -> tuple[bool, dict[int, Any], dict[int, Any]]:
        """(inputs exact?, {result: |J| W}, {result: J^2 V}) of one op, for
        the inputs' worst cases W and variances V."""
        import jax
        import jax.numpy as jnp
        exact_in = all(ins[i][1] is EXACT_ERR and ins[i][2] is EXACT_ERR for i in fl)
        if exact_in:
            # Exact inputs: nothing to propagate, only the op's own rounding.
            return True, {k: 0.0 for k in fo}, {k: 0.0 for k in fo}
        else:
            mat = [_materialize(*ins[i]) for i in fl]
            W = [m[1] for m in mat]
            V = [m[2] for m in mat]
            # Propagated worst case: |J| W.
            prop: list[Any] | None = None
            if prim in MULTILINEAR:
                absx = [jnp.abs(x) for x in prim_in]
                if prim == "sub":
                    prop = jax.jvp(lambda a, b: [a + b], absx, W)[1]
                else:
                    prop = jax.jvp(lambda *xs: f(*xs), absx, W)[1]
                prop = [jnp.abs(p) for p in prop]
            else:
                for j in range(len(fl)):
                    tan = [W[k] if k == j else jnp.zeros_like(W[k]) for k in range(len(fl))]
                    p = [jnp.abs(t) for t in jax.jvp(f, prim_in, tan)[1]]
                    prop = p if prop is None else [a + b for a, b in zip(prop, p)]
            # Propagated variances: J^2 V, element errors taken independent.
            if prim in MULTILINEAR and prim != "cumlogsumexp":
                # Linear in each operand: J^2 V is the op on the squared
                # operands with the variances as tangents (a*b: Va*b^2 + a^2*Vb).
                sq = [x * x for x in prim_in]
                g: Callable[..., list[Any]] = (lambda a, b: [a + b]) if prim == "sub" else f
                samp: list[Any] | None = [jnp.abs(p) for p in jax.jvp(g, sq, V)[1]]
            else:
                # Elementwise and selecting ops: one nonzero per row of J,
                # so (J sqrt(V))^2 is J^2 V (for other ops it adds the
                # correlated terms too).
                samp = None
                for j in range(len(fl)):
                    tan = [jnp.sqrt(V[k]) if k == j else jnp.zeros_like(V[k])
                           for k in range(len(fl))]
                    p = [t * t for t in jax.jvp(f, prim_in, tan)[1]]
                    samp = p if samp is None else [a + b for a, b in zip(samp, p)]
            assert prop is not None and samp is not None   # fl is not empty
            return (False, {k: p.astype(np.float64) for k, p in zip(fo, prop)},
                    {k: p.astype(np.float64) for k, p in zip(fo, samp)})

    def _rounded(self, y: Any, w: Any, s: Any, fmt: tuple[int, int]) -> Triple:
        """A correctly rounded op into a narrow format: the result is the
        exact value rounded, unless the incoming uncertainty (``w`` worst
        case, SPREAD_FACTOR spreads, ``s`` the variance) straddles a
        rounding boundary; there the other rounding is allowed too."""
        import jax.numpy as jnp
        from jax import lax
        e, m = fmt

        def rnd(v: Any) -> Any:
            return lax.reduce_precision(v, exponent_bits=e, mantissa_bits=m)

        yc = rnd(y)
        sigma = jnp.sqrt(s)
        band = SPREAD_FACTOR * sigma
        a_s = jnp.maximum(jnp.abs(rnd(y + band) - yc), jnp.abs(rnd(y - band) - yc))
        a_w = jnp.maximum(jnp.abs(rnd(y + w) - yc), jnp.abs(rnd(y - w) - yc))
        a_s = jnp.where(jnp.isfinite(a_s), a_s, 0.0)
        a_w = jnp.where(jnp.isfinite(a_w), a_w, 0.0)
        return yc, w + a_w, s + a_s * a_s

    def _local(self, prim: str, params: dict[str, Any], xs: list[Any], in_avals: Any,
               out_aval: Any, y: Any, u: float, fl_avals: list[Any],
               f: Callable[..., list[Any]]) -> tuple[Any, Any]:
        """(worst-case, standard deviation) of the op's own rounding."""
        import jax.numpy as jnp
        ay = jnp.abs(y)
        if prim in SUMMING:
            n = _terms(prim, params, in_avals, out_aval)
            s = jnp.abs(f(*[jnp.abs(x) for x in xs])[0])
            # Random walk: n roundings of at most u of partial sums at most
            # sum|terms|, uniform (standard deviation u/sqrt(3)) and independent.
            return _gamma(n, u) * s + u * ay, u * np.sqrt(n / 3) * s + u * ay
        if prim == "convert_element_type" or prim == "reduce_precision":
            if prim == "reduce_precision":
                uu = 2.0 ** -(params["mantissa_bits"] + 1)
            else:
                uu = u if fl_avals and unit_roundoff(fl_avals[0].dtype) < u else 0.0
            return uu * ay, uu * ay
        if prim in EXACT:
            return 0 * ay, 0 * ay
        if prim in TRANSCENDENTAL:
            self.transcendental.add(prim)
            return self.transcendental_ulps * u * ay, u * ay
        if prim == "integer_pow":
            c = abs(params["y"])
            return c * u * ay, c * u * ay
        return u * ay, u * ay

    # -- jaxprs -------------------------------------------------------------
    def jaxpr(self, jaxpr: Any, consts: Any, ins: list[Triple]) -> list[Triple]:
        import jax.numpy as jnp
        env: dict[Any, Triple] = {}

        def read(v: Any) -> Triple:
            if hasattr(v, "val"):  # a Literal
                x = jnp.asarray(v.val)
                if _is_float(x.dtype):
                    x = x.astype(np.float64)
                return (x, EXACT_ERR, EXACT_ERR)
            return env[v]

        for v, c in zip(jaxpr.constvars, consts):
            x = jnp.asarray(c)
            x = x.astype(np.float64) if _is_float(x.dtype) else x
            env[v] = (x, EXACT_ERR, EXACT_ERR)
        for v, t in zip(jaxpr.invars, ins):
            env[v] = t
        for e in jaxpr.eqns:
            outs = self.eqn(e, [read(v) for v in e.invars])
            for v, o in zip(e.outvars, outs):
                env[v] = o
        return [read(v) for v in jaxpr.outvars]

    def _closed(self, closed: Any, ins: list[Triple]) -> list[Triple]:
        return self.jaxpr(closed.jaxpr, closed.consts, ins)

    def _cond(self, eqn: Any, params: dict[str, Any], ins: list[Triple]) -> list[Triple]:
        from jax import lax
        index = ins[0][0]
        branches = params["branches"]
        ops = [_materialize(*x) for x in ins[1:]]
        def branch(b: Any) -> Callable[[list[Triple]], list[Triple]]:
            return lambda ops: [_materialize(*x) for x in self._closed(b, ops)]

        fns = [branch(b) for b in branches]
        return list(lax.switch(index.astype(np.int32), fns, ops))

    def _while(self, eqn: Any, params: dict[str, Any], ins: list[Triple]) -> list[Triple]:
        from jax import lax
        cn, bn = params["cond_nconsts"], params["body_nconsts"]
        ins = [_materialize(*x) for x in ins]
        cc, bc, init = ins[:cn], ins[cn:cn + bn], ins[cn + bn:]

        def cond(state: Iterable[Triple]) -> Any:
            return self._closed(params["cond_jaxpr"], list(cc) + list(state))[0][0]

        def body(state: Iterable[Triple]) -> tuple[Triple, ...]:
            return tuple(_materialize(*x)
                         for x in self._closed(params["body_jaxpr"], list(bc) + list(state)))

        return list(lax.while_loop(cond, body, tuple(init)))

    def _scan(self, eqn: Any, params: dict[str, Any], ins: list[Triple]) -> list[Triple]:
        from jax import lax
        nc, ncarry = params["num_consts"], params["num_carry"]
        ins = [_materialize(*x) for x in ins]
        consts, carry, xs = ins[:nc], ins[nc:nc + ncarry], ins[nc + ncarry:]

        def body(c: tuple[Triple, ...],
                 x: tuple[Triple, ...]) -> tuple[tuple[Triple, ...], tuple[Triple, ...]]:
            out = [_materialize(*o)
                   for o in self._closed(params["jaxpr"], list(consts) + list(c) + list(x))]
            return tuple(out[:ncarry]), tuple(out[ncarry:])

        c, ys = lax.scan(body, tuple(carry), tuple(xs), length=params["length"],
                         reverse=params["reverse"], unroll=1)
        return list(c) + list(ys)


def _subjaxpr(prim: str, params: dict[str, Any]) -> tuple[Any, Any] | None:
    """(jaxpr, consts) of a call-like primitive's body, or None."""
    if prim in ("cond", "while", "scan"):
        return None
    for name in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        j = params.get(name)
        if j is None or callable(j) and not hasattr(j, "eqns") and not hasattr(j, "jaxpr"):
            continue
        if hasattr(j, "consts") and hasattr(j, "jaxpr"):
            return j.jaxpr, j.consts
        if hasattr(j, "eqns"):
            return j, []
    return None


def _widen_params(prim: str, params: Any) -> dict[str, Any]:
    """Params for evaluating the primitive on float64 operands."""
    p = dict(params)
    if prim == "bitcast_convert_type":
        return p   # reinterprets bits: the types stay
    for name in ("preferred_element_type", "new_dtype", "dtype"):
        if name in p and p[name] is not None and _is_float(p[name]):
            p[name] = np.dtype(np.float64)
    if prim == "dot_general" or prim == "conv_general_dilated":
        p["precision"] = None
    return p


_CACHE: dict[tuple[str, str, float], Callable[..., Any]] = {}


def bounds(fn: Callable[..., Any], *args: Any, shadow_on: str = "stablehlo_ref",
           transcendental_ulps: float = TRANSCENDENTAL_ULPS) -> Bounds:
    """The centre, worst-case bound and spread of every output leaf of
    ``fn(*args)`` (see the module docstring). ``args`` are what ``fn``
    takes; integer and bool outputs get zero bounds (they must be equal).
    ``transcendental_ulps``: each transcendental function's own worst-case
    error, in u*|y| (the transcendental-accuracy hypothesis widens it)."""
    import jax

    from ._lowering import unwrap_keys
    fn, args = unwrap_keys(fn, args)
    # Through jit: its tracing cache makes a repeated call on the same
    # function and shapes cheap (make_jaxpr traces every time).
    closed = jax.jit(fn, keep_unused=True).trace(*args).jaxpr
    leaves = jax.tree.leaves(args)
    if len(leaves) != len(closed.jaxpr.invars):
        raise ValueError("the arguments do not match the function's jaxpr")
    with jax.enable_x64(True):
        flat = [np.asarray(x).astype(np.float64) if _is_float(np.asarray(x).dtype)
                else np.asarray(x) for x in leaves]
        device = None
        for platform in (shadow_on, "stablehlo_ref", "cpu"):
            try:
                device = jax.devices(platform)[0]
                break
            except RuntimeError:
                continue
        device = device or jax.devices()[0]
        walk = _jitted_walk(closed, device.platform, transcendental_ulps)
        with jax.default_device(device):
            out = walk(flat)
        out = jax.device_get(out)
    walker = _WALKERS.get(id(walk))
    centre = [np.asarray(o) for o, _, _ in out]
    worst = [np.asarray(w) for _, w, _ in out]
    spread = [np.asarray(s) for _, _, s in out]
    return Bounds(centre, worst, spread, set(walker.unmodelled) if walker else set(),
                  set(walker.transcendental) if walker else set())


_WALKERS: dict[int, _Walker] = {}   # id(jitted walk) -> its walker
# (id(ClosedJaxpr), platform) -> (that jaxpr, its walk): jit's trace cache hands it back
_BY_ID: dict[tuple[int, str, float], tuple[Any, Callable[..., Any]]] = {}


def _jitted_walk(closed: Any, platform: str,
                 transcendental_ulps: float = TRANSCENDENTAL_ULPS) -> Callable[..., Any]:
    """The jitted walk of ``closed``, cached by the jaxpr's text and
    constants: a program compared again is neither traced nor planned
    again."""
    import hashlib

    import jax
    known = _BY_ID.get((id(closed), platform, transcendental_ulps))
    if known is not None and known[0] is closed:
        return known[1]
    h = hashlib.sha256(str(closed.jaxpr).encode())
    for c in closed.consts:
        c = np.asarray(c)
        h.update(f"{c.dtype}{c.shape}".encode())
        h.update(np.ascontiguousarray(c).tobytes())
    key = (h.hexdigest(), platform, transcendental_ulps)
    fn = _CACHE.get(key)
    if fn is not None:
        _BY_ID[(id(closed), platform, transcendental_ulps)] = (closed, fn)
        return fn
    walker = _Walker(transcendental_ulps)

    def run(flat: list[Any]) -> list[Triple]:
        ins: list[Triple] = [(x, EXACT_ERR, EXACT_ERR) for x in flat]
        out = []
        for o, w, v in walker._closed(closed, ins):
            o, w, v = _materialize(o, w, v)
            out.append((o, w, jax.numpy.sqrt(v)))
        return out

    fn = jax.jit(run)
    if len(_CACHE) >= 32:
        _WALKERS.pop(id(_CACHE.pop(next(iter(_CACHE)))), None)
    _CACHE[key] = fn
    _WALKERS[id(fn)] = walker
    if len(_BY_ID) >= 32:
        _BY_ID.pop(next(iter(_BY_ID)))
    _BY_ID[(id(closed), platform, transcendental_ulps)] = (closed, fn)
    return fn


def order_spread(terms: np.ndarray, axis: int, dtype: Any) -> np.ndarray:
    """How far legitimate summation orders of ``terms`` along ``axis`` fall
    from the exact sum, in ``dtype``: the largest error of sequential
    (np.add.accumulate), pairwise (np.sum) and blocked (16 partial sums, as
    vectorized BLAS/XLA loops keep) summation. One small function, so that
    a spec-mode sequential run can replace the numpy orders."""
    t = np.moveaxis(np.asarray(terms), axis, -1).astype(dtype)
    exact = t.astype(np.float64).sum(axis=-1)
    seq = np.add.accumulate(t, axis=-1, dtype=dtype)[..., -1] if t.shape[-1] else \
        np.zeros(t.shape[:-1], dtype)
    pair = np.sum(t, axis=-1, dtype=dtype)
    n = t.shape[-1]
    pad = (-n) % 16
    tt = np.concatenate([t, np.zeros(t.shape[:-1] + (pad,), dtype)], axis=-1)
    lanes = np.add.accumulate(tt.reshape(t.shape[:-1] + (-1, 16)), axis=-2,
                              dtype=dtype)[..., -1, :]
    blocked = np.sum(lanes, axis=-1, dtype=dtype)
    return np.asarray(np.max([np.abs(v.astype(np.float64) - exact)
                              for v in (seq, pair, blocked)], axis=0))


__all__: Sequence[str] = ("Bounds", "bounds", "order_spread", "unit_roundoff",
                          "SPREAD_FACTOR")
