"""While loops whose large values change only through one fused chain, run chunk by chunk.

``jax.random``'s threefry2x32 is a ``while`` of 5 iterations over two arrays
of counters (10^6 uint32 each for ``random.uniform(key, (10**6,))``). Each
iteration is one fused elementwise chain (fusion.py) over those arrays and a
few scalar ops (the counter, the round's keys and rotation amounts). Run as
written, every iteration reads both arrays from memory and writes them back:
the arrays do not fit in the cache, the chunks of one iteration are cold by
the next. Here the loop runs *tiled*: first its scalar part alone, iteration
by iteration, recording the values the chain takes besides the arrays; then,
chunk by chunk of the arrays, every iteration's chain on that chunk, while it
stays in the cache. XLA fuses such loops the same way.

Exactness. Each iteration's chain runs on each chunk with the values it got
in that iteration (the same invariants, the same member kernels, the same
chunk bounds as the fused step itself takes), and an elementwise chain
computes each element from the same elements of its operands only: every
result element is the untiled loop's, bit for bit (tests/test_looptile.py
compares them, JAX's threefry included).

When. :func:`plan` accepts a ``while`` whose body's plan -- or the plan of
one function the body calls -- has exactly one fused chain (fusion.FusedChain,
no fed reduces), whose chunked operands are loop-carried values, each result
of which is a loop-carried value, and where nothing else (no other step of
the body or the function, not the cond) reads those carried values or the
chain's results. The cond, the body and that function are otherwise plain
kernels (no regions, no other calls), so the chain runs exactly once per
iteration. Everything else runs as before: the chain is the only
place the big values change, so the loop's other values never depend on
them. A run takes the tiled path only when the carried values are
C-contiguous arrays of the chain's shape and type (others: the plain
loop; so does a loop reached again while its scalar part runs). Tracing
and ``STABLEHLO_REF_VALIDATE`` use the plain plan (every op visible), as
does ``STABLEHLO_REF_FUSION=0`` (there are no chains then).
"""

import numpy as np

from . import fusion as _fusion
from . import looptile_steps as _steps
from .errors import ExecutionError, Interrupt
from .pool import run_chunks, thread_count


class _Tiling:
    """How to run one ``while`` tiled (see :func:`plan`).

    ``chain``: the FusedChain; ``big``: the carried positions it writes;
    ``reads``: chunked input k of the chain -> carried position;
    ``writes``: output o of the chain -> carried position."""

    __slots__ = ("chain", "big", "reads", "writes", "dtypes")

    def __init__(self, chain, reads, writes):
        self.chain = chain
        self.reads = reads
        self.writes = writes
        self.big = frozenset(writes)
        self.dtypes = {j: chain.out_dtypes[o] for o, j in enumerate(writes)}

    def run(self, ctx, crun, ccap, brun, bcap, vals):
        """The loop's results, or None when these values do not fit (the
        caller runs the plain loop)."""
        chain = self.chain
        for j in self.big:
            x = vals[j]
            if x.__class__ is not np.ndarray or x.shape != chain.shape \
                    or x.dtype != self.dtypes[j] or not x.flags.c_contiguous:
                return None
        lists = getattr(_fusion.RECORDING, "lists", None)
        if lists is None:
            lists = _fusion.RECORDING.lists = {}
        if chain in lists:   # the loop runs inside itself (a recursive function)
            return None
        start = {j: vals[j] for j in self.big}
        for j in self.big:
            vals[j] = None
        rounds = lists[chain] = []
        iterations = 0
        try:
            while crun(ctx, ccap, vals)[0]:
                vals = brun(ctx, bcap, vals, True)
                iterations += 1
        finally:
            del lists[chain]
        if len(rounds) != iterations:   # plan() makes this impossible
            op = chain.op.members[0]
            raise ExecutionError(f"{chain.op.where()}: internal error: a tiled loop's chain "
                                 f"ran {len(rounds)} times in {iterations} iterations",
                                 op.name, op.location)
        if not rounds:
            for j in self.big:
                vals[j] = start[j]
            return vals
        for j, out in zip(self.writes, self._tiled(start, rounds)):
            vals[j] = out
        return vals

    def _tiled(self, start, rounds):
        """The chain's results after every round, computed chunk by chunk."""
        chain = self.chain
        n = chain.size
        outs = [np.empty(chain.shape, dt) for dt in chain.out_dtypes]
        flat_outs = [o.reshape(-1) for o in outs]
        flat_start = {j: x.reshape(-1) for j, x in start.items()}
        fn = chain._chunk_fn
        reads, writes = self.reads, self.writes
        n_in = chain.n_inputs
        no_tiles = [False] * n_in
        last = len(rounds) - 1

        def run(lo, hi):
            m = hi - lo
            cshape = (m,)
            # Two sets of chunk buffers: a round reads one, writes the other.
            sets = [[np.empty(m, dt) for dt in chain.out_dtypes] for _ in range(2 if last else 0)]
            cur = {j: x[lo:hi] for j, x in flat_start.items()}
            views = [None] * n_in
            for r, inv in enumerate(rounds):
                for k, j in reads.items():
                    views[k] = cur[j]
                targets = [o[lo:hi] for o in flat_outs] if r == last else sets[r % 2]
                fn(views, no_tiles, inv, targets, 0, m, cshape, 1)
                for o, j in enumerate(writes):
                    cur[j] = targets[o]

        unit = chain.chunk
        bounds = [(lo, min(lo + unit, n)) for lo in range(0, n, unit)]
        threads = thread_count() if (chain.heavy or _fusion.THREAD_EXACT_CHAINS) and \
            len(bounds) >= _fusion.MIN_THREAD_CHUNKS else 1
        run_chunks(run, bounds, threads)
        return outs


def _fused(steps):
    return [s for s in steps if isinstance(s.fn, _fusion.FusedChain)]


def _plain(steps, allowed=None):
    """Are ``steps`` plain kernels (no regions, no calls, no special kernel
    taking the run's context), but for the step ``allowed``? Then the chain
    runs exactly once per iteration, where the tiling expects it, and no
    other function can reach it while its calls are being recorded."""
    for s in steps:
        if s is allowed:
            continue
        op = s.op
        if op is None or op.regions or (s.ins and s.ins[0] == 0):
            return False
    return True


def _flow(blk, step, entry, exit_):
    """Check the values of ``step`` (a FusedChain step, or a call in whose
    callee one runs) in Block ``blk``: ``entry`` maps each slot the step
    reads as a big value -> its carried position, ``exit_`` each of its
    result slots -> its position. True when nothing else in ``blk`` reads
    those slots and each result slot is a block result once."""
    for s in blk._planned:
        if s is step:
            continue
        outs = s.out if s.out.__class__ is tuple else (s.out,)
        if not set(s.ins).isdisjoint(entry) or not set(s.ins).isdisjoint(exit_) \
                or not set(outs).isdisjoint(entry):
            return False
    results = list(blk.result_slots)
    return all(results.count(slot) == 1 for slot in exit_) and \
        set(entry).isdisjoint(results)


def _chain_maps(blk, step, positions_of_arg, position_of_result):
    """``(reads, writes)`` of the FusedChain ``step`` of ``blk``: its chunked
    inputs and outputs as positions (through ``positions_of_arg``: block
    argument slot -> position, ``position_of_result``: block result slot ->
    position), or None."""
    chain = step.fn
    if chain.sinks or chain.rowvals or any(m.store is not None for m in chain.hoisted) \
            or chain.n_out != len(chain.out_dtypes):
        return None
    outs = step.out if step.out.__class__ is tuple else (step.out,)
    reads = {}
    for k in chain.chunked_inputs:
        j = positions_of_arg.get(step.ins[k])
        if j is None:
            return None
        reads[k] = j
    writes = [position_of_result.get(slot) for slot in outs]
    # Every big position is read and written by the chain (so its incoming
    # value has no other reader to check).
    if None in writes or len(set(writes)) != len(writes) or set(reads.values()) != set(writes):
        return None
    entry = {step.ins[k]: j for k, j in reads.items()}
    if not _flow(blk, step, entry, {slot: j for slot, j in zip(outs, writes)}):
        return None
    return reads, writes


def plan_or_none(op, cond, body):
    """:func:`plan`, or None where it fails on a form it does not foresee:
    tiling is an optimisation, the plain loop is always right."""
    try:
        return plan(op, cond, body)
    except Interrupt:
        raise   # a deadline that landed while planning (it runs inside the first run)
    except Exception:
        return None


def plan(op, cond, body):
    """A :class:`_Tiling` for the ``while`` op ``op`` with Blocks ``cond`` and
    ``body``, or None (see the module docstring). Plans the blocks."""
    if not _fusion.enabled():
        return None
    body._fast_steps()
    cond._fast_steps()
    chains = _fused(body._planned)
    arg_pos = {slot: j for j, slot in enumerate(body.arg_slots)}
    res_pos = {slot: j for j, slot in enumerate(body.result_slots)}
    if len(set(body.arg_slots)) != len(body.arg_slots):
        return None
    maps = None
    if not _plain(cond._planned):
        return None
    if len(chains) == 1:
        maps = _plain(body._planned, chains[0]) and _chain_maps(body, chains[0], arg_pos, res_pos)
        maps = maps and maps + (chains[0],)
    elif not chains:
        maps = _through_call(body, arg_pos, res_pos)
    if not maps:
        # Several big steps (chains, gathers, reshapes) in the body itself.
        return _steps.plan(op, cond, body)
    reads, writes, step = maps
    # The cond reads none of the big values.
    big = {cond.arg_slots[j] for j in writes}
    if any(not big.isdisjoint(s.ins) for s in cond._planned) or \
            not big.isdisjoint(cond.result_slots):
        return None
    chain = step.fn
    for j in writes:
        t = op.operand_types[j]
        if tuple(getattr(t, "shape", ())) != chain.shape:
            return None
    return _Tiling(chain, reads, writes)


def _through_call(body, arg_pos, res_pos):
    """``(reads, writes, chain step)`` when the body's one fused chain is in
    a function it calls (JAX's ``closed_call``), else None."""
    calls = [s for s in body._planned if s.op is not None and s.op.name == "func.call"
             and s.ins and s.ins[0] == 0]
    found = None
    for s in calls:
        functions = getattr(s.op.module, "functions", None)
        fn = functions.get(s.op.attrs.get("callee")) if functions else None
        blk = getattr(fn, "block", None)
        if blk is None or blk.capture_slots:
            continue
        blk._fast_steps()
        chains = _fused(blk._planned)
        if not chains:
            continue
        if found is not None or len(chains) != 1:
            return None
        found = (s, blk, chains[0])
    if found is None:
        return None
    call, blk, step = found
    if not _plain(body._planned, call) or not _plain(blk._planned, step):
        return None
    operands = call.ins[1:]
    outs = call.out if call.out.__class__ is tuple else (call.out,)
    if len(operands) != len(blk.arg_slots) or len(outs) != len(blk.result_slots) \
            or len(set(blk.arg_slots)) != len(blk.arg_slots):
        return None
    # Callee argument slot -> carried position (through the call's operand).
    inner_args = {a: arg_pos[o] for a, o in zip(blk.arg_slots, operands) if o in arg_pos}
    inner_res = {}
    for r, o in zip(blk.result_slots, outs):
        if o in res_pos and r not in inner_res:
            inner_res[r] = res_pos[o]
    maps = _chain_maps(blk, step, inner_args, inner_res)
    if maps is None:
        return None
    reads, writes = maps
    # In the body: the call alone reads the big carried values, each once,
    # and its results for them are the body's results, read by nothing else.
    entry = {body.arg_slots[j]: j for j in writes}
    if any(operands.count(slot) != 1 for slot in entry):
        return None
    chain_outs = set(step.out if step.out.__class__ is tuple else (step.out,))
    exit_ = {o: res_pos[o] for r, o in zip(blk.result_slots, outs) if r in chain_outs}
    if sorted(exit_.values()) != sorted(writes):
        return None
    if not _flow(body, call, entry, exit_):
        return None
    return reads, writes, step
