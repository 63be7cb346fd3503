"""numerics="spec": bit-identical to the C++ reference interpreter (docs/numerics.md).

The C++ interpreter (jaxlib's ``stablehlo.eval_module``) runs in a child
process (tests/cpp_reference.py: it aborts on what it does not support).
Default run: the mode switches, the sequential-fold kernels against explicit
loops, a sample of the suite's programs, JAX programs, and a few hundred
generated programs (tests/spec_programs.py). Slow run (``-m slow``): every
testdata program of the suite and 10,000 generated programs.
"""

import os
import re
import sys

import cpp_reference
import ml_dtypes
import numpy as np
import pytest
import spec_diff
import spec_programs
from conftest import SUITE
from hypothesis import HealthCheck, Phase, given, settings

import stablehlo_interpreter as shi
from stablehlo_interpreter.ops import spec_kernels

SUM = """
func.func @main(%x: tensor<300xf32>) -> tensor<f32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [0]
       : (tensor<300xf32>, tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}
"""


@pytest.fixture(scope="module")
def cpp():
    interp = cpp_reference.CppInterpreter(timeout=120)
    yield interp
    interp.close()


def _sum_input():
    # An f32 sum of 300 values near 100, where a sequential float32 fold
    # drifts from the exact sum.
    rng = np.random.default_rng(7)
    return (100 + rng.standard_normal(300)).astype(np.float32)


# -- the mode switches ---------------------------------------------------------

def test_default_is_accurate_and_spec_is_sequential(monkeypatch):
    monkeypatch.delenv("STABLEHLO_REF_NUMERICS", raising=False)
    x = _sum_input()
    acc = shi.compile(SUM)
    assert acc.numerics == "accurate"
    exact = np.float32(np.sum(x.astype(np.float64)))
    assert acc.run(x)[0] == exact
    spec = shi.compile(SUM, numerics="spec")
    assert spec.numerics == "spec"
    seq = np.float32(0)
    for v in x:
        seq = np.float32(seq + v)
    assert spec.run(x)[0] == seq
    assert seq != exact   # the input is chosen so that the two differ


def test_environment_selects_the_mode(monkeypatch):
    monkeypatch.setenv("STABLEHLO_REF_NUMERICS", "spec")
    assert shi.compile(SUM).numerics == "spec"
    assert shi.compile(SUM, numerics="accurate").numerics == "accurate"
    monkeypatch.setenv("STABLEHLO_REF_NUMERICS", "fast")
    with pytest.raises(shi.CompileError, match="STABLEHLO_REF_NUMERICS='fast'.*accurate, spec"):
        shi.compile(SUM)
    with pytest.raises(shi.CompileError, match="numerics='exact'"):
        shi.compile(SUM, numerics="exact")


def test_cli_numerics_switch(tmp_path, capsys):
    from stablehlo_interpreter import cli
    mod = tmp_path / "sum.mlir"
    mod.write_text(SUM)
    args = tmp_path / "x.npy"
    np.save(args, _sum_input())
    outs = {}
    for mode in ("accurate", "spec"):
        out = tmp_path / f"{mode}.npz"
        assert cli.main(["run", str(mod), "--args", str(args), "--out", str(out),
                         "--numerics", mode]) == 0
        outs[mode] = np.load(out)["result_0"]
    capsys.readouterr()
    assert outs["accurate"] != outs["spec"]


_JAX_SUM = """
import jax, jax.numpy as jnp, numpy as np
rng = np.random.default_rng(7)
x = (100 + rng.standard_normal(300)).astype(np.float32)
assert jax.devices()[0].platform == "stablehlo_ref", jax.devices()
print(repr(float(jax.jit(jnp.sum)(x))))
"""


@pytest.mark.parametrize("mode", ["spec", "accurate", None])
def test_plugin_runs_jax_in_the_mode_of_the_environment(mode):
    import subprocess
    env = dict(os.environ, JAX_PLATFORMS="stablehlo_ref")
    env.pop("STABLEHLO_REF_NUMERICS", None)
    if mode is not None:
        env["STABLEHLO_REF_NUMERICS"] = mode
    p = subprocess.run([sys.executable, "-c", _JAX_SUM], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    x = _sum_input()
    seq = np.float32(0)
    for v in x:
        seq = np.float32(seq + v)
    want = seq if mode == "spec" else np.float32(np.sum(x.astype(np.float64)))
    assert float(p.stdout.strip().splitlines()[-1]) == float(want)


# -- the sequential fold: numpy's reduce along a non-contiguous axis ------------

@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16,
                                   np.complex64])
@pytest.mark.parametrize("shape", [(1, 1), (2, 1), (9, 1), (300, 1), (5, 2), (200, 3),
                                   (17, 64), (1000, 7)])
def test_fold_rows_is_a_left_fold(dtype, shape):
    rng = np.random.default_rng(sum(shape))
    raw = rng.standard_normal(shape) * 10.0 ** rng.integers(-4, 5, shape)
    rows = (raw + 1j * raw[::-1] if np.dtype(dtype).kind == "c" else raw).astype(dtype)
    for kind in ("add", "multiply"):
        f = spec_kernels.combiner(kind, dtype)
        want = rows[0]
        for k in range(1, shape[0]):
            want = np.asarray(f(want, rows[k])).astype(dtype)
        got = spec_kernels.fold_rows(kind, dtype, rows)
        assert cpp_reference.bits_equal(np.asarray(got).reshape(want.shape), want), kind


# -- against the C++ interpreter --------------------------------------------

def _check(cpp, text, args=()):
    status, detail = spec_diff.compare(cpp, text, args)
    if status == "cpp-unsupported":
        pytest.skip(f"the C++ interpreter cannot run it: {detail}")
    assert status == "same", detail


def test_sum_of_300_values_near_100(cpp):
    _check(cpp, SUM, [_sum_input()])


_SMALL_OPS = """
func.func @main(%a: tensor<ET>, %b: tensor<ET>, %v: tensor<64xET>, %w: tensor<64xi32>)
    -> (tensor<i1>, tensor<i1>, tensor<i1>, tensor<i1>, tensor<ET>, tensor<ET>, tensor<ET>,
        tensor<i32>, tensor<ET>) {
  %0 = stablehlo.compare LT, %a, %b, FLOAT : (tensor<ET>, tensor<ET>) -> tensor<i1>
  %1 = stablehlo.compare GE, %a, %b, FLOAT : (tensor<ET>, tensor<ET>) -> tensor<i1>
  %2 = stablehlo.compare EQ, %a, %b, FLOAT : (tensor<ET>, tensor<ET>) -> tensor<i1>
  %3 = stablehlo.compare NE, %a, %b, FLOAT : (tensor<ET>, tensor<ET>) -> tensor<i1>
  %4 = stablehlo.maximum %a, %b : tensor<ET>
  %5 = stablehlo.minimum %a, %b : tensor<ET>
  %6 = stablehlo.reduce(%v init: %a) applies stablehlo.maximum across dimensions = [0]
       : (tensor<64xET>, tensor<ET>) -> tensor<ET>
  %z = stablehlo.constant dense<0> : tensor<i32>
  %7 = stablehlo.reduce(%w init: %z) applies stablehlo.add across dimensions = [0]
       : (tensor<64xi32>, tensor<i32>) -> tensor<i32>
  %8 = stablehlo.reduce(%v init: %b) applies stablehlo.minimum across dimensions = [0]
       : (tensor<64xET>, tensor<ET>) -> tensor<ET>
  return %0, %1, %2, %3, %4, %5, %6, %7, %8 : tensor<i1>, tensor<i1>, tensor<i1>, tensor<i1>,
         tensor<ET>, tensor<ET>, tensor<ET>, tensor<i32>, tensor<ET>
}
"""


@pytest.mark.parametrize("et", ["f16", "bf16", "f32", "f64"])
def test_small_operand_kernels(cpp, et):
    # The 0-d compare/maximum/minimum and vector reduce kernels
    # (tests/test_small_operands.py) on NaN, -0 and inf. Not TOTALORDER:
    # the C++ interpreter compares it as FLOAT (docs/conformance.md);
    # test_small_operands.py holds its 0-d kernel to the general one.
    dt = np.dtype(ml_dtypes.bfloat16) if et == "bf16" else np.dtype(et.replace("f", "float"))
    vals = np.array([0.0, -0.0, 1.5, -np.inf, np.nan, -np.nan], np.float64).astype(dt)
    v = np.where(np.arange(64) % 2, -0.0, 0.0).astype(dt)
    w = np.full(64, np.iinfo(np.int32).max, np.int32)   # wraps
    for a in vals:
        for b in vals[::-1][:3]:
            _check(cpp, _SMALL_OPS.replace("ET", et), [np.asarray(a), np.asarray(b), v, w])


def _dot_program(m, k, n, et):
    a, b, o = f"tensor<{m}x{k}x{et}>", f"tensor<{k}x{n}x{et}>", f"tensor<{m}x{n}x{et}>"
    return (f"func.func @main(%a: {a}, %b: {b}) -> {o} {{\n  %0 = stablehlo.dot_general %a, %b, "
            f"contracting_dims = [1] x [0] : ({a}, {b}) -> {o}\n  return %0 : {o}\n}}")


@pytest.mark.parametrize("et, dtype", [("f32", np.float32), ("f64", np.float64),
                                       ("f16", np.float16), ("bf16", ml_dtypes.bfloat16)])
@pytest.mark.parametrize("mkn", [(16, 300, 70), (9, 40, 17), (40, 33, 1)])
def test_dots_the_c_loops_tile(cpp, et, dtype, mkn):
    # Shapes the C loop's register tiles (and their remainders) and its
    # matrix-vector chains compute, against the C++ interpreter.
    m, k, n = mkn
    rng = np.random.default_rng(m + k + n)
    args = [(rng.standard_normal(s) * 10.0 ** rng.integers(-2, 3, s)).astype(dtype)
            for s in ((m, k), (k, n))]
    _check(cpp, _dot_program(m, k, n, et), args)


@pytest.mark.parametrize("et, dtype", [("f16", np.float16), ("bf16", ml_dtypes.bfloat16)])
def test_narrow_sum_to_one_value(cpp, et, dtype):
    # One long float16/bfloat16 chain (AVX512-FP16 steps where the CPU has them).
    x = np.random.default_rng(3).standard_normal(5000).astype(dtype)
    text = SUM.replace("300xf32", f"5000x{et}").replace("f32", et)
    _check(cpp, text, [x])


def _fft_text(kind, tin, tout, lengths):
    return (f"func.func @main(%a: tensor<{tin}>) -> tensor<{tout}> {{\n"
            f"  %r = stablehlo.fft %a, type = {kind}, length = {lengths} : "
            f"(tensor<{tin}>) -> tensor<{tout}>\n  return %r : tensor<{tout}>\n}}\n")


# The C++ interpreter's inverse transforms: conjugated DFTs, a complex
# division per dim (IFFT), a rebuilt spectrum and one real division (IRFFT).
@pytest.mark.parametrize("kind, tin, tout, lengths", [
    ("IFFT", "3x8xcomplex<f64>", "3x8xcomplex<f64>", [8]),
    ("IFFT", "2x3x5x7xcomplex<f64>", "2x3x5x7xcomplex<f64>", [3, 5, 7]),
    ("IRFFT", "3x5xcomplex<f64>", "3x8xf64", [8]),
    ("IRFFT", "2x3x4x4xcomplex<f64>", "2x3x4x6xf64", [3, 4, 6]),
    ("IRFFT", "2x2xcomplex<f64>", "2x2xf64", [2]),
])
def test_inverse_fft(cpp, kind, tin, tout, lengths):
    shape = [int(d) for d in re.findall(r"(\d+)x", tin)]
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    _check(cpp, _fft_text(kind, tin, tout, lengths), [x])


def test_odd_length_irfft_is_the_accurate_transform():
    # The C++ interpreter rebuilds an odd length's spectrum one value short
    # and reads the value it never wrote (docs/conformance.md): spec mode
    # computes that transform as accurate mode does.
    import stablehlo_interpreter as shi
    text = _fft_text("IRFFT", "2x3x4xcomplex<f64>", "2x3x7xf64", [3, 7])
    x = np.random.default_rng(7).standard_normal((2, 3, 4)) * (1 + 0.5j)
    spec = shi.compile(text, numerics="spec").run(x)[0]
    accurate = shi.compile(text, numerics="accurate").run(x)[0]
    assert cpp_reference.bits_equal(np.asarray(spec), np.asarray(accurate))
    np.testing.assert_allclose(spec, np.fft.irfftn(x, s=(3, 7), axes=(-2, -1)), atol=1e-13)


# The suite's files that need the spec order, and one of each op family.
SUITE_SAMPLE = [
    "cumsum_bfloat16_8_9", "cumsum_float32_8_9", "cumsum_complex64_8_9",
    "reduce_window_add_float32_12_12", "conv_general_dilated_float32_2_3_9_float32_12_1_3",
    "dot_general_int32_4_3_float16_3_6", "cumprod_complex64_8_9",
    "pow_complex64_20_30_complex64_20_30", "reduce_sum_float32_2_3", "expm1_float64_20_20",
    "sign_complex128_20_20", "logistic_float64_20_20", "logistic_complex128_20_20",
    "triangular_solve_bfloat16_4_4_bfloat16_4_1", "fft_float64_14_15_16_17",
    "dot_general_float32_4_3_complex64_3_6",
]


@pytest.mark.skipif(not SUITE.is_dir(), reason=f"no conformance suite at {SUITE}")
@pytest.mark.parametrize("name", SUITE_SAMPLE)
def test_suite_sample(cpp, name):
    path = SUITE / "testdata" / f"{name}.mlir"
    if not path.exists():
        pytest.skip(f"{path} not in this suite")
    _check(cpp, spec_diff.suite_program(str(path)))


# Where spec mode knowingly differs from the C++ interpreter (each one a
# C++ difference from the spec, docs/conformance.md).
SUITE_CPP_DIFFERENCES = {
    "sort_float32_5.mlir",                           # compare ignores TOTALORDER
}


@pytest.mark.slow
@pytest.mark.skipif(not SUITE.is_dir(), reason=f"no conformance suite at {SUITE}")
def test_suite_testdata_programs(cpp):
    bad = []
    for path in spec_diff.testdata_files(str(SUITE)):
        if os.path.basename(path) in SUITE_CPP_DIFFERENCES:
            continue
        status, detail = spec_diff.compare(cpp, spec_diff.suite_program(path))
        if status in ("differ", "ours-failed"):
            bad.append(f"{os.path.basename(path)}: {status}: {detail}")
    assert not bad, "\n".join(bad)


def _jax_programs():
    """(name, fn, args) JAX programs of the kinds the issue measured:
    reductions, windows, scans, contractions, softmax."""
    import jax.numpy as jnp
    from jax import lax
    rng = np.random.default_rng(3)
    x = (100 + rng.standard_normal((3, 100))).astype(np.float32)
    m = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 4)).astype(np.float32)
    img = rng.standard_normal((2, 9, 9, 3)).astype(np.float32)
    ker = rng.standard_normal((3, 3, 3, 5)).astype(np.float32)
    dn = ("NHWC", "HWIO", "NHWC")
    return [
        ("sum", lambda a: jnp.sum(a), [x]),
        ("mean_axis", lambda a: jnp.mean(a, axis=1), [x]),
        ("cumsum", lambda a: jnp.cumsum(a, axis=1), [x]),
        ("cumprod", lambda a: jnp.cumprod(a / 100, axis=1), [x]),
        ("softmax", lambda a: jnp.exp(a - a.max(1, keepdims=True)) /
         jnp.sum(jnp.exp(a - a.max(1, keepdims=True)), 1, keepdims=True), [m]),
        ("matmul", lambda a, b: a @ b, [m, w]),
        ("einsum", lambda a: jnp.einsum("ij,kj->ik", a, a), [m]),
        ("avg_pool", lambda a: lax.reduce_window(a, 0.0, lax.add, (1, 3, 3, 1), (1, 2, 2, 1),
                                                 "SAME"), [img]),
        ("conv", lambda a, k: lax.conv_general_dilated(a, k, (1, 1), "SAME",
                                                       dimension_numbers=dn), [img, ker]),
        ("conv_strided_dilated", lambda a, k: lax.conv_general_dilated(
            a, k, (2, 2), ((1, 2), (0, 1)), rhs_dilation=(1, 2), dimension_numbers=dn),
         [img, ker]),
        ("var", lambda a: jnp.mean((a - a.mean(0)) * (a - a.mean(0)), axis=0), [x]),
        ("logsumexp", lambda a: jnp.log(jnp.sum(jnp.exp(a / 50), axis=1)), [x]),
    ]


@pytest.mark.parametrize("case", _jax_programs(), ids=lambda c: c[0])
def test_jax_programs(cpp, case):
    import jax
    _, fn, args = case
    text = jax.jit(fn).lower(*args).as_text(dialect="stablehlo")
    _check(cpp, text, args)


def _workloads():
    from benchmarks.workloads import WORKLOADS
    return WORKLOADS


@pytest.mark.parametrize("workload", _workloads(), ids=lambda w: w.name)
def test_benchmark_workloads(cpp, workload):
    """The benchmark suite's JAX programs (quick sizes: MLP training step,
    transformer block, conv, pooling, scan, sort, gather/scatter...)."""
    import jax
    fn, args = workload.build(True)
    text = jax.jit(fn).lower(*args).as_text(dialect="stablehlo")
    _check(cpp, text, [np.asarray(a) for a in args])


def _random_programs(cpp, n):
    seen = {"same": 0, "cpp-unsupported": 0}

    @settings(max_examples=n, deadline=None, database=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate, Phase.shrink],
              suppress_health_check=list(HealthCheck))
    @given(spec_programs.programs)
    def check(prog):
        text, args = prog
        status, detail = spec_diff.compare(cpp, text, args)
        assert status in seen, f"{status}: {detail}\n{text}\nargs: {args!r}"
        seen[status] += 1
    check()
    # The C++ interpreter runs nearly all of them: the comparison is real.
    assert seen["same"] >= 0.9 * sum(seen.values()), seen


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_random_programs(cpp):
    _random_programs(cpp, 150)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_random_programs_10k(cpp):
    _random_programs(cpp, 10_000)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("op", ["exponential", "exponential_minus_one", "log", "log_plus_one",
                                "sine", "cosine", "tanh", "logistic"])
def test_float32_functions_with_and_without_the_c_kernels(op, monkeypatch):
    # Spec mode's float32 functions run fastmath's C loops where they give
    # the float64 detour's bits (spec_elementwise._F32_KERNELS; logistic's
    # exp): without the module, the detour itself gives the same bits.
    from stablehlo_interpreter.ops import fastmath
    n = 3 * fastmath.CHUNK + 17
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 3, n)).astype(np.float32)
    x[:12] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 88.7, -103.9, 1e30, -1e30, 0.5]
    if op in ("log", "log_plus_one"):
        x = np.abs(x)
    t = f"tensor<{n}xf32>"
    text = (f"func.func @main(%a: {t}) -> {t} {{\n  %r = stablehlo.{op} %a : {t}\n"
            f"  return %r : {t}\n}}\n")
    fast = shi.compile(text, numerics="spec").run(x)[0]
    monkeypatch.setattr(fastmath, "_fastmath", None)
    slow = shi.compile(text, numerics="spec").run(x)[0]
    assert cpp_reference.bits_equal(np.asarray(fast), np.asarray(slow))
