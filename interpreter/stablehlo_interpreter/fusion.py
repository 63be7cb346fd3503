"""Fusion of elementwise chains: one step, run in cache-sized chunks on a few threads.

A chain such as ``tanh(x) * exp(-x * x) + sin(x)`` or a threefry round (a
dozen uint32 add/shift/or/xor ops) runs op by op over whole arrays: every op
reads and writes megabytes, and memory traffic, not arithmetic, sets the
time. :func:`fuse` rewrites a block's steps once, when its plan is first
run: elementwise steps over the same static shape become one *fused step*
that runs all of them on one chunk of the elements (up to 512 KiB per value,
which stays in the core's cache) before moving to the next chunk. Chains
with a transcendental share their chunks with helper threads (pool.py):
numpy releases the GIL inside a ufunc loop, so two cores work at once.

Block machine. Inside a chunk, each maximal run of consecutive members
whose ops chainvm.py lowers (integer, bit, shift, compare, select, convert
and float basic arithmetic ops: exact or one IEEE rounding) runs as one
program of the C block machine ``_chains`` (:class:`chainvm.Segment`, made
with the fused step): over blocks of a few thousand elements, so the run's
intermediate values stay in the L1 cache and only the values the step
stores or later members read are written out (stored ones straight into
their chunk of the output). The members between runs (transcendentals,
float -> int converts, integer division) and the fed reduces run as below;
a strided chunk of an input (rows of a transposed operand, a row statistic
broadcast over its rows) is copied once, in cache, for the run.
``STABLEHLO_REF_CHAIN_VM=0`` or the module not built: no runs, the
members' kernels.

Exactness. Every member is the op's own kernel, called on a chunk instead of
the whole array, or a machine op computing that kernel's bits
(``tests/test_chainvm.py``). Elementwise kernels compute each element from
the same elements of their operands only, so each result element is
bit-identical to the unfused run (``tests/test_fusion.py`` checks it over
dtypes, wraparound, NaN, infinities and signed zeros) -- but for the payload
of a NaN made from two NaN operands by a float add, subtract, multiply or
divide, which IEEE 754 leaves open and numpy's own loops choose differently
at different positions of an array (SIMD body, tail, scalar operand), as
do the block machine and _sums.row_op.
Values of size-1 operands broadcast by a member ``broadcast_in_dim`` stay
broadcast views, as unfused.

Where it applies. Members are ops with the registry's ``fusible`` trait with one
result of a static shape of at least :data:`MIN_ELEMENTS` elements, operands
of that shape or 0-d (select's predicate, clamp's bounds), no quantized
types, and ``broadcast_in_dim`` of a one-element operand to that shape. A
group is closed (becomes its fused step, placed where its last member was)
before any other step that reads one of its values or frees a value it
reads, so every step still sees what it saw unfused. Values only used inside
the group are never stored; the others are written to the frame, each chunk
computed in place in its chunk of the output where the member can (a
ufunc's ``out=``, a kernel's ``KernelInfo.into``: the fastmath kernels).

Reduces. A ``reduce`` whose kernel is ``Reducer.reduce`` (KernelInfo.reduction)
of a value the chain computes joins it as a *sink*: each chunk is reduced
as it is made, in the pieces the reducer takes (reducers.RowPlan for
trailing axes, LeadPlan for float sums over leading ones), so the result is
the unfused reduce's bit for bit, and the value is written out only when
something else reads it. When every sink reduces whole rows, its results
broadcast back over those rows (softmax's ``e / sum(e)``) are made per chunk
and read by exact members; elementwise ops on the rows' results (*row
members*: layer norm's ``rsqrt(var + eps)``) run per chunk on its rows when
a member reads them back, after the fused step otherwise, and with
:data:`INPUT_SINKS` a reduce of the chain's input joins it too. A float
add, subtract, multiply or divide of a chunk and rows broadcast over it
runs _sums.row_op (:func:`_row_op`). Before grouping, :func:`inline_calls` puts the
steps of small called functions (JAX's ``_where``) into the caller's plan
and :func:`share_reduces` lets a repeated reduce copy the first one's result,
:func:`share_values` a repeated elementwise op read the first one's.

Observability. Tracing (``STABLEHLO_REF_TRACE_OPS``, tracers) and
``STABLEHLO_REF_VALIDATE`` run the unfused steps (the compiler's observed
loop uses ``Block.steps``, which fusion leaves alone), so every original op
shows with its values. A kernel error in a fused step is reported as the
unfused run reports it: :class:`ExecutionError` naming the member op and its
location.

Switches: ``STABLEHLO_REF_FUSION=0`` turns fusion off (read when a plan is
first run); ``STABLEHLO_REF_ROW_FUSION=0`` the row members, reduces of
inputs and _row_op (read then too); ``STABLEHLO_REF_CHAIN_VM=0`` the block machine
(read when a fused step is made); ``STABLEHLO_REF_THREADS=N`` is the number of threads a fused step
may use (pool.py: default the usable cores, at most 4; 1 = no helper
threads). Only one fused step at a time uses the helpers: others (several
device threads of a parallel run, concurrent executions) run their chunks in
their own thread.
"""

import threading
from time import perf_counter_ns

import numpy as np

from . import chainvm
from . import config as _config
from .errors import ExecutionError, InterpreterError, Interrupt
from .pool import run_chunks, thread_count
from .registry import COMPOSITES, has_trait, kernel_info

try:
    from . import _sums
except ImportError:   # not built: numpy's ufuncs, the same bits (_row_op)
    _sums = None

# Bytes of the widest value of a chunk. Each live value of a chunk takes at
# most this much (float64 detours of f32 data included), and chains keep a
# handful alive: the working set stays within a core's L2 cache.
CHUNK_BYTES = 1 << 19
# Fuse shapes of at least this many elements: smaller values stay in cache
# from one op to the next anyway, and there are no chunks to share.
MIN_ELEMENTS = 1 << 16
# Use the helper threads from this many chunks on (each thread gets at least
# a few chunks, so starting them pays off).
MIN_THREAD_CHUNKS = 4
# Share chains of exact ops (integer, bit and IEEE basic arithmetic) too. Off:
# their ufunc calls last a few microseconds per chunk, about what handing the
# GIL to another thread costs; two threads ran threefry rounds no faster than
# one and burnt 13-50% more CPU (2 cores, a busy machine; with 128K-element
# chunks plain numpy gained 1.4x in a quieter moment, unconfirmed here).
THREAD_EXACT_CHAINS = False
# ... but a chain of this many members is worth sharing whatever its ops: a
# chunk is that many ufunc calls, far more than the hand-over (jax.random's
# threefry, one 129-op chain of uint32 ops: 14.8 -> 12.2 ms wall for 1e6
# values on 2 idle cores; 11-op chains, histogram's, ran 1.7x slower shared).
LONG_CHAIN = 32

# ... and so is a chain whose block machine runs (chainvm.py) hold this many
# members: one C call per chunk with the GIL released throughout.
MACHINE_THREAD_MEMBERS = 4

# A chain the helpers may share runs its calls 2 to 1 + SHARE_TRIALS alone and
# shared in turn, timed, then the way whose best call was faster: whether
# sharing pays depends on the chain (the C time of a chunk's calls against
# the GIL hand-overs between them) and on the machine, and a wrong guess
# costs either way. 1e6 f32 on 2 cores, shared / alone (best trial):
# gelu (one block-machine run a chunk, `tanh` inside it) 1.5 / 2.1 ms;
# three transcendentals (`chain_tanh_exp_sin`) 3.6 / 4.2; jax.random.normal's
# 129-op chain 6.3 / 10.4. The first call (lazy planning, new memory) is not
# a trial.
SHARE_TRIALS = 4
# ... and tries again RETRY_FIRST calls after deciding, then after twice as
# many calls each time (at most RETRY_MAX): a decision taken in a disturbed
# moment is not kept for good (a helper thread preempted through both shared
# trials by a kernel thread holding the other core of two: the sweep's gelu
# then ran alone at 2.0-2.1 ms a call for the rest of the process, against
# 1.5-1.6 shared), and a long-running program pays the trials in a vanishing
# share of its calls.
RETRY_FIRST = 8
RETRY_MAX = 256

# Let reduces of a chain's inputs join it (_input_sink: softmax's and
# logsumexp's row max, layer norm's mean), making the whole program one
# pass over the input. Off: the pass it saves reads data the large L3 of
# the 2-core machine holds (4 MB for (1000, 1000) f32), cheaper than the
# row work it moves into every chunk (fetching the rows' results, then
# `max`, `is_finite`, `select`, the broadcast back: small numpy calls).
# (1000, 1000) f32, process CPU, best of 12 interleaved rounds, one
# thread, loaded machine: logsumexp 1.43 ms without, 1.68 with; softmax
# 1.79 and 2.01; layer norm 1.27 both; with 4x the chunk size, no better.
# Every element is the same either way (tests/test_fusion_rows.py runs
# both).
INPUT_SINKS = False

# A loop run tiled (looptile.py) first runs its scalar part: its chain then
# records the values it would run with instead of running (per thread,
# ``lists``: chain -> one entry per call).
RECORDING = threading.local()

# Members: ops with the registry's "fusible" trait (has_trait below).
_BROADCAST = "stablehlo.broadcast_in_dim"


def enabled():
    return _config.FUSION.value()


# --------------------------------------------------------------------------
# Compile time: grouping steps


def _static_shape(t):
    shape = getattr(t, "shape", None)
    if shape is None or getattr(t, "quant", None) is not None or getattr(t, "dtype", None) is None:
        return None
    if any(d is None for d in shape):
        return None
    return tuple(int(d) for d in shape)


def _size(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _member_shape(step):
    """The shape a step can be fused over, and whether it is a broadcast of a
    one-element operand (else None)."""
    fn, ins, out, dead, op = step
    if op is None or out.__class__ is not int or op.regions or 0 in ins:
        return None
    if len(op.result_types) != 1:
        return None
    shape = _static_shape(op.result_types[0])
    if shape is None or _size(shape) < MIN_ELEMENTS:
        return None
    operand_shapes = [_static_shape(t) for t in op.operand_types]
    if any(s is None for s in operand_shapes) or len(operand_shapes) != len(ins):
        return None
    if op.name == _BROADCAST:
        if len(ins) == 1 and _size(operand_shapes[0]) == 1:
            return shape, True
        return None
    if not has_trait(op.name, "fusible") and not (
            op.name == "stablehlo.composite" and has_trait(op.attrs.get("name"), "fusible")):
        return None
    if any(s != shape and s != () for s in operand_shapes):
        return None
    return shape, False


def _plain_composite(step):
    """A `stablehlo.composite` of an elementwise chlo op that runs a direct
    kernel (registry.composite: JAX serializes erf_inv, erfc, lgamma, ...
    so for plugins) as a plain step of that kernel, so that it can fuse.

    The rules are ops/control.py's _direct_composite (not imported: ops
    import the compiler, which imports this module): version <= 1, no
    composite attributes, one result, not float64/complex128 -- else the
    step stays as it is. tests/test_fusion.py checks the fused result
    against the unfused run, which takes control.py's decision."""
    op = step.op
    if op is None or op.name != "stablehlo.composite" or not step.ins or step.ins[0] != 0:
        return step
    builder = COMPOSITES.get(op.attrs.get("name"))
    if builder is None or not has_trait(op.attrs.get("name"), "fusible") \
            or op.attrs.get("version", 0) > 1 \
            or op.attrs.get("composite_attributes") or op.num_results != 1 \
            or np.dtype(op.result_types[0].dtype) in (np.float64, np.complex128):
        return step
    try:
        kernel = builder(op)
    except Exception:
        return step
    return step._replace(fn=kernel, ins=step.ins[1:])


class _Group:
    __slots__ = ("shape", "members", "reads", "produced", "made", "sinks", "rows", "rowvals",
                 "row_members", "input_sinks")

    def __init__(self, shape):
        self.shape = shape
        self.members = []     # step indices, in program order
        self.reads = set()    # slots read by members
        self.produced = set()  # slots written by members
        self.made = set()     # of those, the chain's own (not a fed reduce's, not rows)
        self.sinks = {}       # step index of a reduce fed by the chain -> its plan
        self.rows = {}        # slot of a broadcast of row values back -> (row value slot, full)
        self.rowvals = {}     # slot of a row value (a whole-rows sink's result, a row
        #                       member's, size-1 axes added to one) -> (kept axes, shape)
        self.row_members = set()   # step indices of elementwise ops on row values
        self.input_sinks = set()   # step indices of the sinks reducing an input of the chain


def _whole_rows(plan):
    """Does ``plan`` reduce whole rows of trailing axes, axis 0 kept? Then
    every chunk holds whole rows and their results are final after it."""
    return getattr(plan, "block", None) == getattr(plan, "n", 0) and len(plan.out_shape) >= 1


def _needs_rows(g):
    """Do the group's row results reach other steps of it per chunk (rows
    broadcast back, row members, reduces of its inputs)? Then every reduce
    it feeds must reduce whole rows."""
    return bool(g.rows or g.row_members or g.input_sinks)


def _row_broadcast(step, groups, steps):
    """``(group, row value slot, full)`` when ``step`` broadcasts a row value
    of an open group (the results of a reduce it feeds, of a row member, or
    such a broadcast) back over the rows they reduce (``broadcast_in_dim``
    keeping the leading, kept axes in place and adding size-1 or reduced
    axes after them; ``full``: to the group's shape), every reduce of the
    group reducing whole rows; else None."""
    op = step.op
    if op is None or op.name != _BROADCAST or len(step.ins) != 1 or step.out.__class__ is not int:
        return None
    src = step.ins[0]
    for g in groups.values():
        if src not in g.rowvals:
            if src not in g.rows:
                continue
            src = g.rows[src][0]
        if not all(_whole_rows(p) for p in g.sinks.values()):
            return None
        kept = g.rowvals[src][0]
        o, r, shape = _static_shape(op.operand_types[0]), _static_shape(op.result_types[0]), g.shape
        if o is None or r is None or len(r) != len(shape) or r[:kept] != shape[:kept] \
                or tuple(op.attrs.get("broadcast_dimensions", ())) != tuple(range(len(o))) \
                or o[:kept] != shape[:kept] or any(d != 1 for d in o[kept:]) \
                or not (r == shape or all(d == 1 for d in r[kept:])):
            return None
        return g, src, r == shape
    return None


def _row_member(step, groups, constants):
    """The open group whose row values ``step`` computes from elementwise:
    an op with the ``fusible`` trait whose result has the shape of the row
    values it reads, its other operands 0-d, one value broadcast (a folded
    constant) or -- for exact ops, whose bits do not depend on the
    operands' layout -- row-shaped values made outside the group (sliced
    per chunk); else None. Run per chunk on the chunk's rows (logsumexp's
    ``log(sum) + max``, layer norm's ``1 / sqrt(var + eps)``)."""
    op = step.op
    if op is None or op.regions or step.out.__class__ is not int or 0 in step.ins \
            or len(op.result_types) != 1 or len(op.operand_types) != len(step.ins) \
            or not has_trait(op.name, "fusible") or not _config.ROW_FUSION.value():
        return None
    for g in groups.values():
        rows = [a for a in step.ins if a in g.rowvals]
        if not rows:
            continue
        kept = g.rowvals[rows[0]]
        if _static_shape(op.result_types[0]) != kept[1] \
                or not all(_whole_rows(p) for p in g.sinks.values()):
            return None
        exact = _is_exact(step)
        for a, t in zip(step.ins, op.operand_types):
            if a in g.rowvals:
                if g.rowvals[a] != kept:
                    return None
                continue
            shape = _static_shape(t)
            if a in g.produced or shape is None:
                return None
            if shape == () or a < len(constants) and _one_value(constants[a]):
                continue
            if shape != kept[1] or not exact:
                return None
        return g
    return None


def _input_sink(step, groups, constants):
    """``(shape, plan)`` when ``step`` reduces whole rows (``Reducer.row_plan``,
    trailing axes, axis 0 kept) of a value of at least MIN_ELEMENTS elements
    that no open group makes and that is not a constant: the group of that
    shape (opened if none is) reads it chunk by chunk and reduces each
    chunk's rows as it reads them (softmax's row max of its input), so
    that elementwise readers of the rows' results run in the same chunk;
    else None."""
    reduction = kernel_info(step.fn).reduction
    if reduction is None or len(step.ins) != 3 or step.ins[0] != 0 \
            or step.out.__class__ is not int or not INPUT_SINKS \
            or not _config.ROW_FUSION.value():
        return None
    x, init = step.ins[1], step.ins[2]
    if x < len(constants) and constants[x] is not None \
            or any(x in g.produced or init in g.produced for g in groups.values()):
        return None
    shape = _static_shape(step.op.operand_types[0])
    if shape is None or _size(shape) < MIN_ELEMENTS:
        return None
    red, dims = reduction
    plan = red.row_plan(shape, dims)
    g = groups.get(shape)
    if plan is None or not _whole_rows(plan) \
            or g is not None and not all(_whole_rows(p) for p in g.sinks.values()):
        return None
    return shape, plan


def _sink_plan(step, groups):
    """``(group, plan)`` when ``step`` is a reduce (KernelInfo.reduction)
    of a value an open group's chain computes (not a fed reduce's result
    nor rows broadcast back: those are not made chunk by chunk), whose
    reducer can take it piece by piece (``Reducer.row_plan``: trailing
    axes, or leading ones of float sums), else None."""
    reduction = kernel_info(step.fn).reduction
    if reduction is None or len(step.ins) != 3 or step.ins[0] != 0 \
            or step.out.__class__ is not int:
        return None
    red, dims = reduction
    for g in groups.values():
        if step.ins[1] in g.made and step.ins[2] not in g.produced:
            plan = red.row_plan(g.shape, dims)
            return None if plan is None else (g, plan)
    return None


def fuse(steps, result_slots, constants=()):
    """``steps`` with fusible elementwise chains replaced by fused steps.

    ``steps`` are a block's :class:`compiler.Step` s (``dead`` filled in) and
    ``result_slots`` the slots it returns; ``constants`` is the block's frame
    template (the plan's constants by slot, None elsewhere). Returns a new
    list; ``steps`` itself is not changed.
    """
    if not enabled() or len(steps) < 1:
        return list(steps)
    steps = [_plain_composite(s) for s in steps]
    kinds = [_member_shape(s) for s in steps]
    if sum(k is not None and not k[1] for k in kinds) < 1:
        return list(steps)
    users = {}
    for i, s in enumerate(steps):
        for slot in s.ins:
            users.setdefault(slot, []).append(i)
    keep = set(result_slots)

    out = []
    groups = {}   # shape -> open _Group
    held = {}     # slot whose free waits for open groups -> those groups

    def close(g):
        del groups[g.shape]
        emitted = _emit(g, steps, users, keep, constants)
        frees = []
        for slot in [s for s, gs in held.items() if g in gs]:
            held[slot].discard(g)
            if not held[slot]:
                del held[slot]
                frees.append(slot)
        if frees:   # after the group's last step: nothing reads them later
            emitted[-1] = emitted[-1]._replace(dead=tuple(emitted[-1].dead) + tuple(frees))
        out.extend(emitted)

    def hold(i, step, own):
        """``step`` without the frees of values other open groups still
        read: each waits until those groups (and ``own``, the group the
        step joins) have been emitted (close)."""
        dead = set(step.dead)
        waiting = False
        for g in groups.values():
            if g is not own and not g.reads.isdisjoint(dead):
                for slot in g.reads & dead:
                    held.setdefault(slot, set()).update((g,) if own is None else (g, own))
                waiting = True
        if waiting:
            step = steps[i] = step._replace(dead=tuple(d for d in step.dead if d not in held))
        return step

    for i, step in enumerate(steps):
        kind = kinds[i]
        if kind is not None:
            shape = kind[0]
            g = groups.get(shape)
            if g is not None and (not g.rows.keys().isdisjoint(step.ins) and not _is_exact(step)
                                  or not g.rowvals.keys().isdisjoint(step.ins)):
                # Broadcast rows reach only exact ops (whose bits do not
                # depend on the operands' layout): this one runs after; so
                # does a member reading a row value itself (a broadcast of
                # the one row's value when there is one row).
                close(g)
                g = None
            if g is None:
                g = groups[shape] = _Group(shape)
            g.members.append(i)
            g.reads.update(step.ins)
            g.produced.add(step.out)
            g.made.add(step.out)
            hold(i, step, g)   # a scalar read by chains of two shapes
            continue
        owner, join = _joins(i, step, groups, steps, constants)
        # Another step: the groups whose values it reads must run before it
        # -- unless it is a reduce the group feeds (a sink: reduced chunk by
        # chunk inside the fused step) or a broadcast of such a reduce's
        # rows back over them. A value it frees that a group still reads is
        # freed after that group instead (hold), so that scalar steps
        # between a chain's members (a threefry round's rotation amounts:
        # slice, reshape, 32 - r) do not cut the chain; unless the step may
        # update that value in place (_may_hold): then the group runs first.
        dead = set(step.dead)
        for g in list(groups.values()):
            if g is owner:
                continue
            if not g.produced.isdisjoint(step.ins) or owner is None \
                    and not g.reads.isdisjoint(dead) and not _may_hold(step):
                close(g)
        step = hold(i, step, owner)
        if owner is not None:
            owner.members.append(i)
            join(step)
            owner.reads.update(s for s in step.ins if s != 0)
            owner.produced.add(step.out)
            continue
        out.append(step)
    for g in list(groups.values()):
        close(g)
    return out


def _joins(i, step, groups, steps, constants):
    """``(group, join)`` when step ``i``, not an elementwise member, joins
    an open group -- a reduce it feeds (a sink), a reduce of its input
    (INPUT_SINKS), a broadcast of its row values back over the rows, an
    elementwise op on its row values (a row member) -- with ``join(step)``
    recording how (``step`` as held); else ``(None, None)``."""
    sink = _sink_plan(step, groups)
    if sink is not None and _needs_rows(sink[0]) and not _whole_rows(sink[1]):
        sink = None   # rows broadcast back need every reduce of whole rows
    fed = _input_sink(step, groups, constants) if sink is None else None
    if fed is not None:
        g = groups.get(fed[0])
        if g is None:
            g = groups[fed[0]] = _Group(fed[0])
        sink = g, fed[1]
        g.input_sinks.add(i)
    if sink is not None:
        g, plan = sink

        def join(step):
            g.sinks[i] = plan
            if _whole_rows(plan):
                g.rowvals[step.out] = (len(plan.out_shape), plan.out_shape)
        return g, join
    row = _row_broadcast(step, groups, steps)
    if row is not None:
        g = row[0]

        def join(step):
            g.rows[step.out] = row[1:]
            if not row[2]:   # size-1 axes added: the same flat row values
                g.rowvals[step.out] = (g.rowvals[row[1]][0],
                                       _static_shape(step.op.result_types[0]))
        return g, join
    g = _row_member(step, groups, constants)
    if g is None:
        return None, None

    def join(step):
        g.row_members.add(i)
        kept = g.rowvals[next(a for a in step.ins if a in g.rowvals)][0]
        g.rowvals[step.out] = (kept, _static_shape(step.op.result_types[0]))
    return g, join


def _may_hold(step):
    """May the frees of ``step`` wait until after a later fused step? Not
    when a dying operand may be updated in place by it (a kernel's
    donate_first, a call handing its arguments over, a special step such as
    a loop that consumes its operands): the value would change under the
    group that still reads it."""
    op = step.op
    return op is not None and not op.regions and op.name != "func.call" \
        and not (step.ins and step.ins[0] == 0) and kernel_info(step.fn).donate_first is None


def _without_sinks(g, steps, users, keep, constants):
    """Group ``g`` emitted with its reduces as steps of their own after it
    (a reduce of a value the chain computes once, not chunk by chunk)."""
    after = [steps[i] for i in g.members if i in g.sinks or steps[i].out in g.rows]
    g.members = [i for i in g.members if i not in g.sinks and steps[i].out not in g.rows]
    g.sinks, g.rows = {}, {}
    return _emit(g, steps, users, keep, constants) + after


# Calls of at most this many steps are inlined (inline_calls), this many
# levels deep.
MAX_INLINE_STEPS = 64
MAX_INLINE_DEPTH = 4


def inline_calls(steps, template):
    """``(steps, template)`` with each ``func.call`` of a small function
    whose steps are plain kernels replaced by those steps, so that chains
    split across JAX's helper functions (``jnp.where`` is a call of
    ``_where``) fuse with their caller's ops and reduces.

    The callee's slots become new slots of the caller's frame (its
    constants are appended to ``template``, a new list), its arguments the
    call's operands, its results the call's result slots. Values of the
    caller are freed inside the callee's steps only when the call hands
    them over (they die at the call, passed once); what else the call
    frees is freed after its last step. Calls in the callee are inlined in
    turn, up to MAX_INLINE_DEPTH levels (deeper ones, recursion included,
    stay calls). A callee qualifies when its steps bind no regions (a
    reduce with a recognised body is fine: KernelInfo.reduction), capture
    nothing and return values its steps compute, each once. Every step keeps its op, so
    an error names the op as the call would. Returns the arguments
    themselves when nothing is inlined.
    """
    out_template = None
    for _ in range(MAX_INLINE_DEPTH):
        new_steps = []
        changed = False
        for step in steps:
            body = _callee(step)
            if body is None:
                new_steps.append(step)
                continue
            if out_template is None:
                out_template = list(template)
            new_steps.extend(_inlined(step, body, out_template))
            changed = True
        if not changed:
            break
        steps = new_steps
    return (steps, template) if out_template is None else (steps, out_template)


def _callee(step):
    """The callee Block of a call ``inline_calls`` may inline, else None."""
    op = step.op
    if op is None or op.name != "func.call" or not step.ins or step.ins[0] != 0:
        return None
    functions = getattr(op.module, "functions", None)
    fn = functions.get(op.attrs.get("callee")) if functions else None
    blk = getattr(fn, "block", None)
    if blk is None or blk.capture_slots or not 0 < len(blk.steps) <= MAX_INLINE_STEPS \
            or len(blk.arg_slots) != len(step.ins) - 1 or blk.template is None:
        return None
    outs = step.out if step.out.__class__ is tuple else (step.out,)
    results = tuple(blk.result_slots)
    produced = {s.out for s in blk.steps if s.out.__class__ is int}
    if len(results) != len(outs) or len(set(results)) != len(results) \
            or not set(results) <= produced:
        return None
    for s in blk.steps:
        if s.op is None or s.out.__class__ is not int \
                or s.op.regions and kernel_info(s.fn).reduction is None:
            return None
    return blk


def _inlined(step, blk, template):
    """The steps of callee ``blk`` in the caller's frame (``template`` grows)."""
    slot = {0: 0}
    for a, b in zip(blk.arg_slots, step.ins[1:]):
        slot[a] = b
    outs = step.out if step.out.__class__ is tuple else (step.out,)
    for r, o in zip(blk.result_slots, outs):
        slot[r] = o
    caller = set(slot.values())
    # Operands that die at the call (and are passed once) die inside at the
    # callee's last use of them, as the call hands them over: a
    # dynamic_update_slice there may still update in place (compiler.py's
    # CALL_FUNCTION and DONATE_FIRST steps).
    operands = step.ins[1:]
    handed = {d for d in step.dead if operands.count(d) == 1}

    def local(s):
        if s not in slot:
            slot[s] = len(template)
            template.append(blk.template[s])
        return slot[s]

    body = []
    freed = set()
    for s in blk.steps:
        ins = tuple(local(i) for i in s.ins)
        out = local(s.out)
        dead = tuple(d for d in (local(d) for d in s.dead) if d not in caller or d in handed)
        freed.update(dead)
        body.append(s._replace(ins=ins, out=out, dead=dead))
    last = body[-1]
    body[-1] = last._replace(dead=last.dead + tuple(d for d in step.dead if d not in freed))
    return body


def share_reduces(steps, template):
    """``steps`` where a reduce that repeats an earlier one (the same
    reducer and dimensions, the same operand slot, an init of the same
    value) takes its result instead of reducing again: JAX's ``var``
    computes the mean its caller computed too, and with the call inlined
    both are in one block. The repeat becomes a step copying the earlier
    result (kept alive until then; a copy, so that no two results or slots
    share an array that a later step or the caller might update in place).
    A new list, or ``steps`` itself when nothing repeats."""
    seen = {}
    out = list(steps)
    changed = False
    for i, step in enumerate(steps):
        reduction = kernel_info(step.fn).reduction
        if reduction is None or len(step.ins) != 3 or step.out.__class__ is not int:
            continue
        # (the Reducer by identity: it defines no __eq__)
        key = (reduction[0], reduction[1], step.ins[1], _value_key(step.ins[2], template))
        result = seen.get(key)
        if result is None:
            seen[key] = step.out
            continue
        dead = step.dead
        for k in range(i - 1, -1, -1):   # the earlier result's last use moves here
            if result in out[k].dead:
                out[k] = out[k]._replace(dead=tuple(d for d in out[k].dead if d != result))
                dead = dead + (result,)
                break
        out[i] = step._replace(fn=_same, ins=(result,), dead=dead)
        changed = True
    return out if changed else steps


def share_values(steps, template, result_slots):
    """``steps`` where an elementwise op (the registry's ``fusible`` trait)
    or a ``broadcast_in_dim`` that repeats an earlier one -- the same op
    name, attributes and result type on the same values -- is dropped and
    its readers read the earlier result. JAX's ``var`` computes ``x - mean``
    again after its caller did (layer norm: one full-size subtract less per
    run); the copies :func:`share_reduces` makes count as the value they
    copy, so the ops after a shared reduce repeat too.

    The kept op computes what the dropped one would (the same kernel on the
    same operands, elementwise: the same bits). The earlier value is freed
    after the last step that reads it or the repeat; a repeat that is a
    result of the block stays (the caller may update its results in place,
    so two must not be one array). A new list, or ``steps`` itself when
    nothing repeats."""
    results = set(result_slots)
    value = {}    # slot -> the slot whose value it holds (copies, dropped repeats)
    renamed = {}  # dropped repeat -> the earlier slot its readers now read
    moved = set()  # slots whose last read changed
    seen = {}
    out = []
    for step in steps:
        if renamed:
            ins = tuple(renamed.get(slot, slot) for slot in step.ins)
            if ins != step.ins:
                step = step._replace(ins=ins)
        if step.fn is _same and len(step.ins) == 1 and step.out.__class__ is int:
            value[step.out] = value.get(step.ins[0], step.ins[0])
        key = _repeat_key(step, value, template)
        if key is None:
            out.append(step)
            continue
        earlier = seen.get(key)
        if earlier is None or step.out in results:
            seen.setdefault(key, step.out)
            out.append(step)
            continue
        renamed[step.out] = value[step.out] = earlier
        moved.update(step.dead)   # its operands' last read is gone
    if not renamed:
        return steps
    moved.update(renamed.values())
    moved.difference_update(renamed)
    return _free_after_last_read(out, moved, set(renamed), results)


def _repeat_key(step, value, template):
    """What makes ``step`` repeat another (see share_values), or None when
    it may not be shared."""
    op = step.op
    if op is None or op.regions or step.out.__class__ is not int or not step.ins \
            or step.ins[0] == 0 or len(op.result_types) != 1 \
            or not (op.name == _BROADCAST or has_trait(op.name, "fusible")):
        return None
    try:
        attrs = repr(sorted(op.attrs.items()))
    except Exception:   # an attribute that does not print: never shared
        return None
    operands = tuple(_value_key(value.get(slot, slot), template) for slot in step.ins)
    return op.name, attrs, repr(op.result_types[0]), operands


def _free_after_last_read(steps, slots, dropped, results):
    """``steps`` with each of ``slots`` freed once, after the last step that
    reads it, or else the step that makes it (never, for a result; an
    argument read by no step any more stays), and the ``dropped`` slots
    (never written) freed nowhere."""
    last = {}
    for i, step in enumerate(steps):
        if step.out in slots and step.out.__class__ is int:
            last.setdefault(step.out, i)
        for slot in step.ins:
            if slot in slots:
                last[slot] = i
    gone = slots | dropped
    for i, step in enumerate(steps):
        if not gone.isdisjoint(step.dead):
            steps[i] = step._replace(dead=tuple(d for d in step.dead if d not in gone))
    for slot, i in last.items():
        if slot not in results:
            steps[i] = steps[i]._replace(dead=tuple(steps[i].dead) + (slot,))
    return steps


def _same(x):
    return x.copy() if x.__class__ is np.ndarray else x


def _value_key(slot, template):
    """A slot's value as a hashable key when it is a plan constant, else the slot."""
    v = template[slot] if slot < len(template) else None
    if v.__class__ is np.ndarray:
        return ("constant", v.dtype.str, v.shape, np.ascontiguousarray(v).tobytes())
    return ("slot", slot)


def _one_value(v):
    """Is ``v`` one value broadcast to a shape (all strides 0)? A plan
    constant folded from ``broadcast_in_dim`` of a scalar (fold.py) is."""
    return v.__class__ is np.ndarray and v.ndim > 0 and v.size > 0 and not any(v.strides)


def _emit(g, steps, users, keep, constants=()):
    """The steps replacing group ``g``: one fused step, or the members
    themselves when fusing gains nothing."""
    late, need = _late_row_members(g, steps)
    member_set = set(g.members) - late
    sinks = [(steps[i], plan) for i, plan in g.sinks.items()]
    row_steps = [steps[i] for i in g.members if steps[i].out in g.rows]
    row_members = [steps[i] for i in g.members if i in g.row_members and i not in late]
    members = [steps[i] for i in g.members if i not in g.sinks and steps[i].out not in g.rows
               and i not in g.row_members]

    def needed(s):
        return s.out in keep or any(u not in member_set for u in users.get(s.out, ()))
    outputs = [s.out for s in members if needed(s)]
    # Rows broadcast back that something outside reads run again after the
    # fused step (broadcast views of its row values).
    post = row_steps if any(needed(s) for s in row_steps) else []
    # Row members no chunk needs run after it too, over whole rows.
    post = [steps[i] for i in g.members if i in late or post and steps[i].out in g.rows]
    post_reads = {slot for s in post for slot in s.ins}
    # A broadcast whose view is needed outside stays a step of its own (run
    # just before the fused step): fused, it would be materialised.
    pre = [s for s in members if s.op.name == _BROADCAST and s.out in outputs]
    fused_members = [s for s in members if not (s.op.name == _BROADCAST and s.out in outputs)]
    outputs = [slot for slot in outputs if slot not in {s.out for s in pre}]
    real = [s for s in fused_members if s.op.name != _BROADCAST]
    if (g.input_sinks or row_members) and not real:
        # Only reduces of inputs and ops on their rows: no chain to share
        # the pass over the input with.
        return [steps[i] for i in g.members]
    if not sinks and (not real or not outputs
                      or (len(real) == 1 and (has_trait(real[0].op.name, "cheap")
                                              or kernel_info(real[0].fn).shares))):
        return members   # nothing to keep in cache, nothing to share
    inputs = {}   # ordered set
    produced = {s.out for s, _ in sinks} | {s.out for s in row_steps} | \
        {s.out for s in row_members}
    for s, _ in sinks:
        if s.ins[1] not in produced and s.ins[1] not in {m.out for m in fused_members}:
            inputs.setdefault(s.ins[1])   # a reduce of an input
    for s in fused_members:
        for slot in s.ins:
            if slot not in produced:
                inputs.setdefault(slot)
        produced.add(s.out)
    for s in row_members:
        for slot in s.ins:
            if slot not in produced:
                inputs.setdefault(slot)
    for s, _ in sinks:
        inputs.setdefault(s.ins[2])   # the init value
    inputs = list(inputs)
    dead = list(dict.fromkeys(
        d for s in fused_members + [s for s, _ in sinks] + row_members
        + (row_steps if not post else [])
        for d in s.dead if d not in produced and d not in post_reads))
    row_outputs = [s.out for s in row_members if needed(s) or s.out in post_reads]
    outputs += row_outputs + [s.out for s, _ in sinks]
    # Inputs that are one constant value broadcast (a folded broadcast_in_dim
    # of a scalar) are invariant, like the 0-d value of a broadcast member:
    # hoisted, bound as a shift amount, never chunked.
    one_value = {slot for slot in inputs
                 if slot < len(constants) and _one_value(constants[slot])}
    read = {slot for s in fused_members for slot in s.ins}
    rows = [(s, g.rows[s.out][0], g.rowvals[g.rows[s.out][0]][0]) for s in row_steps
            if g.rows[s.out][1] and s.out in read]
    # Row members and the broadcasts adding size-1 axes to row values
    # (the same flat values: aliases), in program order.
    row_work = [steps[i] for i in g.members if i in g.row_members and i not in late
                or steps[i].out in g.rows and not g.rows[steps[i].out][1]
                and steps[i].out in need]
    fused = FusedChain(g.shape, fused_members, inputs, outputs, one_value, sinks, rows,
                       row_work, len(row_outputs))
    if fused.unfed_sinks:
        if g.input_sinks or row_members:
            return [steps[i] for i in g.members]
        return _without_sinks(g, steps, users, keep, constants)
    out = outputs[0] if len(outputs) == 1 else tuple(outputs)
    first = fused_members[0] if fused_members else sinks[0][0]
    return pre + [first._replace(fn=fused, ins=tuple(inputs), out=out,
                                 dead=tuple(dead), op=fused.op)] + post


def _late_row_members(g, steps):
    """``(late, need)``: the row members of ``g`` whose values no member of
    its chain reads (through rows broadcast back) -- they run after the
    fused step, once over all rows (logsumexp's ``log(sum) + max``), not
    once per chunk -- and the row values the chunks need."""
    if not g.row_members and not g.rows:
        return set(), set()
    full = {slot for i in g.members if i not in g.sinks and i not in g.row_members
            and steps[i].out not in g.rows for slot in steps[i].ins}
    need = set()
    for i in reversed(g.members):
        s = steps[i]
        if s.out in g.rows and g.rows[s.out][1] and s.out in full:
            need.add(g.rows[s.out][0])
        elif (i in g.row_members or s.out in g.rows) and s.out in need:
            need.update(a for a in s.ins if a in g.rowvals)
    return {i for i in g.row_members if steps[i].out not in need}, need


# Member kinds of a FusedChain program, and how a 0-d value is expanded.
_KERNEL, _SCALAR, _HOISTED = 0, 1, 2
_VIEW, _FULL = 0, 1

# The registry's "exact" trait: ops whose result bits are fixed by the spec
# whatever the numpy loop (IEEE basic arithmetic, integer and bit ops,
# comparisons, selection, conversion; not on complex numbers, whose numpy
# loops round differently): they may take 0-d operands for broadcast ones.
# Its "cheap" trait: one of these alone gains nothing from chunking (a single
# memory-bound pass); a lone transcendental still gains the helper threads,
# but for one whose kernel shares its operand among them itself
# (KernelInfo.shares).


class FusedOp:
    """Stands for a fused step's ops where a step's ``op`` is expected."""

    __slots__ = ("name", "location", "members", "regions", "attrs")

    def __init__(self, members):
        self.name = "fusion"
        self.members = members
        self.location = members[0].location
        self.regions = ()
        self.attrs = {}

    def where(self):
        return (f"fused {', '.join(m.name for m in self.members)} at {self.location}")

    def __repr__(self):
        return f"<FusedOp {self.where()}>"


# --------------------------------------------------------------------------
# Run time


def _direct_and_in_place(plan, readers, dtype):
    """Marks the members that write straight into their output chunk
    (``direct``) or over a dying operand (``inplace``)."""
    # Direct: a stored member computes its chunk of the output in place
    # (a ufunc's out=, a kernel's KernelInfo.into), not into a fresh
    # array copied there: one memory pass less per stored value.
    for m in plan:
        if m.kind == _KERNEL and m.store is not None and m.bind is None:
            m.direct = m.ufunc is not None or \
                (not m.expand and kernel_info(m.fn).into is not None)
    # In place: a ufunc member may write its result over an operand that
    # dies there, was made by a ufunc member of this chunk (a fresh
    # array, chunk-shaped; not a direct member's chunk of the output)
    # and is read by ufunc members only (no kernel holds a view of it),
    # of the result's dtype. A direct member stays direct: in place, its
    # result would then be copied to the output (layer norm's last
    # multiply: one pass over the output more).
    owned = {m.res for m in plan if m.kind == _KERNEL and m.ufunc is not None
             and not m.direct}
    for m in plan:
        if m.kind != _KERNEL or m.ufunc is None or m.direct:
            continue
        operands = m.args[:1] if m.bind is not None else m.args
        for a in operands:
            if a in owned and a in m.dies and dtype[a] == dtype[m.res] and \
                    all(plan[r].kind == _KERNEL and plan[r].ufunc is not None
                        for r in readers[a]):
                m.inplace = a
                break


class FusedChain:
    """The kernel of a fused step: ``fn(*inputs) -> output or [outputs]``.

    Values are *chunked* (a slice of the elements per chunk) or *invariant*
    (the same for every chunk: 0-d operands, and what is computed from them
    alone). A member ``broadcast_in_dim`` of a one-element value yields that
    value 0-d; members with the ``exact`` trait (IEEE-exact and integer ops, whose
    kernels accept broadcastable operands) take invariant operands so -- one
    ufunc call with a 0-d operand per chunk, no broadcast view -- and, when
    all their operands are invariant, run once per call instead of once per
    chunk. Other members get what they get unfused: a broadcast view of a
    broadcast member's value, a full array of a computed one (a
    transcendental's numpy loop may differ between strided and contiguous
    operands; the exact ops cannot). A member whose kernel is a numpy ufunc
    returning the result type (``as_result`` of a ufunc) calls the ufunc
    directly when one of its operands is chunked.

    The per-chunk code is generated once (Python source, one local variable
    per value), so a chunk costs the members' calls and little else.
    """

    # Sharing trials (SHARE_TRIALS): the calls seen, the best ns alone and
    # shared (a list, made at the first trial), then the decision (None
    # while trying), the calls left before the next trials and the gap
    # between the last decision and them (RETRY_FIRST, RETRY_MAX).
    _calls = 0
    _best = None
    _share = None
    _retry = 0
    _gap = 0
    # Whether a machine run leaves its flagged elements to the end of the
    # call (set by _segment_lines).
    late = False

    def __init__(self, shape, members, inputs, outputs, one_value=frozenset(), sinks=(),
                 rows=(), row_members=(), n_row_out=0):
        self.shape, self.size = shape, _size(shape)
        self.op = FusedOp([s.op for s in members] + [s.op for s in row_members]
                          + [s.op for s, _ in sinks])
        self.n_out = len(outputs)
        outputs = outputs[:len(outputs) - len(sinks)]
        row_outputs = outputs[len(outputs) - n_row_out:]
        outputs = outputs[:len(outputs) - n_row_out]
        self.n_inputs = len(inputs)
        local = {slot: k for k, slot in enumerate(inputs)}
        input_shape = {}
        dtype = {}
        # Row values broadcast back over the group's shape: a value per
        # chunk, made once the row value is (_generate).
        rowvals = []
        for s, src, kept in rows:
            local[s.out] = len(local)
            dtype[local[s.out]] = s.op.result_types[0].dtype
            rowvals.append((local[s.out], src, shape[1:kept] + (1,) * (len(shape) - kept)))
        for s in list(members) + list(row_members) + [s for s, _ in sinks]:
            for slot, t in zip(s.ins[-len(s.op.operand_types):], s.op.operand_types):
                input_shape.setdefault(slot, tuple(t.shape))
                if slot in local:
                    dtype.setdefault(local[slot], t.dtype)
        # Invariant values: VIEW (a broadcast member's 0-d value; others see
        # a broadcast view) or FULL (computed from invariant values; others
        # see a full array). 0-d inputs are VIEWs too (they are passed whole),
        # and inputs of one value broadcast (``one_value``: their first
        # element is passed, 0-d).
        invariant = {k: _VIEW for k, slot in enumerate(inputs)
                     if _size(input_shape[slot]) == 1 and input_shape[slot] != shape
                     or slot in one_value}
        self.one_value_inputs = {k: (0,) * len(input_shape[slot]) + (Ellipsis,)
                                 for k, slot in enumerate(inputs) if slot in one_value}
        # Row-shaped values made outside, read by exact row members: sliced
        # per chunk from their flat elements.
        self.row_inputs = frozenset(k for k, slot in enumerate(inputs)
                                    if k not in invariant and input_shape[slot] != shape)
        last_use = {}
        readers = {}
        for j, s in enumerate(members):
            for slot in s.ins:
                last_use[local[slot]] = j
                readers.setdefault(local[slot], []).append(j)
            local[s.out] = len(local)
            dtype[local[s.out]] = s.op.result_types[0].dtype
        dies_at = {}
        for v, last in last_use.items():
            dies_at.setdefault(last, []).append(v)
        out_index = {slot: k for k, slot in enumerate(outputs)}
        widest = 1
        plan = []
        exact = [_is_exact(s) for s in members]
        for j, s in enumerate(members):
            m = _Member(s, tuple(local[slot] for slot in s.ins), local[s.out],
                        out_index.get(s.out))
            for t in list(s.op.operand_types) + list(s.op.result_types):
                widest = max(widest, t.dtype.itemsize)
            if s.op.name == _BROADCAST:
                m.kind = _HOISTED if m.args[0] in invariant else _SCALAR
                invariant[m.res] = _VIEW
            elif exact[j]:
                if all(a in invariant for a in m.args):
                    m.kind = _HOISTED
                    invariant[m.res] = _FULL
                else:
                    m.ufunc = _direct_ufunc(s)
                    bind = kernel_info(s.fn).invariant_ufunc
                    if m.ufunc is None and bind is not None and len(m.args) == 2 \
                            and m.args[0] not in invariant and m.args[1] in invariant:
                        m.ufunc, m.bind = bind
            else:
                m.expand = tuple((k, invariant[a]) for k, a in enumerate(m.args) if a in invariant)
                if not m.expand:
                    m.ufunc = _direct_ufunc(s)
            m.dies = tuple(sorted(dies_at.get(j, ())))
            plan.append(m)
        _direct_and_in_place(plan, readers, dtype)
        self.plan = tuple(plan)
        self._sinks(sinks, local, invariant, len(outputs) + len(row_outputs))
        self.chunked_inputs = tuple(k for k in range(len(inputs))
                                    if k not in invariant and k not in self.row_inputs)
        # Inputs only exact members read (their loops give the same bits
        # whatever the operand's layout): these may be tiled (_layout); not
        # those a reduce reads.
        fed = {v for v, _, _, _ in self.sinks}
        self.exact_inputs = frozenset(
            k for k in self.chunked_inputs
            if k not in fed and all(exact[r] for r in readers.get(k, ())))
        self._row_program(sinks, row_members, rowvals, local, dtype, invariant, row_outputs)
        _row_ops(self.plan, set(self.rowvals) | set(self.chunked_inputs), dtype)
        self.out_dtypes = tuple(dtype[local[slot]] for slot in outputs) + \
            tuple(s.op.result_types[0].dtype for s in row_members if s.out in row_outputs)
        self.out_shapes = (shape,) * len(outputs) + \
            tuple(_static_shape(s.op.result_types[0]) for s in row_members if s.out in row_outputs)
        self.hoisted = tuple(m for m in plan if m.kind == _HOISTED)
        # A member that is not an exact op (a transcendental, in float64)
        # costs microseconds per chunk element block; chains of exact ops
        # are memory-bound ufunc calls too short to share (pool.py), unless
        # there are LONG_CHAIN of them.
        self.heavy = any(m.kind == _KERNEL and not e for m, e in zip(plan, exact))
        self.long = len(plan) >= LONG_CHAIN
        self.bound = tuple((j, m) for j, m in enumerate(plan) if m.bind is not None)
        # float64 detours of narrower floats double the widest value.
        self.chunk = max(1024, CHUNK_BYTES // max(8, widest))
        self.segments = self._vm_segments(dtype, readers)
        # A machine run is one C call per chunk that releases the GIL for
        # its whole length (tens of microseconds or more), not the few
        # microseconds of one ufunc call: worth sharing with the helpers.
        self.long = self.long or \
            sum(len(run) for run, _, _ in self.segments.values()) >= MACHINE_THREAD_MEMBERS
        self._chunk_fn = self._generate()

    def _vm_segments(self, dtype, readers):
        """``{first member: (members, chainvm.Segment, inputs)}``: the
        maximal runs of at least chainvm.MIN_MEMBERS chunk members (hoisted
        ones between them run in the prologue) whose ops the block machine
        computes (chainvm.lower_member), a run ending at a member feeding a
        reduce at the latest (its feed runs after the run)."""
        if not chainvm.enabled():
            return {}
        runs, run = [], []
        rowvals = set(self.rowvals)
        for j, m in enumerate(self.plan):
            if m.kind == _HOISTED:
                continue
            # (A member reading a row value broadcast back keeps _row_op,
            # one loop over the broadcast: in a run, that operand would send
            # every chunk to the members' code, Segment.run taking no
            # broadcast.)
            if m.kind == _KERNEL and not m.expand and rowvals.isdisjoint(m.args) \
                    and chainvm.lower_member(m.op, m.fn) is not None:
                run.append(j)
                if not m.feeds:
                    continue
            runs.append(run)
            run = []
        runs.append(run)
        segments = {}
        made = set()
        for run in runs:
            if len(run) < chainvm.MIN_MEMBERS:
                continue
            produced = {self.plan[k].res for k in run}
            inputs = list(dict.fromkeys(a for k in run for a in self.plan[k].args
                                        if a not in produced))
            outputs = []
            for k in run:
                m = self.plan[k]
                later = bool(m.feeds) or any(r > run[-1] for r in readers.get(m.res, ()))
                if m.store is not None or later:
                    outputs.append((m.res, m.store, later))
            members = [(self.plan[k].op, self.plan[k].args, self.plan[k].res, self.plan[k].fn)
                       for k in run]
            segments[run[0]] = (tuple(run), chainvm.Segment(members, dtype, inputs, outputs),
                                tuple(inputs))
            made |= produced
        for m in self.plan:   # a stored value the machine made is its output's chunk
            if m.inplace in made:
                m.inplace = None
        return segments

    def _sinks(self, sinks, local, invariant, n_stored):
        """The reduces fed by the chain: ``self.sinks`` holds ``(value, plan,
        init input, op)`` per reduce, and the member making each value feeds
        it (``_Member.feeds``: indices into the reduction states, which
        follow the stored outputs in ``targets``). ``unfed_sinks``: a value
        the chain does not compute chunk by chunk (an invariant)."""
        self.sinks = tuple((local[s.ins[1]], plan, local[s.ins[2]], s.op) for s, plan in sinks)
        self.unfed_sinks = any(v in invariant for v, _, _, _ in self.sinks)
        by_res = {m.res: m for m in self.plan}
        for k, (v, _, _, _) in enumerate(self.sinks):
            if v in by_res and v not in invariant:
                by_res[v].feeds += (n_stored + k,)
        self.n_stored = n_stored
        # What the calls' chunking needs of the plans, fixed with them: the
        # pieces of split rows (the first plan's, and whether every plan
        # has the same), else the row count every chunk must be a multiple of.
        fixed = [plan.pieces() for _, plan, _, _ in self.sinks]
        self.split = any(f is not None for f in fixed)
        self.split_pieces = fixed[0] if self.split else None
        self.same_pieces = self.split and all(f == fixed[0] for f in fixed)
        self.rows_multiple = 1 if self.split else \
            int(np.lcm.reduce([plan.n for _, plan, _, _ in self.sinks] or [1]))

    def _row_program(self, sinks, row_members, rowvals, local, dtype, invariant, row_outputs):
        """The per-chunk work on row values, by *stage*: the plan member
        after whose feeds it can run (-1: at the start of the chunk, after
        the reduces of inputs took it). ``self.row_stages`` maps a stage to
        its items in program order: ``("fetch", local, sink)`` (a fed
        reduce's results for the chunk's rows), ``("op", k)`` (row member
        ``k``, ``self.row_plan[k]``) and ``("bcast", local, source, tail)``
        (a row value broadcast back over the chunk). ``self.rowvals``
        lists the broadcasts back."""
        fed_by = {m.res: j for j, m in enumerate(self.plan)}
        stage = {}
        items = []
        results = {}   # local of a fed reduce's results -> its index in targets
        for k, (s, _) in enumerate(sinks):
            local[s.out] = len(local)
            dtype[local[s.out]] = s.op.result_types[0].dtype
            stage[local[s.out]] = fed_by.get(self.sinks[k][0], -1)
            results[local[s.out]] = self.n_stored + k

        def use(a):   # a fed reduce's results, fetched once per chunk
            if a in results:
                items.append((stage[a], 0, ("fetch", a, results.pop(a))))
        self.row_plan = []
        stores = {slot: self.n_stored - len(row_outputs) + i for i, slot in enumerate(row_outputs)}
        for s in row_members:
            args = tuple(local[slot] for slot in s.ins)
            for a in args:
                use(a)
            local[s.out] = len(local)
            dtype[local[s.out]] = s.op.result_types[0].dtype
            st = max([stage[a] for a in args if a in stage] + [-1])
            stage[local[s.out]] = st
            if s.op.name == _BROADCAST:   # size-1 axes added: the same flat values
                items.append((st, 1, ("alias", local[s.out], args[0])))
                continue
            n = self.size // _size(_static_shape(s.op.result_types[0]))
            how = tuple((i, "row" if a in self.row_inputs else
                         "inv" if a in invariant and not _is_exact(s) else "")
                        for i, a in enumerate(args))
            # The numpy ufunc itself where the kernel wraps one (as members).
            fn = s.fn if any(h == "inv" for _, h in how) else _direct_ufunc(s) or s.fn
            self.row_plan.append((s.op, fn, args, local[s.out], stores.get(s.out), n, how))
            items.append((st, 1, ("op", len(self.row_plan) - 1)))
        self.rowvals = []
        for v, src, tail in rowvals:
            use(local[src])
            self.rowvals.append(v)
            items.append((stage[local[src]], 2, ("bcast", v, local[src], tail)))
        self.row_stages = {}
        for st, _, item in sorted(items, key=lambda t: (t[0], t[1])):
            self.row_stages.setdefault(st, []).append(item)

    def _row_lines(self, stage, g):
        """The chunk code of the row work of ``stage`` (_row_program)."""
        lines = []
        base = len(self.plan)
        for item in self.row_stages.get(stage, ()):
            if item[0] == "alias":
                lines.append(f"v{item[1]} = v{item[2]}")
            elif item[0] == "fetch":
                _, v, t = item
                lines += [f"m = {-2 - (t - self.n_stored)}",
                          f"v{v} = targets[{t}].rows(lo * scale, hi * scale)"]
            elif item[0] == "op":
                k = item[1]
                op, fn, args, res, store, n, how = self.row_plan[k]
                g[f"r{k}"] = fn
                rows = f"(lo * scale) // {n}:(hi * scale) // {n}"
                first = next((f"v{a}" for a, (_, h) in zip(args, how) if not h
                              and a not in self.row_inputs), None)
                xs = []
                for a, (_, h) in zip(args, how):
                    xs.append(f"inv[{a}][{rows}]" if h == "row" else
                              f"_bcast(v{a}, {first}.shape)" if h == "inv" else f"v{a}")
                lines += [f"m = {base + k}", f"v{res} = r{k}({', '.join(xs)})"]
                if store is not None:
                    lines.append(f"targets[{store}][{rows}] = v{res}")
            else:
                _, v, src, tail = item
                lines.append(f"v{v} = _rowval(v{src}, cshape, {tail!r})")
        return lines

    def _generate(self):
        """The per-chunk function: ``chunk(views, tiled, inv, targets, lo, hi, cshape, scale)``."""
        g = {"_bcast": np.broadcast_to, "_full": np.full, "_rowval": _rowval, "_row_op": _row_op,
             "_InterpreterError": InterpreterError, "_fail": self._fail}
        hoisted = {m.res for m in self.hoisted} | {k for k in range(self.n_inputs)
                                                  if k not in self.chunked_inputs}
        lines = ["def chunk(views, tiled, inv, targets, lo, hi, cshape, scale):", "    m = -1",
                 "    try:"]
        body = []
        for k in self.chunked_inputs:
            body.append(f"v{k} = views[{k}][:hi - lo] if tiled[{k}] else views[{k}][lo:hi]")
        used = set()
        for m in self.plan:
            used.update(a for a in m.args if a in hoisted)
        for _, _, args, _, _, _, how in self.row_plan:
            used.update(a for a, (_, h) in zip(args, how) if a in hoisted and h != "row")
        for v in sorted(used):
            body.append(f"v{v} = inv[{v}]")
        for j, m in self.bound:
            body.append(f"b{j} = inv[('bind', {j})]")
        for t, (v, _, _, _) in enumerate(self.sinks):
            if v in self.chunked_inputs:   # a reduce of an input: its chunk as read
                body += [f"m = {-2 - t}",
                         f"targets[{self.n_stored + t}].add(v{v}, lo * scale, hi * scale)"]
        body += self._row_lines(-1, g)
        inside = {k for seg in self.segments.values() for k in seg[0]}
        for j, m in enumerate(self.plan):
            if m.kind == _HOISTED or j in inside and j not in self.segments:
                continue
            if j in self.segments:
                body += self._segment_lines(j, g, hoisted)
            else:
                body += self._member_lines(j, m, g, hoisted)
        lines += ["        " + b for b in body] or ["        pass"]
        lines += ["    except _InterpreterError:", "        raise",
                  "    except Exception as e:", "        _fail(m, e)"]
        self.source = "\n".join(lines)   # for tests and debugging
        exec(compile(self.source, f"<fused chain of {len(self.plan)} ops>", "exec"), g)
        return g["chunk"]

    def _member_lines(self, j, m, g, hoisted, feeds=True):
        """The chunk code of member ``j`` (its feeds of reduces only with ``feeds``)."""
        lines = [f"m = {j}"]
        xs = [f"v{a}" for a in m.args]
        out = f", v{m.inplace}" if m.inplace is not None else ""   # positional out=
        target = f"targets[{m.store}][lo:hi]"
        if m.direct and m.ufunc is not None:
            out = f", out={target}"   # (positional: deprecated for maximum/minimum)
        if m.kind == _SCALAR:
            lines.append(f"v{m.res} = v{m.args[0]}.reshape(())")
        elif m.rowop is not None:   # maybe rows broadcast over the other operand: _row_op
            g[f"u{j}"] = m.ufunc
            to = target if m.direct else f"v{m.inplace}" if m.inplace is not None else "None"
            lines.append(f"v{m.res} = _row_op(u{j}, {m.rowop!r}, {', '.join(xs)}, {to})")
        elif m.bind is not None:
            g[f"f{j}"], g[f"u{j}"] = m.fn, m.ufunc
            lines.append(f"v{m.res} = u{j}({xs[0]}, b{j}{out}) if b{j} is not None "
                         f"else f{j}({', '.join(xs)})")
        elif m.ufunc is not None:
            g[f"u{j}"] = m.ufunc
            lines.append(f"v{m.res} = u{j}({', '.join(xs)}{out})")
        else:
            g[f"f{j}"] = m.fn
            for k, how in m.expand:
                xs[k] = (f"_bcast({xs[k]}, cshape)" if how == _VIEW
                         else f"_full(cshape, {xs[k]}, {xs[k]}.dtype)")
            if m.direct:
                g[f"i{j}"] = kernel_info(m.fn).into
                lines.append(f"v{m.res} = i{j}({target}, {', '.join(xs)})")
            else:
                lines.append(f"v{m.res} = f{j}({', '.join(xs)})")
        if m.store is not None and not m.direct:
            lines.append(f"targets[{m.store}][lo:hi] = v{m.res}")
        if feeds:
            lines += self._feed_lines(j, m, g)
        gone = [f"v{d}" for d in m.dies if d not in hoisted]
        if gone:
            lines.append(f"del {', '.join(gone)}")
        return lines

    def _feed_lines(self, j, m, g):
        """The chunk code feeding member ``j``'s value to the reduces it
        feeds, then the row work their finished rows allow."""
        lines = []
        for t in m.feeds:   # a reduce's state (in flat elements)
            lines.append(f"m = {-2 - (t - self.n_stored)}")
            lines.append(f"targets[{t}].add(v{m.res}, lo * scale, hi * scale)")
        return lines + (self._row_lines(j, g) if m.feeds else [])

    def _segment_lines(self, j, g, hoisted):
        """The chunk code of the run of members starting at ``j`` that the
        block machine runs (chainvm.Segment), with the members' own code
        as the fallback for chunks it does not take (strided rows)."""
        members, seg, inputs = self.segments[j]
        g[f"s{j}"] = seg
        last = members[-1]
        # (A run whose outputs are only stored leaves its flagged elements
        # to the end of the call: inv["late"], chainvm.finish.)
        late = ", inv.get('late')" if seg.n_fm and not seg.returned else ""
        self.late = self.late or bool(late)
        lines = [f"m = {j}",
                 f"_r = s{j}.run(({''.join(f'v{a}, ' for a in inputs)}), targets, lo, hi, "
                 f"cshape, scale{late})",
                 "if _r is not None:"]
        if seg.returned:
            lines.append(f"    {''.join(f'v{v}, ' for v in seg.returned)}= _r")
        gone = [f"v{a}" for a in inputs if a not in hoisted
                and any(a in self.plan[k].dies for k in members)]
        lines.append(f"    del {', '.join(gone)}" if gone else "    pass")
        lines.append("else:")
        for k in members:
            lines += ["    " + b for b in self._member_lines(k, self.plan[k], g, hoisted,
                                                            feeds=k != last)]
        return lines + self._feed_lines(last, self.plan[last], g)

    def _fail(self, m, e):
        op = self.row_plan[m - len(self.plan)][0] if m >= len(self.plan) else \
            self.plan[m].op if m >= 0 else \
            self.sinks[-2 - m][3] if m <= -2 else self.op.members[0]
        raise ExecutionError(f"{op.where()}: {type(e).__name__}: {e}",
                             op.name, op.location) from e

    # -- one call

    def _layout(self, inputs, multiple=1, pieces=None):
        """``(views, tiled, unit, rows, aligned)``: the chunked inputs as the arrays
        chunks are sliced from (a tiled one is one chunk long, the same for
        every chunk), the chunk length, and whether chunks are ranges of the
        leading axis (rows) rather than of the flat elements. With
        ``pieces`` (the flat bounds a fed reduce fixes) tiled buffers are
        as long as the longest piece, and ``aligned`` is False when a piece
        does not start at a multiple of a tiled block (the pieces cannot be
        the chunks).

        Flat when every chunked input is C-contiguous, one value broadcast,
        or -- read by exact members only -- a contiguous block repeated
        along leading axes (a per-feature vector broadcast over rows): that
        one is tiled once into a chunk-long buffer, the chunk length a
        multiple of the block (and of ``multiple``: the rows of the
        reduces the chain feeds). Otherwise rows, with each input's own
        strides.
        """
        shape = self.shape
        views = [None] * len(inputs)
        n = self.size
        period = multiple
        tiled = {}
        flat = True
        for k in self.chunked_inputs:
            x = inputs[k]
            if x.__class__ is not np.ndarray or x.shape != shape:
                raise ExecutionError(f"{self.op.where()}: internal error: operand of shape "
                                     f"{np.shape(x)}, expected {shape}",
                                     self.op.name, self.op.location)
            if x.flags.c_contiguous:
                views[k] = x.reshape(-1)
            elif not any(x.strides):   # one value broadcast: a flat stride-0 view
                views[k] = np.broadcast_to(x[(slice(0, 1),) * x.ndim].reshape(1), (n,))
            else:
                block = _repeated_block(x) if k in self.exact_inputs else None
                if block is None or block.size > self.chunk:
                    flat = False
                    break
                tiled[k] = block
                period = np.lcm(period, block.size)
        # Row values broadcast back: chunks of leading rows, where they are
        # broadcast views (flat chunks would repeat them element by element).
        if flat and period <= self.chunk and not self.rowvals:
            unit = length = self.chunk // period * period
            aligned = True
            if pieces and tiled:
                aligned = not any(lo % period for lo, _ in pieces)
                length = max(length, -(-max(hi - lo for lo, hi in pieces) // period) * period)
            for k, block in tiled.items():
                views[k] = np.tile(block, length // block.size)
            return views, [k in tiled for k in range(len(inputs))], unit, False, aligned
        row = max(1, n // max(1, shape[0]))
        for k in self.chunked_inputs:
            views[k] = inputs[k]
        return views, [False] * len(inputs), max(1, self.chunk // row), True, True

    def __call__(self, *inputs):
        lists = getattr(RECORDING, "lists", None)
        if lists and self in lists:   # a tiled loop's scalar part (looptile.py)
            lists[self].append(self._prologue(inputs, None))
            return None if self.n_out == 1 else [None] * self.n_out
        try:
            return self._call(inputs)
        except InterpreterError:
            raise
        except Exception as e:   # outside a member's kernel (allocation, layout)
            op = self.op.members[0]
            raise ExecutionError(f"{self.op.where()}: {type(e).__name__}: {e}",
                                 op.name, op.location) from e

    def _call(self, inputs):
        shape = self.shape
        plans = [plan for _, plan, _, _ in self.sinks]
        split = self.split
        views, tiled, unit, rows, aligned = self._layout(inputs, self.rows_multiple,
                                                         self.split_pieces)
        outs = [np.empty(s, dt) for s, dt in zip(self.out_shapes, self.out_dtypes)]
        if not rows:
            total, tail, scale = self.size, (), 1
            targets = [o.reshape(-1) for o in outs]
        else:
            total, tail, scale = shape[0], shape[1:], self.size // shape[0]
            targets = [o if o.shape == shape else o.reshape(-1) for o in outs]
        inv = self._prologue(inputs, targets)
        late = inv["late"] = [] if self.late else None   # (chainvm.Segment.run)
        # A fed reduce whose reducer shares its own pieces with the helpers
        # when it runs alone (reducers._reduce_last, _reduce_leading: the
        # plan's ``shares``) makes every chunk heavy, and the fused step
        # shares them too; a float32 sum of fewer than 2^22 elements runs
        # its C loop in one thread, and so does an exact chain feeding it
        # (bn_stats, layer norm: GIL hand-overs between the chunks' ufunc
        # calls cost more than the second core gives).
        heavy = self.heavy or any(plan.shares() for plan in plans)
        threads = thread_count() if (heavy or self.long or THREAD_EXACT_CHAINS) and \
            total >= MIN_THREAD_CHUNKS * unit else 1
        if threads > 1 and (plans or self.rowvals) and not any(plan.shares() for plan in plans):
            # A chain feeding row reduces or reading row values (softmax,
            # logsumexp, layer norm) makes a handful of short C calls per
            # chunk with Python between them (the rows' reduce, fetch and
            # broadcast): shared, their GIL hand-overs cost more than the
            # second core gives. (1000, 1000) f32, 2 cores, median of 3 x 15
            # calls, shared / alone: softmax 3.27 / 2.19 ms, logsumexp 1.89
            # / 1.60, layer norm 1.64 / 1.66, var over axis 0 2.01 / 1.85.
            # Reduces that share their own pieces (large float sums) still do.
            threads = 1
        if threads > 1 and not heavy and not any(tiled):
            unit *= 2   # exact ops: longer ufunc calls per GIL hand-over
        bounds = [(lo, min(lo + unit, total)) for lo in range(0, total, unit)] or [(0, 0)]
        states = []
        if plans:
            # Chunks are the pieces the reduces take (reducers.RowPlan,
            # LeadPlan): whole rows, or the pieces a plan fixes (blocks of
            # split rows, groups of leading rows); else each reduce gets the
            # whole value and reduces it as the unfused step does.
            whole_rows = not split and (not rows or all(scale % p.n == 0 for p in plans))
            pieces = self.same_pieces and not rows and aligned
            if pieces:
                bounds = self.split_pieces
            for v, plan, init, _ in self.sinks:
                states.append(plan.start(inv[init]) if whole_rows or pieces
                              else _Collect(plan, inv[init]))
            targets = targets + states
        chunk = self._chunk_fn

        def run(lo, hi):
            chunk(views, tiled, inv, targets, lo, hi, (hi - lo,) + tail, scale)

        if threads > 1:
            self._run_trial(run, bounds, threads)
        else:
            run_chunks(run, bounds, threads)
        if late:
            try:
                chainvm.finish(late, targets)
            except InterpreterError:
                raise
            except Exception as e:
                self._fail(next(j for j, (_, seg, _) in self.segments.items()
                                if seg is late[0][0]), e)
        if states:
            outs = outs + [st.finish() for st in states]
        return outs[0] if self.n_out == 1 else outs

    def _run_trial(self, run, bounds, threads):
        """run_chunks for a chain that may be shared: the way decided, or a
        trial while SHARE_TRIALS decides it, first and after each retry gap
        (the bounds stay the shared run's, so the results do not depend on
        the choice)."""
        share = self._share
        if share is not None:
            self._retry -= 1
            if self._retry > 0:
                run_chunks(run, bounds, threads if share else 1)
                return
            self._share, self._best, self._calls = None, None, 1   # trials again
        k = self._calls = self._calls + 1
        if k == 1 or k > 1 + SHARE_TRIALS:   # the first call; a late concurrent one
            run_chunks(run, bounds, threads)
            return
        shared = k % 2
        t0 = perf_counter_ns()
        run_chunks(run, bounds, threads if shared else 1)
        ns = perf_counter_ns() - t0
        best = self._best
        if best is None:
            best = self._best = [0, 0]
        if not best[shared] or ns < best[shared]:
            best[shared] = ns
        if k == 1 + SHARE_TRIALS:
            self._gap = min(2 * self._gap, RETRY_MAX) if self._gap else RETRY_FIRST
            self._retry = self._gap
            self._share = best[1] < best[0]

    def _prologue(self, inputs, targets):
        """The invariant values (inputs passed whole, hoisted members) and
        the bound operands of ufunc members, once per call."""
        inv = {}
        for k in range(self.n_inputs):
            if k in self.row_inputs:   # sliced per chunk, by exact ops only
                inv[k] = np.asarray(inputs[k]).reshape(-1)
            elif k not in self.chunked_inputs:
                first = self.one_value_inputs.get(k)
                # A one-value input as its first element, a 0-d view.
                inv[k] = inputs[k] if first is None else inputs[k][first]
        j = -1
        try:
            for j, m in enumerate(self.plan):
                if m.kind == _HOISTED:
                    if m.op.name == _BROADCAST:
                        r = inv[m.args[0]].reshape(())
                    else:
                        r = m.fn(*[inv[a] for a in m.args])
                    inv[m.res] = r
                    if m.store is not None:
                        targets[m.store][...] = r
                elif m.bind is not None:
                    inv[("bind", j)] = m.bind(inv[m.args[1]])
        except InterpreterError:
            raise
        except Exception as e:
            self._fail(j, e)
        return inv


# _sums.row_op's operation codes: ufunc -> (code with the second operand
# rows broadcast, code with the first).
_ROW_OP_CODES = {np.add: (0, 0), np.subtract: (1, 2), np.multiply: (3, 3), np.divide: (4, 5)}
_ROW_OP_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _row_ops(plan, maybe_rows, dtype):
    """Marks the float32/float64 add, subtract, multiply and divide members
    reading a value that may be rows broadcast over the other operand
    (``maybe_rows``: rows broadcast back, chunked inputs: softmax's
    ``x - max``, ``e / sum``) to run through _row_op (_Member.rowop);
    none with ``STABLEHLO_REF_ROW_FUSION=0``."""
    if not _config.ROW_FUSION.value():
        return
    for m in plan:
        if m.kind != _KERNEL or m.ufunc is None or m.bind is not None or m.expand \
                or len(m.args) != 2 or maybe_rows.isdisjoint(m.args):
            continue
        codes = _ROW_OP_CODES.get(m.ufunc)
        if codes is not None and dtype[m.args[0]] == dtype[m.args[1]] == dtype[m.res] \
                and dtype[m.res] in _ROW_OP_TYPES:
            m.rowop = codes


def _row_values(v):
    """``(r, n)`` when ``v`` is the C-contiguous values ``r`` broadcast
    over trailing axes of ``n`` elements (strides 0 there), else None."""
    strides = v.strides
    if len(strides) < 2 or strides[-1]:
        return None
    k = len(strides)
    while k and not strides[k - 1]:
        k -= 1
    r = v[(slice(None),) * k + (0,) * (len(strides) - k)]
    return (r.reshape(-1), v.size // max(1, r.size)) if r.flags.c_contiguous else None


def _row_op(ufunc, codes, a, b, out):
    """``ufunc(a, b, out=out)`` (``out`` None: a new array). When one operand
    is rows broadcast over the trailing axes of the other (_row_values) and
    that one is C-contiguous, one loop of _sums.row_op where it is built (a
    third of numpy's time over a broadcast operand); the same bits but for
    which payload a NaN made of two NaNs carries (see the Exactness note)."""
    op = getattr(_sums, "row_op", None)
    if op is not None and a.shape == b.shape and \
            (out is None or out.flags.c_contiguous and out.shape == a.shape):
        for x, v, code in ((a, b, codes[0]), (b, a, codes[1])):
            rows = _row_values(v) if x.flags.c_contiguous else None
            if rows is not None:
                r, n = rows
                if out is None:
                    out = np.empty(x.shape, x.dtype)
                op(x, r, out, r.size, n, code)
                return out
    return ufunc(a, b, out=out)


def _rowval(r, cshape, tail):
    """Row values ``r`` of the chunk's whole rows (flat), broadcast back
    over the chunk: repeated along a flat chunk, a broadcast view of a
    chunk of leading rows (read by exact ops only)."""
    if len(cshape) == 1:
        return np.repeat(r, cshape[0] // r.size) if r.size else np.empty(0, r.dtype)
    return np.broadcast_to(r.reshape((cshape[0],) + tail), cshape)


class _Collect:
    """A reduce fed by a chain whose chunks are not its pieces:
    the value is gathered whole and reduced as the unfused step does."""

    __slots__ = ("plan", "init", "buf")

    def __init__(self, plan, init):
        self.plan, self.init = plan, init
        self.buf = np.empty(_size(plan.shape), plan.red.dtype)

    def add(self, v, lo, hi):
        self.buf[lo:hi] = v.reshape(-1)

    def finish(self):
        return self.plan.red.reduce(self.buf.reshape(self.plan.shape), self.plan.axes, self.init)


class _Member:
    """One op of a fused chain, as the chunk code runs it."""

    __slots__ = ("kind", "fn", "args", "res", "store", "expand", "op", "dies", "ufunc",
                 "bind", "inplace", "feeds", "direct", "rowop")

    def __init__(self, step, args, res, store):
        self.kind = _KERNEL
        self.fn = step.fn
        self.op = step.op
        self.args = args
        self.res = res
        self.store = store
        self.expand = ()      # (operand position, VIEW/FULL) of invariant operands
        self.dies = ()
        self.ufunc = None     # call this numpy ufunc instead of the kernel
        self.bind = None      # ufunc(operand, bind(invariant operand)), or the kernel if None
        self.inplace = None   # local whose buffer receives the result
        self.feeds = ()       # reduces reading the result (indices into targets)
        self.direct = False   # computed in place in its stored output's chunk
        self.rowop = None     # _sums.row_op's codes (second, first operand rows)


def _is_exact(step):
    types = list(step.op.operand_types) + list(step.op.result_types)
    return has_trait(step.op.name, "exact") and not any(t.dtype.kind == "c" for t in types)


def _repeated_block(x):
    """The contiguous block ``x`` repeats along its leading axes (strides 0
    there, C-contiguous after: a vector broadcast over rows), or None."""
    k = 0
    while k < x.ndim and x.strides[k] == 0:
        k += 1
    if k == 0:
        return None
    block = x[(0,) * k]
    if not block.flags.c_contiguous or not any(block.strides) and block.size > 1:
        return None
    return block.reshape(-1)


def _direct_ufunc(step):
    """The numpy ufunc a member's kernel wraps (``as_result(ufunc, dtype)``)
    when calling it directly gives the result type, else None."""
    raw = getattr(step.fn, "__wrapped__", None)
    if not isinstance(raw, np.ufunc) or raw.nout != 1 or raw.nin != len(step.ins):
        return None
    key = (raw, tuple(t.dtype for t in step.op.operand_types))
    out = _UFUNC_RESULT.get(key)
    if out is None:
        try:
            with np.errstate(all="ignore"):
                probe = raw(*[np.zeros((1,), dt) for dt in key[1]])
            out = probe.dtype if probe.__class__ is np.ndarray else False
        except Interrupt:
            raise   # (a deadline landing here, when a plan first runs): not an answer to cache
        except Exception:
            out = False
        _UFUNC_RESULT[key] = out
    return raw if out is not False and out == step.op.result_types[0].dtype else None


_UFUNC_RESULT = {}   # (ufunc, operand dtypes) -> result dtype, or False
