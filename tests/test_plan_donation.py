"""In-place updates of dying values (plan loop donation).

dynamic_update_slice may update its operand in place when the plan loop
hands over an array that nothing else can see: these tests check that no
other value (a view, an argument, a second loop value, a result) ever
observes such an update.
"""

import numpy as np

import stablehlo_interpreter as si
import stablehlo_interpreter.compiler as compiler


def _count_donations(monkeypatch):
    seen = []
    orig = compiler._getrefcount

    def getrefcount(x):
        n = orig(x) - 1  # this wrapper's own argument
        seen.append(n)
        return n
    monkeypatch.setattr(compiler, "_getrefcount", getrefcount)
    return seen


SCAN = """
func.func @main(%xs: tensor<6x2xf32>) -> (tensor<6x2xf32>, tensor<6x2xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<6x2xf32>
  %i0 = stablehlo.constant dense<0> : tensor<i32>
  %r:3 = stablehlo.while(%i = %i0, %ys = %z, %ws = %z) : tensor<i32>, tensor<6x2xf32>, tensor<6x2xf32>
  cond {
    %n = stablehlo.constant dense<6> : tensor<i32>
    %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %row = func.call @row(%xs, %i) : (tensor<6x2xf32>, tensor<i32>) -> tensor<1x2xf32>
    %ys2 = func.call @put(%ys, %row, %i) : (tensor<6x2xf32>, tensor<1x2xf32>, tensor<i32>) -> tensor<6x2xf32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %i2, %ys2, %ys2 : tensor<i32>, tensor<6x2xf32>, tensor<6x2xf32>
  }
  return %r#1, %xs : tensor<6x2xf32>, tensor<6x2xf32>
}
func.func private @row(%xs: tensor<6x2xf32>, %i: tensor<i32>) -> tensor<1x2xf32> {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %s = stablehlo.dynamic_slice %xs, %i, %c, sizes = [1, 2] : (tensor<6x2xf32>, tensor<i32>, tensor<i32>) -> tensor<1x2xf32>
  return %s : tensor<1x2xf32>
}
func.func private @put(%ys: tensor<6x2xf32>, %row: tensor<1x2xf32>, %i: tensor<i32>) -> tensor<6x2xf32> {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %u = stablehlo.dynamic_update_slice %ys, %row, %i, %c : (tensor<6x2xf32>, tensor<1x2xf32>, tensor<i32>, tensor<i32>) -> tensor<6x2xf32>
  return %u : tensor<6x2xf32>
}
"""


def test_scan_like_loop_updates_in_place_only_when_unshared(monkeypatch):
    # The body returns the updated value twice: both loop values share the
    # array, so it must be copied every iteration, never updated in place.
    seen = _count_donations(monkeypatch)
    xs = np.arange(12, dtype=np.float32).reshape(6, 2)
    keep = xs.copy()
    ys, xs_out = si.compile(SCAN).run(xs)
    np.testing.assert_array_equal(ys, keep)
    np.testing.assert_array_equal(xs, keep)  # argument untouched
    np.testing.assert_array_equal(xs_out, keep)
    assert seen and min(seen) > 2


def test_scan_updates_in_place(monkeypatch):
    seen = _count_donations(monkeypatch)
    text = SCAN.replace("stablehlo.return %i2, %ys2, %ys2", "stablehlo.return %i2, %ys2, %ws")
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
