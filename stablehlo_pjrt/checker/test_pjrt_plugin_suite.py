"""The checker's checks as pytest tests (see pytest_plugin.py):

    pytest --pjrt-plugin PATH.so --pyargs stablehlo_pjrt.checker.test_pjrt_plugin_suite
"""

from stablehlo_pjrt.checker.core import Result
from stablehlo_pjrt.checker.pytest_plugin import outcome


def test_pjrt(pjrt_check: str, pjrt_result: Result) -> None:
    outcome(pjrt_result)
