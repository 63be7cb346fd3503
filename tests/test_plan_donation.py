"""In-place updates of dying values (plan loop donation).

dynamic_update_slice may update its operand in place when the plan loop
hands over an array that nothing else can see: these tests check that no
other value (a view, an argument, a second loop value, a result) ever
observes such an update.
"""

import numpy as np
from testkit import DONATION_SCAN, count_donations

import stablehlo_interpreter as si


def test_scan_like_loop_updates_in_place_only_when_unshared(monkeypatch):
    # The body returns the updated value twice: both loop values share the
    # array, so it must be copied every iteration, never updated in place.
    seen = count_donations(monkeypatch)
    xs = np.arange(12, dtype=np.float32).reshape(6, 2)
    keep = xs.copy()
    ys, xs_out = si.compile(DONATION_SCAN.replace("RESULT", "%ys2")).run(xs)
    np.testing.assert_array_equal(ys, keep)
    np.testing.assert_array_equal(xs, keep)  # argument untouched
    np.testing.assert_array_equal(xs_out, keep)
    assert seen and min(seen) > 2


def test_scan_updates_in_place(monkeypatch):
    seen = count_donations(monkeypatch)
    text = DONATION_SCAN.replace("RESULT", "%ws")
    xs = np.arange(12, dtype=np.float32).reshape(6, 2)
    keep = xs.copy()
    ys, xs_out = si.compile(text).run(xs)
    np.testing.assert_array_equal(ys, keep)
    np.testing.assert_array_equal(xs, keep)
    assert 2 in seen  # later iterations update the array the body owns


def test_live_view_is_not_updated():
    text = """
    func.func @main(%a: tensor<8xf32>, %u: tensor<2xf32>) -> (tensor<8xf32>, tensor<4xf32>) {
      %c = stablehlo.constant dense<1.0> : tensor<8xf32>
      %b = stablehlo.add %a, %c : tensor<8xf32>
      %s = stablehlo.slice %b [0:4] : (tensor<8xf32>) -> tensor<4xf32>
      %i = stablehlo.constant dense<0> : tensor<i32>
      %d = stablehlo.dynamic_update_slice %b, %u, %i : (tensor<8xf32>, tensor<2xf32>, tensor<i32>) -> tensor<8xf32>
      return %d, %s : tensor<8xf32>, tensor<4xf32>
    }"""
    a = np.zeros(8, np.float32)
    d, s = si.compile(text).run(a, np.full(2, 7, np.float32))
    np.testing.assert_array_equal(d, [7, 7, 1, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(s, [1, 1, 1, 1])
    np.testing.assert_array_equal(a, np.zeros(8))


def test_argument_is_not_updated():
    text = """
    func.func @main(%a: tensor<4xf32>, %u: tensor<1xf32>) -> tensor<4xf32> {
      %i = stablehlo.constant dense<2> : tensor<i32>
      %d = func.call @put(%a, %u, %i) : (tensor<4xf32>, tensor<1xf32>, tensor<i32>) -> tensor<4xf32>
      return %d : tensor<4xf32>
    }
    func.func private @put(%a: tensor<4xf32>, %u: tensor<1xf32>, %i: tensor<i32>) -> tensor<4xf32> {
      %d = stablehlo.dynamic_update_slice %a, %u, %i : (tensor<4xf32>, tensor<1xf32>, tensor<i32>) -> tensor<4xf32>
      return %d : tensor<4xf32>
    }"""
    a = np.zeros(4, np.float32)
    d = si.compile(text).run(a, np.ones(1, np.float32))[0]
    np.testing.assert_array_equal(d, [0, 0, 1, 0])
    np.testing.assert_array_equal(a, np.zeros(4))
