"""Complex special values: the interpreter follows C99 Annex G (what numpy
computes in complex128), which the spec does not pin for complex operands.

XLA's expansions of cosh/tan/expm1 give nan+nan*j at some of these points and
JAX's FunctionAccuracyTest expects that (its three complex64 failures on
stablehlo_ref, docs/accuracy.md); the finite-input expm1 case was a real bug.
"""
import numpy as np
import pytest

import stablehlo_interpreter as shi

INF = np.inf


def run(op, values):
    x = np.array(values, np.complex64)
    n = x.size
    text = f"""func.func @main(%x: tensor<{n}xcomplex<f32>>) -> tensor<{n}xcomplex<f32>> {{
      %r = stablehlo.{op} %x : tensor<{n}xcomplex<f32>>
      return %r : tensor<{n}xcomplex<f32>>
    }}"""
    return shi.compile(text).run(x)[0]


def test_expm1_of_a_large_real_input_has_a_zero_imaginary_part():
    # exp(x) overflows; exp(x) * sin(0) was inf * 0 = NaN before.
    got = run("exponential_minus_one", [1.7e23 + 0j, 89.0 + 0j, complex(3.4e38, -0.0), 1.0 + 0j])
    assert np.isposinf(got.real[:3]).all()
    assert (got.imag[:3] == 0).all() and np.signbit(got.imag[2])
    np.testing.assert_allclose(got[3], np.expm1(1.0), rtol=1e-7)


@pytest.mark.parametrize("op,fn,values", [
    ("cosine", np.cos, [complex(INF, INF), complex(0, INF), complex(INF, 0)]),
    ("tan", np.tan, [complex(-INF, 0), complex(0, INF), complex(1, -INF)]),
    ("exponential_minus_one", lambda z: np.exp(z) - 1, [complex(-INF, INF), complex(-INF, -INF), complex(INF, 0)]),
    ("exponential", np.exp, [complex(-INF, INF), complex(INF, 0), complex(-INF, 0)]),
])
def test_non_finite_inputs_follow_c99(op, fn, values):
    with np.errstate(all="ignore"):
        want = fn(np.array(values, np.complex128)).astype(np.complex64)
    got = run(op, values)
    for part in ("real", "imag"):
        w, g = getattr(want, part), getattr(got, part)
        assert np.array_equal(np.isnan(w), np.isnan(g)), (op, values, got, want)
        ok = ~np.isnan(w)
        assert np.array_equal(w[ok], g[ok]), (op, values, got, want)
