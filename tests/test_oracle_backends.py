"""The oracle's verdicts on what real backends do: Runners that model what
XLA's CUDA plugin and XLA CPU were seen doing (docs/oracle.md, "Seen on
XLA's CUDA plugin"), each next to a planted bug the verdict must still
call ``differ``.

* a Triton GEMM at DEFAULT precision: operands rounded to TF32 with ties
  away from zero (PTX cvt.rna.tf32.f32), split-K partial products;
* CUDA's approximate f32 division (within 2 ULPs, not correctly rounded);
* XLA CPU's tanh inside a fusion, a few ULPs less accurate than alone;
* an FFT computed in another order (numpy's pocketfft in complex64);
* float64 arguments without jax_enable_x64.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

from stablehlo_pjrt import oracle  # noqa: E402
from stablehlo_pjrt.oracle import causes as C  # noqa: E402

try:
    jax.devices("cpu")
except RuntimeError:  # pragma: no cover - a process limited to stablehlo_ref
    pytest.skip("the oracle needs XLA CPU in the process", allow_module_level=True)

CPU = oracle.jax_backend_runner("cpu")
RNG = np.random.default_rng(7)

_DOT = re.compile(r"^(\s*)(%\S+) = stablehlo\.dot_general (%[^,\s]+), (%[^,\s]+), "
                  r"contracting_dims = \[1\] x \[0\](?:, precision = \[[A-Z, ]+\])? : "
                  r"\(tensor<(\d+)x(\d+)xf32>, tensor<(\d+)x(\d+)xf32>\) -> "
                  r"tensor<(\d+)x(\d+)xf32>")


def _tf32(ind: str, name: str, shape: str, tag: str, mode: str) -> tuple[list[str], str]:
    """StableHLO lines rounding the f32 tensor ``name`` to TF32 by integer
    arithmetic on its bits (reduce_precision only rounds to nearest even)."""
    t, u = f"tensor<{shape}xf32>", f"tensor<{shape}xui32>"
    add = 0x1000 if mode == "nearest-away" else 0
    lines = [f"{ind}%{tag}b = stablehlo.bitcast_convert {name} : ({t}) -> {u}",
             f"{ind}%{tag}h = stablehlo.constant dense<{add}> : {u}",
             f"{ind}%{tag}m = stablehlo.constant dense<4294959104> : {u}",   # 0xFFFFE000
             f"{ind}%{tag}s = stablehlo.add %{tag}b, %{tag}h : {u}",
             f"{ind}%{tag}a = stablehlo.and %{tag}s, %{tag}m : {u}",
             f"{ind}%{tag}r = stablehlo.bitcast_convert %{tag}a : ({u}) -> {t}"]
    return lines, f"%{tag}r"


def triton_gemm(mode: str = "nearest-away", splits: int = 4, lhs_error: float = 0.0):
    """A Runner: XLA CPU running each f32 matmul as XLA's Triton GEMM on a
    GPU does at DEFAULT precision: operands rounded to TF32 (``mode``),
    K split into ``splits`` f32 partial products summed afterwards (split-K).
    ``lhs_error``: a planted bug, the lhs scaled by 1 + lhs_error first."""
    def rewrite(text: str) -> str:
        out, n = [], 0
        for line in text.splitlines():
            m = _DOT.match(line)
            if not m:
                out.append(line)
                continue
            n += 1
            ind, res, a, b = m.group(1), m.group(2), m.group(3), m.group(4)
            M, K, N = int(m.group(5)), int(m.group(6)), int(m.group(8))
            if lhs_error:
                out.append(f"{ind}%g{n}c = stablehlo.constant dense<{1 + lhs_error!r}> : "
                           f"tensor<{M}x{K}xf32>")
                out.append(f"{ind}%g{n}e = stablehlo.multiply {a}, %g{n}c : tensor<{M}x{K}xf32>")
                a = f"%g{n}e"
            la, a = _tf32(ind, a, f"{M}x{K}", f"g{n}a", mode)
            lb, b = _tf32(ind, b, f"{K}x{N}", f"g{n}b", mode)
            out += la + lb
            k = K // splits if K % splits == 0 else K
            parts = []
            for s in range(K // k):
                out.append(f"{ind}%g{n}x{s} = stablehlo.slice {a} [0:{M}, {s * k}:{s * k + k}] "
                           f": (tensor<{M}x{K}xf32>) -> tensor<{M}x{k}xf32>")
                out.append(f"{ind}%g{n}y{s} = stablehlo.slice {b} [{s * k}:{s * k + k}, 0:{N}] "
                           f": (tensor<{K}x{N}xf32>) -> tensor<{k}x{N}xf32>")
                out.append(f"{ind}%g{n}p{s} = stablehlo.dot_general %g{n}x{s}, %g{n}y{s}, "
                           f"contracting_dims = [1] x [0] : (tensor<{M}x{k}xf32>, "
                           f"tensor<{k}x{N}xf32>) -> tensor<{M}x{N}xf32>")
                parts.append(f"%g{n}p{s}")
            acc = parts[0]
            for s, p in enumerate(parts[1:]):
                nxt = res if s == len(parts) - 2 else f"%g{n}q{s}"
                out.append(f"{ind}{nxt} = stablehlo.add {acc}, {p} : tensor<{M}x{N}xf32>")
                acc = nxt
            if len(parts) == 1:
                out.append(f"{ind}{res} = stablehlo.add {acc}, %g{n}z : tensor<{M}x{N}xf32>")
                out.insert(-1, f"{ind}%g{n}z = stablehlo.constant dense<0.0> : "
                               f"tensor<{M}x{N}xf32>")
        return "\n".join(out)

    def run(text, args):
        return CPU(rewrite(text), args)
    run.__name__ = f"triton-gemm-{mode}"
    return run


def _with_ties(shape) -> np.ndarray:
    """Random f32 values, a quarter of them halfway between two TF32 values
    (their dropped 13 bits 0x1000: data with short mantissas has many), where
    the TF32 roundings to nearest even and away from zero differ."""
    a = RNG.standard_normal(shape).astype(np.float32)
    bits = a.view(np.uint32)
    tie = RNG.random(shape) < 0.25
    bits[tie] = (bits[tie] & np.uint32(0xFFFFE000)) | np.uint32(0x1000)
    return a


def test_tf32_rounding_flavours():
    x = np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, -(1 + 2.0 ** -11), 1 + 2.0 ** -12],
                 np.float32)
    assert C.round_mantissa(x, 10).tolist() == [1, 1 + 2.0 ** -9, -1, 1]
    assert C.round_mantissa(x, 10, "nearest-away").tolist() == \
        [1 + 2.0 ** -10, 1 + 2.0 ** -9, -(1 + 2.0 ** -10), 1]
    assert C.round_mantissa(x, 10, "toward-zero").tolist() == \
        [1, 1 + 2.0 ** -10, -1, 1]
    with pytest.raises(ValueError, match="rounding mode"):
        C.round_mantissa(x, 10, "up")


@pytest.mark.parametrize("mode", ["nearest-away", "toward-zero"])
def test_triton_split_k_tf32_dot_is_reduced_precision_inputs(mode):
    a, b = _with_ties((64, 512)), _with_ties((512, 64))
    rep = oracle.compare(lambda a, b: a @ b, a, b, against=triton_gemm(mode))
    assert rep.verdict == "explained", str(rep)
    assert rep.causes == {"reduced-precision-inputs"}, str(rep)
    how = {"nearest-away": "ties away from zero", "toward-zero": "toward zero"}[mode]
    assert "tf32" in str(rep) and how in str(rep), str(rep)
    # At HIGHEST the same backend is wrong.
    hi = oracle.compare(lambda a, b: jnp.matmul(a, b, precision=lax.Precision.HIGHEST),
                        a, b, against=triton_gemm(mode))
    assert hi.verdict == "differ", str(hi)


def test_a_dot_wrong_beyond_tf32_still_differs():
    a, b = _with_ties((64, 512)), _with_ties((512, 64))
    # The lhs off by 2^-9 relative: more than TF32's rounding (2^-11) explains.
    rep = oracle.compare(lambda a, b: a @ b, a, b,
                         against=triton_gemm("nearest-away", lhs_error=2.0 ** -9))
    assert rep.verdict == "differ", str(rep)
    assert "dot_general" in str(rep)


@pytest.fixture
def without_x64():
    # Other test modules turn jax_enable_x64 on at collection.
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    yield
    jax.config.update("jax_enable_x64", before)


def test_float64_arguments_are_canonicalised_as_jit_does(without_x64):
    # Without jax_enable_x64, jit runs a float64 argument as float32.
    assert not jax.config.jax_enable_x64
    a = RNG.standard_normal((32, 32))
    rep = oracle.compare(lambda a, b: a @ b, a, a, against="cpu")
    assert rep.ok and rep.outputs[0].dtype == "float32", str(rep)
    assert oracle.first_divergence(lambda a, b: a @ b, a, a, against="cpu") is None
    # A Python scalar keeps its weak type: x * 2.5 stays bf16.
    x = RNG.standard_normal(16).astype(jnp.bfloat16)
    rep = oracle.compare(lambda x, s: x * s, x, 2.5, against="cpu")
    assert rep.ok and rep.outputs[0].dtype == "bfloat16", str(rep)
    i = np.arange(8, dtype=np.int64)
    assert oracle.compare(lambda i: i * 3, i, against="cpu").verdict == "identical"


def _ulps_away(ind: str, res: str, op: str, t: str, ulps: int, tag: str) -> list[str]:
    """StableHLO lines computing ``res = op : t`` (f32) and then moving it
    ``ulps`` ULPs away from zero (integer arithmetic on its bits)."""
    u = t.replace("xf32>", "xui32>")
    return [f"{ind}%{tag}q = {op} : {t}",
            f"{ind}%{tag}b = stablehlo.bitcast_convert %{tag}q : ({t}) -> {u}",
            f"{ind}%{tag}k = stablehlo.constant dense<{ulps}> : {u}",
            f"{ind}%{tag}s = stablehlo.add %{tag}b, %{tag}k : {u}",
            f"{ind}{res} = stablehlo.bitcast_convert %{tag}s : ({u}) -> {t}"]


_DIV = re.compile(r"^(\s*)(%\S+) = stablehlo\.divide (%[^,\s]+), (%[^,\s]+) : "
                  r"(tensor<[^>]*xf32>)")


def approximate_division(ulps: int = 1):
    """A Runner: XLA CPU with each f32 quotient moved ``ulps`` ULPs away
    from zero after its correct rounding (integer arithmetic on its bits).
    One ULP: 0.5 to 1.5 ULPs from the exact quotient, an approximate
    division within the 2 ULPs CUDA's div.full.f32 errs by (1.98 on the
    captured data); more: a planted bug."""
    def rewrite(text: str) -> str:
        out = []
        for n, line in enumerate(text.splitlines()):
            m = _DIV.match(line)
            if not m:
                out.append(line)
                continue
            ind, res, x, y, t = m.groups()
            out += _ulps_away(ind, res, f"stablehlo.divide {x}, {y}", t, ulps, f"d{n}")
        return "\n".join(out)

    def run(text, args):
        return CPU(rewrite(text), args)
    run.__name__ = "approximate-division"
    return run


def test_approximate_division_is_named():
    x = RNG.standard_normal(20_000).astype(np.float32)
    y = RNG.uniform(0.01, 5, 20_000).astype(np.float32)
    rep = oracle.compare(lambda x, y: x / y, x, y, against=approximate_division())
    assert rep.verdict == "explained", str(rep)
    assert rep.causes == {"approximate-division"}, str(rep)
    assert "not correctly rounded" in str(rep)
    # Where IEEE division is required.
    strict = oracle.compare(lambda x, y: x / y, x, y, against=approximate_division(),
                            forbid=["approximate-division"])
    assert strict.verdict == "differ", str(strict)
    # 3.5 to 4.5 ULPs off: a wrong division.
    bug = oracle.compare(lambda x, y: x / y, x, y,
                         against=approximate_division(4))
    assert bug.verdict == "differ", str(bug)
    assert "more than an approximate division" in str(bug)
    d = oracle.first_divergence(lambda x, y: x / y, x, y,
                                against=approximate_division(4))
    assert d is not None and d.op is not None and "divide" in str(d)


_TANH = re.compile(r"^(\s*)(%\S+) = stablehlo\.tanh (%[^\s]+) : (tensor<[^>]*xf32>)")


def tanh_in_fusion(ulps: int):
    """A Runner: XLA CPU with each f32 tanh whose operand is computed in the
    module (not a parameter: inside a fusion, not run alone) moved ``ulps``
    ULPs away from zero: XLA CPU's tanh in jax.nn.gelu's fusion errs by 4
    ULPs where its tanh alone is correctly rounded."""
    def rewrite(text: str) -> str:
        out = []
        for n, line in enumerate(text.splitlines()):
            m = _TANH.match(line)
            if not m or m.group(3).startswith("%arg"):
                out.append(line)
                continue
            ind, res, x, t = m.groups()
            out += _ulps_away(ind, res, f"stablehlo.tanh {x}", t, ulps, f"t{n}")
        return "\n".join(out)

    def run(text, args):
        return CPU(rewrite(text), args)
    run.__name__ = f"tanh-in-fusion-{ulps}"
    return run


def test_gelu_with_a_less_accurate_fused_tanh_is_transcendental_accuracy():
    # x near -3.3: 1 + tanh(...) cancels, amplifying tanh's error ~1000x.
    # (|tanh| stays below 1 even 4 ULPs away from zero: |x| < 4.5.)
    x = np.concatenate([RNG.uniform(-3.6, -3.0, 2000), RNG.uniform(-4.5, 4.5, 2000)])
    x = x.astype(np.float32)
    rep = oracle.compare(jax.nn.gelu, x, against=tanh_in_fusion(4))
    assert rep.verdict == "explained", str(rep)
    assert rep.causes == {"transcendental-accuracy"}, str(rep)
    assert "tanh" in str(rep)
    bug = oracle.compare(jax.nn.gelu, x, against=tanh_in_fusion(1 << 16))
    assert bug.verdict == "differ", str(bug)


def radix2_fft(wrong_twiddle: int | None = None):
    """A Runner for a module that is one complex64 FFT of a power-of-two
    length (the program and its isolated op alike): an iterative radix-2
    FFT in complex64, log2(n) butterfly stages, with twiddles rounded to
    complex64: another legitimate order than the reference's (complex128,
    rounded once). ``wrong_twiddle``: a planted bug, the last stage's
    twiddle at that index taken one step too far (w^(k+1))."""
    def run(text, args):
        assert "stablehlo.fft" in text and len(args) == 1
        x = np.asarray(args[0], np.complex64)
        n = x.shape[-1]
        bits = int(np.log2(n))
        rev = np.array([int(f"{i:0{bits}b}"[::-1], 2) for i in range(n)])
        y = x[..., rev]
        m = 2
        while m <= n:
            w = np.exp(-2j * np.pi * np.arange(m // 2) / m)
            if wrong_twiddle is not None and m == n:
                w[wrong_twiddle] = np.exp(-2j * np.pi * (wrong_twiddle + 1) / m)
            w = w.astype(np.complex64)
            y = y.reshape(y.shape[:-1] + (n // m, m))
            even, odd = y[..., : m // 2], y[..., m // 2:] * w
            y = np.concatenate([even + odd, even - odd], axis=-1).reshape(x.shape)
            m *= 2
        return [y.astype(np.complex64)]
    run.__name__ = "radix2-fft" if wrong_twiddle is None else "radix2-fft-bug"
    return run


def test_fft_in_another_order_is_within_its_bound():
    z = (RNG.standard_normal(4096) + 1j * RNG.standard_normal(4096)).astype(np.complex64)
    rep = oracle.compare(jnp.fft.fft, z, against=radix2_fft())
    assert rep.ok and rep.verdict in ("agree", "explained"), str(rep)
    rep = oracle.compare(jnp.fft.fft, z, against="cpu")
    assert rep.ok, str(rep)
    # One twiddle of 2048 off by one step (2*pi/4096): two outputs wrong.
    bug = oracle.compare(jnp.fft.fft, z, against=radix2_fft(wrong_twiddle=1000))
    assert bug.verdict == "differ", str(bug)
    assert "stablehlo.fft" in str(bug) and "FFT of length [4096]" in str(bug)


def test_fft_bound_covers_inverse_and_real_transforms():
    from stablehlo_pjrt.oracle.bounds import fft_allowed
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    for kind, arg, dtype, ref in (
            ("RFFT", x, np.complex64, np.fft.rfft(x).astype(np.complex64)),
            ("IFFT", x.astype(np.complex64), np.complex64, np.fft.ifft(x).astype(np.complex64)),
            ("IRFFT", np.fft.rfft(x).astype(np.complex64), np.float32,
             np.fft.irfft(np.fft.rfft(x).astype(np.complex64), 64).astype(np.float32))):
        exact, allowed = fft_allowed(kind, [64], arg, dtype)
        assert exact.shape == ref.shape and np.all(np.abs(ref - exact) <= allowed), kind
        assert np.all(allowed < 1e-4 * np.max(np.abs(exact))), kind
    y = np.fft.rfft(x).astype(np.complex64)
    assert oracle.compare(lambda v: jnp.fft.irfft(v, 64), y, against="cpu").ok
