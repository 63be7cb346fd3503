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
    ((2, 70000), (1,)),              # rows split into _PAR_CHUNK blocks (from _PAR_MIN on)
    ((1 << 19,), (0,)),              # one long row, split
    ((70000, 16), (0,)),             # leading rows in blocks and groups
    ((64, 32, 32, 4), (0, 1, 2)),    # batch-norm statistics
    ((100, 3), (0,)),                # few leading rows: one reduce
    ((50, 40, 30), (0, 2)),          # a leading run and a trailing one
])
def test_reducer_same_bits_with_and_without_c(shape, axes, monkeypatch):
    red = reducers.reducer("add", np.float32)
    x = _values(np.random.default_rng(sum(shape)), shape, special=False)
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
