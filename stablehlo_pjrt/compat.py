"""The one place where the plugin touches JAX internals (``jax._src``) or
depends on which jax/jaxlib release it runs with.

Supported: jax and jaxlib 0.8.0 up to the newest release tested (``TESTED``);
``pyproject.toml`` admits the next minor line too (``SUPPORTED_BELOW``).
docs/compatibility.md has the table of what differs between the release lines
and how each difference is handled; every shim below names its line.

- ``check_versions()`` runs when JAX initializes the plugin: outside the
  tested range it warns (``CompatWarning``) naming the range. What cannot
  work is refused where it is found, saying why (``MissingInternal``).
- ``jax_internal(module, name)`` is ``from jax._src.<module> import <name>``
  with a clear ``MissingInternal`` error (which internal, for what, on which
  JAX) when a JAX release no longer has it; no other module of the plugin
  imports ``jax._src`` (tests/test_compat.py checks it).
- ``framework_api_version()`` / ``negotiated_api_version()``: the PJRT C API
  version the running jaxlib speaks, and the one both sides speak; per call,
  the caller's ``struct_size`` decides which fields exist (api.py ``_sized``).
- ``missing_feature(name)``: why a feature needs a newer jaxlib (FEATURES),
  for the shims and the tests' skips; ``install_sharding_shim`` gives jaxlib
  0.8.x/0.9.0 the shardings their C API client cannot read.
"""

from __future__ import annotations

import functools
import importlib
import re
import warnings

# The releases CI runs (README "Tested versions", .ci/compat-oldest).
TESTED = ((0, 8, 0), (0, 10, 2))
# pyproject.toml's upper bound: the line after the newest tested one.
SUPPORTED_BELOW = (0, 12)

# PJRT C API version (major, minor) each jaxlib release speaks, as jaxlib
# logs it when it loads a plugin ("The framework PJRT API version is 0.N",
# pjrt_api.cc; TF_CPP_MIN_LOG_LEVEL=0). Measured on the releases listed; a
# release between two is taken to speak at least the older one's version.
FRAMEWORK_API = {
    (0, 8, 0): (0, 80),
    (0, 8, 3): (0, 85),
    (0, 9, 0): (0, 90),
    (0, 9, 2): (0, 100),
    (0, 10, 0): (0, 104),
    (0, 10, 2): (0, 112),
    # Beyond the tested range (Python 3.12; jaxlib 0.11+ has no cp311 wheels):
    (0, 11, 2): (0, 115),
    (0, 12, 0, 1): (0, 116),
}

# Features that need a newer jaxlib than the oldest supported one:
# name -> (PJRT C API version the framework must speak, why). Tests skip with
# the reason (``missing_feature``); the plugin itself serves every line.
FEATURES = {
    "parameter_shardings": (
        (0, 91),
        "jaxlib reads a C API plugin's parameter and output shardings through the PJRT "
        "Shardings extension (C API 0.91); older jaxlib reads none, and a pmap or a jit "
        "with open shardings on several devices would fail inside JAX (\"'UnspecifiedValue' "
        "object has no attribute '_addressable_device_assignment'\"): "
        "install_sharding_shim supplies them there"),
    "compile_on_worker_thread": (
        (0, 100),
        "jaxlib compiles on a worker thread (its waiting thread polls for Ctrl-C) from "
        "jaxlib 0.9.2 (C API 0.100; 0.9.1 not measured); 0.8.x and 0.9.0 compile on the "
        "calling thread, where the plugin's own Ctrl-C handling covers the compile"),
}


class CompatWarning(UserWarning):
    """JAX or jaxlib outside the tested range, or a feature that is off on it."""


class MissingInternal(RuntimeError):
    """A JAX internal the plugin needs is not in the installed JAX."""


def parse_version(text: str) -> tuple[int, ...]:
    """``"0.10.2"`` -> ``(0, 10, 2)``; suffixes (``.dev``, ``rc1``, ``+local``) are dropped."""
    nums = []
    for part in str(text).split("+")[0].split("."):
        m = re.match(r"\d+", part)
        if m is None:
            break
        nums.append(int(m.group()))
        if m.end() != len(part):
            break
    return tuple(nums)


def _fmt(v: tuple[int, ...]) -> str:
    return ".".join(str(x) for x in v)


def tested_range() -> str:
    return f"jax/jaxlib {_fmt(TESTED[0])} to {_fmt(TESTED[1])}"


def jax_version() -> tuple[int, ...]:
    import jax
    return parse_version(jax.__version__)


def jaxlib_version() -> tuple[int, ...]:
    import jaxlib.version
    return parse_version(jaxlib.version.__version__)



def version_warnings(jax_v: tuple[int, ...], jaxlib_v: tuple[int, ...]) -> list[str]:
    """What is untested about this jax/jaxlib pair (pure: tests feed any pair).

    Nothing is refused by version number: a release outside the range may
    well work (jax 0.11.2 ran the README demo and 50 programs). What cannot
    work is refused where it is found, with the reason: a JAX internal the
    plugin needs and this JAX lacks raises MissingInternal naming it (at
    plugin initialization for registration itself, else when the feature is
    used), and jaxlib itself refuses a plugin whose PJRT C API major version
    differs from its own."""
    warn = []
    for name, v in (("jax", jax_v), ("jaxlib", jaxlib_v)):
        if v < TESTED[0]:
            warn.append(f"{name} {_fmt(v)} is older than the oldest tested release")
        elif v[:2] >= SUPPORTED_BELOW:
            warn.append(f"{name} {_fmt(v)} is newer than the supported range (< {_fmt(SUPPORTED_BELOW)})")
        elif v > TESTED[1]:
            warn.append(f"{name} {_fmt(v)} is newer than the newest tested release")
    if jax_v[:3] != jaxlib_v[:3]:
        warn.append(f"jax {_fmt(jax_v)} runs with jaxlib {_fmt(jaxlib_v)}; the plugin is tested "
                    "with matching releases")
    return warn


@functools.lru_cache(maxsize=None)
def check_versions() -> None:
    """Warn (once) if jax/jaxlib is outside the tested range."""
    warn = version_warnings(jax_version(), jaxlib_version())
    if warn:
        warnings.warn("stablehlo_ref: " + "; ".join(warn) + f" (tested: {tested_range()}). "
                      "The plugin loads; a JAX internal it needs that is missing is reported "
                      "by name when the feature is used (see docs/compatibility.md)",
                      CompatWarning, stacklevel=2)


def jax_internal(module: str, name: str | None = None, *, feature: str = ""):
    """``from jax._src.<module> import <name>`` (or the module itself).

    A submodule ``name`` is imported, an attribute read, as Python's ``from``
    import does. If the installed JAX lacks it, raises MissingInternal naming
    the internal, the feature that needs it and the JAX version.
    """
    path = f"jax._src.{module}" if module else "jax._src"
    try:
        mod = importlib.import_module(path)
        if name is None:
            return mod
        if hasattr(mod, name):
            return getattr(mod, name)
        return importlib.import_module(f"{path}.{name}")
    except ImportError:
        pass
    what = path if name is None else f"{path}.{name}"
    raise MissingInternal(_missing_message(what, feature)) from None


def internal_attr(obj, name: str, *, owner: str, feature: str = ""):
    """``getattr(obj, name)``, or MissingInternal naming ``owner.name``."""
    try:
        return getattr(obj, name)
    except AttributeError:
        raise MissingInternal(_missing_message(f"{owner}.{name}", feature)) from None


def _missing_message(what: str, feature: str) -> str:
    try:
        import jax
        running = f"JAX {jax.__version__}"
    except Exception:  # noqa: BLE001 - the message must still come out
        running = "this JAX"
    need = f" for {feature}" if feature else ""
    return (f"stablehlo_ref needs the JAX internal {what}{need}, which {running} does not "
            f"have (tested: {tested_range()}; see docs/compatibility.md)")


# ----------------------------------------------------------------------------
# Shims: one per API that moved between the supported jaxlib lines
# ----------------------------------------------------------------------------


def hlo_bindings():
    """XLA's HLO module bindings (``HloModule``, ``hlo_module_from_text``,
    ``HloPrintOptions``): ``jax._src.lib.hlo`` (jaxlib._hlo) from jaxlib
    0.10.2 on; members of ``jax._src.lib._jax`` in 0.8.0 to 0.10.1."""
    lib = jax_internal("lib", feature="reading HLO modules")
    hlo = getattr(lib, "hlo", None)
    if hlo is not None and hasattr(hlo, "HloModule"):
        return hlo
    _jax = jax_internal("lib", "_jax", feature="reading HLO modules")
    if hasattr(_jax, "HloModule") and hasattr(_jax, "hlo_module_from_text"):
        return _jax
    raise MissingInternal(_missing_message("jax._src.lib.hlo (HloModule, hlo_module_from_text)",
                                           "reading HLO modules"))


def aval_to_ir_type(module_context, aval):
    """``mlir.aval_to_ir_type``: ``(ctx, aval)`` from JAX 0.10.2, ``(aval)``
    in 0.8.0 to 0.10.0 (the module context came with the argument)."""
    mlir = jax_internal("interpreters", "mlir", feature="lowering rules")
    fn = mlir.aval_to_ir_type
    if _takes_context(fn):
        return fn(module_context, aval)
    return fn(aval)


@functools.lru_cache(maxsize=None)
def _takes_context(fn) -> bool:
    import inspect
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return True
    return len(params) >= 2


def install_sharding_shim(op_shardings_of) -> bool:
    """jaxlib before C API 0.91 (0.8.x, 0.9.0) reads no parameter or output
    shardings from a C API plugin (the ``PJRT_Shardings`` extension came in
    0.91), so JAX keeps the shardings it left to XLA unspecified and a
    ``pmap`` or a ``jit`` with open shardings on several devices fails inside
    JAX. On those releases this wraps ``pxla.get_op_sharding_from_executable``
    (JAX looks it up at call time): when jaxlib returns none, the shardings
    come from ``op_shardings_of(fingerprint)``, which returns the plugin's
    serialized ``xla.OpSharding`` protos ``(inputs, outputs)`` for one of its
    executables, or None for any other executable (whose result is kept).
    Returns whether the wrapper is installed; newer releases need none."""
    if framework_api_version() is None or not missing_feature("parameter_shardings"):
        return False
    feature = "shardings on jaxlib < 0.9.2"
    pxla = jax_internal("interpreters", "pxla", feature=feature)
    xc = jax_internal("lib", "xla_client", feature=feature)
    original = internal_attr(pxla, "get_op_sharding_from_executable",
                             owner="jax._src.interpreters.pxla", feature=feature)
    if getattr(original, "stablehlo_ref_shim", False):
        return True

    def parse(data: bytes):
        op = xc.OpSharding()
        op.ParseFromString(data)
        return op

    def get_op_sharding_from_executable(executable):
        ins, outs = original(executable)
        if ins and outs:
            return ins, outs
        try:
            found = op_shardings_of(executable.fingerprint)
        except Exception:  # noqa: BLE001 - JAX's own answer stands
            found = None
        if found is None:
            return ins, outs
        return (ins or [parse(b) for b in found[0]]), (outs or [parse(b) for b in found[1]])

    get_op_sharding_from_executable.stablehlo_ref_shim = True
    get_op_sharding_from_executable.__wrapped__ = original
    pxla.get_op_sharding_from_executable = get_op_sharding_from_executable
    return True


# ----------------------------------------------------------------------------
# PJRT C API version negotiation
# ----------------------------------------------------------------------------


def framework_api_version() -> tuple[int, int] | None:
    """The PJRT C API version the running jaxlib speaks (at least; see
    FRAMEWORK_API), or None without jaxlib (torch-xla or a C caller) or
    for a jaxlib older than every measured release."""
    try:
        v = jaxlib_version()
    except Exception:  # noqa: BLE001 - no jaxlib
        return None
    measured = [api for rel, api in sorted(FRAMEWORK_API.items()) if rel <= v]
    return measured[-1] if measured else None


def missing_feature(feature: str) -> str | None:
    """Why ``feature`` (a FEATURES key) is unavailable with the running
    jaxlib, or None when it is available."""
    need, why = FEATURES[feature]
    have = framework_api_version()
    if have is not None and have >= need:
        return None
    running = "unknown" if have is None else f"{have[0]}.{have[1]}"
    return (f"needs jaxlib speaking PJRT C API >= {need[0]}.{need[1]} (this jaxlib: {running}): "
            + why)


def negotiated_api_version(plugin: tuple[int, int]) -> tuple[int, int] | None:
    """The C API version both sides speak: the older of the plugin's
    (``_capi.API_MAJOR/API_MINOR``) and the running jaxlib's. Per call, the
    ``struct_size`` of each args struct settles the rest (api.py ``_sized``):
    a smaller struct (an older header) is read as if its missing fields were
    absent, a larger one only up to the fields this plugin knows. None for a
    major version mismatch or an unknown framework."""
    framework = framework_api_version()
    if framework is None or framework[0] != plugin[0]:
        return None
    return min(plugin, framework)
