"""Differential checks of spec mode against the C++ reference interpreter.

``compare(cpp, text, args)`` runs one program both ways: the C++ interpreter
(tests/cpp_reference.py, in a child process) and ``numerics="spec"``; the
outputs must be bit-identical (NaNs equal whatever their payload). Programs
the C++ interpreter cannot run (an exception or an abort) are reported as
such, not compared.

``python tests/spec_diff.py SUITE_DIR [SUBSTR...]`` checks the suite's
testdata programs (their ``check.*`` custom calls removed: the entry
function returns the computed value) and prints every difference.
"""

import os
import re
import sys

import cpp_reference  # (tests/ is on the path under pytest and when run as a script)
import numpy as np

_CHECK_CALL = re.compile(r"^[ \t]*stablehlo\.custom_call @check\.[^\n]*\n", re.M)


def suite_program(path):
    """The testdata file's text without its check custom calls."""
    with open(path, encoding="utf-8") as f:
        return _CHECK_CALL.sub("", f.read())


def split_complex(text, args):
    """``(text', args', join)``: jaxlib's eval_module binding cannot take or
    return complex tensors (it fails to cast their attributes), so a program
    with complex parameters or results gets a new entry function taking
    their real and imaginary parts (``stablehlo.complex``) and returning
    them (``stablehlo.real``/``imag``); the original entry is renamed.
    ``join`` puts the C++ results back together (None: nothing changed)."""
    from jax._src.interpreters import mlir as jmlir
    from jaxlib.mlir import ir
    with jmlir.make_ir_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        main = None
        for op in module.body.operations:
            if op.operation.name == "func.func" and \
                    ir.StringAttr(op.attributes["sym_name"]).value == "main":
                main = op
        if main is None:
            return text, args, None
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        ins = [str(t) for t in ftype.inputs]
        outs = [str(t) for t in ftype.results]
    if not any("complex<" in t for t in ins + outs):
        return text, args, None
    if not re.search(r"^\s*module\b", text, re.M):
        text = "module {\n" + text + "}\n"
    body = text.replace("@main(", "@__orig_main(", 1)
    body = re.sub(r"func\.func\s+(public\s+)?@__orig_main", "func.func private @__orig_main", body, 1)
    params, new_args, call_args, lines = [], [], [], []
    for i, (t, a) in enumerate(zip(ins, args)):
        if "complex<" in t:
            part = re.sub(r"complex<(f\d+)>", r"\1", t)
            params += [f"%p{i}r: {part}", f"%p{i}i: {part}"]
            a = np.asarray(a)
            new_args += [np.array(a.real, order="C"), np.array(a.imag, order="C")]
            lines.append(f"    %a{i} = stablehlo.complex %p{i}r, %p{i}i : {t}")
        else:
            params.append(f"%a{i}: {t}")
            new_args.append(a)
        call_args.append(f"%a{i}")
    names = f"%r:{len(outs)}" if len(outs) > 1 else "%r"
    lines.append(f"    {names} = func.call @__orig_main({', '.join(call_args)})"
                 f" : ({', '.join(ins)}) -> ({', '.join(outs)})")
    rets, rtypes, parts = [], [], []
    for i, t in enumerate(outs):
        v = f"%r#{i}" if len(outs) > 1 else "%r"
        if "complex<" in t:
            part = re.sub(r"complex<(f\d+)>", r"\1", t)
            lines.append(f"    %re{i} = stablehlo.real {v} : ({t}) -> {part}")
            lines.append(f"    %im{i} = stablehlo.imag {v} : ({t}) -> {part}")
            rets += [f"%re{i}", f"%im{i}"]
            rtypes += [part, part]
            parts.append(2)
        else:
            rets.append(v)
            rtypes.append(t)
            parts.append(1)
    lines.append(f"    return {', '.join(rets)} : {', '.join(rtypes)}")
    lines.append("  }")
    head = f"  func.func public @main({', '.join(params)}) -> ({', '.join(rtypes)}) {{"
    end = body.rstrip().rfind("}")
    body = body[:end] + head + "\n" + "\n".join(lines) + "\n}\n"

    def join(values):
        out, k = [], 0
        for n in parts:
            if n == 2:
                re_, im = np.asarray(values[k]), np.asarray(values[k + 1])
                c = np.empty(re_.shape, np.complex64 if re_.dtype == np.float32 else np.complex128)
                c.real, c.imag = re_, im
                out.append(c)
            else:
                out.append(values[k])
            k += n
        return out
    return body, new_args, join


def compare(cpp, text, args=()):
    """``("same" | "differ" | "cpp-unsupported" | "ours-failed", detail)``."""
    import stablehlo_interpreter as shi
    cpp_text, cpp_args, join = split_complex(text, args)
    theirs = cpp.run(cpp_text, cpp_args)
    if theirs[0] == "ok" and join is not None:
        theirs = ("ok", join(theirs[1]))
    if theirs[0] != "ok":
        return "cpp-unsupported", f"{theirs[0]}: {theirs[1][:300]}"
    try:
        ours = shi.compile(text, numerics="spec").run(*args)
    except Exception as e:  # noqa: BLE001 - reported
        return "ours-failed", f"{type(e).__name__}: {e}"[:500]
    if len(ours) != len(theirs[1]):
        return "differ", f"{len(ours)} results, C++ {len(theirs[1])}"
    for i, (a, b) in enumerate(zip(ours, theirs[1])):
        a = np.asarray(a)
        b = np.asarray(b)
        if b.dtype != a.dtype and b.shape == a.shape and a.dtype == np.bool_:
            b = b.astype(np.bool_)
        if not cpp_reference.bits_equal(a, b):
            return "differ", _describe(i, a, b)
    return "same", ""


def _describe(i, a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"result {i}: ours {a.dtype}{a.shape}, C++ {b.dtype}{b.shape}"
    fa, fb = a.reshape(-1), b.reshape(-1)
    bad = [k for k in range(fa.size) if not cpp_reference.bits_equal(fa[k:k + 1], fb[k:k + 1])]
    k = bad[0]
    idx = np.unravel_index(k, a.shape) if a.ndim else ()
    return (f"result {i}: {len(bad)} of {fa.size} elements differ; first at {list(idx)}: "
            f"ours {fa[k]!r}, C++ {fb[k]!r}")


def testdata_files(suite_dir, only=()):
    folder = os.path.join(suite_dir, "testdata")
    names = sorted(n for n in os.listdir(folder) if n.endswith(".mlir"))
    return [os.path.join(folder, n) for n in names
            if not only or any(o in n for o in only)]


def main(argv):
    suite_dir, only = argv[0], argv[1:]
    cpp = cpp_reference.CppInterpreter(timeout=120)
    counts = {}
    try:
        for path in testdata_files(suite_dir, only):
            status, detail = compare(cpp, suite_program(path))
            counts[status] = counts.get(status, 0) + 1
            if status != "same":
                print(f"{status:16} {os.path.basename(path)}  {detail}", flush=True)
    finally:
        cpp.close()
    print(counts)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
