"""Semantics of the check dialect ops and the @check.* custom calls."""

import ml_dtypes
import numpy as np
import pytest

import stablehlo_interpreter as shi
from stablehlo_interpreter import dtypes


def run(body, *args, arg_types=()):
    """Compile and run a function whose body is ``body``."""
    params = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(arg_types))
    src = f"func.func @main({params}) {{\n{body}\n  return\n}}"
    return shi.compile(src).run(*args)


def expect_failure(body, *args, arg_types=()):
    with pytest.raises(shi.CheckFailure) as info:
        run(body, *args, arg_types=arg_types)
    return str(info.value)


# --------------------------------------------------------------------------
# expect_eq


def test_expect_eq_const_nan_equals_nan_and_signed_zeros():
    run("""
  %0 = stablehlo.constant dense<[1.0, 0x7FC00000, -0.0]> : tensor<3xf32>
  "check.expect_eq_const"(%0) {value = dense<[1.0, 0x7FC00000, 0.0]> : tensor<3xf32>} : (tensor<3xf32>) -> ()""")


def test_expect_eq_failure_names_index_and_values():
    msg = expect_failure("""
  %0 = stablehlo.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>
  %1 = stablehlo.constant dense<[[1, 2], [3, 5]]> : tensor<2x2xi32>
  "check.expect_eq"(%0, %1) : (tensor<2x2xi32>, tensor<2x2xi32>) -> ()""")
    assert "check.expect_eq" in msg
    assert "[1, 1]" in msg and "4 (actual)" in msg and "5 (expected)" in msg
    assert "1 of 4 elements differ" in msg


def test_expect_eq_nan_vs_number_fails():
    msg = expect_failure("""
  %0 = stablehlo.constant dense<[0x7FC00000]> : tensor<1xf32>
  "check.expect_eq_const"(%0) {value = dense<[1.0]> : tensor<1xf32>} : (tensor<1xf32>) -> ()""")
    assert "nan (actual)" in msg


@pytest.mark.parametrize("ty,good,bad", [
    ("i4", "[-8, 7]", "[-8, 6]"),
    ("ui2", "[3, 0]", "[2, 0]"),
    ("i1", "[true, false]", "[true, true]"),
    ("bf16", "[1.5, -2.0]", "[1.5, -2.5]"),
    ("f8E4M3FN", "[0.5, 448.0]", "[0.5, 416.0]"),
    ("complex<f32>", "[(1.0, 2.0), (0.0, -1.0)]", "[(1.0, 2.0), (0.0, 1.0)]"),
    ("ui64", "[18446744073709551615, 0]", "[18446744073709551614, 0]"),
])
def test_expect_eq_const_element_types(ty, good, bad):
    body = """
  %0 = stablehlo.constant dense<{good}> : tensor<2x{ty}>
  "check.expect_eq_const"(%0) {{value = dense<{exp}> : tensor<2x{ty}>}} : (tensor<2x{ty}>) -> ()"""
    run(body.format(good=good, exp=good, ty=ty))
    msg = expect_failure(body.format(good=good, exp=bad, ty=ty))
    assert "element values don't match" in msg


def test_expect_eq_const_as_properties_with_complex_value():
    # Generic `<{...}>` properties are invisible to the bindings' attribute
    # API; complex dense values must be decoded from text (reading them as
    # attribute objects aborts the process).
    run("""
  %0 = stablehlo.constant dense<[(3.0, 5.0), (15.0, 11.0)]> : tensor<2xcomplex<f32>>
  "check.expect_eq_const"(%0) <{value = dense<[(3.0, 5.0), (15.0, 11.0)]> : tensor<2xcomplex<f32>>}> : (tensor<2xcomplex<f32>>) -> ()""")
    expect_failure("""
  %0 = stablehlo.constant dense<[(3.0, 5.0), (15.0, 11.0)]> : tensor<2xcomplex<f32>>
  "check.expect_eq_const"(%0) <{value = dense<[(3.0, 5.0), (15.0, 12.0)]> : tensor<2xcomplex<f32>>}> : (tensor<2xcomplex<f32>>) -> ()""")


def test_expect_eq_shape_mismatch():
    msg = expect_failure("""
  %0 = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
  "check.expect_eq_const"(%0) {value = dense<[1, 2, 3]> : tensor<3xi32>} : (tensor<2xi32>) -> ()""")
    assert "shape mismatch" in msg


# --------------------------------------------------------------------------
# expect_almost_eq


def test_almost_eq_default_tolerance_is_1e_4():
    run("""
  %0 = stablehlo.constant dense<5.0> : tensor<f64>
  "check.expect_almost_eq_const"(%0) {value = dense<5.00009> : tensor<f64>} : (tensor<f64>) -> ()""")
    msg = expect_failure("""
  %0 = stablehlo.constant dense<5.0> : tensor<f64>
  "check.expect_almost_eq_const"(%0) {value = dense<5.0002> : tensor<f64>} : (tensor<f64>) -> ()""")
    assert "tolerance 0.0001" in msg


def test_almost_eq_explicit_tolerance_and_specials():
    run("""
  %0 = stablehlo.constant dense<[5.0, 0x7FF0000000000000, 0x7FF8000000000000]> : tensor<3xf64>
  %1 = stablehlo.constant dense<[5.09, 0x7FF0000000000000, 0x7FF8000000000000]> : tensor<3xf64>
  "check.expect_almost_eq"(%0, %1) {tolerance = 0.1 : f64} : (tensor<3xf64>, tensor<3xf64>) -> ()""")
    expect_failure("""
  %0 = stablehlo.constant dense<[0x7FF0000000000000]> : tensor<1xf64>
  %1 = stablehlo.constant dense<[0xFFF0000000000000]> : tensor<1xf64>
  "check.expect_almost_eq"(%0, %1) {tolerance = 0.1 : f64} : (tensor<1xf64>, tensor<1xf64>) -> ()""")


def test_custom_call_almost_eq_uses_1e_3():
    t = "tensor<2xf32>"
    body = ("  stablehlo.custom_call @check.expect_almost_eq(%arg0, %arg1) "
            f"{{has_side_effect = true}} : ({t}, {t}) -> ()")
    a = np.array([1.0, -2.0], np.float32)
    run(body, a, a + np.float32(5e-4), arg_types=(t, t))
    with pytest.raises(shi.CheckFailure, match="tolerance 0.001"):
        run(body, a, a + np.float32(2e-3), arg_types=(t, t))


def test_almost_eq_complex_checks_both_parts():
    t = "tensor<1xcomplex<f64>>"
    body = f'  "check.expect_almost_eq"(%arg0, %arg1) : ({t}, {t}) -> ()'
    run(body, np.array([1 + 1j]), np.array([1 + 1.00001j]), arg_types=(t, t))
    with pytest.raises(shi.CheckFailure):
        run(body, np.array([1 + 1j]), np.array([1 + 1.01j]), arg_types=(t, t))


# --------------------------------------------------------------------------
# expect_close (ULP distance)


def test_ulp_distance_basics():
    """check.expect_close counts with dtypes.ulp_distance (tests/test_dtypes.py
    has the edge cases)."""
    f32 = np.float32
    one = np.array([1.0], f32)
    nxt = np.nextafter(one, f32(2))
    assert dtypes.ulp_distance(one, nxt)[0] == 1
    assert dtypes.ulp_distance(np.array([0.0], f32), np.array([-0.0], f32))[0] == 0
    tiny = np.array([1e-45], f32)   # smallest subnormal
    assert dtypes.ulp_distance(tiny, -tiny)[0] == 2
    nan1 = np.array([0x7FC00000], np.uint32).view(f32)
    nan2 = np.array([0x7FC00001], np.uint32).view(f32)
    assert dtypes.ulp_distance(nan1, nan2)[0] == 0
    assert dtypes.ulp_distance(np.array([np.inf], f32), np.array([3e38], f32))[0] == \
        np.iinfo(np.uint64).max
    b = np.array([1.0], ml_dtypes.bfloat16)
    b3 = b.view(np.uint16) + np.uint16(3)
    assert dtypes.ulp_distance(b, b3.view(ml_dtypes.bfloat16))[0] == 3
    c = np.array([1 + 1j], np.complex64)
    c2 = np.array([complex(1.0, float(np.nextafter(f32(1), f32(2))))], np.complex64)
    assert dtypes.ulp_distance(c, c2)[0] == 1


def test_expect_close_max_ulp():
    # 5.0 vs 5.01 in f16 is 3 ULP apart (as in upstream's check.mlir).
    body = """
  %0 = stablehlo.constant dense<5.0> : tensor<f16>
  %1 = stablehlo.constant dense<5.010> : tensor<f16>
  "check.expect_close"(%0, %1) {{max_ulp_difference = {n} : ui64}} : (tensor<f16>, tensor<f16>) -> ()"""
    run(body.format(n=3))
    msg = expect_failure(body.format(n=2))
    assert "ULP difference=3" in msg


def test_expect_close_min_ulp():
    expect_failure("""
  %0 = stablehlo.constant dense<5.0> : tensor<f16>
  "check.expect_close"(%0, %0) {max_ulp_difference = 3 : ui64, min_ulp_difference = 1 : ui64} : (tensor<f16>, tensor<f16>) -> ()""")


def test_custom_call_expect_close_allows_3_ulp():
    t = "tensor<3xf32>"
    body = f"  stablehlo.custom_call @check.expect_close(%arg0, %arg1) : ({t}, {t}) -> ()"
    a = np.array([1.0, -7.5, 1e-3], np.float32)
    run(body, a, (a.view(np.uint32) + 3).view(np.float32), arg_types=(t, t))
    with pytest.raises(shi.CheckFailure, match="ULP difference=4"):
        run(body, a, (a.view(np.uint32) + 4).view(np.float32), arg_types=(t, t))


# --------------------------------------------------------------------------
# @check.eq, probes


def test_custom_call_check_eq_returns_true_and_raises_on_mismatch():
    src = """func.func @main(%a: tensor<2xi32>, %b: tensor<2xi32>) -> tensor<i1> {
  %0 = stablehlo.custom_call @check.eq(%a, %b) : (tensor<2xi32>, tensor<2xi32>) -> tensor<i1>
  return %0 : tensor<i1>
}"""
    p = shi.compile(src)
    (out,) = p.run(np.array([1, 2], np.int32), np.array([1, 2], np.int32))
    assert out.dtype == np.bool_ and out.shape == () and bool(out)
    with pytest.raises(shi.CheckFailure, match="@check.eq"):
        p.run(np.array([1, 2], np.int32), np.array([1, 3], np.int32))


def test_custom_call_check_eq_floats_tolerate_1e_4():
    t = "tensor<1xf32>"
    body = f"  %0 = stablehlo.custom_call @check.eq(%arg0, %arg1) : ({t}, {t}) -> tensor<i1>"
    run(body, np.array([1.0], np.float32), np.array([1.00005], np.float32), arg_types=(t, t))
    with pytest.raises(shi.CheckFailure):
        run(body, np.array([1.0], np.float32), np.array([1.001], np.float32),
            arg_types=(t, t))


def test_probe_then_expect_serialized_eq(tmp_path, monkeypatch):
    body = """
  %0 = stablehlo.constant dense<[1.0, 2.5]> : tensor<2xbf16>
  %1 = "interpreter.probe"(%0) {probe_id = "p0"} : (tensor<2xbf16>) -> tensor<2xbf16>
  "check.expect_serialized_eq"(%1) {probe_id = "p0"} : (tensor<2xbf16>) -> ()"""
    run(body)                       # in memory
    monkeypatch.setenv("STABLEHLO_REF_PROBE_DIR", str(tmp_path))
    run(body)                       # through probe<N>.npy + index.csv
    index = (tmp_path / "index.csv").read_text().strip().split(",")
    assert index[0] == "p0" and index[1] == "tensor<2xbf16>"
    saved = np.load(index[2]).view(ml_dtypes.bfloat16)
    assert saved.tolist() == [1.0, 2.5]
    msg = expect_failure("""
  %0 = stablehlo.constant dense<[1.0, 2.5]> : tensor<2xbf16>
  "check.expect_serialized_eq"(%0) {probe_id = "missing"} : (tensor<2xbf16>) -> ()""")
    assert "no serialized data" in msg
