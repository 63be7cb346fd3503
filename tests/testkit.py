"""Helpers several test files share (one home each)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np


def run_xla_cpu(text, *args):
    """Compile StableHLO text with XLA on the jax CPU client and run it."""
    import jax
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client as xc
    from jax._src.lib.mlir import ir
    cpu = jax.devices("cpu")[0]
    with mlir.make_ir_context():
        module = ir.Module.parse(text)
        exe = cpu.client.compile_and_load(mlir.module_to_bytecode(module),
                                          xc.DeviceList((cpu,)), xc.CompileOptions())
    return [np.asarray(o) for o in exe.execute([jax.device_put(a, cpu) for a in args])]


def interpreter_cli(*args, timeout=60):
    """Run ``python -m stablehlo_interpreter.cli ARGS`` and capture its output."""
    return subprocess.run([sys.executable, "-m", "stablehlo_interpreter.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def module_files(folder, module: str, *args):
    """``folder/m.mlir`` holding ``module`` and ``folder/in.npz`` holding
    ``args`` (what ``stablehlo-ref run --args`` reads): their paths."""
    m = folder / "m.mlir"
    m.write_text(module)
    npz = folder / "in.npz"
    np.savez(npz, *args)
    return m, npz


def marked_results(cmd, env, mark: str, timeout: float) -> dict:
    """Run a results-printing subprocess: every stdout line starting with
    ``mark`` is a JSON record with a "name"; a timeout is a result too (the
    records printed so far are kept). "__process__" holds rc and stderr's tail."""
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")) \
            + "\n<timed out>"
        rc = "timeout"
    results = {}
    for line in out.splitlines():
        if line.startswith(mark):
            r = json.loads(line[len(mark):])
            results[r["name"]] = r
    results["__process__"] = {"rc": rc, "stderr": err[-4000:]}
    return results


# A scan-like loop (JAX's scan: a row read, a row written per iteration)
# whose body returns RESULT as its third loop value: "%ys2" (the updated
# array, then shared by two loop values: it must be copied every
# iteration) or "%ws" (the loop owns it: updated in place). Used by the
# plan's donation tests and by the generated loops' (test_loopgen.py).
DONATION_SCAN = """
func.func @main(%xs: tensor<6x2xf32>) -> (tensor<6x2xf32>, tensor<6x2xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<6x2xf32>
  %i0 = stablehlo.constant dense<0> : tensor<i32>
  %r:3 = stablehlo.while(%i = %i0, %ys = %z, %ws = %z) : tensor<i32>, tensor<6x2xf32>, tensor<6x2xf32>
  cond {
    %n = stablehlo.constant dense<6> : tensor<i32>
    %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %row = func.call @row(%xs, %i) : (tensor<6x2xf32>, tensor<i32>) -> tensor<1x2xf32>
    %ys2 = func.call @put(%ys, %row, %i) : (tensor<6x2xf32>, tensor<1x2xf32>, tensor<i32>) -> tensor<6x2xf32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %i2 = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %i2, %ys2, RESULT : tensor<i32>, tensor<6x2xf32>, tensor<6x2xf32>
  }
  return %r#1, %xs : tensor<6x2xf32>, tensor<6x2xf32>
}
func.func private @row(%xs: tensor<6x2xf32>, %i: tensor<i32>) -> tensor<1x2xf32> {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %s = stablehlo.dynamic_slice %xs, %i, %c, sizes = [1, 2] : (tensor<6x2xf32>, tensor<i32>, tensor<i32>) -> tensor<1x2xf32>
  return %s : tensor<1x2xf32>
}
func.func private @put(%ys: tensor<6x2xf32>, %row: tensor<1x2xf32>, %i: tensor<i32>) -> tensor<6x2xf32> {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %u = stablehlo.dynamic_update_slice %ys, %row, %i, %c : (tensor<6x2xf32>, tensor<1x2xf32>, tensor<i32>, tensor<i32>) -> tensor<6x2xf32>
  return %u : tensor<6x2xf32>
}
"""


def count_donations(monkeypatch):
    """The reference counts the plan checks before updating an array in
    place (compiler._getrefcount, 2: nothing else holds it), as a list that
    grows while programs run."""
    from stablehlo_interpreter import compiler
    seen = []
    orig = compiler._getrefcount

    def getrefcount(x):
        n = orig(x) - 1  # this wrapper's own argument
        seen.append(n)
        return n
    monkeypatch.setattr(compiler, "_getrefcount", getrefcount)
    return seen


def requires_jax_feature(feature: str):
    """Skip marker for a test that needs a feature newer than the oldest
    supported jaxlib (a stablehlo_pjrt.compat.FEATURES key), with the reason."""
    import pytest

    from stablehlo_pjrt import compat
    reason = compat.missing_feature(feature)
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def as_in_a_terminal(script: str) -> str:
    """``script`` (for ``python -c``) with SIGINT raising KeyboardInterrupt,
    as in a terminal. A process that a non-interactive shell starts in the
    background (``cmd &``, as CI runners may) inherits SIGINT ignored, and
    Python then installs no handler for it: a Ctrl-C test would read the
    signal as lost. Prepended on the script's first line, so that the
    script's line numbers stay as written."""
    return ("import signal as _s; _s.signal(_s.SIGINT, _s.default_int_handler); "
            + script)


def rotate_round(t):
    """``(chain, function)``: the ops of a threefry-like round over two
    values of tensor type ``t`` (``%x0``, ``%x1`` and a ui32 counter ``%k``
    in; ``%s`` and ``%y`` out: an add, a rotation by 13, a xor and the
    counter added), and a private ``@round`` function running them that
    returns ``%k`` as it came, like JAX's ``closed_call`` (so that a plan
    does not inline it). Loop tests (test_loopgen, test_looptile) build
    their bodies from it."""
    chain = f"""
    %bk = stablehlo.broadcast_in_dim %k, dims = [] : (tensor<ui32>) -> {t}
    %s = stablehlo.add %x0, %x1 : {t}
    %c = stablehlo.constant dense<13> : tensor<ui32>
    %bc = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<ui32>) -> {t}
    %d = stablehlo.constant dense<19> : tensor<ui32>
    %bd = stablehlo.broadcast_in_dim %d, dims = [] : (tensor<ui32>) -> {t}
    %l = stablehlo.shift_left %x1, %bc : {t}
    %r = stablehlo.shift_right_logical %x1, %bd : {t}
    %o = stablehlo.or %l, %r : {t}
    %x = stablehlo.xor %s, %o : {t}
    %y = stablehlo.add %x, %bk : {t}"""
    function = f"""
func.func private @round(%x0: {t}, %x1: {t}, %k: tensor<ui32>) -> ({t}, {t}, tensor<ui32>) {{{chain}
    return %s, %y, %k : {t}, {t}, tensor<ui32>
}}"""
    return chain, function


def assert_same_bits(got, want):
    """Two result lists are the same arrays bit for bit: dtypes, shapes and
    bytes (NaN payloads and signed zeros included)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()


def loop_states(program):
    """The loopgen.LoopState of each top-level while op of ``program`` (held
    by the while kernel, inside the plan's step wrapper)."""
    from stablehlo_interpreter import loopgen
    for f in program.functions.values():
        for step in f.block.steps:
            seen = []   # (the kernel and its ``unbound`` hook hold the same one)
            for cell in (getattr(step.fn, "__closure__", None) or ()):   # (a partial has none)
                for c in (getattr(cell.cell_contents, "__closure__", None) or ()):
                    s = c.cell_contents
                    if isinstance(s, loopgen.LoopState) and not any(s is x for x in seen):
                        seen.append(s)
                        yield s


def fuse_small(monkeypatch):
    """Fusion on arrays of 256 elements, in chunks of 2048 bytes (256 f32
    detoured through float64); float sums of rows longer than 512 elements
    (arrays of at least 2048) split into blocks; the pool never busy."""
    from stablehlo_interpreter import fusion, pool
    from stablehlo_interpreter.ops import reducers
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 256)
    monkeypatch.setattr(fusion, "CHUNK_BYTES", 2048)
    monkeypatch.setattr(fusion, "MIN_THREAD_CHUNKS", 2)
    monkeypatch.setattr(reducers, "_PAR_MIN", 2048)
    monkeypatch.setattr(reducers, "_PAR_CHUNK", 512)
    monkeypatch.setattr(pool, "busy", lambda threads: False)


def run_threads(work, n):
    """``work(i)`` for i in range(n), each in its own thread, all started
    before any is joined."""
    import threading
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
