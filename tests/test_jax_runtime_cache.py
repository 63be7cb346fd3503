"""JAX's persistent compilation cache stores stablehlo_ref executables and a
second process loads them instead of compiling (PJRT trace: the second
process calls PJRT_Executable_DeserializeAndLoad, never PJRT_Client_Compile)."""

import json
import os
import subprocess
import sys

SCRIPT = r"""
import json, sys
import jax, jax.numpy as jnp
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
events = []
jax.monitoring.register_event_listener(lambda e, **kw: events.append(e))
x = jax.device_put(jnp.arange(12.0).reshape(3, 4), jax.devices("stablehlo_ref")[0])
y = jax.jit(lambda a: jnp.tanh(a @ a.T).sum(axis=0))(x)
# With a host callback: JAX never caches it (the callable is not serializable).
z = jax.jit(lambda a: jax.pure_callback(lambda v: v + 1, jax.ShapeDtypeStruct(a.shape, a.dtype), a))(x)
print("RESULT " + json.dumps({"y": y.tolist(), "z": z.tolist(),
      "hits": events.count("/jax/compilation_cache/cache_hits"),
      "misses": events.count("/jax/compilation_cache/cache_misses")}))
"""


def _run(tmp_path):
    env = dict(os.environ)
    env.update({"JAX_PLATFORMS": "stablehlo_ref", "STABLEHLO_PJRT_TRACE": "1"})
    env.pop("STABLEHLO_REF_NUM_DEVICES", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "cache")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[7:]), proc.stderr


def test_second_process_loads_from_the_cache(tmp_path):
    first, trace1 = _run(tmp_path)
    assert first["hits"] == 0 and first["misses"] >= 1
    assert "PJRT_Client_Compile" in trace1
    assert "PJRT_Executable_DeserializeAndLoad" not in trace1
    entries = os.listdir(tmp_path / "cache")
    assert any(e.startswith("jit__lambda") for e in entries), entries

    second, trace2 = _run(tmp_path)
    assert second["y"] == first["y"] and second["z"] == first["z"]
    assert second["hits"] >= 1
    assert "PJRT_Executable_DeserializeAndLoad" in trace2
    # Only the program with a host callback is compiled again.
    compiles = [ln for ln in trace2.splitlines() if "PJRT_Client_Compile" in ln]
    assert len(compiles) == 1, compiles
