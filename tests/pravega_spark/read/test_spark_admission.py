"""Admission control in events as a user runs it on a real standalone (:mod:`pravega_spark.read.admission`):
``maxEventsPerTrigger`` alone and with ``maxBytesPerTrigger`` (each one the smaller) while a writer writes and the
stream scales; ``minEventsPerTrigger`` holds a micro-batch until that many events are there, and ``maxTriggerDelay``
still delivers a lone event; Trigger.AvailableNow takes several bounded batches up to its target; several streams
share the event budget; bad values fail in one line naming the option. Every event once, in order per routing key."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import Streams, wait_for_query

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCOPE = "admission"
HEADER = 8
KEYS = 8
Row = tuple[int, str, int, int, bytes]  # batch id, stream, segment id, offset, event


class Collector:
    """A foreachBatch sink keeping every row with its batch id, and each micro-batch's events, bytes and time."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.batches: list[tuple[int, int, float]] = []  # events, bytes, time.monotonic() when delivered
        self.lock = threading.Lock()

    def __call__(self, batch: Any, batch_id: int) -> None:
        rows = [(batch_id, r.stream, r.segment_id, r.offset, bytes(r.event)) for r in batch.collect()]
        with self.lock:
            self.rows += rows
            self.batches.append((len(rows), sum(HEADER + len(r[4]) for r in rows), time.monotonic()))

    def sizes(self) -> list[int]:
        """The number of events of each micro-batch that read any."""
        with self.lock:
            return [n for n, _, _ in self.batches if n]

    def count(self) -> int:
        with self.lock:
            return len(self.rows)


def _events(prefix: str, start: int, count: int) -> list[tuple[bytes, str | None]]:
    """Event ``i`` is ``prefix-i`` (padded to a varying size) with routing key ``key-(i % KEYS)``."""
    return [(f"{prefix}-{i:05d}".encode() + b"." * (i % 41), f"key-{i % KEYS}") for i in range(start, start + count)]


def _check_every_event_once_in_order_per_key(rows: list[Row], written: dict[str, list[bytes]]) -> None:
    """Each stream's events exactly as written; per routing key in write order: by batch, then segment epoch (a
    key's successor segment is read after its predecessor), then offset."""
    for stream, events in written.items():
        mine = [r for r in rows if r[1] == stream]
        assert sorted(r[4] for r in mine) == sorted(events), f"{stream}: events lost or read twice"
        for key in range(KEYS):
            of_key = [r for r in mine if int(r[4].split(b"-")[-1][:5]) % KEYS == key]
            delivered = [r[4] for r in sorted(of_key, key=lambda r: (r[0], r[2] >> 32, r[3]))]
            assert delivered == [e for e in events if int(e.split(b"-")[-1][:5]) % KEYS == key]


@contextmanager
def _query(
    spark: Any, options: dict[str, str], collector: Collector, checkpoint: Path, **trigger: Any
) -> Iterator[Any]:
    query = (
        spark.readStream.format("segstore")
        .options(**options)
        .load()
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**(trigger or {"processingTime": "100 milliseconds"}))
        .start()
    )
    try:
        yield query
    finally:
        query.stop()


def _writer(streams: Streams, stream: str, events: list[tuple[bytes, str | None]]) -> threading.Thread:
    def write() -> None:  # 25 events at a time, paced (not synchronization)
        with streams.manager.create_writer(SCOPE, stream) as writer:
            for i in range(0, len(events), 25):
                writer.write_events(events[i : i + 25]).result(60)
                time.sleep(0.01)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(
    ("name", "max_events", "max_bytes"),
    [("alone", 100, None), ("events-smaller", 80, 1_000_000), ("bytes-smaller", 1000, 4000)],
)
def test_max_events_bounds_every_micro_batch_while_written_and_scaled(
    spark: Any, streams: Streams, tmp_path: Path, name: str, max_events: int, max_bytes: int | None
) -> None:
    stream = f"max-{name}"
    streams.create(SCOPE, stream, segments=2)
    backlog, live = _events(stream, 0, 300), _events(stream, 300, 500)
    streams.write(SCOPE, stream, backlog)
    options = {**streams.options(SCOPE, stream), "startingOffsets": "earliest", "maxEventsPerTrigger": str(max_events)}
    if max_bytes is not None:
        options["maxBytesPerTrigger"] = str(max_bytes)
    collector = Collector()
    with _query(spark, options, collector, tmp_path / "checkpoint") as query:
        writer = _writer(streams, stream, live)
        wait_for_query(lambda: collector.count() >= 300, "the backlog is read", query)
        streams.split_first(SCOPE, stream)
        writer.join(120)
        assert not writer.is_alive()
        query.processAllAvailable()
        assert query.exception() is None
    sizes = collector.sizes()
    assert sum(sizes) == 800 and max(sizes) <= max_events
    if max_bytes is None or name == "events-smaller":
        assert max(sizes) == max_events  # the backlog fills whole batches
    else:
        assert max(b for _, b, _ in collector.batches) <= max_bytes and max(sizes) < max_events
    _check_every_event_once_in_order_per_key(collector.rows, {stream: [e for e, _ in backlog + live]})


def _checked_offsets(query: Any) -> Iterator[dict[str, Any]]:
    """The ``latestOffset`` of each progress reported so far (the source's tail when Spark last asked it)."""
    for progress in query.recentProgress:
        latest = progress["sources"][0].get("latestOffset")
        if latest:
            yield json.loads(latest) if isinstance(latest, str) else latest


def test_min_events_holds_the_batch_until_that_many_events_are_there(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    stream = "min-count"
    streams.create(SCOPE, stream)
    options = {
        **streams.options(SCOPE, stream),
        "startingOffsets": "earliest",
        "minEventsPerTrigger": "50",
        "maxTriggerDelay": "10m",
    }
    collector = Collector()
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")  # a progress for every idle trigger
    try:
        with _query(spark, options, collector, tmp_path / "checkpoint") as query:
            first = _events(stream, 0, 49)
            streams.write(SCOPE, stream, first)
            size = sum(HEADER + len(e) for e, _ in first)

            def asked_twice_since() -> bool:  # two triggers asked the source after the 49 events were written
                seen = [o for o in _checked_offsets(query) if sum(o["positions"].values()) >= size]
                return len(seen) >= 2

            wait_for_query(asked_twice_since, "Spark asked the source twice with 49 events there", query)
            assert collector.count() == 0  # 49 < 50: no micro-batch
            last = _events(stream, 49, 1)
            streams.write(SCOPE, stream, last)
            wait_for_query(lambda: collector.count() >= 50, "the 50 events are read", query)
            assert collector.sizes() == [50]
    finally:
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
    _check_every_event_once_in_order_per_key(collector.rows, {stream: [e for e, _ in first + last]})


def test_max_trigger_delay_delivers_a_lone_event_once_the_delay_passed(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    stream = "min-delay"
    streams.create(SCOPE, stream)
    options = {
        **streams.options(SCOPE, stream),
        "startingOffsets": "earliest",
        "minEventsPerTrigger": "1000",
        "maxTriggerDelay": "3s",
    }
    collector = Collector()
    with _query(spark, options, collector, tmp_path / "checkpoint") as query:
        wait_for_query(lambda: len(collector.batches) >= 1, "the first (empty) micro-batch ran", query)
        started = collector.batches[0][2]
        lone = _events(stream, 0, 1)
        streams.write(SCOPE, stream, lone)
        wait_for_query(lambda: collector.count() == 1, "the lone event is read", query, timeout_s=60)
        delivered = next(t for n, _, t in collector.batches if n)
    assert delivered - started >= 3.0  # held for the delay, not read at once
    assert collector.sizes() == [1]
    _check_every_event_once_in_order_per_key(collector.rows, {stream: [lone[0][0]]})


def test_available_now_takes_bounded_batches_up_to_its_target_and_ignores_the_minimum(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    stream = "available-now"
    streams.create(SCOPE, stream, segments=3)
    first = _events(stream, 0, 1000)
    streams.write(SCOPE, stream, first)
    options = {
        **streams.options(SCOPE, stream),
        "startingOffsets": "earliest",
        "maxEventsPerTrigger": "300",
        "minEventsPerTrigger": "100000",  # never reached: Trigger.AvailableNow does not wait for it
    }

    def run() -> Collector:
        collector = Collector()
        with _query(spark, options, collector, tmp_path / "checkpoint", availableNow=True) as query:
            assert query.awaitTermination(120), "Trigger.AvailableNow did not stop"
            assert query.exception() is None
        return collector

    one = run()
    assert sorted(one.sizes()) == [100, 300, 300, 300]
    second = _events(stream, 1000, 250)
    streams.write(SCOPE, stream, second)
    two = run()  # from the checkpoint, up to the new target only
    assert two.sizes() == [250]
    _check_every_event_once_in_order_per_key(one.rows, {stream: [e for e, _ in first]})
    _check_every_event_once_in_order_per_key(two.rows, {stream: [e for e, _ in second]})


def test_several_streams_share_the_event_budget_while_written(spark: Any, streams: Streams, tmp_path: Path) -> None:
    names = ("shared-a", "shared-b")
    written = {name: _events(name, 0, 800) for name in names}
    for name in names:
        streams.create(SCOPE, name, segments=2)
        streams.write(SCOPE, name, written[name][:300])
    options = {
        "controller": streams.controller_uri,
        "scope": SCOPE,
        "streamPattern": "shared-.*",
        "startingOffsets": "earliest",
        "maxEventsPerTrigger": "100",
    }
    collector = Collector()
    with _query(spark, options, collector, tmp_path / "checkpoint") as query:
        writers = [_writer(streams, name, written[name][300:]) for name in names]
        for writer in writers:
            writer.join(120)
            assert not writer.is_alive()
        query.processAllAvailable()
        assert query.exception() is None
    sizes = collector.sizes()
    assert sum(sizes) == 1600 and max(sizes) == 100
    with collector.lock:
        first_batch = min(r[0] for r in collector.rows)
        shares = {name: sum(1 for r in collector.rows if r[0] == first_batch and r[1] == name) for name in names}
    assert shares == {"shared-a": 50, "shared-b": 50}  # both backlogs: even shares
    _check_every_event_once_in_order_per_key(collector.rows, {n: [e for e, _ in written[n]] for n in names})


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"maxEventsPerTrigger": "0"}, r"option 'maxEventsPerTrigger': must be an integer >= 1, got '0'"),
        ({"maxEventsPerTrigger": "-5"}, r"option 'maxEventsPerTrigger': must be an integer >= 1, got '-5'"),
        ({"minEventsPerTrigger": "many"}, r"option 'minEventsPerTrigger': must be an integer >= 1, got 'many'"),
        (
            {"minEventsPerTrigger": "10", "maxTriggerDelay": "10 parsecs"},
            r"option 'maxTriggerDelay': must be a duration such as '15s', '500ms' or '2m', got '10 parsecs'",
        ),
    ],
)
def test_bad_values_fail_in_one_line_naming_the_option(
    spark: Any, streams: Streams, tmp_path: Path, bad: dict[str, str], message: str
) -> None:
    streams.create(SCOPE, "bad-values")
    with pytest.raises(Exception, match=re.escape(message)) as raised:
        frame = spark.readStream.format("segstore").options(**streams.options(SCOPE, "bad-values"), **bad).load()
        query = frame.writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start()
        try:
            query.awaitTermination(120)
        finally:
            query.stop()
    # one line of its own (a streaming query's error starts with Spark's STREAM_FAILED line and the worker's traceback)
    assert re.search(re.escape(message) + r"$", str(raised.value), flags=re.MULTILINE), str(raised.value)
