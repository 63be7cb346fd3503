"""Plan rewrites for the integer chains JAX wraps around gather/scatter indices.

Every ``x[idx]``, ``jnp.take_along_axis``, ``x.at[idx].add(v)`` and
``jnp.histogram`` lowers its index array through the same two chains before
the gather or scatter:

* the *negative-index wrap* ``select(compare(LT, i, 0), add(i, n), i)``
  (Python's ``x[-1]``), and
* the *bounds mask* of ``mode="fill"`` gathers
  ``and(compare(GE, i, lo), compare(LE, i, hi))`` (``take_along_axis``
  fills out-of-range positions with NaN).

Run op by op (or fused), each chain reads the index array two or three
times and writes as many full-size temporaries, and both almost always come
out trivial: indices are rarely negative, and rarely out of range. Their
answer is decided by the index range alone, which one ``min`` (and ``max``)
of the indices gives for about the cost of a single read pass. So
:func:`rewrite` replaces each chain, when its intermediate values are used
nowhere else, by one step that

* tests the range (for the mask: per index component, against the bound
  constants reduced over their broadcast axes), and
* when the range decides, returns what the chain would have: the indices
  themselves for the wrap (the select of an all-false mask is its false
  operand: ``stablehlo.select`` returns that very array too), an all-true
  mask for the bounds test;
* otherwise runs the chain's own kernels, in the original order, on the
  whole arrays.

The wrap's test is the largest index viewed as unsigned (a negative one so
viewed is above the signed maximum), which also decides a bounds mask from 0
of the wrapped values (through reshapes and broadcasts, which only repeat
values): the wrap step leaves it in a per-thread memo that the mask step of
the same run reads instead of reading the indices again. A scatter whose
indices hold the wrapped values gets it too, for its bounds test
(:func:`with_index_max`, read by the kernel through :func:`known_index_max`).

Both branches give the unrewritten chain's values exactly (integer ops), in
either numerics mode.

A third form is PyTorch/XLA's ``torch.gather`` (and older JAX's
``take_along_axis``): the batch position enters the gather as an ``iota``
concatenated to the start indices, ``gather(x, concatenate(iota, i))``,
which materialises an index array twice the size of ``i`` and clamps and
scales the iota's component like any start. When that iota runs along an
index dim as long as the operand dim its component indexes (so its values
are in range and need no clamp), the gather is the same as one with that
pair of dims as ``operand_batching_dims`` / ``start_indices_batching_dims``
on ``i`` alone (the spec's batching dims read row ``r`` of the operand for
row ``r`` of the indices): :func:`rewrite` runs that gather instead, with no
fallback needed. Only chains over static shapes of at least
:data:`MIN_ELEMENTS` elements are rewritten: below that, the chain's kernels
cost about what the test does. The rewritten step keeps the chain's last op
(its errors name that op and location); traced and validated runs use the
block's unrewritten steps, as for fusion, so every op still shows.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import numpy as np

from .regions import reducer_kind
from .registry import KERNELS, kernel_info

# Rewrite chains over at least this many elements.
MIN_ELEMENTS = 1 << 14

_SELECT = "stablehlo.select"
_COMPARE = "stablehlo.compare"
_ADD = "stablehlo.add"
_AND = "stablehlo.and"
_GATHER = "stablehlo.gather"
_SCATTER = "stablehlo.scatter"
# Ops whose result holds (some of) their operand's values, no others.
_VIEWS = frozenset(("stablehlo.reshape", "stablehlo.broadcast_in_dim"))


def _static_size(t: Any) -> int | None:
    shape = getattr(t, "shape", None)
    if shape is None or getattr(t, "quant", None) is not None:
        return None
    n = 1
    for d in shape:
        if not isinstance(d, int):
            return None
        n *= d
    return n


def _constant(slot: int, template: Any) -> np.ndarray | None:
    v = template[slot] if slot < len(template) else None
    return v if v.__class__ is np.ndarray else None


def _uniform(v: np.ndarray | None) -> Any:
    """The one value of a constant that holds a single value (else None)."""
    if v is None or v.size == 0:
        return None
    first = v.reshape(-1)[0] if v.flags.c_contiguous else v.flat[0]
    if not any(v.strides) or bool((v == first).all()):
        return first
    return None


def _int_compare(step: Any, direction: str) -> bool:
    """Is ``step`` an integer ``compare`` in ``direction`` whose compare type
    matches the operand's signedness (so numpy's min/max order agrees)?"""
    op = step.op
    if op is None or op.name != _COMPARE or op.attrs.get("comparison_direction") != direction \
            or step.out.__class__ is not int:
        return False
    dt = _native_int(op.operand_types[0])
    if dt is None:
        return False
    ctype = op.attrs.get("compare_type")
    return ctype is None or ctype == ("SIGNED" if dt.kind == "i" else "UNSIGNED")


def _native_int(t: Any) -> np.dtype | None:
    """The numpy integer dtype of type ``t`` (None: not a native integer)."""
    try:
        dt = np.dtype(getattr(t, "dtype", None))
    except TypeError:
        return None
    return dt if dt.kind in "iu" and dt.itemsize in (1, 2, 4, 8) else None


class _Uses:
    """Producers and readers of a block's slots."""

    def __init__(self, steps: list[Any], result_slots: Any) -> None:
        self.producer: dict[int, int] = {}
        self.readers: dict[int, list[int]] = {}
        for i, s in enumerate(steps):
            if s.out.__class__ is int:
                self.producer[s.out] = i
            for slot in s.ins:
                self.readers.setdefault(slot, []).append(i)
        for slot in result_slots:
            self.readers.setdefault(slot, []).append(-1)

    def only_for(self, slot: int) -> int | None:
        """The step making ``slot`` when exactly one step reads it (else None)."""
        i = self.producer.get(slot)
        if i is None or len(self.readers.get(slot, ())) != 1:
            return None
        return i

    def only_reader(self, slot: int) -> int | None:
        """The one step reading ``slot`` (None: several, or a block result)."""
        r = self.readers.get(slot, ())
        return r[0] if len(r) == 1 and r[0] >= 0 else None


def rewrite(steps: list[Any], template: Any, result_slots: Any) -> list[Any]:
    """``steps`` with each index wrap and bounds mask replaced by one step
    (see the module docstring); ``template`` is the frame template holding
    the plan's constants. Returns ``steps`` itself when nothing matched."""
    uses = _Uses(steps, result_slots)
    drop: set[int] = set()
    replace: dict[int, Any] = {}
    # Slot -> the memo of the wrap whose values it holds (directly, or
    # reshaped / broadcast: the same values or some of them).
    wrapped: dict[int, Any] = {}
    for i, s in enumerate(steps):
        op = s.op
        if op is not None and op.name == _SCATTER:
            known = _scatter_of_wrapped(s, wrapped)
            if known is not None:
                replace[i] = known
            continue
        if op is None or s.out.__class__ is not int or op.regions:
            continue
        if op.name in _VIEWS and len(s.ins) == 1 and s.ins[0] in wrapped:
            wrapped[s.out] = wrapped[s.ins[0]]
            continue
        size = _static_size(op.result_types[0]) if op.result_types else None
        if size is None or size < MIN_ELEMENTS:
            continue
        if op.name == _SELECT:
            found = _match_wrap(i, steps, template, uses)
        elif op.name == _AND:
            found = _match_mask(i, steps, template, uses, wrapped)
        elif op.name == _GATHER:
            found = _match_iota_gather(i, steps, uses)
        else:
            continue
        if found is None:
            continue
        parts, new, at = found[:3]
        extra = found[3] if len(found) > 3 and op.name != _SELECT else {}
        if not drop.isdisjoint(parts) or at in drop or at in replace \
                or any(j in drop or j in replace for j in extra):
            continue
        drop.update(parts)
        replace[at] = new
        replace.update(extra)
        if op.name == _SELECT:
            wrapped[s.out] = found[3]
    if not replace:
        return steps
    return [replace.get(i, s) for i, s in enumerate(steps) if i not in drop]


def _scatter_of_wrapped(step: Any, wrapped: dict[int, Any]) -> Any:
    """A scatter step whose indices hold a wrap's values (``wrapped``), made
    to pass the largest index the wrap read in this run (its memo) to the
    scatter kernel's bounds test, which then skips its own pass."""
    op = step.op
    n = (len(op.operand_types) - 1) // 2
    # (The step's operands: the context, then the op's: inputs, indices,
    # updates.)
    if len(step.ins) <= n + 1 or step.ins[0] != 0:
        return None
    memo = wrapped.get(step.ins[n + 1])
    if memo is None:
        return None
    plain = step.fn

    def scatter_known(ctx, *vals):
        m = getattr(memo, "umax", None)
        memo.umax = None
        if m is None:
            return plain(ctx, *vals)
        return with_index_max(vals[n], m, plain, ctx, *vals)
    return step._replace(fn=scatter_known)


_INDEX_MAX = threading.local()


def with_index_max(indices: Any, umax: int, fn: Any, *args: Any) -> Any:
    """``fn(*args)`` (a scatter step) knowing that the largest value of
    ``indices`` (the scatter's indices operand, that very array) viewed as
    unsigned of its width is ``umax`` (the wrap before it has just read it):
    the scatter kernel's bounds test asks :func:`known_index_max` instead of
    reading the indices."""
    _INDEX_MAX.v = (indices, umax)
    try:
        return fn(*args)
    finally:
        _INDEX_MAX.v = None


def known_index_max(indices: Any) -> int | None:
    """The largest value of ``indices`` viewed as unsigned, when the scatter
    step running now was given it (:func:`with_index_max`), else None."""
    v = getattr(_INDEX_MAX, "v", None)
    return v[1] if v is not None and v[0] is indices else None


def _merged_dead(members: list[Any], gone: tuple[int, ...]) -> tuple[int, ...]:
    dead: list[int] = []
    for m in members:
        dead.extend(d for d in m.dead if d not in gone and d not in dead)
    return tuple(dead)


def _match_wrap(i: int, steps: list[Any], template: Any, uses: _Uses) -> Any:
    """``select(compare(LT, x, 0), add(x, n), x)`` ending at step ``i``."""
    sel = steps[i]
    if len(sel.ins) != 3:
        return None
    p, t, f = sel.ins
    ci, ai = uses.only_for(p), uses.only_for(t)
    if ci is None or ai is None or ci == ai:
        return None
    cmp_, add = steps[ci], steps[ai]
    if not _int_compare(cmp_, "LT") or len(cmp_.ins) != 2 or cmp_.ins[0] != f:
        return None
    zero = _uniform(_constant(cmp_.ins[1], template))
    if zero is None or zero != 0:
        return None
    if add.op is None or add.op.name != _ADD or len(add.ins) != 2 or f not in add.ins:
        return None
    n_slot = add.ins[1] if add.ins[0] == f else add.ins[0]
    if _constant(n_slot, template) is None or cmp_.out.__class__ is not int \
            or add.out.__class__ is not int:
        return None
    z, n = template[cmp_.ins[1]], template[n_slot]
    add_first = add.ins[0] == f
    cmp_fn, add_fn, sel_fn = cmp_.fn, add.fn, sel.fn
    # The largest index viewed as unsigned, for a bounds mask from 0 on the
    # wrapped indices (_match_mask): one pass answers both (a negative
    # index so viewed is above the type's signed maximum).
    memo = threading.local()
    dt = _native_int(cmp_.op.operand_types[0])
    unsigned = None if dt is None or dt.kind != "i" else np.dtype(f"u{dt.itemsize}")
    top = None if dt is None or dt.kind != "i" else int(np.iinfo(dt).max)

    def wrap_negative(x):
        # No negative index: the mask is all false and the select returns
        # its false operand, ``x``.
        memo.umax = None
        if x.size:
            if unsigned is not None and x.dtype.itemsize == unsigned.itemsize:
                m = int(x.view(unsigned).max())
                if m <= top:
                    memo.umax = m
                    return x
            elif x.min() >= 0:
                return x
        return sel_fn(cmp_fn(x, z), add_fn(x, n) if add_first else add_fn(n, x), x)

    members = [cmp_, add, sel]
    new = sel._replace(fn=wrap_negative, ins=(f,),
                       dead=_merged_dead(members, (p, t)))
    return (ci, ai), new, i, memo


def _match_mask(i: int, steps: list[Any], template: Any, uses: _Uses,
                wrapped: dict[int, Any]) -> Any:
    """``and(compare(GE, x, lo), compare(LE, x, hi))`` ending at step ``i``."""
    conj = steps[i]
    if len(conj.ins) != 2 or conj.ins[0] == conj.ins[1]:
        return None
    found = [uses.only_for(slot) for slot in conj.ins]
    if None in found:
        return None
    ge_i, le_i = found
    if not _int_compare(steps[ge_i], "GE"):
        ge_i, le_i = le_i, ge_i
    ge, le = steps[ge_i], steps[le_i]
    if not (_int_compare(ge, "GE") and _int_compare(le, "LE")):
        return None
    if len(ge.ins) != 2 or len(le.ins) != 2 or ge.ins[0] != le.ins[0]:
        return None
    x_slot = ge.ins[0]
    lo, hi = _constant(ge.ins[1], template), _constant(le.ins[1], template)
    shape = tuple(conj.op.result_types[0].shape)
    if lo is None or hi is None or lo.shape != shape or hi.shape != shape:
        return None
    axes = tuple(d for d in range(len(shape))
                 if shape[d] != 1 and lo.strides[d] == 0 and hi.strides[d] == 0)
    if len(axes) == sum(n != 1 for n in shape):
        # One bound each: whole-array min and max (a reduce over some axes
        # of a 3-d array is several times slower).
        axes = None
        lo_r, hi_r = lo.reshape(-1)[0], hi.reshape(-1)[0]
    else:
        # The bounds with their broadcast axes cut to one element (one
        # bound per index component).
        cut = tuple(slice(0, 1) if d in axes else slice(None) for d in range(len(shape)))
        lo_r, hi_r = lo[cut], hi[cut]
    ge_fn, le_fn, and_fn = ge.fn, le.fn, conj.fn
    members = [ge, le, conj]
    gone = tuple(conj.ins)
    last = conj
    red_i = _size1_and_reduce(uses.only_reader(conj.out), steps, template, shape)
    out_shape = shape
    if red_i is not None:
        # The mask's only reader is a reduce of size-1 dims by ``and``
        # from true (the index vector of one component): a reshape.
        last = steps[red_i]
        members.append(last)
        gone += (conj.out,)
        out_shape = tuple(last.op.result_types[0].shape)

    keep = axes is not None
    dt = _native_int(ge.op.operand_types[0])
    if bool((np.asarray(lo_r) == 0).all()) and bool((np.asarray(hi_r) >= 0).all()):
        # From 0: one pass, the largest index read as unsigned (negative
        # ones read so are above every bound).
        unsigned = np.dtype(f"u{dt.itemsize}")
        hi_u = np.asarray(hi_r).astype(unsigned)   # (uint64 against int64 would be float64)
        wmemo = wrapped.get(x_slot) if axes is None else None
        if wmemo is not None:
            # The indices come from a wrap that read their largest unsigned
            # value in this run (its memo, set by that step just before;
            # None when it wrapped negative indices): no second pass.
            hi_int = int(hi_u)

            def in_range(x):
                m = getattr(wmemo, "umax", None)
                wmemo.umax = None
                if m is not None:
                    return m <= hi_int
                return bool(x.view(unsigned).max() <= hi_u)
        else:
            def in_range(x):
                return bool((x.view(unsigned).max(axis=axes, keepdims=keep) <= hi_u).all())
    else:
        def in_range(x):
            return bool((x.min(axis=axes, keepdims=keep) >= lo_r).all()) \
                and bool((x.max(axis=axes, keepdims=keep) <= hi_r).all())

    at = i if red_i is None else red_i
    gather = _checked_gather(at, x_slot, steps, uses, lo_r, hi_r, axes)
    memo = threading.local() if gather is not None else None

    def in_bounds(x):
        if x.size and in_range(x):
            if memo is not None:
                memo.x = x   # (for the gather of these very indices, below)
            return np.ones(out_shape, dtype=np.bool_)
        if memo is not None:
            memo.x = None
        return and_fn(ge_fn(x, lo), le_fn(x, hi)).reshape(out_shape)

    new = last._replace(fn=in_bounds, ins=(x_slot,), dead=_merged_dead(members, gone))
    parts = (ge_i, le_i) if red_i is None else (ge_i, le_i, i)
    extra = {}
    if gather is not None:
        gi, known = gather
        plain = steps[gi].fn

        def gather_checked(operand, indices):
            # The indices the mask above found in range (the same object:
            # a frame slot nothing updates in place while a later step
            # reads it) skip the gather's clamp; others, or a mask that
            # did not run first in this thread, take the plain kernel.
            ok = getattr(memo, "x", None) is indices
            memo.x = None
            return known(operand, indices) if ok else plain(operand, indices)
        extra[gi] = steps[gi]._replace(fn=gather_checked)
    return parts, new, at, extra


def _checked_gather(at: int, x_slot: int, steps: list[Any], uses: _Uses, lo_r: Any, hi_r: Any,
                    axes: Any) -> tuple[int, Any] | None:
    """(step, its KernelInfo.in_range) of a gather after step ``at`` whose
    start indices are the masked ``x_slot`` and whose clamp bounds hold the
    mask's one range ``[0, hi]``: when the mask finds every index in it,
    that gather needs no clamp."""
    if axes is not None or not bool(np.asarray(lo_r) == 0):
        return None
    for gi in uses.readers.get(x_slot, ()):
        g = steps[gi] if gi > at else None
        if g is None or g.op is None or g.op.name != _GATHER or len(g.ins) != 2 \
                or g.ins[1] != x_slot or g.ins[0] == x_slot:
            continue
        known = kernel_info(g.fn).in_range
        dn = g.op.attrs.get("dimension_numbers")
        sizes = g.op.attrs.get("slice_sizes")
        shape = getattr(g.op.operand_types[0], "shape", None)
        if known is None or not isinstance(dn, dict) or sizes is None or shape is None \
                or any(not isinstance(d, int) for d in shape):
            continue
        sim = tuple(dn["start_index_map"])
        if not sim:
            continue
        least = min(int(shape[d]) - int(sizes[d]) for d in sim)
        if 0 <= int(np.asarray(hi_r)) <= least:
            return gi, known
    return None


def _size1_and_reduce(r: int | None, steps: list[Any], template: Any,
                      shape: tuple[int, ...]) -> int | None:
    """``r`` if step ``r`` is a ``reduce`` by ``and`` from a true init over
    dims of size 1 of ``shape`` only, else None."""
    if r is None:
        return None
    red = steps[r]
    op = red.op
    if op is None or op.name != "stablehlo.reduce" or len(op.operand_types) != 2 \
            or red.out.__class__ is not int or len(op.regions) != 1:
        return None
    if any(shape[d] != 1 for d in op.attrs.get("dimensions", (0,))):
        return None
    init = _uniform(_constant(red.ins[-1], template))
    if init is None or init.dtype != np.bool_ or not init:
        return None
    return r if reducer_kind(op.regions[0]) == "and" else None


def _match_iota_gather(i: int, steps: list[Any], uses: _Uses) -> Any:
    """``gather(x, concatenate(iota, starts))`` ending at step ``i``, the
    iota (along an index batch dim, as long as the operand dim it indexes)
    one component of the index vector: the same gather with that pair as
    batching dims, on ``starts`` alone."""
    g = steps[i]
    op = g.op
    if len(g.ins) != 2 or any(getattr(t, "quant", None) is not None
                              for t in (*op.operand_types, *op.result_types)):
        return None
    ki = uses.only_for(g.ins[1])
    if ki is None or steps[ki].op is None or steps[ki].op.name != "stablehlo.concatenate":
        return None
    cat = steps[ki]
    dn = op.attrs["dimension_numbers"]
    ivd = dn["index_vector_dim"]
    if len(cat.ins) != 2 or cat.op.attrs.get("dimension") != ivd:
        return None
    found = _iota_part(cat, steps, uses)
    if found is None:
        return None
    ii, pos, b = found
    other = cat.ins[1 - pos]
    sim = list(dn["start_index_map"])
    k = 0 if pos == 0 else len(sim) - 1   # the iota's component
    od = sim[k]
    oshape = op.operand_types[0].shape
    ishape = cat.op.result_types[0].shape
    iota_dt = _native_int(steps[ii].op.result_types[0])
    if od not in dn["collapsed_slice_dims"] or op.attrs["slice_sizes"][od] != 1 \
            or not isinstance(oshape[od], int) or ishape[b] != oshape[od] \
            or iota_dt is None or oshape[od] - 1 > np.iinfo(iota_dt).max \
            or b in dn["start_indices_batching_dims"]:
        return None
    # The iota's values 0..n-1 along dim b are in range (no clamp): row r
    # of the indices reads row r of operand dim od, which is what batching
    # dims say.
    new_dn = dict(dn)
    new_dn["collapsed_slice_dims"] = [d for d in dn["collapsed_slice_dims"] if d != od]
    new_dn["operand_batching_dims"] = list(dn["operand_batching_dims"]) + [od]
    new_dn["start_indices_batching_dims"] = list(dn["start_indices_batching_dims"]) + [b]
    new_dn["start_index_map"] = sim[:k] + sim[k + 1:]
    new_op = copy.copy(op)
    new_op.attrs = dict(op.attrs, dimension_numbers=new_dn)
    new_op.operand_types = [op.operand_types[0], cat.op.operand_types[1 - pos]]
    fn = KERNELS[_GATHER](new_op)
    if uses.only_for(steps[ii].out) is None:   # the iota is read elsewhere too
        members, parts, gone = [cat, g], (ki,), (cat.out,)
    else:
        members, parts, gone = [steps[ii], cat, g], (ii, ki), (cat.out, steps[ii].out)
    new = g._replace(fn=fn, ins=(g.ins[0], other), op=new_op,
                     dead=_merged_dead(members, gone))
    return parts, new, i


def _iota_part(cat: Any, steps: list[Any], uses: _Uses) -> Any:
    """(step, position in ``cat``, iota dim) of the iota one element wide
    along the concatenated dim among ``cat``'s two operands (else None)."""
    d = cat.op.attrs.get("dimension")
    for pos, slot in enumerate(cat.ins):
        j = uses.producer.get(slot)
        if j is None or steps[j].op is None or steps[j].op.name != "stablehlo.iota":
            continue
        shape = steps[j].op.result_types[0].shape
        b = steps[j].op.attrs.get("iota_dimension")
        if shape[d] == 1 and b != d:
            return j, pos, b
    return None
