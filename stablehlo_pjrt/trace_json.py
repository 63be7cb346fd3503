"""The PJRT call trace as Chrome trace-event JSON (Perfetto, chrome://tracing).

    STABLEHLO_PJRT_TRACE_JSON=trace.json JAX_PLATFORMS=stablehlo_ref python train.py

writes ``trace.json`` when the process exits. The writer is a hook of
stablehlo_pjrt.trace like the stderr printer; the oracle tools offer it as
``stablehlo_pjrt.oracle.chrome_trace``. From Python::

    from stablehlo_pjrt.oracle import chrome_trace
    writer = chrome_trace.start()        # hooks into stablehlo_pjrt.trace
    ...                                  # run JAX code on stablehlo_ref
    writer.write("trace.json")           # or writer.to_json() / chrome_trace.stop()

With STABLEHLO_PJRT_TRACE_JSON set, ``chrome_trace.current().write(path)``
writes a snapshot before the process exits.

What the file shows (JSON object format, times in microseconds):

* one track per thread (``tid``), named after the Python thread;
* every PJRT call a complete slice (``ph: "X"``) named after the call, with
  its details in ``args``: Compile carries the module text, Execute the
  executable and its input/output buffers, failed calls an ``error``;
* the events the C shim serves (PJRT_Event_*) as instant events;
* each buffer's lifetime as an async slice (``ph: "b"``/``"e"``, category
  ``buffer``, ``id`` = the buffer's handle and a serial number) from the call that created it
  (BufferFromHostBuffer, an Execute output, a copy) to its
  PJRT_Buffer_Destroy. Buffers still alive when the file is written end
  there, marked ``alive_at_write``.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import threading

from . import config, trace

# The handle is the last field of str(Buffer): "Buffer(f32[3] on ..., 0x55d0...)".
_BUFFER_RE = re.compile(r"Buffer\((.*?), (0x[0-9a-f]+)\)")
# Calls whose `result` (or Execute's `outputs`) name newly created buffers.
_MAX_ARG_CHARS = 200_000


def _buffers_in(value) -> list[tuple[str, str]]:
    """(description, handle) of every buffer named in a detail value."""
    if isinstance(value, (list, tuple)):
        return [b for v in value for b in _buffers_in(v)]
    return [(m.group(1), m.group(2)) for m in _BUFFER_RE.finditer(str(value))]


def _jsonable(value):
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    text = str(value)
    if len(text) > _MAX_ARG_CHARS:
        text = text[:_MAX_ARG_CHARS] + f"... <{len(text) - _MAX_ARG_CHARS} more chars>"
    return text


class ChromeTraceWriter:
    """A stablehlo_pjrt.trace hook that collects trace events."""

    def __init__(self, path: str | None = None):
        self.path = path
        self.events: list[dict] = []
        self._threads: dict[int, str] = {}
        self._live: dict[str, dict] = {}   # buffer handle -> its "b" event
        self._lock = threading.Lock()
        self._t0 = None
        self._serial = 0
        self._pid = os.getpid()

    # -- hook ------------------------------------------------------------

    def __call__(self, call: str, obj: object, details: dict) -> None:
        ts_ns = details.get("ts_ns")
        if ts_ns is None:
            return
        tid = details.get("thread", threading.get_ident())
        with self._lock:
            if self._t0 is None:
                self._t0 = ts_ns
            ts = (ts_ns - self._t0) / 1000.0
            if tid not in self._threads:
                self._threads[tid] = threading.current_thread().name
            args = {k: _jsonable(v) for k, v in details.items()
                    if k not in ("ts_ns", "dur_ns", "thread")}
            if obj is not None:
                args["object"] = _jsonable(obj)
            dur = details.get("dur_ns")
            event = {"name": call, "cat": "pjrt", "pid": self._pid, "tid": tid,
                     "ts": ts, "args": args}
            if dur is None:
                event.update(ph="i", s="t")
            else:
                event.update(ph="X", dur=dur / 1000.0)
            self.events.append(event)
            if "error" in details:
                return
            end = ts + (dur or 0) / 1000.0
            if call == "PJRT_Buffer_Destroy":
                for _, handle in _buffers_in(obj):
                    self._end_buffer(handle, ts, {"destroyed_by": call})
            else:
                created = []
                if "result" in details:
                    created += _buffers_in(details["result"])
                if call == "PJRT_LoadedExecutable_Execute":
                    created += _buffers_in(details.get("outputs", ()))
                for desc, handle in created:
                    self._begin_buffer(handle, desc, call, end, tid)

    def _begin_buffer(self, handle, desc, call, ts, tid):
        if handle in self._live:  # a handle reused without a Destroy we saw
            self._end_buffer(handle, ts, {"note": "handle reused"})
        # The allocator reuses addresses: number the lifetimes so that each
        # begin/end pair has an id of its own.
        self._serial += 1
        event = {"name": f"buffer {desc}", "cat": "buffer", "ph": "b",
                 "id": f"{handle}/{self._serial}",
                 "pid": self._pid, "tid": tid, "ts": ts,
                 "args": {"created_by": call, "buffer": desc, "handle": handle}}
        self._live[handle] = event
        self.events.append(event)

    def _end_buffer(self, handle, ts, args):
        begin = self._live.pop(handle, None)
        if begin is None:
            return  # created before tracing started
        self.events.append({"name": begin["name"], "cat": "buffer", "ph": "e",
                            "id": begin["id"], "pid": self._pid, "tid": begin["tid"],
                            "ts": ts, "args": args})

    # -- output ----------------------------------------------------------

    def to_json(self) -> dict:
        """The trace-event JSON object (buffers still alive end now)."""
        with self._lock:
            events = list(self.events)
            last = max((e["ts"] + e.get("dur", 0) for e in events), default=0.0)
            for handle, begin in self._live.items():
                events.append({"name": begin["name"], "cat": "buffer", "ph": "e",
                               "id": begin["id"], "pid": self._pid, "tid": begin["tid"],
                               "ts": last, "args": {"alive_at_write": True}})
            meta = [{"name": "process_name", "ph": "M", "pid": self._pid, "tid": 0,
                     "args": {"name": "stablehlo_pjrt (PJRT calls)"}}]
            meta += [{"name": "thread_name", "ph": "M", "pid": self._pid, "tid": tid,
                      "args": {"name": name}} for tid, name in self._threads.items()]
        return {"traceEvents": meta + events, "displayTimeUnit": "ms"}

    def write(self, path: str | None = None) -> str:
        path = path or self.path
        if not path:
            raise ValueError("no path: pass one to write() or to ChromeTraceWriter()")
        data = self.to_json()
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)  # never leave a half-written file behind
        return path


_active: ChromeTraceWriter | None = None


def current() -> ChromeTraceWriter | None:
    """The writer collecting now (from start() or STABLEHLO_PJRT_TRACE_JSON)."""
    return _active


def start(path: str | None = None, *, at_exit: bool = True) -> ChromeTraceWriter:
    """Starts collecting PJRT calls (turns tracing on); with ``path`` and
    ``at_exit``, the JSON is written there when the process exits."""
    global _active
    if _active is not None:
        if path and not _active.path:
            _active.path = path
        return _active
    writer = ChromeTraceWriter(path)
    _active = writer
    trace.add_hook(writer)
    if path and at_exit:
        atexit.register(_write_at_exit, writer)
    return writer


def stop(path: str | None = None) -> ChromeTraceWriter | None:
    """Stops collecting; writes the file if a path is known. Returns the writer."""
    global _active
    writer, _active = _active, None
    if writer is not None:
        trace.remove_hook(writer)
        if path or writer.path:
            writer.write(path)
    return writer


def _write_at_exit(writer: ChromeTraceWriter) -> None:
    try:
        writer.write()
    except Exception as e:  # at exit there is no one left to raise to
        import sys
        sys.stderr.write(f"[stablehlo_pjrt] cannot write the Chrome trace to "
                         f"{writer.path}: {e}\n")


def install_from_env() -> None:
    """Called while the plugin builds its API table: STABLEHLO_PJRT_TRACE_JSON
    names the file. Registers the hook without turning tracing on (the table
    is being built; table.build_api enables tracing from trace.ENABLED
    afterwards); the file is written at exit."""
    global _active
    path = config.TRACE_JSON.value().strip()
    if not path or _active is not None:
        return
    writer = ChromeTraceWriter(path)
    _active = writer
    trace.register_hook(writer)
    atexit.register(_write_at_exit, writer)
