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


def _shared(monkeypatch, threads):
    """shared_product on the pool's threads for any size (the machine's load ignored)."""
    from stablehlo_interpreter import pool
    monkeypatch.setattr(blas, "SHARED_GEMM_MACS", 0)
    monkeypatch.setattr(pool, "busy", lambda n: False)
    monkeypatch.setattr(blas, "core_free", lambda: True)
    monkeypatch.setenv("STABLEHLO_REF_THREADS", str(threads))


_SHARED_CASES = [
    ((257, 300), (300, 129), np.float32),       # rows in 4 blocks, the last one short
    ((64, 5), (5, 1), np.float64),              # 2 blocks of 32 rows, one column
    ((5, 40, 7), (5, 7, 9), np.float32),        # few rows: the batch is split
    ((1, 3, 4), (1, 4, 2), np.float32),         # nothing to split: one call
    ((96, 33), (3, 33, 17), np.float32),        # lhs broadcast against a batched rhs
    ((100, 64), (64, 70), np.complex64),
]


def _operands(ashape, bshape, dtype, seed=0):
    rng = np.random.default_rng(seed)

    def one(shape):
        v = rng.standard_normal(shape)
        if np.dtype(dtype).kind == "c":
            v = v + 1j * rng.standard_normal(shape)
        return v.astype(dtype)
    return one(ashape), one(bshape)


def test_shared_product_is_the_product_and_independent_of_the_thread_count(monkeypatch):
    for ashape, bshape, dtype in _SHARED_CASES:
        a, b = _operands(ashape, bshape, dtype)
        results = []
        for threads in (1, 2, 4):
            _shared(monkeypatch, threads)
            r = blas.shared_product(a, b, 1 << 20)
            assert r.dtype == np.dtype(dtype) and r.shape == np.matmul(a, b).shape
            results.append(r)
        # The same blocks whatever the threads: bit for bit.
        for r in results[1:]:
            np.testing.assert_array_equal(r, results[0])
        # Each element is a BLAS dot product of the operands: against float64
        # (complex128), within the element type's sum error bound.
        wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
        exact = np.matmul(a.astype(wide), b.astype(wide))
        bound = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
        eps = np.finfo(dtype).eps
        assert np.all(np.abs(results[0] - exact) <= a.shape[-1] * eps * bound + 1e-30)


def test_shared_product_restores_the_thread_count_and_raises_block_errors(monkeypatch):
    _shared(monkeypatch, 2)
    blas._find()
    before = blas._get() if blas._get is not None else None
    a, b = _operands((128, 16), (16, 8), np.float32)
    blas.shared_product(a, b, 1)
    if before is not None:
        assert blas._get() == before
    import pytest
    with pytest.raises(ValueError):
        blas.shared_product(a, np.zeros((15, 8), np.float32), 1)   # mismatched core dims
    if before is not None:
        assert blas._get() == before


def test_small_products_and_loops_are_not_shared(monkeypatch):
    _shared(monkeypatch, 2)
    from stablehlo_interpreter import pool
    monkeypatch.setattr(blas, "SHARED_GEMM_MACS", 1 << 20)
    shared = []
    real = pool.run_chunks
    monkeypatch.setattr(pool, "run_chunks", lambda *a, **k: (shared.append(1), real(*a, **k))[1])
    a, b = _operands((128, 16), (16, 8), np.float32)
    blas.shared_product(a, b, 128 * 16 * 8)                # below SHARED_GEMM_MACS
    with blas.single_threaded():
        blas.shared_product(a, b, 1 << 21)                 # a loop holds one thread
    assert shared == []
    blas.shared_product(a, b, 1 << 21)
    assert shared == [1]


def test_dot_general_shares_a_mid_sized_product(monkeypatch):
    from stablehlo_interpreter import pool
    from stablehlo_interpreter.ops import dot
    _shared(monkeypatch, 2)
    calls = []
    real = pool.run_chunks
    monkeypatch.setattr(pool, "run_chunks", lambda *a, **k: (calls.append(len(a[1])), real(*a, **k))[1])
    a, b = _operands((200, 64), (64, 48), np.float32)
    for lc, rc, lhs, rhs, want in (((1,), (0,), a, b, a @ b),           # plain matrix product
                                   ((0,), (0,), a.T.copy(), b, a @ b)):  # transposed lhs
        run = dot.make_dot_general((), (), lc, rc, 2, 2, np.float32)
        got = run(lhs, rhs)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert calls == [4, 4]


def test_core_free_reads_the_runnable_tasks(monkeypatch):
    from stablehlo_interpreter import pool
    assert blas.core_free() in (True, False)
    monkeypatch.setattr(pool, "thread_count", lambda: 2)
    for line, free in ((b"0.50 0.40 0.30 1/120 999\n", True),
                       (b"2.50 0.40 0.30 2/120 999\n", False),
                       (b"garbled", True)):
        monkeypatch.setattr(blas.os, "pread", lambda fd, n, off, line=line: line)
        assert blas.core_free() is free

