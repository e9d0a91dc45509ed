"""Metrics of one controller process (Prometheus); the null object :class:`ControllerMetrics` by default.

Measured where the work happens:

- every RPC, by name and gRPC status code, with its latency: the ``rpc`` decorator
  (:mod:`controller.rpc.handling`) reports each call to the servicer's metrics;
- scale and truncation events: :class:`~controller.core.ControllerCore` (``scale`` serves both the RPC and the
  auto-scaler; truncations by request or by retention);
- levels read when scraped: buckets held and leadership (the service's cluster manager and work scope), the
  periodic work run per kind (``core.background.runs``: retention, watermarks, auto-scaling, transaction
  timeouts);
- levels that need the metadata store (streams, active segments, open transactions): counted by
  :meth:`ControllerMetricsRegistry.refresh` before a scrape is answered, at most once per
  ``refresh_interval_s`` (a walk over every stream: a few ZooKeeper reads per stream), so a busy Prometheus
  does not multiply the cost. The counts are the whole cluster's (every controller reports the same).

No label names a stream or a segment; ``rpc`` has at most the ~70 calls of ``Controller.proto``.

The metrics sit below everything they measure: the scrape-time levels are read through
:class:`ObservedController` (a Protocol that :class:`~controller.service.ControllerService` satisfies), so this
module imports nothing of the controller but the metadata errors (and prometheus_client).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter as Tally
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sized
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

RPC_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class LevelStore(Protocol):
    """The metadata store queries the levels count (``StreamMetadataStore``)."""

    async def get_current_segments(self, scope: str, stream: str) -> Sized: ...

    async def list_open_txns(self, scope: str, stream: str) -> Sized: ...


class OwnedBuckets(Protocol):
    """Which buckets of periodic work this controller holds (``controller.cluster.buckets.WorkScope``)."""

    def owned_buckets(self) -> Collection[int]: ...


class PeriodicRuns(Protocol):
    """What the periodic work ran, per (kind, scope, stream) (``BackgroundWork``)."""

    @property
    def runs(self) -> Mapping[tuple[str, str, str], int]: ...


class ObservedCore(Protocol):
    """What the metrics read of the domain API (:class:`~controller.core.ControllerCore`)."""

    @property
    def store(self) -> LevelStore: ...

    @property
    def work_scope(self) -> OwnedBuckets: ...

    @property
    def background(self) -> PeriodicRuns: ...

    def all_streams(self) -> AsyncIterator[tuple[str, str]]: ...


class ObservedController(Protocol):
    """What the metrics read of a controller process at scrape time (:class:`~controller.service.ControllerService`)."""

    @property
    def leader(self) -> bool: ...

    @property
    def core(self) -> ObservedCore: ...

    def ready(self) -> bool: ...


class ControllerMetrics:
    """The null object: no metrics (tests, embedding)."""

    registry: CollectorRegistry | None = None

    def rpc(self, name: str, code: str, seconds: float) -> None:
        """RPC ``name`` ended with status ``code`` (``OK``, ``NOT_FOUND``, ...) after ``seconds``."""

    def scaled(self) -> None:
        """A scale was started (by request or by the auto-scaler)."""

    def truncated(self, cause: str) -> None:
        """A stream was truncated; ``cause`` is ``request`` or ``retention``."""

    def watch(self, service: ObservedController) -> None:
        """Read the levels of ``service`` at scrape time."""

    async def refresh(self) -> None:
        """Count what needs the metadata store (before a scrape)."""


NO_METRICS = ControllerMetrics()


class ControllerMetricsRegistry(ControllerMetrics):
    """The controller's collectors on a registry of their own (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry | None = None, refresh_interval_s: float = 10.0) -> None:
        self.registry = registry = registry or CollectorRegistry()
        self._registry = registry
        self.rpcs = Counter(
            "segstore_controller_rpcs", "RPCs answered, by name and gRPC status", ["rpc", "code"], registry=registry
        )
        self.rpc_latency = Histogram(
            "segstore_controller_rpc_latency_seconds",
            "RPC latency, by name",
            ["rpc"],
            buckets=RPC_BUCKETS_S,
            registry=registry,
        )
        self.scales = Counter("segstore_controller_scales", "Scales started (asked or automatic)", registry=registry)
        self.truncations = Counter(
            "segstore_controller_truncations", "Streams truncated, by cause", ["cause"], registry=registry
        )
        self._refresh_interval_s = refresh_interval_s
        self._refreshed_at: float | None = None
        self._refresh_lock = asyncio.Lock()
        self.levels = _MetadataLevels()
        self._service: ObservedController | None = None

    def rpc(self, name: str, code: str, seconds: float) -> None:
        self.rpcs.labels(name, code).inc()
        self.rpc_latency.labels(name).observe(seconds)

    def scaled(self) -> None:
        self.scales.inc()

    def truncated(self, cause: str) -> None:
        self.truncations.labels(cause).inc()

    def watch(self, service: ObservedController) -> None:
        self._service = service
        self._registry.register(_ScrapeCollector(service, self))

    async def refresh(self) -> None:
        service = self._service
        if service is None:
            return
        async with self._refresh_lock:
            now = time.monotonic()
            if self._refreshed_at is not None and now - self._refreshed_at < self._refresh_interval_s:
                return
            try:
                self.levels = await _count_levels(service)
            except Exception as exc:  # the store is unreachable: the scrape answers, the levels go stale
                log.warning("metrics: counting streams failed, the levels stay as they were: %r", exc)
                self.levels = _MetadataLevels(self.levels.streams, self.levels.segments, self.levels.open_txns, False)
            self._refreshed_at = now


class _MetadataLevels:
    __slots__ = ("fresh", "open_txns", "segments", "streams")

    def __init__(self, streams: int = 0, segments: int = 0, open_txns: int = 0, fresh: bool = False) -> None:
        self.streams = streams
        self.segments = segments
        self.open_txns = open_txns
        self.fresh = fresh


async def _count_levels(service: ObservedController) -> _MetadataLevels:
    from controller.metadata import errors as md

    core = service.core
    streams = segments = open_txns = 0
    async for scope, stream in core.all_streams():
        try:
            current = await core.store.get_current_segments(scope, stream)
            txns = await core.store.list_open_txns(scope, stream)
        except (md.DataNotFoundError, md.StreamNotFoundError, md.ScopeNotFoundError):
            continue  # being created or deleted meanwhile
        streams += 1
        segments += len(current)
        open_txns += len(txns)
    return _MetadataLevels(streams, segments, open_txns, True)


class _ScrapeCollector(Collector):
    def __init__(self, service: ObservedController, metrics: ControllerMetricsRegistry) -> None:
        self._service = service
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        service = self._service
        levels = self._metrics.levels
        yield GaugeMetricFamily("segstore_controller_streams", "Streams (internal ones included)", value=levels.streams)
        yield GaugeMetricFamily(
            "segstore_controller_active_segments", "Segments of the streams' current epochs", value=levels.segments
        )
        yield GaugeMetricFamily(
            "segstore_controller_open_transactions", "Transactions open or committing", value=levels.open_txns
        )
        yield GaugeMetricFamily(
            "segstore_controller_leader", "1 while this controller is the cluster's leader", value=int(service.leader)
        )
        yield GaugeMetricFamily(
            "segstore_controller_buckets_owned",
            "Stream buckets whose periodic work this controller runs",
            value=len(service.core.work_scope.owned_buckets()),
        )
        runs = CounterMetricFamily(
            "segstore_controller_background_runs",
            "Periodic work run per stream, by kind (retention, watermark, auto-scale, ...)",
            labels=["kind"],
        )
        by_kind: Tally[str] = Tally()
        for (kind, _scope, _stream), count in service.core.background.runs.items():
            by_kind[kind] += count
        for kind, count in sorted(by_kind.items()):
            runs.add_metric([kind], count)
        yield runs
        yield GaugeMetricFamily("segstore_controller_ready", "1 while serving RPCs", value=int(service.ready()))
