"""The spec's process grid ("Parallel execution") and a runner for it.

A :class:`ProcessGrid` of ``num_replicas x num_partitions`` processes is shared
by every process of a parallel run; each process runs the program in a thread
of its own with a ``compiler.Context(program, process=(replica_id,
partition_id), grid=grid)``. Collective ops meet in the grid:

* :meth:`ProcessGrid.rendezvous` -- a barrier per process group: each member
  contributes its operands and gets back everyone's. A barrier is keyed by
  ``(process group, channel id, n)`` where ``n`` counts the rendezvous this
  process already made on that group and channel, so repeated collectives (in
  loops, or in different functions of an MPMD program) pair up in program
  order, as the C++ reference interpreter's ProcessGrid does.
* :meth:`ProcessGrid.send` / :meth:`ProcessGrid.recv` -- point-to-point
  channels (FIFO queues keyed by channel id).
* infeed / outfeed queues.

Nothing may hang: every wait has a timeout (``timeout`` seconds, default 60 or
``$STABLEHLO_REF_GRID_TIMEOUT``), a process that fails aborts the grid so that
processes waiting for it fail at once, and a wait that no running process can
ever satisfy (every live process is blocked) is reported as a deadlock right
away.
"""

import collections
import threading
import time

from . import config as _config
from .errors import ExecutionError, InterpreterError


def _default_timeout():
    return _config.GRID_TIMEOUT.value()


class GridError(ExecutionError):
    """A parallel run failed: timeout, deadlock, or another process failed."""


class GridAborted(GridError):
    """Raised in a process whose grid was aborted by a failure elsewhere."""


def _pid(p):
    return f"({p[0]}, {p[1]})"


class ProcessGrid:
    """Shared state of one parallel run of ``num_replicas x num_partitions`` processes.

    ``infeed`` feeds the `infeed` op: a sequence (one queue shared by all
    processes, as in the C++ reference interpreter) or a dict
    ``{(replica_id, partition_id): sequence}`` of per-process queues. Each item
    is the payload of one `infeed` execution: an array, a sequence of arrays,
    or a callable ``item(ctx)`` returning one of these. ``outfeed`` maps each
    process to the list of tuples its `outfeed` ops wrote.
    """

    def __init__(self, num_replicas=1, num_partitions=1, *, infeed=None, timeout=None):
        self.num_replicas = int(num_replicas)
        self.num_partitions = int(num_partitions)
        if self.num_replicas < 1 or self.num_partitions < 1:
            raise ValueError(f"process grid must be at least 1x1, got "
                             f"{self.num_replicas}x{self.num_partitions}")
        self.timeout = _default_timeout() if timeout is None else float(timeout)
        self.process_ids = [(r, p) for r in range(self.num_replicas)
                            for p in range(self.num_partitions)]
        self._cond = threading.Condition()
        self._barriers = {}      # key -> _Barrier
        self._seq = {}           # (process, group, channel) -> count
        self._channels = collections.defaultdict(collections.deque)
        self._waiting = {}       # thread id -> (process, predicate, what)
        self._alive = len(self.process_ids)
        self._error = None       # (process, exception) of the first failure
        if isinstance(infeed, dict):
            self._infeed = {tuple(k): collections.deque(v) for k, v in infeed.items()}
        else:
            self._infeed = collections.deque(infeed or ())
        self.outfeed = {p: [] for p in self.process_ids}

    @property
    def num_processes(self):
        return len(self.process_ids)

    def __repr__(self):
        return f"<ProcessGrid {self.num_replicas}x{self.num_partitions}>"

    # ------------------------------------------------------------------
    # Process groups (spec: "Collective ops").

    def _check_ids(self, groups, limit, what):
        for g in groups:
            for i in g:
                if not 0 <= i < limit:
                    raise GridError(
                        f"{what} id {i} is out of range for a process grid of "
                        f"{self.num_replicas} replica(s) x {self.num_partitions} "
                        "partition(s)")

    def cross_replica(self, replica_groups):
        """spec: cross_replica -- each replica group, once per partition."""
        self._check_ids(replica_groups, self.num_replicas, "replica")
        return [tuple((r, p) for r in g) for g in replica_groups
                for p in range(self.num_partitions)]

    def cross_partition(self, partition_groups):
        """spec: cross_partition -- each partition group, once per replica."""
        self._check_ids(partition_groups, self.num_partitions, "partition")
        return [tuple((r, p) for p in g) for g in partition_groups
                for r in range(self.num_replicas)]

    def cross_replica_and_partition(self, replica_groups):
        """spec: cross_replica_and_partition -- a replica group across all partitions."""
        self._check_ids(replica_groups, self.num_replicas, "replica")
        return [tuple((r, p) for p in range(self.num_partitions) for r in g)
                for g in replica_groups]

    def flattened_ids(self, flattened_id_groups):
        """spec: flattened_ids -- ids are replica_id * num_partitions + partition_id."""
        self._check_ids(flattened_id_groups, self.num_processes, "flattened process")
        n = self.num_partitions
        return [tuple((i // n, i % n) for i in g) for g in flattened_id_groups]

    # ------------------------------------------------------------------
    # Waiting, failures.

    def _wait(self, process, predicate, what):
        """Wait (holding ``self._cond``) until ``predicate()``; fail fast otherwise."""
        me = threading.get_ident()
        deadline = time.monotonic() + self.timeout
        self._waiting[me] = (process, predicate)
        try:
            while True:
                if self._error is not None:
                    src, exc = self._error
                    raise GridAborted(
                        f"process {_pid(process)} stopped while waiting for {what}: "
                        f"process {_pid(src)} failed: {exc}")
                if predicate():
                    return
                if self._deadlocked():
                    err = GridError(
                        f"deadlock: process {_pid(process)} waits for {what}, and "
                        "every other running process is blocked too (or finished)")
                    self._abort(process, err)
                    raise err
                left = deadline - time.monotonic()
                if left <= 0:
                    err = GridError(f"process {_pid(process)} timed out after "
                                    f"{self.timeout:g} s waiting for {what}")
                    self._abort(process, err)
                    raise err
                self._cond.wait(min(left, 5.0))
        finally:
            del self._waiting[me]

    def _deadlocked(self):
        if len(self._waiting) < self._alive:
            return False
        return not any(pred() for _, pred in self._waiting.values())

    def _abort(self, process, exc):
        if self._error is None:
            self._error = (process, exc)
        self._cond.notify_all()

    def abort(self, process, exc):
        """Record that ``process`` failed with ``exc``; waiting processes fail now."""
        with self._cond:
            self._abort(process, exc)

    def finished(self, process):
        """``process`` will not take part in any more communication."""
        with self._cond:
            self._alive -= 1
            self._cond.notify_all()

    @property
    def error(self):
        """``(process, exception)`` of the first failure, or None."""
        return self._error

    # ------------------------------------------------------------------
    # Collectives.

    def rendezvous(self, process, group, channel, values, what="a collective"):
        """Exchange ``values`` within ``group``; returns ``{process: values}``.

        ``group`` is a tuple of process ids that includes ``process``; all its
        members must call this with the same group and channel. ``what`` (the
        op name) is compared across members to catch mismatched collectives.
        """
        group = tuple(group)
        if len(group) == 1:
            return {process: values}
        with self._cond:
            skey = (process, group, channel)
            n = self._seq.get(skey, 0)
            self._seq[skey] = n + 1
            key = (group, channel, n)
            b = self._barriers.get(key)
            if b is None:
                b = self._barriers[key] = _Barrier(what, len(group))
            elif b.what != what:
                err = GridError(
                    f"mismatched collectives: process {_pid(process)} reached {what} "
                    f"while process {_pid(next(iter(b.values)))} reached {b.what} "
                    f"(process group {[_pid(p) for p in group]}, channel {channel})")
                self._abort(process, err)
                raise err
            b.values[process] = values
            if len(b.values) == b.size:
                self._cond.notify_all()
            else:
                members = ", ".join(_pid(p) for p in group if p not in b.values)
                self._wait(process, lambda: len(b.values) == b.size,
                           f"{what} with process(es) {members} (channel {channel})")
            b.taken += 1
            if b.taken == b.size:
                del self._barriers[key]
            return b.values

    def send(self, process, channel, values, target=None):
        """Queue ``values`` on ``channel`` (for ``target`` if given)."""
        with self._cond:
            self._channels[(channel, target)].append((process, values))
            self._cond.notify_all()

    def recv(self, process, channel, target=None):
        """The oldest values sent on ``channel`` (to ``target`` if given)."""
        with self._cond:
            q = self._channels[(channel, target)]
            if not q:
                self._wait(process, lambda: bool(q), f"a send on channel {channel}")
            return q.popleft()[1]

    # ------------------------------------------------------------------
    # Streaming (spec: "Streaming communication").

    def next_infeed(self, process):
        """The next infeed item for ``process`` (raises if the queue is empty)."""
        with self._cond:
            q = self._infeed.get(process) if isinstance(self._infeed, dict) else self._infeed
            if not q:
                raise GridError(f"infeed of process {_pid(process)} is empty")
            return q.popleft()

    def add_outfeed(self, process, values):
        with self._cond:
            self.outfeed.setdefault(process, []).append(tuple(values))


class _Barrier:
    __slots__ = ("what", "size", "values", "taken")

    def __init__(self, what, size):
        self.what = what
        self.size = size
        self.values = {}
        self.taken = 0


# ----------------------------------------------------------------------
# The runner.


def run_parallel(program, args_per_process=None, num_replicas=None, num_partitions=None,
                 *, func=None, programs=None, infeed=None, timeout=None, grid=None,
                 consume=False, process_programs=None):
    """Run ``program`` on every process of a process grid; one thread each.

    * ``programs``: function names as ``programs[replica_id][partition_id]``
      (MPMD, as the `interpreter.run_parallel` op spells it); otherwise every
      process runs ``func`` (default: the entry function).
    * The grid shape comes from ``num_replicas`` / ``num_partitions``, else from
      ``programs``, else from the module's ``mhlo.num_replicas`` /
      ``mhlo.num_partitions``.
    * ``args_per_process``: a list of argument lists in process order
      (``(0, 0), (0, 1), ..., (1, 0), ...``: replica-major), or a dict keyed
      by ``(replica_id, partition_id)``. None means no arguments.
    * ``infeed`` / ``timeout``: see :class:`ProcessGrid`; or pass a fresh
      ``grid`` (e.g. to read ``grid.outfeed`` afterwards; a grid serves one run).
    * ``consume``: ``args_per_process`` is a list of argument lists the
      caller gives up (each is emptied): as with :meth:`Program.run_donated`,
      an argument array nothing else refers to may be updated in place
      (donated buffers of a multi-device run).
    * ``process_programs``: a compiled Program per process (process order),
      run instead of ``program`` there: processes of one grid running
      programs compiled apart (the plugin's processes of a multi-process
      client, each with the program its host process compiled).

    Returns the list of each process's output list, in process order. If a
    process fails, the others are stopped and its error is raised, naming
    the process.
    """
    if programs is not None:
        programs = [list(row) for row in programs]
        if not programs or not programs[0] or any(len(r) != len(programs[0]) for r in programs):
            raise InterpreterError("programs must be a non-empty rectangular "
                                   "list of lists (replicas x partitions)")
        num_replicas = num_replicas or len(programs)
        num_partitions = num_partitions or len(programs[0])
        if (len(programs), len(programs[0])) != (num_replicas, num_partitions):
            raise InterpreterError(
                f"programs is {len(programs)}x{len(programs[0])}, grid is "
                f"{num_replicas}x{num_partitions}")
    if grid is None:
        grid = ProcessGrid(num_replicas or program.num_replicas,
                           num_partitions or program.num_partitions,
                           infeed=infeed, timeout=timeout)
    elif (num_replicas and num_replicas != grid.num_replicas) or \
            (num_partitions and num_partitions != grid.num_partitions):
        raise InterpreterError(f"grid is {grid.num_replicas}x{grid.num_partitions}, "
                               f"asked for {num_replicas}x{num_partitions}")
    procs = grid.process_ids
    if args_per_process is None:
        args = [[] for _ in procs]
    elif isinstance(args_per_process, dict):
        missing = [p for p in procs if p not in args_per_process]
        if missing:
            raise InterpreterError(f"no arguments for process(es) {missing}")
        args = [list(args_per_process[p]) for p in procs]
    elif consume:
        # The caller's own lists: run_donated empties each, so that the
        # process's frame holds the only reference to an unshared argument.
        args = args_per_process
        if len(args) != len(procs):
            raise InterpreterError(
                f"got arguments for {len(args)} process(es), the "
                f"{grid.num_replicas}x{grid.num_partitions} grid has {len(procs)}")
    else:
        args = [list(a) for a in args_per_process]
        if len(args) != len(procs):
            raise InterpreterError(
                f"got arguments for {len(args)} process(es), the "
                f"{grid.num_replicas}x{grid.num_partitions} grid has {len(procs)}")
    names = [programs[r][p] if programs is not None else func for r, p in procs]
    if process_programs is not None:
        process_programs = list(process_programs)
        if len(process_programs) != len(procs):
            raise InterpreterError(f"got {len(process_programs)} programs for the "
                                   f"{len(procs)} processes of the grid")
    else:
        process_programs = [program] * len(procs)
    results = [None] * len(procs)
    errors = [None] * len(procs)

    def body(i):
        proc = procs[i]
        prog = process_programs[i]
        try:
            if consume:
                results[i] = prog.run_donated(args[i], func=names[i], process=proc,
                                              grid=grid)
            else:
                results[i] = prog.run(*args[i], func=names[i], process=proc, grid=grid)
        except BaseException as e:  # noqa: BLE001 - reported below, never lost
            errors[i] = e
            grid.abort(proc, e)
        finally:
            grid.finished(proc)

    if len(procs) == 1:
        body(0)
    else:
        threads = [threading.Thread(target=body, args=(i,), daemon=True,
                                    name=f"stablehlo-process-{r}-{p}")
                   for i, (r, p) in enumerate(procs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    _raise_first(grid, procs, errors)
    return results


def _raise_first(grid, procs, errors):
    """Raise the root failure of a run (not the aborts it caused elsewhere)."""
    if not any(e is not None for e in errors):
        return
    root = None
    if grid.error is not None:
        src, exc = grid.error
        if src in procs and errors[procs.index(src)] is not None:
            root = (src, errors[procs.index(src)])
    if root is None:
        failed = [i for i, e in enumerate(errors) if e is not None]
        i = next((i for i in failed if not isinstance(errors[i], GridAborted)), failed[0])
        root = (procs[i], errors[i])
    proc, exc = root
    if not isinstance(exc, Exception):
        raise exc
    if isinstance(exc, GridError):
        raise exc
    err = GridError(f"process {_pid(proc)}: {exc}",
                    getattr(exc, "op_name", None), getattr(exc, "location", None))
    raise err from exc
