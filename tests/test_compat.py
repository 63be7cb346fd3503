"""stablehlo_pjrt.compat: the supported JAX range, the version check, the
JAX-internals gateway and the PJRT C API version table
(docs/compatibility.md)."""

from __future__ import annotations

import ast
import tomllib
import warnings
from pathlib import Path

import numpy as np
import pytest

from stablehlo_pjrt import compat

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("text, want", [
    ("0.10.2", (0, 10, 2)), ("0.9.0.1", (0, 9, 0, 1)), ("0.11.0.dev20260701", (0, 11, 0)),
    ("0.8.0rc1", (0, 8, 0)), ("0.10.2+cuda12", (0, 10, 2)),
])
def test_parse_version(text, want):
    assert compat.parse_version(text) == want


def test_pyproject_range_is_the_compat_range():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    low, high = ".".join(map(str, compat.TESTED[0])), ".".join(map(str, compat.SUPPORTED_BELOW))
    for name in ("jax", "jaxlib"):
        assert f"{name}>={low},<{high}" in deps, deps


@pytest.mark.parametrize("jax_v, jaxlib_v, expect", [
    ((0, 8, 0), (0, 8, 0), []),
    ((0, 10, 2), (0, 10, 2), []),
    ((0, 9, 0, 1), (0, 9, 0, 1), []),
    ((0, 7, 2), (0, 7, 2), ["jax 0.7.2 is older than the oldest tested release",
                            "jaxlib 0.7.2 is older than the oldest tested release"]),
    ((0, 11, 2), (0, 11, 2), ["jax 0.11.2 is newer than the newest tested release",
                              "jaxlib 0.11.2 is newer than the newest tested release"]),
    ((0, 12, 0), (0, 12, 0), ["jax 0.12.0 is newer than the supported range (< 0.12)",
                              "jaxlib 0.12.0 is newer than the supported range (< 0.12)"]),
    ((0, 10, 2), (0, 10, 0), ["jax 0.10.2 runs with jaxlib 0.10.0; the plugin is tested with "
                              "matching releases"]),
])
def test_version_warnings(jax_v, jaxlib_v, expect):
    assert compat.version_warnings(jax_v, jaxlib_v) == expect


def test_check_versions_warns_naming_the_range(monkeypatch):
    monkeypatch.setattr(compat, "jax_version", lambda: (0, 11, 2))
    monkeypatch.setattr(compat, "jaxlib_version", lambda: (0, 11, 2))
    with pytest.warns(compat.CompatWarning, match=r"tested: jax/jaxlib 0\.8\.0 to 0\.10\.2"):
        compat.check_versions.__wrapped__()


def test_check_versions_is_quiet_in_range(monkeypatch):
    monkeypatch.setattr(compat, "jax_version", lambda: (0, 9, 2))
    monkeypatch.setattr(compat, "jaxlib_version", lambda: (0, 9, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compat.check_versions.__wrapped__()


def test_jax_internal_is_a_from_import():
    from jax._src import core
    from jax._src.interpreters import mlir
    assert compat.jax_internal("interpreters", "mlir") is mlir
    assert compat.jax_internal("", "core") is core
    assert compat.jax_internal("core", "Primitive") is core.Primitive
    assert compat.jax_internal("interpreters.mlir") is mlir


def test_missing_internal_names_what_and_why():
    import jax
    with pytest.raises(compat.MissingInternal) as e:
        compat.jax_internal("interpreters", "no_such_thing", feature="buffer donation")
    msg = str(e.value)
    assert "jax._src.interpreters.no_such_thing" in msg and "buffer donation" in msg
    assert f"JAX {jax.__version__}" in msg and "tested: jax/jaxlib 0.8.0 to 0.10.2" in msg
    with pytest.raises(compat.MissingInternal, match=r"jax\._src\.no_such_module"):
        compat.jax_internal("no_such_module")
    with pytest.raises(compat.MissingInternal, match=r"jax\._src\.xla_bridge\.gone for registering"):
        compat.internal_attr(object(), "gone", owner="jax._src.xla_bridge",
                             feature="registering the plugin")


@pytest.mark.parametrize("jaxlib_v, want", [
    ((0, 8, 0), (0, 80)), ((0, 8, 2), (0, 80)), ((0, 8, 3), (0, 85)), ((0, 9, 0, 1), (0, 90)),
    ((0, 9, 1), (0, 90)), ((0, 9, 2), (0, 100)), ((0, 10, 1), (0, 104)),
    ((0, 10, 2), (0, 112)), ((0, 11, 0), (0, 112)), ((0, 11, 2), (0, 115)),
    ((0, 12, 0), (0, 115)), ((0, 12, 0, 1), (0, 116)), ((0, 13, 0), (0, 116)), ((0, 7, 2), None),
])
def test_framework_api_version(monkeypatch, jaxlib_v, want):
    monkeypatch.setattr(compat, "jaxlib_version", lambda: jaxlib_v)
    assert compat.framework_api_version() == want


def test_missing_feature_and_negotiation(monkeypatch):
    monkeypatch.setattr(compat, "jaxlib_version", lambda: (0, 9, 0))
    reason = compat.missing_feature("parameter_shardings")
    assert reason is not None and "0.91" in reason and "this jaxlib: 0.90" in reason
    assert compat.negotiated_api_version((0, 110)) == (0, 90)
    monkeypatch.setattr(compat, "jaxlib_version", lambda: (0, 10, 2))
    assert compat.missing_feature("parameter_shardings") is None
    assert compat.negotiated_api_version((0, 110)) == (0, 110)
    assert compat.negotiated_api_version((1, 0)) is None


def test_the_running_jaxlib_is_in_the_table():
    """A measured release is named exactly: a new tested release gets its
    measured C API version (docs/compatibility.md says how to read it)."""
    v = compat.jaxlib_version()
    if v in compat.FRAMEWORK_API:
        assert compat.framework_api_version() == compat.FRAMEWORK_API[v]


def _jax_src_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and \
                (node.module == "jax._src" or node.module.startswith("jax._src.")):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}")
        elif isinstance(node, ast.Import) and any(a.name.startswith("jax._src") for a in node.names):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}")
        elif isinstance(node, ast.Call) and node.args and \
                isinstance(node.args[0], ast.Constant) and \
                str(node.args[0].value).startswith("jax._src") and \
                getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module",
                                                                             "__import__"):
            found.append(f"{path.relative_to(REPO)}:{node.lineno} (dynamic import)")
    return found


def test_only_compat_touches_jax_internals():
    """The plugin, the interpreter and the conformance runner reach jax._src
    only through stablehlo_pjrt.compat, so a JAX release that moves an
    internal needs one change, in one file."""
    offenders = []
    for root in ("stablehlo_pjrt", "interpreter", "conformance"):
        for path in sorted((REPO / root).rglob("*.py")):
            if path == REPO / "stablehlo_pjrt" / "compat.py":
                continue
            offenders += _jax_src_imports(path)
    assert not offenders, offenders


def test_attribute_names_on_this_jaxlib():
    """The interpreter's MLIR shim: attribute names by position, the same on
    jaxlib 0.8.0 (iteration yields NamedAttribute) and 0.8.3+ (names)."""
    from jaxlib.mlir import ir

    from stablehlo_interpreter.loader import new_context
    from stablehlo_interpreter.mlir_compat import attribute_names
    with new_context():
        m = ir.Module.parse("func.func @f() -> tensor<2xf32> {\n"
                            "  %0 = stablehlo.constant dense<1.0> : tensor<2xf32>\n"
                            "  return %0 : tensor<2xf32>\n}")
        func = m.body.operations[0]
        const = func.regions[0].blocks[0].operations[0]
        assert attribute_names(const.attributes) == ["value"]
        assert sorted(attribute_names(func.attributes)) == ["function_type", "sym_name"]


def test_hlo_bindings_round_trip():
    """HloModule moved from jax._src.lib._jax (jaxlib <= 0.10.1) to
    jax._src.lib.hlo (0.10.2): the shim finds it on every line."""
    hlo = compat.hlo_bindings()
    text = "HloModule m\n\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p)\n}\n"
    proto = hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto()
    module = hlo.HloModule.from_serialized_hlo_module_proto(proto)
    assert "negate" in module.to_string(hlo.HloPrintOptions())


def test_sharding_shim_fills_in_what_old_jaxlib_cannot_read(monkeypatch):
    """jaxlib < C API 0.91 reads no shardings from a C API plugin: the shim
    answers for the plugin's executables and leaves every other one alone."""
    pxla = compat.jax_internal("interpreters", "pxla")
    xc = compat.jax_internal("lib", "xla_client")
    op = xc.OpSharding()
    op.type = xc.OpSharding.Type.REPLICATED
    blob = op.SerializeToString()
    monkeypatch.setattr(pxla, "get_op_sharding_from_executable", lambda ex: ([], []))
    monkeypatch.setattr(compat, "jaxlib_version", lambda: (0, 10, 2))
    assert compat.install_sharding_shim(lambda fp: None) is False
    monkeypatch.setattr(compat, "jaxlib_version", lambda: (0, 8, 0))
    assert compat.install_sharding_shim(lambda fp: ([blob], [blob, blob]) if fp == b"ours" else None)

    class Ours:
        fingerprint = b"ours"

    class Other:
        fingerprint = b"other"

    ins, outs = pxla.get_op_sharding_from_executable(Ours())
    assert len(ins) == 1 and len(outs) == 2 and ins[0].type == xc.OpSharding.Type.REPLICATED
    assert pxla.get_op_sharding_from_executable(Other()) == ([], [])


@pytest.mark.parametrize("name, ref", [("acosh", np.arccosh), ("cosh", np.cosh), ("sinh", np.sinh)])
def test_mhlo_encoded_chlo_ops_run(name, ref):
    """jaxlib 0.8.0 serializes jnp.arccosh, jnp.cosh, ... as custom_call
    @mhlo.<op> (CHLO ops without a StableHLO counterpart): they run as the
    chlo op of the same name."""
    import stablehlo_interpreter as shi
    text = f"""
    func.func @main(%x: tensor<3xf64>) -> tensor<3xf64> {{
      %0 = stablehlo.custom_call @mhlo.{name}(%x) {{mhlo.attributes = {{}}, mhlo.version = 1 : i64}}
          : (tensor<3xf64>) -> tensor<3xf64>
      return %0 : tensor<3xf64>
    }}"""
    x = np.array([1.0, 1.5, 3.0])
    np.testing.assert_allclose(shi.compile(text).run(x)[0], ref(x), rtol=1e-15)
