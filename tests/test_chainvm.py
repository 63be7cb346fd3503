"""The block machine of fused chains (chainvm.py, _chains.c).

Every op the machine runs (chainvm.lower) on every element type it takes,
through a fused chain, three ways bit for bit: on the machine, as the
members' numpy kernels (``STABLEHLO_REF_CHAIN_VM=0``, and the module not
built), and unfused. Inputs (hypothesis-drawn pools spread over the array)
hold NaNs with payloads, infinities, signed zeros, subnormals, integer
extremes and shift amounts beyond the bit width. The float32
transcendentals of _fastmath inside a run (FM instructions), with the
elements they flag recomputed per chunk or at the end of the call. Also:
bad programs and buffers raise instead of crashing, strided rows fall back
to the kernels, helper threads share the chunks.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stablehlo_interpreter as si
from stablehlo_interpreter import chainvm, compiler, fusion, pool
from stablehlo_interpreter.registry import annotate

N = 3001   # ragged: small chunks and blocks below, a short last one of each
INTS = ["i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64"]
FLOATS = ["f32", "f64"]
NP = {"f32": np.float32, "f64": np.float64, "i8": np.int8, "i16": np.int16, "i32": np.int32,
      "i64": np.int64, "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32,
      "ui64": np.uint64, "i1": np.bool_}
DIRECTIONS = ["EQ", "NE", "LT", "LE", "GT", "GE"]

built = pytest.mark.skipif(chainvm._chains is None, reason="_chains not built")


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch):
    """Fuse small arrays in small chunks, run in blocks of a few elements."""
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 256)
    monkeypatch.setattr(fusion, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(fusion, "MIN_THREAD_CHUNKS", 2)
    monkeypatch.setattr(chainvm, "BLOCK_BYTES", 200)   # 25-200 elements, not a power of 2
    monkeypatch.setattr(pool, "busy", lambda threads: False)
    monkeypatch.setattr(compiler, "_FOLD_ENABLED", False)
    for name in ("STABLEHLO_REF_FUSION", "STABLEHLO_REF_CHAIN_VM"):
        monkeypatch.delenv(name, raising=False)


def _t(et, shape=(N,)):
    return f"tensor<{'x'.join(map(str, shape))}{'x' if shape else ''}{et}>"


def _program(opname, ets, rt, attrs="", scalar=()):
    """``op`` on arguments of types ``ets`` (0-d where listed in ``scalar``),
    its result and a second machine op on it (negate, or not for booleans)
    returned: two members, so the run is a segment."""
    params = ", ".join(f"%a{i}: {_t(e, () if i in scalar else (N,))}" for i, e in enumerate(ets))
    ots = ", ".join(_t(e, () if i in scalar else (N,)) for i, e in enumerate(ets))
    second = "not" if rt == "i1" else "negate"
    return (f"func.func @main({params}) -> ({_t(rt)}, {_t(rt)}) {{\n"
            f'  %r = "stablehlo.{opname}"({", ".join(f"%a{i}" for i in range(len(ets)))}) '
            f"{attrs}: ({ots}) -> {_t(rt)}\n"
            f'  %s = "stablehlo.{second}"(%r) : ({_t(rt)}) -> {_t(rt)}\n'
            f"  return %r, %s : {_t(rt)}, {_t(rt)}\n}}\n")


def _cases():
    cases = []
    for et in INTS + FLOATS:
        for op in ["add", "subtract", "multiply", "maximum", "minimum"]:
            cases.append((op, [et, et], et, ""))
        for op in ["negate", "abs"]:
            if not et.startswith("u"):
                cases.append((op, [et], et, ""))
        cases.append(("clamp", [et, et, et], et, ""))
        cases.append(("select", ["i1", et, et], et, ""))
    for et in FLOATS:
        cases.append(("divide", [et, et], et, ""))
    for et in INTS + ["i1"]:
        for op in ["and", "or", "xor"]:
            cases.append((op, [et, et], et, ""))
        cases.append(("not", [et], et, ""))
    for et in INTS:
        for op in ["shift_left", "shift_right_logical", "shift_right_arithmetic"]:
            cases.append((op, [et, et], et, ""))
    for et in INTS + FLOATS + ["i1"]:
        ctypes = (["FLOAT", "TOTALORDER"] if et in FLOATS else
                  ["UNSIGNED"] if et == "i1" else ["SIGNED", "UNSIGNED"])
        for ctype in ctypes:
            for d in DIRECTIONS:
                cases.append(("compare", [et, et], "i1",
                              f"{{comparison_direction = #stablehlo<comparison_direction {d}>, "
                              f"compare_type = #stablehlo<comparison_type {ctype}>}} "))
    for src in INTS + FLOATS + ["i1"]:
        for dst in INTS + FLOATS + ["i1"]:
            if src != dst and not (src in FLOATS and dst in INTS):
                cases.append(("convert", [src], dst, ""))
    for src in INTS + FLOATS:
        for dst in INTS + FLOATS:
            if src != dst and NP[src]().itemsize == NP[dst]().itemsize:
                cases.append(("bitcast_convert", [src], dst, ""))
    return cases


CASES = _cases()


def _case_id(case):
    op, ets, rt, attrs = case
    extra = attrs.split("direction ")[1].split(">")[0] + "-" + attrs.split("type ")[1].split(">")[0] \
        if attrs else ""
    return f"{op}-{'-'.join(ets)}-{rt}{'-' + extra if extra else ''}"


def _pool(dt, draw):
    """Values an input is made of: edge values and hypothesis-drawn bits."""
    dt = np.dtype(dt)
    if dt == np.bool_:
        return np.array([False, True])
    if dt.kind == "f":
        u = np.dtype(f"u{dt.itemsize}")
        fi = np.finfo(dt)
        edge = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, fi.max, -fi.max, fi.tiny,
                         -fi.tiny, fi.smallest_subnormal, 1.0, -1.0, 0.5, 3.0, -2.5], dt)
        bits = draw(st.lists(st.integers(0, 2 ** (8 * dt.itemsize) - 1), min_size=1, max_size=24))
        payload = np.array([0x7FC00001, 0xFFC12345] if dt.itemsize == 4 else
                           [0x7FF8000000000001, 0xFFF8000000ABCDEF], u).view(dt)
        return np.concatenate([edge, payload, np.array(bits, u).view(dt)])
    info = np.iinfo(dt)
    bits = dt.itemsize * 8
    edge = [info.min, info.max, 0, 1, 2, bits - 1, bits, bits + 1, 2 * bits] + \
        ([-1, -bits] if info.min < 0 else [])
    drawn = draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=1, max_size=24))
    return np.array(edge + drawn, dt)


def _inputs(ets, scalar, draw, rng):
    out = []
    for i, et in enumerate(ets):
        pool_ = _pool(NP[et], draw)
        vals = pool_[rng.integers(0, pool_.size, 1 if i in scalar else N)]
        out.append(vals.reshape(()) if i in scalar else vals)
    return out


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint8) if a.dtype == np.bool_ else a.view(f"u{a.dtype.itemsize}")


def _assert_same(got, want, context, loose=None):
    """Bit for bit, except that a NaN may stand for a NaN at ``loose``."""
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, context
        differ = _bits(g) != _bits(w)
        if loose is not None:
            differ &= ~(loose & np.isnan(g) & np.isnan(w))
        diff = np.flatnonzero(differ)
        assert diff.size == 0, (f"{context}: result {i} differs at {diff[:5]}: "
                                f"got {g.reshape(-1)[diff[:5]]} want {w.reshape(-1)[diff[:5]]}")


_COMPILED = {}


def _compiled(text, how, monkeypatch, numerics="accurate"):
    """The program compiled one way: 'vm', 'numpy' (fused, no machine),
    'nomodule' (fused, the module not importable) or 'unfused'."""
    key = (text, how, numerics)
    if key not in _COMPILED:
        with monkeypatch.context() as m:
            if how == "unfused":
                m.setenv("STABLEHLO_REF_FUSION", "0")
            elif how == "numpy":
                m.setenv("STABLEHLO_REF_CHAIN_VM", "0")
            elif how == "nomodule":
                m.setattr(chainvm, "_chains", None)
            elif how == "nofm":
                m.setattr(chainvm, "_FM_LOOPS", ())
            _COMPILED[key] = si.compile(text, numerics=numerics)
    return _COMPILED[key]


def _run(program, args, how, monkeypatch):
    # Plans (and their fused steps) are made at the first run: under the
    # same switches as the compile.
    with monkeypatch.context() as m:
        if how == "nomodule":
            m.setattr(chainvm, "_chains", None)
        elif how == "numpy":
            m.setenv("STABLEHLO_REF_CHAIN_VM", "0")
        elif how == "unfused":
            m.setenv("STABLEHLO_REF_FUSION", "0")
        elif how == "nofm":
            m.setattr(chainvm, "_FM_LOOPS", ())
        out = program.run(*args)
    return out if isinstance(out, (list, tuple)) else [out]


def _segments(program):
    return [s for f in program.functions["main"].block._fast
            if isinstance(f[1], fusion.FusedChain) for s in f[1].segments.values()]


@built
@pytest.mark.parametrize("case", CASES, ids=_case_id)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_machine_ops_match_the_kernels(case, data, monkeypatch):
    op, ets, rt, attrs = case
    scalar = (0,) if op == "clamp" and data.draw(st.booleans()) else ()
    if op == "clamp" and scalar:
        scalar = (0, 2)   # clamp's 0-d bounds
    text = _program(op, ets, rt, attrs, scalar)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    args = _inputs(ets, scalar, data.draw, rng)
    want = _run(_compiled(text, "unfused", monkeypatch), args, "unfused", monkeypatch)
    vm = _compiled(text, "vm", monkeypatch)
    got = _run(vm, args, "vm", monkeypatch)
    assert _segments(vm), "the chain should run on the machine"
    # Two NaN operands of an IEEE operation: which payload the NaN result
    # carries is left open by IEEE 754, and numpy's own loops differ there
    # (the first operand's in a SIMD body, the second's in some tails and
    # with a scalar operand), as do the compiler's operand orders: any NaN.
    loose = np.isnan(args[0]) & np.isnan(args[1]) \
        if op in ("add", "subtract", "multiply", "divide") and ets[0] in FLOATS else None
    _assert_same(got, want, _case_id(case), loose)
    for how in ("numpy", "nomodule"):
        other = _compiled(text, how, monkeypatch)
        _assert_same(_run(other, args, how, monkeypatch), want, f"{_case_id(case)} {how}", loose)
        assert not _segments(other)


SPEC_CASES = [c for c in CASES if c[0] in ("add", "subtract", "multiply", "divide", "maximum",
                                            "clamp", "convert") and "f" in c[1][0] + c[2]]


@built
@pytest.mark.parametrize("case", SPEC_CASES[::3], ids=_case_id)
def test_both_numerics_modes_share_the_machine(case, monkeypatch):
    # These ops are exact or one IEEE rounding: numerics="spec" (the C++
    # reference's bits) runs them on the machine too, with the bits of its
    # own unfused run and of accurate mode's.
    op, ets, rt, attrs = case
    text = _program(op, ets, rt, attrs)
    rng = np.random.default_rng(7)
    args = _inputs(ets, (), lambda strategy: [0, 1, 3, 0x7F], rng)   # edge values, a few bits
    spec = _compiled(text, "vm", monkeypatch, "spec")
    got = _run(spec, args, "vm", monkeypatch)
    assert _segments(spec)
    loose = np.isnan(args[0]) & np.isnan(args[1]) if len(args) > 1 and ets[0] in FLOATS else None
    _assert_same(got, _run(_compiled(text, "unfused", monkeypatch, "spec"), args, "unfused",
                           monkeypatch), f"{_case_id(case)} spec", loose)
    _assert_same(got, _run(_compiled(text, "vm", monkeypatch), args, "vm", monkeypatch),
                 f"{_case_id(case)} spec vs accurate", loose)


THREEFRY_LIKE = f"""
func.func @main(%x: {_t('ui32')}, %y: {_t('ui32')}, %r: tensor<ui32>, %f: {_t('f32')})
    -> ({_t('ui32')}, {_t('f32')}, {_t('f32')}) {{
  %r1 = stablehlo.broadcast_in_dim %r, dims = [] : (tensor<ui32>) -> {_t('ui32')}
  %c32 = stablehlo.constant dense<32> : tensor<ui32>
  %c = stablehlo.broadcast_in_dim %c32, dims = [] : (tensor<ui32>) -> {_t('ui32')}
  %s = stablehlo.subtract %c, %r1 : {_t('ui32')}
  %0 = stablehlo.add %x, %y : {_t('ui32')}
  %1 = stablehlo.shift_left %y, %r1 : {_t('ui32')}
  %2 = stablehlo.shift_right_logical %y, %s : {_t('ui32')}
  %3 = stablehlo.or %1, %2 : {_t('ui32')}
  %4 = stablehlo.xor %0, %3 : {_t('ui32')}
  %c9 = stablehlo.constant dense<9> : tensor<ui32>
  %n9 = stablehlo.broadcast_in_dim %c9, dims = [] : (tensor<ui32>) -> {_t('ui32')}
  %5 = stablehlo.shift_right_logical %4, %n9 : {_t('ui32')}
  %one = stablehlo.constant dense<1065353216> : tensor<ui32>
  %o = stablehlo.broadcast_in_dim %one, dims = [] : (tensor<ui32>) -> {_t('ui32')}
  %6 = stablehlo.or %5, %o : {_t('ui32')}
  %7 = stablehlo.bitcast_convert %6 : ({_t('ui32')}) -> {_t('f32')}
  %8 = stablehlo.exponential %7 : {_t('f32')}
  %9 = stablehlo.multiply %8, %f : {_t('f32')}
  %10 = stablehlo.subtract %9, %7 : {_t('f32')}
  return %4, %8, %10 : {_t('ui32')}, {_t('f32')}, {_t('f32')}
}}
"""


@built
@pytest.mark.parametrize("threads", ["1", "2"])
def test_runs_around_a_kernel_member_and_helper_threads(threads, monkeypatch):
    # One run of 11 (a threefry round with a runtime rotation and uniform's
    # bit trick, exp as an FM instruction, then multiply, subtract); without
    # the FM instruction two runs around exp, a _fastmath kernel, where %4
    # is stored and read later and %7 read after its run.
    monkeypatch.setattr(fusion, "THREAD_EXACT_CHAINS", True)
    monkeypatch.setenv("STABLEHLO_REF_THREADS", threads)
    rng = np.random.default_rng(3)
    args = [rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32),
            rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32),
            np.array(13, np.uint32), rng.standard_normal(N).astype(np.float32)]
    vm = _compiled(THREEFRY_LIKE, "vm", monkeypatch)
    got = _run(vm, args, "vm", monkeypatch)
    assert [len(s[0]) for s in _segments(vm)] == [11]
    nofm = _compiled(THREEFRY_LIKE, "nofm", monkeypatch)
    _assert_same(_run(nofm, args, "nofm", monkeypatch), got, "nofm")
    assert [len(s[0]) for s in _segments(nofm)] == [8, 2]
    for how in ("unfused", "numpy"):
        _assert_same(got, _run(_compiled(THREEFRY_LIKE, how, monkeypatch), args, how,
                               monkeypatch), how)


FM_OPS = {"erf_f32": "chlo.erf", "erfc_f32": "chlo.erfc", "tanh_f32": "stablehlo.tanh",
          "logistic_f32": "stablehlo.logistic", "erf_inv_f32": "chlo.erf_inv",
          "exp_f32": "stablehlo.exponential", "log_f32": "stablehlo.log",
          "sin_f32": "stablehlo.sine", "cos_f32": "stablehlo.cosine",
          "expm1_f32": "stablehlo.exponential_minus_one", "log1p_f32": "stablehlo.log_plus_one"}


def _fm_program(name, late):
    """x * y, the function, minus y: one run with an FM instruction. With
    ``late`` its result is only returned (the flagged elements wait for
    the end of the call); else cbrt (no machine op) reads it too, so each
    chunk recomputes them before going on."""
    t = _t("f32")
    tail = "" if late else f"  %3 = stablehlo.cbrt %2 : {t}\n"
    ret = f"%2 : {t}" if late else f"%2, %3 : {t}, {t}"
    return (f"func.func @main(%x: {t}, %y: {t}) -> ({t}{'' if late else ', ' + t}) {{\n"
            f"  %0 = stablehlo.multiply %x, %y : {t}\n"
            f'  %1 = "{FM_OPS[name]}"(%0) : ({t}) -> {t}\n'
            f"  %2 = stablehlo.subtract %1, %y : {t}\n{tail}"
            f"  return {ret}\n}}\n")


def _fm_inputs(rng):
    """x: NaNs (flagged by every loop), infinities, zeros, subnormals and
    values whose results are subnormal or near the functions' edges,
    spread over ordinary values; y: ones and ordinary values, no NaN (two
    NaN operands leave the payload open)."""
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-40, 1e-30,
                        -1e-20, 0.5, 0.99999994, -0.9999, 1.0, -1.0, 3.9, 4.0, 9.0, -87.0,
                        88.7, 100.0, 1e4, 1e30], np.float32)
    x = rng.standard_normal(N).astype(np.float32) * np.float32(3)
    x[rng.integers(0, N, 200)] = rng.choice(special, 200)
    x[rng.integers(0, N, 300)] *= np.float32(0.2)   # erf_inv's domain
    y = np.where(rng.random(N) < 0.5, 1.0, rng.uniform(0.5, 2, N))
    return [x, y.astype(np.float32)]


@built
@pytest.mark.skipif(not chainvm._FM_LOOPS, reason="_fastmath not built")
@pytest.mark.parametrize("late", [True, False], ids=["late", "per_chunk"])
@pytest.mark.parametrize("name", sorted(FM_OPS))
def test_fm_instructions_give_the_kernels_bits(name, late, monkeypatch):
    assert set(FM_OPS) == set(chainvm._FM_LOOPS)
    monkeypatch.setattr(fusion, "THREAD_EXACT_CHAINS", True)
    redone = []
    real = chainvm.Segment._redo
    monkeypatch.setattr(chainvm.Segment, "_redo",
                        lambda self, ins: redone.append(ins[0].size) or real(self, ins))
    args = _fm_inputs(np.random.default_rng(sorted(FM_OPS).index(name)))
    text = _fm_program(name, late)
    vm = _compiled(text, "vm", monkeypatch)
    got = _run(vm, args, "vm", monkeypatch)
    (members, seg, _), = [v for f in vm.functions["main"].block._fast
                          if isinstance(f[1], fusion.FusedChain) for v in f[1].segments.values()]
    assert len(members) == 3 and seg.n_fm == 1 and bool(seg.returned) != late
    # Every NaN is flagged: one redo for the call (late), else one per
    # chunk holding a flagged element.
    assert redone and sum(redone) >= np.isnan(args[0]).sum()
    assert len(redone) == 1 if late else len(redone) > 1
    for how in ("unfused", "numpy", "nofm"):
        _assert_same(got, _run(_compiled(text, how, monkeypatch), args, how, monkeypatch),
                     f"{name} {how}")


@built
@pytest.mark.skipif(not chainvm._FM_LOOPS, reason="_fastmath not built")
def test_a_failing_late_redo_names_the_run(monkeypatch):
    def broken(self, ins):
        raise ValueError("boom")
    monkeypatch.setattr(chainvm.Segment, "_redo", broken)
    text = _fm_program("tanh_f32", late=True).replace("\n  %1", ' loc("here.py":7:8)\n  %1')
    with pytest.raises(si.ExecutionError,
                       match="stablehlo.multiply at here.py:7:8: ValueError: boom"):
        _run(_compiled(text, "vm", monkeypatch), _fm_inputs(np.random.default_rng(0)), "vm",
             monkeypatch)


def _fm_program_bytes(sub=0):
    """The machine program of y = f(x) (an FM instruction of loop ``sub``)."""
    op = type("Op", (), {})()
    op.name, op.attrs = "stablehlo.tanh", {}
    op.operand_types = op.result_types = [type("T", (), {"dtype": np.dtype(np.float32)})()]
    kernel = annotate(lambda x: x, f32_loop=chainvm._FM_LOOPS[0])
    w = np.frombuffer(chainvm.Segment([(op, (0,), 1, kernel)], {0: np.float32, 1: np.float32},
                                      [0], [(1, 0, False)]).program, np.int32).copy()
    assert w[7 + 3 * 2] == chainvm.FM
    w[7 + 3 * 2 + 2] = sub
    return w.tobytes()


@built
@pytest.mark.skipif(not chainvm._FM_LOOPS, reason="_fastmath not built")
def test_fm_programs_check_their_flags_and_loops():
    from stablehlo_interpreter import _fastmath
    run = chainvm._chains.run
    x = np.linspace(-3, 3, 999, dtype=np.float32)
    x[::50] = np.nan
    out = np.empty_like(x)
    flags = np.full(999, -1, np.int64)
    for sub, name in enumerate(_fastmath.LOOPS):   # each loop: its function's bits and flags
        want, idx = np.empty_like(x), np.empty(999, np.int64)
        n_want = getattr(_fastmath, name)(x, want, idx)
        n = run(_fm_program_bytes(sub), 999, [x], [out], flags)
        assert n == n_want >= 20 and np.array_equal(np.sort(flags[:n]), np.sort(idx[:n]))
        ok = np.ones(999, bool)
        ok[idx[:n]] = False
        assert np.array_equal(out[ok].view(np.uint32), want[ok].view(np.uint32)), name
    one = np.array([np.nan], np.float32)   # a one-element operand: spread over the block
    assert run(_fm_program_bytes(), 999, [one], [out], flags) == 999
    assert np.isnan(out).all() and np.array_equal(np.sort(flags[:999]), np.arange(999))
    prog = _fm_program_bytes()
    with pytest.raises(ValueError, match="needs a flags buffer"):
        run(prog, 999, [x], [out])
    with pytest.raises(ValueError, match="flags has 998 entries"):
        run(prog, 999, [x], [out], flags[:998])
    with pytest.raises(TypeError, match="int64"):
        run(prog, 999, [x], [out], flags.astype(np.int32))
    with pytest.raises(ValueError, match="read-only"):
        run(prog, 999, [x], [out], np.frombuffer(bytes(999 * 8), np.int64))
    shared = np.empty(1500, np.int64)   # an output and flags in one buffer
    with pytest.raises(ValueError, match="flags overlaps"):
        run(prog, 999, [x], [shared.view(np.float32)[:999]], shared[400:1400])
    for sub in (len(_fastmath.LOOPS), -1):
        with pytest.raises(ValueError, match="fastmath loop"):
            run(_fm_program_bytes(sub), 999, [x], [out], flags)


ROWS = """
func.func @main(%x: tensor<60x50xf32>, %y: tensor<60x50xf32>) -> tensor<60x50xf32> {
  %0 = stablehlo.multiply %x, %y : tensor<60x50xf32>
  %1 = stablehlo.add %0, %x : tensor<60x50xf32>
  %2 = stablehlo.maximum %1, %y : tensor<60x50xf32>
  return %2 : tensor<60x50xf32>
}
"""


@built
def test_strided_rows_and_fallback(monkeypatch):
    # A transposed operand: chunks are row ranges of a strided array, which
    # the run takes as one contiguous copy per chunk. An input that is not
    # an array of its type (never made by the interpreter's kernels) sends
    # the chunk to the members' kernels instead.
    rng = np.random.default_rng(4)
    x = rng.standard_normal((50, 60)).astype(np.float32).T
    y = rng.standard_normal((60, 50)).astype(np.float32)
    calls = []
    real = chainvm.Segment.run
    monkeypatch.setattr(chainvm.Segment, "run",
                        lambda self, *a: calls.append(r := real(self, *a)) or r)
    vm = _compiled(ROWS, "vm", monkeypatch)
    got = _run(vm, [x, y], "vm", monkeypatch)
    want = _run(_compiled(ROWS, "unfused", monkeypatch), [x, y], "unfused", monkeypatch)
    assert calls and all(c is not None for c in calls)
    _assert_same(got, want, "rows")
    calls.clear()
    monkeypatch.setattr(chainvm.Segment, "run", lambda self, ins, *a: calls.append(
        r := real(self, [list(v) if k == 0 else v for k, v in enumerate(ins)], *a)) or r)
    _assert_same(_run(vm, [x, y], "vm", monkeypatch), want, "fallback")
    assert calls and all(c is None for c in calls)


# -- the C module's checks


def _add_program(dtype=np.uint32, n_in=2):
    op = type("Op", (), {})()
    op.name = "stablehlo.add"
    op.operand_types = [type("T", (), {"dtype": np.dtype(dtype)})()] * 2
    op.result_types = op.operand_types[:1]
    op.attrs = {}
    seg = chainvm.Segment([(op, (0, 1), 2, None), (op, (2, 1), 3, None)],
                          {v: np.dtype(dtype) for v in range(4)},
                          [0, 1], [(3, 0, False)])
    return seg.program


@built
def test_a_valid_program_runs():
    x = np.arange(1000, dtype=np.uint32)
    out = np.empty(1000, np.uint32)
    chainvm._chains.run(_add_program(), 1000, [x, np.array(7, np.uint32)], [out])
    assert np.array_equal(out, x + 14)


@built
@pytest.mark.parametrize("bad", ["magic", "truncated", "opcode", "operand", "type",
                                 "writes_input", "slot"])
def test_bad_programs_raise(bad):
    w = np.frombuffer(_add_program(), np.int32).copy()
    nv = w[1]
    instr = 7 + 3 * nv
    if bad == "magic":
        w[0] = 1
    elif bad == "truncated":
        w = w[:-1]
    elif bad == "opcode":
        w[instr] = 99
    elif bad == "operand":
        w[instr + 4] = nv
    elif bad == "type":
        w[instr + 1] = 9   # float32 add of uint32 values
    elif bad == "writes_input":
        w[instr + 3] = 0
    elif bad == "slot":
        w[7 + 3 * 2 + 2] = 1000
    x = np.arange(10, dtype=np.uint32)
    with pytest.raises(ValueError, match="bad program"):
        chainvm._chains.run(w.tobytes(), 10, [x, x], [np.empty(10, np.uint32)])


@built
def test_bad_buffers_raise():
    prog = _add_program()
    x = np.arange(10, dtype=np.uint32)
    out = np.empty(10, np.uint32)
    run = chainvm._chains.run
    with pytest.raises(ValueError, match="input 0 has 36 bytes"):
        run(prog, 10, [x[:9], x], [out])
    with pytest.raises(ValueError, match="output 0 has"):
        run(prog, 10, [x, x], [out[:5]])
    with pytest.raises(ValueError, match="overlaps"):
        run(prog, 10, [x, x], [x])
    with pytest.raises(ValueError, match="not aligned"):
        run(prog, 10, [np.frombuffer(bytes(41), np.uint8)[1:].view(np.uint32), x], [out])
    with pytest.raises(TypeError, match="not a contiguous"):
        run(prog, 5, [x[::2], x[:5]], [out[:5]])
    ro = np.empty(10, np.uint32)
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="writable"):
        run(prog, 10, [x, x], [ro])
    with pytest.raises(ValueError, match="inputs and"):
        run(prog, 10, [x], [out])
    with pytest.raises(ValueError, match="n < 0"):
        run(prog, -1, [x, x], [out])


@built
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(-2, 70000)), min_size=1, max_size=4))
def test_mutated_programs_never_crash(edits):
    # Any word changed: the program is refused (ValueError, MemoryError) or
    # runs within its buffers.
    w = np.frombuffer(_add_program(), np.int32).copy()
    for k, v in edits:
        w[k % w.size] = v
    x = np.arange(64, dtype=np.uint32)
    try:
        chainvm._chains.run(w.tobytes(), 64, [x, x.copy()], [np.empty(64, np.uint32)])
    except (ValueError, MemoryError):
        pass


def test_lower_refuses_what_the_machine_does_not_compute():
    def op(name, ins, out, **attrs):
        o = type("Op", (), {})()
        o.name, o.attrs = name, attrs
        o.operand_types = [type("T", (), {"dtype": np.dtype(d)})() for d in ins]
        o.result_types = [type("T", (), {"dtype": np.dtype(out)})()]
        return o
    f16, bf16 = np.float16, ml_dtypes.bfloat16
    assert chainvm.lower(op("stablehlo.convert", [np.float32], np.int32)) is None
    assert chainvm.lower(op("stablehlo.divide", [np.int32] * 2, np.int32)) is None
    assert chainvm.lower(op("stablehlo.add", [f16] * 2, f16)) is None
    assert chainvm.lower(op("stablehlo.add", [bf16] * 2, bf16)) is None
    assert chainvm.lower(op("stablehlo.exponential", [np.float32], np.float32)) is None
    assert chainvm.lower(op("stablehlo.add", [np.bool_] * 2, np.bool_)) is None
    assert chainvm.lower(op("stablehlo.add", [np.float32] * 2, np.float32)) is not None


def _rotate_program(et, scalar):
    shape = () if scalar else (N,)
    return f"""
func.func @main(%x: {_t(et)}, %l: {_t(et, shape)}, %r: {_t(et, shape)}, %y: {_t(et)})
    -> ({_t(et)}, {_t(et)}) {{
  %0 = stablehlo.add %x, %y : {_t(et)}
  %lb = "stablehlo.broadcast_in_dim"(%l) {{broadcast_dimensions = array<i64{': 0' if not scalar else ''}>}} : ({_t(et, shape)}) -> {_t(et)}
  %rb = "stablehlo.broadcast_in_dim"(%r) {{broadcast_dimensions = array<i64{': 0' if not scalar else ''}>}} : ({_t(et, shape)}) -> {_t(et)}
  %1 = stablehlo.shift_left %y, %lb : {_t(et)}
  %2 = stablehlo.shift_right_logical %y, %rb : {_t(et)}
  %3 = stablehlo.or %2, %1 : {_t(et)}
  %4 = stablehlo.xor %0, %3 : {_t(et)}
  %5 = stablehlo.shift_left %4, %lb : {_t(et)}
  %6 = stablehlo.shift_right_logical %4, %rb : {_t(et)}
  %7 = stablehlo.or %5, %6 : {_t(et)}
  return %4, %7 : {_t(et)}, {_t(et)}
}}
"""


@built
@pytest.mark.parametrize("et", INTS)
@pytest.mark.parametrize("scalar", [True, False], ids=["scalar", "vector"])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_rotations_as_one_instruction(et, scalar, data, monkeypatch):
    # or(shl(x, l), shrl(x, r)) runs as SHLOR, the xor after it as
    # SHLORXOR: amounts of any value (>= the width too), per element or one.
    text = _rotate_program(et, scalar)
    bits = np.dtype(NP[et]).itemsize * 8
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    amounts = st.integers(0, 2 * bits + 1)
    if scalar:
        lr = [np.array(data.draw(amounts), NP[et]), np.array(data.draw(amounts), NP[et])]
    else:
        lr = [rng.integers(0, 2 * bits + 2, N).astype(NP[et]) for _ in range(2)]
    x, y = _inputs([et, et], (), data.draw, rng)
    args = [x, lr[0], lr[1], y]
    vm = _compiled(text, "vm", monkeypatch)
    got = _run(vm, args, "vm", monkeypatch)
    (seg,) = _segments(vm)
    w = np.frombuffer(seg[1].program, np.int32)
    ops = w[7 + 3 * w[1]:].reshape(-1, 8)[:, 0].tolist()
    assert ops == [chainvm.ADD, chainvm.SHLORXOR, chainvm.SHLOR]
    _assert_same(got, _run(_compiled(text, "unfused", monkeypatch), args, "unfused",
                           monkeypatch), et)
