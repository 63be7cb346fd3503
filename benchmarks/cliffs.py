"""Cliff sweep: common JAX operations, stablehlo_ref against XLA CPU.

    python -m benchmarks.cliffs [--quick] [--max-ratio R] [--max-step-us U]
                                [--only NAME] [--repeats N] [--budget S]
                                [--rounds R] [--json OUT] [--md OUT]

Unlike ``python -m benchmarks`` (one process per system, a few large
workloads), this runs many small and mid-sized programs, the kind a user's
program is made of, in ONE process with ``JAX_PLATFORMS=cpu,stablehlo_ref``:
each op is jitted once, its inputs are put on each device, it is called once
(compilation) and then timed ``--repeats`` times (stopping after
``--budget`` seconds per system); the table gives medians and ours/XLA.
``--rounds R`` runs the whole sweep R times, one op after another each
round, and gives each time as the median of the rounds' medians: a single
round's median of a few calls can be off 2-3x, for XLA CPU (its thread
pools) as for us.

Loops (``steps`` > 1) also give the time per step. Scalar loops are
dominated by per-iteration dispatch and are judged by ``--max-step-us``
instead of ``--max-ratio`` (the issue's goal: no op over 10x XLA CPU except
scalar loops, which should cost at most 1.5 us per step); a loop whose body
is array work (``array_body``: scan_array's 256x256 matrix-vector product
per step takes XLA CPU itself over 2 us) is judged by ``--max-ratio`` like
any other op.

Outputs are compared (sum and absolute sum of every output, as in
runner.py): a fast wrong answer shows as MISMATCH. The markdown goes to
``benchmarks/results/cliffs.md`` by default (``--md``), the JSON with every
sample to ``--json``. Exit status 1 when ``--max-ratio`` / ``--max-step-us``
is exceeded by any op, 2 when an op failed or mismatched.

Rows of the ``spec`` group (``numerics="spec"``, set through the environment
while they compile and run) are opt-in: ``--only spec_`` runs them.

Timings on a shared 2-core machine are noisy (the load average is recorded):
XLA CPU's own thread pool suffers most from a busy neighbour, which makes
ratios look better than they are; compare runs taken on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .runner import outputs_agree

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass
class Op:
    name: str
    group: str
    description: str
    build: object          # build(quick) -> (fn, args)
    steps: int = 1         # loop iterations in one call (per-step time reported)
    steps_quick: int = 1   # the same at --quick sizes
    array_body: bool = False  # a loop of array work: judged by ratio, not per step
    env: dict | None = None   # environment variables set while the op compiles and runs
    opt_in: bool = False      # runs only when --only selects it


OPS: list[Op] = []


def op(name, group, description, steps=1, steps_quick=1, array_body=False, env=None,
       opt_in=False):
    def deco(build):
        OPS.append(Op(name, group, description, build, steps, steps_quick, array_body, env,
                      opt_in))
        return build
    return deco


def _rng(seed=0):
    return np.random.default_rng(seed)


def _f32(shape, seed=0):
    return _rng(seed).standard_normal(shape).astype(np.float32)


def _n(quick, full, small):
    return small if quick else full


# --------------------------------------------------------------------------
# Cumulative ops (JAX lowers them to whole-axis reduce_windows off GPU).


@op("cumsum", "cumulative", "jnp.cumsum of 1e6 f32")
def _cumsum(q):
    import jax.numpy as jnp
    return jnp.cumsum, (_f32(_n(q, 1_000_000, 1000)),)


@op("cummax", "cumulative", "lax.cummax of 1e6 f32")
def _cummax(q):
    from jax import lax
    return lax.cummax, (_f32(_n(q, 1_000_000, 1000)),)


@op("cumlogsumexp", "cumulative", "lax.cumlogsumexp of 1e5 f32")
def _cumlse(q):
    from jax import lax
    return lax.cumlogsumexp, (_f32(_n(q, 100_000, 1000)),)


@op("cumprod", "cumulative", "jnp.cumprod of 1e5 f32 near 1")
def _cumprod(q):
    import jax.numpy as jnp
    x = (1 + 1e-4 * _f32(_n(q, 100_000, 1000))).astype(np.float32)
    return jnp.cumprod, (x,)


@op("cumsum_axis0", "cumulative", "jnp.cumsum(axis=0) of (1000, 1000) f32")
def _cumsum0(q):
    import jax.numpy as jnp
    n = _n(q, 1000, 32)
    return (lambda x: jnp.cumsum(x, axis=0)), (_f32((n, n)),)


# --------------------------------------------------------------------------
# Sorting, selection, search.


@op("sort", "sort/select", "jnp.sort of 1e6 f32")
def _sort(q):
    import jax.numpy as jnp
    return jnp.sort, (_f32(_n(q, 1_000_000, 1000)),)


@op("argsort", "sort/select", "jnp.argsort of 1e5 f32 (stable)")
def _argsort(q):
    import jax.numpy as jnp
    return jnp.argsort, (_f32(_n(q, 100_000, 1000)),)


@op("lexsort", "sort/select", "jnp.lexsort of two 1e5 int32 keys (multi-operand sort)")
def _lexsort(q):
    import jax.numpy as jnp
    n = _n(q, 100_000, 1000)
    r = _rng(1)
    return (lambda a, b: jnp.lexsort((a, b))), (r.integers(0, 100, n).astype(np.int32),
                                                 r.integers(0, 100, n).astype(np.int32))


@op("top_k", "sort/select", "lax.top_k(x, 100) of 1e5 f32")
def _top_k(q):
    from jax import lax
    return (lambda x: lax.top_k(x, 100 if not q else 10)), (_f32(_n(q, 100_000, 1000)),)


@op("unique", "sort/select", "jnp.unique(x, size=1000) of 1e5 int32")
def _unique(q):
    import jax.numpy as jnp
    x = _rng(2).integers(0, 2000, _n(q, 100_000, 1000)).astype(np.int32)
    return (lambda x: jnp.unique(x, size=1000 if not q else 100)), (x,)


@op("histogram", "sort/select", "jnp.histogram(x, 100) of 1e6 f32")
def _histogram(q):
    import jax.numpy as jnp
    return (lambda x: jnp.histogram(x, 100)), (_f32(_n(q, 1_000_000, 1000)),)


@op("searchsorted", "sort/select", "jnp.searchsorted 1e5 into sorted 1e5 f32")
def _searchsorted(q):
    import jax.numpy as jnp
    n = _n(q, 100_000, 1000)
    return jnp.searchsorted, (np.sort(_f32(n, 3)), _f32(n, 4))


@op("median", "sort/select", "jnp.median of 1e6 f32")
def _median(q):
    import jax.numpy as jnp
    return jnp.median, (_f32(_n(q, 1_000_000, 1000)),)


@op("argmax", "sort/select", "jnp.argmax of (1000, 1000) f32 along rows")
def _argmax(q):
    import jax.numpy as jnp
    n = _n(q, 1000, 32)
    return (lambda x: jnp.argmax(x, axis=1)), (_f32((n, n)),)


# --------------------------------------------------------------------------
# Indexing and scatter.


@op("gather", "index/scatter", "x[idx]: 1e6 indices into 1e5 f32")
def _gather(q):
    n = _n(q, 100_000, 1000)
    idx = _rng(5).integers(0, n, 10 * n).astype(np.int32)
    return (lambda x, i: x[i]), (_f32(n), idx)


@op("take_along_axis", "index/scatter", "jnp.take_along_axis (1000, 1000) f32")
def _take_along(q):
    import jax.numpy as jnp
    n = _n(q, 1000, 32)
    idx = _rng(6).integers(0, n, (n, n)).astype(np.int32)
    return (lambda x, i: jnp.take_along_axis(x, i, axis=1)), (_f32((n, n)), idx)


@op("scatter_add", "index/scatter", "x.at[idx].add(v): 1e6 updates into 1e4 f32")
def _scatter_add(q):
    n = _n(q, 10_000, 100)
    idx = _rng(7).integers(0, n, 100 * n).astype(np.int32)
    return (lambda x, i, v: x.at[i].add(v)), (_f32(n), idx, _f32(100 * n, 8))


@op("segment_sum", "index/scatter", "jax.ops.segment_sum of 1e6 f32 into 1000 segments")
def _segment_sum(q):
    import jax
    n = _n(q, 1_000_000, 1000)
    ids = np.sort(_rng(9).integers(0, 1000, n)).astype(np.int32)
    return (lambda x, s: jax.ops.segment_sum(x, s, num_segments=1000)), (_f32(n), ids)


@op("boolean_where", "index/scatter", "jnp.where(x > 0, x, 0) and a masked sum, 1e6 f32")
def _where(q):
    import jax.numpy as jnp
    return (lambda x: jnp.sum(jnp.where(x > 0, x, 0.0))), (_f32(_n(q, 1_000_000, 1000)),)


@op("one_hot", "index/scatter", "jax.nn.one_hot of 1e4 labels, 1000 classes")
def _one_hot(q):
    import jax
    n = _n(q, 10_000, 100)
    return (lambda y: jax.nn.one_hot(y, 1000)), (_rng(10).integers(0, 1000, n).astype(np.int32),)


@op("dynamic_update_slice", "index/scatter", "lax.dynamic_update_slice of (100, 1000) into (1000, 1000)")
def _dus(q):
    from jax import lax
    n = _n(q, 1000, 32)
    return (lambda x, u, i: lax.dynamic_update_slice(x, u, (i, 0))), (
        _f32((n, n)), _f32((n // 10, n), 1), np.int32(n // 3))


# --------------------------------------------------------------------------
# Linear algebra.


def _mat(n, seed=0):
    a = _f32((n, n), seed)
    return a + np.float32(n ** 0.5) * np.eye(n, dtype=np.float32)


@op("solve", "linalg", "jnp.linalg.solve 64x64 with 64 right-hand sides")
def _solve(q):
    import jax.numpy as jnp
    n = _n(q, 64, 8)
    return jnp.linalg.solve, (_mat(n), _f32((n, n), 1))


@op("inv", "linalg", "jnp.linalg.inv 64x64")
def _inv(q):
    import jax.numpy as jnp
    return jnp.linalg.inv, (_mat(_n(q, 64, 8)),)


@op("det", "linalg", "jnp.linalg.det 64x64")
def _det(q):
    import jax.numpy as jnp
    return jnp.linalg.det, (_mat(_n(q, 64, 8)) / 8,)


@op("slogdet", "linalg", "jnp.linalg.slogdet 64x64")
def _slogdet(q):
    import jax.numpy as jnp
    return (lambda a: tuple(jnp.linalg.slogdet(a))), (_mat(_n(q, 64, 8)),)


@op("expm", "linalg", "jax.scipy.linalg.expm 64x64")
def _expm(q):
    import jax.scipy.linalg as jsl
    n = _n(q, 64, 8)
    return jsl.expm, (_f32((n, n)) / np.float32(n),)


@op("lu", "linalg", "jax.scipy.linalg.lu 64x64")
def _lu(q):
    import jax.scipy.linalg as jsl
    return jsl.lu, (_f32((_n(q, 64, 8),) * 2),)


@op("qr", "linalg", "jnp.linalg.qr 64x64")
def _qr(q):
    import jax.numpy as jnp
    return (lambda a: tuple(jnp.linalg.qr(a))), (_f32((_n(q, 64, 8),) * 2),)


@op("cholesky", "linalg", "jnp.linalg.cholesky 256x256")
def _cholesky(q):
    import jax.numpy as jnp
    n = _n(q, 256, 8)
    a = _f32((n, n))
    return jnp.linalg.cholesky, (a @ a.T + n * np.eye(n, dtype=np.float32),)


@op("solve_triangular", "linalg", "jax.scipy.linalg.solve_triangular 256x256, 256 rhs")
def _trsm(q):
    import jax.scipy.linalg as jsl
    n = _n(q, 256, 8)
    return (lambda a, b: jsl.solve_triangular(a, b, lower=True)), (np.tril(_mat(n)), _f32((n, n), 1))


@op("eigh", "linalg", "jnp.linalg.eigh 128x128")
def _eigh(q):
    import jax.numpy as jnp
    n = _n(q, 128, 8)
    a = _f32((n, n))
    return (lambda a: jnp.linalg.eigh(a)[0]), ((a + a.T) / 2,)


@op("svd", "linalg", "jnp.linalg.svd 128x128 (singular values)")
def _svd(q):
    import jax.numpy as jnp
    return (lambda a: jnp.linalg.svd(a, compute_uv=False)), (_f32((_n(q, 128, 8),) * 2),)


@op("matmul", "linalg", "512x512 f32 matmul")
def _matmul(q):
    n = _n(q, 512, 16)
    return (lambda a, b: a @ b), (_f32((n, n)), _f32((n, n), 1))


# --------------------------------------------------------------------------
# Random numbers.


def _key():
    import jax
    return jax.random.key_data(jax.random.key(0))


@op("random_normal", "random", "jax.random.normal 1e6 f32")
def _normal(q):
    import jax
    n = _n(q, 1_000_000, 1000)
    return (lambda k: jax.random.normal(jax.random.wrap_key_data(k), (n,))), (np.asarray(_key()),)


@op("random_uniform", "random", "jax.random.uniform 1e6 f32")
def _uniform(q):
    import jax
    n = _n(q, 1_000_000, 1000)
    return (lambda k: jax.random.uniform(jax.random.wrap_key_data(k), (n,))), (np.asarray(_key()),)


@op("random_bits", "random", "jax.random.bits 1e6 uint32 (threefry alone)")
def _bits(q):
    import jax
    n = _n(q, 1_000_000, 1000)
    return (lambda k: jax.random.bits(jax.random.wrap_key_data(k), (n,))), (np.asarray(_key()),)


@op("random_permutation", "random", "jax.random.permutation of 1e5")
def _permutation(q):
    import jax
    n = _n(q, 100_000, 1000)
    return (lambda k: jax.random.permutation(jax.random.wrap_key_data(k), n)), (np.asarray(_key()),)


@op("random_categorical", "random", "jax.random.categorical (1000, 100) logits")
def _categorical(q):
    import jax
    n = _n(q, 1000, 10)
    return (lambda k, l: jax.random.categorical(jax.random.wrap_key_data(k), l)), (
        np.asarray(_key()), _f32((n, 100)))


# --------------------------------------------------------------------------
# FFT.


@op("fft", "fft", "jnp.fft.fft of 2**16 c64")
def _fft(q):
    import jax.numpy as jnp
    n = _n(q, 1 << 16, 64)
    return jnp.fft.fft, ((_f32(n) + 1j * _f32(n, 1)).astype(np.complex64),)


@op("rfft", "fft", "jnp.fft.rfft of 1e6 f32")
def _rfft(q):
    import jax.numpy as jnp
    return jnp.fft.rfft, (_f32(_n(q, 1 << 20, 64)),)


@op("fft2", "fft", "jnp.fft.fft2 of 256x256 c64")
def _fft2(q):
    import jax.numpy as jnp
    n = _n(q, 256, 8)
    return jnp.fft.fft2, ((_f32((n, n)) + 1j * _f32((n, n), 1)).astype(np.complex64),)


# --------------------------------------------------------------------------
# Elementwise chains and normalizations.


@op("chain_tanh_exp_sin", "elementwise", "tanh(x)*exp(-x*x)+sin(x), 1e6 f32")
def _chain(q):
    import jax.numpy as jnp
    return (lambda x: jnp.tanh(x) * jnp.exp(-x * x) + jnp.sin(x)), (_f32(_n(q, 1_000_000, 1000)),)


@op("gelu", "elementwise", "jax.nn.gelu 1e6 f32")
def _gelu(q):
    import jax
    return jax.nn.gelu, (_f32(_n(q, 1_000_000, 1000)),)


@op("erf", "elementwise", "jax.scipy.special.erf 1e6 f32")
def _erf(q):
    import jax.scipy.special as jss
    return jss.erf, (_f32(_n(q, 1_000_000, 1000)),)


@op("erfc", "elementwise", "jax.scipy.special.erfc 1e6 f32")
def _erfc(q):
    import jax.scipy.special as jss
    return jss.erfc, (_f32(_n(q, 1_000_000, 1000)),)


@op("tanh", "elementwise", "jnp.tanh 1e6 f32")
def _tanh(q):
    import jax.numpy as jnp
    return jnp.tanh, (_f32(_n(q, 1_000_000, 1000)),)


@op("sigmoid", "elementwise", "jax.nn.sigmoid 1e6 f32")
def _sigmoid(q):
    import jax
    return jax.nn.sigmoid, (_f32(_n(q, 1_000_000, 1000)),)


@op("exp", "elementwise", "jnp.exp 1e6 f32")
def _exp(q):
    import jax.numpy as jnp
    return jnp.exp, (_f32(_n(q, 1_000_000, 1000)),)


@op("sin", "elementwise", "jnp.sin 1e6 f32")
def _sin(q):
    import jax.numpy as jnp
    return jnp.sin, (_f32(_n(q, 1_000_000, 1000)),)


@op("log", "elementwise", "jnp.log of 1e6 positive f32")
def _log(q):
    import jax.numpy as jnp
    return jnp.log, (np.abs(_f32(_n(q, 1_000_000, 1000))),)


@op("erf_bf16", "elementwise", "jax.scipy.special.erf 1e6 bf16")
def _erf_bf16(q):
    import jax.scipy.special as jss
    import ml_dtypes
    return jss.erf, (_f32(_n(q, 1_000_000, 1000)).astype(ml_dtypes.bfloat16),)


@op("softmax", "elementwise", "jax.nn.softmax rows of (1000, 1000) f32")
def _softmax(q):
    import jax
    n = _n(q, 1000, 32)
    return jax.nn.softmax, (_f32((n, n)),)


@op("logsumexp", "elementwise", "jax.nn.logsumexp rows of (1000, 1000) f32")
def _lse(q):
    import jax
    n = _n(q, 1000, 32)
    return (lambda x: jax.nn.logsumexp(x, axis=1)), (_f32((n, n)),)


@op("layer_norm", "elementwise", "layer norm of (1000, 1000) f32")
def _layer_norm(q):
    import jax.numpy as jnp
    n = _n(q, 1000, 32)

    def fn(x):
        m = x.mean(axis=-1, keepdims=True)
        v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
        return (x - m) * jnp.reciprocal(jnp.sqrt(v + 1e-5))
    return fn, (_f32((n, n)),)


@op("conv2d", "elementwise", "lax.conv NHWC (8, 32, 32, 16) with 3x3x16x32")
def _conv(q):
    from jax import lax
    b = _n(q, 8, 1)
    x, w = _f32((b, 32, 32, 16)), _f32((3, 3, 16, 32), 1)
    return (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                  dimension_numbers=("NHWC", "HWIO", "NHWC"))), (x, w)


# --------------------------------------------------------------------------
# Spec numerics (docs/numerics.md): the element type's sequential order, the C
# loops of interpreter/stablehlo_interpreter/_libm_loops.c. XLA CPU's time is
# the same program's; benchmarks.numerics_cost compares with accurate mode.
# Opt-in rows (--only spec_): the sweep's bar against XLA CPU is the default
# numerics'; spec mode's cost is judged against accurate mode (issue 20).

SPEC = {"STABLEHLO_REF_NUMERICS": "spec"}


@op("spec_dot_f32", "spec", "jnp.dot (256, 256) x (256, 256) f32, numerics=spec", env=SPEC,
    opt_in=True)
def _spec_dot_f32(q):
    import jax.numpy as jnp
    n = _n(q, 256, 32)
    return jnp.dot, (_f32((n, n)), _f32((n, n), 1))


@op("spec_matvec_f32", "spec", "jnp.dot (1024, 1024) x (1024,) f32, numerics=spec", env=SPEC,
    opt_in=True)
def _spec_matvec_f32(q):
    import jax.numpy as jnp
    n = _n(q, 1024, 64)
    return jnp.dot, (_f32((n, n)), _f32((n,), 1))


@op("spec_dot_bf16", "spec", "jnp.dot (128, 128) x (128, 128) bf16, numerics=spec", env=SPEC,
    opt_in=True)
def _spec_dot_bf16(q):
    import jax.numpy as jnp
    import ml_dtypes
    n = _n(q, 128, 32)
    return jnp.dot, (_f32((n, n)).astype(ml_dtypes.bfloat16),
                     _f32((n, n), 1).astype(ml_dtypes.bfloat16))


@op("spec_sum_f16", "spec", "lax.reduce add of 1e6 f16 to one value, numerics=spec", env=SPEC,
    opt_in=True)
def _spec_sum_f16(q):
    from jax import lax
    # Differences of small integers: every partial sum is a small integer,
    # exact in float16, so the sequential sum agrees with XLA's (a float16
    # sum of 1e6 random values would not: that is the spec order's answer).
    d = _rng(2).integers(-8, 9, _n(q, 1_000_000, 1000) + 1)
    x = np.diff(d).astype(np.float16)
    return (lambda x: lax.reduce(x, np.float16(0), lax.add, (0,))), (x,)


@op("spec_sum_bf16", "spec", "lax.reduce add of 1e6 bf16 to one value, numerics=spec", env=SPEC,
    opt_in=True)
def _spec_sum_bf16(q):
    import ml_dtypes
    from jax import lax
    # Small-integer partial sums, exact in bfloat16 (as spec_sum_f16).
    d = _rng(2).integers(-8, 9, _n(q, 1_000_000, 1000) + 1)
    x = np.diff(d).astype(ml_dtypes.bfloat16)
    return (lambda x: lax.reduce(x, ml_dtypes.bfloat16(0), lax.add, (0,))), (x,)


@op("spec_sum_f32_4cols", "spec", "jnp.sum of (250000, 4) f32 over axis 0, numerics=spec",
    env=SPEC, opt_in=True)
def _spec_sum_f32_4cols(q):
    import jax.numpy as jnp
    # Small-integer partial sums, exact in float32: XLA's order agrees.
    d = _rng(3).integers(-8, 9, (_n(q, 250_000, 250) + 1, 4))
    x = np.diff(d, axis=0).astype(np.float32)
    return (lambda x: jnp.sum(x, axis=0)), (x,)


@op("spec_conv2d", "spec", "lax.conv NHWC (8, 32, 32, 16) with 3x3x16x32, numerics=spec", env=SPEC,
    opt_in=True)
def _spec_conv(q):
    return _conv(q)


# --------------------------------------------------------------------------
# Reductions.


@op("sum", "reduction", "jnp.sum of 1e6 f32")
def _sum(q):
    import jax.numpy as jnp
    return jnp.sum, (_f32(_n(q, 1_000_000, 1000)),)


@op("mean_axis0", "reduction", "x.mean(axis=0), x (1e6, 4) f32")
def _mean0(q):
    return (lambda x: x.mean(axis=0)), (_f32((_n(q, 1_000_000, 1000), 4)),)


@op("var_axis0", "reduction", "x.var(axis=0), x (5e5, 4) f32")
def _var0(q):
    return (lambda x: x.var(axis=0)), (_f32((_n(q, 500_000, 1000), 4)),)


@op("mean_axis1_3d", "reduction", "x.mean(axis=1), x (32, 128, 768) f32 (a middle axis)")
def _mean1_3d(q):
    return (lambda x: x.mean(axis=1)), (_f32((_n(q, 32, 2), _n(q, 128, 8), _n(q, 768, 16))),)


@op("max_axis1", "reduction", "x.max(axis=1), x (1000, 1000) f32")
def _max1(q):
    n = _n(q, 1000, 32)
    return (lambda x: x.max(axis=1)), (_f32((n, n)),)


@op("bn_stats", "reduction", "mean and var over (0, 1, 2) of NHWC (64, 32, 32, 16) f32")
def _bn(q):
    x = _f32((_n(q, 64, 2), 32, 32, 16))
    return (lambda x: (x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2)))), (x,)


# --------------------------------------------------------------------------
# Dispatch: a call whose program is one op on 4 elements costs what the
# runtime around the program costs (JAX's C++ dispatch, the PJRT calls, the
# plugin's Execute), timed with block_until_ready per call like every row.
@op("dispatch_add", "dispatch", "jit(x + 1) of 4 f32: one call's dispatch")
def _dispatch_add(q):
    return (lambda x: x + 1), (np.arange(4, dtype=np.float32),)


@op("dispatch_fori_1", "dispatch", "fori_loop of 1 scalar step: a while loop's fixed cost per call")
def _fori_1(q):
    from jax import lax

    def fn(x):
        return lax.fori_loop(0, 1, lambda i, c: c * 0.999 + 1.0, x)
    return fn, (np.float32(1.0),)


# Loops (per-step dispatch).


def _loop_steps(q):
    return _n(q, 1000, 20)


@op("fori_loop_scalar", "loop", "fori_loop of 1,000 scalar steps", steps=1000, steps_quick=20)
def _fori(q):
    from jax import lax
    n = _loop_steps(q)

    def fn(x):
        return lax.fori_loop(0, n, lambda i, c: c * 0.999 + 1.0, x)
    return fn, (np.float32(1.0),)


@op("fori_loop_sin", "loop", "fori_loop of 1,000 scalar steps x*0.99 + 0.1*sin(x + 0.001*i)",
    steps=1000, steps_quick=20)
def _fori_sin(q):
    import jax.numpy as jnp
    from jax import lax
    n = _loop_steps(q)

    def fn(x):
        return lax.fori_loop(0, n, lambda i, c: c * 0.99 + 0.1 * jnp.sin(c + 0.001 * i), x)
    return fn, (np.float32(1.0),)


@op("fori_loop_mixed", "loop", "fori_loop of 1,000 scalar steps of 10 ops: convert, tanh, "
    "compare, select, arithmetic", steps=1000, steps_quick=20)
def _fori_mixed(q):
    import jax.numpy as jnp
    from jax import lax
    n = _loop_steps(q)

    def body(i, c):
        y = jnp.tanh(c + i.astype(jnp.float32) * 0.001)
        return jnp.where(y > 0.5, y * 0.5, y + 0.25) * 0.9 + 0.05
    return (lambda x: lax.fori_loop(0, n, body, x)), (np.float32(1.0),)


@op("fori_loop_xorshift", "loop", "fori_loop of 1,000 xorshift32 steps to a uniform f32 sum",
    steps=1000, steps_quick=20)
def _fori_xorshift(q):
    import jax.numpy as jnp
    from jax import lax
    n = _loop_steps(q)

    def body(i, c):
        x, acc = c
        x = x ^ (x << 13)
        x = x ^ (x >> 17)
        x = x ^ (x << 5)
        u = lax.bitcast_convert_type((x >> 9) | np.uint32(0x3F800000), jnp.float32) - 1.0
        return x, acc + u
    return (lambda x: lax.fori_loop(0, n, body, (x, np.float32(0.0)))), (np.uint32(2463534242),)


@op("scan_scalar", "loop", "lax.scan of 1,000 scalar steps with outputs", steps=1000, steps_quick=20)
def _scan(q):
    from jax import lax
    n = _loop_steps(q)

    def fn(x, xs):
        return lax.scan(lambda c, v: (c * 0.5 + v, c), x, xs)
    return fn, (np.float32(0.0), _f32(n))


@op("while_loop_scalar", "loop", "while_loop of 1,000 scalar steps (counter and value)", steps=1000, steps_quick=20)
def _while(q):
    from jax import lax
    n = _loop_steps(q)

    def fn(x):
        return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 0.999 + 1.0),
                              (np.int32(0), x))[1]
    return fn, (np.float32(1.0),)


@op("scan_array", "loop", "lax.scan of 100 steps over a (256,) f32 carry (RNN-like)", steps=100, steps_quick=5,
    array_body=True)
def _scan_array(q):
    import jax.numpy as jnp
    from jax import lax
    n = _n(q, 100, 5)
    w = _f32((256, 256)) / 16

    def fn(h, w, xs):
        return lax.scan(lambda c, x: (jnp.tanh(c @ w + x), None), h, xs)[0]
    return fn, (_f32(256, 1), w, _f32((n, 256), 2))


# --------------------------------------------------------------------------
# Running.


def _fingerprint(out):
    import jax
    res = []
    for leaf in jax.tree.leaves(out):
        a = np.asarray(leaf)
        if a.dtype.kind in "fc" or a.dtype.kind in "iub":
            a64 = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
            res.append({"shape": list(a.shape), "sum": float(np.abs(np.nansum(a64)) if a.dtype.kind == "c"
                                                              else np.nansum(a64)),
                        "absum": float(np.nansum(np.abs(a64))),
                        "nan": int(np.isnan(a64).sum()) if a.dtype.kind in "fc" else 0})
        else:   # keys and other opaque dtypes
            res.append({"shape": list(a.shape), "sum": 0.0, "absum": 0.0, "nan": 0})
    return res


def time_on(fn, args, device, repeats, budget):
    import jax
    f = jax.jit(fn)
    dargs = [jax.device_put(a, device) for a in args]
    t0 = time.perf_counter()
    out = jax.block_until_ready(f(*dargs))
    first = time.perf_counter() - t0
    samples = []
    start = time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*dargs))
        samples.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget:
            break
    return {"status": "ok", "median_s": float(np.median(samples)), "samples_s": samples,
            "first_call_s": first, "outputs": _fingerprint(out)}


def run_op(o, quick, repeats, budget):
    from stablehlo_pjrt import config
    with config.variables(o.env or {}):
        return _run_op(o, quick, repeats, budget)


def _run_op(o, quick, repeats, budget):
    import jax
    fn, args = o.build(quick)
    entry = {"name": o.name, "group": o.group, "description": o.description,
             "systems": {}}
    for system, platform in (("cpu", "cpu"), ("ref", "stablehlo_ref")):
        try:
            entry["systems"][system] = time_on(fn, args, jax.devices(platform)[0], repeats, budget)
        except Exception as e:  # noqa: BLE001 - a failing op is a row, not a crash
            entry["systems"][system] = {"status": "error",
                                        "error": f"{type(e).__name__}: {str(e)[:300]}"}
    cpu, ref = entry["systems"]["cpu"], entry["systems"]["ref"]
    if cpu["status"] == "ok" and ref["status"] == "ok":
        entry["ratio"] = ref["median_s"] / cpu["median_s"]
        entry["agree"] = outputs_agree(ref["outputs"], cpu["outputs"])
    steps = o.steps_quick if quick else o.steps
    if o.steps > 1:
        entry["steps"] = steps
        entry["array_body"] = o.array_body
        if ref["status"] == "ok":
            entry["ref_per_step_s"] = ref["median_s"] / steps
    return entry


def combine_rounds(entries):
    """One row from an op's rows of several rounds of the sweep: each
    system's time is the median of the rounds' medians (one round's median
    can be off 2-3x when the scheduler or XLA's thread pools stall it); the
    ratio and the time per step follow from those."""
    if len(entries) == 1:
        return entries[0]
    entry = {k: v for k, v in entries[0].items()
             if k not in ("ratio", "agree", "ref_per_step_s")}
    entry["systems"] = {}
    for system in ("cpu", "ref"):
        runs = [e["systems"][system] for e in entries]
        failed = [r for r in runs if r["status"] != "ok"]
        if failed:
            entry["systems"][system] = failed[0]
            continue
        medians = [r["median_s"] for r in runs]
        entry["systems"][system] = dict(runs[0], median_s=float(np.median(medians)),
                                        round_medians_s=medians,
                                        samples_s=[t for r in runs for t in r["samples_s"]])
    cpu, ref = entry["systems"]["cpu"], entry["systems"]["ref"]
    if cpu["status"] == "ok" and ref["status"] == "ok":
        entry["ratio"] = ref["median_s"] / cpu["median_s"]
        entry["agree"] = all(e.get("agree", False) for e in entries)
    if "steps" in entry and ref["status"] == "ok":
        entry["ref_per_step_s"] = ref["median_s"] / entry["steps"]
    return entry


def fmt_time(s):
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.1f} µs"
    return f"{s * 1e9:.0f} ns"   # a step of a loop run in C


def _rounds_note(rounds):
    if rounds == 1:
        return ""
    return f"; each time the median of {rounds} rounds of the whole sweep"


def markdown(report):
    lines = ["# Cliff sweep: stablehlo_ref vs XLA CPU", "",
             f"{len(report['ops'])} operations, one process (`JAX_PLATFORMS=cpu,stablehlo_ref`), "
             f"median of up to {report['repeats']} calls after a warm-up call"
             f"{' (--quick sizes)' if report['quick'] else ''}"
             f"{_rounds_note(report.get('rounds', 1))}. "
             f"Load average {report['load_before']} before, {report['load_after']} after, "
             f"on {report['cpus']} CPUs; {report['date']}.", "",
             "| group | operation | XLA CPU | stablehlo_ref | ours/XLA | per step | check |",
             "|---|---|---|---|---|---|---|"]
    for e in report["ops"]:
        cpu, ref = e["systems"]["cpu"], e["systems"]["ref"]
        cell = lambda r: fmt_time(r["median_s"]) if r["status"] == "ok" else "error"  # noqa: E731
        ratio = f"{e['ratio']:.1f}x" if "ratio" in e else "-"
        step = fmt_time(e.get("ref_per_step_s")) if "ref_per_step_s" in e else ""
        if "agree" in e:
            check = "ok" if e["agree"] else "MISMATCH"
        else:
            check = "; ".join(r.get("error", "") for r in (cpu, ref) if r["status"] != "ok")
        lines.append(f"| {e['group']} | {e['description']} (`{e['name']}`) | {cell(cpu)} | "
                     f"{cell(ref)} | {ratio} | {step} | {check} |")
    over = report.get("over")
    if over is not None:
        lines += ["", f"Over the limits (max ratio {report['max_ratio']}, max per step "
                      f"{report['max_step_us']} µs): {', '.join(over) if over else 'none'}."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.cliffs", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes (the smoke test)")
    p.add_argument("--max-ratio", type=float, default=None,
                   help="exit 1 when an op (other than a scalar loop) is more than R times "
                        "slower than XLA CPU")
    p.add_argument("--max-step-us", type=float, default=None,
                   help="exit 1 when a scalar loop costs more than U microseconds per step")
    p.add_argument("--only", action="append", default=[], help="op name, or a substring of names (repeatable, comma-separated)")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--rounds", type=int, default=1,
                   help="run the whole sweep R times; each time is the median of the rounds'")
    p.add_argument("--budget", type=float, default=5.0, help="seconds of timed calls per op and system")
    p.add_argument("--json", default=None, help="write the full report (every sample) here")
    p.add_argument("--md", default=str(RESULTS_DIR / "cliffs.md"), help="markdown table output")
    args = p.parse_args(argv)

    from stablehlo_pjrt import config
    config.default_variable(config.JAX_PLATFORMS, "cpu,stablehlo_ref")
    import jax  # noqa: F401 - after JAX_PLATFORMS is set

    only = [s for o in args.only for s in o.split(",") if s]
    names = {o.name for o in OPS}
    # An exact name selects that op alone; anything else is a substring.
    ops = [o for o in OPS if (not only and not o.opt_in) or any(
        o.name == s if s in names else s in o.name for s in only)]
    report = {"quick": args.quick, "repeats": args.repeats, "rounds": args.rounds,
              "cpus": os.cpu_count(), "load_before": [round(x, 2) for x in os.getloadavg()],
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "ops": []}
    rows = {o.name: [] for o in ops}
    for _ in range(max(1, args.rounds)):
        for o in ops:
            e = run_op(o, args.quick, args.repeats, args.budget)
            rows[o.name].append(e)
            print(f"{o.name:22s} cpu {fmt_time(e['systems']['cpu'].get('median_s')):>10s}  "
                  f"ref {fmt_time(e['systems']['ref'].get('median_s')):>10s}  "
                  f"{e.get('ratio', float('nan')):8.1f}x"
                  f"{'  MISMATCH' if e.get('agree') is False else ''}", file=sys.stderr, flush=True)
    report["ops"] = [combine_rounds(rows[o.name]) for o in ops]
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]

    over = []
    failed = [e["name"] for e in report["ops"]
              if any(r["status"] != "ok" for r in e["systems"].values()) or e.get("agree") is False]
    if args.max_ratio is not None or args.max_step_us is not None:
        for e in report["ops"]:
            if "ref_per_step_s" in e and not e.get("array_body"):
                if args.max_step_us is not None and e["ref_per_step_s"] * 1e6 > args.max_step_us:
                    over.append(f"{e['name']} ({e['ref_per_step_s'] * 1e6:.1f} µs/step)")
            elif args.max_ratio is not None and e.get("ratio", 0) > args.max_ratio:
                over.append(f"{e['name']} ({e['ratio']:.1f}x)")
        report["over"] = over
        report["max_ratio"] = args.max_ratio
        report["max_step_us"] = args.max_step_us
    report["failed"] = failed

    md = markdown(report)
    Path(args.md).parent.mkdir(parents=True, exist_ok=True)
    Path(args.md).write_text(md)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    print(md)
    if failed:
        print(f"failed or mismatched: {', '.join(failed)}", file=sys.stderr)
        return 2
    if over:
        print(f"over the limit: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
