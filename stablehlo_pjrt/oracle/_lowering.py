"""Turning a JAX function and its arguments into (module text, numpy args)."""

from __future__ import annotations

import os

import numpy as np

from .. import compat

_EXCLUDED = False


def _exclude_oracle_frames():
    """Keep the oracle's own frames out of the source locations JAX records,
    so that an op's location ends at the user's code."""
    global _EXCLUDED
    if not _EXCLUDED:
        source_info_util = compat.jax_internal("", "source_info_util")
        source_info_util.register_exclusion(os.path.dirname(__file__) + os.sep)
        _EXCLUDED = True


def lower(fn, *args) -> tuple[str, list[np.ndarray]]:
    """The StableHLO text of ``jax.jit(fn)`` on ``args`` (with source
    locations) and the flat list of argument arrays @main takes.

    ``keep_unused=True`` keeps the module's parameters in one-to-one
    correspondence with the argument leaves (JAX otherwise drops unused ones).
    """
    import jax
    _exclude_oracle_frames()
    leaves = jax.tree.leaves(args)
    for i, leaf in enumerate(leaves):
        if jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key):
            raise TypeError(f"argument leaf #{i} is a typed PRNG key array; pass "
                            "jax.random.key_data(key) and wrap it inside the function")
    if callable(getattr(fn, "lower", None)):
        lowered = fn.lower(*args)  # already jitted: respect its options
    else:
        lowered = jax.jit(fn, keep_unused=True).lower(*args)
    module = lowered.compiler_ir("stablehlo")
    from ..mlir_funcs import find_func
    with module.context:
        main = find_func(module, "main")
        if main is not None:
            n = len(main.regions[0].blocks[0].arguments)
            if n != len(leaves):
                raise ValueError(
                    f"the lowered @main takes {n} argument(s) but the call has "
                    f"{len(leaves)} array leaves (a jitted function without "
                    "keep_unused=True drops unused arguments; pass the plain function)")
        text = module.operation.get_asm(enable_debug_info=True)
    return text, [np.asarray(x) for x in leaves]
