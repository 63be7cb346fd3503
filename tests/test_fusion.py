"""Fused elementwise chains (interpreter/stablehlo_interpreter/fusion.py).

Every fused chain must give the same bits as running its ops one by one:
random chains over every element class (floats incl. f16/bf16/f64, signed
and unsigned integers with wraparound, complex, booleans) on inputs full of
NaN, infinities, signed zeros, subnormals and integer extremes, compared
bit for bit with the unfused plan (``STABLEHLO_REF_FUSION=0``), with one and
several threads, contiguous and strided operands. Also: which steps fuse,
what stays visible to tracers, and how errors name the op.
"""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest

import stablehlo_interpreter as si
from stablehlo_interpreter import chainvm, compiler, fusion, pool, trace
from stablehlo_interpreter.errors import ExecutionError

N = 3000   # elements; small thresholds below make these fuse into ~10 chunks

FLOATS = ["f32", "f16", "bf16", "f64"]
INTS = ["i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64"]
NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64,
      "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "ui8": np.uint8,
      "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64, "i1": np.bool_,
      "complex<f32>": np.complex64, "complex<f64>": np.complex128, "i4": ml_dtypes.int4,
      "ui4": ml_dtypes.uint4, "f8E5M2": ml_dtypes.float8_e5m2}

FLOAT_UNARY = ["negate", "abs", "exponential", "exponential_minus_one", "log", "log_plus_one",
               "logistic", "sine", "cosine", "tan", "tanh", "sqrt", "rsqrt", "cbrt", "floor",
               "ceil", "round_nearest_afz", "round_nearest_even", "sign", "chlo.erf",
               "chlo.erf_inv", "chlo.atan", "chlo.lgamma"]
FLOAT_BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "atan2",
                "remainder"]
INT_UNARY = ["negate", "abs", "not", "popcnt", "count_leading_zeros", "sign"]
INT_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "and", "or", "xor",
              "maximum", "minimum", "shift_left", "shift_right_logical",
              "shift_right_arithmetic", "power"]
COMPLEX_UNARY = ["negate", "exponential", "log", "sqrt", "tanh", "sine", "exponential_minus_one"]
COMPLEX_BINARY = ["add", "subtract", "multiply", "divide"]


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch):
    """Fuse small arrays, in small chunks: many chunks, a ragged last one."""
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 256)
    monkeypatch.setattr(fusion, "CHUNK_BYTES", 2048)   # 256 8-byte elements
    monkeypatch.setattr(fusion, "MIN_THREAD_CHUNKS", 2)
    monkeypatch.setattr(fusion, "THREAD_EXACT_CHAINS", True)
    monkeypatch.setattr(pool, "busy", lambda threads: False)   # share even on a loaded machine
    monkeypatch.delenv("STABLEHLO_REF_FUSION", raising=False)
    # Fusion alone: compile-time folding (fold.py) would turn the chains'
    # constant parts (broadcasts of scalars, whole constant-fed chains) into
    # plan constants. test_fold_and_fusion_together checks the two passes
    # together.
    monkeypatch.setattr(compiler, "_FOLD_ENABLED", False)


def _t(et, shape=(N,)):
    return f"tensor<{'x'.join(map(str, shape))}{'x' if shape else ''}{et}>"


class Builder:
    """A random program: a pool of values, each new op applied to some of them."""

    def __init__(self, rng, et, n_args=2, shape=(N,)):
        self.rng, self.et, self.shape = rng, et, shape
        self.lines = []
        self.pool = []   # (name, element type)
        self.args = [(f"%a{i}", et) for i in range(n_args)]
        self.pool += self.args
        self.k = 0
        self.broadcasts = set()

    def new(self):
        self.k += 1
        return f"%v{self.k}"

    def emit(self, opname, operands, et_out, attrs="", operand_types=None):
        name = self.new()
        full = opname if "." in opname else f"stablehlo.{opname}"
        ots = operand_types or [_t(e, self.shape) for _, e in operands]
        self.lines.append(f'    {name} = "{full}"({", ".join(n for n, _ in operands)}) {attrs}: '
                          f'({", ".join(ots)}) -> {_t(et_out, self.shape)}')
        self.pool.append((name, et_out))
        return name

    def scalar(self, et, value):
        name = self.new()
        self.lines.append(f"    {name} = stablehlo.constant dense<{value}> : tensor<{et}>")
        b = self.new()
        self.lines.append(f'    {b} = "stablehlo.broadcast_in_dim"({name}) '
                          f'{{broadcast_dimensions = array<i64>}} : (tensor<{et}>) -> {_t(et, self.shape)}')
        self.pool.append((b, et))
        self.broadcasts.add(b)
        return (b, et)

    def pick(self, et):
        cands = [p for p in self.pool if p[1] == et]
        return cands[self.rng.integers(len(cands))] if cands else None

    def text(self, results):
        params = ", ".join(f"{n}: {_t(e, self.shape)}" for n, e in self.args)
        rtypes = ", ".join(_t(e, self.shape) for _, e in results)
        return (f"func.func @main({params}) -> ({rtypes}) {{\n" + "\n".join(self.lines)
                + f"\n    return {', '.join(n for n, _ in results)} : {rtypes}\n}}\n")


def _direction(rng):
    return ["EQ", "NE", "LT", "LE", "GT", "GE"][rng.integers(6)]


def build_chain(seed, et, n_ops=14, shape=(N,)):
    rng = np.random.default_rng(seed)
    b = Builder(rng, et, shape=shape)
    is_float = et in FLOATS or et.startswith("f8")
    is_complex = et.startswith("complex")
    for _ in range(n_ops):
        r = rng.random()
        x = b.pick(et)
        if r < 0.12:   # a broadcast constant joins
            if is_complex:
                b.scalar(et, "(1.5, -0.25)")
            elif is_float:
                b.scalar(et, ["0.5", "-2.0", "3.0e+00", "0x7FC00000" if et == "f32" else "1.0"][rng.integers(4)])
            else:
                b.scalar(et, str(int(rng.integers(0, 7))))
            continue
        if r < 0.2 and not is_complex:   # compare + select
            y = b.pick(et)
            ctype = "FLOAT" if is_float else ("UNSIGNED" if et.startswith("u") else "SIGNED")
            p = b.emit("compare", [x, y], "i1",
                       f"{{comparison_direction = #stablehlo<comparison_direction {_direction(rng)}>, "
                       f"compare_type = #stablehlo<comparison_type {ctype}>}} ")
            b.emit("select", [(p, "i1"), x, y], et)
            continue
        if r < 0.26 and not is_complex:   # clamp with 0-d bounds
            lo, hi = ("-1.5", "2.5") if is_float else ("1", "6" if et.endswith("i4") else "100")
            nlo, nhi = b.new(), b.new()
            b.lines.append(f"    {nlo} = stablehlo.constant dense<{lo}> : tensor<{et}>")
            b.lines.append(f"    {nhi} = stablehlo.constant dense<{hi}> : tensor<{et}>")
            b.emit("clamp", [(nlo, et), x, (nhi, et)], et,
                   operand_types=[f"tensor<{et}>", _t(et, shape), f"tensor<{et}>"])
            continue
        if r < 0.32:   # a round trip through another type
            other = {"f32": "f16", "f16": "f32", "bf16": "f32", "f64": "f32", "i8": "i32",
                     "i4": "i8", "ui4": "i32", "f8E5M2": "bf16",
                     "i16": "ui8", "i32": "i8", "i64": "ui32", "ui8": "i16", "ui16": "i8",
                     "ui32": "f32", "ui64": "i32", "complex<f32>": "complex<f64>",
                     "complex<f64>": "complex<f32>"}[et]
            y = b.emit("convert", [x], other)
            b.emit("convert", [(y, other)], et)
            continue
        if is_complex:
            unary, binary = COMPLEX_UNARY, COMPLEX_BINARY
        elif is_float:
            unary, binary = FLOAT_UNARY, FLOAT_BINARY
        else:
            unary, binary = INT_UNARY, INT_BINARY
            if et.startswith("u"):   # no sign/abs of unsigned types
                unary = [u for u in unary if u not in ("sign", "abs")]
        if r < 0.6:
            op = unary[rng.integers(len(unary))]
            b.emit(op, [x], et)
        else:
            op = binary[rng.integers(len(binary))]
            b.emit(op, [x, b.pick(et)], et)
    vals = [p for p in b.pool if p[1] == et and p not in b.args and p[0] not in b.broadcasts]
    results = [vals[-1], vals[len(vals) // 2]]
    return b.text(results)


def _special_inputs(et, rng, n=N):
    dt = np.dtype(NP[et])
    if dt.kind == "f" or dt in (np.dtype(ml_dtypes.bfloat16), np.dtype(ml_dtypes.float8_e5m2)):
        fi = ml_dtypes.finfo(dt)
        special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, float(fi.max), -float(fi.max),
                            float(fi.tiny), -float(fi.tiny), float(fi.smallest_subnormal), 1.0, -1.0,
                            0.5, 2.0, 0.999], np.float64)
        vals = rng.standard_normal(n) * rng.choice([0.01, 1.0, 30.0], n)
        vals[rng.integers(0, n, n // 6)] = rng.choice(special, n // 6)
        return vals.astype(dt)
    if dt.kind == "c":
        part = dt.type(0).real.dtype
        re = _special_inputs("f32" if part == np.float32 else "f64", rng, n)
        im = _special_inputs("f32" if part == np.float32 else "f64", rng, n)
        out = np.empty(n, dt)
        out.real, out.imag = re, im
        return out
    info = ml_dtypes.iinfo(dt)
    car = dt if dt.itemsize == 8 else np.dtype(np.int64)   # ml_dtypes ints: through int64
    vals = rng.integers(int(info.min), int(info.max), n, dtype=car, endpoint=True)
    small = rng.integers(-5 if info.min < 0 else 0, min(40, int(info.max)), n // 3)
    vals[rng.integers(0, n, n // 3)] = small.astype(car)
    vals[rng.integers(0, n, 20)] = rng.choice(np.array([info.min, info.max, 0, 1], car), 20)
    return vals.astype(dt)


def _bits(a):
    a = np.ascontiguousarray(a)
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind != "c" else a.view(f"u{a.dtype.itemsize // 2}")


def _run_both(text, args, monkeypatch, threads="1"):
    monkeypatch.setenv("STABLEHLO_REF_THREADS", threads)
    fused = si.compile(text)
    got = fused.run(*args)
    monkeypatch.setenv("STABLEHLO_REF_FUSION", "0")
    plain = si.compile(text)
    want = plain.run(*args)
    monkeypatch.delenv("STABLEHLO_REF_FUSION")
    return fused, got, want


def _fused_steps(program, func="main"):
    return [f[1] for f in program.functions[func].block._fast
            if isinstance(f[1], fusion.FusedChain)]


def _assert_same_bits(got, want, context):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, context
        diff = np.flatnonzero(_bits(g) != _bits(w))
        assert diff.size == 0, (f"{context}: result {i} differs at {diff[:5]}: "
                                f"fused {g.reshape(-1)[diff[:5]]} unfused {w.reshape(-1)[diff[:5]]}")


@pytest.mark.parametrize("et", FLOATS + INTS + ["complex<f32>", "complex<f64>", "i4", "ui4", "f8E5M2"])
@pytest.mark.parametrize("seed", range(6))
def test_random_chain_bit_identical(et, seed, monkeypatch):
    text = build_chain(seed * 101 + len(et), et)
    rng = np.random.default_rng(seed)
    args = [_special_inputs(et, rng), _special_inputs(et, rng)]
    threads = "2" if seed % 2 else "1"
    program, got, want = _run_both(text, args, monkeypatch, threads)
    assert _fused_steps(program), "expected a fused chain"
    _assert_same_bits(got, want, f"{et} seed {seed}\n{text}")


def test_threefry_round_bit_identical(monkeypatch):
    # The rotate/add/xor rounds of jax.random's threefry2x32 (uint32
    # wraparound, shift amounts broadcast from 0-d constants).
    lines, x0, x1, k = [], "%a0", "%a1", 0
    for r in (13, 15, 26, 6, 17, 29, 16, 24):
        k += 1
        lines += [f"    %s{k} = stablehlo.add {x0}, {x1} : tensor<{N}xui32>",
                  f"    %c{k} = stablehlo.constant dense<{r}> : tensor<ui32>",
                  f"    %d{k} = stablehlo.constant dense<{32 - r}> : tensor<ui32>",
                  f"    %bc{k} = stablehlo.broadcast_in_dim %c{k}, dims = [] : (tensor<ui32>) -> tensor<{N}xui32>",
                  f"    %bd{k} = stablehlo.broadcast_in_dim %d{k}, dims = [] : (tensor<ui32>) -> tensor<{N}xui32>",
                  f"    %l{k} = stablehlo.shift_left {x1}, %bc{k} : tensor<{N}xui32>",
                  f"    %r{k} = stablehlo.shift_right_logical {x1}, %bd{k} : tensor<{N}xui32>",
                  f"    %o{k} = stablehlo.or %l{k}, %r{k} : tensor<{N}xui32>",
                  f"    %x{k} = stablehlo.xor %s{k}, %o{k} : tensor<{N}xui32>"]
        x0, x1 = f"%s{k}", f"%x{k}"
    t = f"tensor<{N}xui32>"
    text = (f"func.func @main(%a0: {t}, %a1: {t}) -> ({t}, {t}) {{\n" + "\n".join(lines)
            + f"\n    return {x0}, {x1} : {t}, {t}\n}}\n")
    rng = np.random.default_rng(0)
    args = [rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32) for _ in range(2)]
    for threads in ("1", "3"):
        program, got, want = _run_both(text, args, monkeypatch, threads)
        (chain,) = _fused_steps(program)
        # share_values: five broadcast shift amounts repeat (6, 15, 16, 17
        # and 26 are both some r and some 32 - r).
        assert len(chain.plan) == 8 * 7 - 5
        _assert_same_bits(got, want, "threefry")


def _jax_round(n=N):
    """One threefry round as JAX writes it (``closed_call`` of
    jax.random's while loop): each rotation amount sliced from a
    ``tensor<4xui32>`` operand, reshaped and subtracted from 32 -- scalar
    steps between the members, each the last reader of a value a member
    reads."""
    t, lines, x0, x1 = f"tensor<{n}xui32>", [], "%a0", "%a1"
    for j in range(4):
        lines += [f"    %sl{j} = stablehlo.slice %rot [{j}:{j + 1}] : (tensor<4xui32>) -> tensor<1xui32>",
                  f"    %r{j} = stablehlo.reshape %sl{j} : (tensor<1xui32>) -> tensor<ui32>",
                  f"    %s{j} = stablehlo.add {x0}, {x1} : {t}",
                  f"    %br{j} = stablehlo.broadcast_in_dim %r{j}, dims = [] : (tensor<ui32>) -> {t}",
                  f"    %l{j} = stablehlo.shift_left {x1}, %br{j} : {t}",
                  f"    %c{j} = stablehlo.constant dense<32> : tensor<ui32>",
                  f"    %d{j} = stablehlo.subtract %c{j}, %r{j} : tensor<ui32>",
                  f"    %bd{j} = stablehlo.broadcast_in_dim %d{j}, dims = [] : (tensor<ui32>) -> {t}",
                  f"    %h{j} = stablehlo.shift_right_logical {x1}, %bd{j} : {t}",
                  f"    %o{j} = stablehlo.or %l{j}, %h{j} : {t}",
                  f"    %x{j} = stablehlo.xor %s{j}, %o{j} : {t}"]
        x0, x1 = f"%s{j}", f"%x{j}"
    lines += [f"    %bk = stablehlo.broadcast_in_dim %k, dims = [] : (tensor<ui32>) -> {t}",
              f"    %y0 = stablehlo.add {x0}, %bk : {t}",
              f"    %y1 = stablehlo.add {x1}, %bk : {t}"]
    return (f"func.func @main(%a0: {t}, %a1: {t}, %rot: tensor<4xui32>, %k: tensor<ui32>) "
            f"-> ({t}, {t}) {{\n" + "\n".join(lines) + f"\n    return %y0, %y1 : {t}, {t}\n}}\n")


def test_scalar_steps_between_members_do_not_split_the_chain(monkeypatch):
    # The slice/reshape/subtract steps free values the chain's broadcasts
    # read: those frees wait for the fused step, and the round is one chain
    # (it was cut into four, each storing its values in full).
    rng = np.random.default_rng(3)
    args = [rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32) for _ in range(2)] + [
        np.array([13, 15, 26, 6], np.uint32), np.array(0x1BD11BDA, np.uint32)]
    text = _jax_round()
    for threads in ("1", "2"):
        program, got, want = _run_both(text, args, monkeypatch, threads)
        (chain,) = _fused_steps(program)
        assert sum(m.op.name == "stablehlo.xor" for m in chain.plan) == 4
        _assert_same_bits(got, want, "jax round")
    # The held values are freed after the fused step, not left in the frame.
    fast = program.functions["main"].block._fast
    k = next(i for i, f in enumerate(fast) if isinstance(f[1], fusion.FusedChain))
    freed = set(fast[k][-1])
    for f in fast[:k]:
        assert freed.isdisjoint(f[-1])
    assert len(freed) >= 4


M = 2000
TWO_SHAPES = f"""
func.func @main(%x: tensor<{N}xf32>, %y: tensor<{M}xf32>, %s: tensor<f32>) -> (tensor<{N}xf32>, tensor<{M}xf32>, tensor<1xf32>) {{
  %bx = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<{N}xf32>
  %0 = stablehlo.multiply %x, %bx : tensor<{N}xf32>
  %by = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<{M}xf32>
  %1 = stablehlo.multiply %y, %by : tensor<{M}xf32>
  %2 = stablehlo.add %1, %y : tensor<{M}xf32>
  %e = stablehlo.slice %2 [7:8] : (tensor<{M}xf32>) -> tensor<1xf32>
  %3 = stablehlo.add %0, %x : tensor<{N}xf32>
  return %3, %2, %e : tensor<{N}xf32>, tensor<{M}xf32>, tensor<1xf32>
}}
"""


def test_a_value_two_chains_read_lives_until_both_ran(monkeypatch):
    # %s is read by a chain of each shape; its last reader is a member of
    # the second, which runs first (the slice reads it). %s must still be
    # there for the first chain (it was freed with the second: an error).
    rng = np.random.default_rng(11)
    args = [rng.standard_normal(N).astype(np.float32), rng.standard_normal(M).astype(np.float32),
            np.array(1.5, np.float32)]
    program, got, want = _run_both(TWO_SHAPES, args, monkeypatch)
    assert len(_fused_steps(program)) == 2
    _assert_same_bits(got, want, "two shapes")


DONATED = f"""
func.func @main(%x: tensor<{N}xf32>, %u: tensor<4xf32>, %i: tensor<i32>) -> (tensor<{N}xf32>, tensor<{N}xf32>) {{
  %0 = stablehlo.multiply %x, %x : tensor<{N}xf32>
  %1 = stablehlo.add %0, %x : tensor<{N}xf32>
  %d = stablehlo.dynamic_update_slice %x, %u, %i : (tensor<{N}xf32>, tensor<4xf32>, tensor<i32>) -> tensor<{N}xf32>
  %2 = stablehlo.subtract %1, %0 : tensor<{N}xf32>
  return %2, %d : tensor<{N}xf32>, tensor<{N}xf32>
}}
"""


def test_a_step_updating_a_read_value_in_place_still_closes_the_chain(monkeypatch):
    # dynamic_update_slice is the last reader of %x and may update it in
    # place (donate_first): the chain reading %x runs before it, as
    # unfused, rather than holding %x past it.
    rng = np.random.default_rng(8)
    args = [rng.standard_normal(N).astype(np.float32), np.ones(4, np.float32), np.array(5, np.int32)]
    program, got, want = _run_both(DONATED, [a.copy() for a in args], monkeypatch)
    names = [f[1].op.name if hasattr(f[1], "op") else None
             for f in program.functions["main"].block._fast]
    assert names.index("fusion") < len(names) - 2   # the chain, then dus (and subtract)
    _assert_same_bits(got, want, "donated")
    assert np.array_equal(got[1][5:9], np.ones(4, np.float32))


STRIDED = """
func.func @main(%x: tensor<60x50xf32>, %y: tensor<50x60xf32>, %r: tensor<60xf32>) -> (tensor<60x50xf32>, tensor<60xf32>) {
  %t = stablehlo.transpose %y, dims = [1, 0] : (tensor<50x60xf32>) -> tensor<60x50xf32>
  %b = stablehlo.broadcast_in_dim %r, dims = [0] : (tensor<60xf32>) -> tensor<60x50xf32>
  %0 = stablehlo.multiply %x, %t : tensor<60x50xf32>
  %1 = stablehlo.subtract %0, %b : tensor<60x50xf32>
  %2 = stablehlo.exponential %1 : tensor<60x50xf32>
  %3 = stablehlo.tanh %2 : tensor<60x50xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%2 init: %z) applies stablehlo.add across dimensions = [1] : (tensor<60x50xf32>, tensor<f32>) -> tensor<60xf32>
  %4 = stablehlo.add %3, %b : tensor<60x50xf32>
  return %4, %s : tensor<60x50xf32>, tensor<60xf32>
}
"""


@pytest.mark.parametrize("threads", ["1", "2"])
def test_strided_and_broadcast_operands(threads, monkeypatch):
    # A transposed operand (not contiguous: chunks are row ranges), a row
    # broadcast (stride 0 on one axis), and a value that a reduce reads in
    # the middle of the chain: the reduce is fed chunk by chunk (whole rows),
    # and the add after it joins the chain.
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((60, 50)).astype(np.float32),
            rng.standard_normal((50, 60)).astype(np.float32),
            rng.standard_normal(60).astype(np.float32)]
    program, got, want = _run_both(STRIDED, args, monkeypatch, threads)
    (chain,) = _fused_steps(program)
    assert [m.op.name.split(".")[1] for m in chain.plan] == ["multiply", "subtract",
                                                            "exponential", "tanh", "add"]
    assert len(chain.sinks) == 1 and chain.n_out == 2
    _assert_same_bits(got, want, "strided")


INTERLEAVED = f"""
func.func @main(%x: tensor<{N}xf32>, %i: tensor<2xi32>) -> (tensor<{N}xf32>, tensor<{N}xf32>, tensor<f32>) {{
  %0 = stablehlo.sine %x : tensor<{N}xf32>
  %s = stablehlo.slice %i [0:1] : (tensor<2xi32>) -> tensor<1xi32>
  %c = stablehlo.convert %s : (tensor<1xi32>) -> tensor<1xf32>
  %b = stablehlo.broadcast_in_dim %c, dims = [0] : (tensor<1xf32>) -> tensor<{N}xf32>
  %1 = stablehlo.multiply %0, %b : tensor<{N}xf32>
  %e = stablehlo.slice %1 [7:8] : (tensor<{N}xf32>) -> tensor<1xf32>
  %er = stablehlo.reshape %e : (tensor<1xf32>) -> tensor<f32>
  %2 = stablehlo.cosine %1 : tensor<{N}xf32>
  %3 = stablehlo.add %2, %x : tensor<{N}xf32>
  return %3, %1, %er : tensor<{N}xf32>, tensor<{N}xf32>, tensor<f32>
}}
"""


def test_groups_close_before_outside_readers(monkeypatch):
    # %1 is read by a slice between members: the first group must run
    # before the slice; the broadcast of a one-element runtime value joins;
    # cosine and add form a second group.
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(N).astype(np.float32), np.array([3, 4], np.int32)]
    program, got, want = _run_both(INTERLEAVED, args, monkeypatch)
    chains = _fused_steps(program)
    assert [[m.op.name.split(".")[1] for m in c.plan] for c in chains] == [
        ["sine", "broadcast_in_dim", "multiply"], ["cosine", "add"]]
    _assert_same_bits(got, want, "interleaved")


TILED = """
func.func @main(%x: tensor<60x50xf32>, %v: tensor<50xf32>, %w: tensor<40xf64>, %y: tensor<60x40xf64>) -> (tensor<60x50xf32>, tensor<60x40xf64>) {
  %b = stablehlo.broadcast_in_dim %v, dims = [1] : (tensor<50xf32>) -> tensor<60x50xf32>
  %0 = stablehlo.subtract %x, %b : tensor<60x50xf32>
  %1 = stablehlo.multiply %0, %0 : tensor<60x50xf32>
  %2 = stablehlo.sine %1 : tensor<60x50xf32>
  %c = stablehlo.broadcast_in_dim %w, dims = [1] : (tensor<40xf64>) -> tensor<60x40xf64>
  %3 = stablehlo.exponential %c : tensor<60x40xf64>
  %4 = stablehlo.add %3, %y : tensor<60x40xf64>
  %5 = stablehlo.tanh %4 : tensor<60x40xf64>
  return %2, %5 : tensor<60x50xf32>, tensor<60x40xf64>
}
"""


@pytest.mark.parametrize("threads", ["1", "2"])
def test_row_vector_broadcasts(threads, monkeypatch):
    # A vector broadcast over rows: tiled into a chunk-long buffer when only
    # exact ops read it (subtract), left strided (chunks of rows) when a
    # transcendental reads it (exp of float64: numpy's loops may differ
    # between strided and contiguous operands).
    rng = np.random.default_rng(4)
    args = [rng.standard_normal((60, 50)).astype(np.float32), rng.standard_normal(50).astype(np.float32),
            rng.standard_normal(40), rng.standard_normal((60, 40))]
    program, got, want = _run_both(TILED, args, monkeypatch, threads)
    chains = _fused_steps(program)
    assert len(chains) == 2
    views = [c._layout([np.asarray(a) for a in inputs])
             for c, inputs in zip(chains, [(args[0], np.broadcast_to(args[1], (60, 50))),
                                           (np.broadcast_to(args[2], (60, 40)), args[3])])]
    assert [v[3] for v in views] == [False, True]   # flat (tiled), rows
    assert any(views[0][1])
    _assert_same_bits(got, want, "tiled")


ALIASED = f"""
func.func @main(%a: tensor<{N}xui32>, %b: tensor<{N}xui32>) -> (tensor<{N}xf32>, tensor<{N}xui32>) {{
  %t = stablehlo.add %a, %b : tensor<{N}xui32>
  %v = stablehlo.bitcast_convert %t : (tensor<{N}xui32>) -> tensor<{N}xf32>
  %w = stablehlo.xor %t, %b : tensor<{N}xui32>
  %r = stablehlo.multiply %v, %v : tensor<{N}xf32>
  %o = stablehlo.or %w, %a : tensor<{N}xui32>
  %u = stablehlo.and %o, %b : tensor<{N}xui32>
  return %r, %u : tensor<{N}xf32>, tensor<{N}xui32>
}}
"""


def test_no_update_in_place_of_a_value_a_kernel_may_view(monkeypatch):
    # %t dies at the xor, but bitcast_convert's result is a view of it: the
    # xor must not write over %t (the or may write over %w; the and, stored,
    # writes straight into its output).
    # (The numpy path's buffer reuse: without the block machine, which runs
    # this chain whole.)
    monkeypatch.setenv("STABLEHLO_REF_CHAIN_VM", "0")
    rng = np.random.default_rng(5)
    args = [rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32) for _ in range(2)]
    program, got, want = _run_both(ALIASED, args, monkeypatch)
    (chain,) = _fused_steps(program)
    assert any(m.inplace is not None for m in chain.plan)
    xor = [m for m in chain.plan if m.op.name == "stablehlo.xor"][0]
    assert xor.inplace is None
    (land,) = [m for m in chain.plan if m.op.name == "stablehlo.and"]
    assert land.direct and land.inplace is None
    _assert_same_bits(got, want, "aliased")


DIRECT = f"""func.func @main(%x: {_t('f32')}, %y: {_t('f32')}) -> ({_t('f32')}, {_t('f32')}, {_t('f32')}) {{
  %m = stablehlo.multiply %x, %x : {_t('f32')}
  %s = stablehlo.add %m, %y : {_t('f32')}
  %e = stablehlo.exponential %s : {_t('f32')}
  %t = stablehlo.tanh %e : {_t('f32')}
  %r = stablehlo.subtract %t, %x : {_t('f32')}
  return %m, %e, %r : {_t('f32')}, {_t('f32')}, {_t('f32')}
}}"""


@pytest.mark.parametrize("threads", ["1", "2"])
def test_stored_values_made_in_their_output(threads, monkeypatch):
    # %m, %r (ufunc members) and %e (a fastmath kernel, KernelInfo.into) are
    # returned: each chunk of theirs is computed in its chunk of the output.
    # %m dies at the add, a ufunc that would otherwise write its result over
    # %m's chunk: it must not, %m's chunk is the output.
    rng = np.random.default_rng(9)
    args = [_special_inputs("f32", rng), _special_inputs("f32", rng)]
    program, got, want = _run_both(DIRECT, args, monkeypatch, threads)
    (chain,) = _fused_steps(program)
    direct = {m.op.name for m in chain.plan if m.direct}
    assert direct == {"stablehlo.multiply", "stablehlo.exponential", "stablehlo.subtract"}
    assert all(m.inplace is None for m in chain.plan if m.op.name == "stablehlo.add")
    _assert_same_bits(got, want, "direct")


def test_helpers_run_chunks_concurrently(monkeypatch):
    # Both threads are inside a chunk at the same time (the barrier would
    # time out otherwise); every chunk runs exactly once.
    barrier = threading.Barrier(2, timeout=30)
    seen = []

    def run(lo, hi):
        if lo < 2:
            barrier.wait()
        seen.append((lo, threading.current_thread().name))
    pool._run_shared(run, [(i, i + 1) for i in range(40)], 2)
    assert sorted(lo for lo, _ in seen) == list(range(40))
    assert len({name for lo, name in seen if lo < 2}) == 2


@pytest.mark.parametrize("et", ["ui8", "ui32", "ui64", "i8", "i32", "i64"])
def test_shifts_by_broadcast_amounts(et, monkeypatch):
    # Amounts broadcast from 0-d constants take one ufunc call with a bound
    # scalar (ops/elementwise.py invariant_ufunc); amounts >= the width (and
    # negative ones, huge as unsigned patterns) must still give the kernel's
    # results: 0 for the logical shifts, the sign fill for the arithmetic one.
    bits = int(et.lstrip("ui"))
    amounts = [0, 1, bits - 1, bits, bits + 1, 2 * bits + 3] + ([-1, -bits] if et[0] == "i" else [])
    t = _t(et)
    lines, outs = [], []
    for k, a in enumerate(amounts):
        lines.append(f"    %c{k} = stablehlo.constant dense<{a}> : tensor<{et}>")
        lines.append(f"    %b{k} = stablehlo.broadcast_in_dim %c{k}, dims = [] : (tensor<{et}>) -> {t}")
        for op in ("shift_left", "shift_right_logical", "shift_right_arithmetic"):
            lines.append(f"    %{op}{k} = stablehlo.{op} %x, %b{k} : {t}")
            lines.append(f"    %s{op}{k} = stablehlo.xor %{op}{k}, %y : {t}")
            outs.append(f"%s{op}{k}")
    text = (f"func.func @main(%x: {t}, %y: {t}) -> ({', '.join([t] * len(outs))}) {{\n"
            + "\n".join(lines) + f"\n    return {', '.join(outs)} : {', '.join([t] * len(outs))}\n}}\n")
    rng = np.random.default_rng(6)
    args = [_special_inputs(et, rng), _special_inputs(et, rng)]
    program, got, want = _run_both(text, args, monkeypatch)
    (chain,) = _fused_steps(program)
    assert any(m.bind is not None for m in chain.plan)
    _assert_same_bits(got, want, f"shifts {et}")


def test_erf_inv_composite_fuses(monkeypatch):
    # JAX serializes erf_inv for plugins as a composite with a direct kernel
    # (jax.random.normal): it fuses with the multiply after it.
    text = f"""
func.func @main(%x: tensor<{N}xf32>) -> tensor<{N}xf32> {{
  %0 = stablehlo.composite "chlo.erf_inv" %x {{decomposition = @erf_inv}} : (tensor<{N}xf32>) -> tensor<{N}xf32>
  %c = stablehlo.constant dense<1.41421354> : tensor<f32>
  %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<{N}xf32>
  %1 = stablehlo.multiply %b, %0 : tensor<{N}xf32>
  return %1 : tensor<{N}xf32>
}}
func.func private @erf_inv(%x: tensor<{N}xf32>) -> tensor<{N}xf32> {{
  %0 = chlo.erf_inv %x : tensor<{N}xf32> -> tensor<{N}xf32>
  return %0 : tensor<{N}xf32>
}}
"""
    x = np.random.default_rng(7).uniform(-1, 1, N).astype(np.float32)
    x[:6] = [1.0, -1.0, 0.0, -0.0, np.nan, 2.0]
    program, got, want = _run_both(text, [x], monkeypatch, "2")
    (chain,) = _fused_steps(program)
    assert [m.op.name for m in chain.plan] == ["stablehlo.composite", "stablehlo.broadcast_in_dim",
                                               "stablehlo.multiply"]
    _assert_same_bits(got, want, "erf_inv composite")


def test_fold_and_fusion_together(monkeypatch):
    # Folding turns the broadcasts of scalar constants into plan constants of
    # one value (stride 0): fused chains take them as invariant 0-d values,
    # as they took a broadcast member's value -- hoisted, bound as shift
    # amounts, never chunked -- and the results stay the plain plan's bits.
    monkeypatch.setattr(compiler, "_FOLD_ENABLED", True)
    lines, x0, x1, k = [], "%a0", "%a1", 0
    for r in (13, 15, 26, 6):
        k += 1
        lines += [f"    %s{k} = stablehlo.add {x0}, {x1} : tensor<{N}xui32>",
                  f"    %c{k} = stablehlo.constant dense<{r}> : tensor<ui32>",
                  f"    %bc{k} = stablehlo.broadcast_in_dim %c{k}, dims = [] : (tensor<ui32>) -> tensor<{N}xui32>",
                  f"    %l{k} = stablehlo.shift_left {x1}, %bc{k} : tensor<{N}xui32>",
                  f"    %x{k} = stablehlo.xor %s{k}, %l{k} : tensor<{N}xui32>"]
        x0, x1 = f"%s{k}", f"%x{k}"
    t = f"tensor<{N}xui32>"
    text = (f"func.func @main(%a0: {t}, %a1: {t}) -> ({t}, {t}) {{\n" + "\n".join(lines)
            + f"\n    return {x0}, {x1} : {t}, {t}\n}}\n")
    rng = np.random.default_rng(1)
    args = [rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32) for _ in range(2)]
    program, got, _ = _run_both(text, args, monkeypatch, "2")
    (chain,) = _fused_steps(program)
    assert [m.op.name for m in chain.plan] == ["stablehlo.add", "stablehlo.shift_left",
                                               "stablehlo.xor"] * 4
    assert all(m.bind is not None for m in chain.plan if m.op.name == "stablehlo.shift_left")
    assert len(chain.one_value_inputs) == 4 and len(chain.chunked_inputs) == 2
    monkeypatch.setattr(compiler, "_FOLD_ENABLED", False)
    monkeypatch.setenv("STABLEHLO_REF_FUSION", "0")
    want = si.compile(text).run(*args)   # no folding, no fusion
    _assert_same_bits(got, want, "folded and fused")

    # A chain fed by constants only is folded away whole; what is left
    # still gives the plain plan's bits.
    monkeypatch.setattr(compiler, "_FOLD_ENABLED", True)
    monkeypatch.delenv("STABLEHLO_REF_FUSION")
    text = build_chain(0 * 101 + len("f32"), "f32")
    args = [_special_inputs("f32", np.random.default_rng(0)) for _ in range(2)]
    got = si.compile(text).run(*args)
    monkeypatch.setattr(compiler, "_FOLD_ENABLED", False)
    monkeypatch.setenv("STABLEHLO_REF_FUSION", "0")
    _assert_same_bits(got, si.compile(text).run(*args), "constant-fed chain")


def test_real_thresholds_and_large_array(monkeypatch):
    # The shipped thresholds, a million elements, several threads.
    monkeypatch.undo()
    n = 1_000_003
    text = f"""
func.func @main(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{
  %0 = stablehlo.tanh %x : tensor<{n}xf32>
  %1 = stablehlo.multiply %x, %x : tensor<{n}xf32>
  %2 = stablehlo.negate %1 : tensor<{n}xf32>
  %3 = stablehlo.exponential %2 : tensor<{n}xf32>
  %4 = stablehlo.multiply %0, %3 : tensor<{n}xf32>
  %5 = stablehlo.sine %x : tensor<{n}xf32>
  %6 = stablehlo.add %4, %5 : tensor<{n}xf32>
  return %6 : tensor<{n}xf32>
}}
"""
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    x[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, 3e38, -3e38]
    program, got, want = _run_both(text, [x], monkeypatch, "2")
    (chain,) = _fused_steps(program)
    assert chain.size == n
    _assert_same_bits(got, want, "large")


def test_tracing_sees_every_original_op(monkeypatch):
    # A tracer runs the unfused steps: every op with its own values.
    text = build_chain(5, "f32")
    args = [_special_inputs("f32", np.random.default_rng(5)) for _ in range(2)]
    program = si.compile(text)
    program.run(*args)
    assert _fused_steps(program)
    seen = []

    class Recorder:
        def before(self, op, inputs, depth):
            pass

        def after(self, op, results, depth):
            seen.append(op.name)

    program.run(*args, tracer=Recorder())
    n_ops = sum(1 for line in text.splitlines() if " = " in line and "constant" not in line)
    assert len(seen) == n_ops
    assert "fusion" not in seen
    with trace.use_tracer(Recorder()):
        seen.clear()
        program.run(*args)
    assert len(seen) == n_ops


def test_kernel_error_names_the_member_op(monkeypatch):
    text = f"""
func.func @main(%x: tensor<{N}xf32>) -> tensor<{N}xf32> {{
  %0 = stablehlo.sine %x : tensor<{N}xf32> loc("first.py":1:2)
  %1 = stablehlo.cosine %0 : tensor<{N}xf32> loc("second.py":3:4)
  %2 = stablehlo.add %1, %x : tensor<{N}xf32> loc("third.py":5:6)
  return %2 : tensor<{N}xf32>
}}
"""
    # (sine and cosine as kernel members, not FM instructions of a block
    # machine run: tests/test_chainvm.py checks those)
    monkeypatch.setattr(chainvm, "_FM_LOOPS", ())
    program = si.compile(text)
    x = np.ones(N, np.float32)
    program.run(x)
    (chain,) = _fused_steps(program)
    calls = []

    def broken(a):
        calls.append(a.shape)
        if len(calls) == 3:
            raise ValueError("boom")
        return a

    chain.plan[1].fn, chain.plan[1].ufunc = broken, None
    chain._chunk_fn = chain._generate()
    with pytest.raises(ExecutionError) as e:
        program.run(x)
    assert "stablehlo.cosine at second.py:3:4: ValueError: boom" in str(e.value)
    assert e.value.op_name == "stablehlo.cosine" and e.value.location == "second.py:3:4"


def test_helpers_stop_on_interrupt(monkeypatch):
    # An exception in the calling thread (Ctrl-C, the execute timeout) ends the
    # call; the helpers skip the chunks left and the pool stays usable.
    monkeypatch.setenv("STABLEHLO_REF_THREADS", "2")
    done = []

    def run(lo, hi):
        done.append(lo)
        if threading.current_thread() is threading.main_thread() and len(done) > 3:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        pool._run_shared(run, [(i, i + 1) for i in range(1000)], 2)
    assert len(done) < 1000
    out = []
    pool._run_shared(lambda lo, hi: out.append(lo), [(i, i + 1) for i in range(50)], 2)
    assert sorted(out) == list(range(50))


def test_fusion_off_switch(monkeypatch):
    monkeypatch.setenv("STABLEHLO_REF_FUSION", "0")
    program = si.compile(build_chain(1, "f32"))
    program.run(*[_special_inputs("f32", np.random.default_rng(0)) for _ in range(2)])
    assert not _fused_steps(program)


def test_thread_count(monkeypatch):
    monkeypatch.setenv("STABLEHLO_REF_THREADS", "3")
    assert pool.thread_count() == 3
    monkeypatch.setenv("STABLEHLO_REF_THREADS", "0")
    assert pool.thread_count() == 1
    monkeypatch.delenv("STABLEHLO_REF_THREADS")
    assert 1 <= pool.thread_count() <= pool.MAX_DEFAULT_THREADS


@pytest.mark.parametrize("src", ["i8", "i32", "i64", "ui16", "ui64"])
def test_stored_integer_converts_write_into_their_output(src, monkeypatch):
    # An int -> int convert whose value is returned writes its chunk of the
    # output directly (KernelInfo.into: numpy's unsafe cast, as astype):
    # wrapping and sign extension as unfused, for every target width.
    targets = [et for et in INTS if et != src]
    t = _t(src)
    lines = [f"    %s = stablehlo.add %x, %y : {t}"]
    outs = []
    for k, et in enumerate(targets):
        lines.append(f"    %c{k} = stablehlo.convert %s : ({t}) -> {_t(et)}")
        outs.append((f"%c{k}", _t(et)))
    text = (f"func.func @main(%x: {t}, %y: {t}) -> ({', '.join(o[1] for o in outs)}) {{\n"
            + "\n".join(lines) + f"\n    return {', '.join(o[0] for o in outs)} : "
            + f"{', '.join(o[1] for o in outs)}\n}}\n")
    rng = np.random.default_rng(13)
    args = [_special_inputs(src, rng), _special_inputs(src, rng)]
    program, got, want = _run_both(text, args, monkeypatch)
    (chain,) = _fused_steps(program)
    assert all(m.direct for m in chain.plan if m.op.name == "stablehlo.convert")
    _assert_same_bits(got, want, f"converts from {src}")


def test_a_lone_kernel_that_shares_its_operand_is_not_fused(monkeypatch):
    # A float32 transcendental alone (ops/fastmath.f32_kernel: it splits a
    # large operand among the pool's threads itself, KernelInfo.shares)
    # runs unfused, in one call; with another op after it, it is a member.
    n = 4096
    alone = f"""
func.func @main(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{
  %0 = stablehlo.tanh %x : tensor<{n}xf32>
  return %0 : tensor<{n}xf32>
}}
"""
    chained = alone.replace("return %0", f"%1 = stablehlo.negate %0 : tensor<{n}xf32>\n"
                                          "  return %1")
    x = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    for text, fused in ((alone, 0), (chained, 1)):
        program, got, want = _run_both(text, [x], monkeypatch, "2")
        assert len(_fused_steps(program)) == fused
        _assert_same_bits(got, want, text)


def _shared_chain(monkeypatch):
    """A chain the helpers may share (a transcendental), two threads, run
    once (its first call: planned, shared, not a trial): (program, input,
    result, the fused chain)."""
    n = 4096
    text = f"""
func.func @main(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{
  %0 = stablehlo.tanh %x : tensor<{n}xf32>
  %1 = stablehlo.exponential %0 : tensor<{n}xf32>
  return %1 : tensor<{n}xf32>
}}
"""
    monkeypatch.setenv("STABLEHLO_REF_THREADS", "2")
    program = si.compile(text)
    x = np.random.default_rng(9).standard_normal(n).astype(np.float32)
    want = program.run(x)
    (chain,) = _fused_steps(program)
    return program, x, want, chain


@pytest.mark.parametrize("alone_faster", [True, False])
def test_sharing_trials_pick_the_faster_way(alone_faster, monkeypatch):
    # Calls 2 to 1 + SHARE_TRIALS run alone and shared in turn, timed; later
    # calls take the way whose best trial was faster. The chunk bounds are
    # the same either way, and so are the results.
    program, x, want, chain = _shared_chain(monkeypatch)
    calls = []
    real = fusion.run_chunks
    now = [0]

    def recording(run, bounds, threads=None):
        # a run takes 1 ms on the clock below, 2 ms the slower way
        calls.append((threads, tuple(bounds)))
        now[0] += 2_000_000 if (threads == 1) != alone_faster else 1_000_000
        return real(run, bounds, threads)
    monkeypatch.setattr(fusion, "run_chunks", recording)
    monkeypatch.setattr(fusion, "perf_counter_ns", lambda: now[0])
    for _ in range(fusion.SHARE_TRIALS + 3):
        _assert_same_bits(program.run(x), want, "trial")
    threads = [t for t, _ in calls]
    assert threads[:fusion.SHARE_TRIALS] == [1, 2] * (fusion.SHARE_TRIALS // 2)
    assert chain._share is (not alone_faster)
    assert set(threads[fusion.SHARE_TRIALS:]) == {1 if alone_faster else 2}
    assert len({b for _, b in calls}) == 1


def test_sharing_trials_are_tried_again_after_growing_gaps(monkeypatch):
    # A decision is tried again RETRY_FIRST calls later, then after twice as
    # many calls (up to RETRY_MAX): a way that was slower in a disturbed
    # moment gets taken when it is faster.
    monkeypatch.setattr(fusion, "RETRY_FIRST", 3)
    monkeypatch.setattr(fusion, "RETRY_MAX", 5)
    program, x, want, chain = _shared_chain(monkeypatch)
    calls = []
    real = fusion.run_chunks
    now = [0]
    alone_faster = [True]   # the first trials see the helpers disturbed

    def recording(run, bounds, threads=None):
        calls.append(threads)
        now[0] += 2_000_000 if (threads == 1) != alone_faster[0] else 1_000_000
        return real(run, bounds, threads)
    monkeypatch.setattr(fusion, "run_chunks", recording)
    monkeypatch.setattr(fusion, "perf_counter_ns", lambda: now[0])
    trials = [1, 2] * (fusion.SHARE_TRIALS // 2)

    def run(k):
        for _ in range(k):
            _assert_same_bits(program.run(x), want, "trial")

    run(fusion.SHARE_TRIALS)
    assert calls == trials and chain._share is False
    alone_faster[0] = False
    run(2)                            # the decision's gap: RETRY_FIRST - 1 calls
    assert calls[-2:] == [1, 1]
    calls.clear()
    run(fusion.SHARE_TRIALS)          # then the trials again
    assert calls == trials and chain._share is True
    calls.clear()
    run(5)                            # the gap doubled (6), at most RETRY_MAX (5)
    assert calls == [2] * 4 + [1]     # 4 calls the decided way, then a trial
    assert chain._share is None
