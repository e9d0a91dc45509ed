"""The controller's calls into the segment stores (Pravega's ``SegmentHelper``).

Every workflow step that touches segments goes through :class:`SegmentStoreOps`. Invariants:

- **Idempotent.** Each method may be repeated after a crash or a lost reply and ends in the same
  state: creating a segment that exists, sealing a sealed one, deleting a missing one, merging a
  transaction segment that was already merged, and truncating at an offset already passed all
  succeed. Workflows resume by repeating their last step, so this is what makes them safe.
- **Routed and retried.** A segment's store is found by name through the ``resolve`` function (the
  controller's container-to-host mapping); ``WrongHost``, lost connections and timeouts are retried
  with backoff (the mapping may be moving while a segment store fails over), for up to
  ``retry.max_attempts`` attempts. Definite failures (``NoSuchSegment`` where the segment must
  exist, ...) raise the client's typed errors at once.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from controller_client.model import ScalingPolicy, qualified_segment_name, transaction_segment_name
from segment_store.client import (
    NoSuchSegmentError,
    SegmentAlreadyExistsError,
    SegmentClient,
    SegmentIsSealedError,
    SegmentIsTruncatedError,
)
from segment_store.client.retry import RetryPolicy
from segstore_shared.contracts import EVENT_COUNT, SegmentError

log = logging.getLogger(__name__)
_T = TypeVar("_T")

DEFAULT_RETRY = RetryPolicy(max_attempts=40, initial_delay_ms=50.0, max_delay_ms=2_000.0)
"""About a minute of retries: long enough for a segment store to fail over."""


class SegmentMissingError(SegmentError):
    """A segment the stream metadata says exists is missing from the segment store."""


class SegmentStoreOps:
    """Segment operations for the controller's workflows; see the module docstring for the invariants."""

    def __init__(self, client: SegmentClient, retry: RetryPolicy = DEFAULT_RETRY) -> None:
        self._client = client
        self._retry = retry

    @property
    def client(self) -> SegmentClient:
        return self._client

    async def _call(self, fn: Callable[[], Awaitable[_T]]) -> _T:
        return await self._retry.call(fn)

    # ---- stream segments ----------------------------------------------------------------------------------
    async def create_segment(
        self, scope: str, stream: str, segment_id: int, policy: ScalingPolicy, rollover_size_bytes: int = 0
    ) -> None:
        """Create the segment (with its scaling policy, for traffic reports); existing is fine."""
        await self.create_named_segment(qualified_segment_name(scope, stream, segment_id), policy, rollover_size_bytes)

    async def create_named_segment(self, name: str, policy: ScalingPolicy, rollover_size_bytes: int = 0) -> None:
        async def attempt() -> None:
            with contextlib.suppress(SegmentAlreadyExistsError):
                await self._client.create_segment(name, int(policy.scale_type), policy.target_rate, rollover_size_bytes)

        await self._call(attempt)

    async def update_policy(self, scope: str, stream: str, segment_id: int, policy: ScalingPolicy) -> None:
        name = qualified_segment_name(scope, stream, segment_id)
        await self._call(lambda: self._client.update_segment_policy(name, int(policy.scale_type), policy.target_rate))

    async def seal_segment(self, scope: str, stream: str, segment_id: int) -> int:
        """Seal the segment; returns its final length. Sealing a sealed segment is fine."""
        name = qualified_segment_name(scope, stream, segment_id)

        async def attempt() -> int:
            with contextlib.suppress(SegmentIsSealedError):
                await self._client.seal_segment(name)
            info = await self._client.get_segment_info(name)
            if not info.exists:
                raise SegmentMissingError(name, "cannot seal: the segment does not exist")
            return info.write_offset

        return await self._call(attempt)

    async def segment_length(self, scope: str, stream: str, segment_id: int) -> tuple[int, int]:
        """(start offset, write offset) of the segment."""
        name = qualified_segment_name(scope, stream, segment_id)
        info = await self._call(lambda: self._client.get_segment_info(name))
        return info.start_offset, info.write_offset

    async def segment_traffic(self, scope: str, stream: str, segment_id: int) -> tuple[int, int]:
        """(bytes ever appended, events ever appended) of the segment: the counters rates are measured from."""
        name = qualified_segment_name(scope, stream, segment_id)
        info = await self._call(lambda: self._client.get_segment_info(name))
        events = await self._call(lambda: self._client.get_segment_attribute(name, uuid.UUID(int=EVENT_COUNT)))
        return info.write_offset, events or 0

    async def segment_exists(self, scope: str, stream: str, segment_id: int) -> bool:
        name = qualified_segment_name(scope, stream, segment_id)
        info = await self._call(lambda: self._client.get_segment_info(name))
        return info.exists and not info.deleted

    async def truncate_segment(self, scope: str, stream: str, segment_id: int, offset: int) -> None:
        """Drop data below ``offset``; an offset at or below the current start is a no-op."""
        name = qualified_segment_name(scope, stream, segment_id)

        async def attempt() -> None:
            with contextlib.suppress(SegmentIsTruncatedError):
                await self._client.truncate_segment(name, offset)

        await self._call(attempt)

    async def delete_segment(self, scope: str, stream: str, segment_id: int) -> None:
        await self.delete_named_segment(qualified_segment_name(scope, stream, segment_id))

    async def delete_named_segment(self, name: str) -> None:
        """Delete a segment; a missing one is fine."""

        async def attempt() -> None:
            with contextlib.suppress(NoSuchSegmentError):
                await self._client.delete_segment(name)

        await self._call(attempt)

    # ---- transaction segments ------------------------------------------------------------------------------
    async def create_txn_segment(self, scope: str, stream: str, segment_id: int, txn_id: uuid.UUID) -> None:
        parent = qualified_segment_name(scope, stream, segment_id)
        await self.create_named_segment(transaction_segment_name(parent, txn_id), ScalingPolicy())

    async def commit_txn_segment(
        self, scope: str, stream: str, target_id: int, txn_parent_id: int, txn_id: uuid.UUID
    ) -> None:
        """Seal the transaction segment of ``txn_parent_id`` and merge it into segment ``target_id`` (the
        same segment, or one with the same number in a later epoch). A transaction segment that is gone
        was merged already: only this path removes a committing transaction's segments."""
        target = qualified_segment_name(scope, stream, target_id)
        source = transaction_segment_name(qualified_segment_name(scope, stream, txn_parent_id), txn_id)

        async def attempt() -> None:
            try:
                with contextlib.suppress(SegmentIsSealedError):
                    await self._client.seal_segment(source)
                await self._client.merge_segments(target, source)
            except NoSuchSegmentError as error:
                if error.segment == target:
                    raise
                log.debug("transaction segment %s already merged", source)

        await self._call(attempt)

    async def abort_txn_segment(self, scope: str, stream: str, segment_id: int, txn_id: uuid.UUID) -> None:
        parent = qualified_segment_name(scope, stream, segment_id)
        await self.delete_named_segment(transaction_segment_name(parent, txn_id))

    # ---- table segments (key-value tables) ----------------------------------------------------------------------
    async def create_table_segment(self, name: str, key_length: int, rollover_size_bytes: int = 0) -> None:
        """Create a table segment with fixed-length keys of ``key_length`` bytes (0: any length); existing is fine."""

        async def attempt() -> None:
            with contextlib.suppress(SegmentAlreadyExistsError):
                await self._client.create_table_segment(name, key_length, rollover_size_bytes)

        await self._call(attempt)

    async def delete_table_segment(self, name: str) -> None:
        """Delete a table segment, whatever it holds; a missing one is fine."""

        async def attempt() -> None:
            with contextlib.suppress(NoSuchSegmentError):
                await self._client.delete_table_segment(name, must_be_empty=False)

        await self._call(attempt)
