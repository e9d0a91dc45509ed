"""Errors of the key-value table domain API (:class:`controller.kvt.tables.KeyValueTables`).

The gRPC layer answers each with the status ``Controller.proto`` has for it: :class:`KvtNotFoundError` ->
``TABLE_NOT_FOUND`` (gRPC ``NOT_FOUND`` where the reply has no status), :class:`KvtNameTakenError` ->
``INVALID_TABLE_NAME``; a missing scope is :class:`controller.errors.ScopeNotFoundError` (``SCOPE_NOT_FOUND``).
"""

from __future__ import annotations

from controller.errors import ControllerError


class KvtError(ControllerError):
    def __init__(self, scope: str, kvt: str, message: str) -> None:
        super().__init__(f"key-value table {scope}/{kvt}: {message}")
        self.scope = scope
        self.kvt = kvt


class KvtNotFoundError(KvtError):
    def __init__(self, scope: str, kvt: str) -> None:
        super().__init__(scope, kvt, "does not exist")


class KvtNameTakenError(KvtError):
    """The table's segment names are taken: a stream ``<K>_kvtable`` exists in the scope."""

    def __init__(self, scope: str, kvt: str, stream: str) -> None:
        super().__init__(scope, kvt, f"its table segments would be those of stream {scope}/{stream}")
