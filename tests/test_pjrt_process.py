"""Whole-process behaviour of the stablehlo_ref plugin: the PJRT trace,
discovery, loading by path (from JAX and from a non-Python host) and clean
interpreter shutdown."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap

import pytest

PY = sys.executable


def run_python(code: str, env_extra: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    for key in ("JAX_PLATFORMS", "JAX_ENABLE_X64", "STABLEHLO_REF_NUM_DEVICES",
                "STABLEHLO_PJRT_TRACE", "PJRT_NAMES_AND_LIBRARY_PATHS"):
        env.pop(key, None)
    env.update(env_extra)
    return subprocess.run([PY, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=timeout)


# ---------------------------------------------------------------------------
# Trace
# ---------------------------------------------------------------------------

POWER = """
import jax, jax.numpy as jnp
print("RESULT", jax.jit(lambda x: jnp.power(x, jnp.int32(2)))(1))
"""


def _ordered(lines: list[str], wanted: list[str]) -> list[str]:
    """The entries of `wanted` not found, in order, as line prefixes."""
    missing = []
    pos = 0
    for w in wanted:
        for i in range(pos, len(lines)):
            if lines[i].startswith(w):
                pos = i + 1
                break
        else:
            missing.append(w)
    return missing


def test_trace_of_power_program():
    p = run_python(POWER, {"JAX_PLATFORMS": "stablehlo_ref", "STABLEHLO_PJRT_TRACE": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "RESULT 1" in p.stdout
    lines = [ln[len("[stablehlo_pjrt] "):] for ln in p.stderr.splitlines()
             if ln.startswith("[stablehlo_pjrt] ")]
    missing = _ordered(lines, [
        "PJRT_Plugin_Initialize",
        "PJRT_Client_Create StablehloRefClient",
        "PJRT_Client_Devices StablehloRefClient",
        "PJRT_Client_Compile StablehloRefClient",
        "PJRT_Client_BufferFromHostBuffer StablehloRefClient",
        "PJRT_LoadedExecutable_Execute LoadedExecutable(jit__lambda",
        # The result is read in place (host memory, PJRT_Buffer_IsOnCpu), as
        # jaxlib reads XLA CPU's: an external reference, the data's address.
        "PJRT_Buffer_IsOnCpu Buffer(s32[]",
        "PJRT_Buffer_IncreaseExternalReferenceCount Buffer(s32[]",
        "PJRT_Buffer_OpaqueDeviceMemoryDataPointer Buffer(s32[]",
        "PJRT_Buffer_ReadyEvent Buffer(s32[]",
        "PJRT_Buffer_DecreaseExternalReferenceCount Buffer(s32[]",
    ])
    assert not missing, f"missing in order: {missing}\n" + "\n".join(lines)
    execute = next(ln for ln in lines if ln.startswith("PJRT_LoadedExecutable_Execute"))
    assert "inputs=[['Buffer(s32[]" in execute and "= 1']]" in execute, execute
    assert "outputs=[['Buffer(s32[]" in execute, execute
    assert any(ln.startswith("PJRT_Buffer_Destroy Buffer(") for ln in lines)
    # The compiled module is part of the Compile record.
    assert "module @jit__lambda" in p.stderr and "stablehlo.multiply" in p.stderr


def test_trace_hook_records_are_structured():
    code = """
    import json
    from stablehlo_pjrt import trace
    records = []
    trace.add_hook(lambda call, obj, details: records.append((call, obj, details)))
    import jax, numpy as np
    x = jax.device_put(np.arange(3, dtype=np.float32), jax.devices("stablehlo_ref")[0])
    y = jax.jit(lambda v: v + 1)(x)
    np.asarray(y)
    calls = [r[0] for r in records]
    ex = next(r for r in records if r[0] == "PJRT_LoadedExecutable_Execute")
    out = {
        "calls": calls,
        "exec_obj": type(ex[1]).__name__,
        "exec_keys": sorted(ex[2]),
        "all_timed": all("ts_ns" in r[2] for r in records),
    }
    print("JSON", json.dumps(out))
    """
    p = run_python(code, {"JAX_PLATFORMS": "stablehlo_ref"})
    assert p.returncode == 0, p.stderr[-3000:]
    import json
    out = json.loads(p.stdout.split("JSON", 1)[1])
    assert "PJRT_Client_Create" in out["calls"] and "PJRT_Client_Compile" in out["calls"]
    assert "PJRT_Event_OnReady" in out["calls"]
    assert out["exec_obj"] == "LoadedExecutable"
    assert {"inputs", "outputs", "dur_ns", "ts_ns", "thread"} <= set(out["exec_keys"])
    assert out["all_timed"]
    # No stderr trace unless asked for.
    assert "[stablehlo_pjrt]" not in p.stderr


# ---------------------------------------------------------------------------
# Discovery and loading
# ---------------------------------------------------------------------------


def test_other_platforms_do_not_start_the_plugin():
    code = """
    import jax, jax.numpy as jnp
    print("DEVICES", jax.devices(), float(jnp.ones(3).sum()))
    """
    p = run_python(code, {"JAX_PLATFORMS": "cpu", "STABLEHLO_PJRT_TRACE": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "CpuDevice" in p.stdout and "3.0" in p.stdout
    assert "PJRT_Client_Create" not in p.stderr


def test_load_by_library_path_in_jax():
    import stablehlo_pjrt
    code = """
    import jax, numpy as np
    print("DEVICES", jax.devices())
    print("RESULT", np.asarray(jax.jit(lambda x: x * 2)(np.arange(3, dtype=np.int32))).tolist())
    """
    p = run_python(code, {"JAX_PLATFORMS": "by_path",
                          "PJRT_NAMES_AND_LIBRARY_PATHS": f"by_path:{stablehlo_pjrt.shim_path()}"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "StablehloRefDevice(id=0)" in p.stdout and "RESULT [0, 2, 4]" in p.stdout


C_HOST = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef void *(*GetApi)(void);
typedef void *(*Fn)(void *);

/* Offsets from pjrt_c_api.h 0.110: functions start after struct_size,
 * extension_start and PJRT_Api_Version (24 bytes). */
static Fn slot(char *api, int index) { return *(Fn *)(api + 40 + 8 * index); }

int main(int argc, char **argv) {
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (!lib) { printf("dlopen failed: %s\n", dlerror()); return 2; }
  GetApi get = (GetApi)dlsym(lib, "GetPjrtApi");
  if (!get) { printf("no GetPjrtApi\n"); return 3; }
  char *api = (char *)get();
  if (!api) { printf("GetPjrtApi returned NULL\n"); return 4; }
  printf("version %d.%d\n", *(int *)(api + 32), *(int *)(api + 36));
  uint64_t init[2] = {16, 0};
  if (slot(api, 3)(init)) { printf("Plugin_Initialize failed\n"); return 5; }
  uint64_t create[11] = {0};
  create[0] = sizeof(create);
  if (slot(api, 10)(create)) { printf("Client_Create failed\n"); return 6; }
  uint64_t name[5] = {40, 0, create[8], 0, 0};
  if (slot(api, 12)(name)) { printf("PlatformName failed\n"); return 7; }
  printf("platform %.*s\n", (int)name[4], (const char *)name[3]);
  uint64_t destroy[3] = {24, 0, create[8]};
  if (slot(api, 11)(destroy)) { printf("Client_Destroy failed\n"); return 8; }
  return 0;
}
"""


def test_get_pjrt_api_from_a_non_python_host(tmp_path):
    import stablehlo_pjrt
    libdir = sysconfig.get_config_var("LIBDIR")
    ldlib = sysconfig.get_config_var("LDLIBRARY") or ""
    if shutil.which("gcc") is None or not ldlib.endswith(".so") or \
            not os.path.exists(os.path.join(libdir, ldlib)):
        pytest.skip("needs gcc and a shared libpython to build the C host")
    src = tmp_path / "host.c"
    src.write_text(C_HOST)
    exe = tmp_path / "host"
    pylib = ldlib[3:-3]  # libpython3.11.so -> python3.11
    build = subprocess.run(["gcc", str(src), "-o", str(exe), f"-L{libdir}",
                            "-Wl,--no-as-needed", f"-l{pylib}",
                            f"-Wl,-rpath,{libdir}", "-ldl"], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    env = dict(os.environ)
    env["STABLEHLO_PJRT_PYTHON"] = PY
    p = subprocess.run([str(exe), stablehlo_pjrt.shim_path()], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "version 0.110" in p.stdout and "platform stablehlo_ref" in p.stdout, p.stdout


# ---------------------------------------------------------------------------
# Clean exit
# ---------------------------------------------------------------------------

EXIT_SCRIPT = """
import threading, time
import jax, jax.numpy as jnp, numpy as np
f = jax.jit(lambda x: x * 2 + 1)
keep = [f(np.arange(10, dtype=np.float32)) for _ in range(3)]
big = jax.device_put(np.ones((64, 64), np.float32))
try:
    jax.jit(lambda x: jax.ffi.ffi_call(
        "no_such_target", jax.ShapeDtypeStruct(x.shape, x.dtype))(x))(np.ones(2, np.float32))
except Exception:
    pass
workers = [threading.Thread(target=lambda: f(np.ones(3, np.float32)).block_until_ready())
           for _ in range(4)]
for t in workers:
    t.start()
for t in workers:
    t.join()

# Left alive at exit on purpose: arrays, executables, a donated-then-deleted
# buffer and a thread-local jit cache.
gone = jax.device_put(np.ones(3, np.float32))
gone.delete()
g = jax.jit(lambda x, y: (x @ y, x.sum()))
out = g(np.ones((4, 4), np.float32), np.ones((4, 2), np.float32))
time.sleep(0.01)
print("OK", float(keep[0][1]))
"""
# (A daemon thread still calling jit functions while Python finalizes makes
# plain JAX on XLA CPU abort as well -- jaxlib re-acquires the GIL after
# finalization -- so that case is not part of this test.)


def _exit_runs(n: int):
    def one(i):
        p = run_python(EXIT_SCRIPT, {"JAX_PLATFORMS": "stablehlo_ref"}, timeout=120)
        return i, p

    failures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for i, p in pool.map(one, range(n)):
            if p.returncode != 0 or "OK 3.0" not in p.stdout:
                failures.append(f"run {i}: rc={p.returncode} stdout={p.stdout[-200:]!r} "
                                f"stderr={p.stderr[-1500:]}")
    assert not failures, f"{len(failures)}/{n} runs failed:\n" + "\n".join(failures[:3])


def test_clean_exit_10_runs():
    _exit_runs(10)


@pytest.mark.slow
def test_clean_exit_200_runs():
    _exit_runs(200)
