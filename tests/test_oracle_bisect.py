"""first_divergence / compare on JAX functions, against a deliberately
wrong "backend": XLA CPU running the module after one op was perturbed.

The checks run in one subprocess (JAX backends are process-global); the
script is the string below, which prints one JSON line of results.
"""

import json
import os
import subprocess
import sys

SCRIPT = r'''
import json
import jax, jax.numpy as jnp, numpy as np
from stablehlo_pjrt import oracle

cpu = oracle.jax_backend_runner("cpu")
calls = []

def tanh_is_sine(text, args):
    """A backend that miscompiles tanh (into sine)."""
    calls.append(1)
    assert "stablehlo.tanh" in text
    return cpu(text.replace("stablehlo.tanh", "stablehlo.sine"), args)

def f(x, y):
    a = jnp.sin(x) * y
    b = jnp.tanh(a) + jnp.cos(y)   # LINE_TANH
    c = jnp.exp(b) - x
    return c.sum(), jnp.argmax(c)

def g(x):
    t = jnp.tanh(x)                # LINE_G_TANH
    u = x * 2.0
    u = u + 1.0
    u = u * 3.0
    u = u - 1.0
    u = jnp.sqrt(jnp.abs(u))
    return t + u

x = np.linspace(0.1, 1, 7, dtype=np.float32)
y = np.linspace(1, 2, 7, dtype=np.float32)
out = {}
r = oracle.compare(f, x, y, against="cpu")
out["compare_ok"] = r.ok
out["compare_text"] = str(r)
out["agree"] = oracle.first_divergence(f, x, y, against="cpu") is None

d = oracle.first_divergence(f, x, y, against=tanh_is_sine)
out["bisect"] = {"op": d.op.name, "source": d.source, "runs": d.runs, "text": str(d)}
d = oracle.first_divergence(f, x, y, against=tanh_is_sine, strategy="linear")
out["linear"] = {"op": d.op.name, "source": d.source, "runs": d.runs}

# The divergence of tanh does not propagate through the ops between it and
# the final add, so plain bisection lands on the add first.
d = oracle.first_divergence(g, x, against=tanh_is_sine)
out["masked"] = {"op": d.op.name, "source": d.source, "notes": d.notes}

# A module and its arguments instead of a JAX function.
text = jax.jit(f).lower(x, y).as_text()
d = oracle.first_divergence(text, x, y, against=tanh_is_sine)
out["module"] = {"op": d.op.name, "index": d.op.index}

# Integer outputs diverge exactly: a backend whose multiply adds.
def h(a, b):
    return (a * b + 3) // 2
ia = np.arange(6, dtype=np.int32); ib = np.full(6, 5, np.int32)
def mul_is_add(text, args):
    return cpu(text.replace("stablehlo.multiply", "stablehlo.add"), args)
d = oracle.first_divergence(h, ia, ib, against=mul_is_add)
out["int"] = {"op": d.op.name, "text": str(d)}
print("@@RESULT@@" + json.dumps(out))
'''


def run_script(tmp_path):
    path = tmp_path / "oracle_script.py"
    path.write_text(SCRIPT)
    env = dict(os.environ, JAX_PLATFORMS="cpu,stablehlo_ref")
    p = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                       timeout=240, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("@@RESULT@@")][0]
    lines = SCRIPT.splitlines()
    marks = {m: 1 + next(i for i, ln in enumerate(lines) if m in ln)
             for m in ("LINE_TANH", "LINE_G_TANH")}
    return json.loads(line[len("@@RESULT@@"):]), path, marks


def test_first_divergence(tmp_path):
    out, path, lines = run_script(tmp_path)
    assert out["compare_ok"], out["compare_text"]
    assert out["compare_text"].startswith("stablehlo_ref vs cpu: ")
    assert "output[0]: float32[] " in out["compare_text"]
    assert "output[1]: int32[] identical" in out["compare_text"]
    assert out["agree"]

    tanh_line = f"{path}:{lines['LINE_TANH']}"
    b = out["bisect"]
    assert b["op"] == "stablehlo.tanh" and b["source"] == tanh_line, b["text"]
    assert "first divergent op: stablehlo.tanh" in b["text"]
    assert "result #0 on the reference" in b["text"] and "MISMATCH" in b["text"]
    assert "inputs (the reference and tanh_is_sine agree on these)" in b["text"]
    assert "stablehlo.multiply" in b["text"]  # tanh's input is the product
    lin = out["linear"]
    assert lin["op"] == "stablehlo.tanh" and lin["source"] == tanh_line
    assert lin["runs"] == 1 and b["runs"] >= 2

    m = out["masked"]
    assert m["op"] == "stablehlo.tanh", m
    assert m["source"] == f"{path}:{lines['LINE_G_TANH']}"
    assert any("searched again" in n for n in m["notes"]), m

    assert out["module"]["op"] == "stablehlo.tanh"
    assert out["int"]["op"] == "stablehlo.multiply", out["int"]["text"]
    assert "(exact)" in out["int"]["text"]
