"""Several processes: the topology and the data path between them.

A multi-process client (``jax.distributed.initialize``, or PyTorch/XLA's
coordinator) is created with ``node_id``/``num_nodes`` options and the
key-value store callbacks of ``PJRT_Client_Create_Args``. Everything that
crosses processes goes through that store (the coordination service JAX or
PyTorch/XLA already runs): no socket of our own, no new dependency.

* **Topology.** Each process puts the number of its devices; every process
  reads all of them and numbers the devices the same way: process ``p``'s
  devices get the global ids that follow those of processes ``0..p-1``.
* **Execution.** A program whose devices span processes runs like this in
  each participating process: the process sends the arguments of its
  addressable devices to the others (one store round, :meth:`Cluster.allgather`),
  receives theirs, runs the whole program (every device, as one process
  would: the same interpreter, the same reduction order) and keeps the
  results of its own devices. So every collective (all_reduce, all_gather,
  reduce_scatter, all_to_all, collective_permute, collective_broadcast,
  send/recv) has exactly the single-process semantics and bits; the price is
  that each process computes every device's part (the reference is about
  values, not speed) and that host callbacks run in every participating
  process for every device.
  Processes that compiled a replicated program differently (PyTorch/XLA
  specializes all_gather to the process) publish their programs once
  (:meth:`Cluster.publish_program`); each device then runs its own
  process's program on the one grid.
* **Faults.** A process whose arguments cannot be read sends an error record
  instead, which fails the others at once, naming it; a process that died
  (or never runs the program) is named by the others when its part does not
  arrive within ``STABLEHLO_REF_DISTRIBUTED_TIMEOUT`` seconds.

The PJRT key-value callbacks can get and put but not delete: every value
exchanged stays in the coordinator's memory until the job ends (see
docs/devices.md, "Several processes").
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import struct
import threading
import time
from ctypes import Structure, c_int, c_size_t, c_void_p

import numpy as np

from . import config
from ._capi import ErrorCode
from .error import PjrtError, invalid_argument

TIMEOUT_ENV = config.DISTRIBUTED_TIMEOUT.name
# A blocking get waits at most this long per call, so that a wait for a peer
# can be interrupted (Ctrl-C) and its deadline kept.
_SLICE_MS = 1000
# Payloads up to this size travel in the exchange record itself.
_INLINE_BYTES = 256 << 10


def timeout_seconds() -> float:
    try:
        return config.DISTRIBUTED_TIMEOUT.value()
    except config.ConfigError as e:
        raise invalid_argument(str(e)) from None


def configured_num_processes() -> int:
    """How many processes PyTorch/XLA's xmp.spawn starts."""
    return config.NUM_PROCESSES.value()


# ----------------------------------------------------------------------------
# The key-value store of PJRT_Client_Create (pjrt_c_api.h)
# ----------------------------------------------------------------------------

P = c_void_p


class _GetArgs(Structure):   # PJRT_KeyValueGetCallback_Args
    _fields_ = [("struct_size", c_size_t), ("extension_start", P), ("key", P),
                ("key_size", c_size_t), ("timeout_in_ms", c_int), ("callback_error", P),
                ("user_arg", P), ("value", P), ("value_size", c_size_t),
                ("value_deleter_callback", P)]


class _TryGetArgs(Structure):   # PJRT_KeyValueTryGetCallback_Args
    _fields_ = [("struct_size", c_size_t), ("extension_start", P), ("key", P),
                ("key_size", c_size_t), ("callback_error", P), ("user_arg", P),
                ("value", P), ("value_size", c_size_t), ("value_deleter_callback", P)]


class _PutArgs(Structure):   # PJRT_KeyValuePutCallback_Args
    _fields_ = [("struct_size", c_size_t), ("extension_start", P), ("key", P),
                ("key_size", c_size_t), ("value", P), ("value_size", c_size_t),
                ("callback_error", P), ("user_arg", P)]


_CALLBACK = ctypes.CFUNCTYPE(P, P)
_DELETER = ctypes.CFUNCTYPE(None, P)
# PJRT_CallbackError: PJRT_Error* (*)(PJRT_Error_Code, const char*, size_t)
_CALLBACK_ERROR = ctypes.CFUNCTYPE(P, c_int, P, c_size_t)

_errors = threading.local()
# What our callback_error returns: the store's callbacks only pass it back.
_ERROR_TOKEN = ctypes.create_string_buffer(8)
_ERROR_TOKEN_ADDRESS = ctypes.addressof(_ERROR_TOKEN)


@_CALLBACK_ERROR
def _callback_error(code, message, size):
    # Called by the store's callback on the calling thread, inside the get or
    # put; what it records is read right after that call returns.
    _errors.last = (int(code), ctypes.string_at(message, size).decode("utf-8", "replace")
                    if message and size else "")
    return _ERROR_TOKEN_ADDRESS


_CALLBACK_ERROR_SLOT = ctypes.c_void_p(ctypes.cast(_callback_error, c_void_p).value)


class StoreError(PjrtError):
    """A get/put of the key-value store failed (the code is the store's)."""


class KvStore:
    """The caller's key-value store, through its C callbacks. Thread-safe
    (the callbacks are, by the header's contract)."""

    def __init__(self, get_cb, get_arg, put_cb, put_arg, try_get_cb=None, try_get_arg=None):
        self._get = _CALLBACK(get_cb)
        self._put = _CALLBACK(put_cb)
        self._try_get = _CALLBACK(try_get_cb) if try_get_cb else None
        self._get_arg, self._put_arg, self._try_get_arg = get_arg, put_arg, try_get_arg
        self.calls = {"get": 0, "put": 0, "try_get": 0}

    def _check(self, error, what, key):
        if not error:
            return
        code, message = getattr(_errors, "last", None) or (ErrorCode.UNKNOWN, "")
        _errors.last = None
        if error != _ERROR_TOKEN_ADDRESS:
            message = message or "(the store returned an error of its own kind)"
        raise StoreError(code, f"key-value store {what} of {key!r} failed: {message}")

    def put(self, key: str, value: bytes) -> None:
        k = ctypes.c_char_p(key.encode())
        # c_char_p of a bytes object points into it: no copy of the value
        # (the header asks it to live only for the call).
        v = ctypes.c_char_p(bytes(value))
        args = _PutArgs(ctypes.sizeof(_PutArgs), None, ctypes.cast(k, P), len(k.value),
                        ctypes.cast(v, P), len(value),
                        ctypes.addressof(_CALLBACK_ERROR_SLOT), self._put_arg)
        self.calls["put"] += 1
        self._check(self._put(ctypes.addressof(args)), "put", key)

    def _value(self, args) -> bytes:
        data = ctypes.string_at(args.value, args.value_size) if args.value_size else b""
        if args.value and args.value_deleter_callback:
            _DELETER(args.value_deleter_callback)(args.value)
        return data

    def get(self, key: str, timeout_ms: int) -> bytes:
        """The value of ``key``, waiting up to ``timeout_ms`` for it to be
        put (StoreError with DEADLINE_EXCEEDED when it is not)."""
        kb = ctypes.c_char_p(key.encode())
        args = _GetArgs(ctypes.sizeof(_GetArgs), None, ctypes.cast(kb, P), len(kb.value),
                        int(timeout_ms), ctypes.addressof(_CALLBACK_ERROR_SLOT),
                        self._get_arg, None, 0, None)
        self.calls["get"] += 1
        self._check(self._get(ctypes.addressof(args)), "get", key)
        return self._value(args)

    def try_get(self, key: str) -> bytes | None:
        """The value of ``key`` if it was put, else None (a blocking get with
        no wait where the caller gave no try_get callback)."""
        if self._try_get is None:
            try:
                return self.get(key, 0)
            except StoreError as e:
                if e.pjrt_code in (ErrorCode.NOT_FOUND, ErrorCode.DEADLINE_EXCEEDED):
                    return None
                raise
        kb = ctypes.c_char_p(key.encode())
        args = _TryGetArgs(ctypes.sizeof(_TryGetArgs), None, ctypes.cast(kb, P),
                           len(kb.value), ctypes.addressof(_CALLBACK_ERROR_SLOT),
                           self._try_get_arg, None, 0, None)
        self.calls["try_get"] += 1
        try:
            self._check(self._try_get(ctypes.addressof(args)), "try_get", key)
        except StoreError as e:
            if e.pjrt_code == ErrorCode.NOT_FOUND:
                return None
            raise
        return self._value(args)


# ----------------------------------------------------------------------------
# The processes of a client
# ----------------------------------------------------------------------------

# Clients created in this process so far: a second client (JAX's
# clear_backends, a test) uses keys of its own. Every process creates its
# clients in the same order, so the numbers agree.
_generation = 0
_generation_lock = threading.Lock()


def _option_int(options, name):
    raw = options.get(name)
    if raw is None:
        return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise invalid_argument(f"client option {name} must be an integer, got {raw!r}") \
            from None


def _next_prefix() -> str:
    """The key prefix of the next client of this process."""
    global _generation
    with _generation_lock:
        _generation += 1
        return f"stablehlo_ref/{_generation - 1}"


class Cluster:
    """This process's view of the processes of a multi-process client."""

    def __init__(self, node_id: int, num_nodes: int, store: KvStore):
        self.node_id = node_id
        self.num_nodes = num_nodes
        self.store = store
        self.timeout_s = timeout_seconds()
        self.prefix = _next_prefix()
        self.device_counts: list[int] = []
        self._rounds: dict[tuple, int] = {}
        self._published: set[str] = set()
        self._programs: dict[tuple, object] = {}
        self._lock = threading.Lock()
        self.bytes_sent = 0
        self.bytes_received = 0

    @staticmethod
    def from_options(options: dict, store: KvStore | None) -> "Cluster | None":
        """The cluster the client options describe; None for one process.
        Only a multi-process client (num_nodes > 1) touches the store."""
        num_nodes = _option_int(options, "num_nodes")
        if num_nodes is None or num_nodes == 1:
            return None
        node_id = _option_int(options, "node_id")
        if num_nodes < 1:
            raise invalid_argument(f"client option num_nodes must be positive, got {num_nodes}")
        if node_id is None or not 0 <= node_id < num_nodes:
            raise invalid_argument(
                f"client option node_id must be in [0, {num_nodes}) with num_nodes="
                f"{num_nodes}, got {node_id!r}")
        if store is None:
            raise invalid_argument(
                f"a stablehlo_ref client of {num_nodes} processes (num_nodes) needs the "
                "key-value store callbacks of PJRT_Client_Create (jax.distributed."
                "initialize, or PyTorch/XLA's coordinator, passes them)")
        return Cluster(node_id, num_nodes, store)

    def exchange_topology(self, num_local_devices: int, info: dict) -> list[dict]:
        """Every process's topology record (``num_devices`` and ``info``), in
        process order; this process's is ``num_local_devices``."""
        record = dict(info, num_devices=num_local_devices)
        parts = self.allgather(range(self.num_nodes), "topology",
                               json.dumps(record).encode(), "the topology exchange")
        out = []
        for p in range(self.num_nodes):
            try:
                rec = json.loads(parts[p].decode())
                int(rec["num_devices"])
            except Exception as e:  # noqa: BLE001 - a record we cannot read
                raise PjrtError(ErrorCode.INTERNAL,
                                f"stablehlo_ref: process {p}'s topology record is "
                                f"unreadable ({e}); do all processes run the same "
                                "stablehlo-pjrt?") from None
            out.append(rec)
        self.device_counts = [int(r["num_devices"]) for r in out]
        return out

    def next_tag(self, participants: tuple) -> str:
        """The name of the next exchange among ``participants``: every one of
        them runs the programs they share in the same order (as XLA requires),
        so the n-th exchange of a group has the same name everywhere."""
        with self._lock:
            k = self._rounds.get(participants, 0)
            self._rounds[participants] = k + 1
        group = ".".join(map(str, participants))
        return f"x/{group}/{k}"

    def _key(self, tag, process):
        return f"{self.prefix}/{tag}/{process}"

    def publish_program(self, fingerprint: str, code: bytes) -> None:
        """Put this process's program ``fingerprint`` (its StableHLO) where
        processes that compiled a different program under the same name can
        read it (once per program)."""
        if fingerprint in self._published:
            return
        try:
            self.store.put(f"{self.prefix}/program/{self.node_id}/{fingerprint}", code)
        except StoreError as e:
            if e.pjrt_code != ErrorCode.ALREADY_EXISTS:
                raise
        self._published.add(fingerprint)

    def peer_program(self, p: int, fingerprint: str, what: str):
        """Process ``p``'s program ``fingerprint``, compiled here (cached)."""
        program = self._programs.get((p, fingerprint))
        if program is None:
            import stablehlo_interpreter as shi
            try:
                code = self.store.get(f"{self.prefix}/program/{p}/{fingerprint}",
                                      int(self.timeout_s * 1000))
                program = shi.compile(code)
            except (StoreError, shi.InterpreterError) as e:
                raise PjrtError(ErrorCode.INTERNAL,
                                f"stablehlo_ref: process {p}'s program for {what} could not "
                                f"be read or compiled here: {e}") from None
            self._programs[p, fingerprint] = program
        return program

    def post_error(self, tag: str, message: str) -> None:
        """Tell the other participants of ``tag`` that this process failed."""
        try:
            self.store.put(self._key(tag, self.node_id), b"E" + message.encode())
        except StoreError:
            pass  # the store is gone too: the others time out, naming us

    def allgather(self, participants, tag: str, payload: bytes, what: str) -> dict:
        """Puts ``payload`` under ``tag`` and returns every participant's
        (this one's included), by process. Raises, naming the process, when a
        participant sent an error record or nothing within the timeout.

        A small payload travels in the record itself. A large one is put
        first under a key of its own, then the record says so: the waits
        are short gets of the small record (a blocking get's timeout covers
        its transfer too, which for tens of MB takes seconds), and the one
        get of the data then only transfers it."""
        key = self._key(tag, self.node_id)
        if len(payload) <= _INLINE_BYTES:
            self.store.put(key, b"D" + payload)
        else:
            self.store.put(key + "/data", payload)
            self.store.put(key, b"L")
        self.bytes_sent += len(payload)
        out = {self.node_id: payload}
        deadline = time.monotonic() + self.timeout_s
        for p in participants:
            if p == self.node_id:
                continue
            record = self._wait(tag, p, what, deadline)
            kind, body = record[:1], record[1:]
            if kind == b"E":
                raise PjrtError(ErrorCode.ABORTED,
                                f"stablehlo_ref: process {p} failed in {what} "
                                f"({tag}): {body.decode('utf-8', 'replace')}")
            if kind == b"L":
                try:
                    # Put before the record: present; the wait is the transfer.
                    body = self.store.get(self._key(tag, p) + "/data",
                                          int(self.timeout_s * 1000))
                except StoreError as e:
                    raise PjrtError(e.pjrt_code,
                                    f"stablehlo_ref: reading process {p}'s part of {what} "
                                    f"({tag}): {e}") from None
            elif kind != b"D":
                raise PjrtError(ErrorCode.DATA_LOSS,
                                f"stablehlo_ref: process {p}'s record for {what} ({tag}) "
                                "is unreadable; do all processes run the same stablehlo-pjrt?")
            out[p] = body
            self.bytes_received += len(body)
        return out

    def _wait(self, tag, p, what, deadline) -> bytes:
        key = self._key(tag, p)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PjrtError(
                    ErrorCode.DEADLINE_EXCEEDED,
                    f"stablehlo_ref: process {p} sent nothing for {what} ({tag}) within "
                    f"{self.timeout_s:g} s ({TIMEOUT_ENV}): it died, failed before "
                    "reaching it, or runs other programs than this process")
            try:
                return self.store.get(key, max(1, min(_SLICE_MS, int(left * 1000))))
            except StoreError as e:
                if e.pjrt_code not in (ErrorCode.DEADLINE_EXCEEDED, ErrorCode.NOT_FOUND):
                    raise PjrtError(
                        e.pjrt_code,
                        f"stablehlo_ref: waiting for process {p} in {what} ({tag}): "
                        f"{e} (the coordinator may have died)") from None


# ----------------------------------------------------------------------------
# Programs whose devices span processes
# ----------------------------------------------------------------------------


def _dtype_text(dt: np.dtype) -> str:
    # ml_dtypes' types (bfloat16, float8_*, int4) have no numpy type string.
    return dt.name if type(dt.type).__module__.startswith("ml_dtypes") \
        or dt.type.__module__.startswith("ml_dtypes") else dt.str


def _dtype_of(text: str) -> np.dtype:
    if text[:1] in "<>|=":
        return np.dtype(text)
    import ml_dtypes
    return np.dtype(getattr(ml_dtypes, text))


def encode_arrays(header: dict, arrays: list) -> bytes:
    """``header`` (JSON) and the arrays' bytes, in one value."""
    entries = []
    blobs = []
    for key, a in arrays:
        if a is None:
            entries.append([key, None, None])
            continue
        if not a.flags.c_contiguous:
            a = a.copy(order="C")  # (not ascontiguousarray: it makes scalars 1-d)
        entries.append([key, _dtype_text(a.dtype), list(a.shape)])
        blobs.append(a.reshape(-1).view(np.uint8).data if a.size else b"")
    head = json.dumps(dict(header, arrays=entries)).encode()
    return b"".join([struct.pack("<Q", len(head)), head, *blobs])


def decode_arrays(data: bytes) -> tuple[dict, list]:
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n].decode())
    offset = 8 + n
    out = []
    for key, dtype, shape in header.pop("arrays"):
        if dtype is None:
            out.append((key, None))
            continue
        dt = _dtype_of(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        a = np.frombuffer(data, dt, count, offset).reshape(shape)
        offset += count * dt.itemsize
        out.append((key, a))
    if offset != len(data):
        raise ValueError(f"{len(data) - offset} bytes left over")
    return header, out


_COLLECTIVES = frozenset(
    f"stablehlo.{name}" for name in (
        "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute",
        "collective_broadcast", "send", "recv"))


def has_collectives(program) -> bool:
    """Does ``program`` (an interpreter Program) communicate between devices?"""
    from stablehlo_interpreter import MLIR_LOCK

    def walk(op):
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    o = inner.operation
                    if o.name in _COLLECTIVES or walk(o):
                        return True
        return False

    with MLIR_LOCK, program.module.context:
        return walk(program.module.mlir.operation)


class Span:
    """The devices of a program that span processes: which positions
    (replica-major, as the device assignment lists them) this process
    holds, and which processes take part."""

    def __init__(self, devices, meta):
        self.devices = list(devices)
        self.local = [i for i, d in enumerate(self.devices) if d.addressable]
        self.participants = tuple(sorted({d.description.process_index for d in self.devices}))
        # Launches on one device (PyTorch/XLA compiles every program for all
        # devices as replicas and launches each process's device alone): a
        # program without collectives runs that replica alone, as in one
        # process; one with collectives exchanges with the other processes.
        self.collectives = has_collectives(meta.program)
        # What identifies the program across processes: its text without
        # locations (its bytes differ in metadata between PyTorch/XLA's
        # processes). Every process runs every device with its own copy of
        # the program, so the copies must be the same program.
        from stablehlo_interpreter import MLIR_LOCK
        with MLIR_LOCK, meta.program.module.context:
            text = meta.program.module.mlir.operation.get_asm(enable_debug_info=False)
        h = hashlib.sha256(text.encode())
        h.update(f"{meta.num_replicas}x{meta.num_partitions}".encode())
        self.fingerprint = h.hexdigest()[:16]
        # Arguments every device holds whole (a replicated argument of a
        # sharded jit): only the process holding position 0 sends them.
        plan = meta.spmd
        self.whole = frozenset(
            i for i, (sh, shape) in enumerate(zip(plan.in_shardings, plan.in_shapes))
            if shape is None or sh.is_replicated) if plan is not None else frozenset()


def _local_part(span, meta, cluster, argument_lists, positions):
    """This process's argument values and the record it sends."""
    if meta.spmd is None and meta.num_partitions == 1:
        cluster.publish_program(span.fingerprint, meta.code)
    inputs = [[b.live_array() for b in args] for args in argument_lists]
    if meta.spmd is None:  # (a sharded jit's arguments are shards)
        for row in inputs:
            for i, value in enumerate(row):
                if isinstance(value, np.ndarray):
                    meta.program.check_argument(i, value)
    sent = []
    for k, pos in enumerate(positions):
        for i, value in enumerate(inputs[k]):
            if not isinstance(value, np.ndarray):  # a token: every process has one
                sent.append(([pos, i], None))
            elif i not in span.whole or pos == 0:
                sent.append(([pos, i], value))
    return inputs, encode_arrays({"program": span.fingerprint, "name": meta.name}, sent)


def execute(exe, argument_lists, positions=None) -> list:
    """Runs LoadedExecutable ``exe`` (whose ``span`` is set) in this process:
    exchange the arguments, run every device, keep this process's results.
    ``positions``: the positions (in ``span.devices``) of the argument
    lists, by default every local one. Returns per position the result
    values (the caller wraps them)."""
    from .donation import OutputOwnership

    span = exe.span
    meta = exe.meta
    cluster = exe.client.cluster
    positions = span.local if positions is None else positions
    tag = cluster.next_tag(span.participants)
    what = f"the arguments of {meta.name}"
    try:
        inputs, payload = _local_part(span, meta, cluster, argument_lists, positions)
    except BaseException as e:
        cluster.post_error(tag, f"{type(e).__name__}: {e}")
        if isinstance(e, Exception) and not isinstance(e, PjrtError):
            raise invalid_argument(f"stablehlo_ref execution of {meta.name} failed: {e}") \
                from None
        raise
    parts = cluster.allgather(span.participants, tag, payload, what)
    n_in = len(meta.input_types)
    full = [[None] * n_in for _ in span.devices]
    for k, pos in enumerate(positions):
        full[pos] = list(inputs[k])
    token = next((v for row in inputs for v in row if not isinstance(v, np.ndarray)), None)
    programs = [meta.program] * len(span.devices)
    differ = False
    for p, data in parts.items():
        if p == cluster.node_id:
            continue
        try:
            header, arrays = decode_arrays(data)
        except Exception as e:  # noqa: BLE001 - a record we cannot read
            raise PjrtError(ErrorCode.DATA_LOSS,
                            f"stablehlo_ref: process {p}'s part of {what} is unreadable: "
                            f"{e}") from None
        theirs = header.get("program")
        if theirs != span.fingerprint:
            if meta.spmd is not None or meta.num_partitions > 1 \
                    or header.get("name") != meta.name:
                raise PjrtError(ErrorCode.FAILED_PRECONDITION,
                                f"stablehlo_ref: process {p} ran {header.get('name')!r} where "
                                f"this process ran {meta.name!r} ({tag}), and the two programs "
                                "differ: the processes must run the same programs in the same "
                                "order (a replicated program may differ between processes; "
                                "a partitioned one may not)")
            # The same replicated program, specialized to each process
            # (PyTorch/XLA's all_gather pads at the process's offset): the
            # devices of process p run process p's program.
            differ = True
        for (pos, i), value in arrays:
            full[pos][i] = value if value is not None else token
            if theirs != span.fingerprint:
                programs[pos] = cluster.peer_program(p, theirs, what)
    for i in span.whole:
        for row in full:
            if row[i] is None:
                row[i] = full[0][i]
    missing = [str(span.devices[pos]) for pos, row in enumerate(full)
               if any(v is None for v in row)]
    if missing:
        raise PjrtError(ErrorCode.FAILED_PRECONDITION,
                        f"stablehlo_ref: no process launched {meta.name} on "
                        f"{', '.join(missing)} ({tag}): every device of a program spanning "
                        "processes must be launched in the same round")
    if differ:
        results = _run_programs(meta, full, programs)
    else:
        results = exe._run(span.devices, None, full, None, None, (0, 0))
    out = []
    for pos in positions:
        own = OutputOwnership(full[pos], {}, ())
        out.append(exe._result_values(results[pos], own))
    return out


def _run_programs(meta, full, programs):
    """A replicated program whose processes run different compilations:
    every device on one grid, each with its process's program."""
    import stablehlo_interpreter as shi
    try:
        return meta.program.run_parallel(full, num_replicas=meta.num_replicas,
                                         num_partitions=meta.num_partitions,
                                         process_programs=programs)
    except shi.InterpreterError as e:
        code = (ErrorCode.INVALID_ARGUMENT if isinstance(e, shi.ArgumentError)
                else ErrorCode.INTERNAL)
        raise PjrtError(code, f"stablehlo_ref execution of {meta.name} failed: {e}") from None
