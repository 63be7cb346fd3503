"""Reduces fed by fused elementwise chains (fusion.py sinks, reducers.RowPlan).

A reduce over the trailing axes of a value an elementwise chain computes
reduces each chunk of the chain while it is in cache. The result must be
the unfused plan's bit for bit (``STABLEHLO_REF_FUSION=0``): every float
type (the float64 accumulation of f32/f16/bf16, float64's pairwise sums,
complex), integers with wraparound, booleans, max/min with NaN and signed
zeros, a -0 init, rows split into blocks (large float sums), ragged shapes;
and the JAX programs the issue names (softmax, logsumexp, gelu, layer norm,
batch-norm statistics, where + sum) in f32, bf16 and f64, in both numerics
modes.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from testkit import fuse_small

import stablehlo_interpreter as si
from stablehlo_interpreter import compiler, fusion, pool
from stablehlo_interpreter.ops import reducers

NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64,
      "complex<f32>": np.complex64, "i32": np.int32, "ui8": np.uint8, "i1": np.bool_}


@pytest.fixture
def small(monkeypatch):
    """testkit.fuse_small, constant folding off."""
    fuse_small(monkeypatch)
    monkeypatch.setattr(compiler, "_FOLD_ENABLED", False)
    monkeypatch.delenv("STABLEHLO_REF_FUSION", raising=False)


def _t(et, shape):
    return f"tensor<{''.join(f'{d}x' for d in shape)}{et}>"


def _bits(a):
    a = np.ascontiguousarray(np.asarray(a)).reshape(-1)
    return a.view(np.uint8)


def _run_both(text, args, monkeypatch, threads="1", numerics=None):
    monkeypatch.setenv("STABLEHLO_REF_THREADS", threads)
    fused = si.compile(text, numerics=numerics)
    got = fused.run(*args)
    monkeypatch.setenv("STABLEHLO_REF_FUSION", "0")
    want = si.compile(text, numerics=numerics).run(*args)
    monkeypatch.delenv("STABLEHLO_REF_FUSION")
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        bad = np.flatnonzero(_bits(g) != _bits(w))
        assert bad.size == 0, f"result {i} differs: fused {g.reshape(-1)[:4]} unfused {w.reshape(-1)[:4]}"
    return fused


def _sinks(program, func="main"):
    return [s for f in program.functions[func].block._fast
            if isinstance(f[1], fusion.FusedChain) for s in f[1].sinks]


def _chain_reduce(et, shape, dims, kind, store):
    """``reduce(kind, f(x, y), init)`` over ``dims``, f an elementwise chain
    (a transcendental for floats); ``store``: f's value is a result too."""
    t = _t(et, shape)
    out_shape = [d for i, d in enumerate(shape) if i not in dims]
    rt = _t(et, out_shape)
    if et == "i1":
        body = [f"%e = stablehlo.xor %x, %y : {t}"]
    elif et in ("i32", "ui8"):
        body = [f"%m = stablehlo.multiply %x, %y : {t}", f"%e = stablehlo.add %m, %x : {t}"]
    else:
        body = [f"%d = stablehlo.subtract %x, %y : {t}", f"%e = stablehlo.exponential %d : {t}"]
    results = ([("%e", t)] if store else []) + [("%r", rt)]
    return "\n".join([
        f"func.func @main(%x: {t}, %y: {t}, %z: tensor<{et}>) -> "
        f"({', '.join(ty for _, ty in results)}) {{",
        *["  " + b for b in body],
        f"  %r = stablehlo.reduce(%e init: %z) applies stablehlo.{kind} across dimensions = "
        f"{list(dims)} : ({t}, tensor<{et}>) -> {rt}",
        f"  return {', '.join(n for n, _ in results)} : {', '.join(ty for _, ty in results)}",
        "}"])


def _values(et, shape, rng):
    dt = NP[et]
    n = int(np.prod(shape))
    if et == "i1":
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    if et in ("i32", "ui8"):
        info = np.iinfo(dt)
        return rng.integers(info.min, int(info.max) + 1, n, dtype=np.int64).astype(dt).reshape(shape)
    x = rng.standard_normal(n) * 2
    if et == "complex<f32>":
        return (x + 1j * rng.standard_normal(n)).astype(dt).reshape(shape)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 100.0])
    x[rng.integers(0, n, max(1, n // 200))] = rng.choice(specials, max(1, n // 200))
    return x.astype(dt).reshape(shape)


# (shape, dims): rows of whole trailing axes, split rows (a row longer than
# _PAR_CHUNK in an array of at least _PAR_MIN), full reductions, ragged sizes.
SHAPES = [((37, 53), (1,)), ((6, 7, 41), (1, 2)), ((6, 7, 41), (2,)), ((3001,), (0,)),
          ((3, 1500), (1,)), ((5, 4, 300), (0, 1, 2)), ((300,), (0,))]


@pytest.mark.parametrize("et", ["f32", "f16", "bf16", "f64"])
@pytest.mark.parametrize("shape,dims", SHAPES)
@pytest.mark.parametrize("kind", ["add", "maximum", "multiply"])
def test_float_reduce_of_chain(et, shape, dims, kind, small, monkeypatch):
    rng = np.random.default_rng(hash((et, shape, kind)) % 2**32)
    x, y = _values(et, shape, rng), _values(et, shape, rng)
    y[..., :3] = np.array(np.nan, NP[et]) if kind != "add" else y[..., :3]
    for init in (0.0, -0.0, -np.inf if kind == "maximum" else 1.5):
        for store in (False, True):
            text = _chain_reduce(et, shape, dims, kind, store)
            p = _run_both(text, [x, y, np.array(init, NP[et])], monkeypatch)
            (sink,) = _sinks(p)
            plan = sink[1]
            # Float sums/products of f32/f16/bf16 split long rows into blocks.
            split = et != "f64" and kind != "maximum" and plan.n > 512 and x.size >= 2048
            assert (plan.block < plan.n) == split


@pytest.mark.parametrize("shape,dims", [((37, 53), (1,)), ((3001,), (0,))])
def test_negative_zero_sums_and_signed_zero_extremes(shape, dims, small, monkeypatch):
    # Rows of -0 only (their sum with a -0 init is -0), zero maxima of both
    # signs: the sign rules of reducers apply per row, also across blocks.
    # negate(x - 0): -0 where x is +0, +0 where x is -0.
    x = np.zeros(shape, np.float32)
    x[..., 1::7] = -0.0
    x.reshape(-1)[:200] = 0.0
    for kind, et in (("add", "f32"), ("maximum", "f32"), ("minimum", "f32")):
        text = _chain_reduce(et, shape, dims, kind, False).replace(
            "stablehlo.exponential %d", "stablehlo.negate %d")
        for init in (-0.0, 0.0):
            _run_both(text, [x, np.zeros(shape, np.float32), np.array(init, np.float32)],
                      monkeypatch)


@pytest.mark.parametrize("et,kind", [("i32", "add"), ("i32", "multiply"), ("i32", "maximum"),
                                     ("ui8", "add"), ("ui8", "minimum"), ("i1", "or"),
                                     ("i1", "and"), ("complex<f32>", "add")])
@pytest.mark.parametrize("shape,dims", [((37, 53), (1,)), ((3001,), (0,)), ((3, 1500), (1,))])
def test_integer_bool_complex_reduce_of_chain(et, kind, shape, dims, small, monkeypatch):
    rng = np.random.default_rng(7)
    x, y = _values(et, shape, rng), _values(et, shape, rng)
    init = np.array(1 if et != "i1" else True, NP[et])
    p = _run_both(_chain_reduce(et, shape, dims, kind, False), [x, y, init], monkeypatch, "2")
    assert len(_sinks(p)) == 1


LEADING = [((53, 37), (0,)), ((300, 5), (0,)), ((17, 3, 41, 2), (0, 1, 2)), ((9, 5, 7), (0,)),
           ((2100, 3), (0,)), ((1000, 1), (0,))]


@pytest.mark.parametrize("et", ["f32", "bf16", "f16", "f64", "i32"])
@pytest.mark.parametrize("shape,dims", LEADING)
def test_leading_axes(et, shape, dims, small, monkeypatch):
    # Float sums over leading axes are fed in reducers' two-level schedule
    # (LeadPlan: groups of blocks of rows, the rows left over); float64 and
    # exact kinds keep their own schedule (the chain writes the value).
    rng = np.random.default_rng(3)
    x, y = _values(et, shape, rng), _values(et, shape, rng)
    for init in (0.0, -0.0):
        for store in (False, True):
            p = _run_both(_chain_reduce(et, shape, dims, "add", store),
                          [x, y, np.array(init, NP[et])], monkeypatch, "2")
            assert len(_sinks(p)) == (et not in ("f64", "i32"))
    if et != "i32":   # every term -0 (negate(+0 - 0)): the sums are -0 with a -0 init
        z = np.zeros(shape, NP[et])
        z[-1, ...] = -0.0
        _run_both(_chain_reduce(et, shape, dims, "add", False).replace(
            "stablehlo.exponential %d", "stablehlo.negate %d"),
            [z, np.zeros_like(z), np.array(-0.0, NP[et])], monkeypatch)


TRANSPOSED = """
func.func @main(%x: tensor<40x75xf32>, %y: tensor<75x40xf32>) -> (tensor<f32>, tensor<40xf32>) {
  %t = stablehlo.transpose %y, dims = [1, 0] : (tensor<75x40xf32>) -> tensor<40x75xf32>
  %0 = stablehlo.multiply %x, %t : tensor<40x75xf32>
  %1 = stablehlo.sine %0 : tensor<40x75xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%1 init: %z) applies stablehlo.add across dimensions = [0, 1] : (tensor<40x75xf32>, tensor<f32>) -> tensor<f32>
  %m = stablehlo.reduce(%1 init: %z) applies stablehlo.maximum across dimensions = [1] : (tensor<40x75xf32>, tensor<f32>) -> tensor<40xf32>
  return %s, %m : tensor<f32>, tensor<40xf32>
}
"""


@pytest.mark.parametrize("threads", ["1", "2"])
def test_chunks_that_are_not_the_pieces(threads, small, monkeypatch):
    # A transposed operand makes the chunks row ranges; the full sum splits
    # its one row into blocks, which row chunks cannot give: that reduce
    # gets the whole value (reducers' own schedule), the row maximum its rows.
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((40, 75)).astype(np.float32),
            rng.standard_normal((75, 40)).astype(np.float32)]
    p = _run_both(TRANSPOSED, args, monkeypatch, threads)
    assert len(_sinks(p)) == 2


def _jax_programs(jnp, jax, dtype):
    def layer_norm(x):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(v + 1e-5)
    return {
        "softmax": (jax.nn.softmax, (311, 257)),
        "logsumexp": (lambda x: jax.nn.logsumexp(x, axis=1), (311, 257)),
        "gelu": (jax.nn.gelu, (70001,)),
        "layer_norm": (layer_norm, (257, 311)),
        "bn_stats": (lambda x: (x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))), (16, 17, 19, 16)),
        "where_sum": (lambda x: jnp.sum(jnp.where(x > 0, x, 0.0).astype(dtype)), (70001,)),
        "where_row_sum": (lambda x: jnp.where(x > 0, x * x, x).sum(axis=1), (313, 255)),
    }


@pytest.mark.parametrize("numerics", ["accurate", "spec"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
def test_jax_programs(dtype, numerics, monkeypatch):
    # Real thresholds (fusion.MIN_ELEMENTS, reducers' blocks), JAX's own
    # lowerings; every program's fused run against its unfused run.
    import jax
    import jax.numpy as jnp
    monkeypatch.setattr(pool, "busy", lambda threads: False)
    rng = np.random.default_rng(11)
    dt = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
    with jax.enable_x64(dtype == "float64"):
        for name, (fn, shape) in _jax_programs(jnp, jax, dt).items():
            x = (rng.standard_normal(shape) * 3).astype(dt)
            x.reshape(-1)[:: 997] = np.array(-0.0, dt)
            text = jax.jit(fn).lower(x).as_text()
            for threads in ("1", "2"):
                p = _run_both(text, [x], monkeypatch, threads, numerics)
                if name in ("softmax", "logsumexp", "layer_norm", "where_row_sum") \
                        and numerics == "accurate":
                    assert _sinks(p), name


CALLS = """
func.func @main(%x: tensor<40x30xf32>, %y: tensor<40x30xf32>) -> (tensor<40xf32>, tensor<40x30xf32>, tensor<40x30xf32>) {
  %0 = call @helper(%x, %y) : (tensor<40x30xf32>, tensor<40x30xf32>) -> tensor<40x30xf32>
  %1 = call @outer(%0, %x) : (tensor<40x30xf32>, tensor<40x30xf32>) -> tensor<40x30xf32>
  %2 = call @same(%1) : (tensor<40x30xf32>) -> tensor<40x30xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%2 init: %z) applies stablehlo.add across dimensions = [1] : (tensor<40x30xf32>, tensor<f32>) -> tensor<40xf32>
  %3 = stablehlo.add %x, %y : tensor<40x30xf32>
  return %s, %3, %2 : tensor<40xf32>, tensor<40x30xf32>, tensor<40x30xf32>
}
func.func private @helper(%a: tensor<40x30xf32>, %b: tensor<40x30xf32>) -> tensor<40x30xf32> {
  %c = stablehlo.constant dense<0.5> : tensor<f32>
  %cb = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<40x30xf32>
  %0 = stablehlo.multiply %a, %cb : tensor<40x30xf32>
  %1 = stablehlo.sine %0 : tensor<40x30xf32>
  %2 = stablehlo.add %1, %b : tensor<40x30xf32>
  return %2 : tensor<40x30xf32>
}
func.func private @outer(%a: tensor<40x30xf32>, %b: tensor<40x30xf32>) -> tensor<40x30xf32> {
  %0 = call @helper(%a, %b) : (tensor<40x30xf32>, tensor<40x30xf32>) -> tensor<40x30xf32>
  %1 = stablehlo.exponential %0 : tensor<40x30xf32>
  return %1 : tensor<40x30xf32>
}
func.func private @same(%a: tensor<40x30xf32>) -> tensor<40x30xf32> {
  return %a : tensor<40x30xf32>
}
"""


@pytest.mark.parametrize("threads", ["1", "2"])
def test_small_calls_are_inlined_and_fuse(threads, small, monkeypatch):
    # @helper (twice, once inside @outer) is inlined: its constant joins the
    # caller's frame, %x and %y stay alive after it (they are read later),
    # and the chain across the calls feeds the reduce. @same returns its
    # argument: it stays a call.
    rng = np.random.default_rng(8)
    args = [rng.standard_normal((40, 30)).astype(np.float32) for _ in range(2)]
    p = _run_both(CALLS, args, monkeypatch, threads)
    planned = p.functions["main"].block._planned
    names = [s.op.name for s in planned]
    assert names == ["fusion", "func.call", "stablehlo.reduce", "stablehlo.add"]
    assert [m.op.name.split(".")[1] for m in planned[0].fn.plan].count("sine") == 2
    assert planned[1].op.attrs["callee"] == "same"
    again = p.run(*args)   # a second run of the planned frame
    for g, w in zip(again, si.compile(CALLS).run(*args)):
        assert (_bits(g) == _bits(w)).all()


BROKEN_CALLEE = """
func.func @main(%x: tensor<8xf32>) -> tensor<2xf32> {
  %0 = call @helper(%x) : (tensor<8xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
func.func private @helper(%a: tensor<8xf32>) -> tensor<2xf32> {
  %0 = stablehlo.slice %a [1:3] : (tensor<8xf32>) -> tensor<2xf32> loc("helper.py":7:8)
  return %0 : tensor<2xf32>
}
"""


def test_error_in_an_inlined_step_names_its_op(monkeypatch):
    from stablehlo_interpreter import registry

    def broken(fn):
        def run(*a):
            raise ValueError("boom")
        return run
    monkeypatch.setitem(registry.KERNELS, "stablehlo.slice", registry.KERNELS["stablehlo.slice"])
    si.wrap_kernel("stablehlo.slice", broken)
    messages = []
    for fusion_on in ("1", "0"):
        monkeypatch.setenv("STABLEHLO_REF_FUSION", fusion_on)
        p = si.compile(BROKEN_CALLEE)
        with pytest.raises(si.ExecutionError) as e:
            p.run(np.ones(8, np.float32))
        assert e.value.op_name == "stablehlo.slice" and e.value.location == "helper.py:7:8"
        messages.append(str(e.value))
        planned = [s.op.name for s in p.functions["main"].block._planned]
        assert planned == (["stablehlo.slice"] if fusion_on == "1" else ["func.call"])
    assert messages[0] == messages[1]


def test_error_in_a_fed_reduce_names_the_reduce(small, monkeypatch):
    text = _chain_reduce("f32", (37, 53), (1,), "add", False)
    p = si.compile(text)
    args = [np.ones((37, 53), np.float32), np.ones((37, 53), np.float32), np.float32(0)]
    p.run(*args)
    (sink,) = _sinks(p)

    def broken(self, v, lo, hi):
        raise ValueError("boom")
    monkeypatch.setattr(reducers._RowReduction, "add", broken)
    with pytest.raises(si.ExecutionError) as e:
        p.run(*args)
    assert e.value.op_name == "stablehlo.reduce" and "ValueError: boom" in str(e.value)


def _vector_chain(shape, dims, bdim):
    t = _t("f32", shape)
    vt = _t("f32", (shape[bdim],))
    out = _t("f32", [d for i, d in enumerate(shape) if i not in dims])
    return f"""
func.func @main(%x: {t}, %v: {vt}) -> {out} {{
  %b = stablehlo.broadcast_in_dim %v, dims = [{bdim}] : ({vt}) -> {t}
  %0 = stablehlo.subtract %x, %b : {t}
  %1 = stablehlo.multiply %0, %0 : {t}
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%1 init: %z) applies stablehlo.add across dimensions = {list(dims)} : ({t}, tensor<f32>) -> {out}
  return %s : {out}
}}
"""


@pytest.mark.parametrize("shape,dims,bdim", [((3, 1500), (1,), 1), ((2100, 5), (0,), 1),
                                             ((300, 5), (0,), 1), ((7, 300), (1,), 1)])
def test_tiled_vector_operands(shape, dims, bdim, small, monkeypatch):
    # A vector broadcast over rows is tiled into a buffer as long as the
    # longest piece: group pieces of leading rows start at multiples of it,
    # whole rows of (7, 300) are chunks of 3 rows. A row longer than a chunk
    # (3, 1500) makes the chunks row ranges, which are not the blocks of the
    # split rows: that reduce gets the whole value.
    rng = np.random.default_rng(9)
    args = [rng.standard_normal(shape).astype(np.float32),
            rng.standard_normal(shape[bdim]).astype(np.float32)]
    p = _run_both(_vector_chain(shape, dims, bdim), args, monkeypatch)
    (chain,) = [f[1] for f in p.functions["main"].block._fast if isinstance(f[1], fusion.FusedChain)]
    views = chain._layout([args[0], np.broadcast_to(args[1], shape)], 1,
                          chain.sinks[0][1].pieces())
    assert views[3] == (shape == (3, 1500))
    assert (any(views[1]) and views[4]) == (shape != (3, 1500))


REPEATED = """
func.func @main(%x: tensor<40x30xf32>) -> (tensor<30xf32>, tensor<30xf32>, tensor<30xf32>, tensor<30xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r1 = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [0] : (tensor<40x30xf32>, tensor<f32>) -> tensor<30xf32>
  %c = stablehlo.constant dense<4.0> : tensor<30xf32>
  %d = stablehlo.divide %r1, %c : tensor<30xf32>
  %e = stablehlo.exponential %d : tensor<30xf32>
  %z2 = stablehlo.constant dense<0.0> : tensor<f32>
  %r2 = stablehlo.reduce(%x init: %z2) applies stablehlo.add across dimensions = [0] : (tensor<40x30xf32>, tensor<f32>) -> tensor<30xf32>
  %one = stablehlo.constant dense<1.0> : tensor<f32>
  %r3 = stablehlo.reduce(%x init: %one) applies stablehlo.add across dimensions = [0] : (tensor<40x30xf32>, tensor<f32>) -> tensor<30xf32>
  %r4 = stablehlo.reduce(%x init: %z) applies stablehlo.maximum across dimensions = [0] : (tensor<40x30xf32>, tensor<f32>) -> tensor<30xf32>
  %f = stablehlo.add %r2, %e : tensor<30xf32>
  return %f, %r2, %r3, %r4 : tensor<30xf32>, tensor<30xf32>, tensor<30xf32>, tensor<30xf32>
}
"""


def test_repeated_reduces_are_shared(monkeypatch):
    # %r2 repeats %r1 (an init constant of the same value): it copies %r1's
    # result, which the divide then must not update in place (its last use
    # moves to %r2). %r3 (another init) and %r4 (another body) reduce again.
    rng = np.random.default_rng(12)
    x = rng.standard_normal((40, 30)).astype(np.float32)
    p = _run_both(REPEATED, [x], monkeypatch)
    planned = p.functions["main"].block._planned
    shared = [s for s in planned if s.fn is fusion._same]
    assert len(shared) == 1 and len([s for s in planned if s.op.name == "stablehlo.reduce"]) == 4
    divide = [s for s in planned if s.op.name == "stablehlo.divide"][0]
    assert shared[0].ins[0] not in divide.dead and shared[0].ins[0] in shared[0].dead
    for _ in range(2):   # the frame, run again
        got = p.run(x)
        assert (_bits(got[1]) == _bits(np.add.reduce(x, axis=0, dtype=np.float64).astype(np.float32))).all()


REPEATED_VALUES = """
func.func @main(%x: tensor<300x200xf32>) -> (tensor<300x200xf32>, tensor<300x200xf32>, tensor<300x200xf32>, tensor<300x200xi1>, tensor<300x200xi1>) {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s1 = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [1] : (tensor<300x200xf32>, tensor<f32>) -> tensor<300xf32>
  %b1 = stablehlo.broadcast_in_dim %s1, dims = [0] : (tensor<300xf32>) -> tensor<300x200xf32>
  %d1 = stablehlo.subtract %x, %b1 : tensor<300x200xf32>
  %e1 = stablehlo.exponential %d1 : tensor<300x200xf32>
  %one = stablehlo.constant dense<1.0> : tensor<300x200xf32>
  %f1 = stablehlo.add %e1, %one : tensor<300x200xf32>
  %s2 = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [1] : (tensor<300x200xf32>, tensor<f32>) -> tensor<300xf32>
  %b2 = stablehlo.broadcast_in_dim %s2, dims = [0] : (tensor<300xf32>) -> tensor<300x200xf32>
  %d2 = stablehlo.subtract %x, %b2 : tensor<300x200xf32>
  %e2 = stablehlo.exponential %d2 : tensor<300x200xf32>
  %one2 = stablehlo.constant dense<1.0> : tensor<300x200xf32>
  %g = stablehlo.multiply %e2, %one2 : tensor<300x200xf32>
  %e3 = stablehlo.exponential %d2 : tensor<300x200xf32>
  %gt = stablehlo.compare GT, %d1, %x : (tensor<300x200xf32>, tensor<300x200xf32>) -> tensor<300x200xi1>
  %lt = stablehlo.compare LT, %d2, %x : (tensor<300x200xf32>, tensor<300x200xf32>) -> tensor<300x200xi1>
  return %f1, %g, %e3, %gt, %lt : tensor<300x200xf32>, tensor<300x200xf32>, tensor<300x200xf32>, tensor<300x200xi1>, tensor<300x200xi1>
}
"""


@pytest.mark.parametrize("threads", ["1", "2"])
def test_repeated_values_are_shared(threads, monkeypatch):
    # %s2 repeats %s1 (a copy), so %b2, %d2 and %e2 repeat %b1, %d1, %e1:
    # their readers read the first ones, which live until then (%e1's own
    # last reader, the add, must not update it in place: %g reads it
    # after). %e3 repeats %e1 but is a result: it stays, its own array. The
    # compares differ in their direction: both stay.
    rng = np.random.default_rng(13)
    x = rng.standard_normal((300, 200)).astype(np.float32)
    p = _run_both(REPEATED_VALUES, [x], monkeypatch, threads)
    names = [s.op.name for s in p.functions["main"].block.steps]
    planned = p.functions["main"].block._planned
    ops = [m.name for s in planned for m in (s.op.members if s.op.name == "fusion" else [s.op])]
    assert names.count("stablehlo.subtract") == 2 and ops.count("stablehlo.subtract") == 1
    assert names.count("stablehlo.exponential") == 3 and ops.count("stablehlo.exponential") == 2
    assert ops.count("stablehlo.compare") == 2
    for _ in range(2):   # the frame, run again
        got = p.run(x)
        e = np.exp((x - np.add.reduce(x, axis=1, dtype=np.float64).astype(np.float32)[:, None])
                   .astype(np.float64)).astype(np.float32)
        assert not np.shares_memory(got[1], got[2])
        assert (_bits(got[2]) == _bits(e)).all() and (_bits(got[1]) == _bits(e)).all()


def test_share_values_keeps_frees_after_the_last_read():
    """Every slot a step reads is an argument, a constant or made by an
    earlier step, and is not freed before; each slot is freed once, and no
    result is freed."""
    p = si.compile(REPEATED_VALUES)
    p.run(np.zeros((300, 200), np.float32))
    block = p.functions["main"].block
    steps = fusion.share_values(fusion.share_reduces(block.steps, block.template),
                                block.template, block.result_slots)
    assert len(steps) < len(block.steps)
    freed = [d for s in steps for d in s.dead]
    assert len(freed) == len(set(freed)) and not set(freed) & set(block.result_slots)
    made = set(block.arg_slots) | {0}
    for i, s in enumerate(steps):
        for slot in s.ins:
            assert slot in made or block.template[slot] is not None, slot
            assert all(slot not in t.dead for t in steps[:i]), f"{slot} read after its free"
        made.add(s.out)


@pytest.mark.parametrize("kind", ["maximum", "minimum", "add"])
def test_spec_numerics(kind, small, monkeypatch):
    # Spec mode: exact reduces (max/min) are fed like in accurate mode; its
    # float sums keep the reference's sequential order, unfed.
    rng = np.random.default_rng(13)
    x, y = _values("f32", (37, 53), rng), _values("f32", (37, 53), rng)
    p = _run_both(_chain_reduce("f32", (37, 53), (1,), kind, True),
                  [x, y, np.float32(-np.inf if kind == "maximum" else 0.0)], monkeypatch,
                  numerics="spec")
    assert len(_sinks(p)) == (kind != "add")


def _normalize(et, shape, kind, reader, extra):
    """softmax's shape: ``e = exp(x - y)``, ``s = reduce(e)`` over the last
    axis, ``e / broadcast(s)`` (through a size-1 axis, as JAX does);
    ``reader`` is the op reading the rows broadcast back; ``extra`` returns
    the broadcast rows too (they are then made again after the fused step)."""
    t = _t(et, shape)
    kept = shape[:-1]
    rt, mid = _t(et, kept), _t(et, kept + (1,))
    dims = list(range(len(kept)))
    read = (f"%q = stablehlo.{reader} %e, %b : {t}" if reader != "exponential"
            else f"%q = stablehlo.exponential %b : {t}")
    results = [("%q", t), ("%s", rt)] + ([("%b", t)] if extra else [])
    return "\n".join([
        f"func.func @main(%x: {t}, %y: {t}, %z: tensor<{et}>) -> "
        f"({', '.join(ty for _, ty in results)}) {{",
        f"  %d = stablehlo.subtract %x, %y : {t}",
        f"  %e = stablehlo.exponential %d : {t}",
        f"  %s = stablehlo.reduce(%e init: %z) applies stablehlo.{kind} across dimensions = "
        f"[{len(kept)}] : ({t}, tensor<{et}>) -> {rt}",
        f"  %m = stablehlo.broadcast_in_dim %s, dims = {dims} : ({rt}) -> {mid}",
        f"  %b = stablehlo.broadcast_in_dim %m, dims = {dims + [len(kept)]} : ({mid}) -> {t}",
        f"  {read}",
        f"  return {', '.join(n for n, _ in results)} : {', '.join(ty for _, ty in results)}",
        "}"])


@pytest.mark.parametrize("et", ["f32", "bf16", "f64"])
@pytest.mark.parametrize("shape", [(37, 53), (6, 7, 41), (3, 1500)])
@pytest.mark.parametrize("kind,reader", [("add", "divide"), ("maximum", "subtract"),
                                         ("add", "exponential")])
@pytest.mark.parametrize("extra", [False, True])
def test_rows_broadcast_back(et, shape, kind, reader, extra, small, monkeypatch):
    # The reduce's finished rows of each chunk reach the exact op that reads
    # them in the same chunk (softmax's divide): one fused step, exp's values
    # never written out. An inexact reader (exp) runs after the fused step; a
    # reduce splitting its rows into blocks (3, 1500) does not finish rows
    # per chunk, and the broadcast runs after it too.
    rng = np.random.default_rng(14)
    x, y = _values(et, shape, rng), _values(et, shape, rng)
    for threads in ("1", "2"):
        p = _run_both(_normalize(et, shape, kind, reader, extra),
                      [x, y, np.array(0, NP[et])], monkeypatch, threads)
        chains = [f[1] for f in p.functions["main"].block._fast
                  if isinstance(f[1], fusion.FusedChain)]
        split = shape == (3, 1500) and kind == "add" and et != "f64"
        fed_back = reader != "exponential" and not split
        assert bool(chains[0].rowvals) == fed_back
        names = [s.op.name for s in p.functions["main"].block._planned]
        assert names.count("stablehlo.broadcast_in_dim") == (0 if fed_back and not extra else 2)


def test_rows_broadcast_back_of_strided_chunks(small, monkeypatch):
    # A transposed operand: chunks of leading rows, the rows a broadcast view.
    text = _normalize("f32", (40, 75), "add", "divide", False).replace(
        "%y: tensor<40x75xf32>", "%w: tensor<75x40xf32>").replace(
        "  %d = stablehlo.subtract %x, %y",
        "  %y = stablehlo.transpose %w, dims = [1, 0] : (tensor<75x40xf32>) -> tensor<40x75xf32>\n"
        "  %d = stablehlo.subtract %x, %y")
    rng = np.random.default_rng(15)
    args = [rng.standard_normal((40, 75)).astype(np.float32),
            rng.standard_normal((75, 40)).astype(np.float32), np.float32(0)]
    for threads in ("1", "2"):
        p = _run_both(text, args, monkeypatch, threads)
        (chain,) = [f[1] for f in p.functions["main"].block._fast
                    if isinstance(f[1], fusion.FusedChain)]
        assert chain.rowvals


@pytest.mark.parametrize("second", ["of_reduce", "of_rows", "of_rows_read"])
def test_a_reduce_of_what_the_chain_does_not_make_is_not_fed(second, small, monkeypatch):
    # A reduce of a fed reduce's result, or of its rows broadcast back, reads
    # a value no chain member makes chunk by chunk: it runs after the fused
    # step (fed, it failed with a KeyError, or summed nothing when a member
    # also read the rows).
    et, shape = "f32", (37, 53)
    t, rt = _t(et, shape), _t(et, shape[:1])
    mid = _t(et, (37, 1))
    if second == "of_reduce":
        tail = [f"  %s2 = stablehlo.reduce(%s init: %z) applies stablehlo.add across "
                f"dimensions = [0] : ({rt}, tensor<{et}>) -> tensor<{et}>",
                f"  return %s2 : tensor<{et}>"]
        res = f"tensor<{et}>"
    else:
        tail = [f"  %m = stablehlo.broadcast_in_dim %s, dims = [0] : ({rt}) -> {mid}",
                f"  %b = stablehlo.broadcast_in_dim %m, dims = [0, 1] : ({mid}) -> {t}",
                f"  %s2 = stablehlo.reduce(%b init: %z) applies stablehlo.add across "
                f"dimensions = [1] : ({t}, tensor<{et}>) -> {rt}"]
        if second == "of_rows_read":
            tail += [f"  %q = stablehlo.divide %e, %b : {t}", f"  return %s2, %q : {rt}, {t}"]
            res = f"{rt}, {t}"
        else:
            tail += [f"  return %s2 : {rt}"]
            res = rt
    text = "\n".join([
        f"func.func @main(%x: {t}, %y: {t}, %z: tensor<{et}>) -> ({res}) {{",
        f"  %d = stablehlo.subtract %x, %y : {t}",
        f"  %e = stablehlo.exponential %d : {t}",
        f"  %s = stablehlo.reduce(%e init: %z) applies stablehlo.add across dimensions = [1]"
        f" : ({t}, tensor<{et}>) -> {rt}"] + tail + ["}"])
    rng = np.random.default_rng(15)
    x, y = _values(et, shape, rng), _values(et, shape, rng)
    p = _run_both(text, [x, y, np.array(0, NP[et])], monkeypatch)
    assert len(_sinks(p)) == 1


@pytest.mark.parametrize("et", ["f32", "f16", "f64", "bf16"])
def test_square_of_a_difference_in_place(et, small, monkeypatch):
    """chlo.square is numpy's one-operand square for IEEE floats: without
    the block machine the fused chain calls it directly, squaring a dying
    f32/f64 difference in place; the machine runs it as a multiply of the
    value by itself, with the subtract (bn_stats' variance). The bits are
    np.multiply(d, d)'s (NaN, infinities, -0)."""
    monkeypatch.setenv("STABLEHLO_REF_CHAIN_VM", "0")
    shape = (64, 40)
    t = _t(et, shape)
    text = f"""func.func @main(%x: {t}, %y: {t}) -> ({t}, {_t(et, (64,))}) {{
  %d = stablehlo.subtract %x, %y : {t}
  %s = chlo.square %d : {t} -> {t}
  %z = stablehlo.constant dense<0.0> : tensor<{et}>
  %r = stablehlo.reduce(%s init: %z) applies stablehlo.add across dimensions = [1]
      : ({t}, tensor<{et}>) -> {_t(et, (64,))}
  %u = stablehlo.add %s, %x : {t}
  return %u, %r : {t}, {_t(et, (64,))}
}}"""
    rng = np.random.default_rng(7)
    x, y = _values(et, shape, rng), _values(et, shape, rng)
    program = _run_both(text, [x, y], monkeypatch)
    (chain,) = [f[1] for f in program.functions["main"].block._fast
                if isinstance(f[1], fusion.FusedChain)]
    (sq,) = [m for m in chain.plan if m.op.name == "chlo.square"]
    assert (sq.ufunc is not None) == (et != "bf16")
    assert (sq.inplace is not None) == (et in ("f32", "f64"))
    d = np.subtract(x, y)
    with np.errstate(all="ignore"):
        want = np.add(np.multiply(d, d), x)
    got = program.run(x, y)[0]
    np.testing.assert_array_equal(_bits(got), _bits(want))
    monkeypatch.delenv("STABLEHLO_REF_CHAIN_VM")
    program = _run_both(text, [x, y], monkeypatch)
    (chain,) = [f[1] for f in program.functions["main"].block._fast
                if isinstance(f[1], fusion.FusedChain)]
    runs = [[chain.plan[k].op.name for k in run] for run, _, _ in chain.segments.values()]
    assert runs == ([["stablehlo.subtract", "chlo.square"]] if et in ("f32", "f64") else [])
    np.testing.assert_array_equal(_bits(program.run(x, y)[0]), _bits(want))
