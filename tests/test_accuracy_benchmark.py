"""Smoke test of the accuracy benchmark (python -m benchmarks.accuracy --quick).

XLA CPU's errors depend on the host CPU, so they are only reported here;
ours are checked against what correct rounding allows: a pure reduction or
scan of floats whose terms have one sign is within one ULP of the element
type of the exact result (one rounding of the sum, one of a mean's division),
and max/cummax are exact.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parent.parent

EPS = {"f32": float(np.finfo(np.float32).eps), "f16": float(np.finfo(np.float16).eps),
       "bf16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps),
       "c64": float(np.finfo(np.float32).eps)}


def test_accuracy_benchmark_quick(tmp_path):
    out = tmp_path / "acc.json"
    md = tmp_path / "acc.md"
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu,stablehlo_ref"
    p = subprocess.run([sys.executable, "-m", "benchmarks.accuracy", "--quick",
                        "--only", "sum", "--only", "mean(axis=0)", "--only", "cumsum",
                        "--only", "cummax", "--only", "cumprod",
                        "--json", str(out), "--md", str(md)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert len(rows) >= 20
    assert any("logsumexp" in r["name"] for r in rows)
    assert md.read_text().count("\n") == len(rows) + 2
    for r in rows:
        assert np.isfinite(r["xla_cpu"]) and np.isfinite(r["stablehlo_ref"]), r
        ours = r["stablehlo_ref"]
        if "max" in r["name"]:
            assert ours == 0, r
        elif "logsumexp" in r["name"]:
            # the body's exp/log1p round in f32 at each of the tree scan's
            # log2(n) levels
            assert ours <= 16 * EPS[r["dtype"]], r
        else:
            # one rounding of the exact result (signed cumsum terms too: the
            # float64 scan is exact to far below one float32 rounding)
            assert ours <= EPS[r["dtype"]], r
