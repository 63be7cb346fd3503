"""The plan rewrite that runs elementwise ops on a gather's result on the
gathered table instead (table_gathers.py): the same bits as the ops on the
gathered values, for the values jnp.searchsorted canonicalises (-0, NaNs of
any sign and payload, infinities), and only where the rewrite applies."""

from __future__ import annotations

import numpy as np
import pytest
from testkit import assert_same_bits

import stablehlo_interpreter as si
from stablehlo_interpreter import table_gathers

N = 3000
T = 37


@pytest.fixture
def rewrites(monkeypatch):
    """Rewrites at the test's sizes; counts the gathers rewritten."""
    monkeypatch.setattr(table_gathers, "MIN_ELEMENTS", 1024)
    done = []
    real = table_gathers._rewritten

    def counted(steps, *args):
        done.append(steps[args[1]].op.name)
        return real(steps, *args)
    monkeypatch.setattr(table_gathers, "_rewritten", counted)
    return done


def _run(text, args, monkeypatch, rewrite):
    with monkeypatch.context() as m:
        if not rewrite:
            m.setattr(table_gathers, "MIN_ELEMENTS", 1 << 62)
        return si.compile(text).run(*[np.copy(a) for a in args])


def _table(dt=np.float32):
    t = np.linspace(-3, 3, T).astype(dt)
    nan = np.array([0x7FC00001, 0xFFC00000], np.uint32).view(np.float32).astype(dt)
    t[[3, 4, 5, 6, 7, 8]] = [-0.0, 0.0, nan[0], nan[1], np.inf, -np.inf]
    return t


def _indices(seed=0):
    # Some out of range: the gather clamps them.
    return np.random.default_rng(seed).integers(-3, T + 3, (N, 1)).astype(np.int32)


def _module(view=True, gathered_read_elsewhere=False, dt="f32"):
    g = "%v" if view else "%g"
    gtype = f"tensor<{N}x{dt}>" if view else f"tensor<{N}x1x{dt}>"
    reshape = f"%v = stablehlo.reshape %g : (tensor<{N}x1x{dt}>) -> {gtype}" if view else ""
    # (%q is no constant: an op reading it and the gathered value stays.)
    other = f"stablehlo.add %c, %q : {gtype}\n      %r = stablehlo.multiply %r0, {g} : {gtype}" \
        if gathered_read_elsewhere else f"stablehlo.add %c, %q : {gtype}"
    ret = "%r" if gathered_read_elsewhere else "%r0"
    return f"""
    func.func @main(%t: tensor<{T}x{dt}>, %i: tensor<{N}x1xi32>, %q: {gtype}) -> {gtype} {{
      %g = "stablehlo.gather"(%t, %i) <{{dimension_numbers = #stablehlo.gather<
          offset_dims = [1], start_index_map = [0], index_vector_dim = 1>,
          indices_are_sorted = false, slice_sizes = array<i64: 1>}}>
          : (tensor<{T}x{dt}>, tensor<{N}x1xi32>) -> tensor<{N}x1x{dt}>
      {reshape}
      %zero = stablehlo.constant dense<0.0> : {gtype}
      %nan = stablehlo.constant dense<0x7FC00000> : {gtype}
      %half = stablehlo.constant dense<0.5> : {gtype}
      %e = stablehlo.compare EQ, {g}, %zero, FLOAT : ({gtype}, {gtype}) -> tensor<{N}x{'1x' if not view else ''}i1>
      %z = stablehlo.select %e, %zero, {g} : tensor<{N}x{'1x' if not view else ''}i1>, {gtype}
      %n = stablehlo.compare NE, {g}, {g}, FLOAT : ({gtype}, {gtype}) -> tensor<{N}x{'1x' if not view else ''}i1>
      %s = stablehlo.select %n, %nan, %z : tensor<{N}x{'1x' if not view else ''}i1>, {gtype}
      %m = stablehlo.multiply %s, %half : {gtype}
      %c = stablehlo.exponential %m : {gtype}
      %r0 = {other}
      return {ret} : {gtype}
    }}"""


@pytest.mark.parametrize("view", [True, False])
def test_ops_on_a_small_table_gather_run_on_the_table(view, rewrites, monkeypatch):
    t, i = _table(), _indices()
    q = np.random.default_rng(1).standard_normal((N,) if view else (N, 1)).astype(np.float32)
    text = _module(view)
    got = _run(text, [t, i, q], monkeypatch, True)
    assert rewrites == ["stablehlo.gather"]
    want = _run(text, [t, i, q], monkeypatch, False)
    assert_same_bits(got, want)
    # And what the ops give on the gathered values, computed here (the
    # bits: the unrewritten runs above).
    g = t[np.clip(i[:, 0], 0, T - 1)].reshape(q.shape)
    canon = np.where(g != g, np.float32(np.nan), np.where(g == 0, np.float32(0), g))
    r = np.asarray(got[0])
    nan = np.isnan(canon)
    assert np.isnan(r[nan]).all()
    np.testing.assert_allclose(r[~nan], np.exp(canon[~nan] * np.float32(0.5)) + q[~nan],
                               rtol=1e-6, atol=1e-6)
    traced = si.compile(text).run(t, i, q, tracer=si.Recorder(keep_values=False))
    assert_same_bits(got, traced)   # the observed run executes every op as written


def test_a_gathered_value_read_elsewhere_is_not_rewritten(rewrites, monkeypatch):
    t, i = _table(), _indices(2)
    q = np.zeros(N, np.float32)
    text = _module(gathered_read_elsewhere=True)
    got = _run(text, [t, i, q], monkeypatch, True)
    assert rewrites == []
    assert_same_bits(got, _run(text, [t, i, q], monkeypatch, False))


def test_a_large_table_is_not_rewritten(rewrites, monkeypatch):
    monkeypatch.setattr(table_gathers, "MAX_TABLE_FRACTION", N)
    t, i = _table(), _indices(3)
    q = np.zeros(N, np.float32)
    text = _module()
    _run(text, [t, i, q], monkeypatch, True)
    assert rewrites == []


@pytest.mark.parametrize("side", ["left", "right"])
def test_jax_searchsorted_in_a_small_table(side, rewrites, monkeypatch):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    t = _table()
    t = np.sort(t[~np.isnan(t)])   # with -0, +0 and the infinities
    q = np.random.default_rng(4).standard_normal(N).astype(np.float32) * 3
    q[:6] = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0]
    fn = jax.jit(lambda a, v: jnp.searchsorted(a, v, side=side, method="scan"))
    text = fn.lower(t, q).as_text()
    got = _run(text, [t, q], monkeypatch, True)
    assert rewrites == ["stablehlo.gather"]
    assert_same_bits(got, _run(text, [t, q], monkeypatch, False))
    cpu = jax.devices("cpu")[0]
    xla = np.asarray(fn(jax.device_put(t, cpu), jax.device_put(q, cpu)))
    assert np.array_equal(np.asarray(got[0]), xla)
