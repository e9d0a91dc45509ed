"""The controller's domain API (Pravega's ``ControllerService``): what every RPC does, in model types.

:class:`ControllerCore` answers queries from the stream metadata store, runs workflows
(:mod:`controller.workflows`), answers ``getURI`` from the container mapping, and does the periodic work of
each stream whose bucket this controller owns (:mod:`controller.periodic`, :mod:`controller.cluster.buckets`):
transaction timeouts, retention, auto-scaling, watermarks, and resuming workflows a controller left midway.
Errors are those of :mod:`controller.errors`.

Below the RPC layer (:mod:`controller.rpc`) and the composition root (:mod:`controller.service`), which it never
imports: it composes the periodic work (:mod:`controller.periodic`, which sees it as
:class:`~controller.periodic.PeriodicCore`), the workflows, the key-value tables, the metadata store and the
segment store calls, and reads the cluster's host store and bucket scope, the configuration, the errors and the
metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable

from controller.cluster.buckets import SoleController, WorkScope
from controller.cluster.host_store import HostStore
from controller.config import ControllerConfig
from controller.errors import (
    ControllerUnavailableError,
    ReaderGroupNotFoundError,
    StreamBeingCreatedError,
    StreamNotFoundError,
    SubscriberNotFoundError,
    from_metadata,
)
from controller.kvt import KeyValueTableConfiguration, KeyValueTables
from controller.metadata import (
    UNBOUNDED,
    ReaderGroupConfigRecord,
    ReaderGroupRetentionType,
    StreamMetadataStore,
    StreamState,
    WriterMarkStatus,
)
from controller.metadata import errors as md
from controller.metrics import NO_METRICS, ControllerMetrics
from controller.periodic import PerStream
from controller.periodic.autoscaler import AutoScaler
from controller.periodic.background import BackgroundWork
from controller.periodic.retention import Retention
from controller.periodic.watermarking import Watermarking
from controller.segment_ops import SegmentStoreOps
from controller.workflows.streams import StreamLocks, StreamWorkflows, wall_clock_ms
from controller.workflows.transactions import TxnWorkflows
from controller_client.model import (
    ReaderGroupConfig,
    ReaderGroupRetention,
    SegmentRange,
    StreamConfiguration,
    StreamCut,
    TxnState,
    qualified_segment_name,
)
from segstore_shared.cluster.layout import ContainerAssignment

log = logging.getLogger(__name__)


class ControllerCore:
    def __init__(
        self,
        config: ControllerConfig,
        store: StreamMetadataStore,
        ops: SegmentStoreOps,
        hosts: HostStore,
        work_scope: WorkScope | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        metrics: ControllerMetrics = NO_METRICS,
    ) -> None:
        """``work_scope``: which streams' periodic work this controller runs (default: all, alone). ``metrics``:
        where scales and truncations are counted (default nowhere)."""
        self.config = config
        self.metrics = metrics
        self.store = store
        self._ops = ops
        self._hosts = hosts
        self.work_scope = work_scope or SoleController(config.advertised_host, config.port)
        self._clock_ms = clock_ms
        locks = StreamLocks()
        self.streams = StreamWorkflows(store, ops, locks, clock_ms)
        self.txns = TxnWorkflows(store, ops, locks, config, clock_ms)
        self.autoscaler = AutoScaler(store, ops, self.scale, config.auto_scale_cooldown_s, clock_ms)
        self.watermarking = Watermarking(store, ops, clock_ms)
        self.retention = Retention(store, ops, self.streams, clock_ms)
        self.background = BackgroundWork(self, self.work_scope)
        self._scales: set[asyncio.Task[object]] = set()

    # ---- lifecycle ------------------------------------------------------------------------------------------
    async def start(self, work_scope: WorkScope | None = None) -> None:
        """Start the periodic work, over ``work_scope`` if given (a controller joins the cluster once its port
        is known, so its scope may come only now)."""
        if work_scope is not None:
            self.work_scope = work_scope
            self.background = BackgroundWork(self, work_scope)
        await self.background.sweep()  # what is owned already is resumed at once
        self.background.start()

    async def stop(self) -> None:
        await self.background.stop()
        for task in self._scales:
            task.cancel()
        for task in list(self._scales):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.txns.close()

    async def resume(self, scope: str, stream: str) -> None:
        """Finish the stream's workflows and transactions left midway; track its open transactions."""
        await self.streams.resume(scope, stream)
        await self.txns.resume(scope, stream)

    async def guarded(self, kind: str, scope: str, stream: str, work: PerStream) -> bool:
        """Run one stream's periodic ``work``; log a failure instead of raising (a stream deleted or still being
        created meanwhile is skipped quietly). True if it ran to the end."""
        try:
            await work(scope, stream)
            return True
        except (md.StreamNotFoundError, md.ScopeNotFoundError):
            return False
        except md.DataNotFoundError:
            if not await self._being_created(scope, stream):
                log.exception("%s of %s/%s failed", kind, scope, stream)
        except Exception:
            log.exception("%s of %s/%s failed", kind, scope, stream)
        return False

    async def all_streams(self) -> AsyncIterator[tuple[str, str]]:
        token = ""
        while True:
            scopes, token = await self.store.list_scopes(token, 1000)
            for scope in scopes:
                stream_token = ""
                while True:
                    try:
                        streams, stream_token = await self.store.list_streams(scope, stream_token, 1000)
                    except md.ScopeNotFoundError:
                        break
                    for stream in streams:
                        yield scope, stream
                    if not streams or not stream_token:
                        break
            if not scopes or not token:
                return

    # ---- scopes ---------------------------------------------------------------------------------------------
    async def create_scope(self, scope: str) -> bool:
        return await self.store.create_scope(scope)

    async def delete_scope(self, scope: str, recursive: bool = False) -> None:
        with from_metadata(scope):
            if recursive:
                async for owner, stream in self.all_streams():
                    if owner == scope:
                        await self.streams.seal(scope, stream)
                        await self.streams.delete(scope, stream)
                groups, _ = await self.store.list_reader_groups(scope)
                for group in groups:
                    await self.store.delete_reader_group(scope, group)
                tables, _ = await self.kvts.list_tables(scope, "", 1_000_000)
                for table in tables:
                    await self.kvts.delete(scope, table)
            await self.store.delete_scope(scope)

    async def scope_exists(self, scope: str) -> bool:
        return await self.store.scope_exists(scope)

    async def list_scopes(self, token: str, limit: int) -> tuple[list[str], str]:
        return await self.store.list_scopes(token, limit)

    # ---- streams --------------------------------------------------------------------------------------------
    async def create_stream(self, scope: str, stream: str, config: StreamConfiguration) -> bool:
        return await self.streams.create(scope, stream, config)

    async def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        await self.streams.update(scope, stream, config)

    async def get_stream_configuration(self, scope: str, stream: str) -> StreamConfiguration:
        with from_metadata(scope, stream):
            return await self.store.get_configuration(scope, stream)

    async def seal_stream(self, scope: str, stream: str) -> None:
        await self._require_stream(scope, stream)
        self.txns.schedule_commits(scope, stream)
        await self.txns.wait_committed(scope, stream)  # transactions marked for commit land first
        await self.streams.seal(scope, stream)

    async def delete_stream(self, scope: str, stream: str) -> None:
        await self.streams.delete(scope, stream)

    async def stream_exists(self, scope: str, stream: str) -> bool:
        with from_metadata(scope, stream):
            return await self.store.stream_exists(scope, stream)

    async def _require_stream(self, scope: str, stream: str) -> None:
        if not await self.stream_exists(scope, stream):
            raise StreamNotFoundError(scope, stream)

    async def list_streams(self, scope: str, token: str, limit: int, tag: str | None) -> tuple[list[str], str]:
        with from_metadata(scope):
            if tag is None:
                names, next_token = await self.store.list_streams(scope, token, limit)
            else:
                names, next_token = await self.store.list_streams_by_tag(scope, tag, token, limit)
        return [n for n in names if not n.startswith("_")], next_token

    async def truncate_stream(self, cut: StreamCut) -> None:
        await self.streams.truncate(cut)
        self.metrics.truncated("request")

    # ---- segments -------------------------------------------------------------------------------------------
    async def _created_state(self, scope: str, stream: str) -> StreamState:
        """The stream's state once its creation has finished. A stream is listed (and ``stream_exists``) from the
        moment its node is written, before its records and first segments: until its state leaves ``CREATING``,
        :class:`StreamBeingCreatedError` (retriable), never a half-made answer (a missing record, a segment the
        segment store does not have yet)."""
        with from_metadata(scope, stream):
            try:
                state = await self.store.get_state(scope, stream)
            except md.DataNotFoundError:  # the state record comes after the stream node
                raise StreamBeingCreatedError(scope, stream) from None
        if state == StreamState.CREATING:
            raise StreamBeingCreatedError(scope, stream)
        return state

    async def current_segments(self, scope: str, stream: str) -> list[SegmentRange]:
        """The active segments; none once the stream is sealed (as Pravega's ``getActiveSegments``)."""
        if await self._created_state(scope, stream) == StreamState.SEALED:
            return []
        with from_metadata(scope, stream):
            return await self.store.get_current_segments(scope, stream)

    async def epoch_segments(self, scope: str, stream: str, epoch: int) -> list[SegmentRange]:
        with from_metadata(scope, stream):
            try:
                record = await self.store.get_epoch(scope, stream, epoch)
            except md.DataNotFoundError:
                raise md.InvalidStreamCutError(f"epoch {epoch} does not exist", scope=scope, name=stream) from None
        return [s.range for s in sorted(record.segments, key=lambda s: s.key_start)]

    async def segments_at_time(self, scope: str, stream: str, time_ms: int) -> dict[int, int]:
        await self._created_state(scope, stream)
        with from_metadata(scope, stream):
            return dict((await self.store.get_segments_at_time(scope, stream, time_ms)).positions)

    async def successors(self, scope: str, stream: str, segment: int) -> dict[SegmentRange, list[int]]:
        with from_metadata(scope, stream):
            return await self.store.get_successors(scope, stream, segment)

    async def segments_between(self, from_cut: StreamCut, to_cut: StreamCut) -> list[int]:
        scope, stream = from_cut.scope, from_cut.stream
        with from_metadata(scope, stream):
            found = await self.store.get_segments_between(scope, stream, from_cut.positions, to_cut.positions)
        return sorted(s if isinstance(s, int) else s.segment_id for s in found)

    async def scale(
        self, scope: str, stream: str, sealed: list[int], new_ranges: list[tuple[float, float]], time_ms: int
    ) -> tuple[list[SegmentRange], int]:
        segments, epoch = await self.streams.submit_scale(
            scope, stream, sealed, new_ranges, time_ms or self._clock_ms()
        )
        self.metrics.scaled()
        task: asyncio.Task[object] = asyncio.get_running_loop().create_task(self._run_scale(scope, stream))
        self._scales.add(task)
        task.add_done_callback(self._scales.discard)
        return segments, epoch

    async def _run_scale(self, scope: str, stream: str) -> None:
        delay = 0.2
        while True:
            try:
                await self.streams.run_scale(scope, stream)
                return
            except Exception:
                log.exception("scale of %s/%s failed; retrying", scope, stream)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def check_scale(self, scope: str, stream: str, epoch: int) -> str:
        with from_metadata(scope, stream):
            status = await self.store.check_scale(scope, stream, epoch)
        return status.value

    async def segment_uri(self, scope: str, stream: str, segment: int) -> tuple[str, int]:
        name = qualified_segment_name(scope, stream, segment)
        endpoint = self._hosts.endpoint_of_segment(name)
        if endpoint is None:
            raise ControllerUnavailableError(f"no segment store runs the container of {name} now")
        return endpoint

    async def is_segment_valid(self, scope: str, stream: str, segment: int) -> bool:
        with contextlib.suppress(md.StreamNotFoundError, md.ScopeNotFoundError, md.DataNotFoundError):
            return await self.store.is_segment_valid(scope, stream, segment)
        return False

    async def is_stream_cut_valid(self, cut: StreamCut) -> bool:
        with contextlib.suppress(md.StreamNotFoundError, md.ScopeNotFoundError, md.DataNotFoundError):
            return await self.store.is_stream_cut_valid(cut.scope, cut.stream, cut.positions)
        return False

    # ---- transactions ---------------------------------------------------------------------------------------
    async def create_transaction(self, scope: str, stream: str, lease_ms: int) -> tuple[uuid.UUID, list[SegmentRange]]:
        return await self.txns.create(scope, stream, lease_ms)

    async def commit_transaction(
        self, scope: str, stream: str, txn_id: uuid.UUID, writer_id: str = "", time_ms: int = -1
    ) -> None:
        """Mark the transaction for commit; with ``writer_id`` and ``time_ms`` (>= 0) the writer's mark is noted at
        the stream's tail once it is merged (watermarks)."""
        await self.txns.commit(scope, stream, txn_id, writer_id, time_ms)

    async def abort_transaction(self, scope: str, stream: str, txn_id: uuid.UUID) -> None:
        await self.txns.abort(scope, stream, txn_id)

    async def ping_transaction(self, scope: str, stream: str, txn_id: uuid.UUID, lease_ms: int) -> TxnState:
        return await self.txns.ping(scope, stream, txn_id, lease_ms)

    async def transaction_state(self, scope: str, stream: str, txn_id: uuid.UUID) -> TxnState:
        return await self.txns.state(scope, stream, txn_id)

    async def completed_transactions(self, scope: str, stream: str) -> list[tuple[uuid.UUID, TxnState]]:
        """The outcome (COMMITTED, ABORTED) of the stream's transactions completed within ``completed_txn_ttl_s``,
        oldest first."""
        with from_metadata(scope, stream):
            completed = await self.store.list_completed_txns(scope, stream)
        completed.sort(key=lambda item: (item[1].complete_time_ms, item[0].hex))
        return [(txn_id, record.status) for txn_id, record in completed]

    async def forget_completed_transactions(self, scope: str, stream: str) -> None:
        """Drop the outcomes older than ``completed_txn_ttl_s`` (periodic work of the bucket's owner)."""
        await self.store.purge_completed_txns(
            scope, stream, self._clock_ms() - int(self.config.completed_txn_ttl_s * 1000)
        )

    # ---- reader groups --------------------------------------------------------------------------------------
    async def create_reader_group(self, config: ReaderGroupConfig) -> ReaderGroupConfig:
        with from_metadata(config.scope, config.reader_group):
            stored = await self.store.create_reader_group(config.scope, config.reader_group, _to_record(config))
        return _from_record(config.scope, config.reader_group, stored)

    async def get_reader_group(self, scope: str, group: str) -> ReaderGroupConfig:
        with from_metadata(scope, group):
            return _from_record(scope, group, await self.store.get_reader_group(scope, group))

    async def update_reader_group(self, config: ReaderGroupConfig) -> int:
        with from_metadata(config.scope, config.reader_group):
            stored = await self.store.update_reader_group(
                config.scope, config.reader_group, _to_record(config), config.generation
            )
        return stored.generation

    async def delete_reader_group(self, scope: str, group: str, group_id: uuid.UUID | None) -> None:
        with from_metadata(scope, group):
            await self.store.delete_reader_group(scope, group, group_id)

    async def list_subscribers(self, scope: str, stream: str) -> list[str]:
        with from_metadata(scope, stream):
            return await self.store.list_subscribers(scope, stream)

    async def update_subscriber_stream_cut(
        self, cut: StreamCut, subscriber: str, group_id: str, generation: int
    ) -> None:
        try:
            reader_group_id = uuid.UUID(group_id)
        except ValueError:
            raise ReaderGroupNotFoundError(cut.scope, subscriber) from None
        with from_metadata(cut.scope, cut.stream):
            try:
                await self.store.update_subscriber_stream_cut(
                    cut.scope, cut.stream, subscriber, reader_group_id, generation, cut.positions
                )
            except md.DataNotFoundError:
                raise SubscriberNotFoundError(cut.scope, cut.stream, subscriber) from None

    # ---- writers and cluster --------------------------------------------------------------------------------
    async def note_writer_mark(self, writer: str, cut: StreamCut, timestamp: int) -> WriterMarkStatus:
        """Record a writer's time and position; INVALID_TIME / INVALID_POSITION (nothing recorded) when it is
        before what the writer noted last."""
        with from_metadata(cut.scope, cut.stream):
            return await self.store.note_writer_mark(cut.scope, cut.stream, writer, timestamp, cut.positions)

    async def remove_writer(self, scope: str, stream: str, writer: str) -> bool:
        """The writer is gone (``removeWriter``, Pravega's ``shutdownWriter``): its mark stops holding
        watermarks back at the next round. False if the writer is unknown."""
        with from_metadata(scope, stream):
            try:
                await self.store.shutdown_writer(scope, stream, writer)
            except md.DataNotFoundError:
                return False
        return True

    async def controller_endpoints(self) -> list[tuple[str, int]]:
        """Every live controller (this one at least, even before its registration lands)."""
        members = await self.work_scope.members()
        own = (self.config.advertised_host, self.config.port)
        return members if own in members or self.config.port == 0 else [own, *members]

    def container_assignment(self) -> ContainerAssignment | None:
        """Which segment store runs which container now (None before the leader assigned them)."""
        return self._hosts.assignment

    async def bucket_assignment(self) -> dict[str, list[int]]:
        return await self.work_scope.assignment()

    # ---- key-value tables (controller.kvt) ------------------------------------------------------------------
    @property
    def kvts(self) -> KeyValueTables:
        """The key-value tables, kept beside the streams (made on first use; they have no periodic work)."""
        tables: KeyValueTables | None = getattr(self, "_kvt_tables", None)
        if tables is None:
            tables = self._kvt_tables = KeyValueTables.over(self.store, self._ops)
        return tables

    async def create_key_value_table(self, scope: str, kvt: str, config: KeyValueTableConfiguration) -> bool:
        return await self.kvts.create(scope, kvt, config)

    async def delete_key_value_table(self, scope: str, kvt: str) -> None:
        await self.kvts.delete(scope, kvt)

    async def list_key_value_tables(self, scope: str, token: str, limit: int) -> tuple[list[str], str]:
        return await self.kvts.list_tables(scope, token, limit)

    async def key_value_table_configuration(self, scope: str, kvt: str) -> KeyValueTableConfiguration:
        return await self.kvts.get_configuration(scope, kvt)

    async def key_value_table_segments(self, scope: str, kvt: str) -> list[SegmentRange]:
        return await self.kvts.current_segments(scope, kvt)

    # ---- auto-scaling ---------------------------------------------------------------------------------------
    async def apply_auto_scaling(self) -> None:
        """Measure every stream with a rate policy and scale those whose traffic asks for it (whatever the
        buckets: for tests and tools; the periodic work runs :meth:`auto_scale` on owned streams)."""
        async for scope, stream in self.all_streams():
            await self.guarded("auto-scale", scope, stream, self.auto_scale)

    async def auto_scale(self, scope: str, stream: str) -> None:
        await self.autoscaler.check(scope, stream)

    async def _being_created(self, scope: str, stream: str) -> bool:
        """Whether a listed stream is not whole yet (its creation has not finished, so records may be missing)
        or is gone; either way a policy loop skips it without an error."""
        from controller.metadata import StreamState

        try:
            return await self.store.get_state(scope, stream) == StreamState.CREATING
        except (md.DataNotFoundError, md.StreamNotFoundError, md.ScopeNotFoundError):
            return True  # the state record comes after the stream node; or the stream went meanwhile

    # ---- retention ------------------------------------------------------------------------------------------
    async def apply_retention(self) -> None:
        """:meth:`retain` every stream (whatever the buckets: for tests and tools)."""
        async for scope, stream in self.all_streams():
            await self.guarded("retention", scope, stream, self.retain)

    async def retain(self, scope: str, stream: str) -> None:
        """Record a tail cut of the stream if it has a retention policy; truncate where the policy (and its
        subscribers) say (``controller.periodic.retention``)."""
        if await self.retention.run(scope, stream) is not None:
            self.metrics.truncated("retention")

    # ---- watermarks -----------------------------------------------------------------------------------------
    async def watermark(self, scope: str, stream: str) -> None:
        """Compute the stream's next watermark from its writers' marks (``controller.periodic.watermarking``)."""
        await self.watermarking.run(scope, stream)


def _cut_or_unbounded(cut: StreamCut) -> StreamCut | str:
    return cut if cut.positions else UNBOUNDED


def _to_record(config: ReaderGroupConfig) -> ReaderGroupConfigRecord:
    return ReaderGroupConfigRecord(
        group_refresh_time_ms=config.group_refresh_time_ms,
        automatic_checkpoint_interval_ms=config.automatic_checkpoint_interval_ms,
        max_outstanding_checkpoint_request=config.max_outstanding_checkpoint_request,
        retention_type=ReaderGroupRetentionType(int(config.retention_type)),
        starting_stream_cuts={f"{c.scope}/{c.stream}": _cut_or_unbounded(c) for c in config.starting_stream_cuts},
        ending_stream_cuts={f"{c.scope}/{c.stream}": _cut_or_unbounded(c) for c in config.ending_stream_cuts},
        rollover_size_bytes=config.rollover_size_bytes,
        generation=config.generation,
    )


def _as_cut(scoped: str, value: StreamCut | str) -> StreamCut:
    if isinstance(value, StreamCut):
        return value
    scope, _, stream = scoped.partition("/")
    return StreamCut(scope, stream, {})


def _from_record(scope: str, group: str, record: ReaderGroupConfigRecord) -> ReaderGroupConfig:
    return ReaderGroupConfig(
        scope=scope,
        reader_group=group,
        starting_stream_cuts=tuple(_as_cut(k, v) for k, v in sorted(record.starting_stream_cuts.items())),
        ending_stream_cuts=tuple(_as_cut(k, v) for k, v in sorted(record.ending_stream_cuts.items())),
        group_refresh_time_ms=record.group_refresh_time_ms,
        automatic_checkpoint_interval_ms=record.automatic_checkpoint_interval_ms,
        max_outstanding_checkpoint_request=record.max_outstanding_checkpoint_request,
        retention_type=ReaderGroupRetention(int(record.retention_type)),
        generation=record.generation,
        reader_group_id=record.reader_group_id,
        rollover_size_bytes=record.rollover_size_bytes,
    )
