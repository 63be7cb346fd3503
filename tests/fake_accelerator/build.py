"""Builds the fake accelerator PJRT plugin (plugin.c here) into a folder:
``build(folder) -> path of the .so``. The layout of the C API's structs is
taken from the project's ctypes mirror (stablehlo_pjrt/_capi.py), written
to fake_offsets.h next to the library, so the fake and the checker agree on
pjrt_c_api.h by construction."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def _struct_lines(name: str, cls) -> list[str]:
    from stablehlo_pjrt import _capi as C
    size = C.struct_size(cls) if "struct_size" in dict(cls._fields_) else ctypes.sizeof(cls)
    out = [f"#define SIZE_{name} {size}"]
    for fname, ftype in cls._fields_:
        if fname in getattr(cls, "_anonymous_", ()):
            for inner, _ in ftype._fields_:
                out.append(f"#define OFF_{name}_{inner} {getattr(cls, inner).offset}")
        else:
            out.append(f"#define OFF_{name}_{fname} {getattr(cls, fname).offset}")
    return out


def header() -> str:
    from stablehlo_pjrt import _capi as C
    from stablehlo_pjrt.checker import plugin as P
    lines = [f"#define API_MAJOR {C.API_MAJOR}", f"#define API_MINOR {C.API_MINOR}",
             f"#define NUM_SLOTS {len(C.API_FUNCTIONS)}",
             f"#define NAMED_VALUE_BOOL {C.NamedValueType.kBool}",
             f"#define NAMED_VALUE_INT64 {C.NamedValueType.kInt64}",
             f"#define NAMED_VALUE_INT64_LIST {C.NamedValueType.kInt64List}"]
    lines += [f"#define SLOT_{n} {i}" for i, n in enumerate(C.API_FUNCTIONS)]
    lines += [f"#define CODE_{k} {v}" for k, v in vars(C.ErrorCode).items()
              if not k.startswith("_")]
    seen = set()
    for mod in (C, P):
        for name, cls in vars(mod).items():
            if (isinstance(cls, type) and issubclass(cls, ctypes.Structure)
                    and cls is not ctypes.Structure and name not in seen):
                seen.add(name)
                lines += _struct_lines(name, cls)
    return "\n".join(lines) + "\n"


def build(folder: str) -> str:
    """Compiles the fake plugin into ``folder``; its path. RuntimeError
    when there is no C compiler."""
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if cc is None:
        raise RuntimeError("no C compiler (gcc or cc) to build the fake plugin")
    with open(os.path.join(folder, "fake_offsets.h"), "w", encoding="utf-8") as f:
        f.write(header())
    out = os.path.join(folder, "libfake_accelerator.so")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-fvisibility=hidden",
                    "-I", folder, os.path.join(HERE, "plugin.c"), "-o", out],
                   check=True, capture_output=True, text=True)
    return out
