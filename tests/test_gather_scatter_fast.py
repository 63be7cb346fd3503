"""The fast schedules of gather and scatter against the plain ones they replaced.

``ops/gather_scatter.py`` runs common gathers as one ``np.take`` and scatters
through a linear index with a single bounds test. These kernels are exact (a
copy, or the spec's sequential update order), so the fast schedules must give
the same bits as the plain advanced-indexing kernels that came before them
(frozen below, ``_reference_gather`` / ``_reference_scatter_targets``) on random
dimension numbers, shapes (empty ones too), index types, out-of-bounds and
duplicate indices and every element type family.
"""

import ml_dtypes
import numpy as np
import pytest

import stablehlo_interpreter as shi
from stablehlo_interpreter.ops import gather_scatter as gs

# --------------------------------------------------------------------------
# The plain kernels as they were (gather_scatter.py before the fast paths).


def _start_index_vectors(indices, index_vector_dim):
    """Start indices with the index vector moved last: shape ``B + (K,)``."""
    if index_vector_dim >= indices.ndim:
        return indices[..., None]
    return np.moveaxis(indices, index_vector_dim, -1)


def _reference_gather(dn, operand, indices, slice_sizes):
    rank = operand.ndim
    ivd = dn["index_vector_dim"]
    offset_dims = tuple(dn["offset_dims"])
    collapsed = set(dn["collapsed_slice_dims"])
    obatch = tuple(dn["operand_batching_dims"])
    ibatch = tuple(dn["start_indices_batching_dims"])
    sim = tuple(dn["start_index_map"])
    batch_shape = tuple(n for i, n in enumerate(indices.shape) if i != ivd)
    kept = [d for d in range(rank) if d not in collapsed and d not in obatch]
    out_rank = len(batch_shape) + len(offset_dims)
    batch_dims = [d for d in range(out_rank) if d not in offset_dims]
    result_shape = [0] * out_rank
    for d, n in zip(batch_dims, batch_shape):
        result_shape[d] = n
    for d, od in zip(kept, offset_dims):
        result_shape[od] = slice_sizes[d]
    result_shape = tuple(result_shape)
    if int(np.prod(result_shape, dtype=np.int64)) == 0:
        return np.empty(result_shape, dtype=operand.dtype)
    upper = np.array([operand.shape[d] - slice_sizes[d] for d in sim], dtype=np.int64)
    static = [np.zeros((1,) * out_rank, dtype=np.int64) for _ in range(rank)]
    for d, od in zip(kept, offset_dims):
        shape = [1] * out_rank
        shape[od] = slice_sizes[d]
        static[d] = np.arange(slice_sizes[d], dtype=np.int64).reshape(shape)
    for od_, is_ in zip(obatch, ibatch):
        ax = batch_dims[gs._batch_position(is_, ivd)]
        shape = [1] * out_rank
        shape[ax] = result_shape[ax]
        static[od_] = np.arange(result_shape[ax], dtype=np.int64).reshape(shape)
    start_shape = gs._place(batch_shape, out_rank, batch_dims)
    starts = _start_index_vectors(gs.as_index(indices), ivd)
    starts = np.clip(starts, 0, np.maximum(upper, 0))
    idx = list(static)
    for k, d in enumerate(sim):
        idx[d] = idx[d] + starts[..., k].reshape(start_shape)
    return np.asarray(operand[tuple(idx)])


# --------------------------------------------------------------------------
# Random cases

INDEX_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
               np.uint64, ml_dtypes.int4, ml_dtypes.uint4]
ELEMENT_TYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16,
                 ml_dtypes.float8_e4m3fn, np.int8, np.int32, np.uint64, ml_dtypes.int4,
                 np.bool_, np.complex64, np.complex128]


def random_values(rng, shape, dt):
    dt = np.dtype(dt)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    if dt == np.dtype(ml_dtypes.int4):
        return rng.integers(-8, 7, shape, endpoint=True).astype(dt)
    if dt.kind in "iu":
        return np.asarray(rng.integers(np.iinfo(dt).min, np.iinfo(dt).max, shape, dtype=dt,
                                       endpoint=True))
    x = rng.standard_normal(shape) * 4
    if dt.itemsize >= 2:
        # Special values: NaN payloads and signed zeros must be copied bit for bit.
        flat = x.reshape(-1)
        flat[::7] = np.nan
        flat[1::11] = -0.0
    return x.astype(dt)


def random_indices(rng, shape, dt, bound):
    """Indices mostly in [0, bound), some negative and some far out of range."""
    dt = np.dtype(dt)
    if dt == np.dtype(ml_dtypes.int4):
        lo, hi = -8, 7
    elif dt == np.dtype(ml_dtypes.uint4):
        lo, hi = 0, 15
    else:
        lo, hi = int(np.iinfo(dt).min), int(np.iinfo(dt).max)
    v = np.asarray(np.clip(rng.integers(-2, bound + 2, shape), lo, hi).astype(dt))
    wild = rng.random(shape) < 0.1
    extremes = np.array([lo, hi, lo + 1, hi - 1], dtype=object).astype(dt)
    v[wild] = rng.choice(extremes, int(wild.sum()))
    return v


def random_gather(rng):
    rank = int(rng.integers(1, 5))
    shape = [int(rng.integers(0 if rng.random() < 0.05 else 1, 6)) for _ in range(rank)]
    dims = list(rng.permutation(rank))
    nbatch = int(rng.integers(0, min(2, rank - 1) + 1)) if rng.random() < 0.4 else 0
    obatch = sorted(dims[:nbatch])
    rest = dims[nbatch:]
    k = int(rng.integers(1, len(rest) + 1)) if rest else 0
    sim = [int(d) for d in rng.permutation(rest)[:k]] if k else []
    if not sim:
        return None
    sizes = [0] * rank
    collapsed = []
    for d in range(rank):
        if d in obatch:
            sizes[d] = 1 if shape[d] else 0
        elif shape[d] and rng.random() < 0.5:
            sizes[d] = 1
            if rng.random() < 0.7:
                collapsed.append(d)
        else:
            sizes[d] = int(rng.integers(0, shape[d] + 1)) if rng.random() < 0.4 else shape[d]
    if any(sizes[d] == 0 and shape[d] == 0 and d in obatch for d in range(rank)):
        return None
    # Index tensor: batch dims (the batching ones sized like the operand's), K at ivd.
    nb = int(rng.integers(nbatch, nbatch + 3))
    batch_shape = [int(rng.integers(0 if rng.random() < 0.05 else 1, 5)) for _ in range(nb)]
    bpos = sorted(int(p) for p in rng.permutation(nb)[:nbatch])
    order = list(rng.permutation(nbatch))
    ib_batch = [0] * nbatch
    for j, p in enumerate(bpos):
        od = obatch[order[j]]
        batch_shape[p] = shape[od]
    implicit = len(sim) == 1 and rng.random() < 0.5
    ivd = nb if implicit else int(rng.integers(0, nb + 1))
    ishape = list(batch_shape)
    if not implicit:
        ishape.insert(ivd, len(sim))
    for j, p in enumerate(bpos):
        ib_batch[order[j]] = p if p < ivd or implicit else p + 1
    kept = [d for d in range(rank) if d not in collapsed and d not in obatch]
    out_rank = nb + len(kept)
    offset_dims = sorted(int(p) for p in rng.permutation(out_rank)[:len(kept)])
    dn = {"offset_dims": offset_dims, "collapsed_slice_dims": sorted(collapsed),
          "operand_batching_dims": obatch, "start_indices_batching_dims": ib_batch,
          "start_index_map": sim, "index_vector_dim": ivd}
    return dn, tuple(shape), tuple(ishape), tuple(sizes)


def same_bits(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    if a.dtype == np.bool_:
        return np.array_equal(a, b)
    return np.array_equal(np.ascontiguousarray(a).view(np.uint8),
                          np.ascontiguousarray(b).view(np.uint8))


@pytest.mark.parametrize("seed", range(8))
def test_gather_fast_schedules_match_plain_kernel(seed):
    rng = np.random.default_rng(seed)
    modes = set()
    done = 0
    while done < 150:
        case = random_gather(rng)
        if case is None:
            continue
        dn, oshape, ishape, sizes = case
        et = ELEMENT_TYPES[int(rng.integers(len(ELEMENT_TYPES)))]
        it = INDEX_TYPES[int(rng.integers(len(INDEX_TYPES)))]
        bound = max(oshape[d] for d in dn["start_index_map"]) + 1
        operand = random_values(rng, oshape, et)
        if rng.random() < 0.2 and operand.ndim >= 2:
            operand = np.asfortranarray(operand)          # non-contiguous operands
        indices = random_indices(rng, ishape, it, bound)
        before = indices.copy()
        plan = gs._GatherPlan(dn, oshape, ishape, sizes)
        got = plan(operand, indices)
        # The linear index is summed in place: never into the indices.
        assert same_bits(indices, before), (dn, oshape, ishape, sizes, it)
        want = _reference_gather(dn, operand, indices, sizes)
        assert same_bits(got, want), (dn, oshape, ishape, sizes, et, it)
        assert isinstance(got, np.ndarray)
        modes.add("empty" if plan.empty else plan.mode)
        done += 1
    assert modes == {"empty", "take", "linear"}


@pytest.mark.parametrize("seed", range(4))
def test_gather_in_blocks_of_rows_matches_plain_kernel(seed, monkeypatch):
    # Large linear gathers run in blocks of result rows (_GATHER_BLOCK
    # elements), large takes of rows in blocks of indices (_TAKE_BLOCK);
    # tiny blocks take those paths on the random small cases: starts,
    # batching aranges and window offsets sliced per block.
    monkeypatch.setattr(gs, "_GATHER_BLOCK", 3)
    monkeypatch.setattr(gs, "_TAKE_BLOCK", 2)
    monkeypatch.setattr(gs, "_TAKE_MIN", 4)
    rng = np.random.default_rng(100 + seed)
    blocked = taken = done = 0
    while done < 150:
        case = random_gather(rng)
        if case is None:
            continue
        dn, oshape, ishape, sizes = case
        et = ELEMENT_TYPES[int(rng.integers(len(ELEMENT_TYPES)))]
        it = INDEX_TYPES[int(rng.integers(len(INDEX_TYPES)))]
        bound = max(oshape[d] for d in dn["start_index_map"]) + 1
        operand = random_values(rng, oshape, et)
        indices = random_indices(rng, ishape, it, bound)
        before = indices.copy()
        plan = gs._GatherPlan(dn, oshape, ishape, sizes)
        got = plan(operand, indices)
        assert same_bits(indices, before), (dn, oshape, ishape, sizes, it)
        want = _reference_gather(dn, operand, indices, sizes)
        assert same_bits(got, want), (dn, oshape, ishape, sizes, et, it)
        if plan.mode == "linear" and not plan.empty and got.ndim and got.shape[0] > 1 \
                and got.size >= 6:
            blocked += 1
        if plan.mode == "take" and plan.axis == 0 and got.size >= 4:
            taken += 1
        done += 1
    assert blocked > 10 and taken >= 3


@pytest.mark.parametrize("it", [np.int32, np.uint32, np.uint8, np.int64, np.uint64])
def test_take_of_rows_in_blocks(it):
    # x[idx] and embedding lookups (one indexed leading axis, full rows):
    # large index arrays of a type other than intp are taken in blocks.
    rng = np.random.default_rng(3)
    n = 2 * gs._TAKE_BLOCK + 123
    for oshape in ((250,), (40, 3)):
        dn = {"offset_dims": list(range(1, len(oshape))), "collapsed_slice_dims": [0],
              "operand_batching_dims": [], "start_indices_batching_dims": [],
              "start_index_map": [0], "index_vector_dim": 1}
        sizes = (1,) + oshape[1:]
        operand = random_values(rng, oshape, np.float32)
        indices = random_indices(rng, (n, 1), it, oshape[0])
        plan = gs._GatherPlan(dn, oshape, (n, 1), sizes)
        assert plan.mode == "take"
        assert same_bits(plan(operand, indices), _reference_gather(dn, operand, indices, sizes))


@pytest.mark.parametrize("it", [np.int32, np.uint32, np.int8, np.uint16, np.int64, np.uint64])
def test_take_of_rows_shared_between_threads(it, monkeypatch):
    # Blocks of a large take of rows go to the pool's threads when a core
    # is free: odd block and index counts, the last block short, indices
    # out of range on both sides (clamped), the same bits as one thread.
    from stablehlo_interpreter import pool
    monkeypatch.setattr(gs, "_TAKE_BLOCK", 7)
    monkeypatch.setattr(gs, "_TAKE_MIN", 7)
    monkeypatch.setattr(gs, "_TAKE_SHARED_MIN", 8)
    monkeypatch.setattr(gs, "_TAKE_SHARED_BLOCK", 14)
    monkeypatch.setattr(pool, "busy", lambda threads: False)
    shared = []
    real = pool._run_shared
    monkeypatch.setattr(pool, "_run_shared",
                        lambda run, bounds, threads: (shared.append(len(bounds)),
                                                      real(run, bounds, threads)))
    rng = np.random.default_rng(11)
    for oshape in ((13,), (9, 3)):
        dn = {"offset_dims": list(range(1, len(oshape))), "collapsed_slice_dims": [0],
              "operand_batching_dims": [], "start_indices_batching_dims": [],
              "start_index_map": [0], "index_vector_dim": 1}
        sizes = (1,) + oshape[1:]
        operand = random_values(rng, oshape, np.float32)
        for n in (0, 6, 7, 8, 15, 7 * 5 + 3):
            indices = random_indices(rng, (n, 1), it, oshape[0] + 3)
            if n and np.dtype(it).kind == "i":
                indices[0, 0] = -2   # below range: clamped to 0
            indices.reshape(-1)[-1:] = oshape[0] + 2   # above range: the last row
            plan = gs._GatherPlan(dn, oshape, (n, 1), sizes)
            want = _reference_gather(dn, operand, indices, sizes)
            for threads in ("1", "2"):
                monkeypatch.setenv("STABLEHLO_REF_THREADS", threads)
                got = plan(operand, indices)
                assert same_bits(got, want), (oshape, n, it, threads)
    # int32/uint32/int8/uint16 take the blocks; int64, and uint64 (which
    # saturates into int64), where _gather is built (else int64 is intp:
    # one np.take).
    whole = () if gs._gather is not None else (np.int64, np.uint64)
    assert bool(shared) == (np.dtype(it) not in [np.dtype(t) for t in whole])
    # (Shared blocks of 14: 8 indices are one block, never shared; 15 are
    # two blocks, the last of one index; 38 three.)
    assert sorted(set(shared)) == ([] if not shared else [2, 3])


def test_take_along_axis_in_blocks_with_out_of_range_indices():
    # The take_along_axis shape of the cliff sweep (batching dims, one
    # indexed dim), big enough for several blocks, clamped indices included.
    rng = np.random.default_rng(7)
    n = 700
    dn = {"offset_dims": [], "collapsed_slice_dims": [1], "operand_batching_dims": [0],
          "start_indices_batching_dims": [0], "start_index_map": [1], "index_vector_dim": 2}
    operand = random_values(rng, (n, n), np.float32)
    indices = random_indices(rng, (n, n, 1), np.int32, n)
    plan = gs._GatherPlan(dn, (n, n), (n, n, 1), (1, 1))
    assert plan.mode == "linear" and n * n >= 2 * gs._GATHER_BLOCK
    assert same_bits(plan(operand, indices), _reference_gather(dn, operand, indices, (1, 1)))


@pytest.mark.parametrize("in_range", [True, False])
@pytest.mark.parametrize("it", [np.int8, np.int16, np.int32, np.uint32, np.int64])
def test_large_linear_gather_index_types(it, in_range):
    # Blocks of a large linear gather: starts in range take no clamped copy
    # (one read of the largest), 32-bit or narrower starts sum in int32,
    # 64-bit ones in intp; one out-of-range start anywhere is clamped.
    rng = np.random.default_rng(8)
    n = 60 if it is np.int8 else 700
    dn = {"offset_dims": [], "collapsed_slice_dims": [1], "operand_batching_dims": [0],
          "start_indices_batching_dims": [0], "start_index_map": [1], "index_vector_dim": 2}
    operand = random_values(rng, (n, 2 * n), np.float32)
    indices = rng.integers(0, 2 * n if in_range else n, (n, 2 * n, 1)).astype(it)
    if not in_range:
        indices[n // 2, 3, 0] = np.iinfo(it).max
        if np.iinfo(it).min < 0:
            indices[-1, -1, 0] = -1
    before = indices.copy()
    plan = gs._GatherPlan(dn, (n, 2 * n), indices.shape, (1, 1))
    assert plan.mode == "linear" and plan.lin32
    got = plan(operand, indices)
    assert same_bits(indices, before)
    assert same_bits(got, _reference_gather(dn, operand, indices, (1, 1)))


@pytest.mark.parametrize("it", [np.int32, np.int64, np.uint32, np.uint64])
def test_gather_take_forms_jax_emits(it):
    """x[idx], rows of a matrix, searchsorted's probe (offset dim of 1) and
    take_along_axis (batching dims): the fast schedules, with out-of-range
    indices clamped."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((7, 5)).astype(np.float32)
    idx = np.array([[0], [6], [3], [2**31 - 1 if it != np.uint64 else 2**63 + 5]],
                   dtype=it)
    if np.dtype(it).kind == "i":
        idx[1, 0] = -4
    cases = [
        ({"offset_dims": [1], "collapsed_slice_dims": [0], "operand_batching_dims": [],
          "start_indices_batching_dims": [], "start_index_map": [0], "index_vector_dim": 1},
         (1, 5), "take"),
        ({"offset_dims": [1, 2], "collapsed_slice_dims": [], "operand_batching_dims": [],
          "start_indices_batching_dims": [], "start_index_map": [0], "index_vector_dim": 1},
         (1, 5), "take"),
        ({"offset_dims": [0], "collapsed_slice_dims": [1], "operand_batching_dims": [],
          "start_indices_batching_dims": [], "start_index_map": [1], "index_vector_dim": 1},
         (7, 1), "take"),
    ]
    for dn, sizes, mode in cases:
        plan = gs._GatherPlan(dn, x.shape, idx.shape, sizes)
        assert plan.mode == mode
        assert same_bits(plan(x, idx), _reference_gather(dn, x, idx, sizes))
    tal = {"offset_dims": [], "collapsed_slice_dims": [1], "operand_batching_dims": [0],
           "start_indices_batching_dims": [0], "start_index_map": [1], "index_vector_dim": 2}
    ti = rng.integers(-3, 9, (7, 4, 1)).astype(it)
    plan = gs._GatherPlan(tal, x.shape, ti.shape, (1, 1))
    assert plan.mode == "linear"
    assert same_bits(plan(x, ti), _reference_gather(tal, x, ti, (1, 1)))


_one_pass = pytest.mark.skipif(gs._gather is None, reason="_gather not built")


@_one_pass
@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16, np.complex64, np.int8,
                                np.float64, np.bool_])
def test_one_pass_gathers_give_numpys_elements(dt, threads, monkeypatch):
    # _gather.c's take_rows and take_linear against the numpy schedules
    # (the module hidden) and the reference: take_along_axis over the last
    # axis of 2-D and 3-D operands (the static part a row offset), over a
    # middle axis (no 2-D view of the static part: numpy), and x[idx];
    # int32 and int64 starts, out of range on both sides, row blocks shared
    # with the pool's threads.
    from stablehlo_interpreter import pool
    monkeypatch.setenv("STABLEHLO_REF_THREADS", threads)
    monkeypatch.setattr(pool, "busy", lambda threads: False)
    monkeypatch.setattr(gs, "_TAKE_SHARED_MIN", 64)
    monkeypatch.setattr(gs, "_TAKE_MIN", 16)
    rng = np.random.default_rng(12)
    calls = []
    real = gs._gather
    spy = type("Spy", (), {})()
    spy.take_rows = lambda *a: (calls.append("take_rows"), real.take_rows(*a))[1]
    spy.take_linear = lambda *a: (calls.append("take_linear"), real.take_linear(*a))[1]
    monkeypatch.setattr(gs, "_gather", spy)

    def check(dn, operand, indices, sizes, method):
        plan = gs._GatherPlan(dn, operand.shape, indices.shape, sizes)
        calls.clear()
        got = plan(operand, indices)
        assert method in calls, (method, calls)
        with monkeypatch.context() as m:
            m.setattr(gs, "_gather", None)
            plain = gs._GatherPlan(dn, operand.shape, indices.shape, sizes)(operand, indices)
        assert same_bits(got, plain)
        assert same_bits(got, _reference_gather(dn, operand, indices, sizes))

    for it in (np.int32, np.int64):
        for shape in ((9, 500), (3, 7, 250)):   # (over _SMALL_GATHER elements)
            lead = len(shape) - 1
            dn = {"offset_dims": [], "collapsed_slice_dims": [lead],
                  "operand_batching_dims": list(range(lead)),
                  "start_indices_batching_dims": list(range(lead)),
                  "start_index_map": [lead], "index_vector_dim": lead + 1}
            operand = random_values(rng, shape, dt)
            indices = rng.integers(-3, shape[-1] + 3, shape + (1,)).astype(it)
            check(dn, operand, indices, (1,) * len(shape), "take_linear")
        x = random_values(rng, (50,), dt)
        idx = rng.integers(-3, 53, (300, 1)).astype(it)
        dn = {"offset_dims": [], "collapsed_slice_dims": [0], "operand_batching_dims": [],
              "start_indices_batching_dims": [], "start_index_map": [0], "index_vector_dim": 1}
        check(dn, x, idx, (1,), "take_rows")
    # The middle axis of (3, 400, 7): the static part broadcast over the
    # result is no (rows, cols) view; numpy's passes.
    dn = {"offset_dims": [], "collapsed_slice_dims": [1], "operand_batching_dims": [0, 2],
          "start_indices_batching_dims": [0, 2], "start_index_map": [1], "index_vector_dim": 3}
    operand = random_values(rng, (3, 400, 7), dt)
    indices = rng.integers(-3, 403, (3, 400, 7, 1)).astype(np.int32)
    plan = gs._GatherPlan(dn, operand.shape, indices.shape, (1, 1, 1))
    calls.clear()
    assert same_bits(plan(operand, indices),
                     _reference_gather(dn, operand, indices, (1, 1, 1)))
    assert "take_linear" not in calls


@_one_pass
def test_one_pass_gathers_check_their_buffers():
    take_rows, take_linear = gs._gather.take_rows, gs._gather.take_linear
    x = np.arange(12, dtype=np.float32)
    i = np.array([0, 3, -1, 40], np.int32)
    out = np.empty(4, np.float32)
    take_rows(x, 12, i, out)
    assert np.array_equal(out, [0, 3, 0, 11])
    with pytest.raises(TypeError, match="indices"):
        take_rows(x, 12, i.astype(np.float32), out)
    with pytest.raises(ValueError, match="not 5 rows"):
        take_rows(x, 5, i, out)
    with pytest.raises(ValueError, match="not 0 rows"):
        take_rows(x, 0, i, out)
    with pytest.raises(ValueError, match="out has"):
        take_rows(x, 12, i, out[:3])
    with pytest.raises(ValueError, match="overlaps"):
        take_rows(x, 12, i, x[:4])
    with pytest.raises(ValueError, match="unaligned"):
        take_rows(np.frombuffer(bytes(49), np.uint8)[1:].view(np.float32), 12, i, out)
    part = np.array([[0, 1, 5], [2, -7, 1]], np.int64)
    st = np.array([0, 6], np.int64)
    o = np.empty((2, 3), np.float32)
    take_linear(x, part, 5, 1, st, 1, 0, 3, o)
    assert np.array_equal(o, [[0, 1, 5], [8, 6, 7]])
    take_linear(x, part, 3, 2, None, 0, 0, 3, o)
    assert np.array_equal(o, [[0, 2, 6], [4, 0, 2]])
    for args, match in [((x, part, 5, 1, st + 1, 1, 0, 3, o), "outside flat"),
                        ((x, part, 5, 1, st - 1, 1, 0, 3, o), "outside flat"),
                        ((x, part, 12, 1, None, 0, 0, 3, o), "outside flat"),
                        ((x, part, 5, 1, st[:1], 1, 0, 3, o), "outside flat"),
                        ((x, part, 5, 1, st, 2**62, 0, 3, o), "outside flat"),
                        ((x, part, 5, 1, st, 1, 0, 4, o), "sizes"),
                        ((x, part, 5, -1, st, 1, 0, 3, o), "sizes"),
                        ((x, part, 5, 1, st, 1, 0, 3, o[:1]), "sizes"),
                        ((x, part, 5, 1, st, 1, 0, 3, x[:6]), "overlaps")]:
        with pytest.raises(ValueError, match=match):
            take_linear(*args)
    with pytest.raises(TypeError, match="int32 or int64"):
        take_linear(x, part.astype(np.int16), 5, 1, st, 1, 0, 3, o)
    with pytest.raises(TypeError, match="static must be int64"):
        take_linear(x, part, 5, 1, st.astype(np.int32), 1, 0, 3, o)
    with pytest.raises(TypeError, match="1, 2, 4 or 8 bytes"):
        take_linear(x.view(np.uint8).reshape(-1, 16)[:, :12].copy().view("V12").reshape(-1),
                    part, 0, 1, None, 0, 0, 3, np.empty((2, 3), "V12"))


# --------------------------------------------------------------------------
# scatter


def _reference_scatter_targets(dn, input_shape, indices, update_shape):
    """The plain ``_ScatterPlan.targets``: (linear index, flat update positions)."""
    rank = len(input_shape)
    ivd = dn["index_vector_dim"]
    uwd = tuple(dn["update_window_dims"])
    inserted = set(dn["inserted_window_dims"])
    ibatch = tuple(dn["input_batching_dims"])
    sbatch = tuple(dn["scatter_indices_batching_dims"])
    sd2od = tuple(dn["scattered_dims_to_operand_dims"])
    urank = len(update_shape)
    scatter_dims = [d for d in range(urank) if d not in uwd]
    start_shape = gs._place([update_shape[d] for d in scatter_dims], urank, scatter_dims)
    window_operand_dims = [d for d in range(rank) if d not in inserted and d not in ibatch]
    static = [np.zeros((1,) * urank, dtype=np.int64) for _ in range(rank)]
    for d, ud in zip(window_operand_dims, uwd):
        shape = [1] * urank
        shape[ud] = update_shape[ud]
        static[d] = np.arange(update_shape[ud], dtype=np.int64).reshape(shape)
    for d, sd in zip(ibatch, sbatch):
        ax = scatter_dims[gs._batch_position(sd, ivd)]
        shape = [1] * urank
        shape[ax] = update_shape[ax]
        static[d] = np.arange(update_shape[ax], dtype=np.int64).reshape(shape)
    if int(np.prod(update_shape, dtype=np.int64)) == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z
    starts = _start_index_vectors(gs.as_index(indices), ivd)
    idx = list(static)
    for k, d in enumerate(sd2od):
        idx[d] = idx[d] + starts[..., k].reshape(start_shape)
    ok = True
    lin = np.int64(0)
    stride = 1
    for i, n in zip(reversed(idx), reversed(input_shape)):
        ok = ok & ((i >= 0) & (i < n))
        lin = lin + i * np.int64(stride)
        stride *= int(n)
    lin = np.broadcast_to(lin, update_shape).reshape(-1)
    ok = np.broadcast_to(ok, update_shape)
    if ok.all():
        return lin.astype(np.int64, copy=False), slice(None)
    pos = np.flatnonzero(ok)
    return lin[pos].astype(np.int64, copy=False), pos


def random_scatter(rng, oversize=True):
    """``oversize``: window sizes above the operand's dim (the verifier rejects them)."""
    rank = int(rng.integers(1, 5))
    shape = [int(rng.integers(0 if rng.random() < 0.05 else 1, 6)) for _ in range(rank)]
    dims = [int(d) for d in rng.permutation(rank)]
    nbatch = int(rng.integers(0, min(2, rank - 1) + 1)) if rng.random() < 0.4 else 0
    ibatch = sorted(dims[:nbatch])
    rest = dims[nbatch:]
    if not rest:
        return None
    k = int(rng.integers(1, len(rest) + 1))
    sd2od = [int(d) for d in rng.permutation(rest)[:k]]
    inserted = sorted(d for d in sd2od if rng.random() < 0.6)
    window = [d for d in range(rank) if d not in inserted and d not in ibatch]
    wsizes = []
    for d in window:
        r = rng.random()
        wsizes.append(shape[d] if r < 0.5 else 1 if r < 0.7 else
                      int(rng.integers(0, shape[d] + (3 if oversize else 1))))
    nb = int(rng.integers(nbatch, nbatch + 3))
    batch_shape = [int(rng.integers(0 if rng.random() < 0.05 else 1, 5)) for _ in range(nb)]
    bpos = sorted(int(p) for p in rng.permutation(nb)[:nbatch])
    order = [int(o) for o in rng.permutation(nbatch)]
    for j, p in enumerate(bpos):
        batch_shape[p] = shape[ibatch[order[j]]]
    implicit = len(sd2od) == 1 and rng.random() < 0.5
    ivd = nb if implicit else int(rng.integers(0, nb + 1))
    ishape = list(batch_shape)
    if not implicit:
        ishape.insert(ivd, len(sd2od))
    sbatch = [0] * nbatch
    for j, p in enumerate(bpos):
        sbatch[order[j]] = p if p < ivd or implicit else p + 1
    urank = nb + len(window)
    uwd = sorted(int(p) for p in rng.permutation(urank)[:len(window)])
    ushape = [0] * urank
    scatter_dims = [d for d in range(urank) if d not in uwd]
    for d, n in zip(scatter_dims, batch_shape):
        ushape[d] = n
    for ud, n in zip(uwd, wsizes):
        ushape[ud] = n
    dn = {"update_window_dims": uwd, "inserted_window_dims": inserted,
          "input_batching_dims": ibatch, "scatter_indices_batching_dims": sbatch,
          "scattered_dims_to_operand_dims": sd2od, "index_vector_dim": ivd}
    return dn, tuple(shape), tuple(ishape), tuple(ushape)


@pytest.mark.parametrize("seed", range(8))
def test_scatter_targets_match_plain_kernel(seed):
    rng = np.random.default_rng(100 + seed)
    done = 0
    some_dropped = all_kept = False
    while done < 150:
        case = random_scatter(rng)
        if case is None:
            continue
        dn, xshape, ishape, ushape = case
        it = INDEX_TYPES[int(rng.integers(len(INDEX_TYPES)))]
        bound = max(xshape[d] for d in dn["scattered_dims_to_operand_dims"]) + 1
        indices = random_indices(rng, ishape, it, bound)
        plan = gs._ScatterPlan(dn, xshape, ishape, ushape)
        lin, pos = plan.targets(indices)
        want_lin, want_pos = _reference_scatter_targets(dn, xshape, indices, ushape)
        assert lin.dtype.kind in "iu"
        assert np.array_equal(lin.astype(np.int64), want_lin), (dn, xshape, ishape, ushape, it)
        if isinstance(want_pos, slice):
            assert isinstance(pos, slice)
            all_kept |= want_lin.size > 0
        else:
            assert np.array_equal(pos, want_pos)
            some_dropped |= want_lin.size < int(np.prod(ushape))
        done += 1
    assert some_dropped and all_kept


def _scatter_run(body, dn, x, indices, updates):
    """The scatter kernel's run function for a one-op body (no MLIR)."""
    et = {np.dtype(np.float32): "f32", np.dtype(np.int32): "i32", np.dtype(np.bool_): "i1",
          np.dtype(np.float64): "f64", np.dtype(np.complex64): "complex<f32>"}[x.dtype]
    it = {np.dtype(np.int32): "i32", np.dtype(np.int64): "i64", np.dtype(np.uint32): "ui32",
          np.dtype(np.int8): "i8", np.dtype(np.uint64): "ui64"}[indices.dtype]

    def t(shape, e):
        return "tensor<" + "".join(f"{n}x" for n in shape) + e + ">"
    lst = ", ".join
    attrs = (f"update_window_dims = [{lst(map(str, dn['update_window_dims']))}], "
             f"inserted_window_dims = [{lst(map(str, dn['inserted_window_dims']))}], "
             f"input_batching_dims = [{lst(map(str, dn['input_batching_dims']))}], "
             f"scatter_indices_batching_dims = [{lst(map(str, dn['scatter_indices_batching_dims']))}], "
             f"scatter_dims_to_operand_dims = [{lst(map(str, dn['scattered_dims_to_operand_dims']))}], "
             f"index_vector_dim = {dn['index_vector_dim']}")
    ret = "%b" if body == "set" else "%r0"
    op = "" if body == "set" else f"%r0 = stablehlo.{body} %a, %b : tensor<{et}>\n"
    text = f"""
func.func @main(%x: {t(x.shape, et)}, %i: {t(indices.shape, it)}, %u: {t(updates.shape, et)}) -> {t(x.shape, et)} {{
  %r = "stablehlo.scatter"(%x, %i, %u) ({{
    ^bb0(%a: tensor<{et}>, %b: tensor<{et}>):
      {op}      stablehlo.return {ret} : tensor<{et}>
  }}) {{scatter_dimension_numbers = #stablehlo.scatter<{attrs}>}}
      : ({t(x.shape, et)}, {t(indices.shape, it)}, {t(updates.shape, et)}) -> {t(x.shape, et)}
  return %r : {t(x.shape, et)}
}}"""
    return shi.compile(text).run(x, indices, updates)[0]


def _sequential_scatter(body, dn, x, indices, updates):
    """The spec's schedule from the frozen targets: one update at a time."""
    lin, pos = _reference_scatter_targets(dn, x.shape, indices, updates.shape)
    out = x.copy().reshape(-1)
    vals = updates.reshape(-1)[pos]
    for t, v in zip(lin, vals):
        with np.errstate(all="ignore"):
            _apply(body, out, t, v)
    return out.reshape(x.shape)


def _apply(body, out, t, v):
    if body == "set":
        out[t] = v
    elif body == "add":
        out[t] = out[t] + v   # in the element type, wrapping for integers
    else:
        out[t] = {"maximum": np.maximum, "multiply": np.multiply}[body](out[t], v)


@pytest.mark.parametrize("body", ["add", "set", "maximum", "multiply"])
@pytest.mark.parametrize("et", [np.float32, np.int32, np.float64])
def test_scatter_kernel_matches_sequential_schedule(body, et):
    """Whole scatters (duplicates, out-of-bounds, f32 adds that depend on the
    order) against a one-update-at-a-time loop over the frozen targets."""
    rng = np.random.default_rng(7)
    done = 0
    while done < 25:
        case = random_scatter(rng, oversize=False)
        if case is None:
            continue
        dn, xshape, ishape, ushape = case
        it = [np.int32, np.int64, np.uint32, np.int8, np.uint64][done % 5]
        bound = max(xshape[d] for d in dn["scattered_dims_to_operand_dims"]) + 1
        indices = random_indices(rng, ishape, it, bound)
        x = random_values(rng, xshape, et)
        u = random_values(rng, ushape, et)
        if np.dtype(et).kind == "f":
            # Large and tiny magnitudes: the f32 sum depends on the update order.
            u = (u * np.where(rng.random(ushape) < 0.3, 1e7, 1)).astype(et)
        got = _scatter_run(body, dn, x, indices, u)
        want = _sequential_scatter(body, dn, x, indices, u)
        assert same_bits(got, want), (body, dn, xshape, ishape, ushape, it)
        done += 1


def test_last_writes_dense_and_sparse():
    rng = np.random.default_rng(3)
    for m, size in [(0, 5), (1, 5), (7, 3), (50, 1000), (1000, 20), (300, 300)]:
        lin = rng.integers(0, size, m)
        want = [j for j in range(m) if lin[j] not in lin[j + 1:]]
        assert gs.last_writes(lin, size).tolist() == want


def test_scatter_swap_body_applies_duplicates_in_order():
    """A body returning the other result's value (a swap) is not a plain
    replace: each of two updates of one target swaps, so they cancel."""
    text = """
func.func @main(%a: tensor<4xi32>, %b: tensor<4xi32>, %i: tensor<3x1xi32>, %u: tensor<3xi32>, %v: tensor<3xi32>)
    -> (tensor<4xi32>, tensor<4xi32>) {
  %r:2 = "stablehlo.scatter"(%a, %b, %i, %u, %v) ({
    ^bb0(%x: tensor<i32>, %y: tensor<i32>, %p: tensor<i32>, %q: tensor<i32>):
      stablehlo.return %y, %x : tensor<i32>, tensor<i32>
  }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [],
      inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}
      : (tensor<4xi32>, tensor<4xi32>, tensor<3x1xi32>, tensor<3xi32>, tensor<3xi32>) -> (tensor<4xi32>, tensor<4xi32>)
  return %r#0, %r#1 : tensor<4xi32>, tensor<4xi32>
}"""
    a = np.array([0, 1, 2, 3], np.int32)
    b = np.array([10, 11, 12, 13], np.int32)
    i = np.array([[1], [2], [1]], np.int32)      # target 1 twice, target 2 once
    u = np.zeros(3, np.int32)
    r0, r1 = shi.compile(text).run(a, b, i, u, u)
    assert r0.tolist() == [0, 1, 12, 3] and r1.tolist() == [10, 11, 2, 13]
