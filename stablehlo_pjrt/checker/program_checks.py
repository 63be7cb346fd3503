"""Area ``programs``: every StableHLO conformance program compiled and run
through the plugin's C API, its outputs compared with the reference
interpreter's.

The programs check themselves with the ``check`` dialect
(``check.expect_eq_const``, ``custom_call @check.expect_close``, ...), which
only interpreters know. On a foreign plugin each check op is taken out and
the value it checks becomes an output of ``@main`` instead (the entry function
of an ``interpret`` chunk is renamed ``@main``); the reference interpreter
runs the same rewritten module, and the plugin's outputs are compared with
the reference's (stablehlo_interpreter.compare: integers and bools exactly,
floats within the per-dtype tolerances). So a check's expected value is never
trusted on its own: the reference is the oracle, as for every other area.
Sub-byte integer outputs are widened to 8 bits with ``stablehlo.convert``
(PJRT hosts disagree on packing them). The module is handed to the plugin as
a portable artifact at the StableHLO version the plugin declares
(``stablehlo_current_version`` attribute, as JAX does). A failing program
names its first divergent op (stablehlo_pjrt.oracle.bisect).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from .. import compat
from .core import Failed, Skipped, Unsupported

if TYPE_CHECKING:
    from .context import Context
    from .core import Registry
from .plugin import BUFFER_TYPES, PluginError

# Cases the foreign run cannot express (they test the interpreter itself).
_INTERPRETER_ONLY = ("interpreter.run_parallel", "interpreter.probe", "interpreter.print",
                     "check.expect_serialized_eq")


def _cases(suite: str) -> list[tuple[str, str, int, str]]:
    """(suite name, relative file, chunk number, entry function) of every
    program of the conformance suite, without reading the programs' bodies
    more than the split needs."""
    from stablehlo_conformance import runner as conf
    out = []
    tasks, _errors = conf.collect(suite)
    per_file: dict = {}
    for t in tasks:
        chunk_no = per_file[t["file"]] = per_file.get(t["file"], -1) + 1
        if t["suite"] == "testdata":
            for case in t["cases"]:
                if case["kind"] != "testdata":
                    continue
                for ci, fn in case["runs"]:
                    out.append(("testdata", t["file"], ci, fn))
        else:
            seen = set()
            for case in t["cases"]:
                if case.get("expect_error") or case.get("args") is not None:
                    continue  # error cases and argument-taking RUN variants
                for _, fn in case["runs"]:
                    if fn not in seen:
                        seen.add(fn)
                        out.append(("interpret", t["file"], chunk_no, fn))
    return out


def _load_chunk(suite_dir: str, kind: str, rel: str, chunk: int, fn: str) -> str:
    from stablehlo_conformance import runner as conf
    from stablehlo_conformance import syntax
    found = conf.find_suites(suite_dir)
    with open(os.path.join(found[kind], rel), encoding="utf-8") as f:
        text = f.read()
    chunks = [c for _, c in syntax.split_chunks(syntax.rewrite(text))
              if syntax.entry_cases(c)]
    return chunks[chunk]


def foreign_module(chunk: str, entry: str) -> str:
    """The chunk with its check ops taken out and the checked values
    returned by a public @main (see the module docstring)."""
    from jaxlib.mlir import ir

    import stablehlo_interpreter as shi
    from stablehlo_interpreter import MLIR_LOCK
    for marker in _INTERPRETER_ONLY:
        if marker in chunk:
            raise Skipped(f"uses {marker}, which only an interpreter has")
    try:
        mod = shi.load(chunk, name="<conformance>")
    except shi.LoadError as e:
        # The reference reads programs with the installed jaxlib's dialects:
        # ops newer than them (chlo.mulhi and chlo.scan on jaxlib 0.8.0) are
        # the reference's limit, as in run_program.
        raise Skipped(f"the reference cannot load it with jaxlib's dialects: "
                      f"{' '.join(str(e).split())[:200]}") from None
    with MLIR_LOCK, mod.context, ir.Location.unknown():
        module = ir.Module.parse(str(mod.mlir))
        funcs = {ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation
                 for op in module.body.operations if op.operation.name == "func.func"}
        main = funcs[entry]
        for name, f in funcs.items():
            if name != entry and "check." in str(f):
                raise Skipped(f"check ops outside the entry function (in @{name})")
        ret, values, to_erase = _checked_values(main)
        widened = _widened(ret, values)
        _return_values(main, ret, widened, to_erase)
        _publish_entry(funcs, entry)
        if not module.operation.verify():
            raise RuntimeError("internal error: the rewritten program does not verify")
        return module.operation.get_asm(enable_debug_info=True)


def _is_check(op) -> bool:
    from jaxlib.mlir import ir
    if op.name.startswith("check."):
        return True
    return (op.name == "stablehlo.custom_call" and ir.StringAttr(
        op.attributes["call_target_name"]).value.startswith("check."))


def _checked_values(main):
    """The entry's return op, the values to return (its outputs, then every
    checked value, each once) and the check ops to erase."""
    body = main.regions[0].blocks[0]
    checked, to_erase = [], []
    for op in body.operations:
        op = op.operation
        if _is_check(op):
            # Every operand: the computed value is the first operand of
            # check.expect_* but the second of testdata's @check.eq.
            checked.extend(op.operands)
            to_erase.append(op)
        elif "check." in str(op):
            raise Skipped("check ops nested inside a region of the entry function")
    ret = list(body.operations)[-1].operation
    # Some check ops have a result (testdata's quantized programs return
    # the i1 of custom_call @check.eq): it goes away with the op, so it
    # must not be returned (nor used by anything else).
    check_results = [r for op in to_erase for r in op.results]
    for r in check_results:
        users = [u for u in r.uses if u.owner.operation != ret]
        if users:
            raise Skipped("a check op's result is used by the program")
    values = []
    for v in list(ret.operands) + checked:
        if v not in values and not any(v == r for r in check_results):
            values.append(v)
    if not values:
        raise Skipped("no value to compare (no check op and no output)")
    return ret, values, to_erase


def _widened(ret, values) -> list:
    """``values`` with i2/i4 widened to 8 bits (a host buffer holds bytes);
    anything but a statically shaped ranked tensor is skipped."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo
    widened = []
    with ir.InsertionPoint(ret):
        for v in values:
            rt = _down(v.type)
            if not isinstance(rt, ir.RankedTensorType):
                raise Skipped(f"output of type {rt} (not a ranked tensor)")
            if not rt.has_static_shape:
                raise Skipped(f"dynamically shaped output {rt}")
            et = _down(rt.element_type)
            if isinstance(et, ir.IntegerType) and et.width in (2, 4):
                wide = (ir.IntegerType.get_unsigned(8) if et.is_unsigned
                        else ir.IntegerType.get_signless(8))
                v = stablehlo.ConvertOp(ir.RankedTensorType.get(rt.shape, wide), v).result
            widened.append(v)
    return widened


def _return_values(main, ret, widened, to_erase) -> None:
    """Replace the entry's return with one of ``widened`` and drop the check ops."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import func
    with ir.InsertionPoint(ret), ret.location:
        func.ReturnOp(widened)
    ret.erase()
    # Only now: the old return may have used a check op's result.
    for op in reversed(to_erase):
        op.erase()
    main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        list(ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value).inputs),
        [v.type for v in widened]))
    if "res_attrs" in main.attributes:
        del main.attributes["res_attrs"]


def _publish_entry(funcs, entry: str) -> None:
    """The entry becomes the public @main; every other function is private."""
    from jaxlib.mlir import ir
    for name, f in funcs.items():
        f.attributes["sym_visibility"] = ir.StringAttr.get(
            "public" if name == entry else "private")
    if entry != "main":
        if "main" in funcs:
            funcs["main"].attributes["sym_name"] = ir.StringAttr.get("main_renamed")
        funcs[entry].attributes["sym_name"] = ir.StringAttr.get("main")


def _down(t):
    return t.maybe_downcast() if hasattr(t, "maybe_downcast") else t


def plugin_artifact(ctx: Context, text: str) -> bytes:
    """``text`` as a portable artifact at the plugin's StableHLO version."""
    from jaxlib.mlir.dialects import stablehlo
    target = getattr(ctx, "_stablehlo_target", None)
    if target is None:
        ours = stablehlo.get_current_version()
        try:
            theirs = ctx.plugin.attributes().get("stablehlo_current_version")
        except PluginError:
            theirs = None
        if theirs:
            t = ".".join(str(x) for x in theirs)
            key = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
            target = t if key(t) < key(ours) else ours
        else:
            target = ours
        ctx._stablehlo_target = target
    try:
        # jaxlib's serializer (xla::SerializeUsingVersionedStablehlo)
        # legalizes CHLO to StableHLO first, as JAX does for a plugin; the
        # dialect binding's serialize_portable_artifact_str refuses CHLO but
        # knows the quant dialect, which jaxlib's parser does not.
        xc = compat.jax_internal("lib", "xla_client")
        return xc._xla.mlir.serialize_portable_artifact(text, target)
    except Exception as e:  # noqa: BLE001 - the MLIR bindings raise bare errors
        del e
    try:
        return stablehlo.serialize_portable_artifact_str(text, target)
    except Exception:  # noqa: BLE001
        # Neither serializer takes it (quantized types in jaxlib 0.10.2):
        # the plugin gets the MLIR text, which it may still parse.
        return text.encode()


def plugin_runner(ctx: Context) -> Callable[[str, Sequence], list]:
    """A bisect Runner: compile module text on the plugin, run it, fetch outputs."""
    c = ctx.client

    def run(text, args):
        exe = c.compile(plugin_artifact(ctx, text))
        bufs = [c.from_host(np.asarray(a)) for a in args]
        try:
            outs = [c.buffer(h) for h in exe.execute(bufs)[0]]
            vals = [o.to_host() for o in outs]
            for o in outs:
                o.destroy()
            return vals
        finally:
            for b in bufs:
                b.destroy()
            exe.destroy()

    run.__name__ = "plugin"
    return run


def run_program(ctx: Context, text: str, args: Sequence = ()) -> str | None:
    """Compiles and runs ``text`` on the plugin and the reference; raises
    Failed naming the first divergent op when they differ. Outputs that
    differ only as two summation orders of one dot/convolution/reduction
    may (the oracle's summation-order cause) pass: the note saying so is
    returned."""
    import stablehlo_interpreter as shi
    from stablehlo_interpreter import compare_outputs
    try:
        ref = [np.asarray(v) for v in shi.compile(text, name="<program>").run(*args)]
    except Exception as e:  # noqa: BLE001
        raise Skipped(f"the reference cannot run it: {type(e).__name__}: "
                      f"{' '.join(str(e).split())[:200]}") from None
    for v in ref:
        if v.dtype not in BUFFER_TYPES:
            raise Skipped(f"output dtype {v.dtype} has no PJRT host transfer in the kit")
    art = plugin_artifact(ctx, text)
    c = ctx.client
    try:
        exe = c.compile(art)
    except PluginError as e:
        raise Unsupported(f"refused to compile: {e}") from None
    bufs = [c.from_host(np.asarray(a)) for a in args]
    try:
        try:
            handles = exe.execute(bufs)[0]
        except PluginError as e:
            if e.unimplemented:
                raise
            raise Failed(f"execution failed: {e}") from None
        outs = [c.buffer(h) for h in handles]
        got = []
        for o, r in zip(outs, ref):
            if o.dtype != r.dtype or tuple(o.shape) != r.shape:
                raise Failed(f"output {len(got)}: {o.dtype}{list(o.shape)} from the plugin, "
                             f"{r.dtype}{list(r.shape)} from the reference",
                             op="output type")
            got.append(o.to_host())
            o.destroy()
    finally:
        for b in bufs:
            b.destroy()
        exe.destroy()
    if len(got) != len(ref):
        raise Failed(f"{len(got)} outputs from the plugin, {len(ref)} from the reference")
    rep = compare_outputs(ref, got, reference_name="reference", other_name="plugin")
    if rep.ok:
        return
    op = None
    detail = str(rep)
    from .summation import explain
    try:
        note = explain(text, args, None, ref, got)
    except Exception as e:  # noqa: BLE001 - then the difference stands
        note = None
        detail += f"\n(summation bound not computed: {type(e).__name__}: {e})"
    if note is not None:
        return note  # passed: a correct sum in another order
    try:
        from ..oracle.bisect import first_divergence
        # None: the oracle's verdict (stablehlo_pjrt/oracle) explains the
        # difference as rounding alone (summation-order), every op within
        # its own bound when run alone; other causes stay findings.
        d = first_divergence(text, *args, against=plugin_runner(ctx),
                             allow=["summation-order"])
        if d is None:
            return ("summation-order bound of every op, each run alone on the "
                    "reference's inputs: the outputs differ by their rounding, amplified "
                    "by the program (the oracle's verdict, docs/oracle.md)")
    except Exception as e:  # noqa: BLE001 - the comparison stands without it
        d = None
        detail += f"\n(bisection failed: {type(e).__name__}: {e})"
    if d is not None:
        if d.op is not None:
            # The innermost op: bisection descends into loop/branch/call bodies.
            op = d.innermost.op.name
            detail += "\n" + str(d)
            if d.inner is not None:
                detail += "\npath: " + " > ".join(d.path)
    raise Failed(detail, op=op)


def register(reg: Registry, suite: str | None) -> None:
    if not suite or not os.path.isdir(suite):
        return

    def conformance(ctx, kind, rel, chunk, fn):
        """A conformance program: the plugin's outputs equal the reference's."""
        text = _load_chunk(suite, kind, rel, chunk, fn)
        return run_program(ctx, foreign_module(text, fn))

    try:
        cases = _cases(suite)
    except SystemExit:
        return
    seen = set()
    for kind, rel, chunk, fn in cases:
        label = rel if kind == "testdata" else f"{rel}@{fn}"
        if label in seen:
            label = f"{label}#{chunk}"
        seen.add(label)
        from .core import Check
        reg.add(Check(f"programs.{kind}.{label}", "programs", kind, conformance,
                      (kind, rel, chunk, fn), (), conformance.__doc__))
