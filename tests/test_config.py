"""The interpreter's switches: declared once in stablehlo_interpreter.config,
read there only, documented once in docs/debugging.md."""

import ast
import pathlib

import pytest

import stablehlo_interpreter as si
from stablehlo_interpreter import cli, config

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_config_is_public():
    assert "config" in si.__all__ and si.config is config
    assert config.TRACE_OPS in config.SETTINGS


def test_every_setting_is_documented():
    doc = (ROOT / "docs" / "debugging.md").read_text()
    for s in config.SETTINGS:
        rows = [line for line in doc.splitlines() if line.startswith(f"| `{s.name}")]
        assert rows, f"{s.name} is not in docs/debugging.md's switch table"


def _reads_environ(path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") \
                and isinstance(node.value, ast.Name) and node.value.id == "os":
            return True
    return False


def test_only_config_reads_the_environment():
    readers = sorted(str(p.relative_to(ROOT))
                     for pkg in ("interpreter/stablehlo_interpreter", "conformance/stablehlo_conformance")
                     for p in (ROOT / pkg).rglob("*.py") if _reads_environ(p))
    assert readers == ["interpreter/stablehlo_interpreter/config.py"]


def test_values_and_errors(monkeypatch):
    monkeypatch.setenv("STABLEHLO_REF_THREADS", "3")
    assert config.THREADS.value() == 3
    monkeypatch.setenv("STABLEHLO_REF_THREADS", "0")
    assert config.THREADS.value() == 1          # raised to the minimum
    monkeypatch.delenv("STABLEHLO_REF_THREADS")
    assert config.THREADS.value() is None
    monkeypatch.setenv("STABLEHLO_REF_THREADS", "many")
    with pytest.raises(config.ConfigError, match="STABLEHLO_REF_THREADS='many'"):
        config.THREADS.value()
    for off in ("0", "false", "OFF", "no", ""):
        monkeypatch.setenv("STABLEHLO_REF_FUSION", off)
        assert config.FUSION.value() is False
    monkeypatch.setenv("STABLEHLO_REF_FUSION", "1")
    assert config.FUSION.value() is True
    monkeypatch.setenv("STABLEHLO_REF_TRACE_OPS", "sometimes")
    with pytest.raises(config.ConfigError, match="STABLEHLO_REF_TRACE_OPS"):
        config.TRACE_OPS.value()


def test_first_use_settings_are_read_once(monkeypatch):
    s = config.Setting("STABLEHLO_REF_TEST_ONLY", config.integer(), 5, "a test setting")
    assert s.value() == 5
    monkeypatch.setenv("STABLEHLO_REF_TEST_ONLY", "7")
    assert s.value() == 5                       # kept from the first read
    s.forget()
    assert s.value() == 7
    assert s.is_set()
    monkeypatch.delenv("STABLEHLO_REF_TEST_ONLY")
    assert not s.is_set()


def test_describe_lists_current_values(monkeypatch, capsys):
    monkeypatch.setenv("STABLEHLO_REF_GRID_TIMEOUT", "2.5")
    monkeypatch.setenv("STABLEHLO_REF_MAX_NESTING", "lots")
    rows = {r["name"]: r for r in config.describe()}
    assert set(rows) == {s.name for s in config.SETTINGS}
    assert rows["STABLEHLO_REF_GRID_TIMEOUT"]["value"] == 2.5
    assert rows["STABLEHLO_REF_GRID_TIMEOUT"]["raw"] == "2.5"
    assert rows["STABLEHLO_REF_MAX_NESTING"]["value"].startswith("invalid: ")
    assert rows["STABLEHLO_REF_CONTEXT_SHARE"]["value"] == 64
    assert cli.main(["config"]) == 0
    out = capsys.readouterr().out
    assert "STABLEHLO_REF_GRID_TIMEOUT=2.5 (set; read each use)" in out
    for s in config.SETTINGS:
        assert s.name in out and s.doc in out


def test_child_environ_drops(monkeypatch):
    monkeypatch.setenv("STABLEHLO_REF_TRACE_OPS", "1")
    env = config.child_environ(drop=["STABLEHLO_REF_TRACE_OPS"], extra={"X_TEST": "1"})
    assert "STABLEHLO_REF_TRACE_OPS" not in env and env["X_TEST"] == "1"


def test_settings_declared_once():
    with pytest.raises(ValueError, match="declared twice"):
        config._known([config.FUSION, config.FUSION])
