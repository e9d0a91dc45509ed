"""segstore's wire extension for chunk pins (type codes -26 to -31; see :mod:`.extensions` for the conventions).

A reader given Tier-2 chunk files (``ListStorageChunkLocations``) pins them so that garbage collection and
compaction leave them in place until it is done (``segment_store.storage.chunk_pins``):

* ``PinChunks`` -> ``ChunksPinned`` (-26/-27): hold the named chunks of ``segment`` for ``ttl_ms`` from now under
  ``(pin_id, segment)``; sent again, it renews the pin (and replaces its chunks). Needs ``READ`` on the segment.
  A chunk that is neither in the segment now nor held by a live pin (deleted, or released and about to be: an
  expired pin renewed too late) is refused with ``ErrorMessage`` (``PinError``): the reader must list again.
  ``expires_at_ms`` in the reply is the epoch ms at which the pin ends unless renewed.
* ``UnpinChunks`` -> ``ChunksUnpinned`` (-28/-29): end the pin now (``held`` False if there was none).
* ``ListChunkPins`` -> ``ChunkPinsListed`` (-30/-31): the live pins of a container (``segstore admin pins``).
"""

from __future__ import annotations

from dataclasses import dataclass

from segment_store.protocol.layout import Record, WireRecord, compile_layout
from segment_store.protocol.registry import WireCommand, register
from segment_store.protocol.types import BOOL, I32, I64, UTF, ListOf


@register
@dataclass(frozen=True, slots=True)
class PinChunks(WireCommand):
    """segstore extension: pin ``chunks`` (chunk names) of ``segment`` for ``ttl_ms`` (``ChunksPinned``)."""

    TYPE_CODE = -26
    LAYOUT = (I64, UTF, UTF, I64, ListOf(UTF), UTF)
    request_id: int
    segment: str
    pin_id: str
    ttl_ms: int
    chunks: tuple[str, ...]
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class ChunksPinned(WireCommand):
    """Reply to ``PinChunks``: the pin holds its chunks until ``expires_at_ms`` (epoch ms)."""

    TYPE_CODE = -27
    LAYOUT = (I64, UTF, I64)
    request_id: int
    pin_id: str
    expires_at_ms: int


@register
@dataclass(frozen=True, slots=True)
class UnpinChunks(WireCommand):
    """segstore extension: end pin ``(pin_id, segment)`` now (``ChunksUnpinned``)."""

    TYPE_CODE = -28
    LAYOUT = (I64, UTF, UTF, UTF)
    request_id: int
    segment: str
    pin_id: str
    delegation_token: str


@register
@dataclass(frozen=True, slots=True)
class ChunksUnpinned(WireCommand):
    """Reply to ``UnpinChunks``: ``held`` whether the pin was there."""

    TYPE_CODE = -29
    LAYOUT = (I64, UTF, BOOL)
    request_id: int
    pin_id: str
    held: bool


@register
@dataclass(frozen=True, slots=True)
class ListChunkPins(WireCommand):
    """segstore extension: the live pins of container ``container_id`` (``ChunkPinsListed``)."""

    TYPE_CODE = -30
    LAYOUT = (I64, I32, UTF)
    request_id: int
    container_id: int
    delegation_token: str


@compile_layout
@dataclass(frozen=True, slots=True)
class PinInfo(WireRecord):
    """One live pin: ``chunk_count`` chunks of ``segment`` held under ``pin_id`` until ``expires_at_ms``."""

    LAYOUT = (UTF, UTF, I64, I64)
    pin_id: str
    segment: str
    expires_at_ms: int
    chunk_count: int


@register
@dataclass(frozen=True, slots=True)
class ChunkPinsListed(WireCommand):
    """Reply to ``ListChunkPins``: the container's live pins, soonest expiry first."""

    TYPE_CODE = -31
    LAYOUT = (I64, ListOf(Record(PinInfo, 20)))
    request_id: int
    pins: tuple[PinInfo, ...]
