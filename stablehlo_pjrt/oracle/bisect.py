"""Find the first op where another backend diverges from the reference.

The reference interpreter runs a variant of the module whose @main also
returns every intermediate value (so all of them are recorded, in program
order). The other backend runs variants that return chosen intermediates:
the candidate ops are the top-level ops of @main in program order; an op
with regions, or a call, counts as one op (what happens inside it is part of
its result).

Search: the inputs agree and (we check) the outputs do not, so a binary
search over "does op k's result diverge" finds an op k whose result diverges
while op k-1's does not, in about log2(N) runs of the other backend. Because
a divergence need not propagate to every later op, the candidate is then
verified: the values op k reads (operands and values its regions capture)
are fetched from the other backend; if one of them already diverges, its
producer is earlier than k and the search continues before it. The op
reported therefore always has inputs that agree with the reference and a
result that does not: the place where the other backend goes wrong.
``strategy="linear"`` instead runs one variant returning every intermediate
and reports the earliest divergent op in program order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

import stablehlo_interpreter as shi
from stablehlo_interpreter import MLIR_LOCK, compare_arrays, summarize

from ..mlir_funcs import entry_func, find_func, func_name, return_also
from .runners import Runner, jax_backend_runner, reference_runner, source_line  # noqa: F401

if TYPE_CHECKING:
    from .verdict import Report

# Where a value of @main comes from: ("arg", k) or ("op", op index, result number).
Source = tuple[Any, ...]


@dataclass
class Candidate:
    """One top-level op of @main."""

    index: int                 # position among the top-level ops of @main
    name: str
    location: str
    text: str                  # the op as MLIR (regions elided)
    result_numbers: list[int]  # which results are tensors (returnable)
    reads: list[Source]        # ("arg", k) or ("op", candidate index, result number)


class ModuleVariants:
    """A module and the variants of it whose @main also returns intermediates."""

    def __init__(self, module: Any, name: str = "<module>") -> None:
        from jaxlib.mlir import ir
        self._module = shi.load(module, name=name)
        with MLIR_LOCK, self._module.context:
            self.text: str = str(self._module.mlir.operation.get_asm(enable_debug_info=True))
            main = entry_func(self._module.mlir)
            self.main_name = func_name(main)
            self.ops: list[Candidate] = []
            self.num_outputs = len(ir.FunctionType(
                ir.TypeAttr(main.attributes["function_type"]).value).results)
            self.num_args = len(main.regions[0].blocks[0].arguments)
            where: dict[Any, Source] = {}  # MLIR value -> ("arg", k) | ("op", i, r)
            for k, a in enumerate(main.regions[0].blocks[0].arguments):
                where[a] = ("arg", k)
            body = list(main.regions[0].blocks[0].operations)
            for i, op in enumerate(body[:-1]):  # the last op is the return
                op = op.operation
                for r, v in enumerate(op.results):
                    where[v] = ("op", i, r)
                reads: list[Source] = []
                for v in self._values_read(op):
                    src = where.get(v)
                    if src is not None and src not in reads:
                        reads.append(src)
                tensor_results = [r for r, v in enumerate(op.results)
                                  if _static_tensor(v.type)]
                self.ops.append(Candidate(
                    index=i, name=op.name,
                    location=shi.format_location(op.location),
                    text=_op_text(op), result_numbers=tensor_results, reads=reads))

    @staticmethod
    def _values_read(op: Any) -> list[Any]:
        """Operands of ``op`` and values its regions use from outside them."""
        out = list(op.operands)
        inner_defined: set[Any] = set()

        def walk(o: Any) -> None:
            for region in o.regions:
                for block in region.blocks:
                    inner_defined.update(block.arguments)
                    for inner in block.operations:
                        inner = inner.operation
                        inner_defined.update(inner.results)
                        out.extend(inner.operands)
                        walk(inner)

        walk(op)
        return [v for v in out if v not in inner_defined]

    def returnable(self, i: int) -> bool:
        return bool(self.ops[i].result_numbers)

    def variant(self, indices: Sequence[int]) -> str:
        """Module text whose @main returns its outputs followed by the tensor
        results of the ops ``indices`` (in that order)."""
        from jaxlib.mlir import ir
        with MLIR_LOCK, self._module.context, ir.Location.unknown():
            module = ir.Module.parse(self.text)
            main = entry_func(module)
            body = list(main.regions[0].blocks[0].operations)
            extra: list[Any] = []
            for i in indices:
                op = body[i].operation
                extra.extend(op.results[r] for r in self.ops[i].result_numbers)
            return_also(main, extra)
            if not module.operation.verify():
                raise RuntimeError("internal error: the rewritten module does not verify")
            return str(module.operation.get_asm(enable_debug_info=True))

    def split(self, indices: Sequence[int],
              outputs: Sequence[Any]) -> tuple[list[Any], dict[int, list[Any]]]:
        """(original outputs, {op index: [tensor results]}) of a variant's outputs."""
        outputs = list(outputs)
        expected = self.num_outputs + sum(len(self.ops[i].result_numbers) for i in indices)
        if len(outputs) != expected:
            raise RuntimeError(f"the variant returned {len(outputs)} value(s), "
                               f"expected {expected}")
        pos = self.num_outputs
        values: dict[int, list[Any]] = {}
        for i in indices:
            n = len(self.ops[i].result_numbers)
            values[i] = outputs[pos:pos + n]
            pos += n
        return outputs[:self.num_outputs], values


def _static_tensor(t: Any) -> bool:
    """A ranked, statically shaped tensor type (one every backend can return)."""
    from jaxlib.mlir import ir
    t = t.maybe_downcast() if hasattr(t, "maybe_downcast") else t
    return isinstance(t, ir.RankedTensorType) and bool(t.has_static_shape)


def _op_text(op: Any) -> str:
    """One line of MLIR for an op: its own text, without its regions' bodies
    or large constants."""
    try:
        text = str(op.get_asm(large_elements_limit=8))
    except TypeError:
        text = str(op)
    first = text.strip().splitlines()[0] if text.strip() else str(op.name)
    if op.regions and len(text.strip().splitlines()) > 1:
        first += " ... }"
    return first if len(first) <= 300 else first[:300] + " ..."


def _one_line(value: Any) -> str:
    return " ".join(summarize(value).split())


@dataclass
class Divergence:
    """Where the other backend first disagrees with the reference."""

    op: Candidate | None          # None: only the final outputs differ
    num_ops: int
    inputs: list[tuple[str, Any]]  # [(label, reference value)] of what the op reads
    reference: list[Any]          # the op's tensor results on the reference
    other: list[Any]              # ... and on the other backend
    diffs: list[Any]              # LeafDiff per result
    output_diffs: list[Any]       # LeafDiff per output of @main
    runs: int                     # runs of the other backend it took
    other_name: str = "other"
    notes: list[str] = field(default_factory=list)
    inner: "Divergence | None" = None   # the divergence inside the op's body
    inner_where: str = ""                # e.g. "iteration 3 of the loop body"
    explained: bool = False              # every difference has an allowed cause
    causes: set[str] = field(default_factory=set)   # the verdict's cause names
    function: str = "main"               # the function the op is in
    isolated: bool = False               # values from the op run alone

    @property
    def source(self) -> str | None:
        return source_line(self.op.location) if self.op else None

    @property
    def innermost(self) -> "Divergence":
        """The deepest divergence found (descending into bodies)."""
        d = self
        while d.inner is not None and d.inner.op is not None:
            d = d.inner
        return d

    @property
    def path(self) -> list[str]:
        """Op names from @main down to the innermost divergent op."""
        out: list[str] = []
        d: Divergence | None = self
        while d is not None and d.op is not None:
            out.append(d.op.name + (f" [{d.inner_where}]" if d.inner is not None else ""))
            d = d.inner
        return out

    def __str__(self) -> str:
        if self.op is None and self.explained:
            lines = [f"the outputs differ on {self.other_name} for these causes: "
                     f"{', '.join(sorted(self.causes))}; no op is to blame"]
        elif self.op is None:
            lines = [f"the outputs of @main differ on {self.other_name}, but no op is "
                     "outside its own bound when run alone"]
        else:
            op = self.op
            where = (f"top-level op #{op.index} of {self.num_ops} in @main"
                     if self.function == "main" else f"in @{self.function}")
            lines = [f"first divergent op: {op.name} ({where})",
                     f"  source: {self.source or '(no Python location recorded)'}",
                     f"  location: {op.location}",
                     f"  op: {op.text}"]
            if self.inputs and self.isolated:
                lines.append("  inputs (the reference's, given to both sides alone):")
                for label, v in self.inputs:
                    lines.append(f"    {label}: {_one_line(v)}")
            elif self.inputs:
                lines.append(f"  inputs (the reference and {self.other_name} agree on these):")
                for label, v in self.inputs:
                    lines.append(f"    {label}: {_one_line(v)}")
            for k, (r, o, d) in enumerate(zip(self.reference, self.other, self.diffs)):
                lines.append(f"  result #{k} on the reference: {_one_line(r)}")
                lines.append(f"  result #{k} on {self.other_name}: {_one_line(o)}")
                lines.extend("    " + ln for ln in str(d).splitlines())
        lines.extend(f"  note: {n}" for n in self.notes)
        lines.append(f"  ({self.runs} run(s) of {self.other_name})")
        if self.inner is not None:
            lines.append(f"  inside it, {self.inner_where}:")
            lines.extend("    " + ln for ln in str(self.inner).splitlines())
        return "\n".join(lines)


class _Search:
    def __init__(self, variants: ModuleVariants, args: Sequence[Any], run_other: Runner,
                 tol: dict[str, Any], other_name: str) -> None:
        self.v = variants
        self.args = [np.asarray(a) for a in args]
        self.run_other = run_other
        self.tol = tol
        self.other_name = other_name
        self.runs = 0
        self.other_values: dict[int, list[Any]] = {}
        self.verdicts: dict[int, bool] = {}
        self.other_outputs: list[Any] = []
        every = [i for i in range(len(variants.ops)) if variants.returnable(i)]
        outs = reference_runner(variants.variant(every), self.args)
        self.ref_outputs, self.ref_values = variants.split(every, outs)

    def fetch(self, indices: Sequence[int]) -> None:
        need = [i for i in indices if i not in self.other_values]
        if not need and indices:
            return
        outs = self.run_other(self.v.variant(need), self.args)
        self.runs += 1
        self.other_outputs, values = self.v.split(need, outs)
        self.other_values.update(values)

    def diffs(self, i: int) -> list[Any]:
        return [compare_arrays(f"result #{k}", r, o, **self.tol) for k, (r, o) in
                enumerate(zip(self.ref_values[i], self.other_values[i]))]

    def diverges(self, i: int) -> bool:
        if i not in self.verdicts:
            self.fetch([i])
            self.verdicts[i] = not all(d.ok for d in self.diffs(i))
        return self.verdicts[i]

    def producers(self, i: int) -> list[int]:
        return sorted({src[1] for src in self.v.ops[i].reads
                       if src[0] == "op" and self.v.returnable(src[1])})


def first_divergence(fn_or_module: Any, *args: Any, against: str | Runner = "cpu",
                     strategy: str = "bisect", rtol: float | None = None,
                     atol: float | None = None, ulp: int | None = None, depth: int = 4,
                     allow: Iterable[str] | None = None,
                     forbid: Iterable[str] | None = None) -> Divergence | None:
    """Locates the op to blame when ``against`` differs from the reference.

    ``fn_or_module`` is a JAX function (lowered with ``jax.jit`` on ``args``;
    typed PRNG keys are passed as their raw data) or a module (MLIR text,
    bytecode or portable artifact) with ``args`` the arrays @main takes.
    ``against`` is a JAX platform name, or a Runner ``run(module_text,
    args) -> outputs`` for any other backend.

    Returns None when nothing is unexplained: the verdict of
    :func:`~stablehlo_pjrt.oracle.compare` (with ``allow``/``forbid``) is
    ok. Otherwise a :class:`Divergence`: ``.explained`` and ``.causes`` say
    whether causes account for the difference (a forbidden one, say), and
    ``.op`` names an op only for an unexplained difference. The search
    bisects over the top-level ops of @main for the first whose result
    diverges, then isolates before blaming: the op re-run alone on the
    other backend from the reference's exact inputs must fall outside its
    own bound (oracle/isolate.py). An op inside its bound only amplified
    differences that came from elsewhere (a note gives its condition
    number and where they came from), and the first op outside its own
    bound, in any called function, is named instead. When the op has a
    body (``while``, ``case``, ``if``, ``func.call``, ``stablehlo.composite``),
    the search descends into it, up to ``depth`` levels (``.inner``,
    ``.innermost``, ``.path``). ``rtol``/``atol``/``ulp`` replace the
    verdict by a fixed tolerance.
    """
    if isinstance(fn_or_module, (str, bytes, bytearray, memoryview)):
        module, flat_args = fn_or_module, list(args)
    else:
        from ._lowering import lower
        module, flat_args = lower(fn_or_module, *args)
    from .runners import other_runner
    other_name, run_other = other_runner(against)
    if strategy not in ("bisect", "linear"):
        raise ValueError(f"strategy must be 'bisect' or 'linear', not {strategy!r}")
    variants = ModuleVariants(module)
    if len(flat_args) != variants.num_args:
        raise ValueError(f"@{variants.main_name} takes {variants.num_args} argument(s), "
                         f"got {len(flat_args)}")
    tol: dict[str, Any] = {"rtol": rtol, "atol": atol, "ulp": ulp}
    fixed = any(v is not None for v in tol.values())
    report: Report | None = None
    if not fixed:
        from .verdict import compare
        run_other.__name__ = other_name
        report = compare(module if isinstance(fn_or_module, (str, bytes, bytearray,
                                                             memoryview))
                         else fn_or_module, *(flat_args if isinstance(
                             fn_or_module, (str, bytes, bytearray, memoryview)) else args),
                         against=run_other, allow=allow, forbid=forbid)
        if report.ok:
            return None
    s = _Search(variants, flat_args, run_other, tol, other_name)
    candidates = [i for i in range(len(variants.ops)) if variants.returnable(i)]

    if strategy == "linear":
        s.fetch(candidates)
    else:
        s.fetch([])
    output_diffs = [compare_arrays(f"output #{k}", r, o, **tol)
                    for k, (r, o) in enumerate(zip(s.ref_outputs, s.other_outputs))]
    outputs_differ = not all(d.ok for d in output_diffs)

    found: int | None = None
    notes: list[str] = []
    if strategy == "linear":
        found = next((i for i in candidates if s.diverges(i)), None)
        if found is None and not outputs_differ and fixed:
            return None
    elif outputs_differ:
        # Invariant: candidates[lo] agrees (or lo == -1: the arguments),
        # candidates[hi] diverges (or hi == len: the outputs).
        lo, hi = -1, len(candidates)
        while True:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if s.diverges(candidates[mid]):
                    hi = mid
                else:
                    lo = mid
            if hi == len(candidates):
                break
            op = candidates[hi]
            producers = s.producers(op)
            s.fetch(producers)
            bad = [p for p in producers if s.diverges(p)]
            if not bad:
                found = op
                break
            # A value op reads diverged already although the op just before
            # it agrees: the divergence did not propagate in between. Search
            # again before the earliest diverging producer.
            notes.append(f"{variants.ops[op].name} (op #{op}) reads diverged values; "
                         "searched again before them")
            lo, hi = -1, candidates.index(min(bad))
    elif fixed:
        return None

    if report is not None:
        return _blame(report, variants, s, found, notes, output_diffs, run_other, tol,
                      other_name, strategy, depth, module, flat_args)
    if found is None:
        return Divergence(None, len(variants.ops), [], [], [], [], output_diffs, s.runs,
                          other_name, notes)
    return _divergence_at(variants, s, found, notes, output_diffs, run_other, tol,
                          other_name, strategy, depth)


def _divergence_at(variants: ModuleVariants, s: _Search, found: int, notes: list[str],
                   output_diffs: list[Any], run_other: Runner, tol: dict[str, Any],
                   other_name: str, strategy: str, depth: int) -> Divergence:
    op = variants.ops[found]
    inputs: list[tuple[str, Any]] = []
    for src in op.reads:
        if src[0] == "arg":
            inputs.append((f"%arg{src[1]}", s.args[src[1]]))
        else:
            j, r = src[1], src[2]
            cand = variants.ops[j]
            if r in cand.result_numbers:
                value = s.ref_values[j][cand.result_numbers.index(r)]
                inputs.append((f"result #{r} of op #{j} ({cand.name})", value))
    if strategy == "linear" and inputs:
        notes.append("linear search: the earliest divergent op in program order")
    s.fetch([found])
    d = Divergence(op, len(variants.ops), inputs, s.ref_values[found],
                   s.other_values[found], s.diffs(found), output_diffs, s.runs,
                   other_name, notes)
    if depth > 0:
        try:
            _descend(d, variants, s, found, run_other, tol, other_name, strategy, depth)
        except _CannotDescend as e:
            d.notes.append(f"not searched inside {op.name}: {e}")
    return d


def _blame(report: Report, variants: ModuleVariants, s: _Search, found: int | None,
           notes: list[str], output_diffs: list[Any], run_other: Runner,
           tol: dict[str, Any], other_name: str, strategy: str, depth: int, module: Any,
           flat_args: list[Any]) -> Divergence:
    """Isolate before blaming: the Divergence for a verdict that is not ok."""
    from . import causes as C
    from .isolate import condition, isolate
    ops = report.ops
    if not ops:
        try:
            ops = isolate(module, flat_args, run_other)
        except Exception as e:  # noqa: BLE001 - then the bisection's op stands
            notes.append(f"the ops could not be isolated: {type(e).__name__}: {e}")
            ops = []
    at = {v.position: v for v in ops if v.function == variants.main_name}
    blamed = [v for v in ops if v.status == "blame"]
    unexplained = C.UNEXPLAINED in report.causes
    if found is not None and ops:
        v = at.get(found)
        if v is not None and v.status != "blame":
            cond = condition(v)
            srcs = [f"op #{src[1]} ({variants.ops[src[1]].name})" for src in
                    variants.ops[found].reads if src[0] == "op" and src[1] in s.other_values
                    and any(not np.array_equal(np.asarray(a), np.asarray(b)) for a, b in
                            zip(s.ref_values[src[1]], s.other_values[src[1]]))]
            if srcs:
                notes.append(
                    f"amplified: {v.name} (op #{found}) is within its own bound when run "
                    f"alone on the reference's inputs" + (f"; {cond}" if cond else "") +
                    f"; its input differences come from {', '.join(srcs)}")
                found = None
            else:
                # Same inputs on both sides, a different result: the op is to
                # blame even though it passes alone (the other backend computes
                # it differently in context, e.g. folding it as a constant).
                notes.append(
                    f"{v.name} (op #{found}) reads the same values on both sides and its "
                    f"result differs; run alone on those values on {other_name} it is within "
                    "its own bound, so the difference comes from how the program around it "
                    "is compiled (constant folding or fusion, for example)")
    if found is not None and (not ops or unexplained):
        d = _divergence_at(variants, s, found, notes, output_diffs, run_other, tol,
                           other_name, strategy, depth)
        d.causes, d.explained = set(report.causes), False
        return d
    if blamed and unexplained:
        v = blamed[0]
        if v.function == variants.main_name and v.position < len(variants.ops) and \
                variants.ops[v.position].name == v.name and \
                variants.returnable(v.position):
            d = _divergence_at(variants, s, v.position, notes, output_diffs, run_other,
                               tol, other_name, strategy, depth)
            d.causes, d.explained = set(report.causes), False
            d.notes.append("isolated: outside its own bound when run alone on the "
                           "reference's inputs")
            return d
        cand = Candidate(v.position, v.name, v.location, v.name, [], [])
        diffs = [compare_arrays(f"result #{k}", r, o) for k, (r, o) in
                 enumerate(zip(v.reference, v.other))]
        d = Divergence(cand, 0, [(f"operand #{k}", x) for k, x in enumerate(v.inputs)],
                       v.reference, v.other, diffs, output_diffs, s.runs + 1, other_name,
                       notes + [ln for ln in v.detail.splitlines() if ln],
                       causes=set(report.causes), function=v.function, isolated=True)
        return d
    d = Divergence(None, len(variants.ops), [], [], [], [], output_diffs, s.runs,
                   other_name, notes + [str(report)], causes=set(report.causes),
                   explained=not unexplained)
    return d


# ---------------------------------------------------------------------------
# Descending into bodies
# ---------------------------------------------------------------------------

class _CannotDescend(Exception):
    pass


_MAX_ITERATIONS = 10000


def _sources_of_main(module: Any) -> tuple[Any, dict[Any, Source]]:
    """{value: ("arg", k) | ("op", i, r)} over the top level of @main."""
    main = entry_func(module)
    where: dict[Any, Source] = {}
    for k, a in enumerate(main.regions[0].blocks[0].arguments):
        where[a] = ("arg", k)
    for i, op in enumerate(list(main.regions[0].blocks[0].operations)[:-1]):
        for r, v in enumerate(op.operation.results):
            where[v] = ("op", i, r)
    return main, where


def _captured(region: Any) -> list[Any]:
    """Values a region uses that are defined outside it, in first-use order."""
    inner: set[Any] = set()
    out: list[Any] = []

    def walk(reg: Any) -> None:
        for block in reg.blocks:
            inner.update(block.arguments)
            for op in block.operations:
                op = op.operation
                for v in op.operands:
                    if v not in inner and v not in out:
                        out.append(v)
                inner.update(op.results)
                for r in op.regions:
                    walk(r)
    # Results are added after their own operands are looked at: an op never
    # uses its own results, and a later use of them is then inner.
    walk(region)
    return [v for v in out if v not in inner]


def _region_module(text: str, op_index: int,
                   region_index: int) -> tuple[str, list[Source], int]:
    """A module whose @main is region ``region_index`` of top-level op
    ``op_index`` of @main: its arguments are the region's block arguments
    followed by the values it captures; it returns what the region yields.
    Returns (module text, [source of each captured value])."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import func
    with MLIR_LOCK, shi.load(text).context as ctx, ir.Location.unknown(ctx):
        module = ir.Module.parse(text)
        main, where = _sources_of_main(module)
        op = list(main.regions[0].blocks[0].operations)[op_index].operation
        region = op.regions[region_index]
        if len(region.blocks) != 1:
            raise _CannotDescend("a region with several blocks")
        block = region.blocks[0]
        captured = _captured(region)
        sources: list[Source] = []
        for v in captured:
            src = where.get(v)
            if src is None:
                raise _CannotDescend("the body captures a value that is not a top-level one")
            sources.append(src)
        n_args = len(block.arguments)
        term = list(block.operations)[-1].operation
        out_types = [v.type for v in term.operands]
        in_types = [a.type for a in block.arguments] + [v.type for v in captured]
        with ir.InsertionPoint(module.body):
            f = func.FuncOp("__region_main", ir.FunctionType.get(in_types, out_types))
        block.append_to(f.regions[0])
        for v in captured:
            arg = block.add_argument(v.type, ir.Location.unknown())
            v.replace_all_uses_with(arg)
        with ir.InsertionPoint(term), term.location:
            func.ReturnOp(list(term.operands))
        term.erase()
        main.erase()
        f.operation.attributes["sym_name"] = ir.StringAttr.get("main")
        if not module.operation.verify():
            raise _CannotDescend("the extracted body does not verify")
        return str(module.operation.get_asm(enable_debug_info=True)), sources, n_args


def _callee_module(text: str, callee: str) -> str:
    """The module with @callee as its public @main (the old @main dropped)."""
    from jaxlib.mlir import ir
    with MLIR_LOCK, shi.load(text).context as ctx, ir.Location.unknown(ctx):
        module = ir.Module.parse(text)
        main = entry_func(module)
        target = find_func(module, callee)
        if target is None:
            raise _CannotDescend(f"no function @{callee}")
        if target == main:
            raise _CannotDescend("the callee is @main")
        # A callee called elsewhere too stays callable under its own name.
        clone = target.clone(ip=ir.InsertionPoint(module.body))
        main.erase()
        clone.attributes["sym_name"] = ir.StringAttr.get("main")
        clone.attributes["sym_visibility"] = ir.StringAttr.get("public")
        if not module.operation.verify():
            raise _CannotDescend("the callee as @main does not verify")
        return str(module.operation.get_asm(enable_debug_info=True))


def _top_op(text: str, index: int) -> tuple[str, dict[str, str], int, int]:
    from jaxlib.mlir import ir
    with MLIR_LOCK, shi.load(text).context:
        module = ir.Module.parse(text)
        main = entry_func(module)
        op = list(main.regions[0].blocks[0].operations)[index].operation
        attrs: dict[str, str] = {}
        for name in ("callee", "decomposition"):
            if name in op.attributes:
                attrs[name] = str(ir.FlatSymbolRefAttr(op.attributes[name]).value)
        return str(op.name), attrs, len(op.regions), len(op.operands)


def _value(s: "_Search", src: Source) -> Any:
    if src[0] == "arg":
        return s.args[src[1]]
    j, r = src[1], src[2]
    cand = s.v.ops[j]
    if r not in cand.result_numbers:
        raise _CannotDescend("a value the body reads is not a static tensor")
    return s.ref_values[j][cand.result_numbers.index(r)]


def _operand_values(s: _Search, op_index: int, n: int) -> list[Any]:
    """Reference values of the first ``n`` operands of top-level op ``op_index``."""
    from jaxlib.mlir import ir
    text = s.v.text
    with MLIR_LOCK, shi.load(text).context:
        module = ir.Module.parse(text)
        main, where = _sources_of_main(module)
        op = list(main.regions[0].blocks[0].operations)[op_index].operation
        srcs = [where.get(v) for v in list(op.operands)[:n]]
    if any(x is None for x in srcs):
        raise _CannotDescend("an operand is not a top-level value")
    return [_value(s, x) for x in srcs if x is not None]


def _descend(d: Divergence, variants: ModuleVariants, s: _Search, found: int,
             run_other: Runner, tol: dict[str, Any], other_name: str, strategy: str,
             depth: int) -> None:
    name, attrs, n_regions, n_operands = _top_op(variants.text, found)
    sub: dict[str, Any] = dict(against=run_other, strategy=strategy, depth=depth - 1, **tol)

    def recurse(text: str, args: list[Any], where: str) -> None:
        inner = first_divergence(text, *args, **sub)
        if inner is None:
            d.notes.append(f"{where} agrees when run alone from the reference's inputs")
            return
        d.inner, d.inner_where = inner, where
        d.runs += inner.runs

    if name == "func.call" or (name == "stablehlo.composite" and "decomposition" in attrs):
        callee = attrs.get("callee") or attrs.get("decomposition") or ""
        args = _operand_values(s, found, n_operands)
        recurse(_callee_module(variants.text, callee), args, f"the callee @{callee}")
    elif name in ("stablehlo.case", "stablehlo.if"):
        pred = np.asarray(_operand_values(s, found, 1)[0])
        if name == "stablehlo.if":
            branch = 0 if bool(pred) else 1
        else:
            branch = int(pred)
            if branch < 0 or branch >= n_regions:
                branch = n_regions - 1  # the spec: out of range runs the last branch
        text, sources, _ = _region_module(variants.text, found, branch)
        recurse(text, [_value(s, x) for x in sources], f"branch {branch}")
    elif name == "stablehlo.while":
        cond_text, cond_src, _ = _region_module(variants.text, found, 0)
        body_text, body_src, _ = _region_module(variants.text, found, 1)
        cond_cap = [_value(s, x) for x in cond_src]
        body_cap = [_value(s, x) for x in body_src]
        state = _operand_values(s, found, n_operands)
        for i in range(_MAX_ITERATIONS):
            go = bool(np.asarray(reference_runner(cond_text, state + cond_cap)[0]))
            go_other = bool(np.asarray(run_other(cond_text, state + cond_cap)[0]))
            s.runs += 1
            if go != go_other:
                recurse(cond_text, state + cond_cap,
                        f"the loop condition at iteration {i}")
                if d.inner is None:
                    d.notes.append(f"the loop condition decides differently at iteration {i}")
                return
            if not go:
                d.notes.append(f"every one of the {i} iterations of the body agrees when run "
                               "alone from the reference's state")
                return
            ref_next = [np.asarray(v) for v in reference_runner(body_text, state + body_cap)]
            other_next = [np.asarray(v) for v in run_other(body_text, state + body_cap)]
            s.runs += 1
            diffs = [compare_arrays(f"#{k}", r, o, **tol)
                     for k, (r, o) in enumerate(zip(ref_next, other_next))]
            if not all(x.ok for x in diffs):
                recurse(body_text, state + body_cap, f"iteration {i} of the loop body")
                return
            state = ref_next
        d.notes.append(f"stopped after {_MAX_ITERATIONS} iterations")
    elif n_regions:
        raise _CannotDescend(f"descending into {name} is not supported")
