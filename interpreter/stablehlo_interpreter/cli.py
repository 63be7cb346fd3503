"""Command line: ``stablehlo-ref``.

    stablehlo-ref run MODULE [--args inputs.npz] [--out outputs.npz] [--func NAME]
    stablehlo-ref check MODULE
    stablehlo-ref compare MODULE --args inputs.npz --against outputs.npz

MODULE is MLIR text, MLIR bytecode or a StableHLO portable artifact.

``run`` runs the entry function (``@main`` unless ``--func``) on the arrays of
``--args`` (an ``.npz`` whose arrays are taken in stored order, or a single
``.npy``) and prints the results, or saves them to ``--out`` as ``.npz``
(``result_0``, ``result_1``, ...; tuple elements as ``result_0_1``; bf16/f8
values widened to float32, int2/int4 to int8, since ``.npz`` cannot describe
those types). ``check`` lists the ops the interpreter cannot run: exit status 1
if there are any, 0 otherwise. ``compare`` runs the module on the reference
and diffs the results against ``--against`` (the outputs another backend
produced, as ``.npz``: named like ``run --out`` writes them, or in stored
order); exit status 0 when every output agrees within tolerance, 1 otherwise
(see ``compare.py`` for the tolerances). Errors print one clear message and
exit with status 2. Arguments must match the parameters' dtypes and shapes
(``--cast`` converts them, refusing values the conversion would change);
``--out`` refuses results larger than ``--max-out-bytes`` in total.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

# Exit statuses (README "Command line exit codes"; tests/test_hardening_cli.py).
EXIT_OK = 0            # ran; all ops supported; outputs agree
EXIT_DIFFERS = 1       # check: unsupported ops listed; compare: outputs differ
EXIT_ERROR = 2         # bad input (module, arguments, files) or a failed run
EXIT_INTERRUPTED = 130  # Ctrl-C


class UserError(Exception):
    """A problem with the user's input: reported without a traceback."""


def _read_module(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UserError(f"cannot read module {path}: {e.strerror or e}") from None


def _compile(path: str, numerics: str | None = None) -> Any:
    import stablehlo_interpreter as shi
    return shi.compile(_read_module(path), name=path, numerics=numerics)


def load_args(path: str | None, func: Any, cast: bool = False) -> list[Any]:
    """The arguments of ``func`` (a ``Program.function``) from the ``--args``
    file ``path`` (an ``.npz``, arrays in stored order, or one ``.npy``; None:
    no arguments), checked (``cast``: converted) against its parameters.
    UserError for a file that cannot be read or does not fit; also used by
    the plugin's ``stablehlo-ref bisect``."""
    from .arguments import coerce
    if path is None:
        arrays = []
    else:
        try:
            loaded = np.load(path, allow_pickle=False)
            if isinstance(loaded, np.ndarray):
                arrays = [loaded]
            else:
                with loaded:
                    arrays = [loaded[k] for k in loaded.files]
        except Exception as e:  # OSError, ValueError (object arrays), BadZipFile, ...
            raise UserError(f"cannot read arguments from {path}: "
                            f"{type(e).__name__}: {e}") from None
    types = func.input_types
    if len(arrays) != len(types):
        raise UserError(f"@{func.name} takes {len(types)} argument(s), "
                        f"{path or 'no --args'} gives {len(arrays)}")
    out = []
    for i, (a, t) in enumerate(zip(arrays, types)):
        dt = getattr(t, "dtype", None)
        if dt is None:
            raise UserError(f"argument #{i} of @{func.name} has type {t!r}, which "
                            "cannot be given from a file")
        if a.dtype != dt and a.dtype.kind == "V" and a.dtype.itemsize == dt.itemsize:
            a = a.view(dt)  # ml_dtypes arrays round-trip through .npy as raw bytes
        out.append(coerce(a, t, i, func.name, cast))
    return out


# The most `run --out` writes unless --max-out-bytes says otherwise: a result
# may be a broadcast view (stride 0) of a tiny array whose logical size is
# terabytes, and .npz stores logical arrays.
MAX_OUT_BYTES = 4 << 30


def _check_out_size(arrays: dict[str, np.ndarray], limit: int) -> None:
    total = 0
    for k, v in arrays.items():
        total += int(v.size) * v.dtype.itemsize
    if total > limit:
        big = max(arrays.items(), key=lambda kv: kv[1].size * kv[1].dtype.itemsize)
        raise UserError(
            f"the results take {total:,} bytes as arrays ({big[0]}: shape "
            f"{big[1].shape} {big[1].dtype}), more than the {limit:,} bytes --out "
            "writes; pass --max-out-bytes N to allow it")


def _portable(a: np.ndarray) -> np.ndarray:
    """A numpy array .npz can store (widen ml_dtypes types losslessly)."""
    from . import dtypes
    if a.dtype in dtypes.ML_FLOATS:
        return a.astype(np.float32)
    if a.dtype in dtypes.SUB_BYTE_INTS:
        return a.astype(np.int8 if not dtypes.is_unsigned(a.dtype) else np.uint8)
    return a


def _describe(value: Any, ttype: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(_describe(v, t) for v, t in zip(value, ttype.types)) + ")"
    if not isinstance(value, np.ndarray):
        return repr(ttype)
    body = np.array2string(_portable(value) if value.dtype.kind not in "fcb?iu"
                           else value, separator=", ", threshold=1000)
    if value.ndim == 0:
        return f"{ttype!r} {body}"
    return f"{ttype!r}\n{body}"


def _program_and_args(a: argparse.Namespace) -> tuple[Any, Any, list[Any]]:
    """The compiled module, the function to run and its arguments from --args."""
    program = _compile(a.module, a.numerics)
    try:
        func = program.function(a.func)
    except Exception as e:
        raise UserError(str(e)) from None
    return program, func, load_args(a.args, func, a.cast)


def cmd_run(a: argparse.Namespace) -> int:
    from .compare import flatten_results
    program, func, args = _program_and_args(a)
    results = program.run(*args, func=func.name)
    if a.out:
        arrays: dict[str, np.ndarray] = {}
        for i, r in enumerate(results):
            flatten_results(f"result_{i}", r, arrays, _portable)
        _check_out_size(arrays, a.max_out_bytes)
        try:
            np.savez(a.out, **arrays)  # type: ignore[arg-type]  # numpy stubs: savez(file, *args, allow_pickle=...)
        except OSError as e:
            raise UserError(f"cannot write {a.out}: {e.strerror or e}") from None
        print(f"wrote {len(arrays)} array(s) to {a.out}")
    else:
        for i, (r, t) in enumerate(zip(results, func.output_types)):
            print(f"result #{i}: {_describe(r, t)}")
    return 0


def cmd_check(a: argparse.Namespace) -> int:
    import stablehlo_interpreter as shi
    try:
        program = _compile(a.module)
    except shi.UnsupportedOpsError as e:
        return _list_unsupported(a.module, e.unsupported)
    except shi.LoadError as e:
        unknown = getattr(e, "unknown_ops", None)
        if not unknown:
            raise
        # MLIR refuses ops its dialects do not define at parse time: they
        # are ops this interpreter cannot run, not a broken file.
        return _list_unsupported(a.module, [(n, loc, "unknown op (MLIR: " + why + ")")
                                            for n, loc, why in unknown])
    nf = len(program.functions)
    print(f"{a.module}: all ops supported ({nf} function{'s' if nf != 1 else ''})")
    return 0


def _list_unsupported(module: str, unsupported: Any) -> int:
    names = sorted({u[0] for u in unsupported})
    print(f"{module}: {len(unsupported)} op occurrence(s) cannot run "
          f"({len(names)} distinct: {', '.join(names)}):")
    for name, loc, why in unsupported:
        print(f"  {name} at {loc}: {why}")
    return EXIT_DIFFERS


def cmd_compare(a: argparse.Namespace) -> int:
    from .compare import compare_with_files
    program, func, args = _program_and_args(a)
    try:
        loaded = np.load(a.against, allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            against = {"result_0": loaded}
        else:
            with loaded:
                against = {k: loaded[k] for k in loaded.files}
    except Exception as e:
        raise UserError(f"cannot read expected outputs from {a.against}: "
                        f"{type(e).__name__}: {e}") from None
    report = compare_with_files(program, args, against, func=func.name, rtol=a.rtol,
                                atol=a.atol, ulp=a.ulp, against_name=a.against)
    report.reference_name = "stablehlo-ref"
    print(report)
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="stablehlo-ref",
        description="Run StableHLO modules on the numpy reference interpreter.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a module's entry function")
    r.add_argument("module", help="MLIR text, bytecode or portable artifact file")
    r.add_argument("--args", help=".npz (arrays in stored order) or .npy with the inputs")
    r.add_argument("--out", help="save the results to this .npz instead of printing them")
    r.add_argument("--func", help="function to run (default: main)")
    r.add_argument("--cast", action="store_true",
                   help="convert arguments whose dtype differs from the parameter's "
                   "(refusing values the conversion would change)")
    r.add_argument("--max-out-bytes", type=int, default=MAX_OUT_BYTES,
                   help=f"largest total size --out writes (default {MAX_OUT_BYTES:,})")
    c = sub.add_parser("check", help="list the ops the interpreter cannot run")
    c.add_argument("module", help="MLIR text, bytecode or portable artifact file")
    k = sub.add_parser("compare", help="diff a module's reference results against "
                       "another backend's outputs (exit 1 if they differ)")
    k.add_argument("module", help="MLIR text, bytecode or portable artifact file")
    k.add_argument("--args", help=".npz (arrays in stored order) or .npy with the inputs")
    k.add_argument("--against", required=True,
                   help=".npz (or .npy) with the other backend's outputs")
    k.add_argument("--func", help="function to run (default: main)")
    k.add_argument("--cast", action="store_true",
                   help="convert arguments whose dtype differs from the parameter's")
    k.add_argument("--rtol", type=float, help="relative tolerance for floats")
    k.add_argument("--atol", type=float, help="absolute tolerance for floats")
    k.add_argument("--ulp", type=int, help="compare floats by ULP distance instead")
    for sp in (r, k):
        sp.add_argument("--numerics", choices=("accurate", "spec"),
                        help="accurate: the most accurate result of the element type; "
                        "spec: bit-identical to the C++ reference interpreter (element-type "
                        "arithmetic in its order). Default: $STABLEHLO_REF_NUMERICS, else "
                        "accurate (docs/numerics.md)")
    sub.add_parser("config", help="list the STABLEHLO_REF_* switches and their current values")
    a = p.parse_args(argv)
    if a.command == "config":
        from . import config
        print(config.format_settings())
        return 0

    import stablehlo_interpreter as shi
    try:
        if a.command == "run":
            return cmd_run(a)
        if a.command == "compare":
            return cmd_compare(a)
        return cmd_check(a)
    except UserError as e:
        print(f"stablehlo-ref: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except shi.InterpreterError as e:
        print(f"stablehlo-ref: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_ERROR
    except MemoryError:
        print("stablehlo-ref: error: out of memory", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
