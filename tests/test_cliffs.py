"""The cliff sweep (python -m benchmarks.cliffs).

The default tests run a few ops of each group at --quick sizes in a
subprocess and check the shape of the JSON and markdown table and the
--max-ratio exit status, never the speed. The slow ones run the whole sweep
at full sizes and hold it to issue 25's bar (no op over 3x XLA CPU, scalar
loops at 1 us per step, geometric mean at most 1.2x); they name every
offending row with both times.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import cliffs  # noqa: E402

GROUPS = {"cumulative", "sort/select", "index/scatter", "linalg", "random", "fft",
          "elementwise", "reduction", "loop", "dispatch"}
SAMPLE = ("cumsum,top_k,scatter_add,solve,random_normal,rfft,softmax,spec_dot_f32,mean_axis0,"
          "fori_loop_scalar")


def test_sweep_covers_the_issue_groups():
    assert len(cliffs.OPS) >= 40
    assert {o.group for o in cliffs.OPS if not o.opt_in} == GROUPS
    # spec numerics rows are opt-in (--only spec_): issue 25's bar is the
    # default numerics'; spec mode is judged against accurate mode.
    spec = [o for o in cliffs.OPS if o.group == "spec"]
    assert spec and all(o.opt_in and o.name.startswith("spec_") and
                        o.env == {"STABLEHLO_REF_NUMERICS": "spec"} for o in spec)
    assert all(not o.opt_in for o in cliffs.OPS if o.group != "spec")
    names = [o.name for o in cliffs.OPS]
    assert len(names) == len(set(names))
    assert all(o.steps_quick > 1 for o in cliffs.OPS if o.group == "loop")
    # Scalar loops are judged per step, loops of array work by the ratio.
    array_loops = {o.name for o in cliffs.OPS if o.array_body}
    assert array_loops == {"scan_array"}


def test_an_op_runs_in_its_environment(monkeypatch):
    # A spec row's environment is set while it builds, compiles and runs,
    # and restored after (here the build stops the run).
    seen = {}

    def build(quick):
        seen["mode"] = os.environ.get("STABLEHLO_REF_NUMERICS")
        raise RuntimeError("stop")
    monkeypatch.delenv("STABLEHLO_REF_NUMERICS", raising=False)
    o = cliffs.Op("x", "spec", "an op", build, env=cliffs.SPEC, opt_in=True)
    with pytest.raises(RuntimeError, match="stop"):
        cliffs.run_op(o, True, 1, 1.0)
    assert seen["mode"] == "spec" and "STABLEHLO_REF_NUMERICS" not in os.environ


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


# --------------------------------------------------------------------------
# The sweep itself at full sizes (slow): issue 25's bar.

MAX_RATIO = 3.0      # no op more than 3x XLA CPU
MAX_STEP_US = 1.0    # scalar loops: at most 1 us per step
MAX_GEOMEAN = 1.2    # geometric mean of ours/XLA over every op
# Rounds of the sweep whose medians each time is the median of
# (cliffs.combine_rounds). One round times calls 2-8 of each new program
# once, and on the 2-core VM a round's median of them can be off 2-3x for
# either system: erf took 0.85 ms in one call and 3.8 ms in another of the
# same round when a kernel thread held the second core while the fusion
# helper waited for it (docs/cliffs.md), and XLA CPU's own times move by
# 20% from one round to the next (expm 114-159 us, logsumexp 520-750 us).
# Eight rounds, as the published table (about two minutes): over three
# consecutive 3-round runs of the same code expm read 2.3-3.1x and logsumexp
# 2.1-3.0x, over five 8-round runs 2.3-2.8x and 2.1-2.5x.
ROUNDS = 8


@pytest.fixture(scope="module")
def full_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("cliffs")
    md, js = out / "cliffs.md", out / "cliffs.json"
    env = dict(os.environ)
    env.pop("JAX_PLATFORMS", None)
    cmd = [sys.executable, "-m", "benchmarks.cliffs", "--max-ratio", str(MAX_RATIO),
           "--max-step-us", str(MAX_STEP_US), "--rounds", str(ROUNDS),
           "--md", str(md), "--json", str(js)]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    assert js.exists(), f"the sweep wrote no report (exit {p.returncode}):\n{p.stderr[-3000:]}"
    return p.returncode, json.loads(js.read_text()), md


def _row(e):
    cpu, ref = e["systems"]["cpu"], e["systems"]["ref"]
    ratio = f"{e['ratio']:.1f}x" if "ratio" in e else "-"
    step = (f", {e['ref_per_step_s'] * 1e6:.2f} us/step" if "ref_per_step_s" in e
            and not e.get("array_body") else "")
    return (f"  {e['name']:22s} XLA {cliffs.fmt_time(cpu.get('median_s')):>10s}  "
            f"ref {cliffs.fmt_time(ref.get('median_s')):>10s}  {ratio}{step}")


@pytest.mark.slow
def test_full_sweep_no_op_over_the_limits(full_sweep):
    """The whole cliff sweep (55+ ops, full sizes, one process): every op
    agrees with XLA CPU and none is over 3x XLA CPU (scalar loops: 1 us per
    step). Timings depend on the machine: run it on an idle one."""
    code, report, md = full_sweep
    assert not report["failed"], f"failed or mismatched ops: {report['failed']} (table: {md})"
    over = {s.split(" ")[0] for s in report["over"]}
    rows = "\n".join(_row(e) for e in report["ops"] if e["name"] in over)
    assert not over, (f"{len(over)} of {len(report['ops'])} ops over {MAX_RATIO}x XLA CPU "
                      f"(scalar loops: over {MAX_STEP_US} us/step), load average "
                      f"{report['load_before']} -> {report['load_after']}:\n{rows}\n"
                      f"(full table: {md})")
    assert code == 0


@pytest.mark.slow
def test_full_sweep_geometric_mean(full_sweep):
    """The geometric mean of ours/XLA over the sweep is at most 1.2x."""
    _, report, md = full_sweep
    ratios = [e["ratio"] for e in report["ops"] if e.get("ratio")]
    geomean = float(np.exp(np.mean(np.log(ratios))))
    worst = sorted(report["ops"], key=lambda e: -e.get("ratio", 0))[:10]
    assert geomean <= MAX_GEOMEAN, (
        f"geometric mean {geomean:.2f}x over {len(ratios)} ops (limit {MAX_GEOMEAN}x); "
        f"the ten highest:\n" + "\n".join(_row(e) for e in worst) + f"\n(full table: {md})")


def test_rounds_combine_into_the_median_of_their_medians():
    def row(cpu, ref, agree=True):
        sys_ = lambda t: {"status": "ok", "median_s": t, "samples_s": [t, t]}  # noqa: E731
        return {"name": "x", "group": "loop", "description": "d", "steps": 10,
                "systems": {"cpu": sys_(cpu), "ref": sys_(ref)}, "ratio": ref / cpu,
                "agree": agree, "ref_per_step_s": ref / 10}
    e = cliffs.combine_rounds([row(1.0, 4.0), row(3.0, 2.0), row(2.0, 3.0)])
    assert e["systems"]["cpu"]["median_s"] == 2.0 and e["systems"]["ref"]["median_s"] == 3.0
    assert e["systems"]["ref"]["round_medians_s"] == [4.0, 2.0, 3.0]
    assert len(e["systems"]["cpu"]["samples_s"]) == 6
    assert e["ratio"] == 1.5 and e["ref_per_step_s"] == 0.3 and e["agree"]
    assert not cliffs.combine_rounds([row(1.0, 1.0), row(1.0, 1.0, agree=False)])["agree"]
    failed = row(1.0, 1.0)
    failed["systems"]["ref"] = {"status": "error", "error": "boom"}
    e = cliffs.combine_rounds([row(1.0, 1.0), failed])
    assert e["systems"]["ref"]["status"] == "error" and "ratio" not in e
