"""The plugin's switches: declared once in stablehlo_pjrt.config, read there
only (with the interpreter's config module, the only readers of os.environ in
the project), documented once in docs/debugging.md, listed by
``stablehlo-ref config``."""

import ast
import os
import pathlib

import pytest

from stablehlo_interpreter import config as interpreter_config
from stablehlo_pjrt import cli, config, dispatch, interrupt

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("stablehlo_pjrt", "interpreter/stablehlo_interpreter",
            "conformance/stablehlo_conformance", "benchmarks")


def _touches_environ(path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv") \
                and isinstance(node.value, ast.Name) and node.value.id == "os":
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "os" \
                and any(a.name in ("environ", "getenv") for a in node.names):
            return True
    return False


def test_two_modules_touch_the_environment():
    readers = sorted(str(p.relative_to(ROOT)) for pkg in PACKAGES
                     for p in (ROOT / pkg).rglob("*.py") if _touches_environ(p))
    assert readers == ["interpreter/stablehlo_interpreter/config.py",
                       "stablehlo_pjrt/config.py"]


def test_every_plugin_setting_is_documented():
    doc = (ROOT / "docs" / "debugging.md").read_text()
    table = [line for line in doc.splitlines() if line.startswith("| `")]
    for s in config.SETTINGS:
        assert any(f"`{s.name}" in line.split("|")[1] for line in table), \
            f"{s.name} is not in docs/debugging.md's switch table"


def test_names_are_not_shared_with_the_interpreter():
    names = [s.name for s in interpreter_config.SETTINGS + config.SETTINGS]
    assert len(names) == len(set(names))


def test_cli_lists_every_switch_with_its_value(monkeypatch, capsys):
    monkeypatch.setenv("STABLEHLO_REF_EXECUTE_TIMEOUT", "2.5")
    monkeypatch.setenv("STABLEHLO_REF_ASYNC", "sometimes")
    assert cli.main(["config"]) == 0
    out = capsys.readouterr().out
    for s in interpreter_config.SETTINGS + config.SETTINGS:
        assert f"{s.name}=" in out and s.doc in out
    assert "STABLEHLO_REF_EXECUTE_TIMEOUT=2.5 (set; read first use)" in out
    assert "STABLEHLO_REF_ASYNC=\"invalid: STABLEHLO_REF_ASYNC='sometimes'" in out
    rows = {r["name"]: r for r in config.describe_all()}
    assert rows["STABLEHLO_REF_EXECUTE_TIMEOUT"]["value"] == 2.5
    assert rows["STABLEHLO_REF_NUM_DEVICES"]["raw"] in (None, rows["STABLEHLO_REF_NUM_DEVICES"]["value"])


def test_async_mode_spellings_and_errors(monkeypatch):
    for raw, mode in [("0", "sync"), ("off", "sync"), ("1", "async"), ("always", "async"),
                      ("", "auto"), ("AUTO", "auto")]:
        monkeypatch.setenv("STABLEHLO_REF_ASYNC", raw)
        config.ASYNC.forget()
        assert config.ASYNC.value() == mode
    monkeypatch.setenv("STABLEHLO_REF_ASYNC", "sometimes")
    config.ASYNC.forget()
    with pytest.raises(config.ConfigError, match="STABLEHLO_REF_ASYNC='sometimes'"):
        config.ASYNC.value()
    config.ASYNC.forget()
    with pytest.raises(ValueError, match="execution mode must be"):
        dispatch.set_mode("sometimes")


def test_execute_timeout_is_read_once_and_overridden(monkeypatch):
    saved = list(interrupt._timeout)
    try:
        monkeypatch.setenv("STABLEHLO_REF_EXECUTE_TIMEOUT", "-1")
        config.EXECUTE_TIMEOUT.forget()
        interrupt._timeout[:] = []
        with pytest.raises(config.ConfigError, match="must be >= 0"):
            interrupt.execute_timeout()
        monkeypatch.setenv("STABLEHLO_REF_EXECUTE_TIMEOUT", "3")
        config.EXECUTE_TIMEOUT.forget()
        assert interrupt.execute_timeout() == 3.0
        monkeypatch.setenv("STABLEHLO_REF_EXECUTE_TIMEOUT", "4")
        assert interrupt.execute_timeout() == 3.0       # read once
        interrupt.set_execute_timeout(None)
        assert interrupt.execute_timeout() == 0.0
    finally:
        interrupt._timeout[:] = saved
        config.EXECUTE_TIMEOUT.forget()


def test_set_and_default_variable(monkeypatch):
    # (setenv first: monkeypatch restores only variables it has recorded,
    # and set_variable writes os.environ behind its back.)
    monkeypatch.setenv("STABLEHLO_REF_NUM_DEVICES", "1")
    monkeypatch.delenv("STABLEHLO_REF_NUM_DEVICES")
    config.default_variable(config.NUM_DEVICES, "2")
    assert config.NUM_DEVICES.value() == "2"
    config.default_variable(config.NUM_DEVICES, "3")
    assert config.NUM_DEVICES.value() == "2"            # already set
    config.set_variable(config.NUM_DEVICES, "5")
    assert config.NUM_DEVICES.value() == "5"
    assert config.child_environ()["STABLEHLO_REF_NUM_DEVICES"] == "5"
    from stablehlo_pjrt.client import configured_num_devices
    assert configured_num_devices() == 5
    assert configured_num_devices({"num_devices": 3}) == 3



def test_variables_are_set_for_the_block_and_restored(monkeypatch):
    monkeypatch.delenv("STABLEHLO_REF_NUMERICS", raising=False)
    monkeypatch.setenv("STABLEHLO_REF_TRACE_OPS", "0")
    setting = interpreter_config.NUMERICS
    assert setting.value() == "accurate"
    with config.variables({"STABLEHLO_REF_NUMERICS": "spec", "STABLEHLO_REF_TRACE_OPS": "1"}):
        assert setting.value() == "spec"
        assert interpreter_config.TRACE_OPS.value() == "1"
    assert setting.value() == "accurate"
    assert "STABLEHLO_REF_NUMERICS" not in os.environ
    assert os.environ["STABLEHLO_REF_TRACE_OPS"] == "0"
    with pytest.raises(config.ConfigError, match="not a setting: NO_SUCH"):
        with config.variables({"NO_SUCH": "1"}):
            pass
