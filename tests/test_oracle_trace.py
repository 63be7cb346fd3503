"""Op-level tracing, the NaN finder and probes: on the interpreter directly
and through the PJRT plugin (in subprocesses: JAX backends are global)."""

import io
import os
import subprocess
import sys

import numpy as np

import stablehlo_interpreter as shi
from stablehlo_interpreter.trace import NanFinder, NonFiniteError, OpTracer, Recorder, use_tracer

WHILE = """
func.func @main(%n: tensor<i32>) -> tensor<f32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %x0 = stablehlo.constant dense<1.0> : tensor<f32>
  %r:2 = stablehlo.while(%i = %c0, %x = %x0) : tensor<i32>, tensor<f32>
    cond {
      %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %i1 = stablehlo.add %i, %one : tensor<i32>
      %x1 = stablehlo.add %x, %x : tensor<f32>
      stablehlo.return %i1, %x1 : tensor<i32>, tensor<f32>
    }
  return %r#1 : tensor<f32>
}
"""

LOG_NEG = """
func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %two = stablehlo.constant dense<2.0> : tensor<3xf32>
  %a = stablehlo.subtract %x, %two : tensor<3xf32> loc("sub_step")
  %b = stablehlo.log %a : tensor<3xf32> loc("log_step")
  %c = stablehlo.exponential %b : tensor<3xf32> loc("exp_step")
  return %c : tensor<3xf32>
}
"""


def test_op_tracer_marks_loop_iterations():
    out = io.StringIO()
    res = shi.compile(WHILE).run(np.int32(3), tracer=OpTracer(out))
    assert float(res[0]) == 8.0
    text = out.getvalue()
    for n in (1, 2, 3):
        assert f"-- while body, iteration {n}\n" in text
    assert "body, iteration 4" not in text
    assert text.count("-- while condition") == 4  # checked before each iteration and at exit
    assert "\n  stablehlo.add @" in text  # body ops nested under the while
    assert "out0: tensor<f32> [8.]" in text


def test_nan_finder_names_first_op():
    program = shi.compile(LOG_NEG)
    try:
        program.run(np.array([3.0, 1.0, 4.0], np.float32), tracer=NanFinder())
    except NonFiniteError as e:
        assert e.op_name == "stablehlo.log" and e.location == '"log_step"', e
        assert "input #0: tensor<3xf32> [ 1., -1.,  2.]" in str(e)
        assert "nan" in str(e)
    else:
        raise AssertionError("NanFinder did not stop")
    # Finite everywhere: no error.
    program.run(np.array([3.0, 5.0, 4.0], np.float32), tracer=NanFinder())


def test_use_tracer_applies_to_runs_without_tracer():
    program = shi.compile(LOG_NEG)
    with use_tracer(NanFinder()):
        try:
            program.run(np.array([1.0, 3.0, 4.0], np.float32))
            raise AssertionError("the installed tracer was not used")
        except NonFiniteError as e:
            assert e.op_name == "stablehlo.log"
    program.run(np.array([1.0, 3.0, 4.0], np.float32))  # uninstalled again


def test_probes_dump_npy(tmp_path):
    rec = Recorder(probes={"log_step": str(tmp_path)})
    shi.compile(LOG_NEG).run(np.array([3.0, 4.0, 5.0], np.float32), tracer=rec)
    assert [ev[0].name for ev in rec.events] == ["stablehlo.subtract", "stablehlo.log",
                                                 "stablehlo.exponential"]
    files = sorted(os.listdir(tmp_path))
    assert files == ["00001_stablehlo_log_0.npy"], files
    np.testing.assert_allclose(np.load(tmp_path / files[0]), np.log([1.0, 2.0, 3.0]), rtol=1e-6)


PJRT_SCRIPT = r'''
import os, sys
import jax, jax.numpy as jnp, numpy as np

def f(x):
    y = x - 2.0
    z = jnp.log(y)          # LINE_LOG
    return jnp.exp(z) * 3

mode = sys.argv[1]
x = np.array([3.0, 1.0], np.float32)
if mode == "env":
    try:
        jax.jit(f)(x).block_until_ready()
    except Exception as e:
        print("@@ERROR@@", type(e).__name__, str(e).replace("\n", " | "))
elif mode == "api":
    from stablehlo_interpreter.trace import NanFinder, use_tracer
    from stablehlo_pjrt import oracle
    with use_tracer(NanFinder()):
        try:
            jax.jit(f)(x).block_until_ready()
        except Exception as e:
            print("@@ERROR@@", type(e).__name__, str(e).replace("\n", " | "))
    print("@@OK@@", jax.jit(f)(np.array([3.0, 4.0], np.float32)))  # no tracer any more
    e = oracle.find_nan(f, x)
    print("@@FIND@@", e.op_name, e.location)
    print("@@NONE@@", oracle.find_nan(f, np.array([3.0, 4.0], np.float32)))
    oracle.trace_ops(f, x)
'''


def _run(tmp_path, mode, **env):
    path = tmp_path / "nan_script.py"
    path.write_text(PJRT_SCRIPT)
    line = 1 + next(i for i, ln in enumerate(PJRT_SCRIPT.splitlines()) if "LINE_LOG" in ln)
    e = dict(os.environ, JAX_PLATFORMS="stablehlo_ref", **env)
    p = subprocess.run([sys.executable, str(path), mode], capture_output=True, text=True,
                       timeout=120, env=e)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    # Locations show the user's frame as file:line:col (compiler.format_location).
    return p, f'{path}:{line}:'


def test_nan_finder_through_pjrt_env(tmp_path):
    p, where = _run(tmp_path, "env", STABLEHLO_REF_TRACE_OPS="nan")
    err = [ln for ln in p.stdout.splitlines() if ln.startswith("@@ERROR@@")]
    assert err, p.stdout + p.stderr
    assert "stablehlo.log at" in err[0] and "produced a non-finite value" in err[0]
    assert where in err[0], err[0]  # the Python line of jnp.log
    assert "input #0: tensor<2xf32> [ 1., -1.]" in err[0]
    # The tracer printed the ops before the failing one, with summaries.
    assert "stablehlo.subtract @" in p.stderr and "out0: tensor<2xf32> [ 1., -1.]" in p.stderr


def test_trace_api_through_pjrt(tmp_path):
    p, where = _run(tmp_path, "api")
    out = p.stdout
    err = [ln for ln in out.splitlines() if ln.startswith("@@ERROR@@")]
    assert err and "stablehlo.log at" in err[0] and where in err[0], out
    assert "@@OK@@ [3. 6.]" in out
    find = [ln for ln in out.splitlines() if ln.startswith("@@FIND@@")][0]
    assert "stablehlo.log" in find and where in find
    assert "@@NONE@@ None" in out
    assert "stablehlo.log @" in p.stderr and "nan=1" not in p.stderr  # small: shown in full
    assert "out0: tensor<2xf32> [ 0., nan]" in p.stderr
