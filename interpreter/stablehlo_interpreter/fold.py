"""Compile-time evaluation of ops whose operands are all constants.

JAX programs are full of values that do not depend on the arguments:
``constant -> broadcast_in_dim``, ``iota -> add -> compare`` (masks, the
diagonal of a matrix), index normalisations of constant indices. Run as
written, each costs a kernel call per execution -- per loop iteration inside
a ``while`` body -- and for the small programs around a LAPACK call (``det``,
``slogdet``, ``solve``) these calls cost more than the LAPACK call itself.

The compiler evaluates such an op once, with the very kernel that would run
it (so the value is the same bits), and puts the result into the frame
template like a ``stablehlo.constant``. Only pure ops are folded (the
elementwise ops and the data-movement ops below: no context, no regions, no
randomness, no custom calls), and only results that hold at most
``MAX_FOLD_BYTES`` of memory of their own (a broadcast view of a scalar holds
none), so a plan never keeps large arrays alive. An op whose kernel raises
is left in the plan, to fail (or not) at run time as before.
"""

import numpy as np

from .registry import has_trait

MAX_FOLD_BYTES = 1 << 16

# Which ops fold: the registry's "foldable" trait. Kernels with the "view"
# trait return a view of their operand (np.broadcast_to, reshape,
# transpose, basic slicing): their results may be large and still hold no
# memory of their own. Other ops are not even tried when their declared
# result is larger than MAX_FOLD_BYTES (no big array is built at compile time
# for an op that may never run, e.g. in a branch not taken).


def _owned_bytes(v, inputs):
    """Memory ``v`` keeps alive beyond the ``inputs`` (already constants)."""
    root = v
    while isinstance(root, np.ndarray) and root.base is not None:
        if any(root is i for i in inputs):
            return 0
        root = root.base
    if any(root is i for i in inputs):
        return 0
    return root.nbytes if isinstance(root, np.ndarray) else getattr(root, "nbytes", 0)


def fold(op, fn, args):
    """The results of ``fn(*args)`` as read-only arrays, or None to keep the op."""
    if not has_trait(op.name, "foldable"):
        return None
    if not has_trait(op.name, "view"):
        declared = 0
        for t in op.result_types:
            shape = getattr(t, "shape", None)
            if shape is None or any(d is None for d in shape):
                return None   # not a static tensor type
            declared += int(np.prod(shape, dtype=np.int64)) * t.dtype.itemsize
        if declared > MAX_FOLD_BYTES:
            return None
    try:
        with np.errstate(all="ignore"):
            res = fn(*args)
    except Exception:
        return None
    vals = [res] if op.num_results == 1 else list(res)
    if len(vals) != op.num_results or not all(isinstance(v, np.ndarray) for v in vals):
        return None
    if sum(_owned_bytes(v, args) for v in vals) > MAX_FOLD_BYTES:
        return None
    for v in vals:
        v.flags.writeable = False
    return vals
