"""Several processes (docs/devices.md, "Several processes").

Real processes on localhost run tests/multiprocess_workload.py (the
scenario of issue 23: the global device view, make_array_from_process_local_data,
a jit reduction over every device, shard_map collectives, process_allgather,
a pmap psum); every value must be bit-identical to the same program in one
process with all the devices. The key-value store plumbing (the C callbacks
of PJRT_Client_Create) is tested in-process against a store written here to
pjrt_c_api.h's contract.
"""

import ctypes
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from stablehlo_pjrt import distributed
from stablehlo_pjrt._capi import ErrorCode
from stablehlo_pjrt.error import PjrtError

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "tests" / "multiprocess_workload.py"
DEVICES_PER_PROCESS = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _env(num_devices, **extra):
    env = dict(os.environ)
    env["STABLEHLO_REF_NUM_DEVICES"] = str(num_devices)
    env.pop("JAX_PLATFORMS", None)
    env.pop("XLA_FLAGS", None)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT / "interpreter"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def _run(num_processes, platform="stablehlo_ref", mode="scenario", timeout=240,
         silent=(), **extra):
    """Every process's JSON report, in process order (but for the processes
    in ``silent``, which are expected to die without one)."""
    port = _free_port()
    n = DEVICES_PER_PROCESS if num_processes > 1 else DEVICES_PER_PROCESS * extra.pop(
        "total_processes", 1)
    env = _env(n, **extra)
    procs = [subprocess.Popen([sys.executable, str(WORKLOAD), str(i), str(num_processes),
                               str(port), platform, mode],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                              text=True)
             for i in range(num_processes)]
    reports = []
    try:
        for i, p in enumerate(procs):
            out, err = p.communicate(timeout=timeout)
            if i in silent:
                continue
            lines = [line for line in out.splitlines() if line.startswith("{")]
            assert lines, f"process {i} reported nothing (exit {p.returncode}):\n{err[-3000:]}"
            reports.append(json.loads(lines[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return reports


VALUES = ["jit_sum", "jit_matmul", "psum", "all_gather", "psum_scatter", "all_to_all",
          "ppermute", "pmax", "psum_weighted", "process_allgather", "pmap_psum"]


def _check_against_single_process(reports, single, num_processes):
    total = num_processes * DEVICES_PER_PROCESS
    expected_devices = [[d, d // DEVICES_PER_PROCESS] for d in range(total)]
    for i, r in enumerate(reports):
        assert r["process_count"] == num_processes
        assert r["process_index"] == i
        assert r["devices"] == expected_devices
        assert r["local_devices"] == [i * DEVICES_PER_PROCESS + k
                                      for k in range(DEVICES_PER_PROCESS)]
        assert r["global_shape"] == single["global_shape"]
        rows = single["global_shape"][0] // total
        assert r["addressable_shards"] == [[d, d * rows] for d in r["local_devices"]]
        for name in VALUES:
            # Bit for bit: the same program and reduction order as one process.
            assert r[name] == single[name], f"process {i}: {name} differs from one process"


def test_two_processes_match_one_process():
    reports = _run(2)
    single = _run(1, total_processes=2)[0]
    assert single["process_count"] == 1 and len(single["devices"]) == 4
    _check_against_single_process(reports, single, 2)


@pytest.mark.slow
def test_four_processes_match_one_process():
    reports = _run(4, timeout=400)
    single = _run(1, total_processes=4)[0]
    _check_against_single_process(reports, single, 4)


# Data movement is exact on both platforms; sums differ in their last bits
# (XLA CPU and gloo add in other orders than the reference's sequential one).
EXACT = {"all_gather", "all_to_all", "ppermute", "pmax", "process_allgather"}


def _values(report, name):
    import numpy as np
    v = report[name]
    return np.frombuffer(bytes.fromhex(v["hex"]), v["dtype"]).reshape(v["shape"])


@pytest.mark.slow
@pytest.mark.parametrize("num_processes", [2, 4])
def test_same_values_as_xla_cpu_with_gloo(num_processes):
    import numpy as np
    ours = _run(num_processes, timeout=400)
    try:
        theirs = _run(num_processes, platform="cpu", timeout=400, WORKLOAD_DEADLINE="300")
    except AssertionError as e:
        if "gloo" in str(e).lower() and "not" in str(e).lower():
            pytest.skip(f"XLA CPU with gloo does not run here: {e}")
        raise
    for r, t in zip(ours, theirs):
        assert [p for _, p in r["devices"]] == [p for _, p in t["devices"]]
        assert r["global_shape"] == t["global_shape"]
        for name in VALUES:
            a, b = _values(r, name), _values(t, name)
            if name in EXACT:
                assert a.tobytes() == b.tobytes(), name
            else:
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-5, err_msg=name)


def test_killed_peer_is_named_within_the_timeout():
    timeout = 4
    reports = _run(2, mode="die", silent=(1,), STABLEHLO_REF_DISTRIBUTED_TIMEOUT=str(timeout))
    # Process 1 exits before the first program; process 0 reports.
    (r,) = [r for r in reports if r["process_index"] == 0]
    assert r["error"] is not None
    assert "DEADLINE_EXCEEDED" in r["error"] and "process 1" in r["error"]
    assert "jit__lambda" in r["error"] and distributed.TIMEOUT_ENV in r["error"]
    assert r["seconds"] < timeout + 20  # the timeout, plus compiling on a busy machine


# ----------------------------------------------------------------------------
# The store's C callbacks, against a store written to pjrt_c_api.h
# ----------------------------------------------------------------------------

_libc = ctypes.CDLL(None)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]
_FREE = ctypes.cast(_libc.free, ctypes.c_void_p).value
_CALL_ERROR = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t)


class CStore:
    """A key-value store with the C callbacks a PJRT caller passes (what
    JAX's distributed client does, in Python): blocking get with a timeout,
    try_get (NOT_FOUND when absent), put refusing to overwrite."""

    def __init__(self):
        self.data = {}
        self.cond = threading.Condition()
        self.get_cb = distributed._CALLBACK(self._get)
        self.try_get_cb = distributed._CALLBACK(self._try_get)
        self.put_cb = distributed._CALLBACK(self._put)
        self.sizes = []

    def store(self, try_get=True):
        addr = lambda cb: ctypes.cast(cb, ctypes.c_void_p).value  # noqa: E731
        return distributed.KvStore(addr(self.get_cb), None, addr(self.put_cb), None,
                                   addr(self.try_get_cb) if try_get else None, None)

    @staticmethod
    def _fail(args, code, message):
        fn = _CALL_ERROR(ctypes.c_void_p.from_address(args.callback_error).value)
        return fn(code, message.encode(), len(message))

    @staticmethod
    def _give(args, value):
        buf = _libc.malloc(max(1, len(value)))
        ctypes.memmove(buf, value, len(value))
        args.value, args.value_size, args.value_deleter_callback = buf, len(value), _FREE

    def _get(self, ptr):
        args = distributed._GetArgs.from_address(ptr)
        self.sizes.append(args.struct_size)
        key = ctypes.string_at(args.key, args.key_size).decode()
        with self.cond:
            if not self.cond.wait_for(lambda: key in self.data, args.timeout_in_ms / 1000):
                return self._fail(args, ErrorCode.DEADLINE_EXCEEDED, f"no {key} yet")
            self._give(args, self.data[key])
        return None

    def _try_get(self, ptr):
        args = distributed._TryGetArgs.from_address(ptr)
        key = ctypes.string_at(args.key, args.key_size).decode()
        with self.cond:
            if key not in self.data:
                return self._fail(args, ErrorCode.NOT_FOUND, f"{key} not found")
            self._give(args, self.data[key])
        return None

    def _put(self, ptr):
        args = distributed._PutArgs.from_address(ptr)
        key = ctypes.string_at(args.key, args.key_size).decode()
        with self.cond:
            if key in self.data:
                return self._fail(args, ErrorCode.ALREADY_EXISTS, f"{key} exists")
            self.data[key] = ctypes.string_at(args.value, args.value_size) \
                if args.value_size else b""
            self.cond.notify_all()
        return None


def test_store_callbacks_get_put_try_get():
    c = CStore()
    s = c.store()
    s.put("a", b"\x00\x01" * 1000)
    assert s.get("a", 100) == b"\x00\x01" * 1000
    assert s.try_get("a") == b"\x00\x01" * 1000
    assert s.try_get("missing") is None
    s.put("empty", b"")
    assert s.get("empty", 100) == b""
    with pytest.raises(PjrtError) as e:
        s.get("missing", 10)
    assert e.value.pjrt_code == ErrorCode.DEADLINE_EXCEEDED and "'missing'" in str(e.value)
    with pytest.raises(PjrtError) as e:
        s.put("a", b"again")
    assert e.value.pjrt_code == ErrorCode.ALREADY_EXISTS
    assert set(c.sizes) == {ctypes.sizeof(distributed._GetArgs)}
    # Without a try_get callback (an older caller), try_get is a get with no wait.
    assert c.store(try_get=False).try_get("nothing") is None


def _clusters(n, timeout="2"):
    c = CStore()
    os.environ[distributed.TIMEOUT_ENV] = timeout
    try:
        return c, [distributed.Cluster(i, n, c.store()) for i in range(n)]
    finally:
        del os.environ[distributed.TIMEOUT_ENV]


def _in_threads(fns):
    results = [None] * len(fns)

    def go(i):
        try:
            results[i] = fns[i]()
        except Exception as e:  # noqa: BLE001 - returned for the test to check
            results[i] = e
    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_topology_exchange_and_allgather():
    _, clusters = _clusters(3)
    # The clusters of one "job" share a key prefix (each was made as one
    # process's first client would be).
    for c in clusters:
        c.prefix = "job"
    tops = _in_threads([lambda c=c, k=k: c.exchange_topology(k + 1, {"v": 1})
                        for k, c in enumerate(clusters)])
    for t in tops:
        assert [r["num_devices"] for r in t] == [1, 2, 3]
    parts = _in_threads([lambda c=c: c.allgather((0, 1, 2), c.next_tag((0, 1, 2)),
                                                 bytes([c.node_id]) * 3, "a test")
                         for c in clusters])
    for p in parts:
        assert p == {0: b"\x00" * 3, 1: b"\x01" * 3, 2: b"\x02" * 3}


def test_large_parts_travel_under_keys_of_their_own():
    store, clusters = _clusters(2)
    for c in clusters:
        c.prefix = "job"
    big = [bytes([k]) * (distributed._INLINE_BYTES + 1) for k in range(2)]
    parts = _in_threads([lambda c=c: c.allgather((0, 1), "t", big[c.node_id], "a test")
                         for c in clusters])
    assert parts[0] == parts[1] == {0: big[0], 1: big[1]}
    assert store.data["job/t/0"] == b"L" and store.data["job/t/1/data"] == big[1]


def test_a_failing_peer_is_named_at_once():
    _, clusters = _clusters(2, timeout="30")
    for c in clusters:
        c.prefix = "job"
    tag = "x/0.1/0"
    clusters[1].post_error(tag, "ValueError: bad argument")
    t0 = time.monotonic()
    with pytest.raises(PjrtError) as e:
        clusters[0].allgather((0, 1), tag, b"data", "the arguments of f")
    assert time.monotonic() - t0 < 5
    assert e.value.pjrt_code == ErrorCode.ABORTED
    assert "process 1 failed in the arguments of f" in str(e.value)
    assert "bad argument" in str(e.value)


def test_a_silent_peer_times_out_naming_it():
    _, clusters = _clusters(2, timeout="1")
    t0 = time.monotonic()
    with pytest.raises(PjrtError) as e:
        clusters[0].allgather((0, 1), "x/0.1/0", b"data", "the arguments of f")
    assert 0.9 < time.monotonic() - t0 < 10
    assert e.value.pjrt_code == ErrorCode.DEADLINE_EXCEEDED
    assert "process 1 sent nothing for the arguments of f" in str(e.value)


def test_one_process_reads_no_store():
    # num_nodes absent or 1: no cluster, whatever store is given.
    assert distributed.Cluster.from_options({}, None) is None
    assert distributed.Cluster.from_options({"num_nodes": 1, "node_id": 0}, object()) is None
    with pytest.raises(PjrtError, match="needs the key-value store"):
        distributed.Cluster.from_options({"num_nodes": 2, "node_id": 0}, None)
    with pytest.raises(PjrtError, match="node_id must be in"):
        distributed.Cluster.from_options({"num_nodes": 2, "node_id": 2}, CStore().store())


def test_array_records_round_trip():
    import ml_dtypes
    import numpy as np
    arrays = [([0, 1], np.arange(6, dtype=np.float32).reshape(2, 3)),
              ([1, 0], np.array([1.5, -2], dtype=ml_dtypes.bfloat16)),
              ([2, 2], np.zeros((0, 4), np.int8)), ([3, 0], None),
              ([4, 1], np.array(True)), ([5, 0], np.float32(2.5) * np.ones((), np.float32))]
    header, back = distributed.decode_arrays(distributed.encode_arrays({"p": 1}, arrays))
    assert header == {"p": 1}
    for (k, a), (k2, b) in zip(arrays, back):
        assert k == k2
        if a is None:
            assert b is None
        else:
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a.tobytes() == b.tobytes()


# ----------------------------------------------------------------------------
# PyTorch/XLA: xmp.spawn with PJRT_DEVICE=STABLEHLO_REF
# ----------------------------------------------------------------------------


def _torch_xla_missing():
    import importlib.util
    return importlib.util.find_spec("torch_xla") is None


@pytest.mark.slow
@pytest.mark.skipif(_torch_xla_missing(), reason="torch_xla is not installed")
def test_torch_xla_two_process_all_reduce_matches_cpu():
    import numpy as np
    env = _env(1, PJRT_DEVICE="STABLEHLO_REF", STABLEHLO_REF_NUM_PROCESSES="2",
               STABLEHLO_REF_DISTRIBUTED_TIMEOUT="60", XLA_COORDINATOR_PORT=str(_free_port()))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "interpreter")])
    proc = subprocess.run([sys.executable, str(ROOT / "tests" /
                                               "torch_xla_multiprocess_workload.py")],
                          capture_output=True, text=True, env=env, timeout=600)
    results = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines()
               if line.startswith("RESULT ")]
    assert len(results) == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    # What PyTorch computes on the CPU: the sum of every rank's tensor.
    expected = sum(np.arange(6, dtype=np.float32).reshape(2, 3) * (r + 1) + 0.25
                   for r in range(2))
    for r in results:
        assert r["world"] == 2
        assert np.array_equal(np.array(r["sum"], np.float32), expected)
        # all_gather: a different program in each process, each device running its own.
        assert "gather_error" not in r, r.get("gather_error")
        assert np.array_equal(np.array(r["gather"], np.float32), np.concatenate(
            [np.arange(6, dtype=np.float32).reshape(2, 3) * (k + 1) + 0.25 for k in range(2)]))
    assert sorted(r["rank"] for r in results) == [0, 1]


def test_clients_of_two_processes_see_one_topology(monkeypatch):
    # Two "processes" as two clients in threads, sharing a store.
    from stablehlo_pjrt.client import Client
    monkeypatch.setattr(distributed, "_next_prefix", lambda: "job")
    monkeypatch.setenv(distributed.TIMEOUT_ENV, "20")
    store = CStore()
    clients = _in_threads([
        lambda k=k: Client({"num_nodes": 2, "node_id": k, "num_devices": k + 1}, store.store())
        for k in range(2)])
    for k, c in enumerate(clients):
        assert isinstance(c, Client), c
        assert c.process_index == k
        # Process 0's device first, then process 1's two: the same ids everywhere.
        assert [(d.id, d.description.process_index, d.local_hardware_id)
                for d in c.all_devices] == [(0, 0, 0), (1, 1, 0), (2, 1, 1)]
        assert [d.id for d in c.devices] == ([0] if k == 0 else [1, 2])
        assert all(d.addressable == (d.description.process_index == k)
                   for d in c.all_devices)
        for device_id in range(3):
            assert c.device_by_id(device_id).id == device_id
        assert c.default_assignment(3, 1) == [[0], [1], [2]]
        memory_ids = [m.id for d in c.all_devices for m in d.memories]
        assert len(memory_ids) == len(set(memory_ids))
    with pytest.raises(PjrtError, match="not addressable"):
        from stablehlo_pjrt.buffer import device_and_memory
        device_and_memory(clients[0], clients[0].all_devices[1].handle, None)


def test_run_parallel_with_a_program_per_process():
    # What the plugin does when processes compiled a replicated program
    # differently: each process of the grid runs its own compilation.
    import numpy as np

    import stablehlo_interpreter as shi

    def program(offset):
        return shi.compile(f"""
func.func @main(%x: tensor<2xf32>) -> tensor<4xf32> {{
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %p = stablehlo.pad %x, %z, low = [{offset}], high = [{2 - offset}], interior = [0]
     : (tensor<2xf32>, tensor<f32>) -> tensor<4xf32>
  %r = "stablehlo.all_reduce"(%p) ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }}) {{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}} : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}}""")
    p0, p1 = program(0), program(2)
    args = [[np.array([1, 2], np.float32)], [np.array([3, 4], np.float32)]]
    outs = p0.run_parallel(args, 2, 1, process_programs=[p0, p1])
    for (out,) in outs:
        assert out.tolist() == [1, 2, 3, 4]
    with pytest.raises(shi.InterpreterError, match="2 processes"):
        p0.run_parallel(args, 2, 1, process_programs=[p0])
