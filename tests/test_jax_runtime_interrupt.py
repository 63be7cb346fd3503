"""Ctrl-C stops a running stablehlo_ref program with KeyboardInterrupt in the
user's thread; an opt-in execute time limit fails a run with
DEADLINE_EXCEEDED naming the op it stopped in. (One subprocess: signals and
the time limit are process-wide.)"""

import os
import subprocess
import sys

import pytest
from testkit import as_in_a_terminal

SCRIPT = r"""
import os, signal, threading
import jax, jax.numpy as jnp
import stablehlo_pjrt
dev = jax.devices("stablehlo_ref")[0]
f = jax.jit(lambda x, n: jax.lax.fori_loop(0, n, lambda i, c: c * 0.5 + 1.0, x))
x = jax.device_put(jnp.ones(3), dev)
print("warm", f(x, 2).tolist(), flush=True)
# About ten minutes of work: only an interrupt ends it within the test.
threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:
    y = f(x, 10**8)
    y.block_until_ready()
    print("not interrupted")
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
print("after", f(x, 2).tolist(), flush=True)
stablehlo_pjrt.set_execute_timeout(0.5)
try:
    f(x, 10**8).block_until_ready()
    print("no timeout")
except Exception as e:
    print("timeout", type(e).__name__, str(e).replace("\n", " "), flush=True)
stablehlo_pjrt.set_execute_timeout(None)
print("after timeout", f(x, 3).tolist(), flush=True)
"""


@pytest.mark.parametrize("mode", ["auto", "1"])
def test_ctrl_c_and_time_limit(mode):
    # auto: the long run is inline (its first, short run was cheap); 1: every
    # run is on the plugin's worker thread (Ctrl-C reaches the user's thread
    # in jaxlib's wait and cancels the run there).
    env = dict(os.environ, JAX_PLATFORMS="stablehlo_ref", STABLEHLO_REF_ASYNC=mode)
    env.pop("STABLEHLO_REF_NUM_DEVICES", None)
    proc = subprocess.run([sys.executable, "-c", as_in_a_terminal(SCRIPT)], env=env, capture_output=True,
                          text=True, timeout=300)
    out = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out[0] == "warm [1.75, 1.75, 1.75]"
    assert out[1] == "KeyboardInterrupt", out
    assert out[2] == "after [1.75, 1.75, 1.75]"  # the plugin is still usable
    assert out[3].startswith("timeout "), out
    assert "DEADLINE_EXCEEDED" in out[3] and "exceeded the time limit of 0.5 s" in out[3]
    # The deadline is noticed between ops: inside the loop's body or at the
    # while op's own step, depending on timing; either names the loop.
    assert "stopped in stablehlo." in out[3] and "/while" in out[3], out[3]
    assert out[4] == "after timeout [1.875, 1.875, 1.875]"
