"""The PJRT call trace as Chrome trace-event JSON, from a small training
step run on stablehlo_ref in a subprocess."""

import json
import os
import subprocess
import sys
from collections import Counter

TRAIN = r'''
import sys
import jax, jax.numpy as jnp

def loss(w, x, y):
    return jnp.mean((jnp.tanh(x @ w) - y) ** 2)

@jax.jit
def step(w, x, y):
    l, g = jax.value_and_grad(loss)(w, x, y)
    return w - 0.1 * g, l

w = jnp.ones((3, 2)); x = jnp.ones((4, 3)); y = jnp.zeros((4, 2))
for i in range(3):
    w, l = step(w, x, y)
    if i == 1:
        # On demand, while the process still runs.
        from stablehlo_pjrt.oracle import chrome_trace
        chrome_trace.current().write(sys.argv[1])
print(float(l))
'''

REQUIRED = {"PJRT_Plugin_Initialize", "PJRT_Client_Create", "PJRT_Client_Compile",
            "PJRT_Client_BufferFromHostBuffer", "PJRT_LoadedExecutable_Execute",
            "PJRT_Buffer_OpaqueDeviceMemoryDataPointer", "PJRT_Buffer_Destroy"}


def _check_trace(data, required=REQUIRED):
    assert isinstance(data, dict) and isinstance(data["traceEvents"], list)
    events = data["traceEvents"]
    for e in events:
        assert e["ph"] in "XibeM", e
        assert isinstance(e["name"], str) and isinstance(e["pid"], int)
        assert isinstance(e["tid"], int)
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        if e["ph"] == "X":
            assert e["dur"] >= 0
    names = Counter(e["name"] for e in events if e["ph"] == "X")
    assert required <= set(names), required - set(names)
    assert names["PJRT_LoadedExecutable_Execute"] >= 2
    compile_ = [e for e in events if e["name"] == "PJRT_Client_Compile"]
    assert any("func.func public @main" in e["args"].get("module", "") for e in compile_)
    assert any("jit_step" in e["args"].get("result", "") for e in compile_)
    execs = [e for e in events if e["name"] == "PJRT_LoadedExecutable_Execute"]
    assert any("jit_step" in e["args"]["object"] and e["args"]["outputs"] for e in execs)
    assert any(e["ph"] == "i" and e["name"].startswith("PJRT_Event_") for e in events)
    # Buffer lifetimes: every begin has exactly one end, after it.
    begins = [e for e in events if e["ph"] == "b"]
    ends = {e["id"]: e for e in events if e["ph"] == "e"}
    assert begins and len(ends) == len(begins)
    creators = {e["args"]["created_by"] for e in begins}
    assert {"PJRT_Client_BufferFromHostBuffer", "PJRT_LoadedExecutable_Execute"} <= creators
    for b in begins:
        assert b["cat"] == "buffer" and ends[b["id"]]["ts"] >= b["ts"]
        assert ends[b["id"]]["name"] == b["name"]
    assert any(ends[b["id"]]["args"].get("destroyed_by") == "PJRT_Buffer_Destroy"
               for b in begins)
    threads = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert {t["tid"] for t in threads} >= {e["tid"] for e in events if e["ph"] == "X"}
    return events


def test_chrome_trace_of_training_step(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    out = tmp_path / "trace.json"
    demand = tmp_path / "on_demand.json"
    env = dict(os.environ, JAX_PLATFORMS="stablehlo_ref", STABLEHLO_PJRT_TRACE_JSON=str(out))
    env.pop("STABLEHLO_PJRT_TRACE", None)
    p = subprocess.run([sys.executable, str(script), str(demand)], capture_output=True,
                       text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "[stablehlo_pjrt]" not in p.stderr  # the JSON trace alone prints nothing
    at_exit = _check_trace(json.loads(out.read_text()))
    # (Written before the loss was read back: not read in place yet.)
    on_demand = _check_trace(json.loads(demand.read_text()),
                             REQUIRED - {"PJRT_Buffer_OpaqueDeviceMemoryDataPointer"})
    # Written at exit, the trace has everything the on-demand one had, and more.
    assert len(at_exit) > len(on_demand)
