"""System journal objects of one container: names and the byte format of records and snapshots.

Every object is written once under a unique, predictable name (seed 004):

    system/c{container}/journal/e{epoch:012}-{seq:012}     one journal record (a batch of changes)
    system/c{container}/snapshot/e{epoch:012}-{seq:012}    one snapshot of the whole chunk metadata

``epoch`` is the writing instance's epoch, ``seq`` a counter of that instance shared by journal
records, snapshots and data chunks, so no two objects ever share a name and a retry gets a new
one. Zero padding makes name order equal (epoch, seq) order, but nothing relies on it: boot
parses the names.

Byte format of both kinds (:data:`HEADER`, big-endian):

=========  =======  ==============================================================
bytes      field    meaning
=========  =======  ==============================================================
0..4       magic    ``SLTJ`` (journal record) or ``SLTS`` (snapshot)
4          version  :data:`FORMAT_VERSION`
5..8       -        zero
8..12      length   bytes of the body
12..16     crc32    zlib CRC-32 of the body
16..       body     UTF-8 JSON object
=========  =======  ==============================================================

Body of a journal record: ``{"container", "epoch", "seq", "prev", "changes": [...]}``;
of a snapshot: ``{"container", "epoch", "seq", "prev", "segments": [...]}``. ``prev`` is the
name of the object this one follows in the chain (a journal record or a snapshot; ``None``
for the first snapshot of an empty container). Container, epoch and seq must match the
object's name, so a copy of a record under another name is not a record.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from segment_store.storage.journal.chunk_metadata import (
    Change,
    ChunkMetadata,
    ChunkMetadataError,
    change_from_json,
    change_to_json,
)
from segstore_shared.errors import SegstoreError

FORMAT_VERSION = 1
HEADER = struct.Struct(">4sBxxxII")
JOURNAL_MAGIC = b"SLTJ"
SNAPSHOT_MAGIC = b"SLTS"
INT64_MAX = (1 << 63) - 1

Kind: TypeAlias = Literal["journal", "snapshot"]
_NAME = re.compile(r"system/c(\d+)/(journal|snapshot)/e(\d+)-(\d+)")


class RecordFormatError(SegstoreError):
    """The bytes are not a whole, valid journal object of this name (partial, corrupt or foreign)."""


def system_prefix(container_id: int, kind: Kind) -> str:
    """``system/c{container}/{kind}/``: the listing prefix of one kind of object."""
    return f"system/c{container_id}/{kind}/"


def system_name(container_id: int, kind: Kind, epoch: int, seq: int) -> str:
    return f"{system_prefix(container_id, kind)}e{epoch:012}-{seq:012}"


@dataclass(frozen=True, slots=True)
class SystemName:
    """A parsed system object name."""

    name: str
    container_id: int
    kind: Kind
    epoch: int
    seq: int

    @property
    def key(self) -> tuple[int, int]:
        """Chain order: an object follows only objects with a smaller key."""
        return (self.epoch, self.seq)


def parse_system_name(name: str) -> SystemName | None:
    """Parse a journal or snapshot name; ``None`` if it is not one."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    cid, kind, epoch, seq = match.groups()
    return SystemName(name, int(cid), kind, int(epoch), int(seq))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """One journal object: ``changes`` applied in order, after ``prev``."""

    container_id: int
    epoch: int
    seq: int
    prev: str | None
    changes: tuple[Change, ...]

    @property
    def name(self) -> str:
        return system_name(self.container_id, "journal", self.epoch, self.seq)

    @property
    def key(self) -> tuple[int, int]:
        return (self.epoch, self.seq)


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    """One snapshot object: the whole chunk metadata after ``prev`` (``segments`` as JSON values)."""

    container_id: int
    epoch: int
    seq: int
    prev: str | None
    segments: Sequence[Any]

    @property
    def name(self) -> str:
        return system_name(self.container_id, "snapshot", self.epoch, self.seq)

    @property
    def key(self) -> tuple[int, int]:
        return (self.epoch, self.seq)

    def metadata(self) -> ChunkMetadata:
        """The snapshot as state. Raises ChunkMetadataError if malformed or inconsistent."""
        metadata = ChunkMetadata.from_json(list(self.segments))
        metadata.check()
        return metadata


Record: TypeAlias = JournalRecord | SnapshotRecord


def encode_record(record: Record) -> bytes:
    """The object bytes of ``record`` (header + JSON body)."""
    body: dict[str, Any] = {
        "container": record.container_id,
        "epoch": record.epoch,
        "seq": record.seq,
        "prev": record.prev,
    }
    if isinstance(record, JournalRecord):
        magic = JOURNAL_MAGIC
        body["changes"] = [change_to_json(c) for c in record.changes]
    else:
        magic = SNAPSHOT_MAGIC
        body["segments"] = list(record.segments)
    payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
    return HEADER.pack(magic, FORMAT_VERSION, len(payload), zlib.crc32(payload)) + payload


def decode_record(name: str, data: bytes, container_id: int) -> Record:
    """Decode the object ``name`` of container ``container_id``.

    Raises:
        RecordFormatError: not a system object name of this container, a short or long
            object, a bad magic/version/CRC, malformed JSON, or an identity that does not
            match the name.
    """
    parsed = parse_system_name(name)
    if parsed is None or parsed.container_id != container_id:
        raise RecordFormatError(f"{name!r} is not a system journal object of container {container_id}")
    if len(data) < HEADER.size:
        raise RecordFormatError(f"{name!r}: {len(data)} bytes is shorter than the header")
    magic, version, length, crc = HEADER.unpack_from(data)
    expected_magic = JOURNAL_MAGIC if parsed.kind == "journal" else SNAPSHOT_MAGIC
    if magic != expected_magic or version != FORMAT_VERSION:
        raise RecordFormatError(f"{name!r}: magic {magic!r} version {version} is not {expected_magic!r} v1")
    if len(data) != HEADER.size + length:
        raise RecordFormatError(f"{name!r}: body is {len(data) - HEADER.size} bytes, header says {length}")
    payload = memoryview(data)[HEADER.size :]
    if zlib.crc32(payload) != crc:
        raise RecordFormatError(f"{name!r}: CRC mismatch")
    try:
        body = json.loads(bytes(payload).decode("utf-8", "surrogatepass"))
        ident = (body["container"], body["epoch"], body["seq"])
        prev = body["prev"]
    except (ValueError, KeyError, TypeError) as exc:
        raise RecordFormatError(f"{name!r}: malformed body: {exc!r}") from exc
    if ident != (parsed.container_id, parsed.epoch, parsed.seq):
        raise RecordFormatError(f"{name!r}: body identifies as {ident}")
    if prev is not None and not isinstance(prev, str):
        raise RecordFormatError(f"{name!r}: bad prev {prev!r}")
    if parsed.kind == "snapshot":
        segments = body.get("segments")
        if not isinstance(segments, list):
            raise RecordFormatError(f"{name!r}: snapshot without a segment list")
        return SnapshotRecord(parsed.container_id, parsed.epoch, parsed.seq, prev, segments)
    raw_changes = body.get("changes")
    if not isinstance(raw_changes, list) or not raw_changes:
        raise RecordFormatError(f"{name!r}: journal record without changes")
    try:
        changes = tuple(change_from_json(c) for c in raw_changes)
    except ChunkMetadataError as exc:
        raise RecordFormatError(f"{name!r}: {exc}") from exc
    return JournalRecord(parsed.container_id, parsed.epoch, parsed.seq, prev, changes)
