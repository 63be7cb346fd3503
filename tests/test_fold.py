"""Compile-time evaluation of ops on constants (interpreter/stablehlo_interpreter/fold.py)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import stablehlo_interpreter as shi
from stablehlo_interpreter import compiler, fold
from stablehlo_interpreter.types import TensorType


def step_names(block):
    return [s.op.name for s in block.steps]


def compile_both(text, monkeypatch):
    """The module compiled with and without folding."""
    folded = shi.compile(text)
    monkeypatch.setattr(compiler, "_FOLD_ENABLED", False)
    plain = shi.compile(text)
    monkeypatch.setattr(compiler, "_FOLD_ENABLED", True)
    return folded, plain


MASK = """
func.func @main(%x: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4xi32>) {
  %i = stablehlo.iota dim = 0 : tensor<4x4xi32>
  %j = stablehlo.iota dim = 1 : tensor<4x4xi32>
  %z = stablehlo.constant dense<0> : tensor<i32>
  %zb = stablehlo.broadcast_in_dim %z, dims = [] : (tensor<i32>) -> tensor<4x4xi32>
  %i2 = stablehlo.add %i, %zb : tensor<4x4xi32>
  %eye = stablehlo.compare EQ, %i2, %j, SIGNED : (tensor<4x4xi32>, tensor<4x4xi32>) -> tensor<4x4xi1>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %zf = stablehlo.broadcast_in_dim %zero, dims = [] : (tensor<f32>) -> tensor<4x4xf32>
  %d = stablehlo.select %eye, %x, %zf : tensor<4x4xi1>, tensor<4x4xf32>
  %k = stablehlo.iota dim = 0 : tensor<4xi32>
  return %d, %k : tensor<4x4xf32>, tensor<4xi32>
}"""


def test_constant_subgraph_is_folded_and_results_agree(monkeypatch):
    folded, plain = compile_both(MASK, monkeypatch)
    assert step_names(folded.functions["main"].block) == ["stablehlo.select"]
    assert len(plain.functions["main"].block.steps) == 8   # constants are not steps
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    for a, b in zip(folded.run(x), plain.run(x)):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    # A folded result handed out is the plan's constant: read-only.
    k = folded.run(x)[1]
    assert k.tolist() == [0, 1, 2, 3] and not k.flags.writeable


def test_traced_runs_show_folded_ops_with_their_values(monkeypatch):
    # Op traces are for reading a program's values op by op: a folded op is
    # reported where it stands, with the values it computed at compile time,
    # exactly as the unfolded plan reports it.
    def trace_of(program):
        seen = []

        class Recorder:
            def before(self, op, inputs, depth):
                seen.append(("in", op.name, op.location, [np.asarray(v).tolist() for v in inputs]))

            def after(self, op, results, depth):
                seen.append(("out", op.name, [np.asarray(v).tolist() for v in results]))

        program.run(np.arange(16, dtype=np.float32).reshape(4, 4), tracer=Recorder())
        return seen

    folded, plain = compile_both(MASK, monkeypatch)
    got = trace_of(folded)
    assert got == trace_of(plain)
    assert [e[1] for e in got if e[0] == "out"] == [
        "stablehlo.iota", "stablehlo.iota", "stablehlo.broadcast_in_dim", "stablehlo.add",
        "stablehlo.compare", "stablehlo.broadcast_in_dim", "stablehlo.select", "stablehlo.iota"]


def test_folding_inside_a_loop_body(monkeypatch):
    text = """
func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.while(%i = %c0, %v = %x) : tensor<i32>, tensor<3xf32>
  cond {
    %n = stablehlo.constant dense<5> : tensor<i32>
    %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %i1 = stablehlo.add %i, %one : tensor<i32>
    %h = stablehlo.constant dense<0.5> : tensor<f32>
    %hb = stablehlo.broadcast_in_dim %h, dims = [] : (tensor<f32>) -> tensor<3xf32>
    %two = stablehlo.add %hb, %hb : tensor<3xf32>
    %v1 = stablehlo.multiply %v, %two : tensor<3xf32>
    stablehlo.return %i1, %v1 : tensor<i32>, tensor<3xf32>
  }
  return %r#1 : tensor<3xf32>
}"""
    folded, plain = compile_both(text, monkeypatch)
    body = folded.functions["main"].block.steps[0].op.regions[1]
    assert step_names(body) == ["stablehlo.add", "stablehlo.multiply"]
    x = np.array([1, -2, 3], np.float32)
    assert np.array_equal(folded.run(x)[0], plain.run(x)[0])
    assert folded.run(x)[0].tolist() == [1, -2, 3]


def test_large_results_stay_in_the_plan(monkeypatch):
    n = fold.MAX_FOLD_BYTES // 4 + 1
    text = f"""
func.func @main() -> (tensor<{n}xi32>, tensor<{n}xi32>) {{
  %i = stablehlo.iota dim = 0 : tensor<{n}xi32>
  %c = stablehlo.constant dense<3> : tensor<i32>
  %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<{n}xi32>
  return %i, %b : tensor<{n}xi32>, tensor<{n}xi32>
}}"""
    prog = shi.compile(text)
    # The iota would own n * 4 bytes: kept; the broadcast is a view of a scalar.
    assert step_names(prog.functions["main"].block) == ["stablehlo.iota"]
    i, b = prog.run()
    assert i[-1] == n - 1 and (b == 3).all()


def test_donation_never_updates_a_folded_constant():
    """A kernel that updates a dying operand in place (dynamic_update_slice)
    must not touch a folded value: it stays the same over runs."""
    text = """
func.func @main(%u: tensor<1xf32>, %k: tensor<i32>) -> tensor<4xf32> {
  %c = stablehlo.constant dense<1.0> : tensor<f32>
  %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<4xf32>
  %two = stablehlo.add %b, %b : tensor<4xf32>
  %r = stablehlo.dynamic_update_slice %two, %u, %k : (tensor<4xf32>, tensor<1xf32>, tensor<i32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}"""
    prog = shi.compile(text)
    assert step_names(prog.functions["main"].block) == ["stablehlo.dynamic_update_slice"]
    for k in range(4):
        r = prog.run(np.array([9], np.float32), np.int32(k))[0]
        want = [2.0] * 4
        want[k] = 9.0
        assert r.tolist() == want


class _Op:
    def __init__(self, name, num_results=1, shape=(2,), dtype=np.float64):
        self.name = name
        self.num_results = num_results
        self.result_types = [TensorType(shape, dtype, "f64")] * num_results


def test_fold_keeps_ops_it_cannot_or_must_not_evaluate():
    def boom(*args):
        raise ValueError("at run time")
    assert fold.fold(_Op("stablehlo.add"), boom, [np.zeros(2)]) is None
    # Not in the allowlist: ops with effects, randomness or unknown semantics.
    for name in ("stablehlo.custom_call", "stablehlo.rng", "stablehlo.infeed"):
        assert fold.fold(_Op(name), lambda: np.zeros(1), []) is None
    r = fold.fold(_Op("stablehlo.add"), np.add, [np.ones(2), np.ones(2)])
    assert r[0].tolist() == [2, 2] and not r[0].flags.writeable

    # A result declared larger than MAX_FOLD_BYTES is not even computed.
    def never(*args):
        raise AssertionError("computed at compile time")
    big = (fold.MAX_FOLD_BYTES // 8 + 1,)
    assert fold.fold(_Op("stablehlo.exponential", shape=big), never, [np.zeros(1)]) is None
    assert fold.fold(_Op("stablehlo.add", shape=(None,)), never, [np.zeros(1)]) is None


@pytest.mark.parametrize("env, folded", [("0", True), ("1", False)])
def test_no_fold_switch(env, folded):
    code = ("import stablehlo_interpreter as shi;"
            f"p = shi.compile('''{MASK}''');"
            "print(len(p.functions['main'].block.steps))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "STABLEHLO_REF_NO_FOLD": env},
                         check=True).stdout
    assert int(out) == (1 if folded else 8)


# A case on a constant index (JAX's platform_dependent, jnp.diagonal) and an
# if on a constant predicate: the branch is picked when compiling; a branch
# that computes nothing folds the op, another runs alone.
BRANCHES = """
func.func @main(%x: tensor<4xf32>, %k: tensor<i32>) -> (tensor<i32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<4xf32>) {
  %one = stablehlo.constant dense<1> : tensor<i32>
  %c = "stablehlo.case"(%one) ({
    %a = stablehlo.constant dense<10> : tensor<i32>
    stablehlo.return %a : tensor<i32>
  }, {
    %b = stablehlo.constant dense<20> : tensor<i32>
    stablehlo.return %b : tensor<i32>
  }) : (tensor<i32>) -> tensor<i32>
  %only = "stablehlo.case"(%c) ({
    %y = stablehlo.add %x, %x : tensor<4xf32>
    stablehlo.return %y : tensor<4xf32>
  }) : (tensor<i32>) -> tensor<4xf32>
  %t = stablehlo.constant dense<false> : tensor<i1>
  %f:2 = "stablehlo.if"(%t) ({
    %y = stablehlo.multiply %x, %x : tensor<4xf32>
    %z = stablehlo.constant dense<1.0> : tensor<f32>
    stablehlo.return %y, %z : tensor<4xf32>, tensor<f32>
  }, {
    %y = stablehlo.negate %x : tensor<4xf32>
    %z = stablehlo.constant dense<2.0> : tensor<f32>
    stablehlo.return %y, %z : tensor<4xf32>, tensor<f32>
  }) : (tensor<i1>) -> (tensor<4xf32>, tensor<f32>)
  %v = "stablehlo.case"(%k) ({
    %y = stablehlo.add %x, %f#0 : tensor<4xf32>
    stablehlo.return %y : tensor<4xf32>
  }, {
    stablehlo.return %only : tensor<4xf32>
  }, {
    %y = stablehlo.multiply %x, %only : tensor<4xf32>
    stablehlo.return %y : tensor<4xf32>
  }) : (tensor<i32>) -> tensor<4xf32>
  return %c, %only, %f#0, %f#1, %v : tensor<i32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<4xf32>
}"""


@pytest.mark.parametrize("k", [0, 1, 2, -1, 7])
def test_branches_on_constants_are_picked_when_compiling(k, monkeypatch):
    folded, plain = compile_both(BRANCHES, monkeypatch)
    # The constant case folds to branch 1's constant; the others stay steps.
    assert step_names(folded.functions["main"].block) == [
        "stablehlo.case", "stablehlo.if", "stablehlo.case"]
    assert step_names(plain.functions["main"].block) == [
        "stablehlo.case", "stablehlo.case", "stablehlo.if", "stablehlo.case"]
    x = np.array([1, -2, 3, 0.5], np.float32)
    c, only, f0, f1, v = folded.run(x, np.int32(k))
    assert c == 20 and f1 == 2
    np.testing.assert_array_equal(only, x + x)
    np.testing.assert_array_equal(f0, -x)
    # An index out of range takes the last branch; each branch reads its
    # own captures.
    want = {0: x + -x, 1: x + x, 2: x * (x + x)}[k if 0 <= k <= 2 else 2]
    np.testing.assert_array_equal(v, want)
    for a, b in zip(folded.run(x, np.int32(k)), plain.run(x, np.int32(k))):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    # Program.call (the plugin's path, straight-line code) gives the same.
    for _ in range(2):
        for a, b in zip(folded.call([x, np.array(k, np.int32)]), plain.run(x, np.int32(k))):
            assert np.array_equal(a, b)


def test_traced_run_still_enters_the_picked_branch(monkeypatch):
    entered = []

    class Recorder:
        def enter_block(self, name, depth):
            entered.append(name)

        def before(self, op, inputs, depth):
            pass

        def after(self, op, results, depth):
            pass

    folded, _ = compile_both(BRANCHES, monkeypatch)
    folded.run(np.ones(4, np.float32), np.int32(2), tracer=Recorder())
    assert entered == ["@main", "stablehlo.case#0", "stablehlo.if#1", "stablehlo.case#2"]
