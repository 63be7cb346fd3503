"""Running a module on the reference or on another backend (a Runner:
``run(module_text, args) -> outputs``), and reading op locations."""

from __future__ import annotations

import re
from typing import Callable, Sequence

import numpy as np

import stablehlo_interpreter as shi

from .. import compat

# run(module_text, args) -> list of numpy arrays, one per result of @main.
Runner = Callable[[str, Sequence[np.ndarray]], Sequence[np.ndarray]]

_SOURCE_RE = re.compile(r'"([^"]+)":(\d+):(\d+)')


def source_line(location: str) -> str | None:
    """The innermost ``file:line`` of an op location JAX recorded, e.g.
    ``"jit(f)/sin"(callsite("f"("x.py":4:20 to :30) at ...))`` -> ``x.py:4``."""
    m = _SOURCE_RE.search(location or "")
    if m:
        return f"{m.group(1)}:{m.group(2)}"
    # The interpreter's compact form: `file:line:col (in fn) [op]`.
    m = re.match(r"(\S+?):(\d+):\d+(?: |$)", location or "")
    return f"{m.group(1)}:{m.group(2)}" if m and m.group(1) != "-" else None


_PROGRAMS: dict = {}


def reference_runner(module_text: str, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Runs a module on the interpreter directly (not through PJRT). The
    last few compiled programs are kept: a verdict runs the same module and
    its hypotheses again when the same program is compared again."""
    program = _PROGRAMS.get(module_text) if isinstance(module_text, str) else None
    if program is None:
        program = shi.compile(module_text, name="<variant>")
        if isinstance(module_text, str):
            if len(_PROGRAMS) >= 16:
                _PROGRAMS.pop(next(iter(_PROGRAMS)))
            _PROGRAMS[module_text] = program
    return list(program.run(*args))


def jax_backend_runner(platform: str = "cpu") -> Runner:
    """A Runner that compiles module text on a JAX backend's PJRT client
    (``client.compile_and_load``, as jax._src.compiler does) and runs it on
    that backend's first device."""
    xla_bridge = compat.jax_internal("", "xla_bridge")
    xc = compat.jax_internal("lib", "xla_client")
    try:
        backend = xla_bridge.get_backend(platform)
    except RuntimeError as e:
        raise RuntimeError(
            f"backend {platform!r} is not available in this process ({e}); leave "
            "JAX_PLATFORMS unset or list it, e.g. 'cpu,stablehlo_ref'") from None
    device = backend.local_devices()[0]

    def run(module_text: str, args: Sequence[np.ndarray]) -> list:
        exe = backend.compile_and_load(
            module_text, executable_devices=xc.DeviceList((device,)),
            compile_options=xc.CompileOptions())
        # Under enable_x64, device_put keeps the arrays' exact dtypes (it
        # would otherwise turn 64-bit inputs into 32-bit ones).
        import jax
        with jax.enable_x64(True):
            buffers = [jax.device_put(np.asarray(a), device) for a in args]
        results = exe.execute_sharded(buffers).disassemble_into_single_device_arrays()
        return [np.asarray(r[0]) for r in results]

    run.__name__ = platform  # the name reports use for it
    return run


def other_runner(against: str | Runner) -> tuple[str, Runner]:
    """(name, Runner) of a platform name or a Runner; the one name the
    reports use for the other backend at every level."""
    if isinstance(against, str):
        return against, jax_backend_runner(against)
    return getattr(against, "__name__", "other"), against
