"""rng_bit_generator (bit-exact against XLA CPU) and rng (distribution checks)."""

import jax
import numpy as np
import pytest
from testkit import run_xla_cpu

import stablehlo_interpreter as shi

jax.config.update("jax_enable_x64", True)

CPU = jax.devices("cpu")[0]
ALG = jax.lax.RandomAlgorithm


def _rbg_module(algorithm, nstate, cases):
    """One module with an rng_bit_generator per (shape, element type) case."""
    st = f"tensor<{nstate}xui64>"
    lines, rets, types = [], [], []
    for i, (shape, et) in enumerate(cases):
        t = f"tensor<{'x'.join(map(str, shape))}{'x' if shape else ''}{et}>"
        lines.append(f"  %s{i}, %o{i} = stablehlo.rng_bit_generator %k, algorithm = {algorithm}"
                     f" : ({st}) -> ({st}, {t})")
        rets += [f"%s{i}", f"%o{i}"]
        types += [st, t]
    return (f"func.func @main(%k: {st}) -> ({', '.join(types)}) {{\n" + "\n".join(lines)
            + f"\n  return {', '.join(rets)} : {', '.join(types)}\n}}")


KEYS = {
    2: np.array([0xFFFFFFFFFFFFFFFD, 0x123456789ABCDEF0], dtype=np.uint64),
    3: np.array([42, 0xFFFFFFFFFFFFFFFE, 7], dtype=np.uint64),
}
SHAPES = [(), (1,), (5,), (4,), (3, 5), (2, 3, 7), (7, 1), (1, 3), (6, 5), (0, 3)]
ELEMENTS = ["ui8", "ui16", "ui32", "ui64", "i32", "i64"]


@pytest.mark.parametrize("algorithm,nstate", [("THREE_FRY", 2), ("PHILOX", 2),
                                              ("PHILOX", 3), ("DEFAULT", 2)])
def test_rng_bit_generator_matches_xla_cpu(algorithm, nstate):
    # Every shape and every element type, without the full product (XLA
    # compile time grows with the module).
    cases = ([(s, ELEMENTS[i % len(ELEMENTS)]) for i, s in enumerate(SHAPES)]
             + [((3, 5), e) for e in ELEMENTS])
    text = _rbg_module(algorithm, nstate, cases)
    key = KEYS[nstate]
    expected = run_xla_cpu(text, key)
    got = shi.compile(text).run(key)
    assert len(got) == len(expected) == 2 * len(cases)
    for i, (g, e) in enumerate(zip(got, expected)):
        case = cases[i // 2]
        # (XLA's executable hands signed outputs back as unsigned: compare bits.)
        assert g.shape == e.shape and g.dtype.itemsize == e.dtype.itemsize, case
        if i % 2:
            assert g.dtype == shi.dtypes.from_element_type(case[1])
        bits = np.dtype(f"u{g.dtype.itemsize}")
        np.testing.assert_array_equal(g.view(bits), e.view(bits), err_msg=f"{algorithm} {case}")


@pytest.mark.parametrize("algorithm", [ALG.RNG_THREE_FRY, ALG.RNG_PHILOX])
def test_rng_bit_generator_from_jax_with_u32_key(algorithm):
    # JAX bitcasts a 4 x u32 key to 2 x u64 and truncates u32 bits for u8/u16.
    key = np.array([1, 2, 0xFFFFFFFF, 7], dtype=np.uint32)
    for dtype, shape in [(np.uint32, (3, 5)), (np.uint8, (6,)), (np.uint64, (2, 2))]:
        def f(k):
            return jax.lax.rng_bit_generator(k, shape, dtype=dtype, algorithm=algorithm)
        text = jax.jit(f).trace(key).lower(lowering_platforms=("cpu",)).as_text()
        expected = [np.asarray(v) for v in jax.jit(f)(jax.device_put(key, CPU))]
        got = shi.compile(text).run(key)
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype
            np.testing.assert_array_equal(g, e)


def test_rng_bit_generator_counter_wraps_and_state_advances():
    # A counter near 2**64 carries into the high word of Philox's 128-bit
    # counter, and wraps ThreeFry's 64-bit counter.
    key = np.array([1, 0xFFFFFFFFFFFFFFFF, 5], dtype=np.uint64)
    text = _rbg_module("PHILOX", 3, [((9, 2), "ui32")])
    got = shi.compile(text).run(key)
    expected = run_xla_cpu(text, key)
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])
    assert got[0][2] == 6  # the carry reached the high word
    key2 = np.array([1, 0xFFFFFFFFFFFFFFFE], dtype=np.uint64)
    text = _rbg_module("THREE_FRY", 2, [((3,), "ui64")])
    got = shi.compile(text).run(key2)
    expected = run_xla_cpu(text, key2)
    np.testing.assert_array_equal(got[1], expected[1])
    assert got[0][1] == 1  # 0xFF..FE + 3 wraps


def test_rng_bit_generator_handwritten_signed_output_is_bitcast():
    text = """
    func.func @main(%k: tensor<2xui64>) -> (tensor<2xui64>, tensor<4xi32>, tensor<4xui32>) {
      %s, %o = stablehlo.rng_bit_generator %k, algorithm = THREE_FRY : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xi32>)
      %s2, %o2 = stablehlo.rng_bit_generator %k, algorithm = THREE_FRY : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)
      return %s, %o, %o2 : tensor<2xui64>, tensor<4xi32>, tensor<4xui32>
    }"""
    state, signed, unsigned = shi.compile(text).run(np.array([3, 4], dtype=np.uint64))
    assert signed.dtype == np.int32
    np.testing.assert_array_equal(signed.view(np.uint32), unsigned)
    np.testing.assert_array_equal(state, [3, 6])  # 2 counters of 2 words each


def test_suite_rng_bit_generator_expected_value():
    # testdata/rng_bit_generator_uint64_2.mlir: state [3, 3], scalar ui64 output.
    text = """
    func.func @main(%k: tensor<2xui64>) -> (tensor<2xui64>, tensor<ui64>) {
      %s, %o = stablehlo.rng_bit_generator %k, algorithm = THREE_FRY : (tensor<2xui64>) -> (tensor<2xui64>, tensor<ui64>)
      return %s, %o : tensor<2xui64>, tensor<ui64>
    }"""
    state, out = shi.compile(text).run(np.array([3, 3], dtype=np.uint64))
    np.testing.assert_array_equal(state, [3, 4])
    assert out.shape == () and int(out) == 3349939604322698703


RNG_TEXT = """
func.func @main(%a: tensor<{et}>, %b: tensor<{et}>) -> tensor<{shape}x{et}> {{
  %shape = stablehlo.constant dense<[{dims}]> : tensor<{rank}xi64>
  %r = "stablehlo.rng"(%a, %b, %shape) {{rng_distribution = #stablehlo<rng_distribution {dist}>}} : (tensor<{et}>, tensor<{et}>, tensor<{rank}xi64>) -> tensor<{shape}x{et}>
  return %r : tensor<{shape}x{et}>
}}
"""


def _rng_program(et, dist, shape):
    return shi.compile(RNG_TEXT.format(et=et, dist=dist, shape="x".join(map(str, shape)),
                                       dims=", ".join(map(str, shape)), rank=len(shape)))


def test_rng_uniform_float_range_and_reproducible():
    prog = _rng_program("f32", "UNIFORM", (64, 64))
    a, b = np.array(-2.0, np.float32), np.array(3.0, np.float32)
    x = prog.run(a, b)[0]
    assert x.dtype == np.float32 and x.shape == (64, 64)
    assert x.min() >= -2.0 and x.max() < 3.0
    assert abs(x.mean() - 0.5) < 0.1  # mean of U[-2, 3) is 0.5
    # The generator advances from run to run (XLA's rng state does too; a
    # PyTorch randperm per epoch must not repeat), and a fresh compile of the
    # same module replays the same sequence.
    y = prog.run(a, b)[0]
    assert not np.array_equal(y, x)
    again = _rng_program("f32", "UNIFORM", (64, 64))
    np.testing.assert_array_equal(again.run(a, b)[0], x)
    np.testing.assert_array_equal(again.run(a, b)[0], y)


def test_rng_uniform_narrow_float_stays_below_b():
    prog = _rng_program("bf16", "UNIFORM", (4096,))
    import ml_dtypes
    a = np.array(1.0, ml_dtypes.bfloat16)
    b = np.array(1.0078125, ml_dtypes.bfloat16)  # the next bf16 after 1.0
    x = prog.run(a, b)[0]
    assert (x.astype(np.float32) == 1.0).all()


def test_rng_uniform_int_range():
    prog = _rng_program("i32", "UNIFORM", (1000,))
    x = prog.run(np.array(-3, np.int32), np.array(4, np.int32))[0]
    assert x.dtype == np.int32
    assert x.min() == -3 and x.max() == 3  # b is excluded; all values show up
    assert set(np.unique(x)) == set(range(-3, 4))


def test_rng_normal_moments():
    prog = _rng_program("f64", "NORMAL", (200, 100))
    x = prog.run(np.array(10.0), np.array(2.0))[0]
    assert x.dtype == np.float64
    assert abs(x.mean() - 10.0) < 0.05
    assert abs(x.std() - 2.0) < 0.05


def test_rng_two_ops_in_one_run_differ():
    text = """
    func.func @main(%a: tensor<f32>, %b: tensor<f32>) -> (tensor<8xf32>, tensor<8xf32>) {
      %shape = stablehlo.constant dense<[8]> : tensor<1xi64>
      %r1 = "stablehlo.rng"(%a, %b, %shape) {rng_distribution = #stablehlo<rng_distribution UNIFORM>} : (tensor<f32>, tensor<f32>, tensor<1xi64>) -> tensor<8xf32>
      %r2 = "stablehlo.rng"(%a, %b, %shape) {rng_distribution = #stablehlo<rng_distribution UNIFORM>} : (tensor<f32>, tensor<f32>, tensor<1xi64>) -> tensor<8xf32>
      return %r1, %r2 : tensor<8xf32>, tensor<8xf32>
    }"""
    r1, r2 = shi.compile(text).run(np.float32(0), np.float32(1))
    assert not np.array_equal(r1, r2)


def test_exported_shape_polymorphic_rng_bit_generator():
    from jax import export

    def g(k, a):
        return jax.lax.rng_bit_generator(k, a.shape, dtype=np.uint32,
                                         algorithm=ALG.RNG_PHILOX)
    text = export.export(jax.jit(g), platforms=["cpu"])(
        jax.ShapeDtypeStruct((2,), np.uint64),
        jax.ShapeDtypeStruct(export.symbolic_shape("b, 3"), np.float32)).mlir_module()
    assert "@stablehlo.dynamic_rng_bit_generator" in text
    key = np.array([1, 2], np.uint64)
    a = np.zeros((5, 3), np.float32)
    got = shi.compile(text).run(key, a)
    want = jax.jit(g)(jax.device_put(key, CPU), jax.device_put(a, CPU))
    for x, y in zip(got, want):
        np.testing.assert_array_equal(x, np.asarray(y))
    assert got[1].shape == (5, 3)
