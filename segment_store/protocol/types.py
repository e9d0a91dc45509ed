"""Primitive wire encodings: the field kinds a command's layout is made of.

A command's wire layout is a tuple of :class:`Kind` objects, one per dataclass field, in wire order
(the order Java's ``writeFields`` writes them); ``layout.Plan`` compiles it. Kinds read from a
``memoryview`` of exactly one frame body, so a field that runs past the body is detected, never read
from the next frame.

Encodings, all big-endian as Java's ``DataOutput`` writes them:

* ``I8``/``BOOL``/``I32``/``I64``: Java ``writeByte``/``writeBoolean``/``writeInt``/``writeLong``.
  ``BOOL`` decodes any non-zero byte as ``True`` (Java ``readBoolean``).
* ``UUID``: two longs, most significant first (= the UUID's 16 bytes); exposed as ``uuid.UUID``.
* ``UTF``: Java ``writeUTF`` framing: unsigned 16-bit byte length, then the text. See :func:`encode_utf`
  and :func:`decode_utf` for how modified UTF-8 is handled.
* ``BLOB``: int32 length + bytes (Java writes ``ByteBuf``s this way); a negative length is an error.
* ``REST``: every remaining byte of the body (``AppendBlock``, ``PartialEvent``, ``Event``).
* :class:`Opt`: a trailing field added in a later wire version; read only if at least
  ``min_remaining`` bytes are left (Java's ``in.available() >= n`` checks), else ``default``.
* :class:`ListOf`: int32 count then the elements; decoded as a ``tuple``.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Any, TypeAlias, TypeVar

from segment_store.protocol.errors import ProtocolError

Buffer: TypeAlias = bytes | bytearray | memoryview
"""Anything the encoder accepts as a byte payload and joins into a frame."""

_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
MAX_UTF_BYTES = 0xFFFF


def short_read(need: int, pos: int, have: int) -> ProtocolError:
    """The error for a field that needs ``need`` bytes at ``pos`` of a body with ``have`` bytes."""
    return ProtocolError(f"needs {need} byte(s) at offset {pos}, only {max(have - pos, 0)} left")


# --------------------------------------------------------------------------------------------------
# Strings


def encode_utf(text: str) -> bytes:
    """Encode ``text`` as Java ``writeUTF`` framing: u16 byte length + standard UTF-8.

    Standard UTF-8 equals Java's modified UTF-8 for every BMP character except NUL, which we write as
    the raw byte 0x00 (Java's ``readUTF`` accepts it; the Rust client requires it). Supplementary
    characters are written as 4-byte UTF-8, which the Rust client reads and Java's ``readUTF`` rejects;
    Pravega names never contain them. Raises :class:`ProtocolError` if the text holds a lone surrogate
    or encodes to more than 65535 bytes (Java throws ``UTFDataFormatException`` there too).
    """
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ProtocolError(f"string is not encodable as UTF-8: {exc.reason}") from None
    if len(raw) > MAX_UTF_BYTES:
        raise ProtocolError(f"string encodes to {len(raw)} bytes; writeUTF allows at most {MAX_UTF_BYTES}")
    return _U16.pack(len(raw)) + raw


def decode_utf(raw: Buffer) -> str:
    """Decode the text bytes of a ``writeUTF`` string (without its length prefix).

    Accepts standard UTF-8 (Rust peers, raw NUL, 4-byte sequences) and Java's modified UTF-8 (NUL as
    ``C0 80``, supplementary characters as CESU-8 surrogate pairs, which are joined into one code point).
    Raises :class:`ProtocolError` for anything else: other overlong forms, lone surrogates, truncated
    sequences (Java would accept the first two; no Java writer produces them).
    """
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError:
        pass
    try:
        data = bytes(raw).replace(b"\xc0\x80", b"\x00")
        with_surrogates = data.decode("utf-8", "surrogatepass")
        return with_surrogates.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeError:
        raise ProtocolError("string is neither UTF-8 nor Java modified UTF-8") from None


# --------------------------------------------------------------------------------------------------
# Field kinds


class Kind:
    """One field's wire encoding. ``fmt`` is set for fixed-size kinds, which :class:`Plan` merges."""

    __slots__ = ("label", "min_size")
    fmt: str | None = None

    def __init__(self, label: str, min_size: int) -> None:
        self.label = label
        self.min_size = min_size

    def read(self, body: memoryview, pos: int) -> tuple[Any, int]:
        """Decode one value at ``pos``; return it and the position after it. Raises ProtocolError."""
        raise NotImplementedError

    def write(self, value: Any, out: list[Buffer]) -> None:
        """Append the encoding of ``value`` to ``out``. Raises ProtocolError or struct.error."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.label


class Fixed(Kind):
    """A fixed-size field packed with struct format ``fmt`` and optional value converters."""

    __slots__ = ("decode", "encode", "fmt", "size", "struct")

    def __init__(
        self,
        label: str,
        fmt: str,
        decode: Callable[[Any], Any] | None = None,
        encode: Callable[[Any], Any] | None = None,
    ) -> None:
        self.fmt = fmt
        self.struct = struct.Struct(">" + fmt)
        self.size = self.struct.size
        super().__init__(label, self.size)
        self.decode = decode
        self.encode = encode

    def read(self, body: memoryview, pos: int) -> tuple[Any, int]:
        end = pos + self.size
        if end > len(body):
            raise short_read(self.size, pos, len(body))
        value = self.struct.unpack_from(body, pos)[0]
        return (value if self.decode is None else self.decode(value)), end

    def write(self, value: Any, out: list[Buffer]) -> None:
        out.append(self.struct.pack(value if self.encode is None else self.encode(value)))


_UUID_CACHE: dict[bytes, uuid.UUID] = {}
_UUID_CACHE_LIMIT = 4096


def _uuid_from_bytes(raw: bytes) -> uuid.UUID:
    # Writer and attribute ids repeat on every frame of a connection; building a UUID costs ~1 us.
    value = _UUID_CACHE.get(raw)
    if value is None:
        if len(_UUID_CACHE) >= _UUID_CACHE_LIMIT:
            _UUID_CACHE.clear()
        value = _UUID_CACHE[raw] = uuid.UUID(bytes=raw)
    return value


def _uuid_to_bytes(value: uuid.UUID) -> bytes:
    return value.bytes


E = TypeVar("E", bound=IntEnum)


def int_enum(enum_cls: type[E], unknown: E) -> Fixed:
    """An int32 field exposed as ``enum_cls``; codes Java does not know decode as ``unknown``."""
    members = {int(m): m for m in enum_cls}
    return Fixed(enum_cls.__name__, "i", lambda v: members.get(v, unknown), int)


I8 = Fixed("int8", "b")
BOOL = Fixed("bool", "?")
I32 = Fixed("int32", "i")
I64 = Fixed("int64", "q")
UUID = Fixed("uuid", "16s", _uuid_from_bytes, _uuid_to_bytes)


class _Utf(Kind):
    __slots__ = ()

    def read(self, body: memoryview, pos: int) -> tuple[str, int]:
        start = pos + 2
        if start > len(body):
            raise short_read(2, pos, len(body))
        end = start + ((body[pos] << 8) | body[pos + 1])
        if end > len(body):
            raise short_read(end - start, start, len(body))
        return decode_utf(body[start:end]), end

    def write(self, value: str, out: list[Buffer]) -> None:
        out.append(encode_utf(value))


class _Blob(Kind):
    __slots__ = ()

    def read(self, body: memoryview, pos: int) -> tuple[bytes, int]:
        start = pos + 4
        if start > len(body):
            raise short_read(4, pos, len(body))
        length = _I32.unpack_from(body, pos)[0]
        if length < 0:
            raise ProtocolError(f"negative byte-buffer length {length} at offset {pos}")
        end = start + length
        if end > len(body):
            raise short_read(length, start, len(body))
        return bytes(body[start:end]), end

    def write(self, value: Buffer, out: list[Buffer]) -> None:
        out.append(_I32.pack(len(value)))
        out.append(value)


class _Rest(Kind):
    __slots__ = ()

    def read(self, body: memoryview, pos: int) -> tuple[bytes, int]:
        return bytes(body[pos:]), len(body)

    def write(self, value: Buffer, out: list[Buffer]) -> None:
        out.append(value)


UTF: Kind = _Utf("utf", 2)
BLOB: Kind = _Blob("bytes", 4)
REST: Kind = _Rest("rest", 0)


class Opt(Kind):
    """A trailing field that older peers omit: read if ``min_remaining`` bytes are left, else default.

    Always written. ``min_remaining`` mirrors the Java reader's check (``available() > 0`` is 1,
    ``available() >= Long.BYTES`` is 8).
    """

    __slots__ = ("default", "inner", "min_remaining")

    def __init__(self, inner: Kind, default: Any, min_remaining: int) -> None:
        super().__init__(f"opt[{inner.label}]", 0)
        self.inner = inner
        self.default = default
        self.min_remaining = min_remaining

    def read(self, body: memoryview, pos: int) -> tuple[Any, int]:
        if len(body) - pos >= self.min_remaining:
            return self.inner.read(body, pos)
        return self.default, pos

    def write(self, value: Any, out: list[Buffer]) -> None:
        self.inner.write(value, out)


class ListOf(Kind):
    """int32 element count followed by the elements; decoded as a tuple."""

    __slots__ = ("element",)

    def __init__(self, element: Kind) -> None:
        super().__init__(f"list[{element.label}]", 4)
        self.element = element

    def read(self, body: memoryview, pos: int) -> tuple[tuple[Any, ...], int]:
        if pos + 4 > len(body):
            raise short_read(4, pos, len(body))
        count = _I32.unpack_from(body, pos)[0]
        pos += 4
        if count < 0:
            raise ProtocolError(f"negative list length {count}")
        if count * max(self.element.min_size, 1) > len(body) - pos:
            raise ProtocolError(f"list of {count} elements cannot fit in {len(body) - pos} bytes")
        read = self.element.read
        items = []
        for _ in range(count):
            item, pos = read(body, pos)
            items.append(item)
        return tuple(items), pos

    def write(self, value: Sequence[Any], out: list[Buffer]) -> None:
        out.append(_I32.pack(len(value)))
        write = self.element.write
        for item in value:
            write(item, out)
