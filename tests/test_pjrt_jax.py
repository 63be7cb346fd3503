"""JAX on the stablehlo_ref platform, compared with XLA CPU.

Each group of checks runs in one fresh subprocess (JAX backends are process
global, and a plugin bug must not take the test runner down): this file is
also the script those subprocesses run, `python test_pjrt_jax.py GROUP`,
printing one JSON result line per check.  pytest reports every check as its
own test.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

import pytest
from testkit import marked_results

HERE = os.path.abspath(__file__)
MARK = "@@PJRT_CHECK@@ "

# group name -> (environment, list of check names); filled by @check.
GROUPS: dict[str, dict] = {}
CHECKS: dict[str, tuple[str, object]] = {}

GROUP_ENV = {
    "basic": {"JAX_PLATFORMS": "stablehlo_ref,cpu"},
    "x64": {"JAX_PLATFORMS": "stablehlo_ref,cpu", "JAX_ENABLE_X64": "1"},
    "programs": {"JAX_PLATFORMS": "stablehlo_ref,cpu"},
    "errors": {"JAX_PLATFORMS": "stablehlo_ref,cpu"},
    "multi": {"JAX_PLATFORMS": "stablehlo_ref,cpu", "STABLEHLO_REF_NUM_DEVICES": "2"},
    "discovery": {"JAX_PLATFORMS": ""},
}


def check(group: str):
    def register(fn):
        CHECKS[fn.__name__] = (group, fn)
        return fn
    return register


# ---------------------------------------------------------------------------
# Helpers used inside the subprocesses
# ---------------------------------------------------------------------------


def _jax():
    import jax
    import jax.numpy as jnp
    import numpy as np
    return jax, jnp, np


def on_cpu(fn, *args):
    """fn(*args) computed by XLA CPU (the reference)."""
    jax, _, np = _jax()
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        out = fn(*args)
    return jax.tree_util.tree_map(np.asarray, out)


def on_ref(fn, *args):
    jax, _, np = _jax()
    dev = jax.devices("stablehlo_ref")[0]
    with jax.default_device(dev):
        out = fn(*args)
    leaves = jax.tree_util.tree_leaves(out)
    for leaf in leaves:
        if hasattr(leaf, "devices"):
            assert leaf.devices() == {dev}, f"result on {leaf.devices()}, not {dev}"
    return jax.tree_util.tree_map(np.asarray, out)


def assert_same(fn, *args, rtol=1e-6, atol=1e-6, exact=False):
    jax, _, np = _jax()
    want = on_cpu(fn, *args)
    got = on_ref(fn, *args)
    wl, wt = jax.tree_util.tree_flatten(want)
    gl, gt = jax.tree_util.tree_flatten(got)
    assert wt == gt, f"tree mismatch {wt} vs {gt}"
    for w, g in zip(wl, gl):
        assert w.dtype == g.dtype, f"dtype {g.dtype} != {w.dtype}"
        assert w.shape == g.shape, f"shape {g.shape} != {w.shape}"
        if exact or w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g.astype(np.complex128 if w.dtype.kind == "c" else np.float64),
                                       w.astype(np.complex128 if w.dtype.kind == "c" else np.float64),
                                       rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------
# Checks: arithmetic on every dtype
# ---------------------------------------------------------------------------


def _operands(np, dtype, n=7):
    import ml_dtypes
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return (np.array([True, False, True, True, False, False, True]),
                np.array([True, True, False, True, False, True, False]))
    if dt.kind in "iu" or dt in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)):
        lo = 0 if (dt.kind == "u" or dt == np.dtype(ml_dtypes.uint4)) else -3
        a = (np.arange(n) % 5 + lo).astype(dt)
        b = (np.arange(n)[::-1] % 4 + 1).astype(dt)
        return a, b
    if dt.kind == "c":
        a = (np.linspace(-2, 2, n) + 1j * np.linspace(1, -1, n)).astype(dt)
        b = (np.linspace(0.5, 3, n) - 0.5j).astype(dt)
        return a, b
    a = np.linspace(-2, 2, n).astype(dt)
    b = np.linspace(0.5, 3, n).astype(dt)
    return a, b


def _arith(dtype_name):
    jax, jnp, np = _jax()
    import ml_dtypes
    dtype = getattr(ml_dtypes, dtype_name, None) or np.dtype(dtype_name)
    a, b = _operands(np, dtype)
    if np.dtype(dtype) == np.bool_:
        f = jax.jit(lambda x, y: (x & y) | (~x ^ y))
        assert_same(f, a, b)
        return
    kind = np.dtype(dtype).kind
    if kind in "iu":
        f = jax.jit(lambda x, y: (x * y + x - y, jnp.maximum(x, y), x // y, x % y, -x if kind == "i" else x))
    elif kind == "c":
        f = jax.jit(lambda x, y: (x * y + x - y, x / y, jnp.abs(x), jnp.conj(x)))
    else:
        f = jax.jit(lambda x, y: (x * y + x - y, x / y, jnp.maximum(x, y), jnp.abs(x), -x))
    tol = {"float16": 2e-3, "bfloat16": 2e-2}.get(dtype_name, 1e-6)
    if dtype_name.startswith("float8"):
        tol = 0.13
    assert_same(f, a, b, rtol=tol, atol=tol)


for _name in ["float32", "float16", "bfloat16", "int8", "int16", "int32", "uint8",
              "uint16", "uint32", "bool", "complex64", "float8_e4m3fn", "float8_e5m2"]:
    def _mk(name):
        def fn():
            _arith(name)
        fn.__name__ = f"arith_{name}"
        return fn
    check("basic")(_mk(_name))

for _name in ["float64", "int64", "uint64", "complex128"]:
    def _mk64(name):
        def fn():
            _arith(name)
        fn.__name__ = f"arith_{name}"
        return fn
    check("x64")(_mk64(_name))


@check("basic")
def scalar_python_int_power():
    jax, jnp, np = _jax()
    f = jax.jit(lambda x: jnp.power(x, jnp.int32(2)))
    assert_same(f, 1)
    assert_same(f, np.int32(-7))


@check("basic")
def transcendental_float32():
    jax, jnp, np = _jax()
    x = np.linspace(0.1, 3, 11).astype(np.float32)
    f = jax.jit(lambda x: (jnp.exp(x), jnp.log(x), jnp.sin(x), jnp.tanh(x), jnp.sqrt(x)))
    assert_same(f, x, rtol=2e-6, atol=2e-6)


# ---------------------------------------------------------------------------
# Checks: round trips
# ---------------------------------------------------------------------------


@check("basic")
def device_put_round_trips():
    jax, jnp, np = _jax()
    import ml_dtypes
    dev = jax.devices("stablehlo_ref")[0]
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    cases = {
        "0d": np.array(3.5, np.float32),
        "0d_int": np.int32(-4),
        "empty": np.zeros((0, 3), np.int32),
        "empty_3d": np.zeros((2, 0, 4), np.float32),
        "slice": base[:, ::3],
        "transpose": base.T,
        "reversed": base[::-1, ::-2],
        "fortran": np.asfortranarray(base),
        "bool": np.array([True, False, True]),
        "bf16": np.arange(5).astype(ml_dtypes.bfloat16),
        "f16": np.linspace(-1, 1, 9).astype(np.float16),
        "int4": (np.arange(8) - 4).astype(ml_dtypes.int4),
        "uint8": np.arange(256, dtype=np.uint8),
        "f8": np.linspace(-2, 2, 5).astype(ml_dtypes.float8_e4m3fn),
        "complex64": (np.arange(4) + 1j).astype(np.complex64),
        "large": np.random.default_rng(0).standard_normal((300, 400)).astype(np.float32),
    }
    for name, host in cases.items():
        x = jax.device_put(host, dev)
        assert x.devices() == {dev}, name
        back = np.asarray(x)
        assert back.dtype == host.dtype and back.shape == host.shape, name
        np.testing.assert_array_equal(back, host, err_msg=name)
        np.testing.assert_array_equal(np.asarray(jax.device_get(x)), host, err_msg=name)
        y = jnp.asarray(host, device=dev) if hasattr(jnp, "asarray") else x
        np.testing.assert_array_equal(np.asarray(y), host, err_msg=name)


@check("basic")
def compiled_program_text_and_layouts_like_cpu():
    """jaxlib reads the program PJRT_Executable_OptimizedProgram hands out
    (HLO with its module config, converted once at compile): the compiled
    text, the layouts and the memory analysis come back as on XLA CPU."""
    jax, jnp, np = _jax()
    x = np.ones((4, 3), np.float32)
    texts, formats = [], []
    for platform in ("stablehlo_ref", "cpu"):
        dev = jax.devices(platform)[0]
        # (No transpose as an output: jaxlib's HLO converter gives it the
        # permuted layout {0,1}; XLA CPU's layout assignment the default.)
        c = jax.jit(lambda a, b: (jnp.sin(a) @ a.T + b, a * 2)).lower(
            jax.device_put(x, dev), 1.0).compile()
        texts.append(c.as_text())
        formats.append([str(f.layout) for f in jax.tree.leaves((c.input_formats, c.output_formats))])
        assert c.memory_analysis() is not None
    assert texts[0].startswith("HloModule jit__lambda, entry_computation_layout="
                               "{(f32[4,3]{1,0}, f32[])->(f32[4,4]{1,0}, f32[4,3]{1,0})}"), \
        texts[0][:200]
    assert "sine(" in texts[0] and "dot(" in texts[0], texts[0]
    assert formats[0] == formats[1], formats


@check("basic")
def host_array_mutation_after_device_put_is_isolated():
    jax, jnp, np = _jax()
    dev = jax.devices("stablehlo_ref")[0]
    host = np.arange(10, dtype=np.float32)
    x = jax.device_put(host, dev)
    ident = jax.jit(lambda v: v)(x)
    host[:] = -1  # numpy users may do this; JAX arrays must not change
    del x
    np.testing.assert_array_equal(np.asarray(ident), np.arange(10, dtype=np.float32))


@check("basic")
def identity_and_multiple_outputs():
    jax, jnp, np = _jax()
    f = jax.jit(lambda a, b, c: (c, a, b, a))
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_same(f, a, np.int32(5), np.array([True, False]))


@check("basic")
def deleted_buffers():
    jax, jnp, np = _jax()
    dev = jax.devices("stablehlo_ref")[0]
    x = jax.device_put(np.ones(4, np.float32), dev)
    x.delete()
    assert x.is_deleted()
    try:
        np.asarray(x)
    except RuntimeError as e:
        assert "deleted" in str(e).lower(), e
    else:
        raise AssertionError("reading a deleted array did not raise")
    try:
        jax.jit(lambda v: v * 2)(x)
    except RuntimeError as e:
        assert "deleted" in str(e).lower(), e
    else:
        raise AssertionError("using a deleted array did not raise")
    y = jax.device_put(np.arange(3.0, dtype=np.float32), dev)
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: v)(y)), [0, 1, 2])


@check("basic")
def memory_kind_and_device_attributes():
    jax, jnp, np = _jax()
    dev = jax.devices("stablehlo_ref")[0]
    x = jax.device_put(np.ones(3, np.float32), dev)
    assert x.sharding.memory_kind == "device", x.sharding.memory_kind
    assert dev.platform == "stablehlo_ref"
    assert "interpreter" in dev.device_kind.lower()
    assert dev.id == 0 and dev.process_index == 0
    assert repr(dev) == "StablehloRefDevice(id=0)", repr(dev)
    assert str(dev) == "stablehlo_ref:0", str(dev)
    # Like XLA CPU: the device memory and two host memories (issue 12).
    assert [m.kind for m in dev.addressable_memories()] == [
        "device", "pinned_host", "unpinned_host"]
    stats = dev.memory_stats()
    assert stats["bytes_in_use"] >= 12, stats
    s = jax.sharding.SingleDeviceSharding(dev, memory_kind="device")
    y = jax.device_put(np.arange(3.0, dtype=np.float32), s)
    np.testing.assert_array_equal(np.asarray(y), [0, 1, 2])


# ---------------------------------------------------------------------------
# Checks: programs
# ---------------------------------------------------------------------------


@check("programs")
def mlp_grad():
    jax, jnp, np = _jax()
    rng = np.random.default_rng(0)
    params = {
        "w1": rng.standard_normal((4, 8)).astype(np.float32) * 0.5,
        "b1": np.zeros(8, np.float32),
        "w2": rng.standard_normal((8, 3)).astype(np.float32) * 0.5,
        "b2": np.zeros(3, np.float32),
    }
    x = rng.standard_normal((5, 4)).astype(np.float32)
    y = rng.standard_normal((5, 3)).astype(np.float32)

    def loss(p, x, y):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        out = h @ p["w2"] + p["b2"]
        return jnp.mean((out - y) ** 2)

    assert_same(jax.jit(jax.value_and_grad(loss)), params, x, y, rtol=1e-5, atol=1e-5)


@check("programs")
def vmap_matvec():
    jax, jnp, np = _jax()
    m = np.arange(12, dtype=np.float32).reshape(3, 4)
    vs = np.arange(20, dtype=np.float32).reshape(5, 4)
    assert_same(jax.jit(jax.vmap(lambda v: m @ v + jnp.sum(v))), vs, rtol=1e-5)


@check("programs")
def control_flow_cond():
    jax, jnp, np = _jax()
    f = jax.jit(lambda p, x: jax.lax.cond(p > 0, lambda v: v * 2.0, lambda v: v - 1.0, x))
    x = np.arange(4, dtype=np.float32)
    assert_same(f, np.int32(1), x)
    assert_same(f, np.int32(-1), x)


@check("programs")
def control_flow_while():
    jax, jnp, np = _jax()
    f = jax.jit(lambda n: jax.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 1.5),
                                             (0, jnp.float32(1.0))))
    assert_same(f, np.int32(7))


@check("programs")
def control_flow_scan():
    jax, jnp, np = _jax()
    def cumsum(xs):
        return jax.lax.scan(lambda c, x: (c + x, c * x), jnp.float32(0), xs)
    assert_same(jax.jit(cumsum), np.arange(6, dtype=np.float32))


@check("programs")
def control_flow_fori_loop():
    jax, jnp, np = _jax()
    f = jax.jit(lambda x: jax.lax.fori_loop(0, 5, lambda i, v: v * 2 + i, x))
    assert_same(f, np.arange(3, dtype=np.int32))


@check("programs")
def indexing_and_at_updates():
    jax, jnp, np = _jax()
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    idx = np.array([3, 0, 2], np.int32)

    def f(x, idx):
        return (x[1], x[:, 2:5], x[idx], x[idx, 1], x[::2, ::-1],
                x.at[1, 2].set(-1.0), x.at[idx].add(10.0), x.at[:, 0].multiply(3.0))

    assert_same(jax.jit(f), x, idx)


@check("programs")
def sort():
    jax, jnp, np = _jax()
    x = np.array([[3.0, -1.0, 2.5, 0.0], [9.0, 8.0, -7.0, 1.0]], np.float32)
    assert_same(jax.jit(lambda v: (jnp.sort(v), jnp.sort(v, axis=0), jnp.argsort(v))), x)


@check("programs")
def random_default_prng():
    jax, jnp, np = _jax()
    def draw(seed):
        key = jax.random.key(seed)
        k1, k2, k3 = jax.random.split(key, 3)
        return (jax.random.uniform(k1, (5,)), jax.random.normal(k2, (2, 3)),
                jax.random.randint(k3, (4,), 0, 10), jax.random.bits(k1, (3,)))
    assert_same(jax.jit(draw), np.int32(42), rtol=1e-6, atol=1e-6)
    # Non-jitted (op-by-op) random, as users often write it.
    assert_same(lambda s: jax.random.normal(jax.random.PRNGKey(s), (4,)), 0)


@check("programs")
def reductions_and_dot():
    jax, jnp, np = _jax()
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    f = jax.jit(lambda x: (x.sum(), x.max(axis=1), jnp.argmax(x, axis=2), x @ x.transpose(0, 2, 1)))
    assert_same(f, x, rtol=1e-5)


@check("programs")
def eight_threads_concurrent_jit():
    jax, jnp, np = _jax()
    import threading
    dev = jax.devices("stablehlo_ref")[0]
    f = jax.jit(lambda x, k: x * k + 1)
    g = jax.jit(lambda x: jnp.sum(x * x))
    errors = []

    def worker(i):
        try:
            with jax.default_device(dev):
                for j in range(25):
                    x = np.full((3,), i * 100 + j, np.float32)
                    r = np.asarray(f(x, np.float32(i)))
                    np.testing.assert_array_equal(r, x * i + 1)
                    s = float(g(x))
                    assert s == float(np.sum(x * x)), (s, i, j)
        except Exception:
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert not any(t.is_alive() for t in threads), "threads hung"
    assert not errors, errors[0]


# ---------------------------------------------------------------------------
# Checks: errors
# ---------------------------------------------------------------------------


@check("errors")
def unsupported_program_then_working_call():
    jax, jnp, np = _jax()
    from jax import ffi
    dev = jax.devices("stablehlo_ref")[0]

    def bad(x):
        y = ffi.ffi_call("stablehlo_ref_no_such_target",
                         jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
        z = ffi.ffi_call("another_missing_target",
                         jax.ShapeDtypeStruct(x.shape, x.dtype))(y)
        return z + 1

    with jax.default_device(dev):
        try:
            jax.jit(bad)(np.ones(3, np.float32))
        except Exception as e:
            text = str(e)
            assert "stablehlo.custom_call" in text, text
            assert "stablehlo_ref_no_such_target" in text or text.count("custom_call") >= 2, text
            assert "test_pjrt_jax.py" in text, f"no source location in: {text}"
        else:
            raise AssertionError("unsupported program compiled")
        r = jax.jit(lambda x: x * 3)(np.arange(3, dtype=np.float32))
        np.testing.assert_array_equal(np.asarray(r), [0, 3, 6])


@check("errors")
def failing_execute_then_working_call():
    jax, jnp, np = _jax()
    import stablehlo_interpreter as shi
    dev = jax.devices("stablehlo_ref")[0]
    original, original_call = shi.Program.run, shi.Program.call
    state = {"armed": True}

    def fail_once():
        if state["armed"]:
            state["armed"] = False
            raise shi.ExecutionError(
                'stablehlo.divide at loc("model.py":12): injected failure for the test',
                op_name="stablehlo.divide")

    def run(self, *args, **kwargs):
        fail_once()
        return original(self, *args, **kwargs)

    def call(self, args):  # the plugin's entry (Program.call; run when it hands over)
        fail_once()
        return original_call(self, args)

    shi.Program.run, shi.Program.call = run, call
    try:
        with jax.default_device(dev):
            f = jax.jit(lambda x: x / 2)
            try:
                # Raised by the call (an inline run) or, for a run on the
                # plugin's worker (STABLEHLO_REF_ASYNC=1), when the result is read.
                np.asarray(f(np.ones(3, np.float32)))
            except Exception as e:
                assert "stablehlo.divide" in str(e) and "injected failure" in str(e), e
            else:
                raise AssertionError("failing execution did not raise")
            np.testing.assert_array_equal(np.asarray(f(np.ones(3, np.float32))), [0.5] * 3)
    finally:
        shi.Program.run, shi.Program.call = original, original_call


@check("basic")
def transfers_between_cpu_and_stablehlo_ref():
    jax, jnp, np = _jax()
    ref = jax.devices("stablehlo_ref")[0]
    cpu = jax.devices("cpu")[0]
    a = jax.device_put(np.arange(5, dtype=np.float32), cpu)
    b = jax.device_put(a, ref)
    assert b.devices() == {ref}
    c = jax.device_put(jax.jit(lambda v: v)(b), cpu)
    assert c.devices() == {cpu}
    np.testing.assert_array_equal(np.asarray(c), np.arange(5, dtype=np.float32))


# ---------------------------------------------------------------------------
# Checks: several devices
# ---------------------------------------------------------------------------


@check("multi")
def two_devices_put_copy_and_run():
    jax, jnp, np = _jax()
    devs = jax.devices("stablehlo_ref")
    assert len(devs) == 2 and [d.id for d in devs] == [0, 1]
    x = jax.device_put(np.arange(4, dtype=np.float32), devs[1])
    assert x.devices() == {devs[1]}
    y = jax.jit(lambda v: v * 2)(x)
    assert y.devices() == {devs[1]}
    np.testing.assert_array_equal(np.asarray(y), [0, 2, 4, 6])
    z = jax.device_put(y, devs[0])
    assert z.devices() == {devs[0]}
    np.testing.assert_array_equal(np.asarray(z), [0, 2, 4, 6])


@check("multi")
def multi_device_program_is_a_clear_error():
    jax, jnp, np = _jax()
    devs = jax.devices("stablehlo_ref")
    try:
        out = jax.pmap(lambda v: v + 1, devices=devs)(np.arange(4, dtype=np.float32).reshape(2, 2))
        np.testing.assert_array_equal(np.asarray(out), [[1, 2], [3, 4]])
    except Exception as e:
        assert "stablehlo_ref" in str(e) and "partition" in str(e), e


# ---------------------------------------------------------------------------
# Checks: discovery (JAX_PLATFORMS unset)
# ---------------------------------------------------------------------------


@check("discovery")
def plugin_discovered_without_changing_default():
    jax, jnp, np = _jax()
    assert jax.default_backend() == "cpu", jax.default_backend()
    devs = jax.devices("stablehlo_ref")
    assert len(devs) == 1 and devs[0].platform == "stablehlo_ref"
    x = jax.device_put(np.arange(3, dtype=np.int32), devs[0])
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: v)(x)), [0, 1, 2])
    assert jnp.ones(2).devices() == {jax.devices("cpu")[0]}


# ---------------------------------------------------------------------------
# Subprocess protocol
# ---------------------------------------------------------------------------


def _run_group_in_this_process(group: str) -> None:
    for name, (g, fn) in CHECKS.items():
        if g != group:
            continue
        try:
            fn()
            result = {"name": name, "ok": True}
        except BaseException:
            result = {"name": name, "ok": False, "error": traceback.format_exc()[-6000:]}
        print(MARK + json.dumps(result), flush=True)


_results: dict[str, dict] = {}


def _group_results(group: str) -> dict:
    if group in _results:
        return _results[group]
    env = dict(os.environ)
    for key in ("JAX_PLATFORMS", "JAX_ENABLE_X64", "STABLEHLO_REF_NUM_DEVICES",
                "STABLEHLO_PJRT_TRACE"):
        env.pop(key, None)
    env.update(GROUP_ENV[group])
    results = marked_results([sys.executable, HERE, group], env, MARK, timeout=900)
    _results[group] = results
    return results


def _params():
    return [pytest.param(name, id=f"{group}-{name}") for name, (group, _) in CHECKS.items()]


@pytest.mark.parametrize("name", _params())
def test_jax_check(name):
    group = CHECKS[name][0]
    results = _group_results(group)
    proc = results["__process__"]
    r = results.get(name)
    if r is None:
        pytest.fail(f"check {name} produced no result; group {group} subprocess exited "
                    f"with {proc['rc']}; stderr tail:\n{proc['stderr']}")
    if not r["ok"]:
        pytest.fail(r["error"], pytrace=False)


@pytest.mark.parametrize("group", sorted(GROUP_ENV))
def test_group_process_exits_cleanly(group):
    results = _group_results(group)
    proc = results["__process__"]
    assert proc["rc"] == 0, f"exit code {proc['rc']}; stderr tail:\n{proc['stderr']}"


if __name__ == "__main__":
    _run_group_in_this_process(sys.argv[1])
