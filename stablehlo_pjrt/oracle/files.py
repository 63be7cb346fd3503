"""The verdict for ``stablehlo-ref compare``: a backend's outputs in a file.

Without the other backend at hand no op can be re-run on it, so the one
cause that needs no re-run there is tested: ``summation-order``. Outputs
that differ must each be produced by a sum (dot_general, convolution,
add-reduction; directly or through a call) whose value in the file is
within the summation-order bound of that sum, computed on the reference
from |operands| (summation.py, the form of the cause the plugin checker
applies too).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def summation_note(module_text: str, args: Sequence[np.ndarray],
                   reference: Sequence[np.ndarray], other: Sequence[np.ndarray]) -> str | None:
    """The note saying why the outputs that differ are correct sums in
    another order, or None (then the difference stands)."""
    from .summation import explain
    if len(reference) != len(other):
        return None
    try:
        return explain(module_text, list(args), None, [np.asarray(r) for r in reference],
                       [np.asarray(o) for o in other])
    except Exception:  # noqa: BLE001 - a module the bound cannot handle: the difference stands
        return None


def compare_command(argv: list[str]) -> int:
    """``stablehlo-ref compare`` with the summation-order cause: the
    interpreter's comparison first; when it finds a difference (and no
    tolerance was given), a difference that only sums in another order make
    is explained and the command exits 0."""
    import argparse
    import contextlib
    import io

    from stablehlo_interpreter import cli
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = int(cli.main(argv))
    print(out.getvalue(), end="")
    if code != 1:
        return code
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("command")
    p.add_argument("module")
    p.add_argument("--args")
    p.add_argument("--against")
    p.add_argument("--func")
    p.add_argument("--cast", action="store_true")
    p.add_argument("--rtol")
    p.add_argument("--atol")
    p.add_argument("--ulp")
    a, _ = p.parse_known_args(argv)
    if a.rtol or a.atol or a.ulp or (a.func not in (None, "main")):
        return code
    import stablehlo_interpreter as shi
    try:
        with open(a.module, "rb") as f:
            data = f.read()
        program = shi.compile(data, name=a.module)
        args = cli.load_args(a.args, program.function(None), a.cast)
        ref = [np.asarray(v) for v in program.run(*args)]
        loaded = np.load(a.against, allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            got = [loaded]
        else:
            with loaded:
                names = [f"result_{i}" for i in range(len(ref))]
                keys = names if set(names) <= set(loaded.files) else loaded.files
                got = [loaded[k] for k in keys]
        with shi.MLIR_LOCK, program.module.context:
            text = program.module.mlir.operation.get_asm(enable_debug_info=True)
    except Exception:  # noqa: BLE001 - the interpreter's verdict stands
        return code
    got = [g.astype(r.dtype) if g.dtype != r.dtype and g.shape == r.shape else g
           for g, r in zip(got, ref)]
    note = summation_note(text, args, ref, got)
    if note is None:
        return code
    print(f"explained: {note}")
    return 0
