"""Custom layouts (jax.experimental.layout) on stablehlo_ref behave as on XLA
CPU: the layouts JAX reports and the values (scenario in runtime_scenarios.py)."""

import numpy as np
import pytest
import runtime_scenarios as rs

NAMES = ["custom_layouts"]


@pytest.fixture(scope="module")
def results():
    return rs.run("stablehlo_ref", NAMES, devices=1), rs.run("cpu", NAMES, devices=1)


def test_custom_layouts_like_cpu(results):
    ref, cpu = (r["custom_layouts"] for r in results)
    assert ref["error"] is None and cpu["error"] is None, (ref["error"], cpu["error"])
    assert ref["values"] == cpu["values"]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    want = x[:, ::-1] * 2 + x.sum(0)
    v = ref["values"]
    assert v["put"] == [[0, 1], x.tolist()]
    assert v["jit"] == [[0, 1], want.tolist()]
    assert v["default_after"][1] == (want + 1).tolist()
