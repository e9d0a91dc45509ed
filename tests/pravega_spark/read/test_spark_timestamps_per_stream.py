"""Per-stream start and end times (options ``startingTimestamp`` / ``endingTimestamp`` as a JSON object of stream ->
epoch ms, as Kafka's ``startingOffsetsByTimestamp``) and ``startingTimestampStrategy``, as a user runs them: three
streams written in phases at known times, then a batch and a streaming read with a time per stream read exactly the
events of the phases asked for while a writer keeps writing to every stream; a start time after the last event
either starts at the tail (``latest``, the default) or fails naming the option and the stream (``error``); option
errors in one line naming the option.

Phase boundaries: a time taken after a phase's writes were acknowledged, and the next phase written only once the
wall clock is past it (the segment store stamps appends with the same machine's clock), so every event of a phase is
ingested before the boundary and every later one at or after it.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import Streams, wait_for_query

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCOPE = "perstream"
STREAMS = ("a", "b", "c")


def _events(stream: str, phase: str, count: int) -> list[tuple[bytes, str | None]]:
    return [(f"{stream}-{phase}-{i:04d}".encode(), f"key-{i % 5}") for i in range(count)]


def _payloads(events: list[tuple[bytes, str | None]]) -> list[bytes]:
    return sorted(e for e, _ in events)


def _boundary() -> int:
    """A time after everything written so far; returns once the wall clock is past it."""
    boundary = int(time.time() * 1000) + 1
    while int(time.time() * 1000) <= boundary:
        time.sleep(0.001)  # waits for the clock itself, nothing else
    return boundary


class Writer(threading.Thread):
    """Writes to every stream, 10 events at a time per stream, until :meth:`finish` (at most 20,000 per stream)."""

    def __init__(self, streams: Streams) -> None:
        super().__init__(daemon=True)
        self.streams = streams
        self.planned = {name: _events(name, "live", 20_000) for name in STREAMS}
        self.count = 0
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    @property
    def written(self) -> dict[str, list[tuple[bytes, str | None]]]:
        return {name: events[: self.count] for name, events in self.planned.items()}

    def run(self) -> None:
        try:
            writers = {name: self.streams.manager.create_writer(SCOPE, name) for name in STREAMS}
            try:
                while not self.stopping.is_set() and self.count < 20_000:
                    for name, writer in writers.items():
                        writer.write_events(self.planned[name][self.count : self.count + 10]).result(60)
                    self.count += 10
                    time.sleep(0.2)  # pacing, not synchronization
            finally:
                for writer in writers.values():
                    writer.close()
        except BaseException as error:  # kept and re-raised by the test
            self.error = error

    def finish(self) -> None:
        self.stopping.set()
        self.join(120)
        assert not self.is_alive(), "the writer did not finish"
        if self.error is not None:
            raise self.error


@pytest.mark.timeout(900)  # a shared Spark session on a busy machine: setting up alone may take minutes
def test_batch_and_streaming_reads_start_and_end_each_stream_at_its_own_time_while_a_writer_writes(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    streams.create(SCOPE, "a", segments=2)
    streams.create(SCOPE, "b")
    streams.create(SCOPE, "c", segments=3)
    phases: dict[str, dict[str, list[tuple[bytes, str | None]]]] = {}
    times = []
    for phase, size in (("one", 120), ("two", 90), ("three", 60)):
        phases[phase] = {name: _events(name, phase, size) for name in STREAMS}
        for name in STREAMS:
            streams.write(SCOPE, name, phases[phase][name])
        times.append(_boundary())
    t1, t2, t3 = times  # t1: after phase one, t2: after phase two, t3: after phase three
    writer = Writer(streams)
    writer.start()
    controller = {"controller": streams.controller_uri, "scope": SCOPE}

    batch = (
        spark.read.format("segstore")
        .options(**controller, streams="a,b,c")
        .option("startingTimestamp", f'{{"a": {t1}, "{SCOPE}/b": {t2}}}')  # c: the batch default, earliest
        .option("endingTimestamp", f'{{"a": {t2}, "b": {t3}, "c": {t2}}}')
        .load()
    )
    rows = [(r.stream, bytes(r.event)) for r in batch.collect()]
    assert len(rows) == len(set(rows))
    by_stream = {name: sorted(e for s, e in rows if s == name) for name in STREAMS}
    assert by_stream["a"] == _payloads(phases["two"]["a"])
    assert by_stream["b"] == _payloads(phases["three"]["b"])
    assert by_stream["c"] == _payloads(phases["one"]["c"] + phases["two"]["c"])

    seen: list[tuple[str, bytes]] = []
    lock = threading.Lock()

    def collect(frame: Any, batch_id: int) -> None:
        found = [(r.stream, bytes(r.event)) for r in frame.collect()]
        with lock:
            seen.extend(found)

    def count() -> int:
        with lock:
            return len(seen)

    def streams_seen() -> set[str]:
        with lock:
            return {name for name, _ in seen}

    query = (
        spark.readStream.format("segstore")
        .options(**controller, streamPattern="[abc]", startingOffsets="earliest")
        .option("startingTimestamp", f'{{"a": {t2}, "{SCOPE}/c": {t3}}}')  # b: startingOffsets
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        wait_for_query(lambda: "c" in streams_seen(), "the query reads live events while they are written", query)
        assert writer.is_alive()
        writer.finish()
        live = writer.written
        expected = {
            "a": _payloads(phases["three"]["a"] + live["a"]),
            "b": _payloads(phases["one"]["b"] + phases["two"]["b"] + phases["three"]["b"] + live["b"]),
            "c": _payloads(live["c"]),
        }
        wait_for_query(lambda: count() == sum(len(e) for e in expected.values()), "every expected event is read", query)
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert len(seen) == len(set(seen))
    assert {name: sorted(e for s, e in seen if s == name) for name in STREAMS} == expected


@pytest.mark.timeout(900)
def test_a_start_after_the_last_event_starts_at_the_tail_or_fails_with_strategy_error(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    streams.create(SCOPE, "old")
    streams.create(SCOPE, "new")
    streams.write(SCOPE, "old", _events("old", "before", 40))
    streams.write(SCOPE, "new", _events("new", "before", 40))
    past = _boundary()
    streams.write(SCOPE, "new", _events("new", "after", 25))
    future = int(time.time() * 1000) + 3_600_000
    controller = {"controller": streams.controller_uri, "scope": SCOPE, "streams": "old,new"}
    per_stream = f'{{"old": {future}, "new": {past}}}'

    def batch(**options: str) -> list[bytes]:
        frame = spark.read.format("segstore").options(**{**controller, **options}).load()
        return sorted(bytes(r.event) for r in frame.collect())

    assert batch(startingTimestamp=per_stream) == _payloads(_events("new", "after", 25))  # old: its tail
    assert batch(startingTimestamp=per_stream, startingTimestampStrategy="latest") == batch(
        startingTimestamp=per_stream
    )
    error = (
        r"option 'startingTimestamp': \d+ is after the last event of perstream/old and option 'startingTimestampStra"
    )
    with pytest.raises(Exception, match=error):
        batch(startingTimestamp=per_stream, startingTimestampStrategy="error")
    one_time = {"startingTimestamp": str(past), "startingTimestampStrategy": "ERROR"}  # one time: checked per stream
    assert batch(**one_time, streams="new") == _payloads(_events("new", "after", 25))
    with pytest.raises(Exception, match=error):
        batch(**one_time)

    seen: list[bytes] = []
    lock = threading.Lock()

    def collect(frame: Any, batch_id: int) -> None:
        found = [bytes(r.event) for r in frame.collect()]
        with lock:
            seen.extend(found)

    def start(strategy: str, checkpoint: str) -> Any:
        return (
            spark.readStream.format("segstore")
            .options(controller=streams.controller_uri, scope=SCOPE, stream="old")
            .options(startingTimestamp=f'{{"old": {future}}}', startingTimestampStrategy=strategy)
            .load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / checkpoint))
            .trigger(processingTime="100 milliseconds")
            .start()
        )

    query = start("latest", "latest")  # starts at the tail; what is written after it is read
    try:
        wait_for_query(lambda: query.lastProgress is not None, "the first micro-batch looked the start up", query)
        streams.write(SCOPE, "old", _events("old", "later", 30))
        wait_for_query(lambda: len(seen) >= 30, "the later events are read", query)
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(seen) == _payloads(_events("old", "later", 30))

    failing = start("error", "error")
    try:
        deadline = time.monotonic() + 120
        while failing.isActive:
            assert time.monotonic() < deadline, "the query with strategy error did not fail"
            time.sleep(0.05)
    finally:
        failing.stop()
    found = str(failing.exception())
    assert re.search(r"option 'startingTimestamp': \d+ is after the last event of perstream/old", found), found


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (
            {"streams": "x", "startingTimestamp": '{"x": 1'},
            r"option 'startingTimestamp': not epoch ms, and not a JSON ",
        ),
        (
            {"streams": "x", "endingTimestamp": '{"x": "soon"}'},
            r"option 'endingTimestamp': stream 'x': the time must be ",
        ),
        (
            {"streams": "x", "startingTimestamp": '{"x": 1.5}'},
            r"option 'startingTimestamp': stream 'x': the time must be",
        ),
        (
            {"streams": "x", "startingTimestamp": '{"y": 1}'},
            r"option 'startingTimestamp': stream 'y': not read: not in ",
        ),
        (
            {"stream": "x", "startingTimestamp": '{"errs/y": 1}'},
            r"option 'startingTimestamp': stream 'errs/y': the query",
        ),
        (
            {"streamPattern": "x.*", "startingTimestamp": '{"x2": 1}'},
            r"option 'startingTimestamp': stream\(s\) errs/x2 do",
        ),
        (
            {"streamPattern": "x", "startingTimestamp": '{"y": 1}'},
            r"option 'startingTimestamp': stream 'y': not read: ",
        ),
        ({"stream": "x", "startingTimestampStrategy": "error"}, r"option 'startingTimestampStrategy': means nothing "),
        ({"stream": "x", "startingTimestamp": "5", "startingTimestampStrategy": "earliest"}, r"option 'startingTimest"),
        (
            {"streams": "x", "startingTimestamp": "[1]"},
            r"option 'startingTimestamp': must be an integer >= 0 \(epoch ms\) or a JSON object",
        ),
        (
            {"stream": "x", "startingOffsets": '{"positions": {"0": 0}}', "startingTimestamp": '{"x": 1}'},
            r"cannot be co",
        ),
    ],
)
def test_option_errors_are_one_line_naming_the_option(
    spark: Any, streams: Streams, options: dict[str, str], error: str
) -> None:
    streams.create("errs", "x")
    with pytest.raises(Exception, match=error) as raised:
        spark.read.format("segstore").options(
            controller=streams.controller_uri, scope="errs", **options
        ).load().collect()
    first = str(raised.value).strip().splitlines()[0]
    assert re.search(error, first), first
