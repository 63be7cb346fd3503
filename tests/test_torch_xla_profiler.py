"""The PJRT profiler extension (stablehlo_pjrt/profiler.py): found and driven
the way PJRT hosts do (through the API table's extension chain, C function
pointers), its data read back with XLA's own XSpace parser (jaxlib's
ProfileData).  Under PyTorch/XLA's profiler: test_torch_xla.py.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from jax._src.lib import _profile_data

from stablehlo_pjrt import _capi as C
from stablehlo_pjrt import _shim, profiler, table

CALL = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
VOID_CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _ErrorArgs(ctypes.Structure):
    """PLUGIN_Profiler_Error_{Destroy,Message,GetCode}_Args (profiler_c_api.h)."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("priv", ctypes.c_void_p),
                ("error", ctypes.c_void_p), ("message", ctypes.c_void_p),
                ("message_size", ctypes.c_size_t)]


def _profiler_api():
    table.build_api()
    api = C.PJRT_Api.from_address(_shim.api_address()[0])
    ext = api.extension_start
    while ext:
        base = C.PJRT_Extension_Base.from_address(ext)
        if base.type == C.EXTENSION_TYPE_PROFILER:
            found = C.PJRT_Profiler_Extension.from_address(ext)
            assert found.base.struct_size == ctypes.sizeof(C.PJRT_Profiler_Extension)
            return C.PLUGIN_Profiler_Api.from_address(found.profiler_api)
        ext = base.next
    pytest.fail("no PJRT_Profiler_Extension in the extension chain")


class _Host:
    """Calls the profiler API as XLA's PluginTracer does."""

    def __init__(self):
        self.api = _profiler_api()

    def call(self, name, args):
        args.struct_size = ctypes.sizeof(args)
        err = CALL(getattr(self.api, name))(ctypes.addressof(args))
        if not err:
            return None
        e = _ErrorArgs(ctypes.sizeof(_ErrorArgs), None, err)
        CALL(self.api.error_get_code)(ctypes.addressof(e))
        code = ctypes.c_int.from_address(ctypes.addressof(e) + _ErrorArgs.message.offset).value
        VOID_CALL(self.api.error_message)(ctypes.addressof(e))
        text = ctypes.string_at(e.message, e.message_size).decode()
        VOID_CALL(self.api.error_destroy)(ctypes.addressof(e))
        return code, text

    def create(self):
        a = C.PLUGIN_Profiler_Create_Args()
        assert self.call("create", a) is None
        return a.profiler

    def simple(self, name, p):
        a = getattr(C, f"PLUGIN_Profiler_{name.capitalize()}_Args")()
        a.profiler = p
        return self.call(name, a)

    def collect(self, p):
        a = C.PLUGIN_Profiler_CollectData_Args()
        a.profiler = p
        err = self.call("collect_data", a)
        if err:
            return err
        first = ctypes.string_at(a.buffer, a.buffer_size_in_bytes)
        # The header's second call: the caller's buffer.
        buf = ctypes.create_string_buffer(a.buffer_size_in_bytes)
        a.buffer = ctypes.addressof(buf)
        assert self.call("collect_data", a) is None
        assert buf.raw == first
        return first


def _events(data):
    pd = _profile_data.ProfileData.from_serialized_xspace(data)
    planes = [p for p in pd.planes if p.name == profiler.PLANE_NAME]
    assert len(planes) == 1
    return [(line.name, e.name, e.duration_ns, dict(e.stats))
            for line in planes[0].lines for e in line.events]


def test_profiler_records_the_pjrt_calls_between_start_and_stop():
    import jax
    import jax.numpy as jnp
    dev = jax.devices("stablehlo_ref")[0]
    host = _Host()
    p = host.create()
    f = jax.jit(lambda v: jnp.sin(v) * 2)
    x = jax.device_put(np.arange(4.0, dtype=np.float32), dev)
    f(x).block_until_ready()  # compiled before: only the executes are recorded
    assert host.simple("start", p) is None
    code, text = host.collect(p)  # while running: an error, not data
    assert code == 9 and "stop the profiler first" in text
    for _ in range(3):
        f(x).block_until_ready()
    assert host.simple("stop", p) is None
    f(x).block_until_ready()  # after stop: not recorded
    events = _events(host.collect(p))
    executes = [e for e in events if e[1] == "PJRT_LoadedExecutable_Execute"]
    assert len(executes) == 3, events
    assert all(e[2] > 0 for e in executes)
    assert "LoadedExecutable(jit__lambda" in executes[0][3]["object"]
    assert all(e[0].startswith("PJRT calls (") for e in events)
    assert host.simple("destroy", p) is None
    code, text = host.simple("start", p)  # a destroyed profiler
    assert code == 3 and "PLUGIN_Profiler" in text


def test_profiler_shows_runs_on_the_worker():
    """Programs that run on the plugin's worker thread (asynchronous
    execution) show as 'run finished' slices, with their duration, on the
    worker's line; the Execute that queued them on the caller's line."""
    import jax
    import jax.numpy as jnp

    from stablehlo_pjrt import dispatch
    dev = jax.devices("stablehlo_ref")[0]
    host = _Host()
    p = host.create()
    f = jax.jit(lambda v: jnp.sin(v) * 2)
    x = jax.device_put(np.arange(4.0, dtype=np.float32), dev)
    f(x).block_until_ready()
    saved = list(dispatch._mode)
    dispatch.set_mode("async")
    try:
        assert host.simple("start", p) is None
        for _ in range(2):
            f(x).block_until_ready()
        assert host.simple("stop", p) is None
    finally:
        dispatch._mode[:] = saved
    events = _events(host.collect(p))
    runs = [e for e in events if e[1] == "run finished"]
    assert len(runs) == 2, events
    assert all(e[0] == "PJRT calls (stablehlo_ref-worker)" and e[2] > 0 for e in runs)
    executes = [e for e in events if e[1] == "PJRT_LoadedExecutable_Execute"]
    assert len(executes) == 2 and all(e[0] != runs[0][0] for e in executes)
    assert all(e[3]["dispatch"].startswith("queued") for e in executes)
    assert host.simple("destroy", p) is None


def test_empty_session_and_errors():
    host = _Host()
    p = host.create()
    assert host.simple("start", p) is None
    assert host.simple("stop", p) is None
    assert _events(host.collect(p)) == []
    assert host.simple("destroy", p) is None
    a = C.PLUGIN_Profiler_CollectData_Args()
    a.profiler = 0x1234
    code, text = host.call("collect_data", a)
    assert code == 3 and "not a live PLUGIN_Profiler" in text


def test_xspace_encoding_round_trips_through_xla():
    """Large and small times, several threads, long stats: read back by XLA's
    parser as written."""
    t0 = 5_000_000_000
    events = [("PJRT_A", t0, 1500, 1, {"object": "x" * 1000}),
              ("PJRT_B", t0 + 2_000_000, 0, 1, {}),
              ("PJRT_A", t0 + 10, 7, 2, {"error": "boom"})]
    data = profiler.xspace(events, wall_minus_perf_ns=1_700_000_000_000_000_000)
    got = _events(data)
    assert [(n, d) for _, n, d, _ in got] == [("PJRT_A", 1500), ("PJRT_B", 0), ("PJRT_A", 7)]
    assert got[0][3]["object"] == "x" * profiler._MAX_STAT_CHARS + "..."
    assert got[2][3] == {"error": "boom"}


def test_jax_profiler_trace_collects_the_plugin_plane(tmp_path):
    """jax.profiler.trace on stablehlo_ref: the written profile has the
    plugin's plane with the PJRT calls of the traced program (jax_plugin
    registers the profiler extension with JAX's profiler)."""
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent(f"""
        import glob, jax, jax.numpy as jnp
        from jax._src.lib import _profile_data
        f = jax.jit(lambda x: jnp.sin(x) + 1)
        x = jnp.ones(4)
        f(x).block_until_ready()
        with jax.profiler.trace({str(tmp_path)!r}):
            f(x).block_until_ready()
        (path,) = glob.glob({str(tmp_path)!r} + "/**/*.xplane.pb", recursive=True)
        pd = _profile_data.ProfileData.from_file(path)
        (plane,) = [p for p in pd.planes if p.name == {profiler.PLANE_NAME!r}]
        print(sorted({{e.name for line in plane.lines for e in line.events}}))
    """)
    env = dict(__import__("os").environ, JAX_PLATFORMS="stablehlo_ref")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    names = eval(out.stdout.strip().splitlines()[-1])
    assert "PJRT_LoadedExecutable_Execute" in names, names
