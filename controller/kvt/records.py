"""The key-value table records (the seed's "Key Value Table Metadata Store") and their serialization.

A table's metadata is one :class:`KvtRecord`: its id, state (``CREATING`` -> ``ACTIVE`` -> ``DELETING``, as
Pravega's ``KVTableState``), configuration, creation time and its one epoch, :class:`KvtEpochRecord` (Pravega's
``KVTEpochRecord``: epoch 0 and the table's segments, each a :class:`KvtSegmentRecord` with its key range, as
``KVTSegmentRecord``). Tables do not scale, so the schema has room for later epochs but there is only epoch 0.
:class:`DeletedKvtRecord` remembers the highest segment number a deleted table used, so a table created again
under the same name starts above it (Pravega's ``getSafeStartingSegmentNumberFor``).

Serialization: compact JSON objects with a format version ``"v"``; a newer version is refused with
:class:`~controller.metadata.codec.CodecError` (an older controller must not rewrite what it does not know).
Floats (key range bounds) round-trip exactly.
"""

from __future__ import annotations

import enum
import json
import uuid
from dataclasses import dataclass
from typing import Any

from controller.metadata.codec import CodecError
from controller_client.kvt.model import KeyValueTableConfiguration
from controller_client.model import SegmentRange, segment_id

FORMAT_VERSION = 1


class KvtState(enum.Enum):
    CREATING = "CREATING"
    ACTIVE = "ACTIVE"
    DELETING = "DELETING"


@dataclass(frozen=True, slots=True)
class KvtSegmentRecord:
    number: int
    creation_epoch: int
    creation_time_ms: int
    key_start: float
    key_end: float

    @property
    def segment_id(self) -> int:
        return segment_id(self.number, self.creation_epoch)

    @property
    def range(self) -> SegmentRange:
        return SegmentRange(self.segment_id, self.key_start, self.key_end)


@dataclass(frozen=True, slots=True)
class KvtEpochRecord:
    epoch: int
    reference_epoch: int
    segments: tuple[KvtSegmentRecord, ...]
    creation_time_ms: int


@dataclass(frozen=True, slots=True)
class KvtRecord:
    table_id: uuid.UUID
    state: KvtState
    config: KeyValueTableConfiguration
    creation_time_ms: int
    epoch: KvtEpochRecord

    @property
    def segment_ids(self) -> list[int]:
        return [s.segment_id for s in self.epoch.segments]

    @property
    def last_segment_number(self) -> int:
        return max(s.number for s in self.epoch.segments)


@dataclass(frozen=True, slots=True)
class DeletedKvtRecord:
    last_segment_number: int


def encode_kvt(record: KvtRecord) -> bytes:
    config = record.config
    return _dump(
        {
            "id": record.table_id.hex,
            "state": record.state.value,
            "created": record.creation_time_ms,
            "config": {
                "partitions": config.partition_count,
                "primaryKeyLength": config.primary_key_length,
                "secondaryKeyLength": config.secondary_key_length,
                "rolloverSizeBytes": config.rollover_size_bytes,
            },
            "epoch": {
                "epoch": record.epoch.epoch,
                "reference": record.epoch.reference_epoch,
                "created": record.epoch.creation_time_ms,
                "segments": [
                    [s.number, s.creation_epoch, s.creation_time_ms, s.key_start, s.key_end]
                    for s in record.epoch.segments
                ],
            },
        }
    )


def decode_kvt(data: bytes) -> KvtRecord:
    body = _load(data, "KvtRecord")
    try:
        config = body["config"]
        epoch = body["epoch"]
        return KvtRecord(
            table_id=uuid.UUID(hex=body["id"]),
            state=KvtState(body["state"]),
            config=KeyValueTableConfiguration(
                config["partitions"],
                config["primaryKeyLength"],
                config["secondaryKeyLength"],
                config["rolloverSizeBytes"],
            ),
            creation_time_ms=int(body["created"]),
            epoch=KvtEpochRecord(
                int(epoch["epoch"]),
                int(epoch["reference"]),
                tuple(
                    KvtSegmentRecord(int(n), int(e), int(t), float(lo), float(hi))
                    for n, e, t, lo, hi in epoch["segments"]
                ),
                int(epoch["created"]),
            ),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise CodecError(f"cannot decode KvtRecord: {e!r}") from e


def encode_deleted(record: DeletedKvtRecord) -> bytes:
    return _dump({"lastSegmentNumber": record.last_segment_number})


def decode_deleted(data: bytes) -> DeletedKvtRecord:
    body = _load(data, "DeletedKvtRecord")
    try:
        return DeletedKvtRecord(int(body["lastSegmentNumber"]))
    except (KeyError, TypeError, ValueError) as e:
        raise CodecError(f"cannot decode DeletedKvtRecord: {e!r}") from e


def _dump(body: dict[str, Any]) -> bytes:
    return json.dumps({"v": FORMAT_VERSION, **body}, separators=(",", ":")).encode()


def _load(data: bytes, what: str) -> dict[str, Any]:
    try:
        body = json.loads(data)
        version = body["v"]
    except (ValueError, KeyError, TypeError) as e:
        raise CodecError(f"cannot decode {what}: {e!r}") from e
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CodecError(f"cannot decode {what}: format version {version!r} is newer than {FORMAT_VERSION}")
    if not isinstance(body, dict):
        raise CodecError(f"cannot decode {what}: not a JSON object")
    return body
