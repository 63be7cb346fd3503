"""Donation on several devices (STABLEHLO_REF_NUM_DEVICES=8) compared with
XLA CPU (8 host devices): pmap, sharded jit with and without out_shardings
(JAX then marks buffer donors and the compiler pairs them), shard_map, a
reshaping donation, a training loop. Deleted inputs, CPU's error on reuse,
each device's output keeping the donated shard's address (memory reused,
also by in-place dynamic_update_slice), and XLA's errors for a buffer passed
twice. Scenarios in runtime_scenarios.py."""

import numpy as np
import pytest
import runtime_scenarios as rs

import stablehlo_interpreter as si

DEVICES = 8


@pytest.fixture(scope="module")
def multi():
    names = ["donation_multi_device"]
    return rs.values_of(rs.run_both(names, devices=DEVICES), "donation_multi_device")


CASES = ["pmap", "pmap_in_place", "jit_out_shardings", "jit_open_shardings", "jit_in_place",
         "shard_map", "reshape"]


# Donated arrays that are shards of a result of a program without donation
# (the first step of these cases: made by another jit or pmap) are views of
# that program's global result, which the plugin does not write into: the
# output gets new memory there (XLA CPU keeps the address). From the second
# step on (a donated output donated again) every device keeps its memory.
FIRST_STEP_VIEWS = {"pmap", "pmap_in_place"}


@pytest.mark.parametrize("case", CASES)
def test_donated_deleted_and_memory_reused_like_cpu(multi, case):
    r, c = multi
    keys = set(r[case]) - ({"kept_first"} if case in FIRST_STEP_VIEWS else set())
    assert {k: r[case][k] for k in keys} == {k: c[case][k] for k in keys}
    assert r[case]["deleted"] is True and r[case]["deleted_again"] is True
    assert r[case]["kept"] == [True] * DEVICES  # every device reuses its shard
    assert c[case]["kept_first"] == [True] * DEVICES
    assert r[case]["kept_first"] == [case not in FIRST_STEP_VIEWS] * DEVICES
    assert r[case]["reuse"].startswith("RuntimeError: Array has been deleted with shape=float32[")


def test_other_donations_like_cpu(multi):
    r, c = multi
    assert r["unusable"] == c["unusable"] == [False, float(sum(range(4 * DEVICES)))]
    assert r["replicated"] == c["replicated"] == [True, [1.0, 2.0, 3.0, 4.0]]
    assert r["loop"] == c["loop"]
    assert r["loop"][0] == [True, True, True]
    assert r["shared_shard"] == c["shared_shard"]
    assert r["shared_shard"][1] == [0.0, 1.0, 2.0, 3.0]  # the copy never sees the write
    assert r["warnings"] == c["warnings"] == []


def test_clashes_like_cpu():
    v, c = rs.values_of(rs.run_both(["donation_clashes"], devices=1), "donation_clashes")
    assert v == c
    assert v["twice"] == ("JaxRuntimeError: INVALID_ARGUMENT: Attempt to donate the same buffer "
                          "twice in Execute() (flattened argument 1, replica 0, partition 0, "
                          "first use: 0). Toy example for this bug: `f(donate(a), donate(a))`.")
    assert "`f(donate(a), a)`" in v["donated_then_used"]
    assert "`f(a, donate(a))`" in v["used_then_donated"]
    assert v["alive_after"] == [False, [0.0, 1.0, 2.0, 3.0]]


def test_clashes_on_several_devices():
    # (XLA CPU with 8 devices reports the error from one device's thread and
    # then crashes the process (jaxlib 0.10.2), so there is nothing to compare.)
    rec = rs.run("stablehlo_ref", ["donation_clashes"], devices=DEVICES)["donation_clashes"]
    assert rec["error"] is None
    assert rec["values"]["twice"].startswith(
        "JaxRuntimeError: INVALID_ARGUMENT: Attempt to donate the same buffer twice in "
        "Execute() (flattened argument 1, replica 0, partition 0, first use: 0).")


REPLICATED = """
module attributes {mhlo.num_replicas = 2 : i32} {
  func.func @main(%a: tensor<6xf32>, %u: tensor<2xf32>) -> tensor<6xf32> {
    %c = stablehlo.constant dense<2> : tensor<i32>
    %r = stablehlo.dynamic_update_slice %a, %u, %c : (tensor<6xf32>, tensor<2xf32>, tensor<i32>) -> tensor<6xf32>
    return %r : tensor<6xf32>
  }
}
"""


def test_parallel_run_consumes_unshared_arguments():
    """One process per device (the plugin's path for programs with several
    replicas): a given-up argument nothing else refers to is updated in
    place; one the caller still holds is not."""
    program = si.compile(REPLICATED)
    owned = [np.zeros(6, np.float32), np.zeros(6, np.float32)]
    ids = [id(a) for a in owned]
    args = [[owned[0], np.ones(2, np.float32)], [owned[1], np.ones(2, np.float32)]]
    kept = owned[1]
    owned = None
    out = program.run_parallel(args, consume=True)
    assert args == [[], []]  # given up
    assert id(out[0][0]) == ids[0]  # updated in place
    assert id(out[1][0]) != ids[1] and out[1][0] is not kept  # still held: copied
    assert kept.tolist() == [0.0] * 6
    for o in out:
        assert o[0].tolist() == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    # Without consume nothing is written.
    a = [np.zeros(6, np.float32), np.ones(2, np.float32)]
    r = program.run_parallel([a, list(a)])
    assert a[0].tolist() == [0.0] * 6 and r[0][0].tolist() == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]


DONATING_REPLICATED = """
module @donating attributes {mhlo.num_replicas = 2 : i32} {
  func.func public @main(%a: tensor<6xf32> {tf.aliasing_output = 0 : i32}) -> tensor<6xf32> {
    %u = stablehlo.constant dense<1.0> : tensor<2xf32>
    %c = stablehlo.constant dense<2> : tensor<i32>
    %r = stablehlo.dynamic_update_slice %a, %u, %c : (tensor<6xf32>, tensor<2xf32>, tensor<i32>) -> tensor<6xf32>
    return %r : tensor<6xf32>
  }
}
"""


def test_replicated_program_reuses_donated_memory_through_pjrt():
    """Through the PJRT C API: a program with two replicas (one interpreter
    process per device) whose donated parameter is updated in place on each
    device: inputs deleted, each output at its input's address."""
    import ctypes

    from jax._src.lib import xla_client
    from test_pjrt_capi import (
        C,
        compile_text,
        destroy_buffer,
        event_destroy,
        from_host,
        ok,
        to_host,
    )

    from stablehlo_pjrt.handles import NamedValues
    opts_nv = NamedValues({"num_devices": 2})
    c = ok("PJRT_Client_Create", C.Client_Create_Args(
        create_options=opts_nv.address, num_options=opts_nv.count)).client
    try:
        opts = xla_client.CompileOptions()
        opts.executable_build_options.num_replicas = 2
        opts.executable_build_options.num_partitions = 1
        opts.device_assignment = xla_client.DeviceAssignment.create(np.array([[0], [1]]))
        exe, err = compile_text(c, DONATING_REPLICATED, opts.SerializeAsString())
        assert err is None, err
        bufs, ptrs = [], []
        for k in range(2):
            b, done = from_host(c, np.full(6, k, np.float32), C.BufferType.F32)
            event_destroy(done)
            bufs.append(b)
            ptrs.append(ok("PJRT_Buffer_UnsafePointer",
                           C.Buffer_UnsafePointer_Args(buffer=b)).buffer_pointer)
        lists = [(ctypes.c_void_p * 1)(b) for b in bufs]
        arg_lists = (ctypes.c_void_p * 2)(*(ctypes.addressof(a) for a in lists))
        outs = [(ctypes.c_void_p * 1)() for _ in range(2)]
        out_lists = (ctypes.c_void_p * 2)(*(ctypes.addressof(o) for o in outs))
        ok("PJRT_LoadedExecutable_Execute", C.LoadedExecutable_Execute_Args(
            executable=exe, argument_lists=ctypes.addressof(arg_lists), num_devices=2,
            num_args=1, output_lists=ctypes.addressof(out_lists)))
        for k in range(2):
            assert ok("PJRT_Buffer_IsDeleted", C.Buffer_IsDeleted_Args(buffer=bufs[k])).is_deleted
            out = outs[k][0]
            assert ok("PJRT_Buffer_UnsafePointer",
                      C.Buffer_UnsafePointer_Args(buffer=out)).buffer_pointer == ptrs[k]
            assert to_host(out, np.float32, (6,)).tolist() == [k, k, 1.0, 1.0, k, k]
            destroy_buffer(out)
            destroy_buffer(bufs[k])
        ok("PJRT_LoadedExecutable_Destroy", C.LoadedExecutable_Destroy_Args(executable=exe))
    finally:
        ok("PJRT_Client_Destroy", C.Client_Destroy_Args(client=c))
