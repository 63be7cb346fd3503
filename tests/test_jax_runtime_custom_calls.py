"""Every custom_call target JAX emits either runs on the interpreter or is
rejected at compile time with a reason naming it."""

import numpy as np
import pytest

import stablehlo_interpreter as shi
import stablehlo_interpreter.ops  # noqa: F401 - registers the kernels
from stablehlo_interpreter.registry import CUSTOM_CALLS, custom_call_rejection

# Targets JAX 0.10 emits outside its export stability list (found by
# searching jax/_src for custom_call / ffi_lowering).
EMITTED_ELSEWHERE = [
    "dce_sink", "AllocateBuffer", "CreateBuffer", "Pin", "Unpin", "MoveToHost",
    "MoveToDevice", "LayoutConstraint", "InspectSharding", "xla_ffi_python_cpu_callback",
    "xla_ffi_partitioned_python_cpu_callback", "xla_ffi_python_gpu_callback",
    "stablehlo.dynamic_reduce_window", "stablehlo.dynamic_top_k",
    "stablehlo.dynamic_rng_bit_generator", "shape_assertion", "__gpu$xla.gpu.triton",
    "triton_kernel_call_ffi", "__cudnn$fusion", "mosaic_gpu_v2", "tpu_custom_call",
    "cu_threefry2x32_ffi", "lapack_sgetrf_ffi", "cusolver_getrf_ffi",
    "xla.sdy.FuncResultSharding", "xla.sdy.ShardingGroup",
]


def _stable_targets():
    from jax._src.export import _export
    return sorted(_export._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE)


@pytest.mark.parametrize("target", sorted(set(_stable_targets()) | set(EMITTED_ELSEWHERE)))
def test_target_runs_or_has_a_reason(target):
    assert target in CUSTOM_CALLS or custom_call_rejection(target), target


def test_rejection_reason_reaches_the_compile_error():
    text = """
    func.func @main(%x: tensor<2x2xf32>) -> tensor<2x2xf32> {
      %0 = stablehlo.custom_call @lapack_sgetrf_ffi(%x) : (tensor<2x2xf32>) -> tensor<2x2xf32>
      return %0 : tensor<2x2xf32>
    }"""
    with pytest.raises(shi.UnsupportedOpsError, match=r"@lapack_sgetrf_ffi: .*platform 'cpu'"):
        shi.compile(text)


def test_dce_sink_and_allocate_buffer_run():
    text = """
    func.func @main(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<2xi32>) {
      stablehlo.custom_call @dce_sink(%x) {has_side_effect = true} : (tensor<3xf32>) -> ()
      %e = stablehlo.custom_call @AllocateBuffer() : () -> tensor<2xi32>
      return %x, %e : tensor<3xf32>, tensor<2xi32>
    }"""
    x = np.array([1, 2, 3], np.float32)
    y, e = shi.compile(text).run(x)
    np.testing.assert_array_equal(y, x)
    assert e.shape == (2,) and e.dtype == np.int32


def test_jax_dce_sink_and_empty_on_stablehlo_ref():
    import runtime_scenarios as rs
    ref = rs.run("stablehlo_ref", ["dce_sink_and_empty"], devices=1)["dce_sink_and_empty"]
    cpu = rs.run("cpu", ["dce_sink_and_empty"], devices=1)["dce_sink_and_empty"]
    assert ref["error"] is None, ref["error"]
    assert ref["values"] == cpu["values"]
