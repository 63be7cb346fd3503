"""float32 erf, erfc, erf_inv, tanh, logistic, exp, expm1, log, log1p, sin
and cos through ``stablehlo_interpreter._fastmath`` (ops/fastmath.py)
against the float64 detour, bit for bit.

The C kernels evaluate a float64 approximation and send the elements near a
float32 rounding boundary back to the exact path (scipy / numpy in float64,
rounded once), so every result must be the exact path's. Checked here: a
strided sweep over every float32 bit pattern, every float32 around the
kernels' branch points and clamps, special values, random values of every
scale, the programs' kernels with and without the C module, and the C
module's argument checks. ``-m slow`` adds the exhaustive check: all 2^32
float32 inputs of each function (on the 2-core machine, niced, load 3-6: 1-3
minutes per function, e.g. log 67 s, tanh 107 s, erf 151 s, logistic 178 s; 20
minutes for all eleven); ``-k every_clone`` builds the module for each
target_clones target alone (and without the AVX-512 loops) and sweeps it.
"""

import importlib.util
import pathlib
import platform
import shutil
import subprocess
import sysconfig

import numpy as np
import pytest
import scipy.special as sps
from testkit import run_threads

import stablehlo_interpreter as shi
from stablehlo_interpreter.ops import chlo, fastmath

fm = fastmath._fastmath
needs_c = pytest.mark.skipif(fm is None, reason="stablehlo_interpreter._fastmath is not built")


def _logistic64(x):
    return 1.0 / (1.0 + np.exp(-x))


# name -> the float64 function the exact path rounds once (as the op kernels:
# chlo.erf / chlo.erfc use scipy, stablehlo.tanh numpy, stablehlo.logistic
# ops/elementwise_math._logistic, chlo.erf_inv the ndtri form of
# chlo._erfinv_narrow).
EXACT = {"erf": sps.erf, "erfc": sps.erfc, "tanh": np.tanh, "logistic": _logistic64,
         "erf_inv": chlo._erfinv_narrow, "exp": np.exp, "log": np.log, "sin": np.sin,
         "cos": np.cos, "expm1": np.expm1, "log1p": np.log1p}
OPS = {"erf": "chlo.erf", "erfc": "chlo.erfc", "tanh": "stablehlo.tanh",
       "logistic": "stablehlo.logistic", "erf_inv": "chlo.erf_inv",
       "exp": "stablehlo.exponential", "log": "stablehlo.log", "sin": "stablehlo.sine",
       "cos": "stablehlo.cosine", "expm1": "stablehlo.exponential_minus_one",
       "log1p": "stablehlo.log_plus_one"}
# |x| where a kernel switches formulas or clamps (ops/_fastmath.c), and where
# results become subnormal or round to 1.
# (erf: also where the AVX-512 loop changes pieces, (j + 1/2) / 3.75)
EDGES = {"erf": [0.5, 3.9192059, 4.0, 1e-38, 0.13333334, 0.4, 1.2, 2.1333334, 3.8666666],
         "erfc": [0.5, 4.0, 9.194, 10.0, 10.0542, 10.5],
         "tanh": [0.17328680, 0.5, 9.01, 10.0, 1e-38],
         "logistic": [16.6, 87.3, 103.3, 104.0, 120.0],
         "erf_inv": [0.99903, 0.9999999, 1.0, 0.5, 1.5e-8, 1e-38],
         # exp: the float32 overflow (88.72) and underflow (103.97) points, the clamps
         # (exp_d 110, the AVX-512 loop 120)
         "exp": [88.72284, 87.33655, 103.97208, 110.0, 120.0, 1e-38],
         # log: 1, the reduction's split at sqrt(2) (and sqrt(1/2)), the ends
         "log": [1.0, 1.4142135, 0.70710677, 2.0, 1e-38, 1e-40, 3.4028235e38],
         # sin, cos: multiples of pi/4 (quadrant changes), TRIG_MAX, a large multiple of pi/2
         "sin": [0.7853982, 1.5707964, 2.3561945, 3.1415927, 4.712389, 6.2831855, 1e-38,
                 1048576.0, 823549.6],
         "cos": [0.7853982, 1.5707964, 2.3561945, 3.1415927, 4.712389, 6.2831855, 1e-38,
                 1048576.0, 823549.6],
         # expm1: the reduction's k = 0 / k = +-1 split (ln2 / 2), rounding to -1, the ends
         "expm1": [0.34657359, 1.0397208, 17.32868, 88.72284, 110.0, 1e-38, 1e-40],
         # log1p: near -1, u = 1 + x inexact (|x| < 2^-29), the ends
         "log1p": [0.99999994, 0.5, 1.8626451e-09, 1e-38, 1e-40, 3.4028235e38]}


def typical(name, rng, shape):
    """Random operands of the function's usual domain."""
    if name == "erf_inv":
        return rng.uniform(-1, 1, shape).astype(np.float32)
    if name == "log":
        return np.abs(rng.standard_normal(shape) * 10).astype(np.float32)
    if name == "log1p":
        return (np.abs(rng.standard_normal(shape) * 3) - 0.9).astype(np.float32)
    return (rng.standard_normal(shape) * 2).astype(np.float32)


def exact(name, x):
    with np.errstate(all="ignore"):
        return EXACT[name](np.asarray(x, np.float32).astype(np.float64)).astype(np.float32)


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def check(name, x):
    """Asserts the C kernel's results for float32 ``x`` are the exact path's
    bits; returns the number of elements it flagged. Flagged elements are
    the exact path's by construction (ops/fastmath.f32_kernel recomputes
    them with it): only the others are computed exactly and compared."""
    out = np.empty(x.size, np.float32)
    idx = np.empty(x.size, np.int64)
    n = getattr(fm, name + "_f32")(x, out, idx)
    if n:
        keep = np.ones(x.size, bool)
        keep[idx[:n]] = False
        x, out = x[keep], out[keep]
    want = exact(name, x)
    bad = np.nonzero(bits(out) != bits(want))[0]
    assert bad.size == 0, (name, x[bad[:5]], out[bad[:5]], want[bad[:5]])
    return n


def _around(values, width=1 << 14):
    """Every float32 within ``width`` bit patterns of +-each value."""
    out = []
    for v in values:
        c = int(np.float32(v).view(np.uint32))
        u = np.arange(c - width, c + width, dtype=np.uint32)
        out += [u, u | np.uint32(0x80000000)]
    return np.concatenate(out).view(np.float32)


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.17549435e-38,
                     3.4028235e38, -3.4028235e38, 1.0, -1.0], np.float32)


@needs_c
@pytest.mark.parametrize("name", sorted(EXACT))
def test_strided_sweep_of_every_bit_pattern(name):
    # every 509th float32 (8.4 million, all signs, binades, NaN and inf)
    check(name, np.arange(0, 1 << 32, 509, dtype=np.uint64).astype(np.uint32).view(np.float32))


@needs_c
@pytest.mark.parametrize("name", sorted(EXACT))
def test_every_float32_around_the_branch_points(name):
    check(name, _around(EDGES[name]))


@needs_c
@pytest.mark.parametrize("name", sorted(EXACT))
def test_special_and_random_values(name):
    rng = np.random.default_rng(7)
    x = np.concatenate([SPECIALS,
                        (rng.standard_normal(1 << 20) * 10.0 ** rng.integers(-3, 3, 1 << 20))
                        .astype(np.float32),
                        (np.array([np.nan], np.float32).view(np.uint32) | np.uint32(5))
                        .view(np.float32)])
    x = np.concatenate([x, -x])
    check(name, x)
    # the guard flags about 1 element in 8000 of data whose results are
    # normal float32 numbers
    x = typical(name, rng, 1 << 20)
    assert check(name, x) < x.size // 2000


@needs_c
@pytest.mark.parametrize("name", ["sin", "cos"])
def test_trig_near_every_multiple_of_half_pi(name):
    # The float32 numbers nearest each multiple k pi/2 below the kernels'
    # TRIG_MAX (2^20), where the reduced argument is smallest and the
    # reduction's relative error largest, and their 4 neighbours each side.
    k = np.arange(1, int(2 ** 20 / (np.pi / 2)) + 2, dtype=np.float64)
    c = (k * (np.pi / 2)).astype(np.float32).view(np.uint32).astype(np.int64)
    u = (c[:, None] + np.arange(-4, 5)).reshape(-1).astype(np.uint32)
    x = u.view(np.float32)
    check(name, np.concatenate([x, -x]))


@needs_c
def test_flagged_elements_are_the_near_ties_and_the_specials():
    # NaN is flagged; erf's clamp takes +-inf to +-1 (no flag needed)
    x = np.array([np.nan, np.inf, -np.inf, 0.25], np.float32)
    out = np.empty(4, np.float32)
    idx = np.empty(4, np.int64)
    assert fm.erf_f32(x, out, idx) == 1 and idx[0] == 0
    assert np.array_equal(bits(out[1:]), bits(exact("erf", x[1:])))
    # outside log's domain: flagged
    x = np.array([np.nan, -np.inf, -1.0, 0.0], np.float32)
    assert fm.log_f32(x, out, idx) == 4
    # logistic results below 2^-126 are subnormal in float32: all flagged
    x = np.array([-90.0, -100.0, -5.0], np.float32)
    assert fm.logistic_f32(x, out[:3], idx) == 2
    # +-0 results, and those below 2^-151 (they round to +-0), are not
    # (exp clamps both to e^-110, whose dropped bits lie far from 2^28)
    x = np.array([0.0, -0.0, -120.0, -140.0], np.float32)
    assert fm.tanh_f32(x[:2], out[:2], idx) == 0 and fm.exp_f32(x, out, idx) == 0
    assert np.array_equal(bits(out), bits(exact("exp", x)))


def _program(name, shape):
    t = "tensor<" + "".join(f"{d}x" for d in shape) + "f32>"
    sig = f"{t} -> {t}" if OPS[name].startswith("chlo.") else t
    return shi.compile(f"func.func @main(%x: {t}) -> {t} {{\n"
                       f"  %r = {OPS[name]} %x : {sig}\n  return %r : {t}\n}}")


@pytest.mark.parametrize("name", sorted(EXACT))
def test_kernels_with_and_without_the_c_module(name, monkeypatch):
    # Sizes below MIN_SIZE, 1-d ones below THREADED (a loop body's
    # operand: run's short path), one thread, several chunks (the pool's threads,
    # from THREADED elements), 2-d and 0-d operands; without the module the
    # float64 detour gives the same bits.
    rng = np.random.default_rng(3)
    for shape in [(), (5,), (256,), (fastmath.CHUNK,), (3 * fastmath.CHUNK + 17,),
                  (fastmath.THREADED + 17,), (300, 700)]:
        x = typical(name, rng, shape)
        x.reshape(-1)[:SPECIALS.size] = SPECIALS[: x.size]
        prog = _program(name, shape)
        want = exact(name, x)
        got = prog.run(x)[0]
        assert got.dtype == np.float32 and np.array_equal(bits(got), bits(want)), shape
        monkeypatch.setattr(fastmath, "_fastmath", None)
        slow = prog.run(x)[0]
        monkeypatch.setattr(fastmath, "_fastmath", fm)
        assert np.array_equal(bits(slow), bits(want)), shape


@needs_c
def test_short_path_scratch_is_shared_safely_between_threads():
    # Small 1-d operands take an index scratch array from a shared list:
    # threads calling at once each get their own, every result the detour's.
    k = fastmath.f32_kernel("tanh_f32", lambda v: exact("tanh", v))
    rng = np.random.default_rng(5)
    xs = [typical("tanh", rng, (n,)) for n in (64, 256, 4096, 4097)]
    for x in xs:
        x[:SPECIALS.size] = SPECIALS[:x.size]     # flagged elements: the redo path
    want = [bits(exact("tanh", x)) for x in xs]
    bad = []

    def work(i):
        for _ in range(200):
            x = xs[i % len(xs)]
            if not np.array_equal(bits(k(x)), want[i % len(xs)]):
                bad.append(i)
    run_threads(work, 6)
    assert not bad and all(a.size == fastmath._SCRATCH_SIZE for a in fastmath._SCRATCH)


def test_strided_and_broadcast_operands():
    k = fastmath.f32_kernel("erf_f32", lambda v: exact("erf", v))
    x = np.linspace(-5, 5, 30000, dtype=np.float32)
    for v in (x[::3], np.broadcast_to(np.float32(0.7), (500,)), x.reshape(3, -1).T):
        assert np.array_equal(bits(k(v)), bits(exact("erf", v)))


@needs_c
def test_bad_buffers_raise():
    x = np.ones(100, np.float32)
    out = np.empty(100, np.float32)
    idx = np.empty(100, np.int64)
    with pytest.raises(TypeError, match="float32"):
        fm.erf_f32(x.astype(np.float64), out, idx)
    with pytest.raises(TypeError, match="float32"):
        fm.tanh_f32(x, out.view(np.int32), idx)
    with pytest.raises(TypeError, match="int64"):
        fm.erfc_f32(x, out, idx.astype(np.int32))
    with pytest.raises(ValueError, match="elements"):
        fm.erf_f32(x, out[:99], idx)
    with pytest.raises(ValueError, match="elements"):
        fm.erf_f32(x, out, idx[:50])
    with pytest.raises(ValueError, match="overlaps"):
        fm.logistic_f32(x[1:], x[:-1], idx)
    ro = np.empty(100, np.float32)
    ro.flags.writeable = False
    with pytest.raises((BufferError, ValueError, TypeError)):
        fm.erf_f32(x, ro, idx)
    with pytest.raises((BufferError, ValueError, TypeError)):
        fm.erf_f32(np.ones(200, np.float32)[::2], out, idx)
    with pytest.raises(TypeError):
        fm.erf_f32(x, out)
    # out may be x itself
    y = x.copy()
    assert fm.erf_f32(y, y, idx) == 0 and bits(y).tolist() == bits(exact("erf", x)).tolist()
    # the claiming form's claim buffer and chunk size
    with pytest.raises(ValueError, match="chunk must be positive"):
        fm.erf_f32(x, out, idx, np.zeros(5, np.int64), 0)
    with pytest.raises(ValueError, match="claim has 3 entries"):
        fm.erf_f32(x, out, idx, np.zeros(3, np.int64), 30)    # 4 chunks: 5 entries
    with pytest.raises(TypeError, match="claim must be an int64"):
        fm.erf_f32(x, out, idx, np.zeros(5, np.int32), 30)
    with pytest.raises(ValueError, match="overlaps"):
        fm.erf_f32(x, out, idx, idx[:5], 30)
    # a chunk past any size: one chunk, no overflow
    claim = np.zeros(2, np.int64)
    assert fm.erf_f32(x, out, idx, claim, 2**62) == 0 and claim[0] == 2
    assert bits(out).tolist() == bits(exact("erf", x)).tolist()
    # a counter past the last chunk (or negative): nothing taken
    for start in (4, -3):
        claim = np.array([start, 0, 0, 0, 0], np.int64)
        assert fm.erf_f32(x, out, idx, claim, 30) == 0 and not claim[1:].any()


@needs_c
@pytest.mark.parametrize("name", ["erf", "tanh"])
def test_claiming_calls_share_the_chunks(name):
    # The claiming form (ops/fastmath.py's threaded path): calls made at once
    # on the same buffers take the chunks between them; together they give
    # the results and flags of one plain call, each chunk's flags from its
    # first index on, their count in claim[1 + chunk].
    rng = np.random.default_rng(11)
    x = typical(name, rng, 10 * 4096 + 17)
    x[::997] = np.nan                       # flagged in every chunk
    out = np.empty_like(x)
    idx = np.empty(x.size, np.int64)
    want_n = getattr(fm, name + "_f32")(x, out, idx)
    want_out, want_idx = out.copy(), idx[:want_n].copy()
    chunk = 4096
    for calls in (1, 3):
        out[:] = 0
        claim = np.zeros(1 + -(-x.size // chunk), np.int64)
        got = []
        run_threads(lambda i: got.append(getattr(fm, name + "_f32")(x, out, idx, claim, chunk)),
                    calls)
        counts = claim[1:]
        assert sum(got) == counts.sum() == want_n and claim[0] >= counts.size
        flagged = np.concatenate([idx[c * chunk:c * chunk + k] for c, k in enumerate(counts)])
        assert np.array_equal(flagged, want_idx)
        assert np.array_equal(bits(out), bits(want_out))


@needs_c
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXACT))
def test_every_float32(name):
    # python -m pytest -m slow tests/test_fastmath.py -k every_float32
    step = 1 << 24
    slab = np.arange(step, dtype=np.uint32)
    for lo in range(0, 1 << 32, step):
        check(name, (slab + np.uint32(lo)).view(np.float32))


def _cpu_has(*features):
    from numpy._core._multiarray_umath import __cpu_features__
    return all(__cpu_features__.get(f, False) for f in features)


V4 = ("AVX512F", "AVX512BW", "AVX512DQ", "AVX512VL", "AVX512CD")
LUT = ("erf", "exp", "logistic")   # the functions with an AVX-512 loop of their own


@pytest.mark.slow
@pytest.mark.parametrize("target,lut", [("arch=x86-64-v4", 1), ("arch=x86-64-v4", 0),
                                        ("arch=x86-64-v3", 0), ("default", 0)])
def test_every_clone_gives_the_same_bits(target, lut, tmp_path):
    # python -m pytest -m slow tests/test_fastmath.py -k every_clone
    # The module is built with one target_clones target only (FM_CLONES) and
    # swept like the default run's strided sweep and branch points: the
    # AVX-512 and AVX2 clones and the default one (libm's fma) compute the
    # same float64 bits, so the same float32 results and flags. FM_LUT=0
    # leaves out the AVX-512 loops of erf, exp and logistic (erf_lut_loop,
    # ...), which compute other float64 values than the portable kernels:
    # the same float32 results, other flags.
    if shutil.which("gcc") is None or platform.machine() != "x86_64":
        pytest.skip("needs gcc on x86-64")
    need = {"arch=x86-64-v4": V4, "arch=x86-64-v3": ("AVX2", "FMA3")}.get(target, ())
    if not _cpu_has(*need):
        pytest.skip(f"this CPU cannot run {target}")
    src = pathlib.Path(fastmath.__file__).parent.parent / "_fastmath.c"
    so = tmp_path / ("_fastmath" + sysconfig.get_config_var("EXT_SUFFIX"))
    attr = "" if target == "default" else f'__attribute__((target("{target}")))'
    subprocess.run(["gcc", "-shared", "-fPIC", "-O3", "-ffp-contract=off", "-fno-math-errno",
                    f"-DFM_CLONES={attr}", f"-DFM_LUT={lut}", "-I" + sysconfig.get_paths()["include"],
                    str(src), "-lm", "-o", str(so)], check=True)
    # the host's module runs the AVX-512 loops where the CPU has x86-64-v4
    same_lut = bool(lut) == _cpu_has(*V4)
    spec = importlib.util.spec_from_file_location("_fastmath", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sweep = np.arange(0, 1 << 32, 509, dtype=np.uint64).astype(np.uint32).view(np.float32)
    for name in sorted(EXACT):
        for x in (sweep, _around(EDGES[name])):
            out = np.empty(x.size, np.float32)
            idx = np.empty(x.size, np.int64)
            n = getattr(mod, name + "_f32")(x, out, idx)
            keep = np.ones(x.size, bool)
            keep[idx[:n]] = False
            assert np.array_equal(bits(out[keep]), bits(exact(name, x[keep]))), (target, name)
            if fm is not None and (name not in LUT or same_lut):
                # and the same elements flagged as the host's clone
                idx2 = np.empty(x.size, np.int64)
                n2 = getattr(fm, name + "_f32")(x, np.empty(x.size, np.float32), idx2)
                assert np.array_equal(idx[:n], idx2[:n2]), (target, name)
