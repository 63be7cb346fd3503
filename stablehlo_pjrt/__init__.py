"""A PJRT plugin, written in Python, that runs JAX programs on the numpy
StableHLO interpreter (`stablehlo_interpreter`).

    pip install .
    JAX_PLATFORMS=stablehlo_ref python script.py

Layout: `_capi` mirrors the PJRT C API structs with ctypes, `_shim` (C) holds
the API table, the per-slot trampolines, errors and events, `api` wires one
Python handler per PJRT function, and `client`, `device`, `buffer`,
`executable`, `error` implement the PJRT objects.  `trace` logs PJRT calls
(`STABLEHLO_PJRT_TRACE=1`).  `jax_plugin` is JAX's entry point.
"""

import glob as _glob
import os as _os

PLATFORM_NAME = "stablehlo_ref"


def _find_built_shim():
    """Let `stablehlo_pjrt._shim` resolve when the package is imported from a
    source checkout (e.g. `python -m ...` run in the repository after
    `pip install .`): the compiled trampoline then lives only in the installed
    copy, so that copy's folder is searched after this one."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    if _glob.glob(_os.path.join(here, "_shim*.so")) or _glob.glob(_os.path.join(here, "_shim*.pyd")):
        return
    import sys
    for entry in sys.path:
        other = _os.path.join(entry or _os.getcwd(), "stablehlo_pjrt")
        if _os.path.realpath(other) == _os.path.realpath(here):
            continue
        if _glob.glob(_os.path.join(other, "_shim*.so")) or \
                _glob.glob(_os.path.join(other, "_shim*.pyd")):
            __path__.append(other)
            return


_find_built_shim()


def pjrt_api_capsule():
    """The PJRT_Api table as a PyCapsule named "pjrt_c_api"."""
    from . import api
    return api.capsule()


def shim_path() -> str:
    """Path of the shared library exporting GetPjrtApi, for frameworks that
    load PJRT plugins by path (e.g. PJRT_NAMES_AND_LIBRARY_PATHS)."""
    from . import _shim
    return _shim.__file__
