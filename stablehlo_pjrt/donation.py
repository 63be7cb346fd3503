"""Buffer ownership at Execute: donation and the no-aliasing rule.

XLA's contract, which this module reproduces for the interpreter:

* An output is a new buffer. The interpreter may hand back an input's array
  itself (``jit(lambda x: x)``), a view of it (a reshape), the same array for
  two outputs (``lambda x: (x, x)``) or a constant of the plan (read-only,
  shared by every run); each of those is copied, so that no two live buffers
  share memory and ``unsafe_buffer_pointer`` differs as on XLA CPU.
* The exception is donation: a parameter with ``tf.aliasing_output = k`` (JAX
  emits it for ``donate_argnums`` on platforms in its donation list, which
  the plugin joins at initialization) whose buffer is not listed in
  ``PJRT_ExecuteOptions.non_donatable_input_indices``. Its buffer is deleted
  after the run (using it raises JAX's "Array has been deleted" as on CPU),
  and output ``k`` may keep its memory: when the interpreter returns the
  donated array (or updates it in place) the output keeps the same address,
  as XLA's aliased outputs do.
"""

from __future__ import annotations

import numpy as np

from .error import invalid_argument

ALIAS_ATTR = "tf.aliasing_output"


def aliased_parameters(program, func_name=None) -> dict[int, int]:
    """{parameter index: output index} from the entry function's arg attrs."""
    f = program.function(func_name)
    out = {}
    for i, attrs in enumerate(f.arg_attrs or ()):
        if isinstance(attrs, dict) and ALIAS_ATTR in attrs:
            try:
                out[i] = int(attrs[ALIAS_ATTR])
            except (TypeError, ValueError):
                continue
    return out


def donated_parameters(aliases: dict[int, int], non_donatable) -> dict[int, int]:
    """The aliased parameters the caller lets this run consume."""
    if not aliases:
        return {}
    return {i: k for i, k in aliases.items() if i not in non_donatable}


def check_donations(argument_lists, donated: dict[int, int]) -> None:
    """XLA's checks before a donating run: a donated buffer must be alive,
    not referenced from outside (DLPack, __array_interface__) and passed
    once."""
    if not donated:
        return
    for args in argument_lists:
        counts: dict[int, int] = {}
        for a in args:
            counts[id(a)] = counts.get(id(a), 0) + 1
        for i in donated:
            b = args[i]
            b.check_alive()  # raises for a deleted buffer, like any argument (no wait)
            if b.external_refs:
                raise invalid_argument(
                    f"donation requested for buffer {b.describe()} (argument {i}) which "
                    "has external references")
            if counts[id(b)] > 1:
                raise invalid_argument(
                    f"argument {i}: a donated buffer {b.describe()} is passed more than "
                    "once")


def run_donating(program, args, inputs, donated):
    """Run a single-device program letting it update donated arrays in place.

    The donated buffers give up their arrays before the run (they are
    deleted after it in any case, also when it fails); ``inputs`` (a list
    holding the one argument list) is emptied so that the interpreter holds
    the only reference to those arrays (its in-place rule checks that)."""
    arrays = inputs[0]
    for i in donated:
        b = args[i]
        a = arrays[i]
        if b.borrowed or not isinstance(a, np.ndarray) or a.base is not None:
            continue  # caller-owned memory or a view: used, never written
        try:
            a.flags.writeable = True
        except ValueError:
            continue
        b.delete()  # drops the buffer's reference; the run owns the array now
    a = b = None
    inputs.clear()
    return program.run_donated(arrays)


def _root(a):
    """The object owning ``a``'s memory (views share it with their base)."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return id(a)


class OutputOwnership:
    """Decides, per run and device, which results must be copied."""

    __slots__ = ("input_roots", "donated_roots", "seen", "borrowed")

    def __init__(self, inputs, donated: dict[int, int], borrowed):
        # Output index -> root of the array donated to it.
        self.donated_roots = {k: _root(inputs[i]) for i, k in donated.items()} if donated else {}
        self.input_roots = {_root(a) for i, a in enumerate(inputs)
                            if isinstance(a, np.ndarray) and i not in donated}
        self.seen = set()
        self.borrowed = borrowed

    def own(self, index: int, array: np.ndarray) -> np.ndarray:
        """``array`` as the memory of a new output buffer ``index``."""
        if array.base is None and not self.donated_roots and not self.borrowed:
            # The common case, decided as below with less work: an array
            # that owns its memory (its own root), no donation, no
            # caller-owned memory.
            root = id(array)
            if root not in self.input_roots and root not in self.seen \
                    and array.flags.writeable:
                self.seen.add(root)
                return array
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
