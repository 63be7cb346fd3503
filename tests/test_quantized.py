"""Quantized element types: programs on `!quant.uniform` tensors compared to
values computed by hand from the spec's `quantize` / `dequantize`
(docs/spec.md, "Quantization computations")."""

import numpy as np
import pytest

import stablehlo_interpreter as shi
from stablehlo_interpreter import quant
from stablehlo_interpreter.types import parse_quant


def run(src, *args):
    return shi.compile(src).run(*args)


def q(text):
    return f"!quant.uniform<{text}>"


# --------------------------------------------------------------------------
# uniform_quantize / uniform_dequantize


def test_quantize_rounds_half_to_even_and_clamps_to_storage_range():
    t = f"tensor<6x{q('i8:f32, 0.5:3')}>"
    src = f"""
func.func @main(%x: tensor<6xf32>) -> {t} {{
  %0 = stablehlo.uniform_quantize %x : (tensor<6xf32>) -> {t}
  return %0 : {t}
}}"""
    # x / 0.5 + 3: 5, 1, 3.5 -> 4 (even), 4.5 -> 4 (even), 203 -> 127, -197 -> -128
    (out,) = run(src, np.array([1.0, -1.0, 0.25, 0.75, 100.0, -100.0], np.float32))
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, [5, 1, 4, 4, 127, -128])


def test_quantize_clamps_to_explicit_storage_min_max():
    t = f"tensor<4x{q('i8<-100:100>:f32, 1.0')}>"
    src = f"""
func.func @main(%x: tensor<4xf32>) -> {t} {{
  %0 = stablehlo.uniform_quantize %x : (tensor<4xf32>) -> {t}
  return %0 : {t}
}}"""
    (out,) = run(src, np.array([150.0, -150.0, 98.5, -0.5], np.float32))
    np.testing.assert_array_equal(out, [100, -100, 98, 0])


def test_quantize_and_dequantize_per_axis():
    t = f"tensor<2x3x{q('i8:f32:1, {0.1:2, 0.2:3, 0.5:-1}')}>"
    src = f"""
func.func @main(%x: tensor<2x3xf32>) -> ({t}, tensor<2x3xf32>) {{
  %0 = stablehlo.uniform_quantize %x : (tensor<2x3xf32>) -> {t}
  %1 = stablehlo.uniform_dequantize %0 : ({t}) -> tensor<2x3xf32>
  return %0, %1 : {t}, tensor<2x3xf32>
}}"""
    x = np.array([[1.0, 1.0, 1.0], [-0.5, 0.4, 2.5]], np.float32)
    qx, back = run(src, x)
    # column j uses scale/zero point j: x / scale + zp
    np.testing.assert_array_equal(qx, [[12, 8, 1], [-3, 5, 4]])
    np.testing.assert_allclose(back, x, rtol=1e-6)


def test_requantize_per_axis_spec_example():
    a = f"tensor<2x{q('i8:f32:0, {0.1:-30,0.5:-20}')}>"
    b = f"tensor<2x{q('i8:f32:0, {0.1:-20,0.2:-30}')}>"
    src = f"""
func.func @main(%x: {a}) -> {b} {{
  %0 = "stablehlo.uniform_quantize"(%x) : ({a}) -> {b}
  return %0 : {b}
}}"""
    (out,) = run(src, np.array([10, 10], np.int8))
    np.testing.assert_array_equal(out, [20, 45])


def test_requantize_per_tensor_rounds_half_to_even():
    a = f"tensor<4x{q('i8:f32, 1.0')}>"
    b = f"tensor<4x{q('i8:f32, 2.0')}>"
    src = f"""
func.func @main(%x: {a}) -> {b} {{
  %0 = stablehlo.uniform_quantize %x : ({a}) -> {b}
  return %0 : {b}
}}"""
    # 3/2 = 1.5 -> 2, 5/2 = 2.5 -> 2, 7/2 = 3.5 -> 4, -5/2 = -2.5 -> -2
    (out,) = run(src, np.array([3, 5, 7, -5], np.int8))
    np.testing.assert_array_equal(out, [2, 2, 4, -2])


def test_dequantize_does_not_wrap_in_storage_type():
    t = f"tensor<2x{q('i8:f32, 0.5:-128')}>"
    src = f"""
func.func @main(%x: {t}) -> tensor<2xf32> {{
  %0 = stablehlo.uniform_dequantize %x : ({t}) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}}"""
    # (127 - (-128)) * 0.5: 255 does not fit in i8 but must not wrap.
    (out,) = run(src, np.array([-128, 127], np.int8))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [0.0, 127.5])


def test_i32_storage_saturates_and_nan_quantizes_to_zero():
    t = f"tensor<3x{q('i32:f32, 1.0')}>"
    src = f"""
func.func @main(%x: tensor<3xf32>) -> {t} {{
  %0 = stablehlo.uniform_quantize %x : (tensor<3xf32>) -> {t}
  return %0 : {t}
}}"""
    (out,) = run(src, np.array([3e9, -3e9, np.nan], np.float32))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [2**31 - 1, -2**31, 0])


def test_quantized_constant_holds_storage_values():
    t = f"tensor<2x{q('i8:f32, 0.5:3')}>"
    src = f"""
func.func @main() -> tensor<2xf32> {{
  %c = stablehlo.constant() {{value = dense<[1, 2]> : tensor<2xi8>}} : () -> {t}
  %0 = stablehlo.uniform_dequantize %c : ({t}) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}}"""
    (out,) = run(src)
    np.testing.assert_array_equal(out, [-1.0, -0.5])


# --------------------------------------------------------------------------
# dequantize_op_quantize and its variants


def test_add_with_different_scales_spec_interpreter_example():
    a = f"tensor<2x{q('i8:f32, 0.1:-30')}>"
    b = f"tensor<2x{q('i8:f32, 0.5:-20')}>"
    src = f"""
func.func @main(%x: tensor<2xf32>, %y: tensor<2xf32>) -> {b} {{
  %0 = stablehlo.uniform_quantize %x : (tensor<2xf32>) -> {a}
  %1 = stablehlo.uniform_quantize %y : (tensor<2xf32>) -> {b}
  %2 = stablehlo.add %0, %1 : ({a}, {b}) -> {b}
  return %2 : {b}
}}"""
    # 1 + 3 = 4, 2 + 4 = 6; quantized with scale 0.5, zp -20: -12, -8
    (out,) = run(src, np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32))
    np.testing.assert_array_equal(out, [-12, -8])


def test_divide_nan_result_quantizes_to_zero():
    t = f"tensor<2x{q('i8:f32, 0.5:-128')}>"
    src = f"""
func.func @main(%x: {t}, %y: {t}) -> {t} {{
  %0 = stablehlo.divide %x, %y : {t}
  return %0 : {t}
}}"""
    # [0/0, 3.0/2.0] = [NaN, 1.5] -> [0, 1.5/0.5 - 128 = -125]
    (out,) = run(src, np.array([-128, -122], np.int8), np.array([-128, -124], np.int8))
    np.testing.assert_array_equal(out, [0, -125])


def test_compare_dequantizes_both_sides():
    a = f"tensor<2x{q('i8:f32, 1.0')}>"
    b = f"tensor<2x{q('i8:f32, 2.0:1')}>"
    src = f"""
func.func @main(%x: {a}, %y: {b}) -> tensor<2xi1> {{
  %0 = stablehlo.compare EQ, %x, %y : ({a}, {b}) -> tensor<2xi1>
  return %0 : tensor<2xi1>
}}"""
    # x = [4, 3]; y = (3 - 1) * 2 = [4, 4]
    (out,) = run(src, np.array([4, 3], np.int8), np.array([3, 3], np.int8))
    np.testing.assert_array_equal(out, [True, False])


def test_select_requantizes_the_chosen_values():
    a = f"tensor<2x{q('i8:f32, 1.0')}>"
    b = f"tensor<2x{q('i8:f32, 2.0')}>"
    src = f"""
func.func @main(%p: tensor<2xi1>, %x: {a}, %y: {b}) -> {a} {{
  %0 = stablehlo.select %p, %x, %y : (tensor<2xi1>, {a}, {b}) -> {a}
  return %0 : {a}
}}"""
    # on_false 7 * 2.0 = 14.0, stored with scale 1.0 as 14
    (out,) = run(src, np.array([True, False]), np.array([10, 10], np.int8),
                 np.array([7, 7], np.int8))
    np.testing.assert_array_equal(out, [10, 14])


def test_transpose_moves_per_axis_storage_values():
    a = f"tensor<2x3x{q('i8:f32:1, {0.1:1, 0.2:2, 0.3:3}')}>"
    b = f"tensor<3x2x{q('i8:f32:0, {0.1:1, 0.2:2, 0.3:3}')}>"
    src = f"""
func.func @main(%x: {a}) -> ({b}, tensor<3x2xf32>) {{
  %0 = stablehlo.transpose %x, dims = [1, 0] : ({a}) -> {b}
  %1 = stablehlo.uniform_dequantize %0 : ({b}) -> tensor<3x2xf32>
  return %0, %1 : {b}, tensor<3x2xf32>
}}"""
    out, deq = run(src, np.array([[1, 2, 3], [4, 5, 6]], np.int8))
    np.testing.assert_array_equal(out, [[1, 4], [2, 5], [3, 6]])
    np.testing.assert_allclose(deq, [[0.0, 0.3], [0.0, 0.6], [0.0, 0.9]], rtol=1e-6)


def test_transpose_to_other_scale_requantizes():
    a = f"tensor<2x2x{q('i8:f32, 1.0')}>"
    b = f"tensor<2x2x{q('i8:f32, 2.0')}>"
    src = f"""
func.func @main(%x: {a}) -> {b} {{
  %0 = stablehlo.transpose %x, dims = [1, 0] : ({a}) -> {b}
  return %0 : {b}
}}"""
    # transposed [[1, 3], [2, 4]] / 2 = [[0.5, 1.5], [1, 2]] -> [[0, 2], [1, 2]]
    (out,) = run(src, np.array([[1, 2], [3, 4]], np.int8))
    np.testing.assert_array_equal(out, [[0, 2], [1, 2]])


def test_while_carries_quantized_values_through_its_body():
    t = f"tensor<2x{q('i8:f32, 0.5:-10')}>"
    src = f"""
func.func @main(%x: {t}) -> {t} {{
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %0:2 = "stablehlo.while"(%x, %c0) ({{
  ^bb0(%a: {t}, %n: tensor<i32>):
    %lim = stablehlo.constant dense<3> : tensor<i32>
    %p = stablehlo.compare LT, %n, %lim : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  }}, {{
  ^bb0(%a: {t}, %n: tensor<i32>):
    %one = stablehlo.constant dense<1> : tensor<i32>
    %s = stablehlo.add %a, %a : {t}
    %m = stablehlo.add %n, %one : tensor<i32>
    stablehlo.return %s, %m : {t}, tensor<i32>
  }}) : ({t}, tensor<i32>) -> ({t}, tensor<i32>)
  return %0#0 : {t}
}}"""
    # values [0.5, 20.0] doubled three times: [4.0, 160.0]; stored as
    # 4.0 / 0.5 - 10 = -2 and 160.0 / 0.5 - 10 = 310, clamped to 127.
    (out,) = run(src, np.array([-9, 30], np.int8))
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, [-2, 127])


def test_hybrid_dot_general_dequantizes_rhs_only():
    r = f"tensor<2x1x{q('i8:f32, 0.5:1')}>"
    src = f"""
func.func @main(%x: tensor<1x2xf32>, %w: {r}) -> tensor<1x1xf32> {{
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<1x2xf32>, {r}) -> tensor<1x1xf32>
  return %0 : tensor<1x1xf32>
}}"""
    # w = (storage - 1) * 0.5 = [[1.0], [2.0]]; 1*1 + 2*2 = 5
    (out,) = run(src, np.array([[1.0, 2.0]], np.float32), np.array([[3], [5]], np.int8))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [[5.0]])


def test_quantized_dot_general_with_i32_accumulator():
    a = f"tensor<1x2x{q('i8:f32, 0.5')}>"
    b = f"tensor<2x1x{q('i8:f32, 0.25')}>"
    c = f"tensor<1x1x{q('i32:f32, 0.125')}>"
    src = f"""
func.func @main(%x: {a}, %y: {b}) -> {c} {{
  %0 = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0] : ({a}, {b}) -> {c}
  return %0 : {c}
}}"""
    # x = [1.0, 2.0], y = [1.0, 0.5]: 1 + 1 = 2.0 -> 2.0 / 0.125 = 16
    (out,) = run(src, np.array([[2, 4]], np.int8), np.array([[4], [2]], np.int8))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [[16]])


# --------------------------------------------------------------------------
# Types and loading


def test_parse_quant_storage_range_and_per_axis():
    p = parse_quant("!quant.uniform<i8<-127:127>:f32:1, {0.1:2, 0.2:3}>")
    assert (p.storage_min, p.storage_max, p.quantized_dimension) == (-127, 127, 1)
    np.testing.assert_array_equal(p.zero_points, [2, 3])
    np.testing.assert_allclose(p.scales, [0.1, 0.2])
    u = parse_quant("!quant.uniform<u8:f32, 1.5350925350904778E-5>")
    assert u.storage_dtype == np.uint8 and (u.storage_min, u.storage_max) == (0, 255)
    assert u.zero_points.tolist() == [0] and not u.per_axis


def test_rewrite_spells_single_type_pretty_form_generically():
    t = "tensor<3x!quant.uniform<i8:f32, 0.5:-1>>"
    text = f"  %5 = stablehlo.uniform_quantize %4 : {t}\n"
    out = quant.rewrite_quantized_text(text)
    enc = 'tensor<3xf32, "!quant.uniform<i8:f32, 0.5:-1>">'
    assert out == f'  %5 = "stablehlo_quant.uniform_quantize"(%4) : ({enc}) -> {enc}\n'


def test_quantize_helper_per_axis_broadcasts_along_quantized_dimension():
    p = parse_quant("!quant.uniform<i8:f32:0, {1.0:0, 10.0:0}>")
    x = np.array([[20.0, 30.0], [20.0, 30.0]], np.float32)
    np.testing.assert_array_equal(quant.quantize(x, p), [[20, 30], [2, 3]])
    with pytest.raises(AssertionError):
        np.testing.assert_array_equal(quant.quantize(x.T, p), [[20, 30], [2, 3]])


def test_map_body_adds_scalar_quantized_values():
    t = q("i8:f32, 0.5:-1")
    src = f"""
func.func @main(%x: tensor<3x{t}>) -> tensor<3x{t}> {{
  %0 = "stablehlo.map"(%x, %x) ({{
  ^bb0(%a: tensor<{t}>, %b: tensor<{t}>):
    %p = stablehlo.add %a, %b : tensor<{t}>
    stablehlo.return %p : tensor<{t}>
  }}) {{dimensions = array<i64: 0>}} : (tensor<3x{t}>, tensor<3x{t}>) -> tensor<3x{t}>
  return %0 : tensor<3x{t}>
}}"""
    # x = (s + 1) * 0.5 = [1, 4, 2]; doubled [2, 8, 4] -> s = v / 0.5 - 1
    (out,) = run(src, np.array([1, 7, 3], np.int8))
    np.testing.assert_array_equal(out, [3, 15, 7])


def test_iota_quantizes_indices():
    t = f"tensor<3x{q('i8:f32, 0.5:-1')}>"
    src = f"""
func.func @main() -> {t} {{
  %0 = stablehlo.iota dim = 0 : {t}
  return %0 : {t}
}}"""
    (out,) = run(src)
    np.testing.assert_array_equal(out, [-1, 1, 3])

