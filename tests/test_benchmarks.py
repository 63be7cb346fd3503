"""Smoke test of the benchmark runner (python -m benchmarks).

Runs a few workloads at --quick sizes on stablehlo_ref and XLA CPU in
subprocesses and checks the shape and sanity of the JSON and markdown it
writes. Timings are never asserted here: speed targets live in benchmarks/.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(tmp_path, *extra):
    out = tmp_path / "bench"
    cmd = [sys.executable, "-m", "benchmarks", "--quick", "--repeats", "1",
           "--out", str(out), *extra]
    env = dict(os.environ)
    env.pop("JAX_PLATFORMS", None)
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads(out.with_suffix(".json").read_text())
    md = out.with_suffix(".md").read_text()
    return report, md


def test_quick_ref_cpu(tmp_path):
    report, md = _run(tmp_path, "--systems", "ref,cpu", "--only", "matmul_256,sort,call_overhead")
    assert report["systems"] == ["ref", "cpu"]
    assert report["quick"] is True
    assert report["machine"]["cpus"] >= 1
    names = [w["name"] for w in report["workloads"]]
    assert names == ["matmul_256", "sort", "call_overhead"]
    for w in report["workloads"]:
        for system in ("ref", "cpu"):
            r = w["systems"][system]
            assert r["status"] == "ok", r
            assert 0 < r["min_s"] <= r["median_s"] < 60
            assert r["repeats"] == 1
        assert w["ratios"]["ref_over_cpu"] > 0
        assert w["checks"] == {"ref_vs_cpu": True}, w
    assert "| `matmul_256` |" in md and "ours/XLA" in md


@pytest.mark.slow
def test_quick_cpp(tmp_path):
    """The C++ interpreter path: results, and unsupported ops reported, not fatal."""
    report, md = _run(tmp_path, "--systems", "ref,cpp", "--only",
                      "matmul_256,random_normal", "--cpp-timeout", "60")
    by = {w["name"]: w for w in report["workloads"]}
    assert by["matmul_256"]["systems"]["cpp"]["status"] == "ok"
    assert by["matmul_256"]["ratios"]["cpp_over_ref"] > 0
    # jax.random.normal lowers to chlo.erf_inv, which the C++ interpreter lacks.
    assert by["random_normal"]["systems"]["cpp"]["status"] in ("error", "ok")
    assert "C++/ours" in md


def test_options_rejected(tmp_path):
    p = subprocess.run([sys.executable, "-m", "benchmarks", "--systems", "gpu"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "unknown system" in p.stderr
