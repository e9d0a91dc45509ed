"""Several streams in one query (options ``streams`` and ``streamPattern``) as a user runs them on a real standalone:
a live query over a pattern while writers write to two streams, one of them scaling; a matching stream created
mid-query is read from its head, a non-matching one is not, a deleted one ends cleanly; each event exactly once with
its stream; restarts from the checkpoint after the set of streams changed (also from a single-stream query's
checkpoint); a batch read of a list across scopes; option errors in one line."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import Streams, wait_for_query

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HEADER = 8
Row = tuple[str, str, int, int, bytes]  # scope, stream, segment id, offset, event


class Collector:
    """A foreachBatch sink keeping every row and each micro-batch's bytes (driver side)."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.batch_bytes: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, batch: Any, batch_id: int) -> None:
        rows = [(r.scope, r.stream, r.segment_id, r.offset, bytes(r.event)) for r in batch.collect()]
        with self.lock:
            self.rows += rows
            self.batch_bytes.append(sum(HEADER + len(r[4]) for r in rows))

    def events(self, stream: str | None = None) -> list[bytes]:
        with self.lock:
            return sorted(r[4] for r in self.rows if stream is None or r[1] == stream)


def _events(prefix: str, start: int, count: int, keys: int = 8) -> list[tuple[bytes, str | None]]:
    return [(f"{prefix}-{i:05d}".encode() + b"." * (i % 37), f"key-{i % keys}") for i in range(start, start + count)]


def _check_exactly_once_in_order(rows: list[Row]) -> None:
    """No event twice; each stream's events named by it; per segment, offsets ascend in the order delivered."""
    assert len({(scope, stream, s, o) for scope, stream, s, o, _ in rows}) == len(rows)
    assert all(event.startswith(stream.encode() + b"-") for _, stream, _, _, event in rows)
    last: dict[tuple[str, int], int] = {}
    for _, stream, segment, offset, _ in rows:
        assert offset > last.get((stream, segment), -1)
        last[(stream, segment)] = offset


def test_pattern_query_picks_up_new_streams_from_their_head_and_ends_deleted_ones(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    scope = "several"
    streams.create(scope, "orders-a", segments=2)
    streams.create(scope, "orders-b")
    early = {"orders-a": _events("orders-a", 0, 300), "orders-b": _events("orders-b", 0, 300)}
    for name, events in early.items():
        streams.write(scope, name, events)
    collector = Collector()
    options = {"controller": streams.controller_uri, "scope": scope, "streamPattern": "orders-.*"}
    query = (
        spark.readStream.format("segstore")
        .options(**options, startingOffsets="earliest", maxBytesPerTrigger="30000")
        .load()
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    written = {name: list(events) + _events(name, 300, 1500) for name, events in early.items()}

    def write(name: str) -> None:  # a writer per stream, 20 events at a time, ~1,000 events a second
        with streams.manager.create_writer(scope, name) as writer:
            for i in range(300, len(written[name]), 20):
                writer.write_events(written[name][i : i + 20]).result(60)
                time.sleep(0.02)  # pacing, not synchronization

    writers = [threading.Thread(target=write, args=(name,), daemon=True) for name in ("orders-a", "orders-b")]
    for writer in writers:
        writer.start()
    try:
        wait_for_query(lambda: len(collector.events("orders-a")) > 500, "orders-a is read while written", query)
        streams.split_first(scope, "orders-a")  # scaling is followed per stream
        streams.create(scope, "orders-c", segments=2)  # written before the query sees it: read from its head
        streams.write(scope, "orders-c", _events("orders-c", 0, 400))
        streams.create(scope, "other")  # does not match
        streams.write(scope, "other", _events("other", 0, 50))
        wait_for_query(lambda: len(collector.events("orders-c")) == 400, "orders-c is read from its head", query)
        for writer in writers:
            writer.join(120)
            assert not writer.is_alive()
        wait_for_query(lambda: len(collector.rows) == 2 * 1800 + 400, "everything written is read", query)
        for name in ("orders-a", "orders-b"):
            assert collector.events(name) == sorted(e for e, _ in written[name])
        streams.manager.seal_stream(scope, "orders-b")
        streams.manager.delete_stream(scope, "orders-b")
        later = _events("orders-a", 100_000, 200)
        streams.write(scope, "orders-a", later)
        wait_for_query(
            lambda: len(collector.events("orders-a")) == len(written["orders-a"]) + 200, "orders-a goes on", query
        )
        query.processAllAvailable()
        raw = query.lastProgress["sources"][0]["endOffset"]
        end = raw if isinstance(raw, dict) else json.loads(raw)
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(end["streams"]) == ["several/orders-a", "several/orders-c"]  # orders-b dropped, cleanly
    assert collector.events("orders-a") == sorted(e for e, _ in written["orders-a"] + later)
    assert collector.events("orders-b") == sorted(e for e, _ in written["orders-b"])
    assert collector.events("orders-c") == sorted(e for e, _ in _events("orders-c", 0, 400))
    assert collector.events("other") == []
    assert {r[0] for r in collector.rows} == {scope}
    assert len(collector.rows) == sum(len(w) for w in written.values()) + 200 + 400
    _check_exactly_once_in_order(collector.rows)
    assert len({s for _, n, s, _, _ in collector.rows if n == "orders-a"}) >= 3  # segments of both epochs
    assert max(collector.batch_bytes) <= 30_000 + 3 * (HEADER + 64)  # the limit, over all streams


def test_restart_from_checkpoint_after_the_set_of_streams_changed(spark: Any, streams: Streams, tmp_path: Path) -> None:
    scope = "restart-set"
    streams.create(scope, "log-1")
    streams.write(scope, "log-1", _events("log-1", 0, 200))
    checkpoint = str(tmp_path / "checkpoint")
    controller = streams.controller_uri

    def run(**selection: str) -> Collector:
        collector = Collector()
        query = (
            spark.readStream.format("segstore")
            .options(controller=controller, scope=scope, startingOffsets="earliest", **selection)
            .option("maxBytesPerTrigger", "20000")
            .load()
            .writeStream.foreachBatch(collector)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None
        return collector

    one = run(stream="log-1")  # today's single-stream query, and its single-stream offsets
    assert one.events() == sorted(e for e, _ in _events("log-1", 0, 200))
    streams.create(scope, "log-2")
    streams.write(scope, "log-2", _events("log-2", 0, 150))
    streams.write(scope, "log-1", _events("log-1", 200, 100))
    two = run(streams="log-1,log-2")  # from the single-stream checkpoint: log-1 goes on, log-2 from its head
    assert two.events("log-1") == sorted(e for e, _ in _events("log-1", 200, 100))
    assert two.events("log-2") == sorted(e for e, _ in _events("log-2", 0, 150))
    streams.create(scope, "log-3")
    streams.write(scope, "log-3", _events("log-3", 0, 120))
    streams.write(scope, "log-2", _events("log-2", 150, 80))
    streams.manager.seal_stream(scope, "log-1")
    streams.manager.delete_stream(scope, "log-1")
    three = run(streamPattern="log-[0-9]")  # log-1 gone, log-3 new: read from its head
    assert three.events("log-1") == []
    assert three.events("log-2") == sorted(e for e, _ in _events("log-2", 150, 80))
    assert three.events("log-3") == sorted(e for e, _ in _events("log-3", 0, 120))
    for collector in (one, two, three):
        _check_exactly_once_in_order(collector.rows)


def test_batch_read_of_a_streams_list_across_scopes(spark: Any, streams: Streams) -> None:
    streams.create("batch-one", "a", segments=3)
    streams.create("batch-two", "b")
    streams.write("batch-one", "a", _events("a", 0, 500))
    streams.write("batch-two", "b", _events("b", 0, 200))
    streams.split_first("batch-one", "a")
    streams.write("batch-one", "a", _events("a", 500, 100))
    frame = (
        spark.read.format("segstore")
        .options(controller=streams.controller_uri, scope="batch-one", streams="a, batch-two/b")
        .load()
    )
    rows = [(r.scope, r.stream, r.segment_id, r.offset, bytes(r.event)) for r in frame.collect()]
    expected = [("batch-one", "a", *e) for e in streams.events("batch-one", "a")]
    expected += [("batch-two", "b", *e) for e in streams.events("batch-two", "b")]
    assert sorted(rows) == sorted(expected)
    assert len(rows) == 800


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"streams": "a", "streamPattern": "a.*"}, r"option 'streamPattern': give either option 'streams' or "),
        ({"stream": "a", "streamPattern": "a.*"}, r"option 'streamPattern': give either option 'stream' or "),
        ({"streamPattern": "a(b"}, r"option 'streamPattern': not a regular expression \(missing \)"),
        ({"streams": "a,missing"}, r"option 'streams': stream\(s\) errors/missing do not exist"),
    ],
)
def test_option_errors_are_one_clear_line(spark: Any, streams: Streams, options: dict[str, str], error: str) -> None:
    streams.create("errors", "a")
    with pytest.raises(Exception, match=error) as raised:
        frame = spark.read.format("segstore").options(controller=streams.controller_uri, scope="errors", **options)
        frame.load().collect()
    first = str(raised.value).strip().splitlines()[0]
    assert re.search(error, first), first
