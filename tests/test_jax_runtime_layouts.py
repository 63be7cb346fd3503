"""Layouts (jax.experimental.layout) on stablehlo_ref vs XLA CPU (scenario in
runtime_scenarios.py): explicit row-major layouts (JAX's default) and
Layout.AUTO behave as on CPU; a column-major layout, which XLA CPU honours,
is refused at compile time with the reason (buffers are row-major numpy
arrays), where it used to compile and trip JAX's "Unexpected XLA layout
override" assertion."""

import numpy as np
import pytest
import runtime_scenarios as rs

NAMES = ["custom_layouts"]


@pytest.fixture(scope="module")
def results():
    return rs.run_both(NAMES, devices=1)


def test_layouts_like_cpu(results):
    r, c = rs.values_of(results, "custom_layouts")
    for key in ("put", "jit", "default_after", "auto"):
        assert r[key] == c[key], key
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    want = x[:, ::-1] * 2 + x.sum(0)
    assert r["put"] == [[0, 1], x.tolist()]
    assert r["jit"] == [[0, 1], want.tolist()]
    assert r["default_after"][1] == (want + 1).tolist()


def test_column_major_refused_with_reason(results):
    ref, cpu = (r["custom_layouts"] for r in results)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert cpu["values"]["column_major"] == [[1, 0], (x * 2).tolist()]
    assert ref["values"]["column_major"] == (
        "JaxRuntimeError: UNIMPLEMENTED: argument 0 of @main asks for the layout {0,1} "
        "(Layout(major_to_minor=(1, 0))); stablehlo_ref keeps arrays in row-major order "
        "(major_to_minor=(0, 1)) and supports only that layout and Layout.AUTO")
