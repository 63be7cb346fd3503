"""Generated while loops (interpreter/stablehlo_interpreter/loopgen.py) give
bit-identical results to the plain plan.

* Every scalar form of loopgen's tables (numpy scalar arithmetic standing in
  for a kernel on 0-d arrays) against its kernel, per element type, over
  special values (signed zeros, infinities, NaNs with payloads, subnormals,
  integer extremes, zero divisors) and random bit patterns.
* Whole modules through the generated loop and through the plain plan:
  hand-written loops over every element type family (overflow, NaN, division
  by zero, out-of-range dynamic_slice / dynamic_update_slice indices, calls,
  nested loops, if/case), and the StableHLO JAX emits for fori_loop, scan
  and while_loop (the JAX sweep's loop programs included).
* What must keep working: in-place updates only of unshared arrays, errors
  naming the failing op, tracing, the switch.
"""

import itertools
import time

import ml_dtypes
import numpy as np
import pytest
from testkit import DONATION_SCAN, count_donations, loop_states, rotate_round

import stablehlo_interpreter as shi
import stablehlo_interpreter.compiler as compiler
from stablehlo_interpreter import chainvm, loopgen, looptile, registry
from stablehlo_interpreter.compiler import Op
from stablehlo_interpreter.registry import KERNELS
from stablehlo_interpreter.types import TensorType

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
                                np.uint16, np.uint32, np.uint64, np.float16, np.float32,
                                np.float64, np.complex64, np.complex128)] + [BF16]
ELEMENT = {np.dtype(np.bool_): "i1", BF16: "bf16", np.dtype(np.float16): "f16",
           np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
           np.dtype(np.complex64): "complex<f32>", np.dtype(np.complex128): "complex<f64>"}
for _b in (8, 16, 32, 64):
    ELEMENT[np.dtype(f"int{_b}")] = f"i{_b}"
    ELEMENT[np.dtype(f"uint{_b}")] = f"ui{_b}"


@pytest.fixture(autouse=True)
def generated_python(monkeypatch):
    """These tests check the generated Python: without the block machine,
    loops of only machine ops are generated too (with it they run as one C
    loop, which tests/test_loopvm.py compares with the generated Python)."""
    monkeypatch.setattr(chainvm, "_chains", None)


def tensor(dtype, shape=()):
    return TensorType(shape, dtype, ELEMENT.get(np.dtype(dtype), str(dtype)))


def kernel(name, in_dtypes, out_dtype, **attrs):
    op = Op(name, "test", attrs, [tensor(d) for d in in_dtypes], [tensor(out_dtype)], [],
            None, None)
    return KERNELS[name](op)


def special_values(dtype, n_random=300, seed=0):
    """0-d arrays: the type's edge values and random bit patterns."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        vals = [False, True]
        return [np.array(v, dtype) for v in vals]
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        vals = [info.min, info.min + 1, -1, 0, 1, 2, 3, 7, info.bits - 1, info.bits,
                info.bits + 1, info.max - 1, info.max]
        vals = [np.array(v).astype(dtype) for v in vals if info.min <= v <= info.max]
        bits = rng.integers(0, 256, size=(n_random, dtype.itemsize), dtype=np.uint8)
        return vals + [np.array(b.view(dtype)[0]) for b in bits]
    if dtype.kind == "c":
        part = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
        reals = special_values(part, n_random=0)
        out = [np.array(complex(a[()], b[()])).astype(dtype)
               for a, b in itertools.product(reals[::3], reals[::4])]
        r = rng.standard_normal((n_random, 2)) * rng.choice([1e-30, 1, 1e30], (n_random, 1))
        return out + [np.array(complex(a, b)).astype(dtype) for a, b in r]
    # Floats (f16, bf16, f32, f64): specials as bit patterns of the type.
    bits = dtype.itemsize * 8
    u = np.dtype(f"uint{bits}")
    exp_bits = {16: 8 if dtype == BF16 else 5, 32: 8, 64: 11}[bits]
    mant = bits - 1 - exp_bits
    sign = 1 << (bits - 1)
    inf = ((1 << exp_bits) - 1) << mant
    pats = [0, sign, 1, sign | 1, (1 << mant) - 1, 1 << mant, inf - 1, inf, sign | inf,
            inf | (1 << (mant - 1)), sign | inf | (1 << (mant - 1)),   # quiet NaNs
            inf | 1, inf | (1 << (mant - 1)) | 5, sign | inf | 3]      # NaNs with payloads
    one = np.array(1.0, dtype)
    vals = [np.array(p).astype(u).view(dtype) for p in pats]
    vals += [one, -one, np.array(0.5).astype(dtype), np.array(3).astype(dtype),
             np.array(-2.75).astype(dtype), np.array(65504.0).astype(dtype)]
    rnd = rng.integers(0, 1 << min(bits, 63), size=n_random, dtype=np.uint64)
    rnd = rnd | (rng.integers(0, 2, size=n_random).astype(np.uint64) << np.uint64(bits - 1))
    vals += [np.array(r).astype(u).view(dtype) for r in rnd]
    return [np.array(v).reshape(()) for v in vals]


def same(got, want):
    """Bit-identical value of the same dtype (and a numpy scalar, not a Python one)."""
    want = np.asarray(want)
    if not isinstance(got, np.generic) or np.asarray(got).dtype != want.dtype:
        return False
    return np.asarray(got).tobytes() == want.tobytes()


def _check_pairs(form, fn, xs, ys, what):
    scalar = eval("lambda a, b: " + form.format("a", "b"), dict(loopgen.HELPERS))  # noqa: S307
    bad = []
    with np.errstate(all="ignore"):
        for a, b in itertools.product(xs, ys):
            want = fn(a, b)
            got = scalar(a[()], b[()])
            if not same(got, want):
                bad.append((a, b, got, want))
    assert not bad, f"{what}: {len(bad)} differences, first {bad[:3]}"


def _pairs(dtype):
    vals = special_values(dtype)
    return vals[:40], vals[:40] + vals[40:]


@pytest.mark.parametrize("name", sorted(loopgen.BINARY) + sorted(loopgen.UNARY))
def test_scalar_forms_equal_kernels(name):
    forms = loopgen.scalar_forms()
    checked = 0
    for dtype in DTYPES:
        form = forms.get((name, dtype))
        if form is None:
            continue
        checked += 1
        if name in loopgen.UNARY:
            fn = kernel(name, [dtype], dtype)
            scalar = eval("lambda a: " + form.format("a"), dict(loopgen.HELPERS))  # noqa: S307
            with np.errstate(all="ignore"):
                for a in special_values(dtype):
                    assert same(scalar(a[()]), fn(a)), (name, dtype, a)
            continue
        fn = kernel(name, [dtype, dtype], dtype)
        xs, ys = _pairs(dtype)
        _check_pairs(form, fn, xs, ys, f"{name} {dtype}")
        _check_pairs(form, fn, ys, xs, f"{name} {dtype} (swapped)")
    assert checked


def test_float_arithmetic_keeps_its_scalar_forms():
    # The NaN-order check keeps (possibly swapped) forms for the float types
    # on this numpy: the scalar loops' common case is fast.
    forms = loopgen.scalar_forms()
    for name in ("stablehlo.add", "stablehlo.multiply", "stablehlo.subtract",
                 "stablehlo.divide"):
        for dtype in (np.float32, np.float64):
            assert (name, np.dtype(dtype)) in forms, name


@pytest.mark.parametrize("direction", sorted(loopgen._CMP))
def test_compare_scalar_forms_equal_kernels(direction):
    # TOTALORDER too: signed zeros and NaNs of either sign and any payload
    # are ordered by their bits.
    checked = set()
    for dtype in DTYPES:
        k = loopgen.FAST_KIND[dtype]
        for ctype in (None, "SIGNED", "UNSIGNED", "FLOAT", "TOTALORDER"):
            form = loopgen.compare_form(direction, ctype, k)
            if form is None:
                continue
            attrs = {"comparison_direction": direction}
            if ctype is not None:
                attrs["compare_type"] = ctype
            fn = kernel("stablehlo.compare", [dtype, dtype], np.bool_, **attrs)
            xs, ys = _pairs(dtype)
            _check_pairs(form, fn, xs, ys, f"compare {direction} {ctype} {dtype}")
            checked.add((k, ctype))
    assert {("f", "TOTALORDER"), ("h", "TOTALORDER"), ("f", "FLOAT"), ("i", "SIGNED")} <= checked


@pytest.mark.parametrize("src", DTYPES, ids=str)
def test_convert_scalar_forms_equal_kernels(src):
    tried = 0
    for dst in DTYPES:
        form = loopgen.convert_form(src, dst)
        if form is None:
            continue
        tried += 1
        fn = kernel("stablehlo.convert", [src], dst)
        scalar = eval("lambda a, T, Z, D, N: " + form.format("a", T="T", Z="Z", D="D", N="N"),  # noqa: S307
                      dict(loopgen.HELPERS))
        neg_zero = dst.type(-0.0 if dst.kind == "f" else 0)
        with np.errstate(all="ignore"):
            for a in special_values(src):
                got = scalar(a[()], dst.type, src.type(0), np.float64, neg_zero)
                assert same(got, fn(a)), (src, dst, a, got, fn(a))
    assert tried >= 1   # at least the identity


def _math_values(dtype):
    """0-d values for the transcendental forms: the special values, a dense
    sweep of moderate values and every scale, and near-ties of sin's f32 rounding."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(1)
    dense = np.concatenate([rng.uniform(-10, 10, 3000), rng.uniform(0.9, 1.1, 1000),
                            np.exp2(rng.uniform(-30, 10, 1000)) * rng.choice([-1, 1], 1000)])
    vals = [a for a in special_values(dtype)] + [np.array(v).astype(dtype) for v in dense]
    if dtype == np.float32:
        # inputs whose float64 sine lies closest to a float32 halfway point
        x = np.arange(np.float32(1), np.float32(1.125), np.float32(2 ** -23), dtype=np.float32)
        lo = (np.sin(x.astype(np.float64)).view(np.uint64) & np.uint64((1 << 29) - 1)).astype(np.int64)
        near = np.argsort(np.abs(lo - (1 << 28)))[:200]
        vals += [np.array(v) for v in x[near]]
    return vals


_SCALAR_MATH = sorted(n for n in registry.KERNELS if registry.scalar_math(n) is not None)


def test_scalar_math_ops_are_the_transcendentals():
    # KernelInfo.scalar_math, given where each kernel is registered: the
    # elementwise transcendentals whose f32/f16 kernels round a float64 value.
    assert len(_SCALAR_MATH) == 21
    assert {"stablehlo.sine", "stablehlo.logistic", "chlo.erf", "chlo.lgamma"} <= set(_SCALAR_MATH)
    for name in _SCALAR_MATH:
        assert registry.has_trait(name, "elementwise") and registry.has_trait(name, "fusible")


@pytest.mark.parametrize("name", _SCALAR_MATH)
def test_math_scalar_forms_equal_kernels(name):
    # The generated code's libm scalar (rounded once, or the kernel near a
    # halfway point) gives the kernel's bits on every value.
    for dtype in loopgen._MATH_TYPES:
        fn = kernel(name, [dtype], dtype)
        scalar = loopgen.rounded_math(registry.scalar_math(name), fn, dtype)
        with np.errstate(all="ignore"):
            bad = [(a, scalar(a[()]), fn(a)) for a in _math_values(dtype)
                   if not same(scalar(a[()]), fn(a))]
        assert not bad, f"{name} {dtype}: {len(bad)} differences, first {bad[:3]}"


def test_math_scalar_form_guard_absorbs_a_less_accurate_libm():
    # A float64 sine 1000 ulps off still gives the kernel's bits: the guard
    # sends the values it could round differently to the kernel.
    import math
    fn = kernel("stablehlo.sine", [np.float32], np.float32)
    calls = []

    def kern(x):
        calls.append(x)
        return fn(x)

    scalar = loopgen.rounded_math(lambda v: math.sin(v) * (1 + 1000 * 2.0 ** -53), kern, np.float32)
    vals = _math_values(np.float32)
    with np.errstate(all="ignore"):
        for a in vals:
            assert same(scalar(a[()]), fn(a)), a
    assert 0 < len(calls) < len(vals) // 2


BITCAST_LOOP = """
func.func @main(%xs: tensor<NxF>) -> (tensor<NxI>, tensor<NxF>) {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %zi = stablehlo.constant dense<0> : tensor<NxI>
  %zf = stablehlo.constant dense<0.0> : tensor<NxF>
  %r:3 = stablehlo.while(%i = %c0, %ys = %zi, %zs = %zf) : tensor<i32>, tensor<NxI>, tensor<NxF>
  cond {
    %n = stablehlo.constant dense<N> : tensor<i32>
    %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    %s = stablehlo.dynamic_slice %xs, %i, sizes = [1] : (tensor<NxF>, tensor<i32>) -> tensor<1xF>
    %x = stablehlo.reshape %s : (tensor<1xF>) -> tensor<F>
    %b = stablehlo.bitcast_convert %x : (tensor<F>) -> tensor<I>
    %k = stablehlo.constant dense<1> : tensor<I>
    %b2 = stablehlo.xor %b, %k : tensor<I>
    %y = stablehlo.bitcast_convert %b2 : (tensor<I>) -> tensor<F>
    %bs = stablehlo.reshape %b : (tensor<I>) -> tensor<1xI>
    %ys2 = stablehlo.dynamic_update_slice %ys, %bs, %i : (tensor<NxI>, tensor<1xI>, tensor<i32>) -> tensor<NxI>
    %ys1 = stablehlo.reshape %y : (tensor<F>) -> tensor<1xF>
    %zs2 = stablehlo.dynamic_update_slice %zs, %ys1, %i : (tensor<NxF>, tensor<1xF>, tensor<i32>) -> tensor<NxF>
    stablehlo.return %i2, %ys2, %zs2 : tensor<i32>, tensor<NxI>, tensor<NxF>
  }
  return %r#1, %r#2 : tensor<NxI>, tensor<NxF>
}
"""


@pytest.mark.parametrize("f, i", [(np.float32, np.uint32), (np.float32, np.int32),
                                  (np.float64, np.int64), (np.float16, np.uint16),
                                  (BF16, np.int16)], ids=str)
def test_bitcast_in_a_loop_keeps_every_bit(f, i):
    # Signaling NaNs and payloads included: the scalar form copies bits.
    f, i = np.dtype(f), np.dtype(i)
    xs = np.array([v[()] for v in special_values(f, n_random=50)], f)
    text = (BITCAST_LOOP.replace("NxF", f"{len(xs)}x{ELEMENT[f]}")
            .replace("NxI", f"{len(xs)}x{ELEMENT[i]}").replace("<N>", f"<{len(xs)}>")
            .replace("<F>", f"<{ELEMENT[f]}>").replace("<1xF>", f"<1x{ELEMENT[f]}>")
            .replace("<I>", f"<{ELEMENT[i]}>").replace("<1xI>", f"<1x{ELEMENT[i]}>"))
    ys, zs = _run_both(text, [xs])
    assert ys.tobytes() == xs.tobytes()
    assert (zs.view(i) ^ ys).tolist() == [1] * len(xs)
    saved = loopgen.GENERATE_AFTER
    try:
        loopgen.GENERATE_AFTER = 0
        program = shi.compile(text)
        program.run(xs)
    finally:
        loopgen.GENERATE_AFTER = saved
    source, = [state.source for state in loop_states(program)]
    assert "_bb" in source, source   # the scalar form ran, not the kernel


SIN_LOOP = """
func.func @main(%x0: tensor<f32>, %h0: tensor<f16>) -> (tensor<f32>, tensor<f16>) {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %r:3 = stablehlo.while(%i = %c0, %x = %x0, %h = %h0) : tensor<i32>, tensor<f32>, tensor<f16>
  cond {
    %n = stablehlo.constant dense<300> : tensor<i32>
    %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    %fi = stablehlo.convert %i : (tensor<i32>) -> tensor<f32>
    %k = stablehlo.constant dense<0.001> : tensor<f32>
    %d = stablehlo.multiply %fi, %k : tensor<f32>
    %a = stablehlo.add %x, %d : tensor<f32>
    %s = stablehlo.sine %a : tensor<f32>
    %e = stablehlo.exponential %s : tensor<f32>
    %t = stablehlo.tanh %e : tensor<f32>
    %l = stablehlo.log %a : tensor<f32>
    %x2 = stablehlo.add %t, %l : tensor<f32>
    %hs = stablehlo.logistic %h : tensor<f16>
    %hl = stablehlo.log_plus_one %hs : tensor<f16>
    %h2 = stablehlo.add %hl, %h : tensor<f16>
    stablehlo.return %i2, %x2, %h2 : tensor<i32>, tensor<f32>, tensor<f16>
  }
  return %r#1, %r#2 : tensor<f32>, tensor<f16>
}
"""


COMPOSITE_LOOP = """
func.func @main(%x0: tensor<f32>) -> tensor<f32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.while(%i = %c0, %x = %x0) : tensor<i32>, tensor<f32>
  cond {
    %n = stablehlo.constant dense<200> : tensor<i32>
    %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    %fi = stablehlo.convert %i : (tensor<i32>) -> tensor<f32>
    %k = stablehlo.constant dense<0.01> : tensor<f32>
    %d = stablehlo.multiply %fi, %k : tensor<f32>
    %a = stablehlo.subtract %x, %d : tensor<f32>
    %e = stablehlo.composite "chlo.erf" %a {decomposition = @erf_decomposition} : (tensor<f32>) -> tensor<f32>
    %g = stablehlo.composite "chlo.lgamma" %a {decomposition = @erf_decomposition} : (tensor<f32>) -> tensor<f32>
    %s = stablehlo.add %e, %g : tensor<f32>
    %x2 = stablehlo.add %s, %x : tensor<f32>
    stablehlo.return %i2, %x2 : tensor<i32>, tensor<f32>
  }
  return %r#1 : tensor<f32>
}
func.func private @erf_decomposition(%x: tensor<f32>) -> tensor<f32> {
  %t = stablehlo.tanh %x : tensor<f32>
  return %t : tensor<f32>
}
"""


@pytest.mark.parametrize("x0", [0.25, -2.0, float("inf")])
def test_composite_transcendentals_in_a_loop_are_bit_identical(x0, monkeypatch):
    # JAX's composites of chlo.erf, lgamma, ... run their direct kernels, in
    # the generated loop as math on Python floats (the decomposition, a
    # tanh here, would give other values).
    built = []
    real = loopgen.rounded_math
    monkeypatch.setattr(loopgen, "rounded_math", lambda *a: built.append(a) or real(*a))
    _run_both(COMPOSITE_LOOP, [np.array(x0, np.float32)])
    assert built


def test_spec_numerics_loops_run_the_kernels(monkeypatch):
    # Spec-mode kernels round other intermediates (logistic's 1 + e in the
    # element type): the generated loop calls them, never the scalar math.
    built = []
    real = loopgen.rounded_math
    monkeypatch.setattr(loopgen, "rounded_math", lambda *a: built.append(a) or real(*a))
    monkeypatch.setenv("STABLEHLO_REF_NUMERICS", "spec")
    args = [np.array(0.5, np.float32), np.array(0.75, np.float16)]
    _run_both(SIN_LOOP, args)
    assert not built
    monkeypatch.delenv("STABLEHLO_REF_NUMERICS")
    _run_both(SIN_LOOP, args)
    assert built


def test_spec_numerics_scalar_forms_and_hoisting_are_bit_identical(monkeypatch):
    # The scalar forms (bitcasts, converts, TOTALORDER compares...) and the
    # invariant ops before the loop give the spec mode's kernels' bits too.
    monkeypatch.setenv("STABLEHLO_REF_NUMERICS", "spec")
    w = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    _run_both(HOIST_LOOP, [w, np.array(0.5, np.float32), np.array(3, np.int32)])
    xs = np.array([v[()] for v in special_values(np.float32, n_random=20)], np.float32)
    text = (BITCAST_LOOP.replace("NxF", f"{len(xs)}xf32").replace("NxI", f"{len(xs)}xui32")
            .replace("<N>", f"<{len(xs)}>").replace("<F>", "<f32>").replace("<1xF>", "<1xf32>")
            .replace("<I>", "<ui32>").replace("<1xI>", "<1xui32>"))
    _run_both(text, [xs])
    for name, fn, args in _jax_loops():
        if name in ("searchsorted", "float_int", "scan_outputs"):
            _run_both(_lower(fn, args), [np.asarray(a) for a in args])


@pytest.mark.parametrize("x0", [0.5, -3.0, 1e30, float("nan")])
def test_transcendental_loop_is_bit_identical(x0):
    # log of negative values (NaN), overflow and NaN carries go to the kernel.
    h0 = np.array(x0 if abs(x0) < 100 or x0 != x0 else 7.0, np.float16)
    _run_both(SIN_LOOP, [np.array(x0, np.float32), h0])


# ---------------------------------------------------------------------------
# Whole modules: the generated loop against the plain plan.


def _run_both(text, args, after=(0, 5)):
    """Results of ``text`` on the plain plan and with loops generated after
    each of ``after`` iterations; assert they are bit-identical."""
    saved = loopgen.ENABLED, loopgen.GENERATE_AFTER, loopgen.STRICT
    try:
        loopgen.ENABLED = False
        want = shi.compile(text).run(*[np.copy(a) for a in args])
        loopgen.ENABLED, loopgen.STRICT = True, True
        got = []
        for n in after:
            loopgen.GENERATE_AFTER = n
            program = shi.compile(text)
            got.append(program.run(*[np.copy(a) for a in args]))
            got.append(program.run(*[np.copy(a) for a in args]))   # compiled from the start
            assert _generated(program), "no loop was generated"
    finally:
        loopgen.ENABLED, loopgen.GENERATE_AFTER, loopgen.STRICT = saved
    for g in got:
        assert len(g) == len(want)
        for i, (a, b) in enumerate(zip(g, want)):
            a, b = np.asarray(a), np.asarray(b)
            assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, b.dtype)
            if a.tobytes() != b.tobytes():
                diff = np.flatnonzero(a.reshape(-1).view(np.uint8) != b.reshape(-1).view(np.uint8))
                raise AssertionError(f"result #{i} differs at byte {diff[:5]}: "
                                     f"{a.reshape(-1)[:8]} vs {b.reshape(-1)[:8]}")
    return want


def _generated(program):
    """Some while op of ``program`` has a compiled loop."""
    return any(state.compiled is not None for state in loop_states(program))


def _zero(e):
    if e == "i1":
        return "false"
    if e.startswith("complex"):
        return "(0.0, 0.0)"
    if e[0] in "fb":
        return "0.0"
    return "0"


class Body:
    """Builds the ops of a loop body in generic MLIR syntax."""

    def __init__(self):
        self.lines = []
        self.n = 0

    def op(self, name, args, in_types, out_type, attrs=""):
        self.n += 1
        r = f"%v{self.n}"
        self.lines.append(f'{r} = "stablehlo.{name}"({", ".join(args)}) {attrs} : '
                          f'({", ".join(in_types)}) -> {out_type}')
        return r

    def const(self, value, t):
        self.n += 1
        r = f"%v{self.n}"
        self.lines.append(f"{r} = stablehlo.constant dense<{value}> : {t}")
        return r

    def cmp(self, direction, a, b, t, ctype=None):
        attrs = f"comparison_direction = #stablehlo<comparison_direction {direction}>"
        if ctype:
            attrs += f", compare_type = #stablehlo<comparison_type {ctype}>"
        return self.op("compare", [a, b], [t, t], "tensor<i1>", "{" + attrs + "}")


N_ITER, N_XS = 40, 16

INT_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "and", "or", "xor",
              "maximum", "minimum", "shift_left", "shift_right_logical",
              "shift_right_arithmetic", "power"]
FLOAT_BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "remainder",
                "power", "atan2"]
COMPLEX_BINARY = ["add", "subtract", "multiply", "divide"]
BOOL_BINARY = ["add", "multiply", "and", "or", "xor", "maximum", "minimum"]
UNARY_BY_KIND = {
    "i": ["negate", "not", "abs", "popcnt", "sign"],
    "u": ["negate", "not", "popcnt"],
    "f": ["negate", "abs", "sqrt", "exponential", "floor", "sign", "round_nearest_even",
          "tanh", "log_plus_one"],
    "c": ["negate", "exponential", "sqrt"],
    "b": ["not"],
}
CONVERT_TO = ["i1", "i8", "ui16", "i32", "ui64", "f16", "bf16", "f32", "f64", "i4"]


def elementwise_loop(e):
    """A loop over every elementwise op of element type ``e``: each result is
    written to row i of a history (dynamic_update_slice), the operands are
    read from xs at clamped, partly out-of-range indices (dynamic_slice), the
    carried value goes through arithmetic that overflows / produces NaNs."""
    dtype = shi.dtypes.from_element_type(e)
    k = loopgen.FAST_KIND.get(dtype) or (
        ("u" if shi.dtypes.is_unsigned(dtype) else "i") if shi.dtypes.is_integer(dtype) else "f")
    t = f"tensor<{e}>"
    b = Body()
    i, x = "%i", "%x"
    # Indices (i * 5) % 23 - 3 and i - 20: below 0 and past the end on some steps.
    i5 = b.op("multiply", [i, b.const(5, "tensor<i32>")], ["tensor<i32>"] * 2, "tensor<i32>")
    r = b.op("remainder", [i5, b.const(23, "tensor<i32>")], ["tensor<i32>"] * 2, "tensor<i32>")
    ia = b.op("subtract", [r, b.const(3, "tensor<i32>")], ["tensor<i32>"] * 2, "tensor<i32>")
    ib = b.op("subtract", [i, b.const(20, "tensor<i32>")], ["tensor<i32>"] * 2, "tensor<i32>")
    vals = []
    for idx in (ia, ib):
        s = b.op("dynamic_slice", ["%xs", idx], [f"tensor<{N_XS}x{e}>", "tensor<i32>"],
                 f"tensor<1x{e}>", "{slice_sizes = array<i64: 1>}")
        vals.append(b.op("reshape", [s], [f"tensor<1x{e}>"], t))
    a, c = vals
    results, preds = [], []
    binary = {"i": INT_BINARY, "u": INT_BINARY, "f": FLOAT_BINARY, "h": FLOAT_BINARY,
              "c": COMPLEX_BINARY, "b": BOOL_BINARY}[k]
    if k == "u":
        binary = [n for n in binary if n != "power"] + ["power"]
    for name in binary:
        results.append(b.op(name, [a, c], [t, t], t))
        results.append(b.op(name, [x, a], [t, t], t))
    for name in UNARY_BY_KIND["f" if k == "h" else k]:
        if name in ("popcnt", "sign") and dtype.itemsize * 8 < 8:
            continue
        results.append(b.op(name, [a], [t], t))
    directions = ["EQ", "NE"] if k == "c" else ["EQ", "NE", "LT", "LE", "GT", "GE"]
    ctypes = {"i": [None, "SIGNED", "UNSIGNED"], "u": [None, "UNSIGNED", "SIGNED"],
              "f": [None, "FLOAT", "TOTALORDER"], "h": [None, "FLOAT", "TOTALORDER"],
              "c": [None, "FLOAT"], "b": [None, "UNSIGNED"]}[k]
    for d in directions:
        for ct in ctypes:
            preds.append(b.cmp(d, a, c, t, ct))
    if k != "c":
        results.append(b.op("clamp", [c, a, x], [t, t, t], t))
        results.append(b.op("clamp", [a, x, a], [t, t, t], t))
    results.append(b.op("select", [preds[2], a, x], ["tensor<i1>", t, t], t))
    for target in CONVERT_TO:
        if k == "c" and target == "i4":
            continue
        tt = f"tensor<{target}>"
        there = b.op("convert", [a], [t], tt)
        results.append(b.op("convert", [there], [tt], t))
        if target == "i1":
            preds.append(there)
    if k in "fh":
        preds.append(b.op("is_finite", [a], [t], "tensor<i1>"))
    # The carried value: x * a + c (wraps, overflows, NaNs), for bool x ^ a.
    if k == "b":
        x2 = b.op("xor", [x, a], [t, t], t)
    else:
        x2 = b.op("add", [b.op("multiply", [x, a], [t, t], t), c], [t, t], t)
    zero = b.const(0, "tensor<i32>")
    one = b.const(1, "tensor<i32>")
    hist = []
    for name, vs, et in (("%h", results, e), ("%p", preds, "i1")):
        ht = f"tensor<{N_ITER}x{len(vs)}x{et}>"
        cur = name
        for j, v in enumerate(vs):
            u = b.op("broadcast_in_dim", [v], [f"tensor<{et}>"], f"tensor<1x1x{et}>",
                     "{broadcast_dimensions = array<i64>}")
            cur = b.op("dynamic_update_slice", [cur, u, i, b.const(j, "tensor<i32>")],
                       [ht, f"tensor<1x1x{et}>", "tensor<i32>", "tensor<i32>"], ht)
        hist.append((cur, ht, len(vs), et))
    i2 = b.op("add", [i, one], ["tensor<i32>"] * 2, "tensor<i32>")
    del zero
    (h2, ht, nh, _), (p2, pt, npred, _) = hist
    body = "\n      ".join(b.lines)
    return f"""
func.func @main(%x0: {t}, %xs: tensor<{N_XS}x{e}>) -> ({t}, {ht}, {pt}) {{
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %h0 = stablehlo.constant dense<{_zero(e)}> : {ht}
  %p0 = stablehlo.constant dense<false> : {pt}
  %r:4 = stablehlo.while(%i = %c0, %x = %x0, %h = %h0, %p = %p0) : tensor<i32>, {t}, {ht}, {pt}
  cond {{
    %n = stablehlo.constant dense<{N_ITER}> : tensor<i32>
    %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  }} do {{
      {body}
    stablehlo.return {i2}, {x2}, {h2}, {p2} : tensor<i32>, {t}, {ht}, {pt}
  }}
  return %r#1, %r#2, %r#3 : {t}, {ht}, {pt}
}}
"""


ELEMENT_TYPES = ["i1", "i4", "ui4", "i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64",
                 "f16", "bf16", "f32", "f64", "complex<f32>", "complex<f64>", "f8E4M3FN"]


@pytest.mark.parametrize("e", ELEMENT_TYPES)
def test_elementwise_loop_is_bit_identical(e):
    dtype = shi.dtypes.from_element_type(e)
    if dtype in loopgen.FAST_KIND:
        xs = np.array([v[()] for v in special_values(dtype)]).astype(dtype)
    elif dtype.kind == "V" or "int" in dtype.name:   # ml_dtypes ints: every value
        lo, hi = (-8, 8) if e == "i4" else (0, 16)
        xs = np.arange(lo, hi).astype(dtype)
    else:                                            # f8: floats rounded to it
        xs = np.array([v[()] for v in special_values(np.float32)]).astype(dtype)
    xs = np.resize(np.roll(xs, -3), N_XS)
    _run_both(elementwise_loop(e), [np.asarray(xs[5]), xs])


CONTROL = """
func.func @main(%x0: tensor<f32>, %n: tensor<i32>, %k: tensor<i32>) -> (tensor<f32>, tensor<i32>, tensor<8xf32>) {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %z = stablehlo.constant dense<0.0> : tensor<8xf32>
  %r:4 = stablehlo.while(%i = %c0, %x = %x0, %acc = %c0, %ys = %z) : tensor<i32>, tensor<f32>, tensor<i32>, tensor<8xf32>
  cond {
    %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    // an inner fori_loop of i % 4 steps, capturing %x and %k
    %four = stablehlo.constant dense<4> : tensor<i32>
    %m = stablehlo.remainder %i, %four : tensor<i32>
    %in:2 = stablehlo.while(%j = %c0, %s = %x) : tensor<i32>, tensor<f32>
    cond {
      %lt2 = stablehlo.compare LT, %j, %m, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt2 : tensor<i1>
    } do {
      %j2 = stablehlo.add %j, %one : tensor<i32>
      %kf = stablehlo.convert %k : (tensor<i32>) -> tensor<f32>
      %s2 = func.call @step(%s, %kf) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      stablehlo.return %j2, %s2 : tensor<i32>, tensor<f32>
    }
    // if on the parity of i, case on i - 3 (out of range below 0 and above 2)
    %two = stablehlo.constant dense<2> : tensor<i32>
    %par = stablehlo.remainder %i, %two : tensor<i32>
    %even = stablehlo.compare EQ, %par, %c0, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %y = "stablehlo.if"(%even) ({
      %h = stablehlo.constant dense<0.5> : tensor<f32>
      %a = stablehlo.multiply %in#1, %h : tensor<f32>
      stablehlo.return %a : tensor<f32>
    }, {
      %a = stablehlo.negate %in#1 : tensor<f32>
      stablehlo.return %a : tensor<f32>
    }) : (tensor<i1>) -> tensor<f32>
    %three = stablehlo.constant dense<3> : tensor<i32>
    %sel = stablehlo.subtract %i, %three : tensor<i32>
    %acc2 = "stablehlo.case"(%sel) ({
      %a = stablehlo.add %acc, %one : tensor<i32>
      stablehlo.return %a : tensor<i32>
    }, {
      %a = stablehlo.multiply %acc, %two : tensor<i32>
      stablehlo.return %a : tensor<i32>
    }, {
      %f = func.call @fact(%m) : (tensor<i32>) -> tensor<i32>
      %a = stablehlo.add %acc, %f : tensor<i32>
      stablehlo.return %a : tensor<i32>
    }) : (tensor<i32>) -> tensor<i32>
    %u = stablehlo.reshape %y : (tensor<f32>) -> tensor<1xf32>
    %idx = stablehlo.subtract %i, %k : tensor<i32>
    %ys2 = stablehlo.dynamic_update_slice %ys, %u, %idx : (tensor<8xf32>, tensor<1xf32>, tensor<i32>) -> tensor<8xf32>
    stablehlo.return %i2, %y, %acc2, %ys2 : tensor<i32>, tensor<f32>, tensor<i32>, tensor<8xf32>
  }
  return %r#1, %r#2, %r#3 : tensor<f32>, tensor<i32>, tensor<8xf32>
}
func.func private @step(%s: tensor<f32>, %k: tensor<f32>) -> tensor<f32> {
  %c = stablehlo.constant dense<1.5> : tensor<f32>
  %a = stablehlo.multiply %s, %c : tensor<f32>
  %b = stablehlo.subtract %a, %k : tensor<f32>
  %d = stablehlo.divide %b, %k : tensor<f32>
  return %d : tensor<f32>
}
// recursive: cannot be inlined, runs through the plan
func.func private @fact(%n: tensor<i32>) -> tensor<i32> {
  %one = stablehlo.constant dense<1> : tensor<i32>
  %le = stablehlo.compare LE, %n, %one, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
  %r = "stablehlo.if"(%le) ({
    stablehlo.return %one : tensor<i32>
  }, {
    %m = stablehlo.subtract %n, %one : tensor<i32>
    %f = func.call @fact(%m) : (tensor<i32>) -> tensor<i32>
    %p = stablehlo.multiply %n, %f : tensor<i32>
    stablehlo.return %p : tensor<i32>
  }) : (tensor<i1>) -> tensor<i32>
  return %r : tensor<i32>
}
"""


@pytest.mark.parametrize("k", [0, 3, 100])   # k = 0: division by zero (inf, NaN)
def test_nested_loops_branches_and_calls_are_bit_identical(k):
    _run_both(CONTROL, [np.float32(1.25), np.int32(37), np.int32(k)])


ARRAYS = """
func.func @main(%xs: tensor<10x4xf32>, %w: tensor<4x4xf32>, %h0: tensor<4xf32>) -> (tensor<4xf32>, tensor<10x4xf32>, tensor<10xf32>) {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %zy = stablehlo.constant dense<0.0> : tensor<10x4xf32>
  %zs = stablehlo.constant dense<0.0> : tensor<10xf32>
  %r:4 = stablehlo.while(%i = %c0, %h = %h0, %ys = %zy, %ss = %zs) : tensor<i32>, tensor<4xf32>, tensor<10x4xf32>, tensor<10xf32>
  cond {
    %n = stablehlo.constant dense<13> : tensor<i32>
    %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    // row i - 2 of xs: clamped to 0 for the first steps, to 9 past the end
    %two = stablehlo.constant dense<2> : tensor<i32>
    %ri = stablehlo.subtract %i, %two : tensor<i32>
    %row = stablehlo.dynamic_slice %xs, %ri, %c0, sizes = [1, 4] : (tensor<10x4xf32>, tensor<i32>, tensor<i32>) -> tensor<1x4xf32>
    %x = stablehlo.reshape %row : (tensor<1x4xf32>) -> tensor<4xf32>
    %hw = stablehlo.dot_general %h, %w, contracting_dims = [0] x [0] : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
    %a = stablehlo.add %hw, %x : tensor<4xf32>
    %h2 = stablehlo.tanh %a : tensor<4xf32>
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %s = stablehlo.reduce(%h2 init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
    %u = stablehlo.reshape %h2 : (tensor<4xf32>) -> tensor<1x4xf32>
    %ys2 = stablehlo.dynamic_update_slice %ys, %u, %ri, %c0 : (tensor<10x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<10x4xf32>
    %su = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<1xf32>
    %ss2 = stablehlo.dynamic_update_slice %ss, %su, %i : (tensor<10xf32>, tensor<1xf32>, tensor<i32>) -> tensor<10xf32>
    // a one-element read: dynamic_slice of size 1 then reshape to 0-d
    %e = stablehlo.dynamic_slice %xs, %i, %i, sizes = [1, 1] : (tensor<10x4xf32>, tensor<i32>, tensor<i32>) -> tensor<1x1xf32>
    %es = stablehlo.reshape %e : (tensor<1x1xf32>) -> tensor<f32>
    %eb = stablehlo.broadcast_in_dim %es, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %h3 = stablehlo.add %h2, %eb : tensor<4xf32>
    stablehlo.return %i2, %h3, %ys2, %ss2 : tensor<i32>, tensor<4xf32>, tensor<10x4xf32>, tensor<10xf32>
  }
  return %r#1, %r#2, %r#3 : tensor<4xf32>, tensor<10x4xf32>, tensor<10xf32>
}
"""


HOIST_LOOP = """
func.func @main(%w0: tensor<4xf32>, %s0: tensor<f32>, %n: tensor<i32>)
    -> (tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %z = stablehlo.constant dense<0.0> : tensor<3x4xf32>
  %r:6 = stablehlo.while(%i = %c0, %w = %w0, %acc = %z, %last = %w0, %s = %s0, %q = %w0)
      : tensor<i32>, tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>, tensor<f32>, tensor<4xf32>
  cond {
    %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    %b = stablehlo.broadcast_in_dim %w, dims = [1] : (tensor<4xf32>) -> tensor<1x4xf32>
    %k = stablehlo.constant dense<2.0> : tensor<f32>
    %sk = stablehlo.multiply %s, %k : tensor<f32>
    %bs = stablehlo.broadcast_in_dim %sk, dims = [] : (tensor<f32>) -> tensor<1x4xf32>
    %row = stablehlo.add %b, %bs : tensor<1x4xf32>
    %ic = stablehlo.clamp %c0, %i, %one : tensor<i32>
    %acc2 = stablehlo.dynamic_update_slice %acc, %row, %i, %c0 : (tensor<3x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<3x4xf32>
    %same = stablehlo.broadcast_in_dim %w, dims = [0] : (tensor<4xf32>) -> tensor<4xf32>
    %f1 = stablehlo.constant dense<-1.0> : tensor<1xf32>
    %last2 = stablehlo.dynamic_update_slice %same, %f1, %ic : (tensor<4xf32>, tensor<1xf32>, tensor<i32>) -> tensor<4xf32>
    %p = stablehlo.compare GT, %s, %k, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %q2 = "stablehlo.if"(%p) ({
      %e = stablehlo.exponential %w : tensor<4xf32>
      stablehlo.return %e : tensor<4xf32>
    }, {
      stablehlo.return %q : tensor<4xf32>
    }) : (tensor<i1>) -> tensor<4xf32>
    stablehlo.return %i2, %w, %acc2, %last2, %s, %q2 : tensor<i32>, tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>, tensor<f32>, tensor<4xf32>
  }
  return %r#1, %r#2, %r#3, %r#5 : tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>, tensor<4xf32>
}
"""


@pytest.mark.parametrize("n, s", [(3, 0.5), (3, 3.0), (0, 3.0)])
def test_invariant_ops_run_once_before_the_loop(n, s, monkeypatch):
    # Ops of only invariant values (carries the body passes through, captures,
    # constants) run in a preheader; an invariant op inside an if branch stays
    # there; a hoisted array is never updated in place (the body updates a
    # copy of `w` each step and `w` comes out unchanged); no iterations:
    # the same results.
    w = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    args = [w, np.array(s, np.float32), np.array(n, np.int32)]
    wout, acc, last, q = _run_both(HOIST_LOOP, args, after=(0, 2) if n else (0,))
    assert wout.tobytes() == w.tobytes()
    if n:
        assert acc[:n].tolist() == [(w + np.float32(2 * s)).tolist()] * n
        assert last.tolist() == [w[0], -1.0, w[2], w[3]]
    monkeypatch.setattr(loopgen, "GENERATE_AFTER", 0)
    program = shi.compile(HOIST_LOOP)
    program.run(*args)
    state, = loop_states(program)
    lines = state.source.splitlines()[1:]
    head = next(i for i, line in enumerate(lines) if line.strip() == "while True:")
    ops = state.compiled.line_ops
    before = {ops[i].name for i in range(head)}
    after = {ops[i].name for i in range(head, len(lines))}
    assert {"stablehlo.broadcast_in_dim", "stablehlo.multiply", "stablehlo.add"} <= before
    assert "stablehlo.exponential" in after and "stablehlo.exponential" not in before
    assert "stablehlo.dynamic_update_slice" in after


def test_array_loop_is_bit_identical():
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((10, 4)).astype(np.float32)
    xs[3, 1] = np.nan
    _run_both(ARRAYS, [xs, rng.standard_normal((4, 4)).astype(np.float32) / 2,
                       rng.standard_normal(4).astype(np.float32)])


def test_collectives_in_a_generated_loop():
    # Each process's loop all_reduces its running value every iteration
    # (a psum inside a scan): the generated loops rendezvous like the plan's.
    from stablehlo_interpreter.parallel import run_parallel
    text = """
func.func @main(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<i32>) {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.while(%i = %c0, %v = %x) : tensor<i32>, tensor<2xf32>
  cond {
    %n = stablehlo.constant dense<9> : tensor<i32>
    %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %s = "stablehlo.all_reduce"(%v) ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %t = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %t : tensor<f32>
    }) {replica_groups = dense<[[0, 1, 2]]> : tensor<1x3xi64>} : (tensor<2xf32>) -> tensor<2xf32>
    %c = stablehlo.constant dense<0.25> : tensor<2xf32>
    %v2 = stablehlo.multiply %s, %c : tensor<2xf32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %i2, %v2 : tensor<i32>, tensor<2xf32>
  }
  return %r#1, %r#0 : tensor<2xf32>, tensor<i32>
}
"""
    args = [[np.array([k, -k / 3], np.float32)] for k in range(3)]
    saved = loopgen.ENABLED, loopgen.GENERATE_AFTER, loopgen.STRICT
    try:
        loopgen.ENABLED = False
        want = run_parallel(shi.compile(text), args, 3, 1)
        loopgen.ENABLED, loopgen.GENERATE_AFTER, loopgen.STRICT = True, 2, True
        program = shi.compile(text)
        got = run_parallel(program, args, 3, 1)
        assert _generated(program)
    finally:
        loopgen.ENABLED, loopgen.GENERATE_AFTER, loopgen.STRICT = saved
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


# ---------------------------------------------------------------------------
# The StableHLO JAX emits.


def _jax_loops():
    import jax
    import jax.numpy as jnp
    from jax import lax

    def fori_scalar(x):
        return lax.fori_loop(0, 300, lambda i, c: c * 0.999 + 1.0, x)

    def fori_dynamic(n, x):
        return lax.fori_loop(0, n, lambda i, c: c * 0.5 + i, x)

    def scan_outputs(c, xs):
        return lax.scan(lambda c, v: (c * 0.5 + v, (c, v > c)), c, xs)

    def scan_reverse_unrolled(c, xs):
        return lax.scan(lambda c, v: (jnp.sin(c) + v, c * v), c, xs, reverse=True, unroll=3)

    def while_tuple(x):
        def body(s):
            i, a, b, n = s
            return i + 1, a * 1.5 - b, jnp.where(a > b, b + 1.0, b * 0.5), n ^ (n << 3)
        return lax.while_loop(lambda s: s[0] < 50, body, (0, x, x / 2, jnp.uint32(12345)))

    def int_overflow(x):
        def body(i, s):
            a, b, c = s
            return a * 3 + jnp.int8(i) - 1, b // (jnp.int8(i) - 3) + a, (c - a) % 5 + b
        return lax.fori_loop(0, 70, body, (x, x, x))

    def negative_index(xs):
        # xs[i - 8] with i - 8 < 0 for the first steps: JAX's lt/add/select
        # wrap-around, then the dynamic_slice clamp.
        return lax.fori_loop(0, 40, lambda i, c: c + xs[i - 8] * xs[-(i % 5)], 0.0)

    def at_set(xs):
        return lax.fori_loop(0, 40, lambda i, a: a.at[(i * 7) % 13].add(a[i % 13] * 0.5), xs)

    def nested(xs):
        def outer(c, v):
            inner = lax.fori_loop(0, 3, lambda j, s: s * v + j, c)
            return inner, lax.cond(inner > 0, lambda: inner, lambda: -inner)
        return lax.scan(outer, 0.5, xs)

    def switch(x):
        branches = [lambda v: v + 1.0, lambda v: v * 2.0, lambda v: v - 3.0]
        return lax.fori_loop(0, 30, lambda i, c: lax.switch(i % 4, branches, c), x)

    def clip_max(x):
        return lax.fori_loop(0, 40, lambda i, c: jnp.clip(jnp.maximum(c * -1.7, -c), -5.0, 7.0), x)

    def rng(key):
        def body(i, s):
            k, acc = s
            k, sub = jax.random.split(k)
            return k, acc + jax.random.uniform(sub)
        return lax.fori_loop(0, 20, body, (key, 0.0))

    def mixed_types(x):
        def body(i, s):
            h, b, c, z = s
            return (h * jnp.float16(1.01) + jnp.float16(0.5), (b * jnp.bfloat16(0.75)) - jnp.bfloat16(1),
                    c ^ (i % 3 == 0), z * jnp.complex64(0.9 + 0.1j) + 1)
        return lax.fori_loop(0, 60, body, (x.astype(jnp.float16), x.astype(jnp.bfloat16), False,
                                           x.astype(jnp.complex64)))

    def lax_map(xs):
        return lax.map(lambda r: jnp.sum(r ** 2) - jnp.max(r), xs)

    def searchsorted(xs):
        # An inner binary search per step: TOTALORDER compares (NaN, -0),
        # unsigned floor division.
        s = jnp.sort(xs)
        return lax.fori_loop(0, 40, lambda i, c: c + jnp.searchsorted(s, s[i % 30] * 0.5 - 0.0), 0)

    def float_int(x):
        def body(i, st):
            a, n, u, r = st
            a2 = a * -1.7 + i.astype(jnp.float32) * 0.01
            # int32 + uint32 promotes to int64 under jax_enable_x64 (set by
            # other test modules at collection): the carry stays int32.
            n2 = (n + (a2 * 1e8).astype(jnp.int8).astype(jnp.int32)
                  + (a2 * 1e12).astype(jnp.uint32)).astype(jnp.int32)
            u2 = lax.bitcast_convert_type(a2, jnp.uint32) ^ (u >> 3)
            r2 = jnp.floor(a2) + jnp.ceil(-a2) + jnp.round(a2) + jnp.sqrt(a2) + r
            return a2, n2, u2, r2
        return lax.fori_loop(0, 60, body, (x, jnp.int32(0), jnp.uint32(7), jnp.float32(0)))

    f32 = np.float32
    rng_ = np.random.default_rng(0)
    xs = rng_.standard_normal(30).astype(f32)
    xs[4] = np.nan
    return [
        ("fori_scalar", fori_scalar, (f32(1.0),)),
        ("fori_dynamic", fori_dynamic, (np.int32(45), f32(2.0))),
        ("scan_outputs", scan_outputs, (f32(0.0), xs)),
        ("scan_reverse_unrolled", scan_reverse_unrolled, (f32(0.3), xs)),
        ("while_tuple", while_tuple, (f32(0.7),)),
        ("int_overflow", int_overflow, (np.int8(100),)),
        ("negative_index", negative_index, (xs,)),
        ("at_set", at_set, (xs[:13].copy(),)),
        ("nested", nested, (xs[:12],)),
        ("switch", switch, (f32(1.0),)),
        ("clip_max", clip_max, (f32(0.3),)),
        ("rng", rng, (np.array([0, 42], np.uint32),)),
        ("mixed_types", mixed_types, (f32(0.5),)),
        ("lax_map", lax_map, (rng_.standard_normal((25, 4)).astype(f32),)),
        ("searchsorted", searchsorted, (np.concatenate([xs, [f32(-0.0), f32(0.0)]]),)),
        ("float_int", float_int, (f32(0.3),)),
    ]


def _lower(fn, args):
    import jax
    return jax.jit(fn).trace(*args).lower(lowering_platforms=("stablehlo_ref",)).as_text()


@pytest.mark.parametrize("name", [n for n, _, _ in _jax_loops()])
def test_jax_emitted_loops_are_bit_identical(name):
    fn, args = next((f, a) for n, f, a in _jax_loops() if n == name)
    text = _lower(fn, args)
    assert "stablehlo.while" in text
    _run_both(text, [np.asarray(a) for a in args])


# ---------------------------------------------------------------------------
# What must keep working.


@pytest.fixture
def generate_now(monkeypatch):
    """Loops compiled at their first iteration; generation failures raise."""
    monkeypatch.setattr(loopgen, "ENABLED", True)
    monkeypatch.setattr(loopgen, "GENERATE_AFTER", 0)
    monkeypatch.setattr(loopgen, "STRICT", True)


FAILING = """
func.func @main(%v: tensor<8xf32>) -> tensor<f32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r:2 = stablehlo.while(%i = %c0, %s = %z) : tensor<i32>, tensor<f32>
  cond {
    %n = stablehlo.constant dense<100> : tensor<i32>
    %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    %x = func.call @take(%v, %i) : (tensor<8xf32>, tensor<i32>) -> tensor<1xf32>
    %xs = stablehlo.reshape %x : (tensor<1xf32>) -> tensor<f32>
    %s2 = stablehlo.add %s, %xs : tensor<f32>
    stablehlo.return %i2, %s2 : tensor<i32>, tensor<f32>
  }
  return %r#1 : tensor<f32>
}
func.func private @take(%v: tensor<8xf32>, %i: tensor<i32>) -> tensor<1xf32> {
  // real_dynamic_slice does not clamp: past the end (i = 8) it fails
  %lo = stablehlo.reshape %i : (tensor<i32>) -> tensor<1xi32>
  %one = stablehlo.constant dense<1> : tensor<1xi32>
  %hi = stablehlo.add %lo, %one : tensor<1xi32>
  %x = stablehlo.real_dynamic_slice %v, %lo, %hi, %one : (tensor<8xf32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<1xf32>
  return %x : tensor<1xf32>
}
"""


def _error(text, *args):
    with pytest.raises(shi.ExecutionError) as info:
        shi.compile(text).run(*args)
    return info.value


def test_a_failing_op_in_a_generated_loop_is_named_as_in_the_plan(monkeypatch):
    monkeypatch.setattr(loopgen, "ENABLED", False)
    want = _error(FAILING, np.arange(8, dtype=np.float32))
    monkeypatch.setattr(loopgen, "ENABLED", True)
    monkeypatch.setattr(loopgen, "GENERATE_AFTER", 3)   # fails in the generated code
    got = _error(FAILING, np.arange(8, dtype=np.float32))
    assert str(got) == str(want)
    assert got.op_name == "stablehlo.real_dynamic_slice" and got.location == want.location
    assert "real_dynamic_slice: bad bounds" in str(got)


def test_runaway_recursion_in_a_generated_loop_is_an_error(generate_now):
    text = CONTROL.replace("%m = stablehlo.subtract %n, %one", "%m = stablehlo.add %n, %one")
    err = _error(text, np.float32(1.0), np.int32(10), np.int32(1))
    assert "recursion too deep" in str(err)


def test_a_deadline_stops_a_generated_loop_in_an_op(generate_now):
    from stablehlo_pjrt import interrupt
    endless = FAILING.replace("dense<100>", "dense<2147483647>").replace(
        "%x = func.call @take(%v, %i)", "%c3 = stablehlo.constant dense<3> : tensor<i32>\n"
        "    %x = func.call @take(%v, %c3)")
    program = shi.compile(endless)
    # 1 s: the loop is planned and generated inside the run, before the
    # deadline, even on a loaded machine (at 0.3 s it once landed in the
    # planning; test_a_deadline_landing_in_a_loops_planning_... covers that).
    with pytest.raises(shi.ExecutionError) as info:
        interrupt.run_limited(lambda: program.run(np.arange(8, dtype=np.float32)), 1.0)
    e = info.value
    assert isinstance(e.__cause__, interrupt.ExecutionTimeout)
    assert e.op_name.startswith("stablehlo.") and "ExecutionTimeout" in str(e)
    assert _generated(program)


def _slow(monkeypatch, module, name):
    """``module.name`` made to take 0.4 s first: a deadline of 0.1 s lands in it."""
    real = getattr(module, name)

    def slow(*args, **kwargs):
        time.sleep(0.4)
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, slow)


@pytest.mark.parametrize("where", ["looptile.plan", "loopgen.build"])
def test_a_deadline_landing_in_a_loops_planning_still_stops_the_run(monkeypatch, where):
    # Planning a tiled loop and generating one run inside the first run, in
    # code that falls back to the plain loop on any Exception: a deadline
    # landing there must stop the run, not be taken for a form they lack.
    # (2000 iterations: swallowed, the run would end with a result.)
    from stablehlo_pjrt import interrupt
    monkeypatch.setattr(loopgen, "ENABLED", True)
    monkeypatch.setattr(loopgen, "GENERATE_AFTER", 0)
    monkeypatch.setattr(loopgen, "STRICT", False)
    module, name = where.split(".")
    _slow(monkeypatch, {"looptile": looptile, "loopgen": loopgen}[module], name)
    text = FAILING.replace("dense<100>", "dense<2000>").replace(
        "%x = func.call @take(%v, %i)", "%c3 = stablehlo.constant dense<3> : tensor<i32>\n"
        "    %x = func.call @take(%v, %c3)")
    program = shi.compile(text)
    with pytest.raises(shi.ExecutionError) as info:
        interrupt.run_limited(lambda: program.run(np.arange(8, dtype=np.float32)), 0.1)
    assert isinstance(info.value.__cause__, interrupt.ExecutionTimeout)
    assert info.value.op_name == "stablehlo.while"


@pytest.mark.parametrize("shared", [True, False])
def test_generated_loop_updates_in_place_only_when_unshared(generate_now, monkeypatch, shared):
    # Returned twice, the updated array is shared by both loop values: it
    # must be copied every iteration. Returned once, the loop owns it and
    # updates it in place from the second iteration on. The generated code
    # holds the array it checked last (one reference more): the same array
    # again is only counted (3: the local, the held one, getrefcount's).
    seen = count_donations(monkeypatch)
    text = DONATION_SCAN.replace("RESULT", "%ys2" if shared else "%ws")
    xs = np.arange(12, dtype=np.float32).reshape(6, 2)
    keep = xs.copy()
    program = shi.compile(text)
    ys, xs_out = program.run(xs)
    assert _generated(program)
    np.testing.assert_array_equal(ys, keep)
    np.testing.assert_array_equal(xs, keep)   # the argument is untouched
    np.testing.assert_array_equal(xs_out, keep)
    # The first iteration copies the (read-only) constant without asking;
    # shared, each later one finds a fourth reference (the other loop
    # value), in both checks, and copies.
    assert seen == [4, 4] * 5 if shared else seen == [3] * 5


def test_tracing_and_validation_use_the_plan(generate_now, monkeypatch):
    from stablehlo_interpreter.trace import Recorder
    program = shi.compile(CONTROL)
    rec = Recorder()
    want = program.run(np.float32(1.25), np.int32(9), np.int32(3), tracer=rec)
    assert not _generated(program)
    assert sum(1 for e in rec.events if e[0].name == "stablehlo.dynamic_update_slice") == 9
    monkeypatch.setattr(compiler, "_DEBUG_VALIDATE", True)
    assert not _generated(program) and program.run(np.float32(1.25), np.int32(9), np.int32(3))
    monkeypatch.setattr(compiler, "_DEBUG_VALIDATE", False)
    got = program.run(np.float32(1.25), np.int32(9), np.int32(3))
    assert _generated(program)
    for a, b in zip(got, want):
        assert a.tobytes() == b.tobytes()


def test_switch_off_keeps_the_plan(monkeypatch):
    monkeypatch.setattr(loopgen, "ENABLED", False)
    monkeypatch.setattr(loopgen, "GENERATE_AFTER", 0)
    program = shi.compile(CONTROL)
    program.run(np.float32(1.25), np.int32(200), np.int32(3))
    assert not _generated(program)


def test_small_loops_are_not_compiled(monkeypatch):
    monkeypatch.setattr(loopgen, "ENABLED", True)
    monkeypatch.setattr(loopgen, "GENERATE_AFTER", 64)
    program = shi.compile(CONTROL)
    # a loop entered once for a few iterations (its entry counts 32, each
    # iteration 1: 48 < 64) is not compiled
    program.run(np.float32(1.25), np.int32(loopgen.GENERATE_AFTER // 4), np.int32(3))
    assert not _generated(program)
    program.run(np.float32(1.25), np.int32(loopgen.GENERATE_AFTER), np.int32(3))
    assert _generated(program)   # the counts of both runs add up


def test_each_entry_counts_toward_generation(monkeypatch):
    # A short loop entered in every run: each entry counts as half of
    # GENERATE_AFTER (32 of 64), so 2 iterations per run add up to 34 and the
    # loop is generated when its 2nd run enters it (34 + 32 >= 64).
    monkeypatch.setattr(loopgen, "ENABLED", True)
    monkeypatch.setattr(loopgen, "GENERATE_AFTER", 64)
    program = shi.compile(CONTROL)
    program.run(np.float32(1.25), np.int32(2), np.int32(3))
    assert not _generated(program)
    program.run(np.float32(1.25), np.int32(2), np.int32(3))
    assert _generated(program)


def test_values_of_other_shapes_run_on_the_plan(generate_now):
    program = shi.compile(ARRAYS)
    rng = np.random.default_rng(2)
    args = [rng.standard_normal((10, 4)).astype(np.float32),
            rng.standard_normal((4, 4)).astype(np.float32), np.zeros(4, np.float32)]
    program.run(*args)
    state = next(loop_states(program))
    vals = [np.int32(0), np.zeros(5, np.float32), np.zeros((10, 4), np.float32),
            np.zeros(10, np.float32)]
    vals = [np.asarray(v) for v in vals]
    assert state.compiled.run(None, (), tuple(args[:2]), vals) is None
    assert len(vals) == 4   # nothing consumed


def test_loops_nested_deeper_than_python_allows_still_run(generate_now):
    # 25 nested while loops of one iteration each (CPython compiles at most
    # 20 nested blocks): the innermost ones run through their own kernel,
    # generated separately.
    depth = 25
    lines = ["func.func @main(%s0: tensor<i32>) -> tensor<i32> {",
             "  %c0 = stablehlo.constant dense<0> : tensor<i32>",
             "  %c1 = stablehlo.constant dense<1> : tensor<i32>",
             "  %c2 = stablehlo.constant dense<1> : tensor<i32>"]

    def loop(level):
        if level == depth:
            return [f"%t{level} = stablehlo.add %s{level}, %c1 : tensor<i32>"], f"%t{level}"
        inner, res = loop(level + 1)
        return ([f"%r{level}:2 = stablehlo.while(%j{level} = %c0, %s{level + 1} = %s{level})"
                 " : tensor<i32>, tensor<i32>",
                 "cond {",
                 f"  %p{level} = stablehlo.compare LT, %j{level}, %c2, SIGNED :"
                 " (tensor<i32>, tensor<i32>) -> tensor<i1>",
                 f"  stablehlo.return %p{level} : tensor<i1>",
                 "} do {"] + ["  " + x for x in inner] +
                [f"  %k{level} = stablehlo.add %j{level}, %c1 : tensor<i32>",
                 f"  stablehlo.return %k{level}, {res} : tensor<i32>, tensor<i32>", "}"],
                f"%r{level}#1")
    body, res = loop(0)
    text = "\n".join(lines + ["  " + x for x in body] + [f"  return {res} : tensor<i32>", "}"])
    assert _run_both(text, [np.int32(41)], after=(0,))[0] == 42


def test_a_deep_call_chain_in_a_loop_is_inlined(generate_now):
    n = 300
    fs = ["""func.func @main(%x: tensor<f32>) -> tensor<f32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.while(%i = %c0, %v = %x) : tensor<i32>, tensor<f32>
  cond {
    %n = stablehlo.constant dense<5> : tensor<i32>
    %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    %v2 = func.call @f0(%v) : (tensor<f32>) -> tensor<f32>
    stablehlo.return %i2, %v2 : tensor<i32>, tensor<f32>
  }
  return %r#1 : tensor<f32>
}"""]
    for i in range(n):
        nxt = (f"%0 = func.call @f{i + 1}(%a) : (tensor<f32>) -> tensor<f32>" if i + 1 < n
               else "%0 = stablehlo.multiply %a, %a : tensor<f32>")
        fs.append(f"func.func private @f{i}(%a: tensor<f32>) -> tensor<f32> {{\n  {nxt}\n"
                  "  return %0 : tensor<f32>\n}")
    text = "\n".join(fs)
    want = np.float32(1.0001)
    for _ in range(5):
        want = want * want
    assert _run_both(text, [np.float32(1.0001)], after=(0,))[0] == want


def _chain_loop(n, called):
    """A fori_loop of 4 iterations over two ``n``-element uint32 values, its
    body a threefry-like chain (add, rotate, xor by the counter), in a
    called function (returning an argument as it came, like JAX's
    ``closed_call``: not inlined into the body's plan) or in the body
    itself."""
    t = f"tensor<{n}xui32>"
    chain, round_function = rotate_round(t)
    if called:
        body = f"""
      %k = stablehlo.convert %i : (tensor<i32>) -> tensor<ui32>
      %y0, %y1, %k2 = func.call @round(%x0, %x1, %k) : ({t}, {t}, tensor<ui32>) -> ({t}, {t}, tensor<ui32>)"""
        extra = round_function
    else:
        body = f"""
      %k = stablehlo.convert %i : (tensor<i32>) -> tensor<ui32>{chain}
      %y0 = stablehlo.add %s, %bk : {t}
      %y1 = stablehlo.add %y, %bk : {t}"""
        extra = ""
    return f"""
func.func @main(%a: {t}, %b: {t}) -> ({t}, {t}) {{
  %z = stablehlo.constant dense<0> : tensor<i32>
  %r:3 = stablehlo.while(%i = %z, %x0 = %a, %x1 = %b) : tensor<i32>, {t}, {t}
    cond {{
      %n = stablehlo.constant dense<4> : tensor<i32>
      %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    }} do {{{body}
      %one = stablehlo.constant dense<1> : tensor<i32>
      %j = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %j, %y0, %y1 : tensor<i32>, {t}, {t}
    }}
  return %r#1, %r#2 : {t}, {t}
}}{extra}
"""


@pytest.mark.parametrize("called", [True, False])
def test_fused_chains_in_a_loop_stay_fused(called, monkeypatch):
    # A body (or a function it calls) whose plan runs a fused chain keeps
    # it: the called function is called from the generated loop, not
    # inlined op by op on whole arrays; a body that is itself such a block
    # is left to the plain plan. The same bits either way.
    from stablehlo_interpreter import fusion, looptile
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 256)
    monkeypatch.setattr(loopgen, "FUSED_LOOP_ELEMENTS", 256)
    # Such loops run tiled (looptile.py) before generation is considered:
    # off here, this checks the generated loop's own rule.
    monkeypatch.setattr(looptile, "plan", lambda op, cond, body: None)
    monkeypatch.setattr(fusion, "CHUNK_BYTES", 2048)
    text = _chain_loop(3000, called)
    rng = np.random.default_rng(12)
    args = [rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32) for _ in range(2)]
    monkeypatch.setattr(loopgen, "ENABLED", False)
    want = shi.compile(text).run(*args)
    monkeypatch.setattr(loopgen, "ENABLED", True)
    monkeypatch.setattr(loopgen, "GENERATE_AFTER", 0)
    monkeypatch.setattr(loopgen, "STRICT", True)
    program = shi.compile(text)
    for _ in range(2):
        got = program.run(*args)
        assert all(np.array_equal(g, w) for g, w in zip(got, want))
    (state,) = loop_states(program)
    if called:
        assert state.compiled is not None
        names = {op.name for op in state.compiled.line_ops}
        assert "func.call" in names and "stablehlo.xor" not in names
    else:
        assert state.compiled is None and state.failed


RNN_CELL = """
func.func @main(%xs: tensor<8x256xf32>, %w: tensor<256x256xf32>, %h0: tensor<256xf32>)
    -> (tensor<256xf32>, tensor<256xi1>) {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %f0 = stablehlo.constant dense<false> : tensor<256xi1>
  %r:3 = stablehlo.while(%i = %c0, %h = %h0, %m = %f0) : tensor<i32>, tensor<256xf32>, tensor<256xi1>
  cond {
    %n = stablehlo.constant dense<8> : tensor<i32>
    %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %z = stablehlo.constant dense<0> : tensor<i32>
    %row = stablehlo.dynamic_slice %xs, %i, %z, sizes = [1, 256] : (tensor<8x256xf32>, tensor<i32>, tensor<i32>) -> tensor<1x256xf32>
    %x = stablehlo.reshape %row : (tensor<1x256xf32>) -> tensor<256xf32>
    %d = stablehlo.dot_general %h, %w, contracting_dims = [0] x [0] : (tensor<256xf32>, tensor<256x256xf32>) -> tensor<256xf32>
    %a = stablehlo.add %d, %x : tensor<256xf32>
    %p = stablehlo.multiply %a, %x : tensor<256xf32>
    %s = stablehlo.subtract %a, %p : tensor<256xf32>
    %mx = stablehlo.maximum %s, %x : tensor<256xf32>
    %t = stablehlo.tanh %mx : tensor<256xf32>
    %c = stablehlo.compare GT, %t, %x, FLOAT : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xi1>
    %m2 = stablehlo.or %m, %c : tensor<256xi1>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %i2, %t, %m2 : tensor<i32>, tensor<256xf32>, tensor<256xi1>
  }
  return %r#1, %r#2 : tensor<256xf32>, tensor<256xi1>
}"""


@pytest.mark.parametrize("numerics", ["accurate", "spec"])
def test_small_array_cell_is_bit_identical(numerics, monkeypatch):
    # An RNN cell on 256-element arrays: the ufunc kernels called directly
    # (direct_ufunc), the matrix-vector product under the pinned BLAS
    # thread, tanh's short path; NaN, infinities, signed zeros in the rows.
    if numerics == "spec":
        monkeypatch.setenv("STABLEHLO_REF_NUMERICS", "spec")
    rng = np.random.default_rng(7)
    xs = rng.standard_normal((8, 256)).astype(np.float32)
    sv = np.array([v[()] for v in special_values(np.float32, n_random=0)], np.float32)
    xs[2, :sv.size] = sv
    w = (rng.standard_normal((256, 256)) / 16).astype(np.float32)
    h0 = rng.standard_normal(256).astype(np.float32)
    _run_both(RNN_CELL, [xs, w, h0])
    saved = loopgen.GENERATE_AFTER
    try:
        loopgen.GENERATE_AFTER = 0
        program = shi.compile(RNN_CELL)
        program.run(xs, w, h0)
    finally:
        loopgen.GENERATE_AFTER = saved
    (src,) = [s.source for s in loop_states(program) if s.compiled is not None]
    direct = [line for line in src.splitlines() if " = U" in line]
    if numerics == "accurate":   # add, multiply, subtract, maximum?, compare?, or?
        assert len(direct) >= 3, src
