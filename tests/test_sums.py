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
