"""Output comparison: dtype-aware tolerances, the readable diff, and
`stablehlo-ref compare` gating on agreeing and disagreeing outputs."""

import ml_dtypes
import numpy as np
import pytest
from testkit import interpreter_cli as cli
from testkit import module_files

from stablehlo_interpreter.compare import compare_arrays, compare_outputs
from stablehlo_interpreter.dtypes import ulp_distance

MODULE = """
func.func @main(%a: tensor<3xf32>, %b: tensor<3xi32>) -> (tensor<3xf32>, tensor<3xi32>) {
  %0 = stablehlo.sine %a : tensor<3xf32>
  %1 = stablehlo.multiply %b, %b : tensor<3xi32>
  return %0, %1 : tensor<3xf32>, tensor<3xi32>
}
"""

A = np.array([0.0, 0.5, 2.0], np.float32)
B = np.array([1, -2, 3], np.int32)


def test_integers_exact():
    d = compare_arrays("x", np.array([1, 2, 3]), np.array([1, 2, 4]))
    assert not d.ok and d.mismatched == 1 and d.worst_index == (2,)
    assert d.worst_reference == 3 and d.worst_other == 4
    assert compare_arrays("b", np.array([True, False]), np.array([True, False])).ok
    assert not compare_arrays("b", np.array([True, False]), np.array([True, True])).ok


def test_float_tolerances_and_nan_inf():
    ref = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], np.float32)
    assert compare_arrays("x", ref, ref.copy()).ok  # NaN matches NaN
    close = ref.copy()
    close[0] = np.nextafter(np.float32(1), np.float32(2))
    assert compare_arrays("x", ref, close).ok
    for i, v in [(1, 1.0), (2, -np.inf), (0, np.nan), (4, np.inf)]:
        other = ref.copy()
        other[i] = v
        d = compare_arrays("x", ref, other)
        assert not d.ok and d.worst_index == (i,), (i, v, str(d))
    far = ref.copy()
    far[0] = 1.001
    d = compare_arrays("x", ref, far)
    assert not d.ok
    assert compare_arrays("x", ref, far, rtol=1e-2).ok
    text = str(compare_outputs([ref], [far], names=["loss"]))
    assert "loss: float32[5] MISMATCH: 1 of 5 element(s) differ" in text
    assert "worst at index [0]" in text and "max rel err" in text


def test_ulp_criterion():
    x = np.array([1.0, -0.0, 3.0], np.float32)
    y = np.array([np.nextafter(np.float32(1), np.float32(0)), 0.0, 3.0], np.float32)
    assert ulp_distance(x, y).tolist() == [1, 0, 0]
    assert compare_arrays("x", x, y, ulp=1).ok
    assert not compare_arrays("x", x, y, ulp=0).ok
    h = np.array([1.0, 2.0], ml_dtypes.bfloat16)
    h2 = np.array([1.0, 2.015625], ml_dtypes.bfloat16)  # the next bf16 after 2
    assert ulp_distance(h, h2).tolist() == [0, 1]


def test_structural_problems():
    d = compare_arrays("x", np.zeros(3), np.zeros(4))
    assert not d.ok and "shape" in d.problem
    d = compare_arrays("x", np.zeros(3, np.int32), np.zeros(3, np.float32))
    assert not d.ok and "dtype" in d.problem
    r = compare_outputs([np.zeros(2), np.zeros(2)], [np.zeros(2)])
    assert not r.ok and "missing" in str(r)


@pytest.fixture
def files(tmp_path):
    m, args = module_files(tmp_path, MODULE, A, B)
    return tmp_path, m, args


def test_compare_files_agree(files):
    tmp, m, args = files
    good = tmp / "good.npz"
    # Another backend's outputs: a different sine implementation (float64,
    # rounded) agrees within tolerance; names follow `run --out`.
    np.savez(good, result_0=np.sin(A.astype(np.float64)).astype(np.float32), result_1=B * B)
    p = cli("compare", m, "--args", args, "--against", good)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "all outputs agree" in p.stdout
    # Unnamed arrays are matched in stored order.
    plain = tmp / "plain.npz"
    np.savez(plain, np.sin(A), B * B)
    assert cli("compare", m, "--args", args, "--against", plain).returncode == 0


def test_compare_files_disagree(files):
    tmp, m, args = files
    bad = tmp / "bad.npz"
    wrong = np.sin(A)
    wrong[2] += 1e-3
    np.savez(bad, result_0=wrong, result_1=B * B)
    p = cli("compare", m, "--args", args, "--against", bad)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "result_0: float32[3] MISMATCH: 1 of 3 element(s) differ" in p.stdout
    assert "worst at index [2]" in p.stdout
    # The same difference passes with a looser tolerance.
    assert cli("compare", m, "--args", args, "--against", bad, "--atol", "1e-2").returncode == 0
    ints = tmp / "ints.npz"
    np.savez(ints, result_0=np.sin(A), result_1=B * B + np.array([0, 1, 0], np.int32))
    p = cli("compare", m, "--args", args, "--against", ints)
    assert p.returncode == 1 and "result_1: int32[3] MISMATCH" in p.stdout and "(exact)" in p.stdout


def test_compare_files_errors(files):
    tmp, m, args = files
    p = cli("compare", m, "--args", args, "--against", tmp / "missing.npz")
    assert p.returncode == 2 and "cannot read expected outputs" in p.stderr
    short = tmp / "short.npz"
    np.savez(short, result_0=np.sin(A))
    p = cli("compare", m, "--args", args, "--against", short)
    assert p.returncode == 1 and "missing in" in p.stdout
