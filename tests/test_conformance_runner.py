"""The conformance runner on a small synthetic suite."""

import json
import subprocess
import sys
import textwrap

import pytest

from stablehlo_conformance import runner, syntax
from stablehlo_conformance.filecheck import FileCheckError, filecheck

SPLIT = "// RUN: stablehlo-translate --interpret -split-input-file %s\n"

FILES = {
    "interpret/good.mlir": SPLIT + """
func.func @add_ok() {
  %0 = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
  %1 = stablehlo.add %0, %0 : tensor<2xi32>
  check.expect_eq_const %1, dense<[2, 4]> : tensor<2xi32>
  check.expect_eq %1, %1 : tensor<2xi32>
  func.return
}

// -----

func.func @multi_line() {
  %0 = stablehlo.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
  check.expect_almost_eq_const %0, dense<[[1.0, 2.0],
                                         [3.0, 4.00001]]> : tensor<2x2xf32>
  check.expect_almost_eq %0, %0, tolerance = 0.1 : tensor<2x2xf32>
  check.expect_close %0, %0, max_ulp_difference = 0 : tensor<2x2xf32>, tensor<2x2xf32>
  %1 = interpreter.probe %0, probe_id = "x" : tensor<2x2xf32>
  check.expect_serialized_eq %1, probe_id = "x" : tensor<2x2xf32>
  func.return
}
""",
    "interpret/bad.mlir": SPLIT + """
func.func @wrong() {
  %0 = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
  check.expect_eq_const %0, dense<[1, 3]> : tensor<2xi32>
  func.return
}

// -----

func.func @no_kernel() {
  %0 = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
  %1 = stablehlo.custom_call @no_such_target(%0) : (tensor<2xi32>) -> tensor<2xi32>
  func.return
}

// -----

func.func @hang() {
  %0 = stablehlo.constant dense<0> : tensor<i64>
  %1 = stablehlo.while(%arg0 = %0) : tensor<i64>
  cond {
    %t = stablehlo.constant dense<true> : tensor<i1>
    stablehlo.return %t : tensor<i1>
  } do {
    stablehlo.return %arg0 : tensor<i64>
  }
  func.return
}

func.func @after_hang() {
  %0 = stablehlo.constant dense<7> : tensor<i64>
  check.expect_eq_const %0, dense<7> : tensor<i64>
  func.return
}
""",
    "interpret/printed.mlir": """// RUN: stablehlo-translate --interpret %s | FileCheck %s
// RUN: stablehlo-translate --interpret --interpreter-print-dense %s | FileCheck %s --check-prefix=CHECK-DENSE

func.func @main() -> (tensor<2xi32>, tensor<f32>) {
  %0 = stablehlo.constant dense<[3, 4]> : tensor<2xi32>
  %1 = stablehlo.constant dense<1.5> : tensor<f32>
  func.return %0, %1 : tensor<2xi32>, tensor<f32>
}
// CHECK: tensor<2xi32> {
// CHECK-NEXT:   [3, 4]
// CHECK-NEXT: }
// CHECK-NEXT: tensor<f32> {1.500000e+00}
// CHECK-DENSE: dense<[3, 4]> : tensor<2xi32>
// CHECK-DENSE: dense<1.500000e+00> : tensor<f32>
""",
    "interpret/printed_wrong.mlir": """// RUN: stablehlo-translate --interpret %s | FileCheck %s
func.func @main() -> tensor<2xi32> {
  %0 = stablehlo.constant dense<[3, 4]> : tensor<2xi32>
  func.return %0 : tensor<2xi32>
}
// CHECK: tensor<2xi32> {
// CHECK-NEXT:   [3, 5]
""",
    "interpret/args.mlir": """// RUN: stablehlo-translate %s --interpret --args="[dense<1> : tensor<2xi32>]" | FileCheck %s
// RUN: not stablehlo-translate %s --interpret --args="[4.0 : f32]" 2>&1 | FileCheck %s --check-prefixes=CHECK-ERR
// CHECK-ERR: expected dense elements attribute for args elements
func.func @main(%a: tensor<2xi32>) -> tensor<2xi32> {
  %0 = stablehlo.add %a, %a : tensor<2xi32>
  return %0 : tensor<2xi32>
}
// CHECK: [2, 2]
""",
    "testdata/add_float32_2_float32_2.mlir": """
module @jit_main {
  func.func public @main() -> tensor<2xf32> {
    %0 = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32>
    %1 = stablehlo.add %0, %0 : tensor<2xf32>
    %2 = stablehlo.constant dense<[2.0, 4.0]> : tensor<2xf32>
    stablehlo.custom_call @check.expect_close(%1, %2) {has_side_effect = true} : (tensor<2xf32>, tensor<2xf32>) -> ()
    return %1 : tensor<2xf32>
  }
}
""",
    "testdata/sub_int32_2.mlir": """
module @jit_main {
  func.func public @main() -> tensor<2xi32> {
    %0 = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
    %1 = stablehlo.subtract %0, %0 : tensor<2xi32>
    %2 = stablehlo.constant dense<[0, 1]> : tensor<2xi32>
    stablehlo.custom_call @check.expect_eq(%1, %2) {has_side_effect = true} : (tensor<2xi32>, tensor<2xi32>) -> ()
    return %1 : tensor<2xi32>
  }
}
""",
    "testdata/dynamic/negate_dynamic.mlir": """
module @jit_fun {
  func.func public @main(%arg0: tensor<?x4xf32>) -> tensor<?x4xf32> {
    %0 = stablehlo.negate %arg0 : tensor<?x4xf32>
    return %0 : tensor<?x4xf32>
  }
}
""",
}


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("suite")
    for rel, text in FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    out = root / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "stablehlo_conformance", str(root), "--json", str(out),
         "--timeout", "3", "-j", "2", "--failures"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())
    by = {(r["suite"], r["file"], r["case"]): r for r in results}
    return proc.stdout, results, by


def test_json_format(suite_run):
    _, results, _ = suite_run
    assert isinstance(results, list) and results
    for r in results:
        assert set(r) == {"suite", "file", "case", "status", "seconds", "message"}
        assert r["suite"] in ("interpret", "testdata")
        assert r["status"] in runner.STATUSES
        assert isinstance(r["seconds"], float) and isinstance(r["message"], str)
        assert r["case"] is None if r["suite"] == "testdata" else isinstance(r["case"], str)


def test_statuses(suite_run):
    _, _, by = suite_run
    status = {k: v["status"] for k, v in by.items()}
    assert status[("interpret", "good.mlir", "add_ok")] == "passed"
    assert status[("interpret", "good.mlir", "multi_line")] == "passed"
    assert status[("interpret", "bad.mlir", "wrong")] == "failed"
    assert status[("interpret", "bad.mlir", "no_kernel")] == "unsupported"
    assert status[("interpret", "bad.mlir", "hang")] == "timeout"
    # The worker that hung was replaced and the rest of its chunk still ran.
    assert status[("interpret", "bad.mlir", "after_hang")] == "passed"
    assert status[("testdata", "add_float32_2_float32_2.mlir", None)] == "passed"
    assert status[("testdata", "sub_int32_2.mlir", None)] == "failed"
    assert status[("testdata", "dynamic/negate_dynamic.mlir", None)] == "passed"


def test_messages(suite_run):
    _, _, by = suite_run
    wrong = by[("interpret", "bad.mlir", "wrong")]["message"]
    assert "check.expect_eq_const" in wrong and "3 (expected)" in wrong
    assert "no_such_target" in by[("interpret", "bad.mlir", "no_kernel")]["message"]
    assert "timed out" in by[("interpret", "bad.mlir", "hang")]["message"]


def test_filecheck_and_args_variants(suite_run):
    _, _, by = suite_run
    assert by[("interpret", "printed.mlir", "main")]["status"] == "passed"
    assert by[("interpret", "printed.mlir", "main [RUN 2]")]["status"] == "passed"
    wrong = by[("interpret", "printed_wrong.mlir", "main")]
    assert wrong["status"] == "failed" and "FileCheck" in wrong["message"]
    assert by[("interpret", "args.mlir", "main")]["status"] == "passed"
    assert by[("interpret", "args.mlir", "main [RUN 2]")]["status"] == "passed"


def test_table(suite_run):
    stdout, results, _ = suite_run
    assert "TOTAL interpret" in stdout and "TOTAL testdata" in stdout
    assert "wall time" in stdout
    assert "[timeout] interpret/bad.mlir @hang" in stdout
    line = next(l for l in stdout.splitlines() if l.startswith("ALL"))
    assert int(line.split()[-1]) == len(results)


def test_only_filter_and_openxla_layout(tmp_path):
    d = tmp_path / "stablehlo" / "tests" / "interpret"
    d.mkdir(parents=True)
    (d / "abs.mlir").write_text(FILES["interpret/good.mlir"])
    (d / "neg.mlir").write_text(FILES["interpret/good.mlir"])
    td = tmp_path / "stablehlo" / "testdata"
    td.mkdir(parents=True)
    (td / "abs_float32_2.mlir").write_text(FILES["testdata/add_float32_2_float32_2.mlir"])
    tasks, errors = runner.collect(str(tmp_path), only=["abs"])
    assert not errors
    assert {(t["suite"], t["file"]) for t in tasks} == {
        ("interpret", "abs.mlir"), ("testdata", "abs_float32_2.mlir")}


def test_family_names():
    assert runner.family("interpret", "add.mlir") == "add"
    assert runner.family("interpret", "chlo/scan.mlir") == "chlo/scan"
    assert runner.family("testdata", "add_float32_20_20_float32_20_20.mlir") == "add"
    assert runner.family("testdata", "scatter_mul_int8_5_6.mlir") == "scatter_mul"
    assert runner.family("testdata", "dynamic/add_dynamic.mlir") == "dynamic/add"
    assert runner.family("testdata", "quantized/ceil_shape_float32_20_20_qi8.mlir") == \
        "quantized/ceil"
    known = {"scatter", "scatter_add", "reduce_window_add"}
    assert runner.family("testdata", "dynamic/vmap_scatter_add_modes_in_bounds.mlir",
                         known) == "dynamic/scatter_add"
    assert runner.family("testdata", "dynamic/reduce_window_add_1_dynamic.mlir",
                         known) == "dynamic/reduce_window_add"


def test_rewrite_custom_syntax():
    text = textwrap.dedent("""\
        %3 = interpreter.probe %2, probe_id = "p" : tensor<2xi32>
        check.expect_almost_eq_const %0, dense<5.1> : tensor<f64> {tolerance = 0.1 : f64}
        check.expect_close %a, %b, max_ulp_difference = 3, min_ulp_difference = 1 : tensor<f16>, tensor<f16>
        check.expect_serialized_eq %3, probe_id = "p", iter = 2 : tensor<2xi32>
        %r:2 = "interpreter.run_parallel"(%x) {programs = [[@f]]} : (tensor<i32>) -> (tensor<i32>, tensor<i32>)
        """)
    out = syntax.rewrite(text).splitlines()
    assert out[0] == ('%3 = "interpreter.probe"(%2) {probe_id = "p"} : '
                      '(tensor<2xi32>) -> tensor<2xi32>')
    assert out[1] == ('"check.expect_almost_eq_const"(%0) {value = dense<5.1> : tensor<f64>, '
                      'tolerance = 0.1 : f64} : (tensor<f64>) -> ()')
    assert out[2] == ('"check.expect_close"(%a, %b) {max_ulp_difference = 3 : ui64, '
                      'min_ulp_difference = 1 : ui64} : (tensor<f16>, tensor<f16>) -> ()')
    assert out[3] == ('"check.expect_serialized_eq"(%3) {probe_id = "p", iteration = 2 : ui32}'
                      ' : (tensor<2xi32>) -> ()')
    assert out[4] == text.splitlines()[4]  # generic ops stay as they are


def test_split_keeps_line_numbers():
    text = "a\n// -----\nb\nc\n"
    chunks = syntax.split_chunks(text)
    assert [c.split("\n").index("b") if "b" in c else None for _, c in chunks] == [None, 2]


def test_filecheck_directives():
    out = "tensor<2xi32> {\n  [1, 2]\n}\nother\n"
    filecheck(out, [("CHECK", False, "tensor<2xi32> {"), ("NEXT", False, "[1, 2]"),
                    ("NEXT", False, "}"), ("NOT", False, "zzz"), ("CHECK", False, "oth{{e+}}r")])
    with pytest.raises(FileCheckError):
        filecheck(out, [("CHECK", False, "tensor<2xi32> {"), ("NEXT", False, "}")])
    with pytest.raises(FileCheckError):
        filecheck(out, [("CHECK", False, "[1, 2]"), ("NOT", False, "}"),
                        ("CHECK", False, "other")])


def test_killed_worker_is_replaced(tmp_path, monkeypatch):
    # A worker killed from outside (as the OOM killer would) reports its
    # current case as an error; the rest of the task runs on a fresh worker.
    import os
    import signal
    import threading
    import time

    text = syntax.rewrite(FILES["interpret/bad.mlir"])
    chunk = syntax.split_chunks(text)[2][1]
    assert syntax.entry_cases(chunk) == ["hang", "after_hang"]
    task = {"suite": "interpret", "file": "bad.mlir", "chunks": [chunk], "cases": [
        {"kind": "interpret", "case": n, "runs": [(0, n)]} for n in ("hang", "after_hang")]}
    started = []
    real_init = runner._Worker.__init__

    def init(self, *a, **k):
        real_init(self, *a, **k)
        started.append(self)
    monkeypatch.setattr(runner._Worker, "__init__", init)

    def killer():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if started and started[0].case == 0:   # the hang is running
                time.sleep(0.3)
                os.kill(started[0].proc.pid, signal.SIGKILL)
                return
            time.sleep(0.05)
    t = threading.Thread(target=killer)
    t.start()
    results = []
    runner.run_tasks([task], 1, 30.0, results.append)
    t.join()
    by = {r["case"]: r for r in results}
    assert by["hang"]["status"] == "error"
    assert "SIGKILL" in by["hang"]["message"]
    assert by["after_hang"]["status"] == "passed"
    assert len(started) == 2


def test_args_parse_into_arrays_of_the_spec_types():
    # --args goes through the interpreter's public parse_attribute (dense
    # elements decoded as constants are); every element type family.
    import ml_dtypes
    import numpy as np

    from stablehlo_conformance.worker import parse_args
    vals = parse_args('[dense<[1, -2]> : tensor<2xi4>, dense<1.5> : tensor<2x2xbf16>, '
                      'dense<[(1.0, -2.0)]> : tensor<1xcomplex<f32>>, dense<true> : tensor<i1>, '
                      'dense<[]> : tensor<0xf64>]')
    assert [(v.dtype, v.shape) for v in vals] == [
        (np.dtype(ml_dtypes.int4), (2,)), (np.dtype(ml_dtypes.bfloat16), (2, 2)),
        (np.dtype(np.complex64), (1,)), (np.dtype(np.bool_), ()), (np.dtype(np.float64), (0,))]
    assert vals[0].tolist() == [1, -2] and float(vals[1][1, 1]) == 1.5
    assert vals[2].tolist() == [1 - 2j] and vals[3].item() is True


@pytest.mark.parametrize("text, message", [
    ("[dense<1> : tensor<2xi32>", "expectected array attribute string"),  # unparseable
    ("dense<1> : tensor<2xi32>", "expectected array attribute string"),   # not an array
    ("[4.0 : f32]", "expected dense elements attribute for args elements"),
    ("[dense<1> : tensor<i32>, array<i64: 1, 2>]", "expected dense elements attribute"),
])
def test_malformed_args_say_what_upstream_says(text, message):
    from stablehlo_conformance.worker import ArgsError, parse_args
    with pytest.raises(ArgsError, match=message):
        parse_args(text)
