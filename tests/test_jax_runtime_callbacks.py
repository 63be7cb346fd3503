"""Host callbacks on stablehlo_ref, compared with XLA CPU: values, printed
text and errors of jax.debug.print / debug.callback / pure_callback /
io_callback in jit, scan, while, cond, vmap (every vmap_method), grad of a
custom_jvp'd callback, sharded jit, shard_map and pmap (scenarios in
runtime_scenarios.py; one process per platform)."""

import numpy as np
import pytest
import runtime_scenarios as rs

NAMES = ["debug_print_basic", "debug_callback_kwargs", "ordered_prints_in_scan",
         "prints_in_while_and_cond", "pure_callback_values", "pure_callback_vmap_methods",
         "pure_callback_under_grad", "io_callback_ordered_and_not",
         "io_callback_in_scan_and_vmap", "callbacks_multi_device", "debug_print_shard_map",
         "debug_print_pmap", "debug_print_pmap_no_outputs", "callback_raises",
         "callback_wrong_shape"]
# Per-device prints run concurrently on both platforms: compare as sets.
UNORDERED_TEXT = {"debug_print_shard_map", "debug_print_pmap", "debug_print_pmap_no_outputs"}
SILENT = {"pure_callback_values", "pure_callback_under_grad", "io_callback_in_scan_and_vmap",
          "callbacks_multi_device"}


@pytest.fixture(scope="module")
def results():
    return rs.run_both(NAMES)


def _close(a, b):
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        # np.sin/np.cos run on the host in both cases; the rest is exact
        # float32 arithmetic: equal up to the last bit of a f32 product.
        return bool(np.isclose(a, b, rtol=1e-6, atol=0))
    return a == b


@pytest.mark.parametrize("name", [n for n in NAMES if n not in ("callback_raises",
                                                                 "callback_wrong_shape")])
def test_same_values_and_text_as_cpu(results, name):
    ref, cpu = results[0][name], results[1][name]
    assert ref["error"] is None, ref["error"]
    assert cpu["error"] is None, cpu["error"]
    assert _close(ref["values"], cpu["values"]), (ref["values"], cpu["values"])
    if name in UNORDERED_TEXT:
        assert sorted(ref["stdout"].splitlines()) == sorted(cpu["stdout"].splitlines())
    else:
        assert ref["stdout"] == cpu["stdout"]
    if name not in SILENT:
        assert ref["stdout"], "the scenario prints something"


def test_callback_exception_reaches_user_with_location(results):
    ref, cpu = results[0]["callback_raises"], results[1]["callback_raises"]
    assert cpu["error"].startswith("JaxRuntimeError") and "on purpose" in cpu["error"]
    # Same exception type and text; the op's location replaces CPU's
    # Python traceback (the callback's own traceback is logged by JAX).
    assert ref["error"].startswith("JaxRuntimeError"), ref["error"]
    assert "ValueError: the callback failed on purpose" in ref["error"]
    assert "pure_callback" in ref["error"] and "runtime_scenarios.py" in ref["error"]


def test_callback_result_shape_is_checked(results):
    ref, cpu = results[0]["callback_wrong_shape"], results[1]["callback_wrong_shape"]
    text = "Incorrect output shape for return value #0: Expected: (2,), Actual: (3,)"
    assert text in cpu["error"] and text in ref["error"], (ref["error"], cpu["error"])


def test_without_cpu_backend_callbacks_get_numpy_arrays():
    # JAX_PLATFORMS=stablehlo_ref: JAX's own callback impls would need a CPU
    # device ("Make sure "cpu" is listed in --jax_platforms"); the plugin
    # calls the callback with numpy arrays instead and prints the same text.
    names = ["debug_print_basic", "ordered_prints_in_scan", "pure_callback_values",
             "io_callback_ordered_and_not"]
    ref = rs.run("stablehlo_ref_only", names)
    cpu = rs.run("cpu", names)
    for n in names:
        assert ref[n]["error"] is None, ref[n]["error"]
        assert ref[n]["stdout"] == cpu[n]["stdout"], n
        assert _close(ref[n]["values"], cpu[n]["values"]), n
