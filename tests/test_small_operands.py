"""The 0-d and small-vector kernels (ops/elementwise.py _scalar_or,
reducers.Reducer.vector_kernel) give the general kernels' bits.

Each program is compiled twice: with 0-d (or 1-d) operands, which take the
small path, and with the same values laid out as arrays (or a (1, n)
operand), which take the general one; NaN payloads (quiet and signalling,
both signs), -0, infinities and subnormals included, in both numerics modes.
"""

import warnings

import numpy as np
import pytest

import stablehlo_interpreter as shi
from stablehlo_interpreter import dtypes as D

MODES = ("accurate", "spec")
FLOATS = sorted((D.from_element_type(e) for e in
                 ("f16", "bf16", "f32", "f64", "f8E4M3FN", "f8E5M2", "f8E4M3FNUZ", "f8E5M2FNUZ",
                  "f8E4M3B11FNUZ", "f8E4M3", "f8E3M4", "f8E8M0FNU", "f4E2M1FN", "f6E2M3FN",
                  "f6E3M2FN")), key=str)
DIRECTIONS = ("EQ", "NE", "GE", "GT", "LE", "LT")
_NAN_BITS = {2: (0x7E01, 0xFE02, 0x7C01), 4: (0x7FC00001, 0xFFC00002, 0x7F800001),
             8: (0x7FF8000000000001, 0xFFF8000000000002, 0x7FF0000000000001)}


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint8) if a.dtype == np.bool_ else a.view(f"u{a.dtype.itemsize}")


def special_values(dt):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        base = np.array([0.0, -0.0, 1.0, -1.0, 1.5, -2.0, 3.0, 1e-30, -1e-30, np.inf, -np.inf,
                         np.nan, -np.nan], np.float64).astype(dt)
    vals = list(base)
    if dt == np.float16 or dt == np.float32 or dt == np.float64:
        u = np.dtype(f"u{dt.itemsize}")
        vals += list(np.array(_NAN_BITS[dt.itemsize], u).view(dt))
        vals.append(np.array(1, u).view(dt)[()])   # the smallest subnormal
        vals.append(np.array(1, u).view(dt)[()] * np.array(-1, dt))
    seen, out = set(), []
    for v in vals:
        b = bytes(np.asarray(v, dt).tobytes())
        if b not in seen:
            seen.add(b)
            out.append(np.asarray(v, dt))
    return out


def _program(shape, et, ops):
    t = "tensor<" + "".join(f"{d}x" for d in shape) + et + ">"
    tb = "tensor<" + "".join(f"{d}x" for d in shape) + "i1>"
    body, types, names = [], [], []
    for i, (kind, arg) in enumerate(ops):
        if kind == "compare":
            d, ct = arg
            body.append(f"%r{i} = stablehlo.compare {d}, %a, %b, {ct} : ({t}, {t}) -> {tb}")
            types.append(tb)
        else:
            body.append(f"%r{i} = stablehlo.{kind} %a, %b : {t}")
            types.append(t)
        names.append(f"%r{i}")
    return (f"func.func @main(%a: {t}, %b: {t}) -> ({', '.join(types)}) {{\n  "
            + "\n  ".join(body) + f"\n  return {', '.join(names)} : {', '.join(types)}\n}}")


def _ops(ctypes):
    ops = [("compare", (d, ct)) for d in DIRECTIONS for ct in ctypes]
    return ops + [("maximum", None), ("minimum", None)]


def _scalar_against_vector(vals, dt, et, ops, mode):
    """``(op, a, b, got, want)`` for every pair of ``vals``: ``ops`` of the
    0-d program (the small-operand kernels) against the same ops of one
    program over all pairs (the general kernels)."""
    a = np.array([x for x in vals for _ in vals], dt)
    b = np.array([y for _ in vals for y in vals], dt)
    want = shi.compile(_program((a.size,), et, ops), numerics=mode).run(a, b)
    scalar = shi.compile(_program((), et, ops), numerics=mode)
    for i in range(a.size):
        got = scalar.run(a[i:i + 1].reshape(()), b[i:i + 1].reshape(()))
        for op, g, w in zip(ops, got, want):
            yield op, a[i], b[i], np.asarray(g), w[i]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_scalar_float_compare_max_min(dt, mode):
    et = D.to_element_type(dt)
    ops = _ops(("TOTALORDER", "FLOAT"))
    vals = special_values(dt)
    for (kind, arg), a, b, g, w in _scalar_against_vector(vals, dt, et, ops, mode):
        assert g.shape == () and g.dtype == w.dtype, (kind, arg)
        assert bits(g) == bits(w), (kind, arg, a, b, g, w)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("et", ["i8", "i32", "ui32", "i64", "ui64"])
def test_scalar_int_compare(et, mode):
    dt = D.from_element_type(et)
    info = np.iinfo(dt)
    vals = [np.asarray(v, dt) for v in sorted({info.min, info.min + 1, -1 if info.min else 0,
                                               0, 1, info.max - 1, info.max})]
    ct = "SIGNED" if info.min else "UNSIGNED"
    other = "UNSIGNED" if info.min else "SIGNED"   # reinterprets: the general kernel
    ops = _ops((ct, other))[:-2] + [("maximum", None), ("minimum", None)]
    for (kind, arg), a, b, g, w in _scalar_against_vector(vals, dt, et, ops, mode):
        assert bits(g) == bits(w), (kind, arg, a, b)


def test_scalar_kernels_take_arrays_in_batched_bodies():
    # A reduce body's 0-d maximum and TOTALORDER compare run on whole
    # arrays when the body is evaluated batched (argmax-style bodies).
    x = np.array([[1.0, np.nan, -0.0], [0.0, -0.0, 2.0]], np.float32)
    text = """
func.func @main(%x: tensor<2x3xf32>) -> tensor<2xf32> {
  %init = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %r = stablehlo.reduce(%x init: %init) across dimensions = [1]
       : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
   reducer(%a: tensor<f32>, %b: tensor<f32>) {
    %gt = stablehlo.compare GT, %a, %b, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %m = stablehlo.maximum %a, %b : tensor<f32>
    %s = stablehlo.select %gt, %a, %m : tensor<i1>, tensor<f32>
    stablehlo.return %s : tensor<f32>
  }
  return %r : tensor<2xf32>
}"""
    got = shi.compile(text).run(x)[0]
    # TOTALORDER puts +NaN above everything and +0 above -0.
    assert np.isnan(got[0]) and bits(got[1:]) == bits(np.array([2.0], np.float32))


_REDUCE_KINDS = ("add", "multiply", "maximum", "minimum", "and", "or", "xor")


def _reduce_program(shape, et, kind, dims):
    t = "tensor<" + "".join(f"{d}x" for d in shape) + et + ">"
    out = "tensor<" + "".join(f"{d}x" for i, d in enumerate(shape) if i not in dims) + et + ">"
    return (f"func.func @main(%x: {t}, %i: tensor<{et}>) -> {out} {{\n"
            f"  %r = stablehlo.reduce(%x init: %i) applies stablehlo.{kind} across dimensions = "
            f"{list(dims)} : ({t}, tensor<{et}>) -> {out}\n  return %r : {out}\n}}")


def _reduce_cases(et):
    dt = D.from_element_type(et)
    rng = np.random.default_rng(3)
    if et == "i1":
        return [(rng.random(64) < p, np.bool_(i)) for p in (0.0, 0.5, 1.0) for i in (0, 1)], \
            _REDUCE_KINDS
    if dt.kind in "iu":
        info = np.iinfo(dt)
        big = np.full(64, info.max, dt)   # sums and products that wrap
        return [(big, dt.type(3)), (rng.integers(info.min, info.max, 64, dt, endpoint=True),
                                    dt.type(info.min))], _REDUCE_KINDS
    x = rng.standard_normal(64).astype(dt)
    zeros = np.array([0.0, -0.0] * 32, dt)
    negz = np.full(64, -0.0, dt)
    withnan = x.copy()
    withnan[5] = np.nan
    cases = [(x, dt.type(0)), (zeros, dt.type(-0.0)), (negz, dt.type(-0.0)), (negz, dt.type(0.0)),
             (withnan, dt.type(1)), (x, dt.type(np.inf)), (x, dt.type(np.nan))]
    return cases, ("add", "multiply", "maximum", "minimum")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("et", ["i1", "i8", "ui8", "i32", "ui32", "i64", "f16", "f32", "f64"])
def test_vector_reduce_is_the_general_reduce(et, mode):
    cases, kinds = _reduce_cases(et)
    for kind in kinds:
        vec = shi.compile(_reduce_program((64,), et, kind, (0,)), numerics=mode)
        general = shi.compile(_reduce_program((1, 64), et, kind, (1,)), numerics=mode)
        for x, init in cases:
            init = np.asarray(init, D.from_element_type(et))
            with np.errstate(all="ignore"):
                got = vec.run(x, init)[0]
                want = general.run(x.reshape(1, 64), init)[0]
            assert got.shape == () and got.dtype == want.dtype
            assert bits(got) == bits(want[0]), (kind, x, init, got, want)


def _step_kernels(program):
    return [f[1] for f in program.functions["main"].block._fast_steps()]


@pytest.mark.parametrize("mode", MODES)
def test_the_small_paths_are_planned(mode):
    # Guards the tests above: their 0-d and 1-d programs take the small paths.
    scalar = shi.compile(_program((), "f32", _ops(("TOTALORDER", "FLOAT"))), numerics=mode)
    assert all(k.__qualname__.startswith("_scalar_or") for k in _step_kernels(scalar))
    arrays = shi.compile(_program((4,), "f32", _ops(("TOTALORDER",))), numerics=mode)
    assert not any(k.__qualname__.startswith("_scalar_or") for k in _step_kernels(arrays))
    from stablehlo_interpreter.ops import reducers
    seen = []
    orig = reducers.Reducer.vector_kernel

    def spy(self):
        seen.append(self.kind)
        return orig(self)
    reducers.Reducer.vector_kernel = spy
    try:
        shi.compile(_reduce_program((64,), "i32", "add", (0,)), numerics=mode)
        shi.compile(_reduce_program((1, 64), "i32", "add", (1,)), numerics=mode)
    finally:
        reducers.Reducer.vector_kernel = orig
    assert seen == ["add"]


_GATHERS = [
    # det's diagonal: two start components, collapsed slices of 1.
    ((8, 8), (8, 2), "offset_dims = [], collapsed_slice_dims = [0, 1], start_index_map = [0, 1], "
     "index_vector_dim = 1", (1, 1), (8,)),
    # windows of 2x3 at clamped starts, the starts' batch dims first.
    ((5, 6), (3, 4, 2), "offset_dims = [2, 3], collapsed_slice_dims = [], start_index_map = [1, 0], "
     "index_vector_dim = 2", (2, 3), (3, 4, 2, 3)),
    # take_along_axis-style batching dims.
    ((4, 7), (4, 3, 1), "offset_dims = [], collapsed_slice_dims = [1], operand_batching_dims = [0], "
     "start_indices_batching_dims = [0], start_index_map = [1], index_vector_dim = 2", (1, 1), (4, 3)),
]


@pytest.mark.parametrize("case", range(len(_GATHERS)))
@pytest.mark.parametrize("index_type", ["i32", "ui8", "i64", "ui64"])
def test_small_gather_is_the_linear_gather(case, index_type, monkeypatch):
    from stablehlo_interpreter.ops import gather_scatter as gs
    oshape, ishape, dn, sizes, rshape = _GATHERS[case]
    t = "tensor<" + "".join(f"{d}x" for d in oshape) + "f32>"
    ti = "tensor<" + "".join(f"{d}x" for d in ishape) + index_type + ">"
    tr = "tensor<" + "".join(f"{d}x" for d in rshape) + "f32>"
    text = (f"func.func @main(%x: {t}, %i: {ti}) -> {tr} {{\n"
            f'  %r = "stablehlo.gather"(%x, %i) <{{dimension_numbers = #stablehlo.gather<{dn}>, '
            f"indices_are_sorted = false, slice_sizes = array<i64: {', '.join(map(str, sizes))}>}}>"
            f" : ({t}, {ti}) -> {tr}\n  return %r : {tr}\n}}")
    rng = np.random.default_rng(case)
    x = rng.standard_normal(oshape).astype(np.float32)
    dt = D.from_element_type(index_type)
    lo = 0 if dt.kind == "u" else -3
    idx = rng.integers(lo, max(oshape) + 3, ishape).astype(dt)
    if dt == np.uint64:
        idx.flat[0] = np.iinfo(np.uint64).max   # saturates, then clamps
    got = shi.compile(text).run(x, idx)[0]
    monkeypatch.setattr(gs, "_SMALL_GATHER", 0)
    want = shi.compile(text).run(x, idx)[0]
    assert got.shape == want.shape == rshape
    assert bits(got).tobytes() == bits(want).tobytes()
