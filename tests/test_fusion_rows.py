"""Row work in fused chains (fusion.py: row members, reduces of inputs).

softmax, logsumexp and layer norm reduce rows, compute on the rows' results
elementwise (``max``/``is_finite``/``select``, ``rsqrt(var + eps)``) and
broadcast those back over the rows. A fused chain whose reduces take whole
rows runs that row work per chunk of rows (row members) when a member of the
chain reads its result, and after the fused step otherwise; with
``fusion.INPUT_SINKS`` a reduce of the chain's input joins it too. Every
result must be the unfused plan's bit for bit (``STABLEHLO_REF_FUSION=0``),
in both numerics modes, with and without the row work
(``STABLEHLO_REF_ROW_FUSION=0``), over shapes of one row, one column and
ragged chunks, and rows of NaN, infinities and signed zeros.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testkit import fuse_small

import stablehlo_interpreter as si
from stablehlo_interpreter import chainvm, compiler, fusion

NP = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16}


def _small(monkeypatch):
    """testkit.fuse_small, the fusion switches at their defaults."""
    fuse_small(monkeypatch)
    monkeypatch.delenv("STABLEHLO_REF_FUSION", raising=False)
    monkeypatch.delenv("STABLEHLO_REF_ROW_FUSION", raising=False)


@pytest.fixture
def small(monkeypatch):
    _small(monkeypatch)


def _t(et, shape):
    return f"tensor<{''.join(f'{d}x' for d in shape)}{et}>"


def _program(kind, et, rows, n):
    """JAX's lowerings of softmax, logsumexp and layer norm over the last
    axis of ``(rows, n)``, written out (constants as broadcasts of scalars:
    folded or not, per the test)."""
    t, r, r1 = _t(et, (rows, n)), _t(et, (rows,)), _t(et, (rows, 1))
    s = f"tensor<{et}>"
    head = [f"func.func @main(%x: {t}) -> ({{res}}) {{",
            f"  %ninf = stablehlo.constant dense<0xFF800000> : {s}" if et == "f32" else
            f"  %ninf = stablehlo.constant dense<0xFFF0000000000000> : {s}" if et == "f64" else
            f"  %ninf = stablehlo.constant dense<0xFF80> : {s}",
            f"  %zero = stablehlo.constant dense<0.0> : {s}",
            f"  %cn = stablehlo.constant dense<{float(n)}> : {s}",
            f"  %eps = stablehlo.constant dense<1.0e-05> : {s}"]

    def reduce(name, x, init, op):
        return (f"  %{name} = stablehlo.reduce(%{x} init: %{init}) applies stablehlo.{op} "
                f"across dimensions = [1] : ({t}, {s}) -> {r}")

    def back(name, v):   # (rows,) -> (rows, 1) -> (rows, n), as JAX does
        return [f"  %{name}1 = stablehlo.broadcast_in_dim %{v}, dims = [0] : ({r}) -> {r1}",
                f"  %{name} = stablehlo.broadcast_in_dim %{name}1, dims = [0, 1] : ({r1}) -> {t}"]
    if kind == "softmax":
        body = [reduce("m", "x", "ninf", "maximum"),
                f"  %ninfr = stablehlo.broadcast_in_dim %ninf, dims = [] : ({s}) -> {r}",
                f"  %m2 = stablehlo.maximum %ninfr, %m : {r}",
                *back("mb", "m2"),
                f"  %d = stablehlo.subtract %x, %mb : {t}",
                f"  %e = stablehlo.exponential %d : {t}",
                reduce("su", "e", "zero", "add"),
                *back("sb", "su"),
                f"  %q = stablehlo.divide %e, %sb : {t}",
                f"  return %q : {t}"]
        res = t
    elif kind == "logsumexp":
        body = [reduce("m", "x", "ninf", "maximum"),
                f"  %ninfr = stablehlo.broadcast_in_dim %ninf, dims = [] : ({s}) -> {r}",
                f"  %m2 = stablehlo.maximum %ninfr, %m : {r}",
                f"  %fin = stablehlo.is_finite %m2 : ({r}) -> {_t('i1', (rows,))}",
                f"  %zr = stablehlo.broadcast_in_dim %zero, dims = [] : ({s}) -> {r}",
                f"  %m3 = stablehlo.select %fin, %m2, %zr : {_t('i1', (rows,))}, {r}",
                *back("mb", "m3"),
                f"  %d = stablehlo.subtract %x, %mb : {t}",
                f"  %e = stablehlo.exponential %d : {t}",
                reduce("su", "e", "zero", "add"),
                f"  %a = stablehlo.abs %su : {r}",
                f"  %l = stablehlo.log %a : {r}",
                f"  %o = stablehlo.add %l, %m3 : {r}",
                f"  return %o : {r}"]
        res = r
    else:   # layer norm: (x - mean) * rsqrt(mean((x - mean)^2) + eps)
        body = [reduce("su", "x", "zero", "add"),
                f"  %sm = stablehlo.broadcast_in_dim %su, dims = [0] : ({r}) -> {r1}",
                f"  %cnr = stablehlo.broadcast_in_dim %cn, dims = [] : ({s}) -> {r1}",
                f"  %mean = stablehlo.divide %sm, %cnr : {r1}",
                f"  %mb = stablehlo.broadcast_in_dim %mean, dims = [0, 1] : ({r1}) -> {t}",
                f"  %d = stablehlo.subtract %x, %mb : {t}",
                f"  %sq = stablehlo.multiply %d, %d : {t}",
                reduce("v", "sq", "zero", "add"),
                f"  %vm = stablehlo.broadcast_in_dim %v, dims = [0] : ({r}) -> {r1}",
                f"  %var = stablehlo.divide %vm, %cnr : {r1}",
                f"  %epsr = stablehlo.broadcast_in_dim %eps, dims = [] : ({s}) -> {r1}",
                f"  %ve = stablehlo.add %var, %epsr : {r1}",
                f"  %rs = stablehlo.rsqrt %ve : {r1}",
                f"  %rb = stablehlo.broadcast_in_dim %rs, dims = [0, 1] : ({r1}) -> {t}",
                f"  %y = stablehlo.multiply %d, %rb : {t}",
                f"  return %y, %rs : {t}, {r1}"]
        res = f"{t}, {r1}"
    return "\n".join(head + body + ["}"]).replace("{res}", res)


def _bits(a):
    return np.ascontiguousarray(np.asarray(a)).reshape(-1).view(np.uint8)


def _values(et, rows, n, rng, special):
    x = rng.standard_normal((rows, n)) * 3
    if special:
        k = int(rng.integers(0, rows))
        choice = rng.integers(0, 5)
        x[k] = [np.nan, np.inf, -np.inf, -0.0, 0.0][choice]   # a whole row
        x[rng.integers(0, rows, 3), rng.integers(0, n, 3)] = rng.choice(
            [np.nan, np.inf, -np.inf, -0.0, 1e30], 3)
    return x.astype(NP[et])


def _run_all(text, x, monkeypatch, numerics, threads, inputs):
    """The fused run (row work on, reduces of inputs per ``inputs``) and the
    fused run without row work, each against the unfused run."""
    monkeypatch.setenv("STABLEHLO_REF_THREADS", threads)
    monkeypatch.setattr(fusion, "INPUT_SINKS", inputs)
    monkeypatch.setenv("STABLEHLO_REF_FUSION", "0")
    want = si.compile(text, numerics=numerics).run(x)
    monkeypatch.delenv("STABLEHLO_REF_FUSION")
    programs = []
    for rows in ("1", "0"):
        monkeypatch.setenv("STABLEHLO_REF_ROW_FUSION", rows)
        p = si.compile(text, numerics=numerics)
        got = p.run(x)
        for i, (g, w) in enumerate(zip(got, want)):
            g, w = np.asarray(g), np.asarray(w)
            assert g.dtype == w.dtype and g.shape == w.shape
            bad = np.flatnonzero(_bits(g) != _bits(w))
            assert bad.size == 0, (f"result {i} differs (row fusion {rows}): "
                                   f"fused {g.reshape(-1)[:4]} unfused {w.reshape(-1)[:4]}")
        programs.append(p)
    monkeypatch.delenv("STABLEHLO_REF_ROW_FUSION")
    return programs[0]


def _chains(p):
    return [f[1] for f in p.functions["main"].block._fast if isinstance(f[1], fusion.FusedChain)]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(["softmax", "logsumexp", "layer_norm"]),
       et=st.sampled_from(["f32", "f64", "bf16"]),
       rows=st.sampled_from([1, 2, 3, 7, 17, 40]),
       n=st.sampled_from([1, 5, 64, 100, 257, 700]),
       numerics=st.sampled_from(["accurate", "spec"]),
       threads=st.sampled_from(["1", "2"]),
       inputs=st.booleans(), fold=st.booleans(), special=st.booleans(),
       seed=st.integers(0, 2**16))
def test_row_programs_bit_for_bit(kind, et, rows, n, numerics, threads, inputs, fold, special,
                                  seed):
    # One row (a row value of one element), one column (rows of one
    # element), chunks that end inside the row range (256-element chunks
    # of rows of 100, 257, 700: a single row longer than a chunk), rows
    # split into blocks by large float sums (40 x 700 f32: no row work),
    # constants folded (one value broadcast) or computed (row-shaped
    # inputs of the row members).
    with pytest.MonkeyPatch.context() as mp:
        _small(mp)
        mp.setattr(compiler, "_FOLD_ENABLED", fold)
        x = _values(et, rows, n, np.random.default_rng(seed), special)
        _run_all(_program(kind, et, rows, n), x, mp, numerics, threads, inputs)


@pytest.mark.parametrize("inputs", [False, True])
def test_layer_norm_is_one_fused_step_with_its_row_work(inputs, small, monkeypatch):
    # mean((x - m)^2)'s rows reach rsqrt(var + eps) and the multiply in the
    # chunk that reduced them: x - m is never written out; with the
    # reduces of inputs the mean's sum joins too (one step in all).
    monkeypatch.setattr(compiler, "_FOLD_ENABLED", True)
    x = _values("f32", 37, 53, np.random.default_rng(3), True)
    p = _run_all(_program("layer_norm", "f32", 37, 53), x, monkeypatch, "accurate", "1",
                 inputs)
    names = [s.op.name for s in p.functions["main"].block._planned]
    (chain,) = _chains(p)
    assert [r[0].name for r in chain.row_plan] == ["stablehlo.divide"] * (1 + inputs) + [
        "stablehlo.add", "stablehlo.rsqrt"]
    assert chain.rowvals and "stablehlo.multiply" not in names
    # Else the mean's sum, its broadcasts and divide run before.
    assert names == ["fusion"] if inputs else names == [
        "stablehlo.reduce", "stablehlo.broadcast_in_dim", "stablehlo.divide",
        "stablehlo.broadcast_in_dim", "fusion"]


@pytest.mark.parametrize("inputs", [False, True])
def test_logsumexp_row_work_after_the_last_reduce_runs_once(inputs, small, monkeypatch):
    # log(|sum|) + max reads nothing a chunk makes after the sum: it runs
    # after the fused step over all rows, not once per chunk; the max's
    # row work (maximum, is_finite, select) feeds the subtract, so with
    # the reduces of inputs it runs per chunk.
    x = _values("f32", 40, 64, np.random.default_rng(4), True)
    p = _run_all(_program("logsumexp", "f32", 40, 64), x, monkeypatch, "accurate", "2", inputs)
    names = [s.op.name for s in p.functions["main"].block._planned]
    assert names[-3:] == ["stablehlo.abs", "stablehlo.log", "stablehlo.add"]
    (chain,) = _chains(p)
    assert [r[0].name for r in chain.row_plan] == (
        ["stablehlo.maximum", "stablehlo.is_finite", "stablehlo.select"] if inputs else [])
    assert len(chain.sinks) == (2 if inputs else 1)


@pytest.mark.parametrize("op,joins", [("add", True), ("power", False)])
def test_row_ops_reading_rows_made_outside(op, joins, small, monkeypatch):
    # A row-shaped value made outside the group (here a computed broadcast
    # of eps) reaches exact row members only, sliced per chunk: an inexact
    # kernel's loop could differ on the slice's layout. power(var, eps)
    # then runs after the fused step, and so does the multiply reading
    # its rows (x - m is written out).
    text = _program("layer_norm", "f32", 37, 53).replace(
        "%ve = stablehlo.add %var, %epsr", f"%ve = stablehlo.{op} %var, %epsr")
    monkeypatch.setattr(compiler, "_FOLD_ENABLED", False)
    x = np.abs(_values("f32", 37, 53, np.random.default_rng(5), False))
    p = _run_all(text, x, monkeypatch, "accurate", "1", False)
    names = [s.op.name for s in p.functions["main"].block._planned]
    chains = _chains(p)
    if joins:
        assert [r[0].name for r in chains[0].row_plan] == [
            "stablehlo.divide", "stablehlo.add", "stablehlo.rsqrt"]
        assert "stablehlo.multiply" not in names
    else:
        assert not chains[0].row_plan and f"stablehlo.{op}" in names


@pytest.mark.parametrize("kind", ["softmax", "logsumexp", "layer_norm"])
@pytest.mark.parametrize("et", ["f32", "f64"])
@pytest.mark.parametrize("built", [True, False])
def test_rows_broadcast_arithmetic_with_and_without_c(kind, et, built, small, monkeypatch):
    # x - max, e / sum, d * rsqrt(...): _sums.row_op where it is built,
    # numpy's ufunc over the broadcast view where not -- the same bits.
    # A transposed operand (chunks not C-contiguous) takes numpy too.
    monkeypatch.setattr(compiler, "_FOLD_ENABLED", True)
    if not built:
        monkeypatch.setattr(fusion, "_sums", None)
    # (exp as a kernel member: as an FM instruction it would join x - max
    # in one block-machine run where the chunks are contiguous, and
    # _row_op would not be called; the default runs are compared in the
    # other tests.)
    monkeypatch.setattr(chainvm, "_FM_LOOPS", ())
    calls = []
    real = fusion._row_op
    monkeypatch.setattr(fusion, "_row_op", lambda *a: calls.append(1) or real(*a))
    x = _values(et, 40, 70, np.random.default_rng(6), True)
    p = _run_all(_program(kind, et, 40, 70), x, monkeypatch, "accurate", "2", False)
    assert calls and any(m.rowop for c in _chains(p) for m in c.plan)
    _run_all(_program(kind, et, 40, 70), np.asfortranarray(x), monkeypatch, "accurate", "1",
             False)


def test_error_in_a_row_member_names_its_op(small, monkeypatch):
    # A kernel failing on the chunk's rows is reported as the unfused run
    # reports it: the op and its location, not the fused step.
    from stablehlo_interpreter import registry
    monkeypatch.setattr(compiler, "_FOLD_ENABLED", True)
    # (restored after the test)
    monkeypatch.setitem(registry.KERNELS, "stablehlo.rsqrt", registry.KERNELS["stablehlo.rsqrt"])

    def wrap(fn):
        def broken(*args):
            raise ValueError("boom")
        return broken
    si.wrap_kernel("stablehlo.rsqrt", wrap)
    p = si.compile(_program("layer_norm", "f32", 37, 53))
    with pytest.raises(si.ExecutionError) as e:
        p.run(_values("f32", 37, 53, np.random.default_rng(8), False))
    assert e.value.op_name == "stablehlo.rsqrt" and "ValueError: boom" in str(e.value)
    (chain,) = _chains(p)
    assert [r[0].name for r in chain.row_plan][-1] == "stablehlo.rsqrt"
