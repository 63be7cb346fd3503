"""Asynchronous execution: a worker thread runs programs in dispatch order.

PJRT's Execute is asynchronous: it returns output buffers at once, and their
ready events (and the per-device completion events) complete when the
program has run. This module is the plugin's device queue:

* One worker thread per process takes tasks (a program to run, a copy of a
  buffer that is still being computed) from one FIFO queue, so everything
  dispatched runs in dispatch order, on every device; a task's inputs were
  produced by tasks dispatched before it, so they are ready when it starts.
* At most :data:`MAX_IN_FLIGHT` tasks wait or run at once (XLA CPU's default
  ``max_inflight_computations_per_device`` is 32 too); Execute waits for room
  beyond that, so a loop that dispatches faster than the programs run does
  not pile up inputs without bound.
* Ctrl-C: jaxlib waits for events in slices and checks for signals in
  between (``BlockUntilReadyWithCancel``), so KeyboardInterrupt reaches the
  user's thread while a program runs here. To stop that program too, the
  first asynchronous dispatch from the main thread replaces Python's default
  SIGINT handler (only if it is still ``signal.default_int_handler``) with
  :func:`_on_sigint`: it cancels every queued and running task, then raises
  KeyboardInterrupt exactly as the default handler does. The running program
  stops at its next op (an exception raised in the worker, as the execute
  time limit does); its outputs and the queued programs' outputs fail with
  CANCELLED.
* Reentrancy: a host callback runs on the worker; if it calls back into JAX
  on stablehlo_ref, that program runs inline on the worker (XLA CPU does the
  same inside host callbacks), and waiting for something queued behind the
  current program is refused instead of hanging.

Modes (``STABLEHLO_REF_ASYNC`` or :func:`set_mode`):

* ``auto`` (default): a program runs on the worker unless it is cheap and
  nothing is queued: an executable whose runs took less than
  :data:`CHEAP_NS` on average runs inline in the caller's thread, where the
  thread handoff would cost more than the run (XLA CPU likewise runs
  programs below ~1000 flops inline). So does, with nothing queued, one
  whose callers wait for its results right after the call (:class:`Awaited`:
  the worker would overlap nothing with the run). Programs with host
  callbacks run inline too, as on XLA CPU (which runs them synchronously).
* ``1`` / ``async``: every program goes through the worker (for teaching and
  for testing the asynchronous path).
* ``0`` / ``sync``: every program runs inside Execute, in the caller's thread
  (the events it returns are born ready): the plugin as it was before, for
  debugging.
"""

from __future__ import annotations

import _thread
import collections
import os
import threading
import time

from . import config, interrupt, shutdown, trace
from ._capi import ErrorCode
from .error import PjrtError
from .event import Completion

SYNC, ASYNC, AUTO = "sync", "async", "auto"
MAX_IN_FLIGHT = 32
# Programs whose last run took less than this run inline in auto mode: a
# round trip through the worker costs tens of microseconds of thread handoff
# and GIL switching, and the GIL leaves little to overlap with a short run
# (docs/runtime.md has the measurements).
CHEAP_NS = 2_000_000
# A program whose caller asked to wait for its results less than this after
# dispatching it (block_until_ready, np.asarray right after the call) got
# less host work overlapped with its run than a round trip through the
# worker costs (thread wake-ups, GIL handoffs, the copy of zero-copy inputs:
# 0.4 ms and more for a 4 MB input, docs/runtime.md): auto mode runs its
# next calls inline (Awaited).
AWAITED_NS = 500_000
# Inline calls granted per confirming run on the worker: doubles from the
# first to the last while the caller keeps waiting at once, so that a caller
# that starts overlapping host work is noticed within a bounded number of
# calls at a bounded share of handoffs.
AWAITED_RUNS = (8, 256)

_mode: list = []


def mode() -> str:
    if not _mode:
        _mode.append(config.ASYNC.value())
    return _mode[0]


def set_mode(value: str) -> None:
    """``"auto"``, ``"async"`` or ``"sync"`` for every later Execute."""
    try:
        name = config.async_mode(str(value))
    except ValueError:
        raise ValueError(f"execution mode must be 'auto', 'async' or 'sync', got {value!r}") \
            from None
    _mode[:] = [name]


class Awaited:
    """Whether an executable's callers wait for its results at once (one per
    executable, for auto mode). A run on the worker whose caller asked to
    wait within :data:`AWAITED_NS` of the dispatch (:meth:`Completion.asked`),
    with nothing else in flight, grants the next calls inline runs, however long the program: the caller
    blocks anyway, and inline skips the handoffs and the input copies. The
    grant runs out after a number of calls (8, doubling per confirmation up
    to 256); the next call goes to the worker again and is looked at
    afresh, so a caller that starts overlapping host work gets the worker
    back."""

    __slots__ = ("credit", "grant")

    def __init__(self):
        self.credit = 0   # inline calls left
        self.grant = 0    # the last grant

    def observe(self, task: Task, completion: Completion) -> None:
        """After ``task``'s run on the worker (before its waiters wake). Only
        a task queued alone counts: one queued behind others is part of a
        pipeline (the caller dispatched it while earlier work ran), which
        the worker serves and an inline run would stall."""
        asked = completion.asked_ns
        if asked and task.depth == 1 and asked - task.enqueued_ns < AWAITED_NS:
            first, last = AWAITED_RUNS
            self.grant = self.credit = min(max(2 * self.grant, first), last)
        else:
            self.grant = self.credit = 0


class Cancelled(BaseException):
    """Raised inside a program running on the worker when it is cancelled
    (Ctrl-C). A BaseException so that no ``except Exception`` in a host
    callback swallows it."""


class Task:
    """A unit of work for the worker. Subclasses implement :meth:`work`
    (runs on the worker, fills the outputs, records its own errors) and
    :meth:`fail` (completes the outputs with an error without running)."""

    __slots__ = ("cancelled", "fired", "enqueued_ns", "depth", "launch_id", "devices", "label")

    def __init__(self, label, devices=(), launch_id=0):
        self.cancelled = None     # (code, message) once cancelled or poisoned
        self.fired = False        # Cancelled was raised in the worker for it
        self.enqueued_ns = 0
        self.depth = 0            # tasks in flight when it was queued, itself included
        self.launch_id = launch_id
        self.devices = devices
        self.label = label

    def work(self) -> None:
        raise NotImplementedError

    def fail(self, code: int, message: str) -> None:
        raise NotImplementedError

    def settle(self) -> None:
        """Hands the outputs their data or error and lets go of the inputs
        (after work or fail), before :meth:`finish` wakes the waiters."""

    def finish(self) -> None:
        """Completes the task's events (after :meth:`settle`): the waiting
        caller may run on from here."""
        raise NotImplementedError


class _Worker:
    def __init__(self):
        # Reentrant: the SIGINT handler (_on_sigint -> cancel_all) runs in
        # the main thread between any two bytecodes, also while that
        # thread holds this lock (reserve, submit): a plain Lock deadlocks.
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)   # room in the queue / drained
        self.queue: collections.deque = collections.deque()
        self.items = threading.Semaphore(0)
        self.pending = 0          # queued + running
        self.running: Task | None = None
        self.thread: threading.Thread | None = None
        self.ident = None
        self.stopped = False

    def start(self):
        # Ctrl-C can land inside Thread.start, before or after it launched
        # the thread: the thread itself takes the worker's place (loop), so
        # that an interrupted start is simply retried by the next reserve()
        # and an extra thread, if one was launched, exits at once.
        threading.Thread(target=self.loop, name="stablehlo_ref-worker", daemon=True).start()

    def loop(self):
        with self.lock:
            if self.thread is not None:
                return  # another start() launched the worker first
            self.thread = threading.current_thread()
            self.ident = threading.get_ident()
        while True:
            self.items.acquire()
            with self.lock:
                task = self.queue.popleft()
            if task is None:
                return
            self.run_one(task)

    def run_one(self, task: Task):
        started = time.perf_counter_ns()
        with self.lock:
            cancelled = task.cancelled
            if cancelled is None:
                self.running = task
        if trace.ENABLED:
            trace.emit("run started", task.label,
                       {"ts_ns": started, "thread": threading.get_ident(),
                        "waited_us": (started - task.enqueued_ns) // 1000})
        if cancelled is not None:
            _safely(task.fail, *cancelled)
        else:
            try:
                task.work()
            except BaseException as e:  # noqa: BLE001 - Cancelled, or a bug: never lost
                if not isinstance(e, Cancelled):
                    _safely(task.fail, ErrorCode.INTERNAL,
                            f"stablehlo_ref: the worker failed: {type(e).__name__}: {e}")
            # Nothing may be raised into this thread for the task after this:
            # a Cancelled fired but not yet delivered is taken here. It can
            # still land while we get here; then the cleanup runs again.
            while True:
                try:
                    self.end_running(task)
                    break
                except Cancelled:
                    continue
            if task.cancelled is not None:
                _safely(task.fail, *task.cancelled)
        if trace.ENABLED:
            trace.emit("run finished", task.label,
                       {"ts_ns": started, "dur_ns": time.perf_counter_ns() - started,
                        "thread": threading.get_ident(), **_outcome(task)})
        _safely(task.settle)
        # The task leaves the queue before its waiters wake: a caller woken
        # by finish() that calls again at once must find the queue empty
        # (auto mode runs a cheap program inline only then), not this task,
        # whose worker may wait for the GIL until that caller blocks again.
        with self.lock:
            self.pending -= 1
            self.changed.notify_all()
        _safely(task.finish)

    def end_running(self, task):
        with self.lock:
            self.running = None
            fired = task.fired
        if fired:
            # Taken here if it has not landed yet (the caller loops on
            # Cancelled); never withdrawn (interrupt.set_async_exc).
            interrupt.raise_pending()

    def reserve(self):
        with self.lock:
            while self.pending >= MAX_IN_FLIGHT and not self.stopped:
                self.changed.wait()   # interruptible: KeyboardInterrupt reaches the caller
            if self.thread is None:
                self.start()
            self.pending += 1

    def unreserve(self):
        with self.lock:
            self.pending -= 1
            self.changed.notify_all()

    def submit(self, task: Task) -> int:
        with self.lock:
            task.enqueued_ns = time.perf_counter_ns()
            task.depth = depth = self.pending
            self.queue.append(task)
        self.items.release()
        return depth

    def cancel_all(self, code, message):
        with self.lock:
            for task in self.queue:
                if task is not None and task.cancelled is None:
                    task.cancelled = (code, message)
            task = self.running
            if task is not None and task.cancelled is None:
                task.cancelled = (code, message)
                task.fired = True
                interrupt.set_async_exc(self.ident, Cancelled)

    def poison(self, device, launch_id, code, message) -> bool:
        with self.lock:
            for task in self.queue:
                if task is not None and task.cancelled is None \
                        and task.launch_id == launch_id and device in task.devices:
                    task.cancelled = (code, message)
                    return True
        return False

    def drain(self):
        with self.lock:
            while self.pending:
                self.changed.wait()

    def stop(self, timeout=None):
        with self.lock:
            self.stopped = True
            if self.thread is None:
                return
            self.queue.append(None)
        self.items.release()
        self.thread.join(timeout)


def _safely(fn, *args):
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - a failing completion must not kill the worker
        import traceback
        traceback.print_exc()


def _outcome(task) -> dict:
    describe = getattr(task, "describe_outcome", None)
    try:
        return describe() if describe is not None else {}
    except Exception:  # noqa: BLE001 - tracing never changes behaviour
        return {}


_worker = _Worker()
_at_exit_registered = []


def _reset_after_fork():
    # The child has no worker thread: start afresh (tasks of the parent are
    # not the child's to run).
    global _worker
    _worker = _Worker()
    _sigint[:] = []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def on_worker() -> bool:
    """Whether the calling thread is the worker (a host callback calling back
    into the plugin): it must not wait for queued work."""
    return _worker.ident is not None and _thread.get_ident() == _worker.ident


def run_inline(run_ns: int, callbacks: bool = False, traced: bool = False,
               awaited: Awaited | None = None) -> bool:
    """Whether a program runs in the caller's thread rather than on the
    worker. ``run_ns``: its average run time; ``callbacks``: it has host
    callbacks (inline unless the mode is ``async``); ``traced``: an op
    tracer is active in this thread (always inline: the tracer's scope may
    end before a queued run starts); ``awaited``: whether its callers wait
    for its results at once (auto mode runs it inline while that holds;
    this call uses up one of its inline calls). An inline run first waits
    for the work queued before it (KeyboardInterrupt ends the wait)."""
    m = _mode[0] if _mode else mode()
    if on_worker():
        return True   # inside a host callback of the running program
    if m == ASYNC and not traced and not _worker.stopped:
        return False
    if m == SYNC or traced or callbacks or _worker.stopped:
        if _worker.pending:
            _worker.drain()
        return True
    if _worker.pending:
        return False
    if run_ns < CHEAP_NS:
        return True
    if awaited is not None and awaited.credit > 0:
        awaited.credit -= 1
        return True
    return False


def fast_path_open(run_ns: int) -> bool:
    """Whether Execute's fast path may run a program (no host callbacks, no
    op tracer) inline now, in one call (it asks on every Execute): nothing
    is queued (else the caller asks :func:`run_inline`, which waits for
    it), no time limit is set (a limited run takes the full path, which
    watches it), and the mode runs it inline."""
    if _worker.pending:
        return False
    t = interrupt._timeout
    if not t or t[0]:
        if interrupt.execute_timeout():
            return False
    m = _mode[0] if _mode else mode()
    if m == AUTO:
        return run_ns < CHEAP_NS
    return m == SYNC or _worker.stopped


def reserve() -> None:
    """Takes a place in the queue for a task about to be submitted; waits
    while MAX_IN_FLIGHT tasks are in flight (KeyboardInterrupt in the main
    thread ends the wait). Nothing may fail between this and submit() or
    unreserve()."""
    if not _at_exit_registered:
        _at_exit_registered.append(True)
        shutdown.add_step("plugin queue", shutdown.DISPATCH, _shutdown)
    _install_sigint()
    _worker.reserve()


def unreserve() -> None:
    _worker.unreserve()


def submit(task: Task) -> int:
    """Queues ``task`` (after reserve()); returns the number of tasks queued
    or running, this one included."""
    return _worker.submit(task)


def cancel_all(message: str = "stablehlo_ref execution was interrupted (KeyboardInterrupt)") -> None:
    """Cancels every queued task and the running one (Ctrl-C)."""
    _worker.cancel_all(ErrorCode.CANCELLED, message)


def poison(device: object, launch_id: int, code: int, message: str) -> bool:
    """PJRT_Device_PoisonExecution: fails the earliest queued (not started)
    program with ``launch_id`` on ``device``; False if there is none."""
    return _worker.poison(device, launch_id, code, message)


def drain() -> None:
    """Waits until everything dispatched so far has finished."""
    if not on_worker():
        _worker.drain()


def wait(completion: Completion, what: str) -> None:
    """Waits for ``completion`` in the calling thread. On the worker, work
    that is not done is queued behind the task running now, so waiting would
    never end: that is refused. Ctrl-C while waiting cancels the queue and
    surfaces as CANCELLED (and KeyboardInterrupt in the caller's frame)."""
    if completion.done:
        return
    if on_worker():
        raise PjrtError(
            ErrorCode.FAILED_PRECONDITION,
            f"{what} is computed by a program queued after the one running now; a host "
            "callback cannot wait for it (this would deadlock)")
    completion.asked()
    try:
        completion.wait()
    except KeyboardInterrupt:
        cancel_all()
        from .interrupt import rearm_interrupt
        rearm_interrupt()
        raise PjrtError(ErrorCode.CANCELLED,
                        f"waiting for {what} was interrupted (KeyboardInterrupt)") from None


def _shutdown():
    # Interpreter exit: let dispatched work finish (its effects, e.g. prints,
    # happen as on XLA), then stop the worker while Python still runs.
    try:
        _worker.drain()
    except KeyboardInterrupt:
        cancel_all()
    _worker.stop(timeout=5.0)


# ----------------------------------------------------------------------------
# Ctrl-C

_sigint: list = []


def _on_sigint(signum, frame):
    cancel_all()
    import signal
    signal.default_int_handler(signum, frame)


def _install_sigint():
    if _sigint or _thread.get_ident() != threading.main_thread().ident:
        return
    _sigint.append(True)
    import signal
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_sigint)
    except (ValueError, OSError):  # not the main interpreter, or no signals
        pass
