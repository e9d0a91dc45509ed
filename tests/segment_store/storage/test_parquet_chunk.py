"""Parquet chunk format: exact round trips, the documented schema, and the frame finder."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segment_store.storage.backends.filesystem import FsChunkStorage
from segment_store.storage.format import parquet_chunk
from segment_store.storage.format.parquet_chunk import (
    SCHEMA,
    ChunkFormatError,
    IngestRanges,
    chunk_info,
    decode,
    decode_range,
    encode,
    read_events,
)
from segstore_shared.chunk_format import FILE_SCHEMA, as_reader_schema
from segstore_shared.event_frames import find_frames, walk_frames

pytestmark = pytest.mark.unit

HEADER = struct.Struct(">ii")
MIB = 1 << 20
T0 = 1_700_000_000_000


def frames(payloads: list[bytes]) -> bytes:
    return b"".join(HEADER.pack(0, len(p)) + p for p in payloads)


def text_payloads(count: int, low: int, high: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    words = [b"alpha", b"beta", b"gamma", b'{"k":', b"12345", b"\xc3\xa9t\xc3\xa9", b" "]
    out = []
    for _ in range(count):
        size = rng.randint(low, high)
        chunk = b"".join(rng.choice(words) for _ in range(size // 2 + 1))
        out.append(chunk[:size])
    return out


def assert_exact(encoded: bytes, data: bytes, rng: random.Random, samples: int = 20) -> None:
    assert decode(encoded) == data
    assert decode_range(encoded, 0, len(data)) == data
    for _ in range(samples):
        a = rng.randint(0, len(data))
        b = rng.randint(a, len(data))
        assert decode_range(encoded, a, b - a) == data[a:b]


# -- round trips ----------------------------------------------------------------------------

_tails = st.sampled_from(
    [
        b"",
        b"\x00",
        b"\x00\x00\x00\x00\x00\x00",
        b"\x00\x00\x00\x00\x00\x00\x00\x09abc",
        b"\x00\x00\x00\x01zzzzzzzz",
        b"\x00\x00\x00\x00\xff\xff\xff\xfe" + b"q" * 20,
    ]
)
_payload = st.one_of(
    st.binary(max_size=40),
    st.binary(min_size=100, max_size=400),
    st.integers(0, 30).map(bytes),  # zero-filled payloads (chains of zero runs)
    st.sampled_from([b"x" * 13, b"y" * 12, b""]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.binary(max_size=6000),
    row_group=st.integers(1, 3000),
    raw_row=st.integers(1, 2000),
    seed=st.integers(0, 2**32),
)
def test_encode_with_arbitrary_bytes_round_trips(data: bytes, row_group: int, raw_row: int, seed: int) -> None:
    for framing in ("raw", "events"):
        encoded = encode(data, T0, framing, row_group_bytes=row_group, raw_row_bytes=raw_row)
        assert_exact(encoded, data, random.Random(seed))
    encoded = encode(data, T0, "raw", row_group_bytes=row_group, raw_row_bytes=raw_row)
    table = pq.read_table(pa.BufferReader(encoded))
    assert all(len(e) <= raw_row for e in table.column("event").to_pylist())
    assert not any(table.column("framed").to_pylist())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    payloads=st.lists(_payload, max_size=80),
    tail=_tails,
    row_group=st.integers(1, 5000),
    seed=st.integers(0, 2**32),
)
def test_encode_with_arbitrary_events_round_trips(
    payloads: list[bytes], tail: bytes, row_group: int, seed: int
) -> None:
    data = frames(payloads) + tail
    encoded = encode(data, T0, "events", row_group_bytes=row_group)
    assert_exact(encoded, data, random.Random(seed))
    table = pq.read_table(pa.BufferReader(encoded))
    framed = table.filter(table.column("framed"))
    assert framed.column("event").to_pylist() == payloads
    expected_offsets = np.cumsum([0] + [8 + len(p) for p in payloads])[:-1].tolist()
    assert framed.column("offset").to_pylist() == expected_offsets
    raw = table.filter(pa.compute.invert(table.column("framed")))
    assert b"".join(raw.column("event").to_pylist()) == tail


@settings(max_examples=200, deadline=None)
@given(payloads=st.lists(_payload, max_size=200), tail=_tails, repeat=st.integers(1, 60))
def test_find_frames_with_arbitrary_events_matches_walk(payloads: list[bytes], tail: bytes, repeat: int) -> None:
    data = frames(payloads * repeat) + tail
    found, end = find_frames(data)
    walked, walk_end = walk_frames(data)
    assert end == walk_end
    assert found.tolist() == walked.tolist()


@pytest.mark.parametrize(
    "payloads",
    [
        pytest.param([b"u" * 100] * 40_000, id="uniform-100"),
        pytest.param(text_payloads(40_000, 50, 150), id="text-50..150"),
        pytest.param([bytes(random.Random(i).randint(50, 150)) for i in range(20_000)], id="zeros"),
        pytest.param(text_payloads(30_000, 0, 20), id="tiny-with-empty"),
        pytest.param(
            [random.Random(i).randbytes(random.Random(i).randint(50, 150)) for i in range(20_000)],
            id="random-binary",
        ),
        pytest.param(text_payloads(500, 5_000, 15_000), id="text-10k"),
    ],
)
def test_find_frames_with_large_inputs_matches_walk(payloads: list[bytes]) -> None:
    data = frames(payloads)
    for candidate in (data, data + b"\x00\x00\x00\x00\x00\x00\x10", data[:-1]):
        found, end = find_frames(candidate)
        walked, walk_end = walk_frames(candidate)
        assert end == walk_end
        assert np.array_equal(found, walked)


def test_encode_with_mixed_events_and_partial_tail() -> None:
    payloads = text_payloads(5_000, 50, 150)
    whole = frames(payloads)
    cut = whole + frames([b"partial event payload"])[:-5]
    encoded = encode(cut, T0)
    assert_exact(encoded, cut, random.Random(1))
    table = pq.read_table(pa.BufferReader(encoded))
    assert table.num_rows == 5_001
    assert table.column("framed").to_pylist() == [True] * 5_000 + [False]
    assert table.column("offset")[-1].as_py() == len(whole)
    assert table.column("event")[-1].as_py() == cut[len(whole) :]


def test_encode_with_empty_data() -> None:
    for framing in ("events", "raw"):
        encoded = encode(b"", T0, framing)
        assert decode(encoded) == b""
        assert decode_range(encoded, 0, 0) == b""
        assert chunk_info(encoded).length == 0
        table = pq.read_table(pa.BufferReader(encoded))
        assert table.num_rows == 0 and table.schema == FILE_SCHEMA
        assert read_events(encoded).num_rows == 0


def test_encode_with_large_events_keeps_one_row_per_event() -> None:
    big = [random.Random(1).randbytes(5 * MIB), b"small", random.Random(2).randbytes(3 * MIB + 7)]
    raw_tail = random.Random(3).randbytes(2 * MIB + 5)
    data = frames(big) + b"\x00\x00\x00\x07" + raw_tail  # type 7: not an event, all raw from here
    encoded = encode(data, T0)
    assert_exact(encoded, data, random.Random(4), samples=5)
    table = pq.read_table(pa.BufferReader(encoded))
    assert table.column("event").to_pylist()[:3] == big
    raw_sizes = [
        len(e)
        for e, f in zip(table.column("event").to_pylist(), table.column("framed").to_pylist(), strict=True)
        if not f
    ]
    assert raw_sizes == [MIB, MIB, 9]
    assert chunk_info(encoded).row_groups >= 3


def test_encode_with_buffer_list_and_every_compression() -> None:
    payloads = text_payloads(2_000, 1, 300)
    data = frames(payloads)
    half = len(data) // 2
    for compression in ("none", "snappy", "lz4", "zstd"):
        encoded = encode([memoryview(data)[:half], data[half:]], T0, compression=compression)
        assert_exact(encoded, data, random.Random(5))
        assert encode(data, T0, compression=compression) == encoded  # deterministic


# -- the file as Spark executors read it ------------------------------------------------------


def test_read_table_with_plain_pyarrow_gives_documented_schema() -> None:
    payloads = [b"e1", b"event two", b""]
    data = frames(payloads) + b"\x00\x00"
    encoded = encode(data, IngestRanges.from_pairs([(0, T0), (10, T0 + 5)]))
    table = pq.read_table(pa.BufferReader(encoded))
    assert table.schema.remove_metadata() == FILE_SCHEMA
    assert [f.nullable for f in table.schema] == [False] * 4
    assert as_reader_schema(table).to_pydict() == {
        "offset": [0, 10, 27, 35],
        "event": [b"e1", b"event two", b"", b"\x00\x00"],
        "ingest_time_ms": [T0, T0 + 5, T0 + 5, T0 + 5],
        "framed": [True, True, True, False],
    }
    meta = pq.ParquetFile(pa.BufferReader(encoded)).metadata.metadata
    assert meta[b"segstore.chunk.format_version"] == b"2"
    assert meta[b"segstore.chunk.length"] == str(len(data)).encode()
    assert meta[b"segstore.chunk.framing"] == b"events"
    column = pq.ParquetFile(pa.BufferReader(encoded)).metadata.row_group(0).column(1)
    assert column.compression == "LZ4"  # pyarrow's name for LZ4_RAW


def test_read_events_with_range_columns_and_framed_only() -> None:
    payloads = text_payloads(3_000, 50, 150, seed=9)
    data = frames(payloads) + b"tail!"
    offsets = np.cumsum([0] + [8 + len(p) for p in payloads])[:-1]
    encoded = encode(data, T0, row_group_bytes=16 * 1024)
    start, end = int(offsets[1000]) - 3, int(offsets[2000])
    table = read_events(encoded, ["event", "offset"], start=start, end=end)
    assert table.column_names == ["event", "offset"]
    assert table.column("event").to_pylist() == payloads[1000:2000]
    assert table.schema.field("event").type == pa.binary()
    everything = read_events(encoded)
    assert everything.num_rows == 3_001 and everything.schema == SCHEMA
    assert read_events(encoded, ["offset"], framed_only=True).num_rows == 3_000
    assert read_events(encoded, start=len(data)).num_rows == 0
    with pytest.raises(ValueError, match="unknown columns"):
        read_events(encoded, ["nope"])


def test_decode_with_every_source_kind(tmp_path: Path) -> None:
    data = frames(text_payloads(500, 10, 100))
    encoded = encode(data, T0)
    storage = FsChunkStorage(tmp_path / "t2", durable=False)
    storage.write_chunk("scope/stream/0.#epoch.0.E-1-O-0", encoded)
    location = storage.location("scope/stream/0.#epoch.0.E-1-O-0")
    assert location is not None and location.startswith("file://")
    path = tmp_path / "t2" / "scope" / "stream" / "0.#epoch.0.E-1-O-0"
    sources: list[parquet_chunk.Source] = [
        encoded,
        memoryview(encoded),
        bytearray(encoded),
        pa.py_buffer(encoded),
        str(path),
        path,
        location,
        pa.BufferReader(encoded),
    ]
    for source in sources:
        assert decode_range(source, 5, 1000) == data[5:1005]
    assert read_events(location).num_rows == 500


def test_decode_with_file_without_statistics() -> None:
    data = frames(text_payloads(2_000, 10, 100))
    table = pq.read_table(pa.BufferReader(encode(data, T0)))
    table = table.replace_schema_metadata(
        {
            b"segstore.chunk.format_version": b"1",
            b"segstore.chunk.length": str(len(data)).encode(),
            b"segstore.chunk.framing": b"events",
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, write_statistics=False, row_group_size=300)
    rewritten = sink.getvalue().to_pybytes()
    assert_exact(rewritten, data, random.Random(6))


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("offset", "length"), [(-1, 1), (0, -1), (0, 101), (100, 1)])
def test_decode_range_with_range_outside_chunk_raises(offset: int, length: int) -> None:
    encoded = encode(b"x" * 100, T0, "raw")
    with pytest.raises(ValueError):
        decode_range(encoded, offset, length)


def test_decode_with_foreign_or_corrupt_input_raises() -> None:
    with pytest.raises(ChunkFormatError):
        decode(b"not parquet at all")
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"x": [1]}), sink)
    with pytest.raises(ChunkFormatError, match="metadata"):
        decode(sink.getvalue())
    table = pq.read_table(pa.BufferReader(encode(b"abc", T0)))
    sink = pa.BufferOutputStream()
    newer = {
        b"segstore.chunk.format_version": b"99",
        b"segstore.chunk.length": b"3",
        b"segstore.chunk.framing": b"raw",
    }
    pq.write_table(table.replace_schema_metadata(newer), sink)
    with pytest.raises(ChunkFormatError, match="newer"):
        decode(sink.getvalue())
    lying = {**newer, b"segstore.chunk.format_version": b"1", b"segstore.chunk.length": b"5"}
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata(lying), sink)
    with pytest.raises(ChunkFormatError, match="expected"):
        decode(sink.getvalue())


def test_encode_with_bad_arguments_raises() -> None:
    with pytest.raises(ValueError, match="framing"):
        encode(b"", T0, "json")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="offset 0"):
        IngestRanges.from_pairs([(5, T0)])
    with pytest.raises(ValueError, match="increasing"):
        IngestRanges.from_pairs([(0, T0), (10, T0), (10, T0)])
    with pytest.raises(ValueError):
        IngestRanges(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


def test_encode_with_ingest_times_per_append_range() -> None:
    data = frames([b"a" * 10, b"b" * 10, b"c" * 10])  # events at 0, 18, 36
    ranges = IngestRanges(np.array([0, 18, 40]), np.array([T0, T0 + 1, T0 + 2]))
    for times in (ranges, [(0, T0), (18, T0 + 1), (40, T0 + 2)]):
        table = as_reader_schema(pq.read_table(pa.BufferReader(encode(data, times))))
        assert table.column("ingest_time_ms").to_pylist() == [T0, T0 + 1, T0 + 1]


# -- format versions ----------------------------------------------------------------------------


def as_version_1(encoded: bytes) -> bytes:
    """The chunk as format 1 wrote it: the same rows, ``ingest_time_ms`` a plain INT64, version "1"."""
    pf = pq.ParquetFile(pa.BufferReader(encoded))
    kv = dict(pf.metadata.metadata)
    kv[b"segstore.chunk.format_version"] = b"1"
    return rewrite(as_reader_schema(pf.read()), kv)


def rewrite(table: pa.Table, kv: dict[bytes, bytes]) -> bytes:
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, table.schema, store_schema=False) as writer:
        writer.write_table(table, row_group_size=max(table.num_rows, 1))
        writer.add_key_value_metadata(kv)
    return sink.getvalue().to_pybytes()


def test_encode_writes_format_2_with_timestamp_annotation() -> None:
    encoded = encode(frames([b"x" * 5, b"y"]), IngestRanges.from_pairs([(0, T0), (13, T0 + 7)]))
    pf = pq.ParquetFile(pa.BufferReader(encoded))
    column = pf.schema.column(2)
    assert column.physical_type == "INT64"
    assert column.logical_type.type == "TIMESTAMP"
    annotation = json.loads(column.logical_type.to_json())
    assert (annotation["isAdjustedToUTC"], annotation["timeUnit"]) == (True, "milliseconds")
    assert pf.schema_arrow.field("ingest_time_ms").type == pa.timestamp("ms", tz="UTC")
    assert chunk_info(encoded).version == 2
    stats = pf.metadata.row_group(0).column(2).statistics
    assert (stats.min_raw, stats.max_raw) == (T0, T0 + 7)


def test_read_with_format_1_chunk_gives_the_same_as_format_2() -> None:
    data = frames([b"first", b"second event", b""]) + b"\x01raw"
    v2 = encode(data, IngestRanges.from_pairs([(0, T0), (13, T0 + 3), (33, T0 + 9)]))
    v1 = as_version_1(v2)
    assert pq.ParquetFile(pa.BufferReader(v1)).schema_arrow.field("ingest_time_ms").type == pa.int64()
    assert chunk_info(v1).version == 1 and chunk_info(v2).version == 2
    assert decode(v1) == decode(v2) == data
    assert decode_range(v1, 13, 20) == decode_range(v2, 13, 20) == data[13:33]
    assert read_events(v1).equals(read_events(v2))
    assert read_events(v2).schema == SCHEMA
    for source in (v1, v2):
        assert parquet_chunk.first_ingested_at_or_after(source, T0 + 3) == 13
        assert parquet_chunk.first_ingested_at_or_after(source, T0 + 10) is None
        assert parquet_chunk.ingest_runs(source) == [(0, T0), (13, T0 + 3), (33, T0 + 9)]


def test_chunk_info_with_newer_format_fails() -> None:
    pf = pq.ParquetFile(pa.BufferReader(encode(frames([b"z"]), T0)))
    kv = {**pf.metadata.metadata, b"segstore.chunk.format_version": b"3"}
    with pytest.raises(ChunkFormatError, match="version 3 is newer than 2"):
        chunk_info(rewrite(pf.read(), kv))
