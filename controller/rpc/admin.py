"""segstore's admin extension of the controller: what operators ask and ``Controller.proto`` cannot answer.

A second gRPC service on the controller's port, ``segstore.admin.v1.Admin``, beside Pravega's
``ControllerService`` (Pravega's clients never call it). Requests and responses are JSON objects (UTF-8), so it
needs no generated code; errors, authentication and authorization are the controller's (``controller.rpc.handling``:
``INVALID_ARGUMENT`` for a malformed request, ``NOT_FOUND`` for a missing stream, ``UNAUTHENTICATED``,
``PERMISSION_DENIED``). Methods:

- ``ContainerAssignment`` ``{}`` -> ``{"container_count": N, "hosts": {"host:port": [ids...]}}``: which segment store
  runs which container now (the leader's assignment in ZooKeeper); needs READ on the root ``prn::/``.
- ``OpenTransactions`` ``{"scope": S, "stream": T}`` -> ``{"transactions": [{"id", "status", "epoch",
  "created_ms", "lease_expiry_ms", "max_execution_expiry_ms", "writer_id"}]}``: the stream's active transactions
  (open, committing, aborting); needs READ on the stream.
- ``ScopeContents`` ``{"scope": S}`` -> ``{"streams": [...], "reader_groups": [...], "key_value_tables": [...],
  "hidden": {"streams": N, "reader_groups": N, "key_value_tables": N}}``: everything the scope holds, sorted, what
  ``deleteScope`` waits for: every stream (also internal ones, ``_RG<group>`` of Java clients, and those being
  created or deleted), every reader group registered with the controller (subscribed to its streams or not:
  ``Controller.proto`` lists none), every key-value table. Needs READ on the scope; names the caller may not READ
  are left out and counted in ``hidden``. ``NOT_FOUND`` for a missing scope.

One of the RPC groups of :mod:`controller.rpc`: imports :mod:`controller.rpc.handling`, the request codec
:mod:`controller.rpc.admin_requests`, the controller's errors, :func:`controller.rpc.authentication.visible` (the
per-item filter of listings) and for types only the domain API (:mod:`controller.core`) and the metrics; no other
RPC group.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

from controller.errors import from_metadata
from controller.rpc.admin_requests import decode_request, encode, scope_of, stream_of
from controller.rpc.authentication import visible
from controller.rpc.handling import rpc
from controller_client.controller.transport import ADMIN_SERVICE
from segstore_shared.auth import acl

if TYPE_CHECKING:
    from controller.core import ControllerCore
    from controller.metrics import ControllerMetrics
    from controller.rpc.authentication import ControllerAuth

SERVICE = ADMIN_SERVICE
LIST_PAGE = 1000


class AdminRpcs:
    """The methods, wrapped like every controller RPC (authentication, authorization, errors, metrics)."""

    def __init__(
        self, core: ControllerCore, auth: ControllerAuth | None = None, metrics: ControllerMetrics | None = None
    ) -> None:
        self._core = core
        self._auth = auth
        self._metrics = metrics

    @rpc
    async def adminContainerAssignment(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        assignment = self._core.container_assignment()
        hosts = {} if assignment is None else {host: list(ids) for host, ids in sorted(assignment.hosts.items())}
        count = self._core.config.container_count if assignment is None else assignment.container_count
        return encode({"container_count": count, "hosts": hosts})

    @rpc
    async def adminOpenTransactions(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        scope, stream = stream_of(decode_request(request))
        with from_metadata(scope, stream):
            found = await self._core.store.list_active_txns(scope, stream)
        transactions = [
            {
                "id": str(info.txn_id),
                "status": info.record.status.name,
                "epoch": info.epoch,
                "created_ms": info.record.creation_time_ms,
                "lease_expiry_ms": info.record.lease_expiry_ms,
                "max_execution_expiry_ms": info.record.max_execution_expiry_ms,
                "writer_id": info.record.writer_id,
            }
            for info in sorted(found, key=lambda i: (i.record.creation_time_ms, str(i.txn_id)))
        ]
        return encode({"transactions": transactions})

    @rpc
    async def adminScopeContents(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        scope = scope_of(decode_request(request))
        store = self._core.store
        with from_metadata(scope):
            streams = await _every(lambda token: store.list_streams(scope, token, LIST_PAGE))
            groups = await _every(lambda token: store.list_reader_groups(scope, token, LIST_PAGE))
        tables = await _every(lambda token: self._core.list_key_value_tables(scope, token, LIST_PAGE))
        found = {"streams": streams, "reader_groups": groups, "key_value_tables": tables}
        shown = {
            "streams": visible(streams, lambda name: acl.stream(scope, name)),
            "reader_groups": visible(groups, lambda name: acl.reader_group(scope, name)),
            "key_value_tables": visible(tables, lambda name: acl.key_value_table(scope, name)),
        }
        hidden = {kind: len(found[kind]) - len(names) for kind, names in shown.items()}
        return encode({**shown, "hidden": hidden})


async def _every(page: Callable[[str], Awaitable[tuple[list[str], str]]]) -> list[str]:
    """Every name of a paged listing (``page(token)`` -> the names after ``token`` and the next token), sorted."""
    names: list[str] = []
    token = ""
    while True:
        found, token = await page(token)
        if not found:
            return names
        names.extend(found)


def admin_handler(rpcs: AdminRpcs) -> grpc.GenericRpcHandler:
    """The generic handler that serves ``rpcs`` as ``segstore.admin.v1.Admin``."""

    def method(behaviour: Callable[..., Any]) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(behaviour)  # bytes in and out: JSON is decoded inside

    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "ContainerAssignment": method(rpcs.adminContainerAssignment),
            "OpenTransactions": method(rpcs.adminOpenTransactions),
            "ScopeContents": method(rpcs.adminScopeContents),
        },
    )
