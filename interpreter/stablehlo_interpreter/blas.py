"""BLAS threading for small matrix products.

numpy's OpenBLAS splits every product above a tiny size over all cores. On a
busy machine (other processes on the cores) its threads wait for each other
for whole scheduler time slices: a 256x256 f32 matmul that takes 0.2 ms on an
idle 2-core machine takes ~16 ms when one other process runs. Products below
``SMALL_GEMM_MACS`` multiply-adds therefore run with one BLAS thread; larger
ones keep numpy's setting, where threads pay off even under load.

The thread count is switched through OpenBLAS's own
``openblas_set_num_threads`` and restored after the call: for numpy's
products in numpy's OpenBLAS only (scipy's costs 7 us to switch and back,
half a scan step of a small RNN cell), for scipy's LAPACK/BLAS wrappers in
every OpenBLAS loaded (numpy's and, once scipy.linalg is imported, scipy's);
a no-op if there is none. Products below ``UNTHREADED_MACS`` multiply-adds
(where OpenBLAS itself uses one thread: its gemv threads from 9216, its
gemm from 262144) are not switched at all, nor are products inside a
``single_threaded()`` scope (a generated loop of small products holds one
thread for the whole loop). Only speed depends on it.
``STABLEHLO_REF_SMALL_GEMM_MACS=0`` turns this off.

dot_general's products from ``SHARED_GEMM_MACS`` up to SMALL_GEMM_MACS (a
512x512 matmul: XLA CPU runs it on two threads) are cut into a fixed number
of row blocks that the interpreter's helper threads share
(``shared_product``; pool.run_chunks), each block on one BLAS thread: the
threads of pool.py block instead of spinning and a helper that is not
scheduled leaves its blocks to the caller. A product is shared only while a
core is idle at its start (``core_free``; pool.busy too), else its blocks
run in the calling thread. The blocks depend on the shapes alone, so the
result does not depend on the thread count.
"""

import ctypes
import os
import os.path
import threading

import numpy as np

from . import config as _config
from . import pool as _pool

SMALL_GEMM_MACS = _config.SMALL_GEMM_MACS.value()   # a module constant: kernels test it per call

UNTHREADED_MACS = 9216

# Products of at least this many multiply-adds (and below SMALL_GEMM_MACS)
# are shared between the helper threads (shared_product): about 0.1 ms of
# sgemm on one core, where handing half to a helper (~10-20 us) pays off.
SHARED_GEMM_MACS = 1 << 23
# Row blocks of a shared product: a fixed count (never the thread count, so
# that results do not depend on it), of at least _SHARED_MIN_ROWS rows.
_SHARED_BLOCKS = 4
_SHARED_MIN_ROWS = 32

_PREFIXES = ("scipy_openblas_", "openblas_")
_SUFFIXES = ("64_", "")
_get = _set = None
_libs = []          # (get, set) of every OpenBLAS found
_numpy_libs = []    # those of numpy's own OpenBLAS (all of _libs if not told apart)
_found_paths = None
_lapack_found = False
_pin_lock = threading.Lock()
_pinned = 0         # single_threaded() scopes open
_pin_done = False   # numpy's OpenBLAS switched to one thread for them (by a product)
_pin_saved = []     # (set, threads) to restore when the last scope closes


def _find():
    """Find the OpenBLAS libraries loaded (again when a new one was loaded)."""
    global _get, _set, _found_paths
    if SMALL_GEMM_MACS <= 0:
        _found_paths = frozenset()
        return
    try:
        with open("/proc/self/maps") as f:
            paths = frozenset(line.split()[-1] for line in f
                              if "openblas" in line.lower() and ".so" in line)
    except OSError:
        paths = frozenset()
    if paths == _found_paths:
        return
    _found_paths = paths
    _libs.clear()
    _numpy_libs.clear()
    import numpy
    numpy_dir = os.path.dirname(os.path.realpath(numpy.__file__))
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        done = False
        for pre in _PREFIXES:
            for suf in _SUFFIXES:
                g = getattr(lib, f"{pre}get_num_threads{suf}", None)
                s = getattr(lib, f"{pre}set_num_threads{suf}", None)
                if g is not None and s is not None and not done:
                    g.restype = ctypes.c_int
                    g.argtypes = []
                    s.restype = None
                    s.argtypes = [ctypes.c_int]
                    _libs.append((g, s))
                    # numpy's wheel keeps its OpenBLAS in numpy.libs beside
                    # the package (numpy/.libs on some builds).
                    if os.path.realpath(path).startswith(numpy_dir):
                        _numpy_libs.append((g, s))
                    done = True
    if not _numpy_libs:
        _numpy_libs.extend(_libs)
    _get, _set = _libs[0] if _libs else (None, None)


def small_product(fn, *args, macs=None, libs=None):
    """``fn(*args)`` with one BLAS thread (for products below SMALL_GEMM_MACS).

    ``fn`` is numpy's (np.matmul) unless ``libs`` says otherwise: only
    numpy's OpenBLAS is switched; ``macs`` below UNTHREADED_MACS: nothing is."""
    if macs is not None and macs < UNTHREADED_MACS:
        return fn(*args)
    if _pinned and libs is None:
        if not _pin_done:
            _pin()
        return fn(*args)
    if _found_paths is None:
        _find()
    libs = _numpy_libs if libs is None else libs
    if not libs:
        return fn(*args)
    saved = [(s, g()) for g, s in libs]
    for s, n in saved:
        if n > 1:
            s(1)
    try:
        return fn(*args)
    finally:
        for s, n in saved:
            if n > 1:
                s(n)


def _pin():
    """The first product inside single_threaded() scopes: one thread for
    numpy's OpenBLAS until the last scope closes."""
    global _pin_done
    with _pin_lock:
        if _pinned and not _pin_done:
            if _found_paths is None:
                _find()
            _pin_saved[:] = [(s, g()) for g, s in _numpy_libs]
            for s, n in _pin_saved:
                if n > 1:
                    s(1)
            _pin_done = True


class single_threaded:
    """Context: numpy's OpenBLAS at one thread for the whole scope, so that
    the small_product calls inside it switch nothing (a generated loop
    whose products are all small: two thread switches per product and
    step cost more than a 16x128x128 product itself). The first product
    switches, the last scope to close restores (a scope without products
    costs a counter); scopes nest and may overlap between threads."""

    __slots__ = ()

    def __enter__(self):
        global _pinned
        with _pin_lock:
            _pinned += 1
        return self

    def __exit__(self, *exc):
        global _pinned, _pin_done
        with _pin_lock:
            _pinned -= 1
            if _pinned == 0 and _pin_done:
                for s, n in _pin_saved:
                    if n > 1:
                        s(n)
                _pin_saved.clear()
                _pin_done = False
        return False


def small_lapack(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` (a scipy LAPACK/BLAS wrapper) with one thread.

    The linalg custom calls factor small matrices (LAPACK blocks of 32-64
    columns), where threads only wait for each other on a busy machine. The
    libraries are looked up again on the first call: scipy's OpenBLAS is
    loaded only when scipy.linalg is imported, which the caller has done.
    """
    global _lapack_found
    if not _lapack_found:
        _find()
        _lapack_found = True
    return small_product(lambda: fn(*args, **kwargs), libs=_libs)


_loadavg_fd = []


def core_free():
    """Whether a core is idle now: the kernel's count of runnable tasks
    (/proc/loadavg's 4th field, which counts this thread) is below the
    usable cores. The 1-minute load average (pool.busy) lags: a product
    shared while another process holds the second core of two waits for
    its helper's turn on the same core (measured 10-20% slower than one
    thread, up to a whole time slice). True where there is no /proc."""
    try:
        if not _loadavg_fd:
            _loadavg_fd.append(os.open("/proc/loadavg", os.O_RDONLY))
        running = int(os.pread(_loadavg_fd[0], 64, 0).split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return True
    return running < _pool.thread_count()


def shared_product(a, b, macs):
    """``np.matmul(a, b)`` (floats, ``a`` and ``b`` at least 2-d) of ``macs``
    multiply-adds below SMALL_GEMM_MACS, as row blocks shared with the pool's
    helper threads (one BLAS thread each) from SHARED_GEMM_MACS; a smaller
    product runs on one BLAS thread (small_product).

    The blocks split the rows of ``a`` (its axis -2), or the leading batch
    axis when the rows are too few; each output element is the same dot
    product of the BLAS kernel as in one call."""
    if macs < SHARED_GEMM_MACS or _pinned or a.ndim < 2 or b.ndim < 2 or not core_free():
        return small_product(np.matmul, a, b, macs=macs)
    m = a.shape[-2]
    if m >= 2 * _SHARED_MIN_ROWS:
        by_rows, n, count = True, m, min(_SHARED_BLOCKS, m // _SHARED_MIN_ROWS)
    elif a.ndim == b.ndim and a.ndim >= 3 and a.shape[0] == b.shape[0] and a.shape[0] >= 2:
        by_rows, n, count = False, a.shape[0], min(_SHARED_BLOCKS, a.shape[0])
    else:
        return small_product(np.matmul, a, b, macs=macs)
    step = -(-n // count)
    bounds = [(lo, min(lo + step, n)) for lo in range(0, n, step)]
    out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (m, b.shape[-1]),
                   dtype=np.result_type(a, b))

    if by_rows:
        def run(lo, hi):
            np.matmul(a[..., lo:hi, :], b, out=out[..., lo:hi, :])
    else:
        def run(lo, hi):
            np.matmul(a[lo:hi], b[lo:hi], out=out[lo:hi])

    small_product(_pool.run_chunks, run, bounds)
    return out

