"""The protobuf wire format, for the few proto messages the plugin reads or
writes by hand: jaxlib ships no Python protobuf classes for
HloModuleProtoWithConfig, DeviceAssignmentProto, CompileOptionsProto or the
profiler's XSpace, and the project does not depend on protobuf. One reader
(``fields``) and one writer (``varint``, ``len_field``, ``int_field``) for
all of them (hlo_program.py, executable.py, profiler.py)."""

from __future__ import annotations

from collections.abc import Iterator

from .error import invalid_argument


def read_varint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """One varint of ``data`` at ``pos``: (value, next position)."""
    value = shift = 0
    while True:
        if pos >= len(data):
            raise invalid_argument(f"truncated {what} (varint)")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise invalid_argument(f"malformed {what} (varint too long)")


def fields(data: bytes, what: str) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of every field of a message, in
    order: the int of a varint (wire type 0), the bytes of the others.
    Raises INVALID_ARGUMENT for what is not protobuf 3: a field number out of
    range, a group or unknown wire type, a value that runs past the end."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = read_varint(data, pos, what)
        field, wire = key >> 3, key & 7
        if field < 1 or field >= 1 << 29:
            raise invalid_argument(f"malformed {what}: field number {field} at byte {pos}")
        if wire == 0:
            value, pos = read_varint(data, pos, what)
            yield field, wire, value
            continue
        if wire == 2:
            n, pos = read_varint(data, pos, what)
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
        else:
            raise invalid_argument(f"malformed {what}: wire type {wire} of field {field} "
                                   "(groups and unknown wire types are not protobuf 3)")
        if pos + n > end:
            raise invalid_argument(f"truncated {what}: field {field} runs past the end "
                                   f"({pos + n} > {end} bytes)")
        yield field, wire, data[pos:pos + n]
        pos += n


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 fields: two's complement, as protobuf does
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def len_field(field: int, payload: bytes) -> bytes:
    """A length-delimited field (bytes, string, nested message)."""
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def int_field(field: int, value: int) -> bytes:
    """A varint field; nothing for 0 (the default, as protobuf 3 writes it)."""
    return varint(field << 3) + varint(int(value)) if value else b""
