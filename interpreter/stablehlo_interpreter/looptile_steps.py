"""While loops whose large values flow through several chunkable steps, run chunk by chunk.

looptile.py tiles a loop whose big values change through ONE fused chain.
``jnp.searchsorted``'s binary search (the heart of ``jnp.histogram``) has
more in its body: per iteration, one chain computes the midpoints of the
carried ``lo``/``hi`` index arrays, a gather reads the sorted table at the
midpoints, and a second chain compares the queries (a big value the loop
carries unchanged) with what was read and selects the new ``lo``/``hi``.
Run as written, each of these reads and writes whole arrays (4 MB each for
10^6 queries) in every iteration: memory traffic, not arithmetic, is the
cost. Here such a loop runs *tiled* the way looptile.py runs its loops:
first its scalar part alone, iteration by iteration, recording what the
big steps take besides big values (each chain's invariants, each gather's
table); then, chunk by chunk of the big values, every iteration's big steps
on that chunk, while it stays in the cache.

Big steps. Starting from the carried values of the big size that the body
reads, every step that reads a big value must be one of:

* a fused chain (fusion.FusedChain: no fed reduces, no stored hoisted
  values) that reads big values as chunked inputs only; its other chunked
  inputs (a constant array, a small step's full array) are recorded with
  its invariants and sliced per chunk;
* a ``reshape``, or a ``broadcast_in_dim`` that only adds or drops size-1
  dims (increasing dims, the same element count): flat order is kept, so
  on a flat chunk it is the chunk itself;
* a ``gather`` that reads one element per index from a rank-1 table that
  is not a big value (slice size 1, one index component, no batching
  dims): ``np.take(table, idx, mode="clip")`` per chunk, whose clip to
  ``[0, n - 1]`` is the spec's clamp of the start index to
  ``[0, n - slice_size]``.

Their results are big values too. Every other step (plain kernels only: no
regions, calls or special kernels) reads none, and the cond reads none; the
body's result at a big position is a big value and at another position is
not.

Exactness. Each big step computes each element of its result from the same
element of its big operands only (chains are elementwise, reshapes keep the
flat order, the gather reads ``table[clamp(idx[i])]``), with the values it
got in that iteration: every element is the untiled loop's, bit for bit
(tests/test_looptile.py compares them, ``jnp.searchsorted`` and
``jnp.histogram`` included). A run takes the tiled path only when the big
carried values are arrays of their declared type, C-contiguous or one value
broadcast (the loop's initial ``lo``/``hi``).
"""

import numpy as np

from . import fusion as _fusion
from .pool import run_chunks, thread_count

_CHAIN, _VIEW, _TAKE = 0, 1, 2


class StepTiling:
    """How to run one ``while`` tiled through several big steps (see the
    module docstring). ``steps``: ``(kind, step)`` per big step, in body
    order; ``big_pos``: the carried positions holding big values."""

    __slots__ = ("body", "steps", "big_pos", "size", "dtypes", "unit", "heavy",
                 "big_slots", "big_step_ids")

    def __init__(self, body, steps, big_pos, size, dtypes, big_slots):
        self.body = body
        self.steps = steps
        self.big_slots = frozenset(big_slots)
        self.big_step_ids = frozenset(id(s) for _, s in steps)
        self.big_pos = big_pos
        self.size = size
        self.dtypes = dtypes
        chains = [s.fn for kind, s in steps if kind == _CHAIN]
        # Half a chain's chunk: several steps' chunks (and their temporaries)
        # are live at once; at the full chunk they overflow the core's cache
        # (jnp.histogram of 1e6: 20% faster than untiled at the half, 17% at
        # the full chunk, less at a quarter, where per-call costs grow).
        self.unit = max(1024, min(c.chunk for c in chains) // 2)
        self.heavy = any(c.heavy for c in chains)

    def run(self, ctx, crun, ccap, brun, bcap, vals):
        """The loop's results, or None when these values do not fit (the
        caller runs the plain loop from ``vals``, left as given)."""
        for j in self.big_pos:
            x = vals[j]
            if x.__class__ is not np.ndarray or x.size != self.size \
                    or x.dtype != self.dtypes[j] \
                    or not (x.flags.c_contiguous or not any(x.strides)):
                return None
        start = {j: vals[j] for j in self.big_pos}
        vals = list(vals)
        for j in self.big_pos:
            vals[j] = None
        rounds = []
        try:
            while crun(ctx, ccap, vals)[0]:
                vals = self._scalar_round(ctx, bcap, vals, rounds)
        except _Untileable:
            # The scalar part is plain kernels only (no effects): the plain
            # loop starts over from the values as given.
            return None
        if not rounds:
            for j in self.big_pos:
                vals[j] = start[j]
            return vals
        for j, out in self._tiled(start, rounds).items():
            vals[j] = out
        return vals

    def _scalar_round(self, ctx, captures, vals, rounds):
        """One iteration of the body without its big steps: the plain
        kernels run, each big step's other operands are recorded."""
        body = self.body
        env = body.template[:]
        env[0] = ctx
        for slot, v in zip(body.capture_slots, captures):
            env[slot] = v
        for slot, v in zip(body.arg_slots, vals):
            env[slot] = v
        big = self.big_step_ids
        record = []
        for s in body._planned:
            if id(s) in big:
                fn = s.fn
                if isinstance(fn, _fusion.FusedChain):
                    inputs = [env[k] for k in s.ins]
                    inv = fn._prologue(inputs, None)
                    for k in fn.chunked_inputs:
                        if s.ins[k] not in self.big_slots:
                            inv[("flat", k)] = _flat(inputs[k], self.size)
                    record.append(inv)
                elif s.op.name == "stablehlo.gather":
                    record.append(np.ascontiguousarray(env[s.ins[0]]).reshape(-1))
                else:
                    record.append(None)
                continue
            r = s.fn(*[env[k] for k in s.ins])
            if s.out.__class__ is tuple:
                for slot, v in zip(s.out, r):
                    env[slot] = v
            else:
                env[s.out] = r
        rounds.append(record)
        return [env[slot] for slot in body.result_slots]

    def _tiled(self, start, rounds):
        """The big carried values after every round, computed chunk by chunk."""
        body = self.body
        n = self.size
        outs = {j: np.empty(start[j].shape, start[j].dtype) for j in self.big_pos}
        flat_outs = {j: o.reshape(-1) for j, o in outs.items()}
        # (A value broadcast from one element, a loop's initial lo/hi: a
        # flat stride-0 view, as fusion's _layout passes it.)
        flat_start = {j: x.reshape(-1) if x.flags.c_contiguous else
                      np.broadcast_to(x[(0,) * x.ndim].reshape(1), (n,))
                      for j, x in start.items()}
        arg_slot = {j: body.arg_slots[j] for j in self.big_pos}
        res_slot = {j: body.result_slots[j] for j in self.big_pos}
        steps = self.steps

        def run(lo, hi):
            m = hi - lo
            cshape = (m,)
            cur = {arg_slot[j]: x[lo:hi] for j, x in flat_start.items()}
            for record in rounds:
                for (kind, s), got in zip(steps, record):
                    if kind == _CHAIN:
                        chain = s.fn
                        views = [cur.get(k) for k in s.ins]
                        for k in chain.chunked_inputs:
                            if views[k] is None:   # a small step's full array
                                views[k] = got[("flat", k)][lo:hi]
                        targets = [np.empty(m, dt) for dt in chain.out_dtypes]
                        chain._chunk_fn(views, [False] * len(views), got, targets, 0, m,
                                        cshape, 1)
                        outs_ = s.out if s.out.__class__ is tuple else (s.out,)
                        cur.update(zip(outs_, targets))
                    elif kind == _VIEW:
                        cur[s.out] = cur[s.ins[0]]
                    else:
                        cur[s.out] = np.take(got, cur[s.ins[1]], mode="clip")
                cur = {arg_slot[j]: cur[res_slot[j]] for j in self.big_pos}
            for j in self.big_pos:
                flat_outs[j][lo:hi] = cur[arg_slot[j]]

        bounds = [(lo, min(lo + self.unit, n)) for lo in range(0, n, self.unit)]
        threads = thread_count() if (self.heavy or _fusion.THREAD_EXACT_CHAINS) and \
            len(bounds) >= _fusion.MIN_THREAD_CHUNKS else 1
        run_chunks(run, bounds, threads)
        return outs


class _Untileable(Exception):
    """A chain's small chunked input has a layout a flat chunk cannot slice."""


def _flat(x, n):
    """``x`` (a full array of ``n`` elements from the scalar part) as a flat
    array chunks are sliced from: a view of a C-contiguous array, a stride-0
    view of one value broadcast (as fusion's _layout passes them); another
    layout raises :class:`_Untileable` (the fused step would run it by
    rows with its own strides, which a flat chunk cannot)."""
    if x.__class__ is not np.ndarray or x.size != n:
        raise _Untileable
    if x.flags.c_contiguous:
        return x.reshape(-1)
    if not any(x.strides):
        return np.broadcast_to(x[(0,) * x.ndim].reshape(1), (n,))
    raise _Untileable


def _size(t):
    shape = getattr(t, "shape", None)
    if shape is None or any(not isinstance(d, int) or d < 0 for d in shape):
        return None
    return int(np.prod(shape, dtype=np.int64))


def _view_step(s, n):
    """A reshape, or a broadcast_in_dim that adds or drops size-1 dims only."""
    op = s.op
    if op.name == "stablehlo.reshape":
        return True
    if op.name != "stablehlo.broadcast_in_dim":
        return False
    dims = list(op.attrs.get("broadcast_dimensions", ()))
    return dims == sorted(set(dims)) and _size(op.result_types[0]) == n


def _take_step(s):
    """A gather reading one element per index of a rank-1 table."""
    op = s.op
    if op.name != "stablehlo.gather" or len(s.ins) != 2:
        return False
    dn = op.attrs.get("dimension_numbers")
    table, idx = op.operand_types
    if not isinstance(dn, dict) or len(getattr(table, "shape", ())) != 1:
        return False
    if list(op.attrs.get("slice_sizes", ())) != [1] or list(dn["start_index_map"]) != [0] \
            or dn["operand_batching_dims"] or dn["start_indices_batching_dims"]:
        return False
    ishape = tuple(idx.shape)
    ivd = dn["index_vector_dim"]
    # One index component per result element: the index vector dim is
    # implicit (== rank) or of size 1.
    if not (ivd == len(ishape) or (ivd < len(ishape) and ishape[ivd] == 1)):
        return False
    dt = np.dtype(idx.dtype)
    return dt.kind in "iu" and (dt.itemsize <= 4 or dt.kind == "i")


def _big_steps(body, big, n):
    """``[(kind, step)]`` of the steps reading big values (``big``: slots,
    extended in place by their results), or None when one is not of a kind
    that can run chunk by chunk, or a chain reads a big value as an
    invariant or a small value as chunked."""
    steps = []
    for s in body._planned:
        reads = [k for k in s.ins if k in big]
        if not reads:
            if isinstance(s.fn, _fusion.FusedChain) or s.op is None or s.op.regions \
                    or (s.ins and s.ins[0] == 0):
                return None   # another chain, or not a plain kernel
            continue
        outs = s.out if s.out.__class__ is tuple else (s.out,)
        fn = s.fn
        if isinstance(fn, _fusion.FusedChain):
            if fn.sinks or fn.rowvals or any(m.store is not None for m in fn.hoisted) \
                    or fn.n_out != len(fn.out_dtypes) or fn.size != n:
                return None
            # Big values only as chunked inputs (a small chunked input, a
            # constant or a small step's full array, is sliced per chunk).
            if any(s.ins[k] in big for k in range(fn.n_inputs)
                   if k not in fn.chunked_inputs):
                return None
            kind = _CHAIN
        elif s.op is not None and _view_step(s, n) and len(s.ins) == 1:
            kind = _VIEW
        elif s.op is not None and _take_step(s) and s.ins[0] not in big \
                and _size(s.op.result_types[0]) == n:
            kind = _TAKE
        else:
            return None
        steps.append((kind, s))
        big.update(outs)
    return steps


def plan(op, cond, body):
    """A :class:`StepTiling` for the ``while`` op ``op`` (Blocks ``cond``
    and ``body``, planned), or None (see the module docstring)."""
    chains = [s.fn for s in body._planned if isinstance(s.fn, _fusion.FusedChain)]
    if not chains or len(set(body.arg_slots)) != len(body.arg_slots):
        return None
    n = chains[0].size
    big_pos = [j for j, (slot, t) in enumerate(zip(body.arg_slots, op.operand_types))
               if _size(t) == n and any(slot in s.ins for s in body._planned)]
    big = {body.arg_slots[j] for j in big_pos}
    steps = _big_steps(body, big, n)
    if not steps or not any(kind == _CHAIN for kind, _ in steps):
        return None
    # Big values stay at big positions; nothing small becomes big.
    for j, r in enumerate(body.result_slots):
        if (j in big_pos) != (r in big):
            return None
    cond_big = {cond.arg_slots[j] for j in big_pos}
    if any(not cond_big.isdisjoint(s.ins) for s in cond._planned) or \
            not cond_big.isdisjoint(cond.result_slots):
        return None
    dtypes = {j: np.dtype(op.operand_types[j].dtype) for j in big_pos}
    if any(np.dtype(op.result_types[j].dtype) != dtypes[j] for j in big_pos):
        return None
    return StepTiling(body, steps, tuple(big_pos), n, dtypes, big)
