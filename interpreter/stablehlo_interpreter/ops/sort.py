"""sort: sorting 1-d slices of several tensors together with a comparator.

Three strategies, chosen at compile time:

* *Key sort* -- the comparator is recognised as a (lexicographic chain of)
  strict `LT`/`GT` comparisons of a key computed the same way from the lhs and
  the rhs arguments (what JAX emits: `compare LT, k(a), k(b), TOTALORDER`,
  possibly after canonicalising NaN/-0, and `or(lt0, and(eq0, ...))` chains
  for several keys). The keys are computed once on whole tensors by running
  the comparator's own steps, mapped to integers that order like the spec's
  comparison, and sorted with numpy's stable sort.
* *Batched merge sort* -- any comparator made of elementwise ops: a bottom-up
  stable merge sort whose merge positions are found by binary searches that
  evaluate the comparator on all elements of all slices at once. It
  reproduces `std::stable_sort`/`std::merge` for any comparator (an element
  of the right run goes first iff `comparator(right, left)`).
* Otherwise Python's stable sort with the comparator called per pair.
"""

import functools

import numpy as np

from .. import dtypes
from ..errors import Interrupt
from ..regions import batched, is_batchable
from ..registry import has_trait, kernel

# --------------------------------------------------------------------------
# Comparator analysis


class _Expr:
    """Symbolic view of a comparator body (slots -> expression trees)."""

    def __init__(self, block):
        self.block = block
        self.arg_no = {s: i for i, s in enumerate(block.arg_slots)}
        self.producer = {}
        for step in block.steps:
            out = step.out
            if out.__class__ is int:
                self.producer[out] = step
        self.memo = {}

    def expr(self, slot):
        e = self.memo.get(slot)
        if e is not None:
            return e
        if slot in self.arg_no:
            e = ("arg", self.arg_no[slot])
        elif slot in self.producer:
            fn, ins, out, dead, op = self.producer[slot]
            if not has_trait(op.name, "elementwise") or 0 in ins:
                e = ("opaque", slot)
            else:
                e = (op.name, _attr_sig(op)) + tuple(self.expr(i) for i in ins)
        elif self.block.template[slot] is not None:
            v = np.asarray(self.block.template[slot])
            e = ("const", v.dtype.str, v.shape, v.tobytes())
        else:
            e = ("opaque", slot)
        self.memo[slot] = e
        return e


def _attr_sig(op):
    items = []
    for k, v in sorted(op.attrs.items()):
        items.append((k, v.tobytes() if isinstance(v, np.ndarray) else repr(v)))
    return tuple(items)


def _args_of(e, acc=None):
    acc = set() if acc is None else acc
    if e[0] == "arg":
        acc.add(e[1])
    elif e[0] == "opaque":
        acc.add(-1)
    elif e[0] != "const":
        for sub in e[2:]:
            _args_of(sub, acc)
    return acc


def _swap(e):
    """The expression with lhs args (even) and rhs args (odd) exchanged."""
    if e[0] == "arg":
        return ("arg", e[1] ^ 1)
    if e[0] in ("const", "opaque"):
        return e
    return e[:2] + tuple(_swap(s) for s in e[2:])


def _compare_parts(e):
    """(direction, compare_type, lhs, rhs) of a compare expression, else None."""
    if e[0] != "stablehlo.compare":
        return None
    attrs = dict(e[1])
    return (attrs.get("comparison_direction", "").strip("'\""),
            attrs.get("compare_type", "'NOTYPE'").strip("'\""), e[2], e[3])


def _key_of_compare(e, directions=("LT", "GT")):
    """(key_expr, descending, compare_type) for `compare dir, k(lhs), k(rhs)`."""
    parts = _compare_parts(e)
    if parts is None or parts[0] not in directions:
        return None
    d, ctype, left, right = parts
    args = _args_of(left)
    if -1 in args or not args or right != _swap(left):
        return None
    if all(a % 2 == 0 for a in args):
        return left, d == "GT", ctype, d
    if all(a % 2 == 1 for a in args):
        # compare LT, k(rhs), k(lhs): the lhs goes first iff k(lhs) > k(rhs).
        flipped = {"LT": "GT", "GT": "LT"}.get(d, d)
        return right, flipped == "GT", ctype, flipped
    return None


def lexicographic_keys(block):
    """Keys ``[(expr, descending, compare_type), ...]`` or None (see module doc)."""
    if block.capture_slots or len(block.result_slots) != 1:
        return None
    ex = _Expr(block)
    root = ex.expr(block.result_slots[0])
    keys = _match_lex(root)
    return keys


def _match_lex(e):
    k = _key_of_compare(e)
    if k is not None:
        return [k[:3]]
    if e[0] != "stablehlo.or" or len(e) != 4:
        return None
    for lt, rest in ((e[2], e[3]), (e[3], e[2])):
        k = _key_of_compare(lt)
        if k is None or rest[0] != "stablehlo.and" or len(rest) != 4:
            continue
        for eq, tail in ((rest[2], rest[3]), (rest[3], rest[2])):
            parts = _compare_parts(eq)
            if parts is None or parts[0] != "EQ" or parts[1] != k[2]:
                continue
            if {parts[2], parts[3]} != {k[0], _swap(k[0])}:
                continue
            more = _match_lex(tail)
            if more is not None:
                return [k[:3]] + more
    return None


def _eval_exprs(block, exprs_slots, operands):
    """Run the comparator steps needed for some slots on whole tensors."""
    env = list(block.template)
    for i, s in enumerate(block.arg_slots):
        env[s] = operands[i // 2] if i % 2 == 0 else None
    needed = set()
    producer = {st.out: st for st in block.steps if st.out.__class__ is int}

    def need(s):
        if s in needed or s not in producer:
            return
        needed.add(s)
        for i in producer[s][1]:
            need(i)
    for s in exprs_slots:
        need(s)
    for fn, ins, out, _, _ in block.steps:
        if out in needed:
            env[out] = fn(*[env[i] for i in ins])
    return [env[s] for s in exprs_slots]


def _slot_of(block, target):
    ex = _Expr(block)
    for st in block.steps:
        if st.out.__class__ is int and ex.expr(st.out) == target:
            return st.out
    for i, s in enumerate(block.arg_slots):
        if ("arg", i) == target:
            return s
    return None


_SINT_OF = {2: np.int16, 4: np.int32, 8: np.int64}


def _ordinal(key, ctype, descending):
    """Integer (or float) array ordering like `compare LT/GT` of type ctype.

    Returns None when this compare type cannot be expressed as a key order
    (FLOAT comparisons with NaNs present are not a strict weak order).
    """
    key = np.asarray(key)
    dt = key.dtype
    if dtypes.is_bool(dt):
        out = key.astype(np.int8)
    elif dtypes.is_integer(dt):
        # The integers themselves, in their own width (numpy's stable sort
        # is a radix sort for 8/16-bit keys and moves fewer bytes otherwise).
        out = key if key.dtype.kind in "iu" else key.astype(
            np.uint64 if dtypes.is_unsigned(dt) else np.int64)
    elif dtypes.is_float(dt):
        size = dt.itemsize
        if (ctype == "TOTALORDER" and size in _SINT_OF
                and dtypes.bit_width(dt) == size * 8):
            # Same order as the uint64 path below, in the float's own width:
            # the bits as a signed integer, magnitude bits flipped when
            # negative (-mag - 1), so -NaN < -inf < ... < -0 < +0 < ... < NaN.
            b = key.view(_SINT_OF[size])
            out = b ^ ((b >> (size * 8 - 1)) & b.dtype.type(np.iinfo(b.dtype).max))
        elif ctype == "TOTALORDER":
            # Bit pattern trick: flipping the magnitude bits of negative
            # numbers orders -NaN < -inf < ... < -0 < +0 < ... < inf < NaN.
            width = dtypes.bit_width(dt)
            nbytes = dt.itemsize
            bits = key.view({1: np.uint8, 2: np.uint16, 4: np.uint32,
                             8: np.uint64}[nbytes]).astype(np.uint64)
            if width < nbytes * 8:
                bits &= np.uint64((1 << width) - 1)
            sign = (bits >> np.uint64(width - 1)) & np.uint64(1)
            mag = bits & np.uint64((1 << (width - 1)) - 1)
            out = np.where(sign == 1, -mag.astype(np.int64) - 1, mag.astype(np.int64))
        else:
            f = key.astype(np.float64)
            if np.isnan(f).any():
                return None
            out = f + 0.0  # -0.0 and +0.0 compare equal, as FLOAT does
        if descending:
            return -out if out.dtype.kind == "f" else ~out
        return out
    else:
        return None
    if descending:
        return ~out
    return out


# --------------------------------------------------------------------------
# Sorting strategies


def _key_sort(keys, slots, block):
    """Permutation along the last axis from lexicographic keys."""
    def perm(ops_last):
        vals = _eval_exprs(block, slots, ops_last)
        ords = []
        for v, (_, desc, ctype) in zip(vals, keys):
            o = _ordinal(np.broadcast_to(v, ops_last[0].shape), ctype, desc)
            if o is None:
                return None
            ords.append(o)
        if len(ords) == 1:
            return np.argsort(ords[0], axis=-1, kind="stable")
        # lexsort: last key is primary; stable.
        return np.lexsort(ords[::-1], axis=-1)
    return perm


def _merge_sort_perm(region, ops2d):
    """Stable merge sort of rows of ``ops2d`` (each (M, n)) with a batched comparator.

    Returns the permutation (M, n), or None if the comparator is not
    consistent enough to produce one.
    """
    m, n = ops2d[0].shape
    perm = np.broadcast_to(np.arange(n), (m, n)).copy()
    rows = np.arange(m)[:, None]
    j = np.arange(n)
    width = 1

    def comp(a_idx, b_idx):
        args = []
        for x in ops2d:
            args.append(x[rows, a_idx])
            args.append(x[rows, b_idx])
        r = region(*args)[0]
        return np.broadcast_to(np.asarray(r, dtype=bool), a_idx.shape)

    while width < n:
        start = (j // (2 * width)) * (2 * width)
        mid = np.minimum(start + width, n)
        end = np.minimum(start + 2 * width, n)
        in_a = j < mid
        # Search range in the other run, and the predicate's polarity.
        lo = np.where(in_a, mid, start)
        hi = np.where(in_a, end, mid)
        lo = np.broadcast_to(lo, (m, n)).copy()
        hi = np.broadcast_to(hi, (m, n)).copy()
        own = perm  # element handles at their current positions
        steps = int(np.ceil(np.log2(width + 1))) + 1
        for _ in range(steps):
            active = lo < hi
            if not active.any():
                break
            midp = np.minimum((lo + hi) // 2, n - 1)
            other = perm[rows, midp]
            # A element x: count B elements b with comp(b, x).
            # B element y: count A elements a with not comp(y, a).
            # One batched call: comparator(other, self) for elements of the
            # left run, comparator(self, other) for elements of the right run.
            c = comp(np.where(in_a, other, own), np.where(in_a, own, other))
            go_right = np.where(in_a, c, ~c) & active
            lo = np.where(go_right, midp + 1, lo)
            hi = np.where(active & ~go_right, midp, hi)
        other_start = np.where(in_a, mid, start)
        own_start = np.where(in_a, start, mid)
        newpos = start + (j - own_start) + (lo - other_start)
        check = np.zeros((m, n), dtype=np.int64)
        np.add.at(check, (np.broadcast_to(rows, (m, n)), newpos), 1)
        if (check != 1).any():
            return None
        nperm = np.empty_like(perm)
        nperm[np.broadcast_to(rows, (m, n)), newpos] = perm
        perm = nperm
        width *= 2
    return perm


def _python_sort_perm(region, ops2d):
    m, n = ops2d[0].shape
    perm = np.empty((m, n), dtype=np.int64)
    for r in range(m):
        cols = [x[r] for x in ops2d]

        def cmp(a, b):
            args = []
            for c in cols:
                args.append(c[a:a + 1].reshape(()).copy())
                args.append(c[b:b + 1].reshape(()).copy())
            return -1 if bool(region(*args)[0]) else 0
        perm[r] = sorted(range(n), key=functools.cmp_to_key(cmp))
    return perm


@kernel("stablehlo.sort", special=True, traits=("moves_elements", "keeps_tiling", "judged_whole"))
def sort(op):
    """spec: sort. Sorts slices along `dimension` (negative allowed) together.

    The result is always a stable sort, which is a valid result for
    `is_stable = false` too.
    """
    block = op.regions[0]
    rank = len(op.operand_types[0].shape)
    dim = op.attrs.get("dimension", -1)
    dim = dim + rank if dim < 0 else dim
    nops = len(op.operand_types)
    keys = lexicographic_keys(block)
    key_perm = None
    if keys is not None:
        slots = [_slot_of(block, k[0]) for k in keys]
        if all(s is not None for s in slots):
            key_perm = _key_sort(keys, slots, block)
    batchable = is_batchable(block)

    def run(ctx, regions, *operands):
        if rank == 0 or operands[0].size == 0 or operands[0].shape[dim] <= 1:
            out = [np.array(x, copy=True) for x in operands]
            return out[0] if nops == 1 else out
        moved = [np.moveaxis(x, dim, -1) for x in operands]
        perm = p2 = None
        shape = moved[0].shape
        flat = [x.reshape(-1, shape[-1]) for x in moved]
        try:
            # Whole-array evaluation relies on the body's kernels broadcasting;
            # if one of them does not, sorting element by element still works.
            if key_perm is not None:
                perm = key_perm(moved)
            if perm is None and batchable:
                p2 = _merge_sort_perm(batched(ctx, regions[0]), flat)
        except Interrupt:
            raise
        except Exception:
            perm = p2 = None
        if perm is None:
            if p2 is None:
                p2 = _python_sort_perm(regions[0], flat)
            perm = p2.reshape(shape)
        out = [np.moveaxis(np.take_along_axis(x, perm, axis=-1), -1, dim)
               for x in moved]
        out = [np.ascontiguousarray(x) for x in out]
        return out[0] if nops == 1 else out
    return run
