"""Writer marks: the time and position each writer last reported (input of watermarks)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from controller.metadata.codec import encode
from controller.metadata.errors import DataNotFoundError, WriteConflictError
from controller.metadata.records import WriterMark, WriterMarkStatus
from controller.metadata.store_base import StoreBase, escape, unescape
from segstore_shared.coordination.store import BadVersionError, NodeNotFoundError


def position_advanced(old: Mapping[int, int], new: Mapping[int, int]) -> bool:
    """Whether ``new`` is at or after ``old`` on every segment both name (Pravega's sanity check:
    a writer position is not a stream cut, so only shared segments are compared)."""
    return all(new[s] >= old[s] for s in new if s in old)


class WriterOps(StoreBase):
    def _writer_path(self, scope: str, stream: str, writer_id: str) -> str:
        return self._sp(scope, stream, "writers", escape(writer_id))

    async def note_writer_mark(
        self, scope: str, stream: str, writer_id: str, timestamp: int, position: Mapping[int, int]
    ) -> WriterMarkStatus:
        """Record a writer's time and position (``noteTimestampFromWriter``).

        ``INVALID_TIME`` if the stored time is later, ``INVALID_POSITION`` if the stored position is
        ahead on a shared segment; nothing is changed then.
        """
        path = self._writer_path(scope, stream, writer_id)
        mark = WriterMark(timestamp, dict(position), True)
        for _ in range(self._config.update_attempts):
            found = await self._get_opt(path, WriterMark)
            if found is None:
                if await self._create_in_stream(scope, stream, path, mark):
                    return WriterMarkStatus.SUCCESS
                continue
            stored, version = found
            if stored.timestamp > timestamp:
                return WriterMarkStatus.INVALID_TIME
            if not position_advanced(stored.position, position):
                return WriterMarkStatus.INVALID_POSITION
            try:
                await self._coord.compare_and_set(path, encode(mark), version)
                return WriterMarkStatus.SUCCESS
            except BadVersionError:
                continue
        raise WriteConflictError(f"writer {writer_id}: too many concurrent updates", scope=scope, name=stream)

    async def get_writer_mark(self, scope: str, stream: str, writer_id: str) -> WriterMark:
        found = await self._get_opt(self._writer_path(scope, stream, writer_id), WriterMark)
        if found is None:
            await self._stream(scope, stream)
            raise DataNotFoundError(f"writer {writer_id} has no mark", scope=scope, name=stream)
        return found[0]

    async def list_writer_marks(self, scope: str, stream: str) -> dict[str, WriterMark]:
        try:
            names = await self._coord.children(self._sp(scope, stream, "writers"))
        except NodeNotFoundError:
            await self._stream(scope, stream)
            return {}
        found = await asyncio.gather(*(self._get_opt(self._sp(scope, stream, "writers", n), WriterMark) for n in names))
        return {unescape(n): f[0] for n, f in zip(names, found, strict=True) if f is not None}

    async def shutdown_writer(self, scope: str, stream: str, writer_id: str) -> None:
        """Mark the writer as no longer alive (its mark stays for the watermark computation)."""
        await self.get_writer_mark(scope, stream, writer_id)
        await self._update(
            self._writer_path(scope, stream, writer_id),
            WriterMark,
            lambda m: WriterMark(m.timestamp, m.position, False) if m.alive else None,
            scope=scope,
            name=stream,
            what=f"writer {writer_id}",
        )

    async def remove_writer(self, scope: str, stream: str, writer_id: str, expected: WriterMark | None = None) -> None:
        """Delete the writer's mark (``removeWriter``); with ``expected``, only if it is still that
        mark (else :class:`WriteConflictError`). Removing an unknown writer is a no-op."""
        path = self._writer_path(scope, stream, writer_id)
        found = await self._get_opt(path, WriterMark)
        if found is None:
            await self._stream(scope, stream)
            return
        if expected is not None and found[0] != expected:
            raise WriteConflictError(f"writer {writer_id}: mark changed", scope=scope, name=stream)
        try:
            await self._coord.delete(path, found[1])
        except NodeNotFoundError:
            pass
        except BadVersionError:
            raise WriteConflictError(f"writer {writer_id}: mark changed", scope=scope, name=stream) from None
