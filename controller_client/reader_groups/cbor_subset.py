"""The subset of CBOR (RFC 8949) that Rust's ``serde_cbor`` 0.11 writes for the official Pravega client's reader
group state (:mod:`controller_client.reader_groups.format`): unsigned and negative integers in their shortest form,
text strings, arrays, maps (kept in their stored order, keys may be maps) and null."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from segstore_shared.errors import SegstoreError

U64_MAX = 2**64 - 1


class ReaderGroupFormatError(SegstoreError, ValueError):
    """Bytes that are not the official client's reader group state (the message says what and where)."""


_UINT = 0
_NEGINT = 1
_TEXT = 3
_ARRAY = 4
_MAP = 5
_NULL = b"\xf6"
_HEAD_WIDTHS = {24: struct.Struct(">B"), 25: struct.Struct(">H"), 26: struct.Struct(">I"), 27: struct.Struct(">Q")}


@dataclass(frozen=True, slots=True)
class CborMap:
    """A CBOR map as its entries in order (keys may be maps, so no dict)."""

    items: tuple[tuple[Cbor, Cbor], ...]


Cbor = int | str | None | list["Cbor"] | CborMap


def _head(major: int, value: int) -> bytes:
    if value < 24:
        return bytes([major << 5 | value])
    for info, layout in _HEAD_WIDTHS.items():
        if value < 1 << (8 * layout.size):
            return bytes([major << 5 | info]) + layout.pack(value)
    raise ReaderGroupFormatError(f"{value} does not fit a CBOR head")


def cbor_encode(item: Cbor) -> bytes:
    """serde_cbor's bytes for ``item`` (shortest integer heads, definite lengths)."""
    out = bytearray()
    _encode_into(item, out)
    return bytes(out)


def _encode_into(item: Cbor, out: bytearray) -> None:
    if item is None:
        out += _NULL
    elif isinstance(item, bool):
        raise ReaderGroupFormatError("booleans do not occur in the reader group state")
    elif isinstance(item, int):
        if not -(2**64) <= item <= U64_MAX:
            raise ReaderGroupFormatError(f"{item} can't be stored in CBOR (serde_cbor refuses it too)")
        out += _head(_UINT, item) if item >= 0 else _head(_NEGINT, -1 - item)
    elif isinstance(item, str):
        raw = item.encode()
        out += _head(_TEXT, len(raw)) + raw
    elif isinstance(item, list):
        out += _head(_ARRAY, len(item))
        for element in item:
            _encode_into(element, out)
    else:
        out += _head(_MAP, len(item.items))
        for key, value in item.items:
            _encode_into(key, out)
            _encode_into(value, out)


def cbor_decode(data: bytes) -> Cbor:
    """The one item ``data`` holds, in the subset serde_cbor writes for this state; anything else raises."""
    item, end = _decode_at(memoryview(data), 0)
    if end != len(data):
        raise ReaderGroupFormatError(f"{len(data) - end} bytes after the CBOR item at {end}")
    return item


def _decode_at(data: memoryview, pos: int) -> tuple[Cbor, int]:
    if pos >= len(data):
        raise ReaderGroupFormatError(f"CBOR item cut short at byte {pos}")
    initial = data[pos]
    if initial == 0xF6:
        return None, pos + 1
    major, info = initial >> 5, initial & 0x1F
    pos += 1
    if info < 24:
        value = info
    elif info in _HEAD_WIDTHS:
        layout = _HEAD_WIDTHS[info]
        if pos + layout.size > len(data):
            raise ReaderGroupFormatError(f"CBOR head cut short at byte {pos}")
        value = layout.unpack_from(data, pos)[0]
        pos += layout.size
    else:
        raise ReaderGroupFormatError(f"CBOR initial byte {initial:#04x} at {pos - 1} is not in serde_cbor's output")
    if major == _UINT:
        return value, pos
    if major == _NEGINT:
        return -1 - value, pos
    if major == _TEXT:
        if pos + value > len(data):
            raise ReaderGroupFormatError(f"CBOR text cut short at byte {pos}")
        try:
            return bytes(data[pos : pos + value]).decode(), pos + value
        except UnicodeDecodeError as error:
            raise ReaderGroupFormatError(f"CBOR text at {pos} is not UTF-8: {error}") from None
    if major == _ARRAY:
        elements: list[Cbor] = []
        for _ in range(value):
            element, pos = _decode_at(data, pos)
            elements.append(element)
        return elements, pos
    if major == _MAP:
        items: list[tuple[Cbor, Cbor]] = []
        for _ in range(value):
            key, pos = _decode_at(data, pos)
            item, pos = _decode_at(data, pos)
            items.append((key, item))
        return CborMap(tuple(items)), pos
    raise ReaderGroupFormatError(f"CBOR major type {major} at {pos - 1} is not in serde_cbor's output for this state")
