"""The package under test is this working tree, and import names match folders.

An install that is not editable, or a stale copy in site-packages, would let
the tests pass against code that is not the code in front of the developer;
these checks fail then.  They also run each package in a fresh interpreter
(not pytest's sys.path), the way JAX's plugin discovery and the CLI load it.
"""

import importlib
import json
import subprocess
import sys
from importlib.metadata import entry_points

import pytest
from conftest import REPO

PACKAGES = {
    "stablehlo_pjrt": REPO / "stablehlo_pjrt",
    "stablehlo_interpreter": REPO / "interpreter" / "stablehlo_interpreter",
    "stablehlo_conformance": REPO / "conformance" / "stablehlo_conformance",
}


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_package_is_the_working_tree(name):
    mod = importlib.import_module(name)
    assert mod.__file__ is not None
    assert (REPO / mod.__file__).resolve().parent == PACKAGES[name].resolve(), (
        f"{name} imported from {mod.__file__}, not from the working tree {PACKAGES[name]}: "
        "install the project with `pip install -e .`")


def test_fresh_interpreter_imports_the_working_tree():
    # Outside pytest's pythonpath and outside the repository: only the
    # installation decides, so this catches a non-editable install.
    code = ("import json, stablehlo_pjrt, stablehlo_interpreter, stablehlo_conformance, "
            "stablehlo_pjrt._shim as s; print(json.dumps([stablehlo_pjrt.__file__, "
            "stablehlo_interpreter.__file__, stablehlo_conformance.__file__, s.__file__]))")
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    files = json.loads(out.stdout.strip().splitlines()[-1])
    for f, folder in zip(files, [PACKAGES["stablehlo_pjrt"], PACKAGES["stablehlo_interpreter"],
                                 PACKAGES["stablehlo_conformance"], PACKAGES["stablehlo_pjrt"]]):
        assert (REPO / f).resolve().parent == folder.resolve(), f"{f} is not in {folder}"


def test_jax_entry_point_is_the_working_tree():
    (ep,) = [e for e in entry_points(group="jax_plugins") if e.name == "stablehlo_ref"]
    mod = ep.load()
    assert (REPO / mod.__file__).resolve().parent == PACKAGES["stablehlo_pjrt"].resolve()


def test_the_interpreter_does_not_import_the_plugin_or_jax_internals():
    # The interpreter knows nothing of PJRT or JAX's private modules.
    code = ("import sys, pkgutil, importlib, stablehlo_interpreter as s; "
            "[importlib.import_module(m.name) for m in pkgutil.walk_packages(s.__path__, s.__name__ + '.')]; "
            "bad = sorted(m for m in sys.modules if m.startswith(('stablehlo_pjrt', 'jax._src'))); "
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


@pytest.mark.parametrize("module", ["stablehlo_conformance", "stablehlo_interpreter.cli"])
def test_command_line_entry_points_start(module):
    out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "usage" in out.stdout.lower()


MAX_FUNCTION_LINES = 120


def test_no_function_outside_tests_is_too_long():
    import ast
    long = []
    for top in ("interpreter", "conformance", "stablehlo_pjrt", "benchmarks"):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > MAX_FUNCTION_LINES:
                        long.append(f"{rel}:{node.lineno} {node.name}: {lines} lines")
    assert not long, "split these functions:\n" + "\n".join(long)
