"""Execution: PJRT_LoadedExecutable, a compiled program bound to devices.

Compilation and the serialized form live in executable.py; this module runs
what it compiled. An Execute runs inline, in the caller's thread (the outputs
are ready when it returns), or on the worker (dispatch.py: the outputs are
pending until the run finishes); dispatch.run_inline decides. Both paths run
through one routine, :meth:`LoadedExecutable._run_gathered`: it gathers the
inputs (:func:`gather_inputs`), runs the plan, consumes the donated buffers
and owns the results, so that donation behaves the same on both.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from sys import getrefcount as _getrefcount
from time import perf_counter_ns

import numpy as np

from . import _shim, dispatch, donation, interrupt
from . import buffer as _buffer
from ._capi import BufferType, ErrorCode
from .buffer import Buffer, dtype_of, preview_value, short_type
from .device import Device
from .error import PjrtError, failed_precondition, invalid_argument, unimplemented
from .event import Completion
from .executable import ExecutableMeta, encode_device_assignment
from .handles import peek, pointer_array, register

_shi = None

# Execute's fast path times one call in RUN_SAMPLE for the run-time average
# (dispatch.fast_path_open): a program whose runs grow slow is sent to the
# worker at most RUN_SAMPLE - 1 calls late.
RUN_SAMPLE = 16
# The first runs of a program are not what its later ones cost: the first
# plans lazily (the interpreter plans a block at its first run), and the
# first two touch new memory for the outputs and temporaries, page by page
# (erf of 1e6 float32: 4 ms, 3 ms, then 0.8 ms). They run inline, timed
# each, and the fastest but the first's becomes the run-time average. Counted
# as they came, they sent calls 2 and 3 of such a program to the worker and
# their zero-copy inputs through a copy into new memory (7-8 ms each). A
# second or third run of WARMUP_LONG_NS or more ends them at once: a program
# that long gains from the worker whatever the first touches cost.
WARMUP_RUNS = 3
WARMUP_LONG_NS = 20_000_000


def _interpreter():
    """The interpreter package, imported once (Execute is a hot path)."""
    global _shi
    if _shi is None:
        import stablehlo_interpreter
        _shi = stablehlo_interpreter
    return _shi


class ExecuteContext:
    """PJRT_ExecuteContext: nothing is attached to one yet."""
    __slots__ = ("handle",)

    def __init__(self):
        register(self)


class Outputs(list):
    """Execute's per-device output lists; ``interrupted`` asks the caller to
    re-raise a KeyboardInterrupt once it has handed them over; ``completion``
    is set when the outputs are pending (the program runs on the worker)."""

    def __init__(self, items=(), interrupted=False, completion=None, queued=0):
        super().__init__(items)
        self.interrupted = interrupted
        self.completion = completion
        self.queued = queued


def _timeout_text(meta, limit, error) -> str:
    where = f" (stopped in {str(error).split(': ExecutionTimeout')[0]})" if error else ""
    return (f"stablehlo_ref execution of {meta.name} exceeded the time limit of {limit:g} s "
            f"set with stablehlo_pjrt.set_execute_timeout / STABLEHLO_REF_EXECUTE_TIMEOUT"
            f"{where}")


def _interrupted_text(meta) -> str:
    return f"stablehlo_ref execution of {meta.name} was interrupted (KeyboardInterrupt)"


_active_tracer = None
_open = dispatch.fast_path_open


def _op_tracer_active() -> bool:
    """Whether an op tracer (stablehlo_interpreter.use_tracer, the oracle
    tools) is active now: the program then runs inline, inside its scope."""
    global _active_tracer
    if _active_tracer is None:
        _active_tracer = _interpreter().active_tracer
    return _active_tracer() is not None


class LoadedExecutable:
    """PJRT_LoadedExecutable: a compiled program bound to devices."""

    __slots__ = ("handle", "meta", "client", "devices", "logical_ids", "deleted",
                 "run_ns", "span", "devices_c", "logical_ids_c", "assignment_bytes",
                 "_memories", "_fast", "_untimed", "_warmup", "_warm_ns", "awaited")

    def __init__(self, client, meta: ExecutableMeta):
        from ._capi import PJRT_LogicalDeviceIds
        self.client = client
        self.meta = meta
        self.deleted = False
        # A running average of the wall time of its runs: in auto mode,
        # cheap programs run inline (dispatch.run_inline); the first run is
        # inline. Averaged so that one slow run (a GC pause, the machine
        # busy) does not send a cheap program to the worker.
        self.run_ns = 0
        # Execute's fast path times one run in RUN_SAMPLE (the clock and the
        # average are a twentieth of such a call): the calls left untimed.
        self._untimed = 0
        self._warmup = WARMUP_RUNS   # runs left before run_ns is set (_ran)
        self._warm_ns = 0            # the fastest of them, the first excepted
        self.awaited = dispatch.Awaited()  # auto mode: do callers block at once?
        replicas, partitions = meta.num_replicas, meta.num_partitions
        assignment = meta.options.device_assignment
        if assignment is None:
            assignment = client.default_assignment(replicas, partitions)
        if len(assignment) != replicas or any(len(row) != partitions for row in assignment):
            raise invalid_argument(
                f"device assignment {assignment} does not match {replicas} replica(s) x "
                f"{partitions} partition(s)")
        self.devices = []
        self.logical_ids = []
        for r, row in enumerate(assignment):
            for p, device_id in enumerate(row):
                self.devices.append(client.device_by_id(device_id))
                self.logical_ids.append((r, p))
        self.span = None
        if not all(d.addressable for d in self.devices):
            # Devices of other processes: Execute takes the addressable ones'
            # arguments and exchanges the rest (distributed.py).
            from .distributed import Span
            self.span = Span(self.devices, meta)
            local = [i for i, d in enumerate(self.devices) if d.addressable]
            self.devices = [self.devices[i] for i in local]
            self.logical_ids = [self.logical_ids[i] for i in local]
        self.devices_c = pointer_array(d.handle for d in self.devices)
        ids = (PJRT_LogicalDeviceIds * len(self.logical_ids))()
        for i, (r, p) in enumerate(self.logical_ids):
            ids[i].replica = r
            ids[i].partition = p
        self.logical_ids_c = ids
        self.assignment_bytes = encode_device_assignment(assignment)
        self._memories = {}
        self._fast = None  # execute_fast's plan: made at its first call
        register(self)

    def __str__(self):
        return f"LoadedExecutable({self.meta.name}, {self.handle:#x})"

    def execute(self, argument_lists: list[list[Buffer]], execute_device: Device | None = None,
                non_donatable: Collection[int] = (), launch_id: int = 0) -> Outputs:
        """Runs the program: inline (the outputs are ready when this returns)
        or on the worker (dispatch.py: the outputs are pending, the run's
        Completion is ``outputs.completion``). Bad arguments fail here in
        both cases; a failing run fails here inline, through the outputs'
        events on the worker."""
        if self.deleted:
            raise failed_precondition(f"{self} has been deleted")
        meta = self.meta
        if execute_device is not None:
            devices = [execute_device]
        else:
            devices = self.devices
        if len(argument_lists) != len(devices):
            raise invalid_argument(
                f"{self} runs on {len(devices)} device(s) but {len(argument_lists)} "
                "argument list(s) were given")
        n_in = len(meta.input_types)
        for args in argument_lists:
            if len(args) != n_in:
                raise invalid_argument(
                    f"{meta.name} takes {n_in} argument(s), got {len(args)}")
        if self.span is not None and (execute_device is None or self.span.collectives):
            return self._execute_spanning(argument_lists, execute_device)
        process = self._process(execute_device)
        try:
            # Programs with host callbacks run inline (XLA CPU runs them
            # synchronously too), so do runs under an op tracer.
            inline = dispatch.run_inline(self.run_ns, meta.host_callbacks is not None,
                                         _op_tracer_active(), self.awaited)
        except KeyboardInterrupt:  # while waiting for the queue to drain
            dispatch.cancel_all()
            return self._interrupted(devices)
        # Per device, the donated parameters (None: no donation); raises
        # XLA's errors for a buffer donated twice or donated and also used.
        donations = donation.plan(meta.aliased_params, argument_lists, non_donatable,
                                  self.logical_ids if execute_device is None else [process])
        if inline:
            return self._execute_now(devices, argument_lists, donations, process)
        return self._dispatch(devices, argument_lists, donations, process, launch_id)

    # -- the common case ------------------------------------------------------

    def execute_fast(self, handles: tuple[int, ...]
                     ) -> tuple[tuple[int, ...], int, tuple[int, ...]] | None:
        """:meth:`execute` of the common case, on one device's argument
        handles (Execute's C fast path, _shim.c): one device, no donation, no
        SPMD, no host callbacks, no time limit, the inputs ready and alive,
        the program cheap enough to run inline with nothing queued. Returns
        the output handles, the device's handle and each output memory's
        (for the trampoline's cache of constant getters), or None when the
        call is not that case, before doing anything (the full path then
        runs it, and reports bad arguments). The outputs are what the full
        path makes, run by the same interpreter. Everything that does not
        change from call to call is decided once, in :meth:`_fast_plan`; an
        active op tracer needs no check here: the run is inline, as the full
        path runs it then, and the interpreter hands it the tracer."""
        plan = self._fast
        if plan is None:
            plan = self._fast = self._fast_plan()
        if not plan or self.deleted or len(handles) != plan[0] or not _open(self.run_ns):
            return None
        _, device, memories, memory_handles, buffer_types, dtypes, shapes, nbytes, program = plan
        if len(handles) == 1:  # the common case, without the list
            b = peek(handles[0])
            if b.__class__ is not Buffer or b.ready is not None or b.deleted \
                    or b.error is not None:
                return None
            inputs: Sequence = (b.array,)
            borrowed = inputs if b.borrowed else None
        else:
            inputs = []
            borrowed = None
            for h in handles:
                b = peek(h)
                # Buffer.live_array's common case: ready, alive, no error.
                if b.__class__ is not Buffer or b.ready is not None or b.deleted \
                        or b.error is not None:
                    return None
                inputs.append(b.array)
                if b.borrowed:  # caller-owned memory: no result may alias it
                    borrowed = [b.array] if borrowed is None else borrowed + [b.array]
        untimed = self._untimed
        t0 = 0 if untimed else perf_counter_ns()
        try:
            results = program.call(inputs)
        except KeyboardInterrupt:
            outputs = self._interrupted([device])[0]
            interrupt.rearm_interrupt()  # in the caller, once Execute returns
            return tuple(b.handle for b in outputs), device.handle, memory_handles
        except _interpreter().InterpreterError as e:
            raise self._failure(e, 0) from None
        if untimed:
            self._untimed = untimed - 1
        else:
            self._ran(perf_counter_ns() - t0)
            self._untimed = 0 if self._warmup else RUN_SAMPLE - 1
        if len(results) == 1 == len(dtypes):
            # _owned_results of one result, inline: a new array of the
            # declared type (dtype identity first: numpy's builtin dtypes are
            # singletons) that is no input and no input's base.
            r = results[0]
            # Referenced by `results` and `r` alone (_FRESH_REFS): no input,
            # no view's base, no cached constant can be it, so the walk over
            # the inputs is not needed. A view (a loop's carried value, a
            # reshape) is kept when its memory is no input's, as
            # OutputOwnership.own keeps it.
            if r.__class__ is np.ndarray and r.shape == shapes[0] \
                    and (r.dtype is dtypes[0] or r.dtype == dtypes[0]) \
                    and _writable_c_contiguous(r) \
                    and ((r.base is None and (_getrefcount(r) == _FRESH_REFS
                                              or not any(_roots_at(a, r) for a in inputs)))
                         or (r.base is not None and _view_is_new(r, inputs, borrowed))):
                return ((_buffer.finished_output(r, buffer_types[0], device, memories[0],
                                                 nbytes[0]),),
                        device.handle, memory_handles)
        owned = _owned_results(results, inputs, dtypes, shapes, borrowed)
        if owned is None:  # anything unusual: the full path's checks
            owned = self._result_values(
                results, donation.OutputOwnership(inputs, {}, borrowed or ()))
        finished = _buffer.finished_output
        return (tuple([finished(v, bt, device, mem, n)
                       for v, bt, mem, n in zip(owned, buffer_types, memories, nbytes)]),
                device.handle, memory_handles)

    def _fast_plan(self):
        """What :meth:`execute_fast` needs of this executable, or False when
        its runs never take that path."""
        meta = self.meta
        if (len(self.devices) != 1 or self.span is not None or meta.spmd is not None
                or meta.host_callbacks is not None
                or meta.aliased_params or meta.num_replicas * meta.num_partitions != 1
                or BufferType.TOKEN in meta.output_buffer_types):
            return False
        device = self.devices[0]
        try:
            memories = self._output_memories(device)
        except PjrtError:
            return False  # the full path reports it
        return (len(meta.input_types), device, tuple(memories),
                tuple(m.handle for m in memories),
                tuple(meta.output_buffer_types), tuple(meta.output_dtypes),
                tuple(meta.output_shapes),
                tuple(_size(s, d) for s, d in zip(meta.output_shapes, meta.output_dtypes)),
                meta.program)

    def _execute_spanning(self, argument_lists, execute_device) -> Outputs:
        """A program whose devices span processes (distributed.execute):
        inline, without donation (the arguments are sent to the other
        processes; XLA treats donation as a hint)."""
        from . import distributed
        devices = self.devices
        positions = None
        if execute_device is not None:
            # One device's replica of a program with collectives: the other
            # processes launch theirs (PyTorch/XLA), with which it exchanges.
            if execute_device not in devices:
                raise invalid_argument(f"{execute_device} is not one of the devices of {self}")
            if len(devices) != 1:
                raise unimplemented(
                    f"{self} has {len(devices)} devices in this process; launching one of "
                    "them alone when the program has collectives across processes is "
                    "supported with one device per process only")
            devices = [execute_device]
            positions = list(self.span.local)
        try:
            values = distributed.execute(self, argument_lists, positions)
        except KeyboardInterrupt:
            return self._interrupted(devices)
        return self._output_buffers(devices, values)

    def _process(self, execute_device) -> tuple[int, int]:
        """(replica, partition) of a launch on one device of the executable;
        (0, 0) for a launch on all of them."""
        if execute_device is None or len(self.devices) == 1:
            return (0, 0)
        # One device of a replicated executable (PyTorch/XLA compiles its
        # non-SPMD programs for every device as replicas and launches
        # each on one): that device's replica runs alone.  Collectives
        # naming other replicas fail there (the interpreter's 1x1 grid)
        # instead of waiting for replicas that never come.
        meta = self.meta
        if meta.spmd is not None or meta.num_partitions > 1:
            raise unimplemented(
                f"{self} is partitioned over {meta.num_partitions} devices; "
                "launching it on a single device is not supported by stablehlo_ref")
        if execute_device not in self.devices:
            raise invalid_argument(
                f"{execute_device} is not one of the devices of {self} "
                f"({', '.join(str(d) for d in self.devices)})")
        return self.logical_ids[self.devices.index(execute_device)]

    # -- inline --------------------------------------------------------------

    def _execute_now(self, devices, argument_lists, donations, process) -> Outputs:
        try:
            values = self._run_gathered(devices, argument_lists, donations, process)
        except KeyboardInterrupt:
            # Ctrl-C: the outputs are error buffers and the interrupt is
            # re-raised in the caller once Execute returns (interrupt.py).
            return self._interrupted(devices)
        return self._output_buffers(devices, values)

    def _output_buffers(self, devices, values) -> Outputs:
        """Buffers holding each device's row of finished output values."""
        types = self.meta.output_buffer_types
        outputs = Outputs()
        for dev, row in zip(devices, values):
            memories = self._output_memories(dev)
            outputs.append([Buffer(v, bt, dev, mem) if bt != BufferType.TOKEN
                            else Buffer(v, bt, dev, shape=())
                            for v, bt, mem in zip(row, types, memories)])
        return outputs

    # -- both paths ----------------------------------------------------------

    def _run_gathered(self, devices, argument_lists, donations, process,
                      snapshots=None) -> list[list]:
        """One run, inline or on the worker (``snapshots`` as
        :func:`gather_inputs` takes them): gathers the inputs, runs the plan,
        consumes the donated buffers and returns each device's result values,
        owned (:meth:`_result_values`). Failures raise (PjrtError,
        KeyboardInterrupt, dispatch.Cancelled)."""
        inputs, ownerships = gather_inputs(self.meta.name, argument_lists, donations, snapshots)
        t0 = perf_counter_ns()
        try:
            results = self._run(devices, argument_lists, inputs, donations, ownerships, process)
        finally:
            if donations:
                # Donated buffers are consumed by the run (also a failed one,
                # which may have written them), as on XLA. On the worker they
                # were consumed at dispatch already (this is then a no-op).
                donation.consume(argument_lists, donations)
        self._ran(perf_counter_ns() - t0)
        del inputs
        return [self._result_values(res, own) for res, own in zip(results, ownerships)]

    def _ran(self, ns: int) -> None:
        if self._warmup:   # (WARMUP_RUNS; run_ns stays 0 until they are over)
            self._warmup -= 1
            if self._warmup < WARMUP_RUNS - 1:   # not the first
                self._warm_ns = ns if not self._warm_ns else min(self._warm_ns, ns)
                if ns >= WARMUP_LONG_NS:
                    self._warmup = 0
            if not self._warmup:
                self.run_ns = self._warm_ns
            return
        # Quick to come down, slow to go up: a run faster than the average
        # replaces it. A one-off slow run (one that generates a hot loop at
        # its second entry; a run the scheduler preempted) then keeps a
        # cheap program off its inline path for one call, not the five or
        # six the average took to decay below CHEAP_NS (expm: calls 2-7 went
        # through the worker, 20-30% slower each); a program whose runs are
        # slow stays slow.
        self.run_ns = ns if not self.run_ns or ns < self.run_ns \
            else (3 * self.run_ns + ns) >> 2

    def _run(self, devices, argument_lists, inputs, donations, ownerships, process):
        """Runs the plan on ``inputs`` (per device; ``donations`` and
        ``ownerships`` as :func:`donation.run_donating` takes them): the
        per-device result lists. A failure is a PjrtError naming the op;
        KeyboardInterrupt and dispatch.Cancelled pass through."""
        meta = self.meta
        shi = _interpreter()

        def run():
            if donations:
                return donation.run_donating(meta, argument_lists, inputs, donations,
                                             ownerships, process=process,
                                             num_replicas=meta.num_replicas,
                                             num_partitions=meta.num_partitions)
            if meta.spmd is not None:
                # A global-view sharded program: shards in, one global run,
                # shards out (in partition order = self.devices order).
                return meta.spmd.run(inputs)
            if len(devices) == 1 and process != (0, 0):
                return [meta.program.run(*inputs[0], process=process)]
            if len(devices) == 1:
                return [meta.program.run(*inputs[0])]
            # One interpreter process per (replica, partition), in the
            # replica-major order of self.devices / self.logical_ids.
            return meta.program.run_parallel(
                inputs, num_replicas=meta.num_replicas,
                num_partitions=meta.num_partitions)

        limit = interrupt.execute_timeout()
        try:
            if limit:
                return interrupt.run_limited(run, limit)
            if len(devices) == 1 and not donations and meta.spmd is None and process == (0, 0):
                return [meta.program.call(inputs[0])]  # the common case, without run()
            return run()
        except interrupt.ExecutionTimeout:
            raise PjrtError(ErrorCode.DEADLINE_EXCEEDED, _timeout_text(meta, limit, None)) \
                from None
        except shi.InterpreterError as e:
            raise self._failure(e, limit) from None

    def _failure(self, e, limit) -> PjrtError:
        """The PjrtError of a run that failed with InterpreterError ``e``
        (``limit``: the time limit it ran under)."""
        shi = _interpreter()
        meta = self.meta
        if isinstance(e.__cause__, interrupt.ExecutionTimeout):
            return PjrtError(ErrorCode.DEADLINE_EXCEEDED, _timeout_text(meta, limit, e))
        # A buffer that does not match its parameter is the caller's
        # mistake (INVALID_ARGUMENT, as XLA reports it); the rest is ours.
        code = (ErrorCode.INVALID_ARGUMENT if isinstance(e, shi.ArgumentError)
                else ErrorCode.INTERNAL)
        return PjrtError(code, f"stablehlo_ref execution of {meta.name} failed: {e}")

    # -- on the worker -------------------------------------------------------

    def _dispatch(self, devices, argument_lists, donations, process, launch_id) -> Outputs:
        meta = self.meta
        # Everything that can be checked before the run fails here, as inline.
        for args in argument_lists:
            for b in args:
                b.check_alive()
        if meta.spmd is None:
            for args in argument_lists:
                self._check_arguments(args)
        memories = [self._output_memories(dev) for dev in devices]
        try:
            dispatch.reserve()
        except KeyboardInterrupt:  # while waiting for room in the queue
            dispatch.cancel_all()
            return self._interrupted(devices)
        try:
            done = Completion()
            outputs = Outputs(completion=done)
            for dev, mems in zip(devices, memories):
                outputs.append([
                    Buffer(None, bt, dev, mem, shape=shape, ready=done,
                           nbytes=0 if dt is None else _size(shape, dt))
                    for bt, shape, dt, mem in zip(meta.output_buffer_types, meta.output_shapes,
                                                  meta.output_dtypes, mems)])
            # Zero-copy host buffers alias the caller's numpy arrays, which
            # the caller may change after the call: the run reads them as
            # they are now, as an inline run would.
            snapshots = {}
            for k, args in enumerate(argument_lists):
                for i, b in enumerate(args):
                    b.pin()
                    if b.borrowed and b.array is not None and b.type != BufferType.TOKEN:
                        snapshots[k, i] = np.array(b.array, copy=True)
            if donations:
                # Consumed at dispatch, as XLA does: deleted as the caller sees
                # it, their data kept for the run (pinned).
                donation.consume(argument_lists, donations)
            task = _ExecuteTask(self, devices, argument_lists, donations, process, outputs,
                                done, launch_id, snapshots)
        except BaseException:
            dispatch.unreserve()
            raise
        outputs.queued = dispatch.submit(task)
        return outputs

    def _check_arguments(self, args) -> None:
        """The interpreter's argument check (dtype and shape of each
        parameter), done at dispatch: data still being computed is checked
        through a stand-in of its type."""
        shi = _interpreter()
        meta = self.meta
        for i, b in enumerate(args):
            if b.type == BufferType.TOKEN:
                continue
            value = b.array
            if value is None:
                value = np.broadcast_to(np.zeros((), dtype_of(b.type)), b.shape)
            try:
                meta.program.check_argument(i, value)
            except shi.InterpreterError as e:
                raise invalid_argument(
                    f"stablehlo_ref execution of {meta.name} failed: {e}") from None

    # -- outputs -------------------------------------------------------------

    def _output_memories(self, device):
        """The memory each output goes to on ``device`` (checked once)."""
        memories = self._memories.get(device)
        if memories is None:
            meta = self.meta
            memories = []
            for i, kind in enumerate(meta.output_memory_kinds):
                memory = device.memory_of_kind(kind)
                if memory is None:
                    raise PjrtError(ErrorCode.INVALID_ARGUMENT,
                                    f"{meta.name}: result #{i} asks for memory kind "
                                    f"{kind!r}, which {device} does not have "
                                    "(stablehlo_ref has device, pinned_host, unpinned_host)")
                memories.append(memory)
            self._memories[device] = memories
        return memories

    def _interrupted(self, devices) -> Outputs:
        return Outputs([self._error_outputs(dev, ErrorCode.CANCELLED,
                                            _interrupted_text(self.meta))
                        for dev in devices], interrupted=True)

    def _error_outputs(self, device, code, message) -> list[Buffer]:
        meta = self.meta
        return [Buffer(None, bt, device, error=(code, message), shape=shape)
                for bt, shape in zip(meta.output_buffer_types, meta.output_shapes)]

    def _result_values(self, results, ownership) -> list:
        """The interpreter's results of one device, checked against the
        declared outputs and owned (copied unless donated memory)."""
        meta = self.meta
        if len(results) != meta.num_outputs:
            raise PjrtError(ErrorCode.INTERNAL,
                            f"{meta.name} produced {len(results)} result(s), "
                            f"expected {meta.num_outputs}")
        out = []
        for i, value in enumerate(results):
            bt = meta.output_buffer_types[i]
            if bt == BufferType.TOKEN:
                out.append(value)
                continue
            dtype = meta.output_dtypes[i]
            array = value if isinstance(value, np.ndarray) else np.asarray(value)
            if array.dtype != dtype or array.shape != meta.output_shapes[i]:
                raise PjrtError(
                    ErrorCode.INTERNAL,
                    f"{meta.name}: result #{i} is {array.dtype}{list(array.shape)}, "
                    f"expected {short_type(bt)}{list(meta.output_shapes[i])} "
                    "(interpreter bug)")
            if not array.flags.c_contiguous:
                array = np.ascontiguousarray(array)
            # A new buffer unless the program aliases a donated input to it.
            out.append(ownership.own(i, array))
        return out


def gather_inputs(name: str, argument_lists: Sequence[Sequence[Buffer]],
                  donations: Sequence[dict[int, int]] | None,
                  snapshots: dict[tuple[int, int], np.ndarray] | None = None,
                  ) -> tuple[list[list], list[donation.OutputOwnership]]:
    """The interpreter's inputs of one run (per device, per parameter) and
    the :class:`donation.OutputOwnership` of each device's results, decided
    from the inputs before the run (which may consume donated arrays).

    Inline (``snapshots`` is None): each buffer's data, waiting for a
    pending one; caller-owned memory (zero-copy host buffers) is noted so
    that no result aliases it. On the worker (``snapshots``: (device index,
    argument index) -> the copy of caller-owned memory taken at dispatch):
    the buffers were pinned and the donated ones consumed at dispatch; a
    donated buffer hands its array over (:meth:`Buffer.take_array`), so
    that the run holds the only reference and may update it in place or
    keep it for the aliased output (donation.run_donating), as inline."""
    inputs = []
    borrowed = []
    if snapshots is None:
        for args in argument_lists:
            row = []
            for b in args:
                # Buffer.live_array, inlined for the common case (this loop
                # runs on every call): ready, alive, no error.
                if b.ready is None and not b.deleted and b.error is None:
                    row.append(b.array)
                else:
                    row.append(b.live_array())
                if b.borrowed:
                    borrowed.append(b.array)
            inputs.append(row)
    else:
        for k, args in enumerate(argument_lists):
            donated = donations[k] if donations else ()
            row = []
            for i, b in enumerate(args):
                if (k, i) in snapshots:
                    row.append(snapshots[k, i])
                    continue
                ready = b.ready
                if ready is not None and not ready.done:
                    # Inputs come from work dispatched before this task,
                    # which the FIFO queue has finished.
                    raise PjrtError(ErrorCode.INTERNAL,
                                    f"stablehlo_ref: argument #{i} ({b}) of {name} is not "
                                    "ready when its run starts")
                if i in donated and b.error is None:
                    row.append(b.take_array())
                else:
                    row.append(b.pinned_data())
            inputs.append(row)
    ownerships = [donation.OutputOwnership(ins, donations[d] if donations else {}, borrowed)
                  for d, ins in enumerate(inputs)]
    return inputs, ownerships


_writable_c_contiguous = _shim.writable_c_contiguous


def _owned_results(results, inputs, dtypes, shapes, borrowed=None) -> list | None:
    """The results of an inline run without donation, as new buffers'
    memory, when each is what :meth:`LoadedExecutable._result_values` keeps
    as it is: a writeable, C-contiguous ndarray of the declared type and
    shape whose memory (its own, or its base's for a view) is no input's
    and no other result's. ``borrowed``: the caller-owned arrays among the
    inputs (zero-copy host buffers), or None. None otherwise (the caller
    then checks and copies as that method does)."""
    if len(results) != len(dtypes):
        return None
    seen = None
    for k, value in enumerate(results):
        if value.__class__ is not np.ndarray \
                or value.dtype != dtypes[k] or value.shape != shapes[k]:
            return None
        # (flags.writeable and flags.c_contiguous, in one C call: building
        # numpy's flags object cost about 1.5 us of an in-place call)
        if not _writable_c_contiguous(value):
            return None
        if value.base is None:
            for a in inputs:
                if _roots_at(a, value):
                    return None
            root = id(value)
        elif not _view_is_new(value, inputs, borrowed):
            return None
        else:
            root = donation.root_id(value)
        if len(results) > 1:  # (a single result, the common case, needs no set)
            if seen is None:
                seen = set()
            if root in seen:
                return None
            seen.add(root)
    return results


def _view_is_new(view, inputs, borrowed) -> bool:
    """Whether the memory of ``view`` (the object at the end of its chain
    of bases) is no input's and does not overlap the caller-owned memory
    of ``borrowed`` (None: none), decided as OutputOwnership.own decides
    (:func:`donation.root_id`, ``np.may_share_memory``)."""
    root_id = donation.root_id
    root = root_id(view)
    for a in inputs:
        if root_id(a) == root:
            return False
    if borrowed is not None:
        for b in borrowed:
            if np.may_share_memory(view, b):
                return False
    return True


def _roots_at(a, root) -> bool:
    """Whether ``root`` is on the chain of bases of the view ``a``."""
    while a is not root:
        if a.__class__ is not np.ndarray or a.base is None:
            return False
        a = a.base
    return True


def _fresh_result_refs() -> int:
    """getrefcount of a run's only result that the results list and one
    local hold, in execute_fast's shape: 3 on CPython 3.11-3.13 (a newer
    one may borrow references and count fewer)."""
    results = [np.empty(0)]
    r = results[0]
    return _getrefcount(r)


_FRESH_REFS = _fresh_result_refs()


# Execute's C fast path calls LoadedExecutable.execute_fast itself (no
# api._execute_fast frame, no handle lookup in Python); a trampoline built
# before it could lacks the hook and keeps calling api._execute_fast.
if hasattr(_shim, "set_executable_class"):
    _shim.set_executable_class(LoadedExecutable)


def _size(shape, dtype) -> int:
    n = dtype.itemsize
    for d in shape:
        n *= d
    return n


class _ExecuteTask(dispatch.Task):
    """One Execute on the worker: its argument buffers (pinned until it
    finishes), its pending outputs and their Completion."""

    __slots__ = ("exe", "argument_lists", "donations", "process", "outputs", "completion",
                 "snapshots", "values", "error")

    def __init__(self, exe, devices, argument_lists, donations, process, outputs, completion,
                 launch_id, snapshots):
        super().__init__(exe, devices, launch_id)
        self.exe = exe
        self.argument_lists = argument_lists
        self.donations = donations  # per device {parameter: output}, or None
        self.process = process
        self.outputs = outputs
        self.completion = completion
        self.snapshots = snapshots  # (device index, argument index) -> data read at dispatch
        self.values = None
        self.error = None

    def work(self):
        try:
            self.values = self.exe._run_gathered(self.devices, self.argument_lists,
                                                 self.donations, self.process, self.snapshots)
            self.snapshots = None
        except PjrtError as e:
            self.error = (e.pjrt_code, str(e))
        except KeyboardInterrupt:  # raised by a host callback
            self.error = (ErrorCode.CANCELLED, _interrupted_text(self.exe.meta))

    def fail(self, code, message):
        self.values = None
        self.error = (int(code), message)

    def settle(self):
        self.exe.awaited.observe(self, self.completion)
        error = self.error
        if error is None and self.values is None:
            error = self.error = (ErrorCode.INTERNAL, f"stablehlo_ref execution of "
                                  f"{self.exe.meta.name} produced no results")
        for k, bufs in enumerate(self.outputs):
            if error is None:
                for buf, value in zip(bufs, self.values[k]):
                    buf.fulfil(value)
            else:
                for buf in bufs:
                    buf.fulfil(error=error)
        self.values = None
        for args in self.argument_lists:
            for b in args:
                b.unpin()

    def finish(self):
        self.completion.set(self.error)

    def describe_outcome(self) -> dict:
        """For the trace line of the finished run."""
        if self.error is not None:
            return {"error": self.error[1]}
        return {"outputs": [[f"{b} = {preview_value(v)}" for b, v in zip(bufs, values)]
                            for bufs, values in zip(self.outputs, self.values or ())]}
