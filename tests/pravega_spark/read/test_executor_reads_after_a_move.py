"""An executor's reads of a segment go on when its container moves to another segment store: the segment store that
answers ``WrongHost`` is left, the owner looked up again, and the read goes on where it stopped (a micro-batch no
longer fails its task, and in local mode its query, at a failover). Real standalone; the move is the test double of
:mod:`moving_segments` (the old owner refuses for ever, until the connection asks the controller again)."""

from __future__ import annotations

from moving_segments import MovingSegments
from spark_fixtures import Streams

from pravega_spark.connection import StreamConnection
from segment_store.client import ReaderConfig, RetryPolicy

SCOPE, STREAM = "moves", "events"
NAME = f"{SCOPE}/{STREAM}/0.#epoch.0"


def test_reads_and_segment_calls_go_on_after_a_move(streams: Streams) -> None:
    streams.create(SCOPE, STREAM)
    streams.write(SCOPE, STREAM, [(b"event %05d" % i, None) for i in range(3_000)])
    quick = ReaderConfig(read_request_bytes=4096, prefetch_bytes=16_384, retry=RetryPolicy(2, 1, 2))
    connection = StreamConnection(streams.controller_uri, reader=quick)
    try:
        status = connection.segment_status(SCOPE, STREAM, 0)
        assert status is not None
        end = status.write_offset
        unmoved = b"".join(connection.chunks(SCOPE, STREAM, 0, 0, end))
        times = connection.ingest_times(SCOPE, STREAM, 0, 0, end)
        starts = connection.event_starts(SCOPE, STREAM, 0, [0, 100, end // 2])
        assert len(unmoved) == end and times is not None and starts is not None

        calls = ("ingest_times", "locate_offset", "get_segment_info", "list_storage_chunk_locations")
        moving = MovingSegments(connection.manager.client, calls=calls)
        resolver = connection.manager.resolver
        assert resolver is not None
        resolver.invalidate = moving.ends_when_looked_up(resolver.invalidate)  # type: ignore[method-assign]

        read = bytearray()
        for chunk in connection.chunks(SCOPE, STREAM, 0, 0, end):
            read += chunk
            if len(read) >= end // 3 and moving.refused == 0:
                moving.moving = True  # moves in the middle of the read
        assert bytes(read) == unmoved and moving.refused > 0 and not moving.moving

        for ask, expected in (
            (lambda: connection.ingest_times(SCOPE, STREAM, 0, 0, end), times),
            (lambda: connection.event_starts(SCOPE, STREAM, 0, [0, 100, end // 2]), starts),
            (lambda: connection.get_segment_info(NAME).write_offset, end),
            (lambda: connection.list_storage_chunk_locations(NAME, 0, end).start_offset, 0),
        ):
            refused = moving.refused
            moving.moving = True
            assert ask() == expected
            assert moving.refused > refused and not moving.moving
    finally:
        connection.close()
