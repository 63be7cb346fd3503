"""The plugin's handling of the programs PyTorch/XLA sends, without torch:
XLA HLO in PyTorch/XLA's forms (the legacy dynamic-slice of randperm) and
GSPMD-annotated SPMD programs (the result shardings the plugin chooses, the
optimized program XLA's C API client reads them from, per-device shards,
uneven shards).  The end-to-end runs with torch_xla are in test_torch_xla.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from jax._src.lib import _jax, hlo

import stablehlo_interpreter as shi
from stablehlo_pjrt.executable import CompileOptions, compile_program
from stablehlo_pjrt.hlo_program import hlo_to_stablehlo, scalar_start_indices
from stablehlo_pjrt.spmd import SpmdPlan, gspmd_text

# HLO with XLA's legacy start-index form (one s32[2] vector for a rank-2
# operand), which PyTorch/XLA's randperm emits and XLA's importer refuses.
LEGACY = """HloModule legacy, entry_computation_layout={(f32[4,5]{1,0}, s32[2]{0}, f32[2,3]{1,0})->(f32[2,3]{1,0}, f32[4,5]{1,0})}

ENTRY main {
  x = f32[4,5]{1,0} parameter(0)
  i = s32[2]{0} parameter(1)
  u = f32[2,3]{1,0} parameter(2)
  ds = f32[2,3]{1,0} dynamic-slice(x, i), dynamic_slice_sizes={2,3}
  dus = f32[4,5]{1,0} dynamic-update-slice(x, u, i)
  ROOT t = (f32[2,3]{1,0}, f32[4,5]{1,0}) tuple(ds, dus)
}
"""


def _proto(text):
    return hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto()


def test_legacy_dynamic_slice_is_rewritten_and_runs():
    meta = compile_program(_proto(LEGACY), "hlo", CompileOptions(b""))
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    u = -np.ones((2, 3), np.float32)
    for start in ([1, 3], [3, 9], [-2, 0]):
        ds, dus = meta.program.run(x, np.array(start, np.int32), u)
        # The spec's (and XLA's) clamping: the slice stays inside the operand.
        r, c = min(max(start[0], 0), 2), min(max(start[1], 0), 2)
        np.testing.assert_array_equal(ds, x[r:r + 2, c:c + 3])
        want = x.copy()
        want[r:r + 2, c:c + 3] = u
        np.testing.assert_array_equal(dus, want)


def test_rewrite_leaves_current_programs_alone():
    current = LEGACY.replace("s32[2]{0}, f32[2,3]", "s32[], s32[], f32[2,3]") \
        .replace("i = s32[2]{0} parameter(1)", "i = s32[] parameter(1)\n  j = s32[] parameter(2)") \
        .replace("u = f32[2,3]{1,0} parameter(2)", "u = f32[2,3]{1,0} parameter(3)") \
        .replace("dynamic-slice(x, i)", "dynamic-slice(x, i, j)") \
        .replace("dynamic-update-slice(x, u, i)", "dynamic-update-slice(x, u, i, j)")
    assert scalar_start_indices(_proto(current)) is None
    assert scalar_start_indices(_proto(LEGACY)) is not None
    assert scalar_start_indices(b"not a proto") is None


def test_unconvertible_hlo_is_a_clear_error():
    from stablehlo_pjrt.error import PjrtError
    with pytest.raises(PjrtError, match="could not read the 'hlo' program"):
        hlo_to_stablehlo(b"\x08\x01garbage", "hlo")


# A PyTorch/XLA SPMD step as it arrives (HLO converted to StableHLO): x
# sharded by rows over devices {0,1}|{2,3}, w by rows over {0,2}|{1,3};
# results y = relu(x @ w) * a and w * b carry no sharding.
GSPMD = """
module @SyncTensorsGraph.14 attributes {mhlo.cross_program_prefetches = [], mhlo.input_output_alias = [], mhlo.is_dynamic = false, mhlo.use_auto_spmd_partitioning = false} {
  func.func @main(%arg0: tensor<f32> {mhlo.sharding = "{replicated}"}, %arg1: tensor<4x3xf32> {mhlo.sharding = "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}"}, %arg2: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"}, %arg3: tensor<f32> {mhlo.sharding = "{replicated}"}) -> (tensor<8x3xf32>, tensor<4x3xf32>, tensor<3x8xf32>, tensor<8xf32>) {
    %0 = stablehlo.dot %arg2, %arg1, precision = [DEFAULT, DEFAULT] : (tensor<8x4xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %1 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<8x3xf32>
    %2 = stablehlo.maximum %0, %1 : tensor<8x3xf32>
    %3 = stablehlo.broadcast_in_dim %arg0, dims = [] : (tensor<f32>) -> tensor<8x3xf32>
    %4 = stablehlo.multiply %2, %3 : tensor<8x3xf32>
    %5 = stablehlo.broadcast_in_dim %arg3, dims = [] : (tensor<f32>) -> tensor<4x3xf32>
    %6 = stablehlo.multiply %arg1, %5 : tensor<4x3xf32>
    %7 = stablehlo.transpose %4, dims = [1, 0] : (tensor<8x3xf32>) -> tensor<3x8xf32>
    %8 = stablehlo.reduce(%4 init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<8x3xf32>, tensor<f32>) -> tensor<8xf32>
    return %4, %6, %7, %8 : tensor<8x3xf32>, tensor<4x3xf32>, tensor<3x8xf32>, tensor<8xf32>
  }
}
"""


def _shards(global_value, text, devices=4):
    sh = shi.parse_gspmd_sharding(text, devices)
    return sh.split(global_value, list(range(devices)))


def test_gspmd_results_get_the_shardings_xla_propagates():
    plan = SpmdPlan(shi.compile(GSPMD), 4)
    assert plan.gspmd
    # What XLA's sharding propagation chooses for this program (PyTorch/XLA
    # on PJRT_DEVICE=CPU reports the first two; test_torch_xla.py compares
    # 31 tensors end to end).
    assert [gspmd_text(b) for b in plan.op_shardings("out")] == [
        "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
        "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}",
        "{devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}",
        "{devices=[2,2]0,1,2,3 last_tile_dim_replicate}",
    ]
    rng = np.random.default_rng(0)
    a, b = np.float32(2), np.float32(3)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    ins = [[a] * 4, _shards(w, "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}"),
           _shards(x, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"), [b] * 4]
    per_device = plan.run([[arg[d] for arg in ins] for d in range(4)])
    y = np.maximum(x.astype(np.float64) @ w, 0).astype(np.float32) * a
    want = [y, w * b, y.T, y.sum(1, dtype=np.float64).astype(np.float32)]
    for j, (value, text) in enumerate(zip(want, [gspmd_text(s) for s in plan.op_shardings("out")])):
        for d, shard in enumerate(_shards(value, text)):
            np.testing.assert_allclose(per_device[d][j], shard, rtol=1e-6, err_msg=f"{j} {d}")
            assert per_device[d][j].shape == plan.out_shard_shapes[j]


def test_optimized_program_carries_the_output_shardings():
    """What XLA's C API client does with PJRT_Executable_OptimizedProgram
    (PjRtCApiExecutable::GetHloModules: MLIR -> HloModule), done with jaxlib:
    the module's spmd_output_sharding, which PyTorch/XLA reads, is ours."""
    plan = SpmdPlan(shi.compile(GSPMD), 4)
    code = plan.optimized_program(shi.load(GSPMD).text.encode())
    text = shi.load(code).text
    assert "mhlo.spmd_output_sharding" in text
    computation = _jax.mlir.mlir_module_to_xla_computation(text, use_tuple_args=False,
                                                           return_tuple=False)
    module = computation.get_hlo_module()
    outs = gspmd_text(module.spmd_output_sharding)
    assert outs == "{" + ", ".join(gspmd_text(b) for b in plan.op_shardings("out")) + "}"
    assert [gspmd_text(s) for s in module.spmd_parameters_shardings] == \
        [gspmd_text(b) for b in plan.op_shardings("in")]


def test_uneven_gspmd_shards_are_padded():
    """PyTorch/XLA pads uneven shards at the end (3 rows in 2 shards: 2 + 1
    and a padding row); the plugin reads them so, and pads uneven results."""
    text = """
    module @m {
      func.func @main(%arg0: tensor<3x4xf32> {mhlo.sharding = "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"})
          -> (tensor<3x4xf32> {mhlo.sharding = "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"}, tensor<3x4xf32>) {
        %0 = stablehlo.negate %arg0 : tensor<3x4xf32>
        return %arg0, %0 : tensor<3x4xf32>, tensor<3x4xf32>
      }
    }"""
    plan = SpmdPlan(shi.compile(text), 4)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    padded = np.concatenate([x, np.full((1, 4), 99, np.float32)])
    shards = _shards(padded, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}")
    per_device = plan.run([[s] for s in shards])
    # The explicit result sharding (even: columns) is kept; the negated value
    # would be tiled unevenly by rows, so it is not (as XLA: replicated).
    assert [gspmd_text(b) for b in plan.op_shardings("out")] == [
        "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}", "{replicated}"]
    for d in range(4):
        np.testing.assert_array_equal(per_device[d][1], -x)
    np.testing.assert_array_equal(per_device[0][0], x[:, :2])
    np.testing.assert_array_equal(per_device[1][0], x[:, 2:])


# PyTorch/XLA compiles its non-SPMD programs for all N devices as N
# replicas (num_replicas = device count) and launches each on one device
# (PJRT_LoadedExecutable_Execute with execute_device).
REPLICA = """
func.func @main(%x: tensor<3xi32>) -> tensor<3xi32> {
  %r = stablehlo.replica_id : tensor<ui32>
  %c = stablehlo.convert %r : (tensor<ui32>) -> tensor<i32>
  %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<3xi32>
  %y = stablehlo.add %x, %b : tensor<3xi32>
  return %y : tensor<3xi32>
}"""

ALL_REDUCE = """
func.func @main(%x: tensor<3xi32>) -> tensor<3xi32> {
  %y = "stablehlo.all_reduce"(%x) ({
    ^bb0(%a: tensor<i32>, %b: tensor<i32>):
      %s = stablehlo.add %a, %b : tensor<i32>
      stablehlo.return %s : tensor<i32>
  }) {replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<3xi32>) -> tensor<3xi32>
  return %y : tensor<3xi32>
}"""


def _replicated_executable(text, replicas=4):
    from jax._src.lib import xla_client

    from stablehlo_pjrt.client import Client
    from stablehlo_pjrt.execute import LoadedExecutable
    options = xla_client.CompileOptions()
    options.executable_build_options.num_replicas = replicas
    client = Client({"num_devices": replicas})
    meta = compile_program(text.encode(), "mlir",
                           CompileOptions(options.SerializeAsString()))
    return client, LoadedExecutable(client, meta)


def _buffer(array, device):
    from stablehlo_pjrt.buffer import Buffer, type_of_dtype
    return Buffer(array, type_of_dtype(array.dtype), device)


def test_replicated_executable_launched_on_one_device():
    client, exe = _replicated_executable(REPLICA)
    x = np.array([10, 20, 30], np.int32)
    for k in (2, 0, 3):
        dev = client.devices[k]
        (out,), = exe.execute([[_buffer(x, dev)]], execute_device=dev)
        # That device's replica ran: replica_id is its replica number.
        np.testing.assert_array_equal(out.array, x + k)
        assert out.device is dev


def test_collective_launched_on_one_device_is_an_error_not_a_hang():
    from stablehlo_pjrt.error import PjrtError
    client, exe = _replicated_executable(ALL_REDUCE)
    dev = client.devices[1]
    with pytest.raises(PjrtError, match="execution of .* failed"):
        exe.execute([[_buffer(np.arange(3, dtype=np.int32), dev)]], execute_device=dev)


def test_torch_benchmark_system_is_skipped_without_torch_xla(monkeypatch):
    """`python -m benchmarks` with the torch system and no torch_xla: a
    'skipped' section, not a failure (the run itself: test_torch_xla.py)."""
    from benchmarks import runner, torch_step
    monkeypatch.setattr(torch_step, "available", lambda: False)
    section = torch_step.run(None, ["torch_mlp_step"], lambda msg: None)
    assert section == {"status": "skipped", "reason": "torch_xla is not installed",
                       "workloads": []}
    text = "\n".join(torch_step.markdown(section, runner.fmt_time, runner.fmt_ratio))
    assert "Skipped: torch_xla is not installed." in text
