"""The controller as the client library sees it: the subset of ``ControllerClient`` it calls.

:class:`ControllerApi` is the port; :class:`controller_client.controller.api.ControllerClient` (gRPC) is the
production adapter and the tests use an in-process fake over in-memory metadata. Every method is a
coroutine on the caller's event loop (``list_*`` are async iterators).

Errors (from :mod:`controller_client.errors`): ``ScopeNotFoundError`` / ``StreamNotFoundError`` for a missing
scope or stream, ``StreamSealedError`` when an open stream is needed, ``TxnNotFoundError`` /
``TxnFailedError`` for transactions, ``ControllerUnavailableError`` (the only retriable one) when the
controller cannot be reached; anything else is a ``ControllerError``. Return values the library does not use
are typed ``object`` so any adapter's return type fits.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from controller_client.model import ReaderGroupConfig, SegmentRange, StreamConfiguration, StreamCut, TxnState

Endpoint = tuple[str, int]
EndpointResolver = Callable[[str], Awaitable[Endpoint]]


class ControllerApi(Protocol):
    """The controller calls of the client library.

    Ordering and consistency guaranteed by the controller and relied upon here:

    * ``get_current_segments`` lists the active segments of the latest epoch, sorted by ``key_start``;
      together they cover ``[0, 1)`` once. A sealed stream has none.
    * A scale creates the successors *before* it seals the segments they replace, so whoever sees a
      segment sealed finds its successors with ``get_successors``; an empty answer for a sealed segment
      means the stream itself is sealed.
    * ``get_successors`` maps each successor to *all* of its predecessors (a merge has several).
    * ``get_segments_at_time(…, 0)`` is the head of the stream (its truncation point).
    * ``create_transaction`` returns the transaction's id and the segments (of the epoch it was opened
      in) whose transaction segments it created; writes route over those by key.
    """

    # ---- scopes -------------------------------------------------------------------------------------------
    async def create_scope(self, scope: str) -> bool:
        """True if created, False if it existed."""
        ...

    async def delete_scope(self, scope: str) -> object:
        """Raises ScopeNotEmptyError while it holds streams."""
        ...

    async def scope_exists(self, scope: str) -> bool: ...

    def list_scopes(self) -> AsyncIterator[str]: ...

    # ---- streams ------------------------------------------------------------------------------------------
    async def create_stream(self, scope: str, stream: str, config: StreamConfiguration) -> bool:
        """True if created, False if it existed. Raises ScopeNotFoundError."""
        ...

    async def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> object: ...

    async def get_stream_configuration(self, scope: str, stream: str) -> StreamConfiguration: ...

    async def seal_stream(self, scope: str, stream: str) -> object: ...

    async def delete_stream(self, scope: str, stream: str) -> object:
        """Raises StreamNotSealedError unless sealed first."""
        ...

    async def stream_exists(self, scope: str, stream: str) -> bool: ...

    def list_streams(self, scope: str, tag: str | None = None) -> AsyncIterator[str]: ...

    async def truncate_stream(self, cut: StreamCut) -> object: ...

    # ---- segments -----------------------------------------------------------------------------------------
    async def get_current_segments(self, scope: str, stream: str) -> list[SegmentRange]: ...

    async def get_segments_at_time(self, scope: str, stream: str, timestamp_ms: int) -> StreamCut: ...

    async def get_successors(self, scope: str, stream: str, segment_id: int) -> dict[SegmentRange, list[int]]: ...

    async def get_uri(self, scope: str, stream: str, segment_id: int) -> Endpoint:
        """The segment store endpoint serving the segment (and its transaction segments)."""
        ...

    # ---- transactions -------------------------------------------------------------------------------------
    async def create_transaction(
        self, scope: str, stream: str, lease_ms: int
    ) -> tuple[uuid.UUID, list[SegmentRange]]: ...

    async def ping_transaction(self, scope: str, stream: str, txn_id: uuid.UUID, lease_ms: int) -> object:
        """Extend the lease. Raises TxnFailedError if the transaction is no longer open."""
        ...

    async def commit_transaction(
        self, scope: str, stream: str, txn_id: uuid.UUID, writer_id: str = "", timestamp_ms: int = 0
    ) -> object:
        """Start the commit (the merge completes asynchronously; ``check_transaction_state`` tells); with a
        writer and a time (> 0), the writer's mark is noted once it is merged."""
        ...

    async def abort_transaction(self, scope: str, stream: str, txn_id: uuid.UUID) -> object: ...

    async def check_transaction_state(self, scope: str, stream: str, txn_id: uuid.UUID) -> TxnState: ...

    async def note_timestamp_from_writer(self, writer_id: str, position: StreamCut, timestamp_ms: int) -> object:
        """Raises InvalidArgumentError for a time or position before the writer's last."""
        ...

    async def remove_writer(self, scope: str, stream: str, writer_id: str) -> bool: ...

    # ---- reader groups -----------------------------------------------------------------------------------
    async def create_reader_group(self, config: ReaderGroupConfig) -> ReaderGroupConfig:
        """Create the group, or find it: the configuration the controller holds."""
        ...

    async def get_reader_group_config(self, scope: str, reader_group: str) -> ReaderGroupConfig:
        """Raises ReaderGroupNotFoundError."""
        ...

    async def delete_reader_group(self, scope: str, reader_group: str, reader_group_id: uuid.UUID) -> bool: ...

    async def update_subscriber_stream_cut(
        self, subscriber: str, reader_group_id: uuid.UUID, generation: int, cut: StreamCut
    ) -> object: ...

    async def get_delegation_token(self, scope: str, stream: str, write: bool = True) -> str:
        """A token for the segment stores on the stream (READ_UPDATE if ``write``, else READ); "" when the
        controller runs without authentication."""
        ...
