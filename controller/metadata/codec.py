"""Serialization of the metadata records: compact JSON objects carrying a format version ``"v"``.

``encode(record)`` -> bytes and ``decode(RecordType, bytes)`` -> record. Floats round-trip exactly
(JSON numbers written with ``repr``); integer-keyed maps are written as ``[[key, value], ...]``;
UUIDs as 32 hex digits. A node whose version field is newer than :data:`FORMAT_VERSION` is refused
with :class:`CodecError` (an older controller must not rewrite what it does not understand).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from controller.metadata.records import (
    ActiveTxnRecord,
    CommittingTxnsRecord,
    CompletedTxnRecord,
    ConfigurationRecord,
    EpochRecord,
    EpochTransitionRecord,
    HistoryChunk,
    HistoryEntry,
    ReaderGroupConfigRecord,
    ReaderGroupRetentionType,
    RetentionSet,
    SealedSizesShard,
    SegmentRecord,
    StreamCutRecord,
    StreamCutReference,
    StreamRecord,
    StreamState,
    SubscriberRecord,
    TruncationRecord,
    WriterMark,
)
from controller_client.model import (
    RetentionPolicy,
    RetentionType,
    ScaleType,
    ScalingPolicy,
    StreamConfiguration,
    StreamCut,
    TxnState,
)
from segstore_shared.errors import SegstoreError

FORMAT_VERSION = 1
T = TypeVar("T")
Json = dict[str, Any]


class CodecError(SegstoreError):
    """A stored node cannot be decoded (corrupt, or written by a newer format)."""


_ENCODERS: dict[type, Callable[[Any], Json]] = {}
_DECODERS: dict[type, Callable[[Json], Any]] = {}


def _register(cls: type[T], enc: Callable[[T], Json], dec: Callable[[Json], T]) -> None:
    _ENCODERS[cls] = enc
    _DECODERS[cls] = dec


def encode(record: object) -> bytes:
    """The bytes of ``record`` (one of the record types of :mod:`controller.metadata.records`)."""
    body = _ENCODERS[type(record)](record)
    body["v"] = FORMAT_VERSION
    return json.dumps(body, separators=(",", ":")).encode()


def decode(cls: type[T], data: bytes) -> T:
    """The record of type ``cls`` in ``data``; raises :class:`CodecError`."""
    try:
        body = json.loads(data)
        version = body["v"]
    except (ValueError, KeyError, TypeError) as e:
        raise CodecError(f"cannot decode {cls.__name__}: {e}") from e
    if version > FORMAT_VERSION:
        raise CodecError(f"{cls.__name__}: format version {version} is newer than {FORMAT_VERSION}")
    try:
        return cast(T, _DECODERS[cls](body))
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise CodecError(f"cannot decode {cls.__name__}: {e!r}") from e


# ---- helpers --------------------------------------------------------------------------------------------------
def positions_out(cut: Mapping[int, int]) -> list[list[int]]:
    return [[k, v] for k, v in sorted(cut.items())]


def positions_in(pairs: list[list[int]]) -> dict[int, int]:
    return {int(k): int(v) for k, v in pairs}


def _segment_out(s: SegmentRecord) -> list[Any]:
    return [s.segment_id, s.creation_time_ms, s.key_start, s.key_end]


def _segment_in(raw: list[Any]) -> SegmentRecord:
    return SegmentRecord(int(raw[0]), int(raw[1]), float(raw[2]), float(raw[3]))


def config_out(c: StreamConfiguration) -> Json:
    s = c.scaling
    r = c.retention
    return {
        "scaling": [int(s.scale_type), s.target_rate, s.scale_factor, s.min_num_segments],
        "retention": None if r is None else [int(r.retention_type), r.retention_param, r.retention_max],
        "ts": c.timestamp_aggregation_timeout_ms,
        "tags": list(c.tags),
        "ro": c.rollover_size_bytes,
    }


def config_in(d: Json) -> StreamConfiguration:
    s = d["scaling"]
    r = d["retention"]
    return StreamConfiguration(
        scaling=ScalingPolicy(ScaleType(s[0]), s[1], s[2], s[3]),
        retention=None if r is None else RetentionPolicy(RetentionType(r[0]), r[1], r[2]),
        timestamp_aggregation_timeout_ms=d["ts"],
        tags=tuple(d["tags"]),
        rollover_size_bytes=d["ro"],
    )


def _rg_cut_out(value: StreamCut | str) -> Any:
    if isinstance(value, StreamCut):
        return {"scope": value.scope, "stream": value.stream, "cut": positions_out(value.positions)}
    return value


def _rg_cut_in(raw: Any) -> StreamCut | str:
    if isinstance(raw, dict):
        return StreamCut(raw["scope"], raw["stream"], positions_in(raw["cut"]))
    return str(raw)


# ---- registrations --------------------------------------------------------------------------------------------
_register(
    EpochRecord,
    lambda e: {
        "e": e.epoch,
        "r": e.reference_epoch,
        "t": e.creation_time_ms,
        "s": [_segment_out(s) for s in e.segments],
    },
    lambda d: EpochRecord(d["e"], d["r"], tuple(_segment_in(s) for s in d["s"]), d["t"]),
)
_register(
    HistoryChunk,
    lambda h: {"c": h.chunk, "h": [[x.epoch, x.reference_epoch, x.creation_time_ms] for x in h.entries]},
    lambda d: HistoryChunk(d["c"], tuple(HistoryEntry(x[0], x[1], x[2]) for x in d["h"])),
)
_register(
    EpochTransitionRecord,
    lambda t: {
        "a": t.active_epoch,
        "t": t.time_ms,
        "seal": sorted(t.segments_to_seal),
        "new": [list(x) for x in t.new_segments],
    },
    lambda d: EpochTransitionRecord(
        d["a"], d["t"], frozenset(d["seal"]), tuple((int(x[0]), float(x[1]), float(x[2])) for x in d["new"])
    ),
)
_register(
    StreamRecord,
    lambda s: {"uid": s.uid, "t": s.creation_time_ms, "n": s.starting_segment_number},
    lambda d: StreamRecord(d["uid"], d["t"], d["n"]),
)
_register(StreamState, lambda s: {"state": s.name}, lambda d: StreamState[d["state"]])
_register(
    ConfigurationRecord,
    lambda c: {"c": config_out(c.config), "u": c.updating, "to": c.tag_only, "rt": list(c.removed_tags)},
    lambda d: ConfigurationRecord(config_in(d["c"]), d["u"], d["to"], tuple(d["rt"])),
)
_register(
    TruncationRecord,
    lambda t: {
        "cut": positions_out(t.stream_cut),
        "span": [[*_segment_out(s), e] for s, e in t.span.items()],
        "del": sorted(t.deleted_segments),
        "todo": sorted(t.to_delete),
        "size": t.size_till,
        "u": t.updating,
    },
    lambda d: TruncationRecord(
        positions_in(d["cut"]),
        {_segment_in(x[:4]): int(x[4]) for x in d["span"]},
        frozenset(d["del"]),
        frozenset(d["todo"]),
        d["size"],
        d["u"],
    ),
)
_register(
    SealedSizesShard,
    lambda s: {"sh": s.shard, "sz": positions_out(s.sizes)},
    lambda d: SealedSizesShard(d["sh"], positions_in(d["sz"])),
)
_register(
    RetentionSet,
    lambda r: {"r": [[x.recording_time_ms, x.recording_size_bytes] for x in r.references]},
    lambda d: RetentionSet(tuple(StreamCutReference(x[0], x[1]) for x in d["r"])),
)
_register(
    StreamCutRecord,
    lambda s: {"t": s.recording_time_ms, "s": s.recording_size_bytes, "cut": positions_out(s.stream_cut)},
    lambda d: StreamCutRecord(d["t"], d["s"], positions_in(d["cut"])),
)
_register(
    ActiveTxnRecord,
    lambda t: {
        "c": t.creation_time_ms,
        "l": t.lease_expiry_ms,
        "m": t.max_execution_expiry_ms,
        "st": t.status.name,
        "w": t.writer_id,
        "ct": t.commit_time_ms,
        "o": t.commit_order,
        "off": positions_out(t.commit_offsets),
    },
    lambda d: ActiveTxnRecord(
        d["c"], d["l"], d["m"], TxnState[d["st"]], d["w"], d["ct"], d["o"], positions_in(d["off"])
    ),
)
_register(
    CompletedTxnRecord,
    lambda t: {"e": t.epoch, "t": t.complete_time_ms, "st": t.status.name},
    lambda d: CompletedTxnRecord(d["e"], d["t"], TxnState[d["st"]]),
)
_register(
    CommittingTxnsRecord,
    lambda c: {"e": c.epoch, "txns": [t.hex for t in c.txn_ids], "a": c.active_epoch},
    lambda d: CommittingTxnsRecord(d["e"], tuple(uuid.UUID(hex=t) for t in d["txns"]), d["a"]),
)
_register(
    WriterMark,
    lambda w: {"t": w.timestamp, "p": positions_out(w.position), "alive": w.alive},
    lambda d: WriterMark(d["t"], positions_in(d["p"]), d["alive"]),
)
_register(
    ReaderGroupConfigRecord,
    lambda r: {
        "refresh": r.group_refresh_time_ms,
        "cp": r.automatic_checkpoint_interval_ms,
        "maxcp": r.max_outstanding_checkpoint_request,
        "ret": int(r.retention_type),
        "start": {k: _rg_cut_out(v) for k, v in sorted(r.starting_stream_cuts.items())},
        "end": {k: _rg_cut_out(v) for k, v in sorted(r.ending_stream_cuts.items())},
        "ro": r.rollover_size_bytes,
        "gen": r.generation,
        "id": r.reader_group_id.hex,
        "u": r.updating,
        "rm": sorted(r.removed_streams),
    },
    lambda d: ReaderGroupConfigRecord(
        d["refresh"],
        d["cp"],
        d["maxcp"],
        ReaderGroupRetentionType(d["ret"]),
        {k: _rg_cut_in(v) for k, v in d["start"].items()},
        {k: _rg_cut_in(v) for k, v in d["end"].items()},
        d["ro"],
        d["gen"],
        uuid.UUID(hex=d["id"]),
        d["u"],
        frozenset(d["rm"]),
    ),
)
_register(
    SubscriberRecord,
    lambda s: {"sub": s.subscriber, "gen": s.generation, "cut": positions_out(s.truncation_cut), "t": s.update_time_ms},
    lambda d: SubscriberRecord(d["sub"], d["gen"], positions_in(d["cut"]), d["t"]),
)
