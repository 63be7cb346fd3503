"""Fusion of elementwise chains: one step, run in cache-sized chunks on a few threads.

A chain such as ``tanh(x) * exp(-x * x) + sin(x)`` or a threefry round (a
dozen uint32 add/shift/or/xor ops) runs op by op over whole arrays: every op
reads and writes megabytes, and memory traffic, not arithmetic, sets the
time. :func:`fuse` rewrites a block's steps once, when its plan is first
run: elementwise steps over the same static shape become one *fused step*
that runs all of them on one chunk of the elements (tens of KiB per value,
which stays in the core's cache) before moving to the next chunk. Large
arrays have their chunks shared with helper threads: numpy releases the GIL
inside a ufunc loop, so two cores work at once.

Exactness. Every member is the op's own kernel, called on a chunk instead of
the whole array. Elementwise kernels compute each element from the same
elements of their operands only, so each result element is bit-identical to
the unfused run (``tests/test_fusion.py`` checks it over dtypes, wraparound,
NaN, infinities and signed zeros). Values of size-1 operands broadcast by a
member ``broadcast_in_dim`` stay broadcast views, as unfused.

Where it applies. Members are ops of :data:`regions.ELEMENTWISE_OPS` with one
result of a static shape of at least :data:`MIN_ELEMENTS` elements, operands
of that shape or 0-d (select's predicate, clamp's bounds), no quantized
types, and ``broadcast_in_dim`` of a one-element operand to that shape. A
group is closed (becomes its fused step, placed where its last member was)
before any other step that reads one of its values or frees a value it
reads, so every step still sees what it saw unfused. Values only used inside
the group are never stored; the others are written to the frame.

Observability. Tracing (``STABLEHLO_REF_TRACE_OPS``, tracers) and
``STABLEHLO_REF_VALIDATE`` run the unfused steps (the compiler's observed
loop uses ``Block.steps``, which fusion leaves alone), so every original op
shows with its values. A kernel error in a fused step is reported as the
unfused run reports it: :class:`ExecutionError` naming the member op and its
location.

Switches: ``STABLEHLO_REF_FUSION=0`` turns fusion off (read when a plan is
first run); ``STABLEHLO_REF_THREADS=N`` is the number of threads a fused step
may use (default: the usable cores, at most 4; 1 = no helper threads). Only
one fused step at a time uses the helpers: others (several device threads of
a parallel run, concurrent executions) run their chunks in their own thread.
"""

import itertools
import os
import threading

import numpy as np

from .errors import ExecutionError, InterpreterError
from .regions import ELEMENTWISE_OPS

FUSION_ENV = "STABLEHLO_REF_FUSION"
THREADS_ENV = "STABLEHLO_REF_THREADS"

# Bytes of the widest value of a chunk. Each live value of a chunk takes at
# most this much (float64 detours of f32 data included), and chains keep a
# handful alive: the working set stays within a core's L2 cache.
CHUNK_BYTES = 1 << 19
# Fuse shapes of at least this many elements: below two chunks there is no
# cache reuse to gain, only per-chunk overhead.
MIN_ELEMENTS = 1 << 16
# Use the helper threads from this many chunks on (each thread gets at least
# a few chunks, so starting them pays off).
MIN_THREAD_CHUNKS = 4
MAX_DEFAULT_THREADS = 4

_FUSIBLE = ELEMENTWISE_OPS - {"stablehlo.constant"}
_BROADCAST = "stablehlo.broadcast_in_dim"


def enabled():
    return os.environ.get(FUSION_ENV, "1") not in ("0", "false", "off", "")


_default_threads = []


def thread_count():
    """Threads a fused step may use (``STABLEHLO_REF_THREADS``, read at each
    call; default: the usable cores, at most MAX_DEFAULT_THREADS)."""
    v = os.environ.get(THREADS_ENV)
    if v:
        try:
            return max(1, int(v))
        except ValueError:
            pass
    if not _default_threads:
        try:
            n = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            n = os.cpu_count() or 1
        _default_threads.append(max(1, min(n, MAX_DEFAULT_THREADS)))
    return _default_threads[0]


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
    if op.name not in _FUSIBLE:
        return None
    if any(s != shape and s != () for s in operand_shapes):
        return None
    return shape, False


class _Group:
    __slots__ = ("shape", "members", "reads", "produced")

    def __init__(self, shape):
        self.shape = shape
        self.members = []     # step indices, in program order
        self.reads = set()    # slots read by members
        self.produced = set()  # slots written by members


def fuse(steps, template, result_slots):
    """``steps`` with fusible elementwise chains replaced by fused steps.

    ``steps`` are a block's :class:`compiler.Step` s (``dead`` filled in);
    ``template`` its frame template (constants) and ``result_slots`` the
    slots it returns. Returns a new list; ``steps`` itself is not changed.
    """
    if not enabled() or len(steps) < 2:
        return list(steps)
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

    def close(g):
        del groups[g.shape]
        out.extend(_emit(g, steps, users, keep))

    for i, step in enumerate(steps):
        kind = kinds[i]
        if kind is not None:
            shape = kind[0]
            g = groups.get(shape)
            if g is None:
                g = groups[shape] = _Group(shape)
            g.members.append(i)
            g.reads.update(step.ins)
            g.produced.add(step.out)
            continue
        # Another step: the groups whose values it reads, or whose inputs it
        # frees, must run before it.
        dead = set(step.dead)
        for g in list(groups.values()):
            if not g.produced.isdisjoint(step.ins) or not g.reads.isdisjoint(dead):
                close(g)
        out.append(step)
    for g in list(groups.values()):
        close(g)
    return out


def _emit(g, steps, users, keep):
    """The steps replacing group ``g``: one fused step, or the members
    themselves when fusing gains nothing."""
    member_set = set(g.members)
    members = [steps[i] for i in g.members]
    outputs = [s.out for s in members
               if s.out in keep or any(u not in member_set for u in users.get(s.out, ()))]
    # A broadcast whose view is needed outside stays a step of its own (run
    # just before the fused step): fused, it would be materialised.
    pre = [s for s in members if s.op.name == _BROADCAST and s.out in outputs]
    fused_members = [s for s in members if not (s.op.name == _BROADCAST and s.out in outputs)]
    outputs = [slot for slot in outputs if slot not in {s.out for s in pre}]
    real = [s for s in fused_members if s.op.name != _BROADCAST]
    if not real or not outputs or (len(real) == 1 and real[0].op.name in _CHEAP):
        return members   # nothing to keep in cache, nothing to share
    inputs = []
    produced = set()
    for s in fused_members:
        for slot in s.ins:
            if slot not in produced and slot not in inputs:
                inputs.append(slot)
        produced.add(s.out)
    dead = []
    for s in fused_members:
        for d in s.dead:
            if d not in dead:
                dead.append(d)
    fused = FusedChain(g.shape, fused_members, inputs, outputs)
    out = outputs[0] if len(outputs) == 1 else tuple(outputs)
    return pre + [fused_members[0]._replace(fn=fused, ins=tuple(inputs), out=out,
                                            dead=tuple(dead), op=fused.op)]


# Member kinds of a FusedChain program, and how a 0-d value is expanded.
_KERNEL, _SCALAR, _HOISTED = 0, 1, 2
_VIEW, _FULL = 0, 1

# Ops whose result bits are fixed by the spec whatever the numpy loop (IEEE
# basic arithmetic, integer and bit ops, comparisons, selection, conversion;
# not on complex numbers, whose numpy loops round differently): they may
# take 0-d operands for broadcast ones.
_EXACT = frozenset("stablehlo." + n for n in """
add subtract multiply divide remainder maximum minimum negate abs and or xor not compare
select clamp convert bitcast_convert shift_left shift_right_logical shift_right_arithmetic
floor ceil sign is_finite round_nearest_even round_nearest_afz
""".split())

# One of these alone gains nothing from chunking (a single memory-bound pass);
# a lone transcendental still gains the helper threads.
_CHEAP = frozenset("stablehlo." + n for n in """
add subtract multiply maximum minimum negate abs and or xor not compare select clamp
convert bitcast_convert real imag shift_left shift_right_logical shift_right_arithmetic
floor ceil sign is_finite
""".split())


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


class FusedChain:
    """The kernel of a fused step: ``fn(*inputs) -> output or [outputs]``.

    Values are *chunked* (a slice of the elements per chunk) or *invariant*
    (the same for every chunk: 0-d operands, and what is computed from them
    alone). A member ``broadcast_in_dim`` of a one-element value yields that
    value 0-d; members of :data:`_EXACT` (IEEE-exact and integer ops, whose
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

    def __init__(self, shape, members, inputs, outputs):
        self.shape = shape
        self.size = _size(shape)
        self.op = FusedOp([s.op for s in members])
        self.n_out = len(outputs)
        self.n_inputs = len(inputs)
        local = {slot: k for k, slot in enumerate(inputs)}
        input_shape = {}
        for s in members:
            for slot, t in zip(s.ins, s.op.operand_types):
                input_shape.setdefault(slot, tuple(t.shape))
        # Invariant values: VIEW (a broadcast member's 0-d value; others see
        # a broadcast view) or FULL (computed from invariant values; others
        # see a full array). 0-d inputs are VIEWs too (they are passed whole).
        invariant = {k: _VIEW for k, slot in enumerate(inputs)
                     if _size(input_shape[slot]) == 1 and input_shape[slot] != shape}
        last_use = {}
        for j, s in enumerate(members):
            for slot in s.ins:
                last_use[local[slot]] = j
            local[s.out] = len(local)
        out_index = {slot: k for k, slot in enumerate(outputs)}
        widest = 1
        plan = []   # (kind, fn, args, res, store, expand, op, dies)
        for j, s in enumerate(members):
            args = tuple(local[slot] for slot in s.ins)
            res = local[s.out]
            types = list(s.op.operand_types) + list(s.op.result_types)
            for t in types:
                widest = max(widest, t.dtype.itemsize)
            expand = ()
            fn = s.fn
            if s.op.name == _BROADCAST:
                kind = _HOISTED if args[0] in invariant else _SCALAR
                invariant[res] = _VIEW
            elif s.op.name in _EXACT and not any(t.dtype.kind == "c" for t in types):
                if all(a in invariant for a in args):
                    kind = _HOISTED
                    invariant[res] = _FULL
                else:
                    kind = _KERNEL
                    fn = _direct_ufunc(s) or fn
            else:
                kind = _KERNEL
                expand = tuple((k, invariant[a]) for k, a in enumerate(args) if a in invariant)
                if not expand:
                    fn = _direct_ufunc(s) or fn
            dies = tuple(sorted(v for v, last in last_use.items() if last == j))
            plan.append((kind, fn, args, res, out_index.get(s.out), expand, s.op, dies))
        self.plan = tuple(plan)
        self.chunked_inputs = tuple(k for k in range(len(inputs)) if k not in invariant)
        self.out_dtypes = tuple(next(s.op.result_types[0].dtype for s in members if s.out == slot)
                                for slot in outputs)
        self.hoisted = tuple(p for p in plan if p[0] == _HOISTED)
        # float64 detours of narrower floats double the widest value.
        self.chunk = max(1024, CHUNK_BYTES // max(8, widest))
        self._chunk_fn = self._generate()

    def _generate(self):
        """The per-chunk function: ``chunk(views, inv, targets, lo, hi, cshape)``."""
        g = {"_bcast": np.broadcast_to, "_full": np.full, "_VIEW": _VIEW,
             "_InterpreterError": InterpreterError, "_fail": self._fail}
        hoisted = {p[3] for p in self.hoisted} | {k for k in range(self.n_inputs)
                                                  if k not in self.chunked_inputs}
        lines = ["def chunk(views, inv, targets, lo, hi, cshape):", "    m = -1", "    try:"]
        body = []
        for k in self.chunked_inputs:
            body.append(f"v{k} = views[{k}][lo:hi]")
        used = set()
        for kind, fn, args, res, store, expand, op, dies in self.plan:
            used.update(a for a in args if a in hoisted)
        for v in sorted(used):
            body.append(f"v{v} = inv[{v}]")
        for j, (kind, fn, args, res, store, expand, op, dies) in enumerate(self.plan):
            if kind == _HOISTED:
                continue
            body.append(f"m = {j}")
            if kind == _SCALAR:
                body.append(f"v{res} = v{args[0]}.reshape(())")
            else:
                g[f"f{j}"] = fn
                xs = [f"v{a}" for a in args]
                for k, how in expand:
                    xs[k] = (f"_bcast({xs[k]}, cshape)" if how == _VIEW
                             else f"_full(cshape, {xs[k]}, {xs[k]}.dtype)")
                body.append(f"v{res} = f{j}({', '.join(xs)})")
            if store is not None:
                body.append(f"targets[{store}][lo:hi] = v{res}")
            gone = [f"v{d}" for d in dies if d not in hoisted]
            if gone:
                body.append(f"del {', '.join(gone)}")
        lines += ["        " + b for b in body] or ["        pass"]
        lines += ["    except _InterpreterError:", "        raise",
                  "    except Exception as e:", "        _fail(m, e)"]
        exec(compile("\n".join(lines), f"<fused chain of {len(self.plan)} ops>", "exec"), g)
        return g["chunk"]

    def _fail(self, m, e):
        op = self.plan[m][6] if m >= 0 else self.op.members[0]
        raise ExecutionError(f"{op.where()}: {type(e).__name__}: {e}",
                             op.name, op.location) from e

    # -- one call

    def _layout(self, inputs):
        """(views, rows): the chunked inputs as the arrays chunks are sliced
        from, and whether chunks are ranges of the leading axis (rows)
        rather than of the flat elements. Flat when every chunked input is
        C-contiguous or one value broadcast."""
        shape = self.shape
        views = [None] * len(inputs)
        chunked = [inputs[k] for k in self.chunked_inputs]
        for x in chunked:
            if x.__class__ is not np.ndarray or x.shape != shape:
                raise ExecutionError(f"{self.op.where()}: internal error: operand of shape "
                                     f"{np.shape(x)}, expected {shape}",
                                     self.op.name, self.op.location)
        flat = all(x.flags.c_contiguous or not any(x.strides) for x in chunked)
        n = self.size
        for k in self.chunked_inputs:
            x = inputs[k]
            if not flat:
                views[k] = x
            elif x.flags.c_contiguous:
                views[k] = x.reshape(-1)
            else:   # one value broadcast: a flat stride-0 view of it
                one = x[(slice(0, 1),) * x.ndim].reshape(1)
                views[k] = np.broadcast_to(one, (n,))
        return views, not flat

    def __call__(self, *inputs):
        shape = self.shape
        views, rows = self._layout(inputs)
        outs = [np.empty(shape, dt) for dt in self.out_dtypes]
        if not rows:
            total, unit, tail = self.size, self.chunk, ()
            targets = [o.reshape(-1) for o in outs]
        else:
            row = max(1, self.size // max(1, shape[0]))
            total, unit, tail = shape[0], max(1, self.chunk // row), shape[1:]
            targets = outs
        inv = self._prologue(inputs, targets)
        bounds = [(lo, min(lo + unit, total)) for lo in range(0, total, unit)] or [(0, 0)]
        chunk = self._chunk_fn

        def run(lo, hi):
            chunk(views, inv, targets, lo, hi, (hi - lo,) + tail)

        threads = thread_count() if len(bounds) >= MIN_THREAD_CHUNKS else 1
        if threads > 1 and _POOL_LOCK.acquire(False):
            try:
                _run_shared(run, bounds, threads)
            finally:
                _POOL_LOCK.release()
        else:
            for lo, hi in bounds:
                run(lo, hi)
        return outs[0] if self.n_out == 1 else outs

    def _prologue(self, inputs, targets):
        """The invariant values (inputs passed whole, hoisted members), once per call."""
        inv = {}
        for k in range(self.n_inputs):
            if k not in self.chunked_inputs:
                inv[k] = inputs[k]
        m = -1
        try:
            for m, (kind, fn, args, res, store, expand, op, dies) in enumerate(self.plan):
                if kind != _HOISTED:
                    continue
                if fn is None or op.name == _BROADCAST:
                    r = inv[args[0]].reshape(())
                else:
                    r = fn(*[inv[a] for a in args])
                inv[res] = r
                if store is not None:
                    targets[store][...] = r
        except InterpreterError:
            raise
        except Exception as e:
            self._fail(m, e)
        return inv


def _direct_ufunc(step):
    """The numpy ufunc a member's kernel wraps (``as_result(ufunc, dtype)``)
    when calling it directly gives the result type, else None."""
    raw = getattr(step.fn, "__wrapped__", None)
    if not isinstance(raw, np.ufunc) or raw.nout != 1 or raw.nin != len(step.ins):
        return None
    try:
        with np.errstate(all="ignore"):
            probe = raw(*[np.zeros((1,), t.dtype) for t in step.op.operand_types])
    except Exception:
        return None
    if probe.__class__ is not np.ndarray or probe.dtype != step.op.result_types[0].dtype:
        return None
    return raw


# --------------------------------------------------------------------------
# The helper threads


_POOL_LOCK = threading.Lock()   # one fused step at a time shares its chunks
_pool = None


class _Pool:
    """Daemon helper threads taking jobs from a queue."""

    def __init__(self):
        import queue
        self.jobs = queue.SimpleQueue()
        self.threads = []

    def ensure(self, n):
        while len(self.threads) < n:
            t = threading.Thread(target=self._work, daemon=True,
                                 name=f"stablehlo-fusion-{len(self.threads)}")
            t.start()
            self.threads.append(t)

    def _work(self):
        while True:
            job = self.jobs.get()
            with np.errstate(all="ignore"):
                job()


def _reset_pool():
    global _pool, _POOL_LOCK
    _pool = None
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pool)


def _run_shared(run, bounds, threads):
    """Run ``run(lo, hi)`` over ``bounds`` in this thread and ``threads - 1``
    helpers. Chunks are taken from a shared counter, so a helper that is not
    scheduled (a busy machine) costs nothing: this thread takes its chunks.
    Returns when every chunk is done; the first error is raised here."""
    global _pool
    if _pool is None:
        _pool = _Pool()
    _pool.ensure(threads - 1)
    n = len(bounds)
    counter = itertools.count()
    cond = threading.Condition()
    state = {"done": 0, "error": None, "stop": False}

    def work():
        while True:
            c = next(counter)
            if c >= n:
                return
            err = None
            if not state["stop"]:
                try:
                    run(*bounds[c])
                except BaseException as e:  # noqa: BLE001 - handed to the caller
                    err = e
            with cond:
                if err is not None and state["error"] is None:
                    state["error"] = err
                    state["stop"] = True
                state["done"] += 1
                if state["done"] == n:
                    cond.notify_all()

    for _ in range(threads - 1):
        _pool.jobs.put(work)
    try:
        work()
    except BaseException:
        state["stop"] = True   # interrupted: helpers skip what is left
        raise
    with cond:
        while state["done"] < n:
            cond.wait()
    if state["error"] is not None:
        raise state["error"]
