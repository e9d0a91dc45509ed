"""Transaction, reader group, subscriber, writer-mark and cluster RPCs of ``ControllerService`` (the key-value
table RPCs are in :mod:`controller.rpc.kvts`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

from controller import errors
from controller.metadata import WriterMarkStatus
from controller.rpc.handling import rpc
from controller_client.controller import proto_convert as cv
from controller_client.model import InvalidModelError, TxnState
from controller_client.proto import Controller_pb2 as pb

if TYPE_CHECKING:
    from controller.core import ControllerCore

Ctx: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"

_PING_FOR_STATE = {
    TxnState.COMMITTING: pb.PingTxnStatus.COMMITTED,
    TxnState.COMMITTED: pb.PingTxnStatus.COMMITTED,
    TxnState.ABORTING: pb.PingTxnStatus.ABORTED,
    TxnState.ABORTED: pb.PingTxnStatus.ABORTED,
}


class TxnRpcs:
    _core: ControllerCore

    # ---- transactions ---------------------------------------------------------------------------------------
    @rpc
    async def createTransaction(self, request: pb.CreateTxnRequest, context: Ctx) -> pb.CreateTxnResponse:
        scope, stream = cv.stream_info_from_proto(request.streamInfo)
        if request.lease < 0:
            raise InvalidModelError(f"CreateTxnRequest.lease: must be >= 0, not {request.lease}")
        txn_id, segments = await self._core.create_transaction(scope, stream, request.lease)
        return pb.CreateTxnResponse(
            txnId=cv.txn_id_to_proto(txn_id),
            activeSegments=[cv.segment_range_to_proto(scope, stream, s) for s in segments],
        )

    async def _end(self, request: pb.TxnRequest, commit: bool) -> pb.TxnStatus:
        scope, stream = cv.stream_info_from_proto(request.streamInfo)
        txn_id = cv.required_txn_id(request, "TxnRequest")
        try:
            if commit:
                noted = bool(request.writerId) and request.timestamp > 0  # Pravega sends Long.MIN_VALUE for none
                writer, time_ms = (request.writerId, request.timestamp) if noted else ("", -1)
                await self._core.commit_transaction(scope, stream, txn_id, writer, time_ms)
            else:
                await self._core.abort_transaction(scope, stream, txn_id)
        except (errors.StreamNotFoundError, errors.ScopeNotFoundError):
            return pb.TxnStatus(status=pb.TxnStatus.STREAM_NOT_FOUND)
        except errors.TxnNotFoundError:
            return pb.TxnStatus(status=pb.TxnStatus.TRANSACTION_NOT_FOUND)
        except errors.TxnStateError:
            return pb.TxnStatus(status=pb.TxnStatus.FAILURE)
        return pb.TxnStatus(status=pb.TxnStatus.SUCCESS)

    @rpc
    async def commitTransaction(self, request: pb.TxnRequest, context: Ctx) -> pb.TxnStatus:
        return await self._end(request, commit=True)

    @rpc
    async def abortTransaction(self, request: pb.TxnRequest, context: Ctx) -> pb.TxnStatus:
        return await self._end(request, commit=False)

    @rpc
    async def pingTransaction(self, request: pb.PingTxnRequest, context: Ctx) -> pb.PingTxnStatus:
        scope, stream = cv.stream_info_from_proto(request.streamInfo)
        txn_id = cv.required_txn_id(request, "PingTxnRequest")
        if request.lease <= 0:
            raise InvalidModelError(f"PingTxnRequest.lease: must be positive, not {request.lease}")
        try:
            state = await self._core.ping_transaction(scope, stream, txn_id, request.lease)
        except errors.LeaseTooLargeError:
            return pb.PingTxnStatus(status=pb.PingTxnStatus.LEASE_TOO_LARGE)
        except (errors.TxnNotFoundError, errors.StreamNotFoundError, errors.ScopeNotFoundError):
            return pb.PingTxnStatus(status=pb.PingTxnStatus.UNKNOWN)
        return pb.PingTxnStatus(status=_PING_FOR_STATE.get(state, pb.PingTxnStatus.OK))

    @rpc
    async def checkTransactionState(self, request: pb.TxnRequest, context: Ctx) -> pb.TxnState:
        scope, stream = cv.stream_info_from_proto(request.streamInfo)
        txn_id = cv.required_txn_id(request, "TxnRequest")
        return cv.txn_state_to_proto(await self._core.transaction_state(scope, stream, txn_id))

    @rpc
    async def listCompletedTransactions(
        self, request: pb.ListCompletedTxnRequest, context: Ctx
    ) -> pb.ListCompletedTxnResponse:
        scope, stream = cv.stream_info_from_proto(request.streamInfo)
        completed = await self._core.completed_transactions(scope, stream)
        return pb.ListCompletedTxnResponse(
            response=[
                pb.TxnResponse(
                    txnId=cv.txn_id_to_proto(txn_id),
                    status=pb.TxnResponse.COMMITTED if state == TxnState.COMMITTED else pb.TxnResponse.ABORTED,
                )
                for txn_id, state in completed
            ]
        )

    # ---- reader groups and subscribers ----------------------------------------------------------------------
    @rpc
    async def createReaderGroup(
        self, request: pb.ReaderGroupConfiguration, context: Ctx
    ) -> pb.CreateReaderGroupResponse:
        if not request.readerGroupName or "/" in request.readerGroupName:
            return pb.CreateReaderGroupResponse(status=pb.CreateReaderGroupResponse.INVALID_RG_NAME)
        config = cv.reader_group_config_from_proto(request)
        try:
            stored = await self._core.create_reader_group(config)
        except errors.ScopeNotFoundError:
            return pb.CreateReaderGroupResponse(status=pb.CreateReaderGroupResponse.SCOPE_NOT_FOUND)
        return pb.CreateReaderGroupResponse(
            status=pb.CreateReaderGroupResponse.SUCCESS, config=cv.reader_group_config_to_proto(stored)
        )

    @rpc
    async def getReaderGroupConfig(self, request: pb.ReaderGroupInfo, context: Ctx) -> pb.ReaderGroupConfigResponse:
        scope, name, _, _ = cv.reader_group_info_from_proto(request)
        try:
            config = await self._core.get_reader_group(scope, name)
        except (errors.ReaderGroupNotFoundError, errors.ScopeNotFoundError):
            return pb.ReaderGroupConfigResponse(status=pb.ReaderGroupConfigResponse.RG_NOT_FOUND)
        return pb.ReaderGroupConfigResponse(
            status=pb.ReaderGroupConfigResponse.SUCCESS, config=cv.reader_group_config_to_proto(config)
        )

    @rpc
    async def updateReaderGroup(
        self, request: pb.ReaderGroupConfiguration, context: Ctx
    ) -> pb.UpdateReaderGroupResponse:
        config = cv.reader_group_config_from_proto(request)
        try:
            generation = await self._core.update_reader_group(config)
        except (errors.ReaderGroupNotFoundError, errors.ScopeNotFoundError):
            return pb.UpdateReaderGroupResponse(status=pb.UpdateReaderGroupResponse.RG_NOT_FOUND)
        except errors.ReaderGroupConflictError:
            return pb.UpdateReaderGroupResponse(status=pb.UpdateReaderGroupResponse.INVALID_CONFIG)
        return pb.UpdateReaderGroupResponse(status=pb.UpdateReaderGroupResponse.SUCCESS, generation=generation)

    @rpc
    async def deleteReaderGroup(self, request: pb.ReaderGroupInfo, context: Ctx) -> pb.DeleteReaderGroupStatus:
        scope, name, group_id, _ = cv.reader_group_info_from_proto(request)
        try:
            await self._core.delete_reader_group(scope, name, group_id)
        except (errors.ReaderGroupNotFoundError, errors.ScopeNotFoundError):
            return pb.DeleteReaderGroupStatus(status=pb.DeleteReaderGroupStatus.RG_NOT_FOUND)
        return pb.DeleteReaderGroupStatus(status=pb.DeleteReaderGroupStatus.SUCCESS)

    @rpc
    async def listSubscribers(self, request: pb.StreamInfo, context: Ctx) -> pb.SubscribersResponse:
        scope, stream = cv.stream_info_from_proto(request)
        try:
            names = await self._core.list_subscribers(scope, stream)
        except (errors.StreamNotFoundError, errors.ScopeNotFoundError):
            return pb.SubscribersResponse(status=pb.SubscribersResponse.STREAM_NOT_FOUND)
        return pb.SubscribersResponse(subscribers=names, status=pb.SubscribersResponse.SUCCESS)

    @rpc
    async def updateSubscriberStreamCut(
        self, request: pb.SubscriberStreamCut, context: Ctx
    ) -> pb.UpdateSubscriberStatus:
        if not request.subscriber:
            raise InvalidModelError("SubscriberStreamCut.subscriber: must not be empty")
        cut = cv.stream_cut_from_proto(request.streamCut, "SubscriberStreamCut.streamCut")
        status = pb.UpdateSubscriberStatus
        try:
            await self._core.update_subscriber_stream_cut(
                cut, request.subscriber, request.readerGroupId, request.generation
            )
        except (errors.StreamNotFoundError, errors.ScopeNotFoundError):
            return status(status=status.STREAM_NOT_FOUND)
        except errors.SubscriberNotFoundError:
            return status(status=status.SUBSCRIBER_NOT_FOUND)
        except errors.InvalidStreamCutError:
            return status(status=status.STREAM_CUT_NOT_VALID)
        except errors.ReaderGroupConflictError:
            return status(status=status.GENERATION_MISMATCH)
        return status(status=status.SUCCESS)

    # ---- writers, tokens, cluster ---------------------------------------------------------------------------
    @rpc
    async def noteTimestampFromWriter(self, request: pb.TimestampFromWriter, context: Ctx) -> pb.TimestampResponse:
        if not request.writer:
            raise InvalidModelError("TimestampFromWriter.writer: must not be empty")
        cut = cv.stream_cut_from_proto(request.position, "TimestampFromWriter.position")
        try:
            status = await self._core.note_writer_mark(request.writer, cut, request.timestamp)
        except errors.InvalidStreamCutError:
            return pb.TimestampResponse(result=pb.TimestampResponse.INVALID_POSITION)
        results = {
            WriterMarkStatus.SUCCESS: pb.TimestampResponse.SUCCESS,
            WriterMarkStatus.INVALID_TIME: pb.TimestampResponse.INVALID_TIME,
            WriterMarkStatus.INVALID_POSITION: pb.TimestampResponse.INVALID_POSITION,
        }
        return pb.TimestampResponse(result=results[status])

    @rpc
    async def removeWriter(self, request: pb.RemoveWriterRequest, context: Ctx) -> pb.RemoveWriterResponse:
        scope, stream = cv.stream_info_from_proto(request.stream, "RemoveWriterRequest.stream")
        if not request.writer:
            raise InvalidModelError("RemoveWriterRequest.writer: must not be empty")
        try:
            known = await self._core.remove_writer(scope, stream, request.writer)
        except (errors.StreamNotFoundError, errors.ScopeNotFoundError):
            return pb.RemoveWriterResponse(result=pb.RemoveWriterResponse.STREAM_DOES_NOT_EXIST)
        result = pb.RemoveWriterResponse.SUCCESS if known else pb.RemoveWriterResponse.UNKNOWN_WRITER
        return pb.RemoveWriterResponse(result=result)

    @rpc
    async def getDelegationToken(self, request: pb.StreamInfo, context: Ctx) -> pb.DelegationToken:
        scope, stream = cv.stream_info_from_proto(request)
        auth = getattr(self, "_auth", None)
        if auth is None:
            return pb.DelegationToken(delegationToken="")  # authentication is off: an empty token
        return pb.DelegationToken(delegationToken=auth.delegation_token(scope, stream, request.accessOperation))

    @rpc
    async def getControllerServerList(self, request: pb.ServerRequest, context: Ctx) -> pb.ServerResponse:
        endpoints = await self._core.controller_endpoints()
        return pb.ServerResponse(nodeURI=[cv.node_uri_to_proto(host, port) for host, port in endpoints])

    @rpc
    async def getControllerToBucketMapping(
        self, request: pb.ControllerToBucketMappingRequest, context: Ctx
    ) -> pb.ControllerToBucketMappingResponse:
        """Which controller should own which buckets (one bucket set serves both service types here)."""
        assignment = await self._core.bucket_assignment()
        return pb.ControllerToBucketMappingResponse(
            mapping={controller: pb.BucketIds(id=ids) for controller, ids in assignment.items()}
        )
