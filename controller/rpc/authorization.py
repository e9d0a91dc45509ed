"""What each Controller.proto RPC needs, on which resource: Pravega's table (``ControllerServiceImpl``).

:func:`needs` maps an RPC and its request to the ``(resource, permission)`` pairs the caller's ACL must grant
(``segstore_shared.auth.acl``). Resources come from the request as sent, before any validation, so a refused
caller learns nothing about what exists. Listing RPCs need READ on the scope (or root) here and filter their
results per item in the servicer; ``getDelegationToken`` needs what its access operation asks for.

Deliberate differences from Pravega: ``getDelegationToken`` with access operation ``ANY`` is refused as an
invalid argument (Pravega answers INTERNAL); ``isStreamCutValid`` needs READ on the stream (Pravega checks
nothing); ``getCurrentSegmentsKeyValueTable`` needs READ on the table, not READ_UPDATE, and its token grants
READ_UPDATE only to a caller who has it (so a reader of a table can open it, as a reader of a stream can ask for
its segments with access NONE). ``getControllerServerList`` needs nothing, as in Pravega (clients call it before
they log in).

The table segments of key-value table ``K`` are the segments of stream ``K_kvtable`` (``scope/K_kvtable/<n>...``):
clients ask ``getURI`` and ``getDelegationToken`` for that stream. A stream named ``K_kvtable`` (``K`` a valid table
name) is therefore :class:`AnyOf` the stream itself (the Rust client's tables, e.g. a reader group's state) and
the key-value table ``prn::/scope:S/key-value-table:K`` (and the reader group ``K``, whose state it may be, below):
any one granting the permission is enough, so a user
allowed on a table can reach its segments (with a token on ``prn::/scope:S/stream:K_kvtable``, the claim the
segment stores match; Pravega's ``key-value-table`` claim matches nothing there, pravega/pravega#5374).

Reader groups (segstore's, stricter than Pravega's default): creating, reconfiguring or deleting group ``G``
(``createReaderGroup``, ``updateReaderGroup``, ``deleteReaderGroup``) needs READ_UPDATE on the group,
``prn::/scope:S/reader-group:G``; reading its configuration needs READ on it. Pravega asks READ (or, with
``controller.security.rgWritesWithReadPermEnabled`` off, READ_UPDATE) on the *scope*, so any reader of a scope
could delete every group in it. The group's state is kept by its readers (their positions, checkpoints), as in
Pravega: its state streams (``_RGG``, Java's) and table (``G_kvtable``, the official Rust client's and ours) may
be read and written -- :class:`Either` READ_UPDATE on the state itself or READ on the group -- by anyone allowed
to READ the group (Pravega's ``StreamAuthParams.requiredPermissionForWrites``). A key-value table and a reader
group of one name in one scope share that table segment, so READ on group ``G`` also reaches table ``G``'s
segments: do not name them alike.

Below :mod:`controller.rpc.authentication`: imports only the admin request codec
(:mod:`controller.rpc.admin_requests`), the client library's model and generated protocol, and
:mod:`segstore_shared.auth` (no RPC, no domain API).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from controller.rpc.admin_requests import decode_request, scope_of, stream_of
from controller_client.kvt.model import kvt_of_stream
from controller_client.model import InvalidModelError
from controller_client.proto import Controller_pb2 as pb
from segstore_shared.auth import acl
from segstore_shared.auth.acl import Acl, Permission


class AnyOf(tuple[str, ...]):
    """Resources any one of which granting the permission is enough."""

    def __str__(self) -> str:
        return " or ".join(self)


Need = tuple[str | AnyOf, Permission]


class Either(tuple[Need, ...]):
    """Needs any one of which is enough (a reader group's state: READ_UPDATE on it, or READ on the group)."""

    def __str__(self) -> str:
        return " or ".join(describe(need) for need in self)


Required = Need | Either


def describe(need: Required) -> str:
    """``PERMISSION on resource`` (for :class:`Either`: its options joined by ``or``)."""
    if isinstance(need, Either):
        return str(need)
    resource, permission = need
    return f"{permission.name} on {resource}"


READ, READ_UPDATE = Permission.READ, Permission.READ_UPDATE
_ACCESS = pb.StreamInfo.AccessOperation


def allows(granted: Acl, resource: str | AnyOf, permission: Permission) -> bool:
    """Whether ``granted`` gives ``permission`` on ``resource`` (on one of them, for :class:`AnyOf`)."""
    options = resource if isinstance(resource, AnyOf) else (resource,)
    return any(granted.allows(option, permission) for option in options)


def satisfied(granted: Acl, need: Required) -> bool:
    """Whether ``granted`` meets ``need`` (one of its options, for :class:`Either`)."""
    options = need if isinstance(need, Either) else (need,)
    return any(allows(granted, resource, permission) for resource, permission in options)


def _stream(info: Any) -> str | AnyOf:
    kvt = kvt_of_stream(info.stream)
    if kvt is not None:  # a key-value table's segments, a reader group's state (or a stream of that name)
        return AnyOf(
            (
                acl.stream(info.scope, info.stream),
                acl.key_value_table(info.scope, kvt),
                acl.reader_group(info.scope, kvt),
            )
        )
    return acl.stream(info.scope, info.stream)


def _group_of_state(info: Any) -> str | None:
    """The reader group whose state the stream ``info`` may be (``_RGG`` or ``G_kvtable``), else None."""
    if info.stream.startswith("_RG"):
        return acl.stream(info.scope, info.stream)  # prn::/scope:S/reader-group:G, as Pravega maps it
    kvt = kvt_of_stream(info.stream)
    return None if kvt is None else acl.reader_group(info.scope, kvt)


def _access(info: Any, permission: Permission) -> Required:
    """``permission`` on the stream of ``info``; a write to a reader group's state: READ on the group will do."""
    resource = _stream(info)
    group = _group_of_state(info) if permission is READ_UPDATE else None
    if group is None:
        return (resource, permission)
    if resource == group:  # _RGG: the group itself
        return (group, READ)
    if isinstance(resource, AnyOf):  # G_kvtable: READ_UPDATE on the table or the stream, or READ on the group
        resource = AnyOf(option for option in resource if option != group)
    return Either(((resource, READ_UPDATE), (group, READ)))


def _internal(stream: str) -> bool:
    return stream.startswith(("_RG", "_MARK"))


def _create_stream(request: pb.StreamConfig) -> list[Need]:
    info = request.streamInfo
    if _internal(info.stream):  # a reader group's state or a stream's marks: READ on what they serve
        return [(acl.stream(info.scope, info.stream), READ)]
    return [(acl.scope(info.scope), READ_UPDATE)]


def _segments(info: Any) -> list[Required]:
    """``getCurrentSegments``/``getSegments``: READ_UPDATE unless the caller says it will not write (NONE)."""
    return [_access(info, READ if info.accessOperation == _ACCESS.NONE else READ_UPDATE)]


def token_permission(access: int) -> Permission:
    """The permission a delegation token for ``access`` carries (and the caller needs)."""
    if access == _ACCESS.ANY:
        raise InvalidModelError("StreamInfo.accessOperation: ANY is not an access a token can carry")
    return READ if access in (_ACCESS.READ, _ACCESS.NONE) else READ_UPDATE


def _root(permission: Permission) -> Callable[[Any], list[Need]]:
    return lambda request: [(acl.root(), permission)]


def _scope_of(field: str | None, permission: Permission) -> Callable[[Any], list[Need]]:
    """The scope named by ``request.<field>`` (a ``ScopeInfo`` or a string; None: the request is a ScopeInfo)."""

    def needs(request: Any) -> list[Need]:
        value = request if field is None else getattr(request, field)
        return [(acl.scope(value if isinstance(value, str) else value.scope), permission)]

    return needs


def _stream_of(path: str, permission: Permission) -> Callable[[Any], list[Need]]:
    """The stream of the ``StreamInfo`` at ``request.<path>`` (dotted; "" = the request itself)."""

    def needs(request: Any) -> list[Need]:
        info = request
        for part in filter(None, path.split(".")):
            info = getattr(info, part)
        return [(_stream(info), permission)]

    return needs


def _kvt(permission: Permission) -> Callable[[Any], list[Need]]:
    return lambda request: [(acl.key_value_table(request.scope, request.kvtName), permission)]


def _group(field: str, permission: Permission) -> Callable[[Any], list[Need]]:
    """The reader group ``request.<field>`` in ``request.scope``."""
    return lambda request: [(acl.reader_group(request.scope, getattr(request, field)), permission)]


RULES: dict[str, Callable[[Any], Sequence[Required]]] = {
    "getControllerServerList": lambda request: [],
    "createScope": _root(READ_UPDATE),
    "deleteScope": _root(READ_UPDATE),
    "deleteScopeRecursive": _root(READ_UPDATE),
    "getControllerToBucketMapping": _root(READ_UPDATE),
    "listScopes": _root(READ),
    "checkScopeExists": _scope_of(None, READ),
    "listStreamsInScope": _scope_of("scope", READ),
    "listStreamsInScopeForTag": _scope_of("scope", READ),
    "listKeyValueTablesInScope": _scope_of("scope", READ),
    "createStream": _create_stream,
    "updateStream": _stream_of("streamInfo", READ_UPDATE),
    "truncateStream": _stream_of("streamInfo", READ_UPDATE),
    "sealStream": _stream_of("", READ_UPDATE),
    "deleteStream": _stream_of("", READ_UPDATE),
    "scale": _stream_of("streamInfo", READ_UPDATE),
    "createTransaction": _stream_of("streamInfo", READ_UPDATE),
    "commitTransaction": _stream_of("streamInfo", READ_UPDATE),
    "abortTransaction": _stream_of("streamInfo", READ_UPDATE),
    "pingTransaction": _stream_of("streamInfo", READ_UPDATE),
    "listSubscribers": _stream_of("", READ_UPDATE),
    "updateSubscriberStreamCut": _stream_of("streamCut.streamInfo", READ_UPDATE),
    "noteTimestampFromWriter": _stream_of("position.streamInfo", READ_UPDATE),
    "removeWriter": _stream_of("stream", READ_UPDATE),
    "getEpochSegments": _stream_of("streamInfo", READ_UPDATE),
    "getCurrentSegments": lambda request: _segments(request),
    "getSegments": lambda request: _segments(request.streamInfo),
    "getURI": _stream_of("streamInfo", READ),
    "isSegmentValid": _stream_of("streamInfo", READ),
    "isStreamCutValid": _stream_of("streamInfo", READ),
    "checkScale": _stream_of("streamInfo", READ),
    "checkTransactionState": _stream_of("streamInfo", READ),
    "listCompletedTransactions": _stream_of("streamInfo", READ),
    "checkStreamExists": _stream_of("", READ),
    "getStreamConfiguration": _stream_of("", READ),
    "getSegmentsImmediatelyFollowing": _stream_of("streamInfo", READ),
    "getSegmentsImmediatlyFollowing": _stream_of("streamInfo", READ),
    "getSegmentsBetween": _stream_of("streamInfo", READ),
    "createReaderGroup": _group("readerGroupName", READ_UPDATE),
    "updateReaderGroup": _group("readerGroupName", READ_UPDATE),
    "deleteReaderGroup": _group("readerGroup", READ_UPDATE),
    "getReaderGroupConfig": _group("readerGroup", READ),
    "getDelegationToken": lambda request: [_access(request, token_permission(request.accessOperation))],
    "createKeyValueTable": _scope_of("scope", READ_UPDATE),
    "getCurrentSegmentsKeyValueTable": _kvt(READ),
    "getKeyValueTableConfiguration": _kvt(READ),
    "deleteKeyValueTable": _kvt(READ_UPDATE),
}


def _admin_stream(request: Any) -> list[Need]:
    """segstore's admin extension (``controller.rpc.admin``): the stream its JSON request names."""
    return [(acl.stream(*stream_of(decode_request(request))), READ)]


def _admin_scope(request: Any) -> list[Need]:
    """segstore's admin extension: the scope its JSON request names (a listing: READ, filtered per item)."""
    return [(acl.scope(scope_of(decode_request(request))), READ)]


ADMIN_RULES: dict[str, Callable[[Any], Sequence[Required]]] = {
    "adminContainerAssignment": _root(READ),
    "adminOpenTransactions": _admin_stream,
    "adminScopeContents": _admin_scope,
}
"""The rules of segstore's admin extension (not Controller.proto's, so kept apart from :data:`RULES`)."""


def needs(rpc: str, request: Any) -> Sequence[Required]:
    """What ``rpc`` with ``request`` needs. Raises KeyError for an RPC not in the table (a test checks that every
    RPC of the service is), InvalidModelError for a request that names no valid access."""
    rule = RULES.get(rpc) or ADMIN_RULES[rpc]
    return rule(request)
