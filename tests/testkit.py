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
