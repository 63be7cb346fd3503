"""JAX entry point (group `jax_plugins`, see pyproject.toml).

JAX imports this module during backend discovery and calls `initialize()`,
which registers the `stablehlo_ref` platform with the PJRT C API table built
by this package.  Then `JAX_PLATFORMS=stablehlo_ref` or
`jax.devices("stablehlo_ref")` use the interpreter.

The platform is registered with a priority below JAX's CPU backend so that
installing the package never changes the default device of programs that do
not ask for it, and its registration fails quietly (a broken interpreter
must not break `import jax` for other platforms: JAX initializes every
registered backend when JAX_PLATFORMS is unset).
"""

from __future__ import annotations

import logging

from . import compat

PLATFORM_NAME = "stablehlo_ref"
# JAX's CPU backend registers with priority 0; the default backend is the
# registered one with the highest priority.
PRIORITY = -100

logger = logging.getLogger(__name__)


def initialize() -> None:
    # Warns outside the tested jax/jaxlib range; raises only for a jaxlib the
    # plugin cannot work with (JAX then reports the plugin as failed).
    compat.check_versions()
    xla_bridge = compat.jax_internal("", "xla_bridge", feature="registering the plugin")

    from . import table

    register = compat.internal_attr(xla_bridge, "register_plugin", owner="jax._src.xla_bridge",
                                    feature="registering the plugin")
    register(PLATFORM_NAME, priority=PRIORITY, c_api=table.capsule())
    registration = getattr(xla_bridge, "_backend_factories", {}).get(PLATFORM_NAME)
    if registration is not None and hasattr(registration, "fail_quietly"):
        # Only matters when the user did not name platforms explicitly: with
        # JAX_PLATFORMS=stablehlo_ref JAX always fails loudly.
        registration.fail_quietly = True
    try:
        # Lowerings for eigh/svd/eig/schur/... (JAX has only CPU/GPU rules).
        from .lowerings import register_lowerings
        register_lowerings(PLATFORM_NAME)
    except Exception:  # noqa: BLE001 - must never break plugin initialization
        logger.warning("stablehlo_ref: could not register linalg lowerings", exc_info=True)
    try:
        enable_donation(PLATFORM_NAME)
    except Exception:  # noqa: BLE001 - must never break plugin initialization
        logger.warning("stablehlo_ref: buffer donation is off: %s", _reason(), exc_info=True)
    try:
        # JAX's persistent compilation cache (jax_compilation_cache_dir).
        from .compile_cache import enable
        enable(PLATFORM_NAME)
    except Exception:  # noqa: BLE001 - must never break plugin initialization
        logger.warning("stablehlo_ref: the persistent compilation cache is off: %s",
                       _reason(), exc_info=True)
    try:
        # jax.debug.print / debug.callback / pure_callback / io_callback.
        from .callbacks import register_callback_lowerings
        register_callback_lowerings(PLATFORM_NAME)
    except Exception:  # noqa: BLE001 - must never break plugin initialization
        logger.warning("stablehlo_ref: could not register host callback lowerings",
                       exc_info=True)
    try:
        # jax.profiler.trace(...) collects the plugin's PJRT call trace
        # (profiler.py): JAX registers a plugin's profiler extension itself
        # only for plugins loaded by library path, not for a C API capsule.
        _profiler = compat.jax_internal("lib", "_profiler")
        _profiler.register_plugin_profiler(table.capsule())
    except Exception:  # noqa: BLE001 - must never break plugin initialization
        logger.warning("stablehlo_ref: jax.profiler will not see the plugin: %s", _reason(),
                       exc_info=True)
    try:
        # jaxlib 0.8.x / 0.9.0 read no shardings from C API plugins.
        compat.install_sharding_shim(_op_shardings_of)
    except Exception:  # noqa: BLE001 - must never break plugin initialization
        logger.warning("stablehlo_ref: pmap and jit with open shardings on several devices "
                       "need a newer jaxlib: %s", _reason(), exc_info=True)
    try:
        # Correctly rounded logistic / erfc / erf_inv / lgamma / digamma.
        from .lowerings import register_accurate_lowerings
        register_accurate_lowerings(PLATFORM_NAME)
    except Exception:  # noqa: BLE001 - must never break plugin initialization
        logger.warning("stablehlo_ref: could not register elementwise lowerings", exc_info=True)


def _op_shardings_of(fingerprint) -> tuple[list[bytes], list[bytes]] | None:
    """(input, output) serialized xla.OpSharding protos of the live
    partitioned stablehlo_ref executable with this fingerprint (what the
    PJRT Shardings extension reports), or None (compat.install_sharding_shim)."""
    from . import handles
    key = fingerprint.decode() if isinstance(fingerprint, bytes) else str(fingerprint)
    for obj in list(handles._objects.values()):
        meta = getattr(obj, "meta", None)
        if meta is not None and getattr(meta, "fingerprint", None) == key:
            if meta.spmd is None:
                return None
            return list(meta.spmd.op_shardings("in")), list(meta.spmd.op_shardings("out"))
    return None


def enable_donation(platform: str = PLATFORM_NAME) -> None:
    """Make JAX emit input/output aliasing (``tf.aliasing_output``,
    ``jax.buffer_donor``) for ``donate_argnums`` on ``platform``.

    JAX lowers donations only for the platforms on
    ``jax._src.interpreters.mlir._platforms_with_donation`` (cpu, cuda, rocm,
    tpu and the in-tree "neuron" in 0.10.2); neither ``register_plugin`` nor
    the ``jax_plugins`` conventions nor any config option adds one, so the
    plugin joins the list (donation.py then honours the aliasing as XLA
    does). Raises, naming what changed, if that list is gone; initialize()
    then logs a warning and donations are ignored with JAX's "Some donated
    buffers were not usable" (tests/test_jax_runtime_hooks.py pins it)."""
    mlir = compat.jax_internal("interpreters", "mlir", feature="buffer donation")
    platforms = getattr(mlir, "_platforms_with_donation", None)
    if not isinstance(platforms, list):
        raise RuntimeError(
            "jax._src.interpreters.mlir._platforms_with_donation is not a list in this JAX "
            f"({type(platforms).__name__}): JAX changed how it decides which platforms get "
            "buffer donation")
    if platform not in platforms:
        platforms.append(platform)


def _reason() -> str:
    import jax
    return (f"JAX {jax.__version__} differs from the JAX internals this plugin was written "
            f"against (tested: {compat.tested_range()}; see docs/compatibility.md)")
