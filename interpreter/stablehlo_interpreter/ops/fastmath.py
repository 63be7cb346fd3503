"""float32 erf, erfc, erf_inv, tanh and logistic through the C kernels of
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

from ..pool import run_chunks

try:
    from .. import _fastmath
except ImportError:   # not built (pip install -e . builds it): the float64 detour
    _fastmath = None

F32 = np.dtype(np.float32)
# Below this size the C call's setup outweighs the saving.
MIN_SIZE = 64
# Operands of more than CHUNK elements run in chunks of CHUNK on the pool's
# threads (pool.run_chunks: the C loop releases the GIL); 256 KiB of float32.
CHUNK = 1 << 16


def f32_kernel(name, exact):
    """A unary float32 -> float32 kernel equal bit for bit to ``exact`` (the
    float64 detour) that runs ``_fastmath.<name>`` where it is built;
    ``name`` is one of ``erf_f32``, ``erfc_f32``, ``erf_inv_f32``,
    ``tanh_f32``, ``logistic_f32``."""
    def run(x):
        mod = _fastmath
        if mod is None or x.dtype != F32 or x.size < MIN_SIZE:
            return exact(x)
        fn = getattr(mod, name)
        flat = np.ascontiguousarray(x).reshape(-1)
        out = np.empty(flat.size, F32)
        idx = np.empty(flat.size, np.intp)
        if flat.size <= CHUNK:
            redo = idx[:fn(flat, out, idx)]
        else:
            counts = {}

            def chunk(lo, hi):
                counts[lo] = fn(flat[lo:hi], out[lo:hi], idx[lo:hi])
            run_chunks(chunk, [(lo, min(lo + CHUNK, flat.size)) for lo in range(0, flat.size, CHUNK)])
            redo = np.concatenate([idx[lo:lo + n] + lo for lo, n in sorted(counts.items())])
        if redo.size:
            out[redo] = exact(flat[redo])
        return out.reshape(x.shape)
    run.__name__ = getattr(exact, "__name__", name)
    return run
