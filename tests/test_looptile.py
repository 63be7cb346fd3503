"""While loops run tiled (interpreter/stablehlo_interpreter/looptile.py).

A loop whose large carried values change only through one fused chain runs
its scalar part first, then every iteration's chain chunk by chunk. The
results must be the plain loop's bit for bit (``STABLEHLO_REF_FUSION=0``:
no chains, no tiling), for the loops JAX emits (threefry) and hand-written
ones; loops where something else reads the big values, or the cond does,
must not be tiled.
"""

from __future__ import annotations

import numpy as np
import pytest
from testkit import assert_same_bits, rotate_round

import stablehlo_interpreter as si
from stablehlo_interpreter import fusion, looptile, pool

N = 3000


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch):
    """Fuse small arrays, in many small chunks (a ragged last one)."""
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 256)
    monkeypatch.setattr(fusion, "CHUNK_BYTES", 2048)
    monkeypatch.setattr(fusion, "MIN_THREAD_CHUNKS", 2)
    monkeypatch.setattr(pool, "busy", lambda threads: False)
    monkeypatch.delenv("STABLEHLO_REF_FUSION", raising=False)


def _count_tiled(monkeypatch, tiling):
    """The list each tiled run of a loop by ``tiling`` (a class with a
    ``_tiled(start, rounds)`` method) appends its number of rounds to."""
    runs = []
    real = tiling._tiled

    def counted(self, start, rounds):
        runs.append(len(rounds))
        return real(self, start, rounds)
    monkeypatch.setattr(tiling, "_tiled", counted)
    return runs


@pytest.fixture
def tiled_runs(monkeypatch):
    """Counts the loops that ran tiled."""
    return _count_tiled(monkeypatch, looptile._Tiling)


def _both(text, args, monkeypatch):
    """(tiled results, plain results): with fusion, and without (no tiling)."""
    got = si.compile(text).run(*[np.copy(a) for a in args])
    monkeypatch.setenv("STABLEHLO_REF_FUSION", "0")
    want = si.compile(text).run(*[np.copy(a) for a in args])
    monkeypatch.delenv("STABLEHLO_REF_FUSION")
    return got, want


def _loop(iterations=4, called=False, cond_reads=False, body_reads=False):
    """A fori_loop over two ``N``-element uint32 values, its body a
    threefry-like chain (add, rotate, xor, add of the counter), in the body
    or in a function it calls (returning an argument as it came, like JAX's
    ``closed_call``, so that it is not inlined). ``cond_reads``: the cond
    also tests an element of the first value; ``body_reads``: the body
    also slices it for a carried scalar."""
    t = f"tensor<{N}xui32>"
    chain, round_function = rotate_round(t)
    if called:
        body = f"""
      %y0, %y1, %k2 = func.call @round(%x0, %x1, %k) : ({t}, {t}, tensor<ui32>) -> ({t}, {t}, tensor<ui32>)"""
        extra = round_function
    else:
        body = chain + "\n      %y0 = stablehlo.add %s, %bk : " + t + "\n      %y1 = stablehlo.add %y, %bk : " + t
        extra = ""
    probe = ""
    if body_reads:
        probe = f"""
      %e = stablehlo.slice %x0 [5:6] : ({t}) -> tensor<1xui32>
      %q = stablehlo.reshape %e : (tensor<1xui32>) -> tensor<ui32>"""
    else:
        probe = "\n      %q = stablehlo.add %acc, %k : tensor<ui32>"
    test = f"""
      %n = stablehlo.constant dense<{iterations}> : tensor<i32>
      %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>"""
    if cond_reads:
        test += f"""
      %e0 = stablehlo.slice %x0 [0:1] : ({t}) -> tensor<1xui32>
      %e1 = stablehlo.reshape %e0 : (tensor<1xui32>) -> tensor<ui32>
      %zz = stablehlo.constant dense<0> : tensor<ui32>
      %p2 = stablehlo.compare NE, %e1, %zz, UNSIGNED : (tensor<ui32>, tensor<ui32>) -> tensor<i1>
      %p3 = stablehlo.and %p, %p2 : tensor<i1>"""
    pred = "%p3" if cond_reads else "%p"
    return f"""
func.func @main(%a: {t}, %b: {t}) -> ({t}, {t}, tensor<ui32>) {{
  %z = stablehlo.constant dense<0> : tensor<i32>
  %u = stablehlo.constant dense<7> : tensor<ui32>
  %r:4 = stablehlo.while(%i = %z, %x0 = %a, %x1 = %b, %acc = %u) : tensor<i32>, {t}, {t}, tensor<ui32>
    cond {{{test}
      stablehlo.return {pred} : tensor<i1>
    }} do {{
      %k = stablehlo.convert %i : (tensor<i32>) -> tensor<ui32>{body}{probe}
      %one = stablehlo.constant dense<1> : tensor<i32>
      %j = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %j, %y0, %y1, %q : tensor<i32>, {t}, {t}, tensor<ui32>
    }}
  return %r#1, %r#2, %r#3 : {t}, {t}, tensor<ui32>
}}{extra}
"""


def _args(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32) for _ in range(2)]


@pytest.mark.parametrize("called", [False, True])
@pytest.mark.parametrize("iterations", [0, 1, 2, 5])
def test_tiled_loop_is_bit_identical(called, iterations, tiled_runs, monkeypatch):
    got, want = _both(_loop(iterations, called), _args(), monkeypatch)
    assert_same_bits(got, want)
    # Zero iterations: nothing to tile (the values come back as they came).
    assert tiled_runs == ([iterations] if iterations else [])


def test_tiled_loop_on_helper_threads(tiled_runs, monkeypatch):
    monkeypatch.setattr(fusion, "THREAD_EXACT_CHAINS", True)
    monkeypatch.setenv("STABLEHLO_REF_THREADS", "3")
    got, want = _both(_loop(5, True), _args(1), monkeypatch)
    assert_same_bits(got, want)
    assert tiled_runs == [5]


@pytest.mark.parametrize("where", ["cond", "body"])
def test_loops_reading_the_big_values_elsewhere_are_not_tiled(where, tiled_runs, monkeypatch):
    text = _loop(4, False, cond_reads=where == "cond", body_reads=where == "body")
    got, want = _both(text, _args(2), monkeypatch)
    assert_same_bits(got, want)
    assert tiled_runs == []


def test_a_strided_carried_value_runs_the_plain_loop(tiled_runs, monkeypatch):
    # The loop's operand is a broadcast of a scalar (a view with stride 0,
    # not C-contiguous): the run takes the plain loop.
    t = f"tensor<{N}xui32>"
    text = _loop(3).replace(
        f"func.func @main(%a: {t}, %b: {t})",
        f"func.func @main(%v: tensor<ui32>, %b: {t})").replace(
        "  %z = stablehlo.constant dense<0> : tensor<i32>\n",
        f"  %a = stablehlo.broadcast_in_dim %v, dims = [] : (tensor<ui32>) -> {t}\n"
        "  %z = stablehlo.constant dense<0> : tensor<i32>\n", 1)
    args = [np.array(0x9E3779B9, np.uint32), _args(3)[1]]
    got, want = _both(text, args, monkeypatch)
    assert_same_bits(got, want)
    assert tiled_runs == []


def test_jax_threefry_is_tiled_and_bit_identical(tiled_runs, monkeypatch):
    jax = pytest.importorskip("jax")
    key = np.asarray(jax.random.key_data(jax.random.key(42)))
    for fn in (lambda k: jax.random.uniform(jax.random.wrap_key_data(k), (N,)),
               lambda k: jax.random.bits(jax.random.wrap_key_data(k), (N,))):
        text = jax.jit(fn).lower(key).as_text()
        got, want = _both(text, [key], monkeypatch)
        assert_same_bits(got, want)
    assert tiled_runs == [5, 5]


def test_tracing_runs_the_plain_loop(tiled_runs, monkeypatch):
    from stablehlo_interpreter import trace
    program = si.compile(_loop(3))
    rec = trace.Recorder()
    with si.use_tracer(rec):
        got = program.run(*_args())
    assert tiled_runs == []
    assert_same_bits(got, program.run(*_args()))
    assert tiled_runs == [3]


def test_a_body_with_another_call_is_not_tiled(tiled_runs, monkeypatch):
    # A second call could reach the chain's function while its calls are
    # recorded: the loop runs plain.
    text = _loop(3, True).replace(
        "\n      %q = stablehlo.add %acc, %k : tensor<ui32>",
        "\n      %q, %k3 = func.call @bump(%acc, %k) : (tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)")
    # (it returns an argument as it came: not inlined, a call of its own)
    text += """
func.func private @bump(%a: tensor<ui32>, %k: tensor<ui32>) -> (tensor<ui32>, tensor<ui32>) {
    %s = stablehlo.add %a, %k : tensor<ui32>
    return %s, %k : tensor<ui32>, tensor<ui32>
}
"""
    got, want = _both(text, _args(4), monkeypatch)
    assert_same_bits(got, want)
    assert tiled_runs == []


def test_real_thresholds_jax_bits_match_xla(tiled_runs, monkeypatch):
    # At the real chunk size (10^5 elements: one full chunk and a ragged
    # one), the tiled loop's bits are XLA CPU's.
    jax = pytest.importorskip("jax")
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 1 << 16)
    monkeypatch.setattr(fusion, "CHUNK_BYTES", 1 << 19)
    key = np.asarray(jax.random.key_data(jax.random.key(7)))
    fn = jax.jit(lambda k: jax.random.bits(jax.random.wrap_key_data(k), (100_000,)))
    cpu = jax.devices("cpu")[0]
    want = np.asarray(jax.device_get(fn(jax.device_put(key, cpu))))
    got = si.compile(fn.lower(key).as_text()).run(key)
    got = got[0] if isinstance(got, (list, tuple)) else got
    assert tiled_runs == [5]
    assert got.dtype == want.dtype and np.array_equal(got, want)


# --------------------------------------------------------------------------
# Several big steps: chains, a gather from a small table, reshapes
# (looptile_steps.py): jnp.searchsorted's binary search, jnp.histogram


@pytest.fixture
def step_tiled_runs(monkeypatch):
    """Counts the loops that ran tiled through several big steps."""
    from stablehlo_interpreter import looptile_steps
    return _count_tiled(monkeypatch, looptile_steps.StepTiling)


def _search_inputs(rng, dt):
    table = np.sort(rng.standard_normal(37)).astype(dt)
    table[5] = table[6] = table[7]          # ties
    table[10] = -0.0
    table[11] = 0.0
    q = rng.standard_normal(N).astype(dt) * 2
    q[:8] = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, table[5], table[-1]]
    return table, q


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("dt", [np.float32, np.float16, np.int32])
def test_jax_searchsorted_is_tiled_and_bit_identical(side, dt, step_tiled_runs, monkeypatch):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    rng = np.random.default_rng(3)
    table, q = _search_inputs(rng, np.float32)
    if np.dtype(dt).kind == "i":
        table, q = (table * 50).astype(dt), (np.nan_to_num(q, posinf=1e3, neginf=-1e3) * 50).astype(dt)
        table.sort()
    else:
        table, q = table.astype(dt), q.astype(dt)
    fn = jax.jit(lambda a, v: jnp.searchsorted(a, v, side=side, method="scan"))
    text = fn.lower(table, q).as_text()
    got, want = _both(text, [table, q], monkeypatch)
    assert_same_bits(got, want)
    assert step_tiled_runs == [6]     # ceil(log2(38)) iterations
    cpu = jax.devices("cpu")[0]
    xla = np.asarray(fn(jax.device_put(table, cpu), jax.device_put(q, cpu)))
    assert np.array_equal(np.asarray(got[0]), xla)


def test_jax_histogram_is_tiled_and_bit_identical(step_tiled_runs, monkeypatch):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    x = np.random.default_rng(5).standard_normal(N).astype(np.float32)
    x[:3] = [0.0, -0.0, x.max()]
    text = jax.jit(lambda v: jnp.histogram(v, 20)).lower(x).as_text()
    got, want = _both(text, [x], monkeypatch)
    assert_same_bits(got, want)
    assert step_tiled_runs == [5]


def _gather_loop(index_type="ui32"):
    """A hand-written loop: idx = (idx * 5 + k) % 97 - 40 (some out of the
    table's range, clamped), v = v + table[idx], both big."""
    t, ti = f"tensor<{N}xf32>", f"tensor<{N}x{index_type}>"
    ti2 = f"tensor<{N}x1x{index_type}>"
    e = index_type
    return f"""
func.func @main(%table: tensor<50xf32>, %v0: {t}, %i0: {ti}) -> ({t}, {ti}) {{
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %r:4 = stablehlo.while(%n = %c0, %tab = %table, %v = %v0, %i = %i0)
      : tensor<i32>, tensor<50xf32>, {t}, {ti}
    cond {{
      %lim = stablehlo.constant dense<5> : tensor<i32>
      %c = stablehlo.compare LT, %n, %lim, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    }} do {{
      %one = stablehlo.constant dense<1> : tensor<i32>
      %n1 = stablehlo.add %n, %one : tensor<i32>
      %k = stablehlo.convert %n : (tensor<i32>) -> tensor<{e}>
      %kb = stablehlo.broadcast_in_dim %k, dims = [] : (tensor<{e}>) -> {ti}
      %c5 = stablehlo.constant dense<5> : {ti}
      %c97 = stablehlo.constant dense<97> : {ti}
      %c40 = stablehlo.constant dense<40> : {ti}
      %m = stablehlo.multiply %i, %c5 : {ti}
      %a = stablehlo.add %m, %kb : {ti}
      %r = stablehlo.remainder %a, %c97 : {ti}
      %i1 = stablehlo.subtract %r, %c40 : {ti}
      %ix = stablehlo.reshape %i1 : ({ti}) -> {ti2}
      %g = "stablehlo.gather"(%tab, %ix) <{{dimension_numbers = #stablehlo.gather<offset_dims = [1], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1>}}> : (tensor<50xf32>, {ti2}) -> tensor<{N}x1x1xf32>
      %g1 = stablehlo.reshape %g : (tensor<{N}x1x1xf32>) -> {t}
      %s = stablehlo.multiply %g1, %v : {t}
      %v1 = stablehlo.add %s, %g1 : {t}
      stablehlo.return %n1, %tab, %v1, %i1 : tensor<i32>, tensor<50xf32>, {t}, {ti}
    }}
  return %r#2, %r#3 : {t}, {ti}
}}
"""


@pytest.mark.parametrize("index_type", ["ui32", "i32", "i64"])
def test_a_gather_loop_with_clamped_indices_is_tiled(index_type, step_tiled_runs, monkeypatch):
    rng = np.random.default_rng(9)
    dt = {"ui32": np.uint32, "i32": np.int32, "i64": np.int64}[index_type]
    table = rng.standard_normal(50).astype(np.float32)
    args = [table, rng.standard_normal(N).astype(np.float32),
            rng.integers(0, 97, N).astype(dt)]
    got, want = _both(_gather_loop(index_type), args, monkeypatch)
    assert_same_bits(got, want)
    assert step_tiled_runs == [5]
    # A strided big value at entry: the plain loop.
    strided = [table, np.repeat(args[1], 2)[::2], args[2]]
    assert not strided[1].flags.c_contiguous
    assert_same_bits(si.compile(_gather_loop(index_type)).run(*strided), want)
    assert step_tiled_runs == [5]


def test_a_gather_loop_whose_cond_reads_a_big_value_is_not_tiled(step_tiled_runs, monkeypatch):
    text = _gather_loop().replace(
        "%c = stablehlo.compare LT, %n, %lim, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>",
        f"%x = stablehlo.slice %v [0:1] : (tensor<{N}xf32>) -> tensor<1xf32>\n"
        "      %x0 = stablehlo.reshape %x : (tensor<1xf32>) -> tensor<f32>\n"
        "      %big = stablehlo.constant dense<1.0e30> : tensor<f32>\n"
        "      %c1 = stablehlo.compare LT, %x0, %big, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
        "      %c2 = stablehlo.compare LT, %n, %lim, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
        "      %c = stablehlo.and %c1, %c2 : tensor<i1>")
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(50).astype(np.float32), rng.standard_normal(N).astype(np.float32),
            rng.integers(0, 97, N).astype(np.uint32)]
    got, want = _both(text, args, monkeypatch)
    assert_same_bits(got, want)
    assert step_tiled_runs == []
