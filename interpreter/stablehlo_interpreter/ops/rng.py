"""Random number generation: rng and rng_bit_generator.

`rng_bit_generator` reproduces XLA's bit generators exactly (the expansion
XLA CPU/GPU run: xla/service/rng_bit_generator_expander.cc over
xla/hlo/builder/lib/prng.cc), so a JAX program gets the same random bits on
this interpreter as on XLA CPU. Everything is vectorised numpy uint32/uint64
arithmetic (wrap-around is the intended modular arithmetic).

`rng` is implementation-defined by the spec; it draws from a numpy Generator
held in the execution context, seeded deterministically, so runs are
reproducible.
"""

import numpy as np

from .. import dtypes
from ..registry import Unsupported, kernel

_U32 = np.uint32
_U64 = np.uint64
_MASK32 = _U64(0xFFFFFFFF)
_S32 = _U64(32)


def _lo32(x):
    return (x & _MASK32).astype(_U32)


def _hi32(x):
    return (x >> _S32).astype(_U32)


def _join64(lo, hi):
    return lo.astype(_U64) | (hi.astype(_U64) << _S32)


# --------------------------------------------------------------------------
# ThreeFry2x32 (Salmon et al. 2011), 20 rounds, as in XLA's prng.cc.

_ROT = (13, 15, 26, 6, 17, 29, 16, 24)


def _rotl(v, d):
    return (v << _U32(d)) | (v >> _U32(32 - d))


def threefry2x32(x0, x1, k0, k1):
    """ThreeFry2x32 of the counter pair (x0, x1) under key (k0, k1) (uint32)."""
    ks0, ks1 = _U32(k0), _U32(k1)
    ks2 = _U32(0x1BD11BDA) ^ ks0 ^ ks1
    ks = (ks0, ks1, ks2)
    x0 = x0 + ks0
    x1 = x1 + ks1
    for i in range(5):
        rots = _ROT[:4] if i % 2 == 0 else _ROT[4:]
        for r in rots:
            x0 = x0 + x1
            x1 = _rotl(x1, r)
            x1 = x0 ^ x1
        # Key injection after every 4 rounds.
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + _U32(i + 1)
    return x0, x1


def _split_shape(shape):
    """XLA's SplitShapeIntoHalves: (split_dim, half element count)."""
    if len(shape) == 0:
        return None, 1
    split = next((i for i, d in enumerate(shape) if d % 2 == 0), None)
    if split is None:
        split = max(range(len(shape)), key=lambda i: (shape[i], -i))
    half = list(shape)
    half[split] = -(-shape[split] // 2)
    return split, int(np.prod(half, dtype=np.int64))


def _threefry_bits32(key, state, shape):
    """ThreeFryRngBit32: uint32 bits of `shape` and the new counter state."""
    split, n = _split_shape(shape)
    with np.errstate(over="ignore"):
        ctr = state + np.arange(n, dtype=_U64)
        x0, x1 = threefry2x32(_lo32(ctr), _hi32(ctr), _lo32(key), _hi32(key))
        new_state = state + _U64(n)
    if split is None:
        return x0.reshape(()), new_state
    # The two output words of a counter are neighbours along `split`.
    half = list(shape)
    half[split] = -(-shape[split] // 2)
    pair = np.stack([x0.reshape(half), x1.reshape(half)], axis=split + 1)
    full = list(shape)
    full[split] = half[split] * 2
    out = pair.reshape(full)
    if full[split] != shape[split]:
        out = out[tuple(slice(0, d) for d in shape)]
    return np.ascontiguousarray(out), new_state


def _threefry_bits64(key, state, shape):
    n = int(np.prod(shape, dtype=np.int64))
    with np.errstate(over="ignore"):
        ctr = state + np.arange(n, dtype=_U64)
        x0, x1 = threefry2x32(_lo32(ctr), _hi32(ctr), _lo32(key), _hi32(key))
        new_state = state + _U64(n)
    return _join64(x0, x1).reshape(shape), new_state


# --------------------------------------------------------------------------
# Philox4x32-10, as in XLA's prng.cc.

_PHILOX_W32A = _U32(0x9E3779B9)
_PHILOX_W32B = _U32(0xBB67AE85)
_PHILOX_M4x32A = _U64(0xD2511F53)
_PHILOX_M4x32B = _U64(0xCD9E8D57)


def philox4x32(x, k0, k1):
    """Philox4x32 with 10 rounds; ``x`` is a list of four uint32 arrays."""
    x0, x1, x2, x3 = x
    k0, k1 = _U32(k0), _U32(k1)
    with np.errstate(over="ignore"):
        for _ in range(10):
            p0 = x0.astype(_U64) * _PHILOX_M4x32A
            p1 = x2.astype(_U64) * _PHILOX_M4x32B
            x0, x1, x2, x3 = (_hi32(p1) ^ x1 ^ k0, _lo32(p1),
                              _hi32(p0) ^ x3 ^ k1, _lo32(p0))
            k0 = k0 + _PHILOX_W32A
            k1 = k1 + _PHILOX_W32B
    return x0, x1, x2, x3


def _philox_blocks(key, lo, hi, nblocks):
    """Philox outputs of counters (hi:lo) + 0..nblocks-1 and the new counter."""
    with np.errstate(over="ignore"):
        iota = np.arange(nblocks, dtype=_U64)
        c_lo = lo + iota
        c_hi = np.where(c_lo < lo, hi + _U64(1), hi).astype(_U64)
        new_lo = lo + _U64(nblocks)
        new_hi = hi + _U64(1) if new_lo < lo else hi
        bits = philox4x32([_lo32(c_lo), _hi32(c_lo), _lo32(c_hi), _hi32(c_hi)],
                          _lo32(key), _hi32(key))
    return bits, _U64(new_lo), _U64(new_hi)


def _philox_bits32(key, lo, hi, shape):
    n = int(np.prod(shape, dtype=np.int64))
    bits, new_lo, new_hi = _philox_blocks(key, lo, hi, -(-n // 4))
    # The four words of a block are consecutive outputs.
    out = np.stack(bits, axis=1).reshape(-1)[:n]
    return out.reshape(shape), new_lo, new_hi


def _philox_bits64(key, lo, hi, shape):
    n = int(np.prod(shape, dtype=np.int64))
    bits, new_lo, new_hi = _philox_blocks(key, lo, hi, -(-2 * n // 4))
    w0 = _join64(bits[0], bits[1])
    w1 = _join64(bits[2], bits[3])
    out = np.stack([w0, w1], axis=1).reshape(-1)[:n]
    return out.reshape(shape), new_lo, new_hi


# --------------------------------------------------------------------------


def _bits_for(dtype):
    """(width of the generated words, view dtype) for an output element type."""
    dtype = np.dtype(dtype)
    if dtypes.is_complex(dtype) or dtypes.is_bool(dtype):
        return None
    width = dtypes.bit_width(dtype)
    if width not in (8, 16, 32, 64):
        return None
    return width


_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


@kernel("stablehlo.rng_bit_generator")
def rng_bit_generator(op):
    """spec: rng_bit_generator (docs/spec.md#rng_bit_generator).

    Bit-exact with XLA: THREE_FRY takes key = state[0], counter = state[1];
    PHILOX takes key = state[0] and a 128-bit counter (state[1], state[2]),
    or (state[1], state[0]) for a 2-word state. DEFAULT is PHILOX, as on
    XLA CPU and GPU. Outputs narrower than 32 bits keep the low bits of 32-bit
    words; non-unsigned types get the generated bits bitcast.
    """
    state_t = op.operand_types[0]
    out_t = op.result_types[1]
    if out_t.shape is None or None in out_t.shape:
        raise Unsupported("dynamic output shape")
    shape = tuple(out_t.shape)
    gen = make_bit_generator(op.attrs.get("rng_algorithm", "DEFAULT"), state_t, out_t)
    return lambda state: gen(state, shape)


def make_bit_generator(algorithm, state_t, out_t):
    """``fn(state, shape) -> [new_state, bits]`` for rng_bit_generator.

    Also used by the `@stablehlo.dynamic_rng_bit_generator` custom call,
    whose output shape is only known at run time.
    """
    if algorithm == "DEFAULT":
        algorithm = "PHILOX"
    if state_t.dtype != np.uint64:
        raise Unsupported(f"initial_state of type {state_t!r} (only ui64 is supported)")
    if state_t.shape[0] is None:
        raise Unsupported("dynamic state shape")
    width = _bits_for(out_t.dtype)
    if width is None:
        raise Unsupported(f"rng_bit_generator output element type {out_t.element_type}")
    gen_width = 64 if width == 64 else 32
    out_dtype = out_t.dtype
    nstate = state_t.shape[0]

    def finish(bits):
        if width < 32:
            bits = bits.astype(_UINT[width])  # keeps the low bits, like XLA's convert
        if bits.dtype != out_dtype:
            bits = bits.view(out_dtype)
        return bits

    if algorithm == "THREE_FRY":
        if nstate < 2:
            raise Unsupported("THREE_FRY needs a state of 2 ui64")
        gen = _threefry_bits64 if gen_width == 64 else _threefry_bits32

        def run_threefry(state, shape):
            key, ctr = state[0], state[1]
            bits, new_ctr = gen(key, ctr, shape)
            new_state = state.copy()
            new_state[1] = new_ctr
            return [new_state, finish(bits)]
        return run_threefry

    if algorithm == "PHILOX":
        if nstate < 2:
            raise Unsupported("PHILOX needs a state of 2 or 3 ui64")
        gen = _philox_bits64 if gen_width == 64 else _philox_bits32

        def run_philox(state, shape):
            key = state[0]
            lo, hi = (state[1], state[2]) if nstate >= 3 else (state[1], state[0])
            bits, new_lo, new_hi = gen(key, lo, hi, shape)
            new_state = state.copy()
            new_state[1] = new_lo
            if nstate >= 3:
                new_state[2] = new_hi
            return [new_state, finish(bits)]
        return run_philox

    raise Unsupported(f"rng_algorithm {algorithm}")


_RNG_KEY = "rng.generator"


def _generator(ctx):
    """The generator of this program and process, created on first use.

    It lives with the compiled program, not the run: like XLA's
    per-executable rng state, each execution continues where the last one
    stopped (a `torch.randperm` per epoch must not repeat the same
    permutation), and a freshly compiled program replays the same sequence
    (seeded by replica and partition, so devices differ)."""
    generators = ctx.program.state.setdefault(_RNG_KEY, {})
    g = generators.get(ctx.process)
    if g is None:
        replica, partition = ctx.process
        g = generators.setdefault(ctx.process,
                                  np.random.default_rng([0x5EED, int(replica), int(partition)]))
    return g


@kernel("stablehlo.rng", special=True)
def rng(op):
    """spec: rng (docs/spec.md#rng).

    UNIFORM: values in [a, b) (integers: a <= x < b); NORMAL: mean a, standard
    deviation b. The spec leaves the exact values to the implementation: they
    come from a numpy Generator seeded per execution context (and process), so
    a run is reproducible.
    """
    dist = op.attrs.get("rng_distribution", "UNIFORM")
    out_t = op.result_types[0]
    dtype = out_t.dtype
    static_shape = None if None in out_t.shape else tuple(out_t.shape)
    is_int = dtypes.is_integer(dtype)
    is_float = dtypes.is_float(dtype)
    if dist not in ("UNIFORM", "NORMAL"):
        raise Unsupported(f"rng_distribution {dist}")
    if dist == "NORMAL" and not is_float:
        raise Unsupported("NORMAL distribution needs a floating-point type")
    if not (is_int or is_float or dtypes.is_bool(dtype)):
        raise Unsupported(f"rng of element type {out_t.element_type}")

    def shape_of(shape_operand):
        if static_shape is not None:
            return static_shape
        return tuple(int(d) for d in np.asarray(shape_operand).reshape(-1))

    if dist == "NORMAL":
        def run_normal(ctx, regions, a, b, shape):
            g = _generator(ctx)
            mu = float(np.asarray(a, dtype=np.float64))
            sigma = float(np.asarray(b, dtype=np.float64))
            return np.asarray(g.normal(mu, sigma, size=shape_of(shape))).astype(dtype)
        return run_normal

    if is_float:
        def run_uniform_float(ctx, regions, a, b, shape):
            g = _generator(ctx)
            lo = np.asarray(a, dtype=np.float64)
            hi = np.asarray(b, dtype=np.float64)
            u = g.random(size=shape_of(shape))
            out = (lo + (hi - lo) * u).astype(dtype)
            if lo < hi:
                # Rounding to a narrow type may land on b: keep the range half-open.
                top = np.nextafter(np.asarray(b, dtype=dtype), np.asarray(a, dtype=dtype))
                out = np.minimum(out, top).astype(dtype)
            return np.asarray(out)
        return run_uniform_float

    def run_uniform_int(ctx, regions, a, b, shape):
        g = _generator(ctx)
        lo, hi = int(a), int(b)
        size = shape_of(shape)
        if hi <= lo:
            # Empty range: implementation-defined; return `a` everywhere.
            return np.full(size, a, dtype=dtype)
        vals = g.integers(lo, hi, size=size, dtype=np.int64 if hi <= 2**63 - 1 and lo >= -2**63
                          else np.uint64)
        return np.asarray(vals).astype(dtype)
    return run_uniform_int
