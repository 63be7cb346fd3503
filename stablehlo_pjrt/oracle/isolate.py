"""Isolate before blaming: every op re-run alone on the other backend.

The reference runs the module once, recording each op's exact inputs and
results (ops inside called functions too; ops inside loop and branch bodies
are part of their loop or branch). One *cut module* then holds a copy of
every recorded op whose operands are parameters: the other backend runs it
once on the reference's inputs, so each op is judged on its own, against
its own bound:

* ops that move or select values, and integer results: equal;
* basic arithmetic (add, multiply, divide, sqrt, convert, ...): the
  correctly rounded result, bit for bit (the reference's); a divide within
  causes.APPROXIMATE_DIVISION_ULPS of the exact quotient is
  ``approximate-division``;
* sums (dot_general, convolution, add-reductions): within the
  summation-order bound (see :func:`sum_allowed`); a DEFAULT/HIGH
  dot/convolution may instead match its operands rounded to TF32, bf16 or
  bf16x3 (``reduced-precision-inputs``);
* transcendental functions: within bounds.TRANSCENDENTAL_ULPS, else the
  ``transcendental-accuracy`` test of causes.py;
* FFTs (registry trait ``fourier``): within bounds.fft_allowed of the
  exact transform;
* anything else (ops with bodies, custom calls, sorts): the per-dtype
  tolerance of stablehlo_interpreter.compare.

An op outside its own bound with no cause is to blame; a result that
differs in the whole program while every op is within its own bound is
amplified rounding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

import stablehlo_interpreter as shi
from stablehlo_interpreter import MLIR_LOCK, compare_arrays, with_trait

from . import causes as C
from .bounds import SPREAD_FACTOR, TRANSCENDENTAL_ULPS, order_spread, unit_roundoff

Runner = Callable[[str, Sequence[np.ndarray]], Sequence[np.ndarray]]

# The error model of each op is a registry trait (stablehlo_interpreter's
# registry.TRAITS): no rounding, one rounding, a sum in any order; ops with
# bodies (and chlo.top_k) are judged as one unit.
EXACT_OPS = with_trait("no_rounding")
ARITHMETIC_OPS = with_trait("one_rounding")
SUM_OPS = with_trait("summing")
_UNITS = with_trait("judged_whole")
FOURIER_OPS = with_trait("fourier")


@dataclass
class OpVerdict:
    """One op judged alone."""

    index: int                  # position among the isolated ops (program order)
    name: str
    location: str
    function: str               # the function the op is in ("main", a callee)
    inputs: list
    reference: list
    other: list
    position: int = -1          # index of the op in its function's body
    status: str = "ok"          # "ok" | "explained" | "blame" | "not isolated"
    causes: set = field(default_factory=set)
    detail: str = ""

    @property
    def source(self) -> str | None:
        from .runners import source_line
        return source_line(self.location)

    def label(self) -> str:
        where = f" in @{self.function}" if self.function not in ("main", "") else ""
        return f"{self.name}{where} at {self.source or self.location}"


_TAG = "oracle.op"


class _Recorder:
    """Records isolatable ops: those not inside a loop/branch/reduction body."""

    def __init__(self):
        self.events = []
        self._stack = []   # (op, inputs, isolatable) of running ops

    def before(self, op, inputs, depth):
        # Isolatable: every enclosing op is a traced func.call (a loop the
        # interpreter runs as generated code is not traced: its body ops
        # arrive deeper than the stack).
        ok = len(self._stack) == depth and all(o.name == "func.call" and good
                                               for o, _, good in self._stack)
        self._stack.append((op, list(inputs), ok))

    def after(self, op, results, depth):
        op, inputs, ok = self._stack.pop()
        if ok and _TAG in op.attrs:
            self.events.append((int(op.attrs[_TAG]), inputs, list(results)))


def _static(t) -> bool:
    from jaxlib.mlir import ir
    t = t.maybe_downcast() if hasattr(t, "maybe_downcast") else t
    return isinstance(t, ir.RankedTensorType) and t.has_static_shape


@dataclass
class Recording:
    """A module whose ops carry their number (attribute ``oracle.op``), the
    MLIR ops by number, and the isolatable ops of one reference run:
    ``events`` = [(op number, op name, location, function, inputs, results,
    position in the function's body)]."""

    module: object          # the MLIR module (read under MLIR_LOCK)
    context: object
    ops: list
    events: list
    skipped: list = field(default_factory=list)   # names of ops not isolated


def record(text, args: Sequence[np.ndarray], name: str = "<isolate>") -> Recording:
    """Runs the module once on the reference, recording every isolatable op."""
    from jaxlib.mlir import ir
    loaded = shi.load(text, name=name)
    with MLIR_LOCK, loaded.context:
        module = ir.Module.parse(loaded.mlir.operation.get_asm(enable_debug_info=True))
        ops, info = [], []
        for f in module.body.operations:
            f = f.operation
            if f.name != "func.func" or not f.regions[0].blocks:
                continue
            fname = ir.StringAttr(f.attributes["sym_name"]).value
            for position, o in enumerate(f.regions[0].blocks[0].operations):
                o = o.operation
                if o.name in ("func.return", "func.call", "stablehlo.constant") \
                        or not o.results:
                    continue
                if not all(_static(v.type) for v in list(o.operands) + list(o.results)):
                    continue
                o.attributes[_TAG] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                        len(ops))
                ops.append(o)
                name = o.name
                if name == "stablehlo.composite" and "name" in o.attributes:
                    # Judged as the op it stands for (chlo.lgamma, say).
                    name = ir.StringAttr(o.attributes["name"]).value
                info.append((name, shi.format_location(o.location), fname,
                             len(o.operands), position))
        # The generic form keeps every attribute (a composite's own printer
        # drops the tag).
        tagged = module.operation.get_asm(enable_debug_info=True, print_generic_op_form=True)
    program = shi.compile(tagged, name=name)
    rec = _Recorder()
    program.run(*[np.asarray(a) for a in args], tracer=rec)
    events = []
    for k, inputs, results in rec.events:
        op_name, loc, fname, n, position = info[k]
        if len(inputs) != n:   # a body that captures values: not isolatable
            continue
        events.append((k, op_name, loc, fname, inputs, results, position))
    seen = {e[0] for e in events}
    # Functions that ran: @main and those with a recorded op (a composite's
    # decomposition that a direct kernel replaced never runs).
    ran = {"main"} | {e[3] for e in events}
    skipped = [info[k][0] for k in range(len(ops)) if k not in seen and info[k][2] in ran]
    return Recording(module, loaded.context, ops, events, skipped)


def cut_module(rec: Recording, which: Sequence[int]) -> str:
    """A module whose @main runs a copy of each recorded op ``rec.events[i]``
    (i in ``which``) on its own parameters and returns all their results."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import func
    with MLIR_LOCK, rec.context, ir.Location.unknown():
        module = ir.Module.create()
        in_types, out_types = [], []
        for i in which:
            raw = rec.ops[rec.events[i][0]]
            in_types += [v.type for v in raw.operands]
            out_types += [v.type for v in raw.results]
        with ir.InsertionPoint(module.body):
            f = func.FuncOp("main", ir.FunctionType.get(in_types, out_types))
        block = f.add_entry_block()
        args = list(block.arguments)
        results = []
        with ir.InsertionPoint(block):
            pos = 0
            for i in which:
                raw = rec.ops[rec.events[i][0]]
                new = raw.clone()
                del new.attributes[_TAG]
                for k in range(len(raw.operands)):
                    new.operands[k] = args[pos + k]
                pos += len(raw.operands)
                results += list(new.results)
            func.ReturnOp(results)
        # Functions the ops call (a composite's decomposition, say) come along.
        for op in rec.module.body.operations:
            op = op.operation
            if op.name == "func.func" and \
                    ir.StringAttr(op.attributes["sym_name"]).value != "main":
                copy = op.clone(ip=ir.InsertionPoint(module.body))
                for inner in copy.regions[0].blocks[0].operations if copy.regions[0].blocks \
                        else []:
                    if _TAG in inner.operation.attributes:
                        del inner.operation.attributes[_TAG]
        return module.operation.get_asm(enable_debug_info=True)


def _split(rec: Recording, which, outs):
    vals, pos = {}, 0
    for i in which:
        n = len(rec.events[i][5])
        vals[i] = [np.asarray(v) for v in outs[pos:pos + n]]
        pos += n
    return vals


def _is_plain_sum(raw) -> bool:
    name = raw.name
    if name in ("stablehlo.reduce", "stablehlo.reduce_window"):
        if len(raw.results) != 1:
            return False
        inner = [o.operation.name for o in raw.regions[0].blocks[0].operations]
        return inner == ["stablehlo.add", "stablehlo.return"]
    return name in ("stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution")


def _precision_allows_rounding(raw) -> bool:
    """A dot/convolution whose precision config is DEFAULT or HIGH (or absent)."""
    if "precision_config" not in raw.attributes:
        return True
    text = str(raw.attributes["precision_config"])
    return "HIGHEST" not in text


def sum_allowed(ref: np.ndarray, terms: np.ndarray, n: np.ndarray,
                spread: np.ndarray | None = None) -> np.ndarray:
    """|other - reference| a correct sum may show: SPREAD_FACTOR times the
    legitimate orders' spread (measured, or the random-walk estimate
    u*sqrt(n/3)*sum|terms| of a sequential sum), never more than the
    worst case 2*gamma_n*sum|terms|, plus a rounding of each result."""
    u = unit_roundoff(ref.dtype)
    s = np.asarray(terms, np.float64)
    n = np.asarray(n, np.float64)
    nu = np.minimum(n * u, 0.49)
    worst = 2 * nu / (1 - nu) * s
    walk = u * np.sqrt(n / 3) * s if spread is None else spread
    return np.minimum(SPREAD_FACTOR * walk, worst) + 2 * u * np.abs(ref.astype(np.float64))


def isolate(text: Any, args: Sequence[np.ndarray], run_other: Runner,
            recorded: Recording | None = None) -> list[OpVerdict]:
    """Every isolatable op of the module judged alone (see the module
    docstring), in program order. An op that ran but could not be isolated
    (a loop the interpreter does not trace op by op, a body that captures
    values) is listed with status "not isolated"."""
    rec = recorded or record(text, args)
    which = list(range(len(rec.events)))
    if not which:
        return [OpVerdict(-1, name, "", "", [], [], [], status="not isolated")
                for name in rec.skipped]
    flat_in = [np.asarray(x) for i in which for x in rec.events[i][4]]
    other_vals = _split(rec, which, run_other(cut_module(rec, which), flat_in))
    verdicts = []
    with MLIR_LOCK, rec.context:
        raws = [rec.ops[rec.events[i][0]] for i in which]
        sums = [i for i in which if _is_plain_sum(raws[i])
                and unit_roundoff(np.asarray(rec.events[i][5][0]).dtype) > 0]
        allows = {i: _precision_allows_rounding(raws[i]) for i in sums}
        dims = {i: _reduce_dims(raws[i]) for i in sums}
        fourier = {i: _fft_attrs(raws[i]) for i in which if raws[i].name in FOURIER_OPS}
    sum_info = _sum_terms(rec, sums) if sums else {}
    for i in which:
        _, name, loc, fn, inputs, ref, position = rec.events[i]
        v = OpVerdict(i, name, loc, fn, inputs, ref, other_vals[i], position=position)
        if i in fourier:
            _judge_fft(v, *fourier[i])
        else:
            _judge(v, sum_info.get(i), rec, allows.get(i, False), dims.get(i))
        verdicts.append(v)
    for name in rec.skipped:
        verdicts.append(OpVerdict(-1, name, "", "", [], [], [], status="not isolated"))
    return verdicts


def _sum_terms(rec: Recording, sums):
    """{event: (sum|terms|, n)} from the reference, on |operands| and on ones."""
    text = cut_module(rec, sums)
    flt = [unit_roundoff(np.asarray(x).dtype) > 0 for i in sums for x in rec.events[i][4]]
    ins = [np.asarray(x) for i in sums for x in rec.events[i][4]]
    abs_in = [np.abs(x) if f else x for x, f in zip(ins, flt)]
    ones = [np.ones_like(x) if f else x for x, f in zip(ins, flt)]
    p = shi.compile(text, name="<sum bound>")
    t = _split(rec, sums, p.run(*abs_in))
    n = _split(rec, sums, p.run(*ones))
    return {i: (t[i][0], n[i][0]) for i in sums}


def _sum_program(rec: Recording, i):
    return shi.compile(cut_module(rec, [i]), name="<sum hypothesis>")


def _reduce_dims(raw):
    from jaxlib.mlir import ir
    if raw.name != "stablehlo.reduce":
        return None
    try:
        return list(ir.DenseI64ArrayAttr(raw.attributes["dimensions"]))
    except Exception:  # noqa: BLE001 - then the random-walk estimate stands
        return None


def _op_allowed(v: OpVerdict, r, r64, spacing, sum_info, dims):
    """The op's own bound per element, or None when it has none (then the
    per-dtype tolerance judges)."""
    if v.name in EXACT_OPS or v.name in ARITHMETIC_OPS:
        # Exact ops, and IEEE operations: one correctly rounded result, the
        # reference's.
        return np.zeros_like(r64)
    if v.name in C.TRANSCENDENTAL_OPS:
        return TRANSCENDENTAL_ULPS * spacing
    if sum_info is not None:
        spread = None
        if v.name == "stablehlo.reduce" and len(v.inputs) == 2:
            spread = _reduce_spread(dims, v.inputs[0], r)
        return sum_allowed(r, sum_info[0], sum_info[1], spread)
    return None


def _explain(v: OpVerdict, rec, r, o, bad, sum_info, allows_rounding):
    """(cause, text) when a named cause accounts for the elements outside the
    op's bound, else None (a rejected cause's reason goes to v.detail)."""
    if C.ftz_explains(r, o, bad):
        return ("flush-to-zero", "subnormal results taken as zero")
    if v.name == "stablehlo.divide" and len(v.inputs) == 2:
        ok, text = C.division_verdict(v.inputs[0], v.inputs[1], r, o, bad)
        if ok:
            return ("approximate-division", text)
        v.detail += text + "\n"
        return None
    if v.name in C.TRANSCENDENTAL_OPS and len(v.inputs) == 1:
        ok, text = C.transcendental_verdict(v.name, v.inputs[0], r, o, bad)
        if ok:
            return ("transcendental-accuracy", text)
        v.detail += text + "\n"
        return None
    if sum_info is not None and allows_rounding and v.name in (
            "stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution"):
        return _reduced_precision(v, rec, r, o, sum_info)
    return None


def _judge(v: OpVerdict, sum_info, rec, allows_rounding, dims):
    problems, found = [], set()
    for k, (r, o) in enumerate(zip(v.reference, v.other)):
        r, o = np.asarray(r), np.asarray(o)
        if r.shape != o.shape or r.dtype != o.dtype:
            problems.append(f"result #{k}: {o.dtype}{list(o.shape)} vs {r.dtype}{list(r.shape)}")
            continue
        if r.tobytes() == o.tobytes():
            continue
        bits = C.bit_causes(r, o)
        if bits is not None:
            found |= bits
            continue
        u = unit_roundoff(r.dtype)
        if u == 0 or r.dtype.kind == "c":
            d = compare_arrays(f"result #{k}", r, o)
            if not d.ok or r.dtype.kind != "c":
                problems.append(str(d))
            continue
        r64, o64 = r.astype(np.float64), o.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(o64 - r64)
        nonfinite_ok = (np.isnan(r64) == np.isnan(o64)) & \
            ((np.isfinite(r64) & np.isfinite(o64)) | (r64 == o64) | np.isnan(r64))
        spacing = np.abs(np.spacing(np.abs(r)).astype(np.float64)) if r.dtype.kind == "f" \
            else np.maximum(np.abs(r64) * 2 * u, 0)
        allowed = _op_allowed(v, r, r64, spacing, sum_info, dims)
        if allowed is None:
            d = compare_arrays(f"result #{k}", r, o)
            if not d.ok:
                problems.append(str(d) + " (no bound of its own: the per-dtype tolerance)")
            continue
        with np.errstate(invalid="ignore"):
            bad = ~(nonfinite_ok & (np.where(np.isfinite(diff), diff, 0) <= allowed))
        if not bad.any():
            if v.name in SUM_OPS:
                found.add("summation-order")
            continue
        explained = _explain(v, rec, r, o, bad, sum_info, allows_rounding)
        if explained is not None:
            found.add(explained[0])
            v.detail += explained[1] + "\n"
            continue
        worst = int(np.argmax(np.where(bad, diff, -1)))
        idx = tuple(int(x) for x in np.unravel_index(worst, r.shape)) if r.shape else ()
        problems.append(
            f"result #{k}: {int(bad.sum())} of {r.size} element(s) outside the op's own "
            f"bound; worst at {list(idx)}: reference {r64.reshape(-1)[worst]!r}, other "
            f"{o64.reshape(-1)[worst]!r}, bound {float(allowed.reshape(-1)[worst]):.3g}")
    if problems:
        v.status, v.causes = "blame", {C.UNEXPLAINED}
        v.detail += "\n".join(problems)
    elif found:
        v.status, v.causes = "explained", found


def _fft_attrs(raw):
    """(fft_type, fft_length) of a stablehlo.fft."""
    from jaxlib.mlir import ir
    kind = str(raw.attributes["fft_type"]).rstrip(">").split()[-1]
    return kind, [int(n) for n in ir.DenseI64ArrayAttr(raw.attributes["fft_length"])]


def _judge_fft(v: OpVerdict, fft_type: str, lengths: list[int]) -> None:
    """An FFT judged alone: each output element within the rounding bound
    of a floating-point FFT (bounds.fft_allowed) of the exact transform."""
    from .bounds import fft_allowed
    r, o = np.asarray(v.reference[0]), np.asarray(v.other[0])
    if r.shape != o.shape or r.dtype != o.dtype:
        v.status, v.causes = "blame", {C.UNEXPLAINED}
        v.detail += f"result #0: {o.dtype}{list(o.shape)} vs {r.dtype}{list(r.shape)}"
        return
    if r.tobytes() == o.tobytes() or C.bit_causes(r, o) is not None:
        return
    exact, allowed = fft_allowed(fft_type, lengths, np.asarray(v.inputs[0]), r.dtype)
    o128 = o.astype(np.complex128 if o.dtype.kind == "c" else np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(o128 - exact)
        bad = ~(err <= allowed)
    what = f"{v.name} {fft_type} of length {lengths}"
    if not bad.any():
        ratio = float(np.max(err / allowed)) if np.all(allowed > 0) else 0.0
        v.status, v.causes = "explained", {"summation-order"}
        v.detail += (f"{what}: within the rounding bound of a floating-point FFT "
                     f"(Higham ch. 24; the largest difference is {ratio:.2g} of it)\n")
        return
    worst = int(np.argmax(np.where(bad, np.nan_to_num(err, nan=np.inf), -1)))
    idx = [int(i) for i in np.unravel_index(worst, r.shape)] if r.shape else []
    v.status, v.causes = "blame", {C.UNEXPLAINED}
    v.detail += (f"result #0: {int(bad.sum())} of {r.size} element(s) of {what} outside the "
                 f"rounding bound of a floating-point FFT; worst at {idx}: reference "
                 f"{r.reshape(-1)[worst].item()!r}, other {o.reshape(-1)[worst].item()!r}, "
                 f"exact {complex(exact.reshape(-1)[worst])!r}, bound "
                 f"{float(np.broadcast_to(allowed, r.shape).reshape(-1)[worst]):.3g}")


def _reduce_spread(dims, x, r):
    """The order spread of an add-reduction over its reduced dimensions."""
    x = np.asarray(x)
    if dims is None or x.dtype.kind != "f" or not dims:
        return None
    keep = [d for d in range(x.ndim) if d not in dims]
    t = np.transpose(x, keep + dims).reshape([x.shape[d] for d in keep] + [-1])
    return order_spread(t, -1, x.dtype).reshape(np.shape(r))


def _reduced_precision(v, rec, r, o, sum_info):
    """A dot/convolution whose other-side result matches the reference's on
    operands rounded to one of causes.REDUCED_FORMATS (TF32 in each of its
    roundings, bf16, bf16x3)."""
    if any(np.asarray(x).dtype != np.float32 for x in v.inputs[:2]):
        return None
    program = _sum_program(rec, v.index)
    for fmt in C.REDUCED_FORMATS:
        parts = C.reduced_operands(fmt, v.inputs[:2])
        alt = None
        for ops in parts:
            y = np.asarray(program.run(*ops, *v.inputs[2:])[0]).astype(np.float64)
            alt = y if alt is None else alt + y
        allowed = sum_allowed(r, sum_info[0], sum_info[1]) * len(parts)
        if np.all(np.abs(o.astype(np.float64) - alt) <= allowed):
            return ("reduced-precision-inputs",
                    f"{v.name}: matches the reference on operands rounded to "
                    f"{C.format_label(fmt)} (the op's precision config allows it)")
    return None


def condition(v: OpVerdict) -> str:
    """The op's condition where it amplifies input differences (for add and
    subtract: cancellation (|a|+|b|)/|a+b|)."""
    if v.name in ("stablehlo.add", "stablehlo.subtract") and len(v.inputs) == 2:
        a, b = (np.asarray(x, np.float64) for x in v.inputs)
        s = a + b if v.name == "stablehlo.add" else a - b
        with np.errstate(divide="ignore", invalid="ignore"):
            k = (np.abs(a) + np.abs(b)) / np.abs(s)
        k = k[np.isfinite(k)]
        if k.size:
            return f"cancellation (|a|+|b|)/|a{'+' if v.name.endswith('add') else '-'}b| " \
                   f"up to {float(k.max()):.3g}"
    return ""
