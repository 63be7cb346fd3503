"""Host callbacks on stablehlo_ref: jax.debug.print / debug.callback,
jax.pure_callback and io_callback (ordered and unordered).

JAX lowers these for CPU/GPU with ``callback.emit_python_callback``, which
refuses other platforms and hands the callable to XLA through an FFI
execution context. This plugin runs in the user's Python process, so a
callback is a direct call:

* Lowering (this module, rules registered for ``stablehlo_ref``): the
  callable is appended to a per-module :class:`CallbackTable` and the
  program gets ``custom_call @stablehlo_ref.host_callback`` with
  ``backend_config = {index = i}`` (its position in that table). Ordered
  effects thread their token through the call exactly as JAX's CPU rule
  does (token first operand and first result). The table is kept alive by
  the lowering (``ModuleContext.add_keepalive``: JAX holds it with the
  executable) and also registered with ``add_host_callback`` so that JAX
  treats the program as one with host callbacks (it then never writes it to
  the persistent compilation cache: a callable cannot be serialized).
* Compile (:func:`bind_program`): the module carries one attribute, the
  random key of its table (``stablehlo_ref.host_callbacks``); the plugin
  resolves it to the table (held in a weak dictionary, so only live tables
  of this process are found), keeps a strong reference in the executable
  and attaches the callables to the interpreter's program
  (``Program.host_callbacks``, the interpreter's public hook). At run time
  the interpreter indexes that per-program tuple: no callable is ever found
  by a name or address taken from the program's data, and a module can only
  reach the callables lowered with it.

The callable JAX's own lowering would run is reused (``debug_callback_p.impl``,
``pure_callback_impl``, ``io_callback_impl``: arguments placed on the CPU
device, results checked), with JAX's checks of the callback's results. When
the process has no CPU backend (``JAX_PLATFORMS=stablehlo_ref``), where JAX
itself would fail ("Make sure "cpu" is listed in --jax_platforms"), the
callback receives read-only numpy arrays instead (documented difference).
"""

from __future__ import annotations

import secrets
import threading
import weakref

import numpy as np

from . import compat

PLATFORM_NAME = "stablehlo_ref"
TARGET = "stablehlo_ref.host_callback"
MODULE_ATTR = "stablehlo_ref.host_callbacks"


class CallbackTable:
    """The callables of one lowered module, indexed by the custom calls."""

    __slots__ = ("key", "callables", "__weakref__")

    def __init__(self, key: str):
        self.key = key
        self.callables: list = []


_TABLES: "weakref.WeakValueDictionary[str, CallbackTable]" = weakref.WeakValueDictionary()
_TABLES_LOCK = threading.Lock()


def _table_for(ctx) -> CallbackTable:
    ir = compat.jax_internal("lib.mlir", "ir")
    mc = ctx.module_context
    attrs = mc.module.operation.attributes
    if MODULE_ATTR in attrs:
        key = ir.StringAttr(attrs[MODULE_ATTR]).value
        table = _TABLES.get(key)
        if table is not None:
            return table
    key = secrets.token_hex(16)
    table = CallbackTable(key)
    with _TABLES_LOCK:
        _TABLES[key] = table
    attrs[MODULE_ATTR] = ir.StringAttr.get(key)
    mc.add_keepalive(table)
    return table


def bind_program(program):
    """Attach the callbacks a compiled module was lowered with to the
    interpreter program; returns the table (the executable keeps it alive)
    or None when the module has no host callbacks."""
    from .error import invalid_argument
    key = program.module_attrs.get(MODULE_ATTR)
    if key is None:
        return None
    key = str(key)
    table = _TABLES.get(key)
    if table is None:
        raise invalid_argument(
            "the program calls host callbacks (jax.debug.print, pure_callback, "
            "io_callback) whose Python callables are not alive in this process: "
            "an executable with host callbacks cannot be serialized or compiled "
            "again once JAX dropped its lowering; re-trace the function instead")
    program.host_callbacks = tuple(table.callables)
    return table


# ----------------------------------------------------------------------------
# Running a callback.

_cpu_state: list = []


def _have_cpu() -> bool:
    """Whether JAX has a CPU backend (JAX's callback impls place their
    arguments there); asked once."""
    if not _cpu_state:
        xb = compat.jax_internal("", "xla_bridge")
        try:
            _cpu_state.append(bool(xb.local_devices(backend="cpu")))
        except RuntimeError:
            _cpu_state.append(False)
    return _cpu_state[0]


def _checked(callback, result_avals):
    """JAX's wrapper in emit_python_callback: the callback's results must
    match the declared avals (same messages as on CPU)."""
    dtypes = compat.jax_internal("", "dtypes")

    def wrapped(*args):
        out_vals = callback(*args)
        if len(out_vals) != len(result_avals):
            raise RuntimeError(
                "Mismatched number of outputs from callback. "
                "Expected: {}, Actual: {}".format(len(result_avals), len(out_vals)))
        out_vals = tuple(dtypes.canonicalize_value(np.asarray(a)) for a in out_vals)
        for i, (out_val, out_aval) in enumerate(zip(out_vals, result_avals)):
            if out_val.shape != out_aval.shape:
                raise RuntimeError(
                    f"Incorrect output shape for return value #{i}: "
                    f"Expected: {out_aval.shape}, Actual: {out_val.shape}")
            if out_val.dtype != out_aval.dtype:
                raise RuntimeError(
                    f"Incorrect output dtype for return value #{i}: "
                    f"Expected: {out_aval.dtype}, Actual: {out_val.dtype}")
        return out_vals
    return wrapped


def _emit(ctx, callback, token, operands, result_avals, *, has_side_effect):
    """The custom call; returns (results, token-or-None)."""
    import dataclasses

    core = compat.jax_internal("", "core")
    ffi = compat.jax_internal("", "ffi")
    table = _table_for(ctx)
    fn = _checked(callback, result_avals)
    # So JAX knows the executable has host callbacks (no persistent caching).
    ctx.module_context.add_host_callback(fn)
    index = len(table.callables)
    table.callables.append(fn)
    if token is not None:
        operands = [token, *operands]
        ctx = dataclasses.replace(
            ctx, avals_in=[core.abstract_token, *ctx.avals_in],
            avals_out=[core.abstract_token, *ctx.avals_out])
    op = ffi.build_ffi_lowering_function(TARGET, has_side_effect=has_side_effect)(
        ctx, *operands, index=np.int64(index))
    results = list(op.results)
    if token is not None:
        token, *results = results
    return results, token


# ----------------------------------------------------------------------------
# Lowering rules (same structure as JAX's CPU rules in jax/_src/callback.py
# and jax/_src/debugging.py).


def _debug_callback_lowering(ctx, *args, effect, partitioned, callback, **params):
    from functools import partial

    debugging = compat.jax_internal("", "debugging")
    effects = compat.jax_internal("", "effects")
    sharding_impls = compat.jax_internal("", "sharding_impls")
    mlir = compat.jax_internal("interpreters", "mlir")
    axis_context = ctx.module_context.axis_context
    if isinstance(axis_context, sharding_impls.SPMDAxisContext):
        partial_auto = set(axis_context.mesh.axis_names) - axis_context.manual_axes
        if partial_auto:
            # Partially manual shard_map: gather and run once (JAX's rule).
            lower = partial(debugging._debug_callback_partial_auto, axis_context,
                            effect=effect, partitioned=partitioned,
                            callback=callback, **params)
            return mlir.lower_fun(lower)(ctx, *args)
    elif (partitioned and isinstance(axis_context, sharding_impls.ShardingContext)
          and axis_context.num_devices > 1):
        # XLA calls a partitioned callback once per shard; this plugin runs a
        # sharded jit as one global program and has no shards to call with.
        raise NotImplementedError(
            "jax.debug.callback(partitioned=True) in a jit sharded over "
            f"{axis_context.num_devices} devices is not supported on {PLATFORM_NAME} "
            "(it runs the global program once); use partitioned=False or shard_map")

    if _have_cpu():
        def _callback(*flat_args):
            debugging.debug_callback_p.impl(*flat_args, effect=effect,
                                            partitioned=partitioned,
                                            callback=callback, **params)
            return ()
    else:
        def _callback(*flat_args):
            callback(*flat_args)
            return ()
    if effects.ordered_effects.contains(effect):
        token = ctx.tokens_in.get(effect)
        result, token = _emit(ctx, _callback, token, list(args), ctx.avals_out,
                              has_side_effect=True)
        ctx.set_tokens_out(ctx.tokens_in.update_tokens(mlir.TokenSet({effect: token})))
    else:
        result, _ = _emit(ctx, _callback, None, list(args), ctx.avals_out,
                          has_side_effect=True)
    return result


_ABSENT = object()


def _debug_print_lowering(ctx, *dyn_args, fmt, ordered, partitioned, in_tree,
                          static_args, np_printoptions, has_placeholders,
                          logging_record=_ABSENT):
    from functools import partial

    debugging = compat.jax_internal("", "debugging")
    # debug_print_p (and _format_print_callback) gained `logging_record`
    # after JAX 0.8.0: pass it exactly when JAX has it, as JAX's own impl does.
    extra = () if logging_record is _ABSENT else (logging_record,)
    callback = partial(debugging._format_print_callback, fmt, dict(np_printoptions),
                       has_placeholders, *extra)
    callback = debugging._make_flat_callback(in_tree, callback, static_args)
    effect = debugging.ordered_debug_effect if ordered else debugging.debug_effect
    return _debug_callback_lowering(ctx, *dyn_args, effect=effect,
                                    partitioned=partitioned, callback=callback)


def _check_sharding(ctx, sharding, what):
    cb = compat.jax_internal("", "callback")
    # JAX's validation of the `sharding` argument (raises the same errors);
    # the annotation itself is not needed: a sharded jit runs as one global
    # program (the callback runs once, like XLA's MAXIMAL sharding) and a
    # shard_map body once per device (like MANUAL).
    cb._callback_op_sharding(ctx.module_context.axis_context, sharding, ctx.avals_out)


def _pure_callback_lowering(ctx, *args, callback, sharding, **params):
    cb = compat.jax_internal("", "callback")
    _check_sharding(ctx, sharding, "pure_callback")
    if _have_cpu():
        def _callback(*flat_args):
            return tuple(cb.pure_callback_impl(*flat_args, callback=callback,
                                               sharding=None, **params))
    else:
        def _callback(*flat_args):
            return tuple(np.asarray(v) for v in callback(*flat_args))
    result, _ = _emit(ctx, _callback, None, list(args), ctx.avals_out,
                      has_side_effect=False)
    return result


def _io_callback_lowering(ctx, *args, callback, sharding, ordered, **params):
    cb = compat.jax_internal("", "callback")
    mlir = compat.jax_internal("interpreters", "mlir")
    _check_sharding(ctx, sharding, "io_callback")
    if _have_cpu():
        def _callback(*flat_args):
            return tuple(cb.io_callback_impl(*flat_args, callback=callback,
                                             sharding=None, ordered=ordered, **params))
    else:
        def _callback(*flat_args):
            return tuple(np.asarray(v) for v in callback(*flat_args))
    if ordered:
        token = ctx.tokens_in.get(cb._OrderedIOEffect)
        result, token = _emit(ctx, _callback, token, list(args), ctx.avals_out,
                              has_side_effect=True)
        ctx.set_tokens_out(
            ctx.tokens_in.update_tokens(mlir.TokenSet({cb._OrderedIOEffect: token})))
    else:
        result, _ = _emit(ctx, _callback, None, list(args), ctx.avals_out,
                          has_side_effect=True)
    return result


def register_callback_lowerings(platform: str = PLATFORM_NAME) -> None:
    cb = compat.jax_internal("", "callback")
    debugging = compat.jax_internal("", "debugging")
    mlir = compat.jax_internal("interpreters", "mlir")
    # cacheable=False: each lowering must append its own callable to the
    # module's table (JAX's CPU rules for pure/io callbacks do the same).
    mlir.register_lowering(debugging.debug_callback_p, _debug_callback_lowering,
                           platform=platform, cacheable=False)
    mlir.register_lowering(debugging.debug_print_p, _debug_print_lowering,
                           platform=platform, cacheable=False)
    mlir.register_lowering(cb.pure_callback_p, _pure_callback_lowering,
                           platform=platform, cacheable=False)
    mlir.register_lowering(cb.io_callback_p, _io_callback_lowering,
                           platform=platform, cacheable=False)
