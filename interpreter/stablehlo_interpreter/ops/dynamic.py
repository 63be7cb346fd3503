"""Dynamic-shape ops: shapes, paddings and slice bounds are operand values.

dynamic_broadcast_in_dim, dynamic_reshape, dynamic_iota, dynamic_pad and
real_dynamic_slice (spec sections of the same names; real_dynamic_slice is a
dialect op outside the spec). Output shapes always come from the operand
values at run time; static dims of the result type are only checked.
"""

import numpy as np

from ..registry import kernel
from .shape import check_result_dims, do_broadcast_in_dim, do_pad, int_list, make_iota


@kernel("stablehlo.dynamic_broadcast_in_dim", traits=("quant_same_params",))
def dynamic_broadcast_in_dim(op):
    """spec: dynamic_broadcast_in_dim. Like broadcast_in_dim with the result
    shape given by `output_dimensions`; the known_(non)expanding hints are
    not needed since the runtime shapes decide."""
    bdims = tuple(op.attrs["broadcast_dimensions"])
    rtype = op.result_types[0]

    def run(x, output_dimensions):
        shape = int_list(output_dimensions, "output_dimensions")
        check_result_dims(shape, rtype, "dynamic_broadcast_in_dim")
        return do_broadcast_in_dim(x, bdims, shape)
    return run


@kernel("stablehlo.dynamic_reshape", traits=("quant_same_params",))
def dynamic_reshape(op):
    """spec: dynamic_reshape. Reshape to the shape held by `output_shape`."""
    rtype = op.result_types[0]

    def run(x, output_shape):
        shape = int_list(output_shape, "output_shape")
        check_result_dims(shape, rtype, "dynamic_reshape")
        if any(d < 0 for d in shape) or int(np.prod(shape, dtype=np.int64)) != x.size:
            raise ValueError(f"dynamic_reshape: cannot reshape {x.shape} to {tuple(shape)}")
        return x.reshape(shape)
    return run


@kernel("stablehlo.dynamic_iota")
def dynamic_iota(op):
    """spec: dynamic_iota. iota with the shape held by `output_shape`."""
    rtype = op.result_types[0]
    dim = op.attrs["iota_dimension"]

    def run(output_shape):
        shape = int_list(output_shape, "output_shape")
        check_result_dims(shape, rtype, "dynamic_iota")
        return make_iota(shape, dim, rtype.dtype)
    return run


@kernel("stablehlo.dynamic_pad", traits=("quant_same_params",))
def dynamic_pad(op):
    """spec: dynamic_pad. pad with paddings held by 1-d tensor operands."""
    rtype = op.result_types[0]

    def run(x, value, low, high, interior):
        out = do_pad(x, value, int_list(low, "edge_padding_low"),
                     int_list(high, "edge_padding_high"),
                     int_list(interior, "interior_padding"))
        check_result_dims(out.shape, rtype, "dynamic_pad")
        return out
    return run


@kernel("stablehlo.real_dynamic_slice", traits=("quant_same_params",))
def real_dynamic_slice(op):
    """stablehlo.real_dynamic_slice: slice with start/limit/strides held by
    1-d tensor operands (no clamping: out-of-bounds bounds are an error)."""
    rtype = op.result_types[0]

    def run(x, start, limit, strides):
        st = int_list(start, "start_indices")
        li = int_list(limit, "limit_indices")
        sd = int_list(strides, "strides")
        if not (len(st) == len(li) == len(sd) == x.ndim):
            raise ValueError("real_dynamic_slice: index sizes do not match the operand rank")
        for s, l, k, d in zip(st, li, sd, x.shape):
            if not (0 <= s <= l <= d) or k <= 0:
                raise ValueError(f"real_dynamic_slice: bad bounds start={st} limit={li} "
                                 f"strides={sd} for shape {x.shape}")
        out = x[tuple(slice(s, l, k) for s, l, k in zip(st, li, sd))]
        check_result_dims(out.shape, rtype, "real_dynamic_slice")
        return out
    return run
