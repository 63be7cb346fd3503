"""Reducer bodies that are one known binary op: the one table every region op uses.

reduce, reduce_window, scatter (and select_and_scatter), all_reduce,
reduce_scatter and collective_reduce all take a body ``(acc, x) -> op(acc, x)``.
When ``regions.reducer_kind`` recognises the body as one of ``add``,
``multiply``, ``maximum``, ``minimum``, ``and``, ``or``, ``xor``,
:func:`reducer` gives a :class:`Reducer` with the spec's semantics for the
element type:

* i1 (bool): add/maximum/or are logical or, multiply/minimum/and logical and,
  xor logical xor.
* integers wrap modulo 2**bits. Builtin ones reduce natively (numpy wraps);
  i2/i4/ui2/ui4 go through int64/uint64 (2**64 is a multiple of 2**bits, so
  the wrap on the way back agrees) -- faster than ml_dtypes' ufunc loops.
* real floats: maximum/minimum are exact (NaN propagates, -0 < +0 as for the
  elementwise ops: numpy's ufuncs get the sign of an equal zero from the
  argument order, so the sign is fixed afterwards). add/multiply: the spec
  leaves the order of a reduction implementation-defined and a reference
  must be the most accurate backend, so f32, f16, bf16 and the 8/6/4-bit
  floats accumulate in float64 and round once; float64 itself is summed
  pairwise (numpy's pairwise sum along a contiguous last axis) and scanned
  in two levels of blocks.
* complex: add/multiply like floats (complex64 accumulates in complex128);
  maximum/minimum are left to the body (its lexicographic comparison), as
  are and/or/xor on non-integers (invalid bodies the verifier rejects).

Exact kinds (everything but float/complex add and multiply) give results
independent of the order, hence bit-identical to the spec's sequential
evaluation.
"""

import numpy as np

from .. import dtypes
from ..pool import run_chunks
from ..regions import reducer_kind

F64 = np.dtype(np.float64)
C128 = np.dtype(np.complex128)

_BOOL = {"add": np.logical_or, "maximum": np.logical_or, "or": np.logical_or,
         "multiply": np.logical_and, "minimum": np.logical_and, "and": np.logical_and,
         "xor": np.logical_xor}
_BOOL_DT = np.dtype(np.bool_)
_BYTE_OP = {np.logical_or: np.bitwise_or, np.logical_and: np.bitwise_and,
            np.logical_xor: np.bitwise_xor}
try:
    from .. import _sums
except ImportError:   # not built: _row_sums / _lead_sums compute the same bits with numpy
    _sums = None

F32 = np.dtype(np.float32)
# Element types whose ufunc reductions Reducer.vector_kernel runs in the
# element type itself.
_VECTOR_NATIVE = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64))
# The order of _sums.row_sums_f32 (_sums.c): blocks of _SUM_BLOCK elements,
# each summed in _SUM_LANES lanes combined as a tree.
_SUM_LANES = 32
_SUM_BLOCK = 4096

_ARITH = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum,
          "minimum": np.minimum, "and": np.bitwise_and, "or": np.bitwise_or,
          "xor": np.bitwise_xor}

# A reduction of at least _DIMS_LAST_MIN elements into at most
# _DIMS_LAST_MAX_KEPT results over non-trailing axes moves the reduced axes
# last and contiguous first: numpy then sums pairwise, and is faster too
# (6 ms instead of 28 ms for a (1e6, 4) f32 array reduced over axis 0). With
# many results the transpose costs more than it saves ((32768, 32): 7.6 ms
# against 2.5 ms in place), and the in-place sequential float64 sum of
# narrower floats is far more accurate than one rounding of the result.
_DIMS_LAST_MIN = 64
_DIMS_LAST_MAX_KEPT = 16
# Float sums of at least _PAR_MIN elements run in chunks of about _PAR_CHUNK
# elements on the helper threads (pool.py): one long ufunc call per chunk.
_PAR_MIN = 1 << 19
_PAR_CHUNK = 1 << 17
# Float32 sums of fewer elements run their C loops in the calling thread
# alone (_row_sums_alone, _reduce_leading), at memory speed; larger ones
# share chunks with the helpers (more cores, more memory bandwidth).
_C_SUM_ALONE = 1 << 22
# Block length of the two-level float64 scan (sqrt(n) minimises the error
# bound ~(n/B + B) eps; this is what it is for n = 1e6).
_SCAN_BLOCK = 1024


class Reducer:
    """Reducer ``kind`` on element type ``dtype`` with the spec's semantics.

    ``ufunc`` combines two values of ``acc`` (the accumulation dtype);
    ``exact``: the result does not depend on the evaluation order.
    Calling the reducer combines two arrays in the element type (one
    application of the body); :meth:`at` is ``ufunc.at`` (scatter).
    """

    __slots__ = ("kind", "dtype", "acc", "ufunc", "exact", "signed_zero")

    def __init__(self, kind, dtype, acc, ufunc, exact, signed_zero=False):
        self.kind, self.dtype, self.acc, self.ufunc = kind, dtype, acc, ufunc
        self.exact = exact
        self.signed_zero = signed_zero  # float max/min: fix the sign of 0 results

    def __repr__(self):
        return f"Reducer({self.kind}, {self.dtype}, acc={self.acc})"

    # -- one application of the body, in the element type --------------
    def __call__(self, a, b):
        a = np.asarray(a)
        b = np.asarray(b)
        # add/multiply of two values: one rounding to the element type from
        # the wide accumulator, as the elementwise kernels round.
        r = np.asarray(self.ufunc(a.astype(self.acc), b.astype(self.acc)))
        if self.signed_zero:
            r = _fix_zero_sign(self.kind, r, np.stack(np.broadcast_arrays(
                a.astype(self.acc), b.astype(self.acc))), 0)
        return r.astype(self.dtype)

    def at(self, out, idx, values):
        """``out[idx[j]] = body(out[idx[j]], values[j])`` in order of j."""
        if self.signed_zero:
            before = out.copy()
            self.ufunc.at(out, idx, values)
            zero = out == 0
            if zero.any():
                want_pos = self.kind == "maximum"
                hit = (before == 0) & (np.signbit(before) != want_pos)
                np.logical_or.at(hit, idx, (values == 0) & (np.signbit(values) != want_pos))
                sign = hit if not want_pos else ~hit
                out[zero] = np.where(sign[zero], -0.0, 0.0).astype(out.dtype)
            return
        if self.dtype in dtypes.SUB_BYTE_INTS or self.dtype == np.bool_:
            self.ufunc.at(out, idx, values)
            return
        self.ufunc.at(out, idx, values.astype(out.dtype, copy=False))

    def _with_init(self, init, r):
        """``body(init, r)`` in the accumulator type (exact kinds)."""
        init = init.astype(self.acc)
        if self.acc == _BOOL_DT and init.ndim == 0 and r.__class__ is np.ndarray and r.ndim:
            # numpy's bool logical loops with a 0-d operand run ~20x slower
            # than with two arrays (0.55 ms for 1e6 elements); on the bytes
            # (0 and 1) the bit operation is the logical one.
            return _BYTE_OP[self.ufunc](r.view(np.uint8), init.view(np.uint8)).view(_BOOL_DT)
        return self.ufunc(init, r)

    # -- reductions -------------------------------------------------------
    def reduce(self, x, axes, init, contiguous_ok=True):
        """``init`` combined with the reduction of ``x`` over ``axes``, as ``dtype``.

        ``contiguous_ok=False`` keeps a strided view (e.g. of overlapping
        windows) in place instead of copying it dims-last.
        """
        init = np.asarray(init)
        if x.ndim == 1 and len(axes) == 1 and 0 < x.shape[0] < _PAR_MIN and x.flags.c_contiguous:
            return self._reduce_vector(x, init)
        axes = tuple(sorted(a % x.ndim for a in axes)) if x.ndim else ()
        if any(x.shape[a] == 0 for a in axes):
            shape = tuple(s for d, s in enumerate(x.shape) if d not in axes)
            return np.full(shape, init, dtype=self.dtype)
        if self.exact:
            xa = x if x.dtype == self.acc else x.astype(self.acc)
            if all(x.shape[a] == 1 for a in axes):
                # Only size-1 axes (the bounds mask of take_along_axis): the
                # reduction of each one element is that element; numpy's
                # reduce would run an inner loop of length 1 per element.
                r = xa.reshape(tuple(n for d, n in enumerate(x.shape) if d not in axes))
            else:
                r = _exact_reduce(self.ufunc, xa, axes)
            r = self._with_init(init, r)
            if self.signed_zero:
                r = _fix_zero_sign(self.kind, np.asarray(r), xa, axes, init)
            return np.asarray(r).astype(self.dtype)
        n = 1
        for a in axes:
            n *= x.shape[a]
        kept = x.size // n if n else 0
        trailing = axes == tuple(range(x.ndim - len(axes), x.ndim))
        if contiguous_ok and len(axes) and x.flags.c_contiguous and \
                (x.dtype in dtypes.ML_FLOATS or self.acc.itemsize > x.dtype.itemsize):
            # Narrow floats into a float64 (complex128) accumulator: reduce
            # the array where it lies, run by run (no transposed copy).
            if x.dtype in dtypes.ML_FLOATS:
                x = x.astype(self.acc)
            r = _reduce_runs(self.ufunc, x, axes, self.acc)
            r = np.asarray(self.ufunc(init.astype(self.acc), r))
            if self.kind == "add" and self.acc.kind == "f":
                r = _negative_zero_sums(r, x, axes, init)
            return r.astype(self.dtype)
        if contiguous_ok and len(axes) and n >= _DIMS_LAST_MIN and \
                kept <= _DIMS_LAST_MAX_KEPT and (not trailing or not x.flags.c_contiguous):
            keep = [d for d in range(x.ndim) if d not in axes]
            shape = tuple(x.shape[d] for d in keep)
            x = np.ascontiguousarray(np.transpose(x, keep + list(axes))).reshape(shape + (n,))
            axes = (x.ndim - 1,)
        # ufunc.reduce(dtype=acc) converts buffer by buffer (no f64 copy of x).
        if x.dtype in dtypes.ML_FLOATS:
            x = x.astype(self.acc)
        if axes == (x.ndim - 1,) and x.flags.c_contiguous and x.shape[-1]:
            r = _row_sums(self.ufunc, x, self.acc)   # the order of a contiguous operand's
        else:
            r = self.ufunc.reduce(x, axis=axes, dtype=self.acc)
        r = np.asarray(self.ufunc(init.astype(self.acc), r))
        if self.kind == "add" and self.acc.kind == "f":
            r = _negative_zero_sums(r, x, axes, init)
        return r.astype(self.dtype)

    def _reduce_vector(self, x, init):
        """:meth:`reduce` of a short contiguous vector to a scalar: the same
        ufunc calls as the general paths take for it (``_reduce_last``: one
        pairwise ``ufunc.reduce`` in the accumulator), without their
        bookkeeping, which costs more than reducing the 64 diagonal entries
        of ``det``."""
        if self.exact:
            xa = x if x.dtype == self.acc else x.astype(self.acc)
            r = self.ufunc(init.astype(self.acc), self.ufunc.reduce(xa, axis=(0,)))
            if self.signed_zero:
                r = _fix_zero_sign(self.kind, np.asarray(r), xa, (0,), init)
            return np.asarray(r).astype(self.dtype)
        if x.dtype in dtypes.ML_FLOATS:
            x = x.astype(self.acc)
        r = np.asarray(self.ufunc(init.astype(self.acc), _row_sums(self.ufunc, x, self.acc)))
        if self.kind == "add" and self.acc.kind == "f":
            r = _negative_zero_sums(r, x, (0,), init)
        return r.astype(self.dtype)

    def vector_kernel(self):
        """``(x, init) -> reduce(x, (0,), init)`` for 1-d operands of 1 to
        _PAR_MIN - 1 elements, picked once per compile (the reductions of
        ``det``'s 64 diagonal entries and pivots cost more in
        :meth:`reduce`'s bookkeeping than in numpy). Integer and bool kinds
        reduce in the element type: it wraps modulo 2**bits as the wider
        accumulator of :meth:`reduce` does once cast back, so the bits are
        the same; the other kinds take :meth:`_reduce_vector`."""
        if self.exact and not self.signed_zero and self.acc == self.dtype \
                and self.dtype in _VECTOR_NATIVE:
            ufunc, acc = self.ufunc, self.acc

            def reduce_vector_native(x, init):
                return np.asarray(ufunc(init, ufunc.reduce(x, dtype=acc)))
            return reduce_vector_native
        if self.signed_zero and self.acc == self.dtype:
            ufunc = self.ufunc

            def reduce_vector_float(x, init):
                # _reduce_vector's ufunc calls; only a zero result needs
                # its sign fixed (there).
                r = ufunc(init, ufunc.reduce(x, axis=(0,)))
                if float(r) == 0.0:
                    return self._reduce_vector(x, np.asarray(init))
                return np.asarray(r)
            return reduce_vector_float

        def reduce_vector(x, init):
            return self._reduce_vector(x, np.asarray(init))
        if self.kind == "add" and self.dtype == F32 and self.acc == F64 and _sums is not None:
            def reduce_vector_f32_sum(x, init):
                # _row_sums' C loop on a vector of at most one block (a
                # single partial sum), init added in float64 and rounded
                # once; a zero sum (whose sign _negative_zero_sums sets)
                # and longer or strided vectors take reduce_vector.
                n = x.shape[0]
                if n > _SUM_BLOCK or x.strides[0] != 4:
                    return reduce_vector(x, init)
                part = np.empty((1, 1), F64)
                _sums.row_sums_f32(x.reshape(1, n), 1, n, part)
                r = float(init) + float(part[0, 0])
                if r == 0.0:
                    return reduce_vector(x, init)
                return np.array(r, F32)
            return reduce_vector_f32_sum
        return reduce_vector

    def shaped_kernel(self, shape, axes):
        """``(x, init) -> reduce(x, axes, init)`` for operands of the static
        ``shape``, picked once per compile, or None. A float32 sum of fewer
        than _PAR_MIN elements over one leading or trailing run of axes
        (the 1-norm of ``expm``'s 64x64 matrix) makes the calls
        :meth:`reduce` makes for it -- ``_reduce_runs``' one ``_row_sums``
        or ``_lead_sums`` (or ``_reduce_leading``), the init added in
        float64, ``_negative_zero_sums``, the rounding -- with the run
        structure decided here: :meth:`reduce`'s bookkeeping costs five
        times the sum of 4096 elements. Any other operand (not
        C-contiguous, another dtype or shape) takes :meth:`reduce`."""
        shape = tuple(shape)
        axes = tuple(sorted(a % len(shape) for a in axes)) if shape else ()
        if self.kind != "add" or self.dtype != F32 or self.acc != F64 or not axes \
                or len(shape) < 2 or any(s is None for s in shape):
            return None
        size = int(np.prod(shape, dtype=np.int64))
        n = int(np.prod([shape[a] for a in axes], dtype=np.int64))
        if n == 0 or size >= _PAR_MIN:
            return None
        kept = size // n
        out_shape = tuple(s for d, s in enumerate(shape) if d not in axes)
        if axes == tuple(range(len(shape) - len(axes), len(shape))):
            flat, sums = (kept, n), _row_sums          # _reduce_last below _PAR_MIN
            if _sums is not None and n <= _SUM_BLOCK:
                sums = _one_block_row_sums
        elif axes == tuple(range(len(axes))):
            flat = (n, kept)
            sums = _lead_sums if not _leading_blocks(n, kept)[0] else _reduce_leading
            if sums is _lead_sums and _sums is not None and kept > 1:
                sums = _c_lead_sums
        else:
            return None
        general = self.reduce
        ufunc = self.ufunc

        def reduce_shaped_f32_sum(x, init):
            if x.__class__ is not np.ndarray or x.dtype is not F32 and x.dtype != F32 \
                    or x.shape != shape or not x.flags.c_contiguous:
                return general(x, axes, init)
            init = np.asarray(init)
            r = np.asarray(ufunc(init.astype(F64), sums(ufunc, x.reshape(flat), F64)
                                 .reshape(out_shape)))
            if np.signbit(init):   # (_negative_zero_sums' first test)
                r = _negative_zero_sums(r, x, axes, init)
            return r.astype(F32)
        return reduce_shaped_f32_sum

    def row_plan(self, shape, axes):
        """A :class:`RowPlan` (trailing ``axes``) or :class:`LeadPlan`
        (leading ones, float sums and products accumulated in a wider type)
        for :meth:`reduce` of C-contiguous arrays of ``shape`` over
        ``axes``; None for other axes or an empty reduced axis."""
        ndim = len(shape)
        axes = tuple(sorted(axes))
        if not axes or 0 in shape:
            return None
        if axes == tuple(range(ndim - len(axes), ndim)):
            return RowPlan(self, tuple(shape), axes)
        if axes == tuple(range(len(axes))) and not self.exact and \
                (self.acc.itemsize > self.dtype.itemsize or self.dtype in dtypes.ML_FLOATS):
            return LeadPlan(self, tuple(shape), axes)
        return None

    def combine(self, values):
        """Reduce a list of equally shaped arrays (collectives' group order)."""
        if len(values) == 1:
            return np.asarray(values[0]).astype(self.dtype, copy=False)
        stacked = np.stack([np.asarray(v) for v in values])
        head = stacked[0]
        return self.reduce(stacked[1:], (0,), head, contiguous_ok=False) \
            if self.exact else self._combine_inexact(stacked)

    def _combine_inexact(self, stacked):
        # A handful of operands (one per process): a sequential sum in the
        # wide accumulator is exact to well below one rounding of the result.
        acc = stacked[0].astype(self.acc)
        for v in stacked[1:]:
            acc = self.ufunc(acc, v.astype(self.acc))
        return np.asarray(acc).astype(self.dtype)

    def accumulate(self, x, axis, init):
        """Inclusive prefix scan along ``axis``: ``init ∘ x[0] ∘ ... ∘ x[i]``."""
        init = np.asarray(init)
        n = x.shape[axis]
        if self.exact:
            xa = x if x.dtype == self.acc else x.astype(self.acc)
            r = self._with_init(init, self.ufunc.accumulate(xa, axis=axis))
            if self.signed_zero:
                r = _fix_zero_sign(self.kind, np.asarray(r), xa, None, init, scan_axis=axis)
            return np.asarray(r).astype(self.dtype)
        if self.kind == "add" and x.dtype == F32 and self.acc == F64 \
                and getattr(_sums, "scan_f32", None) is not None:   # (a build of an older _sums.c lacks it)
            r = _scan_f32(x, axis, init)
            if r is not None:
                return r
        if x.dtype in dtypes.ML_FLOATS:
            x = x.astype(self.acc)
        if self.acc.itemsize > x.dtype.itemsize or n <= 2 * _SCAN_BLOCK or self.kind != "add":
            # Narrow floats: a sequential float64 scan is accurate far below
            # one rounding of the result (n eps64 << eps32).
            r = self.ufunc.accumulate(x, axis=axis, dtype=self.acc)
        else:
            r = _blocked_cumsum(x, axis)
        r = self.ufunc(init.astype(self.acc), r)
        return np.asarray(r).astype(self.dtype)


class RowPlan:
    """:meth:`Reducer.reduce` of C-contiguous arrays of one shape over their
    trailing axes, fed piece by piece: fusion.py computes an elementwise
    chain a chunk at a time and reduces each chunk while it is in cache,
    instead of writing the whole value and reading it back.

    The array is ``rows`` rows of ``n`` trailing elements. Reducer.reduce
    reduces every row on its own, with one ufunc call over the row (numpy's
    reduction of a row does not depend on the rows around it) -- except
    float sums and products of at least _PAR_MIN elements whose rows are
    longer than _PAR_CHUNK (_reduce_last: one call per block of _PAR_CHUNK
    elements, the partial results of a row then reduced pairwise), and the
    exact integer and bool kinds, split the same way (their result does not
    depend on the order). A piece is a range of whole rows, or when
    ``block < n`` one block of one row (:meth:`pieces`); :meth:`start` gives
    the state of one reduction, whose ``add`` makes Reducer.reduce's own
    ufunc call for a piece and whose ``finish`` does what Reducer.reduce does
    after the reduction (the init value, the sign of zero results, the
    rounding to the element type). The result is Reducer.reduce's bit for
    bit (tests/test_fusion.py compares them).
    """

    __slots__ = ("red", "shape", "rows", "n", "block", "out_shape", "axes")

    def __init__(self, red, shape, axes):
        self.red = red
        self.shape = shape
        self.axes = axes
        k = len(shape) - len(axes)
        self.out_shape = shape[:k]
        self.rows = int(np.prod(shape[:k], dtype=np.int64))
        self.n = int(np.prod(shape[k:], dtype=np.int64))
        splits = (not red.exact and (self.red.acc.itemsize > red.dtype.itemsize
                                     or red.dtype in dtypes.ML_FLOATS)) \
            or (red.exact and not red.signed_zero)
        self.block = _PAR_CHUNK if splits and _splits_rows(self.rows, self.n) else self.n

    def pieces(self):
        """Flat ``(lo, hi)`` element bounds of the blocks when rows are
        split (``block < n``); None when any range of whole rows is a piece."""
        if self.block == self.n:
            return None
        return [(i * self.n + a, i * self.n + b) for i in range(self.rows)
                for a, b in _ranges(self.n, self.block)]

    def start(self, init):
        return _RowReduction(self, np.asarray(init))

    def shares(self):
        """Whether Reducer.reduce alone hands this reduction's pieces to the
        helper threads (_reduce_last: float sums and products into a wider
        accumulator from _PAR_MIN elements on, but float32 sums below
        _C_SUM_ALONE run their C loop in the calling thread)."""
        red, size = self.red, self.rows * self.n
        return not red.exact and size >= _PAR_MIN and not _c_sums_alone(red, size) and \
            (red.acc.itemsize > red.dtype.itemsize or red.dtype in dtypes.ML_FLOATS)


class _RowReduction:
    """One reduction of a :class:`RowPlan` (see there). ``add`` may be
    called from several threads at once, for different pieces."""

    __slots__ = ("plan", "init", "partial", "hit", "neg")

    def __init__(self, plan, init):
        self.plan = plan
        self.init = init
        red = plan.red
        nb = -(-plan.n // plan.block)
        self.partial = np.empty((plan.rows, nb), red.acc)
        # Per row: a zero of the sign a float max (min) prefers (computed
        # for rows whose result is zero), all terms -0 (for a -0 init).
        self.hit = np.zeros(plan.rows, bool) if red.signed_zero else None
        self.neg = np.ones((plan.rows, nb), bool) \
            if not red.exact and red.acc.kind == "f" and np.signbit(init) else None

    def add(self, v, lo, hi):
        """Reduce the values ``v`` of flat elements ``lo:hi`` (a piece)."""
        plan = self.plan
        red = plan.red
        n = plan.n
        if plan.block < n:
            width, r0, r1 = hi - lo, lo // n, lo // n + 1
            col = slice((lo % n) // plan.block, (lo % n) // plan.block + 1)
        else:
            width, r0, r1, col = n, lo // n, hi // n, slice(0, 1)
        x = np.ascontiguousarray(v).reshape(r1 - r0, width)
        if red.exact:
            if x.dtype != red.acc:
                x = x.astype(red.acc)
            p = _exact_reduce(red.ufunc, x, (1,))
            if self.hit is not None:
                zero = p == 0
                if zero.any():
                    self.hit[r0:r1] = zero & _zero_sign_hits(red.kind, x, -1)
        else:
            if x.dtype in dtypes.ML_FLOATS:
                x = x.astype(red.acc)
            p = _row_sums(red.ufunc, x, red.acc)
            if self.neg is not None:
                self.neg[r0:r1, col] = _all_negative_zero(x, -1)[:, None]
        self.partial[r0:r1, col] = p[:, None]

    def finish(self):
        return self._finish(slice(None), self.plan.out_shape)

    def rows(self, lo, hi):
        """The results of the whole rows among flat elements ``lo:hi``
        (all their pieces added), flat: the same elementwise steps as
        :meth:`finish`, so the same bits."""
        n = self.plan.n
        return self._finish(slice(lo // n, hi // n), (hi // n - lo // n,))

    def _finish(self, rows, shape):
        red = self.plan.red
        init = self.init
        p = self.partial[rows]
        r = p[:, 0] if p.shape[1] == 1 else red.ufunc.reduce(p, axis=-1)
        r = r.reshape(shape)
        if red.exact:
            r = np.asarray(red._with_init(init, r))
            if red.signed_zero:
                zero = r == 0
                if zero.any():
                    r = _set_zero_signs(red.kind, r, zero, self.hit[rows].reshape(shape), init)
            return r.astype(red.dtype)
        r = np.asarray(red.ufunc(init.astype(red.acc), r))
        if self.neg is not None and (r == 0).any():
            r = _set_negative_zeros(r, np.logical_and.reduce(self.neg[rows], axis=-1)
                                    .reshape(shape))
        return r.astype(red.dtype)


class LeadPlan:
    """:meth:`Reducer.reduce` of C-contiguous float arrays over their leading
    axes (``N`` rows of ``W`` kept elements), fed piece by piece like
    :class:`RowPlan`: a float sum or product accumulated in a wider type
    reduces the array where it lies (_reduce_runs), in _reduce_leading's
    two levels -- ``b`` blocks of ``m`` rows combined position by position
    (on the helper threads in groups of blocks from _PAR_MIN elements on,
    each group one ufunc call), then the ``m`` partial rows, then the rows
    left over. The pieces are those groups (one piece for all blocks below
    _PAR_MIN, the whole array below 256 rows) and the rows left over;
    ``add`` makes _reduce_leading's call for a piece, ``finish`` the rest.
    """

    __slots__ = ("red", "shape", "axes", "out_shape", "N", "W", "b", "m", "groups")

    def __init__(self, red, shape, axes):
        self.red, self.shape, self.axes = red, shape, axes
        self.out_shape = shape[len(axes):]
        self.N = int(np.prod(shape[:len(axes)], dtype=np.int64))
        self.W = int(np.prod(self.out_shape, dtype=np.int64))
        self.b, self.m, groups = _leading_blocks(self.N, self.W)
        if not self.b:
            self.groups = [(0, self.N)]   # rows
        else:
            self.groups = groups if groups is not None else [(0, self.b)]   # blocks

    def pieces(self):
        rows = self.m or 1
        out = [(r0 * rows * self.W, r1 * rows * self.W) for r0, r1 in self.groups]
        if self.b and self.b * self.m < self.N:
            out.append((self.b * self.m * self.W, self.N * self.W))
        return out

    def start(self, init):
        return _LeadReduction(self, np.asarray(init))

    def shares(self):
        """Whether Reducer.reduce alone hands this reduction's groups of
        blocks to the helper threads (_reduce_leading; not float32 sums
        below _C_SUM_ALONE: their C loop runs in the calling thread)."""
        return len(self.groups) > 1 and not _c_sums_alone(self.red, self.N * self.W)


class _LeadReduction:
    """One reduction of a :class:`LeadPlan` (see there)."""

    __slots__ = ("plan", "init", "groups", "tail", "neg")

    def __init__(self, plan, init):
        self.plan, self.init = plan, init
        red = plan.red
        self.groups = np.empty((len(plan.groups), plan.W * (plan.m or 1)), red.acc)
        self.tail = None
        n_pieces = len(plan.groups) + 1
        self.neg = np.ones((n_pieces, plan.W), bool) \
            if red.acc.kind == "f" and np.signbit(init) else None

    def add(self, v, lo, hi):
        plan = self.plan
        red = plan.red
        x = np.ascontiguousarray(v).reshape(-1)
        if x.dtype in dtypes.ML_FLOATS:
            x = x.astype(red.acc)
        width = plan.W * (plan.m or 1)
        head_end = plan.b * plan.m * plan.W if plan.b else plan.N * plan.W
        if lo < head_end:
            k = next(i for i, (r0, _) in enumerate(plan.groups) if r0 * width == lo)
            self.groups[k] = _lead_sums(red.ufunc, x.reshape(-1, width), red.acc)
        else:
            k = len(plan.groups)
            self.tail = _lead_sums(red.ufunc, x.reshape(-1, plan.W), red.acc)
        if self.neg is not None:
            self.neg[k] = _all_negative_zero(x.reshape(-1, plan.W), 0)

    def finish(self):
        plan = self.plan
        red = plan.red
        g = self.groups
        if not plan.b:
            r = g[0]
        else:
            partial = g[0] if len(g) == 1 else red.ufunc.reduce(g, axis=0)
            r = red.ufunc.reduce(partial.reshape((plan.m, plan.W)), axis=0)
            if self.tail is not None:
                r = red.ufunc(r, self.tail)
        r = np.asarray(red.ufunc(self.init.astype(red.acc), r.reshape(plan.out_shape)))
        if self.neg is not None and (r == 0).any():
            r = _set_negative_zeros(r, np.logical_and.reduce(self.neg, axis=0)
                                    .reshape(plan.out_shape))
        return r.astype(red.dtype)


def _reduce_runs(ufunc, x, axes, acc):
    """``ufunc`` reduction of C-contiguous ``x`` over ``axes`` in dtype ``acc``,
    in place: adjacent axes merge into runs, reduced runs go innermost first.

    A trailing run is contiguous: numpy's pairwise reduction (error ~log2(n)
    eps of the accumulator; float32 sums: :func:`_row_sums`, error ~(128 +
    5 + log2(n / 4096)) eps). A leading run of ``n`` rows is summed in two
    levels of about sqrt(n) terms each (``_reduce_leading``; error ~2 sqrt(n)
    eps), a run in the middle sequentially (error ~n eps). With a float64
    accumulator for float32 and narrower data each is far below one rounding
    of the result (n eps64 < eps32 up to n = 2**29), and no transposed copy
    of ``x`` is made: batch-norm statistics of an NHWC (64, 32, 32, 16) f32
    array take 0.4 ms instead of 2.8 ms.
    """
    out_shape = tuple(size for d, size in enumerate(x.shape) if d not in axes)
    runs = []   # [size, reduced]
    for d, size in enumerate(x.shape):
        red = d in axes
        if runs and runs[-1][1] == red:
            runs[-1][0] *= size
        else:
            runs.append([size, red])
    x = x.reshape([size for size, _ in runs])
    while any(red for _, red in runs):
        if runs[-1][1]:
            x = _reduce_last(ufunc, x, acc)
            runs.pop()
        elif runs[0][1]:
            x = _reduce_leading(ufunc, x, acc)
            runs.pop(0)
        else:
            i = next(k for k, (_, red) in enumerate(runs) if red)
            x = _middle_sums(ufunc, x, i, acc)
            runs.pop(i)
    return np.reshape(x, out_shape)


def _ranges(n, width):
    return [(lo, min(lo + width, n)) for lo in range(0, n, width)]


def _splits_rows(rows, n):
    """Whether _reduce_last (and RowPlan) reduce rows of ``n`` in blocks of
    _PAR_CHUNK rather than whole (from _PAR_MIN elements on)."""
    return rows * n >= _PAR_MIN and n > _PAR_CHUNK


def _leading_blocks(n, width):
    """``(b, m, groups)``: _reduce_leading's (and LeadPlan's) ``b`` blocks
    of ``m`` rows of ``width`` elements, and the ranges of blocks reduced
    apart when they are at least _PAR_MIN elements (else None); ``b = m =
    0`` below 4 * _SCAN_BLOCK // 16 rows (one plain reduce)."""
    if n < 4 * _SCAN_BLOCK // 16:
        return 0, 0, None
    b = max(2, int(np.sqrt(n)))
    m = n // b
    if b * m * width >= _PAR_MIN:
        return b, m, _ranges(b, max(1, _PAR_CHUNK // (m * width)))
    return b, m, None


def _row_sums(ufunc, x, acc):
    """``ufunc.reduce(x, axis=-1, dtype=acc)`` (n > 0); float32 sums in
    float64 in _sums.c's order (blocks of _SUM_BLOCK summed in _SUM_LANES
    lanes, the blocks' sums then pairwise), with the C loop where it is
    built and the rows are contiguous (a fifth of numpy's casting
    reduction's time in cache), the same bits from numpy otherwise
    (:func:`_row_block_sums`)."""
    if ufunc is not np.add or x.dtype != F32 or acc != F64:
        return ufunc.reduce(x, axis=-1, dtype=acc)
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    rows = x2.shape[0]
    nb = -(-n // _SUM_BLOCK)
    if _sums is not None and x2.flags.c_contiguous:
        part = np.empty((rows, nb), F64)
        _sums.row_sums_f32(x2, rows, n, part)
    elif _sums is not None and x2.strides[-1] == x2.itemsize:
        # Contiguous rows apart from each other (a block of several long
        # rows, _reduce_last): one call per row, no copy.
        part = np.empty((rows, nb), F64)
        for r in range(rows):
            _sums.row_sums_f32(x2[r], 1, n, part[r])
    else:
        part = _row_block_sums(x2)
    r = part[:, 0] if nb == 1 else np.add.reduce(part, axis=-1)
    return r.reshape(x.shape[:-1])


def _one_block_row_sums(ufunc, x2, acc):
    """_row_sums of C-contiguous float32 ``x2`` (rows of at most
    _SUM_BLOCK elements) into float64: its one C call (_row_sums itself
    when the module is not there, as tests make it)."""
    if _sums is None:
        return _row_sums(ufunc, x2, acc)
    rows, n = x2.shape
    part = np.empty((rows, 1), F64)
    _sums.row_sums_f32(x2, rows, n, part)
    return part[:, 0]


def _c_lead_sums(ufunc, x2, acc):
    """_lead_sums of C-contiguous float32 ``x2`` of more than one column
    into float64: its one C call (_lead_sums itself when the module is
    not there)."""
    if _sums is None:
        return _lead_sums(ufunc, x2, acc)
    n, kept = x2.shape
    out = np.empty(kept, F64)
    _sums.lead_sums_f32(x2, n, kept, out)
    return out


def _row_block_sums(x2):
    """_sums.row_sums_f32 in numpy: the float64 sum of every block of
    _SUM_BLOCK elements of each row of float32 ``x2``, ``(rows, nb)``.
    Lane ``l`` of a block adds its elements ``l, l + _SUM_LANES, ...`` in
    order from +0 (numpy reduces a middle axis sequentially, one output
    element per lane), the last block padded with +0 (adding +0 leaves a
    lane that starts at +0 unchanged); then the lanes as a tree."""
    rows, n = x2.shape
    full, tail = divmod(n, _SUM_BLOCK)
    k = _SUM_BLOCK // _SUM_LANES
    parts = []
    if full:
        parts.append(np.add.reduce(x2[:, :full * _SUM_BLOCK].reshape(rows, full, k, _SUM_LANES),
                                   axis=2, dtype=F64))
    if tail:
        padded = np.zeros((rows, -(-tail // _SUM_LANES) * _SUM_LANES), F64)
        padded[:, :tail] = x2[:, full * _SUM_BLOCK:]
        parts.append(np.add.reduce(padded.reshape(rows, 1, -1, _SUM_LANES), axis=2))
    lanes = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
    w = _SUM_LANES // 2
    while w:
        lanes = lanes[..., :w] + lanes[..., w:2 * w]
        w //= 2
    return lanes[..., 0]


def _lead_sums(ufunc, x, acc):
    """``ufunc.reduce(x, axis=0, dtype=acc)`` of C-contiguous ``x``: numpy
    adds the rows in order, position by position, from +0; for float32 into
    float64 sums the C loop makes the same additions (a third of the time).
    One position per row (``x.size == len(x)``) numpy sums pairwise."""
    if ufunc is not np.add or x.dtype != F32 or acc != F64 or _sums is None \
            or not x.flags.c_contiguous or x.ndim == 0 or x.size == x.shape[0]:
        return ufunc.reduce(x, axis=0, dtype=acc)
    out = np.empty(x.shape[1:], F64)
    _sums.lead_sums_f32(x, x.shape[0], out.size, out)
    return out


# A middle run goes to the C loop one leading index at a time when each
# call has at least this many kept positions, and there are at most
# _MIDDLE_MAX_CALLS leading indices.
_MIDDLE_MIN_INNER = 128
_MIDDLE_MAX_CALLS = 1 << 16


def _middle_sums(ufunc, x, i, acc):
    """``ufunc.reduce(x, axis=i, dtype=acc)`` of C-contiguous ``x`` over a
    middle axis (``x.mean(axis=1)`` of (batch, sequence, features)): numpy
    adds the reduced positions in order, position by position, from +0; for
    float32 into float64 sums _lead_sums makes the same additions for each
    leading index."""
    lead = int(np.prod(x.shape[:i], dtype=np.int64))
    inner = int(np.prod(x.shape[i + 1:], dtype=np.int64))
    if ufunc is not np.add or x.dtype != F32 or acc != F64 or _sums is None \
            or not x.flags.c_contiguous or inner < _MIDDLE_MIN_INNER or lead > _MIDDLE_MAX_CALLS:
        return ufunc.reduce(x, axis=i, dtype=acc)
    x3 = x.reshape(lead, x.shape[i], inner)
    out = np.empty((lead, inner), F64)
    for a in range(lead):
        _sums.lead_sums_f32(x3[a], x.shape[i], inner, out[a])
    return out.reshape(x.shape[:i] + x.shape[i + 1:])


def _reduce_last(ufunc, x, acc):
    """``ufunc.reduce(x, axis=-1, dtype=acc)`` of C-contiguous ``x``; from
    _PAR_MIN elements on in chunks of about _PAR_CHUNK (whole rows, or
    blocks of a long row whose partial results are then reduced pairwise)
    on the helper threads. The chunks do not depend on the thread count."""
    n = x.shape[-1]
    if n == 0:
        return ufunc.reduce(x, axis=-1, dtype=acc)
    if x.size < _PAR_MIN:
        return _row_sums(ufunc, x, acc)
    rows = x.size // n
    x2 = x.reshape(rows, n)
    alone = _c_alone(ufunc, x.dtype, acc, x.size)
    if alone and _PAR_CHUNK % _SUM_BLOCK == 0:
        return _row_sums_alone(x2, rows, n).reshape(x.shape[:-1])
    threads = 1 if alone else None   # (tests shrink _PAR_CHUNK below a block)
    if not _splits_rows(rows, n):
        out = np.empty(rows, acc)

        def run(lo, hi):
            out[lo:hi] = _row_sums(ufunc, x2[lo:hi], acc)
        run_chunks(run, _ranges(rows, max(1, _PAR_CHUNK // n)), threads)
    else:
        blocks = _ranges(n, _PAR_CHUNK)
        partial = np.empty((rows, len(blocks)), acc)

        def run(lo, hi):
            for j in range(lo, hi):
                a, b = blocks[j]
                partial[:, j] = _row_sums(ufunc, x2[:, a:b], acc)
        run_chunks(run, [(j, j + 1) for j in range(len(blocks))], threads)
        out = ufunc.reduce(partial, axis=-1)
    return out.reshape(x.shape[:-1])


def _c_sums_alone(red, size):
    """Does ``red`` reduce ``size`` elements with the C loop in the calling
    thread (_row_sums_alone, _reduce_leading), not on the helpers?"""
    return _c_alone(red.ufunc, red.dtype, red.acc, size)


def _c_alone(ufunc, dtype, acc, size):
    """A float32 sum in float64 of fewer than _C_SUM_ALONE elements, the
    C module built."""
    return ufunc is np.add and dtype == F32 and acc == F64 and _sums is not None \
        and size < _C_SUM_ALONE


def _row_sums_alone(x2, rows, n):
    """_reduce_last's float32 sums in float64 of C-contiguous ``x2`` with one
    C call in this thread: the block sums of every row (_row_sums' loop),
    then the same pairwise reductions _reduce_last makes of them -- per
    chunk of _PAR_CHUNK elements of a split row (a multiple of _SUM_BLOCK:
    a chunk's blocks are the row's), then per row -- so the same bits.
    The loop runs at memory speed (0.13 ns per element out of
    cache): handing 10-microsecond chunks to the helper threads costs more
    than the second core saves (1e6 elements: 0.30 ms shared, 0.25 ms
    alone, 2 cores), and far more while another runtime's threads spin."""
    nb = -(-n // _SUM_BLOCK)
    part = np.empty((rows, nb), F64)
    _sums.row_sums_f32(x2, rows, n, part)
    if not _splits_rows(rows, n):
        return part[:, 0] if nb == 1 else np.add.reduce(part, axis=-1)
    per = _PAR_CHUNK // _SUM_BLOCK
    chunks = -(-n // _PAR_CHUNK)
    partial = np.empty((rows, chunks), F64)
    for j in range(chunks):
        p = part[:, j * per:(j + 1) * per]
        partial[:, j] = p[:, 0] if p.shape[1] == 1 else np.add.reduce(p, axis=-1)
    return np.add.reduce(partial, axis=-1)


def _reduce_leading(ufunc, x, acc):
    """``ufunc.reduce(x, axis=0, dtype=acc)`` for C-contiguous ``x`` in two
    levels: ``b`` blocks of ``m`` rows are combined position by position
    (one streaming pass over ``x``, ``b`` terms each), then the ``m`` partial
    rows (and any rows left over). Error ~(b + m) eps instead of n eps."""
    n = x.shape[0]
    b, m, bounds = _leading_blocks(n, x.size // n)
    if not b:
        return _lead_sums(ufunc, x, acc)
    head = x[:b * m].reshape((b, m * (x.size // n)))
    if bounds is not None:
        # Groups of rows on the helper threads (float32 sums below
        # _C_SUM_ALONE: one after another in this thread), then their partial
        # rows in order: a third level of the same kind (the groups do not
        # depend on the thread count).
        groups = np.empty((len(bounds), head.shape[1]), acc)

        def run(lo, hi):
            for k in range(lo, hi):
                r0, r1 = bounds[k]
                groups[k] = _lead_sums(ufunc, head[r0:r1], acc)
        alone = _c_alone(ufunc, x.dtype, acc, x.size)   # the C loop, no hand-over
        run_chunks(run, [(k, k + 1) for k in range(len(bounds))], 1 if alone else None)
        partial = ufunc.reduce(groups, axis=0)
    else:
        partial = _lead_sums(ufunc, head, acc)
    partial = partial.reshape((m,) + x.shape[1:])
    r = ufunc.reduce(partial, axis=0)
    if b * m < n:
        r = ufunc(r, _lead_sums(ufunc, x[b * m:], acc))
    return r


def _scan_f32(x, axis, init):
    """Reducer.accumulate of a float32 sum with the C loop (_sums.scan_f32):
    numpy's ``add.accumulate(x, axis, dtype=float64)``, init added and the
    result rounded to float32 -- the same additions in the same order, so
    the same bits (tests/test_sums.py), without numpy's buffered casting
    along the scanned axis. None when a sum became NaN: the caller's numpy
    path then gives numpy's NaN (its sign and payload depend on the order
    of each addition's operands in the machine code)."""
    x = np.ascontiguousarray(x)   # a reversed scan's flipped view: the same values
    shape = x.shape
    lead = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    out = np.empty(shape, F32)
    if _sums.scan_f32(x, lead, shape[axis], inner, float(init.astype(F64)), out):
        return None
    return out


def _exact_reduce(ufunc, x, axes):
    """``ufunc.reduce(x, axis=axes)`` for the exact kinds; float32 max and
    min over the trailing axes of a C-contiguous array with the C loops
    (_sums.row_max_f32 / row_min_f32, about 0.7x numpy's time): the same
    values, rows holding a NaN reduced again by numpy (their NaN's bits are
    numpy's). The sign of a zero result is left to the callers, which set
    it as the spec wants (_fix_zero_sign, RowPlan's ``hit``)."""
    # (getattr: a build of an older _sums.c lacks the loops; numpy then)
    loop = getattr(_sums, "row_max_f32", None) if ufunc is np.maximum \
        else getattr(_sums, "row_min_f32", None) if ufunc is np.minimum else None
    if loop is None or x.dtype != F32 or not x.flags.c_contiguous or x.size == 0 \
            or axes != tuple(range(x.ndim - len(axes), x.ndim)):
        return ufunc.reduce(x, axis=axes)
    n = int(np.prod(x.shape[x.ndim - len(axes):], dtype=np.int64))
    rows = x.size // n
    x2 = x.reshape(rows, n)
    out = np.empty(rows, F32)
    nan = np.empty(rows, np.uint8)
    if loop(x2, rows, n, out, nan):
        bad = nan.view(bool)
        out[bad] = ufunc.reduce(x2[bad], axis=-1)
    return out.reshape(x.shape[:x.ndim - len(axes)])



def _blocked_cumsum(x, axis):
    """float64/complex128 prefix sums in two levels of blocks: every result is
    (sum of whole earlier blocks) + (prefix inside its block), an error of
    ~(n/B + B) eps instead of the sequential scan's n eps."""
    x = np.moveaxis(x, axis, -1)
    n = x.shape[-1]
    b = _SCAN_BLOCK
    m = -(-n // b)
    pad = m * b - n
    xp = np.concatenate([x, np.zeros(x.shape[:-1] + (pad,), x.dtype)], axis=-1) if pad else x
    xp = xp.reshape(x.shape[:-1] + (m, b))
    inner = np.add.accumulate(xp, axis=-1)
    totals = np.add.reduce(xp, axis=-1)  # pairwise
    offsets = np.add.accumulate(totals, axis=-1)
    out = inner
    out[..., 1:, :] += offsets[..., :-1, None]
    out = out.reshape(x.shape[:-1] + (m * b,))[..., :n]
    return np.moveaxis(out, -1, axis)


def _negative_zero_sums(r, x, axes, init):
    """IEEE sums are -0 only when every term is -0; numpy's reduce starts
    its buffered (dtype=) loops from +0, so set those results to -0."""
    if not np.signbit(init) or not (r == 0).any():
        return r
    return _set_negative_zeros(r, _all_negative_zero(x, axes))


def _all_negative_zero(x, axes):
    return np.logical_and.reduce((x == 0) & np.signbit(x), axis=axes)


def _set_negative_zeros(r, neg):
    return np.where(neg, -np.zeros((), r.dtype), r)


def _fix_zero_sign(kind, r, x, axes, init=None, scan_axis=None):
    """Give zero results of a float max (min) the sign the spec gives:
    +0 (-0) if any of the combined values is +0 (-0)."""
    r = np.asarray(r)
    zero = r == 0
    if not zero.any():
        return r
    want_pos = kind == "maximum"
    hit = (x == 0) & (np.signbit(x) != want_pos)
    if scan_axis is not None:
        hit = np.logical_or.accumulate(hit, axis=scan_axis)
    else:
        hit = np.logical_or.reduce(hit, axis=axes)
    return _set_zero_signs(kind, r, zero, hit, init)


def _zero_sign_hits(kind, x, axes):
    """Per result of a float max (min) over ``axes``: does a zero of the
    sign the kind prefers (+0 for max, -0 for min) occur among ``x``?"""
    return np.logical_or.reduce((x == 0) & (np.signbit(x) != (kind == "maximum")), axis=axes)


def _set_zero_signs(kind, r, zero, hit, init):
    """_fix_zero_sign given ``zero = r == 0`` and the hits of the values."""
    want_pos = kind == "maximum"
    if init is not None:
        init = np.asarray(init)
        hit = hit | ((init == 0) & (np.signbit(init) != want_pos))
    pos = hit if want_pos else ~hit
    r = np.array(r, copy=True)
    zero_vals = np.where(pos, np.zeros((), r.dtype), -np.zeros((), r.dtype))
    r[zero] = np.broadcast_to(zero_vals, r.shape)[zero]
    return r


_CACHE = {}


def reducer(kind, dtype):
    """The :class:`Reducer` for ``kind`` on element type ``dtype``, or None
    when the body must be evaluated as written (see the module docstring)."""
    dtype = np.dtype(dtype)
    key = (kind, dtype)
    if key in _CACHE:
        return _CACHE[key]
    r = _make(kind, dtype)
    _CACHE[key] = r
    return r


def _make(kind, dtype):
    if kind not in _ARITH:
        return None
    if dtypes.is_bool(dtype):
        return Reducer(kind, dtype, dtype, _BOOL[kind], True)
    if dtypes.is_integer(dtype):
        acc = dtype
        if dtype in dtypes.SUB_BYTE_INTS:
            acc = np.dtype(np.uint64 if dtypes.is_unsigned(dtype) else np.int64)
        return Reducer(kind, dtype, acc, _ARITH[kind], True)
    if kind in ("and", "or", "xor"):
        return None
    if dtypes.is_complex(dtype):
        if kind not in ("add", "multiply"):
            return None
        return Reducer(kind, dtype, C128, _ARITH[kind], False)
    if dtypes.is_float(dtype):
        if kind in ("maximum", "minimum"):
            # Exact in any wider float; ml_dtypes floats compare through f32.
            acc = dtype if dtype.kind == "f" else np.dtype(np.float32)
            return Reducer(kind, dtype, acc, _ARITH[kind], True, signed_zero=True)
        return Reducer(kind, dtype, F64, _ARITH[kind], False)
    return None


def for_body(block, dtype):
    """The :class:`Reducer` of a region body on ``dtype``, or None."""
    kind = reducer_kind(block)
    return None if kind is None else reducer(kind, dtype)
