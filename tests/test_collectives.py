"""Collective ops, the process grid runner, send/recv, infeed/outfeed, tokens.

Expected values are computed by hand from the spec's definitions (process
groups of "Collective ops", each op's semantics). Grids are 2x2 (replicas x
partitions) and 4x1; processes are listed replica-major:
(0, 0), (0, 1), (1, 0), (1, 1).
"""

import threading
import time

import numpy as np
import pytest

import stablehlo_interpreter as shi
from stablehlo_interpreter.parallel import GridError, ProcessGrid, run_parallel


@pytest.fixture(autouse=True)
def _guard(monkeypatch):
    # A broken rendezvous must fail a test within seconds, never hang it.
    monkeypatch.setenv("STABLEHLO_REF_GRID_TIMEOUT", "10")
    monkeypatch.setenv("STABLEHLO_REF_VALIDATE", "1")


def i64(x):
    return np.array(x, dtype=np.int64)


P2x2 = [(0, 0), (0, 1), (1, 0), (1, 1)]


# ----------------------------------------------------------------------
# replica_id / partition_id


IDS = """
func.func @main() -> (tensor<ui32>, tensor<ui32>) {
  %r = stablehlo.replica_id : tensor<ui32>
  %p = stablehlo.partition_id : tensor<ui32>
  return %r, %p : tensor<ui32>, tensor<ui32>
}
"""


def test_ids_on_2x2_grid():
    outs = shi.compile(IDS).run_parallel(None, 2, 2)
    assert [(int(r), int(p)) for r, p in outs] == P2x2
    for r, p in outs:
        assert r.dtype == np.uint32 and r.shape == () and isinstance(r, np.ndarray)


def test_ids_single_process_are_zero():
    r, p = shi.compile(IDS).run()
    assert (int(r), int(p)) == (0, 0) and r.dtype == np.uint32


def test_grid_shape_from_module_attributes():
    text = ("module attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 2 : i32} {"
            + IDS + "}")
    outs = shi.compile(text).run_parallel()
    assert [(int(r), int(p)) for r, p in outs] == P2x2


# ----------------------------------------------------------------------
# all_gather


def _all_gather(attrs):
    return f"""
func.func @main(%x: tensor<1x2xi64>) -> tensor<{{N}}x2xi64> {{
  %r = "stablehlo.all_gather"(%x) {{all_gather_dim = 0 : i64, {attrs}}}
      : (tensor<1x2xi64>) -> tensor<{{N}}x2xi64>
  return %r : tensor<{{N}}x2xi64>
}}
"""


def _args_2x2():
    # process k holds [[10k, 10k+1]]
    return [[i64([[10 * k, 10 * k + 1]])] for k in range(4)]


def test_all_gather_cross_replica_2x2():
    # channel_id <= 0: cross_replica([[0, 1]]) = [[(0,0),(1,0)], [(0,1),(1,1)]]
    text = _all_gather("replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>").replace("{N}", "2")
    outs = run_parallel(shi.compile(text), _args_2x2(), 2, 2)
    col0 = i64([[0, 1], [20, 21]])
    col1 = i64([[10, 11], [30, 31]])
    for (o,), want in zip(outs, [col0, col1, col0, col1]):
        np.testing.assert_array_equal(o, want)


def test_all_gather_cross_replica_and_partition_2x2():
    # channel_id > 0: one group [(0,0),(1,0),(0,1),(1,1)] (partition-major order)
    text = _all_gather("replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, "
                       "channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>"
                       ).replace("{N}", "4")
    outs = run_parallel(shi.compile(text), _args_2x2(), 2, 2)
    want = i64([[0, 1], [20, 21], [10, 11], [30, 31]])
    for (o,) in outs:
        np.testing.assert_array_equal(o, want)


def test_all_gather_flattened_ids_2x2():
    # flattened ids 0=(0,0) 3=(1,1); 1=(0,1) 2=(1,0)
    text = _all_gather("replica_groups = dense<[[3, 0], [1, 2]]> : tensor<2x2xi64>, "
                       "channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>, "
                       "use_global_device_ids").replace("{N}", "2")
    outs = run_parallel(shi.compile(text), _args_2x2(), 2, 2)
    a = i64([[30, 31], [0, 1]])
    b = i64([[10, 11], [20, 21]])
    for (o,), want in zip(outs, [a, b, b, a]):
        np.testing.assert_array_equal(o, want)


def test_all_gather_single_process_group_of_one():
    text = _all_gather("replica_groups = dense<[[0]]> : tensor<1x1xi64>").replace("{N}", "1")
    (o,) = shi.compile(text).run(i64([[4, 5]]))
    np.testing.assert_array_equal(o, i64([[4, 5]]))


def test_collective_naming_missing_process_fails_fast_on_single_process():
    text = _all_gather("replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>").replace("{N}", "2")
    t0 = time.monotonic()
    with pytest.raises(shi.ExecutionError, match="replica id 1 is out of range"):
        shi.compile(text).run(i64([[4, 5]]))
    assert time.monotonic() - t0 < 5


# ----------------------------------------------------------------------
# all_reduce / reduce_scatter


def _all_reduce(body, groups="dense<[[0, 1]]> : tensor<1x2xi64>", extra=""):
    return f"""
func.func @main(%x: tensor<3xi64>) -> tensor<3xi64> {{
  %r = "stablehlo.all_reduce"(%x) ({{
    ^bb0(%a: tensor<i64>, %b: tensor<i64>):
      {body}
  }}) {{replica_groups = {groups}{extra}}} : (tensor<3xi64>) -> tensor<3xi64>
  return %r : tensor<3xi64>
}}
"""


ADD = """%s = stablehlo.add %a, %b : tensor<i64>
      stablehlo.return %s : tensor<i64>"""
# Not commutative: shows the fold follows the process group's order.
SUB_TWICE = """%t = stablehlo.add %b, %b : tensor<i64>
      %s = stablehlo.subtract %a, %t : tensor<i64>
      stablehlo.return %s : tensor<i64>"""
# A reshape makes the body non-batchable: the per-element path runs.
SUB_TWICE_RESHAPE = """%t = stablehlo.add %b, %b : tensor<i64>
      %s = stablehlo.subtract %a, %t : tensor<i64>
      %u = stablehlo.reshape %s : (tensor<i64>) -> tensor<i64>
      stablehlo.return %u : tensor<i64>"""


def _xs4():
    return [[i64([1, 2, 3]) * 10 ** k] for k in range(4)]


def test_all_reduce_sum_cross_replica_2x2():
    outs = run_parallel(shi.compile(_all_reduce(ADD)), _xs4(), 2, 2)
    # groups [(0,0),(1,0)] and [(0,1),(1,1)]
    p0 = i64([1, 2, 3]) * 101
    p1 = i64([1, 2, 3]) * 1010
    for (o,), want in zip(outs, [p0, p1, p0, p1]):
        np.testing.assert_array_equal(o, want)
        assert o.dtype == np.int64


@pytest.mark.parametrize("body", [SUB_TWICE, SUB_TWICE_RESHAPE], ids=["batched", "per_element"])
def test_all_reduce_general_body_folds_in_group_order(body):
    # 4x1 grid, group order [2, 0, 3, 1]: ((x2 - 2*x0) - 2*x3) - 2*x1
    text = _all_reduce(body, "dense<[[2, 0, 3, 1]]> : tensor<1x4xi64>")
    xs = [[i64([k + 1, 2 * k, -k])] for k in range(4)]
    outs = run_parallel(shi.compile(text), xs, 4, 1)
    x = [a[0] for a in xs]
    want = x[2] - 2 * x[0] - 2 * x[3] - 2 * x[1]
    for (o,) in outs:
        np.testing.assert_array_equal(o, want)


def test_all_reduce_multiple_operands_and_ragged_groups():
    text = """
func.func @main(%x: tensor<2xf32>, %y: tensor<f32>) -> (tensor<2xf32>, tensor<f32>) {
  %r:2 = "stablehlo.all_reduce"(%x, %y) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.maximum %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
  }) {replica_groups = dense<[[0, 2], [1, -1]]> : tensor<2x2xi64>}
     : (tensor<2xf32>, tensor<f32>) -> (tensor<2xf32>, tensor<f32>)
  return %r#0, %r#1 : tensor<2xf32>, tensor<f32>
}
"""
    f32 = np.float32
    args = [[np.array([1, 5], f32), np.array(3, f32)],
            [np.array([7, 0], f32), np.array(4, f32)],
            [np.array([2, np.nan], f32), np.array(-1, f32)]]
    outs = run_parallel(shi.compile(text), args, 3, 1)
    # groups [0, 2] and [1] (the -1 pads a ragged group); maximum propagates NaN
    for k in (0, 2):
        np.testing.assert_array_equal(outs[k][0], np.array([2, np.nan], f32))
        assert float(outs[k][1]) == 3.0
    np.testing.assert_array_equal(outs[1][0], np.array([7, 0], f32))
    assert float(outs[1][1]) == 4.0
    assert outs[0][1].dtype == f32 and outs[0][1].shape == ()


def test_all_reduce_single_process_is_identity():
    text = ("module attributes {mhlo.num_replicas = 1 : i32} {"
            + _all_reduce(ADD, "dense<[[0]]> : tensor<1x1xi64>") + "}")
    (o,) = shi.compile(text).run(i64([4, 5, 6]))
    np.testing.assert_array_equal(o, i64([4, 5, 6]))


def test_reduce_scatter_4x1():
    text = """
func.func @main(%x: tensor<2x4xi64>) -> tensor<2x2xi64> {
  %r = "stablehlo.reduce_scatter"(%x) ({
    ^bb0(%a: tensor<i64>, %b: tensor<i64>):
      %s = stablehlo.add %a, %b : tensor<i64>
      stablehlo.return %s : tensor<i64>
  }) {scatter_dimension = 1 : i64,
      replica_groups = dense<[[0, 1], [3, 2]]> : tensor<2x2xi64>}
     : (tensor<2x4xi64>) -> tensor<2x2xi64>
  return %r : tensor<2x2xi64>
}
"""
    xs = [[i64(np.arange(8).reshape(2, 4) + 100 * k)] for k in range(4)]
    outs = run_parallel(shi.compile(text), xs, 4, 1)
    base = np.arange(8).reshape(2, 4)
    s01 = 2 * base + 100       # x0 + x1
    s32 = 2 * base + 500       # x3 + x2
    np.testing.assert_array_equal(outs[0][0], s01[:, :2])
    np.testing.assert_array_equal(outs[1][0], s01[:, 2:])
    np.testing.assert_array_equal(outs[3][0], s32[:, :2])  # replica 3 is index 0
    np.testing.assert_array_equal(outs[2][0], s32[:, 2:])


# ----------------------------------------------------------------------
# all_to_all


def test_all_to_all_cross_partition_2x2():
    text = """
func.func @main(%x: tensor<2x2xi64>, %y: tensor<2x4xi32>) -> (tensor<4x1xi64>, tensor<4x2xi32>) {
  %r:2 = "stablehlo.all_to_all"(%x, %y) {split_dimension = 1 : i64, concat_dimension = 0 : i64,
      split_count = 2 : i64, replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>,
      channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>}
     : (tensor<2x2xi64>, tensor<2x4xi32>) -> (tensor<4x1xi64>, tensor<4x2xi32>)
  return %r#0, %r#1 : tensor<4x1xi64>, tensor<4x2xi32>
}
"""
    xs = [[i64([[10 * k, 10 * k + 1], [10 * k + 2, 10 * k + 3]]),
           np.arange(8, dtype=np.int32).reshape(2, 4) * (k + 1)] for k in range(4)]
    outs = run_parallel(shi.compile(text), xs, 2, 2)
    # channel > 0: cross_partition([[1, 0]]) -> per replica r: [(r,1), (r,0)],
    # so (r,1) has receiver index 0 and (r,0) index 1. Each result is the
    # senders' part [receiver index] along dim 1, concatenated along dim 0 in
    # group order [(r,1), (r,0)].
    for r in range(2):
        k0, k1 = 2 * r, 2 * r + 1   # processes (r,0), (r,1)
        for i, width in ((0, 1), (1, 2)):
            a, b = xs[k1][i], xs[k0][i]
            first = np.concatenate([a[:, :width], b[:, :width]], axis=0)
            second = np.concatenate([a[:, width:], b[:, width:]], axis=0)
            np.testing.assert_array_equal(outs[k1][i], first)
            np.testing.assert_array_equal(outs[k0][i], second)
            assert outs[k0][i].dtype == xs[k0][i].dtype


# ----------------------------------------------------------------------
# collective_permute / collective_broadcast


def _permute(pairs, channel=0):
    ch = (f", channel_handle = #stablehlo.channel_handle<handle = {channel}, type = 0>"
          if channel else "")
    n = len(pairs)
    return f"""
func.func @main(%x: tensor<2xi64>) -> tensor<2xi64> {{
  %r = "stablehlo.collective_permute"(%x) {{
      source_target_pairs = dense<{pairs}> : tensor<{n}x2xi64>{ch}}}
     : (tensor<2xi64>) -> tensor<2xi64>
  return %r : tensor<2xi64>
}}
"""


def test_collective_permute_ring_4x1():
    text = _permute([[0, 1], [1, 2], [2, 3], [3, 0]])
    xs = [[i64([k, 10 * k])] for k in range(4)]
    outs = run_parallel(shi.compile(text), xs, 4, 1)
    for k in range(4):
        np.testing.assert_array_equal(outs[k][0], xs[(k - 1) % 4][0])


def test_collective_permute_non_targets_get_zeros_4x1():
    text = _permute([[2, 0], [1, 1]])
    xs = [[i64([k + 1, 10 * (k + 1)])] for k in range(4)]
    outs = run_parallel(shi.compile(text), xs, 4, 1)
    np.testing.assert_array_equal(outs[0][0], i64([3, 30]))
    np.testing.assert_array_equal(outs[1][0], i64([2, 20]))   # self loop
    np.testing.assert_array_equal(outs[2][0], i64([0, 0]))
    np.testing.assert_array_equal(outs[3][0], i64([0, 0]))


def test_collective_permute_cross_partition_2x2():
    text = _permute([[1, 0]], channel=5)
    xs = [[i64([k, k])] for k in range(4)]
    outs = run_parallel(shi.compile(text), xs, 2, 2)
    # per replica: partition 1 -> partition 0
    np.testing.assert_array_equal(outs[0][0], i64([1, 1]))
    np.testing.assert_array_equal(outs[1][0], i64([0, 0]))
    np.testing.assert_array_equal(outs[2][0], i64([3, 3]))
    np.testing.assert_array_equal(outs[3][0], i64([0, 0]))


def test_collective_broadcast_2x2_and_4x1():
    text = """
func.func @main(%x: tensor<1x2xi64>) -> tensor<1x2xi64> {
  %r = "stablehlo.collective_broadcast"(%x) {
      replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>,
      channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>}
     : (tensor<1x2xi64>) -> tensor<1x2xi64>
  return %r : tensor<1x2xi64>
}
"""
    xs = [[i64([[k, -k]])] for k in range(4)]
    outs = run_parallel(shi.compile(text), xs, 2, 2)
    # cross_partition: root is partition 1 of each replica
    for k, want in enumerate([1, 1, 3, 3]):
        np.testing.assert_array_equal(outs[k][0], i64([[want, -want]]))
    # cross_replica on 4x1 with group [3, 1]: 0 and 2 are in no group -> zeros
    text = text.replace("dense<[[1, 0]]>", "dense<[[3, 1]]>").replace("handle = 1", "handle = 0")
    outs = run_parallel(shi.compile(text), xs, 4, 1)
    for k, want in enumerate([None, 3, None, 3]):
        np.testing.assert_array_equal(outs[k][0], i64([[want, -want]]) if want else i64([[0, 0]]))


# ----------------------------------------------------------------------
# send / recv, tokens


SEND_RECV = """
func.func @producer(%x: tensor<2xi64>, %t: !stablehlo.token) -> !stablehlo.token {
  %t1 = "stablehlo.send"(%x, %t) {
      channel_handle = #stablehlo.channel_handle<handle = 7, type = 1>,
      is_host_transfer = false} : (tensor<2xi64>, !stablehlo.token) -> !stablehlo.token
  %y = stablehlo.constant dense<[5, 6]> : tensor<2xi64>
  %t2 = "stablehlo.send"(%y, %t1) {
      channel_handle = #stablehlo.channel_handle<handle = 7, type = 1>,
      is_host_transfer = false} : (tensor<2xi64>, !stablehlo.token) -> !stablehlo.token
  return %t2 : !stablehlo.token
}
func.func @consumer(%t: !stablehlo.token) -> (tensor<2xi64>, tensor<2xi64>) {
  %a:2 = "stablehlo.recv"(%t) {
      channel_handle = #stablehlo.channel_handle<handle = 7, type = 1>,
      is_host_transfer = false} : (!stablehlo.token) -> (tensor<2xi64>, !stablehlo.token)
  %b:2 = "stablehlo.recv"(%a#1) {
      channel_handle = #stablehlo.channel_handle<handle = 7, type = 1>,
      is_host_transfer = false} : (!stablehlo.token) -> (tensor<2xi64>, !stablehlo.token)
  return %a#0, %b#0 : tensor<2xi64>, tensor<2xi64>
}
"""


def test_send_recv_mpmd_in_order():
    prog = shi.compile(SEND_RECV)
    # the consumer is replica 0: it waits for the producer (replica 1)
    outs = run_parallel(prog, [[shi.TOKEN], [i64([1, 2]), shi.TOKEN]],
                        programs=[["consumer"], ["producer"]])
    np.testing.assert_array_equal(outs[0][0], i64([1, 2]))
    np.testing.assert_array_equal(outs[0][1], i64([5, 6]))
    assert outs[1][0] is shi.TOKEN


def test_recv_without_sender_is_a_deadlock_not_a_hang():
    prog = shi.compile(SEND_RECV)
    t0 = time.monotonic()
    with pytest.raises(GridError, match="deadlock.*send on channel 7"):
        prog.run(shi.TOKEN, func="consumer")
    assert time.monotonic() - t0 < 5


def test_after_all_and_create_token():
    text = """
func.func @main() -> !stablehlo.token {
  %a = stablehlo.after_all : !stablehlo.token
  %b = "stablehlo.create_token"() : () -> !stablehlo.token
  %c = stablehlo.after_all %a, %b : !stablehlo.token
  return %c : !stablehlo.token
}
"""
    (t,) = shi.compile(text).run()
    assert t is shi.TOKEN


# ----------------------------------------------------------------------
# infeed / outfeed


FEEDS = """
func.func @main(%t: !stablehlo.token) -> (tensor<2xi32>, tensor<i1>, !stablehlo.token) {
  %a:3 = "stablehlo.infeed"(%t) {infeed_config = ""}
      : (!stablehlo.token) -> (tensor<2xi32>, tensor<i1>, !stablehlo.token)
  %o = "stablehlo.outfeed"(%a#0, %a#2) {outfeed_config = ""}
      : (tensor<2xi32>, !stablehlo.token) -> !stablehlo.token
  %b:2 = "stablehlo.infeed"(%o) : (!stablehlo.token) -> (tensor<2xi32>, !stablehlo.token)
  %o2 = "stablehlo.outfeed"(%b#0, %a#0, %o) : (tensor<2xi32>, tensor<2xi32>, !stablehlo.token) -> !stablehlo.token
  return %b#0, %a#1, %o2 : tensor<2xi32>, tensor<i1>, !stablehlo.token
}
"""


def test_infeed_outfeed_per_process_queues():
    grid = ProcessGrid(2, 1, infeed={
        (0, 0): [[np.array([1, 2], np.int32), np.array(True)], np.array([3, 4], np.int32)],
        (1, 0): [[np.array([5, 6], np.int32), np.array(False)],
                 lambda ctx: [np.array([7, int(ctx.process[0])], np.int32)]],
    })
    outs = run_parallel(shi.compile(FEEDS), [[shi.TOKEN], [shi.TOKEN]], grid=grid)
    np.testing.assert_array_equal(outs[0][0], np.array([3, 4], np.int32))
    assert bool(outs[0][1]) is True and outs[0][1].dtype == np.bool_
    np.testing.assert_array_equal(outs[1][0], np.array([7, 1], np.int32))
    assert bool(outs[1][1]) is False
    (a,), (b, c) = grid.outfeed[(1, 0)]
    np.testing.assert_array_equal(a, np.array([5, 6], np.int32))
    np.testing.assert_array_equal(b, np.array([7, 1], np.int32))
    np.testing.assert_array_equal(c, np.array([5, 6], np.int32))
    assert len(grid.outfeed[(0, 0)]) == 2


def test_infeed_single_process_and_empty_queue():
    prog = shi.compile(FEEDS)
    grid = ProcessGrid(1, 1, infeed=[[np.array([1, 2], np.int32), np.array(True)],
                                     np.array([9, 9], np.int32)])
    b, flag, tok = prog.run(shi.TOKEN, grid=grid)
    np.testing.assert_array_equal(b, np.array([9, 9], np.int32))
    assert tok is shi.TOKEN and len(grid.outfeed[(0, 0)]) == 2
    with pytest.raises(GridError, match="infeed of process \\(0, 0\\) is empty"):
        prog.run(shi.TOKEN)
    bad = ProcessGrid(1, 1, infeed=[np.array([1, 2], np.int32)])
    with pytest.raises(GridError, match="infeed item has 1 value.*produces 2"):
        prog.run(shi.TOKEN, grid=bad)
    bad = ProcessGrid(1, 1, infeed=[[np.array([1, 2, 3], np.int32), np.array(True)]])
    with pytest.raises(GridError, match="value #0 of the infeed item is tensor<3xi32>"):
        prog.run(shi.TOKEN, grid=bad)


# ----------------------------------------------------------------------
# The interpreter.run_parallel harness op (nested parallel run)


def test_interpreter_run_parallel_op():
    text = """
module {
  func.func @gather(%x: tensor<2xi64>) -> (tensor<4xi64>, tensor<ui32>) {
    %r = "stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64,
        replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>}
        : (tensor<2xi64>) -> tensor<4xi64>
    %p = stablehlo.partition_id : tensor<ui32>
    return %r, %p : tensor<4xi64>, tensor<ui32>
  }
  func.func @feed() -> tensor<2xi64> {
    %c = stablehlo.constant dense<[8, 9]> : tensor<2xi64>
    return %c : tensor<2xi64>
  }
  func.func @read(%t: !stablehlo.token) -> tensor<2xi64> {
    %a:2 = "stablehlo.infeed"(%t) : (!stablehlo.token) -> (tensor<2xi64>, !stablehlo.token)
    return %a#0 : tensor<2xi64>
  }
  func.func @main(%a: tensor<2xi64>, %b: tensor<2xi64>)
      -> (tensor<4xi64>, tensor<ui32>, tensor<4xi64>, tensor<ui32>, tensor<2xi64>) {
    %r:4 = "interpreter.run_parallel"(%a, %b) {programs = [[@gather], [@gather]]}
        : (tensor<2xi64>, tensor<2xi64>) -> (tensor<4xi64>, tensor<ui32>, tensor<4xi64>, tensor<ui32>)
    %t = stablehlo.after_all : !stablehlo.token
    %f = "interpreter.run_parallel"(%t) {infeed = [@feed], programs = [[@read]]}
        : (!stablehlo.token) -> tensor<2xi64>
    return %r#0, %r#1, %r#2, %r#3, %f : tensor<4xi64>, tensor<ui32>, tensor<4xi64>, tensor<ui32>, tensor<2xi64>
  }
}
"""
    g0, p0, g1, p1, f = shi.compile(text).run(i64([1, 2]), i64([3, 4]))
    np.testing.assert_array_equal(g0, i64([3, 4, 1, 2]))
    np.testing.assert_array_equal(g1, i64([3, 4, 1, 2]))
    assert int(p0) == 0 and int(p1) == 0
    np.testing.assert_array_equal(f, i64([8, 9]))


# ----------------------------------------------------------------------
# Failures: errors propagate, nothing hangs


FAIL_ONE = """
func.func @ok(%x: tensor<2xi64>) -> tensor<4xi64> {
  %r = "stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64,
      replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<2xi64>) -> tensor<4xi64>
  return %r : tensor<4xi64>
}
func.func @bad(%x: tensor<2xi64>) -> tensor<4xi64> {
  %t = stablehlo.after_all : !stablehlo.token
  %a:2 = "stablehlo.infeed"(%t) : (!stablehlo.token) -> (tensor<2xi64>, !stablehlo.token)
  %r = "stablehlo.all_gather"(%a#0) {all_gather_dim = 0 : i64,
      replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<2xi64>) -> tensor<4xi64>
  return %r : tensor<4xi64>
}
"""


def test_failing_process_stops_the_others_with_a_clear_error():
    prog = shi.compile(FAIL_ONE)
    t0 = time.monotonic()
    with pytest.raises(shi.ExecutionError) as info:
        run_parallel(prog, [[i64([1, 2])], [i64([3, 4])]], programs=[["ok"], ["bad"]])
    assert time.monotonic() - t0 < 5
    msg = str(info.value)
    assert "process (1, 0)" in msg and "infeed" in msg and "empty" in msg


def test_timeout_guard_when_a_process_never_arrives():
    prog = shi.compile(FAIL_ONE)
    grid = ProcessGrid(2, 1, timeout=0.3)
    box = {}

    def run():
        try:
            prog.run(i64([1, 2]), func="ok", process=(0, 0), grid=grid)
        except Exception as e:  # noqa: BLE001
            box["error"] = e
    # Process (1, 0) is "alive" (never reports finished) but never arrives.
    th = threading.Thread(target=run, daemon=True)
    t0 = time.monotonic()
    th.start()
    th.join(10)
    assert not th.is_alive()
    assert 0.25 < time.monotonic() - t0 < 5
    assert isinstance(box.get("error"), GridError)
    assert "timed out after 0.3 s waiting for stablehlo.all_gather" in str(box["error"])


def test_mismatched_collectives_are_reported():
    text = """
func.func @a(%x: tensor<2xi64>) -> tensor<4xi64> {
  %r = "stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64,
      replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<2xi64>) -> tensor<4xi64>
  return %r : tensor<4xi64>
}
func.func @b(%x: tensor<2xi64>) -> tensor<4xi64> {
  %y = "stablehlo.collective_broadcast"(%x) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}
      : (tensor<2xi64>) -> tensor<2xi64>
  %r = "stablehlo.all_gather"(%y) {all_gather_dim = 0 : i64,
      replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<2xi64>) -> tensor<4xi64>
  return %r : tensor<4xi64>
}
"""
    with pytest.raises(GridError, match="mismatched collectives"):
        run_parallel(shi.compile(text), [[i64([1, 2])], [i64([3, 4])]],
                     programs=[["a"], ["b"]])


def test_collectives_in_a_loop_pair_up_in_order():
    # Each iteration all_gathers the running value: x <- sum over the group
    # of the gathered halves. Uses while + slice-free ops only.
    text = """
func.func @main(%x: tensor<1xi64>) -> tensor<3xi64> {
  %r0 = "stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64,
      replica_groups = dense<[[0, 1, 2]]> : tensor<1x3xi64>} : (tensor<1xi64>) -> tensor<3xi64>
  %p = "stablehlo.collective_permute"(%r0) {
      source_target_pairs = dense<[[0, 1], [1, 2], [2, 0]]> : tensor<3x2xi64>}
      : (tensor<3xi64>) -> tensor<3xi64>
  %q = "stablehlo.collective_permute"(%p) {
      source_target_pairs = dense<[[0, 1], [1, 2], [2, 0]]> : tensor<3x2xi64>}
      : (tensor<3xi64>) -> tensor<3xi64>
  return %q : tensor<3xi64>
}
"""
    outs = run_parallel(shi.compile(text), [[i64([k + 1])] for k in range(3)], 3, 1)
    for (o,) in outs:
        np.testing.assert_array_equal(o, i64([1, 2, 3]))


def test_run_parallel_argument_checks():
    prog = shi.compile(IDS)
    with pytest.raises(shi.InterpreterError, match="arguments for 1 process"):
        run_parallel(prog, [[]], 2, 1)
    with pytest.raises(shi.InterpreterError, match="rectangular"):
        run_parallel(prog, None, programs=[["main"], []])
    outs = run_parallel(prog, {(0, 0): [], (1, 0): []}, 2, 1)
    assert [int(r) for r, _ in outs] == [0, 1]


# ----------------------------------------------------------------------
# Ops newer than the pinned jaxlib's StableHLO (collective_reduce,
# collective_broadcast with has_dynamic_root) do not parse under their own
# names; their kernels are exercised through test-only aliases, which parse
# as unregistered ops in generic form.


def _alias(alias, name):
    from stablehlo_interpreter import ops  # noqa: F401  (registers kernels)
    from stablehlo_interpreter.registry import KERNELS, kernel
    if alias not in KERNELS:
        kernel(alias, special=True)(KERNELS[name])


def test_collective_reduce_root_gets_the_sum_others_zeros():
    _alias("testonly.collective_reduce", "stablehlo.collective_reduce")
    text = """
func.func @main(%x: tensor<4xi64>) -> tensor<4xi64> {
  %r = "testonly.collective_reduce"(%x) ({
    ^bb0(%a: tensor<i64>, %b: tensor<i64>):
      %s = stablehlo.add %a, %b : tensor<i64>
      stablehlo.return %s : tensor<i64>
  }) {replica_groups = dense<[[1, 0], [2, 3]]> : tensor<2x2xi64>}
     : (tensor<4xi64>) -> tensor<4xi64>
  return %r : tensor<4xi64>
}
"""
    xs = [[i64([1, 2, 3, 4]) * 10 ** k] for k in range(4)]
    outs = run_parallel(shi.compile(text), xs, 4, 1)
    # roots: replica 1 (first of [1, 0]) and replica 2 (first of [2, 3])
    np.testing.assert_array_equal(outs[1][0], i64([1, 2, 3, 4]) * 11)
    np.testing.assert_array_equal(outs[2][0], i64([1, 2, 3, 4]) * 1100)
    np.testing.assert_array_equal(outs[0][0], i64([0, 0, 0, 0]))
    np.testing.assert_array_equal(outs[3][0], i64([0, 0, 0, 0]))


def test_collective_broadcast_dynamic_root_variadic():
    _alias("testonly.collective_broadcast", "stablehlo.collective_broadcast")
    text = """
func.func @main(%d0: tensor<1x2xi64>, %d1: tensor<1x2xi64>, %root: tensor<2xi32>)
    -> (tensor<1x2xi64>, tensor<1x2xi64>) {
  %r:2 = "testonly.collective_broadcast"(%d0, %d1, %root) {
      replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, has_dynamic_root}
     : (tensor<1x2xi64>, tensor<1x2xi64>, tensor<2xi32>) -> (tensor<1x2xi64>, tensor<1x2xi64>)
  return %r#0, %r#1 : tensor<1x2xi64>, tensor<1x2xi64>
}
"""
    root = np.array([0, 1], np.int32)
    args = [[i64([[1, 2]]), i64([[5, 6]]), root], [i64([[3, 4]]), i64([[7, 8]]), root]]
    outs = run_parallel(shi.compile(text), args, 2, 1)
    for a, b in outs:
        np.testing.assert_array_equal(a, i64([[1, 2]]))   # data0 from process 0
        np.testing.assert_array_equal(b, i64([[7, 8]]))   # data1 from process 1


def test_all_reduce_quantized_runs_the_body_on_storage_values():
    q = "!quant.uniform<i8:f32, 0.5:-1>"
    text = f"""
func.func @main(%x: tensor<3x{q}>) -> tensor<3x{q}> {{
  %r = "stablehlo.all_reduce"(%x) ({{
    ^bb0(%a: tensor<{q}>, %b: tensor<{q}>):
      %s = stablehlo.add %a, %b : tensor<{q}>
      stablehlo.return %s : tensor<{q}>
  }}) {{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}} : (tensor<3x{q}>) -> tensor<3x{q}>
  return %r : tensor<3x{q}>
}}
"""
    xs = [[np.array([1, 3, 5], np.int8)], [np.array([-1, 7, 9], np.int8)]]
    outs = run_parallel(shi.compile(text), xs, 2, 1)
    # dequantized (s - (-1)) * 0.5: [1, 2, 3] + [0, 4, 5] = [1, 6, 8] -> 2v - 1
    for (o,) in outs:
        np.testing.assert_array_equal(o, np.array([1, 11, 15], np.int8))


# The per-device body JAX 0.10.2 lowers for a shard_map over a 4-device
# mesh axis "x" (psum, all_gather, ppermute, all_to_all, pmax, axis_index,
# psum_scatter): channel type 1, use_global_device_ids, a 1x4 grid of
# partitions. Outputs were also checked against JAX's own CPU results.
JAX_SHARD_MAP = """
module attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  func.func @main(%arg1: tensor<2xf32>) -> (tensor<2xf32>, tensor<8xf32>, tensor<2xf32>,
      tensor<8xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {
    %1 = "stablehlo.all_reduce"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
    ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
      %13 = stablehlo.add %arg2, %arg3 : tensor<f32>
      stablehlo.return %13 : tensor<f32>
    }) : (tensor<2xf32>) -> tensor<2xf32>
    %2 = "stablehlo.all_gather"(%arg1) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> : (tensor<2xf32>) -> tensor<8xf32>
    %3 = "stablehlo.collective_permute"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = dense<[[0, 1], [1, 2], [2, 3], [3, 0]]> : tensor<4x2xi64>}> : (tensor<2xf32>) -> tensor<2xf32>
    %4 = "stablehlo.all_to_all"(%2) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, concat_dimension = 0 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, split_count = 4 : i64, split_dimension = 0 : i64}> : (tensor<8xf32>) -> tensor<8xf32>
    %5 = "stablehlo.all_reduce"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
    ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
      %13 = stablehlo.maximum %arg2, %arg3 : tensor<f32>
      stablehlo.return %13 : tensor<f32>
    }) : (tensor<2xf32>) -> tensor<2xf32>
    %c = stablehlo.constant dense<1> : tensor<ui32>
    %c_0 = stablehlo.constant dense<4> : tensor<ui32>
    %6 = stablehlo.partition_id : tensor<ui32>
    %7 = stablehlo.divide %6, %c : tensor<ui32>
    %8 = stablehlo.remainder %7, %c_0 : tensor<ui32>
    %9 = stablehlo.convert %8 : (tensor<ui32>) -> tensor<i32>
    %10 = "stablehlo.reduce_scatter"(%2) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, scatter_dimension = 0 : i64, use_global_device_ids}> ({
    ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
      %13 = stablehlo.add %arg2, %arg3 : tensor<f32>
      stablehlo.return %13 : tensor<f32>
    }) : (tensor<8xf32>) -> tensor<2xf32>
    %11 = stablehlo.broadcast_in_dim %9, dims = [] : (tensor<i32>) -> tensor<2xi32>
    %12 = stablehlo.convert %11 : (tensor<2xi32>) -> tensor<2xf32>
    return %1, %2, %3, %4, %5, %12, %10 : tensor<2xf32>, tensor<8xf32>, tensor<2xf32>, tensor<8xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
  }
}
"""


def test_jax_shard_map_collectives_on_1x4_grid():
    prog = shi.compile(JAX_SHARD_MAP)
    x = np.arange(8, dtype=np.float32)
    outs = prog.run_parallel([[x[2 * k:2 * k + 2]] for k in range(4)])
    f32 = np.float32
    for k, (psum, gathered, perm, a2a, pmax, idx, scattered) in enumerate(outs):
        np.testing.assert_array_equal(psum, np.array([12, 16], f32))
        np.testing.assert_array_equal(gathered, x)
        np.testing.assert_array_equal(perm, x[2 * ((k - 1) % 4):][:2])
        np.testing.assert_array_equal(a2a, np.tile(x[2 * k:2 * k + 2], 4))
        np.testing.assert_array_equal(pmax, np.array([6, 7], f32))
        np.testing.assert_array_equal(idx, np.array([k, k], f32))
        np.testing.assert_array_equal(scattered, 4 * x[2 * k:2 * k + 2])


def test_all_reduce_empty_replica_groups_means_all_replicas():
    text = _all_reduce(ADD, "dense<> : tensor<0x0xi64>")
    (o,) = shi.compile(text).run(i64([4, 5, 6]))
    np.testing.assert_array_equal(o, i64([4, 5, 6]))
    outs = run_parallel(shi.compile(text), [[i64([1, 2, 3])], [i64([10, 20, 30])]], 2, 1)
    for (o,) in outs:
        np.testing.assert_array_equal(o, i64([11, 22, 33]))
