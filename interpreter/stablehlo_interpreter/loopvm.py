"""Scalar `stablehlo.while` loops run entirely by the block machine
(``_chains.run_loop``, C: see _chains.c).

loopgen.py compiles a hot while loop into one generated Python function on
numpy scalars: about 0.1 us per op, Python's floor. A loop whose cond and
body (``func.call`` inlined) hold only 0-d values of the machine's types
(bool, 8- to 64-bit integers, f32, f64) and only ops :func:`chainvm.lower`
accepts (integer and bit ops, shifts, compares, select, converts but float
-> integer, f32/f64 basic arithmetic, clamp), plus aliases (0-d reshape,
broadcast_in_dim, optimization_barrier, same-type convert), runs here as one
loop program: a register per value (carries, captures, constants,
intermediates), the cond's and the body's instructions, and the moves of the
body's results into the carries (a parallel assignment). The machine computes
each op's numpy-kernel bits (tests/test_chainvm.py, tests/test_loopvm.py),
so both numerics modes share it, as they share the fused chains' segments.

``run_loop`` runs at most :data:`CHUNK_INSTRUCTIONS` instructions' worth of
iterations per call, GIL released, and checks for signals before it
returns; the Python loop around it calls it again until the cond is false.
Between calls the interpreter's Python runs, so Ctrl-C and the execute
deadline (an exception raised asynchronously in the running thread) stop a
loop within about a millisecond, reported on the while op as the generated
loop reports them.

Anything else (a nested while/if/case, a transcendental, an array value, a
float -> integer convert) leaves the loop to loopgen's generated Python.
Without the C module or with ``STABLEHLO_REF_CHAIN_VM=0`` no loop runs
here: the generated Python gives the same bits.
"""

import numpy as np

from . import chainvm as _chainvm

# Instructions per run_loop call (~1-10 ms): how often the loop returns to
# Python, where a deadline or Ctrl-C can stop it.
CHUNK_INSTRUCTIONS = 1 << 22
# Nested func.call inlining deeper than this leaves the loop to loopgen.
_MAX_INLINE = 32
_LMAGIC = 0x314C4843
_ALIASES = ("stablehlo.reshape", "stablehlo.broadcast_in_dim", "stablehlo.optimization_barrier")


class NotLowered(Exception):
    """The loop has something the machine does not run."""


def _machine_type(t):
    """The machine's type code of a 0-d TensorType (or array), or raise
    NotLowered."""
    try:
        code = _chainvm._TYPES.get(np.dtype(t.dtype))
    except (AttributeError, TypeError):
        code = None
    if code is None or getattr(t, "quant", None) is not None or tuple(t.shape) != ():
        raise NotLowered(f"not a 0-d value of a machine type: {t}")
    return code


class _Lowering:
    """Registers and instructions of one loop program."""

    def __init__(self, program):
        self.program = program
        self.types = []          # per register: machine type code
        self.consts = {}         # register -> 0-d array (its initial value)
        self.code = []           # (op, type, sub, dst, a, b, c, e)
        self.inlining = []

    def reg(self, t_code):
        self.types.append(t_code)
        return len(self.types) - 1

    def const(self, value):
        if not isinstance(value, np.ndarray):
            raise NotLowered("a constant that is not an array")
        r = self.reg(_machine_type(value))
        self.consts[r] = value
        return r

    def block(self, blk, args, caps):
        """Lower Block ``blk`` with argument and capture registers; returns
        the registers of its results."""
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
        for t in list(op.operand_types) + list(op.result_types):
            _machine_type(t)
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
        if name in _ALIASES or (name == "stablehlo.convert"
                                and op.operand_types[0].dtype == op.result_types[0].dtype):
            if len(ins) != len(outs):
                raise NotLowered(f"{name} with {len(ins)} operands")
            env.update((o, get(s)) for o, s in zip(outs, ins))
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
            self.code.append((opcode, t, sub, d, regs))
        env[outs[0]] = res


class LoopProgram:
    """A while op lowered: :meth:`run` (``(ccap, bcap, vals)`` -> the
    loop's results) runs it; ``source`` describes it (STABLEHLO_REF_FAST_LOOPS=print)."""

    def __init__(self, program, types, consts, carries, ccaps, bcaps, n_cond, n_instr):
        self.program = program
        state = np.zeros(len(types), np.uint64)
        raw = state.view(np.uint8)
        for r, value in consts.items():
            raw[8 * r:8 * r + value.itemsize] = value.reshape(1).view(np.uint8)
        self.state = state.tobytes()
        self.inputs = tuple(8 * r for r in (*carries, *ccaps, *bcaps))
        self.outputs = tuple((_chainvm._dtype_of(types[r]), 8 * r) for r in carries)
        self.steps = max(1, CHUNK_INSTRUCTIONS // max(1, n_instr))
        self.source = (f"# _chains.run_loop: {len(types)} registers, {n_cond} cond and "
                       f"{n_instr - n_cond} body instructions, carries in registers {carries}")

    def run(self, ccap, bcap, vals):
        # The registers: a bytearray (pymalloc's blocks are 16-byte aligned;
        # run_loop checks it); the results are 0-d arrays over it.
        state = bytearray(self.state)
        for off, v in zip(self.inputs, (*vals, *ccap, *bcap)):
            state[off:off + v.itemsize] = v.tobytes()
        vals.clear()
        run_loop, program, steps = _chainvm._chains.run_loop, self.program, self.steps
        while not run_loop(program, state, steps):
            pass
        return [np.ndarray((), dt, state, off) for dt, off in self.outputs]


def _write_carries(body, moves):
    """The body instructions with the one making a carry's new value writing
    the carry itself, where no later instruction (nor another carry's move)
    reads the carry's old value, and the moves left: a move is a load and a
    store per iteration on the loop's critical path."""
    body = list(body)
    writer = {ins[3]: k for k, ins in enumerate(body)}
    sources = {r for _, r in moves}
    left, rename = [], {}
    for c, r in moves:
        k = writer.pop(r, None)
        if k is None or c in sources or any(c in ins[4] for ins in body[k + 1:]):
            if k is not None:
                writer[r] = k
            left.append((c, r))
            continue
        opcode, t, sub, _, regs = body[k]
        body[k] = (opcode, t, sub, c, regs)
        for j in range(k + 1, len(body)):
            o, t2, s2, d2, regs2 = body[j]
            body[j] = (o, t2, s2, d2, tuple(c if x == r else x for x in regs2))
        rename[r] = c
    return body, [(c, rename.get(r, r)) for c, r in left]


def lower(program, op, ccap, bcap):
    """The :class:`LoopProgram` of while op ``op`` of ``program`` (a
    compiler.Op whose regions are the cond and body Blocks; ``ccap`` and
    ``bcap`` this run's captured values, whose shapes and dtypes the caller
    checks on every later run), or None when the machine cannot run it (or
    is off)."""
    if not _chainvm.enabled():
        return None
    cond, body = op.regions
    low = _Lowering(program)
    try:
        carries = [low.reg(_machine_type(t)) for t in op.operand_types]
        ccaps = [low.reg(_machine_type(v)) for v in ccap]
        bcaps = [low.reg(_machine_type(v)) for v in bcap]
        pred = low.block(cond, carries, ccaps)[0]
        n_cond = len(low.code)
        res = low.block(body, carries, bcaps)
    except NotLowered:
        return None
    if low.types[pred] != _chainvm._BOOL:
        return None
    moves = [(c, r) for c, r in zip(carries, res) if c != r]
    body, moves = _write_carries(low.code[n_cond:], moves)
    code = low.code[:n_cond] + body
    header = [_LMAGIC, len(low.types), n_cond, len(code) - n_cond, pred, len(moves)]
    words = header + low.types + [w for op, t, sub, d, regs in code
                                  for w in (op, t, sub, d, *regs, *[0] * (4 - len(regs)))]
    words += [w for m in moves for w in m]
    prog = np.array(words, np.int32).tobytes()
    return LoopProgram(prog, low.types, low.consts, carries, ccaps, bcaps, n_cond,
                       len(low.code))

