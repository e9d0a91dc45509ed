"""Connection-level commands: version handshake and keep-alive (both directions)."""

from __future__ import annotations

from dataclasses import dataclass

from segment_store.protocol.registry import WireCommand, register
from segment_store.protocol.types import I32


@register
@dataclass(frozen=True, slots=True)
class Hello(WireCommand):
    """First frame each side sends: the range of wire versions it speaks (see ``handshake``)."""

    TYPE_CODE = -127
    LAYOUT = (I32, I32)
    high_version: int
    low_version: int


@register
@dataclass(frozen=True, slots=True)
class KeepAlive(WireCommand):
    """Empty frame a client sends periodically; the server echoes it."""

    TYPE_CODE = 100
    LAYOUT = ()
