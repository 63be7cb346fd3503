"""stablehlo_interpreter/blas.py: one BLAS thread for small products, restored after."""

import numpy as np

from stablehlo_interpreter import blas


def test_small_product_result_and_thread_count_restored():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.arange(8, dtype=np.float32).reshape(4, 2)
    blas._find()
    before = blas._get() if blas._get is not None else None
    np.testing.assert_array_equal(blas.small_product(np.matmul, a, b), a @ b)
    if before is not None:
        assert blas._get() == before


def test_small_product_restores_on_error():
    blas._find()
    before = blas._get() if blas._get is not None else None

    def boom(*_):
        raise ValueError("x")
    try:
        blas.small_product(boom)
    except ValueError:
        pass
    if before is not None:
        assert blas._get() == before


def _recording_lib(calls, name, n=4):
    state = {"n": n}

    def get():
        return state["n"]

    def set_(k):
        calls.append((name, k))
        state["n"] = k
    return get, set_


def _recorded(monkeypatch):
    """numpy's and scipy's OpenBLAS replaced by recorders (4 threads each):
    the (lib, threads) switches made, numpy's (get, set), the thread counts
    a product saw, and that product."""
    blas._find()
    calls = []
    np_lib, sp_lib = _recording_lib(calls, "numpy"), _recording_lib(calls, "scipy")
    monkeypatch.setattr(blas, "_libs", [np_lib, sp_lib])
    monkeypatch.setattr(blas, "_numpy_libs", [np_lib])
    seen = []

    def product():
        seen.append(np_lib[0]())
        return 1
    return calls, np_lib, seen, product


def test_numpy_products_switch_numpys_blas_only_and_tiny_ones_none(monkeypatch):
    calls, np_lib, seen, product = _recorded(monkeypatch)
    assert blas.small_product(product, macs=256 * 256) == 1
    assert calls == [("numpy", 1), ("numpy", 4)] and seen == [1]
    calls.clear()
    blas.small_product(product, macs=blas.UNTHREADED_MACS - 1)   # OpenBLAS runs it on one thread
    assert calls == []
    blas.small_product(product, libs=blas._libs)                  # scipy's wrappers: every library
    assert calls == [("numpy", 1), ("scipy", 1), ("numpy", 4), ("scipy", 4)]


def test_numpys_openblas_is_told_apart():
    import os
    blas._find()
    numpy_dir = os.path.dirname(os.path.realpath(np.__file__))
    if any(numpy_dir in os.path.realpath(p) or p.startswith(numpy_dir)
           for p in blas._found_paths):
        assert 0 < len(blas._numpy_libs) <= len(blas._libs)


def test_single_threaded_scope_holds_one_thread_and_switches_nothing_inside(monkeypatch):
    calls, np_lib, seen, product = _recorded(monkeypatch)
    with blas.single_threaded():
        pass
    assert calls == []                            # no product: nothing switched
    with blas.single_threaded():
        with blas.single_threaded():              # scopes nest
            assert blas.small_product(product, macs=256 * 256) == 1
        assert calls == [("numpy", 1)] and seen == [1]
        blas.small_product(product, libs=blas._libs)   # scipy's wrappers still switch theirs
        assert calls[1:] == [("scipy", 1), ("scipy", 4)]
    assert calls[-1] == ("numpy", 4) and np_lib[0]() == 4 and blas._pinned == 0


def test_generated_loop_of_small_products_holds_one_thread(monkeypatch):
    import stablehlo_interpreter as shi
    from stablehlo_interpreter import loopgen
    monkeypatch.setattr(loopgen, "GENERATE_AFTER", 0)
    text = """
    func.func @main(%h0: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
      %c0 = stablehlo.constant dense<0> : tensor<i32>
      %r:2 = stablehlo.while(%i = %c0, %h = %h0) : tensor<i32>, tensor<4x8xf32>
      cond {
        %n = stablehlo.constant dense<3> : tensor<i32>
        %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %lt : tensor<i1>
      } do {
        %one = stablehlo.constant dense<1> : tensor<i32>
        %i2 = stablehlo.add %i, %one : tensor<i32>
        %d = stablehlo.dot_general %h, %w, contracting_dims = [1] x [0] : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
        stablehlo.return %i2, %d : tensor<i32>, tensor<4x8xf32>
      }
      return %r#1 : tensor<4x8xf32>
    }"""
    h = np.arange(32, dtype=np.float32).reshape(4, 8) / 32
    w = np.eye(8, dtype=np.float32) * 0.5
    held = []
    real = blas.single_threaded.__enter__

    def enter(self):
        held.append(True)
        return real(self)
    monkeypatch.setattr(blas.single_threaded, "__enter__", enter)
    (r,) = shi.compile(text).run(h, w)
    np.testing.assert_array_equal(r, h * np.float32(0.125))
    assert held and blas._pinned == 0
