"""Ops of upstream's `interpreter` dialect used by the conformance suites:
``interpreter.probe`` and ``interpreter.print`` (``interpreter.run_parallel``
lives with the collectives).

Upstream: ``stablehlo/reference/InterpreterOps.td`` / ``InterpreterOps.cpp``.
They reach us as unregistered ops in generic form.

This module also holds the reference interpreter's text format for tensors
(``Tensor::print`` and the ``--interpreter-print-dense`` form), which
``interpreter.print`` and the conformance runner's FileCheck emulation use.
"""

from __future__ import annotations

import csv
import os
import re
import sys
import threading
from typing import Any

import numpy as np

from .. import config as _config
from .. import dtypes
from ..registry import Unsupported, kernel
from .properties import op_properties

# --------------------------------------------------------------------------
# Probes: tensors saved under an id, read back by check.expect_serialized_eq.
#
# Every probe is kept in the run's state; when a probe directory is set
# (``set_probe_dir`` or $STABLEHLO_REF_PROBE_DIR) it is also written there as
# ``probe<N>.npy`` with a line ``probe_id,type,path`` in ``index.csv``, the
# layout upstream's `--probe-output-dir` uses.

_PROBE_DIR = None
_PROBE_LOCK = threading.Lock()
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def set_probe_dir(path):
    """Directory probes are written to (None: keep them in memory only)."""
    global _PROBE_DIR
    _PROBE_DIR = None if path is None else os.fspath(path)


def probe_dir():
    return _PROBE_DIR or _config.PROBE_DIR.value() or None


def _storable(value):
    # np.save cannot describe ml_dtypes types: store their bit patterns.
    if value.dtype in dtypes.ML_FLOATS or value.dtype in dtypes.SUB_BYTE_INTS:
        return value.view(_UINT[value.dtype.itemsize])
    return value


# The index is written with the csv module (a probe_id with commas, quotes or
# newlines stays one field of one row) and the file column only ever holds a
# file this module made, `<dir>/probe<N>.npy`; the reader refuses anything else, so
# program data (the probe_id) cannot add rows or point the reader at a file
# of its choosing.
_PROBE_FILE = re.compile(r"probe[1-9][0-9]{0,9}\.npy")


def save_probe(ctx, probe_id, value, ttype):
    ctx.state.setdefault("probes", {}).setdefault(probe_id, []).append(value)
    d = probe_dir()
    if d is None:
        return
    with _PROBE_LOCK:
        os.makedirs(d, exist_ok=True)
        index = os.path.join(d, "index.csv")
        n = 0
        if os.path.exists(index):
            with open(index, newline="") as f:
                n = sum(1 for _ in csv.reader(f))
        path = os.path.join(d, f"probe{n + 1}.npy")
        np.save(path, _storable(value), allow_pickle=False)
        with open(index, "a", newline="") as f:
            csv.writer(f, lineterminator="\n").writerow([probe_id, repr(ttype), path])


def _probe_path(d, recorded):
    """The probe file a row names, if it is one this module wrote:
    `probe<N>.npy` in ``d`` itself."""
    head, name = os.path.split(recorded)
    if not _PROBE_FILE.fullmatch(name):
        return None
    if head and os.path.realpath(head) != os.path.realpath(d):
        return None
    return os.path.join(d, name)


def load_probe(ctx, probe_id, iteration, ttype):
    """The `iteration`-th value probed as `probe_id`, or None."""
    d = probe_dir()
    if d is not None:
        index = os.path.join(d, "index.csv")
        if os.path.exists(index):
            match = 0
            with open(index, newline="") as f:
                for row in csv.reader(f):
                    if len(row) == 3 and row[0] == probe_id:
                        if match == iteration:
                            path = _probe_path(d, row[2])
                            if row[1] != repr(ttype) or path is None:
                                return None
                            arr = np.load(path, allow_pickle=False)
                            if arr.dtype != ttype.dtype:
                                if arr.dtype.itemsize != np.dtype(ttype.dtype).itemsize:
                                    return None
                                arr = arr.view(ttype.dtype)
                            return arr
                        match += 1
    values = ctx.state.get("probes", {}).get(probe_id, [])
    return values[iteration] if iteration < len(values) else None


@kernel("interpreter.probe", special=True)
def probe(op):
    """InterpreterOps.td ProbeOp: save the operand under `probe_id`, return it."""
    probe_id = op.attrs.get("probe_id")
    if not isinstance(probe_id, str):
        probe_id = op_properties(op).get("probe_id")
    if not isinstance(probe_id, str):
        raise Unsupported("interpreter.probe needs a string probe_id")
    ttype = op.operand_types[0]

    def run(ctx, regions, value):
        save_probe(ctx, probe_id, value, ttype)
        return value
    return run


# --------------------------------------------------------------------------
# The reference interpreter's printed forms.

_PRINT_LOCK = threading.Lock()
_FMT_CTX = None
_FMT_TYPES = {}


def _mlir_float_text(x, element_type):
    """A float as MLIR prints a FloatAttr of `element_type` (e.g. `1.000000e+00`)."""
    global _FMT_CTX
    from jaxlib.mlir import ir

    from ..loader import MLIR_LOCK, new_context
    with MLIR_LOCK:
        if _FMT_CTX is None:
            _FMT_CTX = new_context()
        with _FMT_CTX, ir.Location.unknown():
            t = _FMT_TYPES.get(element_type)
            if t is None:
                t = _FMT_TYPES[element_type] = ir.Type.parse(element_type)
            s = str(ir.FloatAttr.get(t, float(x)))
    return s.rsplit(" : ", 1)[0]


def _component_type(element_type):
    return element_type[len("complex<"):-1] if element_type.startswith("complex<") \
        else element_type


def format_element(x, element_type, dense=False):
    """One element as upstream's `Element::print` (or as inside `dense<...>`)."""
    if element_type == "i1":
        return "true" if bool(x) else "false"
    dt = dtypes.from_element_type(element_type)
    if dtypes.is_complex(dt):
        c = complex(x)
        ft = _component_type(element_type)
        re_, im = _mlir_float_text(c.real, ft), _mlir_float_text(c.imag, ft)
        return f"({re_},{im})" if dense else f"[{re_}, {im}]"
    if dtypes.is_float(dt):
        return _mlir_float_text(float(x), element_type)
    return str(int(x))


def format_tensor(value, ttype):
    """`Tensor::print` of the reference interpreter: `tensor<2xi32> {\\n  [1, 2]\\n}`."""
    et = ttype.element_type
    shape = value.shape
    out = [repr(ttype), " {"]

    def helper(idx, indent):
        if len(idx) == len(shape):
            out.append(format_element(value[idx], et))
            if not _end(idx):
                out.append(", ")
            return
        out.append("\n" + "  " * indent)
        out.append("[")
        for i in range(shape[len(idx)]):
            helper(idx + (i,), indent + 1)
        out.append("]")
        if not _end(idx):
            out.append(",")
        else:
            out.append("\n" + "  " * (indent - 1))

    def _end(idx):
        return not idx or idx[-1] == shape[len(idx) - 1] - 1

    helper((), 1)
    out.append("}")
    return "".join(out)


def format_dense(value, ttype):
    """The `dense<...> : tensor<...>` form (`--interpreter-print-dense`)."""
    et = ttype.element_type
    if value.size == 0:
        body = ""
    else:
        flat = value.reshape(-1)
        first = flat[0]
        if np.all(_same(flat, flat[:1])):
            body = format_element(first, et, dense=True)
        else:
            def rec(v):
                if v.ndim == 0:
                    return format_element(v[()], et, dense=True)
                return "[" + ", ".join(rec(v[i]) for i in range(v.shape[0])) + "]"
            body = rec(value)
    return f"dense<{body}> : {ttype!r}"


def _same(flat, first):
    """Elements of `flat` equal to `first` (a 1-element array), bitwise for floats
    so that NaNs and signed zeros count as they print."""
    if flat.dtype in dtypes.ML_FLOATS or flat.dtype.kind in "fc":
        u = _UINT.get(flat.dtype.itemsize, np.uint64)
        a = flat.view(u).reshape(flat.size, -1)
        return np.all(a == first.view(u).reshape(1, -1), axis=1)
    return flat == first


def format_value(value: Any, ttype: Any, dense: bool = False) -> str:
    """Any runtime value (tensor, tuple, token) in the reference format."""
    from ..types import TupleType
    if isinstance(ttype, TupleType):
        return "(" + ", ".join(format_value(v, t, dense) for v, t in
                               zip(value, ttype.types)) + ")"
    if not isinstance(value, np.ndarray):
        return repr(ttype)
    return format_dense(value, ttype) if dense else format_tensor(value, ttype)


@kernel("interpreter.print")
def print_(op):
    """InterpreterOps.td PrintOp: print `%name = <tensor>` to stdout, atomically."""
    ttype = op.operand_types[0]
    name = op.attrs.get("ssa_name")
    if not isinstance(name, str):
        name = None
        if op.raw is not None and len(op.raw.operands) == 1:
            try:
                # The SSA name MLIR's printer gives the operand (`%0`).
                name = op.raw.operands[0].get_name()
            except Exception:
                name = None
    prefix = f"{name} = " if name else ""

    def run(value):
        text = prefix + format_value(value, ttype) + "\n"
        with _PRINT_LOCK:
            sys.stdout.write(text)
            sys.stdout.flush()
        return ()
    return run
