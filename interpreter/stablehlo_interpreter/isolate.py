"""Reading MLIR bytecode in a helper process first, so that bad bytes cannot
take this process down.

MLIR's bytecode reader (and StableHLO's portable-artifact deserializer behind
it) is not hardened against hostile input: a mutated artifact can segfault,
hang, or throw a C++ exception across the Python bindings that ends in
``std::terminate`` (seen: non-UTF-8 bytes in a diagnostic). No cheap check on
the bytes decides whether the reader will survive them, so every bytecode
input is first read by a long-lived helper process (one per process, started
on first use, restarted after it dies). Only bytes it read without crashing
are read again here; bytes it could not read come back as its diagnostic.
Digests of bytes already accepted are remembered, so recompiling the same
program does not pay twice.

``STABLEHLO_REF_ISOLATE=0`` turns the helper off (trusted input only);
``STABLEHLO_REF_ISOLATE_TIMEOUT`` (seconds, default 60) bounds one read.
"""

import hashlib
import os
import struct
import subprocess
import sys
import threading
import time

if __package__:   # not when run as the helper script (see _start)
    from . import config as _config

_LOCK = threading.Lock()
_PROC = None
_ACCEPTED = {}  # digest -> kind; bounded below
_MAX_ACCEPTED = 4096


class Rejected(Exception):
    """The helper could not read the bytes; ``str()`` says why."""


def enabled():
    return _config.ISOLATE.value()


def _timeout():
    return _config.ISOLATE_TIMEOUT.value()


def _start():
    env = _config.child_environ(drop=(_config.TRACE_OPS.name,))
    # Run as a plain script: importing the package would import every
    # kernel (scipy...), seconds of start-up the helper does not need.
    # -P: not the package folder on sys.path (its types.py would shadow the stdlib).
    return subprocess.Popen([sys.executable, "-P", os.path.abspath(__file__)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env)


def prestart() -> None:
    """Start the helper now, without waiting for it (its imports then overlap
    with the caller's work; the PJRT client calls this: every program JAX
    sends is bytecode)."""
    global _PROC
    if not enabled():
        return
    with _LOCK:
        if _PROC is None or _PROC.poll() is not None:
            try:
                _PROC = _start()
            except OSError:
                _PROC = None


def _read_exact(f, n):
    data = b""
    while len(data) < n:
        chunk = f.read(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _stop(proc):
    try:
        proc.kill()
        proc.wait(timeout=5)
    except Exception:
        pass


def check_bytecode(data):
    """Read ``data`` (bytes starting with the MLIR bytecode magic) in the
    helper. Returns its kind ("portable-artifact" or "bytecode"); raises
    :class:`Rejected` with the reader's diagnostic, or with what happened to
    the helper (killed by a signal, timed out)."""
    digest = hashlib.sha256(data).digest()
    kind = _ACCEPTED.get(digest)
    if kind is not None:
        return kind
    global _PROC
    with _LOCK:
        for attempt in (0, 1):
            if _PROC is None or _PROC.poll() is not None:
                _PROC = _start()
            proc = _PROC
            try:
                try:
                    proc.stdin.write(struct.pack("<Q", len(data)) + data)
                    proc.stdin.flush()
                except (BrokenPipeError, OSError):
                    _stop(proc)
                    _PROC = None
                    if attempt:
                        raise Rejected("the bytecode reader process could not be started")
                    continue
                reply = _reply(proc)
            except BaseException:
                # Interrupted (Ctrl-C) mid-request: the helper's answer
                # would be read as the next request's. Stop it; the next
                # read starts a fresh one.
                _stop(proc)
                _PROC = None
                raise
            if reply == "timeout":
                _PROC = None
                raise Rejected(f"the MLIR bytecode reader did not finish within "
                               f"{_timeout():g} s (STABLEHLO_REF_ISOLATE_TIMEOUT)")
            if reply is None:
                try:
                    rc = proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    rc = None
                _stop(proc)
                _PROC = None
                how = ("no exit status" if rc is None else
                       f"signal {-rc}" if rc < 0 else f"exit status {rc}")
                raise Rejected(f"the MLIR bytecode reader crashed on these bytes ({how})")
            status, text = reply
            if status == b"K":
                if len(_ACCEPTED) >= _MAX_ACCEPTED:
                    _ACCEPTED.clear()
                _ACCEPTED[digest] = text
                return text
            raise Rejected(text)
    raise Rejected("the bytecode reader process could not be started")


def _reply(proc):
    """(status byte, text) from the helper, "timeout" if it did not answer
    within the time limit (it is then killed), None if it died.

    Reads the pipe's file descriptor directly, waiting with select() up to
    the deadline (no reader thread per request: starting one cost about a
    millisecond per compile). The buffered ``proc.stdout`` is never read, so
    no reply bytes can hide in its buffer from select()."""
    if os.name == "nt":  # select() takes no pipes there
        return _reply_threaded(proc)
    import select
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + _timeout()
    data = b""
    need = 9
    while len(data) < need:
        left = deadline - time.monotonic()
        if left <= 0:
            _stop(proc)
            return "timeout"
        try:
            ready, _, _ = select.select([fd], [], [], left)
        except InterruptedError:
            continue
        if not ready:
            continue
        try:
            chunk = os.read(fd, max(need - len(data), 65536))
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
        if need == 9 and len(data) >= 9:
            (n,) = struct.unpack("<Q", data[1:9])
            need = 9 + n
    return data[:1], data[9:need].decode("utf-8", "replace")


def _reply_threaded(proc):
    result = []

    def read():
        try:
            head = _read_exact(proc.stdout, 9)
            (n,) = struct.unpack("<Q", head[1:])
            result.append((head[:1], _read_exact(proc.stdout, n).decode("utf-8", "replace")))
        except Exception:
            pass
    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(_timeout())
    if t.is_alive():
        _stop(proc)
        t.join(5)
        return "timeout"
    return result[0] if result else None


def read_in_this_process(ctx, data):
    """Deserialize ``data`` in ``ctx``: (module, kind). Raises ValueError with
    MLIR's diagnostic. A portable artifact (VHLO inside bytecode, what JAX
    sends) is only ever read as one; other bytecode is read as plain MLIR."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo
    if is_portable_artifact(data):
        try:
            return stablehlo.deserialize_portable_artifact(ctx, data), "portable-artifact"
        except Exception as e:
            raise ValueError(f"not a readable StableHLO portable artifact: {_text(e)}") from None
    try:
        return ir.Module.parse(data), "bytecode"
    except Exception as e:
        raise ValueError(f"not readable MLIR bytecode: {_text(e)}") from None


def is_portable_artifact(data):
    """True if the bytecode uses the VHLO dialect (a portable artifact does).

    The dialect section names its dialects by index into the string section,
    which comes first and grows with the program (function names, attribute
    names): in JAX's artifact of a program with 2000 functions "vhlo" sits
    150 kB in, so looking near the start misreads big programs as plain
    bytecode. The two sections are read here (MLIR has no Python call that
    lists a bytecode's dialects without reading all of it); for bytes that do
    not parse, any "vhlo" string decides, and the reader reports the rest."""
    try:
        return "vhlo" in bytecode_dialects(data)
    except (IndexError, ValueError):
        return b"vhlo\x00" in data


def _varint(data, pos):
    """MLIR bytecode's prefix varint at ``pos``: (value, next position). The
    count of trailing zero bits of the first byte is the number of bytes that
    follow (all eight when the first byte is 0)."""
    first = data[pos]
    if first & 1:
        return first >> 1, pos + 1
    if first == 0:
        if pos + 9 > len(data):
            raise ValueError("truncated varint")
        return int.from_bytes(data[pos + 1:pos + 9], "little"), pos + 9
    n = (first & -first).bit_length() - 1
    if pos + 1 + n > len(data):
        raise ValueError("truncated varint")
    return int.from_bytes(data[pos:pos + 1 + n], "little") >> (n + 1), pos + 1 + n


def _section(data, pos):
    """(section id, its bytes, next position): an id byte (high bit: an
    alignment varint and 0xCB padding follow), a length varint, the bytes."""
    if pos >= len(data):
        raise ValueError("truncated section")
    head = data[pos]
    length, pos = _varint(data, pos + 1)
    if head & 0x80:
        align, pos = _varint(data, pos)
        if align > 1:
            while pos % align and pos < len(data) and data[pos] == 0xCB:
                pos += 1
    end = pos + length
    if end > len(data):
        raise ValueError("truncated section")
    return head & 0x7F, data[pos:end], end


def bytecode_dialects(data):
    """The dialect names an MLIR bytecode file uses (its dialect section)."""
    data = bytes(data)
    if data[:4] != b"ML\xefR":
        raise ValueError("not MLIR bytecode")
    version, pos = _varint(data, 4)
    pos = data.index(b"\x00", pos) + 1  # the producer string
    strings = dialect_section = None
    while pos < len(data) and (strings is None or dialect_section is None):
        sid, body, pos = _section(data, pos)
        if sid == 0:
            strings = _string_table(body)
        elif sid == 1:
            dialect_section = body
    if strings is None or dialect_section is None:
        raise ValueError("no string or dialect section")
    count, p = _varint(dialect_section, 0)
    if count > len(dialect_section):
        raise ValueError("bad dialect count")
    names = []
    for _ in range(count):
        index, p = _varint(dialect_section, p)
        if version >= 1:  # kDialectVersioning: the low bit flags a version section
            has_version, index = index & 1, index >> 1
            names.append(strings[index])
            if has_version:
                _, _, p = _section(dialect_section, p)
        else:
            names.append(strings[index])
    return names


def _string_table(body):
    """The string section: a count, then the sizes (null terminator
    included) of the strings from the last to the first, whose bytes end
    the section in order."""
    count, p = _varint(body, 0)
    if count > len(body):  # every string takes a size byte at least
        raise ValueError("bad string count")
    sizes = []
    for _ in range(count):
        size, p = _varint(body, p)
        sizes.append(size)
    end = len(body)
    out = [""] * count
    for i, size in zip(range(count - 1, -1, -1), sizes):
        if size < 1 or size > end:
            raise ValueError("bad string size")
        out[i] = body[end - size:end - 1].decode("utf-8", "replace")
        end -= size
    return out


def _text(e):
    try:
        s = str(e)
    except Exception:
        s = type(e).__name__
    return s.encode("utf-8", "replace").decode("utf-8", "replace").strip() or type(e).__name__


def _die_with_parent():
    """Linux: get SIGKILL when the parent dies (a helper stuck in a hostile
    input must not outlive the process it serves)."""
    try:
        import ctypes
        import signal
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _helper_context():
    """The dialects loader.new_context loads (kept in step with it), without
    importing the package."""
    from jaxlib.mlir import ir
    from jaxlib.mlir._mlir_libs import _jax_mlir_ext
    from jaxlib.mlir.dialects import chlo, stablehlo
    reg = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(reg)
    ctx = ir.Context()
    ctx.append_dialect_registry(reg)
    ctx.load_all_available_dialects()
    stablehlo.register_dialect(ctx)
    chlo.register_dialect(ctx)
    try:
        from jaxlib.mlir.dialects import sdy
        sdy.register_dialect(ctx)
    except Exception:
        pass
    ctx.allow_unregistered_dialects = True
    return ctx


def touch_strings(module):
    """Read, as Python strings, what the compiler reads as strings: op names,
    locations, attribute names (of ops, and of dictionaries nested in
    dictionaries and arrays). For a string that is not UTF-8 (mutated bytecode
    has them) some binding paths throw a C++ exception nothing catches and the
    process terminates; here, in the helper, that rejects the bytes instead.
    Python exceptions are fine (the compiler handles them too)."""
    from jaxlib.mlir import ir

    def attr(a):
        if isinstance(a, ir.DictAttr):
            for i in range(len(a)):
                name = a[i].name
                try:
                    attr(a[name])
                except Exception:
                    pass
        elif isinstance(a, ir.ArrayAttr):
            for x in a:
                attr(x)

    def visit(op):
        op.name  # noqa: B018 - the read is the check
        try:
            str(op.location)
        except Exception:
            pass
        attrs = op.attributes
        # By position: iterating the map yields NamedAttribute objects on
        # jaxlib 0.8.0, names from 0.8.3 (mlir_compat.attribute_names; this file
        # runs as a standalone script, so it cannot import it).
        for key in [attrs[i].name for i in range(len(attrs))]:
            try:
                a = attrs[key]
            except Exception:
                continue
            attr(a)
        return ir.WalkResult.ADVANCE
    module.operation.walk(visit)


def _serve():
    """The helper: read length-prefixed bytes, answer K<kind> or E<diagnostic>."""
    _die_with_parent()
    if os.getppid() == 1:
        return 0
    # Ctrl-C in a terminal signals the whole process group: the parent
    # decides (it stops this helper if it was waiting for it), so that a
    # keypress never reads as "the reader crashed on these bytes".
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    # One context for up to 64 reads (making one costs more than most reads;
    # a fresh one now and then bounds what uniquing keeps), as in loader.py.
    ctx, uses = None, 0
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return 0
        (n,) = struct.unpack("<Q", head)
        data = _read_exact(inp, n)
        try:
            if ctx is None or uses >= 64:
                ctx, uses = _helper_context(), 0
            uses += 1
            with ctx:
                module, kind = read_in_this_process(ctx, data)
                touch_strings(module)
                module = None
            reply = b"K" + kind.encode()
        except Exception as e:
            reply = b"E" + _text(e).encode("utf-8", "replace")
        out.write(reply[:1] + struct.pack("<Q", len(reply) - 1) + reply[1:])
        out.flush()


if __name__ == "__main__":
    sys.exit(_serve())
