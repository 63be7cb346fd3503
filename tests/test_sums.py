"""float32 sums in float64: the C loops of ``stablehlo_interpreter._sums``
against the numpy path reducers.py takes where the module is not built
(bit for bit), their accuracy against an exact sum, and their input checks."""

import math

import numpy as np
import pytest

from stablehlo_interpreter.ops import reducers

try:
    from stablehlo_interpreter import _sums
except ImportError:
    _sums = None

needs_c = pytest.mark.skipif(_sums is None, reason="stablehlo_interpreter._sums is not built")
F64 = np.dtype(np.float64)


def _bits(a):
    return np.ascontiguousarray(np.asarray(a, F64)).reshape(-1).view(np.uint64)


def _values(rng, shape, special=True):
    """float32 values over many binades (cancellation included), with -0
    rows, NaN and infinities when ``special``."""
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-30, 30, shape))).astype(np.float32)
    if special and x.ndim == 2 and x.shape[0] >= 4:
        x[0] = -0.0
        x[1, ::7] = np.nan
        x[2, 3 % x.shape[1]] = np.inf
        x[3, :] = np.float32(1e-45)   # subnormal
    return x


def _both(fn, monkeypatch):
    """``fn()`` with the C module and with the numpy path."""
    got = fn()
    monkeypatch.setattr(reducers, "_sums", None)
    want = fn()
    monkeypatch.setattr(reducers, "_sums", _sums)
    return got, want


@needs_c
def test_constants_agree():
    assert (_sums.LANES, _sums.BLOCK) == (reducers._SUM_LANES, reducers._SUM_BLOCK)


@needs_c
@pytest.mark.parametrize("n", [1, 5, 31, 32, 33, 1000, 4095, 4096, 4097, 3 * 4096 + 37])
@pytest.mark.parametrize("rows", [1, 6])
def test_row_sums_c_and_numpy_agree(n, rows, monkeypatch):
    x = _values(np.random.default_rng(n * 10 + rows), (rows, n))
    got, want = _both(lambda: reducers._row_sums(np.add, x, F64), monkeypatch)
    assert got.shape == want.shape == (rows,)
    np.testing.assert_array_equal(_bits(got), _bits(want))


@needs_c
@pytest.mark.parametrize("shape", [(2, 1), (5, 3), (300, 7), (32, 4096), (3, 9000), (40, 3, 5)])
def test_lead_sums_are_numpys_axis0_sum(shape):
    """The C loop makes numpy's own additions: the fallback is numpy's call."""
    x = _values(np.random.default_rng(len(shape) * 1000 + shape[-1]), shape, special=False)
    x.reshape(shape[0], -1)[:, 0] = -0.0
    got = reducers._lead_sums(np.add, x, F64)
    want = np.add.reduce(x, axis=0, dtype=F64)
    np.testing.assert_array_equal(_bits(got), _bits(want))


@needs_c
@pytest.mark.parametrize("shape,axes", [
    ((1000,), (0,)),                 # _reduce_vector
    ((300, 1000), (1,)),             # rows
    ((2, 70000), (1,)),              # rows
    ((3, 200000), (1,)),             # rows split into _PAR_CHUNK blocks (from _PAR_MIN on)
    ((1 << 19,), (0,)),              # one long row, split
    ((70000, 16), (0,)),             # leading rows in blocks and groups
    ((64, 32, 32, 4), (0, 1, 2)),    # batch-norm statistics
    ((100, 3), (0,)),                # few leading rows: one reduce
    ((50, 40, 30), (0, 2)),          # a leading run and a trailing one
    ((16, 300, 200), (1,)),          # a middle run (per leading index)
    ((4, 50, 3, 130), (1, 2)),       # a middle run of two axes
    ((8, 300, 1), (1,)),             # one position per leading index: numpy's reduce
])
@pytest.mark.parametrize("transposed", [False, True])
def test_reducer_same_bits_with_and_without_c(shape, axes, transposed, monkeypatch):
    red = reducers.reducer("add", np.float32)
    x = _values(np.random.default_rng(sum(shape)), shape, special=False)
    if transposed:   # not C-contiguous: the dims-last copy or numpy's own reduce
        x = np.ascontiguousarray(x.T).T
    init = np.float32(0.5)
    got, want = _both(lambda: red.reduce(x, axes, init), monkeypatch)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("n", [100, 4096, 50_000])
def test_row_sums_error_bound(n, monkeypatch):
    """The order's error: at most (BLOCK / LANES + log2(LANES) + log2(blocks)
    + 1) float64 units of the sum of the absolute values, on both paths."""
    rng = np.random.default_rng(n)
    x = _values(rng, (4, n), special=False)
    for c in ([_sums] if _sums is not None else []) + [None]:
        monkeypatch.setattr(reducers, "_sums", c)
        got = reducers._row_sums(np.add, x, F64)
        for row, s in zip(x, got):
            exact = math.fsum(row.astype(float).tolist())
            scale = float(np.abs(row.astype(F64)).sum())
            terms = reducers._SUM_BLOCK // reducers._SUM_LANES + 5 + math.ceil(
                math.log2(-(-n // reducers._SUM_BLOCK))) + 1
            assert abs(s - exact) <= terms * 2.0 ** -52 * scale


@needs_c
def test_all_negative_zero_sums_keep_their_sign(monkeypatch):
    red = reducers.reducer("add", np.float32)
    x = np.full((3, 5000), -0.0, np.float32)
    for init in (np.float32(-0.0), np.float32(0.0)):
        got, want = _both(lambda: red.reduce(x, (1,), init), monkeypatch)
        assert np.signbit(got).tolist() == np.signbit(want).tolist() == [np.signbit(init)] * 3


@needs_c
def test_bad_buffers_raise():
    x = np.zeros(64, np.float32)
    out = np.zeros(1)
    with pytest.raises(TypeError, match="float32"):
        _sums.row_sums_f32(x.astype(F64), 1, 64, out)
    with pytest.raises(TypeError, match="float64"):
        _sums.row_sums_f32(x, 1, 64, out.astype(np.float32))
    with pytest.raises(ValueError, match="elements"):
        _sums.row_sums_f32(x, 2, 64, out)
    with pytest.raises(ValueError, match="elements"):
        _sums.lead_sums_f32(x, 4, 16, np.zeros(15))
    with pytest.raises(ValueError, match="bad shape"):
        _sums.lead_sums_f32(x, -1, 16, np.zeros(16))
    with pytest.raises(ValueError, match="overlaps"):
        buf = np.zeros(32, F64)
        _sums.lead_sums_f32(buf[:16].view(np.float32), 2, 16, buf[4:20])
    with pytest.raises((BufferError, ValueError)):
        _sums.row_sums_f32(x[::2], 1, 32, out)
    with pytest.raises(TypeError):
        _sums.row_sums_f32(x, 1, 64)
    with pytest.raises(TypeError):
        _sums.row_sums_f32(object(), 1, 64, out)


@needs_c
def test_empty_rows():
    out = np.zeros(0)
    assert _sums.row_sums_f32(np.zeros(0, np.float32), 0, 5, out) is None
    lead = np.full(3, 7.0)
    _sums.lead_sums_f32(np.zeros(0, np.float32), 0, 3, lead)
    assert lead.tolist() == [0.0, 0.0, 0.0]


LAYER_NORM = """
func.func @main(%x: tensor<96x2000xf32>) -> tensor<96x2000xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %n = stablehlo.constant dense<2000.0> : tensor<96xf32>
  %s = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [1]
      : (tensor<96x2000xf32>, tensor<f32>) -> tensor<96xf32>
  %m = stablehlo.divide %s, %n : tensor<96xf32>
  %mb = stablehlo.broadcast_in_dim %m, dims = [0] : (tensor<96xf32>) -> tensor<96x2000xf32>
  %d = stablehlo.subtract %x, %mb : tensor<96x2000xf32>
  %q = chlo.square %d : tensor<96x2000xf32> -> tensor<96x2000xf32>
  %v = stablehlo.reduce(%q init: %z) applies stablehlo.add across dimensions = [1]
      : (tensor<96x2000xf32>, tensor<f32>) -> tensor<96xf32>
  %vb = stablehlo.broadcast_in_dim %v, dims = [0] : (tensor<96xf32>) -> tensor<96x2000xf32>
  %y = stablehlo.divide %d, %vb : tensor<96x2000xf32>
  return %y : tensor<96x2000xf32>
}
"""

BN_STATS = """
func.func @main(%x: tensor<512x8x8x16xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %n = stablehlo.constant dense<32768.0> : tensor<16xf32>
  %s = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [0, 1, 2]
      : (tensor<512x8x8x16xf32>, tensor<f32>) -> tensor<16xf32>
  %m = stablehlo.divide %s, %n : tensor<16xf32>
  %mb = stablehlo.broadcast_in_dim %m, dims = [3] : (tensor<16xf32>) -> tensor<512x8x8x16xf32>
  %d = stablehlo.subtract %x, %mb : tensor<512x8x8x16xf32>
  %q = chlo.square %d : tensor<512x8x8x16xf32> -> tensor<512x8x8x16xf32>
  %v = stablehlo.reduce(%q init: %z) applies stablehlo.add across dimensions = [0, 1, 2]
      : (tensor<512x8x8x16xf32>, tensor<f32>) -> tensor<16xf32>
  return %m, %v : tensor<16xf32>, tensor<16xf32>
}
"""


@needs_c
@pytest.mark.parametrize("fusion", ["1", "0"])
@pytest.mark.parametrize("name,text,shape", [("layer_norm", LAYER_NORM, (96, 2000)),
                                             ("bn_stats", BN_STATS, (512, 8, 8, 16))])
def test_programs_same_bits_with_and_without_c(name, text, shape, fusion, monkeypatch):
    """Fused chains feeding row sums (RowPlan, with their rows broadcast
    back) and leading-axis sums (LeadPlan), and the unfused steps, give the
    same bits whether the C module or numpy adds."""
    import stablehlo_interpreter as si
    from stablehlo_interpreter import fusion as fusion_module
    monkeypatch.setenv("STABLEHLO_REF_FUSION", fusion)
    x = _values(np.random.default_rng(11), shape, special=False) * np.float32(1e-8)
    program = si.compile(text)
    got, want = _both(lambda: program.run(x), monkeypatch)
    plans = {type(s[1]).__name__ for f in program.functions["main"].block._fast
             if isinstance(f[1], fusion_module.FusedChain) for s in f[1].sinks}
    assert plans == ({"RowPlan" if name == "layer_norm" else "LeadPlan"} if fusion == "1" else set())
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32))


@needs_c
@pytest.mark.parametrize("shape,axis", [((16, 300, 200), 1), ((3, 7, 40, 130), 2), ((5, 64, 128), 1)])
def test_middle_sums_are_numpys_sum(shape, axis):
    """The C loop per leading index makes numpy's own additions over a
    middle axis: the fallback is numpy's call."""
    x = _values(np.random.default_rng(sum(shape)), shape, special=False)
    x[(slice(None),) * axis + (slice(None), 0)] = -0.0
    got = reducers._middle_sums(np.add, x, axis, F64)
    want = np.add.reduce(x, axis=axis, dtype=F64)
    assert got.shape == want.shape
    np.testing.assert_array_equal(_bits(got), _bits(want))


# -- cumulative sums (scan_f32), row max/min, sums without the helpers ----


def _scan_values(rng, shape, nan):
    x = _values(rng, shape, special=False)
    flat = x.reshape(-1)
    if not flat.size:
        return x
    flat[0] = -0.0                      # a scan starts from x[0], not from +0
    if nan:
        flat[flat.size // 3] = np.inf
        flat[flat.size // 2] = -np.inf      # inf - inf: NaN from there on
        flat[-1] = np.nan
    else:
        flat[flat.size // 2] = np.inf
    return x


@needs_c
@pytest.mark.parametrize("shape,axis", [
    ((1,), 0), ((1000,), 0), ((300, 70), 0), ((300, 70), 1), ((5, 40, 6), 1),
    ((5, 40, 6), 2), ((5, 40, 6), 0), ((3, 0, 4), 1), ((2, 1, 9), 1)])
@pytest.mark.parametrize("init", [0.0, -0.0, 0.5])
@pytest.mark.parametrize("layout", ["c", "flipped", "transposed"])
@pytest.mark.parametrize("nan", [False, True])
def test_scan_same_bits_with_and_without_c(shape, axis, init, layout, nan, monkeypatch):
    """Reducer.accumulate of float32 sums: _sums.scan_f32 against numpy's
    accumulate in float64, init added, rounded once (also for the views a
    reversed scan passes and for non-C layouts; NaN sums are numpy's)."""
    red = reducers.reducer("add", np.float32)
    x = _scan_values(np.random.default_rng(sum(shape) + axis), shape, nan)
    if layout == "flipped":
        x = np.flip(x, axis)
    elif layout == "transposed":
        x = np.ascontiguousarray(x.T).T
    init = np.float32(init)
    got, want = _both(lambda: red.accumulate(x, axis, init), monkeypatch)
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape == x.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def _extrema_values(rng, shape):
    """Rows with NaN of several payloads, infinities, zeros of both signs
    (alone and among negatives), -inf only, and plain values."""
    x = _values(rng, shape, special=False)
    rows = x.shape[0]
    x[0, :] = -0.0
    x[1, :] = -np.abs(x[1])
    x[1, ::3] = 0.0
    x[2, 5 % x.shape[1]] = np.nan
    x[3, :] = np.float32(-np.inf)
    if rows > 5:
        x[4, ::4] = np.uint32(0x7FC01234).view(np.float32)
        x[4, 1::4] = np.uint32(0xFFC00077).view(np.float32)   # NaNs of other payloads
        x[5, -1] = np.inf
    return x


@needs_c
@pytest.mark.parametrize("kind", ["maximum", "minimum"])
@pytest.mark.parametrize("shape,axes", [
    ((8, 1), (1,)), ((8, 31), (1,)), ((8, 32), (1,)), ((10, 1000), (1,)),
    ((6, 5, 70), (1, 2)), ((6, 5, 70), (2,)), ((6, 70), (0,)), ((6, 70), (0, 1))])
@pytest.mark.parametrize("init", [-np.inf, np.inf, 0.0, -0.0, 1.0])
def test_extrema_same_bits_with_and_without_c(kind, shape, axes, init, monkeypatch):
    red = reducers.reducer(kind, np.float32)
    x = _extrema_values(np.random.default_rng(shape[-1] + len(axes)), shape)
    got, want = _both(lambda: red.reduce(x, axes, np.float32(init)), monkeypatch)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@needs_c
@pytest.mark.parametrize("kind", ["maximum", "minimum"])
def test_extrema_row_plan_same_bits_with_and_without_c(kind, monkeypatch):
    """The fused chains' reduce sinks (RowPlan) take the C loops too."""
    red = reducers.reducer(kind, np.float32)
    x = _extrema_values(np.random.default_rng(7), (12, 3000))

    def fed(init):
        st = red.row_plan(x.shape, (1,)).start(np.float32(init))
        flat = x.reshape(-1)
        for lo in range(0, x.size, 4 * 3000):
            st.add(flat[lo:lo + 4 * 3000], lo, lo + 4 * 3000)
        return st.finish()
    for init in (-np.inf, 0.0, -0.0):
        got, want = _both(lambda: fed(init), monkeypatch)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        np.testing.assert_array_equal(
            got.view(np.uint32), red.reduce(x, (1,), np.float32(init)).view(np.uint32))


@needs_c
@pytest.mark.parametrize("shape,axes", [
    ((3, 200000), (1,)), ((1 << 19,), (0,)), ((1_000_003,), (0,)), ((40, 30000), (1,)),
    ((70000, 16), (0,)), ((64, 32, 32, 16), (0, 1, 2))])
def test_sums_alone_are_the_shared_sums(shape, axes, monkeypatch):
    """Below _C_SUM_ALONE the C loops run in the calling thread in one call
    (_row_sums_alone) or one group after another: the bits of the chunks
    shared with the helper threads."""
    red = reducers.reducer("add", np.float32)
    x = _values(np.random.default_rng(len(shape)), shape, special=False)
    alone = red.reduce(x, axes, np.float32(0.25))
    monkeypatch.setattr(reducers, "_C_SUM_ALONE", 0)
    shared = red.reduce(x, axes, np.float32(0.25))
    np.testing.assert_array_equal(alone.view(np.uint32), shared.view(np.uint32))


@needs_c
def test_scan_and_extrema_bad_buffers_raise():
    x = np.zeros(64, np.float32)
    out = np.zeros(64, np.float32)
    with pytest.raises(TypeError, match="x must be a float32"):
        _sums.scan_f32(x.astype(F64), 1, 64, 1, 0.0, out)
    with pytest.raises(ValueError, match="out has 63 elements"):
        _sums.scan_f32(x, 1, 64, 1, 0.0, out[:63])
    with pytest.raises(ValueError, match="bad shape"):
        _sums.scan_f32(x, 1, -64, 1, 0.0, out)
    with pytest.raises(ValueError, match="overlaps"):
        _sums.scan_f32(out, 1, 64, 1, 0.0, out)
    with pytest.raises(TypeError):
        _sums.scan_f32(x, 1, 64, 1, "zero", out)
    o, nan = np.zeros(4, np.float32), np.zeros(4, np.uint8)
    with pytest.raises(TypeError, match="nan must be a uint8"):
        _sums.row_max_f32(x, 4, 16, o, nan.view(bool))
    with pytest.raises(ValueError, match="bad shape"):
        _sums.row_min_f32(x, 4, 0, o, nan)
    with pytest.raises(ValueError, match="x has 64 elements"):
        _sums.row_max_f32(x, 5, 16, np.zeros(5, np.float32), np.zeros(5, np.uint8))
    with pytest.raises(ValueError, match="overlap"):
        _sums.row_max_f32(x, 4, 16, x[:4], nan)
    with pytest.raises((BufferError, ValueError)):
        _sums.row_max_f32(x[::2], 2, 16, o[:2], nan[:2])
    assert _sums.row_max_f32(np.zeros(0, np.float32), 0, 3, o[:0], nan[:0]) == 0


@needs_c
def test_plans_share_only_what_the_reducer_alone_shares(monkeypatch):
    """A fused chain's reduce sink makes its chunks go to the helper threads
    only when the unfused reduce would (fusion.FusedChain._call):
    float32 sums below _C_SUM_ALONE run their C loop in one thread."""
    f32 = reducers.reducer("add", np.float32)
    f16 = reducers.reducer("add", np.float16)
    biggest = reducers.reducer("maximum", np.float32)
    assert not f32.row_plan((1000, 1000), (1,)).shares()
    assert not f32.row_plan((64, 32, 32, 16), (0, 1, 2)).shares()
    assert not f32.row_plan((100, 100), (1,)).shares()       # below _PAR_MIN
    assert f16.row_plan((1000, 1000), (1,)).shares()
    assert f16.row_plan((64, 32, 32, 16), (0, 1, 2)).shares()
    assert not biggest.row_plan((1000, 1000), (1,)).shares()   # exact: one call
    monkeypatch.setattr(reducers, "_C_SUM_ALONE", 0)
    assert f32.row_plan((1000, 1000), (1,)).shares()
    assert f32.row_plan((64, 32, 32, 16), (0, 1, 2)).shares()
    monkeypatch.setattr(reducers, "_C_SUM_ALONE", 1 << 22)
    monkeypatch.setattr(reducers, "_sums", None)
    assert f32.row_plan((1000, 1000), (1,)).shares()


@needs_c
def test_a_build_without_the_scan_and_extrema_loops_takes_numpy(monkeypatch):
    """A module built from an older _sums.c (only the sums): cumulative sums
    and max/min take numpy's path, with the same bits."""
    import types
    old = types.SimpleNamespace(row_sums_f32=_sums.row_sums_f32, lead_sums_f32=_sums.lead_sums_f32)
    x = _scan_values(np.random.default_rng(3), (50, 40), nan=False)
    add, biggest = reducers.reducer("add", np.float32), reducers.reducer("maximum", np.float32)
    want = add.accumulate(x, 0, np.float32(0)), biggest.reduce(x, (1,), np.float32(-np.inf))
    monkeypatch.setattr(reducers, "_sums", old)
    got = add.accumulate(x, 0, np.float32(0)), biggest.reduce(x, (1,), np.float32(-np.inf))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32))


ROW_OPS = [(0, lambda x, r: x + r), (1, lambda x, r: x - r), (2, lambda x, r: r - x),
           (3, lambda x, r: x * r), (4, lambda x, r: x / r), (5, lambda x, r: r / x)]


@needs_c
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,n", [(1, 1), (1, 37), (7, 1), (9, 100), (3, 1031)])
def test_row_op_is_numpys_broadcast_arithmetic(dtype, rows, n):
    # One IEEE operation per element with r[i] broadcast over row i: numpy's
    # bits, specials included (NaN, infinities, signed zeros, subnormals:
    # no flush to zero). A NaN operand is the same NaN in both operands
    # where both are NaN, so the open payload choice does not show.
    rng = np.random.default_rng(21)
    tiny = np.finfo(dtype).smallest_subnormal
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny, 1.0], dtype)
    x = (rng.standard_normal((rows, n)) * 4).astype(dtype)
    r = (rng.standard_normal(rows) * 4).astype(dtype)
    x.reshape(-1)[rng.integers(0, x.size, max(1, x.size // 5))] = rng.choice(specials, max(1, x.size // 5))
    r[rng.integers(0, rows, max(1, rows // 2))] = rng.choice(specials, max(1, rows // 2))
    for code, fn in ROW_OPS:
        out = np.empty_like(x)
        _sums.row_op(x, r, out, rows, n, code)
        with np.errstate(all="ignore"):
            want = fn(x, r[:, None])
        assert (out.view(np.uint8) == want.view(np.uint8)).all(), code
        inplace = x.copy()   # out may be x itself
        _sums.row_op(inplace, r, inplace, rows, n, code)
        assert (inplace.view(np.uint8) == want.view(np.uint8)).all(), code


@needs_c
def test_row_op_bad_buffers_raise():
    x = np.ones((4, 5), np.float32)
    r = np.ones(4, np.float32)
    out = np.empty_like(x)
    with pytest.raises(TypeError, match="x must be a float32 or float64"):
        _sums.row_op(x.astype(np.int32), r, out, 4, 5, 0)
    with pytest.raises(TypeError, match="r and out must have x's type"):
        _sums.row_op(x, r.astype(np.float64), out, 4, 5, 0)
    with pytest.raises(TypeError, match="r and out must have x's type"):
        _sums.row_op(x, r, out.astype(np.float64), 4, 5, 0)
    with pytest.raises(ValueError, match="elements"):
        _sums.row_op(x, r[:3], out, 4, 5, 0)
    with pytest.raises(ValueError, match="elements"):
        _sums.row_op(x, r, out, 5, 4, 0)
    with pytest.raises(ValueError, match="bad shape"):
        _sums.row_op(x, r, out, -1, 5, 0)
    with pytest.raises(ValueError, match="op 6"):
        _sums.row_op(x, r, out, 4, 5, 6)
    with pytest.raises(ValueError, match="overlap"):
        _sums.row_op(x, x.reshape(-1)[:4], x, 4, 5, 0)   # out over r
    big = np.ones(21, np.float32)
    with pytest.raises(ValueError, match="overlap"):
        _sums.row_op(big[:20], r, big[1:], 4, 5, 0)      # out shifted over x
    with pytest.raises((TypeError, ValueError, BufferError)):
        _sums.row_op(x[:, ::2], r, out[:, :3].copy(), 4, 3, 0)   # not C-contiguous
    with pytest.raises(TypeError):
        _sums.row_op(x, r, out, 4, 5)   # no op
