"""float32 erf, erfc, erf_inv, tanh, logistic, exp, expm1, log, log1p, sin and
cos through the C kernels of
``stablehlo_interpreter._fastmath`` (``_fastmath.c``), bit for bit the
float64 detour's results.

The C kernels evaluate a float64 approximation (about 5e-13 relative) of the
function per element, branch-free and vectorized, round it to float32, and
name the elements whose float64 value lies near a float32 rounding boundary
(about 1 in 8000; subnormal results and non-finite inputs too): those are
recomputed here by ``exact``, the kernel's float64 detour (scipy / numpy in
float64, rounded once). Every result is therefore the detour's:
correctly rounded but for the detour's own rarest near-ties, on every host.
When the module is not built, ``exact`` computes everything (the same bits,
slower); tests/test_fastmath.py checks both paths.
"""

import numpy as np

from ..pool import run_chunks, thread_count
from ..registry import annotate

try:
    from .. import _fastmath
except ImportError:   # not built (pip install -e . builds it): the float64 detour
    _fastmath = None

F32 = np.dtype(np.float32)


# Below this size the C call's setup outweighs the saving.
MIN_SIZE = 64
# Operands of at least THREADED elements run in chunks of CHUNK (256 KiB of
# float32) on the pool's threads: one claiming C call per thread
# (pool.run_chunks; the C loop releases the GIL). Below that, handing chunks
# to the other thread costs more than it saves, in process CPU and wall time
# alike (exp of 1e5 float32: 79 us on one thread, 142 us wall and 173 us CPU
# on two; of 2**18: 219 against 255 us wall; of 1e6: 871 against 686 us
# wall, 2-core host).
CHUNK = 1 << 16
THREADED = 8 * CHUNK


# Index scratch arrays of the short path in run() (operands of up to
# _SCRATCH_SIZE elements), one per thread using it at a time.
_SCRATCH_SIZE = 4096
_SCRATCH = []


def f32_kernel(name, exact):
    """A unary float32 -> float32 kernel equal bit for bit to ``exact`` (the
    float64 detour) that runs ``_fastmath.<name>`` where it is built;
    ``name`` is one of ``erf_f32``, ``erfc_f32``, ``erf_inv_f32``,
    ``tanh_f32``, ``logistic_f32``, ``exp_f32``, ``expm1_f32``, ``log_f32``,
    ``log1p_f32``, ``sin_f32``, ``cos_f32``. Its KernelInfo.into writes the
    result into a given array (fusion.py: a stored value's chunk of the
    output)."""
    def compute(x, out, fresh=False):
        """The result of x (float32, at least MIN_SIZE elements) into out
        (float32, 1-d, contiguous, x's size; ``fresh``: allocated by the
        caller, so sharing no memory with x)."""
        fn = getattr(_fastmath, name)
        # (A 1-d contiguous x as it is: the calls below cost about as much
        # as the C loop on a 256-element loop-body operand.)
        flat = x if x.ndim == 1 and x.flags.c_contiguous else np.ascontiguousarray(x).reshape(-1)
        if not fresh and np.shares_memory(flat, out):
            flat = flat.copy()   # the exact path below reads the inputs again
        idx = np.empty(flat.size, np.int64)
        if flat.size < THREADED:
            n = fn(flat, out, idx)
            redo = idx[:n] if n else None
        else:
            # One C call per pool thread, each taking chunks until none is
            # left (the claiming form of the _fastmath functions): a Python
            # call per chunk cost ~7 us of the ~55 us a chunk computes.
            claim = np.zeros(1 + -(-flat.size // CHUNK), np.int64)
            threads = thread_count()
            run_chunks(lambda lo, hi: fn(flat, out, idx, claim, CHUNK), [(0, 0)] * threads,
                       threads)
            redo = np.concatenate([idx[c * CHUNK:c * CHUNK + n]
                                   for c, n in enumerate(claim[1:].tolist()) if n] or [idx[:0]])
        if redo is not None and redo.size:
            out[redo] = exact(flat[redo])

    def run(x):
        if x.ndim == 1 and x.dtype is F32 and _fastmath is not None \
                and MIN_SIZE <= x.size < THREADED and x.flags.c_contiguous:
            # A loop body's operand (an RNN cell's 256-element tanh): the
            # C call and two allocations, none of compute()'s tests (its C
            # loop takes 0.45 of compute()'s 1.8 us there); the same bits.
            out = np.empty(x.size, F32)
            small = x.size <= _SCRATCH_SIZE
            # The C call takes an idx at least as long as x: a small one is
            # a scratch array taken from (and given back to) _SCRATCH; list
            # pop/append are atomic, a thread that finds it empty allocates.
            idx = _SCRATCH.pop() if small and _SCRATCH else np.empty(
                _SCRATCH_SIZE if small else x.size, np.int64)
            n = getattr(_fastmath, name)(x, out, idx)
            if n:
                redo = idx[:n].copy()
                out[redo] = exact(x[redo])
            if small:
                _SCRATCH.append(idx)
            return out
        if _fastmath is None or (x.dtype is not F32 and x.dtype != F32) or x.size < MIN_SIZE:
            return exact(x)
        out = np.empty(x.shape, F32)   # (owning its data: later steps may update it in place)
        compute(x, out if x.ndim == 1 else out.reshape(-1), True)
        return out

    def run_into(out, x):
        if _fastmath is None or x.dtype != F32 or x.size < MIN_SIZE \
                or not out.flags.c_contiguous:
            out[...] = exact(x)
        else:
            compute(x, out.reshape(-1))
        return out
    run.__name__ = getattr(exact, "__name__", name)
    return annotate(run, into=run_into, shares=True, f32_loop=name)
