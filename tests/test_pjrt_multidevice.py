"""Several devices on stablehlo_ref: sharded jit, shard_map, pmap.

tests/multidevice_workload.py runs the same JAX programs on stablehlo_ref
(STABLEHLO_REF_NUM_DEVICES=N) and on XLA CPU with as many devices
(--xla_force_host_platform_device_count=N), on a 2x2 mesh (N=4) and a 2x4
mesh (N=8); here the values, shardings and per-device shards are compared.
The rest tests the SPMD pieces (stablehlo_pjrt.spmd, stablehlo_interpreter.spmd)
directly.
"""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "multidevice_workload.py"
CASES = ["device_put_round_trip", "jit_elementwise", "jit_matmul_reductions",
         "jit_unspecified_out_shardings", "jit_sharding_constraint",
         "shard_map_collectives", "shard_map_partial_manual", "pmap_psum",
         "mlp_train_step"]


def _run(platform: str, n: int, out: str) -> dict:
    env = dict(os.environ)
    for key in ("JAX_PLATFORMS", "JAX_ENABLE_X64", "STABLEHLO_REF_NUM_DEVICES",
                "STABLEHLO_PJRT_TRACE", "XLA_FLAGS"):
        env.pop(key, None)
    env["JAX_PLATFORMS"] = platform
    if platform == "cpu":
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={n}"
    else:
        env["STABLEHLO_REF_NUM_DEVICES"] = str(n)
    p = subprocess.run([sys.executable, str(WORKLOAD), out, str(n)], env=env,
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, f"{platform} x{n} failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    with open(out, "rb") as fh:
        return pickle.load(fh)


@pytest.fixture(scope="module")
def runs():
    with tempfile.TemporaryDirectory() as tmp:
        jobs = {(plat, n): os.path.join(tmp, f"{plat}{n}.pkl")
                for plat in ("stablehlo_ref", "cpu") for n in (4, 8)}
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
            futures = {k: pool.submit(_run, k[0], k[1], path) for k, path in jobs.items()}
            return {k: f.result() for k, f in futures.items()}


@pytest.mark.parametrize("n", [4, 8])
@pytest.mark.parametrize("name", CASES)
def test_matches_xla_cpu(runs, name, n):
    ref, cpu = runs[("stablehlo_ref", n)][name], runs[("cpu", n)][name]
    assert "error" not in cpu, cpu.get("error")
    assert "error" not in ref, ref.get("error")
    assert len(ref["outs"]) == len(cpu["outs"])
    for i, (r, c) in enumerate(zip(ref["outs"], cpu["outs"])):
        what = f"{name} output #{i}"
        np.testing.assert_allclose(r["value"], c["value"], rtol=2e-5, atol=2e-5,
                                   err_msg=what)
        assert r["value"].dtype == c["value"].dtype, what
        # Whatever sharding stablehlo_ref reports, its shards are the global
        # value's pieces, on every device.
        assert len(r["shards"]) == n, what
        for dev, index, data in r["shards"]:
            piece = r["value"][eval(index, {"slice": slice})]  # noqa: S307 - our own repr
            np.testing.assert_array_equal(data, piece, err_msg=f"{what} device {dev}")
        # XLA picks the same shardings, for outputs the program fixes and
        # (by propagation) for these unspecified ones too.
        assert r["spec"] == c["spec"], what
        assert [(d, ix) for d, ix, _ in r["shards"]] == \
            [(d, ix) for d, ix, _ in c["shards"]], what
        for (dev, _, rd), (_, _, cd) in zip(r["shards"], c["shards"]):
            np.testing.assert_allclose(rd, cd, rtol=2e-5, atol=2e-5,
                                       err_msg=f"{what} device {dev}")


# ---------------------------------------------------------------------------
# stablehlo_pjrt.spmd / stablehlo_interpreter.spmd without JAX devices
# ---------------------------------------------------------------------------

SHARDED = """
module @m attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2, "y"=2], device_ids=[3, 2, 1, 0]>
  func.func public @main(%arg0: tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>},
                         %arg1: tensor<8xf32>)
      -> (tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x", "y"}]>},
          tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>},
          tensor<4x8xf32>) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across dimensions = [0]
        : (tensor<4x8xf32>, tensor<f32>) -> tensor<8xf32>
    %1 = stablehlo.add %0, %arg1 : tensor<8xf32>
    %2 = sdy.sharding_constraint %arg0 <@mesh, [{"y"}, {}]> : tensor<4x8xf32>
    return %1, %arg0, %2 : tensor<8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
  }
}
"""


def _coords(d):
    """Mesh coordinates of device d in SHARDED's mesh (device_ids reversed)."""
    return (3 - d) // 2, (3 - d) % 2


def test_spmd_plan_assembles_and_splits():
    import stablehlo_interpreter as shi
    from stablehlo_pjrt.spmd import SpmdPlan
    plan = SpmdPlan(shi.compile(SHARDED), 4)
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    b = np.linspace(0, 1, 8, dtype=np.float32)
    args = []
    for d in range(4):
        x, y = _coords(d)
        args.append([a[2 * x:2 * x + 2, 4 * y:4 * y + 4], b])
    out = plan.run(args)
    total = a.sum(0) + b
    for d in range(4):
        x, y = _coords(d)
        k = 2 * x + y   # dimension 0 split over ("x", "y"), "x" major
        np.testing.assert_allclose(out[d][0], total[2 * k:2 * k + 2])
        np.testing.assert_array_equal(out[d][1], a[:, 4 * x:4 * x + 4])
        # unannotated result: the sharding it was constrained to last
        np.testing.assert_array_equal(out[d][2], a[2 * y:2 * y + 2, :])
    assert plan.out_shard_shapes == [(2,), (4, 4), (2, 8)]


def test_op_shardings_are_xla_shardings():
    from jax._src.lib import xla_client as xc

    import stablehlo_interpreter as shi
    from stablehlo_pjrt.spmd import SpmdPlan
    plan = SpmdPlan(shi.compile(SHARDED), 4)

    def text(proto):
        o = xc.OpSharding()
        o.ParseFromString(proto)
        # (HloSharding lists the devices of a replication group sorted)
        return str(xc.HloSharding.from_proto(o))
    assert [text(p) for p in plan.op_shardings("in")] == [
        "{devices=[2,2]3,2,1,0}", "{replicated}"]
    assert [text(p) for p in plan.op_shardings("out")] == [
        "{devices=[4]3,2,1,0}", "{devices=[1,2,2]2,3,0,1 last_tile_dim_replicate}",
        "{devices=[2,1,2]1,3,0,2 last_tile_dim_replicate}"]


def test_unsupported_shardings_are_named():
    import stablehlo_interpreter as shi
    from stablehlo_pjrt.spmd import ShardingError, SpmdPlan
    unreduced = SHARDED.replace('[{"x", "y"}]>}', '[{}], unreduced={"x"}>}')
    with pytest.raises(ShardingError, match="unreduced"):
        SpmdPlan(shi.compile(unreduced), 4)
    uneven = SHARDED.replace("tensor<8xf32>", "tensor<6xf32>").replace(
        "tensor<4x8xf32>", "tensor<4x6xf32>")
    with pytest.raises(ShardingError, match="not divisible"):
        SpmdPlan(shi.compile(uneven), 4)


MANUAL = """
module @m attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2]>
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x"}]>]
        out_shardings=[<@mesh, [{"x"}]>] manual_axes={"x"} (%arg1: tensor<2xf32>) {
      %1 = "stablehlo.all_reduce"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>,
          replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, use_global_device_ids}> ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }) : (tensor<2xf32>) -> tensor<2xf32>
      sdy.return %1 : tensor<2xf32>
    } : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"""


def test_manual_computation_runs_per_device():
    import stablehlo_interpreter as shi
    program = shi.compile(MANUAL)
    (out,) = program.run(np.array([1, 2, 10, 20], np.float32))
    np.testing.assert_array_equal(out, [11, 22, 11, 22])
    # inside a pmap-style run (each process already one replica) it is refused
    with pytest.raises(shi.InterpreterError, match="multi-process run"):
        program.run_parallel([[np.zeros(4, np.float32)]] * 2, num_replicas=2,
                             num_partitions=1)
