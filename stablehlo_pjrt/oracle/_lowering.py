"""Turning a JAX function and its arguments into (module text, numpy args)."""

from __future__ import annotations

import os
from typing import Any, Callable

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


def lower(fn: Callable[..., Any], *args: Any, platform: str | None = None) -> tuple[str, list[np.ndarray]]:
    """The StableHLO text of ``jax.jit(fn)`` on ``args`` (with source
    locations) and the flat list of argument arrays @main takes.

    ``keep_unused=True`` keeps the module's parameters in one-to-one
    correspondence with the argument leaves (JAX otherwise drops unused ones).
    ``platform``: lower for that JAX platform (JAX's lowering rules differ
    per platform, linear algebra for "cpu" becomes LAPACK custom calls);
    by default for the default backend.
    """
    import jax
    _exclude_oracle_frames()
    fn, args = unwrap_keys(fn, args)
    leaves = jax.tree.leaves(args)
    placed = args
    if platform is not None:
        # Arguments committed to the platform's device make jit lower for it.
        placed = jax.device_put(args, jax.devices(platform)[0])
    if callable(getattr(fn, "lower", None)):
        lowered = fn.lower(*placed)  # already jitted: respect its options
    else:
        lowered = jax.jit(fn, keep_unused=True).lower(*placed)
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
    return text, flat_arrays(leaves)


def _is_key(x: Any) -> bool:
    import jax
    return jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key)


def unwrap_keys(fn: Callable[..., Any], args: tuple[Any, ...]
                ) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """(fn', args') where typed PRNG key arrays among ``args`` are replaced
    by their raw key data and ``fn'`` wraps them back (with the key's own
    implementation) before calling ``fn``: a module takes the raw data.
    The arguments are canonicalised first (:func:`canonical_args`)."""
    import jax
    args = canonical_args(args)
    leaves, tree = jax.tree.flatten(args)
    impls = [jax.random.key_impl(x) if _is_key(x) else None for x in leaves]
    if not any(i is not None for i in impls):
        return fn, args
    raw = [jax.random.key_data(x) if i is not None else x for x, i in zip(leaves, impls)]

    def wrapped(*a):
        flat = jax.tree.leaves(a)
        back = [jax.random.wrap_key_data(x, impl=i) if i is not None else x
                for x, i in zip(flat, impls)]
        return fn(*jax.tree.unflatten(tree, back))

    return wrapped, tuple(jax.tree.unflatten(tree, raw))


def _canonical(x: Any) -> Any:
    import jax
    if isinstance(x, (bool, int, float, complex)) or isinstance(x, jax.Array) or \
            _is_key(x) or not hasattr(x, "dtype"):
        return x   # Python scalars stay weakly typed; jax arrays are canonical
    dtype = np.dtype(x.dtype)
    canon = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    return x if canon == dtype else np.asarray(x, canon)


def canonical_args(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with each numpy array or scalar in the dtype ``jax.jit``
    gives it (``jax.dtypes.canonicalize_dtype``: float64 -> float32, int64
    -> int32, ... unless jax_enable_x64), so that the reference, the other
    backend and the bounds all run the program jit traces. Python scalars
    stay as they are (jit gives them weak types), as do jax arrays and keys."""
    import jax
    leaves, tree = jax.tree.flatten(args)
    return tuple(jax.tree.unflatten(tree, [_canonical(x) for x in leaves]))


def flat_arrays(leaves: list[Any]) -> list[np.ndarray]:
    """The arrays @main takes for these (canonical) argument leaves: a
    Python scalar in the dtype jit traces it with."""
    import jax
    return [np.asarray(x, jax.dtypes.canonicalize_dtype(np.result_type(x)))
            if isinstance(x, (bool, int, float, complex)) else np.asarray(x) for x in leaves]


def output_names(fn: Callable[..., Any], *args: Any) -> list[str]:
    """Names of ``fn``'s output leaves in tree order: ``output``,
    ``output[0]``, ``output['loss']``..."""
    import jax
    fn, args = unwrap_keys(fn, args)
    shapes = jax.eval_shape(fn, *args)
    leaves = jax.tree_util.tree_leaves_with_path(shapes)
    return [f"output{jax.tree_util.keystr(path)}" if path else "output"
            for path, _ in leaves]
