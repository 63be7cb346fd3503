"""BLAS threading for small matrix products.

numpy's OpenBLAS splits every product above a tiny size over all cores. On a
busy machine (other processes on the cores) its threads wait for each other
for whole scheduler time slices: a 256x256 f32 matmul that takes 0.2 ms on an
idle 2-core machine takes ~16 ms when one other process runs. Products below
``SMALL_GEMM_MACS`` multiply-adds therefore run with one BLAS thread; larger
ones keep numpy's setting, where threads pay off even under load.

The thread count is switched through OpenBLAS's own
``openblas_set_num_threads`` (found in the library numpy loaded; a no-op if
there is none) and restored after the call. Only speed depends on it.
``STABLEHLO_REF_SMALL_GEMM_MACS=0`` turns this off.
"""

import ctypes
import os

SMALL_GEMM_MACS = int(os.environ.get("STABLEHLO_REF_SMALL_GEMM_MACS", str(1 << 28)))

_PREFIXES = ("scipy_openblas_", "openblas_")
_SUFFIXES = ("64_", "")
_get = _set = None
_found = False


def _find():
    global _get, _set, _found
    _found = True
    if SMALL_GEMM_MACS <= 0:
        return
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f
                     if "openblas" in line.lower() and ".so" in line}
    except OSError:
        return
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for pre in _PREFIXES:
            for suf in _SUFFIXES:
                g = getattr(lib, f"{pre}get_num_threads{suf}", None)
                s = getattr(lib, f"{pre}set_num_threads{suf}", None)
                if g is not None and s is not None:
                    g.restype = ctypes.c_int
                    g.argtypes = []
                    s.restype = None
                    s.argtypes = [ctypes.c_int]
                    _get, _set = g, s
                    return


def small_product(fn, *args):
    """``fn(*args)`` with one BLAS thread (for products below SMALL_GEMM_MACS)."""
    if not _found:
        _find()
    if _set is None:
        return fn(*args)
    n = _get()
    if n <= 1:
        return fn(*args)
    _set(1)
    try:
        return fn(*args)
    finally:
        _set(n)
