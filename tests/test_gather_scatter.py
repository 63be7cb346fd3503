"""gather, dynamic_gather and scatter against per-element references written
from the spec's formulas (explicit Python loops on small shapes)."""

import itertools

import numpy as np
import pytest

import stablehlo_interpreter as shi


def tt(shape, et):
    return "tensor<" + "".join(f"{n}x" for n in shape) + et + ">"


def arr(a):
    return ", ".join(str(int(x)) for x in a)


# --------------------------------------------------------------------------
# gather


def gather_ref(operand, idx, dn, sizes):
    """spec gather, element by element."""
    off, coll = dn["offset_dims"], dn["collapsed_slice_dims"]
    ob, ib = dn["operand_batching_dims"], dn["start_indices_batching_dims"]
    sim, ivd = dn["start_index_map"], dn["index_vector_dim"]
    batch_shape = [n for i, n in enumerate(idx.shape) if i != ivd]
    kept = [d for d in range(operand.ndim) if d not in coll and d not in ob]
    rrank = len(batch_shape) + len(off)
    batch_dims = [d for d in range(rrank) if d not in off]
    rshape = [0] * rrank
    for d, n in zip(batch_dims, batch_shape):
        rshape[d] = n
    for d, od in zip(kept, off):
        rshape[od] = sizes[d]
    out = np.zeros(rshape, dtype=operand.dtype)
    for ri in itertools.product(*map(range, rshape)):
        bi = [ri[d] for d in batch_dims]
        if ivd < idx.ndim:
            start = [idx[tuple(bi[:ivd] + [k] + bi[ivd:])] for k in range(idx.shape[ivd])]
        else:
            start = [idx[tuple(bi)]]
        full = [0] * operand.ndim
        for k, d in enumerate(sim):
            full[d] = min(max(int(start[k]), 0), operand.shape[d] - sizes[d])
        for d, s in zip(ob, ib):
            full[d] += bi[s - (0 if s < ivd else 1)]
        oi = [ri[d] for d in off]
        for d, o in zip(kept, oi):
            full[d] += o
        out[ri] = operand[tuple(full)]
    return out


def gather_text(oshape, ishape, rshape, dn, sizes, et="i32", iet="i64", dynamic=False):
    attrs = (f"offset_dims = [{arr(dn['offset_dims'])}], "
             f"collapsed_slice_dims = [{arr(dn['collapsed_slice_dims'])}], "
             f"operand_batching_dims = [{arr(dn['operand_batching_dims'])}], "
             f"start_indices_batching_dims = [{arr(dn['start_indices_batching_dims'])}], "
             f"start_index_map = [{arr(dn['start_index_map'])}], "
             f"index_vector_dim = {dn['index_vector_dim']}")
    if dynamic:
        return f"""
func.func @main(%x: {tt(oshape, et)}, %i: {tt(ishape, iet)}, %s: tensor<{len(sizes)}xi64>) -> {tt(rshape, et)} {{
  %r = "stablehlo.dynamic_gather"(%x, %i, %s) {{dimension_numbers = #stablehlo.gather<{attrs}>,
      indices_are_sorted = false}} : ({tt(oshape, et)}, {tt(ishape, iet)}, tensor<{len(sizes)}xi64>) -> {tt(rshape, et)}
  return %r : {tt(rshape, et)}
}}"""
    return f"""
func.func @main(%x: {tt(oshape, et)}, %i: {tt(ishape, iet)}) -> {tt(rshape, et)} {{
  %r = "stablehlo.gather"(%x, %i) {{dimension_numbers = #stablehlo.gather<{attrs}>,
      slice_sizes = array<i64: {arr(sizes)}>, indices_are_sorted = true}}
      : ({tt(oshape, et)}, {tt(ishape, iet)}) -> {tt(rshape, et)}
  return %r : {tt(rshape, et)}
}}"""


def dn_gather(off, coll, sim, ivd, ob=(), ib=()):
    return dict(offset_dims=off, collapsed_slice_dims=coll, operand_batching_dims=ob,
                start_indices_batching_dims=ib, start_index_map=sim, index_vector_dim=ivd)


GATHER_CASES = [
    # jnp.take-like: implicit trailing index vector (index_vector_dim == rank).
    ((5, 3), np.array([0, 4, -2, 7, 2]), dn_gather((1,), (0,), (0,), 1), (1, 3)),
    # index vector in the middle, out-of-bounds starts clamped, 2-d slices.
    ((4, 5, 2), np.array([[[1, 9], [-3, 2]], [[0, 0], [3, 4]], [[2, -1], [1, 1]]])
     .transpose(0, 2, 1), dn_gather((2, 3), (2,), (1, 0), 1), (2, 3, 1)),
    # batching dims on both sides, index vector first.
    ((2, 3, 4, 2), np.array([[[0, 1], [2, 1], [3, 0]], [[9, 2], [1, -1], [2, 0]]]),
     dn_gather((1,), (1, 2), (2, 1), 0, ob=(0,), ib=(2,)), (1, 1, 1, 2)),
    # no collapsed dims at all: full windows, offset dims interleaved.
    ((6, 4), np.array([[5, 1], [0, 3], [2, 2]]), dn_gather((0, 2), (), (0, 1), 1), (3, 2)),
]


@pytest.mark.parametrize("case", range(len(GATHER_CASES)))
def test_gather_matches_spec_reference(case):
    oshape, idx, dn, sizes = GATHER_CASES[case]
    operand = np.arange(np.prod(oshape), dtype=np.int32).reshape(oshape) * 3 - 7
    exp = gather_ref(operand, idx, dn, sizes)
    got = shi.compile(gather_text(oshape, idx.shape, exp.shape, dn, sizes)).run(
        operand, idx.astype(np.int64))[0]
    np.testing.assert_array_equal(got, exp)
    dyn = shi.compile(gather_text(oshape, idx.shape, exp.shape, dn, sizes, dynamic=True))
    np.testing.assert_array_equal(
        dyn.run(operand, idx.astype(np.int64), np.array(sizes, dtype=np.int64))[0], exp)


def test_gather_unsigned_huge_index_clamps_high():
    operand = np.arange(10, dtype=np.float32)
    idx = np.array([[np.iinfo(np.uint64).max], [3]], dtype=np.uint64)
    dn = dn_gather((1,), (), (0,), 1)
    got = shi.compile(gather_text((10,), (2, 1), (2, 2), dn, (2,), et="f32", iet="ui64")).run(
        operand, idx)[0]
    np.testing.assert_array_equal(got, [[8, 9], [3, 4]])


def test_gather_empty_indices():
    dn = dn_gather((1,), (0,), (0,), 1)
    got = shi.compile(gather_text((5, 3), (0,), (0, 3), dn, (1, 3))).run(
        np.ones((5, 3), np.int32), np.zeros(0, np.int64))[0]
    assert got.shape == (0, 3) and got.dtype == np.int32


# --------------------------------------------------------------------------
# scatter


def scatter_ref(inputs, idx, updates, dn, body):
    """spec scatter: sequential schedule in row-major update order."""
    res = [x.copy() for x in inputs]
    uwd, ins = dn["update_window_dims"], dn["inserted_window_dims"]
    ib, sb = dn["input_batching_dims"], dn["scatter_indices_batching_dims"]
    sd, ivd = dn["scatter_dims_to_operand_dims"], dn["index_vector_dim"]
    rank = inputs[0].ndim
    sdims = [d for d in range(updates[0].ndim) if d not in uwd]
    wdims = [d for d in range(rank) if d not in ins and d not in ib]
    for ui in itertools.product(*map(range, updates[0].shape)):
        si = [ui[d] for d in sdims]
        if ivd < idx.ndim:
            start = [idx[tuple(si[:ivd] + [k] + si[ivd:])] for k in range(idx.shape[ivd])]
        else:
            start = [idx[tuple(si)]]
        full = [0] * rank
        for k, d in enumerate(sd):
            full[d] = int(start[k])
        for d, s in zip(ib, sb):
            full[d] += si[s - (0 if s < ivd else 1)]
        for d, w in zip(wdims, [ui[d] for d in uwd]):
            full[d] += w
        if all(0 <= f < n for f, n in zip(full, inputs[0].shape)):
            t = tuple(full)
            vals = body(*[r[t] for r in res], *[u[ui] for u in updates])
            for r, v in zip(res, vals):
                r[t] = v
    return res


def dn_scatter(uwd, ins, sd, ivd, ib=(), sb=()):
    return dict(update_window_dims=uwd, inserted_window_dims=ins, input_batching_dims=ib,
                scatter_indices_batching_dims=sb, scatter_dims_to_operand_dims=sd,
                index_vector_dim=ivd)


def scatter_text(ishape, xshape, ushape, dn, body_ops, n=1, et="f32"):
    t, it, ut = tt(ishape, et), tt(xshape, "i32"), tt(ushape, et)
    args = ", ".join(f"%a{i}: tensor<{et}>" for i in range(2 * n))
    ins = ", ".join(f"%x{i}" for i in range(n))
    ups = ", ".join(f"%u{i}" for i in range(n))
    params = ", ".join([f"%x{i}: {t}" for i in range(n)] + [f"%i: {it}"] +
                       [f"%u{i}: {ut}" for i in range(n)])
    rtypes = ", ".join([t] * n)
    attrs = (f"update_window_dims = [{arr(dn['update_window_dims'])}], "
             f"inserted_window_dims = [{arr(dn['inserted_window_dims'])}], "
             f"input_batching_dims = [{arr(dn['input_batching_dims'])}], "
             f"scatter_indices_batching_dims = [{arr(dn['scatter_indices_batching_dims'])}], "
             f"scatter_dims_to_operand_dims = [{arr(dn['scatter_dims_to_operand_dims'])}], "
             f"index_vector_dim = {dn['index_vector_dim']}")
    res = ", ".join(f"%r#{i}" for i in range(n)) if n > 1 else "%r"
    return f"""
func.func @main({params}) -> ({rtypes}) {{
  %r{':' + str(n) if n > 1 else ''} = "stablehlo.scatter"({ins}, %i, {ups}) ({{
  ^bb0({args}):
{body_ops}
  }}) {{scatter_dimension_numbers = #stablehlo.scatter<{attrs}>,
      indices_are_sorted = false, unique_indices = false}}
      : ({", ".join([t] * n)}, {it}, {", ".join([ut] * n)}) -> ({rtypes})
  return {res} : {rtypes}
}}"""


ADD = """    %s = stablehlo.add %a0, %a1 : tensor<f32>
    stablehlo.return %s : tensor<f32>"""
# Non-commutative in the order of updates: new = 2 * old + update.
AFFINE = """    %c = stablehlo.constant dense<2.0> : tensor<f32>
    %m = stablehlo.multiply %a0, %c : tensor<f32>
    %s = stablehlo.add %m, %a1 : tensor<f32>
    stablehlo.return %s : tensor<f32>"""
REPLACE = """    stablehlo.return %a1 : tensor<f32>"""
# Not batchable (reshape is not elementwise): element-by-element path.
AFFINE_RESHAPE = """    %c = stablehlo.constant dense<2.0> : tensor<f32>
    %m = stablehlo.multiply %a0, %c : tensor<f32>
    %v = stablehlo.reshape %m : (tensor<f32>) -> tensor<1xf32>
    %w = stablehlo.reshape %v : (tensor<1xf32>) -> tensor<f32>
    %s = stablehlo.add %w, %a1 : tensor<f32>
    stablehlo.return %s : tensor<f32>"""

BODIES = {"add": (ADD, lambda a, u: (a + u,)), "affine": (AFFINE, lambda a, u: (2 * a + u,)),
          "replace": (REPLACE, lambda a, u: (u,)),
          "affine_reshape": (AFFINE_RESHAPE, lambda a, u: (2 * a + u,))}

SCATTER_CASES = [
    # duplicate rows, jnp .at[idx].add style, one index out of bounds.
    ((5, 3), np.array([[1], [3], [1], [7], [1]]), (5, 3), dn_scatter((1,), (0,), (0,), 1)),
    # 2-d windows partially out of bounds: only the outside elements drop.
    ((4, 5), np.array([[0, 3], [2, 4], [-1, 0], [2, 4]]), (4, 2, 2),
     dn_scatter((1, 2), (), (0, 1), 1)),
    # implicit index vector and batching dims.
    ((2, 4, 3), np.array([[0, 3], [3, 3], [9, 1]]).T, (2, 3, 3),
     dn_scatter((2,), (1,), (1,), 2, ib=(0,), sb=(0,))),
    # index vector first, scattered dims reordered.
    ((3, 4), np.array([[2, 0, 2, 1], [1, 3, 1, 0]]), (4,), dn_scatter((), (0, 1), (0, 1), 0)),
]


@pytest.mark.parametrize("body", list(BODIES))
@pytest.mark.parametrize("case", range(len(SCATTER_CASES)))
def test_scatter_matches_spec_reference(case, body):
    ishape, idx, ushape, dn = SCATTER_CASES[case]
    text, fn = BODIES[body]
    rng = np.random.default_rng(case)
    x = rng.integers(-5, 5, ishape).astype(np.float32)
    u = rng.integers(-5, 5, ushape).astype(np.float32)
    exp = scatter_ref([x], idx, [u], dn, fn)[0]
    got = shi.compile(scatter_text(ishape, idx.shape, ushape, dn, text)).run(
        x, idx.astype(np.int32), u)[0]
    np.testing.assert_array_equal(got, exp)
    assert not np.array_equal(got, x) or body == "replace" and case == 3


def test_scatter_does_not_modify_inputs_and_orders_updates():
    # All updates hit element 0: result = 2*(2*(2*x+u0)+u1)+u2.
    x = np.array([1.0, 5.0], np.float32)
    u = np.array([1.0, 10.0, 100.0], np.float32)
    idx = np.zeros((3, 1), np.int32)
    dn = dn_scatter((), (0,), (0,), 1)
    prog = shi.compile(scatter_text((2,), (3, 1), (3,), dn, AFFINE))
    got = prog.run(x, idx, u)[0]
    np.testing.assert_array_equal(got, [2 * (2 * (2 * 1 + 1) + 10) + 100, 5])
    np.testing.assert_array_equal(x, [1, 5])


def test_scatter_variadic():
    body = """    %s = stablehlo.add %a0, %a2 : tensor<f32>
    %m = stablehlo.multiply %a1, %a3 : tensor<f32>
    stablehlo.return %s, %m : tensor<f32>, tensor<f32>"""
    dn = dn_scatter((), (0,), (0,), 1)
    idx = np.array([[2], [0], [2]], np.int32)
    x0, x1 = np.arange(4, dtype=np.float32), np.ones(4, np.float32) * 3
    u0, u1 = np.array([1, 2, 4], np.float32), np.array([2, 5, 7], np.float32)
    r0, r1 = shi.compile(scatter_text((4,), (3, 1), (3,), dn, body, n=2)).run(
        x0, x1, idx, u0, u1)
    np.testing.assert_array_equal(r0, [2, 1, 7, 3])
    np.testing.assert_array_equal(r1, [15, 3, 42, 3])


@pytest.mark.parametrize("op,ufunc", [("maximum", np.maximum), ("minimum", np.minimum),
                                      ("multiply", np.multiply)])
def test_scatter_reducers_int(op, ufunc):
    body = f"""    %s = stablehlo.{op} %a0, %a1 : tensor<i32>
    stablehlo.return %s : tensor<i32>"""
    dn = dn_scatter((), (0,), (0,), 1)
    rng = np.random.default_rng(1)
    x = rng.integers(-9, 9, 6).astype(np.int32)
    idx = rng.integers(-1, 7, (40, 1)).astype(np.int32)
    u = rng.integers(-9, 9, 40).astype(np.int32)
    exp = x.copy()
    ok = (idx[:, 0] >= 0) & (idx[:, 0] < 6)
    ufunc.at(exp, idx[ok, 0], u[ok])
    got = shi.compile(scatter_text((6,), (40, 1), (40,), dn, body, et="i32")).run(x, idx, u)[0]
    np.testing.assert_array_equal(got, exp)


def test_scatter_bool_add_is_or():
    body = """    %s = stablehlo.add %a0, %a1 : tensor<i1>
    stablehlo.return %s : tensor<i1>"""
    dn = dn_scatter((), (0,), (0,), 1)
    x = np.array([False, False, True])
    got = shi.compile(scatter_text((3,), (3, 1), (3,), dn, body, et="i1")).run(
        x, np.array([[0], [0], [2]], np.int32), np.array([True, True, False]))[0]
    np.testing.assert_array_equal(got, [True, False, True])


def test_scatter_empty_updates():
    dn = dn_scatter((1,), (0,), (0,), 1)
    x = np.ones((3, 2), np.float32)
    got = shi.compile(scatter_text((3, 2), (0, 1), (0, 2), dn, ADD)).run(
        x, np.zeros((0, 1), np.int32), np.zeros((0, 2), np.float32))[0]
    np.testing.assert_array_equal(got, x)
