"""The key-value table metadata store: records on the same coordination store as the streams.

Layout under the controller's root (next to :mod:`controller.metadata.store_base`'s)::

    scopes/<scope>/K-<kvt>              KvtRecord (state, configuration, epoch 0 with its segments)
    kvtables_deleted/<q:scope>/<q:kvt>  DeletedKvtRecord (highest segment number of the last deleted incarnation)

The table's node lives under its scope node, so a scope with tables cannot be deleted (the scope's atomic
"is it empty" delete fails, naming "kv tables"), and a table cannot be created in a scope being deleted. Every
write is one node: a create (the table appears ``CREATING``, whole), a compare-and-set of its state, or a
delete with the version read; the deleted-table records are kept after the scope goes (as Pravega keeps them),
so a table created again, even in a new scope of the same name, never reuses a segment name.

Errors: :class:`~controller.metadata.errors.ScopeNotFoundError`, :class:`~controller.metadata.errors.WriteConflictError`
(retriable: re-read), :class:`~controller.metadata.codec.CodecError`; coordination outages propagate.
"""

from __future__ import annotations

import contextlib
import dataclasses

from controller.kvt.records import (
    DeletedKvtRecord,
    KvtRecord,
    KvtState,
    decode_deleted,
    decode_kvt,
    encode_deleted,
    encode_kvt,
)
from controller.metadata.errors import ScopeNotFoundError, WriteConflictError
from controller.metadata.scopes import page
from controller.metadata.store_base import KV_TABLE_PREFIX, StoreBase, escape
from segstore_shared.coordination.store import BadVersionError, NodeExistsError, NodeNotFoundError


class KvtMetadataStore(StoreBase):
    """Key-value table records under ``root`` of a coordination store (the stream metadata store's root)."""

    @classmethod
    def beside(cls, streams: StoreBase) -> KvtMetadataStore:
        """A store on the same coordination session, root and clock as the stream metadata store ``streams``."""
        return cls(streams._coord, streams._root or "/", config=streams._config, clock_ms=streams._clock_ms)

    def now_ms(self) -> int:
        return self._clock_ms()

    # ---- paths ------------------------------------------------------------------------------------------------
    def _kvt_path(self, scope: str, kvt: str) -> str:
        return f"{self._scope_path(scope)}/{KV_TABLE_PREFIX}{kvt}"

    def _deleted_path(self, scope: str, kvt: str) -> str:
        return f"{self._root}/kvtables_deleted/{escape(scope)}/{escape(kvt)}"

    # ---- tables -----------------------------------------------------------------------------------------------
    async def get(self, scope: str, kvt: str) -> tuple[KvtRecord, int] | None:
        """The table's record and its version, or None if there is no such table."""
        try:
            node = await self._coord.get(self._kvt_path(scope, kvt))
        except NodeNotFoundError:
            return None
        return decode_kvt(node.data), node.version

    async def create(self, scope: str, kvt: str, record: KvtRecord) -> bool:
        """Create the table's record; False if one exists (left as it is). ScopeNotFoundError."""
        try:
            await self._coord.create(self._kvt_path(scope, kvt), encode_kvt(record), make_parents=False)
        except NodeExistsError:
            return False
        except NodeNotFoundError:
            raise ScopeNotFoundError("scope not found", scope=scope) from None
        return True

    async def set_state(self, scope: str, kvt: str, record: KvtRecord, version: int, state: KvtState) -> int:
        """Compare-and-set the state of the record read at ``version``; the new version. WriteConflictError if
        it changed (or went) since."""
        try:
            return await self._coord.compare_and_set(
                self._kvt_path(scope, kvt), encode_kvt(_with_state(record, state)), version
            )
        except (BadVersionError, NodeNotFoundError):
            raise WriteConflictError(
                f"key-value table record changed (expected version {version})", scope=scope, name=kvt
            ) from None

    async def remove(self, scope: str, kvt: str, version: int) -> None:
        """Delete the record read at ``version`` (gone already: fine). WriteConflictError if it changed."""
        try:
            await self._coord.delete(self._kvt_path(scope, kvt), version)
        except NodeNotFoundError:
            return
        except BadVersionError:
            raise WriteConflictError(
                "key-value table record changed before its removal", scope=scope, name=kvt
            ) from None

    async def list_tables(self, scope: str, token: str = "", limit: int = 1000) -> tuple[list[str], str]:
        """Table names of ``scope`` after ``token`` (sorted; tables being created or deleted included)."""
        try:
            children = await self._coord.children(self._scope_path(scope))
        except NodeNotFoundError:
            raise ScopeNotFoundError("scope not found", scope=scope) from None
        names = [c[len(KV_TABLE_PREFIX) :] for c in children if c.startswith(KV_TABLE_PREFIX)]
        return page(names, token, limit)

    # ---- segment numbers of deleted tables --------------------------------------------------------------------
    async def first_segment_number(self, scope: str, kvt: str) -> int:
        """Where a new incarnation of ``scope/kvt`` numbers its segments: above every deleted one's."""
        try:
            node = await self._coord.get(self._deleted_path(scope, kvt))
        except NodeNotFoundError:
            return 0
        return decode_deleted(node.data).last_segment_number + 1

    async def record_deleted(self, scope: str, kvt: str, last_segment_number: int) -> None:
        """Remember that segment numbers up to ``last_segment_number`` were used (only ever raised)."""
        path = self._deleted_path(scope, kvt)
        data = encode_deleted(DeletedKvtRecord(last_segment_number))
        for _ in range(self._config.update_attempts):
            try:
                node = await self._coord.get(path)
            except NodeNotFoundError:
                with contextlib.suppress(NodeExistsError):
                    await self._coord.create(path, data, make_parents=True)
                    return
                continue
            if decode_deleted(node.data).last_segment_number >= last_segment_number:
                return
            try:
                await self._coord.compare_and_set(path, data, node.version)
                return
            except BadVersionError:
                continue
        raise WriteConflictError("deleted key-value table record: too many concurrent updates", scope=scope, name=kvt)


def _with_state(record: KvtRecord, state: KvtState) -> KvtRecord:
    return dataclasses.replace(record, state=state)
