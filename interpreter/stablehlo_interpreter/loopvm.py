"""Scalar `stablehlo.while` loops run entirely by the block machine
(``_chains.run_loop``, C: see _chains.c).

loopgen.py compiles a hot while loop into one generated Python function on
numpy scalars: about 0.1 us per op, Python's floor. A loop whose cond and
body (``func.call`` inlined) hold only 0-d values of the machine's types
(bool, 8- to 64-bit integers, f32, f64; one-element shapes too) and 1-D
arrays, and only ops :func:`chainvm.lower` accepts (integer and bit ops,
shifts, compares, select, converts but float -> integer, f32/f64 basic
arithmetic, clamp), the loop-only ones (float -> integer converts; f32 sin,
cos, tanh, exp, log, logistic, expm1 and log1p; in spec numerics the same
f64 functions but logistic), plus aliases (one-element reshape, broadcast_in_dim,
optimization_barrier, same-type convert) and one-element dynamic_slice /
dynamic_update_slice of a 1-D array (a scan's xs and ys), runs here as one
loop program: a register per value (carries, captures, constants,
intermediates), the arrays (a written one is a carry, copied once per run and
updated in place: the body may read only its latest version), the cond's and
the body's instructions, and the moves of the body's results into the
carries (a parallel assignment). The machine computes
each op's numpy-kernel bits (tests/test_chainvm.py, tests/test_loopvm.py),
so both numerics modes share it, as they share the fused chains' segments.

The functions (_chains.c's OP_MATH) give their kernel's bits too, in both
modes: a float32 one is the C library's float64 function rounded to
float32, trusted only where that value lies far (2^15 float64 ULPs) from a
float32 rounding boundary (of the normal numbers or of the subnormals'
grid) -- then numpy's float64 function, which the kernels round, rounds
the same way. About 1 value in 8000, non-finite inputs and results and
sin/cos of |x| >= 2^20 make run_loop stop just before the instruction
(every earlier instruction of the iteration done, none later) with its
index + 1 in the pause register; :meth:`LoopProgram.resume` computes it
with the op's own kernel (``Step.fn``) and run_loop goes on where it
stopped. Spec mode's float32 logistic is its formula (exp rounded to
float32, then float32 arithmetic); its float64 functions are the C
library's calls (ops/spec_kernels.py libm), paused only where Python's
math raises. A fused array chain never gets these instructions: there the
SIMD kernels of ops/fastmath.py are faster than a C library call per element.

The program is checked and decoded once, when the loop is compiled, into a
``_chains.LoopCode`` (:class:`LoopProgram`); a call is then a few C calls
and the while kernel reaches it without binding its regions
(``KernelInfo.unbound``): a short loop costs little more than its steps.

``run_loop`` runs at most :data:`CHUNK_INSTRUCTIONS` instructions' worth of
iterations per call, GIL released, and checks for signals before it
returns; the Python loop around it calls it again until the cond is false.
Between calls the interpreter's Python runs, so Ctrl-C and the execute
deadline (an exception raised asynchronously in the running thread) stop a
loop within about a millisecond, reported on the while op as the generated
loop reports them.

Anything else (a nested while/if/case, another transcendental or another
type's, accurate mode's f64 functions (numpy's loops, SIMD on some hosts),
a wider slice or a multi-dimensional array) leaves the loop to loopgen's
generated Python.
Without the C module or with ``STABLEHLO_REF_CHAIN_VM=0`` no loop runs
here: the generated Python gives the same bits.
"""

import numpy as np

from . import chainvm as _chainvm
from .errors import ExecutionError
from .registry import scalar_math

_empty = np.empty

# Instructions per run_loop call (~1-10 ms): how often the loop returns to
# Python, where a deadline or Ctrl-C can stop it.
CHUNK_INSTRUCTIONS = 1 << 22
# Nested func.call inlining deeper than this leaves the loop to loopgen.
_MAX_INLINE = 32
_LMAGIC = 0x324C4843
_LOAD, _STORE = 100, 101   # _chains.c's OP_LOAD, OP_STORE
_MATH, _FTOI = 102, 103    # _chains.c's OP_MATH, OP_FTOI (loop programs only)
# OP_MATH's functions (its sub: _chains.c's MATH_*) by the name of the float64
# function an op's kernel rounds (registry.scalar_math: ``math``'s, whose
# names are the C library's, and ops/elementwise_math.py's logistic formula)
_LIBM = {"sin": 0, "cos": 1, "tanh": 2, "exp": 3, "log": 4, "_logistic_scalar": 5, "expm1": 6,
         "log1p": 7}
_EXP, _LOGISTIC = _LIBM["exp"], _LIBM["_logistic_scalar"]
_I64 = _chainvm._TYPES[np.dtype(np.int64)]
_INTS = tuple(_chainvm._TYPES[np.dtype(t)] for t in
              (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64))
_ALIASES = ("stablehlo.reshape", "stablehlo.broadcast_in_dim", "stablehlo.optimization_barrier")


class NotLowered(Exception):
    """The loop has something the machine does not run."""


def _code(t):
    """The machine's type code of a TensorType's (or array's) element type."""
    try:
        code = _chainvm._TYPES.get(np.dtype(t.dtype))
    except (AttributeError, TypeError):
        code = None
    if code is None or getattr(t, "quant", None) is not None:
        raise NotLowered(f"not a machine type: {t}")
    return code


def _is_scalar(t):
    """One element: 0-d, or size-1 dims only (a scan's tensor<1xf32> slice)."""
    return all(d == 1 for d in t.shape)


def _machine_type(t):
    """The type code of a value held in a register, or raise NotLowered."""
    if not _is_scalar(t):
        raise NotLowered(f"not a one-element value: {t}")
    return _code(t)


class Arr:
    """A 1-D array value: array ``id`` of the loop program, as written by
    ``version`` stores (a store updates the array in place: only the latest
    version may be read)."""

    __slots__ = ("id", "version")

    def __init__(self, id_, version):
        self.id = id_
        self.version = version


class _Lowering:
    """Registers, arrays and instructions of one loop program."""

    def __init__(self, program):
        self.program = program
        self.types = []          # per register: machine type code
        self.consts = {}         # register -> 0-d array (its initial value)
        # (op, type, sub, dst register or None, operand registers, array or None)
        self.code = []
        self.inlining = []
        self.arrays = []         # per array: (type code, source) -- ("carry", k), ...
        self.versions = []       # per array: its latest version
        self.in_cond = False
        self.n_cond = 0          # the cond's instructions (the first of code)
        self.ccaps = []          # the cond's captures' values
        self.pause = None        # the pause register of the OP_MATH instructions

    def reg(self, t_code):
        self.types.append(t_code)
        return len(self.types) - 1

    def value(self, t, source, value=None):
        """A register, or an Arr for a 1-D array of at least 2 elements."""
        if not isinstance(getattr(t, "shape", None), tuple):
            raise NotLowered(f"not a tensor: {t!r}")
        if _is_scalar(t):
            r = self.reg(_code(t))
            if value is not None:
                self.consts[r] = value
            return r
        if len(t.shape) != 1 or t.shape[0] is None:
            raise NotLowered(f"an array that is not 1-D: {t}")
        self.arrays.append((_code(t), source if value is None else ("const", value)))
        self.versions.append(0)
        return Arr(len(self.arrays) - 1, 0)

    def const(self, value):
        if not isinstance(value, np.ndarray):
            raise NotLowered("a constant that is not an array")
        return self.value(value, None, value)

    def latest(self, a, name):
        if a.__class__ is not Arr or self.versions[a.id] != a.version:
            raise NotLowered(f"{name} of an array value not the latest one")
        return a

    def block(self, blk, args, caps):
        """Lower Block ``blk`` with argument and capture values; returns
        the values of its results."""
        env = dict(zip(blk.arg_slots, args))
        env.update(zip(blk.capture_slots, caps))
        template = blk.template or ()

        def get(s):
            if s not in env:
                if s >= len(template) or template[s] is None:
                    raise NotLowered(f"slot {s} has no value")
                env[s] = self.const(template[s])
            return env[s]

        for step in blk.steps:
            self.step(step, env, get)
        return [get(s) for s in blk.result_slots]

    def step(self, step, env, get):
        _, ins, out, _, op = step
        outs = (out,) if out.__class__ is int else tuple(out)
        name = op.name
        if name == "func.call":
            callee = self.program.functions.get(op.attrs.get("callee"))
            if callee is None or callee.name in self.inlining or len(self.inlining) >= _MAX_INLINE:
                raise NotLowered("a call that cannot be inlined")
            self.inlining.append(callee.name)
            try:
                res = self.block(callee.block, [get(s) for s in ins[1:]], [])
            finally:
                self.inlining.pop()
            env.update(zip(outs, res))
            return
        if 0 in ins:
            raise NotLowered(f"{name} takes the run's context")
        if name in ("stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice"):
            return self.indexed(op, [get(s) for s in ins], outs, env)
        for t in list(op.operand_types) + list(op.result_types):
            _machine_type(t)
        if name in _ALIASES or (name == "stablehlo.convert"
                                and op.operand_types[0].dtype == op.result_types[0].dtype):
            if len(ins) != len(outs):
                raise NotLowered(f"{name} with {len(ins)} operands")
            env.update((o, get(s)) for o, s in zip(outs, ins))
            return
        if len(outs) == 1 and len(ins) == 1 and self.loop_only(step, op, get(ins[0]), outs, env):
            return
        lowered = _chainvm.lower(op)
        if lowered is None or len(outs) != 1:
            raise NotLowered(f"{name} is not a machine op on these types")
        args = [get(s) for s in ins]
        res = self.reg(_machine_type(op.result_types[0]))
        temp = None
        for opcode, t, sub, dst, operands in lowered:
            if dst == "t":
                temp = self.reg(t)
            where = {"r": res, "t": temp}
            d = where[dst]
            regs = tuple(where[a] if a in where else args[a] for a in operands)
            self.code.append((opcode, t, sub, d, regs, None))
        env[outs[0]] = res

    def loop_only(self, step, op, x, outs, env):
        """Lower a float -> integer convert (OP_FTOI) or a float32 function
        (OP_MATH, computed with the kernel ``step.fn``'s bits: where the C
        library's value cannot be trusted to round as the kernel's, the
        machine pauses and :meth:`LoopProgram.resume` calls the kernel);
        False for any other op."""
        t, r = _code(op.operand_types[0]), _code(op.result_types[0])
        f64_fn = scalar_math(op.name)
        fn = None if f64_fn is None else _LIBM.get(getattr(f64_fn, "__name__", None))
        if op.name == "stablehlo.convert" and _chainvm._is_float(t) and r in _INTS:
            res = self.reg(r)
            self.code.append((_FTOI, t, 0, res, (x, x), None))
        elif fn is not None and t == r and self.libm_kernel(t, fn, op):
            if self.pause is None:
                self.pause = self.reg(_I64)
            res = self.reg(r)
            if fn == _LOGISTIC and t == _chainvm._F32 and _spec(op):
                self.spec_logistic(x, res)
            else:
                self.code.append((_MATH, t, fn, res, (x, self.pause), step.fn))
        else:
            return False
        env[outs[0]] = res
        return True

    @staticmethod
    def libm_kernel(t, fn, op):
        """Does OP_MATH compute function ``fn`` on type ``t`` as ``op``'s
        kernel does (_chains.c)? float32: in both modes; float64: spec
        mode's C library calls (but logistic, a formula of exp)."""
        if t == _chainvm._F32:
            return True
        return t == _chainvm._F64 and fn != _LOGISTIC and _spec(op)

    def spec_logistic(self, x, res):
        """spec mode's float32 logistic (ops/spec_elementwise.py): exp(-x)
        rounded to float32, then 1 + e and 1 / (1 + e) in float32."""
        f32 = _chainvm._F32
        neg, e, s = self.reg(f32), self.reg(f32), self.reg(f32)
        one = self.const(np.array(1, np.float32))
        self.code += [(_chainvm.NEG, f32, 0, neg, (x,), None),
                      (_MATH, f32, _EXP, e, (neg, self.pause), _exp_f32),
                      (_chainvm.ADD, f32, 0, s, (one, e), None),
                      (_chainvm.DIV, f32, 0, res, (one, s), None)]

    def indexed(self, op, vals, outs, env):
        """dynamic_slice of one element of a 1-D array (LOAD) and
        dynamic_update_slice of one (STORE, in place: the array is a carry
        the loop owns and only the new version is used from here on); of a
        one-element value, the value itself / the update."""
        ot, rt = op.operand_types, op.result_types[0]
        update = op.name == "stablehlo.dynamic_update_slice"
        idx = vals[2:] if update else vals[1:]
        if len(idx) != 1 or any(v.__class__ is not int for v in idx) \
                or _chainvm._dtype_of(self.types[idx[0]]).kind not in "iu" \
                or not _is_scalar(ot[2 if update else 1]):
            raise NotLowered(f"{op.name} without one integer start index")
        a = vals[0]
        if a.__class__ is int:   # one element: every start index clamps to 0
            if update and (vals[1].__class__ is not int or not _is_scalar(ot[1])):
                raise NotLowered(f"{op.name} of a one-element value")
            env[outs[0]] = vals[1] if update else a
            return
        t = self.arrays[a.id][0]
        self.latest(a, op.name)
        if not update:
            if not _is_scalar(rt) or _code(rt) != t:
                raise NotLowered(f"{op.name} of more than one element")
            r = self.reg(t)
            self.code.append((_LOAD, t, self.types[idx[0]], r, (idx[0],), a.id))
            env[outs[0]] = r
            return
        u = vals[1]
        if u.__class__ is not int or not _is_scalar(ot[1]) or self.types[u] != t \
                or self.arrays[a.id][1][0] != "carry" or self.in_cond:
            raise NotLowered(f"{op.name} of more than one element or not of a carry")
        self.code.append((_STORE, t, self.types[idx[0]], None, (idx[0], u), a.id))
        self.versions[a.id] += 1
        env[outs[0]] = Arr(a.id, self.versions[a.id])


def _spec(op):
    """Does ``op`` compile in spec numerics (ops/spec_kernels.py is_spec)?"""
    return getattr(op.module, "numerics", "accurate") == "spec"


def _exp_f32(x):
    """exp of a float32 in float64, rounded once (spec mode's float32 exp)."""
    return np.asarray(np.exp(x.astype(np.float64)).astype(np.float32))


class LoopProgram:
    """A while op lowered, with loopgen.CompiledLoop's interface: :meth:`run`
    (``(ctx, ccap, bcap, vals)`` -> the loop's results, or None when the
    values are not of the types it was made for) runs it; ``source``
    describes it (STABLEHLO_REF_FAST_LOOPS=print).

    Everything a run does not need to redo is made here, once: the checked
    and decoded program (``code``, a ``_chains.LoopCode``, read-only: one
    serves every run and thread), the registers' initial bytes (the
    constants) in it, which value goes to which register. A run is then a
    few C calls: ``start`` (a new state with the carries and captures
    written in), ``run_loop`` per chunk of iterations, ``finish`` (the
    result registers copied into new 0-d arrays that own their memory, as
    the plugin's Execute wants its results)."""

    def __init__(self, program, low, code, carries, caps, op, checks=()):
        n_instr = len(code)
        self.program = program
        state = np.zeros(len(low.types), np.uint64)
        raw = state.view(np.uint8)
        for r, value in low.consts.items():
            raw[8 * r:8 * r + value.itemsize] = value.reshape(1).view(np.uint8)
        values = (*carries, *caps)
        # (the register of each carry and capture, -1 for an array)
        inputs = tuple(v if v.__class__ is int else -1 for v in values)
        outputs = tuple(v if v.__class__ is int else -1 for v in carries)
        # start() checks a register value's kind itself (its buffer's
        # format and ndim: its dtype and shape, every dim 1); the arrays'
        # checks stay here.
        types = dict(((w, i), (shape, dtype)) for w, i, shape, dtype in checks)
        n_c, n_cc = len(carries), len(low.ccaps)
        where = [(0, k) for k in range(n_c)] + [(1, k) for k in range(n_cc)] \
            + [(2, k) for k in range(len(caps) - n_cc)]
        kinds = []
        for v, w in zip(values, where):
            t = types.get(w)
            kinds.append((memoryview(np.empty(t[0], t[1])).format, len(t[0]))
                         if v.__class__ is int and t is not None else ("", -1))
        self.code = _chainvm._chains.LoopCode(program, state.tobytes(), inputs, outputs, kinds)
        register = {w for v, w in zip(values, where) if v.__class__ is int and w in types}
        self.checks = tuple(c for c in checks if (c[0], c[1]) not in register)
        stored = {ins[5] for ins in low.code if ins[0] == _STORE}
        # per array: (where: 0 carry / 1 ccap / 2 bcap / 3 constant, index or value, copy?)
        groups = {"carry": 0, "ccap": 1, "bcap": 2}
        self.arrays = tuple((groups.get(src[0], 3), src[1], k in stored)
                            for k, (_, src) in enumerate(low.arrays))
        # per result: (shape, dtype) of a register's new array, or the array's index
        self.results = tuple((tuple(t.shape), _chainvm._dtype_of(low.types[v]))
                             if v.__class__ is int else v.id
                             for v, t in zip(carries, op.operand_types))
        self.steps = max(1, CHUNK_INSTRUCTIONS // max(1, n_instr))
        self.op = op
        self.line_ops = []
        # OP_MATH: the pause register's offset, and per instruction index
        # (kernel, dtype, input register offset, result register offset)
        self.pause = None if low.pause is None else 8 * low.pause
        self.kernels = {k: (ins[5], _chainvm._dtype_of(ins[1]), 8 * ins[4][0], 8 * ins[3])
                        for k, ins in enumerate(code) if ins[0] == _MATH}
        self.source = (f"# _chains.run_loop: {len(low.types)} registers, {len(low.arrays)} "
                       f"arrays, {low.n_cond} cond and {n_instr - low.n_cond} body "
                       f"instructions, {self.code.n_steps} steps per iteration")

    def run(self, ctx, ccap, bcap, vals):
        groups = (vals, ccap, bcap)
        for which, i, shape, dtype in self.checks:   # (the arrays')
            v = groups[which][i]
            if v.__class__ is not np.ndarray or v.shape != shape or v.dtype != dtype:
                return None
        code = self.code
        state = code.start((*vals, *ccap, *bcap))
        if state is None:   # a value of another type
            return None
        arrays = []
        if self.arrays:
            for where, i, copy in self.arrays:
                a = i if where == 3 else groups[where][i]
                arrays.append(np.array(a, order="C") if copy else np.ascontiguousarray(a))
        vals.clear()
        run_loop, steps = _chainvm._chains.run_loop, self.steps
        try:
            while not run_loop(code, state, arrays, steps):
                if self.pause is not None:
                    self.resume(state)
        except Exception as e:
            # The execute deadline (raised asynchronously in this thread
            # between chunks) or a failing kernel of a paused function:
            # reported on the while op, as the generated loop reports them.
            op = self.op
            raise ExecutionError(f"{op.where()}: {type(e).__name__}: {e}", op.name,
                                 op.location) from e
        out = [_empty(r[0], r[1]) if r.__class__ is tuple else arrays[r] for r in self.results]
        code.finish(state, out)
        return out

    def resume(self, state):
        """After run_loop stopped before an OP_MATH instruction (the pause
        register holds its index + 1), its result by the op's kernel."""
        at = int(np.frombuffer(state, np.int64, 1, self.pause)[0])
        if at:
            kernel, dt, src, dst = self.kernels[at - 1]
            x = np.frombuffer(state, dt, 1, src).reshape(()).copy()
            state[dst:dst + dt.itemsize] = np.asarray(kernel(x), dt).tobytes()


def _write_carries(body, moves):
    """The body instructions with the one making a carry's new value writing
    the carry itself, where no later instruction (nor another carry's move)
    reads the carry's old value, and the moves left: a move is a load and a
    store per iteration on the loop's critical path."""
    body = list(body)
    writer = {ins[3]: k for k, ins in enumerate(body) if ins[3] is not None}
    sources = {r for _, r in moves}
    left, rename = [], {}
    for c, r in moves:
        k = writer.pop(r, None)
        if k is None or c in sources or any(c in ins[4] for ins in body[k + 1:]):
            if k is not None:
                writer[r] = k
            left.append((c, r))
            continue
        opcode, t, sub, _, regs, arr = body[k]
        body[k] = (opcode, t, sub, c, regs, arr)
        for j in range(k + 1, len(body)):
            o, t2, s2, d2, regs2, arr2 = body[j]
            body[j] = (o, t2, s2, d2, tuple(c if x == r else x for x in regs2), arr2)
        rename[r] = c
    return body, [(c, rename.get(r, r)) for c, r in left]


def _words(ins):
    """An instruction's 8 words (_chains.c's Instr)."""
    op, t, sub, d, regs, arr = ins
    if op == _LOAD:
        return (op, t, sub, d, arr, regs[0], 0, 0)
    if op == _STORE:
        return (op, t, sub, arr, regs[0], regs[1], 0, 0)
    return (op, t, sub, d, *regs, *[0] * (4 - len(regs)))


def _lower_regions(low, op, ccap, bcap):
    """The carries', captures' and results' values and the cond's predicate
    register of while op ``op``, or raise NotLowered."""
    cond, body = op.regions
    carries = [low.value(t, ("carry", k)) for k, t in enumerate(op.operand_types)]
    ccaps = [low.value(v, ("ccap", j)) for j, v in enumerate(ccap)]
    bcaps = [low.value(v, ("bcap", j)) for j, v in enumerate(bcap)]
    low.in_cond = True
    pred = low.block(cond, carries, ccaps)[0]
    low.in_cond = False
    n_cond = len(low.code)
    res = low.block(body, carries, bcaps)
    if pred.__class__ is not int or low.types[pred] != _chainvm._BOOL:
        raise NotLowered("the cond's result is not a bool")
    for c, r in zip(carries, res):
        if (c.__class__ is int) != (r.__class__ is int) or c.__class__ is Arr and (
                r.id != c.id or r.version != low.versions[c.id]):
            raise NotLowered("an array carry's result is not its own latest version")
    return carries, ccaps, bcaps, res, pred, n_cond


def lower(program, op, ccap, bcap, checks=()):
    """The :class:`LoopProgram` of while op ``op`` of ``program`` (a
    compiler.Op whose regions are the cond and body Blocks; ``ccap`` and
    ``bcap`` this run's captured values, whose shapes and dtypes the caller
    checks on every later run: ``checks``, CompiledLoop's), or None when the
    machine cannot run it (or is off)."""
    if not _chainvm.enabled():
        return None
    low = _Lowering(program)
    try:
        carries, ccaps, bcaps, res, pred, n_cond = _lower_regions(low, op, ccap, bcap)
    except NotLowered:
        return None
    moves = [(c, r) for c, r in zip(carries, res) if c.__class__ is int and c != r]
    body, moves = _write_carries(low.code[n_cond:], moves)
    code = low.code[:n_cond] + body
    header = [_LMAGIC, len(low.types), n_cond, len(code) - n_cond, pred, len(moves),
              len(low.arrays)]
    words = header + low.types + [t for t, _ in low.arrays]
    words += [w for ins in code for w in _words(ins)] + [w for m in moves for w in m]
    prog = np.array(words, np.int32).tobytes()
    low.n_cond, low.ccaps = n_cond, ccaps
    return LoopProgram(prog, low, code, carries, ccaps + bcaps, op, checks)
