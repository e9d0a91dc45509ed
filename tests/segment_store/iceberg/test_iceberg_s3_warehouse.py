"""A table whose location itself is on S3 (SeaweedFS): a real ``segstore standalone`` with ``--tier2 s3`` and
``--iceberg-catalog`` naming a SQL catalog (configured the pyiceberg way, by ``PYICEBERG_CATALOG__*`` variables)
whose warehouse is ``s3://<bucket>/warehouse``. Table maintenance cleans the bucket as it cleans a local
directory: after snapshot expiry the metadata directory holds exactly the manifests the kept snapshots refer to,
and the trimmed copy of a truncation boundary chunk is deleted once no kept snapshot refers to it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from iceberg_readers import poll, rows_by_position
from seaweedfs_fixtures import SeaweedServer, seaweed_server_fixture  # noqa: F401 (a fixture)
from spark_fixtures import Streams
from standalone_process import StandaloneProcess

from controller_client.model import StreamCut

pytestmark = [pytest.mark.integration, pytest.mark.slow]
BUCKET = "lakehouse"
WAREHOUSE = f"s3://{BUCKET}/warehouse"
SCOPE, STREAM = "lake", "wh"
KEEP_SNAPSHOTS = 10
"""The maintainer's defaults (``IcebergConfig``): the newest 10 snapshots kept at each expiry, every 10 commits."""


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory, seaweed_server: SeaweedServer) -> Iterator[StandaloneProcess]:
    base = tmp_path_factory.mktemp("iceberg-s3-warehouse")
    credentials = seaweed_server.credentials
    tier2 = ("--tier2", "s3", "--s3-endpoint", seaweed_server.endpoint, "--s3-bucket", BUCKET, "--s3-create-bucket",
             "--s3-region", credentials["region"])  # fmt: skip
    tables = ("--iceberg-tables", "lake/*", "--iceberg-catalog", "lakehouse", "--iceberg-commit-interval-ms", "200",
              "--iceberg-flush-max-age-ms", "200")  # fmt: skip
    env = {
        "AWS_ACCESS_KEY_ID": credentials["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": credentials["secret_access_key"],
        "PYICEBERG_CATALOG__LAKEHOUSE__TYPE": "sql",
        "PYICEBERG_CATALOG__LAKEHOUSE__URI": f"sqlite:///{base / 'catalog.db'}",
        "PYICEBERG_CATALOG__LAKEHOUSE__WAREHOUSE": WAREHOUSE,
    }  # the FileIO's endpoint and credentials: the segment store's Tier-2 settings
    with StandaloneProcess(base / "data", extra_args=(*tier2, *tables), env=env) as process:
        yield process


def catalog_db(standalone: StandaloneProcess) -> Path:
    """The catalog's SQLite database (next to the segment store's data directory)."""
    return standalone.data_dir.parent / "catalog.db"


def lakehouse(standalone: StandaloneProcess, server: SeaweedServer) -> Any:
    """The segment store's catalog as a reader opens it (the same SQLite database and S3 warehouse)."""
    from pyiceberg.catalog.sql import SqlCatalog

    credentials = server.credentials
    return SqlCatalog("lakehouse", uri=f"sqlite:///{catalog_db(standalone)}", warehouse=WAREHOUSE,
                      **{"s3.endpoint": server.endpoint, "s3.region": credentials["region"],
                         "s3.access-key-id": credentials["access_key_id"],
                         "s3.secret-access-key": credentials["secret_access_key"]})  # fmt: skip


def table(standalone: StandaloneProcess, server: SeaweedServer) -> Any:
    from pyiceberg.exceptions import NoSuchTableError

    if not catalog_db(standalone).exists():
        return None
    try:
        return lakehouse(standalone, server).load_table((SCOPE, STREAM))
    except NoSuchTableError:
        return None


def keys(server: SeaweedServer, prefix: str) -> set[str]:
    """The object keys directly under ``prefix/`` (boto3: what the bucket really holds)."""
    listed = server.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix.rstrip("/") + "/", Delimiter="/")
    return {item["Key"].rsplit("/", 1)[-1] for item in listed.get("Contents", [])}


def key_of(url: str) -> str:
    assert url.startswith(f"s3://{BUCKET}/"), url
    return url.removeprefix(f"s3://{BUCKET}/")


class Rounds:
    """Writes a few events at a time and waits until the table holds exactly the stream's events: about one commit
    per round (each round's events reach a chunk of their own before the next round starts)."""

    def __init__(self, standalone: StandaloneProcess, streams: Streams, server: SeaweedServer) -> None:
        self.standalone, self.streams, self.server = standalone, streams, server
        self.count = 0

    def write(self, events: int = 4) -> None:
        self.streams.write(SCOPE, STREAM, [(b"r%d-%d" % (self.count, i), "k") for i in range(events)])
        self.count += 1
        self.wait()

    def wait(self) -> None:
        expected = sorted(self.streams.events(SCOPE, STREAM))

        def holds() -> bool:
            found = table(self.standalone, self.server)
            return found is not None and rows_by_position(found.scan().to_arrow()) == expected

        poll(holds, f"the table after round {self.count}")


def inside_a_chunk(loaded: Any) -> int:
    """An offset of segment 0 inside one of the table's chunks (its second event): a truncation there keeps the chunk
    and makes the table hold a trimmed copy of it."""
    offsets: dict[int, list[int]] = {}
    for row in loaded.scan().to_arrow().select(["chunk_start", "chunk_offset"]).to_pylist():
        offsets.setdefault(row["chunk_start"], []).append(row["chunk_start"] + row["chunk_offset"])
    return next(sorted(found)[1] for _, found in sorted(offsets.items()) if len(found) > 1)


def referenced_manifests(loaded: Any) -> set[str]:
    """Names of the manifest lists and manifests the table's kept snapshots refer to."""
    snapshots = loaded.metadata.snapshots
    names = {s.manifest_list.rsplit("/", 1)[-1] for s in snapshots}
    return names | {m.manifest_path.rsplit("/", 1)[-1] for s in snapshots for m in s.manifests(loaded.io)}


def test_table_on_s3_deletes_superseded_manifests_and_expired_trimmed_copies_from_the_bucket(
    standalone: StandaloneProcess, streams: Streams, seaweed_server: SeaweedServer
) -> None:
    streams.create(SCOPE, STREAM, segments=1)
    rounds = Rounds(standalone, streams, seaweed_server)
    for _ in range(3):
        rounds.write()
    loaded = table(standalone, seaweed_server)
    assert loaded.location().startswith(f"{WAREHOUSE}/")  # the table's own files are in the bucket
    streams.manager.truncate(StreamCut(SCOPE, STREAM, {0: inside_a_chunk(loaded)}))
    rounds.wait()
    loaded = table(standalone, seaweed_server)
    copies = [t.file.file_path for t in loaded.scan().plan_files() if "/data/truncated/" in t.file.file_path]
    assert len(copies) == 1 and copies[0].startswith(f"{loaded.location()}/data/truncated/")
    truncated_dir = key_of(copies[0]).rsplit("/", 1)[0]
    copy_name = copies[0].rsplit("/", 1)[-1]
    assert copy_name in keys(seaweed_server, truncated_dir)

    rounds.write()
    streams.manager.truncate(streams.tail(SCOPE, STREAM))  # past the boundary chunk: the copy leaves the table
    rounds.wait()
    files = [t.file.file_path for t in table(standalone, seaweed_server).scan().plan_files()]
    assert not any("/data/truncated/" in path for path in files)
    assert copy_name in keys(seaweed_server, truncated_dir)  # a kept snapshot still refers to it
    more = 0
    while copy_name in keys(seaweed_server, truncated_dir):  # each round a commit; every 10th, an expiry
        assert more < 3 * KEEP_SNAPSHOTS, f"the trimmed copy {copy_name} is still in the bucket after {more} commits"
        rounds.write()
        more += 1

    def manifests_match() -> bool:  # a fresh look each time: a compaction may commit meanwhile
        loaded = table(standalone, seaweed_server)
        metadata_dir = key_of(loaded.metadata_location).rsplit("/", 1)[0]
        in_bucket = {name for name in keys(seaweed_server, metadata_dir) if name.endswith(".avro")}
        return in_bucket == referenced_manifests(loaded)

    poll(manifests_match, "the metadata directory holding exactly the referenced manifests")
    loaded = table(standalone, seaweed_server)
    current = loaded.current_snapshot()
    kept = len(loaded.metadata.snapshots)  # 10 after an expiry, one more per commit until the next
    assert KEEP_SNAPSHOTS <= kept < 2 * KEEP_SNAPSHOTS and kept < current.sequence_number  # older ones expired
    assert rows_by_position(loaded.scan().to_arrow()) == sorted(streams.events(SCOPE, STREAM))
