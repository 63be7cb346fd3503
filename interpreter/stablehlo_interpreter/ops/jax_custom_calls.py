"""The rest of the custom_call targets JAX emits (jax/_src, JAX 0.10):
the ones that run here, and a reason for each one that cannot.

Runs (besides the linalg, sharding and annotation targets of custom_calls.py,
sharding.py, linalg_custom_calls.py and host_callback.py):

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

import numpy as np

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
