"""One stream's table brought up to date by :class:`TableSync`, in process: real chunk files (the engine's
encoder) in a filesystem chunk storage, the real SQL catalog on SQLite, real pins. No network, no child process."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from iceberg_chunks import SEGMENT, T0, Chunks

from segment_store.iceberg.config import IcebergConfig
from segment_store.iceberg.file_io import file_io_properties
from segment_store.iceberg.incarnation import PROPERTY, TOLERANCE_MS, PredecessorTableError
from segment_store.iceberg.names import stream_segment
from segment_store.iceberg.stream_table import ChunkFile, file_path, load_or_create, local_path, open_catalog
from segment_store.iceberg.sync import PIN_ID, TableSync
from segment_store.protocol import encode_events
from segment_store.storage.format import parquet_chunk
from segment_store.storage.tier2_config import Tier2Config

pytestmark = pytest.mark.unit


def make_sync(tmp_path: Path, chunks: Chunks, **settings: int) -> TableSync:
    config = IcebergConfig(tables=("lake/*",), data_dir=tmp_path, **settings)
    return TableSync(open_catalog(config), "lake", "clicks", config, lambda cid: chunks.pins if cid == 0 else None)


def events_of(sync: TableSync) -> list[bytes]:
    assert sync.table is not None
    table = (
        sync.table.refresh().scan().to_arrow().sort_by([("chunk_start", "ascending"), ("chunk_offset", "ascending")])
    )
    return table.column("event").to_pylist()


def by_location(*chunks: ChunkFile) -> dict[str, ChunkFile]:
    return {c.location: c for c in chunks}


def test_sync_with_new_chunks_appends_them_once(tmp_path: Path) -> None:
    chunks = Chunks(tmp_path)
    sync = make_sync(tmp_path, chunks)
    first, second = chunks.write([b"a", b"b"]), chunks.write([b"c"])
    result = sync.sync(by_location(first), {0})
    assert (result.added, result.files) == (1, 1)
    again = sync.sync(by_location(first, second), {0})
    assert (again.added, again.removed, again.files) == (1, 0, 2)
    assert sync.sync(by_location(first, second), {0}).added == 0  # nothing new: no commit
    assert events_of(sync) == [b"a", b"b", b"c"]
    assert sync.table is not None and len(sync.table.metadata.snapshots) == 2
    metadata = Path(sync.table.metadata_location.removeprefix("file://"))
    assert (metadata.parent / "version-hint.text").read_text() + ".metadata.json" == metadata.name


def test_a_new_table_has_its_version_hint_before_its_first_commit(tmp_path: Path) -> None:
    """A reader of the table's directory (DuckDB ``iceberg_scan``) that sees the table in the catalog finds its
    hint too: the new, empty table reads as empty, not as "no version-hint could be found" until a first commit."""
    config = IcebergConfig(tables=("lake/*",), data_dir=tmp_path)
    table = load_or_create(open_catalog(config), "lake", "fresh")
    assert table.current_snapshot() is None  # nothing committed yet
    metadata = Path(table.metadata_location.removeprefix("file://"))
    assert (metadata.parent / "version-hint.text").read_text() + ".metadata.json" == metadata.name


def test_version_hint_with_a_space_in_the_data_dir_is_next_to_the_metadata_file(tmp_path: Path) -> None:
    """The warehouse URI spells the space ``%20``; pyiceberg writes the metadata under that path as spelt (a
    directory literally called ``a%20b``), and so must the hint (not under the decoded ``a b``)."""
    data_dir = tmp_path / "a b"
    chunks = Chunks(data_dir)
    sync = make_sync(data_dir, chunks)
    sync.sync(by_location(chunks.write([b"a"])), {0})
    assert sync.table is not None
    metadata = sync.table.metadata_location
    assert "/a%20b/" in metadata
    written = Path(metadata.removeprefix("file://"))  # as spelt: the directory is called a%20b
    assert written.is_file() and (tmp_path / "a%20b").is_dir()
    assert (written.parent / "version-hint.text").read_text() + ".metadata.json" == written.name
    assert local_path(metadata) == str(written) and local_path("s3://bucket/x") is None


def test_sync_with_format_1_chunk_leaves_it_out(tmp_path: Path) -> None:
    chunks = Chunks(tmp_path)
    sync = make_sync(tmp_path, chunks)
    old, new = chunks.write([b"old"], version=1), chunks.write([b"new"])
    result = sync.sync(by_location(old, new), {0})
    assert (result.added, result.skipped) == (1, 1)
    assert events_of(sync) == [b"new"]


def test_sync_with_replaced_chunks_swaps_them_in_one_snapshot_and_pins_until_expiry(tmp_path: Path) -> None:
    chunks = Chunks(tmp_path)
    sync = make_sync(tmp_path, chunks, keep_snapshots=2, expire_every_commits=1)
    a, b = chunks.write([b"1"]), chunks.write([b"2"])
    sync.sync(by_location(a, b), {0})
    chunks.storage.write_chunk("data/c0/merged", parquet_chunk.encode(encode_events([b"1", b"2"]), T0, "events"))
    merged = ChunkFile(
        file_path(chunks.storage.location("data/c0/merged") or ""), SEGMENT, a.coordinates, "data/c0/merged", 0, 0
    )  # fmt: skip  (what compaction makes of a and b)
    swapped = sync.sync(by_location(merged), {0})
    assert (swapped.added, swapped.removed) == (1, 2)
    assert events_of(sync) == [b"1", b"2"]
    assert sync.table is not None and sync.table.current_snapshot().summary.operation.value == "overwrite"
    held = chunks.pins.held()
    assert {a.chunk, b.chunk, "data/c0/merged"} <= held  # the replaced files are in a kept snapshot
    c = chunks.write([b"3"])
    c = ChunkFile(c.location, SEGMENT, c.coordinates, c.chunk, 2 * len(encode_events([b"1"])), 0)
    later = sync.sync(by_location(merged, c), {0})
    assert later.expired >= 1 and len(sync.table.metadata.snapshots) == 2
    assert chunks.pins.held() == {"data/c0/merged", c.chunk}  # no kept snapshot holds a or b any more
    live = chunks.pins.live()
    assert [(p.pin_id, p.segment) for p in live] == [(PIN_ID, SEGMENT)]


def test_sync_with_truncation_inside_a_chunk_holds_a_trimmed_copy_until_the_chunk_leaves(tmp_path: Path) -> None:
    chunks = Chunks(tmp_path)
    sync = make_sync(tmp_path, chunks, keep_snapshots=2, expire_every_commits=1)
    whole = chunks.write([b"a", b"b", b"c", b"d"])
    sync.sync(by_location(whole), {0})
    cut = replace(whole, cut=2 * len(encode_events([b"a"])))  # the segment now starts at "c"
    trimmed = sync.sync(by_location(cut), {0})
    assert (trimmed.added, trimmed.removed, trimmed.files) == (1, 1, 1)
    assert events_of(sync) == [b"c", b"d"]
    assert sync.table is not None
    snapshot = sync.table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None and snapshot.summary.operation.value == "overwrite"
    (path,) = [t.file.file_path for t in sync.table.scan().plan_files()]
    assert path.startswith(sync.table.location() + "/data/truncated/")  # the table's location, not Tier-2
    offsets = sync.table.scan().to_arrow().column("chunk_offset").to_pylist()
    assert sorted(offsets) == [cut.cut, cut.cut + cut.cut // 2]  # offsets still relative to the chunk's start
    assert whole.chunk in chunks.pins.held()  # the copy's source stays pinned (older snapshots hold it)
    assert sync.pending(by_location(cut)) == []
    assert make_sync(tmp_path, chunks).sync(by_location(cut), {0}).added == 0  # a restart finds the copy by name
    copy = Path(path.removeprefix("file://"))
    later = chunks.write([b"e"])
    sync.sync(by_location(later), {0})  # truncated past the chunk: the copy leaves the table
    assert events_of(sync) == [b"e"]
    assert copy.exists()  # a kept snapshot still refers to it
    sync.sync(by_location(later, chunks.write([b"f"])), {0})
    assert events_of(sync) == [b"e", b"f"] and not copy.exists()  # expired: no snapshot refers to it


def test_pending_with_registered_and_skipped_chunks_is_only_the_new_ones(tmp_path: Path) -> None:
    """The lag the maintainer reports (``segment_store.iceberg.status``): chunks neither in the table nor skipped."""
    chunks = Chunks(tmp_path)
    sync = make_sync(tmp_path, chunks)
    assert sync.current is None and sync.file_count == 0
    old, a = chunks.write([b"old"], version=1), chunks.write([b"a"])
    assert sync.pending(by_location(old, a)) == [old, a]  # before the first pass: everything
    sync.sync(by_location(old, a), {0})
    b = chunks.write([b"b"])
    assert sync.pending(by_location(old, a, b)) == [b]
    assert sync.table is not None and sync.file_count == 1
    snapshot = sync.table.current_snapshot()
    assert snapshot is not None and sync.current == (snapshot.snapshot_id, snapshot.timestamp_ms)
    sync.sync(by_location(old, a, b), {0})
    assert sync.pending(by_location(old, a, b)) == [] and sync.file_count == 2


def test_sync_with_segment_not_seen_keeps_its_files(tmp_path: Path) -> None:
    chunks = Chunks(tmp_path)
    sync = make_sync(tmp_path, chunks)
    a = chunks.write([b"x"])
    sync.sync(by_location(a), {0})
    assert sync.sync({}, set()).removed == 0  # its container is not running here: not a deletion
    assert events_of(sync) == [b"x"]


def test_sync_after_restart_reads_what_the_table_holds(tmp_path: Path) -> None:
    chunks = Chunks(tmp_path)
    a, b = chunks.write([b"x"]), chunks.write([b"y"])
    make_sync(tmp_path, chunks).sync(by_location(a), {0})
    restarted = make_sync(tmp_path, chunks)
    result = restarted.sync(by_location(a, b), {0})
    assert (result.added, result.files) == (1, 2)
    assert events_of(restarted) == [b"x", b"y"]


@pytest.mark.parametrize(
    ("tables", "message"),
    [((), "give at least one"), (("lake",), "'lake' is not a scope/stream pattern"), (("a/b/c",), "a/b/c")],
)
def test_config_with_bad_pattern_names_the_flag(tables: tuple[str, ...], message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--iceberg-tables") as raised:
        IcebergConfig(tables=tables, data_dir=tmp_path)
    assert message in str(raised.value)


def test_config_matches_patterns_but_never_internal_streams(tmp_path: Path) -> None:
    config = IcebergConfig(tables=IcebergConfig.parse_tables("lake/*, ops/audit"), data_dir=tmp_path)
    assert config.matches("lake", "clicks") and config.matches("ops", "audit")
    assert not config.matches("ops", "other") and not config.matches("_system", "x")
    assert not IcebergConfig(tables=("*/*",), data_dir=tmp_path).matches("lake", "_markclicks")


def test_stream_segment_parses_stream_segments_only() -> None:
    assert stream_segment("s/t/3.#epoch.2") == stream_segment("s/t/3.#epoch.2")
    where = stream_segment("s/t/3.#epoch.2")
    assert where is not None and (where.scope, where.stream, where.segment_id) == ("s", "t", 2 << 32 | 3)
    for other in ("s/t/3.#epoch.2#transaction.00ff", "s/t/tables/x", "_system/_kvt/1.#epoch.0x", "s/t"):
        assert stream_segment(other) is None


def test_expiry_keeps_the_newest_snapshots_readable_and_deletes_unreferenced_manifests(tmp_path: Path) -> None:
    chunks = Chunks(tmp_path)
    sync = make_sync(tmp_path, chunks, keep_snapshots=3, expire_every_commits=2)
    written = []
    for i in range(9):
        written.append(chunks.write([b"e%d" % i]))
        sync.sync(by_location(*written), {0})
    table = sync.table
    assert table is not None and len(table.metadata.snapshots) in (3, 4)
    metadata_dir = Path(table.metadata_location.removeprefix("file://")).parent
    referenced = {Path(s.manifest_list).name for s in table.metadata.snapshots}
    referenced |= {Path(m.manifest_path).name for s in table.metadata.snapshots for m in s.manifests(table.io)}
    assert {p.name for p in metadata_dir.glob("*.avro")} == referenced
    oldest = min(table.metadata.snapshots, key=lambda s: s.sequence_number or 0)
    assert table.scan(snapshot_id=oldest.snapshot_id).to_arrow().num_rows >= 6  # time travel to a kept snapshot
    assert events_of(sync) == [b"e%d" % i for i in range(9)]


def test_file_path_with_s3_location_is_the_key_as_in_the_bucket() -> None:
    location = "s3://tier2/segstore/data/c0/lake%252Fclicks%252F0.%2523epoch.0/e1-0.parquet?endpoint_override=h%3A1"
    assert file_path(location) == "s3://tier2/segstore/data/c0/lake%2Fclicks%2F0.%23epoch.0/e1-0.parquet"


def test_file_io_properties_with_s3_tier2_are_its_endpoint_and_credentials() -> None:
    tier2 = Tier2Config(backend="s3", s3_bucket="b", s3_endpoint="http://h:1", s3_access_key_id="k",
                        s3_secret_access_key="s")  # fmt: skip
    assert file_io_properties(tier2) == {"s3.endpoint": "http://h:1", "s3.access-key-id": "k",
                                         "s3.secret-access-key": "s"}  # fmt: skip
    assert file_io_properties(Tier2Config()) == {}


def test_sync_of_a_later_incarnation_renames_the_table_aside_and_writes_a_new_one(tmp_path: Path) -> None:
    chunks = Chunks(tmp_path)
    elsewhere = Chunks(tmp_path / "other")  # a second segment store's pins
    sync, other = make_sync(tmp_path, chunks), make_sync(tmp_path, elsewhere)
    old = chunks.write([b"old"])
    sync.sync(by_location(old), {0}, T0)
    other.sync(by_location(old), {0}, T0)
    assert sync.table is not None and sync.table.properties[PROPERTY] == str(T0)
    assert sync.sync(by_location(old), {0}, T0 + TOLERANCE_MS).added == 0  # the same incarnation: nothing changes
    new = chunks.write([b"new"])
    result = sync.sync(by_location(new), {0}, T0 + 60_000)
    assert (result.added, result.removed, result.files) == (1, 0, 1)
    assert events_of(sync) == [b"new"] and sync.table.properties[PROPERTY] == str(T0 + 60_000)
    aside = sync.catalog.load_table(("lake", f"clicks__deleted_{T0}"))
    assert aside.scan().to_arrow().column("event").to_pylist() == [b"old"]
    assert aside.location() != sync.table.location()
    held = {(f"{PIN_ID}-deleted-{T0}", SEGMENT): {old.chunk}, (PIN_ID, SEGMENT): {new.chunk}}
    assert {(p.pin_id, p.segment): p.chunks for p in chunks.pins.live()} == held  # the old table's files stay held
    assert other.sync(by_location(new), {0}, T0 + 60_000).added == 0  # re-reads the table: no second rename
    assert {(p.pin_id, p.segment): p.chunks for p in elsewhere.pins.live()} == held  # its pins moved aside too
    assert sorted(n for _, n in sync.catalog.list_tables("lake")) == ["clicks", f"clicks__deleted_{T0}"]


def test_sync_of_a_table_without_incarnation_records_it_or_sets_it_aside_by_its_events(tmp_path: Path) -> None:
    chunks = Chunks(tmp_path)
    sync = make_sync(tmp_path, chunks)
    first = chunks.write([b"a"])  # ingested at T0
    sync.sync(by_location(first), {0})  # incarnation unknown: not recorded
    assert sync.table is not None and PROPERTY not in sync.table.properties
    sync.sync(by_location(first), {0}, T0 - 10)  # its events are not older than the stream: its table
    assert sync.table.properties[PROPERTY] == str(T0 - 10)
    sync.catalog.load_table(("lake", "clicks")).transaction().remove_properties(PROPERTY).commit_transaction()
    restarted = make_sync(tmp_path, chunks)
    later = chunks.write([b"b"])
    restarted.sync(by_location(later), {0}, T0 + 60_000)  # every event older than the stream: a predecessor's
    assert events_of(restarted) == [b"b"]
    names = [n for _, n in sync.catalog.list_tables("lake") if n.startswith("clicks__deleted_")]
    assert len(names) == 1


def test_sync_of_a_later_incarnation_with_a_catalog_that_cannot_rename_fails_and_writes_nothing(
    tmp_path: Path,
) -> None:
    chunks = Chunks(tmp_path)
    sync = make_sync(tmp_path, chunks)
    old = chunks.write([b"old"])
    sync.sync(by_location(old), {0}, T0)

    def cannot_rename(*_: object) -> None:
        raise NotImplementedError

    sync.catalog.rename_table = cannot_rename  # type: ignore[method-assign]
    new = chunks.write([b"new"])
    for _ in range(2):  # retried: the same error each pass
        with pytest.raises(PredecessorTableError, match="belongs to a deleted stream of the same name: drop or"):
            sync.sync(by_location(new), {0}, T0 + 60_000)
    table = sync.catalog.load_table(("lake", "clicks"))
    assert table.scan().to_arrow().column("event").to_pylist() == [b"old"]
