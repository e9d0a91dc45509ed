"""StreamManager: scopes, streams, their policies and stream cuts, and the factory of writers and readers.

:class:`StreamManager` combines the controller (:class:`~controller_client.ports.ControllerApi`) with one
:class:`~segment_store.client.SegmentClient` whose endpoint resolver asks the controller which segment store
serves a segment (:class:`ControllerResolver`). Writers and readers it makes share that client (one
connection pool per manager).

Stream cuts:

* ``head_cut`` - where reading starts: the controller's segments at time 0 (the truncation point), each
  offset raised to the segment's start if the segment store truncated further;
* ``tail_cut`` - the current segments at their current lengths (what is written by now);
* ``cut_at_time`` - per segment live at a wall-clock time, the first event ingested at or after it;
* ``truncate(cut)`` - drop everything before a cut.

Use from one event loop; see :mod:`controller_client.blocking.streams` for threads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from controller_client.controller.delegation_tokens import ControllerTokens
from controller_client.kvt.model import KeyValueTableConfiguration, validate_kvt
from controller_client.kvt.table import KeyValueTable, KvtControllerApi
from controller_client.model import (
    TRANSACTION_DELIMITER,
    ReaderGroupRetention,
    RetentionPolicy,
    ScalingPolicy,
    SegmentRange,
    StreamConfiguration,
    StreamCut,
    parse_segment_name,
    qualified_segment_name,
    validate_scope_name,
    validate_stream_name,
)
from controller_client.ports import ControllerApi, Endpoint
from controller_client.reader_groups.group import ReaderGroup, create_reader_group, open_reader_group
from controller_client.readers.stream_reader import StreamReader, StreamReaderConfig, read_segment_range
from controller_client.watermarks import Watermark, decode_watermark_events, mark_stream
from controller_client.writers.event_writer import EventStreamWriter, EventWriterConfig
from controller_client.writers.routing import KeyHasher
from controller_client.writers.txn_writer import TransactionalEventStreamWriter, TxnWriterConfig
from segment_store.client import (
    ClientConfig,
    ConnectFailedError,
    ConnectionLostError,
    NoSuchSegmentError,
    ReaderConfig,
    RetryPolicy,
    SegmentClient,
    SegmentIsTruncatedError,
    SegmentStatus,
    SegmentStoreUnreachableError,
    WrongHostError,
)
from segment_store.client.retry import is_retriable
from segment_store.protocol import parse_events
from segstore_shared import deadline
from segstore_shared.auth.tls import TrustConfig
from segstore_shared.deadline import DEFAULT_UNREACHABLE_TIMEOUT_S

_T = TypeVar("_T")
TAIL_CUT_SCALE_WAIT_S = 10.0
"""How long :meth:`StreamManager.tail_cut` waits for a scale it finds half done (seals made, epoch not yet moved)."""


def _moved(error: BaseException) -> bool:
    """A segment call to try again on the segment's new owner: its old one answered WrongHost."""
    return isinstance(error, WrongHostError)


@dataclass(frozen=True, slots=True)
class StreamManagerConfig:
    """A stream manager and the segment client it owns."""

    client: ClientConfig = field(default_factory=ClientConfig)
    """The segment client (connections, writer window, reader prefetch)."""
    endpoint_cache_ttl_ms: int = 10_000
    """How long a segment's endpoint from the controller is trusted without a sign it moved."""
    retry_timeout_s: float | None = None
    """The budget for "unreachable" of every call of this manager: a controller or a segment store it cannot reach
    fails the call after this long (``ControllerUnavailableError``, ``SegmentStoreUnreachableError``, naming the
    URI or ``host:port``). None: the controller client's ``retry_timeout_s`` (30 s by default), so one setting
    rules both. What is worth retrying (a container moving: WrongHost; a lost connection; a leader change) is
    retried within it, never past it."""
    controller_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=10, max_delay_ms=2_000))
    """Retries of controller calls that fail retriably, within the budget; an unreachable controller is not among
    them: the controller client retried it for the whole budget already (``segstore_shared.deadline``)."""
    segment_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=1_000, max_delay_ms=1_000))
    """Retries of this manager's own segment calls after WrongHost / a lost connection (endpoint re-resolved), until
    the budget is spent (its ``max_attempts`` is only a backstop)."""
    trust_store: str | None = None
    """TLS: PEM file trusted in the segment stores (and in the controller, for ``BlockingStreamManager.connect``);
    None = the controller client's trust store (the system's default trust if it has none). TLS to the segment
    stores follows the controller client (a ``tls://`` URI), unless ``client.connection.tls`` is set."""

    def __post_init__(self) -> None:
        if self.endpoint_cache_ttl_ms < 0:
            raise ValueError("endpoint_cache_ttl_ms: must not be negative")
        if self.retry_timeout_s is not None and self.retry_timeout_s <= 0:
            raise ValueError(f"retry_timeout_s: must be positive, not {self.retry_timeout_s}")


@dataclass(slots=True)
class _Cached:
    endpoint: Endpoint
    expires: float
    seen_live: bool = False


class ControllerResolver:
    """Segment name -> segment store endpoint through the controller's ``getURI``, cached per segment.

    A transaction segment resolves as its parent (same container). A cached endpoint is asked for again
    when it is older than ``ttl_ms``, after :meth:`invalidate` (callers do that on ``WrongHost``), and
    when the connections to it that were live are all gone (``is_alive``: the segment store went away).
    Raises InvalidModelError for a name that is not a stream segment, and the controller's errors.
    """

    def __init__(
        self,
        controller: ControllerApi,
        ttl_ms: int = 10_000,
        is_alive: Callable[[Endpoint], bool] | None = None,
        retry: RetryPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 100_000,
    ) -> None:
        self._controller = controller
        self._ttl_s = ttl_ms / 1000.0
        self._is_alive = is_alive
        self._retry = retry or RetryPolicy(max_attempts=10, max_delay_ms=2_000)
        self._clock = clock
        self._max_entries = max_entries
        self._cache: dict[tuple[str, str, int], _Cached] = {}
        self.lookups = 0
        """How many times the controller was asked; for tests and metrics."""

    @staticmethod
    def _key(segment: str) -> tuple[str, str, int]:
        parsed = parse_segment_name(segment.split(TRANSACTION_DELIMITER, 1)[0])
        return parsed.scope, parsed.stream, parsed.segment_id

    async def __call__(self, segment: str) -> Endpoint:
        key = self._key(segment)
        now = self._clock()
        entry = self._cache.get(key)
        if entry is not None and now < entry.expires:
            if self._is_alive is None:
                return entry.endpoint
            if self._is_alive(entry.endpoint):
                entry.seen_live = True
                return entry.endpoint
            if not entry.seen_live:
                return entry.endpoint  # not connected yet; connections that died force a new lookup
        scope, stream, segment_id = key
        endpoint = await self._retry.call(lambda: self._controller.get_uri(scope, stream, segment_id))
        self.lookups += 1
        if len(self._cache) >= self._max_entries:
            self._cache.clear()
        endpoint = (endpoint[0], endpoint[1])
        self._cache[key] = _Cached(endpoint, now + self._ttl_s)
        return endpoint

    def invalidate(self, segment: str) -> None:
        """Forget the endpoint of ``segment`` (the next call asks the controller)."""
        self._cache.pop(self._key(segment), None)

    def invalidate_endpoint(self, endpoint: Endpoint) -> None:
        """Forget every segment served by ``endpoint``."""
        for key in [k for k, v in self._cache.items() if v.endpoint == endpoint]:
            del self._cache[key]


class StreamManager:
    """Manage scopes and streams; make writers and readers. ``async with`` (or ``close()``) closes the
    segment client if this manager created it.

    ``segment_client``: None makes one that resolves endpoints through the controller (the normal case);
    pass one to share a pool or to pin a static endpoint.
    """

    def __init__(
        self,
        controller: ControllerApi,
        segment_client: SegmentClient | None = None,
        config: StreamManagerConfig | None = None,
    ) -> None:
        self.config = config or StreamManagerConfig()
        self.controller = controller
        budget = self.config.retry_timeout_s or getattr(controller, "unreachable_timeout_s", None)
        self.retry_timeout_s: float = budget if isinstance(budget, int | float) else DEFAULT_UNREACHABLE_TIMEOUT_S
        """The budget of every call (``StreamManagerConfig.retry_timeout_s``)."""
        self._owns_client = segment_client is None
        self.resolver: ControllerResolver | None = None
        if segment_client is None:
            holder: list[SegmentClient] = []
            self.resolver = ControllerResolver(
                controller,
                self.config.endpoint_cache_ttl_ms,
                is_alive=lambda endpoint: bool(holder and holder[0].pool.connections(endpoint)),
                retry=self.config.controller_retry,
            )
            tokens = ControllerTokens(controller.get_delegation_token)
            segment_client = SegmentClient(
                self.resolver, self._client_config(controller), tokens=tokens, on_moved=self.invalidate_segment
            )
            holder.append(segment_client)
        self.client = segment_client
        self.hasher = KeyHasher()

    def _client_config(self, controller: ControllerApi) -> ClientConfig:
        """The segment client's settings: TLS as the controller client has it (Pravega's rule: the controller
        URI's scheme decides), with this config's trust store if given; an explicit ``connection.tls`` wins."""
        client = self.config.client
        trust = getattr(controller, "tls", None)
        if client.connection.tls is not None or not isinstance(trust, TrustConfig):
            return client
        if self.config.trust_store:
            trust = dataclasses.replace(trust, trust_store=Path(self.config.trust_store))
        return dataclasses.replace(client, connection=dataclasses.replace(client.connection, tls=trust))

    async def __aenter__(self) -> StreamManager:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the segment client if this manager made it (writers and readers made here stop working)."""
        if self._owns_client:
            await self.client.close()

    async def _controller_call(self, call: Callable[[], Awaitable[_T]]) -> _T:
        with deadline.budget(self.retry_timeout_s):
            return await self.config.controller_retry.call(call)

    async def _segment_call(self, segment: str, call: Callable[[], Awaitable[_T]], moved_only: bool = False) -> _T:
        """A segment call that forgets the cached endpoint and retries after WrongHost or a lost connection (only
        after WrongHost if ``moved_only``), within the budget; a segment store not reached within it raises
        SegmentStoreUnreachableError."""

        async def attempt() -> _T:
            try:
                return await call()
            except (WrongHostError, ConnectionLostError):
                if self.resolver is not None:
                    self.resolver.invalidate(segment)
                raise

        with deadline.budget(self.retry_timeout_s) as budget:
            retried_outside = budget.retrying
            try:
                return await self.config.segment_retry.call(attempt, _moved if moved_only else is_retriable)
            except ConnectFailedError as error:
                if retried_outside:
                    raise  # the retry loop around this call goes on, or gives up, itself
                raise SegmentStoreUnreachableError(error, budget.elapsed_s()) from error

    def _invalidate(self, segment: str) -> None:
        if self.resolver is not None:
            self.resolver.invalidate(segment)

    async def segment_call(self, segment: str, call: Callable[[], Awaitable[_T]], moved_only: bool = False) -> _T:
        """Run ``call`` on ``segment``, retried after WrongHost or a lost connection (for reader groups); with
        ``moved_only``, after WrongHost only (a lost connection is the caller's to judge: a Pravega segment store
        hangs up on a command it does not know)."""
        return await self._segment_call(segment, call, moved_only)

    def invalidate_segment(self, segment: str) -> None:
        """Forget the cached endpoint of ``segment`` (its segment store moved or went away)."""
        self._invalidate(segment)

    # ---- scopes -------------------------------------------------------------------------------------------

    async def create_scope(self, scope: str) -> bool:
        """Create ``scope``; False if it existed. Raises InvalidModelError for a bad name."""
        validate_scope_name(scope)
        return await self._controller_call(lambda: self.controller.create_scope(scope))

    async def delete_scope(self, scope: str) -> None:
        """Delete an empty scope. Raises ScopeNotEmptyError."""
        await self._controller_call(lambda: self.controller.delete_scope(scope))

    async def scope_exists(self, scope: str) -> bool:
        return await self._controller_call(lambda: self.controller.scope_exists(scope))

    async def list_scopes(self) -> list[str]:
        return [scope async for scope in self.controller.list_scopes()]

    # ---- streams ------------------------------------------------------------------------------------------

    async def create_stream(self, scope: str, stream: str, config: StreamConfiguration | None = None) -> bool:
        """Create ``scope/stream`` (default: one segment, no retention); False if it existed.

        Raises ScopeNotFoundError, InvalidModelError for a bad name."""
        validate_stream_name(stream, internal=False)
        settings = config or StreamConfiguration()
        return await self._controller_call(lambda: self.controller.create_stream(scope, stream, settings))

    async def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        """Replace the stream's configuration. Raises StreamNotFoundError."""
        await self._controller_call(lambda: self.controller.update_stream(scope, stream, config))

    async def get_stream_configuration(self, scope: str, stream: str) -> StreamConfiguration:
        return await self._controller_call(lambda: self.controller.get_stream_configuration(scope, stream))

    async def update_scaling_policy(self, scope: str, stream: str, policy: ScalingPolicy) -> None:
        """Change only the scaling policy (read-modify-write of the configuration)."""
        current = await self.get_stream_configuration(scope, stream)
        await self.update_stream(scope, stream, dataclasses.replace(current, scaling=policy))

    async def update_retention_policy(self, scope: str, stream: str, policy: RetentionPolicy | None) -> None:
        """Change only the retention policy (None: keep everything)."""
        current = await self.get_stream_configuration(scope, stream)
        await self.update_stream(scope, stream, dataclasses.replace(current, retention=policy))

    async def seal_stream(self, scope: str, stream: str) -> None:
        """Seal the stream: writers fail with StreamSealedError, readers end after its last event."""
        await self._controller_call(lambda: self.controller.seal_stream(scope, stream))

    async def delete_stream(self, scope: str, stream: str) -> None:
        """Delete a sealed stream. Raises StreamNotSealedError, StreamNotFoundError."""
        await self._controller_call(lambda: self.controller.delete_stream(scope, stream))

    async def stream_exists(self, scope: str, stream: str) -> bool:
        return await self._controller_call(lambda: self.controller.stream_exists(scope, stream))

    async def list_streams(self, scope: str, tag: str | None = None) -> list[str]:
        """The streams of ``scope`` (with ``tag`` only, if given)."""
        return [name async for name in self.controller.list_streams(scope, tag)]

    async def current_segments(self, scope: str, stream: str) -> list[SegmentRange]:
        """The active segments, by key range (empty for a sealed stream)."""
        return await self._controller_call(lambda: self.controller.get_current_segments(scope, stream))

    # ---- stream cuts --------------------------------------------------------------------------------------

    async def segment_info(self, scope: str, stream: str, segment_id: int) -> SegmentStatus:
        """The segment store's view of one segment (length, start, sealed)."""
        name = qualified_segment_name(scope, stream, segment_id)
        return await self._segment_call(name, lambda: self.client.get_segment_info(name))

    async def head_cut(self, scope: str, stream: str) -> StreamCut:
        """The first readable position of every key (the truncation point). Raises StreamNotFoundError."""
        cut = await self._controller_call(lambda: self.controller.get_segments_at_time(scope, stream, 0))
        positions: dict[int, int] = {}
        for segment_id, offset in cut.positions.items():
            info = await self.segment_info(scope, stream, segment_id)
            positions[segment_id] = max(offset, info.start_offset)
        return StreamCut(scope, stream, positions)

    async def tail_cut(self, scope: str, stream: str) -> StreamCut:
        """The current segments at their current lengths: every event acknowledged before the call is before it.
        Raises StreamNotFoundError; a sealed stream has no current segments, so its tail is the end of the segments
        it was sealed with.

        A current segment found sealed is the middle of a scale: its successors exist and take appends (writers
        follow the seal at once) before the controller makes their epoch current, so a cut of the sealed segments
        would leave those acknowledged appends out. The cut is then asked again (the epoch moves milliseconds
        after the seals) for up to ``TAIL_CUT_SCALE_WAIT_S``; a scale stuck longer gets the sealed segments'
        ends."""
        deadline = asyncio.get_running_loop().time() + TAIL_CUT_SCALE_WAIT_S
        pause_s = 0.01
        while True:
            segments = await self.current_segments(scope, stream)
            if segments:
                ids = [s.segment_id for s in segments]
            else:  # sealed: its last epoch's segments at their ends
                cut = await self._controller_call(
                    lambda: self.controller.get_segments_at_time(scope, stream, 2**63 - 1)
                )
                ids = list(cut.positions)
            infos = await asyncio.gather(*(self.segment_info(scope, stream, sid) for sid in ids))  # at once
            mid_scale = segments and any(info.sealed for info in infos)
            if not mid_scale or asyncio.get_running_loop().time() >= deadline:
                return StreamCut(scope, stream, {sid: info.write_offset for sid, info in zip(ids, infos, strict=True)})
            await asyncio.sleep(pause_s)
            pause_s = min(2 * pause_s, 0.5)

    async def cut_at_time(self, scope: str, stream: str, timestamp_ms: int) -> StreamCut:
        """Per segment live at ``timestamp_ms`` (epoch ms), the first event ingested at or after it (the
        segment's end if every event is older): reading from this cut reads exactly the events ingested
        at or after that time. The segment stores keep every event's ingestion time (a transaction's events
        carry the time it was committed). Raises StreamNotFoundError; NoSuchSegmentError if a segment live then has been
        truncated away since (the head is then the earliest readable cut)."""
        cut = await self._controller_call(lambda: self.controller.get_segments_at_time(scope, stream, timestamp_ms))
        positions: dict[int, int] = {}
        for segment_id, offset in cut.positions.items():
            located = await self.offset_at_time(scope, stream, segment_id, timestamp_ms)
            positions[segment_id] = max(offset, located)
        return StreamCut(scope, stream, positions)

    async def offset_at_time(self, scope: str, stream: str, segment_id: int, timestamp_ms: int) -> int:
        """The offset of the segment's first event ingested at or after ``timestamp_ms`` (its length if every
        event is older). Raises NoSuchSegmentError."""
        name = qualified_segment_name(scope, stream, segment_id)
        return await self._segment_call(name, lambda: self.client.offset_at_time(name, timestamp_ms))

    async def offset_before_time(self, scope: str, stream: str, segment_id: int, timestamp_ms: int) -> int | None:
        """The least offset of the segment from which every event was ingested at or after ``timestamp_ms`` (where
        a read of the older events may stop), or None if its segment store cannot tell. Raises NoSuchSegmentError."""
        name = qualified_segment_name(scope, stream, segment_id)
        return await self._segment_call(name, lambda: self.client.offset_before_time(name, timestamp_ms))

    async def truncate(self, cut: StreamCut) -> None:
        """Drop everything before ``cut``. Raises StreamNotFoundError, the controller's InvalidArgumentError."""
        await self._controller_call(lambda: self.controller.truncate_stream(cut))

    async def read_segment_range(
        self, scope: str, stream: str, segment_id: int, start: int = 0, end: int | None = None
    ) -> bytes:
        """The bytes ``[start, end)`` of one segment (end None: its current length)."""
        return await read_segment_range(self.client, scope, stream, segment_id, start, end)

    async def watermarks(self, scope: str, stream: str) -> list[Watermark]:
        """The stream's watermarks so far, oldest first (none before its writers note times; see
        :mod:`controller_client.watermarks`)."""
        name = qualified_segment_name(scope, mark_stream(stream), 0)
        try:
            data = await self._segment_call(name, lambda: self.read_segment_range(scope, mark_stream(stream), 0))
        except NoSuchSegmentError:
            return []
        return [Watermark.decode(event.data) for event in parse_events(data)]

    async def watermarks_from(self, scope: str, stream: str, offset: int = 0) -> tuple[list[Watermark], int]:
        """The watermarks whose events start at or after ``offset`` of the mark segment (0, or an offset this
        returned before: an event boundary), oldest first, and where to read from next time (after the last whole
        event: a partial last one is left for then). Below the segment's start (truncated) it reads from the start,
        so the truncated watermarks are skipped; no mark segment yet (no writer noted a time): ``([], offset)``.
        Only the new bytes are read, so a reader that follows the stream pays for each watermark once."""
        mark = mark_stream(stream)
        name = qualified_segment_name(scope, mark, 0)
        try:
            info = await self._segment_call(name, lambda: self.client.get_segment_info(name))
            start = max(offset, info.start_offset)
            if not info.exists or info.deleted or start >= info.write_offset:
                return [], start
            try:
                data = await self._segment_call(
                    name, lambda: self.read_segment_range(scope, mark, 0, start, info.write_offset)
                )
            except SegmentIsTruncatedError as error:  # truncated between the two calls: from its new start
                return await self.watermarks_from(scope, stream, error.start_offset)
        except NoSuchSegmentError:
            return [], offset
        return decode_watermark_events(data, start)

    # ---- key-value tables ---------------------------------------------------------------------------------
    def _kvt_controller(self) -> KvtControllerApi:
        if not isinstance(self.controller, KvtControllerApi):
            raise TypeError(f"{type(self.controller).__name__} has no key-value table calls")
        return self.controller

    async def create_key_value_table(self, scope: str, kvt: str, config: KeyValueTableConfiguration) -> bool:
        """Create the table (its partitions as table segments); False if it existed. Raises ScopeNotFoundError,
        InvalidModelError for a bad name."""
        validate_kvt(scope, kvt)
        controller = self._kvt_controller()
        return await self._controller_call(lambda: controller.create_key_value_table(scope, kvt, config))

    async def delete_key_value_table(self, scope: str, kvt: str) -> bool:
        """Delete the table and all its entries; False if there was none."""
        controller = self._kvt_controller()
        return await self._controller_call(lambda: controller.delete_key_value_table(scope, kvt))

    async def list_key_value_tables(self, scope: str) -> list[str]:
        """The tables of ``scope``. Raises ScopeNotFoundError."""
        return [name async for name in self._kvt_controller().list_key_value_tables(scope)]

    async def get_key_value_table_configuration(self, scope: str, kvt: str) -> KeyValueTableConfiguration:
        """Raises KeyValueTableNotFoundError."""
        controller = self._kvt_controller()
        return await self._controller_call(lambda: controller.get_key_value_table_configuration(scope, kvt))

    async def key_value_table(self, scope: str, kvt: str) -> KeyValueTable:
        """A client of the table on this manager's segment client. Raises KeyValueTableNotFoundError."""
        controller = self._kvt_controller()
        return await self._controller_call(
            lambda: KeyValueTable.open(controller, self.client, scope, kvt, self._segment_call)
        )

    def key_value_table_of(
        self, scope: str, kvt: str, config: KeyValueTableConfiguration, segments: Sequence[SegmentRange]
    ) -> KeyValueTable:
        """A client of a table described already (by the controller, to someone else: a Spark driver hands its
        executors the configuration and segments); it makes no controller call but ``getURI`` and tokens."""
        return KeyValueTable(scope, kvt, config, segments, self.client, self._segment_call)

    # ---- writers and readers -------------------------------------------------------------------------------

    async def create_writer(
        self, scope: str, stream: str, config: EventWriterConfig | None = None, writer_id: uuid.UUID | None = None
    ) -> EventStreamWriter:
        """An opened event writer. Raises StreamNotFoundError, StreamSealedError."""
        writer = EventStreamWriter(self.controller, self.client, scope, stream, config, writer_id, self.hasher)
        await writer.open()
        return writer

    def create_txn_writer(
        self, scope: str, stream: str, config: TxnWriterConfig | None = None, writer_id: uuid.UUID | None = None
    ) -> TransactionalEventStreamWriter:
        """A transactional writer (``begin()`` opens transactions)."""
        return TransactionalEventStreamWriter(
            self.controller, self.client, scope, stream, config, writer_id, self.hasher
        )

    # ---- reader groups ---------------------------------------------------------------------------------------

    async def create_reader_group(
        self,
        scope: str,
        group: str,
        start: Sequence[StreamCut],
        end: Sequence[StreamCut] = (),
        retention: ReaderGroupRetention = ReaderGroupRetention.NONE,
        refresh_ms: int = 3000,
        automatic_checkpoint_ms: int = 30_000,
    ) -> ReaderGroup:
        """Create (or, if it exists, open) reader group ``scope/group`` over the streams of ``start`` (one cut
        per stream; ``StreamCut(scope, stream, {})`` is its head) up to ``end``. See
        :mod:`controller_client.reader_groups.group`."""
        return await create_reader_group(self, scope, group, start, end, retention, refresh_ms, automatic_checkpoint_ms)

    async def reader_group(self, scope: str, group: str) -> ReaderGroup:
        """An existing reader group (ours or the official client's); ReaderGroupNotInitializedError if none."""
        return await open_reader_group(self, scope, group)

    async def delete_reader_group(self, scope: str, group: str) -> None:
        """Delete a reader group's state and controller record."""
        await (await open_reader_group(self, scope, group)).delete()

    def create_reader(
        self,
        scope: str,
        stream: str,
        start: StreamCut | None = None,
        end: StreamCut | None = None,
        config: StreamReaderConfig | None = None,
        segment_reader: ReaderConfig | None = None,
    ) -> StreamReader:
        """A reader from ``start`` (None: head) to ``end`` (None: follow the tail)."""
        if segment_reader is not None:
            config = dataclasses.replace(config or StreamReaderConfig(), segment_reader=segment_reader)
        return StreamReader(
            self.controller, self.client, scope, stream, start, end, config, self._invalidate, self.retry_timeout_s
        )
