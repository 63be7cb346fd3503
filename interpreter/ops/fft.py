"""The fft op: numpy.fft over the trailing dimensions, in double precision."""

import numpy as np

from .. import dtypes
from ..registry import Unsupported, kernel


@kernel("stablehlo.fft")
def fft(op):
    """spec: fft (docs/spec.md#fft).

    FFT/IFFT: complex -> complex forward/inverse transforms (IFFT scaled by
    1/N, as numpy and the spec's definition); RFFT: real -> the first
    L/2+1 complex coefficients; IRFFT: the inverse of RFFT, a real result of
    length L. The transform runs over the trailing len(fft_length)
    dimensions, in complex128, and is rounded once to the result type.
    """
    fft_type = op.attrs["fft_type"]
    lengths = tuple(int(n) for n in op.attrs["fft_length"])
    k = len(lengths)
    if not 1 <= k <= 3:
        raise Unsupported(f"fft over {k} dimensions (1 to 3 are allowed)")
    in_t = op.operand_types[0]
    out_t = op.result_types[0]
    if out_t.shape is None or None in out_t.shape:
        raise Unsupported("dynamic shapes")
    out_shape = tuple(out_t.shape)
    out_dtype = out_t.dtype
    axes = tuple(range(-k, 0))
    empty = any(n == 0 for n in lengths) or 0 in out_shape

    def zeros(x):
        return np.zeros(out_shape, dtype=out_dtype)

    if empty:
        return zeros

    if fft_type == "FFT":
        def fft_(x):
            return np.fft.fftn(x.astype(np.complex128), s=lengths, axes=axes).astype(out_dtype)
        return fft_
    if fft_type == "IFFT":
        def ifft(x):
            return np.fft.ifftn(x.astype(np.complex128), s=lengths, axes=axes).astype(out_dtype)
        return ifft
    if fft_type == "RFFT":
        if not dtypes.is_float(in_t.dtype):
            raise Unsupported(f"RFFT of {in_t.element_type}")

        def rfft(x):
            return np.fft.rfftn(x.astype(np.float64), s=lengths, axes=axes).astype(out_dtype)
        return rfft
    if fft_type == "IRFFT":
        def irfft(x):
            # irfftn reads the first L/2+1 coefficients of the last axis.
            return np.fft.irfftn(x.astype(np.complex128), s=lengths, axes=axes).astype(out_dtype)
        return irfft
    raise Unsupported(f"fft_type {fft_type}")
