"""Runs of exact elementwise ops of a fused chain as one program of the
block machine ``_chains`` (C, see _chains.c).

A fused step (fusion.py) runs its members one numpy call per chunk of 128K
elements: each intermediate value is written to and read back from the L2
cache. Where consecutive members are ops whose bits the machine computes
exactly as their numpy kernels do (integer add/sub/mul, bit ops, shifts,
compares, select, bitcast between equal widths, converts but float ->
integer, float32/float64 add/sub/mul/div/negate/abs/maximum/minimum, clamp:
:func:`lower`), the run becomes a :class:`Segment`: a program made once,
when the fused step is made, that the chunk code runs over the chunk in
blocks of :data:`BLOCK_BYTES` per value, the run's intermediate values
staying in the L1 cache. float32 transcendentals whose kernel is one of
ops/fastmath.py's (``KernelInfo.f32_loop``: erf, tanh, exp, logistic, ...)
join the run too, as the machine's FM instruction, a call of that
``_fastmath`` function's C loop on the block: the loop names the elements
whose float64 value it cannot round surely right (about 1 in 8000), and
:meth:`Segment.run` recomputes the run's outputs at those elements with the
members' own kernels (one call each on the gathered elements), so every
element gets the kernels' bits. Other members (other transcendentals,
float -> integer converts, integer division, reduces) run as before between
segments.

Both numerics modes share the segments: these ops are exact (integer and
bit ops) or one IEEE rounding (float basic arithmetic), which both modes
compute alike. Without the C module (not built) or with
``STABLEHLO_REF_CHAIN_VM=0`` there are no segments: the members run their
numpy kernels, with the same bits (tests/test_chainvm.py compares the two).

:func:`lower` also serves loopvm.py, which runs a whole scalar while loop
whose ops it accepts as one machine loop (``_chains.run_loop``).
"""

import numpy as np

from . import config as _config
from .registry import kernel_info

try:
    from . import _chains
except ImportError:   # not built: fused chains run every member's numpy kernel
    _chains = None
try:
    from ._fastmath import LOOPS as _FM_LOOPS
except ImportError:   # not built: transcendentals stay between the machine's runs
    _FM_LOOPS = ()

# Bytes of a block of the widest value of a segment: its values' blocks stay
# in the L1 cache (32-48 KiB) together.
BLOCK_BYTES = 8192
# Fewer members gain nothing: one op is one memory pass either way.
MIN_MEMBERS = 2

_MAGIC = 0x314E4843
_K_IN, _K_OUT, _K_TMP = 0, 1, 2
_TYPES = {np.dtype(t): k for k, t in enumerate(
    (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
     np.float32, np.float64))}
_DTYPES = {k: t for t, k in _TYPES.items()}   # type code -> numpy dtype
_BOOL, _F32, _F64 = _TYPES[np.dtype(np.bool_)], _TYPES[np.dtype(np.float32)], \
    _TYPES[np.dtype(np.float64)]
(ADD, SUB, MUL, DIV, NEG, ABS, AND, OR, XOR, NOT, SHL, SHRL, SHRA, MAX, MIN, CMP, SELECT, COPY,
 CVT, SHLOR, SHLORXOR) = range(1, 22)
FM = 104   # a _fastmath loop (block programs only: _chains.c's OP_FM)
_DIRECTIONS = {"EQ": 0, "NE": 1, "LT": 2, "LE": 3, "GT": 4, "GE": 5}
_TOTALORDER = 8

_ARITH = {"stablehlo.add": ADD, "stablehlo.subtract": SUB, "stablehlo.multiply": MUL,
          "stablehlo.maximum": MAX, "stablehlo.minimum": MIN}
_BITS = {"stablehlo.and": AND, "stablehlo.or": OR, "stablehlo.xor": XOR}
_SHIFTS = {"stablehlo.shift_left": SHL, "stablehlo.shift_right_logical": SHRL,
           "stablehlo.shift_right_arithmetic": SHRA}
_UNARY = {"stablehlo.negate": NEG, "stablehlo.abs": ABS}


def enabled():
    return _chains is not None and _config.CHAIN_VM.value()


def _is_float(t):
    return t in (_F32, _F64)


def _signed_as(t, signed):
    """The integer type of ``t``'s width, signed or not."""
    size = np.dtype(_dtype_of(t)).itemsize
    return _TYPES[np.dtype(f"{'i' if signed else 'u'}{size}")]


def _dtype_of(t):
    return _DTYPES[t]


def lower(op):
    """The machine's instructions for one fused member ``op``:
    ``[(opcode, type, sub, dst, operands)]`` with operands and dst as
    operand positions, "r" (the result) or "t" (a temporary), or None
    when the machine does not compute this op on these types."""
    types = [_TYPES.get(np.dtype(t.dtype)) if getattr(t, "quant", None) is None else None
             for t in list(op.operand_types) + list(op.result_types)]
    if None in types or len(op.result_types) != 1:
        return None
    *ins, r = types
    t = ins[0] if ins else None
    name = op.name
    same = all(x == t for x in ins) and r == t
    if name in _ARITH and same and t != _BOOL:
        return [(_ARITH[name], t, 0, "r", (0, 1))]
    if name == "stablehlo.divide" and same and _is_float(t):
        return [(DIV, t, 0, "r", (0, 1))]
    if name == "chlo.square" and same and t != _BOOL:   # x * x, as its kernel computes
        return [(MUL, t, 0, "r", (0, 0))]
    if name in _UNARY and same and t != _BOOL:
        return [(_UNARY[name], t, 0, "r", (0,))]
    if name in _BITS and same and not _is_float(t):
        return [(_BITS[name], t, 0, "r", (0, 1))]
    if name == "stablehlo.not" and same and not _is_float(t):
        return [(NOT, t, 0, "r", (0,))]
    if name in _SHIFTS and same and t != _BOOL and not _is_float(t):
        return [(_SHIFTS[name], t, 0, "r", (0, 1))]
    if name == "stablehlo.clamp" and len(ins) == 3 and all(x == r for x in ins) and r != _BOOL:
        # clamp(lo, x, hi) = min(max(x, lo), hi), as the kernel computes it
        return [(MAX, r, 0, "t", (1, 0)), (MIN, r, 0, "r", ("t", 2))]
    if name == "stablehlo.select" and len(ins) == 3 and ins[0] == _BOOL \
            and ins[1] == ins[2] == r:
        return [(SELECT, r, 0, "r", (0, 1, 2))]
    if name == "stablehlo.compare":
        return _lower_compare(op, ins, r)
    if name == "stablehlo.convert" and len(ins) == 1 \
            and not (_is_float(t) and r not in (_BOOL, _F32, _F64)):
        return [(COPY if t == r else CVT, t, 0, "r", (0,))]
    if name == "stablehlo.bitcast_convert" and len(ins) == 1 and _BOOL not in (t, r) \
            and _dtype_of(t).itemsize == _dtype_of(r).itemsize:
        return [(COPY, t, 0, "r", (0,))]
    return None


def lower_member(op, fn):
    """:func:`lower` of a fused member whose kernel is ``fn``, and the FM
    instruction for a float32 transcendental whose kernel is a _fastmath
    function's (``KernelInfo.f32_loop``), or None."""
    code = lower(op)
    if code is not None:
        return code
    name = kernel_info(fn).f32_loop
    if name in _FM_LOOPS and len(op.operand_types) == len(op.result_types) == 1 \
            and all(getattr(t, "quant", None) is None and np.dtype(t.dtype) == np.float32
                    for t in (op.operand_types[0], op.result_types[0])):
        return [(FM, _F32, _FM_LOOPS.index(name), "r", (0,))]
    return None


def _lower_compare(op, ins, r):
    """compare: the type whose order the kernel uses (ops/elementwise.py's
    _compare_general: an integer compare_type reinterprets the bits)."""
    sub = _DIRECTIONS.get(op.attrs.get("comparison_direction"))
    ctype = op.attrs.get("compare_type")
    if sub is None or len(ins) != 2 or ins[0] != ins[1] or r != _BOOL:
        return None
    t = ins[0]
    if _is_float(t):
        if ctype == "TOTALORDER":
            sub |= _TOTALORDER
        elif ctype not in (None, "FLOAT"):
            return None
    elif t != _BOOL:
        signed = _dtype_of(t).kind == "i"
        if ctype == "UNSIGNED" and signed or ctype == "SIGNED" and not signed:
            t = _signed_as(t, not signed)
    return [(CMP, t, sub, "r", (0, 1))]


def _rotations(code, kept):
    """``code`` with ``or(shl(x, l), shrl(x, r))`` as one SHLOR instruction
    and a following ``xor`` with it as SHLORXOR (threefry's rotations and
    rounds: five passes over a block become two), where the shifts' and
    the or's results are read by nothing else. Each shift keeps its own
    out-of-range rule, so any amounts give the ops' bits."""
    reads = {}
    for c in code:
        for a in c[4]:
            reads[a] = reads.get(a, 0) + 1
    maker = {c[3]: k for k, c in enumerate(code)}

    def single(v):   # read once, by one instruction, and not kept
        return reads.get(v) == 1 and v not in kept and v in maker

    code = list(code)
    gone = set()
    for k, (opcode, t, _, dst, ops) in enumerate(code):
        if opcode == OR and len(set(ops)) == 2 and all(single(a) for a in ops):
            shifts = {code[maker[a]][0]: code[maker[a]] for a in ops}
            left, right = shifts.get(SHL), shifts.get(SHRL)
            if left is None or right is None or left[4][0] != right[4][0] \
                    or left[1] != t or right[1] != t:
                continue
            code[k] = (SHLOR, t, 0, dst, (left[4][0], left[4][1], right[4][1]))
            gone |= {maker[a] for a in ops}
        elif opcode == XOR and len(set(ops)) == 2:
            rot = next((a for a in ops if single(a) and code[maker[a]][0] == SHLOR
                        and code[maker[a]][1] == t), None)
            if rot is not None:
                other = ops[1] if ops[0] == rot else ops[0]
                code[k] = (SHLORXOR, t, 0, dst, code[maker[rot]][4] + (other,))
                gone.add(maker[rot])
    return [c for k, c in enumerate(code) if k not in gone]


class Segment:
    """A run of fused members as one machine program.

    ``members``: ``(op, args, res, fn)`` per member, in order (args and res
    are the chain's value numbers, fn its kernel: :func:`lower_member`, and
    the recomputation of flagged elements); ``dtype``: value -> numpy dtype; ``inputs``:
    the values the run reads and does not make, in the order :meth:`run`
    takes them; ``outputs``: ``(value, store, returned)`` per value the run
    must leave: written to stored output ``store`` (or None) and returned
    (read after the run) or not.
    """

    def __init__(self, members, dtype, inputs, outputs):
        self.in_dtypes = tuple(np.dtype(dtype[v]) for v in inputs)
        self.outputs = tuple((store, np.dtype(dtype[v]), ret) for v, store, ret in outputs)
        self.returned = tuple(v for v, _, ret in outputs if ret)
        self.inputs = tuple(inputs)
        self.out_values = tuple(v for v, _, _ in outputs)
        self.kernels = tuple((fn, args, res) for _, args, res, fn in members)
        code = []   # (opcode, type, sub, dst, operands), values numbered below
        temps = 0
        for op, args, res, fn in members:
            lowered = lower_member(op, fn)
            if lowered is None:
                raise ValueError(f"chainvm: {op.name} is not a machine op")
            temp = ("t", temps)
            temps += 1
            for opcode, t, sub, dst, operands in lowered:
                where = {"r": res, "t": temp}
                code.append((opcode, t, sub, where.get(dst, dst),
                             tuple(where[a] if a in where else args[a] for a in operands)))
        kept = [v for v, _, _ in outputs]
        # Each FM instruction may flag each element once: the flags buffer
        # holds n indices per FM instruction.
        self.n_fm = sum(c[0] == FM for c in code)
        self.program = self._assemble(_rotations(code, set(kept)), dtype, list(inputs), kept)

    @staticmethod
    def _assemble(code, dtype, inputs, outputs):
        """The program bytes (layout: _chains.c's header comment)."""
        number = {}
        kinds = []

        def value(v, t):
            if v not in number:
                number[v] = len(kinds)
                if v in inputs:
                    kinds.append([t, _K_IN, inputs.index(v)])
                elif v in outputs:
                    kinds.append([t, _K_OUT, outputs.index(v)])
                else:
                    kinds.append([t, _K_TMP, -1])
            return number[v]

        for v in inputs:
            value(v, _TYPES[np.dtype(dtype[v])])
        last = {}
        for k, (_, _, _, dst, operands) in enumerate(code):
            for a in operands:
                last[a] = k
        words = []
        free, n_slots = [], 0
        for k, (opcode, t, sub, dst, operands) in enumerate(code):
            args = [value(a, None) for a in operands]
            rt = t if dst.__class__ is tuple else _TYPES[np.dtype(dtype[dst])]
            d = value(dst, rt)
            if kinds[d][1] == _K_TMP:   # a slot no live value holds (operands' too)
                if free:
                    kinds[d][2] = free.pop()
                else:
                    kinds[d][2], n_slots = n_slots, n_slots + 1
            for a, n in zip(operands, args):
                if last.get(a) == k and kinds[n][1] == _K_TMP and kinds[n][2] not in free:
                    free.append(kinds[n][2])
            if last.get(dst) is None and kinds[d][1] == _K_TMP:   # never read
                free.append(kinds[d][2])
            args += [0] * (4 - len(args))
            words += [opcode, t, sub, d] + args
        widest = max((_dtype_of(t).itemsize for t, _, _ in kinds), default=1)
        block = max(1, BLOCK_BYTES // widest)
        header = [_MAGIC, len(kinds), len(inputs), len(outputs), n_slots, len(code), block]
        return np.array(header + [w for k in kinds for w in k] + words, np.int32).tobytes()

    def run(self, ins, targets, lo, hi, cshape, scale, late=None):
        """The returned values of the run over chunk ``lo:hi`` (``targets``,
        ``cshape`` and ``scale`` as fusion.py's chunk code has them), the
        stored ones written to their chunk of ``targets``; or None when an
        input is not an array of its type and of the chunk's size or one
        element: then the members run their kernels. The elements an FM
        instruction flagged are recomputed before it returns; or, given a
        list ``late`` and when the run returns nothing (its outputs are
        only stored: nothing reads them before the fused step ends), their
        inputs are appended to ``late`` and :func:`finish` recomputes them
        all at once (one redo per call instead of one per chunk: ~30 us
        each, mostly the members' Python calls)."""
        n = (hi - lo) * scale
        bufs = []
        for x, dt in zip(ins, self.in_dtypes):
            if x.__class__ is not np.ndarray or x.dtype != dt:
                return None
            if x.size == n and x.flags.c_contiguous:
                bufs.append(x)
            elif x.size == 1 or x.size and not any(x.strides):
                bufs.append(x[(slice(0, 1),) * x.ndim])   # one value
            elif x.size == n and all(st or d == 1 for st, d in zip(x.strides, x.shape)):
                # A strided chunk (rows of a transposed operand): one copy
                # in cache, in the order of the others (C order of the
                # chunk's shape). Not a broadcast (a row statistic over its
                # rows): the members' code takes it as it is (fusion's
                # _row_op), faster than a full copy per chunk (softmax's
                # x - max then exp, (1000, 1000) f32: 2.9 ms copied, 2.3-2.5
                # ms so).
                bufs.append(np.ascontiguousarray(x))
            else:
                return None
        outs = [targets[store][lo:hi] if store is not None else np.empty(cshape, dt)
                for store, dt, _ in self.outputs]
        flags = np.empty(n * self.n_fm, np.int64) if self.n_fm else None
        flagged = _chains.run(self.program, n, bufs, outs, flags)
        if flagged:
            idx = np.unique(flags[:flagged])
            ins = [b.reshape(-1)[idx] if b.size == n else np.repeat(b.reshape(-1)[:1], idx.size)
                   for b in bufs]
            if late is None or self.returned:
                for o, y in zip(outs, self._redo(ins)):
                    o.reshape(-1)[idx] = y
            else:
                late.append((self, lo * scale + idx, ins))
        return [o for o, (_, _, ret) in zip(outs, self.outputs) if ret]

    def _redo(self, ins):
        """The run's outputs (in order) at some elements, from the inputs
        ``ins`` at those elements, by the members' kernels: elementwise
        kernels give each element the same bits however many they get."""
        vals = dict(zip(self.inputs, ins))
        for fn, args, res in self.kernels:
            vals[res] = fn(*[vals[a] for a in args])
        return [vals[v] for v in self.out_values]


def finish(late, targets):
    """The flagged elements :meth:`Segment.run` left in ``late`` (flat
    indices into ``targets``, the fused step's outputs), recomputed: one
    redo per segment."""
    runs = {}
    for seg, idx, ins in late:
        runs.setdefault(seg, []).append((idx, ins))
    for seg, parts in runs.items():
        idx = np.concatenate([i for i, _ in parts])
        ins = [np.concatenate(col) for col in zip(*(x for _, x in parts))]
        for (store, _, _), y in zip(seg.outputs, seg._redo(ins)):
            targets[store].reshape(-1)[idx] = y
