"""Decoding MLIR attributes into numpy / Python values, once, at compile time.

The plan that runs never touches MLIR objects: every attribute an op needs is
turned here into ints, tuples, strings, dicts or numpy arrays.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np

from . import dtypes
from .errors import LoadError
from .loader import MLIR_LOCK, new_context
from .mlir_text import split_top, value_end
from .types import from_mlir

# Element types numpy can take straight from the attribute's buffer.
_BUFFER_OK = {np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64,
                                    np.uint8, np.uint16, np.uint32, np.uint64,
                                    np.float16, np.float32, np.float64,
                                    np.complex64, np.complex128)}

_UINT_OF_WIDTH = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def dense_to_numpy(attr, ttype=None):
    """Value of a DenseElementsAttr as a numpy array of the spec's dtype.

    ``ttype`` is the TensorType of the attribute (decoded from the attribute's
    own type when omitted). Quantized tensors decode to their storage type.
    """
    from jaxlib.mlir import ir
    if ttype is None:
        ttype = from_mlir(attr.type)
    shape = tuple(ttype.shape)
    dtype = ttype.dtype
    if isinstance(attr, ir.DenseResourceElementsAttr):
        raise TypeError("dense_resource constants are not supported "
                        "(the blob is not reachable from the Python bindings)")
    dense = ir.DenseElementsAttr(attr)
    if dtype in _BUFFER_OK and ttype.quant is None:
        try:
            if dense.is_splat:
                arr = np.array(dense.get_splat_value().value if dtype != np.bool_
                               else dense.get_splat_value().value, dtype=dtype)
                return np.full(shape, arr, dtype=dtype)
            arr = np.array(dense, copy=True)
            if arr.dtype == dtype and arr.size == int(np.prod(shape, dtype=np.int64)):
                return arr.reshape(shape)
        except Exception:  # fall back to the textual form below
            pass
    return _parse_dense_text(str(attr), shape, dtype)


def _float_bits_dtype(dtype):
    bw = dtypes.bit_width(dtype)
    return _UINT_OF_WIDTH.get(max(8, 1 << (bw - 1).bit_length()), np.uint8)


_TOKEN_SPLIT = re.compile(r"[\s\[\]\(\),]+")


def _parse_dense_text(text, shape, dtype):
    """Parse the printed form `dense<...> : tensor<...>` of an elements attribute.

    Used for element types numpy cannot take from the buffer (bf16, f8, int4,
    ...). MLIR prints non-finite floats as hex bit patterns and finite ones
    with enough digits to round-trip, so this is exact.
    """
    if not text.startswith("dense<"):
        raise TypeError(f"cannot decode elements attribute {text[:80]}")
    end = text.rfind("> : ")
    body = text[len("dense<"):end].strip()
    count = int(np.prod(shape, dtype=np.int64))
    if body.startswith('"0x'):
        raw = bytes.fromhex(body[3:-1])
        storage = np.dtype(dtype)
        if dtype in dtypes.SUB_BYTE_INTS:
            storage = np.dtype(np.int8 if not dtypes.is_unsigned(dtype) else np.uint8)
        arr = np.frombuffer(raw, dtype=storage)
        if storage != dtype:
            arr = arr.astype(dtype)
        arr = arr.copy()
        if arr.size == 1 and count != 1:
            return np.full(shape, arr[0], dtype=dtype)
        return arr.reshape(shape)
    tokens = [t for t in _TOKEN_SPLIT.split(body) if t]
    if dtype == np.bool_:
        vals = np.array([t == "true" or (t not in ("false", "0") and t != "") for t in tokens],
                        dtype=np.bool_)
    elif dtypes.is_integer(dtype):
        vals = np.array([int(t, 0) for t in tokens], dtype=object)
        lo, hi = dtypes.int_info(dtype)
        # Printed values may use the unsigned spelling of a signed type.
        width = dtypes.bit_width(dtype)
        vals = [(v - (1 << width)) if v > hi else v for v in vals]
        # Unsigned values up to 2**64-1 do not fit int64: build them as uint64.
        vals = np.array(vals, dtype=np.uint64 if dtypes.is_unsigned(dtype) else np.int64)
        vals = vals.astype(dtype)
    elif dtypes.is_complex(dtype):
        part = np.float32 if dtype == np.complex64 else np.float64
        parts = np.array([_float_token(t, part) for t in tokens], dtype=part)
        # Assign parts separately: re + 1j*im would turn (3, nan) into (nan, nan).
        vals = np.empty(parts.size // 2, dtype=dtype)
        vals.real = parts[0::2]
        vals.imag = parts[1::2]
    else:
        vals = np.array([_float_token(t, dtype) for t in tokens], dtype=dtype)
    if vals.size == 1 and count != 1:
        return np.full(shape, vals[0], dtype=dtype)
    if vals.size != count:
        raise TypeError(f"elements attribute has {vals.size} values, its type needs {count}")
    return vals.reshape(shape)


def _float_token(tok, dtype):
    if tok.startswith("0x") or tok.startswith("0X"):
        bits = int(tok, 16)
        bdt = _float_bits_dtype(dtype)
        return np.array(bits, dtype=bdt).view(dtype) if np.dtype(bdt).itemsize == np.dtype(dtype).itemsize \
            else np.array(bits, dtype=np.uint8).view(dtype)
    return np.array(float(tok)).astype(dtype)


def decode(attr):
    """Decode any attribute into a plain Python / numpy value.

    Known StableHLO attributes become strings (enums) or dicts (dimension
    numbers); unknown ones fall back to their printed text so that a kernel
    that does not need them never fails on them.
    """
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo as shlo

    if isinstance(attr, ir.BoolAttr):
        return bool(attr.value)
    if isinstance(attr, ir.IntegerAttr):
        return int(ir.IntegerAttr(attr).value)
    if isinstance(attr, ir.FloatAttr):
        return float(ir.FloatAttr(attr).value)
    if isinstance(attr, ir.StringAttr):
        return string_value(attr)
    if isinstance(attr, ir.DenseI64ArrayAttr):
        return tuple(int(x) for x in ir.DenseI64ArrayAttr(attr))
    if isinstance(attr, ir.DenseI32ArrayAttr):
        return tuple(int(x) for x in ir.DenseI32ArrayAttr(attr))
    if isinstance(attr, ir.DenseBoolArrayAttr):
        return tuple(bool(x) for x in ir.DenseBoolArrayAttr(attr))
    if isinstance(attr, ir.DenseF32ArrayAttr):
        return tuple(float(x) for x in ir.DenseF32ArrayAttr(attr))
    if isinstance(attr, ir.DenseF64ArrayAttr):
        return tuple(float(x) for x in ir.DenseF64ArrayAttr(attr))
    if isinstance(attr, ir.DenseElementsAttr):
        return dense_to_numpy(attr)
    if isinstance(attr, ir.ArrayAttr):
        return [decode(a) for a in ir.ArrayAttr(attr)]
    if isinstance(attr, ir.DictAttr):
        return _decode_dict(ir.DictAttr(attr))
    if isinstance(attr, ir.UnitAttr):
        return True
    if isinstance(attr, ir.FlatSymbolRefAttr):
        return ir.FlatSymbolRefAttr(attr).value
    if isinstance(attr, ir.TypeAttr):
        return from_mlir(ir.TypeAttr(attr).value)
    for enum_cls in (shlo.ComparisonDirectionAttr, shlo.ComparisonTypeAttr,
                     shlo.PrecisionAttr, shlo.FftTypeAttr, shlo.RngAlgorithmAttr,
                     shlo.RngDistributionAttr, shlo.TransposeAttr):
        if enum_cls.isinstance(attr):
            return enum_cls(attr).value
    for attr_cls, fields in _struct_attrs():
        if attr_cls.isinstance(attr):
            a = attr_cls(attr)
            return {key: _plain(getattr(a, name)) for key, name in fields}
    return RawAttr(str(attr))


def _plain(value):
    """A field of a structured attribute as the kernels take it: the bindings
    give lists (made tuples, hashable) and Python scalars."""
    return tuple(value) if isinstance(value, list) else value


@functools.cache
def _struct_attrs():
    """StableHLO's structured attributes and their fields, in printed order;
    ``key=property`` where the binding's name differs. Built on first use:
    the bindings load lazily."""
    from jaxlib.mlir.dialects import stablehlo as shlo
    table = (
        (shlo.DotDimensionNumbers, "lhs_batching_dimensions rhs_batching_dimensions "
         "lhs_contracting_dimensions rhs_contracting_dimensions"),
        (shlo.GatherDimensionNumbers, "offset_dims collapsed_slice_dims "
         "operand_batching_dims start_indices_batching_dims start_index_map "
         "index_vector_dim"),
        (shlo.ScatterDimensionNumbers, "update_window_dims inserted_window_dims "
         "input_batching_dims scatter_indices_batching_dims "
         "scattered_dims_to_operand_dims index_vector_dim"),
        (shlo.ConvDimensionNumbers, "input_batch_dimension input_feature_dimension "
         "input_spatial_dimensions kernel_input_feature_dimension "
         "kernel_output_feature_dimension kernel_spatial_dimensions "
         "output_batch_dimension output_feature_dimension output_spatial_dimensions"),
        (shlo.ChannelHandle, "handle type=channel_type"),
        (shlo.OutputOperandAlias, "output_tuple_indices operand_index "
         "operand_tuple_indices"),
        (shlo.ResultAccuracyAttr, "atol rtol ulps mode"),
    )
    out = []
    for attr_cls, names in table:
        fields = []
        for n in names.split():
            key, _, prop = n.partition("=")
            fields.append((key, prop or key))
        out.append((attr_cls, tuple(fields)))
    return tuple(out)


def _decode_dict(d):
    """Entries of a DictAttr, each decoded.

    Only names are read through ``d[i]``: reading ``d[i].attr`` of an entry
    the bindings cannot cast (a dense *complex* tensor: "Can't cast unknown
    element type") throws from C++ code that cannot pass the error on, and
    the process aborts. ``d[name]`` raises a Python TypeError for the same
    entry instead; such an entry is decoded from the dictionary's printed form.
    """
    out = {}
    text = None
    for i in range(len(d)):
        name = d[i].name
        try:
            value = decode(d[name])
        except Exception:
            if text is None:
                text = str(d)
            value = _decode_entry_text(text, name)
        out[name] = value
    return out


def _decode_entry_text(dict_text, name):
    """Decode entry ``name`` of a dictionary attribute from its printed form."""
    body = dict_text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    for part in split_top(body):
        key, eq, value = part.partition("=")
        key = key.strip()
        if key.startswith('"') and key.endswith('"'):
            key = key[1:-1]
        if key == name:
            value = value.strip() if eq else "unit"
            try:
                return decode_text(value)
            except Exception:
                return RawAttr(value)
    return RawAttr("<undecodable>")


def string_value(attr):
    """Text of a StringAttr; bytes that are not UTF-8 (the bindings raise a
    RuntimeError reading them as str) become U+FFFD."""
    from jaxlib.mlir import ir
    return bytes(ir.StringAttr(attr).value_bytes).decode("utf-8", "replace")


class RawAttr(str):
    """An attribute the decoder does not model, kept as its printed text."""


def decode_attribute(owner: Any, name: str) -> Any:
    """Decoded value of attribute ``name`` of op ``owner`` (an ir.Operation).

    The Python bindings cannot hand out some attributes as objects (dense
    complex tensors raise "Can't cast unknown element type", and printing the
    NamedAttribute, or reading its ``.attr``, aborts the process); those are
    decoded from the owner's generic printed form instead.
    """
    try:
        attr = owner.attributes[name]
    except Exception:
        text = _attr_text_from_asm(owner.get_asm(print_generic_op_form=True,
                                                 large_elements_limit=None), name)
        if text is not None and text.startswith("dense<"):
            return decode_text(text)
        return RawAttr(text or "<undecodable>")
    try:
        return decode(attr)
    except Exception:
        try:
            return RawAttr(str(attr))
        except Exception:  # printing fails too (text that is not UTF-8)
            return RawAttr("<undecodable>")


def decode_text(text):
    """Decode an attribute from its printed form.

    Dense elements are parsed from the text directly (the bindings cannot
    hand out every element type as an object); anything else is parsed by
    MLIR and decoded like an attribute object.
    """
    from jaxlib.mlir import ir
    if text.startswith("dense<"):
        ttype = from_mlir(ir.Type.parse(text[text.rfind("> : ") + 4:]))
        return _parse_dense_text(text, ttype.shape, ttype.dtype)
    return decode(ir.Attribute.parse(text))


def parse_attribute(text: str) -> Any:
    """The value of MLIR attribute ``text`` (e.g. ``[dense<1> : tensor<2xi32>]``,
    the conformance files' ``--args``), decoded as op attributes are
    (:func:`decode`: dense elements as numpy arrays, arrays as lists, ...).
    Parsed in a context of its own; LoadError when MLIR cannot parse it."""
    from jaxlib.mlir import ir
    with MLIR_LOCK, new_context(), ir.Location.unknown():
        try:
            attr = ir.Attribute.parse(text)
        except Exception as e:  # MLIRError: the parser's diagnostics
            raise LoadError(f"cannot parse the attribute {text[:80]!r}: {e}") from None
        try:
            return decode(attr)
        except TypeError:
            # The bindings cannot hand out some dense elements inside an array
            # as objects ("Can't cast unknown element type": complex ones);
            # decode those from the printed text, as decode_attribute does.
            if not isinstance(attr, ir.ArrayAttr):
                raise
            return [decode_text(t.strip()) for t in split_top(str(attr)[1:-1])]


def _attr_text_from_asm(asm, name):
    """Text of attribute ``name`` in an op's generic assembly, or None."""
    key = f"{name} = "
    pos = 0
    while True:
        i = asm.find(key, pos)
        if i < 0:
            return None
        if i > 0 and asm[i - 1] in "{ ,":
            break
        pos = i + 1
    start = i + len(key)
    return asm[start:value_end(asm, start)].strip()
