"""fft, cholesky, triangular_solve, batch_norm_* and the linalg custom calls.

Results are compared with XLA CPU running the same StableHLO text (through
the jax CPU client) or with numpy / scipy.
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import scipy.fft
import scipy.linalg as sl
from testkit import run_xla_cpu

import stablehlo_interpreter as shi

jax.config.update("jax_enable_x64", True)

CPU = jax.devices("cpu")[0]
RS = np.random.default_rng(0)


def lower_default(f, *args, without=()):
    """StableHLO of f as JAX lowers it for a platform without its own rules.

    ``without``: primitive names whose stablehlo_ref rule
    (stablehlo_pjrt/lowerings.py, e.g. geqrf -> LAPACK) is set aside for this
    lowering, so that JAX's platform-independent rule is what gets lowered.
    """
    from jax._src.interpreters import mlir
    rules = mlir._platform_specific_lowerings["stablehlo_ref"]
    saved = {p: rules.pop(p) for p in list(rules) if p.name in without}
    try:
        return jax.jit(f).trace(*args).lower(lowering_platforms=("stablehlo_ref",)).as_text()
    finally:
        rules.update(saved)


def assert_close(got, want, rtol, atol=0.0):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype,
                                                                  got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.complex128), want.astype(np.complex128),
                               rtol=rtol, atol=atol)


def rand(shape, dtype):
    x = RS.normal(size=shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * RS.normal(size=shape)
    return x.astype(dtype)


# --------------------------------------------------------------------------
# fft

FFT_CASES = [
    ("FFT", "3x4x5xcomplex<f32>", "3x4x5xcomplex<f32>", [4, 5], np.complex64),
    ("IFFT", "3x4x5xcomplex<f64>", "3x4x5xcomplex<f64>", [3, 4, 5], np.complex128),
    ("RFFT", "3x4x6xf32", "3x4x4xcomplex<f32>", [4, 6], np.float32),
    ("IRFFT", "3x4x4xcomplex<f32>", "3x4x6xf32", [4, 6], np.complex64),
    ("IRFFT", "3x4x4xcomplex<f64>", "3x4x7xf64", [7], np.complex128),
    ("RFFT", "2x7xf64", "2x4xcomplex<f64>", [7], np.float64),
]


@pytest.mark.parametrize("kind,tin,tout,length,dtype", FFT_CASES)
def test_fft_matches_xla_cpu(kind, tin, tout, length, dtype):
    text = f"""func.func @main(%a: tensor<{tin}>) -> tensor<{tout}> {{
      %r = stablehlo.fft %a, type = {kind}, length = {length} : (tensor<{tin}>) -> tensor<{tout}>
      return %r : tensor<{tout}>
    }}"""
    shape = tuple(int(d) for d in tin.split("x")[:-1] if d.isdigit())
    a = rand(shape, dtype)
    got = shi.compile(text).run(a)[0]
    want = run_xla_cpu(text, a)[0]
    eps = 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12
    assert_close(got, want, rtol=0, atol=eps * np.abs(want).max())


def test_fft_definitions_against_numpy():
    text = """func.func @main(%a: tensor<8xcomplex<f64>>, %r: tensor<8xf64>) -> (tensor<8xcomplex<f64>>, tensor<8xcomplex<f64>>, tensor<5xcomplex<f64>>, tensor<8xf64>) {
      %f = stablehlo.fft %a, type = FFT, length = [8] : (tensor<8xcomplex<f64>>) -> tensor<8xcomplex<f64>>
      %i = stablehlo.fft %a, type = IFFT, length = [8] : (tensor<8xcomplex<f64>>) -> tensor<8xcomplex<f64>>
      %rf = stablehlo.fft %r, type = RFFT, length = [8] : (tensor<8xf64>) -> tensor<5xcomplex<f64>>
      %ir = stablehlo.fft %rf, type = IRFFT, length = [8] : (tensor<5xcomplex<f64>>) -> tensor<8xf64>
      return %f, %i, %rf, %ir : tensor<8xcomplex<f64>>, tensor<8xcomplex<f64>>, tensor<5xcomplex<f64>>, tensor<8xf64>
    }"""
    a = rand((8,), np.complex128)
    r = rand((8,), np.float64)
    f, i, rf, ir = shi.compile(text).run(a, r)
    np.testing.assert_allclose(f, np.fft.fft(a), atol=1e-12)
    np.testing.assert_allclose(i, np.fft.ifft(a), atol=1e-12)
    np.testing.assert_allclose(rf, np.fft.rfft(r), atol=1e-12)
    np.testing.assert_allclose(ir, r, atol=1e-12)  # IRFFT inverts RFFT


def test_fft_empty_batch():
    text = """func.func @main(%a: tensor<0x4xcomplex<f32>>) -> tensor<0x4xcomplex<f32>> {
      %r = stablehlo.fft %a, type = FFT, length = [4] : (tensor<0x4xcomplex<f32>>) -> tensor<0x4xcomplex<f32>>
      return %r : tensor<0x4xcomplex<f32>>
    }"""
    out = shi.compile(text).run(np.zeros((0, 4), np.complex64))[0]
    assert out.shape == (0, 4) and out.dtype == np.complex64


def _rfft_program(shape, et):
    n = shape[-1]
    tin = "x".join(map(str, shape)) + f"x{et}"
    tout = "x".join(map(str, shape[:-1] + (n // 2 + 1,))) + "xcomplex<f32>"
    return f"""func.func @main(%a: tensor<{tin}>) -> tensor<{tout}> {{
      %r = stablehlo.fft %a, type = RFFT, length = [{n}] : (tensor<{tin}>) -> tensor<{tout}>
      return %r : tensor<{tout}>
    }}"""


def _assert_rounded_double_rfft(got, x):
    """Each component within half an f32 ulp of the double-precision
    transform, plus double rounding noise (1e-14 of the rms value)."""
    exact = scipy.fft.rfft(x.astype(np.float64), axis=-1)
    noise = 1e-14 * np.sqrt(np.mean(np.abs(exact) ** 2)) if exact.size else 0
    for g, e in ((got.real, exact.real), (got.imag, exact.imag)):
        half_ulp = np.spacing(np.abs(e).astype(np.float32)).astype(np.float64) / 2
        assert np.all(np.abs(g.astype(np.float64) - e) <= half_ulp + noise)


@pytest.mark.parametrize("shape", [(2,), (4,), (6,), (10,), (64,), (1000,), (3, 12), (2, 1, 34)])
def test_rfft_as_half_length_complex_transform(monkeypatch, shape):
    """The even-length RFFT through a complex FFT of half the length
    (ops/fft.py _rfft_half), forced for small sizes, in blocks of 3
    coefficients: the double-precision transform rounded once."""
    from stablehlo_interpreter.ops import fft as fft_mod
    monkeypatch.setattr(fft_mod, "_HALF_RFFT_MIN", 0)
    monkeypatch.setattr(fft_mod, "_HALF_BLOCK", 3)
    calls = []
    real = fft_mod._rfft_half
    monkeypatch.setattr(fft_mod, "_rfft_half", lambda *a: (calls.append(1), real(*a))[1])
    x = rand(shape, np.float32)
    got = shi.compile(_rfft_program(shape, "f32")).run(x)[0]
    assert calls and got.dtype == np.complex64 and got.shape == shape[:-1] + (shape[-1] // 2 + 1,)
    _assert_rounded_double_rfft(got, x)


def test_rfft_half_length_path_from_its_threshold_and_not_for_odd_or_f64(monkeypatch):
    from stablehlo_interpreter.ops import fft as fft_mod
    calls = []
    real = fft_mod._rfft_half
    monkeypatch.setattr(fft_mod, "_rfft_half", lambda *a: (calls.append(1), real(*a))[1])
    n = fft_mod._HALF_RFFT_MIN
    x = rand((n,), np.float32)
    got = shi.compile(_rfft_program((n,), "f32")).run(x)[0]
    assert calls == [1]
    _assert_rounded_double_rfft(got, x)
    icalls = []
    ireal = fft_mod._irfft_half
    monkeypatch.setattr(fft_mod, "_irfft_half", lambda *a: (icalls.append(1), ireal(*a))[1])
    text = f"""func.func @main(%a: tensor<{n // 2 + 1}xcomplex<f32>>) -> tensor<{n}xf32> {{
      %r = stablehlo.fft %a, type = IRFFT, length = [{n}] : (tensor<{n // 2 + 1}xcomplex<f32>>) -> tensor<{n}xf32>
      return %r : tensor<{n}xf32>
    }}"""
    back = shi.compile(text).run(got)[0]
    assert icalls == [1]
    np.testing.assert_allclose(back, x, rtol=0, atol=1e-5 * np.abs(x).max())   # IRFFT inverts RFFT
    monkeypatch.setattr(fft_mod, "_HALF_RFFT_MIN", 0)
    for shape, et, dtype, tout in (((7,), "f32", np.float32, "4xcomplex<f32>"),
                                   ((8,), "f64", np.float64, "5xcomplex<f64>")):
        text = f"""func.func @main(%a: tensor<{shape[0]}x{et}>) -> tensor<{tout}> {{
          %r = stablehlo.fft %a, type = RFFT, length = [{shape[0]}] : (tensor<{shape[0]}x{et}>) -> tensor<{tout}>
          return %r : tensor<{tout}>
        }}"""
        y = rand(shape, dtype)
        r = shi.compile(text).run(y)[0]
        np.testing.assert_allclose(r, scipy.fft.rfft(y.astype(np.float64)), rtol=1e-6)
    assert calls == [1]


@pytest.mark.parametrize("shape", [(2,), (4,), (6,), (10,), (64,), (1000,), (3, 12), (2, 1, 34)])
def test_irfft_as_half_length_complex_transform(monkeypatch, shape):
    """The even-length IRFFT through a complex inverse FFT of half the length
    (ops/fft.py _irfft_half), forced for small sizes, in blocks of 3: the
    double-precision inverse rounded once; the imaginary parts of X[0] and
    X[N/2] ignored as by the real transform."""
    from stablehlo_interpreter.ops import fft as fft_mod
    monkeypatch.setattr(fft_mod, "_HALF_RFFT_MIN", 0)
    monkeypatch.setattr(fft_mod, "_HALF_BLOCK", 3)
    calls = []
    real = fft_mod._irfft_half
    monkeypatch.setattr(fft_mod, "_irfft_half", lambda *a: (calls.append(1), real(*a))[1])
    n = shape[-1]
    cshape = shape[:-1] + (n // 2 + 1,)
    x = rand(cshape, np.complex64)          # X[0] and X[N/2] with imaginary parts
    tin = "x".join(map(str, cshape)) + "xcomplex<f32>"
    tout = "x".join(map(str, shape)) + "xf32"
    text = f"""func.func @main(%a: tensor<{tin}>) -> tensor<{tout}> {{
      %r = stablehlo.fft %a, type = IRFFT, length = [{n}] : (tensor<{tin}>) -> tensor<{tout}>
      return %r : tensor<{tout}>
    }}"""
    got = shi.compile(text).run(x)[0]
    assert calls and got.dtype == np.float32 and got.shape == shape
    exact = scipy.fft.irfft(x.astype(np.complex128), n, axis=-1)
    noise = 1e-14 * np.sqrt(np.mean(exact ** 2))
    half_ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64) / 2
    assert np.all(np.abs(got.astype(np.float64) - exact) <= half_ulp + noise)


# --------------------------------------------------------------------------
# cholesky

CHOL_TEXT = """func.func @main(%m: tensor<{s}>) -> (tensor<{s}>, tensor<{s}>) {{
  %l = "stablehlo.cholesky"(%m) {{lower = true}} : (tensor<{s}>) -> tensor<{s}>
  %u = "stablehlo.cholesky"(%m) {{lower = false}} : (tensor<{s}>) -> tensor<{s}>
  return %l, %u : tensor<{s}>, tensor<{s}>
}}"""


@pytest.mark.parametrize("et,dtype,rtol", [("f32", np.float32, 1e-5), ("f64", np.float64, 1e-12),
                                           ("complex<f64>", np.complex128, 1e-12)])
def test_cholesky_matches_xla_cpu(et, dtype, rtol):
    b = rand((3, 4, 4), dtype)
    spd = b @ np.conj(np.swapaxes(b, -1, -2)) + 4 * np.eye(4)
    # Batch element 1 is not positive definite: all NaN, as XLA.
    spd[1] = -spd[1]
    spd = spd.astype(dtype)
    text = CHOL_TEXT.format(s=f"3x4x4x{et}")
    got = shi.compile(text).run(spd)
    want = run_xla_cpu(text, spd)
    for g, w in zip(got, want):
        assert np.isnan(g[1]).all() and np.isnan(w[1]).all()
        assert_close(g[[0, 2]], w[[0, 2]], rtol=rtol, atol=rtol)
    lower, upper = got
    np.testing.assert_allclose(lower[2] @ np.conj(lower[2].T), spd[2], rtol=rtol * 10)
    assert (np.triu(lower[2], 1) == 0).all() and (np.tril(upper[2], -1) == 0).all()


def test_cholesky_reads_only_its_triangle():
    a = np.array([[4.0, 100.0], [2.0, 5.0]])
    text = CHOL_TEXT.format(s="2x2xf64")
    lower, upper = shi.compile(text).run(a)
    np.testing.assert_allclose(lower, [[2.0, 0.0], [1.0, 2.0]])
    # Upper reads [[4, 100], [., 5]]: not positive definite.
    assert np.isnan(upper).all()


# --------------------------------------------------------------------------
# triangular_solve


def _trsm_module(et):
    lines, rets, types, cases = [], [], [], []
    for left in ("true", "false"):
        for lower in ("true", "false"):
            for unit in ("true", "false"):
                for trans in ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"):
                    i = len(cases)
                    bt = f"tensor<2x4x3x{et}>" if left == "true" else f"tensor<2x3x4x{et}>"
                    b = "%bl" if left == "true" else "%br"
                    lines.append(
                        f'  %r{i} = "stablehlo.triangular_solve"(%a, {b}) {{left_side = {left}, '
                        f"lower = {lower}, unit_diagonal = {unit}, transpose_a = "
                        f"#stablehlo<transpose {trans}>}} : (tensor<2x4x4x{et}>, {bt}) -> {bt}")
                    rets.append(f"%r{i}")
                    types.append(bt)
                    cases.append((left, lower, unit, trans))
    text = (f"func.func @main(%a: tensor<2x4x4x{et}>, %bl: tensor<2x4x3x{et}>, "
            f"%br: tensor<2x3x4x{et}>) -> ({', '.join(types)}) {{\n" + "\n".join(lines)
            + f"\n  return {', '.join(rets)} : {', '.join(types)}\n}}")
    return text, cases


@pytest.mark.parametrize("et,dtype,rtol", [("f32", np.float32, 2e-5),
                                           ("complex<f64>", np.complex128, 1e-12)])
def test_triangular_solve_matches_xla_cpu(et, dtype, rtol):
    text, cases = _trsm_module(et)
    a = (rand((2, 4, 4), dtype) + 4 * np.eye(4)).astype(dtype)
    bl = rand((2, 4, 3), dtype)
    br = rand((2, 3, 4), dtype)
    got = shi.compile(text).run(a, bl, br)
    want = run_xla_cpu(text, a, bl, br)
    for g, w, case in zip(got, want, cases):
        assert g.dtype == w.dtype, case
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, err_msg=str(case))


def test_triangular_solve_spec_semantics():
    # Left, lower, ADJOINT: solves conj(tril(a)).T @ x = b; the upper triangle
    # of `a` is ignored, the unit diagonal is implicit when asked for.
    a = np.array([[2 + 1j, 99], [1 - 1j, 3]], dtype=np.complex128)
    b = np.array([[1 + 2j], [3 - 1j]], dtype=np.complex128)
    text = """func.func @main(%a: tensor<2x2xcomplex<f64>>, %b: tensor<2x1xcomplex<f64>>) -> (tensor<2x1xcomplex<f64>>, tensor<2x1xcomplex<f64>>) {
      %x = "stablehlo.triangular_solve"(%a, %b) {left_side = true, lower = true, unit_diagonal = false, transpose_a = #stablehlo<transpose ADJOINT>} : (tensor<2x2xcomplex<f64>>, tensor<2x1xcomplex<f64>>) -> tensor<2x1xcomplex<f64>>
      %y = "stablehlo.triangular_solve"(%a, %b) {left_side = true, lower = true, unit_diagonal = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>} : (tensor<2x2xcomplex<f64>>, tensor<2x1xcomplex<f64>>) -> tensor<2x1xcomplex<f64>>
      return %x, %y : tensor<2x1xcomplex<f64>>, tensor<2x1xcomplex<f64>>
    }"""
    x, y = shi.compile(text).run(a, b)
    np.testing.assert_allclose(np.conj(np.tril(a)).T @ x, b, atol=1e-12)
    unit = np.tril(a, -1) + np.eye(2)
    np.testing.assert_allclose(unit @ y, b, atol=1e-12)


def test_triangular_solve_singular_gives_inf_not_error():
    text = """func.func @main(%a: tensor<2x2xf32>, %b: tensor<2x1xf32>) -> tensor<2x1xf32> {
      %x = "stablehlo.triangular_solve"(%a, %b) {left_side = true, lower = true, unit_diagonal = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>} : (tensor<2x2xf32>, tensor<2x1xf32>) -> tensor<2x1xf32>
      return %x : tensor<2x1xf32>
    }"""
    a = np.array([[0, 0], [1, 1]], np.float32)
    b = np.array([[1], [1]], np.float32)
    x = shi.compile(text).run(a, b)[0]
    assert np.isinf(x[0, 0]) and not np.isfinite(x[1, 0])


def test_triangular_solve_bf16_rounds_once():
    text = """func.func @main(%a: tensor<2x2xbf16>, %b: tensor<2x1xbf16>) -> tensor<2x1xbf16> {
      %x = "stablehlo.triangular_solve"(%a, %b) {left_side = true, lower = false, unit_diagonal = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>} : (tensor<2x2xbf16>, tensor<2x1xbf16>) -> tensor<2x1xbf16>
      return %x : tensor<2x1xbf16>
    }"""
    a = np.array([[3, 1], [0, 7]], ml_dtypes.bfloat16)
    b = np.array([[1], [2]], ml_dtypes.bfloat16)
    x = shi.compile(text).run(a, b)[0]
    exact = np.linalg.solve(a.astype(np.float64), b.astype(np.float64))
    assert x.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(x, exact.astype(ml_dtypes.bfloat16))


def _trsm_reference(a, b, left, lower, unit, trans):
    """op(tri(a)) x = b (left) or x op(tri(a)) = b, solved in float64/complex128."""
    m = np.tril(a) if lower else np.triu(a)
    if unit:
        m = m - np.diag(np.diag(m)) + np.eye(len(m))
    m = {"NO_TRANSPOSE": m, "TRANSPOSE": m.T, "ADJOINT": np.conj(m).T}[trans]
    return np.linalg.solve(m, b) if left else np.linalg.solve(m.T, b.T).T


@pytest.mark.parametrize("et,dtype,tol", [("f32", np.float32, 1e-5), ("f64", np.float64, 1e-12),
                                          ("complex<f64>", np.complex128, 1e-12)])
def test_triangular_solve_one_matrix_every_form(et, dtype, tol):
    # One matrix (no batch) takes trsm on the row-major operands' transposes
    # (a right-side solve for a left-side one): every side, triangle, unit
    # diagonal and transpose, with a non-square b and an operand that is a
    # transposed view (the transpose op's result), against numpy's solve and
    # bit for bit against the same matrix solved as a batch of one.
    cdt = np.complex128 if dtype == np.complex128 else np.float64
    a = (rand((5, 5), dtype) + 6 * np.eye(5)).astype(dtype)
    bl, br = rand((5, 3), dtype), rand((3, 5), dtype)
    for left in (True, False):
        for lower in (True, False):
            for unit in (True, False):
                for trans in ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"):
                    bt = f"5x3x{et}" if left else f"3x5x{et}"
                    attrs = (f"left_side = {str(left).lower()}, lower = {str(lower).lower()}, "
                             f"unit_diagonal = {str(unit).lower()}, "
                             f"transpose_a = #stablehlo<transpose {trans}>")
                    text = f"""func.func @main(%a: tensor<5x5x{et}>, %b: tensor<{bt}>, %a1: tensor<1x5x5x{et}>, %b1: tensor<1x{bt}>) -> (tensor<{bt}>, tensor<{bt}>, tensor<1x{bt}>) {{
  %x = "stablehlo.triangular_solve"(%a, %b) {{{attrs}}} : (tensor<5x5x{et}>, tensor<{bt}>) -> tensor<{bt}>
  %at = stablehlo.transpose %a, dims = [1, 0] : (tensor<5x5x{et}>) -> tensor<5x5x{et}>
  %y = "stablehlo.triangular_solve"(%at, %b) {{{attrs}}} : (tensor<5x5x{et}>, tensor<{bt}>) -> tensor<{bt}>
  %z = "stablehlo.triangular_solve"(%a1, %b1) {{{attrs}}} : (tensor<1x5x5x{et}>, tensor<1x{bt}>) -> tensor<1x{bt}>
  return %x, %y, %z : tensor<{bt}>, tensor<{bt}>, tensor<1x{bt}>
}}"""
                    b = bl if left else br
                    x, y, z = shi.compile(text).run(a, b, a[None], b[None])
                    case = (left, lower, unit, trans)
                    assert x.dtype == dtype and x.flags.c_contiguous, case
                    want = _trsm_reference(a.astype(cdt), b.astype(cdt), *case)
                    np.testing.assert_allclose(x, want, rtol=tol, atol=tol, err_msg=str(case))
                    want_t = _trsm_reference(a.T.astype(cdt), b.astype(cdt), *case)
                    np.testing.assert_allclose(y, want_t, rtol=tol, atol=tol, err_msg=str(case))
                    np.testing.assert_array_equal(x, z[0], err_msg=str(case))


@pytest.mark.parametrize("shape,et,dtype", [((6, 6), "f32", np.float32), ((4, 6), "f64", np.float64),
                                            ((6, 4), "complex<f32>", np.complex64)])
def test_lu_custom_call_one_matrix_and_batch_agree(shape, et, dtype):
    # One matrix takes its own path (no batch staging); a batch of two
    # holding it twice must give the same bits, and both are LAPACK's getrf
    # in double precision rounded once.
    m, n = shape
    k = min(m, n)
    a = rand(shape, dtype)
    t1 = f"tensor<{m}x{n}x{et}>"
    t2 = f"tensor<2x{m}x{n}x{et}>"
    text = f"""func.func @main(%a: {t1}, %b: {t2}) -> ({t1}, tensor<{k}xi32>, tensor<{m}xi32>, {t2}, tensor<2x{k}xi32>, tensor<2x{m}xi32>) {{
  %0:3 = stablehlo.custom_call @stablehlo_ref.lu(%a) : ({t1}) -> ({t1}, tensor<{k}xi32>, tensor<{m}xi32>)
  %1:3 = stablehlo.custom_call @stablehlo_ref.lu(%b) : ({t2}) -> ({t2}, tensor<2x{k}xi32>, tensor<2x{m}xi32>)
  return %0#0, %0#1, %0#2, %1#0, %1#1, %1#2 : {t1}, tensor<{k}xi32>, tensor<{m}xi32>, {t2}, tensor<2x{k}xi32>, tensor<2x{m}xi32>
}}"""
    lu, piv, perm, lu2, piv2, perm2 = shi.compile(text).run(a, np.stack([a, a]))
    cdt = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    f, p, info = sl.lapack.get_lapack_funcs(("getrf",), (a.astype(cdt),))[0](a.astype(cdt))
    assert lu.dtype == dtype and lu.flags.c_contiguous and piv.dtype == perm.dtype == np.int32
    np.testing.assert_array_equal(lu, f.astype(dtype))
    np.testing.assert_array_equal(piv, p)
    rows = list(range(m))
    for i, j in enumerate(p):
        rows[i], rows[j] = rows[j], rows[i]
    np.testing.assert_array_equal(perm, rows)
    for i in range(2):
        np.testing.assert_array_equal(lu2[i], lu)
        np.testing.assert_array_equal(piv2[i], piv)
        np.testing.assert_array_equal(perm2[i], perm)


# --------------------------------------------------------------------------
# batch norm

BN_TEXT = """func.func @main(%x: tensor<2x3x4xf32>, %s: tensor<3xf32>, %o: tensor<3xf32>, %dy: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<2x3x4xf32>) {
  %out, %m, %v = "stablehlo.batch_norm_training"(%x, %s, %o) {epsilon = 0.001 : f32, feature_index = 1 : i64} : (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>)
  %g:3 = "stablehlo.batch_norm_grad"(%x, %s, %m, %v, %dy) {epsilon = 0.001 : f32, feature_index = 1 : i64} : (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>)
  %i = "stablehlo.batch_norm_inference"(%x, %s, %o, %m, %v) {epsilon = 0.001 : f32, feature_index = 1 : i64} : (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x4xf32>
  return %out, %m, %v, %g#0, %g#1, %g#2, %i : tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<2x3x4xf32>
}"""


def test_batch_norm_matches_xla_cpu_and_formulas():
    x = rand((2, 3, 4), np.float32)
    s, o = rand((3,), np.float32), rand((3,), np.float32)
    dy = rand((2, 3, 4), np.float32)
    got = shi.compile(BN_TEXT).run(x, s, o, dy)
    want = run_xla_cpu(BN_TEXT, x, s, o, dy)
    for g, w in zip(got, want):
        assert_close(g, w, rtol=1e-5, atol=1e-5)
    out, mean, var = got[:3]
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(mean, x64.mean(axis=(0, 2)), rtol=1e-6)
    np.testing.assert_allclose(var, x64.var(axis=(0, 2)), rtol=1e-5)
    norm = (x64 - mean[None, :, None]) / np.sqrt(var[None, :, None] + 0.001)
    np.testing.assert_allclose(out, norm * s[None, :, None] + o[None, :, None], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[6], out, rtol=1e-5, atol=1e-6)  # inference with batch stats
    np.testing.assert_allclose(got[5], dy.sum(axis=(0, 2)), rtol=1e-5)  # grad_offset


# --------------------------------------------------------------------------
# custom calls from JAX's default (platform-independent) lowerings


@pytest.mark.parametrize("mode", ["reduced", "complete"])
@pytest.mark.parametrize("shape,dtype", [((2, 5, 3), np.float32), ((3, 5), np.complex64),
                                         ((4, 4), np.float64)])
def test_jnp_qr_default_lowering(shape, dtype, mode):
    a = rand(shape, dtype)
    text = lower_default(lambda x: jnp.linalg.qr(x, mode=mode), a,
                         without=("geqrf", "householder_product"))
    assert "@Qr" in text and "@ProductOfElementaryHouseholderReflectors" in text
    q, r = shi.compile(text).run(a)
    qx, rx = (np.asarray(v) for v in jax.jit(lambda x: jnp.linalg.qr(x, mode=mode))(
        jax.device_put(a, CPU)))
    tol = 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12
    assert_close(q, qx, rtol=0, atol=tol * 10)
    assert_close(r, rx, rtol=0, atol=tol * 10)
    np.testing.assert_allclose(q @ r, a, atol=tol * 10)


def test_qr_custom_call_is_lapack_geqrf():
    a = rand((5, 3), np.float64)
    text = """func.func @main(%a: tensor<5x3xf64>) -> (tensor<5x3xf64>, tensor<3xf64>) {
      %0:2 = stablehlo.custom_call @Qr(%a) {backend_config = ""} : (tensor<5x3xf64>) -> (tensor<5x3xf64>, tensor<3xf64>)
      return %0#0, %0#1 : tensor<5x3xf64>, tensor<3xf64>
    }"""
    h, tau = shi.compile(text).run(a)
    (h_ref, tau_ref), _ = sl.qr(a, mode="raw")
    np.testing.assert_allclose(h, h_ref, atol=1e-12)
    np.testing.assert_allclose(tau, tau_ref, atol=1e-12)


@pytest.mark.parametrize("f,k", [(lambda a: jax.lax.approx_max_k(a, 3), 3),
                                 (lambda a: jax.lax.approx_min_k(a, 2, reduction_dimension=0), 2)])
def test_approx_top_k_default_lowering_is_exact(f, k):
    x = rand((4, 7), np.float32)
    x[1, 2] = x[1, 5]  # a tie keeps index order
    text = lower_default(f, x)
    assert "@ApproxTopK" in text
    got = shi.compile(text).run(x)
    want = [np.asarray(v) for v in jax.jit(f)(jax.device_put(x, CPU))]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_eigh_and_lu_custom_calls():
    b = rand((2, 4, 4), np.float64)
    sym = b + np.swapaxes(b, -1, -2)
    text = """func.func @main(%a: tensor<2x4x4xf64>) -> (tensor<2x4x4xf64>, tensor<2x4xf64>, tensor<2x4x4xf64>, tensor<2x4xi32>, tensor<2x4xi32>) {
      %0:2 = stablehlo.custom_call @Eigh(%a) {backend_config = "1,1,100,1e-6"} : (tensor<2x4x4xf64>) -> (tensor<2x4x4xf64>, tensor<2x4xf64>)
      %1:3 = stablehlo.custom_call @LuDecomposition(%a) : (tensor<2x4x4xf64>) -> (tensor<2x4x4xf64>, tensor<2x4xi32>, tensor<2x4xi32>)
      return %0#0, %0#1, %1#0, %1#1, %1#2 : tensor<2x4x4xf64>, tensor<2x4xf64>, tensor<2x4x4xf64>, tensor<2x4xi32>, tensor<2x4xi32>
    }"""
    v, w, lu, piv, perm = shi.compile(text).run(sym)
    np.testing.assert_allclose(w, np.linalg.eigvalsh(sym), atol=1e-12)
    np.testing.assert_allclose(sym @ v, v * w[:, None, :], atol=1e-10)
    for i in range(2):
        lu_ref, piv_ref = sl.lu_factor(sym[i])
        np.testing.assert_allclose(lu[i], lu_ref, atol=1e-12)
        np.testing.assert_array_equal(piv[i], piv_ref)
        l_mat = np.tril(lu[i], -1) + np.eye(4)
        np.testing.assert_allclose(sym[i][perm[i]], l_mat @ np.triu(lu[i]), atol=1e-12)


def test_layout_constraint_identity_and_unknown_target_reported():
    text = """func.func @main(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
      %0 = stablehlo.custom_call @LayoutConstraint(%a) {api_version = 1 : i32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
      return %0 : tensor<2x3xf32>
    }"""
    a = rand((2, 3), np.float32)
    np.testing.assert_array_equal(shi.compile(text).run(a)[0], a)
    with pytest.raises(shi.UnsupportedOpsError, match="no_such_target"):
        shi.compile(text.replace("LayoutConstraint", "no_such_target"))


def test_exported_shape_polymorphic_top_k_and_shape_assertion():
    from jax import export
    spec = export.symbolic_shape("b, 2*b")

    def f(a):
        return jax.lax.top_k(a, a.shape[0])
    text = export.export(jax.jit(f), platforms=["cpu"])(
        jax.ShapeDtypeStruct(spec, np.float32)).mlir_module()
    assert "@stablehlo.dynamic_top_k" in text and "@shape_assertion" in text
    prog = shi.compile(text)
    a = rand((3, 6), np.float32)
    got = prog.run(a)
    want = jax.jit(f)(jax.device_put(a, CPU))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, np.asarray(w))
    with pytest.raises(shi.ExecutionError, match="polymorphic shapes"):
        prog.run(rand((3, 5), np.float32))  # 5 != 2*3


@pytest.mark.parametrize("shape,fi,dt,et", [((8, 16, 32, 32), 1, np.float32, "f32"),
                                            ((64, 8, 8, 16), 3, ml_dtypes.bfloat16, "bf16"),
                                            ((16, 8192), 0, np.float16, "f16")])
def test_batch_norm_chunked_statistics_and_normalization(shape, fi, dt, et):
    # Large operands are normalized chunk by chunk in float64 (ops/batch_norm.py):
    # the statistics must be the float64 mean and variance rounded once, the
    # outputs within one rounding of the float64 formula.
    from stablehlo_interpreter.dtypes import ulp_distance
    from stablehlo_interpreter.ops.elementwise import round_f64
    c = shape[fi]
    t = "tensor<" + "x".join(map(str, shape)) + f"x{et}>"
    v = f"tensor<{c}x{et}>"
    text = f"""func.func @main(%x: {t}, %s: {v}, %o: {v}) -> ({t}, {v}, {v}, {t}) {{
  %out, %m, %var = "stablehlo.batch_norm_training"(%x, %s, %o) {{epsilon = 0.001 : f32, feature_index = {fi} : i64}} : ({t}, {v}, {v}) -> ({t}, {v}, {v})
  %i = "stablehlo.batch_norm_inference"(%x, %s, %o, %m, %var) {{epsilon = 0.001 : f32, feature_index = {fi} : i64}} : ({t}, {v}, {v}, {v}, {v}) -> {t}
  return %out, %m, %var, %i : {t}, {v}, {v}, {t}
}}"""
    x = (RS.standard_normal(shape) * 3 + 5).astype(dt)
    s, o = (RS.standard_normal(c) + 1).astype(dt), RS.standard_normal(c).astype(dt)
    out, mean, var, inf = shi.compile(text).run(x, s, o)
    axes = tuple(d for d in range(len(shape)) if d != fi)
    bshape = tuple(c if d == fi else 1 for d in range(len(shape)))
    x64 = x.astype(np.float64)
    m64 = x64.mean(axis=axes, keepdims=True)
    v64 = ((x64 - m64) ** 2).mean(axis=axes, keepdims=True)
    np.testing.assert_array_equal(mean, round_f64(m64.reshape(-1), np.dtype(dt)))
    np.testing.assert_array_equal(var, round_f64(v64.reshape(-1), np.dtype(dt)))
    want = (x64 - m64) / np.sqrt(v64 + float(np.float32(0.001))) * s.astype(np.float64).reshape(bshape) \
        + o.astype(np.float64).reshape(bshape)
    # Our statistics and numpy's pairwise mean differ in the last float64 bits.
    assert ulp_distance(out, round_f64(want, np.dtype(dt))).max() <= 1
    m_in = mean.astype(np.float64).reshape(bshape)
    v_in = var.astype(np.float64).reshape(bshape)
    eps = float(np.float32(0.001))   # the attribute is an f32
    want_inf = (x64 - m_in) / np.sqrt(v_in + eps) * s.astype(np.float64).reshape(bshape) \
        + o.astype(np.float64).reshape(bshape)
    np.testing.assert_array_equal(inf, round_f64(want_inf, np.dtype(dt)))


def test_swaps_to_permutation_laswp_matches_the_sequential_swaps():
    """getrf's row swaps -> permutation by one ?laswp per matrix (the
    Python loop where ?laswp cannot take them: none, or more than rows)."""
    from stablehlo_interpreter.ops import linalg_custom_calls as lcc
    rng = np.random.default_rng(3)
    for m, k in [(1, 1), (5, 2), (64, 64), (100, 37), (4, 0)]:
        piv = np.array([[rng.integers(i, m) for i in range(k)] for _ in range(3)],
                       dtype=np.int32).reshape(3, k)
        got = lcc._swaps_to_permutation(piv, m)
        assert got.dtype == np.int64
        for row, p in zip(got, piv):
            assert row.tolist() == lcc._swapped(p.tolist(), m)
        assert lcc._swaps_to_permutation(piv[0], m).tolist() == got[0].tolist()
    with pytest.raises(IndexError):
        lcc._swaps_to_permutation(np.zeros(3, np.int32), 2)
