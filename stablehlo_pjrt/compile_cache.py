"""JAX's persistent compilation cache for stablehlo_ref.

JAX writes and reads compiled executables (``jax_compilation_cache_dir``)
only for the platforms hard-coded in
``jax._src.compilation_cache.is_cache_used`` ("tpu", "gpu", "cpu",
"neuron") and only for backends whose executables serialize. This plugin's
executables do (``PJRT_Executable_Serialize`` / ``DeserializeAndLoad``,
executable.py), but JAX offers no registration for another platform, so
:func:`enable` wraps that check: for a ``stablehlo_ref`` backend it answers
"the cache is used" whenever the user enabled it, and defers to JAX for every
other backend (JAX's check is once per process, so without this a process
whose first compile was for stablehlo_ref would also lose the cache on CPU).

A serialized stablehlo_ref executable is its StableHLO module and compile
options: loading one parses and plans the module again, so a cache hit skips
JAX's call to PJRT_Client_Compile (and nothing else would be saved by
storing a plan of Python closures, which cannot be serialized anyway).
Executables with host callbacks are never written (JAX's rule).
"""

from __future__ import annotations

from . import compat

PLATFORM_NAME = "stablehlo_ref"


def enable(platform: str = PLATFORM_NAME) -> None:
    """Wrap JAX's check (no public registration exists in JAX 0.10.2: its
    platform list is a local variable of the function). Raises, naming what
    changed, if the check is gone or no longer takes a backend;
    tests/test_jax_runtime_hooks.py pins that JAX still consults it through
    the module attribute."""
    import inspect

    cc = compat.jax_internal("", "compilation_cache")
    original = getattr(cc, "is_cache_used", None)
    if original is None or list(inspect.signature(original).parameters) != ["backend"]:
        raise RuntimeError("jax._src.compilation_cache.is_cache_used(backend) is gone or "
                           "changed in this JAX: JAX changed how it decides which platforms "
                           "use the persistent compilation cache")
    if getattr(original, "_stablehlo_ref_platform", None) == platform:
        return

    def is_cache_used(backend) -> bool:
        if getattr(backend, "platform", None) == platform:
            return cc._is_cache_enabled()
        return original(backend)

    is_cache_used.__doc__ = original.__doc__
    is_cache_used.__wrapped__ = original
    is_cache_used._stablehlo_ref_platform = platform
    cc.is_cache_used = is_cache_used
