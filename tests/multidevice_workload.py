"""Multi-device JAX workloads for tests/test_pjrt_multidevice.py.

Run as ``python multidevice_workload.py OUT.pkl N`` with N = 4 (a 2x2 mesh)
or 8 (a 2x4 mesh) on whatever platform JAX_PLATFORMS selects; writes, per
case, each output's global value, sharding and addressable shards (or the
error), so that two platforms' runs can be compared.
"""

import pickle
import sys
import traceback
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

OUT, N = sys.argv[1], int(sys.argv[2])
assert len(jax.devices()) == N, jax.devices()
RESULTS = {}


def describe(x):
    x = jax.block_until_ready(x)
    sh = x.sharding
    spec = str(sh.spec) if isinstance(sh, NamedSharding) else type(sh).__name__
    shards = sorted((s.device.id, str(s.index), np.asarray(s.data))
                    for s in x.addressable_shards)
    return {"value": np.asarray(x), "spec": spec, "shards": shards,
            "replicated": sh.is_fully_replicated}


def case(name, exact_sharding=True):
    """``exact_sharding``: the program fixes every output's sharding (so the
    two platforms must agree on it, not only on values)."""
    def deco(fn):
        try:
            out = fn()
            outs = out if isinstance(out, (tuple, list)) else [out]
            RESULTS[name] = {"outs": [describe(o) for o in jax.tree.leaves(outs)],
                             "exact": exact_sharding}
        except Exception as e:  # noqa: BLE001 - recorded for the test to show
            RESULTS[name] = {"error": f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"}
        return fn
    return deco


rng = np.random.default_rng(0)
A = rng.standard_normal((8, 16)).astype(np.float32)
B = rng.standard_normal((16, 8)).astype(np.float32)

if N == 4:
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    amesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    X, Y = "x", "y"
else:
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    amesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    X, Y = "data", "model"


def ns(*spec, m=None):
    return NamedSharding(m or mesh, P(*spec))


@case("device_put_round_trip")
def _():
    outs = []
    for spec in [(X, Y), (X,), (None, Y), ((X, Y),), ()]:
        a = jax.device_put(A, ns(*spec))
        assert np.array_equal(np.asarray(a), A)
        outs.append(a)
    # resharding between layouts (device to device)
    outs.append(jax.device_put(outs[0], ns(Y, X)))
    return outs


@case("jit_elementwise")
def _():
    a = jax.device_put(A, ns(X, Y))
    b = jax.device_put(A * 0.5 + 1, ns(X, Y))
    f = jax.jit(lambda a, b: (jnp.sin(a) * 2 + b, jnp.exp(-a * b)),
                out_shardings=(ns(X, Y), ns(None, Y)))
    return f(a, b)


@case("jit_matmul_reductions")
def _():
    a = jax.device_put(A, ns(X, None, m=amesh))
    b = jax.device_put(B, ns(None, Y, m=amesh))
    f = jax.jit(lambda a, b: (a @ b, (a @ b).sum(0), jnp.max(a), a.mean(1)),
                out_shardings=(ns(X, Y, m=amesh), ns(Y, m=amesh), ns(m=amesh),
                               ns(X, m=amesh)))
    return f(a, b)


@case("jit_unspecified_out_shardings", exact_sharding=False)
def _():
    a = jax.device_put(A, ns(X, Y, m=amesh))
    f = jax.jit(lambda a: (a + 1, jnp.tanh(a) @ a.T, a.sum(),
                           jax.lax.with_sharding_constraint(a * 3, ns(None, X, m=amesh))))
    return f(a)


@case("jit_sharding_constraint")
def _():
    a = jax.device_put(A, ns(X, Y, m=amesh))
    f = jax.jit(lambda a: jax.lax.with_sharding_constraint(jnp.cos(a), ns(Y, None, m=amesh)) * 2,
                out_shardings=ns(None, X, m=amesh))
    return f(a)


@case("shard_map_collectives")
def _():
    a = jax.device_put(A, ns(X, Y))

    @jax.jit
    @partial(jax.shard_map, mesh=mesh, in_specs=(P(X, Y),),
             out_specs=(P(X, None), P(X, Y), P(X, Y), P(X, Y), P(X, Y), P(X, Y), P(X, Y)))
    def f(a):
        s = jax.lax.psum(a, Y)                                   # replicated over Y
        g = jax.lax.all_gather(a, Y, axis=1, tiled=True)          # (rows, 16)
        n = jax.lax.axis_size(Y)
        p = jax.lax.ppermute(a, Y, [(i, (i + 1) % n) for i in range(n)])
        i = jax.lax.axis_index(X) * 10 + jax.lax.axis_index(Y)
        idx = jnp.full(a.shape, i, jnp.float32)
        t = jax.lax.all_to_all(a, Y, split_axis=0, concat_axis=1, tiled=True)
        rs = jax.lax.psum_scatter(jnp.tile(a, (n, 1)), Y, scatter_dimension=0, tiled=True)
        m = jax.lax.pmean(a * a, (X, Y))
        return s, p, idx, g, t.reshape(a.shape), rs, m
    return f(a)


@case("shard_map_partial_manual")
def _():
    a = jax.device_put(A, ns(X, None, m=amesh))

    @jax.jit
    @partial(jax.shard_map, mesh=amesh, in_specs=P(X), out_specs=P(X), axis_names={X})
    def f(a):
        return a - jax.lax.pmean(a, X) + jax.lax.axis_index(X)
    return f(a)


@case("pmap_psum")
def _():
    x = np.arange(N * 3, dtype=np.float32).reshape(N, 3)
    f = jax.pmap(lambda v: (jax.lax.psum(v, "i"), v * jax.lax.axis_index("i"),
                            jax.lax.all_gather(v, "i")), axis_name="i")
    return f(x)


@case("mlp_train_step")
def _():
    k = np.random.default_rng(1)
    w1 = jax.device_put(k.standard_normal((16, 32)).astype(np.float32) * 0.3, ns(None, Y, m=amesh))
    b1 = jax.device_put(np.zeros(32, np.float32), ns(Y, m=amesh))
    w2 = jax.device_put(k.standard_normal((32, 4)).astype(np.float32) * 0.3, ns(Y, None, m=amesh))
    x = jax.device_put(k.standard_normal((8, 16)).astype(np.float32), ns(X, None, m=amesh))
    y = jax.device_put(k.standard_normal((8, 4)).astype(np.float32), ns(X, None, m=amesh))
    params = (w1, b1, w2)
    shardings = jax.tree.map(lambda p: p.sharding, params)

    def loss(params, x, y):
        w1, b1, w2 = params
        h = jax.nn.relu(x @ w1 + b1)
        return jnp.mean((h @ w2 - y) ** 2)

    @partial(jax.jit, out_shardings=(shardings, ns(m=amesh)))
    def step(params, x, y):
        l, g = jax.value_and_grad(loss)(params, x, y)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, g), l

    losses = []
    for _ in range(3):
        params, l = step(params, x, y)
        losses.append(l)
    return list(params) + losses


with open(OUT, "wb") as fh:
    pickle.dump(RESULTS, fh)
print("DONE", len(RESULTS))
