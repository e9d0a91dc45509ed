"""The self-tester's events: every byte is a function of who wrote it, so a reader can check it alone.

A plain event is ``P|<writer>|<key>|<seq>|<body>`` and a transactional one ``T|<txn>|<key>|<seq>|<body>``:
``writer`` names one writer incarnation (a new one after a writer fails), ``txn`` one transaction (hex uuid),
``key`` the routing key, ``seq`` the event's number for that key in that writer or transaction (1, 2, ...).
The body's length (16 to 527 bytes) and bytes derive from the header, so a torn, shifted or mixed-up event
fails :func:`decode` with :class:`CorruptEvent` instead of passing for another.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


class CorruptEvent(ValueError):
    """Bytes that are not an event this module encoded."""


@dataclass(frozen=True, slots=True)
class EventId:
    """Who wrote an event: ``kind`` "P" (plain writer) or "T" (transaction), the writer or transaction, the key,
    the number for that key."""

    kind: str
    source: str
    key: str
    seq: int


def _body(header: bytes) -> bytes:
    digest = hashlib.blake2b(header, digest_size=32).digest()
    length = 16 + digest[0] * 2 + (digest[1] & 1)
    return (digest * (length // len(digest) + 1))[:length]


def encode(event: EventId) -> bytes:
    header = f"{event.kind}|{event.source}|{event.key}|{event.seq}|".encode()
    return header + _body(header)


def decode(data: bytes) -> EventId:
    """The event's id; raises CorruptEvent if the bytes are not exactly what :func:`encode` wrote for it."""
    parts = data.split(b"|", 4)
    if len(parts) != 5 or parts[0] not in (b"P", b"T"):
        raise CorruptEvent(f"not a self-test event: {data[:60]!r}")
    try:
        event = EventId(parts[0].decode(), parts[1].decode(), parts[2].decode(), int(parts[3]))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptEvent(f"bad header: {data[:60]!r}") from exc
    header = data[: len(data) - len(parts[4])]
    if parts[4] != _body(header):
        raise CorruptEvent(f"body does not match its header {header[:60]!r} ({len(parts[4])} bytes)")
    return event
