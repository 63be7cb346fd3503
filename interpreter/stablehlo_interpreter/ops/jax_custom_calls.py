"""The custom_call targets JAX emits (jax/_src, JAX 0.10) that are not
linear algebra (linalg_custom_calls.py), sharding or placement annotations
(sharding.py) or host callbacks (host_callback.py): the ones that run here,
and a reason for each one that cannot.

Runs:

* ``ApproxTopK`` (``jax.lax.approx_max_k`` / ``approx_min_k``; the default
  rule marks it ``is_fallback``: an exact top-k);
* ``stablehlo.dynamic_rng_bit_generator``, ``stablehlo.dynamic_top_k`` and
  ``shape_assertion``: the dynamic-shape forms JAX emits under shape
  polymorphism, with static shapes;
* ``dce_sink`` (``lax.dce_sink(x, prevent_mlir_dce=True)``): a side-effecting
  no-op that keeps ``x`` alive; XLA treats it the same way.
* ``AllocateBuffer`` (``lax.empty`` lowered for TPU/GPU): a new array whose
  contents the program may not read before writing. XLA gives uninitialized
  memory; here it is zeros (one of the allowed contents).

Rejected with a reason (see :data:`REJECTIONS`): kernels compiled for a
particular piece of hardware (LAPACK/cuSOLVER FFI kernels of JAX's CPU/GPU
lowerings, Pallas, Triton, cuDNN, Mosaic), host callbacks lowered for
another platform, the state primitives' memref markers (``CreateBuffer``,
``Pin``, ``Unpin``), TensorFlow calls, XLA compile-time hooks, and JAX's
shape-polymorphic ``stablehlo.dynamic_*`` targets that need shape refinement.
"""

import re

import numpy as np

from .. import dtypes
from ..registry import Unsupported, custom_call, reject_custom_call


@custom_call("dce_sink")
def dce_sink(op):
    """@dce_sink(x): no result, no effect beyond keeping ``x`` alive."""
    if op.num_results:
        raise Unsupported(f"@dce_sink with {op.num_results} results")
    return lambda *xs: ()


@custom_call("AllocateBuffer")
def allocate_buffer(op):
    """@AllocateBuffer () -> tensor (``lax.empty`` lowered for TPU/GPU): a
    fresh array the program may not read before writing. XLA gives
    uninitialized memory; here it is zeros (one of the allowed contents)."""
    if op.operand_types or op.num_results != 1:
        raise Unsupported(f"@AllocateBuffer with {len(op.operand_types)} operands "
                          f"and {op.num_results} results")
    t = op.result_types[0]
    if getattr(t, "shape", None) is None or any(d is None for d in t.shape):
        raise Unsupported(f"@AllocateBuffer of {t!r} (static shapes only)")
    shape, dtype = tuple(int(d) for d in t.shape), np.dtype(t.dtype)
    return lambda: np.zeros(shape, dtype)


_LOWERED_FOR = ("a kernel of JAX's {which} lowering (the module was lowered or exported "
                "for platform {plat!r}); lower it for stablehlo_ref, whose rules use "
                "the interpreter's own linear algebra")
_HARDWARE = ("a compiled {what} kernel for {hw}: its payload is machine code or "
             "hardware IR, which an interpreter cannot run")
_CALLBACK = ("a host callback of JAX's {plat} lowering: it indexes a callback table "
             "the XLA {plat} runtime holds; trace the function for stablehlo_ref "
             "(its callbacks lower to @stablehlo_ref.host_callback)")

_MEMREF = ("{name}: a marker of JAX's linear state values whose result must be a "
           "memref (the StableHLO verifier rejects a tensor result); memrefs exist only "
           "in Pallas/Mosaic kernels, which an interpreter of tensors does not run")

REJECTIONS = {
    "lapack_*": _LOWERED_FOR.format(which="CPU (LAPACK FFI)", plat="cpu"),
    "cusolver_*": _LOWERED_FOR.format(which="CUDA (cuSOLVER)", plat="cuda"),
    "hipsolver_*": _LOWERED_FOR.format(which="ROCm (hipSOLVER)", plat="rocm"),
    "cusparse_*": _LOWERED_FOR.format(which="CUDA (cuSPARSE)", plat="cuda"),
    "hipsparse_*": _LOWERED_FOR.format(which="ROCm (hipSPARSE)", plat="rocm"),
    "cu_*": _LOWERED_FOR.format(which="CUDA", plat="cuda"),
    "hip_*": _LOWERED_FOR.format(which="ROCm", plat="rocm"),
    "cuhybrid_*": _LOWERED_FOR.format(which="CUDA (MAGMA hybrid)", plat="cuda"),
    "hiphybrid_*": _LOWERED_FOR.format(which="ROCm (MAGMA hybrid)", plat="rocm"),
    "tpu_custom_call": _HARDWARE.format(what="Pallas/Mosaic", hw="TPU"),
    "mosaic_gpu*": _HARDWARE.format(what="Pallas Mosaic GPU", hw="NVIDIA GPUs"),
    "__gpu$xla.gpu.triton": _HARDWARE.format(what="Pallas Triton", hw="GPUs"),
    "triton_kernel_call*": _HARDWARE.format(what="Triton", hw="GPUs"),
    "__cudnn$*": _HARDWARE.format(what="cuDNN", hw="NVIDIA GPUs"),
    "__cublas$*": _HARDWARE.format(what="cuBLAS", hw="NVIDIA GPUs"),
    "xla_ffi_python_cpu_callback": _CALLBACK.format(plat="CPU"),
    "xla_ffi_partitioned_python_cpu_callback": _CALLBACK.format(plat="CPU"),
    "xla_ffi_python_gpu_callback": _CALLBACK.format(plat="GPU"),
    "xla_ffi_partitioned_python_gpu_callback": _CALLBACK.format(plat="GPU"),
    "xla_python_cpu_callback": _CALLBACK.format(plat="CPU"),
    "xla_python_gpu_callback": _CALLBACK.format(plat="GPU"),
    "xla_buffer_python_cpu_callback": _CALLBACK.format(plat="CPU"),
    "xla_buffer_python_gpu_callback": _CALLBACK.format(plat="GPU"),
    "InspectSharding": ("jax.debug.inspect_array_sharding: XLA calls it back from its "
                        "sharding propagation pass at compile time, which stablehlo_ref "
                        "does not run (a sharded jit runs as one global program)"),
    "CreateBuffer": _MEMREF.format(name="CreateBuffer (state create_linear)"),
    "Pin": _MEMREF.format(name="Pin (state pin)"),
    "Unpin": _MEMREF.format(name="Unpin (state unpin)"),
    "tf.call_tf_function": ("jax2tf.call_tf(call_tf_graph=True): a call into a "
                            "TensorFlow graph, which needs TensorFlow's runtime"),
    "stablehlo.dynamic_reduce_window": (
        "reduce_window with symbolic (shape-polymorphic) shapes: refine the "
        "exported module's shapes (jax.export with concrete shapes) first"),
    "stablehlo.dynamic_approx_top_k": (
        "approx_top_k with symbolic (shape-polymorphic) shapes: refine the "
        "exported module's shapes (jax.export with concrete shapes) first"),
}

for _target, _reason in REJECTIONS.items():
    reject_custom_call(_reason, _target)


# --------------------------------------------------------------------------
# ApproxTopK: the default (fallback) rule asks for an exact top-k.


def _comparator_direction(op, name):
    """'GT' or 'LT' when the comparator is `compare DIR, arg0, arg1`."""
    o = op.module.function_ops().get(name)
    if o is not None:
        block = o.regions[0].blocks[0]
        ops = list(block.operations)
        args = list(block.arguments)
        if len(ops) != 2 or ops[0].operation.name != "stablehlo.compare":
            return None
        cmp = ops[0].operation
        if list(ops[1].operation.operands) != [cmp.results[0]]:
            return None
        m = re.search(r"comparison_direction\s+(\w+)", str(cmp.attributes["comparison_direction"]))
        if not m:
            return None
        direction = m.group(1)
        lhs, rhs = cmp.operands[0], cmp.operands[1]
        if lhs == args[0] and rhs == args[1]:
            return direction
        if lhs == args[1] and rhs == args[0]:
            return {"GT": "LT", "LT": "GT"}.get(direction)
        return None
    return None


@custom_call("ApproxTopK")
def approx_top_k(op):
    """@ApproxTopK (operand, iota, init_value, init_index) -> (values, indices).

    Computed exactly (what the default rule's `is_fallback` asks for): a
    stable sort along `reduction_dim` by the comparator (GT: largest first,
    LT: smallest first; floats in total order), cut to the result size.
    """
    cfg = op.attrs.get("mhlo.backend_config")
    if not isinstance(cfg, dict):
        raise Unsupported("@ApproxTopK without mhlo.backend_config")
    comps = op.attrs.get("called_computations") or []
    if len(comps) != 1 or len(op.operand_types) != 4 or op.num_results != 2:
        raise Unsupported("@ApproxTopK of an unexpected form")
    direction = _comparator_direction(op, str(comps[0]))
    if direction not in ("GT", "LT"):
        raise Unsupported("@ApproxTopK comparator is not a plain GT/LT compare")
    dim = int(cfg.get("reduction_dim", -1))
    rank = len(op.operand_types[0].shape)
    dim = dim + rank if dim < 0 else dim
    size = op.result_types[0].shape[dim]
    if size is None:
        raise Unsupported("dynamic shapes")
    full = np.uint64(0xFFFFFFFFFFFFFFFF)
    descending = direction == "GT"
    out_v, out_i = (r.dtype for r in op.result_types)

    # The init operands are the reduction's identity, which an exact top-k
    # does not need.
    def run(x, iota, _init_value, _init_index):
        key = dtypes.total_order_key(x)
        if descending:
            key = full - key
        order = np.argsort(key, axis=dim, kind="stable")
        order = np.take(order, np.arange(size), axis=dim)
        values = np.take_along_axis(x, order, axis=dim).astype(out_v)
        indices = np.take_along_axis(iota, order, axis=dim).astype(out_i)
        return [values, indices]
    return run


# --------------------------------------------------------------------------
# Dynamic-shape forms JAX emits under shape polymorphism.


@custom_call("stablehlo.dynamic_rng_bit_generator")
def dynamic_rng_bit_generator(op):
    """@stablehlo.dynamic_rng_bit_generator(state, output_shape): rng_bit_generator
    with the output shape given at run time (attribute rng_algorithm)."""
    from .rng import make_bit_generator
    if len(op.operand_types) != 2 or op.num_results != 2:
        raise Unsupported("@stablehlo.dynamic_rng_bit_generator of an unexpected form")
    algorithm = op.attrs.get("rng_algorithm", "DEFAULT")
    algorithm = re.sub(r".*\b(DEFAULT|THREE_FRY|PHILOX)\b.*", r"\1", str(algorithm))
    gen = make_bit_generator(algorithm, op.operand_types[0], op.result_types[1])

    def run(state, shape):
        return gen(state, tuple(int(d) for d in np.asarray(shape).reshape(-1)))
    return run


@custom_call("stablehlo.dynamic_top_k")
def dynamic_top_k(op):
    """@stablehlo.dynamic_top_k(operand, k): chlo.top_k with k given at run time."""
    if len(op.operand_types) != 2 or op.num_results != 2:
        raise Unsupported("@stablehlo.dynamic_top_k of an unexpected form")
    if dtypes.is_complex(op.operand_types[0].dtype):
        raise Unsupported("top_k of complex values")
    idx_dtype = op.result_types[1].dtype
    full = np.uint64(0xFFFFFFFFFFFFFFFF)

    def run(x, k):
        k = int(k)
        order = np.argsort(full - dtypes.total_order_key(x), axis=-1, kind="stable")[..., :k]
        return [np.ascontiguousarray(np.take_along_axis(x, order, axis=-1)),
                order.astype(idx_dtype)]
    return run


@custom_call("shape_assertion")
def shape_assertion(op):
    """@shape_assertion(assert_what, *inputs) {error_message}: JAX's check of
    the shape constraints of an exported shape-polymorphic module; fails the
    run with error_message.format(*inputs) when assert_what is false."""
    message = str(op.attrs.get("error_message", "shape assertion failed"))

    def run(ok, *inputs):
        if not bool(ok):
            vals = [int(v) if np.ndim(v) == 0 else v for v in inputs]
            try:
                text = message.format(*vals)
            except (IndexError, KeyError, ValueError):
                text = f"{message} {vals}"
            raise AssertionError(text)
        return ()
    return run
