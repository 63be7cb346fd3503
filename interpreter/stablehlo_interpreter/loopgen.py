"""Generated Python for `stablehlo.while` loops that run many iterations.

The plain plan runs one loop iteration as a Block.run of the cond and one of
the body (and one more per func.call in them), every op through the generic
step dispatch on 0-d numpy arrays: about a microsecond per op and per block.
A loop whose iterations add up (``GENERATE_AFTER`` plain iterations of one
while op, over all runs) is compiled once into one Python function (``exec``):

* the cond and the body are inlined into one ``while True:``, the loop values
  and every intermediate value are local variables;
* ``func.call`` of the module's functions (the bodies JAX emits for scan and
  fori_loop) is inlined, as are nested while/if/case (Python control flow);
* ops on 0-d values of the common element types (bool, 8- to 64-bit
  integers, f16, bf16, f32, f64, complex) are numpy *scalar* arithmetic:
  ``a + b`` on two ``np.float32`` is the same IEEE operation as the kernel's
  ``np.add`` on 0-d arrays, integers wrap the same way; small helpers do
  the kernels' special cases (integer division by zero, NaN and signed
  zeros in float max/min). Only the op/dtype pairs in the tables below run
  so, each checked bit for bit against its kernel by tests/test_loopgen.py
  (specials, overflow, NaN payloads); f32/f16 transcendentals (their
  builders' ``KernelInfo.scalar_math``) are
  ``math`` on Python floats rounded once, with the kernel near halfway
  points; same-width bitcast_convert goes through a one-element buffer of
  each type made once per call; the rest (complex multiply, float
  remainder, bf16 transcendentals...) call the op's own kernel on 0-d
  arrays made on the spot;
* ops of only loop-invariant values (constants, captures, carries the body
  returns unchanged) that the registry marks foldable (pure) run once in a
  preheader before the loop (not from inside if/case branches, which may not
  run); a loop whose BLAS products are all small holds numpy's OpenBLAS at
  one thread for the whole run (blas.single_threaded; dot_general then
  calls np.matmul directly);
* dynamic_slice / dynamic_update_slice with scalar start indices and static
  shapes index the array directly (the scan pattern: read row ``i`` of xs,
  write row ``i`` of ys in place), with the kernels' clamping;
* an elementwise op on arrays (rank >= 1) whose kernel is
  ``as_result(ufunc, dtype)`` and whose ufunc alone gives the result type
  (fusion._direct_ufunc) calls the ufunc directly (direct_ufunc), skipping
  the wrapper's tests of the result;
* every other op calls its kernel exactly as the plan does, array bodies stay
  vectorized.

A loop of only one-element values of the block machine's types (and 1-D
arrays read and written one element at a time) and ops it computes is not
generated: it runs as one C loop (loopvm.py, ``_chains.run_loop``;
the same bits, tests/test_loopvm.py), unless the module is not built or
``STABLEHLO_REF_CHAIN_VM=0``.

Same behaviour as the plain plan: in-place updates only of arrays nothing
else refers to (the refcount test of Block.run, on locals that are cleared at
their last use as frames free their slots); an op's failure is an
ExecutionError naming that op (the line of the generated code that failed
maps to its op); the execute deadline and Ctrl-C land in the generated loop
like anywhere else. Tracing (a tracer, ``STABLEHLO_REF_TRACE_OPS``) and
``STABLEHLO_REF_VALIDATE`` runs use the plain plan, as does a loop whose
values do not have their declared types (batched region calls).
``STABLEHLO_REF_FAST_LOOPS=0`` turns generation off, ``=print`` prints
the generated functions to stderr, ``=always`` generates every loop from its
first iteration (and fails where it cannot: for testing).
"""

import math
import sys
from math import copysign as _copysign

import ml_dtypes
import numpy as np

from . import blas as _blas
from . import compiler as _compiler
from . import config as _config
from . import fusion as _fusion
from . import loopvm as _loopvm
from .errors import ExecutionError, InterpreterError, Interrupt
from .quant import involves_quant
from .registry import has_trait, kernel_info, scalar_math
from .types import TensorType

# STABLEHLO_REF_FAST_LOOPS: 0 = off; 1 = on (default); print = on, and print
# each generated function to stderr; always = generate every loop at its
# first iteration and fail if it cannot be (for testing the generator).
_SWITCH = _config.FAST_LOOPS.value()   # module constants: tests set them
ENABLED = _SWITCH != "0"
PRINT = _SWITCH == "print"
# Plain iterations of one while op (summed over runs) before it is compiled:
# a loop of a few iterations is not worth the compile (about 1 ms).
GENERATE_AFTER = 0 if _SWITCH == "always" else 64
# A failure to generate raises instead of falling back to the plan.
STRICT = _SWITCH == "always"

# Limits that keep the generated function compilable and its size sane.
_MAX_OPS = 20_000          # ops emitted per loop (calls past it are not inlined)
_MAX_LOOP_NESTING = 12     # nested inlined loops (CPython allows 20 blocks)
_MAX_INDENT = 60           # indentation levels (CPython allows 100)

# Element types held as numpy scalars when 0-d, with their kind ("h": bf16,
# whose scalar arithmetic is ml_dtypes').
FAST_KIND = {np.dtype(t): k for t, k in [
    (np.bool_, "b"),
    (np.int8, "i"), (np.int16, "i"), (np.int32, "i"), (np.int64, "i"),
    (np.uint8, "u"), (np.uint16, "u"), (np.uint32, "u"), (np.uint64, "u"),
    (np.float16, "f"), (np.float32, "f"), (np.float64, "f"), (ml_dtypes.bfloat16, "h"),
    (np.complex64, "c"), (np.complex128, "c"),
]}

# Scalar helpers for ops whose kernels have special cases (division by zero,
# NaN and signed zeros): the generated code calls them on numpy scalars.


def _int_divide(a, b):
    """divide of two signed integer scalars of one type: truncating; x / 0 =
    -1 (all ones) and INT_MIN / -1 = INT_MIN, as the kernel (XLA's choice).
    numpy scalar arithmetic (wrapping; errors are ignored in a run), no
    Python ints: floor division corrected towards zero."""
    if not b:
        return ~(a ^ a)      # all ones of a's type
    if b == -1:
        return -a            # wraps INT_MIN to itself
    q = a // b
    if q < 0 and a % b:
        q += 1               # the floor of a negative inexact quotient
    return q


def _int_remainder(a, b):
    """remainder of two signed integer scalars: the sign of the dividend,
    x % 0 = x (numpy's % takes the divisor's sign)."""
    if not b:
        return a
    r = a % b
    if r and (r < 0) != (a < 0):
        r -= b
    return r


def _float_max(a, b):
    """maximum of two float scalars: NaN wins (the first), +0 > -0."""
    if a > b:
        return a
    if b > a:
        return b
    if a == b:
        return b if _copysign(1.0, a) < 0 else a
    return a if a != a else b


def _float_min(a, b):
    """minimum of two float scalars: NaN wins (the first), -0 < +0."""
    if a < b:
        return a
    if b < a:
        return b
    if a == b:
        return a if _copysign(1.0, a) < 0 else b
    return a if a != a else b


def _float_to_int(x, t, _bounds={}):
    """convert of a float scalar to integer type ``t``: truncated, NaN -> 0,
    saturated at the type's bounds (the kernel's rule). Python floats and
    ints compare exactly; the int, in range, joins t's zero (NEP 50)."""
    b = _bounds.get(t)
    if b is None:
        info = np.iinfo(t)
        b = _bounds[t] = (int(info.min), int(info.max) + 1, t(0), t(info.min), t(info.max))
    lo, end, zero, tlo, thi = b
    f = float(x)
    if lo <= f < end:
        return zero + int(f)
    return thi if f > 0 else (tlo if f < 0 else zero)


def _total_key(x, _signed={}):
    """IEEE totalOrder key of a float scalar: its bits as a signed integer,
    every bit but the sign flipped when negative (the kernel's
    _total_order_signed, on one value)."""
    t = type(x)
    sd = _signed.get(t)
    if sd is None:
        sd = _signed[t] = (np.dtype(f"int{np.dtype(t).itemsize * 8}"),
                           (1 << (np.dtype(t).itemsize * 8 - 1)) - 1)
    v = int(np.asarray(x).view(sd[0]))
    return v ^ sd[1] if v < 0 else v


def _total_order(a, b):
    """-1, 0 or 1: the IEEE totalOrder of two float scalars of one type
    (compare_type TOTALORDER). Ordered unequal values compare as floats;
    zeros and NaNs by their keys."""
    if a < b:
        return -1
    if b < a:
        return 1
    if a == b and a:
        return 0             # equal nonzero values have equal bits
    ka, kb = _total_key(a), _total_key(b)
    return (ka > kb) - (ka < kb)


def _int_sign(a, _signs={}):
    """sign of an integer scalar: -1, 0 or 1 of its type."""
    t = type(a)
    signs = _signs.get(t)
    if signs is None:
        signs = _signs[t] = (t(0), t(1), np.array(-1).astype(t)[()])
    return signs[1] if a > 0 else (signs[2] if a < 0 else signs[0])


def _float_sign(a, _signs={}):
    """sign of a float scalar: +-1, and NaN and +-0 as they are."""
    t = type(a)
    signs = _signs.get(t)
    if signs is None:
        signs = _signs[t] = (t(1), t(-1))
    return signs[0] if a > 0 else (signs[1] if a < 0 else a)


# Transcendental ops on f32/f16/bf16 scalars: the kernels evaluate them in
# float64 (numpy / scipy.special) and round once to the element type. The
# generated code evaluates them with Python's ``math`` on a Python float
# (libm, also within an ulp or two of the exact value) and rounds once; where
# the two float64 values could round differently -- the libm value lies
# within the guard of _MATH_TYPES (float64 ulps) of a halfway point of the
# element type, or is subnormal there, non-finite, or libm raises (domain errors, overflow) --
# the op's own kernel runs on a 0-d array instead. So the scalar form gives
# the kernel's bits (tests/test_loopgen.py checks it value by value). The
# ``math`` function of an op is its builder's KernelInfo.scalar_math
# (registry.scalar_math), given where the kernel is registered.
# Per element type: the low float64 mantissa bits its rounding drops, the
# smallest normal and the largest finite magnitude (outside: the kernel), the
# guard (in float64 ulps). (bf16 is not here: its ml_dtypes scalars cost a microsecond an op.)
_MATH_TYPES = {np.dtype(np.float32): (29, 2.0 ** -126, float(np.finfo(np.float32).max), 1 << 16),
               np.dtype(np.float16): (42, 2.0 ** -14, float(np.finfo(np.float16).max), 1 << 16)}


def rounded_math(fn, kernel, dtype):
    """A scalar function: ``fn`` (float64 -> float64, ``math``) rounded once
    to ``dtype``, or ``kernel`` (the op's kernel, on a 0-d array) where the
    rounding is not certain to equal the kernel's (see above)."""
    _, tiny, huge, guard = _MATH_TYPES[np.dtype(dtype)]
    # -0.0 + y rounds the Python float y once to dtype (NEP 50: a Python
    # float next to a numpy scalar takes its type) and keeps y's sign of
    # zero: four times cheaper than calling the type.
    neg_zero = np.dtype(dtype).type(-0.0)
    # Rounding is monotonic: when y shrunk and grown by the guard (relative,
    # 2**16 float64 ulps of y's binade or more) round to the same value,
    # every float64 within the guard of y -- the kernel's among them --
    # rounds to it too. Two roundings and two products, cheaper than
    # reading y's low mantissa bits.
    rel = guard * 2.0 ** -52
    below, above = 1.0 - rel, 1.0 + rel
    asarray = np.asarray

    def scalar(x):
        try:
            y = fn(float(x))
            if tiny <= abs(y) < huge:
                r = neg_zero + y * below
                if r == neg_zero + y * above:
                    return r
        except (ValueError, OverflowError, ZeroDivisionError):
            pass   # NaN, infinities, domain errors: the kernel's answer
        return kernel(asarray(x))[()]
    return scalar


# Functions the forms call (globals of the generated code).
HELPERS = {"_idiv": _int_divide, "_irem": _int_remainder, "_fmax": _float_max,
           "_fmin": _float_min, "_isign": _int_sign, "_fsign": _float_sign,
           "_tord": _total_order, "_NB": (np.False_, np.True_), "_float": float,
           "_f2i": _float_to_int, "_int": int,
           "_floor": np.floor, "_ceil": np.ceil, "_rint": np.rint, "_sqrt": np.sqrt}

# Scalar forms of elementwise ops, by operand kind; {0}, {1}... are operands.
# Integer + - * wrap like numpy's integer ufuncs (errors are ignored inside a
# run, see CompiledLoop); f16/bf16 scalar arithmetic rounds the float32 result
# once, as the kernels (which compute f16/bf16 in float32) do. Which NaN a
# float op returns when both operands are NaNs depends on how numpy was
# compiled: binary float forms are checked against the kernels once per
# process (scalar_forms) and swapped (ops with the registry's "commutative"
# trait) or dropped.
BINARY = {
    "stablehlo.add": {"b": "({0} | {1})", "i": "({0} + {1})", "u": "({0} + {1})",
                      "f": "({0} + {1})", "h": "({0} + {1})", "c": "({0} + {1})"},
    "stablehlo.subtract": {"i": "({0} - {1})", "u": "({0} - {1})", "f": "({0} - {1})",
                           "h": "({0} - {1})", "c": "({0} - {1})"},
    "stablehlo.multiply": {"b": "({0} & {1})", "i": "({0} * {1})", "u": "({0} * {1})",
                           "f": "({0} * {1})", "h": "({0} * {1})"},
    # Unsigned: numpy's floor division and modulo are the truncating ones;
    # x / 0 is all ones (~(x ^ x)), x % 0 is x.
    "stablehlo.divide": {"f": "({0} / {1})", "h": "({0} / {1})", "i": "_idiv({0}, {1})",
                         "u": "({0} // {1} if {1} else ~({0} ^ {0}))"},
    "stablehlo.remainder": {"i": "_irem({0}, {1})", "u": "({0} % {1} if {1} else {0})"},
    "stablehlo.and": {"b": "({0} & {1})", "i": "({0} & {1})", "u": "({0} & {1})"},
    "stablehlo.or": {"b": "({0} | {1})", "i": "({0} | {1})", "u": "({0} | {1})"},
    "stablehlo.xor": {"b": "({0} ^ {1})", "i": "({0} ^ {1})", "u": "({0} ^ {1})"},
    "stablehlo.maximum": {"b": "({0} | {1})", "i": "({0} if {0} > {1} else {1})",
                          "u": "({0} if {0} > {1} else {1})", "f": "_fmax({0}, {1})"},
    "stablehlo.minimum": {"b": "({0} & {1})", "i": "({0} if {0} < {1} else {1})",
                          "u": "({0} if {0} < {1} else {1})", "f": "_fmin({0}, {1})"},
    "stablehlo.shift_left": {"u": "({0} << {1})"},
    "stablehlo.shift_right_logical": {"u": "({0} >> {1})"},
    "stablehlo.shift_right_arithmetic": {"i": "({0} >> {1})"},
}
UNARY = {
    # bf16 negate/abs are not here: the kernel goes through float32, which
    # quiets a signaling NaN, the ml_dtypes scalar op does not.
    "stablehlo.negate": {"i": "(-{0})", "u": "(-{0})", "f": "(-{0})", "c": "(-{0})"},
    "stablehlo.not": {"b": "(~{0})", "i": "(~{0})", "u": "(~{0})"},
    "stablehlo.abs": {"i": "abs({0})", "u": "{0}", "f": "abs({0})"},
    "stablehlo.sign": {"i": "_isign({0})", "f": "_fsign({0})"},
    # numpy's ufuncs on one scalar (exact results; sqrt is correctly rounded
    # in every IEEE type): a tenth of the kernel's round trip through 0-d
    # arrays.
    "stablehlo.floor": {"f": "_floor({0})"},
    "stablehlo.ceil": {"f": "_ceil({0})"},
    "stablehlo.round_nearest_even": {"f": "_rint({0})"},
    "stablehlo.sqrt": {"f": "_sqrt({0})"},
}
_CMP = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}
# compare_type each operand kind may carry (None: attribute absent).
_CMP_TYPES = {"b": (None, "UNSIGNED"), "i": (None, "SIGNED"), "u": (None, "UNSIGNED"),
              "f": (None, "FLOAT"), "h": (None, "FLOAT"), "c": (None, "FLOAT")}
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)


def compare_form(direction, compare_type, k):
    """Scalar form of a compare of operands of kind ``k``, or None (the
    kernel runs). TOTALORDER on floats orders through _total_order."""
    sym = _CMP.get(direction)
    if sym is None:
        return None
    if compare_type == "TOTALORDER" and k in "fh":
        return f"_NB[_tord({{0}}, {{1}}) {sym} 0]"
    if compare_type not in _CMP_TYPES[k] or (k == "c" and sym not in ("==", "!=")):
        return None
    return f"({{0}} {sym} {{1}})"


def convert_form(src, dst):
    """Scalar form converting ``src`` to ``dst`` ({T}: the target scalar
    type, {Z}: a zero of the source type, {D}: float64, {N}: -0.0 of the
    target type, 0 for an integer one), or None (the kernel runs)."""
    ks, kd = FAST_KIND.get(src), FAST_KIND.get(dst)
    if ks is None or kd is None:
        return None
    if src == dst:
        return "{0}"
    if kd == "b":
        if ks in "iuf":
            return "({0} != {Z})"   # x != 0, NaN -> true (the kernel's rule)
        return None
    if "h" in (ks, kd) or "c" in (ks, kd):
        return None
    if ks in "biu" and kd in "iu":
        if ks == "b" or (np.iinfo(dst).min <= np.iinfo(src).min
                         and np.iinfo(src).max <= np.iinfo(dst).max):
            # Every value fits: the Python int joins the target's zero
            # (NEP 50), a fifth of the cost of calling the type.
            return "({N} + _int({0}))"
        return "{T}({0})"           # two's complement truncation / extension
    if ks in "biu" and kd == "f":
        if src.itemsize <= 4:
            # The Python float of an integer of up to 32 bits is exact; -0.0
            # of the target type plus it rounds it once (NEP 50: the Python
            # float takes the numpy scalar's type), +0 for 0: a sixth of the
            # cost of calling the type.
            return "({N} + _float({0}))"
        return "{T}({0})"           # one rounding to nearest even
    if ks == "f" and kd == "f":
        # Through float64, as the kernel: a NaN's payload moves as it does there.
        return "{T}({0})" if src == _F64 or dst == _F64 else "{T}({D}({0}))"
    if ks == "f" and kd in "iu":
        return "_f2i({0}, {T})"
    return None


_FORMS = None


def _nans(dtype):
    """0-d NaNs of ``dtype`` that differ in sign and payload."""
    if dtype.kind == "c":
        part = _F32 if dtype.itemsize == 8 else _F64
        a, b, c = _nans(part)
        return [np.array(complex(x[()], y[()])).astype(dtype) for x, y in ((a, b), (b, c), (c, a))]
    bits = dtype.itemsize * 8
    u = np.dtype(f"uint{bits}")
    q = np.array(np.nan, _F32).astype(dtype).view(u)       # the quiet NaN
    sign = u.type(1 << (bits - 1))
    return [q.view(dtype), (q | sign).view(dtype), (q | u.type(3)).view(dtype)]


def scalar_forms():
    """``{(op name, operand dtype): form}`` of BINARY and UNARY, the float
    forms checked on pairs of NaNs against the kernels (once per process)."""
    global _FORMS
    if _FORMS is not None:
        return _FORMS
    from .registry import KERNELS
    forms = {}
    for table in (BINARY, UNARY):
        for name, by_kind in table.items():
            for dtype, k in FAST_KIND.items():
                form = by_kind.get(k)
                if form is None:
                    continue
                if k in "fhc":
                    t = TensorType((), dtype, None)
                    ts = [t, t] if table is BINARY else [t]
                    fn = KERNELS[name](_compiler.Op(name, "", {}, ts, [t], [], None, None))
                    choices = [form]
                    if table is BINARY and has_trait(name, "commutative"):
                        choices.append(form.replace("{0}", "{x}").replace("{1}", "{0}")
                                       .replace("{x}", "{1}"))
                    form = next((f for f in choices if _agrees(f, fn, _nans(dtype))), None)
                    if form is None:
                        continue
                forms[(name, dtype)] = form
    _FORMS = forms
    return forms


def _agrees(form, fn, values):
    if "{1}" not in form:   # unary: each value
        scalar = eval("lambda a: " + form.format("a"), dict(HELPERS))  # noqa: S307
        with np.errstate(all="ignore"):
            for a in values:
                got, want = np.asarray(scalar(a[()])), np.asarray(fn(a))
                if got.dtype != want.dtype or got.tobytes() != want.tobytes():
                    return False
        return True
    scalar = eval("lambda a, b: " + form.format("a", "b"), dict(HELPERS))  # noqa: S307
    with np.errstate(all="ignore"):
        for a in values:
            for b in values:
                got, want = np.asarray(scalar(a[()], b[()])), np.asarray(fn(a, b))
                if got.dtype != want.dtype or got.tobytes() != want.tobytes():
                    return False
    return True


def scalar_type(t):
    """Is a value of type ``t`` held as a numpy scalar in generated code?"""
    return (t.__class__ is TensorType and t.quant is None and t.shape == ()
            and t.dtype in FAST_KIND)


def _static(t):
    return t.__class__ is TensorType and t.quant is None and all(
        d is not None for d in t.shape)


def _same_elements(op, xt, rt):
    """Is op (a reshape, or a broadcast_in_dim that only adds size-1 dims
    in order) the same elements in a new static shape?"""
    if op.name == "stablehlo.reshape":
        return math.prod(xt.shape) == math.prod(rt.shape)
    bdims = tuple(op.attrs.get("broadcast_dimensions", ()))
    if len(bdims) != len(xt.shape) or any(a >= b for a, b in zip(bdims, bdims[1:])):
        return False
    view = [1] * len(rt.shape)
    for i, d in enumerate(bdims):
        if not 0 <= d < len(view):
            return False
        view[d] = xt.shape[i]
    return tuple(view) == tuple(rt.shape)


def _size1(t):
    return _static(t) and all(d == 1 for d in t.shape)


class Val:
    """A value of the generated code: a local (or global) ``name``, its
    ``type``; ``scalar``: held as a numpy scalar (the type is 0-d or has
    only size-1 dims); ``own``: the local holds a reference of its own, to
    be dropped when the value dies (array locals only); ``inv``: the same
    in every iteration of the innermost loop being emitted (see hoisting)."""

    __slots__ = ("name", "type", "scalar", "own", "inv")

    def __init__(self, name, type_, scalar, own, inv=False):
        self.name = name
        self.type = type_
        self.scalar = scalar
        self.own = own
        self.inv = inv

    def alias(self):
        return Val(self.name, self.type, self.scalar, False, self.inv)

    def invariant(self):
        """An alias marked invariant: held (never dropped or updated in
        place) for the whole loop."""
        return Val(self.name, self.type, self.scalar, False, True)


class _UfuncStep:
    """The fields of a plan step that fusion._direct_ufunc reads."""

    __slots__ = ("fn", "ins", "op")

    def __init__(self, fn, ins, op):
        self.fn, self.ins, self.op = fn, ins, op


class _Gen:
    """Emits the source of one loop function."""

    def __init__(self, program):
        self.program = program
        self.lines = []         # (indent, text)
        self.line_ops = []      # the Op each line belongs to
        self.ns = {"_A": np.asarray, "_nd": np.ndarray, "_int": int, "_empty": np.empty,
                   "_grc": _compiler._getrefcount, **HELPERS}
        self.ids = {}
        self.counter = 0
        self.inline_stack = []
        self.ops = 0
        self.loop_nesting = 0
        self.consts = set()     # names of constants
        self.int_consts = {}    # name -> value of 0-d integer constants
        self.clamps = {}        # (index name, limit) -> clamped start, in scope
        self.buffers = {}       # (src, dst) -> bitcast buffer names
        self.products = []      # multiply-adds of each BLAS product (None: unknown)
        # The innermost loop's preheader: (indent, lines, line ops, branch
        # depth of the loop's body, names to drop after it), or None
        # outside loops.
        self.hoist = None
        self.branch_depth = 0   # if/case branches being emitted
        self.prologue = []      # lines run once per call, before the loop

    # -- names -----------------------------------------------------------
    def fresh(self, prefix="v"):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def glob(self, obj, prefix):
        """A global name of the generated code bound to ``obj``."""
        key = id(obj)
        name = self.ids.get(key)
        if name is None:
            name = self.fresh(prefix)
            self.ids[key] = name
            self.ns[name] = obj
        return name

    def emit(self, ind, text, op):
        self.lines.append((ind, text))
        self.line_ops.append(op)

    def new(self, t, scalar=None):
        if scalar is None:
            scalar = scalar_type(t)
        return Val(self.fresh(), t, scalar, not scalar)

    def const(self, value):
        t = TensorType(value.shape, value.dtype, None) if isinstance(value, np.ndarray) else None
        if t is not None and scalar_type(t):
            v = Val(self.glob(value[()], "K"), t, True, False, True)
            if FAST_KIND[t.dtype] in "iu":
                self.int_consts[v.name] = int(value)
        else:
            v = Val(self.glob(value, "K"), t, False, False, True)
        self.consts.add(v.name)
        return v

    # -- representations -------------------------------------------------
    @staticmethod
    def arr(v):
        """Expression giving ``v`` as the plan holds it (an ndarray)."""
        if not v.scalar:
            return v.name
        if v.type.shape == ():
            return f"_A({v.name})"
        return f"_A({v.name}).reshape({tuple(v.type.shape)!r})"

    def coerce(self, v, scalar):
        if v.scalar == scalar:
            return v.name
        if scalar:
            return f"{v.name}[()]"
        return self.arr(v)

    def clear(self, ind, vals, op):
        names = []
        for v in vals:
            if v is not None and v.own and not v.scalar and v.name not in names:
                names.append(v.name)
        if names:
            self.emit(ind, " = ".join(names) + " = None", op)

    # -- blocks ----------------------------------------------------------
    def block(self, blk, ind, args, caps):
        """Emit ``blk`` with the given argument and capture values; returns
        the values of its results."""
        env = {0: None}
        for s, v in zip(blk.arg_slots, args):
            env[s] = v
        for s, v in zip(blk.capture_slots, caps):
            env[s] = v
        for s, c in enumerate(blk.template):
            if c is not None and s not in env:
                env[s] = self.const(c)
        uses = {}
        for step in blk.steps:
            for s in step.ins:
                uses[s] = uses.get(s, 0) + 1
        results = set(blk.result_slots)
        for step in blk.steps:
            self.ops += 1
            self.step(step, env, ind)
            op = step.op
            outs = (step.out,) if step.out.__class__ is int else step.out
            dying = [env.get(s) for s in step.dead]
            dying += [env[o] for o in outs if uses.get(o, 0) == 0 and o not in results]
            self.clear(ind, dying, op)
        return [env[s] for s in blk.result_slots]

    def step(self, step, env, ind):
        fn, ins, out, dead, op = step
        name = op.name
        if self.hoistable(step, env):
            return self.hoisted(step, env)
        if not involves_quant(op):
            # A function or region whose plan runs fused chains is called,
            # not inlined: its kernel runs the plan (runs_fused).
            if name == "func.call":
                callee = self.program.functions.get(op.attrs.get("callee"))
                if callee is not None and callee.name not in self.inline_stack \
                        and self.ops < _MAX_OPS and not runs_fused(callee.block):
                    return self.inline_call(step, env, ind, callee)
            elif name == "stablehlo.while" and self.loop_nesting < _MAX_LOOP_NESTING \
                    and ind < _MAX_INDENT - 2 and not any(map(runs_fused, op.regions)):
                return self.inline_while(step, env, ind)
            elif name in ("stablehlo.if", "stablehlo.case") and ind < _MAX_INDENT - 2 \
                    and not any(map(runs_fused, op.regions)):
                return self.inline_branches(step, env, ind)
            elif name == "stablehlo.composite" and self.scalar_math(op.attrs.get("name")):
                # JAX serializes chlo.erf, lgamma, ... as composites; one that
                # runs its direct kernel (fusion's rule, control.py's) is that
                # kernel on its operands.
                plain = _fusion._plain_composite(step)
                if plain is not step and self.scalar_op(plain, env, ind, op.attrs["name"]):
                    return None
            if self.scalar_op(step, env, ind) or self.shape_op(step, env, ind):
                return None
        return self.generic(step, env, ind)

    # -- loop-invariant ops ------------------------------------------------
    def hoistable(self, step, env):
        """Does ``step`` compute the same value in every iteration of the
        innermost loop, so that it may run once before it? Pure ops only
        (the registry's foldable trait: what the compiler folds for constant
        operands it may evaluate ahead for invariant ones), not quantized,
        of invariant operands, outside the body's if/case branches (which
        may not run)."""
        h = self.hoist
        if h is None or h[3] != self.branch_depth:
            return False
        fn, ins, out, dead, op = step
        if not ins or 0 in ins or not has_trait(op.name, "foldable") or involves_quant(op):
            return False
        # Static shapes: such an op cannot fail on the values it gets, so
        # running it ahead (also when the loop runs no iteration) changes
        # nothing but when it runs.
        return all(env[s].inv for s in ins) and all(
            _static(t) for t in (*op.operand_types, *op.result_types))

    def hoisted(self, step, env):
        """Emit ``step`` into the innermost loop's preheader; its results are
        invariant, held for the whole loop."""
        ind, lines, line_ops, _, _ = self.hoist
        saved = self.lines, self.line_ops, self.clamps
        # Clamped indices made here are not shared with the loop body's (nor
        # the body's with these: they are assigned later, inside the loop).
        self.lines, self.line_ops, self.clamps = lines, line_ops, {}
        try:
            if not (self.scalar_op(step, env, ind) or self.shape_op(step, env, ind)):
                self.generic(step, env, ind)
        finally:
            self.lines, self.line_ops, self.clamps = saved
        out = step.out
        for o in ((out,) if out.__class__ is int else out):
            env[o] = env[o].invariant()

    # -- calls, loops, branches ------------------------------------------
    def hand_over(self, ind, op, ins, dead, env):
        """Drop the references of owned arrays of ``ins`` that die at this op
        and appear once: the op's own locals (bound before) then hold the
        only ones, so it may update them in place."""
        slots = [s for s in ins if s in dead and ins.count(s) == 1
                 and env[s].own and not env[s].scalar]
        self.clear(ind, [env[s] for s in slots], op)
        for s in slots:
            env[s] = env[s].alias()   # already dropped: not again at the op's end

    def bind(self, v, ind, op):
        """A local of its own for an owned array (the callee may drop it);
        scalars and constants are shared."""
        if v.scalar or not v.own:
            return v.alias() if not v.scalar else v
        b = Val(self.fresh(), v.type, False, True)
        self.emit(ind, f"{b.name} = {v.name}", op)
        return b

    def inline_call(self, step, env, ind, callee):
        fn, ins, out, dead, op = step
        operands = ins[1:]
        args = [self.bind(env[s], ind, op) for s in operands]
        self.hand_over(ind, op, operands, dead, env)
        self.inline_stack.append(callee.name)
        try:
            res = self.block(callee.block, ind, args, [])
        finally:
            self.inline_stack.pop()
        outs = (out,) if out.__class__ is int else out
        seen = set()
        for o, r in zip(outs, res):
            if r.own and not r.scalar:
                if r.name in seen:   # the callee returns one value twice
                    c = Val(self.fresh(), r.type, False, True)
                    self.emit(ind, f"{c.name} = {r.name}", op)
                    r = c
                seen.add(r.name)
            env[o] = r

    def inline_while(self, step, env, ind):
        fn, ins, out, dead, op = step
        n = len(op.operand_types)
        cond, body = op.regions
        operands = ins[1:1 + n]
        caps = ins[1 + n:]
        nc = len(cond.capture_slots)
        carries = []
        for s, t in zip(operands, op.operand_types):
            c = self.new(t)
            self.emit(ind, f"{c.name} = {self.coerce(env[s], c.scalar)}", op)
            carries.append(c)
        self.hand_over(ind, op, operands, dead, env)
        ccaps = [env[s].alias() for s in caps[:nc]]
        bcaps = [env[s].alias() for s in caps[nc:]]
        self.loop(ind, op, cond, body, carries, ccaps, bcaps)
        outs = (out,) if out.__class__ is int else out
        for o, c in zip(outs, carries):
            env[o] = c

    def loop(self, ind, op, cond, body, carries, ccaps, bcaps):
        self.loop_nesting += 1
        outer_clamps = dict(self.clamps)   # clamps made in the loop stay in it
        # Invariant in this loop: its captures, and the carries the body
        # returns as they came in (scan's weights); ops of only such values
        # (and constants) go to a preheader before `while True:`.
        same = {i for i, (a, r) in enumerate(zip(body.arg_slots, body.result_slots)) if a == r}
        inner = [c.invariant() if i in same else c for i, c in enumerate(carries)]
        ccaps = [v.invariant() for v in ccaps]
        bcaps = [v.invariant() for v in bcaps]
        outer_hoist = self.hoist
        # (indent, preheader lines, their ops, branch depth, names to drop
        # after the loop)
        self.hoist = (ind, [], [], self.branch_depth, [])
        head = len(self.lines)
        self.emit(ind, "while True:", op)
        pred = self.block(cond, ind + 1, [c.alias() for c in inner], ccaps)[0]
        self.emit(ind + 1, f"if not {pred.name}: break", op)
        res = self.block(body, ind + 1, inner, bcaps)
        if carries:
            names = ", ".join(c.name for c in carries)
            exprs = ", ".join(self.coerce(r, c.scalar) for r, c in zip(res, carries))
            self.emit(ind + 1, f"{names}, = {exprs},", op)
            carry_names = {c.name for c in carries}
            self.clear(ind + 1, [r for r in res if r.name not in carry_names], op)
        else:
            self.emit(ind + 1, "pass", op)
        _, pre, pre_ops, _, drop = self.hoist
        if drop:   # the loop's own references, not the code's after it
            self.emit(ind, " = ".join(drop) + " = None", op)
        self.lines[head:head] = pre
        self.line_ops[head:head] = pre_ops
        self.hoist = outer_hoist
        self.clamps = outer_clamps
        self.loop_nesting -= 1

    def inline_branches(self, step, env, ind):
        fn, ins, out, dead, op = step
        sel = env[ins[1]]
        caps = ins[2:]
        outs = [self.new(t) for t in op.result_types]
        regions = op.regions
        spans = []
        k = 0
        for r in regions:
            spans.append([env[s].alias() for s in caps[k:k + len(r.capture_slots)]])
            k += len(r.capture_slots)
        if op.name == "stablehlo.if":
            heads = [f"if {sel.name}:", "else:"]
        else:
            idx = self.fresh("_i")
            self.emit(ind, f"{idx} = _int({sel.name})", op)
            heads = [("if" if i == 0 else "elif") + f" {idx} == {i}:"
                     for i in range(len(regions) - 1)] + ["else:"]
            if len(regions) == 1:
                heads = ["if True:"]
        outer_clamps = self.clamps
        self.branch_depth += 1
        for head, region, rcaps in zip(heads, regions, spans):
            self.clamps = dict(outer_clamps)   # a branch's clamps stay in it
            self.emit(ind, head, op)
            before = len(self.lines)
            res = self.block(region, ind + 1, [], rcaps)
            if outs:
                names = ", ".join(o.name for o in outs)
                exprs = ", ".join(self.coerce(r, o.scalar) for r, o in zip(res, outs))
                self.emit(ind + 1, f"{names}, = {exprs},", op)
                self.clear(ind + 1, res, op)
            if len(self.lines) == before:
                self.emit(ind + 1, "pass", op)
        self.branch_depth -= 1
        self.clamps = outer_clamps
        outs_slots = (out,) if out.__class__ is int else out
        for o, v in zip(outs_slots, outs):
            env[o] = v

    # -- fast ops ----------------------------------------------------------
    def scalar_math(self, name):
        """The ``math`` function op ``name``'s kernel rounds (registry.scalar_math),
        in the accurate numerics mode only: spec-mode kernels round other
        intermediate values (numerics.py), so there the kernel runs."""
        if getattr(self.program, "numerics", "accurate") != "accurate":
            return None
        return scalar_math(name)

    def scalar_op(self, step, env, ind, math_name=None):
        """Elementwise ops on scalar-held values as numpy scalar expressions
        (``math_name``: the transcendental a composite step runs, or None)."""
        fn, ins, out, dead, op = step
        if out.__class__ is not int or not ins or 0 in ins:
            return False
        vals = [env[s] for s in ins]
        if not all(v.scalar for v in vals):
            return False
        rt = op.result_types[0]
        if rt.__class__ is not TensorType or rt.quant is not None or rt.dtype not in FAST_KIND:
            return False
        name = op.name
        ot = op.operand_types
        if name == "stablehlo.select":
            if not all(t.shape == rt.shape for t in ot):
                return False
            expr = f"({vals[1].name} if {vals[0].name} else {vals[2].name})"
        elif name in ("stablehlo.reshape", "stablehlo.broadcast_in_dim",
                      "stablehlo.optimization_barrier"):
            if not _size1(rt):
                return False
            env[out] = Val(vals[0].name, rt, True, False)
            return True
        elif name == "stablehlo.convert":
            form = convert_form(ot[0].dtype, rt.dtype)
            if form is None:
                return False
            if form == "{0}":
                env[out] = Val(vals[0].name, rt, True, False)
                return True
            expr = form.format(vals[0].name, T=self.glob(rt.dtype.type, "T"),
                               Z=self.glob(ot[0].dtype.type(0), "K"),
                               D=self.glob(np.float64, "T"),
                               N=self.glob(rt.dtype.type(-0.0 if rt.dtype.kind == "f" else 0),
                                           "K"))
        elif name == "stablehlo.bitcast_convert":
            if vals[0].name in self.consts:
                return False   # the kernel folds it
            expr = self.bitcast(ind, op, ot[0].dtype, rt.dtype, vals[0].name)
            if expr is None:
                return False
        else:
            if any(t.shape != rt.shape for t in ot):
                return False
            k = FAST_KIND.get(ot[0].dtype)
            if k is None or any(t.dtype != ot[0].dtype for t in ot):
                return False
            names = [v.name for v in vals]
            if name == "stablehlo.compare":
                form = compare_form(op.attrs.get("comparison_direction"),
                                    op.attrs.get("compare_type"), k)
                if form is None:
                    return False
                expr = form.format(*names)
            elif name == "stablehlo.clamp":
                # min(max(x, lo), hi) on integers and booleans.
                if k == "b":
                    expr = f"(({names[1]} | {names[0]}) & {names[2]})"
                elif k in "iu":
                    t = self.fresh("_t")
                    self.emit(ind, f"{t} = {names[1]} if {names[1]} > {names[0]} "
                                   f"else {names[0]}", op)
                    expr = f"({t} if {t} < {names[2]} else {names[2]})"
                else:
                    return False
            elif self.scalar_math(math_name or name) is not None and len(ins) == 1 \
                    and ot[0].dtype in _MATH_TYPES and rt.dtype == ot[0].dtype:
                f = rounded_math(self.scalar_math(math_name or name), fn, rt.dtype)
                expr = f"{self.glob(f, 'M')}({names[0]})"
            elif math_name is not None:
                return False
            else:
                form = scalar_forms().get((name, ot[0].dtype)) if len(ins) <= 2 else None
                if form is None:
                    return False
                expr = form.format(*names)
        if all(v.name in self.consts for v in vals):
            # Constant operands: fold once, here.
            with np.errstate(all="ignore"):
                value = eval(expr, self.ns)  # noqa: S307 - our own expression
            value = np.array(value).reshape(rt.shape)
            value.flags.writeable = False   # shared by every run, as constants are
            env[out] = self.const(value)
            return True
        v = Val(self.fresh(), rt, True, False)
        self.emit(ind, f"{v.name} = {expr}", op)
        env[out] = v
        return True

    def bitcast(self, ind, op, src, dst, x):
        """Expression reading scalar ``x`` of ``src`` as ``dst`` (same
        width), after a line writing it: through a one-element buffer of
        each type over the same memory, made once per call of the function
        (its locals: no state shared between threads); a numpy scalar's
        view() costs four times more. None where the kernel runs (bool,
        complex, other widths)."""
        if src.itemsize != dst.itemsize or FAST_KIND[src] in "bc" or FAST_KIND[dst] in "bc":
            return None
        key = (src, dst)
        names = self.buffers.get(key)
        if names is None:
            names = self.buffers[key] = (self.fresh("_bb"), self.fresh("_bv"))
            self.prologue.append((f"{names[0]} = _empty(1, {self.glob(src, 'T')}); "
                                  f"{names[1]} = {names[0]}.view({self.glob(dst, 'T')})", op))
        self.emit(ind, f"{names[0]}[0] = {x}", op)
        return f"{names[1]}[0]"

    def starts(self, ind, op, idx_vals, shape, sizes):
        """Python ints of the clamped start indices (spec: clamp to
        ``[0, dim - size]``)."""
        out = []
        for v, d, n in zip(idx_vals, shape, sizes):
            hi = d - n
            if hi == 0:
                out.append("0")
            elif v.name in self.int_consts:
                out.append(str(min(max(self.int_consts[v.name], 0), hi)))
            elif (v.name, hi) in self.clamps:
                out.append(self.clamps[v.name, hi])   # the same index clamped before
            else:
                s = self.fresh("_s")
                self.emit(ind, f"{s} = _int({v.name})", op)
                self.emit(ind, f"{s} = 0 if {s} < 0 else ({hi} if {s} > {hi} else {s})", op)
                self.clamps[v.name, hi] = s
                out.append(s)
        return out

    def shape_op(self, step, env, ind):
        """reshape of a one-element array to a scalar; dynamic_slice and
        dynamic_update_slice with scalar start indices and static shapes."""
        fn, ins, out, dead, op = step
        name = op.name
        if out.__class__ is not int or not ins or 0 in ins:
            return False
        rt = op.result_types[0]
        if name in ("stablehlo.reshape", "stablehlo.broadcast_in_dim"):
            x = env[ins[0]]
            if not x.scalar and _static(x.type) and _static(rt) and rt.shape \
                    and _same_elements(op, x.type, rt):
                # A static reshape of an array (scan's row of xs to a vector,
                # a step's output to a row of ys): the ndarray method, the
                # kernel's own result, without its call.
                v = Val(self.fresh(), rt, False, True)
                self.emit(ind, f"{v.name} = _A({x.name}).reshape({tuple(rt.shape)!r})", op)
                env[out] = v
                return True
            if x.scalar or not _size1(x.type) or not scalar_type(rt):
                return False
            v = Val(self.fresh(), rt, True, False)
            self.emit(ind, f"{v.name} = {x.name}[{', '.join(['0'] * len(x.type.shape))},]"
                      if x.type.shape else f"{v.name} = {x.name}[()]", op)
            env[out] = v
            return True
        if name == "stablehlo.dynamic_slice":
            x = env[ins[0]]
            idx = [env[s] for s in ins[1:]]
            xt = x.type
            if x.scalar or not _static(xt) or not _static(rt) or not xt.shape \
                    or len(idx) != len(xt.shape) or not all(v.scalar for v in idx):
                return False
            sizes = tuple(op.attrs["slice_sizes"])
            if len(sizes) != len(xt.shape) or any(n > d for n, d in zip(sizes, xt.shape)):
                return False
            st = self.starts(ind, op, idx, xt.shape, sizes)
            if all(n == 1 for n in sizes) and xt.dtype in FAST_KIND:
                # One element: read it as a scalar.
                v = Val(self.fresh(), rt, True, False)
                self.emit(ind, f"{v.name} = {x.name}[{', '.join(st)},]", op)
            else:
                v = Val(self.fresh(), rt, False, True)
                # Trailing whole dims (start 0) are left out of the index:
                # a scan's row read is then one slice (0.14 -> 0.08 us).
                keep = len(sizes)
                while keep > 1 and st[keep - 1] == "0" and sizes[keep - 1] == xt.shape[keep - 1]:
                    keep -= 1
                sl = ", ".join(f"{s}:{s} + {n}" if not s.isdigit() else f"{s}:{int(s) + n}"
                               for s, n in zip(st[:keep], sizes[:keep]))
                self.emit(ind, f"{v.name} = {x.name}[{sl},]", op)
            env[out] = v
            return True
        if name == "stablehlo.dynamic_update_slice":
            x, u = env[ins[0]], env[ins[1]]
            idx = [env[s] for s in ins[2:]]
            xt, ut = x.type, u.type
            if x.scalar or not _static(xt) or not _static(ut) or not xt.shape \
                    or len(idx) != len(xt.shape) or len(ut.shape) != len(xt.shape) \
                    or not all(v.scalar for v in idx) \
                    or any(n > d for n, d in zip(ut.shape, xt.shape)):
                return False
            st = self.starts(ind, op, idx, xt.shape, ut.shape)
            if u.scalar:
                target, value = ", ".join(st), u.name
            else:
                target = ", ".join(f"{s}:{s} + {n}" if not s.isdigit() else f"{s}:{int(s) + n}"
                                   for s, n in zip(st, ut.shape))
                value = u.name
            v = Val(self.fresh(), rt, False, True)
            if ins[0] in dead and ins.count(ins[0]) == 1 and x.own:
                # As Block.run: update in place when nothing else refers
                # to the array (two references: the local and getrefcount's).
                self.emit(ind, f"{v.name} = {x.name}", op)
                self.emit(ind, f"{x.name} = None", op)
                env[ins[0]] = x.alias()
                check = (f"if not ({v.name}.__class__ is _nd and {v.name}.base is None "
                         f"and {v.name}.flags.writeable and _grc({v.name}) == 2): "
                         f"{v.name} = {v.name}.copy()")
                if self.hoist is None:
                    self.emit(ind, check, op)
                else:
                    # The array this op checked (or copied) last time, held
                    # in `keep` (a third reference): the same one again
                    # (a scan's ys, updated in place step after step) is
                    # only counted, not inspected again.
                    keep = self.fresh("_k")
                    self.hoist[1].append((self.hoist[0], f"{keep} = None"))
                    self.hoist[2].append(op)
                    self.hoist[4].append(keep)
                    self.emit(ind, f"if {v.name} is not {keep} or _grc({v.name}) != 3:", op)
                    self.emit(ind + 1, check, op)
                    self.emit(ind + 1, f"{keep} = {v.name}", op)
            else:
                self.emit(ind, f"{v.name} = {x.name}.copy()", op)
            self.emit(ind, f"{v.name}[{target},] = {value}", op)
            env[out] = v
            return True
        return False

    # -- array elementwise ops that are a numpy ufunc ------------------------
    def direct_ufunc(self, step, env, ind):
        """An elementwise op whose kernel is ``as_result(ufunc, dtype)``
        (fusion.py's _direct_ufunc: the ufunc alone gives the result type)
        on arrays of the result's shape, rank >= 1: the ufunc called
        directly, which returns the ndarray the wrapper would return as it
        is (an RNN cell's 256-element add: 0.6 -> 0.3 us a step)."""
        fn, ins, out, dead, op = step
        if out.__class__ is not int or not ins or 0 in ins or len(op.result_types) != 1:
            return False
        res = op.result_types[0]
        vals = [env[s] for s in ins]
        if res.__class__ is not TensorType or res.quant is not None or res.shape == () \
                or any(v.scalar or v.type.__class__ is not TensorType or v.type.shape != res.shape
                       for v in vals):
            return False
        u = _fusion._direct_ufunc(_UfuncStep(fn, ins, op))
        if u is None:
            return False
        v = self.new(res)
        self.emit(ind, f"{v.name} = {self.glob(u, 'U')}({', '.join(x.name for x in vals)})", op)
        env[out] = v
        return True

    # -- everything else ---------------------------------------------------
    def generic(self, step, env, ind):
        """Call the op's kernel as the plan does (0-d values as arrays)."""
        fn, ins, out, dead, op = step
        if op.name in ("stablehlo.dot_general", "stablehlo.convolution", "stablehlo.dot"):
            self.products.append(_product_macs(op))
        if self.direct_ufunc(step, env, ind):
            return
        k = self.glob(fn, "F")
        args = ["ctx" if s == 0 else self.arr(env[s]) for s in ins]
        outs = (out,) if out.__class__ is int else out
        vals = [self.new(t) for t in op.result_types][:len(outs)]
        if len(vals) < len(outs):
            vals += [Val(self.fresh(), None, False, True) for _ in outs[len(vals):]]
        donate = kernel_info(fn).donate_first
        if donate is not None and len(outs) == 1 and ins and ins[0] != 0 \
                and ins[0] in dead and ins.count(ins[0]) == 1 \
                and env[ins[0]].own and not env[ins[0]].scalar:
            x = env[ins[0]].name
            d = self.glob(donate, "D")
            v = vals[0]
            rest = "".join(", " + a for a in args[1:])
            self.emit(ind, f"{v.name} = {x}", op)
            self.emit(ind, f"{x} = None", op)
            env[ins[0]] = env[ins[0]].alias()
            self.emit(ind, f"if {v.name}.__class__ is _nd and {v.name}.base is None and "
                           f"{v.name}.flags.writeable and _grc({v.name}) == 2: "
                           f"{v.name} = {d}({v.name}{rest})", op)
            self.emit(ind, f"else: {v.name} = {k}({v.name}{rest})", op)
        else:
            call = f"{k}({', '.join(args)})"
            if not outs:
                self.emit(ind, call, op)
            elif out.__class__ is int:
                self.emit(ind, f"{vals[0].name} = {call}", op)
            else:
                self.emit(ind, f"{', '.join(v.name for v in vals)}, = {call}", op)
        for v in vals:
            if v.scalar:
                self.emit(ind, f"{v.name} = {v.name}[()]", op)
        for o, v in zip(outs, vals):
            env[o] = v

    # -- the function --------------------------------------------------------
    def source(self):
        return "\n".join("    " * i + t for i, t in self.lines) + "\n"


class CompiledLoop:
    """One while op compiled: ``run(ctx, ccap, bcap, vals)`` continues the
    loop from the carried ``vals`` (a list it consumes) and returns the
    results, or None (nothing consumed) when the values do not have the
    types the code was generated for."""

    def __init__(self, fn, code, line_ops, op, checks, pin=False):
        self.fn = fn
        self.code = code
        self.line_ops = line_ops
        self.op = op
        self.checks = checks   # ((which, index, shape, dtype) ...)
        # Every BLAS product of the loop is small (blas.py): one BLAS
        # thread for the whole run instead of a switch per product.
        self.pin = pin

    def run(self, ctx, ccap, bcap, vals):
        groups = (vals, ccap, bcap)
        for which, i, shape, dtype in self.checks:
            v = groups[which][i]
            if v.__class__ is not np.ndarray or v.shape != shape or v.dtype != dtype:
                return None
        try:
            # The plan's runs already ignore floating-point errors; setting
            # it again costs a tenth of np.errstate.
            if self.pin:
                with _blas.single_threaded():
                    return _compiler._run_ignoring_fp_errors(self.fn, ctx, ccap, bcap, vals)
            return _compiler._run_ignoring_fp_errors(self.fn, ctx, ccap, bcap, vals)
        except InterpreterError:
            raise
        except RecursionError:
            op = self.failed_op(None)
            raise ExecutionError(f"{op.where()}: recursion too deep", op.name,
                                 op.location) from None
        except Exception as e:
            op = self.failed_op(e.__traceback__)
            raise ExecutionError(f"{op.where()}: {type(e).__name__}: {e}", op.name,
                                 op.location) from e

    def failed_op(self, tb):
        op = self.op
        while tb is not None:
            if tb.tb_frame.f_code is self.code:
                i = tb.tb_lineno - 2   # line 1 is the def
                if 0 <= i < len(self.line_ops):
                    op = self.line_ops[i]
            tb = tb.tb_next
        return op


def _product_macs(op):
    """Multiply-adds of a dot_general with static shapes, else None."""
    if op.name != "stablehlo.dot_general":
        return None
    lt, rt = op.operand_types[0], op.result_types[0]
    dn = op.attrs.get("dot_dimension_numbers")
    if not (_static(lt) and _static(rt) and isinstance(dn, dict)):
        return None
    k = 1
    for d in dn.get("lhs_contracting_dimensions", ()):
        k *= lt.shape[d]
    return k * math.prod(rt.shape)


def _runtime_type(v):
    """The type of a captured value, from the value (the enclosing block's
    declared types are not at hand); runs check it on every entry."""
    if v.__class__ is np.ndarray:
        return TensorType(v.shape, v.dtype, None)
    return None


def build(program, op, ccap, bcap):
    """Compile the while op ``op`` of ``program`` (a compiler.Op whose
    regions are the cond and body Blocks; ``ccap``/``bcap`` are the captured
    values of this run) into a :class:`CompiledLoop`. Returns it and its
    source."""
    cond, body = op.regions
    g = _Gen(program)
    carries = [g.new(t) for t in op.operand_types]
    checks = []
    for i, t in enumerate(op.operand_types):
        if _static(t):
            checks.append((0, i, tuple(t.shape), t.dtype))
    caps = []
    for which, values in ((1, ccap), (2, bcap)):
        group = []
        for i, v in enumerate(values):
            t = _runtime_type(v)
            if t is not None:
                checks.append((which, i, tuple(t.shape), t.dtype))
            group.append(Val(g.fresh("c"), t, t is not None and scalar_type(t), False))
        caps.append(group)
    ccaps, bcaps = caps
    vm = _loopvm.lower(program, op, ccap, bcap, tuple(checks))
    if vm is not None:   # the whole loop runs in C (loopvm.py), CompiledLoop's interface
        return vm, vm.source
    if carries:
        g.emit(1, f"{', '.join(c.name for c in carries)}, = vals", op)
        g.emit(1, "vals.clear()", op)
    for c, values in ((ccaps, "ccap"), (bcaps, "bcap")):
        if c:
            g.emit(1, f"{', '.join(v.name for v in c)}, = {values}", op)
    for c in carries + ccaps + bcaps:
        if c.scalar:
            g.emit(1, f"{c.name} = {c.name}[()]", op)
    g.loop(1, op, cond, body, carries, ccaps, bcaps)
    g.emit(1, f"return [{', '.join(g.arr(c) for c in carries)}]", op)
    g.lines[0:0] = [(1, text) for text, _ in g.prologue]
    g.line_ops[0:0] = [o for _, o in g.prologue]
    src = "def _loop(ctx, ccap, bcap, vals):\n" + g.source()
    code = compile(src, f"<stablehlo loop at {op.location}>", "exec")
    ns = g.ns
    exec(code, ns)  # noqa: S102 - our own generated source
    fn = ns["_loop"]
    pin = bool(g.products) and all(m is not None and m < _blas.SMALL_GEMM_MACS
                                    for m in g.products)
    return CompiledLoop(fn, fn.__code__, g.line_ops, op, tuple(checks), pin), src


# A fused chain over at least this many elements keeps its loop on the plan
# (runs_fused). Smaller ones fit the cache whole: generated code runs their
# ops one by one as fast, and hoists the loop-invariant ones out of the loop
# (jnp.searchsorted of 1e5 queries: 6.9 ms generated, 9.7 ms on the plan,
# which recomputes the queries' canonical form every iteration).
FUSED_LOOP_ELEMENTS = 1 << 18


def runs_fused(blk):
    """Does the plan of Block ``blk`` run fused elementwise chains
    (fusion.py: in cache-sized chunks) over at least FUSED_LOOP_ELEMENTS
    elements? Generated code would run their ops one by one on whole arrays,
    each reading and writing megabytes: a loop whose body is such a block is
    left to the plain plan, and a function or region that is one is called
    from the generated loop rather than inlined (jax.random's threefry
    rounds ran 2x slower inlined). Plans the block's first run."""
    blk._fast_steps()
    return any(isinstance(s.fn, _fusion.FusedChain) and s.fn.size >= FUSED_LOOP_ELEMENTS
               for s in blk._planned)


class LoopState:
    """What one while op occurrence knows about generation: plain
    iterations run so far (all runs), the compiled loop, or that it failed."""

    __slots__ = ("op", "count", "compiled", "failed", "source", "vm")

    def __init__(self, op):
        self.op = op
        self.count = 0
        self.compiled = None
        self.failed = False
        self.source = None
        # The compiled loop when it runs in C (a loopvm.LoopProgram) and no
        # tiling plan applies: the while kernel calls it first thing.
        self.vm = None

    def usable(self, ctx):
        """May this run use (and build) the generated loop?"""
        return (ENABLED and not self.failed and ctx.tracer is None
                and not _compiler._DEBUG_VALIDATE)

    def due(self):
        return self.compiled is None and self.count >= GENERATE_AFTER

    def compile(self, ctx, ccap, bcap):
        if any(map(runs_fused, self.op.regions)):
            self.failed = True   # the plain plan runs the fused chains (runs_fused)
            return None
        try:
            self.compiled, self.source = build(ctx.program, self.op, ccap, bcap)
            if self.compiled.__class__ is _loopvm.LoopProgram:
                self.vm = self.compiled
            if PRINT:
                print(f"# stablehlo_ref: generated loop for {self.op.where()}\n{self.source}",
                      file=sys.stderr, flush=True)
        except Interrupt:
            raise   # a deadline that landed here, not a form the generator lacks
        except Exception:
            if STRICT:
                raise
            # An op form the generator cannot express: the plan runs it.
            self.failed = True
        return self.compiled
