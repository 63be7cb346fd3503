"""Buffer ownership at Execute: donation and the no-aliasing rule.

XLA's contract, which this module reproduces for the interpreter:

* An output is a new buffer. The interpreter may hand back an input's array
  itself (``jit(lambda x: x)``), a view of it (a reshape), the same array for
  two outputs (``lambda x: (x, x)``) or a constant of the plan (read-only,
  shared by every run); each of those is copied, so that no two live buffers
  share memory and ``unsafe_buffer_pointer`` differs as on XLA CPU.
* The exception is donation. A parameter is aliased to output ``k`` when the
  program says so (``tf.aliasing_output = k``; JAX emits it for
  ``donate_argnums`` on the platforms of its donation list, which the plugin
  joins at initialization) or when it is a buffer donor (``jax.buffer_donor``:
  JAX leaves the pairing to the compiler for sharded programs whose output
  shardings are open and for donations whose shapes differ) that
  :func:`aliased_parameters` pairs as XLA's OptimizeInputOutputBufferAlias
  does. An aliased parameter whose buffer is not listed in
  ``PJRT_ExecuteOptions.non_donatable_input_indices`` is donated: checked
  for XLA's clashes (:func:`plan`), deleted after the run (using it raises
  JAX's "Array has been deleted", as on CPU), and output ``k`` keeps its
  memory where that is safe (:func:`run_donating`, :class:`OutputOwnership`).
* A buffer with external references (a numpy view or DLPack export of it is
  alive) is not donated: like XLA CPU, the run copies instead, the input
  stays alive and the views never see a later write.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from sys import getrefcount as _getrefcount
from typing import TYPE_CHECKING

import numpy as np

from .error import invalid_argument

if TYPE_CHECKING:
    from .buffer import Buffer

ALIAS_ATTR = "tf.aliasing_output"
DONOR_ATTR = "jax.buffer_donor"


def aliased_parameters(meta) -> dict[int, int]:
    """{parameter index: output index} of an executable (an ExecutableMeta:
    ``program``, ``spmd``, memory kinds).

    Explicit ``tf.aliasing_output`` pairs first; then the buffer donors are
    paired with the outputs left over, as XLA's OptimizeInputOutputBufferAlias
    pairs them (after SPMD partitioning, so on per-device shard sizes):
    within each memory kind, donors and outputs sorted by byte size, largest
    first (stable), and a donor goes to the first output of its size."""
    spmd = meta.spmd
    f = meta.program.function(spmd.func if spmd is not None else None)
    out: dict[int, int] = {}
    donors = []
    for i, attrs in enumerate(f.arg_attrs or ()):
        if not isinstance(attrs, dict):
            continue
        if ALIAS_ATTR in attrs:
            try:
                out[i] = int(attrs[ALIAS_ATTR])
                continue
            except (TypeError, ValueError):
                pass
        if _is_true(attrs.get(DONOR_ATTR)):
            donors.append(i)
    if not donors:
        return out
    taken = set(out.values())
    in_sizes = _shard_bytes(f.input_types, spmd, "in")
    out_sizes = _shard_bytes(f.output_types, spmd, "out")
    by_kind: dict[str, tuple[list, list]] = {}
    for i in donors:
        if in_sizes[i] is not None:
            by_kind.setdefault(meta.param_memory_kinds[i], ([], []))[0].append(i)
    for k, size in enumerate(out_sizes):
        if k not in taken and size is not None:
            by_kind.setdefault(meta.output_memory_kinds[k], ([], []))[1].append(k)
    for params, outputs in by_kind.values():
        params.sort(key=lambda i: -in_sizes[i])
        outputs.sort(key=lambda k: -out_sizes[k])
        p = o = 0
        while p < len(params) and o < len(outputs):
            a, b = in_sizes[params[p]], out_sizes[outputs[o]]
            if a > b:
                p += 1
            elif a < b:
                o += 1
            else:
                out[params[p]] = outputs[o]
                p += 1
                o += 1
    return out


def _is_true(value) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true") or (
        isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value == 1)


def _shard_bytes(types, spmd, which) -> list:
    """Bytes of each value on one device (None: a token)."""
    shardings = None if spmd is None else (spmd.in_shardings if which == "in"
                                           else spmd.out_shardings)
    sizes = []
    for j, t in enumerate(types):
        shape = getattr(t, "shape", None)
        dtype = getattr(t, "dtype", None)
        if shape is None or dtype is None or any(d is None for d in shape):
            sizes.append(None)
            continue
        if shardings is not None:
            shape = shardings[j].shard_shape(tuple(shape))
        sizes.append(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
    return sizes


# ---------------------------------------------------------------------------
# One Execute


def plan(aliases: dict[int, int], argument_lists: Sequence[Sequence[Buffer]],
         non_donatable: Collection[int],
         logical_ids: Sequence[tuple[int, int]]) -> list[dict[int, int]] | None:
    """The donations of one Execute: per device, {parameter: output}; None
    when nothing is donated.

    XLA's checks, with its messages: a buffer donated twice, or donated and
    also passed undonated, in one device's argument list is an error (before
    anything is consumed). A buffer with external references is then left
    out: XLA CPU copies instead of donating it."""
    if not aliases:
        return None
    wanted = {i: k for i, k in aliases.items() if i not in non_donatable}
    if not wanted:
        return None
    per_device = []
    for args, (replica, partition) in zip(argument_lists, logical_ids):
        _check_clashes(args, wanted, replica, partition)
        per_device.append({i: k for i, k in wanted.items() if not args[i].external_refs})
    return per_device if any(per_device) else None


def _check_clashes(args, donated, replica, partition) -> None:
    first: dict[int, tuple[bool, int]] = {}
    for i, b in enumerate(args):
        is_donated = i in donated
        prev = first.get(id(b))
        if prev is None:
            first[id(b)] = (is_donated, i)
            continue
        prev_donated, prev_i = prev
        where = (f"flattened argument {i}, replica {replica}, partition {partition}, "
                 f"first use: {prev_i}")
        if is_donated and prev_donated:
            raise invalid_argument(
                f"Attempt to donate the same buffer twice in Execute() ({where}). "
                "Toy example for this bug: `f(donate(a), donate(a))`.")
        if is_donated:
            raise invalid_argument(
                f"Attempt to donate a buffer which is also used by the same call to "
                f"Execute() ({where}). Toy example for this bug: `f(a, donate(a))`.")
        if prev_donated:
            raise invalid_argument(
                f"Attempt to use a buffer that was previously donated in the same call "
                f"to Execute() ({where}). Toy example for this bug: `f(donate(a), a)`.")


def consume(argument_lists: Sequence[Sequence[Buffer]],
            donations: Sequence[dict[int, int]]) -> None:
    """Delete the donated buffers (after the run, also a failed one, which
    may have written them: as on XLA)."""
    for args, donated in zip(argument_lists, donations):
        for i in donated:
            args[i].delete()


def _reusable(buf, array) -> bool:
    """May the run write ``array``, the memory of the donated ``buf``? Not
    caller memory (zero-copy host buffers, DLPack views: read, never
    written), not a view of another array."""
    return not buf.borrowed and array.__class__ is np.ndarray and array.base is None


def _whole(buf, array) -> bool:
    """A donated shard the sharded-jit path may write its output into:
    owned memory (as :func:`_reusable`), or a view of all of an array that
    owns it (an earlier output written into a donated shard under another
    shape or type)."""
    if buf.borrowed or array.__class__ is not np.ndarray:
        return False
    base = array.base
    return base is None or (base.__class__ is np.ndarray and base.base is None
                            and array.nbytes == base.nbytes and array.flags.c_contiguous)


def run_donating(meta, argument_lists, inputs, donations, ownerships, process=(0, 0),
                 **parallel):
    """Run ``meta``'s program letting it reuse donated memory; returns the
    per-device result lists like the plain run (``process``: the replica and
    partition of a one-device launch).

    One device, or one interpreter process per device (programs with several
    replicas): each donated buffer gives its array to the run before it
    starts (the buffer is deleted then, as it would be after the run anyway)
    and ``inputs`` is emptied, so that the interpreter holds the only
    reference; kernels with an in-place form (dynamic_update_slice) then
    update it, and an output that is the donated array keeps its address.

    A sharded ``jit``, ``shard_map`` or ``pmap`` (JAX 0.10.2 lowers pmap as a
    sharded program; one global run): the global arguments are assembled
    from the shards (fresh arrays the run may update in place), and each
    device's donated shard is kept for its aliased output, which is written
    into it after the run (``ownerships[d].reuse``): the output keeps the
    input's address, as XLA's partitioned programs do, and the global result
    is not kept alive by a shard."""
    if meta.spmd is not None:
        for args, ins, donated, own in zip(argument_lists, inputs, donations, ownerships):
            own.reuse = {k: ins[i] for i, k in donated.items() if _whole(args[i], ins[i])}
        written_back = set.intersection(*(set(own.reuse) for own in ownerships))
        results = meta.spmd.run(inputs, written_back=written_back, consume=True)
        for ins, donated in zip(inputs, donations):
            for i in donated:
                ins[i] = None  # the output owners hold the only references now
        return results
    for args, ins, donated in zip(argument_lists, inputs, donations):
        for i in donated:
            a = ins[i]
            if _reusable(args[i], a):
                try:
                    a.flags.writeable = True  # the interpreter's in-place rule asks
                except ValueError:
                    continue
                args[i].delete()  # drops the buffer's reference; the run owns the array
    argument_lists = args = ins = a = None
    if len(inputs) == 1:
        return [meta.program.run_donated(inputs.pop(), process=process)]
    return meta.program.run_parallel(inputs, consume=True, **parallel)


def _root(a):
    """The object owning ``a``'s memory (views share it with their base)."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return id(a)


class OutputOwnership:
    """Decides, per run and device, which results must be copied.

    ``reuse``: output index -> a donated shard (sharded jit) to write that
    output into, so that it keeps the donated address."""

    __slots__ = ("input_roots", "donated_roots", "seen", "borrowed", "reuse")

    def __init__(self, inputs, donated: dict[int, int], borrowed):
        # Output index -> root of the array donated to it.
        self.donated_roots = {k: _root(inputs[i]) for i, k in donated.items()} if donated else {}
        self.input_roots = {_root(a) for i, a in enumerate(inputs)
                            if isinstance(a, np.ndarray) and i not in donated}
        self.seen = set()
        self.borrowed = borrowed
        self.reuse = None

    def own(self, index: int, array: np.ndarray) -> np.ndarray:
        """``array`` as the memory of a new output buffer ``index``."""
        if array.base is None and not self.donated_roots and not self.borrowed:
            # The common case, decided as below with less work: an array
            # that owns its memory (its own root), no donation (so nothing
            # to reuse), no caller-owned memory.
            root = id(array)
            if root not in self.input_roots and root not in self.seen \
                    and array.flags.writeable:
                self.seen.add(root)
                return array
        if self.reuse:
            target = self.reuse.pop(index, None)
            # Written only if nothing else refers to the donated shard: two
            # references (``target`` and getrefcount's argument); another
            # buffer sharing the array (copies between devices do) adds one.
            if (target is not None and _root(array) != _root(target)
                    and _getrefcount(target) == 2 and target.nbytes == array.nbytes
                    and (target.base is None or _getrefcount(target.base) == 2)):
                # (A view of a whole array: its base is referenced by the
                # view alone, and getrefcount's argument.)
                if target.base is not None:
                    target = target.base
                self.seen.add(id(target))
                target.flags.writeable = True
                out = target
                if target.shape != array.shape or target.dtype != array.dtype:
                    # A buffer donor pairs by size (XLA's rule): the same
                    # bytes under the output's shape and type.
                    out = target.reshape(-1).view(array.dtype).reshape(array.shape)
                np.copyto(out, array)
                out.flags.writeable = False
                target.flags.writeable = False
                return out
            target = None
        root = _root(array)
        must_copy = (root in self.input_roots or root in self.seen
                     or (not array.flags.writeable
                         and self.donated_roots.get(index) != root))
        if not must_copy and root in self.donated_roots.values() \
                and self.donated_roots.get(index) != root:
            must_copy = True  # another output's donated memory
        if not must_copy and self.borrowed and any(
                np.may_share_memory(array, b) for b in self.borrowed):
            # Caller-owned memory (zero-copy host buffers) is released when
            # the input buffer goes away.
            must_copy = True
        if must_copy:
            array = np.array(array, order="C", copy=True)
            root = _root(array)
        self.seen.add(root)
        return array
