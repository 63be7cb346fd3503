"""pytest plugin: the checker's checks as tests of a backend's own test run.

    pytest --pjrt-plugin PATH.so --pyargs stablehlo_pjrt.checker.test_pjrt_plugin_suite

or, as with SQLAlchemy's dialect suite, a test file in the backend's tree with
``from stablehlo_pjrt.checker.test_pjrt_plugin_suite import *``. The plugin is
registered as a ``pytest11`` entry point (or load it with
``-p stablehlo_pjrt.checker.pytest_plugin``). Every check is one test, with
its id as the test id and markers ``pjrt_capi`` / ``pjrt_programs`` /
``pjrt_frameworks`` and ``pjrt_<group>``: select with ``-m pjrt_capi`` or
``-k transfers``. The selected checks run in subprocesses (a plugin abort is
a failed test, the run goes on); ``unsupported`` (UNIMPLEMENTED, refused to
compile) and checks needing a capability the backend declared it lacks
(``--pjrt-capabilities FILE``) are skips with the reason shown (``-rs``).
"""

from __future__ import annotations

import os

import pytest

from .core import Result


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("pjrt", "PJRT plugin checker (stablehlo_pjrt.checker)")
    g.addoption("--pjrt-plugin", help="path of the PJRT plugin .so to check")
    g.addoption("--pjrt-capabilities", help="JSON file of capabilities the plugin lacks")
    g.addoption("--pjrt-suite", help="StableHLO conformance suite folder (programs area)")
    g.addoption("--pjrt-timeout", type=float, default=120.0,
                help="seconds one check may take before it counts as hung")
    g.addoption("--pjrt-create-option", action="append", default=[], metavar="KEY=VALUE",
                help="PJRT_Client_Create option for every client (repeatable; see "
                     "stablehlo-ref check-plugin -h)")
    g.addoption("--pjrt-jobs", type=int,
                help="checker worker processes at once (default: one per CPU, at most 4)")


def pytest_configure(config: pytest.Config) -> None:
    for area in ("capi", "programs", "frameworks"):
        config.addinivalue_line("markers", f"pjrt_{area}: PJRT plugin checker area {area}")
    config._pjrt_state = {"results": None}


def _checks(config):
    from .context import default_suite
    from .registry import build
    suite = config.getoption("--pjrt-suite") or default_suite()
    return suite, build(suite)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "pjrt_check" not in metafunc.fixturenames:
        return
    path = metafunc.config.getoption("--pjrt-plugin")
    if not path:
        metafunc.parametrize("pjrt_check", [pytest.param(
            None, marks=pytest.mark.skip(reason="no --pjrt-plugin given"))], ids=["no-plugin"])
        return
    _, reg = _checks(metafunc.config)
    params = []
    groups = {c.group for c in reg.checks.values()}
    for g in sorted(groups):
        metafunc.config.addinivalue_line("markers", f"pjrt_{g}: PJRT plugin checker group {g}")
    for c in reg.checks.values():
        marks = [getattr(pytest.mark, f"pjrt_{c.area}"),
                 getattr(pytest.mark, f"pjrt_{c.group.replace('-', '_')}")]
        params.append(pytest.param(c.id, marks=marks, id=c.id))
    metafunc.parametrize("pjrt_check", params)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # After -k/-m deselection: the checks that will run, run once in batches.
    config._pjrt_state["selected"] = [
        item.callspec.params["pjrt_check"] for item in items
        if hasattr(item, "callspec") and item.callspec.params.get("pjrt_check")]


def _results(config) -> dict:
    state = config._pjrt_state
    if state["results"] is None:
        from .capabilities import Capabilities
        from .options import parse_option
        from .runner import Run, default_jobs, run
        suite, reg = _checks(config)
        caps = Capabilities.load(config.getoption("--pjrt-capabilities"))
        options = dict(caps.create_options)
        options.update(parse_option(o) for o in config.getoption("--pjrt-create-option"))
        checks = [reg.checks[i] for i in state.get("selected", [])]
        path = os.path.abspath(config.getoption("--pjrt-plugin"))
        jobs = config.getoption("--pjrt-jobs") or default_jobs()
        run_state = Run(path, caps.to_json(), suite, config.getoption("--pjrt-timeout"),
                        options)
        state["results"] = {r.id: r for r in run(path, checks, jobs=jobs, state=run_state)}
        state["stopped"] = run_state.stopped
    return state["results"]


@pytest.fixture
def pjrt_result(request: pytest.FixtureRequest, pjrt_check: str):
    """The checker's result for this test's check (runs the selected checks
    on first use); an ``error`` result for a check a stopped run left out."""
    results = _results(request.config)
    if pjrt_check not in results:
        c = _checks(request.config)[1].checks[pjrt_check]
        return Result(c.id, c.area, c.group, "error",
                      f"not run: {request.config._pjrt_state.get('stopped')}")
    return results[pjrt_check]


def outcome(result: Result) -> None:
    """Turns a checker result into a pytest outcome."""
    if result.status == "passed":
        return
    detail = result.detail + "".join(f"\nnote: {n}" for n in result.notes)
    if result.status in ("skipped", "unsupported"):
        pytest.skip(f"{result.status}: {detail.splitlines()[0] if detail else ''}")
    if result.status == "error":
        pytest.fail(f"error of the environment, not of the plugin (in {result.op}): {detail}",
                    pytrace=False)
    where = f" [first divergent op: {result.op}]" if result.op else ""
    pytest.fail(f"{result.status}{where}: {detail}", pytrace=False)
