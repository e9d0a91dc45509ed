"""Key-value table RPCs of ``ControllerService`` (Pravega's ``ControllerServiceImpl``): create, list, configuration,
current segments, delete.

Answers, as Pravega's: ``createKeyValueTable`` -> ``SUCCESS`` (created), ``TABLE_EXISTS``, ``SCOPE_NOT_FOUND`` (also
for a scope name that cannot exist), ``INVALID_TABLE_NAME`` (a bad name, or one whose table segments would be those
of an existing stream ``<K>_kvtable``); a bad configuration (partition count outside [1, 1024], a primary key
length < 1, a secondary key length < 0, key lengths summing over 256, a negative rollover size) is
``INVALID_ARGUMENT`` before anything is written. ``deleteKeyValueTable`` -> ``SUCCESS`` or ``TABLE_NOT_FOUND``;
``getKeyValueTableConfiguration`` -> ``SUCCESS`` or ``TABLE_NOT_FOUND``; ``listKeyValueTablesInScope`` -> a page
of names the caller may READ and the token after it, or ``SCOPE_NOT_FOUND``; ``getCurrentSegmentsKeyValueTable``
has no status: a missing table is gRPC ``NOT_FOUND``.

``getCurrentSegmentsKeyValueTable`` also answers a delegation token (Pravega does) on the stream ``<K>_kvtable``
(``prn::/scope:S/stream:K_kvtable``), the claim the segment stores match against the table's segments
``S/K_kvtable/...``: READ_UPDATE for a caller allowed it on the table, else READ (the call needs only READ here,
READ_UPDATE in Pravega, so that readers can open a table). Pravega signs ``prn::/scope:S/key-value-table:K``
there, which no segment store matches (pravega/pravega#5374). The segment ranges name the table
(``SegmentId.streamInfo.stream`` is ``K``), as Pravega's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

import grpc

from controller import errors
from controller.kvt.errors import KvtNameTakenError, KvtNotFoundError
from controller.rpc.authentication import caller, visible
from controller.rpc.handling import rpc
from controller_client.controller import proto_convert as cv
from controller_client.kvt.model import table_segment_stream, validate_kvt_name
from controller_client.kvt.proto import kvt_config_from_proto, kvt_config_to_proto
from controller_client.model import InvalidModelError, validate_scope_name
from controller_client.proto import Controller_pb2 as pb
from segstore_shared.auth import acl as resources
from segstore_shared.auth.acl import Permission

if TYPE_CHECKING:
    from controller.core import ControllerCore

Ctx: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
LIST_PAGE = 1000


def _names(scope: str, kvt: str) -> tuple[str, str] | None:
    """``(scope, kvt)`` if both are valid names, else None (no such table can exist)."""
    try:
        return validate_scope_name(scope), validate_kvt_name(kvt)
    except InvalidModelError:
        return None


async def _not_found(context: Ctx, error: KvtNotFoundError) -> NoReturn:
    await context.abort(grpc.StatusCode.NOT_FOUND, f"getCurrentSegmentsKeyValueTable: {error}")
    raise AssertionError("unreachable") from error  # abort raises


def _access(scope: str, kvt: str) -> int:
    """What the token of ``getCurrentSegmentsKeyValueTable`` carries: READ_UPDATE for a caller allowed it on the
    table, else READ (the call itself needs READ)."""
    who = caller.get()
    table = resources.key_value_table(scope, kvt)
    writes = who is None or all(
        acl.allows(table, Permission.READ_UPDATE) for acl in (who.acl, who.owner_acl) if acl is not None
    )
    return pb.StreamInfo.READ_WRITE if writes else pb.StreamInfo.READ


class KvtRpcs:
    _core: ControllerCore

    @rpc
    async def createKeyValueTable(self, request: pb.KeyValueTableConfig, context: Ctx) -> pb.CreateKeyValueTableStatus:
        status = pb.CreateKeyValueTableStatus
        config = kvt_config_from_proto(request)
        try:
            kvt = validate_kvt_name(request.kvtName)
        except InvalidModelError:
            return status(status=status.INVALID_TABLE_NAME)
        try:
            scope = validate_scope_name(request.scope)
        except InvalidModelError:
            return status(status=status.SCOPE_NOT_FOUND)
        try:
            created = await self._core.create_key_value_table(scope, kvt, config)
        except errors.ScopeNotFoundError:
            return status(status=status.SCOPE_NOT_FOUND)
        except KvtNameTakenError:
            return status(status=status.INVALID_TABLE_NAME)
        return status(status=status.SUCCESS if created else status.TABLE_EXISTS)

    @rpc
    async def getCurrentSegmentsKeyValueTable(self, request: pb.KeyValueTableInfo, context: Ctx) -> pb.SegmentRanges:
        names = _names(request.scope, request.kvtName)
        if names is None:
            await _not_found(context, KvtNotFoundError(request.scope, request.kvtName))
        scope, kvt = names
        try:
            segments = await self._core.key_value_table_segments(scope, kvt)
        except KvtNotFoundError as error:
            await _not_found(context, error)
        auth = getattr(self, "_auth", None)
        token = "" if auth is None else auth.delegation_token(scope, table_segment_stream(kvt), _access(scope, kvt))
        return pb.SegmentRanges(
            segmentRanges=[cv.segment_range_to_proto(scope, kvt, s) for s in segments], delegationToken=token
        )

    @rpc
    async def listKeyValueTablesInScope(
        self, request: pb.KVTablesInScopeRequest, context: Ctx
    ) -> pb.KVTablesInScopeResponse:
        reply = pb.KVTablesInScopeResponse
        try:
            scope = validate_scope_name(request.scope.scope)
            names, token = await self._core.list_key_value_tables(scope, request.continuationToken.token, LIST_PAGE)
        except (InvalidModelError, errors.ScopeNotFoundError):
            return reply(status=reply.SCOPE_NOT_FOUND)
        names = visible(names, lambda name: resources.key_value_table(scope, name))
        return reply(
            kvtables=[pb.KeyValueTableInfo(scope=scope, kvtName=name) for name in names],
            continuationToken=pb.ContinuationToken(token=token),
            status=reply.SUCCESS,
        )

    @rpc
    async def getKeyValueTableConfiguration(
        self, request: pb.KeyValueTableInfo, context: Ctx
    ) -> pb.KeyValueTableConfigResponse:
        reply = pb.KeyValueTableConfigResponse
        names = _names(request.scope, request.kvtName)
        if names is None:
            return reply(status=reply.TABLE_NOT_FOUND)
        scope, kvt = names
        try:
            config = await self._core.key_value_table_configuration(scope, kvt)
        except KvtNotFoundError:
            return reply(status=reply.TABLE_NOT_FOUND)
        return reply(status=reply.SUCCESS, config=kvt_config_to_proto(scope, kvt, config))

    @rpc
    async def deleteKeyValueTable(self, request: pb.KeyValueTableInfo, context: Ctx) -> pb.DeleteKVTableStatus:
        status = pb.DeleteKVTableStatus
        names = _names(request.scope, request.kvtName)
        if names is None:
            return status(status=status.TABLE_NOT_FOUND)
        try:
            await self._core.delete_key_value_table(*names)
        except KvtNotFoundError:
            return status(status=status.TABLE_NOT_FOUND)
        return status(status=status.SUCCESS)
