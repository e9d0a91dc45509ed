"""Golden bytes from the official client: its reader groups on ``segstore standalone``, their table segment read
with our segment client, every key and value decoded with ``controller_client.reader_groups.format`` and encoded
back to the same bytes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pravega_client  # the official Pravega client: a test dependency (pyproject), never skipped
import pytest
from official_client import read_with_group
from standalone_process import StandaloneProcess

from controller_client import ControllerClient, StreamManager
from controller_client.reader_groups.format import (
    TYPE_BLOB,
    U64_MAX,
    BoundaryCut,
    ReaderGroupState,
    ScopedSegment,
    ScopedStream,
    StreamCutV1,
    decode_data,
    decode_key,
    decode_value,
    encode_data,
    encode_key,
    encode_value,
    state_from_entries,
    table_segment_name,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCOPE = "rgfmt"
STREAM = "events"
SEGMENTS = {ScopedSegment.of(SCOPE, STREAM, 0), ScopedSegment.of(SCOPE, STREAM, 1)}


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    data_dir: Path = tmp_path_factory.mktemp("standalone")
    with StandaloneProcess(data_dir) as process:
        yield process


@pytest.fixture(scope="module")
def official(standalone: StandaloneProcess) -> pravega_client.StreamManager:
    manager = pravega_client.StreamManager(standalone.controller_uri)
    assert manager.create_scope(SCOPE)
    assert manager.create_stream(SCOPE, STREAM, 2)
    return manager


def table_entries(standalone: StandaloneProcess, group: str) -> list[tuple[bytes, bytes]]:
    """Every entry of ``group``'s table segment, read with our segment client, each checked to re-encode exactly."""

    async def read() -> list[tuple[bytes, bytes]]:
        controller = await ControllerClient.connect(standalone.controller_uri)
        async with controller, StreamManager(controller) as manager:
            name = table_segment_name(SCOPE, group)
            return [(e.key, e.value) async for e in manager.client.iter_table_entries(name)]

    entries = asyncio.run(read())
    for key, raw in entries:
        outer, inner = decode_key(key)
        assert encode_key(outer, inner) == key
        value = decode_value(raw)
        assert encode_value(value) == raw
        assert encode_data(value.type_id, decode_data(value.type_id, value.data)) == value.data
        assert (inner is None) == (value.type_id == TYPE_BLOB)
    return entries


def state(
    standalone: StandaloneProcess, group: str, ready: Callable[[ReaderGroupState], bool] = lambda _: True
) -> ReaderGroupState:
    """The group's state once ``ready`` holds: the official client returns from ``create_reader`` and
    ``reader_offline`` before its table update has landed, so the state is polled (20 s at most)."""
    deadline = time.monotonic() + 20
    while True:
        found = state_from_entries(table_entries(standalone, group))
        if ready(found):
            return found
        assert time.monotonic() < deadline, f"reader group {group}: state never got there: {found}"
        time.sleep(0.1)


def test_one_reader_of_a_two_segment_stream_holds_both_segments(
    standalone: StandaloneProcess, official: pravega_client.StreamManager
) -> None:
    group = official.create_reader_group("one", SCOPE, STREAM)
    first = group.create_reader("reader-1")  # kept: a reader the client drops goes offline by itself
    found = state(standalone, "one", lambda f: "reader-1" in f.assigned_segments)
    assert found.config is not None
    assert found.config.starting_stream_cuts == {ScopedStream(SCOPE, STREAM): BoundaryCut.UNBOUNDED}
    assert found.config.ending_stream_cuts == {}
    assert found.config.group_refresh_time_millis == 3000
    assert found.online_readers == ["reader-1"]
    assert found.assigned_segments["reader-1"] == dict.fromkeys(SEGMENTS, 0)
    assert found.unassigned_segments == {}
    assert found.future_segments == {}
    assert found.distance_to_tail == {"reader-1": U64_MAX}
    keys = {decode_key(key) for key, _ in table_entries(standalone, "one")}
    assert ("config", None) in keys and ("assigned_segments", None) in keys  # the outer maps' version blobs

    second = group.create_reader("reader-2")
    found = state(standalone, "one", lambda f: "reader-2" in f.online_readers)
    assert sorted(found.online_readers) == ["reader-1", "reader-2"]
    assert found.distance_to_tail == {"reader-1": U64_MAX, "reader-2": U64_MAX}
    held = [set(segments) for segments in found.assigned_segments.values()]
    assert set().union(*held) | set(found.unassigned_segments) == SEGMENTS

    group.reader_offline("reader-1")
    group.reader_offline("reader-2")
    del first, second
    found = state(standalone, "one", lambda f: not f.online_readers)
    assert found.online_readers == [] and found.distance_to_tail == {}
    assert found.unassigned_segments == dict.fromkeys(SEGMENTS, 0)
    types = {decode_key(key): decode_value(raw).type_id for key, raw in table_entries(standalone, "one")}
    for reader in ("reader-1", "reader-2"):  # tombstones stay: the client's clear_tombstone never removes them
        assert types[("assigned_segments", reader)] == types[("distance_to_tail", reader)] == "tombstone"


def test_a_reader_gone_offline_leaves_its_read_offsets_unassigned(
    standalone: StandaloneProcess, official: pravega_client.StreamManager
) -> None:
    writer = official.create_writer(SCOPE, STREAM)
    for i in range(10):
        writer.write_event(f"e{i}", f"key-{i}")
    writer.flush()
    events = read_with_group(official, SCOPE, STREAM, "read", 10)  # one reader, offline at the end
    assert sorted(events) == sorted(f"e{i}" for i in range(10))
    found = state(standalone, "read", lambda f: not f.online_readers)
    assert found.online_readers == []
    assert set(found.unassigned_segments) == SEGMENTS
    assert sum(found.unassigned_segments.values()) == 10 * (8 + 2)  # each event: 8-byte header and 2 bytes


def test_groups_from_a_stream_cut_and_from_the_tail_store_their_start(
    standalone: StandaloneProcess, official: pravega_client.StreamManager
) -> None:
    cuts = official.create_reader_group("source", SCOPE, STREAM).get_streamcut()
    from_cut = official.create_reader_group("from-cut", SCOPE, STREAM, False, cuts)
    reader = from_cut.create_reader("r")  # kept: a reader the client drops goes offline
    start = state(standalone, "from-cut", lambda f: "r" in f.assigned_segments)
    assert start.config is not None
    (cut,) = start.config.starting_stream_cuts.values()
    assert isinstance(cut, StreamCutV1)
    assert cut.stream == ScopedStream(SCOPE, STREAM)
    assert set(cut.positions) == SEGMENTS
    assert start.assigned_segments["r"] == dict(cut.positions)

    from_tail = official.create_reader_group("from-tail", SCOPE, STREAM, True)
    tail_reader = from_tail.create_reader("r")
    tail = state(standalone, "from-tail", lambda f: "r" in f.assigned_segments)
    assert tail.config is not None
    assert tail.config.starting_stream_cuts == {ScopedStream(SCOPE, STREAM): BoundaryCut.TAIL}
    assert set(tail.assigned_segments["r"]) == SEGMENTS
    del reader, tail_reader
