"""custom_call targets XLA's HLO -> StableHLO converter emits for MHLO ops
that have no StableHLO op.

Programs that arrive as serialized HloModuleProtos (PJRT program format
``hlo``, which PyTorch/XLA sends) are converted with jaxlib's converter
(``hlo_to_stablehlo`` then ``mhlo_to_stablehlo``); PyTorch/XLA's own
converter (``XLA_STABLEHLO_COMPILE=1``) does the same.  MHLO ops without a
StableHLO counterpart are encoded as
``stablehlo.custom_call @mhlo.<op> {mhlo.attributes = {...}, mhlo.version}``
(openxla/xla xla/mlir_hlo/mhlo/transforms/hlo_legalize_to_stablehlo).

A sweep of the HLO opcodes with no StableHLO op (tests/test_hlo_program.py)
found two such targets with jaxlib 0.10.2: ``mhlo.erf`` and ``mhlo.topk``.
They compute exactly as ``chlo.erf`` and ``chlo.top_k`` (same kernels).
jaxlib 0.8.0 also encodes CHLO ops this way when it serializes a portable
artifact (JAX's lowering of ``jnp.arccosh``, ``jnp.cosh``, ...: @mhlo.acosh,
@mhlo.cosh, ...); those run as the ``chlo`` op of the same name.
The converter refuses the XLA-private ops (copy, add-dependency, domain,
stochastic-convert, rng-get-and-update-state) itself, so they never reach
the interpreter; the plugin reports its message at compile time.
"""

import numpy as np

from .. import dtypes
from ..registry import Unsupported, custom_call

_SUPPORTED_VERSION = 1


def _mhlo_attributes(op):
    """The op's ``mhlo.attributes`` dict, after checking ``mhlo.version``."""
    version = op.attrs.get("mhlo.version")
    if version is not None and int(version) > _SUPPORTED_VERSION:
        raise Unsupported(f"@{op.attrs.get('call_target_name')} mhlo.version {int(version)} "
                          f"(stablehlo_ref knows version {_SUPPORTED_VERSION})")
    attrs = op.attrs.get("mhlo.attributes") or {}
    if not isinstance(attrs, dict):
        raise Unsupported(f"@{op.attrs.get('call_target_name')}: mhlo.attributes is not a dictionary")
    return attrs


@custom_call("mhlo.erf")
def erf(op):
    """@mhlo.erf(x): the error function, computed as chlo.erf (float64, one rounding)."""
    _mhlo_attributes(op)
    if len(op.operand_types) != 1 or op.num_results != 1:
        raise Unsupported("@mhlo.erf takes one operand and has one result")
    from ..registry import KERNELS
    return KERNELS["chlo.erf"](op)


# CHLO elementwise ops jaxlib 0.8.0's serializer writes as @mhlo.<name>
# (observed: acos, acosh, asin, atanh, cosh, sinh; the rest of the family is
# the same encoding of a CHLO op without a StableHLO counterpart).
_CHLO_AS_MHLO = ("acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "tan",
                 "erfc", "erf_inv", "lgamma", "digamma", "bessel_i1e", "polygamma", "zeta",
                 "next_after")


def _as_chlo(name):
    def build(op):
        _mhlo_attributes(op)
        from ..registry import KERNELS
        return KERNELS[f"chlo.{name}"](op)
    build.__name__ = f"mhlo_{name}"
    build.__doc__ = f"@mhlo.{name}: computed as chlo.{name}."
    return build


for _name in _CHLO_AS_MHLO:
    custom_call(f"mhlo.{_name}")(_as_chlo(_name))


@custom_call("mhlo.topk")
def topk(op):
    """@mhlo.topk(x) {k, largest}: the k largest (or smallest) entries along
    the last dimension and their int32 indices, ordered like chlo.top_k
    (total order for floats, stable: equal values keep index order)."""
    attrs = _mhlo_attributes(op)
    if "k" not in attrs:
        raise Unsupported("@mhlo.topk without k in mhlo.attributes")
    if len(op.operand_types) != 1 or op.num_results != 2:
        raise Unsupported("@mhlo.topk takes one operand and has two results")
    k = int(attrs["k"])
    largest = bool(attrs.get("largest", True))
    if dtypes.is_complex(op.operand_types[0].dtype):
        raise Unsupported("@mhlo.topk of complex values")
    idx_dtype = op.result_types[1].dtype
    full = np.uint64(0xFFFFFFFFFFFFFFFF)

    def run(x):
        key = dtypes.total_order_key(x)
        if largest:
            key = full - key
        order = np.argsort(key, axis=-1, kind="stable")[..., :k]
        values = np.take_along_axis(x, order, axis=-1)
        return [np.ascontiguousarray(values), order.astype(idx_dtype)]
    return run
