"""Compile a parsed module into a plan of Python callables, once.

Each function body and each region becomes a :class:`Block`: a flat list of
:class:`Step` ``(fn, ins, out, dead, op)`` over a frame (a Python list). Attributes are decoded into numpy/Python values here, so running
a plan never touches an MLIR object.

Slot 0 of every frame holds the execution context; special kernels (ops with
regions, ops that need the context) take it as their first input. Values a
region uses from an enclosing scope become the region's captures: the op that
owns the region passes them in, so every block runs in a frame of its own.
"""

from __future__ import annotations

import builtins as _builtins
import re
import threading
from itertools import chain as _chain
from itertools import repeat as _repeat
from sys import getrecursionlimit as _getrecursionlimit
from sys import getrefcount as _getrefcount
from sys import setrecursionlimit as _setrecursionlimit
from typing import Any, NamedTuple

import numpy as np

from . import attrs as _attrs
from . import config as _config
from . import fold as _fold
from . import fusion as _fusion
from . import heap as _heap
from . import index_chains as _index_chains
from . import numerics as _numerics
from . import quant as _quant
from . import table_gathers as _table_gathers
from . import trace as _trace
from .arguments import coerce as _coerce
from .errors import ArgumentError, CompileError, ExecutionError, InterpreterError, UnsupportedOpsError
from .loader import MLIR_LOCK, NEWER_OP_PREFIX, Module, load
from .mlir_compat import attribute_names
from .registry import (
    CUSTOM_CALLS,
    KERNELS,
    SPECIAL,
    Unsupported,
    annotate,
    custom_call_rejection,
    kernel_info,
    one_or_many,
)
from .types import TensorType, conforms, describe, from_mlir

_ndarray = np.ndarray
_PLAN_LOCK = threading.Lock()   # Block._fast_steps
_LINE_LOCK = threading.Lock()   # straight_line (which takes _PLAN_LOCK inside)

# Calls, regions and loops nest as Python calls (about three frames per
# func.call level). Python 3.11 runs Python-to-Python calls without growing
# the C stack, so a high limit is safe; it lets call chains of 10,000
# functions run (JAX emits a few dozen levels) and still turns runaway
# recursion into ExecutionError("recursion too deep") instead of a crash.
RECURSION_LIMIT = 40_000
# Module constants, read on the hot path (tests set them).
_DEBUG_VALIDATE = _config.VALIDATE.value()
# STABLEHLO_REF_NO_FOLD=1 keeps every op in the plan (fold.py), for debugging.
_FOLD_ENABLED = not _config.NO_FOLD.value()


# Every run ignores floating-point errors (inf/nan are values here, as in
# XLA): np.errstate(all="ignore") per run, done through the context variable
# numpy's errstate sets (numpy >= 2: numpy._core._ufunc_config), with the
# error state built once. np.errstate builds it on every entry, a tenth of
# the cost of running a one-op program. Only the error mode is frozen ("call"
# does not apply to "ignore"); numpy without that variable gets np.errstate.
try:
    from numpy._core._ufunc_config import _extobj_contextvar as _ERRSTATE
    from numpy._core._ufunc_config import _make_extobj
    _IGNORE_ERRORS = _make_extobj(all="ignore")
except Exception:  # noqa: BLE001 - any other numpy: the public context manager
    _ERRSTATE = _IGNORE_ERRORS = None


def _run_ignoring_fp_errors(fn, *args):
    if _ERRSTATE is None:
        with np.errstate(all="ignore"):
            return fn(*args)
    token = _ERRSTATE.set(_IGNORE_ERRORS)
    try:
        return fn(*args)
    finally:
        _ERRSTATE.reset(token)


_trace_env_set = _config.TRACE_OPS.is_set   # checked once per run


# Frames of a location's call stack that are not the user's code: JAX's own
# tracing machinery, the test runner, installed packages.
_INTERNAL_FRAME = re.compile(r"/(?:jax|jaxlib|_pytest|pytest|pluggy|site-packages|"
                             r"dist-packages|importlib)/|^<frozen |^<string>$")
_FRAME = re.compile(r'(?:"((?:[^"\\]|\\.)*)"\()?"((?:[^"\\]|\\.)*)":(\d+):(\d+)')


def format_location(loc: Any, source: str | None = None) -> str:
    """Compact text of an MLIR location.

    A plain `file:line:col` stays as it is (``source`` replaces the name
    "-" MLIR gives text parsed from a string). A JAX call stack
    (``callsite(...)`` chain of named frames) becomes the user's own frame:
    ``file:line:col (in function) [op name]``, the first frame outside JAX,
    pytest/pluggy and installed packages. ``STABLEHLO_REF_FULL_LOCATIONS=1``
    keeps the whole chain.
    """
    s = loc if isinstance(loc, str) else str(loc)
    if s.startswith("loc(") and s.endswith(")"):
        s = s[4:-1]
    if source and '"-":' in s:
        s = s.replace('"-":', f'"{source}":')
    if _config.FULL_LOCATIONS.value():
        return s
    if "callsite(" not in s and "fused" not in s:
        m = re.fullmatch(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)', s)
        return f"{m.group(1)}:{m.group(2)}:{m.group(3)}" if m else s
    frames = _FRAME.findall(s)
    if not frames:
        return s
    outer = re.match(r'"((?:[^"\\]|\\.)*)"\((?:callsite|fused|")', s)
    op_name = outer.group(1) if outer and outer.group(1) != frames[0][0] else None
    user = [f for f in frames if not _INTERNAL_FRAME.search(f[1])]
    fn, path, line, col = (user or frames)[0]
    text = f"{path}:{line}:{col}"
    if fn:
        text += f" (in {fn})"
    if op_name:
        text += f" [{op_name}]"
    return text


class Op:
    """Everything a builder may know about one op occurrence (compile time)."""

    __slots__ = ("name", "location", "attrs", "operand_types", "result_types",
                 "regions", "module", "raw", "num_results")

    def __init__(self, name, location, attrs, operand_types, result_types, regions,
                 module, raw):
        self.name = name
        self.location = location
        self.attrs = attrs
        self.operand_types = operand_types
        self.result_types = result_types
        self.regions = regions
        self.module = module
        self.raw = raw
        self.num_results = len(result_types)

    def where(self):
        return f"{self.name} at {self.location}"

    def __repr__(self):
        return f"<Op {self.where()}>"


class Folded(NamedTuple):
    """An op whose operands were all constants, evaluated at compile time
    (fold.py): its results are in the frame template, it is not a step. A
    traced run still shows it, with its values, before step ``position``."""
    position: int
    ins: tuple
    outs: tuple
    op: "Op"


class Step(NamedTuple):
    """One op of a block: ``fn`` (the kernel) reads the frame slots ``ins``
    and writes ``out`` (a slot, or a tuple of slots for several results);
    the slots in ``dead`` are freed after it."""
    fn: object
    ins: tuple
    out: object
    dead: tuple
    op: Op


# Step kinds of Block.run's plain loop (FastStep.kind). Plain ints, so that
# the loop's comparisons stay on the interpreter's int fast path.
CALL_N = 0          # env[out] = fn(*env[a])                  (a: tuple of slots)
CALL_1 = 1          # env[out] = fn(env[a])
CALL_2 = 2          # env[out] = fn(env[a], env[b])
CALL_3 = 3          # env[out] = fn(env[a], env[b], env[c])
MULTI_RESULT = 4    # env[out...] = fn(*env[a])               (out: tuple of slots)
DONATE_FIRST = 5    # env[out] = c(x, *env[b]) in place when x = env[a] is unshared and
                    # dies here, else fn(x, *env[b])       (c: the kernel's donate_first)
CALL_FUNCTION = 6   # func.call of function a on env[b], handing over the dying slots c


class FastStep(NamedTuple):
    """A :class:`Step` prepared for the plain loop (see the kinds above)."""
    kind: int
    fn: object
    a: object
    b: object
    c: object
    out: object
    dead: tuple


class Context:
    """Per-execution state handed to special kernels.

    ``process`` is ``(replica_id, partition_id)``; ``grid`` is the process
    grid of a parallel run (None for a single process); ``tracer`` receives
    op events when tracing is on.
    """

    __slots__ = ("program", "tracer", "process", "grid", "depth", "state")

    def __init__(self, program, tracer=None, process=(0, 0), grid=None):
        self.program = program
        self.tracer = tracer
        self.process = process
        self.grid = grid
        self.depth = 0
        self.state = {}


def _bare_ufunc(step):
    """The numpy ufunc that an elementwise step's kernel wraps
    (``ops.elementwise.as_result(ufunc, dtype)``) where calling it directly
    gives the kernel's result, else None: every operand and the result of
    one static shape of rank >= 1 (a ufunc then returns an ndarray, never a
    numpy scalar), the ufunc's loop for the operand types giving the result
    type (fusion.py's probe), and a kernel with no KernelInfo (nothing else
    to know of it). The plain loop then calls the ufunc: as_result's
    checks cost as much as adding two arrays of 64 floats."""
    op = step.op
    if op is None or getattr(step.fn, "kernel_info", None) is not None \
            or not isinstance(getattr(step.fn, "__wrapped__", None), np.ufunc) \
            or len(op.result_types) != 1:
        return None
    shape = op.result_types[0].shape
    if not shape or any(d is None for d in shape) \
            or any(t.shape != shape for t in op.operand_types):
        return None
    return _fusion._direct_ufunc(step)


class Block:
    """A compiled function body or region."""

    __slots__ = ("name", "steps", "template", "arg_slots", "capture_values",
                 "capture_slots", "result_slots", "arg_types", "result_types",
                 "nslots", "location", "_fast", "folded", "_planned", "_line", "_runs")

    def __init__(self, name):
        self.name = name
        self.steps = []
        self.template = None
        self.arg_slots = ()
        self.capture_values = []
        self.capture_slots = []
        self.result_slots = ()
        self.arg_types = []
        self.result_types = []
        self.location = ""
        self._fast = None
        self.folded = ()  # Folded ops, in program order (for traced runs)
        self._planned = ()  # the steps self._fast was made from (fusion.py's)
        # The block's straight-line code (straight_line): None until made,
        # False where it has none; made at the second plain run (_runs).
        self._line = None
        self._runs = 0

    def _fast_steps(self):
        """The steps as :class:`FastStep` for the plain loop: no list built
        for 1-3 operands, in-place donation and call hand-over decided once.
        Made once, by one thread (others wait): the template it may extend
        is set before ``_fast``, so a run that sees ``_fast`` sees its frame."""
        with _PLAN_LOCK:
            if self._fast is None:
                self._make_fast_steps()
            return self._fast

    def _make_fast_steps(self):
        fast = []
        # Elementwise chains run as fused steps here only (fusion.py), small
        # called functions inlined into them (their slots extend the
        # template): the observed loop keeps self.steps, every op visible
        # to tracers. The index chains JAX wraps around gathers become one
        # range-tested step each (index_chains.py), observed runs excepted too.
        steps = self.steps
        if _fusion.enabled():
            steps, self.template = _fusion.inline_calls(steps, self.template)
            steps = _fusion.share_reduces(steps, self.template)
            steps = _fusion.share_values(steps, self.template, self.result_slots)
        steps = _index_chains.rewrite(steps, self.template, self.result_slots)
        # Elementwise ops on what a gather read from a small table run on
        # the table (table_gathers.py; new slots extend the template).
        steps = _table_gathers.rewrite(steps, self.template, self.result_slots)
        planned = _fusion.fuse(steps, self.result_slots, self.template)
        self._planned = planned
        for step in planned:
            fn, ins, out, dead, op = step
            n = len(ins)
            dying = ()
            if op is not None and op.name == "func.call" and ins and ins[0] == 0 \
                    and not _quant.involves_quant(op):
                operands = tuple(ins[1:])
                dying = tuple(s for s in operands if s in dead and s != 0
                              and operands.count(s) == 1 and self.template[s] is None)
            if dying:
                # A call whose arguments die here hands them over: the callee
                # may then update them in place (a scan's dynamic_update_slice
                # sits in a called function).
                fast.append(FastStep(CALL_FUNCTION, fn, op.attrs["callee"], operands, dying,
                                     out, dead))
            elif out.__class__ is not int:
                fast.append(FastStep(MULTI_RESULT, fn, tuple(ins), None, None, tuple(out), dead))
            elif (kernel_info(fn).donate_first is not None and n >= 1
                  and ins[0] in dead and ins[0] not in ins[1:] and ins[0] != 0
                  and self.template[ins[0]] is None):
                # The operand dies here: the kernel may update it in place if
                # at run time nothing else refers to it (see run()).
                fast.append(FastStep(DONATE_FIRST, fn, ins[0], tuple(ins[1:]),
                                     kernel_info(fn).donate_first,
                                     out, dead))
            elif 1 <= n <= 3:
                a, b, c = (tuple(ins) + (None, None))[:3]
                fn = _bare_ufunc(step) or fn
                fast.append(FastStep(n, fn, a, b, c, out, dead))   # CALL_1..CALL_3
            else:
                fast.append(FastStep(CALL_N, fn, tuple(ins), None, None, out, dead))
        # Plain tuples: CPython unpacks exact tuples on a fast path in the loop.
        fast = [tuple(f) for f in fast]
        self._fast = fast
        return fast

    def _failed_step(self, fn, out):
        for step in _chain(self.steps, self._planned):
            if (step.fn is fn or getattr(step.fn, "__wrapped__", None) is fn) \
                    and step.out == out:   # (a _bare_ufunc step runs the ufunc)
                return step
        return None

    def run(self, ctx, captures, args, consume=False):
        """Run the block; returns the list of its results.

        ``consume``: ``args`` is a list the caller gives up (a loop's carried
        values); it is emptied so that values the block owns alone can be
        updated in place.
        """
        line = self._line
        if line is None:
            line = self._line_due(ctx)
        observed = ctx.tracer is not None or _DEBUG_VALIDATE
        if line and not observed:
            return line(ctx, args, captures, consume)
        fast = self._fast
        if fast is None:
            # Made before the frame: it may extend the template (inlined calls).
            fast = self._fast_steps()
        env = self._frame(ctx, captures, args, consume)
        if observed:
            return self._run_observed(ctx, env)
        fn = out = None
        try:
            # The hot loop: no per-step list for 1-3 operands, one branch per
            # step; the failing step is found from `fn`/`out` on error.
            for kind, fn, a, b, c, out, dead in fast:
                if kind == CALL_2:
                    env[out] = fn(env[a], env[b])
                elif kind == CALL_1:
                    env[out] = fn(env[a])
                elif kind == CALL_3:
                    env[out] = fn(env[a], env[b], env[c])
                elif kind == CALL_N:
                    env[out] = fn(*[env[i] for i in a])
                elif kind == MULTI_RESULT:
                    res = fn(*[env[i] for i in a])
                    for o, v in zip(out, res):
                        env[o] = v
                elif kind == CALL_FUNCTION:
                    vals = [env[i] for i in b]
                    for i in c:
                        env[i] = None
                    res = ctx.program.functions[a].block.run(ctx, (), vals, True)
                    if out.__class__ is int:
                        env[out] = res[0]
                    else:
                        for o, v in zip(out, res):
                            env[o] = v
                    vals = res = None
                else:  # DONATE_FIRST
                    # Donation: the operand's slot dies here. If the array
                    # owns its data and only this frame refers to it (two
                    # references: `x` and getrefcount's argument -- no view,
                    # no other slot, no caller), the kernel updates it.
                    x = env[a]
                    env[a] = None
                    if x.__class__ is _ndarray and x.base is None \
                            and x.flags.writeable and _getrefcount(x) == 2:
                        env[out] = c(x, *[env[i] for i in b])
                    else:
                        env[out] = fn(x, *[env[i] for i in b])
                    x = None
                if dead:
                    for d in dead:
                        env[d] = None
        except InterpreterError:
            raise
        except Exception as e:
            raise _failure(e, self._failed_step(fn, out)) from _cause(e)
        results = self.result_slots
        if len(results) == 1:
            return [env[results[0]]]
        return [env[i] for i in results]

    def _line_due(self, ctx):
        """The straight-line code :meth:`run` takes from the block's second
        plain run on (None before; False where the block has none): a
        called function, a case branch, an interpreted loop's body."""
        if ctx.tracer is not None or _DEBUG_VALIDATE:
            return None
        if self._runs:
            return straight_line(self)
        self._runs = 1
        return None

    def _frame(self, ctx, captures, args, consume):
        """The loop's frame: the template with the context, the captures
        and the arguments in their slots (``consume``: ``args`` emptied, so
        that the frame is the only holder of a value the caller gave up)."""
        env = self.template[:]
        env[0] = ctx
        if captures:
            for slot, v in zip(self.capture_slots, captures):
                env[slot] = v
        arg_slots = self.arg_slots
        if len(arg_slots) == 1 and len(args) == 1:
            # (most called functions and loop bodies of one value: the zip
            # costs a fifth of a one-op block's run)
            env[arg_slots[0]] = args[0]
        else:
            for slot, v in zip(arg_slots, args):
                env[slot] = v
        if consume:
            args.clear()
        return env

    def _run_args(self, ctx, args):
        """``run(ctx, (), args)``: the signature of :func:`_straight_line`'s
        functions."""
        return self.run(ctx, (), args)

    def _run_observed(self, ctx, env):
        tracer = ctx.tracer
        if tracer is not None and hasattr(tracer, "enter_block"):
            tracer.enter_block(self.name, ctx.depth)  # marks loop iterations
        step = None
        folded = self.folded
        try:
            for i, step in enumerate(self.steps):
                if folded and folded[0].position <= i:
                    folded = self._show_folded(ctx, env, folded, i)
                fn, ins, out, dead, op = step
                inputs = [env[i] for i in ins]
                if tracer is not None:
                    tracer.before(op, inputs[1:] if op.name in SPECIAL_NAMES_CACHE
                                  else inputs, ctx.depth)
                    ctx.depth += 1
                try:
                    res = fn(*inputs)
                finally:
                    if tracer is not None:
                        ctx.depth -= 1
                results = [res] if out.__class__ is int else list(res)
                if _DEBUG_VALIDATE:
                    _validate(op, results, ctx.state.get("batched", 0))
                if tracer is not None:
                    tracer.after(op, results, ctx.depth)
                if out.__class__ is int:
                    env[out] = res
                else:
                    for o, v in zip(out, results):
                        env[o] = v
                for d in dead:
                    env[d] = None
            if folded:
                self._show_folded(ctx, env, folded, len(self.steps))
        except InterpreterError:
            raise
        except Exception as e:
            raise _failure(e, step) from _cause(e)
        return [env[i] for i in self.result_slots]

    def _show_folded(self, ctx, env, folded, position):
        """Report the folded ops placed before step ``position`` to the
        tracer (and validation) with their constant values, as if they had
        run there; returns the rest of ``folded``."""
        tracer = ctx.tracer
        while folded and folded[0].position <= position:
            f = folded[0]
            folded = folded[1:]
            results = [env[o] for o in f.outs]
            if _DEBUG_VALIDATE:
                _validate(f.op, results, ctx.state.get("batched", 0))
            if tracer is not None:
                tracer.before(f.op, [env[i] for i in f.ins], ctx.depth)
                tracer.after(f.op, results, ctx.depth)
        return folded

    def bind(self, ctx, captures):
        """A callable running this block as a region in ``ctx``."""
        def region(*args):
            return self.run(ctx, captures, args)
        region.block = self
        region.captures = captures
        return region


# Names of special ops, consulted only by the observed loop to hide the
# context argument from tracers.
SPECIAL_NAMES_CACHE = set()


def _validate(op, results, batched=0):
    if len(results) != len(op.result_types):
        raise ExecutionError(
            f"{op.where()}: kernel returned {len(results)} results, op has "
            f"{len(op.result_types)}", op.name, op.location)
    for i, (v, t) in enumerate(zip(results, op.result_types)):
        if batched and isinstance(t, TensorType) and t.shape == () \
                and isinstance(v, np.ndarray) and v.dtype == t.dtype:
            continue  # a batched region call (regions.batched): any shape
        if not conforms(v, t) and not (isinstance(t, TensorType) and t.quant is not None
                                        and isinstance(v, np.ndarray)):
            raise ExecutionError(
                f"{op.where()}: internal error: result #{i} is {describe(v)}, "
                f"expected {t!r}", op.name, op.location)


# Blocks of at most this many steps run as generated straight-line code
# from their second run (see straight_line); longer ones keep Block.run.
STRAIGHT_MAX_STEPS = 64


def straight_line(block: Block) -> Any:
    """The block's straight-line code, made at the first request (by one
    thread, as the plan is): False when it has none (see
    :func:`_straight_line`)."""
    line = block._line
    if line is None:
        with _LINE_LOCK:
            line = block._line
            if line is None:
                line = block._line = _straight_line(block) or False
    return line


def _straight_line(block: Block) -> Any:
    """``block.run(ctx, caps, args, consume)`` as one generated Python
    function ``run(ctx, args, caps=(), consume=False)``: each step a line
    calling its kernel on local variables, constants as globals of the
    function. None when the plan is long (the source grows with it; the
    loop's per-step cost is then a small part).

    Why: for a block of a few small ops (a jitted ``x + 1`` called in a
    loop; expm's called functions and case branches, ~150 ops on 64x64
    matrices) the plain loop's frame list, step tuples and branches cost
    more than the kernels. The generated function does what the loop does,
    in the same order: the captures and arguments become locals (a consumed
    argument list is emptied, as the loop empties it), a dying slot is
    dropped at the same step (its local set to None), an operand dying at
    a donating step is updated in place on the same condition, a called
    function gets the slots dying there handed over, and a failing step is
    reported as the loop reports it (``_i`` holds the step's index)."""
    fast = block._fast_steps()
    if len(fast) > STRAIGHT_MAX_STEPS:
        return None
    template = block.template
    ns: dict[str, Any] = {"_ndarray": _ndarray, "_getrefcount": _getrefcount}

    uses_context = []

    def ref(slot):
        if slot == 0:
            uses_context.append(slot)
            return "ctx"
        if template[slot] is not None:
            ns[f"c{slot}"] = template[slot]
            return f"c{slot}"
        return f"s{slot}"

    def targets(out):
        return "".join(f"s{o}, " for o in out)

    lines = ["def run(ctx, args, caps=(), consume=False):"]
    if block.capture_slots:
        lines.append(f"    {', '.join(ref(a) for a in block.capture_slots)}, = caps")
    if block.arg_slots:
        lines.append(f"    {', '.join(ref(a) for a in block.arg_slots)}, = args")
    lines += ["    if consume:", "        args.clear()", "    _i = 0", "    try:"]
    for i, (kind, fn, a, b, c, out, dead) in enumerate(fast):
        ns[f"f{i}"] = fn
        lines.append(f"        _i = {i}")
        if kind in (CALL_1, CALL_2, CALL_3):
            ins = ", ".join(ref(x) for x in (a, b, c)[:kind])
            lines.append(f"        s{out} = f{i}({ins})")
        elif kind == CALL_N:
            lines.append(f"        s{out} = f{i}({''.join(ref(x) + ', ' for x in a)})")
        elif kind == MULTI_RESULT:   # (a while loop of several carries; a
            # custom call of none: a host callback)
            outs = targets(out)
            lines.append(f"        {outs + '= ' if outs else ''}"
                         f"f{i}({''.join(ref(x) + ', ' for x in a)})")
        elif kind == CALL_FUNCTION:
            # The callee's block, looked up per run as the loop looks it up
            # (the program's functions are fixed, the context's program is
            # the one running).
            uses_context.append(0)
            ns[f"n{i}"] = a
            lines.append(f"        _v = [{''.join(ref(x) + ', ' for x in b)}]")
            lines += [f"        {ref(d)} = None" for d in c]
            lines.append(f"        _r = ctx.program.functions[n{i}].block.run(ctx, (), _v, True)")
            if out.__class__ is int:
                lines.append(f"        s{out} = _r[0]")
            elif out:
                lines.append(f"        {targets(out)}= _r")
            lines.append("        _v = _r = None")
        elif kind == DONATE_FIRST:
            ns[f"d{i}"] = c
            rest = "".join(", " + ref(x) for x in b)
            lines += [f"        x = {ref(a)}",
                      f"        {ref(a)} = None",
                      "        if x.__class__ is _ndarray and x.base is None "
                      "and x.flags.writeable and _getrefcount(x) == 2:",
                      f"            s{out} = d{i}(x{rest})",
                      "        else:",
                      f"            s{out} = f{i}(x{rest})",
                      "        x = None"]
        else:
            return None
        for d in dead:
            if d != 0 and template[d] is None:
                lines.append(f"        s{d} = None")
    lines.append(f"        return [{', '.join(ref(r) for r in block.result_slots)}]")
    lines.append("    except Exception as e:")
    lines.append("        raise _failure(e, _i)")
    ns["_failure"] = lambda e, i: _step_failure(block, fast, e, i)
    code = _builtins.compile("\n".join(lines) + "\n", f"<plan of {block.name}>", "exec")
    exec(code, ns)  # noqa: S102 - our own generated source
    run = ns["run"]
    run.needs_context = bool(uses_context)
    return run


def _step_failure(block, fast, e, i):
    """The exception Block.run raises when step ``i`` of ``fast`` raised
    ``e`` (the generated code raises it; its cause is set as the loop sets
    it)."""
    if isinstance(e, InterpreterError):
        return e
    _, fn, _, _, _, out, _ = fast[i]
    err = _failure(e, block._failed_step(fn, out))
    err.__cause__ = _cause(e)
    err.__suppress_context__ = True
    return err


def _failure(e, step):
    """The ExecutionError for step ``step`` (None: not found) raising ``e``
    (not an InterpreterError): a runaway call chain (RecursionError) is an
    error naming the op, not a crash."""
    if isinstance(e, RecursionError):
        if step is None:
            return ExecutionError("recursion too deep")
        return ExecutionError(f"{step.op.where()}: recursion too deep",
                              step.op.name, step.op.location)
    return _wrap(e, step)


def _cause(e):
    """The cause ``_failure(e, ...)`` is raised from: ``e``, or None for a
    RecursionError (its thousand frames say nothing)."""
    return None if isinstance(e, RecursionError) else e


def _wrap(e, step):
    if step is None:
        return ExecutionError(f"{type(e).__name__}: {e}")
    op = step.op
    return ExecutionError(f"{op.where()}: {type(e).__name__}: {e}", op.name, op.location)


class Function:
    """A compiled `func.func`."""

    def __init__(self, name, block, visibility, arg_types, result_types, arg_attrs,
                 result_attrs):
        self.name = name
        self.block = block
        self.visibility = visibility
        self.input_types = arg_types
        self.output_types = result_types
        self.arg_attrs = arg_attrs
        self.result_attrs = result_attrs

    def __call__(self, ctx, args):
        return self.block.run(ctx, (), args)


class Program:
    """A compiled module: functions by name, ready to run many times."""

    def __init__(self, functions: dict[str, Any], module_attrs: dict[str, Any], main: str,
                 module: Module) -> None:
        self.functions = functions
        self.module_attrs = module_attrs
        self.main = main
        self.module = module  # the loaded Module (MLIR_LOCK guards its mlir)
        self.numerics = "accurate"   # the mode it was compiled in (numerics.py)
        self.num_replicas = int(module_attrs.get("mhlo.num_replicas", 1) or 1)
        self.num_partitions = int(module_attrs.get("mhlo.num_partitions", 1) or 1)
        # The embedder's hook for `@stablehlo_ref.host_callback`: the Python
        # callables a module's host callbacks index (ops/host_callback.py).
        self.host_callbacks = ()
        # State that outlives one run, keyed by the kernel that owns it
        # (stablehlo.rng's generators advance from run to run, as XLA's
        # per-executable rng state does).
        self.state = {}
        self._entry: Any = None  # call()'s view of the entry function, made at its first use

    @property
    def text(self) -> str:
        """The module's MLIR text (printed on demand)."""
        with MLIR_LOCK, self.module.context:
            return str(self.module.mlir)

    @property
    def input_types(self) -> list[Any]:
        return self.functions[self.main].input_types

    @property
    def output_types(self) -> list[Any]:
        return self.functions[self.main].output_types

    def function(self, name: str | None = None) -> Any:
        name = name or self.main
        try:
            return self.functions[name]
        except KeyError:
            raise InterpreterError(
                f"no function @{name} in module (has: "
                f"{', '.join('@' + n for n in self.functions)})") from None

    def run(self, *args: Any, func: str | None = None, tracer: Any = None,
            process: tuple[int, int] = (0, 0), grid: Any = None, cast: bool = False) -> Any:
        """Run ``func`` (default: the entry function) on ``args``; returns a list.

        Arrays must have their parameter's dtype and shape (ArgumentError
        otherwise); ``cast=True`` converts them, refusing values the
        conversion would change (arguments.py).
        """
        f, args, ctx = self._start(args, func, tracer, process, grid, cast)
        return _run_ignoring_fp_errors(f.block.run, ctx, (), args)

    def call(self, args: Any) -> Any:
        """``run(*args)``: the entry function on the sequence ``args``, with
        the per-run work cut to the minimum for an embedder that runs one
        program many times (the PJRT plugin's Execute): the arguments are
        checked against the parameter types read once, and the run needs no
        keyword handling or argument list. Anything unusual (an argument
        :meth:`run` would convert or reject, a tracer, result validation)
        takes :meth:`run`, so results and errors are the same."""
        entry = self._entry
        if entry is None:
            entry = self._entry = self._make_entry()
        block, types, run, needs_context = entry
        if len(args) != len(types) or _trace.ACTIVE is not None or _trace_env_set() \
                or block is None:
            return self.run(*args)
        i = 0
        for a in args:  # (indexing: half the cost of zip and its tuples)
            shape, dtype = types[i]
            if a.__class__ is not _ndarray or a.shape != shape \
                    or (a.dtype is not dtype and a.dtype != dtype):
                return self.run(*args)
            i += 1
        if _getrecursionlimit() < RECURSION_LIMIT:
            _setrecursionlimit(RECURSION_LIMIT)
        if not run or _DEBUG_VALIDATE:
            run = self._next_entry_run(block)
        ctx = Context(self) if needs_context or _DEBUG_VALIDATE else None
        token = _ERRSTATE.set(_IGNORE_ERRORS)
        try:
            return run(ctx, args)
        finally:
            _ERRSTATE.reset(token)

    def _next_entry_run(self, block: Any) -> Any:
        """The function :meth:`call` runs the entry block with: Block.run at
        the first call (and under result validation, which only that loop
        does); from the second on, its straight-line code when it has one
        (a program run once does not pay for generating it)."""
        if _DEBUG_VALIDATE or self._entry[2] is None:
            if self._entry[2] is None:
                self._entry = (block, self._entry[1], False, True)
            return block._run_args
        run = straight_line(block)
        if not run:
            self._entry = (block, self._entry[1], block._run_args, True)
            return block._run_args
        # A plan no step of which takes the context runs without one.
        self._entry = (block, self._entry[1], run, run.needs_context)
        return run

    def _make_entry(self) -> tuple[Any, tuple[tuple[Any, Any], ...], Any, bool]:
        """:meth:`call`'s view of the entry function: its block (None when
        every call must take :meth:`run`), (shape, dtype) per parameter, and
        the function running the block (None: not decided yet; False: the
        first call took Block.run; see :meth:`_next_entry_run`), and whether
        that function needs the execution context."""
        f = self.function(None)
        types = []
        for t in f.input_types:
            if t.__class__ is not TensorType or t.quant is not None \
                    or not all(isinstance(d, int) for d in t.shape):
                return None, (), None, True
            types.append((tuple(t.shape), np.dtype(t.dtype)))
        if _ERRSTATE is None:  # (numpy without the error-state variable)
            return None, (), None, True
        return f.block, tuple(types), None, True

    def check_argument(self, i: int, value: Any, func: str | None = None) -> None:
        """Raises ArgumentError when ``value`` cannot be argument #i of
        ``func`` (dtype and shape, as :meth:`run` checks them), running
        nothing: the plugin checks the arguments of a program it queues when
        it queues it."""
        f = self.function(func)
        _coerce(value, f.input_types[i], i, f.name)

    def run_donated(self, args: list[Any], func: str | None = None, tracer: Any = None,
                    process: tuple[int, int] = (0, 0), grid: Any = None) -> Any:
        """Like :meth:`run` on the list ``args``, which the caller gives up:
        the list is emptied, and an argument array nothing else refers to
        (no other reference, owns its writeable data) may be updated in
        place by the program (a donated buffer's memory reused).
        ``process``/``grid``: as for :meth:`run` (one process of a parallel
        run, see :meth:`run_parallel`'s ``consume``)."""
        f, coerced, ctx = self._start(args, func, tracer, process, grid, False)
        args.clear()
        return _run_ignoring_fp_errors(f.block.run, ctx, (), coerced, True)

    def _start(self, args, func, tracer, process, grid, cast):
        """What a run needs: the function, its checked arguments (a new list)
        and the execution context, with the tracer in effect."""
        f = self.function(func)
        types = f.input_types
        n = len(types)
        if len(args) != n:
            raise ArgumentError(f"@{f.name} takes {n} argument(s), got {len(args)}")
        # map, not a comprehension: no function frame per run (a tenth of a
        # one-op program's run; the plugin's per-call cost).
        coerced = list(map(_coerce, args, types, range(n), _repeat(f.name, n),
                           _repeat(cast, n)))
        if tracer is None:
            tracer = _trace.ACTIVE
            if tracer is None and _trace_env_set():
                tracer = _trace.tracer_from_env()
        if _getrecursionlimit() < RECURSION_LIMIT:
            _setrecursionlimit(RECURSION_LIMIT)
        return f, coerced, Context(self, tracer, process, grid)

    def run_parallel(self, args_per_process: Any = None, num_replicas: int | None = None,
                     num_partitions: int | None = None, **kwargs: Any) -> Any:
        """Run on a process grid, one thread per process; see parallel.run_parallel."""
        from .parallel import run_parallel
        return run_parallel(self, args_per_process, num_replicas, num_partitions, **kwargs)


# --------------------------------------------------------------------------
# Compilation


class _Compiler:
    def __init__(self, module, source=None, numerics="accurate"):
        self.module = module
        # Builders read it as ``op.module.numerics`` (numerics.py).
        self.numerics = numerics
        # Shown instead of "-" in locations of text parsed from a file.
        self.source = source if source and not source.startswith("<") else None
        self.unsupported = []
        self.functions = {}

    def compile(self):
        mod = self.module.mlir
        module_attrs = {}
        mattrs = mod.operation.attributes
        for key in attribute_names(mattrs):
            module_attrs[key] = _attrs.decode_attribute(mod.operation, key)
        funcs = []
        for op in mod.body.operations:
            o = op.operation
            if o.name == "func.func":
                funcs.append(o)
            # Other top-level ops (sdy.mesh, ...) carry no computation.
        if not funcs:
            raise CompileError("module has no func.func")
        for fo in funcs:
            self._compile_function(fo)
        if self.unsupported:
            raise UnsupportedOpsError(self.unsupported)
        names = list(self.functions)
        main = "main" if "main" in self.functions else None
        if main is None:
            public = [n for n, f in self.functions.items() if f.visibility != "private"]
            main = public[0] if public else names[0]
        program = Program(self.functions, module_attrs, main, self.module)
        program.numerics = self.numerics
        return program

    def function_ops(self):
        """``{name: func.func operation}`` of the module, built once: call,
        composite and custom-call builders look callees up here (scanning the
        module per call site made compile quadratic in the function count)."""
        index = self.__dict__.get("_function_ops")
        if index is None:
            index = {}
            for op in self.module.mlir.body.operations:
                o = op.operation
                if o.name == "func.func":
                    index.setdefault(self._symbol_name(o), o)
            self._function_ops = index
        return index

    def _symbol_name(self, fo):
        name = _attrs.string_value(fo.attributes["sym_name"])
        if "\ufffd" in name:
            raise CompileError(f"func.func at {format_location(fo.location, self.source)}: "
                               f"the function name {name!r} is not valid UTF-8")
        return name

    def _compile_function(self, fo):
        from jaxlib.mlir import ir
        name = self._symbol_name(fo)
        vis = (_attrs.string_value(fo.attributes["sym_visibility"])
               if "sym_visibility" in fo.attributes else "public")
        ftype = ir.FunctionType(ir.TypeAttr(fo.attributes["function_type"]).value)
        arg_types = [from_mlir(t) for t in ftype.inputs]
        res_types = [from_mlir(t) for t in ftype.results]
        arg_attrs = self._decode_attr_list(fo, "arg_attrs", len(arg_types))
        res_attrs = self._decode_attr_list(fo, "res_attrs", len(res_types))
        if len(fo.regions[0].blocks) == 0:
            self.unsupported.append(("func.func", format_location(fo.location, self.source),
                                     f"@{name} is a declaration without a body"))
            return
        block = self._compile_region(fo.regions[0], f"@{name}", top=True)
        block.arg_types = arg_types
        block.result_types = res_types
        self.functions[name] = Function(name, block, vis, arg_types, res_types,
                                        arg_attrs, res_attrs)

    @staticmethod
    def _decode_attr_list(fo, key, n):
        from jaxlib.mlir import ir
        if key not in fo.attributes:
            return [{} for _ in range(n)]
        out = []
        for a in ir.ArrayAttr(fo.attributes[key]):
            try:
                out.append(_attrs.decode(a))
            except Exception:
                out.append({})
        return out

    def _compile_region(self, region, name, top=False):
        """Compile a single-block region into a Block (with its captures)."""
        blocks = list(region.blocks)
        blk = Block(name)
        if len(blocks) != 1:
            loc = format_location(region.owner.location, self.source)
            self.unsupported.append((region.owner.name, loc,
                                     f"region with {len(blocks)} blocks "
                                     "(only single-block regions are supported)"))
            blk.template = [None]
            return blk
        b = blocks[0]
        slots = {}
        nslots = [1]  # slot 0: the execution context
        constants = {}
        last_use = {}

        def new_slot():
            nslots[0] += 1
            return nslots[0] - 1

        blk.arg_slots = tuple(slots.setdefault(a, new_slot()) for a in b.arguments)

        def lookup(v):
            s = slots.get(v)
            if s is None:
                # A constant of an enclosing scope (XLA hoists them out of
                # comparators and reduce bodies) becomes a constant of this
                # block: pattern matchers (sort keys, reduce ufuncs, batched
                # bodies) then see it, and the owner passes fewer captures.
                c = self._outer_constant(v)
                if c is not None:
                    s = new_slot()
                    slots[v] = s
                    constants[s] = c
                    return s
                # Defined outside this region: capture it.
                s = new_slot()
                slots[v] = s
                blk.capture_values.append(v)
                blk.capture_slots.append(s)
            return s

        ops = list(b.operations)
        steps = []
        folded = []
        for idx, op in enumerate(ops):
            o = op.operation
            if idx == len(ops) - 1 and o.name in ("func.return", "stablehlo.return",
                                                  "stablehlo.return_", "chlo.return",
                                                  "sdy.return"):
                blk.result_slots = tuple(lookup(v) for v in o.operands)
                for s in blk.result_slots:
                    last_use[s] = len(steps)  # never freed before the end
                continue
            step = self._compile_op(o, lookup, new_slot, slots, constants)
            if step is None:
                continue
            if step.__class__ is Folded:
                folded.append(step._replace(position=len(steps)))
                continue
            steps.append(step)
            for s in step.ins:
                last_use[s] = len(steps) - 1
        # Results and captures/args are never freed early; everything else is
        # dropped right after its last use so peak memory stays low.
        keep = set(blk.result_slots) | {0}
        dead_at = {}
        for s, i in last_use.items():
            if s not in keep and s not in constants:
                dead_at.setdefault(i, []).append(s)
        blk.steps = [step._replace(dead=tuple(dead_at.get(i, ())))
                     for i, step in enumerate(steps)]
        blk.folded = tuple(folded)
        blk.nslots = nslots[0]
        template = [None] * nslots[0]
        for s, v in constants.items():
            template[s] = v
        blk.template = template
        return blk

    def _outer_constant(self, v):
        """The value of ``v`` if an enclosing `stablehlo.constant` defines it
        (plain, non-quantized tensor of the declared type), else None."""
        cache = self.__dict__.setdefault("_outer_constants", {})
        if v in cache:
            return cache[v]
        value = None
        try:
            owner = v.owner
            name = getattr(owner, "name", None)
            if name == "stablehlo.constant" and len(owner.regions) == 0:
                t = from_mlir(v.type)
                if isinstance(t, TensorType) and t.quant is None:
                    a = _attrs.decode_attribute(owner, "value")
                    if isinstance(a, np.ndarray) and a.dtype == t.dtype \
                            and a.shape == tuple(t.shape):
                        value = np.array(a, order="C", copy=True)
                        value.flags.writeable = False
        except Exception:
            value = None
        cache[v] = value
        return value

    def _compile_op(self, o, lookup, new_slot, slots, constants):
        name = _quant.OP_ALIASES.get(o.name, o.name)
        if name.startswith(NEWER_OP_PREFIX):
            name = "stablehlo." + name[len(NEWER_OP_PREFIX):]
        loc = format_location(o.location, self.source)
        # Decode attributes. A failure to decode one is reported only if the
        # kernel needs it (RawAttr keeps the text).
        attrs = {}
        oattrs = o.attributes
        for key in attribute_names(oattrs):
            attrs[key] = _attrs.decode_attribute(o, key)
        try:
            operand_types = [from_mlir(v.type) for v in o.operands]
            result_types = [from_mlir(r.type) for r in o.results]
        except Exception as e:
            self.unsupported.append((name, loc, str(e)))
            for r in o.results:
                slots[r] = new_slot()
            return None
        # Regions compile first: their captures become extra inputs.
        regions = [self._compile_region(r, f"{name}#{i}") for i, r in enumerate(o.regions)]
        op = Op(name, loc, attrs, operand_types, result_types, regions, self, o)
        builder, special = self._find_builder(op)
        out_slots = [new_slot() for _ in o.results]
        for r, s in zip(o.results, out_slots):
            slots[r] = s
        if builder is None:
            return None
        try:
            if _quant.involves_quant(op):
                # Quantized operands/results: run the float kernel between
                # dequantize and quantize, or on storage values (quant.py).
                fn = _quant.build(builder, op, special)
            else:
                fn = builder(op)
        except Unsupported as e:
            self.unsupported.append((name, loc, str(e) or "unsupported form"))
            return None
        except InterpreterError as e:
            self.unsupported.append((name, loc, str(e)))
            return None
        except Exception as e:
            self.unsupported.append((name, loc, f"cannot compile: {type(e).__name__}: {e}"))
            return None
        op.raw = None  # nothing MLIR survives into the plan
        in_slots = [lookup(v) for v in o.operands]
        if name == "stablehlo.constant" and not special and len(out_slots) == 1:
            # Constants are materialised once, into the frame template.
            try:
                constants[out_slots[0]] = fn()
            except Exception as e:
                self.unsupported.append((name, loc, f"bad constant: {e}"))
            return None
        if not special and not regions and all(s in constants for s in in_slots) \
                and _FOLD_ENABLED:
            # Every operand is a constant: evaluate once, here (fold.py).
            vals = _fold.fold(op, fn, [constants[s] for s in in_slots])
            if vals is not None:
                for s, v in zip(out_slots, vals):
                    constants[s] = v
                return Folded(0, tuple(in_slots), tuple(out_slots), op)
        if special or regions:
            cap_ranges = []
            cap_slots = []
            for rb in regions:
                start = len(cap_slots)
                cap_slots.extend(lookup(v) for v in rb.capture_values)
                cap_ranges.append((start, len(cap_slots)))
            branch = kernel_info(fn).branch if regions and in_slots \
                and not _quant.involves_quant(op) else None
            if branch is not None:
                # if / case: one region runs per execution (see _branch_step).
                if in_slots[0] in constants:
                    i = branch(constants[in_slots[0]], len(regions))
                    if _FOLD_ENABLED and _constant_results(regions[i]) is not None:
                        for s, v in zip(out_slots, _constant_results(regions[i])):
                            constants[s] = v
                        return Folded(0, tuple(in_slots), tuple(out_slots), op)
                    branch = _fixed_branch(i)
                fn = _branch_step(branch, regions, cap_ranges, one_or_many(op))
            else:
                fn = _special_step(fn, regions, cap_ranges, len(in_slots))
            ins = (0,) + tuple(in_slots) + tuple(cap_slots)
            SPECIAL_NAMES_CACHE.add(name)
        else:
            ins = tuple(in_slots)
        out = out_slots[0] if len(out_slots) == 1 else tuple(out_slots)
        return Step(fn, ins, out, (), op)

    def _find_builder(self, op):
        name = op.name
        if name == "stablehlo.custom_call":
            target = op.attrs.get("call_target_name")
            entry = CUSTOM_CALLS.get(target)
            if entry is None:
                why = custom_call_rejection(target)
                self.unsupported.append((name, op.location,
                                         f"custom_call @{target}: {why}" if why else
                                         f"unknown custom_call target @{target}"))
                return None, False
            return entry
        builder = KERNELS.get(name)
        if builder is None:
            self.unsupported.append((name, op.location, "no kernel for this op"))
            return None, False
        return builder, name in SPECIAL


def _special_step(fn, regions, cap_ranges, n_operands):
    """Adapt ``fn(ctx, regions, *operands)`` to the frame calling convention.

    A kernel marked ``regions_unused`` (a reduce whose body is one known op,
    run as a ufunc) gets no bound regions: binding them per call costs more
    than a small reduction. One with ``unbound`` (a while loop run in C) is
    first asked to run without them."""
    if not regions or (kernel_info(fn).regions_unused
                       and all(a == b for a, b in cap_ranges)):
        def step(ctx, *vals):
            return fn(ctx, (), *vals)
        if kernel_info(fn).reduction is not None:
            annotate(step, reduction=kernel_info(fn).reduction)   # for fusion.py
        return step

    unbound = kernel_info(fn).unbound
    if unbound is not None:
        no_caps = tuple(() for _ in regions) if all(a == b for a, b in cap_ranges) else None

        def step(ctx, *vals):
            caps = vals[n_operands:]
            res = unbound(ctx, no_caps or [caps[a:b] for a, b in cap_ranges],
                          vals[:n_operands])
            if res is not None:
                return res
            bound = [rb.bind(ctx, caps[a:b]) for rb, (a, b) in zip(regions, cap_ranges)]
            return fn(ctx, bound, *vals[:n_operands])
        return step

    def step(ctx, *vals):
        ops = vals[:n_operands]
        caps = vals[n_operands:]
        bound = [rb.bind(ctx, caps[a:b]) for rb, (a, b) in zip(regions, cap_ranges)]
        return fn(ctx, bound, *ops)
    return step


def _branch_step(branch, blocks, cap_ranges, wrap):
    """The step of an op whose kernel runs one of its regions (if, case:
    ``KernelInfo.branch``): binds and runs only the region ``branch``
    picks, not a closure per region and run. Same operands as the kernel's
    step (context, selector, every region's captures), so that loopgen.py
    and tracers see the op as before."""
    n = len(blocks)

    def step(ctx, sel, *caps):
        i = branch(sel, n)
        a, b = cap_ranges[i]
        return wrap(blocks[i].run(ctx, caps[a:b], ()))
    return step


def _fixed_branch(i):
    """The ``branch`` of a selector that is a compile-time constant (JAX's
    ``platform_dependent`` lowers to a case on a constant index; ``jnp.diagonal``
    has one)."""
    return lambda sel, n: i


def _constant_results(block):
    """The results of a region that computes nothing (every result a
    constant of its own; its folded ops count as constants), or None."""
    if block.steps or block.capture_slots:
        return None
    vals = [block.template[s] for s in block.result_slots]
    if any(v is None for v in vals) or 0 in block.result_slots \
            or any(s in block.arg_slots for s in block.result_slots):
        return None
    return vals


def compile(module_or_data: Module | str | bytes, *,  # noqa: A001 - the natural name
            name: str = "<input>", numerics: str | None = None) -> Program:
    """Compile a module (or MLIR text/bytes) into a :class:`Program`.

    ``numerics``: ``"accurate"`` (the most accurate result of the element
    type) or ``"spec"`` (bit-identical to the C++ reference interpreter:
    element-type arithmetic in its order); None reads
    ``STABLEHLO_REF_NUMERICS`` (default accurate). See docs/numerics.md.

    Raises :class:`UnsupportedOpsError` listing every op that cannot run.
    """
    numerics = _numerics.resolve(numerics)
    module = load(module_or_data, name=name)
    _heap.tune()   # once per process: freed arrays stay for the next run (heap.py)
    with MLIR_LOCK, module.context:
        try:
            program = _Compiler(module, name, numerics).compile()
        except InterpreterError:
            raise
        except RecursionError:
            raise CompileError(f"{name}: regions nest too deeply to compile") from None
        except Exception as e:  # never let a binding's error escape untyped
            raise CompileError(f"{name}: cannot compile: {type(e).__name__}: {e}") from e
    return program
