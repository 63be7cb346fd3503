"""Smoke test of the cliff sweep (python -m benchmarks.cliffs).

Runs a few ops of each group at --quick sizes in a subprocess and checks the
shape of the JSON and markdown table and the --max-ratio exit status; speed
is never asserted here (the sweep itself is the speed check).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import cliffs  # noqa: E402

GROUPS = {"cumulative", "sort/select", "index/scatter", "linalg", "random", "fft",
          "elementwise", "reduction", "loop", "dispatch"}
SAMPLE = "cumsum,top_k,scatter_add,solve,random_normal,rfft,softmax,mean_axis0,fori_loop_scalar"


def test_sweep_covers_the_issue_groups():
    assert len(cliffs.OPS) >= 40
    assert {o.group for o in cliffs.OPS} == GROUPS
    names = [o.name for o in cliffs.OPS]
    assert len(names) == len(set(names))
    assert all(o.steps_quick > 1 for o in cliffs.OPS if o.group == "loop")
    # Scalar loops are judged per step, loops of array work by the ratio.
    array_loops = {o.name for o in cliffs.OPS if o.array_body}
    assert array_loops == {"scan_array"}


def test_quick_run_table_and_max_ratio(tmp_path):
    md, js = tmp_path / "c.md", tmp_path / "c.json"
    env = dict(os.environ)
    env.pop("JAX_PLATFORMS", None)
    cmd = [sys.executable, "-m", "benchmarks.cliffs", "--quick", "--repeats", "1",
           "--only", SAMPLE, "--md", str(md), "--json", str(js), "--max-ratio", "0"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    # --max-ratio 0: every op is over it, so the exit status is 1 (not 0, not 2).
    assert p.returncode == 1, p.stderr[-3000:]
    report = json.loads(js.read_text())
    names = [e["name"] for e in report["ops"]]
    assert names == SAMPLE.split(",")
    for e in report["ops"]:
        for system in ("cpu", "ref"):
            r = e["systems"][system]
            assert r["status"] == "ok", r
            assert r["median_s"] > 0 and len(r["samples_s"]) == 1
        assert e["agree"] is True, e["name"]
        assert e["ratio"] > 0
    loop = report["ops"][-1]
    assert loop["steps"] == 20 and loop["ref_per_step_s"] > 0
    assert set(report["over"]) and all("fori_loop" not in o for o in report["over"])
    text = md.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == len(names)
    assert all(row.count("|") == 8 for row in rows)
    assert "ours/XLA" in text and "Over the limits" in text
