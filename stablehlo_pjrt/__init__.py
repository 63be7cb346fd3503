"""A PJRT plugin, written in Python, that runs JAX programs on the numpy
StableHLO interpreter (`stablehlo_interpreter`).

    pip install .
    JAX_PLATFORMS=stablehlo_ref python script.py

Layout: `_capi` mirrors the PJRT C API structs with ctypes, `_shim` (C) holds
the API table, the per-slot trampolines, errors and events, `api` holds one
Python handler per PJRT function, `table` wires them into the table, and
`client`, `device`, `buffer`, `executable`, `event`, `error` implement the
PJRT objects.  `trace` logs PJRT calls
(`STABLEHLO_PJRT_TRACE=1`).  `jax_plugin` is JAX's entry point.
"""

import importlib as _importlib

PLATFORM_NAME = "stablehlo_ref"


def __getattr__(name):
    # `from . import _shim` lands here only when the compiled trampoline is not
    # next to this file: say how to build it instead of a bare ImportError.
    if name == "_shim":
        try:
            return _importlib.import_module("._shim", __name__)
        except ModuleNotFoundError as e:
            raise ImportError(
                f"the plugin's C trampoline (stablehlo_pjrt/_shim*.so) is not built in {__path__[0]}: "
                "install the project (`pip install -e .` for a source checkout)") from e
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pjrt_api_capsule() -> object:
    """The PJRT_Api table as a PyCapsule named "pjrt_c_api"."""
    from . import table
    return table.capsule()


def set_execute_timeout(seconds: float | None) -> None:
    """Fail any later Execute running longer than ``seconds`` with
    DEADLINE_EXCEEDED (None or 0: no limit); see interrupt.py."""
    from .interrupt import set_execute_timeout as _set
    _set(seconds)


def set_execution_mode(mode: str) -> None:
    """How later Executes run: ``"auto"`` (default: on the worker thread,
    asynchronously, unless the program is cheap and nothing is queued),
    ``"async"`` (always on the worker) or ``"sync"`` (always inside the
    Execute call); the environment variable STABLEHLO_REF_ASYNC sets the
    same (auto, 1, 0). See dispatch.py."""
    from .dispatch import set_mode
    set_mode(mode)
def dlpack_view(x: object) -> object:
    """A zero-copy DLPack producer over a stablehlo_ref array's memory, for
    ``np.from_dlpack`` / ``torch.from_dlpack`` / ``jax.dlpack.from_dlpack``
    (JAX refuses ``x.__dlpack__()`` for platforms other than cpu/gpu); see
    dlpack.py."""
    from .dlpack import dlpack_view as _view
    return _view(x)


def from_dlpack(external: object, device: object = None, copy: bool | None = None) -> object:
    """A DLPack producer's host memory as a jax.Array on a stablehlo_ref
    device, zero-copy when row-major; see dlpack.py."""
    from .dlpack import from_dlpack as _from
    return _from(external, device=device, copy=copy)


def shim_path() -> str:
    """Path of the shared library exporting GetPjrtApi, for frameworks that
    load PJRT plugins by path (e.g. PJRT_NAMES_AND_LIBRARY_PATHS)."""
    from . import _shim
    return _shim.__file__
