"""The plugin checker on an accelerator plugin, without a GPU: a fake PJRT
plugin (tests/fake_accelerator/plugin.c, compiled here with the system C
compiler) whose devices are accelerator memory and whose clients, created
with preallocate=true (its default, like XLA's GPU allocator), reserve the
device for their process. Also the checker's own bad inputs, client
options, environment errors and progress output."""

from __future__ import annotations

import fcntl
import io
import json
import os
import subprocess
import sys

import pytest

from stablehlo_pjrt.checker import options, report
from stablehlo_pjrt.checker.capabilities import Capabilities
from stablehlo_pjrt.checker.core import Result, environment_error
from stablehlo_pjrt.checker.progress import Progress

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "fake_accelerator"))
import build as fake_build  # noqa: E402


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fake_accelerator")
    try:
        path = fake_build.build(str(folder))
    except RuntimeError as e:
        pytest.skip(str(e))
    return path, str(folder / "device.lock")


def check_plugin(path, *args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "stablehlo_pjrt.cli", "check-plugin",
                           str(path), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def statuses(out):
    doc = json.loads(out.read_text())
    return doc, {r["id"]: r for r in doc["results"]}


def test_fake_accelerator_runs_clean_with_default_flags(fake, tmp_path):
    """One worker per device by default: the device reservation never
    meets a second process, nothing fails and nothing errs."""
    path, lock = fake
    out = tmp_path / "r.json"
    p = check_plugin(path, "--only", "capi", "--json", out, env={"FAKE_PJRT_LOCK": lock})
    assert p.returncode == 0, p.stdout + p.stderr
    doc, res = statuses(out)
    assert doc["meta"]["jobs"] == 1 and doc["meta"]["device_kinds"] == ["Fake Accelerator"]
    assert "one per device of the accelerator" in p.stderr
    got = {r["status"] for r in res.values()}
    assert got <= {"passed", "unsupported", "skipped"}, p.stdout
    assert res["capi.client.devices"]["status"] == "passed"
    assert res["capi.client.memories"]["status"] == "passed"


def test_cuda_platform_gets_allocator_defaults(fake, tmp_path):
    """A platform named cuda gets preallocate=false, so even parallel
    workers share the device."""
    path, lock = fake
    out = tmp_path / "r.json"
    p = check_plugin(path, "--only", "capi.client", "--only", "capi.version", "-j", "3",
                     "--json", out, env={"FAKE_PJRT_LOCK": lock, "FAKE_PJRT_PLATFORM": "cuda"})
    assert p.returncode == 0, p.stdout + p.stderr
    doc, res = statuses(out)
    assert doc["meta"]["create_options"] == {"preallocate": False}
    assert "preallocate=False" in p.stderr
    assert not [r for r in res.values() if r["status"] in ("failed", "error")]


def test_client_that_cannot_be_created_is_an_environment_error(fake):
    """Another process holds the device: one message with cause and fix,
    exit status 2, no check reported as failed."""
    path, lock = fake
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        p = check_plugin(path, "--only", "capi", env={"FAKE_PJRT_LOCK": lock})
    finally:
        os.close(fd)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "cannot create a client" in p.stderr and "CUDA_ERROR_OUT_OF_MEMORY" in p.stderr
    assert "fix:" in p.stderr and "preallocate=false" in p.stderr
    assert "FAILED" not in p.stdout


def test_repeated_environment_error_stops_the_run(fake):
    """The workers' clients fail (the device is held elsewhere after the
    probe): each is an ``error`` with its cause, and the run stops after
    the same error has come back STOP_AFTER times."""
    from stablehlo_pjrt.checker import runner
    from stablehlo_pjrt.checker.core import select
    from stablehlo_pjrt.checker.registry import build
    path, lock = fake
    checks = select(list(build(None).checks.values()), ["capi.client"])
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    old = os.environ.get("FAKE_PJRT_LOCK")
    os.environ["FAKE_PJRT_LOCK"] = lock
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        state = runner.Run(path, {}, None, 60.0, {})
        results = runner.run(path, checks, state=state)
    finally:
        os.close(fd)
        if old is None:
            del os.environ["FAKE_PJRT_LOCK"]
        else:
            os.environ["FAKE_PJRT_LOCK"] = old
    assert len(results) == runner.STOP_AFTER < len(checks)
    assert {r.status for r in results} == {"error"}
    assert all("cause: the device ran out of memory" in r.detail for r in results)
    assert state.stopped and state.stopped.startswith("stopped early")
    meta = {"stopped": state.stopped, "not_run": len(checks) - len(results)}
    assert report.exit_status(results, meta) == 2
    assert "check(s) not run" in report.text(results, meta)


def test_pytest_plugin_passes_create_options_and_reports_environment(fake, tmp_path):
    """``pytest --pjrt-plugin``: --pjrt-create-option reaches every client;
    with the device held elsewhere the tests fail as environment errors."""
    path, lock = fake
    env = {**os.environ, "FAKE_PJRT_LOCK": lock}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pjrt-plugin",
           path, "--pjrt-jobs", "1", "--pyargs", "stablehlo_pjrt.checker.test_pjrt_plugin_suite",
           "-k", "capi.client.platform or capi.client.devices"]
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # another process shares the device
        p = subprocess.run(cmd + ["--pjrt-create-option", "preallocate=false"],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
        assert p.returncode == 0 and "2 passed" in p.stdout, p.stdout + p.stderr
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                           env=env)
        assert p.returncode == 1 and "2 failed" in p.stdout, p.stdout + p.stderr
        assert "error of the environment, not of the plugin (in PJRT_Client_Create)" in p.stdout
        assert "CUDA_ERROR_OUT_OF_MEMORY" in p.stdout
    finally:
        os.close(fd)


# -- the checker's own bad inputs --------------------------------------------------


def test_not_a_plugin_is_one_message_and_exit_2():
    import numpy._core._multiarray_umath as m
    # (without the programs area, which needs the conformance suite: a clone
    # with no ../shared beside it refuses that first)
    p = check_plugin(m.__file__, "--exclude", "programs")
    assert p.returncode == 2, p.stdout[-2000:]
    assert "is not a PJRT plugin" in p.stderr and "GetPjrtApi" in p.stderr
    assert p.stdout == ""


def test_suite_problems_say_where_the_suite_comes_from(fake, tmp_path):
    path, _ = fake
    for args in (["--suite", tmp_path / "nowhere"], ["--suite", tmp_path]):
        p = check_plugin(path, *args)
        assert p.returncode == 2, p.stdout
        assert "openxla/stablehlo" in p.stderr and "git clone" in p.stderr
        assert "--exclude programs" in p.stderr
    # No suite anywhere: a run that would include programs says so.
    env = {"STABLEHLO_SUITE": str(tmp_path / "nowhere")}
    p = check_plugin(path, "--only", "programs", env=env)
    assert p.returncode == 2 and "git clone" in p.stderr


def test_without_a_suite_excluding_programs_selects_the_rest():
    """With no suite found the programs area holds no check; the help's
    advice, --exclude programs, selects every other check (it used to be
    refused as matching no check)."""
    import argparse

    from stablehlo_pjrt.checker import cli
    checks = cli._select(argparse.Namespace(only=[], exclude=["programs"], shard=None), None)
    assert checks and {c.area for c in checks} == {"capi", "frameworks"}
    with pytest.raises(cli.UsageError, match="programs area cannot run"):
        cli._select(argparse.Namespace(only=["programs"], exclude=[], shard=None), None)


def test_bad_options_and_capabilities(fake, tmp_path):
    path, _ = fake
    p = check_plugin(path, "--create-option", "novalue")
    assert p.returncode == 2 and "expected KEY=VALUE" in p.stderr
    p = check_plugin(path, "--create-option", "n:int=x")
    assert p.returncode == 2 and "--create-option 'n:int=x'" in p.stderr
    bad = tmp_path / "caps.json"
    for text, why in (("{not json", "not valid JSON"), ("[1]", "expected a JSON object"),
                      ('{"create_options": {"a": {"b": 1}}}', "PJRT_NamedValue holds")):
        bad.write_text(text)
        p = check_plugin(path, "--capabilities", bad)
        assert p.returncode == 2 and why in p.stderr, p.stderr
    p = check_plugin(path, "--capabilities", tmp_path / "missing.json")
    assert p.returncode == 2 and "cannot read it" in p.stderr
    p = check_plugin(path, "--only", "capi", "--only", "teleport")
    assert p.returncode == 2 and "'teleport' matches no check" in p.stderr


def test_create_options_reach_the_plugin(fake, tmp_path):
    """preallocate=false from the capabilities file lets a second process
    share the device (the test holds a shared reservation)."""
    path, lock = fake
    caps = tmp_path / "caps.json"
    caps.write_text(json.dumps({"create_options": {"preallocate": False}}))
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        p = check_plugin(path, "--only", "capi.client.platform", "--capabilities", caps,
                         env={"FAKE_PJRT_LOCK": lock})
        assert p.returncode == 0, p.stdout + p.stderr
        p = check_plugin(path, "--only", "capi.client.platform", "--create-option",
                         "preallocate=true", "--capabilities", caps,
                         env={"FAKE_PJRT_LOCK": lock})
        assert p.returncode == 2 and "cannot create a client" in p.stderr
    finally:
        os.close(fd)


# -- units ------------------------------------------------------------------------


def test_option_values_are_typed_like_named_values():
    assert options.parse_option("preallocate=false") == ("preallocate", False)
    assert options.parse_option("memory_fraction=0.5") == ("memory_fraction", 0.5)
    assert options.parse_option("node_id=3") == ("node_id", 3)
    assert options.parse_option("visible_devices=0,2") == ("visible_devices", [0, 2])
    assert options.parse_option("visible_devices=[1]") == ("visible_devices", [1])
    assert options.parse_option("allocator=platform") == ("allocator", "platform")
    assert options.parse_option("name:str=1") == ("name", "1")
    assert options.parse_option("ids:ints=4") == ("ids", [4])
    assert options.parse_option("x:float=2") == ("x", 2.0)
    with pytest.raises(ValueError, match="unknown type"):
        options.parse_option("x:complex=1")
    assert Capabilities({"create_options": {"a": [1, 2], "b": True}}).create_options == \
        {"a": [1, 2], "b": True}


def test_environment_errors_are_told_apart():
    assert environment_error("PJRT_Client_Create", "INTERNAL: no supported devices found "
                             "for platform CUDA").startswith("the plugin found no usable")
    assert "out of memory" in environment_error("PJRT_LoadedExecutable_Execute",
                                                "CUDA_ERROR_OUT_OF_MEMORY: out of memory")
    assert environment_error("x", "No BLAS support in stream") is not None
    # str(PluginError) carries the code name: RESOURCE_EXHAUSTED is enough.
    assert environment_error("PJRT_Client_BufferFromHostBuffer",
                             "PJRT_Client_BufferFromHostBuffer: RESOURCE_EXHAUSTED: Failed to "
                             "allocate 1073741824 bytes") is not None
    assert environment_error("PJRT_Client_Create", "INTERNAL: odd").startswith(
        "the plugin could not create a client")
    assert environment_error("PJRT_Client_Compile", "INVALID_ARGUMENT: bad program") is None


def test_accelerator_detection():
    assert options.is_accelerator({"platform": "cuda", "default_memory_kind": "device"})
    assert not options.is_accelerator({"platform": "cpu", "default_memory_kind": "device"})
    assert not options.is_accelerator({"platform": "stablehlo_ref"})
    assert not options.is_accelerator({"platform": "x", "default_memory_kind": "unpinned_host"})
    assert options.accelerator_defaults({"platform": "ROCM"})[0] == {"preallocate": False}
    assert options.accelerator_defaults({"platform": "tpu"}) == ({}, None)


def test_progress_prints_plain_lines_when_not_a_terminal(monkeypatch):
    from stablehlo_pjrt.checker import progress
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)
    buf = io.StringIO()
    with Progress(3, stream=buf) as p:
        p.update(Result("a", "capi", "g", "passed"))
        p.update(Result("b", "capi", "g", "failed"))
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("[1/3] 0 failed") and "ETA" in lines[0]
    assert lines[-1].startswith("[2/3] 1 failed")


def test_progress_live_line_on_a_terminal():
    buf = io.StringIO()
    with Progress(2, stream=buf, live=True, verbose=True) as p:
        p.update(Result("capi.x.a", "capi", "x", "passed"))
        p.update(Result("capi.x.b", "capi", "x", "crashed"))
    text = buf.getvalue()
    assert "capi.x.b" in text and "1 crashed" in text
