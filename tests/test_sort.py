"""sort: key fast path (JAX comparators), batched merge sort, per-pair path."""

import numpy as np
import pytest

import stablehlo_interpreter as shi
from stablehlo_interpreter.ops import sort as sort_mod


def tt(shape, et):
    return "tensor<" + "".join(f"{n}x" for n in shape) + et + ">"


def sort_prog(shapes_ets, body, dim=0, stable=True):
    n = len(shapes_ets)
    params = ", ".join(f"%x{i}: {tt(s, e)}" for i, (s, e) in enumerate(shapes_ets))
    rtypes = ", ".join(tt(s, e) for s, e in shapes_ets)
    args = ", ".join(f"%a{2 * i}: tensor<{e}>, %a{2 * i + 1}: tensor<{e}>"
                     for i, (_, e) in enumerate(shapes_ets))
    res = ", ".join(f"%r#{i}" for i in range(n)) if n > 1 else "%r"
    return shi.compile(f"""
func.func @main({params}) -> ({rtypes}) {{
  %r{':' + str(n) if n > 1 else ''} = "stablehlo.sort"({", ".join(f"%x{i}" for i in range(n))}) ({{
  ^bb0({args}):
{body}
  }}) {{dimension = {dim} : i64, is_stable = {str(stable).lower()}}} : ({rtypes}) -> ({rtypes})
  return {res} : {rtypes}
}}""")


# What jnp.sort emits for floats: canonicalise -0.0 -> 0.0 and NaN -> +NaN,
# then compare with TOTALORDER.
JNP_SORT_F32 = """
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %nan = stablehlo.constant dense<0x7FC00000> : tensor<f32>
    %e0 = stablehlo.compare EQ, %a0, %z, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %s0 = stablehlo.select %e0, %z, %a0 : tensor<i1>, tensor<f32>
    %n0 = stablehlo.compare NE, %a0, %a0, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %k0 = stablehlo.select %n0, %nan, %s0 : tensor<i1>, tensor<f32>
    %e1 = stablehlo.compare EQ, %a1, %z, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %s1 = stablehlo.select %e1, %z, %a1 : tensor<i1>, tensor<f32>
    %n1 = stablehlo.compare NE, %a1, %a1, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %k1 = stablehlo.select %n1, %nan, %s1 : tensor<i1>, tensor<f32>
    %lt = stablehlo.compare LT, %k0, %k1, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>"""

PLAIN = """    %lt = stablehlo.compare {d}, %a0, %a1, {t} : (tensor<{e}>, tensor<{e}>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>"""

# a - b < 0: not recognised as a key comparison -> batched merge sort.
SUB_LT = """    %d = stablehlo.subtract %a0, %a1 : tensor<i32>
    %z = stablehlo.constant dense<0> : tensor<i32>
    %lt = stablehlo.compare LT, %d, %z, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>"""

# The same through a reshape: not batchable -> per-pair comparator calls.
SUB_LT_RESHAPE = """    %d0 = stablehlo.subtract %a0, %a1 : tensor<i32>
    %v = stablehlo.reshape %d0 : (tensor<i32>) -> tensor<1xi32>
    %d = stablehlo.reshape %v : (tensor<1xi32>) -> tensor<i32>
    %z = stablehlo.constant dense<0> : tensor<i32>
    %lt = stablehlo.compare LT, %d, %z, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>"""


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def test_jnp_sort_comparator_nan_and_signed_zero():
    x = np.array([np.nan, 1.0, -0.0, -np.inf, 0.0, -np.nan, -2.5, np.inf], np.float32)
    got = sort_prog([((8,), "f32")], JNP_SORT_F32).run(x)[0]
    # -0.0 and 0.0 are equal keys (stable: input order), every NaN goes last.
    exp = np.array([-np.inf, -2.5, -0.0, 0.0, 1.0, np.inf, np.nan, -np.nan], np.float32)
    np.testing.assert_array_equal(bits(got), bits(exp))


def test_totalorder_lt_orders_signed_zeros_and_nans():
    neg_nan = np.array(0xFFC00000, np.uint32).view(np.float32)
    x = np.array([np.nan, 0.0, -0.0, neg_nan, -np.inf, 3.0], np.float32)
    got = sort_prog([((6,), "f32")], PLAIN.format(d="LT", t="TOTALORDER", e="f32")).run(x)[0]
    exp = np.array([neg_nan, -np.inf, -0.0, 0.0, 3.0, np.nan], np.float32)
    np.testing.assert_array_equal(bits(got), bits(exp))


def test_gt_is_stable_descending_with_payload():
    keys = np.array([[3, 1, 3, 2, 1, 3]], np.int32).T  # sort along dim 0
    payload = np.arange(6, dtype=np.float32).reshape(6, 1)
    k, p = sort_prog([((6, 1), "i32"), ((6, 1), "f32")],
                     PLAIN.format(d="GT", t="SIGNED", e="i32")).run(keys, payload)
    np.testing.assert_array_equal(k[:, 0], [3, 3, 3, 2, 1, 1])
    np.testing.assert_array_equal(p[:, 0], [0, 2, 5, 3, 1, 4])


def test_lexicographic_two_keys_like_lax_sort_num_keys_2():
    body = """    %l0 = stablehlo.compare LT, %a0, %a1, UNSIGNED : (tensor<ui8>, tensor<ui8>) -> tensor<i1>
    %e0 = stablehlo.compare EQ, %a0, %a1, UNSIGNED : (tensor<ui8>, tensor<ui8>) -> tensor<i1>
    %l1 = stablehlo.compare LT, %a2, %a3, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %and = stablehlo.and %e0, %l1 : tensor<i1>
    %or = stablehlo.or %l0, %and : tensor<i1>
    stablehlo.return %or : tensor<i1>"""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 4, (3, 20)).astype(np.uint8)
    b = rng.integers(-3, 3, (3, 20)).astype(np.float32)
    c = np.arange(60, dtype=np.int32).reshape(3, 20)
    prog = sort_prog([((3, 20), "ui8"), ((3, 20), "f32"), ((3, 20), "i32")], body, dim=-1)
    ra, rb, rc = prog.run(a, b, c)
    order = np.lexsort((b, a), axis=-1)
    np.testing.assert_array_equal(ra, np.take_along_axis(a, order, -1))
    np.testing.assert_array_equal(rb, np.take_along_axis(b, order, -1))
    np.testing.assert_array_equal(rc, np.take_along_axis(c, order, -1))


@pytest.mark.parametrize("body", [SUB_LT, SUB_LT_RESHAPE])
@pytest.mark.parametrize("n", [1, 2, 7, 16, 33])
def test_general_comparators_give_stable_sort(body, n):
    rng = np.random.default_rng(n)
    keys = rng.integers(-4, 4, (3, n)).astype(np.int32)
    idx = np.broadcast_to(np.arange(n, dtype=np.int32), (3, n)).copy()
    rk, ri = sort_prog([((3, n), "i32"), ((3, n), "i32")], body, dim=1).run(keys, idx)
    order = np.argsort(keys, axis=1, kind="stable")
    np.testing.assert_array_equal(rk, np.take_along_axis(keys, order, 1))
    np.testing.assert_array_equal(ri, order)


def test_merge_sort_matches_std_merge_for_non_strict_comparator():
    # LE is not a strict order; std::stable_sort then puts equal elements in
    # reverse order of appearance within each merge. The merge sort must still
    # produce a permutation sorted by key.
    keys = np.array([2, 1, 2, 1, 2], np.int32)
    idx = np.arange(5, dtype=np.int32)
    body = PLAIN.format(d="LE", t="SIGNED", e="i32")
    rk, ri = sort_prog([((5,), "i32"), ((5,), "i32")], body).run(keys, idx)
    np.testing.assert_array_equal(rk, [1, 1, 2, 2, 2])
    assert sorted(ri.tolist()) == [0, 1, 2, 3, 4]


def test_sort_empty_and_rank0_dimension_of_one():
    prog = sort_prog([((0, 3), "f32")], PLAIN.format(d="LT", t="FLOAT", e="f32"), dim=1)
    assert prog.run(np.zeros((0, 3), np.float32))[0].shape == (0, 3)
    prog = sort_prog([((4, 1), "f32")], PLAIN.format(d="LT", t="FLOAT", e="f32"), dim=1)
    x = np.array([[3], [1], [2], [0]], np.float32)
    np.testing.assert_array_equal(prog.run(x)[0], x)


def test_float_lt_with_nan_is_still_a_permutation():
    x = np.array([3.0, np.nan, 1.0, 2.0], np.float32)
    got = sort_prog([((4,), "f32")], PLAIN.format(d="LT", t="FLOAT", e="f32")).run(x)[0]
    assert sorted(bits(got).tolist()) == sorted(bits(x).tolist())


def test_lexicographic_keys_analysis():
    prog = sort_prog([((4,), "f32")], JNP_SORT_F32)
    # Find the compiled sort op's region through the program's entry block.
    step = [s for s in prog.functions["main"].block.steps if s[4].name == "stablehlo.sort"][0]
    keys = sort_mod.lexicographic_keys(step[4].regions[0])
    assert keys is not None and len(keys) == 1
    assert keys[0][1] is False and keys[0][2] == "TOTALORDER"
    prog2 = sort_prog([((4,), "i32")], SUB_LT)
    step = [s for s in prog2.functions["main"].block.steps if s[4].name == "stablehlo.sort"][0]
    assert sort_mod.lexicographic_keys(step[4].regions[0]) is None


def test_paths_are_the_vectorized_ones(monkeypatch):
    def boom(*a):
        raise AssertionError("slow path taken")
    monkeypatch.setattr(sort_mod, "_python_sort_perm", boom)
    x = np.array([5, -1, 3, 3, 0], np.int32)
    np.testing.assert_array_equal(sort_prog([((5,), "i32")], SUB_LT).run(x)[0], np.sort(x))
    monkeypatch.setattr(sort_mod, "_merge_sort_perm", boom)
    y = np.array([2.0, -1.0, np.nan, 0.0], np.float32)
    got = sort_prog([((4,), "f32")], JNP_SORT_F32).run(y)[0]
    np.testing.assert_array_equal(bits(got), bits([-1.0, 0.0, 2.0, np.nan]))
