"""Filter pushdown in batch reads (issue 37 item 4): filters on ``scope``, ``stream``, ``segment_id``, ``offset`` and
``timestamp`` prune what is read, and never change the answer.

Data: three streams written in three phases (the second after a split of the first stream, its history flushed to
Tier-2 before the third, which stays in memory), each phase's events ingested after the clock passed the previous
phase's last acknowledgment, so a time window can hold exactly one phase. Every query runs with
``spark.sql.python.filterPushdown.enabled`` on and off and gives the same rows; what pushdown planned is checked
by asking the reader itself, as pyspark does.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.sql.datasource import EqualTo, Filter, GreaterThanOrEqual, IsNull, LessThan
from spark_fixtures import Streams
from standalone_process import StandaloneProcess

import pravega_spark
from controller_client.model import TxnState
from pravega_spark.read.pushdown_readers import PUSHDOWN_CONF, PushdownBatchReader, PushdownSeveralStreamsReader
from pravega_spark.read.source import SCHEMA, SegstoreDataSource
from segment_store.client import BlockingClient

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCOPE = "pushdown"
STREAMS = ("pd-a", "pd-b", "pd-c")
Row = tuple[str, int, int, bytes, int]  # stream, segment_id, offset, event, timestamp (epoch ms)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _next_ms(after: int) -> int:
    """Poll the clock until it passes ``after`` (ms); the time then."""
    deadline = time.monotonic() + 5
    while (now := _now_ms()) <= after:
        assert time.monotonic() < deadline, "the clock did not advance"
    return now


def _write_phase(streams: Streams, phase: int, count: int) -> tuple[int, int]:
    """Write ``count`` events to each stream; ``(first ms, last ms)`` bounding their ingestion times."""
    start = _now_ms()
    for stream in STREAMS:
        events = [(f"{stream}-{phase}-{i:04d}".encode() + b"." * (i % 23), f"k{i % 9}") for i in range(count)]
        streams.write(SCOPE, stream, events)
    return start, _next_ms(_now_ms())


@pytest.fixture(scope="module")
def phases(streams: Streams, standalone: StandaloneProcess) -> list[tuple[int, int]]:
    streams.create(SCOPE, "pd-a", segments=2)
    streams.create(SCOPE, "pd-b", segments=1)
    streams.create(SCOPE, "pd-c", segments=3)
    written = [_write_phase(streams, 0, 900)]
    streams.split_first(SCOPE, "pd-a")
    written.append(_write_phase(streams, 1, 700))
    with BlockingClient(standalone.segmentstore_endpoint) as client:
        for container in range(standalone.container_count):
            client.flush_to_storage(container)
    written.append(_write_phase(streams, 2, 500))
    return written


@pytest.fixture
def conf(spark: Any) -> Iterator[Any]:
    yield spark.conf
    spark.conf.set(PUSHDOWN_CONF, "true")


def _frame(spark: Any, helper: Streams, **options: str) -> Any:
    base = {"controller": helper.controller_uri, "scope": SCOPE, **options}
    if "streams" not in options and "streamPattern" not in options:
        base.setdefault("stream", "pd-a")
    return spark.read.format("segstore").options(**base).load()


def _rows(frame: Any) -> list[Row]:
    picked = frame.selectExpr("stream", "segment_id", "offset", "event", "unix_millis(timestamp) AS ms")
    return sorted((r.stream, r.segment_id, r.offset, bytes(r.event), r.ms) for r in picked.collect())


class Compare:
    """Each ``where`` read with pushdown, and applied by Spark alone to the rows read once without it."""

    def __init__(self, spark: Any, conf: Any, streams: Streams, options: dict[str, str] | None = None) -> None:
        options = options or {}
        self.spark, self.streams, self.options = spark, streams, options
        conf.set(PUSHDOWN_CONF, "false")
        self.plain = _frame(spark, streams, **options).localCheckpoint()  # read now, without pushdown
        conf.set(PUSHDOWN_CONF, "true")

    def rows(self, where: str) -> list[Row]:
        pushed = _rows(_frame(self.spark, self.streams, **self.options).where(where))
        assert pushed == _rows(self.plain.where(where)), where
        return pushed


def _ts(ms: int) -> str:
    return f"timestamp_millis({ms})"


@pytest.mark.timeout(900)
def test_every_filter_shape_gives_the_same_rows_with_and_without_pushdown(
    spark: Any, conf: Any, streams: Streams, phases: list[tuple[int, int]]
) -> None:
    (_, end0), (start1, end1), (start2, _) = phases
    compare = Compare(spark, conf, streams)
    everything = compare.rows("true")
    assert len(everything) == 900 + 700 + 500
    segments = sorted({r[1] for r in everything})
    assert len(segments) == 4  # two, then one split in two
    some = everything[len(everything) // 3]
    mid = some[2] + 3  # inside an event

    window = compare.rows(f"timestamp >= {_ts(end0)} AND timestamp < {_ts(start2)}")
    assert {r[3].split(b"-")[2] for r in window} == {b"1"} and len(window) == 700
    shapes = [
        f"timestamp > {_ts(start1)} AND timestamp <= {_ts(end1)}",
        f"timestamp = {_ts(some[4])} OR timestamp IN ({_ts(start2)})",
        f"timestamp BETWEEN {_ts(start1)} AND {_ts(end1)} AND segment_id = {segments[-1]}",
        f"segment_id IN ({segments[0]}, {segments[2]}) AND timestamp IS NOT NULL",
        f"segment_id > {segments[1]} AND segment_id != {segments[3]}",
        f"offset >= {mid} AND offset < {mid + 2000}",
        f"offset IN ({some[2]}, {mid}, 0)",
        f"offset <= {mid} AND segment_id = {some[1]} AND timestamp > {_ts(end0)}",
        "stream = 'pd-b' AND offset IS NOT NULL",
        "stream LIKE 'pd-%' AND scope = 'pushdown'",
        f"stream = 'pd-a' OR offset < {mid}",  # an OR: not pushed
        "event = X'00' AND offset IS NOT NULL",
    ]
    counts = {where: len(compare.rows(where)) for where in shapes}
    assert counts["stream = 'pd-b' AND offset IS NOT NULL"] == 0
    assert counts[f"offset IN ({some[2]}, {mid}, 0)"] >= 2  # the event at some[2] and each segment's first


@pytest.mark.timeout(600)
def test_several_streams_are_pruned_by_stream_and_time(
    spark: Any, conf: Any, streams: Streams, phases: list[tuple[int, int]]
) -> None:
    (_, end0), _, (start2, _) = phases
    compare = Compare(spark, conf, streams, {"streams": ",".join(STREAMS)})
    rows = compare.rows("stream IN ('pd-a', 'pd-c')")
    assert {r[0] for r in rows} == {"pd-a", "pd-c"} and len(rows) == 2 * 2100
    window = f"timestamp >= {_ts(end0)} AND timestamp < {_ts(start2)}"
    rows = compare.rows(f"stream != 'pd-b' AND {window}")
    assert len(rows) == 2 * 700
    assert compare.rows("stream LIKE '%-c' AND scope = 'elsewhere'") == []


def _planned(reader: Any, filters: list[Filter]) -> tuple[list[Filter], int]:
    """What pyspark does with a reader: push, then plan; the filters returned and the bytes planned."""
    returned = list(reader.pushFilters(filters))
    parts = reader.partitions()
    ranges = [p for part in parts for p in (part.parts if hasattr(part, "parts") else (part,))]
    return returned, sum(p.end - p.start for p in ranges)


def test_pruning_reads_from_the_window_on_and_returns_the_inexact_filters(
    streams: Streams, phases: list[tuple[int, int]]
) -> None:
    (_, end0), (_, _), (start2, _) = phases
    options = {"controller": streams.controller_uri, "scope": SCOPE}

    def reader(**more: str) -> Any:
        return SegstoreDataSource({**options, "stream": "pd-a", **more}).reader(SCHEMA)

    whole = reader()
    assert isinstance(whole, PushdownBatchReader)
    _, all_bytes = _planned(whole, [])
    lo = GreaterThanOrEqual(("timestamp",), datetime.fromtimestamp(end0 / 1000, UTC))
    hi = LessThan(("timestamp",), datetime.fromtimestamp(start2 / 1000, UTC))
    other = EqualTo(("stream",), "pd-b")
    returned, window_bytes = _planned(reader(), [lo, hi])
    assert returned == [lo, hi]  # pruning only: Spark checks the rows again

    def phase_bytes(stream: str, *phases: tuple[int, int]) -> int:
        return sum(8 + len(f"{stream}-{p}-{i:04d}") + i % 23 for p, n in phases for i in range(n))

    assert window_bytes == phase_bytes("pd-a", (1, 700))  # exactly the window: both bounds narrow
    assert _planned(reader(), [hi])[1] == phase_bytes("pd-a", (0, 900), (1, 700)) < all_bytes
    assert _planned(reader(), [other]) == ([], 0)  # exact: not returned, nothing read
    assert _planned(reader(), [IsNull(("offset",))]) == ([], 0)
    several = SegstoreDataSource({**options, "streams": "pd-a,pd-b"}).reader(SCHEMA)
    assert isinstance(several, PushdownSeveralStreamsReader)
    assert _planned(several, [other, lo, hi])[1] == phase_bytes("pd-b", (1, 700))


def _committed(txn: Any) -> None:
    """Commit ``txn`` and poll until the controller has merged it."""
    txn.commit()
    deadline = time.monotonic() + 60
    while txn.check_status() != TxnState.COMMITTED:
        assert time.monotonic() < deadline, "the transaction was not committed"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def transactions(streams: Streams, standalone: StandaloneProcess) -> int:
    """Stream ``pd-txn``: appends ``a``, transactions ``early`` and ``late`` opened and written, appends ``b``,
    ``early`` committed, appends ``c``; the time Y; appends ``d``, ``late`` committed, appends ``e``; all flushed
    to Tier-2. ``late``'s events were written before Y, committed after it, and lie after ``d``. Returns Y (ms)."""
    streams.create(SCOPE, "pd-txn", segments=1)

    def append(name: str) -> None:
        streams.write(SCOPE, "pd-txn", [(f"{name}-{i:03d}".encode(), "k") for i in range(40)])
        _next_ms(_now_ms())

    append("a")
    with streams.manager.create_txn_writer(SCOPE, "pd-txn") as writer:
        early, late = writer.begin(), writer.begin()
        for name, txn in (("early", early), ("late", late)):
            for i in range(30):
                txn.write_event(f"{name}-{i:03d}".encode(), "k")
            txn.flush()
        _next_ms(_now_ms())
        append("b")
        _committed(early)
        append("c")
        y = _next_ms(_now_ms())
        append("d")
        _committed(late)
        append("e")
    with BlockingClient(standalone.segmentstore_endpoint) as client:
        for container in range(standalone.container_count):
            client.flush_to_storage(container)
    return y


@pytest.mark.timeout(600)
def test_a_transaction_committed_after_a_time_bound_is_after_it_and_times_never_go_back(
    spark: Any, conf: Any, streams: Streams, transactions: int
) -> None:
    y = transactions
    compare = Compare(spark, conf, streams, {"stream": "pd-txn"})
    everything = compare.rows("true")
    assert len(everything) == 5 * 40 + 2 * 30
    by_name = {name: [r for r in everything if r[3].startswith(name.encode())] for name in ("a", "late", "d")}
    late_at, d_at = min(r[2] for r in by_name["late"]), min(r[2] for r in by_name["d"])
    assert late_at > d_at and all(r[4] >= y for r in by_name["late"])  # written before Y, merged after it
    assert len({r[4] for r in by_name["late"]}) == 1  # every event of a transaction: its merge time
    times = [r[4] for r in sorted(everything, key=lambda r: r[2])]
    assert times == sorted(times)  # in offset order, times never go back (one segment)
    before = compare.rows(f"timestamp < {_ts(y)}")
    assert not {r[3] for r in by_name["late"]} & {r[3] for r in before}
    compare.rows(f"timestamp <= {_ts(y)}")
    compare.rows(f"timestamp BETWEEN {_ts(by_name['a'][-1][4])} AND {_ts(y - 1)}")
    assert compare.rows(f"timestamp = {_ts(by_name['late'][0][4])}")
    compare.rows(f"timestamp >= {_ts(y)} AND offset >= {late_at}")


@pytest.fixture(scope="module")
def scaled_transactions(spark: Any, streams: Streams, standalone: StandaloneProcess) -> tuple[list[Row], list[int]]:
    """Stream ``pd-tt`` (two segments, then the first split): phases of appends with a transaction committed
    between them before and after the scale, read back at once (from memory, unless the writer's 10 s flush came
    first), then all flushed to Tier-2. Returns the rows read before the flush and the phase boundaries (ms)."""
    streams.create(SCOPE, "pd-tt", segments=2)
    marks: list[int] = []

    def append(name: str, count: int = 120) -> None:
        streams.write(
            SCOPE, "pd-tt", [(f"{name}-{i:03d}".encode() + b"." * (i % 11), f"k{i % 5}") for i in range(count)]
        )
        marks.append(_next_ms(_now_ms()))

    with streams.manager.create_txn_writer(SCOPE, "pd-tt") as writer:
        append("a")
        first = writer.begin()
        for i in range(60):
            first.write_event(f"t1-{i:03d}".encode(), f"k{i % 5}")
        first.flush()
        append("b")
        _committed(first)
        marks.append(_next_ms(_now_ms()))
        append("c")
        streams.split_first(SCOPE, "pd-tt")
        second = writer.begin()
        for i in range(60):
            second.write_event(f"t2-{i:03d}".encode(), f"k{i % 5}")
        second.flush()
        append("d")
        _committed(second)
        marks.append(_next_ms(_now_ms()))
        append("e")
    before_flush = _rows(_frame(spark, streams, stream="pd-tt"))
    with BlockingClient(standalone.segmentstore_endpoint) as client:
        for container in range(standalone.container_count):
            client.flush_to_storage(container)
    return before_flush, marks


@pytest.mark.timeout(600)
def test_transaction_timestamps_are_the_same_from_memory_tier2_and_history(
    spark: Any, streams: Streams, scaled_transactions: tuple[list[Row], list[int]]
) -> None:
    before_flush, _ = scaled_transactions
    assert len(before_flush) == 5 * 120 + 2 * 60
    assert _rows(_frame(spark, streams, stream="pd-tt")) == before_flush  # Tier-2 (its chunks, read directly)
    with pravega_spark.history(spark, **streams.options(SCOPE, "pd-tt")) as read:
        assert read.files
        assert _rows(read.df) == before_flush  # Spark's own Parquet reader over the chunks
    for name in ("t1", "t2"):
        merged = [r for r in before_flush if r[3].startswith(name.encode())]
        assert merged and all(
            len({r[4] for r in merged if r[1] == s}) == 1 for s in {r[1] for r in merged}
        )  # one merge time per segment
    for segment in {r[1] for r in before_flush}:
        times = [r[4] for r in sorted(r for r in before_flush if r[1] == segment)]
        assert times == sorted(times), segment  # never back in offset order


@pytest.mark.timeout(600)
def test_a_time_window_reads_exactly_its_rows_with_a_transaction_and_a_scale(
    spark: Any, conf: Any, streams: Streams, scaled_transactions: tuple[list[Row], list[int]]
) -> None:
    _, marks = scaled_transactions
    compare = Compare(spark, conf, streams, {"stream": "pd-tt"})
    everything = compare.rows("true")
    options = {"controller": streams.controller_uri, "scope": SCOPE, "stream": "pd-tt"}
    bounds = [min(r[4] for r in everything), marks[0], marks[2], marks[4], max(r[4] for r in everything) + 1]
    windows = [*itertools.pairwise(bounds), (bounds[1], bounds[3])]  # before, around, after each transaction
    for x, y in windows:
        rows = compare.rows(f"timestamp >= {_ts(x)} AND timestamp < {_ts(y)}")
        assert rows == [r for r in everything if x <= r[4] < y]
        assert compare.rows(f"timestamp BETWEEN {_ts(x)} AND {_ts(y)}") == [r for r in everything if x <= r[4] <= y]
        reader = SegstoreDataSource(options).reader(SCHEMA)
        lo = GreaterThanOrEqual(("timestamp",), datetime.fromtimestamp(x / 1000, UTC))
        hi = LessThan(("timestamp",), datetime.fromtimestamp(y / 1000, UTC))
        assert _planned(reader, [lo, hi])[1] == sum(8 + len(r[3]) for r in rows), (x, y)  # 1.0x the window
