"""Area ``frameworks``: a curated corpus of JAX programs run with the plugin
registered as a JAX platform (``jax._src.xla_bridge.register_plugin`` with
``library_path``, as a backend's users would load it), compared output leaf
by output leaf with stablehlo_ref through ``stablehlo_pjrt.oracle.compare``.

JAX has lowering rules for linalg only on cpu/gpu/tpu; for the plugin's
platform the project's portable StableHLO lowerings
(stablehlo_pjrt.lowerings) are registered, as they are for stablehlo_ref.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import compat, config
from .core import EnvironmentFailure, Failed, Skipped, Unsupported, check, environment_error

if TYPE_CHECKING:
    from .context import Context

PLATFORM = "pjrt_subject"
_READY: dict = {}


def _jax(ctx):
    """JAX with the plugin registered as platform ``pjrt_subject`` (once per process)."""
    if "jax" not in _READY:
        config.set_variable(config.JAX_PLATFORMS, f"{PLATFORM},stablehlo_ref")
        # Two reference devices for the several-device programs (the
        # worker process is the kit's own).
        config.default_variable(config.NUM_DEVICES, "2")
        xla_bridge = compat.jax_internal("", "xla_bridge")
        xla_bridge.register_plugin(PLATFORM, library_path=ctx.plugin_path,
                                   options=ctx.create_options or None)
        import jax
        try:
            jax.devices(PLATFORM)
        except RuntimeError as e:
            _READY["jax"] = e
        else:
            from stablehlo_pjrt.lowerings import register_lowerings
            register_lowerings(PLATFORM)
            _READY["jax"] = jax
    if isinstance(_READY["jax"], Exception):
        env = environment_error(None, str(_READY["jax"]))
        if env is not None:
            raise EnvironmentFailure(f"JAX cannot use the plugin: {_READY['jax']}\ncause: {env}")
        raise Failed(f"JAX cannot use the plugin: {_READY['jax']}")
    return _READY["jax"]


def _corpus():
    """name -> (function, argument builder, requires)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731

    def mlp(params, x):
        for w, b in params:
            x = jnp.tanh(x @ w + b)
        return jnp.sum(x ** 2)

    def mlp_args():
        return ([(f32(8, 16), f32(16)), (f32(16, 4), f32(4))], f32(5, 8))

    def attention(q, k, v):
        s = q @ k.T / jnp.sqrt(q.shape[-1])
        return jax.nn.softmax(s, axis=-1) @ v

    def scan_rnn(h, xs, w):
        def step(h, x):
            h = jnp.tanh(h @ w + x)
            return h, h
        return jax.lax.scan(step, h, xs)

    def while_loop(x):
        return jax.lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 1.1 + 1.0),
                                  (0, x))

    def cond(p, x):
        return jax.lax.cond(p > 0, lambda y: jnp.sin(y), lambda y: jnp.cos(y), x)

    def switch(i, x):
        return jax.lax.switch(i, [jnp.sin, jnp.cos, jnp.exp], x)

    def random_normal(seed):
        return jax.random.normal(jax.random.key(seed), (64,))

    def random_uniform_bits(seed):
        k1, k2 = jax.random.split(jax.random.key(seed))
        return jax.random.bits(k1, (16,)), jax.random.uniform(k2, (16,))

    def cholesky_solve(a, b):
        m = a @ a.T + 4 * jnp.eye(a.shape[0])
        return jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(m), b)

    def qr(a):
        return jnp.linalg.qr(a)[1]

    def fft(x):
        return jnp.fft.rfft(x), jnp.fft.ifft(jnp.fft.fft(x.astype(jnp.complex64)))

    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME")

    def sort_topk(x):
        return jnp.sort(x), jax.lax.top_k(x, 3)

    def gather_scatter(x, idx):
        return x[idx], x.at[idx].add(1.0)

    def reductions(x):
        return jnp.sum(x, 0), jnp.max(x, 1), jnp.argmin(x), jnp.cumsum(x, 1)

    def int_ops(a, b):
        return a // b, a % b, a << 2, a ^ b, jnp.bitwise_not(a)

    return {
        "mlp_grad": (jax.grad(mlp), mlp_args, ()),
        "attention": (attention, lambda: (f32(6, 8), f32(6, 8), f32(6, 4)), ()),
        "scan_rnn": (scan_rnn, lambda: (f32(4), f32(7, 4), f32(4, 4) * 0.5), ()),
        "while_loop": (while_loop, lambda: (f32(3),), ()),
        "cond": (cond, lambda: (np.float32(-1.0), f32(5)), ()),
        "switch": (switch, lambda: (np.int32(2), f32(5)), ()),
        "random_normal": (random_normal, lambda: (np.int32(42),), ()),
        "random_bits_uniform": (random_uniform_bits, lambda: (np.int32(7),), ()),
        "cholesky_solve": (cholesky_solve, lambda: (f32(5, 5), f32(5, 2)), ()),
        "qr": (qr, lambda: (f32(6, 4),), ()),
        "fft": (fft, lambda: (f32(16),), ()),
        "conv": (conv, lambda: (f32(1, 3, 8, 8), f32(4, 3, 3, 3)), ()),
        "sort_topk": (sort_topk, lambda: (f32(10),), ()),
        "gather_scatter": (gather_scatter, lambda: (f32(10), np.array([1, 3, 3], np.int32)),
                           ()),
        "reductions": (reductions, lambda: (f32(4, 6),), ()),
        "integer_ops": (int_ops, lambda: (np.arange(-5, 5, dtype=np.int32),
                                          np.array([3, -2, 7, 1, 2, -3, 4, 5, 6, 9], np.int32)),
                        ()),
    }


NAMES = ["mlp_grad", "attention", "scan_rnn", "while_loop", "cond", "switch", "random_normal",
         "random_bits_uniform", "cholesky_solve", "qr", "fft", "conv", "sort_topk",
         "gather_scatter", "reductions", "integer_ops"]


@check("frameworks", "jax", params=NAMES, name="program")
def program(ctx: Context, name: str) -> None:
    """A JAX program gives the reference's outputs, leaf by leaf."""
    jax = _jax(ctx)
    fn, make_args, _ = _corpus()[name]
    from stablehlo_pjrt import oracle
    try:
        rep = oracle.compare(fn, *make_args(), against=PLATFORM)
    except NotImplementedError as e:
        raise Unsupported(f"JAX cannot lower it for the plugin: {e}") from None
    except Exception as e:  # noqa: BLE001 - classify the plugin's refusals
        msg = " ".join(str(e).split())[:500]
        if "UNIMPLEMENTED" in msg:
            raise Unsupported(msg) from None
        if "No FFI handler registered" in msg or "custom call target" in msg.lower():
            # JAX lowers linalg for a platform named "cpu" to jaxlib's
            # LAPACK FFI custom calls; a plugin without those handlers
            # cannot run them: a capability, not a wrong result.
            raise Unsupported(f"the plugin lacks a custom-call target JAX used: "
                              f"{msg}") from None
        raise Failed(f"{type(e).__name__}: {msg}") from None
    if not rep.ok:
        raise Failed(str(rep))
    del jax


@check("frameworks", "jax", requires=("multi_device",))
def pmap_psum(ctx: Context) -> None:
    """pmap with psum over two of the plugin's devices equals the
    reference's (run with two stablehlo_ref devices)."""
    jax = _jax(ctx)
    import jax.numpy as jnp
    import numpy as np
    subject = jax.devices(PLATFORM)
    ref = jax.devices("stablehlo_ref")
    if len(subject) < 2:
        raise Skipped(f"the plugin has {len(subject)} device")
    if len(ref) < 2:
        raise Skipped("the reference has one device here (STABLEHLO_REF_NUM_DEVICES)")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)

    def f(v):
        return jax.lax.psum(jnp.sin(v), "i")
    a = np.asarray(jax.pmap(f, axis_name="i", devices=subject[:2])(x))
    b = np.asarray(jax.pmap(f, axis_name="i", devices=ref[:2])(x))
    from stablehlo_interpreter import compare_outputs
    rep = compare_outputs([b], [a], names=["psum"], reference_name="stablehlo_ref",
                          other_name="plugin")
    if not rep.ok:
        raise Failed(str(rep), op="all_reduce")
