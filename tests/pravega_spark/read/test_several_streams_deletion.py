"""A stream deleted while a several-streams query plans its next micro-batch leaves the query's offset cleanly. A
deletion removes the stream's segments, then its records, then the stream, so the driver's look-ups fail in
between (data loss, no such segment, a controller that cannot answer) while the stream still exists: the driver
waits for it to be gone instead of failing the query."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from standalone_process import StandaloneProcess

from controller_client import BlockingStreamManager, ScalingPolicy, StreamConfiguration
from pravega_spark.connection import StreamConnection
from pravega_spark.offsets import head_cut
from pravega_spark.read.planning import LiveCatalog
from pravega_spark.read.several_streams import advance_streams, cuts

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_stream_deleted_while_the_driver_plans_is_dropped_not_failed(tmp_path: Path) -> None:
    with StandaloneProcess(tmp_path / "data") as standalone:
        manager = BlockingStreamManager.connect(standalone.controller_uri)
        connection = StreamConnection(standalone.controller_uri)
        try:
            manager.create_scope("s")
            outcomes: list[str] = []
            for i in range(8):
                key = ("s", f"doomed-{i}")
                manager.create_stream(*key, StreamConfiguration(ScalingPolicy.fixed(4)))
                with manager.create_writer(*key) as writer:
                    writer.write_events([(b"x" * 50, f"k{j}") for j in range(200)]).result(30)
                start = cuts(connection, [key], head_cut)
                manager.seal_stream(*key)
                deleted = threading.Event()

                def delete(stream: tuple[str, str] = key, done: threading.Event = deleted) -> None:
                    manager.delete_stream(*stream)
                    done.set()

                deleter = threading.Thread(target=delete, daemon=True)
                deleter.start()
                while not deleted.is_set():  # plan again and again while the deletion runs
                    end = advance_streams(
                        connection, start, [key], lambda k: LiveCatalog(connection, *k), fail_on_data_loss=True,
                        max_bytes=None,
                    )  # fmt: skip
                    outcomes.append("read" if end.states else "dropped")
                deleter.join(30)
                assert not deleter.is_alive()
                end = advance_streams(
                    connection, start, [key], lambda k: LiveCatalog(connection, *k), fail_on_data_loss=True,
                    max_bytes=None,
                )  # fmt: skip
                assert end.states == {}  # gone: out of the offset
            assert "dropped" in outcomes
        finally:
            connection.close()
            manager.close()
