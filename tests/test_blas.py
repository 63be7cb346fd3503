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


def test_numpy_products_switch_numpys_blas_only_and_tiny_ones_none(monkeypatch):
    blas._find()
    calls = []
    np_lib, sp_lib = _recording_lib(calls, "numpy"), _recording_lib(calls, "scipy")
    monkeypatch.setattr(blas, "_libs", [np_lib, sp_lib])
    monkeypatch.setattr(blas, "_numpy_libs", [np_lib])
    seen = []

    def product():
        seen.append(np_lib[0]())
        return 1
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
