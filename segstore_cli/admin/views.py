"""What each admin command found: plain frozen dataclasses, rendered as tables or JSON by :mod:`.render`.

Offsets and lengths are bytes; times are milliseconds since the Unix epoch; segments are 64-bit ids
(``creation_epoch << 32 | number``), shown by :func:`segstore_cli.admin.parsing.segment_label`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controller_client.model import StreamConfiguration

Cut = Mapping[int, int]
"""A stream cut's positions: segment id -> offset (-1: the segment's end)."""

ACTIVE, SEALED = "active", "sealed"
"""The states of a segment, in Pravega's words (its controller's "active segments"; a sealed segment takes no more
writes), shown by ``segment info``, ``stream describe`` and their JSON alike; a stream is ``active`` or ``sealed``
too."""


def segment_state(active: bool, sealed: bool) -> str:
    """:data:`ACTIVE` for a segment of the stream's current epoch that is not sealed, else :data:`SEALED` (replaced
    by a scale, or its stream sealed)."""
    return ACTIVE if active and not sealed else SEALED


@dataclass(frozen=True, slots=True)
class Names:
    """A listing: the scopes, or the streams of ``scope``."""

    kind: str  # "scopes" or "streams"
    names: tuple[str, ...]
    scope: str | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a change did: ``action`` (a fixed word: ``created``, ``exists``, ``deleted``, ``sealed``,
    ``already-sealed``, ``truncated``, ``scaled``, ``scale-started``) on ``target`` (``stream shop/orders``,
    ``reader group shop/billing``);
    ``changed`` False when there was nothing to do; ``details`` (segments, cut, epoch, sealed, created, done)
    and a ``note`` for people."""

    action: str
    target: str
    changed: bool = True
    details: Mapping[str, object] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True, slots=True)
class SegmentView:
    """One segment of a stream: its key range (None when the controller did not say, e.g. for a segment only
    found between two cuts), what the segment store holds, and which segment store serves it."""

    segment_id: int
    key_range: tuple[float, float] | None
    start_offset: int
    length: int
    sealed: bool
    endpoint: str

    @property
    def retained_bytes(self) -> int:
        return self.length - self.start_offset


@dataclass(frozen=True, slots=True)
class EpochView:
    """One epoch of a stream's scale history: its segments (id -> key range), and what changed from the epoch
    before (the segments it sealed and created)."""

    epoch: int
    segments: Mapping[int, tuple[float, float]]
    sealed: tuple[int, ...]
    created: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StreamView:
    """``stream describe``: configuration, the active segments (for a sealed stream: those it was sealed with),
    every segment still holding data (between head and tail), the head and tail cuts, the bytes between them,
    the reader groups subscribed to it, and the scale history (``history_from``: the first epoch shown)."""

    scope: str
    stream: str
    sealed: bool
    config: StreamConfiguration
    active: tuple[SegmentView, ...]
    retained: tuple[SegmentView, ...]
    head: Cut
    tail: Cut
    subscribers: tuple[str, ...]
    current_epoch: int
    history: tuple[EpochView, ...]

    @property
    def retained_bytes(self) -> int:
        """Bytes between the head and the tail cut: what a reader from the head reads today."""
        starts = {s.segment_id: self.head.get(s.segment_id, s.start_offset) for s in self.retained}
        return sum(s.length - max(starts[s.segment_id], s.start_offset) for s in self.retained)


@dataclass(frozen=True, slots=True)
class ReaderGroupEntry:
    """A reader group of a scope: the streams it reads and its retention type (``NONE``: it subscribes to none;
    None when it was found through the streams it subscribes to, without its configuration)."""

    scope: str
    name: str
    streams: tuple[str, ...]
    retention: str | None = None


@dataclass(frozen=True, slots=True)
class ReaderGroupList:
    """``reader-group list``: every reader group registered with the controller in ``scope`` (``complete``,
    through segstore's admin extension; ``hidden`` more the caller may not see), or, from a controller without
    it, the groups it names as subscribers of the scope's streams."""

    scope: str
    groups: tuple[ReaderGroupEntry, ...]
    complete: bool = False
    hidden: int = 0


@dataclass(frozen=True, slots=True)
class GroupStream:
    """A stream a reader group reads: where it starts and, if bounded, ends (empty cut: head / tail)."""

    stream: str
    start: Cut
    end: Cut | None
    subscribed: bool


@dataclass(frozen=True, slots=True)
class ReaderPosition:
    """A segment of a reader group: who reads it, from where, and how many bytes behind its tail that is."""

    reader: str | None
    scope: str
    stream: str
    segment_id: int
    offset: int
    lag_bytes: int


@dataclass(frozen=True, slots=True)
class ReaderGroupView:
    """``reader-group describe``: the configuration the controller holds for a group."""

    scope: str
    name: str
    group_id: str
    generation: int
    retention: str
    refresh_ms: int
    checkpoint_interval_ms: int
    max_outstanding_checkpoints: int
    streams: tuple[GroupStream, ...]
    positions: tuple[ReaderPosition, ...] | None = None
    """From the group's state in the official client's format (None: no such state: no official-client reader
    ever joined); ``reader`` None for a segment no reader holds now."""


@dataclass(frozen=True, slots=True)
class SegmentInfoView:
    """``segment info``: a segment as its segment store holds it, and where that is."""

    name: str
    scope: str
    stream: str
    segment_id: int
    start_offset: int
    length: int
    sealed: bool
    last_modified_ms: int
    endpoint: str
    key_range: tuple[float, float] | None
    state: str = SEALED
    """:func:`segment_state`: ``active`` or ``sealed``, as ``stream describe`` shows it."""


@dataclass(frozen=True, slots=True)
class ControllersView:
    """``controllers``: the controllers of the cluster, as the controller lists them."""

    endpoints: tuple[str, ...]
