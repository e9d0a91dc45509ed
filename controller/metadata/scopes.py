"""Scopes and the listings of what a scope holds (streams, streams by tag, reader groups)."""

from __future__ import annotations

import contextlib

from controller.metadata.errors import ScopeNotEmptyError, ScopeNotFoundError
from controller.metadata.store_base import (
    KV_TABLE_PREFIX,
    READER_GROUP_PREFIX,
    SCOPE_DATA,
    STREAM_PREFIX,
    TAG_PREFIX,
    StoreBase,
)
from controller_client.model import validate_scope_name
from segstore_shared.coordination.store import NodeExistsError, NodeNotFoundError, NotEmptyError


def page(names: list[str], token: str, limit: int) -> tuple[list[str], str]:
    """Names after ``token`` (sorted), at most ``limit``; the next token is the last name returned
    (the given token when nothing is left)."""
    if limit <= 0:
        raise ValueError(f"limit must be positive, not {limit}")
    selected = [n for n in sorted(names) if n > token][:limit]
    return selected, (selected[-1] if selected else token)


class ScopeOps(StoreBase):
    async def create_scope(self, scope: str) -> bool:
        """Create ``scope``; ``True`` if this call created it, ``False`` if it existed (idempotent)."""
        validate_scope_name(scope)
        try:
            await self._coord.create(self._scope_path(scope), SCOPE_DATA, make_parents=True)
        except NodeExistsError:
            return False
        return True

    async def scope_exists(self, scope: str) -> bool:
        return await self._coord.exists(self._scope_path(scope))

    async def _require_scope(self, scope: str) -> None:
        if not await self.scope_exists(scope):
            raise ScopeNotFoundError("scope not found", scope=scope)

    async def list_scopes(self, token: str = "", limit: int = 1000) -> tuple[list[str], str]:
        """Scope names after ``token``, sorted, at most ``limit``; returns ``(names, next token)``."""
        try:
            names = await self._coord.children(self._scopes_path)
        except NodeNotFoundError:
            names = []
        return page(names, token, limit)

    async def delete_scope(self, scope: str) -> None:
        """Delete an empty scope.

        Raises :class:`ScopeNotFoundError`, or :class:`ScopeNotEmptyError` naming what remains
        (streams, reader groups, key-value tables). The emptiness check is the atomic delete of the
        scope node, so a stream created concurrently either blocks the delete or fails to be created.
        """
        path = self._scope_path(scope)
        try:
            children = await self._coord.children(path)
        except NodeNotFoundError:
            raise ScopeNotFoundError("scope not found", scope=scope) from None
        for child in children:
            if child.startswith(TAG_PREFIX):
                with contextlib.suppress(NodeNotFoundError, NotEmptyError):
                    await self._coord.delete(f"{path}/{child}")
        try:
            await self._coord.delete(path)
        except NodeNotFoundError:
            raise ScopeNotFoundError("scope not found", scope=scope) from None
        except NotEmptyError:
            remaining = await self._coord.children(path)
            kinds = sorted(
                {
                    {STREAM_PREFIX: "streams", READER_GROUP_PREFIX: "reader groups", KV_TABLE_PREFIX: "kv tables"}.get(
                        c[:2], "tagged streams"
                    )
                    for c in remaining
                }
            )
            raise ScopeNotEmptyError(f"scope still has {', '.join(kinds)}", scope=scope) from None

    async def _children_with_prefix(self, scope: str, prefix: str) -> list[str]:
        try:
            children = await self._coord.children(self._scope_path(scope))
        except NodeNotFoundError:
            raise ScopeNotFoundError("scope not found", scope=scope) from None
        return [c[len(prefix) :] for c in children if c.startswith(prefix)]

    async def list_streams(self, scope: str, token: str = "", limit: int = 1000) -> tuple[list[str], str]:
        """Stream names of ``scope`` after ``token`` (including streams still being created)."""
        return page(await self._children_with_prefix(scope, STREAM_PREFIX), token, limit)

    async def list_streams_by_tag(
        self, scope: str, tag: str, token: str = "", limit: int = 1000
    ) -> tuple[list[str], str]:
        """Names of the streams of ``scope`` whose configuration has ``tag``."""
        await self._require_scope(scope)
        try:
            names = await self._coord.children(self._tag_path(scope, tag))
        except NodeNotFoundError:
            names = []
        return page(names, token, limit)

    async def list_reader_groups(self, scope: str, token: str = "", limit: int = 1000) -> tuple[list[str], str]:
        return page(await self._children_with_prefix(scope, READER_GROUP_PREFIX), token, limit)
