"""Metrics of one segment store process (Prometheus), measured where the work happens, cheaply.

:class:`StoreMetrics` is the null object every component holds by default: its hooks do nothing and its
wrappers return what they are given, so a process without ``--metrics-port`` (tests, embedding) runs as
before. :class:`SegmentStoreMetrics` keeps its collectors on its own ``CollectorRegistry`` (never the global
default one: several processes' worth can live in one test process). The composition root
(:class:`~segment_store.server.service.SegmentStoreService`) builds one when asked for a metrics port and
hands it to the containers.

This module sits below the containers and the read index (they take a :class:`StoreMetrics`), above Tier-1
and Tier-2 only (it wraps their ports), and knows nothing of the server: what it reports of a running
process at scrape time it reads through :class:`LevelSource`, which the service implements.

Cost on the append path: per append *block* (one wire ``Append``, however many events) one clock read,
two counter increments and one histogram observation; per Tier-1 write (a data frame of many appends) one
clock read and a done-callback. Everything that is a level (backlog, cache use, connections, containers) is
computed at scrape time (:class:`StoreLevels`, read by :class:`_ScrapeCollector`), never updated on the hot
path. There are no labels by segment name (their cardinality is unbounded); the only label with more than a
few values is ``container``, bounded by the container count.

The event loop's lag and stalls and the activities that explain them (GC pauses, fsyncs, Parquet encoding,
group commits, flushes, checkpoints: :mod:`segstore_shared.loop_stalls`) are reported through
:attr:`SegmentStoreMetrics.loop` by the recorder :meth:`StoreMetrics.loop_watch` gives; the service starts it
with the metrics port and serves its recent stalls on ``/stalls``. Its cost: one timer callback every 5 ms and
one histogram observation per timed activity (none per append).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from segment_store.storage.chunk_storage import ChunkData, ChunkInfo, ChunkStorage, as_buffers
from segment_store.tier1.log import DurableDataLog, LogAddress, ReadItem
from segstore_shared.loop_stalls import ACTIVITY, LoopMetrics, LoopStallRecorder

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Append, Tier-1 and Tier-2 latencies: from half a millisecond (an in-memory log) to seconds (an outage)."""
RECOVERY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(frozen=True, slots=True)
class StoreLevels:
    """The levels of one segment store process, read when scraped (none is updated on the hot path)."""

    unflushed_bytes: Mapping[int, int]
    """Bytes appended but not yet flushed to Tier-2, per running container."""
    cache_used_bytes: int
    """Read cache in use, all containers."""
    cache_limit_bytes: int
    """Read cache budget of the process."""
    cache_evicted_bytes: int
    """Bytes evicted from the read cache so far."""
    connections: int
    """Open client connections."""
    containers_owned: int
    """Containers running (serving) here."""
    ready: bool
    """Every container assigned here is recovered."""
    tables: tuple[TableLevel, ...] = ()
    """Each Iceberg table of the containers running here (none without ``--iceberg-tables``)."""


@dataclass(frozen=True, slots=True)
class TableLevel:
    """One Iceberg table as the table maintainer saw it after its last pass (definitions:
    :mod:`segment_store.iceberg.status`). Label ``table`` (``scope/stream``): bounded by the opted-in streams."""

    table: str
    lag_bytes: int
    lag_age_s: float
    data_files: int
    failed_passes: int


class LevelSource(Protocol):
    """What :meth:`StoreMetrics.watch` reads at scrape time: the composition root
    (:class:`~segment_store.server.service.SegmentStoreService`) implements it, so the metrics need not know it."""

    def levels(self) -> StoreLevels:
        """The levels now (called on the event loop: the metrics HTTP server runs there)."""
        ...


class StoreMetrics:
    """The null object: no metrics. Subclassed by :class:`SegmentStoreMetrics`, which measures."""

    registry: CollectorRegistry | None = None

    def appended(self, size: int, seconds: float) -> None:
        """An append block of ``size`` bytes became durable ``seconds`` after it was submitted."""

    def throttled(self) -> None:
        """An append had to wait for room (Tier-2 lags or the cache is full)."""

    def read(self, source: str, size: int) -> None:
        """A read answered ``size`` bytes from ``source`` (``cache`` or ``tier2``)."""

    def recovered(self, seconds: float) -> None:
        """A container was recovered (started) in ``seconds``."""

    def data_log(self, container_id: int, log: DurableDataLog) -> DurableDataLog:
        """``log``, measured (Tier-1 writes of container ``container_id``)."""
        return log

    def chunks(self, container_id: int, chunks: ChunkStorage) -> ChunkStorage:
        """``chunks``, measured (Tier-2 writes of container ``container_id``)."""
        return chunks

    def watch(self, service: LevelSource) -> None:
        """Report the levels of ``service`` (backlog, cache, connections, containers), read at scrape time."""

    def loop_watch(self) -> LoopStallRecorder | None:
        """A recorder of the event loop's lag and stalls reporting here (the caller starts it), or None."""
        return None


NO_METRICS = StoreMetrics()


class SegmentStoreMetrics(StoreMetrics):
    """The segment store's collectors on a registry of their own (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry = registry or CollectorRegistry()
        self._registry = registry
        self.appends = Counter("segstore_appends", "Append blocks made durable", registry=registry)
        self.append_bytes = Counter("segstore_append_bytes", "Bytes of appends made durable", registry=registry)
        self.append_latency = Histogram(
            "segstore_append_latency_seconds",
            "From an append's submission to its acknowledgement (durable in Tier-1)",
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.throttled_appends = Counter(
            "segstore_throttled_appends",
            "Appends that waited for room (Tier-2 backlog or cache full)",
            registry=registry,
        )
        reads = Counter("segstore_reads", "Reads answered, by source", ["source"], registry=registry)
        read_bytes = Counter("segstore_read_bytes", "Bytes read, by source", ["source"], registry=registry)
        self._reads = {source: (reads.labels(source), read_bytes.labels(source)) for source in ("cache", "tier2")}
        self.tier1_latency = Histogram(
            "segstore_tier1_write_latency_seconds",
            "Tier-1 writes (data frames) from call to durable, per container",
            ["container"],
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.tier1_bytes = Counter(
            "segstore_tier1_written_bytes", "Bytes written to Tier-1, per container", ["container"], registry=registry
        )
        self.tier2_latency = Histogram(
            "segstore_tier2_write_latency_seconds",
            "Tier-2 chunk writes (flushes, journal, snapshots), per container",
            ["container"],
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.tier2_bytes = Counter(
            "segstore_tier2_written_bytes", "Bytes written to Tier-2, per container", ["container"], registry=registry
        )
        self.recovery = Histogram(
            "segstore_container_recovery_seconds",
            "Time to recover (start) a container: Tier-1 fencing and replay, Tier-2 open",
            buckets=RECOVERY_BUCKETS_S,
            registry=registry,
        )
        self.loop = LoopMetrics(registry, "segstore")
        """Event-loop lag and stalls, GC pauses and the timed activities (segstore_shared.loop_stalls)."""

    def appended(self, size: int, seconds: float) -> None:
        self.appends.inc()
        self.append_bytes.inc(size)
        self.append_latency.observe(seconds)

    def throttled(self) -> None:
        self.throttled_appends.inc()

    def read(self, source: str, size: int) -> None:
        count, nbytes = self._reads[source]
        count.inc()
        nbytes.inc(size)

    def recovered(self, seconds: float) -> None:
        self.recovery.observe(seconds)

    def data_log(self, container_id: int, log: DurableDataLog) -> DurableDataLog:
        label = str(container_id)
        return MeteredDataLog(log, self.tier1_latency.labels(label), self.tier1_bytes.labels(label))

    def chunks(self, container_id: int, chunks: ChunkStorage) -> ChunkStorage:
        label = str(container_id)
        return MeteredChunkStorage(chunks, self.tier2_latency.labels(label), self.tier2_bytes.labels(label))

    def watch(self, service: LevelSource) -> None:
        self._registry.register(_ScrapeCollector(service))

    def loop_watch(self) -> LoopStallRecorder:
        return LoopStallRecorder(ACTIVITY, self.loop)


class MeteredDataLog:
    """A :class:`DurableDataLog` that times its appends (call to durable) and counts their bytes."""

    def __init__(self, inner: DurableDataLog, latency: Histogram, written: Counter) -> None:
        self._inner = inner
        self._latency = latency
        self._written = written

    @property
    def epoch(self) -> int:
        return self._inner.epoch

    @property
    def max_append_length(self) -> int:
        return self._inner.max_append_length

    async def initialize(self, timeout: float = 60.0) -> None:
        await self._inner.initialize(timeout)

    def append(self, data: bytes | bytearray) -> asyncio.Future[LogAddress]:
        future = self._inner.append(data)
        started = time.perf_counter()
        size = len(data)

        def done(result: asyncio.Future[LogAddress]) -> None:
            if not result.cancelled() and result.exception() is None:
                self._latency.observe(time.perf_counter() - started)
                self._written.inc(size)

        future.add_done_callback(done)
        return future

    def read(self) -> AsyncIterator[ReadItem]:
        return self._inner.read()

    async def truncate(self, upto: LogAddress) -> None:
        await self._inner.truncate(upto)

    async def close(self) -> None:
        await self._inner.close()


class MeteredChunkStorage:
    """A :class:`ChunkStorage` that times its chunk writes and counts their bytes (thread-safe as the
    collectors are); every other call goes straight through."""

    def __init__(self, inner: ChunkStorage, latency: Histogram, written: Counter) -> None:
        self._inner = inner
        self._latency = latency
        self._written = written

    def write_chunk(self, name: str, data: ChunkData) -> ChunkInfo:
        started = time.perf_counter()
        info = self._inner.write_chunk(name, data)
        self._latency.observe(time.perf_counter() - started)
        self._written.inc(sum(len(b) for b in as_buffers(data)))
        return info

    def read(self, name: str, offset: int, length: int) -> bytes:
        return self._inner.read(name, offset, length)

    def read_all(self, name: str) -> bytes:
        return self._inner.read_all(name)

    def info(self, name: str) -> ChunkInfo:
        return self._inner.info(name)

    def exists(self, name: str) -> bool:
        return self._inner.exists(name)

    def delete(self, name: str) -> None:
        self._inner.delete(name)

    def delete_if_exists(self, name: str) -> bool:
        return self._inner.delete_if_exists(name)

    def list(self, prefix: str = "") -> Iterator[str]:
        return self._inner.list(prefix)

    def location(self, name: str) -> str | None:
        return self._inner.location(name)

    def close(self) -> None:
        """The service closes the shared storage itself; a container's view of it closes nothing."""


class _ScrapeCollector(Collector):
    """Levels read from the service when scraped (on the event loop: the HTTP server runs there)."""

    def __init__(self, service: LevelSource) -> None:
        self._service = service

    def collect(self) -> Iterable[Metric]:
        levels = self._service.levels()
        backlog = GaugeMetricFamily(
            "segstore_tier2_backlog_bytes",
            "Bytes appended but not yet flushed to Tier-2, per container",
            labels=["container"],
        )
        for container_id, unflushed in sorted(levels.unflushed_bytes.items()):
            backlog.add_metric([str(container_id)], unflushed)
        yield backlog
        yield GaugeMetricFamily(
            "segstore_cache_used_bytes", "Read cache in use, all containers", value=levels.cache_used_bytes
        )
        yield GaugeMetricFamily(
            "segstore_cache_limit_bytes", "Read cache budget of the process", value=levels.cache_limit_bytes
        )
        yield CounterMetricFamily(
            "segstore_cache_evicted_bytes", "Bytes evicted from the read cache", value=levels.cache_evicted_bytes
        )
        yield GaugeMetricFamily("segstore_connections", "Open client connections", value=levels.connections)
        yield GaugeMetricFamily(
            "segstore_containers_owned", "Containers running (serving) here", value=levels.containers_owned
        )
        yield GaugeMetricFamily(
            "segstore_ready", "1 once every container assigned here is recovered", value=int(levels.ready)
        )
        yield from _table_metrics(levels.tables)


def _table_metrics(tables: Iterable[TableLevel]) -> Iterable[Metric]:
    """The ``segstore_iceberg_table_*`` families, one sample per table."""
    families = (
        (GaugeMetricFamily, "lag_bytes", "Segment bytes final in Tier-2 but not yet in the table", "lag_bytes"),
        (GaugeMetricFamily, "lag_age_seconds", "Age of the oldest event final in Tier-2 but not in the table",
         "lag_age_s"),
        (GaugeMetricFamily, "data_files", "Data files of the table's current snapshot", "data_files"),
        (CounterMetricFamily, "failed_passes", "Passes over the table that failed (catalog or file IO)",
         "failed_passes"),
    )  # fmt: skip
    listed = list(tables)
    for kind, name, help_text, attribute in families:
        family = kind(f"segstore_iceberg_table_{name}", help_text, labels=["table"])
        for table in listed:
            family.add_metric([table.table], getattr(table, attribute))
        yield family
