"""The fft op: scipy.fft over the trailing dimensions, in double precision.

scipy.fft rather than numpy.fft: the same pocketfft algorithm, but it may
work in place on the double-precision copy the kernel makes anyway
(``overwrite_x``), which halves the time of a 2-D transform.

Double precision for complex64/float32 too, although scipy's
single-precision transform is 1.2-2.5x faster (rfft of 2^20 f32: 6.9 ms
against 16 ms; XLA CPU 7.2 ms): its error, like XLA CPU's own single-
precision DUCC transform, is 3-15e-7 of the rms value, and it exceeded XLA
CPU's on some sizes measured (ifft of 1024: 3.4e-7 against 3.1e-7; fft of
1000, ifft of 4096, fft of 15015, rfft of 65536), where accurate mode
promises at least XLA CPU's accuracy. The rounded double transform is
within 2e-7 on all of them."""

import numpy as np
import scipy.fft

from .. import dtypes
from ..registry import Unsupported, kernel
from . import spec_kernels as _spec

# A 1-D RFFT of an even length from this one up, with a complex64 result, is
# computed as the complex transform of half the length (_rfft_half): pocketfft's
# real transform of 2^20 doubles takes 1.4x its complex one of 2^19 (out of
# cache), and the unpacking costs less than the difference. Below it the real
# transform is as fast or faster (2^17: equal; 2^16: 0.98 against 1.17 ms).
_HALF_RFFT_MIN = 1 << 18
# The same for a 1-D IRFFT of an even length with a float32 result
# (_irfft_half; 2^20: 22 ms for the real transform, 13 for the complex one).
# The unpacking runs in blocks of this many coefficients (64 KiB of complex128
# per temporary: in L2).
_HALF_BLOCK = 1 << 12


def _butterfly(p, q, tw):
    """(p + q) / 2 + (p - q) tw, written into ``q`` (a fresh complex128
    block): the unpacking step of _rfft_half and _irfft_half."""
    d = p - q
    d *= tw
    q += p
    q *= 0.5
    q += d
    return q


def _rfft_half(x, twiddle, out_dtype):
    """RFFT of ``x`` (..., N), N even, through one complex128 FFT of length
    H = N/2: with z[m] = x[2m] + i x[2m+1] and Z = FFT(z),
    X[k] = (Z[k] + conj Z[H-k]) / 2 - (i/2) e^(-2 pi i k/N) (Z[k] - conj Z[H-k]),
    all in double precision and rounded once to ``out_dtype``
    (``twiddle[k]`` = -(i/2) e^(-2 pi i k/N), k < H)."""
    n = x.shape[-1]
    h = n // 2
    z = scipy.fft.fft(x.astype(np.float64).view(np.complex128), axis=-1, overwrite_x=True)
    out = np.empty(x.shape[:-1] + (h + 1,), dtype=out_dtype)
    z0 = z[..., 0]
    out[..., 0] = z0.real + z0.imag
    out[..., h] = z0.real - z0.imag
    for a in range(1, h, _HALF_BLOCK):
        b = min(a + _HALF_BLOCK, h)
        # conj Z[H-k], k = a .. b-1
        out[..., a:b] = _butterfly(z[..., a:b], np.conj(z[..., h - a:h - b:-1]), twiddle[a:b])
    return out


def _irfft_half(x, twiddle, n, out_dtype):
    """IRFFT to a real (..., N), N = 2H even, of ``x`` (..., H+1) through one
    complex128 inverse FFT of length H: Z[k] = E[k] + i O[k] with
    E[k] = (X[k] + conj X[H-k]) / 2 and O[k] = (X[k] - conj X[H-k]) e^(2 pi i k/N) / 2
    (the DFTs of the even and odd samples), z = IFFT(Z), x[2m] = Re z[m],
    x[2m+1] = Im z[m]; rounded once to ``out_dtype``. The imaginary parts of
    X[0] and X[H] are ignored, as by the real transform
    (``twiddle[k]`` = (i/2) e^(2 pi i k/N), k < H)."""
    h = n // 2
    zs = np.empty(x.shape[:-1] + (h,), dtype=np.complex128)
    x0 = x[..., 0].real.astype(np.float64)
    xh = x[..., h].real.astype(np.float64)
    zs[..., 0] = ((x0 + xh) + 1j * (x0 - xh)) * 0.5
    for a in range(1, h, _HALF_BLOCK):
        b = min(a + _HALF_BLOCK, h)
        zs[..., a:b] = _butterfly(x[..., a:b].astype(np.complex128),
                                  np.conj(x[..., h - a:h - b:-1]).astype(np.complex128),  # conj X[H-k]
                                  twiddle[a:b])
    z = scipy.fft.ifft(zs, axis=-1, overwrite_x=True)
    return z.view(np.float64).reshape(x.shape[:-1] + (n,)).astype(out_dtype)


@kernel("stablehlo.fft", traits=("fourier",))
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
    out_dtype = op.result_types[0].dtype
    axes = tuple(range(-k, 0))
    out_tail = lengths[:-1] + (lengths[-1] // 2 + 1,) if fft_type == "RFFT" else lengths

    def guard(transform):
        # numpy rejects zero-length transforms; an empty result is all there is.
        if 0 not in lengths:
            return lambda x: transform(x) if x.size else np.zeros(
                x.shape[:-k] + out_tail, dtype=out_dtype)
        return lambda x: np.zeros(x.shape[:-k] + out_tail, dtype=out_dtype)

    if _spec.is_spec(op) and fft_type in ("FFT", "RFFT", "IFFT", "IRFFT") and \
            dtypes.is_float(in_t.dtype) == (fft_type == "RFFT") and \
            not (fft_type == "IRFFT" and lengths[-1] % 2):
        # Spec numerics: the C++ interpreter's DFTs (spec_kernels.fft). Its
        # IRFFT of an odd length reads memory it never wrote
        # (docs/conformance.md): that one is computed as in accurate mode.
        return guard(lambda x: _spec.fft(x, fft_type, lengths, out_dtype))
    if fft_type == "FFT":
        def fft_(x):
            return scipy.fft.fftn(x.astype(np.complex128), s=lengths, axes=axes,
                                  overwrite_x=True).astype(out_dtype)
        return guard(fft_)
    if fft_type == "IFFT":
        def ifft(x):
            return scipy.fft.ifftn(x.astype(np.complex128), s=lengths, axes=axes,
                                   overwrite_x=True).astype(out_dtype)
        return guard(ifft)
    if fft_type == "RFFT":
        if not dtypes.is_float(in_t.dtype):
            raise Unsupported(f"RFFT of {in_t.element_type}")

        n = lengths[-1]
        half = k == 1 and n % 2 == 0 and n >= _HALF_RFFT_MIN and \
            np.dtype(out_dtype) == np.complex64
        twiddle = []    # made by the first run (N/2 complex128)

        def rfft(x):
            if half and x.shape[-1] == n:
                if not twiddle:
                    twiddle.append(-0.5j * np.exp(np.arange(n // 2) * (-2j * np.pi / n)))
                return _rfft_half(x, twiddle[0], out_dtype)
            return scipy.fft.rfftn(x.astype(np.float64), s=lengths, axes=axes,
                                   overwrite_x=True).astype(out_dtype)
        return guard(rfft)
    if fft_type == "IRFFT":
        n = lengths[-1]
        half = k == 1 and n % 2 == 0 and n >= _HALF_RFFT_MIN and \
            np.dtype(out_dtype) == np.float32
        twiddle = []    # made by the first run (N/2 complex128)

        def irfft(x):
            if half and x.shape[-1] == n // 2 + 1:
                if not twiddle:
                    twiddle.append(0.5j * np.exp(np.arange(n // 2) * (2j * np.pi / n)))
                return _irfft_half(x, twiddle[0], n, out_dtype)
            # irfftn reads the first L/2+1 coefficients of the last axis.
            return scipy.fft.irfftn(x.astype(np.complex128), s=lengths, axes=axes,
                                    overwrite_x=True).astype(out_dtype)
        return guard(irfft)
    raise Unsupported(f"fft_type {fft_type}")
