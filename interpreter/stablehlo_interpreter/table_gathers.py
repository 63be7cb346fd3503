"""Plan rewrite: elementwise ops on what a gather read from a small table run on the table.

``jnp.searchsorted`` (the heart of ``jnp.histogram`` and ``jnp.digitize``)
reads the sorted table at the midpoints of its binary search, one element
per query, and then canonicalises what it read, once per query::

    g = reshape(gather(table, mid))            # 10^6 values from 101
    z = select(compare(EQ, g, 0.0), 0.0, g)    # -0 -> +0
    c = select(compare(NE, g, g), NaN, z)      # every NaN -> one NaN

Each such op reads and writes as many values as there are queries, in every
iteration of the search. A gather only copies elements of its operand, so an
elementwise op applied to every element of its result with constant operands
gives what the gather reads from the op applied to the table:
``f(gather(T, i)) == gather(f(T), i)``, bit for bit, whatever the gather's
dimension numbers (its clamped starts pick the same elements). :func:`rewrite`
therefore runs such ops once on the table (101 values) and gathers their
result instead of the table: the histogram's search then runs 4 ops fewer
per query and iteration (looptile_steps.py tiles the loop as before: the
table's ops are part of its scalar part).

When. The gather's operand has at most a quarter of its result's elements
(there is something to save), every op is a ``fusible`` elementwise op
(fusion.py's members: each element computed from the same elements of its
operands alone, whatever the array's size) whose other operands are
constants holding one value, the gathered value (after at most one
reshape) is read by those ops only, and exactly one of their values is read
elsewhere, of the table's element type. Traced and validated runs use the
block's unrewritten steps, as for fusion and index_chains.py, so every op
still shows; an error of an op run on the table names that op.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import ExecutionError, InterpreterError
from .registry import has_trait

_GATHER = "stablehlo.gather"
_RESHAPE = "stablehlo.reshape"

# Rewrite gathers of at least this many result elements ...
MIN_ELEMENTS = 1 << 14
# ... from an operand of at most this fraction of them.
MAX_TABLE_FRACTION = 4


def _static_shape(t: Any) -> tuple[int, ...] | None:
    shape = getattr(t, "shape", None)
    if shape is None or getattr(t, "quant", None) is not None \
            or any(not isinstance(d, int) for d in shape):
        return None
    return tuple(shape)


def _one_value(slot: int, template: Any) -> np.ndarray | None:
    """The 0-d array of the constant in ``slot`` when it holds one value."""
    v = template[slot] if slot < len(template) else None
    if v.__class__ is not np.ndarray or v.size == 0:
        return None
    if any(v.strides):
        # One bit pattern throughout (NaN payloads and signed zeros too).
        flat = np.ascontiguousarray(v).reshape(-1)
        rows = flat.view(np.uint8).reshape(flat.size, -1)
        if not bool((rows == rows[0]).all()):
            return None
    return np.asarray(v.reshape(-1)[0] if v.flags.c_contiguous else v.flat[0])


def _readers(steps: list[Any], result_slots: Any) -> dict[int, list[int]]:
    readers: dict[int, list[int]] = {}
    for i, s in enumerate(steps):
        for slot in s.ins:
            readers.setdefault(slot, []).append(i)
    for slot in result_slots:
        readers.setdefault(slot, []).append(-1)
    return readers


def rewrite(steps: list[Any], template: list[Any], result_slots: Any) -> list[Any]:
    """``steps`` with the elementwise ops on small-table gathers moved onto
    the tables (see the module docstring); new slots extend ``template``.
    Returns ``steps`` itself when nothing matched."""
    done: set[int] = set()   # the gather ops rewritten (each once)
    again = True
    while again:
        again = False
        readers = None
        for i, s in enumerate(steps):
            op = s.op
            if op is None or op.name != _GATHER or len(s.ins) != 2 \
                    or s.out.__class__ is not int or s.ins[0] == s.ins[1] or id(op) in done:
                continue
            if readers is None:
                readers = _readers(steps, result_slots)
            found = _match(i, steps, template, readers)
            if found is not None:
                # One gather per pass: the slots' readers change with it.
                done.add(id(op))
                steps, again = found, True
                break
    return steps


def _match(gi: int, steps: list[Any], template: list[Any],
           readers: dict[int, list[int]]) -> list[Any] | None:
    gather = steps[gi]
    op = gather.op
    table_t, result_t = op.operand_types[0], op.result_types[0]
    tshape, rshape = _static_shape(table_t), _static_shape(result_t)
    if tshape is None or rshape is None or np.dtype(table_t.dtype) != np.dtype(result_t.dtype):
        return None
    rsize = int(np.prod(rshape, dtype=np.int64))
    if rsize < MIN_ELEMENTS or MAX_TABLE_FRACTION * int(np.prod(tshape, dtype=np.int64)) > rsize:
        return None
    # The gathered value, after at most one reshape that alone reads it.
    g, view = gather.out, None
    first = readers.get(g, ())
    if len(first) == 1 and first[0] > gi:
        r = steps[first[0]]
        if r.op is not None and r.op.name == _RESHAPE and len(r.ins) == 1 \
                and r.out.__class__ is int:
            view = first[0]
            g = r.out
    gshape = rshape if view is None else _static_shape(steps[view].op.result_types[0])
    if gshape is None:
        return None
    members, consts = _members(steps, template, (view if view is not None else gi) + 1, g, gshape)
    if not members:
        return None
    inside = set(members)
    values = {g} | {steps[j].out for j in members}
    exported = [v for v in values if any(r not in inside for r in readers.get(v, ()))]
    if len(exported) != 1 or exported[0] == g:
        return None
    out = exported[0]
    producer = next(j for j in members if steps[j].out == out)
    if np.dtype(steps[producer].op.result_types[0].dtype) != np.dtype(table_t.dtype):
        return None
    return _rewritten(steps, template, gi, view, members, consts, g, out)


def _members(steps: list[Any], template: list[Any], start: int, g: int,
             gshape: tuple[int, ...]) -> tuple[list[int], dict[int, np.ndarray]]:
    """The steps from ``start`` on that compute only from ``g`` and
    one-valued constants (transitively), elementwise over ``gshape``."""
    have = {g}
    consts: dict[int, np.ndarray] = {}
    members = []
    for j in range(start, len(steps)):
        s = steps[j]
        op = s.op
        if op is None or s.out.__class__ is not int or op.regions or 0 in s.ins \
                or not any(x in have for x in s.ins):
            continue
        if not (has_trait(op.name, "elementwise") and has_trait(op.name, "fusible")):
            continue
        if len(op.result_types) != 1 or _static_shape(op.result_types[0]) != gshape \
                or len(op.operand_types) != len(s.ins):
            continue
        ok = True
        for x, t in zip(s.ins, op.operand_types):
            if x in have:
                continue
            c = consts.get(x)
            if c is None:
                c = _one_value(x, template)
            if c is None or getattr(t, "quant", None) is not None:
                ok = False
                break
            consts[x] = c
        if ok:
            members.append(j)
            have.add(s.out)
    return members, consts


def _rewritten(steps: list[Any], template: list[Any], gi: int, view: int | None,
               members: list[int], consts: dict[int, np.ndarray], g: int,
               out: int) -> list[Any]:
    gather = steps[gi]
    table, idx = gather.ins
    plan = []
    for j in members:
        s = steps[j]
        args = tuple((False, x) if x not in consts else (True, consts[x]) for x in s.ins)
        plan.append((s.fn, args, s.out, s.op))

    def table_values(t: np.ndarray) -> np.ndarray:
        env = {g: t}
        for fn, args, slot, op in plan:
            try:
                env[slot] = fn(*[v if const else env[v] for const, v in args])
            except InterpreterError:
                raise
            except Exception as e:   # named after the op that failed, not the gather
                raise ExecutionError(f"{op.where()}: {type(e).__name__}: {e}",
                                     op.name, op.location) from e
        return np.asarray(env[out])

    new_table = len(template)
    template.append(None)
    dies = tuple(d for d in gather.dead if d == table)
    table_step = gather._replace(fn=table_values, ins=(table,), out=new_table, dead=dies)
    gather_dead = tuple(d for d in gather.dead if d != table) + (new_table,)
    # Frees the dropped steps held for values outside them (none but
    # constants, which are never freed) move to the gather's last step.
    gone = {g, gather.out} | {steps[j].out for j in members}
    moved = tuple(d for j in members for d in steps[j].dead if d not in gone and d != out)
    replace = {}
    if view is None:
        replace[gi] = [table_step, gather._replace(ins=(new_table, idx), out=out,
                                                   dead=gather_dead + moved)]
    else:
        v = steps[view]
        replace[gi] = [table_step, gather._replace(ins=(new_table, idx), dead=gather_dead)]
        replace[view] = [v._replace(out=out, dead=tuple(v.dead) + moved)]
    drop = set(members)
    result = []
    for j, s in enumerate(steps):
        if j in drop:
            continue
        result.extend(replace.get(j, [s]))
    return result
