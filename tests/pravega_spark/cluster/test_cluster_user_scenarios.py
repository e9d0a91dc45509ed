"""The connector's user scenarios on a Spark standalone cluster (a master and two workers, separate JVMs with
clean environments): the executors get the connector from ``spark.submit.pyFiles`` and their Python from
``spark.pyspark.python`` only, never from the driver's environment or files.

Each check reads the stream back with the client library, not with Spark. With TLS and authentication, the trust
store reaches the executors as a file Spark ships (``addFile``, as ``spark.files`` does) and named by its bare name,
and the password never does: the executors work with the driver's delegation token.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from auth_fixtures import write_password_file
from spark_cluster import REPO, SparkCluster, executor_python, package_zip
from spark_fixtures import Streams
from standalone_process import StandaloneProcess
from tls_fixtures import TlsFiles, make_tls_files

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCOPE = "cluster"
DEADLINE_S = 120.0


def _where_executors_run(spark: Any) -> set[tuple[str, str, str]]:
    """(Python, origin of ``pravega_spark``, working directory) of the tasks of a job with one task per core."""

    def where(_: Any) -> list[tuple[str, str, str]]:
        import sys

        import pravega_spark

        return [(sys.executable, pravega_spark.__file__ or "", os.getcwd())]

    return set(spark.sparkContext.parallelize(range(4), 4).mapPartitions(where).collect())


def test_executors_run_the_shipped_connector_with_the_configured_python(
    cluster_spark: Any, cluster: SparkCluster
) -> None:
    found = _where_executors_run(cluster_spark)
    assert {python for python, _, _ in found} == {executor_python()}
    assert all(origin.endswith("segstore.zip/pravega_spark/__init__.py") for _, origin, _ in found), found
    workers = {str(d) for d in cluster.worker_dirs}
    assert {next(w for w in workers if cwd.startswith(w)) for _, _, cwd in found} == workers  # both workers ran tasks


def test_batch_write_then_batch_read_on_the_cluster(cluster_spark: Any, cluster_streams: Streams) -> None:
    options = cluster_streams.options(SCOPE, "batch")
    rows = cluster_spark.range(0, 5_000, numPartitions=4).selectExpr(
        "concat('event-', id) as event", "concat('key-', id % 5) as routing_key"
    )
    rows.write.format("segstore").options(**options, defaultNumSegments="3").mode("append").save()

    written = cluster_streams.events(SCOPE, "batch")
    assert sorted(data for _, _, data in written) == sorted(f"event-{i}".encode() for i in range(5_000))
    read = cluster_spark.read.format("segstore").options(**options).load()
    rows_read = sorted((r.segment_id, r.offset, bytes(r.event)) for r in read.collect())
    assert rows_read == sorted(written)


class _Writer(threading.Thread):
    """Writes ``count`` numbered events in small batches, as a producer next to a running query."""

    def __init__(self, streams: Streams, stream: str, count: int) -> None:
        super().__init__(daemon=True)
        self.streams, self.stream, self.count = streams, stream, count
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.streams.manager.create_writer(SCOPE, self.stream) as writer:
                for start in range(0, self.count, 100):
                    events: list[tuple[bytes, str | None]] = [
                        (f"live-{n:05d}".encode(), f"key-{n % 4}") for n in range(start, start + 100)
                    ]
                    writer.write_events(events).result(60)
        except BaseException as error:
            self.error = error


def test_live_streaming_read_while_a_writer_writes(
    cluster_spark: Any, cluster_streams: Streams, tmp_path: Path
) -> None:
    cluster_streams.create(SCOPE, "live", segments=2)
    seen: list[bytes] = []

    def each_batch(frame: Any, _batch_id: int) -> None:
        seen.extend(bytes(r.event) for r in frame.select("event").collect())

    query = (
        cluster_spark.readStream.format("segstore")
        .options(**cluster_streams.options(SCOPE, "live"), startingOffsets="earliest")
        .load()
        .writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    writer = _Writer(cluster_streams, "live", 3_000)
    try:
        writer.start()
        writer.join(DEADLINE_S)
        assert writer.error is None and not writer.is_alive()
        deadline = time.monotonic() + DEADLINE_S
        while len(seen) < 3_000 and query.exception() is None:
            assert time.monotonic() < deadline, f"{len(seen)} of 3000 events arrived"
            time.sleep(0.2)
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(seen) == [f"live-{n:05d}".encode() for n in range(3_000)]  # each exactly once


def test_exactly_once_streaming_write_across_a_restart(
    cluster_spark: Any, cluster_streams: Streams, tmp_path: Path
) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    cluster_streams.create(SCOPE, "sink", segments=2)

    def add_file(n: int) -> None:
        (source / f"part-{n}.txt").write_text("".join(f"line-{n}-{i}\n" for i in range(200)))

    def run() -> str:
        query = (
            cluster_spark.readStream.format("text")
            .option("maxFilesPerTrigger", 1)
            .load(str(source))
            .withColumnRenamed("value", "event")
            .writeStream.format("segstore")
            .options(**cluster_streams.options(SCOPE, "sink"))
            .option("checkpointLocation", str(checkpoint))
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        return str(query.id)

    for n in range(3):
        add_file(n)
    first = run()
    add_file(3)
    assert run() == first  # restarted from the checkpoint: the same query goes on
    written = sorted(data for _, _, data in cluster_streams.events(SCOPE, "sink"))
    assert written == sorted(f"line-{n}-{i}".encode() for n in range(4) for i in range(200))


USERS = {
    "writer": ("writer-pw", "prn::*,READ_UPDATE"),
    "reader": ("reader-pw", "prn::/,READ;prn::/scope:secure/*,READ"),
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StandaloneProcess, TlsFiles]]:
    """A standalone with TLS (a certificate for ``localhost``) and password authentication."""
    base = tmp_path_factory.mktemp("cluster-secured")
    files = make_tls_files(base / "tls")
    write_password_file(base / "passwd", USERS)
    flags = ("--tls-cert", str(files.cert), "--tls-key", str(files.key), "--auth-password-file", str(base / "passwd"))
    with StandaloneProcess(base / "data", extra_args=flags) as process:
        yield process, files


def test_tls_and_authentication_with_the_trust_store_shipped_by_spark(
    cluster_spark: Any, secured: tuple[StandaloneProcess, TlsFiles], tmp_path: Path
) -> None:
    process, files = secured
    shipped = tmp_path / "segstore-ca.pem"  # a name no host has a file under but the one Spark ships
    shutil.copy(files.ca, shipped)
    cluster_spark.sparkContext.addFile(str(shipped))  # as spark.files / spark-submit --files would
    assert not Path("segstore-ca.pem").exists()

    def options(user: str) -> dict[str, str]:
        return {
            "controller": f"tls://localhost:{process.controller_port}",
            "trustStore": "segstore-ca.pem",
            "scope": "secure",
            "stream": "events",
            "username": user,
            "password": USERS[user][0],
        }

    rows = cluster_spark.range(0, 2_000, numPartitions=4).selectExpr(
        "cast(id as string) as event", "cast(id % 5 as string) as routing_key"
    )
    rows.write.format("segstore").options(**options("writer"), defaultNumSegments="2").mode("append").save()
    read = cluster_spark.read.format("segstore").options(**options("reader")).load()
    assert sorted(int(row.event.decode()) for row in read.select("event").collect()) == list(range(2_000))


def test_the_docs_cluster_example_runs_on_the_cluster(
    cluster_spark: Any,
    cluster: SparkCluster,
    cluster_streams: Streams,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/spark.md, "Running on a Spark cluster": its ```python cluster block, with the names it leaves to the
    reader set to this cluster's (its ``getOrCreate()`` returns the module's session: one driver per process)."""
    text = (REPO / "docs" / "spark.md").read_text()
    (example,) = re.findall(r"^```python cluster\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    names = {
        "master_url": cluster.master_url,
        "executor_python": executor_python(),
        "segstore_zip": str(package_zip(tmp_path / "segstore.zip")),
        "controller": cluster_streams.controller_uri,
    }
    exec(compile(example, "docs/spark.md (cluster example)", "exec"), names)
    assert capsys.readouterr().out.splitlines()[-1] == "1000"
