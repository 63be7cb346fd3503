"""Races between Ctrl-C, the execute time limit and the plugin's worker,
made deterministic: each scenario forces the interleaving that a loaded
machine produces only now and then. Each runs in its own subprocess (signal
handlers, trace functions and CPython's eval breaker are process-wide, and
the failures they guard against are hangs)."""

import os
import subprocess
import sys

import pytest
from testkit import as_in_a_terminal


def _run(script):
    env = dict(os.environ)
    env.pop("STABLEHLO_REF_NUM_DEVICES", None)
    try:
        proc = subprocess.run([sys.executable, "-c", as_in_a_terminal(script)], env=env, capture_output=True,
                              text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the scenario hung")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout.splitlines()


TRACED_CALL = r"""
def g():
    return 1
# A trace function (the Ctrl-C re-arm, a debugger, coverage) and a call:
# CPython 3.11 spins forever at the call's RESUME when the eval breaker was
# left set, which withdrawing an asynchronous exception
# (SetAsyncExc(tid, NULL)) does.
sys.settrace(lambda frame, event, arg: None)
g()
sys.settrace(None)
print("traced call returned", flush=True)
"""

TIME_LIMIT = r"""
import sys, time
from stablehlo_pjrt import interrupt

def busy():
    t = time.perf_counter()
    while time.perf_counter() - t < 2:
        pass
    return "ran to its end"

try:
    print(interrupt.run_limited(busy, 0.05), flush=True)
except interrupt.ExecutionTimeout:
    print("ExecutionTimeout", flush=True)
print("within the limit", interrupt.run_limited(lambda: 7, 5.0), flush=True)
""" + TRACED_CALL


def test_a_time_limit_leaves_no_pending_state():
    assert _run(TIME_LIMIT) == ["ExecutionTimeout", "within the limit 7",
                                "traced call returned"]


CANCELLED_ON_THE_WORKER = r"""
import sys, threading, time
from stablehlo_pjrt import dispatch
from stablehlo_pjrt.event import Completion

class Busy(dispatch.Task):
    __slots__ = ("started", "done", "outcome")
    def __init__(self):
        super().__init__("busy")
        self.started = threading.Event()
        self.done = Completion()
        self.outcome = "ran to its end"
    def work(self):
        self.started.set()
        t = time.perf_counter()
        while time.perf_counter() - t < 5:
            pass
    def fail(self, code, message):
        self.outcome = "cancelled"
    def finish(self):
        self.done.set(None)

dispatch.reserve()
task = Busy()
dispatch.submit(task)
task.started.wait()
dispatch.cancel_all()   # Ctrl-C: Cancelled raised in the worker
task.done.wait()
print(task.outcome, flush=True)
""" + TRACED_CALL


def test_a_cancelled_run_leaves_no_pending_state():
    assert _run(CANCELLED_ON_THE_WORKER) == ["cancelled", "traced call returned"]


SIGINT_UNDER_THE_QUEUE_LOCK = r"""
import _thread
from stablehlo_pjrt import dispatch
dispatch._install_sigint()   # the plugin's SIGINT handler (first async dispatch)
# Ctrl-C while the main thread holds the queue's lock (reserve, submit): the
# handler cancels the queue, which takes that lock again.
try:
    with dispatch._worker.lock:
        _thread.interrupt_main()
        for _ in range(1000):
            pass
    print("no KeyboardInterrupt", flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
"""


def test_ctrl_c_while_the_main_thread_holds_the_queue_lock():
    assert _run(SIGINT_UNDER_THE_QUEUE_LOCK) == ["KeyboardInterrupt"]


INTERRUPTED_WORKER_START = r"""
import threading, time
from stablehlo_pjrt import dispatch
from stablehlo_pjrt.event import Completion
w = dispatch._worker
# Thread.start interrupted by Ctrl-C after it launched the thread: reserve()
# starts the worker again; one thread serves the queue, the extra one exits.
w.start()
w.start()
time.sleep(0.2)
workers = [t for t in threading.enumerate() if t.name == "stablehlo_ref-worker"]
print("workers", len(workers), workers[0] is w.thread, flush=True)

class Probe(dispatch.Task):
    __slots__ = ("done", "ran_on")
    def __init__(self):
        super().__init__("probe")
        self.done = Completion()
    def work(self):
        self.ran_on = threading.get_ident()
    def fail(self, code, message):
        pass
    def finish(self):
        self.done.set(None)

dispatch.reserve()
p = Probe()
dispatch.submit(p)
p.done.wait()
print("ran on the worker", p.ran_on == w.ident, flush=True)
"""


def test_an_interrupted_worker_start_leaves_one_worker():
    assert _run(INTERRUPTED_WORKER_START) == ["workers 1 True", "ran on the worker True"]
