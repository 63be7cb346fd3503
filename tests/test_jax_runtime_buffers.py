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


def test_host_bools_are_canonical():
    """numpy bools whose byte is not 0 or 1 (``view(bool)`` of other data)
    become canonical bools on transfer, copied or zero-copy: a bitcast of
    them to int8 gives 1, and they compare equal to True. XLA CPU keeps the
    byte (its bitcast gives 96 and -1); JAX's testViewScalar compares a
    device's result with numpy's view of the array read back, which agree
    on either. The reference keeps a bool a bool."""
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent("""
        import numpy as np, jax, jax.numpy as jnp
        raw = np.array([96, 1, 0, 255], np.uint8).view(np.bool_)
        for x in (jnp.asarray(raw), jax.device_put(raw), jnp.asarray(raw[::-1])):
            back = np.asarray(x).view(np.uint8).tolist()
            i8 = np.asarray(jax.jit(lambda a: a.view(jnp.int8))(x)).tolist()
            eq = np.asarray(jax.jit(lambda a: a == jnp.ones(4, bool))(x)).tolist()
            print(back, i8, eq)
        for x in (jnp.asarray(raw[0]), jax.device_put(raw[3])):   # 0-d
            print(x.shape, np.asarray(x).view(np.uint8).tolist(),
                  int(jax.jit(lambda a: a.view(jnp.int8))(x)))
    """)
    env = dict(__import__("os").environ, JAX_PLATFORMS="stablehlo_ref")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()[-5:]
    assert lines[3:] == ["() 1 1"] * 2, lines
    want = [[1, 1, 0, 1], [1, 1, 0, 1], [True, True, False, True]]
    assert [eval(line.replace("] [", "], [").join("[]")) for line in lines[:2]] == [want] * 2
    assert eval(lines[2].replace("] [", "], [").join("[]")) == [w[::-1] for w in want]
