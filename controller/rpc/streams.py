"""Scope, stream and segment RPCs of ``ControllerService``.

Each handler decodes its request (malformed -> ``INVALID_ARGUMENT``), calls the domain API
(:class:`controller.core.ControllerCore`) and encodes the answer, turning domain errors into the
status values ``Controller.proto`` defines for the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

from controller import errors
from controller.rpc.authentication import visible
from controller.rpc.handling import rpc
from controller_client.controller import proto_convert as cv
from controller_client.kvt.model import KVTABLE_SUFFIX
from controller_client.model import InvalidModelError, validate_scope_name, validate_stream_name
from controller_client.proto import Controller_pb2 as pb
from segstore_shared.auth import acl as resources

if TYPE_CHECKING:
    from controller.core import ControllerCore

Ctx: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
LIST_PAGE = 1000


class StreamRpcs:
    _core: ControllerCore

    # ---- scopes ---------------------------------------------------------------------------------------------
    @rpc
    async def createScope(self, request: pb.ScopeInfo, context: Ctx) -> pb.CreateScopeStatus:
        try:
            scope = validate_scope_name(request.scope)
        except InvalidModelError:
            return pb.CreateScopeStatus(status=pb.CreateScopeStatus.INVALID_SCOPE_NAME)
        created = await self._core.create_scope(scope)
        return pb.CreateScopeStatus(
            status=pb.CreateScopeStatus.SUCCESS if created else pb.CreateScopeStatus.SCOPE_EXISTS
        )

    @rpc
    async def deleteScope(self, request: pb.ScopeInfo, context: Ctx) -> pb.DeleteScopeStatus:
        return await self._delete_scope(request, recursive=False)

    @rpc
    async def deleteScopeRecursive(self, request: pb.ScopeInfo, context: Ctx) -> pb.DeleteScopeStatus:
        return await self._delete_scope(request, recursive=True)

    async def _delete_scope(self, request: pb.ScopeInfo, recursive: bool) -> pb.DeleteScopeStatus:
        scope = cv.scope_info_from_proto(request)
        try:
            await self._core.delete_scope(scope, recursive=recursive)
        except errors.ScopeNotFoundError:
            return pb.DeleteScopeStatus(status=pb.DeleteScopeStatus.SCOPE_NOT_FOUND)
        except errors.ScopeNotEmptyError:
            return pb.DeleteScopeStatus(status=pb.DeleteScopeStatus.SCOPE_NOT_EMPTY)
        return pb.DeleteScopeStatus(status=pb.DeleteScopeStatus.SUCCESS)

    @rpc
    async def checkScopeExists(self, request: pb.ScopeInfo, context: Ctx) -> pb.ExistsResponse:
        return pb.ExistsResponse(exists=await self._core.scope_exists(cv.scope_info_from_proto(request)))

    @rpc
    async def listScopes(self, request: pb.ScopesRequest, context: Ctx) -> pb.ScopesResponse:
        names, token = await self._core.list_scopes(request.continuationToken.token, LIST_PAGE)
        names = visible(names, resources.scope)
        return pb.ScopesResponse(scopes=names, continuationToken=pb.ContinuationToken(token=token))

    # ---- streams --------------------------------------------------------------------------------------------
    @rpc
    async def createStream(self, request: pb.StreamConfig, context: Ctx) -> pb.CreateStreamStatus:
        scope, stream, config = cv.stream_config_from_proto(request)
        try:
            validate_stream_name(stream, internal=True)
        except InvalidModelError:
            return pb.CreateStreamStatus(status=pb.CreateStreamStatus.INVALID_STREAM_NAME)
        if stream.endswith(KVTABLE_SUFFIX):  # a key-value table's segments are named so (controller.kvt)
            return pb.CreateStreamStatus(status=pb.CreateStreamStatus.INVALID_STREAM_NAME)
        try:
            created = await self._core.create_stream(scope, stream, config)
        except errors.ScopeNotFoundError:
            return pb.CreateStreamStatus(status=pb.CreateStreamStatus.SCOPE_NOT_FOUND)
        status = pb.CreateStreamStatus.SUCCESS if created else pb.CreateStreamStatus.STREAM_EXISTS
        return pb.CreateStreamStatus(status=status)

    async def _update(self, call: object) -> pb.UpdateStreamStatus:
        try:
            await call  # type: ignore[misc]
        except errors.ScopeNotFoundError:
            return pb.UpdateStreamStatus(status=pb.UpdateStreamStatus.SCOPE_NOT_FOUND)
        except errors.StreamNotFoundError:
            return pb.UpdateStreamStatus(status=pb.UpdateStreamStatus.STREAM_NOT_FOUND)
        except errors.StreamSealedError:
            return pb.UpdateStreamStatus(status=pb.UpdateStreamStatus.STREAM_SEALED)
        return pb.UpdateStreamStatus(status=pb.UpdateStreamStatus.SUCCESS)

    @rpc
    async def updateStream(self, request: pb.StreamConfig, context: Ctx) -> pb.UpdateStreamStatus:
        scope, stream, config = cv.stream_config_from_proto(request)
        return await self._update(self._core.update_stream(scope, stream, config))

    @rpc
    async def truncateStream(self, request: pb.StreamCut, context: Ctx) -> pb.UpdateStreamStatus:
        cut = cv.stream_cut_from_proto(request)
        return await self._update(self._core.truncate_stream(cut))

    @rpc
    async def sealStream(self, request: pb.StreamInfo, context: Ctx) -> pb.UpdateStreamStatus:
        scope, stream = cv.stream_info_from_proto(request)
        try:
            await self._core.seal_stream(scope, stream)
        except errors.ScopeNotFoundError:
            return pb.UpdateStreamStatus(status=pb.UpdateStreamStatus.SCOPE_NOT_FOUND)
        except errors.StreamNotFoundError:
            return pb.UpdateStreamStatus(status=pb.UpdateStreamStatus.STREAM_NOT_FOUND)
        return pb.UpdateStreamStatus(status=pb.UpdateStreamStatus.SUCCESS)

    @rpc
    async def deleteStream(self, request: pb.StreamInfo, context: Ctx) -> pb.DeleteStreamStatus:
        scope, stream = cv.stream_info_from_proto(request)
        try:
            await self._core.delete_stream(scope, stream)
        except (errors.StreamNotFoundError, errors.ScopeNotFoundError):
            return pb.DeleteStreamStatus(status=pb.DeleteStreamStatus.STREAM_NOT_FOUND)
        except errors.StreamNotSealedError:
            return pb.DeleteStreamStatus(status=pb.DeleteStreamStatus.STREAM_NOT_SEALED)
        return pb.DeleteStreamStatus(status=pb.DeleteStreamStatus.SUCCESS)

    @rpc
    async def checkStreamExists(self, request: pb.StreamInfo, context: Ctx) -> pb.ExistsResponse:
        scope, stream = cv.stream_info_from_proto(request)
        return pb.ExistsResponse(exists=await self._core.stream_exists(scope, stream))

    @rpc
    async def getStreamConfiguration(self, request: pb.StreamInfo, context: Ctx) -> pb.StreamConfig:
        scope, stream = cv.stream_info_from_proto(request)
        config = await self._core.get_stream_configuration(scope, stream)
        return cv.stream_config_to_proto(scope, stream, config)

    @rpc
    async def listStreamsInScope(self, request: pb.StreamsInScopeRequest, context: Ctx) -> pb.StreamsInScopeResponse:
        scope = cv.scope_info_from_proto(request.scope)
        return await self._list_streams(scope, request.continuationToken.token, None)

    @rpc
    async def listStreamsInScopeForTag(
        self, request: pb.StreamsInScopeWithTagRequest, context: Ctx
    ) -> pb.StreamsInScopeResponse:
        scope = cv.scope_info_from_proto(request.scope)
        if not request.tag:
            raise InvalidModelError("StreamsInScopeWithTagRequest.tag: must not be empty")
        return await self._list_streams(scope, request.continuationToken.token, request.tag)

    async def _list_streams(self, scope: str, token: str, tag: str | None) -> pb.StreamsInScopeResponse:
        try:
            names, next_token = await self._core.list_streams(scope, token, LIST_PAGE, tag)
        except errors.ScopeNotFoundError:
            return pb.StreamsInScopeResponse(status=pb.StreamsInScopeResponse.SCOPE_NOT_FOUND)
        names = visible(names, lambda name: resources.stream(scope, name))
        return pb.StreamsInScopeResponse(
            streams=[cv.stream_info_to_proto(scope, name) for name in names],
            continuationToken=pb.ContinuationToken(token=next_token),
            status=pb.StreamsInScopeResponse.SUCCESS,
        )

    # ---- segments -------------------------------------------------------------------------------------------
    @rpc
    async def getCurrentSegments(self, request: pb.StreamInfo, context: Ctx) -> pb.SegmentRanges:
        scope, stream = cv.stream_info_from_proto(request)
        segments = await self._core.current_segments(scope, stream)
        return pb.SegmentRanges(segmentRanges=[cv.segment_range_to_proto(scope, stream, s) for s in segments])

    @rpc
    async def getEpochSegments(self, request: pb.GetEpochSegmentsRequest, context: Ctx) -> pb.SegmentRanges:
        scope, stream = cv.stream_info_from_proto(request.streamInfo)
        if request.epoch < 0:
            raise InvalidModelError(f"GetEpochSegmentsRequest.epoch: must be >= 0, not {request.epoch}")
        segments = await self._core.epoch_segments(scope, stream, request.epoch)
        return pb.SegmentRanges(segmentRanges=[cv.segment_range_to_proto(scope, stream, s) for s in segments])

    @rpc
    async def getSegments(self, request: pb.GetSegmentsRequest, context: Ctx) -> pb.SegmentsAtTime:
        scope, stream = cv.stream_info_from_proto(request.streamInfo)
        positions = await self._core.segments_at_time(scope, stream, request.timestamp)
        return pb.SegmentsAtTime(
            segments=[
                pb.SegmentsAtTime.SegmentLocation(segmentId=cv.segment_id_to_proto(scope, stream, s), offset=o)
                for s, o in sorted(positions.items())
            ]
        )

    @rpc
    async def getSegmentsImmediatelyFollowing(self, request: pb.SegmentId, context: Ctx) -> pb.SuccessorResponse:
        scope, stream, segment = cv.segment_id_from_proto(request)
        successors = await self._core.successors(scope, stream, segment)
        return pb.SuccessorResponse(
            segments=[
                pb.SuccessorResponse.SegmentEntry(
                    segment=cv.segment_range_to_proto(scope, stream, successor), value=sorted(predecessors)
                )
                for successor, predecessors in sorted(successors.items())
            ]
        )

    @rpc
    async def getSegmentsImmediatlyFollowing(self, request: pb.SegmentId, context: Ctx) -> pb.SuccessorResponse:
        """The old, misspelled name of the same call (kept by Pravega for old clients)."""
        return await self.getSegmentsImmediatelyFollowing(request, context)

    @rpc
    async def getSegmentsBetween(self, request: pb.StreamCutRange, context: Ctx) -> pb.StreamCutRangeResponse:
        from_cut, to_cut = cv.stream_cut_range_from_proto(request)
        segments = await self._core.segments_between(from_cut, to_cut)
        scope, stream = from_cut.scope, from_cut.stream
        return pb.StreamCutRangeResponse(segments=[cv.segment_id_to_proto(scope, stream, s) for s in sorted(segments)])

    @rpc
    async def scale(self, request: pb.ScaleRequest, context: Ctx) -> pb.ScaleResponse:
        req = cv.scale_request_from_proto(request)
        try:
            segments, epoch = await self._core.scale(
                req.scope, req.stream, list(req.sealed_segments), list(req.new_ranges), req.scale_timestamp_ms
            )
        except (errors.ScalePreconditionError, errors.StreamSealedError, errors.StreamNotFoundError):
            return pb.ScaleResponse(status=pb.ScaleResponse.PRECONDITION_FAILED)
        return pb.ScaleResponse(
            status=pb.ScaleResponse.STARTED,
            segments=[cv.segment_range_to_proto(req.scope, req.stream, s) for s in segments],
            epoch=epoch,
        )

    @rpc
    async def checkScale(self, request: pb.ScaleStatusRequest, context: Ctx) -> pb.ScaleStatusResponse:
        scope, stream = cv.stream_info_from_proto(request.streamInfo)
        status = await self._core.check_scale(scope, stream, request.epoch)
        return pb.ScaleStatusResponse(status=pb.ScaleStatusResponse.ScaleStatus.Value(status))

    @rpc
    async def getURI(self, request: pb.SegmentId, context: Ctx) -> pb.NodeUri:
        scope, stream, segment = cv.segment_id_from_proto(request)
        host, port = await self._core.segment_uri(scope, stream, segment)
        return cv.node_uri_to_proto(host, port)

    @rpc
    async def isSegmentValid(self, request: pb.SegmentId, context: Ctx) -> pb.SegmentValidityResponse:
        scope, stream, segment = cv.segment_id_from_proto(request)
        return pb.SegmentValidityResponse(response=await self._core.is_segment_valid(scope, stream, segment))

    @rpc
    async def isStreamCutValid(self, request: pb.StreamCut, context: Ctx) -> pb.StreamCutValidityResponse:
        cut = cv.stream_cut_from_proto(request)
        return pb.StreamCutValidityResponse(response=await self._core.is_stream_cut_valid(cut))
