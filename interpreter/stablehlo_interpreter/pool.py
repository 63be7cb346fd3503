"""The helper threads numpy work is shared with (fused chains, large reductions).

numpy releases the GIL inside its ufunc loops, so independent chunks of
array work run on several cores from Python threads. :func:`run_chunks`
runs ``run(lo, hi)`` over a list of chunk bounds in the calling thread and
``thread_count() - 1`` daemon helpers, which take chunks from a shared
counter: a helper that is not scheduled costs nothing, the calling thread
takes its chunks. Only one caller at a time shares its chunks (a
non-blocking lock); others (the device threads of a parallel run, concurrent
executions) run theirs alone, as does every caller while the machine is
busy (:func:`busy`). Chunk bounds never depend on the thread count, so
results do not either.

``STABLEHLO_REF_THREADS=N`` sets the number of threads (read at each call;
default: the usable cores, at most MAX_DEFAULT_THREADS; 1: no helpers).
"""

import itertools
import os
import threading

import numpy as np

from . import config as _config

MAX_DEFAULT_THREADS = 4

_default_threads = []


def thread_count():
    """Threads chunked work may use (``STABLEHLO_REF_THREADS``, read at each
    call; default: the usable cores, at most MAX_DEFAULT_THREADS)."""
    v = _config.THREADS.value()
    if v is not None:
        return v
    if not _default_threads:
        try:
            n = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            n = os.cpu_count() or 1
        _default_threads.append(max(1, min(n, MAX_DEFAULT_THREADS)))
    return _default_threads[0]


_POOL_LOCK = threading.Lock()   # one caller at a time shares its chunks
_pool = None


class _Pool:
    """Daemon helper threads taking jobs from a queue."""

    def __init__(self):
        import queue
        self.jobs = queue.SimpleQueue()
        self.threads = []

    def ensure(self, n):
        while len(self.threads) < n:
            t = threading.Thread(target=self._work, daemon=True,
                                 name=f"stablehlo-fusion-{len(self.threads)}")
            t.start()
            self.threads.append(t)

    def _work(self):
        while True:
            job = self.jobs.get()
            with np.errstate(all="ignore"):
                job()


def _reset_pool():
    global _pool, _POOL_LOCK
    _pool = None
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pool)


def busy(threads):
    """True when the machine has no core to spare for ``threads`` threads of
    ours: the 1-minute load average (which counts our own running threads)
    is above ``threads + 0.5``. A helper that the system preempts in the
    middle of a chunk keeps the caller waiting for a whole time slice; on a
    loaded machine that costs more than the helper gains."""
    try:
        return os.getloadavg()[0] > threads + 0.5
    except OSError:
        return False


def run_chunks(run, bounds, threads=None):
    """``run(lo, hi)`` for each of ``bounds``: on ``threads`` threads (default
    thread_count()) when the helpers are free and the machine is not busy,
    else in this thread. For independent chunks of numpy work (fused chains,
    large reductions)."""
    if threads is None:
        threads = thread_count()
    if threads > 1 and len(bounds) > 1 and not busy(threads) and _POOL_LOCK.acquire(False):
        try:
            _run_shared(run, bounds, threads)
        finally:
            _POOL_LOCK.release()
    else:
        for lo, hi in bounds:
            run(lo, hi)


def _run_shared(run, bounds, threads):
    """Run ``run(lo, hi)`` over ``bounds`` in this thread and ``threads - 1``
    helpers. Chunks are taken from a shared counter, so a helper that is not
    scheduled (a busy machine) costs nothing: this thread takes its chunks.
    Returns when every chunk is done; the first error is raised here."""
    global _pool
    if _pool is None:
        _pool = _Pool()
    _pool.ensure(threads - 1)
    n = len(bounds)
    counter = itertools.count()
    cond = threading.Condition()
    state = {"done": 0, "error": None, "stop": False}

    def work():
        while True:
            c = next(counter)
            if c >= n:
                return
            err = None
            if not state["stop"]:
                try:
                    run(*bounds[c])
                except BaseException as e:  # noqa: BLE001 - handed to the caller
                    err = e
            with cond:
                if err is not None and state["error"] is None:
                    state["error"] = err
                    state["stop"] = True
                state["done"] += 1
                if state["done"] == n:
                    cond.notify_all()

    for _ in range(threads - 1):
        _pool.jobs.put(work)
    try:
        work()
    except BaseException:
        state["stop"] = True   # interrupted: helpers skip what is left
        raise
    with cond:
        while state["done"] < n:
            cond.wait()
    if state["error"] is not None:
        raise state["error"]
