"""The PJRT profiler extension: the plugin's PJRT call trace as a profile.

PJRT hosts find a plugin's profiler through the ``PJRT_Profiler_Extension``
(pjrt_c_api_profiler_extension.h) of the API table: a
``PLUGIN_Profiler_Api`` (xla/backends/profiler/plugin/profiler_c_api.h) whose
create/start/stop/collect_data calls a profiling session makes (PyTorch/XLA's
``torch_xla.debug.profiler``, JAX's ``jax.profiler``; without it PyTorch/XLA
warns "Profiler API not found for PJRT plugin").  Between start and stop
this profiler records every PJRT call the plugin serves, through the same
hook the PJRT trace uses (trace.py): name, thread, start and duration, the
object it was about and its error.  collect_data hands them over as a
serialized ``tensorflow.profiler.XSpace``: one plane
``/device:CUSTOM:stablehlo_ref`` (the trace viewer shows "/device:CUSTOM:"
planes when there is no GPU or TPU plane), one line per calling thread, one
event per call.

The XSpace is encoded by hand (``_XSpaceWriter``, protobuf wire format of
tsl/profiler/protobuf/xplane.proto): the project has no protobuf runtime
and jaxlib ships no XSpace writer; the messages used are five small ones.
Tests read the bytes back with XLA's own parser (jaxlib's ProfileData).

The error functions of the profiler API are the C ones of PJRT_Error (their
args structs have the same layout); the five calls are slots of the shim
like every PJRT function (table.py wires them).
"""

from __future__ import annotations

import ctypes
import threading
import time

from . import _capi as C
from . import trace
from .error import failed_precondition, invalid_argument
from .handles import lookup, register, release
from .protowire import int_field, len_field

# What a profiling session can hold at most: a long session must not take
# the host's memory (events past it are counted, not kept).
MAX_EVENTS = 1_000_000
PLANE_NAME = "/device:CUSTOM:stablehlo_ref"
_MAX_STAT_CHARS = 300


class Profiler:
    """PLUGIN_Profiler: one profiling session (create, start, stop, collect)."""

    def __init__(self, options: bytes):
        self.options = options  # tensorflow.ProfileOptions (levels): not needed
        self.state = "created"
        self.events: list[tuple] = []
        self.dropped = 0
        self.wall_minus_perf_ns = 0
        self.data = None  # the serialized XSpace, once collected
        self._buffer = None  # its C copy handed out by collect_data
        self._lock = threading.Lock()
        register(self)

    def __str__(self):
        return f"Profiler({self.state}, {len(self.events)} events, {self.handle:#x})"

    def hook(self, call: str, obj: object, details: dict) -> None:
        """trace.py hook: one PJRT call served while the session runs."""
        with self._lock:
            if len(self.events) >= MAX_EVENTS:
                self.dropped += 1
                return
            stats = {}
            if obj is not None:
                stats["object"] = str(obj)
            for key, value in details.items():
                if key not in ("ts_ns", "dur_ns", "thread", "module"):
                    stats[key] = value
            self.events.append((call, details.get("ts_ns", 0), details.get("dur_ns") or 0,
                                details.get("thread", 0), stats))

    def start(self) -> None:
        if self.state == "started":
            return
        self.events, self.dropped, self.data, self._buffer = [], 0, None, None
        # trace.py stamps calls with perf_counter_ns; profiles use wall time.
        self.wall_minus_perf_ns = time.time_ns() - time.perf_counter_ns()
        self.state = "started"
        trace.add_hook(self.hook)

    def stop(self) -> None:
        if self.state != "started":
            return
        trace.remove_hook(self.hook)
        self.state = "stopped"

    def collect(self) -> bytes:
        if self.state == "started":
            raise failed_precondition("PLUGIN_Profiler_CollectData: stop the profiler first")
        if self.data is None:
            with self._lock:
                events = list(self.events)
            self.data = xspace(events, self.wall_minus_perf_ns, self.dropped)
        return self.data


def xspace(events, wall_minus_perf_ns: int, dropped: int = 0) -> bytes:
    """The serialized XSpace of ``events`` ((call, ts_ns, dur_ns, thread,
    stats) with perf_counter_ns times)."""
    w = _XSpaceWriter()
    names = {t.ident: t.name for t in threading.enumerate()}
    lines: dict[int, list] = {}
    for e in events:
        lines.setdefault(e[3], []).append(e)
    line_msgs = []
    for line_id, (thread, evs) in enumerate(sorted(lines.items(), key=lambda kv: kv[1][0][1])):
        start = min(e[1] for e in evs)
        end = max(e[1] + e[2] for e in evs)
        body = (int_field(1, line_id) + _str(2, f"PJRT calls ({names.get(thread, 'thread')})")
                + int_field(3, start + wall_minus_perf_ns)
                + b"".join(len_field(4, w.event(e, start)) for e in evs)
                + int_field(9, (end - start) * 1000))
        line_msgs.append(len_field(3, body))
    stats = b""
    if dropped:
        stats = len_field(6, int_field(1, w.stat_id("dropped_events")) + int_field(4, dropped))
    plane = (int_field(1, 0) + _str(2, PLANE_NAME) + b"".join(line_msgs)
             + w.metadata() + stats)
    return len_field(1, plane)


class _XSpaceWriter:
    """Event and stat metadata ids of one XPlane."""

    def __init__(self):
        self.event_ids: dict[str, int] = {}
        self.stat_ids: dict[str, int] = {}

    def stat_id(self, name: str) -> int:
        return self.stat_ids.setdefault(name, len(self.stat_ids) + 1)

    def event(self, e, line_start: int) -> bytes:
        call, ts, dur, _, stats = e
        mid = self.event_ids.setdefault(call, len(self.event_ids) + 1)
        body = int_field(1, mid) + int_field(2, (ts - line_start) * 1000) + int_field(3, dur * 1000)
        for key, value in stats.items():
            text = str(value)
            if len(text) > _MAX_STAT_CHARS:
                text = text[:_MAX_STAT_CHARS] + "..."
            body += len_field(4, int_field(1, self.stat_id(key)) + _str(5, text))
        return body

    def metadata(self) -> bytes:
        """XPlane fields 4 and 5: the map entries (key 1, value 2)."""
        out = b""
        for name, i in self.event_ids.items():
            out += len_field(4, int_field(1, i) + len_field(2, int_field(1, i) + _str(2, name)))
        for name, i in self.stat_ids.items():
            out += len_field(5, int_field(1, i) + len_field(2, int_field(1, i) + _str(2, name)))
        return out


def _str(field: int, text: str) -> bytes:
    return len_field(field, text.encode("utf-8", "replace"))


# ----------------------------------------------------------------------------
# The PLUGIN_Profiler_Api calls (slots of the shim; table.py wires them).


def _profiler(address: int) -> Profiler:
    return lookup(address, Profiler, "PLUGIN_Profiler")


def _args(cls, ptr: int):
    if not ptr:
        raise invalid_argument(f"{cls.__name__}: the args pointer is NULL")
    return cls.from_address(ptr)


def Profiler_Create(ptr):
    a = _args(C.PLUGIN_Profiler_Create_Args, ptr)
    options = ctypes.string_at(a.options, a.options_size) if a.options and a.options_size \
        else b""
    a.profiler = Profiler(options).handle


def Profiler_Destroy(ptr):
    a = _args(C.PLUGIN_Profiler_Destroy_Args, ptr)
    if a.profiler:
        p = _profiler(a.profiler)
        p.stop()
        release(p.handle)


def Profiler_Start(ptr):
    _profiler(_args(C.PLUGIN_Profiler_Start_Args, ptr).profiler).start()


def Profiler_Stop(ptr):
    _profiler(_args(C.PLUGIN_Profiler_Stop_Args, ptr).profiler).stop()


def Profiler_CollectData(ptr):
    """Without a buffer: the data's size and a plugin-owned buffer holding it
    (valid until the next collect_data or destroy; XLA's PluginTracer reads
    that one); with one (the header's second call): the data copied into it."""
    a = _args(C.PLUGIN_Profiler_CollectData_Args, ptr)
    p = _profiler(a.profiler)
    data = p.collect()
    if a.buffer:
        ctypes.memmove(a.buffer, data, len(data))
    else:
        p._buffer = ctypes.create_string_buffer(data, max(1, len(data)))
        a.buffer = ctypes.addressof(p._buffer)
    a.buffer_size_in_bytes = len(data)


HANDLERS = {"PLUGIN_Profiler_Create": Profiler_Create,
            "PLUGIN_Profiler_Destroy": Profiler_Destroy,
            "PLUGIN_Profiler_Start": Profiler_Start,
            "PLUGIN_Profiler_Stop": Profiler_Stop,
            "PLUGIN_Profiler_CollectData": Profiler_CollectData}
