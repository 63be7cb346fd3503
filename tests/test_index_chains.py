"""index_chains.py: JAX's index wrap and bounds mask run as one range-tested step.

The rewritten plan must give the unrewritten plan's bits for indices that
are all in range (the fast answer), negative (the wrap's fallback) and out
of range (the mask's fallback), in both numerics modes; chains whose values
are read elsewhere, or that are small, stay as they are.
"""

import numpy as np
import pytest
from testkit import assert_same_bits

import stablehlo_interpreter as shi
from stablehlo_interpreter import index_chains

N = 1 << 15   # above index_chains.MIN_ELEMENTS

# JAX's negative-index wrap of %i (into 100 elements), its result %4; the
# templates below put it where they say {wrap}.
WRAP = """  %c = stablehlo.constant dense<0> : tensor<i32>
  %0 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<{n}xi32>
  %1 = stablehlo.compare LT, %i, %0, SIGNED : (tensor<{n}xi32>, tensor<{n}xi32>) -> tensor<{n}xi1>
  %c_0 = stablehlo.constant dense<100> : tensor<i32>
  %2 = stablehlo.broadcast_in_dim %c_0, dims = [] : (tensor<i32>) -> tensor<{n}xi32>
  %3 = stablehlo.add %i, %2 : tensor<{n}xi32>
  %4 = stablehlo.select %1, %3, %i : tensor<{n}xi1>, tensor<{n}xi32>
"""

# x[idx] as JAX lowers it: the negative-index wrap, then a one-axis gather.
GATHER = """
func.func public @main(%x: tensor<100xf32>, %i: tensor<{n}xi32>) -> tensor<{n}xf32> {{
{wrap}  %5 = stablehlo.broadcast_in_dim %4, dims = [0] : (tensor<{n}xi32>) -> tensor<{n}x1xi32>
  %6 = "stablehlo.gather"(%x, %5) <{{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1>}}> : (tensor<100xf32>, tensor<{n}x1xi32>) -> tensor<{n}xf32>
  return %6 : tensor<{n}xf32>
}}
""".replace("{wrap}", WRAP)

# jnp.take_along_axis(x, i, axis=1) as JAX lowers it: the wrap, the bounds
# mask reduced over the one-element index vector, the gather, a NaN fill.
TAKE_ALONG = """
func.func public @main(%x: tensor<{r}x{c}xf32>, %i: tensor<{r}x{c}xi32>) -> tensor<{r}x{c}xf32> {{
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<{r}x{c}xi32>
  %1 = stablehlo.compare LT, %i, %0, SIGNED : (tensor<{r}x{c}xi32>, tensor<{r}x{c}xi32>) -> tensor<{r}x{c}xi1>
  %c_0 = stablehlo.constant dense<{c}> : tensor<i32>
  %2 = stablehlo.broadcast_in_dim %c_0, dims = [] : (tensor<i32>) -> tensor<{r}x{c}xi32>
  %3 = stablehlo.add %i, %2 : tensor<{r}x{c}xi32>
  %4 = stablehlo.select %1, %3, %i : tensor<{r}x{c}xi1>, tensor<{r}x{c}xi32>
  %5 = stablehlo.reshape %4 : (tensor<{r}x{c}xi32>) -> tensor<{r}x{c}x1xi32>
  %c_1 = stablehlo.constant dense<{cm1}> : tensor<1xi32>
  %c_2 = stablehlo.constant dense<0> : tensor<i32>
  %6 = stablehlo.broadcast_in_dim %c_2, dims = [] : (tensor<i32>) -> tensor<{r}x{c}x1xi32>
  %7 = stablehlo.compare GE, %5, %6, SIGNED : (tensor<{r}x{c}x1xi32>, tensor<{r}x{c}x1xi32>) -> tensor<{r}x{c}x1xi1>
  %8 = stablehlo.broadcast_in_dim %c_1, dims = [2] : (tensor<1xi32>) -> tensor<1x1x1xi32>
  %9 = stablehlo.broadcast_in_dim %8, dims = [0, 1, 2] : (tensor<1x1x1xi32>) -> tensor<{r}x{c}x1xi32>
  %10 = stablehlo.compare LE, %5, %9, SIGNED : (tensor<{r}x{c}x1xi32>, tensor<{r}x{c}x1xi32>) -> tensor<{r}x{c}x1xi1>
  %11 = stablehlo.and %7, %10 : tensor<{r}x{c}x1xi1>
  %c_3 = stablehlo.constant dense<true> : tensor<i1>
  %12 = stablehlo.reduce(%11 init: %c_3) applies stablehlo.and across dimensions = [2] : (tensor<{r}x{c}x1xi1>, tensor<i1>) -> tensor<{r}x{c}xi1>
  %13 = "stablehlo.gather"(%x, %5) <{{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [1], operand_batching_dims = [0], start_indices_batching_dims = [0], start_index_map = [1], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 1>}}> : (tensor<{r}x{c}xf32>, tensor<{r}x{c}x1xi32>) -> tensor<{r}x{c}xf32>
  %cst = stablehlo.constant dense<0x7FC00000> : tensor<f32>
  %14 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<{r}x{c}xf32>
  %15 = stablehlo.select %12, %13, %14 : tensor<{r}x{c}xi1>, tensor<{r}x{c}xf32>
  return %15 : tensor<{r}x{c}xf32>
}}
"""

# A two-component bounds mask (x.at[i, j].get(mode="fill") of a 5x7 array):
# one bound per component, the reduce over the index vector kept.
MASK2 = """
func.func public @main(%i: tensor<{n}x2xi64>) -> (tensor<{n}xi1>, tensor<{n}x2xi1>) {{
  %c = stablehlo.constant dense<{lo}> : tensor<i64>
  %0 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i64>) -> tensor<{n}x2xi64>
  %1 = stablehlo.compare GE, %i, %0, SIGNED : (tensor<{n}x2xi64>, tensor<{n}x2xi64>) -> tensor<{n}x2xi1>
  %c_1 = stablehlo.constant dense<[4, 6]> : tensor<2xi64>
  %2 = stablehlo.broadcast_in_dim %c_1, dims = [1] : (tensor<2xi64>) -> tensor<{n}x2xi64>
  %3 = stablehlo.compare LE, %i, %2, SIGNED : (tensor<{n}x2xi64>, tensor<{n}x2xi64>) -> tensor<{n}x2xi1>
  %4 = stablehlo.and %3, %1 : tensor<{n}x2xi1>
  %c_3 = stablehlo.constant dense<true> : tensor<i1>
  %5 = stablehlo.reduce(%4 init: %c_3) applies stablehlo.and across dimensions = [1] : (tensor<{n}x2xi1>, tensor<i1>) -> tensor<{n}xi1>
  %6 = stablehlo.not %4 : tensor<{n}x2xi1>
  return %5, %6 : tensor<{n}xi1>, tensor<{n}x2xi1>
}}
"""

# x.at[i].add(v) as JAX lowers it: the wrap, then a scatter-add.
SCATTER_ADD = """
func.func public @main(%x: tensor<100xf32>, %i: tensor<{n}xi32>, %v: tensor<{n}xf32>) -> tensor<100xf32> {{
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<{n}xi32>
  %1 = stablehlo.compare LT, %i, %0, SIGNED : (tensor<{n}xi32>, tensor<{n}xi32>) -> tensor<{n}xi1>
  %c_0 = stablehlo.constant dense<100> : tensor<i32>
  %2 = stablehlo.broadcast_in_dim %c_0, dims = [] : (tensor<i32>) -> tensor<{n}xi32>
  %3 = stablehlo.add %2, %i : tensor<{n}xi32>
  %4 = stablehlo.select %1, %3, %i : tensor<{n}xi1>, tensor<{n}xi32>
  %5 = stablehlo.broadcast_in_dim %4, dims = [0] : (tensor<{n}xi32>) -> tensor<{n}x1xi32>
  %6 = "stablehlo.scatter"(%x, %5, %v) <{{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}}> ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }}) : (tensor<100xf32>, tensor<{n}x1xi32>, tensor<{n}xf32>) -> tensor<100xf32>
  return %6 : tensor<100xf32>
}}
"""

# The wrap's mask is also a result: the chain must stay as it is.
SHARED = """
func.func public @main(%i: tensor<{n}xi32>) -> (tensor<{n}xi32>, tensor<{n}xi1>) {{
{wrap}  return %4, %1 : tensor<{n}xi32>, tensor<{n}xi1>
}}
""".replace("{wrap}", WRAP)


def _rewritten(prog):
    """Names of the rewritten steps in the entry block's plan."""
    blk = prog.function().block
    blk._fast_steps()
    return sorted(getattr(s.fn, "__name__", "") for s in blk._planned
                  if getattr(s.fn, "__name__", "") in ("wrap_negative", "in_bounds"))


def _both(text, args, numerics, monkeypatch):
    """(rewritten plan's results, unrewritten plan's results, rewritten steps)."""
    prog = shi.compile(text, numerics=numerics)
    got = prog.run(*args)
    got2 = prog.run(*args)   # the plan (made at the first run) reused
    steps = _rewritten(prog)
    with monkeypatch.context() as m:
        m.setattr(index_chains, "rewrite", lambda steps, template, results: steps)
        plain = shi.compile(text, numerics=numerics)
        want = plain.run(*args)
        assert _rewritten(plain) == []
    for a, b in zip(got, got2):
        np.testing.assert_array_equal(a, b)
    return got, want, steps


_INDEX_CASES = ["in_range", "negative", "out_of_range"]


def _indices(case, shape, n, seed=0):
    rng = np.random.default_rng(seed)
    if case == "in_range":
        return rng.integers(0, n, shape).astype(np.int32)
    if case == "negative":
        return rng.integers(-n, n, shape).astype(np.int32)
    return rng.integers(-3 * n, 3 * n, shape).astype(np.int32)


@pytest.mark.parametrize("numerics", ["accurate", "spec"])
@pytest.mark.parametrize("case", _INDEX_CASES)
def test_gather_wrap(case, numerics, monkeypatch):
    x = np.random.default_rng(1).standard_normal(100).astype(np.float32)
    i = _indices(case, N, 100)
    got, want, steps = _both(GATHER.format(n=N), (x, i), numerics, monkeypatch)
    assert_same_bits(got, want)
    assert steps == ["wrap_negative"]
    # x[i] with Python's negative indices and the gather's clamp.
    np.testing.assert_array_equal(got[0], x[np.clip(np.where(i < 0, i + 100, i), 0, 99)])


@pytest.mark.parametrize("numerics", ["accurate", "spec"])
@pytest.mark.parametrize("case", _INDEX_CASES)
def test_take_along_axis_chains(case, numerics, monkeypatch):
    r, c = 64, 512
    x = np.random.default_rng(2).standard_normal((r, c)).astype(np.float32)
    i = _indices(case, (r, c), c, seed=3)
    text = TAKE_ALONG.format(r=r, c=c, cm1=c - 1)
    got, want, steps = _both(text, (x, i), numerics, monkeypatch)
    assert_same_bits(got, want)
    assert steps == ["in_bounds", "wrap_negative"]
    wrapped = np.where(i < 0, i + c, i)
    ok = (wrapped >= 0) & (wrapped < c)
    expect = np.where(ok, np.take_along_axis(x, np.clip(wrapped, 0, c - 1), axis=1), np.nan)
    np.testing.assert_array_equal(got[0], expect.astype(np.float32))


@pytest.mark.parametrize("lo", [0, 1])
@pytest.mark.parametrize("case", ["in_range", "row_out", "column_out", "negative", "below"])
def test_mask_per_component_bounds(case, lo, monkeypatch):
    """Bounds from 0 (JAX's: one unsigned max) and from 1 (min and max)."""
    rng = np.random.default_rng(4)
    i = np.stack([rng.integers(lo, 5, N), rng.integers(lo, 7, N)], axis=1).astype(np.int64)
    if case == "row_out":
        i[17, 0] = 5     # in range for the column bound, not the row's
    elif case == "column_out":
        i[-1, 1] = 7
    elif case == "negative":
        i[3, 1] = -1
    elif case == "below":
        i[5, 0] = lo - 1
    got, want, steps = _both(MASK2.format(n=N, lo=lo), (i,), "accurate", monkeypatch)
    assert_same_bits(got, want)
    # The mask is read twice (the reduce and the not): only the compares
    # and the and are replaced.
    assert steps == ["in_bounds"]
    ok = (i >= lo) & (i <= np.array([4, 6]))
    np.testing.assert_array_equal(got[0], ok.all(axis=1))
    np.testing.assert_array_equal(got[1], ~ok)


@pytest.mark.parametrize("case", _INDEX_CASES)
def test_scatter_add_wrap(case, monkeypatch):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(100).astype(np.float32)
    v = rng.standard_normal(N).astype(np.float32)
    i = _indices(case, N, 100, seed=6)
    got, want, steps = _both(SCATTER_ADD.format(n=N), (x, i, v), "accurate", monkeypatch)
    assert_same_bits(got, want)
    assert steps == ["wrap_negative"]


def test_scatter_reads_the_wraps_largest_index(monkeypatch):
    # x.at[i].add(v): the scatter's bounds test takes the largest index the
    # wrap read in the same run (none when it wrapped negative ones);
    # indices above the operand still drop their updates. Runs of one plan
    # alternate the cases.
    known = []
    real = index_chains.with_index_max

    def spy(indices, umax, fn, *args):
        known.append(umax)
        return real(indices, umax, fn, *args)
    monkeypatch.setattr(index_chains, "with_index_max", spy)
    rng = np.random.default_rng(11)
    x = rng.standard_normal(100).astype(np.float32)
    v = rng.standard_normal(N).astype(np.float32)
    text = SCATTER_ADD.format(n=N)
    prog = shi.compile(text)
    with monkeypatch.context() as m:
        m.setattr(index_chains, "rewrite", lambda steps, template, results: steps)
        plain = shi.compile(text)
        plain.run(x, np.zeros(N, np.int32), v)   # its plan made unrewritten
    known.clear()
    cases = {"in_range": rng.integers(0, 100, N), "above": rng.integers(0, 130, N),
             "negative": rng.integers(-100, 100, N), "far_below": rng.integers(-300, 100, N)}
    for case in ["in_range", "above", "negative", "in_range", "far_below", "above"]:
        i = cases[case].astype(np.int32)
        known.clear()
        got = prog.run(x, i, v)
        assert_same_bits(got, plain.run(x, i, v))
        assert known == ([int(i.max())] if i.min() >= 0 else []), case


def test_shared_and_small_chains_stay(monkeypatch):
    i = _indices("negative", N, 100)
    got, want, steps = _both(SHARED.format(n=N), (i,), "accurate", monkeypatch)
    assert_same_bits(got, want)
    assert steps == []    # the mask is a result too
    small = 64
    x = np.arange(100, dtype=np.float32)
    j = _indices("negative", small, 100)
    got, want, steps = _both(GATHER.format(n=small), (x, j), "accurate", monkeypatch)
    assert_same_bits(got, want)
    assert steps == []


def test_rewrite_without_fusion(monkeypatch):
    """The rewrite does not depend on fusion (STABLEHLO_REF_FUSION=0)."""
    monkeypatch.setenv("STABLEHLO_REF_FUSION", "0")
    x = np.random.default_rng(7).standard_normal(100).astype(np.float32)
    i = _indices("negative", N, 100)
    got, want, steps = _both(GATHER.format(n=N), (x, i), "accurate", monkeypatch)
    assert_same_bits(got, want)
    assert steps == ["wrap_negative"]


def test_chains_of_jax_lowerings(monkeypatch):
    """The chains as the installed JAX emits them are rewritten (a JAX
    release that lowers indexing differently shows here, not as a silent
    loss of speed), and the results are JAX's semantics."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    rng = np.random.default_rng(9)
    x2 = rng.standard_normal((32, 1024)).astype(np.float32)
    i2 = rng.integers(-1024, 1024, (32, 1024)).astype(np.int32)
    x1 = rng.standard_normal(1000).astype(np.float32)
    i1 = rng.integers(-1000, 1000, N).astype(np.int32)
    v1 = rng.standard_normal(N).astype(np.float32)
    cases = [
        (lambda x, i: jnp.take_along_axis(x, i, axis=1), (x2, i2),
         ["in_bounds", "wrap_negative"], np.take_along_axis(x2, np.where(i2 < 0, i2 + 1024, i2), 1)),
        (lambda x, i: x[i], (x1, i1), ["wrap_negative"], x1[i1]),
        (lambda x, i, v: x.at[i].add(v), (x1, i1, v1), ["wrap_negative"], None),
    ]
    for fn, args, names, expect in cases:
        text = jax.jit(fn).lower(*args).as_text()
        got, want, steps = _both(text, args, "accurate", monkeypatch)
        assert_same_bits(got, want)
        assert steps == names, text
        if expect is not None:
            np.testing.assert_array_equal(got[0], expect)


# torch.gather(x, 1, i) as PyTorch/XLA lowers it: the row index is an iota
# concatenated to the (converted) column indices.
TORCH_GATHER = """
func.func public @main(%x: tensor<{r}x{c}xf32>, %i: tensor<{ir}x{c}xi64>) -> tensor<{ir}x{c}xf32> {{
  %0 = stablehlo.iota dim = 0 : tensor<{ir}x{c}x1x{it}>
  %1 = stablehlo.convert %i : (tensor<{ir}x{c}xi64>) -> tensor<{ir}x{c}x{it}>
  %2 = stablehlo.reshape %1 : (tensor<{ir}x{c}x{it}>) -> tensor<{ir}x{c}x1x{it}>
  %3 = stablehlo.concatenate {parts}, dim = 2 : (tensor<{ir}x{c}x1x{it}>, tensor<{ir}x{c}x1x{it}>) -> tensor<{ir}x{c}x2x{it}>
  %4 = "stablehlo.gather"(%x, %3) <{{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0, 1], start_index_map = [{sim}], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 1>}}> : (tensor<{r}x{c}xf32>, tensor<{ir}x{c}x2x{it}>) -> tensor<{ir}x{c}xf32>
  return %4 : tensor<{ir}x{c}xf32>
}}
"""


def _has_concatenate(prog):
    blk = prog.function().block
    blk._fast_steps()
    return any(s.op is not None and s.op.name == "stablehlo.concatenate" for s in blk._planned)


@pytest.mark.parametrize("iota_first", [True, False])
@pytest.mark.parametrize("case", ["in_range", "out_of_range", "short_rows", "narrow_iota"])
def test_iota_concatenated_gather(case, iota_first, monkeypatch):
    r, c = 300, 128
    ir = 200 if case == "short_rows" else r
    it = "ui8" if case == "narrow_iota" else "ui32"
    rng = np.random.default_rng(10)
    x = rng.standard_normal((r, c)).astype(np.float32)
    i = rng.integers(-5 if case == "out_of_range" else 0,
                     c + 5 if case == "out_of_range" else c, (ir, c))
    text = TORCH_GATHER.format(r=r, c=c, ir=ir, it=it,
                               parts="%0, %2" if iota_first else "%2, %0",
                               sim="0, 1" if iota_first else "1, 0")
    got, want, _ = _both(text, (x, i), "accurate", monkeypatch)
    assert_same_bits(got, want)
    prog = shi.compile(text)
    # Rewritten only where the iota is the whole batch position: as long
    # as the operand's rows, in a type that holds every row number.
    assert _has_concatenate(prog) == (case in ("short_rows", "narrow_iota"))
    if case != "narrow_iota":
        cols = np.clip(i.astype(np.int64) % (1 << 32), 0, c - 1)  # convert to ui32, clamp
        np.testing.assert_array_equal(got[0], np.take_along_axis(x[:ir], cols, axis=1))


def test_gather_after_its_bounds_mask_skips_the_clamp(monkeypatch):
    # take_along_axis: when the mask finds every index in [0, c - 1], the
    # gather of those same indices runs without its clamp (KernelInfo.
    # in_range); other indices, in later runs of the same plan, clamp again.
    from stablehlo_interpreter.ops import gather_scatter
    r, c = 64, 512
    x = np.random.default_rng(4).standard_normal((r, c)).astype(np.float32)
    text = TAKE_ALONG.format(r=r, c=c, cm1=c - 1)
    prog = shi.compile(text)
    unclamped = []
    real = gather_scatter._GatherPlan.__call__

    def spy(self, operand, indices, in_range=False):
        unclamped.append(in_range)
        return real(self, operand, indices, in_range)
    monkeypatch.setattr(gather_scatter._GatherPlan, "__call__", spy)
    with monkeypatch.context() as m:
        m.setattr(index_chains, "rewrite", lambda steps, template, results: steps)
        plain = shi.compile(text)
    for case, seed in [("in_range", 5), ("out_of_range", 6), ("in_range", 7), ("negative", 8)]:
        i = _indices(case, (r, c), c, seed=seed)
        unclamped.clear()
        got = prog.run(x, i)
        assert unclamped == [case != "out_of_range"]   # (negative ones wrap into range)
        assert_same_bits(got, plain.run(x, i))
    blk = prog.function().block
    assert "gather_checked" in [getattr(s.fn, "__name__", "") for s in blk._planned]


def test_mask_reads_the_wraps_largest_index(monkeypatch):
    # take_along_axis: the wrap reads the indices' largest unsigned value
    # (no negatives when it is at most the signed maximum) and the bounds
    # mask of the same values, reshaped, compares it with its bound instead
    # of reading the indices again; after a wrap of negative indices the
    # mask reads its own. Runs of one plan alternate the cases.
    import threading as real_threading
    reads = []

    class Local(real_threading.local):
        def __getattribute__(self, name):
            value = super().__getattribute__(name)
            if name == "umax":
                reads.append(value)
            return value

    class Threading:
        local = Local
    monkeypatch.setattr(index_chains, "threading", Threading)
    r, c = 64, 512
    x = np.random.default_rng(9).standard_normal((r, c)).astype(np.float32)
    text = TAKE_ALONG.format(r=r, c=c, cm1=c - 1)
    prog = shi.compile(text)
    with monkeypatch.context() as m:
        m.setattr(index_chains, "rewrite", lambda steps, template, results: steps)
        plain = shi.compile(text)
        plain.run(x, np.zeros((r, c), np.int32))   # its plan made unrewritten
    rng = np.random.default_rng(10)
    cases = {"in_range": rng.integers(0, c, (r, c)),
             "above": rng.integers(0, 2 * c, (r, c)),
             "negative": rng.integers(-c, c, (r, c)),
             "far_below": rng.integers(-3 * c, c, (r, c))}
    for case in ["in_range", "above", "negative", "in_range", "far_below", "above"]:
        i = cases[case].astype(np.int32)
        reads.clear()
        got = prog.run(x, i)
        assert_same_bits(got, plain.run(x, i))
        umax = int(i.max()) if i.min() >= 0 else None
        assert reads == [umax], case   # the mask's one read of the wrap's memo


def test_a_mask_wider_than_the_gathers_clamp_keeps_it(monkeypatch):
    # A mask up to c (one past the last column) proves nothing the clamp
    # to c - 1 may skip.
    r, c = 64, 512
    text = TAKE_ALONG.format(r=r, c=c, cm1=c)
    prog = shi.compile(text)
    x = np.random.default_rng(9).standard_normal((r, c)).astype(np.float32)
    i = np.full((r, c), c, np.int32)   # all within the mask, all clamped by the gather
    got = prog.run(x, i)
    np.testing.assert_array_equal(got[0], np.broadcast_to(x[:, -1:], (r, c)))
    blk = prog.function().block
    assert "gather_checked" not in [getattr(s.fn, "__name__", "") for s in blk._planned]
