"""The benchmark workloads: the same JAX programs for every system.

Each workload is built by ``build(quick)`` which returns ``(fn, args)``:
``fn`` is a plain (un-jitted) JAX function and ``args`` a tuple of numpy
arrays. The runner jits ``fn`` (stablehlo_ref / XLA CPU) or lowers it to
StableHLO and hands it to the C++ reference interpreter.

``inner`` > 1 means the timed unit is ``inner`` back-to-back calls and the
reported time is per call (used for the per-call overhead workload).
``steps`` > 1 adds a derived per-step time (loops).
"""

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Workload:
    name: str
    description: str
    build: object
    inner: int = 1
    steps: int = 1
    tags: tuple = field(default_factory=tuple)


def _rng(seed=0):
    return np.random.default_rng(seed)


# --------------------------------------------------------------------------
# Builders. jax is imported lazily so that importing this module is cheap and
# does not pick a platform.


def _elementwise(quick):
    n = 10_000 if quick else 1_000_000
    x = _rng().standard_normal(n).astype(np.float32)

    def fn(x):
        import jax.numpy as jnp
        y = x * 1.5 + 0.5
        y = jnp.maximum(y, 0.0) - x * x
        y = y / (1.0 + jnp.abs(x))
        return jnp.where(x > 0.0, y, -y)
    return fn, (x,)


def _elementwise_math(quick):
    n = 10_000 if quick else 1_000_000
    x = _rng().standard_normal(n).astype(np.float32)

    def fn(x):
        import jax.numpy as jnp
        # GELU (tanh form) followed by a softplus: transcendental ops.
        g = 0.5 * x * (1.0 + jnp.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))
        return g + jnp.log1p(jnp.exp(-jnp.abs(x)))
    return fn, (x,)


def _matmul(n_full, n_quick):
    def build(quick):
        n = n_quick if quick else n_full
        r = _rng()
        a = r.standard_normal((n, n)).astype(np.float32)
        b = r.standard_normal((n, n)).astype(np.float32)

        def fn(a, b):
            return a @ b
        return fn, (a, b)
    return build


def _mlp_params(quick):
    sizes = (32, 64, 64, 10) if quick else (784, 512, 512, 10)
    batch = 16 if quick else 128
    r = _rng()
    params = []
    for i, o in zip(sizes[:-1], sizes[1:]):
        params.append((r.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32))
        params.append(np.zeros((o,), np.float32))
    x = r.standard_normal((batch, sizes[0])).astype(np.float32)
    labels = r.integers(0, sizes[-1], batch).astype(np.int32)
    return params, x, labels


def _mlp_step(quick):
    params, x, labels = _mlp_params(quick)
    nparams = len(params)

    def fn(*args):
        import jax
        import jax.numpy as jnp
        ps, x, labels = list(args[:nparams]), args[nparams], args[nparams + 1]

        def loss(ps):
            h = x
            for i in range(0, len(ps) - 2, 2):
                h = jax.nn.relu(h @ ps[i] + ps[i + 1])
            logits = h @ ps[-2] + ps[-1]
            logp = jax.nn.log_softmax(logits)
            return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

        val, grads = jax.value_and_grad(loss)(ps)
        return (val, *[p - 0.01 * g for p, g in zip(ps, grads)])
    return fn, (*params, x, labels)


def _conv2d(quick):
    shape = (2, 16, 16, 8) if quick else (8, 64, 64, 32)
    cout = 16 if quick else 64
    r = _rng()
    x = r.standard_normal(shape).astype(np.float32)
    w = (r.standard_normal((3, 3, shape[-1], cout)) * 0.1).astype(np.float32)

    def fn(x, w):
        from jax import lax
        return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return fn, (x, w)


def _maxpool(quick):
    shape = (2, 16, 16, 8) if quick else (8, 64, 64, 32)
    x = _rng().standard_normal(shape).astype(np.float32)

    def fn(x):
        import jax.numpy as jnp
        from jax import lax
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    return fn, (x,)


def _fori_loop(quick):
    steps = 1000
    x = np.float32(0.5)

    def fn(x):
        from jax import lax
        return lax.fori_loop(0, steps, lambda i, v: v * 0.999 + 0.001, x)
    return fn, (np.asarray(x),)


def _scan_rnn(quick):
    steps, batch, hidden, inp = (100, 4, 16, 8) if quick else (100, 16, 128, 64)
    r = _rng()
    xs = r.standard_normal((steps, batch, inp)).astype(np.float32)
    w = (r.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    u = (r.standard_normal((inp, hidden)) / np.sqrt(inp)).astype(np.float32)
    b = np.zeros((hidden,), np.float32)
    h0 = np.zeros((batch, hidden), np.float32)

    def fn(h0, xs, w, u, b):
        import jax.numpy as jnp
        from jax import lax

        def step(h, x):
            h = jnp.tanh(h @ w + x @ u + b)
            return h, h  # carry and the per-step hidden states
        return lax.scan(step, h0, xs)
    return fn, (h0, xs, w, u, b)


def _sort(quick):
    n = 1_000 if quick else 100_000
    x = _rng().standard_normal(n).astype(np.float32)

    def fn(x):
        import jax.numpy as jnp
        return jnp.sort(x)
    return fn, (x,)


def _gather(quick):
    rows, cols, n = (1_000, 16, 1_000) if quick else (100_000, 64, 10_000)
    r = _rng()
    table = r.standard_normal((rows, cols)).astype(np.float32)
    idx = r.integers(0, rows, n).astype(np.int32)

    def fn(table, idx):
        return table[idx]
    return fn, (table, idx)


def _scatter_add(quick):
    rows, cols, n = (100, 16, 1_000) if quick else (1_000, 64, 10_000)
    r = _rng()
    acc = np.zeros((rows, cols), np.float32)
    idx = r.integers(0, rows, n).astype(np.int32)
    upd = r.standard_normal((n, cols)).astype(np.float32)

    def fn(acc, idx, upd):
        return acc.at[idx].add(upd)
    return fn, (acc, idx, upd)


def _random_normal(quick):
    n = 1_000 if quick else 100_000
    key = np.array([0, 42], np.uint32)  # a raw threefry key (jax.random.PRNGKey(42))

    def fn(key):
        import jax
        return jax.random.normal(key, (n,), dtype="float32")
    return fn, (key,)


def _transformer(quick):
    batch, seq, d, heads, ff = (1, 16, 32, 2, 64) if quick else (4, 128, 256, 4, 1024)
    r = _rng()

    def mat(i, o):
        return (r.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32)

    x = r.standard_normal((batch, seq, d)).astype(np.float32)
    args = (x, mat(d, 3 * d), mat(d, d), mat(d, ff), mat(ff, d),
            np.ones(d, np.float32), np.zeros(d, np.float32),
            np.ones(d, np.float32), np.zeros(d, np.float32))

    def fn(x, wqkv, wo, w1, w2, g1, b1, g2, b2):
        import jax
        import jax.numpy as jnp

        def ln(h, g, b):
            mu = h.mean(-1, keepdims=True)
            var = ((h - mu) ** 2).mean(-1, keepdims=True)
            return (h - mu) * jax.lax.rsqrt(var + 1e-5) * g + b

        B, S, D = x.shape
        hd = D // heads
        h = ln(x, g1, b1)
        q, k, v = jnp.split(h @ wqkv, 3, axis=-1)
        q, k, v = (t.reshape(B, S, heads, hd).transpose(0, 2, 1, 3) for t in (q, k, v))
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(hd).astype(np.float32)
        mask = jnp.tril(jnp.ones((S, S), bool))
        s = jnp.where(mask, s, -1e9)
        a = jax.nn.softmax(s, axis=-1)
        o = jnp.einsum("bhqk,bhkd->bhqd", a, v).transpose(0, 2, 1, 3).reshape(B, S, D)
        x = x + o @ wo
        h = ln(x, g2, b2)
        return x + jax.nn.gelu(h @ w1) @ w2
    return fn, args


def _overhead(quick):
    x = np.float32(1.0)

    def fn(x):
        return x + 1
    return fn, (np.asarray(x),)


WORKLOADS = [
    Workload("elementwise", "chain of 9 arithmetic/compare/select ops on 1e6 f32", _elementwise),
    Workload("elementwise_math", "GELU(tanh) + softplus on 1e6 f32 (transcendentals)",
             _elementwise_math),
    Workload("matmul_256", "f32 256x256 @ 256x256", _matmul(256, 32)),
    Workload("matmul_1024", "f32 1024x1024 @ 1024x1024", _matmul(1024, 64)),
    Workload("mlp_step", "MLP 784-512-512-10, batch 128: loss, grad, SGD update", _mlp_step),
    Workload("conv2d", "conv NHWC 8x64x64x32, 3x3 HWIO kernel -> 64, SAME", _conv2d),
    Workload("maxpool", "reduce_window max 3x3 stride 2 on 8x64x64x32", _maxpool),
    Workload("fori_loop", "fori_loop of 1000 scalar steps", _fori_loop, steps=1000),
    Workload("scan_rnn", "scan of 100 tanh-RNN steps (batch 16, hidden 128), all hidden states out", _scan_rnn,
             steps=100),
    Workload("sort", "sort 1e5 f32", _sort),
    Workload("gather", "gather 1e4 rows of a 1e5x64 f32 table", _gather),
    Workload("scatter_add", "scatter-add 1e4 rows of 64 into 1000x64", _scatter_add),
    Workload("random_normal", "jax.random.normal, 1e5 f32 (threefry)", _random_normal),
    Workload("transformer", "pre-LN transformer block fwd: batch 4, seq 128, d 256, 4 heads, ff 1024",
             _transformer),
    Workload("call_overhead", "per call of jit(lambda x: x + 1) on a f32 scalar", _overhead,
             inner=200),
]

BY_NAME = {w.name: w for w in WORKLOADS}
