"""An in-process controller for the client library tests: :class:`ControllerApi` over in-memory metadata.

Streams have epochs of segments with key ranges; segments live in a real segment store reached through a
:class:`SegmentClient`. ``scale`` is manual, in Pravega's order: create the successors, then seal the
segments they replace, then record the new epoch. Transactions create transaction segments, and commit
seals and merges them into their parents (abort deletes them). Every segment is served by the one
endpoint given (the in-memory segment store serves all its containers there).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from controller_client.errors import (
    ReaderGroupNotFoundError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    StreamNotFoundError,
    StreamNotSealedError,
    StreamSealedError,
    TxnFailedError,
    TxnNotFoundError,
)
from controller_client.model import (
    ReaderGroupConfig,
    SegmentRange,
    StreamConfiguration,
    StreamCut,
    TxnState,
    even_ranges,
    qualified_segment_name,
    segment_id,
    transaction_segment_name,
)
from segment_store.client import (
    ClientConfig,
    ConnectionConfig,
    RetryPolicy,
    SegmentClient,
    SegmentIsSealedError,
    WriterConfig,
)


def fast_client_config(max_unacked_bytes: int = 16 * 1024 * 1024) -> ClientConfig:
    """Reconnects in milliseconds; a configurable writer window."""
    retry = RetryPolicy(max_attempts=50, initial_delay_ms=2, max_delay_ms=50)
    writer = WriterConfig(retry=retry, max_block_bytes=64 * 1024, max_unacked_bytes=max_unacked_bytes)
    return ClientConfig(connection=ConnectionConfig(connect_timeout_ms=2_000), writer=writer)


@dataclass
class _Txn:
    segments: list[SegmentRange]
    state: TxnState = TxnState.OPEN
    lease_ms: int = 0


@dataclass
class _Stream:
    config: StreamConfiguration
    epochs: list[tuple[float, list[SegmentRange]]] = field(default_factory=list)  # (created at, segments)
    next_number: int = 0
    sealed: bool = False
    predecessors: dict[int, list[int]] = field(default_factory=dict)
    successors: dict[int, list[SegmentRange]] = field(default_factory=dict)
    head: dict[int, int] = field(default_factory=dict)
    txns: dict[uuid.UUID, _Txn] = field(default_factory=dict)

    @property
    def current(self) -> list[SegmentRange]:
        return self.epochs[-1][1]

    @property
    def epoch(self) -> int:
        return len(self.epochs) - 1


class FakeController:
    """Implements :class:`controller_client.ports.ControllerApi` for tests; ``uri_lookups`` counts getURI."""

    def __init__(self, client: SegmentClient, endpoint: tuple[str, int]) -> None:
        self.client = client
        self.endpoint = endpoint
        self.scopes: dict[str, dict[str, _Stream]] = {}
        self.uri_lookups = 0
        self.reader_groups: dict[tuple[str, str], ReaderGroupConfig] = {}
        self.subscriber_cuts: dict[str, list[StreamCut]] = {}

    async def close(self) -> None:
        await self.client.close()

    def _stream(self, scope: str, stream: str) -> _Stream:
        if scope not in self.scopes:
            raise ScopeNotFoundError(scope)
        found = self.scopes[scope].get(stream)
        if found is None:
            raise StreamNotFoundError(scope, stream)
        return found

    def _name(self, scope: str, stream: str, sid: int) -> str:
        return qualified_segment_name(scope, stream, sid)

    # ---- scopes -------------------------------------------------------------------------------------------
    async def create_scope(self, scope: str) -> bool:
        if scope in self.scopes:
            return False
        self.scopes[scope] = {}
        return True

    async def delete_scope(self, scope: str) -> bool:
        if scope not in self.scopes:
            return False
        if self.scopes[scope]:
            raise ScopeNotEmptyError(scope)
        del self.scopes[scope]
        return True

    async def scope_exists(self, scope: str) -> bool:
        return scope in self.scopes

    async def list_scopes(self) -> AsyncIterator[str]:
        for scope in sorted(self.scopes):
            yield scope

    # ---- streams ------------------------------------------------------------------------------------------
    async def create_stream(self, scope: str, stream: str, config: StreamConfiguration) -> bool:
        if scope not in self.scopes:
            raise ScopeNotFoundError(scope)
        if stream in self.scopes[scope]:
            return False
        state = _Stream(config)
        segments = []
        for number, (low, high) in enumerate(even_ranges(config.scaling.min_num_segments)):
            sid = segment_id(number, 0)
            await self.client.create_segment(self._name(scope, stream, sid))
            segments.append(SegmentRange(sid, low, high))
        state.next_number = len(segments)
        state.epochs.append((time.time() * 1000, segments))
        state.head = {s.segment_id: 0 for s in segments}
        self.scopes[scope][stream] = state
        return True

    async def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> bool:
        self._stream(scope, stream).config = config
        return True

    async def get_stream_configuration(self, scope: str, stream: str) -> StreamConfiguration:
        return self._stream(scope, stream).config

    async def seal_stream(self, scope: str, stream: str) -> bool:
        state = self._stream(scope, stream)
        for segment in state.current:
            with contextlib.suppress(SegmentIsSealedError):
                await self.client.seal_segment(self._name(scope, stream, segment.segment_id))
        state.sealed = True
        return True

    async def delete_stream(self, scope: str, stream: str) -> bool:
        state = self._stream(scope, stream)
        if not state.sealed:
            raise StreamNotSealedError(scope, stream)
        for _, segments in state.epochs:
            for segment in segments:
                with contextlib.suppress(Exception):
                    await self.client.delete_segment(self._name(scope, stream, segment.segment_id))
        del self.scopes[scope][stream]
        return True

    async def stream_exists(self, scope: str, stream: str) -> bool:
        return stream in self.scopes.get(scope, {})

    async def list_streams(self, scope: str, tag: str | None = None) -> AsyncIterator[str]:
        if scope not in self.scopes:
            raise ScopeNotFoundError(scope)
        for name, state in sorted(self.scopes[scope].items()):
            if tag is None or tag in state.config.tags:
                yield name

    async def truncate_stream(self, cut: StreamCut) -> bool:
        state = self._stream(cut.scope, cut.stream)
        for sid, offset in cut.positions.items():
            if offset > 0:
                await self.client.truncate_segment(self._name(cut.scope, cut.stream, sid), offset)
        state.head = dict(cut.positions)
        return True

    # ---- segments -----------------------------------------------------------------------------------------
    async def get_current_segments(self, scope: str, stream: str) -> list[SegmentRange]:
        state = self._stream(scope, stream)
        return [] if state.sealed else sorted(state.current, key=lambda s: s.key_start)

    async def get_segments_at_time(self, scope: str, stream: str, timestamp_ms: int) -> StreamCut:
        state = self._stream(scope, stream)
        if timestamp_ms <= 0:
            return StreamCut(scope, stream, dict(state.head))
        chosen = state.epochs[0][1]
        for created, segments in state.epochs:
            if created <= timestamp_ms:
                chosen = segments
        return StreamCut(scope, stream, {s.segment_id: 0 for s in chosen})

    async def get_successors(self, scope: str, stream: str, segment_id: int) -> dict[SegmentRange, list[int]]:
        state = self._stream(scope, stream)
        return {s: list(state.predecessors[s.segment_id]) for s in state.successors.get(segment_id, [])}

    async def get_uri(self, scope: str, stream: str, segment_id: int) -> tuple[str, int]:
        if not stream.endswith("_kvtable"):  # a reader group's (or key-value table's) table segment
            self._stream(scope, stream)
        self.uri_lookups += 1
        return self.endpoint

    # ---- manual scaling -----------------------------------------------------------------------------------
    async def scale(
        self, scope: str, stream: str, sealed: Sequence[int], new_ranges: Sequence[tuple[float, float]]
    ) -> list[SegmentRange]:
        """Replace the ``sealed`` segments by new ones over ``new_ranges``: create, seal, then switch epoch."""
        state = self._stream(scope, stream)
        if state.sealed:
            raise StreamSealedError(scope, stream)
        epoch = state.epoch + 1
        old = {s.segment_id: s for s in state.current}
        created: list[SegmentRange] = []
        for low, high in new_ranges:
            sid = segment_id(state.next_number, epoch)
            state.next_number += 1
            await self.client.create_segment(self._name(scope, stream, sid))
            segment = SegmentRange(sid, low, high)
            created.append(segment)
            state.predecessors[sid] = [p for p in sealed if old[p].overlaps(low, high)]
            for p in state.predecessors[sid]:
                state.successors.setdefault(p, []).append(segment)
        for p in sealed:
            await self.client.seal_segment(self._name(scope, stream, p))
        kept = [s for s in state.current if s.segment_id not in set(sealed)]
        state.epochs.append((time.time() * 1000, sorted(kept + created, key=lambda s: s.key_start)))
        return created

    # ---- transactions -------------------------------------------------------------------------------------
    def _txn(self, scope: str, stream: str, txn_id: uuid.UUID) -> _Txn:
        txn = self._stream(scope, stream).txns.get(txn_id)
        if txn is None:
            raise TxnNotFoundError(scope, stream, txn_id)
        return txn

    async def create_transaction(self, scope: str, stream: str, lease_ms: int) -> tuple[uuid.UUID, list[SegmentRange]]:
        state = self._stream(scope, stream)
        if state.sealed:
            raise StreamSealedError(scope, stream)
        txn_id = uuid.uuid4()
        segments = list(state.current)
        for segment in segments:
            parent = self._name(scope, stream, segment.segment_id)
            await self.client.create_segment(transaction_segment_name(parent, txn_id))
        state.txns[txn_id] = _Txn(segments, lease_ms=lease_ms)
        return txn_id, segments

    async def ping_transaction(self, scope: str, stream: str, txn_id: uuid.UUID, lease_ms: int) -> bool:
        txn = self._txn(scope, stream, txn_id)
        if txn.state != TxnState.OPEN:
            raise TxnFailedError(scope, stream, txn_id, txn.state.name)
        txn.lease_ms = lease_ms
        return True

    async def commit_transaction(
        self, scope: str, stream: str, txn_id: uuid.UUID, writer_id: str = "", timestamp_ms: int = 0
    ) -> bool:
        txn = self._txn(scope, stream, txn_id)
        if txn.state != TxnState.OPEN:
            raise TxnFailedError(scope, stream, txn_id, txn.state.name)
        txn.state = TxnState.COMMITTING
        for segment in txn.segments:
            parent = self._name(scope, stream, segment.segment_id)
            source = transaction_segment_name(parent, txn_id)
            await self.client.seal_segment(source)
            await self.client.merge_segments(parent, source)
        txn.state = TxnState.COMMITTED
        return True

    async def abort_transaction(self, scope: str, stream: str, txn_id: uuid.UUID) -> bool:
        txn = self._txn(scope, stream, txn_id)
        if txn.state != TxnState.OPEN:
            raise TxnFailedError(scope, stream, txn_id, txn.state.name)
        txn.state = TxnState.ABORTING
        for segment in txn.segments:
            parent = self._name(scope, stream, segment.segment_id)
            await self.client.delete_segment(transaction_segment_name(parent, txn_id))
        txn.state = TxnState.ABORTED
        return True

    async def check_transaction_state(self, scope: str, stream: str, txn_id: uuid.UUID) -> TxnState:
        return self._txn(scope, stream, txn_id).state

    async def get_delegation_token(self, scope: str, stream: str, write: bool = True) -> str:
        return ""  # no authentication

    # ---- reader groups (a record each; subscriber cuts kept for the tests to read) ---------------------------
    async def create_reader_group(self, config: ReaderGroupConfig) -> ReaderGroupConfig:
        return self.reader_groups.setdefault((config.scope, config.reader_group), config)

    async def get_reader_group_config(self, scope: str, reader_group: str) -> ReaderGroupConfig:
        found = self.reader_groups.get((scope, reader_group))
        if found is None:
            raise ReaderGroupNotFoundError(scope, reader_group)
        return found

    async def delete_reader_group(self, scope: str, reader_group: str, reader_group_id: uuid.UUID) -> bool:
        return self.reader_groups.pop((scope, reader_group), None) is not None

    async def update_subscriber_stream_cut(
        self, subscriber: str, reader_group_id: uuid.UUID, generation: int, cut: StreamCut
    ) -> None:
        self.subscriber_cuts.setdefault(subscriber, []).append(cut)
