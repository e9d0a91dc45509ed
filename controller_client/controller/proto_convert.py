"""Conversions between :mod:`controller_client.model` and ``Controller.proto`` messages.

Pure functions, both directions, shared by the controller service (decoding requests, encoding
responses) and the controller client (the other way round). ``*_to_proto`` functions take model
values, which are valid by construction. ``*_from_proto`` functions take whatever arrived on the
wire and raise :class:`~controller_client.model.InvalidModelError` whose message starts with the
offending field (``"StreamConfig.streamInfo.scope: must not be empty"``); the service answers
those with INVALID_ARGUMENT. They check what the protocol itself requires (presence, ranges,
known enum numbers); naming rules and existence are the service's business, because the protocol
answers them with statuses such as ``CreateScopeStatus.INVALID_SCOPE_NAME``.

Wire conventions kept as Pravega's clients expect them:

* a ``RetentionPolicy`` that is absent or has type ``UNKNOWN`` means "no retention policy";
  ``retentionMax`` ``Long.MAX_VALUE`` (what Java sends for "no maximum") or 0 is the model's 0;
* a ``StreamCut`` with an empty ``cut`` map is the unbounded cut (head or tail by context);
* ``TxnId`` holds the 128-bit id as two signed 64-bit halves, like Java's ``UUID``;
* ``ReaderGroupConfiguration.readerGroupId`` is the UUID's canonical string and
  ``retentionType`` the ordinal of :class:`ReaderGroupRetention`.
"""

from __future__ import annotations

import enum
import math
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controller_client.model import (
    InvalidModelError,
    RetentionPolicy,
    RetentionType,
    ScaleType,
    ScalingPolicy,
    SegmentRange,
    StreamConfiguration,
    StreamCut,
    TxnState,
    segment_number,
    validate_stream_name,
)
from controller_client.model import ReaderGroupConfig as ReaderGroupConfig  # re-exported: they lived here
from controller_client.model import ReaderGroupRetention as ReaderGroupRetention  # re-exported, likewise
from controller_client.proto import Controller_pb2 as pb

INT64_MAX = 2**63 - 1
_UINT64 = 2**64
_MAX_SEGMENT_NUMBER = 2**31 - 1
_MAX_PORT = 65535

# ---- helpers ---------------------------------------------------------------------------------------------------


def _fail(where: str, problem: str) -> InvalidModelError:
    return InvalidModelError(f"{where}: {problem}")


def _text(value: str, where: str) -> str:
    if not value:
        raise _fail(where, "must not be empty")
    return value


def _enum(kind: type[enum.IntEnum], number: int, where: str) -> enum.IntEnum:
    try:
        return kind(number)
    except ValueError:
        raise _fail(where, f"unknown {kind.__name__} value {number}") from None


def _check_segment_id(value: int, where: str) -> int:
    """A segment id: ``epoch << 32 | number`` with both halves in ``[0, 2**31)``."""
    if value < 0 or segment_number(value) > _MAX_SEGMENT_NUMBER:
        raise _fail(where, f"invalid segment id {value}")
    return value


def _signed64(value: int) -> int:
    return value - _UINT64 if value > INT64_MAX else value


# ---- scopes and streams -----------------------------------------------------------------------------------------


def scope_info_to_proto(scope: str) -> pb.ScopeInfo:
    return pb.ScopeInfo(scope=scope)


def _name(value: str, where: str) -> str:
    """A scope or stream name as the model allows it (system names, starting with ``_``, included)."""
    _text(value, where)
    try:
        return validate_stream_name(value, internal=True)
    except InvalidModelError as exc:
        raise _fail(where, str(exc).partition(": ")[2]) from exc


def scope_info_from_proto(msg: pb.ScopeInfo, where: str = "ScopeInfo") -> str:
    return _name(msg.scope, f"{where}.scope")


def stream_info_to_proto(scope: str, stream: str) -> pb.StreamInfo:
    """A ``StreamInfo`` with access operation UNSPECIFIED (segstore runs without auth)."""
    return pb.StreamInfo(scope=scope, stream=stream)


def stream_info_from_proto(msg: pb.StreamInfo, where: str = "StreamInfo") -> tuple[str, str]:
    """``(scope, stream)``; both must be valid names."""
    return _name(msg.scope, f"{where}.scope"), _name(msg.stream, f"{where}.stream")


# ---- stream configuration --------------------------------------------------------------------------------------


def scaling_policy_to_proto(policy: ScalingPolicy) -> pb.ScalingPolicy:
    return pb.ScalingPolicy(
        scaleType=int(policy.scale_type),  # type: ignore[arg-type]
        targetRate=policy.target_rate,
        scaleFactor=policy.scale_factor,
        minNumSegments=policy.min_num_segments,
    )


def scaling_policy_from_proto(msg: pb.ScalingPolicy, where: str = "ScalingPolicy") -> ScalingPolicy:
    scale_type = ScaleType(_enum(ScaleType, msg.scaleType, f"{where}.scaleType"))
    try:
        return ScalingPolicy(scale_type, msg.targetRate, msg.scaleFactor, msg.minNumSegments)
    except InvalidModelError as e:
        raise _fail(where, str(e)) from None


def retention_policy_to_proto(policy: RetentionPolicy) -> pb.RetentionPolicy:
    return pb.RetentionPolicy(
        retentionType=int(policy.retention_type),  # type: ignore[arg-type]
        retentionParam=policy.retention_param,
        retentionMax=policy.retention_max or INT64_MAX,
    )


def retention_policy_from_proto(msg: pb.RetentionPolicy, where: str = "RetentionPolicy") -> RetentionPolicy | None:
    """``None`` for type UNKNOWN (proto3's way of saying "not set")."""
    retention_type = RetentionType(_enum(RetentionType, msg.retentionType, f"{where}.retentionType"))
    if retention_type == RetentionType.UNKNOWN:
        return None
    maximum = 0 if msg.retentionMax == INT64_MAX else msg.retentionMax
    try:
        return RetentionPolicy(retention_type, msg.retentionParam, maximum)
    except InvalidModelError as e:
        raise _fail(where, str(e)) from None


def stream_config_to_proto(scope: str, stream: str, config: StreamConfiguration) -> pb.StreamConfig:
    msg = pb.StreamConfig(
        streamInfo=stream_info_to_proto(scope, stream),
        scalingPolicy=scaling_policy_to_proto(config.scaling),
        tags=pb.Tags(tag=config.tags),
        timestampAggregationTimeout=config.timestamp_aggregation_timeout_ms,
        rolloverSizeBytes=config.rollover_size_bytes,
    )
    if config.retention is not None:
        msg.retentionPolicy.CopyFrom(retention_policy_to_proto(config.retention))
    return msg


def stream_config_from_proto(msg: pb.StreamConfig) -> tuple[str, str, StreamConfiguration]:
    """``(scope, stream, configuration)``. The scaling policy is required (every client sends one)."""
    scope, stream = stream_info_from_proto(msg.streamInfo, "StreamConfig.streamInfo")
    if not msg.HasField("scalingPolicy"):
        raise _fail("StreamConfig.scalingPolicy", "missing")
    scaling = scaling_policy_from_proto(msg.scalingPolicy, "StreamConfig.scalingPolicy")
    retention = None
    if msg.HasField("retentionPolicy"):
        retention = retention_policy_from_proto(msg.retentionPolicy, "StreamConfig.retentionPolicy")
    try:
        config = StreamConfiguration(
            scaling=scaling,
            retention=retention,
            timestamp_aggregation_timeout_ms=msg.timestampAggregationTimeout,
            tags=tuple(msg.tags.tag),
            rollover_size_bytes=msg.rolloverSizeBytes,
        )
    except InvalidModelError as e:
        raise _fail("StreamConfig", str(e)) from None
    return scope, stream, config


# ---- segments --------------------------------------------------------------------------------------------------


def segment_id_to_proto(scope: str, stream: str, segment: int) -> pb.SegmentId:
    return pb.SegmentId(streamInfo=stream_info_to_proto(scope, stream), segmentId=segment)


def segment_id_from_proto(msg: pb.SegmentId, where: str = "SegmentId") -> tuple[str, str, int]:
    """``(scope, stream, segment id)``."""
    scope, stream = stream_info_from_proto(msg.streamInfo, f"{where}.streamInfo")
    return scope, stream, _check_segment_id(msg.segmentId, f"{where}.segmentId")


def segment_range_to_proto(scope: str, stream: str, segment: SegmentRange) -> pb.SegmentRange:
    return pb.SegmentRange(
        segmentId=segment_id_to_proto(scope, stream, segment.segment_id),
        minKey=segment.key_start,
        maxKey=segment.key_end,
    )


def segment_range_from_proto(msg: pb.SegmentRange, where: str = "SegmentRange") -> SegmentRange:
    """The model range; the scope/stream inside ``segmentId`` are checked for presence, not returned."""
    _, _, segment = segment_id_from_proto(msg.segmentId, f"{where}.segmentId")
    return key_range(segment, msg.minKey, msg.maxKey, where, ("minKey", "maxKey"))


def segment_ranges_from_proto(msgs: Iterable[pb.SegmentRange], where: str) -> list[SegmentRange]:
    """Ranges sorted by ``key_start``."""
    ranges = [segment_range_from_proto(m, f"{where}[{i}]") for i, m in enumerate(msgs)]
    return sorted(ranges, key=lambda r: (r.key_start, r.key_end))


def key_range(
    segment: int, start: float, end: float, where: str, names: tuple[str, str] = ("start", "end")
) -> SegmentRange:
    """A :class:`SegmentRange` from wire values, naming ``where.<start name>/<end name>`` on error."""
    if not (math.isfinite(start) and math.isfinite(end)):
        raise _fail(f"{where}.{names[0]}/{names[1]}", f"not finite: [{start}, {end})")
    try:
        return SegmentRange(segment, start, end)
    except InvalidModelError as e:
        raise _fail(f"{where}.{names[0]}/{names[1]}", str(e)) from None


def node_uri_to_proto(host: str, port: int) -> pb.NodeUri:
    return pb.NodeUri(endpoint=host, port=port)


def node_uri_from_proto(msg: pb.NodeUri, where: str = "NodeUri") -> tuple[str, int]:
    """``(host, port)``."""
    host = _text(msg.endpoint, f"{where}.endpoint")
    if not 0 < msg.port <= _MAX_PORT:
        raise _fail(f"{where}.port", f"not a TCP port: {msg.port}")
    return host, msg.port


# ---- stream cuts -----------------------------------------------------------------------------------------------


def _positions(cut: Mapping[int, int], where: str) -> dict[int, int]:
    positions = {}
    for segment, offset in cut.items():
        _check_segment_id(segment, where)
        if offset < -1:
            raise _fail(where, f"offset {offset} of segment {segment} is negative")
        positions[segment] = offset
    return positions


def stream_cut_to_proto(cut: StreamCut) -> pb.StreamCut:
    return pb.StreamCut(streamInfo=stream_info_to_proto(cut.scope, cut.stream), cut=dict(cut.positions))


def stream_cut_from_proto(msg: pb.StreamCut, where: str = "StreamCut") -> StreamCut:
    """An empty ``cut`` map gives a cut with no positions (the unbounded cut)."""
    scope, stream = stream_info_from_proto(msg.streamInfo, f"{where}.streamInfo")
    return StreamCut(scope, stream, _positions(msg.cut, f"{where}.cut"))


def stream_cut_range_to_proto(from_cut: StreamCut, to_cut: StreamCut) -> pb.StreamCutRange:
    if (from_cut.scope, from_cut.stream) != (to_cut.scope, to_cut.stream):
        raise InvalidModelError(
            f"stream cut range: cuts of different streams {from_cut.scope}/{from_cut.stream} "
            f"and {to_cut.scope}/{to_cut.stream}"
        )
    return pb.StreamCutRange(
        streamInfo=stream_info_to_proto(from_cut.scope, from_cut.stream),
        to=dict(to_cut.positions),
        **{"from": dict(from_cut.positions)},
    )


def stream_cut_range_from_proto(msg: pb.StreamCutRange) -> tuple[StreamCut, StreamCut]:
    """``(from, to)``; an empty map is unbounded (stream head for ``from``, tail for ``to``)."""
    scope, stream = stream_info_from_proto(msg.streamInfo, "StreamCutRange.streamInfo")
    start = _positions(getattr(msg, "from"), "StreamCutRange.from")
    end = _positions(msg.to, "StreamCutRange.to")
    return StreamCut(scope, stream, start), StreamCut(scope, stream, end)


# ---- transactions ----------------------------------------------------------------------------------------------


def txn_id_to_proto(txn_id: uuid.UUID) -> pb.TxnId:
    """High and low 64 bits as two's-complement signed values (Java ``UUID`` most/least bits)."""
    value = txn_id.int
    return pb.TxnId(highBits=_signed64(value >> 64), lowBits=_signed64(value & (_UINT64 - 1)))


def txn_id_from_proto(msg: pb.TxnId) -> uuid.UUID:
    return uuid.UUID(int=((msg.highBits % _UINT64) << 64) | (msg.lowBits % _UINT64))


def txn_state_to_proto(state: TxnState) -> pb.TxnState:
    return pb.TxnState(state=int(state))  # type: ignore[arg-type]


def txn_state_from_proto(msg: pb.TxnState, where: str = "TxnState") -> TxnState:
    return TxnState(_enum(TxnState, msg.state, f"{where}.state"))


def required_txn_id(msg: pb.TxnRequest | pb.PingTxnRequest, where: str) -> uuid.UUID:
    """The ``txnId`` of a transaction request, which must be present."""
    if not msg.HasField("txnId"):
        raise _fail(f"{where}.txnId", "missing")
    return txn_id_from_proto(msg.txnId)


# ---- scaling ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScaleRequestModel:
    """A decoded ``ScaleRequest``: seal ``sealed_segments`` and create one segment per new range."""

    scope: str
    stream: str
    sealed_segments: tuple[int, ...]
    new_ranges: tuple[tuple[float, float], ...]
    scale_timestamp_ms: int


def scale_request_to_proto(
    scope: str, stream: str, sealed: Iterable[int], new_ranges: Iterable[tuple[float, float]], timestamp_ms: int
) -> pb.ScaleRequest:
    return pb.ScaleRequest(
        streamInfo=stream_info_to_proto(scope, stream),
        sealedSegments=list(sealed),
        newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=start, end=end) for start, end in new_ranges],
        scaleTimestamp=timestamp_ms,
    )


def scale_request_from_proto(msg: pb.ScaleRequest) -> ScaleRequestModel:
    scope, stream = stream_info_from_proto(msg.streamInfo, "ScaleRequest.streamInfo")
    sealed = tuple(_check_segment_id(s, "ScaleRequest.sealedSegments") for s in msg.sealedSegments)
    ranges = []
    for i, entry in enumerate(msg.newKeyRanges):
        checked = key_range(0, entry.start, entry.end, f"ScaleRequest.newKeyRanges[{i}]")
        ranges.append((checked.key_start, checked.key_end))
    return ScaleRequestModel(scope, stream, sealed, tuple(ranges), msg.scaleTimestamp)


# ---- reader groups ---------------------------------------------------------------------------------------------


def reader_group_config_to_proto(config: ReaderGroupConfig) -> pb.ReaderGroupConfiguration:
    return pb.ReaderGroupConfiguration(
        scope=config.scope,
        readerGroupName=config.reader_group,
        groupRefreshTimeMillis=config.group_refresh_time_ms,
        automaticCheckpointIntervalMillis=config.automatic_checkpoint_interval_ms,
        maxOutstandingCheckpointRequest=config.max_outstanding_checkpoint_request,
        retentionType=int(config.retention_type),
        generation=config.generation,
        readerGroupId=str(config.reader_group_id),
        startingStreamCuts=[stream_cut_to_proto(c) for c in config.starting_stream_cuts],
        endingStreamCuts=[stream_cut_to_proto(c) for c in config.ending_stream_cuts],
        rolloverSizeBytes=config.rollover_size_bytes,
    )


def reader_group_config_from_proto(
    msg: pb.ReaderGroupConfiguration, where: str = "ReaderGroupConfiguration"
) -> ReaderGroupConfig:
    scope = _name(msg.scope, f"{where}.scope")
    name = _name(msg.readerGroupName, f"{where}.readerGroupName")
    retention = ReaderGroupRetention(_enum(ReaderGroupRetention, msg.retentionType, f"{where}.retentionType"))
    try:
        group_id = uuid.UUID(msg.readerGroupId)
    except ValueError:
        raise _fail(f"{where}.readerGroupId", f"not a UUID: {msg.readerGroupId!r}") from None
    starting = tuple(
        stream_cut_from_proto(c, f"{where}.startingStreamCuts[{i}]") for i, c in enumerate(msg.startingStreamCuts)
    )
    ending = tuple(
        stream_cut_from_proto(c, f"{where}.endingStreamCuts[{i}]") for i, c in enumerate(msg.endingStreamCuts)
    )
    try:
        return ReaderGroupConfig(
            scope=scope,
            reader_group=name,
            starting_stream_cuts=starting,
            ending_stream_cuts=ending,
            group_refresh_time_ms=msg.groupRefreshTimeMillis,
            automatic_checkpoint_interval_ms=msg.automaticCheckpointIntervalMillis,
            max_outstanding_checkpoint_request=msg.maxOutstandingCheckpointRequest,
            retention_type=retention,
            generation=msg.generation,
            reader_group_id=group_id,
            rollover_size_bytes=msg.rolloverSizeBytes,
        )
    except InvalidModelError as e:
        raise _fail(where, str(e)) from None


def reader_group_info_to_proto(
    scope: str, reader_group: str, reader_group_id: uuid.UUID | None = None, generation: int = 0
) -> pb.ReaderGroupInfo:
    return pb.ReaderGroupInfo(
        scope=scope,
        readerGroup=reader_group,
        readerGroupId="" if reader_group_id is None else str(reader_group_id),
        generation=generation,
    )


def reader_group_info_from_proto(msg: pb.ReaderGroupInfo) -> tuple[str, str, uuid.UUID | None, int]:
    """``(scope, reader group, id or None when not sent, generation)``."""
    scope = _name(msg.scope, "ReaderGroupInfo.scope")
    name = _name(msg.readerGroup, "ReaderGroupInfo.readerGroup")
    group_id = None
    if msg.readerGroupId:
        try:
            group_id = uuid.UUID(msg.readerGroupId)
        except ValueError:
            raise _fail("ReaderGroupInfo.readerGroupId", f"not a UUID: {msg.readerGroupId!r}") from None
    return scope, name, group_id, msg.generation
