"""Scenarios for the runtime tests (tests/test_jax_runtime_*.py).

Run as ``python runtime_scenarios.py PLATFORM NAME...``: for each scenario it
prints one JSON line ``{"name", "values", "stdout", "error"}`` with the
results (as lists), the text the program printed (``jax.debug.print``,
callbacks) and the error message, if any. The tests run it once on
``stablehlo_ref`` and once on XLA CPU and compare, so the scenarios say
nothing about either platform: they are plain JAX programs.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

SCENARIOS = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def _sds(v, shape=None):
    import jax
    return jax.ShapeDtypeStruct(v.shape if shape is None else shape, v.dtype)


# ---------------------------------------------------------------------------
# Host callbacks.


@scenario
def debug_print_basic(jax, jnp, np):
    def f(x):
        jax.debug.print("x={x} sum={s}", x=x, s=x.sum())
        return x * 2
    return jax.jit(f)(jnp.arange(3.0))


@scenario
def debug_callback_kwargs(jax, jnp, np):
    def f(x):
        jax.debug.callback(lambda a, b=None: print("cb", np.asarray(a), np.asarray(b)),
                           x, b=x + 1)
        return x
    return jax.jit(f)(jnp.arange(3, dtype=jnp.int32))


@scenario
def ordered_prints_in_scan(jax, jnp, np):
    def body(c, i):
        jax.debug.print("step {i} carry {c}", i=i, c=c, ordered=True)
        return c + i, c * 2
    return jax.jit(lambda xs: jax.lax.scan(body, 0.0, xs))(jnp.arange(4.0))


@scenario
def prints_in_while_and_cond(jax, jnp, np):
    def f(x):
        def body(c):
            jax.lax.cond(c % 2 == 0, lambda: jax.debug.print("even {}", c, ordered=True),
                         lambda: jax.debug.print("odd {}", c, ordered=True))
            return c + 1
        return jax.lax.while_loop(lambda c: c < x, body, 0)
    return jax.jit(f)(5)


@scenario
def pure_callback_values(jax, jnp, np):
    def f(x):
        y = jax.pure_callback(lambda a: np.sin(a) + 1, _sds(x), x)
        return y * 3, jax.pure_callback(lambda a: (a.sum(), a.max()),
                                        (_sds(x, ()), _sds(x, ())), y)
    return jax.jit(f)(jnp.linspace(0, 1, 5, dtype=jnp.float32))


@scenario
def pure_callback_vmap_methods(jax, jnp, np):
    out = {}
    for method in ("sequential", "sequential_unrolled", "expand_dims", "broadcast_all",
                   "legacy_vectorized"):
        def cb(a, method=method):
            print(method, "called with", a.shape)
            return np.cos(a)
        g = jax.vmap(lambda v, cb=cb, method=method: jax.pure_callback(
            cb, _sds(v), v, vmap_method=method))
        out[method] = jax.jit(g)(jnp.arange(6.0).reshape(3, 2))
    return out


@scenario
def pure_callback_under_grad(jax, jnp, np):
    @jax.custom_jvp
    def sin(x):
        return jax.pure_callback(np.sin, _sds(x), x, vmap_method="expand_dims")

    @sin.defjvp
    def _jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return sin(x), jax.pure_callback(np.cos, _sds(x), x, vmap_method="sequential") * t
    x = jnp.linspace(-1, 1, 4, dtype=jnp.float32)
    return (jax.jit(jax.grad(lambda v: sin(v).sum()))(x),
            jax.jit(jax.vmap(jax.grad(lambda v: sin(v) * 2)))(x))


@scenario
def io_callback_ordered_and_not(jax, jnp, np):
    from jax.experimental import io_callback
    log = []

    def record(a):
        log.append(np.asarray(a).tolist())
        print("io", np.asarray(a))
        return np.asarray(a) * 2

    def f(x):
        y = io_callback(record, _sds(x), x, ordered=True)
        z = io_callback(record, _sds(x), y + 1, ordered=True)
        w = io_callback(record, _sds(x), z, ordered=False)
        return w
    out = jax.jit(f)(jnp.arange(3.0))
    jax.effects_barrier()
    return out, log


@scenario
def io_callback_in_scan_and_vmap(jax, jnp, np):
    from jax.experimental import io_callback

    def step(c, x):
        y = io_callback(lambda a, b: np.asarray(a + b), _sds(x), c, x, ordered=True)
        return y, y
    scanned = jax.jit(lambda xs: jax.lax.scan(step, 0.0, xs))(jnp.arange(4.0))
    mapped = jax.jit(jax.vmap(lambda v: io_callback(
        lambda a: np.asarray(a) ** 2, _sds(v), v)))(jnp.arange(3.0))
    return scanned, mapped


@scenario
def callback_raises(jax, jnp, np):
    def bad(a):
        raise ValueError("the callback failed on purpose")
    return jax.jit(lambda v: jax.pure_callback(bad, _sds(v), v))(jnp.ones(2))


@scenario
def callback_wrong_shape(jax, jnp, np):
    return jax.jit(lambda v: jax.pure_callback(lambda a: np.ones(3, np.float32),
                                               _sds(v), v))(jnp.ones(2))


@scenario
def callbacks_multi_device(jax, jnp, np):
    from jax import shard_map
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P
    devs = jax.devices()[:2]
    mesh = Mesh(np.array(devs), ("i",))
    xs = jax.device_put(jnp.arange(4.0), NamedSharding(mesh, P("i")))
    a = jax.jit(lambda v: (jax.debug.print("global {}", v), v * 2)[1])(xs)
    jax.effects_barrier()
    b = jax.jit(lambda v: jax.pure_callback(np.sin, _sds(v), v))(xs)
    c = jax.jit(shard_map(lambda v: jax.pure_callback(np.cos, _sds(v), v),
                          mesh=mesh, in_specs=P("i"), out_specs=P("i")))(xs)
    return a, b, c


@scenario
def debug_print_shard_map(jax, jnp, np):
    from jax import shard_map
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()[:2]), ("i",))
    xs = jax.device_put(jnp.arange(4.0), NamedSharding(mesh, P("i")))
    # Prints once per device; the order between devices is not specified
    # (XLA CPU runs them in parallel too): the test compares sorted lines.
    return jax.jit(shard_map(lambda v: (jax.debug.print("shard {}", v), v + 1)[1],
                             mesh=mesh, in_specs=P("i"), out_specs=P("i")))(xs)


@scenario
def debug_print_pmap(jax, jnp, np):
    return jax.pmap(lambda v: (jax.debug.print("pmap {}", v), v * 3)[1],
                    devices=jax.devices()[:2])(jnp.arange(2.0))


@scenario
def debug_print_pmap_no_outputs(jax, jnp, np):
    # A program with no results on several devices: PJRT reports one
    # sharding for the empty result tuple (JAX's debugging_primitives_test
    # test_unordered_print_works_in_pmap).
    jax.pmap(lambda v: jax.debug.print("pmap only {}", v),
             devices=jax.devices()[:2])(jnp.arange(2.0))
    jax.effects_barrier()
    return None


# ---------------------------------------------------------------------------
# Buffer ownership: aliasing and donation.


def _ptr(a):
    return a.unsafe_buffer_pointer()


@scenario
def outputs_never_alias_inputs(jax, jnp, np):
    x = jnp.arange(6.0)
    y = jax.jit(jnp.asarray)(x)
    r = jax.jit(lambda a: a.reshape(2, 3))(x)
    a, b = jax.jit(lambda a: (a, a))(x)
    c1 = jax.jit(lambda: jnp.arange(3.0))()
    c2 = jax.jit(lambda: jnp.arange(3.0))()
    k1 = jax.jit(lambda a: (a, jnp.ones(3)))(x)[1]
    k2 = jax.jit(lambda a: (a, jnp.ones(3)))(x)[1]
    return {"identity_shares": _ptr(y) == _ptr(x), "reshape_shares": _ptr(r) == _ptr(x),
            "pair_shares": _ptr(a) == _ptr(b), "pair_first_shares": _ptr(a) == _ptr(x),
            "constant_shares": _ptr(c1) == _ptr(c2), "const_out_shares": _ptr(k1) == _ptr(k2),
            "values": [y, r, a, b, c1, k1]}


@scenario
def donation_deletes_and_aliases(jax, jnp, np):
    import warnings
    out = {}
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        x = jnp.arange(4.0)
        px = _ptr(x)
        y = jax.jit(lambda a: a, donate_argnums=0)(x)
        out["identity"] = [x.is_deleted(), _ptr(y) == px, y]
        x2 = jnp.arange(4.0)
        y2 = jax.jit(lambda a, b: (a * 2, b + 1), donate_argnums=0)(x2, jnp.ones(3))
        out["scale"] = [x2.is_deleted(), y2]
        try:
            x2 + 1
            out["use_after"] = None
        except Exception as e:  # noqa: BLE001
            out["use_after"] = f"{type(e).__name__}: {e}"
        try:
            jax.jit(lambda a: a + 1)(x2)
            out["pass_after"] = None
        except Exception as e:  # noqa: BLE001
            out["pass_after"] = f"{type(e).__name__}: {e}"
        z = jnp.arange(3.0)
        s = jax.jit(lambda a: a.sum(), donate_argnums=0)(z)  # nothing to alias
        out["unusable"] = [z.is_deleted(), s]
        p = {"w": jnp.ones((2, 2)), "b": jnp.zeros(2)}
        step = jax.jit(lambda p, g: jax.tree.map(lambda a, b: a - 0.1 * b, p, g),
                       donate_argnums=0)
        for _ in range(3):
            old = p
            p = step(p, {"w": jnp.ones((2, 2)), "b": jnp.ones(2)})
        out["train"] = [old["w"].is_deleted(), p]
        u = jnp.zeros(5)
        v = jax.jit(lambda a: a.at[1].set(7.0), donate_argnums=0)(u)
        out["update"] = [u.is_deleted(), v]
        # The donated memory is reused: the update happens in place and the
        # result keeps the input's address (as on XLA CPU).
        d = jnp.zeros(6)
        pd = _ptr(d)
        e = jax.jit(lambda a: jax.lax.dynamic_update_slice(a, jnp.ones(2), (2,)),
                    donate_argnums=0)(d)
        out["in_place"] = [d.is_deleted(), _ptr(e) == pd, e]
    out["warnings"] = sorted(str(x.message).split("\n")[0] for x in w)
    return out


def _shard_ptrs(a):
    return [s.data.unsafe_buffer_pointer() for s in a.addressable_shards]


@scenario
def donation_multi_device(jax, jnp, np):
    """Donation with every device (run with several): pmap, sharded jit with
    and without out_shardings, replicated, shard_map; whether the donated
    array is deleted, whether each device's output keeps the donated shard's
    address, the values, and the error on reuse."""
    import warnings

    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    devs = jax.devices()
    n = len(devs)
    mesh = jax.sharding.Mesh(np.array(devs), ("i",))
    rows = NamedSharding(mesh, P("i"))
    out = {}

    def case(name, fn, x):
        # Two donating steps: the first donates an array another program
        # made, the second the first's output (a training loop's state).
        first = _shard_ptrs(x)
        y = fn(x)
        out[name] = {"deleted": x.is_deleted(),
                     "kept_first": [a == b for a, b in zip(_shard_ptrs(y), first)],
                     "reuse": _attempt(lambda: (x + 1).tolist())}
        before = _shard_ptrs(y)
        z = fn(y)
        out[name].update(deleted_again=y.is_deleted(), values=z,
                         kept=[a == b for a, b in zip(_shard_ptrs(z), before)])

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        stack = np.stack([np.arange(4, dtype=np.float32) + i for i in range(n)])
        case("pmap", jax.pmap(lambda a: a * 2, donate_argnums=0),
             jax.pmap(lambda a: a + 0)(stack))
        dus = lambda a: jax.lax.dynamic_update_slice(a, jnp.ones(2, a.dtype), (2,))  # noqa: E731
        case("pmap_in_place", jax.pmap(dus, donate_argnums=0),
             jax.pmap(lambda a: a + 0)(np.zeros((n, 6), np.float32)))
        case("jit_out_shardings", jax.jit(lambda a: a * 2, donate_argnums=0, out_shardings=rows),
             jax.device_put(jnp.arange(4.0 * n), rows))
        case("jit_open_shardings", jax.jit(lambda a: a * 2, donate_argnums=0),
             jax.device_put(jnp.arange(4.0 * n), rows))
        case("jit_in_place", jax.jit(dus, donate_argnums=0, out_shardings=rows),
             jax.device_put(jnp.zeros(4 * n), rows))
        case("shard_map", jax.jit(jax.shard_map(lambda a: a.at[0].set(1.0), mesh=mesh,
                                                in_specs=P("i"), out_specs=P("i")),
                                  donate_argnums=0),
             jax.device_put(jnp.zeros(4 * n), rows))
        # Shapes differ, bytes agree: JAX leaves it to the compiler (buffer
        # donor), which aliases by size.
        case("reshape", jax.jit(lambda a: a.reshape(n, 4) + 1, donate_argnums=0,
                                out_shardings=NamedSharding(mesh, P("i", None))),
             jax.device_put(jnp.arange(4.0 * n), rows))
        x = jax.device_put(jnp.arange(4.0 * n), rows)
        s = jax.jit(lambda a: a.sum(), donate_argnums=0)(x)
        out["unusable"] = [x.is_deleted(), s]
        r = jax.device_put(jnp.arange(4.0), NamedSharding(mesh, P()))
        y = jax.jit(lambda a: a + 1, donate_argnums=0, out_shardings=NamedSharding(mesh, P()))(r)
        out["replicated"] = [r.is_deleted(), y]
        # A shard copied to another device (the plugin's copy shares the
        # array) must not see the donating program's write.
        a = jax.device_put(jnp.arange(4.0 * n), rows)
        b = jax.device_put(a.addressable_shards[0].data, devs[-1])
        y = jax.jit(dus, donate_argnums=0, out_shardings=rows)(a)
        out["shared_shard"] = [a.is_deleted(), b, y[:6]]
        # A training loop: the parameters come back sharded and are donated
        # again each step.
        params = jax.device_put(jnp.ones(4 * n), rows)
        step = jax.jit(lambda p, g: p - 0.5 * g, donate_argnums=0)
        kept = []
        for _ in range(3):
            before = _shard_ptrs(params)
            old, params = params, step(params, jnp.arange(4.0 * n))
            kept.append(old.is_deleted() and _shard_ptrs(params) == before)
        out["loop"] = [kept, params]
    out["warnings"] = sorted(str(x.message).split("\n")[0] for x in w)
    return out


@scenario
def donation_clashes(jax, jnp, np):
    """XLA's errors for a buffer passed twice in a donating call."""
    x = jnp.arange(4.0)
    out = {}
    out["twice"] = _attempt(lambda: jax.jit(lambda a, b: (a + b, a - b),
                                            donate_argnums=(0, 1))(x, x))
    out["donated_then_used"] = _attempt(lambda: jax.jit(lambda a, b: (a + b, a - b),
                                                        donate_argnums=0)(x, x))
    out["used_then_donated"] = _attempt(lambda: jax.jit(lambda a, b: (a + b, a - b),
                                                        donate_argnums=1)(x, x))
    out["alive_after"] = [x.is_deleted(), x]
    return out


@scenario
def dce_sink_and_empty(jax, jnp, np):
    from jax import lax

    def f(x):
        try:
            lax.dce_sink(x * 2, prevent_mlir_dce=True)
        except TypeError:  # JAX 0.8.0: no prevent_mlir_dce, the sink is always kept
            lax.dce_sink(x * 2)
        e = lax.empty((3,), jnp.float32)  # contents undefined until written
        return x + 1, lax.dynamic_update_slice(e, x * 3, (0,))
    text = jax.jit(f).lower(jnp.ones(3)).as_text()
    # (lax.empty lowers to @AllocateBuffer only for TPU/GPU: zeros elsewhere.)
    return jax.jit(f)(jnp.ones(3)), "@dce_sink" in text


# ---------------------------------------------------------------------------
# Memory kinds.


@scenario
def memory_kinds(jax, jnp, np):
    from jax.ad_checkpoint import checkpoint_name
    from jax.experimental.compute_on import compute_on
    from jax.sharding import SingleDeviceSharding
    dev = jax.devices()[0]
    out = {"memories": [m.kind for m in dev.addressable_memories()],
           "default": dev.default_memory().kind}
    x = jnp.arange(4.0)
    pinned = SingleDeviceSharding(dev, memory_kind="pinned_host")
    h = jax.device_put(x, pinned)
    u = jax.device_put(x, SingleDeviceSharding(dev, memory_kind="unpinned_host"))
    back = jax.device_put(h, SingleDeviceSharding(dev))
    out["put"] = [h.sharding.memory_kind, u.sharding.memory_kind, back.sharding.memory_kind,
                  h, u, back, jax.device_put(x, jax.memory.Space.Host).sharding.memory_kind]
    y = jax.jit(lambda a: a * 2, out_shardings=pinned)(x)
    z = jax.jit(lambda a: a + 1)(h)
    out["jit"] = [y.sharding.memory_kind, y, z.sharding.memory_kind, z]

    @compute_on("device_host")
    @jax.jit
    def g(a):
        return a * 3
    out["compute_on"] = jax.jit(lambda a: g(a) + 1)(x)

    def loss(w, a):
        return (checkpoint_name(jnp.sin(a @ w), "y") ** 2).sum()
    w, a = jnp.full((4, 4), 0.1), jnp.arange(8.0).reshape(2, 4)
    names = jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["y"],
        offload_src="device", offload_dst="pinned_host")
    dots = jax.checkpoint_policies.offload_dot_with_no_batch_dims("device", "pinned_host")
    out["offload"] = [jax.jit(jax.grad(jax.checkpoint(loss, policy=p)))(w, a)
                      for p in (names, dots)]
    return out


# ---------------------------------------------------------------------------
# DLPack.


def _attempt(f):
    try:
        return f()
    except Exception as e:  # noqa: BLE001 - the error is the result
        return f"{type(e).__name__}: {e}"


def _dlpack_helpers(jax, dev):
    """The plugin's DLPack helpers on stablehlo_ref; JAX's own calls on CPU
    (which needs none): the same user intent on both platforms."""
    import stablehlo_pjrt
    if dev.platform == "stablehlo_ref":
        return stablehlo_pjrt.dlpack_view, stablehlo_pjrt.from_dlpack
    return (lambda x: x), jax.dlpack.from_dlpack


@scenario
def dlpack_export(jax, jnp, np):
    import torch
    dev = jax.devices()[0]
    view, _ = _dlpack_helpers(jax, dev)
    x = jax.device_put(jnp.arange(6.0).reshape(2, 3), dev)
    p = x.unsafe_buffer_pointer()
    out = {}
    a = np.asarray(x)
    out["asarray"] = [a.ctypes.data == p, a.flags.writeable, a]
    m = memoryview(x)
    out["memoryview"] = [m.readonly, np.asarray(m)]
    out["dunder_dlpack"] = _attempt(lambda: type(x.__dlpack__()).__name__)
    out["np_from_dlpack"] = _attempt(lambda: np.from_dlpack(x))
    out["np_from_dlpack_cpu"] = _attempt(lambda: np.from_dlpack(x, device="cpu"))
    out["torch_from_dlpack"] = _attempt(lambda: torch.from_dlpack(x).tolist())
    out["jax_from_dlpack"] = _attempt(lambda: jax.dlpack.from_dlpack(x))
    v = view(x)
    n = np.from_dlpack(v)
    t = torch.from_dlpack(v)
    j = jax.dlpack.from_dlpack(v)
    out["view"] = {"numpy": [n.ctypes.data == p, n.flags.writeable, n],
                   "torch": [t.data_ptr() == p, t.tolist()],
                   "jax": [str(next(iter(j.devices())).platform), j]}
    h = jax.device_put(jnp.arange(3, dtype=jnp.int32),
                       jax.sharding.SingleDeviceSharding(dev, memory_kind="pinned_host"))
    hv = np.from_dlpack(view(h))
    out["pinned_host"] = [hv.ctypes.data == h.unsafe_buffer_pointer(), hv]
    b = jax.device_put(jnp.array([1, 2], jnp.bfloat16), dev)
    out["bfloat16"] = torch.from_dlpack(view(b)).float().tolist()
    return out


@scenario
def dlpack_import(jax, jnp, np):
    import torch
    dev = jax.devices()[0]
    _, imp = _dlpack_helpers(jax, dev)
    out = {}
    # 64-byte aligned: XLA CPU views only such memory (else it copies, and
    # refuses copy=False); stablehlo_ref views any address.
    raw = np.zeros(8 * 4 + 64, np.uint8)
    start = -raw.ctypes.data % 64
    a = raw[start:start + 32].view(np.float32)
    a[:] = np.arange(8)
    y = imp(a, device=dev, copy=False)
    out["numpy"] = [y.unsafe_buffer_pointer() == a.ctypes.data, str(y.sharding.memory_kind), y]
    u = raw[start + 4:start + 20].view(np.float32)
    out["unaligned_no_copy"] = _attempt(
        lambda: [imp(u, device=dev, copy=False).unsafe_buffer_pointer() == u.ctypes.data])
    t = torch.arange(12.0).reshape(3, 4)
    y = imp(t, device=dev)
    out["torch"] = [y.unsafe_buffer_pointer() == t.data_ptr(), y]
    out["torch_transposed"] = imp(t.T, device=dev)
    out["transposed_no_copy"] = _attempt(lambda: imp(t.T, device=dev, copy=False).tolist())
    c = imp(a, device=dev, copy=True)
    out["copy"] = [c.unsafe_buffer_pointer() == a.ctypes.data, c]
    out["dtypes"] = [str(imp(v, device=dev).dtype) for v in (
        np.array([True, False]), np.arange(3, dtype=np.int8), np.arange(3, dtype=np.uint16),
        np.arange(3.0), np.arange(3, dtype=np.complex64), torch.ones(2, dtype=torch.bfloat16))]
    # Used in a program, then the producer's memory is read through the view.
    out["in_jit"] = jax.jit(lambda v: v * 2)(imp(a, device=dev))
    out["public"] = jax.dlpack.from_dlpack(a, device=dev)
    out["public_no_copy"] = _attempt(lambda: jax.dlpack.from_dlpack(a, device=dev,
                                                                    copy=False).tolist())
    return out


@scenario
def dlpack_lifetime(jax, jnp, np):
    import gc

    import torch
    dev = jax.devices()[0]
    view, _ = _dlpack_helpers(jax, dev)
    out = {}
    x = jax.device_put(jnp.arange(4.0), dev)
    v = np.asarray(x)
    x.delete()
    out["view_after_delete"] = v
    donate = jax.jit(lambda a: a + 1, donate_argnums=0)
    z = jax.device_put(jnp.arange(4.0), dev)
    w = np.asarray(z)
    y = donate(z)
    # XLA CPU does not donate a buffer a view refers to: it copies instead.
    out["donate_with_view"] = [z.is_deleted(), y, w.tolist()]
    del w
    gc.collect()
    out["donate_after_view"] = [z.is_deleted(), donate(z), z.is_deleted()]
    d = jax.device_put(jnp.zeros(6), dev)
    tv = torch.from_dlpack(view(d))
    e = jax.jit(lambda a: jax.lax.dynamic_update_slice(a, jnp.ones(2), (2,)),
                donate_argnums=0)(d)
    out["torch_view_and_in_place"] = [d.is_deleted(), tv.tolist(), e]
    return out


# ---------------------------------------------------------------------------


@scenario
def custom_layouts(jax, jnp, np):
    """jax.experimental.layout: an explicit row-major layout
    (Layout(major_to_minor=(0, 1)), JAX's default) put on the device, through
    a jit with that layout in and out, then into a jit with default layouts;
    Layout.AUTO; and a column-major layout (major_to_minor=(1, 0))."""
    from jax.experimental.layout import Format, Layout
    s = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    row = Format(Layout(major_to_minor=(0, 1)), s)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    xd = jax.device_put(x, row)
    f = jax.jit(lambda a: a[:, ::-1] * 2 + a.sum(0), in_shardings=row, out_shardings=row)
    y = f(xd)
    z = jax.jit(lambda a: a + 1)(y)
    auto = jax.jit(lambda a: a * 2, in_shardings=Format(Layout.AUTO),
                   out_shardings=Format(Layout.AUTO)).lower(
        jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)).compile()
    col = Format(Layout(major_to_minor=(1, 0)), s)

    def column_major():
        c = jax.jit(lambda a: a * 2, in_shardings=col, out_shardings=col)(x)
        return [list(c.format.layout.major_to_minor), np.asarray(c)]
    return {"put": [list(xd.format.layout.major_to_minor), np.asarray(xd)],
            "jit": [list(y.format.layout.major_to_minor), np.asarray(y)],
            "default_after": [list(z.format.layout.major_to_minor), np.asarray(z)],
            "auto": list(auto.input_formats[0][0].layout.major_to_minor),
            "column_major": _attempt(column_major)}


def _plain(tree):
    import jax
    import numpy as np
    return jax.tree.map(lambda a: np.asarray(a).tolist(), tree)


def main(argv):
    platform, names = argv[0], argv[1:]
    import jax
    import jax.numpy as jnp
    import numpy as np
    if platform == "stablehlo_ref_only":
        device = jax.devices("stablehlo_ref")[0]
    else:
        device = jax.devices(platform)[0]
    for name in names:
        buf = io.StringIO()
        values = error = None
        with contextlib.redirect_stdout(buf), jax.default_device(device):
            try:
                values = _plain(SCENARIOS[name](jax, jnp, np))
                jax.effects_barrier()
            except Exception as e:  # noqa: BLE001 - reported to the test
                error = f"{type(e).__name__}: {e}"
        print(json.dumps({"name": name, "values": values, "stdout": buf.getvalue(),
                          "error": error}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])


def run(platform: str, names, devices: int = 2, extra_env=None) -> dict:
    """Run scenarios in a fresh process on ``platform`` ("stablehlo_ref",
    "cpu", or "stablehlo_ref_only": JAX_PLATFORMS=stablehlo_ref, no CPU
    backend); returns name -> record."""
    import os
    import subprocess
    env = dict(os.environ)
    # Start from a clean configuration: other tests of the same worker may
    # have left tracing or validation switches in os.environ (tracing runs
    # the observed plan loop, which never updates donated arrays in place).
    for key in ("JAX_PLATFORMS", "XLA_FLAGS", "STABLEHLO_REF_NUM_DEVICES",
                "STABLEHLO_PJRT_TRACE", "JAX_ENABLE_X64", "STABLEHLO_REF_TRACE_OPS",
                "STABLEHLO_REF_VALIDATE", "STABLEHLO_REF_EXECUTE_TIMEOUT"):
        env.pop(key, None)
    if platform == "cpu":
        env["JAX_PLATFORMS"] = "cpu"
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    elif platform == "stablehlo_ref":
        env["JAX_PLATFORMS"] = "stablehlo_ref,cpu"
        env["STABLEHLO_REF_NUM_DEVICES"] = str(devices)
    else:
        env["JAX_PLATFORMS"] = "stablehlo_ref"
        env["STABLEHLO_REF_NUM_DEVICES"] = str(devices)
    env.update(extra_env or {})
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), platform, *names],
                          env=env, capture_output=True, text=True, timeout=600)
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            out[rec["name"]] = rec
    missing = [n for n in names if n not in out]
    if missing:
        raise AssertionError(f"{platform}: no result for {missing} (exit {proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return out


def run_both(names, devices: int = 2) -> tuple:
    """:func:`run` on stablehlo_ref and on XLA CPU: (ref records, cpu records)."""
    return run("stablehlo_ref", names, devices=devices), run("cpu", names, devices=devices)


def values_of(results, name: str) -> tuple:
    """(stablehlo_ref's values, XLA CPU's values) of scenario ``name`` in
    :func:`run_both`'s ``results``; both must have run without an error."""
    ref, cpu = (r[name] for r in results)
    assert ref["error"] is None and cpu["error"] is None, (ref["error"], cpu["error"])
    return ref["values"], cpu["values"]
