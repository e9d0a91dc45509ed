"""Async client of the controller's gRPC service (``Controller.proto``).

:class:`ControllerClient` speaks to segstore's controller or to a Pravega controller over one
``grpc.aio`` channel, plain text or TLS as the URI's scheme says (:mod:`controller_client.controller.channel`);
a URI listing several controllers (``tcp://h1:9090,h2:9090``) gets a channel per controller and fails over
between them (:mod:`controller_client.controller.transport`).
Every method takes and returns :mod:`controller_client.model` values (never protobuf messages) and
turns the status enums of the responses into the typed errors of :mod:`controller_client.errors`.

Deadlines and retries: every RPC attempt has a deadline of ``rpc_timeout_s``. An attempt that
fails with gRPC UNAVAILABLE (controller down, connection refused, no answer, connection lost) is repeated
with exponential backoff until ``retry_timeout_s``, the budget for "unreachable", has passed since the call
started (or the budget of a call around it ends, :mod:`segstore_shared.deadline`); then
:class:`ControllerUnavailableError` is raised, naming the URI, what failed and what to check
(``controller tcp://127.0.0.1:9999 unreachable after 30.0 s: connection refused (is the controller running, and
is the URI right?)``); no retry loop around the call repeats it. A missed deadline (DEADLINE_EXCEEDED) raises
:class:`ControllerUnavailableError` at once, because the controller may have acted on the
request. So a call ends within about ``retry_timeout_s + rpc_timeout_s``. Nothing blocks the
event loop; cancelling a call cancels the RPC in flight. A TLS failure that repeating cannot cure (the
controller's certificate is not trusted or names another host) raises :class:`ControllerTlsError` at once.

Usage::

    async with await ControllerClient.connect("tcp://127.0.0.1:9090") as controller:  # or tls://localhost:9090
        await controller.create_scope("sc")
        await controller.create_stream("sc", "st", StreamConfiguration(ScalingPolicy.fixed(2)))
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from controller_client.controller import proto_convert as conv
from controller_client.controller.channel import ControllerClientConfig as ControllerClientConfig  # re-exported
from controller_client.controller.channel import parse_controller_uri as parse_controller_uri  # re-exported
from controller_client.controller.transport import ControllerTransport
from controller_client.errors import (
    ControllerError,
    ControllerFailureError,
    GenerationMismatchError,
    InvalidArgumentError,
    ReaderGroupNotFoundError,
    ScalePreconditionFailedError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    StreamNotFoundError,
    StreamNotSealedError,
    StreamSealedError,
    SubscriberNotFoundError,
    TxnFailedError,
    TxnNotFoundError,
)
from controller_client.kvt.errors import KeyValueTableNotFoundError
from controller_client.kvt.model import KeyValueTableConfiguration
from controller_client.kvt.proto import kvt_config_from_proto, kvt_config_to_proto, kvt_info_to_proto
from controller_client.model import InvalidModelError, SegmentRange, StreamConfiguration, StreamCut, TxnState
from controller_client.model import ReaderGroupConfig as ReaderGroupConfig  # re-exported
from controller_client.model import ReaderGroupRetention as ReaderGroupRetention  # re-exported
from controller_client.proto import Controller_pb2 as pb


@dataclass(frozen=True, slots=True)
class ScaleStarted:
    """A scale the controller accepted: ``epoch`` is the epoch being scaled (pass it to ``check_scale``, as
    Pravega's clients do); the scale creates ``new_segments`` in the epoch after it."""

    epoch: int
    new_segments: tuple[SegmentRange, ...]


def _name(enum_holder: Any, status: int) -> str:
    try:
        return str(enum_holder.Name(status))
    except ValueError:
        return f"unknown status {status}"


def _refuse(what: str, holder: Any, status: int, errors: dict[int, ControllerError] | None = None) -> ControllerError:
    """The error for a non-success ``status`` of enum ``holder``: from ``errors``, else a failure."""
    if errors and status in errors:
        return errors[status]
    return ControllerFailureError(f"{what}: {_name(holder, status)}")


@contextmanager
def _decoding(rpc: str) -> Iterator[None]:
    """Turn an invalid response into :class:`ControllerFailureError`."""
    try:
        yield
    except InvalidModelError as e:
        raise ControllerFailureError(f"{rpc}: invalid response from controller: {e}") from e


class ControllerClient(ControllerTransport):
    """One controller connection. Safe to use from many tasks of one event loop at once."""

    # ---- scopes ---------------------------------------------------------------------------------------------
    async def create_scope(self, scope: str) -> bool:
        """True if created, False if it already existed. Raises InvalidArgumentError for a bad name."""
        resp: pb.CreateScopeStatus = await self._call("createScope", conv.scope_info_to_proto(scope))
        s = pb.CreateScopeStatus
        if resp.status in (s.SUCCESS, s.SCOPE_EXISTS):
            return resp.status == s.SUCCESS
        bad_name = InvalidArgumentError(f"invalid scope name {scope!r}")
        raise _refuse(f"createScope {scope!r}", s.Status, resp.status, {s.INVALID_SCOPE_NAME: bad_name})

    async def delete_scope(self, scope: str) -> bool:
        """True if deleted, False if it did not exist. Raises ScopeNotEmptyError."""
        resp: pb.DeleteScopeStatus = await self._call("deleteScope", conv.scope_info_to_proto(scope))
        s = pb.DeleteScopeStatus
        if resp.status in (s.SUCCESS, s.SCOPE_NOT_FOUND):
            return resp.status == s.SUCCESS
        raise _refuse(f"deleteScope {scope!r}", s.Status, resp.status, {s.SCOPE_NOT_EMPTY: ScopeNotEmptyError(scope)})

    async def scope_exists(self, scope: str) -> bool:
        resp: pb.ExistsResponse = await self._call("checkScopeExists", conv.scope_info_to_proto(scope))
        return resp.exists

    async def list_scopes(self) -> AsyncIterator[str]:
        """Every scope, page by page (continuation tokens); ends at the first empty page."""
        token = ""
        while True:
            request = pb.ScopesRequest(continuationToken=pb.ContinuationToken(token=token))
            resp: pb.ScopesResponse = await self._call("listScopes", request)
            if not resp.scopes:
                return
            for scope in resp.scopes:
                yield scope
            token = resp.continuationToken.token

    # ---- streams --------------------------------------------------------------------------------------------
    async def create_stream(self, scope: str, stream: str, config: StreamConfiguration) -> bool:
        """True if created, False if it already existed (its configuration is left as it was).
        Raises ScopeNotFoundError, InvalidArgumentError (bad stream name)."""
        request = conv.stream_config_to_proto(scope, stream, config)
        resp: pb.CreateStreamStatus = await self._call("createStream", request)
        s = pb.CreateStreamStatus
        if resp.status in (s.SUCCESS, s.STREAM_EXISTS):
            return resp.status == s.SUCCESS
        errors: dict[int, ControllerError] = {
            s.SCOPE_NOT_FOUND: ScopeNotFoundError(scope),
            s.INVALID_STREAM_NAME: InvalidArgumentError(f"invalid stream name {stream!r} (scope {scope!r})"),
        }
        raise _refuse(f"createStream {scope}/{stream}", s.Status, resp.status, errors)

    def _check_update(self, rpc: str, scope: str, stream: str, status: int) -> None:
        s = pb.UpdateStreamStatus
        if status != s.SUCCESS:
            errors: dict[int, ControllerError] = {
                s.STREAM_NOT_FOUND: StreamNotFoundError(scope, stream),
                s.SCOPE_NOT_FOUND: ScopeNotFoundError(scope),
                s.STREAM_SEALED: StreamSealedError(scope, stream),
            }
            raise _refuse(f"{rpc} {scope}/{stream}", s.Status, status, errors)

    async def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        """Raises StreamNotFoundError, ScopeNotFoundError, StreamSealedError."""
        resp = await self._call("updateStream", conv.stream_config_to_proto(scope, stream, config))
        self._check_update("updateStream", scope, stream, resp.status)

    async def truncate_stream(self, cut: StreamCut) -> None:
        """Truncate the stream at ``cut``: data before it may be deleted."""
        resp = await self._call("truncateStream", conv.stream_cut_to_proto(cut))
        self._check_update("truncateStream", cut.scope, cut.stream, resp.status)

    async def seal_stream(self, scope: str, stream: str) -> None:
        resp = await self._call("sealStream", conv.stream_info_to_proto(scope, stream))
        self._check_update("sealStream", scope, stream, resp.status)

    async def delete_stream(self, scope: str, stream: str) -> bool:
        """True if deleted, False if it did not exist. Raises StreamNotSealedError."""
        resp: pb.DeleteStreamStatus = await self._call("deleteStream", conv.stream_info_to_proto(scope, stream))
        s = pb.DeleteStreamStatus
        if resp.status in (s.SUCCESS, s.STREAM_NOT_FOUND):
            return resp.status == s.SUCCESS
        errors: dict[int, ControllerError] = {s.STREAM_NOT_SEALED: StreamNotSealedError(scope, stream)}
        raise _refuse(f"deleteStream {scope}/{stream}", s.Status, resp.status, errors)

    async def stream_exists(self, scope: str, stream: str) -> bool:
        resp: pb.ExistsResponse = await self._call("checkStreamExists", conv.stream_info_to_proto(scope, stream))
        return resp.exists

    async def get_stream_configuration(self, scope: str, stream: str) -> StreamConfiguration:
        request = conv.stream_info_to_proto(scope, stream)
        resp = await self._call("getStreamConfiguration", request, not_found=StreamNotFoundError(scope, stream))
        with _decoding("getStreamConfiguration"):
            return conv.stream_config_from_proto(resp)[2]

    async def list_streams(self, scope: str, tag: str | None = None) -> AsyncIterator[str]:
        """Names of the streams of ``scope`` (only those tagged ``tag`` if given), page by page.
        Raises ScopeNotFoundError."""
        token = ""
        while True:
            continuation = pb.ContinuationToken(token=token)
            request: Any
            if tag is None:
                rpc, request = "listStreamsInScope", pb.StreamsInScopeRequest(continuationToken=continuation)
            else:
                rpc = "listStreamsInScopeForTag"
                request = pb.StreamsInScopeWithTagRequest(tag=tag, continuationToken=continuation)
            request.scope.CopyFrom(conv.scope_info_to_proto(scope))
            resp: pb.StreamsInScopeResponse = await self._call(rpc, request)
            s = pb.StreamsInScopeResponse
            if resp.status != s.SUCCESS:
                raise _refuse(f"{rpc} {scope!r}", s.Status, resp.status, {s.SCOPE_NOT_FOUND: ScopeNotFoundError(scope)})
            if not resp.streams:
                return
            for info in resp.streams:
                yield info.stream
            token = resp.continuationToken.token

    # ---- segments -------------------------------------------------------------------------------------------
    async def get_current_segments(self, scope: str, stream: str) -> list[SegmentRange]:
        """The active segments, sorted by ``key_start`` (empty once the stream is sealed)."""
        # NONE: this client takes its tokens from getDelegationToken, so READ on the stream is enough here
        request = pb.StreamInfo(scope=scope, stream=stream, accessOperation=pb.StreamInfo.NONE)
        resp = await self._call("getCurrentSegments", request, not_found=StreamNotFoundError(scope, stream))
        with _decoding("getCurrentSegments"):
            return conv.segment_ranges_from_proto(resp.segmentRanges, "SegmentRanges.segmentRanges")

    async def get_epoch_segments(self, scope: str, stream: str, epoch: int) -> list[SegmentRange]:
        """The segments of ``epoch``, sorted by ``key_start``."""
        request = pb.GetEpochSegmentsRequest(streamInfo=conv.stream_info_to_proto(scope, stream), epoch=epoch)
        resp = await self._call("getEpochSegments", request, not_found=StreamNotFoundError(scope, stream))
        with _decoding("getEpochSegments"):
            return conv.segment_ranges_from_proto(resp.segmentRanges, "SegmentRanges.segmentRanges")

    async def get_segments_at_time(self, scope: str, stream: str, timestamp_ms: int) -> StreamCut:
        """The stream cut at ``timestamp_ms`` (ms since the epoch; 0 is the head)."""
        info = pb.StreamInfo(scope=scope, stream=stream, accessOperation=pb.StreamInfo.NONE)  # READ is enough
        request = pb.GetSegmentsRequest(streamInfo=info, timestamp=timestamp_ms)
        resp: pb.SegmentsAtTime = await self._call("getSegments", request, not_found=StreamNotFoundError(scope, stream))
        with _decoding("getSegments"):
            positions = {
                conv.segment_id_from_proto(loc.segmentId, "SegmentsAtTime.segments")[2]: loc.offset
                for loc in resp.segments
            }
            return StreamCut(scope, stream, positions)

    async def get_successors(self, scope: str, stream: str, segment_id: int) -> dict[SegmentRange, list[int]]:
        """The segments that replaced ``segment_id`` when it was sealed, each with its predecessors."""
        request = conv.segment_id_to_proto(scope, stream, segment_id)
        resp: pb.SuccessorResponse = await self._call(
            "getSegmentsImmediatelyFollowing", request, not_found=StreamNotFoundError(scope, stream)
        )
        with _decoding("getSegmentsImmediatelyFollowing"):
            return {
                conv.segment_range_from_proto(e.segment, "SuccessorResponse.segments.segment"): list(e.value)
                for e in resp.segments
            }

    async def get_segments_between(self, from_cut: StreamCut, to_cut: StreamCut) -> list[int]:
        """Ids (sorted) of the segments between two cuts of one stream; a cut without positions is
        unbounded (head for ``from_cut``, tail for ``to_cut``)."""
        try:
            request = conv.stream_cut_range_to_proto(from_cut, to_cut)
        except InvalidModelError as e:
            raise InvalidArgumentError(str(e)) from e
        not_found = StreamNotFoundError(from_cut.scope, from_cut.stream)
        resp: pb.StreamCutRangeResponse = await self._call("getSegmentsBetween", request, not_found=not_found)
        with _decoding("getSegmentsBetween"):
            return sorted(conv.segment_id_from_proto(s, "StreamCutRangeResponse.segments")[2] for s in resp.segments)

    async def get_uri(self, scope: str, stream: str, segment_id: int) -> tuple[str, int]:
        """``(host, port)`` of the segment store that owns the segment."""
        resp: pb.NodeUri = await self._call("getURI", conv.segment_id_to_proto(scope, stream, segment_id))
        with _decoding("getURI"):
            return conv.node_uri_from_proto(resp)

    async def is_segment_valid(self, scope: str, stream: str, segment_id: int) -> bool:
        resp = await self._call("isSegmentValid", conv.segment_id_to_proto(scope, stream, segment_id))
        return bool(resp.response)

    async def is_stream_cut_valid(self, cut: StreamCut) -> bool:
        resp = await self._call("isStreamCutValid", conv.stream_cut_to_proto(cut))
        return bool(resp.response)

    # ---- scaling --------------------------------------------------------------------------------------------
    async def scale(
        self,
        scope: str,
        stream: str,
        sealed: Iterable[int],
        new_ranges: Iterable[tuple[float, float]],
        scale_timestamp_ms: int,
    ) -> ScaleStarted:
        """Start replacing ``sealed`` by one segment per range of ``new_ranges``; poll
        :meth:`check_scale` with the returned epoch to learn when it is done.
        Raises ScalePreconditionFailedError when the controller refuses the request."""
        request = conv.scale_request_to_proto(scope, stream, sealed, new_ranges, scale_timestamp_ms)
        resp: pb.ScaleResponse = await self._call("scale", request, not_found=StreamNotFoundError(scope, stream))
        s = pb.ScaleResponse
        if resp.status != s.STARTED:
            errors: dict[int, ControllerError] = {s.PRECONDITION_FAILED: ScalePreconditionFailedError(scope, stream)}
            raise _refuse(f"scale {scope}/{stream}", s.ScaleStreamStatus, resp.status, errors)
        with _decoding("scale"):
            segments = conv.segment_ranges_from_proto(resp.segments, "ScaleResponse.segments")
        return ScaleStarted(resp.epoch, tuple(segments))

    async def check_scale(self, scope: str, stream: str, epoch: int) -> bool:
        """True once the scale that started ``epoch`` is complete, False while it runs."""
        request = pb.ScaleStatusRequest(streamInfo=conv.stream_info_to_proto(scope, stream), epoch=epoch)
        resp: pb.ScaleStatusResponse = await self._call("checkScale", request)
        s = pb.ScaleStatusResponse
        if resp.status in (s.SUCCESS, s.IN_PROGRESS):
            return resp.status == s.SUCCESS
        invalid = InvalidArgumentError(f"checkScale {scope}/{stream}: no scale to epoch {epoch}")
        raise _refuse(f"checkScale {scope}/{stream}", s.ScaleStatus, resp.status, {s.INVALID_INPUT: invalid})

    # ---- transactions ---------------------------------------------------------------------------------------
    async def create_transaction(self, scope: str, stream: str, lease_ms: int) -> tuple[uuid.UUID, list[SegmentRange]]:
        """A new open transaction and the segments (sorted by ``key_start``) it writes to."""
        request = pb.CreateTxnRequest(streamInfo=conv.stream_info_to_proto(scope, stream), lease=lease_ms)
        resp = await self._call("createTransaction", request, not_found=StreamNotFoundError(scope, stream))
        if not resp.HasField("txnId"):
            raise ControllerFailureError(f"createTransaction {scope}/{stream}: response without txnId")
        with _decoding("createTransaction"):
            segments = conv.segment_ranges_from_proto(resp.activeSegments, "CreateTxnResponse.activeSegments")
        return conv.txn_id_from_proto(resp.txnId), segments

    def _txn_request(self, scope: str, stream: str, txn_id: uuid.UUID, writer: str = "", ts: int = 0) -> pb.TxnRequest:
        info = conv.stream_info_to_proto(scope, stream)
        return pb.TxnRequest(streamInfo=info, txnId=conv.txn_id_to_proto(txn_id), writerId=writer, timestamp=ts)

    async def ping_transaction(self, scope: str, stream: str, txn_id: uuid.UUID, lease_ms: int) -> TxnState:
        """Renew the lease: OPEN, or COMMITTED / ABORTED if it already ended that way.
        Raises TxnNotFoundError, or TxnFailedError (lease too large, max execution time exceeded, ...)."""
        info, txn = conv.stream_info_to_proto(scope, stream), conv.txn_id_to_proto(txn_id)
        resp: pb.PingTxnStatus = await self._call(
            "pingTransaction", pb.PingTxnRequest(streamInfo=info, txnId=txn, lease=lease_ms)
        )
        s = pb.PingTxnStatus
        states = {s.OK: TxnState.OPEN, s.COMMITTED: TxnState.COMMITTED, s.ABORTED: TxnState.ABORTED}
        if resp.status in states:
            return states[resp.status]
        if resp.status == s.UNKNOWN:
            raise TxnNotFoundError(scope, stream, txn_id)
        raise TxnFailedError(scope, stream, txn_id, _name(s.Status, resp.status))

    def _check_txn(self, scope: str, stream: str, txn_id: uuid.UUID, status: int) -> None:
        s = pb.TxnStatus
        if status == s.STREAM_NOT_FOUND:
            raise StreamNotFoundError(scope, stream)
        if status == s.TRANSACTION_NOT_FOUND:
            raise TxnNotFoundError(scope, stream, txn_id)
        if status != s.SUCCESS:
            raise TxnFailedError(scope, stream, txn_id, _name(s.Status, status))

    async def commit_transaction(
        self, scope: str, stream: str, txn_id: uuid.UUID, writer_id: str = "", timestamp_ms: int = 0
    ) -> None:
        """Start committing; ``writer_id``/``timestamp_ms`` feed watermarks (empty/0: none).
        Raises StreamNotFoundError, TxnNotFoundError, TxnFailedError."""
        resp = await self._call("commitTransaction", self._txn_request(scope, stream, txn_id, writer_id, timestamp_ms))
        self._check_txn(scope, stream, txn_id, resp.status)

    async def abort_transaction(self, scope: str, stream: str, txn_id: uuid.UUID) -> None:
        """Raises StreamNotFoundError, TxnNotFoundError, TxnFailedError."""
        resp = await self._call("abortTransaction", self._txn_request(scope, stream, txn_id))
        self._check_txn(scope, stream, txn_id, resp.status)

    async def check_transaction_state(self, scope: str, stream: str, txn_id: uuid.UUID) -> TxnState:
        """The transaction's state; UNKNOWN when the controller does not know it."""
        resp: pb.TxnState = await self._call("checkTransactionState", self._txn_request(scope, stream, txn_id))
        with _decoding("checkTransactionState"):
            return conv.txn_state_from_proto(resp)

    # ---- writers and watermarks ----------------------------------------------------------------------------
    async def note_timestamp_from_writer(self, writer_id: str, position: StreamCut, timestamp_ms: int) -> None:
        """Tell the controller that ``writer_id`` is at time ``timestamp_ms`` at ``position``: what it wrote before has
        times up to it, what it writes after, from it on (input of the stream's watermarks). Raises InvalidArgumentError
        if the time or the position is before what this writer noted last (nothing is recorded then)."""
        request = pb.TimestampFromWriter(
            writer=writer_id, timestamp=timestamp_ms, position=conv.stream_cut_to_proto(position)
        )
        resp: pb.TimestampResponse = await self._call(
            "noteTimestampFromWriter", request, not_found=StreamNotFoundError(position.scope, position.stream)
        )
        if resp.result == pb.TimestampResponse.INVALID_TIME:
            raise InvalidArgumentError(f"writer {writer_id}: time {timestamp_ms} is before the one it noted last")
        if resp.result == pb.TimestampResponse.INVALID_POSITION:
            raise InvalidArgumentError(f"writer {writer_id}: position is behind the one it noted last")
        if resp.result != pb.TimestampResponse.SUCCESS:
            raise _refuse(f"noteTimestampFromWriter {writer_id!r}", pb.TimestampResponse.Status, resp.result)

    async def remove_writer(self, scope: str, stream: str, writer_id: str) -> bool:
        """The writer is gone: its marks stop holding the stream's watermarks back. False if unknown."""
        request = pb.RemoveWriterRequest(writer=writer_id, stream=pb.StreamInfo(scope=scope, stream=stream))
        resp: pb.RemoveWriterResponse = await self._call("removeWriter", request)
        s = pb.RemoveWriterResponse
        if resp.result == s.STREAM_DOES_NOT_EXIST:
            raise StreamNotFoundError(scope, stream)
        if resp.result not in (s.SUCCESS, s.UNKNOWN_WRITER):
            raise _refuse(f"removeWriter {writer_id!r}", s.Status, resp.result)
        return resp.result == s.SUCCESS

    async def list_completed_transactions(self, scope: str, stream: str) -> list[tuple[uuid.UUID, TxnState]]:
        """The outcome (COMMITTED or ABORTED) of the stream's recently completed transactions (those the
        controller still remembers: segstore keeps them ``completed_txn_ttl_s``, an hour by default)."""
        request = pb.ListCompletedTxnRequest(streamInfo=pb.StreamInfo(scope=scope, stream=stream))
        resp: pb.ListCompletedTxnResponse = await self._call(
            "listCompletedTransactions", request, not_found=StreamNotFoundError(scope, stream)
        )
        states = {pb.TxnResponse.COMMITTED: TxnState.COMMITTED, pb.TxnResponse.ABORTED: TxnState.ABORTED}
        with _decoding("listCompletedTransactions"):
            return [(conv.txn_id_from_proto(r.txnId), states.get(r.status, TxnState.UNKNOWN)) for r in resp.response]

    # ---- reader groups and subscribers ----------------------------------------------------------------------
    async def create_reader_group(self, config: ReaderGroupConfig) -> ReaderGroupConfig:
        """Create the group (or find it existing) and return the configuration the controller holds.
        Raises ScopeNotFoundError, InvalidArgumentError (bad name)."""
        resp: pb.CreateReaderGroupResponse = await self._call(
            "createReaderGroup", conv.reader_group_config_to_proto(config)
        )
        s, group = pb.CreateReaderGroupResponse, f"{config.scope}/{config.reader_group}"
        if resp.status != s.SUCCESS:
            errors: dict[int, ControllerError] = {
                s.SCOPE_NOT_FOUND: ScopeNotFoundError(config.scope),
                s.INVALID_RG_NAME: InvalidArgumentError(f"invalid reader group name {group!r}"),
            }
            raise _refuse(f"createReaderGroup {group}", s.Status, resp.status, errors)
        with _decoding("createReaderGroup"):
            return conv.reader_group_config_from_proto(resp.config, "CreateReaderGroupResponse.config")

    async def get_reader_group_config(self, scope: str, reader_group: str) -> ReaderGroupConfig:
        """Raises ReaderGroupNotFoundError."""
        request = conv.reader_group_info_to_proto(scope, reader_group)
        resp: pb.ReaderGroupConfigResponse = await self._call("getReaderGroupConfig", request)
        s = pb.ReaderGroupConfigResponse
        if resp.status != s.SUCCESS:
            errors: dict[int, ControllerError] = {s.RG_NOT_FOUND: ReaderGroupNotFoundError(scope, reader_group)}
            raise _refuse(f"getReaderGroupConfig {scope}/{reader_group}", s.Status, resp.status, errors)
        with _decoding("getReaderGroupConfig"):
            return conv.reader_group_config_from_proto(resp.config, "ReaderGroupConfigResponse.config")

    async def update_reader_group(self, config: ReaderGroupConfig) -> int:
        """Replace the configuration; ``config.generation`` must be the current generation.
        Returns the new generation. Raises ReaderGroupNotFoundError, InvalidArgumentError."""
        request = conv.reader_group_config_to_proto(config)
        resp: pb.UpdateReaderGroupResponse = await self._call("updateReaderGroup", request)
        s, group = pb.UpdateReaderGroupResponse, f"{config.scope}/{config.reader_group}"
        if resp.status == s.SUCCESS:
            return resp.generation
        rejected = InvalidArgumentError(
            f"reader group {group}: configuration rejected (generation {config.generation} not current?)"
        )
        errors: dict[int, ControllerError] = {
            s.RG_NOT_FOUND: ReaderGroupNotFoundError(config.scope, config.reader_group),
            s.INVALID_CONFIG: rejected,
        }
        raise _refuse(f"updateReaderGroup {group}", s.Status, resp.status, errors)

    async def delete_reader_group(self, scope: str, reader_group: str, reader_group_id: uuid.UUID) -> bool:
        """True if deleted, False if no such group exists."""
        request = conv.reader_group_info_to_proto(scope, reader_group, reader_group_id)
        resp: pb.DeleteReaderGroupStatus = await self._call("deleteReaderGroup", request)
        s = pb.DeleteReaderGroupStatus
        if resp.status in (s.SUCCESS, s.RG_NOT_FOUND):
            return resp.status == s.SUCCESS
        raise _refuse(f"deleteReaderGroup {scope}/{reader_group}", s.Status, resp.status)

    async def list_subscribers(self, scope: str, stream: str) -> list[str]:
        """The reader groups (as ``scope/group``) whose positions hold back the stream's retention."""
        resp: pb.SubscribersResponse = await self._call("listSubscribers", conv.stream_info_to_proto(scope, stream))
        s = pb.SubscribersResponse
        if resp.status != s.SUCCESS:
            errors: dict[int, ControllerError] = {s.STREAM_NOT_FOUND: StreamNotFoundError(scope, stream)}
            raise _refuse(f"listSubscribers {scope}/{stream}", s.Status, resp.status, errors)
        return list(resp.subscribers)

    async def update_subscriber_stream_cut(
        self, subscriber: str, reader_group_id: uuid.UUID, generation: int, cut: StreamCut
    ) -> None:
        """Publish ``subscriber``'s position in ``cut``'s stream (for retention). Raises
        StreamNotFoundError, SubscriberNotFoundError, InvalidArgumentError, GenerationMismatchError."""
        request = pb.SubscriberStreamCut(
            subscriber=subscriber,
            generation=generation,
            readerGroupId=str(reader_group_id),
            streamCut=conv.stream_cut_to_proto(cut),
        )
        resp: pb.UpdateSubscriberStatus = await self._call("updateSubscriberStreamCut", request)
        s = pb.UpdateSubscriberStatus
        if resp.status != s.SUCCESS:
            errors: dict[int, ControllerError] = {
                s.STREAM_NOT_FOUND: StreamNotFoundError(cut.scope, cut.stream),
                s.SUBSCRIBER_NOT_FOUND: SubscriberNotFoundError(cut.scope, cut.stream, subscriber),
                s.STREAM_CUT_NOT_VALID: InvalidArgumentError(
                    f"stream cut of {cut.scope}/{cut.stream} for {subscriber!r} is not valid"
                ),
                s.GENERATION_MISMATCH: GenerationMismatchError(f"subscriber {subscriber!r}", generation),
            }
            raise _refuse(f"updateSubscriberStreamCut {subscriber!r}", s.Status, resp.status, errors)

    # ---- key-value tables -----------------------------------------------------------------------------------
    async def create_key_value_table(self, scope: str, kvt: str, config: KeyValueTableConfiguration) -> bool:
        """True if created, False if it existed (its configuration is left as it was). Raises ScopeNotFoundError,
        InvalidArgumentError (a bad name, a name whose segments are an existing stream's, a bad configuration)."""
        resp: pb.CreateKeyValueTableStatus = await self._call(
            "createKeyValueTable", kvt_config_to_proto(scope, kvt, config)
        )
        s = pb.CreateKeyValueTableStatus
        if resp.status in (s.SUCCESS, s.TABLE_EXISTS):
            return resp.status == s.SUCCESS
        errors: dict[int, ControllerError] = {
            s.SCOPE_NOT_FOUND: ScopeNotFoundError(scope),
            s.INVALID_TABLE_NAME: InvalidArgumentError(
                f"invalid key-value table name {kvt!r} (or a stream {kvt}_kvtable exists in scope {scope!r})"
            ),
        }
        raise _refuse(f"createKeyValueTable {scope}/{kvt}", s.Status, resp.status, errors)

    async def delete_key_value_table(self, scope: str, kvt: str) -> bool:
        """Delete the table and everything in it: True if deleted, False if there was no such table."""
        resp: pb.DeleteKVTableStatus = await self._call("deleteKeyValueTable", kvt_info_to_proto(scope, kvt))
        s = pb.DeleteKVTableStatus
        if resp.status in (s.SUCCESS, s.TABLE_NOT_FOUND):
            return resp.status == s.SUCCESS
        raise _refuse(f"deleteKeyValueTable {scope}/{kvt}", s.Status, resp.status)

    async def list_key_value_tables(self, scope: str) -> AsyncIterator[str]:
        """The tables of ``scope`` the caller may read, page by page, until the token stops moving."""
        token = ""
        while True:
            request = pb.KVTablesInScopeRequest(
                scope=conv.scope_info_to_proto(scope), continuationToken=pb.ContinuationToken(token=token)
            )
            resp: pb.KVTablesInScopeResponse = await self._call("listKeyValueTablesInScope", request)
            s = pb.KVTablesInScopeResponse
            if resp.status != s.SUCCESS:
                raise _refuse(
                    f"listKeyValueTablesInScope {scope!r}",
                    s.Status,
                    resp.status,
                    {s.SCOPE_NOT_FOUND: ScopeNotFoundError(scope)},
                )
            for info in resp.kvtables:
                yield info.kvtName
            if not resp.continuationToken.token or resp.continuationToken.token == token:
                return
            token = resp.continuationToken.token

    async def get_key_value_table_configuration(self, scope: str, kvt: str) -> KeyValueTableConfiguration:
        """Raises KeyValueTableNotFoundError."""
        resp: pb.KeyValueTableConfigResponse = await self._call(
            "getKeyValueTableConfiguration", kvt_info_to_proto(scope, kvt)
        )
        s = pb.KeyValueTableConfigResponse
        if resp.status != s.SUCCESS:
            raise _refuse(
                f"getKeyValueTableConfiguration {scope}/{kvt}",
                s.Status,
                resp.status,
                {s.TABLE_NOT_FOUND: KeyValueTableNotFoundError(scope, kvt)},
            )
        with _decoding("getKeyValueTableConfiguration"):
            return kvt_config_from_proto(resp.config, "KeyValueTableConfigResponse.config")

    async def get_current_segments_key_value_table(self, scope: str, kvt: str) -> list[SegmentRange]:
        """The table's segments (partitions) sorted by key range. Raises KeyValueTableNotFoundError."""
        resp: pb.SegmentRanges = await self._call(
            "getCurrentSegmentsKeyValueTable",
            kvt_info_to_proto(scope, kvt),
            not_found=KeyValueTableNotFoundError(scope, kvt),
        )
        with _decoding("getCurrentSegmentsKeyValueTable"):
            return conv.segment_ranges_from_proto(resp.segmentRanges, "SegmentRanges.segmentRanges")

    # ---- misc -----------------------------------------------------------------------------------------------
    async def get_delegation_token(self, scope: str, stream: str, write: bool = True) -> str:
        """A token for the segment stores on the stream: ``READ_UPDATE`` (``write``) or ``READ``; "" while the
        controller runs without authentication. Raises ControllerPermissionError if the caller may not."""
        access = pb.StreamInfo.READ_WRITE if write else pb.StreamInfo.READ
        request = pb.StreamInfo(scope=scope, stream=stream, accessOperation=access)
        resp: pb.DelegationToken = await self._call("getDelegationToken", request)
        return resp.delegationToken

    async def get_controller_to_bucket_mapping(self) -> dict[str, list[int]]:
        """Controller id (``host:port``) -> the buckets of periodic work it owns (segstore answers the same for
        both of ``Controller.proto``'s service types; ``controller.buckets``)."""
        request = pb.ControllerToBucketMappingRequest(serviceType=pb.ControllerToBucketMappingRequest.RetentionService)
        resp: pb.ControllerToBucketMappingResponse = await self._call("getControllerToBucketMapping", request)
        return {controller: sorted(ids.id) for controller, ids in resp.mapping.items()}

    async def get_controller_server_list(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every controller of the cluster."""
        resp: pb.ServerResponse = await self._call("getControllerServerList", pb.ServerRequest())
        with _decoding("getControllerServerList"):
            return [conv.node_uri_from_proto(n, "ServerResponse.nodeURI") for n in resp.nodeURI]
