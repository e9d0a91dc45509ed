"""A streaming query as a subscriber (option ``subscriber``): on a stream whose retention keeps nothing it has not
to (size retention, min 0 bytes, applied every 0.3 s), the query reads every event written while it runs, in
order, and retention truncates only behind what the query committed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from standalone_process import StandaloneProcess

from controller_client.blocking.streams import BlockingStreamManager
from controller_client.model import RetentionPolicy, ScalingPolicy, StreamConfiguration

pytestmark = [pytest.mark.spark, pytest.mark.slow]
SCOPE, STREAM = "subs", "orders"


@pytest.fixture(scope="module")
def fast_retention(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    flags = ("--retention-period-s", "0.3")
    with StandaloneProcess(tmp_path_factory.mktemp("subscriber") / "data", extra_args=flags) as process:
        yield process


class Collector:
    def __init__(self) -> None:
        self.events: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, batch: Any, batch_id: int) -> None:
        rows = [bytes(r.event) for r in batch.orderBy("offset").collect()]
        with self.lock:
            self.events += rows


def test_retention_never_drops_what_a_subscribed_query_has_not_committed(
    spark: Any, fast_retention: StandaloneProcess, tmp_path: Path
) -> None:
    manager = BlockingStreamManager.connect(fast_retention.controller_uri)
    try:
        manager.create_scope(SCOPE)
        policy = RetentionPolicy.by_size_bytes(0)  # without a subscriber, every round drops everything recorded
        manager.create_stream(SCOPE, STREAM, StreamConfiguration(ScalingPolicy.fixed(1), retention=policy))
        collector = Collector()
        query = (
            spark.readStream.format("segstore")
            .options(controller=fast_retention.controller_uri, scope=SCOPE, stream=STREAM)
            .option("subscriber", "billing")
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.foreachBatch(collector)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )
        expected: list[bytes] = []
        try:
            query.processAllAvailable()  # subscribed: its position is on the stream from now on
            for round_ in range(3):
                events = [b"order-%d-%03d" % (round_, i) for i in range(100)]
                with manager.create_writer(SCOPE, STREAM) as writer:
                    writer.write_events([(e, "k") for e in events]).result(60)
                expected += events
                retention_rounds(3)  # retention runs meanwhile, but the query has not committed these yet
                query.processAllAvailable()
            assert collector.events == expected, "every event, once, in order: nothing was truncated too early"
            head = wait_for_head(manager, lambda offset: offset > 0)
            assert head <= manager.tail_cut(SCOPE, STREAM).positions[0]
        finally:
            query.stop()
        assert manager._run(manager.controller.list_subscribers(SCOPE, STREAM)) == [f"{SCOPE}/billing"]
    finally:
        manager.close()


def retention_rounds(rounds: int) -> None:
    """Let the controller's retention loop (every 0.3 s) run about ``rounds`` times: time is the subject here."""
    time.sleep(0.3 * rounds)


def wait_for_head(manager: BlockingStreamManager, done: Any, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        head = manager.head_cut(SCOPE, STREAM).positions[0]
        if done(head):
            return int(head)
        assert time.monotonic() < deadline, f"retention did not truncate behind the query (head {head})"
        time.sleep(0.1)
