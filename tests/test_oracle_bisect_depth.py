"""first_divergence descends into while/if/case/call/composite bodies and into
the loop iteration whose body first gives another result; `stablehlo-ref
bisect` runs it against a plugin .so. The "other backend" here is the
reference interpreter running the module with one op swapped (no JAX)."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np

from stablehlo_pjrt import _shim
from stablehlo_pjrt.oracle.bisect import first_divergence, reference_runner

NESTED = """
module {
  func.func private @inner(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.tanh %x : tensor<4xf32>
    %1 = stablehlo.add %0, %x : tensor<4xf32>
    return %1 : tensor<4xf32>
  }
  func.func public @main(%a: tensor<4xf32>, %p: tensor<i1>) -> tensor<4xf32> {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %w:2 = stablehlo.while(%i = %c0, %v = %a) : tensor<i32>, tensor<4xf32>
      cond {
        %n = stablehlo.constant dense<6> : tensor<i32>
        %c = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %c : tensor<i1>
      } do {
        %one = stablehlo.constant dense<1> : tensor<i32>
        %j = stablehlo.add %i, %one : tensor<i32>
        %s = stablehlo.multiply %v, %v : tensor<4xf32>
        %r = "stablehlo.if"(%p) ({
          %t = func.call @inner(%s) : (tensor<4xf32>) -> tensor<4xf32>
          stablehlo.return %t : tensor<4xf32>
        }, {
          stablehlo.return %s : tensor<4xf32>
        }) : (tensor<i1>) -> tensor<4xf32>
        %k = "stablehlo.case"(%i) ({
          stablehlo.return %r : tensor<4xf32>
        }, {
          %h = stablehlo.negate %r : tensor<4xf32>
          stablehlo.return %h : tensor<4xf32>
        }) : (tensor<i32>) -> tensor<4xf32>
        stablehlo.return %j, %k : tensor<i32>, tensor<4xf32>
      }
    %m = stablehlo.multiply %w#1, %a : tensor<4xf32>
    return %m : tensor<4xf32>
  }
}
"""


_TANH = re.compile(r"(%[\w#]+) = stablehlo.tanh (%[\w#]+) : (tensor<[^>]*>)")


def tanh_wrong_above(limit):
    """A backend whose tanh is wrong (sine) where its input exceeds ``limit``:
    the module text is rewritten so, then run on the reference."""
    def rewrite(m):
        r, x, t = m.groups()
        bt = t.replace("f32", "i1")
        return (f'%lim_ = stablehlo.constant dense<{limit}> : {t}\n'
                f'%big_ = stablehlo.compare GT, {x}, %lim_ : ({t}, {t}) -> {bt}\n'
                f'%tanh_ = stablehlo.tanh {x} : {t}\n'
                f'%sine_ = stablehlo.sine {x} : {t}\n'
                f'{r} = stablehlo.select %big_, %sine_, %tanh_ : {bt}, {t}')

    def run(text, args):
        return reference_runner(_TANH.sub(rewrite, text), args)
    return run


# Loop state max: 0.7 -> 0.94 -> -1.59 -> ...: tanh's input (the state
# squared) passes 1.3 first in iteration 2.
ARGS = (np.array([0.3, 0.5, 0.6, 0.7], np.float32), np.array(True))


def test_descends_into_loop_iteration_branch_and_callee():
    d = first_divergence(NESTED, *ARGS, against=tanh_wrong_above(1.3))
    assert d.op.name == "stablehlo.while"
    assert d.innermost.op.name == "stablehlo.tanh"
    # The first iteration whose body differs when run from the reference's
    # state is reported (earlier ones agree).
    assert d.inner_where == "iteration 2 of the loop body"
    assert [p.split(" [")[0] for p in d.path] == [
        "stablehlo.while", "stablehlo.if", "func.call", "stablehlo.tanh"]
    assert "branch 0" in d.path[1] and "@inner" in d.path[2]
    text = str(d)
    assert "inside it, iteration" in text and "inside it, the callee @inner" in text


def test_agreeing_module_and_case_branch():
    assert first_divergence(NESTED, *ARGS, against=reference_runner) is None

    def negate_wrong(text, args):
        return reference_runner(text.replace("stablehlo.negate", "stablehlo.abs"), args)
    d = first_divergence(NESTED, *ARGS, against=negate_wrong)
    assert d.innermost.op.name == "stablehlo.negate"
    assert "iteration 1 of the loop body" == d.inner_where  # case picks branch 1 at i=1
    assert any("stablehlo.case [branch 1]" == p for p in d.path), d.path


def test_depth_zero_stops_at_top_level():
    d = first_divergence(NESTED, *ARGS, against=tanh_wrong_above(1.3), depth=0)
    assert d.inner is None and d.op.name == "stablehlo.while"


def test_bisect_cli_against_plugin(tmp_path):
    m = tmp_path / "m.mlir"
    m.write_text(NESTED)
    args = tmp_path / "args.npz"
    np.savez(args, *ARGS)
    p = subprocess.run([sys.executable, "-m", "stablehlo_pjrt.cli", "bisect", str(m),
                        "--args", str(args), "--against", _shim.__file__],
                       capture_output=True, text=True, timeout=600)
    # Our own plugin agrees with the reference.
    assert p.returncode == 0, p.stdout + p.stderr
    assert "agree" in p.stdout
    out = tmp_path / "out.npz"
    np.savez(out, result_0=np.zeros(4, np.float32))
    p = subprocess.run([sys.executable, "-m", "stablehlo_pjrt.cli", "bisect", str(m),
                        "--args", str(args), "--against", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 1 and "pass the plugin's .so" in p.stdout, p.stdout + p.stderr
