"""Buffer ownership on stablehlo_ref vs XLA CPU: outputs never share an
input's (or each other's, or a constant's) memory unless a donated input is
aliased to them; donated buffers are deleted after the call with CPU's
error on reuse and CPU's warnings (scenarios in runtime_scenarios.py)."""

import pytest
import runtime_scenarios as rs

NAMES = ["outputs_never_alias_inputs", "donation_deletes_and_aliases"]


@pytest.fixture(scope="module")
def results():
    return rs.run_both(NAMES, devices=1)


def test_outputs_never_alias(results):
    r, c = rs.values_of(results, "outputs_never_alias_inputs")
    assert r == c
    flags = {k: v for k, v in r.items() if k != "values"}
    assert not any(flags.values()), flags


def test_donation_like_cpu(results):
    r, c = rs.values_of(results, "donation_deletes_and_aliases")
    assert r["identity"] == c["identity"] == [True, True, [0.0, 1.0, 2.0, 3.0]]
    assert r["scale"] == c["scale"]
    assert r["scale"][0] is True
    assert r["use_after"] == c["use_after"]
    assert "Array has been deleted" in r["use_after"]
    assert r["pass_after"] == c["pass_after"]
    assert r["unusable"] == c["unusable"] == [False, 3.0]
    assert r["train"] == c["train"]
    assert r["update"] == c["update"]
    assert r["in_place"] == c["in_place"] == [True, True, [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]]
    # Only the warning CPU gives too (the unusable donation of a sum).
    assert r["warnings"] == c["warnings"]
    assert r["warnings"] == ["Some donated buffers were not usable: float32[3]."]
