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
