"""Scalar while loops on the block machine (loopvm.py, _chains.run_loop).

Hypothesis-drawn loop programs (carries and captures of every machine type,
bodies of every machine op, edge values: NaN payloads, -0, integer extremes,
shift amounts beyond the bit width, zero iterations) run three ways bit for
bit: as one C loop, as loopgen's generated Python (the module not built, and
``STABLEHLO_REF_CHAIN_VM=0``) and on the plain plan. Also: JAX's fori_loop,
while_loop and scan-with-carry patterns, loops the machine does not take,
a deadline and Ctrl-C stopping a C loop, bad programs raising.
"""

from __future__ import annotations

import functools
import io
import signal
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testkit import assert_same_bits, loop_states, run_threads

import stablehlo_interpreter as shi
from stablehlo_interpreter import chainvm, loopgen, loopvm

built = pytest.mark.skipif(chainvm._chains is None, reason="_chains not built")

NP = {"i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
      "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64,
      "f32": np.float32, "f64": np.float64}
TYPES = list(NP)
FLOATS = ("f32", "f64")
DIRECTIONS = ["EQ", "NE", "LT", "LE", "GT", "GE"]
# The float32 functions of loop programs (OP_MATH), with their float64 detour
FUNCTIONS = {"sine": np.sin, "cosine": np.cos, "tanh": np.tanh, "exponential": np.exp,
             "log": np.log, "logistic": lambda x: 1.0 / (1.0 + np.exp(-x)),
             "exponential_minus_one": np.expm1, "log_plus_one": np.log1p}


@pytest.fixture(autouse=True)
def generate_now(monkeypatch):
    """Loops compiled at their first iteration; generation failures raise."""
    monkeypatch.setattr(loopgen, "ENABLED", True)
    monkeypatch.setattr(loopgen, "GENERATE_AFTER", 0)
    monkeypatch.setattr(loopgen, "STRICT", True)
    monkeypatch.delenv("STABLEHLO_REF_CHAIN_VM", raising=False)


def _how(program):
    """How the program's loops ran: 'vm', 'python' or 'plan' (per loop)."""
    out = []
    for s in loop_states(program):
        if s.compiled is None:
            out.append("plan")
        else:
            out.append("vm" if s.source.startswith("# _chains.run_loop") else "python")
    return out


def _run(text, args, how, monkeypatch, numerics="accurate"):
    """Compile and run ``text`` one way: 'vm', 'python' (generated Python,
    the module missing), 'switch' (generated Python, STABLEHLO_REF_CHAIN_VM=0)
    or 'plan'. Returns the results and how the loops ran."""
    with monkeypatch.context() as m:
        if how == "python":
            m.setattr(chainvm, "_chains", None)
        elif how == "switch":
            m.setenv("STABLEHLO_REF_CHAIN_VM", "0")
        elif how == "plan":
            m.setattr(loopgen, "ENABLED", False)
        program = shi.compile(text, numerics=numerics)
        out = program.run(*args)
    return (list(out) if isinstance(out, (list, tuple)) else [out]), _how(program)


def _t(e):
    return f"tensor<{e}>"


def _bits_literal(value):
    """An MLIR literal with every bit of a 0-d value (hex for floats)."""
    if value.dtype == np.bool_:
        return "true" if value else "false"
    if value.dtype.kind == "f":
        return hex(int(value.reshape(1).view(f"u{value.itemsize}")[0]))
    return str(int(value))


def _edge_values(e):
    dt = np.dtype(NP[e])
    if dt == np.bool_:
        return [np.bool_(False), np.bool_(True)]
    if dt.kind == "f":
        u = np.dtype(f"u{dt.itemsize}")
        fi = np.finfo(dt)
        payload = np.array([0x7FC00001, 0xFFC12345] if dt.itemsize == 4 else
                           [0x7FF8000000000001, 0xFFF8000000ABCDEF], u).view(dt)
        return list(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, fi.max, fi.tiny,
                              fi.smallest_subnormal, 1.0, -1.5, 0.999], dt)) + list(payload)
    info = np.iinfo(dt)
    bits = dt.itemsize * 8
    vals = [info.min, info.max, 0, 1, 2, bits - 1, bits, bits + 3] + \
        ([-1, -bits] if info.min < 0 else [])
    return [dt.type(v) for v in vals]


@st.composite
def values(draw, e):
    dt = np.dtype(NP[e])
    if draw(st.booleans()) or dt == np.bool_:
        return draw(st.sampled_from(_edge_values(e)))
    u = np.dtype(f"u{dt.itemsize}")
    return np.array(draw(st.integers(0, 2 ** (8 * dt.itemsize) - 1)), u).view(dt)[()]


def _ops_for(pool):
    """(name, operand types, result type, attrs) of every op form on the
    types the pool holds."""
    forms = []
    have = sorted(set(pool))
    for e in have:
        f, b = e in FLOATS, e == "i1"
        if not b:
            for op in ("add", "subtract", "multiply", "maximum", "minimum", "negate", "clamp"):
                n = 1 if op == "negate" else 3 if op == "clamp" else 2
                forms.append((op, [e] * n, e, ""))
            if not e.startswith("ui"):
                forms.append(("abs", [e], e, ""))
        if f:
            forms.append(("divide", [e, e], e, ""))
        else:
            forms += [(op, [e, e], e, "") for op in ("and", "or", "xor")] + [("not", [e], e, "")]
        if e == "f32":
            forms += [(fn, [e], e, "") for fn in FUNCTIONS]
        if not f and not b:
            forms += [(op, [e, e], e, "") for op in
                      ("shift_left", "shift_right_logical", "shift_right_arithmetic")]
        ctypes = ["FLOAT", "TOTALORDER"] if f else ["UNSIGNED"] if b else \
            ["UNSIGNED" if e.startswith("ui") else "SIGNED"]
        for c in ctypes:
            for d in DIRECTIONS:
                forms.append(("compare", [e, e], "i1",
                              f"{{comparison_direction = #stablehlo<comparison_direction {d}>, "
                              f"compare_type = #stablehlo<comparison_type {c}>}} "))
        if "i1" in have:
            forms.append(("select", ["i1", e, e], e, ""))
        for d in TYPES:
            if d != e:
                forms.append(("convert", [e], d, ""))
            if d != e and "i1" not in (d, e) and \
                    np.dtype(NP[d]).itemsize == np.dtype(NP[e]).itemsize:
                forms.append(("bitcast_convert", [e], d, ""))
    return forms


def _recent(pool, e):
    """The pool's values of type ``e``, the latest first (what hypothesis
    draws first: bodies whose ops feed each other and the carries)."""
    return [v for v, t in reversed(pool.items()) if t == e]


@st.composite
def loop_programs(draw):
    """A while loop of a counter and drawn carries, captures and constants;
    its MLIR text and arguments."""
    carries = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=4))
    caps = draw(st.lists(st.sampled_from(TYPES), max_size=3))
    n = draw(st.sampled_from([0, 1, 2, 7, 40]))
    pool = {}   # name -> type
    lines = []
    for k, e in enumerate(carries):
        pool[f"%x{k}"] = e
    for j, e in enumerate(caps):
        pool[f"%k{j}"] = e
    pool["%i"] = "i32"
    for j in range(draw(st.integers(0, 2))):
        e = draw(st.sampled_from(TYPES))
        v = draw(values(e))
        lines.append(f"      %c{j} = stablehlo.constant dense<{_bits_literal(np.asarray(v))}> : "
                     f"{_t(e)}")
        pool[f"%c{j}"] = e
    for j in range(draw(st.integers(1, 10))):
        name, ins, rt, attrs = draw(st.sampled_from(_ops_for(pool.values())))
        args = [draw(st.sampled_from(_recent(pool, e))) for e in ins]
        lines.append(f'      %v{j} = "stablehlo.{name}"({", ".join(args)}) {attrs}: '
                     f'({", ".join(map(_t, ins))}) -> {_t(rt)}')
        pool[f"%v{j}"] = rt
    results = [draw(st.sampled_from(_recent(pool, e))) for e in carries]
    # Every op's value of the last iteration is a result too (a carry the
    # body does not read).
    made = [(v, t) for v, t in pool.items() if v.startswith("%v")]
    base = len(carries)
    carries = carries + [t for _, t in made]
    results += [v for v, _ in made]
    caps_args = [np.asarray(draw(values(e)), NP[e]) for e in caps]
    ctys = ", ".join(map(_t, carries))
    params = ", ".join(["%n: tensor<i32>"] + [f"%a{k}: {_t(e)}" for k, e in enumerate(carries)]
                       + [f"%k{j}: {_t(e)}" for j, e in enumerate(caps)])
    text = (
        f"func.func @main({params}) -> (tensor<i32>, {ctys}) {{\n"
        "  %z = stablehlo.constant dense<0> : tensor<i32>\n"
        f"  %r:{1 + len(carries)} = stablehlo.while(%i = %z, "
        + ", ".join(f"%x{k} = %a{k}" for k in range(len(carries)))
        + f") : tensor<i32>, {ctys}\n"
        "    cond {\n"
        "      %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
        "      stablehlo.return %p : tensor<i1>\n"
        "    } do {\n"
        "      %one = stablehlo.constant dense<1> : tensor<i32>\n"
        "      %i2 = stablehlo.add %i, %one : tensor<i32>\n"
        + "\n".join(lines) + "\n"
        f"      stablehlo.return %i2, {', '.join(results)} : tensor<i32>, {ctys}\n"
        "    }\n"
        f"  return {', '.join(f'%r#{k}' for k in range(1 + len(carries)))} : tensor<i32>, {ctys}\n"
        "}\n")
    args = [np.array(n, np.int32)] + [np.asarray(draw(values(e)), NP[e]) for e in carries[:base]] \
        + [np.zeros((), NP[e]) for e in carries[base:]] + caps_args
    return text, args


@built
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=loop_programs())
def test_drawn_loops_are_bit_identical_three_ways(case, monkeypatch):
    text, args = case
    want, how = _run(text, args, "plan", monkeypatch)
    assert how == ["plan"]
    got, how = _run(text, args, "vm", monkeypatch)
    assert how == ["vm"], text
    assert_same_bits(got, want)
    py, how = _run(text, args, "python", monkeypatch)
    assert how == ["python"]
    assert_same_bits(py, want)


def _all_forms_program(e):
    """One iteration computing every op form on operands of type ``e`` (and
    a predicate) from captures; each value is a result."""
    forms = [f for f in _ops_for([e, "i1"]) if set(f[1]) <= {e, "i1"} and e in f[1]]
    names = {e: ["%a", "%b", "%a"], "i1": ["%p"]}
    lines, rts = [], []
    for j, (name, ins, rt, attrs) in enumerate(forms):
        used = {e: 0, "i1": 0}
        args = []
        for t in ins:
            args.append(names[t][used[t] % len(names[t])])
            used[t] += 1
        lines.append(f'      %v{j} = "stablehlo.{name}"({", ".join(args)}) {attrs}: '
                     f'({", ".join(map(_t, ins))}) -> {_t(rt)}')
        rts.append(rt)
    ctys = ", ".join(map(_t, rts))
    return (
        f"func.func @main(%a: {_t(e)}, %b: {_t(e)}, %p: tensor<i1>, "
        + ", ".join(f"%y{j}: {_t(t)}" for j, t in enumerate(rts))
        + f") -> ({ctys}) {{\n"
        "  %z = stablehlo.constant dense<0> : tensor<i32>\n"
        f"  %r:{1 + len(rts)} = stablehlo.while(%i = %z, "
        + ", ".join(f"%x{j} = %y{j}" for j in range(len(rts))) + f") : tensor<i32>, {ctys}\n"
        "    cond {\n"
        "      %one = stablehlo.constant dense<1> : tensor<i32>\n"
        "      %q = stablehlo.compare LT, %i, %one, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
        "      stablehlo.return %q : tensor<i1>\n"
        "    } do {\n"
        "      %one = stablehlo.constant dense<1> : tensor<i32>\n"
        "      %i2 = stablehlo.add %i, %one : tensor<i32>\n"
        + "\n".join(lines) + "\n"
        f"      stablehlo.return %i2, {', '.join(f'%v{j}' for j in range(len(rts)))} : "
        f"tensor<i32>, {ctys}\n"
        "    }\n"
        f"  return {', '.join(f'%r#{j + 1}' for j in range(len(rts)))} : {ctys}\n"
        "}\n"), rts


@built
@pytest.mark.parametrize("e", TYPES)
def test_every_op_form_on_edge_pairs_is_bit_identical(e, monkeypatch):
    text, rts = _all_forms_program(e)
    with monkeypatch.context() as m:
        m.setattr(loopgen, "ENABLED", False)
        plan = shi.compile(text)
    vm = shi.compile(text)
    zeros = [np.zeros((), NP[t]) for t in rts]
    edges = _edge_values(e)
    for k, (x, y) in enumerate((x, y) for x in edges for y in edges):
        args = [np.asarray(x), np.asarray(y), np.bool_(k % 2)] + zeros
        with monkeypatch.context() as m:
            m.setattr(loopgen, "ENABLED", False)
            want = plan.run(*args)
        assert_same_bits(list(vm.run(*args)), list(want))
    assert _how(vm) == ["vm"]


@built
@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=loop_programs())
def test_drawn_loops_keep_the_spec_numerics_bits(case, monkeypatch):
    # The machine's ops are exact or one IEEE rounding: both modes share it.
    text, args = case
    want, _ = _run(text, args, "plan", monkeypatch, numerics="spec")
    got, how = _run(text, args, "vm", monkeypatch, numerics="spec")
    assert how == ["vm"]
    assert_same_bits(got, want)


SWAP = """
func.func @main(%n: tensor<i32>, %a: tensor<f32>, %b: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
  %z = stablehlo.constant dense<0> : tensor<i32>
  %r:3 = stablehlo.while(%i = %z, %x = %a, %y = %b) : tensor<i32>, tensor<f32>, tensor<f32>
    cond {
      %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %one = stablehlo.constant dense<1> : tensor<i32>
      %i2 = stablehlo.add %i, %one : tensor<i32>
      %s = stablehlo.add %x, %y : tensor<f32>
      stablehlo.return %i2, %y, %s : tensor<i32>, tensor<f32>, tensor<f32>
    }
  return %r#1, %r#2 : tensor<f32>, tensor<f32>
}
"""


@built
@pytest.mark.parametrize("n", [0, 1, 2, 30])
def test_carries_are_a_parallel_assignment(n, monkeypatch):
    # (x, y) <- (y, x + y): Fibonacci needs the old x and y in both
    args = [np.int32(n), np.float32(0), np.float32(1)]
    want, _ = _run(SWAP, args, "plan", monkeypatch)
    got, how = _run(SWAP, args, "vm", monkeypatch)
    assert how == ["vm"]
    assert_same_bits(got, want)
    a, b = 0.0, 1.0
    for _ in range(n):
        a, b = b, a + b
    assert (float(got[0]), float(got[1])) == (a, b)


@built
def test_the_switch_and_a_missing_module_keep_generated_python(monkeypatch):
    args = [np.int32(5), np.float32(0), np.float32(1)]
    want, _ = _run(SWAP, args, "vm", monkeypatch)
    for how in ("switch", "python"):
        got, ran = _run(SWAP, args, how, monkeypatch)
        assert ran == ["python"]
        assert_same_bits(got, want)
    monkeypatch.setattr(loopgen, "ENABLED", False)   # STABLEHLO_REF_FAST_LOOPS=0
    program = shi.compile(SWAP)
    assert_same_bits(list(program.run(*args)), want)
    assert _how(program) == ["plan"]


@built
def test_tracing_and_validation_use_the_plan(monkeypatch):
    from stablehlo_interpreter import compiler
    from stablehlo_interpreter.trace import Recorder
    args = [np.int32(6), np.float32(0), np.float32(1)]
    program = shi.compile(SWAP)
    rec = Recorder()
    want = list(program.run(*args, tracer=rec))
    assert _how(program) == ["plan"]
    assert sum(1 for e in rec.events if e[0].name == "stablehlo.add") >= 12
    monkeypatch.setattr(compiler, "_DEBUG_VALIDATE", True)
    program.run(*args)
    assert _how(program) == ["plan"]
    monkeypatch.setattr(compiler, "_DEBUG_VALIDATE", False)
    assert_same_bits(list(program.run(*args)), want)
    assert _how(program) == ["vm"]


def test_loops_the_machine_does_not_run_stay_generated_python(monkeypatch):
    # a transcendental the machine does not compute (tan; sine of float64),
    # an array carry: loopgen's code
    tan = SWAP.replace("%s = stablehlo.add %x, %y : tensor<f32>",
                       "%s = stablehlo.tan %x : tensor<f32>")
    sin64 = SWAP.replace("%s = stablehlo.add %x, %y : tensor<f32>",
                         "%q = stablehlo.convert %x : (tensor<f32>) -> tensor<f64>\n"
                         "      %q2 = stablehlo.sine %q : tensor<f64>\n"
                         "      %s = stablehlo.convert %q2 : (tensor<f64>) -> tensor<f32>")
    arr = SWAP.replace("tensor<f32>", "tensor<2xf32>")
    for text in (tan, sin64, arr):
        args = [np.int32(5)] + [np.ones((2,) if "2xf32" in text else (), np.float32)] * 2
        got, how = _run(text, args, "vm", monkeypatch)
        assert how == ["python"]
        want, _ = _run(text, args, "plan", monkeypatch)
        assert_same_bits(got, want)


def test_jax_loops_run_on_the_machine(monkeypatch):
    jax = pytest.importorskip("jax")
    if chainvm._chains is None:
        pytest.skip("_chains not built")
    from jax import lax

    def xorshift(i, c):
        x, acc = c
        x = x ^ (x << 13)
        x = x ^ (x >> 17)
        x = x ^ (x << 5)
        u = lax.bitcast_convert_type((x >> 9) | np.uint32(0x3F800000), np.float32) - 1.0
        return x, acc + u

    cases = [
        (lambda x: lax.fori_loop(0, 100, lambda i, c: c * 0.999 + 1.0, x), (np.float32(1),)),
        (lambda x: lax.while_loop(lambda c: c[0] < 100,
                                  lambda c: (c[0] + 1, c[1] * 0.999 + 1.0), (np.int32(0), x)),
         (np.float32(1),)),
        (lambda x: lax.fori_loop(0, 100, xorshift, (x, np.float32(0))), (np.uint32(2463534242),)),
        (lambda x: lax.scan(lambda c, _: (c * 0.5 + 1.0, None), x, None, length=100)[0],
         (np.float32(3),)),
        (lambda x: lax.fori_loop(0, 0, lambda i, c: c + 1, x), (np.int32(7),)),
        # scan with inputs and outputs: one element of xs read, of ys written per step
        (lambda x, xs: lax.scan(lambda c, v: (c * 0.5 + v, c), x, xs),
         (np.float32(0), np.linspace(-3, 3, 50, dtype=np.float32))),
        (lambda x, xs: lax.scan(lambda c, v: (c ^ v, (c >> 3, c < v)), x, xs, reverse=True),
         (np.uint32(7), np.arange(40, dtype=np.uint32) * np.uint32(2654435761))),
        # a fori_loop writing an array it carries at a computed (clamped) index
        (lambda ys: lax.fori_loop(
            0, 30, lambda i, y: lax.dynamic_update_index_in_dim(
                y, y[i & 3] + i, i * 3 - 10, 0), ys),
         (np.arange(10, dtype=np.int32),)),
    ]
    for fn, args in cases:
        text = jax.jit(fn).lower(*args).as_text()
        flat = [np.asarray(a) for a in args]
        want, _ = _run(text, flat, "plan", monkeypatch)
        got, how = _run(text, flat, "vm", monkeypatch)
        assert "vm" in how or how == [], text
        assert_same_bits(got, want)
        assert_same_bits(got, [np.asarray(x) for x in jax.tree.leaves(jax.jit(fn)(*args))])


ARRAYS = """
func.func @main(%n: tensor<i32>, %xs: tensor<5xf32>, %ys0: tensor<7xf32>, %off: tensor<IT>) -> (tensor<7xf32>, tensor<f32>) {
  %z = stablehlo.constant dense<0> : tensor<i32>
  %f = stablehlo.constant dense<0.0> : tensor<f32>
  %r:3 = stablehlo.while(%i = %z, %ys = %ys0, %acc = %f) : tensor<i32>, tensor<7xf32>, tensor<f32>
    cond {
      %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %one = stablehlo.constant dense<1> : tensor<i32>
      %i2 = stablehlo.add %i, %one : tensor<i32>
      %ii = stablehlo.convert %i : (tensor<i32>) -> tensor<IT>
      %k = stablehlo.add %ii, %off : tensor<IT>
      %x = stablehlo.dynamic_slice %xs, %k, sizes = [1] : (tensor<5xf32>, tensor<IT>) -> tensor<1xf32>
      %xr = stablehlo.reshape %x : (tensor<1xf32>) -> tensor<f32>
      %y = stablehlo.dynamic_slice %ys, %k, sizes = [1] : (tensor<7xf32>, tensor<IT>) -> tensor<1xf32>
      %yr = stablehlo.reshape %y : (tensor<1xf32>) -> tensor<f32>
      %s = stablehlo.add %xr, %yr : tensor<f32>
      %acc2 = stablehlo.add %acc, %s : tensor<f32>
      %u = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<1xf32>
      %ys2 = stablehlo.dynamic_update_slice %ys, %u, %k : (tensor<7xf32>, tensor<1xf32>, tensor<IT>) -> tensor<7xf32>
      %w = stablehlo.dynamic_slice READ, %off, sizes = [1] : (tensor<7xf32>, tensor<IT>) -> tensor<1xf32>
      %wr = stablehlo.reshape %w : (tensor<1xf32>) -> tensor<f32>
      %acc3 = stablehlo.add %acc2, %wr : tensor<f32>
      stablehlo.return %i2, %ys2, %acc3 : tensor<i32>, tensor<7xf32>, tensor<f32>
    }
  return %r#1, %r#2 : tensor<7xf32>, tensor<f32>
}
"""


@built
@pytest.mark.parametrize("it", ["i8", "i16", "i32", "i64", "ui8", "ui32", "ui64"])
def test_array_reads_and_writes_clamp_their_index(it, monkeypatch):
    text = ARRAYS.replace("IT", it).replace("READ", "%ys2")
    xs = np.array([1.5, -2.0, np.nan, 4.0, -0.0], np.float32)
    ys = np.linspace(-1, 1, 7).astype(np.float32)
    info = np.iinfo(NP[it])
    for off in sorted({info.min, -3, 0, 2, 5, info.max - 2, info.max} & set(
            range(int(info.min), int(info.max) + 1)) if info.bits <= 16 else
            {int(info.min), 0, 2, 5, int(info.max) - 2, int(info.max)} | (
                {-3} if info.min < 0 else set())):
        args = [np.int32(12), xs, ys, np.array(off, NP[it])]
        want, _ = _run(text, args, "plan", monkeypatch)
        got, how = _run(text, args, "vm", monkeypatch)
        assert how == ["vm"]
        assert_same_bits(got, want)
        assert_same_bits([ys], [np.linspace(-1, 1, 7).astype(np.float32)])   # not written


@built
def test_a_read_of_an_array_before_its_write_in_program_order_only(monkeypatch):
    # Read after the write, the old version would need a copy: generated Python.
    text = ARRAYS.replace("IT", "i32").replace("READ", "%ys")
    args = [np.int32(9), np.arange(5, dtype=np.float32), np.zeros(7, np.float32), np.int32(1)]
    got, how = _run(text, args, "vm", monkeypatch)
    assert how == ["python"]
    want, _ = _run(text, args, "plan", monkeypatch)
    assert_same_bits(got, want)


ENDLESS = SWAP.replace("%i2 = stablehlo.add %i, %one", "%i2 = stablehlo.subtract %i, %one")


@built
def test_a_deadline_stops_a_machine_loop(monkeypatch):
    from stablehlo_pjrt import interrupt
    monkeypatch.setattr(loopvm, "CHUNK_INSTRUCTIONS", 1 << 16)
    program = shi.compile(ENDLESS)
    with pytest.raises(shi.ExecutionError) as info:
        interrupt.run_limited(lambda: program.run(np.int32(1), np.float32(0), np.float32(1)),
                              0.3)
    e = info.value
    assert isinstance(e.__cause__, interrupt.ExecutionTimeout)
    assert e.op_name == "stablehlo.while" and "ExecutionTimeout" in str(e)
    assert _how(program) == ["vm"]


@built
def test_ctrl_c_stops_a_machine_loop(monkeypatch):
    program = shi.compile(ENDLESS)
    timer = threading.Timer(0.3, signal.raise_signal, (signal.SIGINT,))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            program.run(np.int32(1), np.float32(0), np.float32(1))
    finally:
        timer.cancel()
    assert _how(program) == ["vm"]


@built
def test_bad_loop_programs_raise():
    run_loop = chainvm._chains.run_loop
    i32, f32 = chainvm._TYPES[np.dtype(np.int32)], chainvm._TYPES[np.dtype(np.float32)]
    header = [loopvm._LMAGIC, 3, 1, 0, 2, 0, 0]
    types = [i32, i32, chainvm._BOOL]
    cmp = [chainvm.CMP, i32, 2, 2, 0, 1, 0, 0]

    def prog(words):
        return np.array(words, np.int32).tobytes()

    state = np.zeros(3, np.uint64)
    assert run_loop(prog(header + types + cmp), state, [], 10) is True   # 0 < 0 is false
    bad = [
        header[:5],                                           # short
        [0] + header[1:] + types + cmp,                       # magic
        header + types + cmp[:7],                             # length
        header[:4] + [0] + header[5:] + types + cmp,          # pred not bool
        header + types + [99] + cmp[1:],                      # op
        header + types + cmp[:3] + [7] + cmp[4:],             # dst out of range
        header + types + cmp[:4] + [-1] + cmp[5:],            # operand out of range
        header + types + [chainvm.ADD] + cmp[1:],             # types: add to a bool
        header[:5] + [1, 0] + types + cmp + [0, 2],           # move between types
        header[:6] + [1] + types + [77] + cmp,                # array type
        # a load from array 1 of 1, into a register of another type, by a float index
        header[:3] + [1] + header[4:6] + [1] + types + [f32] + cmp
        + [loopvm._LOAD, f32, i32, 0, 1, 1, 0, 0],
        header[:3] + [1] + header[4:6] + [1] + types + [f32] + cmp
        + [loopvm._LOAD, f32, i32, 0, 0, 1, 0, 0],
        header[:3] + [1] + header[4:6] + [1] + types + [i32] + cmp
        + [loopvm._STORE, i32, f32, 0, 1, 0, 0, 0],
    ]
    for words in bad:
        with pytest.raises(ValueError, match="bad program"):
            run_loop(prog(words), state, [], 10)   # checked before the arrays
    good = prog(header[:3] + [1] + header[4:6] + [1] + types + [i32] + cmp
                + [loopvm._STORE, i32, i32, 0, 1, 0, 0, 0])
    with pytest.raises(ValueError, match="arrays"):
        run_loop(good, state, [], 10)
    with pytest.raises(TypeError, match="writable"):
        run_loop(good, state, [np.zeros(4, np.int32).tobytes()], 10)
    with pytest.raises(ValueError, match="array 0 has"):
        run_loop(good, state, [np.zeros(4, np.int8)[1:]], 10)
    with pytest.raises(ValueError, match="array 0 has"):
        run_loop(good, state, [np.zeros(0, np.int32)], 10)
    with pytest.raises(ValueError, match="state"):
        run_loop(prog(header + types + cmp), np.zeros(2, np.uint64), [], 10)
    with pytest.raises(TypeError):
        run_loop(prog(header + types + cmp), state.tobytes(), [], 10)   # read-only
    with pytest.raises(ValueError, match="max_steps"):
        run_loop(prog(header + types + cmp), state, [], -1)


MATHS = SWAP.replace("%s = stablehlo.add %x, %y : tensor<f32>",
                     "%t = stablehlo.sine %x : tensor<f32>\n"
                     "      %q = stablehlo.convert %t : (tensor<f32>) -> tensor<i32>\n"
                     "      %q2 = stablehlo.convert %q : (tensor<i32>) -> tensor<f32>\n"
                     "      %s = stablehlo.add %q2, %y : tensor<f32>")


@built
@pytest.mark.parametrize("which", ["arrays", "maths"])
def test_mutated_loop_programs_raise_or_run_never_crash(which, monkeypatch):
    seen = []
    real = loopvm.LoopProgram.run
    monkeypatch.setattr(loopvm.LoopProgram, "run",
                        lambda self, *a: seen.append(self) or real(self, *a))
    if which == "arrays":
        text = ARRAYS.replace("IT", "i32").replace("READ", "%ys2")
        _run(text, [np.int32(3), np.ones(5, np.float32), np.ones(7, np.float32), np.int32(1)],
             "vm", monkeypatch)
    else:
        _run(MATHS, [np.int32(3), np.float32(2), np.float32(1)], "vm", monkeypatch)
    vm = seen[0]
    words = np.frombuffer(vm.program, np.int32)
    rng = np.random.default_rng(0)
    for _ in range(3000):
        w = words.copy()
        for k in rng.integers(0, w.size, rng.integers(1, 4)):
            w[k] = rng.choice([w[k] + 1, w[k] - 1, -1, 0, 7, 100, 101, 102, 103, 1 << 20,
                               rng.integers(-9, 99)])
        size = 8 * max(1, int(w[1]) if 0 < w[1] < 64 else 8)
        state = bytearray(size if rng.random() < 0.5 else   # a pause register at 0
                          rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        arrays = [np.ones(5, np.float32), np.ones(7, np.float32)][:max(0, min(2, int(w[6])))]
        try:
            assert run_loop_result(w, state, arrays) in (True, False)
        except (ValueError, TypeError):
            pass


def run_loop_result(words, state, arrays):
    return chainvm._chains.run_loop(words.tobytes(), state, arrays, 50)


# ---- float32 functions (OP_MATH) and their pauses ---------------------------

SCAN_FN = """
func.func @main(%xs: tensor<LENxET>) -> tensor<LENxET> {
  %z = stablehlo.constant dense<0> : tensor<i32>
  %ys0 = stablehlo.constant dense<0.0> : tensor<LENxET>
  %r:2 = stablehlo.while(%i = %z, %ys = %ys0) : tensor<i32>, tensor<LENxET>
    cond {
      %n = stablehlo.constant dense<LEN> : tensor<i32>
      %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %x = stablehlo.dynamic_slice %xs, %i, sizes = [1] : (tensor<LENxET>, tensor<i32>) -> tensor<1xET>
      %xr = stablehlo.reshape %x : (tensor<1xET>) -> tensor<ET>
      %y = stablehlo.FN %xr : tensor<ET>
      %u = stablehlo.reshape %y : (tensor<ET>) -> tensor<1xET>
      %ys2 = stablehlo.dynamic_update_slice %ys, %u, %i : (tensor<LENxET>, tensor<1xET>, tensor<i32>) -> tensor<LENxET>
      %one = stablehlo.constant dense<1> : tensor<i32>
      %i2 = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %i2, %ys2 : tensor<i32>, tensor<LENxET>
    }
  return %r#1 : tensor<LENxET>
}
"""


@functools.lru_cache(maxsize=None)
def _near_ties(name, count=12):
    """float32 inputs whose float64 function value lies within 2^12 float64
    ULPs of a float32 rounding boundary (well inside the machine's guard of
    2^15: every C library pauses there), found by a seeded search."""
    rng = np.random.default_rng(sum(map(ord, name)))
    lo, hi = (1e-3, 50.0) if name == "log" else (-0.99, 20.0) if name == "log_plus_one" \
        else (-9.0, 9.0)
    x = rng.uniform(lo, hi, 400_000).astype(np.float32)
    with np.errstate(all="ignore"):
        y = FUNCTIONS[name](x.astype(np.float64))
    low = y.view(np.uint64) & np.uint64((1 << 29) - 1)
    near = np.abs(low.astype(np.int64) - (1 << 28)) < (1 << 12)
    near &= np.abs(y) >= np.finfo(np.float32).tiny
    found = x[near][:count]
    assert found.size >= min(count, 4), name
    return tuple(found)


@functools.lru_cache(maxsize=None)
def _subnormal_ties(name, count=4):
    """float32 inputs whose float64 exp / logistic lies within 2^14 float64
    ULPs of a boundary between float32 subnormals (the machine's other
    rounding test, guard 2^15), from every float32 in [-103.5, -64)."""
    bits = np.arange(np.float32(64).view(np.uint32), np.float32(103.5).view(np.uint32),
                     dtype=np.uint32)
    x = -bits.view(np.float32)
    y = FUNCTIONS[name](x.astype(np.float64))
    s = y * 2.0 ** 149
    near = (np.abs(s - np.floor(s) - 0.5) <= 2.0 ** 14 * 2.0 ** -52 * s) & (s < 2 ** 23)
    found = x[near][:count]
    assert found.size >= 1, name
    return tuple(found)


def _count_pauses(monkeypatch):
    """A list that gets one entry per resumed OP_MATH pause."""
    pauses = []
    real = loopvm.LoopProgram.resume

    def resume(self, state):
        if int(np.frombuffer(state, np.int64, 1, self.pause)[0]):
            pauses.append(self)
        real(self, state)
    monkeypatch.setattr(loopvm.LoopProgram, "resume", resume)
    return pauses


@built
@pytest.mark.parametrize("numerics", ["accurate", "spec"])
@pytest.mark.parametrize("fn", list(FUNCTIONS))
def test_functions_with_near_ties_and_specials_are_bit_identical(fn, numerics, monkeypatch):
    # Near ties between ordinary values pause the C loop mid-run: the kernel
    # computes those, the loop resumes where it stopped.
    xs = [np.float32(v) for v in np.linspace(-3, 3, 20)] + list(_near_ties(fn))
    ties = len(xs) - 20
    if fn in ("exponential", "logistic"):   # results on the subnormals' grid
        xs += list(_subnormal_ties(fn)) + list(np.linspace(-110, -80, 40, dtype=np.float32))
        ties += len(_subnormal_ties(fn))
    xs += list(np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45,
                         1.1754942e-38, 3e38, -3e38, 88.7, 89.0, -87.0, -104.0, 1e-8, 5e-4],
                        np.float32))
    xs = np.array(xs + [np.array(0x7FC01234, np.uint32).view(np.float32)], np.float32)
    rng = np.random.default_rng(len(fn))
    xs = np.concatenate([xs, rng.integers(0, 2 ** 32, 40, dtype=np.uint64)
                         .astype(np.uint32).view(np.float32)])
    text = SCAN_FN.replace("FN", fn).replace("LEN", str(xs.size)).replace("ET", "f32")
    want, how = _run(text, [xs], "plan", monkeypatch, numerics)
    assert how == ["plan"]
    pauses = _count_pauses(monkeypatch)
    got, how = _run(text, [xs], "vm", monkeypatch, numerics)
    assert how == ["vm"]
    assert_same_bits(got, want)
    assert len(pauses) >= 4 + ties   # the near ties, NaNs and infinities
    if not (fn == "logistic" and numerics == "spec"):   # (spec's is exp's ties)
        only = np.array(xs[20:20 + ties])   # each near tie pauses
        pauses.clear()
        _run(SCAN_FN.replace("FN", fn).replace("LEN", str(only.size)).replace("ET", "f32"),
             [only], "vm", monkeypatch, numerics)
        assert len(pauses) == ties
    for way in ("python", "switch"):
        py, how = _run(text, [xs], way, monkeypatch, numerics)
        assert how == ["python"]
        assert_same_bits(py, want)


@built
def test_a_function_resting_at_zero_or_decaying_to_subnormals_does_not_pause(monkeypatch):
    # x <- tanh(x) at 0; x <- exp(x) - 100 + k: exp(-100) is subnormal
    tanh = SWAP.replace("%s = stablehlo.add %x, %y : tensor<f32>",
                        "%s = stablehlo.tanh %y : tensor<f32>")
    for text, args in ((tanh, [np.int32(50), np.float32(0), np.float32(-0.0)]),
                       (ITERATE.replace("FN", "exponential"),
                        [np.int32(50), np.float32(-100), np.float32(-100)])):
        want, _ = _run(text, args, "plan", monkeypatch)
        with monkeypatch.context() as m:
            pauses = _count_pauses(m)
            got, how = _run(text, args, "vm", monkeypatch)
        assert how == ["vm"]
        assert_same_bits(got, want)
        assert len(pauses) <= 2


@built
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(fn=st.sampled_from(list(FUNCTIONS)), numerics=st.sampled_from(["accurate", "spec"]),
       bits=st.lists(st.integers(0, 2 ** 32 - 1), min_size=1, max_size=30))
def test_drawn_function_inputs_are_bit_identical(fn, numerics, bits, monkeypatch):
    xs = np.array(bits, np.uint32).view(np.float32)
    text = SCAN_FN.replace("FN", fn).replace("LEN", str(xs.size)).replace("ET", "f32")
    want, _ = _run(text, [xs], "plan", monkeypatch, numerics)
    got, how = _run(text, [xs], "vm", monkeypatch, numerics)
    assert how == ["vm"]
    assert_same_bits(got, want)


ITERATE = SWAP.replace("%s = stablehlo.add %x, %y : tensor<f32>",
                       "%t = stablehlo.FN %x : tensor<f32>\n"
                       "      %s = stablehlo.add %t, %y : tensor<f32>")


@built
@pytest.mark.parametrize("fn", ["sine", "tanh", "logistic", "exponential_minus_one"])
def test_a_function_writing_its_carry_pauses_and_resumes(fn, monkeypatch):
    # x <- y, y <- f(x) + y: f's result is the carry itself (no move); a
    # near tie as the first input pauses the first iteration after its
    # counter and before its carries are written.
    text = ITERATE.replace("FN", fn)
    for x0 in _near_ties(fn, 3):
        args = [np.int32(25), np.float32(x0), np.float32(0.001)]
        want, _ = _run(text, args, "plan", monkeypatch)
        with monkeypatch.context() as m:
            pauses = _count_pauses(m)
            got, how = _run(text, args, "vm", monkeypatch)
        assert how == ["vm"]
        assert pauses
        assert_same_bits(got, want)


COND_FN = SWAP.replace(
    "%p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>",
    "%q = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
    "      %e = stablehlo.cosine %x : tensor<f32>\n"
    "      %h = stablehlo.constant dense<2.0> : tensor<f32>\n"
    "      %g = stablehlo.compare LT, %e, %h, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
    "      %p = stablehlo.and %q, %g : tensor<i1>")


@built
def test_a_function_in_the_cond_pauses_and_resumes(monkeypatch):
    for x0 in list(_near_ties("cosine", 3)) + [np.float32(np.nan), np.float32(0.5)]:
        args = [np.int32(6), np.float32(x0), np.float32(0.25)]
        want, _ = _run(COND_FN, args, "plan", monkeypatch)
        got, how = _run(COND_FN, args, "vm", monkeypatch)
        assert how == ["vm"]
        assert_same_bits(got, want)


@built
def test_bad_function_instructions_raise():
    run_loop = chainvm._chains.run_loop
    i32, i64, f32 = (chainvm._TYPES[np.dtype(t)] for t in (np.int32, np.int64, np.float32))
    # registers: 0 i32 counter, 1 i32 bound, 2 bool pred, 3 f32, 4 i64 pause, 5 i32, 6 i64
    types = [i32, i32, chainvm._BOOL, f32, i64, i32, i64]
    cmp = [chainvm.CMP, i32, 2, 2, 0, 1, 0, 0]

    def prog(*body):
        words = [loopvm._LMAGIC, len(types), 1, len(body), 2, 0, 0] + types + cmp
        return np.array(words + [w for ins in body for w in ins], np.int32).tobytes()

    sin = [loopvm._MATH, f32, 0, 3, 3, 4, 0, 0]
    state = np.zeros(len(types), np.uint64)
    assert run_loop(prog(sin), state, [], 10) is True
    for ins in ([loopvm._MATH, f32, 8, 3, 3, 4, 0, 0],     # no such function
                [loopvm._MATH, f32, 0, 3, 3, 5, 0, 0],     # the pause register not int64
                [loopvm._MATH, f32, 0, 5, 3, 4, 0, 0],     # an i32 result
                [loopvm._MATH, i32, 0, 3, 3, 4, 0, 0],     # type
                [loopvm._MATH, f32, 0, 3, 3, 9, 0, 0],     # register out of range
                [loopvm._FTOI, f32, 0, 3, 3, 3, 0, 0],     # float -> float
                [loopvm._FTOI, i32, 0, 5, 5, 5, 0, 0]):    # from an integer
        with pytest.raises(ValueError, match="bad program"):
            run_loop(prog(ins), state, [], 10)
    with pytest.raises(ValueError, match="pause register"):   # two pause registers
        run_loop(prog(sin, [loopvm._MATH, f32, 0, 3, 3, 6, 0, 0]), state, [], 10)
    for at in (-1, 1, 2, 4, 1 << 40):   # the pause must be one past an OP_MATH (index 2)
        state[4] = np.array(at, np.int64).view(np.uint64)
        with pytest.raises(ValueError, match="pause register holds"):
            run_loop(prog([chainvm.ADD, i32, 0, 5, 5, 5, 0, 0], sin), state, [], 10)
    state[4] = 3
    state[1] = 5   # counter 0 < 5: resumes after the sine, then runs to the end
    assert run_loop(prog([chainvm.ADD, i32, 0, 5, 5, 5, 0, 0], sin), state, [], 1) is False
    assert state[4] == 0


@built
@pytest.mark.parametrize("fn", list(FUNCTIONS))
def test_spec_float64_functions_are_the_c_librarys(fn, monkeypatch):
    # spec mode's float64 kernels call the C library (math's functions):
    # the machine calls the same ones; where math raises, the kernel's.
    specials = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, -2.0, 5e-324, 2.2e-308,
                1e300, -1e300, 709.0, 710.0, -745.0, -746.0, 1e-10, 3.0, 1e22]
    rng = np.random.default_rng(len(fn))
    xs = np.concatenate([np.array(specials), rng.uniform(-10, 10, 30),
                         rng.integers(0, 2 ** 63, 30, dtype=np.uint64).view(np.float64)])
    text = SCAN_FN.replace("FN", fn).replace("LEN", str(xs.size)).replace("ET", "f64")
    want, _ = _run(text, [xs], "plan", monkeypatch, "spec")
    got, how = _run(text, [xs], "vm", monkeypatch, "spec")
    assert how == (["python"] if fn == "logistic" else ["vm"])
    assert_same_bits(got, want)
    # accurate mode's float64 kernels are numpy's loops: not the machine's
    _, how = _run(text, [xs], "vm", monkeypatch)
    assert how == ["python"]


# --------------------------------------------------------------------------
# The decoded program (LoopCode) and a run's fixed cost.

def _loop_program(text, args, monkeypatch):
    """The LoopProgram of ``text``'s one while loop, after a run on ``args``."""
    program = shi.compile(text)
    program.run(*args)
    (state,) = loop_states(program)
    assert state.vm is not None and state.vm is state.compiled
    return program, state.vm


ROTATE = """
func.func @main(%n: tensor<i32>, %a: tensor<i64>, %b: tensor<i64>, %c: tensor<i64>)
    -> (tensor<i64>, tensor<i64>, tensor<i64>) {
  %z = stablehlo.constant dense<0> : tensor<i32>
  %r:4 = stablehlo.while(%i = %z, %x = %a, %y = %b, %w = %c)
      : tensor<i32>, tensor<i64>, tensor<i64>, tensor<i64>
    cond {
      %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %one = stablehlo.constant dense<1> : tensor<i32>
      %i2 = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %i2, %y, %w, %x : tensor<i32>, tensor<i64>, tensor<i64>, tensor<i64>
    }
  return %r#1, %r#2, %r#3 : tensor<i64>, tensor<i64>, tensor<i64>
}
"""


@built
@pytest.mark.parametrize("n", [0, 1, 2, 3, 7])
def test_a_cycle_of_moves_runs_through_one_temporary(n, monkeypatch):
    # (x, y, w) <- (y, w, x): no instruction writes a carry, so the three
    # moves are a cycle, sequenced as copies through the temporary
    args = [np.int32(n), np.int64(1), np.int64(2), np.int64(3)]
    got, how = _run(ROTATE, args, "vm", monkeypatch)
    assert how == ["vm"]
    vals = [1, 2, 3]
    for _ in range(n):
        vals = vals[1:] + vals[:1]
    assert [int(v) for v in got] == vals
    _, vm = _loop_program(ROTATE, args, monkeypatch)
    # cond 1 + body 1 + the cycle: a save, three copies
    assert vm.code.n_steps == 6


@built
def test_results_own_their_memory_and_runs_share_nothing(monkeypatch):
    program, vm = _loop_program(SWAP, [np.int32(3), np.float32(0), np.float32(1)], monkeypatch)
    first = program.run(np.int32(3), np.float32(0), np.float32(1))
    kept = [np.array(v, copy=True) for v in first]
    for v in first:   # new arrays: what the plugin's Execute keeps without a copy
        assert v.__class__ is np.ndarray and v.base is None and v.flags.writeable
    a = np.array(5, np.float32)
    second = program.run(np.int32(5), a, np.float32(2))
    assert_same_bits(first, kept)   # the second run wrote into none of them
    assert not any(np.shares_memory(x, y) for x in first for y in second)
    assert a == 5   # nor into its input
    assert [float(v) for v in second] == [25.0, 41.0]


@built
def test_one_decoded_program_serves_many_threads(monkeypatch):
    # the LoopCode is read-only once made: runs in several threads at once
    # (the GIL released while they loop) each get their own registers
    program, vm = _loop_program(SWAP, [np.int32(3), np.float32(0), np.float32(1)], monkeypatch)
    code = vm.code

    def fib(n):
        a, b = np.float32(0), np.float32(1)
        for _ in range(n):
            a, b = b, np.float32(a + b)
        return [a, b]

    want = {n: fib(n) for n in range(0, 60, 3)}
    errors = []

    def work(seed):
        try:
            for k in range(300):
                n = (seed * 7 + k) % 20 * 3
                if k % 2:
                    out = program.run(np.int32(n), np.float32(0), np.float32(1))
                else:   # the same LoopCode, driven directly
                    got = vm.run(None, (np.array(n, np.int32),), (),
                                 [np.array(0, np.int32), np.array(0, np.float32),
                                  np.array(1, np.float32)])
                    out = got[1:]
                assert_same_bits(list(out), want[n])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    run_threads(work, 4)
    assert not errors, errors[:1]
    assert vm.code is code


@built
def test_a_bad_program_is_rejected_when_decoded():
    i32 = chainvm._TYPES[np.dtype(np.int32)]
    header = [loopvm._LMAGIC, 3, 1, 0, 2, 0, 0]
    types = [i32, i32, chainvm._BOOL]
    cmp = [chainvm.CMP, i32, 2, 2, 0, 1, 0, 0]
    good = np.array(header + types + cmp, np.int32).tobytes()
    code = chainvm._chains.LoopCode(good, bytes(24), (0, 1), (0,))
    assert code.n_registers == 3 and code.n_steps == 1
    with pytest.raises(ValueError, match="LoopCode: bad program: types"):
        chainvm._chains.LoopCode(np.array(header + types + [chainvm.ADD] + cmp[1:],
                                          np.int32).tobytes())
    with pytest.raises(ValueError, match="two moves to one register"):
        chainvm._chains.LoopCode(np.array(header[:5] + [2, 0] + types + cmp + [0, 1, 0, 1],
                                          np.int32).tobytes())
    with pytest.raises(ValueError, match="init has 8 bytes"):
        chainvm._chains.LoopCode(good, bytes(8))
    with pytest.raises(ValueError, match="input 1 is register 3 of 3"):
        chainvm._chains.LoopCode(good, None, (0, 3))
    with pytest.raises(ValueError, match="kinds"):
        chainvm._chains.LoopCode(good, None, (0, 1), (), [("i", 0)])
    # start(): a value of another kind (format, ndim, size) or no buffer: None
    code = chainvm._chains.LoopCode(good, None, (0, -1), (1,), [("i", 0), ("", -1)])
    state = code.start([np.array(7, np.int32), "not read"])
    assert np.frombuffer(state, np.int32)[0] == 7
    for v in (np.array(7, np.float32), np.array([7], np.int32), np.array(7, np.int64), 7):
        assert code.start([v, None]) is None
    with pytest.raises(ValueError, match="3 values, the loop takes 2"):
        code.start([np.array(7, np.int32)] * 3)
    out = np.zeros((), np.int32)
    code.finish(state, [out])
    with pytest.raises(ValueError, match="output 0 has 8 bytes"):
        code.finish(state, [np.zeros((), np.int64)])
    with pytest.raises(TypeError, match="writable"):
        code.finish(state, [bytes(4)])
    with pytest.raises(ValueError, match="state has"):
        code.finish(bytearray(8), [out])


@built
def test_a_machine_loop_call_binds_no_regions(monkeypatch):
    # the while kernel's ``unbound`` hook runs the C loop without binding
    # its cond and body (nor running the plan's loop checks)
    from stablehlo_interpreter import compiler
    program = shi.compile(SWAP)
    program.run(np.int32(3), np.float32(0), np.float32(1))
    binds = []
    real = compiler.Block.bind
    monkeypatch.setattr(compiler.Block, "bind",
                        lambda self, *a: binds.append(self) or real(self, *a))
    for n in range(5):
        out = program.call([np.array(n, np.int32), np.array(0, np.float32),
                            np.array(1, np.float32)])
    assert binds == [] and [float(v) for v in out] == [3.0, 5.0]
    # (the entry runs as straight-line code, the while's two results included)
    assert compiler._straight_line(program.functions["main"].block) is not None
    # a run with a tracer takes the plan, binding them
    program.run(np.int32(2), np.float32(0), np.float32(1), tracer=shi.OpTracer(io.StringIO()))
    assert binds
