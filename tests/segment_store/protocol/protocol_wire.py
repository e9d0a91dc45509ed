"""Hand-written wire primitives for golden bytes, independent of the codec under test.

Each helper writes what Java's ``DataOutput`` writes (big-endian), so a golden frame is spelled out
field by field in the order of Java's ``writeFields``.
"""

from __future__ import annotations

import struct
import uuid


def i8(value: int) -> bytes:
    return struct.pack(">b", value)


def boolean(value: bool) -> bytes:
    return b"\x01" if value else b"\x00"


def i32(value: int) -> bytes:
    return struct.pack(">i", value)


def i64(value: int) -> bytes:
    return struct.pack(">q", value)


def utf(raw: bytes) -> bytes:
    """Java ``writeUTF`` of a string whose (modified) UTF-8 bytes are given literally."""
    return struct.pack(">H", len(raw)) + raw


def blob(raw: bytes) -> bytes:
    """A ByteBuf written as int32 length + bytes."""
    return i32(len(raw)) + raw


def uid(value: uuid.UUID) -> bytes:
    """Two longs, most significant first."""
    msb = value.int >> 64
    lsb = value.int & 0xFFFF_FFFF_FFFF_FFFF
    return struct.pack(">QQ", msb, lsb)


def frame(type_code: int, *fields: bytes) -> bytes:
    body = b"".join(fields)
    return struct.pack(">ii", type_code, len(body)) + body


def event(payload: bytes) -> bytes:
    """An event as framed in segment data: type 0, length, payload."""
    return struct.pack(">ii", 0, len(payload)) + payload


def table_key(data: bytes, version: int) -> bytes:
    if not data:
        return i32(4 + 0 + 8) + i32(0)
    return i32(4 + len(data) + 8) + i32(len(data)) + data + i64(version)


def table_value(data: bytes) -> bytes:
    if not data:
        return i32(4) + i32(0)
    return i32(4 + len(data)) + i32(len(data)) + data
