"""reduce_window and select_and_scatter against loop references of the spec."""

import itertools

import ml_dtypes
import numpy as np
import pytest

import stablehlo_interpreter as shi


def tt(shape, et):
    return "tensor<" + "".join(f"{n}x" for n in shape) + et + ">"


def arr(a):
    return ", ".join(str(int(x)) for x in a)


def pad_ref(x, value, lo, hi, interior):
    """spec pad by explicit index arithmetic (independent of the kernel's)."""
    shape = [lo_ + hi_ + (n - 1) * (i + 1) + 1 if n else lo_ + hi_
             for n, lo_, hi_, i in zip(x.shape, lo, hi, interior)]
    out = np.full(shape, value, dtype=x.dtype)
    for idx in itertools.product(*map(range, x.shape)):
        t = tuple(lo_ + k * (i + 1) for k, lo_, i in zip(idx, lo, interior))
        if all(0 <= a < n for a, n in zip(t, shape)):
            out[t] = x[idx]
    return out


def reduce_window_ref(xs, inits, wd, ws, bd, wdil, pad, fold):
    padded = [pad_ref(x, i, pad[:, 0], pad[:, 1], [b - 1 for b in bd])
              for x, i in zip(xs, inits)]
    shape = padded[0].shape
    out_shape = [max(0, (p - ((w - 1) * d + 1)) // s + 1) for p, w, d, s in
                 zip(shape, wd, wdil, ws)]
    outs = [np.zeros(out_shape, dtype=x.dtype) for x in xs]
    for oi in itertools.product(*map(range, out_shape)):
        acc = list(inits)
        for wi in itertools.product(*map(range, wd)):
            t = tuple(o * s + w * d for o, s, w, d in zip(oi, ws, wi, wdil))
            acc = fold(*acc, *[p[t] for p in padded])
        for o, a in zip(outs, acc):
            o[oi] = a
    return outs


def rw_prog(shape, et, out_shape, wd, ws, bd, wdil, pad, body, n=1):
    t, ot = tt(shape, et), tt(out_shape, et)
    params = ", ".join([f"%x{i}: {t}" for i in range(n)] +
                       [f"%i{i}: tensor<{et}>" for i in range(n)])
    args = ", ".join(f"%a{i}: tensor<{et}>" for i in range(2 * n))
    rtypes = ", ".join([ot] * n)
    res = ", ".join(f"%r#{i}" for i in range(n)) if n > 1 else "%r"
    return shi.compile(f"""
func.func @main({params}) -> ({rtypes}) {{
  %r{':' + str(n) if n > 1 else ''} = "stablehlo.reduce_window"({", ".join(f"%x{i}" for i in range(n))}, {", ".join(f"%i{i}" for i in range(n))}) ({{
  ^bb0({args}):
{body}
  }}) {{window_dimensions = array<i64: {arr(wd)}>, window_strides = array<i64: {arr(ws)}>,
      base_dilations = array<i64: {arr(bd)}>, window_dilations = array<i64: {arr(wdil)}>,
      padding = dense<[{", ".join(f"[{a}, {b}]" for a, b in pad)}]> : tensor<{len(pad)}x2xi64>}}
      : ({", ".join([t] * n + [f"tensor<{et}>"] * n)}) -> ({rtypes})
  return {res} : {rtypes}
}}""")


def binop(op, et):
    return f"""    %s = stablehlo.{op} %a0, %a1 : tensor<{et}>
    stablehlo.return %s : tensor<{et}>"""


CONFIGS = [
    # window, strides, base dilations, window dilations, padding
    ((2, 3), (1, 2), (1, 1), (1, 1), [[0, 0], [1, 2]]),
    ((3, 2), (2, 1), (2, 1), (1, 2), [[2, 1], [0, 0]]),
    ((2, 2), (3, 3), (2, 2), (2, 1), [[1, -1], [-1, 2]]),
    ((1, 5), (1, 1), (1, 1), (1, 1), [[0, 0], [4, 0]]),   # cumsum-like
]


@pytest.mark.parametrize("cfg", range(len(CONFIGS)))
@pytest.mark.parametrize("op,fold,init", [
    ("maximum", max, -100), ("add", lambda a, b: a + b, 1),
    ("multiply", lambda a, b: a * b, 1), ("minimum", min, 100)])
def test_reduce_window_int_reducers(cfg, op, fold, init):
    wd, ws, bd, wdil, pad = CONFIGS[cfg]
    pad = np.array(pad)
    x = np.random.default_rng(cfg).integers(-3, 4, (4, 5)).astype(np.int32)
    exp = reduce_window_ref([x], [np.int32(init)], wd, ws, bd, wdil, pad,
                            lambda a, b: (np.int32(fold(a, b)),))[0]
    prog = rw_prog((4, 5), "i32", exp.shape, wd, ws, bd, wdil, pad, binop(op, "i32"))
    got = prog.run(x, np.array(init, np.int32))[0]
    np.testing.assert_array_equal(got, exp)


def test_reduce_window_float_add_rounds_the_exact_sum_once():
    # 1e8 + 1 + ... loses the ones when added one by one in f32 (XLA CPU's
    # row-major fold gives 1.5). The spec leaves the order of a reduction
    # implementation-defined; the reference accumulates in float64 and rounds
    # once, so it gets the correctly rounded exact sum 4.5 (ops/reducers.py).
    x = np.array([[1e8, 1, 1, 1, -1e8, 1]], np.float32)
    prog = rw_prog((1, 6), "f32", (1, 1), (1, 6), (1, 1), (1, 1), (1, 1),
                   np.zeros((2, 2), int), binop("add", "f32"))
    got = prog.run(x, np.array(0.5, np.float32))[0]
    assert got[0, 0] == np.float32(4.5)


def test_reduce_window_variadic_argmax_body():
    # (value, index) pairs: keep the larger value, the smaller index on ties.
    body = """    %gt = stablehlo.compare GT, %a0, %a1 : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %eq = stablehlo.compare EQ, %a0, %a1 : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %lt = stablehlo.compare LT, %a2, %a3 : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %tie = stablehlo.and %eq, %lt : tensor<i1>
    %keep = stablehlo.or %gt, %tie : tensor<i1>
    %v = stablehlo.select %keep, %a0, %a1 : tensor<i1>, tensor<f32>
    %i = stablehlo.select %keep, %a2, %a3 : tensor<i1>, tensor<f32>
    stablehlo.return %v, %i : tensor<f32>, tensor<f32>"""
    x = np.array([[1, 5, 5, 2], [7, 0, 7, 3], [2, 2, 9, 9]], np.float32)
    ix = np.arange(12, dtype=np.float32).reshape(3, 4)

    def fold(a, b, c, d):
        keep = a > b or (a == b and c < d)
        return (a, c) if keep else (b, d)
    pad = np.array([[0, 1], [1, 0]])
    exp = reduce_window_ref([x, ix], [np.float32(-np.inf), np.float32(99)], (2, 2), (1, 2),
                            (1, 1), (1, 1), pad, fold)
    prog = rw_prog((3, 4), "f32", exp[0].shape, (2, 2), (1, 2), (1, 1), (1, 1), pad, body, n=2)
    v, i = prog.run(x, ix, np.array(-np.inf, np.float32), np.array(99, np.float32))
    np.testing.assert_array_equal(v, exp[0])
    np.testing.assert_array_equal(i, exp[1])


def test_reduce_window_bool_and_empty_output():
    x = np.array([[True, False, False], [False, False, True]])
    prog = rw_prog((2, 3), "i1", (1, 2), (2, 2), (1, 1), (1, 1), (1, 1),
                   np.zeros((2, 2), int), binop("or", "i1"))
    np.testing.assert_array_equal(prog.run(x, np.array(False))[0], [[True, True]])
    prog = rw_prog((2, 3), "i1", (0, 2), (3, 2), (1, 1), (1, 1), (1, 1),
                   np.zeros((2, 2), int), binop("or", "i1"))
    assert prog.run(x, np.array(False))[0].shape == (0, 2)


# --------------------------------------------------------------------------
# select_and_scatter


def sas_ref(operand, source, init, wd, ws, lo, select, scatter):
    result = np.full(operand.shape, init, dtype=operand.dtype)
    for si in itertools.product(*map(range, source.shape)):
        best = None
        for wi in itertools.product(*map(range, wd)):
            oi = tuple(s * st + w - l for s, st, w, l in zip(si, ws, wi, lo))
            if not all(0 <= a < n for a, n in zip(oi, operand.shape)):
                continue
            if best is None or not select(operand[best], operand[oi]):
                best = oi
        if best is not None:
            result[best] = scatter(result[best], source[si])
    return result


def sas_prog(oshape, sshape, et, wd, ws, pad, cmp):
    o, s = tt(oshape, et), tt(sshape, et)
    return shi.compile(f"""
func.func @main(%x: {o}, %src: {s}, %init: tensor<{et}>) -> {o} {{
  %r = "stablehlo.select_and_scatter"(%x, %src, %init) ({{
  ^bb0(%a0: tensor<{et}>, %a1: tensor<{et}>):
    %c = stablehlo.compare {cmp}, %a0, %a1 : (tensor<{et}>, tensor<{et}>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  }}, {{
  ^bb0(%a0: tensor<{et}>, %a1: tensor<{et}>):
    %s = stablehlo.add %a0, %a1 : tensor<{et}>
    stablehlo.return %s : tensor<{et}>
  }}) {{window_dimensions = array<i64: {arr(wd)}>, window_strides = array<i64: {arr(ws)}>,
      padding = dense<[{", ".join(f"[{a}, {b}]" for a, b in pad)}]> : tensor<{len(pad)}x2xi64>}}
      : ({o}, {s}, tensor<{et}>) -> {o}
  return %r : {o}
}}""")


@pytest.mark.parametrize("cmp,sel", [("GE", lambda a, b: a >= b), ("GT", lambda a, b: a > b),
                                     ("LE", lambda a, b: a <= b)])
@pytest.mark.parametrize("wd,ws,pad", [((2, 2), (2, 2), [[0, 0], [0, 0]]),
                                       ((3, 3), (1, 2), [[1, 1], [1, 1]]),
                                       ((2, 3), (2, 1), [[1, 0], [0, 2]])])
def test_select_and_scatter_matches_reference(cmp, sel, wd, ws, pad):
    rng = np.random.default_rng(len(wd) + ws[0])
    x = rng.integers(0, 3, (4, 5)).astype(np.int32)  # many ties
    pad = np.array(pad)
    padded = [n + a + b for n, (a, b) in zip(x.shape, pad)]
    sshape = tuple((p - w) // s + 1 for p, w, s in zip(padded, wd, ws))
    src = rng.integers(1, 9, sshape).astype(np.int32)
    exp = sas_ref(x, src, 10, wd, ws, pad[:, 0], sel, lambda a, b: a + b)
    got = sas_prog(x.shape, sshape, "i32", wd, ws, pad, cmp).run(
        x, src, np.array(10, np.int32))
    np.testing.assert_array_equal(got[0], exp)


# max through a reshape: not batchable, evaluated window element by element.
MAX_RESHAPE = """    %m = stablehlo.maximum %a0, %a1 : tensor<i32>
    %v = stablehlo.reshape %m : (tensor<i32>) -> tensor<1xi32>
    %w = stablehlo.reshape %v : (tensor<1xi32>) -> tensor<i32>
    stablehlo.return %w : tensor<i32>"""


def test_reduce_window_non_batchable_body():
    wd, ws, bd, wdil, pad = CONFIGS[1]
    pad = np.array(pad)
    x = np.random.default_rng(5).integers(-9, 9, (4, 5)).astype(np.int32)
    exp = reduce_window_ref([x], [np.int32(-50)], wd, ws, bd, wdil, pad,
                            lambda a, b: (max(a, b),))[0]
    prog = rw_prog((4, 5), "i32", exp.shape, wd, ws, bd, wdil, pad, MAX_RESHAPE)
    np.testing.assert_array_equal(prog.run(x, np.array(-50, np.int32))[0], exp)


def test_select_and_scatter_non_batchable_regions():
    o, s = "tensor<4x4xi32>", "tensor<2x2xi32>"
    prog = shi.compile(f"""
func.func @main(%x: {o}, %src: {s}, %init: tensor<i32>) -> {o} {{
  %r = "stablehlo.select_and_scatter"(%x, %src, %init) ({{
  ^bb0(%a0: tensor<i32>, %a1: tensor<i32>):
    %v = stablehlo.reshape %a0 : (tensor<i32>) -> tensor<1xi32>
    %w = stablehlo.reshape %v : (tensor<1xi32>) -> tensor<i32>
    %c = stablehlo.compare GE, %w, %a1 : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  }}, {{
  ^bb0(%a0: tensor<i32>, %a1: tensor<i32>):
{MAX_RESHAPE}
  }}) {{window_dimensions = array<i64: 3, 3>, window_strides = array<i64: 1, 1>}}
      : ({o}, {s}, tensor<i32>) -> {o}
  return %r : {o}
}}""")
    x = np.array([[1, 2, 3, 0], [4, 9, 1, 2], [0, 1, 2, 8], [3, 3, 3, 3]], np.int32)
    src = np.array([[5, 6], [7, 8]], np.int32)
    exp = sas_ref(x, src, 0, (3, 3), (1, 1), (0, 0), lambda a, b: a >= b, max)
    np.testing.assert_array_equal(prog.run(x, src, np.array(0, np.int32))[0], exp)


# --------------------------------------------------------------------------
# Random configurations against the spec's fold, every dtype family and plan


def _spec_max(a, b):
    """spec maximum on scalars: NaN propagates, -0 < +0."""
    if np.isnan(a) or np.isnan(b):
        return a if np.isnan(a) else b
    if a == b == 0:
        return a if not np.signbit(a) else b
    return a if a > b else b


def _spec_min(a, b):
    if np.isnan(a) or np.isnan(b):
        return a if np.isnan(a) else b
    if a == b == 0:
        return a if np.signbit(a) else b
    return a if a < b else b


def _canonical(x):
    """Bytes to compare: every NaN as one value (the spec fixes no payload), all
    other values -- signed zeros included -- bit for bit."""
    x = np.array(x)
    if x.dtype.kind == "f" or x.dtype.name in ("bfloat16", "float8_e4m3fn"):
        f = x.astype(np.float32)
        x = np.where(np.isnan(f), np.array(np.nan, x.dtype), x)
    return x.tobytes()


def _rand_values(rng, shape, dt):
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.dtype(dt).kind in "iu" or dt == ml_dtypes.int4:
        lo = 0 if np.dtype(dt).kind == "u" else -4
        return rng.integers(lo, 4, shape).astype(dt)
    pool = np.array([0.0, -0.0, 1.0, -1.0, 2.0, 0.5, -3.25, np.inf, -np.inf, np.nan, 7.0],
                    np.float64)
    return rng.choice(pool, shape).astype(dt)  # ties, signed zeros, NaN, inf



DT = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
      "i8": np.int8, "ui32": np.uint32, "i4": ml_dtypes.int4, "i1": np.bool_}
EXACT_BODIES = {"maximum": (_spec_max, lambda a, b: max(a, b)),
                "minimum": (_spec_min, lambda a, b: min(a, b))}


def _random_window(rng, rank, big=False):
    shape = tuple(int(v) for v in rng.integers(2, 9 if big else 6, rank))
    wd = tuple(int(v) for v in rng.integers(1, 6 if big else 4, rank))
    ws = tuple(int(v) for v in rng.integers(1, 4, rank))
    bd = tuple(int(v) for v in rng.integers(1, 3, rank)) if rng.random() < 0.3 else (1,) * rank
    wdil = tuple(int(v) for v in rng.integers(1, 3, rank)) if rng.random() < 0.3 else (1,) * rank
    pad = rng.integers(-1, 3, (rank, 2)) if rng.random() < 0.5 else np.zeros((rank, 2), int)
    return shape, wd, ws, bd, wdil, pad


PLANS = ["auto", "fold", "axes", "long_axes"]


def _force_plan(plan, monkeypatch):
    """Make reduce_window use one plan (ops/windows.py); long_axes: every
    window axis through the one-call strided reduce."""
    from stablehlo_interpreter.ops import windows as W
    if plan == "auto":
        return
    if plan == "long_axes":
        monkeypatch.setattr(W, "_LONG_AXIS", 0)
    monkeypatch.setattr(W, "_plan", lambda padded, out, wdims, strides, wdil: (
        ("fold",) if plan == "fold" else ("axes", tuple(a for a, w in enumerate(wdims) if w > 1))))


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("et", sorted(DT))
def test_reduce_window_exact_kinds_equal_the_spec_fold(et, plan, monkeypatch):
    # max/min (and for integers add/multiply/and/or): order-independent, so
    # every plan must give the spec's sequential fold bit for bit, NaNs,
    # signed zeros and ties included.
    _force_plan(plan, monkeypatch)
    dt = DT[et]
    is_float = np.dtype(dt).kind == "f" or dt == ml_dtypes.bfloat16
    bodies = ["maximum", "minimum"]
    if not is_float:
        bodies += ["add", "multiply", "and", "or"] if dt != np.bool_ else ["and", "or"]
    rng = np.random.default_rng(sum(map(ord, et + plan)))
    for trial in range(12):
        body = bodies[trial % len(bodies)]
        rank = int(rng.integers(1, 4))
        shape, wd, ws, bd, wdil, pad = _random_window(rng, rank, big=trial % 4 == 3)
        x = _rand_values(rng, shape, dt)
        init = _rand_values(rng, (), dt)[()] if body not in EXACT_BODIES or not is_float \
            else np.array(rng.choice([-np.inf, 0.0, -0.0, np.inf, 1.0])).astype(dt)
        if body in EXACT_BODIES:
            fold = EXACT_BODIES[body][0 if is_float else 1]
        else:
            py = {"add": lambda a, b: a + b, "multiply": lambda a, b: a * b,
                  "and": lambda a, b: a & b, "or": lambda a, b: a | b}[body]
            if dt == np.bool_:
                py = {"and": lambda a, b: a and b, "or": lambda a, b: a or b}[body]
            bits = 4 if dt == ml_dtypes.int4 else np.dtype(dt).itemsize * 8
            signed = dt == ml_dtypes.int4 or np.dtype(dt).kind == "i"

            def fold(a, b, py=py, bits=bits, signed=signed):
                if isinstance(a, (bool, np.bool_)):
                    return py(bool(a), bool(b))
                v = py(int(a), int(b)) % (1 << bits)
                return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v
        exp = reduce_window_ref([x], [init], wd, ws, bd, wdil, pad,
                                lambda a, b, f=fold: (np.array(f(a, b)).astype(dt),))[0]
        etype = "i1" if dt == np.bool_ else et
        prog = rw_prog(shape, etype, exp.shape, wd, ws, bd, wdil, pad, binop(body, etype))
        got = prog.run(x, np.asarray(init, dtype=dt))[0]
        assert got.dtype == exp.dtype and got.shape == exp.shape
        assert _canonical(got) == _canonical(exp), (body, shape, wd, ws, bd, wdil, pad.tolist())


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("et", ["f32", "f16", "bf16"])
def test_reduce_window_float_sums_are_correctly_rounded(et, plan, monkeypatch):
    # Float sums accumulate in float64 and round once, whatever the plan: for
    # these few terms of moderate range the float64 sum is exact, so each
    # result is the exact sum rounded to the element type.
    _force_plan(plan, monkeypatch)
    dt = DT[et]
    rng = np.random.default_rng(len(et) + len(plan))
    for trial in range(8):
        rank = int(rng.integers(1, 4))
        shape, wd, ws, bd, wdil, pad = _random_window(rng, rank, big=trial % 2 == 1)
        x = (rng.standard_normal(shape) * 8).astype(dt)
        init = np.array(rng.choice([0.0, -0.0, 0.25])).astype(dt)
        exp = reduce_window_ref([x.astype(np.float64)], [np.float64(init)], wd, ws, bd, wdil,
                                pad, lambda a, b: (a + b,))[0]  # exact in float64 here
        prog = rw_prog(shape, et, exp.shape, wd, ws, bd, wdil, pad, binop("add", et))
        got = prog.run(x, init)[0]
        np.testing.assert_array_equal(got, exp.astype(dt))


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("et", ["f32", "f64", "bf16", "complex<f32>"])
def test_reduce_window_sums_of_negative_zeros(et, plan, monkeypatch):
    # IEEE: a sum is -0 only when every term is -0 (init included).
    _force_plan(plan, monkeypatch)
    dt = np.complex64 if et.startswith("complex") else DT[et]
    x = np.full((3, 20), -0.0).astype(dt)
    x[0, 5] = 0.0  # windows over it sum to +0
    for init, window in itertools.product([-0.0, 0.0], [(2, 3), (1, 20)]):
        exp = reduce_window_ref([x], [np.array(init).astype(dt)], window, (1, 1), (1, 1),
                                (1, 1), np.zeros((2, 2), int),
                                lambda a, b: (np.array(a + b).astype(dt),))[0]
        prog = rw_prog(x.shape, et, exp.shape, window, (1, 1), (1, 1), (1, 1),
                       np.zeros((2, 2), int), binop("add", et))
        got = prog.run(x, np.array(init).astype(dt))[0]
        assert _canonical(got) == _canonical(exp), (init, window)


def test_reduce_window_long_windows():
    # Windows longer than _LONG_AXIS along an axis (sliding maximum / sum of
    # 40, a global pool) against the spec's fold.
    rng = np.random.default_rng(11)
    x = _rand_values(rng, (3, 50), np.float32)
    for body, fold, init in [("maximum", _spec_max, -np.inf), ("minimum", _spec_min, np.inf)]:
        for wd, ws, pad in [((1, 40), (1, 1), [[0, 0], [20, 19]]), ((3, 50), (1, 1), [[0, 0]] * 2),
                            ((2, 17), (1, 3), [[1, 0], [0, 0]])]:
            pad = np.array(pad)
            i = np.float32(init)
            exp = reduce_window_ref([x], [i], wd, ws, (1, 1), (1, 1), pad,
                                    lambda a, b, f=fold: (np.float32(f(a, b)),))[0]
            prog = rw_prog(x.shape, "f32", exp.shape, wd, ws, (1, 1), (1, 1), pad,
                           binop(body, "f32"))
            got = prog.run(x, np.array(i))[0]
            assert _canonical(got) == _canonical(exp), (body, wd, ws)
    y = (rng.standard_normal((3, 50)) * 4).astype(np.float32)
    exp = reduce_window_ref([y.astype(np.float64)], [np.float64(0)], (1, 40), (1, 1), (1, 1),
                            (1, 1), np.array([[0, 0], [20, 19]]), lambda a, b: (a + b,))[0]
    prog = rw_prog(y.shape, "f32", exp.shape, (1, 40), (1, 1), (1, 1), (1, 1),
                   np.array([[0, 0], [20, 19]]), binop("add", "f32"))
    np.testing.assert_array_equal(prog.run(y, np.float32(0))[0], exp.astype(np.float32))


def sas_prog_body(oshape, sshape, et, wd, ws, pad, cmp, scatter):
    prog = sas_prog(oshape, sshape, et, wd, ws, pad, cmp)
    if scatter == "add":
        return prog
    text = prog.text.replace("stablehlo.add", f"stablehlo.{scatter}")
    return shi.compile(text)


@pytest.mark.parametrize("et", ["f32", "bf16", "f16", "i8", "ui32", "i4", "f64"])
def test_select_and_scatter_random_configurations(et):
    # Every compare direction, add/max/min scatter, overlapping and disjoint
    # windows, padding, ties, NaN and signed zeros: the spec's fold exactly
    # (the first selected element wins ties; scatter applies in source order).
    dt = DT[et]
    is_float = np.dtype(dt).kind == "f" or dt == ml_dtypes.bfloat16
    cmps = {"GE": lambda a, b: a >= b, "GT": lambda a, b: a > b, "LE": lambda a, b: a <= b,
            "LT": lambda a, b: a < b, "NE": lambda a, b: a != b}
    rng = np.random.default_rng(len(et) * 7)
    for trial in range(24):
        cmp = sorted(cmps)[trial % len(cmps)]
        scatter = ["add", "maximum", "minimum"][trial % 3]
        rank = int(rng.integers(1, 4))
        shape = tuple(int(v) for v in rng.integers(2, 7, rank))
        wd = tuple(int(v) for v in rng.integers(1, 4, rank))
        ws = wd if trial % 2 else tuple(int(v) for v in rng.integers(1, 4, rank))
        pad = rng.integers(0, 2, (rank, 2)) if trial % 3 == 0 else np.zeros((rank, 2), int)
        padded = [n + a + b for n, (a, b) in zip(shape, pad)]
        if any(p < w for p, w in zip(padded, wd)):
            continue
        sshape = tuple((p - w) // s + 1 for p, w, s in zip(padded, wd, ws))
        x = _rand_values(rng, shape, dt)
        src = _rand_values(rng, sshape, dt)
        if is_float and scatter == "add":
            src = np.where(np.isnan(src.astype(np.float32)), 1, src).astype(dt)
        init = np.array(0).astype(dt)
        if is_float:
            sc = {"add": lambda a, b: np.array(a + b).astype(dt), "maximum": _spec_max,
                  "minimum": _spec_min}[scatter]
        else:
            bits = 4 if dt == ml_dtypes.int4 else np.dtype(dt).itemsize * 8
            signed = dt == ml_dtypes.int4 or np.dtype(dt).kind == "i"

            def sc(a, b, op=scatter, bits=bits, signed=signed):
                v = {"add": int(a) + int(b), "maximum": max(int(a), int(b)),
                     "minimum": min(int(a), int(b))}[op] % (1 << bits)
                return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v
        exp = sas_ref(x, src, init, wd, ws, pad[:, 0], cmps[cmp], sc)
        got = sas_prog_body(shape, sshape, et, wd, ws, pad, cmp, scatter).run(x, src, init)[0]
        assert _canonical(got) == _canonical(exp), (cmp, scatter, shape, wd, ws, pad.tolist())


def test_reduce_window_rank0_and_results_own_their_memory():
    # A rank-0 operand keeps rank 0 (with the spec's zero sign: max(-0, +0)
    # is +0), and a body that returns its argument still gives a result that
    # shares no memory with the operand (there is no padding copy in between).
    prog = shi.compile("""
func.func @main(%x: tensor<f32>, %i: tensor<f32>) -> tensor<f32> {
  %r = "stablehlo.reduce_window"(%x, %i) ({
  ^bb0(%a0: tensor<f32>, %a1: tensor<f32>):
""" + binop("maximum", "f32") + """
  }) {window_dimensions = array<i64>} : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %r : tensor<f32>
}""")
    got = prog.run(np.float32(-0.0), np.float32(0.0))[0]
    assert got.shape == () and not np.signbit(got)
    body = "    stablehlo.return %a1 : tensor<f32>"
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    prog = rw_prog(x.shape, "f32", x.shape, (1, 1), (1, 1), (1, 1), (1, 1),
                   np.zeros((2, 2), int), body)
    got = prog.run(x, np.float32(0))[0]
    np.testing.assert_array_equal(got, x)
    assert not np.shares_memory(got, x)
