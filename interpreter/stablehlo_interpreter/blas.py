"""BLAS threading for small matrix products.

numpy's OpenBLAS splits every product above a tiny size over all cores. On a
busy machine (other processes on the cores) its threads wait for each other
for whole scheduler time slices: a 256x256 f32 matmul that takes 0.2 ms on an
idle 2-core machine takes ~16 ms when one other process runs. Products below
``SMALL_GEMM_MACS`` multiply-adds therefore run with one BLAS thread; larger
ones keep numpy's setting, where threads pay off even under load.

The thread count is switched through OpenBLAS's own
``openblas_set_num_threads`` (in every OpenBLAS loaded: numpy's and, once
scipy.linalg is imported, scipy's, which its LAPACK/BLAS wrappers use; a
no-op if there is none) and restored after the call. Only speed depends on it.
``STABLEHLO_REF_SMALL_GEMM_MACS=0`` turns this off.
"""

import ctypes

from . import config as _config

SMALL_GEMM_MACS = _config.SMALL_GEMM_MACS.value()   # a module constant: kernels test it per call

_PREFIXES = ("scipy_openblas_", "openblas_")
_SUFFIXES = ("64_", "")
_get = _set = None
_libs = []          # (get, set) of every OpenBLAS found
_found_paths = None
_lapack_found = False


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
                    done = True
    _get, _set = _libs[0] if _libs else (None, None)


def small_product(fn, *args):
    """``fn(*args)`` with one BLAS thread (for products below SMALL_GEMM_MACS)."""
    if _found_paths is None:
        _find()
    if not _libs:
        return fn(*args)
    saved = [(s, g()) for g, s in _libs]
    for s, n in saved:
        if n > 1:
            s(1)
    try:
        return fn(*args)
    finally:
        for s, n in saved:
            if n > 1:
                s(n)


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
    return small_product(lambda: fn(*args, **kwargs))
