"""The `stablehlo-ref` command line, run as a subprocess."""

import numpy as np
import pytest
from testkit import interpreter_cli as cli
from testkit import module_files

MODULE = """
func.func @main(%a: tensor<2xf32>, %b: tensor<2xf32>) -> (tensor<2xf32>, tensor<i32>) {
  %0 = stablehlo.add %a, %b : tensor<2xf32>
  %c = stablehlo.constant dense<7> : tensor<i32>
  return %0, %c : tensor<2xf32>, tensor<i32>
}
func.func @half() -> tensor<2xbf16> {
  %0 = stablehlo.constant dense<[0.5, -1.5]> : tensor<2xbf16>
  return %0 : tensor<2xbf16>
}
"""

UNSUPPORTED = """
func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.custom_call @no_such_target(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
"""


@pytest.fixture
def files(tmp_path):
    m, args = module_files(tmp_path, MODULE, np.array([1, 2], np.float32),
                           np.array([3, 4.5], np.float32))
    u = tmp_path / "u.mlir"
    u.write_text(UNSUPPORTED)
    return tmp_path, m, u, args


def test_run_prints_results(files):
    _, m, _, args = files
    p = cli("run", m, "--args", args)
    assert p.returncode == 0, p.stderr
    assert "result #0: tensor<2xf32>" in p.stdout and "[4. , 6.5]" in p.stdout
    assert "result #1: tensor<i32> 7" in p.stdout


def test_run_saves_npz(files):
    tmp, m, _, args = files
    out = tmp / "out.npz"
    p = cli("run", m, "--args", args, "--out", out)
    assert p.returncode == 0, p.stderr
    with np.load(out) as z:
        assert z["result_0"].tolist() == [4.0, 6.5]
        assert z["result_1"].dtype == np.int32 and int(z["result_1"]) == 7


def test_run_other_function_bf16_and_portable_artifact(files):
    tmp, m, _, _ = files
    from jaxlib.mlir.dialects import stablehlo
    blob = stablehlo.serialize_portable_artifact_str(MODULE, stablehlo.get_current_version())
    art = tmp / "m.vhlo"
    art.write_bytes(blob)
    out = tmp / "half.npz"
    p = cli("run", art, "--func", "half", "--out", out)
    assert p.returncode == 0, p.stderr
    with np.load(out) as z:
        assert z["result_0"].dtype == np.float32  # bf16 widened losslessly
        assert z["result_0"].tolist() == [0.5, -1.5]
    p = cli("run", m, "--func", "half")
    assert "tensor<2xbf16>" in p.stdout and "0.5" in p.stdout


def test_check_exit_codes(files):
    _, m, u, _ = files
    ok = cli("check", m)
    assert ok.returncode == 0 and "all ops supported" in ok.stdout
    bad = cli("check", u)
    assert bad.returncode == 1
    assert "stablehlo.custom_call" in bad.stdout and "no_such_target" in bad.stdout


@pytest.mark.parametrize("argv,needle", [
    (["run", "{tmp}/missing.mlir"], "cannot read module"),
    (["run", "{m}"], "takes 2 argument(s)"),
    (["run", "{m}", "--func", "nope"], "no function @nope"),
    (["check", "{tmp}/garbage.mlir"], "parsing failed"),
])
def test_user_errors_exit_2_without_traceback(files, argv, needle):
    tmp, m, _, _ = files
    (tmp / "garbage.mlir").write_text("this is not mlir")
    p = cli(*[a.format(tmp=tmp, m=m) for a in argv])
    assert p.returncode == 2
    assert needle in p.stderr
    assert "Traceback" not in p.stderr


def test_run_wrong_argument_dtype(files):
    tmp, m, _, _ = files
    bad = tmp / "bad.npz"
    np.savez(bad, np.array([1 + 1j, 2]), np.array([3, 4], np.float32))
    p = cli("run", m, "--args", bad)
    assert p.returncode == 2 and "argument #0" in p.stderr and "Traceback" not in p.stderr


def test_console_script_declared():
    from importlib.metadata import entry_points
    eps = [e for e in entry_points(group="console_scripts") if e.name == "stablehlo-ref"]
    # The plugin-side CLI adds check-plugin and hands every other command to
    # stablehlo_interpreter.cli (which must not import the plugin).
    assert eps and eps[0].value == "stablehlo_pjrt.cli:main"


@pytest.mark.parametrize("cut", ["%0 = stablehlo.add", "%0 = stablehlo.a", "%0 ="])
def test_truncated_module_says_it_may_be_cut_short(tmp_path, cut):
    """A module cut short (here: inside or just after an op name) is bad
    input, exit 2, with a hint that the file may be incomplete; a cut
    inside an op name is not reported as an op the interpreter lacks."""
    m = tmp_path / "cut.mlir"
    m.write_text(MODULE[:MODULE.index(cut) + len(cut)])
    for command in ("run", "check"):
        p = cli(command, m)
        assert p.returncode == 2, (command, p.stdout, p.stderr)
        assert "the file may be cut short" in p.stderr and "unclosed '{'" in p.stderr
        assert "cannot run" not in p.stdout


def test_unknown_op_in_a_complete_module_is_still_listed(tmp_path):
    m = tmp_path / "u.mlir"
    m.write_text(MODULE.replace("stablehlo.add", "stablehlo.no_such_op"))
    p = cli("check", m)
    assert p.returncode == 1 and "stablehlo.no_such_op" in p.stdout
    assert "cut short" not in p.stderr
