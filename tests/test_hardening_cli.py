"""`stablehlo-ref` exit codes (README "Command line exit codes"), one per
situation, and the argument checks of `run`."""

import numpy as np
import pytest
from testkit import interpreter_cli

from stablehlo_interpreter import cli as shi_cli

ADD = ("func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
       "  %0 = stablehlo.add %a, %a : tensor<2xf32>\n  return %0 : tensor<2xf32>\n}\n")
UNKNOWN = ("func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
           "  %0 = stablehlo.frobnicate %a : tensor<2xf32>\n  return %0 : tensor<2xf32>\n}\n")


def cli(*args):
    return interpreter_cli(*args, timeout=120)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "add.mlir").write_text(ADD)
    (tmp_path / "unknown.mlir").write_text(UNKNOWN)
    np.savez(tmp_path / "f32.npz", np.array([1, 2], np.float32))
    np.savez(tmp_path / "i64.npz", np.array([10**12, 3], np.int64))
    np.savez(tmp_path / "i64ok.npz", np.array([5, 3], np.int64))
    np.savez(tmp_path / "obj.npz", np.array([None, 1], dtype=object))
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04garbage")
    np.savez(tmp_path / "f32x2.npz", np.array([1, 2], np.float32), np.array([1, 2], np.float32))
    return tmp_path


@pytest.mark.parametrize("argv,code,needle", [
    (["run", "add.mlir", "--args", "f32.npz"], shi_cli.EXIT_OK, "[2., 4.]"),
    (["check", "add.mlir"], shi_cli.EXIT_OK, "all ops supported"),
    (["check", "unknown.mlir"], shi_cli.EXIT_DIFFERS, "stablehlo.frobnicate at"),
    (["run", "unknown.mlir", "--args", "f32.npz"], shi_cli.EXIT_ERROR, "frobnicate"),
    (["run", "add.mlir", "--args", "i64.npz"], shi_cli.EXIT_ERROR,
     "argument #0 (%arg0) of @main: expected tensor<2xf32>"),
    (["run", "add.mlir", "--args", "i64.npz", "--cast"], shi_cli.EXIT_ERROR,
     "not exactly representable in float32"),
    (["run", "add.mlir", "--args", "i64ok.npz", "--cast"], shi_cli.EXIT_OK, "[10.,  6.]"),
    (["run", "add.mlir", "--args", "obj.npz"], shi_cli.EXIT_ERROR, "cannot read arguments"),
    (["run", "add.mlir", "--args", "junk.npz"], shi_cli.EXIT_ERROR, "cannot read arguments"),
    (["run", "add.mlir", "--args", "f32x2.npz"], shi_cli.EXIT_ERROR, "takes 1 argument(s)"),
    (["run", "missing.mlir"], shi_cli.EXIT_ERROR, "cannot read module"),
    (["compare", "add.mlir", "--args", "f32.npz", "--against", "f32.npz"],
     shi_cli.EXIT_DIFFERS, ""),
])
def test_exit_codes(files, argv, code, needle):
    p = cli(*[files / a if a.endswith((".mlir", ".npz")) else a for a in argv])
    assert p.returncode == code, p.stdout + p.stderr
    assert needle in p.stdout + p.stderr
    assert "Traceback" not in p.stderr


def test_check_unknown_op_names_file_and_line(files):
    p = cli("check", files / "unknown.mlir")
    assert f"{files / 'unknown.mlir'}:2:" in p.stdout
