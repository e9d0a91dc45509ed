"""Chunk metadata of one container: every Tier-2 segment as an ordered list of chunks, and its changes.

:class:`ChunkMetadata` is the in-memory state the system journal makes durable; a change
(:data:`Change`) is what one journal record holds, and :meth:`ChunkMetadata.apply` is the only
way the state moves, both when a record becomes durable and when boot replays it. ``apply``
checks every change against the state and raises :class:`ChunkMetadataError` when it does not
fit (a corrupt journal or a bug), so replay never builds a state that breaks
:meth:`ChunkMetadata.check`.

Chunk offsets are segment offsets; a chunk's own bytes are ``[0, length)``, so concat moves a
chunk entry to another segment by shifting its ``start_offset`` only.

Time bounds: a chunk entry may carry the least and greatest ``ingest_time_ms`` of its rows
(``min_ms``/``max_ms``, both or neither), recorded when the chunk is added, replaced (compaction) or
rewritten for a merge; metadata written before they existed has none (readers then open the chunk).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeAlias

from segment_store.storage.segment_storage import Framing
from segstore_shared.errors import SegstoreError

FRAMINGS: frozenset[str] = frozenset({"events", "raw"})


class ChunkMetadataError(SegstoreError):
    """A change does not fit the chunk metadata, or the metadata breaks an invariant."""


@dataclass(frozen=True, slots=True)
class ChunkEntry:
    """Chunk ``name`` holds segment bytes ``[start_offset, start_offset + length)``; its rows were ingested
    within ``[min_ms, max_ms]`` (None: not recorded)."""

    name: str
    start_offset: int
    length: int
    min_ms: int | None = None
    max_ms: int | None = None

    @property
    def timed(self) -> bool:
        """Whether the chunk's time bounds are known."""
        return self.min_ms is not None and self.max_ms is not None

    @property
    def end_offset(self) -> int:
        return self.start_offset + self.length


@dataclass(eq=False, slots=True)
class SegmentLayout:
    """One segment in Tier-2: bounds, seal flag, framing and its chunks in offset order.

    ``chunks`` tile ``[chunks[0].start_offset, length)``; the first chunk may start below
    ``start_offset`` (truncation keeps a chunk that still holds live bytes).
    """

    name: str
    framing: Framing
    sealed: bool = False
    start_offset: int = 0
    length: int = 0
    chunks: list[ChunkEntry] = field(default_factory=list)
    _starts: list[int] = field(default_factory=list, repr=False)

    def overlapping(self, offset: int, end: int) -> list[ChunkEntry]:
        """The chunks holding any byte of ``[offset, end)``, in order."""
        if offset >= end or not self.chunks:
            return []
        first = max(bisect.bisect_right(self._starts, offset) - 1, 0)
        last = bisect.bisect_left(self._starts, end)
        return self.chunks[first:last]

    def append(self, entry: ChunkEntry) -> None:
        self.chunks.append(entry)
        self._starts.append(entry.start_offset)
        self.length = entry.end_offset

    def replace(self, offset: int, names: tuple[str, ...], entry: ChunkEntry) -> list[ChunkEntry] | None:
        """Put ``entry`` in place of the consecutive chunks ``names`` starting at ``offset``; return them.

        ``None`` (and nothing changed) unless those chunks are there and hold exactly ``entry``'s bytes.
        """
        first = bisect.bisect_left(self._starts, offset)
        old = self.chunks[first : first + len(names)]
        if not names or tuple(c.name for c in old) != names or old[0].start_offset != offset:
            return None
        if old[-1].end_offset - offset != entry.length or entry.start_offset != offset:
            return None
        self.chunks[first : first + len(names)] = [entry]
        self._starts[first : first + len(names)] = [offset]
        return old

    def drop_below(self, offset: int) -> list[ChunkEntry]:
        """Remove and return the chunks wholly below ``offset``."""
        count = 0
        while count < len(self.chunks) and self.chunks[count].end_offset <= offset:
            count += 1
        dropped = self.chunks[:count]
        del self.chunks[:count]
        del self._starts[:count]
        return dropped

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "framing": self.framing,
            "sealed": self.sealed,
            "start_offset": self.start_offset,
            "length": self.length,
            "chunks": [_chunk_json(c) for c in self.chunks],
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> SegmentLayout:
        """Raises ChunkMetadataError on a malformed entry."""
        try:
            framing = value["framing"]
            if framing not in FRAMINGS:
                raise ChunkMetadataError(f"segment {value.get('name')!r}: bad framing {framing!r}")
            layout = cls(
                name=_str(value["name"]),
                framing=framing,
                sealed=_bool(value["sealed"]),
                start_offset=_int(value["start_offset"]),
            )
            for item in value["chunks"]:
                name, start, length, *bounds = item
                if len(bounds) not in (0, 2):
                    raise ValueError(f"chunk entry {item!r}: want [name, start, length(, min_ms, max_ms)]")
                times = (_int(bounds[0]), _int(bounds[1])) if bounds else (None, None)
                layout.append(ChunkEntry(_str(name), _int(start), _int(length), *times))
            layout.length = _int(value["length"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ChunkMetadataError(f"malformed segment entry: {exc!r}") from exc
        return layout


# -- changes --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateSegment:
    OP: ClassVar[str] = "create"
    segment: str
    framing: Framing


@dataclass(frozen=True, slots=True)
class AddChunk:
    """Chunk ``chunk`` (``length`` > 0 bytes) appended at ``offset`` == the segment's length; its rows' time
    bounds (None in records written before they existed)."""

    OP: ClassVar[str] = "add"
    segment: str
    chunk: str
    offset: int
    length: int
    min_ms: int | None = None
    max_ms: int | None = None


@dataclass(frozen=True, slots=True)
class SealSegment:
    OP: ClassVar[str] = "seal"
    segment: str


@dataclass(frozen=True, slots=True)
class ConcatSegments:
    """Sealed, untruncated ``source``'s chunks move to ``target`` at ``offset`` (== target length)."""

    OP: ClassVar[str] = "concat"
    target: str
    source: str
    offset: int


@dataclass(frozen=True, slots=True)
class TruncateSegment:
    OP: ClassVar[str] = "truncate"
    segment: str
    start_offset: int


@dataclass(frozen=True, slots=True)
class DeleteSegment:
    OP: ClassVar[str] = "delete"
    segment: str


@dataclass(frozen=True, slots=True)
class ReplaceChunks:
    """Compaction: chunk ``chunk`` takes the place of the consecutive chunks ``replaced``.

    ``replaced`` start at ``offset`` and hold ``length`` bytes together; ``chunk`` holds the same
    bytes (with the same ingestion times, or, for a merge, every row at the merge time), ingested within
    ``[min_ms, max_ms]`` (None: not recorded). The replaced chunks are released (deleted later by the chunk
    garbage collector).
    """

    OP: ClassVar[str] = "replace"
    segment: str
    chunk: str
    offset: int
    length: int
    replaced: tuple[str, ...]
    min_ms: int | None = None
    max_ms: int | None = None


Change: TypeAlias = (
    CreateSegment | AddChunk | SealSegment | ConcatSegments | TruncateSegment | DeleteSegment | ReplaceChunks
)
_CHANGE_TYPES: dict[str, type[Change]] = {
    t.OP: t
    for t in (CreateSegment, AddChunk, SealSegment, ConcatSegments, TruncateSegment, DeleteSegment, ReplaceChunks)
}
_INT_FIELDS = frozenset({"offset", "length", "start_offset"})
_NAMES_FIELDS = frozenset({"replaced"})
_OPTIONAL_INT_FIELDS = frozenset({"min_ms", "max_ms"})  # absent from records written before them


def change_to_json(change: Change) -> dict[str, Any]:
    out: dict[str, Any] = {"op": change.OP}
    for f in fields(change):
        value = getattr(change, f.name)
        if value is None and f.name in _OPTIONAL_INT_FIELDS:
            continue
        out[f.name] = list(value) if f.name in _NAMES_FIELDS else value
    return out


def _chunk_json(chunk: ChunkEntry) -> list[Any]:
    base: list[Any] = [chunk.name, chunk.start_offset, chunk.length]
    return [*base, chunk.min_ms, chunk.max_ms] if chunk.timed else base


def _field(name: str, value: Any) -> Any:
    if name in _OPTIONAL_INT_FIELDS:
        return None if value is None else _int(value)
    if name in _INT_FIELDS:
        return _int(value)
    if name in _NAMES_FIELDS:
        if not isinstance(value, list):
            raise TypeError(f"expected a list of names, got {value!r}")
        return tuple(_str(v) for v in value)
    return _str(value)


def change_from_json(value: Mapping[str, Any]) -> Change:
    """Raises ChunkMetadataError on an unknown op or malformed fields."""
    try:
        kind = _CHANGE_TYPES[value["op"]]
        kwargs = {
            f.name: _field(f.name, value[f.name] if f.name not in _OPTIONAL_INT_FIELDS else value.get(f.name))
            for f in fields(kind)
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise ChunkMetadataError(f"malformed change {value!r}: {exc!r}") from exc
    if kind is CreateSegment and kwargs["framing"] not in FRAMINGS:
        raise ChunkMetadataError(f"malformed change {value!r}: bad framing")
    return kind(**kwargs)


# -- the state ------------------------------------------------------------------------------------


class ChunkMetadata:
    """All segments of one container in Tier-2. Not thread-safe: used on the container's loop."""

    def __init__(self, segments: Mapping[str, SegmentLayout] | None = None) -> None:
        self._segments: dict[str, SegmentLayout] = dict(segments or {})

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[SegmentLayout]:
        return iter(self._segments.values())

    def get(self, name: str) -> SegmentLayout | None:
        return self._segments.get(name)

    def referenced_chunks(self) -> set[str]:
        return {c.name for s in self._segments.values() for c in s.chunks}

    def apply(self, change: Change) -> list[ChunkEntry]:
        """Apply ``change``; return the chunk entries it releases (truncated or deleted).

        Raises:
            ChunkMetadataError: the change does not fit the current state; nothing changed.
        """
        if isinstance(change, CreateSegment):
            if change.segment in self._segments:
                raise ChunkMetadataError(f"create: segment {change.segment!r} exists")
            if change.framing not in FRAMINGS:
                raise ChunkMetadataError(f"create: bad framing {change.framing!r}")
            self._segments[change.segment] = SegmentLayout(change.segment, change.framing)
            return []
        if isinstance(change, AddChunk):
            seg = self._require(change.segment, "add")
            if seg.sealed or change.offset != seg.length or change.length <= 0:
                raise ChunkMetadataError(
                    f"add: chunk {change.chunk!r} at {change.offset}+{change.length} does not fit segment "
                    f"{seg.name!r} (length {seg.length}, sealed {seg.sealed})"
                )
            seg.append(ChunkEntry(change.chunk, change.offset, change.length, change.min_ms, change.max_ms))
            return []
        if isinstance(change, SealSegment):
            self._require(change.segment, "seal").sealed = True
            return []
        if isinstance(change, ConcatSegments):
            return self._concat(change)
        if isinstance(change, ReplaceChunks):
            return self._replace(change)
        if isinstance(change, TruncateSegment):
            seg = self._require(change.segment, "truncate")
            if change.start_offset > seg.length:
                raise ChunkMetadataError(f"truncate: {change.start_offset} beyond length {seg.length} of {seg.name!r}")
            if change.start_offset <= seg.start_offset:
                return []
            seg.start_offset = change.start_offset
            return seg.drop_below(change.start_offset)
        seg = self._require(change.segment, "delete")
        del self._segments[seg.name]
        return list(seg.chunks)

    def _concat(self, change: ConcatSegments) -> list[ChunkEntry]:
        target = self._require(change.target, "concat")
        source = self._require(change.source, "concat")
        if target is source or target.sealed or not source.sealed or source.start_offset != 0:
            raise ChunkMetadataError(f"concat: {source.name!r} cannot be appended to {target.name!r}")
        if change.offset != target.length:
            raise ChunkMetadataError(f"concat: offset {change.offset} != length {target.length} of {target.name!r}")
        shift = target.length
        for chunk in source.chunks:
            target.append(ChunkEntry(chunk.name, chunk.start_offset + shift, chunk.length, chunk.min_ms, chunk.max_ms))
        target.length = shift + source.length
        del self._segments[source.name]
        return []

    def _replace(self, change: ReplaceChunks) -> list[ChunkEntry]:
        seg = self._require(change.segment, "replace")
        if change.chunk in change.replaced or len(set(change.replaced)) != len(change.replaced):
            raise ChunkMetadataError(f"replace: chunk {change.chunk!r} is among or repeats the replaced chunks")
        entry = ChunkEntry(change.chunk, change.offset, change.length, change.min_ms, change.max_ms)
        released = seg.replace(change.offset, change.replaced, entry)
        if released is None:
            raise ChunkMetadataError(
                f"replace: {list(change.replaced)} at {change.offset}+{change.length} are not chunks of {seg.name!r}"
            )
        return released

    def _require(self, name: str, what: str) -> SegmentLayout:
        seg = self._segments.get(name)
        if seg is None:
            raise ChunkMetadataError(f"{what}: no segment {name!r}")
        return seg

    def check(self) -> None:
        """Check every invariant (seed 004 boot step 5).

        Raises:
            ChunkMetadataError: naming the first segment that breaks one.
        """
        seen: set[str] = set()
        for seg in self._segments.values():
            if not 0 <= seg.start_offset <= seg.length:
                raise ChunkMetadataError(f"{seg.name!r}: start {seg.start_offset} outside [0, {seg.length}]")
            if not seg.chunks:
                if seg.start_offset != seg.length:
                    raise ChunkMetadataError(f"{seg.name!r}: no chunks for [{seg.start_offset}, {seg.length})")
                continue
            first = seg.chunks[0]
            if not first.start_offset <= seg.start_offset < first.end_offset:
                raise ChunkMetadataError(f"{seg.name!r}: first chunk {first} does not hold start {seg.start_offset}")
            position = first.start_offset
            for chunk in seg.chunks:
                if chunk.start_offset != position or chunk.length <= 0:
                    raise ChunkMetadataError(f"{seg.name!r}: chunk {chunk} leaves a gap or overlap at {position}")
                if chunk.name in seen:
                    raise ChunkMetadataError(f"{seg.name!r}: chunk {chunk.name!r} is referenced twice")
                seen.add(chunk.name)
                position = chunk.end_offset
            if position != seg.length:
                raise ChunkMetadataError(f"{seg.name!r}: chunks end at {position}, length is {seg.length}")

    def to_json(self) -> list[dict[str, Any]]:
        return [seg.to_json() for seg in self._segments.values()]

    @classmethod
    def from_json(cls, value: Any) -> ChunkMetadata:
        """Raises ChunkMetadataError on a malformed value or a duplicate segment."""
        if not isinstance(value, list):
            raise ChunkMetadataError("snapshot segments must be a list")
        segments: dict[str, SegmentLayout] = {}
        for item in value:
            if not isinstance(item, Mapping):
                raise ChunkMetadataError("snapshot segment entry must be an object")
            layout = SegmentLayout.from_json(item)
            if layout.name in segments:
                raise ChunkMetadataError(f"segment {layout.name!r} appears twice")
            segments[layout.name] = layout
        return cls(segments)


def _int(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected a boolean, got {value!r}")
    return value
