"""Comparing outputs of two backends, element by element, dtype-aware.

    from stablehlo_interpreter.compare import compare_outputs
    report = compare_outputs(reference, other, names=["loss", "grads"])
    if not report.ok:
        print(report)

Integers, bools and tokens must match exactly. Floats (and complex numbers,
part by part) match when ``|other - ref| <= atol + rtol * |ref|`` with
per-dtype defaults (:data:`DEFAULT_TOLERANCES`), or, when ``ulp`` is given,
when they are at most ``ulp`` representable values apart. NaN matches NaN
(any payload) and infinities match only the same infinity: a backend that
produces a NaN where the reference has a number is always a difference,
whatever the tolerance.

This module needs only numpy (and ml_dtypes through ``dtypes``): it is shared
by ``stablehlo-ref compare`` and by the JAX-level oracle in
``stablehlo_pjrt.oracle``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import dtypes

# (rtol, atol) by dtype name. Backends legitimately differ from numpy in the
# last bits of transcendental functions and in summation order, so the
# defaults allow a few hundred ULPs of relative error rather than bit equality.
DEFAULT_TOLERANCES = {
    "float64": (1e-9, 1e-12),
    "float32": (1e-5, 1e-6),
    "float16": (2e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
}
# Anything narrower (the float8/float6/float4 families).
_NARROW_FLOAT_TOLERANCE = (1.3e-1, 1e-3)


def default_tolerance(dtype):
    """(rtol, atol) used for ``dtype`` when the caller gives none."""
    dtype = np.dtype(dtype)
    if dtypes.is_complex(dtype):
        dtype = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
    return DEFAULT_TOLERANCES.get(dtype.name, _NARROW_FLOAT_TOLERANCE)


@dataclass
class LeafDiff:
    """How one output differs (or not) between the reference and the other side."""

    name: str
    ok: bool
    shape: tuple = ()
    dtype: str = ""
    mismatched: int = 0
    total: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: int | None = None
    worst_index: tuple | None = None
    worst_reference: object = None
    worst_other: object = None
    first_indices: list = field(default_factory=list)
    problem: str = ""  # a structural problem (shape, dtype, missing output)
    criterion: str = ""

    def __str__(self):
        head = f"{self.name}: {self.dtype}{list(self.shape)}"
        if self.problem:
            return f"{head} MISMATCH: {self.problem}"
        if self.ok:
            extra = f", max abs err {self.max_abs:.3g}" if self.max_abs else ""
            return f"{head} ok ({self.criterion}{extra})"
        lines = [f"{head} MISMATCH: {self.mismatched} of {self.total} element(s) differ "
                 f"({self.criterion})"]
        if self.worst_index is not None:
            lines.append(f"  max abs err {self.max_abs:.6g}, max rel err {self.max_rel:.6g}"
                         + (f", max ulp {self.max_ulp}" if self.max_ulp is not None else ""))
            lines.append(f"  worst at index {list(self.worst_index)}: reference "
                         f"{self.worst_reference!r}, other {self.worst_other!r}")
        if self.first_indices:
            shown = ", ".join(str(list(i)) for i in self.first_indices)
            lines.append(f"  first differing indices: {shown}")
        return "\n".join(lines)


@dataclass
class ComparisonReport:
    """The comparison of every output; ``ok`` when all of them match."""

    leaves: list
    reference_name: str = "reference"
    other_name: str = "other"

    @property
    def ok(self) -> bool:
        return all(leaf.ok for leaf in self.leaves)

    @property
    def mismatches(self) -> list[LeafDiff]:
        return [leaf for leaf in self.leaves if not leaf.ok]

    def __bool__(self):
        return self.ok

    def __str__(self):
        bad = len(self.mismatches)
        verdict = ("all outputs agree" if self.ok else
                   f"{bad} of {len(self.leaves)} output(s) differ")
        lines = [f"{self.reference_name} vs {self.other_name}: {verdict}"]
        lines.extend("  " + ln for leaf in self.leaves for ln in str(leaf).splitlines())
        return "\n".join(lines)


def _is_floating(dtype):
    return dtypes.is_float(dtype) or dtypes.is_complex(dtype)


def compare_arrays(name: str, reference: Any, other: Any, *, rtol: float | None = None,
                   atol: float | None = None, ulp: int | None = None,
                   max_indices: int = 5) -> LeafDiff:
    """Compare one output; returns a :class:`LeafDiff`."""
    ref = np.asarray(reference)
    oth = np.asarray(other)
    diff = LeafDiff(name=name, ok=False, shape=tuple(ref.shape), dtype=str(ref.dtype),
                    total=int(ref.size))
    if ref.shape != oth.shape:
        diff.problem = f"shape {list(ref.shape)} in the reference, {list(oth.shape)} in the other"
        return diff
    if oth.dtype.kind == "V" and oth.dtype.itemsize == ref.dtype.itemsize:
        oth = oth.view(ref.dtype)  # ml_dtypes arrays come back from .npy as raw bytes
    if ref.dtype != oth.dtype:
        same_family = (_is_floating(ref.dtype) and _is_floating(oth.dtype)
                       and dtypes.is_complex(ref.dtype) == dtypes.is_complex(oth.dtype))
        if not same_family:
            diff.problem = f"dtype {ref.dtype} in the reference, {oth.dtype} in the other"
            return diff
        # e.g. bf16 results stored widened to f32 in a .npz: compare in the
        # reference's precision, which is what both sides computed.
        oth = oth.astype(ref.dtype)
    if ref.size == 0:
        diff.ok = True
        diff.criterion = "empty"
        return diff
    if not _is_floating(ref.dtype):
        diff.criterion = "exact"
        bad = ref != oth
        r64 = ref.astype(np.float64)
        err = np.abs(r64 - oth.astype(np.float64))
        return _finish(diff, bad, err, r64, ref, oth, max_indices)
    if dtypes.is_complex(ref.dtype):
        parts = [(ref.real, oth.real), (ref.imag, oth.imag)]
    else:
        parts = [(ref, oth)]
    if ulp is not None:
        diff.criterion = f"ulp <= {ulp}"
    else:
        d_rtol, d_atol = default_tolerance(ref.dtype)
        rtol = d_rtol if rtol is None else rtol
        atol = d_atol if atol is None else atol
        diff.criterion = f"rtol={rtol:g}, atol={atol:g}"
    bad = np.zeros(ref.shape, bool)
    err = np.zeros(ref.shape, np.float64)
    rel = np.zeros(ref.shape, np.float64)
    max_ulp = 0
    for r, o in parts:
        r64 = r.astype(np.float64)
        o64 = o.astype(np.float64)
        rn, on = np.isnan(r64), np.isnan(o64)
        nan_mismatch = rn != on
        both_nan = rn & on
        inf_mismatch = (np.isinf(r64) | np.isinf(o64)) & (r64 != o64) & ~rn & ~on
        with np.errstate(all="ignore"):
            e = np.where(both_nan | (r64 == o64), 0.0, np.abs(r64 - o64))
            e = np.where(nan_mismatch | inf_mismatch, np.inf, e)
            rl = np.where(e == 0, 0.0, e / np.abs(r64))
        if ulp is not None:
            u = dtypes.ulp_distance(r, o)
            u = np.where(both_nan, 0, u)
            finite_u = np.where(nan_mismatch | inf_mismatch, 0, u)
            max_ulp = max(max_ulp, int(finite_u.max()))
            part_bad = (u > ulp) | nan_mismatch | inf_mismatch
        else:
            with np.errstate(all="ignore"):
                part_bad = ~(e <= atol + rtol * np.abs(r64))
            part_bad &= ~both_nan
            part_bad |= nan_mismatch | inf_mismatch
        bad |= part_bad
        err = np.maximum(err, e)
        rel = np.maximum(rel, np.nan_to_num(rl, nan=np.inf))
    if ulp is not None:
        diff.max_ulp = max_ulp
    return _finish(diff, bad, err, None, ref, oth, max_indices, rel=rel)


def _finish(diff, bad, err, r64, ref, oth, max_indices, rel=None):
    diff.mismatched = int(bad.sum())
    diff.ok = diff.mismatched == 0
    if rel is None:
        with np.errstate(all="ignore"):
            rel = np.where(err == 0, 0.0, err / np.abs(r64))
        rel = np.nan_to_num(rel, nan=np.inf)
    diff.max_abs = float(err.max())
    diff.max_rel = float(rel.max())
    if diff.mismatched:
        # The worst element among the differing ones (an infinite error, such
        # as NaN vs number, wins).
        masked = np.where(bad, err, -1.0)
        flat = int(np.argmax(masked))
        idx = np.unravel_index(flat, ref.shape)
        diff.worst_index = tuple(int(i) for i in idx)
        diff.worst_reference = ref[idx].item() if ref.ndim else ref.item()
        diff.worst_other = oth[idx].item() if oth.ndim else oth.item()
        diff.first_indices = [tuple(int(i) for i in ix)
                              for ix in np.argwhere(bad)[:max_indices]]
    return diff


def compare_outputs(reference: Sequence[Any], other: Sequence[Any],
                    names: Sequence[str] | None = None, *, rtol: float | None = None,
                    atol: float | None = None, ulp: int | None = None,
                    reference_name: str = "reference",
                    other_name: str = "other") -> ComparisonReport:
    """Compare two lists of outputs (numpy arrays, or nested tuples of them)."""
    reference = _flatten_values(reference, names)
    other_flat = _flatten_values(other, names)
    leaves = []
    for (name, r), (_, o) in zip(reference, other_flat):
        leaves.append(compare_arrays(name, r, o, rtol=rtol, atol=atol, ulp=ulp))
    for name, r in reference[len(other_flat):]:
        leaves.append(LeafDiff(name=name, ok=False, shape=np.shape(r),
                               dtype=str(np.asarray(r).dtype),
                               problem=f"missing in {other_name}"))
    for name, o in other_flat[len(reference):]:
        leaves.append(LeafDiff(name=name, ok=False, shape=np.shape(o),
                               dtype=str(np.asarray(o).dtype),
                               problem=f"extra output in {other_name} (not in {reference_name})"))
    return ComparisonReport(leaves, reference_name, other_name)


def _flatten_values(values, names):
    out = []

    def walk(name, v):
        if isinstance(v, tuple):
            for j, x in enumerate(v):
                walk(f"{name}[{j}]", x)
        elif v is not None and not _is_token(v):
            out.append((name, v))

    for i, v in enumerate(values):
        walk(names[i] if names is not None and i < len(names) else f"result #{i}", v)
    return out


def _is_token(v):
    from .types import TOKEN
    return v is TOKEN


# --------------------------------------------------------------------------
# stablehlo-ref compare: a module and .npz files


def compare_with_files(program: Any, args: Sequence[Any], against: Any, *,
                       func: str | None = None, rtol: float | None = None,
                       atol: float | None = None, ulp: int | None = None,
                       against_name: str | None = None) -> ComparisonReport:
    """Run ``program`` on ``args`` and compare with the arrays of ``against``
    (a mapping name -> array, e.g. an opened ``.npz``).

    Outputs are matched by name when ``against`` uses the names
    ``stablehlo-ref run --out`` writes (``result_0``, ``result_0_1`` for tuple
    elements); otherwise by position in stored order.
    """
    results = program.run(*args, func=func)
    # Compare in the program's own types (the other side's file may hold
    # bf16/f8 values widened to f32, which compare_arrays narrows back).
    raw = {}
    for i, r in enumerate(results):
        flatten_results(f"result_{i}", r, raw)
    names = list(raw)
    keys = list(against.keys())
    if set(names) <= set(keys):
        other = [against[n] for n in names]
        extra = [k for k in keys if k not in raw]
    else:
        other = [against[k] for k in keys]
        extra = []
    report = compare_outputs([raw[n] for n in names], other, names=names,
                             rtol=rtol, atol=atol, ulp=ulp,
                             other_name=against_name or "other")
    for k in extra:
        a = against[k]
        report.leaves.append(LeafDiff(name=k, ok=False, shape=a.shape, dtype=str(a.dtype),
                                      problem="extra array in the other side's file"))
    return report


def flatten_results(prefix: str, value: Any, out: dict[str, Any],
                    convert: Callable[[Any], Any] = lambda a: a) -> None:
    """Name every array of a (possibly tuple-nested) result ``prefix``,
    ``prefix_0``, ``prefix_0_1``...; tokens are left out."""
    if isinstance(value, tuple):
        for j, v in enumerate(value):
            flatten_results(f"{prefix}_{j}", v, out, convert)
    elif isinstance(value, np.ndarray):
        out[prefix] = convert(value)
